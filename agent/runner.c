/*
 * runner.c - the agent's job worker: one job at a time, in arrival order.
 *
 * For each queued job: edge_started, edge_running, the script in the
 * sandbox (progress reported as edge_running), then terminated with the
 * result or edge_error with the reason. A reboot the script asked for runs
 * only after the broker acknowledged the job's final report.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"

extern char **environ;

/* ---- sandbox host services ---- */

struct runner_job {
	struct agent *a;
	const char *job;
};

static void runner_progress(void *ctx, const char *text)
{
	struct runner_job *rj = ctx;

	link_report(rj->a, rj->job, JS_EDGE_RUNNING, text);
}

static void runner_log(void *ctx, const char *level, const char *text)
{
	struct runner_job *rj = ctx;

	if (strcmp(level, "error") == 0 || strcmp(level, "warn") == 0)
		log_warnx("job %s: script: %.500s", rj->job, text);
	else if (strcmp(level, "debug") == 0)
		log_debug("job %s: script: %.500s", rj->job, text);
	else
		log_info("job %s: script: %.500s", rj->job, text);
}

static enum rcs_err runner_config_get(void *ctx, const char *key, char **value)
{
	struct runner_job *rj = ctx;

	return journal_config_get(rj->a->journal, key, value);
}

static enum rcs_err runner_config_set(void *ctx, const char *key, const char *value)
{
	struct runner_job *rj = ctx;

	return journal_config_set(rj->a->journal, key, value);
}

/* ---- one job ---- */

static json_object *runner_job_table(const struct proto_envelope *env)
{
	json_object *o = json_object_new_object(), *t = json_object_new_object();

	json_object_object_add(o, "ident", json_object_new_string(env->job));
	json_object_object_add(o, "client_root", json_object_new_string(env->client_root));
	json_object_object_add(o, "entity_ident", json_object_new_string(env->entity_ident));
	json_object_object_add(t, "ident", json_object_new_string(env->task_ident));
	json_object_object_add(t, "version", json_object_new_int64(env->task_version));
	json_object_object_add(t, "name", json_object_new_string(env->task_name));
	json_object_object_add(o, "task", t);
	json_object_object_add(o, "issued_at", json_object_new_int64(env->issued_at));
	return o;
}

static void runner_run(struct agent *a, const char *job, const char *payload, size_t len)
{
	struct proto_envelope env;
	struct jsonu_err e;
	struct sandbox_config cfg;
	struct sandbox_host host;
	struct sandbox_job sj;
	struct sandbox_result res;
	struct runner_job rj = {a, job};
	struct agent_policy *p = NULL;
	json_object *jt = NULL;
	long long highest = 0;
	int64_t now = (int64_t)time(NULL);
	enum rcs_err err;

	memset(&res, 0, sizeof(res));
	if (proto_envelope_decode(payload, len, &env, &e) != RCS_OK) {
		link_report(a, job, JS_EDGE_ERROR, "the journaled envelope is unreadable");
		return;
	}
	if (env.expires_at && now >= env.expires_at) {
		char reason[96];
		snprintf(reason, sizeof(reason), "expired at %lld before it could start",
			 (long long)env.expires_at);
		link_report(a, job, JS_EDGE_ERROR, reason);
		goto out;
	}
	/* the rollback check again: a newer version may have run while this one waited */
	if (journal_task_version(a->journal, env.task_ident, &highest) == RCS_OK &&
	    env.task_version < highest) {
		char reason[128];
		snprintf(reason, sizeof(reason),
			 "task version %lld is older than version %lld"
			 " already run",
			 env.task_version, highest);
		link_report(a, job, JS_EDGE_ERROR, reason);
		goto out;
	}
	journal_task_version_set(a->journal, env.task_ident, env.task_version);
	link_report(a, job, JS_EDGE_STARTED, NULL);
	link_report(a, job, JS_EDGE_RUNNING, NULL);

	p = agent_policy_get(a);
	sandbox_config_defaults(&cfg);
	if (a->set->mem_limit > 0)
		cfg.mem_limit = (size_t)a->set->mem_limit;
	if (a->set->exec_timeout > 0)
		cfg.exec_timeout = a->set->exec_timeout;
	if (a->set->exec_max_output > 0)
		cfg.exec_max_output = (size_t)a->set->exec_max_output;
	cfg.allow_command = &p->allow_command;
	cfg.file_dir = &p->file_dir;
	cfg.allow_no_seccomp = a->set->allow_no_seccomp;
	memset(&host, 0, sizeof(host));
	host.ctx = &rj;
	host.progress = runner_progress;
	host.log = runner_log;
	host.config_get = runner_config_get;
	host.config_set = runner_config_set;
	jt = runner_job_table(&env);
	memset(&sj, 0, sizeof(sj));
	sj.job_ident = job;
	sj.script_name = env.script_name;
	sj.source = env.script_source;
	sj.len = env.script_len;
	sj.variables = env.variables;
	sj.constants = env.constants;
	sj.job = jt;
	sj.timeout = env.timeout;
	sj.cancel_fd = a->cancel_fd[0];
	err = sandbox_run(&cfg, &host, &sj, &res);
	if (err != RCS_OK) {
		char reason[128];
		snprintf(reason, sizeof(reason), "the device could not start the script: %s",
			 rcs_strerror(err));
		link_report(a, job, JS_EDGE_ERROR, reason);
		goto out;
	}
	switch (res.outcome) {
	case SANDBOX_OK:
		link_report(a, job, JS_TERMINATED, res.response);
		if (res.reboot) {
			pthread_mutex_lock(&a->lock);
			a->reboot_pending = true;
			snprintf(a->reboot_job, sizeof(a->reboot_job), "%s", job);
			pthread_mutex_unlock(&a->lock);
		}
		break;
	case SANDBOX_CANCELLED: {
		bool stopping, relaunch;
		pthread_mutex_lock(&a->lock);
		stopping = a->stop;
		relaunch = a->relaunch;
		pthread_mutex_unlock(&a->lock);
		/* the agent stops to restart the launcher: the same words as the jail's own */
		link_report(a, job, JS_EDGE_ERROR,
			    relaunch   ? "sandbox unavailable: the sandbox launcher died"
			    : stopping ? "interrupted: the agent was stopped during the job"
				       : "cancelled while running");
		break;
	}
	default:
		link_report(a, job, JS_EDGE_ERROR, res.response ? res.response : "script failed");
		break;
	}
out:
	sandbox_result_free(&res);
	if (jt)
		json_object_put(jt);
	if (p)
		agent_policy_put(p);
	proto_envelope_free(&env);
}

/* Runs the configured reboot command once the final report left the outbox. */
static void runner_reboot(struct agent *a)
{
	struct timespec deadline;
	char *argv[2];
	pid_t pid;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 300;
	pthread_mutex_lock(&a->lock);
	while (!a->stop && !link_outbox_empty(a))
		if (pthread_cond_timedwait(&a->cond, &a->lock, &deadline) == ETIMEDOUT)
			break;
	a->reboot_pending = false;
	pthread_mutex_unlock(&a->lock);
	if (!link_outbox_empty(a)) {
		log_warnx("reboot asked by job %s not done: its final report was not acknowledged",
			  a->reboot_job);
		return;
	}
	log_info("rebooting as job %s asked: %s", a->reboot_job, a->set->reboot_command);
	argv[0] = a->set->reboot_command;
	argv[1] = NULL;
	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0) {
		log_warn("reboot command %s", argv[0]);
		return;
	}
	waitpid(pid, NULL, 0);
}

static void *runner_loop(void *arg)
{
	struct agent *a = arg;

	pthread_mutex_lock(&a->lock);
	for (;;) {
		char job[UUID_STR_LEN], drain[64], why[128];
		char *payload = NULL;
		size_t len = 0;
		enum rcs_err err;

		while (!a->stop && !a->work)
			pthread_cond_wait(&a->cond, &a->lock);
		if (a->stop)
			break;
		a->work = false;
		/* no launcher: main restarts the agent (SIGCHLD); the jobs wait in the journal */
		if (sandbox_launcher_check(why, sizeof(why)) != RCS_OK)
			continue;
		err = journal_next_queued(a->journal, job, &payload, &len);
		if (err != RCS_OK) {
			if (err != RCS_ERR_NOTFOUND)
				log_warnx("journal: %s", rcs_strerror(err));
			continue;
		}
		if (journal_set_state(a->journal, job, JOURNAL_RUNNING) != RCS_OK) {
			free(payload); /* dropped meanwhile (cancel) */
			a->work = true;
			continue;
		}
		snprintf(a->running, sizeof(a->running), "%s", job);
		while (read(a->cancel_fd[0], drain, sizeof(drain)) > 0)
			; /* a cancel of an earlier job must not hit this one */
		pthread_mutex_unlock(&a->lock);

		runner_run(a, job, payload, len);
		free(payload);

		pthread_mutex_lock(&a->lock);
		a->running[0] = '\0';
		a->work = true; /* look for the next one */
		if (a->reboot_pending) {
			pthread_mutex_unlock(&a->lock);
			runner_reboot(a);
			pthread_mutex_lock(&a->lock);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

enum rcs_err runner_start(struct agent *a, pthread_t *thread)
{
	if (pipe2(a->cancel_fd, O_CLOEXEC | O_NONBLOCK) != 0)
		return RCS_ERR_IO;
	pthread_mutex_lock(&a->lock);
	a->work = true;
	pthread_mutex_unlock(&a->lock);
	if (pthread_create(thread, NULL, runner_loop, a) != 0)
		return RCS_ERR_IO;
	return RCS_OK;
}

void runner_cancel(struct agent *a, const char *job)
{
	enum journal_state st;

	pthread_mutex_lock(&a->lock);
	if (strcmp(a->running, job) == 0) {
		char one = 1;
		log_info("job %s: cancelled while running: stopping the script", job);
		if (write(a->cancel_fd[1], &one, 1) != 1)
			log_warn("cancel pipe");
	} else if (journal_get_state(a->journal, job, &st) == RCS_OK && st == JOURNAL_QUEUED) {
		journal_set_state(a->journal, job, JOURNAL_DROPPED);
		link_report(a, job, JS_EDGE_ERROR, "cancelled before it started");
	} else if (journal_get_state(a->journal, job, &st) == RCS_ERR_NOTFOUND) {
		/* the cancel overtook its envelope: remember the job as dropped, so the
		 * envelope, when it comes, is a repeat and never runs */
		bool is_new = false;
		if (journal_receive(a->journal, job, NULL, 0, "", 0, (int64_t)time(NULL), &is_new) ==
			    RCS_OK &&
		    is_new && journal_set_state(a->journal, job, JOURNAL_DROPPED) == RCS_OK)
			link_report(a, job, JS_EDGE_ERROR, "cancelled before it arrived");
	} else {
		log_info("job %s: cancel for a job that already ended, ignored", job);
	}
	pthread_mutex_unlock(&a->lock);
}
