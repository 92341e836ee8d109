/*
 * list.h - the list commands' tables (docs/cli.md "Tables"): an API page printed as it
 * came with --json, else each of its items a row of a table sized to the terminal, then
 * the page's footer. A command names its columns and makes the cells of one item's row;
 * the short idents, the table and the cleanup are done once, here.
 */
#ifndef RCS_CLI_LIST_H
#define RCS_CLI_LIST_H

#include <json-c/json.h>
#include <stddef.h>

#include "cli.h"
#include "http.h"

#define LIST_MAX_IDENTS  2    /* members whose short idents a page sizes */
#define LIST_SCRATCH     8192 /* bytes of the texts one row's cells make */
#define LIST_SHORT_BYTES 128  /* a short ident's cell (what is not a UUID is shown whole) */

/* One item's row being made: the item, and room for the texts of its cells. */
struct list_row {
	const struct list_spec *spec;
	json_object *item;
	size_t digits[LIST_MAX_IDENTS]; /* of each of spec->idents, over the page */
	struct cli_names names;         /* of spec->devices' devices, over the page */
	char scratch[LIST_SCRATCH];
	size_t used;
};

struct list_spec {
	const char *const *heads;
	size_t ncols;
	unsigned keep; /* bit k: column k is never cut (short idents, times, statuses) */
	/* members whose short idents the rows show (list_short); NULL: none */
	const char *idents[LIST_MAX_IDENTS];
	/* the digits that tell a page's idents apart, and one ident's short text in out; NULL:
	 * the last digits of UUIDs (table_short_len, table_short) */
	size_t (*short_len)(const char *const *ids, size_t n);
	const char *(*short_text)(char *out, size_t len, const char *ident, size_t digits);
	/* devices shown by name (list_device): the index in idents of the member naming them,
	 * plus 1 (0: none), and their column, never narrower than their short idents and a '~' */
	size_t devices;
	size_t devices_col;
	const char *hint;                                    /* cli_call's, after an error answer */
	void (*row)(struct list_row *r, const char **cells); /* the row's ncols cells */
	void *ctx;                                           /* for row */
};

/* GET path (with the query the command made), then the page as list_print shows it. */
int list_run(struct cli *c, const char *path, const struct list_spec *s);
/* A page the command fetched (r, a 2xx answer): as it came with --json, else the table. */
int list_print(struct cli *c, const struct http_resp *r, const struct list_spec *s);

/* Room for a cell's text of len bytes in the row's scratch (NUL-terminated, empty);
 * NULL when the scratch is full (the cell then shows "-"). */
char *list_cell(struct list_row *r, size_t len);
/* A cell of printf text, bounded by the scratch; NULL when full. */
const char *list_printf(struct list_row *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The short ident of the item's member spec->idents[k]. */
const char *list_short(struct list_row *r, size_t k);
/* The device of the item's member spec->idents[k] by name and short ident (cli_device_cell;
 * spec->devices is k + 1). */
const char *list_device(struct list_row *r, size_t k);
/* The item's member key (a Unix time) as a table shows it (cli_when). */
const char *list_when(struct list_row *r, const char *key);

#endif
