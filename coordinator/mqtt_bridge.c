/*
 * mqtt_bridge.c - the coordinator's MQTT transport. See mqtt_bridge.h.
 *
 * Threads: paho's (callbacks: queue what arrives, never touch storage), the
 * HTTP workers (hooks: a single job is published on the creating request,
 * everything else is queued), the scheduler's (scheduler.c: it says when due
 * jobs and re-sends go out, and the worker sends them), and one worker here
 * that applies inbound messages in batched transactions and publishes queued
 * jobs. The worker sleeps on an eventfd until work arrives: nothing polls
 * storage in a loop.
 */
#include "mqtt_bridge.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "log.h"
#include "proto.h"
#include "render.h"
#include "status.h"
#include "store.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "store_queues.h"
#include "store_tasks.h"
#include "uuid.h"

#define BRIDGE_BATCH           1000               /* inbound messages per transaction */
#define BRIDGE_PUBLISH_CHUNK   256                /* envelopes per transaction when sending many */
#define BRIDGE_ENVELOPE_MAX    ((size_t)64 << 20) /* bytes of one envelope's text */
#define BRIDGE_FULL_WAIT_MS    2000               /* longest wait for room in the client's window */
#define BRIDGE_INBOUND_MAX     200000             /* queued inbound messages before back-pressure */
#define BRIDGE_SWEEP_SECONDS   15                 /* re-send sweep period, at most */
#define BRIDGE_RESYNC_LIMIT    5000               /* jobs per query when catching up */
#define BRIDGE_RECOVER_SPAN_S  30    /* a recovery's passes go on this long while jobs are left */
#define BRIDGE_RECOVER_WAKE_MS 1000  /* ... a second apart: the worker wakes for the next */
#define BRIDGE_APPLY_TRIES     5     /* a device message's write, broken off by the database */
#define BRIDGE_ACK_SLOTS       8192  /* envelopes awaiting the broker's ack, by tag (claims) */
#define BRIDGE_EVENTS_MAX      65536 /* events waiting for the publisher; more are dropped */
#define BRIDGE_EVENTS_WAIT_MS  20    /* events behind (events_backlog): the worker looks again */
#define BRIDGE_HELD_LOG_S      10    /* reports held for the events: logged this often at most */
#define BRIDGE_FEED_STUCK_S    2     /* ... unless the feed published nothing for this long */
#define BRIDGE_EVENT_MAX       ((size_t)8 << 20) /* bytes of one job record as text */

/* Status reports through a shared subscription (docs/mqtt.md "Several coordinators") */
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

struct in_msg {
	struct in_msg *next;
	struct proto_topic topic;
	size_t len;
	char payload[];
};

/* A task version as an envelope carries it: the store's snapshot, its JSON members parsed. */
struct bridge_tv {
	struct task_version tv;
	json_object *constants, *variables_info, *signature;
	char *text; /* its members of an envelope (proto_envelope_version_text), once made */
	size_t text_len;
};

struct bridge {
	struct store *st;
	struct lifecycle *lc;
	struct lifecycle_hooks hooks;
	struct mqttc *mq;
	size_t max_payload;
	int64_t resend_after;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	bool stop;
	bool resync; /* (re)connected: catch up with everything due */
	bool due;    /* the scheduler: send the pending jobs whose time came */
	bool sweep;  /* the scheduler: re-send the jobs without news */
	struct in_msg *in_head, *in_tail;
	size_t in_n;
	json_object *out;   /* job idents to publish */
	json_object *retry; /* job idents sent (transmited) whose publish the client refused */
	int efd;            /* eventfd: work arrived */

	/* claims (docs/architecture.md "Claims"), on a shared database only: a job's claim
	 * ends when the broker acknowledged its envelope; each envelope is published with a
	 * tag whose slot names the job until then */
	bool claims;
	uint64_t next_tag;
	struct bridge_ack {
		uint64_t tag; /* 0: free */
		char ident[UUID_STR_LEN];
	} * acks;
	json_object *acked; /* job idents the broker acknowledged: their claims end */

	/* status reports: plain or shared subscription (bridge_reports_*), under lock */
	enum bridge_shared shared_mode;
	bool stable_client_id;
	int events_qos;
	char client_id[128];
	unsigned sub_gen; /* connects so far: an answer to an earlier one's request is ignored */
	enum bridge_probe probe;
	const char *plain_why; /* why PROBE_PLAIN */
	char probe_topic[PROTO_MAX_TOPIC];
	char probe_token[UUID_STR_LEN];
	struct timespec probe_deadline; /* CLOCK_MONOTONIC */
	bool plain_subscribed;          /* on this connection */
	bool shared_active;
	/* recovery of the reports a clean session lost (bridge_recover_step): the in-flight
	 * jobs are sent again, a page at a time, after recover_after in ident order */
	bool recover;
	char recover_after[UUID_STR_LEN];
	int64_t recover_before; /* jobs sent since the recovery began went on this session */
	int64_t recover_until;  /* passes after the first: not after then (Unix s) */
	int64_t recover_next;   /* the next pass: not before then */
	bool recover_again;     /* a pass after the first one runs: said once */
	/* the next take of the shared subscription follows a clean session that was lost (this
	 * node's last run died, or an earlier connection of this run had it): worker-only */
	bool lost_clean;

	/* the event publisher (bridge_publisher): job and group events of committed changes,
	 * in the order their changes committed, rendered and published off the worker */
	pthread_t pub_thread;
	bool pub_started;
	pthread_mutex_t pub_lock;
	pthread_cond_t pub_cond;     /* events queued, or stop */
	pthread_cond_t pub_room;     /* fewer than events_backlog events are left */
	size_t events_backlog;       /* events waiting from which reports wait (bridge_opts) */
	unsigned long long pub_done; /* events the publisher is through with */
	bool pub_failing; /* the last one found no room for BRIDGE_FULL_WAIT_MS: none acked */
	/* the worker's: when reports last waited for the events, logged; whether they wait,
	 * and the publisher's progress last seen (bridge_events_behind) */
	time_t held_logged;
	time_t stuck_logged; /* ... and when they went on, the feed being stuck */
	bool held;
	unsigned long long held_done;
	time_t held_progress;
	struct bridge_event *pub_head, *pub_tail;
	size_t pub_n;                   /* queued or being published */
	unsigned long long pub_dropped; /* events the full queue refused */
	bool pub_waking;                /* stopping: the worker no longer waits for room */
	bool pub_stop;

	/* worker-only: the task version of the last envelope, reused by bulk sends */
	char tv_task[UUID_STR_LEN];
	long long tv_version;
	struct bridge_tv tv;
	bool tv_valid;
};

static void bridge_kick(struct bridge *b)
{
	uint64_t one = 1;

	if (write(b->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("eventfd");
}

/* ---- publishing ---- */

static void bridge_tv_free(struct bridge_tv *t)
{
	store_task_version_free(&t->tv);
	json_object_put(t->constants);
	json_object_put(t->variables_info);
	json_object_put(t->signature);
	t->constants = t->variables_info = t->signature = NULL;
	free(t->text);
	t->text = NULL;
}

/* A task version from the store, its JSON text parsed for the envelope. */
static enum rcs_err bridge_tv_get(struct bridge *b, const char *task, long long version,
				  struct bridge_tv *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_task_version_get(b->st, task, version, &out->tv);
	if (err != RCS_OK)
		return err;
	out->constants = json_tokener_parse(out->tv.constants);
	out->variables_info = json_tokener_parse(out->tv.variables_info);
	if (out->tv.signature)
		out->signature = json_tokener_parse(out->tv.signature);
	if (out->constants == NULL || out->variables_info == NULL ||
	    (out->tv.signature && out->signature == NULL)) {
		bridge_tv_free(out);
		return RCS_ERR_DB;
	}
	return RCS_OK;
}

/* The task version snapshot of a job, cached for consecutive jobs of one task. */
static enum rcs_err bridge_task_version(struct bridge *b, const char *task, long long version,
					struct bridge_tv **out)
{
	enum rcs_err err;

	if (b->tv_valid && b->tv_version == version && strcmp(b->tv_task, task) == 0) {
		*out = &b->tv;
		return RCS_OK;
	}
	if (b->tv_valid)
		bridge_tv_free(&b->tv);
	b->tv_valid = false;
	err = bridge_tv_get(b, task, version, &b->tv);
	if (err != RCS_OK)
		return err;
	snprintf(b->tv_task, sizeof(b->tv_task), "%s", task);
	b->tv_version = version;
	b->tv_valid = true;
	*out = &b->tv;
	return RCS_OK;
}

/* An envelope ready to go out: built and committed, not yet published. */
struct bridge_out {
	char ident[UUID_STR_LEN];
	char topic[PROTO_MAX_TOPIC];
	char *payload; /* malloc'd; NULL: nothing to send */
	size_t len;
};

/*
 * Builds a job's envelope. resend: the job was sent before (re-publish, status
 * unchanged); otherwise it must be pending, for an online device, and is moved
 * to transmited first, so that no report of the device can overtake it once
 * the caller's transaction commits (the caller publishes only after that).
 * tv_cache: may use the worker's cache (worker thread only). o->payload
 * stays NULL when the job is not to be sent (moved on meanwhile, device
 * offline).
 */
static enum rcs_err bridge_prepare_job(struct bridge *b, const char *ident, bool resend,
				       bool tv_cache, int64_t now, bool *undo, struct bridge_out *o)
{
	json_object *vars = NULL;
	struct bridge_tv own, *tv = NULL;
	struct proto_envelope env;
	struct job_rec job;
	struct render w;
	struct buf text;
	bool online = false, have_job = false;
	enum rcs_err err;

	memset(&own, 0, sizeof(own));
	o->payload = NULL;
	snprintf(o->ident, sizeof(o->ident), "%s", ident);
	err = store_job_rec_get(b->st, ident, &job);
	if (err != RCS_OK)
		goto out;
	have_job = true;
	if (resend ? status_is_terminal(job.status) : (job.status != JS_PENDING || job.held))
		goto out; /* moved on meanwhile, or waits for its group's release: nothing to do */
	if (!resend) {
		/* an offline device's job waits pending; it goes out when the device is back */
		err = store_device_presence(b->st, job.client_root, job.entity_ident, &online);
		if (err != RCS_OK || !online)
			goto out;
	}
	if (tv_cache) {
		err = bridge_task_version(b, job.task_ident, job.task_version, &tv);
	} else {
		err = bridge_tv_get(b, job.task_ident, job.task_version, &own);
		tv = &own;
	}
	if (err != RCS_OK)
		goto out;
	if (!resend) {
		/* recorded as sent with the move: should the publish fail, the retry list,
		 * the resync after a reconnect or the stale-job sweep sends it again */
		struct job_move m = {.ident = ident,
				     .to = JS_TRANSMITED,
				     .response = "sent to the device over MQTT",
				     .mark_sent = true,
				     .now = now};
		enum store_move res = STORE_MOVE_DUPLICATE;
		/* undo: in the caller's transaction without a savepoint (SQLite copies each
		 * page a savepoint's statements write), and a move that fails after writing
		 * has the caller roll back (*undo); NULL: a savepoint of its own */
		if (undo == NULL) {
			err = lifecycle_move(b->lc, &m, &res, NULL);
		} else {
			err = lifecycle_move_in_tx(b->lc, &m, &res, NULL);
			if (err != RCS_OK && err != RCS_ERR_NOTFOUND)
				*undo = true;
		}
		if (err != RCS_OK || res != STORE_MOVE_APPLIED)
			goto out; /* someone else moved it (cancel, another node): not sent */
		/* claimed with the move, until the broker acknowledges the envelope: should this
		 * coordinator stop before, another sends it once the lease ends */
		if (b->claims)
			err = store_job_claim(b->st, ident, now);
		if (err != RCS_OK)
			goto out;
	}
	memset(&env, 0, sizeof(env));
	snprintf(env.job, sizeof(env.job), "%s", ident);
	snprintf(env.client_root, sizeof(env.client_root), "%s", job.client_root);
	snprintf(env.entity_ident, sizeof(env.entity_ident), "%s", job.entity_ident);
	snprintf(env.task_ident, sizeof(env.task_ident), "%s", job.task_ident);
	env.task_version = job.task_version;
	env.task_name = job.task_name;
	env.script_name = tv->tv.script_name;
	snprintf(env.script_sha256, sizeof(env.script_sha256), "%s", tv->tv.script_sha256);
	env.script_source = tv->tv.script_src;
	env.script_len = tv->tv.script_len;
	env.constants = tv->constants;
	env.variables_info = tv->variables_info;
	vars = json_tokener_parse(job.variables); /* the store holds what the API checked */
	if (vars == NULL || !json_object_is_type(vars, json_type_object)) {
		log_warnx("job %s: its stored variables are not a JSON object", ident);
		err = RCS_ERR_DB;
		goto out;
	}
	env.signature = tv->signature;
	env.issued_at = now;
	/* a held job's ttl runs from its release (docs/api.md "Rollouts") */
	env.expires_at = job.expires_at
			     ? job.expires_at
			     : store_job_expiry(job.created_at, job.scheduled_time, job.ttl);
	env.timeout = tv->tv.timeout;
	/* what comes from the task version is written once, then copied into each envelope */
	if (tv->text == NULL &&
	    (tv->text = proto_envelope_version_text(&env, &tv->text_len)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	buf_init(&text, BRIDGE_ENVELOPE_MAX);
	render_init(&w, &text);
	render_envelope(&w, &env, tv->text, tv->text_len, job.variables);
	err = render_end(&w);
	if (err != RCS_OK) {
		buf_free(&text);
		goto out;
	}
	o->payload = text.data;
	o->len = text.len;
	proto_topic_make(o->topic, PROTO_JOB, env.client_root, env.entity_ident, ident);
out:
	bridge_tv_free(&own);
	json_object_put(vars);
	if (have_job)
		store_job_rec_free(&job);
	return err;
}

/* The tag of a job's envelope: its slot names the job until the broker's ack (0: no
 * claims to end). */
static uint64_t bridge_tag(struct bridge *b, const char *ident)
{
	uint64_t tag;
	struct bridge_ack *a;

	if (!b->claims)
		return 0;
	pthread_mutex_lock(&b->lock);
	tag = ++b->next_tag;
	a = &b->acks[tag % BRIDGE_ACK_SLOTS];
	a->tag = tag; /* an older one left in the slot: its claim lapses instead */
	snprintf(a->ident, sizeof(a->ident), "%s", ident);
	pthread_mutex_unlock(&b->lock);
	return tag;
}

/* paho's thread: the broker acknowledged (ok) an envelope; the worker ends its claim. */
static void on_published(void *ctx, uint64_t tag, bool ok)
{
	struct bridge *b = ctx;
	struct bridge_ack *a;
	bool kick = false;

	if (tag == 0 || b->acks == NULL)
		return;
	pthread_mutex_lock(&b->lock);
	a = &b->acks[tag % BRIDGE_ACK_SLOTS];
	if (a->tag == tag) {
		if (ok) {
			json_object_array_add(b->acked, json_object_new_string(a->ident));
			kick = true;
		}
		a->tag = 0;
	}
	pthread_mutex_unlock(&b->lock);
	if (kick)
		bridge_kick(b);
}

/*
 * Publishes a prepared envelope. A failure leaves the job transmited: sent
 * again shortly (client queue full: the retry list) or after the next connect.
 */
/* ms from now on clock c. */
static void bridge_deadline(clockid_t c, int ms, struct timespec *out)
{
	clock_gettime(c, out);
	out->tv_sec += ms / 1000;
	out->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (out->tv_nsec >= 1000000000L) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000L;
	}
}

/* Publishes; while the client's window of unacknowledged QoS 1 messages is full, waits for
 * the broker's next acknowledgement (paho's threads take them) and tries again, for up to
 * BRIDGE_FULL_WAIT_MS without one: what is sent to thousands of devices goes out at the
 * broker's pace. While paho's queue of publishes is full (QoS 0 events in a burst), tries
 * again every few milliseconds, for as long (mqttc_wait_delivered). RCS_ERR_FULL when the
 * broker acknowledged nothing, or the queue had no room, for that long. */
static enum rcs_err bridge_publish_room(struct bridge *b, const char *topic, const void *payload,
					size_t len, int qos, uint64_t tag)
{
	uint64_t seen = mqttc_delivered(b->mq);
	enum rcs_err err = mqttc_publish(b->mq, topic, payload, len, qos, false, tag);
	struct timespec deadline;

	if (err != RCS_ERR_FULL)
		return err;
	bridge_deadline(CLOCK_MONOTONIC, BRIDGE_FULL_WAIT_MS, &deadline);
	while (err == RCS_ERR_FULL && mqttc_wait_delivered(b->mq, seen, &deadline)) {
		seen = mqttc_delivered(b->mq);
		err = mqttc_publish(b->mq, topic, payload, len, qos, false, tag);
	}
	return err;
}

/* An envelope: with wait, through bridge_publish_room; without, a full window is not waited
 * for. One the client refused goes to the retry list (a broker that acknowledged nothing
 * for BRIDGE_FULL_WAIT_MS isn't waited for again). */
static enum rcs_err bridge_send_out(struct bridge *b, const struct bridge_out *o, bool wait)
{
	uint64_t tag = bridge_tag(b, o->ident);
	enum rcs_err err = wait ? bridge_publish_room(b, o->topic, o->payload, o->len, 1, tag)
				: mqttc_publish(b->mq, o->topic, o->payload, o->len, 1, false, tag);

	if (err == RCS_OK)
		metrics_mqtt_out();
	if (err != RCS_OK && err != RCS_ERR_BUSY) {
		pthread_mutex_lock(&b->lock);
		json_object_array_add(b->retry, json_object_new_string(o->ident));
		pthread_mutex_unlock(&b->lock);
		bridge_kick(b); /* from an HTTP thread too: the worker takes it */
	}
	return err;
}

/* An envelope waiting for the commit of the transaction that moved its job. */
struct bridge_deferred {
	struct bridge *b;
	struct bridge_out o;
};

static void bridge_send_deferred(void *arg, bool committed)
{
	struct bridge_deferred *d = arg;

	/* rolled back: the job was never sent (or never accepted), and must reach no device */
	if (committed)
		bridge_send_out(d->b, &d->o, true);
	free(d->o.payload);
	free(d);
}

/*
 * Publishes a pending job's envelope (hook_job_due; see bridge_prepare_job).
 * The move is a savepoint of the caller's transaction when there is one (a
 * job created in it), and the envelope goes out once the outermost
 * transaction commits, never before (store_after_commit).
 */
static enum rcs_err bridge_publish_job(struct bridge *b, const char *ident)
{
	struct bridge_deferred *d = NULL;
	int64_t now = (int64_t)time(NULL);
	bool undo = false; /* any error rolls the transaction back here */
	enum rcs_err err, end;

	if (!mqttc_connected(b->mq))
		return RCS_ERR_BUSY; /* stays pending: sent after the next connect */
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return RCS_ERR_NOMEM; /* stays pending, like any job not sent now */
	d->b = b;
	err = store_tx_begin(b->st);
	if (err != RCS_OK)
		goto out;
	err = bridge_prepare_job(b, ident, false, false, now, &undo, &d->o);
	end = store_tx_end(b->st, err == RCS_OK);
	if (err == RCS_OK)
		err = end;
	if (err != RCS_OK || d->o.payload == NULL)
		goto out; /* rolled back, or not to be sent (moved on, device offline) */
	err = store_after_commit(b->st, bridge_send_deferred, d);
	if (err == RCS_OK) {
		d = NULL; /* the action's now */
	} else {
		/* transmited and marked sent: the stale-job sweep sends it again */
		log_warnx("job %s: envelope not published now: %s", ident, rcs_strerror(err));
		err = RCS_OK;
	}
out:
	if (d != NULL)
		free(d->o.payload);
	free(d);
	return err;
}

/* The envelopes of k jobs into outs[] (payload NULL: not to be sent), in the caller's
 * transaction. in_tx: the moves take no savepoint each; returns false when one failed
 * after writing (outs[] then hold nothing): the caller rolls back and calls again with
 * in_tx false, when each move is a savepoint of the transaction. */
static bool bridge_prepare_chunk(struct bridge *b, const char (*ids)[UUID_STR_LEN], size_t k,
				 bool resend, int64_t now, bool in_tx, struct bridge_out *outs)
{
	bool undo = false;

	for (size_t i = 0; i < k && !undo; i++) {
		enum rcs_err err = bridge_prepare_job(b, ids[i], resend, true, now,
						      in_tx ? &undo : NULL, &outs[i]);
		if (err != RCS_OK && !undo)
			log_warnx("job %s: not sent: %s", ids[i], rcs_strerror(err));
	}
	if (undo) {
		for (size_t i = 0; i < k; i++) {
			free(outs[i].payload);
			outs[i].payload = NULL;
		}
	}
	return !undo;
}

/*
 * Publishes many jobs (worker thread), BRIDGE_PUBLISH_CHUNK at a time: one
 * transaction moves a chunk to transmited and records it as sent, and its
 * envelopes go out after that commit (re-sends are counted in a second one).
 */
static void bridge_publish_idents(struct bridge *b, const struct store_idents *idents, bool resend)
{
	size_t n = idents->n;
	struct bridge_out *outs = calloc(BRIDGE_PUBLISH_CHUNK, sizeof(*outs));
	bool connected = true, stalled = false;

	if (outs == NULL) {
		log_warnx("cannot send %zu jobs: out of memory", n);
		return;
	}
	for (size_t first = 0; first < n && connected; first += BRIDGE_PUBLISH_CHUNK) {
		size_t k = n - first < BRIDGE_PUBLISH_CHUNK ? n - first : BRIDGE_PUBLISH_CHUNK;
		int64_t now = (int64_t)time(NULL);
		bool tx;

		if (!mqttc_connected(b->mq))
			break; /* disconnected: the resync after the next connect catches up */
		tx = store_tx_begin(b->st) == RCS_OK;
		if (!bridge_prepare_chunk(b, idents->v + first, k, resend, now, tx, outs)) {
			/* a move failed after writing: the chunk again, each move in a savepoint
			 * of its own, so that the failing one costs only itself */
			log_warnx("a batch of %zu jobs is prepared again job by job", k);
			store_tx_end(b->st, false);
			tx = store_tx_begin(b->st) == RCS_OK;
			bridge_prepare_chunk(b, idents->v + first, k, resend, now, false, outs);
		}
		if (tx && store_tx_end(b->st, true) != RCS_OK) {
			/* nothing of the chunk was committed: its jobs stay pending */
			log_warnx("a batch of %zu jobs could not be stored", k);
			for (size_t i = 0; i < k; i++) {
				free(outs[i].payload);
				outs[i].payload = NULL;
			}
			continue;
		}
		for (size_t i = 0; i < k; i++) {
			if (outs[i].payload == NULL)
				continue;
			enum rcs_err err =
			    connected ? bridge_send_out(b, &outs[i], !stalled) : RCS_ERR_BUSY;

			stalled = stalled || err == RCS_ERR_FULL;
			if (err != RCS_OK) {
				free(outs[i].payload);
				outs[i].payload = NULL;
				/* transmited, not published: the stale-job sweep or the resync
				 * after the next connect sends it again */
				connected = connected && mqttc_connected(b->mq);
			}
		}
		/* first sends were marked sent with their move; re-sends count once out */
		tx = resend && store_tx_begin(b->st) == RCS_OK;
		for (size_t i = 0; i < k; i++) {
			if (outs[i].payload && tx)
				store_job_mark_sent(b->st, outs[i].ident, now);
			free(outs[i].payload);
			outs[i].payload = NULL;
		}
		if (tx)
			store_tx_end(b->st, true);
	}
	free(outs);
}

/* bridge_publish_idents for the worker's queues of idents (a JSON array of strings). */
static void bridge_publish_list(struct bridge *b, json_object *idents, bool resend)
{
	struct store_idents ids = {.v = NULL, .n = 0};
	size_t n = json_object_array_length(idents);

	ids.v = calloc(n ? n : 1, sizeof(*ids.v));
	if (ids.v == NULL) {
		log_warnx("cannot send %zu jobs: out of memory", n);
		return;
	}
	for (size_t i = 0; i < n; i++)
		snprintf(ids.v[i], sizeof(ids.v[i]), "%s",
			 json_object_get_string(json_object_array_get_idx(idents, i)));
	ids.n = n;
	bridge_publish_idents(b, &ids, resend);
	store_idents_free(&ids);
}

/* Publishes the pending jobs that are due, for one device (or all online devices). */
static void bridge_send_ready(struct bridge *b, const char *entity_ident, int64_t now)
{
	struct store_idents ids;
	size_t n;

	do {
		if (store_jobs_ready(b->st, entity_ident, now, BRIDGE_RESYNC_LIMIT, &ids) != RCS_OK)
			return;
		n = ids.n;
		bridge_publish_idents(b, &ids, false);
		store_idents_free(&ids);
	} while (n == BRIDGE_RESYNC_LIMIT && mqttc_connected(b->mq));
	/* the envelopes of a coordinator that stopped before the broker took them */
	if (entity_ident == NULL && b->claims &&
	    store_jobs_orphaned(b->st, now, BRIDGE_RESYNC_LIMIT, &ids) == RCS_OK) {
		if (ids.n > 0)
			log_info("sending %zu jobs again whose sender's claim lapsed", ids.n);
		bridge_publish_idents(b, &ids, true);
		store_idents_free(&ids);
	}
}

/*
 * Catches up with a device (or all devices): re-publishes the jobs sent but
 * not acknowledged (the device dedupes), then sends the pending ones that are
 * due. The unacknowledged are listed first, so a job sent now isn't sent twice.
 */
static void bridge_catch_up(struct bridge *b, const char *entity_ident, int64_t now)
{
	struct store_idents ids;

	/* those sent before this second: one sent since went on the connection there is (the
	 * scheduler's, right after a connect), and is not sent twice */
	if (store_jobs_unacked(b->st, entity_ident, now, BRIDGE_RESYNC_LIMIT * 4, &ids) == RCS_OK) {
		if (ids.n > 0) {
			log_info("re-sending %zu unacknowledged jobs%s%s", ids.n,
				 entity_ident ? " of " : "", entity_ident ? entity_ident : "");
			bridge_publish_idents(b, &ids, true);
		}
		store_idents_free(&ids);
	}
	bridge_send_ready(b, entity_ident, now);
}

/* Re-publishes jobs a device went quiet on (reports may have been dropped by the broker). */
static void bridge_resend_stale(struct bridge *b, int64_t now)
{
	struct store_idents ids;

	if (store_jobs_stale(b->st, now, b->resend_after, BRIDGE_RESYNC_LIMIT, &ids) != RCS_OK)
		return;
	if (ids.n > 0)
		log_info("re-sending %zu jobs without news for %llds or more", ids.n,
			 (long long)b->resend_after);
	bridge_publish_idents(b, &ids, true);
	store_idents_free(&ids);
}

/* ---- lifecycle hooks ---- */

static void hook_job_due(void *ctx, const char *ident)
{
	struct bridge *b = ctx;
	enum rcs_err err = bridge_publish_job(b, ident);

	if (err != RCS_OK && err != RCS_ERR_BUSY)
		log_warnx("job %s: not sent: %s", ident, rcs_strerror(err));
}

static void hook_jobs_due(void *ctx, const struct job_new *jobs, size_t n)
{
	struct bridge *b = ctx;

	pthread_mutex_lock(&b->lock);
	for (size_t i = 0; i < n; i++)
		json_object_array_add(b->out, json_object_new_string(jobs[i].ident));
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
}

static void hook_job_cancelled(void *ctx, const struct job_rec *job)
{
	struct bridge *b = ctx;
	struct proto_cancel c;
	char topic[PROTO_MAX_TOPIC];
	json_object *o;
	const char *payload;
	size_t len;

	memset(&c, 0, sizeof(c));
	snprintf(c.job, sizeof(c.job), "%s", job->ident);
	c.reason = "cancelled through the API";
	o = proto_cancel_encode(&c);
	payload = jsonu_dump(o, &len);
	proto_topic_make(topic, PROTO_CANCEL, job->client_root, job->entity_ident, c.job);
	if (mqttc_publish(b->mq, topic, payload, len, 1, false, 0) == RCS_OK)
		metrics_mqtt_out();
	else
		log_warnx("job %s: cancel not sent (broker unreachable); the device will be told"
			  " when it reports on the job",
			  c.job);
	json_object_put(o);
}

/* An event waiting for the commit of the change it reports, then for the publisher: a
 * job's record (rendered by the publisher) or a group's record as text. */
struct bridge_event {
	struct bridge *b;
	struct bridge_event *next;
	bool is_job;
	struct job_rec job;
	char topic[PROTO_MAX_TOPIC];
	size_t len;
	char record[];
};

static void bridge_event_free(struct bridge_event *ev)
{
	if (ev->is_job)
		store_job_rec_free(&ev->job);
	free(ev);
}

/* After the commit (any thread): queued for the publisher, in commit order. With
 * BRIDGE_EVENTS_MAX events waiting (a broker that stopped acknowledging), the event is
 * dropped and counted: a committing thread (the worker, an API writer) never waits for
 * the monitoring feed. */
static void bridge_event_send(void *arg, bool committed)
{
	struct bridge_event *ev = arg;
	struct bridge *b = ev->b;
	unsigned long long dropped = 0;

	if (!committed) {
		bridge_event_free(ev);
		return;
	}
	ev->next = NULL;
	pthread_mutex_lock(&b->pub_lock);
	if (b->pub_n >= BRIDGE_EVENTS_MAX) {
		dropped = ++b->pub_dropped;
	} else {
		if (b->pub_tail)
			b->pub_tail->next = ev;
		else
			b->pub_head = ev;
		b->pub_tail = ev;
		b->pub_n++;
		pthread_cond_signal(&b->pub_cond);
		ev = NULL;
	}
	pthread_mutex_unlock(&b->pub_lock);
	if (ev != NULL) {
		if (dropped == 1 || dropped % 10000 == 0)
			log_warnx("%llu events dropped so far: %d wait for the broker", dropped,
				  BRIDGE_EVENTS_MAX);
		bridge_event_free(ev);
	}
}

/* One event out: best effort (events are for monitoring, the API holds the truth), but
 * with wait a full window is waited for rather than the event dropped. RCS_ERR_FULL: no
 * room (with wait: the broker acknowledged nothing for BRIDGE_FULL_WAIT_MS). */
static enum rcs_err bridge_event_publish(struct bridge *b, const struct bridge_event *ev, bool wait)
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
	err = wait ? bridge_publish_room(b, ev->topic, data, len, b->events_qos, 0)
		   : mqttc_publish(b->mq, ev->topic, data, len, b->events_qos, false, 0);
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
	struct bridge *b = arg;
	bool failing = false, stopping = false;
	unsigned long long unsent = 0;
	time_t said = 0;

	for (;;) {
		struct bridge_event *ev;

		pthread_mutex_lock(&b->pub_lock);
		while (b->pub_head == NULL && !b->pub_stop)
			pthread_cond_wait(&b->pub_cond, &b->pub_lock);
		ev = b->pub_head;
		b->pub_head = b->pub_tail = NULL;
		stopping = b->pub_stop;
		pthread_mutex_unlock(&b->pub_lock);
		if (ev == NULL)
			break; /* stopped, nothing left */
		while (ev) {
			struct bridge_event *next = ev->next;
			enum rcs_err err = bridge_event_publish(b, ev, !(failing && stopping));

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
			pthread_mutex_lock(&b->pub_lock);
			b->pub_done++;
			b->pub_failing = failing;
			stopping = b->pub_stop;
			if (b->pub_n > 0 && --b->pub_n == b->events_backlog - 1)
				pthread_cond_broadcast(&b->pub_room);
			pthread_mutex_unlock(&b->pub_lock);
		}
	}
	return NULL;
}

/* Whether events_backlog events wait for the publisher (not when stopping): the worker then
 * leaves the reports queued and sends envelopes only. Reports applied faster than their
 * events go out would hold every event in memory, five job records a job (153 MB at 50,000
 * devices), and drop them at BRIDGE_EVENTS_MAX; held back, the reports wait as the small
 * messages they are. Not while the feed is stuck, the last event having found no room in
 * the window for BRIDGE_FULL_WAIT_MS or the publisher having made no progress for
 * BRIDGE_FEED_STUCK_S (a broker that takes reports but doesn't acknowledge what the
 * coordinator publishes): the reports go on, and the events wait or are dropped as before. */
static bool bridge_events_behind(struct bridge *b)
{
	time_t now = time(NULL);
	bool behind, say, stuck = false;
	size_t n;

	pthread_mutex_lock(&b->pub_lock);
	n = b->pub_n;
	behind = n >= b->events_backlog && !b->pub_stop && !b->pub_waking;
	if (behind && (!b->held || b->pub_done != b->held_done)) {
		b->held_done = b->pub_done;
		b->held_progress = now;
	}
	b->held = behind;
	if (behind && (b->pub_failing || now - b->held_progress >= BRIDGE_FEED_STUCK_S)) {
		behind = false;
		stuck = true;
	}
	say = behind && now - b->held_logged >= BRIDGE_HELD_LOG_S;
	if (say)
		b->held_logged = now;
	stuck = stuck && now - b->stuck_logged >= BRIDGE_HELD_LOG_S;
	if (stuck)
		b->stuck_logged = now;
	pthread_mutex_unlock(&b->pub_lock);
	if (say)
		log_info("device reports wait for the event feed: %zu events to publish", n);
	if (stuck)
		log_warnx("the event feed is stuck (%zu events to publish, none acknowledged"
			  " lately): device reports no longer wait for it",
			  n);
	return behind;
}

/* Waits up to ms for the publisher to get below events_backlog. */
static void bridge_events_wait(struct bridge *b, int ms)
{
	struct timespec until;

	bridge_deadline(CLOCK_REALTIME, ms, &until); /* pub_room's clock */
	pthread_mutex_lock(&b->pub_lock);
	while (b->pub_n >= b->events_backlog && !b->pub_stop && !b->pub_waking)
		if (pthread_cond_timedwait(&b->pub_room, &b->pub_lock, &until) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&b->pub_lock);
}

/* The event goes out once the change is committed: a rolled-back move is never
 * announced (the move may be part of a caller's transaction). */
static void hook_job_changed(void *ctx, const struct job_rec *job)
{
	struct bridge *b = ctx;
	struct bridge_event *ev = calloc(1, sizeof(*ev));

	if (ev == NULL)
		return;
	ev->b = b;
	if (store_job_rec_dup(job, &ev->job) != RCS_OK) {
		free(ev);
		return;
	}
	ev->is_job = true;
	proto_topic_make(ev->topic, PROTO_EVENT, job->client_root, NULL, job->ident);
	if (store_after_commit(b->st, bridge_event_send, ev) != RCS_OK)
		bridge_event_free(ev);
}

/* A group's status changed: its event goes out once the change is committed (docs/mqtt.md,
 * "Monitoring"). */
static void hook_group_changed(void *ctx, const char *client_root, const char *group_ident,
			       const char *record, size_t len)
{
	struct bridge *b = ctx;
	struct bridge_event *ev = calloc(1, sizeof(*ev) + len);

	if (ev == NULL)
		return;
	ev->b = b;
	ev->len = len;
	memcpy(ev->record, record, len);
	proto_topic_make(ev->topic, PROTO_GROUP_EVENT, client_root, NULL, group_ident);
	if (store_after_commit(b->st, bridge_event_send, ev) != RCS_OK)
		bridge_event_free(ev);
}

/* ---- status reports: plain or shared subscription ----
 *
 * Device state stays a plain subscription: every coordinator keeps presence. Status reports
 * go to one coordinator of several through $share/rcs-coordinators/... where the broker
 * delivers on it (docs/mqtt.md "Several coordinators"). With auto, after each connect: the
 * plain subscription first (no report is missed meanwhile), then a probe: a QoS 1 message
 * to a topic of this coordinator's own, subscribed to the shared way; when it comes back
 * within BRIDGE_PROBE_MS the reports are subscribed to the shared way and the plain
 * subscription is dropped, else the plain one stays. Every step is a request whose answer
 * comes on paho's threads: they only record it (bridge_sub_ack_done) and wake the worker, which
 * takes the next step (bridge_reports_step).
 */

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

/* An answer awaited: the state it moves from (on the connect it was asked on) and to. */
struct bridge_sub_ack {
	struct bridge *b;
	unsigned gen;
	enum bridge_probe expect, ok, fail;
	const char *why; /* the reason logged when it fails */
};

static void bridge_sub_ack_done(void *ctx, bool ok)
{
	struct bridge_sub_ack *a = ctx;
	struct bridge *b = a->b;

	pthread_mutex_lock(&b->lock);
	if (a->gen == b->sub_gen && b->probe == a->expect) {
		b->probe = ok ? a->ok : a->fail;
		if (!ok)
			b->plain_why = a->why;
	}
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
	free(a);
}

/* Asks for filters (subscribe, or unsubscribe) with its answer moving expect to ok or fail. */
static void bridge_request(struct bridge *b, bool subscribe, const char *filter,
			   enum bridge_probe expect, enum bridge_probe ok, enum bridge_probe fail,
			   const char *why)
{
	struct bridge_sub_ack *a = malloc(sizeof(*a));
	const char *filters[1] = {filter};
	enum rcs_err err = RCS_ERR_NOMEM;

	if (a != NULL) {
		a->b = b;
		pthread_mutex_lock(&b->lock);
		a->gen = b->sub_gen;
		pthread_mutex_unlock(&b->lock);
		a->expect = expect;
		a->ok = ok;
		a->fail = fail;
		a->why = why;
		err = subscribe ? mqttc_subscribe_cb(b->mq, filters, 1, bridge_sub_ack_done, a)
				: mqttc_unsubscribe(b->mq, filters, 1, bridge_sub_ack_done, a);
	}
	if (err == RCS_OK)
		return;
	free(a);
	pthread_mutex_lock(&b->lock);
	if (b->probe == expect) {
		b->probe = fail;
		b->plain_why = why;
	}
	pthread_mutex_unlock(&b->lock);
}

/* on_connected (paho's thread): device state, and the reports as the mode says. */
static void bridge_reports_subscribe(struct bridge *b)
{
	char state[PROTO_MAX_TOPIC], plain[PROTO_MAX_TOPIC], shared[PROTO_MAX_TOPIC + 32];
	const char *filters[2] = {state, plain};
	enum bridge_shared mode = b->shared_mode;

	/* a session left by a coordinator that died would stay in the share group, and take
	 * its share of the reports, until it expires: only a client id that comes back with
	 * the next start (and takes its session over) joins the group on its own */
	if (mode == BRIDGE_SHARED_AUTO && !b->stable_client_id)
		mode = BRIDGE_SHARED_NO;
	/* one coordinator on its own database shares with no one: the persistent session
	 * keeps the reports sent while it is away, and nothing is sent again at a start */
	if (mode == BRIDGE_SHARED_AUTO && !b->claims)
		mode = BRIDGE_SHARED_NO;
	proto_topic_make(state, PROTO_STATE, PROTO_ANY, PROTO_ANY, NULL);
	bridge_filter_plain(plain);
	bridge_filter_shared(shared, sizeof(shared));
	pthread_mutex_lock(&b->lock);
	b->sub_gen++;
	b->shared_active = false;
	b->plain_subscribed = mode != BRIDGE_SHARED_YES;
	b->probe = mode == BRIDGE_SHARED_AUTO  ? PROBE_START
		   : mode == BRIDGE_SHARED_YES ? PROBE_SWITCHING
					       : PROBE_IDLE;
	pthread_mutex_unlock(&b->lock);
	metrics_mqtt_shared(false);
	if (mode == BRIDGE_SHARED_YES) {
		if (mqttc_subscribe(b->mq, filters, 1) != RCS_OK)
			log_warnx("cannot subscribe to device topics");
		bridge_request(b, true, shared, PROBE_SWITCHING, PROBE_SHARED, PROBE_PLAIN,
			       "the broker refused the shared subscription");
	} else if (mqttc_subscribe(b->mq, filters, 2) != RCS_OK) {
		log_warnx("cannot subscribe to device topics");
	}
	if (mode == BRIDGE_SHARED_NO) {
		/* a shared subscription left in the session by an earlier run would split the
		 * reports with the others all the same */
		const char *drop[1] = {shared};

		mqttc_unsubscribe(b->mq, drop, 1, NULL, NULL);
		log_info("status reports: plain subscription %s (%s)", plain,
			 b->shared_mode == BRIDGE_SHARED_NO ? "mqtt_shared_subscriptions no"
			 : !b->claims ? "the database is not shared with other coordinators"
				      : "the client id changes at every start: give --node-id");
	}
	bridge_kick(b);
}

/* on_message: a probe of this coordinator's is consumed here (true), whatever its token. */
static bool bridge_probe_message(struct bridge *b, const char *topic, const void *payload,
				 size_t len)
{
	if (strncmp(topic, BRIDGE_PROBE_PREFIX, strlen(BRIDGE_PROBE_PREFIX)) != 0)
		return false;
	pthread_mutex_lock(&b->lock);
	if (b->probe == PROBE_WAITING && strcmp(topic, b->probe_topic) == 0 &&
	    len == strlen(b->probe_token) && memcmp(payload, b->probe_token, len) == 0)
		b->probe = PROBE_ARRIVED;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
	return true;
}

/* The probe's topic: the client id as its last level when it can be one, else random. */
static void bridge_probe_topic(struct bridge *b, char *out, size_t len)
{
	const char *id = b->client_id;
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

/*
 * What a clean session loses (docs/mqtt.md "Several coordinators"): the reports on their
 * way to a coordinator that died, and those sent while no coordinator was connected. The
 * in-flight jobs are sent again (the agent answers a repeat with the job's current status
 * or final report), claimed like the other re-sends, BRIDGE_RESYNC_LIMIT at a time.
 */
static void bridge_recover_start(struct bridge *b, const char *why)
{
	pthread_mutex_lock(&b->lock);
	b->recover = true;
	b->recover_after[0] = '\0';
	b->recover_before = (int64_t)time(NULL);
	b->recover_until = b->recover_before + BRIDGE_RECOVER_SPAN_S;
	b->recover_next = 0;
	b->recover_again = false;
	pthread_mutex_unlock(&b->lock);
	log_info("sending the in-flight jobs again: %s", why);
}

/* The shared subscription is taken on a clean session: when no other coordinator runs,
 * the reports sent while this one was not connected went nowhere; when this node had a
 * clean session before (its last run died, or the connection of this run that had the
 * subscription was lost), the reports on their way to it went with it. */
static void bridge_recover_on_take(struct bridge *b)
{
	long long others = 0;
	bool lost = b->lost_clean;

	b->lost_clean = true; /* any later take follows the loss of this session */
	if (lost) {
		bridge_recover_start(b, "the reports on their way to this node's previous"
					" clean session were lost with it");
		return;
	}
	if (b->claims && store_nodes_others(b->st, (int64_t)time(NULL), &others) != RCS_OK)
		others = 0;
	if (others == 0)
		bridge_recover_start(b, "no other coordinator took the reports meanwhile");
}

/* Every second on a shared database: another coordinator's sign of life lapsed (it died),
 * and this one removed its row: the reports on their way to it are asked for again. */
static void bridge_recover_lapsed(struct bridge *b, int64_t now)
{
	long long n = 0;
	char why[96];

	if (!b->claims || !bridge_shared_active(b))
		return;
	if (store_nodes_lapsed(b->st, now, &n) != RCS_OK || n == 0)
		return;
	snprintf(why, sizeof(why), "%lld other coordinator%s stopped showing signs of life", n,
		 n == 1 ? "" : "s");
	bridge_recover_start(b, why);
}

/* After a recovery's last page: in-flight jobs it passed over, locked by another
 * coordinator's transaction at that instant (PostgreSQL's SKIP LOCKED) or claimed by one,
 * get another pass a second later, up to BRIDGE_RECOVER_SPAN_S after the start (then the
 * stale-job sweep is left). Those sent again in a pass are not found again: they were sent
 * after `before`. True when another pass is due. */
static bool bridge_recover_again(struct bridge *b, int64_t before, int64_t until, int64_t now)
{
	long long left = 0;
	bool again, say;

	if (now >= until || store_jobs_inflight_left(b->st, before, &left) != RCS_OK || left == 0)
		return false;
	pthread_mutex_lock(&b->lock);
	b->recover_next = now + 1;
	say = !b->recover_again;
	b->recover_again = again = true;
	pthread_mutex_unlock(&b->lock);
	if (say)
		log_info("%lld in-flight jobs were busy elsewhere (locked or claimed by another"
			 " coordinator): passes go on each second for up to %d s",
			 left, BRIDGE_RECOVER_SPAN_S);
	else
		log_debug("another recovery pass: %lld in-flight jobs left", left);
	return again;
}

/* One page of the recovery; true when more are left to send at once. */
static bool bridge_recover_step(struct bridge *b, int64_t now)
{
	struct store_idents ids;
	char after[UUID_STR_LEN];
	int64_t before, until, next;
	bool more = false, at_once = false;

	pthread_mutex_lock(&b->lock);
	more = b->recover;
	before = b->recover_before;
	until = b->recover_until;
	next = b->recover_next;
	snprintf(after, sizeof(after), "%s", b->recover_after);
	pthread_mutex_unlock(&b->lock);
	if (!more || now < next || !mqttc_connected(b->mq))
		return false;
	/* a store error keeps the recovery for a later round (no one else will do it: the
	 * lapsed node's row, the claim on it, is gone) */
	if (store_jobs_inflight(b->st, after, before, now, BRIDGE_RESYNC_LIMIT, &ids) != RCS_OK) {
		more = true;
	} else {
		more = at_once = ids.n == BRIDGE_RESYNC_LIMIT;
		if (ids.n > 0) {
			log_info("re-sending %zu in-flight jobs", ids.n);
			snprintf(after, sizeof(after), "%s", ids.v[ids.n - 1]);
			bridge_publish_idents(b, &ids, true);
		}
		store_idents_free(&ids);
	}
	if (!more && bridge_recover_again(b, before, until, now)) {
		more = true; /* from the first ident again, in a second */
		after[0] = '\0';
	}
	pthread_mutex_lock(&b->lock);
	b->recover = more;
	snprintf(b->recover_after, sizeof(b->recover_after), "%s", after);
	pthread_mutex_unlock(&b->lock);
	return at_once;
}

/* Whether a recovery waits for its next pass (bridge_recover_again). */
static bool bridge_recover_pending(struct bridge *b)
{
	bool pending;

	pthread_mutex_lock(&b->lock);
	pending = b->recover;
	pthread_mutex_unlock(&b->lock);
	return pending;
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

static void bridge_probe_deadline(struct bridge *b)
{
	clock_gettime(CLOCK_MONOTONIC, &b->probe_deadline);
	b->probe_deadline.tv_sec += BRIDGE_PROBE_MS / 1000;
}

/* Under b->lock: whether the connection the step began with is still the one there (a
 * reconnect in between started its own subscriptions: the step's are not for it). */
static bool bridge_same_connect(const struct bridge *b, unsigned gen)
{
	return b->sub_gen == gen;
}

/* The step's new state, unless another connect began meanwhile. */
static bool bridge_probe_set(struct bridge *b, unsigned gen, enum bridge_probe to)
{
	bool same;

	pthread_mutex_lock(&b->lock);
	same = bridge_same_connect(b, gen);
	if (same)
		b->probe = to;
	pthread_mutex_unlock(&b->lock);
	return same;
}

/*
 * The worker's step of the choice (see above). Returns how long the worker may sleep for
 * it: -1 as long as it likes, 0 not at all, else milliseconds (a deadline).
 */
static int bridge_reports_step(struct bridge *b)
{
	char shared[PROTO_MAX_TOPIC + 32], plain[PROTO_MAX_TOPIC], probe[PROTO_MAX_TOPIC + 32];
	enum bridge_probe st;
	const char *why;
	bool plain_subscribed;
	unsigned gen;
	int wait_ms = -1;

	pthread_mutex_lock(&b->lock);
	gen = b->sub_gen;
	st = b->probe;
	why = b->plain_why;
	plain_subscribed = b->plain_subscribed;
	if ((st == PROBE_SUBSCRIBING || st == PROBE_WAITING) &&
	    bridge_ms_until(&b->probe_deadline) == 0) {
		why = b->plain_why = st == PROBE_SUBSCRIBING
					 ? "the broker did not answer the probe's subscription"
					 : "the broker did not deliver the probe on a shared"
					   " subscription within 5 s";
		st = b->probe = PROBE_PLAIN;
	}
	pthread_mutex_unlock(&b->lock);
	if (st == PROBE_IDLE || !mqttc_connected(b->mq))
		return -1; /* a new connect starts again */
	bridge_filter_plain(plain);
	bridge_filter_shared(shared, sizeof(shared));
	snprintf(probe, sizeof(probe), "%s%s", BRIDGE_SHARE_PREFIX, b->probe_topic);
	switch (st) {
	case PROBE_START:
		pthread_mutex_lock(&b->lock);
		bridge_probe_topic(b, b->probe_topic, sizeof(b->probe_topic));
		if (uuid_v7(b->probe_token) != RCS_OK)
			snprintf(b->probe_token, sizeof(b->probe_token), "%u", b->sub_gen);
		b->probe = PROBE_SUBSCRIBING;
		bridge_probe_deadline(b);
		pthread_mutex_unlock(&b->lock);
		snprintf(probe, sizeof(probe), "%s%s", BRIDGE_SHARE_PREFIX, b->probe_topic);
		bridge_request(b, true, probe, PROBE_SUBSCRIBING, PROBE_SUBSCRIBED, PROBE_PLAIN,
			       "the broker refused the probe's shared subscription");
		wait_ms = 0;
		break;
	case PROBE_SUBSCRIBED: {
		char token[UUID_STR_LEN], topic[PROTO_MAX_TOPIC];

		pthread_mutex_lock(&b->lock);
		if (!bridge_same_connect(b, gen)) {
			pthread_mutex_unlock(&b->lock);
			break;
		}
		snprintf(token, sizeof(token), "%s", b->probe_token);
		snprintf(topic, sizeof(topic), "%s", b->probe_topic);
		b->probe = PROBE_WAITING; /* before it can come back */
		bridge_probe_deadline(b);
		pthread_mutex_unlock(&b->lock);
		if (mqttc_publish(b->mq, topic, token, strlen(token), 1, false, 0) != RCS_OK) {
			pthread_mutex_lock(&b->lock);
			if (b->probe == PROBE_WAITING) {
				b->probe = PROBE_PLAIN;
				b->plain_why = "the probe could not be published";
			}
			pthread_mutex_unlock(&b->lock);
		}
		wait_ms = 0;
		break;
	}
	case PROBE_ARRIVED: {
		const char *drop[1] = {probe};

		if (!bridge_probe_set(b, gen, PROBE_SWITCHING))
			break;
		mqttc_unsubscribe(b->mq, drop, 1, NULL, NULL);
		bridge_request(b, true, shared, PROBE_SWITCHING, PROBE_SHARED, PROBE_PLAIN,
			       "the broker refused the shared subscription");
		wait_ms = 0;
		break;
	}
	case PROBE_SHARED: {
		/* the shared one is granted: the plain one (this connect's, or a session's
		 * from an earlier run) goes */
		const char *drop[1] = {plain};

		if (!mqttc_clean(b->mq)) {
			/* the shared subscription only in a session that ends with the connection:
			 * a coordinator that dies leaves the group at once (docs/mqtt.md "Several
			 * coordinators"); the clean connect subscribes and probes again */
			if (!bridge_probe_set(b, gen, PROBE_IDLE))
				break;
			log_info("the broker delivers on a shared subscription of status reports:"
				 " reconnecting with a clean session to take it");
			if (mqttc_reconnect(b->mq, true) != RCS_OK)
				log_warnx("cannot reconnect with a clean session");
			break;
		}
		pthread_mutex_lock(&b->lock);
		if (!bridge_same_connect(b, gen)) {
			pthread_mutex_unlock(&b->lock);
			break;
		}
		b->probe = PROBE_IDLE;
		b->shared_active = true;
		b->plain_subscribed = false;
		pthread_mutex_unlock(&b->lock);
		mqttc_unsubscribe(b->mq, drop, 1, NULL, NULL);
		bridge_recover_on_take(b);
		metrics_mqtt_shared(true);
		log_info("status reports: shared subscription %s%s", shared,
			 b->shared_mode == BRIDGE_SHARED_AUTO ? " (the broker delivered the probe)"
							      : "");
		break;
	}
	case PROBE_PLAIN: {
		const char *drop[2] = {shared, probe};

		if (mqttc_clean(b->mq)) {
			/* the plain subscription in the persistent session, as without a shared
			 * one (another broker after a failover) */
			if (!bridge_probe_set(b, gen, PROBE_IDLE))
				break;
			log_info("status reports: no shared subscription (%s): reconnecting with a"
				 " persistent session",
				 why ? why : "refused");
			if (mqttc_reconnect(b->mq, false) != RCS_OK)
				log_warnx("cannot reconnect with a persistent session");
			break;
		}
		pthread_mutex_lock(&b->lock);
		if (!bridge_same_connect(b, gen)) {
			pthread_mutex_unlock(&b->lock);
			break;
		}
		b->probe = PROBE_IDLE;
		b->plain_subscribed = true;
		pthread_mutex_unlock(&b->lock);
		mqttc_unsubscribe(b->mq, drop, b->shared_mode == BRIDGE_SHARED_AUTO ? 2 : 1, NULL,
				  NULL);
		if (!plain_subscribed) {
			const char *take[1] = {plain};

			if (mqttc_subscribe(b->mq, take, 1) != RCS_OK)
				log_warnx("cannot subscribe to status reports");
		}
		log_info("status reports: plain subscription %s (%s)", plain,
			 why ? why : "no shared subscription");
		break;
	}
	case PROBE_SUBSCRIBING:
	case PROBE_WAITING:
		pthread_mutex_lock(&b->lock);
		wait_ms = bridge_ms_until(&b->probe_deadline);
		pthread_mutex_unlock(&b->lock);
		break;
	default:
		break; /* PROBE_SWITCHING: the SUBACK wakes the worker */
	}
	return wait_ms;
}

/* ---- MQTT callbacks (paho's threads) ---- */

static void on_connected(void *ctx, bool session_present)
{
	struct bridge *b = ctx;

	/* subscribe every time, session or not: cheap, right after a broker reset, and after
	 * a failover to a broker that never saw this client */
	(void)session_present;
	metrics_mqtt_broker(mqttc_server(b->mq));
	bridge_reports_subscribe(b);
	pthread_mutex_lock(&b->lock);
	b->resync = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
}

static void on_lost(void *ctx)
{
	struct bridge *b = ctx;

	pthread_mutex_lock(&b->lock);
	b->probe = PROBE_IDLE;
	b->shared_active = false;
	pthread_mutex_unlock(&b->lock);
	metrics_mqtt_shared(false);
	metrics_mqtt_broker(NULL);
}

static bool on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct bridge *b = ctx;
	struct proto_topic t;
	struct in_msg *m;

	metrics_mqtt_in();
	if (bridge_probe_message(b, topic, payload, len))
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
	pthread_mutex_lock(&b->lock);
	if (b->in_n >= BRIDGE_INBOUND_MAX) {
		pthread_mutex_unlock(&b->lock);
		return false; /* back-pressure: paho delivers it again later */
	}
	pthread_mutex_unlock(&b->lock);
	m = malloc(sizeof(*m) + len + 1);
	if (m == NULL)
		return false;
	m->next = NULL;
	m->topic = t;
	m->len = len;
	memcpy(m->payload, payload, len);
	m->payload[len] = '\0';
	pthread_mutex_lock(&b->lock);
	if (b->in_tail)
		b->in_tail->next = m;
	else
		b->in_head = m;
	b->in_tail = m;
	b->in_n++;
	pthread_mutex_unlock(&b->lock);
	if (t.kind == PROTO_STATUS)
		metrics_mqtt_report_in();
	bridge_kick(b);
	return true;
}

/* ---- applying inbound messages (worker) ---- */

/*
 * A device message's write that PostgreSQL broke off (a deadlock with another coordinator
 * applying the same job's reports, a lock wait cut short by lock_timeout) rolled back
 * whole: it is applied again, a few times, rather than dropped, as the broker has its
 * acknowledgement already. True when the caller should try again (after a pause of
 * 10 ms, doubled at each attempt).
 */
static bool bridge_again(enum rcs_err err, int attempt, const char *what, const char *ident)
{
	struct timespec pause = {0, (long)(10 * 1000000L) << attempt};

	if (err != RCS_ERR_BUSY || attempt >= BRIDGE_APPLY_TRIES - 1)
		return false;
	log_info("%s %s: the database broke the change off (busy): applying it again", what, ident);
	nanosleep(&pause, NULL);
	return true;
}

/*
 * Applies one status report. in_batch: inside the batch's transaction without a savepoint
 * of its own (lifecycle_move_in_tx); returns false when that failed after writing, and the
 * batch's transaction must be rolled back and its messages applied again one by one.
 */
static bool bridge_apply_report(struct bridge *b, const struct in_msg *m, bool in_batch)
{
	struct proto_report r;
	struct jsonu_err e;
	struct job_move mv;
	enum store_move res;
	enum rcs_err err;
	bool ok = true;

	if (proto_report_decode(m->payload, m->len, &r, &e) != RCS_OK) {
		log_warnx("dropped a status report for job %s from %s: %s%s%s", m->topic.job,
			  m->topic.entity_ident, e.field[0] ? e.field : "", e.field[0] ? ": " : "",
			  e.message);
		return true;
	}
	if (strcmp(r.job, m->topic.job) != 0) {
		log_warnx("dropped a status report from %s: job %s in the payload, %s in the topic",
			  m->topic.entity_ident, r.job, m->topic.job);
		goto out;
	}
	memset(&mv, 0, sizeof(mv));
	mv.client_root = m->topic.client_root;
	mv.entity_ident = m->topic.entity_ident;
	mv.ident = r.job;
	mv.to = r.status;
	mv.response = r.response;
	mv.replace_response = true;
	mv.set_response_time = status_is_terminal(r.status);
	mv.seq = r.seq;
	mv.error_code = r.error; /* the cause of an edge_error (docs/mqtt.md) */
	mv.now = (int64_t)time(NULL);
	if (in_batch) {
		err = lifecycle_move_in_tx(b->lc, &mv, &res, NULL);
		if (err != RCS_OK && err != RCS_ERR_NOTFOUND) {
			ok = false; /* the batch again, one by one: that reports the error */
			goto out;
		}
	} else {
		for (int attempt = 0;; attempt++) {
			err = lifecycle_move(b->lc, &mv, &res, NULL);
			if (!bridge_again(err, attempt, "job", r.job))
				break;
		}
	}
	if (err == RCS_OK && res == STORE_MOVE_KEPT && !status_is_terminal(r.status)) {
		/* the device works on a job cancelled meanwhile: tell it (again) */
		struct job_rec job;
		if (store_job_rec_get(b->st, r.job, &job) == RCS_OK) {
			hook_job_cancelled(b, &job);
			store_job_rec_free(&job);
		}
	}
	if (err == RCS_ERR_NOTFOUND)
		log_warnx(
		    "dropped a status report from %s/%s for job %s: no such job of that device",
		    m->topic.client_root, m->topic.entity_ident, r.job);
	else if (err != RCS_OK)
		log_warnx("job %s: report not applied: %s", r.job, rcs_strerror(err));
	else
		log_debug("job %s: %s (seq %lld) %s", r.job, status_name(r.status), r.seq,
			  res == STORE_MOVE_APPLIED ? "applied" : "ignored");
out:
	proto_report_free(&r);
	return ok;
}

/* Returns true when the device came online (its jobs are then sent). */
static bool bridge_apply_state(struct bridge *b, const struct in_msg *m)
{
	struct proto_state s;
	struct jsonu_err e;
	bool came_online = false;
	enum rcs_err err;

	if (m->len == 0)
		return false; /* a retained state being cleared */
	if (proto_state_decode(m->payload, m->len, &s, &e) != RCS_OK) {
		log_warnx("dropped a state message from %s: %s%s%s", m->topic.entity_ident,
			  e.field[0] ? e.field : "", e.field[0] ? ": " : "", e.message);
		return false;
	}
	/* the reported tags go to the store as the JSON text they are kept as */
	for (int attempt = 0;; attempt++) {
		err = store_device_state(b->st, m->topic.client_root, m->topic.entity_ident,
					 s.online, s.tags ? jsonu_dump(s.tags, NULL) : NULL,
					 s.agent_version, (int64_t)time(NULL), &came_online);
		if (!bridge_again(err, attempt, "device", m->topic.entity_ident))
			break;
	}
	if (err == RCS_ERR_NOTFOUND)
		log_warnx("dropped a state message from %s/%s: not in the inventory",
			  m->topic.client_root, m->topic.entity_ident);
	else if (err != RCS_OK)
		log_warnx("device %s: state not applied: %s", m->topic.entity_ident,
			  rcs_strerror(err));
	else if (s.online != came_online || came_online)
		log_info("device %s is %s", m->topic.entity_ident, s.online ? "online" : "offline");
	/* reported tags, or back online: continuous tag sends it now belongs to */
	if (err == RCS_OK && s.online &&
	    lifecycle_device_changed(b->lc, m->topic.client_root, m->topic.entity_ident,
				     (int64_t)time(NULL)) != RCS_OK)
		log_warnx("device %s: continuous sends not checked", m->topic.entity_ident);
	proto_state_free(&s);
	return came_online;
}

/* The messages of list, in order, in the caller's transaction when there is one;
 * in_batch: reports without a savepoint each (bridge_apply_report). Returns false when the
 * batch must be applied again one by one (*online then holds nothing of it). */
static bool bridge_apply_list(struct bridge *b, struct in_msg *list, bool in_batch,
			      json_object *online)
{
	for (struct in_msg *m = list; m; m = m->next) {
		if (m->topic.kind == PROTO_STATUS) {
			if (!bridge_apply_report(b, m, in_batch)) {
				json_object_array_del_idx(online, 0,
							  json_object_array_length(online));
				return false;
			}
		} else if (in_batch && store_fold_flush(b->st) != RCS_OK) {
			/* a state reads and sends the device's jobs from their rows */
			json_object_array_del_idx(online, 0, json_object_array_length(online));
			return false;
		} else if (bridge_apply_state(b, m)) {
			json_object_array_add(online,
					      json_object_new_string(m->topic.entity_ident));
		}
	}
	return true;
}

static void bridge_apply_inbound(struct bridge *b, struct in_msg *list)
{
	json_object *online = json_object_new_array();
	/* One transaction for the batch: one commit for many messages. Not on a shared
	 * database: a transaction keeps the rows it locked until it ends (a job's row by its
	 * move, its group's row by the tallies of a job that ended), and another coordinator
	 * applying the same reports in its own batches would wait for a row this batch holds
	 * while holding one this batch waits for, a deadlock PostgreSQL breaks only after its
	 * deadlock_timeout; one message per transaction takes a job's row, then its group's,
	 * and lets both go (docs/scale-out.md, "Limits") */
	bool tx = !store_shared(b->st) && store_tx_begin(b->st) == RCS_OK;
	bool ok;

	/* in the batch's transaction the reports take no savepoint each, and a job's moves
	 * are folded into one write of its row (store_fold_begin); should one fail after
	 * writing (a database error), the batch is rolled back and applied again with a
	 * savepoint per message and no fold, so that the failing one costs only itself
	 * (docs/architecture.md, "One job, from POST to the final report", step 6) */
	if (tx)
		store_fold_begin(b->st);
	ok = bridge_apply_list(b, list, tx, online);
	if (tx && store_fold_end(b->st, ok) != RCS_OK && ok) {
		json_object_array_del_idx(online, 0, json_object_array_length(online));
		ok = false;
	}
	if (!ok) {
		log_warnx("a batch of %s is applied again message by message", "device messages");
		store_tx_end(b->st, false);
		tx = store_tx_begin(b->st) == RCS_OK;
		bridge_apply_list(b, list, false, online);
	}
	if (tx && store_tx_end(b->st, true) != RCS_OK)
		log_warnx("a batch of %s could not be stored", "device messages");
	/* devices back online get their pending and unacknowledged jobs */
	for (size_t i = 0; i < json_object_array_length(online); i++)
		bridge_catch_up(b, json_object_get_string(json_object_array_get_idx(online, i)),
				(int64_t)time(NULL));
	json_object_put(online);
}

/* ---- the scheduler's transport (scheduler.c) ---- */

static bool tr_ready(void *ctx)
{
	struct bridge *b = ctx;

	return mqttc_connected(b->mq);
}

static void tr_send_due(void *ctx, int64_t now)
{
	struct bridge *b = ctx;

	(void)now; /* the worker reads the clock when it sends */
	pthread_mutex_lock(&b->lock);
	b->due = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
}

static void tr_resend(void *ctx, int64_t now)
{
	struct bridge *b = ctx;

	(void)now;
	pthread_mutex_lock(&b->lock);
	b->sweep = true;
	pthread_mutex_unlock(&b->lock);
	bridge_kick(b);
}

void bridge_transport(struct bridge *b, struct sched_transport *out)
{
	memset(out, 0, sizeof(*out));
	out->ctx = b;
	out->ready = tr_ready;
	out->send_due = tr_send_due;
	out->resend = tr_resend;
	out->resend_every = b->resend_after / 2 < BRIDGE_SWEEP_SECONDS
				? (b->resend_after / 2 > 0 ? b->resend_after / 2 : 1)
				: BRIDGE_SWEEP_SECONDS;
}

/* Ends this node's claims on jobs whose envelopes the broker acknowledged. */
static void bridge_unclaim(struct bridge *b, json_object *idents)
{
	struct store_idents ids = {.v = NULL, .n = 0};
	size_t n = json_object_array_length(idents);

	ids.v = calloc(n ? n : 1, sizeof(*ids.v));
	if (ids.v == NULL)
		return; /* the claims lapse with their lease */
	for (size_t i = 0; i < n; i++)
		snprintf(ids.v[i], sizeof(ids.v[i]), "%s",
			 json_object_get_string(json_object_array_get_idx(idents, i)));
	ids.n = n;
	if (store_jobs_unclaim(b->st, &ids) != RCS_OK)
		log_warnx("claims of %zu sent jobs not ended (they lapse with their lease)", n);
	store_idents_free(&ids);
}

static void *bridge_worker(void *arg)
{
	struct bridge *b = arg;

	for (;;) {
		struct pollfd pfd = {b->efd, POLLIN, 0};
		struct in_msg *batch = NULL, *last = NULL;
		json_object *out = NULL, *retry, *acked = NULL;
		bool resync, due, sweep, stop;
		int64_t now = (int64_t)time(NULL);
		size_t n = 0;
		int wait_ms = bridge_reports_step(b); /* -1: nothing to wait for there */

		bool behind = bridge_events_behind(b);

		/* take the work that arrived (reports not while the events are behind) */
		pthread_mutex_lock(&b->lock);
		stop = b->stop;
		resync = b->resync;
		b->resync = false;
		due = b->due;
		b->due = false;
		sweep = b->sweep;
		b->sweep = false;
		batch = behind ? NULL : b->in_head;
		for (last = batch; last && ++n < BRIDGE_BATCH; last = last->next)
			;
		if (last) {
			b->in_head = last->next;
			last->next = NULL;
		} else if (batch) {
			b->in_head = NULL;
		}
		if (b->in_head == NULL)
			b->in_tail = NULL;
		b->in_n -= batch ? n : 0;
		if (json_object_array_length(b->out) > 0) {
			out = b->out;
			b->out = json_object_new_array();
		}
		if (json_object_array_length(b->acked) > 0) {
			acked = b->acked;
			b->acked = json_object_new_array();
		}
		pthread_mutex_unlock(&b->lock);

		if (acked) {
			bridge_unclaim(b, acked);
			json_object_put(acked);
		}

		if (batch) {
			bridge_apply_inbound(b, batch);
			while (batch) {
				struct in_msg *next = batch->next;
				free(batch);
				batch = next;
			}
		}
		if (out) {
			bridge_publish_list(b, out, false);
			json_object_put(out);
		}
		if (resync && mqttc_connected(b->mq))
			bridge_catch_up(b, NULL, now);
		else if (due && mqttc_connected(b->mq))
			bridge_send_ready(b, NULL, now);
		if (sweep && mqttc_connected(b->mq))
			bridge_resend_stale(b, now);
		if (due && mqttc_connected(b->mq))
			bridge_recover_lapsed(b, now);
		if (bridge_recover_step(b, now))
			wait_ms = 0;
		else if (bridge_recover_pending(b) &&
			 (wait_ms < 0 || wait_ms > BRIDGE_RECOVER_WAKE_MS))
			wait_ms = BRIDGE_RECOVER_WAKE_MS; /* no tick comes each second on SQLite */
		/* envelopes the client refused (its queue was full): again, after a pause */
		pthread_mutex_lock(&b->lock);
		retry = NULL;
		if (json_object_array_length(b->retry) > 0 && mqttc_connected(b->mq)) {
			retry = b->retry;
			b->retry = json_object_new_array();
		}
		pthread_mutex_unlock(&b->lock);
		if (retry) {
			struct timespec pause = {0, 100 * 1000000L};
			nanosleep(&pause, NULL);
			log_info("sending %zu envelopes again (the MQTT client's queue was full)",
				 json_object_array_length(retry));
			bridge_publish_list(b, retry, true);
			json_object_put(retry);
		}
		if (stop && batch == NULL) {
			pthread_mutex_lock(&b->lock);
			stop = b->in_head == NULL;
			pthread_mutex_unlock(&b->lock);
			if (stop)
				break;
			continue;
		}
		/* sleep until new work */
		pthread_mutex_lock(&b->lock);
		n = (behind ? 0 : b->in_n + (b->in_head ? 1 : 0)) +
		    json_object_array_length(b->out) + json_object_array_length(b->acked) +
		    (mqttc_connected(b->mq) ? json_object_array_length(b->retry) : 0) +
		    (b->due || b->sweep || b->resync || b->stop ? 1 : 0);
		pthread_mutex_unlock(&b->lock);
		if (n > 0 || wait_ms == 0)
			continue;
		if (behind) {
			/* reports wait: for room among the events, or for other work */
			bridge_events_wait(b, BRIDGE_EVENTS_WAIT_MS);
			continue;
		}
		if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
			log_warn("poll");
		if (pfd.revents & POLLIN) {
			uint64_t v;
			if (read(b->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_warn("eventfd");
		}
	}
	return NULL;
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
	pthread_mutex_init(&b->pub_lock, NULL);
	pthread_cond_init(&b->pub_cond, NULL);
	pthread_cond_init(&b->pub_room, NULL);
	b->efd = -1;
	b->st = st;
	b->lc = lc;
	b->max_payload = opts->max_payload ? opts->max_payload : PROTO_MAX_PAYLOAD;
	b->resend_after = opts->resend_after > 0 ? opts->resend_after : 60;
	b->shared_mode = opts->shared;
	b->lost_clean = opts->node_died;
	b->stable_client_id = opts->stable_client_id;
	if (b->shared_mode == BRIDGE_SHARED_YES && !b->stable_client_id)
		log_warnx("--mqtt-shared-subscriptions yes with a client id that changes at every"
			  " start: the session of a coordinator that died keeps taking its share"
			  " of the reports (give --node-id)");
	b->events_qos = opts->events_qos == 0 ? 0 : 1;
	b->events_backlog = opts->events_backlog > 0 ? opts->events_backlog : 8192;
	snprintf(b->client_id, sizeof(b->client_id), "%s",
		 opts->mqtt.client_id ? opts->mqtt.client_id : "");
	b->out = json_object_new_array();
	b->retry = json_object_new_array();
	b->acked = json_object_new_array();
	b->claims = store_shared(st);
	if (b->claims) {
		b->acks = calloc(BRIDGE_ACK_SLOTS, sizeof(*b->acks));
		if (b->acks == NULL)
			goto out;
	}
	b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (b->efd < 0) {
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
	err = mqttc_start(&opts->mqtt, &cb, &b->mq);
	if (err != RCS_OK)
		goto out;
	if (pthread_create(&b->pub_thread, NULL, bridge_publisher, b) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	b->pub_started = true;
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
	return mqttc_up(b->mq);
}

const char *bridge_broker(struct bridge *b)
{
	return mqttc_server(b->mq);
}

bool bridge_shared_active(struct bridge *b)
{
	bool on;

	pthread_mutex_lock(&b->lock);
	on = b->shared_active;
	pthread_mutex_unlock(&b->lock);
	return on;
}

void bridge_stop(struct bridge *b)
{
	if (b == NULL)
		return;
	/* disconnected first: paho acknowledged every report it handed over, so the worker
	 * applies all of them (and ends the claims of the envelopes acknowledged) before it
	 * stops, and none arrives after it */
	mqttc_disconnect(b->mq, 2000);
	pthread_mutex_lock(&b->lock);
	b->stop = true;
	pthread_mutex_unlock(&b->lock);
	/* a worker waiting for the publisher goes on to its last round at once */
	pthread_mutex_lock(&b->pub_lock);
	b->pub_waking = true;
	pthread_cond_broadcast(&b->pub_room);
	pthread_mutex_unlock(&b->pub_lock);
	if (b->thread_started) {
		bridge_kick(b);
		pthread_join(b->thread, NULL);
	}
	/* only now: the worker's last round moves jobs, and the lifecycle reads its hooks
	 * (the API and the scheduler, the other users, stopped before) */
	if (b->lc && b->lc->hooks == &b->hooks)
		b->lc->hooks = NULL;
	/* the events of the worker's last round too: nothing queues one after this */
	pthread_mutex_lock(&b->pub_lock);
	b->pub_stop = true;
	pthread_cond_broadcast(&b->pub_cond);
	pthread_mutex_unlock(&b->pub_lock);
	if (b->pub_started)
		pthread_join(b->pub_thread, NULL);
	mqttc_stop(b->mq, 2000);
	while (b->pub_head) {
		struct bridge_event *next = b->pub_head->next;
		bridge_event_free(b->pub_head);
		b->pub_head = next;
	}
	while (b->in_head) {
		struct in_msg *next = b->in_head->next;
		free(b->in_head);
		b->in_head = next;
	}
	if (b->tv_valid)
		bridge_tv_free(&b->tv);
	json_object_put(b->out);
	json_object_put(b->retry);
	json_object_put(b->acked);
	free(b->acks);
	if (b->efd >= 0)
		close(b->efd);
	pthread_mutex_destroy(&b->lock);
	pthread_mutex_destroy(&b->pub_lock);
	pthread_cond_destroy(&b->pub_cond);
	pthread_cond_destroy(&b->pub_room);
	free(b);
}
