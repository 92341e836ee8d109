/*
 * store.c - the core of the coordinator's storage, whatever the engine: opening through a
 * backend (store_sqlite.c, or store_pg.c for a postgresql:// URL), the lock, transactions and
 * savepoints, after-commit actions, and the statements through the seam, writes and one-row
 * reads every domain file of the store uses (store_int.h; a row's values and the pages of
 * lists are store_rows.c's, which calls this file and is not called by it). The domains
 * (store_keys.c, store_tasks.c, store_devices.c, store_jobs.c, store_groups.c,
 * store_webhooks.c, store_audit.c, store_outbox.c, store_queues.c; docs/architecture.md) call
 * it; it calls none of them: what the fold of store_jobs.c must hear (a savepoint undone, the
 * store closing) goes through the hooks it put in struct store.
 */
#include "store.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store_int.h"

/* ---- helpers ---- */

static void store_batch_commit(struct store *st);

/* The lock alone: for the group commit's own callers (store_tx_begin, store_write), which
 * join an open batch rather than end it. */
static void store_lock_raw(struct store *st)
{
	pthread_mutex_lock(&st->lock);
	st->lock_count++;
}

void store_lock(struct store *st)
{
	store_lock_raw(st);
	/* a batch left open between its callers (docs/architecture.md, "Reads and group
	 * commit") is committed before anything else uses the connection: a statement outside
	 * the callers' transactions must neither read their uncommitted rows and act on them
	 * (send a mail, a webhook) nor have its own writes undone with a batch that fails */
	if (st->batch != NULL && st->tx_depth == 0 && st->lock_count == 1)
		store_batch_commit(st);
}

void store_unlock(struct store *st)
{
	st->lock_count--;
	pthread_mutex_unlock(&st->lock);
}

/* Runs one parameterless statement of constant SQL through the statement cache
 * (transaction control on every write: parsed once, not per call). */
enum rcs_err store_run(struct store *st, const char *sql)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	st->tx_serial++; /* BEGIN, COMMIT, a savepoint...: what was known of the last is not */
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
	s->ran = true;
	return st->be->step(st, s, what, row);
}

enum rcs_err store_done(struct store *st, struct store_stmt *s, const char *what)
{
	bool row = false;

	s->ran = true;
	return st->be->step(st, s, what, &row);
}

long long store_changes(struct store *st)
{
	return st->be->changes(st);
}

/* ---- writes and one-row reads ---- */

/* Executes one write statement with text params (NULL binds NULL); *changes
 * (may be NULL) gets the number of rows changed. */
enum rcs_err store_write(struct store *st, const char *sql, int *changes, int n, ...)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	bool nested;
	va_list ap;

	/* inside the caller's transaction one statement is atomic by itself; outside one it
	 * is a caller of the group commit of its own, like a transaction */
	store_lock_raw(st);
	nested = st->tx_depth > 0;
	if (!nested) {
		store_unlock(st);
		err = store_sp_begin(st);
		if (err != RCS_OK)
			return err;
	}
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
	if (nested) {
		store_unlock(st);
		return err;
	}
	return store_sp_end(st, err);
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

/* A struct store with its lock and nothing open. */
static struct store *store_new(void)
{
	struct store *st = calloc(1, sizeof(*st));
	pthread_mutexattr_t attr;

	if (st == NULL)
		return NULL;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&st->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	pthread_mutex_init(&st->gmu, NULL);
	pthread_cond_init(&st->gcv, NULL);
	return st;
}

enum rcs_err store_open(const char *path, struct store **out)
{
	struct store *st = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	st = store_new();
	if (st == NULL)
		goto out;
	st->path = strdup(path);
	if (st->path == NULL)
		goto out;
	if (store_pg_url(path)) {
#ifdef RCS_WITH_POSTGRES
		st->be = &store_pg_backend;
#else
		log_warnx("store: this build has no PostgreSQL backend (WITH_POSTGRES)");
		err = RCS_ERR_INVAL;
		goto out;
#endif
	} else {
		st->be = &store_sqlite_backend;
	}
	st->dialect = st->be->dialect;
	err = st->be->open(st, path);
	if (err != RCS_OK)
		goto out;
	/* group commit on SQLite, whose one writer commits for all (docs/architecture.md);
	 * PostgreSQL takes concurrent transactions itself, and a batch would hold the row
	 * locks of one caller's status change until the others' commit */
	st->group = st->dialect == STORE_DIALECT_SQLITE;
	*out = st;
	st = NULL;
out:
	if (st)
		store_close(st);
	return err;
}

/* ---- readers (docs/architecture.md, "Reads and group commit") ---- */

struct store_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct store **all, **idle;
	size_t n, n_idle;
};

static void store_pool_free(struct store_pool *p)
{
	if (p == NULL)
		return;
	for (size_t i = 0; i < p->n; i++)
		store_close(p->all[i]);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->all);
	free(p->idle);
	free(p);
}

/* An in-memory SQLite database is the connection's own: another one would see another. */
static bool store_path_shared(const char *path)
{
	return path[0] != '\0' && strcmp(path, ":memory:") != 0 &&
	       strstr(path, "mode=memory") == NULL;
}

enum rcs_err store_readers_open(struct store *st, unsigned n)
{
	struct store_pool *p = NULL;
	enum rcs_err err = RCS_OK;

	if (st->pool != NULL || n == 0 || st->be->open_reader == NULL ||
	    !store_path_shared(st->path))
		goto out;
	err = RCS_ERR_NOMEM;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		goto out;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->all = calloc(n, sizeof(*p->all));
	p->idle = calloc(n, sizeof(*p->idle));
	if (p->all == NULL || p->idle == NULL)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		struct store *r = store_new();

		if (r == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		p->all[p->n++] = r;
		r->reader = true;
		r->be = st->be;
		r->dialect = st->dialect;
		err = st->be->open_reader(r, st->path);
		if (err != RCS_OK)
			goto out;
		p->idle[p->n_idle++] = r;
	}
	st->pool = p;
	p = NULL;
	err = RCS_OK;
out:
	store_pool_free(p);
	return err;
}

struct store *store_reader(struct store *st)
{
	struct store_pool *p = st->pool;
	struct store *r;

	if (p == NULL)
		return st;
	pthread_mutex_lock(&p->mu);
	while (p->n_idle == 0)
		pthread_cond_wait(&p->cv, &p->mu);
	r = p->idle[--p->n_idle];
	pthread_mutex_unlock(&p->mu);
	return r;
}

void store_reader_put(struct store *st, struct store *r)
{
	struct store_pool *p = st->pool;

	if (p == NULL || r == st || r == NULL)
		return;
	/* a transaction left open would hold its snapshot: later reads would not see
	 * later writes */
	if (r->be->in_tx(r))
		store_run(r, "ROLLBACK");
	pthread_mutex_lock(&p->mu);
	p->idle[p->n_idle++] = r;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

enum rcs_err store_read_begin(struct store *r)
{
	return r->reader ? store_tx_begin(r) : RCS_OK;
}

void store_read_end(struct store *r)
{
	if (r->reader && r->tx_depth > 0)
		store_tx_end(r, false);
}

void store_close(struct store *st)
{
	if (st == NULL)
		return;
	store_pool_free(st->pool);
	if (st->hooks)
		st->hooks->close(st);
	if (st->be)
		st->be->close(st);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->gmu);
	pthread_cond_destroy(&st->gcv);
	free(st->actions);
	free(st->path);
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

/*
 * Group commit (docs/architecture.md, "Reads and group commit"). The writer's connection
 * holds one database transaction, the batch, for the callers that arrive while it is open:
 * each caller's outermost transaction is a savepoint of it, and the caller's commit
 * releases the savepoint and waits for the batch's COMMIT. The caller that ends its
 * savepoint with no writer waiting for the lock (or as the STORE_BATCH_MAX-th, or while
 * it still holds the lock from an enclosing call and so can't wait) commits the batch and
 * answers the others. Writers keep running one at a time on the one connection, each
 * seeing what the ones before it wrote, so counters and sequence checks stay as they were;
 * a batch that fails fails for all its callers, and nothing of it is kept.
 */

/* Under gmu: the batch ended with result; its waiters wake up. */
static void store_batch_finish(struct store *st, struct store_batch *b, enum rcs_err result)
{
	pthread_mutex_lock(&st->gmu);
	b->done = true;
	b->result = result;
	pthread_cond_broadcast(&st->gcv);
	pthread_mutex_unlock(&st->gmu);
}

/* Drops a caller's hold on b (the last one frees it). */
static void store_batch_unref(struct store *st, struct store_batch *b)
{
	bool last;

	pthread_mutex_lock(&st->gmu);
	last = --b->refs == 0;
	pthread_mutex_unlock(&st->gmu);
	if (last)
		free(b);
}

/* Under the lock: commits the open batch (the engine may have ended it already). */
static void store_batch_commit(struct store *st)
{
	struct store_batch *b = st->batch;
	enum rcs_err err;

	st->batch = NULL;
	if (!st->be->in_tx(st)) {
		/* rolled back by the engine (disk full, I/O): nothing of it is kept */
		err = RCS_ERR_IO;
	} else {
		err = store_run(st, "COMMIT");
		/* a COMMIT that failed (disk full) may have rolled back already */
		if (err != RCS_OK && st->be->in_tx(st))
			store_run(st, "ROLLBACK");
	}
	if (err != RCS_OK) {
		log_warnx("store: a group commit of %d writes failed: %s", b->n, rcs_strerror(err));
		/* for its callers the storage failed, whatever the engine said (a deferred
		 * constraint is no one caller's conflict): 503, retry */
		if (err != RCS_ERR_FULL && err != RCS_ERR_BUSY)
			err = RCS_ERR_IO;
	}
	store_batch_finish(st, b, err);
	store_batch_unref(st, b);
}

/* Under the lock, the outermost level of a caller: joins the open batch or begins one,
 * then its savepoint. */
static enum rcs_err store_batch_join(struct store *st)
{
	struct store_batch *b = st->batch;
	enum rcs_err err;

	if (b != NULL && !st->be->in_tx(st)) {
		store_batch_commit(st); /* lost: its callers get the error */
		b = NULL;
	}
	if (b == NULL) {
		b = calloc(1, sizeof(*b));
		if (b == NULL)
			return RCS_ERR_NOMEM;
		err = store_run(st, st->be->begin_sql);
		if (err != RCS_OK) {
			free(b);
			return err;
		}
		b->refs = 1; /* the batch's own, dropped by its commit */
		st->batch = b;
	}
	err = store_run(st, "SAVEPOINT tx");
	if (err != RCS_OK) {
		/* the callers before it may wait for the batch: it ends here */
		store_batch_commit(st);
		return err;
	}
	pthread_mutex_lock(&st->gmu);
	b->refs++;
	b->n++;
	pthread_mutex_unlock(&st->gmu);
	st->mine = b;
	return RCS_OK;
}

enum rcs_err store_tx_begin(struct store *st)
{
	enum rcs_err err;

	if (st->group) {
		pthread_mutex_lock(&st->gmu);
		st->queued++;
		pthread_mutex_unlock(&st->gmu);
	}
	store_lock_raw(st);
	if (st->group) {
		pthread_mutex_lock(&st->gmu);
		st->queued--;
		pthread_mutex_unlock(&st->gmu);
	}
	if (store_tx_lost(st)) {
		store_unlock(st);
		return RCS_ERR_DB;
	}
	if (st->tx_depth > 0)
		err = store_run(st, "SAVEPOINT tx"); /* inside this thread's transaction */
	else if (st->group)
		err = store_batch_join(st);
	else
		/* a reader's transaction is one snapshot (PostgreSQL's READ COMMITTED would
		 * take one per statement) */
		err = store_run(
		    st, st->reader ? STORE_SQL(st, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ")
				   : st->be->begin_sql);
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

/* Runs the actions a, n of them, outside the lock, and frees them. */
static void store_run_actions(struct store_action *a, size_t n, bool committed)
{
	for (size_t i = 0; i < n; i++)
		a[i].fn(a[i].arg, committed);
	free(a);
}

/* The end of a caller's savepoint inside the batch (under the lock, which it releases):
 * commits the batch or waits for the caller that does, then runs the caller's actions. */
static enum rcs_err store_batch_leave(struct store *st, bool commit, enum rcs_err err)
{
	struct store_batch *b = st->mine;
	struct store_action *a = st->actions;
	size_t n = st->n_actions;
	bool now, held = st->lock_count > 1;
	enum rcs_err result = RCS_OK;

	st->actions = NULL;
	st->n_actions = st->cap_actions = 0;
	st->mine = NULL;
	pthread_mutex_lock(&st->gmu);
	now = st->queued == 0 || b->n >= STORE_BATCH_MAX || held;
	pthread_mutex_unlock(&st->gmu);
	if (st->batch == b && (now || !st->be->in_tx(st)))
		store_batch_commit(st);
	store_unlock(st);
	if (commit && err == RCS_OK) {
		/* answered only once its batch committed */
		pthread_mutex_lock(&st->gmu);
		while (!b->done)
			pthread_cond_wait(&st->gcv, &st->gmu);
		result = b->result;
		pthread_mutex_unlock(&st->gmu);
	}
	store_batch_unref(st, b);
	if (err == RCS_OK)
		err = result;
	store_run_actions(a, n, commit && err == RCS_OK);
	return err;
}

enum rcs_err store_tx_end(struct store *st, bool commit)
{
	struct store_action *a;
	size_t n;
	enum rcs_err err;

	if (st->tx_depth > 1 || (st->group && st->mine != NULL)) {
		size_t t = store_actions_from(st, st->tx_depth);

		if (commit) {
			err = store_run(st, "RELEASE tx");
			if (err != RCS_OK && st->be->in_tx(st)) {
				store_run(st, "ROLLBACK TO tx");
				store_run(st, "RELEASE tx");
			}
		} else {
			store_run(st, "ROLLBACK TO tx");
			err = store_run(st, "RELEASE tx");
		}
		if ((!commit || err != RCS_OK) && st->hooks)
			st->hooks->sp_undone(st);
		if (st->tx_depth == 1) {
			/* a caller's own level of the batch: its actions run once it is over,
			 * outside the lock (store_batch_leave) */
		} else if (commit && err == RCS_OK) {
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
		if (st->tx_depth == 0)
			return store_batch_leave(st, commit, err);
		store_unlock(st);
		return err;
	}
	err = store_run(st, commit ? "COMMIT" : "ROLLBACK");
	/* a COMMIT that failed (disk full) may have rolled back already */
	if (err != RCS_OK && commit && st->be->in_tx(st))
		store_run(st, "ROLLBACK");
	st->tx_depth--;
	a = st->actions;
	n = st->n_actions;
	st->actions = NULL;
	st->n_actions = st->cap_actions = 0;
	store_unlock(st); /* actions run outside the lock: they may publish, wait */
	store_run_actions(a, n, commit && err == RCS_OK);
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

/* Internal savepoints make multi-statement operations atomic inside or outside a caller's
 * transaction: a level of it (outside one, a caller of the group commit of its own). */
enum rcs_err store_sp_begin(struct store *st)
{
	return store_tx_begin(st);
}

enum rcs_err store_sp_end(struct store *st, enum rcs_err status)
{
	enum rcs_err err = store_tx_end(st, status == RCS_OK);

	return status != RCS_OK ? status : err;
}

/* ---- one number, the database's size, lists of idents ---- */

enum rcs_err store_row_int(struct store_stmt *s, void *arg)
{
	*(long long *)arg = store_val_null(s, 0) ? 0 : store_val_int(s, 0);
	return RCS_OK;
}

enum rcs_err store_db_size(struct store *st, long long *bytes)
{
	*bytes = 0;
	return store_get_one(st,
			     STORE_SQL(st,
				       "SELECT page_count * page_size FROM pragma_page_count(),"
				       " pragma_page_size()",
				       "SELECT pg_database_size(current_database())"),
			     NULL, NULL, NULL, store_row_int, bytes);
}

int store_ident_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

void store_idents_free(struct store_idents *ids)
{
	if (ids == NULL)
		return;
	free(ids->v);
	ids->v = NULL;
	ids->n = 0;
}
