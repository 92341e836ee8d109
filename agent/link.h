/*
 * link.h - the agent's MQTT side (docs/mqtt.md): the broker connection and
 * its Last Will, this device's job and cancel subscriptions, the retained
 * state, and reports out through the journal's outbox (docs/agent.md "What
 * happens to a job", step 5).
 *
 * link.c knows nothing of jobs: it checks a message's topic and size and
 * hands it to the handlers main.c registered (the runner's, see
 * docs/architecture.md). The handlers run on the MQTT client's thread, one
 * message at a time; a message is acknowledged to the broker once its handler
 * returned.
 */
#ifndef RCS_AGENT_LINK_H
#define RCS_AGENT_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "journal.h"
#include "settings.h"
#include "status.h"

struct link;

struct link_handlers {
	void *ctx;
	/* an envelope on this device's job topic, at most max_payload bytes */
	void (*envelope)(void *ctx, const char *job, const char *payload, size_t len);
	/* an envelope over max_payload, left unread */
	void (*oversized)(void *ctx, const char *job);
	/* a well-formed cancel of job */
	void (*cancel)(void *ctx, const char *job);
	/* the broker acknowledged a report: it left the outbox */
	void (*report_acked)(void *ctx);
	/* artifacts over MQTT: the bytes of .../artifacts/<sha256>/data/<offset>, and an
	 * .../artifacts/<sha256>/error (may be NULL when the agent uses HTTP) */
	void (*artifact_data)(void *ctx, const char *sha256, int64_t offset, const void *data,
			      size_t len);
	void (*artifact_error)(void *ctx, const char *sha256, const char *payload, size_t len);
	/* connected to a broker, subscriptions asked for (NULL: nothing); online follows once
	 * the broker granted them (link_online) */
	void (*connected)(void *ctx);
};

/*
 * A link for the device of set, reports journaled in journal, tags from the
 * policy in force in live (all three outlive the link). Not connected yet:
 * link_start. NULL when out of memory.
 */
struct link *link_new(const struct settings *set, struct settings_live *live,
		      struct journal *journal, const struct link_handlers *h);
/* Connects (and keeps connecting) in the MQTT client's thread. */
enum rcs_err link_start(struct link *l);
/* True while connected to the broker. */
bool link_connected(struct link *l);
/* True while connected and online: the broker granted this device's jobs and cancels
 * filters on this connection, and the state said online (docs/mqtt.md, "Connection
 * sequence"). */
bool link_online(struct link *l);
/* Publishes state offline (clean stop), disconnects. No handler runs after it. */
void link_stop(struct link *l);
void link_free(struct link *l);

/* Journals a report and publishes it (or leaves it in the outbox until connected). */
void link_report(struct link *l, const char *job, enum job_status status, const char *response);
/* link_report with the cause of an edge_error (docs/mqtt.md "Status report"; NULL: none). */
void link_report_cause(struct link *l, const char *job, enum job_status status,
		       const char *response, const char *error);
/* An edge_running report of a download with "progress": {"done", "total"} (bytes). */
void link_report_progress(struct link *l, const char *job, const char *response, int64_t done,
			  int64_t total);
/* The "rebooting" report of a job going into its next phase: edge_running with the job's
 * phase and within (docs/mqtt.md "Status report"). */
void link_report_rebooting(struct link *l, const char *job, long long within);
/* Subscribes to this device's artifact topics while a download goes through the broker (on:
 * returns once the broker answered, 5 s at most), or unsubscribes (off); every connect in
 * between subscribes again. */
void link_artifacts_subscribe(struct link *l, bool on);
/* Publishes a get of an artifact's bytes (QoS 0: what doesn't come is asked again). */
void link_artifact_get(struct link *l, const char *sha256, const char *payload);
/* Answers a repeated envelope with the job's final (or latest) report. */
void link_resend(struct link *l, const char *job);
/* Sends an edge_error the journal could not take, straight away, best effort. */
void link_refuse_unjournaled(struct link *l, const char *job, const char *reason);
/* The device's attributes for its state messages (docs/mqtt.md "Device state"): published
 * at once when they differ from those held and connected. Any thread. */
void link_set_attributes(struct link *l, json_object *attrs);
/* Republishes the retained state (online: the tags changed; only while link_online, else
 * nothing: the state says online once the subscriptions are granted). */
void link_publish_state(struct link *l, bool online);

#endif
