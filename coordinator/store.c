/*
 * store.c - SQLite storage of the coordinator. See store.h.
 */
#include "store.h"

#include <pthread.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonu.h"
#include "log.h"
#include "manifest.h"

#define STORE_CACHE 64 /* prepared statements kept for reuse */

struct store {
	sqlite3 *db;
	/* statements of constant SQL, prepared once: re-parsing SQL was half the cost of
	 * applying a device report (perf, BENCHMARKS.md) */
	struct {
		const char *sql; /* a string literal: compared by address */
		sqlite3_stmt *stmt;
		bool busy; /* in use (a nested use of the same SQL gets a fresh one) */
	} cache[STORE_CACHE];
	int ncache;
	pthread_mutex_t lock; /* recursive */
	int tx_depth;
	/* store_after_commit: what runs once the outermost transaction ends (at most
	 * STORE_ACTIONS_MAX) */
	struct store_action {
		void (*fn)(void *arg, bool committed);
		void *arg;
		int depth; /* the (savepoint) level it belongs to: dropped with it */
	} *actions;
	size_t n_actions, cap_actions;
};

/* ---- schema ---- */

/* The statuses of a job on its way to or on the device (jobs_inflight's condition;
 * the queries that use the index say it the same way). */
#define JOBS_INFLIGHT                                                                              \
	"(status = 'transmited' OR status = 'edge_transmitted' OR status = 'edge_started' OR"      \
	" status = 'edge_running')"

static const char *const store_migrations[] = {
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
};

#define STORE_N_MIGRATIONS (sizeof(store_migrations) / sizeof(store_migrations[0]))

/* ---- helpers ---- */

static enum rcs_err store_rc(sqlite3 *db, int rc, const char *what)
{
	if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW)
		return RCS_OK;
	log_warnx("%s: %s (%d)", what, sqlite3_errmsg(db), rc);
	if (rc == SQLITE_FULL || rc == SQLITE_IOERR)
		return RCS_ERR_FULL;
	if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
		return RCS_ERR_BUSY;
	if (rc == SQLITE_CONSTRAINT)
		return RCS_ERR_EXISTS;
	if (rc == SQLITE_NOMEM)
		return RCS_ERR_NOMEM;
	return RCS_ERR_DB;
}

static void store_lock(struct store *st)
{
	pthread_mutex_lock(&st->lock);
}

static void store_unlock(struct store *st)
{
	pthread_mutex_unlock(&st->lock);
}

static enum rcs_err store_exec(struct store *st, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return store_rc(st->db, rc, "exec");
	}
	return RCS_OK;
}

static enum rcs_err store_prepare(struct store *st, const char *sql, sqlite3_stmt **out);
static void store_release(struct store *st, sqlite3_stmt *s);

/* Runs one parameterless statement of constant SQL through the statement cache
 * (transaction control on every write: parsed once, not per call). */
static enum rcs_err store_run(struct store *st, const char *sql)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	err = store_prepare(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		log_warnx("%s: %s", sql, sqlite3_errmsg(st->db));
		err = store_rc(st->db, rc, "run");
	}
out:
	store_release(st, s);
	return err;
}

static enum rcs_err store_prepare_fresh(struct store *st, const char *sql, sqlite3_stmt **out)
{
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);

	if (rc != SQLITE_OK) {
		*out = NULL;
		return store_rc(st->db, rc, sql);
	}
	return RCS_OK;
}

/*
 * Prepares a statement of constant SQL (a string literal: the cache compares
 * addresses), reusing the one prepared before. Release it with store_release().
 * The caller holds the store's lock.
 */
static enum rcs_err store_prepare(struct store *st, const char *sql, sqlite3_stmt **out)
{
	enum rcs_err err;
	int free_slot = -1;

	for (int i = 0; i < st->ncache; i++) {
		if (st->cache[i].sql != sql)
			continue;
		if (st->cache[i].busy)
			return store_prepare_fresh(st, sql, out); /* nested use */
		st->cache[i].busy = true;
		*out = st->cache[i].stmt;
		return RCS_OK;
	}
	if (st->ncache < STORE_CACHE)
		free_slot = st->ncache;
	err = store_prepare_fresh(st, sql, out);
	if (err != RCS_OK || free_slot < 0)
		return err;
	st->cache[free_slot].sql = sql;
	st->cache[free_slot].stmt = *out;
	st->cache[free_slot].busy = true;
	st->ncache++;
	return RCS_OK;
}

/* Gives a statement back: a cached one is reset for its next use, others finalized. */
static void store_release(struct store *st, sqlite3_stmt *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < st->ncache; i++) {
		if (st->cache[i].stmt == s) {
			sqlite3_reset(s);
			sqlite3_clear_bindings(s);
			st->cache[i].busy = false;
			return;
		}
	}
	sqlite3_finalize(s);
}

/* Binding helpers: text may be NULL (binds NULL). */
static void bind_text(sqlite3_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(s, i);
}

static void bind_json(sqlite3_stmt *s, int i, json_object *v, const char *dflt)
{
	if (v)
		sqlite3_bind_text(s, i, jsonu_dump(v, NULL), -1, SQLITE_TRANSIENT);
	else if (dflt)
		sqlite3_bind_text(s, i, dflt, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

static void bind_opt_int(sqlite3_stmt *s, int i, long long v)
{
	if (v)
		sqlite3_bind_int64(s, i, v);
	else
		sqlite3_bind_null(s, i);
}

static const char *col_text(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);
	return t ? (const char *)t : NULL;
}

static json_object *col_str(sqlite3_stmt *s, int i)
{
	const char *t = col_text(s, i);
	return t ? json_object_new_string_len(t, sqlite3_column_bytes(s, i)) : NULL;
}

static json_object *col_int(sqlite3_stmt *s, int i)
{
	if (sqlite3_column_type(s, i) == SQLITE_NULL)
		return NULL;
	return json_object_new_int64(sqlite3_column_int64(s, i));
}

static json_object *col_bool(sqlite3_stmt *s, int i)
{
	return json_object_new_boolean(sqlite3_column_int(s, i) != 0);
}

/* Parses a JSON column we wrote ourselves. */
static json_object *col_json(sqlite3_stmt *s, int i)
{
	const char *t = col_text(s, i);
	if (t == NULL)
		return NULL;
	return json_tokener_parse(t);
}

/* Builds {page, per_page, total_pages, total_items, items}. Takes items. */
static json_object *store_page_wrap(const struct store_page *pg, long long total,
				    json_object *items)
{
	json_object *o = json_object_new_object();
	long long pages = (total + pg->per_page - 1) / pg->per_page;

	json_object_object_add(o, "page", json_object_new_int64(pg->page));
	json_object_object_add(o, "per_page", json_object_new_int64(pg->per_page));
	json_object_object_add(o, "total_pages", json_object_new_int64(pages));
	json_object_object_add(o, "total_items", json_object_new_int64(total));
	json_object_object_add(o, "items", items);
	return o;
}

/*
 * Most records are a row mapped column by column: a map names each column's
 * key and kind, in SELECT order, and row_map builds the object.
 */
enum col_kind { COL_STR, COL_INT, COL_BOOL, COL_JSON };

struct col_map {
	const char *key;
	enum col_kind kind;
};

static json_object *row_map(sqlite3_stmt *s, const struct col_map *map)
{
	json_object *o = json_object_new_object();

	for (int i = 0; map[i].key != NULL; i++) {
		json_object *v = NULL;
		switch (map[i].kind) {
		case COL_STR:
			v = col_str(s, i);
			break;
		case COL_INT:
			v = col_int(s, i);
			break;
		case COL_BOOL:
			v = col_bool(s, i);
			break;
		case COL_JSON:
			v = col_json(s, i);
			break;
		}
		json_object_object_add(o, map[i].key, v);
	}
	return o;
}

typedef json_object *(*row_fn)(sqlite3_stmt *s);

static json_object *row_first_str(sqlite3_stmt *s)
{
	return col_str(s, 0);
}

/*
 * Steps a prepared, bound statement to its end, each row through fn, into a
 * new array (*out, NULL on error). More than max rows: RCS_ERR_TOOBIG. The
 * caller holds the lock and releases s.
 */
static enum rcs_err store_rows(struct store *st, sqlite3_stmt *s, row_fn fn, size_t max,
			       json_object **out)
{
	json_object *items = json_object_new_array();
	enum rcs_err err = RCS_OK;
	size_t n = 0;
	int rc;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (++n > max) {
			err = RCS_ERR_TOOBIG;
			break;
		}
		json_object_array_add(items, fn(s));
	}
	if (err == RCS_OK)
		err = store_rc(st->db, rc, "rows");
	if (err != RCS_OK) {
		json_object_put(items);
		items = NULL;
	}
	*out = items;
	return err;
}

/*
 * A small query builder for filtered, paged lists: WHERE clauses with text
 * parameters only, so nothing a client sends is ever part of the SQL text.
 */
struct qb {
	char where[768];
	const char *params[12];
	int n;
};

static void qb_add(struct qb *q, const char *clause, const char *param)
{
	size_t len = strlen(q->where);

	snprintf(q->where + len, sizeof(q->where) - len, "%s%s", len ? " AND " : " WHERE ", clause);
	if (param != NULL && q->n < 12)
		q->params[q->n++] = param;
}

static void qb_bind(const struct qb *q, sqlite3_stmt *s)
{
	for (int i = 0; i < q->n; i++)
		sqlite3_bind_text(s, i + 1, q->params[i], -1, SQLITE_STATIC);
}

/* The bounds of a list's options (docs/api.md "Lists"), as decimal text for qb. */
struct qb_opts {
	char after[24], before[24];
	char order[160];
};

/*
 * Adds pg's created_after, created_before and name to q (columns of the table aliased p,
 * "" or "j.") and writes its ORDER BY into o->order. created_at order is the order of the
 * idents (UUIDv7: the time of creation comes first), which the indexes serve; the ident
 * (id: "ident" or "entity_ident") breaks ties of the other keys, so pages never overlap.
 */
static void qb_list_opts(struct qb *q, const struct store_page *pg, const char *p, const char *id,
			 struct qb_opts *o)
{
	const char *dir = pg->desc ? "DESC" : "ASC";
	char clause[64];

	if (pg->has_after) {
		snprintf(o->after, sizeof(o->after), "%lld", pg->created_after);
		snprintf(clause, sizeof(clause), "%screated_at > CAST(? AS INTEGER)", p);
		qb_add(q, clause, o->after);
	}
	if (pg->has_before) {
		snprintf(o->before, sizeof(o->before), "%lld", pg->created_before);
		snprintf(clause, sizeof(clause), "%screated_at < CAST(? AS INTEGER)", p);
		qb_add(q, clause, o->before);
	}
	if (pg->name) {
		snprintf(clause, sizeof(clause), "%sname = ?", p);
		qb_add(q, clause, pg->name);
	}
	if (pg->sort == NULL || strcmp(pg->sort, "created_at") == 0)
		snprintf(o->order, sizeof(o->order), "%s%s %s", p, id, dir);
	else
		snprintf(o->order, sizeof(o->order), "%s%s %s, %s%s %s", p, pg->sort, dir, p, id,
			 dir);
}

/*
 * The two statements of a page: *total gets "SELECT count(*) FROM <from><where>",
 * *s is "SELECT <cols> FROM <from><where> ORDER BY <order> LIMIT/OFFSET", bound
 * and ready to step (the caller releases it). Caller holds the lock.
 */
static enum rcs_err store_page_query(struct store *st, const char *cols, const char *from,
				     const struct qb *q, const char *order,
				     const struct store_page *pg, long long *total,
				     sqlite3_stmt **s)
{
	char sql[4096];
	enum rcs_err err;

	*total = 0;
	*s = NULL;
	if ((size_t)snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s%s", from, q->where) >=
	    sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_prepare_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	qb_bind(q, *s);
	if (sqlite3_step(*s) == SQLITE_ROW)
		*total = sqlite3_column_int64(*s, 0);
	store_release(st, *s);
	*s = NULL;
	if ((size_t)snprintf(sql, sizeof(sql), "SELECT %s FROM %s%s ORDER BY %s LIMIT ?%d OFFSET ?%d",
			     cols, from, q->where, order, q->n + 1, q->n + 2) >= sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_prepare_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	qb_bind(q, *s);
	sqlite3_bind_int64(*s, q->n + 1, pg->per_page);
	sqlite3_bind_int64(*s, q->n + 2, (pg->page - 1) * pg->per_page);
	return RCS_OK;
}

/* Runs "SELECT count(*) FROM <from><where>" and "SELECT <cols> FROM <from><where>
 * ORDER BY <order> LIMIT ? OFFSET ?" and wraps the rows as a page. */
static enum rcs_err store_list(struct store *st, const char *cols, const char *from,
			       const struct qb *q, const char *order, const struct store_page *pg,
			       row_fn fn, json_object **out)
{
	sqlite3_stmt *s = NULL;
	long long total = 0;
	json_object *items = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_page_query(st, cols, from, q, order, pg, &total, &s);
	if (err != RCS_OK)
		goto out;
	err = store_rows(st, s, fn, (size_t)pg->per_page, &items);
	if (err != RCS_OK)
		goto out;
	*out = store_page_wrap(pg, total, items);
	items = NULL;
out:
	store_release(st, s);
	store_unlock(st);
	if (items)
		json_object_put(items);
	return err;
}

/*
 * store_list for records SQLite writes as JSON text (the one column of sel):
 * the page goes to out as text, {page, per_page, total_pages, total_items,
 * items}, the same members as store_page_wrap's.
 */
static enum rcs_err store_list_text(struct store *st, const char *sel, const char *from,
				    const struct qb *q, const char *order,
				    const struct store_page *pg, struct buf *out)
{
	sqlite3_stmt *s = NULL;
	long long total = 0;
	size_t n = 0;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_page_query(st, sel, from, q, order, pg, &total, &s);
	if (err == RCS_OK)
		err = buf_appendf(out,
				  "{\"page\":%lld,\"per_page\":%lld,\"total_pages\":%lld,"
				  "\"total_items\":%lld,\"items\":[",
				  (long long)pg->page, (long long)pg->per_page,
				  (total + pg->per_page - 1) / pg->per_page, total);
	if (err != RCS_OK)
		goto out;
	while (err == RCS_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		err = n++ > 0 ? buf_append(out, ",", 1) : RCS_OK; /* LIMIT bounds n */
		if (err == RCS_OK)
			err = buf_append(out, sqlite3_column_text(s, 0),
					 (size_t)sqlite3_column_bytes(s, 0));
	}
	if (err == RCS_OK)
		err = store_rc(st->db, rc, "rows");
	if (err == RCS_OK)
		err = buf_append(out, "]}", 2);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* Runs a one-row SELECT bound by up to two text params; NOTFOUND when no row. */
static enum rcs_err store_get_row(struct store *st, const char *sql, const char *p1, const char *p2,
				  row_fn fn, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, p1);
	if (p2)
		bind_text(s, 2, p2);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*out = fn(s);
		err = RCS_OK;
	} else if (rc == SQLITE_DONE) {
		err = RCS_ERR_NOTFOUND;
	} else {
		err = store_rc(st->db, rc, "get");
	}
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* Executes one write statement with text params (NULL binds NULL); *changes
 * (may be NULL) gets the number of rows changed. */
static enum rcs_err store_write(struct store *st, const char *sql, int *changes, int n, ...)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	va_list ap;

	store_lock(st);
	err = store_prepare(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	va_start(ap, n);
	for (int i = 0; i < n; i++)
		bind_text(s, i + 1, va_arg(ap, const char *));
	va_end(ap);
	err = store_rc(st->db, sqlite3_step(s), sql);
	if (changes)
		*changes = sqlite3_changes(st->db);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* ---- open, close, transactions ---- */

static enum rcs_err store_migrate(struct store *st)
{
	sqlite3_stmt *s = NULL;
	int have = 0;
	enum rcs_err err;

	err = store_prepare_fresh(st, "PRAGMA user_version", &s);
	if (err != RCS_OK)
		return err;
	if (sqlite3_step(s) == SQLITE_ROW)
		have = sqlite3_column_int(s, 0);
	store_release(st, s);
	if (have > (int)STORE_N_MIGRATIONS) {
		log_warnx("database schema %d is newer than this coordinator (%d)", have,
			  (int)STORE_N_MIGRATIONS);
		return RCS_ERR_DB;
	}
	for (int v = have; v < (int)STORE_N_MIGRATIONS; v++) {
		char pragma[64];

		err = store_exec(st, "BEGIN IMMEDIATE");
		if (err != RCS_OK)
			return err;
		err = store_exec(st, store_migrations[v]);
		if (err == RCS_OK) {
			snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", v + 1);
			err = store_exec(st, pragma);
		}
		if (err != RCS_OK) {
			store_exec(st, "ROLLBACK");
			return err;
		}
		err = store_exec(st, "COMMIT");
		if (err != RCS_OK)
			return err;
		log_info("database migrated to schema %d", v + 1);
	}
	return RCS_OK;
}

static pthread_once_t store_once = PTHREAD_ONCE_INIT;

static void store_global_init(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	sqlite3_initialize();
}

enum rcs_err store_open(const char *path, struct store **out)
{
	struct store *st = NULL;
	pthread_mutexattr_t attr;
	enum rcs_err err = RCS_ERR_NOMEM;
	int rc;

	*out = NULL;
	/* allocation statistics cost a global lock per malloc; nothing here reads them */
	pthread_once(&store_once, store_global_init);
	st = calloc(1, sizeof(*st));
	if (st == NULL)
		goto out;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&st->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	rc = sqlite3_open_v2(
	    path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("%s: %s", path, st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
		err = RCS_ERR_IO;
		goto out;
	}
	sqlite3_busy_timeout(st->db, 10000);
	sqlite3_extended_result_codes(st->db, 0);
	err = store_exec(st, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
			     "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;");
	if (err != RCS_OK) {
		err = RCS_ERR_IO;
		goto out;
	}
	err = store_migrate(st);
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
	for (int i = 0; i < st->ncache; i++)
		sqlite3_finalize(st->cache[i].stmt);
	st->ncache = 0;
	if (st->db) {
		/* a clean close checkpoints the WAL into the main file */
		if (sqlite3_close(st->db) != SQLITE_OK)
			log_warnx("close: %s", sqlite3_errmsg(st->db));
	}
	pthread_mutex_destroy(&st->lock);
	free(st->actions);
	free(st);
}

enum rcs_err store_ping(struct store *st)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int moved = 0, rc;

	store_lock(st);
	/* an unlinked file still answers through its open descriptor, but nothing written
	 * to it survives a restart */
	if (sqlite3_file_control(st->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) == SQLITE_OK &&
	    moved) {
		log_warnx("the database file was removed or renamed while open");
		err = RCS_ERR_IO;
		goto out;
	}
	err = store_prepare(st, "SELECT count(*) FROM sqlite_master", &s);
	if (err != RCS_OK)
		goto out;
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW)
		err = store_rc(st->db, rc, "ping");
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* SQLite rolls a transaction back by itself on some errors (disk full, I/O, out
 * of memory): a savepoint begun after that would be a transaction of its own. */
static bool store_tx_lost(struct store *st)
{
	return st->tx_depth > 0 && sqlite3_get_autocommit(st->db);
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
	err = store_run(st, st->tx_depth == 0 ? "BEGIN IMMEDIATE" : "SAVEPOINT tx");
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
	if (err != RCS_OK && commit && !sqlite3_get_autocommit(st->db))
		store_run(st, "ROLLBACK");
	st->tx_depth--;
	if (st->n_actions > 0) {
		store_run_actions(st, commit && err == RCS_OK);
		return err;
	}
	store_unlock(st);
	return err;
}

enum rcs_err store_after_commit(struct store *st, void (*fn)(void *arg, bool committed),
				void *arg)
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
static enum rcs_err store_sp_begin(struct store *st)
{
	store_lock(st);
	if (store_tx_lost(st)) {
		store_unlock(st);
		return RCS_ERR_DB;
	}
	if (st->tx_depth == 0) {
		enum rcs_err err = store_run(st, "BEGIN IMMEDIATE");
		if (err != RCS_OK) {
			store_unlock(st);
			return err;
		}
		return RCS_OK;
	}
	return store_run(st, "SAVEPOINT op");
}

static enum rcs_err store_sp_end(struct store *st, enum rcs_err status)
{
	enum rcs_err err;

	if (st->tx_depth == 0) {
		err = store_run(st, status == RCS_OK ? "COMMIT" : "ROLLBACK");
		if (err != RCS_OK && status == RCS_OK && !sqlite3_get_autocommit(st->db))
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

/* ---- tenants and keys ---- */

static const char *const role_names[] = {"viewer", "operator", "admin"};

const char *role_name(enum role r)
{
	return (unsigned)r <= ROLE_ADMIN ? role_names[r] : "unknown";
}

bool role_parse(const char *s, enum role *out)
{
	for (int i = 0; i <= ROLE_ADMIN; i++) {
		if (s && strcmp(s, role_names[i]) == 0) {
			*out = (enum role)i;
			return true;
		}
	}
	return false;
}

enum rcs_err store_tenant_create(struct store *st, const char *client_root, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(st,
			   "INSERT OR IGNORE INTO tenants(client_root, created_at) VALUES(?, ?)",
			   NULL, 2, client_root, ts);
}

static json_object *row_exists(sqlite3_stmt *s)
{
	(void)s;
	return json_object_new_boolean(1);
}

bool store_tenant_exists(struct store *st, const char *client_root)
{
	json_object *o = NULL;
	enum rcs_err err = store_get_row(st, "SELECT 1 FROM tenants WHERE client_root = ?",
					 client_root, NULL, row_exists, &o);
	json_object_put(o);
	return err == RCS_OK;
}

enum rcs_err store_key_create(struct store *st, const char *ident, const char *client_root,
			      const char *user, enum role role, const char *key_hash, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(
	    st,
	    "INSERT INTO api_keys(ident, client_root, user, role, key_hash, created_at)"
	    " VALUES(?, ?, ?, ?, ?, ?)",
	    NULL, 6, ident, client_root, user, role_name(role), key_hash, ts);
}

enum rcs_err store_key_revoke(struct store *st, const char *client_root, const char *ident,
			      int64_t now)
{
	char ts[32];
	int changes = 0;
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	if (client_root)
		err = store_write(st,
				  "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)"
				  " WHERE ident = ? AND client_root = ?",
				  &changes, 3, ts, ident, client_root);
	else
		err = store_write(st,
				  "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)"
				  " WHERE ident = ?",
				  &changes, 2, ts, ident);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

enum rcs_err store_key_lookup(struct store *st, const char *key_hash, struct auth *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(st,
			    "SELECT ident, client_root, user, role FROM api_keys"
			    " WHERE key_hash = ? AND revoked_at IS NULL",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, key_hash);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		snprintf(out->key_ident, sizeof(out->key_ident), "%s", col_text(s, 0));
		snprintf(out->client_root, sizeof(out->client_root), "%s", col_text(s, 1));
		snprintf(out->user, sizeof(out->user), "%s", col_text(s, 2));
		if (!role_parse(col_text(s, 3), &out->role))
			out->role = ROLE_VIEWER;
		err = RCS_OK;
	} else if (rc == SQLITE_DONE) {
		err = RCS_ERR_NOTFOUND;
	} else {
		err = store_rc(st->db, rc, "key lookup");
	}
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

#define KEY_COLS "ident, user, role, client_root, created_at, revoked_at"

static const struct col_map key_cols[] = {
    {"ident", COL_STR},      {"user", COL_STR},       {"role", COL_STR}, {"client_root", COL_STR},
    {"created_at", COL_INT}, {"revoked_at", COL_INT}, {NULL, COL_STR},
};

static json_object *row_key(sqlite3_stmt *s)
{
	return row_map(s, key_cols);
}

enum rcs_err store_key_get(struct store *st, const char *client_root, const char *ident,
			   json_object **out)
{
	return store_get_row(
	    st, "SELECT " KEY_COLS " FROM api_keys WHERE ident = ? AND client_root = ?", ident,
	    client_root, row_key, out);
}

enum rcs_err store_keys_list(struct store *st, const char *client_root, const struct store_page *pg,
			     json_object **out)
{
	struct qb q = {.n = 0};

	q.where[0] = '\0';
	qb_add(&q, "client_root = ?", client_root);
	return store_list(st, KEY_COLS, "api_keys", &q, "ident", pg, row_key, out);
}

/* ---- scripts ---- */

static enum rcs_err store_blob_put(struct store *st, const char *sha, const char *src, size_t len)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(st, "INSERT OR IGNORE INTO script_blobs(sha256, source) VALUES(?, ?)",
			    &s);
	if (err != RCS_OK)
		return err;
	sqlite3_bind_text(s, 1, sha, -1, SQLITE_STATIC);
	sqlite3_bind_blob64(s, 2, src, len, SQLITE_STATIC);
	err = store_rc(st->db, sqlite3_step(s), "blob put");
	store_release(st, s);
	return err;
}

enum rcs_err store_script_put(struct store *st, const char *client_root, const char *name,
			      const char *src, size_t len, int64_t now, bool *created)
{
	char sha[SHA256_HEX_LEN];
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	sha256_hex(src, len, sha);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, sha, src, len);
	if (err != RCS_OK)
		goto out;
	if (created) {
		json_object *o = NULL;
		*created =
		    store_get_row(st, "SELECT 1 FROM scripts WHERE client_root = ? AND name = ?",
				  client_root, name, row_exists, &o) == RCS_ERR_NOTFOUND;
		json_object_put(o);
	}
	err = store_prepare(st,
			    "INSERT INTO scripts(client_root, name, sha256, size, updated_at)"
			    " VALUES(?, ?, ?, ?, ?) ON CONFLICT(client_root, name) DO UPDATE SET"
			    " sha256 = excluded.sha256, size = excluded.size,"
			    " updated_at = CASE WHEN sha256 = excluded.sha256 THEN updated_at"
			    " ELSE excluded.updated_at END",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, client_root);
	bind_text(s, 2, name);
	bind_text(s, 3, sha);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)len);
	sqlite3_bind_int64(s, 5, now);
	err = store_rc(st->db, sqlite3_step(s), "script put");
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

static json_object *row_script(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "name", col_str(s, 0));
	json_object_object_add(o, "sha256", col_str(s, 1));
	json_object_object_add(o, "size", col_int(s, 2));
	json_object_object_add(o, "stock", json_object_new_boolean(col_text(s, 3)[0] == '\0'));
	json_object_object_add(o, "updated_at", col_int(s, 4));
	if (sqlite3_column_count(s) > 5)
		json_object_object_add(o, "source", col_str(s, 5));
	return o;
}

enum rcs_err store_script_get(struct store *st, const char *client_root, const char *name,
			      bool with_source, json_object **out)
{
	const char *sql =
	    with_source
		? "SELECT s.name, s.sha256, s.size, s.client_root, s.updated_at, b.source"
		  " FROM scripts s JOIN script_blobs b ON b.sha256 = s.sha256"
		  " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
		  " ORDER BY s.client_root DESC LIMIT 1"
		: "SELECT s.name, s.sha256, s.size, s.client_root, s.updated_at FROM scripts s"
		  " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
		  " ORDER BY s.client_root DESC LIMIT 1";

	return store_get_row(st, sql, client_root, name, row_script, out);
}

enum rcs_err store_script_source(struct store *st, const char *client_root, const char *name,
				 char **src, size_t *len, char sha256[65])
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*src = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT b.source, s.sha256 FROM scripts s JOIN script_blobs b"
			  " ON b.sha256 = s.sha256 WHERE s.name = ?2 AND s.client_root IN (?1, '')"
			  " ORDER BY s.client_root DESC LIMIT 1",
			  &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, client_root);
	bind_text(s, 2, name);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		size_t n = (size_t)sqlite3_column_bytes(s, 0);
		char *p = malloc(n + 1);
		if (p == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		if (n)
			memcpy(p, sqlite3_column_blob(s, 0), n);
		p[n] = '\0';
		*src = p;
		*len = n;
		snprintf(sha256, 65, "%s", col_text(s, 1));
	} else {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "script source");
	}
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

bool store_script_is_stock(struct store *st, const char *name)
{
	json_object *o = NULL;
	enum rcs_err err =
	    store_get_row(st, "SELECT 1 FROM scripts WHERE client_root = '' AND name = ?", name,
			  NULL, row_exists, &o);
	json_object_put(o);
	return err == RCS_OK;
}

enum rcs_err store_script_delete(struct store *st, const char *client_root, const char *name)
{
	json_object *o = NULL;
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err =
	    store_get_row(st,
			  "SELECT 1 FROM tasks WHERE client_root = ? AND script = ? AND deleted = 0"
			  " LIMIT 1",
			  client_root, name, row_exists, &o);
	json_object_put(o);
	if (err == RCS_OK) {
		err = RCS_ERR_CONFLICT;
		goto out;
	}
	if (err != RCS_ERR_NOTFOUND)
		goto out;
	err = store_write(st, "DELETE FROM scripts WHERE client_root = ? AND name = ?", &changes, 2,
			  client_root, name);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
out:
	return store_sp_end(st, err);
}

enum rcs_err store_scripts_list(struct store *st, const char *client_root,
				const struct store_page *pg, json_object **out)
{
	struct qb q = {.n = 0};

	/* a tenant's script shadows a stock script of the same name */
	q.where[0] = '\0';
	qb_add(&q,
	       "(s.client_root = ?1 OR (s.client_root = '' AND NOT EXISTS (SELECT 1 FROM"
	       " scripts t WHERE t.client_root = ?1 AND t.name = s.name)))",
	       client_root);
	return store_list(st, "s.name, s.sha256, s.size, s.client_root, s.updated_at", "scripts s",
			  &q, "s.name", pg, row_script, out);
}

/* ---- tasks ---- */

#define TASK_COLS                                                                                  \
	"version, ident, client_root, created_user, update_user, name, script, variables_info,"    \
	" constants, comment, active, public, hide, allow_offline, created_at, update_at,"         \
	" mail_list, status_list, timeout, script_sha256, signature"

static json_object *row_task(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "version", col_int(s, 0));
	json_object_object_add(o, "ident", col_str(s, 1));
	json_object_object_add(o, "client_root", col_str(s, 2));
	json_object_object_add(o, "created_user", col_str(s, 3));
	json_object_object_add(o, "update_user", col_str(s, 4));
	json_object_object_add(o, "name", col_str(s, 5));
	json_object_object_add(o, "script", col_str(s, 6));
	json_object_object_add(o, "variables_info", col_json(s, 7));
	json_object_object_add(o, "constants", col_json(s, 8));
	json_object_object_add(o, "comment", col_str(s, 9));
	json_object_object_add(
	    o, "active", json_object_new_string(sqlite3_column_int(s, 10) ? "true" : "false"));
	json_object_object_add(o, "public", col_bool(s, 11));
	json_object_object_add(o, "hide", col_bool(s, 12));
	json_object_object_add(o, "allow_offline", col_bool(s, 13));
	json_object_object_add(o, "created_at", col_int(s, 14));
	json_object_object_add(o, "update_at", col_int(s, 15));
	json_object_object_add(o, "notification_mail_list", col_json(s, 16));
	json_object_object_add(o, "notification_status_list", col_json(s, 17));
	json_object_object_add(o, "timeout", col_int(s, 18));
	json_object_object_add(o, "script_sha256", col_str(s, 19));
	json_object_object_add(o, "signature", col_json(s, 20));
	return o;
}

enum rcs_err store_task_put(struct store *st, const struct task_write *t, bool is_new)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int changes;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, t->script_sha256, t->script_src, t->script_len);
	if (err != RCS_OK)
		goto out;
	if (is_new)
		err = store_prepare(
		    st,
		    "INSERT INTO tasks(version, ident, client_root, created_user,"
		    " update_user, name, script, variables_info, constants, comment,"
		    " active, public, hide, allow_offline, created_at, update_at,"
		    " mail_list, status_list, timeout, script_sha256, signature)"
		    " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,"
		    "?18,?19,?20,?21)",
		    &s);
	else
		err = store_prepare(
		    st,
		    "UPDATE tasks SET version = ?1, update_user = ?5, name = ?6,"
		    " script = ?7, variables_info = ?8, constants = ?9, comment = ?10,"
		    " active = ?11, public = ?12, hide = ?13, allow_offline = ?14,"
		    " update_at = ?16, mail_list = ?17, status_list = ?18, timeout = ?19,"
		    " script_sha256 = ?20, signature = ?21"
		    " WHERE ident = ?2 AND client_root = ?3 AND deleted = 0",
		    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, t->version);
	bind_text(s, 2, t->ident);
	bind_text(s, 3, t->client_root);
	bind_text(s, 4, t->created_user);
	bind_text(s, 5, t->update_user);
	bind_text(s, 6, t->name);
	bind_text(s, 7, t->script);
	bind_json(s, 8, t->variables_info, "{}");
	bind_json(s, 9, t->constants, "{}");
	bind_text(s, 10, t->comment ? t->comment : "");
	sqlite3_bind_int(s, 11, t->active);
	sqlite3_bind_int(s, 12, t->is_public);
	sqlite3_bind_int(s, 13, t->hide);
	sqlite3_bind_int(s, 14, t->allow_offline);
	sqlite3_bind_int64(s, 15, t->created_at);
	sqlite3_bind_int64(s, 16, t->update_at);
	bind_json(s, 17, t->mail_list, "[]");
	bind_json(s, 18, t->status_list, "[]");
	sqlite3_bind_int64(s, 19, t->timeout);
	bind_text(s, 20, t->script_sha256);
	bind_json(s, 21, t->signature, NULL);
	err = store_rc(st->db, sqlite3_step(s), "task put");
	if (err != RCS_OK)
		goto out;
	changes = sqlite3_changes(st->db);
	if (changes == 0) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	store_release(st, s);
	s = NULL;
	err = store_prepare(
	    st,
	    "INSERT INTO task_versions(task_ident, version, script_name, script_sha256,"
	    " constants, variables_info, timeout, signature)"
	    " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
	    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, t->ident);
	sqlite3_bind_int64(s, 2, t->version);
	bind_text(s, 3, t->script);
	bind_text(s, 4, t->script_sha256);
	bind_json(s, 5, t->constants, "{}");
	bind_json(s, 6, t->variables_info, "{}");
	sqlite3_bind_int64(s, 7, t->timeout);
	bind_json(s, 8, t->signature, NULL);
	err = store_rc(st->db, sqlite3_step(s), "task version put");
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

enum rcs_err store_task_get(struct store *st, const char *client_root, const char *ident,
			    json_object **out)
{
	return store_get_row(st,
			     "SELECT " TASK_COLS " FROM tasks WHERE ident = ? AND client_root = ?"
			     " AND deleted = 0",
			     ident, client_root, row_task, out);
}

enum rcs_err store_task_set_signature(struct store *st, const char *client_root, const char *ident,
				      json_object *signature)
{
	const char *sig = signature ? jsonu_dump(signature, NULL) : NULL;
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "UPDATE tasks SET signature = ? WHERE ident = ? AND client_root = ?"
			  " AND deleted = 0",
			  &changes, 3, sig, ident, client_root);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK)
		err =
		    store_write(st,
				"UPDATE task_versions SET signature = ?1 WHERE task_ident = ?2 AND"
				" version = (SELECT version FROM tasks WHERE ident = ?2)",
				NULL, 2, sig, ident);
	return store_sp_end(st, err);
}

enum rcs_err store_task_delete(struct store *st, const char *client_root, const char *ident)
{
	int changes = 0;
	enum rcs_err err = store_write(st,
				       "UPDATE tasks SET deleted = 1 WHERE ident = ? AND"
				       " client_root = ? AND deleted = 0",
				       &changes, 2, ident, client_root);

	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

enum rcs_err store_tasks_list(struct store *st, const char *client_root,
			      const struct task_filter *f, const struct store_page *pg,
			      json_object **out)
{
	struct qb q = {.n = 0};
	struct qb_opts o;

	q.where[0] = '\0';
	qb_add(&q, "client_root = ?", client_root);
	qb_add(&q, "deleted = 0", NULL);
	if (!f->include_hidden)
		qb_add(&q, "hide = 0", NULL);
	if (f->only_visible_to)
		qb_add(&q, "(public = 1 OR created_user = ?)", f->only_visible_to);
	qb_list_opts(&q, pg, "", "ident", &o);
	return store_list(st, TASK_COLS, "tasks", &q, o.order, pg, row_task, out);
}

enum rcs_err store_tasks_using_script(struct store *st, const char *client_root, const char *name,
				      json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT ident FROM tasks WHERE client_root = ? AND script = ? AND"
			    " deleted = 0 ORDER BY ident",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, client_root);
	bind_text(s, 2, name);
	err = store_rows(st, s, row_first_str, SIZE_MAX, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_task_version_get(struct store *st, const char *task_ident, long long version,
				    struct task_version *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_prepare(st,
			    "SELECT v.script_name, b.source, v.script_sha256, v.constants,"
			    " v.variables_info, v.signature, v.timeout FROM task_versions v"
			    " JOIN script_blobs b ON b.sha256 = v.script_sha256"
			    " WHERE v.task_ident = ? AND v.version = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, task_ident);
	sqlite3_bind_int64(s, 2, version);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "task version");
		goto out;
	}
	out->script_name = strdup(col_text(s, 0));
	out->script_len = (size_t)sqlite3_column_bytes(s, 1);
	out->script_src = malloc(out->script_len + 1);
	if (out->script_name == NULL || out->script_src == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	if (out->script_len)
		memcpy(out->script_src, sqlite3_column_blob(s, 1), out->script_len);
	out->script_src[out->script_len] = '\0';
	snprintf(out->script_sha256, sizeof(out->script_sha256), "%s", col_text(s, 2));
	out->constants = col_json(s, 3);
	out->variables_info = col_json(s, 4);
	out->signature = col_json(s, 5);
	out->timeout = sqlite3_column_int64(s, 6);
out:
	store_release(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_task_version_free(out);
	return err;
}

void store_task_version_free(struct task_version *tv)
{
	free(tv->script_name);
	free(tv->script_src);
	if (tv->constants)
		json_object_put(tv->constants);
	if (tv->variables_info)
		json_object_put(tv->variables_info);
	if (tv->signature)
		json_object_put(tv->signature);
	memset(tv, 0, sizeof(*tv));
}

/* ---- devices ---- */

#define DEVICE_COLS                                                                                \
	"entity_ident, client_root, name, tags, reported_tags, online, last_seen, agent_version,"  \
	" created_at, update_at"

static const struct col_map device_cols[] = {
    {"entity_ident", COL_STR},
    {"client_root", COL_STR},
    {"name", COL_STR},
    {"tags", COL_JSON},
    {"reported_tags", COL_JSON},
    {"online", COL_BOOL},
    {"last_seen", COL_INT},
    {"agent_version", COL_STR},
    {"created_at", COL_INT},
    {"update_at", COL_INT},
    {NULL, COL_STR},
};

static json_object *row_device(sqlite3_stmt *s)
{
	return row_map(s, device_cols);
}

static enum rcs_err store_device_tags_set(struct store *st, const char *client_root,
					  const char *entity_ident, json_object *tags, int reported)
{
	char rep[4];
	enum rcs_err err;

	snprintf(rep, sizeof(rep), "%d", reported);
	err = store_write(st, "DELETE FROM device_tags WHERE entity_ident = ? AND reported = ?",
			  NULL, 2, entity_ident, rep);
	for (size_t i = 0; err == RCS_OK && i < json_object_array_length(tags); i++) {
		const char *tag = json_object_get_string(json_object_array_get_idx(tags, i));
		err =
		    store_write(st,
				"INSERT OR IGNORE INTO device_tags(client_root, tag, entity_ident,"
				" reported) VALUES(?, ?, ?, ?)",
				NULL, 4, client_root, tag, entity_ident, rep);
	}
	return err;
}

enum rcs_err store_device_insert(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, json_object *tags,
				 int64_t now)
{
	char ts[32];
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "INSERT INTO devices(entity_ident, client_root, name, tags, created_at,"
			  " update_at) VALUES(?, ?, ?, ?, ?, ?)",
			  NULL, 6, entity_ident, client_root, name, jsonu_dump(tags, NULL), ts, ts);
	if (err == RCS_OK)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_devices_presence_reset(struct store *st)
{
	enum rcs_err err = store_sp_begin(st);

	if (err != RCS_OK)
		return err;
	err = store_write(st, "UPDATE devices SET online = 0 WHERE online <> 0", NULL, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_device_get(struct store *st, const char *client_root, const char *entity_ident,
			      json_object **out)
{
	return store_get_row(st,
			     "SELECT " DEVICE_COLS " FROM devices WHERE entity_ident = ? AND"
			     " client_root = ?",
			     entity_ident, client_root, row_device, out);
}

enum rcs_err store_device_update(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, json_object *tags,
				 int64_t now)
{
	char ts[32];
	int changes = 0;
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "UPDATE devices SET name = coalesce(?, name), tags = coalesce(?, tags),"
			  " update_at = ? WHERE entity_ident = ? AND client_root = ?",
			  &changes, 5, name, tags ? jsonu_dump(tags, NULL) : NULL, ts, entity_ident,
			  client_root);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK && tags)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_device_delete(struct store *st, const char *client_root,
				 const char *entity_ident)
{
	int changes = 0;
	enum rcs_err err =
	    store_write(st, "DELETE FROM devices WHERE entity_ident = ? AND client_root = ?",
			&changes, 2, entity_ident, client_root);

	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

enum rcs_err store_devices_list(struct store *st, const char *client_root, const char *tag,
				int online, const struct store_page *pg, json_object **out)
{
	struct qb q = {.n = 0};
	struct qb_opts o;

	q.where[0] = '\0';
	qb_add(&q, "client_root = ?", client_root);
	if (tag)
		qb_add(&q,
		       "entity_ident IN (SELECT entity_ident FROM device_tags WHERE client_root ="
		       " devices.client_root AND tag = ?)",
		       tag);
	if (online == 0)
		qb_add(&q, "online = 0", NULL);
	else if (online == 1)
		qb_add(&q, "online = 1", NULL);
	qb_list_opts(&q, pg, "", "entity_ident", &o);
	return store_list(st, DEVICE_COLS, "devices", &q, o.order, pg, row_device, out);
}

static const struct col_map presence_cols[] = {
    {"entity_ident", COL_STR},
    {"online", COL_BOOL},
    {NULL, COL_STR},
};

static json_object *row_presence(sqlite3_stmt *s)
{
	return row_map(s, presence_cols);
}

enum rcs_err store_devices_with_tag(struct store *st, const char *client_root, const char *tag,
				    size_t max, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT d.entity_ident, d.online FROM devices d WHERE d.entity_ident IN"
			    " (SELECT entity_ident FROM device_tags WHERE client_root = ?1 AND"
			    " tag = ?2) AND d.client_root = ?1 ORDER BY d.entity_ident",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, client_root);
	bind_text(s, 2, tag);
	err = store_rows(st, s, row_presence, max, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online)
{
	json_object *o = NULL;
	enum rcs_err err = store_get_row(st,
					 "SELECT entity_ident, online FROM devices WHERE"
					 " entity_ident = ? AND client_root = ?",
					 entity_ident, client_root, row_presence, &o);

	if (err == RCS_OK)
		*online = json_object_get_boolean(json_object_object_get(o, "online"));
	json_object_put(o);
	return err;
}

/* ---- jobs ---- */

#define JOB_COLS                                                                                   \
	"j.ident, j.task_version, j.task_ident, j.task_name, j.group_ident, g.name,"               \
	" j.client_root, j.entity_ident, j.comment, j.status, j.created_user, j.created_at,"       \
	" j.update_at, j.scheduled_time, j.response_time, j.ttl, j.response, j.mail_list,"         \
	" j.status_list, j.variables"
#define JOB_FROM "jobs j LEFT JOIN groups g ON g.ident = j.group_ident"

/*
 * The job record as JSON text, built by SQLite: the same members, in the same
 * order and with the same values as row_job() (tests compare the two). Used
 * where the record only goes out as text (events, bulk answers): no json-c
 * objects to build, dump and free per job.
 */
#define JOB_JSON                                                                                   \
	"json_object('ident', j.ident, 'task', json_object('version', j.task_version, 'ident',"     \
	" j.task_ident, 'name', j.task_name), 'group', CASE WHEN j.group_ident IS NULL THEN NULL"  \
	" ELSE json_object('ident', j.group_ident, 'name', g.name) END, 'client_root',"            \
	" j.client_root, 'entity_ident', j.entity_ident, 'target', NULL, 'comment', j.comment,"    \
	" 'status', j.status, 'created_user', j.created_user, 'created_at', j.created_at,"          \
	" 'update_at', j.update_at, 'scheduled_time', j.scheduled_time, 'response_time',"          \
	" j.response_time, 'ttl', j.ttl, 'payload', NULL, 'response', j.response,"                 \
	" 'notification_mail_list', json(j.mail_list), 'notification_status_list',"               \
	" json(j.status_list), 'variables', json(j.variables))"

static json_object *row_job(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();
	json_object *task = json_object_new_object();
	json_object *group = NULL;

	json_object_object_add(task, "version", col_int(s, 1));
	json_object_object_add(task, "ident", col_str(s, 2));
	json_object_object_add(task, "name", col_str(s, 3));
	if (sqlite3_column_type(s, 4) != SQLITE_NULL) {
		group = json_object_new_object();
		json_object_object_add(group, "ident", col_str(s, 4));
		json_object_object_add(group, "name", col_str(s, 5));
	}
	json_object_object_add(o, "ident", col_str(s, 0));
	json_object_object_add(o, "task", task);
	json_object_object_add(o, "group", group);
	json_object_object_add(o, "client_root", col_str(s, 6));
	json_object_object_add(o, "entity_ident", col_str(s, 7));
	json_object_object_add(o, "target", NULL);
	json_object_object_add(o, "comment", col_str(s, 8));
	json_object_object_add(o, "status", col_str(s, 9));
	json_object_object_add(o, "created_user", col_str(s, 10));
	json_object_object_add(o, "created_at", col_int(s, 11));
	json_object_object_add(o, "update_at", col_int(s, 12));
	json_object_object_add(o, "scheduled_time", col_int(s, 13));
	json_object_object_add(o, "response_time", col_int(s, 14));
	json_object_object_add(o, "ttl", col_int(s, 15));
	json_object_object_add(o, "payload", NULL);
	json_object_object_add(o, "response", col_str(s, 16));
	json_object_object_add(o, "notification_mail_list", col_json(s, 17));
	json_object_object_add(o, "notification_status_list", col_json(s, 18));
	json_object_object_add(o, "variables", col_json(s, 19));
	return o;
}

static enum rcs_err store_history_add(struct store *st, const char *job, long long n,
				      const char *status, int64_t at, const char *response,
				      long long response_time, long long seq)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at, response,"
			    " response_time, seq) VALUES(?, ?, ?, ?, ?, ?, ?)",
			    &s);
	if (err != RCS_OK)
		return err;
	bind_text(s, 1, job);
	sqlite3_bind_int64(s, 2, n);
	bind_text(s, 3, status);
	sqlite3_bind_int64(s, 4, at);
	bind_text(s, 5, response);
	bind_opt_int(s, 6, response_time);
	sqlite3_bind_int64(s, 7, seq);
	err = store_rc(st->db, sqlite3_step(s), "history add");
	store_release(st, s);
	return err;
}

/*
 * Records the notifications a status change triggers, in the caller's
 * transaction: the task's addresses for the task's statuses, the job's
 * addresses for the job's statuses (seed rules 1-3); an address on both
 * levels gets one row.
 */
static enum rcs_err store_notify_record(struct store *st, const char *job, const char *status,
					int64_t now)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(
	    st,
	    "INSERT OR IGNORE INTO notifications(job_ident, client_root, status,"
	    " address, state, created_at, next_at)"
	    " SELECT j.ident, j.client_root, ?2, a.value, 'queued', ?3, ?3"
	    " FROM jobs j, json_each(j.task_mail_list) a WHERE j.ident = ?1 AND"
	    " EXISTS (SELECT 1 FROM json_each(j.task_status_list) x WHERE x.value = ?2)"
	    " UNION"
	    " SELECT j.ident, j.client_root, ?2, a.value, 'queued', ?3, ?3"
	    " FROM jobs j, json_each(j.mail_list) a WHERE j.ident = ?1 AND"
	    " EXISTS (SELECT 1 FROM json_each(j.status_list) x WHERE x.value = ?2)",
	    &s);
	if (err != RCS_OK)
		return err;
	bind_text(s, 1, job);
	bind_text(s, 2, status);
	sqlite3_bind_int64(s, 3, now);
	err = store_rc(st->db, sqlite3_step(s), "notification record");
	store_release(st, s);
	return err;
}

enum rcs_err store_jobs_create(struct store *st, const struct job_batch *b)
{
	sqlite3_stmt *ins = NULL, *hist = NULL;
	const char *vars = jsonu_dump(b->variables, NULL);
	const char *mails = b->mail_list ? jsonu_dump(b->mail_list, NULL) : "[]";
	const char *stats = b->status_list ? jsonu_dump(b->status_list, NULL) : "[]";
	const char *tmails = b->task_mail_list ? jsonu_dump(b->task_mail_list, NULL) : "[]";
	const char *tstats = b->task_status_list ? jsonu_dump(b->task_status_list, NULL) : "[]";
	bool notify = (strcmp(mails, "[]") != 0 && strcmp(stats, "[]") != 0) ||
		      (strcmp(tmails, "[]") != 0 && strcmp(tstats, "[]") != 0);
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	if (b->group_ident) {
		char ts[32];
		snprintf(ts, sizeof(ts), "%lld", (long long)b->now);
		err = store_write(
		    st,
		    "INSERT INTO groups(ident, client_root, name, task_ident, created_user,"
		    " created_at) VALUES(?, ?, ?, ?, ?, ?)",
		    NULL, 6, b->group_ident, b->client_root, b->group_name, b->task_ident,
		    b->created_user, ts);
		if (err != RCS_OK)
			goto out;
	}
	err = store_prepare(
	    st,
	    "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
	    " group_ident, entity_ident, status, comment, created_user, created_at,"
	    " update_at, scheduled_time, ttl, variables, mail_list, status_list,"
	    " task_mail_list, task_status_list, expires_at, n_history)"
	    " VALUES(?,?,?,?,?,?,?,'pending',?,?,?,?,?,?,?,?,?,?,?,?,2)",
	    &ins);
	if (err != RCS_OK)
		goto out;
	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at) VALUES"
			    " (?1, 1, 'initial', ?2), (?1, 2, 'pending', ?2)",
			    &hist);
	if (err != RCS_OK)
		goto out;
	/* the constant parameters are bound once */
	bind_text(ins, 2, b->client_root);
	bind_text(ins, 3, b->task_ident);
	sqlite3_bind_int64(ins, 4, b->task_version);
	bind_text(ins, 5, b->task_name);
	bind_text(ins, 6, b->group_ident);
	bind_text(ins, 8, b->comment);
	bind_text(ins, 9, b->created_user);
	sqlite3_bind_int64(ins, 10, b->now);
	sqlite3_bind_int64(ins, 11, b->now);
	bind_opt_int(ins, 12, b->scheduled_time);
	bind_opt_int(ins, 13, b->ttl);
	sqlite3_bind_text(ins, 14, vars, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 15, mails, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 16, stats, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 17, tmails, -1, SQLITE_STATIC);
	sqlite3_bind_text(ins, 18, tstats, -1, SQLITE_STATIC);
	bind_opt_int(ins, 19, store_job_expiry(b->now, b->scheduled_time, b->ttl));
	sqlite3_bind_int64(hist, 2, b->now);
	for (size_t i = 0; i < b->n; i++) {
		sqlite3_bind_text(ins, 1, b->jobs[i].ident, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 7, b->jobs[i].entity_ident, -1, SQLITE_STATIC);
		err = store_rc(st->db, sqlite3_step(ins), "job insert");
		sqlite3_reset(ins);
		if (err != RCS_OK)
			goto out;
		sqlite3_bind_text(hist, 1, b->jobs[i].ident, -1, SQLITE_STATIC);
		err = store_rc(st->db, sqlite3_step(hist), "job history insert");
		sqlite3_reset(hist);
		if (err == RCS_OK && notify)
			err = store_notify_record(st, b->jobs[i].ident, "initial", b->now);
		if (err == RCS_OK && notify)
			err = store_notify_record(st, b->jobs[i].ident, "pending", b->now);
		if (err != RCS_OK)
			goto out;
	}
out:
	store_release(st, ins);
	store_release(st, hist);
	return store_sp_end(st, err);
}

enum rcs_err store_job_get(struct store *st, const char *client_root, const char *ident,
			   json_object **out)
{
	if (client_root == NULL)
		return store_get_row(st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ?",
				     ident, NULL, row_job, out);
	return store_get_row(
	    st, "SELECT " JOB_COLS " FROM " JOB_FROM " WHERE j.ident = ? AND j.client_root = ?",
	    ident, client_root, row_job, out);
}

enum rcs_err store_job_json(struct store *st, const char *ident, char client_root[UUID_STR_LEN],
			    struct buf *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(st, "SELECT j.client_root, " JOB_JSON " FROM " JOB_FROM " WHERE j.ident = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job json");
		goto out;
	}
	snprintf(client_root, UUID_STR_LEN, "%s", col_text(s, 0) ? col_text(s, 0) : "");
	err = buf_append(out, sqlite3_column_text(s, 1), (size_t)sqlite3_column_bytes(s, 1));
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* One job's record as SQLite builds it (JOB_JSON), appended to out. */
static enum rcs_err store_job_json_step(struct store *st, sqlite3_stmt *s, const char *ident,
					struct buf *out)
{
	enum rcs_err err;
	int rc;

	sqlite3_bind_text(s, 1, ident, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		err = buf_append(out, sqlite3_column_text(s, 0), (size_t)sqlite3_column_bytes(s, 0));
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "jobs batch");
	sqlite3_reset(s);
	return err;
}

/*
 * Where a record made from the first job's can be patched for job i: both
 * idents are 36 characters, the job's at offset 10 ({"ident":"...), the
 * device's after the first "entity_ident":" (the only keys before it are
 * the task's and the group's; a quote inside a string value is escaped).
 * Returns that offset, or 0 when the record isn't such a template.
 */
static size_t store_job_template(const struct buf *rec, const struct job_new *first)
{
	static const char head[] = "{\"ident\":\"", key[] = "\"entity_ident\":\"";
	const char *at;

	if (rec->len < sizeof(head) - 1 + 2 * 36 || memcmp(rec->data, head, sizeof(head) - 1) != 0 ||
	    memcmp(rec->data + sizeof(head) - 1, first->ident, 36) != 0 ||
	    strlen(first->entity_ident) != 36)
		return 0;
	at = strstr(rec->data, key);
	if (at == NULL || (size_t)(at - rec->data) + sizeof(key) - 1 + 36 > rec->len ||
	    memcmp(at + sizeof(key) - 1, first->entity_ident, 36) != 0)
		return 0;
	return (size_t)(at - rec->data) + sizeof(key) - 1;
}

/*
 * The jobs of a batch share every value but their ident and device, so the
 * record SQLite builds for the first job is the others' template: at 10,000
 * jobs, building each record in SQL was a fifth of the request. The last
 * job's record is built in SQL as well and must equal its copy; if anything
 * differs, every record is built in SQL.
 */
enum rcs_err store_jobs_json_batch(struct store *st, const struct job_batch *b, struct buf *out)
{
	static const size_t ident_at = 10;
	struct buf tpl, last;
	sqlite3_stmt *s = NULL;
	size_t base = out->len, entity_at = 0;
	bool differs = false;
	enum rcs_err err;

	buf_init(&tpl, out->max);
	buf_init(&last, out->max);
	store_lock(st);
	err = store_prepare(st, "SELECT " JOB_JSON " FROM " JOB_FROM " WHERE j.ident = ?", &s);
	if (err == RCS_OK && b->n > 2)
		err = store_job_json_step(st, s, b->jobs[0].ident, &tpl);
	if (err == RCS_OK && b->n > 2)
		entity_at = store_job_template(&tpl, &b->jobs[0]);
	if (err == RCS_OK && entity_at > 0)
		err = store_job_json_step(st, s, b->jobs[b->n - 1].ident, &last);
	for (size_t i = 0; err == RCS_OK && entity_at > 0 && i < b->n; i++) {
		size_t at = out->len + (i > 0);

		if (strlen(b->jobs[i].entity_ident) != 36) {
			entity_at = 0;
			break;
		}
		err = i > 0 ? buf_append(out, ",", 1) : RCS_OK;
		if (err == RCS_OK)
			err = buf_append(out, tpl.data, tpl.len);
		if (err != RCS_OK)
			break;
		memcpy(out->data + at + ident_at, b->jobs[i].ident, 36);
		memcpy(out->data + at + entity_at, b->jobs[i].entity_ident, 36);
		differs = i + 1 == b->n && (out->len - at != last.len ||
					    memcmp(out->data + at, last.data, last.len) != 0);
		if (differs) {
			log_warnx("the records of a bulk send differ in more than their idents");
			entity_at = 0;
		}
	}
	if (err == RCS_OK && entity_at == 0) {
		/* one record at a time, each built in SQL */
		out->len = base;
		if (out->data)
			out->data[base] = '\0';
		for (size_t i = 0; err == RCS_OK && i < b->n; i++) {
			err = i > 0 ? buf_append(out, ",", 1) : RCS_OK;
			if (err == RCS_OK)
				err = store_job_json_step(st, s, b->jobs[i].ident, out);
		}
	}
	store_release(st, s);
	store_unlock(st);
	buf_free(&tpl);
	buf_free(&last);
	return err;
}

enum rcs_err store_job_history(struct store *st, const char *client_root, const char *ident,
			       const struct store_page *pg, json_object **out)
{
	json_object *job = NULL, *items = NULL;
	sqlite3_stmt *s = NULL;
	long long total = 0;
	enum rcs_err err;
	int rc;

	*out = NULL;
	store_lock(st);
	err = store_job_get(st, client_root, ident, &job);
	if (err != RCS_OK)
		goto out;
	err = store_prepare(st, "SELECT count(*) FROM job_history WHERE job_ident = ?", &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	if (sqlite3_step(s) == SQLITE_ROW)
		total = sqlite3_column_int64(s, 0);
	store_release(st, s);
	s = NULL;
	/* newest first unless sort=update_at (oldest first); n is the order of the changes */
	err = store_prepare(st,
			    pg->desc ? "SELECT status, at, response, response_time FROM job_history"
				       " WHERE job_ident = ? ORDER BY n DESC LIMIT ? OFFSET ?"
				     : "SELECT status, at, response, response_time FROM job_history"
				       " WHERE job_ident = ? ORDER BY n ASC LIMIT ? OFFSET ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	sqlite3_bind_int64(s, 2, pg->per_page);
	sqlite3_bind_int64(s, 3, (pg->page - 1) * pg->per_page);
	items = json_object_new_array();
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		/* a snapshot: the job record with the status, time and response it had */
		json_object *snap = NULL;
		json_object_deep_copy(job, &snap, NULL);
		json_object_object_add(snap, "status", col_str(s, 0));
		json_object_object_add(snap, "update_at", col_int(s, 1));
		json_object_object_add(snap, "response", col_str(s, 2));
		json_object_object_add(snap, "response_time", col_int(s, 3));
		json_object_array_add(items, snap);
	}
	err = store_rc(st->db, rc, "history");
	if (err != RCS_OK)
		goto out;
	*out = store_page_wrap(pg, total, items);
	items = NULL;
out:
	store_release(st, s);
	store_unlock(st);
	if (job)
		json_object_put(job);
	if (items)
		json_object_put(items);
	return err;
}

enum rcs_err store_jobs_list(struct store *st, const char *client_root, const struct job_filter *f,
			     const struct store_page *pg, struct buf *out)
{
	struct qb q = {.n = 0};
	struct qb_opts o;

	q.where[0] = '\0';
	qb_add(&q, "j.client_root = ?", client_root);
	if (f->group_ident)
		qb_add(&q, "j.group_ident = ?", f->group_ident);
	if (f->task_ident)
		qb_add(&q, "j.task_ident = ?", f->task_ident);
	if (f->entity_ident)
		qb_add(&q, "j.entity_ident = ?", f->entity_ident);
	if (f->status && strcmp(f->status, "running") == 0)
		qb_add(&q, "j.status IN ('edge_started', 'edge_running')", NULL);
	else if (f->status)
		qb_add(&q, "j.status = ?", f->status);
	/* the jobs of a task the user may not see (not public, someone else's) are left out */
	if (f->only_visible_to)
		qb_add(&q,
		       "j.task_ident NOT IN (SELECT ident FROM tasks WHERE client_root = j.client_root"
		       " AND public = 0 AND created_user != ?)",
		       f->only_visible_to);
	qb_list_opts(&q, pg, "j.", "ident", &o);
	return store_list_text(st, JOB_JSON, JOB_FROM, &q, o.order, pg, out);
}

enum rcs_err store_job_visible(struct store *st, const char *client_root, const char *ident,
			       const char *user)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	store_lock(st);
	err = store_prepare(st,
			    "SELECT t.ident IS NULL OR t.public = 1 OR t.created_user = ?3 FROM jobs j"
			    " LEFT JOIN tasks t ON t.ident = j.task_ident"
			    " WHERE j.ident = ?1 AND j.client_root = ?2",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	bind_text(s, 2, client_root);
	bind_text(s, 3, user);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		err = sqlite3_column_int(s, 0) ? RCS_OK : RCS_ERR_NOTFOUND;
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job visible");
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_job_move(struct store *st, const struct job_move *m, enum store_move *result)
{
	sqlite3_stmt *s = NULL;
	enum job_status cur = JS_INITIAL;
	long long last_seq = 0, n_history = 0;
	char owner_root[UUID_STR_LEN], owner_dev[UUID_STR_LEN];
	bool notify = false;
	enum rcs_err err;
	int rc;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_prepare(st,
			    "SELECT status, last_seq, n_history, client_root, entity_ident,"
			    " (mail_list != '[]' AND status_list != '[]') OR"
			    " (task_mail_list != '[]' AND task_status_list != '[]') FROM jobs"
			    " WHERE ident = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, m->ident);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "job move");
		goto out;
	}
	if (!status_parse(col_text(s, 0), &cur)) {
		err = RCS_ERR_INTERNAL;
		goto out;
	}
	if (m->prev)
		*m->prev = cur;
	last_seq = sqlite3_column_int64(s, 1);
	n_history = sqlite3_column_int64(s, 2);
	snprintf(owner_root, sizeof(owner_root), "%s", col_text(s, 3));
	snprintf(owner_dev, sizeof(owner_dev), "%s", col_text(s, 4));
	notify = sqlite3_column_int(s, 5) != 0; /* any notification list at all */
	store_release(st, s);
	s = NULL;
	if ((m->client_root && strcmp(m->client_root, owner_root) != 0) ||
	    (m->entity_ident && strcmp(m->entity_ident, owner_dev) != 0)) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	if (m->seq > 0 && m->seq <= last_seq) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	if (status_is_terminal(cur)) {
		if (m->seq > 0 && (cur == JS_CANCELLED || cur == JS_EXPIRED)) {
			/* what the device said after the coordinator ended the job */
			err = store_history_add(st, m->ident, n_history + 1, status_name(m->to),
						m->now, m->response,
						m->set_response_time ? m->now : 0, m->seq);
			if (err == RCS_OK) {
				char seq[32];
				snprintf(seq, sizeof(seq), "%lld", m->seq);
				err = store_write(st,
						  "UPDATE jobs SET n_history = n_history + 1,"
						  " last_seq = CAST(? AS INTEGER) WHERE ident = ?",
						  NULL, 2, seq, m->ident);
			}
			*result = STORE_MOVE_KEPT;
		} else {
			*result = m->seq > 0 ? STORE_MOVE_DUPLICATE : STORE_MOVE_TERMINAL;
		}
		goto out;
	}
	if (!status_can_move(cur, m->to)) {
		*result = STORE_MOVE_DUPLICATE;
		goto out;
	}
	err = store_prepare(st,
			    "UPDATE jobs SET status = ?1, update_at = ?2,"
			    " response = CASE WHEN ?3 IS NULL AND NOT ?7 THEN response ELSE ?3 END,"
			    " response_time = CASE WHEN ?4 THEN ?2 ELSE response_time END,"
			    " last_seq = max(last_seq, ?5), n_history = n_history + 1,"
			    " sent_at = CASE WHEN ?8 THEN ?2 ELSE sent_at END, sends = sends + ?8"
			    " WHERE ident = ?6",
			    &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, status_name(m->to));
	sqlite3_bind_int64(s, 2, m->now);
	bind_text(s, 3, m->response);
	sqlite3_bind_int(s, 4, m->set_response_time);
	sqlite3_bind_int64(s, 5, m->seq);
	bind_text(s, 6, m->ident);
	sqlite3_bind_int(s, 7, m->replace_response);
	sqlite3_bind_int(s, 8, m->mark_sent);
	err = store_rc(st->db, sqlite3_step(s), "job move");
	if (err != RCS_OK)
		goto out;
	store_release(st, s);
	s = NULL;
	/* the history item keeps the response the job had at that moment */
	err = store_prepare(st,
			    "INSERT INTO job_history(job_ident, n, status, at, response,"
			    " response_time, seq) SELECT ident, n_history, status, update_at,"
			    " response, response_time, ? FROM jobs WHERE ident = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, m->seq);
	bind_text(s, 2, m->ident);
	err = store_rc(st->db, sqlite3_step(s), "history add");
	if (err == RCS_OK)
		err =
		    notify ? store_notify_record(st, m->ident, status_name(m->to), m->now) : RCS_OK;
	*result = STORE_MOVE_APPLIED;
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

/* ---- notifications ---- */

static const struct col_map notification_cols[] = {
    {"address", COL_STR},    {"status", COL_STR},  {"state", COL_STR},      {"attempts", COL_INT},
    {"created_at", COL_INT}, {"sent_at", COL_INT}, {"last_error", COL_STR}, {NULL, COL_STR},
};

static json_object *row_notification(sqlite3_stmt *s)
{
	return row_map(s, notification_cols);
}

enum rcs_err store_job_notifications(struct store *st, const char *client_root, const char *ident,
				     const struct store_page *pg, json_object **out)
{
	struct qb q = {.n = 0};
	json_object *job = NULL;
	enum rcs_err err;

	err = store_job_get(st, client_root, ident, &job);
	json_object_put(job);
	if (err != RCS_OK)
		return err;
	q.where[0] = '\0';
	qb_add(&q, "job_ident = ?", ident);
	return store_list(st, "address, status, state, attempts, created_at, sent_at, last_error",
			  "notifications", &q, "id", pg, row_notification, out);
}

/* ---- groups ---- */

#define GROUP_COLS "ident, name, created_user, created_at, task_ident"

static const struct col_map group_cols[] = {
    {"ident", COL_STR},      {"name", COL_STR},       {"created_user", COL_STR},
    {"created_at", COL_INT}, {"task_ident", COL_STR}, {NULL, COL_STR},
};

static json_object *row_group(sqlite3_stmt *s)
{
	return row_map(s, group_cols);
}

/* A group of a task the user may not see (not public, someone else's) is left out, like
 * the task and its jobs. */
#define GROUP_HIDDEN_FROM(user_param)                                                              \
	"EXISTS (SELECT 1 FROM tasks t WHERE t.ident = groups.task_ident"                          \
	" AND t.client_root = groups.client_root AND t.public = 0 AND t.created_user "             \
	"!= " user_param ")"

enum rcs_err store_group_get(struct store *st, const char *client_root, const char *ident,
			     const char *only_visible_to, json_object **out)
{
	json_object *g = NULL, *statuses = NULL;
	sqlite3_stmt *s = NULL;
	long long total = 0;
	enum rcs_err err;
	int rc;

	*out = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT " GROUP_COLS " FROM groups WHERE ident = ?1 AND client_root = ?2"
			  " AND (?3 IS NULL OR NOT " GROUP_HIDDEN_FROM("?3") ")",
			  &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	bind_text(s, 2, client_root);
	bind_text(s, 3, only_visible_to);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		g = row_group(s);
	else
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "group get");
	store_release(st, s);
	s = NULL;
	if (err != RCS_OK)
		goto out;
	err =
	    store_prepare(st,
			  "SELECT status, count(*) FROM jobs WHERE group_ident = ? GROUP BY status"
			  " ORDER BY status",
			  &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, ident);
	statuses = json_object_new_object();
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		long long n = sqlite3_column_int64(s, 1);
		total += n;
		json_object_object_add(statuses, col_text(s, 0), json_object_new_int64(n));
	}
	err = store_rc(st->db, rc, "group statuses");
	if (err != RCS_OK)
		goto out;
	json_object_object_add(g, "total", json_object_new_int64(total));
	json_object_object_add(g, "statuses", statuses);
	statuses = NULL;
	*out = g;
	g = NULL;
out:
	store_release(st, s);
	store_unlock(st);
	if (g)
		json_object_put(g);
	if (statuses)
		json_object_put(statuses);
	return err;
}

enum rcs_err store_groups_list(struct store *st, const char *client_root,
			       const char *only_visible_to, const struct store_page *pg,
			       json_object **out)
{
	struct qb q = {.n = 0};
	struct qb_opts o;

	q.where[0] = '\0';
	qb_add(&q, "client_root = ?", client_root);
	if (only_visible_to)
		qb_add(&q, "NOT " GROUP_HIDDEN_FROM("?"), only_visible_to);
	qb_list_opts(&q, pg, "", "ident", &o);
	return store_list(st, GROUP_COLS, "groups", &q, o.order, pg, row_group, out);
}

/* ---- the transport's and scheduler's queries ---- */

int64_t store_job_expiry(int64_t created_at, int64_t scheduled_time, int64_t ttl)
{
	int64_t from = scheduled_time > created_at ? scheduled_time : created_at;

	if (ttl <= 0)
		return 0;
	/* scheduled_time may be up to INT64_MAX - 1: saturate (in the protocol's range,
	 * which ends at INT64_MAX - 1) rather than overflow */
	return from > INT64_MAX - 1 - ttl ? INT64_MAX - 1 : from + ttl;
}

enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				bool online, json_object *tags, const char *agent_version,
				int64_t now, bool *came_online)
{
	json_object *dev = NULL, *was = NULL;
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*came_online = false;
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_device_get(st, client_root, entity_ident, &dev);
	if (err != RCS_OK)
		goto out;
	json_object_object_get_ex(dev, "online", &was);
	*came_online = online && !json_object_get_boolean(was);
	err = store_prepare(st,
			    "UPDATE devices SET online = ?1, last_seen = ?2,"
			    " agent_version = coalesce(?3, agent_version),"
			    " reported_tags = coalesce(?4, reported_tags)"
			    " WHERE entity_ident = ?5 AND client_root = ?6",
			    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int(s, 1, online);
	sqlite3_bind_int64(s, 2, now);
	bind_text(s, 3, agent_version);
	bind_json(s, 4, tags, NULL);
	bind_text(s, 5, entity_ident);
	bind_text(s, 6, client_root);
	err = store_rc(st->db, sqlite3_step(s), "device state");
	if (err == RCS_OK && tags)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 1);
out:
	store_release(st, s);
	json_object_put(dev);
	return store_sp_end(st, err);
}

/* Runs a query returning one text column, bound by (text, int64, int64) params. */
static enum rcs_err store_idents(struct store *st, const char *sql, const char *p1, int64_t p2,
				 int64_t p3, size_t limit, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st, sql, &s);
	if (err != RCS_OK)
		goto out;
	bind_text(s, 1, p1);
	sqlite3_bind_int64(s, 2, p2);
	sqlite3_bind_int64(s, 3, p3);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)limit);
	err = store_rows(st, s, row_first_str, limit, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_jobs_ready(struct store *st, const char *entity_ident, int64_t now, size_t limit,
			      json_object **out)
{
	if (entity_ident)
		return store_idents(st,
				    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
				    " j.entity_ident AND d.client_root = j.client_root"
				    " WHERE j.entity_ident = ?1 AND j.status = 'pending' AND"
				    " (j.scheduled_time IS NULL OR j.scheduled_time <= ?2) AND"
				    " d.online = 1 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
				    entity_ident, now, 0, limit, out);
	/* INDEXED BY: without it SQLite walks every job ever made in ident order (the
	 * ORDER BY), 80 ms under the store's lock at 300,000 jobs; the partial index
	 * holds only the pending ones */
	return store_idents(st,
			    "SELECT j.ident FROM jobs j INDEXED BY jobs_pending JOIN devices d ON"
			    " d.entity_ident = j.entity_ident AND d.client_root = j.client_root"
			    " WHERE j.status = 'pending' AND (j.scheduled_time IS NULL OR"
			    " j.scheduled_time <= ?2) AND d.online = 1 AND ?1 IS NULL AND ?3 = ?3"
			    " ORDER BY j.ident LIMIT ?4",
			    NULL, now, 0, limit, out);
}

enum rcs_err store_jobs_unacked(struct store *st, const char *entity_ident, size_t limit,
				json_object **out)
{
	if (entity_ident)
		return store_idents(
		    st,
		    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
		    " j.entity_ident AND d.client_root = j.client_root"
		    " WHERE j.entity_ident = ?1 AND j.status = 'transmited' AND"
		    " d.online = 1 AND ?2 = ?2 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
		    entity_ident, 0, 0, limit, out);
	return store_idents(st,
			    "SELECT j.ident FROM jobs j INDEXED BY jobs_unacked JOIN devices d ON"
			    " d.entity_ident = j.entity_ident AND d.client_root = j.client_root"
			    " WHERE j.status = 'transmited' AND d.online = 1 AND ?1 IS NULL AND"
			    " ?2 = ?2 AND ?3 = ?3 ORDER BY j.ident LIMIT ?4",
			    NULL, 0, 0, limit, out);
}

enum rcs_err store_jobs_stale(struct store *st, int64_t now, int64_t after, size_t limit,
			      json_object **out)
{
	return store_idents(st,
			    "SELECT j.ident FROM jobs j JOIN devices d ON d.entity_ident ="
			    " j.entity_ident AND d.client_root = j.client_root"
			    " WHERE " JOBS_INFLIGHT
			    " AND j.update_at <= ?2 - ?3 AND d.online = 1 AND"
			    " coalesce(max(j.sent_at, j.update_at), j.update_at) +"
			    " ?3 * (1 << min(max(j.sends - 1, 0), 5)) <= ?2 AND ?1 IS NULL"
			    " ORDER BY j.update_at LIMIT ?4",
			    NULL, now, after, limit, out);
}

enum rcs_err store_jobs_clock_back(struct store *st, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(st,
			   "UPDATE jobs SET update_at = min(update_at, CAST(?1 AS INTEGER)),"
			   " sent_at = min(sent_at, CAST(?1 AS INTEGER))"
			   " WHERE status IN ('transmited', 'edge_transmitted', 'edge_started',"
			   " 'edge_running') AND (update_at > CAST(?1 AS INTEGER) OR"
			   " sent_at > CAST(?1 AS INTEGER))",
			   NULL, 1, ts);
}

enum rcs_err store_jobs_expired(struct store *st, int64_t now, size_t limit, json_object **out)
{
	return store_idents(st,
			    "SELECT ident FROM jobs WHERE expires_at IS NOT NULL AND"
			    " status IN ('pending', 'transmited') AND expires_at <= ?2 AND"
			    " ?1 IS NULL AND ?3 = ?3 ORDER BY expires_at LIMIT ?4",
			    NULL, now, 0, limit, out);
}

enum rcs_err store_job_mark_sent(struct store *st, const char *ident, int64_t now)
{
	char ts[32];

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	return store_write(st, "UPDATE jobs SET sent_at = ?, sends = sends + 1 WHERE ident = ?",
			   NULL, 2, ts, ident);
}

enum rcs_err store_next_wakeup(struct store *st, int64_t now, int64_t *next)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*next = 0;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT min(t) FROM (SELECT min(scheduled_time) AS t FROM jobs"
			  " WHERE status = 'pending' AND scheduled_time > ?1"
			  " UNION ALL SELECT min(expires_at) FROM jobs WHERE expires_at IS NOT NULL"
			  " AND status IN ('pending', 'transmited'))",
			  &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, now);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
		*next = sqlite3_column_int64(s, 0);
	err = store_rc(st->db, rc, "next wakeup");
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

/* ---- the notifier's queries ---- */

static const struct col_map notification_due_cols[] = {
    {"id", COL_INT},      {"job_ident", COL_STR}, {"client_root", COL_STR}, {"status", COL_STR},
    {"address", COL_STR}, {"attempts", COL_INT},  {"created_at", COL_INT},  {NULL, COL_STR},
};

static json_object *row_notification_due(sqlite3_stmt *s)
{
	return row_map(s, notification_due_cols);
}

enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT id, job_ident, client_root, status, address, attempts, created_at"
			  " FROM notifications WHERE state = 'queued' AND next_at <= ?"
			  " ORDER BY next_at, id LIMIT ?",
			  &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, now);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)limit);
	err = store_rows(st, s, row_notification_due, limit, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notification_next(struct store *st, int64_t *next)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*next = 0;
	store_lock(st);
	err =
	    store_prepare(st, "SELECT min(next_at) FROM notifications WHERE state = 'queued'", &s);
	if (err == RCS_OK && sqlite3_step(s) == SQLITE_ROW &&
	    sqlite3_column_type(s, 0) != SQLITE_NULL)
		*next = sqlite3_column_int64(s, 0);
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notification_update(struct store *st, long long id, const char *state,
				       int64_t now, int64_t next_at, const char *error)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	store_lock(st);
	err = store_prepare(st,
			    "UPDATE notifications SET state = ?1, attempts = attempts +"
			    " (CASE WHEN ?1 = 'suppressed' THEN 0 ELSE 1 END),"
			    " sent_at = CASE WHEN ?1 = 'sent' THEN ?2 ELSE sent_at END,"
			    " next_at = ?3, last_error = ?4 WHERE id = ?5",
			    &s);
	if (err == RCS_OK) {
		bind_text(s, 1, state);
		sqlite3_bind_int64(s, 2, now);
		sqlite3_bind_int64(s, 3, next_at);
		bind_text(s, 4, error);
		sqlite3_bind_int64(s, 5, id);
		err = store_rc(st->db, sqlite3_step(s), "notification update");
	}
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_notifications_sent_since(struct store *st, const char *client_root,
					    int64_t since, long long *n)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*n = 0;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT count(*) FROM notifications WHERE client_root = ? AND"
			    " state = 'sent' AND sent_at >= ?",
			    &s);
	if (err == RCS_OK) {
		bind_text(s, 1, client_root);
		sqlite3_bind_int64(s, 2, since);
		if (sqlite3_step(s) == SQLITE_ROW)
			*n = sqlite3_column_int64(s, 0);
	}
	store_release(st, s);
	store_unlock(st);
	return err;
}
