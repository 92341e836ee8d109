/*
 * bridge_recover.c - what a clean session loses (bridge_int.h; docs/mqtt.md "Several
 * coordinators"): the reports on their way to a coordinator that died, and those sent
 * while no coordinator was connected. The in-flight jobs are sent again (the agent answers
 * a repeat with the job's current status or final report), claimed like the other
 * re-sends, BRIDGE_RESYNC_LIMIT at a time, after the last ident sent in ident order.
 *
 * Worker-only: its state needs no lock.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "store_queues.h"

#define BRIDGE_RECOVER_SPAN_S  30   /* a recovery's passes go on this long while jobs are left */
#define BRIDGE_RECOVER_WAKE_MS 1000 /* ... a second apart: the worker wakes for the next */

struct bridge_recover {
	const struct bridge_link *link;
	struct bridge_send *send;
	bool on; /* a recovery under way */
	char after[UUID_STR_LEN];
	int64_t before; /* jobs sent since the recovery began went on this session */
	int64_t until;  /* passes after the first: not after then (Unix s) */
	int64_t next;   /* the next pass: not before then */
	bool again;     /* a pass after the first one runs: said once */
	/* the next take of the shared subscription follows a clean session that was lost
	 * (this node's last run died, or an earlier connection of this run had it) */
	bool lost_clean;
};

struct bridge_recover *bridge_recover_new(const struct bridge_link *l, struct bridge_send *s,
					  bool node_died)
{
	struct bridge_recover *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->link = l;
	r->send = s;
	r->lost_clean = node_died;
	return r;
}

void bridge_recover_free(struct bridge_recover *r)
{
	free(r);
}

static void bridge_recover_start(struct bridge_recover *r, const char *why)
{
	r->on = true;
	r->after[0] = '\0';
	r->before = (int64_t)time(NULL);
	r->until = r->before + BRIDGE_RECOVER_SPAN_S;
	r->next = 0;
	r->again = false;
	log_info("sending the in-flight jobs again: %s", why);
}

/* The shared subscription is taken on a clean session: when no other coordinator runs,
 * the reports sent while this one was not connected went nowhere; when this node had a
 * clean session before (its last run died, or the connection of this run that had the
 * subscription was lost), the reports on their way to it went with it. */
void bridge_recover_on_take(struct bridge_recover *r)
{
	long long others = 0;
	bool lost = r->lost_clean;

	r->lost_clean = true; /* any later take follows the loss of this session */
	if (lost) {
		bridge_recover_start(r, "the reports on their way to this node's previous"
					" clean session were lost with it");
		return;
	}
	if (r->link->claims &&
	    store_nodes_others(r->link->st, (int64_t)time(NULL), &others) != RCS_OK)
		others = 0;
	if (others == 0)
		bridge_recover_start(r, "no other coordinator took the reports meanwhile");
}

/* Another coordinator's sign of life lapsed (it died), and this one removed its row: the
 * reports on their way to it are asked for again. */
void bridge_recover_lapsed(struct bridge_recover *r, int64_t now, bool shared)
{
	long long n = 0;
	char why[96];

	if (!r->link->claims || !shared)
		return;
	if (store_nodes_lapsed(r->link->st, now, &n) != RCS_OK || n == 0)
		return;
	snprintf(why, sizeof(why), "%lld other coordinator%s stopped showing signs of life", n,
		 n == 1 ? "" : "s");
	bridge_recover_start(r, why);
}

/* After a recovery's last page: in-flight jobs it passed over, locked by another
 * coordinator's transaction at that instant (PostgreSQL's SKIP LOCKED) or claimed by one,
 * get another pass a second later, up to BRIDGE_RECOVER_SPAN_S after the start (then the
 * stale-job sweep is left). Those sent again in a pass are not found again: they were sent
 * after `before`. True when another pass is due. */
static bool bridge_recover_again(struct bridge_recover *r, int64_t now)
{
	long long left = 0;
	bool say;

	if (now >= r->until || store_jobs_inflight_left(r->link->st, r->before, &left) != RCS_OK ||
	    left == 0)
		return false;
	r->next = now + 1;
	say = !r->again;
	r->again = true;
	if (say)
		log_info("%lld in-flight jobs were busy elsewhere (locked or claimed by another"
			 " coordinator): passes go on each second for up to %d s",
			 left, BRIDGE_RECOVER_SPAN_S);
	else
		log_debug("another recovery pass: %lld in-flight jobs left", left);
	return true;
}

/* One page of the recovery; true when more are left to send at once. */
static bool bridge_recover_page(struct bridge_recover *r, int64_t now)
{
	struct store_idents ids;
	bool more = false, at_once = false;

	if (!r->on || now < r->next || !mqttc_connected(r->link->mq))
		return false;
	/* a store error keeps the recovery for a later round (no one else will do it: the
	 * lapsed node's row, the claim on it, is gone) */
	if (store_jobs_inflight(r->link->st, r->after, r->before, now, BRIDGE_RESYNC_LIMIT, &ids) !=
	    RCS_OK) {
		more = true;
	} else {
		more = at_once = ids.n == BRIDGE_RESYNC_LIMIT;
		if (ids.n > 0) {
			log_info("re-sending %zu in-flight jobs", ids.n);
			snprintf(r->after, sizeof(r->after), "%s", ids.v[ids.n - 1]);
			bridge_publish_idents(r->send, &ids, true);
		}
		store_idents_free(&ids);
	}
	if (!more && bridge_recover_again(r, now)) {
		more = true; /* from the first ident again, in a second */
		r->after[0] = '\0';
	}
	r->on = more;
	return at_once;
}

int bridge_recover_step(struct bridge_recover *r, int64_t now)
{
	if (bridge_recover_page(r, now))
		return 0;
	/* a recovery waits for its next pass: no tick comes each second on SQLite */
	return r->on ? BRIDGE_RECOVER_WAKE_MS : -1;
}
