/*
 * fetch_mqtt.h - an artifact's bytes through the broker, for devices that reach only it
 * (docs/agent.md "Artifacts over MQTT"; the topics are docs/mqtt.md's): the agent publishes
 * {"v":1,"job","offset","length"} (length at most FETCH_MQTT_CHUNK) on
 * rcs/v1/<client_root>/<entity_ident>/artifacts/<sha256>/get, keeps FETCH_MQTT_WINDOW of them
 * in flight, and takes the raw bytes from .../artifacts/<sha256>/data/<offset> or an error
 * {"v":1,"job","code","message"} from .../artifacts/<sha256>/error. What doesn't come is
 * asked for again. The bytes go into the part file in order (fetch.h), as over HTTP.
 *
 * A channel connects the MQTT thread (fetch_mqtt_deliver, fetch_mqtt_error) with the thread
 * downloading (fetch_mqtt_get); its lock guards the window.
 */
#ifndef RCS_AGENT_FETCH_MQTT_H
#define RCS_AGENT_FETCH_MQTT_H

#include <stddef.h>
#include <stdint.h>

#include "fetch.h"

#define FETCH_MQTT_CHUNK    65536 /* bytes asked for at once, the most a get may ask */
#define FETCH_MQTT_WINDOW   8     /* gets in flight */
#define FETCH_MQTT_REASK_MS 5000  /* a get unanswered this long is sent again */
#define FETCH_MQTT_STALL_MS 60000 /* no byte this long: the request ends FETCH_RETRY */

struct fetch_mqtt_chan;

/* A channel (its window's buffers: FETCH_MQTT_WINDOW x FETCH_MQTT_CHUNK bytes); NULL when out
 * of memory. */
struct fetch_mqtt_chan *fetch_mqtt_chan_new(void);
void fetch_mqtt_chan_free(struct fetch_mqtt_chan *c);

/* From the MQTT thread: the bytes of .../artifacts/<sha256>/data/<offset>; kept when they
 * answer a get in flight of the download in progress, else dropped. */
void fetch_mqtt_deliver(struct fetch_mqtt_chan *c, const char *sha256, int64_t offset,
			const void *data, size_t len);
/* From the MQTT thread: the payload of .../artifacts/<sha256>/error. */
void fetch_mqtt_error(struct fetch_mqtt_chan *c, const char *sha256, const char *payload,
		      size_t len);

struct fetch_mqtt_req {
	struct fetch_mqtt_chan *chan;
	const char *job; /* the job ident the gets name */
	int cancel_fd;
	int64_t deadline_ms;
	int64_t max_rate; /* bytes/s, 0: none (artifact_max_rate: the gets are paced) */
	fetch_journal_fn journal;
	void (*progress)(void *ctx, int64_t offset);
	/* publishes a get (its payload, NUL-terminated) for sha256; errors are not fatal: what
	 * doesn't come is asked again */
	void (*publish_get)(void *ctx, const char *sha256, const char *payload);
	void *ctx;
};

/* What p lacks, through the broker, until it is complete or the request ends (the outcomes
 * of fetch.h: FETCH_RETRY on a busy answer or a stall, FETCH_REFUSED for job_terminal,
 * not_found or bad_request, FETCH_INVALID for bytes that are not the size asked). */
void fetch_mqtt_get(const struct fetch_mqtt_req *req, struct fetch_part *p,
		    struct fetch_result *res);

#endif
