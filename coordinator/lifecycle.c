#include "lifecycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "render.h"
#include "rollout.h"
#include "store.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_outbox.h"
#include "store_webhooks.h"

#define LIFECYCLE_EVENT_MAX ((size_t)8 << 20) /* bytes of one group record as text */

/* The metrics of one applied change, counted once its transaction has committed. */
struct lifecycle_metric {
	enum job_status to;
	enum { LC_METRIC_NONE, LC_METRIC_DELIVERY, LC_METRIC_RUN } kind;
	double seconds;
};

static void lifecycle_metric_done(void *arg, bool committed)
{
	struct lifecycle_metric *lm = arg;

	if (committed) {
		metrics_job_status(lm->to);
		if (lm->kind == LC_METRIC_DELIVERY)
			metrics_job_delivery_latency(lm->seconds);
		else if (lm->kind == LC_METRIC_RUN)
			metrics_job_run_time(lm->seconds);
	}
	free(lm);
}

/* The metrics of an applied change: its status, and how long the job took to reach its
 * device (due -> edge_transmitted: from its release, a rollout's hold left out) or to run
 * (edge_started -> final status), to the millisecond from the moments metrics.c keeps,
 * else in whole seconds from the stored times. created_at: the job's, when its record was
 * read anyway (its initial status has the same time); 0: looked up. started_at: the time
 * of its edge_started, when a batch read it (-1: looked up). Counted when the change
 * commits, not before: a batch rolled back and applied again counts once
 * (docs/architecture.md, "One job, from POST to the final report", step 6). */
static void lifecycle_metrics(struct lifecycle *lc, const struct job_move *m, int64_t created_at,
			      int64_t started_at)
{
	struct lifecycle_metric *lm = calloc(1, sizeof(*lm));
	int64_t since = created_at;
	double took = -1;

	if (lm == NULL)
		return; /* a metric less rather than a change refused */
	lm->to = m->to;
	if (m->to == JS_EDGE_STARTED)
		metrics_clock_mark(METRICS_STARTED, m->ident);
	if (m->to == JS_EDGE_TRANSMITTED &&
	    ((took = metrics_clock_take(METRICS_DUE, m->ident)) >= 0 ||
	     ((since > 0 || store_job_status_at(lc->st, m->ident, JS_INITIAL, &since) == RCS_OK) &&
	      since > 0))) {
		lm->kind = LC_METRIC_DELIVERY;
		lm->seconds = took >= 0 ? took : (double)(m->now - since);
	} else if ((m->to == JS_TERMINATED || m->to == JS_EDGE_ERROR) &&
		   ((took = metrics_clock_take(METRICS_STARTED, m->ident)) >= 0 ||
		    ((started_at >= 0 ? (since = started_at, true)
				      : store_job_status_at(lc->st, m->ident, JS_EDGE_STARTED,
							    &since) == RCS_OK) &&
		     since > 0))) {
		lm->kind = LC_METRIC_RUN;
		lm->seconds = took >= 0 ? took : (double)(m->now - since);
	}
	if (store_after_commit(lc->st, lifecycle_metric_done, lm) != RCS_OK)
		free(lm);
}

static enum rcs_err lifecycle_group_job_ended(struct lifecycle *lc, const struct job_rec *job,
					      int64_t now);

bool lifecycle_has_transport(const struct lifecycle *lc)
{
	return lc->hooks != NULL;
}

/*
 * Everything that follows a status change, decided here and nowhere else, in the change's
 * transaction (docs/architecture.md, "What follows a status change"). The store wrote the
 * job's row and its history item (store_job_move_rec); from the record it read with the
 * move: a device's report kept after the coordinator ended the job is only a webhook
 * delivery; an applied change ends the job in its group's tallies (a final status), records
 * its e-mails and webhook deliveries, wakes the notifier and the webhook sender, counts its
 * metrics and publishes its event once committed, and, when a job of a group ended, makes
 * the group's retry, abort or completion.
 */
static enum rcs_err lifecycle_move_follow(struct lifecycle *lc, const struct job_move *m,
					  const struct job_moved *mv, const struct job_rec *job)
{
	const char *to = status_name(m->to);
	bool ended = status_is_terminal(m->to) && job->group_ident[0] != '\0';
	enum rcs_err err = RCS_OK;

	if (mv->result != STORE_MOVE_APPLIED && mv->result != STORE_MOVE_KEPT)
		return RCS_OK; /* nothing changed */
	if (mv->result == STORE_MOVE_APPLIED && ended && lc->ends != NULL)
		err = lifecycle_ends_add(lc->ends, job); /* the group's part once per batch */
	else if (mv->result == STORE_MOVE_APPLIED && ended)
		err = store_group_job_ended(lc->st, job->group_ident, m->to);
	if (err == RCS_OK && mv->result == STORE_MOVE_APPLIED && mv->notify)
		err = store_notifications_record(lc->st, m->ident, to, m->now);
	if (err == RCS_OK)
		err =
		    store_webhook_job_event(lc->st, job->client_root, m->ident, mv->n, to, m->now);
	if (err != RCS_OK)
		return err;
	if (mv->result == STORE_MOVE_APPLIED && lc->changed)
		lc->changed(lc->changed_ctx);
	if (lc->webhooks_changed)
		lc->webhooks_changed(lc->webhooks_ctx);
	if (mv->result != STORE_MOVE_APPLIED)
		return RCS_OK;
	lifecycle_metrics(lc, m, job->created_at, mv->started_at);
	if (lc->hooks && lc->hooks->job_changed)
		lc->hooks->job_changed(lc->hooks->ctx, job);
	if (ended && lc->ends == NULL)
		err = lifecycle_group_job_ended(lc, job, m->now);
	return err;
}

/* The move and what follows from it (lifecycle.h). */
enum rcs_err lifecycle_move_steps(struct lifecycle *lc, const struct job_move *m,
				  enum store_move *result, struct job_rec *job, bool *wrote)
{
	struct job_moved mv;
	enum rcs_err err;

	*wrote = false;
	/* the job's record comes with the move: one read for the event, the metrics, the
	 * group and the caller */
	err = store_job_move_rec(lc->st, m, &mv, job);
	if (err != RCS_OK)
		return err; /* nothing written (store_jobs.h) */
	*result = mv.result;
	*wrote = true;
	/* a reboot deadline set (docs/mqtt.md "Status report", within): the scheduler looks for
	 * its next deadline anew, else it would learn of this one only at its next wake */
	if (mv.result == STORE_MOVE_APPLIED && m->within > 0 && lc->timers)
		lc->timers(lc->timers_ctx);
	err = lifecycle_move_follow(lc, m, &mv, job);
	if (err != RCS_OK)
		store_fold_spoil(lc->st); /* a fold's rows may say more than the database */
	return err;
}

/* Hands the record to the caller (job_after) or frees it. */
static void lifecycle_move_rec_out(struct job_rec *job, bool ok, struct job_rec *job_after)
{
	if (ok && job_after)
		*job_after = *job;
	else
		store_job_rec_free(job);
}

enum rcs_err lifecycle_move(struct lifecycle *lc, const struct job_move *m, enum store_move *result,
			    struct job_rec *job_after)
{
	struct job_rec job;
	bool wrote;
	enum rcs_err err, tx_err;

	memset(&job, 0, sizeof(job));
	if (job_after)
		memset(job_after, 0, sizeof(*job_after));
	/* the move and what it starts for its group (a retry, an abort, the completion) commit
	 * together, or neither does: inside a caller's transaction, a savepoint of it */
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_move_steps(lc, m, result, &job, &wrote);
	tx_err = store_tx_end(lc->st, err == RCS_OK);
	if (err == RCS_OK)
		err = tx_err;
	lifecycle_move_rec_out(&job, err == RCS_OK, job_after);
	return err;
}

enum rcs_err lifecycle_move_in_tx(struct lifecycle *lc, const struct job_move *m,
				  enum store_move *result, struct job_rec *job_after)
{
	struct job_rec job;
	bool wrote;
	enum rcs_err err;

	memset(&job, 0, sizeof(job));
	if (job_after)
		memset(job_after, 0, sizeof(*job_after));
	err = lifecycle_move_steps(lc, m, result, &job, &wrote);
	if (err == RCS_ERR_NOTFOUND && wrote)
		err = RCS_ERR_INTERNAL; /* RCS_ERR_NOTFOUND says nothing was written */
	lifecycle_move_rec_out(&job, err == RCS_OK, job_after);
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
	if ((b->scheduled_time > b->now || b->ttl > 0 || b->hold) && lc->timers)
		lc->timers(lc->timers_ctx);
	/* held jobs: the scheduler releases them (docs/api.md "Rollouts") */
	if (lc->hooks == NULL || b->scheduled_time > b->now || b->hold)
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
	/* due now, unless held for release or scheduled later (the metrics' delivery latency) */
	for (size_t i = 0; !b->hold && b->scheduled_time <= b->now && i < b->n; i++)
		metrics_clock_mark(METRICS_DUE, b->jobs[i].ident);
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
	c->b.hold = b->hold;
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

/* A device's cancel waiting for the commit of the job's move to cancelled. */
struct lifecycle_cancelled {
	struct lifecycle *lc;
	struct job_rec job; /* ident, client_root and entity_ident: what the message names */
};

static void lifecycle_cancelled_after(void *arg, bool committed)
{
	struct lifecycle_cancelled *c = arg;

	if (committed && c->lc->hooks && c->lc->hooks->job_cancelled)
		c->lc->hooks->job_cancelled(c->lc->hooks->ctx, &c->job);
	free(c);
}

enum rcs_err lifecycle_cancel(struct lifecycle *lc, const char *client_root, const char *ident,
			      const char *response, int64_t now, struct job_rec *job_out)
{
	struct lifecycle_cancelled *c = NULL;
	struct job_move m = {
	    .client_root = client_root,
	    .ident = ident,
	    .to = JS_CANCELLED,
	    .response = response,
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
	/* a job that may have reached the device: tell it, once the cancel is stored for good
	 * (the request's transaction may still be open: a group cancel, the audit row) */
	if (status_rank(was) >= status_rank(JS_TRANSMITED) && lc->hooks &&
	    lc->hooks->job_cancelled) {
		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			log_warnx(
			    "job %s: cancel not sent to the device (out of memory); it is told"
			    " when it reports on the job",
			    ident);
			goto out;
		}
		c->lc = lc;
		memcpy(c->job.ident, job_out->ident, sizeof(c->job.ident));
		memcpy(c->job.client_root, job_out->client_root, sizeof(c->job.client_root));
		memcpy(c->job.entity_ident, job_out->entity_ident, sizeof(c->job.entity_ident));
		if (store_after_commit(lc->st, lifecycle_cancelled_after, c) != RCS_OK) {
			log_warnx(
			    "job %s: cancel not sent to the device; it is told when it reports"
			    " on the job",
			    ident);
			free(c);
		}
	}
out:
	return err;
}

/* ---- group sends (docs/api.md "Rollouts") ---- */

#define LIFECYCLE_GROUP_CHUNK 1000 /* jobs cancelled per query of a group's open jobs */

/* The group's record with counts, as render_group writes it, to the group_changed hook. */
static void lifecycle_group_event(struct lifecycle *lc, const char *group_ident)
{
	struct group_rec g;
	struct render w;
	struct buf rec;

	if (lc->hooks == NULL || lc->hooks->group_changed == NULL)
		return;
	if (store_group_read(lc->st, NULL, group_ident, true, &g) != RCS_OK) {
		log_warnx("group %s: no event: it cannot be read", group_ident);
		return;
	}
	buf_init(&rec, LIFECYCLE_EVENT_MAX);
	render_init(&w, &rec);
	render_group(&w, &g);
	if (render_end(&w) == RCS_OK)
		lc->hooks->group_changed(lc->hooks->ctx, g.client_root, g.ident, rec.data, rec.len);
	buf_free(&rec);
	store_group_rec_free(&g);
}

enum rcs_err lifecycle_group_set_status(struct lifecycle *lc, const char *group_ident,
					unsigned from, enum group_status to, const char *reason,
					int64_t now, enum group_status *prev)
{
	enum group_status was = to;
	struct group_rec g;
	enum rcs_err err;

	memset(&g, 0, sizeof(g));
	/* the change and its webhook deliveries in one transaction (docs/api.md, "Webhooks") */
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		return err;
	err = store_group_set_status(lc->st, group_ident, from, to, reason, &was);
	if (err == RCS_OK && was != to)
		err = store_group_read(lc->st, NULL, group_ident, false, &g);
	if (err == RCS_OK && was != to)
		err = store_webhook_group_event(lc->st, g.client_root, group_ident,
						group_status_name(to), now);
	if (store_tx_end(lc->st, err == RCS_OK) != RCS_OK && err == RCS_OK)
		err = RCS_ERR_DB;
	store_group_rec_free(&g);
	if (prev)
		*prev = was;
	if (err != RCS_OK || was == to)
		return err;
	log_info("group %s: %s -> %s%s%s", group_ident, group_status_name(was),
		 group_status_name(to), reason ? ": " : "", reason ? reason : "");
	if (lc->webhooks_changed)
		lc->webhooks_changed(lc->webhooks_ctx);
	lifecycle_group_event(lc, group_ident);
	return RCS_OK;
}

/* Cancels the group's jobs that have not ended (unsent_only: those not yet transmited),
 * each with response, a chunk at a time. The group is no longer running: their ends change
 * nothing more of it. */
static enum rcs_err lifecycle_group_cancel_jobs(struct lifecycle *lc, const char *group,
						bool unsent_only, const char *response, int64_t now)
{
	struct store_idents ids;
	size_t moved;
	enum rcs_err err;

	do {
		moved = 0;
		err =
		    store_group_jobs_open(lc->st, group, unsent_only, LIFECYCLE_GROUP_CHUNK, &ids);
		if (err != RCS_OK)
			break;
		for (size_t i = 0; i < ids.n && err == RCS_OK; i++) {
			struct job_move m = {
			    .ident = ids.v[i],
			    .to = JS_CANCELLED,
			    .response = response,
			    .now = now,
			};
			enum store_move res = STORE_MOVE_DUPLICATE;
			struct job_rec job;

			if (unsent_only) {
				err = lifecycle_move(lc, &m, &res, NULL);
			} else {
				err = lifecycle_cancel(lc, NULL, ids.v[i], response, now, &job);
				if (err == RCS_OK)
					store_job_rec_free(&job);
				res = err == RCS_OK ? STORE_MOVE_APPLIED : STORE_MOVE_TERMINAL;
				if (err == RCS_ERR_CONFLICT)
					err = RCS_OK;
			}
			if (err == RCS_OK && res == STORE_MOVE_APPLIED)
				moved++;
		}
		store_idents_free(&ids);
	} while (err == RCS_OK && moved == LIFECYCLE_GROUP_CHUNK);
	return err;
}

/* Whether the group's share of failures calls for an abort (docs/api.md "Rollouts"). */
static bool lifecycle_group_should_abort(const struct group_rec *g, char *reason, size_t size)
{
	const struct group_settings *s = &g->settings;

	if (!s->has_abort || g->n_finished <= 0 || g->n_finished < s->min_finished ||
	    g->n_failed * 10000 < s->failure_pct * g->n_finished)
		return false;
	snprintf(reason, size,
		 "%lld of %lld finished jobs failed (%lld.%02lld %%; the limit is %lld.%02lld %%"
		 " after %lld)",
		 g->n_failed, g->n_finished, g->n_failed * 10000 / g->n_finished / 100,
		 g->n_failed * 10000 / g->n_finished % 100, s->failure_pct / 100,
		 s->failure_pct % 100, s->min_finished);
	return true;
}

/* Aborts a running or paused group: its status, then its jobs not yet sent. */
static enum rcs_err lifecycle_group_abort(struct lifecycle *lc, const char *group,
					  const char *reason, int64_t now)
{
	char response[320];
	enum rcs_err err;

	/* its jobs are read and cancelled from their rows: a fold's moves go there first */
	err = store_fold_flush(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_group_set_status(lc, group,
					 GROUP_BIT(GROUP_RUNNING) | GROUP_BIT(GROUP_PAUSED),
					 GROUP_ABORTED, reason, now, NULL);
	if (err != RCS_OK)
		return err == RCS_ERR_CONFLICT ? RCS_OK : err;
	snprintf(response, sizeof(response), "group aborted: %s", reason);
	return lifecycle_group_cancel_jobs(lc, group, true, response, now);
}

/* A running group with nothing left to do is completed (a continuous one stays open). */
static enum rcs_err lifecycle_group_check_done(struct lifecycle *lc, const struct group_rec *g,
					       int64_t now)
{
	enum rcs_err err;

	if (g->status != GROUP_RUNNING || g->n_open > 0 || g->settings.continuous)
		return RCS_OK;
	/* the group's event counts its jobs by their rows: a fold's moves go there first */
	err = store_fold_flush(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_group_set_status(lc, g->ident, GROUP_BIT(GROUP_RUNNING), GROUP_COMPLETED,
					 NULL, now, NULL);
	return err == RCS_ERR_CONFLICT ? RCS_OK : err;
}

/* A failed job of a running or paused group is followed by its retry when the cause is
 * transient and attempts are left: *retried. */
static enum rcs_err lifecycle_group_retry(struct lifecycle *lc, const struct group_rec *g,
					  const struct job_rec *job, int64_t now, bool *retried)
{
	const struct group_settings *s = &g->settings;
	char ident[UUID_STR_LEN], response[160];
	int64_t delay;
	enum rcs_err err;

	*retried = false;
	if (!s->has_retry || job->attempt >= s->max_attempts)
		return RCS_OK;
	if (!(job->status == JS_EXPIRED ||
	      (job->status == JS_EDGE_ERROR && !rollout_error_permanent(job->error_code))))
		return RCS_OK;
	/* the retry is made from the job's row: a fold's moves go there first */
	err = store_fold_flush(lc->st);
	if (err == RCS_OK)
		err = uuid_v7(ident);
	if (err != RCS_OK)
		return err;
	delay = rollout_retry_delay(s, job->attempt);
	snprintf(response, sizeof(response), "waiting for retry: attempt %lld of %lld after %llds",
		 job->attempt + 1, s->max_attempts, (long long)delay);
	/* a paused group's retry waits for the resume first, and says so */
	err = store_group_retry(lc->st, job->ident, ident, now, now + delay,
				g->status == GROUP_PAUSED ? STORE_PAUSED_RESPONSE : response);
	if (err != RCS_OK)
		return err;
	log_info("job %s (%s): attempt %lld is job %s, in %llds", job->ident,
		 job->error_code ? job->error_code : status_name(job->status), job->attempt + 1,
		 ident, (long long)delay);
	*retried = true;
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	if (lc->timers)
		lc->timers(lc->timers_ctx);
	return RCS_OK;
}

/* What follows for a group when jobs of it ended (lifecycle.h). */
enum rcs_err lifecycle_group_jobs_ended(struct lifecycle *lc, const struct job_rec *v, size_t n,
					int64_t now)
{
	struct group_rec g;
	char reason[256];
	bool retried = false, have = false;
	enum rcs_err err;

	err = store_group_read(lc->st, NULL, v[0].group_ident, false, &g);
	if (err != RCS_OK)
		goto out;
	have = true;
	if (g.status != GROUP_RUNNING && g.status != GROUP_PAUSED)
		goto out;
	for (size_t i = 0; err == RCS_OK && i < n; i++) {
		bool r = false;

		err = lifecycle_group_retry(lc, &g, &v[i], now, &r);
		retried = retried || r;
	}
	if (err == RCS_OK && retried) {
		store_group_rec_free(&g);
		have = false;
		err = store_group_read(lc->st, NULL, v[0].group_ident, false, &g);
		have = err == RCS_OK;
	}
	if (err != RCS_OK)
		goto out;
	if (lifecycle_group_should_abort(&g, reason, sizeof(reason))) {
		err = lifecycle_group_abort(lc, g.ident, reason, now);
		goto out;
	}
	err = lifecycle_group_check_done(lc, &g, now);
out:
	if (have)
		store_group_rec_free(&g);
	return err;
}

static enum rcs_err lifecycle_group_job_ended(struct lifecycle *lc, const struct job_rec *job,
					      int64_t now)
{
	return lifecycle_group_jobs_ended(lc, job, 1, now);
}

/* The tenant's group (RCS_ERR_NOTFOUND for another's) and the action's transaction. */
static enum rcs_err lifecycle_group_of(struct lifecycle *lc, const char *client_root,
				       const char *ident, struct group_rec *g)
{
	enum rcs_err err = store_group_read(lc->st, NULL, ident, false, g);

	if (err == RCS_OK && strcmp(g->client_root, client_root) != 0) {
		store_group_rec_free(g);
		err = RCS_ERR_NOTFOUND;
	}
	return err;
}

/* Ends a group action: commit (or roll back on err) and the record afterwards. */
static enum rcs_err lifecycle_group_action_end(struct lifecycle *lc, const char *client_root,
					       const char *ident, enum rcs_err err,
					       struct group_rec *out)
{
	enum rcs_err end = store_tx_end(lc->st, err == RCS_OK);

	if (err == RCS_OK)
		err = end;
	if (err == RCS_OK && out)
		err = store_group_read(lc->st, client_root, ident, true, out);
	return err;
}

enum rcs_err lifecycle_group_pause(struct lifecycle *lc, const char *client_root, const char *ident,
				   int64_t now, enum group_status *prev, struct group_rec *out)
{
	struct group_rec g;
	enum rcs_err err;

	if (out)
		memset(out, 0, sizeof(*out));
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_group_of(lc, client_root, ident, &g);
	if (err == RCS_OK) {
		store_group_rec_free(&g);
		err = lifecycle_group_set_status(lc, ident,
						 GROUP_BIT(GROUP_RUNNING) | GROUP_BIT(GROUP_PAUSED),
						 GROUP_PAUSED, NULL, now, prev);
	}
	/* the jobs not yet sent wait again */
	if (err == RCS_OK)
		err = store_group_hold(lc->st, ident);
	return lifecycle_group_action_end(lc, client_root, ident, err, out);
}

enum rcs_err lifecycle_group_resume(struct lifecycle *lc, const char *client_root,
				    const char *ident, int64_t now, enum group_status *prev,
				    struct group_rec *out)
{
	struct group_rec g;
	enum rcs_err err;

	if (out)
		memset(out, 0, sizeof(*out));
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_group_of(lc, client_root, ident, &g);
	if (err == RCS_OK) {
		store_group_rec_free(&g);
		err = lifecycle_group_set_status(lc, ident,
						 GROUP_BIT(GROUP_RUNNING) | GROUP_BIT(GROUP_PAUSED),
						 GROUP_RUNNING, NULL, now, prev);
	}
	/* the jobs the pause held say again what they wait for */
	if (err == RCS_OK)
		err = store_group_unhold(lc->st, ident, now);
	/* nothing left to do: completed now */
	if (err == RCS_OK && (err = store_group_read(lc->st, NULL, ident, false, &g)) == RCS_OK) {
		err = lifecycle_group_check_done(lc, &g, now);
		store_group_rec_free(&g);
	}
	if (err == RCS_OK && lc->timers)
		lc->timers(lc->timers_ctx); /* the scheduler releases the held jobs */
	return lifecycle_group_action_end(lc, client_root, ident, err, out);
}

enum rcs_err lifecycle_group_cancel(struct lifecycle *lc, const char *client_root,
				    const char *ident, const char *user, int64_t now,
				    enum group_status *prev, struct group_rec *out)
{
	struct group_rec g;
	char reason[200], response[200];
	enum rcs_err err;

	if (out)
		memset(out, 0, sizeof(*out));
	snprintf(reason, sizeof(reason), "cancelled through the API by %.128s", user ? user : "");
	snprintf(response, sizeof(response), "group cancelled by %.128s", user ? user : "");
	err = store_tx_begin(lc->st);
	if (err != RCS_OK)
		return err;
	err = lifecycle_group_of(lc, client_root, ident, &g);
	if (err == RCS_OK) {
		store_group_rec_free(&g);
		err = lifecycle_group_set_status(lc, ident,
						 GROUP_BIT(GROUP_RUNNING) | GROUP_BIT(GROUP_PAUSED),
						 GROUP_CANCELLED, reason, now, prev);
	}
	/* every job not ended, as the job cancel does (devices are told) */
	if (err == RCS_OK)
		err = lifecycle_group_cancel_jobs(lc, ident, false, response, now);
	return lifecycle_group_action_end(lc, client_root, ident, err, out);
}

/* Released jobs, kept until the release commits. */
struct lifecycle_released {
	struct lifecycle *lc;
	size_t n;
	struct job_new jobs[];
};

static void lifecycle_released_after(void *arg, bool committed)
{
	struct lifecycle_released *r = arg;

	if (committed && r->lc->hooks && r->lc->hooks->jobs_due)
		r->lc->hooks->jobs_due(r->lc->hooks->ctx, r->jobs, r->n);
	free(r);
}

enum rcs_err lifecycle_jobs_released(struct lifecycle *lc, const struct store_idents *ids)
{
	struct lifecycle_released *r;
	enum rcs_err err;

	if (ids->n == 0)
		return RCS_OK;
	for (size_t i = 0; i < ids->n; i++)
		metrics_clock_mark(METRICS_DUE, ids->v[i]);
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	if (lc->hooks == NULL)
		return RCS_OK;
	r = calloc(1, sizeof(*r) + ids->n * sizeof(r->jobs[0]));
	if (r == NULL)
		return RCS_ERR_NOMEM; /* released and pending: the due sweep sends them */
	r->lc = lc;
	r->n = ids->n;
	for (size_t i = 0; i < ids->n; i++)
		memcpy(r->jobs[i].ident, ids->v[i], sizeof(r->jobs[i].ident));
	err = store_after_commit(lc->st, lifecycle_released_after, r);
	if (err != RCS_OK)
		free(r);
	return err;
}

enum rcs_err lifecycle_device_changed(struct lifecycle *lc, const char *client_root,
				      const char *entity_ident, int64_t now)
{
	struct store_idents ids, due = {.v = NULL, .n = 0};
	bool *held = NULL, any_held = false;
	enum rcs_err err;

	err = store_groups_continuous_add(lc->st, client_root, entity_ident, now, &ids, &held);
	if (err != RCS_OK || ids.n == 0)
		goto out;
	log_info("device %s joins %zu continuous group send%s", entity_ident, ids.n,
		 ids.n == 1 ? "" : "s");
	due.v = calloc(ids.n, sizeof(*due.v));
	if (due.v == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < ids.n; i++) {
		if (held[i])
			any_held = true;
		else
			memcpy(due.v[due.n++], ids.v[i], sizeof(due.v[0]));
	}
	if (any_held && lc->timers)
		lc->timers(lc->timers_ctx);
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	err = lifecycle_jobs_released(lc, &due);
out:
	store_idents_free(&due);
	store_idents_free(&ids);
	free(held);
	return err;
}
