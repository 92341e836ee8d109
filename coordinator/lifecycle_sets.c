/*
 * lifecycle_sets.c - a batch of moves applied as sets of rows (lifecycle_moves, lifecycle.h;
 * docs/coordinator.md, "Reports as sets"): the moves folded with their jobs read in one
 * statement, and the groups whose jobs ended written once per batch.
 */
#include "lifecycle.h"

#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_groups.h"
#include "store_jobs.h"

static int lifecycle_ends_cmp(const void *a, const void *b)
{
	const struct job_rec *x = a, *y = b;
	int c = strcmp(x->group_ident, y->group_ident);

	return c != 0 ? c : strcmp(x->ident, y->ident);
}

/* The groups of the jobs a batch ended, in ident order (two coordinators lock them in the
 * same order): each group's tallies in one write, then what follows for it. */
static enum rcs_err lifecycle_ends_apply(struct lifecycle *lc, struct lifecycle_ends *e)
{
	enum rcs_err err = RCS_OK;
	size_t i = 0;

	if (e->n > 1) /* a batch that ended no job has no array at all */
		qsort(e->v, e->n, sizeof(*e->v), lifecycle_ends_cmp);
	while (err == RCS_OK && i < e->n) {
		long long failed = 0, succeeded = 0;
		int64_t now = 0;
		size_t k = i;

		for (; k < e->n && strcmp(e->v[k].group_ident, e->v[i].group_ident) == 0; k++) {
			failed += e->v[k].status == JS_EDGE_ERROR || e->v[k].status == JS_EXPIRED;
			succeeded += e->v[k].status == JS_TERMINATED;
			if (e->v[k].update_at > now)
				now = e->v[k].update_at;
		}
		err = store_group_jobs_ended(lc->st, e->v[i].group_ident, (long long)(k - i),
					     failed, succeeded);
		if (err == RCS_OK)
			err = lifecycle_group_jobs_ended(lc, &e->v[i], k - i, now);
		i = k;
	}
	return err;
}

static void lifecycle_ends_free(struct lifecycle_ends *e)
{
	for (size_t i = 0; i < e->n; i++)
		store_job_rec_free(&e->v[i]);
	free(e->v);
	memset(e, 0, sizeof(*e));
}

/* lifecycle_moves' moves, in the caller's transaction and set fold, but those of the jobs
 * another transaction holds (held[i]) and the reports that come before the one preceding them
 * was applied (store_fold_seq_gap): RCS_ERR_BUSY, nothing done. Once one of a job's reports is
 * left so, its later ones in the batch are too (their seq is beyond it). The error of one that
 * failed after writing (the batch is rolled back). */
static enum rcs_err lifecycle_moves_each(struct lifecycle *lc, const struct job_move *m, size_t n,
					 const bool *held, enum store_move *res, enum rcs_err *errs)
{
	for (size_t i = 0; i < n; i++) {
		struct job_rec job;
		bool wrote = false;

		res[i] = STORE_MOVE_DUPLICATE;
		if (held[i] || store_fold_seq_gap(lc->st, &m[i])) {
			errs[i] = RCS_ERR_BUSY;
			continue;
		}
		memset(&job, 0, sizeof(job));
		errs[i] = lifecycle_move_steps(lc, &m[i], &res[i], &job, &wrote);
		store_job_rec_free(&job);
		if (errs[i] != RCS_OK && (errs[i] != RCS_ERR_NOTFOUND || wrote))
			return errs[i] == RCS_ERR_NOTFOUND ? RCS_ERR_INTERNAL : errs[i];
	}
	return RCS_OK;
}

enum rcs_err lifecycle_moves(struct lifecycle *lc, const struct job_move *m, size_t n,
			     enum store_move *res, enum rcs_err *errs)
{
	struct lifecycle_ends ends = {NULL, 0, 0};
	const char **ids = calloc(n ? n : 1, sizeof(*ids));
	bool *held = calloc(n ? n : 1, sizeof(*held));
	bool *wait = calloc(n ? n : 1, sizeof(*wait));
	size_t *pos = calloc(n ? n : 1, sizeof(*pos));
	size_t k = 0;
	enum rcs_err err = RCS_ERR_NOMEM, end;

	if (ids == NULL || held == NULL || wait == NULL || pos == NULL)
		goto out;
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		goto out;
	store_fold_begin_sets(lc->st);
	/* reports that waited for their job's report before them and still do are left
	 * without reading or locking their rows; the rows another coordinator's batch holds
	 * are left to the caller's next round rather than waited for (docs/coordinator.md,
	 * "Reports as sets") */
	err = store_jobs_seq_waiting(lc->st, m, n, wait);
	for (size_t i = 0; i < n; i++)
		if (!wait[i]) {
			pos[k] = i;
			ids[k++] = m[i].ident;
		}
	if (err == RCS_OK)
		err = store_fold_prefetch(lc->st, ids, k, held);
	for (size_t j = k; err == RCS_OK && j-- > 0;) /* held[j] to held[pos[j]], pos[j] >= j */
		held[pos[j]] = held[j];
	for (size_t i = 0; err == RCS_OK && i < n; i++)
		held[i] = held[i] || wait[i];
	lc->ends = &ends;
	if (err == RCS_OK)
		err = lifecycle_moves_each(lc, m, n, held, res, errs);
	lc->ends = NULL;
	/* the rows and history first: the groups' retries, aborts and completions read them */
	end = store_fold_end(lc->st, err == RCS_OK);
	if (err == RCS_OK)
		err = end;
	if (err == RCS_OK)
		err = lifecycle_ends_apply(lc, &ends);
	end = store_tx_end(lc->st, err == RCS_OK);
	if (err == RCS_OK)
		err = end;
out:
	lifecycle_ends_free(&ends);
	free(pos);
	free(wait);
	free(held);
	free(ids);
	return err;
}
