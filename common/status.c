#include "status.h"

#include <string.h>

static const struct {
	const char *name;
	int rank;
	bool terminal;
	bool device;
} status_table[JS__COUNT] = {
    [JS_INITIAL] = {"initial", 0, false, false},
    [JS_PENDING] = {"pending", 1, false, false},
    [JS_TRANSMITED] = {"transmited", 2, false, false},
    [JS_EDGE_TRANSMITTED] = {"edge_transmitted", 3, false, true},
    [JS_EDGE_STARTED] = {"edge_started", 4, false, true},
    [JS_EDGE_RUNNING] = {"edge_running", 5, false, true},
    [JS_TERMINATED] = {"terminated", 6, true, true},
    [JS_EDGE_ERROR] = {"edge_error", 6, true, true},
    [JS_CANCELLED] = {"cancelled", 6, true, false},
    [JS_EXPIRED] = {"expired", 6, true, false},
};

const char *status_name(enum job_status s)
{
	if ((unsigned)s >= JS__COUNT)
		return "unknown";
	return status_table[s].name;
}

bool status_parse(const char *name, enum job_status *out)
{
	if (name == NULL)
		return false;
	for (int i = 0; i < JS__COUNT; i++) {
		if (strcmp(status_table[i].name, name) == 0) {
			*out = (enum job_status)i;
			return true;
		}
	}
	return false;
}

int status_rank(enum job_status s)
{
	return (unsigned)s < JS__COUNT ? status_table[s].rank : -1;
}

bool status_is_terminal(enum job_status s)
{
	return (unsigned)s < JS__COUNT && status_table[s].terminal;
}

bool status_is_device(enum job_status s)
{
	return (unsigned)s < JS__COUNT && status_table[s].device;
}

bool status_can_move(enum job_status cur, enum job_status next)
{
	if ((unsigned)cur >= JS__COUNT || (unsigned)next >= JS__COUNT)
		return false;
	if (status_table[cur].terminal)
		return false;
	if (cur == JS_EDGE_RUNNING && next == JS_EDGE_RUNNING)
		return true;
	return status_table[next].rank > status_table[cur].rank;
}
