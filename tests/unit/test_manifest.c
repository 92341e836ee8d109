/*
 * test_manifest.c - the signature manifest, SHA-256, base64, ES256 keys and
 * signatures, checked against the shared vectors and the openssl CLI (which
 * is what operators sign with, docs/signing.md).
 *
 * Keys are generated at test time with openssl in a temporary directory; the
 * tests that need openssl are skipped when it is not installed. The vectors
 * directory comes from the RCS_VECTORS_DIR compile definition, or the
 * RCS_VECTORS_DIR environment variable when set.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "buf.h"
#include "jsonu.h"
#include "manifest.h"

#ifndef RCS_VECTORS_DIR
#define RCS_VECTORS_DIR "tests/vectors"
#endif

static struct {
	bool have_openssl;
	char dir[512];
} T;

static const char *vectors_dir(void)
{
	const char *d = getenv("RCS_VECTORS_DIR");

	return d != NULL && *d != '\0' ? d : RCS_VECTORS_DIR;
}

/* Runs a shell command made from fmt; returns its exit status (-1 if it died). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int n, st;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < sizeof(cmd));
	st = system(cmd);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Path of a file in the temporary directory (static buffer, rotating). */
static const char *tmp(const char *name)
{
	static char paths[4][1024];
	static int next;
	char *p = paths[next++ % 4];

	snprintf(p, sizeof(paths[0]), "%s/%s", T.dir, name);
	return p;
}

static char *read_path(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data;
	long n;

	if (f == NULL)
		fail_msg("cannot open %s", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	data = malloc((size_t)n + 1);
	assert_non_null(data);
	assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
	data[n] = '\0';
	fclose(f);
	if (len != NULL)
		*len = (size_t)n;
	return data;
}

static char *read_vector(const char *name, size_t *len)
{
	char path[1024];

	snprintf(path, sizeof(path), "%s/%s", vectors_dir(), name);
	return read_path(path, len);
}

static void write_path(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* ---- fixture: keys made by openssl ---- */

static int group_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	(void)state;
	snprintf(T.dir, sizeof(T.dir), "%s/rcs-test-manifest-XXXXXX",
		 base != NULL && *base != '\0' ? base : "/tmp");
	if (mkdtemp(T.dir) == NULL)
		return -1;
	T.have_openssl = system("openssl version >/dev/null 2>&1") == 0;
	if (!T.have_openssl)
		return 0;
	/* the key pair of the brief, a second one, and keys we must refuse */
	if (sh("cd '%s' && openssl ecparam -name prime256v1 -genkey -noout -out k.pem"
	       " && openssl ec -in k.pem -pubout -out pub.pem 2>/dev/null"
	       " && openssl ecparam -name prime256v1 -genkey -noout -out k2.pem"
	       " && openssl ec -in k2.pem -pubout -out pub2.pem 2>/dev/null"
	       " && openssl ecparam -name prime256v1 -genkey -out k-params.pem"
	       " && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256"
	       " -out k-pkcs8.pem"
	       " && openssl ec -in k.pem -aes128 -passout pass:secret -out k-enc.pem 2>/dev/null"
	       " && openssl ec -in k.pem -aes256 -passout pass:secret -out k-enc256.pem 2>/dev/null"
	       " && openssl pkcs8 -topk8 -v2 des3 -v2prf hmacWithSHA1 -in k.pem"
	       " -passout pass:secret -out k-enc8.pem"
	       " && openssl pkcs8 -topk8 -v2 aes256 -in k.pem -passout pass:secret"
	       " -out k-enc8-aes.pem"
	       " && openssl ecparam -name secp384r1 -genkey -noout -out k384.pem"
	       " && openssl ec -in k384.pem -pubout -out pub384.pem 2>/dev/null"
	       " && openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024"
	       " -out rsa.pem 2>/dev/null"
	       " && openssl pkey -in rsa.pem -pubout -out rsa-pub.pem"
	       " && openssl genpkey -algorithm ED25519 -out ed.pem"
	       " && printf 'not a key\\n' > garbage.pem",
	       T.dir) != 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	DIR *d;
	struct dirent *de;

	(void)state;
	if (T.dir[0] == '\0')
		return 0;
	/* the directory holds only files we made */
	d = opendir(T.dir);
	if (d != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				unlink(tmp(de->d_name));
		}
		closedir(d);
	}
	return rmdir(T.dir) == 0 ? 0 : -1;
}

#define NEED_OPENSSL()                                                                             \
	do {                                                                                       \
		if (!T.have_openssl)                                                               \
			skip();                                                                    \
	} while (0)

static struct sig_key *load_pub(const char *name)
{
	struct sig_key *k = NULL;

	assert_int_equal(sig_key_load_public(tmp(name), &k), RCS_OK);
	assert_non_null(k);
	return k;
}

static struct sig_key *load_priv(const char *name)
{
	struct sig_key *k = NULL;

	assert_int_equal(sig_key_load_private(tmp(name), &k), RCS_OK);
	assert_non_null(k);
	return k;
}

/* key id as docs/signing.md says: openssl pkey -pubin -in pub.pem -outform DER | sha256sum */
static void openssl_key_id(const char *pub_path, char out[KEY_ID_LEN])
{
	char *s;

	assert_int_equal(sh("openssl pkey -pubin -in '%s' -outform DER | sha256sum | cut -c1-16"
			    " > '%s'",
			    pub_path, tmp("keyid.txt")),
			 0);
	s = read_path(tmp("keyid.txt"), NULL);
	assert_true(strlen(s) >= KEY_ID_LEN - 1);
	memcpy(out, s, KEY_ID_LEN - 1);
	out[KEY_ID_LEN - 1] = '\0';
	free(s);
}

/* ---- manifest ---- */

/* Reads manifest-<n>.json the way an agent reads an envelope and builds the manifest. */
static void build_from_vector(const char *json_name, struct buf *out)
{
	char *text;
	size_t len;
	json_object *v = NULL, *constants = NULL, *vinfo = NULL;
	struct jsonu_err e;
	struct manifest_in in;
	const char *script = NULL;
	int64_t version = 0;

	text = read_vector(json_name, &len);
	assert_int_equal(jsonu_parse_object(text, len, &v, &e), RCS_OK);
	memset(&in, 0, sizeof(in));
	assert_int_equal(jsonu_get_string(v, "client_root", true, 64, &in.client_root, NULL, &e),
			 RCS_OK);
	assert_int_equal(jsonu_get_string(v, "task", true, 64, &in.task_ident, NULL, &e), RCS_OK);
	assert_int_equal(jsonu_get_int(v, "version", true, 1, INT32_MAX, &version, NULL, &e),
			 RCS_OK);
	assert_int_equal(jsonu_get_string(v, "script_name", true, 256, &in.script_name, NULL, &e),
			 RCS_OK);
	assert_int_equal(jsonu_get_string(v, "script", true, 1 << 20, &script, NULL, &e), RCS_OK);
	assert_int_equal(jsonu_get_object(v, "constants", false, &constants, NULL, &e), RCS_OK);
	assert_int_equal(jsonu_get_object(v, "variables_info", false, &vinfo, NULL, &e), RCS_OK);
	in.version = version;
	in.script = script;
	in.script_len = strlen(script);
	in.constants = constants;
	in.variables_info = vinfo;
	/* manifest v2: artifacts and release (null or missing: none) */
	json_object_object_get_ex(v, "artifacts", &in.artifacts);
	json_object_object_get_ex(v, "release", &in.release);

	buf_init(out, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, out), RCS_OK);
	json_object_put(v);
	free(text);
}

static void expect_manifest_vector(int n)
{
	char name[64];
	char *want;
	size_t want_len;
	struct buf b;

	snprintf(name, sizeof(name), "manifest-%d.json", n);
	build_from_vector(name, &b);
	snprintf(name, sizeof(name), "manifest-%d.txt", n);
	want = read_vector(name, &want_len);
	assert_int_equal(b.len, want_len);
	assert_memory_equal(b.data, want, want_len);
	free(want);
	buf_free(&b);
}

static void expect_build_err(const struct manifest_in *in, size_t max, enum rcs_err want);
static struct manifest_in fixed_input(void);

static void test_manifest_vectors(void **state)
{
	(void)state;
	expect_manifest_vector(1);
	expect_manifest_vector(2);
	expect_manifest_vector(3); /* v2: artifacts and a release */
	expect_manifest_vector(4); /* v2: release null */
}

/* Manifest v2 only with artifacts: {} keeps v1 exactly, and a release alone signs nothing. */
static void test_manifest_v2_only_with_artifacts(void **state)
{
	struct manifest_in in = fixed_input();
	json_object *empty = json_object_new_object(), *rel = json_tokener_parse("{\"seq\":1}");
	json_object *arts =
	    json_tokener_parse("{\"fw\":{\"size\":3,\"sha256\":"
			       "\"2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e"
			       "886266e7ae\"}}");
	json_object *not_obj = json_object_new_array();
	struct buf v1, b;

	(void)state;
	buf_init(&v1, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &v1), RCS_OK);
	assert_false(manifest_is_v2(&in));
	in.artifacts = empty;
	in.release = rel;
	assert_false(manifest_is_v2(&in));
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_string_equal(b.data, v1.data);
	buf_free(&b);

	in.artifacts = arts;
	in.release = NULL;
	assert_true(manifest_is_v2(&in));
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_memory_equal(b.data, "rcs-task-signature-v2\n", 22);
	assert_non_null(strstr(b.data, "\nvariables_info: {}\nartifacts: {\"fw\":{\"sha256\":"));
	assert_non_null(strstr(b.data, ",\"size\":3}}\nrelease: null\n"));
	assert_int_equal(b.data[b.len - 1], '\n');
	buf_free(&b);
	in.release = rel;
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_non_null(strstr(b.data, "\nrelease: {\"seq\":1}\n"));
	buf_free(&b);

	in.artifacts = not_obj; /* not an object: refused, out untouched */
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	buf_free(&v1);
	json_object_put(empty);
	json_object_put(rel);
	json_object_put(arts);
	json_object_put(not_obj);
}

static struct manifest_in fixed_input(void)
{
	struct manifest_in in = {
	    .client_root = "c0ffee00-0000-4000-8000-000000000001",
	    .task_ident = "7a5b3c1d-2e4f-4a6b-8c9d-0e1f2a3b4c5d",
	    .version = 1,
	    .script_name = "echo.lua",
	    .script = "return 'hi'\n",
	    .script_len = 12,
	    .constants = NULL,
	    .variables_info = NULL,
	};
	return in;
}

static void test_manifest_inline(void **state)
{
	struct manifest_in in = fixed_input();
	json_object *c = json_tokener_parse("{\"b\":[2.50,1E3],\"a\":\"\\u00e9\\n\"}");
	struct buf b;

	(void)state;
	assert_non_null(c);
	in.constants = c;
	in.version = 9007199254740993LL; /* the version line is exact, not a double */
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(buf_append(&b, ">", 1), RCS_OK);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_string_equal(b.data,
			    ">rcs-task-signature-v1\n"
			    "client_root: c0ffee00-0000-4000-8000-000000000001\n"
			    "task: 7a5b3c1d-2e4f-4a6b-8c9d-0e1f2a3b4c5d\n"
			    "version: 9007199254740993\n"
			    "script: echo.lua\n"
			    /* printf "return 'hi'\n" | sha256sum */
			    "script_sha256: "
			    "5d477c9b268e8ebf289badba35bc931114e9f1ca08ac299d2f7bb1edc4e49f74\n"
			    "constants: {\"a\":\"\xc3\xa9\\n\",\"b\":[2.5,1000]}\n"
			    "variables_info: {}\n");
	buf_free(&b);
	json_object_put(c);

	/* an empty script (NULL, 0) hashes as the empty string */
	in = fixed_input();
	in.script = NULL;
	in.script_len = 0;
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_non_null(strstr(b.data,
			       "\nscript_sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649"
			       "b934ca495991b7852b855\n"));
	buf_free(&b);
}

static void expect_build_err(const struct manifest_in *in, size_t max, enum rcs_err want)
{
	struct buf b;

	buf_init(&b, max);
	assert_int_equal(buf_append(&b, "keep", 4), RCS_OK);
	assert_int_equal(manifest_build(in, &b), want);
	assert_int_equal(b.len, 4);
	assert_string_equal(b.data, "keep");
	buf_free(&b);
}

static void test_manifest_rejects(void **state)
{
	static const char *const bad[] = {"a\nb", "ab\n", "\n", "a\rb", "a\r\n"};
	struct manifest_in in;
	json_object *nan_obj;
	struct buf b;
	size_t full;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		in = fixed_input();
		in.client_root = bad[i];
		expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
		in = fixed_input();
		in.task_ident = bad[i];
		expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
		in = fixed_input();
		in.script_name = bad[i];
		expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	}
	/* a newline inside the script or a constant is fine: it is hashed or escaped */
	in = fixed_input();
	in.script = "a\nb\n";
	in.script_len = 4;
	buf_init(&b, MANIFEST_MAX);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	full = b.len;
	buf_free(&b);

	in = fixed_input();
	in.client_root = NULL;
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	in = fixed_input();
	in.task_ident = NULL;
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	in = fixed_input();
	in.script_name = NULL;
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	in = fixed_input();
	in.script = NULL; /* with script_len 12 */
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);

	/* non-finite constant */
	in = fixed_input();
	nan_obj = json_object_new_object();
	json_object_object_add(nan_obj, "x", json_object_new_double(1.0 / 0.0));
	in.variables_info = nan_obj;
	expect_build_err(&in, MANIFEST_MAX, RCS_ERR_INVAL);
	json_object_put(nan_obj);

	/* ceiling: one byte short of the manifest fails and leaves the buffer alone */
	in = fixed_input();
	expect_build_err(&in, 4 + full - 1, RCS_ERR_TOOBIG);
	buf_init(&b, full);
	assert_int_equal(manifest_build(&in, &b), RCS_OK);
	assert_int_equal(b.len, full);
	buf_free(&b);
}

/* ---- sha256, base64 ---- */

static void test_sha256_hex(void **state)
{
	char h[SHA256_HEX_LEN];

	(void)state;
	sha256_hex("", 0, h);
	assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha256_hex("abc", 3, h);
	assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha256_hex("a\0b", 3, h); /* exact bytes, NUL included */
	assert_string_equal(h, "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138");
}

static void test_b64(void **state)
{
	/* RFC 4648 section 10 */
	static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *const enc[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
					  "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	static const char *const bad[] = {"Zg=",  "Zg",       "Z===", "Zg==Zg==",     "Zm9v\n",
					  "Zm 9", "Zm9v!A==", "=Zm9", "Zm9v\r\nZm9v", "Zm-_"};
	char out[64];
	unsigned char raw[64];
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		size_t len = strlen(plain[i]);

		memset(out, 'x', sizeof(out));
		assert_int_equal(b64_encode(plain[i], len, out, sizeof(out)), RCS_OK);
		assert_string_equal(out, enc[i]);
		/* exactly enough room (with the NUL) works, one less does not */
		assert_int_equal(b64_encode(plain[i], len, out, strlen(enc[i]) + 1), RCS_OK);
		assert_int_equal(b64_encode(plain[i], len, out, strlen(enc[i])), RCS_ERR_TOOBIG);

		assert_int_equal(b64_decode(enc[i], raw, sizeof(raw), &n), RCS_OK);
		assert_int_equal(n, len);
		assert_memory_equal(raw, plain[i], len);
		if (len > 0)
			assert_int_equal(b64_decode(enc[i], raw, len - 1, &n), RCS_ERR_TOOBIG);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = 99;
		assert_int_equal(b64_decode(bad[i], raw, sizeof(raw), &n), RCS_ERR_INVAL);
		assert_int_equal(n, 0);
	}
	/* binary bytes */
	{
		const unsigned char bin[] = {0x00, 0xff, 0xfe, 0x80, 0x7f};

		assert_int_equal(b64_encode(bin, sizeof(bin), out, sizeof(out)), RCS_OK);
		assert_string_equal(out, "AP/+gH8=");
		assert_int_equal(b64_decode(out, raw, sizeof(raw), &n), RCS_OK);
		assert_int_equal(n, sizeof(bin));
		assert_memory_equal(raw, bin, sizeof(bin));
	}
}

/* ---- keys ---- */

static void test_key_id_matches_openssl(void **state)
{
	char want[KEY_ID_LEN], want2[KEY_ID_LEN];
	struct sig_key *k;
	char *pem;
	size_t len;

	(void)state;
	NEED_OPENSSL();
	openssl_key_id(tmp("pub.pem"), want);
	openssl_key_id(tmp("pub2.pem"), want2);
	assert_string_not_equal(want, want2);

	k = load_pub("pub.pem");
	assert_string_equal(sig_key_id(k), want);
	sig_key_free(k);
	k = load_pub("k.pem"); /* a private key file gives its public half */
	assert_string_equal(sig_key_id(k), want);
	sig_key_free(k);
	k = load_priv("k.pem");
	assert_string_equal(sig_key_id(k), want);
	sig_key_free(k);
	k = load_pub("pub2.pem");
	assert_string_equal(sig_key_id(k), want2);
	sig_key_free(k);

	/* from memory, with or without the NUL counted */
	pem = read_path(tmp("pub.pem"), &len);
	k = NULL;
	assert_int_equal(sig_key_parse_public(pem, len, &k), RCS_OK);
	assert_string_equal(sig_key_id(k), want);
	sig_key_free(k);
	k = NULL;
	assert_int_equal(sig_key_parse_public(pem, len + 1, &k), RCS_OK);
	assert_string_equal(sig_key_id(k), want);
	sig_key_free(k);
	k = NULL;
	assert_int_equal(sig_key_parse_public(pem, len / 2, &k), RCS_ERR_CRYPTO);
	assert_null(k);
	free(pem);

	/* other P-256 key encodings */
	k = load_priv("k-params.pem"); /* EC PARAMETERS block before the key */
	sig_key_free(k);
	k = load_priv("k-pkcs8.pem"); /* PKCS#8 "PRIVATE KEY" */
	sig_key_free(k);
}

static void test_key_id_vector(void **state)
{
	char path[1024];
	char *want;
	struct sig_key *k = NULL;

	(void)state;
	snprintf(path, sizeof(path), "%s/manifest-1.pub.pem", vectors_dir());
	assert_int_equal(sig_key_load_public(path, &k), RCS_OK);
	want = read_vector("manifest-1.keyid", NULL);
	assert_string_equal(sig_key_id(k), want);
	free(want);
	sig_key_free(k);
}

static void expect_load_err(bool priv, const char *path, enum rcs_err want)
{
	struct sig_key *k = (struct sig_key *)&k; /* must be reset to NULL */
	enum rcs_err err = priv ? sig_key_load_private(path, &k) : sig_key_load_public(path, &k);

	if (err != want)
		fail_msg("loading %s: %s, expected %s", path, rcs_strerror(err),
			 rcs_strerror(want));
	assert_null(k);
}

static void test_key_load_errors(void **state)
{
	(void)state;
	expect_load_err(true, "/nonexistent/k.pem", RCS_ERR_IO);
	expect_load_err(false, "/nonexistent/pub.pem", RCS_ERR_IO);
	NEED_OPENSSL();
	expect_load_err(true, tmp("pub.pem"), RCS_ERR_CRYPTO); /* no private half */
	expect_load_err(true, tmp("garbage.pem"), RCS_ERR_CRYPTO);
	expect_load_err(false, tmp("garbage.pem"), RCS_ERR_CRYPTO);
	expect_load_err(true, tmp("k-enc.pem"), RCS_ERR_AUTH); /* encrypted, no passphrase */
	expect_load_err(true, tmp("k-enc8.pem"), RCS_ERR_AUTH);
	expect_load_err(false, tmp("k-enc.pem"), RCS_ERR_AUTH);
	expect_load_err(true, tmp("k384.pem"), RCS_ERR_CRYPTO); /* other curve */
	expect_load_err(false, tmp("pub384.pem"), RCS_ERR_CRYPTO);
	expect_load_err(true, tmp("rsa.pem"), RCS_ERR_CRYPTO); /* other type */
	expect_load_err(false, tmp("rsa-pub.pem"), RCS_ERR_CRYPTO);
	expect_load_err(true, tmp("ed.pem"), RCS_ERR_CRYPTO);
	/* over the 64 KiB ceiling */
	assert_int_equal(sh("head -c 70000 /dev/zero | tr '\\0' 'A' > '%s'", tmp("big.pem")), 0);
	expect_load_err(false, tmp("big.pem"), RCS_ERR_TOOBIG);
	sig_key_free(NULL);
}

/* Encrypted keys (OpenSSL's PEM encryption, PKCS#8 PBES2 as mbedtls 2.28 reads it:
 * 3DES with HMAC-SHA1) open with their passphrase. */
static void test_key_load_passphrase(void **state)
{
	struct sig_key *plain = NULL, *k = NULL;
	const char *files[] = {"k-enc.pem", "k-enc256.pem", "k-enc8.pem"};

	(void)state;
	NEED_OPENSSL();
	assert_int_equal(sig_key_load_private(tmp("k.pem"), &plain), RCS_OK);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		assert_int_equal(sig_key_load_pass(tmp(files[i]), "secret", true, &k), RCS_OK);
		assert_string_equal(sig_key_id(k), sig_key_id(plain));
		sig_key_free(k);
		assert_int_equal(sig_key_load_pass(tmp(files[i]), "secret", false, &k), RCS_OK);
		assert_string_equal(sig_key_id(k), sig_key_id(plain));
		sig_key_free(k);
		k = (struct sig_key *)&k;
		assert_int_equal(sig_key_load_pass(tmp(files[i]), "wrong", true, &k), RCS_ERR_AUTH);
		assert_null(k);
		assert_int_equal(sig_key_load_pass(tmp(files[i]), NULL, true, &k), RCS_ERR_AUTH);
		assert_null(k);
	}
	/* any wrong passphrase is told as one: with OpenSSL's PEM encryption about one in 500
	 * decrypts to bytes mbedtls takes for a key until it fails to parse them */
	for (size_t i = 0; i < 2; i++) {
		for (int n = 0; n < 3000; n++) {
			char wrong[32];

			snprintf(wrong, sizeof(wrong), "wrong-%d", n);
			assert_int_equal(sig_key_load_pass(tmp(files[i]), wrong, true, &k),
					 RCS_ERR_AUTH);
		}
	}
	/* PKCS#8 with AES and HMAC-SHA256 (openssl pkcs8 -topk8's default): mbedtls 2.28
	   has no such PBES2, the key is unusable whatever the passphrase */
	k = (struct sig_key *)&k;
	assert_int_equal(sig_key_load_pass(tmp("k-enc8-aes.pem"), "secret", true, &k),
			 RCS_ERR_CRYPTO);
	assert_null(k);
	/* a passphrase for a key that is not encrypted is not needed, and harmless */
	assert_int_equal(sig_key_load_pass(tmp("k.pem"), "secret", true, &k), RCS_OK);
	sig_key_free(k);
	sig_key_free(plain);
}

/* ---- signatures ---- */

static const char msg[] = "rcs-task-signature-v1\nclient_root: x\n";

static void test_sign_verify(void **state)
{
	struct sig_key *priv, *pub, *pub2, *pub_from_priv;
	char sig[SIG_B64_MAX], sig_b[SIG_B64_MAX];
	char flipped[sizeof(msg)];

	(void)state;
	NEED_OPENSSL();
	priv = load_priv("k.pem");
	pub = load_pub("pub.pem");
	pub2 = load_pub("pub2.pem");
	pub_from_priv = load_pub("k.pem");

	assert_int_equal(sig_sign(priv, msg, sizeof(msg) - 1, sig, sizeof(sig)), RCS_OK);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, sig), RCS_OK);
	assert_int_equal(sig_verify(priv, msg, sizeof(msg) - 1, sig), RCS_OK);
	assert_int_equal(sig_verify(pub_from_priv, msg, sizeof(msg) - 1, sig), RCS_OK);
	/* a signature of another message verifies for that one only */
	assert_int_equal(sig_sign(priv, msg, sizeof(msg) - 2, sig_b, sizeof(sig_b)), RCS_OK);
	assert_string_not_equal(sig, sig_b);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 2, sig_b), RCS_OK);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, sig_b), RCS_ERR_VERIFY);

	/* every flipped byte of the message is caught */
	for (size_t i = 0; i < sizeof(msg) - 1; i++) {
		memcpy(flipped, msg, sizeof(msg));
		flipped[i] ^= 0x01;
		assert_int_equal(sig_verify(pub, flipped, sizeof(msg) - 1, sig), RCS_ERR_VERIFY);
	}
	/* shorter and longer messages, and another key */
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 2, sig), RCS_ERR_VERIFY);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg), sig), RCS_ERR_VERIFY);
	assert_int_equal(sig_verify(pub2, msg, sizeof(msg) - 1, sig), RCS_ERR_VERIFY);

	/* only a private key signs, even one loaded from a private key file as public */
	assert_int_equal(sig_sign(pub, msg, sizeof(msg) - 1, sig_b, sizeof(sig_b)), RCS_ERR_CRYPTO);
	assert_int_equal(sig_sign(pub_from_priv, msg, sizeof(msg) - 1, sig_b, sizeof(sig_b)),
			 RCS_ERR_CRYPTO);
	/* too little room for the base64 */
	assert_int_equal(sig_sign(priv, msg, sizeof(msg) - 1, sig_b, 16), RCS_ERR_TOOBIG);

	sig_key_free(priv);
	sig_key_free(pub);
	sig_key_free(pub2);
	sig_key_free(pub_from_priv);
}

static void test_verify_bad_values(void **state)
{
	struct sig_key *priv, *pub;
	char sig[SIG_B64_MAX], b64[SIG_B64_MAX * 2];
	unsigned char der[128];
	size_t der_len;
	char longsig[1025]; /* 1024 base64 chars */

	(void)state;
	NEED_OPENSSL();
	priv = load_priv("k.pem");
	pub = load_pub("pub.pem");
	assert_int_equal(sig_sign(priv, msg, sizeof(msg) - 1, sig, sizeof(sig)), RCS_OK);

	/* not base64 */
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, "!!!!"), RCS_ERR_INVAL);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, "MEUCIQ"), RCS_ERR_INVAL);
	/* base64 but not a signature */
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, ""), RCS_ERR_VERIFY);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, "AAAA"), RCS_ERR_VERIFY);
	/* far too long to be a P-256 signature */
	memset(longsig, 'A', sizeof(longsig) - 1);
	longsig[sizeof(longsig) - 1] = '\0';
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, longsig), RCS_ERR_VERIFY);

	/* the real signature with a trailing byte, or one byte short */
	assert_int_equal(b64_decode(sig, der, sizeof(der) - 1, &der_len), RCS_OK);
	der[der_len] = 0;
	assert_int_equal(b64_encode(der, der_len + 1, b64, sizeof(b64)), RCS_OK);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, b64), RCS_ERR_VERIFY);
	assert_int_equal(b64_encode(der, der_len - 1, b64, sizeof(b64)), RCS_OK);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, b64), RCS_ERR_VERIFY);
	/* a flipped bit inside r */
	der[8] ^= 0x10;
	assert_int_equal(b64_encode(der, der_len, b64, sizeof(b64)), RCS_OK);
	assert_int_equal(sig_verify(pub, msg, sizeof(msg) - 1, b64), RCS_ERR_VERIFY);

	sig_key_free(priv);
	sig_key_free(pub);
}

/* A signature made the way operators make it verifies with sig_verify. */
static void test_openssl_signs_we_verify(void **state)
{
	struct buf m;
	struct sig_key *pub;
	char *sig;

	(void)state;
	NEED_OPENSSL();
	build_from_vector("manifest-1.json", &m);
	write_path(tmp("manifest"), m.data, m.len);
	assert_int_equal(sh("cd '%s' && openssl dgst -sha256 -sign k.pem manifest | base64 -w0"
			    " > sig.b64",
			    T.dir),
			 0);
	sig = read_path(tmp("sig.b64"), NULL);
	pub = load_pub("pub.pem");
	assert_int_equal(sig_verify(pub, m.data, m.len, sig), RCS_OK);
	m.data[m.len - 2] ^= 0x01;
	assert_int_equal(sig_verify(pub, m.data, m.len, sig), RCS_ERR_VERIFY);
	free(sig);
	sig_key_free(pub);
	buf_free(&m);
}

/* The stored vector: manifest-1 rebuilt from JSON verifies against its stored signature. */
static void test_vector_signature(void **state)
{
	char path[1024];
	struct buf m;
	struct sig_key *pub = NULL;
	char *sig;

	(void)state;
	build_from_vector("manifest-1.json", &m);
	snprintf(path, sizeof(path), "%s/manifest-1.pub.pem", vectors_dir());
	assert_int_equal(sig_key_load_public(path, &pub), RCS_OK);
	sig = read_vector("manifest-1.sig.b64", NULL);
	assert_int_equal(sig_verify(pub, m.data, m.len, sig), RCS_OK);
	m.data[0] ^= 0x20;
	assert_int_equal(sig_verify(pub, m.data, m.len, sig), RCS_ERR_VERIFY);
	free(sig);
	sig_key_free(pub);
	buf_free(&m);
}

/* Our signature verifies with openssl dgst -verify (and a tampered file does not). */
static void test_we_sign_openssl_verifies(void **state)
{
	struct buf m;
	struct sig_key *priv;
	char sig[SIG_B64_MAX];
	unsigned char der[128];
	size_t der_len;

	(void)state;
	NEED_OPENSSL();
	build_from_vector("manifest-1.json", &m);
	priv = load_priv("k.pem");
	assert_int_equal(sig_sign(priv, m.data, m.len, sig, sizeof(sig)), RCS_OK);
	assert_int_equal(b64_decode(sig, der, sizeof(der), &der_len), RCS_OK);
	write_path(tmp("sig.der"), der, der_len);
	write_path(tmp("manifest"), m.data, m.len);
	assert_int_equal(sh("cd '%s' && openssl dgst -sha256 -verify pub.pem -signature sig.der"
			    " manifest >/dev/null",
			    T.dir),
			 0);
	/* the same check fails on a tampered manifest and on the other key */
	m.data[10] ^= 0x01;
	write_path(tmp("manifest"), m.data, m.len);
	assert_int_not_equal(sh("cd '%s' && openssl dgst -sha256 -verify pub.pem -signature"
				" sig.der manifest >/dev/null 2>&1",
				T.dir),
			     0);
	m.data[10] ^= 0x01;
	write_path(tmp("manifest"), m.data, m.len);
	assert_int_not_equal(sh("cd '%s' && openssl dgst -sha256 -verify pub2.pem -signature"
				" sig.der manifest >/dev/null 2>&1",
				T.dir),
			     0);
	sig_key_free(priv);
	buf_free(&m);
}

/* ---- signature objects ---- */

static json_object *sig_object(const char *alg, const char *key_id, const char *value)
{
	json_object *o = json_object_new_object();

	if (alg != NULL)
		json_object_object_add(o, "alg", json_object_new_string(alg));
	if (key_id != NULL)
		json_object_object_add(o, "key_id", json_object_new_string(key_id));
	if (value != NULL)
		json_object_object_add(o, "value", json_object_new_string(value));
	return o;
}

static void expect_object(struct sig_key *const *keys, size_t nkeys, json_object *o,
			  enum rcs_err want)
{
	enum rcs_err err = sig_verify_object(keys, nkeys, o, msg, sizeof(msg) - 1);

	if (err != want)
		fail_msg("%s: %s, expected %s", o ? json_object_to_json_string(o) : "NULL",
			 rcs_strerror(err), rcs_strerror(want));
	json_object_put(o);
}

static void test_verify_object(void **state)
{
	struct sig_key *priv, *keys[2];
	char sig[SIG_B64_MAX], upper[KEY_ID_LEN];
	const char *id;
	json_object *o;

	(void)state;
	NEED_OPENSSL();
	priv = load_priv("k.pem");
	keys[0] = load_pub("pub2.pem");
	keys[1] = load_pub("pub.pem");
	id = sig_key_id(keys[1]);
	assert_int_equal(sig_sign(priv, msg, sizeof(msg) - 1, sig, sizeof(sig)), RCS_OK);

	/* accepted: the key is picked by id among several */
	expect_object(keys, 2, sig_object("ES256", id, sig), RCS_OK);
	expect_object(keys + 1, 1, sig_object("ES256", id, sig), RCS_OK);
	o = json_tokener_parse("{\"value\":\"x\",\"alg\":\"ES256\",\"key_id\":\"y\"}");
	json_object_object_add(o, "value", json_object_new_string(sig));
	json_object_object_add(o, "key_id", json_object_new_string(id));
	expect_object(keys, 2, o, RCS_OK);

	/* unknown key id, the other key's id, no keys, a wrong value */
	expect_object(keys, 2, sig_object("ES256", "0123456789abcdef", sig), RCS_ERR_VERIFY);
	expect_object(keys, 2, sig_object("ES256", sig_key_id(keys[0]), sig), RCS_ERR_VERIFY);
	expect_object(keys, 1, sig_object("ES256", id, sig), RCS_ERR_VERIFY);
	expect_object(NULL, 0, sig_object("ES256", id, sig), RCS_ERR_VERIFY);
	expect_object(keys, 2, sig_object("ES256", id, "AAAA"), RCS_ERR_VERIFY);
	assert_int_equal(
	    sig_verify_object(keys, 2, o = sig_object("ES256", id, sig), msg, sizeof(msg) - 2),
	    RCS_ERR_VERIFY);
	json_object_put(o);

	/* wrong algorithm: the algorithm comes from us, never from the message */
	expect_object(keys, 2, sig_object("RS256", id, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("none", id, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("es256", id, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256 ", id, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("", id, sig), RCS_ERR_INVAL);

	/* malformed objects */
	expect_object(keys, 2, NULL, RCS_ERR_INVAL);
	expect_object(keys, 2, json_object_new_array(), RCS_ERR_INVAL);
	expect_object(keys, 2, json_object_new_string(sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object(NULL, id, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256", NULL, sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256", id, NULL), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256", id, "not base64!"), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256", "0123", sig), RCS_ERR_INVAL);
	expect_object(keys, 2, sig_object("ES256", "0123456789abcdef0", sig), RCS_ERR_INVAL);
	for (size_t i = 0; i < KEY_ID_LEN; i++)
		upper[i] = (char)(id[i] >= 'a' && id[i] <= 'f' ? id[i] - 'a' + 'A' : id[i]);
	if (strcmp(upper, id) != 0)
		expect_object(keys, 2, sig_object("ES256", upper, sig), RCS_ERR_INVAL);
	o = sig_object("ES256", id, sig);
	json_object_object_add(o, "extra", json_object_new_int(1));
	expect_object(keys, 2, o, RCS_ERR_INVAL);
	o = sig_object("ES256", NULL, sig);
	json_object_object_add(o, "key_id", json_object_new_int(5));
	expect_object(keys, 2, o, RCS_ERR_INVAL);
	o = sig_object(NULL, id, sig);
	json_object_object_add(o, "alg", NULL); /* JSON null */
	expect_object(keys, 2, o, RCS_ERR_INVAL);

	sig_key_free(priv);
	sig_key_free(keys[0]);
	sig_key_free(keys[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_manifest_vectors),
	    cmocka_unit_test(test_manifest_v2_only_with_artifacts),
	    cmocka_unit_test(test_manifest_inline),
	    cmocka_unit_test(test_manifest_rejects),
	    cmocka_unit_test(test_sha256_hex),
	    cmocka_unit_test(test_b64),
	    cmocka_unit_test(test_key_id_matches_openssl),
	    cmocka_unit_test(test_key_id_vector),
	    cmocka_unit_test(test_key_load_errors),
	    cmocka_unit_test(test_sign_verify),
	    cmocka_unit_test(test_key_load_passphrase),
	    cmocka_unit_test(test_verify_bad_values),
	    cmocka_unit_test(test_openssl_signs_we_verify),
	    cmocka_unit_test(test_vector_signature),
	    cmocka_unit_test(test_we_sign_openssl_verifies),
	    cmocka_unit_test(test_verify_object),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
