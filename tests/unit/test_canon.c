/*
 * test_canon.c - RFC 8785 (JCS) canonical JSON: the RFC's samples, its
 * Appendix B number table, key order by UTF-16 code units, escapes, limits.
 *
 * The vectors directory comes from the RCS_VECTORS_DIR compile definition,
 * or the RCS_VECTORS_DIR environment variable when set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "canon.h"
#include "jsonu.h"

#ifndef RCS_VECTORS_DIR
#define RCS_VECTORS_DIR "tests/vectors"
#endif

static const char *vectors_dir(void)
{
	const char *d = getenv("RCS_VECTORS_DIR");

	return d != NULL && *d != '\0' ? d : RCS_VECTORS_DIR;
}

/* Reads a vector file whole; the caller frees. */
static char *read_vector(const char *name, size_t *len)
{
	char path[1024];
	FILE *f;
	char *data;
	long n;

	snprintf(path, sizeof(path), "%s/%s", vectors_dir(), name);
	f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("cannot open vector %s", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	data = malloc((size_t)n + 1);
	assert_non_null(data);
	assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
	data[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return data;
}

static json_object *parse(const char *text)
{
	json_object *v = NULL;
	struct jsonu_err e;

	if (jsonu_parse(text, strlen(text), JSONU_MAX_DEPTH, &v, &e) != RCS_OK)
		fail_msg("bad test JSON %s: %s", text, e.message);
	return v;
}

/* Canonical form of v (consumed) must equal want. */
static void expect_canon(json_object *v, const char *want)
{
	struct buf b;

	buf_init(&b, 1 << 20);
	assert_int_equal(canon_json(v, &b), RCS_OK);
	assert_non_null(b.data);
	assert_int_equal(b.len, strlen(want));
	assert_string_equal(b.data, want);
	buf_free(&b);
	json_object_put(v);
}

static void expect_canon_text(const char *json, const char *want)
{
	expect_canon(parse(json), want);
}

static void expect_canon_err(json_object *v, enum rcs_err want)
{
	struct buf b;

	buf_init(&b, 1 << 20);
	assert_int_equal(buf_append(&b, "prefix", 6), RCS_OK);
	assert_int_equal(canon_json(v, &b), want);
	/* the buffer is left as it was */
	assert_int_equal(b.len, 6);
	assert_string_equal(b.data, "prefix");
	buf_free(&b);
	json_object_put(v);
}

static json_object *double_from_bits(uint64_t bits)
{
	double d;

	memcpy(&d, &bits, sizeof(d));
	return json_object_new_double(d);
}

static void expect_vector(const char *base)
{
	char name[256];
	char *in, *want;
	size_t in_len, want_len;
	json_object *v = NULL;
	struct jsonu_err e;
	struct buf b;

	snprintf(name, sizeof(name), "%s.json", base);
	in = read_vector(name, &in_len);
	snprintf(name, sizeof(name), "%s.txt", base);
	want = read_vector(name, &want_len);
	assert_int_equal(jsonu_parse(in, in_len, JSONU_MAX_DEPTH, &v, &e), RCS_OK);
	buf_init(&b, 1 << 20);
	assert_int_equal(canon_json(v, &b), RCS_OK);
	assert_int_equal(b.len, want_len);
	assert_memory_equal(b.data, want, want_len);
	buf_free(&b);
	json_object_put(v);
	free(in);
	free(want);
}

/* RFC 8785 section 3.2.2: the sample with literals, numbers and a string. */
static void test_rfc_sample_values(void **state)
{
	(void)state;
	expect_canon_text(
	    "{\n  \"numbers\": [333333333.33333329, 1E30, 4.50,\n"
	    "              2e-3, 0.000000000000000000000000001],\n"
	    "  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n"
	    "  \"literals\": [null, true, false]\n}",
	    "{\"literals\":[null,true,false],"
	    "\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
	    "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
	expect_vector("canon-rfc8785-values");
}

/* RFC 8785 section 3.2.3: member names sorted by UTF-16 code units. */
static void test_rfc_sample_sorting(void **state)
{
	(void)state;
	expect_canon_text(
	    "{\"\\u20ac\": \"Euro Sign\", \"\\r\": \"Carriage Return\","
	    " \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\", \"1\": \"One\","
	    " \"\\ud83d\\ude00\": \"Emoji: Grinning Face\", \"\\u0080\": \"Control\","
	    " \"\\u00f6\": \"Latin Small Letter O With Diaeresis\"}",
	    "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\","
	    "\"\xc3\xb6\":\"Latin Small Letter O With Diaeresis\","
	    "\"\xe2\x82\xac\":\"Euro Sign\",\"\xf0\x9f\x98\x80\":\"Emoji: Grinning Face\","
	    "\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}");
	expect_vector("canon-rfc8785-sorting");
}

/* Byte order and UTF-16 order differ: U+10000 (a surrogate pair) < U+E000..U+FFFF. */
static void test_sort_utf16_vs_bytes(void **state)
{
	(void)state;
	expect_canon_text("{\"\\uffff\":1,\"\\ud800\\udc00\":2,\"\\ue000\":3,\"\\ud7ff\":4}",
			  "{\"\xed\x9f\xbf\":4,\"\xf0\x90\x80\x80\":2,\"\xee\x80\x80\":3,"
			  "\"\xef\xbf\xbf\":1}");
	/* prefixes first, empty name first of all, case-sensitive ASCII order */
	expect_canon_text("{\"b\":1,\"ab\":2,\"a\":3,\"\":4,\"B\":5,\"a0\":6}",
			  "{\"\":4,\"B\":5,\"a\":3,\"a0\":6,\"ab\":2,\"b\":1}");
	/* nested objects are sorted too, arrays keep their order */
	expect_canon_text("{\"z\":{\"y\":[3,1,2],\"x\":{}},\"a\":[]}",
			  "{\"a\":[],\"z\":{\"x\":{},\"y\":[3,1,2]}}");
}

/* The "numbers" of the RFC's sample, one by one, and the other cases asked for. */
static void test_numbers_sample(void **state)
{
	static const struct {
		double d;
		const char *want;
	} cases[] = {
	    {1e30, "1e+30"},
	    {4.50, "4.5"},
	    {2e-3, "0.002"},
	    {1e-27, "1e-27"},
	    {333333333.33333329, "333333333.3333333"},
	    {-0.0, "0"},
	    {0.0, "0"},
	    {1e21, "1e+21"},
	    {1e20, "100000000000000000000"},
	    {1e-7, "1e-7"},
	    {1e-6, "0.000001"},
	    {123e-20, "1.23e-18"},
	    {0.1, "0.1"},
	    {0.1 + 0.2, "0.30000000000000004"},
	    {100.0, "100"},
	    {-1.5, "-1.5"},
	    {123.456, "123.456"},
	    {-1e-7, "-1e-7"},
	    {1.5e300, "1.5e+300"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_canon(json_object_new_double(cases[i].d), cases[i].want);
	/* parsed text takes the same path */
	expect_canon_text("[1E30,4.50,2e-3,1e-27,333333333.33333329,-0,-0.0,1.0,1e2]",
			  "[1e+30,4.5,0.002,1e-27,333333333.3333333,0,0,1,100]");
}

/* RFC 8785 Appendix B: IEEE 754 bit patterns and their ECMAScript strings. */
static void test_numbers_appendix_b(void **state)
{
	static const struct {
		uint64_t bits;
		const char *want;
	} cases[] = {
	    {0x0000000000000000, "0"},
	    {0x8000000000000000, "0"},
	    {0x0000000000000001, "5e-324"},
	    {0x8000000000000001, "-5e-324"},
	    {0x7fefffffffffffff, "1.7976931348623157e+308"},
	    {0xffefffffffffffff, "-1.7976931348623157e+308"},
	    {0x4340000000000000, "9007199254740992"},
	    {0xc340000000000000, "-9007199254740992"},
	    {0x4430000000000000, "295147905179352830000"},
	    {0x44b52d02c7e14af5, "9.999999999999997e+22"},
	    {0x44b52d02c7e14af6, "1e+23"},
	    {0x44b52d02c7e14af7, "1.0000000000000001e+23"},
	    {0x444b1ae4d6e2ef4e, "999999999999999700000"},
	    {0x444b1ae4d6e2ef4f, "999999999999999900000"},
	    {0x444b1ae4d6e2ef50, "1e+21"},
	    {0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	    {0x3eb0c6f7a0b5ed8d, "0.000001"},
	    {0x41b3de4355555553, "333333333.3333332"},
	    {0x41b3de4355555554, "333333333.33333325"},
	    {0x41b3de4355555555, "333333333.3333333"},
	    {0x41b3de4355555556, "333333333.3333334"},
	    {0x41b3de4355555557, "333333333.33333343"},
	    {0xbecbf647612f3696, "-0.0000033333333333333333"},
	    {0x43143ff3c1cb0959, "1424953923781206.2"},
	    /*
	     * 2^-1017 and 2^-1007: powers of two, where the nearest 16-digit
	     * decimal does not read back but the next one up does, so the
	     * shortest form has 16 digits, not 17 (checked against node).
	     */
	    {0x0060000000000000, "7.120236347223045e-307"},
	    {0x0100000000000000, "7.291122019556398e-304"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_canon(double_from_bits(cases[i].bits), cases[i].want);
}

static void test_numbers_nonfinite(void **state)
{
	(void)state;
	expect_canon_err(double_from_bits(0x7fffffffffffffff), RCS_ERR_INVAL); /* NaN */
	expect_canon_err(double_from_bits(0x7ff0000000000000), RCS_ERR_INVAL); /* +Inf */
	expect_canon_err(double_from_bits(0xfff0000000000000), RCS_ERR_INVAL); /* -Inf */
	/* also deep inside a tree */
	{
		json_object *o = parse("{\"a\":[1,{\"b\":2}]}");
		json_object *arr = json_object_object_get(o, "a");
		json_object_object_add(json_object_array_get_idx(arr, 1), "c",
				       double_from_bits(0x7ff0000000000000));
		expect_canon_err(o, RCS_ERR_INVAL);
	}
}

/* json-c integers: exact up to 2^53, beyond that the double ECMAScript reads. */
static void test_numbers_integers(void **state)
{
	(void)state;
	expect_canon(json_object_new_int(0), "0");
	expect_canon(json_object_new_int(-42), "-42");
	expect_canon(json_object_new_int64(9007199254740992LL), "9007199254740992");
	expect_canon(json_object_new_int64(-9007199254740992LL), "-9007199254740992");
	expect_canon(json_object_new_int64(9007199254740993LL), "9007199254740992");
	expect_canon(json_object_new_int64(-9007199254740993LL), "-9007199254740992");
	expect_canon(json_object_new_int64(INT64_MAX), "9223372036854776000");
	expect_canon(json_object_new_int64(INT64_MIN), "-9223372036854776000");
	expect_canon(json_object_new_uint64(UINT64_MAX), "18446744073709552000");
	expect_canon(json_object_new_int64(123456789012345678LL), "123456789012345680");
	expect_canon_text("[9007199254740993,18446744073709551615,-9223372036854775808]",
			  "[9007199254740992,18446744073709552000,-9223372036854776000]");
}

static void test_strings_escapes(void **state)
{
	static const char *const ctl[32] = {
	    "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007",
	    "\\b",     "\\t",     "\\n",     "\\u000b", "\\f",     "\\r",     "\\u000e", "\\u000f",
	    "\\u0010", "\\u0011", "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017",
	    "\\u0018", "\\u0019", "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
	};

	(void)state;
	for (int c = 0; c < 32; c++) {
		char in[1] = {(char)c};
		char want[16];

		snprintf(want, sizeof(want), "\"%s\"", ctl[c]);
		expect_canon(json_object_new_string_len(in, 1), want);
	}
	expect_canon(json_object_new_string("\"\\"), "\"\\\"\\\\\"");
	/* solidus, DEL, U+2028/2029, non-ASCII: all literal */
	expect_canon(json_object_new_string("/\x7f\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9"),
		     "\"/\x7f\xe2\x80\xa8\xe2\x80\xa9\xc3\xa9\"");
	/* escapes in the input come out in their minimal form */
	expect_canon_text("[\"\\u0041\\u00e9\\u001F\\/\\uD83D\\uDE00\"]",
			  "[\"A\xc3\xa9\\u001f/\xf0\x9f\x98\x80\"]");
	/* an embedded NUL survives */
	expect_canon(json_object_new_string_len("a\0b", 3), "\"a\\u0000b\"");
	/* names are escaped like values */
	expect_canon_text("{\"a\\nb\":\"\\t\"}", "{\"a\\nb\":\"\\t\"}");
}

static void test_strings_invalid_utf8(void **state)
{
	static const char *const bad[] = {
	    "\xff",         "\xc3",
	    "\xc0\xaf",                                              /* overlong '/' */
	    "\xed\xa0\x80", /* CESU surrogate */ "\xf4\x90\x80\x80", /* > U+10FFFF */
	    "ab\x80",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_object *o = json_object_new_object();

		expect_canon_err(json_object_new_string(bad[i]), RCS_ERR_INVAL);
		json_object_object_add(o, bad[i], json_object_new_int(1));
		expect_canon_err(o, RCS_ERR_INVAL);
	}
}

static void test_literals_and_null(void **state)
{
	struct buf b;

	(void)state;
	expect_canon_text("[true,false,null,{},[],\"\"]", "[true,false,null,{},[],\"\"]");
	expect_canon_text(" { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ", "{\"a\":[1,2],\"b\":{}}");
	/* a NULL value is JSON null, appended after what is there */
	buf_init(&b, 64);
	assert_int_equal(buf_append(&b, "x=", 2), RCS_OK);
	assert_int_equal(canon_json(NULL, &b), RCS_OK);
	assert_string_equal(b.data, "x=null");
	buf_free(&b);
}

/* Past the ceiling: RCS_ERR_TOOBIG and the buffer as it was; exactly at it: fine. */
static void test_ceiling(void **state)
{
	const char *want = "{\"a\":[1,2,3],\"b\":\"xyz\"}";
	size_t n = strlen(want);
	json_object *v = parse("{\"b\":\"xyz\",\"a\":[1,2,3]}");
	struct buf b;

	(void)state;
	for (size_t max = 0; max < n; max++) {
		buf_init(&b, max);
		assert_int_equal(canon_json(v, &b), RCS_ERR_TOOBIG);
		assert_int_equal(b.len, 0);
		assert_true(b.data == NULL || b.data[0] == '\0');
		buf_free(&b);
	}
	buf_init(&b, n);
	assert_int_equal(canon_json(v, &b), RCS_OK);
	assert_string_equal(b.data, want);
	buf_free(&b);
	json_object_put(v);
}

/* A programmatically built tree deeper than the limit is refused, not recursed. */
static void test_depth_limit(void **state)
{
	json_object *root = json_object_new_array(), *cur = root;

	(void)state;
	for (int i = 0; i < 200; i++) {
		json_object *next = json_object_new_array();
		json_object_array_add(cur, next);
		cur = next;
	}
	expect_canon_err(root, RCS_ERR_TOOBIG);

	root = json_object_new_array();
	cur = root;
	for (int i = 0; i < 100; i++) {
		json_object *next = json_object_new_array();
		json_object_array_add(cur, next);
		cur = next;
	}
	{
		struct buf b;

		buf_init(&b, 1024);
		assert_int_equal(canon_json(root, &b), RCS_OK);
		assert_int_equal(b.len, 202);
		buf_free(&b);
	}
	json_object_put(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rfc_sample_values),
	    cmocka_unit_test(test_rfc_sample_sorting),
	    cmocka_unit_test(test_sort_utf16_vs_bytes),
	    cmocka_unit_test(test_numbers_sample),
	    cmocka_unit_test(test_numbers_appendix_b),
	    cmocka_unit_test(test_numbers_nonfinite),
	    cmocka_unit_test(test_numbers_integers),
	    cmocka_unit_test(test_strings_escapes),
	    cmocka_unit_test(test_strings_invalid_utf8),
	    cmocka_unit_test(test_literals_and_null),
	    cmocka_unit_test(test_ceiling),
	    cmocka_unit_test(test_depth_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
