/*
 * verify.c - checks of a job envelope before it runs. See verify.h.
 */
#include "verify.h"

#include <pthread.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "canon.h"
#include "jsonu.h"
#include "vars.h"

/*
 * A task with artifacts is signed over manifest v2 (docs/signing.md): the v1 text with
 * its first line rcs-task-signature-v2, then "artifacts: <JCS of the envelope's
 * artifacts>" and "release: <JCS of its release, null when none>" (manifest_build, from
 * the envelope's artifacts and release); a v1 signature never covers artifacts.
 */
/* env carries a non-empty "artifacts" (manifest v2, artifact_trusted_key). */
static bool verify_has_artifacts(const struct proto_envelope *env)
{
	json_object *arts = NULL;

	return json_object_object_get_ex(env->root, "artifacts", &arts) && arts != NULL &&
	       !(json_object_is_type(arts, json_type_object) &&
		 json_object_object_length(arts) == 0);
}

/* mbedtls caches tables inside a key on first use: one user at a time */
static pthread_mutex_t verify_key_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Signatures that verified, bound to the manifest they were checked against
 * (common/manifest.h, sig_cache): the jobs of one task version carry the same
 * signature over the same manifest, so the ES256 verification (most of the
 * agent's own time per job) runs once per task version, not once per job. The
 * key must still be trusted: that is checked before the cache is looked at.
 */
static struct sig_cache verify_good;
static pthread_once_t verify_once = PTHREAD_ONCE_INIT;
static unsigned long verify_checked; /* ES256 verifications run (under verify_key_lock) */

static void verify_init(void)
{
	sig_cache_init(&verify_good);
}

void verify_forget_signatures(void)
{
	pthread_once(&verify_once, verify_init);
	sig_cache_clear(&verify_good);
}

unsigned long verify_signatures_checked(void)
{
	unsigned long n;

	pthread_mutex_lock(&verify_key_lock);
	n = verify_checked;
	pthread_mutex_unlock(&verify_key_lock);
	return n;
}

/* Writes the reason (one line: control characters become '?') and returns err. */
static enum rcs_err verify_fail(char *reason, size_t reason_len, enum rcs_err err, const char *fmt,
				...) __attribute__((format(printf, 4, 5)));
static enum rcs_err verify_fail(char *reason, size_t reason_len, enum rcs_err err, const char *fmt,
				...)
{
	va_list ap;

	if (reason == NULL || reason_len == 0)
		return err;
	va_start(ap, fmt);
	vsnprintf(reason, reason_len, fmt, ap);
	va_end(ap);
	for (char *p = reason; *p != '\0'; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	}
	return err;
}

/* A string member of a signature object, or NULL. */
static const char *verify_sig_member(json_object *sig, const char *key)
{
	json_object *o = NULL;

	if (!json_object_object_get_ex(sig, key, &o) || !json_object_is_type(o, json_type_string))
		return NULL;
	return json_object_get_string(o);
}

static bool verify_is_key_id(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return i == KEY_ID_LEN - 1;
}

/* Short printable ASCII, safe to quote in a reason. */
static bool verify_is_printable(const char *s, size_t max)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		if (i >= max || s[i] < 0x21 || s[i] > 0x7e || s[i] == '\'')
			return false;
	}
	return i > 0;
}

/* Step 3 with a signature present: the manifest from our own client_root. */
static enum rcs_err verify_signature(const struct verify_ctx *v, const struct proto_envelope *env,
				     char *reason, size_t reason_len)
{
	struct manifest_in in;
	struct buf m;
	const char *alg, *key_id;
	unsigned char digest[32];
	bool known = false, digest_ok;
	/* firmware: the keys of artifact_trusted_key when there are some (docs/agent.md) */
	bool firmware = v->nartifact_trusted > 0 && verify_has_artifacts(env);
	struct sig_key *const *keys = firmware ? v->artifact_trusted : v->trusted;
	size_t nkeys = firmware ? v->nartifact_trusted : v->ntrusted;
	enum rcs_err err;

	buf_init(&m, MANIFEST_MAX);
	if (!json_object_is_type(env->signature, json_type_object)) {
		err = verify_fail(reason, reason_len, RCS_ERR_INVAL, "malformed signature");
		goto out;
	}
	/* the reasons sig_verify_object does not tell apart */
	alg = verify_sig_member(env->signature, "alg");
	key_id = verify_sig_member(env->signature, "key_id");
	if (alg != NULL && strcmp(alg, "ES256") != 0) {
		if (verify_is_printable(alg, 16))
			err =
			    verify_fail(reason, reason_len, RCS_ERR_VERIFY,
					"signature algorithm '%s' not accepted (ES256 only)", alg);
		else
			err = verify_fail(reason, reason_len, RCS_ERR_VERIFY,
					  "signature algorithm not accepted (ES256 only)");
		goto out;
	}
	if (alg == NULL || key_id == NULL || !verify_is_key_id(key_id)) {
		err = verify_fail(reason, reason_len, RCS_ERR_INVAL, "malformed signature");
		goto out;
	}
	for (size_t i = 0; i < nkeys; i++) {
		if (keys[i] != NULL && strcmp(sig_key_id(keys[i]), key_id) == 0)
			known = true;
	}
	if (!known) {
		err = verify_fail(reason, reason_len, RCS_ERR_VERIFY, "unknown signing key %s%s",
				  key_id,
				  firmware ? " (tasks with artifacts: artifact_trusted_key)" : "");
		goto out;
	}

	memset(&in, 0, sizeof(in));
	in.client_root = v->client_root;
	in.task_ident = env->task_ident;
	in.version = env->task_version;
	in.script_name = env->script_name;
	in.script = env->script_source;
	in.script_len = env->script_len;
	in.constants = env->constants;
	in.variables_info = env->variables_info;
	/* with artifacts, manifest v2: they and the release are signed too */
	in.artifacts = env->artifacts;
	in.release = env->release;
	err = manifest_build(&in, &m);
	if (err == RCS_ERR_TOOBIG) {
		err = verify_fail(reason, reason_len, RCS_ERR_TOOBIG, "manifest: over %d bytes",
				  MANIFEST_MAX);
		goto out;
	}
	if (err != RCS_OK) {
		err = verify_fail(reason, reason_len, RCS_ERR_INVAL,
				  "manifest: the task cannot be signed as sent (%s)",
				  rcs_strerror(err));
		goto out;
	}
	pthread_once(&verify_once, verify_init);
	digest_ok = sig_cache_digest(env->signature, m.data, m.len, digest);
	if (digest_ok && sig_cache_has(&verify_good, digest)) {
		err = RCS_OK;
	} else {
		pthread_mutex_lock(&verify_key_lock);
		err = sig_verify_object(keys, nkeys, env->signature, m.data, m.len);
		verify_checked++;
		pthread_mutex_unlock(&verify_key_lock);
		if (err == RCS_OK && digest_ok)
			sig_cache_put(&verify_good, digest);
	}
	if (err == RCS_ERR_VERIFY)
		err = verify_fail(reason, reason_len, RCS_ERR_VERIFY, "signature does not verify");
	else if (err != RCS_OK)
		err = verify_fail(reason, reason_len, RCS_ERR_INVAL, "malformed signature");
out:
	buf_free(&m);
	return err;
}

enum rcs_err verify_envelope_check(const struct verify_ctx *v, const struct proto_envelope *env,
				   int64_t now, enum verify_check *failed, char *reason,
				   size_t reason_len)
{
	struct jsonu_err je;
	long long highest = 0;
	enum verify_check check = VERIFY_SETUP;
	enum rcs_err err;

	if (reason != NULL && reason_len > 0)
		reason[0] = '\0';
	if (v == NULL || env == NULL || v->journal == NULL || v->client_root == NULL ||
	    v->entity_ident == NULL || (v->trusted == NULL && v->ntrusted > 0)) {
		err = verify_fail(reason, reason_len, RCS_ERR_INVAL, "agent misconfigured");
		goto out;
	}

	/* 1. ours */
	check = VERIFY_OURS;
	if (strcasecmp(env->client_root, v->client_root) != 0) {
		err = verify_fail(reason, reason_len, RCS_ERR_FORBIDDEN,
				  "envelope for another tenant");
		goto out;
	}
	if (strcasecmp(env->entity_ident, v->entity_ident) != 0) {
		err = verify_fail(reason, reason_len, RCS_ERR_FORBIDDEN,
				  "envelope for another device");
		goto out;
	}

	/* 2. in time */
	check = VERIFY_EXPIRY;
	if (env->expires_at != 0 && env->expires_at <= now) {
		err = verify_fail(reason, reason_len, RCS_ERR_CONFLICT, "expired at %lld",
				  (long long)env->expires_at);
		goto out;
	}

	/* 3. signed by a key we trust */
	check = VERIFY_SIGNATURE;
	if (env->signature == NULL) {
		if (v->require_signature) {
			err = verify_fail(reason, reason_len, RCS_ERR_VERIFY, "signature required");
			goto out;
		}
		if (v->nartifact_trusted > 0 && verify_has_artifacts(env)) {
			err =
			    verify_fail(reason, reason_len, RCS_ERR_VERIFY,
					"signature required: tasks with artifacts must be signed by"
					" an artifact_trusted_key");
			goto out;
		}
	} else {
		err = verify_signature(v, env, reason, reason_len);
		if (err != RCS_OK)
			goto out;
	}

	/* 4. no rollback */
	check = VERIFY_VERSION;
	err = journal_task_version(v->journal, env->task_ident, &highest);
	if (err != RCS_OK) {
		err = verify_fail(reason, reason_len, err, "journal: %s", rcs_strerror(err));
		goto out;
	}
	if (env->task_version < highest) {
		err = verify_fail(reason, reason_len, RCS_ERR_CONFLICT,
				  "task version %lld is older than version %lld already run",
				  env->task_version, highest);
		goto out;
	}

	/* 5. variables (vars_validate relies on a well-formed variables_info) */
	check = VERIFY_VARIABLES;
	memset(&je, 0, sizeof(je));
	err = vars_info_validate(env->variables_info, &je);
	if (err == RCS_OK)
		err = vars_validate(env->variables, env->variables_info, &je);
	if (err != RCS_OK) {
		err = verify_fail(reason, reason_len, err, "%s: %s",
				  je.field[0] != '\0' ? je.field : "variables", je.message);
		goto out;
	}
	check = VERIFY_PASSED;
out:
	if (failed != NULL)
		*failed = check;
	return err;
}

enum rcs_err verify_envelope(const struct verify_ctx *v, const struct proto_envelope *env,
			     int64_t now, char *reason, size_t reason_len)
{
	return verify_envelope_check(v, env, now, NULL, reason, reason_len);
}

const char *verify_check_cause(enum verify_check failed)
{
	switch (failed) {
	case VERIFY_OURS:
		return "wrong_device";
	case VERIFY_EXPIRY:
		return "expired";
	case VERIFY_SIGNATURE:
		return "signature_invalid";
	case VERIFY_VERSION:
		return "rollback_refused";
	case VERIFY_VARIABLES:
		return "variables_invalid";
	default:
		return "envelope_invalid";
	}
}
