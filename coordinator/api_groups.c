/*
 * api_groups.c - group sends (docs/api.md "Rollouts"): the rollout, abort, window, retry,
 * download and continuous members of bulk sends (and a task's default retry), checked into struct
 * group_settings; PATCH /groups/<id>/pause, /resume and /cancel.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "dl_limits.h"
#include "lifecycle.h"
#include "render.h"
#include "rollout.h"
#include "store_groups.h"
#include "store_keys.h"
#include "uuid.h"

#define API_GROUP_TEXT_MAX ((size_t)64 << 20) /* bytes of a group's record */

/* Names a member of a nested object in the error: "rollout.max_per_minute". */
static enum rcs_err group_nest(struct jsonu_err *e, const char *parent, enum rcs_err err)
{
	char field[sizeof(e->field)];

	if (err == RCS_OK)
		return err;
	if (e->field[0] != '\0')
		snprintf(field, sizeof(field), "%.24s.%.100s", parent, e->field);
	else
		snprintf(field, sizeof(field), "%.24s", parent);
	snprintf(e->field, sizeof(e->field), "%s", field);
	return err;
}

/* A number (integer or not) in [min, max], kept in 1/scale units. */
static enum rcs_err group_get_scaled(json_object *o, const char *key, bool required, double min,
				     double max, long long scale, long long *out, bool *present,
				     struct jsonu_err *e)
{
	json_object *v = jsonu_member(o, key);
	double d;

	if (present)
		*present = v != NULL;
	if (v == NULL)
		return required ? jsonu_fail(e, key, "'%s' is required", key) : RCS_OK;
	if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
		return jsonu_fail(e, key, "'%s' must be a number", key);
	d = json_object_get_double(v);
	if (!isfinite(d) || d < min || d > max)
		return jsonu_fail(e, key, "'%s' must be from %g to %g", key, min, max);
	*out = llround(d * (double)scale);
	return RCS_OK;
}

static enum rcs_err group_read_rollout(json_object *o, struct group_settings *g,
				       struct jsonu_err *e)
{
	static const char *const keys[] = {"max_per_minute", "exponential", NULL};
	static const char *const exp_keys[] = {"base_per_minute", "factor", "after_succeeded",
					       NULL};
	json_object *x = NULL;
	bool has_max = false, has_exp = false;
	int64_t v = 0;
	enum rcs_err err;

	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "max_per_minute", false, 1, ROLLOUT_MAX_RATE, &v, &has_max,
				 e)) != RCS_OK ||
	    (err = jsonu_get_object(o, "exponential", false, &x, &has_exp, e)) != RCS_OK)
		return err;
	g->max_per_minute = has_max ? v : 0;
	if (!has_max && !has_exp)
		return jsonu_fail(e, "", "'rollout' needs 'max_per_minute' or 'exponential'");
	if (!has_exp)
		return RCS_OK;
	if ((err = group_nest(e, "exponential", jsonu_check_keys(x, exp_keys, e))) != RCS_OK ||
	    (err = group_nest(e, "exponential",
			      jsonu_get_int(x, "base_per_minute", true, 1, ROLLOUT_MAX_RATE, &v,
					    NULL, e))) != RCS_OK)
		return err;
	g->base_per_minute = v;
	if ((err = group_nest(e, "exponential",
			      group_get_scaled(x, "factor", true, 1, 10, ROLLOUT_MILLI,
					       &g->factor_milli, NULL, e))) != RCS_OK ||
	    (err = group_nest(
		 e, "exponential",
		 jsonu_get_int(x, "after_succeeded", true, 1, 1000000, &v, NULL, e))) != RCS_OK)
		return err;
	g->after_succeeded = v;
	return RCS_OK;
}

static enum rcs_err group_read_abort(json_object *o, struct group_settings *g, struct jsonu_err *e)
{
	static const char *const keys[] = {"failure_percent", "min_finished", NULL};
	bool present = false;
	int64_t v = 0;
	enum rcs_err err;

	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = group_get_scaled(o, "failure_percent", true, 0, 100, ROLLOUT_PCT_SCALE,
				    &g->failure_pct, NULL, e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "min_finished", false, 1, 1000000, &v, &present, e)) != RCS_OK)
		return err;
	g->has_abort = true;
	g->min_finished = present ? v : 1;
	return RCS_OK;
}

static enum rcs_err group_read_window(json_object *o, struct group_settings *g, struct jsonu_err *e)
{
	static const char *const keys[] = {"days", "start", "duration_min", "utc_offset_min", NULL};
	json_object *days = NULL;
	const char *start = NULL;
	bool present = false;
	int64_t v = 0;
	int minutes;
	enum rcs_err err;

	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = jsonu_get_string_array(o, "days", true, 7, 3, &days, NULL, e)) != RCS_OK)
		return err;
	if (json_object_array_length(days) == 0)
		return jsonu_fail(e, "days", "'days' must name at least one day");
	for (size_t i = 0; i < json_object_array_length(days); i++) {
		int bit =
		    rollout_day_bit(json_object_get_string(json_object_array_get_idx(days, i)));

		if (bit < 0 || (g->days & (1u << bit)))
			return jsonu_fail(
			    e, "days", "'days' must be distinct days: mon tue wed thu fri sat sun");
		g->days |= 1u << bit;
	}
	if ((err = jsonu_get_string(o, "start", true, 8, &start, NULL, e)) != RCS_OK)
		return err;
	minutes = rollout_parse_hhmm(start);
	if (minutes < 0)
		return jsonu_fail(e, "start", "'start' must be HH:MM (00:00 to 23:59)");
	g->start_min = minutes;
	if ((err = jsonu_get_int(o, "duration_min", true, 1, 1440, &v, NULL, e)) != RCS_OK)
		return err;
	g->duration_min = v;
	if ((err = jsonu_get_int(o, "utc_offset_min", false, -720, 840, &v, &present, e)) != RCS_OK)
		return err;
	g->utc_offset_min = present ? v : 0;
	g->has_window = true;
	return RCS_OK;
}

enum rcs_err api_group_retry_read(json_object *o, struct group_settings *g, struct jsonu_err *e)
{
	static const char *const keys[] = {"max_attempts", "backoff_s", "backoff_factor", NULL};
	bool present = false;
	int64_t v = 0;
	enum rcs_err err;

	if (!json_object_is_type(o, json_type_object))
		return jsonu_fail(e, "", "must be an object");
	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "max_attempts", true, 1, ROLLOUT_MAX_ATTEMPTS, &v, NULL, e)) !=
		RCS_OK)
		return err;
	g->max_attempts = v;
	if ((err = jsonu_get_int(o, "backoff_s", false, 0, ROLLOUT_MAX_DELAY, &v, &present, e)) !=
	    RCS_OK)
		return err;
	g->backoff_s = present ? v : API_RETRY_BACKOFF_S;
	if ((err = group_get_scaled(o, "backoff_factor", false, 1, 10, ROLLOUT_MILLI,
				    &g->backoff_milli, &present, e)) != RCS_OK)
		return err;
	if (!present)
		g->backoff_milli = API_RETRY_FACTOR_MILLI;
	g->has_retry = true;
	return RCS_OK;
}

/* The download limits (docs/api.md "Download limits"): either member or both. */
static enum rcs_err group_read_download(json_object *o, struct group_settings *g,
					struct jsonu_err *e)
{
	static const char *const keys[] = {"max_concurrent", "max_bytes_per_s", NULL};
	bool has_max = false, has_rate = false;
	int64_t max = 0, rate = 0;
	enum rcs_err err;

	if ((err = jsonu_check_keys(o, keys, e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "max_concurrent", false, 1, DL_MAX_CONCURRENT, &max, &has_max,
				 e)) != RCS_OK ||
	    (err = jsonu_get_int(o, "max_bytes_per_s", false, DL_MIN_RATE, DL_MAX_RATE, &rate,
				 &has_rate, e)) != RCS_OK)
		return err;
	if (!has_max && !has_rate)
		return jsonu_fail(e, "", "'download' needs 'max_concurrent' or 'max_bytes_per_s'");
	g->dl_max_concurrent = has_max ? max : 0;
	g->dl_max_bytes_per_s = has_rate ? rate : 0;
	return RCS_OK;
}

/* One member that must be an object, read by fn: errors name "member.field". */
static enum rcs_err group_member(json_object *body, const char *key,
				 enum rcs_err (*fn)(json_object *, struct group_settings *,
						    struct jsonu_err *),
				 struct group_settings *g, bool *any, struct jsonu_err *e)
{
	json_object *o = NULL;
	bool present = false;
	enum rcs_err err = jsonu_get_object(body, key, false, &o, &present, e);

	if (err != RCS_OK || !present)
		return err;
	*any = true;
	return group_nest(e, key, fn(o, g, e));
}

bool api_group_settings_read(struct api_resp *r, json_object *body, bool tag_send,
			     const char *task_retry, struct group_settings *g, bool *any)
{
	struct jsonu_err e;
	bool present = false;
	json_object *tr = NULL;

	memset(g, 0, sizeof(*g));
	memset(&e, 0, sizeof(e));
	*any = false;
	if (group_member(body, "rollout", group_read_rollout, g, any, &e) != RCS_OK ||
	    group_member(body, "abort", group_read_abort, g, any, &e) != RCS_OK ||
	    group_member(body, "window", group_read_window, g, any, &e) != RCS_OK ||
	    group_member(body, "retry", api_group_retry_read, g, any, &e) != RCS_OK ||
	    group_member(body, "download", group_read_download, g, any, &e) != RCS_OK ||
	    jsonu_get_bool(body, "continuous", false, &g->continuous, &present, &e) != RCS_OK)
		goto invalid;
	if (present && !tag_send) {
		jsonu_fail(&e, "continuous", "'continuous' is for tag sends (/jobs/tags) only");
		goto invalid;
	}
	*any = *any || g->continuous;
	/* the task's default retry, when the send names none */
	if (!g->has_retry && task_retry != NULL) {
		struct group_settings d;

		memset(&d, 0, sizeof(d));
		tr = json_tokener_parse(task_retry);
		if (tr != NULL && api_group_retry_read(tr, &d, &e) == RCS_OK) {
			g->has_retry = true;
			g->max_attempts = d.max_attempts;
			g->backoff_s = d.backoff_s;
			g->backoff_milli = d.backoff_milli;
			*any = true;
		}
		json_object_put(tr);
	}
	return true;
invalid:
	api_invalid(r, &e);
	return false;
}

/* ---- PATCH /groups/<id>/pause, /resume, /cancel ---- */

/* The group's record (with counts) as the answer. */
static void group_answer(struct api_resp *r, const struct group_rec *g)
{
	struct render w;
	struct buf text;

	buf_init(&text, API_GROUP_TEXT_MAX);
	render_init(&w, &text);
	render_group(&w, g);
	api_reply_buf(r, 200, &text, render_end(&w));
}

/* The group must be the tenant's and, for a user other than an admin, of a task they may
 * see (as GET /groups/<id>); the body absent or an empty object. */
static bool group_action_check(struct api_req *req, struct api_resp *r)
{
	struct group_rec g;
	enum rcs_err err;

	if (req->body && req->body_len > 0) {
		static const char *const none[] = {NULL};
		json_object *body = NULL;
		struct jsonu_err e;
		bool ok;

		if (!api_body_object(req, r, true, &body))
			return false;
		ok = jsonu_check_keys(body, none, &e) == RCS_OK;
		json_object_put(body);
		if (!ok) {
			api_invalid(r, &e);
			return false;
		}
	}
	err = uuid_valid(req->seg[1])
		  ? store_group_get(req->app->st, req->auth.client_root, req->seg[1],
				    req->auth.role == ROLE_ADMIN ? NULL : req->auth.user, &g)
		  : RCS_ERR_NOTFOUND;
	if (err != RCS_OK) {
		api_store_error(r, err, "group");
		return false;
	}
	store_group_rec_free(&g);
	return true;
}

enum group_action { GROUP_PAUSE, GROUP_RESUME, GROUP_CANCEL };

static void group_action(struct api_req *req, struct api_resp *r, enum group_action a)
{
	static const char *const verbs[] = {"paused", "resumed", "cancelled"};
	struct group_rec g;
	enum group_status prev = GROUP_RUNNING;
	enum rcs_err err;

	memset(&g, 0, sizeof(g));
	if (!group_action_check(req, r))
		return;
	if (a == GROUP_PAUSE)
		err = lifecycle_group_pause(req->app->lc, req->auth.client_root, req->seg[1],
					    req->now, &prev, &g);
	else if (a == GROUP_RESUME)
		err = lifecycle_group_resume(req->app->lc, req->auth.client_root, req->seg[1],
					     req->now, &prev, &g);
	else
		err = lifecycle_group_cancel(req->app->lc, req->auth.client_root, req->seg[1],
					     req->auth.user, req->now, &prev, &g);
	if (err == RCS_ERR_CONFLICT) {
		api_error(r, 409, "group_ended", "status", "the group is %s: it cannot be %s",
			  group_status_name(prev), verbs[a]);
		return;
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "group");
		return;
	}
	group_answer(r, &g);
	store_group_rec_free(&g);
}

void api_group_pause(struct api_req *req, struct api_resp *r)
{
	group_action(req, r, GROUP_PAUSE);
}

void api_group_resume(struct api_req *req, struct api_resp *r)
{
	group_action(req, r, GROUP_RESUME);
}

void api_group_cancel(struct api_req *req, struct api_resp *r)
{
	group_action(req, r, GROUP_CANCEL);
}
