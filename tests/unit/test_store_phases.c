/*
 * Unit tests of jobs that span a reboot (docs/api.md "Jobs", docs/mqtt.md "Status report"):
 * the job's and its history items' phase, stored by one move and by a batch of reports as
 * sets; the reboot deadline set by a "rebooting" report, cleared by the next one, pushed when
 * the coordinator comes; the scheduler's end of a job whose deadline passed (reboot_timeout,
 * with its group), claimed once between two coordinators; the device's later reports kept in
 * the history only. On a SQLite file, or on PostgreSQL with RCS_TEST_PG_URL (the .pg test).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"
#include "manifest.h"
#include "scheduler.h"
#include "store.h"
#include "store_devices.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_keys.h"
#include "store_queues.h"
#include "store_tasks.h"
#include "store_test_db.h"

struct fixture {
	char dir[64];
	char path[128];
	struct store *st;
	char root[UUID_STR_LEN];
	char task[UUID_STR_LEN];
	char dev[UUID_STR_LEN];
};

static const char *const SCRIPT = "return 'ok'";

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct task_write t;
	char sha[SHA256_HEX_LEN];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-phases-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_true(store_test_db(f->dir, f->path, sizeof(f->path)));
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(uuid_v7(f->root), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, f->root, 100), RCS_OK);
	assert_int_equal(store_script_put(f->st, "", "update", SCRIPT, strlen(SCRIPT), 100, NULL),
			 RCS_OK);
	assert_int_equal(uuid_v7(f->dev), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, f->dev, "d", "[]", 100), RCS_OK);
	sha256_hex(SCRIPT, strlen(SCRIPT), sha);
	memset(&t, 0, sizeof(t));
	assert_int_equal(uuid_v7(f->task), RCS_OK);
	t.ident = f->task;
	t.client_root = f->root;
	t.version = 1;
	t.name = "Update";
	t.script = "update";
	t.script_src = SCRIPT;
	t.script_len = strlen(SCRIPT);
	t.script_sha256 = sha;
	t.variables_info = "{}";
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

/* n jobs of the task on the device, in a group with settings when group is not NULL. */
static void make_jobs(struct fixture *f, struct job_new *jobs, size_t n, const char *group,
		      const struct group_settings *settings)
{
	struct job_batch b;
	char gid[UUID_STR_LEN];

	memset(&b, 0, sizeof(b));
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(uuid_v7(jobs[i].ident), RCS_OK);
		jobs[i].entity_ident = f->dev;
	}
	b.client_root = f->root;
	b.task_ident = f->task;
	b.task_version = 1;
	b.task_name = "Update";
	if (group) {
		assert_int_equal(uuid_v7(gid), RCS_OK);
		b.group_ident = gid;
		b.group_name = group;
		b.settings = settings;
	}
	b.created_user = "alice";
	b.variables = "{}";
	b.now = 200;
	b.jobs = jobs;
	b.n = n;
	assert_int_equal(store_jobs_create(f->st, &b), RCS_OK);
}

/* A device's report as the bridge makes its move (bridge_apply.c). */
struct report {
	enum job_status to;
	long long seq;
	const char *phase;
	int64_t within;
	int64_t now;
	const char *response;
};

static struct job_move report_move(struct fixture *f, const char *job, const struct report *r)
{
	struct job_move m = {.client_root = f->root,
			     .entity_ident = f->dev,
			     .ident = job,
			     .to = r->to,
			     .response = r->response,
			     .replace_response = true,
			     .set_response_time = status_is_terminal(r->to),
			     .seq = r->seq,
			     .phase = r->phase,
			     .within = r->within,
			     .now = r->now};
	return m;
}

/* The scheduler's wakes asked for by the moves (lifecycle.h timers). */
static int timers_woken;

static void timers_wake(void *ctx)
{
	(void)ctx;
	timers_woken++;
}

/* Reports applied one by one (lifecycle_move: the single path), each with its result. */
static void report_each(struct fixture *f, const char *job, const struct report *r, size_t n,
			enum store_move want)
{
	struct lifecycle lc = {.st = f->st, .timers = timers_wake};

	for (size_t i = 0; i < n; i++) {
		struct job_move m = report_move(f, job, &r[i]);
		enum store_move res = STORE_MOVE_DUPLICATE;

		assert_int_equal(lifecycle_move(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, want);
	}
}

/* Reports applied as one batch (lifecycle_moves: sets of rows on PostgreSQL, a fold on
 * SQLite), each with its result. */
static void report_batch(struct fixture *f, const char *job, const struct report *r, size_t n,
			 enum store_move want)
{
	struct lifecycle lc = {.st = f->st, .timers = timers_wake};
	struct job_move m[8];
	enum store_move res[8];
	enum rcs_err errs[8];

	assert_true(n <= 8);
	for (size_t i = 0; i < n; i++)
		m[i] = report_move(f, job, &r[i]);
	assert_int_equal(lifecycle_moves(&lc, m, n, res, errs), RCS_OK);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(errs[i], RCS_OK);
		assert_int_equal(res[i], want);
	}
}

static struct job_rec job_get(struct fixture *f, const char *ident)
{
	struct job_rec r;

	assert_int_equal(store_job_rec_get(f->st, ident, &r), RCS_OK);
	return r;
}

static void assert_phase(struct fixture *f, const char *ident, const char *phase, int64_t within,
			 int64_t deadline)
{
	struct job_rec r = job_get(f, ident);

	if (phase == NULL)
		assert_null(r.phase);
	else
		assert_string_equal(r.phase, phase);
	assert_int_equal(r.reboot_within, within);
	assert_int_equal(r.reboot_deadline, deadline);
	store_job_rec_free(&r);
}

/* The phase of a job's history item n (1 is initial), "" for none. */
static void assert_history_phase(struct fixture *f, const char *ident, int n, const char *phase)
{
	struct store_page pg = {.page = 1, .per_page = 50, .desc = false};
	struct store_history_list l;
	struct job_rec job;

	assert_int_equal(store_job_history(f->st, f->root, ident, &pg, &job, &l), RCS_OK);
	assert_true((size_t)n <= l.n);
	if (phase[0] == '\0')
		assert_null(l.items[n - 1].phase);
	else
		assert_string_equal(l.items[n - 1].phase, phase);
	store_history_list_free(&l);
	store_job_rec_free(&job);
}

/* The phase and deadline, by one move at a time and by a batch alike: a report's phase is
 * the job's (none: null), a "rebooting" one sets the deadline, the next report clears it,
 * the final report's phase is kept. */
static void test_phase_and_deadline(void **state)
{
	struct fixture *f = *state;
	struct job_new jobs[2];
	const struct report upto_reboot[] = {
	    {JS_EDGE_TRANSMITTED, 1, NULL, 0, 300, NULL},
	    {JS_EDGE_STARTED, 2, NULL, 0, 301, NULL},
	    {JS_EDGE_RUNNING, 3, "install", 0, 302, "installing"},
	    {JS_EDGE_RUNNING, 4, "verify", 60, 1000, "rebooting"},
	};
	const struct report after[] = {
	    {JS_EDGE_RUNNING, 5, "verify", 0, 1050, "checking"},
	    {JS_EDGE_RUNNING, 6, NULL, 0, 1051, "no phase"},
	    {JS_TERMINATED, 7, "verify", 0, 1052, "1.2.0"},
	};

	make_jobs(f, jobs, 2, NULL, NULL);
	assert_phase(f, jobs[0].ident, NULL, 0, 0);
	timers_woken = 0;
	report_each(f, jobs[0].ident, upto_reboot, 3, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, "install", 0, 0);
	assert_int_equal(timers_woken, 0);
	report_each(f, jobs[0].ident, upto_reboot + 3, 1, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, "verify", 60, 1060);
	/* the deadline set wakes the scheduler, which looks for its next one */
	assert_int_equal(timers_woken, 1);
	/* the batch: the four reports of the other job in one */
	report_batch(f, jobs[1].ident, upto_reboot, 4, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[1].ident, "verify", 60, 1060);
	assert_int_equal(timers_woken, 2);
	for (int j = 0; j < 2; j++) {
		assert_history_phase(f, jobs[j].ident, 4, "");
		assert_history_phase(f, jobs[j].ident, 5, "install");
		assert_history_phase(f, jobs[j].ident, 6, "verify");
	}

	/* the coordinator came at 1030: the deadlines are now + within at least; an earlier
	 * coming changes nothing */
	assert_int_equal(store_jobs_reboot_push(f->st, 1030), RCS_OK);
	assert_phase(f, jobs[0].ident, "verify", 60, 1090);
	assert_int_equal(store_jobs_reboot_push(f->st, 900), RCS_OK);
	assert_phase(f, jobs[1].ident, "verify", 60, 1090);
	/* the wall clock went back to 500: a deadline is 500 + within at most, until the next
	 * push */
	assert_int_equal(store_jobs_clock_back(f->st, 500), RCS_OK);
	assert_phase(f, jobs[0].ident, "verify", 60, 560);
	assert_int_equal(store_jobs_reboot_push(f->st, 1030), RCS_OK);
	assert_phase(f, jobs[0].ident, "verify", 60, 1090);

	/* the device came back: the next report clears the deadline, a report without a
	 * phase clears the phase, the final one's phase is kept */
	report_each(f, jobs[0].ident, after, 1, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, "verify", 0, 0);
	report_each(f, jobs[0].ident, after + 1, 1, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, NULL, 0, 0);
	report_each(f, jobs[0].ident, after + 2, 1, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, "verify", 0, 0);
	report_batch(f, jobs[1].ident, after, 3, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[1].ident, "verify", 0, 0);
	for (int j = 0; j < 2; j++) {
		assert_history_phase(f, jobs[j].ident, 7, "verify");
		assert_history_phase(f, jobs[j].ident, 8, "");
		assert_history_phase(f, jobs[j].ident, 9, "verify");
	}
	/* nothing is due any more, and a push finds no deadline */
	assert_int_equal(store_jobs_reboot_push(f->st, 5000), RCS_OK);
	assert_phase(f, jobs[1].ident, "verify", 0, 0);
	{
		size_t moved = 0;
		struct lifecycle lc = {.st = f->st};

		assert_int_equal(sched_reboot_timeouts(f->st, &lc, 5000, &moved), 0);
	}
}

static long long db_int(struct fixture *f, const char *sql, const char *param)
{
	return store_test_db_int(f->path, sql, param);
}

/* The scheduler ends a job whose device did not come back, once between two coordinators,
 * counted by its group as a failure never retried; the device's later reports, one at a time
 * or in a batch, are history only. */
static void test_reboot_timeout(void **state)
{
	struct fixture *f = *state;
	struct store *b = NULL;
	struct lifecycle lc = {.st = f->st}, lc_b;
	struct group_settings gs = {
	    .has_retry = true, .max_attempts = 3, .backoff_s = 30, .backoff_milli = 1000};
	struct job_new jobs[1];
	const struct report go[] = {
	    {JS_EDGE_TRANSMITTED, 1, NULL, 0, 300, NULL},
	    {JS_EDGE_STARTED, 2, NULL, 0, 301, NULL},
	    {JS_EDGE_RUNNING, 3, "verify", 30, 1000, "rebooting"},
	};
	const struct report late[] = {
	    {JS_EDGE_RUNNING, 4, "commit", 0, 1100, "back"},
	    {JS_TERMINATED, 5, "commit", 0, 1101, "1.2.0"},
	};
	struct job_rec r;
	size_t moved = 0;

	assert_int_equal(store_open(f->path, &b), RCS_OK);
	lc_b = (struct lifecycle){.st = b};
	store_claims_setup(f->st, "node-a", 15);
	store_claims_setup(b, "node-b", 15);
	make_jobs(f, jobs, 1, "rollout", &gs);
	{
		struct job_move m = {
		    .ident = jobs[0].ident, .to = JS_TRANSMITED, .mark_sent = true, .now = 250};
		enum store_move res;

		assert_int_equal(lifecycle_move(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, STORE_MOVE_APPLIED);
	}
	report_each(f, jobs[0].ident, go, 3, STORE_MOVE_APPLIED);
	assert_phase(f, jobs[0].ident, "verify", 30, 1030);

	/* not yet due */
	assert_int_equal(sched_reboot_timeouts(f->st, &lc, 1029, &moved), 0);
	assert_int_equal(moved, 0);
	/* a job that came back between the claim and the move is left as it is */
	{
		struct job_move m = {.ident = jobs[0].ident,
				     .to = JS_EDGE_ERROR,
				     .now = 1029,
				     .error_code = "reboot_timeout",
				     .reboot_timeout = true};
		enum store_move res = STORE_MOVE_APPLIED;

		assert_int_equal(lifecycle_move(&lc, &m, &res, NULL), RCS_OK);
		assert_int_equal(res, STORE_MOVE_DUPLICATE);
	}
	/* due: node-a claims it first, node-b passes it over, node-a ends it */
	{
		struct store_idents ids;

		assert_int_equal(store_jobs_reboot_due(f->st, 1030, 10, &ids), RCS_OK);
		assert_int_equal(ids.n, 1);
		store_idents_free(&ids);
	}
	assert_int_equal(sched_reboot_timeouts(b, &lc_b, 1030, &moved), 0);
	assert_int_equal(sched_reboot_timeouts(f->st, &lc, 1031, &moved), 1);
	assert_int_equal(moved, 1);
	/* ended: neither ends it again, even once the claim ran out */
	assert_int_equal(sched_reboot_timeouts(b, &lc_b, 1100, &moved), 0);
	assert_int_equal(sched_reboot_timeouts(f->st, &lc, 1100, &moved), 0);
	assert_int_equal(moved, 1);
	r = job_get(f, jobs[0].ident);
	assert_int_equal(r.status, JS_EDGE_ERROR);
	assert_string_equal(r.error_code, "reboot_timeout");
	assert_string_equal(r.response, "device did not come back within 30 s");
	assert_int_equal(r.response_time, 1031);
	assert_string_equal(r.phase, "verify");
	assert_int_equal(r.reboot_deadline, 0);
	store_job_rec_free(&r);
	assert_int_equal(db_int(f,
				"SELECT count(*) FROM job_history WHERE job_ident = ?"
				" AND status = 'edge_error'",
				jobs[0].ident),
			 1);
	/* the group counts it failed and never retries it (its retry would make a job) */
	assert_int_equal(db_int(f,
				"SELECT count(*) FROM jobs WHERE group_ident ="
				" (SELECT group_ident FROM jobs WHERE ident = ?)",
				jobs[0].ident),
			 1);
	assert_int_equal(db_int(f,
				"SELECT n_failed * 10 + n_finished FROM groups WHERE ident ="
				" (SELECT group_ident FROM jobs WHERE ident = ?)",
				jobs[0].ident),
			 11);

	/* the device's later reports: history only, one at a time and in a batch */
	report_each(f, jobs[0].ident, late, 1, STORE_MOVE_KEPT);
	report_batch(f, jobs[0].ident, late + 1, 1, STORE_MOVE_KEPT);
	r = job_get(f, jobs[0].ident);
	assert_int_equal(r.status, JS_EDGE_ERROR);
	assert_string_equal(r.error_code, "reboot_timeout");
	assert_string_equal(r.response, "device did not come back within 30 s");
	assert_string_equal(r.phase, "verify");
	store_job_rec_free(&r);
	assert_int_equal(
	    db_int(f, "SELECT count(*) FROM job_history WHERE job_ident = ?", jobs[0].ident), 9);
	assert_history_phase(f, jobs[0].ident, 8, "commit");
	assert_history_phase(f, jobs[0].ident, 9, "commit");
	/* a repeat of a kept report is a duplicate */
	report_each(f, jobs[0].ident, late + 1, 1, STORE_MOVE_DUPLICATE);
	store_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_phase_and_deadline, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reboot_timeout, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
