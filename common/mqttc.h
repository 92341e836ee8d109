/*
 * mqttc.h - the MQTT client both daemons use: paho.mqtt.c's asynchronous
 * client with a persistent session, TLS and credentials, and a reconnect
 * loop with exponential backoff and jitter.
 *
 * Callbacks run on paho's threads: keep them short. on_connected runs after
 * every successful (re)connect, with the broker's session-present flag: the
 * caller subscribes and re-publishes its state there. on_message returns
 * false to have paho deliver the message again later: no back-pressure, as
 * paho acknowledged it as it read it and reads on, and it hands a refused
 * message back only as a next packet arrives on the connection, one per
 * packet: for a message that cannot be taken at all (out of memory).
 */
#ifndef RCS_MQTTC_H
#define RCS_MQTTC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "err.h"

#define MQTTC_MAX_URLS 16 /* brokers one client may be given */

struct mqttc_opts {
	const char *url; /* tcp://host:port, ssl://host:port (mqtt:// and mqtts:// too) */
	/* Several brokers (docs/mqtt.md "Several brokers"): tried in this order at every
	 * (re)connect, the first that answers is used; when urls is NULL, url alone. */
	const char *const *urls;
	size_t nurls;
	const char *client_id; /* fixed: the broker keeps the session under it */
	const char *username;  /* may be NULL */
	const char *password;
	const char *cafile;   /* TLS: CA bundle to verify the broker; NULL: system default */
	const char *certfile; /* TLS client certificate, and its key */
	const char *keyfile;
	const char *key_passphrase; /* of an encrypted keyfile; NULL: none */
	int keepalive;              /* seconds (default 20) */
	int max_inflight; /* QoS 1 publishes not yet acknowledged; beyond, RCS_ERR_FULL (1000) */
	/* Last Will (NULL topic: none) */
	const char *will_topic;
	const char *will_payload;
	bool will_retained;
	double backoff_min; /* seconds between reconnect attempts: min..max, doubling, jittered */
	double backoff_max;
	/* TCP_NODELAY on the connection: each message leaves at once instead of waiting,
	 * behind an unacknowledged one, for the broker's delayed ACK (~40 ms) */
	bool nodelay;
	/* the session of the first connect is clean (it ends with the connection); false:
	 * persistent, as mqttc_reconnect can change later */
	bool clean;
};

struct mqttc_callbacks {
	void *ctx;
	void (*on_connected)(void *ctx, bool session_present);
	void (*on_lost)(void *ctx);
	bool (*on_message)(void *ctx, const char *topic, const void *payload, size_t len);
	/* A QoS 1 publish with a non-zero tag was acknowledged by the broker (ok) or failed. */
	void (*on_published)(void *ctx, uint64_t tag, bool ok);
	/* May be NULL. The Last Will of the connect about to be made (malloc'd, mqttc frees
	 * it; NULL: opts.will_payload): a will that says which connection it belongs to. */
	char *(*will_payload)(void *ctx);
	/* May be NULL. The broker answered one filter of mqttc_subscribe_tagged (tag, as given):
	 * granted, or refused in its SUBACK (0x80), in which case it is asked for again as
	 * mqttc_subscribe says and told again at each answer. */
	void (*on_suback)(void *ctx, uint64_t tag, const char *filter, bool granted);
};

struct mqttc;

/* Whether this build can use the broker URL (tcp://, ssl://, mqtt://, mqtts://; no TLS
 * in a WITH_TLS=OFF build). RCS_ERR_INVAL with the reason in err otherwise. */
enum rcs_err mqttc_url_check(const char *url, char *err, size_t errlen);
/* mqttc_url_check for each of a list of 1..MQTTC_MAX_URLS brokers, which must all use TLS
 * or none (paho keeps a client's TLS setting across the URLs it tries) and name no broker
 * twice (mqtt:// and tcp://, mqtts:// and ssl:// are the same). */
enum rcs_err mqttc_urls_check(const char *const *urls, size_t n, char *err, size_t errlen);

/* Creates the client and starts connecting in the background. *out is set before
 * that starts: the callbacks may already use it. */
enum rcs_err mqttc_start(const struct mqttc_opts *opts, const struct mqttc_callbacks *cb,
			 struct mqttc **out);
/* Stops reconnecting and disconnects (waiting up to timeout_ms for in-flight messages): no
 * callback comes after it returns. NULL is fine; mqttc_stop may follow. */
void mqttc_disconnect(struct mqttc *m, int timeout_ms);
/* Disconnects (as mqttc_disconnect, if not yet done) and frees. NULL is fine. */
void mqttc_stop(struct mqttc *m, int timeout_ms);
bool mqttc_connected(struct mqttc *m);
/* Connected, or reconnecting on purpose (mqttc_reconnect) until that connect's answer: what
 * a health check shows, so a change of session is not seen as the broker going away. */
bool mqttc_up(struct mqttc *m);
/* The URL of the broker connected to (tcp:// or ssl://, as tried), NULL while not
 * connected. Valid until mqttc_stop. */
const char *mqttc_server(struct mqttc *m);
/*
 * Queues a publish. RCS_ERR_BUSY when not connected (nothing is queued:
 * the caller keeps the message and sends it after the next on_connected);
 * RCS_ERR_FULL when the client's queue is full for now, or max_inflight QoS 1 publishes
 * wait for their acknowledgement (retry shortly, or after mqttc_wait_delivered).
 * tag (non-zero) is handed back in on_published.
 */
enum rcs_err mqttc_publish(struct mqttc *m, const char *topic, const void *payload, size_t len,
			   int qos, bool retained, uint64_t tag);
/*
 * Back-pressure without polling: mqttc_delivered() counts the QoS 1 publishes
 * the broker acknowledged; take it before a publish, and after RCS_ERR_FULL
 * wait with mqttc_wait_delivered() until the count moves past it (room in
 * the window) or the deadline (CLOCK_MONOTONIC) passes. True when it moved. When the
 * calling thread's publish was refused by paho's full queue of requests rather than by the
 * window (a burst of QoS 0 publishes, which nothing acknowledges), the wait is a few
 * milliseconds, and true while the deadline lasts: try again.
 */
uint64_t mqttc_delivered(struct mqttc *m);
bool mqttc_wait_delivered(struct mqttc *m, uint64_t seen, const struct timespec *deadline);

/*
 * The session of the connects to come: clean (true: it ends with the connection, MQTT 3.1.1
 * cleansession=1, so a client that dies leaves its subscriptions, shared ones too, at once)
 * or persistent (false, the default of a new client: the broker keeps its subscriptions and
 * queue while it is away). When connected, disconnects and connects again at once with it:
 * on_lost, then on_connected. RCS_ERR_IO when the disconnect could not be asked for.
 */
enum rcs_err mqttc_reconnect(struct mqttc *m, bool clean);
/* Whether the session of the connection there is (while none is: of the next connect) is clean. */
bool mqttc_clean(struct mqttc *m);

/* Subscribes to filters (QoS 1 each, one SUBSCRIBE a filter). A filter the broker refuses
 * in its SUBACK is asked for again (after 1, 2, 4 ... 30 s, with a warning) while the
 * connection lasts: NATS refuses one for a moment when the JetStream consumer it makes for a
 * QoS 1 subscription cannot be made in time (docs/scale-out.md, "Limits"). */
enum rcs_err mqttc_subscribe(struct mqttc *m, const char *const *filters, size_t n);
/* mqttc_subscribe, each SUBACK of each filter told to on_suback with tag (non-zero), the
 * refused ones' answers to the requests asked again too: a caller learns when all its
 * filters are granted on the connection it asked them on (its own tag for each). */
enum rcs_err mqttc_subscribe_tagged(struct mqttc *m, const char *const *filters, size_t n,
				    uint64_t tag);

/* Called once the broker answered a subscribe or unsubscribe (paho's thread): ok false
 * when it refused a filter, or the request was lost with the connection. */
typedef void (*mqttc_done_fn)(void *ctx, bool ok);
/* mqttc_subscribe, and done(ctx, ok) when the broker answered (done may be NULL). */
enum rcs_err mqttc_subscribe_cb(struct mqttc *m, const char *const *filters, size_t n,
				mqttc_done_fn done, void *ctx);
/* Unsubscribes from filters; done as for mqttc_subscribe_cb (may be NULL). */
enum rcs_err mqttc_unsubscribe(struct mqttc *m, const char *const *filters, size_t n,
			       mqttc_done_fn done, void *ctx);

#endif
