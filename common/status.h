/*
 * status.h - the job status table shared by both daemons.
 *
 * Order: initial < pending < transmited < edge_transmitted < edge_started <
 * edge_running < {terminated, edge_error, cancelled, expired}. The four last
 * are terminal. "transmited" is spelled as the specification spells it.
 */
#ifndef RCS_STATUS_H
#define RCS_STATUS_H

#include <stdbool.h>

enum job_status {
	JS_INITIAL = 0,
	JS_PENDING,
	JS_TRANSMITED,
	JS_EDGE_TRANSMITTED,
	JS_EDGE_STARTED,
	JS_EDGE_RUNNING,
	JS_TERMINATED,
	JS_EDGE_ERROR,
	JS_CANCELLED,
	JS_EXPIRED,
	JS__COUNT
};

/* Name as written on the API and in MQTT payloads; "unknown" when out of range. */
const char *status_name(enum job_status s);
/* Parses an exact status name. Returns false for anything else. */
bool status_parse(const char *name, enum job_status *out);
/* Position in the order above; all terminal statuses share the highest rank. */
int status_rank(enum job_status s);
bool status_is_terminal(enum job_status s);
/* True for the statuses an agent may report (edge_*, terminated). */
bool status_is_device(enum job_status s);
/*
 * True when a job in status cur may move to next: next ranks after cur and
 * cur is not terminal. edge_running -> edge_running is allowed (progress).
 */
bool status_can_move(enum job_status cur, enum job_status next);

#endif
