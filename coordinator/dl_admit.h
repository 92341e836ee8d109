/*
 * dl_admit.h - which of a device's download requests over MQTT may go out, and when
 * (docs/mqtt.md, "Artifacts over MQTT (the coordinator's side)"; dl_admit.c): at most
 * DL_ADMIT_INFLIGHT chunks in flight per device (admitted, not yet published) and a byte
 * rate per device; more is answered `busy`. A group's `download` limits (docs/api.md) are
 * held after it, by dl_limits.h, which the HTTP route asks too.
 * Worker-thread only (not locked).
 */
#ifndef RCS_DL_ADMIT_H
#define RCS_DL_ADMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DL_ADMIT_INFLIGHT 8    /* chunks in flight per device */
#define DL_ADMIT_DEVICES  4096 /* devices with chunks in flight or paced at once */

struct dl_admit;

/* rate: bytes per second per device (0: no limit). NULL on no memory. */
struct dl_admit *dl_admit_new(long long rate);
void dl_admit_free(struct dl_admit *a);

/* What a request asks for: len bytes of job's artifact, for device of tenant. */
struct dl_ask {
	const char *tenant, *device, *job;
	size_t len;
};

/*
 * Whether the chunk may go out, asked at now_us (CLOCK_MONOTONIC, microseconds): true with
 * *at_us, when it may be published (the device's byte rate: never before now_us), its place
 * among the device's chunks in flight held until dl_admit_done; false (`busy`) when the
 * device has DL_ADMIT_INFLIGHT chunks in flight, or DL_ADMIT_DEVICES other devices have.
 */
bool dl_admit(struct dl_admit *a, const struct dl_ask *ask, int64_t now_us, int64_t *at_us);
/* The chunk admitted for device went out (or was dropped): its place is free. */
void dl_admit_done(struct dl_admit *a, const char *device);
/* The chunks in flight for device (tests, logs). */
int dl_admit_inflight(const struct dl_admit *a, const char *device);

#endif
