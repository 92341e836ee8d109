#include "lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define LIFECYCLE_EVENT_MAX ((size_t)8 << 20) /* bytes of one job record as text */

/* Hands the job record, as SQLite writes it out, to the transport's event hook. */
static void lifecycle_changed_event(struct lifecycle *lc, const char *ident)
{
	char root[UUID_STR_LEN];
	struct buf rec;

	buf_init(&rec, LIFECYCLE_EVENT_MAX);
	if (store_job_json(lc->st, ident, root, &rec) == RCS_OK)
		lc->hooks->job_changed(lc->hooks->ctx, root, ident, rec.data, rec.len);
	buf_free(&rec);
}

bool lifecycle_has_transport(const struct lifecycle *lc)
{
	return lc->hooks != NULL;
}

enum rcs_err lifecycle_move(struct lifecycle *lc, const struct job_move *m, enum store_move *result,
			    json_object **job_after)
{
	json_object *job = NULL;
	enum rcs_err err;

	if (job_after)
		*job_after = NULL;
	err = store_job_move(lc->st, m, result);
	if (err != RCS_OK)
		return err;
	if (*result == STORE_MOVE_APPLIED && lc->changed)
		lc->changed(lc->changed_ctx);
	if (*result == STORE_MOVE_APPLIED && lc->hooks && lc->hooks->job_changed)
		lifecycle_changed_event(lc, m->ident);
	if (job_after == NULL)
		return RCS_OK;
	err = store_job_get(lc->st, NULL, m->ident, &job);
	if (err != RCS_OK)
		return err;
	*job_after = job;
	return RCS_OK;
}

/*
 * Announces created jobs: those not scheduled for later are due now. A single job (no
 * group) is handed to job_due synchronously, inside the creating transaction.
 */
static void lifecycle_jobs_created(struct lifecycle *lc, const struct job_batch *b)
{
	json_object *due = NULL;

	if (b->n == 0)
		return;
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	if ((b->scheduled_time > b->now || b->ttl > 0) && lc->timers)
		lc->timers(lc->timers_ctx);
	if (lc->hooks == NULL || b->scheduled_time > b->now)
		return;
	if (b->n == 1 && b->group_ident == NULL) {
		if (lc->hooks->job_due)
			lc->hooks->job_due(lc->hooks->ctx, b->jobs[0].ident);
		return;
	}
	if (lc->hooks->jobs_due == NULL)
		return;
	due = json_object_new_array_ext((int)b->n);
	for (size_t i = 0; i < b->n; i++)
		json_object_array_add(due, json_object_new_string(b->jobs[i].ident));
	lc->hooks->jobs_due(lc->hooks->ctx, due);
	json_object_put(due);
}

/* What lifecycle_jobs_created needs of a bulk send, kept until its transaction commits. */
struct lifecycle_created {
	struct lifecycle *lc;
	struct job_batch b;
	char group_ident[UUID_STR_LEN];
	struct job_new jobs[];
};

static void lifecycle_created_after(void *arg, bool committed)
{
	struct lifecycle_created *c = arg;

	if (committed)
		lifecycle_jobs_created(c->lc, &c->b);
	free(c);
}

enum rcs_err lifecycle_jobs_create(struct lifecycle *lc, const struct job_batch *b)
{
	struct lifecycle_created *c = NULL;
	enum rcs_err err;

	if (b->n == 0 && b->group_ident == NULL)
		return RCS_OK;
	err = store_jobs_create(lc->st, b);
	if (err != RCS_OK || b->n == 0)
		goto out;
	if (b->n == 1 && b->group_ident == NULL) {
		lifecycle_jobs_created(lc, b);
		goto out;
	}
	/* a bulk send leaves once it is stored for good */
	c = calloc(1, sizeof(*c) + b->n * sizeof(c->jobs[0]));
	if (c == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	c->lc = lc;
	c->b.n = b->n;
	c->b.now = b->now;
	c->b.scheduled_time = b->scheduled_time;
	c->b.ttl = b->ttl;
	if (b->group_ident) {
		snprintf(c->group_ident, sizeof(c->group_ident), "%s", b->group_ident);
		c->b.group_ident = c->group_ident;
	}
	for (size_t i = 0; i < b->n; i++)
		memcpy(c->jobs[i].ident, b->jobs[i].ident, sizeof(c->jobs[i].ident));
	c->b.jobs = c->jobs;
	err = store_after_commit(lc->st, lifecycle_created_after, c);
	if (err == RCS_OK)
		c = NULL; /* the store's now */
out:
	free(c);
	return err;
}

enum rcs_err lifecycle_cancel(struct lifecycle *lc, const char *client_root, const char *ident,
			      int64_t now, json_object **job_out)
{
	struct job_move m = {
	    .client_root = client_root,
	    .ident = ident,
	    .to = JS_CANCELLED,
	    .response = NULL,
	    .now = now,
	};
	enum store_move res = STORE_MOVE_DUPLICATE;
	enum job_status was = JS_INITIAL;
	enum rcs_err err;

	/* the status the move itself found, in its transaction: a job the transport sends
	 * at this very moment is seen as sent, and its device is told */
	m.prev = &was;
	*job_out = NULL;
	err = lifecycle_move(lc, &m, &res, job_out);
	if (err != RCS_OK)
		return err;
	if (res != STORE_MOVE_APPLIED) {
		json_object_put(*job_out);
		*job_out = NULL;
		return RCS_ERR_CONFLICT;
	}
	/* a job that may have reached the device: tell it */
	if (status_rank(was) >= status_rank(JS_TRANSMITED) && lc->hooks && lc->hooks->job_cancelled)
		lc->hooks->job_cancelled(lc->hooks->ctx, *job_out);
	return RCS_OK;
}
