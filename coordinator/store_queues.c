/*
 * store_queues.c - the store's queries for the transport and the scheduler: jobs due,
 * unacknowledged, stale, expired; the claims, the nodes' rows, LISTEN. See store_queues.h;
 * store_int.h for what the store's files share.
 */
#include "store_queues.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_int.h"

/* ---- the transport's and scheduler's queries ---- */

/*
 * Claims the jobs of an inner query of job idents (one text column, bound by (text, now,
 * int64, limit) as ?1 to ?4) for this node until now + lease (docs/architecture.md
 * "Claims"): "UPDATE jobs SET claimed_by, lease_until WHERE ident IN (inner) RETURNING
 * ident", the inner query ending with PostgreSQL's locking clause there, so that two
 * coordinators claiming at once get disjoint rows. The idents come back sorted.
 */
#define CLAIM_JOBS(inner)                                                                          \
	"UPDATE jobs SET claimed_by = ?5, lease_until = ?6 WHERE ident IN (" inner ")"             \
	" RETURNING ident"

static enum rcs_err store_idents_query(struct store *st, const char *sql, const char *p1,
				       int64_t p2, int64_t p3, size_t limit,
				       struct store_idents *out)
{
	struct store_stmt *s = NULL;
	size_t cap = 0;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_stmt(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, p1);
	store_arg_int(s, 2, p2);
	store_arg_int(s, 3, p3);
	store_arg_int(s, 4, limit > INT64_MAX ? INT64_MAX : (long long)limit);
	store_arg_text(s, 5, store_claim_node(st));
	store_arg_int(s, 6, store_claim_until(st, p2));
	/* LIMIT bounds the rows; each is read to the end (the statement is a write) */
	while ((err = store_next(st, s, "job idents", &row)) == RCS_OK && row) {
		if (out->n >= limit)
			continue;
		if (out->n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char(*v)[UUID_STR_LEN];

			if (ncap > limit)
				ncap = limit;
			v = realloc(out->v, ncap * sizeof(*v));
			if (v == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			out->v = v;
			cap = ncap;
		}
		store_val_copy(s, 0, out->v[out->n], sizeof(out->v[out->n]));
		out->n++;
	}
	if (err == RCS_OK && out->n > 1)
		qsort(out->v, out->n, sizeof(*out->v), store_ident_cmp);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_idents_free(out);
	return err;
}

/* The pending jobs that are due for online devices (one device: ?1), claimable. INDEXED BY
 * for one device too: without it SQLite takes jobs_status and reads every pending job of
 * the tenant for each device that comes online (2,000 pending jobs: 2.5 million
 * instructions a device; a fleet back online after a large send read them all once per
 * device), where the partial index holds the device's pending jobs alone. */
#define JOBS_READY_ONE(lock, stage)                                                                \
	"SELECT j.ident FROM jobs j INDEXED BY jobs_pending JOIN devices d ON"                     \
	" d.entity_ident = j.entity_ident AND"                                                     \
	" d.client_root = j.client_root WHERE j.entity_ident = ?1 AND j.status = 'pending'" stage  \
	" AND j.held = 0 AND (j.scheduled_time IS NULL OR j.scheduled_time <= ?2) AND d.online = " \
	"1"                                                                                        \
	" AND ?3 = ?3 AND " STORE_CLAIM_FREE("?5", "?2") " ORDER BY j.ident LIMIT ?4" lock
/* INDEXED BY: without it SQLite walks every job ever made in ident order (the ORDER BY),
 * 80 ms under the store's lock at 300,000 jobs; the partial index holds only the pending
 * ones (store_pg.c drops the hint) */
#define JOBS_READY_ALL(lock, stage)                                                                \
	"SELECT j.ident FROM jobs j INDEXED BY jobs_pending JOIN devices d ON"                     \
	" d.entity_ident = j.entity_ident AND d.client_root = j.client_root"                       \
	" WHERE j.status = 'pending'" stage " AND j.held = 0 AND (j.scheduled_time IS NULL OR"     \
	" j.scheduled_time <= ?2) AND d.online = 1 AND CAST(?1 AS TEXT) IS NULL AND ?3 = ?3"       \
	" AND " STORE_CLAIM_FREE("?5", "?2") " ORDER BY j.ident LIMIT ?4" lock
#define LOCK_J_PG " FOR UPDATE OF j SKIP LOCKED"

/* On PostgreSQL the due jobs are only read: a claim here wrote every row once more (a
 * version its page often had no room for) and a chunk's send locks, moves and claims them
 * in any case, passing over those another coordinator holds or sent (docs/coordinator.md
 * "Sends as sets"). On SQLite, one writer, the claim stays the statement it was. */
enum rcs_err store_jobs_ready(struct store *st, const char *entity_ident, int64_t now, size_t limit,
			      struct store_idents *out)
{
	if (entity_ident)
		return store_idents_query(
		    st,
		    STORE_SQL(st, CLAIM_JOBS(JOBS_READY_ONE("", "")),
			      JOBS_READY_ONE("", JOBS_STAGE_WAITING_PG("j."))),
		    entity_ident, now, 0, limit, out);
	return store_idents_query(st,
				  STORE_SQL(st, CLAIM_JOBS(JOBS_READY_ALL("", "")),
					    JOBS_READY_ALL("", JOBS_STAGE_WAITING_PG("j."))),
				  NULL, now, 0, limit, out);
}

/* INDEXED BY: as for JOBS_READY_ONE, the device's sent jobs rather than the tenant's */
#define JOBS_UNACKED_ONE(lock, stage)                                                              \
	"SELECT j.ident FROM jobs j INDEXED BY jobs_unacked JOIN devices d ON"                     \
	" d.entity_ident = j.entity_ident AND"                                                     \
	" d.client_root = j.client_root WHERE j.entity_ident = ?1 AND j.status = "                 \
	"'transmited'" stage                                                                       \
	" AND d.online = 1 AND coalesce(j.sent_at, 0) < ?3 AND " STORE_CLAIM_FREE(                 \
	    "?5", "?2") " ORDER BY j.ident LIMIT ?4" lock
#define JOBS_UNACKED_ALL(lock, stage)                                                              \
	"SELECT j.ident FROM jobs j INDEXED BY jobs_unacked JOIN devices d ON"                     \
	" d.entity_ident = j.entity_ident AND d.client_root = j.client_root"                       \
	" WHERE j.status = 'transmited'" stage                                                     \
	" AND d.online = 1 AND CAST(?1 AS TEXT) IS NULL AND"                                       \
	" coalesce(j.sent_at, 0) < ?3 AND " STORE_CLAIM_FREE("?5", "?2") " ORDER BY j.ident"       \
									 " LIMIT ?4" lock

enum rcs_err store_jobs_unacked(struct store *st, const char *entity_ident, int64_t before,
				size_t limit, struct store_idents *out)
{
	int64_t now = (int64_t)time(NULL);

	if (entity_ident)
		return store_idents_query(st,
					  STORE_SQL(st, CLAIM_JOBS(JOBS_UNACKED_ONE("", "")),
						    CLAIM_JOBS(JOBS_UNACKED_ONE(
							LOCK_J_PG, JOBS_STAGE_INFLIGHT_PG("j.")))),
					  entity_ident, now, before, limit, out);
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_UNACKED_ALL("", "")),
		      CLAIM_JOBS(JOBS_UNACKED_ALL(LOCK_J_PG, JOBS_STAGE_INFLIGHT_PG("j.")))),
	    NULL, now, before, limit, out);
}

/* The in-flight jobs of online devices due to be sent again (their last send ?3 ms, doubled
 * by each send up to 32 times, before ?2); EXP is 2 to the power of its argument. */
#define JOBS_STALE(EXP, lock, stage)                                                               \
	"SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident = j.entity_ident AND"         \
	" d.client_root = j.client_root WHERE " JOBS_INFLIGHT stage " AND j.update_at <= ?2 - ?3"  \
	" AND"                                                                                     \
	" d.online = 1 AND coalesce(max(j.sent_at, j.update_at), j.update_at) + ?3 * " EXP(        \
	    "min(max(j.sends - 1, 0), 5)") " <= ?2 AND CAST(?1 AS TEXT) IS NULL AND"               \
					   " " STORE_CLAIM_FREE(                                   \
					       "?5", "?2") " ORDER BY j.update_at LIMIT ?4" lock
#define STALE_EXP_SQ(n) "(1 << " n ")"
#define STALE_EXP_PG(n) "(CAST(1 AS int8) << CAST(" n " AS int4))"
/* on PostgreSQL the in-flight jobs sent before ?2 - ?3 (implied by the conditions above: a
 * job's last send is at most its time of last send or move), which jobs_stale finds without
 * reading every job on its way (migration 15) */
#define STALE_STAGE_PG JOBS_STAGE_INFLIGHT_PG("j.") " AND coalesce(j.sent_at, 0) <= ?2 - ?3"

enum rcs_err store_jobs_stale(struct store *st, int64_t now, int64_t after, size_t limit,
			      struct store_idents *out)
{
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_STALE(STALE_EXP_SQ, "", "")),
		      CLAIM_JOBS(JOBS_STALE(STALE_EXP_PG, LOCK_J_PG, STALE_STAGE_PG))),
	    NULL, now, after, limit, out);
}

/* The jobs still transmited to online devices ?3 s after their last send, sent only once
 * so far or re-sent within ?3 s of their move to transmited (the catch-up of a reconnect):
 * the early re-send of an envelope no device acknowledged, once a job (docs/mqtt.md
 * "Delivery guarantees"). INDEXED BY as for JOBS_UNACKED_ALL. */
#define JOBS_UNACKED_LATE(lock, stage)                                                             \
	"SELECT j.ident FROM jobs j INDEXED BY jobs_unacked JOIN devices d ON"                     \
	" d.entity_ident = j.entity_ident AND d.client_root = j.client_root"                       \
	" WHERE j.status = 'transmited'" stage                                                     \
	" AND d.online = 1 AND CAST(?1 AS TEXT) IS NULL AND"                                       \
	" coalesce(j.sent_at, j.update_at) <= ?2 - ?3 AND coalesce(j.sent_at, j.update_at) <"      \
	" j.update_at + ?3 AND " STORE_CLAIM_FREE("?5", "?2") " ORDER BY j.ident LIMIT ?4" lock

enum rcs_err store_jobs_unacked_late(struct store *st, int64_t now, int64_t after, size_t limit,
				     struct store_idents *out)
{
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_UNACKED_LATE("", "")),
		      CLAIM_JOBS(JOBS_UNACKED_LATE(LOCK_J_PG, JOBS_STAGE_INFLIGHT_PG("j.")))),
	    NULL, now, after, limit, out);
}

/* Jobs sent by a coordinator whose claim lapsed before the broker acknowledged the envelope
 * (it stopped or died): another one sends them again. */
#define JOBS_ORPHANED(lock, stage)                                                                 \
	"SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident = j.entity_ident AND"         \
	" d.client_root = j.client_root WHERE j.status = 'transmited'" stage " AND j.claimed_by"   \
	" IS NOT NULL AND j.claimed_by != ?5 AND j.lease_until < ?2 AND d.online = 1 AND"          \
	" CAST(?1 AS TEXT) IS NULL AND ?3 = ?3 ORDER BY j.ident LIMIT ?4" lock

enum rcs_err store_jobs_orphaned(struct store *st, int64_t now, size_t limit,
				 struct store_idents *out)
{
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_ORPHANED("", "")),
		      CLAIM_JOBS(JOBS_ORPHANED(LOCK_J_PG, JOBS_STAGE_INFLIGHT_PG("j.")))),
	    NULL, now, 0, limit, out);
}

/* The in-flight jobs of online devices after ?1 in ident order (recovery of the reports a
 * clean session lost), claimable. */
#define JOBS_INFLIGHT_AFTER(lock, stage)                                                           \
	"SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident = j.entity_ident AND"         \
	" d.client_root = j.client_root WHERE " JOBS_INFLIGHT stage " AND j.ident > ?1 AND"        \
	" d.online = 1 AND coalesce(j.sent_at, 0) < ?3 AND " STORE_CLAIM_FREE(                     \
	    "?5", "?2") " ORDER BY j.ident LIMIT ?4" lock

enum rcs_err store_jobs_inflight(struct store *st, const char *after, int64_t before, int64_t now,
				 size_t limit, struct store_idents *out)
{
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_INFLIGHT_AFTER("", "")),
		      CLAIM_JOBS(JOBS_INFLIGHT_AFTER(LOCK_J_PG, JOBS_STAGE_INFLIGHT_PG("j.")))),
	    after ? after : "", now, before, limit, out);
}

#define JOBS_CLOCK_BACK(stage)                                                                     \
	"UPDATE jobs SET update_at = CASE WHEN update_at > ?1 THEN ?1 ELSE update_at END,"         \
	" sent_at = CASE WHEN sent_at > ?1 THEN ?1 ELSE sent_at END,"                              \
	" reboot_deadline = CASE WHEN reboot_deadline > ?1 + reboot_within"                        \
	" THEN ?1 + reboot_within ELSE reboot_deadline END"                                        \
	" WHERE status IN ('transmited', 'edge_transmitted', 'edge_started',"                      \
	" 'edge_running')" stage " AND (update_at > ?1 OR sent_at > ?1)"

enum rcs_err store_jobs_clock_back(struct store *st, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(
	    st, STORE_SQL(st, JOBS_CLOCK_BACK(""), JOBS_CLOCK_BACK(JOBS_STAGE_INFLIGHT_PG(""))),
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	err = store_done(st, s, "clock back");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

#define JOBS_EXPIRED(lock, stage)                                                                  \
	"SELECT ident FROM jobs WHERE expires_at IS NOT NULL AND"                                  \
	" status IN ('pending', 'transmited')" stage " AND expires_at <= ?2 AND"                   \
	" CAST(?1 AS TEXT) IS NULL AND ?3 = ?3 AND " STORE_CLAIM_FREE(                             \
	    "?5", "?2") " ORDER BY expires_at LIMIT ?4" lock

enum rcs_err store_jobs_expired(struct store *st, int64_t now, size_t limit,
				struct store_idents *out)
{
	return store_idents_query(
	    st,
	    STORE_SQL(st, CLAIM_JOBS(JOBS_EXPIRED("", "")),
		      CLAIM_JOBS(JOBS_EXPIRED(STORE_SKIP_LOCKED_PG, JOBS_STAGE_OPEN_PG("")))),
	    NULL, now, 0, limit, out);
}

#define JOBS_REBOOT_DUE(lock)                                                                      \
	"SELECT ident FROM jobs WHERE reboot_deadline IS NOT NULL AND"                             \
	" status = 'edge_running' AND reboot_deadline <= ?2 AND"                                   \
	" CAST(?1 AS TEXT) IS NULL AND ?3 = ?3 AND " STORE_CLAIM_FREE(                             \
	    "?5", "?2") " ORDER BY reboot_deadline LIMIT ?4" lock

enum rcs_err store_jobs_reboot_due(struct store *st, int64_t now, size_t limit,
				   struct store_idents *out)
{
	return store_idents_query(st,
				  STORE_SQL(st, CLAIM_JOBS(JOBS_REBOOT_DUE("")),
					    CLAIM_JOBS(JOBS_REBOOT_DUE(STORE_SKIP_LOCKED_PG))),
				  NULL, now, 0, limit, out);
}

enum rcs_err store_jobs_reboot_push(struct store *st, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err =
	    store_stmt(st,
		       "UPDATE jobs SET reboot_deadline = ?1 + reboot_within"
		       " WHERE reboot_deadline IS NOT NULL AND reboot_deadline < ?1 + reboot_within"
		       " AND status = 'edge_running'",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	err = store_done(st, s, "reboot deadlines");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_job_mark_sent(struct store *st, const char *ident, int64_t now, bool counted)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err =
	    store_stmt(st, "UPDATE jobs SET sent_at = ?1, sends = sends + ?3 WHERE ident = ?2", &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	store_arg_text(s, 2, ident);
	store_arg_int(s, 3, counted ? 1 : 0);
	err = store_done(st, s, "mark sent");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

#define NEXT_WAKEUP(waiting, open)                                                                 \
	"SELECT min(t) FROM (SELECT min(scheduled_time) AS t FROM jobs"                            \
	" WHERE status = 'pending'" waiting " AND scheduled_time > ?1"                             \
	" UNION ALL SELECT min(release_at) FROM jobs WHERE held = 1 AND"                           \
	" status = 'pending' AND release_at > ?1"                                                  \
	" UNION ALL SELECT min(expires_at) FROM jobs WHERE expires_at IS NOT NULL"                 \
	" AND status IN ('pending', 'transmited')" open                                            \
	" UNION ALL SELECT min(reboot_deadline) FROM jobs WHERE"                                   \
	" reboot_deadline IS NOT NULL AND status = 'edge_running') AS due"

enum rcs_err store_next_wakeup(struct store *st, int64_t now, int64_t *next)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	*next = 0;
	store_lock(st);
	err = store_stmt(st,
			 STORE_SQL(st, NEXT_WAKEUP("", ""),
				   NEXT_WAKEUP(JOBS_STAGE_WAITING_PG(""), JOBS_STAGE_OPEN_PG(""))),
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	err = store_next(st, s, "next wakeup", &row);
	if (err == RCS_OK && row && !store_val_null(s, 0))
		*next = store_val_int(s, 0);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

/* ---- claims (docs/architecture.md "Claims") ---- */

void store_claims_setup(struct store *st, const char *node, int64_t lease)
{
	store_lock(st);
	snprintf(st->claim_node, sizeof(st->claim_node), "%s", node ? node : "");
	st->claim_lease = lease > 0 ? lease : STORE_LEASE_DEFAULT;
	store_unlock(st);
}

const char *store_claim_node(const struct store *st)
{
	return st->claim_node;
}

long long store_claim_until(const struct store *st, int64_t now)
{
	return now + (st->claim_lease > 0 ? st->claim_lease : STORE_LEASE_DEFAULT);
}

bool store_shared(const struct store *st)
{
	return st->be->shared;
}

enum rcs_err store_job_claim(struct store *st, const char *ident, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(st, "UPDATE jobs SET claimed_by = ?1, lease_until = ?2 WHERE ident = ?3",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, store_claim_node(st));
	store_arg_int(s, 2, store_claim_until(st, now));
	store_arg_text(s, 3, ident);
	err = store_done(st, s, "job claim");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

/* The idents as the text of a set for a statement (idents are UUIDs, nothing to quote or
 * escape: any other text names no job and is left out): a JSON array on SQLite, an array
 * (text[]) on PostgreSQL, whose "ident = ANY(...)" finds each row through the jobs' key
 * whatever the planner thinks of the table's size. NULL: no memory. */
static char *store_idents_set(const struct store *st, const char (*v)[UUID_STR_LEN], size_t n)
{
	bool pg = st->dialect == STORE_DIALECT_POSTGRES;
	size_t cap = n * (UUID_STR_LEN + 3) + 3, len = 0;
	char *out = malloc(cap);

	if (out == NULL)
		return NULL;
	out[len++] = pg ? '{' : '[';
	for (size_t i = 0; i < n; i++) {
		if (v[i][0] == '\0' || strspn(v[i], "0123456789abcdefABCDEF-") != strlen(v[i]))
			continue;
		len += (size_t)snprintf(out + len, cap - len, pg ? "%s%s" : "%s\"%s\"",
					len > 1 ? "," : "", v[i]);
	}
	out[len++] = pg ? '}' : ']';
	out[len] = '\0';
	return out;
}

/* "ident" in the set of idents ?N (store_idents_set) */
#define JOBS_SET_SQ(n)      "ident IN (SELECT value FROM json_each(" n "))"
#define JOBS_SET_PG(n)      "ident = ANY(CAST(" n " AS text[]))"
#define JOBS_CLAIM_SET(set) "UPDATE jobs SET claimed_by = ?1, lease_until = ?2 WHERE " set

/* In the caller's transaction: on PostgreSQL, the rows are the ones its send locked. */
enum rcs_err store_jobs_claim(struct store *st, const struct store_idents *ids, int64_t now)
{
	struct store_stmt *s = NULL;
	char *set;
	enum rcs_err err;

	if (ids->n == 0)
		return RCS_OK;
	if ((set = store_idents_set(st, ids->v, ids->n)) == NULL)
		return RCS_ERR_NOMEM;
	store_lock(st);
	err = store_stmt(
	    st, STORE_SQL(st, JOBS_CLAIM_SET(JOBS_SET_SQ("?3")), JOBS_CLAIM_SET(JOBS_SET_PG("?3"))),
	    &s);
	if (err == RCS_OK) {
		store_arg_text(s, 1, store_claim_node(st));
		store_arg_int(s, 2, store_claim_until(st, now));
		store_arg_text(s, 3, set);
		err = store_done(st, s, "jobs claim");
	}
	store_stmt_done(st, s);
	store_unlock(st);
	free(set);
	return err;
}

/* One statement for the whole batch; on PostgreSQL its rows are locked in ident order first,
 * as a batch of reports locks them (docs/coordinator.md "Reports as sets"): the two wait for
 * each other, they do not deadlock. */
#define JOBS_UNCLAIM_SQ                                                                            \
	"UPDATE jobs SET claimed_by = NULL, lease_until = NULL WHERE " JOBS_SET_SQ(                \
	    "?2") " AND claimed_by = ?1"
#define JOBS_UNCLAIM_PG                                                                            \
	"UPDATE jobs SET claimed_by = NULL, lease_until = NULL WHERE ident = ANY(ARRAY(SELECT"     \
	" ident FROM jobs WHERE " JOBS_SET_PG("?2") " AND claimed_by = ?1 ORDER BY ident"          \
						    " FOR UPDATE)) AND claimed_by = ?1"

enum rcs_err store_jobs_unclaim(struct store *st, const struct store_idents *ids)
{
	struct store_stmt *s = NULL;
	char *set;
	enum rcs_err err;

	if (ids->n == 0)
		return RCS_OK;
	if ((set = store_idents_set(st, ids->v, ids->n)) == NULL)
		return RCS_ERR_NOMEM;
	store_lock(st);
	err = store_tx_begin(st);
	if (err != RCS_OK)
		goto out;
	err = store_stmt(st, STORE_SQL(st, JOBS_UNCLAIM_SQ, JOBS_UNCLAIM_PG), &s);
	if (err == RCS_OK) {
		store_arg_text(s, 1, store_claim_node(st));
		store_arg_text(s, 2, set);
		err = store_done(st, s, "jobs unclaim");
	}
	store_stmt_done(st, s);
	if (store_tx_end(st, err == RCS_OK) != RCS_OK && err == RCS_OK)
		err = RCS_ERR_DB;
out:
	store_unlock(st);
	free(set);
	return err;
}

enum rcs_err store_claims_release(struct store *st)
{
	/* lapsed rather than cleared: a job sent and not acknowledged stays this node's,
	 * so another sends it again at once (store_jobs_orphaned) */
	static const char *const sql[] = {
	    "UPDATE jobs SET lease_until = 0 WHERE claimed_by = ?1",
	    "UPDATE groups SET lease_until = 0 WHERE claimed_by = ?1",
	    "UPDATE notifications SET lease_until = 0 WHERE claimed_by = ?1",
	    "UPDATE webhook_deliveries SET lease_until = 0 WHERE claimed_by = ?1",
	};
	enum rcs_err err;

	store_lock(st);
	err = store_tx_begin(st);
	for (size_t i = 0; err == RCS_OK && i < sizeof(sql) / sizeof(sql[0]); i++)
		err = store_write(st, sql[i], NULL, 1, store_claim_node(st));
	/* the others take over at once (the backend's notify: PostgreSQL's NOTIFY) */
	if (err == RCS_OK && st->be->notify)
		err = st->be->notify(st, "released");
	if (store_tx_end(st, err == RCS_OK) != RCS_OK && err == RCS_OK)
		err = RCS_ERR_DB;
	store_unlock(st);
	return err;
}

enum rcs_err store_listen(struct store *st, void (*fn)(void *ctx), void *ctx)
{
	enum rcs_err err = RCS_OK; /* a backend without wake-ups (SQLite): nothing to hear */

	if (st->be->listen) {
		store_lock(st);
		err = st->be->listen(st, fn, ctx);
		store_unlock(st);
	}
	return err;
}

void store_listen_stop(struct store *st)
{
	if (st->be->listen_stop)
		st->be->listen_stop(st);
}

/* ---- the coordinators running on the database ---- */

enum rcs_err store_node_beat(struct store *st, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(st,
			 "INSERT INTO nodes(node_id, started_at, seen_at) VALUES(?1, ?2, ?2)"
			 " ON CONFLICT(node_id) DO UPDATE SET seen_at = excluded.seen_at",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, store_claim_node(st));
	store_arg_int(s, 2, now);
	err = store_done(st, s, "node beat");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

static enum rcs_err node_count_row(struct store_stmt *s, void *arg)
{
	*(long long *)arg = store_val_int(s, 0);
	return RCS_OK;
}

#define NODE_OWNER_MAX 96 /* a node id and its NUL, with room */

/* Where a sign of life lapses: the lease before now, as text for store_get_one. */
static void node_lapse_since(const struct store *st, int64_t now, char since[32])
{
	snprintf(since, 32, "%lld",
		 (long long)(now - (st->claim_lease > 0 ? st->claim_lease : STORE_LEASE_DEFAULT)));
}

enum rcs_err store_nodes_others(struct store *st, int64_t now, long long *n)
{
	char since[32];

	*n = 0;
	node_lapse_since(st, now, since);
	return store_get_one(st,
			     "SELECT count(*) FROM nodes WHERE node_id != ?1 AND"
			     " seen_at >= CAST(?2 AS INTEGER)",
			     store_claim_node(st), since, NULL, node_count_row, n);
}

enum rcs_err store_nodes_lapsed(struct store *st, int64_t now, long long *n)
{
	char since[32];

	*n = 0;
	node_lapse_since(st, now, since);
	/* the row's removal is the claim: of several nodes that see the lapse, one removes it */
	return store_get_one(st,
			     "WITH gone AS (DELETE FROM nodes WHERE node_id != ?1 AND"
			     " seen_at < CAST(?2 AS INTEGER) RETURNING node_id)"
			     " SELECT count(*) FROM gone",
			     store_claim_node(st), since, NULL, node_count_row, n);
}

static enum rcs_err node_text_row(struct store_stmt *s, void *arg)
{
	const char *v = store_val_text(s, 0);

	snprintf(arg, NODE_OWNER_MAX, "%s", v ? v : "");
	return RCS_OK;
}

enum rcs_err store_node_owner(struct store *st, int64_t now, const char *key, bool *mine)
{
	char since[32], owner[NODE_OWNER_MAX];
	enum rcs_err err;

	*mine = true;
	if (!store_shared(st))
		return RCS_OK;
	node_lapse_since(st, now, since);
	/* rendezvous hashing: each key goes to the live node that ranks first for it, and
	 * only the keys of a node that comes or goes move */
	err =
	    store_get_one(st,
			  STORE_SQL(st,
				    "SELECT node_id FROM nodes WHERE seen_at >= CAST(?2 AS INTEGER)"
				    " ORDER BY node_id || ?1 LIMIT 1",
				    "SELECT node_id FROM nodes WHERE seen_at >= CAST(?2 AS BIGINT)"
				    " ORDER BY md5(node_id || ?1) LIMIT 1"),
			  key, since, NULL, node_text_row, owner);
	if (err == RCS_ERR_NOTFOUND)
		return RCS_OK; /* no sign of life of anyone, this node's own included */
	if (err == RCS_OK)
		*mine = strcmp(owner, store_claim_node(st)) == 0;
	return err;
}

#define JOBS_INFLIGHT_LEFT(stage)                                                                  \
	"SELECT count(*) FROM jobs j JOIN devices d ON d.entity_ident ="                           \
	" j.entity_ident AND d.client_root = j.client_root WHERE " JOBS_INFLIGHT stage             \
	" AND d.online = 1 AND coalesce(j.sent_at, 0) < CAST(?1 AS INTEGER)"

enum rcs_err store_jobs_inflight_left(struct store *st, int64_t before, long long *n)
{
	char b[32];

	*n = 0;
	snprintf(b, sizeof(b), "%lld", (long long)before);
	return store_get_one(
	    st,
	    STORE_SQL(st, JOBS_INFLIGHT_LEFT(""), JOBS_INFLIGHT_LEFT(JOBS_STAGE_INFLIGHT_PG("j."))),
	    b, NULL, NULL, node_count_row, n);
}

enum rcs_err store_clock(struct store *st, int64_t *now)
{
	long long n = 0;
	enum rcs_err err;

	err = store_get_one(st,
			    STORE_SQL(st,
				      "SELECT CAST(strftime('%s', 'now') AS INTEGER) WHERE ?1 = ?1",
				      "SELECT CAST(extract(epoch FROM now()) AS BIGINT) WHERE"
				      " CAST(?1 AS TEXT) = ?1"),
			    "", NULL, NULL, node_count_row, &n);
	*now = (int64_t)n;
	return err;
}

enum rcs_err store_node_left(struct store *st, bool *found)
{
	long long n = 0;
	enum rcs_err err;

	err = store_get_one(st, "SELECT count(*) FROM nodes WHERE node_id = ?1",
			    store_claim_node(st), NULL, NULL, node_count_row, &n);
	*found = err == RCS_OK && n > 0;
	return err;
}

enum rcs_err store_node_gone(struct store *st)
{
	return store_write(st, "DELETE FROM nodes WHERE node_id = ?1", NULL, 1,
			   store_claim_node(st));
}
