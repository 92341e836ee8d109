/*
 * store_outbox.c - the store's e-mail outbox: the notifier's queries, and the notifications a
 * status change records. See store_outbox.h; store_int.h for what the store's files share.
 */
#include "store_outbox.h"

#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "store_queues.h"

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

#define NOTIFICATIONS_CLAIM(lock)                                                                  \
	"UPDATE notifications SET claimed_by = ?3, lease_until = ?4 WHERE id IN (SELECT id FROM"   \
	" notifications WHERE state = 'queued' AND next_at <= ?1 AND " STORE_CLAIM_FREE(           \
	    "?3", "?1") " ORDER BY next_at, id LIMIT ?2" lock ") RETURNING id,"                    \
			" job_ident, client_root, status, address, attempts,"                      \
			" created_at, next_at"

/* The order of due notifications: their time, then their id. */
struct notification_order {
	int64_t next_at;
	struct notification_due r;
};

static int notification_order_cmp(const void *a, const void *b)
{
	const struct notification_order *x = a, *y = b;

	if (x->next_at != y->next_at)
		return x->next_at < y->next_at ? -1 : 1;
	return x->r.id < y->r.id ? -1 : x->r.id > y->r.id;
}

/* Puts the rows a claim returned (in no order) in the order of their time, then id. */
static enum rcs_err notification_sort(struct store_notification_due_list *l, const int64_t *at)
{
	struct notification_order *o;

	if (l->n < 2)
		return RCS_OK;
	o = calloc(l->n, sizeof(*o));
	if (o == NULL)
		return RCS_ERR_NOMEM;
	for (size_t i = 0; i < l->n; i++) {
		o[i].next_at = at[i];
		o[i].r = l->items[i];
	}
	qsort(o, l->n, sizeof(*o), notification_order_cmp);
	for (size_t i = 0; i < l->n; i++)
		l->items[i] = o[i].r;
	free(o);
	return RCS_OK;
}

enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit,
				     struct store_notification_due_list *out)
{
	struct store_stmt *s = NULL;
	int64_t *at = NULL; /* the rows' next_at */
	size_t cap = 0;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	/* claimed for this node (docs/architecture.md "Claims"); sent in the order of ids */
	err = store_stmt(
	    st, STORE_SQL(st, NOTIFICATIONS_CLAIM(""), NOTIFICATIONS_CLAIM(STORE_SKIP_LOCKED_PG)),
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	store_arg_int(s, 2, limit > INT64_MAX ? INT64_MAX : (long long)limit);
	store_arg_text(s, 3, store_claim_node(st));
	store_arg_int(s, 4, store_claim_until(st, now));
	/* LIMIT bounds the rows; the statement is a write: read to its end */
	while ((err = store_next(st, s, "notifications due", &row)) == RCS_OK && row) {
		if (out->n >= limit)
			continue;
		if (out->n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct notification_due *p;
			int64_t *pa;

			if (ncap > limit)
				ncap = limit;
			p = realloc(out->items, ncap * sizeof(*p));
			if (p != NULL)
				out->items = p;
			pa = p ? realloc(at, ncap * sizeof(*pa)) : NULL;
			if (pa == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			at = pa;
			cap = ncap;
		}
		err = notification_due_read(s, &out->items[out->n]);
		if (err != RCS_OK)
			break;
		at[out->n] = store_val_int(s, 7);
		out->n++;
	}
	if (err == RCS_OK)
		err = notification_sort(out, at);
out:
	free(at);
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
			 " next_at = ?3, last_error = ?4, claimed_by = NULL, lease_until = NULL"
			 " WHERE id = ?5",
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

enum rcs_err store_notification_renew(struct store *st, long long id, int64_t now, bool *held)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	*held = false;
	store_lock(st);
	err =
	    store_stmt(st,
		       "UPDATE notifications SET lease_until = ?1 WHERE id = ?2 AND claimed_by = ?3"
		       " AND state = 'queued' AND lease_until >= ?4",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, store_claim_until(st, now));
	store_arg_int(s, 2, id);
	store_arg_text(s, 3, store_claim_node(st));
	store_arg_int(s, 4, now);
	err = store_done(st, s, "notification renew");
	*held = err == RCS_OK && store_changes(st) > 0;
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

/* Queued e-mail notifications (the metrics). */
enum rcs_err store_notification_backlog(struct store *st, long long *n)
{
	*n = 0;
	return store_get_one(st, "SELECT count(*) FROM notifications WHERE state = 'queued'", NULL,
			     NULL, NULL, store_row_int, n);
}

/* ---- the notifications a status change records ---- */

/*
 * Records the notifications a status change triggers, in the caller's
 * transaction: the task's addresses for the task's statuses, the job's
 * addresses for the job's statuses (seed rules 1-3); an address on both
 * levels gets one row.
 */
#define NOTIFY_ROWS(EACH)                                                                          \
	" INTO notifications(job_ident, client_root, status, address, state, created_at,"          \
	" next_at)"                                                                                \
	" SELECT j.ident, j.client_root, CAST(?2 AS TEXT), a.value, 'queued', ?3, ?3"              \
	" FROM jobs j, " EACH(                                                                     \
	    "j.task_mail_list",                                                                    \
	    "a") " WHERE j.ident = ?1 AND"                                                         \
		 " EXISTS (SELECT 1 FROM " EACH(                                                   \
		     "j.task_status_list",                                                         \
		     "x") " WHERE x.value = ?2)"                                                   \
			  " UNION"                                                                 \
			  " SELECT j.ident, j.client_root, CAST(?2 AS TEXT), a.value, 'queued', "  \
			  "?3, ?3"                                                                 \
			  " FROM jobs j, " EACH(                                                   \
			      "j.mail_list", "a") " WHERE j.ident = ?1 AND"                        \
						  " EXISTS (SELECT 1 FROM " EACH(                  \
						      "j.status_list", "x") " WHERE x.value = ?2)"

enum rcs_err store_notifications_record(struct store *st, const char *job, const char *status,
					int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(
	    st,
	    STORE_SQL(st, "INSERT OR IGNORE" NOTIFY_ROWS(STORE_JSON_EACH_SQ),
		      "INSERT" NOTIFY_ROWS(STORE_JSON_EACH_PG) " ON CONFLICT DO NOTHING"),
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, job);
	store_arg_text(s, 2, status);
	store_arg_int(s, 3, now);
	err = store_done(st, s, "notification record");
out:
	store_stmt_done(st, s);
	return err;
}
