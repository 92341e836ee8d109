#include "jsonu.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

enum rcs_err jsonu_fail(struct jsonu_err *e, const char *field, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return RCS_ERR_INVAL;
	snprintf(e->field, sizeof(e->field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return RCS_ERR_INVAL;
}

/*
 * Whether the number token s (n bytes, outside strings) is no integer literal
 * or one json-c holds exactly: from INT64_MIN to UINT64_MAX. json-c clamps a
 * literal beyond that range to INT64_MIN or UINT64_MAX without an error.
 */
static bool jsonu_int_in_range(const char *s, size_t n)
{
	bool neg = n > 0 && s[0] == '-';
	const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
	size_t nd = n - (neg ? 1 : 0), nl = strlen(limit);

	s += neg ? 1 : 0;
	for (size_t i = 0; i < nd; i++) {
		if (s[i] < '0' || s[i] > '9')
			return true; /* a fraction or an exponent: a double, or malformed */
	}
	while (nd > 1 && s[0] == '0') {
		s++;
		nd--;
	}
	if (nd != nl)
		return nd < nl;
	return memcmp(s, limit, nl) <= 0;
}

/*
 * json-c accepts a few things RFC 8259 doesn't, even in strict mode:
 * single-quoted strings and raw control characters inside strings; and it
 * changes integer literals beyond the 64-bit range into INT64_MIN or
 * UINT64_MAX. This scan refuses them; returns the offending offset (*why
 * says what is wrong there) or len when clean.
 */
static size_t jsonu_rfc_scan(const char *data, size_t len, const char **why)
{
	bool in_string = false, escaped = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)data[i];

		if (in_string) {
			if (escaped) {
				escaped = false;
			} else if (c == '\\') {
				escaped = true;
			} else if (c == '"') {
				in_string = false;
			} else if (c < 0x20) {
				*why = "control character inside a string";
				return i;
			}
		} else if (c == '"') {
			in_string = true;
		} else if (c == '\'') {
			*why = "strings take double quotes";
			return i;
		} else if (c == '-' || (c >= '0' && c <= '9')) {
			size_t end = i;

			while (end < len && data[end] != '\0' &&
			       strchr("0123456789+-.eE", data[end]) != NULL)
				end++;
			if (!jsonu_int_in_range(data + i, end - i)) {
				*why = "integer out of range (64 bits)";
				return i;
			}
			i = end - 1;
		}
	}
	return len;
}

enum rcs_err jsonu_parse(const char *data, size_t len, int max_depth, json_object **out,
			 struct jsonu_err *e)
{
	size_t bad;
	const char *why = "";

	json_tokener *tok = NULL;
	json_object *obj = NULL;
	enum json_tokener_error jerr;
	enum rcs_err err = RCS_ERR_INVAL;

	*out = NULL;
	if (len == 0) {
		jsonu_fail(e, "", "empty body: a JSON value is required");
		goto out;
	}
	if (len > INT32_MAX) {
		err = RCS_ERR_TOOBIG;
		jsonu_fail(e, "", "JSON text too large");
		goto out;
	}
	if (memchr(data, '\0', len) != NULL) {
		jsonu_fail(e, "", "JSON text contains a NUL byte");
		goto out;
	}
	if (!text_utf8_valid(data, len)) {
		jsonu_fail(e, "", "JSON text is not valid UTF-8");
		goto out;
	}
	bad = jsonu_rfc_scan(data, len, &why);
	if (bad < len) {
		jsonu_fail(e, "", "malformed JSON at offset %zu: %s", bad, why);
		goto out;
	}
	tok = json_tokener_new_ex(max_depth);
	if (tok == NULL) {
		err = RCS_ERR_NOMEM;
		jsonu_fail(e, "", "out of memory");
		goto out;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	obj = json_tokener_parse_ex(tok, data, (int)len);
	jerr = json_tokener_get_error(tok);
	if (jerr == json_tokener_continue) {
		/*
		 * a bare number or literal at the top ends only at the end of
		 * input: say so (the value is NULL for null: json-c's null).
		 * Anything else wanting more text is a body cut short: json-c
		 * counts offsets from this last chunk, so name the body's end.
		 */
		obj = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
		if (jerr == json_tokener_success) {
			*out = obj;
			obj = NULL;
			err = RCS_OK;
		} else {
			jsonu_fail(e, "",
				   "truncated JSON text: the body ends at offset %zu in the middle "
				   "of a value",
				   len);
		}
		goto out;
	}
	if (jerr != json_tokener_success) {
		if (jerr == json_tokener_error_depth)
			jsonu_fail(e, "", "JSON nested deeper than %d levels", max_depth);
		else
			jsonu_fail(e, "", "malformed JSON at offset %zu: %s",
				   json_tokener_get_parse_end(tok), json_tokener_error_desc(jerr));
		goto out;
	}
	/* only whitespace may follow the value */
	for (size_t i = json_tokener_get_parse_end(tok); i < len; i++) {
		char c = data[i];
		if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
			jsonu_fail(e, "", "unexpected data after the JSON value at offset %zu", i);
			goto out;
		}
	}
	*out = obj;
	obj = NULL;
	err = RCS_OK;
out:
	if (obj)
		json_object_put(obj);
	if (tok)
		json_tokener_free(tok);
	return err;
}

enum rcs_err jsonu_parse_object(const char *data, size_t len, json_object **out,
				struct jsonu_err *e)
{
	enum rcs_err err = jsonu_parse(data, len, JSONU_MAX_DEPTH, out, e);

	if (err != RCS_OK)
		return err;
	if (!json_object_is_type(*out, json_type_object)) {
		json_object_put(*out);
		*out = NULL;
		return jsonu_fail(e, "", "the body must be a JSON object");
	}
	return RCS_OK;
}

static enum rcs_err jsonu_lookup(json_object *obj, const char *key, bool required,
				 json_object **val, bool *present, struct jsonu_err *e)
{
	json_object *v = NULL;

	if (present)
		*present = false;
	*val = NULL;
	if (obj == NULL || !json_object_object_get_ex(obj, key, &v) || v == NULL) {
		if (required)
			return jsonu_fail(e, key, "'%s' is required", key);
		return RCS_OK;
	}
	if (present)
		*present = true;
	*val = v;
	return RCS_OK;
}

enum rcs_err jsonu_get_string(json_object *obj, const char *key, bool required, size_t max_len,
			      const char **out, bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);
	size_t len;

	if (err != RCS_OK || v == NULL)
		return err;
	if (!json_object_is_type(v, json_type_string))
		return jsonu_fail(e, key, "'%s' must be a string", key);
	len = (size_t)json_object_get_string_len(v);
	if (len > max_len)
		return jsonu_fail(e, key, "'%s' is longer than %zu bytes", key, max_len);
	if (memchr(json_object_get_string(v), '\0', len) != NULL)
		return jsonu_fail(e, key, "'%s' contains a NUL character", key);
	*out = json_object_get_string(v);
	return RCS_OK;
}

enum rcs_err jsonu_get_int(json_object *obj, const char *key, bool required, int64_t min,
			   int64_t max, int64_t *out, bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);
	int64_t i;

	if (err != RCS_OK || v == NULL)
		return err;
	if (!json_object_is_type(v, json_type_int))
		return jsonu_fail(e, key, "'%s' must be an integer", key);
	i = json_object_get_int64(v);
	/* json-c clamps out-of-range values to INT64_MIN/MAX; treat those as too big */
	if (i < min || i > max || i == INT64_MAX || i == INT64_MIN)
		return jsonu_fail(e, key, "'%s' must be between %lld and %lld", key, (long long)min,
				  (long long)max);
	*out = i;
	return RCS_OK;
}

enum rcs_err jsonu_get_bool(json_object *obj, const char *key, bool required, bool *out,
			    bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);

	if (err != RCS_OK || v == NULL)
		return err;
	if (!json_object_is_type(v, json_type_boolean))
		return jsonu_fail(e, key, "'%s' must be a boolean", key);
	*out = json_object_get_boolean(v);
	return RCS_OK;
}

enum rcs_err jsonu_get_boolish(json_object *obj, const char *key, bool required, bool *out,
			       bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);

	if (err != RCS_OK || v == NULL)
		return err;
	if (json_object_is_type(v, json_type_boolean)) {
		*out = json_object_get_boolean(v);
		return RCS_OK;
	}
	if (json_object_is_type(v, json_type_string)) {
		const char *s = json_object_get_string(v);
		if (strcmp(s, "true") == 0) {
			*out = true;
			return RCS_OK;
		}
		if (strcmp(s, "false") == 0) {
			*out = false;
			return RCS_OK;
		}
	}
	return jsonu_fail(e, key, "'%s' must be true or false (boolean or string)", key);
}

enum rcs_err jsonu_get_object(json_object *obj, const char *key, bool required, json_object **out,
			      bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);

	if (err != RCS_OK || v == NULL)
		return err;
	if (!json_object_is_type(v, json_type_object))
		return jsonu_fail(e, key, "'%s' must be an object", key);
	*out = v;
	return RCS_OK;
}

enum rcs_err jsonu_get_array(json_object *obj, const char *key, bool required, size_t max_items,
			     json_object **out, bool *present, struct jsonu_err *e)
{
	json_object *v;
	enum rcs_err err = jsonu_lookup(obj, key, required, &v, present, e);

	if (err != RCS_OK || v == NULL)
		return err;
	if (!json_object_is_type(v, json_type_array))
		return jsonu_fail(e, key, "'%s' must be an array", key);
	if (json_object_array_length(v) > max_items)
		return jsonu_fail(e, key, "'%s' has more than %zu items", key, max_items);
	*out = v;
	return RCS_OK;
}

enum rcs_err jsonu_get_string_array(json_object *obj, const char *key, bool required,
				    size_t max_items, size_t max_len, json_object **out,
				    bool *present, struct jsonu_err *e)
{
	json_object *arr = NULL;
	enum rcs_err err = jsonu_get_array(obj, key, required, max_items, &arr, present, e);

	if (err != RCS_OK || arr == NULL)
		return err;
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *it = json_object_array_get_idx(arr, i);
		char field[128];
		size_t len;

		snprintf(field, sizeof(field), "%s[%zu]", key, i);
		if (!json_object_is_type(it, json_type_string))
			return jsonu_fail(e, field, "'%s' must be a string", field);
		len = (size_t)json_object_get_string_len(it);
		if (len > max_len)
			return jsonu_fail(e, field, "'%s' is longer than %zu bytes", field,
					  max_len);
		if (memchr(json_object_get_string(it), '\0', len) != NULL)
			return jsonu_fail(e, field, "'%s' contains a NUL character", field);
	}
	*out = arr;
	return RCS_OK;
}

enum rcs_err jsonu_check_keys(json_object *obj, const char *const *allowed, struct jsonu_err *e)
{
	json_object_object_foreach(obj, key, val)
	{
		bool ok = false;
		(void)val;
		for (size_t i = 0; allowed[i] != NULL; i++) {
			if (strcmp(allowed[i], key) == 0) {
				ok = true;
				break;
			}
		}
		if (!ok)
			return jsonu_fail(e, key, "unknown field '%s'", key);
	}
	return RCS_OK;
}

const char *jsonu_dump(json_object *obj, size_t *len)
{
	size_t n = 0;
	const char *s = json_object_to_json_string_length(
	    obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);

	if (len)
		*len = n;
	return s;
}

json_object *jsonu_new_string_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

json_object *jsonu_member(json_object *o, const char *key)
{
	json_object *v = NULL;

	if (o == NULL || !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

const char *jsonu_member_str(json_object *o, const char *key)
{
	json_object *v = jsonu_member(o, key);

	return v ? json_object_get_string(v) : NULL;
}

bool jsonu_text_same(const char *a, const char *b)
{
	json_object *ja = NULL, *jb = NULL;
	struct jsonu_err e;
	bool same;

	if (a == NULL || b == NULL || strcmp(a, b) == 0)
		return a == b || (a && b);
	same = jsonu_parse(a, strlen(a), JSONU_MAX_DEPTH, &ja, &e) == RCS_OK &&
	       jsonu_parse(b, strlen(b), JSONU_MAX_DEPTH, &jb, &e) == RCS_OK &&
	       json_object_equal(ja, jb);
	json_object_put(ja);
	json_object_put(jb);
	return same;
}
