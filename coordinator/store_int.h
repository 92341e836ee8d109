/*
 * store_int.h - what the files of the store share and nothing outside the store sees: the
 * connection and its statement cache (struct store), and the helpers that bind, step and map
 * rows, build filtered pages and run writes. Every function here expects the caller to hold
 * the store's lock (store_lock) unless it takes it itself (store_list, store_list_text,
 * store_get_row, store_write). docs/architecture.md shows the store's files.
 */
#ifndef RCS_STORE_INT_H
#define RCS_STORE_INT_H

#include <json-c/json.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "db.h"
#include "store.h"

/*
 * The backend seam (docs/architecture.md, "The store"): everything the store's domain files
 * do with a database goes through these operations, so another engine is a new backend
 * file (today: store_sqlite.c). A backend's statement begins with struct store_stmt.
 * SQL text is written in the subset both engines take (parameters as ?N, ON CONFLICT,
 * RETURNING); where a statement has to differ, st->dialect picks its text.
 */
enum store_dialect { STORE_DIALECT_SQLITE };

struct store_stmt {
	const struct store_backend *be;
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
};

struct store {
	const struct store_backend *be;
	enum store_dialect dialect;
	/* the SQLite backend's connection and statement cache (store_sqlite.c) */
	sqlite3 *db;
	/* statements of constant SQL, prepared once (common/db.h) */
	struct db_cache cache;
	pthread_mutex_t lock; /* recursive */
	int tx_depth;
	/* store_after_commit: what runs once the outermost transaction ends (at most
	 * STORE_ACTIONS_MAX) */
	struct store_action {
		void (*fn)(void *arg, bool committed);
		void *arg;
		int depth; /* the (savepoint) level it belongs to: dropped with it */
	} * actions;
	size_t n_actions, cap_actions;
};

/* The jobs on their way: sent and not yet ended on the device. */
#define JOBS_INFLIGHT                                                                              \
	"(status = 'transmited' OR status = 'edge_transmitted' OR status = 'edge_started' OR"      \
	" status = 'edge_running')"

/* A record mapped column by column: each column's key and kind, in SELECT order
 * (store_row_map). */
enum store_col_kind { STORE_COL_STR, STORE_COL_INT, STORE_COL_BOOL, STORE_COL_JSON };

struct store_col_map {
	const char *key;
	enum store_col_kind kind;
};

/* One row as a JSON object (store_rows, store_list, store_get_row). */
typedef json_object *(*store_row_fn)(sqlite3_stmt *s);

/* WHERE clauses with text parameters only, so nothing a client sends is ever SQL text;
 * store_qb_opts holds the list options' bounds and ORDER BY (docs/api.md "Lists"). */
struct store_qb {
	char where[768];
	const char *params[12];
	int n;
};

struct store_qb_opts {
	char after[24], before[24];
	char order[160];
};

/* Opens the SQLite backend's database at path into st (store_sqlite.c). */
enum rcs_err store_sqlite_open(struct store *st, const char *path);

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
static inline void store_arg_text(struct store_stmt *s, int i, const char *v)
{
	if (v)
		s->be->bind_text(s, i, v, (size_t)-1);
	else
		s->be->bind_null(s, i);
}
static inline void store_arg_textn(struct store_stmt *s, int i, const char *v, size_t len)
{
	s->be->bind_text(s, i, v, len);
}
static inline void store_arg_int(struct store_stmt *s, int i, long long v)
{
	s->be->bind_int(s, i, v);
}
static inline void store_arg_null(struct store_stmt *s, int i)
{
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
/* A malloc'd copy of a text column (NULL for NULL, or when out of memory: *err set). */
char *store_val_dup(struct store_stmt *s, int i, enum rcs_err *err);
/* Copies a text column into a fixed buffer (truncated to size - 1; "" for NULL). */
void store_val_copy(struct store_stmt *s, int i, char *dst, size_t size);

/* store_page_query for any backend: *total and a statement of the page's rows, bound and
 * ready to step (the caller ends it with store_stmt_done). Caller holds the lock. */
enum rcs_err store_page_rows(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, long long *total, struct store_stmt **s);

/* ---- connection, statements (store.c; the SQLite forms below go with the domain files
 * that still use them) ---- */

/* SQLite's result code as an rcs_err (logged with what). */
enum rcs_err store_rc(sqlite3 *db, int rc, const char *what);
void store_lock(struct store *st);
void store_unlock(struct store *st);
enum rcs_err store_exec(struct store *st, const char *sql);
enum rcs_err store_prepare(struct store *st, const char *sql, sqlite3_stmt **out);
void store_release(struct store *st, sqlite3_stmt *s);
enum rcs_err store_run(struct store *st, const char *sql);
enum rcs_err store_prepare_fresh(struct store *st, const char *sql, sqlite3_stmt **out);

/* ---- binding, columns, rows, pages ---- */

void store_bind_text(sqlite3_stmt *s, int i, const char *v);
void store_bind_json(sqlite3_stmt *s, int i, json_object *v, const char *dflt);
void store_bind_opt_int(sqlite3_stmt *s, int i, long long v);
const char *store_col_text(sqlite3_stmt *s, int i);
json_object *store_col_str(sqlite3_stmt *s, int i);
json_object *store_col_int(sqlite3_stmt *s, int i);
json_object *store_col_bool(sqlite3_stmt *s, int i);
json_object *store_col_json(sqlite3_stmt *s, int i);
json_object *store_page_wrap(const struct store_page *pg, long long total, json_object *items);
json_object *store_row_map(sqlite3_stmt *s, const struct store_col_map *map);
json_object *store_row_first_str(sqlite3_stmt *s);
enum rcs_err store_rows(struct store *st, sqlite3_stmt *s, store_row_fn fn, size_t max,
			json_object **out);
void store_qb_add(struct store_qb *q, const char *clause, const char *param);
void store_qb_bind(const struct store_qb *q, sqlite3_stmt *s);
void store_qb_list_opts(struct store_qb *q, const struct store_page *pg, const char *p,
			const char *id, struct store_qb_opts *o);
enum rcs_err store_page_query(struct store *st, const char *cols, const char *from,
			      const struct store_qb *q, const char *order,
			      const struct store_page *pg, long long *total, sqlite3_stmt **s);
enum rcs_err store_list(struct store *st, const char *cols, const char *from,
			const struct store_qb *q, const char *order, const struct store_page *pg,
			store_row_fn fn, json_object **out);
enum rcs_err store_list_text(struct store *st, const char *sel, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, struct buf *out);
/* The one row of sql with up to three text parameters (NULL: not bound), mapped by fn;
 * RCS_ERR_NOTFOUND when there is none. */
enum rcs_err store_get_row(struct store *st, const char *sql, const char *p1, const char *p2,
			   const char *p3, store_row_fn fn, json_object **out);
/*
 * Who may see a task (docs/api.md, "Tasks"): an admin every task of the tenant, anyone else
 * the public ones and their own. STORE_TASK_HIDDEN(t, user) is the SQL condition, on the
 * tasks row named t, that hides it from the user parameter user: the one place it is
 * written, for tasks, their jobs and their groups.
 */
#define STORE_TASK_HIDDEN(t, user) "(" t ".public = 0 AND " t ".created_user != " user ")"
enum rcs_err store_write(struct store *st, const char *sql, int *changes, int n, ...);
/* The one row of sql with up to three text parameters (NULL: not bound), read by fn (its
 * result is the call's); RCS_ERR_NOTFOUND when there is none. Takes the lock. */
typedef enum rcs_err (*store_one_fn)(struct store_stmt *s, void *arg);
enum rcs_err store_get_one(struct store *st, const char *sql, const char *p1, const char *p2,
			   const char *p3, store_one_fn fn, void *arg);

/* A savepoint inside the caller's transaction, or a transaction of its own; store_sp_end
 * releases or rolls it back by status and returns status. */
enum rcs_err store_sp_begin(struct store *st);
enum rcs_err store_sp_end(struct store *st, enum rcs_err status);
json_object *store_row_exists(sqlite3_stmt *s);

/* ---- tenants, keys, scripts, tasks ---- */

/*
 * A page of typed records: pg's rows of "SELECT cols FROM from<q> ORDER BY order", each read
 * by fn into its record (size bytes, zeroed) of *items (malloc'd, per_page records); *n
 * records were read (the one fn failed on included), info gets the page and the total. The
 * caller frees the records and *items, also on an error. Takes the lock.
 */
enum rcs_err store_page_recs(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, struct store_page_info *info,
			     size_t size, store_one_fn fn, void **items, size_t *n);

#endif
