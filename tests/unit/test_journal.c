/*
 * test_journal.c - the agent's journal (agent/journal.c): exactly-once
 * receipt, arrival order, report seqs and the outbox across restarts, final
 * report resends, jobs interrupted by a crash, task versions, settings,
 * pruning, bounds, a full disk, and two threads at once.
 *
 * Each test gets its own state directory under $TMPDIR. Some tests look into
 * or prepare the database with their own SQLite connection (the journal is
 * in WAL mode, so that is safe) to see what the API does not show (pruned
 * payloads) or to fill it quickly (10,000 outbox rows).
 */
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "journal.h"
#include "proto.h"

#define JOB_A  "ffffffff-0000-4000-8000-00000000000a"
#define JOB_B  "00000000-0000-4000-8000-00000000000b"
#define JOB_C  "88888888-0000-4000-8000-00000000000c"
#define TASK_1 "0b9d4e2f-7a61-4c83-b5d2-9e1f3a6c8d70"
#define NOW    1732200000

struct fx {
	char dir[512];
	char db[600];
	struct journal *j;
};

/* ---- helpers ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct fx *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "%s/rcs-test-journal-XXXXXX",
		 base != NULL && *base != '\0' ? base : "/tmp");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	snprintf(f->db, sizeof(f->db), "%s/%s", f->dir, JOURNAL_FILE);
	if (journal_open(f->dir, &f->j) != RCS_OK) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	journal_close(f->j);
	nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static void reopen(struct fx *f)
{
	journal_close(f->j);
	f->j = NULL;
	assert_int_equal(journal_open(f->dir, &f->j), RCS_OK);
}

static void receive(struct fx *f, const char *job, const char *payload, bool want_new)
{
	bool is_new = !want_new;

	assert_int_equal(
	    journal_receive(f->j, job, TASK_1, 3, payload, strlen(payload), NOW, &is_new), RCS_OK);
	assert_int_equal(is_new, want_new);
}

static enum journal_state state_of(struct fx *f, const char *job)
{
	enum journal_state st = JOURNAL_DROPPED;

	assert_int_equal(journal_get_state(f->j, job, &st), RCS_OK);
	return st;
}

static size_t outbox_count(struct fx *f)
{
	size_t n = 99999;

	assert_int_equal(journal_outbox_count(f->j, &n), RCS_OK);
	return n;
}

/* Reports and checks the payload; returns the outbox id. */
static long long report(struct fx *f, const char *job, enum job_status st, const char *response,
			long long want_seq)
{
	struct proto_report r;
	struct jsonu_err e;
	char *payload = NULL;
	long long id = 0;

	assert_int_equal(journal_report(f->j, job, st, response, NOW + want_seq, &id, &payload),
			 RCS_OK);
	assert_true(id > 0);
	assert_non_null(payload);
	assert_int_equal(proto_report_decode(payload, strlen(payload), &r, &e), RCS_OK);
	assert_string_equal(r.job, job);
	assert_int_equal(r.status, st);
	assert_int_equal(r.seq, want_seq);
	assert_int_equal(r.ts, NOW + want_seq);
	if (response == NULL)
		assert_null(r.response);
	else
		assert_string_equal(r.response, response);
	proto_report_free(&r);
	free(payload);
	return id;
}

static long long seq_of(const char *payload)
{
	struct proto_report r;
	struct jsonu_err e;
	long long seq;

	assert_int_equal(proto_report_decode(payload, strlen(payload), &r, &e), RCS_OK);
	seq = r.seq;
	proto_report_free(&r);
	return seq;
}

/* Runs SQL on the journal file with a second connection. */
static void sql(struct fx *f, const char *text)
{
	sqlite3 *db = NULL;
	char *msg = NULL;

	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	if (sqlite3_exec(db, text, NULL, NULL, &msg) != SQLITE_OK)
		fail_msg("%s: %s", text, msg);
	sqlite3_close(db);
}

/* One integer from a query on a second connection. */
static long long sql_int(struct fx *f, const char *text)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	long long v;

	assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, text, -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	v = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return v;
}

/* ---- receive, state, queue ---- */

static void test_receive_once(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN];
	char *payload = NULL;
	size_t len = 0;

	receive(f, JOB_A, "{\"first\":1}", true);
	receive(f, JOB_A, "{\"second\":2}", false);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_QUEUED);
	/* the second copy changed nothing */
	assert_int_equal(journal_next_queued(f->j, job, &payload, &len), RCS_OK);
	assert_string_equal(job, JOB_A);
	assert_string_equal(payload, "{\"first\":1}");
	assert_int_equal(len, strlen("{\"first\":1}"));
	free(payload);
	/* seen before in any state */
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_DONE), RCS_OK);
	receive(f, JOB_A, "{}", false);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_DONE);
}

static void test_queue_order(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN];
	char *payload = NULL;
	size_t n = 0, len;

	assert_int_equal(journal_next_queued(f->j, job, &payload, &len), RCS_ERR_NOTFOUND);
	assert_null(payload);
	/* arrival order, not ident order */
	receive(f, JOB_A, "a", true);
	receive(f, JOB_B, "b", true);
	receive(f, JOB_C, "c", true);
	assert_int_equal(journal_count_queued(f->j, &n), RCS_OK);
	assert_int_equal(n, 3);
	assert_int_equal(journal_next_queued(f->j, job, &payload, &len), RCS_OK);
	assert_string_equal(job, JOB_A);
	assert_string_equal(payload, "a");
	free(payload);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_next_queued(f->j, job, &payload, &len), RCS_OK);
	assert_string_equal(job, JOB_B);
	free(payload);
	assert_int_equal(journal_set_state(f->j, JOB_B, JOURNAL_DROPPED), RCS_OK);
	assert_int_equal(journal_count_queued(f->j, &n), RCS_OK);
	assert_int_equal(n, 1);
	assert_int_equal(journal_next_queued(f->j, job, &payload, &len), RCS_OK);
	assert_string_equal(job, JOB_C);
	free(payload);
}

static void test_state_moves(void **state)
{
	struct fx *f = *state;
	enum journal_state st;

	assert_int_equal(journal_get_state(f->j, JOB_A, &st), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_RUNNING), RCS_ERR_NOTFOUND);
	receive(f, JOB_A, "a", true);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_QUEUED), RCS_OK);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_QUEUED), RCS_ERR_CONFLICT);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_DONE), RCS_OK);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_DONE), RCS_OK);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_RUNNING), RCS_ERR_CONFLICT);
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_DROPPED), RCS_ERR_CONFLICT);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_DONE);
	assert_int_equal(journal_set_state(f->j, JOB_A, (enum journal_state)7), RCS_ERR_INVAL);
	assert_string_equal(journal_state_name(JOURNAL_DROPPED), "dropped");
}

static void test_bad_arguments(void **state)
{
	struct fx *f = *state;
	bool is_new = true;
	char *p = NULL;

	assert_int_equal(journal_receive(f->j, "not-a-uuid", TASK_1, 1, "x", 1, NOW, &is_new),
			 RCS_ERR_INVAL);
	assert_false(is_new);
	assert_int_equal(journal_receive(f->j, JOB_A, TASK_1, 1, NULL, 1, NOW, &is_new),
			 RCS_ERR_INVAL);
	assert_int_equal(journal_receive(NULL, JOB_A, TASK_1, 1, "x", 1, NOW, &is_new),
			 RCS_ERR_INVAL);
	assert_int_equal(journal_report(f->j, JOB_A, JS_EDGE_RUNNING, NULL, NOW, NULL, &p),
			 RCS_ERR_NOTFOUND);
	assert_null(p);
	/* an envelope that could not be decoded is still recorded, to report on */
	assert_int_equal(journal_receive(f->j, JOB_B, NULL, 0, "{", 1, NOW, &is_new), RCS_OK);
	assert_true(is_new);
	assert_int_equal(journal_open("", NULL), RCS_ERR_INVAL);
}

static void test_bounded_sizes(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN];
	char *big = malloc(PROTO_MAX_PAYLOAD + 2), *p = NULL;
	bool is_new = false;
	size_t len = 0;

	assert_non_null(big);
	memset(big, 'x', PROTO_MAX_PAYLOAD + 1);
	big[PROTO_MAX_PAYLOAD + 1] = '\0';
	assert_int_equal(
	    journal_receive(f->j, JOB_A, TASK_1, 1, big, PROTO_MAX_PAYLOAD + 1, NOW, &is_new),
	    RCS_ERR_TOOBIG);
	assert_int_equal(journal_get_state(f->j, JOB_A, &(enum journal_state){0}),
			 RCS_ERR_NOTFOUND);
	assert_int_equal(
	    journal_receive(f->j, JOB_A, TASK_1, 1, big, PROTO_MAX_PAYLOAD, NOW, &is_new), RCS_OK);
	assert_true(is_new);
	assert_int_equal(journal_next_queued(f->j, job, &p, &len), RCS_OK);
	assert_int_equal(len, PROTO_MAX_PAYLOAD);
	assert_int_equal(memcmp(p, big, len), 0);
	free(p);
	p = NULL;

	/* a response of at most PROTO_MAX_RESPONSE bytes */
	big[PROTO_MAX_RESPONSE + 1] = '\0';
	assert_int_equal(journal_report(f->j, JOB_A, JS_TERMINATED, big, NOW, NULL, &p),
			 RCS_ERR_TOOBIG);
	assert_null(p);
	assert_int_equal(outbox_count(f), 0);
	big[PROTO_MAX_RESPONSE] = '\0';
	assert_int_equal(journal_report(f->j, JOB_A, JS_TERMINATED, big, NOW, NULL, &p), RCS_OK);
	assert_true(strlen(p) > PROTO_MAX_RESPONSE);
	free(p);

	/* task idents */
	assert_int_equal(journal_task_version_set(f->j, "", 1), RCS_ERR_INVAL);
	memset(big, 't', 65);
	big[65] = '\0';
	assert_int_equal(journal_task_version_set(f->j, big, 1), RCS_ERR_INVAL);
	free(big);
}

/* ---- reports, outbox, restarts ---- */

static void test_report_seq_and_outbox(void **state)
{
	struct fx *f = *state;
	char *p = NULL;
	long long id1, id2, id3;

	receive(f, JOB_A, "a", true);
	id1 = report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	id2 = report(f, JOB_A, JS_EDGE_STARTED, NULL, 2);
	id3 = report(f, JOB_A, JS_EDGE_RUNNING, "10%", 3);
	report(f, JOB_A, JS_EDGE_RUNNING, "20%", 4); /* progress repeats */
	assert_true(id1 < id2 && id2 < id3);
	assert_int_equal(outbox_count(f), 4);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_QUEUED); /* reports don't run jobs */

	/* forward only; device statuses only */
	assert_int_equal(journal_report(f->j, JOB_A, JS_EDGE_STARTED, NULL, NOW, NULL, &p),
			 RCS_ERR_CONFLICT);
	assert_int_equal(journal_report(f->j, JOB_A, JS_CANCELLED, NULL, NOW, NULL, &p),
			 RCS_ERR_INVAL);
	assert_int_equal(journal_report(f->j, JOB_A, JS_PENDING, NULL, NOW, NULL, &p),
			 RCS_ERR_INVAL);
	assert_null(p);
	assert_int_equal(outbox_count(f), 4);

	/* terminal: DONE, final, nothing after it */
	report(f, JOB_A, JS_TERMINATED, "{\"ok\":true}", 5);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_DONE);
	assert_int_equal(journal_report(f->j, JOB_A, JS_EDGE_ERROR, "late", NOW, NULL, NULL),
			 RCS_ERR_CONFLICT);
	assert_int_equal(journal_report(f->j, JOB_A, JS_EDGE_RUNNING, "late", NOW, NULL, NULL),
			 RCS_ERR_CONFLICT);
	assert_int_equal(outbox_count(f), 5);

	/* a dropped job stays dropped when its final report is made */
	receive(f, JOB_B, "b", true);
	assert_int_equal(journal_set_state(f->j, JOB_B, JOURNAL_DROPPED), RCS_OK);
	report(f, JOB_B, JS_EDGE_ERROR, "cancelled", 1);
	assert_int_equal(state_of(f, JOB_B), JOURNAL_DROPPED);
}

struct collected {
	int n;
	long long ids[16];
	char jobs[16][UUID_STR_LEN];
	long long seqs[16];
	struct journal *ack_with; /* when set, acks each row from inside the callback */
};

static void collect(void *ctx, long long id, const char *job, const char *payload)
{
	struct collected *c = ctx;

	assert_true(c->n < 16);
	c->ids[c->n] = id;
	snprintf(c->jobs[c->n], UUID_STR_LEN, "%s", job);
	c->seqs[c->n] = seq_of(payload);
	c->n++;
	if (c->ack_with != NULL)
		assert_int_equal(journal_outbox_ack(c->ack_with, id), RCS_OK);
}

static void test_durable_across_restart(void **state)
{
	struct fx *f = *state;
	struct collected c;
	char job[UUID_STR_LEN];
	char *p = NULL;
	size_t n = 0, len;

	receive(f, JOB_A, "a", true);
	receive(f, JOB_B, "b", true);
	receive(f, JOB_C, "c", true);
	report(f, JOB_B, JS_EDGE_TRANSMITTED, NULL, 1);
	report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	report(f, JOB_B, JS_EDGE_STARTED, NULL, 2);
	reopen(f);

	/* the queue, in arrival order */
	assert_int_equal(journal_count_queued(f->j, &n), RCS_OK);
	assert_int_equal(n, 3);
	assert_int_equal(journal_next_queued(f->j, job, &p, &len), RCS_OK);
	assert_string_equal(job, JOB_A);
	free(p);
	receive(f, JOB_A, "a", false);

	/* the outbox, oldest first, until acknowledged */
	memset(&c, 0, sizeof(c));
	assert_int_equal(journal_outbox_each(f->j, 100, collect, &c), RCS_OK);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.jobs[0], JOB_B);
	assert_int_equal(c.seqs[0], 1);
	assert_string_equal(c.jobs[1], JOB_A);
	assert_string_equal(c.jobs[2], JOB_B);
	assert_int_equal(c.seqs[2], 2);
	assert_int_equal(journal_synchronous(f->j), 2);
	assert_int_equal(journal_outbox_ack(f->j, c.ids[0]), RCS_OK);
	/* the acknowledgement skipped its own sync; every later commit is synced again */
	assert_int_equal(journal_synchronous(f->j), 2);
	assert_int_equal(journal_outbox_ack(f->j, c.ids[0]), RCS_OK); /* twice: harmless */
	assert_int_equal(journal_outbox_ack(f->j, 0), RCS_ERR_INVAL);
	assert_int_equal(journal_synchronous(f->j), 2);

	/* seqs continue where they were */
	report(f, JOB_B, JS_EDGE_RUNNING, NULL, 3);
	report(f, JOB_A, JS_EDGE_STARTED, NULL, 2);
	reopen(f);
	assert_int_equal(outbox_count(f), 4);
	report(f, JOB_B, JS_TERMINATED, "done", 4);

	/* at most max rows; acking from the callback works (no lock held) */
	memset(&c, 0, sizeof(c));
	assert_int_equal(journal_outbox_each(f->j, 2, collect, &c), RCS_OK);
	assert_int_equal(c.n, 2);
	memset(&c, 0, sizeof(c));
	c.ack_with = f->j;
	assert_int_equal(journal_outbox_each(f->j, 100, collect, &c), RCS_OK);
	assert_int_equal(c.n, 5);
	for (int i = 1; i < c.n; i++)
		assert_true(c.ids[i - 1] < c.ids[i]);
	assert_int_equal(outbox_count(f), 0);
	reopen(f);
	assert_int_equal(outbox_count(f), 0);

	/* ids are never reused after the rows are gone */
	assert_true(report(f, JOB_A, JS_EDGE_RUNNING, NULL, 3) > c.ids[c.n - 1]);
}

static void test_resend(void **state)
{
	struct fx *f = *state;
	char *p = NULL, *final = NULL;
	long long id = 0, id2 = 0, final_id;

	receive(f, JOB_A, "a", true);
	assert_int_equal(journal_resend_latest(f->j, JOB_A, &id, &p), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_resend_final(f->j, JOB_A, &id, &p), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_resend_final(f->j, JOB_C, &id, &p), RCS_ERR_NOTFOUND);
	assert_null(p);
	report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	report(f, JOB_A, JS_EDGE_STARTED, NULL, 2);

	/* unfinished: the latest report; pending in the outbox -> that row */
	assert_int_equal(journal_resend_final(f->j, JOB_A, &id, &p), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_resend_latest(f->j, JOB_A, &id, &p), RCS_OK);
	assert_int_equal(seq_of(p), 2);
	free(p);
	assert_int_equal(outbox_count(f), 2);

	final_id = report(f, JOB_A, JS_EDGE_ERROR, "script error", 3);
	assert_int_equal(journal_resend_final(f->j, JOB_A, &id, &final), RCS_OK);
	assert_int_equal(id, final_id); /* still waiting: not a second copy */
	assert_int_equal(seq_of(final), 3);
	assert_int_equal(outbox_count(f), 3);

	/* acknowledged, then the job comes again: a new row, same bytes, same seq */
	assert_int_equal(journal_outbox_ack(f->j, final_id), RCS_OK);
	reopen(f);
	assert_int_equal(journal_resend_final(f->j, JOB_A, &id2, &p), RCS_OK);
	assert_true(id2 > final_id);
	assert_string_equal(p, final);
	free(p);
	assert_int_equal(journal_resend_latest(f->j, JOB_A, &id, &p), RCS_OK);
	assert_int_equal(id, id2);
	assert_string_equal(p, final);
	free(p);
	assert_int_equal(outbox_count(f), 3);
	/* and the seq was not used up: no report can follow a final one anyway */
	assert_int_equal(sql_int(f, "SELECT last_seq FROM jobs WHERE ident = '" JOB_A "'"), 3);
	free(final);
}

/* An edge_error's cause (docs/mqtt.md "Status report") is in the report and in the final
 * report sent again to a repeated envelope. */
static void test_report_cause(void **state)
{
	struct fx *f = *state;
	struct proto_report r;
	struct jsonu_err e;
	char *p = NULL;
	long long id = 0;

	receive(f, JOB_A, "a", true);
	report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	assert_int_equal(
	    journal_report_cause(f->j, JOB_A, JS_EDGE_ERROR, "boom", "script_error", NOW, &id, &p),
	    RCS_OK);
	assert_int_equal(proto_report_decode(p, strlen(p), &r, &e), RCS_OK);
	assert_string_equal(r.error, "script_error");
	assert_string_equal(r.response, "boom");
	proto_report_free(&r);
	free(p);
	p = NULL;
	assert_int_equal(journal_outbox_ack(f->j, id), RCS_OK);
	assert_int_equal(journal_resend_final(f->j, JOB_A, &id, &p), RCS_OK);
	assert_non_null(strstr(p, "\"error\":\"script_error\""));
	free(p);
}

static void interrupted(void *ctx, const char *job)
{
	struct fx *f = ctx;

	/* what the agent does at start; calling back into the journal is fine */
	assert_int_equal(journal_report(f->j, job, JS_EDGE_ERROR, "interrupted", NOW, NULL, NULL),
			 RCS_OK);
}

static void count_running(void *ctx, const char *job)
{
	(void)job;
	(*(int *)ctx)++;
}

static void test_running_at_crash(void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int n = 0, st = 0;

	receive(f, JOB_A, "a", true);
	journal_close(f->j);
	f->j = NULL;
	/* a child runs two jobs and dies without closing anything */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct journal *j = NULL;
		bool is_new = false;

		if (journal_open(f->dir, &j) != RCS_OK ||
		    journal_receive(j, JOB_B, TASK_1, 1, "b", 1, NOW, &is_new) != RCS_OK ||
		    journal_receive(j, JOB_C, TASK_1, 1, "c", 1, NOW, &is_new) != RCS_OK ||
		    journal_report(j, JOB_B, JS_EDGE_TRANSMITTED, NULL, NOW, NULL, NULL) !=
			RCS_OK ||
		    journal_set_state(j, JOB_B, JOURNAL_RUNNING) != RCS_OK ||
		    journal_report(j, JOB_B, JS_EDGE_STARTED, NULL, NOW, NULL, NULL) != RCS_OK ||
		    journal_set_state(j, JOB_C, JOURNAL_RUNNING) != RCS_OK)
			_exit(1);
		raise(SIGKILL); /* power loss, as near as a process gets */
		_exit(2);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	assert_int_equal(journal_open(f->dir, &f->j), RCS_OK);

	assert_int_equal(journal_each_running(f->j, count_running, &n), RCS_OK);
	assert_int_equal(n, 2);
	assert_int_equal(journal_each_running(f->j, interrupted, f), RCS_OK);
	assert_int_equal(state_of(f, JOB_B), JOURNAL_DONE);
	assert_int_equal(state_of(f, JOB_C), JOURNAL_DONE);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_QUEUED);
	n = 0;
	assert_int_equal(journal_each_running(f->j, count_running, &n), RCS_OK);
	assert_int_equal(n, 0);
	/* B's interrupted report continues its seqs, C's starts them */
	assert_int_equal(sql_int(f, "SELECT max(seq) FROM outbox WHERE job = '" JOB_B "'"), 3);
	assert_int_equal(sql_int(f, "SELECT max(seq) FROM outbox WHERE job = '" JOB_C "'"), 1);
}

/* ---- phases (docs/agent.md "Phases") ---- */

/* A job that asks to be continued after a reboot: its phase, runs and boot id journaled,
 * every later report carrying the phase, resumed first, and a phase cut short PHASE runs
 * left RUNNING for journal_each_running. */
static void test_phases(void **state)
{
	struct fx *f = *state;
	struct journal_phase ph;
	char job[UUID_STR_LEN], *p = NULL, *st = NULL;
	char big[JOURNAL_MAX_SCRIPT_STATE + 2];
	size_t len = 0, n = 0;

	receive(f, JOB_A, "a", true);
	receive(f, JOB_B, "b", true);
	assert_int_equal(journal_set_state(f->j, JOB_B, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_phase_get(f->j, JOB_B, &ph), RCS_OK);
	assert_string_equal(ph.phase, "");
	assert_false(ph.waiting);
	assert_int_equal(journal_report(f->j, JOB_B, JS_EDGE_STARTED, NULL, NOW, NULL, &p), RCS_OK);
	assert_null(strstr(p, "\"phase\""));
	free(p);
	/* rcs.state, journaled as it is set, any job */
	assert_int_equal(journal_script_state_get(f->j, JOB_B, &st), RCS_OK);
	assert_null(st);
	assert_int_equal(journal_script_state_set(f->j, JOB_B, "{\"expect\":\"2.0\"}"), RCS_OK);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(journal_script_state_set(f->j, JOB_B, big), RCS_ERR_TOOBIG);
	assert_int_equal(journal_script_state_get(f->j, JOB_B, &st), RCS_OK);
	assert_string_equal(st, "{\"expect\":\"2.0\"}");
	free(st);
	/* bad phases and boot ids change nothing */
	assert_int_equal(journal_phase_reboot(f->j, JOB_B, "Verify", "b1"), RCS_ERR_INVAL);
	assert_int_equal(journal_phase_reboot(f->j, JOB_B, "", "b1"), RCS_ERR_INVAL);
	assert_int_equal(
	    journal_phase_reboot(f->j, JOB_B, "abcdefghijklmnopqrstuvwxyz0123456", "b1"),
	    RCS_ERR_INVAL);
	assert_int_equal(journal_phase_reboot(f->j, JOB_A, "verify", "b1"), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_phase_start(f->j, JOB_B, "b1"), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_phase_get(f->j, JOB_B, &ph), RCS_OK);
	assert_string_equal(ph.phase, "");
	/* rcs.reboot{resume = "verify"}: the phase, then the rebooting report with it */
	assert_int_equal(journal_phase_reboot(f->j, JOB_B, "verify", "boot-1"), RCS_OK);
	assert_int_equal(journal_report_rebooting(f->j, JOB_B, 10, NOW, NULL, NULL), RCS_ERR_INVAL);
	assert_int_equal(journal_report_rebooting(f->j, JOB_B, 900, NOW, NULL, &p), RCS_OK);
	assert_non_null(strstr(p, "\"phase\":\"verify\""));
	assert_non_null(strstr(p, "\"within\":900"));
	assert_non_null(strstr(p, "\"response\":\"rebooting\""));
	free(p);
	assert_int_equal(journal_phase_get(f->j, JOB_B, &ph), RCS_OK);
	assert_string_equal(ph.phase, "verify");
	assert_true(ph.waiting);
	assert_int_equal(ph.runs, 0);
	assert_int_equal(ph.reboots, 1);
	assert_string_equal(ph.boot_id, "boot-1");
	/* it survives a restart, and resumes before the job that arrived first */
	journal_close(f->j);
	f->j = NULL;
	assert_int_equal(journal_open(f->dir, &f->j), RCS_OK);
	assert_int_equal(journal_requeue_phases(f->j, 3, &n), RCS_OK);
	assert_int_equal(n, 1);
	assert_int_equal(journal_next_queued(f->j, job, &p, &len), RCS_OK);
	assert_string_equal(job, JOB_B);
	free(p);
	assert_int_equal(journal_set_state(f->j, JOB_B, JOURNAL_RUNNING), RCS_OK);
	/* its runs: each one counted, the boot id it ran under kept */
	for (int run = 1; run <= 3; run++) {
		assert_int_equal(journal_phase_start(f->j, JOB_B, run == 1 ? "boot-2" : "boot-3"),
				 RCS_OK);
		assert_int_equal(journal_phase_get(f->j, JOB_B, &ph), RCS_OK);
		assert_false(ph.waiting);
		assert_int_equal(ph.runs, run);
		assert_string_equal(ph.boot_id, run == 1 ? "boot-2" : "boot-3");
		assert_int_equal(journal_requeue_job(f->j, JOB_B),
				 RCS_ERR_NOTFOUND); /* not waiting */
		assert_int_equal(journal_requeue_phases(f->j, 3, &n), RCS_OK);
		assert_int_equal(n, run < 3 ? 1 : 0);
		assert_int_equal(state_of(f, JOB_B), run < 3 ? JOURNAL_QUEUED : JOURNAL_RUNNING);
		if (run < 3)
			assert_int_equal(journal_set_state(f->j, JOB_B, JOURNAL_RUNNING), RCS_OK);
	}
	/* every report of the phase carries it; the state goes with the final one */
	assert_int_equal(journal_report(f->j, JOB_B, JS_EDGE_RUNNING, "x", NOW, NULL, &p), RCS_OK);
	assert_non_null(strstr(p, "\"phase\":\"verify\""));
	assert_null(strstr(p, "\"within\""));
	free(p);
	assert_int_equal(journal_report_cause(f->j, JOB_B, JS_EDGE_ERROR, "interrupted",
					      "interrupted", NOW, NULL, &p),
			 RCS_OK);
	assert_non_null(strstr(p, "\"phase\":\"verify\""));
	free(p);
	assert_int_equal(journal_script_state_get(f->j, JOB_B, &st), RCS_OK);
	assert_null(st);
	assert_int_equal(journal_requeue_phases(f->j, 3, &n), RCS_OK);
	assert_int_equal(n, 0);
	/* a job waiting for a reboot that did not come: back to the queue, first */
	assert_int_equal(journal_set_state(f->j, JOB_A, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_phase_reboot(f->j, JOB_A, "p2", ""), RCS_OK);
	assert_int_equal(journal_requeue_job(f->j, JOB_A), RCS_OK);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_QUEUED);
	assert_int_equal(journal_phase_get(f->j, JOB_A, &ph), RCS_OK);
	assert_int_equal(ph.reboots, 1);
	assert_string_equal(ph.boot_id, "");
}

/* ---- task versions, settings ---- */

static void test_task_versions(void **state)
{
	struct fx *f = *state;
	long long v = -1;

	assert_int_equal(journal_task_version(f->j, TASK_1, &v), RCS_OK);
	assert_int_equal(v, 0);
	assert_int_equal(journal_task_version_set(f->j, TASK_1, 5), RCS_OK);
	assert_int_equal(journal_task_version_set(f->j, TASK_1, 3), RCS_OK);
	assert_int_equal(journal_task_version(f->j, TASK_1, &v), RCS_OK);
	assert_int_equal(v, 5);
	assert_int_equal(journal_task_version_set(f->j, TASK_1, 0), RCS_ERR_INVAL);
	assert_int_equal(journal_task_version_set(f->j, "other-task", 2), RCS_OK);
	reopen(f);
	assert_int_equal(journal_task_version(f->j, TASK_1, &v), RCS_OK);
	assert_int_equal(v, 5);
	assert_int_equal(journal_task_version_set(f->j, TASK_1, 7), RCS_OK);
	assert_int_equal(journal_task_version(f->j, TASK_1, &v), RCS_OK);
	assert_int_equal(v, 7);
	assert_int_equal(journal_task_version(f->j, "other-task", &v), RCS_OK);
	assert_int_equal(v, 2);
}

static void test_config(void **state)
{
	struct fx *f = *state;
	char key[JOURNAL_MAX_CONFIG_KEY + 2];
	char *big = malloc(JOURNAL_MAX_CONFIG_VALUE + 2), *v = NULL;

	assert_non_null(big);
	assert_int_equal(journal_config_get(f->j, "ntp.server", &v), RCS_ERR_NOTFOUND);
	assert_null(v);
	assert_int_equal(journal_config_set(f->j, "ntp.server", "pool.ntp.org"), RCS_OK);
	assert_int_equal(journal_config_set(f->j, "empty", ""), RCS_OK);
	assert_int_equal(journal_config_set(f->j, "ntp.server", "time.example"), RCS_OK);
	reopen(f);
	assert_int_equal(journal_config_get(f->j, "ntp.server", &v), RCS_OK);
	assert_string_equal(v, "time.example");
	free(v);
	assert_int_equal(journal_config_get(f->j, "empty", &v), RCS_OK);
	assert_string_equal(v, "");
	free(v);
	/* delete */
	assert_int_equal(journal_config_set(f->j, "ntp.server", NULL), RCS_OK);
	assert_int_equal(journal_config_set(f->j, "ntp.server", NULL), RCS_OK);
	assert_int_equal(journal_config_get(f->j, "ntp.server", &v), RCS_ERR_NOTFOUND);

	/* bounds: key 1..128, value up to 64 KiB */
	assert_int_equal(journal_config_set(f->j, "", "x"), RCS_ERR_INVAL);
	assert_int_equal(journal_config_get(f->j, "", &v), RCS_ERR_INVAL);
	memset(key, 'k', sizeof(key));
	key[JOURNAL_MAX_CONFIG_KEY] = '\0';
	assert_int_equal(journal_config_set(f->j, key, "ok"), RCS_OK);
	key[JOURNAL_MAX_CONFIG_KEY] = 'k';
	key[JOURNAL_MAX_CONFIG_KEY + 1] = '\0';
	assert_int_equal(journal_config_set(f->j, key, "ok"), RCS_ERR_TOOBIG);
	assert_int_equal(journal_config_get(f->j, key, &v), RCS_ERR_TOOBIG);
	memset(big, 'v', JOURNAL_MAX_CONFIG_VALUE + 1);
	big[JOURNAL_MAX_CONFIG_VALUE + 1] = '\0';
	assert_int_equal(journal_config_set(f->j, "big", big), RCS_ERR_TOOBIG);
	big[JOURNAL_MAX_CONFIG_VALUE] = '\0';
	assert_int_equal(journal_config_set(f->j, "big", big), RCS_OK);
	assert_int_equal(journal_config_get(f->j, "big", &v), RCS_OK);
	assert_int_equal(strlen(v), JOURNAL_MAX_CONFIG_VALUE);
	free(v);
	free(big);

	/* at most JOURNAL_MAX_CONFIG_KEYS keys; existing ones can still change */
	sql(f, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1021)"
	       " INSERT INTO config(key, value) SELECT 'fill.' || i, 'x' FROM n");
	assert_int_equal(sql_int(f, "SELECT count(*) FROM config"), JOURNAL_MAX_CONFIG_KEYS);
	assert_int_equal(journal_config_set(f->j, "one.more", "x"), RCS_ERR_FULL);
	assert_int_equal(journal_config_set(f->j, "empty", "changed"), RCS_OK);
	assert_int_equal(journal_config_set(f->j, "fill.1", NULL), RCS_OK);
	assert_int_equal(journal_config_set(f->j, "one.more", "x"), RCS_OK);
}

/* ---- housekeeping ---- */

static void test_prune(void **state)
{
	struct fx *f = *state;
	bool is_new = true;
	char *p = NULL;

	/* A: finished long ago; B: finished recently; C: queued long ago */
	assert_int_equal(journal_receive(f->j, JOB_A, TASK_1, 1, "aaaa", 4, NOW - 1000, &is_new),
			 RCS_OK);
	assert_int_equal(journal_receive(f->j, JOB_B, TASK_1, 1, "bbbb", 4, NOW - 10, &is_new),
			 RCS_OK);
	assert_int_equal(journal_receive(f->j, JOB_C, TASK_1, 1, "cccc", 4, NOW - 1000, &is_new),
			 RCS_OK);
	report(f, JOB_A, JS_TERMINATED, "A", 1);
	report(f, JOB_B, JS_EDGE_ERROR, "B", 1);
	assert_int_equal(journal_prune(f->j, NOW, 100), RCS_OK);
	assert_int_equal(sql_int(f, "SELECT payload IS NULL FROM jobs WHERE ident = '" JOB_A "'"),
			 1);
	assert_int_equal(sql_int(f, "SELECT payload IS NULL FROM jobs WHERE ident = '" JOB_B "'"),
			 0);
	assert_int_equal(sql_int(f, "SELECT payload IS NULL FROM jobs WHERE ident = '" JOB_C "'"),
			 0);
	/* the pruned job is still known and answered */
	receive(f, JOB_A, "aaaa", false);
	assert_int_equal(journal_resend_final(f->j, JOB_A, NULL, &p), RCS_OK);
	assert_int_equal(seq_of(p), 1);
	free(p);
	assert_int_equal(journal_prune(f->j, NOW, -1), RCS_ERR_INVAL);
}

static void test_prune_bounds(void **state)
{
	struct fx *f = *state;
	char *p = NULL;

	/* JOURNAL_KEEP_IDENTS + 10 old finished jobs, made directly (fast); the
	 * oldest has a report still waiting for the broker */
	sql(f, "BEGIN;"
	       " WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100010)"
	       " INSERT INTO jobs(ident, task_ident, task_version, state, payload, received_at,"
	       "  last_seq, last_status, last_report)"
	       " SELECT printf('%08x-0000-4000-8000-000000000000', i), 't', 1, 'done', 'x', 0,"
	       "  1, 'terminated', '{\"seq\":1}' FROM n;"
	       " INSERT INTO outbox(job, seq, payload, created_at)"
	       "  VALUES('00000001-0000-4000-8000-000000000000', 1, '{}', 0);"
	       " COMMIT");
	receive(f, JOB_A, "a", true); /* queued: never pruned */
	assert_int_equal(journal_prune(f->j, NOW, 0), RCS_OK);
	/* the newest JOURNAL_KEEP_IDENTS finished jobs, plus the one with a report pending */
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE state = 'done'"),
			 JOURNAL_KEEP_IDENTS + 1);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE ident ="
				    " '00000001-0000-4000-8000-000000000000'"),
			 1);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE ident ="
				    " '00000002-0000-4000-8000-000000000000'"),
			 0);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE last_report IS NOT NULL"),
			 JOURNAL_KEEP_FINAL_REPORTS);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE payload IS NOT NULL"), 1);
	assert_int_equal(state_of(f, JOB_A), JOURNAL_QUEUED);
	/* the newest keep their final report, older ones are still recognised */
	assert_int_equal(
	    journal_resend_final(f->j, "000186a0-0000-4000-8000-000000000000", NULL, &p), RCS_OK);
	free(p);
	assert_int_equal(
	    journal_resend_final(f->j, "00000100-0000-4000-8000-000000000000", NULL, &p),
	    RCS_ERR_NOTFOUND);
	assert_int_equal(state_of(f, "00000100-0000-4000-8000-000000000000"), JOURNAL_DONE);
}

static void test_outbox_ceiling(void **state)
{
	struct fx *f = *state;

	receive(f, JOB_A, "a", true);
	report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	sql(f, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)"
	       " INSERT INTO outbox(job, seq, payload, created_at)"
	       " SELECT '" JOB_A "', 1, '{}', 0 FROM n");
	assert_int_equal(outbox_count(f), JOURNAL_MAX_OUTBOX);
	/* progress waits are dropped, the final report is always kept */
	assert_int_equal(journal_report(f->j, JOB_A, JS_EDGE_STARTED, NULL, NOW, NULL, NULL),
			 RCS_ERR_FULL);
	report(f, JOB_A, JS_TERMINATED, "ok", 2);
	assert_int_equal(outbox_count(f), JOURNAL_MAX_OUTBOX + 1);
}

/* ---- refusing to work rather than corrupting ---- */

static void test_full_disk(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN], *big = malloc(256 * 1024), *p = NULL;
	enum rcs_err err = RCS_OK;
	bool is_new;
	size_t n = 0, before;
	int i;

	assert_non_null(big);
	memset(big, 'x', 256 * 1024);
	receive(f, JOB_A, "a", true);
	report(f, JOB_A, JS_EDGE_TRANSMITTED, NULL, 1);
	assert_int_equal(journal_set_max_size(f->j, 2 * 1024 * 1024), RCS_OK);
	for (i = 0; i < 100; i++) {
		assert_int_equal(uuid_v7(job), RCS_OK);
		err = journal_receive(f->j, job, TASK_1, 1, big, 256 * 1024, NOW, &is_new);
		if (err != RCS_OK)
			break;
	}
	assert_int_equal(err, RCS_ERR_FULL);
	assert_true(i >= 4 && i < 10);
	/* nothing of the refused job, everything of the others */
	assert_int_equal(journal_get_state(f->j, job, &(enum journal_state){0}), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_count_queued(f->j, &before), RCS_OK);
	assert_int_equal(before, (size_t)i + 1);
	/* small writes may still fit; reads work */
	assert_int_equal(journal_next_queued(f->j, job, &p, &n), RCS_OK);
	assert_string_equal(job, JOB_A);
	free(p);

	/* room again: it works, and the file is sound */
	assert_int_equal(journal_set_max_size(f->j, 0), RCS_OK);
	receive(f, JOB_B, "b", true);
	report(f, JOB_A, JS_EDGE_STARTED, NULL, 2);
	reopen(f);
	assert_int_equal(journal_count_queued(f->j, &n), RCS_OK);
	assert_int_equal(n, before + 1);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM pragma_integrity_check WHERE"
				    " integrity_check <> 'ok'"),
			 0);
	free(big);
}

/*
 * A real full disk: a 1 MiB tmpfs mounted in a private mount namespace of a
 * child process (gone with it). Needs CAP_SYS_ADMIN (root in most
 * containers); skipped when the mount is not allowed.
 * The child's exit code: 0 passed, 77 skip, else the failing step.
 */
static int enospc_child(const char *dir)
{
	struct journal *j = NULL;
	char job[UUID_STR_LEN], key[16], *big = malloc(100 * 1024), *v = NULL;
	enum rcs_err err = RCS_OK;
	bool is_new;
	size_t n = 0;
	int i;

	if (big == NULL)
		return 1;
	memset(big, 'x', 100 * 1024);
	big[100 * 1024 - 1] = '\0';
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0)
		return 77;
	if (journal_open(dir, &j) != RCS_OK)
		return 2;
	for (i = 0; i < 100; i++) {
		if (uuid_v7(job) != RCS_OK)
			return 3;
		err = journal_receive(j, job, TASK_1, 1, big, 100 * 1024, NOW, &is_new);
		if (err != RCS_OK)
			break;
	}
	if (err != RCS_ERR_FULL || i < 3 || i == 100)
		return 4;
	/* the refused job left nothing; the others are all there */
	if (journal_get_state(j, job, &(enum journal_state){0}) != RCS_ERR_NOTFOUND)
		return 5;
	if (journal_count_queued(j, &n) != RCS_OK || n != (size_t)i)
		return 6;
	/* small writes may still fit for a while, then they fail the same way */
	big[60 * 1024] = '\0';
	for (i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		err = journal_config_set(j, key, big);
		if (err != RCS_OK)
			break;
	}
	if (err != RCS_ERR_FULL)
		return 7;
	if (journal_config_get(j, key, &v) != RCS_ERR_NOTFOUND)
		return 8;
	i = (int)n;
	/* reopening on the full disk works and loses nothing */
	journal_close(j);
	j = NULL;
	if (journal_open(dir, &j) != RCS_OK)
		return 9;
	if (journal_count_queued(j, &n) != RCS_OK || n != (size_t)i)
		return 10;
	journal_close(j);
	free(big);
	return 0;
}

static void test_disk_full(void **state)
{
	struct fx *f = *state;
	char dir[700];
	pid_t pid;
	int st = 0;

	snprintf(dir, sizeof(dir), "%s/small", f->dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	/* no connection crosses a fork */
	journal_close(f->j);
	f->j = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(enospc_child(dir));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		skip();
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_open_refuses(void **state)
{
	struct fx *f = *state;
	struct journal *j2 = NULL;
	char path[700];
	FILE *fp;

	/* a state dir that is a file */
	snprintf(path, sizeof(path), "%s/plain", f->dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fclose(fp);
	assert_int_equal(journal_open(path, &j2), RCS_ERR_IO);
	assert_null(j2);

	/* a missing state dir is created */
	snprintf(path, sizeof(path), "%s/new/state", f->dir);
	assert_int_equal(journal_open(path, &j2), RCS_OK);
	journal_close(j2);
	j2 = NULL;

	/* not a database */
	snprintf(path, sizeof(path), "%s/garbage", f->dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/garbage/%s", f->dir, JOURNAL_FILE);
	fp = fopen(path, "w");
	assert_non_null(fp);
	for (int i = 0; i < 200; i++)
		fputs("this is not an SQLite database. ", fp);
	fclose(fp);
	snprintf(path, sizeof(path), "%s/garbage", f->dir);
	assert_int_equal(journal_open(path, &j2), RCS_ERR_DB);
	assert_null(j2);

	/* a journal from a newer agent, and another application's database */
	journal_close(f->j);
	f->j = NULL;
	sql(f, "PRAGMA user_version = 99");
	assert_int_equal(journal_open(f->dir, &j2), RCS_ERR_DB);
	sql(f, "PRAGMA user_version = 3; PRAGMA application_id = 42");
	assert_int_equal(journal_open(f->dir, &j2), RCS_ERR_DB);
	sql(f, "PRAGMA application_id = 0x52435341");
	assert_int_equal(journal_open(f->dir, &f->j), RCS_OK);

	/* the file is private; WAL and synchronous=FULL are on */
	{
		struct stat st;

		assert_int_equal(stat(f->db, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}
	assert_int_equal(sql_int(f, "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
}

/* ---- two threads ---- */

#define THREAD_JOBS 60

struct worker {
	struct journal *j;
	char jobs[THREAD_JOBS][UUID_STR_LEN];
	int done;
};

static void *receiver(void *arg)
{
	struct worker *w = arg;
	bool is_new;

	for (int i = 0; i < THREAD_JOBS; i++) {
		if (journal_receive(w->j, w->jobs[i], TASK_1, 1, "{}", 2, NOW, &is_new) != RCS_OK ||
		    !is_new)
			return (void *)1;
		if (journal_receive(w->j, w->jobs[i], TASK_1, 1, "{}", 2, NOW, &is_new) != RCS_OK ||
		    is_new)
			return (void *)1;
	}
	return NULL;
}

static void ack_all(void *ctx, long long id, const char *job, const char *payload)
{
	(void)job;
	(void)payload;
	if (journal_outbox_ack(ctx, id) != RCS_OK)
		abort();
}

static void *runner(void *arg)
{
	static const enum job_status steps[] = {JS_EDGE_TRANSMITTED, JS_EDGE_STARTED,
						JS_EDGE_RUNNING, JS_TERMINATED};
	struct worker *w = arg;
	char job[UUID_STR_LEN];
	char *p;
	size_t len;
	enum rcs_err err;

	for (int idle = 0; w->done < THREAD_JOBS;) {
		err = journal_next_queued(w->j, job, &p, &len);
		if (err == RCS_ERR_NOTFOUND) {
			if (++idle > 10000) /* 10 s without work: the receiver failed */
				return (void *)1;
			usleep(1000);
			continue;
		}
		idle = 0;
		if (err != RCS_OK)
			return (void *)1;
		free(p);
		if (journal_set_state(w->j, job, JOURNAL_RUNNING) != RCS_OK)
			return (void *)1;
		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			if (journal_report(w->j, job, steps[i], NULL, NOW, NULL, NULL) != RCS_OK)
				return (void *)1;
		}
		if (journal_outbox_each(w->j, 10, ack_all, w->j) != RCS_OK)
			return (void *)1;
		w->done++;
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct fx *f = *state;
	struct worker w;
	pthread_t t1, t2;
	void *r1, *r2;
	size_t n = 1;

	memset(&w, 0, sizeof(w));
	w.j = f->j;
	for (int i = 0; i < THREAD_JOBS; i++)
		assert_int_equal(uuid_v7(w.jobs[i]), RCS_OK);
	assert_int_equal(pthread_create(&t2, NULL, runner, &w), 0);
	assert_int_equal(pthread_create(&t1, NULL, receiver, &w), 0);
	assert_int_equal(pthread_join(t1, &r1), 0);
	assert_int_equal(pthread_join(t2, &r2), 0);
	assert_null(r1);
	assert_null(r2);
	for (int i = 0; i < THREAD_JOBS; i++)
		assert_int_equal(state_of(f, w.jobs[i]), JOURNAL_DONE);
	assert_int_equal(journal_count_queued(f->j, &n), RCS_OK);
	assert_int_equal(n, 0);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE last_seq <> 4"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_receive_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queue_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_state_moves, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bounded_sizes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_seq_and_outbox, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_durable_across_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_resend, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_cause, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_running_at_crash, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_phases, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_task_versions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_config, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prune_bounds, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outbox_ceiling, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_refuses, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
