/*
 * metrics.h - the coordinator's metrics in the Prometheus text format (docs/coordinator.md,
 * "Metrics"), served by GET /metrics on --metrics-listen.
 *
 * The other modules count into this one (counters and histograms kept here, under one
 * lock, for the life of the process); the gauges (jobs per status, devices online, the
 * outboxes' backlogs, the database's size) are read from the store at each scrape. No
 * label names a tenant or a device.
 */
#ifndef RCS_METRICS_H
#define RCS_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"
#include "status.h"
#include "store.h"

/* An API request answered with code after seconds. */
void metrics_http(const char *method, int code, double seconds);
/* Asks probe(ctx) at each scrape whether the broker is connected (NULL: not). */
void metrics_mqtt_probe(bool (*probe)(void *ctx), void *ctx);
/* A message came in or went out. */
void metrics_mqtt_in(void);
void metrics_mqtt_out(void);
/* n envelopes sent again early: no device acknowledged them (docs/mqtt.md "Delivery
 * guarantees"). */
void metrics_resent_unacked(size_t n);
/* Several brokers and coordinators (docs/mqtt.md "Several brokers"): a status report came
 * in; reports come through the shared subscription (or not); the broker connected to (NULL:
 * none). */
void metrics_mqtt_report_in(void);
void metrics_mqtt_shared(bool shared);
void metrics_mqtt_broker(const char *url);
/* A job came to status to. */
void metrics_job_status(enum job_status to);
/* n jobs came to status to. */
void metrics_job_statuses(enum job_status to, size_t n);
/* A job reached its device (due -> edge_transmitted) / ran (edge_started -> end). */
void metrics_job_delivery_latency(double seconds);
void metrics_job_run_time(double seconds);

/*
 * The moments the two histograms measure from, to the millisecond (the store keeps whole
 * seconds): a job became due to go out (created to be sent now, or released by its
 * rollout, its window or its retry's backoff), or its device started it. Kept in memory,
 * in a bounded table per kind (METRICS_CLOCK_SLOTS, one job per slot, the newer taking
 * the slot): a job the table no longer holds, or whose moment another coordinator saw, is
 * measured from its stored times (docs/coordinator.md "Metrics").
 */
#define METRICS_CLOCK_SLOTS 32768
enum metrics_clock { METRICS_DUE, METRICS_STARTED };
/* Now (Unix ms) is the moment of kind for job ident. */
void metrics_clock_mark(enum metrics_clock kind, const char *ident);
/* Seconds from the moment of kind of job ident to now, the moment forgotten; < 0 when the
 * table doesn't hold it. */
double metrics_clock_take(enum metrics_clock kind, const char *ident);
/* A webhook delivery attempt: delivered or not; failed for good. */
void metrics_webhook_attempt(bool delivered, bool failed);

/* n bytes of an artifact stored by an upload (uploaded), or sent in an answer. */
void metrics_artifact_bytes(bool uploaded, unsigned long long n);
/* A device's download of an artifact began (+1) or ended (-1). */
void metrics_artifact_download(int delta);
/* A get of an artifact's chunk over MQTT was answered (answer: "data", or an error code:
 * "busy", "job_terminal", "not_found", "bad_request") or dropped ("dropped"). */
#define METRICS_GET_ANSWERS 6
void metrics_artifact_get(const char *answer);
/* Appends v as a label value of the text format: backslash, double quote and line feed
 * escaped (\\, \", \n). Every label value the exposition writes goes through it. */
void metrics_label(struct buf *b, const char *v);

/* The whole exposition, the store's gauges read now, appended to out. */
enum rcs_err metrics_render(struct store *st, struct buf *out);
/* The families named (n of them; none: all) only, the store read only for the store's
 * gauges among them (docs/coordinator.md "Metrics": GET /metrics?name=...). */
#define METRICS_NAMES_MAX 16
enum rcs_err metrics_render_names(struct store *st, const char *const *names, size_t n,
				  struct buf *out);

struct metrics_server;
/* Serves GET /metrics on listen ("HOST:PORT"). */
enum rcs_err metrics_serve(const char *listen, struct store *st, struct metrics_server **out);
void metrics_stop(struct metrics_server *m);

#endif
