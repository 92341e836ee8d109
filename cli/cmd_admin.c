/*
 * cmd_admin.c - rcs keys list|create|revoke, rcs webhooks
 * list|create|show|update|delete|deliveries and rcs audit (docs/cli.md "Keys, webhooks and
 * the audit log"; the API: docs/api.md "API keys", "Webhooks", "Audit"; all admin role).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "jsonu.h"
#include "list.h"
#include "send.h"
#include "table.h"
#include "uuid.h"

/* The strings of array a joined by "," into out; "-" for none. */
static const char *admin_join(json_object *a, char *out, size_t len)
{
	return cli_join(a, ",", out, len)[0] ? out : "-";
}

/* GET path (a list: the paging options added) as a table by l. */
static int admin_list(struct cli *c, struct buf *path, const struct list_spec *l)
{
	if (cli_query_paging(c, path) != RCS_OK)
		return cli_fail(c, CLI_USAGE, "the filters are too long");
	return list_run(c, path->data, l);
}

/* A cell of array a's strings joined by ",". */
static const char *admin_join_cell(struct list_row *r, const char *key)
{
	char *out = list_cell(r, 512);

	return out ? admin_join(jsonu_member(r->item, key), out, 512) : NULL;
}

/* ---- keys ---- */

static void keys_row(struct list_row *r, const char **cells)
{
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "user");
	cells[2] = cli_str(r->item, "role");
	cells[3] = list_when(r, "created_at");
	cells[4] = list_when(r, "revoked_at");
}

int cmd_keys_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT", "USER", "ROLE", "CREATED", "REVOKED"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 5,
					   .keep = 1u << 0 | 1u << 2 | 1u << 3 | 1u << 4,
					   .idents = {"ident"},
					   .row = keys_row};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/keys") != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "out of memory");
	else
		rc = admin_list(c, &path, &l);
	buf_free(&path);
	return rc;
}

int cmd_keys_create(struct cli *c)
{
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	if (c->o.user == NULL || c->o.role == NULL) {
		rc = cli_fail(c, CLI_USAGE,
			      "--user and --role (viewer, operator, admin) are required");
		goto out;
	}
	body = json_object_new_object();
	if (body == NULL ||
	    json_object_object_add(body, "user", json_object_new_string(c->o.user)) != 0 ||
	    json_object_object_add(body, "role", json_object_new_string(c->o.role)) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "POST", "/keys", body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	printf("created %s key %s for %s; the key, shown only now:\n", cli_show(r.json, "role"),
	       cli_show(r.json, "ident"), cli_show(r.json, "user"));
	printf("%s\n", cli_show(r.json, "api_key"));
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}

int cmd_keys_revoke(struct cli *c)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp r = {0};
	int rc;

	rc = cli_walk_ident(c, "/keys", "key", c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/keys/%s", id);
	rc = cli_call(c, "DELETE", path, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (!c->o.json)
		printf("revoked key %s\n", id);
out:
	http_resp_free(&r);
	return rc;
}

/* ---- webhooks ---- */

static void webhooks_row(struct list_row *r, const char **cells)
{
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "url");
	cells[2] = admin_join_cell(r, "events");
	cells[3] = admin_join_cell(r, "statuses");
	cells[4] = cli_text(r->item, "active");
	cells[5] = list_when(r, "created_at");
}

int cmd_webhooks_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT",    "URL",    "EVENTS",
					    "STATUSES", "ACTIVE", "CREATED"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 6,
					   .keep = 1u << 0 | 1u << 4 | 1u << 5,
					   .idents = {"ident"},
					   .row = webhooks_row};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/webhooks") != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "out of memory");
	else
		rc = admin_list(c, &path, &l);
	buf_free(&path);
	return rc;
}

static void webhooks_print(json_object *w)
{
	char buf[1024], tm[32];

	table_kv(stdout, "ident", cli_str(w, "ident"));
	table_kv(stdout, "url", cli_str(w, "url"));
	table_kv(stdout, "events", admin_join(jsonu_member(w, "events"), buf, sizeof(buf)));
	table_kv(stdout, "statuses", admin_join(jsonu_member(w, "statuses"), buf, sizeof(buf)));
	table_kv(stdout, "active", cli_text(w, "active"));
	table_kv(stdout, "created_user", cli_str(w, "created_user"));
	table_kv(stdout, "created", cli_time(w, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "updated", cli_time(w, "update_at", tm, sizeof(tm)));
}

static int admin_strlist(json_object *body, const char *k, const struct cfg_strlist *l)
{
	json_object *a;

	if (l->n == 0)
		return 0;
	a = json_object_new_array();
	for (size_t i = 0; a && i < l->n; i++)
		json_object_array_add(a, json_object_new_string(l->items[i]));
	if (a == NULL || json_object_object_add(body, k, a) != 0) {
		json_object_put(a);
		return -1;
	}
	return 0;
}

/* The members of a webhook's POST or PATCH from the options given (url: the URL, or NULL). */
static int webhooks_body(struct cli *c, const char *url, json_object **out)
{
	json_object *b = json_object_new_object();
	int bad = b == NULL;

	*out = NULL;
	if (c->o.active && strcmp(c->o.active, "true") != 0 && strcmp(c->o.active, "false") != 0) {
		json_object_put(b);
		return cli_fail(c, CLI_USAGE, "--active: true or false, not '%s'", c->o.active);
	}
	if (!bad && url)
		bad |= json_object_object_add(b, "url", json_object_new_string(url));
	if (!bad)
		bad |= admin_strlist(b, "events", &c->o.event);
	if (!bad)
		bad |= admin_strlist(b, "statuses", &c->o.statuses);
	if (!bad && c->o.secret)
		bad |= json_object_object_add(b, "secret", json_object_new_string(c->o.secret));
	if (!bad && c->o.active)
		bad |= json_object_object_add(
		    b, "active", json_object_new_boolean(strcmp(c->o.active, "true") == 0));
	if (bad) {
		json_object_put(b);
		return cli_fail(c, CLI_USAGE, "out of memory");
	}
	*out = b;
	return CLI_OK;
}

int cmd_webhooks_create(struct cli *c)
{
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	if (c->o.event.n == 0) {
		rc = cli_fail(c, CLI_USAGE, "--event job.status and/or --event group.status");
		goto out;
	}
	rc = webhooks_body(c, c->pos[0], &body);
	if (rc != CLI_OK)
		goto out;
	rc = cli_call(c, "POST", "/webhooks", body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	printf("created webhook %s for %s\n", cli_show(r.json, "ident"), cli_show(r.json, "url"));
	if (cli_str(r.json, "secret") != NULL)
		printf("its secret, shown only now (rcs-signature, docs/integrations.md):\n%s\n",
		       cli_show(r.json, "secret"));
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}

/* show, update, delete and deliveries: method on /webhooks/<id><suffix> */
static int webhooks_one(struct cli *c, const char *method, const char *suffix, json_object *body,
			struct http_resp *r, char *id)
{
	char path[192];
	int rc = cli_walk_ident(c, "/webhooks", "webhook", c->pos[0], id);

	if (rc != CLI_OK)
		return rc;
	snprintf(path, sizeof(path), "/webhooks/%s%s", id, suffix);
	return cli_call(c, method, path, body, r, NULL);
}

int cmd_webhooks_show(struct cli *c)
{
	char id[UUID_STR_LEN];
	struct http_resp r = {0};
	int rc = webhooks_one(c, "GET", "", NULL, &r, id);

	if (rc == CLI_OK && c->o.json)
		cli_print_raw(&r);
	else if (rc == CLI_OK)
		webhooks_print(r.json);
	http_resp_free(&r);
	return rc;
}

int cmd_webhooks_update(struct cli *c)
{
	char id[UUID_STR_LEN];
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	if (c->o.endpoint == NULL && c->o.event.n == 0 && c->o.statuses.n == 0 &&
	    c->o.secret == NULL && c->o.active == NULL) {
		rc = cli_fail(
		    c, CLI_USAGE,
		    "give what changes: --endpoint, --event, --status, --secret, --active");
		goto out;
	}
	rc = webhooks_body(c, c->o.endpoint, &body);
	if (rc == CLI_OK)
		rc = webhooks_one(c, "PATCH", "", body, &r, id);
	if (rc == CLI_OK && c->o.json)
		cli_print_raw(&r);
	else if (rc == CLI_OK)
		webhooks_print(r.json);
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}

int cmd_webhooks_delete(struct cli *c)
{
	char id[UUID_STR_LEN];
	struct http_resp r = {0};
	int rc = webhooks_one(c, "DELETE", "", NULL, &r, id);

	if (rc == CLI_OK && !c->o.json)
		printf("deleted webhook %s\n", id);
	http_resp_free(&r);
	return rc;
}

static void deliveries_row(struct list_row *r, const char **cells)
{
	json_object *att = cli_array(r->item, "attempts");

	cells[0] = list_short(r, 0);
	cells[1] = list_when(r, "ts");
	cells[2] = cli_str(r->item, "type");
	cells[3] = list_short(r, 1);
	cells[4] = cli_str(r->item, "status");
	cells[5] = cli_str(r->item, "state");
	cells[6] = list_printf(r, "%zu", att ? json_object_array_length(att) : 0);
	cells[7] = cli_str(r->item, "last_error");
}

int cmd_webhooks_deliveries(struct cli *c)
{
	static const char *const heads[] = {"ID",     "CHANGED", "TYPE",  "SUBJECT",
					    "STATUS", "STATE",   "TRIES", "LAST ERROR"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 8,
					   .keep = 0x7fu & ~(1u << 2),
					   .idents = {"id", "subject"},
					   .row = deliveries_row};
	char id[UUID_STR_LEN], suffix[96] = "/deliveries";
	struct http_resp r = {0};
	int rc;

	if (c->o.page > 0 || c->o.per_page > 0)
		snprintf(suffix, sizeof(suffix), "/deliveries?page=%lld&per_page=%lld",
			 c->o.page > 0 ? c->o.page : 1, c->o.per_page > 0 ? c->o.per_page : 50);
	rc = webhooks_one(c, "GET", suffix, NULL, &r, id);
	if (rc == CLI_OK)
		rc = list_print(c, &r, &l);
	http_resp_free(&r);
	return rc;
}

/* ---- audit ---- */

/* --since/--until: a time as --schedule takes it, or -N[smhd] before now. */
static int admin_time(struct cli *c, const char *opt, const char *s, char *out, size_t len)
{
	char plus[64];
	int64_t t = 0, back = 0;
	time_t now = time(NULL);

	if (s == NULL) {
		out[0] = '\0';
		return CLI_OK;
	}
	if (s[0] == '-' && strlen(s) < sizeof(plus)) {
		snprintf(plus, sizeof(plus), "+%s", s + 1);
		if (send_parse_time(plus, 0, &back) == RCS_OK) {
			t = (int64_t)now - back;
			snprintf(out, len, "%lld", (long long)(t < 0 ? 0 : t));
			return CLI_OK;
		}
	} else if (send_parse_time(s, now, &t) == RCS_OK) {
		snprintf(out, len, "%lld", (long long)t);
		return CLI_OK;
	}
	return cli_fail(c, CLI_USAGE,
			"--%s '%s': not a time (Unix seconds, -30m, -2h, -1d before now, "
			"YYYY-MM-DD[THH:MM[:SS]][Z])",
			opt, s);
}

static void audit_row(struct list_row *r, const char **cells)
{
	cells[0] = list_when(r, "ts");
	cells[1] = cli_str(r->item, "user");
	cells[2] = cli_str(r->item, "method");
	cells[3] = list_printf(r, "%lld", (long long)cli_int(r->item, "status_code"));
	cells[4] = cli_str(r->item, "path");
	cells[5] = list_short(r, 0);
	cells[6] = cli_str(r->item, "remote");
}

int cmd_audit(struct cli *c)
{
	static const char *const heads[] = {"TIME", "USER",   "METHOD", "CODE",
					    "PATH", "TARGET", "REMOTE"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 7,
					   .keep = 1u << 0 | 1u << 2 | 1u << 3 | 1u << 5,
					   .idents = {"target"},
					   .row = audit_row};
	char since[32], until[32];
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = admin_time(c, "since", c->o.since, since, sizeof(since));
	if (rc == CLI_OK)
		rc = admin_time(c, "until", c->o.until, until, sizeof(until));
	if (rc != CLI_OK)
		goto out;
	if (buf_appendf(&path, "/audit") != RCS_OK ||
	    cli_query(&path, "user", c->o.user) != RCS_OK ||
	    cli_query(&path, "target", c->o.target) != RCS_OK ||
	    cli_query(&path, "since", since[0] ? since : NULL) != RCS_OK ||
	    cli_query(&path, "until", until[0] ? until : NULL) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
		goto out;
	}
	rc = admin_list(c, &path, &l);
out:
	buf_free(&path);
	return rc;
}
