/*
 * watch.h - following a group or a job until its jobs have ended (rcs watch,
 * rcs send --wait; docs/cli.md "watch").
 *
 * Polls GET /groups/<id> (or GET /jobs/<id>) every interval seconds. On a
 * terminal: a progress bar per status with its count and, for the final
 * statuses, its rate and the ETA of its bar at that rate, under a header with
 * the jobs ended, their rate and the ETA of all, redrawn in place. Otherwise
 * one line per change. After the first answer, a poll that can't reach the API
 * is tried again an interval later, until WATCH_RETRIES polls in a row failed.
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
	double t; /* seconds since the watch began */
	long long total;
	long long counts[JS__COUNT];
	long long other; /* statuses this CLI doesn't know */
	char state[32];  /* the group's status (docs/cli.md "Rollouts"), "" when none */
};

/* Jobs in final statuses. */
long long watch_done(const struct watch_snap *s);
/* Whether everything has ended: the group's status says so, or, without one, done >= total. */
int watch_finished(const struct watch_snap *s);
/* Whether it ended failed: a job edge_error, expired or cancelled, or the group aborted
 * or cancelled. */
int watch_failed(const struct watch_snap *s);
/* Per second over the samples within WATCH_WINDOW of the last: how fast status st
 * (JS__COUNT: all final statuses) grew; < 0 when there is no telling yet. */
double watch_rate(const struct watch_snap *samples, size_t n, int st);
/* One status line for people, "terminated [#####.....]  5/10  0.5/s  ETA 10s" (rate and
 * ETA when rate > 0) in width columns. */
void watch_bar(char *out, size_t len, const char *label, long long count, long long total,
	       double rate, size_t width);

/*
 * Follows group (an ident) or, when group is NULL, the one job job. Returns CLI_OK
 * when every job terminated, CLI_FAILED when one ended otherwise, CLI_API (message
 * printed), CLI_INTERRUPTED on SIGINT or SIGTERM.
 */
int watch_run(struct cli *c, const char *group, const char *job, enum watch_out mode,
	      long long interval);

#endif
