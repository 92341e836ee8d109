/*
 * validate.h - checks of what clients write: notification lists and tags.
 * Each returns RCS_OK or RCS_ERR_INVAL with a jsonu_err naming the
 * offending field (e.g. "notification_mail_list[1]").
 */
#ifndef RCS_VALIDATE_H
#define RCS_VALIDATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "jsonu.h"
#include "vars.h"

#define VALIDATE_MAX_MAILS 32
#define VALIDATE_MAX_TAGS  64

/* Names, variables_info and variables: see common/vars.h. */

/* An e-mail address fit for a mail header: ASCII, no spaces, CR/LF or <>, one @. */
bool validate_email(const char *addr);
/* Array of addresses / of status names; field names the list in errors. */
enum rcs_err validate_mail_list(json_object *arr, const char *field, struct jsonu_err *e);
enum rcs_err validate_status_list(json_object *arr, const char *field, struct jsonu_err *e);
/* The job statuses' names, "initial, pending, ..., expired", into out (cut to len). */
void validate_status_names(char *out, size_t len);
/* Array of tags. */
enum rcs_err validate_tags(json_object *arr, const char *field, struct jsonu_err *e);
bool validate_tag(const char *tag);

#endif
