/*
 * chunks.h - the coordinator's side of the artifact download over MQTT (docs/mqtt.md,
 * "Artifacts over MQTT (the coordinator's side)"; chunks.c, chunks_get.c): the devices' gets
 * on rcs/v1/+/+/artifacts/+/get are checked as the HTTP route checks its requests
 * (art_serve.h), admitted per device (dl_admit.h) and answered at QoS 0, with the bytes on
 * .../data/<offset> or an error on .../error, over an MQTT connection of their own: the
 * envelopes and cancels of the bridge (mqtt_bridge.h) never wait behind chunks, and no get
 * waits behind the reports.
 */
#ifndef RCS_CHUNKS_H
#define RCS_CHUNKS_H

#include "dl_limits.h"
#include "err.h"
#include "mqtt_bridge.h"
#include "mqttc.h"
#include "store.h"

struct chunks_opts {
	struct mqttc_opts mqtt; /* the connection's own client id and user */
	long long rate;         /* bytes per second per device (0: no limit) */
	const char *artifact_dir;
	/* the groups' download limits this coordinator holds (docs/api.md "Download limits"),
	 * shared with the HTTP route; NULL: none */
	struct dl_limits *dl;
	/* the bridge whose probe tells whether the broker delivers on shared subscriptions
	 * (NULL: it does not) */
	struct bridge *bridge;
};

struct chunks;

/* Connects (in the background) and starts the worker. */
enum rcs_err chunks_start(const struct chunks_opts *opts, struct store *st, struct chunks **out);
/* Disconnects, stops the worker, frees. NULL is fine. */
void chunks_stop(struct chunks *c);

#endif
