/*
 * job_script.c - a job's script in the sandbox, with the host services it calls. See
 * job_script.h; the API is docs/lua-api.md's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_script.h"

#include "log.h"
#include "phase.h"

struct script_job {
	const struct job_script *js;
	const char *job;
	json_object *state; /* rcs.state, NULL: empty */
};

static void script_progress(void *ctx, const char *text)
{
	struct script_job *rj = ctx;

	rj->js->report(rj->js->ctx, rj->job, JS_EDGE_RUNNING, text);
}

static void script_log(void *ctx, const char *level, const char *text)
{
	struct script_job *rj = ctx;

	if (strcmp(level, "error") == 0 || strcmp(level, "warn") == 0)
		log_warnx("job %s: script: %.500s", rj->job, text);
	else if (strcmp(level, "debug") == 0)
		log_debug("job %s: script: %.500s", rj->job, text);
	else
		log_info("job %s: script: %.500s", rj->job, text);
}

static enum rcs_err script_config_get(void *ctx, const char *key, char **value)
{
	struct script_job *rj = ctx;

	return journal_config_get(rj->js->journal, key, value);
}

static enum rcs_err script_config_set(void *ctx, const char *key, const char *value)
{
	struct script_job *rj = ctx;

	return journal_config_set(rj->js->journal, key, value);
}

/* rcs.state.set: checked, journaled (durable), then in force */
static enum rcs_err script_state_set(void *ctx, const char *key, char type, const char *value,
				     size_t len, char *why, size_t whylen)
{
	struct script_job *rj = ctx;
	json_object *next = NULL;
	char *text = NULL;
	enum rcs_err err;

	err = phase_state_set(rj->state, key, type, value, len, &next, &text, why, whylen);
	if (err == RCS_OK &&
	    (err = journal_script_state_set(rj->js->journal, rj->job, text)) != RCS_OK)
		snprintf(why, whylen, "rcs.state.set: the journal failed: %s", rcs_strerror(err));
	if (err == RCS_OK) {
		json_object_put(rj->state);
		rj->state = next;
		next = NULL;
	}
	json_object_put(next);
	free(text);
	return err;
}

static enum rcs_err script_state_get(void *ctx, const char *key, char *type, char **value)
{
	struct script_job *rj = ctx;

	return phase_state_get(rj->state, key, type, value);
}

/* rcs.job: the envelope's facts, and the phase the job runs in (absent in its first run) and
 * whether the device rebooted since the job last ran (docs/lua-api.md "rcs.job"). */
static json_object *script_job_table(const struct proto_envelope *env, const char *phase,
				     bool rebooted)
{
	json_object *o = json_object_new_object(), *t = json_object_new_object();

	if (phase[0] != '\0')
		json_object_object_add(o, "phase", json_object_new_string(phase));
	json_object_object_add(o, "rebooted", json_object_new_boolean(rebooted));
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

enum rcs_err job_script_run(const struct job_script *js, const struct proto_envelope *env,
			    json_object *arts, const struct journal_phase *ph, bool rebooted,
			    struct sandbox_result *res)
{
	const char *job = js->job;
	struct sandbox_config cfg;
	struct sandbox_host host;
	struct sandbox_job sj;
	struct script_job rj = {js, job, NULL};
	json_object *jt = script_job_table(env, ph->phase, rebooted);
	char *state = NULL;
	enum rcs_err err;

	if (journal_script_state_get(js->journal, job, &state) == RCS_OK)
		rj.state = phase_state_parse(job, state);
	free(state);
	settings_sandbox_config(js->set, js->policy, &cfg);
	memset(&host, 0, sizeof(host));
	host.ctx = &rj;
	host.progress = script_progress;
	host.log = script_log;
	host.config_get = script_config_get;
	host.config_set = script_config_set;
	host.state_get = script_state_get;
	host.state_set = script_state_set;
	memset(&sj, 0, sizeof(sj));
	sj.job_ident = job;
	sj.script_name = env->script_name;
	sj.source = env->script_source;
	sj.len = env->script_len;
	sj.variables = env->variables;
	sj.constants = env->constants;
	sj.artifacts = arts;
	sj.job = jt;
	sj.timeout = env->timeout;
	sj.cancel_fd = js->cancel_fd;
	err = sandbox_run(&cfg, &host, &sj, res);
	if (jt)
		json_object_put(jt);
	json_object_put(rj.state);
	return err;
}
