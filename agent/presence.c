/*
 * presence.c - when the agent may say it is online. See presence.h and
 * docs/mqtt.md, "Connection sequence".
 */
#include <string.h>

#include "presence.h"

void presence_connect(struct presence *p, uint64_t conn, unsigned nfilters)
{
	memset(p, 0, sizeof(*p));
	p->conn = conn;
	p->nfilters = nfilters > PRESENCE_MAX_FILTERS ? PRESENCE_MAX_FILTERS : nfilters;
}

void presence_lost(struct presence *p)
{
	p->online = false;
	p->conn = 0;
}

enum presence_act presence_suback(struct presence *p, uint64_t conn, unsigned index, bool granted)
{
	unsigned all = (1u << p->nfilters) - 1u;
	enum presence_act act = PRESENCE_NONE;

	if (conn == 0 || conn != p->conn || index >= p->nfilters || p->online)
		goto out;
	if (!granted) {
		p->refusals++;
		if (!p->offline_said) {
			p->offline_said = true;
			act = PRESENCE_OFFLINE;
		}
		goto out;
	}
	p->granted |= 1u << index;
	if (p->granted == all) {
		p->online = true;
		act = PRESENCE_ONLINE;
	}
out:
	return act;
}

bool presence_online(const struct presence *p)
{
	return p->conn != 0 && p->online;
}
