/*
 * render_jobs.c - the jobs' side of render.h: a job's record (GET /jobs/<id>, the lists, the
 * bulk sends' answers, the job events of docs/mqtt.md, "Monitoring"), its history and
 * notifications, groups with their settings, and a job's envelope. The JSON writer they use
 * is render.c's.
 */
#include "render.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "store.h"
#include "store_groups.h"
#include "store_jobs.h"

/* ---- records: jobs, history, notifications, groups ---- */

/* The job's record with the status, time, response and response time given (its own, or a
 * history entry's); "target" and "payload" are always null (docs/api.md, "Jobs"). */
static void render_job_as(struct render *w, const struct job_rec *r, enum job_status status,
			  int64_t update_at, const char *response, int64_t response_time,
			  const char *phase, size_t at[2])
{
	render_obj_open(w);
	render_key(w, "ident");
	at[0] = w->out->len + 1; /* after the opening quote */
	render_str(w, r->ident);
	render_key(w, "task");
	render_obj_open(w);
	render_kint(w, "version", r->task_version);
	render_kstr(w, "ident", r->task_ident);
	render_kstr(w, "name", r->task_name);
	render_obj_close(w);
	render_key(w, "group");
	if (r->group_ident[0] != '\0') {
		render_obj_open(w);
		render_kstr(w, "ident", r->group_ident);
		render_kstr(w, "name", r->group_name);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_kstr(w, "client_root", r->client_root);
	render_key(w, "entity_ident");
	at[1] = w->out->len + 1;
	render_str(w, r->entity_ident);
	render_kraw(w, "target", NULL);
	render_kstr(w, "comment", r->comment);
	render_kstr(w, "status", status_name(status));
	render_kstr(w, "created_user", r->created_user);
	render_kint(w, "created_at", r->created_at);
	render_kint(w, "update_at", update_at);
	render_kint_opt(w, "scheduled_time", r->scheduled_time);
	render_kint_opt(w, "response_time", response_time);
	render_kint_opt(w, "ttl", r->ttl);
	render_kraw(w, "payload", NULL);
	render_kstr(w, "response", response);
	render_kraw(w, "notification_mail_list", r->mail_list);
	render_kraw(w, "notification_status_list", r->status_list);
	render_kraw(w, "variables", r->variables);
	/* group sends (docs/api.md "Rollouts") */
	render_kint(w, "attempt", r->attempt > 0 ? r->attempt : 1);
	render_kstr(w, "retry_of", r->retry_of[0] ? r->retry_of : NULL);
	render_kstr(w, "error_code", r->error_code);
	/* the last progress of its downloads (docs/api.md "Jobs"), null: none reported */
	render_key(w, "progress");
	if (r->has_progress) {
		render_obj_open(w);
		render_kint(w, "done", r->progress_done);
		render_kint(w, "total", r->progress_total);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	/* the phase of a job that spans a reboot (docs/api.md "Jobs"), null: none */
	render_kstr(w, "phase", phase);
	render_obj_close(w);
}

void render_job(struct render *w, const struct job_rec *r)
{
	size_t at[2];

	render_job_as(w, r, r->status, r->update_at, r->response, r->response_time, r->phase, at);
}

/* The idents are UUIDs (36 characters, nothing to escape): a copy's are written over the
 * first record's. */
void render_job_batch(struct render *w, struct render_job_copy *c, const struct job_rec *r,
		      bool like_first)
{
	static const char head[] = "{\"ident\":\"";
	bool uuids = strlen(r->ident) == 36 && strlen(r->entity_ident) == 36;
	size_t at[2], start;

	if (like_first && uuids && c->text != NULL && w->err == RCS_OK) {
		render_rawn(w, c->text, c->len);
		if (w->err == RCS_OK) {
			start = w->out->len - c->len;
			memcpy(w->out->data + start + c->ident_at, r->ident, 36);
			memcpy(w->out->data + start + c->entity_at, r->entity_ident, 36);
		}
		return;
	}
	render_job_as(w, r, r->status, r->update_at, r->response, r->response_time, r->phase, at);
	if (like_first || c->text != NULL || !uuids || w->err != RCS_OK || at[0] < sizeof(head) - 1)
		return;
	/* the first record: kept as the others' text */
	start = at[0] - (sizeof(head) - 1);
	if (memcmp(w->out->data + start, head, sizeof(head) - 1) != 0)
		return;
	c->len = w->out->len - start;
	c->text = malloc(c->len);
	if (c->text == NULL)
		return; /* each record rendered, then */
	memcpy(c->text, w->out->data + start, c->len);
	c->ident_at = at[0] - start;
	c->entity_at = at[1] - start;
}

void render_job_copy_free(struct render_job_copy *c)
{
	free(c->text);
	memset(c, 0, sizeof(*c));
}

void render_job_page(struct render *w, const struct store_job_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_job(w, &l->items[i]);
	render_page_close(w);
}

void render_history_page(struct render *w, const struct job_rec *job,
			 const struct store_history_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++) {
		const struct history_rec *h = &l->items[i];

		size_t at[2];

		render_job_as(w, job, h->status, h->at, h->response, h->response_time, h->phase,
			      at);
	}
	render_page_close(w);
}

void render_job_notification(struct render *w, const struct job_notification_rec *r)
{
	render_obj_open(w);
	render_kstr(w, "address", r->address);
	render_kstr(w, "status", r->status);
	render_kstr(w, "state", r->state);
	render_kint(w, "attempts", r->attempts);
	render_kint(w, "created_at", r->created_at);
	render_kint_opt(w, "sent_at", r->sent_at);
	render_kstr(w, "last_error", r->last_error);
	render_obj_close(w);
}

void render_job_notification_page(struct render *w, const struct store_job_notification_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_job_notification(w, &l->items[i]);
	render_page_close(w);
}

/* A number kept in 1/scale units (a factor in thousandths, a percentage in hundredths),
 * written as a JSON number without trailing zeros. */
static void render_kscaled(struct render *w, const char *key, long long v, long long scale)
{
	char text[48];
	int digits = scale == 1000 ? 3 : 2;
	size_t n;

	n = (size_t)snprintf(text, sizeof(text), "%s%lld.%0*lld", v < 0 ? "-" : "",
			     (v < 0 ? -v : v) / scale, digits, (v < 0 ? -v : v) % scale);
	while (n > 0 && text[n - 1] == '0')
		text[--n] = '\0';
	if (n > 0 && text[n - 1] == '.')
		text[--n] = '\0';
	render_kraw(w, key, text);
}

/* A group's settings (docs/api.md "Rollouts"): each null when not given. */
static void render_group_settings(struct render *w, const struct group_settings *g)
{
	render_key(w, "rollout");
	if (g->max_per_minute > 0 || g->base_per_minute > 0) {
		render_obj_open(w);
		if (g->max_per_minute > 0)
			render_kint(w, "max_per_minute", g->max_per_minute);
		if (g->base_per_minute > 0) {
			render_key(w, "exponential");
			render_obj_open(w);
			render_kint(w, "base_per_minute", g->base_per_minute);
			render_kscaled(w, "factor", g->factor_milli, ROLLOUT_MILLI);
			render_kint(w, "after_succeeded", g->after_succeeded);
			render_obj_close(w);
		}
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_key(w, "abort");
	if (g->has_abort) {
		render_obj_open(w);
		render_kscaled(w, "failure_percent", g->failure_pct, ROLLOUT_PCT_SCALE);
		render_kint(w, "min_finished", g->min_finished);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_key(w, "window");
	if (g->has_window) {
		char start[8];

		render_obj_open(w);
		render_key(w, "days");
		render_arr_open(w);
		for (int i = 0; i < 7; i++)
			if (g->days & (1u << i))
				render_str(w, rollout_day_name(i));
		render_arr_close(w);
		snprintf(start, sizeof(start), "%02d:%02d", (int)(g->start_min / 60 % 24),
			 (int)(g->start_min % 60));
		render_kstr(w, "start", start);
		render_kint(w, "duration_min", g->duration_min);
		render_kint(w, "utc_offset_min", g->utc_offset_min);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_key(w, "retry");
	if (g->has_retry) {
		render_obj_open(w);
		render_kint(w, "max_attempts", g->max_attempts);
		render_kint(w, "backoff_s", g->backoff_s);
		render_kscaled(w, "backoff_factor", g->backoff_milli, ROLLOUT_MILLI);
		render_obj_close(w);
	} else {
		render_null(w);
	}
	render_kbool(w, "continuous", g->continuous);
	render_key(w, "download");
	if (g->dl_max_concurrent > 0 || g->dl_max_bytes_per_s > 0) {
		render_obj_open(w);
		if (g->dl_max_concurrent > 0)
			render_kint(w, "max_concurrent", g->dl_max_concurrent);
		if (g->dl_max_bytes_per_s > 0)
			render_kint(w, "max_bytes_per_s", g->dl_max_bytes_per_s);
		render_obj_close(w);
	} else {
		render_null(w);
	}
}

/* A group's progress (docs/api.md "Progress"): one count per device; what only the
 * counts tell, with them. */
static void render_group_progress(struct render *w, const struct group_rec *r)
{
	const struct group_progress *p = &r->progress;

	render_key(w, "progress");
	render_obj_open(w);
	render_kint(w, "devices", p->devices);
	render_kint(w, "ended", p->ended);
	render_kint(w, "succeeded", p->succeeded);
	render_kint(w, "failed", p->failed);
	render_kint(w, "cancelled", p->cancelled);
	render_kint(w, "open", p->open);
	if (r->with_counts) {
		render_kint(w, "held", p->held);
		render_kint(w, "not_sent", p->not_sent);
		render_kint(w, "retries", p->retries);
		render_key(w, "release_eta_s");
		if (p->release_eta_s >= 0)
			render_int(w, p->release_eta_s);
		else
			render_null(w);
	}
	render_obj_close(w);
}

void render_group(struct render *w, const struct group_rec *r)
{
	render_obj_open(w);
	render_kstr(w, "ident", r->ident);
	render_kstr(w, "name", r->name);
	render_kstr(w, "created_user", r->created_user);
	render_kint(w, "created_at", r->created_at);
	render_kstr(w, "task_ident", r->task_ident);
	/* group sends (docs/api.md "Rollouts") */
	render_key(w, "task");
	render_obj_open(w);
	render_kint(w, "version", r->task_version);
	render_kstr(w, "ident", r->task_ident);
	render_kstr(w, "name", r->task_name);
	render_obj_close(w);
	render_kstr(w, "status", group_status_name(r->status));
	render_kstr(w, "reason", r->reason);
	render_kstr(w, "tag", r->tag);
	render_group_settings(w, &r->settings);
	render_group_progress(w, r);
	if (r->with_counts) {
		render_kint(w, "total", r->total);
		render_key(w, "statuses");
		render_obj_open(w);
		for (size_t i = 0; i < r->n_statuses; i++)
			render_kint(w, status_name(r->statuses[i].status), r->statuses[i].n);
		render_obj_close(w);
		render_key(w, "counts");
		render_obj_open(w);
		for (size_t i = 0; i < r->n_counts; i++)
			render_kint(w, status_name(r->counts[i].status), r->counts[i].n);
		render_obj_close(w);
		render_key(w, "error_codes");
		render_obj_open(w);
		for (size_t i = 0; i < r->n_error_codes; i++)
			render_kint(w, r->error_codes[i].code, r->error_codes[i].n);
		render_obj_close(w);
	}
	if (r->with_rejected) {
		/* as a bulk send's answer lists them (docs/api.md "Bulk sends and groups") */
		render_key(w, "rejected");
		render_arr_open(w);
		for (size_t i = 0; i < r->n_rejected; i++) {
			render_obj_open(w);
			render_kstr(w, "entity_ident", r->rejected[i].entity_ident);
			render_key(w, "error");
			render_obj_open(w);
			render_kstr(w, "code", r->rejected[i].code);
			render_kstr(w, "message", r->rejected[i].message);
			render_obj_close(w);
			render_obj_close(w);
		}
		render_arr_close(w);
	}
	render_obj_close(w);
}

void render_group_page(struct render *w, const struct store_group_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_group(w, &l->items[i]);
	render_page_close(w);
}

void render_webhook_group(struct render *w, const struct group_rec *r, const char *status)
{
	struct group_rec at = *r;

	/* the group's record as GET /groups/<id> shows it, with the status the delivery is
	 * about (the group may have moved on since) */
	if (!group_status_parse(status, &at.status))
		at.status = r->status;
	render_group(w, &at);
}

/* (end of jobs, history, notifications, groups) */

/* ---- MQTT: job envelopes ---- */

/* Members already written as JSON text ("k":v,...), inside an object. */
static void render_members(struct render *w, const char *text, size_t len)
{
	if (len == 0)
		return;
	render_rawn(w, text, len);
}

void render_envelope(struct render *w, const struct proto_envelope *env, const char *version_text,
		     size_t version_len, const char *variables)
{
	render_obj_open(w);
	render_kint(w, "v", PROTO_VERSION);
	render_kstr(w, "job", env->job);
	render_kstr(w, "client_root", env->client_root);
	render_kstr(w, "entity_ident", env->entity_ident);
	render_key(w, "task");
	render_obj_open(w);
	render_kstr(w, "ident", env->task_ident);
	render_kint(w, "version", env->task_version);
	render_kstr(w, "name", env->task_name);
	render_obj_close(w);
	render_members(w, version_text, version_len);
	render_kraw(w, "variables", variables ? variables : "{}");
	render_kint(w, "issued_at", env->issued_at);
	render_kint_opt(w, "expires_at", env->expires_at);
	if (env->artifact_token != NULL) /* the job's own: never in a record or an event */
		render_kstr(w, "artifact_token", env->artifact_token);
	render_obj_close(w);
}
