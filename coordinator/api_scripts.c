/*
 * api_scripts.c - scripts: /scripts, /scripts/<name> (docs/api.md, "Scripts"). New bytes give
 * every task that uses the script a new version (api_tasks_bump_script).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "manifest.h"
#include "render.h"
#include "script_check.h"
#include "store.h"
#include "store_tasks.h"
#include "vars.h"

#define SCRIPT_MAX_SOURCE (256 * 1024)
/* the ceiling of an answer: a record, or a page of 500 */
#define SCRIPT_ANSWER_MAX (64 * 1024 * 1024)

/* ---- scripts ---- */

static bool script_name_ok(struct api_req *req, struct api_resp *r, const char *name)
{
	(void)req;
	if (!vars_token_valid(name, 64, "-.")) {
		api_error(r, 400, "validation_failed", "name",
			  "script names are 1-64 letters, digits or any of _-.");
		return false;
	}
	return true;
}

void api_scripts_list(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct store_script_list page;
	struct render w;
	struct buf b;
	enum rcs_err err;

	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg))
		return;
	err = store_scripts_list(req->app->st, req->auth.client_root, &pg, &page);
	if (err != RCS_OK) {
		api_store_error(r, err, "script");
		return;
	}
	buf_init(&b, SCRIPT_ANSWER_MAX);
	render_init(&w, &b);
	render_script_list(&w, &page);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_script_list_free(&page);
}

void api_script_get(struct api_req *req, struct api_resp *r)
{
	struct script_rec s;
	struct render w;
	struct buf b;
	enum rcs_err err;

	if (!vars_token_valid(req->seg[1], 64, "-.")) {
		api_store_error(r, RCS_ERR_NOTFOUND, "script");
		return;
	}
	err = store_script_get(req->app->st, req->auth.client_root, req->seg[1], true, &s);
	if (err != RCS_OK) {
		api_store_error(r, err, "script");
		return;
	}
	buf_init(&b, SCRIPT_ANSWER_MAX);
	render_init(&w, &b);
	render_script(&w, &s);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_script_rec_free(&s);
}

/* Lua's parser on the source: a syntax error is answered now, with Lua's message and line
 * (details.line), not by every device that runs it. */
static bool script_compiles(struct api_resp *r, const char *name, const char *src)
{
	char msg[SCRIPT_CHECK_MSG_MAX];
	json_object *details;
	int line;
	enum rcs_err err;

	err = script_check(name, src, strlen(src), msg, sizeof(msg), &line);
	if (err == RCS_OK)
		return true;
	api_error(r, 400, "validation_failed", "source", "the script does not compile: %s", msg);
	if (line > 0 && r->body != NULL && json_object_object_get_ex(r->body, "error", &details) &&
	    json_object_object_get_ex(details, "details", &details))
		json_object_object_add(details, "line", json_object_new_int(line));
	return false;
}

/* Lua's parser on the body of PUT /scripts/<name>, outside the store's lock; what it does
 * not check (a bad name, a bad body, a stock script) is left to api_script_put's answer. */
void api_script_precheck(struct api_req *req, struct api_resp *r)
{
	static const char *const fields[] = {"source", NULL};
	json_object *body = NULL;
	const char *name = req->seg[1], *src = NULL;
	struct jsonu_err e;

	/* a body that is not JSON is answered here, as the handler would */
	if (vars_token_valid(name, 64, "-.") && api_body_object(req, r, false, &body) &&
	    jsonu_check_keys(body, fields, &e) == RCS_OK &&
	    jsonu_get_string(body, "source", true, SCRIPT_MAX_SOURCE, &src, NULL, &e) == RCS_OK &&
	    !store_script_is_stock(req->app->st, name))
		script_compiles(r, name, src);
	json_object_put(body);
}

void api_script_put(struct api_req *req, struct api_resp *r)
{
	static const char *const fields[] = {"source", NULL};
	json_object *body = NULL;
	struct script_rec s;
	struct render_task_bump *bumped = NULL;
	size_t n_bumped = 0;
	struct render w;
	struct buf b;
	const char *name = req->seg[1], *src = NULL;
	char old_sha[SHA256_HEX_LEN] = "", new_sha[SHA256_HEX_LEN];
	char *old_src = NULL;
	size_t old_len = 0;
	struct jsonu_err e;
	bool created = false, tx = false;
	enum rcs_err err;

	memset(&s, 0, sizeof(s));
	if (!script_name_ok(req, r, name) || !api_body_object(req, r, false, &body))
		goto out;
	if (jsonu_check_keys(body, fields, &e) != RCS_OK ||
	    jsonu_get_string(body, "source", true, SCRIPT_MAX_SOURCE, &src, NULL, &e) != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	if (store_script_is_stock(req->app->st, name)) {
		api_error(r, 403, "forbidden", "name",
			  "'%s' is a stock script: stock scripts are read-only", name);
		goto out;
	}
	if (!req->prechecked && !script_compiles(r, name, src))
		goto out;
	err = store_tx_begin(req->app->st);
	if (err != RCS_OK) {
		api_store_error(r, err, "script");
		goto out;
	}
	tx = true;
	if (store_script_source(req->app->st, req->auth.client_root, name, &old_src, &old_len,
				old_sha) != RCS_OK)
		old_sha[0] = '\0';
	err = store_script_put(req->app->st, req->auth.client_root, name, src, strlen(src),
			       req->now, &created);
	sha256_hex(src, strlen(src), new_sha);
	if (err == RCS_OK && old_sha[0] && strcmp(old_sha, new_sha) != 0)
		err = api_tasks_bump_script(req, name, &bumped, &n_bumped);
	if (err == RCS_OK)
		err = store_script_get(req->app->st, req->auth.client_root, name, true, &s);
	if (err != RCS_OK) {
		api_store_error(r, err, "script");
		goto out;
	}
	buf_init(&b, SCRIPT_ANSWER_MAX);
	render_init(&w, &b);
	render_script_put(&w, &s, bumped, n_bumped);
	api_reply_buf(r, created ? 201 : 200, &b, render_end(&w));
out:
	if (tx)
		store_tx_end(req->app->st, r->status >= 200 && r->status < 300);
	free(old_src);
	free(bumped);
	store_script_rec_free(&s);
	json_object_put(body);
}

void api_script_delete(struct api_req *req, struct api_resp *r)
{
	const char *name = req->seg[1];
	enum rcs_err err;

	if (!vars_token_valid(name, 64, "-.")) {
		api_store_error(r, RCS_ERR_NOTFOUND, "script");
		return;
	}
	if (store_script_is_stock(req->app->st, name)) {
		api_error(r, 403, "forbidden", "name",
			  "'%s' is a stock script: stock scripts are read-only", name);
		return;
	}
	err = store_script_delete(req->app->st, req->auth.client_root, name);
	if (err == RCS_ERR_CONFLICT)
		api_error(r, 409, "conflict", "name", "script '%s' is used by a task", name);
	else if (err != RCS_OK)
		api_store_error(r, err, "script");
	else
		api_reply(r, 204, NULL);
}
