/*
 * store_webhooks.c - the store's webhooks and their outbox of deliveries with every attempt.
 * See store_webhooks.h; store_int.h for what the store's files share.
 */
#include "store_webhooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"
#include "store_queues.h"

/* ---- webhooks ---- */

#define WEBHOOK_COLS                                                                               \
	"ident, client_root, url, events, statuses, active, created_user, created_at, update_at"

/* A new delivery's ident: a random (version 4) UUID, one per row (SQLite's; PostgreSQL's is
 * gen_random_uuid()). */
#define SQ_UUID4                                                                                   \
	"lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||"                         \
	" substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) ||"   \
	" substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)))"

void store_webhook_rec_free(struct webhook_rec *r)
{
	free(r->url);
	free(r->events);
	free(r->statuses);
	free(r->created_user);
	r->url = r->events = r->statuses = r->created_user = NULL;
}

void store_webhook_list_free(struct store_webhook_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_webhook_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* A row of WEBHOOK_COLS into a record (zeroed by the caller). */
static enum rcs_err webhook_row(struct store_stmt *s, void *arg)
{
	struct webhook_rec *r = arg;
	enum rcs_err err = RCS_OK;

	store_val_copy(s, 0, r->ident, sizeof(r->ident));
	store_val_copy(s, 1, r->client_root, sizeof(r->client_root));
	r->url = store_val_dup(s, 2, &err);
	r->events = store_val_dup(s, 3, &err);
	r->statuses = store_val_dup(s, 4, &err);
	r->active = store_val_bool(s, 5);
	r->created_user = store_val_dup(s, 6, &err);
	r->created_at = store_val_int(s, 7);
	r->update_at = store_val_int(s, 8);
	return err;
}

/* A webhook is written: what webhook_any knew is forgotten, here (SQLite's read of the
 * transaction, PostgreSQL's tenants) and, by the NOTIFY 'webhooks' sent at the commit, on
 * the other coordinators sharing the database (docs/coordinator.md, "Reports as sets"). */
static enum rcs_err webhooks_changed(struct store *st)
{
	st->tx_serial++;
	atomic_fetch_add(&st->hooks_gen, 1);
	return st->be->notify ? st->be->notify(st, "webhooks") : RCS_OK;
}

enum rcs_err store_webhook_insert(struct store *st, const struct webhook_write *w)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = webhooks_changed(st);
	if (err == RCS_OK)
		err = store_stmt(
		    st,
		    "INSERT INTO webhooks(ident, client_root, url, events, statuses, secret,"
		    " active, created_user, created_at, update_at)"
		    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?8)",
		    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, w->ident);
	store_arg_text(s, 2, w->client_root);
	store_arg_text(s, 3, w->url);
	store_arg_text(s, 4, w->events);
	store_arg_text(s, 5, w->statuses ? w->statuses : "[]");
	store_arg_text(s, 6, w->secret);
	store_arg_text(s, 7, w->created_user);
	store_arg_int(s, 8, w->now);
	err = store_done(st, s, "webhook insert");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_webhook_get(struct store *st, const char *client_root, const char *ident,
			       struct webhook_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_get_one(
	    st, "SELECT " WEBHOOK_COLS " FROM webhooks WHERE ident = ? AND client_root = ?", ident,
	    client_root, NULL, webhook_row, out);
	if (err != RCS_OK)
		store_webhook_rec_free(out);
	return err;
}

enum rcs_err store_webhook_update(struct store *st, const char *client_root, const char *ident,
				  const char *url, const char *events, const char *statuses,
				  const char *secret, int active, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = webhooks_changed(st);
	if (err == RCS_OK)
		err = store_stmt(
		    st,
		    "UPDATE webhooks SET url = coalesce(?3, url), events = coalesce(?4, events),"
		    " statuses = coalesce(?5, statuses), secret = coalesce(?6, secret),"
		    " active = CASE WHEN ?7 < 0 THEN active ELSE ?7 END, update_at = ?8"
		    " WHERE ident = ?1 AND client_root = ?2",
		    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	store_arg_text(s, 2, client_root);
	store_arg_text(s, 3, url);
	store_arg_text(s, 4, events);
	store_arg_text(s, 5, statuses);
	store_arg_text(s, 6, secret);
	store_arg_int(s, 7, active);
	store_arg_int(s, 8, now);
	err = store_done(st, s, "webhook update");
	if (err == RCS_OK && store_changes(st) == 0)
		err = RCS_ERR_NOTFOUND;
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_webhook_delete(struct store *st, const char *client_root, const char *ident)
{
	int changed = 0;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	/* the attempts and deliveries go with it (ON DELETE CASCADE) */
	err = webhooks_changed(st);
	if (err == RCS_OK)
		err = store_write(st, "DELETE FROM webhooks WHERE ident = ? AND client_root = ?",
				  &changed, 2, ident, client_root);
	if (err == RCS_OK && changed == 0)
		err = RCS_ERR_NOTFOUND;
	return store_sp_end(st, err);
}

enum rcs_err store_webhooks_list(struct store *st, const char *client_root,
				 const struct store_page *pg, struct store_webhook_list *out)
{
	struct store_qb q = {.n = 0};
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	err = store_page_recs(st, WEBHOOK_COLS, "webhooks", &q, "ident", pg, &out->pg,
			      sizeof(*out->items), webhook_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_webhook_list_free(out);
	return err;
}

/* ---- the outbox ---- */

/* The webhooks of tenant ?1 that want events of type ?2 about status ?3 (SQL condition on
 * the webhooks row w). */
#define WEBHOOK_WANTS(EACH)                                                                        \
	"w.client_root = ?1 AND w.active = 1 AND"                                                  \
	" EXISTS (SELECT 1 FROM " EACH("w.events",                                                 \
				       "e") " WHERE e.value = ?2) AND"                             \
					    " (w.statuses = '[]' OR EXISTS (SELECT 1 FROM " EACH(  \
						"w.statuses", "x") " WHERE x.value = ?3))"

/* One delivery per webhook that wants it. */
#define WEBHOOK_ENQUEUE(UUID4, EACH)                                                               \
	"INSERT INTO webhook_deliveries(ident, webhook_ident, client_root, type, subject, hist_n," \
	" status, at, state, created_at, next_at)"                                                 \
	" SELECT " UUID4 ", w.ident, w.client_root, CAST(?2 AS TEXT), CAST(?4 AS TEXT), ?5,"       \
	" CAST(?3 AS TEXT), ?6, 'queued', ?6, ?6 FROM webhooks w WHERE " WEBHOOK_WANTS(EACH)

static enum rcs_err row_true(struct store_stmt *s, void *arg)
{
	(void)s;
	*(bool *)arg = true;
	return RCS_OK;
}

/*
 * Whether the tenant may have a webhook that wants deliveries: false only when it has no
 * active webhook at all, read once per transaction. Most tenants have none, and the outbox's
 * INSERT ... SELECT, which opens the outbox and its indexes for writing even when it selects
 * nothing, is a tenth of a status change's cost. On SQLite only: its write transaction
 * (BEGIN IMMEDIATE) sees no other writer's commit until it ends, and this connection's own
 * webhook changes and every transaction boundary (store_run) end what was read. On
 * PostgreSQL each statement sees what others committed meanwhile: asked every time.
 */
/* webhook_any on PostgreSQL: kept per tenant while the store listens, so that a change
 * of another coordinator's is heard (webhooks_changed, store_int.h's hooks_gen); asked
 * every time otherwise. */
static enum rcs_err webhook_any_pg(struct store *st, const char *client_root, bool *any)
{
	unsigned long gen = atomic_load(&st->hooks_gen);
	unsigned slot;
	enum rcs_err err;

	if (st->listen == NULL || strlen(client_root) >= sizeof(st->hooks_pg[0].client_root))
		return RCS_OK;
	for (size_t i = 0; i < sizeof(st->hooks_pg) / sizeof(st->hooks_pg[0]); i++)
		if (st->hooks_pg[i].gen == gen &&
		    strcmp(st->hooks_pg[i].client_root, client_root) == 0) {
			*any = st->hooks_pg[i].any;
			return RCS_OK;
		}
	*any = false;
	err = store_get_one(st,
			    "SELECT 1 FROM webhooks WHERE client_root = ?1 AND active = 1 LIMIT 1",
			    client_root, NULL, NULL, row_true, any);
	if (err == RCS_ERR_NOTFOUND)
		err = RCS_OK;
	if (err != RCS_OK) {
		*any = true;
		return err;
	}
	slot = st->hooks_pg_next++ % (sizeof(st->hooks_pg) / sizeof(st->hooks_pg[0]));
	st->hooks_pg[slot].gen = gen;
	snprintf(st->hooks_pg[slot].client_root, sizeof(st->hooks_pg[slot].client_root), "%s",
		 client_root);
	st->hooks_pg[slot].any = *any;
	return RCS_OK;
}

static enum rcs_err webhook_any(struct store *st, const char *client_root, bool *any)
{
	enum rcs_err err;

	*any = true;
	if (st->dialect == STORE_DIALECT_POSTGRES)
		return webhook_any_pg(st, client_root, any);
	if (st->tx_depth == 0 || strlen(client_root) >= sizeof(st->hooks_known.client_root))
		return RCS_OK;
	if (st->hooks_known.serial == st->tx_serial &&
	    strcmp(st->hooks_known.client_root, client_root) == 0) {
		*any = st->hooks_known.any;
		return RCS_OK;
	}
	*any = false;
	err = store_get_one(st,
			    "SELECT 1 FROM webhooks WHERE client_root = ?1 AND active = 1 LIMIT 1",
			    client_root, NULL, NULL, row_true, any);
	if (err == RCS_ERR_NOTFOUND)
		err = RCS_OK;
	if (err != RCS_OK) {
		*any = true;
		return err;
	}
	st->hooks_known.serial = st->tx_serial;
	snprintf(st->hooks_known.client_root, sizeof(st->hooks_known.client_root), "%s",
		 client_root);
	st->hooks_known.any = *any;
	return RCS_OK;
}

static enum rcs_err webhook_enqueue(struct store *st, const char *client_root, const char *type,
				    const char *subject, long long n, const char *status,
				    int64_t at)
{
	struct store_stmt *s = NULL;
	bool any = true;
	enum rcs_err err;

	err = webhook_any(st, client_root, &any);
	if (err != RCS_OK || !any)
		goto out;
	err = store_stmt(
	    st,
	    STORE_SQL(st, WEBHOOK_ENQUEUE(SQ_UUID4, STORE_JSON_EACH_SQ),
		      WEBHOOK_ENQUEUE("CAST(gen_random_uuid() AS TEXT)", STORE_JSON_EACH_PG)),
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, type);
	store_arg_text(s, 3, status);
	store_arg_text(s, 4, subject);
	store_arg_int(s, 5, n);
	store_arg_int(s, 6, at);
	err = store_done(st, s, "webhook delivery record");
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_webhook_job_event(struct store *st, const char *client_root, const char *job,
				     long long n, const char *status, int64_t at)
{
	return webhook_enqueue(st, client_root, "job.status", job, n, status, at);
}

enum rcs_err store_webhook_group_event(struct store *st, const char *client_root,
				       const char *group_ident, const char *status, int64_t now)
{
	enum rcs_err err;

	store_lock(st);
	err = webhook_enqueue(st, client_root, "group.status", group_ident, 0, status, now);
	store_unlock(st);
	return err;
}

#define WANT_JOBS(EACH)                                                                            \
	"SELECT 1 FROM webhooks w WHERE w.client_root = ?1 AND w.active = 1 AND"                   \
	" EXISTS (SELECT 1 FROM " EACH("w.events", "e") " WHERE e.value = 'job.status') LIMIT 1"

enum rcs_err store_webhooks_want_jobs(struct store *st, const char *client_root, bool *want)
{
	enum rcs_err err;

	*want = false;
	err = store_get_one(
	    st, STORE_SQL(st, WANT_JOBS(STORE_JSON_EACH_SQ), WANT_JOBS(STORE_JSON_EACH_PG)),
	    client_root, NULL, NULL, row_true, want);
	return err == RCS_ERR_NOTFOUND ? RCS_OK : err;
}

void store_webhook_delivery_list_free(struct store_webhook_delivery_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++) {
		struct webhook_delivery_rec *d = &l->items[i];

		free(d->type);
		free(d->status);
		free(d->state);
		free(d->last_error);
		for (size_t k = 0; d->attempts && k < d->n; k++)
			free(d->attempts[k].error);
		free(d->attempts);
	}
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

#define DELIVERY_COLS                                                                              \
	"id, ident, type, subject, status, at, state, attempts, created_at, next_at, done_at,"     \
	" last_error"

/* The row of DELIVERY_COLS into *arg, a struct webhook_delivery_rec (zeroed). */
static enum rcs_err delivery_row(struct store_stmt *s, void *arg)
{
	struct webhook_delivery_rec *d = arg;
	enum rcs_err err = RCS_OK;

	d->id = store_val_int(s, 0);
	store_val_copy(s, 1, d->ident, sizeof(d->ident));
	d->type = store_val_dup(s, 2, &err);
	store_val_copy(s, 3, d->subject, sizeof(d->subject));
	d->status = store_val_dup(s, 4, &err);
	d->at = store_val_int(s, 5);
	d->state = store_val_dup(s, 6, &err);
	d->n_attempts = store_val_int(s, 7);
	d->created_at = store_val_int(s, 8);
	d->next_at = store_val_int(s, 9);
	d->done_at = store_val_int(s, 10);
	d->last_error = store_val_dup(s, 11, &err);
	return err;
}

/* The attempts of delivery id into d, oldest first. */
static enum rcs_err delivery_attempts(struct store *st, long long id,
				      struct webhook_delivery_rec *d)
{
	struct store_stmt *s = NULL;
	bool row = false;
	size_t cap = 0;
	enum rcs_err err;

	err = store_stmt(st,
			 "SELECT at, duration_ms, status_code, error FROM webhook_attempts"
			 " WHERE delivery_id = ?1 ORDER BY n",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, id);
	while ((err = store_next(st, s, "webhook attempts", &row)) == RCS_OK && row) {
		struct webhook_attempt_rec *a;

		if (d->n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			void *p = realloc(d->attempts, ncap * sizeof(*d->attempts));

			if (p == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			d->attempts = p;
			cap = ncap;
		}
		a = &d->attempts[d->n++];
		memset(a, 0, sizeof(*a));
		a->at = store_val_int(s, 0);
		a->duration_ms = store_val_int(s, 1);
		a->status_code = store_val_int(s, 2);
		a->error = store_val_dup(s, 3, &err);
		if (err != RCS_OK)
			break;
	}
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_webhook_deliveries(struct store *st, const char *client_root, const char *ident,
				      const struct store_page *pg,
				      struct store_webhook_delivery_list *out)
{
	struct store_qb q = {.n = 0};
	void *items = NULL;
	bool exists = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	out->pg.page = pg->page;
	out->pg.per_page = pg->per_page;
	q.where[0] = '\0';
	store_qb_add(&q, "webhook_ident = ?", ident);
	store_lock(st);
	err = store_get_one(st, "SELECT 1 FROM webhooks WHERE ident = ?1 AND client_root = ?2",
			    ident, client_root, NULL, row_true, &exists);
	if (err == RCS_OK)
		err = store_page_recs(st, DELIVERY_COLS, "webhook_deliveries", &q, "id DESC", pg,
				      &out->pg, sizeof(*out->items), delivery_row, &items, &out->n);
	out->items = items;
	for (size_t i = 0; err == RCS_OK && i < out->n; i++)
		err = delivery_attempts(st, out->items[i].id, &out->items[i]);
	store_unlock(st);
	if (err != RCS_OK)
		store_webhook_delivery_list_free(out);
	return err;
}

/* ---- the sender's queries ---- */

void store_webhook_due_free(struct webhook_due *r)
{
	if (r == NULL)
		return;
	free(r->url);
	if (r->secret)
		explicit_bzero(r->secret, strlen(r->secret));
	free(r->secret);
	r->url = r->secret = NULL;
}

void store_webhook_due_list_free(struct store_webhook_due_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_webhook_due_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

static bool id_in(long long id, const long long *skip, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (skip[i] == id)
			return true;
	return false;
}

/* The webhooks with a queued delivery whose time has come (an index probe each: index
 * webhook_deliveries_due). */
#define WEBHOOKS_DUE_HOOKS                                                                         \
	"SELECT w.ident FROM webhooks w WHERE EXISTS (SELECT 1 FROM webhook_deliveries d WHERE"    \
	" d.webhook_ident = w.ident AND d.state = 'queued' AND d.next_at <= ?1) ORDER BY w.ident"

/*
 * Of webhook ?2, the first ?3 queued deliveries whose time has come, in the order of
 * (next_at, id), each the first queued one of its subject (a walk of index
 * webhook_deliveries_due that stops at the limit, not a read of the whole queue). Claimed for
 * this node (docs/architecture.md "Claims"): a delivery another node holds is passed over,
 * and so are the later ones of its subject, which keeps each subject's order. Those in flight
 * here are claimed again, which renews their lease.
 */
#define WEBHOOKS_CLAIM(lock)                                                                       \
	"UPDATE webhook_deliveries SET claimed_by = ?4, lease_until = ?5 WHERE id IN (SELECT id"   \
	" FROM webhook_deliveries WHERE id IN (SELECT q.id FROM webhook_deliveries q WHERE"        \
	" q.webhook_ident = ?2 AND q.state = 'queued' AND q.next_at <= ?1 AND"                     \
	" " STORE_CLAIM_FREE(                                                                      \
	    "?4", "?1") " AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e"                      \
			" WHERE e.state = 'queued' AND e.webhook_ident ="                          \
			" q.webhook_ident AND e.subject = q.subject AND e.id <"                    \
			" q.id) ORDER BY q.next_at, q.id LIMIT ?3) AND " STORE_CLAIM_FREE(         \
			    "?4", "?1") lock ") RETURNING id, ident, webhook_ident, client_root,"  \
					     " type, subject, hist_n, status, at, attempts,"       \
					     " created_at, (SELECT w.url FROM webhooks w WHERE"    \
					     " w.ident = webhook_deliveries.webhook_ident),"       \
					     " (SELECT w.secret FROM webhooks w WHERE w.ident ="   \
					     " webhook_deliveries.webhook_ident)"

static int webhook_due_cmp(const void *a, const void *b)
{
	const struct webhook_due *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* The idents of the webhooks with deliveries due (*hooks: n of them, to free). */
static enum rcs_err webhooks_due_hooks(struct store *st, int64_t now, char (**hooks)[UUID_STR_LEN],
				       size_t *n)
{
	struct store_stmt *s = NULL;
	size_t cap = 0;
	bool row = false;
	enum rcs_err err;

	*hooks = NULL;
	*n = 0;
	err = store_stmt(st, WEBHOOKS_DUE_HOOKS, &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	while ((err = store_next(st, s, "webhooks due", &row)) == RCS_OK && row) {
		if (*n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			void *p = realloc(*hooks, ncap * sizeof(**hooks));

			if (p == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			*hooks = p;
			cap = ncap;
		}
		store_val_copy(s, 0, (*hooks)[*n], sizeof((*hooks)[*n]));
		(*n)++;
	}
out:
	store_stmt_done(st, s);
	return err;
}

/* Claims webhook hook's first per_hook due deliveries, those not in skip added to out (room
 * for limit). */
static enum rcs_err webhooks_claim(struct store *st, int64_t now, const char *hook,
				   const long long *skip, size_t n_skip, size_t limit,
				   size_t per_hook, struct store_webhook_due_list *out)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	err = store_stmt(
	    st, STORE_SQL(st, WEBHOOKS_CLAIM(""), WEBHOOKS_CLAIM(STORE_SKIP_LOCKED_PG)), &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, now);
	store_arg_text(s, 2, hook);
	store_arg_int(s, 3, (long long)per_hook);
	store_arg_text(s, 4, store_claim_node(st));
	store_arg_int(s, 5, store_claim_until(st, now));
	/* a write: read to its end */
	while ((err = store_next(st, s, "webhook deliveries due", &row)) == RCS_OK && row) {
		struct webhook_due *r = &out->items[out->n];

		if (out->n >= limit || id_in(store_val_int(s, 0), skip, n_skip))
			continue;
		memset(r, 0, sizeof(*r));
		r->id = store_val_int(s, 0);
		store_val_copy(s, 1, r->ident, sizeof(r->ident));
		store_val_copy(s, 2, r->webhook_ident, sizeof(r->webhook_ident));
		store_val_copy(s, 3, r->client_root, sizeof(r->client_root));
		store_val_copy(s, 4, r->type, sizeof(r->type));
		store_val_copy(s, 5, r->subject, sizeof(r->subject));
		r->hist_n = store_val_int(s, 6);
		store_val_copy(s, 7, r->status, sizeof(r->status));
		r->at = store_val_int(s, 8);
		r->attempts = store_val_int(s, 9);
		r->created_at = store_val_int(s, 10);
		r->url = store_val_dup(s, 11, &err);
		r->secret = store_val_dup(s, 12, &err);
		out->n++;
		if (err != RCS_OK)
			break;
	}
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_webhooks_due(struct store *st, int64_t now, const long long *skip, size_t n_skip,
				size_t limit, size_t per_hook, struct store_webhook_due_list *out)
{
	char(*hooks)[UUID_STR_LEN] = NULL;
	size_t n_hooks = 0;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	if (limit == 0)
		return RCS_OK;
	out->items = calloc(limit, sizeof(*out->items));
	if (out->items == NULL)
		return RCS_ERR_NOMEM;
	store_lock(st);
	err = webhooks_due_hooks(st, now, &hooks, &n_hooks);
	for (size_t i = 0; err == RCS_OK && i < n_hooks && out->n < limit; i++)
		err = webhooks_claim(st, now, hooks[i], skip, n_skip, limit,
				     per_hook ? per_hook : limit + n_skip, out);
	if (err == RCS_OK && out->n > 1)
		qsort(out->items, out->n, sizeof(*out->items), webhook_due_cmp);
	store_unlock(st);
	free(hooks);
	if (err != RCS_OK)
		store_webhook_due_list_free(out);
	return err;
}

enum rcs_err store_webhook_backlog(struct store *st, long long *n)
{
	enum rcs_err err;

	*n = 0;
	err = store_get_one(st, "SELECT count(*) FROM webhook_deliveries WHERE state = 'queued'",
			    NULL, NULL, NULL, store_row_int, n);
	return err == RCS_ERR_NOTFOUND ? RCS_OK : err;
}

enum rcs_err store_webhook_attempt(struct store *st, long long id,
				   const struct webhook_attempt_rec *a, const char *state,
				   int64_t next_at)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_tx_begin(st);
	if (err != RCS_OK)
		return err;
	err =
	    store_stmt(st,
		       "INSERT INTO webhook_attempts(delivery_id, n, at, duration_ms, status_code,"
		       " error) SELECT id, attempts + 1, ?2, ?3, ?4, ?5 FROM webhook_deliveries"
		       " WHERE id = ?1",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, id);
	store_arg_int(s, 2, a->at);
	store_arg_int(s, 3, a->duration_ms);
	store_arg_opt_int(s, 4, a->status_code);
	store_arg_text(s, 5, a->error);
	err = store_done(st, s, "webhook attempt");
	store_stmt_done(st, s);
	s = NULL;
	if (err != RCS_OK)
		goto out;
	err = store_stmt(st,
			 "UPDATE webhook_deliveries SET attempts = attempts + 1, state = ?2,"
			 " next_at = ?3, last_error = ?4,"
			 " done_at = CASE WHEN ?2 = 'queued' THEN NULL ELSE ?5 END,"
			 " claimed_by = NULL, lease_until = NULL WHERE id = ?1",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, id);
	store_arg_text(s, 2, state);
	store_arg_int(s, 3, next_at);
	store_arg_text(s, 4, a->error);
	store_arg_int(s, 5, a->at);
	err = store_done(st, s, "webhook delivery update");
out:
	store_stmt_done(st, s);
	return store_tx_end(st, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
}
