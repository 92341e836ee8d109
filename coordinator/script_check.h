/*
 * script_check.h - a script's source compiled by Lua's parser, never run.
 *
 * PUT /scripts/<name> and the stock scripts of --scripts-dir are checked so that a
 * syntax error is answered at upload (400 with Lua's message and line, docs/api.md
 * "Scripts") instead of as an edge_error on every device. Agents load text chunks only,
 * so a precompiled (binary) chunk is refused here too.
 */
#ifndef RCS_SCRIPT_CHECK_H
#define RCS_SCRIPT_CHECK_H

#include <stddef.h>

#include "err.h"

#define SCRIPT_CHECK_MSG_MAX 400

/*
 * RCS_OK when src compiles as a Lua 5.4 text chunk. Otherwise RCS_ERR_INVAL with Lua's
 * message in msg ("name:LINE: ... near ...") and the line in *line (0 when Lua gave
 * none), or RCS_ERR_NOMEM when the parser ran out of its memory budget.
 */
enum rcs_err script_check(const char *name, const char *src, size_t len, char *msg, size_t msglen,
			  int *line);

#endif
