/*
 * rcs: the command line of the Remote Command Service, a client of the REST API
 * (docs/cli.md; the API: docs/api.md).
 *
 *   find the subcommand -> parse its options (common/cfg tables) -> settle the
 *   URL and key (config.c) -> run it (cmd_*.c) -> exit with docs/cli.md's codes.
 */
#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "jsonu.h"
#include "table.h"
#include "uuid.h"

#define O_STR(n, f, arg, help)                                                                     \
	{                                                                                          \
		n, CFG_STRING, offsetof(struct cli_opts, f), 0, 0, arg, help                       \
	}
#define O_LIST(n, f, arg, help)                                                                    \
	{                                                                                          \
		n, CFG_STRLIST, offsetof(struct cli_opts, f), 0, 0, arg, help                      \
	}
#define O_BOOL(n, f, help)                                                                         \
	{                                                                                          \
		n, CFG_BOOL, offsetof(struct cli_opts, f), 0, 0, NULL, help                        \
	}
#define O_INT(n, f, lo, hi, arg, help)                                                             \
	{                                                                                          \
		n, CFG_INT, offsetof(struct cli_opts, f), lo, hi, arg, help                        \
	}
#define O_END                                                                                      \
	{                                                                                          \
		NULL, CFG_STRING, 0, 0, 0, NULL, NULL                                              \
	}

#define CLI_MAX_OPTS 48

static const struct cfg_opt opts_global[] = {
    O_STR("url", url, "URL", "the coordinator (RCS_URL), e.g. http://127.0.0.1:8080"),
    O_STR("api_key", api_key, "KEY", "the API key (RCS_API_KEY; better there or in the config)"),
    O_STR("config", url, "FILE", "the config file (RCS_CONFIG; ~/.config/rcs/config)"),
    O_INT("timeout", timeout, 1, CONFIG_TIMEOUT_MAX, "S", "seconds per request (30)"),
    O_BOOL("json", json, "print the API's JSON instead of tables"),
    O_BOOL("help", help, "this help"),
    O_END,
};

#define OPTS_PAGING                                                                                \
	O_INT("page", page, 1, 1000000000, "N", "the page (from 1)"),                              \
	    O_INT("per_page", per_page, 1, 500, "N", "items per page (50)")

static const struct cfg_opt opts_none[] = {O_END};
static const struct cfg_opt opts_tasks_list[] = {
    OPTS_PAGING,
    O_STR("sort", sort, "KEY", "created_at, update_at, name; -KEY descending"),
    O_STR("name", name, "NAME", "only the tasks of this name"),
    O_BOOL("hidden", hidden, "hidden tasks as well"),
    O_END,
};
static const struct cfg_opt opts_tasks_create[] = {
    O_STR("name", name, "NAME", "the task's name (required)"),
    O_STR("script", script, "SCRIPT", "the script it runs (required)"),
    O_LIST("variable", variable, "NAME:TYPE[:optional]",
	   "a variable (string, integer, number, boolean, timestamp); repeatable"),
    O_STR("constants", constants, "JSON", "an object of constants for the script"),
    O_STR("comment", comment, "TEXT", "a comment"),
    O_INT("script_timeout", script_timeout, 1, 86400, "S",
	  "seconds the script may run on a device (300)"),
    O_BOOL("allow_offline", allow_offline, "jobs for offline devices wait for them"),
    O_BOOL("private", private_task, "visible to its creator and admins only"),
    O_BOOL("hide", hide, "left out of the default task list"),
    O_BOOL("inactive", inactive, "creates no jobs until made active"),
    O_LIST("mail", mail, "ADDRESS", "mail status changes here; repeatable"),
    O_LIST("artifact", artifact, "NAME=ARTIFACT",
	   "a file the job brings (ident, short ident or name); repeatable"),
    O_STR("from_file", from_file, "FILE", "the whole body as JSON (- for stdin); flags override"),
    O_END,
};
static const struct cfg_opt opts_tasks_update[] = {
    O_STR("name", name, "NAME", "a new name"),
    O_STR("script", script, "SCRIPT", "another script"),
    O_LIST("variable", variable, "NAME:TYPE[:optional]",
	   "the variables (all of them: they replace the task's); repeatable"),
    O_STR("constants", constants, "JSON", "an object of constants (replaces the task's)"),
    O_STR("comment", comment, "TEXT", "a comment"),
    O_INT("script_timeout", script_timeout, 1, 86400, "S",
	  "seconds the script may run on a device"),
    O_STR("allow_offline", allow_offline_s, "true|false", "jobs for offline devices wait"),
    O_STR("public", public_s, "true|false", "visible to every user of the tenant"),
    O_STR("hide", hide_s, "true|false", "left out of the default task list"),
    O_STR("active", active, "true|false", "creates jobs (false: none)"),
    O_LIST("mail", mail, "ADDRESS", "mail status changes here (replaces the list); repeatable"),
    O_LIST("artifact", artifact, "NAME=ARTIFACT",
	   "the files the jobs bring (all of them: they replace the task's); repeatable"),
    O_BOOL("no_artifacts", no_artifacts, "the jobs bring no file"),
    O_STR("from_file", from_file, "FILE",
	  "members to change as JSON (- for stdin); flags override"),
    O_END,
};
static const struct cfg_opt opts_keys_create[] = {
    O_STR("user", user, "NAME", "the user the key acts as (required)"),
    O_STR("role", role, "ROLE", "viewer, operator or admin (required)"),
    O_END,
};
static const struct cfg_opt opts_webhooks_create[] = {
    O_LIST("event", event, "EVENT", "job.status or group.status (required); repeatable"),
    O_LIST("status", statuses, "STATUS", "deliver only these statuses (default all); repeatable"),
    O_STR("secret", secret, "SECRET", "the signing secret (default: generated, shown once)"),
    O_END,
};
static const struct cfg_opt opts_webhooks_update[] = {
    O_STR("endpoint", endpoint, "URL", "a new URL to deliver to"),
    O_LIST("event", event, "EVENT", "the events (replace the webhook's); repeatable"),
    O_LIST("status", statuses, "STATUS", "the statuses delivered (replace them); repeatable"),
    O_STR("secret", secret, "SECRET", "a new signing secret"),
    O_STR("active", active, "true|false", "deliver (false: no new deliveries)"),
    O_END,
};
static const struct cfg_opt opts_audit[] = {
    OPTS_PAGING,
    O_STR("user", user, "NAME", "only this user's requests"),
    O_STR("target", target, "IDENT", "only those on this object (its whole ident)"),
    O_STR("since", since, "TIME", "from TIME: Unix seconds, -30m/-2h/-1d, YYYY-MM-DD[THH:MM]"),
    O_STR("until", until, "TIME", "up to TIME (the same forms)"),
    O_END,
};
static const struct cfg_opt opts_devices_list[] = {
    OPTS_PAGING,
    O_STR("sort", sort, "KEY", "created_at, update_at, name; -KEY descending"),
    O_STR("name", name, "NAME", "only the devices of this name"),
    O_LIST("tag", tag, "TAG", "only the devices holding this tag"),
    O_STR("online", online, "true|false", "only the devices online (or offline)"),
    O_END,
};
static const struct cfg_opt opts_devices_create[] = {
    O_STR("name", name, "NAME", "the device's name (required)"),
    O_LIST("tag", tag, "TAG", "an inventory tag; repeatable"),
    O_END,
};
static const struct cfg_opt opts_devices_tag[] = {
    O_LIST("add", add, "TAG", "add this tag; repeatable"),
    O_LIST("remove", remove, "TAG", "remove this tag; repeatable"),
    O_END,
};
static const struct cfg_opt opts_jobs_list[] = {
    OPTS_PAGING,
    O_STR("sort", sort, "KEY", "created_at, update_at; -KEY descending"),
    O_STR("group", group, "GROUP", "only the jobs of this group (ident, short ident or name)"),
    O_STR("task", task, "TASK", "only the jobs of this task (ident, short ident or name)"),
    O_LIST("device", device, "DEVICE", "only the jobs of this device (ident, short ident or name)"),
    O_STR("status", status, "STATUS", "only the jobs in this status (running: started or running)"),
    O_END,
};
static const struct cfg_opt opts_paging[] = {OPTS_PAGING, O_END};
static const struct cfg_opt opts_jobs_cancel[] = {
    O_STR("reason", reason, "TEXT", "why, kept with the job (at most 500 bytes)"),
    O_END,
};
static const struct cfg_opt opts_groups_list[] = {
    OPTS_PAGING,
    O_STR("status", status, "STATUS",
	  "only the groups in this status (running, paused, completed, aborted, cancelled)"),
    O_END,
};
static const struct cfg_opt opts_send[] = {
    O_LIST("device", device, "DEVICE", "a device (ident, short ident or name); repeatable"),
    O_LIST("tag", tag, "TAG", "every device holding this tag"),
    O_LIST(
	"var", var, "NAME=VALUE",
	"a variable, typed as the task declares it (NAME=@FILE: the file's content); repeatable"),
    O_STR("group", group, "NAME", "name the group of the jobs"),
    O_STR("schedule", schedule, "TIME",
	  "send at TIME: Unix seconds, +30s/+10m/+2h/+1d, or YYYY-MM-DD[THH:MM[:SS]][Z]"),
    O_INT("ttl", ttl, 1, 31536000, "S", "expire jobs not ended within S seconds"),
    O_STR("comment", comment, "TEXT", "a comment on the jobs"),
    O_LIST("mail", mail, "ADDRESS", "mail status changes here; repeatable"),
    O_INT("rollout_per_minute", rollout_per_minute, 1, 100000, "N",
	  "release N jobs a minute (needs a coordinator with rollouts)"),
    O_INT("abort_percent", abort_percent, 0, 100, "P",
	  "abort the group when P % have failed (needs rollouts)"),
    O_INT("abort_min_finished", abort_min_finished, 1, 1000000, "M",
	  "... once M jobs have ended (with --abort-percent)"),
    O_STR("exponential", exponential, "N,F,K",
	  "release N jobs a minute, x F each time K more have terminated (needs rollouts)"),
    O_STR("window", window, "DAYS/HH:MM/DURATION",
	  "release jobs only then, e.g. sat,sun/02:00/2h or mon-fri/22:00/90 (local time)"),
    O_STR("window_utc_offset", window_utc_offset, "MIN",
	  "with --window: its time is UTC + MIN minutes (default: this host's zone now)"),
    O_INT("retries", retries, 0, 9, "N", "retry a failed job N times (needs rollouts)"),
    O_INT("retry_backoff", retry_backoff, 0, 86400, "S",
	  "with --retries: seconds before the first retry (30)"),
    O_STR("retry_backoff_factor", retry_backoff_factor, "F",
	  "with --retries: each retry waits F times longer than the last (2; 1 to 10)"),
    O_BOOL("continuous", continuous,
	   "with --tag: devices that gain the tag later get the job too (needs rollouts)"),
    O_INT("download_max_concurrent", download_max_concurrent, 1, 1000000, "N",
	  "at most N devices of the group download their artifacts at once (needs rollouts)"),
    O_STR("download_max_rate", download_max_rate, "BYTES",
	  "the group's devices share BYTES a second of downloads: 500K, 10M, 1G (1024s)"),
    O_STR("offline", offline, "queue|reject",
	  "devices offline at the send: queue their jobs, or leave them out (default: as the"
	  " task's allow_offline says)"),
    O_BOOL("allow_empty", allow_empty, "a tag no device holds is not an error"),
    O_BOOL("wait", wait, "wait for the jobs to end, showing their progress"),
    O_BOOL("verbose", verbose, "list every job and rejected device (else the first 10)"),
    O_INT("interval", interval, 1, 60, "S", "with --wait: seconds between polls (1)"),
    O_END,
};
static const struct cfg_opt opts_artifacts_upload[] = {
    O_STR("name", name, "NAME", "its label (default: the file's name)"),
    O_STR("sha256", sha256, "HEX",
	  "the SHA-256 the file must have (from its publisher): the coordinator checks it"),
    O_END,
};
static const struct cfg_opt opts_artifacts_list[] = {
    OPTS_PAGING,
    O_STR("sort", sort, "KEY", "created_at, name; -KEY descending (default: newest first)"),
    O_STR("name", name, "NAME", "only the artifacts of this name"),
    O_END,
};
static const struct cfg_opt opts_watch[] = {
    O_INT("interval", interval, 1, 60, "S", "seconds between polls (1)"),
    O_END,
};

struct cli_cmd {
	const char *group, *action; /* action NULL: a one-word command */
	const char *args;           /* positional arguments, for the usage line */
	int minpos, maxpos;
	const struct cfg_opt *opts;
	int (*run)(struct cli *c);
	const char *about;
};

static const struct cli_cmd cli_cmds[] = {
    {"tasks", "list", "", 0, 0, opts_tasks_list, cmd_tasks_list, "list the tasks"},
    {"tasks", "show", "TASK", 1, 1, opts_none, cmd_tasks_show,
     "show a task (ident, short ident or name)"},
    {"tasks", "create", "", 0, 0, opts_tasks_create, cmd_tasks_create, "create a task"},
    {"tasks", "update", "TASK", 1, 1, opts_tasks_update, cmd_tasks_update,
     "change a task's members (a new version)"},
    {"tasks", "activate", "TASK", 1, 1, opts_none, cmd_tasks_active,
     "let a task create jobs again"},
    {"tasks", "deactivate", "TASK", 1, 1, opts_none, cmd_tasks_active,
     "stop a task from creating jobs (its jobs go on)"},
    {"scripts", "list", "", 0, 0, opts_paging, cmd_scripts_list, "list the scripts"},
    {"scripts", "show", "NAME", 1, 1, opts_none, cmd_scripts_show,
     "print a script's source (--json: its record)"},
    {"scripts", "put", "NAME [FILE]", 1, 2, opts_none, cmd_scripts_put,
     "create or replace a script from FILE (default: stdin)"},
    {"devices", "list", "", 0, 0, opts_devices_list, cmd_devices_list, "list the devices"},
    {"devices", "show", "DEVICE", 1, 1, opts_none, cmd_devices_show,
     "show a device (ident, short ident or name)"},
    {"devices", "create", "", 0, 0, opts_devices_create, cmd_devices_create,
     "add a device to the inventory"},
    {"devices", "tag", "DEVICE", 1, 1, opts_devices_tag, cmd_devices_tag,
     "add or remove a device's inventory tags"},
    {"devices", "rename", "DEVICE NAME", 2, 2, opts_none, cmd_devices_rename,
     "give a device another name"},
    {"devices", "delete", "DEVICE", 1, 1, opts_none, cmd_devices_delete,
     "remove a device from the inventory (its jobs stay)"},
    {"jobs", "list", "", 0, 0, opts_jobs_list, cmd_jobs_list, "list jobs"},
    {"jobs", "show", "JOB", 1, 1, opts_none, cmd_jobs_show, "show a job (ident or short ident)"},
    {"jobs", "history", "JOB", 1, 1, opts_paging, cmd_jobs_history,
     "a job's status changes, newest first"},
    {"jobs", "cancel", "JOB", 1, 1, opts_jobs_cancel, cmd_jobs_cancel,
     "cancel a job (ident or short ident)"},
    {"groups", "list", "", 0, 0, opts_groups_list, cmd_groups_list,
     "list the groups of bulk sends"},
    {"groups", "show", "GROUP", 1, 1, opts_none, cmd_groups_show,
     "show a group (ident, short ident or name) and its jobs' statuses"},
    {"groups", "pause", "GROUP", 1, 1, opts_none, cmd_groups_action,
     "stop releasing a group's jobs (needs a coordinator with rollouts)"},
    {"groups", "resume", "GROUP", 1, 1, opts_none, cmd_groups_action,
     "release a paused group's jobs again (needs rollouts)"},
    {"groups", "cancel", "GROUP", 1, 1, opts_none, cmd_groups_action,
     "cancel a group's jobs not yet ended (needs rollouts)"},
    {"send", NULL, "TASK", 1, 1, opts_send, cmd_send,
     "send a task (ident, short ident or name) to devices: --device ... or --tag"},
    {"watch", NULL, "GROUP", 1, 1, opts_watch, cmd_watch,
     "follow a group (ident, short ident or name) until its jobs have ended"},
    {"keys", "list", "", 0, 0, opts_paging, cmd_keys_list, "list the API keys (admin)"},
    {"keys", "create", "", 0, 0, opts_keys_create, cmd_keys_create,
     "create an API key (shown only once)"},
    {"keys", "revoke", "KEY", 1, 1, opts_none, cmd_keys_revoke,
     "revoke an API key at once (ident or short ident)"},
    {"webhooks", "list", "", 0, 0, opts_paging, cmd_webhooks_list, "list the webhooks (admin)"},
    {"webhooks", "create", "URL", 1, 1, opts_webhooks_create, cmd_webhooks_create,
     "deliver status changes to URL"},
    {"webhooks", "show", "WEBHOOK", 1, 1, opts_none, cmd_webhooks_show,
     "show a webhook (ident or short ident)"},
    {"webhooks", "update", "WEBHOOK", 1, 1, opts_webhooks_update, cmd_webhooks_update,
     "change a webhook"},
    {"webhooks", "delete", "WEBHOOK", 1, 1, opts_none, cmd_webhooks_delete,
     "delete a webhook and its queued deliveries"},
    {"webhooks", "deliveries", "WEBHOOK", 1, 1, opts_paging, cmd_webhooks_deliveries,
     "a webhook's deliveries, newest first, with their attempts"},
    {"audit", NULL, "", 0, 0, opts_audit, cmd_audit, "the audit log, newest first (admin)"},
    {"artifacts", "upload", "FILE", 1, 1, opts_artifacts_upload, cmd_artifacts_upload,
     "upload a file for jobs to bring to devices (admin)"},
    {"artifacts", "list", "", 0, 0, opts_artifacts_list, cmd_artifacts_list, "list the artifacts"},
    {"artifacts", "show", "ARTIFACT", 1, 1, opts_none, cmd_artifacts_show,
     "show an artifact (ident, short ident or name) and the tasks that use it"},
    {"artifacts", "rm", "ARTIFACT", 1, 1, opts_none, cmd_artifacts_rm,
     "delete an artifact no task or unended job needs (admin)"},
};
#define CLI_NCMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static const char *cli_groups[] = {"tasks", "scripts", "devices",  "jobs",  "groups",   "send",
				   "watch", "keys",    "webhooks", "audit", "artifacts"};

static void cli_usage_all(FILE *fp)
{
	fprintf(fp, "usage: rcs [--url URL] [--api-key KEY] [--json] COMMAND [ARGS]\n\n"
		    "Drives the Remote Command Service's REST API (docs/cli.md).\n\nCommands:\n");
	for (size_t i = 0; i < CLI_NCMDS; i++) {
		char name[64];
		const struct cli_cmd *k = &cli_cmds[i];
		snprintf(name, sizeof(name), "%s%s%s %s", k->group, k->action ? " " : "",
			 k->action ? k->action : "", k->args);
		fprintf(fp, "  %-27s %s\n", name, k->about);
	}
	fprintf(fp, "\nOptions of every command:\n");
	cfg_usage(fp, opts_global);
	fprintf(fp, "\nExit codes: 0 done, 1 a job or group ended failed, 2 usage, 3 API or "
		    "connection error.\n'rcs COMMAND --help' shows a command's options.\n");
}

static void cli_usage_cmd(FILE *fp, const struct cli_cmd *k)
{
	fprintf(fp, "usage: rcs %s%s%s [OPTIONS]%s%s\n\n%c%s.\n", k->group, k->action ? " " : "",
		k->action ? k->action : "", k->args[0] ? " " : "", k->args,
		toupper((unsigned char)k->about[0]), k->about + 1);
	if (k->opts[0].name != NULL) {
		fprintf(fp, "\nOptions:\n");
		cfg_usage(fp, k->opts);
	}
	fprintf(fp, "\nOptions of every command:\n");
	cfg_usage(fp, opts_global);
}

static void cli_usage_group(FILE *fp, const char *group)
{
	fprintf(fp, "usage: rcs %s ACTION [OPTIONS] [ARGS]\n\nActions:\n", group);
	for (size_t i = 0; i < CLI_NCMDS; i++)
		if (strcmp(cli_cmds[i].group, group) == 0)
			fprintf(fp, "  %-10s %-12s %s\n", cli_cmds[i].action, cli_cmds[i].args,
				cli_cmds[i].about);
}

/* ---- the command line ---- */

/* Global options first, then the command's, into out (CLI_MAX_OPTS rows at most). */
static void cli_merge(struct cfg_opt *out, const struct cfg_opt *cmd)
{
	size_t n = 0;

	for (const struct cfg_opt *o = opts_global; o->name && n + 1 < CLI_MAX_OPTS; o++)
		if (strcmp(o->name, "config") != 0) /* cfg_parse_args skips --config itself */
			out[n++] = *o;
	for (const struct cfg_opt *o = cmd; o->name && n + 1 < CLI_MAX_OPTS; o++)
		out[n++] = *o;
	out[n] = (struct cfg_opt)O_END;
}

/* The row of table for "--name..." (without '=' part), or NULL. */
static const struct cfg_opt *cli_opt_of(const struct cfg_opt *table, const char *arg)
{
	size_t n = strcspn(arg + 2, "=");

	for (const struct cfg_opt *o = table; o->name; o++) {
		size_t i;
		if (strlen(o->name) != n)
			continue;
		for (i = 0; i < n; i++)
			if (o->name[i] != (arg[2 + i] == '-' ? '_' : arg[2 + i]))
				break;
		if (i == n)
			return o;
	}
	return NULL;
}

/*
 * Parses argv[first..argc) against table into c: options anywhere, the rest
 * positional ("--" ends the options). A flag alone ("--json") is true: it never takes
 * the next word as its value. Returns CLI_OK or CLI_USAGE (message printed).
 */
static int cli_parse(struct cli *c, const struct cfg_opt *table, int argc, char **argv, int first)
{
	char **args = NULL;
	char errbuf[512];
	int n = 0, i = 0, rc = CLI_OK;
	bool dashdash = false;

	args = calloc((size_t)argc + 1, sizeof(*args));
	if (args == NULL)
		return cli_fail(c, CLI_USAGE, "out of memory");
	for (int k = first; k < argc; k++) {
		const char *a = argv[k];
		const struct cfg_opt *o;
		if (dashdash || a[0] != '-' || strcmp(a, "-") == 0) {
			if (c->npos >= CLI_MAX_POS) {
				rc = cli_fail(c, CLI_USAGE, "too many arguments");
				goto out;
			}
			c->pos[c->npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			dashdash = true;
			continue;
		}
		if (strcmp(a, "-h") == 0) {
			c->o.help = true;
			continue;
		}
		if (a[1] != '-') {
			rc = cli_fail(c, CLI_USAGE, "unknown option '%s'", a);
			goto out;
		}
		o = cli_opt_of(table, a);
		if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
			if (strcmp(a, "--config") == 0)
				k++; /* settled by main() */
			continue;
		}
		if (o == NULL) {
			rc = cli_fail(c, CLI_USAGE, "unknown option '%s'", a);
			goto out;
		}
		args[n] = strdup(a);
		if (args[n] == NULL) {
			rc = cli_fail(c, CLI_USAGE, "out of memory");
			goto out;
		}
		n++;
		if (o->type == CFG_BOOL) {
			if (strchr(a, '=') == NULL) {
				/* "--json" -> "--json=true": never swallow the next word */
				char *t = malloc(strlen(a) + 6);
				if (t == NULL) {
					rc = cli_fail(c, CLI_USAGE, "out of memory");
					goto out;
				}
				snprintf(t, strlen(a) + 6, "%s=true", a);
				free(args[n - 1]);
				args[n - 1] = t;
			}
		} else if (strchr(a, '=') == NULL) {
			if (k + 1 >= argc) {
				rc = cli_fail(c, CLI_USAGE, "option '%s' needs a value", a);
				goto out;
			}
			args[n] = strdup(argv[++k]);
			if (args[n] == NULL) {
				rc = cli_fail(c, CLI_USAGE, "out of memory");
				goto out;
			}
			n++;
		}
	}
	while (i < n) {
		int next = n;
		/* only options are left in args: cfg_parse_args takes them all */
		if (cfg_parse_args(table, &c->o, n, args, i, &next, errbuf, sizeof(errbuf)) !=
		    RCS_OK) {
			rc = cli_fail(c, CLI_USAGE, "%s", errbuf);
			goto out;
		}
		if (next <= i)
			break;
		i = next;
	}
out:
	for (int k = 0; k < n; k++)
		free(args[k]);
	free(args);
	return rc;
}

static const struct cli_cmd *cli_find(const char *group, const char *action)
{
	for (size_t i = 0; i < CLI_NCMDS; i++) {
		const struct cli_cmd *k = &cli_cmds[i];
		if (strcmp(k->group, group) != 0)
			continue;
		if (k->action == NULL || (action != NULL && strcmp(k->action, action) == 0))
			return k;
	}
	return NULL;
}

static bool cli_known_group(const char *g)
{
	for (size_t i = 0; i < sizeof(cli_groups) / sizeof(cli_groups[0]); i++)
		if (strcmp(cli_groups[i], g) == 0)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	struct cli c;
	struct config cf = {NULL, NULL, 0};
	struct cfg_opt table[CLI_MAX_OPTS];
	const struct cli_cmd *k = NULL;
	char errbuf[512] = "", name[64];
	const char *config_flag = NULL;
	int gi = 1, rc = CLI_OK;
	bool curl_up = false;

	memset(&c, 0, sizeof(c));
	c.o.timeout = c.o.page = c.o.per_page = c.o.script_timeout = c.o.ttl = -1;
	c.o.rollout_per_minute = c.o.abort_percent = c.o.abort_min_finished = c.o.retries = -1;
	c.o.interval = c.o.retry_backoff = -1;
	cli_merge(table, opts_none);
	/* global options may come before the command word */
	while (gi < argc && argv[gi][0] == '-' && strcmp(argv[gi], "-") != 0) {
		const struct cfg_opt *o = cli_opt_of(table, argv[gi]);
		if (strcmp(argv[gi], "-h") == 0 || strcmp(argv[gi], "--help") == 0) {
			cli_usage_all(stdout);
			goto out;
		}
		if (strcmp(argv[gi], "--version") == 0) {
			printf("rcs %s\n", RCS_VERSION);
			goto out;
		}
		if (strncmp(argv[gi], "--config", 8) == 0 &&
		    (argv[gi][8] == '\0' || argv[gi][8] == '=')) {
			gi += argv[gi][8] == '\0' ? 2 : 1;
			continue;
		}
		if (o == NULL || strncmp(argv[gi], "--", 2) != 0) {
			fprintf(stderr, "rcs: unknown option '%s'\nTry 'rcs --help'.\n", argv[gi]);
			rc = CLI_USAGE;
			goto out;
		}
		gi += (o->type == CFG_BOOL || strchr(argv[gi], '=')) ? 1 : 2;
	}
	if (gi >= argc || strcmp(argv[gi], "help") == 0) {
		cli_usage_all(gi >= argc ? stderr : stdout);
		rc = gi >= argc ? CLI_USAGE : CLI_OK;
		goto out;
	}
	if (!cli_known_group(argv[gi])) {
		fprintf(stderr, "rcs: unknown command '%s'\nTry 'rcs --help'.\n", argv[gi]);
		rc = CLI_USAGE;
		goto out;
	}
	k = cli_find(argv[gi], gi + 1 < argc ? argv[gi + 1] : NULL);
	if (k == NULL) {
		bool help = gi + 1 < argc && (strcmp(argv[gi + 1], "--help") == 0 ||
					      strcmp(argv[gi + 1], "-h") == 0);
		if (!help)
			fprintf(stderr, "rcs: %s: %s%s%s\n", argv[gi],
				gi + 1 < argc ? "unknown action '" : "which action?",
				gi + 1 < argc ? argv[gi + 1] : "", gi + 1 < argc ? "'" : "");
		cli_usage_group(help ? stdout : stderr, argv[gi]);
		rc = help ? CLI_OK : CLI_USAGE;
		goto out;
	}
	snprintf(name, sizeof(name), "%s%s%s", k->group, k->action ? " " : "",
		 k->action ? k->action : "");
	c.cmd = name;
	cli_merge(table, k->opts);
	/* the words before the command: global options */
	rc = cli_parse(&c, table, gi, argv, 1);
	if (rc == CLI_OK && c.npos > 0)
		rc = cli_fail(&c, CLI_USAGE, "unexpected '%s' before the command", c.pos[0]);
	c.npos = 0;
	if (rc == CLI_OK)
		rc = cli_parse(&c, table, argc, argv, gi + (k->action ? 2 : 1));
	if (rc != CLI_OK) {
		fprintf(stderr, "Try 'rcs %s --help'.\n", name);
		goto out;
	}
	if (c.o.help) {
		cli_usage_cmd(stdout, k);
		goto out;
	}
	if (c.npos < k->minpos || c.npos > k->maxpos) {
		rc = cli_fail(&c, CLI_USAGE, "%s",
			      c.npos < k->minpos ? "missing arguments" : "too many arguments");
		fprintf(stderr, "usage: rcs %s %s\nTry 'rcs %s --help'.\n", name, k->args, name);
		goto out;
	}
	config_flag = cfg_find_arg(argc, argv, "config");
	if (config_settle(&cf, config_flag, c.o.url, c.o.api_key, c.o.timeout, errbuf,
			  sizeof(errbuf)) != RCS_OK) {
		rc = cli_fail(&c, CLI_USAGE, "%s", errbuf);
		goto out;
	}
	if (cf.url == NULL) {
		rc = cli_fail(&c, CLI_USAGE,
			      "no API URL: give --url, set RCS_URL, or put 'url "
			      "http://HOST:PORT' in ~/.config/rcs/config");
		goto out;
	}
	if (cf.api_key == NULL) {
		rc = cli_fail(&c, CLI_USAGE,
			      "no API key: set RCS_API_KEY, give --api-key, or "
			      "put 'api_key KEY' in ~/.config/rcs/config");
		goto out;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		rc = cli_fail(&c, CLI_API, "libcurl could not start");
		goto out;
	}
	curl_up = true;
	if (http_init(&c.http, cf.url, cf.api_key, (long)cf.timeout, errbuf, sizeof(errbuf)) !=
	    RCS_OK) {
		rc = cli_fail(&c, CLI_USAGE, "%s", errbuf[0] ? errbuf : "out of memory");
		goto out;
	}
	rc = k->run(&c);
out:
	fflush(stdout);
	http_free(&c.http);
	config_free(&cf);
	cfg_free(table, &c.o);
	if (curl_up)
		curl_global_cleanup();
	return rc;
}
