#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cfg.h"

struct config_file {
	char *url;
	char *api_key;
	char *api_key_file;
	long long timeout;
};

static const struct cfg_opt config_opts[] = {
    {"url", CFG_STRING, offsetof(struct config_file, url), 0, 0, "URL", "the coordinator"},
    {"api_key", CFG_STRING, offsetof(struct config_file, api_key), 0, 0, "KEY", "the API key"},
    {"api_key_file", CFG_STRING, offsetof(struct config_file, api_key_file), 0, 0, "FILE",
     "a file holding the API key"},
    {"timeout", CFG_INT, offsetof(struct config_file, timeout), 1, CONFIG_TIMEOUT_MAX, "S",
     "seconds per request"},
    {NULL, CFG_STRING, 0, 0, 0, NULL, NULL},
};

static enum rcs_err config_dup(char **dst, const char *src)
{
	*dst = strdup(src);
	return *dst == NULL ? RCS_ERR_NOMEM : RCS_OK;
}

/* The file to read into path; *must_exist when it was named explicitly. False: none. */
static bool config_path(const char *flag, char *path, size_t len, bool *must_exist)
{
	const char *env = getenv("RCS_CONFIG"), *xdg = getenv("XDG_CONFIG_HOME"),
		   *home = getenv("HOME");
	int n;

	*must_exist = true;
	if (flag != NULL || (env != NULL && *env != '\0')) {
		n = snprintf(path, len, "%s", flag != NULL ? flag : env);
		return n > 0 && (size_t)n < len;
	}
	*must_exist = false;
	if (xdg != NULL && *xdg == '/')
		n = snprintf(path, len, "%s/rcs/config", xdg);
	else if (home != NULL && *home != '\0')
		n = snprintf(path, len, "%s/.config/rcs/config", home);
	else
		return false;
	return n > 0 && (size_t)n < len;
}

enum rcs_err config_settle(struct config *cf, const char *config_flag, const char *url_flag,
			   const char *key_flag, long long timeout_flag, char *errbuf,
			   size_t errlen)
{
	struct config_file f = {NULL, NULL, NULL, -1};
	char path[PATH_MAX];
	const char *env_url = getenv("RCS_URL"), *env_key = getenv("RCS_API_KEY");
	bool must_exist = false, have_file;
	struct stat st;
	enum rcs_err err = RCS_OK;

	memset(cf, 0, sizeof(*cf));
	cf->timeout = CONFIG_TIMEOUT_DEFAULT;
	have_file = config_path(config_flag, path, sizeof(path), &must_exist);
	if (have_file && (must_exist || stat(path, &st) == 0)) {
		err = cfg_parse_file(config_opts, &f, path, errbuf, errlen);
		if (err != RCS_OK)
			goto out;
		if ((f.api_key != NULL || f.api_key_file != NULL) && stat(path, &st) == 0 &&
		    (st.st_mode & 077) != 0)
			fprintf(stderr,
				"rcs: warning: %s holds an API key and others may read it "
				"(chmod 600 it)\n",
				path);
		if (f.api_key != NULL && f.api_key_file != NULL) {
			snprintf(errbuf, errlen, "%s: give api_key or api_key_file, not both",
				 path);
			err = RCS_ERR_INVAL;
			goto out;
		}
	}
	if (url_flag != NULL)
		err = config_dup(&cf->url, url_flag);
	else if (env_url != NULL && *env_url != '\0')
		err = config_dup(&cf->url, env_url);
	else if (f.url != NULL)
		err = config_dup(&cf->url, f.url);
	if (err != RCS_OK)
		goto out;
	if (key_flag != NULL)
		err = config_dup(&cf->api_key, key_flag);
	else if (env_key != NULL && *env_key != '\0')
		err = config_dup(&cf->api_key, env_key);
	else if (f.api_key != NULL)
		err = config_dup(&cf->api_key, f.api_key);
	else if (f.api_key_file != NULL)
		err = cfg_read_secret("api_key_file", f.api_key_file, &cf->api_key, errbuf, errlen);
	if (err != RCS_OK)
		goto out;
	if (timeout_flag > 0)
		cf->timeout = timeout_flag;
	else if (f.timeout > 0)
		cf->timeout = f.timeout;
out:
	cfg_free(config_opts, &f);
	return err;
}

void config_free(struct config *cf)
{
	free(cf->url);
	cf->url = NULL;
	cfg_secret_free(&cf->api_key);
}
