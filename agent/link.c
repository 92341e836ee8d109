/*
 * link.c - the agent's MQTT side.
 *
 * On every connect: subscribe to this device's job and cancel topics only,
 * publish the retained online state (the Last Will says offline), and send
 * the journal's outbox. An envelope is acknowledged to the broker (the
 * callback returns) only once it is journaled; it is checked right away and
 * answered edge_transmitted or edge_error. Reports always go through the
 * journal's outbox and leave it when the broker acknowledges them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "log.h"
#include "verify.h"

static void link_publish_payload(struct agent *a, const char *job, long long id,
				 const char *payload)
{
	char topic[PROTO_MAX_TOPIC];

	proto_topic_make(topic, PROTO_STATUS, a->set->client_root, a->set->entity_ident, job);
	/* not connected: it stays in the outbox and goes out after the next connect */
	mqttc_publish(a->mq, topic, payload, strlen(payload), 1, false, (uint64_t)id);
}

void link_report(struct agent *a, const char *job, enum job_status status, const char *response)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err;

	err = journal_report(a->journal, job, status, response, (int64_t)time(NULL), &id, &payload);
	if (err != RCS_OK) {
		log_warnx("job %s: cannot journal the %s report: %s", job, status_name(status),
			  rcs_strerror(err));
		return;
	}
	log_info("job %s: %s%s%.200s", job, status_name(status), response ? ": " : "",
		 response ? response : "");
	link_publish_payload(a, job, id, payload);
	free(payload);
}

/*
 * A refusal that cannot be journaled (the state directory is full, the journal
 * fails): sent straight away, seq 1, best effort. The job was never recorded,
 * so it never runs; the report ends it at the coordinator, which then stops
 * sending it. Should the report be lost, a re-sent envelope is refused the
 * same way while the journal still fails.
 */
static void link_refuse_unjournaled(struct agent *a, const char *job, const char *reason)
{
	struct proto_report r;
	json_object *o;
	char topic[PROTO_MAX_TOPIC];
	const char *payload;
	size_t len;

	memset(&r, 0, sizeof(r));
	snprintf(r.job, sizeof(r.job), "%s", job);
	r.status = JS_EDGE_ERROR;
	r.seq = 1;
	r.ts = (int64_t)time(NULL);
	r.response = reason;
	o = proto_report_encode(&r);
	if (o == NULL)
		return;
	payload = jsonu_dump(o, &len);
	proto_topic_make(topic, PROTO_STATUS, a->set->client_root, a->set->entity_ident, job);
	if (payload == NULL || mqttc_publish(a->mq, topic, payload, len, 1, false, 0) != RCS_OK)
		log_warnx("job %s: the refusal could not be sent", job);
	json_object_put(o);
}

/* Answers a repeated envelope with the job's final (or latest) report. */
static void link_resend(struct agent *a, const char *job)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err = journal_resend_final(a->journal, job, &id, &payload);

	if (err == RCS_ERR_NOTFOUND)
		err = journal_resend_latest(a->journal, job, &id, &payload);
	if (err == RCS_OK) {
		log_info("job %s: received again, report sent again", job);
		link_publish_payload(a, job, id, payload);
	}
	free(payload);
}

static void link_outbox_send(void *ctx, long long id, const char *job, const char *payload)
{
	link_publish_payload(ctx, job, id, payload);
}

void link_publish_state(struct agent *a, bool online)
{
	struct agent_policy *p = agent_policy_get(a);
	struct proto_state s = {online, p->tags, RCS_VERSION, (int64_t)time(NULL), NULL};
	json_object *o = proto_state_encode(&s);
	size_t len;
	const char *payload = jsonu_dump(o, &len);

	if (mqttc_publish(a->mq, a->state_topic, payload, len, 1, true, 0) != RCS_OK)
		log_debug("state not published (not connected)");
	json_object_put(o);
	agent_policy_put(p);
}

bool link_outbox_empty(struct agent *a)
{
	size_t n = 1;

	return journal_outbox_count(a->journal, &n) == RCS_OK && n == 0;
}

static void link_on_connected(void *ctx, bool session_present)
{
	struct agent *a = ctx;
	char jobs[PROTO_MAX_TOPIC], cancels[PROTO_MAX_TOPIC];
	const char *filters[2] = {jobs, cancels};

	(void)session_present; /* subscribing again is harmless and covers a broker reset */
	snprintf(jobs, sizeof(jobs), "rcs/v1/%s/%s/jobs/+", a->set->client_root,
		 a->set->entity_ident);
	snprintf(cancels, sizeof(cancels), "rcs/v1/%s/%s/jobs/+/cancel", a->set->client_root,
		 a->set->entity_ident);
	if (mqttc_subscribe(a->mq, filters, 2) != RCS_OK)
		log_warnx("cannot subscribe to this device's topics");
	link_publish_state(a, true);
	journal_outbox_each(a->journal, 100000, link_outbox_send, a);
}

static void link_on_published(void *ctx, uint64_t tag, bool ok)
{
	struct agent *a = ctx;

	if (!ok)
		return; /* stays in the outbox: sent again after the next connect */
	if (journal_outbox_ack(a->journal, (long long)tag) != RCS_OK)
		log_warnx("outbox entry %llu: cannot clear", (unsigned long long)tag);
	pthread_mutex_lock(&a->lock);
	pthread_cond_broadcast(&a->cond); /* a pending reboot waits for this */
	pthread_mutex_unlock(&a->lock);
}

static void link_envelope(struct agent *a, const char *job, const char *payload, size_t len)
{
	struct proto_envelope env;
	struct jsonu_err e;
	struct agent_policy *p = NULL;
	char reason[512] = "";
	bool decoded, is_new = false, locked = false;
	size_t queued = 0;
	enum rcs_err err;

	decoded = proto_envelope_decode(payload, len, &env, &e) == RCS_OK;
	if (!decoded) {
		snprintf(reason, sizeof(reason), "malformed envelope: %s%s%s", e.field,
			 e.field[0] ? ": " : "", e.message);
	} else if (strcmp(env.job, job) != 0) {
		snprintf(reason, sizeof(reason),
			 "malformed envelope: job %s in a message for job %s", env.job, job);
	} else {
		struct verify_ctx v;
		p = agent_policy_get(a);
		memset(&v, 0, sizeof(v));
		v.client_root = a->set->client_root;
		v.entity_ident = a->set->entity_ident;
		v.trusted = p->trusted;
		v.ntrusted = p->ntrusted;
		v.require_signature = p->require_signature;
		v.journal = a->journal;
		if (verify_envelope(&v, &env, (int64_t)time(NULL), reason, sizeof(reason)) ==
		    RCS_OK)
			reason[0] = '\0';
	}
	/* the runner picks queued jobs under the same lock: it never sees one half-handled */
	pthread_mutex_lock(&a->lock);
	err = journal_receive(a->journal, job, decoded ? env.task_ident : "",
			      decoded ? env.task_version : 0, decoded && !reason[0] ? payload : "",
			      decoded && !reason[0] ? len : 0, (int64_t)time(NULL), &is_new);
	locked = true;
	if (err != RCS_OK) {
		enum journal_state st;

		/* only a job the journal has never seen is refused: a known one may be
		 * queued or running, and its own reports are in the outbox */
		if (journal_get_state(a->journal, job, &st) != RCS_ERR_NOTFOUND) {
			log_warnx("job %s: envelope again, journal failing (%s): left to the"
				  " job's own reports", job, rcs_strerror(err));
			goto out;
		}
		snprintf(reason, sizeof(reason), "%s: the agent cannot journal the job, refused",
			 err == RCS_ERR_FULL ? "storage full" : "journal unavailable");
		log_warnx("job %s: cannot journal it (%s): refused", job, rcs_strerror(err));
		link_refuse_unjournaled(a, job, reason);
		goto out;
	}
	if (!is_new) {
		link_resend(a, job);
		goto out;
	}
	if (reason[0]) {
		log_warnx("job %s refused: %s", job, reason);
		link_report(a, job, JS_EDGE_ERROR, reason);
		goto out;
	}
	if (journal_count_queued(a->journal, &queued) == RCS_OK &&
	    queued > (size_t)a->set->max_queue) {
		snprintf(reason, sizeof(reason), "device busy: %zu jobs already queued",
			 queued - 1);
		journal_set_state(a->journal, job, JOURNAL_DROPPED);
		link_report(a, job, JS_EDGE_ERROR, reason);
		goto out;
	}
	link_report(a, job, JS_EDGE_TRANSMITTED, NULL);
	a->work = true;
	pthread_cond_broadcast(&a->cond);
out:
	if (locked)
		pthread_mutex_unlock(&a->lock);
	if (p)
		agent_policy_put(p);
	if (decoded)
		proto_envelope_free(&env);
}

static bool link_on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct agent *a = ctx;
	struct proto_topic t;

	if (proto_topic_parse(topic, &t) != RCS_OK ||
	    strcmp(t.client_root, a->set->client_root) != 0 ||
	    strcmp(t.entity_ident, a->set->entity_ident) != 0 ||
	    (t.kind != PROTO_JOB && t.kind != PROTO_CANCEL)) {
		log_warnx("dropped a message on unexpected topic %.160s", topic);
		return true;
	}
	if (len > (size_t)a->set->max_payload) {
		bool is_new = false;
		log_warnx("job %s: %zu-byte message over the %lld-byte limit", t.job, len,
			  a->set->max_payload);
		if (t.kind == PROTO_JOB &&
		    journal_receive(a->journal, t.job, "", 0, "", 0, (int64_t)time(NULL),
				    &is_new) == RCS_OK &&
		    is_new)
			link_report(a, t.job, JS_EDGE_ERROR,
				    "envelope larger than the device accepts");
		return true;
	}
	if (t.kind == PROTO_JOB) {
		link_envelope(a, t.job, payload, len);
	} else {
		struct proto_cancel c;
		struct jsonu_err e;
		if (proto_cancel_decode(payload, len, &c, &e) != RCS_OK ||
		    strcmp(c.job, t.job) != 0) {
			log_warnx("dropped a malformed cancel for job %s", t.job);
			if (c.root)
				proto_cancel_free(&c);
			return true;
		}
		runner_cancel(a, c.job);
		proto_cancel_free(&c);
	}
	return true;
}

enum rcs_err link_start(struct agent *a)
{
	struct mqttc_opts o;
	struct mqttc_callbacks cb;
	struct proto_state off = {false, NULL, RCS_VERSION, 0, NULL};
	struct agent_policy *p = agent_policy_get(a);
	json_object *will;
	enum rcs_err err;

	proto_topic_make(a->state_topic, PROTO_STATE, a->set->client_root, a->set->entity_ident,
			 NULL);
	off.tags = p->tags;
	will = proto_state_encode(&off);
	memset(&o, 0, sizeof(o));
	o.url = a->set->mqtt;
	o.nodelay = true; /* a report must not wait 40 ms behind the previous one */
	o.client_id = a->set->entity_ident;
	o.username = a->set->mqtt_username;
	o.password = a->set->mqtt_password;
	o.cafile = a->set->mqtt_cafile;
	o.certfile = a->set->mqtt_certfile;
	o.keyfile = a->set->mqtt_keyfile;
	o.key_passphrase = a->set->mqtt_key_passphrase;
	o.max_inflight = 100;
	o.will_topic = a->state_topic;
	o.will_payload = jsonu_dump(will, NULL);
	o.will_retained = true;
	memset(&cb, 0, sizeof(cb));
	cb.ctx = a;
	cb.on_connected = link_on_connected;
	cb.on_message = link_on_message;
	cb.on_published = link_on_published;
	err = mqttc_start(&o, &cb, &a->mq);
	json_object_put(will);
	agent_policy_put(p);
	return err;
}

void link_stop(struct agent *a)
{
	if (a->mq == NULL)
		return;
	if (mqttc_connected(a->mq))
		link_publish_state(a, false);
	mqttc_stop(a->mq, 2000);
	a->mq = NULL;
}
