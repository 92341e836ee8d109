/*
 * store_group_codes.c - a group's error_codes: the causes of its devices' latest attempts
 * that ended edge_error (docs/api.md "Rollouts"). See store_groups.h.
 */
#include <stdbool.h>

#include "store_group_codes.h"
#include "store_int.h"

enum rcs_err store_group_error_codes(struct store *st, const char *group,
				     struct group_error_count *out, size_t *n)
{
	struct store_stmt *s = NULL;
	bool row = false;
	enum rcs_err err = store_stmt(
	    st,
	    "SELECT error_code, count(*) FROM jobs WHERE group_ident = ?1 AND superseded = 0 AND"
	    " status = 'edge_error' AND error_code IS NOT NULL GROUP BY error_code ORDER BY"
	    " error_code LIMIT 32", /* GROUP_MAX_ERROR_CODES */
	    &s);

	*n = 0;
	if (err == RCS_OK)
		store_arg_text(s, 1, group);
	while (err == RCS_OK && (err = store_next(st, s, "group error codes", &row)) == RCS_OK &&
	       row && *n < GROUP_MAX_ERROR_CODES) {
		struct group_error_count *c = &out[(*n)++];

		store_val_copy(s, 0, c->code, sizeof(c->code));
		c->n = store_val_int(s, 1);
	}
	store_stmt_done(st, s);
	return err;
}
