/*
 * store.c - the core of the coordinator's storage, whatever the engine: opening through a
 * backend (store_sqlite.c, or store_pg.c for a postgresql:// URL), the lock, transactions and
 * savepoints, after-commit actions, and the helpers every domain file of the store uses
 * (store_int.h). The domains are store_keys.c, store_tasks.c, store_devices.c, store_jobs.c,
 * store_queues.c and store_outbox.c (docs/architecture.md).
 */
#include "store_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* ---- helpers ---- */

void store_lock(struct store *st)
{
	pthread_mutex_lock(&st->lock);
}

void store_unlock(struct store *st)
{
	pthread_mutex_unlock(&st->lock);
}

/* Runs one parameterless statement of constant SQL through the statement cache
 * (transaction control on every write: parsed once, not per call). */
enum rcs_err store_run(struct store *st, const char *sql)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st, sql, &s);
	if (err == RCS_OK)
		err = store_done(st, s, sql);
	store_stmt_done(st, s);
	return err;
}

/* ---- statements through the backend ---- */

enum rcs_err store_stmt(struct store *st, const char *sql, struct store_stmt **out)
{
	return st->be->prepare(st, sql, true, out);
}

enum rcs_err store_stmt_fresh(struct store *st, const char *sql, struct store_stmt **out)
{
	return st->be->prepare(st, sql, false, out);
}

void store_stmt_done(struct store *st, struct store_stmt *s)
{
	if (s != NULL)
		st->be->release(st, s);
}

enum rcs_err store_next(struct store *st, struct store_stmt *s, const char *what, bool *row)
{
	return st->be->step(st, s, what, row);
}

enum rcs_err store_done(struct store *st, struct store_stmt *s, const char *what)
{
	bool row = false;

	return st->be->step(st, s, what, &row);
}

long long store_changes(struct store *st)
{
	return st->be->changes(st);
}

char *store_val_dup(struct store_stmt *s, int i, enum rcs_err *err)
{
	const char *t = store_val_text(s, i);
	size_t n;
	char *c;

	if (t == NULL)
		return NULL;
	n = store_val_len(s, i);
	c = malloc(n + 1);
	if (c == NULL) {
		*err = RCS_ERR_NOMEM;
		return NULL;
	}
	memcpy(c, t, n);
	c[n] = '\0';
	return c;
}

void store_val_copy(struct store_stmt *s, int i, char *dst, size_t size)
{
	const char *t = store_val_text(s, i);
	size_t n = t ? store_val_len(s, i) : 0;

	if (size == 0)
		return;
	if (n >= size)
		n = size - 1;
	if (n > 0)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

/*
 * Most records are a row mapped column by column: a map names each column's
 * key and kind, in SELECT order, and store_row_map builds the object.
 */

/*
 * A small query builder for filtered, paged lists: WHERE clauses with text
 * parameters only, so nothing a client sends is ever part of the SQL text.
 */

void store_qb_add(struct store_qb *q, const char *clause, const char *param)
{
	size_t len = strlen(q->where);
	int n;

	if (q->overflow)
		return;
	if (param != NULL && q->n == STORE_QB_PARAMS) {
		q->overflow = true;
		return;
	}
	n = snprintf(q->where + len, sizeof(q->where) - len, "%s%s", len ? " AND " : " WHERE ",
		     clause);
	if (n < 0 || (size_t)n >= sizeof(q->where) - len) {
		q->where[len] = '\0';
		q->overflow = true;
		return;
	}
	if (param != NULL)
		q->params[q->n++] = param;
}

/* The bounds of a list's options (docs/api.md "Lists"), as decimal text for store_qb. */

/*
 * Adds pg's created_after, created_before and name to q (columns of the table aliased p,
 * "" or "j.") and writes its ORDER BY into o->order. created_at order is the order of the
 * idents (UUIDv7: the time of creation comes first), which the indexes serve; the ident
 * (id: "ident" or "entity_ident") breaks ties of the other keys, so pages never overlap.
 */
void store_qb_list_opts(struct store_qb *q, const struct store_page *pg, const char *p,
			const char *id, struct store_qb_opts *o)
{
	const char *dir = pg->desc ? "DESC" : "ASC";
	char clause[64];

	if (pg->has_after) {
		snprintf(o->after, sizeof(o->after), "%lld", pg->created_after);
		snprintf(clause, sizeof(clause), "%screated_at > CAST(? AS INTEGER)", p);
		store_qb_add(q, clause, o->after);
	}
	if (pg->has_before) {
		snprintf(o->before, sizeof(o->before), "%lld", pg->created_before);
		snprintf(clause, sizeof(clause), "%screated_at < CAST(? AS INTEGER)", p);
		store_qb_add(q, clause, o->before);
	}
	if (pg->name) {
		snprintf(clause, sizeof(clause), "%sname = ?", p);
		store_qb_add(q, clause, pg->name);
	}
	if (pg->sort == NULL || strcmp(pg->sort, "created_at") == 0)
		snprintf(o->order, sizeof(o->order), "%s%s %s", p, id, dir);
	else
		snprintf(o->order, sizeof(o->order), "%s%s %s, %s%s %s", p, pg->sort, dir, p, id,
			 dir);
}

enum rcs_err store_page_rows(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, long long *total, struct store_stmt **s)
{
	char sql[4096];
	enum rcs_err err;
	bool row = false;

	*total = 0;
	*s = NULL;
	if (q->overflow) {
		log_warnx("store: a list's filters do not fit its query");
		return RCS_ERR_INTERNAL;
	}
	if ((size_t)snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s%s", from, q->where) >=
	    sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_stmt_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	for (int i = 0; i < q->n; i++)
		store_arg_text(*s, i + 1, q->params[i]);
	err = store_next(st, *s, "count", &row);
	if (err == RCS_OK && row)
		*total = store_val_int(*s, 0);
	store_stmt_done(st, *s);
	*s = NULL;
	if (err != RCS_OK)
		return err;
	if ((size_t)snprintf(sql, sizeof(sql),
			     "SELECT %s FROM %s%s ORDER BY %s LIMIT ?%d OFFSET ?%d", cols, from,
			     q->where, order, q->n + 1, q->n + 2) >= sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_stmt_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	for (int i = 0; i < q->n; i++)
		store_arg_text(*s, i + 1, q->params[i]);
	store_arg_int(*s, q->n + 1, pg->per_page);
	store_arg_int(*s, q->n + 2, (pg->page - 1) * pg->per_page);
	return RCS_OK;
}

/* Executes one write statement with text params (NULL binds NULL); *changes
 * (may be NULL) gets the number of rows changed. */
enum rcs_err store_write(struct store *st, const char *sql, int *changes, int n, ...)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	va_list ap;

	store_lock(st);
	err = store_stmt(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	va_start(ap, n);
	for (int i = 0; i < n; i++)
		store_arg_text(s, i + 1, va_arg(ap, const char *));
	va_end(ap);
	err = store_done(st, s, sql);
	if (changes)
		*changes = (int)store_changes(st);
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_get_one(struct store *st, const char *sql, const char *p1, const char *p2,
			   const char *p3, store_one_fn fn, void *arg)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	bool row = false;

	store_lock(st);
	err = store_stmt(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, p1);
	if (p2)
		store_arg_text(s, 2, p2);
	if (p3)
		store_arg_text(s, 3, p3);
	err = store_next(st, s, "get", &row);
	if (err == RCS_OK)
		err = row ? fn(s, arg) : RCS_ERR_NOTFOUND;
out:
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

/* ---- open, close, transactions ---- */

bool store_pg_url(const char *db)
{
	return strncmp(db, "postgresql://", 13) == 0 || strncmp(db, "postgres://", 11) == 0;
}

enum rcs_err store_open(const char *path, struct store **out)
{
	struct store *st = NULL;
	pthread_mutexattr_t attr;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		goto out;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&st->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (store_pg_url(path)) {
#ifdef RCS_WITH_POSTGRES
		err = store_pg_open(st, path);
#else
		log_warnx("store: this build has no PostgreSQL backend (WITH_POSTGRES)");
		err = RCS_ERR_INVAL;
#endif
	} else {
		err = store_sqlite_open(st, path);
	}
	if (err != RCS_OK)
		goto out;
	*out = st;
	st = NULL;
out:
	if (st)
		store_close(st);
	return err;
}

void store_close(struct store *st)
{
	if (st == NULL)
		return;
	if (st->be)
		st->be->close(st);
	pthread_mutex_destroy(&st->lock);
	free(st->actions);
	free(st);
}

enum rcs_err store_ping(struct store *st)
{
	enum rcs_err err;

	store_lock(st);
	err = st->be->ping(st);
	store_unlock(st);
	return err;
}

/* The engine may roll a transaction back by itself on some errors (disk full, I/O, out
 * of memory): a savepoint begun after that would be a transaction of its own. */
static bool store_tx_lost(struct store *st)
{
	return st->tx_depth > 0 && !st->be->in_tx(st);
}

enum rcs_err store_tx_begin(struct store *st)
{
	enum rcs_err err;

	store_lock(st);
	if (store_tx_lost(st)) {
		store_unlock(st);
		return RCS_ERR_DB;
	}
	/* inside this thread's transaction: a savepoint of it */
	err = store_run(st, st->tx_depth == 0 ? st->be->begin_sql : "SAVEPOINT tx");
	if (err != RCS_OK) {
		store_unlock(st);
		return err;
	}
	st->tx_depth++;
	return RCS_OK;
}

/* Where the actions of level depth and deeper begin: they are the list's tail,
 * registered since that level's savepoint began. */
static size_t store_actions_from(const struct store *st, int depth)
{
	size_t t = st->n_actions;

	while (t > 0 && st->actions[t - 1].depth >= depth)
		t--;
	return t;
}

/* Runs the outermost transaction's actions, outside the lock. */
static void store_run_actions(struct store *st, bool committed)
{
	struct store_action *a = st->actions;
	size_t n = st->n_actions;

	st->actions = NULL;
	st->n_actions = st->cap_actions = 0;
	store_unlock(st); /* actions run outside the lock: they may publish, wait */
	for (size_t i = 0; i < n; i++)
		a[i].fn(a[i].arg, committed);
	free(a);
}

enum rcs_err store_tx_end(struct store *st, bool commit)
{
	enum rcs_err err;

	if (st->tx_depth > 1) {
		size_t t = store_actions_from(st, st->tx_depth);

		if (commit) {
			err = store_run(st, "RELEASE tx");
		} else {
			store_run(st, "ROLLBACK TO tx");
			err = store_run(st, "RELEASE tx");
		}
		if (commit && err == RCS_OK) {
			/* now the enclosing level's: dropped if that one rolls back */
			for (size_t i = t; i < st->n_actions; i++)
				st->actions[i].depth = st->tx_depth - 1;
		} else {
			/* undone with the savepoint (they only drop what they hold; the
			 * enclosing transaction is still open, so the lock is kept) */
			for (size_t i = t; i < st->n_actions; i++)
				st->actions[i].fn(st->actions[i].arg, false);
			st->n_actions = t;
		}
		st->tx_depth--;
		store_unlock(st);
		return err;
	}
	err = store_run(st, commit ? "COMMIT" : "ROLLBACK");
	/* a COMMIT that failed (disk full) may have rolled back already */
	if (err != RCS_OK && commit && st->be->in_tx(st))
		store_run(st, "ROLLBACK");
	st->tx_depth--;
	if (st->n_actions > 0) {
		store_run_actions(st, commit && err == RCS_OK);
		return err;
	}
	store_unlock(st);
	return err;
}

enum rcs_err store_after_commit(struct store *st, void (*fn)(void *arg, bool committed), void *arg)
{
	enum rcs_err err = RCS_OK;

	store_lock(st);
	if (st->tx_depth == 0) {
		store_unlock(st);
		fn(arg, true);
		return RCS_OK;
	}
	if (st->n_actions == st->cap_actions) {
		size_t cap = st->cap_actions ? st->cap_actions * 2 : 8;
		struct store_action *a = NULL;

		if (cap > STORE_ACTIONS_MAX) {
			err = RCS_ERR_FULL;
			goto out;
		}
		a = realloc(st->actions, cap * sizeof(*a));
		if (a == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		st->actions = a;
		st->cap_actions = cap;
	}
	st->actions[st->n_actions].fn = fn;
	st->actions[st->n_actions].arg = arg;
	st->actions[st->n_actions].depth = st->tx_depth;
	st->n_actions++;
out:
	store_unlock(st);
	return err;
}

/* Internal savepoints make multi-statement operations atomic inside or outside
 * a caller's transaction. */
enum rcs_err store_sp_begin(struct store *st)
{
	store_lock(st);
	if (store_tx_lost(st)) {
		store_unlock(st);
		return RCS_ERR_DB;
	}
	if (st->tx_depth == 0) {
		enum rcs_err err = store_run(st, st->be->begin_sql);
		if (err != RCS_OK) {
			store_unlock(st);
			return err;
		}
		return RCS_OK;
	}
	enum rcs_err err = store_run(st, "SAVEPOINT op");

	if (err != RCS_OK)
		store_unlock(st); /* no store_sp_end follows a failed begin */
	return err;
}

enum rcs_err store_sp_end(struct store *st, enum rcs_err status)
{
	enum rcs_err err;

	if (st->tx_depth == 0) {
		err = store_run(st, status == RCS_OK ? "COMMIT" : "ROLLBACK");
		if (err != RCS_OK && status == RCS_OK && st->be->in_tx(st))
			store_run(st, "ROLLBACK");
	} else if (status == RCS_OK) {
		err = store_run(st, "RELEASE op");
	} else {
		store_run(st, "ROLLBACK TO op");
		err = store_run(st, "RELEASE op");
	}
	store_unlock(st);
	return status != RCS_OK ? status : err;
}

/* ---- tenants, keys, scripts, tasks ---- */

enum rcs_err store_page_recs(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, struct store_page_info *info, size_t size,
			     store_one_fn fn, void **items, size_t *n)
{
	struct store_stmt *s = NULL;
	unsigned char *recs = NULL;
	enum rcs_err err;
	bool row = false;

	*items = NULL;
	*n = 0;
	info->page = pg->page;
	info->per_page = pg->per_page;
	info->total = 0;
	if (pg->per_page < 1)
		return RCS_ERR_INTERNAL;
	recs = calloc((size_t)pg->per_page, size);
	if (recs == NULL)
		return RCS_ERR_NOMEM;
	*items = recs;
	store_lock(st);
	err = store_page_rows(st, cols, from, q, order, pg, &info->total, &s);
	while (err == RCS_OK && *n < (size_t)pg->per_page &&
	       (err = store_next(st, s, "page", &row)) == RCS_OK && row)
		err = fn(s, recs + size * (*n)++);
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}
