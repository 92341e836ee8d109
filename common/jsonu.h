/*
 * jsonu.h - reading JSON only through small typed accessors.
 *
 * Every accessor reports a problem the same way: it returns RCS_ERR_INVAL (or
 * RCS_ERR_TOOBIG) and fills a struct jsonu_err with the offending field and a
 * message, so every caller names the field in its error answer.
 * Returned strings and objects are borrowed from the parsed tree: valid while
 * the tree lives, never freed by the caller.
 */
#ifndef RCS_JSONU_H
#define RCS_JSONU_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define JSONU_MAX_DEPTH 32

struct jsonu_err {
	char field[128];
	char message[256];
};

/* Sets e's field and message (printf-style); returns RCS_ERR_INVAL. */
enum rcs_err jsonu_fail(struct jsonu_err *e, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Parses exactly len bytes as one JSON value, at most max_depth deep.
 * Trailing data, NUL bytes and invalid UTF-8 are errors. On success *out owns
 * a new tree (json_object_put it). RCS_ERR_INVAL with e filled otherwise.
 */
enum rcs_err jsonu_parse(const char *data, size_t len, int max_depth, json_object **out,
			 struct jsonu_err *e);

/* Parses and requires a JSON object at the top. */
enum rcs_err jsonu_parse_object(const char *data, size_t len, json_object **out,
				struct jsonu_err *e);

/*
 * Typed getters. *present (may be NULL) tells whether the key was there and
 * not null. A missing or null key is an error only when required.
 * Strings: max_len bytes at most; must not contain NUL.
 */
enum rcs_err jsonu_get_string(json_object *obj, const char *key, bool required, size_t max_len,
			      const char **out, bool *present, struct jsonu_err *e);
enum rcs_err jsonu_get_int(json_object *obj, const char *key, bool required, int64_t min,
			   int64_t max, int64_t *out, bool *present, struct jsonu_err *e);
enum rcs_err jsonu_get_bool(json_object *obj, const char *key, bool required, bool *out,
			    bool *present, struct jsonu_err *e);
/* Accepts a JSON boolean or the strings "true"/"false" (the seed's "active"). */
enum rcs_err jsonu_get_boolish(json_object *obj, const char *key, bool required, bool *out,
			       bool *present, struct jsonu_err *e);
enum rcs_err jsonu_get_object(json_object *obj, const char *key, bool required, json_object **out,
			      bool *present, struct jsonu_err *e);
/* Array of at most max_items elements. */
enum rcs_err jsonu_get_array(json_object *obj, const char *key, bool required, size_t max_items,
			     json_object **out, bool *present, struct jsonu_err *e);
/* Array of strings, each at most max_len bytes. */
enum rcs_err jsonu_get_string_array(json_object *obj, const char *key, bool required,
				    size_t max_items, size_t max_len, json_object **out,
				    bool *present, struct jsonu_err *e);

/* Rejects any key of obj not in the NULL-terminated allowed list. */
enum rcs_err jsonu_check_keys(json_object *obj, const char *const *allowed, struct jsonu_err *e);

/* Whether two JSON texts (NULL: none) hold the same value, member order aside; text that
 * doesn't parse equals only the same bytes. */
bool jsonu_text_same(const char *a, const char *b);

/* Serialises compactly (no spaces, no escaped slashes) into a string owned by obj. */
const char *jsonu_dump(json_object *obj, size_t *len);

/*
 * Member key of o (borrowed), or NULL; and its string value, or NULL. No
 * type checks: for trees the program built itself (records from storage),
 * never for input, which goes through the typed getters above.
 */
json_object *jsonu_member(json_object *o, const char *key);
const char *jsonu_member_str(json_object *o, const char *key);

/* json_object_new_string_len that returns NULL for NULL input */
json_object *jsonu_new_string_or_null(const char *s);

#endif
