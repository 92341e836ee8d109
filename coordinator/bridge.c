/*
 * bridge.c - the coordinator's MQTT transport (mqtt_bridge.h): its life, its worker,
 * paho's callbacks, the lifecycle's hooks and the scheduler's transport. The work itself
 * is done by the parts of bridge_int.h, each owning its state.
 *
 * Threads: paho's (callbacks: queue what arrives, never touch storage), the
 * HTTP workers (hooks: a single job is published on the creating request,
 * everything else is queued), the scheduler's (scheduler.c: it says when due
 * jobs and re-sends go out, and the worker sends them), the event publisher
 * (bridge_events.c), and one worker here that applies inbound messages in
 * batched transactions and publishes queued jobs. The worker sleeps on an
 * eventfd until work arrives: nothing polls storage in a loop.
 */
#include "bridge_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "store_queues.h"

#define BRIDGE_APPLY_ROUND    4  /* batches of reports a round applies at most */
#define BRIDGE_EVENTS_WAIT_MS 20 /* events behind (events_backlog): the worker looks again */

struct bridge {
	struct bridge_link link; /* the parts' */
	struct lifecycle_hooks hooks;
	size_t max_payload; /* larger messages are logged and dropped */

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* what the worker was asked for */
	bool stop;
	bool resync; /* (re)connected: catch up with everything due */
	bool due;    /* the scheduler: send the pending jobs whose time came */
	bool sweep;  /* the scheduler: re-send the jobs without news */

	struct bridge_send *send;
	struct bridge_events *events;
	struct bridge_recover *recover;
	struct bridge_subs *subs;
	struct bridge_apply *apply;
};

/* ---- lifecycle hooks ---- */

static void hook_job_due(void *ctx, const char *ident)
{
	struct bridge *b = ctx;
	enum rcs_err err = bridge_publish_job(b->send, ident);

	if (err != RCS_OK && err != RCS_ERR_BUSY)
		log_warnx("job %s: not sent: %s", ident, rcs_strerror(err));
}

static void hook_jobs_due(void *ctx, const struct job_new *jobs, size_t n)
{
	struct bridge *b = ctx;

	bridge_send_queue(b->send, jobs, n);
}

static void hook_job_cancelled(void *ctx, const struct job_rec *job)
{
	struct bridge *b = ctx;

	bridge_send_cancel(b->send, job);
}

static void hook_job_changed(void *ctx, const struct job_rec *job)
{
	struct bridge *b = ctx;

	bridge_events_job(b->events, job);
}

static void hook_group_changed(void *ctx, const char *client_root, const char *group_ident,
			       const char *record, size_t len)
{
	struct bridge *b = ctx;

	bridge_events_group(b->events, client_root, group_ident, record, len);
}

/* ---- MQTT callbacks (paho's threads) ---- */

static void on_connected(void *ctx, bool session_present)
{
	struct bridge *b = ctx;

	/* subscribe every time, session or not: cheap, right after a broker reset, and after
	 * a failover to a broker that never saw this client */
	(void)session_present;
	metrics_mqtt_broker(mqttc_server(b->link.mq));
	bridge_reports_subscribe(b->subs);
	pthread_mutex_lock(&b->lock);
	b->resync = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(&b->link);
}

static void on_lost(void *ctx)
{
	struct bridge *b = ctx;

	bridge_subs_lost(b->subs);
	metrics_mqtt_broker(NULL);
}

static bool on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct bridge *b = ctx;
	struct proto_topic t;

	metrics_mqtt_in();
	if (bridge_probe_message(b->subs, topic, payload, len))
		return true;
	if (proto_topic_parse(topic, &t) != RCS_OK ||
	    (t.kind != PROTO_STATUS && t.kind != PROTO_STATE)) {
		log_warnx("dropped a message on unexpected topic '%.160s'", topic);
		return true;
	}
	if (len > b->max_payload) {
		log_warnx("dropped a %zu-byte message on %s (limit %zu)", len, topic,
			  b->max_payload);
		return true;
	}
	return bridge_apply_queue(b->apply, &t, payload, len);
}

/* paho's thread: the broker acknowledged (ok) an envelope; the worker ends its claim. */
static void on_published(void *ctx, uint64_t tag, bool ok)
{
	struct bridge *b = ctx;

	bridge_send_acked(b->send, tag, ok);
}

/* ---- the scheduler's transport (scheduler.c) ---- */

static bool tr_ready(void *ctx)
{
	struct bridge *b = ctx;

	return mqttc_connected(b->link.mq);
}

static bool tr_reports_held(void *ctx)
{
	struct bridge *b = ctx;

	return bridge_events_holding(b->events);
}

static void tr_send_due(void *ctx, int64_t now)
{
	struct bridge *b = ctx;

	(void)now; /* the worker reads the clock when it sends */
	pthread_mutex_lock(&b->lock);
	b->due = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(&b->link);
}

static void tr_resend(void *ctx, int64_t now)
{
	struct bridge *b = ctx;

	(void)now;
	pthread_mutex_lock(&b->lock);
	b->sweep = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(&b->link);
}

void bridge_transport(struct bridge *b, struct sched_transport *out)
{
	memset(out, 0, sizeof(*out));
	out->ctx = b;
	out->ready = tr_ready;
	out->reports_held = tr_reports_held;
	out->send_due = tr_send_due;
	out->resend = tr_resend;
	out->resend_every = bridge_send_sweep_every(b->send);
}

/* ---- the worker ---- */

/* What the worker was asked for since its last round. */
struct bridge_asked {
	bool stop, resync, due, sweep;
};

static struct bridge_asked bridge_take_asked(struct bridge *b)
{
	struct bridge_asked a;

	pthread_mutex_lock(&b->lock);
	a.stop = b->stop;
	a.resync = b->resync;
	a.due = b->due;
	a.sweep = b->sweep;
	b->resync = b->due = b->sweep = false;
	pthread_mutex_unlock(&b->lock);
	return a;
}

/* The sooner of two waits (-1: none). */
static int bridge_sooner(int a_ms, int b_ms)
{
	if (a_ms < 0)
		return b_ms;
	if (b_ms < 0)
		return a_ms;
	return a_ms < b_ms ? a_ms : b_ms;
}

/* The sends a (re)connect and the scheduler asked for, then the recovery's page; returns
 * wait_ms, or sooner for the recovery. */
static int bridge_asked_sends(struct bridge *b, const struct bridge_asked *a, int64_t now,
			      int wait_ms)
{
	struct mqttc *mq = b->link.mq;

	if (a->resync && mqttc_connected(mq))
		bridge_catch_up(b->send, NULL, now);
	else if (a->due && mqttc_connected(mq))
		bridge_send_ready(b->send, NULL, now);
	if (a->sweep && mqttc_connected(mq)) {
		size_t waiting = bridge_apply_waiting(b->apply);

		bridge_resend_stale(b->send, now, waiting);
		bridge_resend_unacked(b->send, now, waiting);
	}
	/* every second on a shared database: a coordinator whose signs of life lapsed */
	if (a->due && mqttc_connected(mq))
		bridge_recover_lapsed(b->recover, now, bridge_subs_active(b->subs));
	return bridge_sooner(wait_ms, bridge_recover_step(b->recover, now));
}

/* Sleeps until new work, or wait_ms (-1: no limit), unless some is there already; while
 * the events are behind, waits for room among them (or other work). */
static void bridge_idle(struct bridge *b, bool behind, int wait_ms)
{
	size_t n;
	bool asked;

	pthread_mutex_lock(&b->lock);
	asked = b->due || b->sweep || b->resync || b->stop;
	pthread_mutex_unlock(&b->lock);
	n = (behind ? 0 : bridge_apply_queued(b->apply)) + bridge_send_waiting(b->send) +
	    (asked ? 1 : 0);
	if (n > 0 || wait_ms == 0)
		return;
	if (behind)
		bridge_events_wait(b->events, BRIDGE_EVENTS_WAIT_MS);
	else
		bridge_sleep(&b->link, wait_ms);
}

static void *bridge_worker(void *arg)
{
	struct bridge *b = arg;

	for (;;) {
		int64_t now = (int64_t)time(NULL);
		int wait_ms = bridge_reports_step(b->subs); /* -1: nothing to wait for there */
		/* reports wait for the event feed, but not once 100,000 are queued: a slow feed
		 * would keep them in memory without end (docs/coordinator.md, "Bulk sends") */
		bool behind = bridge_events_behind(b->events) && !bridge_apply_pressed(b->apply);
		struct bridge_asked asked = bridge_take_asked(b);

		/* reports wait while the events are behind; while a bulk send goes out, its
		 * devices answer each envelope with several reports: a round applies up to
		 * BRIDGE_APPLY_ROUND batches of them, so that they keep pace with its sends */
		for (int i = 0; !behind && i < BRIDGE_APPLY_ROUND; i++) {
			bridge_apply_step(b->apply);
			if (!bridge_apply_more(b->apply))
				break;
			behind = bridge_events_behind(b->events) && !bridge_apply_pressed(b->apply);
		}
		/* after the reports: a job a report moved on has no claim left to end */
		bridge_unclaim(b->send);
		bridge_send_queued(b->send);
		wait_ms = bridge_asked_sends(b, &asked, now, wait_ms);
		bridge_send_retry(b->send);
		if (asked.stop) {
			/* every report paho acknowledged is applied before the worker ends; those
			 * held elsewhere are tried again a little later */
			if (bridge_apply_waiting(b->apply) == 0)
				break;
			if (bridge_apply_queued(b->apply) == 0)
				bridge_sleep(&b->link, bridge_apply_wait_ms(b->apply));
			continue;
		}
		/* reports whose jobs another coordinator held: the next round soon */
		if (!behind)
			wait_ms = bridge_sooner(wait_ms, bridge_apply_wait_ms(b->apply));
		bridge_idle(b, behind, wait_ms);
	}
	return NULL;
}

/* ---- life ---- */

/* The parts, each with what it needs of opts. */
static enum rcs_err bridge_parts_new(struct bridge *b, const struct bridge_opts *opts)
{
	b->send = bridge_send_new(&b->link, opts->resend_after > 0 ? opts->resend_after : 60,
				  opts->resend_unacked_after);
	b->events = bridge_events_new(&b->link, opts->events_qos == 0 ? 0 : 1,
				      opts->events_backlog > 0 ? opts->events_backlog : 8192);
	if (b->send == NULL || b->events == NULL)
		return RCS_ERR_NOMEM;
	b->recover = bridge_recover_new(&b->link, b->send, opts->node_died);
	b->apply = bridge_apply_new(&b->link, b->send);
	if (b->recover == NULL || b->apply == NULL)
		return RCS_ERR_NOMEM;
	b->subs = bridge_subs_new(&b->link, b->recover, opts);
	return b->subs ? RCS_OK : RCS_ERR_NOMEM;
}

enum rcs_err bridge_start(const struct bridge_opts *opts, struct store *st, struct lifecycle *lc,
			  struct bridge **out)
{
	struct mqttc_callbacks cb;
	struct bridge *b = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		goto out;
	pthread_mutex_init(&b->lock, NULL);
	b->link.efd = -1;
	b->link.st = st;
	b->link.lc = lc;
	b->link.claims = store_shared(st);
	b->link.tokens = opts->tokens;
	b->max_payload = opts->max_payload ? opts->max_payload : PROTO_MAX_PAYLOAD;
	if (opts->shared == BRIDGE_SHARED_YES && !opts->stable_client_id)
		log_warnx("--mqtt-shared-subscriptions yes with a client id that changes at every"
			  " start: the session of a coordinator that died keeps taking its share"
			  " of the reports (give --node-id)");
	err = bridge_parts_new(b, opts);
	if (err != RCS_OK)
		goto out;
	b->link.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (b->link.efd < 0) {
		log_warn("eventfd");
		err = RCS_ERR_IO;
		goto out;
	}
	b->hooks.ctx = b;
	b->hooks.job_due = hook_job_due;
	b->hooks.jobs_due = hook_jobs_due;
	b->hooks.job_cancelled = hook_job_cancelled;
	b->hooks.job_changed = hook_job_changed;
	b->hooks.group_changed = hook_group_changed;
	memset(&cb, 0, sizeof(cb));
	cb.ctx = b;
	cb.on_connected = on_connected;
	cb.on_lost = on_lost;
	cb.on_message = on_message;
	cb.on_published = on_published;
	err = mqttc_start(&opts->mqtt, &cb, &b->link.mq);
	if (err != RCS_OK)
		goto out;
	err = bridge_events_start(b->events);
	if (err != RCS_OK)
		goto out;
	if (pthread_create(&b->thread, NULL, bridge_worker, b) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	b->thread_started = true;
	lc->hooks = &b->hooks;
	*out = b;
	b = NULL;
	err = RCS_OK;
out:
	bridge_stop(b);
	return err;
}

bool bridge_connected(struct bridge *b)
{
	return mqttc_up(b->link.mq);
}

const char *bridge_broker(struct bridge *b)
{
	return mqttc_server(b->link.mq);
}

bool bridge_shared_active(struct bridge *b)
{
	return bridge_subs_active(b->subs);
}

void bridge_stop(struct bridge *b)
{
	if (b == NULL)
		return;
	/* disconnected first: paho acknowledged every report it handed over, so the worker
	 * applies all of them (and ends the claims of the envelopes acknowledged) before it
	 * stops, and none arrives after it */
	mqttc_disconnect(b->link.mq, 2000);
	pthread_mutex_lock(&b->lock);
	b->stop = true;
	pthread_mutex_unlock(&b->lock);
	/* a worker waiting for the publisher goes on to its last round at once */
	bridge_events_waking(b->events);
	if (b->thread_started) {
		bridge_kick(&b->link);
		pthread_join(b->thread, NULL);
	}
	/* only now: the worker's last round moves jobs, and the lifecycle reads its hooks
	 * (the API and the scheduler, the other users, stopped before) */
	if (b->link.lc && b->link.lc->hooks == &b->hooks)
		b->link.lc->hooks = NULL;
	/* the events of the worker's last round too: nothing queues one after this */
	bridge_events_stop(b->events);
	mqttc_stop(b->link.mq, 2000);
	bridge_events_free(b->events);
	bridge_apply_free(b->apply);
	bridge_subs_free(b->subs);
	bridge_recover_free(b->recover);
	bridge_send_free(b->send);
	if (b->link.efd >= 0)
		close(b->link.efd);
	pthread_mutex_destroy(&b->lock);
	free(b);
}
