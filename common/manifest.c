/*
 * manifest.c - the task signature manifest, SHA-256, base64 and ES256 keys,
 * signatures and key ids on mbedtls 2.28 (docs/signing.md).
 */
#include "manifest.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/md.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>

#include "canon.h"
#include "jsonu.h"
#include "text.h"

#define KEY_FILE_MAX   (64 * 1024) /* a PEM EC key is well under 1 KiB */
#define PUBKEY_DER_MAX 256         /* a P-256 SubjectPublicKeyInfo is 91 bytes */
#define SIG_DER_MAX    128         /* a P-256 ECDSA signature is at most 72 bytes */

struct sig_key {
	mbedtls_pk_context pk;
	bool priv;
	char id[KEY_ID_LEN];
};

/*
 * mbedtls takes a non-const context for signing and verifying: on first use
 * ECDSA caches a precomputed table in the key's curve group. The key object
 * itself is always heap-allocated by us, so dropping const is defined; it does
 * mean one key must not be used by two threads at once.
 */
static mbedtls_pk_context *key_pk(const struct sig_key *k)
{
	return (mbedtls_pk_context *)&k->pk;
}

/* ---- manifest ---- */

static bool has_newline(const char *s)
{
	return strpbrk(s, "\r\n") != NULL;
}

static enum rcs_err append_canon_line(struct buf *out, const char *label, json_object *v)
{
	enum rcs_err err = buf_appendf(out, "%s: ", label);

	if (err == RCS_OK)
		err = v != NULL ? canon_json(v, out) : buf_append(out, "{}", 2);
	if (err == RCS_OK)
		err = buf_append(out, "\n", 1);
	return err;
}

bool manifest_is_v2(const struct manifest_in *in)
{
	return in->artifacts != NULL && json_object_is_type(in->artifacts, json_type_object) &&
	       json_object_object_length(in->artifacts) > 0;
}

/* The lines manifest v2 adds (docs/signing.md): artifacts, then release (null when none). */
static enum rcs_err append_v2_lines(struct buf *out, const struct manifest_in *in)
{
	enum rcs_err err = append_canon_line(out, "artifacts", in->artifacts);

	if (err == RCS_OK && in->release != NULL)
		err = append_canon_line(out, "release", in->release);
	else if (err == RCS_OK)
		err = buf_append(out, "release: null\n", 14);
	return err;
}

enum rcs_err manifest_build(const struct manifest_in *in, struct buf *out)
{
	bool v2 = manifest_is_v2(in);
	char script_hex[SHA256_HEX_LEN];
	size_t start = out->len;
	enum rcs_err err = RCS_ERR_INVAL;

	if (in->client_root == NULL || in->task_ident == NULL || in->script_name == NULL ||
	    (in->script == NULL && in->script_len > 0))
		goto out;
	if (in->artifacts != NULL && !json_object_is_type(in->artifacts, json_type_object))
		goto out;
	if (has_newline(in->client_root) || has_newline(in->task_ident) ||
	    has_newline(in->script_name))
		goto out;
	sha256_hex(in->script != NULL ? in->script : "", in->script_len, script_hex);

	err = buf_appendf(out,
			  "rcs-task-signature-v%d\n"
			  "client_root: %s\n"
			  "task: %s\n"
			  "version: %lld\n"
			  "script: %s\n"
			  "script_sha256: %s\n",
			  v2 ? 2 : 1, in->client_root, in->task_ident, in->version, in->script_name,
			  script_hex);
	if (err == RCS_OK)
		err = append_canon_line(out, "constants", in->constants);
	if (err == RCS_OK)
		err = append_canon_line(out, "variables_info", in->variables_info);
	if (err == RCS_OK && v2)
		err = append_v2_lines(out, in);
out:
	if (err != RCS_OK && out->data != NULL) { /* leave out as it was */
		out->len = start;
		out->data[start] = '\0';
	}
	return err;
}

/* ---- SHA-256, base64 ---- */

void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN])
{
	unsigned char hash[32];

	/* the software SHA-256 of mbedtls cannot fail; an empty string never matches a hash */
	if (mbedtls_sha256_ret(data, n, hash, 0) != 0) {
		out[0] = '\0';
		return;
	}
	text_hex_encode(hash, sizeof(hash), out);
}

enum rcs_err b64_encode(const void *in, size_t n, char *out, size_t out_cap)
{
	size_t olen = 0;

	if (out_cap == 0)
		return RCS_ERR_TOOBIG;
	out[0] = '\0'; /* mbedtls writes nothing for empty input */
	if (mbedtls_base64_encode((unsigned char *)out, out_cap, &olen, in, n) != 0)
		return RCS_ERR_TOOBIG;
	return RCS_OK;
}

/*
 * mbedtls accepts line breaks and some spaces inside base64; a signature value
 * is one canonical token, so only the alphabet and final padding pass.
 */
static bool b64_strict(const char *in, size_t n)
{
	size_t pad = 0;

	if (n % 4 != 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = in[i];

		if (c == '=') {
			pad++;
			continue;
		}
		if (pad > 0)
			return false;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '+' || c == '/'))
			return false;
	}
	return pad <= 2;
}

enum rcs_err b64_decode(const char *in, unsigned char *out, size_t out_cap, size_t *out_len)
{
	size_t n = strlen(in), olen = 0;
	int ret;

	*out_len = 0;
	if (!b64_strict(in, n))
		return RCS_ERR_INVAL;
	ret = mbedtls_base64_decode(out, out_cap, &olen, (const unsigned char *)in, n);
	if (ret == MBEDTLS_ERR_BASE64_BUFFER_TOO_SMALL)
		return RCS_ERR_TOOBIG;
	if (ret != 0)
		return RCS_ERR_INVAL;
	*out_len = olen;
	return RCS_OK;
}

/* ---- keys ---- */

/* Reads a whole file of at most max bytes, NUL-terminated; *len counts the NUL. */
static enum rcs_err read_file(const char *path, size_t max, unsigned char **out, size_t *len)
{
	FILE *f = NULL;
	unsigned char *data = NULL;
	size_t n = 0;
	enum rcs_err err = RCS_ERR_IO;

	*out = NULL;
	*len = 0;
	f = fopen(path, "rb");
	if (f == NULL)
		goto out;
	data = malloc(max + 1);
	if (data == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	n = fread(data, 1, max + 1, f);
	if (ferror(f))
		goto out;
	if (n > max) {
		err = RCS_ERR_TOOBIG;
		goto out;
	}
	data[n] = '\0';
	*out = data;
	*len = n + 1;
	data = NULL;
	err = RCS_OK;
out:
	if (data != NULL) {
		mbedtls_platform_zeroize(data, max + 1);
		free(data);
	}
	if (f != NULL)
		fclose(f);
	return err;
}

static bool pk_is_p256(mbedtls_pk_context *pk)
{
	mbedtls_pk_type_t t = mbedtls_pk_get_type(pk);

	if (t != MBEDTLS_PK_ECKEY && t != MBEDTLS_PK_ECDSA)
		return false;
	return mbedtls_pk_ec(*pk)->grp.id == MBEDTLS_ECP_DP_SECP256R1;
}

/*
 * Wraps a parsed P-256 context into a new sig_key. A private key stays
 * private only when want_priv; otherwise only its public half is kept (the
 * DER SubjectPublicKeyInfo re-parsed), so a public key never holds a secret.
 * pk is freed in every case.
 */
static enum rcs_err key_wrap(mbedtls_pk_context *pk, bool is_priv, bool want_priv,
			     struct sig_key **out)
{
	unsigned char der[PUBKEY_DER_MAX];
	char hash_hex[SHA256_HEX_LEN];
	struct sig_key *k = NULL;
	int n;
	enum rcs_err err = RCS_ERR_CRYPTO;

	*out = NULL;
	if (!pk_is_p256(pk))
		goto out;
	/* mbedtls_pk_write_pubkey_der writes at the end of der and returns the length */
	n = mbedtls_pk_write_pubkey_der(pk, der, sizeof(der));
	if (n <= 0)
		goto out;
	k = calloc(1, sizeof(*k));
	if (k == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	mbedtls_pk_init(&k->pk);
	if (!is_priv || want_priv) {
		k->pk = *pk; /* take over the context */
		mbedtls_pk_init(pk);
		k->priv = is_priv;
	} else if (mbedtls_pk_parse_public_key(&k->pk, der + sizeof(der) - n, (size_t)n) != 0) {
		goto out;
	}
	sha256_hex(der + sizeof(der) - n, (size_t)n, hash_hex);
	memcpy(k->id, hash_hex, KEY_ID_LEN - 1);
	k->id[KEY_ID_LEN - 1] = '\0';
	*out = k;
	k = NULL;
	err = RCS_OK;
out:
	sig_key_free(k);
	mbedtls_pk_free(pk);
	return err;
}

/*
 * Parses PEM (text of len bytes, NUL-terminated or not). want_priv: a private
 * key is required and kept; otherwise a public or private key is accepted and
 * its public half kept. pass (NULL: none) decrypts an encrypted private key:
 * RCS_ERR_AUTH when it is missing or wrong.
 */
static enum rcs_err key_parse(const char *pem, size_t len, bool want_priv, const char *pass,
			      struct sig_key **out)
{
	mbedtls_pk_context pk;
	unsigned char *text = NULL;
	bool is_priv = false;
	int rc;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	mbedtls_pk_init(&pk);
	/* mbedtls reads PEM only when the NUL is part of the length */
	if (len > 0 && pem[len - 1] == '\0')
		len--;
	if (len > KEY_FILE_MAX) {
		err = RCS_ERR_TOOBIG;
		goto out;
	}
	text = malloc(len + 1);
	if (text == NULL)
		goto out;
	memcpy(text, pem, len);
	text[len] = '\0';

	err = RCS_ERR_CRYPTO;
	if (!want_priv && mbedtls_pk_parse_public_key(&pk, text, len + 1) == 0) {
		is_priv = false;
	} else {
		mbedtls_pk_free(&pk);
		mbedtls_pk_init(&pk);
		rc = mbedtls_pk_parse_key(&pk, text, len + 1, (const unsigned char *)pass,
					  pass ? strlen(pass) : 0);
		if (rc == MBEDTLS_ERR_PK_PASSWORD_REQUIRED ||
		    rc == MBEDTLS_ERR_PK_PASSWORD_MISMATCH)
			err = RCS_ERR_AUTH;
		else if (rc != 0 && pass != NULL &&
			 strstr((const char *)text, "Proc-Type: 4,ENCRYPTED") != NULL)
			/* mbedtls tells a wrong passphrase of OpenSSL's PEM encryption only by the
			 * first two bytes it decrypts to; about one wrong passphrase in 500 gets
			 * past that and ends as a key that does not parse */
			err = RCS_ERR_AUTH;
		if (rc != 0)
			goto out;
		is_priv = true;
	}
	err = key_wrap(&pk, is_priv, want_priv, out);
out:
	if (text != NULL) {
		mbedtls_platform_zeroize(text, len + 1);
		free(text);
	}
	mbedtls_pk_free(&pk);
	return err;
}

static enum rcs_err key_load(const char *path, bool want_priv, const char *pass,
			     struct sig_key **out)
{
	unsigned char *text = NULL;
	size_t len = 0;
	enum rcs_err err;

	*out = NULL;
	err = read_file(path, KEY_FILE_MAX, &text, &len);
	if (err == RCS_OK)
		err = key_parse((const char *)text, len, want_priv, pass, out);
	if (text != NULL) {
		mbedtls_platform_zeroize(text, len);
		free(text);
	}
	return err;
}

enum rcs_err sig_key_load_private(const char *path, struct sig_key **out)
{
	return key_load(path, true, NULL, out);
}

enum rcs_err sig_key_load_public(const char *path, struct sig_key **out)
{
	return key_load(path, false, NULL, out);
}

enum rcs_err sig_key_load_pass(const char *path, const char *passphrase, bool want_priv,
			       struct sig_key **out)
{
	return key_load(path, want_priv, passphrase, out);
}

enum rcs_err sig_key_parse_public(const char *pem, size_t len, struct sig_key **out)
{
	return key_parse(pem, len, false, NULL, out);
}

const char *sig_key_id(const struct sig_key *k)
{
	return k->id;
}

void sig_key_free(struct sig_key *k)
{
	if (k == NULL)
		return;
	mbedtls_pk_free(&k->pk); /* zeroizes the private scalar */
	mbedtls_platform_zeroize(k, sizeof(*k));
	free(k);
}

/* ---- signatures ---- */

enum rcs_err sig_sign(const struct sig_key *k, const void *msg, size_t n, char *out, size_t out_cap)
{
	static const char pers[] = "rcs sig_sign";
	mbedtls_entropy_context entropy;
	mbedtls_ctr_drbg_context drbg;
	unsigned char hash[32];
	unsigned char sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
	size_t sig_len = 0;
	enum rcs_err err = RCS_ERR_CRYPTO;

	mbedtls_entropy_init(&entropy);
	mbedtls_ctr_drbg_init(&drbg);
	if (out_cap > 0)
		out[0] = '\0';
	if (!k->priv)
		goto out;
	if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy,
				  (const unsigned char *)pers, sizeof(pers) - 1) != 0)
		goto out;
	if (mbedtls_sha256_ret(msg, n, hash, 0) != 0)
		goto out;
	if (mbedtls_pk_sign(key_pk(k), MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, &sig_len,
			    mbedtls_ctr_drbg_random, &drbg) != 0)
		goto out;
	err = b64_encode(sig, sig_len, out, out_cap);
out:
	mbedtls_ctr_drbg_free(&drbg);
	mbedtls_entropy_free(&entropy);
	return err;
}

enum rcs_err sig_verify(const struct sig_key *k, const void *msg, size_t n, const char *b64sig)
{
	unsigned char hash[32];
	unsigned char sig[SIG_DER_MAX];
	size_t sig_len = 0;
	enum rcs_err err;

	err = b64_decode(b64sig, sig, sizeof(sig), &sig_len);
	if (err == RCS_ERR_TOOBIG) /* valid base64, but longer than any P-256 signature */
		return RCS_ERR_VERIFY;
	if (err != RCS_OK)
		return err;
	if (mbedtls_sha256_ret(msg, n, hash, 0) != 0)
		return RCS_ERR_CRYPTO;
	/* bad DER, trailing bytes and wrong values all fail the same way */
	if (mbedtls_pk_verify(key_pk(k), MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, sig_len) != 0)
		return RCS_ERR_VERIFY;
	return RCS_OK;
}

static bool is_key_id(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return i == KEY_ID_LEN - 1;
}

enum rcs_err sig_verify_object(struct sig_key *const *keys, size_t nkeys, json_object *sig,
			       const void *msg, size_t n)
{
	static const char *const allowed[] = {"alg", "key_id", "value", NULL};
	const char *alg = NULL, *key_id = NULL, *value = NULL;
	enum rcs_err err = RCS_ERR_INVAL;

	if (!json_object_is_type(sig, json_type_object) ||
	    jsonu_check_keys(sig, allowed, NULL) != RCS_OK ||
	    jsonu_get_string(sig, "alg", true, 16, &alg, NULL, NULL) != RCS_OK ||
	    jsonu_get_string(sig, "key_id", true, KEY_ID_LEN - 1, &key_id, NULL, NULL) != RCS_OK ||
	    jsonu_get_string(sig, "value", true, SIG_B64_MAX - 1, &value, NULL, NULL) != RCS_OK)
		return RCS_ERR_INVAL;
	if (strcmp(alg, "ES256") != 0 || !is_key_id(key_id) || !b64_strict(value, strlen(value)))
		return RCS_ERR_INVAL;

	/* ids are 64-bit prefixes: try every key that carries this one */
	err = RCS_ERR_VERIFY;
	for (size_t i = 0; i < nkeys && err != RCS_OK; i++) {
		if (keys[i] != NULL && strcmp(keys[i]->id, key_id) == 0)
			err = sig_verify(keys[i], msg, n, value);
	}
	return err;
}

/* ---- the cache of good signatures ---- */

void sig_cache_init(struct sig_cache *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
}

void sig_cache_destroy(struct sig_cache *c)
{
	explicit_bzero(c->good, sizeof(c->good));
	pthread_mutex_destroy(&c->lock);
}

bool sig_cache_digest(json_object *sig, const void *bound, size_t n, unsigned char out[32])
{
	mbedtls_sha256_context c;
	bool ok;

	if (sig == NULL || !json_object_is_type(sig, json_type_object))
		return false;
	mbedtls_sha256_init(&c);
	ok = mbedtls_sha256_starts_ret(&c, 0) == 0;
	json_object_object_foreach(sig, key, v)
	{
		uint64_t len[2];

		if (!ok || !json_object_is_type(v, json_type_string)) {
			ok = false;
			break;
		}
		len[0] = strlen(key);
		len[1] = (uint64_t)json_object_get_string_len(v);
		ok = mbedtls_sha256_update_ret(&c, (const unsigned char *)len, sizeof(len)) == 0 &&
		     mbedtls_sha256_update_ret(&c, (const unsigned char *)key, len[0]) == 0 &&
		     mbedtls_sha256_update_ret(&c, (const unsigned char *)json_object_get_string(v),
					       len[1]) == 0;
	}
	ok = ok && mbedtls_sha256_update_ret(&c, bound, n) == 0 &&
	     mbedtls_sha256_finish_ret(&c, out) == 0;
	mbedtls_sha256_free(&c);
	return ok;
}

bool sig_cache_has(struct sig_cache *c, const unsigned char d[32])
{
	bool hit = false;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->n && !hit; i++)
		hit = memcmp(c->good[i], d, 32) == 0;
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void sig_cache_put(struct sig_cache *c, const unsigned char d[32])
{
	pthread_mutex_lock(&c->lock);
	memcpy(c->good[c->next], d, 32);
	c->next = (c->next + 1) % SIG_CACHE_SLOTS;
	if (c->n < SIG_CACHE_SLOTS)
		c->n++;
	pthread_mutex_unlock(&c->lock);
}

void sig_cache_clear(struct sig_cache *c)
{
	pthread_mutex_lock(&c->lock);
	explicit_bzero(c->good, sizeof(c->good));
	c->n = c->next = 0;
	pthread_mutex_unlock(&c->lock);
}
