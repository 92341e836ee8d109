/*
 * lifecycle.h - the job lifecycle (docs/architecture.md, "Job statuses"), the one path through
 * which every status change goes, whoever causes it: the REST API (create,
 * cancel), a transport (transmited, device reports), the scheduler (due,
 * expired).
 *
 * A transport plugs in through struct lifecycle_hooks. Without hooks (no
 * --mqtt) jobs are stored and stay pending: nothing delivers them.
 */
#ifndef RCS_LIFECYCLE_H
#define RCS_LIFECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "err.h"
#include "store.h"
#include "store_groups.h"
#include "store_jobs.h"

struct lifecycle_hooks {
	void *ctx;
	/*
	 * A pending job is due now. Called on the creating thread, for a single
	 * job, inside the creating transaction: move it to transmited (via
	 * lifecycle_move) before returning, so that the creating request answers
	 * "transmited"; the envelope goes out once the transaction commits.
	 */
	void (*job_due)(void *ctx, const char *job_ident);
	/*
	 * Many jobs are due (bulk send): jobs[0..n-1].ident (borrowed: copy what is kept;
	 * entity_ident may be NULL); must not block; deliver them off the calling thread.
	 */
	void (*jobs_due)(void *ctx, const struct job_new *jobs, size_t n);
	/* A job the device may have received was cancelled: tell the device. */
	void (*job_cancelled)(void *ctx, const struct job_rec *job);
	/* After every status change, with the job record as it now is (borrowed: copy what is
	 * kept), inside the changing transaction: the event of docs/mqtt.md, "Monitoring", is
	 * its render_job text, published once the change commits. */
	void (*job_changed)(void *ctx, const struct job_rec *job);
	/* After every change of a group's status, with the group record as it now is (JSON
	 * text, render_group's, counts included): the group event of docs/mqtt.md,
	 * "Monitoring". Called inside the changing transaction: publish once it commits. */
	void (*group_changed)(void *ctx, const char *client_root, const char *group_ident,
			      const char *record, size_t len);
};

struct lifecycle {
	struct store *st;
	const struct lifecycle_hooks *hooks; /* NULL: no transport */
	/* Called after any status change or creation (notifications may be queued). */
	void (*changed)(void *ctx);
	void *changed_ctx;
	/* Jobs were created with a scheduled_time or a ttl: the scheduler (scheduler.c)
	 * recomputes its next deadline, transport or not. */
	void (*timers)(void *ctx);
	void *timers_ctx;
	/* Called after any status change or creation: webhook deliveries may be queued
	 * (webhooks.c). */
	void (*webhooks_changed)(void *ctx);
	void *webhooks_ctx;
	/* lifecycle_moves' own while it runs (NULL otherwise) */
	struct lifecycle_ends *ends;
};

/* True when a transport is plugged in (device presence is known). */
bool lifecycle_has_transport(const struct lifecycle *lc);

/*
 * Applies one status change (store_job_move_rec) and all that follows it
 * (lifecycle_move_follow: tallies, e-mails, webhooks, metrics, job_changed, the group's
 * retry, abort or completion). *job_after (may be NULL) gets the job record afterwards (the caller
 * frees it with store_job_rec_free; zeroed on an error).
 */
enum rcs_err lifecycle_move(struct lifecycle *lc, const struct job_move *m, enum store_move *result,
			    struct job_rec *job_after);
/*
 * lifecycle_move without a savepoint of its own, for a caller that applies many moves in
 * one transaction (a savepoint per move costs SQLite a copy of every page the move
 * writes): RCS_ERR_NOTFOUND means nothing was written; after any other error, what the
 * move wrote stays in the transaction and the caller rolls the transaction back.
 */
enum rcs_err lifecycle_move_in_tx(struct lifecycle *lc, const struct job_move *m,
				  enum store_move *result, struct job_rec *job_after);

/*
 * Applies a batch of moves (n of them, in order; a job may have several) as sets of rows in
 * one transaction of its own (docs/coordinator.md, "Reports as sets"): the jobs read and
 * locked in one statement (store_fold_prefetch), their moves folded (store_fold_begin_sets),
 * what follows each move as lifecycle_move does, except that the tallies of the groups whose
 * jobs ended are written once per group, groups in ident order, and their retries, aborts
 * and completions decided once per group after the moves are written. res[i] and errs[i]
 * get each move's result and error (RCS_ERR_NOTFOUND: no such job of m[i]'s tenant or
 * device, nothing written; RCS_ERR_BUSY: on PostgreSQL, another transaction held the job's
 * row (another coordinator's batch), so none of that job's moves was made and nothing
 * written for them, or the report skips one of its job's that is not applied yet
 * (store_fold_seq_gap), so neither it nor the job's later moves in the batch were made: the
 * caller applies them again later, in their order, with m[i].again set, so that those that
 * still skip one are found so without locking their rows: store_jobs_seq_waiting). Any
 * other error rolls the whole batch back and is returned (RCS_ERR_BUSY: the database broke
 * it off, e.g. a deadlock; apply it again).
 */
enum rcs_err lifecycle_moves(struct lifecycle *lc, const struct job_move *m, size_t n,
			     enum store_move *res, enum rcs_err *errs);

/* ---- for lifecycle_sets.c (lifecycle_moves) ---- */

/* The jobs of groups a batch ended (lifecycle_moves): their groups' tallies and what follows
 * are written once per group when the batch's moves are. */
struct lifecycle_ends {
	struct job_rec *v;
	size_t n, cap;
};

/* Keeps a copy of job (a job of a group that a move of the batch ended). */
static inline enum rcs_err lifecycle_ends_add(struct lifecycle_ends *e, const struct job_rec *job)
{
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 64;
		struct job_rec *v = (struct job_rec *)realloc(e->v, cap * sizeof(*v));

		if (v == NULL)
			return RCS_ERR_NOMEM;
		e->v = v;
		e->cap = cap;
	}
	if (store_job_rec_dup(job, &e->v[e->n]) != RCS_OK)
		return RCS_ERR_NOMEM;
	e->n++;
	return RCS_OK;
}

/* The move and what follows from it, in the caller's transaction: *wrote tells whether
 * anything was written (an error after that needs the writes undone). */
enum rcs_err lifecycle_move_steps(struct lifecycle *lc, const struct job_move *m,
				  enum store_move *result, struct job_rec *job, bool *wrote);

/* What follows for a group when jobs v[0..n) of it ended in a batch, their tallies written
 * already: the group read once, each failed job's retry, then its abort or completion. */
enum rcs_err lifecycle_group_jobs_ended(struct lifecycle *lc, const struct job_rec *v, size_t n,
					int64_t now);

/*
 * Creates the jobs of b and their group (store_jobs_create) in the caller's transaction,
 * and announces them: those not scheduled for later are due now. A single job (no group)
 * is handed to the transport's job_due inside the transaction, so the caller reads its
 * record as transmited when it was sent; a bulk send is handed over once the transaction
 * commits (store_after_commit), and nothing of it when it rolls back.
 */
enum rcs_err lifecycle_jobs_create(struct lifecycle *lc, const struct job_batch *b);

/*
 * Cancels a job of the tenant: RCS_ERR_NOTFOUND, RCS_ERR_CONFLICT when it
 * already ended. response (NULL: kept) becomes the job's response, in its record and
 * the history item of the cancel: who cancelled and why (docs/api.md "Jobs"). *job_out
 * gets the job record afterwards (freed by the caller with store_job_rec_free; zeroed on
 * an error).
 */
enum rcs_err lifecycle_cancel(struct lifecycle *lc, const char *client_root, const char *ident,
			      const char *response, int64_t now, struct job_rec *job_out);

/* ---- group sends (docs/api.md "Rollouts") ---- */

/*
 * Records a change of a group's status: the store (store_group_set_status, when the group's
 * status is one of `from`, GROUP_BIT()s; RCS_ERR_CONFLICT otherwise, *prev gets the status
 * it had) and the group event (the transport's group_changed hook, published after the
 * commit). The one place a group's status changes: whatever else must follow every change
 * (an outbox of webhooks, say) belongs here. Runs in the caller's transaction.
 */
enum rcs_err lifecycle_group_set_status(struct lifecycle *lc, const char *group_ident,
					unsigned from, enum group_status to, const char *reason,
					int64_t now, enum group_status *prev);

/* The operator's actions on a group of the tenant (PATCH /groups/<id>/pause, /resume,
 * /cancel), each in one transaction: RCS_ERR_NOTFOUND, RCS_ERR_CONFLICT when the group's
 * status doesn't allow it (*prev gets it). *out (may be NULL) gets the group's record
 * afterwards, with counts (freed with store_group_rec_free). */
enum rcs_err lifecycle_group_pause(struct lifecycle *lc, const char *client_root, const char *ident,
				   int64_t now, enum group_status *prev, struct group_rec *out);
enum rcs_err lifecycle_group_resume(struct lifecycle *lc, const char *client_root,
				    const char *ident, int64_t now, enum group_status *prev,
				    struct group_rec *out);
enum rcs_err lifecycle_group_cancel(struct lifecycle *lc, const char *client_root,
				    const char *ident, const char *user, int64_t now,
				    enum group_status *prev, struct group_rec *out);

/* Jobs a group released (the scheduler's rollout): handed to the transport once the
 * caller's transaction commits. */
enum rcs_err lifecycle_jobs_released(struct lifecycle *lc, const struct store_idents *ids);

/* A device's tags or presence changed: it joins the continuous tag sends whose tag it
 * now holds (one job per group and device). In the caller's transaction. */
enum rcs_err lifecycle_device_changed(struct lifecycle *lc, const char *client_root,
				      const char *entity_ident, int64_t now);

#endif
