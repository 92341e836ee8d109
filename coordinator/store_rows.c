/*
 * store_rows.c - what the store's files read rows with (store_int.h): a row's text values
 * copied out, the query builder of filtered and sorted lists, and their pages (the count, the
 * page's statement, the page read into typed records). Statements run through store.c's
 * seam and lock; store.c calls nothing here.
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store_int.h"

/* ---- a row's text values ---- */

char *store_val_dup(struct store_stmt *s, int i, enum rcs_err *err)
{
	const char *t = store_val_text(s, i);
	size_t n;
	char *c;

	if (t == NULL)
		return NULL;
	n = store_val_len(s, i);
	c = malloc(n + 1);
	if (c == NULL) {
		*err = RCS_ERR_NOMEM;
		return NULL;
	}
	memcpy(c, t, n);
	c[n] = '\0';
	return c;
}

void store_val_copy(struct store_stmt *s, int i, char *dst, size_t size)
{
	const char *t = store_val_text(s, i);
	size_t n = t ? store_val_len(s, i) : 0;

	if (size == 0)
		return;
	if (n >= size)
		n = size - 1;
	if (n > 0)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

/*
 * A small query builder for filtered, paged lists: WHERE clauses with text
 * parameters only, so nothing a client sends is ever part of the SQL text.
 */

void store_qb_add(struct store_qb *q, const char *clause, const char *param)
{
	size_t len = strlen(q->where);
	int n;

	if (q->overflow)
		return;
	if (param != NULL && q->n == STORE_QB_PARAMS) {
		q->overflow = true;
		return;
	}
	n = snprintf(q->where + len, sizeof(q->where) - len, "%s%s", len ? " AND " : " WHERE ",
		     clause);
	if (n < 0 || (size_t)n >= sizeof(q->where) - len) {
		q->where[len] = '\0';
		q->overflow = true;
		return;
	}
	if (param != NULL)
		q->params[q->n++] = param;
}

/* The bounds of a list's options (docs/api.md "Lists"), as decimal text for store_qb. */

/*
 * Adds pg's created_after, created_before, name, ident_prefix and ident_suffix to q (columns of the
 * table aliased p,
 * "" or "j.") and writes its ORDER BY into o->order. created_at order is the order of the
 * idents (UUIDv7: the time of creation comes first), which the indexes serve; the ident
 * (id: "ident" or "entity_ident") breaks ties of the other keys, so pages never overlap.
 */
void store_qb_list_opts(struct store_qb *q, const struct store_page *pg, const char *p,
			const char *id, struct store_qb_opts *o)
{
	const char *dir = pg->desc ? "DESC" : "ASC";
	char clause[64];

	if (pg->has_after) {
		snprintf(o->after, sizeof(o->after), "%lld", pg->created_after);
		snprintf(clause, sizeof(clause), "%screated_at > CAST(? AS INTEGER)", p);
		store_qb_add(q, clause, o->after);
	}
	if (pg->has_before) {
		snprintf(o->before, sizeof(o->before), "%lld", pg->created_before);
		snprintf(clause, sizeof(clause), "%screated_at < CAST(? AS INTEGER)", p);
		store_qb_add(q, clause, o->before);
	}
	if (pg->name) {
		snprintf(clause, sizeof(clause), "%sname = ?", p);
		store_qb_add(q, clause, pg->name);
	}
	/* hex and '-' only (api.c checks), so no '%' or '_' of the client's reaches LIKE */
	if (pg->ident_prefix[0] != '\0') {
		snprintf(o->prefix, sizeof(o->prefix), "%s%%", pg->ident_prefix);
		snprintf(clause, sizeof(clause), "%s%s LIKE ?", p, id);
		store_qb_add(q, clause, o->prefix);
	}
	if (pg->ident_suffix[0] != '\0') {
		snprintf(o->suffix, sizeof(o->suffix), "%%%s", pg->ident_suffix);
		snprintf(clause, sizeof(clause), "%s%s LIKE ?", p, id);
		store_qb_add(q, clause, o->suffix);
	}
	if (pg->sort == NULL || strcmp(pg->sort, "created_at") == 0)
		snprintf(o->order, sizeof(o->order), "%s%s %s", p, id, dir);
	else
		snprintf(o->order, sizeof(o->order), "%s%s %s, %s%s %s", p, pg->sort, dir, p, id,
			 dir);
}

enum rcs_err store_page_rows(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, long long *total, struct store_stmt **s)
{
	char sql[4096];
	enum rcs_err err;
	bool row = false;

	*total = 0;
	*s = NULL;
	if (q->overflow) {
		log_warnx("store: a list's filters do not fit its query");
		return RCS_ERR_INTERNAL;
	}
	if ((size_t)snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s%s", from, q->where) >=
	    sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_stmt_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	for (int i = 0; i < q->n; i++)
		store_arg_text(*s, i + 1, q->params[i]);
	err = store_next(st, *s, "count", &row);
	if (err == RCS_OK && row)
		*total = store_val_int(*s, 0);
	store_stmt_done(st, *s);
	*s = NULL;
	if (err != RCS_OK)
		return err;
	if ((size_t)snprintf(sql, sizeof(sql),
			     "SELECT %s FROM %s%s ORDER BY %s LIMIT ?%d OFFSET ?%d", cols, from,
			     q->where, order, q->n + 1, q->n + 2) >= sizeof(sql))
		return RCS_ERR_INTERNAL;
	err = store_stmt_fresh(st, sql, s);
	if (err != RCS_OK)
		return err;
	for (int i = 0; i < q->n; i++)
		store_arg_text(*s, i + 1, q->params[i]);
	store_arg_int(*s, q->n + 1, pg->per_page);
	store_arg_int(*s, q->n + 2, (pg->page - 1) * pg->per_page);
	return RCS_OK;
}

/* ---- a page of typed records ---- */

enum rcs_err store_page_recs(struct store *st, const char *cols, const char *from,
			     const struct store_qb *q, const char *order,
			     const struct store_page *pg, struct store_page_info *info, size_t size,
			     store_one_fn fn, void **items, size_t *n)
{
	struct store_stmt *s = NULL;
	unsigned char *recs = NULL;
	enum rcs_err err;
	bool row = false;

	*items = NULL;
	*n = 0;
	info->page = pg->page;
	info->per_page = pg->per_page;
	info->total = 0;
	if (pg->per_page < 1)
		return RCS_ERR_INTERNAL;
	recs = calloc((size_t)pg->per_page, size);
	if (recs == NULL)
		return RCS_ERR_NOMEM;
	*items = recs;
	store_lock(st);
	err = store_page_rows(st, cols, from, q, order, pg, &info->total, &s);
	while (err == RCS_OK && *n < (size_t)pg->per_page &&
	       (err = store_next(st, s, "page", &row)) == RCS_OK && row)
		err = fn(s, recs + size * (*n)++);
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}
