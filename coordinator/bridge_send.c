/*
 * bridge_send.c - what the MQTT bridge sends to the devices (bridge_int.h): job envelopes,
 * one on the creating request or many from the worker, in chunks of one transaction each;
 * their claims until the broker acknowledges them (on a shared database); the ones the
 * client refused, again; the catch-up with a device (or all) and the re-send of jobs
 * without news; cancels.
 *
 * Threads: the HTTP workers (bridge_publish_job, bridge_send_queue, bridge_send_cancel),
 * paho's (bridge_send_acked) and committing threads (an envelope after its commit) only
 * publish (without the lock) or queue (under it); the worker does the rest.
 */
#include "bridge_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "store_jobs.h"
#include "store_queues.h"

#define BRIDGE_PUBLISH_CHUNK 256  /* envelopes per transaction when sending many */
#define BRIDGE_SWEEP_SECONDS 15   /* re-send sweep period, at most */
#define BRIDGE_ACK_SLOTS     8192 /* envelopes awaiting the broker's ack, by tag (claims) */
#define BRIDGE_UNACKED_PAGE  256  /* early re-sends of unacknowledged envelopes a sweep */
/* queued envelopes a round of the worker sends at most: between rounds it applies the
 * reports received, whatever the size of a bulk send (docs/coordinator.md) */
#define BRIDGE_SEND_ROUND 2048
/* a look at the due jobs that found only jobs of the own queue: the next after this long
 * while that queue still holds jobs (bridge_send_ready) */
#define BRIDGE_LOOK_QUEUED_S 5

struct bridge_send {
	const struct bridge_link *link;
	int64_t resend_after;
	int64_t unacked_after; /* early re-send of an unacknowledged envelope (0: none) */

	pthread_mutex_t lock;       /* the lists and the ack slots */
	struct bridge_idents out;   /* job idents to publish, from out_off on */
	struct bridge_idents retry; /* sent (transmited), refused by the client: again, from
				     * retry_off on */
	size_t out_off, retry_off;

	/* claims (docs/architecture.md "Claims"), on a shared database only: a job's claim
	 * ends when the broker acknowledged its envelope; each envelope is published with a
	 * tag whose slot names the job until then */
	uint64_t next_tag;
	struct bridge_ack {
		uint64_t tag; /* 0: free */
		char ident[UUID_STR_LEN];
	} * acks;
	struct bridge_idents acked; /* job idents the broker acknowledged: their claims end */

	struct bridge_envelopes *env; /* built here */
	/* the worker's, bridge_send_ready: the monotonic ms (bridge_now_ms) before which the look
	 * at all due jobs is not made while the own queue holds jobs */
	int64_t look_after_ms;
};

struct bridge_send *bridge_send_new(const struct bridge_link *l, int64_t resend_after,
				    int64_t unacked_after)
{
	struct bridge_send *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->link = l;
	s->resend_after = resend_after;
	s->unacked_after = unacked_after > 0 ? unacked_after : 0;
	pthread_mutex_init(&s->lock, NULL);
	s->env = bridge_envelopes_new(l);
	if (l->claims)
		s->acks = calloc(BRIDGE_ACK_SLOTS, sizeof(*s->acks));
	if (s->env == NULL || (l->claims && s->acks == NULL)) {
		bridge_send_free(s);
		s = NULL;
	}
	return s;
}

void bridge_send_free(struct bridge_send *s)
{
	if (s == NULL)
		return;
	bridge_envelopes_free(s->env);
	bridge_idents_free(&s->out);
	bridge_idents_free(&s->retry);
	bridge_idents_free(&s->acked);
	free(s->acks);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int64_t bridge_send_sweep_every(const struct bridge_send *s)
{
	int64_t every =
	    s->resend_after / 2 < BRIDGE_SWEEP_SECONDS ? s->resend_after / 2 : BRIDGE_SWEEP_SECONDS;

	/* the early re-send's jobs are seen within half its time */
	if (s->unacked_after > 0 && s->unacked_after / 2 < every)
		every = s->unacked_after / 2;
	return every > 0 ? every : 1;
}

/* Moves the list l whole into *out (under the lock) when it holds any idents and, with
 * connected, while the client is connected. */
static bool bridge_take(struct bridge_send *s, struct bridge_idents *l, bool connected,
			struct bridge_idents *out)
{
	bool took;

	pthread_mutex_lock(&s->lock);
	took = l->ids.n > 0 && (!connected || mqttc_connected(s->link->mq));
	if (took) {
		*out = *l;
		memset(l, 0, sizeof(*l));
	}
	pthread_mutex_unlock(&s->lock);
	return took;
}

/* Moves up to max idents of l (those from *off on) to out, for a round of the worker;
 * false when there are none (or not connected, with connected). */
static bool bridge_take_round(struct bridge_send *s, struct bridge_idents *l, size_t *off,
			      bool connected, size_t max, struct bridge_idents *out)
{
	size_t k;
	bool took;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	k = l->ids.n - *off < max ? l->ids.n - *off : max;
	took = k > 0 && (!connected || mqttc_connected(s->link->mq));
	if (took && *off == 0 && k == l->ids.n) {
		*out = *l; /* all of it: the list itself */
		memset(l, 0, sizeof(*l));
	} else if (took) {
		out->ids.v = malloc(k * sizeof(*out->ids.v));
		took = out->ids.v != NULL;
		if (took) {
			memcpy(out->ids.v, l->ids.v + *off, k * sizeof(*out->ids.v));
			out->ids.n = out->cap = k;
			*off += k;
		}
	}
	if (*off > 0 && *off == l->ids.n)
		l->ids.n = *off = 0; /* all taken: the room is kept for the next */
	pthread_mutex_unlock(&s->lock);
	return took;
}

/* ---- claims, acks and the client's window ---- */

/* The tag of a job's envelope: its slot names the job until the broker's ack (0: no
 * claims to end). */
static uint64_t bridge_tag(struct bridge_send *s, const char *ident)
{
	uint64_t tag;
	struct bridge_ack *a;

	if (!s->link->claims)
		return 0;
	pthread_mutex_lock(&s->lock);
	tag = ++s->next_tag;
	a = &s->acks[tag % BRIDGE_ACK_SLOTS];
	a->tag = tag; /* an older one left in the slot: its claim lapses instead */
	snprintf(a->ident, sizeof(a->ident), "%s", ident);
	pthread_mutex_unlock(&s->lock);
	return tag;
}

/* The worker ends the claim (bridge_unclaim). */
void bridge_send_acked(struct bridge_send *s, uint64_t tag, bool ok)
{
	struct bridge_ack *a;
	bool kick = false;

	if (tag == 0 || s->acks == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	a = &s->acks[tag % BRIDGE_ACK_SLOTS];
	if (a->tag == tag) {
		if (ok) {
			/* out of memory: the claim lapses with its lease */
			bridge_idents_add(&s->acked, a->ident);
			kick = true;
		}
		a->tag = 0;
	}
	pthread_mutex_unlock(&s->lock);
	if (kick)
		bridge_kick(s->link);
}

/* Ends this node's claims on jobs whose envelopes the broker acknowledged. */
void bridge_unclaim(struct bridge_send *s)
{
	struct bridge_idents acked;

	if (!bridge_take(s, &s->acked, false, &acked))
		return;
	if (store_jobs_unclaim(s->link->st, &acked.ids) != RCS_OK)
		log_warnx("claims of %zu sent jobs not ended (they lapse with their lease)",
			  acked.ids.n);
	bridge_idents_free(&acked);
}

/*
 * Publishes a prepared envelope. A failure leaves the job transmited: sent
 * again shortly (client queue full: the retry list) or after the next connect.
 * With wait, through bridge_publish_room; without, a full window is not waited for. One
 * the client refused goes to the retry list (a broker that acknowledged nothing for
 * BRIDGE_FULL_WAIT_MS isn't waited for again).
 */
static enum rcs_err bridge_send_out(struct bridge_send *s, const struct bridge_out *o, bool wait)
{
	uint64_t tag = bridge_tag(s, o->ident);
	enum rcs_err err =
	    wait ? bridge_publish_room(s->link, o->topic, o->payload, o->len, 1, tag)
		 : mqttc_publish(s->link->mq, o->topic, o->payload, o->len, 1, false, tag);

	if (err == RCS_OK)
		metrics_mqtt_out();
	if (err != RCS_OK && err != RCS_ERR_BUSY) {
		pthread_mutex_lock(&s->lock);
		/* out of memory: the stale-job sweep sends it again */
		bridge_idents_add(&s->retry, o->ident);
		pthread_mutex_unlock(&s->lock);
		bridge_kick(s->link); /* from an HTTP thread too: the worker takes it */
	}
	return err;
}

/* An envelope waiting for the commit of the transaction that moved its job. */
struct bridge_deferred {
	struct bridge_send *s;
	struct bridge_out o;
};

static void bridge_send_deferred(void *arg, bool committed)
{
	struct bridge_deferred *d = arg;

	/* rolled back: the job was never sent (or never accepted), and must reach no device */
	if (committed)
		bridge_send_out(d->s, &d->o, true);
	free(d->o.payload);
	free(d);
}

/* ---- one job, many jobs ---- */

/*
 * Publishes a pending job's envelope (see bridge_prepare_job). The move is a savepoint of
 * the caller's transaction when there is one (a job created in it), and the envelope goes
 * out once the outermost transaction commits, never before (store_after_commit).
 */
enum rcs_err bridge_publish_job(struct bridge_send *s, const char *ident)
{
	struct store *st = s->link->st;
	struct bridge_deferred *d = NULL;
	int64_t now = (int64_t)time(NULL);
	bool undo = false; /* any error rolls the transaction back here */
	enum rcs_err err, end;

	if (!mqttc_connected(s->link->mq))
		return RCS_ERR_BUSY; /* stays pending: sent after the next connect */
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return RCS_ERR_NOMEM; /* stays pending, like any job not sent now */
	d->s = s;
	err = store_tx_begin(st);
	if (err != RCS_OK)
		goto out;
	err = bridge_prepare_job(s->env, ident, false, false, now, &undo, &d->o);
	end = store_tx_end(st, err == RCS_OK);
	if (err == RCS_OK)
		err = end;
	if (err != RCS_OK || d->o.payload == NULL)
		goto out; /* rolled back, or not to be sent (moved on, device offline) */
	err = store_after_commit(st, bridge_send_deferred, d);
	if (err == RCS_OK) {
		d = NULL; /* the action's now */
	} else {
		/* transmited and marked sent: the stale-job sweep sends it again */
		log_warnx("job %s: envelope not published now: %s", ident, rcs_strerror(err));
		err = RCS_OK;
	}
out:
	if (d != NULL)
		free(d->o.payload);
	free(d);
	return err;
}

static void bridge_outs_drop(struct bridge_out *outs, size_t k)
{
	for (size_t i = 0; i < k; i++) {
		free(outs[i].payload);
		outs[i].payload = NULL;
	}
}

/* The envelopes of k jobs into outs[] (payload NULL: not to be sent), in the caller's
 * transaction, but those skip[i] marks (skip may be NULL). in_tx: the moves take no savepoint
 * each; returns false when one failed after writing (outs[] then hold nothing): the caller
 * rolls back and calls again with in_tx false, when each move is a savepoint of the
 * transaction. */
static bool bridge_prepare_chunk(struct bridge_send *s, const char (*ids)[UUID_STR_LEN], size_t k,
				 bool resend, int64_t now, bool in_tx, const bool *skip,
				 struct bridge_out *outs)
{
	bool undo = false;

	for (size_t i = 0; i < k && !undo; i++) {
		enum rcs_err err;

		if (skip != NULL && skip[i])
			continue;
		err = bridge_prepare_job(s->env, ids[i], resend, true, now, in_tx ? &undo : NULL,
					 &outs[i]);
		if (err != RCS_OK && !undo)
			log_warnx("job %s: not sent: %s", ids[i], rcs_strerror(err));
	}
	if (undo)
		bridge_outs_drop(outs, k);
	return !undo;
}

/*
 * A chunk of first sends as sets of rows, on a shared database (docs/coordinator.md "Sends
 * as sets"): its jobs and their devices' presence read, and the jobs locked in ident order,
 * in one statement; their moves to transmited, with their claims, and their history items
 * written in one statement each when the chunk ends. A job whose row another transaction
 * holds (another coordinator sending it) is left: still pending, it is that one's to send,
 * or any coordinator's next look at the jobs due. False when that failed: nothing of it
 * was kept (outs[] hold nothing).
 */
static bool bridge_commit_set(struct bridge_send *s, const char (*ids)[UUID_STR_LEN], size_t k,
			      int64_t now, struct bridge_out *outs)
{
	struct store *st = s->link->st;
	const char *v[BRIDGE_PUBLISH_CHUNK];
	bool held[BRIDGE_PUBLISH_CHUNK];
	struct bridge_idents claims;
	bool ok, fold_claims;

	memset(&claims, 0, sizeof(claims));
	for (size_t i = 0; i < k; i++)
		v[i] = ids[i];
	if (store_tx_begin(st) != RCS_OK)
		return false;
	store_fold_begin_sets(st);
	/* the claims written with the rows; else (no fold of sets) in one statement after */
	fold_claims = store_fold_claim_sends(st);
	ok = store_fold_prefetch_sends(st, v, k, held) == RCS_OK;
	bridge_envelopes_claim_into(s->env, &claims);
	ok = ok && bridge_prepare_chunk(s, ids, k, false, now, true, held, outs);
	bridge_envelopes_claim_into(s->env, NULL);
	ok = store_fold_end(st, ok) == RCS_OK && ok;
	ok = ok && (fold_claims || store_jobs_claim(st, &claims.ids, now) == RCS_OK);
	ok = store_tx_end(st, ok) == RCS_OK && ok;
	if (!ok)
		bridge_outs_drop(outs, k);
	bridge_idents_free(&claims);
	return ok;
}

/* One chunk's envelopes, prepared and committed (bridge_publish_idents). False when
 * nothing of it was committed (outs[] then hold nothing). */
static bool bridge_commit_chunk(struct bridge_send *s, const char (*ids)[UUID_STR_LEN], size_t k,
				bool resend, int64_t now, struct bridge_out *outs)
{
	struct store *st = s->link->st;
	bool tx;

	if (!resend && store_shared(st)) {
		if (bridge_commit_set(s, ids, k, now, outs))
			return true;
		log_warnx("a batch of %zu jobs is sent again as one statement per job", k);
	}
	tx = store_tx_begin(st) == RCS_OK;

	if (!bridge_prepare_chunk(s, ids, k, resend, now, tx, NULL, outs)) {
		/* a move failed after writing: the chunk again, each move in a savepoint
		 * of its own, so that the failing one costs only itself */
		log_warnx("a batch of %zu jobs is prepared again job by job", k);
		store_tx_end(st, false);
		tx = store_tx_begin(st) == RCS_OK;
		bridge_prepare_chunk(s, ids, k, resend, now, false, NULL, outs);
	}
	if (tx && store_tx_end(st, true) != RCS_OK) {
		/* nothing of the chunk was committed: its jobs stay pending */
		log_warnx("a batch of %zu jobs could not be stored", k);
		bridge_outs_drop(outs, k);
		return false;
	}
	return true;
}

/*
 * Publishes many jobs (worker thread), BRIDGE_PUBLISH_CHUNK at a time: one
 * transaction moves a chunk to transmited and records it as sent, and its
 * envelopes go out after that commit (re-sends are recorded in a second one; counted, for
 * the doubling of the re-send of jobs without news, unless uncounted).
 */
static void bridge_publish_ids(struct bridge_send *s, const struct store_idents *idents,
			       bool resend, bool uncounted)
{
	struct store *st = s->link->st;
	size_t n = idents->n;
	struct bridge_out *outs = calloc(BRIDGE_PUBLISH_CHUNK, sizeof(*outs));
	bool connected = true, stalled = false;

	if (outs == NULL) {
		log_warnx("cannot send %zu jobs: out of memory", n);
		return;
	}
	for (size_t first = 0; first < n && connected; first += BRIDGE_PUBLISH_CHUNK) {
		size_t k = n - first < BRIDGE_PUBLISH_CHUNK ? n - first : BRIDGE_PUBLISH_CHUNK;
		int64_t now = (int64_t)time(NULL);
		bool tx;

		if (!mqttc_connected(s->link->mq))
			break; /* disconnected: the resync after the next connect catches up */
		if (!bridge_commit_chunk(s, idents->v + first, k, resend, now, outs))
			continue;
		for (size_t i = 0; i < k; i++) {
			if (outs[i].payload == NULL)
				continue;
			enum rcs_err err =
			    connected ? bridge_send_out(s, &outs[i], !stalled) : RCS_ERR_BUSY;

			stalled = stalled || err == RCS_ERR_FULL;
			if (err != RCS_OK) {
				free(outs[i].payload);
				outs[i].payload = NULL;
				/* transmited, not published: the stale-job sweep or the resync
				 * after the next connect sends it again */
				connected = connected && mqttc_connected(s->link->mq);
			}
		}
		/* first sends were marked sent with their move; re-sends count once out */
		tx = resend && store_tx_begin(st) == RCS_OK;
		for (size_t i = 0; i < k; i++) {
			if (outs[i].payload && tx)
				store_job_mark_sent(st, outs[i].ident, now, !uncounted);
			free(outs[i].payload);
			outs[i].payload = NULL;
		}
		if (tx)
			store_tx_end(st, true);
	}
	free(outs);
}

void bridge_publish_idents(struct bridge_send *s, const struct store_idents *idents, bool resend)
{
	bridge_publish_ids(s, idents, resend, false);
}

/* ---- the worker's sends ---- */

/* Leaves out of ids (sorted) the jobs this coordinator's own queue holds (bridge_send_queue):
 * its rounds send them. Without this, a look at the due jobs during a bulk send read and
 * locked most of the send's jobs a second time, to find them sent. True when any was left
 * out. The queue is in ident order as a send made it; else it is sorted in a copy. */
static bool bridge_leave_queued(struct bridge_send *s, struct store_idents *ids)
{
	char(*sorted)[UUID_STR_LEN] = NULL;
	const char(*q)[UUID_STR_LEN];
	size_t m, k = 0;
	bool in_order = true;

	pthread_mutex_lock(&s->lock);
	m = s->out.ids.n - s->out_off;
	q = (const char(*)[UUID_STR_LEN])(s->out.ids.v + s->out_off);
	for (size_t i = 1; i < m && in_order; i++)
		in_order = strcmp(q[i - 1], q[i]) <= 0;
	if (m > 0 && !in_order) {
		sorted = malloc(m * sizeof(*sorted));
		if (sorted != NULL)
			memcpy(sorted, q, m * sizeof(*sorted));
		else
			m = 0; /* none left out: sent twice over is only slower */
		q = (const char(*)[UUID_STR_LEN])sorted;
	}
	if (!in_order)
		pthread_mutex_unlock(&s->lock);
	if (sorted != NULL)
		qsort(sorted, m, sizeof(*sorted), store_ident_cmp);
	for (size_t i = 0; i < ids->n; i++)
		if (m == 0 || bsearch(ids->v[i], q, m, sizeof(*q), store_ident_cmp) == NULL)
			memmove(ids->v[k++], ids->v[i], sizeof(ids->v[i]));
	if (in_order)
		pthread_mutex_unlock(&s->lock);
	free(sorted);
	m = ids->n - k;
	ids->n = k;
	return m > 0;
}

static bool bridge_queue_holds(struct bridge_send *s)
{
	bool holds;

	pthread_mutex_lock(&s->lock);
	holds = s->out.ids.n > s->out_off;
	pthread_mutex_unlock(&s->lock);
	return holds;
}

/* Publishes the pending jobs that are due, for one device (or all online devices), but
 * those its own queue holds. While that queue still sends what the last look at all devices
 * found, and that look found nothing else, the next waits BRIDGE_LOOK_QUEUED_S: with
 * 100,000 jobs due, each look sorts every pending job (BENCHMARKS.md section 25). */
void bridge_send_ready(struct bridge_send *s, const char *entity_ident, int64_t now)
{
	struct store *st = s->link->st;
	struct store_idents ids;
	size_t n;
	bool left = false, look = true, only_queued = false;

	if (entity_ident == NULL)
		look = bridge_now_ms() >= s->look_after_ms || !bridge_queue_holds(s);
	do {
		if (!look)
			break;
		if (store_jobs_ready(st, entity_ident, now, BRIDGE_RESYNC_LIMIT, &ids) != RCS_OK)
			return;
		n = ids.n;
		/* left in the queue, they would come back first: the next look goes on */
		left = bridge_leave_queued(s, &ids);
		only_queued = left && ids.n == 0;
		bridge_publish_idents(s, &ids, false);
		store_idents_free(&ids);
	} while (n == BRIDGE_RESYNC_LIMIT && !left && mqttc_connected(s->link->mq));
	if (entity_ident == NULL && look)
		s->look_after_ms = only_queued ? bridge_now_ms() + BRIDGE_LOOK_QUEUED_S * 1000 : 0;
	/* the envelopes of a coordinator that stopped before the broker took them */
	if (entity_ident == NULL && s->link->claims &&
	    store_jobs_orphaned(st, now, BRIDGE_RESYNC_LIMIT, &ids) == RCS_OK) {
		if (ids.n > 0)
			log_info("sending %zu jobs again whose sender's claim lapsed", ids.n);
		bridge_publish_idents(s, &ids, true);
		store_idents_free(&ids);
	}
}

/*
 * Catches up with a device (or all devices): re-publishes the jobs sent but
 * not acknowledged (the device dedupes), then sends the pending ones that are
 * due. The unacknowledged are listed first, so a job sent now isn't sent twice.
 */
void bridge_catch_up(struct bridge_send *s, const char *entity_ident, int64_t now)
{
	struct store_idents ids;

	/* those sent before this second: one sent since went on the connection there is (the
	 * scheduler's, right after a connect), and is not sent twice */
	if (store_jobs_unacked(s->link->st, entity_ident, now, BRIDGE_RESYNC_LIMIT * 4, &ids) ==
	    RCS_OK) {
		if (ids.n > 0) {
			log_info("re-sending %zu unacknowledged jobs%s%s", ids.n,
				 entity_ident ? " of " : "", entity_ident ? entity_ident : "");
			bridge_publish_idents(s, &ids, true);
		}
		store_idents_free(&ids);
	}
	bridge_send_ready(s, entity_ident, now);
}

/* Re-publishes jobs a device went quiet on (reports may have been dropped by the broker).
 * Not while reports received wait to be applied: their news is among them, and sending
 * again what a loaded coordinator has not caught up with yet only adds to its load
 * (docs/mqtt.md "Delivery guarantees"). */
void bridge_resend_stale(struct bridge_send *s, int64_t now, size_t reports_waiting)
{
	struct store_idents ids;

	if (reports_waiting > 0)
		return;
	if (store_jobs_stale(s->link->st, now, s->resend_after, BRIDGE_RESYNC_LIMIT, &ids) !=
	    RCS_OK)
		return;
	if (ids.n > 0)
		log_info("re-sending %zu jobs without news for %llds or more", ids.n,
			 (long long)s->resend_after);
	bridge_publish_idents(s, &ids, true);
	store_idents_free(&ids);
}

/*
 * Re-publishes, once, the envelopes still transmited to online devices unacked_after seconds
 * after their send (docs/mqtt.md "Delivery guarantees"): a broker cluster acknowledges an
 * envelope once it stored it, and its delivery to the device's session can still be lost
 * (docs/scale-out.md, "The broker cluster: NATS"). Not while reports received wait to be
 * applied (the acknowledgements may be among them); BRIDGE_UNACKED_PAGE a sweep.
 */
void bridge_resend_unacked(struct bridge_send *s, int64_t now, size_t reports_waiting)
{
	struct store_idents ids;

	if (s->unacked_after <= 0 || reports_waiting > 0)
		return;
	if (store_jobs_unacked_late(s->link->st, now, s->unacked_after, BRIDGE_UNACKED_PAGE,
				    &ids) != RCS_OK)
		return;
	if (ids.n > 0) {
		log_info("re-sending %zu jobs not acknowledged %llds after their send", ids.n,
			 (long long)s->unacked_after);
		metrics_resent_unacked(ids.n);
	}
	/* not counted: the re-send of jobs without news still comes resend_after after it */
	bridge_publish_ids(s, &ids, true, true);
	store_idents_free(&ids);
}

/* A bulk send's jobs, for the worker (off the calling thread). */
void bridge_send_queue(struct bridge_send *s, const struct job_new *jobs, size_t n)
{
	size_t lost = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++)
		if (!bridge_idents_add(&s->out, jobs[i].ident))
			lost++;
	pthread_mutex_unlock(&s->lock);
	if (lost > 0)
		log_warnx("%zu jobs not sent now: out of memory (they stay pending)", lost);
	bridge_kick(s->link);
}

void bridge_send_queued(struct bridge_send *s)
{
	struct bridge_idents out;

	if (!bridge_take_round(s, &s->out, &s->out_off, false, BRIDGE_SEND_ROUND, &out))
		return;
	bridge_publish_idents(s, &out.ids, false);
	bridge_idents_free(&out);
}

/* Envelopes the client refused (its queue was full): again, after a pause. */
void bridge_send_retry(struct bridge_send *s)
{
	struct timespec pause = {0, 100 * 1000000L};
	struct bridge_idents retry;

	if (!bridge_take_round(s, &s->retry, &s->retry_off, true, BRIDGE_SEND_ROUND, &retry))
		return;
	nanosleep(&pause, NULL);
	log_info("sending %zu envelopes again (the MQTT client's queue was full)", retry.ids.n);
	bridge_publish_idents(s, &retry.ids, true);
	bridge_idents_free(&retry);
}

size_t bridge_send_waiting(struct bridge_send *s)
{
	size_t n;

	pthread_mutex_lock(&s->lock);
	n = s->out.ids.n - s->out_off + s->acked.ids.n +
	    (mqttc_connected(s->link->mq) ? s->retry.ids.n - s->retry_off : 0);
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* ---- cancels ---- */

void bridge_send_cancel(struct bridge_send *s, const struct job_rec *job)
{
	struct proto_cancel c;
	char topic[PROTO_MAX_TOPIC];
	json_object *o;
	const char *payload;
	size_t len;

	memset(&c, 0, sizeof(c));
	snprintf(c.job, sizeof(c.job), "%s", job->ident);
	c.reason = "cancelled through the API";
	o = proto_cancel_encode(&c);
	payload = jsonu_dump(o, &len);
	proto_topic_make(topic, PROTO_CANCEL, job->client_root, job->entity_ident, c.job);
	if (mqttc_publish(s->link->mq, topic, payload, len, 1, false, 0) == RCS_OK)
		metrics_mqtt_out();
	else
		log_warnx("job %s: cancel not sent (broker unreachable); the device will be told"
			  " when it reports on the job",
			  c.job);
	json_object_put(o);
}
