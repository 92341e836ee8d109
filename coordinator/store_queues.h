/*
 * store_queues.h - the store's due work: what the transport, the scheduler, the notifier and the
 * webhook sender have to do now, and the claims that let several coordinators share it
 * (store_queues.c; the groups', notifications' and deliveries' queries are their domain
 * files'). No API handler includes it. See store.h.
 */
#ifndef RCS_STORE_QUEUES_H
#define RCS_STORE_QUEUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct store_group_list;

/* ---- jobs due, claims, nodes (store_queues.c) ---- */

/* Idents of pending jobs that are due, for online devices (entity_ident NULL: all
 * devices), at most limit, sorted. Claimed on SQLite; on PostgreSQL only read: the chunk
 * that sends them locks, moves and claims them (docs/architecture.md "Claims"). */
enum rcs_err store_jobs_ready(struct store *st, const char *entity_ident, int64_t now, size_t limit,
			      struct store_idents *out);
/* Idents of jobs sent ("transmited") before `before` (Unix s) but not acknowledged, for
 * online devices: a job sent since (on the connection there is) needs no second envelope. */
enum rcs_err store_jobs_unacked(struct store *st, const char *entity_ident, int64_t before,
				size_t limit, struct store_idents *out);
/* Idents of jobs in a non-terminal device status with no news for `after`
 * seconds, doubling with every re-send (up to 32x), for online devices. */
enum rcs_err store_jobs_stale(struct store *st, int64_t now, int64_t after, size_t limit,
			      struct store_idents *out);
/* Idents of jobs still transmited to online devices `after` seconds after their last send,
 * that were not re-sent yet at least `after` seconds after their move to transmited: the
 * early re-send of an envelope no device acknowledged (once a job), at most limit. */
enum rcs_err store_jobs_unacked_late(struct store *st, int64_t now, int64_t after, size_t limit,
				     struct store_idents *out);
/* The wall clock went back to now: the active jobs' last news and sends are
 * brought back to it, so that a job without news is re-sent after resend_after
 * again instead of after the size of the step; a reboot deadline is now + its
 * within at most. */
enum rcs_err store_jobs_clock_back(struct store *st, int64_t now);
/* Idents of pending or transmited jobs whose ttl has run out. */
enum rcs_err store_jobs_expired(struct store *st, int64_t now, size_t limit,
				struct store_idents *out);
/* Idents of edge_running jobs whose reboot deadline has passed (docs/mqtt.md "Status report",
 * within), claimed as the others are: the scheduler ends them reboot_timeout. */
enum rcs_err store_jobs_reboot_due(struct store *st, int64_t now, size_t limit,
				   struct store_idents *out);
/* The coordinator's own downtime never fails a device (docs/api.md "Jobs"): every reboot
 * deadline is pushed to at least now + its within. */
enum rcs_err store_jobs_reboot_push(struct store *st, int64_t now);
/* Records a (re-)send of the job's envelope at now; counted: one more send (the re-send of
 * jobs without news waits twice as long after each), else its time only. */
enum rcs_err store_job_mark_sent(struct store *st, const char *ident, int64_t now, bool counted);
/* The next time (Unix s) a scheduled job falls due, a held job's retry backoff ends, a ttl runs
 * out or a reboot deadline passes; 0 when none. */
enum rcs_err store_next_wakeup(struct store *st, int64_t now, int64_t *next);

/*
 * Claims: several coordinators on one database (docs/architecture.md "Claims"). The queries
 * of due work here (jobs ready, unacknowledged, stale, expired; groups releasing;
 * notifications and webhook deliveries due) claim what they return for this node until
 * now + lease: another node passes over a claimed row until its lease ends, the node itself
 * may take it again. On PostgreSQL a claim skips the rows another coordinator is claiming at
 * that moment (FOR UPDATE SKIP LOCKED).
 */
#define STORE_LEASE_DEFAULT 15 /* seconds */
/* The node id claims are made under and the lease (seconds; <= 0: the default). */
void store_claims_setup(struct store *st, const char *node, int64_t lease);
/* Whether other coordinators may share the database (PostgreSQL). */
bool store_shared(const struct store *st);
/* Claims one job for this node (its first send, in the move's transaction). */
enum rcs_err store_job_claim(struct store *st, const char *ident, int64_t now);
/* Claims these jobs for this node in one statement (the first send of a chunk of them, in
 * its transaction: docs/coordinator.md "Sends as sets"). */
enum rcs_err store_jobs_claim(struct store *st, const struct store_idents *ids, int64_t now);
/* The broker acknowledged these jobs' envelopes: this node's claims on them end (one
 * statement for them all). */
enum rcs_err store_jobs_unclaim(struct store *st, const struct store_idents *ids);
/* Jobs sent under another node's claim that lapsed before the broker acknowledged them:
 * claimed to be sent again. */
enum rcs_err store_jobs_orphaned(struct store *st, int64_t now, size_t limit,
				 struct store_idents *out);
/* Renews this node's claim on a notification about to be sent: *held false when the claim
 * lapsed meanwhile (another node may send it) or it was sent already. */
enum rcs_err store_notification_renew(struct store *st, long long id, int64_t now, bool *held);
/* Gives up every claim of this node (a clean stop) and wakes the others. */
enum rcs_err store_claims_release(struct store *st);
/* This node is running (now): its row of the coordinators on the database. */
enum rcs_err store_node_beat(struct store *st, int64_t now);
/* How many other nodes showed a sign of life within the lease before now. */
enum rcs_err store_nodes_others(struct store *st, int64_t now, long long *n);
/* The database server's clock (Unix s): leases and signs of life are counted with each
 * coordinator's own clock, which must agree with the others' (docs/scale-out.md). */
enum rcs_err store_clock(struct store *st, int64_t *now);
/* Whether this node's row is there before its first sign of life: its last run did not stop
 * cleanly (a clean stop removes it, store_node_gone). */
enum rcs_err store_node_left(struct store *st, bool *found);
/* Removes the rows of the other nodes whose sign of life lapsed (none within the lease before
 * now); *n: how many this node removed (0 when another node took them first). */
enum rcs_err store_nodes_lapsed(struct store *st, int64_t now, long long *n);
/* Whether this node is the one the database assigns key to (docs/mqtt.md, "Artifacts over
 * MQTT (the coordinator's side)"): of the nodes with a sign of life within the lease before
 * now, the first by a hash of node id and key; always on a database of its own (not
 * store_shared), and when no node shows one. */
enum rcs_err store_node_owner(struct store *st, int64_t now, const char *key, bool *mine);
/* Up to limit in-flight jobs (sent before `before`, Unix s, not ended on the device) of online
 * devices, with an ident after `after` ("" or NULL: from the first), claimed to be sent
 * again. */
enum rcs_err store_jobs_inflight(struct store *st, const char *after, int64_t before, int64_t now,
				 size_t limit, struct store_idents *out);
/* How many in-flight jobs of online devices store_jobs_inflight would still find from the
 * first (sent before `before`), whoever claims or locks them: those it passed over, locked
 * by another transaction (PostgreSQL's SKIP LOCKED) or claimed by another node. */
enum rcs_err store_jobs_inflight_left(struct store *st, int64_t before, long long *n);
/* This node stops: its row goes. */
enum rcs_err store_node_gone(struct store *st);
/* Calls fn (on a thread of the store's) whenever another transaction committed work that
 * may be due (PostgreSQL's LISTEN/NOTIFY; nothing on SQLite). */
enum rcs_err store_listen(struct store *st, void (*fn)(void *ctx), void *ctx);
void store_listen_stop(struct store *st);

/* ---- the notifier (store_outbox.c) ---- */

/* A queued notification whose time has come; free with store_notification_due_free. */
struct notification_due {
	long long id;
	char job_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *status; /* the job status the mail is about */
	char *address;
	long long attempts;
	int64_t created_at;
};
void store_notification_due_free(struct notification_due *r);
struct store_notification_due_list {
	struct notification_due *items;
	size_t n;
};
void store_notification_due_list_free(struct store_notification_due_list *l);
/* Queued notifications whose time has come, oldest first, at most limit. */
enum rcs_err store_notifications_due(struct store *st, int64_t now, size_t limit,
				     struct store_notification_due_list *out);

/* ---- the webhook sender (store_webhooks.c) ---- */

/* A queued delivery whose time has come, with what sending it takes. */
struct webhook_due {
	long long id;
	char ident[UUID_STR_LEN];
	char webhook_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char type[16];
	char subject[UUID_STR_LEN];
	long long hist_n;
	char status[32];
	int64_t at;
	long long attempts;
	int64_t created_at;
	char *url;
	char *secret;
};
void store_webhook_due_free(struct webhook_due *r);
struct store_webhook_due_list {
	struct webhook_due *items;
	size_t n;
};
void store_webhook_due_list_free(struct store_webhook_due_list *l);
/* Due deliveries, oldest first, at most limit, none behind an earlier queued delivery of the
 * same webhook and subject (the order per job), none of the ids in skip[0..n_skip-1]; of one
 * webhook at most its per_hook oldest are read (0: no bound), those of skip among them, so
 * that a webhook with thousands due never crowds the others out of the answer. One walk of
 * an index per webhook with deliveries due, never a read of the whole queue. */
enum rcs_err store_webhooks_due(struct store *st, int64_t now, const long long *skip, size_t n_skip,
				size_t limit, size_t per_hook, struct store_webhook_due_list *out);

/* ---- group sends (store_groups.c) ---- */

/* Running groups with a held job due by now (its retry's backoff and its scheduled time
 * past), oldest first, at most limit, without counts; after (when not NULL) the group
 * after_created_at/after_ident comes last: only groups after it in that order are read, so
 * that a caller can page through them all. */
enum rcs_err store_groups_releasing(struct store *st, int64_t now, const char *after_ident,
				    int64_t after_created_at, size_t limit,
				    struct store_group_list *out);

/* Releases (held = 0, the ttl running from now) up to limit held jobs of the group whose
 * time has come (release_at <= now), in release order, and keeps the bucket's new state
 * (tokens_milli, at tokens_at_ms, less a job per job released; a negative tokens_milli: the
 * group has no rate and no bucket to keep); out gets their idents. *next_at:
 * when the earliest job still held may go (now: one is due already; 0: none is held). */
enum rcs_err store_group_release(struct store *st, const char *group, int64_t now, size_t limit,
				 long long tokens_milli, int64_t tokens_at_ms,
				 struct store_idents *out, int64_t *next_at);

#endif
