/*
 * store_outbox.h - the store's e-mail outbox, for the notifier (store_outbox.c; its due query and
 * claims are in store_queues.h). See store.h.
 */
#ifndef RCS_STORE_OUTBOX_H
#define RCS_STORE_OUTBOX_H

#include <stdint.h>

#include "store.h"

/* Records the notifications a job's new status triggers, in the status change's transaction
 * (lifecycle_move_follow). */
enum rcs_err store_notifications_record(struct store *st, const char *job, const char *status,
					int64_t now);
/* When the next queued notification is due (0: none). */
enum rcs_err store_notification_next(struct store *st, int64_t *next);
/* Records an attempt: state queued (retry at next_at), sent, failed or suppressed. */
enum rcs_err store_notification_update(struct store *st, long long id, const char *state,
				       int64_t now, int64_t next_at, const char *error);
/* Mails sent for the tenant since the given time (the hourly cap). */
enum rcs_err store_notifications_sent_since(struct store *st, const char *client_root,
					    int64_t since, long long *n);
/* Queued e-mail notifications. */
enum rcs_err store_notification_backlog(struct store *st, long long *n);

#endif
