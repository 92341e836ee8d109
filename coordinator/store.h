/*
 * store.h - all of the coordinator's storage, behind one narrow interface.
 *
 * Every SQL statement of the coordinator lives in the store's files, one per domain
 * (store_keys.c, store_tasks.c, store_devices.c, store_jobs.c, store_queues.c,
 * store_outbox.c), which reach the database through one backend seam (store_int.h):
 * today SQLite (store_sqlite.c: WAL mode, foreign keys on, the schema versioned by
 * PRAGMA user_version and migrated by store_open). docs/architecture.md, "The store".
 *
 * Concurrency: one connection and one (recursive) lock: every call is atomic,
 * and store_tx_begin()/store_tx_end() make a group of calls one transaction
 * (the calling thread holds the lock in between). Writers never see
 * SQLITE_BUSY from each other; another process (the CLI) is waited for.
 *
 * Reads answer typed records (struct ..._rec, lists with their page), which the caller
 * frees with the matching _free function; render.h turns them into the API's JSON. JSON
 * documents that pass through (tags, variables, declared variables, constants, lists of
 * addresses and statuses, signatures) are JSON text on both sides, as the API checked
 * them. Every function returns an enum rcs_err: RCS_ERR_NOTFOUND for a missing object
 * or one of another tenant, RCS_ERR_FULL when the disk is full, RCS_ERR_DB for other
 * storage errors.
 */
#ifndef RCS_STORE_H
#define RCS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "rollout.h"
#include "status.h"
#include "uuid.h"

struct store;

/* Opens (creating when needed) and migrates the database at path. */
enum rcs_err store_open(const char *path, struct store **out);
void store_close(struct store *st);
/* A cheap query of the database (for health checks): RCS_OK, or the error of the
 * query; RCS_ERR_IO when the database file was removed or renamed since it was opened. */
enum rcs_err store_ping(struct store *st);

/*
 * Readers (docs/architecture.md, "Reads and group commit"): n more connections to the
 * database that only read, so reads never wait for a write. store_reader takes one (waiting
 * while all are taken; the store itself when there is no pool: an in-memory database or
 * a backend without readers) and store_reader_put gives it back. A reader is a struct
 * store every function that only reads takes; it sees every write committed before the
 * call. A write through it fails (RCS_ERR_DB).
 */
enum rcs_err store_readers_open(struct store *st, unsigned n);
struct store *store_reader(struct store *st);
void store_reader_put(struct store *st, struct store *r);
/* A read transaction on reader r (nothing on a store that isn't a reader): every read
 * until store_read_end sees one snapshot, so a page's count and its rows agree. */
enum rcs_err store_read_begin(struct store *r);
void store_read_end(struct store *r);

/* Groups calls into one transaction. end(commit=false) rolls back. Inside the
 * calling thread's own transaction, begin/end make a savepoint of it. */
enum rcs_err store_tx_begin(struct store *st);
enum rcs_err store_tx_end(struct store *st, bool commit);

/*
 * Runs fn(arg, committed) once the calling thread's outermost transaction has
 * ended, after the store's lock is released (committed false: rolled back, or
 * the commit failed). Registered inside a savepoint (a nested store_tx_begin)
 * that is rolled back, it runs at once with false, still inside the enclosing
 * transaction. Outside a transaction it runs at once with true. For what must
 * not happen before the data is durable, such as publishing a job's envelope.
 * RCS_ERR_NOMEM or RCS_ERR_FULL (more than STORE_ACTIONS_MAX waiting): not
 * registered, fn is not called.
 */
#define STORE_ACTIONS_MAX 1048576
enum rcs_err store_after_commit(struct store *st, void (*fn)(void *arg, bool committed), void *arg);

/*
 * A page of a list (page from 1, per_page 1..500) and the list's options, checked by the
 * API before they get here (docs/api.md "Lists"): sort is one of the keys the list takes
 * ("created_at", "update_at", "name"), never NULL; created_after/created_before bound
 * created_at (exclusive) when has_after/has_before; name is an exact name or NULL.
 */
struct store_page {
	long long page;
	long long per_page;
	const char *sort;
	bool desc;
	bool has_after, has_before;
	long long created_after, created_before;
	const char *name;
};

/* Where a page of a list stands: the page asked for and the list's total (render.h writes
 * it as {page, per_page, total_pages, total_items, items}). */
struct store_page_info {
	long long page, per_page, total;
};

/* Idents (of jobs, tasks), in the order of the query that listed them; free with
 * store_idents_free. */
struct store_idents {
	char (*v)[UUID_STR_LEN];
	size_t n;
};
void store_idents_free(struct store_idents *ids);

/* ---- tenants and API keys ---- */

enum role { ROLE_VIEWER = 0, ROLE_OPERATOR = 1, ROLE_ADMIN = 2 };
const char *role_name(enum role r);
bool role_parse(const char *s, enum role *out);

struct auth {
	char client_root[UUID_STR_LEN];
	char key_ident[UUID_STR_LEN];
	char user[128];
	enum role role;
};

enum rcs_err store_tenant_create(struct store *st, const char *client_root, int64_t now);
bool store_tenant_exists(struct store *st, const char *client_root);
enum rcs_err store_key_create(struct store *st, const char *ident, const char *client_root,
			      const char *user, enum role role, const char *key_hash, int64_t now);
/* Revokes a key; client_root NULL means any tenant (the CLI). */
enum rcs_err store_key_revoke(struct store *st, const char *client_root, const char *ident,
			      int64_t now);
/* Finds an unrevoked key by the hex SHA-256 of the key. */
enum rcs_err store_key_lookup(struct store *st, const char *key_hash, struct auth *out);
/* An API key as the API shows it (never its hash). Free with store_key_rec_free. */
struct key_rec {
	char ident[UUID_STR_LEN];
	char *user;
	enum role role;
	char client_root[UUID_STR_LEN];
	int64_t created_at;
	int64_t revoked_at; /* 0: not revoked */
};
void store_key_rec_free(struct key_rec *r);
struct store_key_list {
	struct store_page_info pg;
	struct key_rec *items;
	size_t n;
};
void store_key_list_free(struct store_key_list *l);

enum rcs_err store_key_get(struct store *st, const char *client_root, const char *ident,
			   struct key_rec *out);
enum rcs_err store_keys_list(struct store *st, const char *client_root, const struct store_page *pg,
			     struct store_key_list *out);

/* ---- scripts (client_root "" holds the stock scripts) ---- */

enum rcs_err store_script_put(struct store *st, const char *client_root, const char *name,
			      const char *src, size_t len, int64_t now, bool *created);
/* A script as the API shows it; source (with source_len) only when asked for, else NULL.
 * Free with store_script_rec_free. */
struct script_rec {
	char *name;
	char sha256[65];
	long long size;
	bool stock; /* one of the stock scripts (client_root "") */
	int64_t updated_at;
	char *source;
	size_t source_len;
};
void store_script_rec_free(struct script_rec *r);
struct store_script_list {
	struct store_page_info pg;
	struct script_rec *items;
	size_t n;
};
void store_script_list_free(struct store_script_list *l);

/* Looks in the tenant's scripts, then the stock ones. */
enum rcs_err store_script_get(struct store *st, const char *client_root, const char *name,
			      bool with_source, struct script_rec *out);
/* Exact bytes (malloc'd, NUL-terminated, caller frees) and hex sha256. */
enum rcs_err store_script_source(struct store *st, const char *client_root, const char *name,
				 char **src, size_t *len, char sha256[65]);
bool store_script_is_stock(struct store *st, const char *name);
/* RCS_ERR_CONFLICT when a task still uses it. */
enum rcs_err store_script_delete(struct store *st, const char *client_root, const char *name);
enum rcs_err store_scripts_list(struct store *st, const char *client_root,
				const struct store_page *pg, struct store_script_list *out);

/* ---- tasks ---- */

/* JSON members are JSON text (the API serializes what it validated); NULL takes the
 * default ({} or [], no signature). */
struct task_write {
	const char *ident;
	const char *client_root;
	long long version;
	const char *name;
	const char *script;
	const char *script_src; /* exact bytes of this version */
	size_t script_len;
	const char *script_sha256;
	const char *variables_info; /* object */
	const char *constants;      /* object */
	const char *comment;
	bool active, is_public, hide, allow_offline;
	long long timeout;
	const char *created_user;
	const char *update_user; /* NULL on create */
	int64_t created_at, update_at;
	const char *mail_list;   /* array of strings */
	const char *status_list; /* array of strings */
	const char *signature;   /* object or NULL */
	const char *retry;       /* the default retry of its bulk sends: object or NULL */
};

/* Inserts (version 1) or updates a task, recording the version's snapshot. */
enum rcs_err store_task_put(struct store *st, const struct task_write *t, bool is_new);

/* A task as the API shows it (docs/api.md, "Tasks"); JSON members as JSON text. Free with
 * store_task_rec_free. */
struct task_rec {
	long long version;
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *created_user;
	char *update_user; /* NULL until a second version */
	char *name;
	char *script;
	char *variables_info; /* object */
	char *constants;      /* object */
	char *comment;
	bool active, is_public, hide, allow_offline;
	int64_t created_at, update_at;
	char *mail_list;   /* array of strings */
	char *status_list; /* array of strings */
	long long timeout;
	char script_sha256[65];
	char *signature; /* object, NULL when unsigned */
	char *retry;     /* the default retry of its bulk sends: object, NULL: none */
};
void store_task_rec_free(struct task_rec *r);
struct store_task_list {
	struct store_page_info pg;
	struct task_rec *items;
	size_t n;
};
void store_task_list_free(struct store_task_list *l);

enum rcs_err store_task_get(struct store *st, const char *client_root, const char *ident,
			    struct task_rec *out);
/* store_task_get for a user who is no admin (only_visible_to; NULL: anyone): a task that is
 * neither public nor theirs is RCS_ERR_NOTFOUND, like another tenant's. */
enum rcs_err store_task_get_visible(struct store *st, const char *client_root, const char *ident,
				    const char *only_visible_to, struct task_rec *out);
/* Sets the signature (JSON text of an object, NULL: none) of the task's current version
 * (version unchanged). */
enum rcs_err store_task_set_signature(struct store *st, const char *client_root, const char *ident,
				      const char *signature);
enum rcs_err store_task_delete(struct store *st, const char *client_root, const char *ident);

struct task_filter {
	bool include_hidden;
	const char *only_visible_to; /* user: non-public tasks of others are left out; NULL: all */
};
enum rcs_err store_tasks_list(struct store *st, const char *client_root,
			      const struct task_filter *f, const struct store_page *pg,
			      struct store_task_list *out);

/* Idents of live tasks of the tenant using a script, in ident order. */
enum rcs_err store_tasks_using_script(struct store *st, const char *client_root, const char *name,
				      struct store_idents *out);

/* The immutable snapshot of one task version (what a job carries); JSON members as JSON
 * text. */
struct task_version {
	char *script_name;
	char *script_src;
	size_t script_len;
	char script_sha256[65];
	char *constants;      /* object */
	char *variables_info; /* object */
	char *signature;      /* object, NULL when unsigned */
	long long timeout;
};
enum rcs_err store_task_version_get(struct store *st, const char *task_ident, long long version,
				    struct task_version *out);
void store_task_version_free(struct task_version *tv);

/* ---- devices ---- */

/*
 * A device of the inventory as the API shows it (docs/api.md, "Devices"): tags and
 * reported_tags are JSON text (arrays of strings), last_seen 0 when never seen,
 * agent_version NULL when no state told it. Free with store_device_rec_free.
 */
struct device_rec {
	char entity_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *name;
	char *tags;
	char *reported_tags;
	bool online;
	int64_t last_seen;
	char *agent_version;
	int64_t created_at, update_at;
};
void store_device_rec_free(struct device_rec *r);

/* A page of devices (store_devices_list); free with store_device_list_free. */
struct store_device_list {
	struct store_page_info pg;
	struct device_rec *items;
	size_t n;
};
void store_device_list_free(struct store_device_list *l);

/* tags: JSON text, an array of strings (checked by the caller). */
enum rcs_err store_device_insert(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now);
enum rcs_err store_device_get(struct store *st, const char *client_root, const char *entity_ident,
			      struct device_rec *out);
/* name or tags (JSON text) NULL: unchanged. */
enum rcs_err store_device_update(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now);
enum rcs_err store_device_delete(struct store *st, const char *client_root,
				 const char *entity_ident);
/* online: -1 any, 0 offline, 1 online; tag NULL: any. */
enum rcs_err store_devices_list(struct store *st, const char *client_root, const char *tag,
				int online, const struct store_page *pg,
				struct store_device_list *out);

/* A device holding a tag, and whether it is online (store_devices_with_tag). */
struct device_presence {
	char entity_ident[UUID_STR_LEN];
	bool online;
	int64_t created_at; /* a tag send's release order (docs/api.md "Rollouts") */
};
struct store_device_presence_list {
	struct device_presence *items;
	size_t n;
};
void store_device_presence_list_free(struct store_device_presence_list *l);
/* Devices holding tag (operator or reported), in entity_ident order; more than max:
 * RCS_ERR_TOOBIG. */
enum rcs_err store_devices_with_tag(struct store *st, const char *client_root, const char *tag,
				    size_t max, struct store_device_presence_list *out);
/* Marks every device offline: a coordinator starting knows nothing of presence until the
 * broker's retained states (or Last Wills) tell it (docs/mqtt.md, "Device state"). */
enum rcs_err store_devices_presence_reset(struct store *st);
/* Whether the tenant has the device, and whether it is online. */
enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online);

/* ---- groups and jobs ---- */

struct job_new {
	char ident[UUID_STR_LEN];
	const char *entity_ident;
	long long order; /* place in the group's release order (rollouts) */
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
};

/* Creates the group (when named) and all jobs with their initial and pending
 * history, in one transaction. On PostgreSQL a batch of STORE_ANALYZE_MIN jobs or more that
 * adds a tenth or more of the jobs known at the table's last analysis analyses it. */
#define STORE_ANALYZE_MIN 256
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
};
/* Applies one status change with the rules of docs/architecture.md, "Job statuses". */
enum rcs_err store_job_move(struct store *st, const struct job_move *m, enum store_move *result);
/* store_job_move in the caller's transaction (store_tx_begin), and with the job's record:
 * when rec is not NULL and RCS_OK is returned, *rec is the job as it stands after the move
 * (unchanged unless applied; free with store_job_rec_free), read with the move instead of
 * after it. RCS_ERR_NOTFOUND (no such job, or not m's tenant's or device's) comes before
 * anything is written; after another error, what was written is the caller's to roll
 * back. */
enum rcs_err store_job_move_rec(struct store *st, const struct job_move *m, enum store_move *result,
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
enum rcs_err store_fold_flush(struct store *st);
enum rcs_err store_fold_end(struct store *st, bool write);

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
};
const char *group_status_name(enum group_status s);
bool group_status_parse(const char *s, enum group_status *out);
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
	/* the store's tallies of latest attempts: not ended, ended, failed, terminated */
	long long n_open, n_finished, n_failed, n_succeeded;
	/* the rollout's token bucket: thousandths of a job, and when (Unix ms) */
	long long tokens_milli;
	int64_t tokens_at_ms;
};
void store_group_rec_free(struct group_rec *r);
struct store_group_list {
	struct store_page_info pg;
	struct group_rec *items;
	size_t n;
};
void store_group_list_free(struct store_group_list *l);
/* Groups; only_visible_to (a user, NULL: all) leaves out the groups of others' non-public
 * tasks, as store_jobs_list does for their jobs. */
enum rcs_err store_group_get(struct store *st, const char *client_root, const char *ident,
			     const char *only_visible_to, struct group_rec *out);
enum rcs_err store_groups_list(struct store *st, const char *client_root,
			       const char *only_visible_to, const struct store_page *pg,
			       struct store_group_list *out);

/* ---- for the transport and the scheduler ---- */

/* When a job with ttl expires: max(created_at, scheduled_time) + ttl (at most INT64_MAX - 1);
 * 0 without ttl. */
int64_t store_job_expiry(int64_t created_at, int64_t scheduled_time, int64_t ttl);

/* Applies a device's state message; RCS_ERR_NOTFOUND when the tenant has no
 * such device. tags (JSON text, an array of strings; NULL: unchanged) are the device's
 * reported tags. */
enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				bool online, const char *tags, const char *agent_version,
				int64_t now, bool *came_online);

/* Idents of pending jobs that are due, for online devices (entity_ident NULL: all
 * devices), at most limit. */
enum rcs_err store_jobs_ready(struct store *st, const char *entity_ident, int64_t now, size_t limit,
			      struct store_idents *out);
/* Idents of jobs sent ("transmited") before `before` (Unix s) but not acknowledged, for
 * online devices: a job sent since (on the connection there is) needs no second envelope. */
enum rcs_err store_jobs_unacked(struct store *st, const char *entity_ident, int64_t before,
				size_t limit, struct store_idents *out);
/* Idents of jobs in a non-terminal device status with no news for `after`
 * seconds, doubling with every re-send (up to 32x), for online devices. */
enum rcs_err store_jobs_stale(struct store *st, int64_t now, int64_t after, size_t limit,
			      struct store_idents *out);
/* The wall clock went back to now: the active jobs' last news and sends are
 * brought back to it, so that a job without news is re-sent after resend_after
 * again instead of after the size of the step. */
enum rcs_err store_jobs_clock_back(struct store *st, int64_t now);
/* Idents of pending or transmited jobs whose ttl has run out. */
enum rcs_err store_jobs_expired(struct store *st, int64_t now, size_t limit,
				struct store_idents *out);
/* Records a (re-)send of the job's envelope. */
enum rcs_err store_job_mark_sent(struct store *st, const char *ident, int64_t now);
/* The next time (Unix s) a scheduled job falls due, a held job's retry backoff ends or a ttl runs
 * out; 0 when none. */
enum rcs_err store_next_wakeup(struct store *st, int64_t now, int64_t *next);

/*
 * ---- claims: several coordinators on one database (docs/architecture.md "Claims") ----
 * The queries of due work above (jobs ready, unacknowledged, stale, expired; groups
 * releasing; notifications and webhook deliveries due) claim what they return for this
 * node until now + lease: another node passes over a claimed row until its lease ends,
 * the node itself may take it again. On PostgreSQL a claim skips the rows another
 * coordinator is claiming at that moment (FOR UPDATE SKIP LOCKED).
 */
#define STORE_LEASE_DEFAULT 15 /* seconds */
/* The node id claims are made under and the lease (seconds; <= 0: the default). */
void store_claims_setup(struct store *st, const char *node, int64_t lease);
/* Whether other coordinators may share the database (PostgreSQL). */
bool store_shared(const struct store *st);
/* Claims one job for this node (its first send, in the move's transaction). */
enum rcs_err store_job_claim(struct store *st, const char *ident, int64_t now);
/* The broker acknowledged these jobs' envelopes: this node's claims on them end. */
enum rcs_err store_jobs_unclaim(struct store *st, const struct store_idents *ids);
/* Jobs sent under another node's claim that lapsed before the broker acknowledged them:
 * claimed to be sent again. */
enum rcs_err store_jobs_orphaned(struct store *st, int64_t now, size_t limit,
				 struct store_idents *out);
/* Renews this node's claim on a notification about to be sent: *held false when the claim
 * lapsed meanwhile (another node may send it) or it was sent already. */
enum rcs_err store_notification_renew(struct store *st, long long id, int64_t now, bool *held);
/* Gives up every claim of this node (a clean stop) and wakes the others. */
enum rcs_err store_claims_release(struct store *st);
/* This node is running (now): its row of the coordinators on the database. */
enum rcs_err store_node_beat(struct store *st, int64_t now);
/* How many other nodes showed a sign of life within the lease before now. */
enum rcs_err store_nodes_others(struct store *st, int64_t now, long long *n);
/* The database server's clock (Unix s): leases and signs of life are counted with each
 * coordinator's own clock, which must agree with the others' (docs/scale-out.md). */
enum rcs_err store_clock(struct store *st, int64_t *now);
/* Whether this node's row is there before its first sign of life: its last run did not stop
 * cleanly (a clean stop removes it, store_node_gone). */
enum rcs_err store_node_left(struct store *st, bool *found);
/* Removes the rows of the other nodes whose sign of life lapsed (none within the lease before
 * now); *n: how many this node removed (0 when another node took them first). */
enum rcs_err store_nodes_lapsed(struct store *st, int64_t now, long long *n);
/* Up to limit in-flight jobs (sent before `before`, Unix s, not ended on the device) of online
 * devices, with an ident after `after` ("" or NULL: from the first), claimed to be sent
 * again. */
enum rcs_err store_jobs_inflight(struct store *st, const char *after, int64_t before, int64_t now,
				 size_t limit, struct store_idents *out);
/* How many in-flight jobs of online devices store_jobs_inflight would still find from the
 * first (sent before `before`), whoever claims or locks them: those it passed over, locked
 * by another transaction (PostgreSQL's SKIP LOCKED) or claimed by another node. */
enum rcs_err store_jobs_inflight_left(struct store *st, int64_t before, long long *n);
/* This node stops: its row goes. */
enum rcs_err store_node_gone(struct store *st);
/* Calls fn (on a thread of the store's) whenever another transaction committed work that
 * may be due (PostgreSQL's LISTEN/NOTIFY; nothing on SQLite). */
enum rcs_err store_listen(struct store *st, void (*fn)(void *ctx), void *ctx);
void store_listen_stop(struct store *st);

/* ---- for the notifier ---- */

/* A queued notification whose time has come; free with store_notification_due_free. */
struct notification_due {
	long long id;
	char job_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *status; /* the job status the mail is about */
	char *address;
	long long attempts;
	int64_t created_at;
};
void store_notification_due_free(struct notification_due *r);
struct store_notification_due_list {
	struct notification_due *items;
	size_t n;
};
void store_notification_due_list_free(struct store_notification_due_list *l);
/* Queued notifications whose time has come, oldest first, at most limit. */
enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit,
				     struct store_notification_due_list *out);
/* When the next queued notification is due (0: none). */
enum rcs_err store_notification_next(struct store *st, int64_t *next);
/* Records an attempt: state queued (retry at next_at), sent, failed or suppressed. */
enum rcs_err store_notification_update(struct store *st, long long id, const char *state,
				       int64_t now, int64_t next_at, const char *error);
/* Mails sent for the tenant since the given time (the hourly cap). */
enum rcs_err store_notifications_sent_since(struct store *st, const char *client_root,
					    int64_t since, long long *n);

/* ---- webhooks (docs/api.md, "Webhooks") ---- */

/* What a webhook is saved with; JSON members are JSON text the API checked (events and
 * statuses: arrays of strings). */
struct webhook_write {
	const char *ident;
	const char *client_root;
	const char *url;
	const char *events;
	const char *statuses;
	const char *secret;
	const char *created_user;
	int64_t now;
};
/* A webhook as the API shows it: never its secret. Free with store_webhook_rec_free. */
struct webhook_rec {
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *url;
	char *events;   /* array of strings */
	char *statuses; /* array of strings, [] for all */
	bool active;
	char *created_user;
	int64_t created_at, update_at;
};
void store_webhook_rec_free(struct webhook_rec *r);
struct store_webhook_list {
	struct store_page_info pg;
	struct webhook_rec *items;
	size_t n;
};
void store_webhook_list_free(struct store_webhook_list *l);
enum rcs_err store_webhook_insert(struct store *st, const struct webhook_write *w);
enum rcs_err store_webhook_get(struct store *st, const char *client_root, const char *ident,
			       struct webhook_rec *out);
/* Changes what is not NULL (active: -1 unchanged, 0 or 1). */
enum rcs_err store_webhook_update(struct store *st, const char *client_root, const char *ident,
				  const char *url, const char *events, const char *statuses,
				  const char *secret, int active, int64_t now);
/* Deletes the webhook with its deliveries and their attempts. */
enum rcs_err store_webhook_delete(struct store *st, const char *client_root, const char *ident);
enum rcs_err store_webhooks_list(struct store *st, const char *client_root,
				 const struct store_page *pg, struct store_webhook_list *out);

/* One attempt to deliver: when, how long, the receiver's HTTP status (0: no answer) and the
 * error (NULL: a 2xx answer). */
struct webhook_attempt_rec {
	int64_t at;
	long long duration_ms;
	long long status_code;
	char *error;
};
/* A delivery with its attempts (state queued, delivered or failed). */
struct webhook_delivery_rec {
	char ident[UUID_STR_LEN];
	char *type;                 /* job.status or group.status */
	char subject[UUID_STR_LEN]; /* the job or group */
	char *status;               /* the status the event is about */
	int64_t at;                 /* when the status changed */
	char *state;
	long long n_attempts;
	int64_t created_at, next_at, done_at;
	char *last_error;
	struct webhook_attempt_rec *attempts;
	size_t n;
};
struct store_webhook_delivery_list {
	struct store_page_info pg;
	struct webhook_delivery_rec *items;
	size_t n;
};
void store_webhook_delivery_list_free(struct store_webhook_delivery_list *l);
/* The webhook's deliveries, newest first, each with every attempt. */
enum rcs_err store_webhook_deliveries(struct store *st, const char *client_root, const char *ident,
				      const struct store_page *pg,
				      struct store_webhook_delivery_list *out);

/*
 * Records a group.status delivery for every webhook of the tenant that wants it, in the
 * caller's transaction (the status change's): called wherever a group's status changes.
 */
enum rcs_err store_webhook_group_event(struct store *st, const char *client_root,
				       const char *group_ident, const char *status, int64_t now);

/* ---- for the webhook sender ---- */

/* A queued delivery whose time has come, with what sending it takes. */
struct webhook_due {
	long long id;
	char ident[UUID_STR_LEN];
	char webhook_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char type[16];
	char subject[UUID_STR_LEN];
	long long hist_n;
	char status[32];
	int64_t at;
	long long attempts;
	int64_t created_at;
	char *url;
	char *secret;
};
void store_webhook_due_free(struct webhook_due *r);
struct store_webhook_due_list {
	struct webhook_due *items;
	size_t n;
};
void store_webhook_due_list_free(struct store_webhook_due_list *l);
/* Due deliveries, oldest first, at most limit, none behind an earlier queued delivery of the
 * same webhook and subject (the order per job), none of the ids in skip[0..n_skip-1]; of one
 * webhook at most its per_hook oldest are read (0: no bound), those of skip among them, so
 * that a webhook with thousands due never crowds the others out of the answer. */
enum rcs_err store_webhooks_due(struct store *st, int64_t now, const long long *skip, size_t n_skip,
				size_t limit, size_t per_hook, struct store_webhook_due_list *out);
/* Records an attempt and the delivery's new state (queued: retry at next_at). */
enum rcs_err store_webhook_attempt(struct store *st, long long id,
				   const struct webhook_attempt_rec *a, const char *state,
				   int64_t next_at);
/* A job's history item n (1 for initial). */
enum rcs_err store_job_history_item(struct store *st, const char *job_ident, long long n,
				    struct history_rec *out);
/* Queued deliveries (the backlog). */
enum rcs_err store_webhook_backlog(struct store *st, long long *n);

/* ---- the audit log (docs/api.md, "Audit") ---- */

/* One record; every text may be NULL but method and path. */
struct audit_rec {
	long long id;
	char *client_root;
	int64_t ts;
	char *user;
	char *key_ident;
	char *method;
	char *path;
	char *target;
	long long status_code;
	char *remote;
};
void store_audit_rec_free(struct audit_rec *r);
/* The tenant of an API key (any tenant's: for the operator's command line). */
enum rcs_err store_key_client_root(struct store *st, const char *key_ident, char out[UUID_STR_LEN]);
/* Appends a record (in the caller's transaction when there is one). */
enum rcs_err store_audit_add(struct store *st, const struct audit_rec *r);
struct audit_filter {
	const char *user, *target;
	bool has_since, has_until;
	int64_t since, until; /* inclusive */
};
struct store_audit_list {
	struct store_page_info pg;
	struct audit_rec *items;
	size_t n;
};
void store_audit_list_free(struct store_audit_list *l);
/* The tenant's records, newest first. */
enum rcs_err store_audit_list(struct store *st, const char *client_root,
			      const struct audit_filter *f, const struct store_page *pg,
			      struct store_audit_list *out);

/* ---- for the metrics (docs/coordinator.md, "Metrics") ---- */

/* Jobs per status now, over every tenant: n[status] for each enum job_status. */
enum rcs_err store_jobs_by_status(struct store *st, long long n[JS__COUNT]);
/* Devices online now. */
enum rcs_err store_devices_online(struct store *st, long long *n);
/* Queued e-mail notifications. */
enum rcs_err store_notification_backlog(struct store *st, long long *n);
/* When the job first came to status (*at 0: never). */
enum rcs_err store_job_status_at(struct store *st, const char *job_ident, enum job_status status,
				 int64_t *at);
/* The database's size in bytes. */
enum rcs_err store_db_size(struct store *st, long long *bytes);

/* ---- group sends: rollouts, aborts, retries, continuous sends (store_groups.c) ---- */

/* The response of a job that waits for its group's release (docs/api.md "Rollouts"). */
#define STORE_HELD_RESPONSE "waiting for rollout"

/* A group of any tenant (client_root NULL), with its tallies; with_counts adds the counts
 * per status (store_group_get's). RCS_ERR_NOTFOUND when there is none. */
enum rcs_err store_group_read(struct store *st, const char *client_root, const char *ident,
			      bool with_counts, struct group_rec *out);

/* The bit of a status in the `from` sets of store_group_set_status. */
#define GROUP_BIT(s) (1u << (unsigned)(s))
/* Sets a group's status when its status is one of `from` (GROUP_BIT()s): RCS_ERR_CONFLICT
 * otherwise; *prev (may be NULL) gets the status it had. reason NULL keeps the reason. */
enum rcs_err store_group_set_status(struct store *st, const char *ident, unsigned from,
				    enum group_status to, const char *reason,
				    enum group_status *prev);

/* Running groups with a held job due by now (its retry's backoff and its scheduled time
 * past), oldest first, at most limit, without counts; after (when not NULL) the group
 * after_created_at/after_ident comes last: only groups after it in that order are read, so
 * that a caller can page through them all. */
enum rcs_err store_groups_releasing(struct store *st, int64_t now, const char *after_ident,
				    int64_t after_created_at, size_t limit,
				    struct store_group_list *out);

/* Releases (held = 0, the ttl running from now) up to limit held jobs of the group whose
 * time has come (release_at <= now), in release order, and keeps the bucket's new state
 * (tokens_milli, at tokens_at_ms, less a job per job released; a negative tokens_milli: the
 * group has no rate and no bucket to keep); out gets their idents. *next_at:
 * when the earliest job still held may go (now: one is due already; 0: none is held). */
enum rcs_err store_group_release(struct store *st, const char *group, int64_t now, size_t limit,
				 long long tokens_milli, int64_t tokens_at_ms,
				 struct store_idents *out, int64_t *next_at);

/* Holds the group's jobs not yet sent (pending) again, with response (a pause). */
enum rcs_err store_group_hold(struct store *st, const char *group, const char *response);

/* Idents of the group's jobs that have not ended (unsent_only: only those not yet
 * transmited), at most limit. */
enum rcs_err store_group_jobs_open(struct store *st, const char *group, bool unsent_only,
				   size_t limit, struct store_idents *out);

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
