/*
 * store_keys.h - the store's tenants and API keys, and the roles a key gives (store_keys.c). See
 * store.h.
 */
#ifndef RCS_STORE_KEYS_H
#define RCS_STORE_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

enum role { ROLE_VIEWER = 0, ROLE_OPERATOR = 1, ROLE_ADMIN = 2 };
const char *role_name(enum role r);
bool role_parse(const char *s, enum role *out);

struct auth {
	char client_root[UUID_STR_LEN];
	char key_ident[UUID_STR_LEN];
	char user[128];
	enum role role;
};

enum rcs_err store_tenant_create(struct store *st, const char *client_root, int64_t now);
bool store_tenant_exists(struct store *st, const char *client_root);
enum rcs_err store_key_create(struct store *st, const char *ident, const char *client_root,
			      const char *user, enum role role, const char *key_hash, int64_t now);
/* Revokes a key; client_root NULL means any tenant (the CLI). */
enum rcs_err store_key_revoke(struct store *st, const char *client_root, const char *ident,
			      int64_t now);
/* Finds an unrevoked key by the hex SHA-256 of the key. */
enum rcs_err store_key_lookup(struct store *st, const char *key_hash, struct auth *out);
/* An API key as the API shows it (never its hash). Free with store_key_rec_free. */
struct key_rec {
	char ident[UUID_STR_LEN];
	char *user;
	enum role role;
	char client_root[UUID_STR_LEN];
	int64_t created_at;
	int64_t revoked_at; /* 0: not revoked */
};
void store_key_rec_free(struct key_rec *r);
struct store_key_list {
	struct store_page_info pg;
	struct key_rec *items;
	size_t n;
};
void store_key_list_free(struct store_key_list *l);

enum rcs_err store_key_get(struct store *st, const char *client_root, const char *ident,
			   struct key_rec *out);
enum rcs_err store_keys_list(struct store *st, const char *client_root, const struct store_page *pg,
			     struct store_key_list *out);
/* The tenant of an API key (any tenant's: for the operator's command line). */
enum rcs_err store_key_client_root(struct store *st, const char *key_ident, char out[UUID_STR_LEN]);

#endif
