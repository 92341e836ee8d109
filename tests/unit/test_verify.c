/*
 * test_verify.c - the agent's checks of a job envelope (agent/verify.c).
 *
 * The envelope that verifies is built from the shared vector manifest-1
 * (tests/vectors: its inputs, public key and an openssl-made signature),
 * encoded and decoded through common/proto.c as the agent receives it. Each
 * test then breaks one thing. A second key pair is made with the openssl CLI
 * in a temporary directory (those tests are skipped without openssl).
 */
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "journal.h"
#include "manifest.h"
#include "proto.h"
#include "verify.h"

#ifndef RCS_VECTORS_DIR
#define RCS_VECTORS_DIR "tests/vectors"
#endif

#define ENTITY "5d0e8c1a-94b2-4f37-a6e1-0c2b7d9f4e18"
#define OTHER  "11111111-2222-4333-8444-555555555555"
#define NOW    1732200000

static struct {
	char dir[512];
	bool have_openssl;
	json_object *vec;       /* manifest-1.json */
	char keyid[KEY_ID_LEN]; /* manifest-1.keyid */
	char *sig;              /* manifest-1.sig.b64 */
	struct sig_key *key1;   /* manifest-1.pub.pem */
	struct sig_key *key2;   /* made by openssl */
	char *sig2;             /* manifest-1.txt signed with key2 */
	struct sig_key *trusted[2];
	struct journal *j;   /* per test */
	struct verify_ctx v; /* per test */
} T;

/* ---- helpers ---- */

static const char *vectors_dir(void)
{
	const char *d = getenv("RCS_VECTORS_DIR");

	return d != NULL && *d != '\0' ? d : RCS_VECTORS_DIR;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int n, st;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(cmd))
		return -1;
	st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Reads a whole file (NUL-terminated, trailing newline kept); NULL on error. */
static char *slurp(const char *dir, const char *name)
{
	char path[1024];
	FILE *f;
	char *data = NULL;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
		rewind(f);
		data = malloc((size_t)n + 1);
		if (data != NULL && fread(data, 1, (size_t)n, f) == (size_t)n) {
			data[n] = '\0';
		} else {
			free(data);
			data = NULL;
		}
	}
	fclose(f);
	return data;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static json_object *vec(const char *key)
{
	json_object *o = NULL;

	assert_true(json_object_object_get_ex(T.vec, key, &o));
	return o;
}

/* The envelope that verifies, as the coordinator sends it (a fresh tree). */
static json_object *base(void)
{
	json_object *o = json_object_new_object(), *task = json_object_new_object();
	json_object *script = json_object_new_object(), *sig = json_object_new_object();
	json_object *vars = json_object_new_object(), *copy = NULL;
	const char *src = json_object_get_string(vec("script"));
	char sha[SHA256_HEX_LEN], job[UUID_STR_LEN];

	assert_int_equal(uuid_v7(job), RCS_OK);
	sha256_hex(src, strlen(src), sha);
	json_object_object_add(o, "v", json_object_new_int(1));
	json_object_object_add(o, "job", json_object_new_string(job));
	json_object_object_add(o, "client_root", json_object_get(vec("client_root")));
	json_object_object_add(o, "entity_ident", json_object_new_string(ENTITY));
	json_object_object_add(task, "ident", json_object_get(vec("task")));
	json_object_object_add(task, "version", json_object_get(vec("version")));
	json_object_object_add(task, "name", json_object_new_string("set a setting"));
	json_object_object_add(o, "task", task);
	json_object_object_add(script, "name", json_object_get(vec("script_name")));
	json_object_object_add(script, "sha256", json_object_new_string(sha));
	json_object_object_add(script, "source", json_object_new_string(src));
	json_object_object_add(o, "script", script);
	assert_int_equal(json_object_deep_copy(vec("constants"), &copy, NULL), 0);
	json_object_object_add(o, "constants", copy);
	copy = NULL;
	assert_int_equal(json_object_deep_copy(vec("variables_info"), &copy, NULL), 0);
	json_object_object_add(o, "variables_info", copy);
	json_object_object_add(vars, "key", json_object_new_string("unit"));
	json_object_object_add(vars, "value", json_object_new_string("C"));
	json_object_object_add(vars, "at", json_object_new_int64(NOW));
	json_object_object_add(o, "variables", vars);
	json_object_object_add(sig, "alg", json_object_new_string("ES256"));
	json_object_object_add(sig, "key_id", json_object_new_string(T.keyid));
	json_object_object_add(sig, "value", json_object_new_string(T.sig));
	json_object_object_add(o, "signature", sig);
	json_object_object_add(o, "issued_at", json_object_new_int64(NOW - 10));
	json_object_object_add(o, "expires_at", NULL);
	json_object_object_add(o, "timeout", json_object_new_int(60));
	return o;
}

static json_object *member(json_object *o, const char *key)
{
	json_object *m = NULL;

	assert_true(json_object_object_get_ex(o, key, &m));
	return m;
}

/* Replaces the script source (and its sha256, so that the envelope decodes). */
static void set_script(json_object *o, const char *src)
{
	json_object *script = member(o, "script");
	char sha[SHA256_HEX_LEN];

	sha256_hex(src, strlen(src), sha);
	json_object_object_add(script, "source", json_object_new_string(src));
	json_object_object_add(script, "sha256", json_object_new_string(sha));
}

static void set_sig(json_object *o, const char *alg, const char *key_id, const char *value)
{
	json_object *sig = member(o, "signature");

	json_object_object_add(sig, "alg", json_object_new_string(alg));
	json_object_object_add(sig, "key_id", json_object_new_string(key_id));
	json_object_object_add(sig, "value", json_object_new_string(value));
}

/* Encodes o, decodes it as the agent does (must decode), verifies; puts o. */
static enum rcs_err check(json_object *o, char *reason, size_t reason_len)
{
	struct proto_envelope env;
	struct jsonu_err e;
	const char *text;
	size_t n = 0;
	enum rcs_err err;

	text = jsonu_dump(o, &n);
	if (proto_envelope_decode(text, n, &env, &e) != RCS_OK)
		fail_msg("envelope does not decode: %s: %s", e.field, e.message);
	err = verify_envelope(&T.v, &env, NOW, reason, reason_len);
	proto_envelope_free(&env);
	json_object_put(o);
	return err;
}

/* check() with a reason buffer; asserts err and the exact reason. */
static void expect(json_object *o, enum rcs_err want, const char *want_reason)
{
	char reason[VERIFY_REASON_MAX];

	memset(reason, 'Z', sizeof(reason));
	assert_int_equal(check(o, reason, sizeof(reason)), want);
	assert_string_equal(reason, want_reason);
}

#define NEED_OPENSSL()                                                                             \
	do {                                                                                       \
		if (!T.have_openssl)                                                               \
			skip();                                                                    \
	} while (0)

/* ---- fixtures ---- */

static int group_setup(void **state)
{
	const char *base_dir = getenv("TMPDIR");
	char *s, path[1024];
	size_t n;

	(void)state;
	snprintf(T.dir, sizeof(T.dir), "%s/rcs-test-verify-XXXXXX",
		 base_dir != NULL && *base_dir != '\0' ? base_dir : "/tmp");
	if (mkdtemp(T.dir) == NULL)
		return -1;
	if ((s = slurp(vectors_dir(), "manifest-1.json")) == NULL)
		return -1;
	T.vec = json_tokener_parse(s);
	free(s);
	if ((s = slurp(vectors_dir(), "manifest-1.keyid")) == NULL)
		return -1;
	n = strcspn(s, "\n");
	s[n] = '\0';
	snprintf(T.keyid, sizeof(T.keyid), "%s", s);
	free(s);
	if ((T.sig = slurp(vectors_dir(), "manifest-1.sig.b64")) == NULL)
		return -1;
	T.sig[strcspn(T.sig, "\n")] = '\0';
	snprintf(path, sizeof(path), "%s/manifest-1.pub.pem", vectors_dir());
	if (T.vec == NULL || sig_key_load_public(path, &T.key1) != RCS_OK)
		return -1;
	if (strcmp(sig_key_id(T.key1), T.keyid) != 0)
		return -1;

	T.have_openssl = system("openssl version >/dev/null 2>&1") == 0;
	if (T.have_openssl) {
		if (sh("cd '%s' && openssl ecparam -name prime256v1 -genkey -noout -out k2.pem"
		       " && openssl ec -in k2.pem -pubout -out pub2.pem 2>/dev/null"
		       " && openssl dgst -sha256 -sign k2.pem '%s/manifest-1.txt' | base64 -w0"
		       " > sig2.b64",
		       T.dir, vectors_dir()) != 0)
			return -1;
		snprintf(path, sizeof(path), "%s/pub2.pem", T.dir);
		if (sig_key_load_public(path, &T.key2) != RCS_OK ||
		    (T.sig2 = slurp(T.dir, "sig2.b64")) == NULL)
			return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	json_object_put(T.vec);
	free(T.sig);
	free(T.sig2);
	sig_key_free(T.key1);
	sig_key_free(T.key2);
	if (T.dir[0] != '\0')
		nftw(T.dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static int setup(void **state)
{
	char path[700];

	(void)state;
	snprintf(path, sizeof(path), "%s/state", T.dir);
	if (journal_open(path, &T.j) != RCS_OK)
		return -1;
	T.trusted[0] = T.key1;
	T.trusted[1] = NULL;
	memset(&T.v, 0, sizeof(T.v));
	T.v.client_root = json_object_get_string(vec("client_root"));
	T.v.entity_ident = ENTITY;
	T.v.trusted = T.trusted;
	T.v.ntrusted = 1;
	T.v.require_signature = true;
	T.v.journal = T.j;
	return 0;
}

static int teardown(void **state)
{
	char path[700];

	(void)state;
	journal_close(T.j);
	T.j = NULL;
	snprintf(path, sizeof(path), "%s/state", T.dir);
	nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* ---- what verifies ---- */

static void test_vector_verifies(void **state)
{
	(void)state;
	expect(base(), RCS_OK, "");
	/* also with the signature not required */
	T.v.require_signature = false;
	expect(base(), RCS_OK, "");
}

static void test_manifest_uses_own_client_root(void **state)
{
	json_object *o = base();
	char upper[UUID_STR_LEN];

	(void)state;
	/* the same UUID written in capitals is ours; the manifest is built from
	 * the agent's own spelling, so the signature still verifies */
	snprintf(upper, sizeof(upper), "%s", T.v.client_root);
	for (char *p = upper; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	json_object_object_add(o, "client_root", json_object_new_string(upper));
	expect(o, RCS_OK, "");
}

static void test_second_trusted_key(void **state)
{
	json_object *o;

	(void)state;
	NEED_OPENSSL();
	/* key rotation: two trusted keys, the envelope signed by the second */
	T.trusted[1] = T.key2;
	T.v.ntrusted = 2;
	o = base();
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	expect(o, RCS_OK, "");
	expect(base(), RCS_OK, "");
}

/* A task with artifacts is signed over manifest v2 (docs/signing.md): a v1 signature of
 * the same task does not cover them, and a changed size or hash breaks the v2 one. */
static void test_manifest_v2_with_artifacts(void **state)
{
	static const char arts[] = "{\"fw\":{\"sha256\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				   "aaaaaaaaaaaaaaaaaaaaaaa\",\"size\":5000000000}}";
	char *v1, path[1024], *sig;
	json_object *o;
	FILE *f;

	(void)state;
	NEED_OPENSSL();
	T.trusted[1] = T.key2;
	T.v.ntrusted = 2;
	v1 = slurp(vectors_dir(), "manifest-1.txt");
	assert_non_null(v1);
	assert_int_equal(strncmp(v1, "rcs-task-signature-v1\n", 22), 0);
	v1[20] = '2';
	snprintf(path, sizeof(path), "%s/v2.txt", T.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%sartifacts: %s\nrelease: null\n", v1, arts);
	fclose(f);
	free(v1);
	assert_int_equal(sh("cd '%s' && openssl dgst -sha256 -sign k2.pem v2.txt | base64 -w0 >"
			    " v2.b64",
			    T.dir),
			 0);
	sig = slurp(T.dir, "v2.b64");
	assert_non_null(sig);
	sig[strcspn(sig, "\n")] = '\0';

	o = base();
	json_object_object_add(o, "artifacts", json_tokener_parse(arts));
	set_sig(o, "ES256", sig_key_id(T.key2), sig);
	expect(o, RCS_OK, "");
	/* the v1 signature of the same task: artifacts are not covered by it */
	o = base();
	json_object_object_add(o, "artifacts", json_tokener_parse(arts));
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* another size, or a release the signature does not name */
	o = base();
	json_object_object_add(
	    o, "artifacts",
	    json_tokener_parse("{\"fw\":{\"sha256\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaa"
			       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"size\":"
			       "5000000001}}"));
	set_sig(o, "ES256", sig_key_id(T.key2), sig);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base();
	json_object_object_add(o, "artifacts", json_tokener_parse(arts));
	json_object_object_add(o, "release", json_tokener_parse("{\"stream\":\"s\",\"seq\":1}"));
	set_sig(o, "ES256", sig_key_id(T.key2), sig);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* empty artifacts: manifest v1, as for a task without */
	o = base();
	json_object_object_add(o, "artifacts", json_object_new_object());
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	expect(o, RCS_OK, "");

	/* artifact_trusted_key: only those keys sign tasks with artifacts, and such a task
	 * must be signed even where unsigned tasks run */
	{
		struct sig_key *fw_keys[1] = {T.key1};
		char want[128];
		T.v.artifact_trusted = fw_keys;
		T.v.nartifact_trusted = 1;
		o = base();
		json_object_object_add(o, "artifacts", json_tokener_parse(arts));
		set_sig(o, "ES256", sig_key_id(T.key2), sig);
		snprintf(want, sizeof(want),
			 "unknown signing key %s (tasks with artifacts: artifact_trusted_key)",
			 sig_key_id(T.key2));
		expect(o, RCS_ERR_VERIFY, want);
		/* a task without artifacts still takes the trusted keys */
		o = base();
		set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
		expect(o, RCS_OK, "");
		fw_keys[0] = T.key2;
		o = base();
		json_object_object_add(o, "artifacts", json_tokener_parse(arts));
		set_sig(o, "ES256", sig_key_id(T.key2), sig);
		expect(o, RCS_OK, "");
		T.v.require_signature = false;
		o = base();
		json_object_object_add(o, "artifacts", json_tokener_parse(arts));
		json_object_object_add(o, "signature", NULL);
		expect(o, RCS_ERR_VERIFY,
		       "signature required: tasks with artifacts must be signed by an"
		       " artifact_trusted_key");
		T.v.artifact_trusted = NULL;
		T.v.nartifact_trusted = 0;
	}
	free(sig);
}

/* ---- whose ---- */

static void test_other_tenant(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(o, "client_root", json_object_new_string(OTHER));
	expect(o, RCS_ERR_FORBIDDEN, "envelope for another tenant");
	/* the agent configured for another tenant */
	T.v.client_root = OTHER;
	expect(base(), RCS_ERR_FORBIDDEN, "envelope for another tenant");
}

static void test_other_device(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(o, "entity_ident", json_object_new_string(OTHER));
	expect(o, RCS_ERR_FORBIDDEN, "envelope for another device");
}

/* ---- when ---- */

static void test_expired(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(o, "expires_at", json_object_new_int64(NOW));
	expect(o, RCS_ERR_CONFLICT, "expired at 1732200000");
	o = base();
	json_object_object_add(o, "expires_at", json_object_new_int64(NOW - 3600));
	expect(o, RCS_ERR_CONFLICT, "expired at 1732196400");
	o = base();
	json_object_object_add(o, "expires_at", json_object_new_int64(NOW + 1));
	expect(o, RCS_OK, "");
}

/* ---- signatures ---- */

static void test_unsigned(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_VERIFY, "signature required");
	T.v.require_signature = false;
	o = base();
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_OK, "");
	/* no trusted key at all: unsigned runs only when not required */
	T.v.ntrusted = 0;
	T.v.trusted = NULL;
	o = base();
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_OK, "");
	T.v.require_signature = true;
	o = base();
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_VERIFY, "signature required");
}

static void test_unknown_key(void **state)
{
	char want[128];
	json_object *o;

	(void)state;
	NEED_OPENSSL();
	/* a valid signature of the right manifest, by a key the agent does not trust */
	o = base();
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	snprintf(want, sizeof(want), "unknown signing key %s", sig_key_id(T.key2));
	expect(o, RCS_ERR_VERIFY, want);
	/* refused even when signatures are not required: a signature must verify */
	T.v.require_signature = false;
	o = base();
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	expect(o, RCS_ERR_VERIFY, want);
	/* no trusted keys */
	T.v.ntrusted = 0;
	snprintf(want, sizeof(want), "unknown signing key %s", T.keyid);
	expect(base(), RCS_ERR_VERIFY, want);
}

/* A signature that verified is remembered: the next jobs of that task version skip the
 * ES256 check, but nothing else changes. */
static void test_remembered_signature(void **state)
{
	json_object *o;
	char want[128];

	unsigned long checked;

	(void)state;
	verify_forget_signatures();
	checked = verify_signatures_checked();
	expect(base(), RCS_OK, "");
	assert_int_equal(verify_signatures_checked(), checked + 1);
	expect(base(), RCS_OK, "");
	expect(base(), RCS_OK, "");
	assert_int_equal(verify_signatures_checked(), checked + 1); /* remembered */
	/* after the keys changed (SIGHUP) each signature is checked again, once */
	verify_forget_signatures();
	expect(base(), RCS_OK, "");
	expect(base(), RCS_OK, "");
	assert_int_equal(verify_signatures_checked(), checked + 2);
	/* the same signature over another script: a different manifest, checked and refused */
	o = base();
	set_script(o, "return 'not what was signed'\n");
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	assert_int_equal(verify_signatures_checked(), checked + 3);
	/* the remembered signature with a member more is another object: checked, refused */
	o = base();
	json_object_object_add(member(o, "signature"), "x5u", json_object_new_string("http://x"));
	expect(o, RCS_ERR_INVAL, "malformed signature");
	assert_int_equal(verify_signatures_checked(), checked + 4);
	/* the key is no longer trusted: refused before anything remembered counts */
	T.v.ntrusted = 0;
	snprintf(want, sizeof(want), "unknown signing key %s", T.keyid);
	expect(base(), RCS_ERR_VERIFY, want);
}

static void test_other_key_claims_trusted_id(void **state)
{
	json_object *o;

	(void)state;
	NEED_OPENSSL();
	o = base();
	set_sig(o, "ES256", T.keyid, T.sig2);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
}

static void test_tampered_script(void **state)
{
	json_object *o = base();
	char *src = strdup(json_object_get_string(vec("script")));

	(void)state;
	assert_non_null(src);
	src[strlen(src) - 3] ^= 1; /* one bit of one byte */
	set_script(o, src);
	free(src);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* also when signatures are not required */
	T.v.require_signature = false;
	o = base();
	set_script(o, "return os.execute('reboot')\n");
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
}

static void test_tampered_constant(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(member(o, "constants"), "retries", json_object_new_int(4));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* a constant added */
	o = base();
	json_object_object_add(member(o, "constants"), "extra", json_object_new_int(1));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
}

static void test_tampered_other_fields(void **state)
{
	json_object *o = base();

	(void)state;
	/* version, task, script name and variables_info are all signed */
	json_object_object_add(member(o, "task"), "version", json_object_new_int(4));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base();
	json_object_object_add(member(o, "task"), "ident", json_object_new_string(OTHER));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base();
	json_object_object_add(member(o, "script"), "name", json_object_new_string("exec.lua"));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base();
	json_object_object_del(member(o, "variables_info"), "level");
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* a flipped bit of the signature itself */
	o = base();
	{
		char *sig = strdup(T.sig);

		assert_non_null(sig);
		sig[10] = sig[10] == 'A' ? 'B' : 'A';
		set_sig(o, "ES256", T.keyid, sig);
		free(sig);
	}
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
}

/* ---- manifest v2: an envelope with artifacts (docs/signing.md) ---- */

static const char ART_SHA[] = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";

/* base() with one artifact and a release (release_json NULL: null). */
static json_object *base_v2(const char *release_json)
{
	json_object *o = base(), *arts = json_object_new_object(), *one = json_object_new_object();

	json_object_object_add(one, "sha256", json_object_new_string(ART_SHA));
	json_object_object_add(one, "size", json_object_new_int64(3));
	json_object_object_add(arts, "firmware", one);
	json_object_object_add(o, "artifacts", arts);
	json_object_object_add(o, "release",
			       release_json ? json_tokener_parse(release_json) : NULL);
	json_object_object_add(o, "download_timeout", json_object_new_int(3600));
	json_object_object_add(o, "artifact_token", json_object_new_string("rcs1.opaque"));
	return o;
}

/* Signs o's manifest (as the agent rebuilds it: our client_root) with key 2 (openssl), as
 * an operator signs offline, and sets that signature on o. */
static void sign_v2(json_object *o)
{
	struct proto_envelope env;
	struct manifest_in in;
	struct jsonu_err e;
	struct buf m;
	const char *text;
	char path[700], *sig;
	size_t n = 0;
	FILE *f;

	text = jsonu_dump(o, &n);
	assert_int_equal(proto_envelope_decode(text, n, &env, &e), RCS_OK);
	memset(&in, 0, sizeof(in));
	in.client_root = T.v.client_root;
	in.task_ident = env.task_ident;
	in.version = env.task_version;
	in.script_name = env.script_name;
	in.script = env.script_source;
	in.script_len = env.script_len;
	in.constants = env.constants;
	in.variables_info = env.variables_info;
	in.artifacts = env.artifacts;
	in.release = env.release;
	buf_init(&m, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &m), RCS_OK);
	assert_memory_equal(m.data, "rcs-task-signature-v2\n", 22);
	snprintf(path, sizeof(path), "%s/v2.txt", T.dir);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(m.data, 1, m.len, f), m.len);
	fclose(f);
	buf_free(&m);
	proto_envelope_free(&env);
	assert_int_equal(sh("cd '%s' && openssl dgst -sha256 -sign k2.pem v2.txt | base64 -w0"
			    " > v2.b64",
			    T.dir),
			 0);
	sig = slurp(T.dir, "v2.b64");
	assert_non_null(sig);
	set_sig(o, "ES256", sig_key_id(T.key2), sig);
	free(sig);
}

static void test_manifest_v2(void **state)
{
	static const char rel[] =
	    "{\"stream\":\"stable\",\"seq\":7,\"device_types\":[\"gw\"],\"allow_downgrade\":false}";
	json_object *o;

	(void)state;
	NEED_OPENSSL();
	T.trusted[1] = T.key2;
	T.v.ntrusted = 2;
	/* signed offline over manifest v2: verifies, with a release and with none */
	o = base_v2(rel);
	sign_v2(o);
	expect(o, RCS_OK, "");
	o = base_v2(NULL);
	sign_v2(o);
	expect(o, RCS_OK, "");
	/* a v1 signature of the same task does not cover artifacts */
	o = base_v2(NULL);
	set_sig(o, "ES256", sig_key_id(T.key2), T.sig2);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* every artifact byte and the release are signed */
	o = base_v2(rel);
	sign_v2(o);
	json_object_object_add(member(member(o, "artifacts"), "firmware"), "size",
			       json_object_new_int64(4));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base_v2(rel);
	sign_v2(o);
	json_object_object_add(
	    member(member(o, "artifacts"), "firmware"), "sha256",
	    json_object_new_string(
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base_v2(rel);
	sign_v2(o);
	json_object_object_add(member(o, "release"), "seq", json_object_new_int(6));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	o = base_v2(rel);
	sign_v2(o);
	json_object_object_add(o, "release", NULL);
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* the artifacts stripped: the v1 manifest is not what was signed */
	o = base_v2(NULL);
	sign_v2(o);
	json_object_object_del(o, "artifacts");
	json_object_object_del(o, "release");
	json_object_object_del(o, "download_timeout");
	json_object_object_del(o, "artifact_token");
	expect(o, RCS_ERR_VERIFY, "signature does not verify");
	/* the token and the download's deadline are not signed: changing them verifies */
	o = base_v2(NULL);
	sign_v2(o);
	json_object_object_add(o, "artifact_token", json_object_new_string("rcs1.other"));
	json_object_object_add(o, "download_timeout", json_object_new_int(60));
	expect(o, RCS_OK, "");
}

static void test_alg_not_es256(void **state)
{
	json_object *o = base();

	(void)state;
	/* the algorithm is the agent's, never the message's */
	set_sig(o, "RS256", T.keyid, T.sig);
	expect(o, RCS_ERR_VERIFY, "signature algorithm 'RS256' not accepted (ES256 only)");
	o = base();
	set_sig(o, "none", T.keyid, T.sig);
	expect(o, RCS_ERR_VERIFY, "signature algorithm 'none' not accepted (ES256 only)");
	o = base();
	set_sig(o, "es256", T.keyid, T.sig);
	expect(o, RCS_ERR_VERIFY, "signature algorithm 'es256' not accepted (ES256 only)");
	o = base();
	set_sig(o, "ES256\nfake: line", T.keyid, T.sig);
	expect(o, RCS_ERR_VERIFY, "signature algorithm not accepted (ES256 only)");
}

static void test_malformed_signature(void **state)
{
	json_object *o = base();

	(void)state;
	set_sig(o, "ES256", "B255191ED6E233E2", T.sig); /* key ids are lowercase */
	expect(o, RCS_ERR_INVAL, "malformed signature");
	o = base();
	set_sig(o, "ES256", T.keyid, "not base64!");
	expect(o, RCS_ERR_INVAL, "malformed signature");
	o = base();
	json_object_object_add(member(o, "signature"), "x5u", json_object_new_string("http://x"));
	expect(o, RCS_ERR_INVAL, "malformed signature");
	o = base();
	json_object_object_del(member(o, "signature"), "alg");
	expect(o, RCS_ERR_INVAL, "malformed signature");
	o = base();
	json_object_object_add(o, "signature", json_object_new_object());
	expect(o, RCS_ERR_INVAL, "malformed signature");
}

/* ---- rollback ---- */

static void test_older_version(void **state)
{
	const char *task = json_object_get_string(vec("task"));

	(void)state;
	assert_int_equal(journal_task_version_set(T.j, task, 5), RCS_OK);
	expect(base(), RCS_ERR_CONFLICT, "task version 3 is older than version 5 already run");
	/* other tasks are not affected; the same version again is fine */
	journal_close(T.j);
	T.j = NULL;
	assert_int_equal(teardown(NULL), 0);
	assert_int_equal(setup(NULL), 0);
	assert_int_equal(journal_task_version_set(T.j, OTHER, 9), RCS_OK);
	assert_int_equal(journal_task_version_set(T.j, task, 3), RCS_OK);
	expect(base(), RCS_OK, "");
	/* checked after the signature: an unsigned old version says "signature required" */
	assert_int_equal(journal_task_version_set(T.j, task, 4), RCS_OK);
	{
		json_object *o = base();

		json_object_object_add(o, "signature", NULL);
		expect(o, RCS_ERR_VERIFY, "signature required");
	}
	T.v.journal = NULL;
	expect(base(), RCS_ERR_INVAL, "agent misconfigured");
}

/* ---- variables ---- */

static void test_bad_variables(void **state)
{
	json_object *o = base();

	(void)state;
	json_object_object_add(member(o, "variables"), "key", json_object_new_int(5));
	expect(o, RCS_ERR_INVAL, "variables.key: 'variables.key' must be of type string");
	o = base();
	json_object_object_del(member(o, "variables"), "value");
	expect(o, RCS_ERR_INVAL, "variables.value: variable 'value' is required");
	o = base();
	json_object_object_add(member(o, "variables"), "extra", json_object_new_int(5));
	expect(o, RCS_ERR_INVAL, "variables.extra: unknown variable 'extra'");
	o = base();
	json_object_object_add(member(o, "variables"), "at", json_object_new_int(-1));
	expect(o, RCS_ERR_INVAL, "variables.at: 'variables.at' must be of type timestamp");
	/* optional ones may be left out */
	o = base();
	json_object_object_del(member(o, "variables"), "at");
	expect(o, RCS_OK, "");
}

static void test_variables_unsigned(void **state)
{
	json_object *o = base(), *vi = json_object_new_object(), *d = json_object_new_object();
	json_object *vars = json_object_new_object();

	(void)state;
	T.v.require_signature = false;
	json_object_object_add(d, "type", json_object_new_string("integer"));
	json_object_object_add(vi, "delay", d);
	json_object_object_add(vars, "delay", json_object_new_string("soon"));
	json_object_object_add(o, "variables_info", vi);
	json_object_object_add(o, "variables", vars);
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_INVAL, "variables.delay: 'variables.delay' must be of type integer");

	/* a malformed variables_info is refused, not trusted */
	o = base();
	vi = json_object_new_object();
	json_object_object_add(vi, "delay", json_object_new_object());
	json_object_object_add(o, "variables_info", vi);
	json_object_object_add(o, "variables", json_object_new_object());
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_INVAL,
	       "variables_info.delay.type: 'variables_info.delay.type' is required and must be a"
	       " string");
}

/* ---- the first failure decides; reasons are bounded ---- */

static void test_order_and_reason(void **state)
{
	json_object *o = base();
	char small[12];

	(void)state;
	/* another device and expired and unsigned: the device */
	json_object_object_add(o, "entity_ident", json_object_new_string(OTHER));
	json_object_object_add(o, "expires_at", json_object_new_int64(NOW - 1));
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_FORBIDDEN, "envelope for another device");
	/* expired and unsigned: expired */
	o = base();
	json_object_object_add(o, "expires_at", json_object_new_int64(NOW - 1));
	json_object_object_add(o, "signature", NULL);
	expect(o, RCS_ERR_CONFLICT, "expired at 1732199999");
	/* bad signature and bad variables: the signature */
	o = base();
	json_object_object_add(member(o, "constants"), "retries", json_object_new_int(4));
	json_object_object_add(member(o, "variables"), "key", json_object_new_int(5));
	expect(o, RCS_ERR_VERIFY, "signature does not verify");

	/* truncated to the buffer, always terminated; no buffer is fine */
	o = base();
	json_object_object_add(o, "entity_ident", json_object_new_string(OTHER));
	memset(small, 'Z', sizeof(small));
	assert_int_equal(check(o, small, sizeof(small)), RCS_ERR_FORBIDDEN);
	assert_string_equal(small, "envelope fo");
	o = base();
	json_object_object_add(o, "entity_ident", json_object_new_string(OTHER));
	assert_int_equal(check(o, NULL, 0), RCS_ERR_FORBIDDEN);
	assert_int_equal(verify_envelope(NULL, NULL, NOW, small, sizeof(small)), RCS_ERR_INVAL);
}

/* ---- two threads verifying with the same keys ---- */

static void *verifier(void *arg)
{
	struct proto_envelope *env = arg;
	char reason[VERIFY_REASON_MAX];

	for (int i = 0; i < 20; i++) {
		if (verify_envelope(&T.v, env, NOW, reason, sizeof(reason)) != RCS_OK)
			return (void *)1;
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct proto_envelope env;
	struct jsonu_err e;
	json_object *o = base();
	const char *text;
	pthread_t t[3];
	void *r;
	size_t n;

	(void)state;
	text = jsonu_dump(o, &n);
	assert_int_equal(proto_envelope_decode(text, n, &env, &e), RCS_OK);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, verifier, &env), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(t[i], &r), 0);
		assert_null(r);
	}
	proto_envelope_free(&env);
	json_object_put(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_vector_verifies, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_manifest_v2_with_artifacts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_manifest_uses_own_client_root, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_second_trusted_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_tenant, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_device, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_expired, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unsigned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unknown_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remembered_signature, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_key_claims_trusted_id, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tampered_script, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tampered_constant, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tampered_other_fields, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_manifest_v2, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_alg_not_es256, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_malformed_signature, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_older_version, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_variables, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_variables_unsigned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_order_and_reason, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
