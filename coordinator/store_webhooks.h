/*
 * store_webhooks.h - the store's webhooks (docs/api.md, "Webhooks") and their deliveries with every
 * attempt (store_webhooks.c; the sender's due query is in store_queues.h). See store.h.
 */
#ifndef RCS_STORE_WEBHOOKS_H
#define RCS_STORE_WEBHOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* What a webhook is saved with; JSON members are JSON text the API checked (events and
 * statuses: arrays of strings). */
struct webhook_write {
	const char *ident;
	const char *client_root;
	const char *url;
	const char *events;
	const char *statuses;
	const char *secret;
	const char *created_user;
	int64_t now;
};
/* A webhook as the API shows it: never its secret. Free with store_webhook_rec_free. */
struct webhook_rec {
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *url;
	char *events;   /* array of strings */
	char *statuses; /* array of strings, [] for all */
	bool active;
	char *created_user;
	int64_t created_at, update_at;
};
void store_webhook_rec_free(struct webhook_rec *r);
struct store_webhook_list {
	struct store_page_info pg;
	struct webhook_rec *items;
	size_t n;
};
void store_webhook_list_free(struct store_webhook_list *l);
enum rcs_err store_webhook_insert(struct store *st, const struct webhook_write *w);
enum rcs_err store_webhook_get(struct store *st, const char *client_root, const char *ident,
			       struct webhook_rec *out);
/* Changes what is not NULL (active: -1 unchanged, 0 or 1). */
enum rcs_err store_webhook_update(struct store *st, const char *client_root, const char *ident,
				  const char *url, const char *events, const char *statuses,
				  const char *secret, int active, int64_t now);
/* Deletes the webhook with its deliveries and their attempts. */
enum rcs_err store_webhook_delete(struct store *st, const char *client_root, const char *ident);
enum rcs_err store_webhooks_list(struct store *st, const char *client_root,
				 const struct store_page *pg, struct store_webhook_list *out);

/* One attempt to deliver: when, how long, the receiver's HTTP status (0: no answer) and the
 * error (NULL: a 2xx answer). */
struct webhook_attempt_rec {
	int64_t at;
	long long duration_ms;
	long long status_code;
	char *error;
};
/* A delivery with its attempts (state queued, delivered or failed). */
struct webhook_delivery_rec {
	long long id; /* the store's row (not shown by the API) */
	char ident[UUID_STR_LEN];
	char *type;                 /* job.status or group.status */
	char subject[UUID_STR_LEN]; /* the job or group */
	char *status;               /* the status the event is about */
	int64_t at;                 /* when the status changed */
	char *state;
	long long n_attempts;
	int64_t created_at, next_at, done_at;
	char *last_error;
	struct webhook_attempt_rec *attempts;
	size_t n;
};
struct store_webhook_delivery_list {
	struct store_page_info pg;
	struct webhook_delivery_rec *items;
	size_t n;
};
void store_webhook_delivery_list_free(struct store_webhook_delivery_list *l);
/* The webhook's deliveries, newest first, each with every attempt. */
enum rcs_err store_webhook_deliveries(struct store *st, const char *client_root, const char *ident,
				      const struct store_page *pg,
				      struct store_webhook_delivery_list *out);

/* Records a job.status delivery of the job's history item n (status, at) for every active
 * webhook of the tenant that wants it, in the status change's transaction
 * (lifecycle_move_follow). */
enum rcs_err store_webhook_job_event(struct store *st, const char *client_root, const char *job,
				     long long n, const char *status, int64_t at);
/*
 * Records a group.status delivery for every webhook of the tenant that wants it, in the
 * caller's transaction (the status change's): called wherever a group's status changes.
 */
enum rcs_err store_webhook_group_event(struct store *st, const char *client_root,
				       const char *group_ident, const char *status, int64_t now);
/* Records an attempt and the delivery's new state (queued: retry at next_at). */
enum rcs_err store_webhook_attempt(struct store *st, long long id,
				   const struct webhook_attempt_rec *a, const char *state,
				   int64_t next_at);
/* Queued deliveries (the backlog). */
enum rcs_err store_webhook_backlog(struct store *st, long long *n);

#endif
