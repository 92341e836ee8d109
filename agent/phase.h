/*
 * phase.h - what jobs that span a reboot need besides the journal (docs/agent.md "Phases",
 * docs/lua-api.md "rcs.reboot{...}" and "rcs.state"): the device's boot id, the values of
 * rcs.state checked and applied, and the reboot command run. runner.c drives the sequence.
 */
#ifndef RCS_AGENT_PHASE_H
#define RCS_AGENT_PHASE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "journal.h"

#define PHASE_MAX_RUNS     3   /* runs of one phase in all (then edge_error interrupted) */
#define PHASE_MAX_REBOOTS  8   /* reboots one job may ask for */
#define PHASE_RESUME_AFTER 60  /* seconds after a reboot command that did not reboot */
#define PHASE_STATE_KEY    128 /* bytes of an rcs.state key */

/* The boot id in path (/proc/sys/kernel/random/boot_id or the agent's boot_id_file): its
 * first line, at most JOURNAL_MAX_BOOT_ID bytes of printable text. RCS_ERR_IO (and "") when
 * it cannot be read, RCS_ERR_INVAL when it is empty or not such text. */
enum rcs_err phase_boot_id(const char *path, char out[JOURNAL_MAX_BOOT_ID + 1]);

/*
 * rcs.state.set(key, value) on state (a JSON object, NULL: empty): key 1-PHASE_STATE_KEY
 * bytes of printable UTF-8; value of type 's' (a string: UTF-8 without NUL), 'n' (a number
 * as Lua writes it: integer or finite float), 'b' ("true" or "false"), or 0 (removes the
 * key). On success *next is the new table (a new object; the caller owns it) and *text its
 * JSON text (malloc'd), at most JOURNAL_MAX_SCRIPT_STATE bytes; state is unchanged either
 * way. RCS_ERR_INVAL / RCS_ERR_TOOBIG with the reason, naming what is wrong, in why.
 */
enum rcs_err phase_state_set(json_object *state, const char *key, char type, const char *value,
			     size_t len, json_object **next, char **text, char *why, size_t whylen);

/* rcs.state.get(key): RCS_OK with the value's type ('s', 'n', 'b') and text (malloc'd),
 * RCS_ERR_NOTFOUND when state has no such key. */
enum rcs_err phase_state_get(json_object *state, const char *key, char *type, char **value);

/* The state journaled for a job (journal_script_state_get's text, NULL: none) as an object;
 * NULL (and a warning) for text that is not a JSON object. */
json_object *phase_state_parse(const char *job, const char *text);

/* Runs path without arguments (the reboot command) and waits for it: true when it ran and
 * exited 0. */
bool phase_run_command(const char *path);

#endif
