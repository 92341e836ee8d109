/*
 * cmd_tasks.c - rcs tasks list|show|create|update|activate|deactivate and rcs scripts list|show|put
 * (docs/cli.md; the API: docs/api.md "Tasks", "Scripts").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonu.h"
#include "list.h"
#include "table.h"
#include "uuid.h"

#define TASKS_MAX_FILE      (1024 * 1024)
#define SCRIPT_MAX_FILE     (256 * 1024)
#define TASKS_MAX_ARTIFACTS 16 /* in one task (docs/api.md "Artifacts") */
#define TASKS_ART_HINT                                                                             \
	"a task with artifacts needs a coordinator that takes them (docs/cli.md \"Artifacts\")"

/* "a, b?" from variables_info (optional ones marked '?') */
static void tasks_vars(json_object *vi, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	if (vi == NULL || !json_object_is_type(vi, json_type_object))
		return;
	json_object_object_foreach(vi, name, desc)
	{
		json_object *opt = jsonu_member(desc, "optional");
		int n = snprintf(out + o, len - o, "%s%s%s", o ? ", " : "", name,
				 opt && json_object_get_boolean(opt) ? "?" : "");
		if (n < 0 || (size_t)n >= len - o)
			break;
		o += (size_t)n;
	}
}

static void tasks_row(struct list_row *r, const char **cells)
{
	char *vars = list_cell(r, 512);

	if (vars)
		tasks_vars(jsonu_member(r->item, "variables_info"), vars, 512);
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "name");
	cells[2] = cli_str(r->item, "script");
	cells[3] = list_printf(r, "%lld", (long long)cli_int(r->item, "version"));
	cells[4] = cli_text(r->item, "active");
	cells[5] = vars;
	cells[6] = list_when(r, "update_at");
}

int cmd_tasks_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT",  "NAME",      "SCRIPT", "VER",
					    "ACTIVE", "VARIABLES", "UPDATED"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 7,
					   .keep = 1u << 0 | 1u << 6,
					   .idents = {"ident"},
					   .row = tasks_row};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/tasks") != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "sort", c->o.sort) != RCS_OK ||
	    cli_query(&path, "name", c->o.name) != RCS_OK ||
	    cli_query(&path, "hide", c->o.hidden ? "true" : NULL) != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
	else
		rc = list_run(c, path.data, &l);
	buf_free(&path);
	return rc;
}

/* A task's artifacts, one a line: "fw: firmware-2.1.bin, 12.3 MiB, sha256:..." (nothing
 * from a coordinator without them). */
static void tasks_print_artifacts(json_object *arts)
{
	char lines[4096], sz[24];
	size_t o = 0;

	if (arts == NULL || !json_object_is_type(arts, json_type_object)) {
		if (arts != NULL)
			table_kv(stdout, "artifacts", NULL);
		return;
	}
	lines[0] = '\0';
	json_object_object_foreach(arts, key, a)
	{
		int n;

		table_bytes(sz, sizeof(sz), cli_int(a, "size"));
		n = snprintf(lines + o, sizeof(lines) - o, "%s%s: %s, %s, %s", o ? "\n" : "", key,
			     cli_show(a, "name"), sz, cli_show(a, "ident"));
		if (n < 0 || (size_t)n >= sizeof(lines) - o)
			break;
		o += (size_t)n;
	}
	table_kv(stdout, "artifacts", o ? lines : NULL);
}

static void tasks_print(json_object *t)
{
	char vars[1024], tm[32];
	json_object *sig = jsonu_member(t, "signature");

	table_kv(stdout, "ident", cli_str(t, "ident"));
	table_kv(stdout, "name", cli_str(t, "name"));
	snprintf(vars, sizeof(vars), "%lld", (long long)cli_int(t, "version"));
	table_kv(stdout, "version", vars);
	table_kv(stdout, "script", cli_str(t, "script"));
	table_kv(stdout, "script_sha256", cli_str(t, "script_sha256"));
	tasks_vars(jsonu_member(t, "variables_info"), vars, sizeof(vars));
	table_kv(stdout, "variables", vars[0] ? vars : "-");
	table_kv(stdout, "constants", cli_text(t, "constants"));
	table_kv(stdout, "active", cli_text(t, "active"));
	table_kv(stdout, "public", cli_text(t, "public"));
	table_kv(stdout, "hide", cli_text(t, "hide"));
	table_kv(stdout, "allow_offline", cli_text(t, "allow_offline"));
	table_kv(stdout, "timeout", cli_text(t, "timeout"));
	table_kv(stdout, "comment", cli_str(t, "comment"));
	tasks_print_artifacts(jsonu_member(t, "artifacts"));
	table_kv(stdout, "signature",
		 sig && json_object_is_type(sig, json_type_object) ? cli_str(sig, "key_id") : NULL);
	table_kv(stdout, "created", cli_time(t, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "created_user", cli_str(t, "created_user"));
	table_kv(stdout, "updated", cli_time(t, "update_at", tm, sizeof(tm)));
	table_kv(stdout, "update_user", cli_str(t, "update_user"));
}

int cmd_tasks_show(struct cli *c)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp r = {0};
	int rc;

	rc = cli_task_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/tasks/%s", id);
	rc = cli_call(c, "GET", path, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		tasks_print(r.json);
out:
	http_resp_free(&r);
	return rc;
}

/* --variable NAME:TYPE[:optional] into vi */
static int tasks_variable(struct cli *c, json_object *vi, const char *spec)
{
	char name[128], type[32], flag[32] = "";
	json_object *d = NULL;
	int n = 0, rc = CLI_OK;

	if (sscanf(spec, "%127[^:]:%31[^:]%n:%31s%n", name, type, &n, flag, &n) < 2 ||
	    spec[n] != '\0' || (flag[0] && strcmp(flag, "optional") != 0)) {
		rc = cli_fail(c, CLI_USAGE,
			      "--variable '%s': write it NAME:TYPE or "
			      "NAME:TYPE:optional",
			      spec);
		goto out;
	}
	d = json_object_new_object();
	if (d == NULL || json_object_object_add(d, "type", json_object_new_string(type)) != 0 ||
	    (flag[0] && json_object_object_add(d, "optional", json_object_new_boolean(1)) != 0) ||
	    json_object_object_add(vi, name, d) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	d = NULL; /* vi's now */
out:
	json_object_put(d);
	return rc;
}

static int tasks_strlist(json_object *body, const char *key, const struct cfg_strlist *l)
{
	json_object *a;

	if (l->n == 0)
		return 0;
	a = json_object_new_array();
	for (size_t i = 0; a && i < l->n; i++)
		if (json_object_array_add(a, json_object_new_string(l->items[i])) != 0)
			break;
	return a == NULL ? -1 : json_object_object_add(body, key, a);
}

/* A true|false option of tasks update into body[k] (not given: left out). */
static int tasks_flag(struct cli *c, json_object *body, const char *opt, const char *k,
		      const char *v, bool invert)
{
	if (v == NULL)
		return CLI_OK;
	if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
		return cli_fail(c, CLI_USAGE, "--%s: true or false, not '%s'", opt, v);
	if (json_object_object_add(
		body, k, json_object_new_boolean((strcmp(v, "true") == 0) != invert)) != 0)
		return cli_fail(c, CLI_USAGE, "out of memory");
	return CLI_OK;
}

/* --artifact NAME=ARTIFACT (each resolved to its ident) or --no-artifacts into body's
 * "artifacts", replacing what --from-file gave. */
static int tasks_artifacts(struct cli *c, json_object *body)
{
	char id[CLI_ART_IDENT_LEN], key[80];
	json_object *a = NULL;
	int rc = CLI_OK;

	if (c->o.artifact.n == 0 && !c->o.no_artifacts)
		return CLI_OK;
	if (c->o.artifact.n > 0 && c->o.no_artifacts)
		return cli_fail(c, CLI_USAGE, "--artifact or --no-artifacts, not both");
	if (c->o.artifact.n > TASKS_MAX_ARTIFACTS)
		return cli_fail(c, CLI_USAGE, "at most %d artifacts in a task",
				TASKS_MAX_ARTIFACTS);
	a = json_object_new_object();
	for (size_t i = 0; a != NULL && i < c->o.artifact.n; i++) {
		const char *spec = c->o.artifact.items[i], *eq = strchr(spec, '=');

		if (eq == NULL || (size_t)(eq - spec) >= sizeof(key)) {
			rc =
			    cli_fail(c, CLI_USAGE, "--artifact '%s': write it NAME=ARTIFACT", spec);
			goto out;
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - spec), spec);
		if (!cli_artifact_key_ok(key)) {
			rc = cli_fail(c, CLI_USAGE,
				      "--artifact '%s': its NAME is 1 to 64 of a-z 0-9 _ . - "
				      "(not first . or -)",
				      spec);
			goto out;
		}
		if (json_object_object_get_ex(a, key, NULL)) {
			rc = cli_fail(c, CLI_USAGE, "--artifact: '%s' is given twice", key);
			goto out;
		}
		rc = cli_artifact_ident(c, eq + 1, id);
		if (rc != CLI_OK)
			goto out;
		if (json_object_object_add(a, key, json_object_new_string(id)) != 0)
			break;
	}
	if (a == NULL || json_object_object_add(body, "artifacts", a) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	a = NULL; /* body's now */
out:
	json_object_put(a);
	return rc;
}

/* The body of tasks create (update false: the flags) or tasks update (the true|false
 * options; only what is given), from --from-file and the options. */
static int tasks_body(struct cli *c, bool update, json_object **out)
{
	struct buf file;
	json_object *body = NULL, *vi = NULL, *consts = NULL;
	struct jsonu_err je;
	int rc = CLI_OK, bad = 0;

	buf_init(&file, TASKS_MAX_FILE);
	if (c->o.from_file != NULL) {
		rc = cli_read_file(c, c->o.from_file, &file);
		if (rc != CLI_OK)
			goto out;
		if (jsonu_parse_object(file.data, file.len, &body, &je) != RCS_OK) {
			rc = cli_fail(c, CLI_USAGE, "%s: %s", c->o.from_file, je.message);
			goto out;
		}
	} else {
		body = json_object_new_object();
	}
	if (c->o.constants != NULL &&
	    jsonu_parse_object(c->o.constants, strlen(c->o.constants), &consts, &je) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "--constants: %s", je.message);
		goto out;
	}
	if (c->o.variable.n > 0) {
		vi = json_object_new_object();
		for (size_t i = 0; vi && i < c->o.variable.n && rc == CLI_OK; i++)
			rc = tasks_variable(c, vi, c->o.variable.items[i]);
		if (rc != CLI_OK)
			goto out;
		bad |= json_object_object_add(body, "variables_info", vi);
		vi = NULL;
	}
	if (consts != NULL) {
		bad |= json_object_object_add(body, "constants", consts);
		consts = NULL;
	}
	if (c->o.name)
		bad |= json_object_object_add(body, "name", json_object_new_string(c->o.name));
	if (c->o.script)
		bad |= json_object_object_add(body, "script", json_object_new_string(c->o.script));
	if (c->o.comment)
		bad |=
		    json_object_object_add(body, "comment", json_object_new_string(c->o.comment));
	if (c->o.script_timeout > 0)
		bad |= json_object_object_add(body, "timeout",
					      json_object_new_int64(c->o.script_timeout));
	if (c->o.allow_offline)
		bad |= json_object_object_add(body, "allow_offline", json_object_new_boolean(1));
	if (c->o.private_task)
		bad |= json_object_object_add(body, "public", json_object_new_boolean(0));
	if (c->o.hide)
		bad |= json_object_object_add(body, "hide", json_object_new_boolean(1));
	if (c->o.inactive)
		bad |= json_object_object_add(body, "active", json_object_new_boolean(0));
	bad |= tasks_strlist(body, "notification_mail_list", &c->o.mail);
	if (body == NULL || bad) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = tasks_artifacts(c, body);
	if (rc != CLI_OK)
		goto out;
	if (update &&
	    ((rc = tasks_flag(c, body, "active", "active", c->o.active, false)) != CLI_OK ||
	     (rc = tasks_flag(c, body, "public", "public", c->o.public_s, false)) != CLI_OK ||
	     (rc = tasks_flag(c, body, "hide", "hide", c->o.hide_s, false)) != CLI_OK ||
	     (rc = tasks_flag(c, body, "allow-offline", "allow_offline", c->o.allow_offline_s,
			      false)) != CLI_OK))
		goto out;
	*out = body;
	body = NULL;
out:
	json_object_put(body);
	json_object_put(vi);
	json_object_put(consts);
	buf_free(&file);
	return rc;
}

int cmd_tasks_create(struct cli *c)
{
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	rc = tasks_body(c, false, &body);
	if (rc != CLI_OK)
		goto out;
	rc = cli_call(c, "POST", "/tasks", body, &r,
		      jsonu_member(body, "artifacts") ? TASKS_ART_HINT : NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		printf("created task %s (%s), version %lld\n", cli_show(r.json, "name"),
		       cli_show(r.json, "ident"), (long long)cli_int(r.json, "version"));
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}

/* PATCH /tasks/<id> with body; says what came of it: a new version, or none (nothing
 * changed: docs/api.md "Tasks"). what: "updated", "activated", "deactivated". */
static int tasks_patch(struct cli *c, json_object *body, const char *what)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp before = {0}, r = {0};
	int rc;

	rc = cli_task_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/tasks/%s", id);
	rc = cli_call(c, "GET", path, NULL, &before, NULL);
	if (rc == CLI_OK)
		rc = cli_call(c, "PATCH", path, body, &r,
			      jsonu_member(body, "artifacts") ? TASKS_ART_HINT : NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else if (cli_int(r.json, "version") == cli_int(before.json, "version"))
		printf("task %s (%s) unchanged, version %lld\n", cli_show(r.json, "name"),
		       cli_show(r.json, "ident"), (long long)cli_int(r.json, "version"));
	else
		printf("%s task %s (%s), version %lld\n", what, cli_show(r.json, "name"),
		       cli_show(r.json, "ident"), (long long)cli_int(r.json, "version"));
out:
	http_resp_free(&before);
	http_resp_free(&r);
	return rc;
}

int cmd_tasks_update(struct cli *c)
{
	json_object *body = NULL;
	int rc = tasks_body(c, true, &body);

	if (rc == CLI_OK && json_object_object_length(body) == 0)
		rc = cli_fail(c, CLI_USAGE, "give what changes (rcs tasks update --help)");
	if (rc == CLI_OK)
		rc = tasks_patch(c, body, "updated");
	json_object_put(body);
	return rc;
}

int cmd_tasks_active(struct cli *c)
{
	bool on = strcmp(c->cmd, "tasks activate") == 0;
	json_object *body = json_object_new_object();
	int rc;

	if (body == NULL ||
	    json_object_object_add(body, "active", json_object_new_boolean(on)) != 0)
		rc = cli_fail(c, CLI_USAGE, "out of memory");
	else
		rc = tasks_patch(c, body, on ? "activated" : "deactivated");
	json_object_put(body);
	return rc;
}

int cmd_scripts_list(struct cli *c)
{
	static const char *const heads[] = {"NAME", "SIZE", "STOCK", "SHA256", "UPDATED"};
	struct buf path;
	struct http_resp r = {0};
	struct table t;
	json_object *items;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	table_init(&t, 5, heads);
	if (buf_appendf(&path, "/scripts") != RCS_OK || cli_query_paging(c, &path) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	items = cli_array(r.json, "items");
	for (size_t i = 0; items && i < json_object_array_length(items); i++) {
		json_object *it = json_object_array_get_idx(items, i);
		char upd[32];
		const char *row[] = {cli_str(it, "name"), cli_text(it, "size"),
				     cli_text(it, "stock"), cli_str(it, "sha256"),
				     cli_when(it, "updated_at", upd, sizeof(upd))};
		if (table_add(&t, row) != RCS_OK) {
			rc = cli_fail(c, CLI_API, "out of memory");
			goto out;
		}
	}
	table_print(&t, stdout, table_term_width());
	cli_page_footer(r.json);
out:
	table_free(&t);
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_scripts_show(struct cli *c)
{
	struct buf path;
	struct http_resp r = {0};
	const char *src;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/scripts/") != RCS_OK || http_escape(&path, c->pos[0]) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the name is too long");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	/* the source as it is, so that `rcs scripts show x > x.lua` gives the file back */
	src = cli_str(r.json, "source");
	if (src != NULL)
		fputs(src, stdout);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_scripts_put(struct cli *c)
{
	struct buf path, file;
	struct http_resp r = {0};
	json_object *body = NULL, *upd;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	buf_init(&file, SCRIPT_MAX_FILE);
	rc = cli_read_file(c, c->npos > 1 ? c->pos[1] : "-", &file);
	if (rc != CLI_OK)
		goto out;
	if (buf_appendf(&path, "/scripts/") != RCS_OK || http_escape(&path, c->pos[0]) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the name is too long");
		goto out;
	}
	body = json_object_new_object();
	if (body == NULL ||
	    json_object_object_add(body, "source",
				   json_object_new_string_len(file.data, (int)file.len)) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "PUT", path.data, body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	printf("%s script %s (%lld bytes, sha256 %s)\n", r.status == 201 ? "created" : "replaced",
	       cli_show(r.json, "name"), (long long)cli_int(r.json, "size"),
	       cli_show(r.json, "sha256"));
	upd = cli_array(r.json, "tasks_updated");
	for (size_t i = 0; upd && i < json_object_array_length(upd); i++) {
		json_object *it = json_object_array_get_idx(upd, i);
		printf("task %s is now version %lld\n", cli_show(it, "ident"),
		       (long long)cli_int(it, "version"));
	}
out:
	json_object_put(body);
	http_resp_free(&r);
	buf_free(&file);
	buf_free(&path);
	return rc;
}
