/*
 * store_groups.h - the store's groups of jobs (a bulk send's) and group sends: rollouts, aborts,
 * retries, continuous sends (store_groups.c; the API's reads: store_group_reads.c; docs/api.md
 * "Rollouts"). See store.h.
 */
#ifndef RCS_STORE_GROUPS_H
#define RCS_STORE_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rollout.h"
#include "status.h"
#include "store.h"
#include "store_group_codes.h"

/* A group of jobs (a bulk send's); with_counts (store_group_get): its jobs' total and how
 * many are in each status (statuses, n_statuses of them, in the order of their names). */
struct group_count {
	enum job_status status;
	long long n;
};
enum group_status {
	GROUP_RUNNING,
	GROUP_PAUSED,
	GROUP_COMPLETED,
	GROUP_ABORTED,
	GROUP_CANCELLED,
	GROUP__COUNT
};
const char *group_status_name(enum group_status s);
bool group_status_parse(const char *s, enum group_status *out);
/* A device a group's send left out: its ident, the API's error code and message. */
struct group_rejected {
	char entity_ident[UUID_STR_LEN];
	char *code;
	char *message;
};

/* A group's progress, one count per device: its latest attempt (docs/api.md "Progress").
 * devices = ended + open; ended = succeeded + failed + cancelled. held, not_sent,
 * retries and release_eta_s only with_counts (store_group_get), else 0 and -1. */
struct group_progress {
	long long devices, ended, succeeded, failed, cancelled, open;
	long long held;          /* open, waiting for release (rollout, window, retry, pause) */
	long long not_sent;      /* cancelled before it went to its device */
	long long retries;       /* jobs that are a later attempt (total - devices) */
	long long release_eta_s; /* seconds to release what is held at the pace; -1: none */
};

struct group_rec {
	char ident[UUID_STR_LEN];
	char *name;
	char *created_user;
	int64_t created_at;
	char task_ident[UUID_STR_LEN];
	bool with_counts;
	long long total;
	struct group_count statuses[JS__COUNT];
	size_t n_statuses;
	/* group sends (docs/api.md "Rollouts") */
	char client_root[UUID_STR_LEN];
	enum group_status status;
	char *reason; /* NULL: none */
	long long task_version;
	char *task_name;
	char *tag; /* a tag send's tag; NULL for a list send */
	struct group_settings settings;
	/* with_counts: the latest attempt of each device, per status */
	struct group_count counts[JS__COUNT];
	size_t n_counts;
	/* with_counts: the latest attempts that ended edge_error, per error_code (in the order
	 * of the codes, at most GROUP_MAX_ERROR_CODES of them) */
	struct group_error_count error_codes[GROUP_MAX_ERROR_CODES];
	size_t n_error_codes;
	/* the store's tallies of latest attempts: not ended, ended, failed, terminated */
	long long n_open, n_finished, n_failed, n_succeeded;
	/* from the tallies, or (with_counts) from the counts */
	struct group_progress progress;
	/* the rollout's token bucket: thousandths of a job, and when (Unix ms) */
	long long tokens_milli;
	int64_t tokens_at_ms;
	/* with_rejected (store_group_get): the devices the send left out, and why */
	bool with_rejected;
	struct group_rejected *rejected;
	size_t n_rejected;
};
void store_group_rec_free(struct group_rec *r);
struct store_group_list {
	struct store_page_info pg;
	struct group_rec *items;
	size_t n;
};
void store_group_list_free(struct store_group_list *l);
/* The filters of a list of groups besides pg's name (docs/api.md "Bulk sends and groups"):
 * each NULL when not given; status a group status's name, task_ident an ident, tag a tag
 * send's tag. */
struct store_group_filter {
	const char *status, *task_ident, *tag;
};
/* Groups; only_visible_to (a user, NULL: all) leaves out the groups of others' non-public
 * tasks, as store_jobs_list does for their jobs; f may be NULL (no filter). */
enum rcs_err store_group_get(struct store *st, const char *client_root, const char *ident,
			     const char *only_visible_to, struct group_rec *out);
enum rcs_err store_groups_list(struct store *st, const char *client_root,
			       const char *only_visible_to, const struct store_group_filter *f,
			       const struct store_page *pg, struct store_group_list *out);

/* How many groups of every tenant are in each status (the metrics' gauge), n indexed by
 * enum group_status. */
enum rcs_err store_groups_by_status(struct store *st, long long n[GROUP__COUNT]);

/* The response of a job that waits for its group's release (docs/api.md "Rollouts"), and
 * of one whose group is paused. */
#define STORE_HELD_RESPONSE   "waiting for rollout"
#define STORE_PAUSED_RESPONSE "group paused"

/* A group of any tenant (client_root NULL), with its tallies; with_counts adds the counts
 * per status (store_group_get's). RCS_ERR_NOTFOUND when there is none. */
enum rcs_err store_group_read(struct store *st, const char *client_root, const char *ident,
			      bool with_counts, struct group_rec *out);

/* A group's download limits (docs/api.md "Download limits"): 0 for each not given. */
enum rcs_err store_group_download(struct store *st, const char *ident, long long *max_concurrent,
				  long long *max_bytes_per_s);

/* The bit of a status in the `from` sets of store_group_set_status. */
#define GROUP_BIT(s) (1u << (unsigned)(s))
/* Sets a group's status when its status is one of `from` (GROUP_BIT()s): RCS_ERR_CONFLICT
 * otherwise; *prev (may be NULL) gets the status it had. reason NULL keeps the reason. */
enum rcs_err store_group_set_status(struct store *st, const char *ident, unsigned from,
				    enum group_status to, const char *reason,
				    enum group_status *prev);

/* A pause: the group's jobs not yet sent (pending) are held, those the rollout held
 * already too, each with the response STORE_PAUSED_RESPONSE. */
enum rcs_err store_group_hold(struct store *st, const char *group);
/* A resume: the jobs the pause held say again what they wait for: a retry's backoff
 * ("waiting for retry: attempt N") until release_at (after now), else the release. */
enum rcs_err store_group_unhold(struct store *st, const char *group, int64_t now);

/* Idents of the group's jobs that have not ended (unsent_only: only those not yet
 * transmited), at most limit. */
enum rcs_err store_group_jobs_open(struct store *st, const char *group, bool unsent_only,
				   size_t limit, struct store_idents *out);

/* A job of the group ended with status to, in the move's transaction
 * (lifecycle_move_follow): the group's tallies. */
enum rcs_err store_group_job_ended(struct store *st, const char *group, enum job_status to);
/* The same for several jobs of the group at once: finished of them ended, failed and
 * succeeded of those. */
enum rcs_err store_group_jobs_ended(struct store *st, const char *group, long long finished,
				    long long failed, long long succeeded);

/* Creates job `ident`, attempt + 1 of the failed job `failed` (same device, group, task
 * version, variables and ttl), held until release_at with response; the failed job is no
 * longer its device's latest attempt. */
enum rcs_err store_group_retry(struct store *st, const char *failed, const char *ident, int64_t now,
			       int64_t release_at, const char *response);

/* For continuous tag sends: creates the job of each running or paused continuous group of
 * the tenant whose tag the device now holds (operator or reported tag) and that has no job
 * for it yet; only for a device that is online or whose task allows offline devices. out:
 * the idents created, held[i] whether it waits for release (a rollout, a window, a pause). */
enum rcs_err store_groups_continuous_add(struct store *st, const char *client_root,
					 const char *entity_ident, int64_t now,
					 struct store_idents *out, bool **held);

#endif
