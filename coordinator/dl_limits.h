/*
 * dl_limits.h - a group's download limits, held by the coordinator that serves the downloads
 * (docs/api.md, "Download limits"): at most max_concurrent devices of the group downloading
 * at once, and max_bytes_per_s shared by them. The accounting of one coordinator, kept in
 * memory (several coordinators serving one group each hold it to the limits on their own).
 * Every transport asks the same questions: the HTTP route (api_device.c) and the MQTT chunks.
 * Thread-safe.
 */
#ifndef RCS_DL_LIMITS_H
#define RCS_DL_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* A device downloads from its first admitted request until DL_IDLE_MS without a request in
 * flight, or DL_DONE_MS after a request that delivered an artifact's last byte (time to ask
 * for the job's next artifact without losing its place). */
#define DL_IDLE_MS 30000
#define DL_DONE_MS 2000
/* The bounds of a group's limits (docs/api.md "Download limits") */
#define DL_MAX_CONCURRENT 1000000
#define DL_MIN_RATE       1024LL
#define DL_MAX_RATE       (1LL << 40)
/* Retry-After of a refusal when no slot's end can be foreseen (all in flight) */
#define DL_RETRY_S 5

/* A group's limits; 0: none. */
struct dl_limit {
	long long max_concurrent;
	long long max_bytes_per_s;
};

struct dl_limits;

enum rcs_err dl_limits_new(struct dl_limits **out);
void dl_limits_free(struct dl_limits *l);

/* The admission of a request of device (an ident) for a job of group (an ident) at now_ms
 * (a monotonic clock, milliseconds): true when the device is downloading already or a place
 * is free (the device then holds a place, its request counted in flight until
 * dl_limits_end); false when max_concurrent other devices hold the places: *retry_after_s
 * (1..DL_IDLE_MS/1000) says when one is likely to be free. No limit: always true (counted
 * too, so that a group's limits apply to what is under way when they are read). */
bool dl_limits_admit(struct dl_limits *l, const char *group, const char *device,
		     const struct dl_limit *lim, int64_t now_ms, int *retry_after_s);
/* An admitted request ended at now_ms; complete: it delivered an artifact's last byte. */
void dl_limits_end(struct dl_limits *l, const char *group, const char *device, bool complete,
		   int64_t now_ms);
/* The group's rate: of want bytes, how many may be sent at now_ms (0..want), taken from
 * the group's bucket (it fills at `rate` bytes per second and holds at most one second's
 * worth). 0: *wait_ms (>= 1) until some may. rate 0: want, no limit. */
size_t dl_limits_take(struct dl_limits *l, const char *group, long long rate, size_t want,
		      int64_t now_ms, int64_t *wait_ms);
/* The group's rate for a transport that cannot send part of what it was asked for (the MQTT
 * chunks: a chunk goes whole): bytes taken from the group's bucket at once, which may go
 * below empty; the milliseconds until they are due (0: now). The HTTP route's takes then
 * wait for the bucket to fill again. rate 0: 0. */
int64_t dl_limits_reserve(struct dl_limits *l, const char *group, long long rate, size_t bytes,
			  int64_t now_ms);
/* How many devices of the group download at now_ms (metrics and tests). */
size_t dl_limits_active(struct dl_limits *l, const char *group, int64_t now_ms);

#endif
