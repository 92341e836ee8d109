/*
 * runner.c - the agent's jobs. See runner.h; what happens to a job is
 * docs/agent.md's "What happens to a job".
 *
 * An envelope is checked (verify_envelope), journaled and queued, or refused,
 * on the MQTT client's thread (runner_envelope). The runner's thread takes
 * the queued jobs one at a time, in arrival order: the checks again (a newer
 * version may have run, or the job expired, while it waited), edge_started,
 * edge_running, the script in the sandbox (progress reported as
 * edge_running), then terminated with the result or edge_error with the
 * reason. A reboot the script asked for runs only after the broker
 * acknowledged the job's final report.
 *
 * One lock (struct runner's) orders the queue: an envelope is journaled and
 * queued, a queued job picked or dropped by a cancel, under it, so neither
 * side ever sees a job half-handled.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"

#include "artifact.h"
#include "fetch_mqtt.h"
#include "job_script.h"
#include "log.h"
#include "phase.h"
#include "proto.h"
#include "sandbox.h"
#include "sandbox_launcher.h"
#include "verify.h"

struct runner {
	const struct settings *set;
	struct settings_live *live;
	struct journal *journal;
	struct runner_reports rep;
	pthread_t thread;
	bool started; /* thread runs */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool relaunch;              /* stopping because the sandbox launcher died */
	bool work;                  /* a job was queued */
	char running[UUID_STR_LEN]; /* job in the sandbox, "" when idle */
	int cancel_fd[2];           /* pipe: written to cancel the running job */
	bool reboot_pending;
	char reboot_job[UUID_STR_LEN];
	/* a job asked to be continued after a reboot (docs/agent.md "Phases") */
	bool phase_pending;
	char phase_job[UUID_STR_LEN];
	struct fetch_mqtt_chan *chan; /* artifacts over MQTT; NULL over HTTP */
};

static void runner_report(struct runner *r, const char *job, enum job_status status,
			  const char *response)
{
	r->rep.report(r->rep.ctx, job, status, response);
}

/* An edge_error of job with its cause (docs/mqtt.md "Status report"). */
static void runner_fail(struct runner *r, const char *job, const char *cause, const char *response)
{
	if (r->rep.fail)
		r->rep.fail(r->rep.ctx, job, cause, response);
	else
		r->rep.report(r->rep.ctx, job, JS_EDGE_ERROR, response);
}

/* The cause of a script that failed in the sandbox (sandbox.h). */
static const char *runner_sandbox_cause(const struct sandbox_result *res)
{
	return res->cause != NULL ? res->cause : "script_error";
}

/* verify_envelope under the policy p; which check refused into *failed. */
static enum rcs_err runner_verify(struct runner *r, const struct settings_policy *p,
				  const struct proto_envelope *env, int64_t now,
				  enum verify_check *failed, char *reason, size_t reason_len)
{
	struct verify_ctx v;

	memset(&v, 0, sizeof(v));
	v.client_root = r->set->client_root;
	v.entity_ident = r->set->entity_ident;
	v.trusted = p->trusted;
	v.ntrusted = p->ntrusted;
	v.artifact_trusted = p->artifact_trusted;
	v.nartifact_trusted = p->nartifact_trusted;
	v.require_signature = p->require_signature;
	v.journal = r->journal;
	return verify_envelope_check(&v, env, now, failed, reason, reason_len);
}

/* ---- the artifacts ---- */

struct runner_dl {
	struct runner *r;
	const char *job;
};

static void runner_dl_progress(void *ctx, const char *text, int64_t done, int64_t total)
{
	struct runner_dl *d = ctx;

	if (d->r->rep.progress != NULL)
		d->r->rep.progress(d->r->rep.ctx, d->job, text, done, total);
	else
		runner_report(d->r, d->job, JS_EDGE_RUNNING, text);
}

/* The agent is stopping (not a cancel of the job): a download then resumes at the next
 * start instead of ending the job. */
static bool runner_stopping(struct runner *r)
{
	bool stop;

	pthread_mutex_lock(&r->lock);
	stop = r->stop;
	pthread_mutex_unlock(&r->lock);
	return stop;
}

/*
 * The job's artifacts into the artifact directory before its script (docs/agent.md
 * "Artifacts"): true when the script may run (*table: rcs.artifacts, or NULL when the job
 * has none). False when the job ended (reported) or the agent stops meanwhile (the job
 * stays journaled as downloading and resumes at the next start).
 */
static bool runner_artifacts(struct runner *r, const char *job, const struct artifact_set *as,
			     json_object **table)
{
	struct runner_dl d = {r, job};
	struct artifact_env ae;
	struct artifact_outcome ao;

	*table = NULL;
	if (as->n == 0)
		return true;
	if (journal_set_downloading(r->journal, job, true) != RCS_OK) {
		runner_fail(r, job, "journal_unavailable", "the journal failed before a download");
		return false;
	}
	memset(&ae, 0, sizeof(ae));
	ae.dir = r->set->artifact_dir;
	ae.url = settings_artifacts_over_mqtt(r->set) ? NULL : r->set->artifact_url;
	ae.cafile = r->set->artifact_cafile;
	ae.reserve = r->set->artifact_reserve;
	ae.cache_max = r->set->artifact_cache_max;
	ae.max_rate = r->set->artifact_max_rate;
	ae.journal = r->journal;
	ae.cancel_fd = r->cancel_fd[0];
	ae.progress = runner_dl_progress;
	ae.ctx = &d;
	ae.job = job;
	ae.chan = r->chan;
	ae.publish_get = r->rep.artifact_get;
	ae.publish_ctx = r->rep.ctx;
	ae.subscribe = r->rep.artifact_subscribe;
	artifact_fetch_all(&ae, as, &ao);
	if (ao.cause != NULL && strcmp(ao.cause, "cancelled") == 0 && runner_stopping(r)) {
		log_info("job %s: the agent stops during its download: it resumes at the next"
			 " start",
			 job);
		return false;
	}
	if (ao.cause != NULL) {
		runner_fail(r, job, ao.cause, ao.reason);
		return false;
	}
	if (journal_set_downloading(r->journal, job, false) != RCS_OK) {
		json_object_put(ao.table);
		runner_fail(r, job, "journal_unavailable", "the journal failed after a download");
		return false;
	}
	*table = ao.table;
	return true;
}

/* ---- one job ---- */

/*
 * rcs.reboot{resume = ...}: the phase and the boot id journaled, then the "rebooting" report
 * with within; runner_phase_reboot runs the reboot command once the broker has it. The 9th
 * reboot of a job ends it instead.
 */
static void runner_phase_request(struct runner *r, const char *job,
				 const struct sandbox_result *res)
{
	struct journal_phase ph;
	char boot[JOURNAL_MAX_BOOT_ID + 1] = "", why[160];

	if (journal_phase_get(r->journal, job, &ph) != RCS_OK) {
		runner_fail(r, job, "journal_unavailable", "the journal failed before a reboot");
		return;
	}
	if (ph.reboots >= PHASE_MAX_REBOOTS) {
		snprintf(why, sizeof(why),
			 "rcs.reboot: the job asked for a reboot into phase %s after %d reboots: at"
			 " most %d per job",
			 res->resume, ph.reboots, PHASE_MAX_REBOOTS);
		runner_fail(r, job, "script_error", why);
		return;
	}
	if (phase_boot_id(r->set->boot_id_file, boot) != RCS_OK)
		log_warnx("job %s: cannot read the boot id from %s: the next phase will not know"
			  " whether the device rebooted",
			  job, r->set->boot_id_file);
	if (journal_phase_reboot(r->journal, job, res->resume, boot) != RCS_OK) {
		runner_fail(r, job, "journal_unavailable", "the journal failed before a reboot");
		return;
	}
	if (r->rep.rebooting != NULL)
		r->rep.rebooting(r->rep.ctx, job, res->within);
	pthread_mutex_lock(&r->lock);
	r->phase_pending = true;
	snprintf(r->phase_job, sizeof(r->phase_job), "%s", job);
	pthread_mutex_unlock(&r->lock);
}

/* The script's outcome, reported; in_phase: the job runs a phase (docs/agent.md "Phases"). */
static void runner_outcome(struct runner *r, const char *job, const struct sandbox_result *res,
			   bool in_phase)
{
	switch (res->outcome) {
	case SANDBOX_OK:
		if (res->resume[0] != '\0') {
			runner_phase_request(r, job, res);
			break;
		}
		runner_report(r, job, JS_TERMINATED, res->response);
		if (res->reboot) {
			pthread_mutex_lock(&r->lock);
			r->reboot_pending = true;
			snprintf(r->reboot_job, sizeof(r->reboot_job), "%s", job);
			pthread_mutex_unlock(&r->lock);
		}
		break;
	case SANDBOX_CANCELLED: {
		bool stopping, relaunch;
		pthread_mutex_lock(&r->lock);
		stopping = r->stop;
		relaunch = r->relaunch;
		pthread_mutex_unlock(&r->lock);
		if (stopping &&
		    in_phase) { /* like a crash: the phase runs again at the next start */
			log_info(
			    "job %s: the agent stops during its phase: it runs again at the next"
			    " start",
			    job);
			break;
		}
		/* the agent stops to restart the launcher: the same words as the jail's own */
		runner_fail(r, job,
			    relaunch   ? "sandbox_unavailable"
			    : stopping ? "interrupted"
				       : "cancelled",
			    relaunch   ? "sandbox unavailable: the sandbox launcher died"
			    : stopping ? "interrupted: the agent was stopped during the job"
				       : "cancelled while running");
		break;
	}
	default:
		runner_fail(r, job, runner_sandbox_cause(res),
			    res->response ? res->response : "script failed");
		/* rcs.rollback{reboot = true}: into the old version once the report is out */
		if (res->reboot && res->cause && strcmp(res->cause, "rolled_back") == 0) {
			pthread_mutex_lock(&r->lock);
			r->reboot_pending = true;
			snprintf(r->reboot_job, sizeof(r->reboot_job), "%s", job);
			pthread_mutex_unlock(&r->lock);
		}
		break;
	}
}

/*
 * A job that resumes its phase (after its reboot, or a phase cut short): the run counted and
 * the boot id it runs under journaled, then edge_running with the phase first. *rebooted:
 * the boot id changed since the job last ran. False when the journal failed (reported).
 */
static bool runner_phase_begin(struct runner *r, const char *job, const struct journal_phase *ph,
			       bool *rebooted)
{
	char boot[JOURNAL_MAX_BOOT_ID + 1] = "", text[96];

	if (phase_boot_id(r->set->boot_id_file, boot) != RCS_OK)
		log_warnx("job %s: cannot read the boot id from %s", job, r->set->boot_id_file);
	*rebooted = boot[0] != '\0' && ph->boot_id[0] != '\0' && strcmp(boot, ph->boot_id) != 0;
	if (journal_phase_start(r->journal, job, boot) != RCS_OK) {
		runner_fail(r, job, "journal_unavailable", "the journal failed before a phase");
		return false;
	}
	log_info("job %s: phase %s, run %d of %d, %s", job, ph->phase, ph->runs + 1, PHASE_MAX_RUNS,
		 *rebooted ? "after a reboot" : "without a reboot");
	snprintf(text, sizeof(text), "phase %s (%s)", ph->phase,
		 *rebooted ? "rebooted" : "not rebooted");
	runner_report(r, job, JS_EDGE_RUNNING, text);
	return true;
}

static void runner_run(struct runner *r, const char *job, const char *payload, size_t len)
{
	struct journal_phase ph;
	bool rebooted = false;
	struct proto_envelope env;
	struct jsonu_err e;
	struct sandbox_result res;
	struct settings_policy *p = NULL;
	struct artifact_set as;
	json_object *arts = NULL;
	bool resumed = false;
	enum verify_check failed = VERIFY_PASSED;
	const char *cause;
	char reason[512];
	bool decoded;
	int64_t now = (int64_t)time(NULL);
	enum rcs_err err;

	memset(&res, 0, sizeof(res));
	decoded = proto_envelope_decode(payload, len, &env, &e) == RCS_OK;
	if (!decoded) {
		runner_fail(r, job, "envelope_invalid", "the journaled envelope is unreadable");
		goto out;
	}
	/* the checks again, under the policy the job will run with: a newer version
	 * may have run, or the job expired, while it waited */
	p = settings_policy_get(r->live);
	/* a download the agent's stop or a power cut interrupted: the job started already */
	journal_get_downloading(r->journal, job, &resumed);
	/* a phase after the first: expires_at is not checked again (docs/agent.md "Phases") */
	if (journal_phase_get(r->journal, job, &ph) != RCS_OK)
		memset(&ph, 0, sizeof(ph));
	if (runner_verify(r, p, &env, now, &failed, reason, sizeof(reason)) != RCS_OK &&
	    !((resumed || ph.phase[0] != '\0') && failed == VERIFY_EXPIRY)) {
		if (failed == VERIFY_EXPIRY) {
			char expired[sizeof(reason) + 32];
			snprintf(expired, sizeof(expired), "%s before it could start", reason);
			runner_fail(r, job, "expired", expired);
		} else {
			runner_fail(r, job, verify_check_cause(failed), reason);
		}
		goto out;
	}
	if (artifact_set_decode(env.root, &as, reason, sizeof(reason)) != RCS_OK) {
		runner_fail(r, job, "envelope_invalid", reason);
		goto out;
	}
	/* the release's stream and device types, before anything is downloaded */
	if ((cause = artifact_release_check(&as, r->set->device_type, r->journal, reason,
					    sizeof(reason))) != NULL) {
		runner_fail(r, job, cause, reason);
		goto out;
	}
	journal_task_version_set(r->journal, env.task_ident, env.task_version);
	if (ph.phase[0] != '\0') {
		if (!runner_phase_begin(r, job, &ph, &rebooted))
			goto out;
	} else if (!resumed) {
		runner_report(r, job, JS_EDGE_STARTED, NULL);
		runner_report(r, job, JS_EDGE_RUNNING, NULL);
	} else {
		log_info("job %s: resuming its downloads", job);
	}
	/* the script's timeout counts from after the downloads */
	if (!runner_artifacts(r, job, &as, &arts))
		goto out;
	{
		const struct job_script js = {.set = r->set,
					      .policy = p,
					      .journal = r->journal,
					      .job = job,
					      .cancel_fd = r->cancel_fd[0],
					      .report = r->rep.report,
					      .ctx = r->rep.ctx};
		err = job_script_run(&js, &env, arts, &ph, rebooted, &res);
	}
	if (err != RCS_OK) {
		snprintf(reason, sizeof(reason), "the device could not start the script: %s",
			 rcs_strerror(err));
		runner_fail(r, job, err == RCS_ERR_FULL ? "storage_full" : "sandbox_unavailable",
			    reason);
		goto out;
	}
	runner_outcome(r, job, &res, ph.phase[0] != '\0');
	/* a release counts as completed on its stream once its job terminated */
	if (res.outcome == SANDBOX_OK && res.resume[0] == '\0' && as.release.present &&
	    journal_release_done(r->journal, as.release.stream, as.release.seq) != RCS_OK)
		log_warnx("job %s: cannot journal release %s %lld as completed", job,
			  as.release.stream, as.release.seq);
out:
	sandbox_result_free(&res);
	if (arts)
		json_object_put(arts);
	settings_policy_put(p);
	if (decoded)
		proto_envelope_free(&env);
}

/* True when no report waits for the broker's acknowledgement. */
static bool runner_outbox_empty(struct runner *r)
{
	size_t n = 1;

	return journal_outbox_count(r->journal, &n) == RCS_OK && n == 0;
}

/* Runs the configured reboot command once the final report left the outbox. */
static void runner_reboot(struct runner *r)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 300;
	pthread_mutex_lock(&r->lock);
	while (!r->stop && !runner_outbox_empty(r))
		if (pthread_cond_timedwait(&r->cond, &r->lock, &deadline) == ETIMEDOUT)
			break;
	r->reboot_pending = false;
	pthread_mutex_unlock(&r->lock);
	if (!runner_outbox_empty(r)) {
		log_warnx("reboot asked by job %s not done: its final report was not acknowledged",
			  r->reboot_job);
		return;
	}
	log_info("rebooting as job %s asked: %s", r->reboot_job, r->set->reboot_command);
	phase_run_command(r->set->reboot_command);
}

/*
 * A job waits for its reboot into its next phase (docs/agent.md "Phases"): once the broker
 * acknowledged its "rebooting" report (however long that takes), the reboot command; a
 * device still up PHASE_RESUME_AFTER seconds later resumes the phase itself. The agent's
 * stop meanwhile (the reboot's SIGTERM) leaves the job waiting in the journal.
 */
static void runner_phase_reboot(struct runner *r)
{
	char job[UUID_STR_LEN];
	struct timespec deadline;
	bool stop;

	pthread_mutex_lock(&r->lock);
	snprintf(job, sizeof(job), "%s", r->phase_job);
	r->phase_pending = false;
	while (!r->stop && !runner_outbox_empty(r))
		pthread_cond_wait(&r->cond, &r->lock);
	stop = r->stop;
	pthread_mutex_unlock(&r->lock);
	if (stop)
		return;
	log_info("rebooting as job %s asked, into its next phase: %s", job, r->set->reboot_command);
	if (!phase_run_command(r->set->reboot_command))
		log_warnx("job %s: the reboot command %s failed", job, r->set->reboot_command);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += PHASE_RESUME_AFTER;
	pthread_mutex_lock(&r->lock);
	while (!r->stop)
		if (pthread_cond_timedwait(&r->cond, &r->lock, &deadline) == ETIMEDOUT)
			break;
	stop = r->stop;
	pthread_mutex_unlock(&r->lock);
	if (stop)
		return;
	log_warnx("job %s: the device did not reboot within %d s of the reboot command: the"
		  " phase resumes without a reboot",
		  job, PHASE_RESUME_AFTER);
	if (journal_requeue_job(r->journal, job) != RCS_OK)
		log_warnx("job %s: cannot requeue it: it resumes at the next start", job);
}

static void *runner_loop(void *arg)
{
	struct runner *r = arg;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		char job[UUID_STR_LEN], drain[64], why[128];
		char *payload = NULL;
		size_t len = 0;
		enum rcs_err err;

		while (!r->stop && !r->work)
			pthread_cond_wait(&r->cond, &r->lock);
		if (r->stop)
			break;
		r->work = false;
		/* no launcher: main restarts the agent (SIGCHLD); the jobs wait in the journal */
		if (sandbox_launcher_check(why, sizeof(why)) != RCS_OK)
			continue;
		err = journal_next_queued(r->journal, job, &payload, &len);
		if (err != RCS_OK) {
			if (err != RCS_ERR_NOTFOUND)
				log_warnx("journal: %s", rcs_strerror(err));
			continue;
		}
		if (journal_set_state(r->journal, job, JOURNAL_RUNNING) != RCS_OK) {
			free(payload); /* dropped meanwhile (cancel) */
			r->work = true;
			continue;
		}
		snprintf(r->running, sizeof(r->running), "%s", job);
		while (read(r->cancel_fd[0], drain, sizeof(drain)) > 0)
			; /* a cancel of an earlier job must not hit this one */
		pthread_mutex_unlock(&r->lock);

		runner_run(r, job, payload, len);
		free(payload);

		pthread_mutex_lock(&r->lock);
		r->running[0] = '\0';
		r->work = true; /* look for the next one */
		if (r->reboot_pending) {
			pthread_mutex_unlock(&r->lock);
			runner_reboot(r);
			pthread_mutex_lock(&r->lock);
		}
		if (r->phase_pending) { /* no other job starts before the phase resumes */
			pthread_mutex_unlock(&r->lock);
			runner_phase_reboot(r);
			pthread_mutex_lock(&r->lock);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/*
 * An envelope that failed to decode, or was not for job: the reason into
 * reason (else ""). Otherwise env holds it decoded, checked: the reason
 * verify_envelope gave, or "" when the job may run.
 */
static bool runner_check(struct runner *r, const char *job, const char *payload, size_t len,
			 struct proto_envelope *env, char *reason, size_t reason_len,
			 const char **cause)
{
	struct jsonu_err e;
	struct settings_policy *p = NULL;
	enum verify_check failed = VERIFY_PASSED;
	bool decoded;

	reason[0] = '\0';
	*cause = "envelope_invalid";
	decoded = proto_envelope_decode(payload, len, env, &e) == RCS_OK;
	if (!decoded) {
		snprintf(reason, reason_len, "malformed envelope: %s%s%s", e.field,
			 e.field[0] ? ": " : "", e.message);
	} else if (strcmp(env->job, job) != 0) {
		snprintf(reason, reason_len, "malformed envelope: job %s in a message for job %s",
			 env->job, job);
	} else {
		struct artifact_set as;
		p = settings_policy_get(r->live);
		if (runner_verify(r, p, env, (int64_t)time(NULL), &failed, reason, reason_len) !=
		    RCS_OK)
			*cause = verify_check_cause(failed);
		else if (artifact_set_decode(env->root, &as, reason, reason_len) == RCS_OK)
			reason[0] = '\0';
		settings_policy_put(p);
	}
	return decoded;
}

void runner_envelope(struct runner *r, const char *job, const char *payload, size_t len)
{
	struct proto_envelope env;
	char reason[512];
	const char *cause = NULL;
	bool decoded, is_new = false;
	size_t queued = 0;
	enum rcs_err err;

	decoded = runner_check(r, job, payload, len, &env, reason, sizeof(reason), &cause);
	/* the runner picks queued jobs under the same lock: it never sees one half-handled */
	pthread_mutex_lock(&r->lock);
	err = journal_receive(r->journal, job, decoded ? env.task_ident : "",
			      decoded ? env.task_version : 0, decoded && !reason[0] ? payload : "",
			      decoded && !reason[0] ? len : 0, (int64_t)time(NULL), &is_new);
	if (err != RCS_OK) {
		enum journal_state st;

		/* only a job the journal has never seen is refused: a known one may be
		 * queued or running, and its own reports are in the outbox */
		if (journal_get_state(r->journal, job, &st) != RCS_ERR_NOTFOUND) {
			log_warnx("job %s: envelope again, journal failing (%s): left to the"
				  " job's own reports",
				  job, rcs_strerror(err));
			goto out;
		}
		snprintf(reason, sizeof(reason), "%s: the agent cannot journal the job, refused",
			 err == RCS_ERR_FULL ? "storage full" : "journal unavailable");
		log_warnx("job %s: cannot journal it (%s): refused", job, rcs_strerror(err));
		r->rep.refuse_unjournaled(r->rep.ctx, job, reason);
		goto out;
	}
	if (!is_new) {
		r->rep.resend(r->rep.ctx, job);
		goto out;
	}
	if (reason[0]) {
		log_warnx("job %s refused: %s", job, reason);
		runner_fail(r, job, cause, reason);
		goto out;
	}
	if (journal_count_queued(r->journal, &queued) == RCS_OK &&
	    queued > (size_t)r->set->max_queue) {
		snprintf(reason, sizeof(reason), "device busy: %zu jobs already queued",
			 queued - 1);
		journal_set_state(r->journal, job, JOURNAL_DROPPED);
		runner_fail(r, job, "device_busy", reason);
		goto out;
	}
	runner_report(r, job, JS_EDGE_TRANSMITTED, NULL);
	r->work = true;
	pthread_cond_broadcast(&r->cond);
out:
	pthread_mutex_unlock(&r->lock);
	if (decoded)
		proto_envelope_free(&env);
}

void runner_oversized(struct runner *r, const char *job)
{
	bool is_new = false;
	enum rcs_err err;

	err = journal_receive(r->journal, job, "", 0, "", 0, (int64_t)time(NULL), &is_new);
	if (err == RCS_OK && is_new)
		runner_fail(r, job, "payload_too_large", "envelope larger than the device accepts");
}

void runner_artifact_data(struct runner *r, const char *sha256, int64_t offset, const void *data,
			  size_t len)
{
	if (r->chan != NULL)
		fetch_mqtt_deliver(r->chan, sha256, offset, data, len);
}

void runner_artifact_error(struct runner *r, const char *sha256, const char *payload, size_t len)
{
	if (r->chan != NULL)
		fetch_mqtt_error(r->chan, sha256, payload, len);
}

void runner_report_acked(struct runner *r)
{
	pthread_mutex_lock(&r->lock);
	pthread_cond_broadcast(&r->cond); /* a pending reboot waits for this */
	pthread_mutex_unlock(&r->lock);
}

struct runner *runner_new(const struct settings *set, struct settings_live *live,
			  struct journal *journal, const struct runner_reports *rep)
{
	struct runner *r = calloc(1, sizeof(*r));

	if (r == NULL)
		goto out;
	r->set = set;
	r->live = live;
	r->journal = journal;
	r->rep = *rep;
	r->cancel_fd[0] = r->cancel_fd[1] = -1;
	if (settings_artifacts_over_mqtt(set) && (r->chan = fetch_mqtt_chan_new()) == NULL) {
		free(r);
		r = NULL;
		goto out;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
out:
	return r;
}

static void runner_interrupted(void *ctx, const char *job)
{
	struct runner *r = ctx;
	struct journal_phase ph;
	char why[160];

	if (journal_phase_get(r->journal, job, &ph) == RCS_OK && ph.phase[0] != '\0') {
		snprintf(why, sizeof(why),
			 "interrupted: the device restarted during phase %s %d times (at most %d"
			 " runs)",
			 ph.phase, ph.runs, PHASE_MAX_RUNS);
		runner_fail(r, job, "interrupted", why);
		return;
	}
	runner_fail(r, job, "interrupted", "interrupted: the device restarted during the job");
}

enum rcs_err runner_start(struct runner *r)
{
	enum rcs_err err = RCS_ERR_IO;

	/* jobs stopped while downloading resume (their script never started); jobs a crash
	 * or reboot cut short while their script ran end as edge_error, never run again */
	size_t resumed = 0;
	if (journal_requeue_downloading(r->journal, &resumed) == RCS_OK && resumed > 0)
		log_info("%zu job%s resume their downloads", resumed, resumed == 1 ? "" : "s");
	/* jobs in a phase after their first run: waiting for their reboot, or cut short fewer
	 * than PHASE_MAX_RUNS runs into the phase, run it (again) first (docs/agent.md "Phases") */
	if (journal_requeue_phases(r->journal, PHASE_MAX_RUNS, &resumed) == RCS_OK && resumed > 0)
		log_info("%zu job%s resume their phase", resumed, resumed == 1 ? "" : "s");
	journal_each_running(r->journal, runner_interrupted, r);
	if (pipe2(r->cancel_fd, O_CLOEXEC | O_NONBLOCK) != 0)
		goto out;
	pthread_mutex_lock(&r->lock);
	r->work = true;
	pthread_mutex_unlock(&r->lock);
	if (pthread_create(&r->thread, NULL, runner_loop, r) != 0)
		goto out;
	r->started = true;
	err = RCS_OK;
out:
	return err;
}

void runner_stop(struct runner *r, bool relaunch)
{
	if (r == NULL || !r->started)
		return;
	pthread_mutex_lock(&r->lock);
	if (relaunch)
		r->relaunch = true;
	r->stop = true;
	pthread_cond_broadcast(&r->cond);
	if (r->running[0]) {
		char one = 1;
		if (write(r->cancel_fd[1], &one, 1) != 1)
			log_warn("cancel pipe");
	}
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	r->started = false;
}

void runner_free(struct runner *r)
{
	if (r == NULL)
		return;
	runner_stop(r, false);
	if (r->cancel_fd[0] >= 0) {
		close(r->cancel_fd[0]);
		close(r->cancel_fd[1]);
	}
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	fetch_mqtt_chan_free(r->chan);
	free(r);
}

/* job is queued or running in a phase after its first run (docs/agent.md "Phases"). */
static bool runner_in_phase(struct runner *r, const char *job)
{
	struct journal_phase ph;
	enum journal_state st;

	return journal_get_state(r->journal, job, &st) == RCS_OK &&
	       (st == JOURNAL_QUEUED || st == JOURNAL_RUNNING) &&
	       journal_phase_get(r->journal, job, &ph) == RCS_OK && ph.phase[0] != '\0';
}

void runner_cancel(struct runner *r, const char *job)
{
	enum journal_state st;

	pthread_mutex_lock(&r->lock);
	if (runner_in_phase(r, job)) {
		/* an update is not left half-installed: the coordinator has the job cancelled */
		log_info("job %s: cancelled between its phases: the device finishes the sequence"
			 " it is in",
			 job);
	} else if (strcmp(r->running, job) == 0) {
		char one = 1;
		log_info("job %s: cancelled while running: stopping the script", job);
		if (write(r->cancel_fd[1], &one, 1) != 1)
			log_warn("cancel pipe");
	} else if (journal_get_state(r->journal, job, &st) == RCS_OK && st == JOURNAL_QUEUED) {
		journal_set_state(r->journal, job, JOURNAL_DROPPED);
		runner_fail(r, job, "cancelled", "cancelled before it started");
	} else if (journal_get_state(r->journal, job, &st) == RCS_ERR_NOTFOUND) {
		/* the cancel overtook its envelope: remember the job as dropped, so the
		 * envelope, when it comes, is a repeat and never runs */
		bool is_new = false;
		if (journal_receive(r->journal, job, NULL, 0, "", 0, (int64_t)time(NULL),
				    &is_new) == RCS_OK &&
		    is_new && journal_set_state(r->journal, job, JOURNAL_DROPPED) == RCS_OK)
			runner_fail(r, job, "cancelled", "cancelled before it arrived");
	} else {
		log_info("job %s: cancel for a job that already ended, ignored", job);
	}
	pthread_mutex_unlock(&r->lock);
}
