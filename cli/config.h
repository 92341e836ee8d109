/*
 * config.h - where the CLI finds the API: its URL, the API key, the timeout.
 *
 * Each setting comes from the first of: the flag (--url, --api-key, --timeout),
 * the environment (RCS_URL, RCS_API_KEY), the config file. The config file is
 * --config FILE, else $RCS_CONFIG, else $XDG_CONFIG_HOME/rcs/config, else
 * ~/.config/rcs/config (docs/cli.md "Configuration"), read with common/cfg:
 * one "key value" per line, '#' comments; keys url, api_key, api_key_file,
 * timeout. A file named by --config or $RCS_CONFIG must exist; the default one
 * may not.
 */
#ifndef RCS_CLI_CONFIG_H
#define RCS_CLI_CONFIG_H

#include <stddef.h>

#include "err.h"

#define CONFIG_TIMEOUT_DEFAULT 30
#define CONFIG_TIMEOUT_MAX     3600

struct config {
	char *url;         /* owned; NULL when nothing gave one */
	char *api_key;     /* owned, wiped on free; NULL when nothing gave one */
	long long timeout; /* seconds per request */
};

/*
 * Settles cf from the flags (each NULL, or timeout_flag < 0, when not given),
 * the environment and the file. RCS_ERR_IO or RCS_ERR_INVAL with errbuf naming
 * the file (and line) for a file that can't be read or holds a bad line;
 * RCS_ERR_NOMEM. config_free() releases cf in every case.
 */
enum rcs_err config_settle(struct config *cf, const char *config_flag, const char *url_flag,
			   const char *key_flag, long long timeout_flag, char *errbuf,
			   size_t errlen);
void config_free(struct config *cf);

#endif
