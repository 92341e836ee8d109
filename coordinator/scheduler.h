/*
 * scheduler.h - every timer of the coordinator, with or without a transport
 * (docs/architecture.md): a job's ttl running out (expired), a scheduled job
 * falling due, the periodic re-send of jobs a device went quiet on, and the
 * wall clock being set or going back.
 *
 * One thread sleeps in poll() on an eventfd (sched_wake) and a timerfd that
 * fires when the wall clock is set, until the next deadline the store names
 * (store_next_wakeup) or the next re-send sweep, and at most a second, so a
 * clock step the kernel doesn't report is noticed too; storage is queried only
 * when a deadline has come. Expiry goes through the lifecycle like any status
 * change; sending is the transport's: the scheduler only tells it when.
 */
#ifndef RCS_SCHEDULER_H
#define RCS_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "lifecycle.h"
#include "store.h"

/* What a transport (bridge.c) does when the scheduler says so; called on the
 * scheduler's thread, so each must hand the work over and return at once. */
struct sched_transport {
	void *ctx;
	bool (*ready)(void *ctx); /* connected: jobs can go out now */
	/* device reports wait unapplied (the event feed's backlog; NULL: never): the reboot
	 * deadlines wait with them (sched_reboot_timeouts) */
	bool (*reports_held)(void *ctx);
	void (*send_due)(void *ctx, int64_t now); /* pending jobs whose time came */
	void (*resend)(void *ctx, int64_t now);   /* jobs without news for too long */
	int64_t resend_every;                     /* seconds between re-send sweeps */
};

struct sched;

/* Starts the thread and sets lc's timers callback (jobs with a time: sched_wake). */
enum rcs_err sched_start(struct store *st, struct lifecycle *lc, struct sched **out);
/* Plugs a transport in (t copied), or takes it out (NULL); then recomputes. */
void sched_set_transport(struct sched *s, const struct sched_transport *t);
/* Recomputes the next deadline now (a job with a scheduled_time or a ttl was made). */
void sched_wake(struct sched *s);
/* Stops the thread: no transport call after it returns. lc's callback stays set (and
 * harmless: it only wakes a thread that is gone), for the threads that may still move jobs
 * (the MQTT bridge's worker) until they stopped; then sched_free. */
void sched_stop(struct sched *s);
/* Stops the thread if still running, unsets lc's callback, frees. NULL is fine. */
void sched_free(struct sched *s);

/*
 * One look of the scheduler at the reboot deadlines (docs/mqtt.md "Status report", within):
 * the jobs whose device did not come back within the seconds of its "rebooting" report end
 * edge_error reboot_timeout ("device did not come back within N s"), with all that follows
 * a status change; a job whose report came meanwhile is left as it is (the move checks the
 * deadline again). The scheduler calls it only while its transport is connected and applies
 * the reports it takes in (a device's reports cannot reach a coordinator without its broker
 * or while they wait in its backlog), and pushes every deadline to at least now + its within
 * when that becomes so again (at start too). Returns the number of jobs that
 * were due (a full page: more may be); *moved counts those ended.
 */
size_t sched_reboot_timeouts(struct store *st, struct lifecycle *lc, int64_t now, size_t *moved);

#endif
