/*
 * store_schema.c - the store's schema, written once for both engines: the list of migrations
 * in the common SQL of the backend seam (store_int.h), which SQLite runs as it is written and
 * store_pg.c translates as it does every statement (INTEGER to BIGINT, the column user),
 * plus, for a schema only, SQLite's rowid key (INTEGER PRIMARY KEY) to an identity column,
 * BLOB to TEXT, and WITHOUT ROWID dropped. What the engines do differently (SQLite's
 * triggers, PostgreSQL's trigger functions and NOTIFY) is an engine's own text that runs
 * after the common one. Migration N is the same on both engines; an engine's schema version
 * (SQLite's user_version by common/db.c, PostgreSQL's table schema_version) counts up to the
 * last migration that has text for it. docs/architecture.md, "The store".
 */
#include "store_int.h"

const struct store_migration store_migrations[] = {
    /* 1: the first schema */
    {.sql =
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
	 "CREATE INDEX jobs_pending ON jobs(entity_ident, scheduled_time) WHERE status = "
	 "'pending';\n"
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
	 "CREATE INDEX notifications_tenant ON notifications(client_root, state, sent_at);\n"},
    /*
     * 2: cheaper status changes. jobs_sched holds only jobs with a scheduled_time
     * (the queries that use it compare scheduled_time, so a job sent at once
     * never enters it); jobs_inflight's condition is a chain of comparisons
     * instead of an IN list, which SQLite evaluated with two temporary tables
     * on every UPDATE of a job's status.
     */
    {.sql = "DROP INDEX jobs_sched;\n"
	    "CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE status = 'pending' AND"
	    " scheduled_time IS NOT NULL;\n"
	    "DROP INDEX jobs_inflight;\n"
	    "CREATE INDEX jobs_inflight ON jobs(update_at) WHERE " JOBS_INFLIGHT ";\n"},
    /*
     * 3: webhooks (docs/api.md, "Webhooks"), their outbox of deliveries with every attempt,
     * and the audit log (docs/api.md, "Audit"). A delivery's subject is the job (or group)
     * it is about: deliveries of one webhook and subject go out in id order. Audit records
     * are never changed: SQLite's triggers RAISE, PostgreSQL's run a function that does.
     */
    {.sql =
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
	 "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_at) WHERE state = "
	 "'queued';\n"
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
	 "CREATE INDEX audit_tenant ON audit(client_root, id);\n",
     .sqlite = "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit"
	       " BEGIN SELECT RAISE(ABORT, 'audit records are never changed'); END;\n"
	       "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit"
	       " BEGIN SELECT RAISE(ABORT, 'audit records are never deleted'); END;\n",
     .postgres = "CREATE FUNCTION audit_unchanged() RETURNS trigger LANGUAGE plpgsql AS"
		 " $$BEGIN RAISE EXCEPTION 'audit records are never changed or deleted'; END$$;\n"
		 "CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit"
		 " FOR EACH ROW EXECUTE FUNCTION audit_unchanged();\n"},
    /*
     * 4: group sends (docs/api.md "Rollouts"): a group's status, reason, settings (rollout,
     * abort, window, retry as typed columns; factors in thousandths, percentages in
     * hundredths), tallies of its devices' latest attempts, the rollout's token bucket and,
     * for continuous tag sends, what each later job is made of; a job's attempt, the job it
     * retries, the device's cause of an edge_error, whether it waits for its group's release
     * (held), its place in the release order and when it may be released. A task's default
     * retry. On an empty table the tallies are 0.
     */
    {.sql =
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
	 "UPDATE groups SET n_open = (SELECT count(*) FROM jobs j WHERE j.group_ident = "
	 "groups.ident"
	 " AND j.status IN " JOBS_OPEN_LIST "), n_finished = (SELECT count(*) FROM jobs j WHERE"
	 " j.group_ident = groups.ident AND j.status NOT IN " JOBS_OPEN_LIST "), n_failed ="
	 " (SELECT count(*) FROM jobs j WHERE j.group_ident = groups.ident AND j.status IN"
	 " ('edge_error', 'expired')), n_succeeded = (SELECT count(*) FROM jobs j WHERE"
	 " j.group_ident = groups.ident AND j.status = 'terminated');\n"
	 "UPDATE groups SET status = 'completed' WHERE n_open = 0;\n"},
    /* 5: claims of once-only work by several coordinators (docs/architecture.md "Claims"):
     * the node that claimed the row and until when (Unix s); the coordinators running (nodes,
     * their last sign of life). On PostgreSQL a statement that creates due work (a job, a
     * notification, a webhook delivery, a group made or resumed) NOTIFYs channel rcs_work at
     * its commit, which wakes every coordinator (the backend's listen). */
    {.sql = "ALTER TABLE jobs ADD COLUMN claimed_by TEXT;\n"
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
     .postgres =
	 "CREATE FUNCTION rcs_work_notify() RETURNS trigger LANGUAGE plpgsql AS"
	 " $$BEGIN PERFORM pg_notify('rcs_work', TG_TABLE_NAME); RETURN NULL; END$$;\n"
	 "CREATE TRIGGER jobs_work AFTER INSERT ON jobs FOR EACH STATEMENT"
	 " EXECUTE FUNCTION rcs_work_notify();\n"
	 "CREATE TRIGGER notifications_work AFTER INSERT ON notifications FOR EACH STATEMENT"
	 " EXECUTE FUNCTION rcs_work_notify();\n"
	 "CREATE TRIGGER webhook_deliveries_work AFTER INSERT ON webhook_deliveries"
	 " FOR EACH STATEMENT EXECUTE FUNCTION rcs_work_notify();\n"
	 "CREATE TRIGGER groups_work AFTER INSERT OR UPDATE OF status ON groups"
	 " FOR EACH STATEMENT EXECUTE FUNCTION rcs_work_notify();\n"},
    /* 6, PostgreSQL's only: e-mails and webhook deliveries are queued by INSERT ... SELECT on
     * every status change, most of which insert nothing: their triggers NOTIFY only when the
     * statement inserted rows (its transition table), so a status change wakes no
     * coordinator for nothing. Safe to run again. */
    {.postgres =
	 "CREATE OR REPLACE FUNCTION rcs_work_notify_rows() RETURNS trigger LANGUAGE plpgsql AS"
	 " $$BEGIN IF EXISTS (SELECT 1 FROM inserted) THEN PERFORM pg_notify('rcs_work',"
	 " TG_TABLE_NAME); END IF; RETURN NULL; END$$;\n"
	 "DROP TRIGGER IF EXISTS notifications_work ON notifications;\n"
	 "CREATE TRIGGER notifications_work AFTER INSERT ON notifications REFERENCING NEW TABLE"
	 " AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rcs_work_notify_rows();\n"
	 "DROP TRIGGER IF EXISTS webhook_deliveries_work ON webhook_deliveries;\n"
	 "CREATE TRIGGER webhook_deliveries_work AFTER INSERT ON webhook_deliveries REFERENCING"
	 " NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rcs_work_notify_rows();\n"},
    /* 7: the ts of the last state message applied for a device (its connection's start, the
     * device's clock): an offline state older than it is a Last Will or a retained copy of
     * an earlier connection, and is not applied (docs/mqtt.md, "Device state"). */
    {.sql = "ALTER TABLE devices ADD COLUMN state_ts INTEGER;\n"},
    /* 8: the devices a group send left out, and why (docs/api.md "Bulk sends and groups") */
    {.sql = "CREATE TABLE group_rejected(\n"
	    "  group_ident TEXT NOT NULL REFERENCES groups(ident),\n"
	    "  entity_ident TEXT NOT NULL,\n"
	    "  code TEXT NOT NULL,\n"
	    "  message TEXT NOT NULL,\n"
	    "  PRIMARY KEY(group_ident, entity_ident)\n"
	    ") WITHOUT ROWID;\n"},
    /* 9: artifacts (docs/api.md, "Artifacts"): a tenant's files named by their SHA-256. On
     * SQLite the bytes are files (blob_id NULL); on PostgreSQL they are chunks of at most
     * 1 MiB (artifact_chunks, BYTEA: the engine's own text, as the common text's BLOB would
     * be TEXT) under the blob_id of the upload that wrote them, and an upload not yet ended
     * has a row of artifact_uploads (its coordinator, its start) until its record is made. */
    {.sql = "CREATE TABLE artifacts(\n"
	    "  client_root TEXT NOT NULL REFERENCES tenants(client_root),\n"
	    "  sha256 TEXT NOT NULL,\n"
	    "  size INTEGER NOT NULL,\n"
	    "  name TEXT NOT NULL,\n"
	    "  created_at INTEGER NOT NULL,\n"
	    "  created_user TEXT NOT NULL,\n"
	    "  blob_id TEXT,\n"
	    "  PRIMARY KEY(client_root, sha256)\n"
	    ") WITHOUT ROWID;\n"
	    "CREATE INDEX artifacts_created ON artifacts(client_root, created_at);\n",
     .postgres = "CREATE TABLE artifact_chunks(\n"
		 "  blob_id TEXT NOT NULL,\n"
		 "  n BIGINT NOT NULL,\n"
		 "  data BYTEA NOT NULL,\n"
		 "  PRIMARY KEY(blob_id, n)\n"
		 ");\n"
		 "CREATE TABLE artifact_uploads(\n"
		 "  blob_id TEXT PRIMARY KEY,\n"
		 "  node TEXT NOT NULL,\n"
		 "  started_at BIGINT NOT NULL\n"
		 ");\n"},
    /* 10: the webhook sender's claim walks one webhook's due deliveries in (next_at, id)
     * order and stops at its limit (store_webhooks_due), instead of reading the whole queue
     * at every fill (docs/api.md, "Webhooks") */
    {.sql = "DROP INDEX webhook_deliveries_due;\n"
	    "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(webhook_ident, next_at, id)"
	    " WHERE state = 'queued';\n"},
    /* 11: tasks with artifacts (docs/api.md, "Tasks" and "Artifacts"): a task's and each
     * version's artifacts (the task: {"<key>": {"ident","size","name"}}, as its record shows
     * them; a version: {"<key>": {"sha256","size"}}, what manifest v2 signs and the envelope
     * carries; NULL: none), release (NULL: none) and download_timeout; task_artifacts, a row
     * per version and key, for what pins an artifact (delete refused, used_by); the secrets
     * artifact tokens are made with (docs/mqtt.md, "Artifact token": the newest signs, every
     * one verifies); the bytes served per job and artifact (the cap of 3x, the audit once);
     * a job's last download progress (docs/api.md "Jobs"). */
    {.sql = "ALTER TABLE tasks ADD COLUMN artifacts TEXT;\n"
	    "ALTER TABLE tasks ADD COLUMN release TEXT;\n"
	    "ALTER TABLE tasks ADD COLUMN download_timeout INTEGER NOT NULL DEFAULT 86400;\n"
	    "ALTER TABLE task_versions ADD COLUMN artifacts TEXT;\n"
	    "ALTER TABLE task_versions ADD COLUMN release TEXT;\n"
	    "ALTER TABLE task_versions ADD COLUMN download_timeout INTEGER NOT NULL DEFAULT"
	    " 86400;\n"
	    "CREATE TABLE task_artifacts(\n"
	    "  task_ident TEXT NOT NULL,\n"
	    "  version INTEGER NOT NULL,\n"
	    "  name TEXT NOT NULL,\n"
	    "  client_root TEXT NOT NULL,\n"
	    "  sha256 TEXT NOT NULL,\n"
	    "  size INTEGER NOT NULL,\n"
	    "  PRIMARY KEY(task_ident, version, name)\n"
	    ") WITHOUT ROWID;\n"
	    "CREATE INDEX task_artifacts_sha ON task_artifacts(client_root, sha256);\n"
	    "CREATE TABLE artifact_secrets(\n"
	    "  id INTEGER PRIMARY KEY,\n"
	    "  secret TEXT NOT NULL,\n"
	    "  created_at INTEGER NOT NULL\n"
	    ");\n"
	    "ALTER TABLE jobs ADD COLUMN progress_done INTEGER;\n"
	    "ALTER TABLE jobs ADD COLUMN progress_total INTEGER;\n"
	    "CREATE TABLE job_downloads(\n"
	    "  job_ident TEXT NOT NULL,\n"
	    "  sha256 TEXT NOT NULL,\n"
	    "  bytes INTEGER NOT NULL DEFAULT 0,\n"
	    "  PRIMARY KEY(job_ident, sha256)\n"
	    ") WITHOUT ROWID;\n"},
    /* 12: what a device says it runs, from its inventory_command: a JSON object of strings,
     * NULL until a state message brought one (docs/mqtt.md "Device state", docs/api.md
     * "Devices") */
    {.sql = "ALTER TABLE devices ADD COLUMN attributes TEXT;\n"},
    /* 13: jobs that span a reboot (docs/api.md "Jobs"): a job's phase (NULL: none) and each
     * history item's; after a "rebooting" report, the seconds its device has to come back and
     * when they run out (NULL: no deadline), which the scheduler looks for */
    {.sql = "ALTER TABLE jobs ADD COLUMN phase TEXT;\n"
	    "ALTER TABLE jobs ADD COLUMN reboot_within INTEGER;\n"
	    "ALTER TABLE jobs ADD COLUMN reboot_deadline INTEGER;\n"
	    "ALTER TABLE job_history ADD COLUMN phase TEXT;\n"
	    "CREATE INDEX jobs_reboot ON jobs(reboot_deadline)"
	    " WHERE reboot_deadline IS NOT NULL;\n"},
    /* 14: a group's download limits, given by its bulk send (docs/api.md "Download
     * limits"): the devices downloading at once and the bytes per second they share;
     * NULL: none */
    {.sql = "ALTER TABLE groups ADD COLUMN dl_max INTEGER;\n"
	    "ALTER TABLE groups ADD COLUMN dl_rate INTEGER;\n"},
    /* 15, PostgreSQL's only: status moves as HOT updates (docs/coordinator.md, "The jobs table
     * on PostgreSQL"). No index of jobs names a column that a move on the device changes
     * (status, update_at): the indexes of the transport's and scheduler's queries are partial
     * on stage, which the engine computes from the status and which changes on a job's first
     * and last moves only (store_int.h, JOBS_STAGE_*); jobs_inflight and the new jobs_stale
     * hold the jobs on their way by ident and by the time of their last send. Pages of jobs
     * are filled to 70 %, which leaves each row's next versions room on its own page. */
    {.postgres =
	 "ALTER TABLE jobs ADD COLUMN stage SMALLINT GENERATED ALWAYS AS (CASE WHEN status IN"
	 " ('initial', 'pending') THEN 0 WHEN status IN ('transmited', 'edge_transmitted',"
	 " 'edge_started', 'edge_running') THEN 1 ELSE 2 END) STORED;\n"
	 "DROP INDEX jobs_status;\n"
	 "CREATE INDEX jobs_status ON jobs(client_root, stage, ident);\n"
	 "DROP INDEX jobs_pending;\n"
	 "CREATE INDEX jobs_pending ON jobs(entity_ident, scheduled_time) WHERE stage = 0;\n"
	 "DROP INDEX jobs_sched;\n"
	 "CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE stage = 0 AND scheduled_time IS"
	 " NOT NULL;\n"
	 "DROP INDEX jobs_unacked;\n"
	 "CREATE INDEX jobs_unacked ON jobs(entity_ident) WHERE stage = 1;\n"
	 "DROP INDEX jobs_inflight;\n"
	 "CREATE INDEX jobs_inflight ON jobs(ident) WHERE stage = 1;\n"
	 "CREATE INDEX jobs_stale ON jobs((coalesce(sent_at, 0))) WHERE stage = 1;\n"
	 "DROP INDEX jobs_ttl;\n"
	 "CREATE INDEX jobs_ttl ON jobs(expires_at) WHERE expires_at IS NOT NULL AND stage < 2;\n"
	 "ALTER TABLE jobs SET (fillfactor = 70);\n"},
    /* 16, PostgreSQL's only: the jobs a look at the due jobs can find, in ident order
     * (store_queues.c, JOBS_READY_ALL). Without it the look walks jobs_pkey in ident order
     * and passes over every job not waiting, all sent and ended jobs included, each second
     * while a send is on (docs/coordinator.md "Sends as sets"). stage and held change on a
     * job's first and last moves and on its release only, so the moves on the device stay
     * HOT updates (migration 15). */
    {.postgres = "CREATE INDEX jobs_due ON jobs(ident) WHERE stage = 0 AND held = 0;\n"},
    /* 17, PostgreSQL's only: no foreign keys on the rows a send and its reports write by
     * the thousand (a job's tenant, group and task version; a history item's job). Every
     * such row is written by the store's own statements from rows of the same transaction,
     * and no tenant, group, task version or job is ever deleted; PostgreSQL checks a
     * foreign key one row at a time, which was a fifth of its work in a bulk send.
     * SQLite keeps them, and every suite runs on both engines (docs/coordinator.md, "The
     * jobs table on PostgreSQL"). */
    {.postgres = "ALTER TABLE job_history DROP CONSTRAINT IF EXISTS job_history_job_ident_fkey;\n"
		 "ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_client_root_fkey;\n"
		 "ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_group_ident_fkey;\n"
		 "ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_task_ident_task_version_fkey;\n"},
};

const size_t store_n_migrations = sizeof(store_migrations) / sizeof(store_migrations[0]);

size_t store_migrations_of(enum store_dialect d)
{
	size_t n = store_n_migrations;

	while (n > 0 && store_migrations[n - 1].sql == NULL &&
	       (d == STORE_DIALECT_POSTGRES ? store_migrations[n - 1].postgres
					    : store_migrations[n - 1].sqlite) == NULL)
		n--;
	return n;
}
