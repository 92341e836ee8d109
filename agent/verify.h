/*
 * verify.h - the checks an agent makes on a decoded job envelope before
 * anything of it runs (docs/agent.md, promise 1 and "What happens to a job";
 * docs/signing.md for the signature).
 *
 * In this order, the first failure deciding the reason:
 *   1. the envelope's client_root and entity_ident are the agent's own;
 *   2. expires_at, when set (non-zero), is after now;
 *   3. the signature: an unsigned envelope is refused when require_signature;
 *      a signature, when present, must verify: the manifest is rebuilt
 *      (manifest_build) from the agent's OWN client_root and the envelope's
 *      task ident/version, script name, exact script bytes, constants and
 *      variables_info (and, for an envelope with artifacts, manifest v2: the
 *      artifacts and the release), and checked with sig_verify_object against the trusted
 *      keys; the algorithm is the agent's (ES256 only), never the message's;
 *   4. no rollback: the task version is not older than the highest version of
 *      that task already run (journal_task_version; equal is fine);
 *   5. variables_info is well-formed and variables match it (vars_validate).
 *
 * verify_envelope records nothing. The caller records the version with
 * journal_task_version_set when the job starts; since jobs queue, it should
 * call verify_envelope again right before starting one (an older version
 * queued behind a newer one must be refused then).
 *
 * Thread-safe: the trusted keys (which mbedtls must not use from two threads
 * at once) are used under a lock of this module.
 */
#ifndef RCS_VERIFY_H
#define RCS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "journal.h"
#include "manifest.h"
#include "proto.h"

#define VERIFY_REASON_MAX 256 /* a fitting size for the reason buffer */

struct verify_ctx {
	const char *client_root, *entity_ident; /* the agent's own */
	struct sig_key *const *trusted;
	size_t ntrusted;
	bool require_signature; /* default true */
	/* artifact_trusted_key: when any, the only keys whose signature of a task with
	 * artifacts is accepted, and such a task must be signed (docs/agent.md) */
	struct sig_key *const *artifact_trusted;
	size_t nartifact_trusted;
	struct journal *journal; /* for the task-version rollback check; required */
};

/*
 * RCS_OK when the agent may run env. Otherwise a one-line reason for the
 * edge_error report goes into reason (reason_len bytes, truncated to fit,
 * always NUL-terminated when reason_len > 0; reason may be NULL), and:
 *   RCS_ERR_FORBIDDEN "envelope for another tenant" / "envelope for another device"
 *   RCS_ERR_CONFLICT  "expired at 1732200000"
 *   RCS_ERR_VERIFY    "signature required", "signature does not verify",
 *                     "unknown signing key 0123456789abcdef",
 *                     "signature algorithm 'RS256' not accepted (ES256 only)"
 *   RCS_ERR_INVAL     "malformed signature", "manifest: ..." (a field the
 *                     manifest cannot hold), and the variables:
 *                     "variables.delay: 'variables.delay' must be of type integer"
 *   RCS_ERR_CONFLICT  "task version 3 is older than version 5 already run"
 *   RCS_ERR_INVAL     a NULL v, env or v->journal, or v without its own idents
 *   other errors of the journal or of memory, with "journal: <error>" etc.
 */
enum rcs_err verify_envelope(const struct verify_ctx *v, const struct proto_envelope *env,
			     int64_t now, char *reason, size_t reason_len);

/* The checks above, in their order: which one refused an envelope. */
enum verify_check {
	VERIFY_PASSED = 0,
	VERIFY_SETUP,     /* the arguments: a NULL v, env or v->journal, missing idents */
	VERIFY_OURS,      /* 1 */
	VERIFY_EXPIRY,    /* 2 */
	VERIFY_SIGNATURE, /* 3 */
	VERIFY_VERSION,   /* 4 */
	VERIFY_VARIABLES, /* 5 */
};

/* verify_envelope, also telling which check refused (failed may be NULL):
 * VERIFY_PASSED exactly when RCS_OK. */
enum rcs_err verify_envelope_check(const struct verify_ctx *v, const struct proto_envelope *env,
				   int64_t now, enum verify_check *failed, char *reason,
				   size_t reason_len);

/* The cause (docs/mqtt.md "Status report") of a refusal by verify_envelope_check:
 * "wrong_device", "expired", "signature_invalid", "rollback_refused", "variables_invalid" or
 * "envelope_invalid". */
const char *verify_check_cause(enum verify_check failed);

/* Forgets which signatures verified (they are remembered per task version):
 * after the trusted keys changed, each is checked again with the new keys. */
void verify_forget_signatures(void);

/* How many ES256 verifications ran since the start (a remembered signature needs
 * none). For diagnostics and tests. */
unsigned long verify_signatures_checked(void);

#endif
