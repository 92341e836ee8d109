/*
 * store_sqlite.c - the store's SQLite backend (the default, embedded engine): the migrations
 * of store_schema.c (run by common/db.c), opening and closing, and the operations of the
 * backend seam of store_int.h over SQLite's prepared statements and the statement cache of
 * common/db.c. WAL mode, foreign keys on, a busy timeout for the CLI's writes.
 * docs/architecture.md, "The store".
 */
#include "store_int.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "log.h"

/* ---- schema ---- */

/* Migrates the database to the schema of store_schema.c: migration N's common SQL and
 * SQLite's own, as one text for common/db.c's db_migrate (user_version N). */
static enum rcs_err sq_migrate(sqlite3 *db)
{
	size_t n = store_migrations_of(STORE_DIALECT_SQLITE), i;
	char **texts = calloc(n + 1, sizeof(*texts));
	enum rcs_err err = RCS_ERR_NOMEM;

	if (texts == NULL)
		goto out;
	for (i = 0; i < n; i++) {
		const char *a = store_migrations[i].sql ? store_migrations[i].sql : "";
		const char *b = store_migrations[i].sqlite ? store_migrations[i].sqlite : "";
		size_t la = strlen(a), lb = strlen(b);

		texts[i] = malloc(la + lb + 1);
		if (texts[i] == NULL)
			goto out;
		memcpy(texts[i], a, la);
		memcpy(texts[i] + la, b, lb + 1);
	}
	err = db_migrate(db, "store", (const char *const *)texts, n, 0);
out:
	for (i = 0; texts && i < n; i++)
		free(texts[i]);
	free(texts);
	return err;
}

/* ---- statements ---- */

/* The connection and its statements of constant SQL, prepared once (common/db.h). */
struct sq_conn {
	sqlite3 *db;
	struct db_cache cache;
};

static struct sq_conn *sq_conn(struct store *st)
{
	return st->conn;
}

struct sq_stmt {
	struct store_stmt base; /* first: the seam's view of it */
	sqlite3_stmt *s;
};

static sqlite3_stmt *sq(struct store_stmt *s)
{
	return ((struct sq_stmt *)s)->s;
}

static enum rcs_err sq_exec(struct store *st, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(sq_conn(st)->db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return db_rc(sq_conn(st)->db, rc, "store", "exec");
	}
	return RCS_OK;
}

static enum rcs_err sq_prepare(struct store *st, const char *sql, bool cached,
			       struct store_stmt **out)
{
	struct sq_stmt *w = NULL;
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	if (cached)
		err = db_prepare(&sq_conn(st)->cache, sq_conn(st)->db, "store", sql, &s);
	else
		err = db_prepare_fresh(sq_conn(st)->db, "store", sql, &s);
	if (err != RCS_OK)
		goto out;
	w = malloc(sizeof(*w));
	if (w == NULL) {
		db_release(&sq_conn(st)->cache, s);
		err = RCS_ERR_NOMEM;
		goto out;
	}
	w->base.be = &store_sqlite_backend;
	w->base.ran = false;
	w->s = s;
	*out = &w->base;
out:
	return err;
}

static void sq_release(struct store *st, struct store_stmt *s)
{
	db_release(&sq_conn(st)->cache, sq(s));
	free(s);
}

static void sq_reset(struct store_stmt *s)
{
	sqlite3_reset(sq(s)); /* its error was the step's, reported there */
}

static enum rcs_err sq_step(struct store *st, struct store_stmt *s, const char *what, bool *row)
{
	int rc = sqlite3_step(sq(s));

	*row = rc == SQLITE_ROW;
	return db_rc(sq_conn(st)->db, rc, "store", what);
}

static void sq_bind_text(struct store_stmt *s, int i, const char *v, size_t len)
{
	sqlite3_bind_text(sq(s), i, v, len == (size_t)-1 ? -1 : (int)len, SQLITE_TRANSIENT);
}

static void sq_bind_int(struct store_stmt *s, int i, long long v)
{
	sqlite3_bind_int64(sq(s), i, v);
}

static void sq_bind_null(struct store_stmt *s, int i)
{
	sqlite3_bind_null(sq(s), i);
}

static bool sq_is_null(struct store_stmt *s, int i)
{
	return sqlite3_column_type(sq(s), i) == SQLITE_NULL;
}

static const char *sq_text(struct store_stmt *s, int i)
{
	return (const char *)sqlite3_column_text(sq(s), i);
}

static size_t sq_len(struct store_stmt *s, int i)
{
	return (size_t)sqlite3_column_bytes(sq(s), i);
}

static long long sq_integer(struct store_stmt *s, int i)
{
	return sqlite3_column_int64(sq(s), i);
}

static long long sq_changes(struct store *st)
{
	return sqlite3_changes(sq_conn(st)->db);
}

/* SQLite rolls a transaction back by itself on some errors: then it is in autocommit. */
static bool sq_in_tx(struct store *st)
{
	return !sqlite3_get_autocommit(sq_conn(st)->db);
}

static enum rcs_err sq_ping(struct store *st)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	int moved = 0;
	bool row = false;

	/* an unlinked file still answers through its open descriptor, but nothing written
	 * to it survives a restart */
	if (sqlite3_file_control(sq_conn(st)->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) ==
		SQLITE_OK &&
	    moved) {
		log_warnx("the database file was removed or renamed while open");
		err = RCS_ERR_IO;
		goto out;
	}
	err = sq_prepare(st, "SELECT count(*) FROM sqlite_master", true, &s);
	if (err != RCS_OK)
		goto out;
	err = sq_step(st, s, "ping", &row);
	if (err == RCS_OK && !row)
		err = RCS_ERR_DB;
out:
	if (s)
		sq_release(st, s);
	return err;
}

static void sq_close(struct store *st)
{
	struct sq_conn *c = sq_conn(st);

	if (c == NULL)
		return;
	db_cache_clear(&c->cache);
	/* a clean close checkpoints the WAL into the main file */
	if (c->db && sqlite3_close(c->db) != SQLITE_OK)
		log_warnx("close: %s", sqlite3_errmsg(c->db));
	free(c);
	st->conn = NULL;
}

/* ---- opening ---- */

static pthread_once_t sq_once = PTHREAD_ONCE_INIT;

static void sq_global_init(void)
{
	/* allocation statistics cost a global lock per malloc; nothing here reads them */
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	sqlite3_initialize();
}

/* Connects st to the database file of path: the writer (which creates it when missing) or
 * a reader. */
static enum rcs_err sq_connect(struct store *st, const char *path, bool reader)
{
	struct sq_conn *c = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (reader ? 0 : SQLITE_OPEN_CREATE);
	int rc;

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto out;
	st->conn = c;
	rc = sqlite3_open_v2(path, &c->db, flags, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", path, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		err = RCS_ERR_IO;
		goto out;
	}
	sqlite3_busy_timeout(c->db, 10000);
	sqlite3_extended_result_codes(c->db, 0);
	err = RCS_OK;
out:
	return err;
}

static enum rcs_err sq_open(struct store *st, const char *path)
{
	enum rcs_err err;

	pthread_once(&sq_once, sq_global_init);
	err = sq_connect(st, path, false);
	if (err != RCS_OK)
		goto out;
	err = sq_exec(st, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
			  "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;");
	if (err != RCS_OK) {
		err = RCS_ERR_IO;
		goto out;
	}
	err = sq_migrate(sq_conn(st)->db);
out:
	return err;
}

/* A reader: its own connection in WAL mode, which reads the last commit without waiting for
 * the writer; query_only refuses any write through it. */
static enum rcs_err sq_open_reader(struct store *r, const char *path)
{
	enum rcs_err err = sq_connect(r, path, true);

	if (err == RCS_OK)
		err = sq_exec(r, "PRAGMA query_only = 1; PRAGMA temp_store = MEMORY;");
	return err;
}

const struct store_backend store_sqlite_backend = {
    .name = "sqlite",
    .dialect = STORE_DIALECT_SQLITE,
    .begin_sql = "BEGIN IMMEDIATE",
    /* not shared, no listen nor notify: one coordinator per database, nothing to wake */
    STORE_BACKEND_OPS(sq),
};
