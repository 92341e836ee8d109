/*
 * node.h - the coordinator's node id (docs/scale-out.md): the name a coordinator goes by
 * among several on one database, in its MQTT client id (rcs-coordinator-<node id>) and in
 * the rows it claims.
 */
#ifndef RCS_NODE_H
#define RCS_NODE_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define NODE_ID_MAX 64 /* characters, without the NUL */

/* Whether id is a node id: 1-64 of [A-Za-z0-9_-]. */
bool node_id_valid(const char *id);

/*
 * The node id: given (checked), else the one kept in keep_file when that holds one, else a
 * new one (host name + '-' + 8 random hex digits) written to keep_file (NULL: not kept).
 * out has NODE_ID_MAX + 1 bytes; *kept (may be NULL): the id comes back at the next start
 * (given, or kept in the file). RCS_ERR_INVAL with why filled for a bad given id or a keep
 * file holding something else than an id (never overwritten).
 */
enum rcs_err node_id_resolve(const char *given, const char *keep_file, char out[NODE_ID_MAX + 1],
			     bool *kept, char *why, size_t why_len);

/* Where the generated node id is kept (a malloc'd path or NULL): $STATE_DIRECTORY/node-id
 * under systemd, else <db>.node-id for a SQLite database file, else nowhere. */
char *node_id_keep_file(const char *db);

#endif
