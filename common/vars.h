/*
 * vars.h - task variables, checked the same way by the coordinator (when a
 * task or job is written) and by the agent (before a script runs).
 *
 * variables_info maps a name (1-64 of [A-Za-z0-9_]) to a descriptor
 * {type, alias?, description?, optional?}; type is one of string, timestamp
 * (integer Unix seconds >= 0), integer, number, boolean. Every declared
 * variable is required unless optional; unknown names are refused.
 * Errors return RCS_ERR_INVAL and name the field ("variables.delay",
 * "variables_info.delay.type") in the jsonu_err.
 */
#ifndef RCS_VARS_H
#define RCS_VARS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "jsonu.h"

#define VARS_MAX 64

/* 1..max bytes of [A-Za-z0-9_] and the chars of extra (may be NULL). */
bool vars_token_valid(const char *s, size_t max, const char *extra);

enum rcs_err vars_info_validate(json_object *vi, struct jsonu_err *e);
/* vars and vi may be NULL (no values / no declarations). */
enum rcs_err vars_validate(json_object *vars, json_object *vi, struct jsonu_err *e);

#endif
