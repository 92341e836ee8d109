/*
 * notifier.h - e-mail notifications of job status changes, over SMTP (libcurl).
 *
 * The store records one notification per (job, status, address) in the same
 * transaction as the status change (the outbox). This module's thread sends
 * them: retries with exponential backoff, a per-tenant cap on mails per hour
 * (beyond it: "suppressed"), and never the same row twice once it is sent. An
 * SMTP server that is down, slow or failing only delays mails: nothing of the
 * API or the job flow waits for it.
 */
#ifndef RCS_NOTIFIER_H
#define RCS_NOTIFIER_H

#include "err.h"
#include "lifecycle.h"
#include "store.h"

struct job_rec;

struct notifier_opts {
	const char *smtp_url; /* smtp://host:port or smtps://host:port */
	const char *from;     /* envelope sender and From: */
	const char *username; /* may be NULL */
	const char *password;
	long long max_per_hour; /* per tenant; 0: unlimited */
	int max_attempts;       /* then "failed" (default 10) */
	int retry_base;         /* seconds before the first retry, doubling (default 30) */
	int timeout;            /* seconds for one SMTP exchange (default 30) */
};

struct notifier;

/* Starts the sender thread and plugs into lc (lc->changed wakes it). */
enum rcs_err notifier_start(const struct notifier_opts *opts, struct store *st,
			    struct lifecycle *lc, struct notifier **out);
void notifier_stop(struct notifier *n);

/* The mail for one notification, for tests: headers and body (malloc'd, CRLF lines). */
char *notifier_format(const char *from, const char *to, const struct job_rec *job,
		      const char *device_name, const char *status, int64_t now,
		      const char *message_id);

#endif
