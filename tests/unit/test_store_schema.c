/*
 * Unit tests of the store's schema (coordinator/store_schema.c; docs/architecture.md, "The
 * store"): a new database ends with the schema of the test vectors, on SQLite its
 * sqlite_master exactly (tests/vectors/store-schema-sqlite.txt), on PostgreSQL its catalog's
 * columns, indexes, constraints, triggers and functions (store-schema-postgres.txt); and both
 * engines end with the same tables, columns (types compared modulo INTEGER/BIGINT and
 * BLOB/TEXT) and indexes with their columns (store-schema-common.txt). The .pg variant opens
 * a database of each engine and compares them. RCS_SCHEMA_WRITE=dir writes the dumps to dir
 * instead of comparing them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "store.h"
#include "store_int.h"
#include "store_test_db.h"

/* The rows of sql (its text for st's engine) into b: columns '|'-separated, a line each. */
static void dump(struct store *st, const char *sql, struct buf *b)
{
	struct store_stmt *s = NULL;
	bool row = false;

	store_lock(st);
	assert_int_equal(store_stmt_fresh(st, sql, &s), RCS_OK);
	while (store_next(st, s, "dump", &row) == RCS_OK && row) {
		int n = 0;

		while (!store_val_null(s, n))
			n++;
		for (int i = 0; i < n; i++) {
			const char *v = store_val_text(s, i);

			assert_int_equal(buf_appendf(b, "%s%s", i ? "|" : "", v ? v : ""), RCS_OK);
		}
		assert_int_equal(buf_append(b, "\n", 1), RCS_OK);
	}
	store_stmt_done(st, s);
	store_unlock(st);
}

/* Every query's last column is a NULL that ends the row (dump reads up to it). */

/* The schema as the engine holds it: SQLite's sqlite_master, PostgreSQL's catalog. */
static const char *const exact_sq[] = {
    "SELECT type, name, tbl_name, coalesce(sql, '-'), NULL FROM sqlite_master"
    " ORDER BY type, name",
};
static const char *const exact_pg[] = {
    "SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '-'),"
    " is_identity, NULL FROM information_schema.columns WHERE table_schema = current_schema()"
    " ORDER BY table_name, ordinal_position",
    "SELECT indexname, indexdef, NULL FROM pg_indexes WHERE schemaname = current_schema()"
    " ORDER BY indexname",
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), NULL FROM"
    " pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "SELECT tgname, pg_get_triggerdef(oid), NULL FROM pg_trigger WHERE NOT tgisinternal"
    " ORDER BY tgname",
    "SELECT proname, prosrc, NULL FROM pg_proc WHERE pronamespace ="
    " current_schema()::regnamespace ORDER BY proname",
};

/* The indexes of jobs that PostgreSQL's migrations 15 and 16 make partial on its own column
 * stage (the exact dumps hold both engines' definitions). */
#define JOBS_STAGE_INDEXES                                                                         \
	"('jobs_status', 'jobs_pending', 'jobs_sched', 'jobs_unacked', 'jobs_inflight',"           \
	" 'jobs_stale', 'jobs_ttl', 'jobs_due')"

/* The schema in the engines' common terms (PostgreSQL's own tables left out: the chunks of
 * artifacts and their uploads, migration 9; and the column stage of jobs and the indexes of
 * jobs on it, migrations 15 and 16): tables, columns (name, type, whether NULL is refused, a
 * key's columns refuse it on both), explicit indexes and their columns. */
static const char *const common_sq[] = {
    "SELECT 'column', m.name, p.name, CASE WHEN p.type IN ('INTEGER', 'BIGINT') THEN 'int'"
    " WHEN p.type IN ('TEXT', 'BLOB') THEN 'text' ELSE p.type END, CASE WHEN p.\"notnull\""
    " OR p.pk > 0 THEN 'not null' ELSE 'null' END, NULL FROM sqlite_master m,"
    " pragma_table_info(m.name) p WHERE m.type = 'table' ORDER BY m.name, p.cid",
    "SELECT 'index', m.tbl_name, m.name, i.name, NULL FROM sqlite_master m,"
    " pragma_index_info(m.name) i WHERE m.type = 'index' AND m.sql IS NOT NULL"
    " AND m.name NOT IN " JOBS_STAGE_INDEXES " ORDER BY m.name, i.seqno",
};
static const char *const common_pg[] = {
    "SELECT 'column', table_name, column_name, CASE WHEN data_type IN ('bigint', 'integer')"
    " THEN 'int' WHEN data_type IN ('text', 'bytea') THEN 'text' ELSE data_type END,"
    " CASE WHEN is_nullable = 'NO' THEN 'not null' ELSE 'null' END, NULL FROM"
    " information_schema.columns WHERE table_schema = current_schema() AND table_name NOT IN"
    " ('schema_version', 'artifact_chunks', 'artifact_uploads') AND NOT (table_name = 'jobs'"
    " AND column_name = 'stage') ORDER BY table_name, ordinal_position",
    "SELECT 'index', t.relname, i.relname, a.attname, NULL FROM pg_index x JOIN pg_class i ON"
    " i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON"
    " n.oid = t.relnamespace CROSS JOIN LATERAL unnest(CAST(x.indkey AS int2[])) WITH"
    " ORDINALITY AS k(attnum, ord) JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum ="
    " k.attnum WHERE n.nspname = current_schema() AND NOT EXISTS (SELECT 1 FROM pg_constraint"
    " c WHERE c.conindid = x.indexrelid) AND i.relname NOT IN " JOBS_STAGE_INDEXES
    " ORDER BY i.relname, k.ord",
};

static void dump_all(struct store *st, const char *const *sq, size_t n_sq, const char *const *pg,
		     size_t n_pg, struct buf *b)
{
	bool is_pg = st->dialect == STORE_DIALECT_POSTGRES;

	buf_init(b, 1 << 22);
	for (size_t i = 0; i < (is_pg ? n_pg : n_sq); i++)
		dump(st, is_pg ? pg[i] : sq[i], b);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* Compares b with the vector file name (or writes it to RCS_SCHEMA_WRITE's directory). */
static void check_vector(const struct buf *b, const char *name)
{
	const char *out = getenv("RCS_SCHEMA_WRITE");
	char path[512];
	FILE *fp;
	char *want = NULL;
	long size;

	if (out && *out) {
		snprintf(path, sizeof(path), "%s/%s", out, name);
		fp = fopen(path, "w");
		assert_non_null(fp);
		assert_int_equal(fwrite(b->data, 1, b->len, fp), b->len);
		fclose(fp);
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", RCS_VECTORS_DIR, name);
	fp = fopen(path, "r");
	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	size = ftell(fp);
	rewind(fp);
	want = calloc(1, (size_t)size + 1);
	assert_non_null(want);
	assert_int_equal(fread(want, 1, (size_t)size, fp), (size_t)size);
	fclose(fp);
	assert_string_equal(b->data, want);
	free(want);
}

struct fixture {
	char dir[64];
	char path[160];
	struct store *st;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_true(store_test_dir_db("schema", f->dir, sizeof(f->dir), f->path, sizeof(f->path)));
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	bool gone;

	store_close(f->st);
	gone = store_test_dir_gone(f->dir);
	free(f);
	return gone ? 0 : 1;
}

/* A new database holds the engine's schema of the vector, exactly. */
static void test_exact(void **state)
{
	struct fixture *f = *state;
	struct buf b;

	dump_all(f->st, exact_sq, N(exact_sq), exact_pg, N(exact_pg), &b);
	check_vector(&b, store_test_pg() ? "store-schema-postgres.txt" : "store-schema-sqlite.txt");
	buf_free(&b);
}

/* A new database holds the schema both engines share. */
static void test_common(void **state)
{
	struct fixture *f = *state;
	struct buf b;

	dump_all(f->st, common_sq, N(common_sq), common_pg, N(common_pg), &b);
	check_vector(&b, "store-schema-common.txt");
	buf_free(&b);
}

/* Each engine's schema version counts the migrations it ran: 14 on SQLite, 17 on PostgreSQL
 * (migrations 6, 15, 16 and 17 are PostgreSQL's own; SQLite's are empty, and its count stops
 * at the last one with text for it); a database at 5 on PostgreSQL continues with 6 to 17 and
 * ends with the same schema; opened again, nothing runs. */
static void test_versions(void **state)
{
	struct fixture *f = *state;
	const char *version =
	    store_test_pg() ? "SELECT max(version) FROM schema_version" : "PRAGMA user_version";
	struct buf b;

	assert_int_equal(store_test_db_int(f->path, version, NULL), store_test_pg() ? 17 : 14);
	store_close(f->st);
	f->st = NULL;
	if (store_test_pg()) {
#ifdef RCS_WITH_POSTGRES
		/* back to schema 5 (store_test_db.h) */
		assert_true(store_test_pg_exec(f->path, STORE_TEST_PG_REWIND_TO_5));
#endif
	}
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(store_test_db_int(f->path, version, NULL), store_test_pg() ? 17 : 14);
	dump_all(f->st, exact_sq, N(exact_sq), exact_pg, N(exact_pg), &b);
	check_vector(&b, store_test_pg() ? "store-schema-postgres.txt" : "store-schema-sqlite.txt");
	buf_free(&b);
}

/* On PostgreSQL: a new SQLite database beside it ends with the same tables, columns and
 * indexes. */
static void test_engines_agree(void **state)
{
	struct fixture *f = *state;
	struct store *sq = NULL;
	struct buf a, b;
	char path[192];

	if (!store_test_pg())
		skip();
	snprintf(path, sizeof(path), "%s/sq.db", f->dir);
	assert_int_equal(store_open(path, &sq), RCS_OK);
	dump_all(sq, common_sq, N(common_sq), common_pg, N(common_pg), &a);
	dump_all(f->st, common_sq, N(common_sq), common_pg, N(common_pg), &b);
	assert_string_equal(a.data, b.data);
	buf_free(&a);
	buf_free(&b);
	store_close(sq);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_exact, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_common, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_versions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_engines_agree, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
