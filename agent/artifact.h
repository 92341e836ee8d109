/*
 * artifact.h - a job's artifacts on the device (docs/agent.md "Artifacts"): read from the
 * envelope ("artifacts", "artifact_token", "download_timeout"), found in the cache or
 * downloaded (fetch.h) after edge_started and before the script runs, with the free-space
 * check, retries with backoff until the download timeout, progress, and the cache's size
 * limit (least recently used out first, never one the job needs).
 *
 * Called on the runner's thread only; the journal (journal.h) keeps the offsets.
 */
#ifndef RCS_AGENT_ARTIFACT_H
#define RCS_AGENT_ARTIFACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "err.h"
#include "artifact_env.h"
#include "journal.h"

/* Where and how (struct settings' artifact options). */
struct artifact_env {
	const char *dir;    /* artifact_dir (created 0700 when missing) */
	const char *url;    /* artifact_url, NULL: no transport */
	const char *cafile; /* artifact_cafile */
	int64_t reserve;    /* artifact_reserve */
	int64_t cache_max;  /* artifact_cache_max */
	int64_t max_rate;   /* artifact_max_rate */
	struct journal *journal;
	int cancel_fd; /* readable: the job is cancelled or the agent stops */
	/* an edge_running report: "downloading NAME: 42 %", done and total bytes of the job */
	void (*progress)(void *ctx, const char *text, int64_t done, int64_t total);
	void *ctx;
	/* artifacts over MQTT (fetch_mqtt.h), when url is NULL and chan is not */
	const char *job;
	struct fetch_mqtt_chan *chan;
	void (*publish_get)(void *ctx, const char *sha256, const char *payload);
	void (*subscribe)(void *ctx, bool on); /* the artifact topics, while downloading */
	void *publish_ctx;
};

/* How the download of a job's artifacts ended. */
struct artifact_outcome {
	const char *cause;  /* NULL: every artifact is there; else the edge_error's cause */
	char reason[512];   /* for the report */
	json_object *table; /* {"<name>": {"path","size","sha256"}} for rcs.artifacts; the
			       caller puts it */
};

/*
 * Brings every artifact of set into env->dir as <sha256> (checked again if cached, else
 * downloaded; at most one download from zero more after a wrong result), then trims the
 * cache. Causes: "storage_full" (not enough free space for what is missing plus the
 * reserve, or the disk filled), "artifact_invalid" (a second wrong result),
 * "artifact_unavailable" (no transport, refused by the server, or download_timeout passed),
 * "cancelled" (cancel_fd), "journal_unavailable". Never fails otherwise.
 */
void artifact_fetch_all(const struct artifact_env *env, const struct artifact_set *set,
			struct artifact_outcome *out);

/*
 * Deletes the least recently used complete artifacts of dirfd (by modification time, which
 * a use updates), none of keep (n of them: the live job's), until those left total at most
 * max bytes. Part files stay (a download resumes from them). Returns the bytes of complete
 * artifacts left.
 */
int64_t artifact_cache_trim(int dirfd, const struct artifact *keep, size_t n, int64_t max);

#endif
