/*
 * store_audit.c - the store's audit log (docs/api.md, "Audit"): every state-changing request's
 * record, written in the request's transaction, and the tenant's records, newest first. See
 * store_audit.h; store_int.h for what the store's files share.
 */
#include "store_audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

void store_audit_rec_free(struct audit_rec *r)
{
	free(r->client_root);
	free(r->user);
	free(r->key_ident);
	free(r->method);
	free(r->path);
	free(r->target);
	free(r->remote);
	memset(r, 0, sizeof(*r));
}

void store_audit_list_free(struct store_audit_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_audit_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

enum rcs_err store_audit_add(struct store *st, const struct audit_rec *r)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(st,
			 "INSERT INTO audit(client_root, ts, user, key_ident, method, path, target,"
			 " status_code, remote) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, r->client_root);
	store_arg_int(s, 2, r->ts);
	store_arg_text(s, 3, r->user);
	store_arg_text(s, 4, r->key_ident);
	store_arg_text(s, 5, r->method);
	store_arg_text(s, 6, r->path);
	store_arg_text(s, 7, r->target);
	store_arg_int(s, 8, r->status_code);
	store_arg_text(s, 9, r->remote);
	err = store_done(st, s, "audit add");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

#define AUDIT_COLS "id, client_root, ts, user, key_ident, method, path, target, status_code, remote"

static enum rcs_err audit_row(struct store_stmt *s, void *arg)
{
	struct audit_rec *r = arg;
	enum rcs_err err = RCS_OK;

	r->id = store_val_int(s, 0);
	r->client_root = store_val_dup(s, 1, &err);
	r->ts = store_val_int(s, 2);
	r->user = store_val_dup(s, 3, &err);
	r->key_ident = store_val_dup(s, 4, &err);
	r->method = store_val_dup(s, 5, &err);
	r->path = store_val_dup(s, 6, &err);
	r->target = store_val_dup(s, 7, &err);
	r->status_code = store_val_int(s, 8);
	r->remote = store_val_dup(s, 9, &err);
	return err;
}

enum rcs_err store_audit_list(struct store *st, const char *client_root,
			      const struct audit_filter *f, const struct store_page *pg,
			      struct store_audit_list *out)
{
	struct store_qb q = {.n = 0};
	char since[24], until[24];
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	if (f->user)
		store_qb_add(&q, "user = ?", f->user);
	if (f->target)
		store_qb_add(&q, "target = ?", f->target);
	if (f->has_since) {
		snprintf(since, sizeof(since), "%lld", (long long)f->since);
		store_qb_add(&q, "ts >= CAST(? AS INTEGER)", since);
	}
	if (f->has_until) {
		snprintf(until, sizeof(until), "%lld", (long long)f->until);
		store_qb_add(&q, "ts <= CAST(? AS INTEGER)", until);
	}
	err = store_page_recs(st, AUDIT_COLS, "audit", &q, "id DESC", pg, &out->pg,
			      sizeof(*out->items), audit_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_audit_list_free(out);
	return err;
}
