#include "service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef RCS_WITH_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static void service_send(const char *state)
{
#ifdef RCS_WITH_SYSTEMD
	/* 0: $NOTIFY_SOCKET stays set, for the agent's re-execution (docs/agent.md) */
	sd_notify(0, state);
#else
	(void)state;
#endif
}

void service_ready(const char *status)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status ? status : "ready");
	service_send(msg);
}

void service_reloading(void)
{
	service_send("RELOADING=1\nSTATUS=reloading");
}

void service_stopping(void)
{
	service_send("STOPPING=1\nSTATUS=stopping");
}

void service_status(const char *status)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "STATUS=%s", status);
	service_send(msg);
}

bool service_managed(void)
{
#ifdef RCS_WITH_SYSTEMD
	return getenv("NOTIFY_SOCKET") != NULL;
#else
	return false;
#endif
}

int service_sigwait(const sigset_t *set, int timeout_ms, int *sig)
{
	struct timespec ts;
	int s;

	if (timeout_ms < 0)
		return sigwait(set, sig) == 0 ? 0 : -1;
	ts.tv_sec = timeout_ms / 1000;
	ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
	s = sigtimedwait(set, NULL, &ts);
	if (s < 0)
		return -1;
	*sig = s;
	return 0;
}
