/*
 * watch.h - following a group or a job until its jobs have ended (rcs watch,
 * rcs send --wait; docs/cli.md "watch").
 *
 * Polls GET /groups/<id> (or GET /jobs/<id>) every interval seconds. A group's
 * progress counts devices, each by its latest attempt (docs/api.md "Progress"),
 * so that the counts add up to the total whatever the retries. On a terminal: a
 * progress bar per status with its count and, for the final statuses, its rate
 * and the ETA of its bar at that rate, under a header with the devices ended,
 * their rate and the ETA of all (never before the rollout has released what it
 * holds), redrawn in place. Otherwise one line per change. After the first
 * answer, a poll that can't reach the API is tried again an interval later,
 * until WATCH_RETRIES polls in a row failed.
 */
#ifndef RCS_CLI_WATCH_H
#define RCS_CLI_WATCH_H

#include <stddef.h>

#include "cli.h"
#include "status.h"

#define WATCH_RETRIES 5
#define WATCH_SAMPLES 32   /* kept for the rate */
#define WATCH_WINDOW  15.0 /* seconds the rate looks back */

enum watch_out {
	WATCH_AUTO,       /* bars on a terminal, else lines */
	WATCH_TTY,        /* bars redrawn in place */
	WATCH_LINES,      /* one line per change */
	WATCH_NDJSON,     /* the API's record, one line per change (watch --json) */
	WATCH_FINAL_JSON, /* the API's last record only (send --wait --json) */
};

/* What one poll saw. */
struct watch_snap {
	double t;        /* seconds since the watch began */
	long long total; /* a group's devices (jobs from a coordinator without counts) */
	long long counts[JS__COUNT];
	long long other;    /* statuses this CLI doesn't know */
	char state[32];     /* the group's status (docs/cli.md "Rollouts"), "" when none */
	long long held;     /* open, waiting for their release (docs/api.md "Progress") */
	long long not_sent; /* cancelled before they went out */
	long long retries;  /* jobs that are a later attempt of their device */
	double release_eta; /* seconds until the rollout has released what it holds; < 0: none */
	/* what else it says (watch_detail): a job's phase and download, a group's error codes */
	char detail[160];
};

/* What a record says besides its counts, in words for the watch's header (docs/cli.md
 * "Groups and watch"): a job's phase and the download of its artifacts while under way
 * ("phase verify", "phase install, download 42 %"), a group's error codes ("rolled_back 3,
 * reboot_timeout 1"); "" when nothing. */
void watch_detail(json_object *rec, int is_group, char *out, size_t len);

/* Jobs in final statuses. */
long long watch_done(const struct watch_snap *s);
/* Whether everything has ended: the group's status says so, or, without one, done >= total. */
int watch_finished(const struct watch_snap *s);
/* Whether it ended failed: a job (a device's latest attempt) edge_error or expired, the
 * group aborted or cancelled; a job cancelled, unless its group completed (a group's jobs
 * cancelled one by one are not a failure of the group). */
int watch_failed(const struct watch_snap *s);
/* The word of a watch's end: the group's status (completed, "completed with failures",
 * aborted, cancelled) when it has one, else "done" or "ended failed"; "interrupted" when
 * interrupted. */
const char *watch_end_word(const struct watch_snap *s, int interrupted);
/* Seconds left: left jobs at rate (<= 0: unknown), never less than the release ETA of a
 * running group; < 0 when there is no telling (or nothing is left). */
double watch_eta(const struct watch_snap *s, long long left, double rate);
/* Per second over the samples within WATCH_WINDOW of the last: how fast status st
 * (JS__COUNT: all final statuses) grew; < 0 when there is no telling yet. */
double watch_rate(const struct watch_snap *samples, size_t n, int st);
/* One status line for people, "terminated [#####.....]  5/10  0.5/s  ETA 10s" (the rate
 * when rate > 0, the ETA when eta >= 0) in width columns. */
void watch_bar(char *out, size_t len, const char *label, long long count, long long total,
	       double rate, double eta, size_t width);

/*
 * Follows group (an ident) or, when group is NULL, the one job job. Returns CLI_OK
 * when every job terminated, CLI_FAILED when one ended otherwise, CLI_API (message
 * printed), CLI_INTERRUPTED on SIGINT or SIGTERM.
 */
int watch_run(struct cli *c, const char *group, const char *job, enum watch_out mode,
	      long long interval);

#endif
