/*
 * service.h - telling the service manager how the daemon is doing
 * (docs/deploy.md, "The units"): readiness, reloads and stops as systemd's
 * sd_notify() messages, for units of Type=notify.
 *
 * Outside systemd ($NOTIFY_SOCKET unset) and in builds without libsystemd
 * (WITH_SYSTEMD=OFF: the static agent) every call does nothing. Calls are
 * thread-safe and never fail the caller.
 */
#ifndef RCS_SERVICE_H
#define RCS_SERVICE_H

#include <signal.h>
#include <stdbool.h>

/* How long a daemon waits for its broker before it says it is ready all the same (seconds). */
#define SERVICE_READY_WAIT 30

/* READY=1 with status as STATUS= (the line `systemctl status` shows). */
void service_ready(const char *status);
/* RELOADING=1: a SIGHUP reload begins; service_ready() ends it. */
void service_reloading(void);
/* STOPPING=1: the daemon is shutting down. */
void service_stopping(void);
/* STATUS= alone. */
void service_status(const char *status);
/* True when the daemon runs under a service manager that takes these messages. */
bool service_managed(void);

/*
 * sigwait() with a timeout: 0 and the signal in *sig, or -1 when timeout_ms
 * passed (or a wait was interrupted) without one. timeout_ms < 0 waits for ever.
 */
int service_sigwait(const sigset_t *set, int timeout_ms, int *sig);

#endif
