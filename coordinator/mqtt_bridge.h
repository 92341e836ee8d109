/*
 * mqtt_bridge.h - the coordinator's MQTT transport (docs/mqtt.md).
 *
 * Plugs into the job lifecycle as its hooks: publishes job envelopes (one
 * job synchronously on the creating request, bulk sends from its own worker
 * thread), cancels and events; consumes device status reports and presence
 * (state topic and Last Will), applying them in batched transactions. The
 * scheduler (scheduler.c) says when due jobs and re-sends go out, through
 * the struct sched_transport that bridge_transport fills.
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

struct bridge_opts {
	struct mqttc_opts mqtt;
	size_t max_payload;   /* larger messages are logged and dropped */
	int64_t resend_after; /* seconds without news before a job's envelope is re-sent */
};

struct bridge;

/* Connects (in the background) and starts the worker; sets lc->hooks. */
enum rcs_err bridge_start(const struct bridge_opts *opts, struct store *st, struct lifecycle *lc,
			  struct bridge **out);
/* The bridge as the scheduler's transport (sched_set_transport). */
void bridge_transport(struct bridge *b, struct sched_transport *out);
/* True while the MQTT client is connected to the broker. */
bool bridge_connected(struct bridge *b);
/* Stops the worker (applying what was received), disconnects, frees; unsets lc->hooks. */
void bridge_stop(struct bridge *b);

#endif
