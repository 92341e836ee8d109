/*
 * art_token.h - artifact tokens (docs/mqtt.md, "Artifact token"; art_token.c): what
 * authorizes a device to download its job's artifacts. A token is "rcs1." and the base64url
 * (no padding) of the job's, the device's and the tenant's UUIDs (16 bytes each), the issue
 * time (8 bytes, big-endian Unix seconds) and an HMAC-SHA256 of those 56 bytes under a
 * secret kept in the database (store_downloads.h), so every coordinator of a database makes
 * and accepts the same tokens. The newest secret signs; every secret kept verifies, in
 * constant time. A token is never logged, nor written to an event, a webhook, a job record or
 * an audit row: it lives in envelopes only. Thread-safe.
 */
#ifndef RCS_ART_TOKEN_H
#define RCS_ART_TOKEN_H

#include <stdint.h>

#include "err.h"
#include "store.h"
#include "uuid.h"

#define ART_TOKEN_MAX 160 /* "rcs1." + 118 base64url characters + NUL, rounded up */

struct art_tokens;

/* Reads the secrets of st (making the first one when there is none). */
enum rcs_err art_tokens_open(struct store *st, int64_t now, struct art_tokens **out);
void art_tokens_free(struct art_tokens *t);

/* The token of job for device of tenant, issued at now, into out. RCS_ERR_INVAL for an
 * ident that is not a UUID. */
enum rcs_err art_token_make(struct art_tokens *t, const char *job, const char *device,
			    const char *tenant, int64_t now, char out[ART_TOKEN_MAX]);
/* RCS_OK with the job's, device's and tenant's idents (lowercase) when token is one of ours;
 * RCS_ERR_AUTH when it is not (malformed, or no secret's HMAC matches: the secrets are read
 * again from the store at most every few seconds, for one another coordinator added). */
enum rcs_err art_token_check(struct art_tokens *t, const char *token, char job[UUID_STR_LEN],
			     char device[UUID_STR_LEN], char tenant[UUID_STR_LEN]);

#endif
