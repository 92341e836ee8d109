/*
 * canon.h - canonical JSON, RFC 8785 (JCS).
 *
 * Used for the signature manifest (docs/signing.md): both daemons must
 * produce byte-identical text for the same value, so the coordinator's
 * signature verifies on the agent.
 */
#ifndef RCS_CANON_H
#define RCS_CANON_H

#include <json-c/json.h>

#include "buf.h"
#include "err.h"

/*
 * Appends the RFC 8785 form of v to out: object members sorted by their
 * UTF-16 code units, no whitespace, strings with the minimal JCS escapes,
 * numbers in ECMAScript Number-to-String form. NULL v is written "null".
 * json-c integers beyond +-2^53 are written as the double ECMAScript would
 * read them as (9007199254740993 -> 9007199254740992).
 * RCS_ERR_INVAL for a non-finite number or a string or member name that is
 * not valid UTF-8; RCS_ERR_TOOBIG when out's ceiling is reached or the tree
 * is nested deeper than 128 levels; RCS_ERR_NOMEM on allocation failure.
 * On any error out is left as it was before the call.
 */
enum rcs_err canon_json(json_object *v, struct buf *out);

#endif
