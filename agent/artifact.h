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
#include "journal.h"

#define ARTIFACT_MAX              16   /* per job (as per task) */
#define ARTIFACT_NAME_MAX         64   /* [a-z0-9_][a-z0-9_.-]{0,63} */
#define ARTIFACT_TOKEN_MAX        1024 /* bytes of artifact_token */
#define ARTIFACT_SIZE_MAX         (INT64_C(1) << 50)
#define ARTIFACT_DEFAULT_TIMEOUT  86400
#define ARTIFACT_MIN_TIMEOUT      60
#define ARTIFACT_MAX_TIMEOUT      604800
#define ARTIFACT_BACKOFF_FIRST_MS 1000
#define ARTIFACT_BACKOFF_MAX_MS   60000

struct artifact {
	char name[ARTIFACT_NAME_MAX + 1];
	char sha256[65];
	int64_t size;
};

#define ARTIFACT_MAX_DEVICE_TYPES 64

/* The envelope's "release" (docs/agent.md "Releases"); present false when null or absent. */
struct artifact_release {
	bool present;
	char stream[65];
	long long seq;
	bool allow_downgrade;
	size_t ntypes;
	char types[ARTIFACT_MAX_DEVICE_TYPES][65];
};

/* What an envelope says of its artifacts. */
struct artifact_set {
	size_t n;
	struct artifact a[ARTIFACT_MAX];
	char token[ARTIFACT_TOKEN_MAX + 1];
	long long download_timeout; /* seconds */
	struct artifact_release release;
};

/*
 * The envelope's "artifacts": {"<name>": {"sha256", "size"}}, "artifact_token" and
 * "download_timeout" (root: the decoded envelope). Absent: no artifacts. RCS_ERR_INVAL with
 * the reason ("artifacts.fw.sha256: ...") in reason for anything malformed: a name outside
 * [a-z0-9_][a-z0-9_.-]{0,63}, more than ARTIFACT_MAX, a hash not 64 lowercase hex, a size
 * outside 0..ARTIFACT_SIZE_MAX, another member, artifacts without a token, a token not
 * 1-ARTIFACT_TOKEN_MAX of [A-Za-z0-9._~+/=-], a timeout outside 60..604800, a "release"
 * that is not {"stream": 1-64 of [A-Za-z0-9_.:/-], "seq": 0..2^53, "device_types": [at most
 * 64 such names], "allow_downgrade": bool}.
 */
enum rcs_err artifact_set_decode(json_object *root, struct artifact_set *out, char *reason,
				 size_t reason_len);

/*
 * Whether the device may take set's release: NULL when it may (no release, or one it
 * accepts); else the edge_error cause with a reason: "incompatible" when device_types is
 * not empty and does not list device_type (NULL device_type: any non-empty list),
 * "rollback_refused" when seq is lower than the highest completed on its stream and
 * allow_downgrade is false, "journal_unavailable".
 */
const char *artifact_release_check(const struct artifact_set *set, const char *device_type,
				   struct journal *journal, char *reason, size_t reason_len);

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
