/*
 * runner.h - the agent's jobs (docs/agent.md "What happens to a job"): the
 * envelopes the link hands over, checked (verify.c) and queued in the
 * journal, then run one at a time, in arrival order: their artifacts
 * downloaded (artifact.c), then their script in the sandbox;
 * cancels; the reboot a script asked for.
 *
 * The runner reports through the callbacks it is given (main.c wires them to
 * link.c, see docs/architecture.md) and reads the policy in force from
 * settings.c. Its own thread runs the jobs; runner_envelope, runner_cancel,
 * runner_oversized and runner_report_acked may be called from any other.
 */
#ifndef RCS_AGENT_RUNNER_H
#define RCS_AGENT_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "journal.h"
#include "settings.h"
#include "status.h"

struct runner;

struct runner_reports {
	void *ctx;
	/* journals and publishes a report of job */
	void (*report)(void *ctx, const char *job, enum job_status status, const char *response);
	/* answers a repeated envelope with job's latest report */
	void (*resend)(void *ctx, const char *job);
	/* sends an edge_error without the journal (it cannot take the job) */
	void (*refuse_unjournaled)(void *ctx, const char *job, const char *reason);
	/* journals and publishes an edge_error of job with its cause, one word (docs/mqtt.md
	 * "Status report"); NULL: report() without the cause */
	void (*fail)(void *ctx, const char *job, const char *error, const char *response);
	/* journals and publishes an edge_running report of a download with its "progress"
	 * (docs/mqtt.md); NULL: report() without it */
	void (*progress)(void *ctx, const char *job, const char *response, int64_t done,
			 int64_t total);
	/* artifacts over MQTT: publishes a get of sha256's bytes (NULL: none) */
	void (*artifact_get)(void *ctx, const char *sha256, const char *payload);
	/* artifacts over MQTT: subscribes to the device's artifact topics (on) or not */
	void (*artifact_subscribe)(void *ctx, bool on);
	/* journals and publishes the "rebooting" report of job (edge_running, its phase, within
	 * seconds; docs/mqtt.md "Status report"); NULL: none */
	void (*rebooting)(void *ctx, const char *job, long long within);
};

/* A runner for the device of set, under the policy in force in live, its jobs
 * in journal (all three outlive it). NULL when out of memory. */
struct runner *runner_new(const struct settings *set, struct settings_live *live,
			  struct journal *journal, const struct runner_reports *rep);
/* Reports the jobs a crash or reboot cut short (edge_error, never run again),
 * then starts the thread that runs the queued ones. */
enum rcs_err runner_start(struct runner *r);
/*
 * Stops the thread, when started: the running job is cancelled and reported
 * "interrupted" ("sandbox unavailable" when relaunch: the agent stops because
 * the sandbox launcher died); queued jobs stay in the journal.
 */
void runner_stop(struct runner *r, bool relaunch);
void runner_free(struct runner *r);

/* An envelope for job: checked, journaled, answered edge_transmitted (queued)
 * or edge_error, or, for a job seen before, with its latest report. */
void runner_envelope(struct runner *r, const char *job, const char *payload, size_t len);
/* An envelope too large to read: job is recorded and refused. */
void runner_oversized(struct runner *r, const char *job);
/* Cancels job: drops it when queued, kills it when running. */
void runner_cancel(struct runner *r, const char *job);
/* Artifacts over MQTT, from the link: a chunk of sha256 at offset, or an error answer. */
void runner_artifact_data(struct runner *r, const char *sha256, int64_t offset, const void *data,
			  size_t len);
void runner_artifact_error(struct runner *r, const char *sha256, const char *payload, size_t len);
/* A report left the outbox (a reboot waits for the job's final one). */
void runner_report_acked(struct runner *r);

#endif
