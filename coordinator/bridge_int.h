/*
 * bridge_int.h - the parts of the MQTT bridge (mqtt_bridge.h), private to bridge*.c.
 *
 * Each part owns its state in a struct of its own, opaque to the others; they meet through
 * the functions below. Each calls only the parts listed after it, never one above
 * (docs/architecture.md, "The MQTT bridge"):
 *
 *   bridge.c          life (start, stop), the worker, paho's callbacks, the lifecycle's
 *                     hooks, the scheduler's transport
 *   bridge_subs.c     the status reports' subscription, plain or shared, and its probe
 *   bridge_apply.c    device messages in: queued, applied in batched transactions
 *   bridge_recover.c  the in-flight jobs sent again when a clean session lost reports
 *   bridge_send.c     envelopes out (claims, acks, the client's window), cancels,
 *                     catch-up, re-sends
 *   bridge_envelope.c a job's envelope: its task version, the move to transmited, the text
 *   bridge_events.c   the event feed and its publisher thread
 *   bridge_link.c     what they all hold (struct bridge_link), publishing at the broker's
 *                     pace, lists of idents
 *
 * Threads: paho's (bridge.c's callbacks, which only record and queue), the HTTP workers
 * (the hooks), the scheduler's (through the transport, which only asks), the worker
 * (everything that reads or writes storage for the bridge) and the event publisher.
 */
#ifndef RCS_BRIDGE_INT_H
#define RCS_BRIDGE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mqtt_bridge.h"
#include "proto.h"

#define BRIDGE_FULL_WAIT_MS 2000 /* longest wait for room in the client's window */
#define BRIDGE_RESYNC_LIMIT 5000 /* jobs per query when catching up */

/* ---- bridge_link.c ---- */

/* What every part holds, set by bridge_start and read-only after it. */
struct bridge_link {
	struct store *st;
	struct lifecycle *lc;
	struct mqttc *mq; /* set by mqttc_start before its first callback can come */
	/* a shared database: a job's envelope is claimed until the broker acknowledges it
	 * (docs/architecture.md "Claims"), and reports may come through a shared
	 * subscription */
	bool claims;
	int efd;                   /* eventfd: work arrived for the worker */
	struct art_tokens *tokens; /* the envelopes' artifact tokens (art_token.h), or NULL */
};

/* Wakes the worker (any thread). */
void bridge_kick(const struct bridge_link *l);
/* The worker: sleeps until bridge_kick, or ms (-1: no limit). */
void bridge_sleep(const struct bridge_link *l, int ms);
/* ms from now on clock c. */
void bridge_deadline(clockid_t c, int ms, struct timespec *out);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t bridge_now_ms(void);
/* Publishes; while the client's window of unacknowledged QoS 1 messages (or paho's queue)
 * is full, waits for the broker's next acknowledgement and tries again, for up to
 * BRIDGE_FULL_WAIT_MS without one. RCS_ERR_FULL when the broker acknowledged nothing, or
 * the queue had no room, for that long; else mqttc_publish's answer. */
enum rcs_err bridge_publish_room(const struct bridge_link *l, const char *topic,
				 const void *payload, size_t len, int qos, uint64_t tag);

/* Idents of jobs or devices, in the order added: as the store's queries take them (ids),
 * in a C array that grows. Starts zeroed; bridge_idents_free. */
struct bridge_idents {
	struct store_idents ids;
	size_t cap;
};
/* Adds a copy of ident; false (the list unchanged) when out of memory. */
bool bridge_idents_add(struct bridge_idents *l, const char *ident);
/* Empties the list, keeping its room. */
void bridge_idents_clear(struct bridge_idents *l);
void bridge_idents_free(struct bridge_idents *l);

/* ---- bridge_events.c: the event feed ---- */

struct bridge_events;

/* qos: of the events (0 or 1); backlog: events waiting from which reports wait. NULL on
 * no memory. */
struct bridge_events *bridge_events_new(const struct bridge_link *l, int qos, size_t backlog);
/* Starts the publisher's thread; RCS_ERR_IO when it cannot. */
enum rcs_err bridge_events_start(struct bridge_events *e);
/* The lifecycle's job_changed and group_changed: the event goes out once the change is
 * committed (docs/mqtt.md, "Monitoring"). */
void bridge_events_job(struct bridge_events *e, const struct job_rec *job);
void bridge_events_group(struct bridge_events *e, const char *client_root, const char *group_ident,
			 const char *record, size_t len);
/* The worker: whether device reports wait for the feed (events_backlog events queued, the
 * feed not stuck); and a wait of up to ms for the feed to get below that. */
bool bridge_events_behind(struct bridge_events *e);
void bridge_events_wait(struct bridge_events *e, int ms);
/* Any thread: whether the worker's last look left the device reports waiting for the feed
 * (the scheduler's reboot deadlines wait with them: scheduler.h). */
bool bridge_events_holding(struct bridge_events *e);
/* Stopping (NULL: nothing): the worker no longer waits for the feed (waking); then, once
 * nothing queues events any more, the publisher publishes what is queued and ends (stop). */
void bridge_events_waking(struct bridge_events *e);
void bridge_events_stop(struct bridge_events *e);
/* Frees what is left (NULL: nothing), after bridge_events_stop. */
void bridge_events_free(struct bridge_events *e);

/* ---- bridge_envelope.c: a job's envelope ---- */

struct bridge_envelopes;

/* The worker's cache of the last task version; NULL on no memory. */
struct bridge_envelopes *bridge_envelopes_new(const struct bridge_link *l);
void bridge_envelopes_free(struct bridge_envelopes *e);

/* claims not NULL: the jobs bridge_prepare_job moves from now on are listed there, not
 * claimed one by one, for the caller to claim together in its transaction (store_jobs_claim);
 * NULL: each claimed with its move again. */
void bridge_envelopes_claim_into(struct bridge_envelopes *e, struct bridge_idents *claims);

/* An envelope ready to go out: built and committed, not yet published. */
struct bridge_out {
	char ident[UUID_STR_LEN];
	char topic[PROTO_MAX_TOPIC];
	char *payload; /* malloc'd; NULL: nothing to send */
	size_t len;
};

/* Builds a job's envelope into o (o->payload stays NULL when the job is not to be sent:
 * moved on meanwhile, its device offline). resend: the job was sent before (re-publish,
 * status unchanged); else it must be pending, for an online device, and is moved to
 * transmited (and claimed) first, in the caller's transaction: a savepoint of its own
 * with undo NULL, else none, *undo set when the move failed after writing (the caller
 * rolls back). tv_cache: the task version from e's cache (worker thread only). */
enum rcs_err bridge_prepare_job(struct bridge_envelopes *e, const char *ident, bool resend,
				bool tv_cache, int64_t now, bool *undo, struct bridge_out *o);

/* ---- bridge_send.c: what goes to the devices ---- */

struct bridge_send;

/* resend_after: seconds without news before a job's envelope is re-sent. NULL on no
 * memory. */
struct bridge_send *bridge_send_new(const struct bridge_link *l, int64_t resend_after,
				    int64_t unacked_after);
void bridge_send_free(struct bridge_send *s);
/* How often the scheduler asks for the re-send sweep (sched_transport.resend_every). */
int64_t bridge_send_sweep_every(const struct bridge_send *s);
/* The lifecycle's job_due: a pending job's envelope, the job moved to transmited in the
 * caller's transaction, published once it commits. RCS_ERR_BUSY while not connected (the
 * job stays pending); RCS_OK also when the job is not to be sent. */
enum rcs_err bridge_publish_job(struct bridge_send *s, const char *ident);
/* The lifecycle's jobs_due: queued for the worker (bridge_send_queued). */
void bridge_send_queue(struct bridge_send *s, const struct job_new *jobs, size_t n);
/* The lifecycle's job_cancelled, and a report on a job cancelled meanwhile: the device is
 * told (best effort). */
void bridge_send_cancel(struct bridge_send *s, const struct job_rec *job);
/* paho's thread: the broker acknowledged (ok) the envelope published with tag. */
void bridge_send_acked(struct bridge_send *s, uint64_t tag, bool ok);
/* The worker: publishes the jobs' envelopes (resend: sent before, their status kept). */
void bridge_publish_idents(struct bridge_send *s, const struct store_idents *idents, bool resend);
/* The worker: the jobs of a device (NULL: of all) that are due; the unacknowledged ones
 * again first (catch-up); the jobs without news for resend_after (stale). */
void bridge_send_ready(struct bridge_send *s, const char *entity_ident, int64_t now);
void bridge_catch_up(struct bridge_send *s, const char *entity_ident, int64_t now);
/* The stale ones, unless reports_waiting (received, not applied yet). */
void bridge_resend_stale(struct bridge_send *s, int64_t now, size_t reports_waiting);
/* The early re-send, once, of envelopes not acknowledged unacked_after seconds after their
 * send, unless reports_waiting (received, not applied yet). */
void bridge_resend_unacked(struct bridge_send *s, int64_t now, size_t reports_waiting);
/* The worker's round: ends the claims of what the broker acknowledged (unclaim), sends the
 * queued jobs (queued), and again what the client refused (retry, while connected). */
void bridge_unclaim(struct bridge_send *s);
void bridge_send_queued(struct bridge_send *s);
void bridge_send_retry(struct bridge_send *s);
/* The worker: how many idents wait for those three. */
size_t bridge_send_waiting(struct bridge_send *s);

/* ---- bridge_recover.c: reports a clean session lost ---- */

struct bridge_recover;

/* node_died: this node's last run had a clean session and did not stop cleanly. NULL on
 * no memory. Worker-only, as every function below. */
struct bridge_recover *bridge_recover_new(const struct bridge_link *l, struct bridge_send *s,
					  bool node_died);
void bridge_recover_free(struct bridge_recover *r);
/* The shared subscription was just taken, on a clean session. */
void bridge_recover_on_take(struct bridge_recover *r);
/* Each second on a shared database (shared: the reports come through the shared
 * subscription): a recovery when other coordinators' signs of life lapsed. */
void bridge_recover_lapsed(struct bridge_recover *r, int64_t now, bool shared);
/* One page of a recovery under way. Returns how long the worker may sleep for it: -1 as
 * long as it likes, 0 not at all, else milliseconds (the next pass). */
int bridge_recover_step(struct bridge_recover *r, int64_t now);

/* ---- bridge_subs.c: the status reports' subscription ---- */

struct bridge_subs;

/* From opts: the mode, whether the client id is stable, the client id. NULL on no
 * memory. */
struct bridge_subs *bridge_subs_new(const struct bridge_link *l, struct bridge_recover *r,
				    const struct bridge_opts *opts);
void bridge_subs_free(struct bridge_subs *s);
/* paho's thread: connected: device state and the reports subscribed to as the mode says. */
void bridge_reports_subscribe(struct bridge_subs *s);
/* paho's thread: the connection was lost. */
void bridge_subs_lost(struct bridge_subs *s);
/* paho's thread: true when the message is a probe of this coordinator's (consumed). */
bool bridge_probe_message(struct bridge_subs *s, const char *topic, const void *payload,
			  size_t len);
/* The worker's step of the choice. Returns how long the worker may sleep for it: -1 as
 * long as it likes, 0 not at all, else milliseconds (a deadline). */
int bridge_reports_step(struct bridge_subs *s);
/* True while status reports come through the shared subscription (any thread). */
bool bridge_subs_active(struct bridge_subs *s);

/* ---- bridge_apply.c: device messages in ---- */

struct bridge_apply;

/* NULL on no memory. */
struct bridge_apply *bridge_apply_new(const struct bridge_link *l, struct bridge_send *s);
/* Frees the messages left too. */
void bridge_apply_free(struct bridge_apply *a);
/* The ceiling of the queue, in bytes of messages (512 MiB unless set). */
void bridge_apply_limit(struct bridge_apply *a, size_t max_bytes);
/* paho's thread: a status report or state message (topic t, checked) queued for the
 * worker, however many are queued, or dropped (a warning) when the queue holds its ceiling
 * already; false only when out of memory (paho hands it again with the next packet it
 * reads). */
bool bridge_apply_queue(struct bridge_apply *a, const struct proto_topic *t, const void *payload,
			size_t len);
/* The worker: applies a batch of the queued messages, the reports held in its last round
 * first (reports whose jobs another coordinator's transaction held on PostgreSQL, kept in
 * order for the next round: docs/coordinator.md, "Reports as sets"). */
void bridge_apply_step(struct bridge_apply *a);
/* How many messages are not applied yet: queued or held. */
size_t bridge_apply_waiting(struct bridge_apply *a);
/* How many messages are queued (held ones apart). */
size_t bridge_apply_queued(struct bridge_apply *a);
/* Whether 100,000 messages or more are queued: the reports no longer wait for the event
 * feed then, so that a slow feed cannot keep them in memory without end. */
bool bridge_apply_pressed(struct bridge_apply *a);
/* Whether another batch is worth applying in this round: a whole batch of messages is
 * queued and no report is held for the next round. */
bool bridge_apply_more(struct bridge_apply *a);
/* When the held reports should be tried again (ms; -1: none held). */
int bridge_apply_wait_ms(struct bridge_apply *a);

#endif
