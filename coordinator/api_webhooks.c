/*
 * api_webhooks.c - the webhooks and the audit log of the REST API (docs/api.md, "Webhooks"
 * and "Audit"): validation, the guard of webhook addresses when one is saved, answers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "render.h"
#include "status.h"
#include "store.h"
#include "store_audit.h"
#include "store_webhooks.h"
#include "uuid.h"
#include "webhooks.h"

#define WEBHOOK_ANSWER_MAX ((size_t)64 << 10)
#define WEBHOOK_LIST_MAX   ((size_t)8 << 20)
#define WEBHOOK_SECRET_MIN 16
#define WEBHOOK_SECRET_MAX 256
#define WEBHOOK_MAX_STATUS 32

/* The statuses a webhook may filter on: a job's, and a group's (docs/api.md). */
static const char *const group_statuses[] = {"running", "paused",    "completed",
					     "aborted", "cancelled", NULL};
static const char *const event_types[] = {"job.status", "group.status", NULL};

static bool in_list(const char *const *list, const char *s)
{
	for (size_t i = 0; list[i]; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	return false;
}

/* The members of a webhook's body, checked: *events and *statuses JSON text (owned by the
 * body), NULL when absent. False with the answer set. */
struct hook_body {
	const char *url, *secret;
	const char *events, *statuses;
	bool has_active, active;
};

static bool hook_strings(struct api_resp *r, json_object *body, const char *key, bool required,
			 const char *const *allowed, bool job_status_too, size_t max,
			 const char **out)
{
	json_object *arr = NULL;
	struct jsonu_err e;
	bool present = false;
	size_t n;

	*out = NULL;
	if (jsonu_get_string_array(body, key, required, max, 32, &arr, &present, &e) != RCS_OK) {
		api_invalid(r, &e);
		return false;
	}
	if (!present)
		return true;
	n = json_object_array_length(arr);
	if (allowed == event_types && n == 0) { /* at creation and when changed alike */
		api_error(r, 400, "validation_failed", key, "'%s' must name at least one event",
			  key);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(arr, i));
		enum job_status js;

		if (!in_list(allowed, s) && !(job_status_too && status_parse(s, &js))) {
			api_error(r, 400, "validation_failed", key, "'%s': unknown value '%s'", key,
				  s);
			return false;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(s, json_object_get_string(json_object_array_get_idx(arr, k))) ==
			    0) {
				api_error(r, 400, "validation_failed", key,
					  "'%s': '%s' is named twice", key, s);
				return false;
			}
	}
	*out = jsonu_dump(arr, NULL);
	return true;
}

/* check_url: whether to resolve the URL's host and check its addresses (slow: done once,
 * before the transaction, by api_webhook_precheck). */
static bool hook_body_read(struct api_req *req, struct api_resp *r, json_object *body, bool create,
			   bool check_url, struct hook_body *h)
{
	static const char *const create_fields[] = {"url", "events", "statuses", "secret", NULL};
	static const char *const patch_fields[] = {"url",    "events", "statuses",
						   "secret", "active", NULL};
	char why[WEBHOOK_WHY_MAX];
	struct jsonu_err e;
	bool present = false;

	memset(h, 0, sizeof(*h));
	if (jsonu_check_keys(body, create ? create_fields : patch_fields, &e) != RCS_OK ||
	    jsonu_get_string(body, "url", create, WEBHOOK_URL_MAX, &h->url, NULL, &e) != RCS_OK ||
	    jsonu_get_string(body, "secret", false, WEBHOOK_SECRET_MAX, &h->secret, NULL, &e) !=
		RCS_OK ||
	    (!create &&
	     jsonu_get_bool(body, "active", false, &h->active, &present, &e) != RCS_OK)) {
		api_invalid(r, &e);
		return false;
	}
	h->has_active = present;
	if (h->secret) {
		size_t n = strlen(h->secret);
		bool printable = true;

		for (size_t i = 0; i < n; i++)
			if ((unsigned char)h->secret[i] < 0x21 ||
			    (unsigned char)h->secret[i] > 0x7e)
				printable = false;
		if (n < WEBHOOK_SECRET_MIN || !printable) {
			api_error(r, 400, "validation_failed", "secret",
				  "'secret' must be %d to %d printable ASCII characters",
				  WEBHOOK_SECRET_MIN, WEBHOOK_SECRET_MAX);
			return false;
		}
	}
	if (!hook_strings(r, body, "events", create, event_types, false, 2, &h->events) ||
	    !hook_strings(r, body, "statuses", false, group_statuses, true, WEBHOOK_MAX_STATUS,
			  &h->statuses))
		return false;
	if (h->url && check_url &&
	    webhook_url_check(req->app->webhook_guard, h->url, why, sizeof(why)) != RCS_OK) {
		api_error(r, 400, "validation_failed", "url", "%s", why);
		return false;
	}
	return true;
}

static void hook_answer(struct api_req *req, struct api_resp *r, int status, const char *ident,
			const char *secret)
{
	struct webhook_rec rec;
	struct render w;
	struct buf b;
	enum rcs_err err;

	err = store_webhook_get(req->app->st, req->auth.client_root, ident, &rec);
	if (err != RCS_OK) {
		api_store_error(r, err, "webhook");
		return;
	}
	buf_init(&b, WEBHOOK_ANSWER_MAX);
	render_init(&w, &b);
	render_webhook_new(&w, &rec, secret);
	api_reply_buf(r, status, &b, render_end(&w));
	store_webhook_rec_free(&rec);
}

void api_webhook_create(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	struct webhook_write ww;
	struct hook_body h;
	char ident[UUID_STR_LEN], secret[65];
	bool generated = false;
	enum rcs_err err;

	secret[0] = '\0';
	if (!api_body_object(req, r, false, &body) ||
	    !hook_body_read(req, r, body, true, !req->prechecked, &h))
		goto out;
	if (h.secret == NULL) {
		if (rcs_random_hex(secret, 32) != RCS_OK) {
			api_error(r, 500, "internal", NULL, "no randomness available");
			goto out;
		}
		generated = true;
	}
	if (uuid_v7(ident) != RCS_OK) {
		api_error(r, 500, "internal", NULL, "no randomness available");
		goto out;
	}
	memset(&ww, 0, sizeof(ww));
	ww.ident = ident;
	ww.client_root = req->auth.client_root;
	ww.url = h.url;
	ww.events = h.events;
	ww.statuses = h.statuses;
	ww.secret = generated ? secret : h.secret;
	ww.created_user = req->auth.user;
	ww.now = req->now;
	err = store_webhook_insert(req->app->st, &ww);
	if (err != RCS_OK) {
		api_store_error(r, err, "webhook");
		goto out;
	}
	snprintf(req->target, sizeof(req->target), "%s", ident);
	/* a generated secret is shown this once */
	hook_answer(req, r, 201, ident, generated ? secret : NULL);
out:
	explicit_bzero(secret, sizeof(secret));
	json_object_put(body);
}

void api_webhooks_list(struct api_req *req, struct api_resp *r)
{
	struct store_webhook_list l;
	struct store_page pg;
	struct render w;
	struct buf b;
	enum rcs_err err;

	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg))
		return;
	err = store_webhooks_list(req->app->st, req->auth.client_root, &pg, &l);
	if (err != RCS_OK) {
		api_store_error(r, err, "webhook");
		return;
	}
	buf_init(&b, WEBHOOK_LIST_MAX);
	render_init(&w, &b);
	render_webhook_list(&w, &l);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_webhook_list_free(&l);
}

void api_webhook_get(struct api_req *req, struct api_resp *r)
{
	if (!uuid_valid(req->seg[1])) {
		api_store_error(r, RCS_ERR_NOTFOUND, "webhook");
		return;
	}
	hook_answer(req, r, 200, req->seg[1], NULL);
}

/* The body of POST /webhooks or PATCH /webhooks/<id> checked with its URL's host resolved,
 * outside the store's lock: a slow name server holds up this request alone. */
void api_webhook_precheck(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	struct hook_body h;
	bool create = strcmp(req->method, "POST") == 0;

	if (!create && !uuid_valid(req->seg[1]))
		return; /* the handler's 404 */
	if (api_body_object(req, r, false, &body))
		hook_body_read(req, r, body, create, true, &h);
	json_object_put(body);
}

void api_webhook_patch(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	struct hook_body h;
	enum rcs_err err;

	if (!uuid_valid(req->seg[1])) {
		api_store_error(r, RCS_ERR_NOTFOUND, "webhook");
		return;
	}
	if (!api_body_object(req, r, false, &body) ||
	    !hook_body_read(req, r, body, false, !req->prechecked, &h))
		goto out;
	err =
	    store_webhook_update(req->app->st, req->auth.client_root, req->seg[1], h.url, h.events,
				 h.statuses, h.secret, h.has_active ? h.active : -1, req->now);
	if (err != RCS_OK) {
		api_store_error(r, err, "webhook");
		goto out;
	}
	hook_answer(req, r, 200, req->seg[1], NULL);
out:
	json_object_put(body);
}

void api_webhook_delete(struct api_req *req, struct api_resp *r)
{
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (uuid_valid(req->seg[1]))
		err = store_webhook_delete(req->app->st, req->auth.client_root, req->seg[1]);
	if (err != RCS_OK)
		api_store_error(r, err, "webhook");
	else
		api_reply(r, 204, NULL);
}

void api_webhook_deliveries(struct api_req *req, struct api_resp *r)
{
	struct store_webhook_delivery_list l;
	struct store_page pg;
	struct render w;
	struct buf b;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg))
		return;
	if (uuid_valid(req->seg[1]))
		err = store_webhook_deliveries(req->app->st, req->auth.client_root, req->seg[1],
					       &pg, &l);
	if (err != RCS_OK) {
		api_store_error(r, err, "webhook");
		return;
	}
	buf_init(&b, WEBHOOK_LIST_MAX);
	render_init(&w, &b);
	render_webhook_delivery_page(&w, &l);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_webhook_delivery_list_free(&l);
}

/* ---- the audit log ---- */

void api_audit_list(struct api_req *req, struct api_resp *r)
{
	struct store_audit_list l;
	struct audit_filter f;
	struct store_page pg;
	long long since = 0, until = 0;
	struct render w;
	struct buf b;
	enum rcs_err err;

	memset(&f, 0, sizeof(f));
	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg) ||
	    !api_query_time(req, r, "since", &f.has_since, &since) ||
	    !api_query_time(req, r, "until", &f.has_until, &until))
		return;
	f.since = since;
	f.until = until;
	f.user = api_query(req, "user");
	f.target = api_query(req, "target");
	if ((f.user && strlen(f.user) > 200) || (f.target && strlen(f.target) > 200)) {
		api_error(r, 400, "invalid_parameter",
			  f.user && strlen(f.user) > 200 ? "user" : "target",
			  "filters are at most 200 bytes");
		return;
	}
	err = store_audit_list(req->app->st, req->auth.client_root, &f, &pg, &l);
	if (err != RCS_OK) {
		api_store_error(r, err, "audit record");
		return;
	}
	buf_init(&b, WEBHOOK_LIST_MAX);
	render_init(&w, &b);
	render_audit_page(&w, &l);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_audit_list_free(&l);
}
