/*
 * Unit tests of the store's readers and group commit (coordinator/store.c; docs/architecture.md,
 * "Reads and group commit"): writers of several threads, a caller whose savepoint fails
 * inside a batch, a batch whose COMMIT fails, a full database, and readers that see every
 * commit, also one made by another connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "store.h"
#include "store_devices.h"
#include "store_int.h"
#include "store_keys.h"
#include "store_test_db.h"

struct fixture {
	char dir[64];
	char path[128];
	struct store *st;
	char root[UUID_STR_LEN];
	char dup[UUID_STR_LEN]; /* a device that exists */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-batch-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_true(store_test_db(f->dir, f->path, sizeof(f->path)));
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(uuid_v7(f->root), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, f->root, 100), RCS_OK);
	assert_int_equal(uuid_v7(f->dup), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, f->dup, "d", "[]", 100), RCS_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[256];

	store_close(f->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return 1;
	free(f);
	return 0;
}

/* Whether the device is in the database, as another connection sees it (committed). */
static bool committed(struct fixture *f, const char *ident)
{
	return store_test_db_int(f->path, "SELECT count(*) FROM devices WHERE entity_ident = ?",
				 ident) == 1;
}

/* One caller: a transaction of one device insert (of ident, or of the existing device:
 * refused), with an after-commit action; what the commit answered and what the action was
 * told. */
enum writer_kind { WR_OK, WR_DUP, WR_DEFER_FK, WR_BIG };

struct writer {
	struct fixture *f;
	enum writer_kind kind;
	int repeat;
	char ident[UUID_STR_LEN];
	enum rcs_err result;
	int actions, actions_committed;
	int n_ok;
};

static void writer_action(void *arg, bool ok)
{
	struct writer *w = arg;

	w->actions++;
	if (ok)
		w->actions_committed++;
}

static enum rcs_err writer_once(struct writer *w)
{
	struct store *st = w->f->st;
	enum rcs_err err, end;
	char big[64 * 1024];

	assert_int_equal(uuid_v7(w->ident), RCS_OK);
	err = store_tx_begin(st);
	if (err != RCS_OK)
		return err;
	switch (w->kind) {
	case WR_OK:
		err = store_device_insert(st, w->f->root, w->ident, "w", "[]", 100);
		break;
	case WR_DUP:
		err = store_device_insert(st, w->f->root, w->f->dup, "w", "[]", 100);
		break;
	case WR_DEFER_FK:
		/* checked at COMMIT only: the batch's COMMIT fails */
		err = store_run(st, "PRAGMA defer_foreign_keys = ON");
		if (err == RCS_OK)
			err = store_device_insert(st, "no-such-tenant", w->ident, "w", "[]", 100);
		break;
	case WR_BIG:
		memset(big, 'x', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		err = store_device_insert(st, w->f->root, w->ident, big, "[]", 100);
		break;
	}
	if (err == RCS_OK)
		err = store_after_commit(st, writer_action, w);
	end = store_tx_end(st, err == RCS_OK);
	return err != RCS_OK ? err : end;
}

static void *writer_run(void *arg)
{
	struct writer *w = arg;

	for (int i = 0; i < (w->repeat ? w->repeat : 1); i++) {
		w->result = writer_once(w);
		if (w->result == RCS_OK)
			w->n_ok++;
	}
	return NULL;
}

static int queued(struct store *st)
{
	int n;

	pthread_mutex_lock(&st->gmu);
	n = st->queued;
	pthread_mutex_unlock(&st->gmu);
	return n;
}

/* Runs the writers as one batch: they all wait for the store's lock (held here) before any
 * begins, so each one's end finds the others waiting and the last one commits them all. */
static void run_batch(struct fixture *f, struct writer *w, int n)
{
	pthread_t t[16];

	assert_true(n <= 16);
	store_lock(f->st);
	for (int i = 0; i < n; i++) {
		w[i].f = f;
		assert_int_equal(pthread_create(&t[i], NULL, writer_run, &w[i]), 0);
	}
	/* all of them queued for the lock: one batch (group commit is SQLite's; on PostgreSQL
	 * each caller is a transaction of its own) */
	for (int waited = 0; f->st->group && queued(f->st) < n; waited++) {
		assert_true(waited < 30000); /* 30 s */
		usleep(1000);
	}
	store_unlock(f->st);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

/* Many threads writing at once: every answer OK, every row there, every action told so. */
static void test_threads_write(void **state)
{
	struct fixture *f = *state;
	struct writer w[8];
	pthread_t t[8];
	long long n;

	memset(w, 0, sizeof(w));
	for (int i = 0; i < 8; i++) {
		w[i].f = f;
		w[i].repeat = 40;
		assert_int_equal(pthread_create(&t[i], NULL, writer_run, &w[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].n_ok, 40);
		assert_int_equal(w[i].actions, 40);
		assert_int_equal(w[i].actions_committed, 40);
		assert_true(committed(f, w[i].ident));
	}
	n = store_test_db_int(f->path, "SELECT count(*) FROM devices WHERE name = ?", "w");
	assert_int_equal(n, 8 * 40);
}

/* A caller whose statement fails in the batch rolls back its savepoint only. */
static void test_failing_savepoint(void **state)
{
	struct fixture *f = *state;
	struct writer w[4];

	memset(w, 0, sizeof(w));
	w[2].kind = WR_DUP;
	run_batch(f, w, 4);
	for (int i = 0; i < 4; i++) {
		if (i == 2) {
			assert_int_not_equal(w[i].result, RCS_OK);
			assert_int_equal(w[i].actions, 0);
			continue;
		}
		assert_int_equal(w[i].result, RCS_OK);
		assert_int_equal(w[i].actions_committed, 1);
		assert_true(committed(f, w[i].ident));
	}
	/* the store goes on */
	memset(w, 0, sizeof(w));
	run_batch(f, w, 1);
	assert_int_equal(w[0].result, RCS_OK);
}

/* A batch whose COMMIT fails: every caller of it gets the error, nothing of it is kept,
 * no action is told it committed. */
static void test_failed_commit(void **state)
{
	struct fixture *f = *state;
	struct writer w[4];

	if (store_test_pg())
		skip(); /* deferred foreign keys: SQLite's PRAGMA */
	memset(w, 0, sizeof(w));
	w[1].kind = WR_DEFER_FK;
	run_batch(f, w, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_not_equal(w[i].result, RCS_OK);
		assert_int_equal(w[i].actions_committed, 0);
		assert_false(committed(f, w[i].ident));
	}
	/* the next batch commits */
	memset(w, 0, sizeof(w));
	run_batch(f, w, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(w[i].result, RCS_OK);
		assert_true(committed(f, w[i].ident));
	}
}

/* A full database (SQLite's page limit): the caller that doesn't fit gets RCS_ERR_FULL;
 * whatever the engine kept, an answer is OK exactly when its row was committed. */
static void test_full(void **state)
{
	struct fixture *f = *state;
	struct writer w[4];
	struct store_stmt *s = NULL;
	long long pages = 0;
	char sql[64];
	bool row = false;

	if (store_test_pg())
		skip(); /* max_page_count: SQLite's PRAGMA */
	store_lock(f->st);
	assert_int_equal(store_stmt_fresh(f->st, "PRAGMA page_count", &s), RCS_OK);
	assert_int_equal(store_next(f->st, s, "pages", &row), RCS_OK);
	pages = store_val_int(s, 0);
	store_stmt_done(f->st, s);
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %lld", pages + 2);
	assert_int_equal(f->st->be->exec(f->st, sql), RCS_OK);
	store_unlock(f->st);
	memset(w, 0, sizeof(w));
	w[2].kind = WR_BIG;
	run_batch(f, w, 4);
	assert_int_equal(w[2].result, RCS_ERR_FULL);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(w[i].result == RCS_OK, committed(f, w[i].ident));
		assert_int_equal(w[i].actions_committed, w[i].result == RCS_OK ? 1 : 0);
	}
}

/* A batch left open between its callers (a caller ended its savepoint while another
 * waited for the lock) is committed by the next one to take the lock outside a
 * transaction (the scheduler's or the bridge's statements), before it runs anything:
 * the caller waiting for that commit is answered, its row is there. */
static void test_direct_locker_commits_open_batch(void **state)
{
	struct fixture *f = *state;
	struct writer w;
	pthread_t t;
	bool open = false;
	int waited;

	if (!f->st->group)
		skip(); /* group commit is SQLite's */
	memset(&w, 0, sizeof(w));
	w.f = f;
	/* one more caller "waiting" for the lock: the writer's end leaves the batch open */
	pthread_mutex_lock(&f->st->gmu);
	f->st->queued++;
	pthread_mutex_unlock(&f->st->gmu);
	assert_int_equal(pthread_create(&t, NULL, writer_run, &w), 0);
	for (waited = 0; !open; waited++) {
		assert_true(waited < 30000); /* 30 s */
		usleep(1000);
		/* under the lock the writer is outside: before its batch, or waiting for it */
		pthread_mutex_lock(&f->st->lock);
		open = f->st->batch != NULL;
		pthread_mutex_unlock(&f->st->lock);
	}
	pthread_mutex_lock(&f->st->gmu);
	f->st->queued--;
	pthread_mutex_unlock(&f->st->gmu);
	/* the writer's row is not committed yet: it waits for its batch */
	assert_false(committed(f, w.ident));
	/* a statement outside any transaction (a ping here) commits the batch first */
	assert_int_equal(store_ping(f->st), RCS_OK);
	for (waited = 0; !committed(f, w.ident); waited++) {
		assert_true(waited < 30000);
		usleep(1000);
	}
	pthread_join(t, NULL);
	assert_int_equal(w.result, RCS_OK);
	assert_int_equal(w.actions_committed, 1);
}

/* Another connection's write, committed: an UPDATE of sql with the one parameter. */
static void other_connection(struct fixture *f, const char *sql)
{
	if (store_test_pg()) {
#ifdef RCS_WITH_POSTGRES
		assert_true(store_test_pg_exec(f->path, sql));
#endif
		return;
	}
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* Readers: their own connections; each sees every commit, the store's and another
 * connection's (a key revoked by the CLI fails at once); a write through one fails. */
static void test_readers(void **state)
{
	struct fixture *f = *state;
	char ident[UUID_STR_LEN], hash[AUTH_HASH_LEN], sql[160];
	struct store *r1, *r2;
	struct auth a;

	assert_int_equal(store_readers_open(f->st, 2), RCS_OK);
	r1 = store_reader(f->st);
	r2 = store_reader(f->st);
	assert_ptr_not_equal(r1, f->st);
	assert_ptr_not_equal(r2, f->st);
	assert_ptr_not_equal(r1, r2);
	assert_int_equal(uuid_v7(ident), RCS_OK);
	auth_key_hash("rcs_test_key", hash);
	assert_int_equal(store_key_create(f->st, ident, f->root, "u", ROLE_ADMIN, hash, 100),
			 RCS_OK);
	assert_int_equal(store_key_lookup(r1, hash, &a), RCS_OK);
	assert_string_equal(a.user, "u");
	/* a read is not held open: the next one sees the next commit */
	snprintf(sql, sizeof(sql), "UPDATE api_keys SET revoked_at = 200 WHERE ident = '%s'",
		 ident);
	other_connection(f, sql);
	assert_int_equal(store_key_lookup(r1, hash, &a), RCS_ERR_NOTFOUND);
	assert_int_equal(store_key_lookup(r2, hash, &a), RCS_ERR_NOTFOUND);
	/* a reader refuses writes */
	assert_int_not_equal(store_device_insert(r1, f->root, ident, "r", "[]", 100), RCS_OK);
	assert_false(committed(f, ident));
	store_reader_put(f->st, r1);
	store_reader_put(f->st, r2);
	/* taken again, in any order */
	r1 = store_reader(f->st);
	assert_int_equal(store_key_lookup(r1, hash, &a), RCS_ERR_NOTFOUND);
	store_reader_put(f->st, r1);
}

/* A statement that fails (division by zero) unless the connection starts no parallel
 * workers (store_pg.c, pg_connect) */
#define NO_PARALLEL_WORKERS                                                                        \
	"SELECT 1 / CASE WHEN current_setting('max_parallel_workers_per_gather') = '0' THEN 1"     \
	" ELSE 0 END"

/* PostgreSQL: a URL's own options (a schema of the database's other than public) hold for
 * the readers as for the writer; readers stay read-only; the writer starts no parallel
 * workers. */
static void test_readers_keep_url_options(void **state)
{
	struct fixture *f = *state;
	char url[600], ident[UUID_STR_LEN], hash[AUTH_HASH_LEN], root[UUID_STR_LEN];
	struct store *st = NULL, *r;
	struct auth a;

	if (!store_test_pg())
		skip();
#ifdef RCS_WITH_POSTGRES
	assert_true(store_test_pg_exec(f->path, "CREATE SCHEMA alt"));
	assert_true((size_t)snprintf(url, sizeof(url), "%s?options=-csearch_path%%3Dalt", f->path) <
		    sizeof(url));
	assert_int_equal(store_open(url, &st), RCS_OK);
	/* the migrations made their tables in schema alt */
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(*) FROM information_schema.tables WHERE"
					   " table_schema = ? AND table_name = 'api_keys'",
					   "alt"),
			 1);
	assert_int_equal(uuid_v7(root), RCS_OK);
	assert_int_equal(store_tenant_create(st, root, 100), RCS_OK);
	assert_int_equal(uuid_v7(ident), RCS_OK);
	auth_key_hash("rcs_alt_key", hash);
	assert_int_equal(store_key_create(st, ident, root, "alt", ROLE_ADMIN, hash, 100), RCS_OK);
	assert_int_equal(store_readers_open(st, 1), RCS_OK);
	r = store_reader(st);
	assert_ptr_not_equal(r, st);
	assert_int_equal(store_key_lookup(r, hash, &a), RCS_OK);
	assert_string_equal(a.user, "alt");
	assert_int_not_equal(store_device_insert(r, root, ident, "r", "[]", 100), RCS_OK);
	store_reader_put(st, r);
	/* the writer runs no parallel plans, with the URL's options as without them */
	assert_int_equal(store_write(st, NO_PARALLEL_WORKERS, NULL, 0), RCS_OK);
	assert_int_equal(store_write(f->st, NO_PARALLEL_WORKERS, NULL, 0), RCS_OK);
	store_close(st);
#else
	(void)url, (void)ident, (void)hash, (void)root, (void)st, (void)r, (void)a, (void)f;
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_threads_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failing_savepoint, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failed_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_readers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_direct_locker_commits_open_batch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_readers_keep_url_options, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
