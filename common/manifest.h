/*
 * manifest.h - the task signature manifest (docs/signing.md), SHA-256,
 * base64 and ES256 signing/verification, all on mbedtls.
 *
 * The manifest is the exact byte string both sides sign/verify:
 *   rcs-task-signature-v1\n
 *   client_root: <client_root>\n
 *   task: <task ident>\n
 *   version: <decimal>\n
 *   script: <script name>\n
 *   script_sha256: <lowercase hex sha256 of the script bytes>\n
 *   constants: <JCS of constants, {} when none>\n
 *   variables_info: <JCS of variables_info, {} when none>\n
 * A task with artifacts is signed over manifest v2: the same text with its first line
 * rcs-task-signature-v2 and two more lines after variables_info:
 *   artifacts: <JCS of {"<name>": {"sha256": "<hex>", "size": <bytes>}}>\n
 *   release: <JCS of {"stream","seq","device_types","allow_downgrade"}, or null>\n
 * A signature value is base64 (standard, padded) of the DER ECDSA P-256
 * signature over SHA-256 of the manifest, as `openssl dgst -sha256 -sign`
 * makes it. A key id is the first 16 hex chars of SHA-256 of the public key's
 * DER SubjectPublicKeyInfo.
 */
#ifndef RCS_MANIFEST_H
#define RCS_MANIFEST_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"

#define SHA256_HEX_LEN 65  /* 64 + NUL */
#define KEY_ID_LEN     17  /* 16 + NUL */
#define SIG_B64_MAX    200 /* base64 of a DER P-256 signature (<= 72 bytes) + NUL, rounded up */
#define MANIFEST_MAX   (256 * 1024)

struct manifest_in {
	const char *client_root;
	const char *task_ident;
	long long version;
	const char *script_name;
	const char *script; /* exact bytes */
	size_t script_len;
	json_object *constants;      /* NULL means {} */
	json_object *variables_info; /* NULL means {} */
	/* {"<name>": {"sha256", "size"}}: NULL or {} makes manifest v1 (no artifacts), else v2 */
	json_object *artifacts;
	json_object *release; /* v2 only: NULL means null */
};

/* Whether in is signed over manifest v2 (it has artifacts). */
bool manifest_is_v2(const struct manifest_in *in);

/* Appends the manifest to out (buf_init'ed by the caller, MANIFEST_MAX is a
 * fitting ceiling). RCS_ERR_INVAL if a string field is NULL or holds a CR or
 * LF (script may be NULL only with script_len 0), or if constants,
 * variables_info, artifacts or release fail canon_json (artifacts not an object); RCS_ERR_TOOBIG
 * past out's ceiling. On any error out is left as it was. */
enum rcs_err manifest_build(const struct manifest_in *in, struct buf *out);

/* Lowercase hex SHA-256 of data (cannot fail with mbedtls' software SHA-256;
 * if it ever did, out is the empty string, which matches no hash). */
void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN]);

/* Standard padded base64. b64_encode writes a NUL-terminated string;
 * RCS_ERR_TOOBIG when out (with its NUL) is too small.
 * b64_decode reads a NUL-terminated string: RCS_ERR_INVAL on anything but the
 * base64 alphabet with final padding (no whitespace, length a multiple of 4),
 * RCS_ERR_TOOBIG when out is too small. */
enum rcs_err b64_encode(const void *in, size_t n, char *out, size_t out_cap);
enum rcs_err b64_decode(const char *in, unsigned char *out, size_t out_cap, size_t *out_len);

/* An EC P-256 key (private, or public only). Opaque. The key id is computed
 * when the key is loaded. mbedtls caches tables inside the key on first use,
 * so one key must not be used by two threads at the same time. */
struct sig_key;

/* Key loading errors: RCS_ERR_IO when the file can't be read, RCS_ERR_TOOBIG
 * past 64 KiB of PEM, RCS_ERR_CRYPTO when it holds no usable EC P-256 key
 * (other types, other curves, encrypted keys: RCS_ERR_AUTH), RCS_ERR_NOMEM. On success *out
 * is a new key for sig_key_free(). */

/* Loads a PEM private key (EC P-256 only; other types are RCS_ERR_CRYPTO). */
enum rcs_err sig_key_load_private(const char *path, struct sig_key **out);
/* Loads a PEM public key; a PEM private key file is accepted too (only its public
 * half is kept). */
enum rcs_err sig_key_load_public(const char *path, struct sig_key **out);
/* Loads a PEM private key that may be encrypted (PKCS#8, or OpenSSL's
 * "Proc-Type: 4,ENCRYPTED") with passphrase (NULL: none); keeps it whole with
 * want_priv, else only its public half. RCS_ERR_AUTH when the key is
 * encrypted and passphrase is NULL or wrong. */
enum rcs_err sig_key_load_pass(const char *path, const char *passphrase, bool want_priv,
			       struct sig_key **out);
/* Parses PEM text (public or private; only the public half is kept) from memory,
 * for tests and config reloads. len may or may not count a final NUL. */
enum rcs_err sig_key_parse_public(const char *pem, size_t len, struct sig_key **out);
/* 16 lowercase hex chars + NUL, owned by the key. */
const char *sig_key_id(const struct sig_key *k);
/* Frees (and wipes) the key. NULL is fine. */
void sig_key_free(struct sig_key *k);

/* Signs msg with a private key: base64 of DER ECDSA over SHA-256(msg) into out
 * (SIG_B64_MAX is enough). RCS_ERR_CRYPTO for a public-only key or an RNG or
 * signing failure, RCS_ERR_TOOBIG when out is too small. */
enum rcs_err sig_sign(const struct sig_key *k, const void *msg, size_t n, char *out,
		      size_t out_cap);
/* RCS_OK when b64sig is a valid ES256 signature of msg by k; RCS_ERR_VERIFY when not
 * (including bad DER, and base64 too long to be a P-256 signature);
 * RCS_ERR_INVAL when b64sig is not base64. */
enum rcs_err sig_verify(const struct sig_key *k, const void *msg, size_t n, const char *b64sig);

/*
 * Verifies a task "signature" object {"alg":"ES256","key_id":..,"value":..}
 * against a set of trusted keys: alg must be ES256, the key is chosen by
 * key_id. RCS_ERR_VERIFY when no trusted key has that id or the value doesn't
 * verify, RCS_ERR_INVAL when the object is malformed: not an object, a member
 * other than those three, a missing or non-string member, alg other than
 * "ES256", key_id not 16 lowercase hex, value not base64 or over SIG_B64_MAX.
 */
enum rcs_err sig_verify_object(struct sig_key *const *keys, size_t nkeys, json_object *sig,
			       const void *msg, size_t n);

/*
 * Signatures remembered as good, so that the ES256 verification (the costliest step of a
 * job on either side) runs once per task version, not once per job: the one cache both
 * daemons use. Each entry is a sig_cache_digest: the signature object's members and what
 * the caller binds it to (the agent: the manifest it verified; the coordinator: the task
 * version it belongs to). The caller checks that the signing key is still trusted before
 * it trusts a hit, and clears the cache when its keys change. Thread-safe.
 */
#define SIG_CACHE_SLOTS 64

struct sig_cache {
	pthread_mutex_t lock;
	unsigned char good[SIG_CACHE_SLOTS][32];
	unsigned n, next;
};

void sig_cache_init(struct sig_cache *c);
void sig_cache_destroy(struct sig_cache *c);
/*
 * SHA-256 over every member of sig in the order sent (each name and value after its
 * length, so a member more is another signature) and then bound (n bytes). Reads the
 * members as they are (serializing the object would write json-c's text buffer into it,
 * unsafe while another thread reads the same envelope). False when sig is not an object
 * of strings: such a signature is verified every time.
 */
bool sig_cache_digest(json_object *sig, const void *bound, size_t n, unsigned char out[32]);
bool sig_cache_has(struct sig_cache *c, const unsigned char d[32]);
void sig_cache_put(struct sig_cache *c, const unsigned char d[32]);
/* Forgets every signature (the trusted keys changed). */
void sig_cache_clear(struct sig_cache *c);

#endif
