/*
 * store_jobs.h - the store's jobs: creation (a bulk send's batch), reads, history, status changes
 * and their fold, notification records (store_jobs.c). See store.h.
 */
#ifndef RCS_STORE_JOBS_H
#define RCS_STORE_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "store.h"

struct group_settings;

struct job_new {
	char ident[UUID_STR_LEN];
	const char *entity_ident;
	long long order; /* place in the group's release order (rollouts) */
};

/* A device a send left out, and why (an API error code and message). */
struct job_rejected {
	const char *entity_ident;
	const char *code;
	const char *message;
};

/* JSON documents are JSON text, as the API layer checked and serialized them. */
struct job_batch {
	const char *client_root;
	const char *task_ident;
	long long task_version;
	const char *task_name;
	const char *group_ident; /* NULL: no group */
	const char *group_name;
	const char *created_user;
	const char *comment;        /* may be NULL */
	const char *variables;      /* object; NULL: {} */
	const char *mail_list;      /* array of strings; NULL: [] */
	const char *status_list;    /* array of strings; NULL: [] */
	const char *task_mail_list; /* the task's lists, kept with each job; NULL: [] */
	const char *task_status_list;
	long long scheduled_time; /* 0: none */
	long long ttl;            /* 0: none */
	int64_t now;
	struct job_new *jobs;
	size_t n;
	/* group sends (docs/api.md "Rollouts"): the new group's settings (NULL: none), the tag
	 * of a tag send (NULL: a list send), whether the jobs wait for the scheduler to release
	 * them (a rollout or a window) */
	const struct group_settings *settings;
	const char *tag;
	bool hold;
	/* the reason kept on a new group completed at once because it got no job (NULL: none;
	 * docs/api.md "Bulk sends and groups") */
	const char *empty_reason;
	/* the devices the send left out, kept with its group (docs/api.md "Bulk sends and
	 * groups") */
	const struct job_rejected *rejected;
	size_t n_rejected;
};

/* Creates the group (when named) and all jobs with their initial and pending
 * history, in one transaction. On PostgreSQL a batch of STORE_ANALYZE_MIN jobs or more that
 * adds a tenth or more of the jobs known at the table's last analysis analyses it. */
#define STORE_ANALYZE_MIN 256
/* On PostgreSQL a batch's rows, and then their history, are written this many jobs per
 * statement (docs/coordinator.md "A bulk send's jobs as sets"). */
#define STORE_JOBS_SET_CHUNK 2048
enum rcs_err store_jobs_create(struct store *st, const struct job_batch *b);

/*
 * A job: every member of the API's job record (docs/api.md, "Jobs"; render_job writes it).
 * Text is malloc'd, NULL when unset (comment, response; group_name without a group);
 * group_ident is "" without a group; variables and the notification lists are JSON text.
 * Times are Unix seconds, 0 when unset. Free with store_job_rec_free.
 */
struct job_rec {
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char entity_ident[UUID_STR_LEN];
	char task_ident[UUID_STR_LEN];
	long long task_version;
	char *task_name;
	char group_ident[UUID_STR_LEN];
	char *group_name;
	char *comment;
	enum job_status status;
	char *created_user;
	int64_t created_at, update_at, scheduled_time, response_time, ttl;
	char *response;
	char *mail_list;   /* notification_mail_list: array of strings */
	char *status_list; /* notification_status_list: array of strings */
	char *variables;   /* object */
	/* group sends (docs/api.md "Rollouts") */
	long long attempt;           /* 1 for a first send */
	char retry_of[UUID_STR_LEN]; /* "" for a first send */
	char *error_code;            /* the device's cause of an edge_error; NULL: none */
	bool held;                   /* waits for its group's release */
	int64_t expires_at;          /* 0: no ttl, or not released yet */
	/* the last progress of its downloads an edge_running report gave (docs/api.md "Jobs") */
	bool has_progress;
	long long progress_done, progress_total;
	/* jobs that span a reboot (docs/api.md "Jobs"): the phase of its last applied report
	 * (NULL: none); after a "rebooting" report, the seconds the device has to come back and
	 * the instant they run out (0: no deadline) */
	char *phase;
	int64_t reboot_within, reboot_deadline;
};
void store_job_rec_free(struct job_rec *r);
/* A copy of src into *out that owns its strings (free with store_job_rec_free):
 * RCS_ERR_NOMEM (and *out zeroed) when one can't be had. */
enum rcs_err store_job_rec_dup(const struct job_rec *src, struct job_rec *out);

/* The job of the tenant (client_root NULL: of any tenant, for internal callers):
 * RCS_ERR_NOTFOUND when there is none. */
enum rcs_err store_job_get(struct store *st, const char *client_root, const char *ident,
			   struct job_rec *out);
/* store_job_get of any tenant: the transport's read of a job it sends. */
enum rcs_err store_job_rec_get(struct store *st, const char *ident, struct job_rec *out);

/* One record of a batch at a time (the store's until the callback returns); like_first: it
 * differs from the first record handed over in nothing but ident and entity_ident. The
 * callback's error other than RCS_OK stops the walk and is returned. */
typedef enum rcs_err (*store_batch_fn)(void *arg, const struct job_rec *r, bool like_first);

/* The batch's jobs as stored (in the caller's transaction, right after store_jobs_create),
 * in the batch's order, each handed to fn: a bulk send's answer without a read per job. */
enum rcs_err store_jobs_batch_each(struct store *st, const struct job_batch *b, store_batch_fn fn,
				   void *arg);

/* One entry of a job's history: the status it came to, when, and the response and response
 * time it had then (0: none). The API shows it as the job's record with these four. */
struct history_rec {
	enum job_status status;
	int64_t at;
	char *response;
	int64_t response_time;
	char *phase; /* the job's phase then (NULL: none) */
};
struct store_history_list {
	struct store_page_info pg;
	struct history_rec *items;
	size_t n;
};
void store_history_list_free(struct store_history_list *l);
/* The job (*job, freed by the caller with store_job_rec_free) and a page of its history. */
enum rcs_err store_job_history(struct store *st, const char *client_root, const char *ident,
			       const struct store_page *pg, struct job_rec *job,
			       struct store_history_list *out);

struct job_filter {
	const char *group_ident;
	const char *task_ident;
	const char *entity_ident;
	const char *status;          /* a status name, or "running" */
	const char *only_visible_to; /* user: jobs of others' non-public tasks left out */
};
struct store_job_list {
	struct store_page_info pg;
	struct job_rec *items;
	size_t n;
};
void store_job_list_free(struct store_job_list *l);
enum rcs_err store_jobs_list(struct store *st, const char *client_root, const struct job_filter *f,
			     const struct store_page *pg, struct store_job_list *out);
/* RCS_OK when the job is the tenant's and its task visible to user (public, or
 * theirs): the rule of the task itself; RCS_ERR_NOTFOUND otherwise. */
enum rcs_err store_job_visible(struct store *st, const char *client_root, const char *ident,
			       const char *user);

enum store_move {
	STORE_MOVE_APPLIED,   /* status changed, history appended */
	STORE_MOVE_DUPLICATE, /* not after the current status, or seq already applied */
	STORE_MOVE_KEPT,      /* job ended by the coordinator: report kept in history only */
	STORE_MOVE_TERMINAL,  /* job already terminal: refused (cancel of an ended job) */
};

struct job_move {
	const char *client_root;  /* NULL: any tenant */
	const char *entity_ident; /* NULL: don't check the owner */
	const char *ident;
	enum job_status to;
	const char *response;  /* NULL keeps the current response, unless replace_response */
	bool replace_response; /* device reports: the job's response is what the report says */
	bool set_response_time;
	long long seq;  /* device seq; 0 for coordinator moves */
	bool mark_sent; /* the envelope goes out with this move: sent_at = now, sends + 1 */
	int64_t now;
	enum job_status *prev;  /* may be NULL: gets the status the job had before */
	const char *error_code; /* edge_error: the device's cause (docs/mqtt.md); NULL: none */
	/* edge_running: the downloads' progress to keep (has_progress false: keep the job's) */
	bool has_progress;
	long long progress_done, progress_total;
	/* device reports (seq > 0): the report's phase (NULL: none), which the job keeps, and
	 * on an edge_running one its within (> 0: the job's reboot deadline is now + within;
	 * any other report clears it). Coordinator moves keep the job's phase. */
	const char *phase;
	int64_t within;
	/* the scheduler's end of a job whose reboot deadline passed: applied only while the job
	 * is edge_running and its deadline is at or before now (else STORE_MOVE_DUPLICATE) */
	bool reboot_timeout;
	/* a device report held in an earlier round for its job's report before it
	 * (store_jobs_seq_waiting) */
	bool again;
};
/* What a move did. What follows from it (group tallies, e-mail and webhook records, the
 * group's retry, abort and completion, metrics, the event) is decided by lifecycle.c
 * (lifecycle_move_follow), not by the store. */
struct job_moved {
	enum store_move result;
	long long n; /* APPLIED, KEPT: the number of the history item the move added */
	bool notify; /* APPLIED: the job has addresses and statuses to mail (docs/api.md) */
	/* APPLIED: when the job first came to edge_started (0: never), as the fold knew it;
	 * -1: not known (read when needed) */
	int64_t started_at;
};
/* Applies one status change with the rules of docs/architecture.md, "Job statuses": the
 * job's row and its history item, in the caller's transaction (store_tx_begin). When rec is
 * not NULL and RCS_OK is returned, *rec is the job as it stands after the move (unchanged
 * unless applied; free with store_job_rec_free), read with the move instead of after it.
 * RCS_ERR_NOTFOUND (no such job, or not m's tenant's or device's) comes before anything is
 * written; after another error, what was written is the caller's to roll back. */
enum rcs_err store_job_move_rec(struct store *st, const struct job_move *m, struct job_moved *out,
				struct job_rec *rec);

/*
 * Folding a batch's status changes (docs/architecture.md, "One job, from POST to the final
 * report", step 6): between store_fold_begin and store_fold_end, inside the caller's
 * transaction, store_job_move_rec keeps each job it moved in memory, reads it from there
 * on its next move, and writes a job's row once for all its moves that leave it open
 * (history rows, notifications and deliveries are written at once; a move to a final
 * status or one that marks the job sent writes the row at once too). Nothing else may read
 * or change the jobs moved meanwhile: whoever would (a group's abort, retry or completion,
 * a device's state) calls store_fold_flush first. store_fold_flush writes the rows kept and
 * forgets them (RCS_OK when no fold is on). store_fold_end(st, true) writes them and ends
 * the fold; it fails, writing nothing more, when one of its moves failed or a savepoint
 * inside the fold was rolled back: the caller's transaction must then be rolled back.
 * store_fold_end(st, false) forgets them (the caller rolls back). A fold that can't be set
 * up (no memory) leaves every move as it is without one.
 */
void store_fold_begin(struct store *st);
/*
 * A fold for a batch applied as sets of rows (docs/coordinator.md, "Reports as sets"): on
 * PostgreSQL its history items are kept and written, with every row it moved (ended ones
 * too), in one statement each when it is flushed or ended; on SQLite it is store_fold_begin.
 * store_fold_prefetch reads the jobs of idents (n of them, repeats allowed) into the fold
 * in one statement, their rows locked in ident order on PostgreSQL; jobs not found are read,
 * and refused, by their moves as without it. held NULL: a row another transaction holds is
 * waited for (two coordinators applying overlapping batches wait for each other, they
 * cannot deadlock). held given (n of them): such a row is left, not waited for (SKIP
 * LOCKED), and held[i] is set for each job of idents that exists but was not read; the
 * caller must not move those in this transaction (docs/coordinator.md, "Reports as sets";
 * on SQLite, one writer: never set).
 */
void store_fold_begin_sets(struct store *st);
/* In a fold of sets (PostgreSQL): each job its moves record as sent is claimed by this node
 * (docs/architecture.md "Claims") with its row, in the statement that writes the rows,
 * instead of a claim of its own (docs/coordinator.md, "Sends as sets"). False when the fold
 * is not one of sets: the caller claims the jobs itself. */
bool store_fold_claim_sends(struct store *st);
enum rcs_err store_fold_prefetch(struct store *st, const char *const *idents, size_t n, bool *held);
/* store_fold_prefetch for a chunk of sends (docs/coordinator.md, "Sends as sets"): the
 * devices' presence read with the jobs; held as there (the jobs another coordinator is
 * sending at that moment are left to it). */
enum rcs_err store_fold_prefetch_sends(struct store *st, const char *const *idents, size_t n,
				       bool *held);
/* The job's record as the fold holds it (read by its prefetch, or as its moves left it), and
 * its device's presence as store_fold_prefetch_sends read it (*online 1 or 0; -1: not read).
 * RCS_ERR_NOTFOUND: the fold does not hold the job (or no fold is on). */
enum rcs_err store_fold_job(struct store *st, const char *ident, struct job_rec *out, int *online);
/* In a fold of sets: whether m, a device's report (seq > 0), skips a report of its job that
 * is not applied yet (its seq beyond the job's last applied one + 1) while the job is on its
 * way. With several coordinators the broker hands a job's reports to any of them, and the one
 * before may be in another's batch: the caller applies this one after it (docs/coordinator.md,
 * "Reports as sets"). False when the fold does not hold the job's row. */
bool store_fold_seq_gap(struct store *st, const struct job_move *m);
/* Before a batch of sets (PostgreSQL): wait[i] set for each device report m[i] held in an
 * earlier round (m[i].again) that still skips a report of its job (store_fold_seq_gap's
 * test), read in one statement without locking the rows, so that a report waiting for one
 * in another coordinator's batch neither locks its job's row again at each round nor keeps
 * that coordinator from it (docs/coordinator.md, "Reports as sets"). No statement when no
 * m[i].again; on SQLite (one writer, nothing held) never set. */
enum rcs_err store_jobs_seq_waiting(struct store *st, const struct job_move *m, size_t n,
				    bool *wait);
enum rcs_err store_fold_flush(struct store *st);
enum rcs_err store_fold_end(struct store *st, bool write);
/* The fold's rows no longer say what the database holds (a savepoint inside the fold was
 * rolled back: store.c's store_tx_end; what follows a move failed after the move was
 * written: lifecycle.c): store_fold_end refuses to write them. */
void store_fold_spoil(struct store *st);

/* A notification recorded for a job (one per status and address); sent_at 0: not sent. */
struct job_notification_rec {
	char *address;
	char *status;
	char *state; /* queued, sent, failed or suppressed */
	long long attempts;
	int64_t created_at, sent_at;
	char *last_error; /* NULL: none */
};
struct store_job_notification_list {
	struct store_page_info pg;
	struct job_notification_rec *items;
	size_t n;
};
void store_job_notification_list_free(struct store_job_notification_list *l);
/* The notifications recorded for a job, paged, in the order they were recorded. */
enum rcs_err store_job_notifications(struct store *st, const char *client_root, const char *ident,
				     const struct store_page *pg,
				     struct store_job_notification_list *out);

/* When a job with ttl expires: max(created_at, scheduled_time) + ttl (at most INT64_MAX - 1);
 * 0 without ttl. */
int64_t store_job_expiry(int64_t created_at, int64_t scheduled_time, int64_t ttl);
/* A job's history item n (1 for initial). */
enum rcs_err store_job_history_item(struct store *st, const char *job_ident, long long n,
				    struct history_rec *out);

/* Jobs per status now, over every tenant: n[status] for each enum job_status. */
enum rcs_err store_jobs_by_status(struct store *st, long long n[JS__COUNT]);
/* When the job first came to status (*at 0: never). */
enum rcs_err store_job_status_at(struct store *st, const char *job_ident, enum job_status status,
				 int64_t *at);

#endif
