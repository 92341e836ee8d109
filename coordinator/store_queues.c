/*
 * store_queues.c - the store's the transport's and scheduler's queries: jobs due, unacknowledged,
 * stale, expired. See store.h; store_int.h for what the store's files share.
 */
#include "store_int.h"

#include <stdio.h>

/* ---- the transport's and scheduler's queries ---- */

int64_t store_job_expiry(int64_t created_at, int64_t scheduled_time, int64_t ttl)
{
	int64_t from = scheduled_time > created_at ? scheduled_time : created_at;

	if (ttl <= 0)
		return 0;
	/* scheduled_time may be up to INT64_MAX - 1: saturate (in the protocol's range,
	 * which ends at INT64_MAX - 1) rather than overflow */
	return from > INT64_MAX - 1 - ttl ? INT64_MAX - 1 : from + ttl;
}

/* Runs a query returning one text column, bound by (text, int64, int64) params. */
static enum rcs_err store_idents(struct store *st, const char *sql, const char *p1, int64_t p2,
				 int64_t p3, size_t limit, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, p1);
	sqlite3_bind_int64(s, 2, p2);
	sqlite3_bind_int64(s, 3, p3);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)limit);
	err = store_rows(st, s, store_row_first_str, limit, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_jobs_ready(struct store *st, const char *entity_ident, int64_t now, size_t limit,
			      json_object **out)
{
	if (entity_ident)
		return store_idents(st,
				    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
				    " j.entity_ident AND d.client_root = j.client_root"
				    " WHERE j.entity_ident = ?1 AND j.status = 'pending' AND"
				    " (j.scheduled_time IS NULL OR j.scheduled_time <= ?2) AND"
				    " d.online = 1 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
				    entity_ident, now, 0, limit, out);
	/* INDEXED BY: without it SQLite walks every job ever made in ident order (the
	 * ORDER BY), 80 ms under the store's lock at 300,000 jobs; the partial index
	 * holds only the pending ones */
	return store_idents(st,
			    "SELECT j.ident FROM jobs j INDEXED BY jobs_pending JOIN devices d ON"
			    " d.entity_ident = j.entity_ident AND d.client_root = j.client_root"
			    " WHERE j.status = 'pending' AND (j.scheduled_time IS NULL OR"
			    " j.scheduled_time <= ?2) AND d.online = 1 AND ?1 IS NULL AND ?3 = ?3"
			    " ORDER BY j.ident LIMIT ?4",
			    NULL, now, 0, limit, out);
}

enum rcs_err store_jobs_unacked(struct store *st, const char *entity_ident, size_t limit,
				json_object **out)
{
	if (entity_ident)
		return store_idents(
		    st,
		    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
		    " j.entity_ident AND d.client_root = j.client_root"
		    " WHERE j.entity_ident = ?1 AND j.status = 'transmited' AND"
		    " d.online = 1 AND ?2 = ?2 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
		    entity_ident, 0, 0, limit, out);
	return store_idents(st,
			    "SELECT j.ident FROM jobs j INDEXED BY jobs_unacked JOIN devices d ON"
			    " d.entity_ident = j.entity_ident AND d.client_root = j.client_root"
			    " WHERE j.status = 'transmited' AND d.online = 1 AND ?1 IS NULL AND"
			    " ?2 = ?2 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
			    NULL, 0, 0, limit, out);
}

enum rcs_err store_jobs_stale(struct store *st, int64_t now, int64_t after, size_t limit,
			      json_object **out)
{
	return store_idents(st,
			    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
			    " j.entity_ident AND d.client_root = j.client_root"
			    " WHERE " JOBS_INFLIGHT
			    " AND j.update_at <= ?2 - ?3 AND d.online = 1 AND"
			    " coalesce(max(j.sent_at, j.update_at), j.update_at) +"
			    " ?3 * (1 << min(max(j.sends - 1, 0), 5)) <= ?2 AND ?1 IS NULL"
			    " ORDER BY j.update_at LIMIT ?4",
			    NULL, now, after, limit, out);
}

enum rcs_err store_jobs_clock_back(struct store *st, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(st,
			   "UPDATE jobs SET update_at = min(update_at, CAST(?1 AS INTEGER)),"
			   " sent_at = min(sent_at, CAST(?1 AS INTEGER))"
			   " WHERE status IN ('transmited', 'edge_transmitted', 'edge_started',"
			   " 'edge_running') AND (update_at > CAST(?1 AS INTEGER) OR"
			   " sent_at > CAST(?1 AS INTEGER))",
			   NULL, 1, ts);
}

enum rcs_err store_jobs_expired(struct store *st, int64_t now, size_t limit, json_object **out)
{
	return store_idents(st,
			    "SELECT ident FROM jobs WHERE expires_at IS NOT NULL AND"
			    " status IN ('pending', 'transmited') AND expires_at <= ?2 AND"
			    " ?1 IS NULL AND ?3 = ?3 ORDER BY expires_at LIMIT ?4",
			    NULL, now, 0, limit, out);
}

enum rcs_err store_job_mark_sent(struct store *st, const char *ident, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(st, "UPDATE jobs SET sent_at = ?, sends = sends + 1 WHERE ident = ?",
			   NULL, 2, ts, ident);
}

enum rcs_err store_next_wakeup(struct store *st, int64_t now, int64_t *next)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*next = 0;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT min(t) FROM (SELECT min(scheduled_time) AS t FROM jobs"
			  " WHERE status = 'pending' AND scheduled_time > ?1"
			  " UNION ALL SELECT min(expires_at) FROM jobs WHERE expires_at IS NOT NULL"
			  " AND status IN ('pending', 'transmited'))",
			  &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, now);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
		*next = sqlite3_column_int64(s, 0);
	err = store_rc(st->db, rc, "next wakeup");
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}
