/*
 * store_downloads.h - what the store keeps of devices' downloads of artifacts (docs/api.md,
 * "Device downloads"; store_downloads.c): the secrets artifact tokens are made with, which
 * artifacts a job's task version pins, and the bytes served per job and artifact (the cap of
 * 3x, the audit record once). See store.h.
 */
#ifndef RCS_STORE_DOWNLOADS_H
#define RCS_STORE_DOWNLOADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define STORE_TOKEN_SECRET_HEX 64 /* a secret: 32 random bytes as hex */
#define STORE_TOKEN_SECRETS    8  /* the newest ones kept in use */

/* The token secrets, newest first, at most max, into out (hex, NUL-terminated); when there is
 * none, one is made (32 random bytes) and stored first, so every coordinator of a database
 * shares them. *n: how many. */
enum rcs_err store_token_secrets(struct store *st, int64_t now,
				 char (*out)[STORE_TOKEN_SECRET_HEX + 1], size_t max, size_t *n);
/* Adds a new secret (the newest signs from then on; the others still verify). */
enum rcs_err store_token_secret_add(struct store *st, int64_t now);

/* Whether the task version of job pins the artifact sha256 (hex): *size its bytes, *total the
 * bytes of all the artifacts that version pins; RCS_ERR_NOTFOUND when it does not. */
enum rcs_err store_job_artifact(struct store *st, const char *job, const char *sha256,
				long long *size, long long *total);
/*
 * A download of len bytes of sha256 for job begins: *served gets the bytes served (or being
 * served) for the job so far, all artifacts together, before this one; unless they reach
 * cap, len is added to them (held by this download until store_job_download_end) and
 * *first tells whether it is the job's first download of that artifact (to audit once).
 * In the caller's transaction, or one of its own.
 */
enum rcs_err store_job_download_begin(struct store *st, const char *job, const char *sha256,
				      long long len, long long cap, long long *served, bool *first);
/* The download ended having sent sent of its len bytes: the rest is given back. */
enum rcs_err store_job_download_end(struct store *st, const char *job, const char *sha256,
				    long long len, long long sent);

#endif
