/*
 * store_group_codes.h - a group's error_codes (store_group_codes.c): the causes of its
 * devices' latest attempts that ended edge_error (docs/api.md "Rollouts").
 */
#ifndef RCS_STORE_GROUP_CODES_H
#define RCS_STORE_GROUP_CODES_H

#include <stddef.h>

#include "store.h"

#define GROUP_MAX_ERROR_CODES 32

struct group_error_count {
	char code[33]; /* PROTO_MAX_ERROR bytes of [a-z0-9_] */
	long long n;
};

/* The error codes of group's latest attempts and how many ended with each, in the order of
 * the codes, at most GROUP_MAX_ERROR_CODES into out (*n of them); the caller holds the
 * store. */
enum rcs_err store_group_error_codes(struct store *st, const char *group,
				     struct group_error_count *out, size_t *n);

#endif
