#include "cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const struct cfg_opt *cfg_lookup(const struct cfg_opt *opts, const char *name, size_t n)
{
	for (const struct cfg_opt *o = opts; o->name != NULL; o++) {
		size_t i;

		if (strlen(o->name) != n)
			continue;
		for (i = 0; i < n; i++) {
			char a = o->name[i], b = name[i];
			if (b == '-')
				b = '_';
			if (a != b)
				break;
		}
		if (i == n)
			return o;
	}
	return NULL;
}

/* Wipes and frees a string value (any of them may be a secret). */
static void cfg_str_free(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

/* "--mqtt-password" for "mqtt_password" (suffix: "" or "-file"). */
static void cfg_flag(char *out, size_t len, const char *name, const char *suffix)
{
	snprintf(out, len, "--%s%s", name, suffix);
	for (size_t i = 2; out[i] != '\0'; i++)
		if (out[i] == '_')
			out[i] = '-';
}

static bool cfg_parse_bool(const char *v, bool *out)
{
	if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on")) {
		*out = true;
		return true;
	}
	if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off")) {
		*out = false;
		return true;
	}
	return false;
}

static enum rcs_err cfg_assign(const struct cfg_opt *o, void *base, const char *value, char *errbuf,
			       size_t errlen)
{
	char *field = (char *)base + o->offset;

	switch (o->type) {
	case CFG_STRING: {
		char **dst = (char **)(void *)field;
		char *copy = strdup(value);
		if (copy == NULL)
			return RCS_ERR_NOMEM;
		cfg_str_free(*dst);
		*dst = copy;
		return RCS_OK;
	}
	case CFG_INT: {
		char *end = NULL;
		long long v;
		errno = 0;
		v = strtoll(value, &end, 10);
		if (errno != 0 || end == value || *end != '\0' || v < o->min || v > o->max) {
			snprintf(errbuf, errlen, "%s: '%s' is not an integer between %lld and %lld",
				 o->name, value, o->min, o->max);
			return RCS_ERR_INVAL;
		}
		*(long long *)(void *)field = v;
		return RCS_OK;
	}
	case CFG_BOOL:
		if (!cfg_parse_bool(value, (bool *)(void *)field)) {
			snprintf(errbuf, errlen, "%s: '%s' is not true or false", o->name, value);
			return RCS_ERR_INVAL;
		}
		return RCS_OK;
	case CFG_STRLIST: {
		struct cfg_strlist *l = (struct cfg_strlist *)(void *)field;
		char **items;
		char *copy;
		if (l->n >= CFG_MAX_LIST) {
			snprintf(errbuf, errlen, "%s: more than %d values", o->name, CFG_MAX_LIST);
			return RCS_ERR_TOOBIG;
		}
		copy = strdup(value);
		if (copy == NULL)
			return RCS_ERR_NOMEM;
		items = realloc(l->items, (l->n + 1) * sizeof(*items));
		if (items == NULL) {
			free(copy);
			return RCS_ERR_NOMEM;
		}
		items[l->n++] = copy;
		l->items = items;
		return RCS_OK;
	}
	}
	return RCS_ERR_INTERNAL;
}

enum rcs_err cfg_set(const struct cfg_opt *opts, void *base, const char *name, const char *value,
		     char *errbuf, size_t errlen)
{
	const struct cfg_opt *o = cfg_lookup(opts, name, strlen(name));

	if (o == NULL) {
		snprintf(errbuf, errlen, "unknown option '%s'", name);
		return RCS_ERR_INVAL;
	}
	return cfg_assign(o, base, value, errbuf, errlen);
}

enum rcs_err cfg_parse_file(const struct cfg_opt *opts, void *base, const char *path, char *errbuf,
			    size_t errlen)
{
	FILE *fp = NULL;
	char line[CFG_MAX_LINE + 2];
	unsigned lineno = 0;
	enum rcs_err err = RCS_OK;

	fp = fopen(path, "r");
	if (fp == NULL) {
		snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
		err = RCS_ERR_IO;
		goto out;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *p = line, *key, *val, *end;
		size_t len = strlen(line);
		const struct cfg_opt *o;
		char sub[256];

		lineno++;
		if (len > CFG_MAX_LINE) {
			snprintf(errbuf, errlen, "%s:%u: line longer than %d bytes", path, lineno,
				 CFG_MAX_LINE);
			err = RCS_ERR_TOOBIG;
			goto out;
		}
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '\0' || *p == '#')
			continue;
		key = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		if (*p)
			*p++ = '\0';
		while (isspace((unsigned char)*p))
			p++;
		val = p;
		end = val + strlen(val);
		while (end > val && isspace((unsigned char)end[-1]))
			*--end = '\0';
		o = cfg_lookup(opts, key, strlen(key));
		if (o == NULL) {
			snprintf(errbuf, errlen, "%s:%u: unknown option '%s'", path, lineno, key);
			err = RCS_ERR_INVAL;
			goto out;
		}
		if (*val == '\0') {
			snprintf(errbuf, errlen, "%s:%u: option '%s' needs a value", path, lineno,
				 key);
			err = RCS_ERR_INVAL;
			goto out;
		}
		err = cfg_assign(o, base, val, sub, sizeof(sub));
		if (err != RCS_OK) {
			snprintf(errbuf, errlen, "%s:%u: %s", path, lineno, sub);
			goto out;
		}
	}
	if (ferror(fp)) {
		snprintf(errbuf, errlen, "%s: read error", path);
		err = RCS_ERR_IO;
	}
out:
	if (fp)
		fclose(fp);
	return err;
}

enum rcs_err cfg_parse_args(const struct cfg_opt *opts, void *base, int argc, char **argv,
			    int first, int *next, char *errbuf, size_t errlen)
{
	int i = first;
	enum rcs_err err = RCS_OK;

	while (i < argc) {
		const char *a = argv[i], *name, *eq, *val = NULL;
		const struct cfg_opt *o;
		size_t n;

		if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
			break;
		name = a + 2;
		eq = strchr(name, '=');
		n = eq ? (size_t)(eq - name) : strlen(name);
		if (n == 6 && strncmp(name, "config", 6) == 0) {
			/* handled by the caller before; skip it and its value */
			if (!eq && i + 1 >= argc) {
				snprintf(errbuf, errlen, "option '--config' needs a value");
				err = RCS_ERR_INVAL;
				goto out;
			}
			i += eq ? 1 : 2;
			continue;
		}
		o = cfg_lookup(opts, name, n);
		if (o == NULL) {
			snprintf(errbuf, errlen, "unknown option '--%.*s'", (int)n, name);
			err = RCS_ERR_INVAL;
			goto out;
		}
		if (eq) {
			val = eq + 1;
			i++;
		} else if (o->type == CFG_BOOL) {
			/* "--flag" alone is true; "--flag false" takes a boolean word */
			bool b;
			if (i + 1 < argc && cfg_parse_bool(argv[i + 1], &b)) {
				val = argv[i + 1];
				i += 2;
			} else {
				val = "true";
				i++;
			}
		} else {
			if (i + 1 >= argc) {
				snprintf(errbuf, errlen, "option '--%s' needs a value", name);
				err = RCS_ERR_INVAL;
				goto out;
			}
			val = argv[i + 1];
			i += 2;
		}
		err = cfg_assign(o, base, val, errbuf, errlen);
		if (err != RCS_OK)
			goto out;
	}
out:
	if (next)
		*next = i;
	return err;
}

const char *cfg_find_arg(int argc, char **argv, const char *name)
{
	size_t n = strlen(name);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0)
			continue;
		if (a[2 + n] == '=')
			return a + 3 + n;
		if (a[2 + n] == '\0' && i + 1 < argc)
			return argv[i + 1];
	}
	return NULL;
}

void cfg_usage(FILE *fp, const struct cfg_opt *opts)
{
	for (const struct cfg_opt *o = opts; o->name != NULL; o++) {
		char flag[96];
		size_t i;

		snprintf(flag, sizeof(flag), "--%s", o->name);
		for (i = 2; flag[i]; i++)
			if (flag[i] == '_')
				flag[i] = '-';
		if (o->arg)
			fprintf(fp, "  %s %-*s %s\n", flag, (int)(28 - strlen(flag)), o->arg,
				o->help);
		else
			fprintf(fp, "  %-*s  %s\n", 28, flag, o->help);
	}
}

enum rcs_err cfg_read_secret(const char *option, const char *path, char **out, char *errbuf,
			     size_t errlen)
{
	char buf[CFG_MAX_SECRET + 1], flag[96];
	FILE *fp = NULL;
	size_t n = 0;
	enum rcs_err err = RCS_ERR_IO;

	*out = NULL;
	cfg_flag(flag, sizeof(flag), option, "");
	fp = fopen(path, "rb");
	if (fp == NULL) {
		snprintf(errbuf, errlen, "%s %s: %s", flag, path, strerror(errno));
		goto out;
	}
	n = fread(buf, 1, sizeof(buf), fp);
	if (ferror(fp)) {
		snprintf(errbuf, errlen, "%s %s: %s", flag, path, strerror(errno));
		goto out;
	}
	if (n > CFG_MAX_SECRET) {
		snprintf(errbuf, errlen, "%s %s: larger than %d bytes", flag, path, CFG_MAX_SECRET);
		err = RCS_ERR_TOOBIG;
		goto out;
	}
	if (n > 0 && buf[n - 1] == '\n') {
		n--;
		if (n > 0 && buf[n - 1] == '\r')
			n--;
	}
	err = RCS_ERR_INVAL;
	if (n == 0) {
		snprintf(errbuf, errlen, "%s %s: the file is empty", flag, path);
		goto out;
	}
	if (memchr(buf, '\0', n) != NULL) {
		snprintf(errbuf, errlen, "%s %s: the file holds a NUL byte", flag, path);
		goto out;
	}
	*out = malloc(n + 1);
	if (*out == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	memcpy(*out, buf, n);
	(*out)[n] = '\0';
	err = RCS_OK;
out:
	explicit_bzero(buf, sizeof(buf));
	if (fp)
		fclose(fp);
	return err;
}

enum rcs_err cfg_take_env_secret(const char *name, char **out)
{
	char *v = getenv(name);
	enum rcs_err err = RCS_OK;

	if (out)
		*out = NULL;
	if (v == NULL)
		return RCS_OK;
	if (out && *v != '\0') {
		*out = strdup(v);
		if (*out == NULL)
			err = RCS_ERR_NOMEM;
	}
	/* the string may be the process's initial environment, which
	   /proc/PID/environ shows: wiped there before it leaves environ */
	explicit_bzero(v, strlen(v));
	unsetenv(name);
	return err;
}

enum rcs_err cfg_secret_resolve(const char *option, char **value, const char *file, const char *env,
				enum cfg_secret_src *from, char *errbuf, size_t errlen)
{
	char *from_env = NULL, flag[96];
	enum cfg_secret_src src = CFG_SECRET_NONE;
	enum rcs_err err = RCS_OK;

	if (env) {
		err = cfg_take_env_secret(env, &from_env);
		if (err != RCS_OK) {
			snprintf(errbuf, errlen, "%s: %s", env, rcs_strerror(err));
			goto out;
		}
	}
	if (*value != NULL && file != NULL) {
		cfg_flag(flag, sizeof(flag), option, "");
		snprintf(errbuf, errlen, "%s and %s-file: give one of them", flag, flag);
		err = RCS_ERR_INVAL;
		goto out;
	}
	if (*value != NULL) {
		src = CFG_SECRET_VALUE;
	} else if (file != NULL) {
		char flagfile[112];
		snprintf(flagfile, sizeof(flagfile), "%s_file", option);
		err = cfg_read_secret(flagfile, file, value, errbuf, errlen);
		if (err != RCS_OK)
			goto out;
		src = CFG_SECRET_FILE;
	} else if (from_env != NULL) {
		*value = from_env;
		from_env = NULL;
		src = CFG_SECRET_ENV;
	}
out:
	cfg_secret_free(&from_env);
	if (from)
		*from = src;
	return err;
}

void cfg_warn_visible_secrets(int argc, char **argv, const char *const *names)
{
	for (size_t i = 0; names[i] != NULL; i++) {
		char flag[96];

		cfg_flag(flag, sizeof(flag), names[i], "");
		if (cfg_find_arg(argc, argv, flag + 2) == NULL)
			continue;
		log_warnx("%s on the command line is visible to every user of this host (ps,"
			  " /proc/PID/cmdline): use %s-file FILE instead",
			  flag, flag);
	}
}

void cfg_secret_free(char **s)
{
	cfg_str_free(*s);
	*s = NULL;
}

void cfg_strlist_free(struct cfg_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

void cfg_strlist_replaced(struct cfg_strlist *l, size_t from_file)
{
	if (from_file == 0 || l->n <= from_file)
		return;
	for (size_t i = 0; i < from_file; i++)
		free(l->items[i]);
	memmove(l->items, l->items + from_file, (l->n - from_file) * sizeof(*l->items));
	l->n -= from_file;
}

void cfg_free(const struct cfg_opt *opts, void *base)
{
	for (const struct cfg_opt *o = opts; o->name != NULL; o++) {
		char *field = (char *)base + o->offset;
		if (o->type == CFG_STRING) {
			cfg_secret_free((char **)(void *)field);
		} else if (o->type == CFG_STRLIST) {
			cfg_strlist_free((struct cfg_strlist *)(void *)field);
		}
	}
}
