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
 * cfg_free() releases what the parsers allocated.
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
void cfg_free(const struct cfg_opt *opts, void *base);
void cfg_strlist_free(struct cfg_strlist *l);

#endif
