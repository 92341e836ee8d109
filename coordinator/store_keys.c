/*
 * store_keys.c - the store's tenants and API keys. See store_keys.h; store_int.h for what the
 * store's files share.
 */
#include "store_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ---- tenants and keys ---- */

static const char *const role_names[] = {"viewer", "operator", "admin"};

const char *role_name(enum role r)
{
	return (unsigned)r <= ROLE_ADMIN ? role_names[r] : "unknown";
}

bool role_parse(const char *s, enum role *out)
{
	for (int i = 0; i <= ROLE_ADMIN; i++) {
		if (s && strcmp(s, role_names[i]) == 0) {
			*out = (enum role)i;
			return true;
		}
	}
	return false;
}

enum rcs_err store_tenant_create(struct store *st, const char *client_root, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(
	    st, "INSERT INTO tenants(client_root, created_at) VALUES(?, ?) ON CONFLICT DO NOTHING",
	    NULL, 2, client_root, ts);
}

/* A row is there: what an existence check asks (store_get_one). */
static enum rcs_err key_row_found(struct store_stmt *s, void *arg)
{
	(void)s;
	(void)arg;
	return RCS_OK;
}

bool store_tenant_exists(struct store *st, const char *client_root)
{
	return store_get_one(st, "SELECT 1 FROM tenants WHERE client_root = ?", client_root, NULL,
			     NULL, key_row_found, NULL) == RCS_OK;
}

enum rcs_err store_key_create(struct store *st, const char *ident, const char *client_root,
			      const char *user, enum role role, const char *key_hash, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(
	    st,
	    "INSERT INTO api_keys(ident, client_root, user, role, key_hash, created_at)"
	    " VALUES(?, ?, ?, ?, ?, ?)",
	    NULL, 6, ident, client_root, user, role_name(role), key_hash, ts);
}

enum rcs_err store_key_revoke(struct store *st, const char *client_root, const char *ident,
			      int64_t now)
{
	char ts[32];
	int changes = 0;
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	if (client_root)
		err = store_write(st,
				  "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)"
				  " WHERE ident = ? AND client_root = ?",
				  &changes, 3, ts, ident, client_root);
	else
		err = store_write(st,
				  "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)"
				  " WHERE ident = ?",
				  &changes, 2, ts, ident);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

static enum rcs_err key_auth_row(struct store_stmt *s, void *arg)
{
	struct auth *out = arg;

	store_val_copy(s, 0, out->key_ident, sizeof(out->key_ident));
	store_val_copy(s, 1, out->client_root, sizeof(out->client_root));
	store_val_copy(s, 2, out->user, sizeof(out->user));
	if (!role_parse(store_val_text(s, 3), &out->role))
		out->role = ROLE_VIEWER;
	return RCS_OK;
}

enum rcs_err store_key_lookup(struct store *st, const char *key_hash, struct auth *out)
{
	return store_get_one(st,
			     "SELECT ident, client_root, user, role FROM api_keys"
			     " WHERE key_hash = ? AND revoked_at IS NULL",
			     key_hash, NULL, NULL, key_auth_row, out);
}

#define KEY_COLS "ident, user, role, client_root, created_at, revoked_at"

void store_key_rec_free(struct key_rec *r)
{
	free(r->user);
	r->user = NULL;
}

void store_key_list_free(struct store_key_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		store_key_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* A row of KEY_COLS into a record (zeroed by the caller). */
static enum rcs_err key_row(struct store_stmt *s, void *arg)
{
	struct key_rec *r = arg;
	enum rcs_err err = RCS_OK;

	store_val_copy(s, 0, r->ident, sizeof(r->ident));
	r->user = store_val_dup(s, 1, &err);
	if (!role_parse(store_val_text(s, 2), &r->role))
		r->role = ROLE_VIEWER;
	store_val_copy(s, 3, r->client_root, sizeof(r->client_root));
	r->created_at = store_val_int(s, 4);
	r->revoked_at = store_val_int(s, 5); /* NULL reads 0 */
	return err;
}

enum rcs_err store_key_get(struct store *st, const char *client_root, const char *ident,
			   struct key_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_get_one(st,
			    "SELECT " KEY_COLS " FROM api_keys WHERE ident = ? AND client_root = ?",
			    ident, client_root, NULL, key_row, out);
	if (err != RCS_OK)
		store_key_rec_free(out);
	return err;
}

enum rcs_err store_keys_list(struct store *st, const char *client_root, const struct store_page *pg,
			     struct store_key_list *out)
{
	struct store_qb q = {.n = 0};
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	err = store_page_recs(st, KEY_COLS, "api_keys", &q, "ident", pg, &out->pg,
			      sizeof(*out->items), key_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_key_list_free(out);
	return err;
}

/* ---- the tenant of a key (the audit log of the command line) ---- */

static enum rcs_err root_row(struct store_stmt *s, void *arg)
{
	store_val_copy(s, 0, arg, UUID_STR_LEN);
	return RCS_OK;
}

enum rcs_err store_key_client_root(struct store *st, const char *key_ident, char out[UUID_STR_LEN])
{
	out[0] = '\0';
	return store_get_one(st, "SELECT client_root FROM api_keys WHERE ident = ?1", key_ident,
			     NULL, NULL, root_row, out);
}
