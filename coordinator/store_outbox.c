/*
 * store_outbox.c - the store's the e-mail outbox: the notifier's queries. See store.h; store_int.h
 * for what the store's files share.
 */
#include "store_int.h"

/* ---- the notifier's queries ---- */

static const struct store_col_map notification_due_cols[] = {
    {"id", STORE_COL_INT},         {"job_ident", STORE_COL_STR}, {"client_root", STORE_COL_STR},
    {"status", STORE_COL_STR},     {"address", STORE_COL_STR},   {"attempts", STORE_COL_INT},
    {"created_at", STORE_COL_INT}, {NULL, STORE_COL_STR},
};

static json_object *row_notification_due(sqlite3_stmt *s)
{
	return store_row_map(s, notification_due_cols);
}

enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT id, job_ident, client_root, status, address, attempts, created_at"
			  " FROM notifications WHERE state = 'queued' AND next_at <= ?"
			  " ORDER BY next_at, id LIMIT ?",
			  &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, now);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)limit);
	err = store_rows(st, s, row_notification_due, limit, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notification_next(struct store *st, int64_t *next)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*next = 0;
	store_lock(st);
	err =
	    store_prepare(st, "SELECT min(next_at) FROM notifications WHERE state = 'queued'", &s);
	if (err == RCS_OK && sqlite3_step(s) == SQLITE_ROW &&
	    sqlite3_column_type(s, 0) != SQLITE_NULL)
		*next = sqlite3_column_int64(s, 0);
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notification_update(struct store *st, long long id, const char *state,
				       int64_t now, int64_t next_at, const char *error)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_prepare(st,
			    "UPDATE notifications SET state = ?1, attempts = attempts +"
			    " (CASE WHEN ?1 = 'suppressed' THEN 0 ELSE 1 END),"
			    " sent_at = CASE WHEN ?1 = 'sent' THEN ?2 ELSE sent_at END,"
			    " next_at = ?3, last_error = ?4 WHERE id = ?5",
			    &s);
	if (err == RCS_OK) {
		store_bind_text(s, 1, state);
		sqlite3_bind_int64(s, 2, now);
		sqlite3_bind_int64(s, 3, next_at);
		store_bind_text(s, 4, error);
		sqlite3_bind_int64(s, 5, id);
		err = store_rc(st->db, sqlite3_step(s), "notification update");
	}
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notifications_sent_since(struct store *st, const char *client_root,
					    int64_t since, long long *n)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*n = 0;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT count(*) FROM notifications WHERE client_root = ? AND"
			    " state = 'sent' AND sent_at >= ?",
			    &s);
	if (err == RCS_OK) {
		store_bind_text(s, 1, client_root);
		sqlite3_bind_int64(s, 2, since);
		if (sqlite3_step(s) == SQLITE_ROW)
			*n = sqlite3_column_int64(s, 0);
	}
	store_release(st, s);
	store_unlock(st);
	return err;
}
