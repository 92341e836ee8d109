/*
 * store_audit.h - the store's audit log (docs/api.md, "Audit"; store_audit.c). See store.h.
 */
#ifndef RCS_STORE_AUDIT_H
#define RCS_STORE_AUDIT_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

/* One record; every text may be NULL but method and path. */
struct audit_rec {
	long long id;
	char *client_root;
	int64_t ts;
	char *user;
	char *key_ident;
	char *method;
	char *path;
	char *target;
	long long status_code;
	char *remote;
};
void store_audit_rec_free(struct audit_rec *r);
/* Appends a record (in the caller's transaction when there is one). */
enum rcs_err store_audit_add(struct store *st, const struct audit_rec *r);
struct audit_filter {
	const char *user, *target;
	bool has_since, has_until;
	int64_t since, until; /* inclusive */
};
struct store_audit_list {
	struct store_page_info pg;
	struct audit_rec *items;
	size_t n;
};
void store_audit_list_free(struct store_audit_list *l);
/* The tenant's records, newest first. */
enum rcs_err store_audit_list(struct store *st, const char *client_root,
			      const struct audit_filter *f, const struct store_page *pg,
			      struct store_audit_list *out);

#endif
