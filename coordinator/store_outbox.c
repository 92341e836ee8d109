/*
 * store_outbox.c - the store's e-mail outbox: the notifier's queries. See store.h; store_int.h
 * for what the store's files share.
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- the notifier's queries ---- */

void store_notification_due_free(struct notification_due *r)
{
	if (r == NULL)
		return;
	free(r->status);
	free(r->address);
	memset(r, 0, sizeof(*r));
}

void store_notification_due_list_free(struct store_notification_due_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->n; i++)
		store_notification_due_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* A row of store_notifications_due's SELECT as a record (freed again on an error). */
static enum rcs_err notification_due_read(struct store_stmt *s, struct notification_due *r)
{
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	r->id = store_val_int(s, 0);
	store_val_copy(s, 1, r->job_ident, sizeof(r->job_ident));
	store_val_copy(s, 2, r->client_root, sizeof(r->client_root));
	r->status = store_val_dup(s, 3, &err);
	r->address = store_val_dup(s, 4, &err);
	r->attempts = store_val_int(s, 5);
	r->created_at = store_val_int(s, 6);
	if (err != RCS_OK)
		store_notification_due_free(r);
	return err;
}

enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit,
				     struct store_notification_due_list *out)
{
	struct store_stmt *s = NULL;
	size_t cap = 0;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_stmt(st,
			 "SELECT id, job_ident, client_root, status, address, attempts, created_at"
			 " FROM notifications WHERE state = 'queued' AND next_at <= ?1"
			 " ORDER BY next_at, id LIMIT ?2",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	store_arg_int(s, 2, limit > INT64_MAX ? INT64_MAX : (long long)limit);
	/* LIMIT bounds the rows */
	while (out->n < limit && (err = store_next(st, s, "notifications due", &row)) == RCS_OK &&
	       row) {
		if (out->n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct notification_due *p;

			if (ncap > limit)
				ncap = limit;
			p = realloc(out->items, ncap * sizeof(*p));
			if (p == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			out->items = p;
			cap = ncap;
		}
		err = notification_due_read(s, &out->items[out->n]);
		if (err != RCS_OK)
			break;
		out->n++;
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_notification_due_list_free(out);
	return err;
}

enum rcs_err store_notification_next(struct store *st, int64_t *next)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	*next = 0;
	store_lock(st);
	err = store_stmt(st, "SELECT min(next_at) FROM notifications WHERE state = 'queued'", &s);
	if (err != RCS_OK)
		goto out;
	err = store_next(st, s, "next notification", &row);
	if (err == RCS_OK && row && !store_val_null(s, 0))
		*next = store_val_int(s, 0);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notification_update(struct store *st, long long id, const char *state,
				       int64_t now, int64_t next_at, const char *error)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(st,
			 "UPDATE notifications SET state = ?1, attempts = attempts +"
			 " (CASE WHEN ?1 = 'suppressed' THEN 0 ELSE 1 END),"
			 " sent_at = CASE WHEN ?1 = 'sent' THEN ?2 ELSE sent_at END,"
			 " next_at = ?3, last_error = ?4 WHERE id = ?5",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, state);
	store_arg_int(s, 2, now);
	store_arg_int(s, 3, next_at);
	store_arg_text(s, 4, error);
	store_arg_int(s, 5, id);
	err = store_done(st, s, "notification update");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notifications_sent_since(struct store *st, const char *client_root,
					    int64_t since, long long *n)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	*n = 0;
	store_lock(st);
	err = store_stmt(st,
			 "SELECT count(*) FROM notifications WHERE client_root = ?1 AND"
			 " state = 'sent' AND sent_at >= ?2",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_int(s, 2, since);
	err = store_next(st, s, "notifications sent", &row);
	if (err == RCS_OK && row)
		*n = store_val_int(s, 0);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}
