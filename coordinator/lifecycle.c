#include "lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "render.h"

#define LIFECYCLE_EVENT_MAX ((size_t)8 << 20) /* bytes of one job record as text */

/* Hands the job record, as render_job writes it (the same record GET /jobs/<id> answers), to
 * the transport's event hook. */
static void lifecycle_changed_event(struct lifecycle *lc, const struct job_rec *job)
{
	struct render w;
	struct buf rec;

	buf_init(&rec, LIFECYCLE_EVENT_MAX);
	render_init(&w, &rec);
	render_job(&w, job);
	if (render_end(&w) == RCS_OK)
		lc->hooks->job_changed(lc->hooks->ctx, job->client_root, job->ident, rec.data,
				       rec.len);
	else
		log_warnx("job %s: no event: its record is too large", job->ident);
	buf_free(&rec);
}

/* The metrics of an applied change: its status, and how long the job took to reach its
 * device (created -> edge_transmitted) or to run (edge_started -> final status). */
static void lifecycle_metrics(struct lifecycle *lc, const struct job_move *m)
{
	int64_t since = 0;

	metrics_job_status(m->to);
	if (m->to == JS_EDGE_TRANSMITTED &&
	    store_job_status_at(lc->st, m->ident, JS_INITIAL, &since) == RCS_OK && since > 0)
		metrics_job_delivery_latency((double)(m->now - since));
	else if ((m->to == JS_TERMINATED || m->to == JS_EDGE_ERROR) &&
		 store_job_status_at(lc->st, m->ident, JS_EDGE_STARTED, &since) == RCS_OK &&
		 since > 0)
		metrics_job_run_time((double)(m->now - since));
}

bool lifecycle_has_transport(const struct lifecycle *lc)
{
	return lc->hooks != NULL;
}

enum rcs_err lifecycle_move(struct lifecycle *lc, const struct job_move *m, enum store_move *result,
			    struct job_rec *job_after)
{
	struct job_rec job;
	bool event, have_job = false;
	enum rcs_err err;

	memset(&job, 0, sizeof(job));
	if (job_after)
		memset(job_after, 0, sizeof(*job_after));
	err = store_job_move(lc->st, m, result);
	if (err != RCS_OK)
		goto out;
	if (*result == STORE_MOVE_APPLIED && lc->changed)
		lc->changed(lc->changed_ctx);
	if (*result == STORE_MOVE_APPLIED)
		lifecycle_metrics(lc, m);
	if (*result != STORE_MOVE_DUPLICATE && *result != STORE_MOVE_TERMINAL &&
	    lc->webhooks_changed)
		lc->webhooks_changed(lc->webhooks_ctx);
	event = *result == STORE_MOVE_APPLIED && lc->hooks && lc->hooks->job_changed;
	if (!event && job_after == NULL)
		goto out;
	/* one read for the event and the caller */
	err = store_job_get(lc->st, NULL, m->ident, &job);
	if (err != RCS_OK) {
		/* the move stands; its event is lost (best effort, docs/mqtt.md "Monitoring") */
		if (job_after == NULL)
			err = RCS_OK;
		goto out;
	}
	have_job = true;
	if (event)
		lifecycle_changed_event(lc, &job);
	if (job_after) {
		*job_after = job;
		have_job = false; /* the caller's */
	}
out:
	if (have_job)
		store_job_rec_free(&job);
	return err;
}

/*
 * Announces created jobs: those not scheduled for later are due now. A single job (no
 * group) is handed to job_due synchronously, inside the creating transaction.
 */
static void lifecycle_jobs_created(struct lifecycle *lc, const struct job_batch *b)
{
	if (b->n == 0)
		return;
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	metrics_job_statuses(JS_INITIAL, b->n);
	metrics_job_statuses(JS_PENDING, b->n);
	if (lc->webhooks_changed)
		lc->webhooks_changed(lc->webhooks_ctx);
	if ((b->scheduled_time > b->now || b->ttl > 0) && lc->timers)
		lc->timers(lc->timers_ctx);
	if (lc->hooks == NULL || b->scheduled_time > b->now)
		return;
	if (b->n == 1 && b->group_ident == NULL) {
		if (lc->hooks->job_due)
			lc->hooks->job_due(lc->hooks->ctx, b->jobs[0].ident);
		return;
	}
	if (lc->hooks->jobs_due)
		lc->hooks->jobs_due(lc->hooks->ctx, b->jobs, b->n);
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
			      int64_t now, struct job_rec *job_out)
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
	err = lifecycle_move(lc, &m, &res, job_out);
	if (err != RCS_OK)
		goto out;
	if (res != STORE_MOVE_APPLIED) {
		store_job_rec_free(job_out);
		memset(job_out, 0, sizeof(*job_out));
		err = RCS_ERR_CONFLICT;
		goto out;
	}
	/* a job that may have reached the device: tell it */
	if (status_rank(was) >= status_rank(JS_TRANSMITED) && lc->hooks && lc->hooks->job_cancelled)
		lc->hooks->job_cancelled(lc->hooks->ctx, job_out);
out:
	return err;
}
