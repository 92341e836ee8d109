/*
 * store_int.h - what the files of the store share and nothing outside the store sees: the
 * backend seam (struct store_backend, the statements every domain file runs through it),
 * struct store (the lock, transactions, after-commit actions), and the helpers that run
 * writes (store.c) and build filtered pages (store_rows.c). Every function here expects the
 * caller to hold the store's lock (store_lock) unless it says it takes it itself. No file but
 * the backends' (store_sqlite.c, store_pg.c) includes an engine's header.
 * docs/architecture.md shows the store's files.
 */
#ifndef RCS_STORE_INT_H
#define RCS_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "status.h"

struct store;
struct store_page;
struct store_page_info;

/*
 * The backend seam (docs/architecture.md, "The store"): everything the store's domain files
 * do with a database goes through these operations, so another engine is a new backend
 * file (store_sqlite.c, store_pg.c). A backend's statement begins with struct store_stmt.
 * SQL text is written in the subset both engines take (parameters as ?N, ON CONFLICT,
 * RETURNING; store_pg.c translates the rest it can); where a statement has to differ,
 * st->dialect picks its text (STORE_SQL).
 */
enum store_dialect { STORE_DIALECT_SQLITE, STORE_DIALECT_POSTGRES };

/* The text of a statement for st's engine: SQLite's or PostgreSQL's (both constant). */
#define STORE_SQL(st, sqlite, postgres)                                                            \
	((st)->dialect == STORE_DIALECT_POSTGRES ? (postgres) : (sqlite))

struct store_stmt {
	const struct store_backend *be;
	/* stepped since it was prepared or reset: binding it again resets it first, so a
	 * statement is run once per set of arguments (a loop over idents) */
	bool ran;
};

struct store_backend {
	const char *name;
	enum store_dialect dialect;
	const char *begin_sql; /* the statement that begins a write transaction */
	/* statements without rows, ';'-separated */
	enum rcs_err (*exec)(struct store *st, const char *sql);
	/* cached: sql is constant text (a literal or static array), prepared once */
	enum rcs_err (*prepare)(struct store *st, const char *sql, bool cached,
				struct store_stmt **out);
	void (*release)(struct store *st, struct store_stmt *s);
	/* ready to run again (its arguments kept, to be bound anew) */
	void (*reset)(struct store_stmt *s);
	/* *row true: a row is there to read; false: done */
	enum rcs_err (*step)(struct store *st, struct store_stmt *s, const char *what, bool *row);
	void (*bind_text)(struct store_stmt *s, int i, const char *v, size_t len);
	void (*bind_int)(struct store_stmt *s, int i, long long v);
	void (*bind_null)(struct store_stmt *s, int i);
	bool (*is_null)(struct store_stmt *s, int i);
	const char *(*text)(struct store_stmt *s, int i); /* NULL for NULL */
	size_t (*len)(struct store_stmt *s, int i);
	long long (*integer)(struct store_stmt *s, int i);
	long long (*changes)(struct store *st); /* rows the last write changed */
	/* a transaction is open (false after the engine ended one by itself on an I/O error
	 * or a full disk) */
	bool (*in_tx)(struct store *st);
	enum rcs_err (*ping)(struct store *st);
	void (*close)(struct store *st);
	/* connects st (st->be set) to the database of path and migrates it (store_open) */
	enum rcs_err (*open)(struct store *st, const char *path);
	/* a reader (store_readers_open): another connection to the database of path, that
	 * only reads (NULL: the backend has none, reads share the writer's connection) */
	enum rcs_err (*open_reader)(struct store *r, const char *path);
	/* other coordinators may share the database (claims, docs/architecture.md "Claims") */
	bool shared;
	/* wake-ups between the coordinators sharing the database (NULL: the backend has none).
	 * listen starts calling fn (on a thread of the backend's) whenever another transaction
	 * committed work that may be due; listen_stop ends it (without the lock: it waits for
	 * that thread); notify wakes the others at the commit of the caller's transaction, what
	 * saying why. */
	enum rcs_err (*listen)(struct store *st, void (*fn)(void *ctx), void *ctx);
	void (*listen_stop)(struct store *st);
	enum rcs_err (*notify)(struct store *st, const char *what);
};

/*
 * The schema (store_schema.c): one list of migrations for both engines. Migration N runs its
 * common SQL (as written on SQLite; store_pg.c translates it, the schema's words too), then
 * the engine's own text; NULL is none. An engine's schema version counts the migrations up to
 * the last that has text for it (store_migrations_of).
 */
struct store_migration {
	const char *sql;
	const char *sqlite;
	const char *postgres;
};
extern const struct store_migration store_migrations[];
extern const size_t store_n_migrations;
size_t store_migrations_of(enum store_dialect d);

/* Writers of one group commit at most (docs/architecture.md, "Reads and group commit"). */
#define STORE_BATCH_MAX 64

/* A group commit: the callers whose transactions one database transaction holds. */
struct store_batch {
	int refs;  /* callers still holding it (under struct store's gmu) */
	int n;     /* callers that joined it */
	bool done; /* committed or failed: result says which */
	enum rcs_err result;
};

struct store_pool;

/*
 * What the core (store.c) tells a domain file's state that lasts across transactions, the fold
 * of status changes (store_fold_begin, store_jobs.c), which installs them: sp_undone, a
 * savepoint was rolled back (or failed to be released); close, the store closes.
 */
struct store_hooks {
	void (*sp_undone)(struct store *st);
	void (*close)(struct store *st);
};

struct store {
	const struct store_backend *be;
	enum store_dialect dialect;
	void *conn;           /* the backend's connection */
	pthread_mutex_t lock; /* recursive */
	int lock_count;       /* how deep the owner of lock holds it */
	int tx_depth;
	/* the writer (not a reader): its transactions are group-committed (store.c) */
	bool group;
	bool reader;             /* a connection that only reads, of the pool */
	char *path;              /* what store_open opened (for readers) */
	struct store_pool *pool; /* the readers (NULL: reads use this connection) */
	/* group commit: the batch open on the connection (NULL: none), the caller's batch
	 * while it is inside its transaction, the writers waiting for the lock */
	struct store_batch *batch, *mine;
	int queued;          /* under gmu */
	pthread_mutex_t gmu; /* the batches' state */
	pthread_cond_t gcv;  /* a batch ended */
	/* store_after_commit: what runs once the outermost transaction ends (at most
	 * STORE_ACTIONS_MAX) */
	struct store_action {
		void (*fn)(void *arg, bool committed);
		void *arg;
		int depth; /* the (savepoint) level it belongs to: dropped with it */
	} * actions;
	size_t n_actions, cap_actions;
	/* claims of once-only work (store_queues.c, docs/architecture.md "Claims"): the node
	 * that claims ("" until store_claims_setup) and for how long, in seconds */
	char claim_node[128];
	long long claim_lease;
	/* transaction boundaries so far (store_run), and whether a tenant has an active webhook
	 * as read in the transaction of that serial (webhook_enqueue in store_webhooks.c) */
	unsigned long tx_serial;
	struct {
		unsigned long serial;
		char client_root[40];
		bool any;
	} hooks_known;
	/* PostgreSQL: whether a tenant has an active webhook, kept while the backend listens
	 * (webhook_any in store_webhooks.c): hooks_gen counts the webhooks' changes (this
	 * connection's writes, another coordinator's NOTIFY 'webhooks', a LISTEN connection
	 * made again); an entry read at another count is not used */
	atomic_ulong hooks_gen;
	struct {
		unsigned long gen;
		char client_root[40];
		bool any;
	} hooks_pg[8];
	unsigned hooks_pg_next;
	void *listen; /* the backend's listen (struct store_backend), NULL: none */
	/* jobs moved in a fold (store_fold_begin, store_jobs.c), NULL: none yet */
	struct store_fold *fold;
	/* what the core tells the fold, which it does not know (NULL: no fold yet) */
	const struct store_hooks *hooks;
};

/* The text elements of the JSON array x as the rows of a table alias a with a column value
 * (x: a column or a parameter), in each engine's words; a statement that uses them has one
 * text per dialect (STORE_SQL). */
#define STORE_JSON_EACH_SQ(x, a) "json_each(" x ") " a
#define STORE_JSON_EACH_PG(x, a) "json_array_elements_text(CAST(" x " AS json)) " a "(value)"

/* A job's stage on PostgreSQL (migration 13, docs/coordinator.md "The jobs table on
 * PostgreSQL"): a column the engine computes from its status, 0 before the send (initial,
 * pending), 1 on its way (JOBS_INFLIGHT), 2 ended. It changes on a job's first and last moves
 * only, so the indexes of the transport's and scheduler's queries are partial on it rather
 * than on the status, and the moves between them are HOT updates. A query that wants such an
 * index says the stage beside its status condition (the planner cannot infer one from the
 * other); SQLite has no such column, so these are PostgreSQL's text alone (STORE_SQL). */
#define JOBS_STAGE_WAITING_PG(a)  " AND " a "stage = 0"
#define JOBS_STAGE_INFLIGHT_PG(a) " AND " a "stage = 1"
#define JOBS_STAGE_OPEN_PG(a)     " AND " a "stage < 2"

/* The jobs on their way: sent and not yet ended on the device. */
#define JOBS_INFLIGHT                                                                              \
	"(status = 'transmited' OR status = 'edge_transmitted' OR status = 'edge_started' OR"      \
	" status = 'edge_running')"

/* WHERE clauses with text parameters only, so nothing a client sends is ever SQL text;
 * store_qb_opts holds the list options' bounds and ORDER BY (docs/api.md "Lists"). */
#define STORE_QB_PARAMS 12
struct store_qb {
	char where[1024];
	const char *params[STORE_QB_PARAMS];
	int n;
	bool overflow; /* a clause or parameter did not fit: the query is refused */
};

struct store_qb_opts {
	char after[24], before[24];
	char prefix[40], suffix[40]; /* LIKE patterns: an ident part and % */
	char order[160];
};

/*
 * A backend names its operations prefix_exec, prefix_prepare...: STORE_BACKEND_OPS(prefix)
 * fills them into its struct store_backend (those it may lack, shared and the wake-ups, it
 * sets itself).
 */
#define STORE_BACKEND_OPS(p)                                                                       \
	.exec = p##_exec, .prepare = p##_prepare, .release = p##_release, .reset = p##_reset,      \
	.step = p##_step, .bind_text = p##_bind_text, .bind_int = p##_bind_int,                    \
	.bind_null = p##_bind_null, .is_null = p##_is_null, .text = p##_text, .len = p##_len,      \
	.integer = p##_integer, .changes = p##_changes, .in_tx = p##_in_tx, .ping = p##_ping,      \
	.close = p##_close, .open = p##_open, .open_reader = p##_open_reader

/* The backends: SQLite's (store_sqlite.c), PostgreSQL's (store_pg.c, WITH_POSTGRES). */
extern const struct store_backend store_sqlite_backend;
extern const struct store_backend store_pg_backend;
/* Whether db is a PostgreSQL URL (postgresql://, postgres://): the backend of store_pg.c. */
bool store_pg_url(const char *db);

/* ---- claims and wake-ups of several coordinators (store_queues.c, store_pg.c) ---- */

/* A claim is free to node ?N when it has none, its lease ended before ?M, or it is node's
 * own (a claim is re-taken by its holder, so one coordinator works as without claims). */
#define STORE_CLAIM_FREE(node, now)                                                                \
	"(lease_until IS NULL OR lease_until < " now " OR claimed_by = " node ")"
/* The locking clause of a claim's inner SELECT: PostgreSQL's rows another transaction is
 * claiming are passed over; SQLite has one writer. */
#define STORE_SKIP_LOCKED_PG " FOR UPDATE SKIP LOCKED"
/* The node and the lease's end as a claim binds them. */
const char *store_claim_node(const struct store *st);
long long store_claim_until(const struct store *st, int64_t now);

/* ---- statements through the backend (the domain files' only way to the database) ---- */

/* A statement of constant SQL (a literal or static array), prepared once and kept. */
enum rcs_err store_stmt(struct store *st, const char *sql, struct store_stmt **out);
/* A statement of SQL built at run time, for this use only. */
enum rcs_err store_stmt_fresh(struct store *st, const char *sql, struct store_stmt **out);
/* Ends the use of a statement (NULL is fine). */
void store_stmt_done(struct store *st, struct store_stmt *s);
/* Steps s: *row true when a row is there to read, false when done; errors logged with what. */
enum rcs_err store_next(struct store *st, struct store_stmt *s, const char *what, bool *row);
/* Steps a write (or a one-row read) to its end: RCS_OK, or the error. */
enum rcs_err store_done(struct store *st, struct store_stmt *s, const char *what);
long long store_changes(struct store *st);

/* Parameters, numbered from 1: text NULL binds NULL; store_arg_opt_int binds 0 as NULL. */
/* A statement that ran is reset before its arguments are bound again. */
static inline void store_arg_ready(struct store_stmt *s)
{
	if (s->ran) {
		s->be->reset(s);
		s->ran = false;
	}
}

static inline void store_arg_text(struct store_stmt *s, int i, const char *v)
{
	store_arg_ready(s);
	if (v)
		s->be->bind_text(s, i, v, (size_t)-1);
	else
		s->be->bind_null(s, i);
}
static inline void store_arg_textn(struct store_stmt *s, int i, const char *v, size_t len)
{
	store_arg_ready(s);
	s->be->bind_text(s, i, v, len);
}
static inline void store_arg_int(struct store_stmt *s, int i, long long v)
{
	store_arg_ready(s);
	s->be->bind_int(s, i, v);
}
static inline void store_arg_null(struct store_stmt *s, int i)
{
	store_arg_ready(s);
	s->be->bind_null(s, i);
}
static inline void store_arg_opt_int(struct store_stmt *s, int i, long long v)
{
	if (v)
		s->be->bind_int(s, i, v);
	else
		s->be->bind_null(s, i);
}

/* Columns of the current row, numbered from 0. Text is the statement's until the next step. */
static inline bool store_val_null(struct store_stmt *s, int i)
{
	return s->be->is_null(s, i);
}
static inline const char *store_val_text(struct store_stmt *s, int i)
{
	return s->be->text(s, i);
}
static inline size_t store_val_len(struct store_stmt *s, int i)
{
	return s->be->len(s, i);
}
static inline long long store_val_int(struct store_stmt *s, int i)
{
	return s->be->integer(s, i);
}
static inline bool store_val_bool(struct store_stmt *s, int i)
{
	return s->be->integer(s, i) != 0;
}

/* ---- the lock, plain statements, writes, one-row reads (store.c) ---- */

void store_lock(struct store *st);
void store_unlock(struct store *st);
/* One parameterless statement of constant SQL through the statement cache. */
enum rcs_err store_run(struct store *st, const char *sql);
/*
 * Who may see a task (docs/api.md, "Tasks"): an admin every task of the tenant, anyone else
 * the public ones and their own. STORE_TASK_HIDDEN(t, user) is the SQL condition, on the
 * tasks row named t, that hides it from the user parameter user: the one place it is
 * written, for tasks, their jobs and their groups.
 */
#define STORE_TASK_HIDDEN(t, user) "(" t ".public = 0 AND " t ".created_user != " user ")"
/* One write statement with text parameters (NULL binds NULL); *changes (may be NULL) gets
 * the rows it changed. Takes the lock. */
enum rcs_err store_write(struct store *st, const char *sql, int *changes, int n, ...);
/* The one row of sql with up to three text parameters (NULL: not bound), read by fn (its
 * result is the call's); RCS_ERR_NOTFOUND when there is none. Takes the lock. */
typedef enum rcs_err (*store_one_fn)(struct store_stmt *s, void *arg);
enum rcs_err store_get_one(struct store *st, const char *sql, const char *p1, const char *p2,
			   const char *p3, store_one_fn fn, void *arg);
/* A store_one_fn: the row's first column as a number into *(long long *)arg (NULL: 0). */
enum rcs_err store_row_int(struct store_stmt *s, void *arg);

/* A savepoint inside the caller's transaction, or a transaction of its own; store_sp_end
 * releases or rolls it back by status and returns status. */
enum rcs_err store_sp_begin(struct store *st);
enum rcs_err store_sp_end(struct store *st, enum rcs_err status);

/* ---- a row's values, filtered lists and their pages (store_rows.c) ---- */

/* A malloc'd copy of a text column (NULL for NULL, or when out of memory: *err set). */
char *store_val_dup(struct store_stmt *s, int i, enum rcs_err *err);
/* Copies a text column into a fixed buffer (truncated to size - 1; "" for NULL). */
void store_val_copy(struct store_stmt *s, int i, char *dst, size_t size);

void store_qb_add(struct store_qb *q, const char *clause, const char *param);
void store_qb_list_opts(struct store_qb *q, const struct store_page *pg, const char *p,
			const char *id, struct store_qb_opts *o);

/* A page of a list: *total and a statement of the page's rows ("SELECT cols FROM from<q>
 * ORDER BY order LIMIT/OFFSET"), bound and ready to step (the caller ends it with
 * store_stmt_done). Caller holds the lock. */
enum rcs_err store_page_rows(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, long long *total, struct store_stmt **s);

/*
 * A page of typed records: pg's rows of "SELECT cols FROM from<q> ORDER BY order", each read
 * by fn into its record (size bytes, zeroed) of *items (malloc'd, per_page records); *n
 * records were read (the one fn failed on included), info gets the page and the total. The
 * caller frees the records and *items, also on an error. Takes the lock.
 */
enum rcs_err store_page_recs(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, struct store_page_info *info, size_t size,
			     store_one_fn fn, void **items, size_t *n);

/* ---- the webhook outbox (store_webhooks.c) ---- */

/* Whether any active webhook of the tenant wants job.status events (*want). */
enum rcs_err store_webhooks_want_jobs(struct store *st, const char *client_root, bool *want);

/* ---- group sends (store_groups.c, store_group_reads.c; docs/api.md "Rollouts") ---- */

struct group_rec;

/* The columns of a group_rec, in the order store_group_row reads them (table groups). */
#define GROUP_COLS                                                                                 \
	"ident, name, created_user, created_at, task_ident, client_root, status, reason,"          \
	" task_version, task_name, tag, continuous, ro_max, ro_base, ro_factor, ro_after, ab_pct," \
	" ab_min, win_days, win_start, win_dur, win_off, rt_max, rt_backoff, rt_factor, n_open,"   \
	" n_finished, n_failed, n_succeeded, tokens, tokens_at, dl_max, dl_rate"

/* The row of GROUP_COLS into *r (zeroed first; on an error what was read is freed). */
enum rcs_err store_group_row(struct store_stmt *s, struct group_rec *r);

/* The statuses of jobs that have not ended, as an SQL list. */
#define JOBS_OPEN_LIST                                                                             \
	"('initial', 'pending', 'transmited', 'edge_transmitted', 'edge_started', 'edge_running')"

#endif
