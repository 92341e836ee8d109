/*
 * presence.h - when the agent may say it is online (docs/mqtt.md, "Connection
 * sequence"): only once the broker granted, on the connection there is, every
 * filter the device needs to receive its jobs (its job and its cancel filter).
 * A device shown online with a filter refused would be sent jobs it never
 * receives.
 *
 * Pure bookkeeping, no MQTT and no lock: link.c feeds it the connects and the
 * SUBACKs (each connect's filters tagged with that connect's number) under its
 * own lock and does what each answer says.
 */
#ifndef RCS_AGENT_PRESENCE_H
#define RCS_AGENT_PRESENCE_H

#include <stdbool.h>
#include <stdint.h>

#define PRESENCE_MAX_FILTERS 8

struct presence {
	uint64_t conn;     /* the connect the filters were asked on (0: none yet) */
	unsigned nfilters; /* filters that must be granted, 1..PRESENCE_MAX_FILTERS */
	unsigned granted;  /* bit i: filter i granted on conn */
	bool online;       /* online said on conn */
	bool offline_said; /* offline said on conn, for a refusal */
	unsigned refusals; /* SUBACKs that refused a filter on conn */
};

/* What to publish after an answer: nothing, the retained online state, or the retained
 * offline state (a filter refused: an online state of an earlier connection must not stand). */
enum presence_act { PRESENCE_NONE, PRESENCE_ONLINE, PRESENCE_OFFLINE };

/* A connect (conn: later than any before, non-zero) whose nfilters filters were just asked
 * for: not online until all are granted. */
void presence_connect(struct presence *p, uint64_t conn, unsigned nfilters);
/* The connection was lost: not online (its Last Will says so). */
void presence_lost(struct presence *p);
/*
 * The SUBACK of filter index (0..nfilters-1) asked on conn: granted or refused. An answer
 * for another connect than the last one, or an index out of range, changes nothing
 * (PRESENCE_NONE). PRESENCE_ONLINE once, when the last of the filters is granted;
 * PRESENCE_OFFLINE at the first refusal of a connection while not online.
 */
enum presence_act presence_suback(struct presence *p, uint64_t conn, unsigned index, bool granted);
/* True while the agent may say it is online (every filter granted on this connection). */
bool presence_online(const struct presence *p);

#endif
