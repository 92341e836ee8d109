/*
 * link.c - the agent's MQTT side. See link.h; the topics and payloads are
 * docs/mqtt.md's.
 *
 * On every connect: subscribe to this device's job and cancel topics only,
 * send the journal's outbox, and publish the retained online state once the
 * broker granted both filters on this connection (presence.c; the Last Will
 * says offline, and so does the state while a filter is refused: docs/mqtt.md,
 * "Connection sequence"). A message is acknowledged to the broker (the
 * callback returns) only once its handler returned: an envelope is journaled
 * and answered edge_transmitted or edge_error by then (runner.c). Reports
 * always go through the journal's outbox and leave it when the broker
 * acknowledges them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "link.h"

#include "jsonu.h"
#include "log.h"
#include "mqttc.h"
#include "presence.h"
#include "proto.h"

/* the filters the device needs before it says it is online, in presence.c's order */
enum { LINK_SUB_JOBS, LINK_SUB_CANCELS, LINK_SUBS };

struct link {
	const struct settings *set;
	struct settings_live *live;
	struct journal *journal;
	struct link_handlers h;
	struct mqttc *mq;
	char state_topic[PROTO_MAX_TOPIC];
	char sub_filters[LINK_SUBS][PROTO_MAX_TOPIC]; /* this device's jobs and cancels */
	/* online only once the filters of this connection are granted (presence.h) */
	pthread_mutex_t pres_lock;
	struct presence pres;
	uint64_t conns; /* connects so far: the tag of each one's subscriptions */
	/* the ts of every state message, the Last Will's too: when the connection they belong
	 * to was made, each connect's later than the one before (docs/mqtt.md, "State") */
	_Atomic int64_t conn_ts;
	/* artifacts over MQTT: subscribed only while a download goes through the broker (so a
	 * broker whose ACL has no artifact topics never sees the filter otherwise) */
	pthread_mutex_t sub_lock;
	pthread_cond_t sub_cond;
	bool arts_wanted; /* a download runs: the filter is subscribed on every connect */
	bool arts_answered;
	char arts_filter[PROTO_MAX_TOPIC];
	/* the device's attributes (inventory.c), NULL until a run gave some */
	pthread_mutex_t attrs_lock;
	json_object *attrs;
};

static void link_publish_payload(struct link *l, const char *job, long long id, const char *payload)
{
	char topic[PROTO_MAX_TOPIC];

	/* not started or not connected: it stays in the outbox and goes out after the next
	 * connect */
	if (l->mq == NULL)
		return;
	proto_topic_make(topic, PROTO_STATUS, l->set->client_root, l->set->entity_ident, job);
	mqttc_publish(l->mq, topic, payload, strlen(payload), 1, false, (uint64_t)id);
}

void link_report(struct link *l, const char *job, enum job_status status, const char *response)
{
	link_report_cause(l, job, status, response, NULL);
}

void link_report_cause(struct link *l, const char *job, enum job_status status,
		       const char *response, const char *error)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err;

	err = journal_report_cause(l->journal, job, status, response, error, (int64_t)time(NULL),
				   &id, &payload);
	if (err != RCS_OK) {
		log_warnx("job %s: cannot journal the %s report: %s", job, status_name(status),
			  rcs_strerror(err));
		return;
	}
	log_info("job %s: %s%s%.200s", job, status_name(status), response ? ": " : "",
		 response ? response : "");
	link_publish_payload(l, job, id, payload);
	free(payload);
}

void link_report_progress(struct link *l, const char *job, const char *response, int64_t done,
			  int64_t total)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err;

	err = journal_report_progress(l->journal, job, response, done, total, (int64_t)time(NULL),
				      &id, &payload);
	if (err != RCS_OK) {
		log_warnx("job %s: cannot journal the progress report: %s", job, rcs_strerror(err));
		return;
	}
	log_debug("job %s: %s (%lld of %lld bytes)", job, response, (long long)done,
		  (long long)total);
	link_publish_payload(l, job, id, payload);
	free(payload);
}

void link_report_rebooting(struct link *l, const char *job, long long within)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err;

	err = journal_report_rebooting(l->journal, job, within, (int64_t)time(NULL), &id, &payload);
	if (err != RCS_OK) {
		log_warnx("job %s: cannot journal the rebooting report: %s", job,
			  rcs_strerror(err));
		return;
	}
	log_info("job %s: edge_running: rebooting (back within %lld s)", job, within);
	link_publish_payload(l, job, id, payload);
	free(payload);
}

/*
 * A refusal that cannot be journaled (the state directory is full, the journal
 * fails): sent straight away, seq 1, best effort. The job was never recorded,
 * so it never runs; the report ends it at the coordinator, which then stops
 * sending it. Should the report be lost, a re-sent envelope is refused the
 * same way while the journal still fails.
 */
void link_refuse_unjournaled(struct link *l, const char *job, const char *reason)
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
	r.error = strncmp(reason, "storage full", 12) == 0 ? "storage_full" : "journal_unavailable";
	o = proto_report_encode(&r);
	if (o == NULL)
		return;
	payload = jsonu_dump(o, &len);
	proto_topic_make(topic, PROTO_STATUS, l->set->client_root, l->set->entity_ident, job);
	if (payload == NULL || l->mq == NULL ||
	    mqttc_publish(l->mq, topic, payload, len, 1, false, 0) != RCS_OK)
		log_warnx("job %s: the refusal could not be sent", job);
	json_object_put(o);
}

void link_resend(struct link *l, const char *job)
{
	long long id = 0;
	char *payload = NULL;
	enum rcs_err err = journal_resend_final(l->journal, job, &id, &payload);

	if (err == RCS_ERR_NOTFOUND)
		err = journal_resend_latest(l->journal, job, &id, &payload);
	if (err == RCS_OK) {
		log_info("job %s: received again, report sent again", job);
		link_publish_payload(l, job, id, payload);
	}
	free(payload);
}

static void link_outbox_send(void *ctx, long long id, const char *job, const char *payload)
{
	link_publish_payload(ctx, job, id, payload);
}

/* The state message of the current connection (online) or its Last Will; the caller puts o. */
static json_object *link_state(struct link *l, bool online)
{
	struct settings_policy *p = settings_policy_get(l->live);
	int64_t ts = atomic_load(&l->conn_ts);
	struct proto_state s = {online, p->tags, RCS_VERSION, ts ? ts : (int64_t)time(NULL),
				NULL,   NULL};
	json_object *o;

	pthread_mutex_lock(&l->attrs_lock);
	s.attributes = l->attrs;
	o = proto_state_encode(&s);
	pthread_mutex_unlock(&l->attrs_lock);
	settings_policy_put(p);
	return o;
}

/* mqttc's will_payload: a connect is about to be made, with a later ts than the last one's,
 * so that a broker cluster delivering that one's will after this connection's state cannot
 * make the coordinator take the device for offline. */
static char *link_will(void *ctx)
{
	struct link *l = ctx;
	int64_t now = (int64_t)time(NULL), prev = atomic_load(&l->conn_ts);
	json_object *o;
	const char *text;
	char *payload;

	atomic_store(&l->conn_ts, now > prev ? now : prev + 1);
	o = link_state(l, false);
	text = o ? jsonu_dump(o, NULL) : NULL;
	payload = text ? strdup(text) : NULL; /* NULL: mqttc takes the will given at start */
	json_object_put(o);
	return payload;
}

static void link_state_send(struct link *l, bool online)
{
	json_object *o = link_state(l, online);
	size_t len;
	const char *payload = jsonu_dump(o, &len);

	if (l->mq == NULL ||
	    mqttc_publish(l->mq, l->state_topic, payload, len, 1, true, 0) != RCS_OK)
		log_debug("state not published (not connected)");
	json_object_put(o);
}

bool link_online(struct link *l)
{
	bool online;

	pthread_mutex_lock(&l->pres_lock);
	online = presence_online(&l->pres);
	pthread_mutex_unlock(&l->pres_lock);
	return online && link_connected(l);
}

/* Under pres_lock, as link_on_suback's: an online state never follows the offline one of a
 * refusal on the same connection. */
void link_publish_state(struct link *l, bool online)
{
	pthread_mutex_lock(&l->pres_lock);
	if (!online || presence_online(&l->pres))
		link_state_send(l, online);
	else
		log_debug("state not published (not online: subscriptions not granted yet)");
	pthread_mutex_unlock(&l->pres_lock);
}

static void link_arts_done(void *ctx, bool ok)
{
	struct link *l = ctx;

	(void)ok; /* refused: the gets go unanswered and the download retries, then times out */
	pthread_mutex_lock(&l->sub_lock);
	l->arts_answered = true;
	pthread_cond_broadcast(&l->sub_cond);
	pthread_mutex_unlock(&l->sub_lock);
}

void link_artifacts_subscribe(struct link *l, bool on)
{
	const char *filters[1] = {l->arts_filter};
	struct timespec until;

	pthread_mutex_lock(&l->sub_lock);
	l->arts_wanted = on;
	l->arts_answered = false;
	pthread_mutex_unlock(&l->sub_lock);
	if (l->mq == NULL)
		return;
	if (!on) {
		mqttc_unsubscribe(l->mq, filters, 1, NULL, NULL);
		return;
	}
	if (mqttc_subscribe_cb(l->mq, filters, 1, link_arts_done, l) != RCS_OK)
		return; /* not connected: on_connected subscribes */
	/* the first gets must not beat the SUBACK (their chunks would be lost) */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&l->sub_lock);
	while (!l->arts_answered)
		if (pthread_cond_timedwait(&l->sub_cond, &l->sub_lock, &until) != 0)
			break;
	pthread_mutex_unlock(&l->sub_lock);
}

void link_artifact_get(struct link *l, const char *sha256, const char *payload)
{
	char topic[PROTO_MAX_TOPIC];

	if (l->mq == NULL)
		return;
	snprintf(topic, sizeof(topic), "rcs/v1/%s/%s/artifacts/%s/get", l->set->client_root,
		 l->set->entity_ident, sha256);
	mqttc_publish(l->mq, topic, payload, strlen(payload), 0, false, 0);
}

/* rcs/v1/<client_root>/<entity_ident>/artifacts/<sha256>/data/<offset> or .../error: true
 * when topic is one of this device's (handed to the handlers, or dropped when malformed). */
static bool link_artifact_message(struct link *l, const char *topic, const void *payload,
				  size_t len)
{
	char prefix[PROTO_MAX_TOPIC], sha[65];
	const char *rest;
	size_t n;

	n = (size_t)snprintf(prefix, sizeof(prefix), "rcs/v1/%s/%s/artifacts/", l->set->client_root,
			     l->set->entity_ident);
	if (strncmp(topic, prefix, n) != 0)
		return false;
	rest = topic + n;
	if (strspn(rest, "0123456789abcdef") != 64 || rest[64] != '/')
		goto bad;
	memcpy(sha, rest, 64);
	sha[64] = '\0';
	rest += 65;
	if (strcmp(rest, "get") == 0)
		return true; /* its own get, back through the subscription to artifacts/+/# */
	if (strcmp(rest, "error") == 0 && l->h.artifact_error != NULL) {
		if (len <= 4096)
			l->h.artifact_error(l->h.ctx, sha, payload, len);
		return true;
	}
	if (strncmp(rest, "data/", 5) == 0 && l->h.artifact_data != NULL) {
		char *end = NULL;
		long long off;
		rest += 5;
		if (rest[0] < '0' || rest[0] > '9' || strlen(rest) > 18)
			goto bad;
		off = strtoll(rest, &end, 10);
		if (end == NULL || *end != '\0' || len > 65536)
			goto bad;
		l->h.artifact_data(l->h.ctx, sha, (int64_t)off, payload, len);
		return true;
	}
bad:
	log_warnx("dropped a message on unexpected topic %.160s", topic);
	return true;
}

/*
 * Every connect, session or not: subscribing again is harmless and covers a broker reset,
 * and the state is published again for the broker reached, which after a failover to
 * another broker has none of it (docs/mqtt.md "Several brokers"). The state says online
 * only once the jobs and cancels filters are granted (link_on_suback).
 */
static void link_on_connected(void *ctx, bool session_present)
{
	struct link *l = ctx;
	const char *filters[LINK_SUBS] = {l->sub_filters[LINK_SUB_JOBS],
					  l->sub_filters[LINK_SUB_CANCELS]};
	const char *arts[1] = {l->arts_filter};
	uint64_t conn;
	bool wanted;

	(void)session_present;
	pthread_mutex_lock(&l->pres_lock);
	conn = ++l->conns;
	presence_connect(&l->pres, conn, LINK_SUBS);
	pthread_mutex_unlock(&l->pres_lock);
	if (mqttc_subscribe_tagged(l->mq, filters, LINK_SUBS, conn) != RCS_OK)
		log_warnx("cannot subscribe to this device's topics");
	pthread_mutex_lock(&l->sub_lock);
	wanted = l->arts_wanted;
	pthread_mutex_unlock(&l->sub_lock);
	if (wanted && mqttc_subscribe(l->mq, arts, 1) != RCS_OK)
		log_warnx("cannot subscribe to this device's artifact topics");
	journal_outbox_each(l->journal, 100000, link_outbox_send, l);
	if (l->h.connected)
		l->h.connected(l->h.ctx);
}

/* A SUBACK of one of this device's filters (mqttc's re-asks of a refused one too): online
 * once both are granted on this connection; a refusal says offline, retained, so that an
 * online state an earlier connection left on the broker does not stand meanwhile. */
static void link_on_suback(void *ctx, uint64_t tag, const char *filter, bool granted)
{
	struct link *l = ctx;
	enum presence_act act;
	unsigned i = 0;

	while (i < LINK_SUBS && strcmp(filter, l->sub_filters[i]) != 0)
		i++;
	pthread_mutex_lock(&l->pres_lock);
	act = presence_suback(&l->pres, tag, i, granted);
	if (act == PRESENCE_ONLINE) {
		log_info("subscribed to this device's jobs and cancels: online");
		link_state_send(l, true);
	} else if (act == PRESENCE_OFFLINE) {
		log_warnx("not online while the broker refuses the subscription to %s (SUBACK "
			  "0x80): the state says offline until it is granted",
			  filter);
		link_state_send(l, false);
	}
	pthread_mutex_unlock(&l->pres_lock);
}

static void link_on_lost(void *ctx)
{
	struct link *l = ctx;

	pthread_mutex_lock(&l->pres_lock);
	presence_lost(&l->pres);
	pthread_mutex_unlock(&l->pres_lock);
}

void link_set_attributes(struct link *l, json_object *attrs)
{
	bool same;

	pthread_mutex_lock(&l->attrs_lock);
	same = l->attrs != NULL && json_object_equal(l->attrs, attrs);
	if (!same) {
		json_object_put(l->attrs);
		l->attrs = json_object_get(attrs);
	}
	pthread_mutex_unlock(&l->attrs_lock);
	if (!same && link_connected(l))
		link_publish_state(l, true);
}

static void link_on_published(void *ctx, uint64_t tag, bool ok)
{
	struct link *l = ctx;

	if (!ok)
		return; /* stays in the outbox: sent again after the next connect */
	if (journal_outbox_ack(l->journal, (long long)tag) != RCS_OK)
		log_warnx("outbox entry %llu: cannot clear", (unsigned long long)tag);
	l->h.report_acked(l->h.ctx);
}

static bool link_on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct link *l = ctx;
	struct proto_topic t;

	if (link_artifact_message(l, topic, payload, len))
		return true;
	if (proto_topic_parse(topic, &t) != RCS_OK ||
	    strcmp(t.client_root, l->set->client_root) != 0 ||
	    strcmp(t.entity_ident, l->set->entity_ident) != 0 ||
	    (t.kind != PROTO_JOB && t.kind != PROTO_CANCEL)) {
		log_warnx("dropped a message on unexpected topic %.160s", topic);
		return true;
	}
	if (len > (size_t)l->set->max_payload) {
		log_warnx("job %s: %zu-byte message over the %lld-byte limit", t.job, len,
			  l->set->max_payload);
		if (t.kind == PROTO_JOB)
			l->h.oversized(l->h.ctx, t.job);
		return true;
	}
	if (t.kind == PROTO_JOB) {
		l->h.envelope(l->h.ctx, t.job, payload, len);
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
		l->h.cancel(l->h.ctx, c.job);
		proto_cancel_free(&c);
	}
	return true;
}

struct link *link_new(const struct settings *set, struct settings_live *live,
		      struct journal *journal, const struct link_handlers *h)
{
	struct link *l = calloc(1, sizeof(*l));

	if (l == NULL)
		goto out;
	l->set = set;
	l->live = live;
	l->journal = journal;
	l->h = *h;
	pthread_mutex_init(&l->sub_lock, NULL);
	pthread_cond_init(&l->sub_cond, NULL);
	pthread_mutex_init(&l->pres_lock, NULL);
	proto_topic_make(l->sub_filters[LINK_SUB_JOBS], PROTO_JOB, set->client_root,
			 set->entity_ident, PROTO_ANY);
	proto_topic_make(l->sub_filters[LINK_SUB_CANCELS], PROTO_CANCEL, set->client_root,
			 set->entity_ident, PROTO_ANY);
	snprintf(l->arts_filter, sizeof(l->arts_filter), "rcs/v1/%s/%s/artifacts/+/#",
		 set->client_root, set->entity_ident);
	pthread_mutex_init(&l->attrs_lock, NULL);
out:
	return l;
}

enum rcs_err link_start(struct link *l)
{
	struct mqttc_opts o;
	struct mqttc_callbacks cb;
	json_object *will;
	enum rcs_err err;

	proto_topic_make(l->state_topic, PROTO_STATE, l->set->client_root, l->set->entity_ident,
			 NULL);
	will = link_state(l, false); /* mqttc asks link_will for each connect's own */
	memset(&o, 0, sizeof(o));
	o.urls = (const char *const *)l->set->mqtt.items;
	o.nurls = l->set->mqtt.n;
	o.nodelay = true; /* a report must not wait 40 ms behind the previous one */
	o.client_id = l->set->entity_ident;
	o.username = l->set->mqtt_username;
	o.password = l->set->mqtt_password;
	o.cafile = l->set->mqtt_cafile;
	o.certfile = l->set->mqtt_certfile;
	o.keyfile = l->set->mqtt_keyfile;
	o.key_passphrase = l->set->mqtt_key_passphrase;
	o.max_inflight = 100;
	o.will_topic = l->state_topic;
	o.will_payload = jsonu_dump(will, NULL);
	o.will_retained = true;
	memset(&cb, 0, sizeof(cb));
	cb.ctx = l;
	cb.on_connected = link_on_connected;
	cb.on_lost = link_on_lost;
	cb.on_suback = link_on_suback;
	cb.on_message = link_on_message;
	cb.on_published = link_on_published;
	cb.will_payload = link_will;
	err = mqttc_start(&o, &cb, &l->mq);
	json_object_put(will);
	return err;
}

bool link_connected(struct link *l)
{
	return l->mq != NULL && mqttc_connected(l->mq);
}

void link_stop(struct link *l)
{
	if (l == NULL || l->mq == NULL)
		return;
	if (mqttc_connected(l->mq))
		link_publish_state(l, false);
	mqttc_stop(l->mq, 2000);
	l->mq = NULL;
}

void link_free(struct link *l)
{
	if (l == NULL)
		return;
	link_stop(l);
	pthread_cond_destroy(&l->sub_cond);
	pthread_mutex_destroy(&l->sub_lock);
	pthread_mutex_destroy(&l->pres_lock);
	json_object_put(l->attrs);
	pthread_mutex_destroy(&l->attrs_lock);
	free(l);
}
