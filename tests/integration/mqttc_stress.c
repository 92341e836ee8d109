/*
 * mqttc_stress - several threads publish QoS 1 (or 0) messages on one MQTT client (common/mqttc.c)
 * at once, while a second client subscribed to them counts what arrives: every message
 * the publishers were told was queued must arrive. Driven by test_mqttc_concurrency.py
 * against a mosquitto it starts; prints one JSON line and exits 0 when nothing is missing.
 *
 *   mqttc_stress --url tcp://127.0.0.1:PORT [--threads 4] [--messages 5000] [--timeout 60]
 *                [--window 1000] [--qos 0|1|mixed]
 *
 * --qos mixed: even threads publish at QoS 0, odd ones at QoS 1 (the coordinator's events at
 * QoS 0 beside its envelopes).
 *
 * A publisher told RCS_ERR_FULL waits with mqttc_wait_delivered for up to 2 s, as the
 * coordinator does; a wait that ends without room (false) is counted as a stall: the
 * coordinator would have dropped that event. At QoS 0 nothing is acknowledged, so a wait
 * for an acknowledgement that paho's full queue caused would always stall.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "mqttc.h"

#define STRESS_MAX_THREADS 16
#define STRESS_TOPIC       "rcs-stress/"

struct stress {
	const char *url;
	int threads;
	int messages;
	int timeout_s;
	int window; /* the publisher's max_inflight */
	int qos;    /* 0, 1, or 2: mixed */
	struct mqttc *pub, *sub;
	atomic_bool pub_up, sub_up, subscribed;
	atomic_int received, duplicates, refused, stalls;
	atomic_uchar *seen; /* threads x messages */
};

static void on_pub_connected(void *ctx, bool session_present)
{
	struct stress *s = ctx;

	(void)session_present;
	atomic_store(&s->pub_up, true);
}

static void on_sub_done(void *ctx, bool ok)
{
	struct stress *s = ctx;

	atomic_store(&s->subscribed, ok);
}

static void on_sub_connected(void *ctx, bool session_present)
{
	struct stress *s = ctx;
	const char *filter = STRESS_TOPIC "#";

	(void)session_present;
	atomic_store(&s->sub_up, true);
	if (mqttc_subscribe_cb(s->sub, &filter, 1, on_sub_done, s) != RCS_OK)
		fprintf(stderr, "mqttc_stress: cannot subscribe\n");
}

static bool on_sub_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct stress *s = ctx;
	char text[64];
	int t, i;

	(void)topic;
	if (len >= sizeof(text))
		return true;
	memcpy(text, payload, len);
	text[len] = '\0';
	if (sscanf(text, "%d %d", &t, &i) != 2 || t < 0 || t >= s->threads || i < 0 ||
	    i >= s->messages)
		return true;
	if (atomic_fetch_add(&s->seen[(size_t)t * (size_t)s->messages + (size_t)i], 1) == 0)
		atomic_fetch_add(&s->received, 1);
	else
		atomic_fetch_add(&s->duplicates, 1);
	return true;
}

struct stress_thread {
	struct stress *s;
	int n;
	pthread_t tid;
};

static void *stress_publish(void *arg)
{
	struct stress_thread *th = arg;
	struct stress *s = th->s;
	char topic[64], payload[64];

	snprintf(topic, sizeof(topic), STRESS_TOPIC "%d", th->n);
	for (int i = 0; i < s->messages; i++) {
		int len = snprintf(payload, sizeof(payload), "%d %d", th->n, i);

		for (;;) {
			uint64_t seen = mqttc_delivered(s->pub);
			enum rcs_err err =
			    mqttc_publish(s->pub, topic, payload, (size_t)len,
					  s->qos == 2 ? th->n % 2 : s->qos, false, 0);
			struct timespec deadline;

			if (err == RCS_OK)
				break;
			if (err != RCS_ERR_FULL) {
				atomic_fetch_add(&s->refused, 1);
				break;
			}
			clock_gettime(CLOCK_MONOTONIC, &deadline);
			deadline.tv_sec += 2;
			if (!mqttc_wait_delivered(s->pub, seen, &deadline))
				atomic_fetch_add(&s->stalls, 1);
		}
	}
	return NULL;
}

static bool stress_wait(atomic_bool *flag, int seconds)
{
	for (int i = 0; i < seconds * 100 && !atomic_load(flag); i++)
		usleep(10000);
	return atomic_load(flag);
}

int main(int argc, char **argv)
{
	struct stress s = {
	    .threads = 4, .messages = 5000, .timeout_s = 60, .window = 1000, .qos = 1};
	struct stress_thread th[STRESS_MAX_THREADS];
	struct mqttc_opts po, so;
	struct mqttc_callbacks pcb, scb;
	struct timespec t0, t1;
	int total, rc = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--url") == 0)
			s.url = argv[i + 1];
		else if (strcmp(argv[i], "--threads") == 0)
			s.threads = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--messages") == 0)
			s.messages = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--timeout") == 0)
			s.timeout_s = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--window") == 0)
			s.window = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--qos") == 0)
			s.qos = strcmp(argv[i + 1], "mixed") == 0 ? 2 : atoi(argv[i + 1]);
	}
	if (s.url == NULL || s.threads < 1 || s.threads > STRESS_MAX_THREADS || s.messages < 1 ||
	    s.messages > 1000000 || s.timeout_s < 1 || s.window < 1 || s.window > 65535 ||
	    s.qos < 0 || s.qos > 2) {
		fprintf(stderr,
			"usage: mqttc_stress --url URL [--threads 1..%d] [--messages N]"
			" [--timeout S] [--window 1..65535] [--qos 0|1|mixed]\n",
			STRESS_MAX_THREADS);
		return 2;
	}
	log_init("mqttc_stress", LOG_LVL_WARN);
	total = s.threads * s.messages;
	s.seen = calloc((size_t)total, sizeof(*s.seen));
	if (s.seen == NULL)
		return 1;

	memset(&so, 0, sizeof(so));
	so.url = s.url;
	so.client_id = "rcs-stress-sub";
	so.max_inflight = 1000;
	so.nodelay = true;
	memset(&scb, 0, sizeof(scb));
	scb.ctx = &s;
	scb.on_connected = on_sub_connected;
	scb.on_message = on_sub_message;
	if (mqttc_start(&so, &scb, &s.sub) != RCS_OK || !stress_wait(&s.subscribed, 20)) {
		fprintf(stderr, "mqttc_stress: the subscriber did not subscribe\n");
		goto out;
	}
	po = so;
	po.client_id = "rcs-stress-pub";
	po.max_inflight = s.window;
	memset(&pcb, 0, sizeof(pcb));
	pcb.ctx = &s;
	pcb.on_connected = on_pub_connected;
	if (mqttc_start(&po, &pcb, &s.pub) != RCS_OK || !stress_wait(&s.pub_up, 20)) {
		fprintf(stderr, "mqttc_stress: the publisher did not connect\n");
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int t = 0; t < s.threads; t++) {
		th[t].s = &s;
		th[t].n = t;
		if (pthread_create(&th[t].tid, NULL, stress_publish, &th[t]) != 0) {
			fprintf(stderr, "mqttc_stress: pthread_create\n");
			exit(1);
		}
	}
	for (int t = 0; t < s.threads; t++)
		pthread_join(th[t].tid, NULL);
	for (int i = 0; i < s.timeout_s * 100 && atomic_load(&s.received) < total; i++)
		usleep(10000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("{\"window\": %d, \"qos\": %d, \"seconds\": %.2f, \"threads\": %d, "
	       "\"published\": %d, \"refused\": %d, \"stalls\": %d, \"acknowledged\": %llu,"
	       " \"received\": %d, \"duplicates\": %d, \"missing\": %d}\n",
	       s.window, s.qos,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, s.threads,
	       total - atomic_load(&s.refused), atomic_load(&s.refused), atomic_load(&s.stalls),
	       (unsigned long long)mqttc_delivered(s.pub), atomic_load(&s.received),
	       atomic_load(&s.duplicates), total - atomic_load(&s.received));
	fflush(stdout);
	rc = atomic_load(&s.received) == total && atomic_load(&s.refused) == 0 ? 0 : 1;
out:
	mqttc_stop(s.pub, 2000);
	mqttc_stop(s.sub, 2000);
	free(s.seen);
	return rc;
}
