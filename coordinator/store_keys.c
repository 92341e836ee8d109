/*
 * store_keys.c - the store's tenants and API keys. See store.h; store_int.h for what the store's
 * files share.
 */
#include "store_int.h"

#include <stdio.h>
#include <string.h>

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
	return store_write(st,
			   "INSERT OR IGNORE INTO tenants(client_root, created_at) VALUES(?, ?)",
			   NULL, 2, client_root, ts);
}

json_object *store_row_exists(sqlite3_stmt *s)
{
	(void)s;
	return json_object_new_boolean(1);
}

bool store_tenant_exists(struct store *st, const char *client_root)
{
	json_object *o = NULL;
	enum rcs_err err = store_get_row(st, "SELECT 1 FROM tenants WHERE client_root = ?",
					 client_root, NULL, NULL, store_row_exists, &o);
	json_object_put(o);
	return err == RCS_OK;
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

enum rcs_err store_key_lookup(struct store *st, const char *key_hash, struct auth *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(st,
			    "SELECT ident, client_root, user, role FROM api_keys"
			    " WHERE key_hash = ? AND revoked_at IS NULL",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, key_hash);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		snprintf(out->key_ident, sizeof(out->key_ident), "%s", store_col_text(s, 0));
		snprintf(out->client_root, sizeof(out->client_root), "%s", store_col_text(s, 1));
		snprintf(out->user, sizeof(out->user), "%s", store_col_text(s, 2));
		if (!role_parse(store_col_text(s, 3), &out->role))
			out->role = ROLE_VIEWER;
		err = RCS_OK;
	} else if (rc == SQLITE_DONE) {
		err = RCS_ERR_NOTFOUND;
	} else {
		err = store_rc(st->db, rc, "key lookup");
	}
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

#define KEY_COLS "ident, user, role, client_root, created_at, revoked_at"

static const struct store_col_map key_cols[] = {
    {"ident", STORE_COL_STR},       {"user", STORE_COL_STR},       {"role", STORE_COL_STR},
    {"client_root", STORE_COL_STR}, {"created_at", STORE_COL_INT}, {"revoked_at", STORE_COL_INT},
    {NULL, STORE_COL_STR},
};

static json_object *row_key(sqlite3_stmt *s)
{
	return store_row_map(s, key_cols);
}

enum rcs_err store_key_get(struct store *st, const char *client_root, const char *ident,
			   json_object **out)
{
	return store_get_row(
	    st, "SELECT " KEY_COLS " FROM api_keys WHERE ident = ? AND client_root = ?", ident,
	    client_root, NULL, row_key, out);
}

enum rcs_err store_keys_list(struct store *st, const char *client_root, const struct store_page *pg,
			     json_object **out)
{
	struct store_qb q = {.n = 0};

	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	return store_list(st, KEY_COLS, "api_keys", &q, "ident", pg, row_key, out);
}
