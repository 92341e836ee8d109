/*
 * bridge_events.c - the MQTT bridge's event feed (bridge_int.h; docs/mqtt.md,
 * "Monitoring"): the job and group events of committed changes, queued in the order their
 * changes committed, rendered and published by a thread of their own, off the worker.
 *
 * Threads: any committing thread queues (bridge_event_send), never waiting for the feed;
 * the publisher publishes; the worker asks whether the reports should wait for the feed
 * (bridge_events_behind) and waits for room (bridge_events_wait). All under the lock.
 */
#include "bridge_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "render.h"

#define BRIDGE_EVENTS_MAX    65536 /* events waiting for the publisher; more are dropped */
#define BRIDGE_HELD_LOG_S    10    /* reports held for the events: logged this often at most */
#define BRIDGE_FEED_STUCK_MS 2000  /* ... unless the feed published nothing for this long */
#define BRIDGE_EVENT_MAX     ((size_t)8 << 20) /* bytes of one job record as text */

struct bridge_events {
	const struct bridge_link *link;
	int qos;        /* of the job and group events: 0 or 1 */
	size_t backlog; /* events waiting from which reports wait (bridge_opts) */

	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* events queued, or stop */
	pthread_cond_t room;     /* fewer than backlog events are left */
	unsigned long long done; /* events the publisher is through with */
	bool failing; /* the last one found no room for BRIDGE_FULL_WAIT_MS: none acked */
	struct bridge_event *head, *tail;
	size_t n;                   /* queued or being published */
	unsigned long long dropped; /* events the full queue refused */
	bool waking;                /* stopping: the worker no longer waits for room */
	bool stop;

	/* the worker's: when reports last waited for the events, logged; whether they wait,
	 * and the publisher's progress last seen (bridge_events_behind) */
	time_t held_logged;
	time_t stuck_logged; /* ... and when they went on, the feed being stuck */
	bool held;
	unsigned long long held_done;
	int64_t held_progress; /* CLOCK_MONOTONIC, ms */
	bool holding; /* reports wait now (held, the feed not stuck): bridge_events_holding */
};

/* An event waiting for the commit of the change it reports, then for the publisher: a
 * job's record (rendered by the publisher) or a group's record as text. */
struct bridge_event {
	struct bridge_events *e;
	struct bridge_event *next;
	bool is_job;
	struct job_rec job;
	char topic[PROTO_MAX_TOPIC];
	size_t len;
	char record[];
};

struct bridge_events *bridge_events_new(const struct bridge_link *l, int qos, size_t backlog)
{
	struct bridge_events *e = calloc(1, sizeof(*e));

	if (e == NULL)
		return NULL;
	e->link = l;
	e->qos = qos;
	e->backlog = backlog;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	pthread_cond_init(&e->room, NULL);
	return e;
}

static void bridge_event_free(struct bridge_event *ev)
{
	if (ev->is_job)
		store_job_rec_free(&ev->job);
	free(ev);
}

void bridge_events_free(struct bridge_events *e)
{
	if (e == NULL)
		return;
	while (e->head) {
		struct bridge_event *next = e->head->next;
		bridge_event_free(e->head);
		e->head = next;
	}
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	pthread_cond_destroy(&e->room);
	free(e);
}

/* ---- queued after the commit ---- */

/* After the commit (any thread): queued for the publisher, in commit order. With
 * BRIDGE_EVENTS_MAX events waiting (a broker that stopped acknowledging), the event is
 * dropped and counted: a committing thread (the worker, an API writer) never waits for
 * the monitoring feed. */
static void bridge_event_send(void *arg, bool committed)
{
	struct bridge_event *ev = arg;
	struct bridge_events *e = ev->e;
	unsigned long long dropped = 0;

	if (!committed) {
		bridge_event_free(ev);
		return;
	}
	ev->next = NULL;
	pthread_mutex_lock(&e->lock);
	if (e->n >= BRIDGE_EVENTS_MAX) {
		dropped = ++e->dropped;
	} else {
		if (e->tail)
			e->tail->next = ev;
		else
			e->head = ev;
		e->tail = ev;
		e->n++;
		pthread_cond_signal(&e->cond);
		ev = NULL;
	}
	pthread_mutex_unlock(&e->lock);
	if (ev != NULL) {
		if (dropped == 1 || dropped % 10000 == 0)
			log_warnx("%llu events dropped so far: %d wait for the broker", dropped,
				  BRIDGE_EVENTS_MAX);
		bridge_event_free(ev);
	}
}

/* The event goes out once the change is committed: a rolled-back move is never
 * announced (the move may be part of a caller's transaction). */
void bridge_events_job(struct bridge_events *e, const struct job_rec *job)
{
	struct bridge_event *ev = calloc(1, sizeof(*ev));

	if (ev == NULL)
		return;
	ev->e = e;
	if (store_job_rec_dup(job, &ev->job) != RCS_OK) {
		free(ev);
		return;
	}
	ev->is_job = true;
	proto_topic_make(ev->topic, PROTO_EVENT, job->client_root, NULL, job->ident);
	if (store_after_commit(e->link->st, bridge_event_send, ev) != RCS_OK)
		bridge_event_free(ev);
}

/* A group's status changed. */
void bridge_events_group(struct bridge_events *e, const char *client_root, const char *group_ident,
			 const char *record, size_t len)
{
	struct bridge_event *ev = calloc(1, sizeof(*ev) + len);

	if (ev == NULL)
		return;
	ev->e = e;
	ev->len = len;
	memcpy(ev->record, record, len);
	proto_topic_make(ev->topic, PROTO_GROUP_EVENT, client_root, NULL, group_ident);
	if (store_after_commit(e->link->st, bridge_event_send, ev) != RCS_OK)
		bridge_event_free(ev);
}

/* ---- the publisher ---- */

/* One event out: best effort (events are for monitoring, the API holds the truth), but
 * with wait a full window is waited for rather than the event dropped. RCS_ERR_FULL: no
 * room (with wait: the broker acknowledged nothing for BRIDGE_FULL_WAIT_MS). */
static enum rcs_err bridge_event_publish(struct bridge_events *e, const struct bridge_event *ev,
					 bool wait)
{
	const char *data = ev->record;
	size_t len = ev->len;
	struct render w;
	struct buf rec;
	enum rcs_err err = RCS_OK;

	buf_init(&rec, BRIDGE_EVENT_MAX);
	if (ev->is_job) {
		render_init(&w, &rec);
		render_job(&w, &ev->job);
		if (render_end(&w) != RCS_OK) {
			log_warnx("job %s: no event: its record is too large", ev->job.ident);
			err = RCS_ERR_TOOBIG; /* says nothing of the broker */
			goto out;
		}
		data = rec.data;
		len = rec.len;
	}
	err = wait ? bridge_publish_room(e->link, ev->topic, data, len, e->qos, 0)
		   : mqttc_publish(e->link->mq, ev->topic, data, len, e->qos, false, 0);
	if (err == RCS_OK)
		metrics_mqtt_out();
	else
		log_debug("event %s not published: %s", ev->topic, rcs_strerror(err));
out:
	buf_free(&rec);
	return err;
}

/* The publisher's thread: takes every queued event at once, publishes them in order;
 * at stop, once the queue is empty. An event that waited BRIDGE_FULL_WAIT_MS for room in
 * vain (a broker that acknowledges nothing, or a very slow one) is dropped, and the feed
 * counts as failing until one goes out (bridge_events_behind); while it fails, a stop
 * waits for none of the queued events (2 s each). */
static void *bridge_publisher(void *arg)
{
	struct bridge_events *e = arg;
	bool failing = false, stopping = false;
	unsigned long long unsent = 0;
	time_t said = 0;

	for (;;) {
		struct bridge_event *ev;

		pthread_mutex_lock(&e->lock);
		while (e->head == NULL && !e->stop)
			pthread_cond_wait(&e->cond, &e->lock);
		ev = e->head;
		e->head = e->tail = NULL;
		stopping = e->stop;
		pthread_mutex_unlock(&e->lock);
		if (ev == NULL)
			break; /* stopped, nothing left */
		while (ev) {
			struct bridge_event *next = ev->next;
			enum rcs_err err = bridge_event_publish(e, ev, !(failing && stopping));

			if (err == RCS_ERR_FULL) {
				unsent++;
				if (time(NULL) - said >= BRIDGE_HELD_LOG_S) {
					said = time(NULL);
					log_warnx("events not published so far: %llu (the broker"
						  " acknowledged nothing for %d ms)",
						  unsent, BRIDGE_FULL_WAIT_MS);
				}
			}
			failing = err == RCS_ERR_FULL || (failing && err != RCS_OK);
			bridge_event_free(ev);
			ev = next;
			/* counted out one by one: a worker waiting for room goes on as soon as
			 * there is some (bridge_events_wait) */
			pthread_mutex_lock(&e->lock);
			e->done++;
			e->failing = failing;
			stopping = e->stop;
			if (e->n > 0 && --e->n == e->backlog - 1)
				pthread_cond_broadcast(&e->room);
			pthread_mutex_unlock(&e->lock);
		}
	}
	return NULL;
}

enum rcs_err bridge_events_start(struct bridge_events *e)
{
	if (pthread_create(&e->thread, NULL, bridge_publisher, e) != 0)
		return RCS_ERR_IO;
	e->started = true;
	return RCS_OK;
}

void bridge_events_waking(struct bridge_events *e)
{
	if (e == NULL)
		return;
	pthread_mutex_lock(&e->lock);
	e->waking = true;
	pthread_cond_broadcast(&e->room);
	pthread_mutex_unlock(&e->lock);
}

void bridge_events_stop(struct bridge_events *e)
{
	if (e == NULL)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	if (e->started)
		pthread_join(e->thread, NULL);
}

/* ---- the worker's look at the feed ---- */

/* Whether backlog events wait for the publisher (not when stopping): the worker then
 * leaves the reports queued and sends envelopes only. Reports applied faster than their
 * events go out would hold every event in memory, five job records a job (153 MB at 50,000
 * devices), and drop them at BRIDGE_EVENTS_MAX; held back, the reports wait as the small
 * messages they are. Not while the feed is stuck, the last event having found no room in
 * the window for BRIDGE_FULL_WAIT_MS or the publisher having made no progress for
 * BRIDGE_FEED_STUCK_MS (a broker that takes reports but doesn't acknowledge what the
 * coordinator publishes): the reports go on, and the events wait or are dropped as before. */
bool bridge_events_behind(struct bridge_events *e)
{
	time_t now = time(NULL);
	int64_t now_ms = bridge_now_ms();
	bool behind, say, stuck = false;
	size_t n;

	pthread_mutex_lock(&e->lock);
	n = e->n;
	behind = n >= e->backlog && !e->stop && !e->waking;
	if (behind && (!e->held || e->done != e->held_done)) {
		e->held_done = e->done;
		e->held_progress = now_ms;
	}
	e->held = behind;
	if (behind && (e->failing || now_ms - e->held_progress >= BRIDGE_FEED_STUCK_MS)) {
		behind = false;
		stuck = true;
	}
	e->holding = behind;
	say = behind && now - e->held_logged >= BRIDGE_HELD_LOG_S;
	if (say)
		e->held_logged = now;
	stuck = stuck && now - e->stuck_logged >= BRIDGE_HELD_LOG_S;
	if (stuck)
		e->stuck_logged = now;
	pthread_mutex_unlock(&e->lock);
	if (say)
		log_info("device reports wait for the event feed: %zu events to publish", n);
	if (stuck)
		log_warnx("the event feed is stuck (%zu events to publish, none acknowledged"
			  " lately): device reports no longer wait for it",
			  n);
	return behind;
}

bool bridge_events_holding(struct bridge_events *e)
{
	bool holding;

	pthread_mutex_lock(&e->lock);
	holding = e->holding;
	pthread_mutex_unlock(&e->lock);
	return holding;
}

/* Waits up to ms for the publisher to get below backlog. */
void bridge_events_wait(struct bridge_events *e, int ms)
{
	struct timespec until;

	bridge_deadline(CLOCK_REALTIME, ms, &until); /* room's clock */
	pthread_mutex_lock(&e->lock);
	while (e->n >= e->backlog && !e->stop && !e->waking)
		if (pthread_cond_timedwait(&e->room, &e->lock, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&e->lock);
}
