/*
 * cmd_devices.c - rcs devices list|show|create|tag|rename|delete (docs/cli.md; the API:
 * docs/api.md "Devices").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonu.h"
#include "list.h"
#include "table.h"
#include "uuid.h"

static void devices_row(struct list_row *r, const char **cells)
{
	char *tags = list_cell(r, 1024), *rtags = list_cell(r, 1024);

	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "name");
	cells[2] = cli_text(r->item, "online");
	cells[3] = tags ? cli_join(jsonu_member(r->item, "tags"), ", ", tags, 1024) : NULL;
	cells[4] =
	    rtags ? cli_join(jsonu_member(r->item, "reported_tags"), ", ", rtags, 1024) : NULL;
	cells[5] = list_when(r, "last_seen");
}

int cmd_devices_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT", "NAME",          "ONLINE",
					    "TAGS",  "REPORTED TAGS", "LAST SEEN"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 6,
					   .keep = 1u << 0 | 1u << 5,
					   .idents = {"entity_ident"},
					   .row = devices_row};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (c->o.tag.n > 1) {
		rc = cli_fail(c, CLI_USAGE, "--tag: one tag at most");
		goto out;
	}
	if (c->o.online && strcmp(c->o.online, "true") != 0 && strcmp(c->o.online, "false") != 0) {
		rc = cli_fail(c, CLI_USAGE, "--online: true or false, not '%s'", c->o.online);
		goto out;
	}
	if (buf_appendf(&path, "/devices") != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "sort", c->o.sort) != RCS_OK ||
	    cli_query(&path, "name", c->o.name) != RCS_OK ||
	    cli_query(&path, "tag", c->o.tag.n ? c->o.tag.items[0] : NULL) != RCS_OK ||
	    cli_query(&path, "online", c->o.online) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
		goto out;
	}
	rc = list_run(c, path.data, &l);
out:
	buf_free(&path);
	return rc;
}

/* The device's attributes, one key=value a line ("-": none). */
static const char *devices_attrs(json_object *attrs, char *out, size_t len)
{
	size_t used = 0;

	out[0] = '\0';
	if (attrs == NULL || !json_object_is_type(attrs, json_type_object))
		return NULL;
	json_object_object_foreach(attrs, key, val)
	{
		int w = snprintf(out + used, len - used, "%s%s=%s", used ? "\n" : "", key,
				 json_object_get_string(val));

		if (w < 0 || (size_t)w >= len - used)
			break;
		used += (size_t)w;
	}
	return used ? out : NULL;
}

static void devices_print(json_object *d)
{
	char tags[2048], attrs[TABLE_MAX_CELL], tm[32];

	table_kv(stdout, "ident", cli_str(d, "entity_ident"));
	table_kv(stdout, "name", cli_str(d, "name"));
	table_kv(stdout, "online", cli_text(d, "online"));
	table_kv(stdout, "tags", cli_join(jsonu_member(d, "tags"), ", ", tags, sizeof(tags)));
	table_kv(stdout, "reported_tags",
		 cli_join(jsonu_member(d, "reported_tags"), ", ", tags, sizeof(tags)));
	table_kv(stdout, "agent_version", cli_str(d, "agent_version"));
	table_kv(stdout, "attributes",
		 devices_attrs(jsonu_member(d, "attributes"), attrs, sizeof(attrs)));
	table_kv(stdout, "last_seen", cli_time(d, "last_seen", tm, sizeof(tm)));
	table_kv(stdout, "created", cli_time(d, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "updated", cli_time(d, "update_at", tm, sizeof(tm)));
}

int cmd_devices_show(struct cli *c)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp r = {0};
	int rc;

	rc = cli_device_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/devices/%s", id);
	rc = cli_call(c, "GET", path, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		devices_print(r.json);
out:
	http_resp_free(&r);
	return rc;
}

static json_object *devices_tags(const struct cfg_strlist *l)
{
	json_object *a = json_object_new_array();

	for (size_t i = 0; a && i < l->n; i++)
		json_object_array_add(a, json_object_new_string(l->items[i]));
	return a;
}

int cmd_devices_create(struct cli *c)
{
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	if (c->o.name == NULL) {
		rc = cli_fail(c, CLI_USAGE, "--name is required");
		goto out;
	}
	body = json_object_new_object();
	if (body == NULL ||
	    json_object_object_add(body, "name", json_object_new_string(c->o.name)) != 0 ||
	    json_object_object_add(body, "tags", devices_tags(&c->o.tag)) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "POST", "/devices", body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		printf("created device %s (%s)\n", cli_show(r.json, "name"),
		       cli_show(r.json, "entity_ident"));
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}

static bool devices_in(const struct cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->items[i], s) == 0)
			return true;
	return false;
}

int cmd_devices_tag(struct cli *c)
{
	char id[UUID_STR_LEN], path[64], tags[2048];
	struct http_resp r = {0}, w = {0};
	json_object *body = NULL, *now, *next = NULL;
	int rc;

	if (c->o.add.n == 0 && c->o.remove.n == 0) {
		rc = cli_fail(c, CLI_USAGE, "give --add TAG or --remove TAG");
		goto out;
	}
	rc = cli_device_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/devices/%s", id);
	rc = cli_call(c, "GET", path, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	/* the device's tags, less the removed, plus the added ones not there yet */
	now = cli_array(r.json, "tags");
	next = json_object_new_array();
	for (size_t i = 0; next && now && i < json_object_array_length(now); i++) {
		json_object *e = json_object_array_get_idx(now, i);
		const char *t =
		    json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
		if (t != NULL && !devices_in(&c->o.remove, t))
			json_object_array_add(next, json_object_new_string(t));
	}
	for (size_t i = 0; next && i < c->o.add.n; i++) {
		bool there = false;
		for (size_t j = 0; j < json_object_array_length(next); j++)
			if (strcmp(json_object_get_string(json_object_array_get_idx(next, j)),
				   c->o.add.items[i]) == 0)
				there = true;
		if (!there)
			json_object_array_add(next, json_object_new_string(c->o.add.items[i]));
	}
	body = json_object_new_object();
	if (next == NULL || body == NULL || json_object_object_add(body, "tags", next) != 0) {
		json_object_put(next);
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "PATCH", path, body, &w, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&w);
	else
		printf("device %s tags: %s\n", cli_show(w.json, "name"),
		       cli_join(jsonu_member(w.json, "tags"), ", ", tags, sizeof(tags)));
out:
	json_object_put(body);
	http_resp_free(&r);
	http_resp_free(&w);
	return rc;
}

int cmd_devices_delete(struct cli *c)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp r = {0};
	int rc;

	rc = cli_device_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/devices/%s", id);
	rc = cli_call(c, "DELETE", path, NULL, &r, NULL);
	if (rc == CLI_OK && !c->o.json)
		printf("deleted device %s (its jobs stay)\n", id);
out:
	http_resp_free(&r);
	return rc;
}

int cmd_devices_rename(struct cli *c)
{
	char id[UUID_STR_LEN], path[64];
	struct http_resp r = {0};
	json_object *body = NULL;
	int rc;

	rc = cli_device_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	body = json_object_new_object();
	if (body == NULL ||
	    json_object_object_add(body, "name", json_object_new_string(c->pos[1])) != 0) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	snprintf(path, sizeof(path), "/devices/%s", id);
	rc = cli_call(c, "PATCH", path, body, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else
		printf("device %s is now named %s\n", cli_show(r.json, "entity_ident"),
		       cli_show(r.json, "name"));
out:
	json_object_put(body);
	http_resp_free(&r);
	return rc;
}
