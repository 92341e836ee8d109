/*
 * api_task_artifacts.c - what a task says of artifacts (docs/api.md, "Tasks"): the
 * artifacts it pins ({"<key>": "sha256:<hex>"}, each one the tenant's), its release and its
 * download_timeout, read from a task's body; and the forms a version keeps them in (the
 * record's, what manifest v2 signs, the rows of task_artifacts). See api_task_artifacts.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_task_artifacts.h"
#include "store_artifacts.h"
#include "vars.h"

#define TASK_ART_IDENT_PREFIX "sha256:"

/* A key of a task's artifacts: [a-z0-9_][a-z0-9_.-]{0,63} (docs/api.md, "Tasks"). */
static bool task_art_key_ok(const char *k)
{
	size_t n = strlen(k);

	if (n == 0 || n > API_TASK_ARTIFACT_KEY_MAX || k[0] == '.' || k[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-'))
			return false;
	}
	return true;
}

/* "sha256:" and 64 lowercase hex digits: the hex into sha. */
static bool task_art_ident(const char *s, char sha[65])
{
	size_t p = sizeof(TASK_ART_IDENT_PREFIX) - 1;

	if (strncmp(s, TASK_ART_IDENT_PREFIX, p) != 0 || strlen(s + p) != 64)
		return false;
	for (size_t i = 0; i < 64; i++) {
		char c = s[p + i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	memcpy(sha, s + p, 65);
	return true;
}

/* The body's artifacts object o (non-empty) as the record's form into ta->record. */
static enum rcs_err task_art_record(struct api_req *req, const char *client_root, json_object *o,
				    struct api_task_arts *ta, struct jsonu_err *e)
{
	char field[96], sha[65];
	enum rcs_err err = RCS_OK;

	if (json_object_object_length(o) > API_TASK_MAX_ARTIFACTS)
		return jsonu_fail(e, "artifacts", "a task pins at most %d artifacts",
				  API_TASK_MAX_ARTIFACTS);
	ta->record = json_object_new_object();
	if (ta->record == NULL)
		return RCS_ERR_NOMEM;
	json_object_object_foreach(o, key, v)
	{
		struct artifact_rec a;
		json_object *one;

		snprintf(field, sizeof(field), "artifacts.%.64s", key);
		if (!task_art_key_ok(key))
			return jsonu_fail(
			    e, "artifacts",
			    "artifact keys are 1-64 of a-z, 0-9, _ . - (not first . -)");
		if (!json_object_is_type(v, json_type_string) ||
		    !task_art_ident(json_object_get_string(v), sha))
			return jsonu_fail(
			    e, field, "'%s' must be sha256: and 64 lowercase hex digits", field);
		err = store_artifact_get(req->app->st, client_root, sha, &a);
		if (err == RCS_ERR_NOTFOUND)
			return jsonu_fail(e, field, "'%s': no artifact %s", field,
					  json_object_get_string(v));
		if (err != RCS_OK)
			return err;
		one = json_object_new_object();
		json_object_object_add(one, "ident",
				       json_object_new_string(json_object_get_string(v)));
		json_object_object_add(one, "size", json_object_new_int64(a.size));
		json_object_object_add(one, "name", json_object_new_string(a.name ? a.name : ""));
		json_object_object_add(ta->record, key, one);
		store_artifact_rec_free(&a);
	}
	return err;
}

/* The body's release r as the object kept and signed (all four members) into ta->release. */
static enum rcs_err task_art_release(json_object *r, struct api_task_arts *ta, struct jsonu_err *e)
{
	static const char *const keys[] = {"stream", "seq", "device_types", "allow_downgrade",
					   NULL};
	const char *stream = NULL;
	json_object *types = NULL;
	int64_t seq = 0;
	bool down = false;
	enum rcs_err err;

	err = jsonu_check_keys(r, keys, e);
	if (err == RCS_OK)
		err = jsonu_get_string(r, "stream", true, 64, &stream, NULL, e);
	if (err == RCS_OK && !vars_token_valid(stream, 64, "-."))
		err = jsonu_fail(e, "stream", "'stream' is 1-64 letters, digits or any of _-.");
	if (err == RCS_OK)
		err = jsonu_get_int(r, "seq", true, 0, (1LL << 53) - 1, &seq, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_string_array(r, "device_types", false, 64, 64, &types, NULL, e);
	for (size_t i = 0; err == RCS_OK && types && i < json_object_array_length(types); i++)
		if (!vars_token_valid(json_object_get_string(json_object_array_get_idx(types, i)),
				      64, "-."))
			err = jsonu_fail(e, "device_types",
					 "each device type is 1-64 letters, digits or any of _-.");
	if (err == RCS_OK)
		err = jsonu_get_bool(r, "allow_downgrade", false, &down, NULL, e);
	if (err != RCS_OK) {
		char field[sizeof(e->field)];

		snprintf(field, sizeof(field), "release.%.100s", e->field);
		snprintf(e->field, sizeof(e->field), "%s", field);
		return RCS_ERR_INVAL; /* e says what: an input refused, whatever the getter said */
	}
	ta->release = json_object_new_object();
	json_object_object_add(ta->release, "stream", json_object_new_string(stream));
	json_object_object_add(ta->release, "seq", json_object_new_int64(seq));
	json_object_object_add(ta->release, "device_types",
			       types ? json_object_get(types) : json_object_new_array());
	json_object_object_add(ta->release, "allow_downgrade", json_object_new_boolean(down));
	return RCS_OK;
}

enum rcs_err api_task_arts_read(struct api_req *req, json_object *body, struct task_write *w,
				struct api_task_arts *ta, struct jsonu_err *e)
{
	json_object *o = NULL;
	int64_t dt = 0;
	bool present = false;
	enum rcs_err err = RCS_OK;

	if (json_object_object_get_ex(body, "artifacts", &o)) {
		w->artifacts = NULL; /* {} or null: none */
		if (o != NULL && !json_object_is_type(o, json_type_object))
			return jsonu_fail(
			    e, "artifacts",
			    "'artifacts' must be an object of sha256: idents, or null");
		if (o != NULL && json_object_object_length(o) > 0) {
			err = task_art_record(req, w->client_root, o, ta, e);
			if (err != RCS_OK)
				return err;
			w->artifacts = jsonu_dump(ta->record, NULL);
		}
	}
	if (json_object_object_get_ex(body, "release", &o)) {
		w->release = NULL;
		if (o != NULL && !json_object_is_type(o, json_type_object))
			return jsonu_fail(e, "release", "'release' must be an object, or null");
		if (o != NULL) {
			err = task_art_release(o, ta, e);
			if (err != RCS_OK)
				return err;
			w->release = jsonu_dump(ta->release, NULL);
		}
	}
	if (jsonu_get_int(body, "download_timeout", false, 60, 604800, &dt, &present, e) != RCS_OK)
		return RCS_ERR_INVAL;
	if (present)
		w->download_timeout = dt;
	if (w->release != NULL && w->artifacts == NULL)
		return jsonu_fail(e, "release",
				  "'release' is signed with a task's artifacts: a task without"
				  " artifacts takes no release (set it to null)");
	return RCS_OK;
}

enum rcs_err api_task_arts_derive(struct task_write *w, struct api_task_arts *ta,
				  struct manifest_in *m)
{
	json_object *rec = NULL;
	enum rcs_err err = RCS_ERR_INTERNAL;

	w->artifacts_signed = NULL;
	w->arts = NULL;
	w->n_arts = 0;
	if (w->artifacts == NULL)
		return RCS_OK; /* manifest v1: no release signed either */
	rec = json_tokener_parse(w->artifacts);
	ta->signed_form = json_object_new_object();
	if (rec == NULL || ta->signed_form == NULL || !json_object_is_type(rec, json_type_object))
		goto out;
	json_object_object_foreach(rec, key, v)
	{
		json_object *ident = NULL, *size = NULL, *one;

		if (ta->n >= API_TASK_MAX_ARTIFACTS ||
		    !json_object_object_get_ex(v, "ident", &ident) ||
		    !json_object_object_get_ex(v, "size", &size) ||
		    !task_art_ident(json_object_get_string(ident), ta->sha[ta->n]))
			goto out;
		snprintf(ta->key[ta->n], sizeof(ta->key[ta->n]), "%s", key);
		ta->rows[ta->n].name = ta->key[ta->n];
		ta->rows[ta->n].sha256 = ta->sha[ta->n];
		ta->rows[ta->n].size = json_object_get_int64(size);
		one = json_object_new_object();
		json_object_object_add(one, "sha256", json_object_new_string(ta->sha[ta->n]));
		json_object_object_add(one, "size", json_object_new_int64(ta->rows[ta->n].size));
		json_object_object_add(ta->signed_form, key, one);
		ta->n++;
	}
	if (w->release != NULL && ta->release == NULL &&
	    (ta->release = json_tokener_parse(w->release)) == NULL)
		goto out;
	w->artifacts_signed = jsonu_dump(ta->signed_form, NULL);
	w->arts = ta->rows;
	w->n_arts = ta->n;
	m->artifacts = ta->signed_form;
	m->release = w->release != NULL ? ta->release : NULL;
	err = RCS_OK;
out:
	json_object_put(rec);
	return err;
}

void api_task_arts_free(struct api_task_arts *ta)
{
	json_object_put(ta->record);
	json_object_put(ta->signed_form);
	json_object_put(ta->release);
	memset(ta, 0, sizeof(*ta));
}
