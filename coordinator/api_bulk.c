/*
 * api_bulk.c - bulk sends (docs/api.md, "Bulk sends and groups"): POST of a list of devices
 * and of a tag, one job per device and, when named or a group send, their group, in one
 * transaction; the answer written from one read of the batch. The request's common members
 * are read as a single job's (api_jobs.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_jobs.h"
#include "buf.h"
#include "lifecycle.h"
#include "render.h"
#include "rollout.h"
#include "store.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "uuid.h"
#include "validate.h"

#define JOB_MAX_TAG_DEVICES 100000

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

/* Why a send's group got no job, kept as its reason (docs/api.md "Bulk sends and groups"):
 * n candidates, none of them given a job; tag NULL for a list send. */
static const char *job_empty_reason(const char *tag, size_t n, char *out, size_t size)
{
	if (n == 0 && tag != NULL)
		snprintf(out, size, "no device holds tag '%s'", tag);
	else
		snprintf(out, size, "no job: every device of the send was rejected (%zu)", n);
	return out;
}

/* Sorts a send's candidates into jobs (a new ident and a place each) and rejected devices:
 * unknown ones, and with a transport the offline ones that the send's "offline", or without
 * it the task's allow_offline, does not queue (docs/api.md "Bulk sends and groups"). On
 * failure the answer is set and false returned. */
static bool job_bulk_sort(struct api_req *req, struct api_resp *r, const struct api_job_req *jr,
			  const char **idents, const bool *online_of, const long long *order_of,
			  size_t n, struct job_new *jobs, size_t *pnj,
			  struct job_rejected *rejected, size_t *pnr)
{
	bool transport = lifecycle_has_transport(req->app->lc);
	bool allow_offline = jr->offline == API_OFFLINE_QUEUE    ? true
			     : jr->offline == API_OFFLINE_REJECT ? false
								 : jr->task.allow_offline;
	bool *found = NULL, *presence = NULL, ok = false;
	size_t nj = 0, nr = 0;
	enum rcs_err err;

	/* a list send's devices: one read of them all, not one per device */
	if (online_of == NULL) {
		found = calloc(n ? n : 1, sizeof(*found));
		presence = calloc(n ? n : 1, sizeof(*presence));
		err = found && presence
			  ? store_devices_presence_of(req->app->st, req->auth.client_root, idents,
						      n, found, presence)
			  : RCS_ERR_NOMEM;
		if (err != RCS_OK) {
			api_store_error(r, err, "device");
			goto out;
		}
		online_of = presence;
	}
	for (size_t i = 0; i < n; i++) {
		bool online = online_of[i];

		if (found && !found[i]) {
			rejected[nr++] =
			    (struct job_rejected){idents[i], "not_found", "no such device"};
			continue;
		}
		if (transport && !online && !allow_offline) {
			rejected[nr++] = (struct job_rejected){
			    idents[i], "device_offline",
			    jr->offline == API_OFFLINE_REJECT
				? "the device is offline and the send rejects offline devices"
				: "the device is offline and the task does not allow offline"
				  " devices (\"offline\": \"queue\" queues its job)"};
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
	*pnj = nj;
	*pnr = nr;
	ok = true;
out:
	free(found);
	free(presence);
	return ok;
}

/*
 * Creates one job per candidate device (sorted, unique idents) in one
 * transaction; unknown and (with a transport) offline ones are rejected.
 * online_known: candidates carry their presence already (tag sends).
 */
static void job_bulk(struct api_req *req, struct api_resp *r, struct api_job_req *jr,
		     const char **idents, const bool *online_of, const long long *order_of,
		     size_t n)
{
	struct job_batch b;
	struct job_new *jobs = NULL;
	struct job_rejected *rejected = NULL;
	struct job_bulk_items it;
	struct buf answer;
	char group_ident[UUID_STR_LEN], reason[128];
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
	if (!job_bulk_sort(req, r, jr, idents, online_of, order_of, n, jobs, &nj, rejected, &nr))
		goto out;
	api_job_batch_init(req, jr, &b);
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
		if (nj == 0)
			b.empty_reason = job_empty_reason(jr->tag, n, reason, sizeof(reason));
		b.rejected = rejected;
		b.n_rejected = nr;
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
					      "download",
					      "offline",
					      NULL};
	struct api_job_req jr;
	struct jsonu_err e;
	json_object *body = NULL, *list = NULL;
	const char **idents = NULL;
	struct job_place *byplace = NULL;
	long long *places = NULL;
	size_t n, u = 0;

	memset(&jr, 0, sizeof(jr));
	if (!api_job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
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
	if (!api_job_read_common(req, r, body, allowed, &jr) ||
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
	api_job_req_free(&jr);
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
					      "download",
					      "offline",
					      NULL};
	struct api_job_req jr;
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
	if (!api_job_load_task(req, r, &jr) || !api_body_object(req, r, false, &body))
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
	if (!api_job_read_common(req, r, body, allowed, &jr) ||
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
	api_job_req_free(&jr);
	json_object_put(body);
}
