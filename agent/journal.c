/*
 * journal.c - the agent's journal in SQLite. See journal.h.
 *
 * One connection, one mutex: every public function takes the lock, does its
 * statements (in one BEGIN IMMEDIATE transaction when there are several) and
 * releases it. The statements of the calls made for every job are prepared
 * once and kept (j_stmt, j_release): parsing SQL was a tenth of the agent's
 * CPU per job. The ones run once at open are prepared and finalized.
 *
 * Size: over 1,000 lines on purpose: the schema and its migrations, the queries of
 * jobs, reports and the outbox, task versions and device settings all go
 * through the same private machinery (struct journal, the lock, the statement
 * cache and error mapping of common/db.h, j_begin/j_end transactions). Split
 * in two, that machinery would become an
 * interface between the halves, and every caller of the lock and of a cached
 * statement would have to keep its rules across files; kept whole, what
 * touches the SQLite handle is in one file, and the sections below keep the
 * parts apart.
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "jsonu.h"
#include "log.h"
#include "proto.h"

#define JOURNAL_APP_ID  0x52435341 /* "RCSA": this file is an agent journal */
#define JOURNAL_BUSY_MS 5000
/* the WAL file is cut back to this size after a checkpoint */
#define JOURNAL_WAL_LIMIT      (4 * 1024 * 1024)
#define JOURNAL_MAX_TASK_IDENT 64

struct journal {
	sqlite3 *db;
	struct db_cache cache; /* statements of the calls made for every job (common/db.h) */
	pthread_mutex_t lock;
	long long default_max_pages; /* max_page_count as SQLite opened it */
	bool wal;                    /* journal_mode WAL (else the rollback journal) */
};

/* ---- schema ---- */

static const char *const journal_migrations[] = {
    /* 1: the first schema */
    /* every job ever received; arrival is the arrival order (never reused) */
    "CREATE TABLE jobs(\n"
    "  arrival INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  ident TEXT NOT NULL UNIQUE,\n"
    "  task_ident TEXT NOT NULL,\n"
    "  task_version INTEGER NOT NULL,\n"
    "  state TEXT NOT NULL DEFAULT 'queued'\n"
    "    CHECK(state IN ('queued', 'running', 'done', 'dropped')),\n"
    "  payload BLOB,\n" /* the envelope; NULL once pruned */
    "  received_at INTEGER NOT NULL,\n"
    "  last_seq INTEGER NOT NULL DEFAULT 0,\n" /* seq of the latest report */
    "  last_status TEXT,\n"                    /* its status; NULL before the first */
    "  last_report TEXT\n"                     /* its payload: the final report once terminal */
    ");\n"
    "CREATE INDEX jobs_state ON jobs(state, arrival);\n"
    /* reports not yet acknowledged by the broker; ids are never reused */
    "CREATE TABLE outbox(\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  job TEXT NOT NULL REFERENCES jobs(ident),\n"
    "  seq INTEGER NOT NULL,\n"
    "  payload TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX outbox_job ON outbox(job, seq);\n"
    "CREATE TABLE task_versions(\n"
    "  task_ident TEXT PRIMARY KEY,\n"
    "  version INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE config(\n"
    "  key TEXT PRIMARY KEY,\n"
    "  value TEXT NOT NULL\n"
    ") WITHOUT ROWID;\n",
    /* 2: artifacts (docs/agent.md "Artifacts"): the offset of each <sha256>.part up to which
     * the bytes were fsynced, and the jobs still downloading (resumed, not interrupted, after
     * a restart: their script has not started) */
    "CREATE TABLE downloads(\n"
    "  sha256 TEXT PRIMARY KEY,\n"
    "  offset INTEGER NOT NULL CHECK(offset >= 0)\n"
    ") WITHOUT ROWID;\n"
    "ALTER TABLE jobs ADD COLUMN downloading INTEGER NOT NULL DEFAULT 0;\n"
    /* the highest release seq completed (its job terminated) on each stream */
    "CREATE TABLE releases(\n"
    "  stream TEXT PRIMARY KEY,\n"
    "  seq INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n",
    /* 3: jobs that span a reboot (docs/agent.md "Phases"): the phase a job runs in or waits
     * for (NULL: its first run), whether it waits for its reboot, the runs of that phase
     * started, the reboots it asked for, the boot id of its last run or reboot request, and
     * its rcs.state (JSON text; NULL: empty) */
    "ALTER TABLE jobs ADD COLUMN phase TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN phase_waiting INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE jobs ADD COLUMN phase_runs INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE jobs ADD COLUMN reboots INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE jobs ADD COLUMN boot_id TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN script_state TEXT;\n",
};

#define JOURNAL_N_MIGRATIONS (sizeof(journal_migrations) / sizeof(journal_migrations[0]))

_Static_assert(JOURNAL_N_MIGRATIONS == JOURNAL_SCHEMA_VERSION,
	       "JOURNAL_SCHEMA_VERSION must count the migrations");

static const char *const journal_state_names[] = {"queued", "running", "done", "dropped"};

const char *journal_state_name(enum journal_state st)
{
	if ((unsigned)st >= sizeof(journal_state_names) / sizeof(journal_state_names[0]))
		return "unknown";
	return journal_state_names[st];
}

static bool journal_state_parse(const char *name, enum journal_state *out)
{
	for (size_t i = 0; i < sizeof(journal_state_names) / sizeof(journal_state_names[0]); i++) {
		if (name != NULL && strcmp(name, journal_state_names[i]) == 0) {
			*out = (enum journal_state)i;
			return true;
		}
	}
	return false;
}

/* ---- helpers (all called with the lock held) ---- */

static void j_lock(struct journal *j)
{
	pthread_mutex_lock(&j->lock);
}

static void j_unlock(struct journal *j)
{
	pthread_mutex_unlock(&j->lock);
}

/* Maps an SQLite result to an rcs_err, logging failures. A full disk is
 * RCS_ERR_FULL whether SQLite saw it as SQLITE_FULL or as a write error. */
static enum rcs_err j_rc(struct journal *j, int rc, const char *what)
{
	return db_rc(j->db, rc, "journal", what);
}

static enum rcs_err j_prepare(struct journal *j, const char *sql, sqlite3_stmt **s)
{
	return db_prepare_fresh(j->db, "journal", sql, s);
}

/*
 * A prepared statement kept for the connection's life. sql must be a string
 * literal or a static array of this file: the cache keeps the pointer. Past
 * DB_CACHE_MAX texts (more than this file has) a statement is prepared
 * for this call only. Give it back with j_release.
 */
static enum rcs_err j_stmt(struct journal *j, const char *sql, sqlite3_stmt **s)
{
	return db_prepare(&j->cache, j->db, "journal", sql, s);
}

/* Ends the use of a statement from j_stmt: reset and kept, or finalized. */
static void j_release(struct journal *j, sqlite3_stmt *s)
{
	db_release(&j->cache, s);
}

/* Runs a statement that returns no rows, from the cache. */
static enum rcs_err j_run(struct journal *j, const char *sql)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err = j_stmt(j, sql, &s);

	if (err == RCS_OK)
		err = j_rc(j, sqlite3_step(s), sql);
	j_release(j, s);
	return err;
}

static enum rcs_err j_exec(struct journal *j, const char *sql)
{
	return j_rc(j, sqlite3_exec(j->db, sql, NULL, NULL, NULL), sql);
}

/* Steps a write statement to its end. */
static enum rcs_err j_step_done(struct journal *j, sqlite3_stmt *s, const char *what)
{
	int rc = sqlite3_step(s);

	if (rc == SQLITE_ROW)
		return RCS_ERR_INTERNAL;
	return j_rc(j, rc, what);
}

static enum rcs_err j_begin(struct journal *j)
{
	return j_run(j, "BEGIN IMMEDIATE");
}

/* Ends the transaction begun by j_begin: commits when err is RCS_OK (a failed
 * commit becomes the error), rolls back otherwise. Returns the outcome. */
static enum rcs_err j_end(struct journal *j, enum rcs_err err)
{
	if (err == RCS_OK)
		err = j_run(j, "COMMIT");
	if (err != RCS_OK && !sqlite3_get_autocommit(j->db)) {
		if (j_run(j, "ROLLBACK") != RCS_OK)
			log_warnx("journal: rollback: %s", sqlite3_errmsg(j->db));
	}
	return err;
}

static bool job_valid(const char *job)
{
	return job != NULL && uuid_valid(job);
}

static bool task_ident_valid(const char *t)
{
	size_t n;

	if (t == NULL)
		return false;
	n = strnlen(t, JOURNAL_MAX_TASK_IDENT + 1);
	return n > 0 && n <= JOURNAL_MAX_TASK_IDENT;
}

/* A malloc'd, NUL-terminated copy of column col (text or blob). */
static enum rcs_err j_column_dup(sqlite3_stmt *s, int col, char **out, size_t *len)
{
	const void *p = sqlite3_column_blob(s, col);
	size_t n = (size_t)sqlite3_column_bytes(s, col);
	char *c;

	*out = NULL;
	c = malloc(n + 1);
	if (c == NULL)
		return RCS_ERR_NOMEM;
	if (n > 0)
		memcpy(c, p, n);
	c[n] = '\0';
	*out = c;
	if (len != NULL)
		*len = n;
	return RCS_OK;
}

static enum rcs_err j_count(struct journal *j, const char *sql, size_t *n)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*n = 0;
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_INTERNAL : j_rc(j, rc, sql);
		goto out;
	}
	*n = (size_t)sqlite3_column_int64(s, 0);
out:
	j_release(j, s);
	return err;
}

/* j_count under the lock, for the public counts (*n 0 on any failure). */
static enum rcs_err j_count_locked(struct journal *j, const char *sql, size_t *n)
{
	enum rcs_err err;

	if (n != NULL)
		*n = 0;
	if (j == NULL || n == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_count(j, sql, n);
	j_unlock(j);
	return err;
}

/*
 * (lock held) Steps sql, a cached statement whose ?1 is key, to its first row: RCS_OK with
 * *s on that row (read its columns), RCS_ERR_NOTFOUND when there is none, or the error
 * (what names it in the log). The caller gives *s back with j_release in every case.
 */
static enum rcs_err j_lookup(struct journal *j, const char *sql, const char *key, const char *what,
			     sqlite3_stmt **s)
{
	enum rcs_err err = j_stmt(j, sql, s);
	int rc;

	if (err == RCS_OK) {
		sqlite3_bind_text(*s, 1, key, -1, SQLITE_STATIC);
		rc = sqlite3_step(*s);
		if (rc != SQLITE_ROW)
			err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : j_rc(j, rc, what);
	}
	return err;
}

/* The integer of the first column of j_lookup's row (*out untouched without one). */
static enum rcs_err j_get_int(struct journal *j, const char *sql, const char *key, const char *what,
			      long long *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	j_lock(j);
	err = j_lookup(j, sql, key, what, &s);
	if (err == RCS_OK)
		*out = sqlite3_column_int64(s, 0);
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* A malloc'd copy of the text of the first column of j_lookup's row; *out untouched (NULL)
 * without a row or when the column is NULL. */
static enum rcs_err j_get_text(struct journal *j, const char *sql, const char *key,
			       const char *what, char **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	j_lock(j);
	err = j_lookup(j, sql, key, what, &s);
	if (err == RCS_OK && sqlite3_column_type(s, 0) != SQLITE_NULL)
		err = j_column_dup(s, 0, out, NULL);
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* ---- open, close ---- */

/* mkdir -p, the last component mode 0700. */
static enum rcs_err j_mkdirs(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;
	size_t n = strlen(dir);

	if (n >= sizeof(path))
		return RCS_ERR_TOOBIG;
	memcpy(path, dir, n + 1);
	while (n > 1 && path[n - 1] == '/')
		path[--n] = '\0';
	for (char *p = path + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) != 0 && errno != EEXIST) {
			log_warn("journal: mkdir %s", path);
			return RCS_ERR_IO;
		}
		*p = '/';
	}
	if (mkdir(path, 0700) != 0 && errno != EEXIST) {
		log_warn("journal: mkdir %s", path);
		return RCS_ERR_IO;
	}
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
		log_warnx("journal: %s is not a directory", path);
		return RCS_ERR_IO;
	}
	return RCS_OK;
}

static enum rcs_err j_pragma_int(struct journal *j, const char *sql, long long *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*out = 0;
	err = j_prepare(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int64(s, 0);
	else
		err = rc == SQLITE_DONE ? RCS_OK : j_rc(j, rc, sql);
out:
	sqlite3_finalize(s);
	return err;
}

static enum rcs_err j_migrate(struct journal *j)
{
	return db_migrate(j->db, "journal", journal_migrations, JOURNAL_N_MIGRATIONS,
			  JOURNAL_APP_ID);
}

static enum rcs_err j_quick_check(struct journal *j)
{
	sqlite3_stmt *s = NULL;
	const char *res;
	enum rcs_err err;
	int rc;

	err = j_prepare(j, "PRAGMA quick_check(1)", &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_DB : j_rc(j, rc, "quick_check");
		goto out;
	}
	res = (const char *)sqlite3_column_text(s, 0);
	if (res == NULL || strcmp(res, "ok") != 0) {
		log_warnx("journal: integrity check failed: %s", res ? res : "?");
		err = RCS_ERR_DB;
	}
out:
	sqlite3_finalize(s);
	return err;
}

static enum rcs_err j_setup(struct journal *j)
{
	sqlite3_stmt *s = NULL;
	const char *mode;
	char sql[80];
	enum rcs_err err;
	int rc;

	/* journal_mode is the first statement to read the file: a file that is
	 * not a database fails here */
	err = j_prepare(j, "PRAGMA journal_mode = WAL", &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = j_rc(j, rc, "journal_mode");
		goto out;
	}
	mode = (const char *)sqlite3_column_text(s, 0);
	j->wal = mode != NULL && strcmp(mode, "wal") == 0;
	if (!j->wal)
		log_warnx("journal: WAL not available here, using journal_mode %s",
			  mode ? mode : "?");
	sqlite3_finalize(s); /* no statement may stay active past this point */
	s = NULL;
	snprintf(sql, sizeof(sql), "PRAGMA journal_size_limit = %d", JOURNAL_WAL_LIMIT);
	if ((err = j_exec(j, "PRAGMA synchronous = FULL")) != RCS_OK ||
	    (err = j_exec(j, "PRAGMA foreign_keys = ON")) != RCS_OK ||
	    (err = j_exec(j, "PRAGMA temp_store = MEMORY")) != RCS_OK ||
	    (err = j_exec(j, sql)) != RCS_OK)
		goto out;
	if ((err = j_pragma_int(j, "PRAGMA max_page_count", &j->default_max_pages)) != RCS_OK ||
	    (err = j_migrate(j)) != RCS_OK || (err = j_quick_check(j)) != RCS_OK)
		goto out;
out:
	sqlite3_finalize(s);
	return err;
}

enum rcs_err journal_open(const char *state_dir, struct journal **out)
{
	struct journal *j = NULL;
	char path[PATH_MAX];
	bool locked = false;
	enum rcs_err err;
	int n, fd, rc;

	if (out == NULL)
		return RCS_ERR_INVAL;
	*out = NULL;
	if (state_dir == NULL || *state_dir == '\0')
		return RCS_ERR_INVAL;
	n = snprintf(path, sizeof(path), "%s/%s", state_dir, JOURNAL_FILE);
	if (n < 0 || (size_t)n >= sizeof(path))
		return RCS_ERR_TOOBIG;
	err = j_mkdirs(state_dir);
	if (err != RCS_OK)
		goto out;
	/* create it ourselves, so that the journal (and the WAL and shm files,
	 * which SQLite gives the same mode) holds the device settings 0600 */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		log_warn("journal: %s", path);
		err = RCS_ERR_IO;
		goto out;
	}
	close(fd);
	/* and make its directory entry durable: SQLite syncs the directory for
	 * the files it creates, not for this one */
	fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) != 0) {
		log_warn("journal: %s", state_dir);
		if (fd >= 0)
			close(fd);
		err = RCS_ERR_IO;
		goto out;
	}
	close(fd);

	err = RCS_ERR_NOMEM;
	j = calloc(1, sizeof(*j));
	if (j == NULL)
		goto out;
	if (pthread_mutex_init(&j->lock, NULL) != 0) {
		free(j);
		j = NULL;
		goto out;
	}
	rc = sqlite3_open_v2(path, &j->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("journal: %s: %s", path,
			  j->db ? sqlite3_errmsg(j->db) : sqlite3_errstr(rc));
		err = rc == SQLITE_NOMEM ? RCS_ERR_NOMEM : RCS_ERR_IO;
		goto out;
	}
	sqlite3_busy_timeout(j->db, JOURNAL_BUSY_MS);
	sqlite3_extended_result_codes(j->db, 0);
	j_lock(j);
	locked = true;
	err = j_setup(j);
	if (err == RCS_ERR_FULL || err == RCS_ERR_NOMEM || err == RCS_ERR_BUSY)
		goto out;
	if (err != RCS_OK) {
		err = err == RCS_ERR_IO ? RCS_ERR_IO : RCS_ERR_DB;
		log_warnx("journal: %s is unusable", path);
		goto out;
	}
	*out = j;
	j_unlock(j);
	locked = false;
	j = NULL;
out:
	if (j != NULL) {
		if (locked)
			j_unlock(j);
		journal_close(j);
	}
	return err;
}

void journal_close(struct journal *j)
{
	if (j == NULL)
		return;
	db_cache_clear(&j->cache);
	if (j->db != NULL && sqlite3_close(j->db) != SQLITE_OK)
		log_warnx("journal: close: %s", sqlite3_errmsg(j->db));
	pthread_mutex_destroy(&j->lock);
	free(j);
}

enum rcs_err journal_set_max_size(struct journal *j, uint64_t max_bytes)
{
	long long page = 0, pages, got = 0;
	char sql[80];
	enum rcs_err err;

	if (j == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_pragma_int(j, "PRAGMA page_size", &page);
	if (err != RCS_OK)
		goto out;
	if (page <= 0) {
		err = RCS_ERR_INTERNAL;
		goto out;
	}
	pages = max_bytes == 0 || max_bytes / (uint64_t)page >= (uint64_t)j->default_max_pages
		    ? j->default_max_pages
		    : (long long)(max_bytes / (uint64_t)page);
	if (pages < 1)
		pages = 1;
	/* SQLite never sets it below the current size of the file */
	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %lld", pages);
	err = j_pragma_int(j, sql, &got);
out:
	j_unlock(j);
	return err;
}

/* ---- jobs ---- */

enum rcs_err journal_receive(struct journal *j, const char *job, const char *task_ident,
			     long long task_version, const char *payload, size_t len, int64_t now,
			     bool *is_new)
{
	static const char sql[] =
	    "INSERT INTO jobs(ident, task_ident, task_version, payload, received_at)"
	    " VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(ident) DO NOTHING";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (is_new != NULL)
		*is_new = false;
	if (j == NULL || !job_valid(job) || is_new == NULL || (payload == NULL && len > 0) ||
	    task_version < 0)
		return RCS_ERR_INVAL;
	if (task_ident == NULL)
		task_ident = "";
	if (*task_ident != '\0' && !task_ident_valid(task_ident))
		return RCS_ERR_INVAL;
	if (len > PROTO_MAX_PAYLOAD)
		return RCS_ERR_TOOBIG;
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, task_ident, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 3, task_version);
	sqlite3_bind_blob(s, 4, payload != NULL ? payload : "", (int)len, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, now);
	/* one statement in autocommit: durable (WAL fsynced) when it returns */
	err = j_step_done(j, s, "receive");
	if (err == RCS_OK)
		*is_new = sqlite3_changes(j->db) == 1;
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* Reads a job's state (lock held). */
static enum rcs_err j_get_state(struct journal *j, const char *job, enum journal_state *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = j_lookup(j, "SELECT state FROM jobs WHERE ident = ?1", job, "get state", &s);
	if (err == RCS_OK && !journal_state_parse((const char *)sqlite3_column_text(s, 0), out))
		err = RCS_ERR_DB;
	j_release(j, s);
	return err;
}

enum rcs_err journal_get_state(struct journal *j, const char *job, enum journal_state *out)
{
	enum rcs_err err;

	if (j == NULL || !job_valid(job) || out == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_get_state(j, job, out);
	j_unlock(j);
	return err;
}

static bool j_state_can_move(enum journal_state cur, enum journal_state next)
{
	if (cur == next)
		return true;
	switch (cur) {
	case JOURNAL_QUEUED:
		return next == JOURNAL_RUNNING || next == JOURNAL_DONE || next == JOURNAL_DROPPED;
	case JOURNAL_RUNNING:
		return next == JOURNAL_DONE || next == JOURNAL_DROPPED;
	default:
		return false;
	}
}

enum rcs_err journal_set_state(struct journal *j, const char *job, enum journal_state st)
{
	sqlite3_stmt *s = NULL;
	enum journal_state cur = JOURNAL_QUEUED;
	enum rcs_err err;

	if (j == NULL || !job_valid(job) || (unsigned)st > JOURNAL_DROPPED)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_begin(j);
	if (err != RCS_OK)
		goto out;
	err = j_get_state(j, job, &cur);
	if (err != RCS_OK)
		goto end;
	if (!j_state_can_move(cur, st)) {
		log_warnx("journal: job %s: %s -> %s refused", job, journal_state_name(cur),
			  journal_state_name(st));
		err = RCS_ERR_CONFLICT;
		goto end;
	}
	if (cur == st)
		goto end;
	err = j_stmt(j, "UPDATE jobs SET state = ?2 WHERE ident = ?1", &s);
	if (err != RCS_OK)
		goto end;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, journal_state_name(st), -1, SQLITE_STATIC);
	err = j_step_done(j, s, "set state");
end:
	err = j_end(j, err);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_next_queued(struct journal *j, char job[UUID_STR_LEN], char **payload,
				 size_t *len)
{
	/* a job resuming its phase first: no other job starts between its phases */
	static const char sql[] = "SELECT ident, payload FROM jobs WHERE state = 'queued'"
				  " ORDER BY phase IS NULL, arrival LIMIT 1";
	sqlite3_stmt *s = NULL;
	const char *ident;
	enum rcs_err err;
	int rc;

	if (payload != NULL)
		*payload = NULL;
	if (len != NULL)
		*len = 0;
	if (j == NULL || job == NULL || payload == NULL)
		return RCS_ERR_INVAL;
	job[0] = '\0';
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc == SQLITE_DONE) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	if (rc != SQLITE_ROW) {
		err = j_rc(j, rc, "next queued");
		goto out;
	}
	ident = (const char *)sqlite3_column_text(s, 0);
	if (ident == NULL || strlen(ident) >= UUID_STR_LEN) {
		err = RCS_ERR_DB;
		goto out;
	}
	err = j_column_dup(s, 1, payload, len);
	if (err != RCS_OK)
		goto out;
	memcpy(job, ident, strlen(ident) + 1);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_count_queued(struct journal *j, size_t *n)
{
	return j_count_locked(j, "SELECT count(*) FROM jobs WHERE state = 'queued'", n);
}

/* ---- reports and the outbox ---- */

/* The latest report of a job (lock held): NOTFOUND for an unknown job; a job
 * without a report has *seq 0 and *report NULL. report may be NULL; so may phase, else the
 * job's phase ("" when it has none). */
static enum rcs_err j_latest(struct journal *j, const char *job, long long *seq,
			     enum job_status *status, char **report,
			     char phase[PROTO_MAX_PHASE + 1])
{
	static const char sql[] =
	    "SELECT last_seq, last_status, last_report, phase FROM jobs WHERE ident = ?1";
	sqlite3_stmt *s = NULL;
	const char *st;
	enum rcs_err err;

	*seq = 0;
	*status = JS_TRANSMITED; /* what the coordinator has before the first report */
	if (report != NULL)
		*report = NULL;
	err = j_lookup(j, sql, job, "latest report", &s);
	if (err != RCS_OK)
		goto out;
	*seq = sqlite3_column_int64(s, 0);
	st = (const char *)sqlite3_column_text(s, 1);
	if (st != NULL && !status_parse(st, status)) {
		err = RCS_ERR_DB;
		goto out;
	}
	if (phase != NULL) {
		const char *ph = (const char *)sqlite3_column_text(s, 3);
		snprintf(phase, PROTO_MAX_PHASE + 1, "%s", ph != NULL ? ph : "");
	}
	if (report != NULL && sqlite3_column_type(s, 2) != SQLITE_NULL)
		err = j_column_dup(s, 2, report, NULL);
out:
	j_release(j, s);
	return err;
}

/* Appends one outbox row (lock held); its id into *id. */
static enum rcs_err j_outbox_add(struct journal *j, const char *job, long long seq,
				 const char *payload, int64_t now, long long *id)
{
	static const char sql[] =
	    "INSERT INTO outbox(job, seq, payload, created_at) VALUES(?1, ?2, ?3, ?4)";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, seq);
	sqlite3_bind_text(s, 3, payload, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, now);
	err = j_step_done(j, s, "outbox add");
	if (err == RCS_OK)
		*id = sqlite3_last_insert_rowid(j->db);
out:
	j_release(j, s);
	return err;
}

static enum rcs_err j_report(struct journal *j, const char *job, const struct proto_report *tmpl,
			     int64_t now, long long *id, char **payload);

enum rcs_err journal_report(struct journal *j, const char *job, enum job_status status,
			    const char *response, int64_t now, long long *id, char **payload)
{
	return journal_report_cause(j, job, status, response, NULL, now, id, payload);
}

enum rcs_err journal_report_cause(struct journal *j, const char *job, enum job_status status,
				  const char *response, const char *error, int64_t now,
				  long long *id, char **payload)
{
	struct proto_report t;

	memset(&t, 0, sizeof(t));
	t.status = status;
	t.response = response;
	t.error = error;
	return j_report(j, job, &t, now, id, payload);
}

enum rcs_err journal_report_progress(struct journal *j, const char *job, const char *response,
				     int64_t done, int64_t total, int64_t now, long long *id,
				     char **payload)
{
	struct proto_report t;

	if (done < 0 || total < done)
		return RCS_ERR_INVAL;
	memset(&t, 0, sizeof(t));
	t.status = JS_EDGE_RUNNING;
	t.response = response;
	t.has_progress = true;
	t.progress_done = done;
	t.progress_total = total;
	return j_report(j, job, &t, now, id, payload);
}

enum rcs_err journal_report_rebooting(struct journal *j, const char *job, long long within,
				      int64_t now, long long *id, char **payload)
{
	struct proto_report t;

	if (within < PROTO_WITHIN_MIN || within > PROTO_WITHIN_MAX)
		return RCS_ERR_INVAL;
	memset(&t, 0, sizeof(t));
	t.status = JS_EDGE_RUNNING;
	t.response = "rebooting";
	t.within = within;
	return j_report(j, job, &t, now, id, payload);
}

/* A report like tmpl (its status, response, error, progress, phase and within) with the
 * job's next seq; without a phase of its own, the job's (journal_phase_reboot). */
static enum rcs_err j_report(struct journal *j, const char *job, const struct proto_report *tmpl,
			     int64_t now, long long *id, char **payload)
{
	enum job_status status = tmpl->status;
	const char *response = tmpl->response;
	static const char upd[] =
	    "UPDATE jobs SET last_seq = ?2, last_status = ?3, last_report = ?4,"
	    " state = CASE WHEN ?5 AND state <> 'dropped' THEN 'done' ELSE state END,"
	    " script_state = CASE WHEN ?5 THEN NULL ELSE script_state END"
	    " WHERE ident = ?1";
	struct proto_report r;
	sqlite3_stmt *s = NULL;
	json_object *o = NULL;
	enum job_status cur = JS_TRANSMITED;
	char phase[PROTO_MAX_PHASE + 1] = "";
	const char *text;
	char *copy = NULL;
	long long seq = 0, row = 0;
	size_t n = 0, nout = 0;
	bool terminal;
	enum rcs_err err;

	if (id != NULL)
		*id = 0;
	if (payload != NULL)
		*payload = NULL;
	if (j == NULL || !job_valid(job) || !status_is_device(status))
		return RCS_ERR_INVAL;
	if (response != NULL && strnlen(response, PROTO_MAX_RESPONSE + 1) > PROTO_MAX_RESPONSE)
		return RCS_ERR_TOOBIG;
	terminal = status_is_terminal(status);
	j_lock(j);
	err = j_begin(j);
	if (err != RCS_OK)
		goto out;
	err = j_latest(j, job, &seq, &cur, NULL, phase);
	if (err != RCS_OK)
		goto end;
	if (status_is_terminal(cur) || !status_can_move(cur, status)) {
		log_warnx("journal: job %s: report %s after %s refused", job, status_name(status),
			  status_name(cur));
		err = RCS_ERR_CONFLICT;
		goto end;
	}
	if (!terminal) {
		err = j_count(j, "SELECT count(*) FROM outbox", &nout);
		if (err != RCS_OK)
			goto end;
		if (nout >= JOURNAL_MAX_OUTBOX) {
			log_warnx("journal: job %s: %zu reports wait for the broker, %s dropped",
				  job, nout, status_name(status));
			err = RCS_ERR_FULL;
			goto end;
		}
	}

	r = *tmpl;
	/* every report of a job in a phase carries it (docs/mqtt.md "Status report") */
	if (r.phase == NULL && phase[0] != '\0')
		r.phase = phase;
	memcpy(r.job, job, strlen(job) + 1);
	r.seq = seq + 1;
	r.ts = now;
	o = proto_report_encode(&r);
	text = o != NULL ? jsonu_dump(o, &n) : NULL;
	if (text == NULL) {
		err = RCS_ERR_NOMEM;
		goto end;
	}
	if (payload != NULL && (copy = strdup(text)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto end;
	}
	err = j_outbox_add(j, job, r.seq, text, now, &row);
	if (err != RCS_OK)
		goto end;
	err = j_stmt(j, upd, &s);
	if (err != RCS_OK)
		goto end;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, r.seq);
	sqlite3_bind_text(s, 3, status_name(status), -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, text, (int)n, SQLITE_STATIC);
	sqlite3_bind_int(s, 5, terminal);
	err = j_step_done(j, s, "report");
end:
	err = j_end(j, err);
out:
	if (err == RCS_OK) {
		if (id != NULL)
			*id = row;
		if (payload != NULL) {
			*payload = copy;
			copy = NULL;
		}
	}
	j_release(j, s);
	if (o != NULL)
		json_object_put(o);
	free(copy);
	j_unlock(j);
	return err;
}

/* One collected outbox row or job ident, handed to a callback after unlocking. */
struct j_item {
	long long id;
	char job[UUID_STR_LEN];
	char *payload;
};

struct j_items {
	struct j_item *v;
	size_t n, cap;
};

static struct j_item *j_items_add(struct j_items *it)
{
	struct j_item *nv;
	size_t cap;

	if (it->n == it->cap) {
		cap = it->cap != 0 ? it->cap * 2 : 16;
		nv = realloc(it->v, cap * sizeof(*nv));
		if (nv == NULL)
			return NULL;
		it->v = nv;
		it->cap = cap;
	}
	memset(&it->v[it->n], 0, sizeof(it->v[0]));
	return &it->v[it->n++];
}

static void j_items_free(struct j_items *it)
{
	for (size_t i = 0; i < it->n; i++)
		free(it->v[i].payload);
	free(it->v);
	memset(it, 0, sizeof(*it));
}

/* Copies a job ident column into item->job. */
static enum rcs_err j_item_job(sqlite3_stmt *s, int col, struct j_item *item)
{
	const char *job = (const char *)sqlite3_column_text(s, col);

	if (job == NULL || strlen(job) >= sizeof(item->job))
		return RCS_ERR_DB;
	memcpy(item->job, job, strlen(job) + 1);
	return RCS_OK;
}

enum rcs_err journal_outbox_each(struct journal *j, size_t max,
				 void (*fn)(void *ctx, long long id, const char *job,
					    const char *payload),
				 void *ctx)
{
	static const char sql[] = "SELECT id, job, payload FROM outbox ORDER BY id LIMIT ?1";
	struct j_items items = {NULL, 0, 0};
	sqlite3_stmt *s = NULL;
	struct j_item *item;
	enum rcs_err err;
	int rc;

	if (j == NULL || fn == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto unlock;
	sqlite3_bind_int64(s, 1, max > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((item = j_items_add(&items)) == NULL) {
			err = RCS_ERR_NOMEM;
			goto unlock;
		}
		item->id = sqlite3_column_int64(s, 0);
		if ((err = j_item_job(s, 1, item)) != RCS_OK ||
		    (err = j_column_dup(s, 2, &item->payload, NULL)) != RCS_OK)
			goto unlock;
	}
	if (rc != SQLITE_DONE)
		err = j_rc(j, rc, "outbox");
unlock:
	j_release(j, s);
	s = NULL;
	j_unlock(j);
	if (err != RCS_OK)
		goto out;
	for (size_t i = 0; i < items.n; i++)
		fn(ctx, items.v[i].id, items.v[i].job, items.v[i].payload);
out:
	j_items_free(&items);
	return err;
}

enum rcs_err journal_outbox_ack(struct journal *j, long long id)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (j == NULL || id <= 0)
		return RCS_ERR_INVAL;
	j_lock(j);
	/*
	 * Without a sync of its own: a lost acknowledgement only sends the report
	 * again (the coordinator applies each seq once). The WAL keeps the order,
	 * so the next synced commit makes it durable too. (Only in WAL mode: with
	 * the rollback journal, NORMAL could corrupt the file on power loss.)
	 * PRAGMAs run through sqlite3_exec: a prepared one would be compiled again
	 * at every step anyway.
	 */
	if (j->wal && (err = j_exec(j, "PRAGMA synchronous = NORMAL")) != RCS_OK)
		goto out;
	err = j_stmt(j, "DELETE FROM outbox WHERE id = ?1", &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, id);
	err = j_step_done(j, s, "outbox ack");
out:
	j_release(j, s);
	if (j->wal && j_exec(j, "PRAGMA synchronous = FULL") != RCS_OK)
		log_warnx("journal: synchronous writes could not be restored");
	j_unlock(j);
	return err;
}

int journal_synchronous(struct journal *j)
{
	sqlite3_stmt *s = NULL;
	int level = -1;

	if (j == NULL)
		return -1;
	j_lock(j);
	if (j_prepare(j, "PRAGMA synchronous", &s) == RCS_OK && sqlite3_step(s) == SQLITE_ROW)
		level = sqlite3_column_int(s, 0);
	j_release(j, s);
	j_unlock(j);
	return level;
}

enum rcs_err journal_outbox_count(struct journal *j, size_t *n)
{
	return j_count_locked(j, "SELECT count(*) FROM outbox", n);
}

/* Puts a job's latest report in the outbox again, with its seq (a repeat). */
static enum rcs_err j_resend(struct journal *j, const char *job, bool final, long long *id,
			     char **payload)
{
	static const char find[] = "SELECT id FROM outbox WHERE job = ?1 AND seq = ?2"
				   " ORDER BY id LIMIT 1";
	sqlite3_stmt *s = NULL;
	enum job_status cur;
	char *report = NULL;
	long long seq = 0, row = 0;
	enum rcs_err err;
	int rc;

	if (id != NULL)
		*id = 0;
	if (payload != NULL)
		*payload = NULL;
	if (j == NULL || !job_valid(job))
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_begin(j);
	if (err != RCS_OK)
		goto out;
	err = j_latest(j, job, &seq, &cur, &report, NULL);
	if (err != RCS_OK)
		goto end;
	if (report == NULL || seq < 1 || (final && !status_is_terminal(cur))) {
		err = RCS_ERR_NOTFOUND;
		goto end;
	}
	/* still waiting for the broker: that row is the resend */
	err = j_stmt(j, find, &s);
	if (err != RCS_OK)
		goto end;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, seq);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		row = sqlite3_column_int64(s, 0);
	else if (rc == SQLITE_DONE)
		err = j_outbox_add(j, job, seq, report, (int64_t)time(NULL), &row);
	else
		err = j_rc(j, rc, "resend");
end:
	err = j_end(j, err);
out:
	if (err == RCS_OK) {
		if (id != NULL)
			*id = row;
		if (payload != NULL) {
			*payload = report;
			report = NULL;
		}
	}
	j_release(j, s);
	free(report);
	j_unlock(j);
	return err;
}

enum rcs_err journal_resend_final(struct journal *j, const char *job, long long *id, char **payload)
{
	return j_resend(j, job, true, id, payload);
}

enum rcs_err journal_resend_latest(struct journal *j, const char *job, long long *id,
				   char **payload)
{
	return j_resend(j, job, false, id, payload);
}

/* ---- task versions ---- */

enum rcs_err journal_task_version(struct journal *j, const char *task_ident, long long *version)
{
	enum rcs_err err;

	if (version != NULL)
		*version = 0;
	if (j == NULL || !task_ident_valid(task_ident) || version == NULL)
		return RCS_ERR_INVAL;
	err = j_get_int(j, "SELECT version FROM task_versions WHERE task_ident = ?1", task_ident,
			"task version", version);
	return err == RCS_ERR_NOTFOUND ? RCS_OK : err; /* never run: version 0 */
}

enum rcs_err journal_task_version_set(struct journal *j, const char *task_ident, long long version)
{
	static const char sql[] =
	    "INSERT INTO task_versions(task_ident, version) VALUES(?1, ?2)"
	    " ON CONFLICT(task_ident) DO UPDATE SET version = max(version, excluded.version)";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (j == NULL || !task_ident_valid(task_ident) || version < 1)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, task_ident, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, version);
	err = j_step_done(j, s, "task version set");
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* ---- device settings ---- */

static enum rcs_err j_config_key(const char *key)
{
	size_t n;

	if (key == NULL)
		return RCS_ERR_INVAL;
	n = strnlen(key, JOURNAL_MAX_CONFIG_KEY + 1);
	if (n == 0)
		return RCS_ERR_INVAL;
	return n > JOURNAL_MAX_CONFIG_KEY ? RCS_ERR_TOOBIG : RCS_OK;
}

enum rcs_err journal_config_get(struct journal *j, const char *key, char **value)
{
	enum rcs_err err;

	if (value != NULL)
		*value = NULL;
	if (j == NULL || value == NULL)
		return RCS_ERR_INVAL;
	err = j_config_key(key);
	if (err != RCS_OK)
		return err;
	/* value is NOT NULL: a row always gives a string */
	return j_get_text(j, "SELECT value FROM config WHERE key = ?1", key, "config get", value);
}

enum rcs_err journal_config_set(struct journal *j, const char *key, const char *value)
{
	static const char upsert[] = "INSERT INTO config(key, value) VALUES(?1, ?2)"
				     " ON CONFLICT(key) DO UPDATE SET value = excluded.value";
	static const char count[] = "SELECT count(*) FROM config WHERE key <> ?1";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	if (j == NULL)
		return RCS_ERR_INVAL;
	err = j_config_key(key);
	if (err != RCS_OK)
		return err;
	if (value != NULL &&
	    strnlen(value, JOURNAL_MAX_CONFIG_VALUE + 1) > JOURNAL_MAX_CONFIG_VALUE)
		return RCS_ERR_TOOBIG;
	j_lock(j);
	err = j_begin(j);
	if (err != RCS_OK)
		goto out;
	if (value == NULL) {
		err = j_stmt(j, "DELETE FROM config WHERE key = ?1", &s);
		if (err != RCS_OK)
			goto end;
		sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
		err = j_step_done(j, s, "config delete");
		goto end;
	}
	/* the other keys must leave room for this one */
	err = j_stmt(j, count, &s);
	if (err != RCS_OK)
		goto end;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = j_rc(j, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, "config count");
		goto end;
	}
	if (sqlite3_column_int64(s, 0) >= JOURNAL_MAX_CONFIG_KEYS) {
		log_warnx("journal: %d settings already, '%.64s' refused", JOURNAL_MAX_CONFIG_KEYS,
			  key);
		err = RCS_ERR_FULL;
		goto end;
	}
	j_release(j, s);
	err = j_stmt(j, upsert, &s);
	if (err != RCS_OK)
		goto end;
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
	err = j_step_done(j, s, "config set");
end:
	err = j_end(j, err);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* ---- start-up and housekeeping ---- */

enum rcs_err journal_each_running(struct journal *j, void (*fn)(void *ctx, const char *job),
				  void *ctx)
{
	static const char sql[] = "SELECT ident FROM jobs WHERE state = 'running' ORDER BY arrival";
	struct j_items items = {NULL, 0, 0};
	sqlite3_stmt *s = NULL;
	struct j_item *item;
	enum rcs_err err;
	int rc;

	if (j == NULL || fn == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto unlock;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((item = j_items_add(&items)) == NULL) {
			err = RCS_ERR_NOMEM;
			goto unlock;
		}
		if ((err = j_item_job(s, 0, item)) != RCS_OK)
			goto unlock;
	}
	if (rc != SQLITE_DONE)
		err = j_rc(j, rc, "running");
unlock:
	j_release(j, s);
	s = NULL;
	j_unlock(j);
	if (err != RCS_OK)
		goto out;
	for (size_t i = 0; i < items.n; i++)
		fn(ctx, items.v[i].job);
out:
	j_items_free(&items);
	return err;
}

/* Runs one pruning statement with its integer parameter. */
static enum rcs_err j_prune_step(struct journal *j, const char *sql, int64_t p1, int *changed)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*changed = 0;
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, p1);
	err = j_step_done(j, s, "prune");
	if (err == RCS_OK)
		*changed = sqlite3_changes(j->db);
out:
	j_release(j, s);
	return err;
}

enum rcs_err journal_prune(struct journal *j, int64_t now, int64_t keep)
{
	/* envelopes of finished jobs received before ?1 */
	static const char payloads[] =
	    "UPDATE jobs SET payload = NULL WHERE state IN ('done', 'dropped')"
	    " AND payload IS NOT NULL AND received_at < ?1";
	/* final reports of all but the newest ?1 finished jobs */
	static const char reports[] =
	    "UPDATE jobs SET last_report = NULL WHERE state IN ('done', 'dropped')"
	    " AND last_report IS NOT NULL AND arrival < (SELECT arrival FROM jobs"
	    "  WHERE state IN ('done', 'dropped') ORDER BY arrival DESC LIMIT 1 OFFSET ?1 - 1)";
	/* rows of all but the newest ?1 finished jobs, none with a report in the outbox */
	static const char idents[] =
	    "DELETE FROM jobs WHERE state IN ('done', 'dropped') AND arrival < (SELECT arrival"
	    "  FROM jobs WHERE state IN ('done', 'dropped') ORDER BY arrival DESC"
	    "  LIMIT 1 OFFSET ?1 - 1)"
	    " AND NOT EXISTS (SELECT 1 FROM outbox WHERE outbox.job = jobs.ident)";
	int64_t cutoff;
	int n1 = 0, n2 = 0, n3 = 0;
	enum rcs_err err;

	if (j == NULL || keep < 0)
		return RCS_ERR_INVAL;
	cutoff = now < INT64_MIN + keep ? INT64_MIN : now - keep;
	j_lock(j);
	err = j_begin(j);
	if (err != RCS_OK)
		goto out;
	if ((err = j_prune_step(j, payloads, cutoff, &n1)) != RCS_OK ||
	    (err = j_prune_step(j, reports, JOURNAL_KEEP_FINAL_REPORTS, &n2)) != RCS_OK ||
	    (err = j_prune_step(j, idents, JOURNAL_KEEP_IDENTS, &n3)) != RCS_OK)
		goto end;
end:
	err = j_end(j, err);
	if (err == RCS_OK && n1 + n2 + n3 > 0)
		log_debug("journal: pruned %d envelopes, %d final reports, %d jobs", n1, n2, n3);
out:
	j_unlock(j);
	return err;
}

/* ---- downloads (docs/agent.md "Artifacts") ---- */

static bool j_sha256_valid(const char *h)
{
	size_t n = 0;

	if (h == NULL)
		return false;
	for (; h[n] != '\0'; n++)
		if (n >= 64 || !((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f')))
			return false;
	return n == 64;
}

enum rcs_err journal_download_get(struct journal *j, const char *sha256, int64_t *offset)
{
	long long v = 0;
	enum rcs_err err;

	*offset = 0;
	if (j == NULL || !j_sha256_valid(sha256))
		return RCS_ERR_INVAL;
	err = j_get_int(j, "SELECT offset FROM downloads WHERE sha256 = ?1", sha256, "download get",
			&v);
	*offset = (int64_t)v;
	return err;
}

enum rcs_err journal_download_set(struct journal *j, const char *sha256, int64_t offset)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (j == NULL || !j_sha256_valid(sha256))
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j,
		     offset < 0 ? "DELETE FROM downloads WHERE sha256 = ?1"
				: "INSERT INTO downloads(sha256, offset) VALUES(?1, ?2)"
				  " ON CONFLICT(sha256) DO UPDATE SET offset = excluded.offset",
		     &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, sha256, -1, SQLITE_STATIC);
	if (offset >= 0)
		sqlite3_bind_int64(s, 2, offset);
	err = j_step_done(j, s, "download set");
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_set_downloading(struct journal *j, const char *job, bool on)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (j == NULL || !job_valid(job))
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j, "UPDATE jobs SET downloading = ?2 WHERE ident = ?1", &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, on ? 1 : 0);
	err = j_step_done(j, s, "downloading");
	if (err == RCS_OK && sqlite3_changes(j->db) == 0)
		err = RCS_ERR_NOTFOUND;
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_requeue_downloading(struct journal *j, size_t *n)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*n = 0;
	if (j == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j,
		     "UPDATE jobs SET state = 'queued'"
		     " WHERE state = 'running' AND downloading = 1",
		     &s);
	if (err != RCS_OK)
		goto out;
	err = j_step_done(j, s, "requeue downloading");
	if (err == RCS_OK)
		*n = (size_t)sqlite3_changes(j->db);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_get_downloading(struct journal *j, const char *job, bool *on)
{
	long long v = 0;
	enum rcs_err err;

	*on = false;
	if (j == NULL || !job_valid(job))
		return RCS_ERR_INVAL;
	err = j_get_int(j, "SELECT downloading FROM jobs WHERE ident = ?1", job, "downloading", &v);
	*on = v != 0;
	return err;
}

/* ---- releases (docs/agent.md "Releases") ---- */

enum rcs_err journal_release_seq(struct journal *j, const char *stream, long long *seq)
{
	*seq = 0;
	if (j == NULL || !task_ident_valid(stream))
		return RCS_ERR_INVAL;
	return j_get_int(j, "SELECT seq FROM releases WHERE stream = ?1", stream, "release get",
			 seq);
}

enum rcs_err journal_release_done(struct journal *j, const char *stream, long long seq)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (j == NULL || !task_ident_valid(stream))
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j,
		     "INSERT INTO releases(stream, seq) VALUES(?1, ?2)"
		     " ON CONFLICT(stream) DO UPDATE SET seq = max(seq, excluded.seq)",
		     &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, stream, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, seq);
	err = j_step_done(j, s, "release done");
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* ---- phases (docs/agent.md "Phases") ---- */

static bool j_boot_id_valid(const char *b)
{
	return b != NULL && strnlen(b, JOURNAL_MAX_BOOT_ID + 1) <= JOURNAL_MAX_BOOT_ID;
}

enum rcs_err journal_phase_get(struct journal *j, const char *job, struct journal_phase *out)
{
	static const char sql[] = "SELECT phase, phase_waiting, phase_runs, reboots, boot_id"
				  " FROM jobs WHERE ident = ?1";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (out != NULL)
		memset(out, 0, sizeof(*out));
	if (j == NULL || !job_valid(job) || out == NULL)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_lookup(j, sql, job, "phase", &s);
	if (err != RCS_OK)
		goto out;
	{
		const char *ph = (const char *)sqlite3_column_text(s, 0);
		const char *b = (const char *)sqlite3_column_text(s, 4);
		snprintf(out->phase, sizeof(out->phase), "%s", ph != NULL ? ph : "");
		snprintf(out->boot_id, sizeof(out->boot_id), "%s", b != NULL ? b : "");
	}
	out->waiting = sqlite3_column_int(s, 1) != 0;
	out->runs = sqlite3_column_int(s, 2);
	out->reboots = sqlite3_column_int(s, 3);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

/* One UPDATE of a job's phase columns: ?1 the job, ?2 and ?3 text (may be NULL). */
static enum rcs_err j_phase_update(struct journal *j, const char *sql, const char *job,
				   const char *t2, const char *t3)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
	if (t2 != NULL)
		sqlite3_bind_text(s, 2, t2, -1, SQLITE_STATIC);
	if (t3 != NULL)
		sqlite3_bind_text(s, 3, t3, -1, SQLITE_STATIC);
	err = j_step_done(j, s, "phase");
	if (err == RCS_OK && sqlite3_changes(j->db) == 0)
		err = RCS_ERR_NOTFOUND;
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_phase_reboot(struct journal *j, const char *job, const char *phase,
				  const char *boot_id)
{
	static const char sql[] =
	    "UPDATE jobs SET phase = ?2, phase_waiting = 1, phase_runs = 0,"
	    " reboots = reboots + 1, boot_id = ?3 WHERE ident = ?1 AND state = 'running'";

	if (j == NULL || !job_valid(job) || !proto_word_valid(phase) || !j_boot_id_valid(boot_id))
		return RCS_ERR_INVAL;
	return j_phase_update(j, sql, job, phase, boot_id);
}

enum rcs_err journal_phase_start(struct journal *j, const char *job, const char *boot_id)
{
	static const char sql[] =
	    "UPDATE jobs SET phase_waiting = 0, phase_runs = phase_runs + 1, boot_id = ?2"
	    " WHERE ident = ?1 AND phase IS NOT NULL AND state = 'running'";

	if (j == NULL || !job_valid(job) || !j_boot_id_valid(boot_id))
		return RCS_ERR_INVAL;
	return j_phase_update(j, sql, job, boot_id, NULL);
}

enum rcs_err journal_requeue_job(struct journal *j, const char *job)
{
	static const char sql[] = "UPDATE jobs SET state = 'queued' WHERE ident = ?1"
				  " AND state = 'running' AND phase_waiting = 1";

	if (j == NULL || !job_valid(job))
		return RCS_ERR_INVAL;
	return j_phase_update(j, sql, job, NULL, NULL);
}

enum rcs_err journal_requeue_phases(struct journal *j, int max_runs, size_t *n)
{
	static const char sql[] =
	    "UPDATE jobs SET state = 'queued' WHERE state = 'running' AND phase IS NOT NULL"
	    " AND (phase_waiting = 1 OR phase_runs < ?1)";
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	if (n != NULL)
		*n = 0;
	if (j == NULL || n == NULL || max_runs < 1)
		return RCS_ERR_INVAL;
	j_lock(j);
	err = j_stmt(j, sql, &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int(s, 1, max_runs);
	err = j_step_done(j, s, "requeue phases");
	if (err == RCS_OK)
		*n = (size_t)sqlite3_changes(j->db);
out:
	j_release(j, s);
	j_unlock(j);
	return err;
}

enum rcs_err journal_script_state_get(struct journal *j, const char *job, char **json)
{
	if (json != NULL)
		*json = NULL;
	if (j == NULL || !job_valid(job) || json == NULL)
		return RCS_ERR_INVAL;
	return j_get_text(j, "SELECT script_state FROM jobs WHERE ident = ?1", job, "script state",
			  json);
}

enum rcs_err journal_script_state_set(struct journal *j, const char *job, const char *json)
{
	static const char sql[] = "UPDATE jobs SET script_state = ?2 WHERE ident = ?1";

	if (j == NULL || !job_valid(job))
		return RCS_ERR_INVAL;
	if (json != NULL && strnlen(json, JOURNAL_MAX_SCRIPT_STATE + 1) > JOURNAL_MAX_SCRIPT_STATE)
		return RCS_ERR_TOOBIG;
	/* one statement in autocommit: durable (synchronous FULL) when it returns */
	return j_phase_update(j, sql, job, json, NULL);
}
