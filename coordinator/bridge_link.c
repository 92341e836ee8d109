/*
 * bridge_link.c - what every part of the MQTT bridge holds (bridge_int.h): the worker's
 * wake-up, publishing at the broker's pace, lists of idents.
 */
#include "bridge_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

void bridge_kick(const struct bridge_link *l)
{
	uint64_t one = 1;

	if (write(l->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("eventfd");
}

void bridge_sleep(const struct bridge_link *l, int ms)
{
	struct pollfd pfd = {l->efd, POLLIN, 0};

	if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
		log_warn("poll");
	if (pfd.revents & POLLIN) {
		uint64_t v;
		if (read(l->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			log_warn("eventfd");
	}
}

int64_t bridge_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void bridge_deadline(clockid_t c, int ms, struct timespec *out)
{
	clock_gettime(c, out);
	out->tv_sec += ms / 1000;
	out->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (out->tv_nsec >= 1000000000L) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000L;
	}
}

/* What is sent to thousands of devices goes out at the broker's pace: while the window is
 * full, paho's threads take the broker's acknowledgements, and each one makes room. While
 * paho's queue of publishes is full (QoS 0 events in a burst), tries again every few
 * milliseconds, for as long (mqttc_wait_delivered). */
enum rcs_err bridge_publish_room(const struct bridge_link *l, const char *topic,
				 const void *payload, size_t len, int qos, uint64_t tag)
{
	uint64_t seen = mqttc_delivered(l->mq);
	enum rcs_err err = mqttc_publish(l->mq, topic, payload, len, qos, false, tag);
	struct timespec deadline;

	if (err != RCS_ERR_FULL)
		return err;
	bridge_deadline(CLOCK_MONOTONIC, BRIDGE_FULL_WAIT_MS, &deadline);
	while (err == RCS_ERR_FULL && mqttc_wait_delivered(l->mq, seen, &deadline)) {
		seen = mqttc_delivered(l->mq);
		err = mqttc_publish(l->mq, topic, payload, len, qos, false, tag);
	}
	return err;
}

/* ---- lists of idents ---- */

bool bridge_idents_add(struct bridge_idents *l, const char *ident)
{
	if (l->ids.n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char(*v)[UUID_STR_LEN] = realloc(l->ids.v, cap * sizeof(*v));

		if (v == NULL)
			return false;
		l->ids.v = v;
		l->cap = cap;
	}
	snprintf(l->ids.v[l->ids.n], sizeof(l->ids.v[l->ids.n]), "%s", ident);
	l->ids.n++;
	return true;
}

void bridge_idents_clear(struct bridge_idents *l)
{
	l->ids.n = 0;
}

void bridge_idents_free(struct bridge_idents *l)
{
	store_idents_free(&l->ids);
	l->cap = 0;
}
