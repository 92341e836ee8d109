/*
 * Unit and escape tests of agent/sandbox.c: scripts run in the real jail
 * (the launcher, fork, rlimits, seccomp, watchdog), standalone, no MQTT.
 *
 * Every case asserts the outcome a user would see and that this process (the
 * "agent") is fine afterwards: its only child is the launcher, no jail child
 * is left, no descriptor leaked, and a trivial script still runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox.h"
#include "sandbox_launcher.h"
#include "sandbox_int.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#define T_SHORT 1  /* seconds: scripts that must be stopped */
#define T_LONG  20 /* seconds: scripts that must finish */

static char tmpdir[256];  /* the file_dir */
static char outside[256]; /* a directory next to it, not allowed */
static char *cmd_items[] = {"echo=/bin/echo",        "sleep=/bin/sleep", "true=/bin/true",
			    "false=/bin/false",      "sh=/bin/sh",       "pwd=/bin/pwd",
			    "missing=/nonexistent/x"};
static struct cfg_strlist cmds = {cmd_items, sizeof(cmd_items) / sizeof(cmd_items[0])};
static char *dir_items[1];
static struct cfg_strlist dirs = {dir_items, 1};
static int base_fds;
static bool under_valgrind;

static bool refuse_seccomp(void);

/* ---- the host a test sees ---- */

struct rec {
	int progress_n;
	char progress[SANDBOX_TEXT_MAX + 1];
	int64_t progress_ms[8];
	int log_n;
	char log_level[16];
	char log_text[SANDBOX_TEXT_MAX + 1];
	json_object *config;
	int started;
	/* jail inspection from inside a callback */
	bool inspect;
	int child_seccomp; /* the Seccomp: line of /proc/<child>/status */
	int child_fds;
	char child_limits[4096];
	int kill_sig;     /* send this signal to the child from the progress callback */
	int cancel_wfd;   /* write to it from the progress callback */
	int launcher_sig; /* send this signal to the launcher from the progress callback */
	pid_t child;      /* the jail child then */
};

/* A child of parent (the last one /proc lists), -1 when it has none; *n counts them. */
static pid_t child_of(pid_t parent, int *n)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = -1;

	while (d && (e = readdir(d)) != NULL) {
		char path[300], buf[512];
		FILE *fp;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
		fp = fopen(path, "r");
		if (fp == NULL)
			continue;
		while (fgets(buf, sizeof(buf), fp)) {
			if (strncmp(buf, "PPid:", 5) == 0 && atoi(buf + 5) == parent) {
				found = (pid_t)atoi(e->d_name);
				if (n)
					(*n)++;
			}
		}
		fclose(fp);
	}
	if (d)
		closedir(d);
	return found;
}

/* The launcher: this process's only child. */
static pid_t find_launcher(void)
{
	int n = 0;
	pid_t l = child_of(getpid(), &n);

	if (n != 1)
		print_error("find_launcher: %d children (last %d)\n", n, (int)l);
	return n == 1 ? l : -1;
}

/* The jail child running now: a child of the launcher. */
static pid_t find_child(void)
{
	pid_t l = find_launcher();

	return l > 0 ? child_of(l, NULL) : -1;
}

static void inspect_child(struct rec *r)
{
	pid_t pid = find_child();
	char path[64], buf[512];
	FILE *fp;
	DIR *d;
	struct dirent *e;
	size_t n;

	if (pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fp = fopen(path, "r");
	while (fp && fgets(buf, sizeof(buf), fp))
		if (strncmp(buf, "Seccomp:", 8) == 0)
			r->child_seccomp = atoi(buf + 8);
	if (fp)
		fclose(fp);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	r->child_fds = 0;
	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			r->child_fds++;
	if (d)
		closedir(d);
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	fp = fopen(path, "r");
	n = fp ? fread(r->child_limits, 1, sizeof(r->child_limits) - 1, fp) : 0;
	r->child_limits[n] = '\0';
	if (fp)
		fclose(fp);
	if (r->kill_sig)
		kill(pid, r->kill_sig);
}

static void h_progress(void *ctx, const char *text)
{
	struct rec *r = ctx;

	if (r->progress_n < 8)
		r->progress_ms[r->progress_n] = sandbox_now_ms();
	r->progress_n++;
	snprintf(r->progress, sizeof(r->progress), "%s", text);
	if (r->inspect)
		inspect_child(r);
	if (r->launcher_sig) {
		r->child = find_child();
		assert_int_equal(kill(find_launcher(), r->launcher_sig), 0);
	}
	if (r->cancel_wfd >= 0)
		assert_int_equal(write(r->cancel_wfd, "x", 1), 1);
}

static void h_log(void *ctx, const char *level, const char *text)
{
	struct rec *r = ctx;

	r->log_n++;
	snprintf(r->log_level, sizeof(r->log_level), "%s", level);
	snprintf(r->log_text, sizeof(r->log_text), "%s", text);
}

static enum rcs_err h_config_get(void *ctx, const char *key, char **value)
{
	struct rec *r = ctx;
	json_object *v;

	if (!json_object_object_get_ex(r->config, key, &v))
		return RCS_ERR_NOTFOUND;
	*value = strdup(json_object_get_string(v));
	return *value ? RCS_OK : RCS_ERR_NOMEM;
}

static enum rcs_err h_config_set(void *ctx, const char *key, const char *value)
{
	struct rec *r = ctx;

	json_object_object_add(r->config, key, json_object_new_string(value));
	return RCS_OK;
}

static void h_started(void *ctx)
{
	((struct rec *)ctx)->started++;
}

static void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	r->config = json_object_new_object();
	r->cancel_wfd = -1;
}

static void rec_free(struct rec *r)
{
	json_object_put(r->config);
}

static void test_config(struct sandbox_config *cfg)
{
	sandbox_config_defaults(cfg);
	cfg->mem_limit = (size_t)32 << 20;
	cfg->allow_command = &cmds;
	cfg->file_dir = &dirs;
	cfg->exec_timeout = 1;
	cfg->allow_no_seccomp = under_valgrind; /* valgrind can't run a filtered child */
}

/* ---- running scripts ---- */

struct run {
	const struct sandbox_config *cfg; /* NULL: test_config */
	struct rec *rec;                  /* NULL: a local one */
	long long timeout;                /* 0: T_LONG */
	int cancel_fd;                    /* 0: none */
	json_object *variables, *constants, *job;
	const char *name; /* script name, default "t" */
	int64_t elapsed_ms;
	bool reboot;
	char resume[SANDBOX_PHASE_MAX + 1]; /* rcs.reboot{resume = ...}'s, "" when none */
	long long within;
	const char *cause;     /* the result's */
	const char *fail_code; /* the cause an rcs.fail or rcs.rollback result must carry */
};

/* The cause a result must carry (docs/mqtt.md, a report's error), read off its outcome and
 * reason: every run of these tests checks the sandbox's own word against it. */
static const char *expected_cause(const struct sandbox_result *res)
{
	const char *t = res->response ? res->response : "";

	switch (res->outcome) {
	case SANDBOX_OK:
		return NULL;
	case SANDBOX_TIMEOUT:
		return "timeout";
	case SANDBOX_CRASHED:
		return "crashed";
	case SANDBOX_CANCELLED:
		return "cancelled";
	default:
		break;
	}
	if (strncmp(t, "sandbox violation", 17) == 0)
		return "sandbox_violation";
	if (strncmp(t, "sandbox unavailable", 19) == 0 ||
	    strncmp(t, "sandbox setup failed", 20) == 0 || strncmp(t, "sandbox: ", 9) == 0 ||
	    strncmp(t, "agent out of memory", 19) == 0)
		return strstr(t, "reply too large") ? "script_error" : "sandbox_unavailable";
	if (strncmp(t, "memory limit", 12) == 0)
		return "memory_limit";
	if (strstr(t, "without a result") != NULL)
		return "crashed";
	return "script_error";
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	if (d)
		closedir(d);
	return n - 1; /* the one opendir holds */
}

/* Runs src; returns the outcome, *response (malloc'd, may be NULL) when asked. */
static enum sandbox_outcome run_opts(const char *src, struct run *o, char **response)
{
	struct sandbox_config cfg;
	struct sandbox_host host = {0};
	struct sandbox_job job = {0};
	struct sandbox_result res;
	struct rec local;
	struct rec *r = o->rec ? o->rec : &local;
	int64_t t0;
	enum sandbox_outcome outcome;

	if (o->rec == NULL)
		rec_init(&local);
	test_config(&cfg);
	host.ctx = r;
	host.progress = h_progress;
	host.log = h_log;
	host.config_get = h_config_get;
	host.config_set = h_config_set;
	host.started = h_started;
	job.job_ident = "0190f0e0-0000-7000-8000-000000000001";
	job.script_name = o->name ? o->name : "t";
	job.source = src;
	job.len = strlen(src);
	job.variables = o->variables;
	job.constants = o->constants;
	job.job = o->job;
	job.timeout = o->timeout ? o->timeout : T_LONG;
	job.cancel_fd = o->cancel_fd > 0 ? o->cancel_fd : -1;
	t0 = sandbox_now_ms();
	assert_int_equal(sandbox_run(o->cfg ? o->cfg : &cfg, &host, &job, &res), RCS_OK);
	o->elapsed_ms = sandbox_now_ms() - t0;
	o->reboot = res.reboot;
	memcpy(o->resume, res.resume, sizeof(o->resume));
	o->within = res.within;
	o->cause = res.cause;
	outcome = res.outcome;
	if (o->fail_code != NULL)
		assert_string_equal(res.cause, o->fail_code);
	else if (expected_cause(&res) == NULL)
		assert_null(res.cause);
	else
		assert_string_equal(res.cause, expected_cause(&res));
	if (outcome != SANDBOX_OK)
		assert_non_null(res.response); /* every failure has a reason */
	if (response) {
		*response = res.response;
		res.response = NULL;
	}
	sandbox_result_free(&res);
	if (o->rec == NULL)
		rec_free(&local);
	return outcome;
}

static enum sandbox_outcome run(const char *src, long long timeout, char **response)
{
	struct run o = {0};

	o.timeout = timeout;
	return run_opts(src, &o, response);
}

/*
 * The agent is fine: its only child is the launcher, alive (nothing to
 * reap), and no jail child is left behind; no descriptor leaked; scripts
 * still run.
 */
static void agent_ok(void)
{
	char *resp = NULL, why[128];
	pid_t launcher = find_launcher();
	int jails = 0;

	assert_true(launcher > 0);
	assert_int_equal(sandbox_launcher_check(why, sizeof(why)), RCS_OK);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), 0);
	child_of(launcher, &jails);
	assert_int_equal(jails, 0);
	assert_int_equal(count_fds(), base_fds);
	assert_int_equal(run("return 6 * 7", T_LONG, &resp), SANDBOX_OK);
	assert_string_equal(resp, "42");
	free(resp);
}

static void expect(const char *src, long long timeout, enum sandbox_outcome want,
		   const char *want_response)
{
	char *resp = NULL;
	enum sandbox_outcome got = run(src, timeout, &resp);

	if (got != want || (want_response && (!resp || strcmp(resp, want_response) != 0)))
		print_error("script: %s\n  outcome %d (want %d), response: %s (want %s)\n", src,
			    (int)got, (int)want, resp ? resp : "(null)",
			    want_response ? want_response : "(any)");
	assert_int_equal(got, want);
	if (want_response)
		assert_string_equal(resp, want_response);
	free(resp);
}

/* Outcome want and a reason containing needle. */
static void expect_sub(const char *src, long long timeout, enum sandbox_outcome want,
		       const char *needle)
{
	char *resp = NULL;
	enum sandbox_outcome got = run(src, timeout, &resp);

	if (got != want || !resp || !strstr(resp, needle))
		print_error("script: %s\n  outcome %d (want %d), response: %s (want ...%s...)\n",
			    src, (int)got, (int)want, resp ? resp : "(null)", needle);
	assert_int_equal(got, want);
	assert_non_null(resp);
	assert_non_null(strstr(resp, needle));
	free(resp);
}

/* ---- results ---- */

static void test_return_values(void **state)
{
	char *resp = (char *)1;

	(void)state;
	expect("return 'hello'", T_LONG, SANDBOX_OK, "hello");
	expect("return 42", T_LONG, SANDBOX_OK, "42");
	expect("return 1.5", T_LONG, SANDBOX_OK, "1.5");
	expect("return 2^53", T_LONG, SANDBOX_OK, "9.007199254741e+15");
	expect("return true", T_LONG, SANDBOX_OK, "true");
	expect("return 'a', 'b'", T_LONG, SANDBOX_OK, "a"); /* the first value */
	assert_int_equal(run("local x = 1", T_LONG, &resp), SANDBOX_OK);
	assert_null(resp);
	assert_int_equal(run("return nil", T_LONG, &resp), SANDBOX_OK);
	assert_null(resp);
	agent_ok();
}

static void test_return_table(void **state)
{
	(void)state;
	/* canonical JSON: sorted members, sequences as arrays */
	expect("return {b = 1, a = {1, 2, 'x'}, s = 'caf\\u{e9}', t = true, f = 0.5,"
	       " n = {[1] = 'a', [3] = 'c'}}",
	       T_LONG, SANDBOX_OK,
	       "{\"a\":[1,2,\"x\"],\"b\":1,\"f\":0.5,\"n\":{\"1\":\"a\",\"3\":\"c\"},"
	       "\"s\":\"caf\xc3\xa9\",\"t\":true}");
	expect("return {}", T_LONG, SANDBOX_OK, "{}");
	expect("return {'quote\"', 'nl\\n'}", T_LONG, SANDBOX_OK, "[\"quote\\\"\",\"nl\\n\"]");
	agent_ok();
}

static void test_bad_responses(void **state)
{
	(void)state;
	expect_sub("local t = {} t.self = t return t", T_LONG, SANDBOX_ERROR,
		   "bad response: recursive table");
	expect_sub("local t = {} t[1] = {t} return t", T_LONG, SANDBOX_ERROR, "recursive table");
	expect_sub("return {f = function() end}", T_LONG, SANDBOX_ERROR,
		   "bad response: a function value cannot be JSON");
	expect_sub("return function() end", T_LONG, SANDBOX_ERROR, "bad response");
	expect_sub("return coroutine.create(function() end)", T_LONG, SANDBOX_ERROR,
		   "bad response");
	expect_sub("return {x = 0/0}", T_LONG, SANDBOX_ERROR, "NaN or infinity");
	expect_sub("return {[true] = 1}", T_LONG, SANDBOX_ERROR, "table key of type boolean");
	expect_sub("return {[1] = 'a', ['1'] = 'b', x = 1}", T_LONG, SANDBOX_ERROR,
		   "duplicate key");
	expect_sub("return '\\xff\\xfe'", T_LONG, SANDBOX_ERROR, "bad response");
	expect_sub("return 'a\\0b'", T_LONG, SANDBOX_ERROR, "bad response");
	expect_sub("return {'\\xff'}", T_LONG, SANDBOX_ERROR, "not valid UTF-8");
	expect("return string.rep('x', 65537)", T_LONG, SANDBOX_ERROR, "response too large");
	expect("local t = {} for i = 1, 10000 do t[i] = string.rep('y', 100) end return t", T_LONG,
	       SANDBOX_ERROR, "response too large");
	expect("local t = {} for i = 1, 30000 do t[i] = i end return t", T_LONG, SANDBOX_ERROR,
	       "response too large");
	expect_sub("local t = {} local c = t for i = 1, 100 do c[1] = {} c = c[1] end return t",
		   T_LONG, SANDBOX_ERROR, "nested deeper");
	agent_ok();
}

static void test_script_errors(void **state)
{
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.name = "echo";
	assert_int_equal(run_opts("local x = 1\n\nerror('boom')", &o, &resp), SANDBOX_ERROR);
	assert_string_equal(resp, "script error: [string \"echo\"]:3: boom");
	assert_string_equal(o.cause, "script_error");
	free(resp);
	expect_sub("return +", T_LONG, SANDBOX_ERROR, "script error: [string \"t\"]:1:");
	expect("error({})", T_LONG, SANDBOX_ERROR, "script error: (error object is a table value)");
	expect("error('line1\\nline2\\tx')", T_LONG, SANDBOX_ERROR,
	       "script error: [string \"t\"]:1: line1 line2 x");
	/* a huge message is cut to one bounded line */
	assert_int_equal(run("error(string.rep('e', 100000))", T_LONG, &resp), SANDBOX_ERROR);
	assert_true(strlen(resp) < SANDBOX_REASON_MAX + 64);
	assert_non_null(strstr(resp, "eee..."));
	free(resp);
	agent_ok();
}

static void test_job_data(void **state)
{
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.variables = json_tokener_parse("{\"message\":\"hi\",\"n\":3,\"list\":[1,2],"
					 "\"deep\":{\"x\":true},\"none\":null}");
	o.constants = json_tokener_parse("{\"k\":\"c\",\"f\":1.25}");
	o.job = json_tokener_parse("{\"ident\":\"J1\",\"task\":{\"ident\":\"T1\",\"version\":4,"
				   "\"name\":\"echo\"},\"entity_ident\":\"E1\","
				   "\"client_root\":\"C1\",\"tags\":[\"a\",\"b\"]}");
	assert_int_equal(run_opts("return table.concat({rcs.variables.message,"
				  " rcs.variables.n + 1, #rcs.variables.list,"
				  " tostring(rcs.variables.deep.x), tostring(rcs.variables.none),"
				  " rcs.constants.k, rcs.constants.f, rcs.job.ident,"
				  " rcs.job.task.ident, rcs.job.task.version, rcs.job.task.name,"
				  " rcs.job.entity_ident, rcs.job.client_root, #rcs.job.tags,"
				  " rcs.job.tags[2]}, ',')",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "hi,4,2,true,nil,c,1.25,J1,T1,4,echo,E1,C1,2,b");
	free(resp);
	/* variables are the script's own copy; rcs.job is read-only */
	assert_int_equal(
	    run_opts("rcs.variables.message = 'x' return rcs.variables.message", &o, &resp),
	    SANDBOX_OK);
	assert_string_equal(resp, "x");
	free(resp);
	assert_int_equal(run_opts("rcs.job.ident = 'x'", &o, &resp), SANDBOX_ERROR);
	assert_non_null(strstr(resp, "read-only"));
	free(resp);
	assert_int_equal(run_opts("rcs.job.task.name = 'x'", &o, &resp), SANDBOX_ERROR);
	free(resp);
	assert_int_equal(run_opts("local n = 0 for k, v in pairs(rcs.job) do n = n + 1 end"
				  " return n",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "5");
	free(resp);
	assert_int_equal(run_opts("local f, s = pairs(rcs.job.task) s.name = 'x'", &o, &resp),
			 SANDBOX_ERROR);
	assert_non_null(strstr(resp, "read-only"));
	free(resp);
	assert_int_equal(run_opts("return setmetatable(rcs.job, nil)", &o, &resp), SANDBOX_ERROR);
	free(resp);
	/* a read-only table reads as its contents in a response */
	assert_int_equal(run_opts("return {job = rcs.job.task, tags = rcs.job.tags}", &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "{\"job\":{\"ident\":\"T1\",\"name\":\"echo\",\"version\":4},"
				  "\"tags\":[\"a\",\"b\"]}");
	free(resp);
	json_object_put(o.variables);
	json_object_put(o.constants);
	json_object_put(o.job);
	/* without any: empty tables */
	expect("return next(rcs.variables) == nil and next(rcs.constants) == nil", T_LONG,
	       SANDBOX_OK, "true");
	agent_ok();
}

/* ---- host services ---- */

static void test_progress_and_log(void **state)
{
	struct rec r;
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	rec_init(&r);
	o.rec = &r;
	/* at most one per second, the last one wins */
	assert_int_equal(run_opts("rcs.progress('one') rcs.progress('two') rcs.progress('three')"
				  " rcs.sleep(1.3) rcs.progress('four') return 'ok'",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "ok");
	free(resp);
	assert_int_equal(r.progress_n, 2);
	assert_string_equal(r.progress, "three");
	assert_true(r.progress_ms[1] - r.progress_ms[0] >= 950);
	assert_int_equal(r.started, 1);
	rec_free(&r);

	rec_init(&r);
	assert_int_equal(run_opts("rcs.log('warn', 'disk ' .. 93 .. '%') return 1", &o, NULL),
			 SANDBOX_OK);
	assert_int_equal(r.log_n, 1);
	assert_string_equal(r.log_level, "warn");
	assert_string_equal(r.log_text, "disk 93%");
	/* a log flood is capped */
	r.log_n = 0;
	assert_int_equal(run_opts("for i = 1, 1500 do rcs.log('info', 'x') end return 1", &o, NULL),
			 SANDBOX_OK);
	assert_int_equal(r.log_n, SANDBOX_LOG_MAX_LINES + 1);
	assert_string_equal(r.log_level, "warn");
	rec_free(&r);

	expect_sub("rcs.log('fatal', 'x')", T_LONG, SANDBOX_ERROR, "invalid option 'fatal'");
	expect_sub("rcs.log('info', string.rep('x', 5000))", T_LONG, SANDBOX_ERROR, "longer than");
	expect_sub("rcs.progress('a\\0b')", T_LONG, SANDBOX_ERROR, "NUL");
	expect_sub("rcs.progress('\\xff')", T_LONG, SANDBOX_ERROR, "UTF-8");
	agent_ok();
}

static void test_config_get_set(void **state)
{
	struct rec r;
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	rec_init(&r);
	o.rec = &r;
	json_object_object_add(r.config, "hostname", json_object_new_string("dev-1"));
	assert_int_equal(run_opts("local old = rcs.config.get('hostname')"
				  " rcs.config.set('hostname', 'dev-2')"
				  " return old .. ',' .. rcs.config.get('hostname') .. ','"
				  " .. tostring(rcs.config.get('unset'))",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "dev-1,dev-2,nil");
	free(resp);
	assert_string_equal(json_object_get_string(json_object_object_get(r.config, "hostname")),
			    "dev-2");
	assert_int_equal(run_opts("rcs.config.set('', 'x')", &o, &resp), SANDBOX_ERROR);
	free(resp);
	assert_int_equal(run_opts("rcs.config.set('a\\nb', 'x')", &o, &resp), SANDBOX_ERROR);
	free(resp);
	assert_int_equal(run_opts("rcs.config.set('k', string.rep('v', 20000))", &o, &resp),
			 SANDBOX_ERROR);
	assert_non_null(strstr(resp, "longer than"));
	free(resp);
	assert_int_equal(run_opts("rcs.config.set('k', {})", &o, &resp), SANDBOX_ERROR);
	free(resp);
	/* errors from the host are raised in the script, which may catch them */
	assert_int_equal(
	    run_opts("local ok, e = pcall(rcs.config.set, 'k', '\\xff') return e", &o, &resp),
	    SANDBOX_OK);
	assert_non_null(strstr(resp, "rcs.config.set: value must be UTF-8"));
	free(resp);
	assert_int_equal(json_object_object_length(r.config), 1);
	rec_free(&r);
	agent_ok();
}

static void test_exec(void **state)
{
	char *resp = NULL;
	char marker[300], src[1536];

	(void)state;
	expect("local r = rcs.exec('echo', 'hello', 'world') return r.output .. r.code", T_LONG,
	       SANDBOX_OK, "hello world\n0");
	expect("local r = rcs.exec('false') return r.code", T_LONG, SANDBOX_OK, "1");
	expect("local r = rcs.exec('true') return r.output .. r.code .. tostring(r.timed_out)"
	       " .. tostring(r.truncated) .. tostring(r.signal)",
	       T_LONG, SANDBOX_OK, "0falsefalsenil");
	/* trailing nils are dropped (sysinfo.lua does rcs.exec(name, cond and x or nil)) */
	expect("return rcs.exec('echo', 'a', nil).output", T_LONG, SANDBOX_OK, "a\n");
	/* the command runs in the first file_dir, stdin is /dev/null, env is minimal */
	snprintf(src, sizeof(src), "return rcs.exec('pwd').output");
	assert_int_equal(run(src, T_LONG, &resp), SANDBOX_OK);
	assert_non_null(strstr(resp, tmpdir));
	free(resp);
	expect("return rcs.exec('sh', '-c', 'echo \"$HOME|$PATH|$LC_ALL\"; cat').output", T_LONG,
	       SANDBOX_OK, "|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|C\n");
	/* stdout and stderr both, capped at exec_max_output */
	expect("local r = rcs.exec('sh', '-c', 'echo out; echo err >&2') return r.output", T_LONG,
	       SANDBOX_OK, "out\nerr\n");
	expect("local r = rcs.exec('sh', '-c', 'head -c 200000 /dev/zero | tr \"\\\\0\" x')"
	       " return #r.output .. tostring(r.truncated) .. r.code",
	       T_LONG, SANDBOX_OK, "65536true0");

	/* a command that leaves a writer behind: its output is taken up to its exit */
	expect("local r = rcs.exec('sh', '-c', '(yes | head -c 100000000 &) ; echo started')"
	       " return tostring(r.code == 0) .. tostring(#r.output > 0)",
	       T_LONG, SANDBOX_OK, "truetrue");
	/* not allowlisted, or not runnable */
	expect_sub("rcs.exec('rm', '-rf', '/')", T_LONG, SANDBOX_ERROR,
		   "command 'rm' is not allowed on this device");
	expect_sub("rcs.exec('/bin/echo', 'x')", T_LONG, SANDBOX_ERROR, "not allowed");
	expect_sub("rcs.exec('missing')", T_LONG, SANDBOX_ERROR, "cannot run /nonexistent/x");
	expect_sub("rcs.exec('echo', 1)", T_LONG, SANDBOX_ERROR, "must be a string");
	expect_sub("rcs.exec('echo', nil, 'x')", T_LONG, SANDBOX_ERROR, "must be a string");
	expect_sub("rcs.exec('echo', 'a\\0b')", T_LONG, SANDBOX_ERROR, "NUL");
	expect_sub("rcs.exec('echo', table.unpack((function() local t = {} for i = 1, 65 do"
		   " t[i] = 'x' end return t end)()))",
		   T_LONG, SANDBOX_ERROR, "more than 64 arguments");

	/* shell metacharacters are passed literally, never interpreted */
	snprintf(marker, sizeof(marker), "%s/pwned", outside);
	unlink(marker);
	snprintf(src, sizeof(src),
		 "return rcs.exec('echo', 'a; touch %s', '$(touch %s)', '`touch %s`', '|', '>%s')"
		 ".output",
		 marker, marker, marker, marker);
	assert_int_equal(run(src, T_LONG, &resp), SANDBOX_OK);
	assert_non_null(strstr(resp, "a; touch "));
	assert_non_null(strstr(resp, "$(touch "));
	free(resp);
	assert_int_equal(access(marker, F_OK), -1);
	agent_ok();
}

static void test_exec_timeout(void **state)
{
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	/* exec_timeout is 1 s in test_config */
	assert_int_equal(run_opts("local r = rcs.exec('sleep', '10') return tostring(r.timed_out)"
				  " .. ',' .. r.code .. ',' .. r.signal",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "true,137,9");
	assert_true(o.elapsed_ms < 4000);
	free(resp);
	/* the whole process group goes, also what the command started */
	assert_int_equal(run_opts("local r = rcs.exec('sh', '-c', 'sleep 10 & sleep 10; echo no')"
				  " return r.output .. tostring(r.timed_out)",
				  &o, &resp),
			 SANDBOX_OK);
	assert_string_equal(resp, "true");
	assert_true(o.elapsed_ms < 4000);
	free(resp);
	/* the job's own deadline also applies while a command runs */
	{
		struct sandbox_config cfg;

		test_config(&cfg);
		cfg.exec_timeout = 60;
		o.cfg = &cfg;
		o.timeout = T_SHORT;
		assert_int_equal(run_opts("rcs.exec('sleep', '30')", &o, &resp), SANDBOX_TIMEOUT);
		assert_string_equal(resp, "timeout after 1 s");
		assert_true(o.elapsed_ms < 4000);
		free(resp);
	}
	agent_ok();
}

static void write_file(const char *path, const char *data)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(data, fp);
	fclose(fp);
}

static void test_files(void **state)
{
	char path[512], src[1024];
	struct stat st;

	(void)state;
	expect("rcs.file.write('a.txt', 'hello\\0world') return rcs.file.read('a.txt')", T_LONG,
	       SANDBOX_ERROR, "bad response: not NUL-free UTF-8 text");
	expect("rcs.file.write('a.txt', 'hello') return rcs.file.read('a.txt')", T_LONG, SANDBOX_OK,
	       "hello");
	snprintf(path, sizeof(path), "%s/a.txt", tmpdir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 5);
	snprintf(path, sizeof(path), "%s/sub", tmpdir);
	mkdir(path, 0755);
	expect(
	    "rcs.file.write('sub/b.txt', string.rep('z', 1000)) return #rcs.file.read('sub/b.txt')",
	    T_LONG, SANDBOX_OK, "1000");
	expect_sub("return rcs.file.read('nothere')", T_LONG, SANDBOX_ERROR,
		   "nothere: No such file or directory");
	expect_sub("rcs.file.write('nodir/x', 'a')", T_LONG, SANDBOX_ERROR, "No such file");
	expect_sub("rcs.file.write('big', string.rep('x', 2 * 1024 * 1024))", T_LONG, SANDBOX_ERROR,
		   "longer than");

	/* escapes */
	expect_sub("return rcs.file.read('../x')", T_LONG, SANDBOX_ERROR, "must be relative");
	expect_sub("return rcs.file.read('sub/../../x')", T_LONG, SANDBOX_ERROR,
		   "must be relative");
	expect_sub("return rcs.file.read('/etc/passwd')", T_LONG, SANDBOX_ERROR,
		   "must be relative");
	expect_sub("rcs.file.write('/tmp/x', 'a')", T_LONG, SANDBOX_ERROR, "must be relative");
	expect_sub("return rcs.file.read('sub//b.txt')", T_LONG, SANDBOX_ERROR, "must be relative");
	expect_sub("return rcs.file.read('')", T_LONG, SANDBOX_ERROR, "must be relative");
	expect_sub("return rcs.file.read('sub')", T_LONG, SANDBOX_ERROR, "not a regular file");

	/* symbolic links inside the directory pointing outside */
	snprintf(path, sizeof(path), "%s/secret", outside);
	write_file(path, "top secret");
	snprintf(src, sizeof(src), "%s/link", tmpdir);
	assert_int_equal(symlink(path, src), 0);
	snprintf(src, sizeof(src), "%s/ldir", tmpdir);
	assert_int_equal(symlink(outside, src), 0);
	expect_sub("return rcs.file.read('link')", T_LONG, SANDBOX_ERROR,
		   "symbolic links are not followed");
	expect_sub("return rcs.file.read('ldir/secret')", T_LONG, SANDBOX_ERROR,
		   "symbolic links are not followed");
	expect_sub("rcs.file.write('link', 'owned')", T_LONG, SANDBOX_ERROR,
		   "symbolic links are not followed");
	expect_sub("rcs.file.write('ldir/secret', 'owned')", T_LONG, SANDBOX_ERROR,
		   "symbolic links are not followed");
	expect_sub("rcs.file.write('ldir/new', 'owned')", T_LONG, SANDBOX_ERROR,
		   "symbolic links are not followed");
	{
		FILE *fp = fopen(path, "r");
		char buf[64] = {0};

		assert_non_null(fp);
		assert_true(fread(buf, 1, sizeof(buf) - 1, fp) > 0);
		fclose(fp);
		assert_string_equal(buf, "top secret");
	}
	snprintf(path, sizeof(path), "%s/new", outside);
	assert_int_equal(access(path, F_OK), -1);
	/* the symlinks themselves are untouched */
	snprintf(src, sizeof(src), "%s/link", tmpdir);
	assert_int_equal(lstat(src, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	agent_ok();
}

static void test_reboot(void **state)
{
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	assert_int_equal(run_opts("rcs.reboot() return 'reboot scheduled'", &o, &resp), SANDBOX_OK);
	assert_true(o.reboot);
	assert_string_equal(resp, "reboot scheduled");
	free(resp);
	assert_int_equal(run_opts("return 1", &o, &resp), SANDBOX_OK);
	assert_false(o.reboot);
	free(resp);
	agent_ok();
}

/* rcs.reboot{resume, within} (docs/lua-api.md): the script ends there, pcall cannot catch it,
 * the phase and within go to the agent; bad arguments are Lua errors naming them. rcs.state
 * without the host's services says so. */
static void test_reboot_resume(void **state)
{
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	assert_int_equal(run_opts("local ok = pcall(rcs.reboot, {resume = 'verify', within = 120})"
				  " return 'not here'",
				  &o, &resp),
			 SANDBOX_OK);
	assert_null(resp);
	assert_string_equal(o.resume, "verify");
	assert_int_equal(o.within, 120);
	assert_false(o.reboot);
	assert_int_equal(run_opts("rcs.reboot{resume = 'a_1'} return 'not here'", &o, &resp),
			 SANDBOX_OK);
	assert_null(resp);
	assert_string_equal(o.resume, "a_1");
	assert_int_equal(o.within, 900);
	assert_int_equal(run_opts("return 1", &o, &resp), SANDBOX_OK);
	assert_string_equal(o.resume, "");
	free(resp);
	expect_sub("rcs.reboot{resume = 'Verify'}", T_LONG, SANDBOX_ERROR,
		   "rcs.reboot: resume must be a phase name");
	expect_sub("rcs.reboot{resume = string.rep('a', 33)}", T_LONG, SANDBOX_ERROR,
		   "rcs.reboot: resume must be a phase name");
	expect_sub("rcs.reboot{within = 60}", T_LONG, SANDBOX_ERROR,
		   "rcs.reboot: resume must be a phase name");
	expect_sub("rcs.reboot{resume = 'v', within = 86401}", T_LONG, SANDBOX_ERROR,
		   "rcs.reboot: within must be whole seconds from 30 to 86400");
	expect_sub("rcs.reboot{resume = 'v', within = '60'}", T_LONG, SANDBOX_ERROR,
		   "rcs.reboot: within must be whole seconds");
	expect_sub("rcs.reboot('verify')", T_LONG, SANDBOX_ERROR, "table expected");
	expect("return pcall(rcs.reboot, {resume = 'Bad'}) and 'ok' or 'caught'", T_LONG,
	       SANDBOX_OK, "caught");
	expect_sub("rcs.state.set('k', 1)", T_LONG, SANDBOX_ERROR,
		   "rcs.state is not available on this device");
	expect_sub("rcs.state.set('k', {})", T_LONG, SANDBOX_ERROR,
		   "rcs.state.set: value must be a string, number or boolean, not table");
	agent_ok();
}

/* The lines of path (0 when it does not exist). */
static int count_lines(const char *path)
{
	FILE *fp = fopen(path, "r");
	int n = 0, c;

	while (fp && (c = fgetc(fp)) != EOF)
		n += c == '\n';
	if (fp)
		fclose(fp);
	return n;
}

/* rcs.fail and rcs.rollback (docs/lua-api.md): the job ends edge_error with the code at
 * once, pcall cannot catch it; an unknown code, or a rollback without a rollback_command or
 * whose command failed, is a Lua error. */
static void test_fail_and_rollback(void **state)
{
	static const char *const codes[] = {"install_failed", "health_check_failed", "incompatible",
					    "rolled_back", NULL};
	struct sandbox_config cfg;
	struct run o = {0};
	char *resp = NULL, src[256], script[300], marker[300], text[700];

	(void)state;
	for (size_t i = 0; codes[i]; i++) {
		snprintf(src, sizeof(src),
			 "local ok = pcall(rcs.fail, '%s', 'why ' .. 1) return 'not here'",
			 codes[i]);
		o.fail_code = codes[i];
		assert_int_equal(run_opts(src, &o, &resp), SANDBOX_ERROR);
		assert_string_equal(resp, "why 1");
		assert_false(o.reboot);
		free(resp);
	}
	expect_sub("rcs.fail('oops', 'x')", T_LONG, SANDBOX_ERROR,
		   "rcs.fail: unknown code 'oops' (install_failed");
	expect("local ok = pcall(rcs.fail, 'script_error', 'x') return ok and 'ok' or 'caught'",
	       T_LONG, SANDBOX_OK, "caught");
	expect_sub("rcs.fail('install_failed')", T_LONG, SANDBOX_ERROR, "bad argument #2");
	expect_sub("rcs.rollback('bad')", T_LONG, SANDBOX_ERROR,
		   "rcs.rollback: no rollback_command is configured on this device");

	/* with a rollback_command: run once per call; {reboot = true} asks for the reboot */
	snprintf(marker, sizeof(marker), "%s/rolled", outside);
	snprintf(script, sizeof(script), "%s/rollback.sh", outside);
	snprintf(text, sizeof(text), "#!/bin/sh\necho ran >> '%s'\n", marker);
	write_file(script, text);
	assert_int_equal(chmod(script, 0755), 0);
	test_config(&cfg);
	cfg.rollback_command = script;
	o.cfg = &cfg;
	o.fail_code = "rolled_back";
	assert_int_equal(
	    run_opts("rcs.rollback('health check failed') return 'not here'", &o, &resp),
	    SANDBOX_ERROR);
	assert_string_equal(resp, "health check failed");
	assert_false(o.reboot);
	assert_int_equal(count_lines(marker), 1);
	free(resp);
	assert_int_equal(run_opts("pcall(rcs.rollback, 'again', {reboot = true})", &o, &resp),
			 SANDBOX_ERROR);
	assert_string_equal(resp, "again");
	assert_true(o.reboot);
	assert_int_equal(count_lines(marker), 2);
	free(resp);
	o.fail_code = NULL;
	assert_int_equal(run_opts("rcs.rollback('x', {reboot = 'yes'})", &o, &resp), SANDBOX_ERROR);
	assert_non_null(strstr(resp, "rcs.rollback: reboot must be a boolean"));
	assert_int_equal(count_lines(marker), 2);
	free(resp);
	/* a rollback command that fails: a Lua error the script may handle */
	cfg.rollback_command = "/bin/false";
	assert_int_equal(run_opts("local ok, e = pcall(rcs.rollback, 'x') return e", &o, &resp),
			 SANDBOX_OK);
	assert_non_null(strstr(resp, "rcs.rollback: the rollback command failed (exit 1)"));
	free(resp);
	unlink(marker);
	unlink(script);
	agent_ok();
}

struct canceller {
	int fd;
	int delay_ms;
};

static void *cancel_later(void *arg)
{
	struct canceller *c = arg;

	poll(NULL, 0, c->delay_ms);
	if (write(c->fd, "c", 1) != 1)
		abort();
	return NULL;
}

static void test_sleep_and_cancel(void **state)
{
	int p[2];
	pthread_t th;
	struct canceller c;
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	/* rcs.sleep counts in the wall clock */
	assert_int_equal(run_opts("local t = os.time() rcs.sleep(0.3) return 'slept'", &o, &resp),
			 SANDBOX_OK);
	assert_true(o.elapsed_ms >= 300);
	free(resp);
	o.timeout = T_SHORT;
	assert_int_equal(run_opts("rcs.sleep(5)", &o, &resp), SANDBOX_TIMEOUT);
	assert_true(o.elapsed_ms < 2500);
	free(resp);
	expect_sub("rcs.sleep(-1)", T_LONG, SANDBOX_ERROR, "seconds must be between");
	expect_sub("rcs.sleep(0/0)", T_LONG, SANDBOX_ERROR, "seconds must be between");

	/* a cancel during rcs.sleep ends the job at once */
	assert_int_equal(pipe(p), 0);
	c.fd = p[1];
	c.delay_ms = 300;
	assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
	memset(&o, 0, sizeof(o));
	o.cancel_fd = p[0];
	assert_int_equal(run_opts("rcs.progress('waiting') rcs.sleep(30) return 'no'", &o, &resp),
			 SANDBOX_CANCELLED);
	assert_string_equal(resp, "cancelled");
	assert_true(o.elapsed_ms < 2000);
	free(resp);
	pthread_join(th, NULL);
	/* still readable: a new job with this fd is cancelled before it starts */
	assert_int_equal(run_opts("return 1", &o, &resp), SANDBOX_CANCELLED);
	free(resp);
	close(p[0]);
	close(p[1]);

	/* a cancel during a busy loop and during rcs.exec */
	assert_int_equal(pipe(p), 0);
	c.fd = p[1];
	assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
	o.cancel_fd = p[0];
	assert_int_equal(run_opts("while true do end", &o, &resp), SANDBOX_CANCELLED);
	assert_true(o.elapsed_ms < 2000);
	free(resp);
	pthread_join(th, NULL);
	close(p[0]);
	close(p[1]);
	assert_int_equal(pipe(p), 0);
	c.fd = p[1];
	assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
	o.cancel_fd = p[0];
	assert_int_equal(run_opts("rcs.exec('sleep', '0.9') rcs.exec('sleep', '0.9')", &o, &resp),
			 SANDBOX_CANCELLED);
	assert_true(o.elapsed_ms < 1500);
	free(resp);
	pthread_join(th, NULL);
	close(p[0]);
	close(p[1]);
	agent_ok();
}

/*
 * The runner calls sandbox_run from its own thread, and several runs may go
 * on at once: the launcher serves them all, each child forked from its
 * single thread (so also under ASan, whose GCC 12 runtime is not fork-safe:
 * llvm-project#75290).
 */
struct thread_run {
	const char *src;
	enum rcs_err err;
	struct sandbox_result res;
};

static void *run_in_thread(void *arg)
{
	struct thread_run *t = arg;
	struct sandbox_config cfg;
	struct sandbox_job job = {0};
	void *warm[64];

	for (int i = 0; i < 64; i++) /* make this thread's arena busy */
		warm[i] = malloc((size_t)(i + 1) * 4096);
	for (int i = 0; i < 64; i++)
		free(warm[i]);
	test_config(&cfg);
	job.script_name = "t";
	job.source = t->src;
	job.len = strlen(t->src);
	job.timeout = T_LONG;
	job.cancel_fd = -1;
	t->err = sandbox_run(&cfg, NULL, &job, &t->res);
	return NULL;
}

static void test_from_thread(void **state)
{
	struct thread_run t[2];
	pthread_t th[2];
	enum sandbox_outcome outcome[2];
	char resp[2][64];

	(void)state;
	/* growing then freeing megabytes may make glibc shrink the thread's heap, which
	 * reads /proc/sys/vm/overcommit_memory: the filter must not kill that. This process
	 * doesn't always take that path; through the real agent, test_agent.py's
	 * test_script_allocating_and_freeing_memory does */
	t[0].src = "local t = {} for i = 1, 100000 do t[i] = tostring(i) .. 'x' end"
		   " t = nil collectgarbage()"
		   " local g = '' for i = 1, 3000 do g = g .. string.rep('y', 100) end"
		   " local big = {} for i = 1, 150 do big[i] = string.rep('z', 1e5) .. i end"
		   " big = nil g = nil collectgarbage() collectgarbage()"
		   " local s = string.rep('ab', 1e6) return #s";
	t[1].src = "local t = {} for i = 1, 1e9 do t[i] = {i} end";
	for (int i = 0; i < 2; i++) {
		memset(&t[i].res, 0, sizeof(t[i].res));
		assert_int_equal(pthread_create(&th[i], NULL, run_in_thread, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].err, RCS_OK);
		outcome[i] = t[i].res.outcome;
		snprintf(resp[i], sizeof(resp[i]), "%s",
			 t[i].res.response ? t[i].res.response : "");
		sandbox_result_free(&t[i].res);
	}
	print_message("thread runs: %d %s / %d %s\n", (int)outcome[0], resp[0], (int)outcome[1],
		      resp[1]);
	assert_int_equal(outcome[0], SANDBOX_OK);
	assert_string_equal(resp[0], "2000000");
	assert_int_equal(outcome[1], SANDBOX_ERROR);
	if (!under_valgrind)
		assert_string_equal(resp[1], "memory limit exceeded");
	agent_ok();
}

/* ---- the jail itself ---- */

static void test_jail(void **state)
{
	struct rec r;
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	rec_init(&r);
	r.inspect = true;
	o.rec = &r;
	assert_int_equal(run_opts("rcs.progress('look') return 'ok'", &o, &resp), SANDBOX_OK);
	free(resp);
	if (!under_valgrind) { /* valgrind keeps descriptors of its own, and fakes NOFILE */
		assert_int_equal(r.child_fds, 1);     /* only the socket */
		assert_int_equal(r.child_seccomp, 2); /* filter mode */
		assert_non_null(strstr(r.child_limits, "Max open files            4"));
	}
	assert_non_null(strstr(r.child_limits, "Max processes             0"));
	assert_non_null(strstr(r.child_limits, "Max core file size        0"));
	assert_non_null(strstr(r.child_limits, "Max file size             0"));
	assert_non_null(strstr(r.child_limits, "Max cpu time              21"));
	rec_free(&r);

	/* a child dying of a signal is a crash, with the signal named */
	rec_init(&r);
	r.inspect = true;
	r.kill_sig = SIGSEGV;
	assert_int_equal(run_opts("rcs.progress('die') return 'no'", &o, &resp), SANDBOX_CRASHED);
	assert_string_equal(resp, "killed by signal 11 (SIGSEGV)");
	free(resp);
	rec_free(&r);
	agent_ok();
}

/*
 * qemu-user refuses seccomp (EINVAL for PR_SET_SECCOMP, no seccomp(2)). A
 * helper process stands in for it with a filter of its own that answers so,
 * then runs jobs: refused by default, run with allow_no_seccomp.
 */
static bool refuse_seccomp(void)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	bool ok = f != NULL &&
		  seccomp_rule_add(f, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(prctl), 1,
				   SCMP_A0(SCMP_CMP_EQ, PR_SET_SECCOMP, 0)) == 0 &&
		  seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(seccomp), 0) == 0 &&
		  seccomp_load(f) == 0;

	if (f != NULL)
		seccomp_release(f);
	return ok;
}

static int seccomp_refused_helper(void)
{
	struct sandbox_config cfg;
	struct sandbox_job job = {0};
	struct sandbox_result res;

	if (!refuse_seccomp())
		return 10;
	/* a launcher of its own, forked under the filter (the inherited one is the parent's) */
	if (sandbox_launcher_start(0, NULL) != RCS_OK)
		return 15;
	test_config(&cfg);
	cfg.allow_no_seccomp = false;
	job.script_name = "t";
	job.source = "return 'ran'";
	job.len = strlen(job.source);
	job.timeout = 10;
	job.cancel_fd = -1;
	if (sandbox_run(&cfg, NULL, &job, &res) != RCS_OK)
		return 11;
	if (res.outcome != SANDBOX_ERROR ||
	    strcmp(res.response, "sandbox unavailable: seccomp refused") != 0)
		return 12;
	sandbox_result_free(&res);
	cfg.allow_no_seccomp = true;
	if (sandbox_run(&cfg, NULL, &job, &res) != RCS_OK)
		return 13;
	if (res.outcome != SANDBOX_OK || strcmp(res.response, "ran") != 0)
		return 14;
	sandbox_result_free(&res);
	sandbox_launcher_stop();
	return 0;
}

static void test_seccomp_refused(void **state)
{
	pid_t pid;
	int status;

	(void)state;
	if (under_valgrind) /* the whole run already goes this way; see group_setup */
		skip();
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(seccomp_refused_helper());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	agent_ok();
}

/* true when pid is gone (or a zombie) within ms */
static bool gone_within(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		char path[64], buf[512];
		FILE *fp;
		bool zombie = false;

		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
		fp = fopen(path, "r");
		if (fp == NULL)
			return true;
		while (fgets(buf, sizeof(buf), fp))
			if (strncmp(buf, "State:", 6) == 0 && strchr(buf, 'Z') != NULL)
				zombie = true;
		fclose(fp);
		if (zombie)
			return true;
		poll(NULL, 0, 10);
	}
	return false;
}

/*
 * The launcher: small (named, nothing of ours open), and when it dies or
 * stops answering, the run in progress and the next ones end "sandbox
 * unavailable" at once, its child dies with it, sandbox_launcher_check says
 * so, and a new launcher serves again.
 */
static void test_launcher(void **state)
{
	struct rec r;
	struct run o = {0};
	char *resp = NULL, why[128], path[64], comm[32] = "";
	pid_t launcher = find_launcher();
	int fds = 0;
	FILE *fp;
	DIR *d;
	struct dirent *e;

	(void)state;
	assert_true(launcher > 0);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)launcher);
	fp = fopen(path, "r");
	assert_non_null(fp);
	assert_non_null(fgets(comm, sizeof(comm), fp));
	fclose(fp);
	assert_string_equal(comm, "rcs-launcher\n");
	/* it closes the last run's control channel just after reporting its exit */
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)launcher);
	for (int i = 0; i < 100 && (fds == 0 || fds > 6); i++) {
		poll(NULL, 0, i ? 10 : 0);
		d = opendir(path);
		assert_non_null(d);
		fds = 0;
		while ((e = readdir(d)) != NULL)
			fds += e->d_name[0] != '.';
		closedir(d);
	}
	if (!under_valgrind)
		assert_true(fds <= 6); /* stdin, stdout, stderr, its socket, its SIGCHLD pipe */
	assert_int_equal(sandbox_launcher_start(0, NULL), RCS_ERR_EXISTS);

	/* killed mid-script */
	rec_init(&r);
	r.launcher_sig = SIGKILL;
	o.rec = &r;
	assert_int_equal(run_opts("rcs.progress('now') rcs.sleep(20) return 'no'", &o, &resp),
			 SANDBOX_ERROR);
	assert_string_equal(resp, "sandbox unavailable: the sandbox launcher died");
	assert_true(o.elapsed_ms < 3000);
	free(resp);
	assert_true(r.child > 0);
	assert_true(gone_within(r.child, 3000)); /* the jail child died with it */
	rec_free(&r);
	assert_int_equal(sandbox_launcher_check(why, sizeof(why)), RCS_ERR_IO);
	assert_string_equal(why, "was killed by signal 9");
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* reaped by the check */
	/* later runs fail at once, until a new launcher is started */
	expect("return 1", T_LONG, SANDBOX_ERROR, "sandbox unavailable: the sandbox launcher died");
	assert_int_equal(sandbox_launcher_start(0, NULL), RCS_OK);
	assert_int_equal(sandbox_launcher_check(why, sizeof(why)), RCS_OK);
	agent_ok();

	/* stopped: it doesn't answer, and is killed for it */
	launcher = find_launcher();
	assert_int_equal(kill(launcher, SIGSTOP), 0);
	expect("return 1", T_LONG, SANDBOX_ERROR,
	       "sandbox unavailable: the sandbox launcher did not answer");
	assert_true(gone_within(launcher, 3000));
	assert_int_equal(sandbox_launcher_check(why, sizeof(why)), RCS_ERR_IO);
	assert_string_equal(why, "did not answer");
	assert_int_equal(sandbox_launcher_start(0, NULL), RCS_OK);
	agent_ok();
}

/* ---- the escape battery ---- */

static void test_escape_globals(void **state)
{
	/* each with the reason it must fail for */
	static const char *const blocked[][2] = {
	    {"return io.open('/etc/passwd'):read('a')", "unknown global 'io'"},
	    {"os.execute('touch /tmp/rcs-sandbox-pwned')", "field 'execute'"},
	    {"os.exit(0)", "field 'exit'"},
	    {"return os.getenv('HOME')", "field 'getenv'"},
	    {"os.remove('/tmp/x')", "field 'remove'"},
	    {"return os.tmpname()", "field 'tmpname'"},
	    {"return require('io')", "unknown global 'require'"},
	    {"return package.loaded.io", "unknown global 'package'"},
	    {"return debug.getregistry()", "unknown global 'debug'"},
	    {"dofile('/etc/passwd')", "unknown global 'dofile'"},
	    {"return loadfile('/etc/passwd')", "unknown global 'loadfile'"},
	    {"print('hello')", "unknown global 'print'"},
	    {"warn('hello')", "unknown global 'warn'"},
	    {"return rawget(_ENV, 'io') or rawget(_ENV, 'debug') or error('none')", "none"},
	    {"return collectgarbage('stop')", "invalid option 'stop'"},
	    {"return collectgarbage('generational')", "invalid option 'generational'"},
	    {"return assert(load(string.dump(function() return 1 end)))()",
	     "attempt to load a binary chunk (mode is 't')"},
	    {"return assert(load(string.dump(function() return 1 end), 'b', 'b'))()",
	     "attempt to load a binary chunk (mode is 't')"},
	    {"return assert(load('\\27Lua'))", "attempt to load a binary chunk"},
	    {"local parts = {string.dump(function() return 1 end)} local i = 0"
	     " return assert(load(function() i = i + 1 return parts[i] end))()",
	     "attempt to load a binary chunk"},
	    {"return load('return io')()", "unknown global 'io'"},
	    {"return load('return os.execute')()('id')", "attempt to call a nil value"},
	    {"return load('x = 1')()", "assignment to unknown global 'x'"},
	    {"return load('return io', 'c', 't', nil)()", "attempt to index a nil value"},
	    {"x = 1", "assignment to unknown global 'x' (declare it local)"},
	    {"function f() end", "assignment to unknown global 'f'"},
	    {"return undefined_global", "unknown global 'undefined_global'"},
	    {"return setmetatable(_ENV, nil)", "cannot change a protected metatable"},
	    {"return getmetatable('').__index.dump(os.time)", "unable to dump given function"},
	    {"return coroutine.wrap(function() return io end)()", "unknown global 'io'"},
	    {"return string.format('%99999d', 1)", "invalid conversion"},
	};
	char *resp = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++) {
		enum sandbox_outcome got = run(blocked[i][0], T_LONG, &resp);

		if (got != SANDBOX_ERROR || strstr(resp, blocked[i][1]) == NULL)
			print_error("script: %s -> %d %s (want ...%s...)\n", blocked[i][0],
				    (int)got, resp, blocked[i][1]);
		assert_int_equal(got, SANDBOX_ERROR);
		assert_non_null(strstr(resp, "script error: "));
		assert_non_null(strstr(resp, blocked[i][1]));
		free(resp);
	}
	assert_int_equal(access("/tmp/rcs-sandbox-pwned", F_OK), -1);
	/* what a script does have */
	expect("return type(os.time()) .. type(os.clock()) .. type(os.date('%c'))"
	       " .. os.date('!%Y-%m-%d %H:%M:%S', 0) .. os.date('!*t', 86400).day"
	       " .. os.time({year = 2020, month = 1, day = 1, hour = 12}) // 1000000000",
	       T_LONG, SANDBOX_OK, "numbernumberstring1970-01-01 00:00:0021");
	expect_sub("return os.date('%Ez')", T_LONG, SANDBOX_ERROR, "invalid conversion");
	expect("return load('return 1 + 1')() .. load('return _G')().type(_G)"
	       " .. tostring(load('return rcs')() == rcs)",
	       T_LONG, SANDBOX_OK, "2tabletrue");
	expect("local env = {v = 5} return load('return v', 'c', 't', env)()", T_LONG, SANDBOX_OK,
	       "5");
	expect("return string.format('%5.1f|%s', 1.25, utf8.char(233)) .. math.max(1, 3)"
	       " .. table.concat({1, 2}, '-') .. select('#', coroutine.running())",
	       T_LONG, SANDBOX_OK,
	       "  1.2|\xc3\xa9"
	       "31-22");
	expect("return type(collectgarbage('count')) .. collectgarbage()", T_LONG, SANDBOX_OK,
	       "number0");
	expect("local t = {} rawset(_ENV, 'g', 7) return g", T_LONG, SANDBOX_OK, "7");
	expect("return tostring(_G == _ENV) .. tostring(getmetatable(_ENV))", T_LONG, SANDBOX_OK,
	       "truefalse");
	agent_ok();
}

static void test_escape_string_metatable(void **state)
{
	(void)state;
	expect("return getmetatable('').__index == string", T_LONG, SANDBOX_OK, "true");
	expect("string.upper = nil return tostring(('x').upper)", T_LONG, SANDBOX_OK, "nil");
	expect("getmetatable('').__index.rep = function() return 'pwned' end"
	       " return ('x'):rep(2)",
	       T_LONG, SANDBOX_OK, "pwned");
	/* a fresh state per job: nothing carries over */
	expect("return ('x'):rep(2) .. ('y'):upper()", T_LONG, SANDBOX_OK, "xxY");
	agent_ok();
}

static void test_escape_loops(void **state)
{
	static const char *const hangs[] = {
	    "while true do end",
	    "while true do pcall(function() while true do end end) end",
	    "while true do pcall(error, 'x') end",
	    "local function f() return pcall(f) end while true do f() end",
	    "while true do xpcall(function() while true do end end,"
	    " function() while true do end end) end",
	    "coroutine.wrap(function() while true do end end)()",
	    "local co = coroutine.create(function() while true do end end)"
	    " while true do coroutine.resume(co) end",
	    "for i = 1, math.huge do local s = tostring(i) end",
	    "local t = setmetatable({}, {__index = function(t, k) while true do end end})"
	    " return t.x",
	};
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.timeout = T_SHORT;
	for (size_t i = 0; i < sizeof(hangs) / sizeof(hangs[0]); i++) {
		enum sandbox_outcome got = run_opts(hangs[i], &o, &resp);

		if (got != SANDBOX_TIMEOUT)
			print_error("script: %s -> %d %s\n", hangs[i], (int)got, resp);
		assert_int_equal(got, SANDBOX_TIMEOUT);
		assert_string_equal(resp, "timeout after 1 s");
		assert_true(o.elapsed_ms < 2500);
		free(resp);
	}
	agent_ok();
}

/* Hangs the count hook can't see: only the watchdog ends them. */
static void test_escape_c_hangs(void **state)
{
	static const char *const hangs[] = {
	    /* a backtracking pattern: C code, no instructions */
	    "return string.find(string.rep('a', 40) .. 'b', string.rep('a*', 20) .. 'c')",
	    /* finalizers run without hooks */
	    "setmetatable({}, {__gc = function() while true do end end}) collectgarbage()"
	    " return 1",
	    "setmetatable({}, {__gc = function() while true do end end})"
	    " local t = {} for i = 1, 1e7 do t[i % 1000] = {} end return 1",
	    /* table.sort with a comparison that never finishes */
	    "local t = {} for i = 1, 100 do t[i] = i end"
	    " table.sort(t, function(a, b) while true do end end)",
	};
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.timeout = T_SHORT;
	for (size_t i = 0; i < sizeof(hangs) / sizeof(hangs[0]); i++) {
		enum sandbox_outcome got = run_opts(hangs[i], &o, &resp);

		if (got != SANDBOX_TIMEOUT)
			print_error("script: %s -> %d %s\n", hangs[i], (int)got, resp);
		assert_int_equal(got, SANDBOX_TIMEOUT);
		assert_string_equal(resp, "timeout after 1 s");
		assert_true(o.elapsed_ms < 2500);
		free(resp);
	}
	agent_ok();
}

static void test_escape_memory(void **state)
{
	static const char *const bombs[] = {
	    "return #string.rep('x', 1e9)",
	    "local t = {} for i = 1, 1e9 do t[i] = i end",
	    "local s = 'x' while true do s = s .. s end",
	    "local t = {} for i = 1, 1e9 do t[#t + 1] = tostring(i) .. 'abcdefgh' end",
	    "local t = {} while true do t = {t, t} end",
	    "local t = {} for i = 1, 1e9 do t[i] = coroutine.create(function() end) end",
	    "return table.concat(setmetatable({}, {__index = function() return string.rep('y', "
	    "1e6) end}), '', 1, 1e6)",
	};
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.timeout = 10;
	for (size_t i = 0; i < sizeof(bombs) / sizeof(bombs[0]); i++) {
		enum sandbox_outcome got = run_opts(bombs[i], &o, &resp);

		bool limit = strcmp(resp, "memory limit exceeded") == 0;

		if (got != SANDBOX_ERROR || !limit)
			print_error("script: %s -> %d %s\n", bombs[i], (int)got, resp);
		free(resp);
		if (under_valgrind) { /* its own heap meets RLIMIT_AS first, or it is too slow */
			assert_true(got == SANDBOX_ERROR || got == SANDBOX_TIMEOUT);
			continue;
		}
		assert_int_equal(got, SANDBOX_ERROR);
		assert_true(limit);
	}
	expect_sub("return #string.rep('x', 2^40)", T_LONG, SANDBOX_ERROR,
		   "resulting string too large");
	/* a script may catch its own memory error and go on */
	expect("local ok = pcall(string.rep, 'x', 1e9) return tostring(ok)", T_LONG, SANDBOX_OK,
	       "false");
	agent_ok();
}

static void test_escape_recursion(void **state)
{
	static const char *const deep[] = {
	    "local function f() return 1 + f() end return f()",
	    "local function f(s) return (string.gsub(s, '.', f)) end return f('x')",
	    "local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k)"
	    " return t[k] end return t.x",
	    "local t = setmetatable({}, {}) getmetatable(t).__index = t return t.x",
	    "local mt = {} mt.__add = function(a, b) return a + b end"
	    " return setmetatable({}, mt) + 1",
	    "local function f() return coroutine.wrap(f)() end return f()",
	    "local s = string.rep('(', 1e5) return load('return ' .. s)()",
	    "local s = string.rep('{', 1e5) .. string.rep('}', 1e5) return load('return ' .. s)()",
	    "local t = setmetatable({}, {__tostring = function(t) return tostring(t) end})"
	    " return tostring(t)",
	};
	struct run o = {0};
	char *resp = NULL;

	(void)state;
	o.timeout = 10;
	for (size_t i = 0; i < sizeof(deep) / sizeof(deep[0]); i++) {
		enum sandbox_outcome got = run_opts(deep[i], &o, &resp);

		if (got != SANDBOX_ERROR)
			print_error("script: %s -> %d %s\n", deep[i], (int)got, resp);
		assert_int_equal(got, SANDBOX_ERROR);
		free(resp);
	}
	agent_ok();
}

/*
 * Lua 5.4.4's C-stack overflow through a chain of coroutine.close (fixed in
 * 5.4.5): Debian's build segfaults at ~30000 links, inside the default 64 MiB.
 * Whatever the Lua version does, the agent must see an outcome.
 */
static void test_escape_coroutine_close(void **state)
{
	static const char *const src =
	    "local coro = false\n"
	    "for i = 1, 40000 do\n"
	    "  local previous = coro\n"
	    "  coro = coroutine.create(function()\n"
	    "    local cc <close> = setmetatable({}, {__close = function()\n"
	    "      if previous then assert(coroutine.close(previous)) end\n"
	    "    end})\n"
	    "    coroutine.yield()\n"
	    "  end)\n"
	    "  assert(coroutine.resume(coro))\n"
	    "end\n"
	    "return tostring(coroutine.close(coro))\n";
	struct sandbox_config cfg;
	struct run o = {0};
	char *resp = NULL;
	enum sandbox_outcome got;

	(void)state;
	test_config(&cfg);
	cfg.mem_limit = SANDBOX_DEFAULT_MEM_LIMIT;
	o.cfg = &cfg;
	o.timeout = 5;
	got = run_opts(src, &o, &resp);
	print_message("coroutine.close chain: outcome %d: %s\n", (int)got, resp ? resp : "(nil)");
	assert_true(got == SANDBOX_CRASHED || got == SANDBOX_ERROR || got == SANDBOX_TIMEOUT ||
		    got == SANDBOX_OK);
	if (got == SANDBOX_CRASHED && !under_valgrind)
		assert_string_equal(resp, "killed by signal 11 (SIGSEGV)");
	free(resp);
	agent_ok();
}

/* ---- stock Lua behaviour inside the jail ---- */

/* Argument errors name the function as stock Lua 5.4 does (it looks the names up in the
   loaded modules, which the jail must keep naming what a script sees). */
static void test_lua_function_names(void **state)
{
	static const char *const cases[][2] = {
	    {"return select(2, pcall(setmetatable, 1))",
	     "bad argument #1 to 'setmetatable' (table expected, got number)"},
	    {"return select(2, pcall(tostring))", "bad argument #1 to 'tostring' (value expected)"},
	    {"return select(2, xpcall(ipairs, function(m) return m end))",
	     "bad argument #1 to 'ipairs' (value expected)"},
	    {"return select(2, pcall(select, 0))",
	     "bad argument #1 to 'select' (index out of range)"},
	    {"return select(2, pcall(collectgarbage, 'bogus'))",
	     "bad argument #1 to 'collectgarbage' (invalid option 'bogus')"},
	    {"return select(2, pcall(string.rep))",
	     "bad argument #1 to 'string.rep' (string expected, got no value)"},
	    {"return select(2, pcall(('x').rep))",
	     "bad argument #1 to 'string.rep' (string expected, got no value)"},
	    {"return select(2, pcall(function() return ('x'):rep() end))",
	     "[string \"t\"]:1: bad argument #1 to 'rep' (number expected, got no value)"},
	    {"return select(2, pcall(function() local t = table t.insert(1) end))",
	     "[string \"t\"]:1: bad argument #1 to 'insert' (table expected, got number)"},
	    {"return select(2, pcall(table.concat, 1))",
	     "bad argument #1 to 'table.concat' (table expected, got number)"},
	    {"return select(2, pcall(math.floor, 'a'))",
	     "bad argument #1 to 'math.floor' (number expected, got string)"},
	    {"return select(2, pcall(utf8.char, 'a'))",
	     "bad argument #1 to 'utf8.char' (number expected, got string)"},
	    {"return select(2, pcall(coroutine.resume, 1))",
	     "bad argument #1 to 'coroutine.resume' (thread expected, got number)"},
	    {"return select(2, pcall(os.date, 1, 'x'))",
	     "bad argument #2 to 'os.date' (number expected, got string)"},
	    /* the host API the same way */
	    {"return select(2, pcall(rcs.progress))",
	     "bad argument #1 to 'rcs.progress' (string expected, got no value)"},
	    {"return select(2, pcall(rcs.config.get))",
	     "bad argument #1 to 'rcs.config.get' (string expected, got no value)"},
	    {"return select(2, pcall(rcs.file.read, {}))",
	     "bad argument #1 to 'rcs.file.read' (string expected, got table)"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect(cases[i][0], T_LONG, SANDBOX_OK, cases[i][1]);
	/* naming them reaches nothing the jail removed */
	expect("return tostring(rawget(_ENV, 'print')) .. tostring(rawget(_ENV, 'package'))"
	       " .. tostring(os.execute)",
	       T_LONG, SANDBOX_OK, "nilnilnil");
	expect_sub("return load('return print', 'c', 't', nil)()", T_LONG, SANDBOX_ERROR,
		   "attempt to index a nil value (upvalue '_ENV')");
	agent_ok();
}

/* load's errors carry the caller's position and name, as stock Lua's load. */
static void test_lua_load_errors(void **state)
{
	static const char *const cases[][2] = {
	    {"return select(2, pcall(load))",
	     "bad argument #1 to 'load' (function expected, got no value)"},
	    {"return select(2, pcall(load, {}))",
	     "bad argument #1 to 'load' (function expected, got table)"},
	    {"return select(2, pcall(load, 'x', {}))",
	     "bad argument #2 to 'load' (string expected, got table)"},
	    {"return select(2, pcall(load, 'return 1', nil, {}))",
	     "bad argument #3 to 'load' (string expected, got table)"},
	    {"return select(2, pcall(function() return load(nil) end))",
	     "[string \"t\"]:1: bad argument #1 to 'load' (function expected, got nil)"},
	    {"return select(2, load(function() return {} end))",
	     "[string \"t\"]:1: reader function must return a string"},
	    {"return select(2, load(function() error('x') end))", "[string \"t\"]:1: x"},
	    {"return select(2, load('return +'))",
	     "[string \"return +\"]:1: unexpected symbol near '+'"},
	    {"return select(2, load('local x\\n+', '=chunk'))",
	     "chunk:2: unexpected symbol near '+'"},
	    {"local s = {'return', ' +'} local i = 0"
	     " return select(2, load(function() i = i + 1 return s[i] end))",
	     "(load):1: unexpected symbol near '+'"},
	    {"return tostring(load(12))", "nil"},
	    {"return load('return ...', 'c')(5)", "5"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect(cases[i][0], T_LONG, SANDBOX_OK, cases[i][1]);
	expect("local x = 1\nload(nil)", T_LONG, SANDBOX_ERROR,
	       "script error: [string \"t\"]:2: bad argument #1 to 'load' (function expected, got "
	       "nil)");
	expect("return assert(load('return +'))", T_LONG, SANDBOX_ERROR,
	       "script error: [string \"t\"]:1: [string \"return +\"]:1: unexpected symbol near "
	       "'+'");
	agent_ok();
}

/* Inside a finalizer the collector can't be driven: collectgarbage returns fail (nil). */
static void test_lua_gc_in_finalizer(void **state)
{
	(void)state;
	expect("local r = {}"
	       " setmetatable({}, {__gc = function()"
	       "   for i, opt in ipairs({'count', 'collect', 'step', 'isrunning'}) do"
	       "     r[i] = tostring(collectgarbage(opt)) .. select('#', collectgarbage(opt))"
	       "   end"
	       "   r[5] = tostring(collectgarbage())"
	       " end})"
	       " collectgarbage()"
	       " return table.concat(r, ' ')",
	       T_LONG, SANDBOX_OK, "nil1 nil1 nil1 nil1 nil");
	/* and works again once it is done */
	expect("setmetatable({}, {__gc = function() collectgarbage('count') end}) collectgarbage()"
	       " return math.type(collectgarbage('count')) .. collectgarbage()"
	       " .. type(collectgarbage('step')) .. tostring(collectgarbage('isrunning'))",
	       T_LONG, SANDBOX_OK, "float0booleantrue");
	agent_ok();
}

/* When the script ends the state is closed, as lua.c does: what is still alive is finalized. */
static void test_lua_close_finalizers(void **state)
{
	struct rec r;
	struct run o = {0};
	char *resp = NULL;
	json_object *v;

	(void)state;
	rec_init(&r);
	o.rec = &r;
	/* still referenced at the end: only lua_close finalizes it, before the result goes */
	assert_int_equal(
	    run_opts("rawset(_ENV, 'keep', setmetatable({}, {__gc = function()"
		     " rcs.config.set('closed', 'yes') end}))"
		     " local t = {} setmetatable({}, {__gc = function() t.late = 1 end})"
		     " return t",
		     &o, &resp),
	    SANDBOX_OK);
	assert_string_equal(resp, "{}"); /* the response was read before */
	free(resp);
	assert_true(json_object_object_get_ex(r.config, "closed", &v));
	assert_string_equal(json_object_get_string(v), "yes");
	rec_free(&r);

	/* a script error too; errors in finalizers are ignored, as in Lua */
	rec_init(&r);
	assert_int_equal(run_opts("rawset(_ENV, 'k1', setmetatable({}, {__gc = function()"
				  " error('ignored') end}))"
				  " rawset(_ENV, 'k2', setmetatable({}, {__gc = function()"
				  " rcs.log('info', 'closed') end}))"
				  " error('boom')",
				  &o, &resp),
			 SANDBOX_ERROR);
	assert_string_equal(resp, "script error: [string \"t\"]:1: boom");
	free(resp);
	assert_int_equal(r.log_n, 1);
	assert_string_equal(r.log_text, "closed");
	rec_free(&r);

	/* not after a timeout: the deadline is past */
	rec_init(&r);
	o.timeout = T_SHORT;
	assert_int_equal(run_opts("rawset(_ENV, 'k', setmetatable({}, {__gc = function()"
				  " rcs.log('info', 'closed') end})) while true do end",
				  &o, &resp),
			 SANDBOX_TIMEOUT);
	free(resp);
	assert_int_equal(r.log_n, 0);
	rec_free(&r);
	o.rec = NULL;

	/* a finalizer that never ends meets the watchdog */
	assert_int_equal(run_opts("rawset(_ENV, 'k', setmetatable({}, {__gc = function()"
				  " while true do end end})) return 1",
				  &o, &resp),
			 SANDBOX_TIMEOUT);
	assert_string_equal(resp, "timeout after 1 s");
	assert_true(o.elapsed_ms < 2500);
	free(resp);
	/* one that runs out of memory has its error ignored */
	expect("rawset(_ENV, 'k', setmetatable({}, {__gc = function()"
	       " local s = 'x' while true do s = s .. s end end})) return 'ok'",
	       T_LONG, SANDBOX_OK, "ok");
	agent_ok();
}

/* ---- the parent's guard: config and the wire ---- */

static void test_config_check(void **state)
{
	struct sandbox_config cfg;
	char err[256];
	char *bad1[] = {"echo=bin/echo"}, *bad2[] = {"=/bin/echo"}, *bad3[] = {"e o=/bin/x"},
	     *bad4[] = {"echo=/bin/echo", "echo=/bin/true"}, *bad5[] = {"relative/dir"};
	struct cfg_strlist l1 = {bad1, 1}, l2 = {bad2, 1}, l3 = {bad3, 1}, l4 = {bad4, 2},
			   l5 = {bad5, 1};
	struct sandbox_job job = {0};
	struct sandbox_result res;

	(void)state;
	test_config(&cfg);
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_OK);
	cfg.allow_command = &l1;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "echo=bin/echo"));
	cfg.allow_command = &l2;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	cfg.allow_command = &l3;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	cfg.allow_command = &l4;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "twice"));
	cfg.allow_command = &cmds;
	cfg.file_dir = &l5;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	test_config(&cfg);
	cfg.mem_limit = 1000;
	assert_int_equal(sandbox_config_check(&cfg, err, sizeof(err)), RCS_ERR_INVAL);
	/* sandbox_run refuses it, and leaves *out zeroed */
	job.script_name = "t";
	job.source = "return 1";
	job.len = 8;
	job.cancel_fd = -1;
	memset(&res, 0xff, sizeof(res));
	assert_int_equal(sandbox_run(&cfg, NULL, &job, &res), RCS_ERR_INVAL);
	assert_null(res.response);
	test_config(&cfg);
	job.cancel_fd = 1000; /* not open */
	assert_int_equal(sandbox_run(&cfg, NULL, &job, &res), RCS_ERR_INVAL);
	job.cancel_fd = -1;
	job.source = NULL;
	assert_int_equal(sandbox_run(&cfg, NULL, &job, &res), RCS_ERR_INVAL);
	/* a host without services: rcs.config says so, the rest is dropped */
	job.source = "rcs.progress('x') rcs.log('info', 'y') return rcs.config.get('k')";
	job.len = strlen(job.source);
	job.timeout = T_LONG;
	assert_int_equal(sandbox_run(&cfg, NULL, &job, &res), RCS_OK);
	assert_int_equal(res.outcome, SANDBOX_ERROR);
	assert_non_null(strstr(res.response, "rcs.config is not available"));
	sandbox_result_free(&res);
	agent_ok();
}

static void test_wire(void **state)
{
	struct buf b;
	struct sbx_msg m;
	const char *f[3] = {"ab", "", "xyz"};
	size_t fl[3] = {2, 0, 3};
	char body[64];
	unsigned seed = 12345;

	(void)state;
	buf_init(&b, 1024);
	assert_int_equal(sandbox_wire_encode(&b, SBX_LOG, 3, f, fl), RCS_OK);
	assert_int_equal(sandbox_wire_len((const unsigned char *)b.data), b.len - 4);
	assert_int_equal(sandbox_wire_decode(b.data + 4, b.len - 4, &m), RCS_OK);
	assert_int_equal(m.op, SBX_LOG);
	assert_int_equal(m.nfields, 3);
	assert_memory_equal(m.f[2], "xyz", 3);
	assert_int_equal(m.flen[1], 0);
	/* every truncation, and trailing bytes, are refused */
	for (size_t n = 0; n < b.len - 4; n++)
		assert_int_equal(sandbox_wire_decode(b.data + 4, n, &m), RCS_ERR_INVAL);
	memcpy(body, b.data + 4, b.len - 4);
	body[b.len - 4] = 'x';
	assert_int_equal(sandbox_wire_decode(body, b.len - 3, &m), RCS_ERR_INVAL);
	/* unknown op, too many fields, a field length past the end */
	body[0] = 99;
	assert_int_equal(sandbox_wire_decode(body, b.len - 4, &m), RCS_ERR_INVAL);
	body[0] = SBX_LOG;
	body[1] = (char)200;
	assert_int_equal(sandbox_wire_decode(body, b.len - 4, &m), RCS_ERR_INVAL);
	body[1] = 3;
	body[2] = (char)0xff;
	assert_int_equal(sandbox_wire_decode(body, b.len - 4, &m), RCS_ERR_INVAL);
	/* the ceiling */
	buf_free(&b);
	buf_init(&b, 16);
	assert_int_equal(sandbox_wire_encode(&b, SBX_LOG, 3, f, fl), RCS_ERR_TOOBIG);
	buf_free(&b);
	/* random bytes never crash the decoder */
	for (int i = 0; i < 20000; i++) {
		size_t n = (size_t)(rand_r(&seed) % (int)sizeof(body));

		for (size_t j = 0; j < n; j++)
			body[j] = (char)rand_r(&seed);
		if (sandbox_wire_decode(body, n, &m) == RCS_OK) {
			size_t sum = 2;

			for (size_t j = 0; j < m.nfields; j++)
				sum += 4 + m.flen[j];
			assert_int_equal(sum, n);
		}
	}
	assert_true(text_utf8_valid("caf\xc3\xa9", 5));
	assert_false(text_utf8_valid("\xc0\x80", 2));     /* overlong */
	assert_false(text_utf8_valid("\xed\xa0\x80", 3)); /* surrogate */
	assert_false(text_utf8_valid("\xe2\x82", 2));     /* cut */
}

/* ---- setup ---- */

static int rm_rf_cb(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

static int group_setup(void **state)
{
	(void)state;
	under_valgrind = getenv("RCS_UNDER_VALGRIND") != NULL;
#ifdef RUNNING_ON_VALGRIND
	under_valgrind = under_valgrind || RUNNING_ON_VALGRIND;
#endif
	/* valgrind has no seccomp(2) and its own system calls would meet the
	   child's filter: refuse seccomp as qemu-user does, and run without */
	if (under_valgrind && !refuse_seccomp())
		return -1;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/rcs-sandbox-test-XXXXXX");
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	snprintf(outside, sizeof(outside), "/tmp/rcs-sandbox-outside-XXXXXX");
	if (mkdtemp(outside) == NULL)
		return -1;
	dir_items[0] = tmpdir;
	signal(SIGPIPE, SIG_DFL); /* the sandbox must not need SIGPIPE ignored */
	/* as rcs-agent does first: no thread yet (and under valgrind, after the filter) */
	if (sandbox_launcher_start(0, NULL) != RCS_OK)
		return -1;
	base_fds = count_fds();
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	sandbox_launcher_stop();
	rm_rf_cb(tmpdir);
	rm_rf_cb(outside);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wire),
	    cmocka_unit_test(test_config_check),
	    cmocka_unit_test(test_return_values),
	    cmocka_unit_test(test_return_table),
	    cmocka_unit_test(test_bad_responses),
	    cmocka_unit_test(test_script_errors),
	    cmocka_unit_test(test_job_data),
	    cmocka_unit_test(test_progress_and_log),
	    cmocka_unit_test(test_config_get_set),
	    cmocka_unit_test(test_exec),
	    cmocka_unit_test(test_exec_timeout),
	    cmocka_unit_test(test_files),
	    cmocka_unit_test(test_reboot),
	    cmocka_unit_test(test_reboot_resume),
	    cmocka_unit_test(test_fail_and_rollback),
	    cmocka_unit_test(test_sleep_and_cancel),
	    cmocka_unit_test(test_from_thread),
	    cmocka_unit_test(test_jail),
	    cmocka_unit_test(test_seccomp_refused),
	    cmocka_unit_test(test_launcher),
	    cmocka_unit_test(test_escape_globals),
	    cmocka_unit_test(test_escape_string_metatable),
	    cmocka_unit_test(test_escape_loops),
	    cmocka_unit_test(test_escape_c_hangs),
	    cmocka_unit_test(test_escape_memory),
	    cmocka_unit_test(test_escape_recursion),
	    cmocka_unit_test(test_escape_coroutine_close),
	    cmocka_unit_test(test_lua_function_names),
	    cmocka_unit_test(test_lua_load_errors),
	    cmocka_unit_test(test_lua_gc_in_finalizer),
	    cmocka_unit_test(test_lua_close_finalizers),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
