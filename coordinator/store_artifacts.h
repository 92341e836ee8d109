/*
 * store_artifacts.h - the store's artifacts (docs/api.md, "Artifacts"; store_artifacts.c):
 * files uploaded once and named by their content, per tenant. Their records are rows; their
 * bytes are files under the artifact directory on SQLite (<dir>/<client_root>/<first 2
 * hex>/<sha256 hex>) and chunks of at most 1 MiB in the database on PostgreSQL. See store.h.
 */
#ifndef RCS_STORE_ARTIFACTS_H
#define RCS_STORE_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* The bytes of one chunk in the database (PostgreSQL). */
#define STORE_ARTIFACT_CHUNK    (1024 * 1024)
#define STORE_ARTIFACT_NAME_MAX 128

struct artifact_rec {
	char sha256[65]; /* 64 lowercase hex */
	long long size;
	char *name;
	int64_t created_at;
	char *created_user;
	/* where the bytes are: the chunks' id (PostgreSQL), "" for a file (SQLite) */
	char blob_id[40];
};
void store_artifact_rec_free(struct artifact_rec *r);

struct store_artifact_list {
	struct store_page_info pg;
	struct artifact_rec *items;
	size_t n;
};
void store_artifact_list_free(struct store_artifact_list *l);
/* The tenant's artifacts, newest first by default (pg: sort created_at, name or size;
 * created_after, created_before, name). */
enum rcs_err store_artifacts_list(struct store *st, const char *client_root,
				  const struct store_page *pg, struct store_artifact_list *out);
/* One artifact of the tenant by its SHA-256 (hex); RCS_ERR_NOTFOUND when it has none. */
enum rcs_err store_artifact_get(struct store *st, const char *client_root, const char *sha256,
				struct artifact_rec *out);
/* The bytes the tenant's artifacts hold (*bytes). */
enum rcs_err store_artifacts_usage(struct store *st, const char *client_root, long long *bytes);

/*
 * An upload: the bytes go to a temporary file of dir (SQLite) or to chunks of an upload's
 * own (PostgreSQL) as they come; the record is made by store_artifact_sink_commit only once
 * every byte is stored. dir is the artifact directory (unused on PostgreSQL).
 */
struct artifact_sink;
enum rcs_err store_artifact_sink_open(struct store *st, const char *dir, const char *client_root,
				      int64_t now, struct artifact_sink **out);
/* Appends n bytes: RCS_ERR_FULL when the disk (or the database) is full. */
enum rcs_err store_artifact_sink_write(struct artifact_sink *k, const void *data, size_t n);
/* The bytes written so far. */
long long store_artifact_sink_size(const struct artifact_sink *k);
/*
 * Makes the record of the bytes written (in the caller's transaction when there is one):
 * in (sha256, name, created_at, created_user; size is the bytes written) for the tenant.
 * When the tenant has these bytes already, *created is false and out is the record it has;
 * else the bytes are put in place (the file fsynced, renamed, its directory fsynced) and
 * the record made: *created true. RCS_ERR_CONFLICT: the tenant's artifacts would hold more
 * than quota bytes (0: no limit); nothing is kept. RCS_ERR_FULL: the disk is full.
 */
enum rcs_err store_artifact_sink_commit(struct artifact_sink *k, const struct artifact_rec *in,
					long long quota, struct artifact_rec *out, bool *created);
/* Ends an upload: what was not committed is removed (its temporary file, its chunks). */
void store_artifact_sink_free(struct artifact_sink *k);

/* Deletes the tenant's artifact (its bytes once the caller's transaction commits);
 * RCS_ERR_NOTFOUND when it has none; RCS_ERR_CONFLICT while it is in use
 * (store_artifact_in_use), nothing deleted. */
enum rcs_err store_artifact_delete(struct store *st, const char *dir, const char *client_root,
				   const char *sha256);
/* Whether a task's current version, or a job not yet terminal, pins the tenant's artifact
 * (docs/api.md, "Artifacts": a delete is refused meanwhile). */
enum rcs_err store_artifact_in_use(struct store *st, const char *client_root, const char *sha256,
				   bool *in_use);
/* The idents of the tenant's tasks whose current version pins the artifact, in ident order,
 * at most 100 (the record's used_by). */
enum rcs_err store_artifact_used_by(struct store *st, const char *client_root, const char *sha256,
				    struct store_idents *out);

/* At start: removes what uploads that did not end left (temporary files of dir on SQLite;
 * on PostgreSQL the chunks of uploads of this coordinator, node, or begun a day before now). */
enum rcs_err store_artifacts_sweep(struct store *st, const char *dir, const char *node,
				   int64_t now);

/* The file of an artifact (SQLite): its path under dir into path (size bytes). */
bool store_artifact_path(const char *dir, const char *client_root, const char *sha256, char *path,
			 size_t size);
/* Whether the bytes are in the database (PostgreSQL) rather than in files. */
bool store_artifacts_in_db(const struct store *st);
/* Chunk n (from 0) of blob_id into buf (cap bytes, at least STORE_ARTIFACT_CHUNK): *got
 * bytes; RCS_ERR_NOTFOUND past the last chunk. */
enum rcs_err store_artifact_chunk(struct store *st, const char *blob_id, long long n, void *buf,
				  size_t cap, size_t *got);

#endif
