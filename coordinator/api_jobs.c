/*
 * api_jobs.c - jobs: creation (single and bulk), reads, history, lists, cancel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "api.h"
#include "lifecycle.h"
#include "manifest.h"
#include "log.h"
#include "render.h"
#include "rollout.h"
#include "store.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "uuid.h"
#include "validate.h"

#define JOB_MAX_COMMENT     4096
#define JOB_MAX_TTL         31536000LL
#define JOB_MAX_TAG_DEVICES 100000
#define API_BULK_ANSWER_MAX ((size_t)512 << 20) /* bytes of a bulk send's answer */
#define API_JOB_TEXT_MAX    ((size_t)64 << 20)  /* bytes of one job record, of a page */

/* What every job creation shares, read from the body and checked against the task. */
struct job_req {
	struct task_rec task;
	/* the task's declared variables, as the checks take them */
	json_object *task_vi;
	json_object *variables; /* borrowed from body or empty */
	const char *comment;
	long long scheduled_time;
	long long ttl;
	json_object *mail_list;
	json_object *status_list;
	const char *group_name;
	/* group sends (docs/api.md "Rollouts") */
	struct group_settings gs;
	bool group_send; /* rollout, abort, window, retry or continuous: a group is made */
	const char *tag; /* a tag send's tag */
};

/*
 * Reads the common fields and checks them against the task. On failure the
 * answer is set and false returned.
 */
static bool job_read_common(struct api_req *req, struct api_resp *r, json_object *body,
			    const char *const *allowed, struct job_req *jr)
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

static void job_batch_init(struct api_req *req, struct job_req *jr, struct job_batch *b)
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
static bool job_check_signature(struct api_req *req, struct api_resp *r, struct job_req *jr)
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
	sig = json_tokener_parse(tv.signature ? tv.signature : jr->task.signature);
	if (m.constants == NULL || m.variables_info == NULL || sig == NULL) {
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

static void job_req_free(struct job_req *jr)
{
	store_task_rec_free(&jr->task);
	json_object_put(jr->task_vi);
	jr->task_vi = NULL;
}

static bool job_load_task(struct api_req *req, struct api_resp *r, struct job_req *jr)
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
	struct job_req jr;
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
	if (!job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
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
	if (!job_read_common(req, r, body, allowed, &jr))
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
	job_batch_init(req, &jr, &b);
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
	job_req_free(&jr);
	json_object_put(body);
}

/* A device of a list send and its place in the list. */
struct job_place {
	const char *ident;
	long long place;
};

static int job_cmp_place(const void *a, const void *b)
{
	const struct job_place *x = a, *y = b;
	int c = strcmp(x->ident, y->ident);

	return c != 0 ? c : (x->place > y->place) - (x->place < y->place);
}

/* A device of a tag send, to put the devices in their creation order (created_at, then
 * ident). */
struct job_created {
	int64_t created_at;
	const char *ident;
	size_t i;
};

static int job_cmp_created(const void *a, const void *b)
{
	const struct job_created *x = a, *y = b;

	if (x->created_at != y->created_at)
		return x->created_at < y->created_at ? -1 : 1;
	return strcmp(x->ident, y->ident);
}

/* A device a bulk send leaves out, and why (docs/api.md, "Bulk sends and groups"). */
struct job_rejected {
	const char *entity_ident;
	const char *code, *message;
};

/* How a bulk send's items are written (store_jobs_batch_each's callback). */
struct job_bulk_items {
	struct render w;
	struct render_job_copy copy;
};

static enum rcs_err job_render_one(void *arg, const struct job_rec *r, bool like_first)
{
	struct job_bulk_items *it = arg;

	render_job_batch(&it->w, &it->copy, r, like_first);
	return it->w.err;
}

/* The rest of a bulk send's answer after its items: the group and the devices left out. */
static void job_bulk_answer_end(struct render *w, const struct job_batch *b, const char *user,
				const struct job_rejected *rejected, size_t n_rejected)
{
	render_arr_close(w);
	render_key(w, "group");
	if (b->group_ident) {
		render_obj_open(w);
		render_kstr(w, "ident", b->group_ident);
		render_kstr(w, "name", b->group_name);
		render_kstr(w, "created_user", user);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_key(w, "rejected");
	render_arr_open(w);
	for (size_t i = 0; i < n_rejected; i++) {
		render_obj_open(w);
		render_kstr(w, "entity_ident", rejected[i].entity_ident);
		render_key(w, "error");
		render_obj_open(w);
		render_kstr(w, "code", rejected[i].code);
		render_kstr(w, "message", rejected[i].message);
		render_obj_close(w);
		render_obj_close(w);
	}
	render_arr_close(w);
	render_obj_close(w);
}

/*
 * Creates one job per candidate device (sorted, unique idents) in one
 * transaction; unknown and (with a transport) offline ones are rejected.
 * online_known: candidates carry their presence already (tag sends).
 */
static void job_bulk(struct api_req *req, struct api_resp *r, struct job_req *jr,
		     const char **idents, const bool *online_of, const long long *order_of,
		     size_t n)
{
	struct job_batch b;
	struct job_new *jobs = NULL;
	struct job_rejected *rejected = NULL;
	struct job_bulk_items it;
	struct buf answer;
	char group_ident[UUID_STR_LEN];
	bool transport = lifecycle_has_transport(req->app->lc);
	bool allow_offline = jr->task.allow_offline;
	bool tx = false;
	size_t nj = 0, nr = 0;
	enum rcs_err err;

	/* the jobs' records are rendered from one read of the batch (store_jobs_batch_each):
	 * at 10,000 jobs a read, or json-c objects, per job would be most of the request */
	memset(&it, 0, sizeof(it));
	buf_init(&answer, API_BULK_ANSWER_MAX);
	jobs = calloc(n ? n : 1, sizeof(*jobs));
	rejected = calloc(n ? n : 1, sizeof(*rejected));
	if (jobs == NULL || rejected == NULL) {
		api_store_error(r, RCS_ERR_NOMEM, "job");
		goto out;
	}
	err = store_tx_begin(req->app->st);
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		goto out;
	}
	tx = true;
	for (size_t i = 0; i < n; i++) {
		bool online = false;
		if (online_of) {
			online = online_of[i];
		} else {
			err = store_device_presence(req->app->st, req->auth.client_root, idents[i],
						    &online);
			if (err == RCS_ERR_NOTFOUND) {
				rejected[nr++] =
				    (struct job_rejected){idents[i], "not_found", "no such device"};
				continue;
			}
			if (err != RCS_OK) {
				api_store_error(r, err, "device");
				goto out;
			}
		}
		if (transport && !online && !allow_offline) {
			rejected[nr++] = (struct job_rejected){
			    idents[i], "device_offline",
			    "the device is offline and the task does not allow offline devices"};
			continue;
		}
		err = uuid_v7(jobs[nj].ident);
		if (err != RCS_OK) {
			api_store_error(r, err, "job");
			goto out;
		}
		jobs[nj].order = order_of ? order_of[i] : (long long)i;
		jobs[nj++].entity_ident = idents[i];
	}
	job_batch_init(req, jr, &b);
	b.jobs = jobs;
	b.n = nj;
	/* a named group exists even when no job came of the send (docs/api.md); a group
	 * send without a name is named by its ident (docs/api.md "Rollouts") */
	if (jr->group_name || jr->group_send) {
		err = uuid_v7(group_ident);
		if (err != RCS_OK) {
			api_store_error(r, err, "group");
			goto out;
		}
		b.group_ident = group_ident;
		b.group_name = jr->group_name ? jr->group_name : group_ident;
		b.settings = &jr->gs;
		b.tag = jr->tag;
		b.hold = rollout_holds(&jr->gs);
	}
	err = lifecycle_jobs_create(req->app->lc, &b);
	if (err == RCS_OK) {
		render_init(&it.w, &answer);
		render_obj_open(&it.w);
		render_key(&it.w, "items");
		render_arr_open(&it.w);
		err = store_jobs_batch_each(req->app->st, &b, job_render_one, &it);
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		goto out;
	}
	err = store_tx_end(req->app->st, true);
	tx = false;
	if (err != RCS_OK) {
		api_store_error(r, err, "job");
		goto out;
	}
	if (b.group_ident)
		snprintf(req->target, sizeof(req->target), "%s", b.group_ident); /* audit */
	job_bulk_answer_end(&it.w, &b, req->auth.user, rejected, nr);
	api_reply_buf(r, 201, &answer, render_end(&it.w));
out:
	if (tx)
		store_tx_end(req->app->st, false);
	free(jobs);
	free(rejected);
	render_job_copy_free(&it.copy);
	buf_free(&answer);
}

void api_jobs_bulk_list(struct api_req *req, struct api_resp *r)
{
	static const char *const allowed[] = {"ident_list",
					      "variables",
					      "comment",
					      "group_name",
					      "scheduled_time",
					      "ttl",
					      "notification_mail_list",
					      "notification_status_list",
					      "rollout",
					      "abort",
					      "window",
					      "retry",
					      "continuous",
					      NULL};
	struct job_req jr;
	struct jsonu_err e;
	json_object *body = NULL, *list = NULL;
	const char **idents = NULL;
	struct job_place *byplace = NULL;
	long long *places = NULL;
	size_t n, u = 0;

	memset(&jr, 0, sizeof(jr));
	if (!job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
		goto out;
	if (jsonu_get_string_array(body, "ident_list", true, API_MAX_BULK, 64, &list, NULL, &e) !=
	    RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	n = json_object_array_length(list);
	if (n == 0) {
		api_error(r, 400, "validation_failed", "ident_list",
			  "'ident_list' must name at least one device");
		goto out;
	}
	idents = calloc(n, sizeof(*idents));
	byplace = calloc(n, sizeof(*byplace));
	places = calloc(n, sizeof(*places));
	if (idents == NULL || byplace == NULL || places == NULL) {
		api_store_error(r, RCS_ERR_NOMEM, "job");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		idents[i] = json_object_get_string(json_object_array_get_idx(list, i));
		if (!uuid_valid(idents[i])) {
			char field[64];
			snprintf(field, sizeof(field), "ident_list[%zu]", i);
			api_error(r, 400, "validation_failed", field, "'%s' must be a UUID", field);
			goto out;
		}
	}
	if (!job_read_common(req, r, body, allowed, &jr) ||
	    !api_group_settings_read(r, body, false, jr.task.retry, &jr.gs, &jr.group_send))
		goto out;
	/* a device listed twice gets one job, released (rollouts) in the place it was first
	 * listed */
	for (size_t i = 0; i < n; i++) {
		byplace[i].ident = idents[i];
		byplace[i].place = (long long)i;
	}
	qsort(byplace, n, sizeof(*byplace), job_cmp_place);
	for (size_t i = 0; i < n; i++)
		if (u == 0 || strcmp(idents[u - 1], byplace[i].ident) != 0) {
			idents[u] = byplace[i].ident;
			places[u++] = byplace[i].place;
		}
	job_bulk(req, r, &jr, idents, NULL, places, u);
out:
	free(byplace);
	free(places);
	free(idents);
	job_req_free(&jr);
	json_object_put(body);
}

void api_jobs_bulk_tags(struct api_req *req, struct api_resp *r)
{
	static const char *const allowed[] = {"tag",
					      "variables",
					      "comment",
					      "group_name",
					      "scheduled_time",
					      "ttl",
					      "notification_mail_list",
					      "notification_status_list",
					      "rollout",
					      "abort",
					      "window",
					      "retry",
					      "continuous",
					      NULL};
	struct job_req jr;
	struct jsonu_err e;
	json_object *body = NULL;
	struct store_device_presence_list devices = {.items = NULL, .n = 0};
	const char *tag = NULL;
	const char **idents = NULL;
	bool *online = NULL;
	long long *places = NULL;
	struct job_created *bycreation = NULL;
	size_t n;
	enum rcs_err err;

	memset(&jr, 0, sizeof(jr));
	if (!job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
		goto out;
	if (jsonu_get_string(body, "tag", true, 64, &tag, NULL, &e) != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	if (!validate_tag(tag)) {
		api_error(r, 400, "validation_failed", "tag",
			  "'tag' must be 1-64 letters, digits or any of _-.:/");
		goto out;
	}
	if (!job_read_common(req, r, body, allowed, &jr) ||
	    !api_group_settings_read(r, body, true, jr.task.retry, &jr.gs, &jr.group_send))
		goto out;
	jr.tag = tag;
	err = store_devices_with_tag(req->app->st, req->auth.client_root, tag, JOB_MAX_TAG_DEVICES,
				     &devices);
	if (err == RCS_ERR_TOOBIG) {
		api_error(r, 400, "validation_failed", "tag", "more than %d devices hold this tag",
			  JOB_MAX_TAG_DEVICES);
		goto out;
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "device");
		goto out;
	}
	n = devices.n;
	idents = calloc(n ? n : 1, sizeof(*idents));
	online = calloc(n ? n : 1, sizeof(*online));
	places = calloc(n ? n : 1, sizeof(*places));
	bycreation = calloc(n ? n : 1, sizeof(*bycreation));
	if (idents == NULL || online == NULL || places == NULL || bycreation == NULL) {
		api_store_error(r, RCS_ERR_NOMEM, "job");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		idents[i] = devices.items[i].entity_ident;
		online[i] = devices.items[i].online;
		bycreation[i] = (struct job_created){devices.items[i].created_at, idents[i], i};
	}
	/* released (rollouts) in the devices' creation order */
	qsort(bycreation, n, sizeof(*bycreation), job_cmp_created);
	for (size_t i = 0; i < n; i++)
		places[bycreation[i].i] = (long long)i;
	job_bulk(req, r, &jr, idents, online, places, n);
out:
	free(places);
	free(bycreation);
	free(idents);
	free(online);
	store_device_presence_list_free(&devices);
	job_req_free(&jr);
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
		api_error(r, 400, "invalid_parameter", "status", "'status' is not a job status");
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

void api_job_cancel(struct api_req *req, struct api_resp *r)
{
	struct job_rec job;
	struct render w;
	struct buf text;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	/* no body is needed; one that is sent must be an empty object */
	if (req->body && req->body_len > 0) {
		static const char *const none[] = {NULL};
		json_object *body = NULL;
		struct jsonu_err e;
		bool ok;
		if (!api_body_object(req, r, true, &body))
			return;
		ok = jsonu_check_keys(body, none, &e) == RCS_OK;
		json_object_put(body);
		if (!ok) {
			api_invalid(r, &e);
			return;
		}
	}
	memset(&job, 0, sizeof(job));
	err = job_visible(req, req->seg[1]);
	if (err == RCS_OK)
		err = lifecycle_cancel(req->app->lc, req->auth.client_root, req->seg[1], req->now,
				       &job);
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
