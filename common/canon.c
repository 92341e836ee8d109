/*
 * canon.c - RFC 8785 (JCS) canonical JSON over a json-c tree.
 *
 * Three parts: strings (validated UTF-8, minimal escapes), numbers (the
 * ECMAScript Number::toString form, built from the shortest round-trip
 * decimal digits that glibc's correctly rounded printf/strtod give us) and
 * objects (members sorted by the UTF-16 code units of their names).
 */
#include "canon.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

/* Deeper trees are refused; the parsers stop at JSONU_MAX_DEPTH (32) long before. */
#define CANON_MAX_DEPTH 128
/* Integers up to this magnitude are exact doubles and print as themselves. */
#define CANON_EXACT_INT (UINT64_C(1) << 53)

static enum rcs_err canon_value(json_object *v, struct buf *out, int depth);

/*
 * Maps a code point to a weight whose order is the order of its UTF-16
 * encoding: code points above U+FFFF become surrogate pairs (0xD800..) and so
 * sort before U+E000..U+FFFF. Valid UTF-8 holds no lone surrogates, so the
 * first differing code unit always lies within the first differing code point.
 */
static uint32_t utf16_weight(uint32_t cp)
{
	if (cp < 0xd800)
		return cp;
	if (cp >= 0x10000)
		return 0xd800 + (cp - 0x10000); /* 0xD800 .. 0x10D7FF */
	return cp + 0x100000;                   /* U+E000..U+FFFF -> 0x10E000 .. 0x10FFFF */
}

/* qsort comparator over validated UTF-8 member names. */
static int key_cmp(const void *pa, const void *pb)
{
	const unsigned char *a = *(const unsigned char *const *)pa;
	const unsigned char *b = *(const unsigned char *const *)pb;
	size_t na = strlen((const char *)a), nb = strlen((const char *)b);
	size_t ia = 0, ib = 0;

	while (ia < na && ib < nb) {
		uint32_t ca = 0, cb = 0;

		/* names were validated before sorting; a failure cannot happen here */
		if (!text_utf8_next(a, na, &ia, &ca) || !text_utf8_next(b, nb, &ib, &cb))
			return 0;
		if (ca != cb)
			return utf16_weight(ca) < utf16_weight(cb) ? -1 : 1;
	}
	if (ia < na)
		return 1;
	if (ib < nb)
		return -1;
	return 0;
}

/* Writes s (n bytes of UTF-8) as a JCS string literal. */
static enum rcs_err canon_string(const char *s, size_t n, struct buf *out)
{
	enum rcs_err err;
	size_t run = 0; /* start of the pending literal run */

	if (!text_utf8_valid(s, n))
		return RCS_ERR_INVAL;
	err = buf_append(out, "\"", 1);
	for (size_t i = 0; i < n && err == RCS_OK; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[7]; /* the escape (at most 6 bytes) and the NUL text_hex_encode writes */
		size_t elen = 2;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		esc[0] = '\\';
		switch (c) {
		case '"':
			esc[1] = '"';
			break;
		case '\\':
			esc[1] = '\\';
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		default:
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			text_hex_encode(&c, 1, esc + 4); /* its NUL lands past elen */
			elen = 6;
			break;
		}
		err = buf_append(out, s + run, i - run);
		if (err == RCS_OK)
			err = buf_append(out, esc, elen);
		run = i + 1;
	}
	if (err == RCS_OK)
		err = buf_append(out, s + run, n - run);
	if (err == RCS_OK)
		err = buf_append(out, "\"", 1);
	return err;
}

/*
 * tmp holds "%.*e" output ("d.ddde+XX"). Writes into up the decimal one unit
 * higher in the last digit, with the same number of digits ("9.99e+01" ->
 * "1.00e+02").
 */
static void next_up(const char *tmp, char *up, size_t up_cap)
{
	const char *e = strchr(tmp, 'e');
	size_t mant = (size_t)(e - tmp);
	long x = strtol(e + 1, NULL, 10);
	size_t pos = mant;
	bool carry = true;

	memcpy(up, tmp, mant);
	while (carry && pos > 0) {
		pos--;
		if (up[pos] < '0' || up[pos] > '9') /* the radix character */
			continue;
		if (up[pos] != '9') {
			up[pos]++;
			carry = false;
		} else {
			up[pos] = '0';
		}
	}
	if (carry) {
		up[0] = '1';
		x++;
	}
	snprintf(up + mant, up_cap - mant, "e%ld", x);
}

/*
 * Shortest decimal digits that read back as d (d finite and > 0), with the
 * closest such value when several have that length. On return digits holds
 * k significant digits (no dot, no trailing zeros) and *exp10 the decimal
 * exponent of the first one: d ~= d.ddd * 10^(*exp10).
 */
static void shortest_digits(double d, char digits[24], int *k, int *exp10)
{
	char tmp[40], up[40];
	int p;

	for (p = 1; p < 17; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, d);
		if (strtod(tmp, NULL) == d)
			break;
		/*
		 * printf gives the nearest p-digit decimal. When d is a power of
		 * two the gap below it is half the gap above, so the nearest may
		 * fall outside while the next one up still reads back as d.
		 */
		next_up(tmp, up, sizeof(up));
		if (strtod(up, NULL) == d) {
			memcpy(tmp, up, sizeof(tmp));
			break;
		}
	}
	if (p == 17) /* 17 significant digits always round-trip */
		snprintf(tmp, sizeof(tmp), "%.16e", d);

	*k = 0;
	for (const char *c = tmp; *c != 'e'; c++) {
		if (*c >= '0' && *c <= '9') /* skip the radix character, whatever the locale */
			digits[(*k)++] = *c;
	}
	while (*k > 1 && digits[*k - 1] == '0')
		(*k)--;
	digits[*k] = '\0';
	*exp10 = (int)strtol(strchr(tmp, 'e') + 1, NULL, 10);
}

/* ECMAScript Number::toString(d) for a finite d. */
static enum rcs_err canon_double(double d, struct buf *out)
{
	char digits[24];
	int k, n, e;
	enum rcs_err err = RCS_OK;

	if (!isfinite(d))
		return RCS_ERR_INVAL;
	if (d == 0) /* also -0 */
		return buf_append(out, "0", 1);
	if (d < 0) {
		err = buf_append(out, "-", 1);
		d = -d;
	}
	if (err != RCS_OK)
		return err;
	shortest_digits(d, digits, &k, &e);
	n = e + 1; /* d = 0.<digits> * 10^n, the n of ECMA-262 */

	if (k <= n && n <= 21) {
		err = buf_append(out, digits, (size_t)k);
		for (int i = 0; i < n - k && err == RCS_OK; i++)
			err = buf_append(out, "0", 1);
	} else if (0 < n && n <= 21) {
		err = buf_appendf(out, "%.*s.%s", n, digits, digits + n);
	} else if (-6 < n && n <= 0) {
		err = buf_append(out, "0.", 2);
		for (int i = 0; i < -n && err == RCS_OK; i++)
			err = buf_append(out, "0", 1);
		if (err == RCS_OK)
			err = buf_append(out, digits, (size_t)k);
	} else if (k == 1) {
		err = buf_appendf(out, "%ce%c%d", digits[0], n - 1 < 0 ? '-' : '+', abs(n - 1));
	} else {
		err = buf_appendf(out, "%c.%se%c%d", digits[0], digits + 1, n - 1 < 0 ? '-' : '+',
				  abs(n - 1));
	}
	return err;
}

/*
 * A json-c integer: int64, or uint64 above INT64_MAX. ECMAScript sees a
 * double, so exact up to 2^53 and rounded (to nearest, like a JSON parser
 * would) beyond.
 */
static enum rcs_err canon_int(json_object *v, struct buf *out)
{
	int64_t i = json_object_get_int64(v);
	uint64_t mag;

	if (i < 0) {
		mag = (uint64_t)0 - (uint64_t)i;
		if (mag <= CANON_EXACT_INT)
			return buf_appendf(out, "%lld", (long long)i);
		return canon_double((double)i, out);
	}
	/* json-c clamps a uint64 above INT64_MAX to INT64_MAX in get_int64 */
	mag = json_object_get_uint64(v);
	if (mag <= CANON_EXACT_INT)
		return buf_appendf(out, "%llu", (unsigned long long)mag);
	return canon_double((double)mag, out);
}

static enum rcs_err canon_array(json_object *v, struct buf *out, int depth)
{
	size_t n = json_object_array_length(v);
	enum rcs_err err = buf_append(out, "[", 1);

	for (size_t i = 0; i < n && err == RCS_OK; i++) {
		if (i > 0)
			err = buf_append(out, ",", 1);
		if (err == RCS_OK)
			err = canon_value(json_object_array_get_idx(v, i), out, depth + 1);
	}
	if (err == RCS_OK)
		err = buf_append(out, "]", 1);
	return err;
}

static enum rcs_err canon_object(json_object *v, struct buf *out, int depth)
{
	size_t n = (size_t)json_object_object_length(v), i = 0;
	const char **keys = NULL;
	enum rcs_err err = RCS_OK;

	if (n == 0)
		return buf_append(out, "{}", 2);
	keys = calloc(n, sizeof(*keys));
	if (keys == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	json_object_object_foreach(v, key, val)
	{
		(void)val;
		if (i == n || !text_utf8_valid(key, strlen(key))) {
			err = RCS_ERR_INVAL;
			goto out;
		}
		keys[i++] = key;
	}
	n = i;
	qsort(keys, n, sizeof(*keys), key_cmp);

	err = buf_append(out, "{", 1);
	for (i = 0; i < n && err == RCS_OK; i++) {
		json_object *member = NULL;

		if (i > 0)
			err = buf_append(out, ",", 1);
		if (err == RCS_OK)
			err = canon_string(keys[i], strlen(keys[i]), out);
		if (err == RCS_OK)
			err = buf_append(out, ":", 1);
		if (err == RCS_OK) {
			json_object_object_get_ex(v, keys[i], &member);
			err = canon_value(member, out, depth + 1);
		}
	}
	if (err == RCS_OK)
		err = buf_append(out, "}", 1);
out:
	free(keys);
	return err;
}

static enum rcs_err canon_value(json_object *v, struct buf *out, int depth)
{
	if (depth > CANON_MAX_DEPTH)
		return RCS_ERR_TOOBIG;
	switch (json_object_get_type(v)) {
	case json_type_null:
		return buf_append(out, "null", 4);
	case json_type_boolean:
		return json_object_get_boolean(v) ? buf_append(out, "true", 4)
						  : buf_append(out, "false", 5);
	case json_type_int:
		return canon_int(v, out);
	case json_type_double:
		return canon_double(json_object_get_double(v), out);
	case json_type_string:
		return canon_string(json_object_get_string(v),
				    (size_t)json_object_get_string_len(v), out);
	case json_type_array:
		return canon_array(v, out, depth);
	case json_type_object:
		return canon_object(v, out, depth);
	}
	return RCS_ERR_INTERNAL;
}

enum rcs_err canon_json(json_object *v, struct buf *out)
{
	size_t start = out->len;
	enum rcs_err err = canon_value(v, out, 0);

	if (err != RCS_OK && out->data != NULL) { /* leave out as it was */
		out->len = start;
		out->data[start] = '\0';
	}
	return err;
}
