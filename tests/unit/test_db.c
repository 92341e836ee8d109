/* Unit tests of common/db.c (the store's and the journal's SQLite layer) on real SQLite. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "db.h"

static sqlite3 *open_mem(void)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	return db;
}

static void test_rc(void **state)
{
	sqlite3 *db = open_mem();

	(void)state;
	assert_int_equal(db_rc(db, SQLITE_OK, "t", "ok"), RCS_OK);
	assert_int_equal(db_rc(db, SQLITE_ROW, "t", "row"), RCS_OK);
	assert_int_equal(db_rc(db, SQLITE_DONE, "t", "done"), RCS_OK);
	assert_int_equal(db_rc(db, SQLITE_FULL, "t", "full"), RCS_ERR_FULL);
	assert_int_equal(db_rc(db, SQLITE_BUSY, "t", "busy"), RCS_ERR_BUSY);
	assert_int_equal(db_rc(db, SQLITE_LOCKED, "t", "locked"), RCS_ERR_BUSY);
	assert_int_equal(db_rc(db, SQLITE_CONSTRAINT, "t", "constraint"), RCS_ERR_EXISTS);
	assert_int_equal(db_rc(db, SQLITE_CONSTRAINT_UNIQUE, "t", "extended"), RCS_ERR_EXISTS);
	assert_int_equal(db_rc(db, SQLITE_CANTOPEN, "t", "cantopen"), RCS_ERR_IO);
	assert_int_equal(db_rc(db, SQLITE_READONLY, "t", "readonly"), RCS_ERR_IO);
	assert_int_equal(db_rc(db, SQLITE_NOMEM, "t", "nomem"), RCS_ERR_NOMEM);
	assert_int_equal(db_rc(db, SQLITE_TOOBIG, "t", "toobig"), RCS_ERR_TOOBIG);
	assert_int_equal(db_rc(db, SQLITE_CORRUPT, "t", "corrupt"), RCS_ERR_DB);
	/* a real constraint failure, through a statement */
	assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(a PRIMARY KEY); INSERT INTO t VALUES(1)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(
	    db_rc(db, sqlite3_exec(db, "INSERT INTO t VALUES(1)", NULL, NULL, NULL), "t", "dup"),
	    RCS_ERR_EXISTS);
	sqlite3_close(db);
}

static void test_cache(void **state)
{
	static const char sql[] = "SELECT ?1 + 1";
	struct db_cache c;
	sqlite3 *db = open_mem();
	sqlite3_stmt *a = NULL, *b = NULL, *again = NULL;

	(void)state;
	memset(&c, 0, sizeof(c));
	assert_int_equal(db_prepare(&c, db, "t", sql, &a), RCS_OK);
	assert_int_equal(c.n, 1);
	/* a nested use of the same SQL gets a statement of its own, not the busy one */
	assert_int_equal(db_prepare(&c, db, "t", sql, &b), RCS_OK);
	assert_ptr_not_equal(a, b);
	assert_int_equal(c.n, 1);
	sqlite3_bind_int(a, 1, 41);
	assert_int_equal(sqlite3_step(a), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(a, 0), 42);
	db_release(&c, b); /* finalized */
	db_release(&c, a); /* reset, bindings cleared, kept */
	assert_int_equal(db_prepare(&c, db, "t", sql, &again), RCS_OK);
	assert_ptr_equal(again, a);
	assert_int_equal(sqlite3_step(again), SQLITE_ROW);
	assert_int_equal(sqlite3_column_type(again, 0), SQLITE_NULL); /* no binding left */
	db_release(&c, again);
	db_release(&c, NULL);
	assert_int_equal(db_prepare(&c, db, "t", "SELECT nonsense FROM nowhere", &a), RCS_ERR_DB);
	assert_null(a);
	db_cache_clear(&c);
	assert_int_equal(c.n, 0);
	assert_int_equal(sqlite3_close(db), SQLITE_OK); /* nothing left unfinalized */
}

static long long pragma(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *s = NULL;
	long long v = -1;

	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	if (sqlite3_step(s) == SQLITE_ROW)
		v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return v;
}

static void test_migrate(void **state)
{
	static const char *const v2[] = {"CREATE TABLE a(x)", "CREATE TABLE b(y)"};
	static const char *const bad[] = {"CREATE TABLE a(x)", "CREATE TABLE b(y)",
					  "CREATE TABLE c(z); CREATE TABLE c(z)"};
	char path[] = "/tmp/rcs-test-db-XXXXXX";
	sqlite3 *db = NULL;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(db_migrate(db, "t", v2, 1, 0x1234), RCS_OK);
	assert_int_equal(pragma(db, "PRAGMA user_version"), 1);
	assert_int_equal(pragma(db, "PRAGMA application_id"), 0x1234);
	assert_int_equal(db_migrate(db, "t", v2, 2, 0x1234), RCS_OK);
	assert_int_equal(pragma(db, "PRAGMA user_version"), 2);
	assert_int_equal(db_migrate(db, "t", v2, 2, 0x1234), RCS_OK); /* nothing to do */
	/* a failing migration leaves the schema where it was */
	assert_int_equal(db_migrate(db, "t", bad, 3, 0x1234), RCS_ERR_DB);
	assert_int_equal(pragma(db, "PRAGMA user_version"), 2);
	assert_int_equal(pragma(db, "SELECT count(*) FROM sqlite_master WHERE name = 'c'"), 0);
	/* another program's file, a newer schema */
	assert_int_equal(db_migrate(db, "t", v2, 2, 0x4321), RCS_ERR_DB);
	assert_int_equal(db_migrate(db, "t", v2, 1, 0x1234), RCS_ERR_DB);
	sqlite3_close(db);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rc),
	    cmocka_unit_test(test_cache),
	    cmocka_unit_test(test_migrate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
