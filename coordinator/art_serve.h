/*
 * art_serve.h - what the devices' downloads of artifacts share, over HTTP (api_device.c,
 * docs/api.md "Device downloads") and over MQTT (chunks.c, docs/mqtt.md "Artifacts over
 * MQTT (the coordinator's side)"; art_serve.c): the check of a job against the artifact it
 * asks for, the count of the bytes served per job (capped at ART_SERVE_CAP_TIMES its
 * artifacts' size) with the audit record of its first download of each artifact, and the
 * reading of the stored bytes (a file on SQLite, chunks in the database on PostgreSQL).
 */
#ifndef RCS_ART_SERVE_H
#define RCS_ART_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "err.h"
#include "store.h"
#include "store_artifacts.h"
#include "uuid.h"

#define ART_SERVE_CAP_TIMES 3 /* the bytes of a job's artifacts it may be served in all */

/* A device's request: the job, the device and the tenant it names (a token's, or a topic's),
 * the artifact's SHA-256 (hex); filled by art_serve_check: the job's group, the artifact's
 * size, the bytes of all the artifacts the job pins, the artifact's record. */
struct art_want {
	char job[UUID_STR_LEN], device[UUID_STR_LEN], tenant[UUID_STR_LEN], sha[65];
	char group[UUID_STR_LEN]; /* the job's group ("" for none; its download limits) */
	long long size, total;
	struct artifact_rec a;
};
void art_want_free(struct art_want *w);

enum art_verdict {
	ART_SERVE_OK,
	ART_SERVE_NOTFOUND, /* no such job of that device and tenant, or it pins no such artifact */
	ART_SERVE_TERMINAL, /* the job has ended */
	ART_SERVE_ERROR     /* the store failed: *err */
};
/* Whether w's job exists, is w->device's in w->tenant, has not ended and pins w->sha (read
 * from st: a reader is fine). */
enum art_verdict art_serve_check(struct store *st, struct art_want *w, enum rcs_err *err);

/* How a download is audited (docs/api.md, "Audit"): the device as the user, the job as the
 * target; never the token. */
struct art_audit {
	const char *method, *path, *remote; /* remote may be NULL */
	int status;
};
/* len more bytes of w's artifact for its job, counted (held by the download until
 * art_serve_end) in a transaction of st's own, the job's first download of that artifact
 * audited: *capped (nothing counted) when the job has been served its cap already. */
enum rcs_err art_serve_begin(struct store *st, const struct art_want *w, long long len,
			     const struct art_audit *au, bool *capped, long long *served);
/* The download of len bytes ended having sent sent of them: the rest is given back to the
 * job's cap (logged when it cannot be). */
void art_serve_end(struct store *st, const char *job, const char *sha, long long len,
		   long long sent);

/* The stored bytes of an artifact: its file open (SQLite, under dir), or a buffer of one of
 * its chunks (PostgreSQL, read through st). */
struct art_source;
/* NULL (logged) when they cannot be read. */
struct art_source *art_source_open(struct store *st, const char *dir, const struct art_want *w);
/* Up to max bytes at offset at into out: how many (> 0), or -1 when they cannot be read. */
ssize_t art_source_read(struct art_source *s, long long at, void *out, size_t max);
void art_source_close(struct art_source *s);

#endif
