/*
 * dl_pacer.h - the pace of the device downloads of a group with a byte rate (docs/api.md,
 * "Download limits"): a download whose group's bytes are spent for now is suspended
 * (libmicrohttpd's suspend, so that no thread of the listener waits) and resumed when its
 * group's bucket holds bytes again. Every suspended connection is resumed before the
 * listeners stop (dl_pacer_stop).
 */
#ifndef RCS_DL_PACER_H
#define RCS_DL_PACER_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

struct dl_pacer;

/* A pacer and its thread. */
enum rcs_err dl_pacer_start(struct dl_pacer **out);
/* Resumes every connection it holds and suspends none from then on (before the listeners
 * stop); then joins its thread. */
void dl_pacer_stop(struct dl_pacer *p);
void dl_pacer_free(struct dl_pacer *p);
/* From a response's content reader: suspends conn (a struct MHD_Connection) until wake_ms
 * (CLOCK_MONOTONIC, milliseconds). false when the pacer stops (or memory runs out): conn is
 * not suspended (the reader then ends the response). */
bool dl_pacer_sleep(struct dl_pacer *p, void *conn, int64_t wake_ms);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t dl_pacer_now_ms(void);

#endif
