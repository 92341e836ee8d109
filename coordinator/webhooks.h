/*
 * webhooks.h - webhook deliveries over HTTP(S) (libcurl) and the guard of their addresses
 * (docs/api.md, "Webhooks"; docs/integrations.md).
 *
 * The store records one delivery per webhook and job history item (or group status) in the
 * transaction of the change (the outbox, store_webhooks.c). This module's thread sends them:
 * a POST of {"id", "type", "ts", "data"} signed with HMAC-SHA256 (header rcs-signature,
 * "t=<ts>,v1=<hex>" over "<ts>.<body>"), the delivery's id in rcs-delivery; at most
 * max_inflight at once (per_hook of them for one webhook), in parallel across jobs and one
 * at a time in order per webhook and job, each bounded by a timeout; a slot is filled again
 * as soon as its transfer ends (docs/api.md, "Webhooks"); a timeout, a refused address or an answer
 * other than 2xx is retried with doubling backoff until give_up seconds after the change, then the
 * delivery is failed. Redirects are never followed. Nothing of the API or the job flow waits for
 * it.
 *
 * The guard (struct webhook_guard): a webhook's URL is http or https, and every address its
 * host resolves to, and the address each connection is made to, is neither loopback,
 * private, link-local, shared (CGNAT), multicast, reserved nor a cloud metadata address,
 * unless one of the --webhook-allow-net networks holds it.
 */
#ifndef RCS_WEBHOOKS_H
#define RCS_WEBHOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "err.h"
#include "store.h"

#define WEBHOOK_URL_MAX       2048
#define WEBHOOK_WHY_MAX       256
#define WEBHOOK_SIG_MAX       128 /* "t=<ts>,v1=<64 hex>" */
#define WEBHOOKS_MAX_INFLIGHT 256 /* --webhook-max-inflight's default */
#define WEBHOOKS_PER_HOOK     64  /* --webhook-per-hook's default */

struct webhook_guard;

/* The guard allowing the networks cidrs[0..n-1] ("10.0.0.0/8", "::1/128", an address alone
 * is /32 or /128): RCS_ERR_INVAL with the bad one named in why. Free with
 * webhook_guard_free. */
enum rcs_err webhook_guard_new(const char *const *cidrs, size_t n, struct webhook_guard **out,
			       char *why, size_t why_len);
void webhook_guard_free(struct webhook_guard *g);
/* Whether a connection to sa may be made; the reason in why when not. */
bool webhook_addr_allowed(const struct webhook_guard *g, const struct sockaddr *sa, char *why,
			  size_t why_len);
/* A URL a webhook may be saved with: http(s), a host, no user:password, every address of
 * the host allowed. RCS_ERR_INVAL with the reason in why. */
enum rcs_err webhook_url_check(const struct webhook_guard *g, const char *url, char *why,
			       size_t why_len);

/* The rcs-signature header's value for body sent at ts: "t=<ts>,v1=<hex HMAC-SHA256>". */
enum rcs_err webhook_sign(const char *secret, int64_t ts, const char *body, size_t len,
			  char out[WEBHOOK_SIG_MAX]);

struct webhooks_opts {
	const struct webhook_guard *guard;
	int retry_base;   /* seconds before the first retry, doubling up to an hour (default 10) */
	int give_up;      /* seconds after the change a delivery is failed (default 86400) */
	int timeout;      /* seconds for one attempt (default 10) */
	int max_inflight; /* deliveries at once (default WEBHOOKS_MAX_INFLIGHT) */
	int per_hook;     /* of them for one webhook (default WEBHOOKS_PER_HOOK) */
};

struct lifecycle;
struct webhooks;

/* Starts the sender's thread and plugs into lc (a status change wakes it). */
enum rcs_err webhooks_start(const struct webhooks_opts *opts, struct store *st,
			    struct lifecycle *lc, struct webhooks **out);
void webhooks_stop(struct webhooks *w);

#endif
