/*
 * mqttfloor: the coordinator's MQTT exchange of a tag send, through the coordinator's own
 * MQTT client (common/mqttc.c on paho.mqtt.c's asynchronous client) and nothing else: no
 * database, no JSON, no HTTP. Test tooling only, not the product (BENCHMARKS.md,
 * section 14).
 *
 * Per device of --idents it publishes one QoS 1 envelope of --env-size bytes on
 * rcs/v1/<root>/<entity>/jobs/<job> from the main thread (as the coordinator's worker does),
 * and one event of --event-size bytes on rcs/v1/<root>/events/jobs/<job> for the send and for
 * each of the four reports the device answers with, from a second thread (as the
 * coordinator's event publisher does), at --events-qos. Every QoS 1 publish goes through the
 * client's window (--window, the coordinator's mqtt_window) with the same back-pressure as
 * the coordinator: on RCS_ERR_FULL, wait for an acknowledgement. After the last event, one
 * QoS 1 publish of its own: acknowledged, every event before it was written (at QoS 0 too).
 * The devices are fleetsim's.
 *
 * What it prints at the end (one JSON line): the time from the first envelope until every
 * report arrived and every event went out (acknowledged at QoS 1), and the process's CPU
 * time in it, per job: what paho alone costs the coordinator for one job, the floor under
 * the coordinator's CPU per job with this client.
 *
 * --client mosquitto (when built with libmosquitto, Debian's libmosquitto-dev): the same
 * exchange through mosquitto's client library instead (one connection, its network thread;
 * a window kept the same way), for comparison: not a client the coordinator uses.
 *
 *   mqttfloor --url tcp://127.0.0.1:P --root UUID --idents FILE [--env-size 700]
 *             [--event-size 600] [--events-qos 1] [--window 1000] [--timeout 120]
 *             [--client paho|mosquitto]
 *   mqttfloor --clients       the clients of this build
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "mqttc.h"
#ifdef FLOOR_WITH_MOSQUITTO
#include <mosquitto.h>
#endif

#define FLOOR_JOB_FMT "00000000-0000-7000-8000-%012d"
#define FLOOR_TOPIC   256

struct floor {
	const char *url, *root;
	char **idents;
	int n;
	int env_size, event_size, events_qos, window, timeout_s;
	struct mqttc *mq;
#ifdef FLOOR_WITH_MOSQUITTO
	struct mosquitto *mosq;
	pthread_mutex_t win_lock;
	pthread_cond_t win_room;
	uint64_t acked;      /* QoS 1 publishes acknowledged */
	long in_flight;      /* QoS 1 publishes not yet acknowledged */
	unsigned char *qos1; /* per message id: a QoS 1 publish in flight */
#endif
	bool use_mosquitto;
	atomic_bool subscribed;
	atomic_long reports;
	/* the events to publish: job indexes, from the sends and the reports */
	pthread_mutex_t lock;
	pthread_cond_t more;
	int *queue;
	long qhead, qtail, qcap;
	long events_out;
	bool failed;
};

static double floor_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double floor_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void floor_push(struct floor *f, int job)
{
	pthread_mutex_lock(&f->lock);
	if (f->qtail - f->qhead < f->qcap) {
		f->queue[f->qtail % f->qcap] = job;
		f->qtail++;
		pthread_cond_signal(&f->more);
	} else {
		f->failed = true; /* cannot happen: the queue holds every event of the send */
		pthread_cond_signal(&f->more);
	}
	pthread_mutex_unlock(&f->lock);
}

static bool floor_failed(struct floor *f)
{
	bool failed;

	pthread_mutex_lock(&f->lock);
	failed = f->failed;
	pthread_mutex_unlock(&f->lock);
	return failed;
}

static void floor_fail(struct floor *f)
{
	pthread_mutex_lock(&f->lock);
	f->failed = true;
	pthread_cond_signal(&f->more);
	pthread_mutex_unlock(&f->lock);
#ifdef FLOOR_WITH_MOSQUITTO
	if (f->use_mosquitto) {
		pthread_mutex_lock(&f->win_lock);
		pthread_cond_broadcast(&f->win_room);
		pthread_mutex_unlock(&f->win_lock);
	}
#endif
}

static void on_sub_done(void *ctx, bool ok)
{
	struct floor *f = ctx;

	atomic_store(&f->subscribed, ok);
}

static void on_connected(void *ctx, bool session_present)
{
	struct floor *f = ctx;
	char filter[FLOOR_TOPIC];
	const char *fl = filter;

	(void)session_present;
	snprintf(filter, sizeof(filter), "rcs/v1/%s/+/jobs/+/status", f->root);
	if (mqttc_subscribe_cb(f->mq, &fl, 1, on_sub_done, f) != RCS_OK)
		fprintf(stderr, "mqttfloor: cannot subscribe\n");
}

/* A report on rcs/v1/<root>/<entity>/jobs/<job>/status: its job's event is queued. */
static bool on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct floor *f = ctx;
	const char *j = strstr(topic, "/jobs/");
	int job;

	(void)payload;
	(void)len;
	if (j == NULL || sscanf(j + 6, FLOOR_JOB_FMT, &job) != 1 || job < 0 || job >= f->n)
		return true;
	atomic_fetch_add(&f->reports, 1);
	floor_push(f, job);
	return true;
}

#ifdef FLOOR_WITH_MOSQUITTO
/* ---- the same through libmosquitto: a window of QoS 1 publishes kept as mqttc keeps it */

static void mosq_on_connect(struct mosquitto *mosq, void *ctx, int rc)
{
	struct floor *f = ctx;
	char filter[FLOOR_TOPIC];

	if (rc != 0)
		return;
	snprintf(filter, sizeof(filter), "rcs/v1/%s/+/jobs/+/status", f->root);
	mosquitto_subscribe(mosq, NULL, filter, 1);
}

static void mosq_on_subscribe(struct mosquitto *mosq, void *ctx, int mid, int n, const int *granted)
{
	struct floor *f = ctx;

	(void)mosq;
	(void)mid;
	atomic_store(&f->subscribed, n == 1 && granted[0] == 1);
}

static void mosq_on_message(struct mosquitto *mosq, void *ctx, const struct mosquitto_message *msg)
{
	(void)mosq;
	on_message(ctx, msg->topic, msg->payload, (size_t)msg->payloadlen);
}

static void mosq_on_publish(struct mosquitto *mosq, void *ctx, int mid)
{
	struct floor *f = ctx;

	(void)mosq;
	pthread_mutex_lock(&f->win_lock);
	if (f->qos1[(uint16_t)mid]) {
		f->qos1[(uint16_t)mid] = 0;
		f->acked++;
		f->in_flight--;
		pthread_cond_broadcast(&f->win_room);
	}
	pthread_mutex_unlock(&f->win_lock);
}

static bool mosq_publish(struct floor *f, const char *topic, const char *payload, size_t len,
			 int qos)
{
	int mid = 0, rc;
	double give_up = floor_now() + f->timeout_s;

	pthread_mutex_lock(&f->win_lock);
	while (qos > 0 && f->in_flight >= f->window) {
		struct timespec rt;

		pthread_mutex_unlock(&f->win_lock);
		if (floor_failed(f) || floor_now() > give_up)
			return false;
		clock_gettime(CLOCK_REALTIME, &rt); /* win_room's clock */
		rt.tv_sec += 1;
		pthread_mutex_lock(&f->win_lock);
		if (f->in_flight >= f->window)
			pthread_cond_timedwait(&f->win_room, &f->win_lock, &rt);
	}
	/* under the lock: the acknowledgement can't be counted before the id is marked */
	rc = mosquitto_publish(f->mosq, &mid, topic, (int)len, payload, qos, false);
	if (rc == MOSQ_ERR_SUCCESS && qos > 0) {
		f->qos1[(uint16_t)mid] = 1;
		f->in_flight++;
	}
	pthread_mutex_unlock(&f->win_lock);
	return rc == MOSQ_ERR_SUCCESS;
}

static int mosq_start(struct floor *f)
{
	mosquitto_lib_init();
	f->qos1 = calloc(65536, 1);
	pthread_mutex_init(&f->win_lock, NULL);
	pthread_cond_init(&f->win_room, NULL);
	f->mosq = mosquitto_new("rcs-mqttfloor", false, f);
	if (f->qos1 == NULL || f->mosq == NULL)
		return -1;
	mosquitto_int_option(f->mosq, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
	/* our window bounds what is in flight; the library's own limit stays above it */
	mosquitto_max_inflight_messages_set(f->mosq, (unsigned)f->window * 2);
	mosquitto_connect_callback_set(f->mosq, mosq_on_connect);
	mosquitto_subscribe_callback_set(f->mosq, mosq_on_subscribe);
	mosquitto_message_callback_set(f->mosq, mosq_on_message);
	mosquitto_publish_callback_set(f->mosq, mosq_on_publish);
	{
		char host[64];
		int port = 0;

		int rc;

		if (sscanf(f->url, "tcp://%63[^:]:%d", host, &port) != 2)
			return -1;
		rc = mosquitto_connect(f->mosq, host, port, 20);
		if (rc != MOSQ_ERR_SUCCESS) {
			fprintf(stderr, "mqttfloor: %s\n", mosquitto_strerror(rc));
			return -1;
		}
	}
	return mosquitto_loop_start(f->mosq) == MOSQ_ERR_SUCCESS ? 0 : -1;
}

static void mosq_stop(struct floor *f)
{
	if (f->mosq) {
		mosquitto_disconnect(f->mosq);
		mosquitto_loop_stop(f->mosq, false);
		mosquitto_destroy(f->mosq);
	}
	free(f->qos1);
	mosquitto_lib_cleanup();
}
#endif

/* What the broker acknowledged so far (QoS 1 publishes). */
static uint64_t floor_acked(struct floor *f)
{
#ifdef FLOOR_WITH_MOSQUITTO
	if (f->use_mosquitto) {
		uint64_t n;

		pthread_mutex_lock(&f->win_lock);
		n = f->acked;
		pthread_mutex_unlock(&f->win_lock);
		return n;
	}
#endif
	return mqttc_delivered(f->mq);
}

/* Waits up to ms for an acknowledgement past seen. */
static void floor_wait_acked(struct floor *f, uint64_t seen, long ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_nsec += ms * 1000000L;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
#ifdef FLOOR_WITH_MOSQUITTO
	if (f->use_mosquitto) {
		struct timespec rt;

		/* win_room waits on the realtime clock (the default condition attribute) */
		clock_gettime(CLOCK_REALTIME, &rt);
		rt.tv_nsec += ms * 1000000L;
		rt.tv_sec += rt.tv_nsec / 1000000000L;
		rt.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&f->win_lock);
		while (f->acked == seen &&
		       pthread_cond_timedwait(&f->win_room, &f->win_lock, &rt) == 0)
			;
		pthread_mutex_unlock(&f->win_lock);
		return;
	}
#endif
	mqttc_wait_delivered(f->mq, seen, &dl);
}

/* A publish through the window: on RCS_ERR_FULL, wait for an acknowledgement and again. */
static bool floor_publish(struct floor *f, const char *topic, const char *payload, size_t len,
			  int qos)
{
	double give_up = floor_now() + f->timeout_s;

#ifdef FLOOR_WITH_MOSQUITTO
	if (f->use_mosquitto)
		return mosq_publish(f, topic, payload, len, qos);
#endif
	for (;;) {
		uint64_t seen = mqttc_delivered(f->mq);
		enum rcs_err err = mqttc_publish(f->mq, topic, payload, len, qos, false, 0);
		struct timespec dl;

		if (err == RCS_OK)
			return true;
		if ((err != RCS_ERR_FULL && err != RCS_ERR_BUSY) || floor_now() > give_up ||
		    floor_failed(f))
			return false;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += 1;
		if (err == RCS_ERR_FULL)
			mqttc_wait_delivered(f->mq, seen, &dl);
		else
			usleep(10000);
	}
}

static char *floor_payload(int size)
{
	char *p = malloc((size_t)size + 1);

	if (p == NULL)
		return NULL;
	memset(p, 'x', (size_t)size);
	if (size >= 2) {
		p[0] = '{';
		p[size - 1] = '}';
	}
	p[size] = '\0';
	return p;
}

static void *floor_events(void *arg)
{
	struct floor *f = arg;
	char topic[FLOOR_TOPIC];
	char *payload = floor_payload(f->event_size);
	long total = 5L * f->n;

	if (payload == NULL) {
		floor_fail(f);
		return NULL;
	}
	for (long k = 0; k < total; k++) {
		int job;

		pthread_mutex_lock(&f->lock);
		while (f->qhead == f->qtail && !f->failed)
			pthread_cond_wait(&f->more, &f->lock);
		if (f->failed) {
			pthread_mutex_unlock(&f->lock);
			break;
		}
		job = f->queue[f->qhead % f->qcap];
		f->qhead++;
		pthread_mutex_unlock(&f->lock);
		snprintf(topic, sizeof(topic), "rcs/v1/%s/events/jobs/" FLOOR_JOB_FMT, f->root,
			 job);
		if (!floor_publish(f, topic, payload, (size_t)f->event_size, f->events_qos)) {
			fprintf(stderr, "mqttfloor: an event could not be published\n");
			floor_fail(f);
			break;
		}
		pthread_mutex_lock(&f->lock);
		f->events_out++;
		pthread_mutex_unlock(&f->lock);
	}
	/* the mark: its acknowledgement says the events before it were written */
	snprintf(topic, sizeof(topic), "rcs/v1/%s/events/mqttfloor", f->root);
	if (!floor_failed(f) && !floor_publish(f, topic, "{}", 2, 1)) {
		fprintf(stderr, "mqttfloor: the mark could not be published\n");
		floor_fail(f);
	}
	free(payload);
	return NULL;
}

static int floor_idents(struct floor *f, const char *path)
{
	FILE *in = fopen(path, "r");
	char line[256];
	int cap = 1024;

	if (in == NULL)
		return -1;
	f->idents = malloc((size_t)cap * sizeof(*f->idents));
	while (f->idents != NULL && fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		if (f->n == cap) {
			char **grown = realloc(f->idents, (size_t)(cap *= 2) * sizeof(*f->idents));
			if (grown == NULL)
				break;
			f->idents = grown;
		}
		f->idents[f->n] = strdup(line);
		if (f->idents[f->n] == NULL)
			break;
		f->n++;
	}
	fclose(in);
	return f->idents != NULL && f->n > 0 ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: mqttfloor --url tcp://127.0.0.1:P --root UUID --idents FILE\n"
			"                 [--env-size B] [--event-size B] [--events-qos 0|1]\n"
			"                 [--window N] [--timeout S] [--client paho|mosquitto]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct floor f = {
	    .env_size = 700, .event_size = 600, .events_qos = 1, .window = 1000, .timeout_s = 120};
	const char *idfile = NULL;
	struct mqttc_opts o;
	struct mqttc_callbacks cb;
	char topic[FLOOR_TOPIC];
	char *env = NULL;
	pthread_t th;
	bool th_started = false;
	double t0 = 0, t1 = 0, c0 = 0, c1 = 0, deadline;
	uint64_t want_acks;
	int rc = 1;

	if (argc == 2 && !strcmp(argv[1], "--clients")) {
#ifdef FLOOR_WITH_MOSQUITTO
		puts("paho mosquitto");
#else
		puts("paho");
#endif
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (v == NULL)
			usage();
		if (!strcmp(a, "--url"))
			f.url = v;
		else if (!strcmp(a, "--root"))
			f.root = v;
		else if (!strcmp(a, "--idents"))
			idfile = v;
		else if (!strcmp(a, "--env-size"))
			f.env_size = atoi(v);
		else if (!strcmp(a, "--event-size"))
			f.event_size = atoi(v);
		else if (!strcmp(a, "--events-qos"))
			f.events_qos = atoi(v) ? 1 : 0;
		else if (!strcmp(a, "--window"))
			f.window = atoi(v);
		else if (!strcmp(a, "--timeout"))
			f.timeout_s = atoi(v);
		else if (!strcmp(a, "--client") && !strcmp(v, "paho"))
			f.use_mosquitto = false;
#ifdef FLOOR_WITH_MOSQUITTO
		else if (!strcmp(a, "--client") && !strcmp(v, "mosquitto"))
			f.use_mosquitto = true;
#endif
		else
			usage();
		i++;
	}
	if (f.url == NULL || f.root == NULL || idfile == NULL || f.env_size < 2 ||
	    f.event_size < 2 || f.window < 1 || f.timeout_s < 1)
		usage();
	if (floor_idents(&f, idfile) != 0) {
		fprintf(stderr, "mqttfloor: cannot read %s\n", idfile);
		return 2;
	}
	pthread_mutex_init(&f.lock, NULL);
	pthread_cond_init(&f.more, NULL);
	f.qcap = 5L * f.n;
	f.queue = malloc((size_t)f.qcap * sizeof(*f.queue));
	env = floor_payload(f.env_size);
	if (f.queue == NULL || env == NULL)
		goto out;

	if (f.use_mosquitto) {
#ifdef FLOOR_WITH_MOSQUITTO
		if (mosq_start(&f) != 0) {
			fprintf(stderr, "mqttfloor: cannot start libmosquitto's client\n");
			goto out;
		}
#endif
		goto started;
	}
	memset(&o, 0, sizeof(o));
	o.url = f.url;
	o.client_id = "rcs-mqttfloor";
	o.max_inflight = f.window;
	o.backoff_min = 0.2;
	o.backoff_max = 1;
	memset(&cb, 0, sizeof(cb));
	cb.ctx = &f;
	cb.on_connected = on_connected;
	cb.on_message = on_message;
	if (mqttc_start(&o, &cb, &f.mq) != RCS_OK) {
		fprintf(stderr, "mqttfloor: cannot start the client\n");
		goto out;
	}
started:
	deadline = floor_now() + 30;
	while (!atomic_load(&f.subscribed)) {
		if (floor_now() > deadline) {
			fprintf(stderr, "mqttfloor: not subscribed within 30 s\n");
			goto out;
		}
		usleep(10000);
	}

	t0 = floor_now();
	c0 = floor_cpu();
	if (pthread_create(&th, NULL, floor_events, &f) != 0)
		goto out;
	th_started = true;
	for (int i = 0; i < f.n; i++) {
		snprintf(topic, sizeof(topic), "rcs/v1/%s/%s/jobs/" FLOOR_JOB_FMT, f.root,
			 f.idents[i], i);
		if (!floor_publish(&f, topic, env, (size_t)f.env_size, 1)) {
			fprintf(stderr, "mqttfloor: an envelope could not be published\n");
			goto out;
		}
		floor_push(&f, i); /* the send's event (transmited) */
	}
	/* every report in, every event out, and (QoS 1) every publish acknowledged */
	want_acks = (uint64_t)f.n * (f.events_qos ? 6 : 1) + 1; /* and the mark */
	deadline = t0 + f.timeout_s;
	for (;;) {
		bool events_done, failed;
		uint64_t seen = floor_acked(&f);

		pthread_mutex_lock(&f.lock);
		events_done = f.events_out == 5L * f.n;
		failed = f.failed;
		pthread_mutex_unlock(&f.lock);
		if (failed)
			goto out;
		if (events_done && atomic_load(&f.reports) >= 4L * f.n && seen >= want_acks)
			break;
		if (floor_now() > deadline) {
			pthread_mutex_lock(&f.lock);
			fprintf(stderr,
				"mqttfloor: timeout: %ld reports, %ld events published, %llu"
				" publishes acknowledged\n",
				atomic_load(&f.reports), f.events_out, (unsigned long long)seen);
			pthread_mutex_unlock(&f.lock);
			goto out;
		}
		floor_wait_acked(&f, seen, 5);
	}
	t1 = floor_now();
	c1 = floor_cpu();
	printf("{\"mode\":\"mqttfloor\",\"client\":\"%s\",\"devices\":%d,\"events_qos\":%d,"
	       "\"window\":%d,"
	       "\"env_size\":%d,\"event_size\":%d,\"floor_s\":%.4f,\"cpu_s\":%.3f,"
	       "\"cpu_us_per_job\":%.1f,\"reports_rx\":%ld}\n",
	       f.use_mosquitto ? "mosquitto" : "paho", f.n, f.events_qos, f.window, f.env_size,
	       f.event_size, t1 - t0, c1 - c0, (c1 - c0) * 1e6 / f.n, atomic_load(&f.reports));
	fflush(stdout);
	rc = 0;
out:
	if (th_started) {
		floor_fail(&f); /* ends the event thread if it still waits */
		pthread_join(th, NULL);
	}
	mqttc_stop(f.mq, 1000);
#ifdef FLOOR_WITH_MOSQUITTO
	if (f.use_mosquitto)
		mosq_stop(&f);
#endif
	free(env);
	free(f.queue);
	for (int i = 0; i < f.n; i++)
		free(f.idents[i]);
	free(f.idents);
	return rc;
}
