/*
 * send.h - the parsing behind rcs send (cmd_send.c), apart for the unit tests:
 * typed variables and times.
 */
#ifndef RCS_CLI_SEND_H
#define RCS_CLI_SEND_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "err.h"

/*
 * A time as the CLI takes it (docs/cli.md "send"): Unix seconds; +N with s, m, h or d
 * after now; YYYY-MM-DD, YYYY-MM-DDTHH:MM or YYYY-MM-DDTHH:MM:SS ('T' or a space),
 * in local time, or UTC with a final 'Z'. RCS_ERR_INVAL for anything else.
 */
enum rcs_err send_parse_time(const char *s, time_t now, int64_t *out);

/*
 * The JSON value of --var NAME=TEXT for a variable of type (variables_info's; NULL
 * when the task doesn't declare it: sent as a string, for the API to refuse):
 * string as is; integer an integer; timestamp an integer or a time as above; number
 * a finite number; boolean true/false/yes/no/1/0. *out is new (json_object_put it).
 * RCS_ERR_INVAL with errbuf saying what was expected.
 */
enum rcs_err send_var_value(const char *type, const char *text, time_t now, json_object **out,
			    char *errbuf, size_t errlen);

/*
 * --window DAYS/HH:MM/DURATION (docs/cli.md "Rollouts") into the bulk send's `window`
 * member with utc_offset_min: days "mon,wed", "mon-fri" or "daily"; the duration in minutes,
 * "90", "90m" or "2h" (1 to 1440). *out is new. RCS_ERR_INVAL with errbuf saying the form.
 */
enum rcs_err send_parse_window(const char *spec, long long utc_offset_min, json_object **out,
			       char *errbuf, size_t errlen);
/* --exponential N,F,K into `rollout.exponential` ({base_per_minute, factor, after_succeeded}). */
enum rcs_err send_parse_exponential(const char *spec, json_object **out, char *errbuf,
				    size_t errlen);
/* A size in bytes: digits, with a decimal part and K, M, G or T (1024, 1024^2, ...; "KiB",
 * "MB" and lower case too) when wanted ("500K", "1.5M"), rounded down; within lo..hi. */
enum rcs_err send_parse_bytes(const char *s, long long lo, long long hi, long long *out);
/* A finite decimal number within lo..hi. */
enum rcs_err send_parse_number(const char *s, double lo, double hi, double *out);

#endif
