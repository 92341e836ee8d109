/*
 * fuzz_envelope - a job envelope as the agent takes it (agent/runner.c
 * runner_envelope): proto_envelope_decode, then verify_envelope (agent/verify.c)
 * with a real journal in a temporary directory.
 *
 * Each decoded envelope is verified twice:
 *   A. as a device of the vectors' tenant (client_root of manifest-1, the
 *      device FUZZ_ENTITY) that trusts the vectors' key and requires
 *      signatures: tenant, device, expiry and signature checks;
 *   B. as the envelope's own device without any key, signatures not required
 *      and the envelope's signature dropped: the rollback check (the journal
 *      has run manifest-2's task at version 12) and the variables checks.
 * Properties: an accepted envelope re-encodes (proto_envelope_encode) to one
 * that decodes to the same fields; verify_envelope answers only the errors
 * verify.h lists, with a one-line printable reason; A accepts an envelope
 * only when its manifest is byte for byte the one the vector key signed.
 */
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "journal.h"
#include "manifest.h"
#include "proto.h"
#include "verify.h"

#define FUZZ_ROOT    "6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a43"
#define FUZZ_ENTITY  "01a1ffa0-2b22-7049-8259-f0eebb68ebab"
#define FUZZ_NOW     1795290050
#define FUZZ_RB_TASK "5d2c8b1a-94e3-4f70-a6b8-c1d2e3f4a5b6"

static char fuzz_dir[64];
static struct journal *fuzz_journal;
static struct sig_key *fuzz_key;
static char *fuzz_signed_manifest;
static size_t fuzz_signed_len;

static void fuzz_cleanup(void)
{
	DIR *d;
	struct dirent *de;
	char path[512];

	journal_close(fuzz_journal);
	fuzz_journal = NULL;
	sig_key_free(fuzz_key);
	free(fuzz_signed_manifest);
	d = opendir(fuzz_dir);
	while (d && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", fuzz_dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(fuzz_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");

	(void)argc;
	(void)argv;
	fuzz_quiet();
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%.40s/rcs-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(fuzz_dir) == NULL || journal_open(fuzz_dir, &fuzz_journal) != RCS_OK ||
	    journal_task_version_set(fuzz_journal, FUZZ_RB_TASK, 12) != RCS_OK ||
	    sig_key_load_public(fuzz_vector_path("manifest-1.pub.pem"), &fuzz_key) != RCS_OK)
		abort();
	fuzz_signed_manifest = fuzz_vector("manifest-1.txt", &fuzz_signed_len);
	atexit(fuzz_cleanup);
	return 0;
}

static int same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static void check_roundtrip(const struct proto_envelope *env)
{
	struct proto_envelope again;
	struct jsonu_err e;
	json_object *o = proto_envelope_encode(env);
	size_t len = 0;
	const char *text = jsonu_dump(o, &len);
	enum rcs_err err = proto_envelope_decode(text, len, &again, &e);

	FUZZ_CHECK(err == RCS_OK, "an encoded envelope does not decode: %s: %s\n%s", e.field,
		   e.message, text);
	FUZZ_CHECK(strcmp(env->job, again.job) == 0 &&
		       strcmp(env->client_root, again.client_root) == 0 &&
		       strcmp(env->entity_ident, again.entity_ident) == 0 &&
		       strcmp(env->task_ident, again.task_ident) == 0 &&
		       env->task_version == again.task_version &&
		       same_str(env->task_name, again.task_name) &&
		       same_str(env->script_name, again.script_name) &&
		       strcmp(env->script_sha256, again.script_sha256) == 0 &&
		       env->script_len == again.script_len &&
		       memcmp(env->script_source, again.script_source, env->script_len) == 0 &&
		       env->issued_at == again.issued_at && env->expires_at == again.expires_at &&
		       env->timeout == again.timeout &&
		       (env->signature == NULL) == (again.signature == NULL),
		   "the envelope changed through encode and decode:\n%s", text);
	proto_envelope_free(&again);
	json_object_put(o);
}

static void check_reason(enum rcs_err err, const char *reason)
{
	FUZZ_CHECK(err == RCS_OK || err == RCS_ERR_FORBIDDEN || err == RCS_ERR_CONFLICT ||
		       err == RCS_ERR_VERIFY || err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG,
		   "verify_envelope answered %s (%s)", rcs_strerror(err), reason);
	FUZZ_CHECK(memchr(reason, '\0', VERIFY_REASON_MAX) != NULL, "reason not terminated");
	FUZZ_CHECK(fuzz_printable_line(reason), "reason is not one printable line: %s", reason);
	FUZZ_CHECK((err == RCS_OK) == (reason[0] == '\0'), "%s with reason '%s'", rcs_strerror(err),
		   reason);
}

/* A signed envelope was accepted: its manifest must be the one that was signed. */
static void check_signed(const struct proto_envelope *env)
{
	struct manifest_in in;
	struct buf m;

	memset(&in, 0, sizeof(in));
	in.client_root = FUZZ_ROOT;
	in.task_ident = env->task_ident;
	in.version = env->task_version;
	in.script_name = env->script_name;
	in.script = env->script_source;
	in.script_len = env->script_len;
	in.constants = env->constants;
	in.variables_info = env->variables_info;
	buf_init(&m, MANIFEST_MAX);
	FUZZ_CHECK(manifest_build(&in, &m) == RCS_OK, "accepted, but no manifest");
	FUZZ_CHECK(m.len == fuzz_signed_len && memcmp(m.data, fuzz_signed_manifest, m.len) == 0,
		   "accepted a signature over another manifest:\n%s", m.data);
	buf_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_envelope env, unsigned_env;
	struct jsonu_err e;
	struct verify_ctx v;
	char reason[VERIFY_REASON_MAX];
	enum rcs_err err;

	memset(&e, 0, sizeof(e));
	err = proto_envelope_decode((const char *)data, size, &env, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(env.root == NULL, "a refused envelope kept its tree");
		FUZZ_CHECK(e.message[0] != '\0', "a refused envelope without a message");
		return 0;
	}
	FUZZ_CHECK(strlen(env.script_source) == env.script_len, "script_len");
	check_roundtrip(&env);

	/* A: the vectors' device, signatures required */
	memset(&v, 0, sizeof(v));
	v.client_root = FUZZ_ROOT;
	v.entity_ident = FUZZ_ENTITY;
	v.trusted = &fuzz_key;
	v.ntrusted = 1;
	v.require_signature = true;
	v.journal = fuzz_journal;
	memset(reason, 'x', sizeof(reason));
	err = verify_envelope(&v, &env, FUZZ_NOW, reason, sizeof(reason));
	check_reason(err, reason);
	if (getenv("RCS_FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz: verify A: %s %s\n", rcs_strerror(err), reason);
	if (err == RCS_OK)
		check_signed(&env);

	/* B: the envelope's own device, unsigned allowed */
	unsigned_env = env;
	unsigned_env.signature = NULL;
	memset(&v, 0, sizeof(v));
	v.client_root = env.client_root;
	v.entity_ident = env.entity_ident;
	v.require_signature = false;
	v.journal = fuzz_journal;
	memset(reason, 'x', sizeof(reason));
	err = verify_envelope(&v, &unsigned_env, FUZZ_NOW, reason, sizeof(reason));
	check_reason(err, reason);
	if (getenv("RCS_FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz: verify B: %s %s\n", rcs_strerror(err), reason);
	if (err == RCS_OK)
		FUZZ_CHECK(strcmp(env.task_ident, FUZZ_RB_TASK) != 0 || env.task_version >= 12,
			   "an older task version passed the rollback check");

	proto_envelope_free(&env);
	return 0;
}
