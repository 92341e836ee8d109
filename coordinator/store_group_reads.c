/*
 * store_group_reads.c - the API's reads of groups (docs/api.md "Bulk sends and groups",
 * "Progress"): one group with its counts, progress and rejected devices, and lists of
 * groups. See store_groups.h; store_int.h for what the store's files share.
 */
#include "store_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_int.h"

static enum rcs_err group_row_one(struct store_stmt *s, void *arg)
{
	return store_group_row(s, arg);
}

enum rcs_err store_group_read(struct store *st, const char *client_root, const char *ident,
			      bool with_counts, struct group_rec *out)
{
	struct group_rec g;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	if (with_counts && client_root) {
		/* store_group_get's reading, counts included */
		return store_group_get(st, client_root, ident, NULL, out);
	}
	store_lock(st);
	err = store_get_one(st, "SELECT " GROUP_COLS " FROM groups WHERE ident = ?1", ident, NULL,
			    NULL, group_row_one, out);
	if (err == RCS_OK && with_counts) {
		char root[UUID_STR_LEN];

		snprintf(root, sizeof(root), "%s", out->client_root);
		store_group_rec_free(out);
		err = store_group_get(st, root, ident, NULL, &g);
		*out = g;
	}
	store_unlock(st);
	return err;
}

static enum rcs_err group_download_row(struct store_stmt *s, void *arg)
{
	long long *v = arg;

	v[0] = store_val_int(s, 0);
	v[1] = store_val_int(s, 1);
	return RCS_OK;
}

enum rcs_err store_group_download(struct store *st, const char *ident, long long *max_concurrent,
				  long long *max_bytes_per_s)
{
	long long v[2] = {0, 0};
	enum rcs_err err = store_get_one(st, "SELECT dl_max, dl_rate FROM groups WHERE ident = ?1",
					 ident, NULL, NULL, group_download_row, v);

	*max_concurrent = v[0];
	*max_bytes_per_s = v[1];
	return err;
}

/* ---- reads of groups (the API's) ---- */

static enum rcs_err group_read(struct store_stmt *s, struct group_rec *r)
{
	return store_group_row(s, r);
}

static enum rcs_err group_read_one(struct store_stmt *s, void *arg)
{
	return group_read(s, arg);
}

/* A group of a task the user may not see (not public, someone else's) is left out, like
 * the task and its jobs. */
#define GROUP_HIDDEN_FROM(user_param)                                                              \
	"EXISTS (SELECT 1 FROM tasks t WHERE t.ident = groups.task_ident"                          \
	" AND t.client_root = groups.client_root AND " STORE_TASK_HIDDEN("t", user_param) ")"

/* A group's progress from its counts of latest attempts (docs/api.md "Progress"), with
 * held of them waiting for release and not_sent cancelled before they went out. */
static void group_progress_counts(struct group_rec *g, long long held, long long not_sent)
{
	struct group_progress *p = &g->progress;

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < g->n_counts; i++) {
		enum job_status st = g->counts[i].status;
		long long n = g->counts[i].n;

		p->devices += n;
		if (!status_is_terminal(st))
			p->open += n;
		else if (st == JS_TERMINATED)
			p->succeeded += n;
		else if (st == JS_CANCELLED)
			p->cancelled += n;
		else
			p->failed += n;
	}
	p->ended = p->devices - p->open;
	p->held = held;
	p->not_sent = not_sent;
	p->retries = g->total > p->devices ? g->total - p->devices : 0;
	/* a paused or ended group releases nothing: no time to tell */
	p->release_eta_s =
	    g->status == GROUP_RUNNING && held > 0
		? rollout_release_eta(&g->settings, held, p->succeeded, (int64_t)time(NULL))
		: -1;
}

/* Whether the group's latest attempts (its counts) hold a job in status st. */
static bool group_counts_has(const struct group_rec *g, enum job_status st)
{
	for (size_t i = 0; i < g->n_counts; i++)
		if (g->counts[i].status == st && g->counts[i].n > 0)
			return true;
	return false;
}

/* The group's progress with what its latest attempts hold back and what was cancelled
 * before it went out. */
static enum rcs_err group_held_read(struct store *st, struct group_rec *g)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	err = store_stmt(st,
			 "SELECT coalesce(sum(CASE WHEN held = 1 AND status = 'pending' THEN 1 ELSE"
			 " 0 END), 0), coalesce(sum(CASE WHEN status = 'cancelled' AND NOT EXISTS"
			 " (SELECT 1 FROM job_history h WHERE h.job_ident = jobs.ident AND"
			 " h.status = 'transmited') THEN 1 ELSE 0 END), 0) FROM jobs WHERE"
			 " group_ident = ?1 AND superseded = 0",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, g->ident);
	err = store_next(st, s, "group held", &row);
	if (err == RCS_OK && row)
		group_progress_counts(g, store_val_int(s, 0), store_val_int(s, 1));
out:
	store_stmt_done(st, s);
	return err;
}

/* How many of the group's jobs are in each status, in the order of the statuses' names. */
static enum rcs_err group_counts(struct store *st, struct group_rec *g)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	err = store_stmt(st,
			 "SELECT status, count(*) FROM jobs WHERE group_ident = ?1 GROUP BY status"
			 " ORDER BY status",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, g->ident);
	g->with_counts = true;
	while ((err = store_next(st, s, "group statuses", &row)) == RCS_OK && row) {
		struct group_count *c = &g->statuses[g->n_statuses];

		if (g->n_statuses >= JS__COUNT || !status_parse(store_val_text(s, 0), &c->status))
			continue; /* every job's status is one of JS__COUNT names */
		c->n = store_val_int(s, 1);
		g->total += c->n;
		g->n_statuses++;
	}
	if (err != RCS_OK)
		goto out;
	store_stmt_done(st, s);
	s = NULL;
	/* the latest attempt of each device: the jobs no retry superseded */
	err =
	    store_stmt(st,
		       "SELECT status, count(*) FROM jobs WHERE group_ident = ?1 AND superseded = 0"
		       " GROUP BY status ORDER BY status",
		       &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, g->ident);
	while ((err = store_next(st, s, "group counts", &row)) == RCS_OK && row) {
		struct group_count *c = &g->counts[g->n_counts];

		if (g->n_counts >= JS__COUNT || !status_parse(store_val_text(s, 0), &c->status))
			continue;
		c->n = store_val_int(s, 1);
		g->n_counts++;
	}
	if (err != RCS_OK)
		goto out;
	store_stmt_done(st, s);
	s = NULL;
	/* what the latest attempts hold back, and what was cancelled before it went out: none
	 * when none is pending or cancelled (a group that ended well, whose end's event reads
	 * it: this read of every job of the group was most of that event's time) */
	if (group_counts_has(g, JS_PENDING) || group_counts_has(g, JS_CANCELLED))
		err = group_held_read(st, g);
	else
		group_progress_counts(g, 0, 0);
	/* the causes of failures: none without a latest attempt that ended edge_error */
	if (err == RCS_OK && group_counts_has(g, JS_EDGE_ERROR))
		err = store_group_error_codes(st, g->ident, g->error_codes, &g->n_error_codes);
out:
	store_stmt_done(st, s);
	return err;
}

/* The devices the group's send left out, in ident order (at most a send's devices). */
static enum rcs_err group_rejected_read(struct store *st, struct group_rec *g)
{
	struct store_stmt *s = NULL;
	bool row = false;
	size_t cap = 0;
	enum rcs_err err;

	g->with_rejected = true;
	err = store_stmt(
	    st,
	    "SELECT entity_ident, code, message FROM group_rejected WHERE group_ident = ?1"
	    " ORDER BY entity_ident",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, g->ident);
	while ((err = store_next(st, s, "group rejected", &row)) == RCS_OK && row) {
		struct group_rejected *r;

		if (g->n_rejected == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct group_rejected *more = realloc(g->rejected, ncap * sizeof(*more));
			if (more == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			g->rejected = more;
			cap = ncap;
		}
		r = &g->rejected[g->n_rejected];
		snprintf(r->entity_ident, sizeof(r->entity_ident), "%s", store_val_text(s, 0));
		r->code = strdup(store_val_text(s, 1));
		r->message = strdup(store_val_text(s, 2));
		g->n_rejected++;
		if (r->code == NULL || r->message == NULL) {
			err = RCS_ERR_NOMEM;
			break;
		}
	}
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_group_get(struct store *st, const char *client_root, const char *ident,
			     const char *only_visible_to, struct group_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err =
	    store_get_one(st,
			  "SELECT " GROUP_COLS " FROM groups WHERE ident = ?1 AND client_root = ?2"
			  " AND (?3 IS NULL OR NOT " GROUP_HIDDEN_FROM("?3") ")",
			  ident, client_root, only_visible_to, group_read_one, out);
	if (err == RCS_OK)
		err = group_counts(st, out);
	if (err == RCS_OK)
		err = group_rejected_read(st, out);
	store_unlock(st);
	if (err != RCS_OK)
		store_group_rec_free(out);
	return err;
}
enum rcs_err store_groups_list(struct store *st, const char *client_root,
			       const char *only_visible_to, const struct store_group_filter *f,
			       const struct store_page *pg, struct store_group_list *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	if (only_visible_to)
		store_qb_add(&q, "NOT " GROUP_HIDDEN_FROM("?"), only_visible_to);
	if (f && f->status)
		store_qb_add(&q, "status = ?", f->status);
	if (f && f->task_ident)
		store_qb_add(&q, "task_ident = ?", f->task_ident);
	if (f && f->tag)
		store_qb_add(&q, "tag = ?", f->tag);
	store_qb_list_opts(&q, pg, "", "ident", &o);
	err = store_page_recs(st, GROUP_COLS, "groups", &q, o.order, pg, &out->pg,
			      sizeof(*out->items), group_read_one, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_group_list_free(out);
	return err;
}

enum rcs_err store_groups_by_status(struct store *st, long long n[GROUP__COUNT])
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err;

	memset(n, 0, sizeof(long long) * GROUP__COUNT);
	store_lock(st);
	err = store_stmt(st, "SELECT status, count(*) FROM groups GROUP BY status", &s);
	if (err != RCS_OK)
		goto out;
	while ((err = store_next(st, s, "groups by status", &row)) == RCS_OK && row) {
		enum group_status gs;

		if (group_status_parse(store_val_text(s, 0), &gs))
			n[gs] = store_val_int(s, 1);
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}
