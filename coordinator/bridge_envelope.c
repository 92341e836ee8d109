/*
 * bridge_envelope.c - a job's envelope as the MQTT bridge sends it (bridge_int.h;
 * docs/mqtt.md "Job envelope"): its task version's snapshot (script, constants,
 * signature), parsed once and kept on the worker for the next jobs of the same version;
 * the job's move to transmited and its claim, in the caller's transaction; its text.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "art_token.h"
#include "log.h"
#include "render.h"
#include "status.h"
#include "store_tasks.h"
#include "store_jobs.h"
#include "store_queues.h"
#include "store_devices.h"

#define BRIDGE_ENVELOPE_MAX ((size_t)64 << 20) /* bytes of one envelope's text */

/* A task version as an envelope carries it: the store's snapshot, its JSON members parsed. */
struct bridge_tv {
	struct task_version tv;
	json_object *constants, *variables_info, *signature;
	json_object *artifacts, *release; /* NULL: none */
	char *text; /* its members of an envelope (proto_envelope_version_text), once made */
	size_t text_len;
};

struct bridge_envelopes {
	const struct bridge_link *link;
	/* worker-only: the task version of the last envelope, reused by bulk sends */
	char tv_task[UUID_STR_LEN];
	long long tv_version;
	struct bridge_tv tv;
	bool tv_valid;
	/* not NULL: the moves' claims are listed here, for the caller to make in one statement */
	struct bridge_idents *claims;
};

static void bridge_tv_free(struct bridge_tv *t)
{
	store_task_version_free(&t->tv);
	json_object_put(t->constants);
	json_object_put(t->variables_info);
	json_object_put(t->signature);
	json_object_put(t->artifacts);
	json_object_put(t->release);
	t->constants = t->variables_info = t->signature = t->artifacts = t->release = NULL;
	free(t->text);
	t->text = NULL;
}

struct bridge_envelopes *bridge_envelopes_new(const struct bridge_link *l)
{
	struct bridge_envelopes *e = calloc(1, sizeof(*e));

	if (e != NULL)
		e->link = l;
	return e;
}

void bridge_envelopes_free(struct bridge_envelopes *e)
{
	if (e == NULL)
		return;
	if (e->tv_valid)
		bridge_tv_free(&e->tv);
	free(e);
}

void bridge_envelopes_claim_into(struct bridge_envelopes *e, struct bridge_idents *claims)
{
	e->claims = claims;
}

/* A task version from the store, its JSON text parsed for the envelope. */
static enum rcs_err bridge_tv_get(struct bridge_envelopes *e, const char *task, long long version,
				  struct bridge_tv *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_task_version_get(e->link->st, task, version, &out->tv);
	if (err != RCS_OK)
		return err;
	out->constants = json_tokener_parse(out->tv.constants);
	out->variables_info = json_tokener_parse(out->tv.variables_info);
	if (out->tv.signature)
		out->signature = json_tokener_parse(out->tv.signature);
	if (out->tv.artifacts)
		out->artifacts = json_tokener_parse(out->tv.artifacts);
	if (out->tv.release)
		out->release = json_tokener_parse(out->tv.release);
	if (out->constants == NULL || out->variables_info == NULL ||
	    (out->tv.signature && out->signature == NULL) ||
	    (out->tv.artifacts && out->artifacts == NULL) ||
	    (out->tv.release && out->release == NULL)) {
		bridge_tv_free(out);
		return RCS_ERR_DB;
	}
	return RCS_OK;
}

/* The task version snapshot of a job, cached for consecutive jobs of one task. */
static enum rcs_err bridge_task_version(struct bridge_envelopes *e, const char *task,
					long long version, struct bridge_tv **out)
{
	enum rcs_err err;

	if (e->tv_valid && e->tv_version == version && strcmp(e->tv_task, task) == 0) {
		*out = &e->tv;
		return RCS_OK;
	}
	if (e->tv_valid)
		bridge_tv_free(&e->tv);
	e->tv_valid = false;
	err = bridge_tv_get(e, task, version, &e->tv);
	if (err != RCS_OK)
		return err;
	snprintf(e->tv_task, sizeof(e->tv_task), "%s", task);
	e->tv_version = version;
	e->tv_valid = true;
	*out = &e->tv;
	return RCS_OK;
}

/* A pending job's move to transmited, recorded as sent (and claimed on a shared
 * database), in the caller's transaction: see bridge_prepare_job. RCS_OK with *moved false
 * when someone else moved it. */
static enum rcs_err bridge_move_sent(struct bridge_envelopes *e, const char *ident, int64_t now,
				     bool *undo, bool *moved)
{
	/* recorded as sent with the move: should the publish fail, the retry list,
	 * the resync after a reconnect or the stale-job sweep sends it again */
	struct job_move m = {.ident = ident,
			     .to = JS_TRANSMITED,
			     .response = "sent to the device over MQTT",
			     .mark_sent = true,
			     .now = now};
	enum store_move res = STORE_MOVE_DUPLICATE;
	enum rcs_err err;

	/* undo: in the caller's transaction without a savepoint (SQLite copies each
	 * page a savepoint's statements write), and a move that fails after writing
	 * has the caller roll back (*undo); NULL: a savepoint of its own */
	if (undo == NULL) {
		err = lifecycle_move(e->link->lc, &m, &res, NULL);
	} else {
		err = lifecycle_move_in_tx(e->link->lc, &m, &res, NULL);
		if (err != RCS_OK && err != RCS_ERR_NOTFOUND)
			*undo = true;
	}
	*moved = err == RCS_OK && res == STORE_MOVE_APPLIED;
	if (!*moved)
		return err; /* someone else moved it (cancel, another node): not sent */
	/* claimed with the move, until the broker acknowledges the envelope: should this
	 * coordinator stop before, another sends it once the lease ends */
	if (e->link->claims && e->claims != NULL)
		err = bridge_idents_add(e->claims, ident) ? RCS_OK : RCS_ERR_NOMEM;
	else if (e->link->claims)
		err = store_job_claim(e->link->st, ident, now);
	if (err != RCS_OK && undo != NULL)
		*undo = true; /* moved, not claimed */
	return err;
}

/* The envelope of job (o->ident) with its task version tv, into o (topic, payload); with
 * artifacts, the job's artifact token (made with tokens). */
static enum rcs_err bridge_render_envelope(const struct job_rec *job, struct bridge_tv *tv,
					   struct art_tokens *tokens, int64_t now,
					   struct bridge_out *o)
{
	json_object *vars = NULL;
	char token[ART_TOKEN_MAX];
	struct proto_envelope env;
	struct render w;
	struct buf text;
	enum rcs_err err = RCS_OK;

	memset(&env, 0, sizeof(env));
	snprintf(env.job, sizeof(env.job), "%s", o->ident);
	snprintf(env.client_root, sizeof(env.client_root), "%s", job->client_root);
	snprintf(env.entity_ident, sizeof(env.entity_ident), "%s", job->entity_ident);
	snprintf(env.task_ident, sizeof(env.task_ident), "%s", job->task_ident);
	env.task_version = job->task_version;
	env.task_name = job->task_name;
	env.script_name = tv->tv.script_name;
	snprintf(env.script_sha256, sizeof(env.script_sha256), "%s", tv->tv.script_sha256);
	env.script_source = tv->tv.script_src;
	env.script_len = tv->tv.script_len;
	env.constants = tv->constants;
	env.variables_info = tv->variables_info;
	vars = json_tokener_parse(job->variables); /* the store holds what the API checked */
	if (vars == NULL || !json_object_is_type(vars, json_type_object)) {
		log_warnx("job %s: its stored variables are not a JSON object", o->ident);
		err = RCS_ERR_DB;
		goto out;
	}
	env.signature = tv->signature;
	env.issued_at = now;
	/* a held job's ttl runs from its release (docs/api.md "Rollouts") */
	env.expires_at = job->expires_at
			     ? job->expires_at
			     : store_job_expiry(job->created_at, job->scheduled_time, job->ttl);
	env.timeout = tv->tv.timeout;
	env.artifacts = tv->artifacts;
	env.release = tv->release;
	env.download_timeout = tv->tv.download_timeout;
	if (env.artifacts != NULL) {
		/* the token is the job's own; it never leaves the envelope (docs/mqtt.md) */
		err = tokens ? art_token_make(tokens, o->ident, job->entity_ident, job->client_root,
					      now, token)
			     : RCS_ERR_INTERNAL;
		if (err != RCS_OK) {
			log_warnx("job %s: no artifact token: %s", o->ident, rcs_strerror(err));
			goto out;
		}
		env.artifact_token = token;
	}
	/* what comes from the task version is written once, then copied into each envelope */
	if (tv->text == NULL &&
	    (tv->text = proto_envelope_version_text(&env, &tv->text_len)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	buf_init(&text, BRIDGE_ENVELOPE_MAX);
	render_init(&w, &text);
	render_envelope(&w, &env, tv->text, tv->text_len, job->variables);
	err = render_end(&w);
	if (err != RCS_OK) {
		buf_free(&text);
		goto out;
	}
	o->payload = text.data;
	o->len = text.len;
	proto_topic_make(o->topic, PROTO_JOB, env.client_root, env.entity_ident, o->ident);
out:
	json_object_put(vars);
	return err;
}

/*
 * Builds a job's envelope. resend: the job was sent before (re-publish, status
 * unchanged); otherwise it must be pending, for an online device, and is moved
 * to transmited first, so that no report of the device can overtake it once
 * the caller's transaction commits (the caller publishes only after that).
 * tv_cache: may use the worker's cache (worker thread only). o->payload
 * stays NULL when the job is not to be sent (moved on meanwhile, device
 * offline).
 */
enum rcs_err bridge_prepare_job(struct bridge_envelopes *e, const char *ident, bool resend,
				bool tv_cache, int64_t now, bool *undo, struct bridge_out *o)
{
	struct bridge_tv own, *tv = NULL;
	struct job_rec job;
	bool online = false, have_job = false, moved = true;
	int presence = -1; /* as a chunk's read gave it (-1: not read) */
	enum rcs_err err;

	memset(&own, 0, sizeof(own));
	o->payload = NULL;
	snprintf(o->ident, sizeof(o->ident), "%s", ident);
	/* a chunk of sends read its jobs and their devices' presence (docs/coordinator.md,
	 * "Sends as sets") */
	err = store_fold_job(e->link->st, ident, &job, &presence);
	if (err == RCS_ERR_NOTFOUND)
		err = store_job_rec_get(e->link->st, ident, &job);
	if (err != RCS_OK)
		goto out;
	have_job = true;
	if (resend ? status_is_terminal(job.status) : (job.status != JS_PENDING || job.held))
		goto out; /* moved on meanwhile, or waits for its group's release: nothing to do */
	if (!resend) {
		/* an offline device's job waits pending; it goes out when the device is back */
		online = presence == 1;
		if (presence < 0)
			err = store_device_presence(e->link->st, job.client_root, job.entity_ident,
						    &online);
		if (err != RCS_OK || !online)
			goto out;
	}
	if (tv_cache) {
		err = bridge_task_version(e, job.task_ident, job.task_version, &tv);
	} else {
		err = bridge_tv_get(e, job.task_ident, job.task_version, &own);
		tv = &own;
	}
	if (err != RCS_OK)
		goto out;
	if (!resend)
		err = bridge_move_sent(e, ident, now, undo, &moved);
	if (err != RCS_OK || !moved)
		goto out;
	err = bridge_render_envelope(&job, tv, e->link->tokens, now, o);
out:
	bridge_tv_free(&own);
	if (have_job)
		store_job_rec_free(&job);
	return err;
}
