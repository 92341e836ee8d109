/*
 * auth.c - API keys and roles. See auth.h.
 */
#include "auth.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "manifest.h"
#include "store_keys.h"

/*
 * Unknown keys per client address: past the limit within a minute, every
 * request until the minute is over. A fixed table, hashed by address: a
 * collision only shares a counter, it never lets a request through that
 * wouldn't have passed.
 */
#define AUTH_THROTTLE_SLOTS  1024
#define AUTH_THROTTLE_WINDOW 60
#define AUTH_ADDR_MAX        64

static struct {
	pthread_mutex_t lock;
	struct {
		char addr[AUTH_ADDR_MAX];
		int64_t window_start;
		unsigned failures;
	} slot[AUTH_THROTTLE_SLOTS];
} auth_throttle = {.lock = PTHREAD_MUTEX_INITIALIZER};

void auth_key_hash(const char *key, char out[AUTH_HASH_LEN])
{
	sha256_hex(key, strlen(key), out);
}

enum rcs_err auth_key_new(struct store *st, const char *client_root, const char *user,
			  enum role role, int64_t now, char key[64], char ident[UUID_STR_LEN])
{
	char hex[49], hash[AUTH_HASH_LEN];
	enum rcs_err err;

	err = rcs_random_hex(hex, 24);
	if (err != RCS_OK)
		goto out;
	snprintf(key, 64, "rcs_%s", hex);
	err = uuid_v7(ident);
	if (err != RCS_OK)
		goto out;
	auth_key_hash(key, hash);
	err = store_key_create(st, ident, client_root, user, role, hash, now);
out:
	explicit_bzero(hex, sizeof(hex));
	return err;
}

static unsigned auth_throttle_slot(const char *addr)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *addr; addr++)
		h = (h ^ (unsigned char)*addr) * 16777619u;
	return h % AUTH_THROTTLE_SLOTS;
}

/* Seconds this address must still wait (0: it may go on); counts a failure when failed. */
static int auth_throttle_check(const char *addr, unsigned limit, int64_t now, bool failed)
{
	unsigned i = auth_throttle_slot(addr);
	int wait = 0;

	pthread_mutex_lock(&auth_throttle.lock);
	if (strcmp(auth_throttle.slot[i].addr, addr) != 0 ||
	    now - auth_throttle.slot[i].window_start >= AUTH_THROTTLE_WINDOW) {
		snprintf(auth_throttle.slot[i].addr, sizeof(auth_throttle.slot[i].addr), "%s",
			 addr);
		auth_throttle.slot[i].window_start = now;
		auth_throttle.slot[i].failures = 0;
	}
	if (failed)
		auth_throttle.slot[i].failures++;
	if (auth_throttle.slot[i].failures > limit)
		wait = (int)(auth_throttle.slot[i].window_start + AUTH_THROTTLE_WINDOW - now);
	pthread_mutex_unlock(&auth_throttle.lock);
	return wait > 0 ? wait : 0;
}

enum auth_result auth_check(struct store *st, const char *key, const char *addr,
			    unsigned fail_limit, int64_t now, struct auth *out, int *wait,
			    enum rcs_err *err)
{
	char hash[AUTH_HASH_LEN];
	enum auth_result res;

	*wait = 0;
	*err = RCS_OK;
	hash[0] = '\0';
	/* an address that guessed too much waits, whatever it sends now */
	if (fail_limit > 0) {
		*wait = auth_throttle_check(addr, fail_limit, now, false);
		if (*wait > 0) {
			res = AUTH_THROTTLED;
			goto out;
		}
	}
	if (key == NULL || *key == '\0') {
		res = AUTH_MISSING;
		goto out;
	}
	res = AUTH_UNKNOWN;
	if (strlen(key) <= AUTH_KEY_MAX) {
		/* looked up by its hash: the key itself is never stored nor compared */
		auth_key_hash(key, hash);
		*err = store_key_lookup(st, hash, out);
		if (*err == RCS_OK)
			res = AUTH_OK;
		else if (*err != RCS_ERR_NOTFOUND)
			res = AUTH_ERROR;
	}
	if (res == AUTH_UNKNOWN && fail_limit > 0)
		auth_throttle_check(addr, fail_limit, now, true);
out:
	explicit_bzero(hash, sizeof(hash));
	return res;
}
