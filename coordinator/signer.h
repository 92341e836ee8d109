/*
 * signer.h - task signatures on the coordinator (docs/signing.md).
 *
 * With a signing key the coordinator signs every new task version; trusted
 * keys (and the signing key's public half) verify signatures operators set.
 */
#ifndef RCS_SIGNER_H
#define RCS_SIGNER_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "manifest.h"

struct signer;

/* signing_key may be NULL, passphrase (of an encrypted signing_key) too; trusted may be
 * empty. Errors name the failing file in the log (RCS_ERR_AUTH: the passphrase is
 * missing or wrong). */
enum rcs_err signer_open(const char *signing_key, const char *passphrase, char *const *trusted,
			 size_t ntrusted, struct signer **out);
void signer_free(struct signer *s);
bool signer_can_sign(const struct signer *s);
size_t signer_trusted_count(const struct signer *s);

/*
 * Signs the manifest of m: *out is a new {"alg","key_id","value"} object, or
 * NULL (RCS_OK) when there is no signing key.
 */
enum rcs_err signer_sign(const struct signer *s, const struct manifest_in *m, json_object **out);

/*
 * Checks sig against the manifest of m: RCS_ERR_INVAL for a malformed object,
 * RCS_ERR_VERIFY when it doesn't verify against a trusted key. Without any
 * trusted key only the shape is checked.
 */
enum rcs_err signer_check(const struct signer *s, const struct manifest_in *m, json_object *sig);

/*
 * Like signer_check, for sending jobs: remembers signatures that verified
 * (by task ident, version and value) so a bulk send verifies once. Without
 * trusted keys every signature passes (nothing to check against).
 */
enum rcs_err signer_check_cached(struct signer *s, const struct manifest_in *m, json_object *sig);

#endif
