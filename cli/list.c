/*
 * list.c - the list commands' tables (list.h; docs/cli.md "Tables").
 */
#include "list.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"
#include "uuid.h"

char *list_cell(struct list_row *r, size_t len)
{
	char *p;

	if (len == 0 || len > sizeof(r->scratch) - r->used)
		return NULL;
	p = r->scratch + r->used;
	p[0] = '\0';
	r->used += len;
	return p;
}

const char *list_printf(struct list_row *r, const char *fmt, ...)
{
	size_t room = sizeof(r->scratch) - r->used;
	char *p = r->scratch + r->used;
	va_list ap;
	int n;

	if (room == 0)
		return NULL;
	va_start(ap, fmt);
	n = vsnprintf(p, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	/* cut at the scratch's end: the table cuts long cells anyway */
	r->used += (size_t)n < room ? (size_t)n + 1 : room;
	return p;
}

const char *list_short(struct list_row *r, size_t k)
{
	const struct list_spec *s = r->spec;
	char *out = list_cell(r, LIST_SHORT_BYTES);
	const char *id =
	    k < LIST_MAX_IDENTS && s->idents[k] ? cli_str(r->item, s->idents[k]) : NULL;

	if (out == NULL)
		return NULL;
	if (s->short_text)
		return s->short_text(out, LIST_SHORT_BYTES, id, r->digits[k]);
	return table_short(out, LIST_SHORT_BYTES, id, r->digits[k]);
}

const char *list_device(struct list_row *r, size_t k)
{
	const struct list_spec *s = r->spec;
	char *out = list_cell(r, 256);
	const char *id =
	    k < LIST_MAX_IDENTS && s->idents[k] ? cli_str(r->item, s->idents[k]) : NULL;

	return out ? cli_device_cell(out, 256, &r->names, id, r->digits[k]) : NULL;
}

const char *list_when(struct list_row *r, const char *key)
{
	char *out = list_cell(r, 32);

	return out ? cli_when(r->item, key, out, 32) : NULL;
}

/* Sizes the short idents of each of s->idents over the page's items into row->digits, and
 * loads the names of the devices of s->devices into row->names. */
static int list_digits(struct cli *c, json_object *items, struct list_row *row)
{
	const struct list_spec *s = row->spec;

	for (size_t k = 0; k < LIST_MAX_IDENTS && s->idents[k]; k++) {
		size_t n = 0;
		const char **ids = cli_idents(items, s->idents[k], &n);

		if (ids == NULL)
			return cli_fail(c, CLI_API, "out of memory");
		row->digits[k] = s->short_len ? s->short_len(ids, n) : table_short_len(ids, n);
		if (s->devices == k + 1)
			cli_names_load(c, &row->names, ids, n);
		free(ids);
	}
	return CLI_OK;
}

int list_print(struct cli *c, const struct http_resp *r, const struct list_spec *s)
{
	struct list_row *row = NULL;
	json_object *items;
	struct table t;
	int rc = CLI_OK;

	table_init(&t, s->ncols, s->heads);
	if (c->o.json) {
		cli_print_raw(r);
		goto out;
	}
	row = calloc(1, sizeof(*row));
	if (row == NULL) {
		rc = cli_fail(c, CLI_API, "out of memory");
		goto out;
	}
	row->spec = s;
	items = cli_array(r->json, "items");
	rc = list_digits(c, items, row);
	if (rc != CLI_OK)
		goto out;
	for (size_t k = 0; k < s->ncols; k++)
		if (s->keep & (1u << k))
			table_keep(&t, k);
	if (s->devices > 0 && s->devices <= LIST_MAX_IDENTS)
		table_least(&t, s->devices_col, row->digits[s->devices - 1] + 1);
	for (size_t i = 0; items && i < json_object_array_length(items); i++) {
		const char *cells[TABLE_MAX_COLS] = {NULL};

		row->item = json_object_array_get_idx(items, i);
		row->used = 0;
		s->row(row, cells);
		if (table_add(&t, cells) != RCS_OK) {
			rc = cli_fail(c, CLI_API, "out of memory");
			goto out;
		}
	}
	table_print(&t, stdout, table_term_width());
	cli_page_footer(r->json);
out:
	if (row != NULL)
		cli_names_free(&row->names);
	free(row);
	table_free(&t);
	return rc;
}

int list_run(struct cli *c, const char *path, const struct list_spec *s)
{
	struct http_resp r = {0};
	int rc = cli_call(c, "GET", path, NULL, &r, s->hint);

	if (rc == CLI_OK)
		rc = list_print(c, &r, s);
	http_resp_free(&r);
	return rc;
}
