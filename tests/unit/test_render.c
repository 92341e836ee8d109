/* Unit tests for render.c's JSON writer: every output parses back to what was written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "render.h"
#include "store.h"

static json_object *parse(const struct buf *b)
{
	json_object *o = json_tokener_parse(b->data);

	assert_non_null(o);
	return o;
}

/* {[lead member,] key: s, "after": 1} parses back to key and s, with no raw control byte in
 * the text (every one escaped). */
static void assert_member_round_trip(const char *key, const char *s, bool lead)
{
	struct render w;
	struct buf b;
	json_object *o;

	buf_init(&b, 4096);
	render_init(&w, &b);
	render_obj_open(&w);
	if (lead)
		render_kint(&w, "n", 1);
	render_kstr(&w, key, s);
	render_kint(&w, "after", 1);
	render_obj_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	for (size_t i = 0; i < b.len; i++)
		assert_true((unsigned char)b.data[i] >= 0x20);
	o = parse(&b);
	assert_string_equal(json_object_get_string(json_object_object_get(o, key)), s);
	assert_int_equal(json_object_get_int(json_object_object_get(o, "after")), 1);
	json_object_put(o);
	buf_free(&b);
}

static void test_escapes_round_trip(void **state)
{
	const char nasty[] = "q\"b\\s/\n\r\t\b\f\x01\x1f é ✓";
	struct render w;
	struct buf b;
	json_object *o;

	(void)state;
	buf_init(&b, 4096);
	render_init(&w, &b);
	render_obj_open(&w);
	render_kstr(&w, "s", nasty);
	render_kstr(&w, "k\"ey", "v");
	render_kstr(&w, "null", NULL);
	render_obj_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	o = parse(&b);
	assert_string_equal(json_object_get_string(json_object_object_get(o, "s")), nasty);
	assert_string_equal(json_object_get_string(json_object_object_get(o, "k\"ey")), "v");
	assert_true(json_object_object_get_ex(o, "null", NULL));
	assert_null(json_object_object_get(o, "null"));
	json_object_put(o);
	buf_free(&b);
}

static void test_nesting_and_values(void **state)
{
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 4096);
	render_init(&w, &b);
	render_obj_open(&w);
	render_kint(&w, "i", -9223372036854775807LL - 1);
	render_kint_opt(&w, "unset", 0);
	render_kint_opt(&w, "set", 7);
	render_kbool(&w, "t", true);
	render_kraw(&w, "raw", "{\"a\":[1,2]}");
	render_kraw(&w, "rawnull", NULL);
	render_key(&w, "arr");
	render_arr_open(&w);
	render_int(&w, 1);
	render_obj_open(&w);
	render_obj_close(&w);
	render_arr_open(&w);
	render_arr_close(&w);
	render_str(&w, "x");
	render_arr_close(&w);
	render_obj_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(b.data, "{\"i\":-9223372036854775808,\"unset\":null,\"set\":7,"
				    "\"t\":true,\"raw\":{\"a\":[1,2]},\"rawnull\":null,"
				    "\"arr\":[1,{},[],\"x\"]}");
	buf_free(&b);
}

static void test_page(void **state)
{
	struct store_page_info pg = {.page = 2, .per_page = 10, .total = 21};
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 4096);
	render_init(&w, &b);
	render_page_open(&w, &pg);
	render_int(&w, 1);
	render_int(&w, 2);
	render_page_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(b.data, "{\"page\":2,\"per_page\":10,\"total_pages\":3,"
				    "\"total_items\":21,\"items\":[1,2]}");
	buf_free(&b);
}

/* The buffer's ceiling fails the value once, and nothing after that is written. */
static void test_sticky_error(void **state)
{
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 16);
	render_init(&w, &b);
	render_obj_open(&w);
	render_kstr(&w, "long", "more than sixteen bytes");
	render_kint(&w, "n", 1);
	render_obj_close(&w);
	assert_int_equal(render_end(&w), RCS_ERR_TOOBIG);
	assert_true(b.len <= 16);
	buf_free(&b);
}

/* Each kind of value and key after a comma: written with the value, escaped or not. */
static void test_commas_before_every_kind(void **state)
{
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 4096);
	render_init(&w, &b);
	render_obj_open(&w);
	render_kint(&w, "a", 0);
	render_kstr(&w, "q\"k", "x\ty");
	render_key(&w, "l");
	render_arr_open(&w);
	render_null(&w);
	render_int(&w, -12);
	render_str(&w, "p");
	render_str(&w, "e\"");
	render_str(&w, NULL);
	render_raw(&w, "[]");
	render_raw(&w, "");
	render_bool(&w, false);
	render_int(&w, 9223372036854775807LL);
	render_arr_close(&w);
	render_kint_opt(&w, "z", 0);
	render_obj_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(b.data,
			    "{\"a\":0,\"q\\\"k\":\"x\\ty\",\"l\":[null,-12,\"p\","
			    "\"e\\\"\",null,[],null,false,9223372036854775807],\"z\":null}");
	buf_free(&b);
}

/* Strings and keys around the length written in one piece (128 bytes), plain or with an
 * escape at either end: the same text either way. */
static void test_short_and_long_strings(void **state)
{
	static const size_t lens[] = {0, 1, 127, 128, 129, 300};
	char s[320];

	(void)state;
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		for (int esc = 0; esc < 3; esc++) {
			size_t n = lens[k];

			memset(s, 'a', n);
			s[n] = '\0';
			if (n > 0 && esc == 1)
				s[0] = '"';
			if (n > 0 && esc == 2)
				s[n - 1] = '\n';
			assert_member_round_trip(s, s, false);
			assert_member_round_trip(s, s, true);
		}
	}
}

/* Each byte that needs an escape, and the bytes next to them that don't, at every offset of
 * a string longer than a few 8-byte words: the text parses back to the string. */
static void test_escape_at_every_offset(void **state)
{
	static const char probes[] = {'\x01', '\x1f', '"', '\\', ' ', '!', '#', '[', ']', '\x7f'};
	char s[41];

	(void)state;
	for (size_t p = 0; p < sizeof(probes); p++) {
		for (size_t at = 0; at < sizeof(s) - 1; at++) {
			memset(s, 'x', sizeof(s) - 1);
			s[sizeof(s) - 1] = '\0';
			memcpy(s + 3, "\xc3\xa9", 2); /* UTF-8: never escaped */
			s[at] = probes[p];
			assert_member_round_trip(s, s, true);
		}
	}
}

/* Closing more than was opened, or leaving one open, is the caller's bug: reported. */
static void test_unbalanced(void **state)
{
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 64);
	render_init(&w, &b);
	render_obj_open(&w);
	assert_int_equal(render_end(&w), RCS_ERR_INTERNAL);
	render_init(&w, &b);
	render_arr_close(&w);
	assert_int_equal(render_end(&w), RCS_ERR_INTERNAL);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_escapes_round_trip),
	    cmocka_unit_test(test_commas_before_every_kind),
	    cmocka_unit_test(test_escape_at_every_offset),
	    cmocka_unit_test(test_nesting_and_values),
	    cmocka_unit_test(test_page),
	    cmocka_unit_test(test_sticky_error),
	    cmocka_unit_test(test_unbalanced),
	    cmocka_unit_test(test_short_and_long_strings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
