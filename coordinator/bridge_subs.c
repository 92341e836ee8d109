/*
 * bridge_subs.c - how the MQTT bridge subscribes to device messages (bridge_int.h).
 *
 * Device state stays a plain subscription: every coordinator keeps presence. Status reports
 * go to one coordinator of several through $share/rcs-coordinators/... where the broker
 * delivers on it (docs/mqtt.md "Several coordinators"). With auto, after each connect: the
 * plain subscription first (no report is missed meanwhile), then a probe: a QoS 1 message
 * to a topic of this coordinator's own, subscribed to the shared way; when it comes back
 * within BRIDGE_PROBE_MS the reports are subscribed to the shared way and the plain
 * subscription is dropped, else the plain one stays. Every step is a request whose answer
 * comes on paho's threads: they only record it (bridge_sub_ack_done) and wake the worker,
 * which takes the next step (bridge_reports_step). The state is under the lock.
 */
#include "bridge_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"

#define BRIDGE_SHARE_PREFIX "$share/rcs-coordinators/"
#define BRIDGE_PROBE_PREFIX "rcs/v1/_coordinators/probe/" /* + the client id */
#define BRIDGE_PROBE_MS     5000                          /* time the probe has to come back */

/* Where the choice of the reports' subscription stands on this connection. */
enum bridge_probe {
	PROBE_IDLE,        /* decided (or nothing to decide) */
	PROBE_START,       /* connected, auto: subscribe to the probe topic */
	PROBE_SUBSCRIBING, /* waiting for that SUBACK */
	PROBE_SUBSCRIBED,  /* publish the probe */
	PROBE_WAITING,     /* published: waiting for it until the deadline */
	PROBE_ARRIVED,     /* it came back: subscribe to the reports the shared way */
	PROBE_SWITCHING,   /* waiting for that SUBACK */
	PROBE_SHARED,      /* granted: leave the plain subscription */
	PROBE_PLAIN,       /* no delivery, or refused: keep (or take) the plain one */
};

struct bridge_subs {
	const struct bridge_link *link;
	struct bridge_recover *recover; /* told when the shared subscription is taken */
	enum bridge_shared mode;
	bool stable_client_id;
	char client_id[128];

	pthread_mutex_t lock;
	unsigned gen; /* connects so far: an answer to an earlier one's request is ignored */
	enum bridge_probe probe;
	const char *plain_why; /* why PROBE_PLAIN */
	char probe_topic[PROTO_MAX_TOPIC];
	char probe_token[UUID_STR_LEN];
	struct timespec probe_deadline; /* CLOCK_MONOTONIC */
	bool plain_subscribed;          /* on this connection */
	bool active;                    /* the reports come through the shared subscription */
	/* auto: the choice a probe made and reconnected for (BRIDGE_SHARED_YES or _NO), taken
	 * by the next connect without a probe of its own; BRIDGE_SHARED_AUTO: none */
	enum bridge_shared chosen;
};

enum rcs_err bridge_shared_parse(const char *s, enum bridge_shared *out)
{
	if (s == NULL || strcmp(s, "auto") == 0)
		*out = BRIDGE_SHARED_AUTO;
	else if (strcmp(s, "no") == 0)
		*out = BRIDGE_SHARED_NO;
	else if (strcmp(s, "yes") == 0)
		*out = BRIDGE_SHARED_YES;
	else
		return RCS_ERR_INVAL;
	return RCS_OK;
}

struct bridge_subs *bridge_subs_new(const struct bridge_link *l, struct bridge_recover *r,
				    const struct bridge_opts *opts)
{
	struct bridge_subs *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->link = l;
	s->recover = r;
	s->mode = opts->shared;
	s->chosen = BRIDGE_SHARED_AUTO;
	s->stable_client_id = opts->stable_client_id;
	snprintf(s->client_id, sizeof(s->client_id), "%s",
		 opts->mqtt.client_id ? opts->mqtt.client_id : "");
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

void bridge_subs_free(struct bridge_subs *s)
{
	if (s == NULL)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s);
}

bool bridge_subs_active(struct bridge_subs *s)
{
	bool on;

	pthread_mutex_lock(&s->lock);
	on = s->active;
	pthread_mutex_unlock(&s->lock);
	return on;
}

static void bridge_filter_plain(char *out)
{
	proto_topic_make(out, PROTO_STATUS, PROTO_ANY, PROTO_ANY, PROTO_ANY);
}

static void bridge_filter_shared(char *out, size_t len)
{
	char plain[PROTO_MAX_TOPIC];

	bridge_filter_plain(plain);
	snprintf(out, len, "%s%s", BRIDGE_SHARE_PREFIX, plain);
}

/* ---- requests and their answers (paho's threads) ---- */

/* An answer awaited: the state it moves from (on the connect it was asked on) and to. */
struct bridge_sub_ack {
	struct bridge_subs *s;
	unsigned gen;
	enum bridge_probe expect, ok, fail;
	const char *why; /* the reason logged when it fails */
};

static void bridge_sub_ack_done(void *ctx, bool ok)
{
	struct bridge_sub_ack *a = ctx;
	struct bridge_subs *s = a->s;

	pthread_mutex_lock(&s->lock);
	if (a->gen == s->gen && s->probe == a->expect) {
		s->probe = ok ? a->ok : a->fail;
		if (!ok)
			s->plain_why = a->why;
	}
	pthread_mutex_unlock(&s->lock);
	bridge_kick(s->link);
	free(a);
}

/* Asks for filters (subscribe, or unsubscribe) with its answer moving expect to ok or fail. */
static void bridge_request(struct bridge_subs *s, bool subscribe, const char *filter,
			   enum bridge_probe expect, enum bridge_probe ok, enum bridge_probe fail,
			   const char *why)
{
	struct bridge_sub_ack *a = malloc(sizeof(*a));
	const char *filters[1] = {filter};
	enum rcs_err err = RCS_ERR_NOMEM;

	if (a != NULL) {
		a->s = s;
		pthread_mutex_lock(&s->lock);
		a->gen = s->gen;
		pthread_mutex_unlock(&s->lock);
		a->expect = expect;
		a->ok = ok;
		a->fail = fail;
		a->why = why;
		err = subscribe
			  ? mqttc_subscribe_cb(s->link->mq, filters, 1, bridge_sub_ack_done, a)
			  : mqttc_unsubscribe(s->link->mq, filters, 1, bridge_sub_ack_done, a);
	}
	if (err == RCS_OK)
		return;
	free(a);
	pthread_mutex_lock(&s->lock);
	if (s->probe == expect) {
		s->probe = fail;
		s->plain_why = why;
	}
	pthread_mutex_unlock(&s->lock);
}

void bridge_reports_subscribe(struct bridge_subs *s)
{
	char state[PROTO_MAX_TOPIC], plain[PROTO_MAX_TOPIC], shared[PROTO_MAX_TOPIC + 32];
	const char *filters[2] = {state, plain};
	enum bridge_shared mode = s->mode, chosen = BRIDGE_SHARED_AUTO;

	/* a session left by a coordinator that died would stay in the share group, and take
	 * its share of the reports, until it expires: only a client id that comes back with
	 * the next start (and takes its session over) joins the group on its own */
	if (mode == BRIDGE_SHARED_AUTO && !s->stable_client_id)
		mode = BRIDGE_SHARED_NO;
	/* one coordinator on its own database shares with no one: the persistent session
	 * keeps the reports sent while it is away, and nothing is sent again at a start */
	if (mode == BRIDGE_SHARED_AUTO && !s->link->claims)
		mode = BRIDGE_SHARED_NO;
	proto_topic_make(state, PROTO_STATE, PROTO_ANY, PROTO_ANY, NULL);
	bridge_filter_plain(plain);
	bridge_filter_shared(shared, sizeof(shared));
	pthread_mutex_lock(&s->lock);
	/* the connect a probe's choice asked for takes that choice: probing again, with the
	 * retained states of a large fleet delivered ahead of the probe, could choose the other
	 * way and reconnect again, and again (docs/mqtt.md, "Several coordinators") */
	if (mode == BRIDGE_SHARED_AUTO && s->chosen != BRIDGE_SHARED_AUTO)
		mode = chosen = s->chosen;
	s->chosen = BRIDGE_SHARED_AUTO;
	s->gen++;
	s->active = false;
	s->plain_subscribed = mode != BRIDGE_SHARED_YES;
	s->probe = mode == BRIDGE_SHARED_AUTO  ? PROBE_START
		   : mode == BRIDGE_SHARED_YES ? PROBE_SWITCHING
					       : PROBE_IDLE;
	pthread_mutex_unlock(&s->lock);
	metrics_mqtt_shared(false);
	if (mode == BRIDGE_SHARED_YES) {
		if (mqttc_subscribe(s->link->mq, filters, 1) != RCS_OK)
			log_warnx("cannot subscribe to device topics");
		bridge_request(s, true, shared, PROBE_SWITCHING, PROBE_SHARED, PROBE_PLAIN,
			       "the broker refused the shared subscription");
	} else if (mqttc_subscribe(s->link->mq, filters, 2) != RCS_OK) {
		log_warnx("cannot subscribe to device topics");
	}
	if (mode == BRIDGE_SHARED_NO) {
		/* a shared subscription left in the session by an earlier run would split the
		 * reports with the others all the same */
		const char *drop[1] = {shared};

		mqttc_unsubscribe(s->link->mq, drop, 1, NULL, NULL);
		log_info("status reports: plain subscription %s (%s)", plain,
			 s->mode == BRIDGE_SHARED_NO  ? "mqtt_shared_subscriptions no"
			 : chosen == BRIDGE_SHARED_NO ? "as the probe of the last connection chose"
			 : !s->link->claims
			     ? "the database is not shared with other coordinators"
			     : "the client id changes at every start: give --node-id");
	}
	bridge_kick(s->link);
}

void bridge_subs_lost(struct bridge_subs *s)
{
	pthread_mutex_lock(&s->lock);
	s->probe = PROBE_IDLE;
	s->active = false;
	pthread_mutex_unlock(&s->lock);
	metrics_mqtt_shared(false);
}

/* A probe of this coordinator's is consumed here (true), whatever its token. */
bool bridge_probe_message(struct bridge_subs *s, const char *topic, const void *payload, size_t len)
{
	if (strncmp(topic, BRIDGE_PROBE_PREFIX, strlen(BRIDGE_PROBE_PREFIX)) != 0)
		return false;
	pthread_mutex_lock(&s->lock);
	if (s->probe == PROBE_WAITING && strcmp(topic, s->probe_topic) == 0 &&
	    len == strlen(s->probe_token) && memcmp(payload, s->probe_token, len) == 0)
		s->probe = PROBE_ARRIVED;
	pthread_mutex_unlock(&s->lock);
	bridge_kick(s->link);
	return true;
}

/* ---- the worker's steps ---- */

/* The probe's topic: the client id as its last level when it can be one, else random. */
static void bridge_probe_topic(const struct bridge_subs *s, char *out, size_t len)
{
	const char *id = s->client_id;
	bool usable = id[0] != '\0' && strlen(id) <= 64 && strcmp(id, "state") != 0;
	char rnd[UUID_STR_LEN];

	for (const char *c = id; usable && *c; c++)
		usable = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			 (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.';
	if (!usable && uuid_v7(rnd) == RCS_OK)
		id = rnd;
	else if (!usable)
		id = "rcs-coordinator";
	snprintf(out, len, "%s%s", BRIDGE_PROBE_PREFIX, id);
}

/* Milliseconds until deadline (0 once it passed). */
static int bridge_ms_until(const struct timespec *deadline)
{
	struct timespec now;
	long long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long)(deadline->tv_sec - now.tv_sec) * 1000 +
	     (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms <= 0 ? 0 : ms > BRIDGE_PROBE_MS ? BRIDGE_PROBE_MS : (int)ms + 1;
}

static void bridge_probe_deadline(struct bridge_subs *s)
{
	clock_gettime(CLOCK_MONOTONIC, &s->probe_deadline);
	s->probe_deadline.tv_sec += BRIDGE_PROBE_MS / 1000;
}

/* Under the lock: whether the connection the step began with is still the one there (a
 * reconnect in between started its own subscriptions: the step's are not for it). */
static bool bridge_same_connect(const struct bridge_subs *s, unsigned gen)
{
	return s->gen == gen;
}

/* The step's new state, unless another connect began meanwhile. */
static bool bridge_probe_set(struct bridge_subs *s, unsigned gen, enum bridge_probe to)
{
	bool same;

	pthread_mutex_lock(&s->lock);
	same = bridge_same_connect(s, gen);
	if (same)
		s->probe = to;
	pthread_mutex_unlock(&s->lock);
	return same;
}

/* What a step works with: the state as it began (a probe past its deadline moved to
 * PROBE_PLAIN) and the filters. */
struct bridge_step {
	enum bridge_probe st;
	unsigned gen;
	const char *why;
	bool plain_subscribed;
	char shared[PROTO_MAX_TOPIC + 32], plain[PROTO_MAX_TOPIC], probe[PROTO_MAX_TOPIC + 32];
};

static void bridge_step_begin(struct bridge_subs *s, struct bridge_step *t)
{
	pthread_mutex_lock(&s->lock);
	t->gen = s->gen;
	t->st = s->probe;
	t->why = s->plain_why;
	t->plain_subscribed = s->plain_subscribed;
	if ((t->st == PROBE_SUBSCRIBING || t->st == PROBE_WAITING) &&
	    bridge_ms_until(&s->probe_deadline) == 0) {
		t->why = s->plain_why = t->st == PROBE_SUBSCRIBING
					    ? "the broker did not answer the probe's subscription"
					    : "the broker did not deliver the probe on a shared"
					      " subscription within 5 s";
		t->st = s->probe = PROBE_PLAIN;
	}
	pthread_mutex_unlock(&s->lock);
}

/* PROBE_START: the probe's topic, subscribed to the shared way. */
static void bridge_probe_start(struct bridge_subs *s, struct bridge_step *t)
{
	pthread_mutex_lock(&s->lock);
	bridge_probe_topic(s, s->probe_topic, sizeof(s->probe_topic));
	if (uuid_v7(s->probe_token) != RCS_OK)
		snprintf(s->probe_token, sizeof(s->probe_token), "%u", s->gen);
	s->probe = PROBE_SUBSCRIBING;
	bridge_probe_deadline(s);
	pthread_mutex_unlock(&s->lock);
	snprintf(t->probe, sizeof(t->probe), "%s%s", BRIDGE_SHARE_PREFIX, s->probe_topic);
	bridge_request(s, true, t->probe, PROBE_SUBSCRIBING, PROBE_SUBSCRIBED, PROBE_PLAIN,
		       "the broker refused the probe's shared subscription");
}

/* PROBE_SUBSCRIBED: the probe published, waited for until its deadline. False when
 * another connect began meanwhile. */
static bool bridge_probe_publish(struct bridge_subs *s, const struct bridge_step *t)
{
	char token[UUID_STR_LEN], topic[PROTO_MAX_TOPIC];

	pthread_mutex_lock(&s->lock);
	if (!bridge_same_connect(s, t->gen)) {
		pthread_mutex_unlock(&s->lock);
		return false;
	}
	snprintf(token, sizeof(token), "%s", s->probe_token);
	snprintf(topic, sizeof(topic), "%s", s->probe_topic);
	s->probe = PROBE_WAITING; /* before it can come back */
	bridge_probe_deadline(s);
	pthread_mutex_unlock(&s->lock);
	if (mqttc_publish(s->link->mq, topic, token, strlen(token), 1, false, 0) != RCS_OK) {
		pthread_mutex_lock(&s->lock);
		if (s->probe == PROBE_WAITING) {
			s->probe = PROBE_PLAIN;
			s->plain_why = "the probe could not be published";
		}
		pthread_mutex_unlock(&s->lock);
	}
	return true;
}

/* PROBE_ARRIVED: the probe's subscription dropped, the reports' shared one asked for.
 * False when another connect began meanwhile. */
static bool bridge_probe_switch(struct bridge_subs *s, const struct bridge_step *t)
{
	const char *drop[1] = {t->probe};

	if (!bridge_probe_set(s, t->gen, PROBE_SWITCHING))
		return false;
	mqttc_unsubscribe(s->link->mq, drop, 1, NULL, NULL);
	bridge_request(s, true, t->shared, PROBE_SWITCHING, PROBE_SHARED, PROBE_PLAIN,
		       "the broker refused the shared subscription");
	return true;
}

/* The choice wants a session of the other kind (clean: the shared subscription's; else a
 * persistent one for the plain subscription): reconnects, unless another connect began
 * meanwhile; the connect subscribes again. */
static void bridge_probe_reconnect(struct bridge_subs *s, const struct bridge_step *t, bool clean)
{
	bool same;

	pthread_mutex_lock(&s->lock);
	same = bridge_same_connect(s, t->gen);
	if (same) {
		s->probe = PROBE_IDLE;
		if (s->mode == BRIDGE_SHARED_AUTO) /* for the connect asked for here */
			s->chosen = clean ? BRIDGE_SHARED_YES : BRIDGE_SHARED_NO;
	}
	pthread_mutex_unlock(&s->lock);
	if (!same)
		return;
	if (clean)
		log_info("the broker delivers on a shared subscription of status reports:"
			 " reconnecting with a clean session to take it");
	else
		log_info("status reports: no shared subscription (%s): reconnecting with a"
			 " persistent session",
			 t->why ? t->why : "refused");
	if (mqttc_reconnect(s->link->mq, clean) != RCS_OK)
		log_warnx("cannot reconnect with a %s session", clean ? "clean" : "persistent");
}

/* The choice made on this connection: the reports through the shared subscription
 * (shared), or the plain one. False when another connect began meanwhile. */
static bool bridge_probe_done(struct bridge_subs *s, const struct bridge_step *t, bool shared)
{
	bool same;

	pthread_mutex_lock(&s->lock);
	same = bridge_same_connect(s, t->gen);
	if (same) {
		s->probe = PROBE_IDLE;
		if (shared)
			s->active = true;
		s->plain_subscribed = !shared;
	}
	pthread_mutex_unlock(&s->lock);
	return same;
}

/* PROBE_SHARED: the shared one is granted: the plain one (this connect's, or a session's
 * from an earlier run) goes. */
static void bridge_take_shared(struct bridge_subs *s, const struct bridge_step *t)
{
	const char *drop[1] = {t->plain};

	/* the shared subscription only in a session that ends with the connection: a
	 * coordinator that dies leaves the group at once (docs/mqtt.md "Several
	 * coordinators") */
	if (!mqttc_clean(s->link->mq)) {
		bridge_probe_reconnect(s, t, true);
		return;
	}
	if (!bridge_probe_done(s, t, true))
		return;
	mqttc_unsubscribe(s->link->mq, drop, 1, NULL, NULL);
	bridge_recover_on_take(s->recover);
	metrics_mqtt_shared(true);
	log_info("status reports: shared subscription %s%s", t->shared,
		 s->mode == BRIDGE_SHARED_AUTO ? " (the broker delivered the probe)" : "");
}

/* PROBE_PLAIN: no shared subscription; the plain one kept, or taken. */
static void bridge_keep_plain(struct bridge_subs *s, const struct bridge_step *t)
{
	const char *drop[2] = {t->shared, t->probe};

	/* the plain subscription in the persistent session, as without a shared one (another
	 * broker after a failover) */
	if (mqttc_clean(s->link->mq)) {
		bridge_probe_reconnect(s, t, false);
		return;
	}
	if (!bridge_probe_done(s, t, false))
		return;
	mqttc_unsubscribe(s->link->mq, drop, s->mode == BRIDGE_SHARED_AUTO ? 2 : 1, NULL, NULL);
	if (!t->plain_subscribed) {
		const char *take[1] = {t->plain};

		if (mqttc_subscribe(s->link->mq, take, 1) != RCS_OK)
			log_warnx("cannot subscribe to status reports");
	}
	log_info("status reports: plain subscription %s (%s)", t->plain,
		 t->why ? t->why : "no shared subscription");
}

int bridge_reports_step(struct bridge_subs *s)
{
	struct bridge_step t;
	int wait_ms = -1;

	bridge_step_begin(s, &t);
	if (t.st == PROBE_IDLE || !mqttc_connected(s->link->mq))
		return -1; /* a new connect starts again */
	bridge_filter_plain(t.plain);
	bridge_filter_shared(t.shared, sizeof(t.shared));
	snprintf(t.probe, sizeof(t.probe), "%s%s", BRIDGE_SHARE_PREFIX, s->probe_topic);
	switch (t.st) {
	case PROBE_START:
		bridge_probe_start(s, &t);
		wait_ms = 0;
		break;
	case PROBE_SUBSCRIBED:
		wait_ms = bridge_probe_publish(s, &t) ? 0 : -1;
		break;
	case PROBE_ARRIVED:
		wait_ms = bridge_probe_switch(s, &t) ? 0 : -1;
		break;
	case PROBE_SHARED:
		bridge_take_shared(s, &t);
		break;
	case PROBE_PLAIN:
		bridge_keep_plain(s, &t);
		break;
	case PROBE_SUBSCRIBING:
	case PROBE_WAITING:
		pthread_mutex_lock(&s->lock);
		wait_ms = bridge_ms_until(&s->probe_deadline);
		pthread_mutex_unlock(&s->lock);
		break;
	default:
		break; /* PROBE_SWITCHING: the SUBACK wakes the worker */
	}
	return wait_ms;
}
