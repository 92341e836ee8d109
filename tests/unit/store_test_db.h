/*
 * store_test_db.h - the database a unit test of the store opens: a file in the test's
 * directory (SQLite), or, when RCS_TEST_PG_URL names a PostgreSQL server's database (ctest's
 * .pg variants start one with tests/integration/pg_server.py), a new empty database there.
 */
#ifndef RCS_STORE_TEST_DB_H
#define RCS_STORE_TEST_DB_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef RCS_WITH_POSTGRES
#include <libpq-fe.h>
#endif

static inline const char *store_test_pg_url(void)
{
	const char *u = getenv("RCS_TEST_PG_URL");

	return u && *u ? u : NULL;
}

static inline bool store_test_pg(void)
{
	return store_test_pg_url() != NULL;
}

/* A PostgreSQL database taken back to schema 5, as a coordinator of that time left it: what
 * migrations 7 to 9 and 11 to 16 added goes (6 and 10 are safe to run again; 15 took the
 * job indexes to the stage column, whose old forms come back; the foreign keys 17 drops
 * come back). */
#define STORE_TEST_PG_REWIND_TO_5                                                                  \
	"UPDATE schema_version SET version = 5;"                                                   \
	" ALTER TABLE devices DROP COLUMN state_ts;"                                               \
	" DROP TABLE group_rejected; DROP TABLE artifacts;"                                        \
	" DROP TABLE artifact_chunks; DROP TABLE artifact_uploads;"                                \
	" ALTER TABLE tasks DROP COLUMN artifacts, DROP COLUMN release,"                           \
	" DROP COLUMN download_timeout;"                                                           \
	" ALTER TABLE task_versions DROP COLUMN artifacts, DROP COLUMN release,"                   \
	" DROP COLUMN download_timeout;"                                                           \
	" ALTER TABLE jobs DROP COLUMN progress_done, DROP COLUMN progress_total;"                 \
	" DROP TABLE task_artifacts; DROP TABLE artifact_secrets;"                                 \
	" DROP TABLE job_downloads; ALTER TABLE devices DROP COLUMN attributes;"                   \
	" DROP INDEX jobs_reboot; ALTER TABLE jobs DROP COLUMN phase,"                             \
	" DROP COLUMN reboot_within, DROP COLUMN reboot_deadline;"                                 \
	" ALTER TABLE job_history DROP COLUMN phase;"                                              \
	" ALTER TABLE groups DROP COLUMN dl_max, DROP COLUMN dl_rate;"                             \
	" ALTER TABLE jobs DROP COLUMN stage; ALTER TABLE jobs RESET (fillfactor);"                \
	" CREATE INDEX jobs_status ON jobs(client_root, status, ident);"                           \
	" CREATE INDEX jobs_pending ON jobs(entity_ident, scheduled_time) WHERE"                   \
	" status = 'pending';"                                                                     \
	" CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE status = 'pending'"                \
	" AND scheduled_time IS NOT NULL;"                                                         \
	" CREATE INDEX jobs_unacked ON jobs(entity_ident) WHERE status = 'transmited';"            \
	" CREATE INDEX jobs_inflight ON jobs(update_at) WHERE (status = 'transmited' OR"           \
	" status = 'edge_transmitted' OR status = 'edge_started' OR"                               \
	" status = 'edge_running');"                                                               \
	" CREATE INDEX jobs_ttl ON jobs(expires_at) WHERE expires_at IS NOT NULL AND"              \
	" status IN ('pending', 'transmited');"                                                    \
	" ALTER TABLE job_history ADD FOREIGN KEY (job_ident) REFERENCES jobs(ident);"             \
	" ALTER TABLE jobs ADD FOREIGN KEY (client_root) REFERENCES tenants(client_root),"         \
	" ADD FOREIGN KEY (group_ident) REFERENCES groups(ident), ADD FOREIGN KEY"                 \
	" (task_ident, task_version) REFERENCES task_versions(task_ident, version)"

#ifdef RCS_WITH_POSTGRES
/* Runs sql on the database of url; false on an error (printed). */
static inline bool store_test_pg_exec(const char *url, const char *sql)
{
	PGconn *c = PQconnectdb(url);
	PGresult *r = NULL;
	bool ok = false;

	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "%s: %s", url, PQerrorMessage(c));
		goto out;
	}
	r = PQexec(c, sql);
	ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "%s: %s", sql, PQresultErrorMessage(r));
out:
	PQclear(r);
	PQfinish(c);
	return ok;
}
#endif

/* The one integer (-1 for NULL) sql answers with its one text parameter ? on db, another
 * connection than the store's (on PostgreSQL ? is sent as $1). */
static inline long long store_test_db_int(const char *db, const char *sql, const char *param);

/* The database of the test whose directory is dir into out: dir/t.db, or the URL of a new
 * PostgreSQL database. false when it could not be made. */
static inline bool store_test_db(const char *dir, char *out, size_t size)
{
	const char *base = store_test_pg_url();

	if (base == NULL)
		return (size_t)snprintf(out, size, "%s/t.db", dir) < size;
#ifdef RCS_WITH_POSTGRES
	{
		static int n;
		const char *slash = strrchr(base, '/');
		char name[64], sql[96];

		snprintf(name, sizeof(name), "t_%ld_%d", (long)getpid(), ++n);
		snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
		if (slash == NULL || !store_test_pg_exec(base, sql))
			return false;
		return (size_t)snprintf(out, size, "%.*s/%s", (int)(slash - base), base, name) <
		       size;
	}
#else
	return false;
#endif
}

/* A new directory of the test, /tmp/rcs-<name>-XXXXXX, into dir, and its database (as
 * store_test_db) into path. false when either could not be made. */
static inline bool store_test_dir_db(const char *name, char *dir, size_t dir_size, char *path,
				     size_t path_size)
{
	if ((size_t)snprintf(dir, dir_size, "/tmp/rcs-%s-XXXXXX", name) >= dir_size ||
	    mkdtemp(dir) == NULL)
		return false;
	return store_test_db(dir, path, path_size);
}

/* Removes the test's directory and all in it; false when it could not. */
static inline bool store_test_dir_gone(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0;
}

#include <sqlite3.h>

static inline long long store_test_db_int(const char *db, const char *sql, const char *param)
{
	long long v = -2;

	if (store_test_pg()) {
#ifdef RCS_WITH_POSTGRES
		char pg[512];
		const char *q = strchr(sql, '?');
		PGconn *c = PQconnectdb(db);
		PGresult *r = NULL;

		if (q == NULL)
			snprintf(pg, sizeof(pg), "%s", sql);
		else
			snprintf(pg, sizeof(pg), "%.*s$1%s", (int)(q - sql), sql, q + 1);
		r = PQexecParams(c, pg, q ? 1 : 0, NULL, &param, NULL, NULL, 0);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			v = PQgetisnull(r, 0, 0) ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		else
			fprintf(stderr, "%s: %s", pg, PQresultErrorMessage(r));
		PQclear(r);
		PQfinish(c);
#endif
		return v;
	}
	{
		sqlite3 *h = NULL;
		sqlite3_stmt *s = NULL;

		if (sqlite3_open(db, &h) == SQLITE_OK &&
		    sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK) {
			if (strchr(sql, '?'))
				sqlite3_bind_text(s, 1, param, -1, SQLITE_STATIC);
			if (sqlite3_step(s) == SQLITE_ROW)
				v = sqlite3_column_type(s, 0) == SQLITE_NULL
					? -1
					: sqlite3_column_int64(s, 0);
		}
		sqlite3_finalize(s);
		sqlite3_close(h);
	}
	return v;
}

#endif
