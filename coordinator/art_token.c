/*
 * art_token.c - artifact tokens: made and checked with HMAC-SHA256 under the store's
 * secrets. See art_token.h.
 */
#include "art_token.h"

#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store_downloads.h"
#include "text.h"

#define TOKEN_PREFIX "rcs1."
#define TOKEN_BODY   56 /* three UUIDs and the issue time */
#define TOKEN_RAW    (TOKEN_BODY + 32)
#define TOKEN_RELOAD 5 /* seconds between two reads of the secrets after a miss */
#define SECRET_BYTES (STORE_TOKEN_SECRET_HEX / 2)

struct art_tokens {
	struct store *st;
	pthread_mutex_t lock;
	unsigned char secret[STORE_TOKEN_SECRETS][SECRET_BYTES];
	size_t n;
	int64_t read_at;
};

/* The secrets of the store into t (under its lock). */
static enum rcs_err tokens_read(struct art_tokens *t, int64_t now)
{
	char hex[STORE_TOKEN_SECRETS][STORE_TOKEN_SECRET_HEX + 1];
	size_t n = 0;
	enum rcs_err err = store_token_secrets(t->st, now, hex, STORE_TOKEN_SECRETS, &n);

	for (size_t i = 0; err == RCS_OK && i < n; i++)
		if (!text_hex_decode(hex[i], SECRET_BYTES, t->secret[i]))
			err = RCS_ERR_DB; /* a secret the store keeps is hex (docs/mqtt.md) */
	if (err == RCS_OK)
		t->n = n;
	t->read_at = now;
	explicit_bzero(hex, sizeof(hex));
	return err;
}

enum rcs_err art_tokens_open(struct store *st, int64_t now, struct art_tokens **out)
{
	struct art_tokens *t = calloc(1, sizeof(*t));
	enum rcs_err err;

	*out = NULL;
	if (t == NULL)
		return RCS_ERR_NOMEM;
	t->st = st;
	pthread_mutex_init(&t->lock, NULL);
	err = tokens_read(t, now);
	if (err != RCS_OK) {
		art_tokens_free(t);
		return err;
	}
	*out = t;
	return RCS_OK;
}

void art_tokens_free(struct art_tokens *t)
{
	if (t == NULL)
		return;
	pthread_mutex_destroy(&t->lock);
	explicit_bzero(t, sizeof(*t));
	free(t);
}

/* A UUID's 16 bytes: false when s is not one. */
static bool uuid_bytes(const char *s, unsigned char out[16])
{
	size_t k = 0;

	if (!uuid_valid(s))
		return false;
	for (size_t i = 0; s[i] != '\0' && k < 16; i++) {
		if (s[i] == '-')
			continue;
		if (!text_hex_decode(s + i, 1, out + k++))
			return false;
		i++;
	}
	return k == 16;
}

static void uuid_text(const unsigned char b[16], char out[UUID_STR_LEN])
{
	snprintf(out, UUID_STR_LEN,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
}

static bool token_hmac(const unsigned char *key, const unsigned char *body, unsigned char mac[32])
{
	return mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, SECRET_BYTES,
			       body, TOKEN_BODY, mac) == 0;
}

enum rcs_err art_token_make(struct art_tokens *t, const char *job, const char *device,
			    const char *tenant, int64_t now, char out[ART_TOKEN_MAX])
{
	unsigned char raw[TOKEN_RAW];
	char b64[ART_TOKEN_MAX];
	size_t olen = 0, w = 0;
	bool ok;

	out[0] = '\0';
	if (!uuid_bytes(job, raw) || !uuid_bytes(device, raw + 16) || !uuid_bytes(tenant, raw + 32))
		return RCS_ERR_INVAL;
	for (int i = 0; i < 8; i++)
		raw[48 + i] = (unsigned char)((uint64_t)now >> (56 - 8 * i));
	pthread_mutex_lock(&t->lock);
	ok = t->n > 0 && token_hmac(t->secret[0], raw, raw + TOKEN_BODY);
	pthread_mutex_unlock(&t->lock);
	if (!ok ||
	    mbedtls_base64_encode((unsigned char *)b64, sizeof(b64), &olen, raw, sizeof(raw)) != 0)
		return RCS_ERR_CRYPTO;
	/* base64url without padding */
	w = (size_t)snprintf(out, ART_TOKEN_MAX, "%s", TOKEN_PREFIX);
	for (size_t i = 0; i < olen && b64[i] != '=' && w + 1 < ART_TOKEN_MAX; i++)
		out[w++] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
	out[w] = '\0';
	return RCS_OK;
}

/* Whether a and b (n bytes) are equal, in a time that does not depend on where they differ. */
static bool same_bytes(const unsigned char *a, const unsigned char *b, size_t n)
{
	unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

/* Whether a secret of t signed raw (under t's lock). */
static bool token_signed(struct art_tokens *t, const unsigned char raw[TOKEN_RAW])
{
	unsigned char mac[32];
	bool ok = false;

	for (size_t i = 0; i < t->n; i++)
		if (token_hmac(t->secret[i], raw, mac) && same_bytes(mac, raw + TOKEN_BODY, 32))
			ok = true;
	explicit_bzero(mac, sizeof(mac));
	return ok;
}

enum rcs_err art_token_check(struct art_tokens *t, const char *token, char job[UUID_STR_LEN],
			     char device[UUID_STR_LEN], char tenant[UUID_STR_LEN])
{
	unsigned char raw[TOKEN_RAW + 4];
	char b64[ART_TOKEN_MAX];
	size_t n, olen = 0, p = sizeof(TOKEN_PREFIX) - 1;
	int64_t now = (int64_t)time(NULL);
	bool ok;

	if (token == NULL || strncmp(token, TOKEN_PREFIX, p) != 0)
		return RCS_ERR_AUTH;
	n = strlen(token + p);
	if (n == 0 || n + 4 >= sizeof(b64))
		return RCS_ERR_AUTH;
	for (size_t i = 0; i < n; i++) {
		char c = token[p + i];

		if (c == '+' || c == '/' || c == '=')
			return RCS_ERR_AUTH; /* base64url only */
		b64[i] = c == '-' ? '+' : c == '_' ? '/' : c;
	}
	while (n % 4 != 0)
		b64[n++] = '=';
	b64[n] = '\0';
	if (mbedtls_base64_decode(raw, sizeof(raw), &olen, (const unsigned char *)b64, n) != 0 ||
	    olen != TOKEN_RAW)
		return RCS_ERR_AUTH;
	pthread_mutex_lock(&t->lock);
	ok = token_signed(t, raw);
	if (!ok && now - t->read_at >= TOKEN_RELOAD) {
		/* another coordinator may have added a secret since */
		if (tokens_read(t, now) != RCS_OK)
			log_warnx("artifact tokens: the secrets cannot be read again");
		ok = token_signed(t, raw);
	}
	pthread_mutex_unlock(&t->lock);
	if (!ok)
		return RCS_ERR_AUTH;
	uuid_text(raw, job);
	uuid_text(raw + 16, device);
	uuid_text(raw + 32, tenant);
	return RCS_OK;
}
