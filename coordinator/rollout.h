/*
 * rollout.h - the arithmetic of group sends (docs/api.md, "Rollouts"): release rates and
 * their token bucket, maintenance windows, retry delays, and which failure causes are
 * never retried. Pure functions of their arguments (no clock, no storage): the scheduler
 * and the lifecycle call them with the group's settings and the time.
 */
#ifndef RCS_ROLLOUT_H
#define RCS_ROLLOUT_H

#include <stdbool.h>
#include <stdint.h>

/* Factors and percentages are kept as integers: thousandths of a factor, hundredths of a
 * percent (1.5 is 1500, 12.5 % is 1250). */
#define ROLLOUT_MILLI     1000
#define ROLLOUT_PCT_SCALE 100

#define ROLLOUT_MAX_RATE     100000 /* jobs per minute */
#define ROLLOUT_MAX_ATTEMPTS 10
#define ROLLOUT_MAX_DELAY    86400 /* seconds: the longest retry delay */

/* A group's settings, as the API checked them (0 / false: not given). */
struct group_settings {
	/* rollout */
	long long max_per_minute;  /* 0: no cap */
	long long base_per_minute; /* 0: not exponential */
	long long factor_milli;    /* exponential factor, thousandths (1000..10000) */
	long long after_succeeded; /* exponential step: jobs terminated */
	/* abort */
	bool has_abort;
	long long failure_pct; /* hundredths of a percent, 0..10000 */
	long long min_finished;
	/* window */
	bool has_window;
	unsigned days;            /* bit 0 Monday .. bit 6 Sunday, the window's local days */
	long long start_min;      /* minutes after local midnight, 0..1439 */
	long long duration_min;   /* 1..1440 */
	long long utc_offset_min; /* -720..840 */
	/* retry */
	bool has_retry;
	long long max_attempts;  /* 1..10 */
	long long backoff_s;     /* 0..86400 */
	long long backoff_milli; /* backoff factor, thousandths (1000..10000) */
	/* tag sends */
	bool continuous;
	/* download limits (docs/api.md "Download limits"); 0: none */
	long long dl_max_concurrent;
	long long dl_max_bytes_per_s;
};

/* Whether the settings hold a rollout (a rate) at all. */
bool rollout_has_rate(const struct group_settings *g);
/* Whether jobs are created held (released by the scheduler): a rollout or a window. */
bool rollout_holds(const struct group_settings *g);

/* The release rate, jobs per minute, once `succeeded` jobs of the group have terminated:
 * max_per_minute, or base × factor^(succeeded / after_succeeded) capped by max_per_minute
 * (and ROLLOUT_MAX_RATE). 0 when the settings hold no rollout (no limit). */
double rollout_rate(const struct group_settings *g, long long succeeded);

/* The token bucket of a rollout: the tokens (jobs that may be released now) at now_ms,
 * given `tokens` at at_ms and the rate. The bucket holds at most two seconds' worth of
 * jobs (at least one job): a coordinator that was stopped for a while resumes at the
 * rate, not with a burst. A clock that went back adds nothing. */
double rollout_tokens(double tokens, int64_t at_ms, int64_t now_ms, double per_minute);
/* The bucket's size at a rate. */
double rollout_bucket(double per_minute);

/* Day names (mon..sun) to their bit; -1 for anything else. */
int rollout_day_bit(const char *name);
/* The name of day bit i (0..6). */
const char *rollout_day_name(int i);
/* "HH:MM" (00:00..23:59) to minutes after midnight; -1 when malformed. */
int rollout_parse_hhmm(const char *s);

/* Whether the window is open at now (Unix seconds); true without a window. */
bool rollout_window_open(const struct group_settings *g, int64_t now);
/* The next instant (>= now) the window is open: now when it is; 0 without a window day. */
int64_t rollout_window_next(const struct group_settings *g, int64_t now);

/* Seconds from now until the last of `held` jobs waiting for their release is released:
 * at the rate of `succeeded` terminated jobs (rollout_rate; an exponential rollout's later
 * rises are not foreseen, so this is at most the time it takes), inside the window (one
 * that opens later adds the wait). 0 when nothing is held or nothing holds it back; -1 when
 * there is no telling: a window without a day, or more than a year
 * (docs/api.md "Progress"). */
int64_t rollout_release_eta(const struct group_settings *g, long long held, long long succeeded,
			    int64_t now);

/* The delay before attempt + 1 of a job whose attempt `attempt` failed (attempt >= 1):
 * backoff_s × factor^(attempt - 1), at most ROLLOUT_MAX_DELAY. */
int64_t rollout_retry_delay(const struct group_settings *g, long long attempt);

/* Whether a failure cause (docs/mqtt.md, the `error` of an edge_error report) repeats
 * identically: never retried. NULL (an agent that doesn't say) is not permanent. */
bool rollout_error_permanent(const char *code);

#endif
