/*
 * artifact_env.h - what a job envelope says of its artifacts (docs/agent.md "Artifacts"):
 * "artifacts", "artifact_token", "download_timeout", and its "release" (docs/agent.md
 * "Releases"), decoded and bounded; and whether this device takes that release (the highest
 * release completed on each stream is in the journal).
 */
#ifndef RCS_AGENT_ARTIFACT_ENV_H
#define RCS_AGENT_ARTIFACT_ENV_H

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

/* 64 lowercase hex digits. */
bool artifact_sha256_valid(const char *s);

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

#endif
