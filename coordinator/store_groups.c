/*
 * store_groups.c - the store's part of group sends (docs/api.md "Rollouts"): a group's
 * status and tallies, the release of held jobs, pauses, retries, continuous tag sends. See
 * store_groups.h; store_int.h for what the store's files share.
 */
#include "store_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_int.h"
#include "store_outbox.h"
#include "store_queues.h"

/* Whether a group's jobs wait for release (a rollout or a window), on a groups row. */
#define GROUP_HOLDS                                                                                \
	"(ro_max IS NOT NULL OR ro_base IS NOT NULL OR win_days IS NOT NULL OR status = 'paused')"

static const char *const group_status_names[] = {"running", "paused", "completed", "aborted",
						 "cancelled"};

const char *group_status_name(enum group_status s)
{
	return (unsigned)s < sizeof(group_status_names) / sizeof(group_status_names[0])
		   ? group_status_names[s]
		   : "running";
}

bool group_status_parse(const char *s, enum group_status *out)
{
	for (size_t i = 0; s && i < sizeof(group_status_names) / sizeof(group_status_names[0]); i++)
		if (strcmp(s, group_status_names[i]) == 0) {
			*out = (enum group_status)i;
			return true;
		}
	return false;
}

void store_group_rec_free(struct group_rec *r)
{
	free(r->name);
	free(r->created_user);
	free(r->reason);
	free(r->task_name);
	free(r->tag);
	r->name = r->created_user = r->reason = r->task_name = r->tag = NULL;
	for (size_t i = 0; r->rejected && i < r->n_rejected; i++) {
		free(r->rejected[i].code);
		free(r->rejected[i].message);
	}
	free(r->rejected);
	r->rejected = NULL;
	r->n_rejected = 0;
}

/* A group's progress from its tallies of latest attempts (a list's; docs/api.md
 * "Progress"). */
static void group_progress_tallies(struct group_rec *r)
{
	struct group_progress *p = &r->progress;

	memset(p, 0, sizeof(*p));
	p->open = r->n_open;
	p->ended = r->n_finished;
	p->devices = p->open + p->ended;
	p->succeeded = r->n_succeeded;
	p->failed = r->n_failed;
	p->cancelled = p->ended - p->succeeded - p->failed;
	if (p->cancelled < 0)
		p->cancelled = 0;
	p->release_eta_s = -1;
}

enum rcs_err store_group_row(struct store_stmt *s, struct group_rec *r)
{
	struct group_settings *g = &r->settings;
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	store_val_copy(s, 0, r->ident, sizeof(r->ident));
	r->name = store_val_dup(s, 1, &err);
	r->created_user = store_val_dup(s, 2, &err);
	r->created_at = store_val_int(s, 3);
	store_val_copy(s, 4, r->task_ident, sizeof(r->task_ident));
	store_val_copy(s, 5, r->client_root, sizeof(r->client_root));
	if (!group_status_parse(store_val_text(s, 6), &r->status))
		r->status = GROUP_RUNNING;
	r->reason = store_val_dup(s, 7, &err);
	r->task_version = store_val_int(s, 8);
	r->task_name = store_val_dup(s, 9, &err);
	r->tag = store_val_dup(s, 10, &err);
	g->continuous = store_val_bool(s, 11);
	g->max_per_minute = store_val_int(s, 12);
	g->base_per_minute = store_val_int(s, 13);
	g->factor_milli = store_val_int(s, 14);
	g->after_succeeded = store_val_int(s, 15);
	g->has_abort = !store_val_null(s, 17);
	g->failure_pct = store_val_int(s, 16);
	g->min_finished = store_val_int(s, 17);
	g->has_window = !store_val_null(s, 18);
	g->days = (unsigned)store_val_int(s, 18);
	g->start_min = store_val_int(s, 19);
	g->duration_min = store_val_int(s, 20);
	g->utc_offset_min = store_val_int(s, 21);
	g->has_retry = !store_val_null(s, 22);
	g->max_attempts = store_val_int(s, 22);
	g->backoff_s = store_val_int(s, 23);
	g->backoff_milli = store_val_int(s, 24);
	r->n_open = store_val_int(s, 25);
	r->n_finished = store_val_int(s, 26);
	r->n_failed = store_val_int(s, 27);
	r->n_succeeded = store_val_int(s, 28);
	r->tokens_milli = store_val_int(s, 29);
	r->tokens_at_ms = store_val_int(s, 30);
	g->dl_max_concurrent = store_val_int(s, 31);
	g->dl_max_bytes_per_s = store_val_int(s, 32);
	group_progress_tallies(r);
	if (err != RCS_OK)
		store_group_rec_free(r);
	return err;
}

enum rcs_err store_group_job_ended(struct store *st, const char *group, enum job_status to)
{
	return store_group_jobs_ended(st, group, 1, to == JS_EDGE_ERROR || to == JS_EXPIRED,
				      to == JS_TERMINATED);
}

enum rcs_err store_group_jobs_ended(struct store *st, const char *group, long long finished,
				    long long failed, long long succeeded)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st,
			 "UPDATE groups SET n_open = max(n_open - ?2, 0),"
			 " n_finished = n_finished + ?2, n_failed = n_failed + ?3,"
			 " n_succeeded = n_succeeded + ?4 WHERE ident = ?1",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	store_arg_int(s, 2, finished);
	store_arg_int(s, 3, failed);
	store_arg_int(s, 4, succeeded);
	err = store_done(st, s, "group tallies");
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_group_set_status(struct store *st, const char *ident, unsigned from,
				    enum group_status to, const char *reason,
				    enum group_status *prev)
{
	struct store_stmt *s = NULL;
	enum group_status cur = GROUP_RUNNING;
	bool row = false;
	enum rcs_err err;

	store_lock(st);
	err = store_stmt(st, "SELECT status FROM groups WHERE ident = ?1", &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	err = store_next(st, s, "group status", &row);
	if (err == RCS_OK && !row)
		err = RCS_ERR_NOTFOUND;
	if (err != RCS_OK)
		goto out;
	if (!group_status_parse(store_val_text(s, 0), &cur))
		cur = GROUP_RUNNING;
	if (prev)
		*prev = cur;
	store_stmt_done(st, s);
	s = NULL;
	if ((from & GROUP_BIT(cur)) == 0) {
		err = RCS_ERR_CONFLICT;
		goto out;
	}
	err = store_stmt(
	    st, "UPDATE groups SET status = ?2, reason = coalesce(?3, reason) WHERE ident = ?1",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	store_arg_text(s, 2, group_status_name(to));
	store_arg_text(s, 3, reason);
	err = store_done(st, s, "group status");
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

/* The running groups with held jobs due, after the group (?5, ?6) in their order, claimed for
 * this node (docs/architecture.md "Claims"): one coordinator at a time releases a group's
 * jobs and keeps its token bucket. */
#define GROUPS_CLAIM(lock)                                                                         \
	"UPDATE groups SET claimed_by = ?2, lease_until = ?4 WHERE ident IN (SELECT ident FROM"    \
	" groups WHERE status = 'running' AND (created_at > ?5 OR (created_at = ?5 AND"            \
	" ident > ?6)) AND EXISTS (SELECT 1 FROM jobs j WHERE j.group_ident = groups.ident AND"    \
	" j.held = 1 AND max(coalesce(j.release_at, 0), coalesce(j.scheduled_time, 0)) <= ?3)"     \
	" AND " STORE_CLAIM_FREE("?2", "?3") " ORDER BY created_at, ident LIMIT ?1" lock           \
					     ") RETURNING " GROUP_COLS

static int group_rec_cmp(const void *a, const void *b)
{
	const struct group_rec *x = a, *y = b;

	if (x->created_at != y->created_at)
		return x->created_at < y->created_at ? -1 : 1;
	return strcmp(x->ident, y->ident);
}

enum rcs_err store_groups_releasing(struct store *st, int64_t now, const char *after_ident,
				    int64_t after_created_at, size_t limit,
				    struct store_group_list *out)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err =
	    store_stmt(st, STORE_SQL(st, GROUPS_CLAIM(""), GROUPS_CLAIM(STORE_SKIP_LOCKED_PG)), &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, (long long)limit);
	store_arg_text(s, 2, store_claim_node(st));
	store_arg_int(s, 3, now);
	store_arg_int(s, 4, store_claim_until(st, now));
	store_arg_int(s, 5, after_ident ? after_created_at : INT64_MIN);
	store_arg_text(s, 6, after_ident ? after_ident : "");
	out->items = calloc(limit ? limit : 1, sizeof(*out->items));
	if (out->items == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	/* a write: read to its end */
	while ((err = store_next(st, s, "groups releasing", &row)) == RCS_OK && row) {
		if (out->n >= limit)
			continue;
		err = store_group_row(s, &out->items[out->n]);
		if (err != RCS_OK)
			break;
		out->n++;
	}
	if (err == RCS_OK && out->n > 1)
		qsort(out->items, out->n, sizeof(*out->items), group_rec_cmp);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_group_list_free(out);
	return err;
}

/* When a held job may go: after its retry's backoff and its scheduled time. */
#define HELD_DUE "max(coalesce(release_at, 0), coalesce(scheduled_time, 0))"

/* A rollout's token bucket as it is after a release. */
static enum rcs_err group_bucket_keep(struct store *st, const char *group, long long tokens_milli,
				      int64_t at_ms)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st, "UPDATE groups SET tokens = ?2, tokens_at = ?3 WHERE ident = ?1", &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	store_arg_int(s, 2, tokens_milli);
	store_arg_int(s, 3, at_ms);
	err = store_done(st, s, "rollout bucket");
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_group_release(struct store *st, const char *group, int64_t now, size_t limit,
				 long long tokens_milli, int64_t tokens_at_ms,
				 struct store_idents *out, int64_t *next_at)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	*next_at = 0;
	store_lock(st);
	if (limit > 0) {
		out->v = calloc(limit, sizeof(*out->v));
		if (out->v == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
	}
	err = store_stmt(st,
			 "SELECT ident FROM jobs WHERE group_ident = ?1 AND held = 1 AND"
			 " status = 'pending' AND " HELD_DUE " <= ?2"
			 " ORDER BY release_order, ident LIMIT ?3",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	store_arg_int(s, 2, now);
	store_arg_int(s, 3, (long long)limit);
	while (out->n < limit && (err = store_next(st, s, "held jobs", &row)) == RCS_OK && row)
		store_val_copy(s, 0, out->v[out->n], sizeof(out->v[out->n])), out->n++;
	if (err != RCS_OK)
		goto out;
	store_stmt_done(st, s);
	s = NULL;
	/* released: the ttl runs from now (or the scheduled time) */
	err = store_stmt(st,
			 "UPDATE jobs SET held = 0, response = NULL, expires_at = CASE WHEN ttl IS"
			 " NOT NULL THEN max(?2, coalesce(scheduled_time, 0)) + ttl END"
			 " WHERE ident = ?1 AND held = 1",
			 &s);
	if (err != RCS_OK)
		goto out;
	for (size_t i = 0; i < out->n && err == RCS_OK; i++) {
		store_arg_text(s, 1, out->v[i]);
		store_arg_int(s, 2, now);
		err = store_done(st, s, "release");
	}
	store_stmt_done(st, s);
	s = NULL;
	if (err == RCS_OK && tokens_milli >= 0)
		err = group_bucket_keep(st, group, tokens_milli - 1000 * (long long)out->n,
					tokens_at_ms);
	if (err != RCS_OK)
		goto out;
	err =
	    store_stmt(st,
		       "SELECT min(" HELD_DUE ") FROM jobs WHERE group_ident = ?1 AND held = 1 AND"
		       " status = 'pending'",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	err = store_next(st, s, "next release", &row);
	if (err == RCS_OK && row && !store_val_null(s, 0)) {
		*next_at = store_val_int(s, 0);
		if (*next_at < now)
			*next_at = now;
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_idents_free(out);
	return err;
}

enum rcs_err store_group_hold(struct store *st, const char *group)
{
	/* a job the rollout held already says the group is paused too (its ttl is not
	 * running: it has no expires_at) */
	return store_write(st,
			   "UPDATE jobs SET held = 1, response = ?, expires_at = NULL WHERE"
			   " group_ident = ? AND status = 'pending'",
			   NULL, 2, STORE_PAUSED_RESPONSE, group);
}

enum rcs_err store_group_unhold(struct store *st, const char *group, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st,
			 "UPDATE jobs SET response = CASE WHEN attempt > 1 AND coalesce(release_at,"
			 " 0) > ?3 THEN 'waiting for retry: attempt ' || attempt ELSE ?4 END"
			 " WHERE group_ident = ?1 AND status = 'pending' AND held = 1 AND"
			 " response = ?2",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	store_arg_text(s, 2, STORE_PAUSED_RESPONSE);
	store_arg_int(s, 3, now);
	store_arg_text(s, 4, STORE_HELD_RESPONSE);
	err = store_done(st, s, "resume");
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_group_jobs_open(struct store *st, const char *group, bool unsent_only,
				   size_t limit, struct store_idents *out)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	out->v = calloc(limit ? limit : 1, sizeof(*out->v));
	if (out->v == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	err = store_stmt(st,
			 unsent_only ? "SELECT ident FROM jobs WHERE group_ident = ?1 AND status IN"
				       " ('initial', 'pending') ORDER BY ident LIMIT ?2"
				     : "SELECT ident FROM jobs WHERE group_ident = ?1 AND status IN"
				       " " JOBS_OPEN_LIST " ORDER BY ident LIMIT ?2",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, group);
	store_arg_int(s, 2, (long long)limit);
	while (out->n < limit && (err = store_next(st, s, "open jobs", &row)) == RCS_OK && row)
		store_val_copy(s, 0, out->v[out->n], sizeof(out->v[out->n])), out->n++;
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_idents_free(out);
	return err;
}

/* The history rows (initial, pending) and notifications of a job made in the store. */
static enum rcs_err store_new_job_history(struct store *st, const char *ident, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err =
	    store_stmt(st,
		       "INSERT INTO job_history(job_ident, n, status, at, response) SELECT ident,"
		       " 1, 'initial', ?2, NULL FROM jobs WHERE ident = ?1 UNION ALL SELECT ident,"
		       " 2, 'pending', ?2, response FROM jobs WHERE ident = ?1",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	store_arg_int(s, 2, now);
	err = store_done(st, s, "history add");
	if (err == RCS_OK)
		err = store_notifications_record(st, ident, "initial", now);
	if (err == RCS_OK)
		err = store_notifications_record(st, ident, "pending", now);
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_group_retry(struct store *st, const char *failed, const char *ident, int64_t now,
			       int64_t release_at, const char *response)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_stmt(
	    st,
	    "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
	    " group_ident, entity_ident, status, comment, created_user, created_at, update_at,"
	    " ttl, response, variables, mail_list, status_list, task_mail_list,"
	    " task_status_list, n_history, attempt, retry_of, held, release_order, release_at)"
	    " SELECT ?2, client_root, task_ident, task_version, task_name, group_ident,"
	    " entity_ident, 'pending', comment, created_user, ?3, ?3, ttl, ?5, variables,"
	    " mail_list, status_list, task_mail_list, task_status_list, 2, attempt + 1, ident, 1,"
	    " release_order, ?4 FROM jobs WHERE ident = ?1",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, failed);
	store_arg_text(s, 2, ident);
	store_arg_int(s, 3, now);
	store_arg_int(s, 4, release_at);
	store_arg_text(s, 5, response);
	err = store_done(st, s, "retry");
	store_stmt_done(st, s);
	s = NULL;
	if (err == RCS_OK)
		err = store_new_job_history(st, ident, now);
	if (err != RCS_OK)
		goto out;
	/* the failed job is no longer its device's latest attempt: the group's tallies count
	 * the retry instead */
	err =
	    store_stmt(st,
		       "UPDATE groups SET n_open = n_open + 1, n_finished = max(n_finished - 1, 0),"
		       " n_failed = max(n_failed - 1, 0) WHERE ident = (SELECT group_ident FROM"
		       " jobs WHERE ident = ?1)",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, failed);
	err = store_done(st, s, "group tallies");
	if (err == RCS_OK)
		err = store_write(st, "UPDATE jobs SET superseded = 1 WHERE ident = ?", NULL, 1,
				  failed);
out:
	store_stmt_done(st, s);
	return store_sp_end(st, err);
}

static enum rcs_err store_held_row(struct store_stmt *s, void *arg)
{
	*(bool *)arg = store_val_bool(s, 0);
	return RCS_OK;
}

/* The groups a device joins (store_groups_continuous_add). */
#define CONT_GROUPS_MAX 256

enum rcs_err store_groups_continuous_add(struct store *st, const char *client_root,
					 const char *entity_ident, int64_t now,
					 struct store_idents *out, bool **held)
{
	struct store_idents groups = {.v = NULL, .n = 0};
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	*held = NULL;
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	groups.v = calloc(CONT_GROUPS_MAX, sizeof(*groups.v));
	if (groups.v == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	err = store_stmt(
	    st,
	    "SELECT g.ident FROM groups g JOIN tasks t ON t.ident = g.task_ident WHERE"
	    " g.status IN ('running', 'paused') AND g.continuous = 1 AND g.client_root = ?1 AND"
	    " EXISTS"
	    " (SELECT 1 FROM device_tags dt WHERE dt.client_root = ?1 AND dt.tag = g.tag AND"
	    " dt.entity_ident = ?2) AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.group_ident ="
	    " g.ident AND j.entity_ident = ?2) AND (t.allow_offline = 1 OR EXISTS (SELECT 1 FROM"
	    " devices d WHERE d.entity_ident = ?2 AND d.client_root = ?1 AND d.online = 1))"
	    " ORDER BY g.ident LIMIT ?3",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, entity_ident);
	store_arg_int(s, 3, CONT_GROUPS_MAX);
	while (groups.n < CONT_GROUPS_MAX &&
	       (err = store_next(st, s, "continuous groups", &row)) == RCS_OK && row)
		store_val_copy(s, 0, groups.v[groups.n], sizeof(groups.v[groups.n])), groups.n++;
	store_stmt_done(st, s);
	s = NULL;
	if (err != RCS_OK || groups.n == 0)
		goto out;
	out->v = calloc(groups.n, sizeof(*out->v));
	*held = calloc(groups.n, sizeof(**held));
	if (out->v == NULL || *held == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < groups.n && err == RCS_OK; i++) {
		char *id = out->v[out->n];

		err = uuid_v7(id);
		if (err != RCS_OK)
			break;
		err = store_stmt(
		    st,
		    "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
		    " group_ident, entity_ident, status, comment, created_user, created_at,"
		    " update_at, ttl, response, variables, mail_list, status_list, task_mail_list,"
		    " task_status_list, n_history, held, release_order, expires_at) SELECT ?1,"
		    " client_root, task_ident, task_version, task_name, ident, ?2, 'pending',"
		    " c_comment, created_user, ?3, ?3, c_ttl, CASE WHEN status = 'paused' THEN ?6"
		    " WHEN " GROUP_HOLDS
		    " THEN ?5 END, coalesce(c_variables, '{}'), coalesce(c_mail_list, '[]'),"
		    " coalesce(c_status_list, '[]'), coalesce(c_task_mail_list, '[]'),"
		    " coalesce(c_task_status_list, '[]'), 2, CASE WHEN " GROUP_HOLDS
		    " THEN 1 ELSE 0 END,"
		    " (SELECT"
		    " coalesce(max(j.release_order), 0) + 1 FROM jobs j WHERE j.group_ident ="
		    " groups.ident), CASE WHEN NOT " GROUP_HOLDS " AND c_ttl IS NOT NULL THEN"
		    " ?3 + c_ttl END FROM groups WHERE ident = ?4",
		    &s);
		if (err != RCS_OK)
			break;
		store_arg_text(s, 1, id);
		store_arg_text(s, 2, entity_ident);
		store_arg_int(s, 3, now);
		store_arg_text(s, 4, groups.v[i]);
		store_arg_text(s, 5, STORE_HELD_RESPONSE);
		store_arg_text(s, 6, STORE_PAUSED_RESPONSE);
		err = store_done(st, s, "continuous job");
		store_stmt_done(st, s);
		s = NULL;
		if (err == RCS_OK)
			err = store_new_job_history(st, id, now);
		if (err == RCS_OK)
			err =
			    store_write(st, "UPDATE groups SET n_open = n_open + 1 WHERE ident = ?",
					NULL, 1, groups.v[i]);
		if (err == RCS_OK)
			err = store_get_one(st, "SELECT held FROM jobs WHERE ident = ?1", id, NULL,
					    NULL, store_held_row, &(*held)[out->n]);
		if (err == RCS_OK)
			out->n++;
	}
out:
	store_stmt_done(st, s);
	store_idents_free(&groups);
	if (err != RCS_OK) {
		store_idents_free(out);
		free(*held);
		*held = NULL;
	}
	return store_sp_end(st, err);
}

void store_group_list_free(struct store_group_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_group_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}
