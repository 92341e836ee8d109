/*
 * api_jobs.c - jobs: creation of one job and what a bulk send shares with it (api_jobs.h),
 * reads, history, lists, cancel. The bulk sends are api_bulk.c.
 */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "api.h"
#include "api_jobs.h"
#include "lifecycle.h"
#include "manifest.h"
#include "log.h"
#include "render.h"
#include "store.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "uuid.h"
#include "validate.h"

#define JOB_MAX_COMMENT  4096
#define JOB_MAX_TTL      31536000LL
#define API_JOB_TEXT_MAX ((size_t)64 << 20) /* bytes of one job record, of a page */

/* A bulk send's "offline" member: "queue" or "reject" (absent: the task decides). */
static bool api_job_read_offline(json_object *body, struct api_job_req *jr, struct jsonu_err *e)
{
	const char *v = NULL;
	bool present = false;

	if (jsonu_get_string(body, "offline", false, 16, &v, &present, e) != RCS_OK)
		return false;
	if (!present)
		jr->offline = API_OFFLINE_TASK;
	else if (strcmp(v, "queue") == 0)
		jr->offline = API_OFFLINE_QUEUE;
	else if (strcmp(v, "reject") == 0)
		jr->offline = API_OFFLINE_REJECT;
	else {
		jsonu_fail(e, "offline", "'offline' must be \"queue\" or \"reject\" (not '%.16s')",
			   v);
		return false;
	}
	return true;
}

/*
 * Reads the common fields and checks them against the task. On failure the
 * answer is set and false returned.
 */
bool api_job_read_common(struct api_req *req, struct api_resp *r, json_object *body,
			 const char *const *allowed, struct api_job_req *jr)
{
	struct jsonu_err e;
	json_object *vi = jr->task_vi;
	bool present;
	int64_t v = 0;

	if (jsonu_check_keys(body, allowed, &e) != RCS_OK ||
	    jsonu_get_object(body, "variables", false, &jr->variables, NULL, &e) != RCS_OK ||
	    jsonu_get_string(body, "comment", false, JOB_MAX_COMMENT, &jr->comment, NULL, &e) !=
		RCS_OK ||
	    jsonu_get_int(body, "scheduled_time", false, 0, INT64_MAX - 1, &v, &present, &e) !=
		RCS_OK)
		goto invalid;
	jr->scheduled_time = present ? v : 0;
	if (jsonu_get_int(body, "ttl", false, 1, JOB_MAX_TTL, &v, &present, &e) != RCS_OK)
		goto invalid;
	jr->ttl = present ? v : 0;
	if (jsonu_get_string_array(body, "notification_mail_list", false, VALIDATE_MAX_MAILS, 254,
				   &jr->mail_list, NULL, &e) != RCS_OK ||
	    validate_mail_list(jr->mail_list, "notification_mail_list", &e) != RCS_OK ||
	    jsonu_get_string_array(body, "notification_status_list", false, 16, 32,
				   &jr->status_list, NULL, &e) != RCS_OK ||
	    validate_status_list(jr->status_list, "notification_status_list", &e) != RCS_OK)
		goto invalid;
	if (jsonu_get_string(body, "group_name", false, 200, &jr->group_name, &present, &e) !=
	    RCS_OK)
		goto invalid;
	if (present && jr->group_name[0] == '\0') {
		jsonu_fail(&e, "group_name", "'group_name' must not be empty");
		goto invalid;
	}
	if (!api_job_read_offline(body, jr, &e))
		goto invalid;
	if (vars_validate(jr->variables, json_object_object_length(vi) ? vi : NULL, &e) != RCS_OK)
		goto invalid;
	if (!jr->task.active) {
		api_error(r, 409, "task_inactive", NULL,
			  "the task is not active: it creates no jobs");
		return false;
	}
	return true;
invalid:
	api_invalid(r, &e);
	return false;
}

/* A JSON document the API checked, as the text the store keeps (NULL stays NULL). */
static const char *job_text(json_object *o)
{
	return o ? jsonu_dump(o, NULL) : NULL;
}

void api_job_batch_init(struct api_req *req, struct api_job_req *jr, struct job_batch *b)
{
	memset(b, 0, sizeof(*b));
	b->client_root = req->auth.client_root;
	b->task_ident = jr->task.ident;
	b->task_version = jr->task.version;
	b->task_name = jr->task.name;
	b->created_user = req->auth.user;
	b->comment = jr->comment;
	b->variables = jr->variables ? job_text(jr->variables) : "{}";
	b->mail_list = job_text(jr->mail_list);
	b->status_list = job_text(jr->status_list);
	b->task_mail_list = jr->task.mail_list;
	b->task_status_list = jr->task.status_list;
	b->scheduled_time = jr->scheduled_time;
	b->ttl = jr->ttl;
	b->now = req->now;
}

/*
 * With trusted keys, a signed task's jobs go out only while its signature
 * still verifies (keys may have been rotated since it was signed).
 */
static bool job_check_signature(struct api_req *req, struct api_resp *r, struct api_job_req *jr)
{
	struct task_version tv;
	struct manifest_in m;
	json_object *sig = NULL;
	enum rcs_err err;
	bool ok = false;

	memset(&m, 0, sizeof(m));
	if (jr->task.signature == NULL || signer_trusted_count(req->app->signer) == 0)
		return true;
	err = store_task_version_get(req->app->st, jr->task.ident, jr->task.version, &tv);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		return false;
	}
	m.client_root = req->auth.client_root;
	m.task_ident = jr->task.ident;
	m.version = jr->task.version;
	m.script_name = tv.script_name;
	m.script = tv.script_src;
	m.script_len = tv.script_len;
	m.constants = json_tokener_parse(tv.constants);
	m.variables_info = json_tokener_parse(tv.variables_info);
	/* manifest v2 when the version pins artifacts (docs/signing.md) */
	m.artifacts = tv.artifacts ? json_tokener_parse(tv.artifacts) : NULL;
	m.release = tv.release ? json_tokener_parse(tv.release) : NULL;
	sig = json_tokener_parse(tv.signature ? tv.signature : jr->task.signature);
	if (m.constants == NULL || m.variables_info == NULL || sig == NULL ||
	    (tv.artifacts && m.artifacts == NULL) || (tv.release && m.release == NULL)) {
		api_store_error(r, RCS_ERR_INTERNAL, "task");
		goto out;
	}
	err = signer_check_cached(req->app->signer, &m, sig);
	if (err != RCS_OK) {
		api_error(
		    r, 409, "signature_invalid", "signature",
		    "the task's signature does not verify against a trusted key: sign it again");
		goto out;
	}
	ok = true;
out:
	if (m.constants)
		json_object_put(m.constants);
	if (m.variables_info)
		json_object_put(m.variables_info);
	json_object_put(m.artifacts);
	json_object_put(m.release);
	if (sig)
		json_object_put(sig);
	store_task_version_free(&tv);
	return ok;
}

/* The task's JSON members as objects (JSON text the store holds). */
static enum rcs_err job_task_json(const char *text, json_object **out)
{
	*out = text ? json_tokener_parse(text) : NULL;
	return *out != NULL ? RCS_OK : RCS_ERR_INTERNAL;
}

void api_job_req_free(struct api_job_req *jr)
{
	store_task_rec_free(&jr->task);
	json_object_put(jr->task_vi);
	jr->task_vi = NULL;
}

bool api_job_load_task(struct api_req *req, struct api_resp *r, struct api_job_req *jr)
{
	enum rcs_err err = api_task_load(req, req->seg[1], &jr->task);

	if (err == RCS_OK)
		err = job_task_json(jr->task.variables_info, &jr->task_vi);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		return false;
	}
	return job_check_signature(req, r, jr);
}

void api_job_create(struct api_req *req, struct api_resp *r)
{
	static const char *const allowed[] = {"entity_ident",
					      "variables",
					      "comment",
					      "scheduled_time",
					      "ttl",
					      "notification_mail_list",
					      "notification_status_list",
					      NULL};
	struct api_job_req jr;
	struct job_batch b;
	struct job_new one;
	struct job_rec job;
	struct jsonu_err e;
	json_object *body = NULL;
	const char *entity = NULL;
	struct render w;
	struct buf text;
	bool online = false;
	enum rcs_err err, tx_err;

	memset(&jr, 0, sizeof(jr));
	memset(&job, 0, sizeof(job));
	buf_init(&text, API_JOB_TEXT_MAX);
	if (!api_job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
		goto out;
	if (jsonu_get_string(body, "entity_ident", true, 64, &entity, NULL, &e) != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	if (!uuid_valid(entity)) {
		api_error(r, 400, "validation_failed", "entity_ident",
			  "'entity_ident' must be a UUID");
		goto out;
	}
	if (!api_job_read_common(req, r, body, allowed, &jr))
		goto out;
	err = store_device_presence(req->app->st, req->auth.client_root, entity, &online);
	if (err == RCS_ERR_NOTFOUND) {
		api_error(r, 404, "not_found", "entity_ident", "no such device");
		goto out;
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "device");
		goto out;
	}
	if (lifecycle_has_transport(req->app->lc) && !online && !jr.task.allow_offline) {
		api_error(r, 409, "device_offline", "entity_ident",
			  "the device is offline and the task does not allow offline devices");
		goto out;
	}
	api_job_batch_init(req, &jr, &b);
	if (uuid_v7(one.ident) != RCS_OK) {
		api_store_error(r, RCS_ERR_IO, "job");
		goto out;
	}
	one.entity_ident = entity;
	b.jobs = &one;
	b.n = 1;
	/* one transaction creates the job and, for an online device, moves it to
	 * transmited; its envelope goes out once that commits (store_after_commit) */
	err = store_tx_begin(req->app->st);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		goto out;
	}
	err = lifecycle_jobs_create(req->app->lc, &b);
	/* answer with the record as sent (transmited), or as created */
	if (err == RCS_OK)
		err = store_job_get(req->app->st, NULL, one.ident, &job);
	if (err == RCS_OK) {
		render_init(&w, &text);
		render_job(&w, &job);
		err = render_end(&w);
	}
	tx_err = store_tx_end(req->app->st, err == RCS_OK);
	if (err == RCS_OK)
		err = tx_err;
	if (err != RCS_OK)
		api_store_error(r, err, "job"); /* rolled back: nothing was created or sent */
	else {
		snprintf(req->target, sizeof(req->target), "%s", one.ident); /* audit */
		api_reply_buf(r, 201, &text, RCS_OK);
	}
out:
	buf_free(&text);
	store_job_rec_free(&job);
	api_job_req_free(&jr);
	json_object_put(body);
}

static bool job_filter_uuid(struct api_req *req, struct api_resp *r, const char *name,
			    const char **out)
{
	const char *v = api_query(req, name);

	if (v != NULL && !uuid_valid(v)) {
		api_error(r, 400, "invalid_parameter", name, "'%s' must be a UUID", name);
		return false;
	}
	*out = v;
	return true;
}

static void job_list(struct api_req *req, struct api_resp *r, struct job_filter *f)
{
	struct store_page pg;
	struct store_job_list list;
	struct render w;
	struct buf page;
	enum job_status st;
	enum rcs_err err;

	/* newest first by default */
	if (!api_list(req, r, API_DEFAULT_PER_PAGE, "created_at update_at", true, false, &pg))
		return;
	f->status = api_query(req, "status");
	if (f->status && strcmp(f->status, "running") != 0 && !status_parse(f->status, &st)) {
		char names[256];
		validate_status_names(names, sizeof(names));
		api_error(r, 400, "invalid_parameter", "status",
			  "'status' must be one of: %s, or running (not '%.64s')", names,
			  f->status);
		return;
	}
	if (!job_filter_uuid(req, r, "group_ident", &f->group_ident) ||
	    !job_filter_uuid(req, r, "entity_ident", &f->entity_ident))
		return;
	if (f->task_ident == NULL && !job_filter_uuid(req, r, "task_ident", &f->task_ident))
		return;
	if (req->auth.role != ROLE_ADMIN)
		f->only_visible_to = req->auth.user;
	err = store_jobs_list(req->app->st, req->auth.client_root, f, &pg, &list);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		return;
	}
	buf_init(&page, API_BULK_ANSWER_MAX);
	render_init(&w, &page);
	render_job_page(&w, &list);
	api_reply_buf(r, 200, &page, render_end(&w));
	store_job_list_free(&list);
}

void api_jobs_list(struct api_req *req, struct api_resp *r)
{
	struct job_filter f;

	memset(&f, 0, sizeof(f));
	job_list(req, r, &f);
}

void api_task_jobs_list(struct api_req *req, struct api_resp *r)
{
	struct job_filter f;
	struct task_rec task;
	enum rcs_err err = api_task_load(req, req->seg[1], &task);

	store_task_rec_free(&task);
	if (err != RCS_OK) {
		api_store_error(r, err, "task");
		return;
	}
	memset(&f, 0, sizeof(f));
	f.task_ident = req->seg[1];
	job_list(req, r, &f);
}

/*
 * A job of the tenant whose task the caller may see: the jobs of a task that
 * is not public are, like the task, only for its creator and admins.
 */
static enum rcs_err job_visible(struct api_req *req, const char *ident)
{
	if (!uuid_valid(ident))
		return RCS_ERR_NOTFOUND;
	if (req->auth.role == ROLE_ADMIN)
		return RCS_OK;
	return store_job_visible(req->app->st, req->auth.client_root, ident, req->auth.user);
}

/* The record of the tenant's job (another tenant's: as if there were none), the same
 * record as the lists' and the events'. */
void api_job_get(struct api_req *req, struct api_resp *r)
{
	struct job_rec job;
	struct render w;
	struct buf text;
	enum rcs_err err = job_visible(req, req->seg[1]);

	memset(&job, 0, sizeof(job));
	if (err == RCS_OK)
		err = store_job_get(req->app->st, req->auth.client_root, req->seg[1], &job);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		return;
	}
	buf_init(&text, API_JOB_TEXT_MAX);
	render_init(&w, &text);
	render_job(&w, &job);
	api_reply_buf(r, 200, &text, render_end(&w));
	store_job_rec_free(&job);
}

void api_job_history(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct store_history_list list;
	struct job_rec job;
	struct render w;
	struct buf page;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	/* newest first by default, as the specification shows */
	if (!api_list(req, r, API_MAX_PER_PAGE, "update_at", true, false, &pg))
		return;
	err = job_visible(req, req->seg[1]);
	if (err == RCS_OK)
		err = store_job_history(req->app->st, req->auth.client_root, req->seg[1], &pg, &job,
					&list);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		return;
	}
	buf_init(&page, API_BULK_ANSWER_MAX);
	render_init(&w, &page);
	render_history_page(&w, &job, &list);
	api_reply_buf(r, 200, &page, render_end(&w));
	store_history_list_free(&list);
	store_job_rec_free(&job);
}

#define API_CANCEL_REASON_MAX 500 /* bytes of a cancel's reason */

void api_job_cancel(struct api_req *req, struct api_resp *r)
{
	struct job_rec job;
	struct render w;
	struct buf text;
	char response[API_CANCEL_REASON_MAX + 160];
	enum rcs_err err = RCS_ERR_NOTFOUND;
	const char *reason = NULL;

	/* no body is needed; one that is sent is an object with at most a reason */
	if (req->body && req->body_len > 0) {
		static const char *const keys[] = {"reason", NULL};
		json_object *body = NULL;
		struct jsonu_err e;
		bool ok;
		if (!api_body_object(req, r, true, &body))
			return;
		ok = jsonu_check_keys(body, keys, &e) == RCS_OK &&
		     jsonu_get_string(body, "reason", false, API_CANCEL_REASON_MAX, &reason, NULL,
				      &e) == RCS_OK;
		/* who cancelled and why, in the job's response (docs/api.md "Jobs") */
		if (ok && reason && reason[0] != '\0')
			snprintf(response, sizeof(response), "cancelled by %.128s: %s",
				 req->auth.user, reason);
		else
			reason = NULL;
		json_object_put(body);
		if (!ok) {
			api_invalid(r, &e);
			return;
		}
	}
	if (reason == NULL)
		snprintf(response, sizeof(response), "cancelled by %.128s", req->auth.user);
	memset(&job, 0, sizeof(job));
	err = job_visible(req, req->seg[1]);
	if (err == RCS_OK)
		err = lifecycle_cancel(req->app->lc, req->auth.client_root, req->seg[1], response,
				       req->now, &job);
	if (err == RCS_ERR_CONFLICT) {
		api_error(r, 409, "job_terminal", NULL, "the job has already ended");
		return;
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		return;
	}
	buf_init(&text, API_JOB_TEXT_MAX);
	render_init(&w, &text);
	render_job(&w, &job);
	api_reply_buf(r, 200, &text, render_end(&w));
	store_job_rec_free(&job);
}

void api_job_notifications(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct store_job_notification_list list;
	struct render w;
	struct buf page;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg))
		return;
	err = job_visible(req, req->seg[1]);
	if (err == RCS_OK)
		err = store_job_notifications(req->app->st, req->auth.client_root, req->seg[1], &pg,
					      &list);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		return;
	}
	buf_init(&page, API_JOB_TEXT_MAX);
	render_init(&w, &page);
	render_job_notification_page(&w, &list);
	api_reply_buf(r, 200, &page, render_end(&w));
	store_job_notification_list_free(&list);
}
