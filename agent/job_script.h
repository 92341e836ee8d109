/*
 * job_script.h - a job's script run in the sandbox for the runner (docs/agent.md "What
 * happens to a job", step 4): the jail's configuration under the policy in force, rcs.job,
 * and the host services the script calls (progress, log, rcs.config, rcs.state, whose
 * table is read from the journal and journaled at each set: docs/lua-api.md "rcs.state").
 */
#ifndef RCS_AGENT_JOB_SCRIPT_H
#define RCS_AGENT_JOB_SCRIPT_H

#include <json-c/json.h>
#include <stdbool.h>

#include "err.h"
#include "journal.h"
#include "proto.h"
#include "sandbox.h"
#include "settings.h"
#include "status.h"

struct job_script {
	const struct settings *set;
	const struct settings_policy *policy;
	struct journal *journal;
	const char *job;
	int cancel_fd; /* the runner's: a cancel or the agent's stop kills the script */
	/* rcs.progress: an edge_running report of job */
	void (*report)(void *ctx, const char *job, enum job_status status, const char *response);
	void *ctx;
};

/* The script of env, rcs.artifacts being arts (NULL: none), in phase ph (its phase "" in a
 * first run) after a reboot or not; *res its outcome (sandbox_run's error otherwise). */
enum rcs_err job_script_run(const struct job_script *js, const struct proto_envelope *env,
			    json_object *arts, const struct journal_phase *ph, bool rebooted,
			    struct sandbox_result *res);

#endif
