/*
 * artifact_env.c - what an envelope says of a job's artifacts and release, and whether the
 * device takes the release. See artifact_env.h; docs/agent.md "Artifacts" and "Releases".
 */
#include "artifact_env.h"

#include <stdio.h>
#include <string.h>

#include "jsonu.h"

/* ---- the envelope ---- */

static bool artifact_name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > ARTIFACT_NAME_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '.' || s[i] == '-'))
			return false;
	return true;
}

bool artifact_sha256_valid(const char *s)
{
	size_t n = strlen(s);

	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool artifact_token_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > ARTIFACT_TOKEN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("._~+/=-", s[i]) != NULL))
			return false;
	return true;
}

/* One "<name>": {"sha256", "size"} into a. */
static enum rcs_err artifact_decode_one(const char *name, json_object *v, struct artifact *a,
					struct jsonu_err *e)
{
	static const char *const keys[] = {"sha256", "size", NULL};
	const char *sha = NULL;
	int64_t size = 0;
	enum rcs_err err;

	if (!artifact_name_valid(name))
		return jsonu_fail(e, "artifacts",
				  "artifact name '%.80s': 1-64 of a-z, 0-9, _.-"
				  " (not first: . or -)",
				  name);
	if (!json_object_is_type(v, json_type_object))
		return jsonu_fail(e, "artifacts", "artifacts.%s: must be an object", name);
	if ((err = jsonu_check_keys(v, keys, e)) != RCS_OK ||
	    (err = jsonu_get_string(v, "sha256", true, 64, &sha, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_int(v, "size", true, 0, ARTIFACT_SIZE_MAX, &size, NULL, e)) != RCS_OK)
		return err;
	if (!artifact_sha256_valid(sha))
		return jsonu_fail(e, "artifacts", "artifacts.%s.sha256: 64 lowercase hex digits",
				  name);
	snprintf(a->name, sizeof(a->name), "%s", name);
	snprintf(a->sha256, sizeof(a->sha256), "%s", sha);
	a->size = size;
	return RCS_OK;
}

/* A stream or device type: 1-64 of [A-Za-z0-9_.:/-]. */
static bool artifact_word_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("_.:/-", s[i]) != NULL))
			return false;
	return true;
}

static enum rcs_err artifact_decode_release(json_object *root, struct artifact_release *r,
					    struct jsonu_err *e)
{
	static const char *const keys[] = {"stream", "seq", "device_types", "allow_downgrade",
					   NULL};
	json_object *o = NULL, *types = NULL;
	const char *stream = NULL;
	int64_t seq = 0;
	enum rcs_err err;

	if ((err = jsonu_get_object(root, "release", false, &o, NULL, e)) != RCS_OK || o == NULL)
		return err;
	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = jsonu_get_string(o, "stream", true, 64, &stream, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "seq", true, 0, INT64_C(1) << 53, &seq, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_bool(o, "allow_downgrade", false, &r->allow_downgrade, NULL, e)) !=
		RCS_OK ||
	    (err = jsonu_get_array(o, "device_types", false, ARTIFACT_MAX_DEVICE_TYPES, &types,
				   NULL, e)) != RCS_OK)
		return err;
	if (!artifact_word_valid(stream))
		return jsonu_fail(e, "release", "release.stream: 1-64 of A-Z, a-z, 0-9, _.:/-");
	snprintf(r->stream, sizeof(r->stream), "%s", stream);
	r->seq = seq;
	for (size_t i = 0; types != NULL && i < json_object_array_length(types); i++) {
		json_object *t = json_object_array_get_idx(types, i);
		if (!json_object_is_type(t, json_type_string) ||
		    !artifact_word_valid(json_object_get_string(t)))
			return jsonu_fail(e, "release",
					  "release.device_types: names of 1-64 of"
					  " A-Z, a-z, 0-9, _.:/-");
		snprintf(r->types[r->ntypes++], sizeof(r->types[0]), "%s",
			 json_object_get_string(t));
	}
	r->present = true;
	return RCS_OK;
}

const char *artifact_release_check(const struct artifact_set *set, const char *device_type,
				   struct journal *journal, char *reason, size_t reason_len)
{
	const struct artifact_release *r = &set->release;
	long long done = 0;
	bool listed = r->ntypes == 0;
	enum rcs_err err;

	if (!r->present)
		return NULL;
	for (size_t i = 0; i < r->ntypes && device_type != NULL; i++)
		listed = listed || strcmp(r->types[i], device_type) == 0;
	if (!listed) {
		snprintf(reason, reason_len,
			 "release %s %lld is for other device types than this one (%s)", r->stream,
			 r->seq, device_type ? device_type : "no device_type configured");
		return "incompatible";
	}
	err = journal_release_seq(journal, r->stream, &done);
	if (err != RCS_OK && err != RCS_ERR_NOTFOUND) {
		snprintf(reason, reason_len, "journal: %s", rcs_strerror(err));
		return "journal_unavailable";
	}
	if (err == RCS_OK && r->seq < done && !r->allow_downgrade) {
		snprintf(
		    reason, reason_len,
		    "release %s %lld is older than %lld already installed (no allow_downgrade)",
		    r->stream, r->seq, done);
		return "rollback_refused";
	}
	return NULL;
}

enum rcs_err artifact_set_decode(json_object *root, struct artifact_set *out, char *reason,
				 size_t reason_len)
{
	struct jsonu_err e;
	json_object *arts = NULL;
	const char *token = NULL;
	int64_t timeout = ARTIFACT_DEFAULT_TIMEOUT;
	bool has_timeout = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	memset(&e, 0, sizeof(e));
	out->download_timeout = ARTIFACT_DEFAULT_TIMEOUT;
	if ((err = jsonu_get_object(root, "artifacts", false, &arts, NULL, &e)) != RCS_OK ||
	    (err = jsonu_get_int(root, "download_timeout", false, ARTIFACT_MIN_TIMEOUT,
				 ARTIFACT_MAX_TIMEOUT, &timeout, &has_timeout, &e)) != RCS_OK)
		goto out;
	if (has_timeout)
		out->download_timeout = timeout;
	if (arts != NULL) {
		json_object_object_foreach(arts, name, v)
		{
			if (out->n == ARTIFACT_MAX) {
				err = jsonu_fail(&e, "artifacts", "more than %d artifacts",
						 ARTIFACT_MAX);
				goto out;
			}
			err = artifact_decode_one(name, v, &out->a[out->n], &e);
			if (err != RCS_OK)
				goto out;
			out->n++;
		}
	}
	if ((err = jsonu_get_string(root, "artifact_token", false, ARTIFACT_TOKEN_MAX, &token, NULL,
				    &e)) != RCS_OK)
		goto out;
	if (token != NULL && !artifact_token_valid(token)) {
		err = jsonu_fail(&e, "artifact_token", "'artifact_token' is malformed");
		goto out;
	}
	if (out->n > 0 && token == NULL) {
		err =
		    jsonu_fail(&e, "artifact_token", "'artifact_token' is required with artifacts");
		goto out;
	}
	if (token != NULL)
		snprintf(out->token, sizeof(out->token), "%s", token);
	err = artifact_decode_release(root, &out->release, &e);
out:
	if (err != RCS_OK) {
		snprintf(reason, reason_len, "malformed envelope: %s", e.message);
		memset(out, 0, sizeof(*out));
	}
	return err;
}
