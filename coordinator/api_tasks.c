/*
 * api_tasks.c - tasks: /tasks, /tasks/<id> (docs/api.md, "Tasks"); the new versions a
 * script's new bytes give them (api_scripts.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_task_artifacts.h"
#include "log.h"
#include "render.h"
#include "rollout.h"
#include "manifest.h"
#include "store.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "uuid.h"
#include "validate.h"

#define TASK_MAX_NAME        200
#define TASK_MAX_COMMENT     4096
#define TASK_MAX_TIMEOUT     86400
#define TASK_DEFAULT_TIMEOUT 300
/* the ceiling of an answer: a record, or a page of 500 */
#define TASK_ANSWER_MAX (64 * 1024 * 1024)

static const char *const task_writable[] = {"name",
					    "script",
					    "variables_info",
					    "constants",
					    "comment",
					    "active",
					    "public",
					    "hide",
					    "allow_offline",
					    "timeout",
					    "notification_mail_list",
					    "notification_status_list",
					    "retry",
					    "artifacts",
					    "release",
					    "download_timeout",
					    NULL};
/* The members of a task's body that take null (docs/openapi.json TaskInput, TaskPatch). */
static const char *const task_nullable[] = {"retry", "signature", "artifacts", "release", NULL};
static const char *const task_platform[] = {"ident",        "version",       "client_root",
					    "created_user", "created_at",    "update_user",
					    "update_at",    "script_sha256", NULL};

/* Fills w from a stored task record (the fields a new version starts from); w points
 * into t. */
static void task_from_record(const struct task_rec *t, struct task_write *w)
{
	memset(w, 0, sizeof(*w));
	w->ident = t->ident;
	w->client_root = t->client_root;
	w->version = t->version;
	w->name = t->name;
	w->script = t->script;
	w->variables_info = t->variables_info;
	w->constants = t->constants;
	w->comment = t->comment;
	w->active = t->active;
	w->is_public = t->is_public;
	w->hide = t->hide;
	w->allow_offline = t->allow_offline;
	w->timeout = t->timeout;
	w->created_user = t->created_user;
	w->update_user = t->update_user;
	w->created_at = t->created_at;
	w->update_at = t->update_at;
	w->mail_list = t->mail_list;
	w->status_list = t->status_list;
	w->signature = t->signature;
	w->retry = t->retry;
	w->artifacts = t->artifacts;
	w->release = t->release;
	w->download_timeout = t->download_timeout;
}

/*
 * Applies the writable fields of body onto w. full: name and script are
 * required (create, PUT). Strings, and the JSON text of the JSON members, point into body.
 */
static enum rcs_err task_apply_body(json_object *body, struct task_write *w, bool full,
				    struct jsonu_err *e)
{
	bool present;
	int64_t timeout = 0;
	json_object *o = NULL;
	enum rcs_err err;

	for (size_t i = 0; task_platform[i]; i++)
		if (json_object_object_get_ex(body, task_platform[i], NULL))
			return jsonu_fail(e, task_platform[i],
					  "'%s' is assigned by the platform and cannot be set",
					  task_platform[i]);
	if (json_object_object_get_ex(body, "signature", NULL))
		return jsonu_fail(
		    e, "signature",
		    "'signature' can only be set alone, with PATCH, on an existing task");
	err = jsonu_check_keys(body, task_writable, e);
	if (err != RCS_OK)
		return err;
	err = jsonu_get_string(body, "name", full, TASK_MAX_NAME, &w->name, &present, e);
	if (err != RCS_OK)
		return err;
	if (present && w->name[0] == '\0')
		return jsonu_fail(e, "name", "'name' must not be empty");
	err = jsonu_get_string(body, "script", full, 64, &w->script, &present, e);
	if (err != RCS_OK)
		return err;
	if (present && !vars_token_valid(w->script, 64, "-."))
		return jsonu_fail(e, "script", "'script' is not a valid script name");
	err = jsonu_get_object(body, "variables_info", false, &o, &present, e);
	if (err != RCS_OK)
		return err;
	if (present) {
		err = vars_info_validate(o, e);
		if (err != RCS_OK)
			return err;
		w->variables_info = jsonu_dump(o, NULL);
	}
	err = jsonu_get_object(body, "constants", false, &o, &present, e);
	if (err != RCS_OK)
		return err;
	if (present) {
		if (json_object_object_length(o) > 256)
			return jsonu_fail(e, "constants", "more than 256 constants");
		w->constants = jsonu_dump(o, NULL);
	}
	err = jsonu_get_string(body, "comment", false, TASK_MAX_COMMENT, &w->comment, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_boolish(body, "active", false, &w->active, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_bool(body, "public", false, &w->is_public, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_bool(body, "hide", false, &w->hide, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_bool(body, "allow_offline", false, &w->allow_offline, NULL, e);
	if (err == RCS_OK)
		err = jsonu_get_int(body, "timeout", false, 1, TASK_MAX_TIMEOUT, &timeout, &present,
				    e);
	if (err != RCS_OK)
		return err;
	if (present)
		w->timeout = timeout;
	/* the default retry of the task's bulk sends (docs/api.md "Rollouts"); null: none */
	if (json_object_object_get_ex(body, "retry", &o)) {
		struct group_settings g;

		memset(&g, 0, sizeof(g));
		if (o == NULL) {
			w->retry = NULL;
		} else {
			err = api_group_retry_read(o, &g, e);
			if (err != RCS_OK) {
				char field[sizeof(e->field)];

				snprintf(field, sizeof(field), "retry%s%.100s",
					 e->field[0] ? "." : "", e->field);
				snprintf(e->field, sizeof(e->field), "%s", field);
				return err;
			}
			w->retry = jsonu_dump(o, NULL);
		}
	}
	err = jsonu_get_string_array(body, "notification_mail_list", false, VALIDATE_MAX_MAILS, 254,
				     &o, &present, e);
	if (err != RCS_OK)
		return err;
	if (present) {
		err = validate_mail_list(o, "notification_mail_list", e);
		if (err != RCS_OK)
			return err;
		w->mail_list = jsonu_dump(o, NULL);
	}
	err = jsonu_get_string_array(body, "notification_status_list", false, 16, 32, &o, &present,
				     e);
	if (err != RCS_OK)
		return err;
	if (present) {
		err = validate_status_list(o, "notification_status_list", e);
		if (err != RCS_OK)
			return err;
		w->status_list = jsonu_dump(o, NULL);
	}
	return RCS_OK;
}

/* JSON text the store holds as an object for the manifest (NULL stays NULL: {}). */
static enum rcs_err task_json(const char *text, json_object **out)
{
	*out = NULL;
	if (text == NULL)
		return RCS_OK;
	*out = json_tokener_parse(text);
	return *out != NULL ? RCS_OK : RCS_ERR_INTERNAL;
}

/* The manifest of w (docs/signing.md); m holds the parsed constants and variables_info,
 * freed with task_manifest_free. */
static enum rcs_err task_manifest(const struct task_write *w, struct manifest_in *m)
{
	enum rcs_err err;

	memset(m, 0, sizeof(*m));
	m->client_root = w->client_root;
	m->task_ident = w->ident;
	m->version = w->version;
	m->script_name = w->script;
	m->script = w->script_src;
	m->script_len = w->script_len;
	err = task_json(w->constants, &m->constants);
	if (err == RCS_OK)
		err = task_json(w->variables_info, &m->variables_info);
	return err;
}

static void task_manifest_free(struct manifest_in *m)
{
	if (m->constants)
		json_object_put(m->constants);
	if (m->variables_info)
		json_object_put(m->variables_info);
	m->constants = m->variables_info = NULL;
}

/*
 * Saves w as a new version: records the script's current bytes, signs it
 * when the coordinator has a signing key (one with artifacts only with
 * --sign-artifacts: docs/signing.md). The caller holds a transaction.
 */
static enum rcs_err task_save(struct api_app *app, struct task_write *w, bool is_new,
			      struct jsonu_err *e)
{
	char *src = NULL;
	size_t len = 0;
	char sha[SHA256_HEX_LEN];
	json_object *sig = NULL;
	struct manifest_in m;
	struct api_task_arts ta;
	enum rcs_err err;

	memset(&m, 0, sizeof(m));
	memset(&ta, 0, sizeof(ta));
	err = store_script_source(app->st, w->client_root, w->script, &src, &len, sha);
	if (err == RCS_ERR_NOTFOUND) {
		jsonu_fail(e, "script", "no script named '%s'", w->script);
		err = RCS_ERR_INVAL;
		goto out;
	}
	if (err != RCS_OK)
		goto out;
	w->script_src = src;
	w->script_len = len;
	w->script_sha256 = sha;
	err = task_manifest(w, &m);
	if (err == RCS_OK)
		err = api_task_arts_derive(w, &ta, &m);
	/* a task with artifacts is signed offline unless --sign-artifacts */
	if (err == RCS_OK && (!manifest_is_v2(&m) || app->sign_artifacts))
		err = signer_sign(app->signer, &m, &sig);
	if (err != RCS_OK) {
		log_warnx("signing task %s: %s", w->ident, rcs_strerror(err));
		goto out;
	}
	/* NULL without a signing key: a new version is unsigned */
	w->signature = sig ? jsonu_dump(sig, NULL) : NULL;
	err = store_task_put(app->st, w, is_new);
out:
	w->script_src = NULL;
	w->script_sha256 = NULL;
	w->signature = NULL;
	w->artifacts_signed = NULL;
	w->arts = NULL;
	w->n_arts = 0;
	free(src);
	task_manifest_free(&m);
	api_task_arts_free(&ta);
	if (sig)
		json_object_put(sig);
	return err;
}

static void task_reply(struct api_resp *r, int status, const struct task_rec *t)
{
	struct render w;
	struct buf b;

	buf_init(&b, TASK_ANSWER_MAX);
	render_init(&w, &b);
	render_task(&w, t);
	api_reply_buf(r, status, &b, render_end(&w));
}

static void task_answer(struct api_req *req, struct api_resp *r, const char *ident, int status)
{
	struct task_rec t;
	enum rcs_err err = store_task_get(req->app->st, req->auth.client_root, ident, &t);

	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		return;
	}
	task_reply(r, status, &t);
	store_task_rec_free(&t);
}

enum rcs_err api_task_load(struct api_req *req, const char *ident, struct task_rec *out)
{
	memset(out, 0, sizeof(*out));
	if (!uuid_valid(ident))
		return RCS_ERR_NOTFOUND;
	return store_task_get_visible(req->app->st, req->auth.client_root, ident,
				      req->auth.role == ROLE_ADMIN ? NULL : req->auth.user, out);
}

void api_tasks_list(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct task_filter f = {false, NULL};
	const char *hide = api_query(req, "hide");
	struct store_task_list page;
	struct render w;
	struct buf b;
	enum rcs_err err;

	if (!api_list(req, r, API_DEFAULT_PER_PAGE, "created_at update_at name", false, true, &pg))
		return;
	if (hide && strcmp(hide, "true") != 0 && strcmp(hide, "false") != 0) {
		api_error(r, 400, "invalid_parameter", "hide", "'hide' must be true or false");
		return;
	}
	f.include_hidden = hide && strcmp(hide, "true") == 0;
	if (req->auth.role != ROLE_ADMIN)
		f.only_visible_to = req->auth.user;
	err = store_tasks_list(req->app->st, req->auth.client_root, &f, &pg, &page);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		return;
	}
	buf_init(&b, TASK_ANSWER_MAX);
	render_init(&w, &b);
	render_task_list(&w, &page);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_task_list_free(&page);
}

void api_task_create(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	struct task_write w;
	struct api_task_arts ta;
	struct jsonu_err e;
	char ident[UUID_STR_LEN];
	enum rcs_err err;

	memset(&ta, 0, sizeof(ta));
	if (!api_body_object_nullable(req, r, false, task_nullable, &body))
		return;
	memset(&w, 0, sizeof(w));
	/* variables_info and constants NULL: {}; the lists NULL: [] */
	w.comment = "";
	w.active = true;
	w.is_public = true;
	w.timeout = TASK_DEFAULT_TIMEOUT;
	w.download_timeout = API_TASK_DOWNLOAD_TIMEOUT;
	w.client_root = req->auth.client_root;
	err = task_apply_body(body, &w, true, &e);
	if (err != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	err = api_task_arts_read(req, body, &w, &ta, &e);
	if (err == RCS_ERR_INVAL) {
		api_invalid(r, &e);
		goto out;
	}
	if (err == RCS_OK)
		err = uuid_v7(ident);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		goto out;
	}
	w.ident = ident;
	w.client_root = req->auth.client_root;
	w.version = 1;
	w.created_user = req->auth.user;
	w.update_user = NULL;
	w.created_at = w.update_at = req->now;
	err = task_save(req->app, &w, true, &e);
	if (err == RCS_ERR_INVAL)
		api_invalid(r, &e);
	else if (err != RCS_OK)
		api_store_error(r, err, "task");
	else {
		snprintf(req->target, sizeof(req->target), "%s", ident); /* audit */
		task_answer(req, r, ident, 201);
	}
out:
	api_task_arts_free(&ta);
	json_object_put(body);
}

void api_task_get(struct api_req *req, struct api_resp *r)
{
	struct task_rec t;
	enum rcs_err err = api_task_load(req, req->seg[1], &t);

	if (err != RCS_OK)
		api_store_error(r, err, "task");
	else
		task_reply(r, 200, &t);
	store_task_rec_free(&t);
}

/* Sets only the signature of the current version (PATCH {"signature": ...}). */
static void task_set_signature(struct api_req *req, struct api_resp *r, const struct task_rec *cur,
			       json_object *sig)
{
	struct task_write w;
	struct manifest_in m;
	json_object *arts = NULL, *rel = NULL;
	enum rcs_err err;
	struct task_version tv;

	task_from_record(cur, &w);
	memset(&tv, 0, sizeof(tv));
	memset(&m, 0, sizeof(m));
	if (sig != NULL && !json_object_is_type(sig, json_type_null)) {
		/* verify over the exact bytes the current version pinned */
		err = store_task_version_get(req->app->st, w.ident, w.version, &tv);
		if (err != RCS_OK) {
			api_store_error(r, err, "task");
			goto out;
		}
		w.script_src = tv.script_src;
		w.script_len = tv.script_len;
		/* manifest v2 when the version pins artifacts */
		err = task_manifest(&w, &m);
		if (err == RCS_OK && tv.artifacts != NULL) {
			arts = json_tokener_parse(tv.artifacts);
			rel = tv.release ? json_tokener_parse(tv.release) : NULL;
			m.artifacts = arts;
			m.release = rel;
			if (arts == NULL || (tv.release && rel == NULL))
				err = RCS_ERR_INTERNAL;
		}
		if (err != RCS_OK) {
			api_store_error(r, err, "task");
			goto out;
		}
		err = signer_check(req->app->signer, &m, sig);
		if (err == RCS_ERR_INVAL) {
			api_error(r, 400, "validation_failed", "signature",
				  "'signature' must be {\"alg\": \"ES256\", \"key_id\": <16 hex>,"
				  " \"value\": <base64>}");
			goto out;
		}
		if (err == RCS_ERR_VERIFY) {
			api_error(r, 400, "validation_failed", "signature",
				  "the signature does not verify against a trusted key over the"
				  " manifest (v%d) of version %lld",
				  manifest_is_v2(&m) ? 2 : 1, w.version);
			goto out;
		}
		if (err != RCS_OK) {
			api_store_error(r, err, "task");
			goto out;
		}
	} else {
		sig = NULL;
	}
	err = store_task_set_signature(req->app->st, req->auth.client_root, w.ident,
				       sig ? jsonu_dump(sig, NULL) : NULL);
	if (err != RCS_OK)
		api_store_error(r, err, "task");
	else
		task_answer(req, r, w.ident, 200);
out:
	task_manifest_free(&m);
	json_object_put(arts);
	json_object_put(rel);
	store_task_version_free(&tv);
}

static bool task_str_same(const char *a, const char *b)
{
	return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

/* Whether w, the current version cur with a PATCH's body applied, changes nothing. */
static bool task_unchanged(const struct task_rec *cur, const struct task_write *w)
{
	return task_str_same(cur->name, w->name) && task_str_same(cur->script, w->script) &&
	       task_str_same(cur->comment, w->comment) && cur->active == w->active &&
	       cur->is_public == w->is_public && cur->hide == w->hide &&
	       cur->allow_offline == w->allow_offline && cur->timeout == w->timeout &&
	       jsonu_text_same(cur->variables_info, w->variables_info) &&
	       jsonu_text_same(cur->constants, w->constants) &&
	       jsonu_text_same(cur->mail_list, w->mail_list) &&
	       jsonu_text_same(cur->status_list, w->status_list) &&
	       jsonu_text_same(cur->retry, w->retry) &&
	       jsonu_text_same(cur->artifacts, w->artifacts) &&
	       jsonu_text_same(cur->release, w->release) &&
	       cur->download_timeout == w->download_timeout;
}

static void task_update(struct api_req *req, struct api_resp *r, bool full)
{
	json_object *body = NULL;
	struct task_rec cur;
	struct task_write w;
	struct api_task_arts ta;
	struct jsonu_err e;
	enum rcs_err err;
	bool tx = false;

	memset(&cur, 0, sizeof(cur));
	memset(&ta, 0, sizeof(ta));
	if (!api_body_object_nullable(req, r, false, task_nullable, &body))
		return;
	err = store_tx_begin(req->app->st);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		goto out;
	}
	tx = true;
	err = api_task_load(req, req->seg[1], &cur);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		goto out;
	}
	if (!full && json_object_object_length(body) == 1 &&
	    json_object_object_get_ex(body, "signature", NULL)) {
		task_set_signature(req, r, &cur, jsonu_member(body, "signature"));
		goto out;
	}
	task_from_record(&cur, &w);
	if (full) {
		/* PUT replaces every writable field: absent ones take their defaults */
		w.variables_info = NULL;
		w.constants = NULL;
		w.mail_list = NULL;
		w.status_list = NULL;
		w.comment = "";
		w.active = true;
		w.is_public = true;
		w.hide = false;
		w.allow_offline = false;
		w.timeout = TASK_DEFAULT_TIMEOUT;
		w.retry = NULL;
		w.artifacts = NULL;
		w.release = NULL;
		w.download_timeout = API_TASK_DOWNLOAD_TIMEOUT;
	}
	err = task_apply_body(body, &w, full, &e);
	if (err != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	err = api_task_arts_read(req, body, &w, &ta, &e);
	if (err == RCS_ERR_INVAL)
		api_invalid(r, &e);
	else if (err != RCS_OK)
		api_store_error(r, err, "task");
	if (err != RCS_OK)
		goto out;
	if (!full && task_unchanged(&cur, &w)) {
		/* a PATCH that changes nothing makes no version, as a pause of a paused group
		 * (docs/api.md "Tasks") */
		task_reply(r, 200, &cur);
		goto out;
	}
	w.version++;
	w.update_user = req->auth.user;
	w.update_at = req->now;
	err = task_save(req->app, &w, false, &e);
	if (err == RCS_ERR_INVAL)
		api_invalid(r, &e);
	else if (err != RCS_OK)
		api_store_error(r, err, "task");
	else
		task_answer(req, r, w.ident, 200);
out:
	if (tx)
		store_tx_end(req->app->st, r->status >= 200 && r->status < 300);
	store_task_rec_free(&cur);
	api_task_arts_free(&ta);
	json_object_put(body);
}

void api_task_put(struct api_req *req, struct api_resp *r)
{
	task_update(req, r, true);
}

void api_task_patch(struct api_req *req, struct api_resp *r)
{
	task_update(req, r, false);
}

void api_task_delete(struct api_req *req, struct api_resp *r)
{
	struct task_rec t;
	enum rcs_err err = api_task_load(req, req->seg[1], &t);

	store_task_rec_free(&t);
	if (err == RCS_OK)
		err = store_task_delete(req->app->st, req->auth.client_root, req->seg[1]);
	if (err != RCS_OK)
		api_store_error(r, err, "task");
	else
		api_reply(r, 204, NULL);
}

/* ---- what a script's new bytes do to tasks ---- */

/* See api.h. */
enum rcs_err api_tasks_bump_script(struct api_req *req, const char *name,
				   struct render_task_bump **bumped, size_t *n)
{
	struct store_idents idents;
	enum rcs_err err;

	*bumped = NULL;
	*n = 0;
	err = store_tasks_using_script(req->app->st, req->auth.client_root, name, &idents);
	if (err != RCS_OK)
		return err;
	if (idents.n > 0) {
		*bumped = calloc(idents.n, sizeof(**bumped));
		if (*bumped == NULL)
			err = RCS_ERR_NOMEM;
	}
	for (size_t i = 0; err == RCS_OK && i < idents.n; i++) {
		struct task_rec cur;
		struct task_write w;
		struct jsonu_err e;

		err = store_task_get(req->app->st, req->auth.client_root, idents.v[i], &cur);
		if (err != RCS_OK)
			break;
		task_from_record(&cur, &w);
		w.version++;
		w.update_user = req->auth.user;
		w.update_at = req->now;
		err = task_save(req->app, &w, false, &e);
		if (err == RCS_OK) {
			snprintf((*bumped)[*n].ident, sizeof((*bumped)[*n].ident), "%s", cur.ident);
			(*bumped)[*n].version = w.version;
			(*n)++;
		}
		store_task_rec_free(&cur);
	}
	store_idents_free(&idents);
	return err;
}
