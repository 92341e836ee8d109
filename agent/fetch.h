/*
 * fetch.h - one artifact's bytes into <dir>/<sha256>.part, resumable (docs/agent.md
 * "Artifacts"): the part file, hashed as it grows, fsynced and its offset journaled at
 * least every FETCH_JOURNAL_EVERY bytes; an HTTP(S) request for what is missing (libcurl,
 * when the agent is built WITH_ARTIFACT_HTTP); the finished file checked against the signed
 * size and SHA-256 and renamed to <dir>/<sha256>, mode 0444.
 *
 * The caller (artifact.c) decides retries, backoff and deadlines: fetch_http makes one
 * request and says how it ended. Files are opened relative to the directory's descriptor
 * with O_NOFOLLOW. Offsets are 64-bit everywhere (32-bit ARM included).
 */
#ifndef RCS_AGENT_FETCH_H
#define RCS_AGENT_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mbedtls/sha256.h>

#include "err.h"

#define FETCH_JOURNAL_EVERY ((int64_t)4 << 20) /* bytes between two journaled offsets */
#define FETCH_NAME_LEN      (64 + sizeof(".part"))

/* A part file being written: its descriptor, how far it is, the hash of those bytes. */
struct fetch_part {
	int fd;
	char sha256[65]; /* the signed hash, lowercase hex */
	int64_t size;    /* the signed size */
	int64_t offset;  /* bytes in the file, all hashed */
	int64_t synced;  /* bytes fsynced and journaled */
	mbedtls_sha256_context sha;
};

/* Records that <sha256>.part holds offset good bytes (called after an fsync); an error
 * stops the download (the journal failing). */
typedef enum rcs_err (*fetch_journal_fn)(void *ctx, const char *sha256, int64_t offset);

/*
 * Opens <dirfd>/<sha256>.part (created 0600 when missing, O_NOFOLLOW: a link is refused with
 * RCS_ERR_FORBIDDEN) and resumes it from journaled bytes: the file is cut to that length (a
 * power cut may have left unsynced bytes after it, or fewer than journaled: then from
 * zero) and those bytes are hashed again from the start. RCS_ERR_IO on any other error.
 * Close with fetch_part_close.
 */
enum rcs_err fetch_part_open(int dirfd, const char *sha256, int64_t size, int64_t journaled,
			     struct fetch_part *p);
/* Empties the part file (a wrong result, or a server that restarts from byte 0). */
enum rcs_err fetch_part_reset(struct fetch_part *p);
/* Appends n bytes (hashed), fsyncing and journaling every FETCH_JOURNAL_EVERY bytes.
 * RCS_ERR_TOOBIG past the signed size (nothing written), RCS_ERR_FULL when the disk is,
 * RCS_ERR_IO, or the journal's error. */
enum rcs_err fetch_part_write(struct fetch_part *p, const void *data, size_t n,
			      fetch_journal_fn journal, void *ctx);
/* Fsyncs and journals what was written. */
enum rcs_err fetch_part_sync(struct fetch_part *p, fetch_journal_fn journal, void *ctx);
/*
 * The part is whole (offset == size): RCS_OK when its SHA-256 is the signed one, then it is
 * fsynced, made 0444 and renamed to <sha256> (the directory fsynced). RCS_ERR_VERIFY when
 * the hash differs or the size is short of the signed one (nothing renamed).
 */
enum rcs_err fetch_part_finish(int dirfd, struct fetch_part *p);
void fetch_part_close(struct fetch_part *p);

/* SHA-256 of the regular file <dirfd>/name (O_NOFOLLOW) into hex, its size into *size.
 * RCS_ERR_NOTFOUND when missing, RCS_ERR_FORBIDDEN when not a regular file, RCS_ERR_IO. */
enum rcs_err fetch_hash_file(int dirfd, const char *name, char hex[65], int64_t *size);

/* How one request ended. */
enum fetch_outcome {
	FETCH_DONE,      /* every byte is in the part file */
	FETCH_RETRY,     /* a network or server failure: try again later (retry_after: hint) */
	FETCH_INVALID,   /* the server sent what the signature excludes (too long, bad range) */
	FETCH_REFUSED,   /* 401, 403, 404, 410: this job may not download it */
	FETCH_CANCELLED, /* cancel_fd fired or the deadline passed */
	FETCH_FAILED,    /* the disk or the journal failed (err says which) */
};

struct fetch_http {
	const char *url;     /* the whole URL of the artifact */
	const char *cafile;  /* NULL: the system's CA certificates */
	const char *token;   /* Authorization: Bearer; never logged */
	int64_t max_rate;    /* bytes/s, 0: none */
	int cancel_fd;       /* readable: stop; -1: none */
	int64_t deadline_ms; /* CLOCK_MONOTONIC ms; 0: none */
	fetch_journal_fn journal;
	void (*progress)(void *ctx, int64_t offset); /* bytes in the part so far, often */
	void *ctx;
};

/* The result of fetch_http: what happened and a line for the logs. */
struct fetch_result {
	enum fetch_outcome outcome;
	enum rcs_err err; /* FETCH_FAILED: RCS_ERR_FULL, RCS_ERR_IO, the journal's */
	long status;      /* the HTTP status, 0 when none came */
	int retry_after;  /* seconds a 429 or 503 asked for, 0: none */
	char message[256];
};

/* True when the agent was built with the HTTP transport (libcurl). */
bool fetch_http_available(void);
/* Once at start, before any thread: libcurl's global state. */
enum rcs_err fetch_global_init(void);
/*
 * One GET of what p lacks (Range: bytes=<offset>- when it has some): follows no redirect,
 * takes 200 (from byte 0: p is emptied first) or a 206 whose Content-Range is exactly the
 * range asked for and the signed size, refuses a body longer than what is missing. Writes
 * through fetch_part_write. Fills *res.
 */
void fetch_http(const struct fetch_http *req, struct fetch_part *p, struct fetch_result *res);

/* "bytes FIRST-LAST/TOTAL" of a 206: true when it is exactly first..size-1 of size. */
bool fetch_content_range_ok(const char *value, int64_t first, int64_t size);

#endif
