/*
 * store_sqlite.c - the store's SQLite backend (the default, embedded engine): the schema and
 * its migrations (run by common/db.c), opening and closing, and the operations of the
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

/* The statuses of a job on its way to or on the device (jobs_inflight's condition;
 * the queries that use the index say it the same way). */
static const char *const sq_migrations[] = {
    /* 1: the first schema */
    "CREATE TABLE tenants(\n"
    "  client_root TEXT PRIMARY KEY,\n"
    "  created_at INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE api_keys(\n"
    "  ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  user TEXT NOT NULL,\n"
    "  role TEXT NOT NULL,\n"
    "  key_hash TEXT NOT NULL UNIQUE,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  revoked_at INTEGER\n"
    ");\n"
    "CREATE INDEX api_keys_tenant ON api_keys(client_root);\n"
    "CREATE TABLE script_blobs(\n"
    "  sha256 TEXT PRIMARY KEY,\n"
    "  source BLOB NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE scripts(\n"
    "  client_root TEXT NOT NULL,\n" /* '' for stock scripts */
    "  name TEXT NOT NULL,\n"
    "  sha256 TEXT NOT NULL REFERENCES script_blobs(sha256),\n"
    "  size INTEGER NOT NULL,\n"
    "  updated_at INTEGER NOT NULL,\n"
    "  PRIMARY KEY(client_root, name)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE tasks(\n"
    "  ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  version INTEGER NOT NULL,\n"
    "  name TEXT NOT NULL,\n"
    "  script TEXT NOT NULL,\n"
    "  variables_info TEXT NOT NULL,\n"
    "  constants TEXT NOT NULL,\n"
    "  comment TEXT NOT NULL,\n"
    "  active INTEGER NOT NULL,\n"
    "  public INTEGER NOT NULL,\n"
    "  hide INTEGER NOT NULL,\n"
    "  allow_offline INTEGER NOT NULL,\n"
    "  timeout INTEGER NOT NULL,\n"
    "  created_user TEXT NOT NULL,\n"
    "  update_user TEXT,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  update_at INTEGER NOT NULL,\n"
    "  mail_list TEXT NOT NULL,\n"
    "  status_list TEXT NOT NULL,\n"
    "  script_sha256 TEXT NOT NULL,\n"
    "  signature TEXT,\n"
    "  deleted INTEGER NOT NULL DEFAULT 0\n"
    ");\n"
    "CREATE INDEX tasks_tenant ON tasks(client_root, deleted, ident);\n"
    "CREATE INDEX tasks_script ON tasks(client_root, script);\n"
    "CREATE TABLE task_versions(\n"
    "  task_ident TEXT NOT NULL REFERENCES tasks(ident),\n"
    "  version INTEGER NOT NULL,\n"
    "  script_name TEXT NOT NULL,\n"
    "  script_sha256 TEXT NOT NULL REFERENCES script_blobs(sha256),\n"
    "  constants TEXT NOT NULL,\n"
    "  variables_info TEXT NOT NULL,\n"
    "  timeout INTEGER NOT NULL,\n"
    "  signature TEXT,\n"
    "  PRIMARY KEY(task_ident, version)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE devices(\n"
    "  entity_ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  name TEXT NOT NULL,\n"
    "  tags TEXT NOT NULL,\n"
    "  reported_tags TEXT NOT NULL DEFAULT '[]',\n"
    "  online INTEGER NOT NULL DEFAULT 0,\n"
    "  last_seen INTEGER,\n"
    "  agent_version TEXT,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  update_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX devices_tenant ON devices(client_root, entity_ident);\n"
    "CREATE TABLE device_tags(\n"
    "  client_root TEXT NOT NULL,\n"
    "  tag TEXT NOT NULL,\n"
    "  entity_ident TEXT NOT NULL REFERENCES devices(entity_ident) ON DELETE CASCADE,\n"
    "  reported INTEGER NOT NULL,\n"
    "  PRIMARY KEY(client_root, tag, entity_ident, reported)\n"
    ") WITHOUT ROWID;\n"
    "CREATE INDEX device_tags_device ON device_tags(entity_ident);\n"
    "CREATE TABLE groups(\n"
    "  ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  name TEXT NOT NULL,\n"
    "  task_ident TEXT NOT NULL,\n"
    "  created_user TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX groups_tenant ON groups(client_root, ident);\n"
    "CREATE TABLE jobs(\n"
    "  ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  task_ident TEXT NOT NULL,\n"
    "  task_version INTEGER NOT NULL,\n"
    "  task_name TEXT NOT NULL,\n"
    "  group_ident TEXT REFERENCES groups(ident),\n"
    "  entity_ident TEXT NOT NULL,\n"
    "  status TEXT NOT NULL,\n"
    "  comment TEXT,\n"
    "  created_user TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  update_at INTEGER NOT NULL,\n"
    "  scheduled_time INTEGER,\n"
    "  response_time INTEGER,\n"
    "  ttl INTEGER,\n"
    "  response TEXT,\n"
    "  variables TEXT NOT NULL,\n"
    "  mail_list TEXT NOT NULL,\n"
    "  status_list TEXT NOT NULL,\n"
    "  task_mail_list TEXT NOT NULL,\n"
    "  task_status_list TEXT NOT NULL,\n"
    "  last_seq INTEGER NOT NULL DEFAULT 0,\n"
    "  n_history INTEGER NOT NULL DEFAULT 0,\n"
    "  expires_at INTEGER,\n"
    "  sent_at INTEGER,\n"
    "  sends INTEGER NOT NULL DEFAULT 0,\n"
    "  FOREIGN KEY(task_ident, task_version) REFERENCES task_versions(task_ident, version)\n"
    ");\n"
    "CREATE INDEX jobs_tenant ON jobs(client_root, ident);\n"
    "CREATE INDEX jobs_group ON jobs(group_ident, ident) WHERE group_ident IS NOT NULL;\n"
    "CREATE INDEX jobs_task ON jobs(client_root, task_ident, ident);\n"
    "CREATE INDEX jobs_entity ON jobs(client_root, entity_ident, ident);\n"
    "CREATE INDEX jobs_status ON jobs(client_root, status, ident);\n"
    /* the transport's and scheduler's queries */
    "CREATE INDEX jobs_pending ON jobs(entity_ident, scheduled_time) WHERE status = 'pending';\n"
    "CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE status = 'pending';\n"
    "CREATE INDEX jobs_unacked ON jobs(entity_ident) WHERE status = 'transmited';\n"
    "CREATE INDEX jobs_inflight ON jobs(update_at) WHERE status IN"
    " ('transmited', 'edge_transmitted', 'edge_started', 'edge_running');\n"
    "CREATE INDEX jobs_ttl ON jobs(expires_at) WHERE expires_at IS NOT NULL AND"
    " status IN ('pending', 'transmited');\n"
    "CREATE TABLE job_history(\n"
    "  job_ident TEXT NOT NULL REFERENCES jobs(ident),\n"
    "  n INTEGER NOT NULL,\n"
    "  status TEXT NOT NULL,\n"
    "  at INTEGER NOT NULL,\n"
    "  response TEXT,\n"
    "  response_time INTEGER,\n"
    "  seq INTEGER NOT NULL DEFAULT 0,\n"
    "  PRIMARY KEY(job_ident, n)\n"
    ") WITHOUT ROWID;\n"
    /* one row per (job, status, address): the outbox of e-mail notifications */
    "CREATE TABLE notifications(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  job_ident TEXT NOT NULL REFERENCES jobs(ident),\n"
    "  client_root TEXT NOT NULL,\n"
    "  status TEXT NOT NULL,\n"
    "  address TEXT NOT NULL,\n"
    "  state TEXT NOT NULL,\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  next_at INTEGER NOT NULL,\n"
    "  sent_at INTEGER,\n"
    "  last_error TEXT,\n"
    "  UNIQUE(job_ident, status, address)\n"
    ");\n"
    "CREATE INDEX notifications_due ON notifications(state, next_at);\n"
    "CREATE INDEX notifications_tenant ON notifications(client_root, state, sent_at);\n",
    /*
     * 2: cheaper status changes. jobs_sched holds only jobs with a scheduled_time
     * (the queries that use it compare scheduled_time, so a job sent at once
     * never enters it); jobs_inflight's condition is a chain of comparisons
     * instead of an IN list, which SQLite evaluated with two temporary tables
     * on every UPDATE of a job's status.
     */
    "DROP INDEX jobs_sched;\n"
    "CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE status = 'pending' AND"
    " scheduled_time IS NOT NULL;\n"
    "DROP INDEX jobs_inflight;\n"
    "CREATE INDEX jobs_inflight ON jobs(update_at) WHERE " JOBS_INFLIGHT ";\n",
    /*
     * 3: webhooks (docs/api.md, "Webhooks"), their outbox of deliveries with every attempt,
     * and the audit log (docs/api.md, "Audit"). A delivery's subject is the job (or group)
     * it is about: deliveries of one webhook and subject go out in id order.
     */
    "CREATE TABLE webhooks(\n"
    "  ident TEXT PRIMARY KEY,\n"
    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
    "  url TEXT NOT NULL,\n"
    "  events TEXT NOT NULL,\n"
    "  statuses TEXT NOT NULL,\n"
    "  secret TEXT NOT NULL,\n"
    "  active INTEGER NOT NULL DEFAULT 1,\n"
    "  created_user TEXT NOT NULL,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  update_at INTEGER NOT NULL\n"
    ");\n"
    "CREATE INDEX webhooks_tenant ON webhooks(client_root, ident);\n"
    "CREATE TABLE webhook_deliveries(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  ident TEXT NOT NULL UNIQUE,\n"
    "  webhook_ident TEXT NOT NULL REFERENCES webhooks(ident) ON DELETE CASCADE,\n"
    "  client_root TEXT NOT NULL,\n"
    "  type TEXT NOT NULL,\n"
    "  subject TEXT NOT NULL,\n"
    "  hist_n INTEGER NOT NULL DEFAULT 0,\n"
    "  status TEXT NOT NULL,\n"
    "  at INTEGER NOT NULL,\n"
    "  state TEXT NOT NULL,\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  created_at INTEGER NOT NULL,\n"
    "  next_at INTEGER NOT NULL,\n"
    "  done_at INTEGER,\n"
    "  last_error TEXT\n"
    ");\n"
    "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_at) WHERE state = 'queued';\n"
    "CREATE INDEX webhook_deliveries_order ON webhook_deliveries(webhook_ident, subject, id)"
    " WHERE state = 'queued';\n"
    "CREATE INDEX webhook_deliveries_list ON webhook_deliveries(webhook_ident, id);\n"
    "CREATE TABLE webhook_attempts(\n"
    "  delivery_id INTEGER NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,\n"
    "  n INTEGER NOT NULL,\n"
    "  at INTEGER NOT NULL,\n"
    "  duration_ms INTEGER NOT NULL,\n"
    "  status_code INTEGER,\n"
    "  error TEXT,\n"
    "  PRIMARY KEY(delivery_id, n)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE audit(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  client_root TEXT,\n"
    "  ts INTEGER NOT NULL,\n"
    "  user TEXT,\n"
    "  key_ident TEXT,\n"
    "  method TEXT NOT NULL,\n"
    "  path TEXT NOT NULL,\n"
    "  target TEXT,\n"
    "  status_code INTEGER NOT NULL,\n"
    "  remote TEXT\n"
    ");\n"
    "CREATE INDEX audit_tenant ON audit(client_root, id);\n"
    "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'audit records are never changed'); END;\n"
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'audit records are never deleted'); END;\n",
    /*
     * 4: group sends (docs/api.md "Rollouts"): a group's status, reason, settings (rollout,
     * abort, window, retry as typed columns; factors in thousandths, percentages in
     * hundredths), tallies of its devices' latest attempts, the rollout's token bucket and,
     * for continuous tag sends, what each later job is made of; a job's attempt, the job it
     * retries, the device's cause of an edge_error, whether it waits for its group's release
     * (held), its place in the release order and when it may be released. A task's default
     * retry.
     */
    "ALTER TABLE groups ADD COLUMN status TEXT NOT NULL DEFAULT 'running';\n"
    "ALTER TABLE groups ADD COLUMN reason TEXT;\n"
    "ALTER TABLE groups ADD COLUMN task_version INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN task_name TEXT;\n"
    "ALTER TABLE groups ADD COLUMN tag TEXT;\n"
    "ALTER TABLE groups ADD COLUMN continuous INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN ro_max INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN ro_base INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN ro_factor INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN ro_after INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN ab_pct INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN ab_min INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN win_days INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN win_start INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN win_dur INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN win_off INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN rt_max INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN rt_backoff INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN rt_factor INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN n_open INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN n_finished INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN n_failed INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN n_succeeded INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN tokens_at INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE groups ADD COLUMN c_variables TEXT;\n"
    "ALTER TABLE groups ADD COLUMN c_comment TEXT;\n"
    "ALTER TABLE groups ADD COLUMN c_ttl INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN c_mail_list TEXT;\n"
    "ALTER TABLE groups ADD COLUMN c_status_list TEXT;\n"
    "ALTER TABLE groups ADD COLUMN c_task_mail_list TEXT;\n"
    "ALTER TABLE groups ADD COLUMN c_task_status_list TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;\n"
    "ALTER TABLE jobs ADD COLUMN retry_of TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN error_code TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE jobs ADD COLUMN release_order INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE jobs ADD COLUMN release_at INTEGER;\n"
    "ALTER TABLE jobs ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE tasks ADD COLUMN retry TEXT;\n"
    "CREATE INDEX jobs_held ON jobs(group_ident, release_order) WHERE held = 1;\n"
    "CREATE INDEX jobs_group_device ON jobs(group_ident, entity_ident) WHERE"
    " group_ident IS NOT NULL;\n"
    "CREATE INDEX groups_status ON groups(status, continuous);\n"
    "UPDATE groups SET task_name = coalesce((SELECT j.task_name FROM jobs j WHERE"
    " j.group_ident = groups.ident LIMIT 1), (SELECT t.name FROM tasks t WHERE"
    " t.ident = groups.task_ident), ''), task_version = coalesce((SELECT max(j.task_version)"
    " FROM jobs j WHERE j.group_ident = groups.ident), (SELECT t.version FROM tasks t WHERE"
    " t.ident = groups.task_ident), 0);\n"
    "UPDATE groups SET n_open = (SELECT count(*) FROM jobs j WHERE j.group_ident = groups.ident"
    " AND j.status IN " JOBS_OPEN_LIST "), n_finished = (SELECT count(*) FROM jobs j WHERE"
    " j.group_ident = groups.ident AND j.status NOT IN " JOBS_OPEN_LIST "), n_failed ="
    " (SELECT count(*) FROM jobs j WHERE j.group_ident = groups.ident AND j.status IN"
    " ('edge_error', 'expired')), n_succeeded = (SELECT count(*) FROM jobs j WHERE"
    " j.group_ident = groups.ident AND j.status = 'terminated');\n"
    "UPDATE groups SET status = 'completed' WHERE n_open = 0;\n",
    /* 5: claims of once-only work by several coordinators (docs/architecture.md "Claims"):
     * the node that claimed the row and until when (Unix s); the coordinators running (nodes, their
     * last sign of life) */
    "ALTER TABLE jobs ADD COLUMN claimed_by TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN lease_until INTEGER;\n"
    "ALTER TABLE groups ADD COLUMN claimed_by TEXT;\n"
    "ALTER TABLE groups ADD COLUMN lease_until INTEGER;\n"
    "ALTER TABLE notifications ADD COLUMN claimed_by TEXT;\n"
    "ALTER TABLE notifications ADD COLUMN lease_until INTEGER;\n"
    "ALTER TABLE webhook_deliveries ADD COLUMN claimed_by TEXT;\n"
    "ALTER TABLE webhook_deliveries ADD COLUMN lease_until INTEGER;\n"
    "CREATE TABLE nodes(\n"
    "  node_id TEXT PRIMARY KEY,\n"
    "  started_at INTEGER NOT NULL,\n"
    "  seen_at INTEGER NOT NULL\n"
    ");\n",
};

#define SQ_N_MIGRATIONS (sizeof(sq_migrations) / sizeof(sq_migrations[0]))

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

static const struct store_backend sq_backend;

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
	w->base.be = &sq_backend;
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

static enum rcs_err sq_open_reader(struct store *r, const char *path);

static const struct store_backend sq_backend = {
    .name = "sqlite",
    .dialect = STORE_DIALECT_SQLITE,
    .begin_sql = "BEGIN IMMEDIATE",
    .exec = sq_exec,
    .prepare = sq_prepare,
    .release = sq_release,
    .step = sq_step,
    .reset = sq_reset,
    .bind_text = sq_bind_text,
    .bind_int = sq_bind_int,
    .bind_null = sq_bind_null,
    .is_null = sq_is_null,
    .text = sq_text,
    .len = sq_len,
    .integer = sq_integer,
    .changes = sq_changes,
    .in_tx = sq_in_tx,
    .ping = sq_ping,
    .close = sq_close,
    .open_reader = sq_open_reader,
};

/* ---- opening ---- */

static pthread_once_t sq_once = PTHREAD_ONCE_INIT;

static void sq_global_init(void)
{
	/* allocation statistics cost a global lock per malloc; nothing here reads them */
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	sqlite3_initialize();
}

enum rcs_err store_sqlite_open(struct store *st, const char *path)
{
	struct sq_conn *c = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;
	int rc;

	pthread_once(&sq_once, sq_global_init);
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto out;
	st->be = &sq_backend;
	st->dialect = sq_backend.dialect;
	st->conn = c;
	rc = sqlite3_open_v2(
	    path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", path, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		err = RCS_ERR_IO;
		goto out;
	}
	sqlite3_busy_timeout(c->db, 10000);
	sqlite3_extended_result_codes(c->db, 0);
	err = sq_exec(st, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
			  "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;");
	if (err != RCS_OK) {
		err = RCS_ERR_IO;
		goto out;
	}
	err = db_migrate(c->db, "store", sq_migrations, SQ_N_MIGRATIONS, 0);
out:
	return err;
}

/* A reader: its own connection in WAL mode, which reads the last commit without waiting for
 * the writer; query_only refuses any write through it. */
static enum rcs_err sq_open_reader(struct store *r, const char *path)
{
	struct sq_conn *c = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;
	int rc;

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto out;
	r->conn = c;
	rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", path, c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
		err = RCS_ERR_IO;
		goto out;
	}
	sqlite3_busy_timeout(c->db, 10000);
	sqlite3_extended_result_codes(c->db, 0);
	err = sq_exec(r, "PRAGMA query_only = 1; PRAGMA temp_store = MEMORY;");
out:
	return err;
}
