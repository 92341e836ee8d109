/*
 * cfg.h - options from a config file and the command line, from one table.
 *
 * Each option is a row of a table: its name is both the config-file key
 * ("max_body 1048576", mosquitto.conf style, '#' comments) and the flag
 * ("--max-body 1048576" or "--max-body=1048576", '_' written '-').
 * Values land in the caller's settings struct at the row's offset:
 *   CFG_STRING  char *      (strdup'd; a later value replaces it)
 *   CFG_INT     long long   (checked against min..max)
 *   CFG_BOOL    bool        (a flag without a value sets true; in a file: true/false/yes/no/1/0)
 *   CFG_STRLIST struct cfg_strlist (each occurrence appends)
 * cfg_free() releases what the parsers allocated (strings wiped first).
 *
 * Secrets (passwords, key passphrases) need not be on the command line,
 * where ps and /proc/PID/cmdline show them to every user of the host:
 * cfg_secret_resolve() takes one from the option's value, a file named by
 * its "_file" option, or an environment variable.
 */
#ifndef RCS_CFG_H
#define RCS_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "err.h"

enum cfg_type { CFG_STRING, CFG_INT, CFG_BOOL, CFG_STRLIST };

struct cfg_strlist {
	char **items;
	size_t n;
};

struct cfg_opt {
	const char *name;
	enum cfg_type type;
	size_t offset;
	long long min, max; /* CFG_INT only */
	const char *arg;    /* argument name for --help, NULL for booleans */
	const char *help;
};

#define CFG_MAX_LINE 4096
#define CFG_MAX_LIST 256

/*
 * Reads path. Errors name "file:line" and the option in errbuf.
 * RCS_ERR_IO when the file can't be read, RCS_ERR_INVAL for a bad line.
 */
enum rcs_err cfg_parse_file(const struct cfg_opt *opts, void *base, const char *path, char *errbuf,
			    size_t errlen);

/*
 * Parses argv[first..argc). Stops at the first argument that is not an option
 * and stores its index in *next (argc when all were options). "--config FILE"
 * is handled by the caller: find it with cfg_find_arg() first, parse the file,
 * then the arguments, so the command line overrides the file.
 */
enum rcs_err cfg_parse_args(const struct cfg_opt *opts, void *base, int argc, char **argv,
			    int first, int *next, char *errbuf, size_t errlen);

/* Value of "--name X" or "--name=X" in argv, or NULL. */
const char *cfg_find_arg(int argc, char **argv, const char *name);

/* Sets one option by name from a string value (used by both parsers). */
enum rcs_err cfg_set(const struct cfg_opt *opts, void *base, const char *name, const char *value,
		     char *errbuf, size_t errlen);

void cfg_usage(FILE *fp, const struct cfg_opt *opts);

#define CFG_MAX_SECRET 4096 /* bytes of a secret file, its final newline included */

/* Where cfg_secret_resolve() found a secret. */
enum cfg_secret_src { CFG_SECRET_NONE, CFG_SECRET_VALUE, CFG_SECRET_FILE, CFG_SECRET_ENV };

/*
 * The content of path with one final newline ("\n" or "\r\n") removed, as a
 * new string in *out (free with cfg_secret_free). option names the option in
 * errbuf ("--option-name path: reason"): RCS_ERR_IO when the file can't be
 * read, RCS_ERR_INVAL when it is empty or holds a NUL byte, RCS_ERR_TOOBIG
 * past CFG_MAX_SECRET bytes. What was read is wiped.
 */
enum rcs_err cfg_read_secret(const char *option, const char *path, char **out, char *errbuf,
			     size_t errlen);

/*
 * Takes the environment variable name: a copy of its value into *out (NULL
 * when unset or empty; out may be NULL to only drop it), then wipes the value
 * in place and unsets the variable, so that neither child processes nor
 * /proc/PID/environ get it. RCS_ERR_NOMEM only.
 */
enum rcs_err cfg_take_env_secret(const char *name, char **out);

/*
 * Settles one secret from its sources, the first given wins:
 *   1. *value: the option itself (command line or config file),
 *   2. the content of file (the option's "_file" form; NULL: not given),
 *   3. the environment variable env (NULL: none).
 * Giving both 1 and 2 is an error. env is taken (unset) in every case. On
 * RCS_OK *value is the secret (NULL: none given) and *from (may be NULL) its
 * source. option ("mqtt_password") names the flags in errbuf.
 */
enum rcs_err cfg_secret_resolve(const char *option, char **value, const char *file, const char *env,
				enum cfg_secret_src *from, char *errbuf, size_t errlen);

/* Logs a warning for each of names (NULL-terminated, "mqtt_password") given on
 * the command line: its value is visible to every user in ps. */
void cfg_warn_visible_secrets(int argc, char **argv, const char *const *names);

/* Wipes and frees *s, sets it NULL. */
void cfg_secret_free(char **s);
void cfg_free(const struct cfg_opt *opts, void *base);
void cfg_strlist_free(struct cfg_strlist *l);
/*
 * For a list whose command line replaces the config file's values, as the flags of other
 * options win, instead of adding to them: from_file is l->n after cfg_parse_file; once
 * cfg_parse_args added values, the file's (the first from_file) are dropped.
 */
void cfg_strlist_replaced(struct cfg_strlist *l, size_t from_file);

#endif
