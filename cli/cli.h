/*
 * cli.h - what the subcommands of `rcs` share: the parsed options, the API
 * client, exit codes, and the helpers that call the API and print its answers
 * (main.c). docs/cli.md is the user's side of all of it.
 */
#ifndef RCS_CLI_H
#define RCS_CLI_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "cfg.h"
#include "http.h"
#include "uuid.h"

/* docs/cli.md "Exit codes" */
enum cli_exit {
	CLI_OK = 0,     /* done */
	CLI_FAILED = 1, /* a job or group ended failed (or a device was rejected) */
	CLI_USAGE = 2,  /* bad command line or configuration */
	CLI_API = 3,    /* the API answered an error, or could not be reached */
	CLI_INTERRUPTED = 130,
};

#define CLI_MAX_POS  8    /* positional arguments of a subcommand */
#define CLI_MAX_PATH 8192 /* bytes of a request path with its query */

/* Every option of every subcommand; each subcommand's table (struct cli_cmd) picks its
 * own. Integers are -1 when not given. */
struct cli_opts {
	char *url, *api_key;
	bool json, help;
	long long timeout;
	/* lists */
	long long page, per_page;
	char *sort, *name, *online, *status, *task, *group;
	bool hidden;
	struct cfg_strlist tag, device;
	/* tasks create */
	char *script, *comment, *constants, *from_file;
	struct cfg_strlist variable, mail;
	long long script_timeout;
	bool allow_offline, private_task, hide, inactive;
	/* tasks update: true|false; webhooks update: active */
	char *active, *public_s, *hide_s, *allow_offline_s;
	/* keys, webhooks, audit */
	char *user, *role, *target, *since, *until, *secret, *endpoint;
	struct cfg_strlist event, statuses;
	/* devices tag */
	struct cfg_strlist add, remove;
	/* send */
	struct cfg_strlist var;
	char *schedule, *offline;
	long long ttl, rollout_per_minute, abort_percent, abort_min_finished, retries;
	char *exponential, *window, *window_utc_offset, *retry_backoff_factor;
	long long retry_backoff, download_max_concurrent;
	char *download_max_rate;
	bool wait, allow_empty, continuous, verbose;
	/* watch */
	long long interval;
	/* jobs cancel */
	char *reason;
	/* artifacts upload; tasks create|update --artifact */
	char *sha256;
	struct cfg_strlist artifact;
	bool no_artifacts;
};

struct cli {
	struct cli_opts o;
	const char *cmd; /* "tasks list", for messages */
	int npos;
	const char *pos[CLI_MAX_POS];
	struct http_client http;
};

/*
 * One request to the API. On a 2xx answer returns CLI_OK with r filled (the caller
 * http_resp_free()s it; r->json may be NULL for 204). Otherwise prints the API's
 * message and code (or why no answer came) to stderr, frees r and returns CLI_API.
 * hint (may be NULL) is printed after an error answer.
 */
int cli_call(struct cli *c, const char *method, const char *path, json_object *body,
	     struct http_resp *r, const char *hint);
/* The second half of cli_call: err and errbuf as http_call() left them. */
int cli_answer(struct cli *c, enum rcs_err err, const char *errbuf, struct http_resp *r,
	       const char *hint);
/* Prints the answer's body as the API sent it (--json), with a final newline. */
void cli_print_raw(const struct http_resp *r);
/* "rcs: <cmd>: message" to stderr; returns code. */
int cli_fail(const struct cli *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends "?k=v" or "&k=v" (v escaped) to path when v is not NULL. */
enum rcs_err cli_query(struct buf *path, const char *k, const char *v);
/* Appends page= and per_page= when given. */
enum rcs_err cli_query_paging(struct cli *c, struct buf *path);
/* Prints "page P of N, T items" under a table when there is more than one page. */
void cli_page_footer(json_object *page);
/* The string member k of o, NULL when absent or not a string. */
const char *cli_str(json_object *o, const char *k);
/* The string member k of o as a terminal may show it: control characters as '?', "-" when
 * absent. The text lives in one of CLI_SHOW_SLOTS buffers, reused in turn: enough for the
 * members of one line. */
#define CLI_SHOW_SLOTS 8
const char *cli_show(json_object *o, const char *k);
/* Member k of o when it is an array, else NULL (an answer of the wrong shape is not read). */
json_object *cli_array(json_object *o, const char *k);
/* The integer member k of o, 0 when absent or not an integer. */
int64_t cli_int(json_object *o, const char *k);
/* The member k of o as text: strings as is, null as NULL, the rest as compact JSON. */
const char *cli_text(json_object *o, const char *k);
/* The member k of o (a Unix time) as local time into out. */
const char *cli_time(json_object *o, const char *k, char *out, size_t len);
/* The same for a table: to the second, without the date today (table_time_short). */
const char *cli_when(json_object *o, const char *k, char *out, size_t len);

/* The strings of array a joined by sep into out (len bytes): those that fit whole; "" for
 * none. Returns out. */
const char *cli_join(json_object *a, const char *sep, char *out, size_t len);

/* A group's progress for a table (docs/cli.md "Groups and watch"): "done/total", done the
 * devices whose latest attempt has ended (`counts`, else `statuses`, in final statuses),
 * total their sum (else `total`); NULL when g has no counts. */
const char *cli_group_progress(json_object *g, char *out, size_t len);

/*
 * Short idents (docs/cli.md "Short idents"): CLI_SHORT_MIN or more hex digits of an ident
 * from its start or its end, '-' anywhere. cli_short_part writes what as the text such a
 * part is in a UUID (lowercase, the '-' where a UUID has them) from its start (prefix) or
 * its end; false when what is not a short ident.
 */
#define CLI_SHORT_MIN  6
#define CLI_SHORT_SHOW 5 /* the candidates an ambiguous short ident lists */
bool cli_short_part(const char *what, bool prefix, char out[UUID_STR_LEN]);

/*
 * Resolves what names a task (an ident, the name of exactly one task, or a short ident) or
 * a device (the same) into out (UUID_STR_LEN bytes). CLI_API with the message printed when
 * none or several match.
 */
int cli_task_ident(struct cli *c, const char *what, char *out);
int cli_device_ident(struct cli *c, const char *what, char *out);
/* A job: an ident or a short ident. */
int cli_job_ident(struct cli *c, const char *what, char *out);
/* A group: an ident, or a name; of several groups of that name the most recent, said on
 * stderr with the others. */
int cli_group_ident(struct cli *c, const char *what, char *out);

/* A key or a webhook (lists without ident_prefix): an ident, or a short ident found in the
 * pages of list (CLI_NAMES_PAGE a page, at most CLI_NAMES_PAGES: a tenant has few). */
int cli_walk_ident(struct cli *c, const char *list, const char *kind, const char *what, char *out);

/*
 * Device names for what a command prints (docs/cli.md "Tables"), read once: one GET
 * /devices/<id> each for up to CLI_NAMES_EACH devices, else pages of GET /devices
 * (CLI_NAMES_PAGE a page, at most CLI_NAMES_PAGES) until each is found, or one GET each for
 * those left when they are fewer than the pages left. A device not found, or an error,
 * leaves it without a name (nothing printed: names only help to read).
 */
#define CLI_NAMES_EACH  8
#define CLI_NAMES_PAGE  500
#define CLI_NAMES_PAGES 20
struct cli_names {
	json_object *want; /* ident: its name, or null while unknown */
	size_t left;       /* the idents without a name yet */
};
/* The members k of the items of array items (*n of them), for table_short_len and
 * cli_names_load; free() it; NULL when out of memory. */
const char **cli_idents(json_object *items, const char *k, size_t *n);
void cli_names_load(struct cli *c, struct cli_names *nm, const char *const *ids, size_t n);
/* The name of ident, NULL when unknown. */
const char *cli_names_of(const struct cli_names *nm, const char *ident);
void cli_names_free(struct cli_names *nm);
/* A device in a table: its short ident of digits, then its name: "1c9e20ab pump-7" (cut
 * from the end, a narrow table keeps the ident). */
const char *cli_device_cell(char *out, size_t len, const struct cli_names *nm, const char *ident,
			    size_t digits);
/* A device in a line: "pump-7 (1c9e20ab)", or its short ident alone. */
const char *cli_device_line(char *out, size_t len, const struct cli_names *nm, const char *ident);

/*
 * Artifacts (docs/cli.md "Artifacts"): an ident is "sha256:" and the 64 hex digits of the
 * bytes' SHA-256. cli_artifact_hex writes the hex digits of what (an ident, or
 * CLI_SHORT_MIN or more of its digits, "sha256:" optional, any case) lowercase into hex;
 * *whole when they are all 64; false when what is neither.
 */
#define CLI_ART_IDENT_LEN 72 /* "sha256:" + 64 + NUL */
#define CLI_ART_SHORT     8  /* hex digits of an artifact in a table, at least */
bool cli_artifact_hex(const char *what, char *hex, size_t len, bool *whole);
/* Whether key may name an artifact in a task: [a-z0-9_][a-z0-9_.-]{0,63}. */
bool cli_artifact_key_ok(const char *key);
/* The leading hex digits (CLI_ART_SHORT to 64) that tell the n SHA-256s apart. */
size_t cli_artifact_short_len(const char *const *hexes, size_t n);
/* What names an artifact (its ident, its name when exactly one has it, or a short ident:
 * its digits' start or end, found in the pages of the list) into out (CLI_ART_IDENT_LEN
 * bytes). CLI_API with the message printed when none or several match. */
int cli_artifact_ident(struct cli *c, const char *what, char *out);
/* A transfer's line: "label [####......]  42 %  1.2 MiB of 3.0 MiB  8.0 MiB/s" in width
 * columns (rate <= 0: none; a narrow width: no bar). */
void cli_bytes_bar(char *out, size_t len, const char *label, long long done, long long total,
		   double rate, size_t width);

/*
 * Reads path ("-": stdin) into b (whose ceiling bounds it). CLI_USAGE with the
 * message printed when it can't be read or is larger than the ceiling.
 */
int cli_read_file(struct cli *c, const char *path, struct buf *b);

/* The subcommands (cmd_*.c): each returns an enum cli_exit. */
int cmd_tasks_list(struct cli *c);
int cmd_tasks_show(struct cli *c);
int cmd_tasks_create(struct cli *c);
int cmd_tasks_update(struct cli *c);
int cmd_tasks_active(struct cli *c); /* activate, deactivate: c->cmd names it */
int cmd_scripts_list(struct cli *c);
int cmd_scripts_show(struct cli *c);
int cmd_scripts_put(struct cli *c);
int cmd_devices_list(struct cli *c);
int cmd_devices_show(struct cli *c);
int cmd_devices_create(struct cli *c);
int cmd_devices_tag(struct cli *c);
int cmd_devices_rename(struct cli *c);
int cmd_devices_delete(struct cli *c);
int cmd_jobs_list(struct cli *c);
int cmd_jobs_show(struct cli *c);
int cmd_jobs_history(struct cli *c);
int cmd_jobs_cancel(struct cli *c);
int cmd_groups_list(struct cli *c);
int cmd_groups_show(struct cli *c);
int cmd_groups_action(struct cli *c); /* pause, resume, cancel: c->cmd names it */
int cmd_send(struct cli *c);
int cmd_keys_list(struct cli *c);
int cmd_keys_create(struct cli *c);
int cmd_keys_revoke(struct cli *c);
int cmd_webhooks_list(struct cli *c);
int cmd_webhooks_create(struct cli *c);
int cmd_webhooks_show(struct cli *c);
int cmd_webhooks_update(struct cli *c);
int cmd_webhooks_delete(struct cli *c);
int cmd_webhooks_deliveries(struct cli *c);
int cmd_audit(struct cli *c);
int cmd_watch(struct cli *c);
int cmd_artifacts_upload(struct cli *c);
int cmd_artifacts_list(struct cli *c);
int cmd_artifacts_show(struct cli *c);
int cmd_artifacts_rm(struct cli *c);

#endif
