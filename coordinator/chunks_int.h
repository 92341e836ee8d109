/*
 * chunks_int.h - the parts of the MQTT chunk server (chunks.h), private to chunks*.c:
 *
 *   chunks.c      life, paho's callbacks (which only queue), the worker, the subscription
 *   chunks_get.c  one get: parsed, checked, admitted, counted; a due chunk read and published
 *
 * Threads: paho's (the callbacks) and the worker, which alone touches storage, the
 * admission (dl_admit.h) and the chunks due.
 */
#ifndef RCS_CHUNKS_INT_H
#define RCS_CHUNKS_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "art_serve.h"
#include "dl_admit.h"
#include "dl_limits.h"
#include "mqtt_bridge.h"
#include "mqttc.h"
#include "store.h"
#include "uuid.h"

#define CHUNKS_MAX_LEN  65536 /* the most a get may ask for */
#define CHUNKS_INBOX    1024  /* gets received, not yet looked at */
#define CHUNKS_DUE      1024  /* chunks admitted, not yet published, of all devices */
#define CHUNKS_SOURCES  8     /* artifacts kept open for the next chunks */
#define CHUNKS_OWNERS   256   /* devices whose owner (plain subscription) is remembered */
#define CHUNKS_OWNER_S  5     /* for this long */
#define CHUNKS_MAX_BODY 256   /* a get's payload */
#define CHUNKS_GROUPS   64    /* groups whose download limits are remembered */
#define CHUNKS_GROUP_S  5     /* for this long */

/* A get received: its topic's parts and its payload. */
struct chunks_get {
	char tenant[UUID_STR_LEN], device[UUID_STR_LEN], sha[65];
	char body[CHUNKS_MAX_BODY + 1];
	size_t len;
};

/* A chunk admitted, due at at_us. */
struct chunks_due {
	bool used;
	struct art_want w; /* its record's strings are freed when it goes */
	long long offset, len;
	int64_t at_us;
	bool grouped; /* holds a place among its group's devices (dl_limits_admit) */
};

/* A group's download limits as read from the store, at read_us. */
struct chunks_group {
	char ident[UUID_STR_LEN];
	struct dl_limit lim;
	int64_t read_us;
};

struct chunks_source {
	char tenant[UUID_STR_LEN], sha[65];
	struct art_source *src;
	int64_t used_us;
};

struct chunks_owner {
	char device[UUID_STR_LEN];
	bool mine;
	int64_t until_us;
};

struct chunks {
	struct store *st;
	struct mqttc *mq;
	struct bridge *bridge;
	struct dl_admit *admit;
	struct dl_limits *dl; /* the groups' limits (chunks_opts) */
	char dir[PATH_MAX];

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* the inbox and what the worker is asked for */
	pthread_cond_t cond;
	bool stop;
	bool connected;           /* a connect the worker has not subscribed on yet */
	struct chunks_get *inbox; /* a ring of CHUNKS_INBOX */
	size_t head, n;
	unsigned long dropped; /* gets dropped, the inbox full */

	/* the worker's */
	int subscribed; /* 0: nothing, 1: plain, 2: shared */
	struct chunks_due due[CHUNKS_DUE];
	size_t ndue;
	struct chunks_source src[CHUNKS_SOURCES];
	struct chunks_owner own[CHUNKS_OWNERS];
	struct chunks_group groups[CHUNKS_GROUPS];
	unsigned char *buf; /* a chunk: CHUNKS_MAX_LEN bytes */
	int64_t logged_us;  /* the last bad get logged */
	unsigned long unlogged;
};

/* ---- chunks_get.c (the worker; the parsers: any thread) ---- */

/* What a get asks for. */
struct chunks_ask {
	char job[UUID_STR_LEN]; /* "" until known */
	long long offset, length;
};

/* rcs/v1/<tenant>/<device>/artifacts/<sha256 hex>/get into g's tenant, device and sha:
 * false for any other topic (the levels UUIDs, the SHA-256 64 lowercase hex). */
bool chunks_topic_parse(const char *topic, struct chunks_get *g);
/* g's payload {"v":1,"job","offset","length"} (length 1..CHUNKS_MAX_LEN) into a: false with
 * why (n bytes), a->job set still when the job was a job ident. */
bool chunks_ask_parse(const struct chunks_get *g, struct chunks_ask *a, char *why, size_t n);

/* CLOCK_MONOTONIC in microseconds. */
int64_t chunks_now_us(void);

/* One get: answered with an error, dropped, or admitted among the chunks due. */
void chunks_get_handle(struct chunks *c, const struct chunks_get *g);
/* Publishes the chunks due by now_us; returns the microseconds until the next (-1: none). */
int64_t chunks_send_due(struct chunks *c, int64_t now_us);
/* Frees the chunks due (given back to their jobs' caps) and the sources. */
void chunks_get_clear(struct chunks *c);

#endif
