/*
 * proto.c - MQTT protocol v1 topics and payloads. See proto.h.
 */
#include "proto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "text.h"

/* ---- topics ---- */

void proto_topic_make(char out[PROTO_MAX_TOPIC], enum proto_kind kind, const char *client_root,
		      const char *entity_ident, const char *job)
{
	switch (kind) {
	case PROTO_JOB:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/%s/jobs/%s", client_root, entity_ident,
			 job);
		break;
	case PROTO_CANCEL:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/%s/jobs/%s/cancel", client_root,
			 entity_ident, job);
		break;
	case PROTO_STATUS:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/%s/jobs/%s/status", client_root,
			 entity_ident, job);
		break;
	case PROTO_STATE:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/%s/state", client_root, entity_ident);
		break;
	case PROTO_EVENT:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/events/jobs/%s", client_root, job);
		break;
	case PROTO_GROUP_EVENT:
		snprintf(out, PROTO_MAX_TOPIC, "rcs/v1/%s/events/groups/%s", client_root, job);
		break;
	}
}

enum rcs_err proto_topic_parse(const char *topic, struct proto_topic *out)
{
	char copy[PROTO_MAX_TOPIC];
	const char *seg[8];
	int n = 0;
	char *p, *slash;

	memset(out, 0, sizeof(*out));
	if (topic == NULL || strlen(topic) >= sizeof(copy))
		return RCS_ERR_INVAL;
	snprintf(copy, sizeof(copy), "%s", topic);
	p = copy;
	for (;;) {
		if (n >= 8)
			return RCS_ERR_INVAL;
		seg[n++] = p;
		slash = strchr(p, '/');
		if (slash == NULL)
			break;
		*slash = '\0';
		p = slash + 1;
	}
	if (n < 4 || strcmp(seg[0], "rcs") != 0 || strcmp(seg[1], "v1") != 0 || !uuid_valid(seg[2]))
		return RCS_ERR_INVAL;
	snprintf(out->client_root, sizeof(out->client_root), "%s", seg[2]);
	if (n == 6 && strcmp(seg[3], "events") == 0 && strcmp(seg[4], "jobs") == 0 &&
	    uuid_valid(seg[5])) {
		out->kind = PROTO_EVENT;
		snprintf(out->job, sizeof(out->job), "%s", seg[5]);
		return RCS_OK;
	}
	if (n == 6 && strcmp(seg[3], "events") == 0 && strcmp(seg[4], "groups") == 0 &&
	    uuid_valid(seg[5])) {
		out->kind = PROTO_GROUP_EVENT;
		snprintf(out->job, sizeof(out->job), "%s", seg[5]);
		return RCS_OK;
	}
	if (!uuid_valid(seg[3]))
		return RCS_ERR_INVAL;
	snprintf(out->entity_ident, sizeof(out->entity_ident), "%s", seg[3]);
	if (n == 5 && strcmp(seg[4], "state") == 0) {
		out->kind = PROTO_STATE;
		return RCS_OK;
	}
	if (n < 6 || strcmp(seg[4], "jobs") != 0 || !uuid_valid(seg[5]))
		return RCS_ERR_INVAL;
	snprintf(out->job, sizeof(out->job), "%s", seg[5]);
	if (n == 6) {
		out->kind = PROTO_JOB;
		return RCS_OK;
	}
	if (n == 7 && strcmp(seg[6], "cancel") == 0) {
		out->kind = PROTO_CANCEL;
		return RCS_OK;
	}
	if (n == 7 && strcmp(seg[6], "status") == 0) {
		out->kind = PROTO_STATUS;
		return RCS_OK;
	}
	return RCS_ERR_INVAL;
}

/* ---- shared decoding helpers ---- */

static enum rcs_err proto_parse(const char *payload, size_t len, const char *const *keys,
				json_object **root, struct jsonu_err *e)
{
	int64_t v = 0;
	enum rcs_err err;

	*root = NULL;
	if (len > PROTO_MAX_PAYLOAD)
		return jsonu_fail(e, "", "message larger than %d bytes", PROTO_MAX_PAYLOAD);
	err = jsonu_parse_object(payload, len, root, e);
	if (err != RCS_OK)
		return err;
	err = jsonu_get_int(*root, "v", true, 0, 1000, &v, NULL, e);
	if (err == RCS_OK && v != PROTO_VERSION)
		err = jsonu_fail(e, "v", "unsupported protocol version %lld", (long long)v);
	if (err == RCS_OK)
		err = jsonu_check_keys(*root, keys, e);
	if (err != RCS_OK) {
		json_object_put(*root);
		*root = NULL;
	}
	return err;
}

static enum rcs_err proto_get_uuid(json_object *o, const char *key, char out[UUID_STR_LEN],
				   struct jsonu_err *e)
{
	const char *s = NULL;
	enum rcs_err err = jsonu_get_string(o, key, true, 36, &s, NULL, e);

	if (err != RCS_OK)
		return err;
	if (!uuid_valid(s))
		return jsonu_fail(e, key, "'%s' must be a UUID", key);
	snprintf(out, UUID_STR_LEN, "%s", s);
	return RCS_OK;
}

/* An integer or null (0). */
static enum rcs_err proto_get_time(json_object *o, const char *key, bool required, int64_t *out,
				   struct jsonu_err *e)
{
	*out = 0;
	if (!json_object_object_get_ex(o, key, NULL)) {
		if (required)
			return jsonu_fail(e, key, "'%s' is required", key);
		return RCS_OK;
	}
	return jsonu_get_int(o, key, false, 0, INT64_MAX - 1, out, NULL, e);
}

/* ---- envelope ---- */

/* The members of an envelope that come from its task version alone. */
static void proto_envelope_version_members(json_object *o, const struct proto_envelope *env)
{
	json_object *script = json_object_new_object();

	json_object_object_add(script, "name", json_object_new_string(env->script_name));
	json_object_object_add(script, "sha256", json_object_new_string(env->script_sha256));
	json_object_object_add(
	    script, "source", json_object_new_string_len(env->script_source, (int)env->script_len));
	json_object_object_add(o, "script", script);
	json_object_object_add(o, "constants",
			       env->constants ? json_object_get(env->constants)
					      : json_object_new_object());
	json_object_object_add(o, "variables_info",
			       env->variables_info ? json_object_get(env->variables_info)
						   : json_object_new_object());
	json_object_object_add(o, "signature",
			       env->signature ? json_object_get(env->signature) : NULL);
	json_object_object_add(o, "timeout", json_object_new_int64(env->timeout));
	if (env->artifacts != NULL) {
		json_object_object_add(o, "artifacts", json_object_get(env->artifacts));
		json_object_object_add(o, "release",
				       env->release ? json_object_get(env->release) : NULL);
		json_object_object_add(o, "download_timeout",
				       json_object_new_int64(env->download_timeout));
	}
}

json_object *proto_envelope_encode(const struct proto_envelope *env)
{
	json_object *o = json_object_new_object(), *task = json_object_new_object();

	json_object_object_add(o, "v", json_object_new_int(PROTO_VERSION));
	json_object_object_add(o, "job", json_object_new_string(env->job));
	json_object_object_add(o, "client_root", json_object_new_string(env->client_root));
	json_object_object_add(o, "entity_ident", json_object_new_string(env->entity_ident));
	json_object_object_add(task, "ident", json_object_new_string(env->task_ident));
	json_object_object_add(task, "version", json_object_new_int64(env->task_version));
	json_object_object_add(task, "name", json_object_new_string(env->task_name));
	json_object_object_add(o, "task", task);
	proto_envelope_version_members(o, env);
	json_object_object_add(o, "variables",
			       env->variables ? json_object_get(env->variables)
					      : json_object_new_object());
	json_object_object_add(o, "issued_at", json_object_new_int64(env->issued_at));
	json_object_object_add(o, "expires_at",
			       env->expires_at ? json_object_new_int64(env->expires_at) : NULL);
	if (env->artifact_token != NULL)
		json_object_object_add(o, "artifact_token",
				       json_object_new_string(env->artifact_token));
	return o;
}

char *proto_envelope_version_text(const struct proto_envelope *env, size_t *len)
{
	json_object *o = json_object_new_object();
	const char *text;
	char *members = NULL;
	size_t n = 0;

	*len = 0;
	if (o == NULL)
		return NULL;
	proto_envelope_version_members(o, env);
	text = jsonu_dump(o, &n);
	if (text != NULL && n >= 2 && text[0] == '{' && text[n - 1] == '}' &&
	    (members = malloc(n - 1)) != NULL) {
		memcpy(members, text + 1, n - 2);
		members[n - 2] = '\0';
		*len = n - 2;
	}
	json_object_put(o);
	return members;
}

/* A key of an envelope's artifacts: [a-z0-9_][a-z0-9_.-]{0,63}. */
static bool proto_artifact_key(const char *k)
{
	size_t n = strlen(k);

	if (n == 0 || n > PROTO_MAX_ARTIFACT_KEY || k[0] == '.' || k[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_' ||
		      k[i] == '.' || k[i] == '-'))
			return false;
	return true;
}

/* The artifacts of an envelope: {"<key>": {"sha256": <64 lowercase hex>, "size": n}}, at
 * most PROTO_MAX_ARTIFACTS; with them release (object or null), download_timeout
 * (60-604800, 86400 when absent) and artifact_token. None of them without artifacts. */
static enum rcs_err proto_envelope_artifacts(struct proto_envelope *out, struct jsonu_err *e)
{
	static const char *const one_keys[] = {"sha256", "size", NULL};
	json_object *a = NULL;
	int64_t v = 86400;
	enum rcs_err err;

	err = jsonu_get_object(out->root, "artifacts", false, &a, NULL, e);
	if (err != RCS_OK)
		return err;
	if (a == NULL || json_object_object_length(a) == 0) {
		if (json_object_object_get_ex(out->root, "release", NULL) ||
		    json_object_object_get_ex(out->root, "download_timeout", NULL) ||
		    json_object_object_get_ex(out->root, "artifact_token", NULL))
			return jsonu_fail(e, "artifacts",
					  "release, download_timeout and artifact_token come"
					  " only with artifacts");
		return RCS_OK;
	}
	if (json_object_object_length(a) > PROTO_MAX_ARTIFACTS)
		return jsonu_fail(e, "artifacts", "more than %d artifacts", PROTO_MAX_ARTIFACTS);
	json_object_object_foreach(a, key, one)
	{
		const char *sha = NULL;
		int64_t size = 0;

		if (!proto_artifact_key(key))
			return jsonu_fail(e, "artifacts", "'%.64s' is not an artifact key", key);
		if (!json_object_is_type(one, json_type_object) ||
		    jsonu_check_keys(one, one_keys, e) != RCS_OK ||
		    jsonu_get_string(one, "sha256", true, 64, &sha, NULL, e) != RCS_OK ||
		    jsonu_get_int(one, "size", true, 0, (1LL << 53) - 1, &size, NULL, e) !=
			RCS_OK ||
		    strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
			return jsonu_fail(e, "artifacts",
					  "artifacts.%.64s must be {\"sha256\": <64 lowercase hex>,"
					  " \"size\": <bytes>}",
					  key);
	}
	out->artifacts = a;
	err = jsonu_get_object(out->root, "release", false, &out->release, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_int(out->root, "download_timeout", false, 60, 604800, &v, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_string(out->root, "artifact_token", false, PROTO_MAX_TOKEN,
				       &out->artifact_token, NULL, e);
	out->download_timeout = v;
	return err;
}

enum rcs_err proto_envelope_decode(const char *payload, size_t len, struct proto_envelope *out,
				   struct jsonu_err *e)
{
	static const char *const keys[] = {
	    "v", "job", "client_root", "entity_ident", "task", "script", "constants",
	    "variables_info", "variables", "signature", "issued_at", "expires_at", "timeout",
	    /* section 12 of docs/mqtt.md: read by the agent from root (agent/artifact.c) */
	    "artifacts", "artifact_token", "download_timeout", "release", NULL};
	static const char *const task_keys[] = {"ident", "version", "name", NULL};
	static const char *const script_keys[] = {"name", "sha256", "source", NULL};
	json_object *task = NULL, *script = NULL, *sig = NULL;
	const char *sha = NULL;
	char actual[SHA256_HEX_LEN];
	int64_t v = 0;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = proto_parse(payload, len, keys, &out->root, e);
	if (err != RCS_OK)
		return err;
	if ((err = proto_get_uuid(out->root, "job", out->job, e)) != RCS_OK ||
	    (err = proto_get_uuid(out->root, "client_root", out->client_root, e)) != RCS_OK ||
	    (err = proto_get_uuid(out->root, "entity_ident", out->entity_ident, e)) != RCS_OK ||
	    (err = jsonu_get_object(out->root, "task", true, &task, NULL, e)) != RCS_OK ||
	    (err = jsonu_check_keys(task, task_keys, e)) != RCS_OK ||
	    (err = proto_get_uuid(task, "ident", out->task_ident, e)) != RCS_OK ||
	    (err = jsonu_get_int(task, "version", true, 1, INT32_MAX, &v, NULL, e)) != RCS_OK)
		goto out;
	out->task_version = v;
	if ((err = jsonu_get_string(task, "name", true, 200, &out->task_name, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_object(out->root, "script", true, &script, NULL, e)) != RCS_OK ||
	    (err = jsonu_check_keys(script, script_keys, e)) != RCS_OK ||
	    (err = jsonu_get_string(script, "name", true, 64, &out->script_name, NULL, e)) !=
		RCS_OK ||
	    (err = jsonu_get_string(script, "sha256", true, 64, &sha, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_string(script, "source", true, PROTO_MAX_SCRIPT, &out->script_source,
				    NULL, e)) != RCS_OK)
		goto out;
	out->script_len = strlen(out->script_source);
	sha256_hex(out->script_source, out->script_len, actual);
	if (strcmp(actual, sha) != 0) {
		err =
		    jsonu_fail(e, "script.sha256", "'script.sha256' does not match script.source");
		goto out;
	}
	snprintf(out->script_sha256, sizeof(out->script_sha256), "%s", sha);
	if ((err = jsonu_get_object(out->root, "constants", true, &out->constants, NULL, e)) !=
		RCS_OK ||
	    (err = jsonu_get_object(out->root, "variables_info", true, &out->variables_info, NULL,
				    e)) != RCS_OK ||
	    (err = jsonu_get_object(out->root, "variables", true, &out->variables, NULL, e)) !=
		RCS_OK)
		goto out;
	if (!json_object_object_get_ex(out->root, "signature", NULL)) {
		err = jsonu_fail(e, "signature", "'signature' is required (null when unsigned)");
		goto out;
	}
	if ((err = jsonu_get_object(out->root, "signature", false, &sig, NULL, e)) != RCS_OK)
		goto out;
	out->signature = sig;
	if ((err = proto_get_time(out->root, "issued_at", true, &out->issued_at, e)) != RCS_OK ||
	    (err = proto_get_time(out->root, "expires_at", true, &out->expires_at, e)) != RCS_OK ||
	    (err = jsonu_get_int(out->root, "timeout", true, 1, 86400, &v, NULL, e)) != RCS_OK)
		goto out;
	out->timeout = v;
	err = proto_envelope_artifacts(out, e);
out:
	if (err != RCS_OK)
		proto_envelope_free(out);
	return err;
}

void proto_envelope_free(struct proto_envelope *env)
{
	if (env->root)
		json_object_put(env->root);
	memset(env, 0, sizeof(*env));
}

/* ---- status report ---- */

json_object *proto_report_encode(const struct proto_report *r)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "v", json_object_new_int(PROTO_VERSION));
	json_object_object_add(o, "job", json_object_new_string(r->job));
	json_object_object_add(o, "status", json_object_new_string(status_name(r->status)));
	json_object_object_add(o, "seq", json_object_new_int64(r->seq));
	json_object_object_add(o, "ts", json_object_new_int64(r->ts));
	json_object_object_add(o, "response", jsonu_new_string_or_null(r->response));
	if (r->error != NULL && r->status == JS_EDGE_ERROR)
		json_object_object_add(o, "error", json_object_new_string(r->error));
	if (r->phase != NULL)
		json_object_object_add(o, "phase", json_object_new_string(r->phase));
	if (r->within > 0 && r->phase != NULL && r->status == JS_EDGE_RUNNING)
		json_object_object_add(o, "within", json_object_new_int64(r->within));
	if (r->has_progress && r->status == JS_EDGE_RUNNING) {
		json_object *p = json_object_new_object();

		json_object_object_add(p, "done", json_object_new_int64(r->progress_done));
		json_object_object_add(p, "total", json_object_new_int64(r->progress_total));
		json_object_object_add(o, "progress", p);
	}
	return o;
}

bool proto_word_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > PROTO_MAX_ERROR || n > PROTO_MAX_PHASE)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* ---- a report's plain path: no JSON tree (proto_report_decode) ---- */

enum report_member {
	RM_V,
	RM_JOB,
	RM_STATUS,
	RM_SEQ,
	RM_TS,
	RM_RESPONSE,
	RM_ERROR,
	RM_PHASE,
	RM_WITHIN,
	RM__COUNT
};

/* A member's value on the plain path: a string (NUL-terminated in the copy), a plain
 * non-negative integer, or null. */
struct report_value {
	enum { RV_NONE, RV_STRING, RV_INT, RV_NULL } kind;
	const char *s;
	size_t len;
	long long i;
};

static bool report_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A string without escapes or control characters from p[*i] (the opening quote), closed
 * in place with a NUL. */
static bool report_string(char *p, size_t len, size_t *i, const char **s, size_t *n)
{
	size_t k = *i + 1;

	while (k < len && p[k] != '"') {
		if (p[k] == '\\' || (unsigned char)p[k] < 0x20)
			return false;
		k++;
	}
	if (k >= len)
		return false;
	*s = p + *i + 1;
	*n = k - (*i + 1);
	p[k] = '\0';
	*i = k + 1;
	return true;
}

static bool report_value(char *p, size_t len, size_t *i, struct report_value *v)
{
	size_t k = *i, digits = 0;

	if (k < len && p[k] == '"') {
		v->kind = RV_STRING;
		return report_string(p, len, i, &v->s, &v->len);
	}
	if (len - k >= 4 && memcmp(p + k, "null", 4) == 0) {
		v->kind = RV_NULL;
		*i = k + 4;
		return true;
	}
	v->kind = RV_INT;
	v->i = 0;
	while (k < len && p[k] >= '0' && p[k] <= '9' && digits < 18) {
		v->i = v->i * 10 + (p[k] - '0');
		k++;
		digits++;
	}
	/* no sign, fraction, exponent or leading zero, at most 18 digits */
	if (digits == 0 || (digits > 1 && p[*i] == '0') ||
	    (k < len && !report_ws(p[k]) && p[k] != ',' && p[k] != '}'))
		return false;
	*i = k;
	return true;
}

/* The flat object of a report's members into m[] (each once, no other). */
static bool report_members(char *p, size_t len, struct report_value m[RM__COUNT])
{
	static const char *const names[RM__COUNT] = {"v",        "job",   "status", "seq",   "ts",
						     "response", "error", "phase",  "within"};
	size_t i = 0;

	while (i < len && report_ws(p[i]))
		i++;
	if (i >= len || p[i++] != '{')
		return false;
	for (;;) {
		const char *key;
		size_t n, k;

		while (i < len && report_ws(p[i]))
			i++;
		if (i >= len || p[i] != '"' || !report_string(p, len, &i, &key, &n))
			return false;
		for (k = 0; k < RM__COUNT; k++)
			if (strlen(names[k]) == n && memcmp(names[k], key, n) == 0)
				break;
		if (k == RM__COUNT || m[k].kind != RV_NONE)
			return false; /* another member, or one twice */
		while (i < len && report_ws(p[i]))
			i++;
		if (i >= len || p[i++] != ':')
			return false;
		while (i < len && report_ws(p[i]))
			i++;
		if (!report_value(p, len, &i, &m[k]))
			return false;
		while (i < len && report_ws(p[i]))
			i++;
		if (i < len && p[i] == ',') {
			i++;
			continue;
		}
		if (i >= len || p[i++] != '}')
			return false;
		break;
	}
	while (i < len && report_ws(p[i]))
		i++;
	return i == len;
}

/* The plain path: true with *out filled, or false with nothing kept (the general path then
 * decides). Accepts only what proto_report_decode_json accepts, with the same result. */
static bool proto_report_plain(const char *payload, size_t len, struct proto_report *out)
{
	struct report_value m[RM__COUNT];
	char *p = NULL;
	bool ok = false;

	memset(m, 0, sizeof(m));
	if (len == 0 || len > PROTO_MAX_PAYLOAD || !text_utf8_valid(payload, len) ||
	    (p = malloc(len + 1)) == NULL)
		goto out;
	memcpy(p, payload, len);
	p[len] = '\0';
	if (!report_members(p, len, m))
		goto out;
	if (m[RM_V].kind != RV_INT || m[RM_V].i != PROTO_VERSION || m[RM_JOB].kind != RV_STRING ||
	    m[RM_JOB].len != 36 || !uuid_valid(m[RM_JOB].s) || m[RM_STATUS].kind != RV_STRING ||
	    m[RM_STATUS].len > 32 || !status_parse(m[RM_STATUS].s, &out->status) ||
	    !status_is_device(out->status) || m[RM_SEQ].kind != RV_INT || m[RM_SEQ].i < 1 ||
	    (m[RM_TS].kind != RV_INT && m[RM_TS].kind != RV_NULL) ||
	    (m[RM_RESPONSE].kind != RV_NONE && m[RM_RESPONSE].kind != RV_NULL &&
	     (m[RM_RESPONSE].kind != RV_STRING || m[RM_RESPONSE].len > PROTO_MAX_RESPONSE)) ||
	    (m[RM_ERROR].kind != RV_NONE && m[RM_ERROR].kind != RV_NULL &&
	     (m[RM_ERROR].kind != RV_STRING || m[RM_ERROR].len > PROTO_MAX_ERROR ||
	      !proto_word_valid(m[RM_ERROR].s))) ||
	    (m[RM_PHASE].kind != RV_NONE && m[RM_PHASE].kind != RV_NULL &&
	     (m[RM_PHASE].kind != RV_STRING || !proto_word_valid(m[RM_PHASE].s))) ||
	    (m[RM_WITHIN].kind != RV_NONE && m[RM_WITHIN].kind != RV_NULL &&
	     (m[RM_WITHIN].kind != RV_INT || m[RM_WITHIN].i < PROTO_WITHIN_MIN ||
	      m[RM_WITHIN].i > PROTO_WITHIN_MAX)))
		goto out;
	memcpy(out->job, m[RM_JOB].s, UUID_STR_LEN);
	out->seq = m[RM_SEQ].i;
	out->ts = m[RM_TS].kind == RV_INT ? m[RM_TS].i : 0;
	out->response = m[RM_RESPONSE].kind == RV_STRING ? m[RM_RESPONSE].s : NULL;
	out->error =
	    m[RM_ERROR].kind == RV_STRING && out->status == JS_EDGE_ERROR ? m[RM_ERROR].s : NULL;
	out->phase = m[RM_PHASE].kind == RV_STRING ? m[RM_PHASE].s : NULL;
	out->within =
	    m[RM_WITHIN].kind == RV_INT && out->phase != NULL && out->status == JS_EDGE_RUNNING
		? m[RM_WITHIN].i
		: 0;
	out->text = p;
	p = NULL;
	ok = true;
out:
	free(p);
	return ok;
}

enum rcs_err proto_report_decode(const char *payload, size_t len, struct proto_report *out,
				 struct jsonu_err *e)
{
	memset(out, 0, sizeof(*out));
	if (proto_report_plain(payload, len, out))
		return RCS_OK;
	memset(out, 0, sizeof(*out));
	return proto_report_decode_json(payload, len, out, e);
}

/* A report's "progress" (null or absent: none): {"done", "total"}, bytes, done <= total;
 * kept on edge_running only. */
static enum rcs_err proto_report_progress(struct proto_report *out, struct jsonu_err *e)
{
	static const char *const keys[] = {"done", "total", NULL};
	json_object *p = NULL;
	int64_t done = 0, total = 0;
	enum rcs_err err;

	err = jsonu_get_object(out->root, "progress", false, &p, NULL, e);
	if (err != RCS_OK || p == NULL)
		return err;
	if (jsonu_check_keys(p, keys, e) != RCS_OK ||
	    jsonu_get_int(p, "done", true, 0, (1LL << 53) - 1, &done, NULL, e) != RCS_OK ||
	    jsonu_get_int(p, "total", true, 0, (1LL << 53) - 1, &total, NULL, e) != RCS_OK ||
	    done > total)
		return jsonu_fail(e, "progress",
				  "'progress' must be {\"done\": <bytes>, \"total\": <bytes>},"
				  " done <= total");
	out->has_progress = out->status == JS_EDGE_RUNNING;
	out->progress_done = done;
	out->progress_total = total;
	return RCS_OK;
}

/* A report's "phase" (null or absent: none) and "within" (null or absent: 0; kept on an
 * edge_running report with a phase only). */
static enum rcs_err proto_report_phase(struct proto_report *out, struct jsonu_err *e)
{
	int64_t within = 0;
	enum rcs_err err;

	err = jsonu_get_string(out->root, "phase", false, PROTO_MAX_PHASE, &out->phase, NULL, e);
	if (err != RCS_OK)
		return err;
	if (out->phase != NULL && !proto_word_valid(out->phase))
		return jsonu_fail(e, "phase", "'phase' must be 1-32 of a-z, 0-9 and _");
	err = jsonu_get_int(out->root, "within", false, PROTO_WITHIN_MIN, PROTO_WITHIN_MAX, &within,
			    NULL, e);
	if (err != RCS_OK)
		return err;
	out->within = out->phase != NULL && out->status == JS_EDGE_RUNNING ? (long long)within : 0;
	return RCS_OK;
}

enum rcs_err proto_report_decode_json(const char *payload, size_t len, struct proto_report *out,
				      struct jsonu_err *e)
{
	static const char *const keys[] = {"v",     "job",      "status", "seq",
					   "ts",    "response", "error",  "progress",
					   "phase", "within",   NULL};
	const char *status = NULL;
	int64_t seq = 0;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = proto_parse(payload, len, keys, &out->root, e);
	if (err != RCS_OK)
		return err;
	if ((err = proto_get_uuid(out->root, "job", out->job, e)) != RCS_OK ||
	    (err = jsonu_get_string(out->root, "status", true, 32, &status, NULL, e)) != RCS_OK)
		goto out;
	if (!status_parse(status, &out->status) || !status_is_device(out->status)) {
		err = jsonu_fail(e, "status", "'%.32s' is not a status a device reports", status);
		goto out;
	}
	if ((err = jsonu_get_int(out->root, "seq", true, 1, INT64_MAX - 1, &seq, NULL, e)) !=
		RCS_OK ||
	    (err = proto_get_time(out->root, "ts", true, &out->ts, e)) != RCS_OK ||
	    (err = jsonu_get_string(out->root, "response", false, PROTO_MAX_RESPONSE,
				    &out->response, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_string(out->root, "error", false, PROTO_MAX_ERROR, &out->error, NULL,
				    e)) != RCS_OK)
		goto out;
	if (out->error != NULL && !proto_word_valid(out->error)) {
		err = jsonu_fail(e, "error", "'error' must be 1-32 of a-z, 0-9 and _");
		goto out;
	}
	if (out->status != JS_EDGE_ERROR)
		out->error = NULL; /* a cause only means something for edge_error */
	err = proto_report_phase(out, e);
	if (err == RCS_OK)
		err = proto_report_progress(out, e);
	if (err != RCS_OK)
		goto out;
	out->seq = seq;
out:
	if (err != RCS_OK)
		proto_report_free(out);
	return err;
}

void proto_report_free(struct proto_report *r)
{
	if (r->root)
		json_object_put(r->root);
	free(r->text);
	memset(r, 0, sizeof(*r));
}

/* ---- state ---- */

bool proto_attr_key_valid(const char *key, size_t n)
{
	if (n == 0 || n > PROTO_MAX_ATTR_KEY)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)key[i]) && strchr("_.-", key[i]) == NULL)
			return false;
	return true;
}

bool proto_attr_value_valid(const char *value, size_t n)
{
	return n <= PROTO_MAX_ATTR_VALUE && text_printable(value, n);
}

enum rcs_err proto_attrs_check(json_object *attrs, struct jsonu_err *e)
{
	size_t total = 0, n = 0;

	if (!json_object_is_type(attrs, json_type_object))
		return jsonu_fail(e, "attributes", "must be an object");
	json_object_object_foreach(attrs, key, val)
	{
		const char *v = json_object_get_string(val);
		size_t vlen = (size_t)json_object_get_string_len(val);

		if (++n > PROTO_MAX_ATTRS)
			return jsonu_fail(e, "attributes", "more than %d attributes",
					  PROTO_MAX_ATTRS);
		if (!proto_attr_key_valid(key, strlen(key)))
			return jsonu_fail(e, "attributes", "'%.64s' is not a valid attribute key",
					  key);
		if (!json_object_is_type(val, json_type_string) || !proto_attr_value_valid(v, vlen))
			return jsonu_fail(e, "attributes", "'%s' is not a valid attribute value",
					  key);
		total += strlen(key) + vlen;
		if (total > PROTO_MAX_ATTRS_BYTES)
			return jsonu_fail(e, "attributes", "more than %d bytes",
					  PROTO_MAX_ATTRS_BYTES);
	}
	return RCS_OK;
}

json_object *proto_state_encode(const struct proto_state *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "v", json_object_new_int(PROTO_VERSION));
	json_object_object_add(o, "online", json_object_new_boolean(s->online));
	json_object_object_add(o, "tags",
			       s->tags ? json_object_get(s->tags) : json_object_new_array());
	json_object_object_add(o, "agent_version", jsonu_new_string_or_null(s->agent_version));
	json_object_object_add(o, "ts", json_object_new_int64(s->ts));
	if (s->attributes)
		json_object_object_add(o, "attributes", json_object_get(s->attributes));
	return o;
}

enum rcs_err proto_state_decode(const char *payload, size_t len, struct proto_state *out,
				struct jsonu_err *e)
{
	static const char *const keys[] = {"v",  "online",     "tags", "agent_version",
					   "ts", "attributes", NULL};
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = proto_parse(payload, len, keys, &out->root, e);
	if (err != RCS_OK)
		return err;
	if ((err = jsonu_get_bool(out->root, "online", true, &out->online, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_string_array(out->root, "tags", false, PROTO_MAX_TAGS, 64, &out->tags,
					  NULL, e)) != RCS_OK ||
	    (err = jsonu_get_string(out->root, "agent_version", false, 64, &out->agent_version,
				    NULL, e)) != RCS_OK ||
	    (err = proto_get_time(out->root, "ts", false, &out->ts, e)) != RCS_OK)
		goto out;
	out->attributes = jsonu_member(out->root, "attributes");
	if (out->attributes && json_object_is_type(out->attributes, json_type_null))
		out->attributes = NULL;
	if (out->attributes)
		err = proto_attrs_check(out->attributes, e);
out:
	if (err != RCS_OK)
		proto_state_free(out);
	return err;
}

void proto_state_free(struct proto_state *s)
{
	if (s->root)
		json_object_put(s->root);
	memset(s, 0, sizeof(*s));
}

/* ---- cancel ---- */

json_object *proto_cancel_encode(const struct proto_cancel *c)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "v", json_object_new_int(PROTO_VERSION));
	json_object_object_add(o, "job", json_object_new_string(c->job));
	json_object_object_add(o, "reason", jsonu_new_string_or_null(c->reason));
	return o;
}

enum rcs_err proto_cancel_decode(const char *payload, size_t len, struct proto_cancel *out,
				 struct jsonu_err *e)
{
	static const char *const keys[] = {"v", "job", "reason", NULL};
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = proto_parse(payload, len, keys, &out->root, e);
	if (err != RCS_OK)
		return err;
	if ((err = proto_get_uuid(out->root, "job", out->job, e)) != RCS_OK ||
	    (err = jsonu_get_string(out->root, "reason", false, 1024, &out->reason, NULL, e)) !=
		RCS_OK)
		proto_cancel_free(out);
	return err;
}

void proto_cancel_free(struct proto_cancel *c)
{
	if (c->root)
		json_object_put(c->root);
	memset(c, 0, sizeof(*c));
}
