/*
 * fuzz_manifest - the task signature manifest and its ES256 check
 * (common/manifest.c): manifest_build over fuzzed fields, then
 * sig_verify_object of a fuzzed signature object against the trusted key of
 * tests/vectors (manifest-1.pub.pem), and b64_decode of its value.
 *
 * Input: a JSON object shaped like tests/vectors/manifest-N.json, with an
 * optional "signature" member ({"alg", "key_id", "value"}, as envelopes and
 * PATCH /tasks/<id> carry it). Members of the wrong type are passed as NULL.
 *
 * Properties: manifest_build leaves its buffer as it was on failure; a built
 * manifest has the eight lines of docs/signing.md; a signature verifies only
 * over the exact bytes of tests/vectors/manifest-1.txt (the only message
 * ever signed with that key: anything else verifying would be a forgery);
 * sig_verify_object answers only RCS_OK, RCS_ERR_VERIFY or RCS_ERR_INVAL.
 */
#include <string.h>

#include "buf.h"
#include "fuzz_util.h"
#include "jsonu.h"
#include "manifest.h"

static struct sig_key *fuzz_key;
static char *fuzz_signed_manifest;
static size_t fuzz_signed_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	if (sig_key_load_public(fuzz_vector_path("manifest-1.pub.pem"), &fuzz_key) != RCS_OK)
		abort();
	fuzz_signed_manifest = fuzz_vector("manifest-1.txt", &fuzz_signed_len);
	return 0;
}

static const char *member_str(json_object *o, const char *key)
{
	json_object *v = jsonu_member(o, key);

	return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static json_object *member_obj(json_object *o, const char *key)
{
	json_object *v = jsonu_member(o, key);

	return json_object_is_type(v, json_type_object) ? v : NULL;
}

static void check_b64(const char *value)
{
	unsigned char out[96];
	size_t n = 0, len = strlen(value);
	enum rcs_err err = b64_decode(value, out, sizeof(out), &n);

	FUZZ_CHECK(err == RCS_OK || err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG,
		   "b64_decode answered %s", rcs_strerror(err));
	if (err == RCS_OK) {
		size_t pad =
		    (len > 0 && value[len - 1] == '=') + (len > 1 && value[len - 2] == '=');
		FUZZ_CHECK(len % 4 == 0 && n == len / 4 * 3 - pad && n <= sizeof(out),
			   "b64_decode of %zu chars gave %zu bytes", len, n);
	}
}

/* The eight lines of a manifest, the last ending in LF. */
static void check_manifest_shape(const char *m, size_t len)
{
	static const char *const labels[] = {
	    "rcs-task-signature-v1", "client_root: ", "task: ",          "version: ", "script: ",
	    "script_sha256: ",       "constants: ",   "variables_info: "};
	const char *p = m;

	FUZZ_CHECK(strlen(m) == len, "manifest holds a NUL");
	for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
		const char *nl = memchr(p, '\n', len - (size_t)(p - m));
		FUZZ_CHECK(nl != NULL, "manifest line %zu missing", i + 1);
		FUZZ_CHECK(strncmp(p, labels[i], strlen(labels[i])) == 0,
			   "manifest line %zu does not start with '%s'", i + 1, labels[i]);
		FUZZ_CHECK(memchr(p, '\r', (size_t)(nl - p)) == NULL, "CR in manifest line %zu",
			   i + 1);
		p = nl + 1;
	}
	FUZZ_CHECK((size_t)(p - m) == len, "data after the manifest's last line");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_object *root = NULL, *sig;
	struct jsonu_err e;
	struct manifest_in in;
	struct buf m;
	const char *value;
	enum rcs_err err;

	buf_init(&m, MANIFEST_MAX);
	if (jsonu_parse_object((const char *)data, size, &root, &e) != RCS_OK)
		goto out;
	memset(&in, 0, sizeof(in));
	in.client_root = member_str(root, "client_root");
	in.task_ident = member_str(root, "task");
	in.version = (long long)json_object_get_int64(jsonu_member(root, "version"));
	in.script_name = member_str(root, "script_name");
	in.script = member_str(root, "script");
	in.script_len =
	    in.script ? (size_t)json_object_get_string_len(jsonu_member(root, "script")) : 0;
	in.constants = member_obj(root, "constants");
	in.variables_info = member_obj(root, "variables_info");

	/* a prefix must survive a failed build */
	FUZZ_CHECK(buf_append(&m, "prefix", 6) == RCS_OK, "buf_append");
	err = manifest_build(&in, &m);
	if (err != RCS_OK) {
		FUZZ_CHECK(m.len == 6 && strcmp(m.data, "prefix") == 0,
			   "failed manifest_build (%s) changed its buffer", rcs_strerror(err));
		FUZZ_CHECK(err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG,
			   "manifest_build answered %s", rcs_strerror(err));
		goto out;
	}
	check_manifest_shape(m.data + 6, m.len - 6);

	sig = jsonu_member(root, "signature");
	if (sig == NULL)
		goto out;
	value = member_str(sig, "value");
	if (value)
		check_b64(value);
	err = sig_verify_object(&fuzz_key, 1, sig, m.data + 6, m.len - 6);
	FUZZ_CHECK(err == RCS_OK || err == RCS_ERR_VERIFY || err == RCS_ERR_INVAL,
		   "sig_verify_object answered %s", rcs_strerror(err));
	if (err == RCS_OK)
		FUZZ_CHECK(m.len - 6 == fuzz_signed_len &&
			       memcmp(m.data + 6, fuzz_signed_manifest, fuzz_signed_len) == 0,
			   "a signature verified over another manifest than the signed one:\n%s",
			   m.data + 6);
out:
	json_object_put(root);
	buf_free(&m);
	return 0;
}
