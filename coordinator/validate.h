/*
 * validate.h - checks of what clients write: variables_info and variables,
 * notification lists, tags, names. Each returns RCS_OK or RCS_ERR_INVAL with
 * a jsonu_err naming the offending field (e.g. "variables.delay").
 */
#ifndef RCS_VALIDATE_H
#define RCS_VALIDATE_H

#include <json-c/json.h>
#include <stdbool.h>

#include "err.h"
#include "jsonu.h"

#define VALIDATE_MAX_VARIABLES 64
#define VALIDATE_MAX_MAILS 32
#define VALIDATE_MAX_TAGS 64

/* A variable, script or tag name: 1..max bytes of [A-Za-z0-9] and the extra chars. */
bool validate_token(const char *s, size_t max, const char *extra);

/* variables_info: name -> {type, alias?, description?, optional?}. */
enum rcs_err validate_variables_info(json_object *vi, struct jsonu_err *e);
/* variables (may be NULL) against variables_info (may be NULL). */
enum rcs_err validate_variables(json_object *vars, json_object *vi, struct jsonu_err *e);

/* An e-mail address fit for a mail header: ASCII, no spaces, CR/LF or <>, one @. */
bool validate_email(const char *addr);
/* Array of addresses / of status names; field names the list in errors. */
enum rcs_err validate_mail_list(json_object *arr, const char *field, struct jsonu_err *e);
enum rcs_err validate_status_list(json_object *arr, const char *field, struct jsonu_err *e);
/* Array of tags. */
enum rcs_err validate_tags(json_object *arr, const char *field, struct jsonu_err *e);
bool validate_tag(const char *tag);

#endif
