/*
 * uuid.h - identifiers and randomness.
 *
 * uuid_v7() makes a time-ordered RFC 9562 version 7 UUID (48-bit Unix ms,
 * then random bits), lowercase, 36 chars + NUL. Time ordering keeps SQLite's
 * primary-key indexes appending at the end.
 */
#ifndef RCS_UUID_H
#define RCS_UUID_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define UUID_STR_LEN 37 /* 36 chars + NUL */

/* Fills buf with n bytes from the kernel's CSPRNG. RCS_ERR_IO if unavailable. */
enum rcs_err rcs_random(void *buf, size_t n);

/* Writes a new v7 UUID into out. RCS_ERR_IO if no randomness. */
enum rcs_err uuid_v7(char out[UUID_STR_LEN]);

/* True when s is a UUID in 8-4-4-4-12 hex form (lowercase or uppercase). */
bool uuid_valid(const char *s);

/* Writes n random bytes as 2n lowercase hex chars + NUL into out (size 2n+1). */
enum rcs_err rcs_random_hex(char *out, size_t n);

#endif
