/*
 * cmd_jobs.c - rcs jobs list|show|history|cancel and rcs groups
 * list|show|pause|resume|cancel (docs/cli.md; the API: docs/api.md "Jobs",
 * "Bulk sends and groups"; pause, resume and cancel of groups: docs/cli.md "Rollouts",
 * answered only by a coordinator with rollouts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonu.h"
#include "list.h"
#include "status.h"
#include "table.h"
#include "uuid.h"

#define JOBS_ROLLOUT_HINT                                                                          \
	"groups pause, resume and cancel need a coordinator with rollouts (docs/cli.md)"

/* prefix + the escaped segment + suffix into path */
static int jobs_path(struct cli *c, struct buf *path, const char *prefix, const char *seg,
		     const char *suffix)
{
	if (buf_appendf(path, "%s", prefix) != RCS_OK || http_escape(path, seg) != RCS_OK ||
	    buf_appendf(path, "%s", suffix) != RCS_OK)
		return cli_fail(c, CLI_USAGE, "'%.64s...' is too long", seg);
	return CLI_OK;
}

/* What a job said last: its response, else its payload (progress). */
static const char *jobs_said(json_object *j)
{
	const char *s = cli_text(j, "response");

	return s != NULL ? s : cli_text(j, "payload");
}

/* Whether an item of the page has a phase (a job that spans a reboot): the history then
 * shows a PHASE column (docs/cli.md "Jobs"). */
static bool jobs_phased(json_object *items)
{
	for (size_t i = 0; items && i < json_object_array_length(items); i++)
		if (cli_str(json_object_array_get_idx(items, i), "phase") != NULL)
			return true;
	return false;
}

static void jobs_row(struct list_row *r, const char **cells)
{
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(jsonu_member(r->item, "task"), "name");
	cells[2] = list_device(r, 1);
	cells[3] = cli_str(r->item, "status");
	cells[4] = list_when(r, "update_at");
	cells[5] = jobs_said(r->item);
}

/* A job's history: TIME, STATUS, RESPONSE. */
static void jobs_history_row(struct list_row *r, const char **cells)
{
	cells[0] = list_when(r, "update_at");
	cells[1] = cli_str(r->item, "status");
	cells[2] = jobs_said(r->item);
}

/* The history of a job that spans a reboot: TIME, PHASE, STATUS, RESPONSE. */
static void jobs_phased_row(struct list_row *r, const char **cells)
{
	cells[0] = list_when(r, "update_at");
	cells[1] = cli_str(r->item, "phase");
	cells[2] = cli_str(r->item, "status");
	cells[3] = jobs_said(r->item);
}

/* A page of jobs, or of a job's history (history), as list_print shows it: idents,
 * statuses and times keep their width, names and responses give way. */
static int jobs_table(struct cli *c, const struct http_resp *r, int history)
{
	static const char *const heads[] = {"IDENT",  "TASK",    "DEVICE",
					    "STATUS", "UPDATED", "RESPONSE"};
	static const char *const hheads[] = {"TIME", "STATUS", "RESPONSE"};
	static const char *const pheads[] = {"TIME", "PHASE", "STATUS", "RESPONSE"};
	static const struct list_spec jobs = {.heads = heads,
					      .ncols = 6,
					      .keep = 1u << 0 | 1u << 3 | 1u << 4,
					      .idents = {"ident", "entity_ident"},
					      .devices = 2,
					      .devices_col = 2,
					      .row = jobs_row};
	static const struct list_spec hist = {
	    .heads = hheads, .ncols = 3, .keep = 1u << 0 | 1u << 1, .row = jobs_history_row};
	static const struct list_spec phased = {.heads = pheads,
						.ncols = 4,
						.keep = 1u << 0 | 1u << 1 | 1u << 2,
						.row = jobs_phased_row};

	if (!history)
		return list_print(c, r, &jobs);
	return list_print(c, r, jobs_phased(cli_array(r->json, "items")) ? &phased : &hist);
}

int cmd_jobs_list(struct cli *c)
{
	char task[UUID_STR_LEN], dev[UUID_STR_LEN], group[UUID_STR_LEN];
	struct buf path;
	struct http_resp r = {0};
	int rc = CLI_OK;

	buf_init(&path, CLI_MAX_PATH);
	if (c->o.device.n > 1) {
		rc = cli_fail(c, CLI_USAGE, "--device: one device at most");
		goto out;
	}
	if (c->o.task != NULL && (rc = cli_task_ident(c, c->o.task, task)) != CLI_OK)
		goto out;
	if (c->o.device.n == 1 && (rc = cli_device_ident(c, c->o.device.items[0], dev)) != CLI_OK)
		goto out;
	if (c->o.group != NULL && (rc = cli_group_ident(c, c->o.group, group)) != CLI_OK)
		goto out;
	if (buf_appendf(&path, "/jobs") != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "sort", c->o.sort) != RCS_OK ||
	    cli_query(&path, "group_ident", c->o.group ? group : NULL) != RCS_OK ||
	    cli_query(&path, "task_ident", c->o.task ? task : NULL) != RCS_OK ||
	    cli_query(&path, "entity_ident", c->o.device.n ? dev : NULL) != RCS_OK ||
	    cli_query(&path, "status", c->o.status) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc == CLI_OK)
		rc = jobs_table(c, &r, 0);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

/* The download of a job's artifacts, when the record has it (docs/cli.md "Artifacts"):
 * "42 % (12.3 MiB of 29.0 MiB)". */
static void jobs_print_progress(json_object *p)
{
	char line[96], d[24], t[24];
	int64_t done = cli_int(p, "done"), total = cli_int(p, "total");

	if (p == NULL || !json_object_is_type(p, json_type_object))
		return;
	table_bytes(d, sizeof(d), done);
	table_bytes(t, sizeof(t), total);
	snprintf(line, sizeof(line), "%d %% (%s of %s)",
		 total > 0 && done <= total ? (int)(100.0 * (double)done / (double)total) : 100, d,
		 t);
	table_kv(stdout, "progress", line);
}

static void jobs_print(struct cli *c, json_object *j)
{
	char tm[32], line[512];
	const char *dev = cli_str(j, "entity_ident"), *name;
	struct cli_names nm = {0};
	json_object *task = jsonu_member(j, "task"), *group = jsonu_member(j, "group");

	table_kv(stdout, "ident", cli_str(j, "ident"));
	snprintf(line, sizeof(line), "%s (%s, version %lld)", cli_show(task, "name"),
		 cli_show(task, "ident"), (long long)cli_int(task, "version"));
	table_kv(stdout, "task", line);
	cli_names_load(c, &nm, &dev, 1);
	name = cli_names_of(&nm, dev);
	if (name != NULL) {
		snprintf(line, sizeof(line), "%s (%s)", name, dev);
		table_kv(stdout, "device", line);
	} else {
		table_kv(stdout, "device", dev);
	}
	cli_names_free(&nm);
	if (group != NULL && json_object_is_type(group, json_type_object)) {
		snprintf(line, sizeof(line), "%s (%s)", cli_show(group, "name"),
			 cli_show(group, "ident"));
		table_kv(stdout, "group", line);
	} else {
		table_kv(stdout, "group", NULL);
	}
	table_kv(stdout, "status", cli_str(j, "status"));
	table_kv(stdout, "response", cli_text(j, "response"));
	table_kv(stdout, "payload", cli_text(j, "payload"));
	table_kv(stdout, "variables", cli_text(j, "variables"));
	table_kv(stdout, "comment", cli_str(j, "comment"));
	table_kv(stdout, "created", cli_time(j, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "created_user", cli_str(j, "created_user"));
	table_kv(stdout, "updated", cli_time(j, "update_at", tm, sizeof(tm)));
	table_kv(stdout, "scheduled", cli_time(j, "scheduled_time", tm, sizeof(tm)));
	table_kv(stdout, "response_time", cli_time(j, "response_time", tm, sizeof(tm)));
	table_kv(stdout, "ttl", cli_text(j, "ttl"));
	/* the fields of a coordinator with rollouts, when it has them (docs/cli.md "Rollouts") */
	if (jsonu_member(j, "attempt") != NULL)
		table_kv(stdout, "attempt", cli_text(j, "attempt"));
	if (jsonu_member(j, "error_code") != NULL)
		table_kv(stdout, "error_code", cli_text(j, "error_code"));
	/* a job that spans a reboot: the phase of its last report (docs/cli.md "Jobs") */
	if (jsonu_member(j, "phase") != NULL)
		table_kv(stdout, "phase", cli_str(j, "phase"));
	jobs_print_progress(jsonu_member(j, "progress"));
}

int cmd_jobs_show(struct cli *c)
{
	char job[UUID_STR_LEN];
	struct buf path;
	struct http_resp r = {0};
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = cli_job_ident(c, c->pos[0], job);
	if (rc == CLI_OK)
		rc = jobs_path(c, &path, "/jobs/", job, "");
	if (rc == CLI_OK)
		rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		jobs_print(c, r.json);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_jobs_history(struct cli *c)
{
	char job[UUID_STR_LEN];
	struct buf path;
	struct http_resp r = {0};
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = cli_job_ident(c, c->pos[0], job);
	if (rc == CLI_OK)
		rc = jobs_path(c, &path, "/jobs/", job, "/history");
	if (rc == CLI_OK && cli_query_paging(c, &path) != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "out of memory");
	if (rc == CLI_OK)
		rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc == CLI_OK)
		rc = jobs_table(c, &r, 1);
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_jobs_cancel(struct cli *c)
{
	char job[UUID_STR_LEN];
	struct buf path;
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = cli_job_ident(c, c->pos[0], job);
	if (rc == CLI_OK)
		rc = jobs_path(c, &path, "/jobs/", job, "/cancel");
	if (rc == CLI_OK && c->o.reason != NULL) {
		/* who cancels is the key's user; why, the operator's words (docs/api.md) */
		body = json_object_new_object();
		if (body == NULL ||
		    json_object_object_add(body, "reason", json_object_new_string(c->o.reason)))
			rc = cli_fail(c, CLI_API, "out of memory");
	}
	if (rc == CLI_OK)
		rc = cli_call(c, "PATCH", path.data, body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		printf("job %s %s\n", cli_show(r.json, "ident"), cli_show(r.json, "status"));
out:
	json_object_put(body);
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

/* The causes of the latest attempts that failed, "code=n, ..." (docs/cli.md "Groups and
 * watch"); nothing from a coordinator that does not count them. */
static void groups_error_codes(json_object *codes)
{
	char text[1024];
	size_t used = 0;

	if (codes == NULL || !json_object_is_type(codes, json_type_object))
		return;
	text[0] = '\0';
	json_object_object_foreach(codes, k, v)
	{
		int w = snprintf(text + used, sizeof(text) - used, "%s%s=%lld", used ? ", " : "", k,
				 (long long)json_object_get_int64(v));

		if (w < 0 || (size_t)w >= sizeof(text) - used)
			break;
		used += (size_t)w;
	}
	table_kv(stdout, "error_codes", used ? text : NULL);
}

/* A group's record with its counts: the list's item when it has them, else GET
 * /groups/<id> (a list without counts: docs/cli.md "Groups and watch"); NULL on any error
 * (the row shows "-": progress only helps to read). */
static json_object *groups_counted(struct cli *c, json_object *it, struct http_resp *r)
{
	char path[64];
	const char *id = cli_str(it, "ident");
	char errbuf[256];

	if (jsonu_member(it, "progress") != NULL || jsonu_member(it, "counts") != NULL ||
	    jsonu_member(it, "statuses") != NULL)
		return it;
	if (id == NULL || !uuid_valid(id))
		return NULL;
	snprintf(path, sizeof(path), "/groups/%s", id);
	if (http_call(&c->http, "GET", path, NULL, r, errbuf, sizeof(errbuf)) != RCS_OK ||
	    r->status != 200)
		return NULL;
	return r->json;
}

static void groups_row(struct list_row *r, const char **cells)
{
	struct http_resp g = {0};
	char *prog = list_cell(r, 48);

	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "name");
	cells[2] = list_short(r, 1);
	cells[3] = cli_str(r->item, "status");
	/* a copy: the group read for it (an older coordinator's list) is freed at once */
	cells[4] =
	    prog ? cli_group_progress(groups_counted(r->spec->ctx, r->item, &g), prog, 48) : NULL;
	cells[5] = cli_str(r->item, "created_user");
	cells[6] = list_when(r, "created_at");
	http_resp_free(&g);
}

int cmd_groups_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT",    "NAME",       "TASK",   "STATUS",
					    "PROGRESS", "CREATED BY", "CREATED"};
	const struct list_spec l = {.heads = heads,
				    .ncols = 7,
				    .keep = 0x7fu & ~(1u << 1 | 1u << 5),
				    .idents = {"ident", "task_ident"},
				    .row = groups_row,
				    .ctx = c};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/groups") != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "status", c->o.status) != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
	else
		rc = list_run(c, path.data, &l);
	buf_free(&path);
	return rc;
}

/* A group's progress (docs/api.md "Progress"): its devices, how many ended and how, what
 * is still open or held, its retries and the rollout's time to release what it holds. */
static void groups_progress(json_object *g)
{
	json_object *p = jsonu_member(g, "progress"), *eta;
	char line[256], d[24];

	if (p == NULL || !json_object_is_type(p, json_type_object))
		return;
	snprintf(line, sizeof(line), "%lld", (long long)cli_int(p, "devices"));
	table_kv(stdout, "devices", line);
	snprintf(line, sizeof(line),
		 "%lld ended: %lld succeeded, %lld failed, %lld cancelled (%lld not sent)",
		 (long long)cli_int(p, "ended"), (long long)cli_int(p, "succeeded"),
		 (long long)cli_int(p, "failed"), (long long)cli_int(p, "cancelled"),
		 (long long)cli_int(p, "not_sent"));
	table_kv(stdout, "progress", line);
	snprintf(line, sizeof(line), "%lld (%lld held for release)", (long long)cli_int(p, "open"),
		 (long long)cli_int(p, "held"));
	table_kv(stdout, "open", line);
	snprintf(line, sizeof(line), "%lld (jobs in all: %s)", (long long)cli_int(p, "retries"),
		 cli_text(g, "total") ? cli_text(g, "total") : "-");
	table_kv(stdout, "retries", line);
	eta = jsonu_member(p, "release_eta_s");
	if (eta != NULL && json_object_is_type(eta, json_type_int)) {
		table_duration(d, sizeof(d), (double)json_object_get_int64(eta));
		snprintf(line, sizeof(line), "%s at the rollout's pace", d);
		table_kv(stdout, "released in", line);
	}
}

/* The devices the group's send left out (docs/api.md: GET /groups/<id> `rejected`), as the
 * other tables show devices: a short ident with the name, then why (docs/cli.md "Tables"). */
static int groups_rejected(struct cli *c, json_object *g)
{
	static const char *const heads[] = {"REJECTED DEVICE", "CODE", "REASON"};
	json_object *rej = cli_array(g, "rejected");
	struct cli_names nm = {0};
	struct table t;
	const char **ids = NULL;
	size_t n = 0, len;
	int rc = CLI_OK;

	if (rej == NULL || json_object_array_length(rej) == 0)
		return CLI_OK;
	table_init(&t, 3, heads);
	ids = cli_idents(rej, "entity_ident", &n);
	if (ids == NULL) {
		rc = cli_fail(c, CLI_API, "out of memory");
		goto out;
	}
	len = table_short_len(ids, n);
	table_least(&t, 0, len + 1); /* a device's short ident and a '~' */
	table_keep(&t, 1);
	cli_names_load(c, &nm, ids, n);
	for (size_t i = 0; i < json_object_array_length(rej) && rc == CLI_OK; i++) {
		json_object *it = json_object_array_get_idx(rej, i), *e = jsonu_member(it, "error");
		char dev[256];
		const char *row[] = {
		    cli_device_cell(dev, sizeof(dev), &nm, cli_str(it, "entity_ident"), len),
		    cli_str(e, "code"), cli_str(e, "message")};

		if (table_add(&t, row) != RCS_OK)
			rc = cli_fail(c, CLI_API, "out of memory");
	}
	fputc('\n', stdout);
	table_print(&t, stdout, table_term_width());
out:
	cli_names_free(&nm);
	free(ids);
	table_free(&t);
	return rc;
}

static int groups_print(struct cli *c, json_object *g)
{
	static const char *const heads[] = {"STATUS", "JOBS"};
	static const char *const by_device[] = {"STATUS", "DEVICES"};
	json_object *counts = jsonu_member(g, "counts");
	char tm[32];
	struct table t;
	int rc = CLI_OK;
	bool devices = counts != NULL && json_object_is_type(counts, json_type_object);

	if (!devices)
		counts = jsonu_member(g, "statuses");
	table_kv(stdout, "ident", cli_str(g, "ident"));
	table_kv(stdout, "name", cli_str(g, "name"));
	table_kv(stdout, "task", cli_str(g, "task_ident"));
	table_kv(stdout, "created", cli_time(g, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "created_user", cli_str(g, "created_user"));
	if (jsonu_member(g, "status") != NULL)
		table_kv(stdout, "status", cli_str(g, "status"));
	if (jsonu_member(g, "reason") != NULL)
		table_kv(stdout, "reason", cli_text(g, "reason"));
	if (jsonu_member(g, "progress") != NULL)
		groups_progress(g);
	else
		table_kv(stdout, "total", cli_text(g, "total"));
	groups_error_codes(jsonu_member(g, "error_codes"));
	fputc('\n', stdout);
	/* the devices' latest attempts when the coordinator counts them, else the jobs */
	table_init(&t, 2, devices ? by_device : heads);
	/* in the order of the lifecycle, then any status this CLI doesn't know */
	for (int s = 0; s < JS__COUNT && rc == CLI_OK; s++) {
		const char *row[] = {status_name((enum job_status)s), NULL};
		if (jsonu_member(counts, row[0]) == NULL)
			continue;
		row[1] = cli_text(counts, row[0]);
		if (table_add(&t, row) != RCS_OK)
			rc = cli_fail(c, CLI_API, "out of memory");
	}
	if (counts != NULL && json_object_is_type(counts, json_type_object)) {
		json_object_object_foreach(counts, k, v)
		{
			enum job_status st;
			const char *row[] = {k, json_object_get_string(v)};
			if (!status_parse(k, &st) && rc == CLI_OK && table_add(&t, row) != RCS_OK)
				rc = cli_fail(c, CLI_API, "out of memory");
		}
	}
	table_print(&t, stdout, table_term_width());
	table_free(&t);
	if (rc == CLI_OK)
		rc = groups_rejected(c, g);
	return rc;
}

int cmd_groups_show(struct cli *c)
{
	char group[UUID_STR_LEN];
	struct buf path;
	struct http_resp r = {0};
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = cli_group_ident(c, c->pos[0], group);
	if (rc == CLI_OK)
		rc = jobs_path(c, &path, "/groups/", group, "");
	if (rc == CLI_OK)
		rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		rc = groups_print(c, r.json);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_groups_action(struct cli *c)
{
	const char *action = strchr(c->cmd, ' ') + 1; /* "groups pause" */
	struct buf path;
	struct http_resp r = {0};
	char suffix[16], group[UUID_STR_LEN];
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	snprintf(suffix, sizeof(suffix), "/%s", action);
	rc = cli_group_ident(c, c->pos[0], group);
	if (rc == CLI_OK)
		rc = jobs_path(c, &path, "/groups/", group, suffix);
	if (rc == CLI_OK)
		rc = cli_call(c, "PATCH", path.data, NULL, &r, JOBS_ROLLOUT_HINT);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		printf("group %s: %s\n", c->pos[0],
		       cli_str(r.json, "status") ? cli_show(r.json, "status") : action);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}
