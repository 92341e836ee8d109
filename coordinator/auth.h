/*
 * auth.h - API keys and roles (docs/api.md, "Authentication and roles"): making a key,
 * of which only the SHA-256 is stored; finding whose key a request carries; and the
 * throttle of addresses that try unknown keys (--auth-fail-limit), answered 429 with
 * Retry-After. The HTTP side (headers, status codes) stays in http_api.c.
 */
#ifndef RCS_AUTH_H
#define RCS_AUTH_H

#include <stdint.h>

#include "err.h"
#include "store_keys.h"
#include "uuid.h"

#define AUTH_KEY_MAX  256 /* longer keys are unknown without a look-up */
#define AUTH_HASH_LEN 65  /* hex SHA-256 and its NUL */

enum auth_result {
	AUTH_OK,        /* *out is the key's tenant, user and role */
	AUTH_MISSING,   /* no key */
	AUTH_UNKNOWN,   /* unknown or revoked (counted against the address) */
	AUTH_THROTTLED, /* the address tried too many unknown keys: *wait seconds to go */
	AUTH_ERROR,     /* the store failed: *err */
};

/* Hex SHA-256 of a key: what is stored and looked up, never the key. */
void auth_key_hash(const char *key, char out[AUTH_HASH_LEN]);
/* A new key ("rcs_" and 48 hex digits) for user with role, stored by its hash. */
enum rcs_err auth_key_new(struct store *st, const char *client_root, const char *user,
			  enum role role, int64_t now, char key[64], char ident[UUID_STR_LEN]);
/*
 * Whose key (NULL when the request has none) a request from addr ("" when unknown)
 * carries at now. With fail_limit > 0, an address past fail_limit unknown keys in a
 * minute is refused whatever it sends until the minute is over.
 */
enum auth_result auth_check(struct store *st, const char *key, const char *addr,
			    unsigned fail_limit, int64_t now, struct auth *out, int *wait,
			    enum rcs_err *err);

#endif
