/*
 * store_jobs.c - the store's jobs, their history and their moves, folded in a batch (the fold:
 * store_fold_begin). See store_jobs.h; store_int.h for what the store's files share.
 *
 * Size: over 800 lines as one domain: a bulk send's creation, the reads and the moves with their
 * fold all write or read the job's row (JOB_COLS, job_read), and the fold is the moves' own state.
 */
#include "store_jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "jsonu.h"
#include "log.h"
#include "store_int.h"
#include "store_groups.h"
#include "store_outbox.h"
#include "store_webhooks.h"

/* ---- jobs ---- */

/* The columns of a job_rec, in the order job_read takes them. */
#define JOB_COLS                                                                                   \
	"j.ident, j.client_root, j.entity_ident, j.task_ident, j.task_version, j.task_name,"       \
	" j.group_ident, g.name, j.comment, j.status, j.created_user, j.created_at, j.update_at,"  \
	" j.scheduled_time, j.response_time, j.ttl, j.response, j.mail_list, j.status_list,"       \
	" j.variables, j.attempt, j.retry_of, j.error_code, j.held, j.expires_at,"                 \
	" j.progress_done, j.progress_total, j.phase, j.reboot_within, j.reboot_deadline"
#define JOB_NCOLS 30 /* the columns of JOB_COLS: what a statement selects after them */
#define JOB_FROM  "jobs j LEFT JOIN groups g ON g.ident = j.group_ident"
/* The columns of a history_rec, in the order history_item_row takes them. */
#define HISTORY_COLS "status, at, response, response_time, phase"

void store_job_rec_free(struct job_rec *r)
{
	free(r->task_name);
	free(r->group_name);
	free(r->comment);
	free(r->created_user);
	free(r->response);
	free(r->mail_list);
	free(r->status_list);
	free(r->variables);
	free(r->error_code);
	free(r->phase);
	r->task_name = r->group_name = r->comment = r->created_user = NULL;
	r->response = r->mail_list = r->status_list = r->variables = r->error_code = NULL;
	r->phase = NULL;
}

static bool job_str_dup(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return src == NULL || *dst != NULL;
}

enum rcs_err store_job_rec_dup(const struct job_rec *src, struct job_rec *out)
{
	bool ok;

	*out = *src;
	ok = job_str_dup(&out->task_name, src->task_name);
	ok = job_str_dup(&out->group_name, src->group_name) && ok;
	ok = job_str_dup(&out->comment, src->comment) && ok;
	ok = job_str_dup(&out->created_user, src->created_user) && ok;
	ok = job_str_dup(&out->response, src->response) && ok;
	ok = job_str_dup(&out->mail_list, src->mail_list) && ok;
	ok = job_str_dup(&out->status_list, src->status_list) && ok;
	ok = job_str_dup(&out->variables, src->variables) && ok;
	ok = job_str_dup(&out->error_code, src->error_code) && ok;
	ok = job_str_dup(&out->phase, src->phase) && ok;
	if (ok)
		return RCS_OK;
	store_job_rec_free(out);
	memset(out, 0, sizeof(*out));
	return RCS_ERR_NOMEM;
}

/* The row of JOB_COLS into *r (zeroed first; on an error what was read is freed). */
static enum rcs_err job_read(struct store_stmt *s, struct job_rec *r)
{
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	store_val_copy(s, 0, r->ident, sizeof(r->ident));
	store_val_copy(s, 1, r->client_root, sizeof(r->client_root));
	store_val_copy(s, 2, r->entity_ident, sizeof(r->entity_ident));
	store_val_copy(s, 3, r->task_ident, sizeof(r->task_ident));
	r->task_version = store_val_int(s, 4);
	r->task_name = store_val_dup(s, 5, &err);
	store_val_copy(s, 6, r->group_ident, sizeof(r->group_ident));
	if (r->group_ident[0] != '\0')
		r->group_name = store_val_dup(s, 7, &err);
	r->comment = store_val_dup(s, 8, &err);
	if (!status_parse(store_val_text(s, 9), &r->status))
		r->status = JS_INITIAL;
	r->created_user = store_val_dup(s, 10, &err);
	r->created_at = store_val_int(s, 11);
	r->update_at = store_val_int(s, 12);
	r->scheduled_time = store_val_int(s, 13); /* NULL reads 0 */
	r->response_time = store_val_int(s, 14);
	r->ttl = store_val_int(s, 15);
	r->response = store_val_dup(s, 16, &err);
	r->mail_list = store_val_dup(s, 17, &err);
	r->status_list = store_val_dup(s, 18, &err);
	r->variables = store_val_dup(s, 19, &err);
	r->attempt = store_val_int(s, 20);
	store_val_copy(s, 21, r->retry_of, sizeof(r->retry_of));
	r->error_code = store_val_dup(s, 22, &err);
	r->held = store_val_bool(s, 23);
	r->expires_at = store_val_int(s, 24);
	r->has_progress = !store_val_null(s, 25) && !store_val_null(s, 26);
	r->progress_done = store_val_int(s, 25);
	r->progress_total = store_val_int(s, 26);
	r->phase = store_val_dup(s, 27, &err);
	r->reboot_within = store_val_int(s, 28);   /* NULL reads 0 */
	r->reboot_deadline = store_val_int(s, 29); /* NULL: no deadline */
	if (err != RCS_OK)
		store_job_rec_free(r);
	return err;
}

static enum rcs_err job_read_one(struct store_stmt *s, void *arg)
{
	return job_read(s, arg);
}

enum rcs_err store_job_get(struct store *st, const char *client_root, const char *ident,
			   struct job_rec *out)
{
	memset(out, 0, sizeof(*out));
	if (client_root == NULL)
		return store_get_one(st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ?1",
				     ident, NULL, NULL, job_read_one, out);
	return store_get_one(
	    st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ?1 AND j.client_root = ?2",
	    ident, client_root, NULL, job_read_one, out);
}

enum rcs_err store_job_rec_get(struct store *st, const char *ident, struct job_rec *out)
{
	return store_job_get(st, NULL, ident, out);
}

/* What a history item keeps besides its job, number and status. */
struct history_add {
	int64_t at;
	const char *response;
	long long response_time, seq;
	const char *phase;
};

static enum rcs_err store_history_add(struct store *st, const char *job, long long n,
				      const char *status, const struct history_add *h)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st,
			 "INSERT INTO job_history(job_ident, n, status, at, response,"
			 " response_time, seq, phase) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, job);
	store_arg_int(s, 2, n);
	store_arg_text(s, 3, status);
	store_arg_int(s, 4, h->at);
	store_arg_text(s, 5, h->response);
	store_arg_opt_int(s, 6, h->response_time);
	store_arg_int(s, 7, h->seq);
	store_arg_text(s, 8, h->phase);
	err = store_done(st, s, "history add");
out:
	store_stmt_done(st, s);
	return err;
}

/* What every job of a batch is stored with, its JSON text defaulted. */
struct job_batch_text {
	const char *vars, *mails, *stats, *tmails, *tstats;
	long long expires_at;
};

/* A new group (a bulk send's) with its settings, what a continuous send's later jobs are
 * made of, and its jobs as its open tallies (docs/api.md "Rollouts"). A group that got no
 * job and stays open for no device is completed at once, with the batch's empty_reason. */
static enum rcs_err jobs_group_insert(struct store *st, const struct job_batch *b,
				      const struct job_batch_text *t)
{
	static const struct group_settings none;
	const struct group_settings *g = b->settings ? b->settings : &none;
	struct timespec ts;
	struct store_stmt *s = NULL;
	enum rcs_err err;

	clock_gettime(CLOCK_REALTIME, &ts);
	err = store_stmt(
	    st,
	    "INSERT INTO groups(ident, client_root, name, task_ident, created_user, created_at,"
	    " status, task_version, task_name, tag, continuous, ro_max, ro_base, ro_factor,"
	    " ro_after, ab_pct, ab_min, win_days, win_start, win_dur, win_off, rt_max,"
	    " rt_backoff, rt_factor, n_open, tokens, tokens_at, c_variables, c_comment, c_ttl,"
	    " c_mail_list, c_status_list, c_task_mail_list, c_task_status_list, reason, dl_max,"
	    " dl_rate)"
	    " VALUES(?1, ?2, ?3, ?4, ?5, ?6,"
	    " CASE WHEN ?25 = 0 AND ?11 = 0 THEN 'completed' ELSE 'running' END, ?7, ?8, ?9,"
	    " ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, 1000,"
	    " ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33,"
	    " CASE WHEN ?25 = 0 AND ?11 = 0 THEN CAST(?34 AS TEXT) END, ?35, ?36)",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, b->group_ident);
	store_arg_text(s, 2, b->client_root);
	store_arg_text(s, 3, b->group_name);
	store_arg_text(s, 4, b->task_ident);
	store_arg_text(s, 5, b->created_user);
	store_arg_int(s, 6, b->now);
	store_arg_int(s, 7, b->task_version);
	store_arg_text(s, 8, b->task_name);
	store_arg_text(s, 9, b->tag);
	store_arg_int(s, 11, g->continuous);
	store_arg_opt_int(s, 12, g->max_per_minute);
	store_arg_opt_int(s, 13, g->base_per_minute);
	store_arg_opt_int(s, 14, g->base_per_minute ? g->factor_milli : 0);
	store_arg_opt_int(s, 15, g->base_per_minute ? g->after_succeeded : 0);
	if (g->has_abort) {
		store_arg_int(s, 16, g->failure_pct);
		store_arg_int(s, 17, g->min_finished);
	} else {
		store_arg_null(s, 16);
		store_arg_null(s, 17);
	}
	if (g->has_window) {
		store_arg_int(s, 18, g->days);
		store_arg_int(s, 19, g->start_min);
		store_arg_int(s, 20, g->duration_min);
		store_arg_int(s, 21, g->utc_offset_min);
	} else {
		for (int i = 18; i <= 21; i++)
			store_arg_null(s, i);
	}
	if (g->has_retry) {
		store_arg_int(s, 22, g->max_attempts);
		store_arg_int(s, 23, g->backoff_s);
		store_arg_int(s, 24, g->backoff_milli);
	} else {
		for (int i = 22; i <= 24; i++)
			store_arg_null(s, i);
	}
	store_arg_int(s, 25, (long long)b->n);
	store_arg_int(s, 26, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	store_arg_text(s, 27, t->vars);
	store_arg_text(s, 28, b->comment);
	store_arg_opt_int(s, 29, b->ttl);
	store_arg_text(s, 30, t->mails);
	store_arg_text(s, 31, t->stats);
	store_arg_text(s, 32, t->tmails);
	store_arg_text(s, 33, t->tstats);
	store_arg_text(s, 34, b->empty_reason);
	store_arg_opt_int(s, 35, g->dl_max_concurrent);
	store_arg_opt_int(s, 36, g->dl_max_bytes_per_s);
	err = store_done(st, s, "group insert");
out:
	store_stmt_done(st, s);
	return err;
}

/*
 * A batch's jobs are inserted JOBS_CHUNK at a time, one statement for their rows and one
 * for their initial and pending history: the values all jobs share are parameters ?1-?16
 * (?1 alone for the history), bound once per statement, and each job's ident and device
 * follow. At 10,000 jobs a statement per job was most of the time of the send.
 */
#define JOBS_CHUNK   64
#define JOBS_SQL_MAX (JOBS_CHUNK * 160 + 512)
#define JOBS_INSERT_ROW                                                                            \
	"(?%d, ?1, ?2, ?3, ?4, ?5, ?%d, 'pending', ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"   \
	" ?15, ?16, 2, ?17, ?18, ?%d)"
#define JOBS_ARG0 19 /* the first job's parameter; JOBS_ARGS per job */
#define JOBS_ARGS 3

/* The two statements' text for k jobs (1..JOBS_CHUNK). */
static void jobs_insert_sql(size_t k, char *rows, char *hist)
{
	size_t n, h;

	n = (size_t)snprintf(
	    rows, JOBS_SQL_MAX, "%s",
	    "INSERT INTO jobs(ident, client_root, task_ident, task_version,"
	    " task_name, group_ident, entity_ident, status, comment, created_user,"
	    " created_at, update_at, scheduled_time, ttl, variables, mail_list,"
	    " status_list, task_mail_list, task_status_list, expires_at, n_history,"
	    " held, response, release_order) VALUES ");
	h = (size_t)snprintf(hist, JOBS_SQL_MAX, "%s",
			     "INSERT INTO job_history(job_ident, n, status, at, response) VALUES ");
	for (size_t i = 0; i < k; i++) {
		int id = JOBS_ARG0 + JOBS_ARGS * (int)i;

		n += (size_t)snprintf(rows + n, JOBS_SQL_MAX - n, "%s" JOBS_INSERT_ROW,
				      i ? ", " : "", id, id + 1, id + 2);
		h +=
		    (size_t)snprintf(hist + h, JOBS_SQL_MAX - h,
				     "%s(?%d, 1, 'initial', ?1, NULL), (?%d, 2, 'pending', ?1, ?2)",
				     i ? ", " : "", 3 + (int)i, 3 + (int)i);
	}
}

/* The values all jobs of a batch share: parameters ?1-?18 of a statement of their rows. */
static void jobs_args_common(struct store_stmt *s, const struct job_batch *b,
			     const struct job_batch_text *t)
{
	store_arg_text(s, 1, b->client_root);
	store_arg_text(s, 2, b->task_ident);
	store_arg_int(s, 3, b->task_version);
	store_arg_text(s, 4, b->task_name);
	store_arg_text(s, 5, b->group_ident);
	store_arg_text(s, 6, b->comment);
	store_arg_text(s, 7, b->created_user);
	store_arg_int(s, 8, b->now);
	store_arg_opt_int(s, 9, b->scheduled_time);
	store_arg_opt_int(s, 10, b->ttl);
	store_arg_text(s, 11, t->vars);
	store_arg_text(s, 12, t->mails);
	store_arg_text(s, 13, t->stats);
	store_arg_text(s, 14, t->tmails);
	store_arg_text(s, 15, t->tstats);
	/* a held job's ttl runs from its release (docs/api.md "Rollouts") */
	store_arg_opt_int(s, 16, b->hold ? 0 : t->expires_at);
	store_arg_int(s, 17, b->hold);
	store_arg_text(s, 18, b->hold ? STORE_HELD_RESPONSE : NULL);
}

/* Up to JOBS_CHUNK jobs of the batch, from jobs[0]: their rows, or (history) their initial
 * and pending history. The statements of a full chunk and of one job (every single job
 * created: preparing its two statements anew was a tenth of a POST's instructions) are
 * constant text (built once, under the store's lock), prepared once. */
static enum rcs_err jobs_insert(struct store *st, const struct job_batch *b,
				const struct job_batch_text *t, const struct job_new *jobs,
				size_t k, bool history)
{
	static char full_rows[JOBS_SQL_MAX], full_hist[JOBS_SQL_MAX];
	static char one_rows[JOBS_SQL_MAX], one_hist[JOBS_SQL_MAX];
	static bool full_built, one_built;
	char rows[JOBS_SQL_MAX], hist[JOBS_SQL_MAX];
	const char *rows_sql = rows, *hist_sql = hist;
	bool kept = k == JOBS_CHUNK || k == 1;
	struct store_stmt *s = NULL;
	enum rcs_err err;

	if (k == JOBS_CHUNK) {
		if (!full_built)
			jobs_insert_sql(JOBS_CHUNK, full_rows, full_hist);
		full_built = true;
		rows_sql = full_rows;
		hist_sql = full_hist;
	} else if (k == 1) {
		if (!one_built)
			jobs_insert_sql(1, one_rows, one_hist);
		one_built = true;
		rows_sql = one_rows;
		hist_sql = one_hist;
	} else {
		jobs_insert_sql(k, rows, hist);
	}
	if (history)
		goto history;
	err = kept ? store_stmt(st, rows_sql, &s) : store_stmt_fresh(st, rows_sql, &s);
	if (err != RCS_OK)
		goto out;
	jobs_args_common(s, b, t);
	for (size_t i = 0; i < k; i++) {
		int id = JOBS_ARG0 + JOBS_ARGS * (int)i;

		store_arg_text(s, id, jobs[i].ident);
		store_arg_text(s, id + 1, jobs[i].entity_ident);
		store_arg_int(s, id + 2, jobs[i].order);
	}
	err = store_done(st, s, "job insert");
	goto out;
history:
	err = kept ? store_stmt(st, hist_sql, &s) : store_stmt_fresh(st, hist_sql, &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, b->now);
	store_arg_text(s, 2, b->hold ? STORE_HELD_RESPONSE : NULL);
	for (size_t i = 0; i < k; i++)
		store_arg_text(s, 3 + (int)i, jobs[i].ident);
	err = store_done(st, s, "job history insert");
out:
	store_stmt_done(st, s);
	return err;
}

/*
 * PostgreSQL: a batch's jobs STORE_JOBS_SET_CHUNK at a time, one statement for their rows and
 * one for their initial and pending history, each job's ident, device and place given as
 * arrays: ten statements for 10,000 jobs instead of 314 of 64 rows of VALUES (what the rows
 * cost, their indexes and foreign-key checks, stays: docs/coordinator.md "A bulk send's jobs
 * as sets").
 */
#define JOBS_SET_ROWS                                                                              \
	"INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name, group_ident,"   \
	" entity_ident, status, comment, created_user, created_at, update_at, scheduled_time, "    \
	"ttl,"                                                                                     \
	" variables, mail_list, status_list, task_mail_list, task_status_list, expires_at,"        \
	" n_history, held, response, release_order) SELECT x.ident, ?1, ?2, ?3, ?4, ?5, x.entity," \
	" 'pending', ?6, ?7, ?8, ?8, CAST(?9 AS BIGINT), CAST(?10 AS BIGINT), ?11, ?12, ?13, ?14," \
	" ?15, CAST(?16 AS BIGINT), 2, ?17, CAST(?18 AS TEXT), x.ord FROM unnest(CAST(?19 AS"      \
	" TEXT[]), CAST(?20 AS TEXT[]), CAST(?21 AS BIGINT[])) AS x(ident, entity, ord)"
#define JOBS_SET_HISTORY                                                                           \
	"INSERT INTO job_history(job_ident, n, status, at, response) SELECT x.ident, v.n,"         \
	" v.status, ?1, CASE WHEN v.n = 2 THEN CAST(?2 AS TEXT) END FROM unnest(CAST(?3 AS"        \
	" TEXT[])) WITH ORDINALITY AS x(ident, k) CROSS JOIN (VALUES (1, 'initial'), (2,"          \
	" 'pending')) AS v(n, status) ORDER BY x.k, v.n"

/* The text of a PostgreSQL array of k strings (field 0: the jobs' idents, 1: their devices)
 * or of their places (2), malloc'd; NULL when out of memory. */
static char *jobs_set_array(const struct job_new *jobs, size_t k, int field)
{
	size_t size = 3, n = 0;
	char *a;

	for (size_t i = 0; i < k; i++)
		size +=
		    field == 2 ? 22 : 2 * strlen(field ? jobs[i].entity_ident : jobs[i].ident) + 3;
	a = malloc(size);
	if (a == NULL)
		return NULL;
	a[n++] = '{';
	for (size_t i = 0; i < k; i++) {
		const char *v = field ? jobs[i].entity_ident : jobs[i].ident;

		if (i > 0)
			a[n++] = ',';
		if (field == 2) {
			n += (size_t)snprintf(a + n, size - n, "%lld", jobs[i].order);
			continue;
		}
		a[n++] = '"';
		for (; *v; v++) {
			if (*v == '"' || *v == '\\')
				a[n++] = '\\';
			a[n++] = *v;
		}
		a[n++] = '"';
	}
	a[n++] = '}';
	a[n] = '\0';
	return a;
}

/* jobs_insert on PostgreSQL: up to STORE_JOBS_SET_CHUNK jobs in one statement. */
static enum rcs_err jobs_insert_set(struct store *st, const struct job_batch *b,
				    const struct job_batch_text *t, const struct job_new *jobs,
				    size_t k, bool history)
{
	char *idents = jobs_set_array(jobs, k, 0), *devices = NULL, *places = NULL;
	struct store_stmt *s = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	if (idents == NULL)
		goto out;
	if (history) {
		err = store_stmt(st, JOBS_SET_HISTORY, &s);
		if (err != RCS_OK)
			goto out;
		store_arg_int(s, 1, b->now);
		store_arg_text(s, 2, b->hold ? STORE_HELD_RESPONSE : NULL);
		store_arg_text(s, 3, idents);
		err = store_done(st, s, "job history insert");
		goto out;
	}
	devices = jobs_set_array(jobs, k, 1);
	places = jobs_set_array(jobs, k, 2);
	if (devices == NULL || places == NULL)
		goto out;
	err = store_stmt(st, JOBS_SET_ROWS, &s);
	if (err != RCS_OK)
		goto out;
	jobs_args_common(s, b, t);
	store_arg_text(s, 19, idents);
	store_arg_text(s, 20, devices);
	store_arg_text(s, 21, places);
	err = store_done(st, s, "job insert");
out:
	store_stmt_done(st, s);
	free(idents);
	free(devices);
	free(places);
	return err;
}

/* The devices the send left out, with its new group. */
static enum rcs_err jobs_group_rejected_insert(struct store *st, const struct job_batch *b)
{
	struct store_stmt *s = NULL;
	enum rcs_err err = RCS_OK;

	for (size_t i = 0; i < b->n_rejected && err == RCS_OK; i++) {
		const struct job_rejected *r = &b->rejected[i];

		err = store_stmt(
		    st,
		    "INSERT INTO group_rejected(group_ident, entity_ident, code, message)"
		    " VALUES(?1, ?2, ?3, ?4)",
		    &s);
		if (err != RCS_OK)
			break;
		store_arg_text(s, 1, b->group_ident);
		store_arg_text(s, 2, r->entity_ident);
		store_arg_text(s, 3, r->code);
		store_arg_text(s, 4, r->message);
		err = store_done(st, s, "group rejected insert");
		store_stmt_done(st, s);
		s = NULL;
	}
	return err;
}

static enum rcs_err jobs_reltuples_row(struct store_stmt *s, void *arg)
{
	*(long long *)arg = store_val_int(s, 0);
	return RCS_OK;
}

/*
 * PostgreSQL plans a statement it runs often once for all parameters (a generic plan),
 * from the table's statistics as they were then; a jobs table analysed while nearly empty
 * is read sequentially by those plans (the history's foreign-key check, the moves' look-ups)
 * long after it has grown, until autovacuum analyses it again, up to a minute later. A
 * batch that adds a tenth or more of the rows jobs had at its last analysis analyses it in
 * its own transaction (which counts the rows it inserted): every plan of jobs is made
 * again, here at once and on every other connection once the batch commits. See
 * docs/coordinator.md "PostgreSQL".
 */
static enum rcs_err jobs_analyze(struct store *st, size_t n)
{
	long long known = -1;
	enum rcs_err err = RCS_OK;

	if (st->dialect != STORE_DIALECT_POSTGRES || n < STORE_ANALYZE_MIN)
		goto out;
	err = store_get_one(st,
			    "SELECT CAST(reltuples AS BIGINT) FROM pg_class"
			    " WHERE oid = CAST(?1 AS regclass)",
			    "jobs", NULL, NULL, jobs_reltuples_row, &known);
	if (err != RCS_OK)
		goto out;
	if (known >= 0 && (long long)n * 10 < known)
		goto out;
	/* by a role that does not own jobs: a warning from the server, no error */
	err = store_write(st, "ANALYZE jobs", NULL, 0);
out:
	return err;
}

enum rcs_err store_jobs_create(struct store *st, const struct job_batch *b)
{
	struct job_batch_text t = {
	    .vars = b->variables ? b->variables : "{}",
	    .mails = b->mail_list ? b->mail_list : "[]",
	    .stats = b->status_list ? b->status_list : "[]",
	    .tmails = b->task_mail_list ? b->task_mail_list : "[]",
	    .tstats = b->task_status_list ? b->task_status_list : "[]",
	    .expires_at = store_job_expiry(b->now, b->scheduled_time, b->ttl),
	};
	bool notify = (strcmp(t.mails, "[]") != 0 && strcmp(t.stats, "[]") != 0) ||
		      (strcmp(t.tmails, "[]") != 0 && strcmp(t.tstats, "[]") != 0);
	/* PostgreSQL: the rows as sets; SQLite: its statements are calls into the library */
	bool sets = st->dialect == STORE_DIALECT_POSTGRES && b->n > 1;
	size_t chunk = sets ? STORE_JOBS_SET_CHUNK : JOBS_CHUNK;
	bool hooks = false;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	if (b->group_ident) {
		err = jobs_group_insert(st, b, &t);
		if (err == RCS_OK)
			err = jobs_group_rejected_insert(st, b);
		if (err != RCS_OK)
			goto out;
	}
	/* every row first, then their history: on SQLite the history's foreign key is checked
	 * against the rows; on PostgreSQL jobs is analysed once they are in (jobs_analyze), so
	 * that the statements that read it next are planned for its new size */
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			err = jobs_analyze(st, b->n);
			if (err != RCS_OK)
				goto out;
		}
		for (size_t i = 0; i < b->n; i += chunk) {
			size_t k = b->n - i < chunk ? b->n - i : chunk;

			err = sets ? jobs_insert_set(st, b, &t, b->jobs + i, k, pass == 1)
				   : jobs_insert(st, b, &t, b->jobs + i, k, pass == 1);
			if (err != RCS_OK)
				goto out;
		}
	}
	for (size_t i = 0; notify && i < b->n; i++) {
		err = store_notifications_record(st, b->jobs[i].ident, "initial", b->now);
		if (err == RCS_OK)
			err = store_notifications_record(st, b->jobs[i].ident, "pending", b->now);
		if (err != RCS_OK)
			goto out;
	}
	/* a job.status delivery for each of the two history items (docs/api.md, "Webhooks") */
	err = store_webhooks_want_jobs(st, b->client_root, &hooks);
	for (size_t i = 0; err == RCS_OK && hooks && i < b->n; i++) {
		err = store_webhook_job_event(st, b->client_root, b->jobs[i].ident, 1, "initial",
					      b->now);
		if (err == RCS_OK)
			err = store_webhook_job_event(st, b->client_root, b->jobs[i].ident, 2,
						      "pending", b->now);
	}
out:
	return store_sp_end(st, err);
}

static bool str_same(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Whether two jobs' records differ in nothing but their idents and devices. */
static bool job_same_but_idents(const struct job_rec *a, const struct job_rec *b)
{
	return strcmp(a->client_root, b->client_root) == 0 &&
	       strcmp(a->task_ident, b->task_ident) == 0 && a->task_version == b->task_version &&
	       str_same(a->task_name, b->task_name) &&
	       strcmp(a->group_ident, b->group_ident) == 0 &&
	       str_same(a->group_name, b->group_name) && str_same(a->comment, b->comment) &&
	       a->status == b->status && str_same(a->created_user, b->created_user) &&
	       a->created_at == b->created_at && a->update_at == b->update_at &&
	       a->scheduled_time == b->scheduled_time && a->response_time == b->response_time &&
	       a->ttl == b->ttl && str_same(a->response, b->response) &&
	       str_same(a->mail_list, b->mail_list) && str_same(a->status_list, b->status_list) &&
	       str_same(a->variables, b->variables) && a->attempt == b->attempt &&
	       strcmp(a->retry_of, b->retry_of) == 0 && str_same(a->error_code, b->error_code) &&
	       a->held == b->held && a->expires_at == b->expires_at;
}

/*
 * The jobs of a batch share every value but their ident and device, so the first job's
 * record, read once, is every job's with those two set: at 10,000 jobs a read per job was
 * a good part of the request. The last job is read as well and must be the same but for
 * its idents; if anything differs, every job is read.
 */
enum rcs_err store_jobs_batch_each(struct store *st, const struct job_batch *b, store_batch_fn fn,
				   void *arg)
{
	struct job_rec tpl, last;
	bool same = true;
	enum rcs_err err = RCS_OK;

	memset(&tpl, 0, sizeof(tpl));
	memset(&last, 0, sizeof(last));
	if (b->n == 0)
		goto out;
	store_lock(st);
	err = store_job_get(st, NULL, b->jobs[0].ident, &tpl);
	if (err == RCS_OK && b->n > 1)
		err = store_job_get(st, NULL, b->jobs[b->n - 1].ident, &last);
	if (err == RCS_OK && b->n > 1)
		same = job_same_but_idents(&tpl, &last) &&
		       strcmp(last.entity_ident, b->jobs[b->n - 1].entity_ident) == 0 &&
		       strcmp(tpl.entity_ident, b->jobs[0].entity_ident) == 0;
	if (err == RCS_OK && !same)
		log_warnx("the records of a bulk send differ in more than their idents");
	for (size_t i = 0; err == RCS_OK && same && i < b->n; i++) {
		snprintf(tpl.ident, sizeof(tpl.ident), "%s", b->jobs[i].ident);
		snprintf(tpl.entity_ident, sizeof(tpl.entity_ident), "%s", b->jobs[i].entity_ident);
		err = fn(arg, &tpl, i > 0);
	}
	for (size_t i = 0; err == RCS_OK && !same && i < b->n; i++) {
		struct job_rec one;

		err = store_job_get(st, NULL, b->jobs[i].ident, &one);
		if (err == RCS_OK)
			err = fn(arg, &one, false);
		store_job_rec_free(&one);
	}
	store_unlock(st);
out:
	store_job_rec_free(&tpl);
	store_job_rec_free(&last);
	return err;
}

static enum rcs_err history_item_row(struct store_stmt *s, void *arg);

void store_history_list_free(struct store_history_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++) {
		free(l->items[i].response);
		free(l->items[i].phase);
	}
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

enum rcs_err store_job_history(struct store *st, const char *client_root, const char *ident,
			       const struct store_page *pg, struct job_rec *job,
			       struct store_history_list *out)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	memset(job, 0, sizeof(*job));
	out->pg.page = pg->page;
	out->pg.per_page = pg->per_page;
	store_lock(st);
	err = store_job_get(st, client_root, ident, job);
	if (err != RCS_OK)
		goto out;
	err = store_stmt(st, "SELECT count(*) FROM job_history WHERE job_ident = ?1", &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	err = store_next(st, s, "history count", &row);
	if (err != RCS_OK)
		goto out;
	out->pg.total = row ? store_val_int(s, 0) : 0;
	store_stmt_done(st, s);
	s = NULL;
	out->items = calloc((size_t)pg->per_page, sizeof(*out->items));
	if (out->items == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	/* newest first unless sort=update_at (oldest first); n is the order of the changes */
	err = store_stmt(st,
			 pg->desc ? "SELECT " HISTORY_COLS " FROM job_history"
				    " WHERE job_ident = ?1 ORDER BY n DESC LIMIT ?2 OFFSET ?3"
				  : "SELECT " HISTORY_COLS " FROM job_history"
				    " WHERE job_ident = ?1 ORDER BY n ASC LIMIT ?2 OFFSET ?3",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	store_arg_int(s, 2, pg->per_page);
	store_arg_int(s, 3, (pg->page - 1) * pg->per_page);
	while ((err = store_next(st, s, "history", &row)) == RCS_OK && row &&
	       out->n < (size_t)pg->per_page) {
		err = history_item_row(s, &out->items[out->n++]);
		if (err != RCS_OK)
			break;
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK) {
		store_history_list_free(out);
		store_job_rec_free(job);
	}
	return err;
}

void store_job_list_free(struct store_job_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_job_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* On PostgreSQL the stage of a status filter (migration 15), for the index on (client_root,
 * stage, ident); NULL on SQLite or for no status. */
static const char *jobs_list_stage(const struct store *st, const char *status)
{
	enum job_status js;

	if (st->dialect != STORE_DIALECT_POSTGRES || status == NULL)
		return NULL;
	if (strcmp(status, "running") == 0)
		return "j.stage = 1";
	if (!status_parse(status, &js))
		return NULL;
	if (js == JS_INITIAL || js == JS_PENDING)
		return "j.stage = 0";
	return status_is_terminal(js) ? "j.stage = 2" : "j.stage = 1";
}

enum rcs_err store_jobs_list(struct store *st, const char *client_root, const struct job_filter *f,
			     const struct store_page *pg, struct store_job_list *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "j.client_root = ?", client_root);
	if (f->group_ident)
		store_qb_add(&q, "j.group_ident = ?", f->group_ident);
	if (f->task_ident)
		store_qb_add(&q, "j.task_ident = ?", f->task_ident);
	if (f->entity_ident)
		store_qb_add(&q, "j.entity_ident = ?", f->entity_ident);
	if (f->status && strcmp(f->status, "running") == 0)
		store_qb_add(&q, "j.status IN ('edge_started', 'edge_running')", NULL);
	else if (f->status)
		/* not "j.status = ?": SQLite compares a bare parameter with the partial indexes'
		 * status conditions and then prepares the statement again for every new value
		 * (some 200,000 instructions per request under callgrind); a cast leaves the
		 * comparison to the index on (client_root, status, ident) */
		store_qb_add(&q, "j.status = CAST(? AS TEXT)", f->status);
	if (jobs_list_stage(st, f->status))
		store_qb_add(&q, jobs_list_stage(st, f->status), NULL);
	/* the jobs of a task the user may not see (not public, someone else's) are left out */
	if (f->only_visible_to)
		store_qb_add(
		    &q,
		    "j.task_ident NOT IN (SELECT t.ident FROM tasks t WHERE t.client_root ="
		    " j.client_root AND " STORE_TASK_HIDDEN("t", "?") ")",
		    f->only_visible_to);
	store_qb_list_opts(&q, pg, "j.", "ident", &o);
	err = store_page_recs(st, JOB_COLS, JOB_FROM, &q, o.order, pg, &out->pg,
			      sizeof(*out->items), job_read_one, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_job_list_free(out);
	return err;
}

static enum rcs_err job_visible_row(struct store_stmt *s, void *arg)
{
	(void)arg;
	return store_val_bool(s, 0) ? RCS_OK : RCS_ERR_NOTFOUND;
}

enum rcs_err store_job_visible(struct store *st, const char *client_root, const char *ident,
			       const char *user)
{
	return store_get_one(
	    st,
	    "SELECT t.ident IS NULL OR NOT " STORE_TASK_HIDDEN(
		"t", "?3") " FROM jobs j LEFT JOIN tasks t ON t.ident = j.task_ident"
			   " WHERE j.ident = ?1 AND j.client_root = ?2",
	    ident, client_root, user, job_visible_row, NULL);
}

/* What a move reads of the job before it moves it: its record, and what the move's rules
 * need besides. */
struct job_move_row {
	struct job_rec rec;
	long long last_seq, n_history;
	bool notify;        /* any notification list at all */
	int64_t started_at; /* when it first came to edge_started (0: never), -1: not read */
};

#define JOB_MOVE_READ                                                                              \
	"SELECT " JOB_COLS ", j.last_seq, j.n_history,"                                            \
	" (j.mail_list != '[]' AND j.status_list != '[]') OR"                                      \
	" (j.task_mail_list != '[]' AND j.task_status_list != '[]')"                               \
	" FROM " JOB_FROM " WHERE j.ident = ?1"

static enum rcs_err job_move_read(struct store *st, const char *ident, struct job_move_row *r)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	/* on PostgreSQL the job's row stays locked until the move's transaction ends: two
	 * coordinators applying the same report (or a report and a cancel) at once apply it
	 * once, the second reads what the first wrote (docs/architecture.md "Claims") */
	err = store_stmt(st, STORE_SQL(st, JOB_MOVE_READ, JOB_MOVE_READ " FOR UPDATE OF j"), &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, ident);
	err = store_next(st, s, "job move", &row);
	if (err == RCS_OK && !row)
		err = RCS_ERR_NOTFOUND;
	if (err != RCS_OK)
		goto out;
	err = job_read(s, &r->rec);
	if (err != RCS_OK)
		goto out;
	r->last_seq = store_val_int(s, JOB_NCOLS);
	r->n_history = store_val_int(s, JOB_NCOLS + 1);
	r->notify = store_val_bool(s, JOB_NCOLS + 2);
	r->started_at = -1;
out:
	store_stmt_done(st, s);
	return err;
}

/* The phase and reboot deadline a move leaves the job with (docs/api.md "Jobs"): a device's
 * report sets the phase it carries, and the deadline when it is an edge_running one with
 * within, clears it otherwise; the coordinator's moves keep the phase, and end the deadline
 * with the job. phase: the report's phase copied (the record's from then on). */
static void job_rec_phase(struct job_rec *r, const struct job_move *m, char *phase)
{
	if (m->seq > 0) {
		free(r->phase);
		r->phase = phase;
	}
	if (m->seq > 0 && m->to == JS_EDGE_RUNNING && m->phase != NULL && m->within > 0) {
		r->reboot_within = m->within;
		r->reboot_deadline = m->now + m->within;
	} else if (m->seq > 0 || status_is_terminal(m->to)) {
		r->reboot_within = 0;
		r->reboot_deadline = 0;
	}
}

/* What job_move_apply's UPDATE does to the job, done to its record r as well (first: the
 * UPDATE writes the phase and deadline from it). */
static enum rcs_err job_rec_moved(struct job_rec *r, const struct job_move *m)
{
	char *response = NULL, *code = NULL, *phase = NULL;

	if ((m->response != NULL && (response = strdup(m->response)) == NULL) ||
	    (m->to == JS_EDGE_ERROR && m->error_code != NULL &&
	     (code = strdup(m->error_code)) == NULL) ||
	    (m->seq > 0 && m->phase != NULL && (phase = strdup(m->phase)) == NULL)) {
		free(response);
		free(code);
		return RCS_ERR_NOMEM;
	}
	job_rec_phase(r, m, phase);
	if (m->response != NULL || m->replace_response) {
		free(r->response);
		r->response = response;
	}
	if (m->to == JS_EDGE_ERROR) {
		free(r->error_code);
		r->error_code = code;
	}
	if (m->set_response_time)
		r->response_time = m->now;
	r->status = m->to;
	r->update_at = m->now;
	r->held = false;
	if (m->has_progress && m->to == JS_EDGE_RUNNING) {
		r->has_progress = true;
		r->progress_done = m->progress_done;
		r->progress_total = m->progress_total;
	}
	return RCS_OK;
}

/* The status change itself and its history item, which keeps the response the job has
 * from then on; j->rec becomes the record after the move. */
static enum rcs_err job_move_apply(struct store *st, const struct job_move *m,
				   struct job_move_row *j)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	/* a job that leaves pending no longer waits for its group's release */
	err = job_rec_moved(&j->rec, m);
	if (err != RCS_OK)
		goto out;
	err =
	    store_stmt(st,
		       "UPDATE jobs SET status = ?1, update_at = ?2, held = 0,"
		       " response = CASE WHEN ?3 IS NULL AND ?7 = 0 THEN response ELSE ?3 END,"
		       " response_time = CASE WHEN ?4 <> 0 THEN ?2 ELSE response_time END,"
		       " last_seq = max(last_seq, ?5), n_history = n_history + 1,"
		       " sent_at = CASE WHEN ?8 <> 0 THEN ?2 ELSE sent_at END, sends = sends + ?8,"
		       " error_code = CASE WHEN ?1 = 'edge_error' THEN ?9 ELSE error_code END,"
		       " progress_done = CASE WHEN ?10 <> 0 THEN ?11 ELSE progress_done END,"
		       " progress_total = CASE WHEN ?10 <> 0 THEN ?12 ELSE progress_total END,"
		       " phase = ?13, reboot_within = ?14, reboot_deadline = ?15"
		       " WHERE ident = ?6",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, status_name(m->to));
	store_arg_int(s, 2, m->now);
	store_arg_text(s, 3, m->response);
	store_arg_int(s, 4, m->set_response_time);
	store_arg_int(s, 5, m->seq);
	store_arg_text(s, 6, m->ident);
	store_arg_int(s, 7, m->replace_response);
	store_arg_int(s, 8, m->mark_sent);
	store_arg_text(s, 9, m->error_code);
	store_arg_int(s, 10, m->has_progress && m->to == JS_EDGE_RUNNING);
	store_arg_int(s, 11, m->progress_done);
	store_arg_int(s, 12, m->progress_total);
	store_arg_text(s, 13, j->rec.phase);
	store_arg_opt_int(s, 14, j->rec.reboot_within);
	store_arg_opt_int(s, 15, j->rec.reboot_deadline);
	err = store_done(st, s, "job move");
	if (err == RCS_OK) {
		struct history_add h = {m->now, j->rec.response, j->rec.response_time, m->seq,
					j->rec.phase};

		err = store_history_add(st, m->ident, j->n_history + 1, status_name(m->to), &h);
	}
out:
	store_stmt_done(st, s);
	return err;
}

/* ---- folds: a job's moves of a batch written to its row once (store_jobs.h) ---- */

#define FOLD_ROWS  1024 /* jobs a fold keeps; a full one is written out and begins again */
#define FOLD_SLOTS 2048 /* the ident hash's slots: a power of two above FOLD_ROWS */

/* The idents' table is the fold's own rather than json-c's lh_table: a fold is emptied after
 * every batch, which here is clearing 4 KB of slots, where lh_table can only delete entry by
 * entry and leaves a tombstone each (a lookup that misses then walks the whole table) or be
 * made again. */

struct fold_row {
	struct job_move_row j;
	bool dirty; /* moved since its row was last written */
	/* sets: recorded as sent by a move since (sends of them, the last one's time), written
	 * with the row */
	long long sends;
	int64_t sent_at;
	/* claimed by this node with the row until then (store_fold_claim_sends), 0: not */
	long long lease_until;
	/* a chunk of sends (store_fold_prefetch_sends): its device online (1) or not (0) as the
	 * prefetch read it; -1: not read */
	int online;
};

struct store_fold {
	bool on, spoiled;
	/* sets (store_fold_begin_sets): history items kept in hist (a JSON array, NULL: none)
	 * and every row written at the end, each kind in one statement */
	bool sets;
	bool presence;    /* its prefetch read the devices' presence */
	bool claim_sends; /* store_fold_claim_sends */
	json_object *hist;
	size_t n;
	uint16_t slot[FOLD_SLOTS]; /* 0: empty, else 1 + the row's index */
	struct fold_row row[FOLD_ROWS];
};

static size_t fold_hash(const char *ident)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const unsigned char *p = (const unsigned char *)ident; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h & (FOLD_SLOTS - 1);
}

static struct fold_row *fold_find(struct store_fold *f, const char *ident)
{
	for (size_t i = fold_hash(ident);; i = (i + 1) & (FOLD_SLOTS - 1)) {
		if (f->slot[i] == 0)
			return NULL;
		if (strcmp(f->row[f->slot[i] - 1].j.rec.ident, ident) == 0)
			return &f->row[f->slot[i] - 1];
	}
}

/* Takes *j (the caller's no longer); the fold has room (f->n < FOLD_ROWS). */
static struct fold_row *fold_add(struct store_fold *f, const struct job_move_row *j)
{
	size_t i = fold_hash(j->rec.ident);
	struct fold_row *r = &f->row[f->n];

	while (f->slot[i] != 0)
		i = (i + 1) & (FOLD_SLOTS - 1);
	r->j = *j;
	r->dirty = false;
	r->sends = 0;
	r->online = -1;
	f->slot[i] = (uint16_t)++f->n;
	return r;
}

/* The row as the fold has it; mark_sent: the move also records the job as sent (at
 * j's update_at). */
static enum rcs_err fold_write(struct store *st, struct fold_row *r, bool mark_sent)
{
	const struct job_rec *rec = &r->j.rec;
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err =
	    store_stmt(st,
		       "UPDATE jobs SET status = ?1, update_at = ?2, held = 0, response = ?3,"
		       " response_time = ?4, last_seq = ?5, n_history = ?6, error_code = ?7,"
		       " sent_at = CASE WHEN ?8 <> 0 THEN ?2 ELSE sent_at END, sends = sends + ?8,"
		       " progress_done = ?10, progress_total = ?11, phase = ?12,"
		       " reboot_within = ?13, reboot_deadline = ?14 WHERE ident = ?9",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, status_name(rec->status));
	store_arg_int(s, 2, rec->update_at);
	store_arg_text(s, 3, rec->response);
	store_arg_opt_int(s, 4, rec->response_time);
	store_arg_int(s, 5, r->j.last_seq);
	store_arg_int(s, 6, r->j.n_history);
	store_arg_text(s, 7, rec->error_code);
	store_arg_int(s, 8, mark_sent);
	store_arg_text(s, 9, rec->ident);
	if (rec->has_progress) {
		store_arg_int(s, 10, rec->progress_done);
		store_arg_int(s, 11, rec->progress_total);
	} else {
		store_arg_null(s, 10);
		store_arg_null(s, 11);
	}
	store_arg_text(s, 12, rec->phase);
	store_arg_opt_int(s, 13, rec->reboot_within);
	store_arg_opt_int(s, 14, rec->reboot_deadline);
	err = store_done(st, s, "job fold");
	if (err == RCS_OK)
		r->dirty = false;
out:
	store_stmt_done(st, s);
	return err;
}

/* ---- sets: a fold's history items and rows written in one statement each (PostgreSQL;
 * docs/coordinator.md, "Reports as sets") ---- */

static bool fold_json_add(json_object *o, const char *key, json_object *v)
{
	return json_object_object_add(o, key, v) == 0;
}

/* A history item kept for the set write (fold_out). */
static enum rcs_err fold_history_keep(struct store_fold *f, const char *job, long long n,
				      const char *status, const struct history_add *h)
{
	json_object *o = json_object_new_object();
	bool ok = o != NULL;

	if (ok && f->hist == NULL && (f->hist = json_object_new_array()) == NULL)
		ok = false;
	ok = ok && fold_json_add(o, "job_ident", json_object_new_string(job));
	ok = ok && fold_json_add(o, "n", json_object_new_int64(n));
	ok = ok && fold_json_add(o, "status", json_object_new_string(status));
	ok = ok && fold_json_add(o, "at", json_object_new_int64(h->at));
	ok = ok && fold_json_add(o, "response", jsonu_new_string_or_null(h->response));
	ok = ok && fold_json_add(o, "response_time",
				 h->response_time ? json_object_new_int64(h->response_time) : NULL);
	ok = ok && fold_json_add(o, "seq", json_object_new_int64(h->seq));
	ok = ok && fold_json_add(o, "phase", jsonu_new_string_or_null(h->phase));
	if (ok && json_object_array_add(f->hist, o) == 0)
		return RCS_OK;
	json_object_put(o);
	return RCS_ERR_NOMEM;
}

/* A row moved in the fold, as fold_rows_write's statement takes it. */
static json_object *fold_row_json(const struct store *st, const struct fold_row *r)
{
	const struct job_rec *rec = &r->j.rec;
	json_object *o = json_object_new_object();
	bool ok = o != NULL;

	ok = ok && fold_json_add(o, "ident", json_object_new_string(rec->ident));
	ok = ok && fold_json_add(o, "status", json_object_new_string(status_name(rec->status)));
	ok = ok && fold_json_add(o, "update_at", json_object_new_int64(rec->update_at));
	ok = ok && fold_json_add(o, "response", jsonu_new_string_or_null(rec->response));
	ok = ok &&
	     fold_json_add(o, "response_time",
			   rec->response_time ? json_object_new_int64(rec->response_time) : NULL);
	ok = ok && fold_json_add(o, "last_seq", json_object_new_int64(r->j.last_seq));
	ok = ok && fold_json_add(o, "n_history", json_object_new_int64(r->j.n_history));
	ok = ok && fold_json_add(o, "error_code", jsonu_new_string_or_null(rec->error_code));
	ok = ok &&
	     fold_json_add(o, "progress_done",
			   rec->has_progress ? json_object_new_int64(rec->progress_done) : NULL);
	ok = ok &&
	     fold_json_add(o, "progress_total",
			   rec->has_progress ? json_object_new_int64(rec->progress_total) : NULL);
	ok = ok && fold_json_add(o, "phase", jsonu_new_string_or_null(rec->phase));
	ok = ok &&
	     fold_json_add(o, "reboot_within",
			   rec->reboot_within ? json_object_new_int64(rec->reboot_within) : NULL);
	ok = ok && fold_json_add(o, "reboot_deadline",
				 rec->reboot_deadline ? json_object_new_int64(rec->reboot_deadline)
						      : NULL);
	ok = ok && fold_json_add(o, "sends", json_object_new_int64(r->sends));
	ok = ok && fold_json_add(o, "sent_at", r->sends ? json_object_new_int64(r->sent_at) : NULL);
	ok = ok &&
	     fold_json_add(o, "claimed_by",
			   r->lease_until ? json_object_new_string(store_claim_node(st)) : NULL);
	ok = ok && fold_json_add(o, "lease_until",
				 r->lease_until ? json_object_new_int64(r->lease_until) : NULL);
	if (ok)
		return o;
	json_object_put(o);
	return NULL;
}

/* One statement of constant SQL with one argument, the JSON text of v. */
static enum rcs_err fold_json_run(struct store *st, const char *sql, json_object *v,
				  const char *what)
{
	struct store_stmt *s = NULL;
	const char *text = jsonu_dump(v, NULL);
	enum rcs_err err = text ? store_stmt(st, sql, &s) : RCS_ERR_NOMEM;

	if (err == RCS_OK) {
		store_arg_text(s, 1, text);
		err = store_done(st, s, what);
	}
	store_stmt_done(st, s);
	return err;
}

#define FOLD_HISTORY_SET                                                                           \
	"INSERT INTO job_history(job_ident, n, status, at, response, response_time, seq, phase)"   \
	" SELECT x.job_ident, x.n, x.status, x.at, x.response, x.response_time, x.seq, x.phase"    \
	" FROM json_to_recordset(CAST(?1 AS json)) AS x(job_ident TEXT, n INTEGER, status TEXT,"   \
	" at INTEGER, response TEXT, response_time INTEGER, seq INTEGER, phase TEXT)"
/* A job that leaves transmited (a device's report on it, mostly): the claim of its send ends
 * with that row write, the device having had the envelope, and the broker's acknowledgement
 * after finds nothing to end (docs/architecture.md "Claims") */
#define FOLD_LEFT_SENT "j.status = 'transmited' AND x.status <> 'transmited'"
#define FOLD_ROWS_SET                                                                              \
	"UPDATE jobs AS j SET status = x.status, update_at = x.update_at, held = 0,"               \
	" response = x.response, response_time = x.response_time, last_seq = x.last_seq,"          \
	" n_history = x.n_history, error_code = x.error_code,"                                     \
	" progress_done = x.progress_done, progress_total = x.progress_total,"                     \
	" phase = x.phase, reboot_within = x.reboot_within, reboot_deadline = x.reboot_deadline,"  \
	" sent_at = coalesce(x.sent_at, j.sent_at), sends = j.sends + x.sends,"                    \
	" claimed_by = CASE WHEN x.lease_until IS NOT NULL THEN x.claimed_by WHEN " FOLD_LEFT_SENT \
	" THEN NULL ELSE j.claimed_by END,"                                                        \
	" lease_until = CASE WHEN x.lease_until IS NOT NULL THEN x.lease_until "                   \
	"WHEN " FOLD_LEFT_SENT " THEN NULL ELSE j.lease_until END"                                 \
	" FROM json_to_recordset(CAST(?1 AS json)) AS x(ident TEXT, status TEXT,"                  \
	" update_at INTEGER, response TEXT, response_time INTEGER, last_seq INTEGER,"              \
	" n_history INTEGER, error_code TEXT, progress_done BIGINT, progress_total BIGINT,"        \
	" phase TEXT, reboot_within BIGINT, reboot_deadline BIGINT,"                               \
	" sends INTEGER, sent_at INTEGER, claimed_by TEXT, lease_until INTEGER)"                   \
	" WHERE j.ident = x.ident AND j.ident = ANY(ARRAY(SELECT y.ident FROM"                     \
	" json_to_recordset(CAST(?1 AS json)) AS y(ident TEXT)))"

/* The fold's history items kept and its rows moved, one statement each. */
static enum rcs_err fold_sets_write(struct store *st, struct store_fold *f)
{
	json_object *rows = json_object_new_array();
	enum rcs_err err = rows ? RCS_OK : RCS_ERR_NOMEM;
	size_t n = 0;

	for (size_t i = 0; err == RCS_OK && i < f->n; i++) {
		json_object *o;

		if (!f->row[i].dirty)
			continue;
		if ((o = fold_row_json(st, &f->row[i])) == NULL ||
		    json_object_array_add(rows, o) != 0) {
			json_object_put(o);
			err = RCS_ERR_NOMEM;
		}
		n++;
	}
	if (err == RCS_OK && f->hist != NULL && json_object_array_length(f->hist) > 0)
		err = fold_json_run(st, FOLD_HISTORY_SET, f->hist, "history set");
	if (err == RCS_OK && n > 0)
		err = fold_json_run(st, FOLD_ROWS_SET, rows, "job set");
	for (size_t i = 0; err == RCS_OK && i < f->n; i++) {
		f->row[i].dirty = false;
		f->row[i].sends = 0;
		f->row[i].lease_until = 0;
	}
	json_object_put(rows);
	return err;
}

/* job_move_apply for a job the fold keeps: the history item now, the row now only when the
 * job ends or is marked sent; in sets, both with the fold's others (a chunk of sends too:
 * docs/coordinator.md, "Sends as sets"). */
static enum rcs_err job_move_fold(struct store *st, const struct job_move *m, struct fold_row *r)
{
	struct job_move_row *j = &r->j;
	struct history_add h;
	enum rcs_err err;

	err = job_rec_moved(&j->rec, m);
	if (err != RCS_OK)
		return err;
	h = (struct history_add){m->now, j->rec.response, j->rec.response_time, m->seq,
				 j->rec.phase};
	if (m->seq > j->last_seq)
		j->last_seq = m->seq;
	if (m->to == JS_EDGE_STARTED && j->started_at == 0)
		j->started_at = m->now;
	j->n_history++;
	r->dirty = true;
	if (st->fold->sets) {
		err = fold_history_keep(st->fold, m->ident, j->n_history, status_name(m->to), &h);
		if (err == RCS_OK && m->mark_sent) {
			r->sends++;
			r->sent_at = j->rec.update_at;
			if (st->fold->claim_sends)
				r->lease_until = store_claim_until(st, m->now);
		}
		return err;
	}
	err = store_history_add(st, m->ident, j->n_history, status_name(m->to), &h);
	if (err == RCS_OK && (status_is_terminal(m->to) || m->mark_sent))
		err = fold_write(st, r, m->mark_sent);
	return err;
}

static const struct store_hooks fold_hooks;

void store_fold_begin(struct store *st)
{
	if (st->fold == NULL && (st->fold = calloc(1, sizeof(*st->fold))) == NULL) {
		log_warnx("no memory for a fold of status changes: each is written at once");
		return;
	}
	st->hooks = &fold_hooks;
	st->fold->on = true;
	st->fold->spoiled = false;
	st->fold->sets = false;
	st->fold->claim_sends = false;
}

void store_fold_begin_sets(struct store *st)
{
	store_fold_begin(st);
	if (st->fold != NULL && st->fold->on)
		st->fold->sets = st->dialect == STORE_DIALECT_POSTGRES;
}

bool store_fold_claim_sends(struct store *st)
{
	if (st->fold == NULL || !st->fold->on || !st->fold->sets)
		return false;
	st->fold->claim_sends = true;
	return true;
}

#define FOLD_PREFETCH_COLS(more)                                                                   \
	"SELECT " JOB_COLS ", j.last_seq, j.n_history,"                                            \
	" (j.mail_list != '[]' AND j.status_list != '[]') OR"                                      \
	" (j.task_mail_list != '[]' AND j.task_status_list != '[]'),"                              \
	" (SELECT h.at FROM job_history h WHERE h.job_ident = j.ident AND"                         \
	" h.status = 'edge_started' ORDER BY h.n LIMIT 1)" more " FROM " JOB_FROM " WHERE j.ident"
#define FOLD_PREFETCH_SQ(more)                                                                     \
	FOLD_PREFETCH_COLS(more) " IN (SELECT value FROM json_each(?1)) ORDER BY j.ident"
#define FOLD_PREFETCH_PG(more)                                                                     \
	FOLD_PREFETCH_COLS(more)                                                                   \
	" IN (SELECT value FROM json_array_elements_text(CAST(?1 AS json)))"                       \
	" ORDER BY j.ident FOR UPDATE OF j"
/* a batch of reports that leaves the rows another transaction holds (store_fold_prefetch's
 * held); which of the jobs it did not read are there all the same: FOLD_HELD_PG */
#define FOLD_PREFETCH_SKIP_PG       FOLD_PREFETCH_PG("") " SKIP LOCKED"
#define FOLD_PREFETCH_SENDS_SKIP_PG FOLD_PREFETCH_SENDS_PG " SKIP LOCKED"
#define FOLD_HELD_PG                                                                               \
	"SELECT ident FROM jobs WHERE ident = ANY(ARRAY(SELECT"                                    \
	" json_array_elements_text(CAST(?1 AS json))))"
/* a chunk of sends: its rows found through the jobs' key whatever the planner thinks of the
 * table's size (a bulk send's jobs were just made) */
#define FOLD_PREFETCH_SENDS_PG                                                                     \
	FOLD_PREFETCH_COLS(FOLD_PRESENCE)                                                          \
	" = ANY(ARRAY(SELECT json_array_elements_text(CAST(?1 AS json))))"                         \
	" ORDER BY j.ident FOR UPDATE OF j"
/* a chunk of sends: its devices' presence too */
#define FOLD_PRESENCE                                                                              \
	", (SELECT d.online FROM devices d WHERE d.entity_ident = j.entity_ident AND"              \
	" d.client_root = j.client_root)"

/* One row of the prefetch into the fold (arg: the store). */
static enum rcs_err fold_prefetch_row(struct store_stmt *s, void *arg)
{
	struct store *st = arg;
	struct store_fold *f = st->fold;
	struct job_move_row j;
	enum rcs_err err;

	if (f->n >= FOLD_ROWS)
		return RCS_OK; /* locked all the same; read again when moved */
	memset(&j, 0, sizeof(j));
	err = job_read(s, &j.rec);
	if (err != RCS_OK)
		return err;
	if (fold_find(f, j.rec.ident) != NULL) {
		store_job_rec_free(&j.rec);
		return RCS_OK;
	}
	j.last_seq = store_val_int(s, JOB_NCOLS);
	j.n_history = store_val_int(s, JOB_NCOLS + 1);
	j.notify = store_val_bool(s, JOB_NCOLS + 2);
	j.started_at = store_val_int(s, JOB_NCOLS + 3); /* NULL: 0, never started */
	fold_add(f, &j)->online = f->presence && !store_val_null(s, JOB_NCOLS + 4)
				      ? store_val_bool(s, JOB_NCOLS + 4)
				      : -1;
	return RCS_OK;
}

/* The idents as a JSON array, the ones skip[i] marks left out (skip may be NULL); NULL when
 * out of memory. */
static json_object *fold_idents_json(const char *const *idents, size_t n, const bool *skip)
{
	json_object *a = json_object_new_array();

	for (size_t i = 0; a != NULL && i < n; i++) {
		json_object *v;

		if (skip != NULL && skip[i])
			continue;
		v = json_object_new_string(idents[i]);
		if (v == NULL || json_object_array_add(a, v) != 0) {
			json_object_put(v);
			json_object_put(a);
			a = NULL;
		}
	}
	return a;
}

/* After a prefetch that skipped locked rows: held[i] set for each job of idents the fold
 * does not hold that exists all the same (another transaction holds its row). One read,
 * only when some job was not read. */
static enum rcs_err fold_held(struct store *st, const char *const *idents, size_t n, bool *held)
{
	struct store_stmt *s = NULL;
	bool *read = calloc(n, sizeof(*read));
	json_object *a = NULL;
	size_t missing = 0;
	enum rcs_err err = RCS_OK;

	if (read == NULL)
		return RCS_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		held[i] = false;
		read[i] = fold_find(st->fold, idents[i]) != NULL;
		missing += !read[i];
	}
	if (missing == 0)
		goto out;
	if ((a = fold_idents_json(idents, n, read)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	err = store_stmt(st, FOLD_HELD_PG, &s);
	if (err == RCS_OK)
		store_arg_text(s, 1, jsonu_dump(a, NULL));
	for (bool row = true; err == RCS_OK && row;) {
		err = store_next(st, s, "held jobs", &row);
		for (size_t i = 0; err == RCS_OK && row && i < n; i++)
			held[i] =
			    held[i] || (!read[i] && strcmp(idents[i], store_val_text(s, 0)) == 0);
	}
	store_stmt_done(st, s);
out:
	json_object_put(a);
	free(read);
	return err;
}

/* presence: the devices' presence too (store_fold_prefetch_sends); held: rows another
 * transaction holds are left (store_fold_prefetch). */
static enum rcs_err fold_prefetch(struct store *st, const char *const *idents, size_t n,
				  bool presence, bool *held)
{
	struct store_stmt *s = NULL;
	bool skip = held != NULL && st->dialect == STORE_DIALECT_POSTGRES;
	json_object *a;
	enum rcs_err err = RCS_OK;

	for (size_t i = 0; held != NULL && i < n; i++)
		held[i] = false;
	if (st->fold == NULL || !st->fold->on || n == 0)
		return RCS_OK;
	if ((a = fold_idents_json(idents, n, NULL)) == NULL)
		return RCS_ERR_NOMEM;
	st->fold->presence = presence;
	if (presence)
		err = store_stmt(
		    st,
		    STORE_SQL(st, FOLD_PREFETCH_SQ(FOLD_PRESENCE),
			      skip ? FOLD_PREFETCH_SENDS_SKIP_PG : FOLD_PREFETCH_SENDS_PG),
		    &s);
	else
		err = store_stmt(st,
				 STORE_SQL(st, FOLD_PREFETCH_SQ(""),
					   skip ? FOLD_PREFETCH_SKIP_PG : FOLD_PREFETCH_PG("")),
				 &s);
	if (err == RCS_OK)
		store_arg_text(s, 1, jsonu_dump(a, NULL));
	for (bool row = true; err == RCS_OK && row;) {
		err = store_next(st, s, "job prefetch", &row);
		if (err == RCS_OK && row)
			err = fold_prefetch_row(s, st);
	}
	store_stmt_done(st, s);
	json_object_put(a);
	if (err == RCS_OK && skip)
		err = fold_held(st, idents, n, held);
	return err;
}

enum rcs_err store_fold_prefetch(struct store *st, const char *const *idents, size_t n, bool *held)
{
	return fold_prefetch(st, idents, n, false, held);
}

enum rcs_err store_fold_prefetch_sends(struct store *st, const char *const *idents, size_t n,
				       bool *held)
{
	return fold_prefetch(st, idents, n, true, held);
}

enum rcs_err store_fold_job(struct store *st, const char *ident, struct job_rec *out, int *online)
{
	struct fold_row *r;

	memset(out, 0, sizeof(*out));
	*online = -1;
	if (st->fold == NULL || !st->fold->on || (r = fold_find(st->fold, ident)) == NULL)
		return RCS_ERR_NOTFOUND;
	*online = r->online;
	return store_job_rec_dup(&r->j.rec, out);
}

bool store_fold_seq_gap(struct store *st, const struct job_move *m)
{
	struct fold_row *r;

	if (m->seq <= 0 || st->fold == NULL || !st->fold->on || !st->fold->sets ||
	    (r = fold_find(st->fold, m->ident)) == NULL)
		return false;
	if ((m->entity_ident != NULL && strcmp(r->j.rec.entity_ident, m->entity_ident) != 0) ||
	    (m->client_root != NULL && strcmp(r->j.rec.client_root, m->client_root) != 0))
		return false; /* refused by its move, at once */
	return !status_is_terminal(r->j.rec.status) && m->seq > r->j.last_seq + 1;
}

/* A job as store_jobs_seq_waiting reads it, without its row's lock. */
struct seq_row {
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char entity_ident[UUID_STR_LEN];
	enum job_status status;
	long long last_seq;
};

#define SEQ_WAITING_PG                                                                             \
	"SELECT ident, client_root, entity_ident, status, last_seq FROM jobs WHERE ident ="        \
	" ANY(ARRAY(SELECT json_array_elements_text(CAST(?1 AS json))))"

static int seq_row_cmp(const void *a, const void *b)
{
	return strcmp(((const struct seq_row *)a)->ident, ((const struct seq_row *)b)->ident);
}

/* bsearch's comparator: an ident (the key) against a row. */
static int seq_row_find(const void *ident, const void *row)
{
	return strcmp(ident, ((const struct seq_row *)row)->ident);
}

/* Whether m still skips a report of its job as r reads (store_fold_seq_gap's test). */
static bool seq_row_gap(const struct seq_row *r, const struct job_move *m)
{
	if ((m->entity_ident != NULL && strcmp(r->entity_ident, m->entity_ident) != 0) ||
	    (m->client_root != NULL && strcmp(r->client_root, m->client_root) != 0))
		return false;
	return !status_is_terminal(r->status) && m->seq > r->last_seq + 1;
}

enum rcs_err store_jobs_seq_waiting(struct store *st, const struct job_move *m, size_t n,
				    bool *wait)
{
	struct store_stmt *s = NULL;
	struct seq_row *rows = NULL;
	const char **ids = NULL;
	bool *ask = NULL;
	json_object *a = NULL;
	size_t k = 0, nrows = 0;
	enum rcs_err err = RCS_OK;

	for (size_t i = 0; i < n; i++) {
		wait[i] = false;
		k += m[i].again && m[i].seq > 0;
	}
	if (k == 0 || st->dialect != STORE_DIALECT_POSTGRES)
		goto out;
	ask = calloc(n, sizeof(*ask));
	ids = calloc(n, sizeof(*ids));
	rows = calloc(k, sizeof(*rows));
	if (ask == NULL || ids == NULL || rows == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		ids[i] = m[i].ident;
		ask[i] = !(m[i].again && m[i].seq > 0); /* fold_idents_json's skip: not asked */
	}
	if ((a = fold_idents_json(ids, n, ask)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	err = store_stmt(st, SEQ_WAITING_PG, &s);
	if (err == RCS_OK)
		store_arg_text(s, 1, jsonu_dump(a, NULL));
	for (bool row = true; err == RCS_OK && row;) {
		err = store_next(st, s, "jobs' last reports", &row);
		if (err != RCS_OK || !row || nrows >= k)
			continue;
		store_val_copy(s, 0, rows[nrows].ident, sizeof(rows[nrows].ident));
		store_val_copy(s, 1, rows[nrows].client_root, sizeof(rows[nrows].client_root));
		store_val_copy(s, 2, rows[nrows].entity_ident, sizeof(rows[nrows].entity_ident));
		if (!status_parse(store_val_text(s, 3), &rows[nrows].status))
			rows[nrows].status = JS_INITIAL;
		rows[nrows].last_seq = store_val_int(s, 4);
		nrows++;
	}
	store_stmt_done(st, s);
	if (err != RCS_OK)
		goto out;
	qsort(rows, nrows, sizeof(*rows), seq_row_cmp);
	for (size_t i = 0; i < n; i++) {
		const struct seq_row *r;

		if (ask[i])
			continue;
		r = bsearch(m[i].ident, rows, nrows, sizeof(*rows), seq_row_find);
		wait[i] = r != NULL && seq_row_gap(r, &m[i]);
	}
out:
	json_object_put(a);
	free(rows);
	free(ids);
	free(ask);
	return err;
}

/* Forgets the fold's rows; write: writes those moved first (stops at an error). */
static enum rcs_err fold_out(struct store *st, bool write)
{
	struct store_fold *f = st->fold;
	enum rcs_err err = RCS_OK;

	if (write && f->sets)
		err = fold_sets_write(st, f);
	json_object_put(f->hist);
	f->hist = NULL;
	for (size_t i = 0; i < f->n; i++) {
		if (write && err == RCS_OK && f->row[i].dirty)
			err = fold_write(st, &f->row[i], false);
		store_job_rec_free(&f->row[i].j.rec);
	}
	if (f->n > 0)
		memset(f->slot, 0, sizeof(f->slot));
	f->n = 0;
	if (err != RCS_OK)
		f->spoiled = true;
	return err;
}

enum rcs_err store_fold_flush(struct store *st)
{
	if (st->fold == NULL || !st->fold->on)
		return RCS_OK;
	if (st->fold->spoiled)
		return RCS_ERR_INTERNAL;
	return fold_out(st, true);
}

enum rcs_err store_fold_end(struct store *st, bool write)
{
	enum rcs_err err = RCS_OK;

	if (st->fold == NULL || !st->fold->on)
		return RCS_OK;
	if (write && st->fold->spoiled) {
		log_warnx("a savepoint was rolled back during a fold of status changes: the"
			  " transaction is given up");
		err = RCS_ERR_INTERNAL;
	}
	if (err == RCS_OK)
		err = fold_out(st, write);
	else
		fold_out(st, false);
	st->fold->on = false;
	return err;
}

/* A savepoint inside a fold was rolled back: the fold's rows no longer say what the database
 * holds, and store_fold_end refuses to write them (store.c's store_tx_end). */
void store_fold_spoil(struct store *st)
{
	if (st->fold != NULL && st->fold->on)
		st->fold->spoiled = true;
}

/* Frees the fold's memory (store_close). */
static void fold_free(struct store *st)
{
	if (st->fold == NULL)
		return;
	fold_out(st, false);
	free(st->fold);
	st->fold = NULL;
}

static const struct store_hooks fold_hooks = {.sp_undone = store_fold_spoil, .close = fold_free};

/* A job the coordinator ended: cancelled, expired, or its device did not come back from a
 * reboot in time (docs/architecture.md "Job statuses"). */
static bool job_ended_by_coordinator(const struct job_rec *r)
{
	return r->status == JS_CANCELLED || r->status == JS_EXPIRED ||
	       (r->status == JS_EDGE_ERROR && r->error_code != NULL &&
		strcmp(r->error_code, "reboot_timeout") == 0);
}

/* What the device said after the coordinator ended the job, kept in its history (number n)
 * without changing anything else of it (a final row is never left unwritten in a fold: the
 * relative UPDATE holds). */
static enum rcs_err job_move_keep(struct store *st, const struct job_move *m,
				  struct job_move_row *jr, long long n)
{
	struct history_add h = {m->now, m->response, m->set_response_time ? m->now : 0, m->seq,
				m->phase};
	char seq[32];
	enum rcs_err err;

	err = store_history_add(st, m->ident, n, status_name(m->to), &h);
	if (err != RCS_OK)
		return err;
	snprintf(seq, sizeof(seq), "%lld", m->seq);
	err = store_write(st,
			  "UPDATE jobs SET n_history = n_history + 1,"
			  " last_seq = CAST(? AS INTEGER) WHERE ident = ?",
			  NULL, 2, seq, m->ident);
	if (err == RCS_OK) {
		jr->n_history = n;
		jr->last_seq = m->seq;
	}
	return err;
}

enum rcs_err store_job_move_rec(struct store *st, const struct job_move *m, struct job_moved *out,
				struct job_rec *rec)
{
	enum store_move *result = &out->result;
	struct store_fold *f = st->fold != NULL && st->fold->on ? st->fold : NULL;
	struct fold_row *fr = NULL;
	struct job_move_row j, *jr = &j;
	bool have_rec = false, wrote = false;
	long long n;
	enum rcs_err err = RCS_OK;

	memset(&j, 0, sizeof(j));
	out->n = 0;
	out->notify = false;
	out->started_at = -1;
	if (f != NULL && f->spoiled) {
		err = RCS_ERR_INTERNAL; /* the batch is rolled back anyway (store_fold_end) */
		goto out;
	}
	if (f != NULL && (fr = fold_find(f, m->ident)) == NULL && f->n == FOLD_ROWS)
		err = store_fold_flush(st);
	if (err != RCS_OK)
		goto out;
	if (fr != NULL) {
		jr = &fr->j;
	} else {
		err = job_move_read(st, m->ident, &j);
		if (err != RCS_OK)
			goto out;
		have_rec = true;
	}
	n = jr->n_history + 1;
	if (m->prev)
		*m->prev = jr->rec.status;
	if ((m->client_root && strcmp(m->client_root, jr->rec.client_root) != 0) ||
	    (m->entity_ident && strcmp(m->entity_ident, jr->rec.entity_ident) != 0)) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	if (m->seq > 0 && m->seq <= jr->last_seq) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	if (status_is_terminal(jr->rec.status)) {
		if (m->seq > 0 && job_ended_by_coordinator(&jr->rec)) {
			wrote = true;
			err = job_move_keep(st, m, jr, n);
			if (err == RCS_OK)
				out->n = n;
			*result = STORE_MOVE_KEPT;
		} else {
			*result = m->seq > 0 ? STORE_MOVE_DUPLICATE : STORE_MOVE_TERMINAL;
		}
		goto out;
	}
	if (m->reboot_timeout &&
	    (jr->rec.status != JS_EDGE_RUNNING || jr->rec.reboot_deadline == 0 ||
	     jr->rec.reboot_deadline > m->now)) {
		*result = STORE_MOVE_DUPLICATE; /* the device came back meanwhile */
		goto out;
	}
	if (!status_can_move(jr->rec.status, m->to)) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	wrote = true;
	if (f != NULL) {
		if (fr == NULL) {
			fr = fold_add(f, &j); /* the fold's record now */
			have_rec = false;
			jr = &fr->j;
		}
		err = job_move_fold(st, m, fr);
	} else {
		err = job_move_apply(st, m, &j);
	}
	out->n = n;
	out->notify = jr->notify;
	out->started_at = jr->started_at;
	*result = STORE_MOVE_APPLIED;
out:
	if (err == RCS_ERR_NOTFOUND && wrote)
		err =
		    RCS_ERR_INTERNAL; /* RCS_ERR_NOTFOUND says nothing was written (store_jobs.h) */
	if (err != RCS_OK && wrote && f != NULL)
		f->spoiled = true; /* its rows may say more than the database */
	if (err == RCS_OK && rec != NULL) {
		if (jr == &j) {
			*rec = j.rec;
			have_rec = false; /* the caller's */
		} else {
			err = store_job_rec_dup(&jr->rec, rec);
		}
	}
	if (have_rec)
		store_job_rec_free(&j.rec);
	return err;
}

/* ---- notifications ---- */

void store_job_notification_list_free(struct store_job_notification_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++) {
		free(l->items[i].address);
		free(l->items[i].status);
		free(l->items[i].state);
		free(l->items[i].last_error);
	}
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* A notification's row ("address, status, state, attempts, created_at, sent_at,
 * last_error") into *arg, a struct job_notification_rec (zeroed). */
static enum rcs_err notification_row(struct store_stmt *s, void *arg)
{
	struct job_notification_rec *r = arg;
	enum rcs_err err = RCS_OK;

	r->address = store_val_dup(s, 0, &err);
	r->status = store_val_dup(s, 1, &err);
	r->state = store_val_dup(s, 2, &err);
	r->attempts = store_val_int(s, 3);
	r->created_at = store_val_int(s, 4);
	r->sent_at = store_val_int(s, 5);
	r->last_error = store_val_dup(s, 6, &err);
	return err;
}

static enum rcs_err row_exists(struct store_stmt *s, void *arg)
{
	(void)s;
	(void)arg;
	return RCS_OK;
}

enum rcs_err store_job_notifications(struct store *st, const char *client_root, const char *ident,
				     const struct store_page *pg,
				     struct store_job_notification_list *out)
{
	struct store_qb q = {.n = 0};
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	out->pg.page = pg->page;
	out->pg.per_page = pg->per_page;
	q.where[0] = '\0';
	store_qb_add(&q, "job_ident = ?", ident);
	store_lock(st);
	if (client_root == NULL)
		err = store_get_one(st, "SELECT 1 FROM jobs WHERE ident = ?1", ident, NULL, NULL,
				    row_exists, NULL);
	else
		err = store_get_one(st, "SELECT 1 FROM jobs WHERE ident = ?1 AND client_root = ?2",
				    ident, client_root, NULL, row_exists, NULL);
	if (err == RCS_OK)
		err = store_page_recs(
		    st, "address, status, state, attempts, created_at, sent_at, last_error",
		    "notifications", &q, "id", pg, &out->pg, sizeof(*out->items), notification_row,
		    &items, &out->n);
	out->items = items;
	store_unlock(st);
	if (err != RCS_OK)
		store_job_notification_list_free(out);
	return err;
}

/* ---- one item of a job's history, the jobs per status (the webhook sender, the metrics) ---- */

/* A row of HISTORY_COLS into *arg, a struct history_rec (zeroed). */
static enum rcs_err history_item_row(struct store_stmt *s, void *arg)
{
	struct history_rec *h = arg;
	enum rcs_err err = RCS_OK;

	if (!status_parse(store_val_text(s, 0), &h->status))
		h->status = JS_INITIAL;
	h->at = store_val_int(s, 1);
	h->response = store_val_dup(s, 2, &err);
	h->response_time = store_val_int(s, 3);
	h->phase = store_val_dup(s, 4, &err);
	return err;
}

enum rcs_err store_job_history_item(struct store *st, const char *job_ident, long long n,
				    struct history_rec *out)
{
	char num[32];

	memset(out, 0, sizeof(*out));
	snprintf(num, sizeof(num), "%lld", n);
	return store_get_one(st,
			     "SELECT " HISTORY_COLS " FROM job_history"
			     " WHERE job_ident = ?1 AND n = CAST(?2 AS INTEGER)",
			     job_ident, num, NULL, history_item_row, out);
}

enum rcs_err store_jobs_by_status(struct store *st, long long n[JS__COUNT])
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(n, 0, sizeof(long long) * JS__COUNT);
	store_lock(st);
	err = store_stmt(st, "SELECT status, count(*) FROM jobs GROUP BY status", &s);
	if (err != RCS_OK)
		goto out;
	while ((err = store_next(st, s, "jobs by status", &row)) == RCS_OK && row) {
		enum job_status js;

		if (status_parse(store_val_text(s, 0), &js) && (int)js >= 0 && js < JS__COUNT)
			n[js] = store_val_int(s, 1);
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_job_status_at(struct store *st, const char *job_ident, enum job_status status,
				 int64_t *at)
{
	long long v = 0;
	enum rcs_err err;

	err = store_get_one(st,
			    "SELECT min(at) FROM job_history WHERE job_ident = ?1 AND status = ?2",
			    job_ident, status_name(status), NULL, store_row_int, &v);
	*at = v;
	return err == RCS_ERR_NOTFOUND ? RCS_OK : err;
}

/* ---- a job's expiry ---- */

int64_t store_job_expiry(int64_t created_at, int64_t scheduled_time, int64_t ttl)
{
	int64_t from = scheduled_time > created_at ? scheduled_time : created_at;

	if (ttl <= 0)
		return 0;
	/* scheduled_time may be up to INT64_MAX - 1: saturate (in the protocol's range,
	 * which ends at INT64_MAX - 1) rather than overflow */
	return from > INT64_MAX - 1 - ttl ? INT64_MAX - 1 : from + ttl;
}
