/*
 * cmd_send.c - rcs send: one job (POST /tasks/<id>/jobs) or a bulk send
 * (/jobs/list, /jobs/tags; docs/api.md "Bulk sends and groups"), with the rollout,
 * abort and retry members of docs/cli.md "Rollouts" when asked for, then --wait.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonu.h"
#include "send.h"
#include "table.h"
#include "uuid.h"
#include "watch.h"

#define SEND_MAX_DEVICES  10000        /* docs/api.md: ident_list */
#define SEND_VAR_FILE_MAX (256 * 1024) /* --var NAME=@FILE (docs/cli.md "Sending") */
#define SEND_SHOW         10           /* jobs and rejected devices listed without --verbose */
#define SEND_MIN_RATE     1024LL       /* docs/api.md "Download limits" */
#define SEND_MAX_RATE     (1LL << 40)
#define SEND_ROLLOUT_HINT                                                                          \
	"--rollout-per-minute, --exponential, --window, --abort-percent, --retries, "              \
	"--continuous and --download-max-* need a coordinator with rollouts (docs/cli.md)"

static int send_digits(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

enum rcs_err send_parse_time(const char *s, time_t now, int64_t *out)
{
	static const char *const fmts[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S",
					   "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"};
	char *end = NULL;
	long long v;

	if (send_digits(s)) {
		errno = 0;
		v = strtoll(s, &end, 10);
		if (errno != 0)
			return RCS_ERR_INVAL;
		*out = v;
		return RCS_OK;
	}
	if (s[0] == '+' && send_digits(s + 1) == 0 && isdigit((unsigned char)s[1])) {
		long long mul = 0;
		errno = 0;
		v = strtoll(s + 1, &end, 10);
		if (errno != 0 || end == NULL || end[0] == '\0' || end[1] != '\0')
			return RCS_ERR_INVAL;
		mul = end[0] == 's'   ? 1
		      : end[0] == 'm' ? 60
		      : end[0] == 'h' ? 3600
		      : end[0] == 'd' ? 86400
				      : 0;
		if (mul == 0 || v > 100LL * 365 * 86400 / mul)
			return RCS_ERR_INVAL;
		*out = (int64_t)now + v * mul;
		return RCS_OK;
	}
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		struct tm tm;
		const char *rest;
		memset(&tm, 0, sizeof(tm));
		rest = strptime(s, fmts[i], &tm);
		if (rest == NULL || (rest[0] != '\0' && strcmp(rest, "Z") != 0))
			continue;
		if (rest[0] == 'Z') {
			*out = (int64_t)timegm(&tm);
		} else {
			tm.tm_isdst = -1;
			*out = (int64_t)mktime(&tm);
		}
		return *out < 0 ? RCS_ERR_INVAL : RCS_OK;
	}
	return RCS_ERR_INVAL;
}

enum rcs_err send_var_value(const char *type, const char *text, time_t now, json_object **out,
			    char *errbuf, size_t errlen)
{
	char *end = NULL;
	int64_t t;

	*out = NULL;
	if (type == NULL) {
		/* not declared, "string", or a type this CLI doesn't know: the text as it is
		 * (the API judges it) */
		*out = json_object_new_string(text);
	} else if (strcmp(type, "integer") == 0 || strcmp(type, "timestamp") == 0) {
		long long v;
		errno = 0;
		v = strtoll(text, &end, 10);
		if (errno == 0 && end != text && *end == '\0') {
			*out = json_object_new_int64(v);
		} else if (strcmp(type, "timestamp") == 0 &&
			   send_parse_time(text, now, &t) == RCS_OK) {
			*out = json_object_new_int64(t);
		} else {
			snprintf(errbuf, errlen, "'%s' is not %s", text,
				 type[0] == 'i'
				     ? "an integer"
				     : "a time (Unix seconds, +10m, YYYY-MM-DDTHH:MM[:SS][Z])");
			return RCS_ERR_INVAL;
		}
	} else if (strcmp(type, "number") == 0) {
		double d;
		errno = 0;
		d = strtod(text, &end);
		if (errno != 0 || end == text || *end != '\0' || !isfinite(d)) {
			snprintf(errbuf, errlen, "'%s' is not a number", text);
			return RCS_ERR_INVAL;
		}
		*out = json_object_new_double(d);
	} else if (strcmp(type, "boolean") == 0) {
		if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "1")) {
			*out = json_object_new_boolean(1);
		} else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "0")) {
			*out = json_object_new_boolean(0);
		} else {
			snprintf(errbuf, errlen, "'%s' is not a boolean (true or false)", text);
			return RCS_ERR_INVAL;
		}
	} else {
		*out = json_object_new_string(text);
	}
	if (*out == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return RCS_ERR_NOMEM;
	}
	return RCS_OK;
}

/* The text of --var NAME=@FILE (docs/cli.md "Sending"): FILE's bytes, at most
 * SEND_VAR_FILE_MAX, text without NUL; for a type other than string without its final
 * white space (a newline an editor adds). NULL with the message printed. */
static char *send_var_file(struct cli *c, const char *name, const char *file, const char *type)
{
	struct buf b;
	char *text = NULL;

	buf_init(&b, SEND_VAR_FILE_MAX);
	if (file[0] == '\0') {
		cli_fail(c, CLI_USAGE, "--var %s=@: name the file after the @ (@- for stdin)",
			 name);
		goto out;
	}
	fflush(stderr);
	if (cli_read_file(c, file, &b) != CLI_OK) {
		fprintf(stderr,
			"rcs: %s: --var %s=@%s: the value is the file's content; to send "
			"a text beginning with @, write @@\n",
			c->cmd, name, file);
		goto out;
	}
	if (memchr(b.data, '\0', b.len) != NULL) {
		cli_fail(c, CLI_USAGE, "--var %s=@%s: the file holds a NUL byte (not text)", name,
			 file);
		goto out;
	}
	while (type != NULL && strcmp(type, "string") != 0 && b.len > 0 &&
	       isspace((unsigned char)b.data[b.len - 1]))
		b.len--;
	text = strndup(b.data, b.len);
	if (text == NULL)
		cli_fail(c, CLI_USAGE, "out of memory");
out:
	buf_free(&b);
	return text;
}

/* --var NAME=VALUE... into an object typed by the task's variables_info */
static int send_vars(struct cli *c, json_object *task, json_object **out)
{
	json_object *vi = jsonu_member(task, "variables_info"), *vars = NULL;
	char errbuf[256], name[128];
	time_t now = time(NULL);
	int rc = CLI_OK;

	vars = json_object_new_object();
	if (vars == NULL)
		return cli_fail(c, CLI_USAGE, "out of memory");
	for (size_t i = 0; i < c->o.var.n; i++) {
		const char *spec = c->o.var.items[i], *eq = strchr(spec, '='), *type, *val;
		json_object *v = NULL;
		char *file = NULL;
		size_t n = eq ? (size_t)(eq - spec) : 0;
		enum rcs_err err;

		if (eq == NULL || n == 0 || n >= sizeof(name)) {
			rc = cli_fail(c, CLI_USAGE, "--var '%s': write it NAME=VALUE", spec);
			goto out;
		}
		memcpy(name, spec, n);
		name[n] = '\0';
		type = cli_str(jsonu_member(vi, name), "type");
		val = eq + 1;
		if (val[0] == '@' && val[1] == '@') {
			val++; /* "@@text": the text "@text" */
		} else if (val[0] == '@') {
			file = send_var_file(c, name, val + 1, type);
			if (file == NULL) {
				rc = CLI_USAGE;
				goto out;
			}
			val = file;
		}
		err = send_var_value(type, val, now, &v, errbuf, sizeof(errbuf));
		free(file);
		if (err != RCS_OK) {
			rc = cli_fail(c, CLI_USAGE, "--var %s: %s", name, errbuf);
			goto out;
		}
		if (json_object_object_add(vars, name, v) != 0) {
			json_object_put(v);
			rc = cli_fail(c, CLI_USAGE, "out of memory");
			goto out;
		}
	}
	*out = vars;
	vars = NULL;
out:
	json_object_put(vars);
	return rc;
}

static int send_add(json_object *o, const char *k, json_object *v)
{
	if (v == NULL)
		return -1;
	if (json_object_object_add(o, k, v) != 0) {
		json_object_put(v);
		return -1;
	}
	return 0;
}

/* The local time's offset from UTC now, in minutes (--window without --window-utc-offset). */
static long long send_local_offset(void)
{
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	return (long long)(tm.tm_gmtoff / 60);
}

/* rollout: max_per_minute and/or exponential (--exponential N,F,K) */
static int send_rollout_pace(struct cli *c, json_object *body)
{
	json_object *o = NULL, *e = NULL;
	char errbuf[256];
	int bad = 0;

	if (c->o.rollout_per_minute <= 0 && c->o.exponential == NULL)
		return CLI_OK;
	if (c->o.exponential != NULL &&
	    send_parse_exponential(c->o.exponential, &e, errbuf, sizeof(errbuf)) != RCS_OK)
		return cli_fail(c, CLI_USAGE, "--exponential %s", errbuf);
	o = json_object_new_object();
	if (c->o.rollout_per_minute > 0)
		bad |=
		    send_add(o, "max_per_minute", json_object_new_int64(c->o.rollout_per_minute));
	if (e != NULL)
		bad |= send_add(o, "exponential", e);
	bad |= send_add(body, "rollout", o);
	return bad ? cli_fail(c, CLI_USAGE, "out of memory") : CLI_OK;
}

/* window: --window DAYS/HH:MM/DURATION, in local time unless --window-utc-offset says */
static int send_window(struct cli *c, json_object *body)
{
	json_object *w = NULL;
	char errbuf[384], *end = NULL;
	long long off = send_local_offset();

	if (c->o.window == NULL)
		return CLI_OK;
	if (c->o.window_utc_offset != NULL) {
		errno = 0;
		off = strtoll(c->o.window_utc_offset, &end, 10);
		if (errno != 0 || end == c->o.window_utc_offset || *end != '\0' || off < -720 ||
		    off > 840)
			return cli_fail(
			    c, CLI_USAGE,
			    "--window-utc-offset '%s': minutes east of UTC, -720 to 840 "
			    "(60 for UTC+1)",
			    c->o.window_utc_offset);
	}
	if (send_parse_window(c->o.window, off, &w, errbuf, sizeof(errbuf)) != RCS_OK)
		return cli_fail(c, CLI_USAGE, "--window %s", errbuf);
	return send_add(body, "window", w) ? cli_fail(c, CLI_USAGE, "out of memory") : CLI_OK;
}

/* download: --download-max-concurrent N, --download-max-rate BYTES (docs/api.md "Download
 * limits") */
static int send_download(struct cli *c, json_object *body)
{
	json_object *o;
	long long rate = 0;
	int bad = 0;

	if (c->o.download_max_concurrent <= 0 && c->o.download_max_rate == NULL)
		return CLI_OK;
	if (c->o.download_max_rate != NULL &&
	    send_parse_bytes(c->o.download_max_rate, SEND_MIN_RATE, SEND_MAX_RATE, &rate) != RCS_OK)
		return cli_fail(
		    c, CLI_USAGE,
		    "--download-max-rate '%s': bytes a second, 1K to 1T, e.g. 500K, 10M, "
		    "1G (K = 1024)",
		    c->o.download_max_rate);
	o = json_object_new_object();
	if (c->o.download_max_concurrent > 0)
		bad |= send_add(o, "max_concurrent",
				json_object_new_int64(c->o.download_max_concurrent));
	if (rate > 0)
		bad |= send_add(o, "max_bytes_per_s", json_object_new_int64(rate));
	bad |= send_add(body, "download", o);
	return bad ? cli_fail(c, CLI_USAGE, "out of memory") : CLI_OK;
}

/* the members of docs/cli.md "Rollouts", from the options given */
static int send_rollout(struct cli *c, json_object *body)
{
	json_object *o;
	double f = 0;
	int bad = 0, rc;

	rc = send_rollout_pace(c, body);
	if (rc == CLI_OK)
		rc = send_window(c, body);
	if (rc != CLI_OK)
		return rc;
	if (c->o.abort_percent >= 0) {
		o = json_object_new_object();
		bad |= send_add(o, "failure_percent", json_object_new_int64(c->o.abort_percent));
		if (c->o.abort_min_finished > 0)
			bad |= send_add(o, "min_finished",
					json_object_new_int64(c->o.abort_min_finished));
		bad |= send_add(body, "abort", o);
	}
	if (c->o.retries >= 0) {
		if (c->o.retry_backoff_factor != NULL &&
		    send_parse_number(c->o.retry_backoff_factor, 1, 10, &f) != RCS_OK)
			return cli_fail(c, CLI_USAGE,
					"--retry-backoff-factor '%s': a number, 1 to 10",
					c->o.retry_backoff_factor);
		o = json_object_new_object();
		bad |= send_add(o, "max_attempts", json_object_new_int64(c->o.retries + 1));
		if (c->o.retry_backoff >= 0)
			bad |= send_add(o, "backoff_s", json_object_new_int64(c->o.retry_backoff));
		if (c->o.retry_backoff_factor != NULL)
			bad |= send_add(o, "backoff_factor", json_object_new_double(f));
		bad |= send_add(body, "retry", o);
	}
	if (c->o.continuous)
		bad |= send_add(body, "continuous", json_object_new_boolean(1));
	if (bad)
		return cli_fail(c, CLI_USAGE, "out of memory");
	return send_download(c, body);
}

/* How many of n lines are printed: all with --verbose, else SEND_SHOW. */
static size_t send_shown(const struct cli *c, size_t n)
{
	return c->o.verbose || n <= SEND_SHOW ? n : SEND_SHOW;
}

/* The device names of the jobs and rejected devices a bulk send prints, read once. */
static void send_names(struct cli *c, json_object *items, json_object *rej, struct cli_names *nm)
{
	size_t ni = send_shown(c, items ? json_object_array_length(items) : 0),
	       nr = send_shown(c, rej ? json_object_array_length(rej) : 0), n = 0;
	const char **ids = calloc(ni + nr + 1, sizeof(*ids));

	for (size_t i = 0; ids && i < ni; i++)
		ids[n++] = cli_str(json_object_array_get_idx(items, i), "entity_ident");
	for (size_t i = 0; ids && i < nr; i++)
		ids[n++] = cli_str(json_object_array_get_idx(rej, i), "entity_ident");
	cli_names_load(c, nm, ids, n);
	free(ids);
}

/* "pending 9990, transmited 10": the count of each value of member k (of member sub when
 * not NULL) over the items of a, in the order first seen. */
static void send_tally(json_object *a, const char *sub, const char *k, char *out, size_t len)
{
	json_object *seen = json_object_new_object();
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0; seen && i < json_object_array_length(a); i++) {
		json_object *it = json_object_array_get_idx(a, i), *n;
		const char *v = cli_str(sub ? jsonu_member(it, sub) : it, k);

		v = v ? v : "?";
		n = jsonu_member(seen, v);
		json_object_object_add(seen, v,
				       json_object_new_int64(n ? json_object_get_int64(n) + 1 : 1));
	}
	json_object_object_foreach(seen, name, v)
	{
		char clean[64];
		int w;

		table_clean(clean, sizeof(clean), name, 0);
		w = snprintf(out + o, len - o, "%s%s %lld", o ? ", " : "", clean,
			     (long long)json_object_get_int64(v));
		if (w < 0 || (size_t)w >= len - o)
			break;
		o += (size_t)w;
	}
	json_object_put(seen);
}

/* "device pump-7 (1c9e20ab) rejected: why (code)" for each rejected device (SEND_SHOW of them
 * without --verbose, then their count by code), on stderr. */
static void send_rejected(struct cli *c, json_object *rej, const struct cli_names *nm)
{
	size_t nr = rej ? json_object_array_length(rej) : 0, offline = 0, shown = send_shown(c, nr);
	char tally[512];

	for (size_t i = 0; i < nr; i++) {
		json_object *it = json_object_array_get_idx(rej, i);
		json_object *e = jsonu_member(it, "error");
		char msg[256], dev[300];

		if (cli_str(e, "code") && strcmp(cli_str(e, "code"), "device_offline") == 0)
			offline++;
		if (i >= shown)
			continue;
		table_clean(msg, sizeof(msg), cli_str(e, "message") ? cli_str(e, "message") : "?",
			    0);
		cli_device_line(dev, sizeof(dev), nm, cli_str(it, "entity_ident"));
		cli_fail(c, 0, "device %s rejected: %s (%s)", dev, msg,
			 cli_str(e, "code") ? cli_str(e, "code") : "?");
	}
	if (shown < nr) {
		send_tally(rej, "error", "code", tally, sizeof(tally));
		cli_fail(c, 0, "... and %zu more rejected (%zu in all: %s; --verbose lists them)",
			 nr - shown, nr, tally);
	}
	/* what to do about them (docs/cli.md "Sending") */
	if (offline > 0 && c->o.offline == NULL)
		cli_fail(c, 0,
			 "%zu device%s offline: send again to %s with --offline queue to queue"
			 " their jobs until they come online",
			 offline, offline == 1 ? " was" : "s were", offline == 1 ? "it" : "them");
}

/* The jobs of a bulk send: a table of the first SEND_SHOW (all with --verbose), then how many
 * more and their count by status (docs/cli.md "Sending"). */
static int send_jobs_table(struct cli *c, json_object *g, json_object *items,
			   const struct cli_names *nm)
{
	static const char *const heads[] = {"JOB", "DEVICE", "STATUS"};
	size_t ni = json_object_array_length(items), shown = send_shown(c, ni), n = 0;
	const char **jids = cli_idents(items, "ident", &n),
		   **dids = cli_idents(items, "entity_ident", &n);
	char tally[512];
	struct table t;
	size_t jlen, dlen;
	int rc = CLI_OK;

	table_init(&t, 3, heads);
	if (jids == NULL || dids == NULL) {
		rc = cli_fail(c, CLI_API, "out of memory");
		goto out;
	}
	/* the short idents tell every job apart, shown or not: what is shown is what to type */
	jlen = table_short_len(jids, n);
	dlen = table_short_len(dids, n);
	table_keep(&t, 0);
	table_least(&t, 1, dlen + 1);
	table_keep(&t, 2);
	for (size_t i = 0; i < shown && rc == CLI_OK; i++) {
		json_object *it = json_object_array_get_idx(items, i);
		char id[UUID_STR_LEN], dev[300];
		const char *row[] = {
		    table_short(id, sizeof(id), cli_str(it, "ident"), jlen),
		    cli_device_cell(dev, sizeof(dev), nm, cli_str(it, "entity_ident"), dlen),
		    cli_str(it, "status")};
		if (table_add(&t, row) != RCS_OK)
			rc = cli_fail(c, CLI_API, "out of memory");
	}
	table_print(&t, stdout, table_term_width());
	if (shown < ni) {
		send_tally(items, NULL, "status", tally, sizeof(tally));
		printf("... and %zu more (%zu jobs: %s; --verbose lists them all%s%s%s)\n",
		       ni - shown, ni, tally, g ? ", rcs jobs list --group " : "",
		       g ? cli_show(g, "ident") : "", g ? " too" : "");
	}
out:
	free(jids);
	free(dids);
	table_free(&t);
	return rc;
}

static int send_bulk_print(struct cli *c, json_object *ans, long long *rejected)
{
	json_object *g = jsonu_member(ans, "group"), *items = cli_array(ans, "items"),
		    *rej = cli_array(ans, "rejected");
	size_t ni = items ? json_object_array_length(items) : 0;
	struct cli_names nm = {0};
	int rc = CLI_OK;

	*rejected = rej ? (long long)json_object_array_length(rej) : 0;
	if (g != NULL && !json_object_is_type(g, json_type_object))
		g = NULL;
	send_names(c, items, rej, &nm);
	if (g != NULL)
		printf("group %s (%s): %zu job%s\n", cli_show(g, "name"), cli_show(g, "ident"), ni,
		       ni == 1 ? "" : "s");
	else
		printf("%zu job%s\n", ni, ni == 1 ? "" : "s");
	send_rejected(c, rej, &nm);
	if (ni > 0)
		rc = send_jobs_table(c, g, items, &nm);
	cli_names_free(&nm);
	return rc;
}

/* "job <ident> <status> on pump-7 (1c9e20ab)" for a job to one device. */
static void send_one_print(struct cli *c, json_object *job, const char *dev)
{
	struct cli_names nm = {0};
	char line[300];

	cli_names_load(c, &nm, &dev, 1);
	printf("job %s %s on %s\n", cli_show(job, "ident"), cli_show(job, "status"),
	       cli_device_line(line, sizeof(line), &nm, dev));
	cli_names_free(&nm);
}

/* The rejected devices of a bulk send answered in JSON (--json --wait), on stderr. */
static void send_rejected_json(struct cli *c, json_object *ans)
{
	struct cli_names nm = {0};
	json_object *rej = cli_array(ans, "rejected");

	if (rej == NULL || json_object_array_length(rej) == 0)
		return;
	send_names(c, NULL, rej, &nm);
	send_rejected(c, rej, &nm);
	cli_names_free(&nm);
}

/* Whether a tag send's answer says that no device holds the tag: no job and no device
 * rejected (docs/cli.md "Sending"). */
static int send_matched_none(json_object *ans)
{
	json_object *items = cli_array(ans, "items"), *rej = cli_array(ans, "rejected");

	return items != NULL && rej != NULL && json_object_array_length(items) == 0 &&
	       json_object_array_length(rej) == 0;
}

/* Whether an option of docs/cli.md "Rollouts" is given (they make a group send). */
static int send_wants_group(const struct cli *c)
{
	return c->o.rollout_per_minute > 0 || c->o.exponential != NULL || c->o.window != NULL ||
	       c->o.abort_percent >= 0 || c->o.retries >= 0 || c->o.continuous ||
	       c->o.download_max_concurrent > 0 || c->o.download_max_rate != NULL;
}

/* The checks of the command line that need no request; *when: --schedule's time. */
static int send_check(struct cli *c, int64_t *when)
{
	time_t now = time(NULL);
	char ago[32];

	if ((c->o.device.n > 0) == (c->o.tag.n > 0))
		return cli_fail(c, CLI_USAGE, "give --device DEVICE (one or more) or --tag TAG");
	if (c->o.tag.n > 1)
		return cli_fail(c, CLI_USAGE, "--tag: one tag per send");
	if (c->o.device.n > SEND_MAX_DEVICES)
		return cli_fail(c, CLI_USAGE, "at most %d devices per send", SEND_MAX_DEVICES);
	if (c->o.offline && strcmp(c->o.offline, "queue") != 0 &&
	    strcmp(c->o.offline, "reject") != 0)
		return cli_fail(c, CLI_USAGE, "--offline: 'queue' or 'reject', not '%s'",
				c->o.offline);
	if (c->o.abort_min_finished > 0 && c->o.abort_percent < 0)
		return cli_fail(c, CLI_USAGE, "--abort-min-finished goes with --abort-percent");
	if ((c->o.retry_backoff >= 0 || c->o.retry_backoff_factor != NULL) && c->o.retries < 0)
		return cli_fail(c, CLI_USAGE,
				"--retry-backoff and --retry-backoff-factor go with --retries");
	if (c->o.window_utc_offset != NULL && c->o.window == NULL)
		return cli_fail(c, CLI_USAGE, "--window-utc-offset goes with --window");
	if (c->o.continuous && c->o.tag.n == 0)
		return cli_fail(c, CLI_USAGE,
				"--continuous goes with --tag (devices that gain the tag later)");
	if (c->o.schedule != NULL && send_parse_time(c->o.schedule, now, when) != RCS_OK)
		return cli_fail(c, CLI_USAGE,
				"--schedule '%s': not a time (Unix seconds, +30s, +10m, "
				"+2h, +1d, YYYY-MM-DD[THH:MM[:SS]][Z])",
				c->o.schedule);
	if (c->o.schedule != NULL && *when < (int64_t)now) {
		/* the API sends a job whose time has passed at once (docs/cli.md "Sending") */
		table_duration(ago, sizeof(ago), (double)((int64_t)now - *when));
		cli_fail(c, 0, "warning: --schedule %s is %s in the past: the jobs are sent now",
			 c->o.schedule, ago);
	}
	return CLI_OK;
}

int cmd_send(struct cli *c)
{
	char task[UUID_STR_LEN], dev[UUID_STR_LEN], path[128], autoname[64];
	struct http_resp tr = {0}, r = {0};
	json_object *body = NULL, *vars = NULL, *list = NULL;
	const char *group_name = c->o.group, *hint = NULL;
	long long rejected = 0;
	int64_t when = 0;
	int rc = CLI_OK, bad = 0, bulk, rollout;

	rollout = send_wants_group(c);
	rc = send_check(c, &when);
	if (rc != CLI_OK)
		goto out;
	/* --offline is a bulk send's: one device with it is a list send of one */
	bulk = c->o.tag.n > 0 || c->o.device.n > 1 || group_name != NULL || rollout ||
	       c->o.offline != NULL;
	if (bulk && c->o.wait && group_name == NULL) {
		/* --wait follows a group: name one */
		time_t now = time(NULL);
		struct tm tm;
		localtime_r(&now, &tm);
		strftime(autoname, sizeof(autoname), "rcs-send-%Y%m%d-%H%M%S", &tm);
		group_name = autoname;
	}
	rc = cli_task_ident(c, c->pos[0], task);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/tasks/%s", task);
	rc = cli_call(c, "GET", path, NULL, &tr, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.var.n > 0 && (rc = send_vars(c, tr.json, &vars)) != CLI_OK)
		goto out;
	body = json_object_new_object();
	if (body == NULL) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	if (vars != NULL) {
		bad |= send_add(body, "variables", vars);
		vars = NULL;
	}
	if (c->o.comment)
		bad |= send_add(body, "comment", json_object_new_string(c->o.comment));
	if (c->o.schedule)
		bad |= send_add(body, "scheduled_time", json_object_new_int64(when));
	if (c->o.ttl > 0)
		bad |= send_add(body, "ttl", json_object_new_int64(c->o.ttl));
	if (c->o.mail.n > 0) {
		list = json_object_new_array();
		for (size_t i = 0; list && i < c->o.mail.n; i++)
			json_object_array_add(list, json_object_new_string(c->o.mail.items[i]));
		bad |= send_add(body, "notification_mail_list", list);
		list = NULL;
	}
	if (!bulk) {
		rc = cli_device_ident(c, c->o.device.items[0], dev);
		if (rc != CLI_OK)
			goto out;
		bad |= send_add(body, "entity_ident", json_object_new_string(dev));
		snprintf(path, sizeof(path), "/tasks/%s/jobs", task);
	} else {
		if (group_name)
			bad |= send_add(body, "group_name", json_object_new_string(group_name));
		if (c->o.offline)
			bad |= send_add(body, "offline", json_object_new_string(c->o.offline));
		if (rollout) {
			rc = send_rollout(c, body);
			if (rc != CLI_OK)
				goto out;
			hint = SEND_ROLLOUT_HINT;
		}
		if (c->o.tag.n > 0) {
			bad |= send_add(body, "tag", json_object_new_string(c->o.tag.items[0]));
			snprintf(path, sizeof(path), "/tasks/%s/jobs/tags", task);
		} else {
			list = json_object_new_array();
			for (size_t i = 0; list && i < c->o.device.n && rc == CLI_OK; i++) {
				rc = cli_device_ident(c, c->o.device.items[i], dev);
				if (rc == CLI_OK)
					json_object_array_add(list, json_object_new_string(dev));
			}
			if (rc != CLI_OK)
				goto out;
			bad |= send_add(body, "ident_list", list);
			list = NULL;
			snprintf(path, sizeof(path), "/tasks/%s/jobs/list", task);
		}
	}
	if (bad) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "POST", path, body, &r, hint);
	if (rc != CLI_OK)
		goto out;
	if (!bulk) {
		if (c->o.json && !c->o.wait)
			cli_print_raw(&r);
		else if (!c->o.json)
			send_one_print(c, r.json, dev);
	} else {
		json_object *rej = cli_array(r.json, "rejected");
		rejected = rej ? (long long)json_object_array_length(rej) : 0;
		if (c->o.json && !c->o.wait)
			cli_print_raw(&r);
		else if (!c->o.json)
			rc = send_bulk_print(c, r.json, &rejected);
		else
			send_rejected_json(c, r.json);
	}
	/* a continuous send waits for devices that gain the tag later: none yet is no error */
	if (rc == CLI_OK && bulk && c->o.tag.n > 0 && !c->o.allow_empty && !c->o.continuous &&
	    send_matched_none(r.json)) {
		rc = cli_fail(c, CLI_FAILED,
			      "no device holds tag '%s': nothing was sent (--allow-empty: not an "
			      "error)",
			      c->o.tag.items[0]);
		goto out;
	}
	if (rc == CLI_OK && c->o.wait) {
		const char *follow = bulk ? cli_str(jsonu_member(r.json, "group"), "ident")
					  : cli_str(r.json, "ident");
		fflush(stdout);
		if (follow == NULL)
			rc = cli_fail(c, CLI_API, "the API's answer names no %s to wait for",
				      bulk ? "group" : "job");
		else
			rc = watch_run(c, bulk ? follow : NULL, bulk ? NULL : follow,
				       c->o.json ? WATCH_FINAL_JSON : WATCH_AUTO,
				       c->o.interval > 0 ? c->o.interval : 1);
	}
	if (rc == CLI_OK && rejected > 0)
		rc = CLI_FAILED;
out:
	json_object_put(body);
	json_object_put(vars);
	json_object_put(list);
	http_resp_free(&tr);
	http_resp_free(&r);
	return rc;
}
