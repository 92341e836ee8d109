/* Unit tests of the coordinator's store (coordinator/store*.c) on a real SQLite file. */
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

#include "manifest.h"
#include "jsonu.h"
#include "render.h"
#include "lifecycle.h"
#include "rollout.h"
#include "store.h"
#include "store_devices.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_keys.h"
#include "store_queues.h"
#include "store_tasks.h"
#include "store_webhooks.h"
#include "store_int.h" /* store_webhook_job_event */
#include "store_test_db.h"

struct fixture {
	char dir[64];
	char path[128];
	struct store *st;
	char root[UUID_STR_LEN];
	char task[UUID_STR_LEN];
	char dev[3][UUID_STR_LEN];
};

static const char *const SCRIPT = "return rcs.variables.message";

static json_object *parse(const char *text)
{
	return json_tokener_parse(text);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct task_write t;
	char sha[SHA256_HEX_LEN];

	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-store-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_true(store_test_db(f->dir, f->path, sizeof(f->path)));
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(uuid_v7(f->root), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, f->root, 100), RCS_OK);
	assert_int_equal(store_script_put(f->st, "", "echo", SCRIPT, strlen(SCRIPT), 100, NULL),
			 RCS_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(uuid_v7(f->dev[i]), RCS_OK);
		assert_int_equal(
		    store_device_insert(f->st, f->root, f->dev[i], "d", "[\"lab\"]", 100), RCS_OK);
	}

	sha256_hex(SCRIPT, strlen(SCRIPT), sha);
	memset(&t, 0, sizeof(t));
	assert_int_equal(uuid_v7(f->task), RCS_OK);
	t.ident = f->task;
	t.client_root = f->root;
	t.version = 1;
	t.name = "Echo";
	t.script = "echo";
	t.script_src = SCRIPT;
	t.script_len = strlen(SCRIPT);
	t.script_sha256 = sha;
	t.variables_info = "{\"message\":{\"type\":\"string\"}}";
	t.constants = "{}";
	t.comment = "";
	t.active = true;
	t.is_public = true;
	t.timeout = 300;
	t.created_user = "alice";
	t.created_at = t.update_at = 100;
	t.mail_list = "[]";
	t.status_list = "[]";
	assert_int_equal(store_task_put(f->st, &t, true), RCS_OK);
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

static const char *jstr(json_object *o, const char *k)
{
	json_object *v = NULL;
	json_object_object_get_ex(o, k, &v);
	return json_object_get_string(v);
}

static int64_t jint(json_object *o, const char *k)
{
	json_object *v = NULL;
	json_object_object_get_ex(o, k, &v);
	return json_object_get_int64(v);
}

/* What a render wrote, parsed. */
static json_object *rendered(struct render *w, struct buf *text)
{
	json_object *o;

	assert_int_equal(render_end(w), RCS_OK);
	o = json_tokener_parse(text->data);
	assert_non_null(o);
	buf_free(text);
	return o;
}

/* store_jobs_list's page as the API answers it (render_job_page), parsed; *page NULL on an
 * error. */
static enum rcs_err jobs_page(struct store *st, const char *root, const struct job_filter *jf,
			      const struct store_page *pg, json_object **page)
{
	struct store_job_list l;
	struct render w;
	struct buf text;
	enum rcs_err err;

	*page = NULL;
	err = store_jobs_list(st, root, jf, pg, &l);
	if (err == RCS_OK) {
		buf_init(&text, 1 << 24);
		render_init(&w, &text);
		render_job_page(&w, &l);
		*page = rendered(&w, &text);
		store_job_list_free(&l);
	}
	return err;
}

/* store_job_get's record as the API answers it (render_job), parsed. */
static enum rcs_err job_json(struct store *st, const char *root, const char *ident,
			     json_object **out)
{
	struct job_rec r;
	struct render w;
	struct buf text;
	enum rcs_err err;

	*out = NULL;
	err = store_job_get(st, root, ident, &r);
	if (err == RCS_OK) {
		buf_init(&text, 1 << 24);
		render_init(&w, &text);
		render_job(&w, &r);
		*out = rendered(&w, &text);
		store_job_rec_free(&r);
	}
	return err;
}

/* store_job_history's page as the API answers it (render_history_page), parsed. */
static enum rcs_err history_page(struct store *st, const char *root, const char *ident,
				 const struct store_page *pg, json_object **out)
{
	struct store_history_list l;
	struct job_rec job;
	struct render w;
	struct buf text;
	enum rcs_err err;

	*out = NULL;
	err = store_job_history(st, root, ident, pg, &job, &l);
	if (err == RCS_OK) {
		buf_init(&text, 1 << 24);
		render_init(&w, &text);
		render_history_page(&w, &job, &l);
		*out = rendered(&w, &text);
		store_history_list_free(&l);
		store_job_rec_free(&job);
	}
	return err;
}

/* The groups' page and one group as the API answers them (render_group), parsed. */
static enum rcs_err groups_page(struct store *st, const char *root, const struct store_page *pg,
				json_object **out)
{
	struct store_group_list l;
	struct render w;
	struct buf text;
	enum rcs_err err;

	*out = NULL;
	err = store_groups_list(st, root, NULL, NULL, pg, &l);
	if (err == RCS_OK) {
		buf_init(&text, 1 << 24);
		render_init(&w, &text);
		render_group_page(&w, &l);
		*out = rendered(&w, &text);
		store_group_list_free(&l);
	}
	return err;
}

static enum rcs_err group_json(struct store *st, const char *root, const char *ident,
			       json_object **out)
{
	struct group_rec g;
	struct render w;
	struct buf text;
	enum rcs_err err;

	*out = NULL;
	err = store_group_get(st, root, ident, NULL, &g);
	if (err == RCS_OK) {
		buf_init(&text, 1 << 24);
		render_init(&w, &text);
		render_group(&w, &g);
		*out = rendered(&w, &text);
		store_group_rec_free(&g);
	}
	return err;
}

/* Creates n jobs (one per fixture device, in turn) and returns them in jobs[]; group: in a
 * new group of that name, with settings (may be NULL). */
static void make_group_jobs(struct fixture *f, struct job_new *jobs, size_t n, const char *group,
			    const struct group_settings *settings)
{
	struct job_batch b;
	char gid[UUID_STR_LEN];

	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = f->dev[i % 3];
	}
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Echo";
	if (group) {
		assert_int_equal(uuid_v7(gid), RCS_OK);
		b.group_ident = gid;
		b.group_name = group;
	}
	b.created_user = "alice";
	b.variables = "{\"message\":\"hi\"}";
	b.now = 200;
	b.jobs = jobs;
	b.n = n;
	b.settings = settings;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
}

static void make_jobs(struct fixture *f, struct job_new *jobs, size_t n, const char *group)
{
	make_group_jobs(f, jobs, n, group, NULL);
}

/* One status change with all that follows it (lifecycle_move, no transport), as the
 * coordinator makes it. */
static enum rcs_err move_with(struct fixture *f, const struct job_move *m, enum store_move *res)
{
	struct lifecycle lc = {.st = f->st};

	return lifecycle_move(&lc, m, res, NULL);
}

static enum store_move move(struct fixture *f, const char *job, enum job_status to, long long seq,
			    const char *response)
{
	struct job_move m = {.ident = job,
			     .to = to,
			     .seq = seq,
			     .response = response,
			     .set_response_time = response != NULL,
			     .now = 300};
	enum store_move res = STORE_MOVE_DUPLICATE;

	assert_int_equal(move_with(f, &m, &res), RCS_OK);
	return res;
}

static void test_reopen_and_schema(void **state)
{
	struct fixture *f = *state;
	struct store *again = NULL;
	sqlite3 *db = NULL;

	/* a second connection sees the same data; migrations don't run twice */
	assert_int_equal(store_open(f->path, &again), RCS_OK);
	assert_true(store_tenant_exists(again, f->root));
	store_close(again);
	if (store_test_pg()) {
#ifdef RCS_WITH_POSTGRES
		/* a database from a newer coordinator is refused, not damaged */
		assert_true(store_test_pg_exec(f->path, "UPDATE schema_version SET version = 99"));
		assert_int_not_equal(store_open(f->path, &again), RCS_OK);
		assert_null(again);
		/* from schema 5 (store_test_db.h): migration 6 replaces its triggers (and may run
		 * again) */
		assert_true(store_test_pg_exec(f->path, STORE_TEST_PG_REWIND_TO_5));
		assert_int_equal(store_open(f->path, &again), RCS_OK);
		assert_true(store_tenant_exists(again, f->root));
		store_close(again);
#endif
		return;
	}
	/* a database from a newer coordinator is refused, not damaged */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_int_not_equal(store_open(f->path, &again), RCS_OK);
	assert_null(again);
	/* a database of schema 1 (the first release) is migrated, its data kept */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	{
		/* undo schema 4 (group sends) */
		static const char *const cols[] = {
		    "groups.status", "groups.reason", "groups.task_version", "groups.task_name",
		    "groups.tag", "groups.continuous", "groups.ro_max", "groups.ro_base",
		    "groups.ro_factor", "groups.ro_after", "groups.ab_pct", "groups.ab_min",
		    "groups.win_days", "groups.win_start", "groups.win_dur", "groups.win_off",
		    "groups.rt_max", "groups.rt_backoff", "groups.rt_factor", "groups.n_open",
		    "groups.n_finished", "groups.n_failed", "groups.n_succeeded", "groups.tokens",
		    "groups.tokens_at", "groups.c_variables", "groups.c_comment", "groups.c_ttl",
		    "groups.c_mail_list", "groups.c_status_list", "groups.c_task_mail_list",
		    "groups.c_task_status_list", "jobs.attempt", "jobs.retry_of", "jobs.error_code",
		    "jobs.held", "jobs.release_order", "jobs.release_at", "jobs.superseded",
		    "tasks.retry",
		    /* migration 5: claims */
		    "jobs.claimed_by", "jobs.lease_until", "groups.claimed_by",
		    "groups.lease_until", "notifications.claimed_by", "notifications.lease_until",
		    /* migration 7: the order of device states */
		    "devices.state_ts",
		    /* migration 11: tasks with artifacts */
		    "tasks.artifacts", "tasks.release", "tasks.download_timeout",
		    "task_versions.artifacts", "task_versions.release",
		    "task_versions.download_timeout", "jobs.progress_done", "jobs.progress_total",
		    /* migration 12: device attributes */
		    "devices.attributes",
		    /* migration 13: jobs that span a reboot */
		    "jobs.phase", "jobs.reboot_within", "jobs.reboot_deadline", "job_history.phase",
		    /* migration 14: a group's download limits */
		    "groups.dl_max", "groups.dl_rate", NULL};
		char sql[160];

		assert_int_equal(
		    sqlite3_exec(db,
				 "DROP INDEX jobs_held; DROP INDEX jobs_reboot;"
				 " DROP INDEX jobs_group_device; DROP INDEX groups_status",
				 NULL, NULL, NULL),
		    SQLITE_OK);
		for (size_t i = 0; cols[i]; i++) {
			const char *dot = strchr(cols[i], '.');
			snprintf(sql, sizeof(sql), "ALTER TABLE %.*s DROP COLUMN %s",
				 (int)(dot - cols[i]), cols[i], dot + 1);
			assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
		}
	}
	assert_int_equal(
	    sqlite3_exec(
		db,
		"DROP INDEX jobs_sched; DROP INDEX jobs_inflight;"
		" DROP TABLE webhook_attempts; DROP TABLE webhook_deliveries; DROP TABLE webhooks;"
		" DROP TABLE audit; DROP TABLE nodes; DROP TABLE group_rejected;"
		" DROP TABLE artifacts; DROP TABLE task_artifacts; DROP TABLE artifact_secrets;"
		" DROP TABLE job_downloads;"
		" CREATE INDEX jobs_sched ON jobs(scheduled_time) WHERE status = 'pending';"
		" CREATE INDEX jobs_inflight ON jobs(update_at) WHERE status IN"
		" ('transmited', 'edge_transmitted', 'edge_started', 'edge_running');"
		" PRAGMA user_version = 1",
		NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(store_open(f->path, &again), RCS_OK);
	assert_true(store_tenant_exists(again, f->root));
	store_close(again);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	{
		sqlite3_stmt *s = NULL;
		assert_int_equal(
		    sqlite3_prepare_v2(db,
				       "SELECT (SELECT user_version FROM pragma_user_version),"
				       " (SELECT sql FROM sqlite_master WHERE name = 'jobs_sched')",
				       -1, &s, NULL),
		    SQLITE_OK);
		assert_int_equal(sqlite3_step(s), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(s, 0), 14);
		assert_non_null(
		    strstr((const char *)sqlite3_column_text(s, 1), "scheduled_time IS NOT NULL"));
		sqlite3_finalize(s);
	}
	sqlite3_close(db);
}

/* Reads one integer of a job row straight from the database (-1 for NULL). */
static long long job_column(struct fixture *f, const char *job, const char *col)
{
	char sql[128];
	long long v;

	snprintf(sql, sizeof(sql), "SELECT %s FROM jobs WHERE ident = ?", col);
	v = store_test_db_int(f->path, sql, job);
	assert_true(v >= -1);
	return v;
}

static void test_keys(void **state)
{
	struct fixture *f = *state;
	struct auth a;
	char ident[UUID_STR_LEN], hash[SHA256_HEX_LEN];

	assert_int_equal(uuid_v7(ident), RCS_OK);
	sha256_hex("secret", 6, hash);
	assert_int_equal(store_key_create(f->st, ident, f->root, "bob", ROLE_OPERATOR, hash, 1),
			 RCS_OK);
	assert_int_equal(store_key_lookup(f->st, hash, &a), RCS_OK);
	assert_string_equal(a.user, "bob");
	assert_int_equal(a.role, ROLE_OPERATOR);
	assert_string_equal(a.client_root, f->root);
	/* another tenant can't revoke it */
	assert_int_equal(store_key_revoke(f->st, "00000000-0000-7000-8000-000000000000", ident, 2),
			 RCS_ERR_NOTFOUND);
	assert_int_equal(store_key_revoke(f->st, f->root, ident, 2), RCS_OK);
	assert_int_equal(store_key_lookup(f->st, hash, &a), RCS_ERR_NOTFOUND);
}

static void test_task_versions(void **state)
{
	struct fixture *f = *state;
	struct task_rec t;
	struct task_version tv;

	assert_int_equal(store_task_get(f->st, f->root, f->task, &t), RCS_OK);
	assert_int_equal(t.version, 1);
	assert_true(t.active);
	store_task_rec_free(&t);
	assert_int_equal(store_task_get(f->st, "00000000-0000-7000-8000-000000000000", f->task, &t),
			 RCS_ERR_NOTFOUND);
	assert_int_equal(store_task_version_get(f->st, f->task, 1, &tv), RCS_OK);
	assert_int_equal(tv.script_len, strlen(SCRIPT));
	assert_memory_equal(tv.script_src, SCRIPT, tv.script_len);
	assert_null(tv.signature);
	store_task_version_free(&tv);
	assert_int_equal(store_task_version_get(f->st, f->task, 2, &tv), RCS_ERR_NOTFOUND);
	/* a script in use can't be deleted; deleting the task releases it */
	assert_int_equal(store_script_put(f->st, f->root, "mine", "return 1", 8, 1, NULL), RCS_OK);
	assert_int_equal(store_script_delete(f->st, f->root, "mine"), RCS_OK);
	assert_int_equal(store_script_delete(f->st, f->root, "mine"), RCS_ERR_NOTFOUND);
	assert_int_equal(store_task_delete(f->st, f->root, f->task), RCS_OK);
	assert_int_equal(store_task_get(f->st, f->root, f->task, &t), RCS_ERR_NOTFOUND);
	/* the version snapshot stays for the jobs that carry it */
	assert_int_equal(store_task_version_get(f->st, f->task, 1, &tv), RCS_OK);
	store_task_version_free(&tv);
}

static void test_job_lifecycle(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[1];
	/* history: newest first */
	struct store_page pg = {.page = 1, .per_page = 500, .desc = true};
	json_object *job = NULL, *hist = NULL, *items;

	make_jobs(f, jobs, 1, NULL);
	assert_int_equal(job_json(f->st, f->root, jobs[0].ident, &job), RCS_OK);
	assert_string_equal(jstr(job, "status"), "pending");
	assert_true(json_object_object_get_ex(job, "target", NULL));
	assert_true(json_object_object_get_ex(job, "payload", NULL));
	{
		/* the typed record says what the API's record says */
		struct job_rec rec;

		assert_int_equal(store_job_rec_get(f->st, jobs[0].ident, &rec), RCS_OK);
		assert_string_equal(rec.ident, jobs[0].ident);
		assert_string_equal(rec.client_root, jstr(job, "client_root"));
		assert_string_equal(rec.entity_ident, jstr(job, "entity_ident"));
		assert_int_equal(rec.status, JS_PENDING);
		assert_string_equal(rec.task_ident, jstr(jsonu_member(job, "task"), "ident"));
		assert_int_equal(rec.task_version, jint(jsonu_member(job, "task"), "version"));
		assert_string_equal(rec.task_name, jstr(jsonu_member(job, "task"), "name"));
		assert_int_equal(rec.created_at, jint(job, "created_at"));
		{
			json_object *vars = parse(rec.variables);
			assert_true(json_object_equal(vars, jsonu_member(job, "variables")));
			json_object_put(vars);
		}
		store_job_rec_free(&rec);
		assert_int_equal(
		    store_job_rec_get(f->st, "00000000-0000-7000-8000-000000000000", &rec),
		    RCS_ERR_NOTFOUND);
		assert_null(rec.task_name);
	}
	json_object_put(job);

	assert_int_equal(job_column(f, jobs[0].ident, "sent_at"), -1);
	{
		/* the move that sends the envelope records it as sent */
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_TRANSMITED,
				     .response = "sent over MQTT",
				     .mark_sent = true,
				     .now = 250};
		enum store_move res = STORE_MOVE_DUPLICATE;
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
	}
	assert_int_equal(job_column(f, jobs[0].ident, "sent_at"), 250);
	assert_int_equal(job_column(f, jobs[0].ident, "sends"), 1);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_TRANSMITTED, 1, NULL), STORE_MOVE_APPLIED);
	/* other moves leave it */
	assert_int_equal(job_column(f, jobs[0].ident, "sent_at"), 250);
	assert_int_equal(job_column(f, jobs[0].ident, "sends"), 1);
	/* the same report again, and a stale seq: nothing changes */
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_TRANSMITTED, 1, NULL),
			 STORE_MOVE_DUPLICATE);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_STARTED, 1, NULL), STORE_MOVE_DUPLICATE);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_STARTED, 2, NULL), STORE_MOVE_APPLIED);
	/* backwards is a duplicate too */
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_TRANSMITTED, 3, NULL),
			 STORE_MOVE_DUPLICATE);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_RUNNING, 4, NULL), STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_RUNNING, 5, "50%"), STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 6, "done"), STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_ERROR, 7, "late"), STORE_MOVE_DUPLICATE);
	assert_int_equal(move(f, jobs[0].ident, JS_CANCELLED, 0, NULL), STORE_MOVE_TERMINAL);

	assert_int_equal(job_json(f->st, f->root, jobs[0].ident, &job), RCS_OK);
	assert_string_equal(jstr(job, "status"), "terminated");
	assert_string_equal(jstr(job, "response"), "done");
	assert_int_equal(jint(job, "response_time"), 300);
	json_object_put(job);

	assert_int_equal(history_page(f->st, f->root, jobs[0].ident, &pg, &hist), RCS_OK);
	assert_int_equal(jint(hist, "total_items"), 8);
	json_object_object_get_ex(hist, "items", &items);
	assert_string_equal(jstr(json_object_array_get_idx(items, 0), "status"), "terminated");
	assert_string_equal(jstr(json_object_array_get_idx(items, 1), "response"), "50%");
	assert_string_equal(jstr(json_object_array_get_idx(items, 2), "response"),
			    "sent over MQTT");
	assert_string_equal(jstr(json_object_array_get_idx(items, 7), "status"), "initial");
	assert_null(json_object_object_get(json_object_array_get_idx(items, 7), "response"));
	json_object_put(hist);
}

static void test_cancel_then_late_report(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[1];
	/* history: newest first */
	struct store_page pg = {.page = 1, .per_page = 2, .desc = true};
	json_object *job = NULL, *hist = NULL;

	make_jobs(f, jobs, 1, NULL);
	assert_int_equal(move(f, jobs[0].ident, JS_TRANSMITED, 0, "sent"), STORE_MOVE_APPLIED);
	{
		/* the cancel learns, in its own transaction, that the job had been sent */
		enum job_status prev = JS_INITIAL;
		struct job_move m = {
		    .ident = jobs[0].ident, .to = JS_CANCELLED, .now = 300, .prev = &prev};
		enum store_move res = STORE_MOVE_DUPLICATE;
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
		assert_int_equal(prev, JS_TRANSMITED);
	}
	/* the device's report after the cancel is kept, the status stays cancelled */
	assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 1, "finished anyway"),
			 STORE_MOVE_KEPT);
	assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 1, "finished anyway"),
			 STORE_MOVE_DUPLICATE);
	assert_int_equal(job_json(f->st, f->root, jobs[0].ident, &job), RCS_OK);
	assert_string_equal(jstr(job, "status"), "cancelled");
	json_object_put(job);
	assert_int_equal(history_page(f->st, f->root, jobs[0].ident, &pg, &hist), RCS_OK);
	assert_int_equal(jint(hist, "total_items"), 5);
	assert_int_equal(jint(hist, "total_pages"), 3);
	json_object_put(hist);
	/* the wrong owner can't move it */
	{
		struct job_move m = {.ident = jobs[0].ident,
				     .entity_ident = f->dev[1],
				     .to = JS_TERMINATED,
				     .seq = 9,
				     .now = 1};
		enum store_move res;
		assert_int_equal(move_with(f, &m, &res), RCS_ERR_NOTFOUND);
	}
}

/* One move through store_job_move_rec; *rec is what it hands back. */
static enum store_move move_rec(struct fixture *f, const struct job_move *m, struct job_rec *rec)
{
	struct job_moved mv = {.result = STORE_MOVE_DUPLICATE};

	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_job_move_rec(f->st, m, &mv, rec), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	return mv.result;
}

static void assert_str_or_null(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		assert_ptr_equal(a, b);
	else
		assert_string_equal(a, b);
}

/* The record a move hands back is the job as read afresh, field by field, and the
 * history item keeps the response the record has. */
static void assert_rec_as_read(struct fixture *f, struct job_rec *rec)
{
	struct job_rec again;
	struct store_page pg = {.page = 1, .per_page = 1, .desc = true};
	json_object *hist = NULL;

	assert_int_equal(store_job_rec_get(f->st, rec->ident, &again), RCS_OK);
	assert_string_equal(rec->client_root, again.client_root);
	assert_string_equal(rec->entity_ident, again.entity_ident);
	assert_string_equal(rec->task_ident, again.task_ident);
	assert_int_equal(rec->task_version, again.task_version);
	assert_str_or_null(rec->task_name, again.task_name);
	assert_string_equal(rec->group_ident, again.group_ident);
	assert_str_or_null(rec->group_name, again.group_name);
	assert_str_or_null(rec->comment, again.comment);
	assert_int_equal(rec->status, again.status);
	assert_str_or_null(rec->created_user, again.created_user);
	assert_int_equal(rec->created_at, again.created_at);
	assert_int_equal(rec->update_at, again.update_at);
	assert_int_equal(rec->scheduled_time, again.scheduled_time);
	assert_int_equal(rec->response_time, again.response_time);
	assert_int_equal(rec->ttl, again.ttl);
	assert_str_or_null(rec->response, again.response);
	assert_str_or_null(rec->mail_list, again.mail_list);
	assert_str_or_null(rec->status_list, again.status_list);
	assert_str_or_null(rec->variables, again.variables);
	assert_int_equal(rec->attempt, again.attempt);
	assert_string_equal(rec->retry_of, again.retry_of);
	assert_str_or_null(rec->error_code, again.error_code);
	assert_int_equal(rec->held, again.held);
	assert_int_equal(rec->expires_at, again.expires_at);
	store_job_rec_free(&again);
	assert_int_equal(history_page(f->st, f->root, rec->ident, &pg, &hist), RCS_OK);
	{
		json_object *last = json_object_array_get_idx(jsonu_member(hist, "items"), 0);
		const char *r = json_object_get_string(jsonu_member(last, "response"));

		assert_str_or_null(r, rec->response);
	}
	json_object_put(hist);
	store_job_rec_free(rec);
}

/* The deliveries of a webhook, as the API lists them. */
static size_t deliveries_of(struct fixture *f, const char *hook)
{
	struct store_page pg = {.page = 1, .per_page = 100};
	struct store_webhook_delivery_list l;
	size_t n;

	memset(&l, 0, sizeof(l));
	assert_int_equal(store_webhook_deliveries(f->st, f->root, hook, &pg, &l), RCS_OK);
	n = l.n;
	store_webhook_delivery_list_free(&l);
	return n;
}

/* A tenant without webhooks records no delivery, and what the store knows of that within a
 * transaction ends with a webhook made in it, with the transaction, and with a webhook
 * another connection made meanwhile (store_webhooks.c, webhook_any). */
static void test_webhook_outbox_follows_new_webhooks(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[1];
	struct webhook_write w = {.url = "https://hooks.example/a",
				  .events = "[\"job.status\"]",
				  .secret = "0123456789abcdef0123456789abcdef",
				  .created_user = "alice",
				  .now = 100};
	char hook[2][UUID_STR_LEN];
	struct store *other = NULL;

	make_jobs(f, jobs, 1, NULL);
	assert_int_equal(uuid_v7(hook[0]), RCS_OK);
	assert_int_equal(uuid_v7(hook[1]), RCS_OK);
	w.client_root = f->root;
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 3, "pending", 101),
			 RCS_OK);
	w.ident = hook[0];
	assert_int_equal(store_webhook_insert(f->st, &w), RCS_OK);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 4, "pending", 102),
			 RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(deliveries_of(f, hook[0]), 1);
	/* the next transaction knows nothing from the last */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 5, "pending", 103),
			 RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(deliveries_of(f, hook[0]), 2);
	/* a webhook another connection (a CLI, another coordinator) made between two
	 * transactions counts in the second; hook[0] switched off, so the tenant had none */
	assert_int_equal(
	    store_webhook_update(f->st, f->root, hook[0], NULL, NULL, NULL, NULL, 0, 104), RCS_OK);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 6, "pending", 105),
			 RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(store_open(f->path, &other), RCS_OK);
	w.ident = hook[1];
	assert_int_equal(store_webhook_insert(other, &w), RCS_OK);
	store_close(other);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 7, "pending", 106),
			 RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(deliveries_of(f, hook[0]), 2);
	assert_int_equal(deliveries_of(f, hook[1]), 1);
}

#ifdef RCS_WITH_POSTGRES
static void listen_woke(void *ctx)
{
	(void)ctx;
}

/* On PostgreSQL, while the store listens, whether the tenant has an active webhook is read
 * once and kept (a webhook written behind the coordinators' backs, without its NOTIFY, is
 * not seen); another coordinator's webhook, which NOTIFYs 'webhooks', is seen as soon as
 * the notification arrives. */
static void test_webhook_tenants_kept_while_listening(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[1];
	struct webhook_write w = {.url = "https://hooks.example/a",
				  .events = "[\"job.status\"]",
				  .secret = "0123456789abcdef0123456789abcdef",
				  .created_user = "alice",
				  .now = 100};
	char hook[2][UUID_STR_LEN], sql[512];
	struct store *other = NULL;
	unsigned long gen;

	if (!store_test_pg())
		return; /* SQLite reads it once per transaction (the test above) */
	make_jobs(f, jobs, 1, NULL);
	assert_int_equal(uuid_v7(hook[0]), RCS_OK);
	assert_int_equal(uuid_v7(hook[1]), RCS_OK);
	assert_int_equal(store_listen(f->st, listen_woke, NULL), RCS_OK);
	/* the LISTEN connection is made (it counts as a change: what was kept is read again) */
	for (int i = 0; i < 500 && atomic_load(&f->st->hooks_gen) == 0; i++)
		usleep(10000);
	assert_true(atomic_load(&f->st->hooks_gen) > 0);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 3, "pending", 101),
			 RCS_OK);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO webhooks(ident, client_root, url, events, statuses, secret, active,"
		 " created_user, created_at, update_at) VALUES('%s', '%s', 'https://h.example/',"
		 " '[\"job.status\"]', '[]', '0123456789abcdef0123456789abcdef', 1, 'x', 1, 1)",
		 hook[0], f->root);
	assert_true(store_test_pg_exec(f->path, sql));
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 4, "pending", 102),
			 RCS_OK);
	assert_int_equal(deliveries_of(f, hook[0]), 0); /* kept: no statement asked again */
	gen = atomic_load(&f->st->hooks_gen);
	assert_int_equal(store_open(f->path, &other), RCS_OK);
	w.client_root = f->root;
	w.ident = hook[1];
	assert_int_equal(store_webhook_insert(other, &w), RCS_OK);
	store_close(other);
	for (int i = 0; i < 500 && atomic_load(&f->st->hooks_gen) == gen; i++)
		usleep(10000);
	assert_true(atomic_load(&f->st->hooks_gen) != gen);
	assert_int_equal(store_webhook_job_event(f->st, f->root, jobs[0].ident, 5, "pending", 103),
			 RCS_OK);
	assert_int_equal(deliveries_of(f, hook[0]), 1);
	assert_int_equal(deliveries_of(f, hook[1]), 1);
	store_listen_stop(f->st);
}
#endif

/* What follows a status change (lifecycle.c, lifecycle_move_follow): an applied change
 * records its webhook delivery and the e-mails its status triggers, and a final one the
 * group's tallies and, with nothing left open, the group's completion; a device's report
 * kept after a cancel is a delivery only; a duplicate is nothing. */
static void test_what_follows_a_move(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];
	struct job_batch b;
	struct webhook_write w = {.url = "https://hooks.example/a",
				  .events = "[\"job.status\"]",
				  .secret = "0123456789abcdef0123456789abcdef",
				  .created_user = "alice",
				  .now = 100};
	char gid[UUID_STR_LEN], hook[UUID_STR_LEN];
	const char *mails = "SELECT count(*) FROM notifications WHERE job_ident = ?";
	const char *open = "SELECT n_open * 100 + n_finished * 10 + n_succeeded FROM groups"
			   " WHERE ident = ?";
	struct job_move cancel;
	enum store_move res;

	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = f->dev[i];
	}
	assert_int_equal(uuid_v7(gid), RCS_OK);
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Echo";
	b.group_ident = gid;
	b.group_name = "wave";
	b.created_user = "alice";
	b.mail_list = "[\"ops@example.com\"]";
	b.status_list = "[\"terminated\", \"cancelled\"]";
	b.now = 200;
	b.jobs = jobs;
	b.n = 2;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
	assert_int_equal(uuid_v7(hook), RCS_OK);
	w.client_root = f->root;
	w.ident = hook;
	assert_int_equal(store_webhook_insert(f->st, &w), RCS_OK);

	assert_int_equal(move(f, jobs[0].ident, JS_TRANSMITED, 0, "sent"), STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_TRANSMITTED, 1, NULL), STORE_MOVE_APPLIED);
	assert_int_equal(store_test_db_int(f->path, mails, jobs[0].ident), 0);
	assert_int_equal(store_test_db_int(f->path, open, gid), 200);
	assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 2, "done"), STORE_MOVE_APPLIED);
	assert_int_equal(store_test_db_int(f->path, mails, jobs[0].ident), 1);
	assert_int_equal(store_test_db_int(f->path, open, gid), 111);
	assert_int_equal(deliveries_of(f, hook), 3);
	/* the same report again: nothing follows */
	assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 2, "done"), STORE_MOVE_DUPLICATE);
	assert_int_equal(store_test_db_int(f->path, mails, jobs[0].ident), 1);
	assert_int_equal(store_test_db_int(f->path, open, gid), 111);
	assert_int_equal(deliveries_of(f, hook), 3);
	/* the coordinator's cancel ends the group's last open job: the group is completed */
	memset(&cancel, 0, sizeof(cancel));
	cancel.ident = jobs[1].ident;
	cancel.to = JS_CANCELLED;
	cancel.now = 310;
	assert_int_equal(move_with(f, &cancel, &res), RCS_OK);
	assert_int_equal(res, STORE_MOVE_APPLIED);
	assert_int_equal(store_test_db_int(f->path, mails, jobs[1].ident), 1);
	assert_int_equal(store_test_db_int(f->path, open, gid), 21);
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(*) FROM groups WHERE ident = ? AND"
					   " status = 'completed'",
					   gid),
			 1);
	assert_int_equal(deliveries_of(f, hook), 4);
	/* the device's report after the cancel: kept, a delivery, no e-mail, no tally */
	assert_int_equal(move(f, jobs[1].ident, JS_EDGE_STARTED, 1, NULL), STORE_MOVE_KEPT);
	assert_int_equal(store_test_db_int(f->path, mails, jobs[1].ident), 1);
	assert_int_equal(store_test_db_int(f->path, open, gid), 21);
	assert_int_equal(deliveries_of(f, hook), 5);
}

/* ---- folds (store_fold_begin) ---- */

/* One move as the bridge applies a report: in the caller's transaction, with the record. */
static enum store_move report_move(struct fixture *f, const char *job, enum job_status to,
				   long long seq, const char *response, const char *code,
				   struct job_rec *rec)
{
	struct job_move m = {.ident = job,
			     .entity_ident = NULL,
			     .to = to,
			     .seq = seq,
			     .response = response,
			     .replace_response = true,
			     .set_response_time = status_is_terminal(to),
			     .error_code = code,
			     .now = 300 + seq};
	struct lifecycle lc = {.st = f->st};
	enum store_move res = STORE_MOVE_KEPT;

	assert_int_equal(lifecycle_move_in_tx(&lc, &m, &res, rec), RCS_OK);
	return res;
}

/* What the API and the database say of a job: its record without its ident, its history,
 * and the columns moves write that the record leaves out, as JSON text (malloc'd). */
static char *job_state(struct fixture *f, const char *ident)
{
	struct store_page pg = {.page = 1, .per_page = 500};
	json_object *job = NULL, *hist = NULL, *o = json_object_new_object();
	static const char *const cols[] = {"last_seq", "n_history", "sent_at",
					   "sends",    "held",      "response_time"};
	char *text;

	assert_int_equal(job_json(f->st, f->root, ident, &job), RCS_OK);
	json_object_object_del(job, "ident");
	json_object_object_add(o, "record", job);
	assert_int_equal(history_page(f->st, f->root, ident, &pg, &hist), RCS_OK);
	for (size_t i = 0; i < json_object_array_length(jsonu_member(hist, "items")); i++)
		json_object_object_del(json_object_array_get_idx(jsonu_member(hist, "items"), i),
				       "ident");
	json_object_object_add(o, "history", json_object_get(jsonu_member(hist, "items")));
	json_object_put(hist);
	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		json_object_object_add(o, cols[i],
				       json_object_new_int64(job_column(f, ident, cols[i])));
	text = strdup(json_object_to_json_string(o));
	json_object_put(o);
	return text;
}

/* The reports of three jobs, interleaved as a batch brings them; the records the moves
 * hand back are checked against each move. */
static void fold_reports(struct fixture *f, struct job_new *jobs, enum store_move *res)
{
	static const struct {
		int job;
		enum job_status to;
		long long seq;
		const char *response, *code;
	} r[] = {
	    {0, JS_EDGE_TRANSMITTED, 1, NULL, NULL},
	    {1, JS_EDGE_TRANSMITTED, 1, NULL, NULL},
	    {0, JS_EDGE_STARTED, 2, NULL, NULL},
	    {2, JS_EDGE_TRANSMITTED, 1, NULL, NULL},
	    {0, JS_EDGE_RUNNING, 3, "10%", NULL},
	    {1, JS_EDGE_STARTED, 2, NULL, NULL},
	    {0, JS_EDGE_STARTED, 2, NULL, NULL}, /* again: a duplicate */
	    {0, JS_EDGE_RUNNING, 4, "50%", NULL},
	    {1, JS_EDGE_ERROR, 3, "no disk", "exec_failed"},
	    {2, JS_EDGE_STARTED, 2, NULL, NULL},
	    {0, JS_EDGE_RUNNING, 5, "90%", NULL},
	    {1, JS_TERMINATED, 4, "late", NULL}, /* after its end: a duplicate */
	    {0, JS_TERMINATED, 6, "done", NULL},
	    {2, JS_EDGE_RUNNING, 3, NULL, NULL}, /* job 2 stays open */
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		struct job_rec rec;

		memset(&rec, 0, sizeof(rec));
		res[i] = report_move(f, jobs[r[i].job].ident, r[i].to, r[i].seq, r[i].response,
				     r[i].code, &rec);
		if (res[i] == STORE_MOVE_APPLIED) {
			assert_int_equal(rec.status, r[i].to);
			assert_int_equal(rec.update_at, 300 + r[i].seq);
			if (r[i].response)
				assert_string_equal(rec.response, r[i].response);
			else
				assert_null(rec.response);
			if (r[i].code)
				assert_string_equal(rec.error_code, r[i].code);
		}
		store_job_rec_free(&rec);
	}
}

static void test_fold_writes_what_moves_write(void **state)
{
	struct fixture *f = *state;
	struct job_new plain[3], folded[3];
	enum store_move res_plain[16], res_folded[16];
	struct job_rec rec;

	make_jobs(f, plain, 3, NULL);
	make_jobs(f, folded, 3, NULL);
	/* one by one, in a transaction */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	fold_reports(f, plain, res_plain);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	/* the same in a fold */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	fold_reports(f, folded, res_folded);
	/* folded: the open jobs' rows are written at the fold's end (job 0 and 1 ended and
	 * were written at once) */
	assert_int_equal(store_job_rec_get(f->st, folded[2].ident, &rec), RCS_OK);
	assert_int_equal(rec.status, JS_PENDING);
	store_job_rec_free(&rec);
	assert_int_equal(store_job_rec_get(f->st, folded[0].ident, &rec), RCS_OK);
	assert_int_equal(rec.status, JS_TERMINATED);
	store_job_rec_free(&rec);
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_memory_equal(res_plain, res_folded, sizeof(res_plain[0]) * 14);
	assert_int_equal(res_folded[6], STORE_MOVE_DUPLICATE);
	assert_int_equal(res_folded[11], STORE_MOVE_DUPLICATE);
	for (int i = 0; i < 3; i++) {
		char *a = job_state(f, plain[i].ident), *b = job_state(f, folded[i].ident);

		assert_string_equal(a, b);
		free(a);
		free(b);
	}
	/* a fold that is given up writes nothing of its own */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	assert_int_equal(report_move(f, folded[2].ident, JS_EDGE_RUNNING, 4, "99%", NULL, NULL),
			 STORE_MOVE_APPLIED);
	assert_int_equal(store_fold_end(f->st, false), RCS_OK);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	assert_int_equal(job_column(f, folded[2].ident, "last_seq"), 3);
	assert_int_equal(job_column(f, folded[2].ident, "n_history"), 5);
}

/* An edge_running report's progress (docs/api.md "Jobs"): kept as the job's last progress,
 * by a move and by a fold alike; a report without one, or of another status, keeps it. */
static void progress_reports(struct fixture *f, const char *job)
{
	struct lifecycle lc = {.st = f->st};
	struct job_move m = {.ident = job, .replace_response = true, .now = 310};
	enum store_move res;
	static const struct {
		enum job_status to;
		bool has;
		long long done, total;
	} r[] = {{JS_TRANSMITED, false, 0, 0},    {JS_EDGE_STARTED, true, 1, 2},
		 {JS_EDGE_RUNNING, true, 0, 900}, {JS_EDGE_RUNNING, true, 450, 900},
		 {JS_EDGE_RUNNING, false, 0, 0},  {JS_TERMINATED, false, 0, 0}};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		m.to = r[i].to;
		m.seq = (long long)i + 1;
		m.has_progress = r[i].has;
		m.progress_done = r[i].done;
		m.progress_total = r[i].total;
		m.set_response_time = status_is_terminal(r[i].to);
		assert_int_equal(lifecycle_move_in_tx(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
	}
}

static void test_progress(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];
	struct job_rec rec;
	char *a, *b;

	make_jobs(f, jobs, 1, NULL); /* each for the same device: their states compare */
	make_jobs(f, jobs + 1, 1, NULL);
	assert_int_equal(store_job_rec_get(f->st, jobs[0].ident, &rec), RCS_OK);
	assert_false(rec.has_progress); /* none reported: null */
	store_job_rec_free(&rec);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	progress_reports(f, jobs[0].ident);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	progress_reports(f, jobs[1].ident);
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, JS_TERMINATED);
		assert_true(rec.has_progress);
		assert_int_equal(rec.progress_done, 450);
		assert_int_equal(rec.progress_total, 900);
		store_job_rec_free(&rec);
	}
	a = job_state(f, jobs[0].ident);
	b = job_state(f, jobs[1].ident);
	assert_non_null(strstr(a, "\"progress\": { \"done\": 450, \"total\": 900 }"));
	assert_string_equal(a, b);
	free(a);
	free(b);
}

/* A savepoint rolled back inside a fold: its end refuses to write (the caller rolls back). */
static void test_fold_spoiled_by_a_rollback(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];

	make_jobs(f, jobs, 2, NULL);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	assert_int_equal(report_move(f, jobs[0].ident, JS_EDGE_TRANSMITTED, 1, NULL, NULL, NULL),
			 STORE_MOVE_APPLIED);
	assert_int_equal(store_sp_begin(f->st), RCS_OK);
	assert_int_equal(store_sp_end(f->st, RCS_ERR_INTERNAL), RCS_ERR_INTERNAL);
	assert_int_not_equal(store_fold_flush(f->st), RCS_OK);
	assert_int_not_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	assert_int_equal(job_column(f, jobs[0].ident, "n_history"), 2);
	/* the next fold starts clean */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	assert_int_equal(report_move(f, jobs[1].ident, JS_EDGE_TRANSMITTED, 1, NULL, NULL, NULL),
			 STORE_MOVE_APPLIED);
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(job_column(f, jobs[1].ident, "n_history"), 3);
	assert_int_equal(job_column(f, jobs[1].ident, "last_seq"), 1);
}

/* More jobs than a fold keeps: it is written out when full and goes on. */
static void test_fold_of_many_jobs(void **state)
{
	struct fixture *f = *state;
	enum { N = 2100 };
	struct job_new *jobs = calloc(N, sizeof(*jobs));

	assert_non_null(jobs);
	make_jobs(f, jobs, N, NULL);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	for (long long seq = 1; seq <= 3; seq++)
		for (size_t i = 0; i < N; i++)
			assert_int_equal(
			    report_move(f, jobs[i].ident,
					(enum job_status)(JS_EDGE_TRANSMITTED + seq - 1), seq, NULL,
					NULL, NULL),
			    STORE_MOVE_APPLIED);
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	for (size_t i = 0; i < N; i += 97) {
		struct job_rec rec;

		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, JS_EDGE_RUNNING);
		store_job_rec_free(&rec);
		assert_int_equal(job_column(f, jobs[i].ident, "n_history"), 5);
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), 3);
	}
	free(jobs);
}

/* A group aborted by a failure inside a fold cancels only the jobs not yet on their
 * devices, as their rows say once the fold's moves are written (lifecycle.c flushes): not
 * job 0, pending in its row until the fold's moves are written. */
static void test_fold_then_group_abort(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct group_settings gs = {.has_abort = true, .failure_pct = 1, .min_finished = 1};
	struct job_new jobs[3];
	const enum job_status want[3] = {JS_EDGE_STARTED, JS_EDGE_ERROR, JS_CANCELLED};

	make_group_jobs(f, jobs, 3, "canary", &gs);
	{
		/* job 1 is sent; job 0's reports come before its send is recorded (a device
		 * may answer first), job 2 waits */
		struct job_move m = {
		    .ident = jobs[1].ident, .to = JS_TRANSMITED, .mark_sent = true, .now = 250};
		enum store_move res;

		assert_int_equal(move_with(f, &m, &res), RCS_OK);
	}
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin(f->st);
	for (long long seq = 1; seq <= 2; seq++) {
		struct job_move m = {.ident = jobs[0].ident,
				     .to = seq == 1 ? JS_EDGE_TRANSMITTED : JS_EDGE_STARTED,
				     .seq = seq,
				     .now = 260};
		enum store_move res;

		assert_int_equal(lifecycle_move_in_tx(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
	}
	{
		/* job 1 fails: the group is aborted, its unsent jobs cancelled */
		struct job_move m = {.ident = jobs[1].ident,
				     .to = JS_EDGE_ERROR,
				     .seq = 1,
				     .error_code = "exec_failed",
				     .now = 270};
		enum store_move res;

		assert_int_equal(lifecycle_move_in_tx(&lc, &m, &res, NULL), RCS_OK);
	}
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	for (size_t i = 0; i < 3; i++) {
		struct job_rec rec;

		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, want[i]);
		store_job_rec_free(&rec);
	}
	assert_int_equal(job_column(f, jobs[0].ident, "last_seq"), 2);
}

/* A group's progress counts devices, a retry being its device's next attempt: the counts
 * sum to the devices, what was cancelled before it went out is told apart, and the list's
 * tallies agree (docs/api.md "Progress"). */
static void test_group_progress(void **state)
{
	struct fixture *f = *state;
	struct group_settings gs = {
	    .has_retry = true, .max_attempts = 3, .backoff_s = 30, .backoff_milli = 1000};
	struct store_page pg = {.page = 1, .per_page = 50};
	struct job_new jobs[3];
	json_object *g = NULL, *page = NULL, *p, *lp;
	long long sum = 0;

	make_group_jobs(f, jobs, 3, "progress", &gs);
	{
		/* job 0 is sent and fails for a transient cause: a retry follows */
		struct job_move m = {
		    .ident = jobs[0].ident, .to = JS_TRANSMITED, .mark_sent = true, .now = 250};
		enum store_move res;

		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		m = (struct job_move){.ident = jobs[0].ident,
				      .to = JS_EDGE_ERROR,
				      .seq = 1,
				      .error_code = "script_error",
				      .now = 260};
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		/* job 1 is sent and ends well */
		m = (struct job_move){
		    .ident = jobs[1].ident, .to = JS_TRANSMITED, .mark_sent = true, .now = 250};
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		m = (struct job_move){
		    .ident = jobs[1].ident, .to = JS_TERMINATED, .seq = 1, .now = 270};
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
		/* job 2 is cancelled before it went out */
		m = (struct job_move){.ident = jobs[2].ident, .to = JS_CANCELLED, .now = 280};
		assert_int_equal(move_with(f, &m, &res), RCS_OK);
	}
	assert_int_equal(groups_page(f->st, f->root, &pg, &page), RCS_OK);
	lp = jsonu_member(json_object_array_get_idx(jsonu_member(page, "items"), 0), "progress");
	assert_int_equal(
	    group_json(f->st, f->root,
		       jstr(json_object_array_get_idx(jsonu_member(page, "items"), 0), "ident"),
		       &g),
	    RCS_OK);
	p = jsonu_member(g, "progress");
	/* four jobs, three devices: the retry replaces its device's first attempt */
	assert_int_equal(jint(g, "total"), 4);
	assert_int_equal(jint(p, "devices"), 3);
	json_object_object_foreach(jsonu_member(g, "counts"), k, v)
	{
		(void)k;
		sum += json_object_get_int64(v);
	}
	assert_int_equal(sum, 3);
	assert_int_equal(jint(p, "ended"), 2);
	assert_int_equal(jint(p, "succeeded"), 1);
	assert_int_equal(jint(p, "failed"), 0);
	assert_int_equal(jint(p, "cancelled"), 1);
	assert_int_equal(jint(p, "not_sent"), 1);
	assert_int_equal(jint(p, "open"), 1);
	assert_int_equal(jint(p, "held"), 1); /* the retry, waiting for its backoff */
	assert_int_equal(jint(p, "retries"), 1);
	assert_true(json_object_is_type(jsonu_member(p, "release_eta_s"), json_type_int));
	/* the list's six counts, from the group's tallies, are the same */
	json_object_object_foreach(lp, lk, lv)
	{
		assert_true(json_object_equal(lv, jsonu_member(p, lk)));
	}
	assert_int_equal(json_object_object_length(lp), 6);
	json_object_put(g);
	json_object_put(page);
}

/* A retry a paused group makes says the group is paused; the resume has it say again what
 * it waits for, its backoff (docs/api.md "Rollouts"). */
static void test_group_pause_says_so(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct group_settings gs = {
	    .has_retry = true, .max_attempts = 2, .backoff_s = 600, .backoff_milli = 1000};
	struct job_new jobs[1];
	struct store_idents ids;
	struct job_rec rec;
	char gid[UUID_STR_LEN], retry[UUID_STR_LEN];
	enum store_move res;
	struct job_move m;

	make_group_jobs(f, jobs, 1, "pausing", &gs);
	assert_int_equal(store_job_rec_get(f->st, jobs[0].ident, &rec), RCS_OK);
	memcpy(gid, rec.group_ident, sizeof(gid));
	store_job_rec_free(&rec);
	m = (struct job_move){
	    .ident = jobs[0].ident, .to = JS_TRANSMITED, .mark_sent = true, .now = 250};
	assert_int_equal(move_with(f, &m, &res), RCS_OK);
	assert_int_equal(lifecycle_group_pause(&lc, f->root, gid, 260, NULL, NULL), RCS_OK);
	m = (struct job_move){.ident = jobs[0].ident,
			      .to = JS_EDGE_ERROR,
			      .seq = 1,
			      .error_code = "script_error",
			      .now = 270};
	assert_int_equal(move_with(f, &m, &res), RCS_OK);
	assert_int_equal(store_group_jobs_open(f->st, gid, true, 4, &ids), RCS_OK);
	assert_int_equal(ids.n, 1);
	memcpy(retry, ids.v[0], sizeof(retry));
	store_idents_free(&ids);
	assert_int_equal(store_job_rec_get(f->st, retry, &rec), RCS_OK);
	assert_int_equal(rec.attempt, 2);
	assert_string_equal(rec.response, "group paused");
	store_job_rec_free(&rec);
	assert_int_equal(lifecycle_group_resume(&lc, f->root, gid, 280, NULL, NULL), RCS_OK);
	assert_int_equal(store_job_rec_get(f->st, retry, &rec), RCS_OK);
	assert_string_equal(rec.response, "waiting for retry: attempt 2");
	store_job_rec_free(&rec);
}

static void test_move_hands_back_the_record(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];
	struct job_rec rec;

	make_jobs(f, jobs, 2, NULL);
	{
		/* the coordinator's send: a response of its own, marked as sent */
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_TRANSMITED,
				     .response = "sent over MQTT",
				     .mark_sent = true,
				     .now = 250};
		assert_int_equal(move_rec(f, &m, &rec), STORE_MOVE_APPLIED);
		assert_int_equal(rec.status, JS_TRANSMITED);
		assert_string_equal(rec.response, "sent over MQTT");
		assert_rec_as_read(f, &rec);
	}
	{
		/* a device report without a response replaces the response with none */
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_EDGE_TRANSMITTED,
				     .replace_response = true,
				     .seq = 1,
				     .now = 260};
		assert_int_equal(move_rec(f, &m, &rec), STORE_MOVE_APPLIED);
		assert_null(rec.response);
		assert_rec_as_read(f, &rec);
	}
	{
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_EDGE_RUNNING,
				     .response = "50%",
				     .replace_response = true,
				     .seq = 3,
				     .now = 270};
		assert_int_equal(move_rec(f, &m, &rec), STORE_MOVE_APPLIED);
		assert_rec_as_read(f, &rec);
		/* the same seq again: a duplicate hands back the record as it is */
		assert_int_equal(move_rec(f, &m, &rec), STORE_MOVE_DUPLICATE);
		assert_int_equal(rec.status, JS_EDGE_RUNNING);
		assert_rec_as_read(f, &rec);
	}
	{
		/* an edge_error with its cause and a response time */
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_EDGE_ERROR,
				     .response = "no space left",
				     .replace_response = true,
				     .set_response_time = true,
				     .error_code = "script_error",
				     .seq = 4,
				     .now = 280};
		assert_int_equal(move_rec(f, &m, &rec), STORE_MOVE_APPLIED);
		assert_string_equal(rec.error_code, "script_error");
		assert_int_equal(rec.response_time, 280);
		assert_rec_as_read(f, &rec);
	}
	{
		/* a coordinator move without a response keeps the job's; a late report is
		 * kept in the history only */
		struct job_move sent = {
		    .ident = jobs[1].ident, .to = JS_TRANSMITED, .response = "sent", .now = 250};
		struct job_move cancel = {.ident = jobs[1].ident, .to = JS_CANCELLED, .now = 290};
		struct job_move late = {.ident = jobs[1].ident,
					.to = JS_TERMINATED,
					.response = "done anyway",
					.replace_response = true,
					.set_response_time = true,
					.seq = 1,
					.now = 295};
		assert_int_equal(move_rec(f, &sent, &rec), STORE_MOVE_APPLIED);
		assert_rec_as_read(f, &rec);
		assert_int_equal(move_rec(f, &cancel, &rec), STORE_MOVE_APPLIED);
		assert_string_equal(rec.response, "sent");
		assert_null(rec.error_code);
		assert_rec_as_read(f, &rec);
		assert_int_equal(move_rec(f, &late, &rec), STORE_MOVE_KEPT);
		assert_int_equal(rec.status, JS_CANCELLED);
		store_job_rec_free(&rec);
	}
}

static void test_lists_and_groups(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[7];
	struct store_page pg = {.page = 2, .per_page = 3};
	struct job_filter jf;
	json_object *page = NULL, *items, *g = NULL;
	struct store_device_presence_list devs;

	make_jobs(f, jobs, 7, "night");
	memset(&jf, 0, sizeof(jf));
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 7);
	assert_int_equal(jint(page, "total_pages"), 3);
	json_object_object_get_ex(page, "items", &items);
	assert_int_equal(json_object_array_length(items), 3);
	assert_string_equal(jstr(json_object_array_get_idx(items, 0), "ident"), jobs[3].ident);
	assert_string_equal(jstr(json_object_array_get_idx(items, 1), "ident"), jobs[4].ident);
	json_object_put(page);
	/* the list options (docs/api.md "Lists"): newest first, created_at bounds */
	pg.desc = true;
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	json_object_object_get_ex(page, "items", &items);
	assert_string_equal(jstr(json_object_array_get_idx(items, 1), "ident"), jobs[2].ident);
	json_object_put(page);
	pg.desc = false;
	pg.page = 1;
	pg.has_before = true;
	pg.created_before = 0;
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 0);
	json_object_put(page);
	pg.created_before = INT64_MAX;
	pg.has_after = true;
	pg.created_after = 0;
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 7);
	json_object_put(page);
	pg.created_after = INT64_MAX - 1;
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 0);
	json_object_put(page);
	pg.has_after = pg.has_before = false;
	pg.page = 2;

	jf.entity_ident = f->dev[0];
	pg.page = 1;
	pg.per_page = 50;
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 3); /* jobs 0, 3, 6 */
	json_object_put(page);

	assert_int_equal(move(f, jobs[0].ident, JS_TRANSMITED, 0, NULL), STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[0].ident, JS_EDGE_STARTED, 1, NULL), STORE_MOVE_APPLIED);
	memset(&jf, 0, sizeof(jf));
	jf.status = "running";
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 1);
	json_object_put(page);
	jf.status = "pending";
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 6);
	json_object_put(page);
	/* a value that would be SQL is only ever a bound parameter */
	jf.status = "pending' OR '1'='1";
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 0);
	json_object_put(page);
	/* another tenant sees nothing */
	memset(&jf, 0, sizeof(jf));
	assert_int_equal(jobs_page(f->st, "00000000-0000-7000-8000-000000000000", &jf, &pg, &page),
			 RCS_OK);
	assert_int_equal(jint(page, "total_items"), 0);
	json_object_put(page);

	assert_int_equal(groups_page(f->st, f->root, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 1);
	json_object_object_get_ex(page, "items", &items);
	assert_int_equal(
	    group_json(f->st, f->root, jstr(json_object_array_get_idx(items, 0), "ident"), &g),
	    RCS_OK);
	assert_int_equal(jint(g, "total"), 7);
	json_object_object_get_ex(g, "statuses", &items);
	assert_int_equal(jint(items, "pending"), 6);
	assert_int_equal(jint(items, "edge_started"), 1);
	json_object_put(g);
	json_object_put(page);

	assert_int_equal(store_devices_with_tag(f->st, f->root, "lab", 10, &devs), RCS_OK);
	assert_int_equal(devs.n, 3);
	store_device_presence_list_free(&devs);
	assert_int_equal(store_devices_with_tag(f->st, f->root, "lab", 2, &devs), RCS_ERR_TOOBIG);
	assert_int_equal(store_devices_with_tag(f->st, f->root, "other", 10, &devs), RCS_OK);
	assert_int_equal(devs.n, 0);
	store_device_presence_list_free(&devs);
}

/* On PostgreSQL a batch that makes jobs much larger than at its last analysis analyses it
 * in its own transaction, so the statements planned while it was nearly empty are planned
 * again (store_jobs_create); a small batch does not. */
static void test_pg_large_batch_analyses(void **state)
{
	struct fixture *f = *state;
	enum { N = STORE_ANALYZE_MIN + 4 };
	static struct job_new jobs[N];
	const char *rel = "SELECT CAST(reltuples AS BIGINT) FROM pg_class WHERE oid = ?::regclass";

	if (!store_test_pg())
		skip();
#ifdef RCS_WITH_POSTGRES
	assert_true(store_test_pg_exec(f->path, "ANALYZE jobs"));
#endif
	assert_int_equal(store_test_db_int(f->path, rel, "jobs"), 0);
	make_jobs(f, jobs, 4, NULL);
	assert_int_equal(store_test_db_int(f->path, rel, "jobs"), 0);
	make_jobs(f, jobs + 4, STORE_ANALYZE_MIN, NULL);
	assert_int_equal(store_test_db_int(f->path, rel, "jobs"), N);
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(*) FROM job_history WHERE n <= 2"
					   " AND job_ident <> ?",
					   ""),
			 2 * N);
}

/* A bulk send of more than two statements' worth of jobs (STORE_JOBS_SET_CHUNK on
 * PostgreSQL): every job made once, as asked (its device, even one whose name needs quoting
 * in an array, and its place), with its initial and pending history once; held jobs' pending
 * item says so. A batch whose second chunk fails leaves nothing of it, its group and first
 * chunk included (docs/coordinator.md "A bulk send's jobs as sets"). */
static void test_bulk_sets(void **state)
{
	struct fixture *f = *state;
	enum { N = 2 * STORE_JOBS_SET_CHUNK + 5 };
	struct job_new *jobs = calloc(N, sizeof(*jobs));
	const char *odd = "dev\"with\\quote,{}";
	char gid[UUID_STR_LEN], bad_gid[UUID_STR_LEN], first[UUID_STR_LEN];
	struct job_batch b;
	struct job_rec r;
	long long hist0;

	assert_non_null(jobs);
	for (size_t i = 0; i < N; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = i == STORE_JOBS_SET_CHUNK ? odd : f->dev[i % 3];
		jobs[i].order = (long long)(N - i);
	}
	memset(&b, 0, sizeof(b));
	assert_int_equal(uuid_v7(gid), RCS_OK);
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Echo";
	b.group_ident = gid;
	b.group_name = "sets";
	b.created_user = "alice";
	b.now = 200;
	b.hold = true;
	b.jobs = jobs;
	b.n = N;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(DISTINCT ident) FROM jobs WHERE"
					   " group_ident = ? AND status = 'pending' AND held = 1",
					   gid),
			 N);
	/* each job's place is its own: N - i for the i-th */
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(DISTINCT release_order) FROM jobs WHERE"
					   " group_ident = ?",
					   gid),
			 N);
	assert_int_equal(
	    store_test_db_int(f->path,
			      "SELECT min(release_order) + max(release_order) FROM jobs"
			      " WHERE group_ident = ?",
			      gid),
	    N + 1);
	assert_int_equal(
	    store_test_db_int(f->path,
			      "SELECT count(*) FROM job_history h JOIN jobs j ON"
			      " j.ident = h.job_ident WHERE j.group_ident = ? AND h.at = 200 AND"
			      " ((h.n = 1 AND h.status = 'initial' AND h.response IS NULL) OR"
			      " (h.n = 2 AND h.status = 'pending' AND h.response IS NOT NULL))",
			      gid),
	    2 * N);
	assert_int_equal(store_test_db_int(f->path,
					   "SELECT count(*) FROM job_history h JOIN jobs j ON"
					   " j.ident = h.job_ident WHERE j.group_ident = ?",
					   gid),
			 2 * N);
	for (size_t i = 0; i < N; i += STORE_JOBS_SET_CHUNK - 1) {
		assert_int_equal(store_job_get(f->st, f->root, jobs[i].ident, &r), RCS_OK);
		assert_string_equal(r.entity_ident, jobs[i].entity_ident);
		assert_string_equal(r.group_ident, gid);
		assert_int_equal(r.status, JS_PENDING);
		store_job_rec_free(&r);
		assert_int_equal(store_test_db_int(f->path,
						   "SELECT release_order FROM jobs WHERE ident = ?",
						   jobs[i].ident),
				 (long long)(N - i));
	}
	assert_int_equal(store_job_get(f->st, f->root, jobs[N - 1].ident, &r), RCS_OK);
	assert_int_equal(r.status, JS_PENDING);
	store_job_rec_free(&r);

	/* a second batch whose second chunk holds a job of the first: nothing of it stays */
	hist0 =
	    store_test_db_int(f->path, "SELECT count(*) FROM job_history WHERE job_ident <> ?", "");
	memcpy(first, jobs[0].ident, sizeof(first));
	for (size_t i = 0; i < N; i++)
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
	memcpy(jobs[STORE_JOBS_SET_CHUNK + 1].ident, first, sizeof(first));
	assert_int_equal(uuid_v7(bad_gid), RCS_OK);
	b.group_ident = bad_gid;
	b.hold = false;
	assert_int_not_equal(store_jobs_create(f->st, &b), RCS_OK);
	assert_int_equal(
	    store_test_db_int(f->path, "SELECT count(*) FROM groups WHERE ident = ?", bad_gid), 0);
	assert_int_equal(
	    store_test_db_int(f->path, "SELECT count(*) FROM jobs WHERE group_ident = ?", bad_gid),
	    0);
	assert_int_equal(
	    store_test_db_int(f->path, "SELECT count(*) FROM jobs WHERE ident = ?", jobs[0].ident),
	    0);
	assert_int_equal(
	    store_test_db_int(f->path, "SELECT count(*) FROM job_history WHERE job_ident <> ?", ""),
	    hist0);
	assert_int_equal(
	    store_test_db_int(f->path, "SELECT count(*) FROM jobs WHERE ident <> ?", ""), N);
	free(jobs);
}

static void test_bulk_is_one_transaction(void **state)
{
	struct fixture *f = *state;
	struct job_new *jobs = calloc(10000, sizeof(*jobs));
	struct job_filter jf;
	struct store_page pg = {.page = 1, .per_page = 1};
	json_object *page = NULL;
	sqlite3 *db = NULL;
	int before = 0, after = 0;

	assert_non_null(jobs);
	if (store_test_pg()) {
		make_jobs(f, jobs, 10000, "big");
		goto count;
	}
	/* the WAL's commit counter (data_version seen by another connection) moves once */
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &before),
			 SQLITE_OK);
	make_jobs(f, jobs, 10000, "big");
	assert_int_equal(sqlite3_exec(db, "SELECT 1 FROM jobs LIMIT 1", NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &after),
			 SQLITE_OK);
	assert_int_equal(after - before, 1);
	sqlite3_close(db);
count:
	memset(&jf, 0, sizeof(jf));
	assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
	assert_int_equal(jint(page, "total_items"), 10000);
	json_object_put(page);
	free(jobs);
}

struct action_log {
	int runs;
	bool committed;
	bool row_seen;  /* another connection saw the row written before: committed */
	bool lock_free; /* another thread could use the store while the action ran */
	struct fixture *f;
	const char *ident; /* the device the transaction inserted (NULL: none) */
	bool in_tx;        /* runs inside the open transaction: the lock isn't probed */
};

static void *use_store(void *arg)
{
	struct fixture *f = arg;
	bool online = false;

	store_device_presence(f->st, f->root, f->dev[0], &online);
	return NULL;
}

static void record_action(void *arg, bool committed)
{
	struct action_log *l = arg;
	struct timespec until;
	pthread_t t;

	l->runs++;
	l->committed = committed;
	if (l->in_tx)
		return;
	/* the store's lock is free: another thread's call returns (not 5 s later) */
	assert_int_equal(pthread_create(&t, NULL, use_store, l->f), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	l->lock_free = pthread_timedjoin_np(t, NULL, &until) == 0;
	if (!l->lock_free)
		pthread_detach(t); /* the test fails; it gets the lock when the caller lets go */
	if (l->ident == NULL)
		return;
	l->row_seen =
	    store_test_db_int(l->f->path, "SELECT count(*) FROM devices WHERE entity_ident = ?",
			      l->ident) == 1;
}

static bool device_exists(struct fixture *f, const char *ident)
{
	bool online = false;

	return store_device_presence(f->st, f->root, ident, &online) == RCS_OK;
}

/* store_tx_begin nests as a savepoint; store_after_commit runs after the outermost end */
static void test_nested_tx_and_after_commit(void **state)
{
	struct fixture *f = *state;
	char kept[UUID_STR_LEN], inner[UUID_STR_LEN], gone[UUID_STR_LEN], nested[UUID_STR_LEN];
	struct action_log now = {.f = f}, later = {.f = f, .ident = kept},
			  in_sp = {.f = f, .ident = nested}, in_undone_sp = {.f = f, .in_tx = true},
			  undone = {.f = f, .ident = gone};
	const char *tags = "[]";

	assert_int_equal(uuid_v7(kept), RCS_OK);
	assert_int_equal(uuid_v7(inner), RCS_OK);
	assert_int_equal(uuid_v7(gone), RCS_OK);
	assert_int_equal(uuid_v7(nested), RCS_OK);
	/* outside a transaction: at once, as committed */
	assert_int_equal(store_after_commit(f->st, record_action, &now), RCS_OK);
	assert_int_equal(now.runs, 1);
	assert_true(now.committed);
	assert_true(now.lock_free);

	/* committed: the outer write stays, the rolled-back savepoint's doesn't; an action
	 * of a rolled-back savepoint runs at once, as not committed; the others once,
	 * after the commit (another connection sees the rows) and outside the lock */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, kept, "k", tags, 100), RCS_OK);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, inner, "i", tags, 100), RCS_OK);
	assert_int_equal(store_after_commit(f->st, record_action, &in_undone_sp), RCS_OK);
	assert_int_equal(in_undone_sp.runs, 0);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	assert_int_equal(in_undone_sp.runs, 1);
	assert_false(in_undone_sp.committed);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, nested, "n", tags, 100), RCS_OK);
	assert_int_equal(store_after_commit(f->st, record_action, &in_sp), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(store_after_commit(f->st, record_action, &later), RCS_OK);
	assert_int_equal(later.runs + in_sp.runs, 0);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(later.runs, 1);
	assert_int_equal(in_sp.runs, 1);
	assert_true(later.committed && in_sp.committed);
	assert_true(later.row_seen && in_sp.row_seen);
	assert_true(later.lock_free && in_sp.lock_free);
	assert_true(device_exists(f, kept));
	assert_true(device_exists(f, nested));
	assert_false(device_exists(f, inner));

	/* rolled back: nothing stays, the action is told so, after the rollback */
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, gone, "g", tags, 100), RCS_OK);
	assert_int_equal(store_after_commit(f->st, record_action, &undone), RCS_OK);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	assert_int_equal(undone.runs, 1);
	assert_false(undone.committed);
	assert_false(undone.row_seen);
	assert_true(undone.lock_free);
	assert_false(device_exists(f, gone));
}

/* The batch's records (made from the first job's) equal each job's own record. */
struct batch_render {
	struct render w;
	struct render_job_copy copy;
	size_t like; /* how many came like the first */
};

static enum rcs_err render_one(void *arg, const struct job_rec *r, bool like_first)
{
	struct batch_render *br = arg;

	br->like += like_first;
	render_job_batch(&br->w, &br->copy, r, like_first);
	return br->w.err;
}

/* like: how many records should come like the first */
static void check_json_batch(struct fixture *f, const struct job_batch *b, size_t like)
{
	struct buf got, want;
	struct batch_render br;
	struct render ww;

	buf_init(&got, 1 << 20);
	buf_init(&want, 1 << 20);
	memset(&br, 0, sizeof(br));
	render_init(&br.w, &got);
	render_arr_open(&br.w);
	assert_int_equal(store_jobs_batch_each(f->st, b, render_one, &br), RCS_OK);
	render_arr_close(&br.w);
	assert_int_equal(render_end(&br.w), RCS_OK);
	assert_int_equal(br.like, like);
	render_job_copy_free(&br.copy);
	render_init(&ww, &want);
	render_arr_open(&ww);
	for (size_t i = 0; i < b->n; i++) {
		struct job_rec r;

		assert_int_equal(store_job_get(f->st, NULL, b->jobs[i].ident, &r), RCS_OK);
		render_job(&ww, &r);
		store_job_rec_free(&r);
	}
	render_arr_close(&ww);
	assert_int_equal(render_end(&ww), RCS_OK);
	assert_non_null(got.data);
	assert_string_equal(got.data, want.data);
	buf_free(&got);
	buf_free(&want);
}

static void test_jobs_json_batch(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[7];
	struct job_batch b;
	char gid[UUID_STR_LEN], quoted[128];

	/* names and variables that spell the keys of the record */
	snprintf(quoted, sizeof(quoted), "{\"message\":\"\\\"entity_ident\\\":\\\"%s\"}",
		 f->dev[1]);
	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < 7; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = f->dev[i % 3];
	}
	assert_int_equal(uuid_v7(gid), RCS_OK);
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Echo \"entity_ident\":\"";
	b.group_ident = gid;
	b.group_name = "{\"ident\":\"";
	b.created_user = "alice";
	b.comment = "\"entity_ident\":\"";
	b.variables = quoted;
	b.now = 200;
	b.jobs = jobs;
	b.n = 7;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
	for (size_t n = 1; n <= 7; n++) {
		b.n = n;
		check_json_batch(f, &b, n - 1);
	}
	/* a record that differs in more than its idents: every record read */
	move(f, jobs[6].ident, JS_CANCELLED, 0, NULL);
	check_json_batch(f, &b, 0);
	move(f, jobs[3].ident, JS_CANCELLED, 0, NULL);
	check_json_batch(f, &b, 0);
}

/* The job record as SQLite built it before render_job existed, for the comparison below. */
#define OLD_JOB_JSON                                                                               \
	"SELECT json_object('ident', j.ident, 'task', json_object('version', j.task_version,"      \
	" 'ident', j.task_ident, 'name', j.task_name), 'group', CASE WHEN j.group_ident IS NULL"   \
	" THEN NULL ELSE json_object('ident', j.group_ident, 'name', g.name) END, 'client_root',"  \
	" j.client_root, 'entity_ident', j.entity_ident, 'target', NULL, 'comment', j.comment,"    \
	" 'status', j.status, 'created_user', j.created_user, 'created_at', j.created_at,"         \
	" 'update_at', j.update_at, 'scheduled_time', j.scheduled_time, 'response_time',"          \
	" j.response_time, 'ttl', j.ttl, 'payload', NULL, 'response', j.response,"                 \
	" 'notification_mail_list', json(j.mail_list), 'notification_status_list',"                \
	" json(j.status_list), 'variables', json(j.variables), 'attempt', j.attempt, 'retry_of',"  \
	" j.retry_of, 'error_code', j.error_code, 'progress', CASE WHEN j.progress_done IS NULL"   \
	" THEN NULL ELSE json_object('done', j.progress_done, 'total', j.progress_total) END,"     \
	" 'phase', j.phase)"                                                                       \
	" FROM jobs j LEFT JOIN groups g ON g.ident = j.group_ident WHERE j.ident = ?"

static void check_same_as_sql(struct fixture *f, const char *ident)
{
	struct job_rec r;
	struct render w;
	struct buf text;
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;

	if (store_test_pg()) /* the SQL of the old records is SQLite's */
		return;
	assert_int_equal(store_job_get(f->st, f->root, ident, &r), RCS_OK);
	buf_init(&text, 1 << 20);
	render_init(&w, &text);
	render_job(&w, &r);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, OLD_JOB_JSON, -1, &s, NULL), SQLITE_OK);
	sqlite3_bind_text(s, 1, ident, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	assert_string_equal(text.data, (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	sqlite3_close(db);
	buf_free(&text);
	store_job_rec_free(&r);
}

/* render_job writes, byte for byte, the record the API answered when SQLite built it: the
 * same members in the same order, the same values and nulls. */
static void test_job_record_as_before(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];
	struct job_batch b;
	char gid[UUID_STR_LEN];

	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = f->dev[i];
	}
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Echo \"quoted\" \\ tab\t é";
	b.created_user = "alice";
	b.variables = "{\"message\":\"hi \\\"there\\\"\",\"n\":[1,2.5,null,true]}";
	b.mail_list = "[\"ops@example.com\"]";
	b.status_list = "[\"terminated\"]";
	b.now = 200;
	b.jobs = jobs;
	b.n = 1;
	/* no group, comment, schedule, ttl or response: nulls */
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
	check_same_as_sql(f, jobs[0].ident);
	/* every member set */
	assert_int_equal(uuid_v7(gid), RCS_OK);
	b.group_ident = gid;
	b.group_name = "night \"run\"";
	b.comment = "line\nnext\x01";
	b.scheduled_time = 250;
	b.ttl = 3600;
	b.jobs = jobs + 1;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
	move(f, jobs[1].ident, JS_TRANSMITED, 0, NULL);
	move(f, jobs[1].ident, JS_TERMINATED, 1, "done\r\n\"ok\"");
	check_same_as_sql(f, jobs[1].ident);
}

/* max(created_at, scheduled_time) + ttl; the API allows scheduled_time up to INT64_MAX - 1 */
static void test_job_expiry(void **state)
{
	(void)state;
	assert_int_equal(store_job_expiry(100, 0, 0), 0);
	assert_int_equal(store_job_expiry(100, 0, 10), 110);
	assert_int_equal(store_job_expiry(100, 200, 10), 210);
	assert_int_equal(store_job_expiry(100, INT64_MAX - 1, 31536000), INT64_MAX - 1);
	assert_int_equal(store_job_expiry(100, INT64_MAX - 11, 10), INT64_MAX - 1);
}

/* ---- reports as sets (lifecycle_moves; docs/coordinator.md, "Reports as sets") ---- */

static long long group_tallies(struct fixture *f, const char *job)
{
	struct job_rec rec;
	long long v;

	assert_int_equal(store_job_rec_get(f->st, job, &rec), RCS_OK);
	v = store_test_db_int(
	    f->path,
	    "SELECT n_open * 1000 + n_finished * 100 + n_failed * 10 + n_succeeded"
	    " FROM groups WHERE ident = ?",
	    rec.group_ident);
	store_job_rec_free(&rec);
	return v;
}

static long long history_count(struct fixture *f, const char *job)
{
	return store_test_db_int(f->path, "SELECT count(*) FROM job_history WHERE job_ident = ?",
				 job);
}

/* n jobs of a new group: jobs[sent] reported edge_transmitted (seq 1), jobs[2] cancelled; a
 * tenant ident of none in other, each job's history count in h. */
static void sets_jobs(struct fixture *f, struct job_new *jobs, size_t n, const char *name,
		      size_t sent, char *other, long long *h)
{
	make_group_jobs(f, jobs, n, name, NULL);
	assert_int_equal(uuid_v7(other), RCS_OK);
	assert_int_equal(move(f, jobs[sent].ident, JS_EDGE_TRANSMITTED, 1, NULL),
			 STORE_MOVE_APPLIED);
	assert_int_equal(move(f, jobs[2].ident, JS_CANCELLED, 0, NULL), STORE_MOVE_APPLIED);
	for (size_t i = 0; i < n; i++)
		h[i] = history_count(f, jobs[i].ident);
}

/* A batch that mixes a job's three reports, a duplicate seq, a report on a cancelled job, one
 * for another tenant's job and one for no job: each gets what it would alone, once. */
static void test_sets_mixed_batch(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[4];
	char other[UUID_STR_LEN], nojob[UUID_STR_LEN];
	long long h[4];
	enum store_move res[8];
	enum rcs_err errs[8];

	sets_jobs(f, jobs, 4, "mixed", 1, other, h);
	assert_int_equal(uuid_v7(nojob), RCS_OK);
	{
		struct job_move m[8] = {
		    {.ident = jobs[0].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1},
		    {.ident = jobs[1].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1},
		    {.ident = jobs[0].ident, .to = JS_EDGE_STARTED, .seq = 2},
		    {.ident = jobs[2].ident, .to = JS_EDGE_STARTED, .seq = 1},
		    {.ident = jobs[3].ident, .to = JS_EDGE_STARTED, .seq = 1, .client_root = other},
		    {.ident = nojob, .to = JS_EDGE_STARTED, .seq = 1},
		    {.ident = jobs[1].ident, .to = JS_EDGE_STARTED, .seq = 2},
		    {.ident = jobs[0].ident,
		     .to = JS_TERMINATED,
		     .seq = 3,
		     .response = "done",
		     .replace_response = true,
		     .set_response_time = true},
		};
		const enum store_move want[8] = {STORE_MOVE_APPLIED,   STORE_MOVE_DUPLICATE,
						 STORE_MOVE_APPLIED,   STORE_MOVE_KEPT,
						 STORE_MOVE_DUPLICATE, STORE_MOVE_DUPLICATE,
						 STORE_MOVE_APPLIED,   STORE_MOVE_APPLIED};
		const enum rcs_err want_err[8] = {
		    RCS_OK,           RCS_OK,           RCS_OK, RCS_OK,
		    RCS_ERR_NOTFOUND, RCS_ERR_NOTFOUND, RCS_OK, RCS_OK};

		for (size_t i = 0; i < 8; i++)
			m[i].now = 300 + (int64_t)i;
		assert_int_equal(lifecycle_moves(&lc, m, 8, res, errs), RCS_OK);
		for (size_t i = 0; i < 8; i++) {
			assert_int_equal(errs[i], want_err[i]);
			if (errs[i] == RCS_OK)
				assert_int_equal(res[i], want[i]);
		}
	}
	{
		const enum job_status st[4] = {JS_TERMINATED, JS_EDGE_STARTED, JS_CANCELLED,
					       JS_PENDING};
		const long long added[4] = {3, 1, 1, 0}, seq[4] = {3, 2, 1, 0};

		for (size_t i = 0; i < 4; i++) {
			struct job_rec rec;

			assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
			assert_int_equal(rec.status, st[i]);
			if (i == 0) {
				assert_string_equal(rec.response, "done");
				assert_int_equal(rec.response_time, 307);
			}
			store_job_rec_free(&rec);
			assert_int_equal(history_count(f, jobs[i].ident), h[i] + added[i]);
			assert_int_equal(job_column(f, jobs[i].ident, "n_history"),
					 h[i] + added[i]);
			assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), seq[i]);
		}
	}
	/* the group: 4 jobs, the cancelled one and the terminated one finished, 1 succeeded */
	assert_int_equal(group_tallies(f, jobs[0].ident), 2 * 1000 + 2 * 100 + 0 * 10 + 1);
}

#ifdef RCS_WITH_POSTGRES
/* A counter of pg_stat_user_tables (jobs) or pg_stat_user_indexes (an index of jobs), the
 * store's connection's statistics flushed first: PostgreSQL flushes them before it answers
 * the transaction that asked for it (pg_stat_force_next_flush, PostgreSQL 15). */
static long long jobs_stat(struct fixture *f, const char *sql, const char *param)
{
	assert_int_equal(store_write(f->st, "SELECT pg_stat_force_next_flush()", NULL, 0), RCS_OK);
	return store_test_db_int(f->path, sql, param);
}

static long long index_scans(struct fixture *f, const char *index)
{
	return jobs_stat(f, "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = ?",
			 index);
}

static long long stage1_scans(struct fixture *f)
{
	return index_scans(f, "jobs_stale") + index_scans(f, "jobs_inflight") +
	       index_scans(f, "jobs_unacked");
}

/* On PostgreSQL a job's moves on the device are HOT updates (migration 15: no index of jobs
 * names a column they change), so a batch of reports writes no index entry; and the
 * transport's and scheduler's reads still find their rows through the partial indexes
 * (docs/coordinator.md, "The jobs table on PostgreSQL"), seen per index in
 * pg_stat_user_indexes with sequential scans turned off for the store's connection. */
static void test_pg_moves_are_hot(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[3];
	struct store_idents ids;
	long long upd, hot, scans;
	int64_t next = 0;

	if (!store_test_pg())
		skip();
	make_group_jobs(f, jobs, 3, "hot", NULL);
	store_claims_setup(f->st, "node-a", 15);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(move(f, jobs[i].ident, JS_TRANSMITED, 0, NULL),
				 STORE_MOVE_APPLIED);
		assert_int_equal(move(f, jobs[i].ident, JS_EDGE_TRANSMITTED, 1, NULL),
				 STORE_MOVE_APPLIED);
	}
	upd = jobs_stat(f, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = ?", "jobs");
	hot =
	    jobs_stat(f, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ?", "jobs");
	{
		struct job_move m[6];
		enum store_move res[6];
		enum rcs_err errs[6];

		memset(m, 0, sizeof(m));
		for (size_t i = 0; i < 6; i++) {
			m[i].ident = jobs[i % 3].ident;
			m[i].to = i < 3 ? JS_EDGE_STARTED : JS_EDGE_RUNNING;
			m[i].seq = i < 3 ? 2 : 3;
			m[i].response = i < 3 ? NULL : "half";
			m[i].replace_response = i >= 3;
			m[i].now = 400 + (int64_t)i;
		}
		assert_int_equal(lifecycle_moves(&lc, m, 6, res, errs), RCS_OK);
		for (size_t i = 0; i < 6; i++)
			assert_int_equal(res[i], STORE_MOVE_APPLIED);
	}
	upd = jobs_stat(f, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = ?", "jobs") -
	      upd;
	hot = jobs_stat(f, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ?",
			"jobs") -
	      hot;
	assert_true(upd >= 3);
	assert_int_equal(hot, upd);

	/* the reads, each through its index */
	assert_int_equal(store_write(f->st, "SET enable_seqscan = off", NULL, 0), RCS_OK);
	scans = index_scans(f, "jobs_inflight");
	assert_int_equal(store_jobs_inflight(f->st, "", INT64_MAX, 500, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(index_scans(f, "jobs_inflight") > scans);
	/* the stale and the unacknowledged ones: through one of the indexes of the jobs on their
	 * way (which one is the planner's choice on three rows) */
	scans = stage1_scans(f);
	assert_int_equal(store_jobs_stale(f->st, 1000000, 1, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(stage1_scans(f) > scans);
	scans = stage1_scans(f);
	assert_int_equal(store_jobs_unacked(f->st, f->dev[0], INT64_MAX, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(stage1_scans(f) > scans);
	{
		long long left = 0;

		scans = stage1_scans(f);
		assert_int_equal(store_jobs_inflight_left(f->st, INT64_MAX, &left), RCS_OK);
		assert_true(stage1_scans(f) > scans);
		scans = stage1_scans(f);
		assert_int_equal(store_jobs_clock_back(f->st, 1000000), RCS_OK);
		assert_true(stage1_scans(f) > scans);
	}
	make_group_jobs(f, jobs, 3, "hot-pending", NULL);
	/* the look at every due job walks the waiting jobs alone in ident order (migration 16);
	 * the look at one device's goes through an index of the waiting jobs too (which one is
	 * the planner's choice on three rows) */
	scans = index_scans(f, "jobs_due");
	assert_int_equal(store_jobs_ready(f->st, NULL, 500, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(index_scans(f, "jobs_due") > scans);
	scans = index_scans(f, "jobs_pending") + index_scans(f, "jobs_due");
	assert_int_equal(store_jobs_ready(f->st, f->dev[1], 500, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(index_scans(f, "jobs_pending") + index_scans(f, "jobs_due") > scans);
	scans = index_scans(f, "jobs_ttl");
	assert_int_equal(store_jobs_expired(f->st, 500, 10, &ids), RCS_OK);
	store_idents_free(&ids);
	assert_true(index_scans(f, "jobs_ttl") > scans);
	scans = index_scans(f, "jobs_sched");
	assert_int_equal(store_next_wakeup(f->st, 500, &next), RCS_OK);
	assert_true(index_scans(f, "jobs_sched") > scans);
	{
		/* a list by an ended status: the ended jobs of the tenant alone */
		struct job_filter jf = {.status = "terminated"};
		struct store_page pg = {.page = 1, .per_page = 10, .desc = true};
		json_object *page = NULL;

		assert_int_equal(move(f, jobs[0].ident, JS_TERMINATED, 1, "done"),
				 STORE_MOVE_APPLIED);
		scans = index_scans(f, "jobs_status");
		assert_int_equal(jobs_page(f->st, f->root, &jf, &pg, &page), RCS_OK);
		assert_int_equal(jint(page, "total_items"), 1);
		json_object_put(page);
		assert_true(index_scans(f, "jobs_status") > scans);
	}
	assert_int_equal(store_write(f->st, "RESET enable_seqscan", NULL, 0), RCS_OK);
}
#endif

#ifdef RCS_WITH_POSTGRES
/* PostgreSQL breaks a batch off after its moves were written (a deadlock, here made by a
 * trigger on the groups' tallies once): nothing of it stays, and applied again whole it
 * counts every report once. */
static void test_sets_batch_again_whole(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[3];
	struct job_move m[6];
	enum store_move res[6];
	enum rcs_err errs[6];
	long long h[3];

	if (!store_test_pg())
		return; /* SQLite has one writer: no deadlock to break a batch off */
	make_group_jobs(f, jobs, 3, "again", NULL);
	for (size_t i = 0; i < 3; i++)
		h[i] = history_count(f, jobs[i].ident);
	assert_true(store_test_pg_exec(
	    f->path, "CREATE SEQUENCE fail_once;"
		     "CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN"
		     " IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'deadlock (test)' USING"
		     " ERRCODE = '40P01'; END IF; RETURN NULL; END$$;"
		     "CREATE TRIGGER fail_once AFTER UPDATE ON groups FOR EACH STATEMENT"
		     " EXECUTE FUNCTION fail_once();"));
	for (size_t i = 0; i < 3; i++) {
		m[2 * i] = (struct job_move){
		    .ident = jobs[i].ident, .to = JS_EDGE_STARTED, .seq = 1, .now = 300};
		m[2 * i + 1] = (struct job_move){
		    .ident = jobs[i].ident, .to = JS_TERMINATED, .seq = 2, .now = 301};
	}
	assert_int_equal(lifecycle_moves(&lc, m, 6, res, errs), RCS_ERR_BUSY);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(history_count(f, jobs[i].ident), h[i]);
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), 0);
	}
	assert_int_equal(group_tallies(f, jobs[0].ident), 3 * 1000);
	assert_int_equal(lifecycle_moves(&lc, m, 6, res, errs), RCS_OK);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(res[2 * i], STORE_MOVE_APPLIED);
		assert_int_equal(res[2 * i + 1], STORE_MOVE_APPLIED);
		assert_int_equal(history_count(f, jobs[i].ident), h[i] + 2);
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), 2);
	}
	assert_int_equal(group_tallies(f, jobs[0].ident), 0 * 1000 + 3 * 100 + 0 * 10 + 3);
}
#endif

#ifdef RCS_WITH_POSTGRES
static void held_moves(struct job_move *m, const char *job)
{
	m[0] = (struct job_move){.ident = job, .to = JS_EDGE_STARTED, .seq = 1, .now = 300};
	m[1] = (struct job_move){.ident = job, .to = JS_TERMINATED, .seq = 2, .now = 301};
}

/* Another connection holds one job's row (another coordinator's batch): a batch with that
 * job's reports and others' applies the others at once, not waiting for the row, and makes
 * none of the held job's moves (RCS_ERR_BUSY, nothing written); applied again once the row
 * is free, they count once (docs/coordinator.md, "Reports as sets"). */
static void test_sets_leave_held_rows(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[3];
	struct job_move m[6], again[2];
	enum store_move res[6];
	enum rcs_err errs[6];
	long long h[3];
	char sql[160];
	PGconn *c;
	PGresult *r;

	if (!store_test_pg())
		skip();
	make_group_jobs(f, jobs, 3, "held", NULL);
	for (size_t i = 0; i < 3; i++) {
		h[i] = history_count(f, jobs[i].ident);
		held_moves(&m[2 * i], jobs[i].ident);
	}
	held_moves(again, jobs[1].ident);
	c = PQconnectdb(f->path);
	assert_int_equal(PQstatus(c), CONNECTION_OK);
	snprintf(sql, sizeof(sql), "BEGIN; SELECT 1 FROM jobs WHERE ident = '%s' FOR UPDATE",
		 jobs[1].ident);
	r = PQexec(c, sql);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	/* a batch that waited for the row would fail after 3 s instead of waiting for good */
	assert_int_equal(store_write(f->st, "SET lock_timeout = '3s'", NULL, 0), RCS_OK);
	assert_int_equal(lifecycle_moves(&lc, m, 6, res, errs), RCS_OK);
	for (size_t i = 0; i < 6; i++) {
		assert_int_equal(errs[i], i / 2 == 1 ? RCS_ERR_BUSY : RCS_OK);
		if (i / 2 != 1)
			assert_int_equal(res[i], STORE_MOVE_APPLIED);
	}
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(history_count(f, jobs[i].ident), h[i] + (i == 1 ? 0 : 2));
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), i == 1 ? 0 : 2);
	}
	assert_int_equal(group_tallies(f, jobs[0].ident), 1 * 1000 + 2 * 100 + 0 * 10 + 2);
	/* still held: left again */
	assert_int_equal(lifecycle_moves(&lc, again, 2, res, errs), RCS_OK);
	assert_int_equal(errs[0], RCS_ERR_BUSY);
	assert_int_equal(errs[1], RCS_ERR_BUSY);
	assert_int_equal(history_count(f, jobs[1].ident), h[1]);
	r = PQexec(c, "COMMIT");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	/* free: applied, once */
	assert_int_equal(lifecycle_moves(&lc, again, 2, res, errs), RCS_OK);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(errs[i], RCS_OK);
		assert_int_equal(res[i], STORE_MOVE_APPLIED);
	}
	assert_int_equal(lifecycle_moves(&lc, m, 6, res, errs), RCS_OK);
	for (size_t i = 0; i < 6; i++) {
		assert_int_equal(errs[i], RCS_OK);
		assert_int_equal(res[i], STORE_MOVE_DUPLICATE);
	}
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(history_count(f, jobs[i].ident), h[i] + 2);
		assert_int_equal(job_column(f, jobs[i].ident, "n_history"), h[i] + 2);
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), 2);
	}
	assert_int_equal(group_tallies(f, jobs[0].ident), 0 * 1000 + 3 * 100 + 0 * 10 + 3);
	assert_int_equal(store_write(f->st, "RESET lock_timeout", NULL, 0), RCS_OK);
	PQfinish(c);
}

/* A chunk of sends while another connection holds one of its jobs' rows (another
 * coordinator sending it): the chunk reads and locks the others at once and leaves that
 * one (held), not waiting for it (docs/coordinator.md, "Sends as sets"). */
static void test_sends_leave_held_rows(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[3];
	const char *ids[4];
	bool held[4];
	char sql[160], nojob[UUID_STR_LEN];
	PGconn *c;
	PGresult *r;

	if (!store_test_pg())
		skip();
	make_group_jobs(f, jobs, 3, "held-sends", NULL);
	assert_int_equal(uuid_v7(nojob), RCS_OK);
	for (size_t i = 0; i < 3; i++)
		ids[i] = jobs[i].ident;
	ids[3] = nojob;
	c = PQconnectdb(f->path);
	assert_int_equal(PQstatus(c), CONNECTION_OK);
	snprintf(sql, sizeof(sql), "BEGIN; SELECT 1 FROM jobs WHERE ident = '%s' FOR UPDATE",
		 jobs[1].ident);
	r = PQexec(c, sql);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	assert_int_equal(store_write(f->st, "SET lock_timeout = '3s'", NULL, 0), RCS_OK);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin_sets(f->st);
	assert_int_equal(store_fold_prefetch_sends(f->st, ids, 4, held), RCS_OK);
	for (size_t i = 0; i < 4; i++) {
		struct job_rec rec;
		int presence;

		assert_int_equal(held[i], i == 1); /* a job not found is not held */
		assert_int_equal(store_fold_job(f->st, ids[i], &rec, &presence),
				 i == 0 || i == 2 ? RCS_OK : RCS_ERR_NOTFOUND);
		store_job_rec_free(&rec);
	}
	assert_int_equal(store_fold_end(f->st, false), RCS_OK);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	r = PQexec(c, "COMMIT");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	assert_int_equal(store_write(f->st, "RESET lock_timeout", NULL, 0), RCS_OK);
	PQfinish(c);
}
#endif

/* With several coordinators the broker hands a job's reports to any of them: a batch with a
 * report whose seq skips one not applied yet leaves it and the job's later ones (RCS_ERR_BUSY,
 * nothing written), applies the rest; once the report before it is applied (by the other
 * coordinator's batch), it is applied too, and the job's history holds every report. A job
 * the coordinator ended, a report of another device and a report in order are not left
 * (docs/coordinator.md, "Reports as sets"). On SQLite (one coordinator) reports are applied
 * as they come. */
/* the transaction that last updated or locked a job's row (PostgreSQL) */
#define XMAX_COL "CAST(CAST(xmax AS text) AS bigint)"

static void test_sets_wait_for_earlier_reports(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[3];
	char other[UUID_STR_LEN];
	enum store_move res[5];
	enum rcs_err errs[5];
	long long h[3];
	char sql[160];

	if (!store_test_pg())
		skip();
	sets_jobs(f, jobs, 3, "gaps", 0, other, h);
	{
		/* one coordinator's batch: job 0's seq 2 and 3 went to the other one */
		struct job_move m[5] = {
		    {.ident = jobs[0].ident, .to = JS_TERMINATED, .seq = 4, .now = 310},
		    {.ident = jobs[1].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1, .now = 310},
		    {.ident = jobs[2].ident, .to = JS_EDGE_RUNNING, .seq = 3, .now = 310},
		    {.ident = jobs[1].ident,
		     .to = JS_EDGE_STARTED,
		     .seq = 3,
		     .entity_ident = other,
		     .now = 310},
		    {.ident = jobs[1].ident, .to = JS_EDGE_STARTED, .seq = 2, .now = 310},
		};
		const enum rcs_err want_err[5] = {RCS_ERR_BUSY, RCS_OK, RCS_OK, RCS_ERR_NOTFOUND,
						  RCS_OK};
		const enum store_move want[5] = {STORE_MOVE_DUPLICATE, STORE_MOVE_APPLIED,
						 STORE_MOVE_KEPT, STORE_MOVE_DUPLICATE,
						 STORE_MOVE_APPLIED};

		assert_int_equal(lifecycle_moves(&lc, m, 5, res, errs), RCS_OK);
		for (size_t i = 0; i < 5; i++) {
			assert_int_equal(errs[i], want_err[i]);
			if (errs[i] == RCS_OK)
				assert_int_equal(res[i], want[i]);
		}
		assert_int_equal(history_count(f, jobs[0].ident), h[0]);
		assert_int_equal(job_column(f, jobs[0].ident, "last_seq"), 1);
		assert_int_equal(history_count(f, jobs[1].ident), h[1] + 2);
		assert_int_equal(history_count(f, jobs[2].ident), h[2] + 1);
		/* the next round, before the other coordinator's batch: left again, found so
		 * without locking its job's row again (the lock of this batch's transaction
		 * would leave its id in the row's xmax) */
		m[0].again = true;
		{
			long long xmax = job_column(f, jobs[0].ident, XMAX_COL);

			assert_int_equal(lifecycle_moves(&lc, m, 1, res, errs), RCS_OK);
			assert_int_equal(errs[0], RCS_ERR_BUSY);
			assert_int_equal(job_column(f, jobs[0].ident, XMAX_COL), xmax);
		}
		{
			/* the other coordinator's batch, then this one's round */
			struct job_move o[2] = {
			    {.ident = jobs[0].ident, .to = JS_EDGE_STARTED, .seq = 2, .now = 311},
			    {.ident = jobs[0].ident, .to = JS_EDGE_RUNNING, .seq = 3, .now = 311},
			};

			assert_int_equal(lifecycle_moves(&lc, o, 2, res, errs), RCS_OK);
			assert_int_equal(errs[0], RCS_OK);
			assert_int_equal(errs[1], RCS_OK);
			assert_int_equal(res[0], STORE_MOVE_APPLIED);
			assert_int_equal(res[1], STORE_MOVE_APPLIED);
		}
		assert_int_equal(lifecycle_moves(&lc, m, 1, res, errs), RCS_OK);
		assert_int_equal(errs[0], RCS_OK);
		assert_int_equal(res[0], STORE_MOVE_APPLIED);
	}
	{
		struct job_rec rec;

		assert_int_equal(store_job_rec_get(f->st, jobs[0].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, JS_TERMINATED);
		store_job_rec_free(&rec);
		assert_int_equal(history_count(f, jobs[0].ident), h[0] + 3);
		assert_int_equal(job_column(f, jobs[0].ident, "last_seq"), 4);
		/* in the order the device sent them: seq 1 was item h[0] */
		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM job_history WHERE job_ident = ? AND seq > 0"
			 " AND n = seq + %lld",
			 h[0] - 1);
		assert_int_equal(store_test_db_int(f->path, sql, jobs[0].ident), 4);
	}
}

/* Two coordinators apply overlapping batches at once, in opposite orders, each report of a
 * job twice: neither waits on the other for good, every report is applied once. On
 * PostgreSQL the moves of the jobs whose rows the other side held are left (RCS_ERR_BUSY)
 * and applied again in a next round, in their order, as the MQTT bridge does. */
#define SETS_JOBS 64
struct sets_side {
	struct store *st;
	struct job_move m[2 * SETS_JOBS];
	enum store_move res[2 * SETS_JOBS];
	enum rcs_err errs[2 * SETS_JOBS];
	enum rcs_err err;
	size_t left, held; /* moves not applied at the end; moves left in a round, in all */
};

static void *sets_side_run(void *arg)
{
	struct sets_side *s = arg;
	struct lifecycle lc = {.st = s->st};
	struct job_move m[2 * SETS_JOBS];
	enum store_move res[2 * SETS_JOBS];
	enum rcs_err errs[2 * SETS_JOBS];
	size_t idx[2 * SETS_JOBS], n = 2 * SETS_JOBS;
	const struct timespec pause = {0, 1000000L};

	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	for (int round = 0; n > 0 && round < 2000; round++) {
		size_t k = 0;

		for (size_t i = 0; i < n; i++)
			m[i] = s->m[idx[i]];
		s->err = lifecycle_moves(&lc, m, n, res, errs);
		if (s->err != RCS_OK)
			break;
		for (size_t i = 0; i < n; i++) {
			if (errs[i] == RCS_ERR_BUSY) {
				idx[k++] = idx[i]; /* in order, for the next round */
				continue;
			}
			s->res[idx[i]] = res[i];
			s->errs[idx[i]] = errs[i];
		}
		s->held += k;
		n = k;
		if (n > 0)
			nanosleep(&pause, NULL);
	}
	s->left = n;
	return NULL;
}

static void test_sets_overlapping_batches(void **state)
{
	struct fixture *f = *state;
	static struct job_new jobs[SETS_JOBS];
	static struct sets_side side[2];
	long long h[SETS_JOBS];
	pthread_t t[2];
	int applied[SETS_JOBS][2];

	make_group_jobs(f, jobs, SETS_JOBS, "overlap", NULL);
	memset(side, 0, sizeof(side));
	side[0].st = f->st;
	assert_int_equal(store_open(f->path, &side[1].st), RCS_OK);
	for (size_t i = 0; i < SETS_JOBS; i++) {
		size_t k = SETS_JOBS - 1 - i;

		h[i] = history_count(f, jobs[i].ident);
		side[0].m[2 * i] = (struct job_move){
		    .ident = jobs[i].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1, .now = 300};
		side[0].m[2 * i + 1] = (struct job_move){
		    .ident = jobs[i].ident, .to = JS_EDGE_STARTED, .seq = 2, .now = 300};
		side[1].m[2 * i] = (struct job_move){
		    .ident = jobs[k].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1, .now = 301};
		side[1].m[2 * i + 1] = (struct job_move){
		    .ident = jobs[k].ident, .to = JS_EDGE_STARTED, .seq = 2, .now = 301};
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, sets_side_run, &side[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(side[0].err, RCS_OK);
	assert_int_equal(side[1].err, RCS_OK);
	assert_int_equal(side[0].left, 0);
	assert_int_equal(side[1].left, 0);
	if (!store_test_pg()) /* one writer: nothing is ever left for another's row */
		assert_int_equal(side[0].held + side[1].held, 0);
	for (int i = 0; i < 2; i++)
		for (size_t k = 0; k < 2 * SETS_JOBS; k++)
			assert_int_equal(side[i].errs[k], RCS_OK);
	memset(applied, 0, sizeof(applied));
	for (size_t i = 0; i < SETS_JOBS; i++)
		for (int r = 0; r < 2; r++) {
			size_t k = SETS_JOBS - 1 - i;

			applied[i][r] += side[0].res[2 * i + (size_t)r] == STORE_MOVE_APPLIED;
			applied[k][r] += side[1].res[2 * i + (size_t)r] == STORE_MOVE_APPLIED;
		}
	for (size_t i = 0; i < SETS_JOBS; i++) {
		struct job_rec rec;

		assert_int_equal(applied[i][0], 1);
		assert_int_equal(applied[i][1], 1);
		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, JS_EDGE_STARTED);
		store_job_rec_free(&rec);
		assert_int_equal(history_count(f, jobs[i].ident), h[i] + 2);
		assert_int_equal(job_column(f, jobs[i].ident, "n_history"), h[i] + 2);
		assert_int_equal(job_column(f, jobs[i].ident, "last_seq"), 2);
	}
	store_close(side[1].st);
}

/* ---- sends as sets (docs/coordinator.md, "Sends as sets") ---- */

static long long claimed_by(struct fixture *f, const char *job, const char *node)
{
	char sql[160];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM jobs WHERE ident = ? AND claimed_by = '%s'", node);
	return store_test_db_int(f->path, sql, job);
}

/* A chunk of first sends in one fold: its jobs and their devices' presence read with the
 * chunk, each job moved to transmited and recorded as sent once, on PostgreSQL with the
 * chunk's rows rather than move by move; the chunk's claims in one
 * statement, and the broker's acknowledgements ending them in one, this node's only. */
static void test_sends_as_sets(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[3];
	const char *ids[3];
	struct store_idents claim = {NULL, 0};
	long long h[3];

	make_group_jobs(f, jobs, 3, "sends", NULL);
	store_claims_setup(f->st, "node-a", 15);
	claim.v = calloc(3, sizeof(*claim.v));
	assert_non_null(claim.v);
	for (size_t i = 0; i < 3; i++) {
		ids[i] = jobs[i].ident;
		h[i] = history_count(f, jobs[i].ident);
	}
	/* the first job's device online, the second's not */
	assert_int_equal(
	    store_write(f->st,
			"UPDATE devices SET online = CASE WHEN entity_ident = ?1 THEN 1"
			" ELSE 0 END",
			NULL, 1, f->dev[0]),
	    RCS_OK);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	store_fold_begin_sets(f->st);
	/* PostgreSQL: the jobs recorded as sent are claimed with their rows; SQLite: by
	 * store_jobs_claim below */
	assert_int_equal(store_fold_claim_sends(f->st), store_test_pg());
	{
		bool held[2] = {true, true};

		assert_int_equal(store_fold_prefetch_sends(f->st, ids, 2, held), RCS_OK);
		assert_false(held[0]); /* no other transaction holds them */
		assert_false(held[1]);
	}
	for (size_t i = 0; i < 3; i++) {
		struct job_rec rec;
		bool online = false;
		int presence = -2;

		/* the chunk's read: the job's record and its device's presence, none for a job
		 * it did not read */
		assert_int_equal(store_fold_job(f->st, jobs[i].ident, &rec, &presence),
				 i < 2 ? RCS_OK : RCS_ERR_NOTFOUND);
		if (i < 2) {
			assert_string_equal(rec.ident, jobs[i].ident);
			assert_int_equal(rec.status, JS_PENDING);
			assert_string_equal(rec.variables, "{\"message\":\"hi\"}");
			assert_int_equal(store_device_presence(f->st, rec.client_root,
							       rec.entity_ident, &online),
					 RCS_OK);
			assert_int_equal(presence, online ? 1 : 0);
			assert_int_equal(presence, i == 0);
		} else {
			assert_int_equal(presence, -1);
		}
		store_job_rec_free(&rec);
	}
	for (size_t i = 0; i < 3; i++) {
		struct job_move m = {.ident = jobs[i].ident,
				     .to = JS_TRANSMITED,
				     .response = "sent",
				     .mark_sent = true,
				     .now = 500};
		enum store_move res = STORE_MOVE_DUPLICATE;
		struct job_rec rec;

		assert_int_equal(lifecycle_move_in_tx(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
		/* PostgreSQL: the row is written with the chunk's, not by its move */
		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, store_test_pg() ? JS_PENDING : JS_TRANSMITED);
		store_job_rec_free(&rec);
		if (i < 2) {
			int presence;

			assert_int_equal(store_fold_job(f->st, jobs[i].ident, &rec, &presence),
					 RCS_OK);
			assert_int_equal(rec.status, JS_TRANSMITED);
			store_job_rec_free(&rec);
		}
		if (i < 2)
			snprintf(claim.v[claim.n++], UUID_STR_LEN, "%.36s", jobs[i].ident);
	}
	if (!store_test_pg())
		assert_int_equal(store_jobs_claim(f->st, &claim, 500), RCS_OK);
	assert_int_equal(store_fold_end(f->st, true), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	for (size_t i = 0; i < 3; i++) {
		struct job_rec rec;

		assert_int_equal(store_job_rec_get(f->st, jobs[i].ident, &rec), RCS_OK);
		assert_int_equal(rec.status, JS_TRANSMITED);
		assert_string_equal(rec.response, "sent");
		store_job_rec_free(&rec);
		assert_int_equal(job_column(f, jobs[i].ident, "sends"), 1);
		assert_int_equal(job_column(f, jobs[i].ident, "sent_at"), 500);
		assert_int_equal(history_count(f, jobs[i].ident), h[i] + 1);
		assert_int_equal(job_column(f, jobs[i].ident, "n_history"), h[i] + 1);
		/* every job the chunk moved on PostgreSQL, the claimed ones on SQLite */
		assert_int_equal(claimed_by(f, jobs[i].ident, "node-a"), store_test_pg() || i < 2);
	}
	assert_int_equal(job_column(f, jobs[0].ident, "lease_until"), 515);
	/* the acknowledgements: this node's claims end, another node's stays */
	assert_int_equal(store_write(f->st,
				     "UPDATE jobs SET claimed_by = 'node-b' WHERE ident = ?1", NULL,
				     1, jobs[1].ident),
			 RCS_OK);
	snprintf(claim.v[claim.n++], UUID_STR_LEN, "%.36s", jobs[2].ident);
	assert_int_equal(store_jobs_unclaim(f->st, &claim), RCS_OK);
	assert_int_equal(claimed_by(f, jobs[0].ident, "node-a"), 0);
	assert_int_equal(job_column(f, jobs[0].ident, "lease_until"), -1);
	assert_int_equal(claimed_by(f, jobs[1].ident, "node-b"), 1);
	free(claim.v);
}

/* PostgreSQL: a device's report that moves its job on from transmited ends the claim of the
 * job's send with the row's write, the device having had the envelope; the broker's
 * acknowledgement after finds nothing to end (docs/architecture.md "Claims"). A later move
 * keeps the claim of a re-send, which its acknowledgement ends. */
static void test_report_ends_the_send_claim(void **state)
{
	struct fixture *f = *state;
	struct lifecycle lc = {.st = f->st};
	struct job_new jobs[2];
	enum store_move res[2];
	enum rcs_err errs[2];
	struct job_move m[2];

	if (!store_test_pg())
		skip(); /* SQLite: one coordinator, no claims on sends */
	make_group_jobs(f, jobs, 2, "claims", NULL);
	store_claims_setup(f->st, "node-a", 15);
	assert_int_equal(store_write(f->st,
				     "UPDATE jobs SET status = 'transmited', claimed_by = 'node-a',"
				     " lease_until = 515 WHERE ident = ?1",
				     NULL, 1, jobs[0].ident),
			 RCS_OK);
	assert_int_equal(store_write(f->st,
				     "UPDATE jobs SET status = 'edge_transmitted', last_seq = 1,"
				     " claimed_by = 'node-a', lease_until = 515 WHERE ident = ?1",
				     NULL, 1, jobs[1].ident),
			 RCS_OK);
	m[0] = (struct job_move){
	    .ident = jobs[0].ident, .to = JS_EDGE_TRANSMITTED, .seq = 1, .now = 501};
	m[1] =
	    (struct job_move){.ident = jobs[1].ident, .to = JS_EDGE_STARTED, .seq = 2, .now = 501};
	assert_int_equal(lifecycle_moves(&lc, m, 2, res, errs), RCS_OK);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(errs[i], RCS_OK);
		assert_int_equal(res[i], STORE_MOVE_APPLIED);
	}
	assert_int_equal(claimed_by(f, jobs[0].ident, "node-a"), 0);
	assert_int_equal(job_column(f, jobs[0].ident, "lease_until"), -1);
	assert_int_equal(claimed_by(f, jobs[1].ident, "node-a"), 1);
	assert_int_equal(job_column(f, jobs[1].ident, "lease_until"), 515);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_job_expiry),
	    cmocka_unit_test_setup_teardown(test_nested_tx_and_after_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reopen_and_schema, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_task_versions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_job_lifecycle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_then_late_report, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_move_hands_back_the_record, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fold_writes_what_moves_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fold_spoiled_by_a_rollback, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fold_of_many_jobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fold_then_group_abort, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_progress, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_pause_says_so, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sets_mixed_batch, setup, teardown),
#ifdef RCS_WITH_POSTGRES
	    cmocka_unit_test_setup_teardown(test_sets_batch_again_whole, setup, teardown),
#endif
#ifdef RCS_WITH_POSTGRES
	    cmocka_unit_test_setup_teardown(test_sets_leave_held_rows, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sends_leave_held_rows, setup, teardown),
#endif
	    cmocka_unit_test_setup_teardown(test_sets_wait_for_earlier_reports, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sets_overlapping_batches, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sends_as_sets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_ends_the_send_claim, setup, teardown),
#ifdef RCS_WITH_POSTGRES
	    cmocka_unit_test_setup_teardown(test_pg_moves_are_hot, setup, teardown),
#endif
	    cmocka_unit_test_setup_teardown(test_what_follows_a_move, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_webhook_outbox_follows_new_webhooks, setup,
					    teardown),
#ifdef RCS_WITH_POSTGRES
	    cmocka_unit_test_setup_teardown(test_webhook_tenants_kept_while_listening, setup,
					    teardown),
#endif
	    cmocka_unit_test_setup_teardown(test_lists_and_groups, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_jobs_json_batch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_job_record_as_before, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bulk_is_one_transaction, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bulk_sets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pg_large_batch_analyses, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
