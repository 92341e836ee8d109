/*
 * mqttc.c - paho.mqtt.c asynchronous client with a reconnect loop. See mqttc.h.
 */
#include "mqttc.h"

#include <MQTTAsync.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "uuid.h"
#include "text.h"

/* How long a lost client waits for paho's threads to leave our callbacks
 * before it is destroyed (a callback may be journaling a message to flash). */
#define MQTTC_RENEW_WAIT_MS 30000

/*
 * paho queues each publish as a request for its sending thread, and refuses one more
 * (MQTTASYNC_MAX_BUFFERED_MESSAGES) while maxBufferedMessages publish requests of the
 * client wait there, connected or not. QoS 1 publishes are bounded by the window
 * (max_inflight); QoS 0 ones (events with events_qos 0) are not, and a burst of them gets
 * this far ahead of the sending thread: room for the window and this many more. Each
 * queued publish holds its payload, and paho's search for a free message id walks the
 * queue: the burst's room is kept to about a window's worth (BENCHMARKS.md section 14
 * measured the send with it).
 */
#define MQTTC_QUEUE_EXTRA 1024
#define MQTTC_MAX_WINDOW  65535 /* max_inflight's ceiling, as MQTT's message ids */
/* A publish refused because paho's queue of requests was full waits this long before it
 * is tried again (mqttc_wait_delivered): the sending thread empties the queue without any
 * acknowledgement to wait for, at QoS 0 none ever comes. */
#define MQTTC_QUEUE_WAIT_MS 2

struct mqttc {
	MQTTAsync client;
	struct mqttc_callbacks cb;
	struct mqttc_opts o; /* strings below are our own copies */
	char **urls;         /* the brokers, tcp:// or ssl://, in the order they are tried */
	size_t nurls;
	char *url;   /* urls[0]: the one the paho client is created with */
	int current; /* index in urls of the broker connected to, -1 while not connected */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool connected;
	bool connecting;
	bool renew;        /* the connection was lost: a new client before the next attempt */
	bool clean;        /* the session of the next connect ends with its connection */
	bool trying_clean; /* the connect under way was made with a clean session */
	bool live_clean;   /* the connection there is has a clean session */
	bool switching;    /* mqttc_reconnect's disconnect is under way */
	bool planned;      /* from mqttc_reconnect until its connect succeeds or fails */
	/* held for reading while m->client is used, for writing while it is replaced */
	pthread_rwlock_t client_lock;
	/* one request (publish, subscribe, unsubscribe) into paho at a time (mqttc_send_lock) */
	pthread_mutex_t send_lock;
	atomic_int in_callback; /* paho's threads inside one of our callbacks */
	/* QoS 1 publishes the broker acknowledged (paho's delivery-complete callback):
	 * a sender waiting for room in the window wakes on the next one */
	pthread_mutex_t room_lock;
	pthread_cond_t room;
	uint64_t delivered;
	/* the window, kept here (mqttc_take_room): QoS 1 publishes paho took and has not completed
	 * yet, counted again from paho's own list after a connect and now and then */
	long in_flight;
	bool recount;
	struct timespec recounted; /* CLOCK_MONOTONIC */
	unsigned attempt;
	struct timespec next_attempt; /* CLOCK_MONOTONIC */
	unsigned gen;                 /* connections made so far: whose subscriptions these are */
	struct mqttc_sub *resub;      /* refused subscriptions asked for again (the loop) */
};

/*
 * One filter of mqttc_subscribe, asked for until the broker grants it or the connection it
 * was asked on ends. A broker may refuse a filter in the SUBACK (0x80) for a moment only:
 * NATS makes a JetStream consumer for each QoS 1 subscription and refuses the filter when
 * that request times out, e.g. while the cluster is busy or a node reloads its accounts
 * (docs/scale-out.md, "Limits"). A subscription that failed so would be missing for the
 * whole connection, the persistent session included, so it is asked for again.
 */
struct mqttc_sub {
	struct mqttc *m;
	struct mqttc_sub *next;
	unsigned gen;        /* the connection it was asked on */
	unsigned refusals;   /* SUBACKs that refused it so far */
	uint64_t tag;        /* mqttc_subscribe_tagged's (0: none): each SUBACK to on_suback */
	struct timespec due; /* CLOCK_MONOTONIC: when it is asked for again */
	char filter[];
};

/* Context of one acknowledged publish. */
struct mqttc_pub {
	struct mqttc *m;
	uint64_t tag;
};

static char *mqttc_dup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void mqttc_now(struct timespec *ts)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
}

/* The SUBACK's code of a refused filter (MQTT 3.1.1), and the longest wait before a refused
 * filter is asked for again. */
#define MQTTC_SUBACK_FAILURE 0x80
#define MQTTC_RESUB_MAX_S    30

/* Next attempt after a jittered, exponential delay: [d/2, d], d = min * 2^attempt <= max. */
static void mqttc_schedule(struct mqttc *m)
{
	double d = m->o.backoff_min;
	uint32_t r = 0;
	long long ns;

	for (unsigned i = 0; i < m->attempt && d < m->o.backoff_max; i++)
		d *= 2;
	if (d > m->o.backoff_max)
		d = m->o.backoff_max;
	rcs_random(&r, sizeof(r));
	d = d / 2 + (d / 2) * ((double)r / (double)UINT32_MAX);
	if (m->attempt < 30)
		m->attempt++;
	mqttc_now(&m->next_attempt);
	ns = m->next_attempt.tv_nsec + (long long)(d * 1e9);
	m->next_attempt.tv_sec += (time_t)(ns / 1000000000LL);
	m->next_attempt.tv_nsec = (long)(ns % 1000000000LL);
}

/* The broker's port in a tcp:// or ssl:// URL: paho's default (1883, 8883)
 * when it names none; 0 when it is not a number. */
static unsigned mqttc_url_port(const char *url)
{
	const char *c = strrchr(url, ':');
	char *end = NULL;
	unsigned long p;

	if (c == NULL || c < url + 6 || (url[6] == '[' && strchr(c, ']') != NULL))
		return strncmp(url, "ssl://", 6) == 0 ? 8883 : 1883; /* no port given */
	p = strtoul(c + 1, &end, 10);
	return end != c + 1 && (*end == '\0' || *end == '/') && p <= 65535 ? (unsigned)p : 0;
}

/*
 * Sets TCP_NODELAY on this process's TCP connections to the broker's port.
 * Paho has no option for it in the versions Debian ships (1.3.12): without it,
 * a small message written while the previous one is unacknowledged (a report
 * right after the PUBACK of the envelope) waits for the broker's delayed ACK,
 * about 40 ms on Linux. Paho gives no access to its socket, so the process's
 * descriptors are looked at once per connection; failures change nothing.
 */
static void mqttc_nodelay(const char *url)
{
	unsigned port = mqttc_url_port(url);
	DIR *d;
	struct dirent *e;

	if (port == 0 || (d = opendir("/proc/self/fd")) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer), ilen = sizeof(int);
		int fd, proto = 0, one = 1;
		unsigned pport;
		char *end = NULL;

		fd = (int)strtol(e->d_name, &end, 10);
		if (end == e->d_name || *end != '\0' || fd == dirfd(d))
			continue;
		if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &ilen) != 0 ||
		    proto != IPPROTO_TCP || getpeername(fd, (struct sockaddr *)&peer, &plen) != 0)
			continue;
		if (peer.ss_family == AF_INET)
			pport = ntohs(((struct sockaddr_in *)&peer)->sin_port);
		else if (peer.ss_family == AF_INET6)
			pport = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port);
		else
			continue;
		if (pport == port)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	closedir(d);
}

/* The index in m->urls of the broker paho says it connected to (0 when it names none). */
static int mqttc_url_index(const struct mqttc *m, const char *uri)
{
	for (size_t i = 0; uri != NULL && i < m->nurls; i++)
		if (strcmp(m->urls[i], uri) == 0)
			return (int)i;
	return 0;
}

/* How deep the calling thread is in our callbacks from paho's threads (of any client). */
static _Thread_local int mqttc_cb_depth;
/* The client whose paho queue of requests refused the calling thread's last mqttc_publish
 * (not the window), NULL if none: the thread's next mqttc_wait_delivered on it waits
 * MQTTC_QUEUE_WAIT_MS, not for an acknowledgement. */
static _Thread_local struct mqttc *mqttc_queue_refused;

static void mqttc_cb_enter(struct mqttc *m)
{
	atomic_fetch_add(&m->in_callback, 1);
	mqttc_cb_depth++;
}

static void mqttc_cb_leave(struct mqttc *m)
{
	mqttc_cb_depth--;
	atomic_fetch_sub(&m->in_callback, 1);
}

/*
 * Requests into paho that take a message id (publish, subscribe, unsubscribe) go one at a
 * time per client: paho 1.3.11 loses a QoS 1 message now and then when two threads publish
 * on one client at once (tests/integration/test_mqttc_concurrency.py: 4 threads, 20,000
 * messages, 8-10 never reached the broker although paho took them). Not inside one of our
 * callbacks: paho runs most of them holding its own lock, which a thread holding this one
 * may be waiting for; paho's threads are serialised by that lock there. Returns whether
 * the lock was taken (for mqttc_send_unlock).
 */
static bool mqttc_send_lock(struct mqttc *m)
{
	if (mqttc_cb_depth > 0)
		return false;
	pthread_mutex_lock(&m->send_lock);
	return true;
}

static void mqttc_send_unlock(struct mqttc *m, bool locked)
{
	if (locked)
		pthread_mutex_unlock(&m->send_lock);
}

static void mqttc_on_connect_ok(void *ctx, MQTTAsync_successData *resp)
{
	struct mqttc *m = ctx;
	bool present = resp ? resp->alt.connect.sessionPresent != 0 : false;
	int cur = mqttc_url_index(m, resp ? resp->alt.connect.serverURI : NULL);

	mqttc_cb_enter(m);
	if (m->o.nodelay)
		mqttc_nodelay(m->urls[cur]);

	pthread_mutex_lock(&m->lock);
	m->connected = true;
	m->connecting = false;
	m->attempt = 0;
	m->current = cur;
	m->live_clean = m->trying_clean;
	m->planned = false;
	m->gen++; /* what is still to be asked for again belongs to the last connection */
	pthread_mutex_unlock(&m->lock);
	/* a new session dropped what was in flight, a resumed one sends it again */
	pthread_mutex_lock(&m->room_lock);
	m->recount = true;
	pthread_mutex_unlock(&m->room_lock);
	if (m->nurls > 1)
		log_info("connected to %s (session %s; broker %d of %zu)", m->urls[cur],
			 present ? "resumed" : "new", cur + 1, m->nurls);
	else
		log_info("connected to %s (session %s)", m->url, present ? "resumed" : "new");
	if (m->cb.on_connected)
		m->cb.on_connected(m->cb.ctx, present);
	mqttc_cb_leave(m);
}

static void mqttc_on_connect_fail(void *ctx, MQTTAsync_failureData *resp)
{
	struct mqttc *m = ctx;

	pthread_mutex_lock(&m->lock);
	m->connecting = false;
	m->planned = false;
	if ((m->attempt == 0 || log_enabled(LOG_LVL_DEBUG)) && m->nurls > 1) {
		char list[1024];

		text_join(m->urls, m->nurls, ", ", list, sizeof(list));
		log_warnx("cannot connect to any of %s: %s (code %d), retrying", list,
			  resp && resp->message ? resp->message : "no answer",
			  resp ? resp->code : 0);
	} else if (m->attempt == 0 || log_enabled(LOG_LVL_DEBUG)) {
		log_warnx("cannot connect to %s: %s (code %d), retrying", m->url,
			  resp && resp->message ? resp->message : "no answer",
			  resp ? resp->code : 0);
	}
	mqttc_schedule(m);
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static void mqttc_on_lost(void *ctx, char *cause)
{
	struct mqttc *m = ctx;

	int cur;

	mqttc_cb_enter(m);
	pthread_mutex_lock(&m->lock);
	m->connected = false;
	m->connecting = false;
	cur = m->current >= 0 ? m->current : 0;
	m->current = -1;
	m->switching = false; /* the loss takes the place of mqttc_reconnect's disconnect */
	m->planned = false;
	pthread_mutex_unlock(&m->lock);
	log_warnx("connection to %s lost%s%s, reconnecting%s", m->urls[cur], cause ? ": " : "",
		  cause ? cause : "", m->nurls > 1 ? " (to the first broker that answers)" : "");
	if (m->cb.on_lost)
		m->cb.on_lost(m->cb.ctx);
	/* only now may the loop replace the client (this callback is done with it) */
	pthread_mutex_lock(&m->lock);
	m->renew = true;
	m->attempt = 0;
	mqttc_schedule(m);
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	mqttc_cb_leave(m);
}

static int mqttc_on_message(void *ctx, char *topic, int topic_len, MQTTAsync_message *msg)
{
	struct mqttc *m = ctx;
	bool done = true;

	(void)topic_len;
	mqttc_cb_enter(m);
	if (m->cb.on_message)
		done = m->cb.on_message(m->cb.ctx, topic, msg->payload,
					msg->payloadlen > 0 ? (size_t)msg->payloadlen : 0);
	if (done) {
		MQTTAsync_freeMessage(&msg);
		MQTTAsync_free(topic);
	}
	mqttc_cb_leave(m);
	return done ? 1 : 0; /* 0: paho hands it back with the next packet it reads */
}

static void mqttc_on_delivered(void *ctx, MQTTAsync_token token)
{
	struct mqttc *m = ctx;

	(void)token;
	mqttc_cb_enter(m);
	pthread_mutex_lock(&m->room_lock);
	m->delivered++;
	if (m->in_flight > 0)
		m->in_flight--;
	pthread_cond_broadcast(&m->room);
	pthread_mutex_unlock(&m->room_lock);
	mqttc_cb_leave(m);
}

/*
 * paho keeps an in-memory trace of every function entry and exit and of every packet
 * (formatted text under a mutex), read by no one unless MQTT_C_CLIENT_TRACE names a
 * destination: about a tenth of the coordinator's instructions in a fan-out
 * (docs/coordinator.md, after the options). Errors only, unless the user asked for a trace.
 */
static void mqttc_trace_errors_only(void)
{
	const char *dest = getenv("MQTT_C_CLIENT_TRACE");
	const char *level = getenv("MQTT_C_CLIENT_TRACE_LEVEL");

	/* set and empty is unset, as paho reads them */
	if ((dest == NULL || *dest == '\0') && (level == NULL || *level == '\0'))
		MQTTAsync_setTraceLevel(MQTTASYNC_TRACE_ERROR);
}

/* Creates the paho client of m (m->client). */
static enum rcs_err mqttc_create(struct mqttc *m)
{
	static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
	MQTTAsync_createOptions cro = MQTTAsync_createOptions_initializer;
	int rc;

	cro.sendWhileDisconnected = 0;
	cro.MQTTVersion = MQTTVERSION_3_1_1;
	cro.maxBufferedMessages = m->o.max_inflight + MQTTC_QUEUE_EXTRA;
	rc = MQTTAsync_createWithOptions(&m->client, m->url, m->o.client_id,
					 MQTTCLIENT_PERSISTENCE_NONE, NULL, &cro);
	if (rc != MQTTASYNC_SUCCESS) {
		log_warnx("MQTT client for %s: error %d", m->url, rc);
		m->client = NULL;
		return RCS_ERR_INVAL;
	}
	pthread_once(&trace_once, mqttc_trace_errors_only);
	MQTTAsync_setCallbacks(m->client, m, mqttc_on_lost, mqttc_on_message, mqttc_on_delivered);
	return RCS_OK;
}

/*
 * After a lost connection, the next attempt starts from a new paho client: the
 * broker keeps the session (clean session off), but paho 1.3.12 can corrupt the
 * in-flight messages it would send again on reconnect (a broken topic, which
 * the broker answers by closing the connection, again and again). What matters
 * is sent again by its owner: the coordinator's catch-up and re-send sweep, the
 * agent's journal outbox.
 */
static enum rcs_err mqttc_renew(struct mqttc *m)
{
	MQTTAsync old;
	enum rcs_err err;

	/* the new client takes the old one's place; publishers see one or the other */
	pthread_rwlock_wrlock(&m->client_lock);
	old = m->client;
	err = mqttc_create(m);
	if (err != RCS_OK)
		m->client = old; /* kept: tried again on the next attempt */
	pthread_rwlock_unlock(&m->client_lock);
	if (err != RCS_OK || old == NULL)
		return err;
	/* paho's threads may still be in a callback of the old client (a message
	 * being journaled): it is destroyed once they are out, outside the lock,
	 * since its destruction calls back (failed publishes) */
	for (int ms = 0; atomic_load(&m->in_callback) > 0 && ms < MQTTC_RENEW_WAIT_MS; ms++) {
		struct timespec t = {0, 1000000L};
		nanosleep(&t, NULL);
	}
	MQTTAsync_destroy(&old);
	return RCS_OK;
}

static int mqttc_connect(struct mqttc *m)
{
	MQTTAsync_connectOptions co = MQTTAsync_connectOptions_initializer;
	MQTTAsync_SSLOptions ssl = MQTTAsync_SSLOptions_initializer;
	MQTTAsync_willOptions will = MQTTAsync_willOptions_initializer;
	char *fresh = NULL;
	int rc;

	co.keepAliveInterval = m->o.keepalive;
	/* persistent session: the broker keeps our subscriptions and queue; clean: they end
	 * with the connection (mqttc_reconnect) */
	pthread_mutex_lock(&m->lock);
	co.cleansession = m->clean ? 1 : 0;
	m->trying_clean = m->clean;
	pthread_mutex_unlock(&m->lock);
	/* the window is kept in mqttc_take_room; paho's own, twice as large, is never full: paho
	 * does not wake its sending thread when an acknowledgement makes room there, and what
	 * waits sits for up to a second (docs/coordinator.md, option mqtt_window) */
	co.maxInflight = m->o.max_inflight < 32767 ? 2 * m->o.max_inflight : 65535;
	co.connectTimeout = 5;
	/* 3.1.1 only: paho's default falls back to 3.1 after a failed attempt, whose CONNACK
	 * has no session-present flag (docs/mqtt.md, at its top) */
	co.MQTTVersion = MQTTVERSION_3_1_1;
	co.automaticReconnect = 0;
	co.username = m->o.username;
	co.password = m->o.password;
	co.onSuccess = mqttc_on_connect_ok;
	co.onFailure = mqttc_on_connect_fail;
	co.context = m;
	if (m->nurls > 1) {
		/* paho tries them in turn, each for connectTimeout, and calls back once: with
		 * the one that answered, or with a failure when none did (then the backoff) */
		co.serverURIs = m->urls;
		co.serverURIcount = (int)m->nurls;
	}
	if (m->o.will_topic) {
		if (m->cb.will_payload)
			fresh = m->cb.will_payload(m->cb.ctx);
		will.topicName = m->o.will_topic;
		will.message = fresh ? fresh : m->o.will_payload;
		will.retained = m->o.will_retained;
		will.qos = 1;
		co.will = &will;
	}
	if (strncmp(m->url, "ssl://", 6) == 0) {
		ssl.trustStore = m->o.cafile;
		ssl.keyStore = m->o.certfile;
		ssl.privateKey = m->o.keyfile;
		ssl.privateKeyPassword = m->o.key_passphrase;
		ssl.enableServerCertAuth = 1;
		ssl.verify = 1;
		co.ssl = &ssl;
	}
	rc = MQTTAsync_connect(m->client, &co); /* it keeps a copy of the will */
	free(fresh);
	return rc;
}

static bool mqttc_ts_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void mqttc_sub_ok(void *ctx, MQTTAsync_successData *resp)
{
	struct mqttc_sub *s = ctx;
	struct mqttc *m = s->m;

	(void)resp;
	mqttc_cb_enter(m);
	if (s->refusals > 0)
		log_info("subscribed to %s (refused %u times before)", s->filter, s->refusals);
	if (s->tag != 0 && m->cb.on_suback)
		m->cb.on_suback(m->cb.ctx, s->tag, s->filter, true);
	free(s);
	mqttc_cb_leave(m);
}

/* Refused in the SUBACK (code 0x80): asked for again after 1, 2, 4 ... 30 s while the
 * connection lasts. Lost with the connection: the next connect subscribes anew. */
static void mqttc_sub_fail(void *ctx, MQTTAsync_failureData *resp)
{
	struct mqttc_sub *s = ctx;
	struct mqttc *m = s->m;
	bool refused = resp != NULL && resp->code == MQTTC_SUBACK_FAILURE;
	long long ns;
	int delay = 1;

	mqttc_cb_enter(m);
	/* before s goes on m->resub (the loop may free it from there); on_suback may publish,
	 * which takes m->lock. A refusal on a connection that just ended is told too: its tag
	 * is the caller's of that connection. */
	if (refused && s->tag != 0 && m->cb.on_suback)
		m->cb.on_suback(m->cb.ctx, s->tag, s->filter, false);
	for (unsigned i = 0; i < s->refusals && delay < MQTTC_RESUB_MAX_S; i++)
		delay *= 2;
	if (delay > MQTTC_RESUB_MAX_S)
		delay = MQTTC_RESUB_MAX_S;
	pthread_mutex_lock(&m->lock);
	if (refused && !m->stop && m->connected && s->gen == m->gen) {
		s->refusals++;
		mqttc_now(&s->due);
		ns = s->due.tv_nsec + (long long)delay * 1000000000LL;
		s->due.tv_sec += (time_t)(ns / 1000000000LL);
		s->due.tv_nsec = (long)(ns % 1000000000LL);
		s->next = m->resub;
		m->resub = s;
		pthread_cond_broadcast(&m->cond);
		/* MQTT 3.1.1 gives no reason beyond the code: an ACL (or a NATS account's
		 * permissions) that does not allow it, or a subscription the broker could not
		 * make for now */
		log_warnx("the broker refused the subscription to %s (SUBACK code 0x80: not "
			  "allowed to this client, or not made for now): asking again in %d s",
			  s->filter, delay);
		s = NULL;
	}
	pthread_mutex_unlock(&m->lock);
	free(s);
	mqttc_cb_leave(m);
}

/* Sends s's SUBSCRIBE (QoS 1); s is the request's context from then on, freed here when it
 * cannot be sent. */
static enum rcs_err mqttc_sub_send(struct mqttc *m, struct mqttc_sub *s)
{
	MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
	enum rcs_err err = RCS_OK;
	bool locked;
	int rc;

	ro.onSuccess = mqttc_sub_ok;
	ro.onFailure = mqttc_sub_fail;
	ro.context = s;
	locked = mqttc_send_lock(m);
	pthread_rwlock_rdlock(&m->client_lock);
	rc = MQTTAsync_subscribe(m->client, s->filter, 1, &ro);
	pthread_rwlock_unlock(&m->client_lock);
	mqttc_send_unlock(m, locked);
	if (rc != MQTTASYNC_SUCCESS) {
		log_warnx("subscribe %s: error %d", s->filter, rc);
		free(s);
		err = RCS_ERR_IO;
	}
	return err;
}

/*
 * (m->lock held) Takes the refused subscriptions that are due off m->resub, drops those of
 * an earlier connection, and sets *next to when the first of the others is due. NULL when
 * none is due.
 */
static struct mqttc_sub *mqttc_resub_take(struct mqttc *m, struct timespec *next)
{
	struct mqttc_sub *due = NULL, **pp = &m->resub;
	struct timespec now;

	mqttc_now(&now);
	*next = now;
	next->tv_sec += MQTTC_RESUB_MAX_S;
	while (*pp != NULL) {
		struct mqttc_sub *s = *pp;

		if (s->gen != m->gen || !mqttc_ts_before(&now, &s->due)) {
			*pp = s->next;
			if (s->gen != m->gen) {
				free(s);
			} else {
				s->next = due;
				due = s;
			}
			continue;
		}
		if (mqttc_ts_before(&s->due, next))
			*next = s->due;
		pp = &s->next;
	}
	return due;
}

static void mqttc_resub_free(struct mqttc *m)
{
	pthread_mutex_lock(&m->lock);
	while (m->resub != NULL) {
		struct mqttc_sub *s = m->resub;

		m->resub = s->next;
		free(s);
	}
	pthread_mutex_unlock(&m->lock);
}

static void *mqttc_loop(void *arg)
{
	struct mqttc *m = arg;
	int rc;

	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		struct timespec now;

		if (m->connected && m->resub != NULL) {
			struct timespec next;
			struct mqttc_sub *due = mqttc_resub_take(m, &next);

			if (due == NULL) {
				pthread_cond_timedwait(&m->cond, &m->lock, &next);
				continue;
			}
			pthread_mutex_unlock(&m->lock);
			while (due != NULL) {
				struct mqttc_sub *s = due;

				due = s->next;
				s->next = NULL;
				mqttc_sub_send(m, s);
			}
			pthread_mutex_lock(&m->lock);
			continue;
		}
		if (m->connected || m->connecting) {
			pthread_cond_wait(&m->cond, &m->lock);
			continue;
		}
		mqttc_now(&now);
		if (now.tv_sec < m->next_attempt.tv_sec ||
		    (now.tv_sec == m->next_attempt.tv_sec &&
		     now.tv_nsec < m->next_attempt.tv_nsec)) {
			pthread_cond_timedwait(&m->cond, &m->lock, &m->next_attempt);
			continue;
		}
		m->connecting = true;
		if (m->renew) {
			m->renew = false;
			pthread_mutex_unlock(&m->lock);
			if (mqttc_renew(m) != RCS_OK) {
				pthread_mutex_lock(&m->lock);
				m->connecting = false;
				m->renew = true;
				mqttc_schedule(m);
				continue;
			}
		} else {
			pthread_mutex_unlock(&m->lock);
		}
		pthread_rwlock_rdlock(&m->client_lock);
		rc = mqttc_connect(m);
		pthread_rwlock_unlock(&m->client_lock);
		if (rc != MQTTASYNC_SUCCESS) {
			pthread_mutex_lock(&m->lock);
			m->connecting = false;
			mqttc_schedule(m);
			continue;
		}
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

enum rcs_err mqttc_url_check(const char *url, char *err, size_t errlen)
{
	bool tls;

	if (strncmp(url, "tcp://", 6) == 0 || strncmp(url, "mqtt://", 7) == 0) {
		tls = false;
	} else if (strncmp(url, "ssl://", 6) == 0 || strncmp(url, "mqtts://", 8) == 0) {
		tls = true;
	} else {
		snprintf(err, errlen, "MQTT URL %s: expected tcp://, ssl://, mqtt:// or mqtts://",
			 url);
		return RCS_ERR_INVAL;
	}
#ifdef RCS_MQTT_NO_TLS
	if (tls) {
		snprintf(err, errlen,
			 "MQTT URL %s: this build has no TLS (built with WITH_TLS=OFF)", url);
		return RCS_ERR_INVAL;
	}
#else
	(void)tls;
#endif
	return RCS_OK;
}

/* url with mqtt:// written tcp:// and mqtts:// written ssl:// (paho 1.3.12's own names),
 * malloc'd; NULL when out of memory. */
static char *mqttc_url_norm(const char *url)
{
	size_t len = strlen(url) + 1;
	char *s = malloc(len);

	if (s == NULL)
		return NULL;
	if (strncmp(url, "mqtt://", 7) == 0)
		snprintf(s, len, "tcp://%s", url + 7);
	else if (strncmp(url, "mqtts://", 8) == 0)
		snprintf(s, len, "ssl://%s", url + 8);
	else
		snprintf(s, len, "%s", url);
	return s;
}

static bool mqttc_url_tls(const char *url)
{
	return strncmp(url, "ssl://", 6) == 0 || strncmp(url, "mqtts://", 8) == 0;
}

enum rcs_err mqttc_urls_check(const char *const *urls, size_t n, char *err, size_t errlen)
{
	enum rcs_err e = RCS_OK;

	if (n == 0) {
		snprintf(err, errlen, "no MQTT URL given");
		return RCS_ERR_INVAL;
	}
	if (n > MQTTC_MAX_URLS) {
		snprintf(err, errlen, "%zu MQTT URLs: %d at most", n, MQTTC_MAX_URLS);
		return RCS_ERR_INVAL;
	}
	for (size_t i = 0; i < n && e == RCS_OK; i++) {
		e = mqttc_url_check(urls[i], err, errlen);
		if (e == RCS_OK && mqttc_url_tls(urls[i]) != mqttc_url_tls(urls[0])) {
			snprintf(err, errlen,
				 "MQTT URLs %s and %s: either all brokers use TLS or none", urls[0],
				 urls[i]);
			e = RCS_ERR_INVAL;
		}
		for (size_t j = 0; j < i && e == RCS_OK; j++) {
			char *a = mqttc_url_norm(urls[i]), *b = mqttc_url_norm(urls[j]);

			if (a == NULL || b == NULL) {
				e = RCS_ERR_NOMEM;
			} else if (strcmp(a, b) == 0) {
				snprintf(err, errlen, "MQTT URL %s given twice", urls[i]);
				e = RCS_ERR_INVAL;
			}
			free(a);
			free(b);
		}
	}
	return e;
}

enum rcs_err mqttc_start(const struct mqttc_opts *opts, const struct mqttc_callbacks *cb,
			 struct mqttc **out)
{
	const char *const *urls = opts->urls ? opts->urls : &opts->url;
	size_t nurls = opts->urls ? opts->nurls : 1;

	pthread_condattr_t ca;
	struct mqttc *m = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;
	char why[256];

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		goto out;
	pthread_mutex_init(&m->lock, NULL);
	pthread_rwlock_init(&m->client_lock, NULL);
	pthread_mutex_init(&m->send_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_mutex_init(&m->room_lock, NULL);
	pthread_cond_init(&m->room, &ca);
	pthread_condattr_destroy(&ca);
	m->cb = *cb;
	m->o = *opts;
	m->o.url = NULL;
	m->o.urls = NULL;
	m->current = -1;
	m->clean = opts->clean;
	m->o.client_id = mqttc_dup(opts->client_id);
	m->o.username = mqttc_dup(opts->username);
	m->o.password = mqttc_dup(opts->password);
	m->o.cafile = mqttc_dup(opts->cafile);
	m->o.certfile = mqttc_dup(opts->certfile);
	m->o.keyfile = mqttc_dup(opts->keyfile);
	m->o.key_passphrase = mqttc_dup(opts->key_passphrase);
	m->o.will_topic = mqttc_dup(opts->will_topic);
	m->o.will_payload = mqttc_dup(opts->will_payload);
	if (m->o.client_id == NULL)
		goto out;
	if (urls[0] == NULL) {
		err = RCS_ERR_INVAL;
		goto out;
	}
	err = mqttc_urls_check(urls, nurls, why, sizeof(why));
	if (err != RCS_OK) {
		log_warnx("%s", why);
		goto out;
	}
	err = RCS_ERR_NOMEM;
	m->urls = calloc(nurls, sizeof(*m->urls));
	if (m->urls == NULL)
		goto out;
	for (; m->nurls < nurls; m->nurls++)
		if ((m->urls[m->nurls] = mqttc_url_norm(urls[m->nurls])) == NULL)
			goto out;
	m->url = m->urls[0];
	if (m->o.keepalive <= 0)
		m->o.keepalive = 20;
	if (m->o.max_inflight <= 0)
		m->o.max_inflight = 1000;
	if (m->o.max_inflight > MQTTC_MAX_WINDOW)
		m->o.max_inflight = MQTTC_MAX_WINDOW;
	if (m->o.backoff_min <= 0)
		m->o.backoff_min = 0.25;
	if (m->o.backoff_max < m->o.backoff_min)
		m->o.backoff_max = 5;
	err = mqttc_create(m);
	if (err != RCS_OK)
		goto out;
	mqttc_now(&m->next_attempt);
	/* the handle is the caller's before the first connect can call back into it
	 * (an on_connected that subscribes through *out must not find NULL there) */
	*out = m;
	if (pthread_create(&m->thread, NULL, mqttc_loop, m) != 0) {
		*out = NULL;
		err = RCS_ERR_IO;
		goto out;
	}
	m->thread_started = true;
	m = NULL;
	err = RCS_OK;
out:
	mqttc_stop(m, 0);
	return err;
}

/* mqttc_reconnect's disconnect completed (or failed: the connection is dropped all the
 * same when the client is renewed): the loop connects again at once. */
static void mqttc_switched(struct mqttc *m)
{
	bool was;

	mqttc_cb_enter(m);
	pthread_mutex_lock(&m->lock);
	was = m->switching;
	m->switching = false;
	if (was) {
		m->connected = false;
		m->connecting = false;
		m->current = -1;
	}
	pthread_mutex_unlock(&m->lock);
	if (was && m->cb.on_lost)
		m->cb.on_lost(m->cb.ctx);
	if (was) {
		pthread_mutex_lock(&m->lock);
		m->renew = true;
		m->attempt = 0;
		mqttc_now(&m->next_attempt);
		pthread_cond_broadcast(&m->cond);
		pthread_mutex_unlock(&m->lock);
	}
	mqttc_cb_leave(m);
}

static void mqttc_on_disconnect_ok(void *ctx, MQTTAsync_successData *resp)
{
	(void)resp;
	mqttc_switched(ctx);
}

static void mqttc_on_disconnect_fail(void *ctx, MQTTAsync_failureData *resp)
{
	(void)resp;
	mqttc_switched(ctx);
}

bool mqttc_clean(struct mqttc *m)
{
	bool clean;

	pthread_mutex_lock(&m->lock);
	clean = m->connected ? m->live_clean : m->clean;
	pthread_mutex_unlock(&m->lock);
	return clean;
}

enum rcs_err mqttc_reconnect(struct mqttc *m, bool clean)
{
	MQTTAsync_disconnectOptions d = MQTTAsync_disconnectOptions_initializer;
	enum rcs_err err = RCS_OK;
	int rc;

	pthread_mutex_lock(&m->lock);
	if (!m->connected || m->switching || m->stop) {
		m->clean = clean; /* the next connect, whenever it comes */
		pthread_mutex_unlock(&m->lock);
		goto out;
	}
	m->clean = clean;
	m->switching = true;
	m->planned = true;
	pthread_mutex_unlock(&m->lock);
	log_info("reconnecting with a %s session", clean ? "clean" : "persistent");
	d.timeout = 250;
	d.onSuccess = mqttc_on_disconnect_ok;
	d.onFailure = mqttc_on_disconnect_fail;
	d.context = m;
	pthread_rwlock_rdlock(&m->client_lock);
	rc = MQTTAsync_disconnect(m->client, &d);
	pthread_rwlock_unlock(&m->client_lock);
	if (rc != MQTTASYNC_SUCCESS) {
		pthread_mutex_lock(&m->lock);
		m->switching = false;
		m->planned = false;
		pthread_mutex_unlock(&m->lock);
		err = RCS_ERR_IO;
	}
out:
	return err;
}

void mqttc_disconnect(struct mqttc *m, int timeout_ms)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	if (m->thread_started) {
		pthread_join(m->thread, NULL);
		m->thread_started = false;
	}
	if (m->client) {
		if (MQTTAsync_isConnected(m->client)) {
			MQTTAsync_disconnectOptions d = MQTTAsync_disconnectOptions_initializer;
			d.timeout = timeout_ms;
			MQTTAsync_disconnect(m->client, &d);
			/* the disconnect completes asynchronously: give it its time */
			for (int i = 0; i < timeout_ms / 10 + 1 && MQTTAsync_isConnected(m->client);
			     i++) {
				struct timespec ts = {0, 10 * 1000000L};
				nanosleep(&ts, NULL);
			}
		}
	}
}

void mqttc_stop(struct mqttc *m, int timeout_ms)
{
	if (m == NULL)
		return;
	mqttc_disconnect(m, timeout_ms);
	if (m->client) {
		MQTTAsync_destroy(&m->client);
	}
	mqttc_resub_free(m);
	for (size_t i = 0; i < m->nurls; i++)
		free(m->urls[i]);
	free(m->urls);
	free((char *)m->o.client_id);
	free((char *)m->o.username);
	if (m->o.password)
		explicit_bzero((char *)m->o.password, strlen(m->o.password));
	free((char *)m->o.password);
	free((char *)m->o.cafile);
	free((char *)m->o.certfile);
	free((char *)m->o.keyfile);
	if (m->o.key_passphrase)
		explicit_bzero((char *)m->o.key_passphrase, strlen(m->o.key_passphrase));
	free((char *)m->o.key_passphrase);
	free((char *)m->o.will_topic);
	free((char *)m->o.will_payload);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->room);
	pthread_mutex_destroy(&m->room_lock);
	pthread_rwlock_destroy(&m->client_lock);
	pthread_mutex_destroy(&m->send_lock);
	free(m);
}

bool mqttc_connected(struct mqttc *m)
{
	bool c;

	pthread_mutex_lock(&m->lock);
	c = m->connected;
	pthread_mutex_unlock(&m->lock);
	return c;
}

bool mqttc_up(struct mqttc *m)
{
	bool up;

	pthread_mutex_lock(&m->lock);
	up = m->connected || m->planned;
	pthread_mutex_unlock(&m->lock);
	return up;
}

const char *mqttc_server(struct mqttc *m)
{
	const char *url = NULL;

	pthread_mutex_lock(&m->lock);
	if (m->connected && m->current >= 0)
		url = m->urls[m->current];
	pthread_mutex_unlock(&m->lock);
	return url;
}

/* What paho has not completed of this client's QoS 1 publishes: queued or in flight. paho
 * lists its queued QoS 0 publishes too, with token 0 (their message id): they take no place
 * in the window, and a burst of them (up to MQTTC_QUEUE_EXTRA) would hold it shut. With
 * client_lock held. */
static long mqttc_pending(struct mqttc *m)
{
	MQTTAsync_token *tokens = NULL;
	long n = 0;

	if (MQTTAsync_getPendingTokens(m->client, &tokens) != MQTTASYNC_SUCCESS)
		return -1;
	for (long i = 0; tokens != NULL && tokens[i] != -1; i++)
		n += tokens[i] != 0;
	MQTTAsync_free(tokens);
	return n;
}

#define MQTTC_RECOUNT_S 1 /* a full window is counted again from paho's list this often */

/*
 * Takes a place in the window for a QoS 1 publish (false: none free, fewer than max_inflight
 * must be in flight). paho looks for a free message id through every message in flight, for
 * each publish, so a window as large as a burst costs far more than the burst's messages
 * (docs/coordinator.md, option mqtt_window). The count is ours, taken before paho has the
 * message (its acknowledgement can't come first); after a connect, and while the window
 * stays full, it is taken again from paho's list, so that a message paho dropped without a
 * callback (a new session) does not hold its place. Not recounted inside our callbacks
 * (paho's lock).
 */
static bool mqttc_take_room(struct mqttc *m)
{
	struct timespec now;
	bool recount;
	long n = -1;

	pthread_mutex_lock(&m->room_lock);
	recount = m->recount;
	if (m->in_flight >= m->o.max_inflight && !recount) {
		mqttc_now(&now);
		recount = now.tv_sec - m->recounted.tv_sec >= MQTTC_RECOUNT_S;
	}
	if (recount && mqttc_cb_depth == 0) {
		m->recount = false;
		mqttc_now(&m->recounted);
		pthread_mutex_unlock(&m->room_lock);
		pthread_rwlock_rdlock(&m->client_lock);
		n = mqttc_pending(m);
		pthread_rwlock_unlock(&m->client_lock);
		pthread_mutex_lock(&m->room_lock);
		if (n >= 0)
			m->in_flight = n;
	}
	recount = m->in_flight < m->o.max_inflight; /* now: whether there is room */
	if (recount)
		m->in_flight++;
	pthread_mutex_unlock(&m->room_lock);
	return recount;
}

/* Gives back a place mqttc_take_room took for a publish paho refused. */
static void mqttc_give_room(struct mqttc *m)
{
	pthread_mutex_lock(&m->room_lock);
	if (m->in_flight > 0)
		m->in_flight--;
	pthread_cond_broadcast(&m->room);
	pthread_mutex_unlock(&m->room_lock);
}

static void mqttc_pub_ok(void *ctx, MQTTAsync_successData *resp)
{
	struct mqttc_pub *p = ctx;

	struct mqttc *m = p->m;

	(void)resp;
	mqttc_cb_enter(m);
	if (m->cb.on_published)
		m->cb.on_published(m->cb.ctx, p->tag, true);
	free(p);
	mqttc_cb_leave(m);
}

static void mqttc_pub_fail(void *ctx, MQTTAsync_failureData *resp)
{
	struct mqttc_pub *p = ctx;

	struct mqttc *m = p->m;

	(void)resp;
	mqttc_cb_enter(m);
	mqttc_give_room(m);
	if (m->cb.on_published)
		m->cb.on_published(m->cb.ctx, p->tag, false);
	free(p);
	mqttc_cb_leave(m);
}

enum rcs_err mqttc_publish(struct mqttc *m, const char *topic, const void *payload, size_t len,
			   int qos, bool retained, uint64_t tag)
{
	MQTTAsync_message msg = MQTTAsync_message_initializer;
	MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
	struct mqttc_pub *p = NULL;
	bool locked;
	int rc;

	mqttc_queue_refused = NULL;
	if (len > (size_t)INT32_MAX)
		return RCS_ERR_TOOBIG;
	if (!mqttc_connected(m))
		return RCS_ERR_BUSY;
	msg.payload = (void *)payload;
	msg.payloadlen = (int)len;
	msg.qos = qos;
	msg.retained = retained;
	if (tag != 0) {
		p = malloc(sizeof(*p));
		if (p == NULL)
			return RCS_ERR_NOMEM;
		p->m = m;
		p->tag = tag;
		ro.onSuccess = mqttc_pub_ok;
		ro.onFailure = mqttc_pub_fail;
		ro.context = p;
	}
	if (qos > 0 && !mqttc_take_room(m)) {
		free(p);
		return RCS_ERR_FULL;
	}
	locked = mqttc_send_lock(m);
	pthread_rwlock_rdlock(&m->client_lock);
	rc = MQTTAsync_sendMessage(m->client, topic, &msg, &ro);
	pthread_rwlock_unlock(&m->client_lock);
	mqttc_send_unlock(m, locked);
	if (rc != MQTTASYNC_SUCCESS && qos > 0)
		mqttc_give_room(m);
	if (rc != MQTTASYNC_SUCCESS) {
		free(p);
		if (rc == MQTTASYNC_DISCONNECTED)
			return RCS_ERR_BUSY;
		if (rc == MQTTASYNC_MAX_BUFFERED_MESSAGES)
			mqttc_queue_refused = m;
		if (rc == MQTTASYNC_MAX_MESSAGES_INFLIGHT || rc == MQTTASYNC_NO_MORE_MSGIDS ||
		    rc == MQTTASYNC_MAX_BUFFERED_MESSAGES) {
			log_debug("publish %s: client queue full (%d)", topic, rc);
			return RCS_ERR_FULL;
		}
		log_warnx("publish %s: error %d", topic, rc);
		return RCS_ERR_IO;
	}
	return RCS_OK;
}

uint64_t mqttc_delivered(struct mqttc *m)
{
	uint64_t n;

	pthread_mutex_lock(&m->room_lock);
	n = m->delivered;
	pthread_mutex_unlock(&m->room_lock);
	return n;
}

bool mqttc_wait_delivered(struct mqttc *m, uint64_t seen, const struct timespec *deadline)
{
	struct timespec until = *deadline, now;
	bool more, queue = mqttc_queue_refused == m;

	mqttc_queue_refused = NULL; /* read once: a later wait is for an acknowledgement */
	if (queue) {
		mqttc_now(&now);
		now.tv_nsec += MQTTC_QUEUE_WAIT_MS * 1000000L;
		if (now.tv_nsec >= 1000000000L) {
			now.tv_sec++;
			now.tv_nsec -= 1000000000L;
		}
		if (mqttc_ts_before(&now, &until))
			until = now;
	}
	pthread_mutex_lock(&m->room_lock);
	while (m->delivered == seen && pthread_cond_timedwait(&m->room, &m->room_lock, &until) == 0)
		;
	more = m->delivered != seen;
	pthread_mutex_unlock(&m->room_lock);
	if (!more && queue) {
		/* paho's queue had no room: try again while the caller's deadline lasts */
		mqttc_now(&now);
		more = mqttc_ts_before(&now, deadline);
	}
	return more;
}

enum rcs_err mqttc_subscribe(struct mqttc *m, const char *const *filters, size_t n)
{
	return mqttc_subscribe_tagged(m, filters, n, 0);
}

enum rcs_err mqttc_subscribe_tagged(struct mqttc *m, const char *const *filters, size_t n,
				    uint64_t tag)
{
	enum rcs_err err = RCS_OK;
	unsigned gen;

	if (n == 0 || n > 16)
		return RCS_ERR_INVAL;
	pthread_mutex_lock(&m->lock);
	gen = m->gen;
	pthread_mutex_unlock(&m->lock);
	/* one SUBSCRIBE a filter: the SUBACK of each says whether that one was refused */
	for (size_t i = 0; i < n && err == RCS_OK; i++) {
		size_t len = strlen(filters[i]) + 1;
		struct mqttc_sub *s = calloc(1, sizeof(*s) + len);

		if (s == NULL) {
			err = RCS_ERR_NOMEM;
		} else {
			s->m = m;
			s->gen = gen;
			s->tag = tag;
			memcpy(s->filter, filters[i], len);
			err = mqttc_sub_send(m, s);
		}
	}
	return err;
}

/* Context of a subscribe or unsubscribe whose answer is waited for. */
struct mqttc_req {
	struct mqttc *m;
	mqttc_done_fn done;
	void *ctx;
	size_t n; /* filters in the request */
};

static void mqttc_req_ok(void *ctx, MQTTAsync_successData *resp)
{
	struct mqttc_req *r = ctx;
	struct mqttc *m = r->m;
	bool ok = true;

	mqttc_cb_enter(m);
	/* a SUBACK of several filters comes here even when some were refused (0x80) */
	for (size_t i = 0; resp != NULL && r->n > 1 && resp->alt.qosList != NULL && i < r->n; i++)
		ok = ok && resp->alt.qosList[i] != 0x80;
	if (r->done)
		r->done(r->ctx, ok);
	free(r);
	mqttc_cb_leave(m);
}

static void mqttc_req_fail(void *ctx, MQTTAsync_failureData *resp)
{
	struct mqttc_req *r = ctx;
	struct mqttc *m = r->m;

	(void)resp;
	mqttc_cb_enter(m);
	if (r->done)
		r->done(r->ctx, false);
	free(r);
	mqttc_cb_leave(m);
}

/* mqttc_subscribe_cb (subscribe true) and mqttc_unsubscribe. */
static enum rcs_err mqttc_request(struct mqttc *m, bool subscribe, const char *const *filters,
				  size_t n, mqttc_done_fn done, void *ctx)
{
	MQTTAsync_responseOptions ro = MQTTAsync_responseOptions_initializer;
	struct mqttc_req *r = NULL;
	int qos[16];
	bool locked;
	int rc;

	if (n == 0 || n > 16)
		return RCS_ERR_INVAL;
	r = malloc(sizeof(*r));
	if (r == NULL)
		return RCS_ERR_NOMEM;
	r->m = m;
	r->done = done;
	r->ctx = ctx;
	r->n = n;
	ro.onSuccess = mqttc_req_ok;
	ro.onFailure = mqttc_req_fail;
	ro.context = r;
	for (size_t i = 0; i < n; i++)
		qos[i] = 1;
	locked = mqttc_send_lock(m);
	pthread_rwlock_rdlock(&m->client_lock);
	if (subscribe)
		rc = MQTTAsync_subscribeMany(m->client, (int)n, (char *const *)filters, qos, &ro);
	else
		rc = MQTTAsync_unsubscribeMany(m->client, (int)n, (char *const *)filters, &ro);
	pthread_rwlock_unlock(&m->client_lock);
	mqttc_send_unlock(m, locked);
	if (rc != MQTTASYNC_SUCCESS) {
		free(r);
		log_warnx("%s %s: error %d", subscribe ? "subscribe" : "unsubscribe", filters[0],
			  rc);
		return rc == MQTTASYNC_DISCONNECTED ? RCS_ERR_BUSY : RCS_ERR_IO;
	}
	return RCS_OK;
}

enum rcs_err mqttc_subscribe_cb(struct mqttc *m, const char *const *filters, size_t n,
				mqttc_done_fn done, void *ctx)
{
	return mqttc_request(m, true, filters, n, done, ctx);
}

enum rcs_err mqttc_unsubscribe(struct mqttc *m, const char *const *filters, size_t n,
			       mqttc_done_fn done, void *ctx)
{
	return mqttc_request(m, false, filters, n, done, ctx);
}
