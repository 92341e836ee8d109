/*
 * mqtt_bridge.h - the coordinator's MQTT transport (docs/mqtt.md).
 *
 * Plugs into the job lifecycle as its hooks: publishes job envelopes (one
 * job synchronously on the creating request, bulk sends from its own worker
 * thread), cancels and events; consumes device status reports and presence
 * (state topic and Last Will), applying them in batched transactions. The
 * scheduler (scheduler.c) says when due jobs and re-sends go out, through
 * the struct sched_transport that bridge_transport fills.
 *
 * Made of bridge.c (life, worker, callbacks) and the parts bridge_int.h
 * describes, one file per concern.
 */
#ifndef RCS_MQTT_BRIDGE_H
#define RCS_MQTT_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "lifecycle.h"
#include "mqttc.h"
#include "scheduler.h"
#include "signer.h"
#include "store.h"

/* How status reports are subscribed to (docs/mqtt.md "Several coordinators"): through the
 * shared subscription $share/rcs-coordinators/... when the broker delivers on one (auto:
 * probed after each connect), always (yes) or never (no). */
enum bridge_shared { BRIDGE_SHARED_AUTO, BRIDGE_SHARED_YES, BRIDGE_SHARED_NO };

struct bridge_opts {
	struct mqttc_opts mqtt;
	size_t max_payload;   /* larger messages are logged and dropped */
	int64_t resend_after; /* seconds without news before a job's envelope is re-sent */
	/* seconds after its send before a job still transmited to an online device is sent
	 * again, once (0: never; docs/mqtt.md "Delivery guarantees") */
	int64_t resend_unacked_after;
	enum bridge_shared shared;
	/* the client id is the same at every start (node id given or kept, or a client id
	 * given): auto uses a shared subscription only then (docs/mqtt.md) */
	bool stable_client_id;
	int events_qos; /* QoS of the job and group events: 0 or 1 */
	/* job and group events waiting to be published from which devices' reports wait to be
	 * applied (0: 8192; docs/mqtt.md "Monitoring") */
	size_t events_backlog;
	/* this node's last run on a shared database did not stop cleanly: the reports on their
	 * way to its clean session were lost, the in-flight jobs are sent again */
	bool node_died;
	/* what makes the artifact tokens of envelopes (art_token.h); NULL: none made */
	struct art_tokens *tokens;
};

/* "auto", "yes" or "no" (NULL: auto) into *out; RCS_ERR_INVAL for anything else. */
enum rcs_err bridge_shared_parse(const char *s, enum bridge_shared *out);

struct bridge;

/* Connects (in the background) and starts the worker; sets lc->hooks. */
enum rcs_err bridge_start(const struct bridge_opts *opts, struct store *st, struct lifecycle *lc,
			  struct bridge **out);
/* The bridge as the scheduler's transport (sched_set_transport). */
void bridge_transport(struct bridge *b, struct sched_transport *out);
/* True while the MQTT client is connected to the broker, or reconnecting on purpose to change
 * its session (mqttc_up). */
bool bridge_connected(struct bridge *b);
/* The URL of the broker connected to, NULL while not connected (valid until bridge_stop). */
const char *bridge_broker(struct bridge *b);
/* True while status reports come through the shared subscription. */
bool bridge_shared_active(struct bridge *b);
/* Stops the worker (applying what was received), disconnects, frees; unsets lc->hooks. */
void bridge_stop(struct bridge *b);

#endif
