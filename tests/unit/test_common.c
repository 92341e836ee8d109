/* Unit tests of common/: err, uuid, status, buf, jsonu, cfg. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "buf.h"
#include "cfg.h"
#include "err.h"
#include "jsonu.h"
#include "status.h"
#include "text.h"
#include "uuid.h"

static void test_uuid_v7(void **state)
{
	char a[UUID_STR_LEN], b[UUID_STR_LEN];

	(void)state;
	assert_int_equal(uuid_v7(a), RCS_OK);
	assert_int_equal(uuid_v7(b), RCS_OK);
	assert_true(uuid_valid(a));
	assert_int_equal(strlen(a), 36);
	assert_int_equal(a[14], '7');               /* version 7 */
	assert_true(strchr("89ab", a[19]) != NULL); /* RFC 9562 variant */
	assert_string_not_equal(a, b);
	assert_true(strcmp(a, b) < 0); /* ordered, also within one millisecond */
	for (int i = 0; i < 10000; i++) {
		memcpy(a, b, sizeof(a));
		assert_int_equal(uuid_v7(b), RCS_OK);
		assert_true(strcmp(a, b) < 0);
	}
}

static void test_uuid_valid(void **state)
{
	(void)state;
	assert_true(uuid_valid("01234567-89ab-cdef-0123-456789ABCDEF"));
	assert_false(uuid_valid(NULL));
	assert_false(uuid_valid(""));
	assert_false(uuid_valid("01234567-89ab-cdef-0123-456789abcde"));
	assert_false(uuid_valid("01234567-89ab-cdef-0123-456789abcdeff"));
	assert_false(uuid_valid("0123456789ab-cdef-0123-456789abcdef-"));
	assert_false(uuid_valid("01234567-89ab-cdef-0123-456789abcdeg"));
	assert_false(uuid_valid("' OR 1=1 --aaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

static void test_status_order(void **state)
{
	enum job_status s;

	(void)state;
	assert_string_equal(status_name(JS_TRANSMITED), "transmited");
	assert_true(status_parse("edge_transmitted", &s));
	assert_int_equal(s, JS_EDGE_TRANSMITTED);
	assert_false(status_parse("running", &s));
	assert_false(status_parse("Terminated", &s));
	assert_true(status_can_move(JS_INITIAL, JS_PENDING));
	assert_true(status_can_move(JS_TRANSMITED, JS_EDGE_RUNNING));
	assert_true(status_can_move(JS_EDGE_RUNNING, JS_EDGE_RUNNING));
	assert_true(status_can_move(JS_EDGE_STARTED, JS_TERMINATED));
	assert_true(status_can_move(JS_PENDING, JS_CANCELLED));
	assert_false(status_can_move(JS_EDGE_STARTED, JS_EDGE_TRANSMITTED));
	assert_false(status_can_move(JS_EDGE_STARTED, JS_EDGE_STARTED));
	assert_false(status_can_move(JS_TERMINATED, JS_EDGE_ERROR));
	assert_false(status_can_move(JS_CANCELLED, JS_TERMINATED));
	assert_true(status_is_terminal(JS_EXPIRED));
	assert_false(status_is_terminal(JS_EDGE_RUNNING));
	assert_true(status_is_device(JS_TERMINATED));
	assert_false(status_is_device(JS_CANCELLED));
}

static void test_buf_ceiling(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 8);
	assert_int_equal(buf_append(&b, "abcd", 4), RCS_OK);
	assert_int_equal(buf_appendf(&b, "%d", 1234), RCS_OK);
	assert_string_equal(b.data, "abcd1234");
	assert_int_equal(buf_append(&b, "x", 1), RCS_ERR_TOOBIG);
	assert_int_equal(buf_appendf(&b, "%s", "y"), RCS_ERR_TOOBIG);
	assert_string_equal(b.data, "abcd1234"); /* unchanged by the failures */
	buf_reset(&b);
	assert_int_equal(b.len, 0);
	buf_free(&b);
}

static void test_text(void **state)
{
	static const struct {
		const char *s;
		bool valid;
	} cases[] = {
	    {"", true},
	    {"plain ASCII", true},
	    {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x92\xa5", true},
	    {"\xf4\x8f\xbf\xbf", true},  /* U+10FFFF */
	    {"\xc3", false},             /* truncated */
	    {"\xe2\x9c", false},         /* truncated */
	    {"\xc0\xaf", false},         /* overlong */
	    {"\xe0\x80\xaf", false},     /* overlong */
	    {"\xed\xa0\x80", false},     /* surrogate */
	    {"\xf4\x90\x80\x80", false}, /* past U+10FFFF */
	    {"\xff", false},
	    {"a\x80"
	     "b",
	     false}, /* a lone continuation byte */
	};
	const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
	char hex[9];
	size_t i;
	uint32_t cp;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(text_utf8_valid(cases[i].s, strlen(cases[i].s)), cases[i].valid);
	i = 0;
	assert_true(text_utf8_next((const unsigned char *)"\xe2\x9c\x93!", 4, &i, &cp));
	assert_int_equal(cp, 0x2713);
	assert_int_equal(i, 3);
	i = 0;
	assert_false(text_utf8_next((const unsigned char *)"\xe2\x9c", 2, &i, &cp));
	assert_int_equal(i, 0);
	text_hex_encode(bytes, sizeof(bytes), hex);
	assert_string_equal(hex, "000fa5ff");
	text_hex_encode(bytes, 0, hex);
	assert_string_equal(hex, "");
	{
		unsigned char back[4] = {0};

		/* decode: either case; a non-hex digit anywhere refuses the whole */
		assert_true(text_hex_decode("000FA5ff", 4, back));
		assert_memory_equal(back, bytes, 4);
		assert_false(text_hex_decode("000fa5fg", 4, back));
		assert_false(text_hex_decode("-00fa5ff", 4, back));
		assert_int_equal(text_hex_digit('F'), 15);
		assert_int_equal(text_hex_digit('%'), -1);
	}
}

static void test_text_join(void **state)
{
	char *items[] = {"tcp://a:1", "tcp://b:2", "ssl://c:3"};
	char out[64], small[12];

	(void)state;
	text_join(items, 3, ", ", out, sizeof(out));
	assert_string_equal(out, "tcp://a:1, tcp://b:2, ssl://c:3");
	text_join(items, 1, ", ", out, sizeof(out));
	assert_string_equal(out, "tcp://a:1");
	text_join(items, 0, ", ", out, sizeof(out));
	assert_string_equal(out, "");
	/* cut short, NUL-terminated within the buffer */
	text_join(items, 3, ", ", small, sizeof(small));
	assert_string_equal(small, "tcp://a:1, ");
	text_join(items, 3, ", ", small, 1);
	assert_string_equal(small, "");
}

static void test_jsonu_parse(void **state)
{
	json_object *o = NULL;
	struct jsonu_err e;
	char deep[400];
	int i;

	(void)state;
	assert_int_equal(jsonu_parse_object("{\"a\": 1}", 8, &o, &e), RCS_OK);
	json_object_put(o);
	assert_int_equal(jsonu_parse_object("[1]", 3, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("{\"a\": 1} x", 10, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("{\"a\": ", 6, &o, &e), RCS_ERR_INVAL);
	/* a body cut short is reported where it ends, not at json-c's offset 0 */
	assert_non_null(strstr(e.message, "truncated"));
	assert_non_null(strstr(e.message, "offset 6"));
	assert_int_equal(jsonu_parse("[1, 2", 5, JSONU_MAX_DEPTH, &o, &e), RCS_ERR_INVAL);
	assert_non_null(strstr(e.message, "offset 5"));
	assert_int_equal(jsonu_parse_object("{\"a\":\"\xff\"}", 9, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("{\"a\":1}\0", 8, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("", 0, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("{'a': 1}", 8, &o, &e), RCS_ERR_INVAL);
	for (i = 0; i < 100; i++)
		deep[i] = '[';
	for (i = 0; i < 100; i++)
		deep[100 + i] = ']';
	assert_int_equal(jsonu_parse(deep, 200, JSONU_MAX_DEPTH, &o, &e), RCS_ERR_INVAL);
	assert_non_null(strstr(e.message, "deeper"));
	assert_null(o);

	/* a bare literal is a whole JSON text, null too (fuzz_canon) */
	assert_int_equal(jsonu_parse("null", 4, JSONU_MAX_DEPTH, &o, &e), RCS_OK);
	assert_null(o);
	assert_int_equal(jsonu_parse("false", 5, JSONU_MAX_DEPTH, &o, &e), RCS_OK);
	assert_true(json_object_is_type(o, json_type_boolean));
	json_object_put(o);
	assert_int_equal(jsonu_parse("nul", 3, JSONU_MAX_DEPTH, &o, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse_object("null", 4, &o, &e), RCS_ERR_INVAL);
	assert_non_null(strstr(e.message, "must be a JSON object"));

	/* integers json-c would clamp to INT64_MIN or UINT64_MAX are refused (fuzz_canon) */
	assert_int_equal(jsonu_parse("[99999999999999999999]", 22, JSONU_MAX_DEPTH, &o, &e),
			 RCS_ERR_INVAL);
	assert_non_null(strstr(e.message, "out of range"));
	assert_null(o);
	assert_int_equal(jsonu_parse("{\"a\": -9223372036854775809}", 27, JSONU_MAX_DEPTH, &o, &e),
			 RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse("18446744073709551616", 20, JSONU_MAX_DEPTH, &o, &e),
			 RCS_ERR_INVAL);
	/* the limits themselves, doubles, and digits in strings are fine */
	assert_int_equal(jsonu_parse("[18446744073709551615, -9223372036854775808, -0, 1e20,"
				     " -100000000000000000000.0, \"99999999999999999999\"]",
				     104, JSONU_MAX_DEPTH, &o, &e),
			 RCS_OK);
	assert_int_equal(json_object_get_uint64(json_object_array_get_idx(o, 0)), UINT64_MAX);
	assert_int_equal(json_object_get_int64(json_object_array_get_idx(o, 1)), INT64_MIN);
	json_object_put(o);
}

static void test_jsonu_getters(void **state)
{
	const char *text = "{\"s\": \"hello\", \"i\": 42, \"b\": true, \"bs\": \"false\","
			   " \"n\": null, \"arr\": [\"x\", 2], \"big\": 9223372036854775808}";
	json_object *o = NULL, *a = NULL;
	struct jsonu_err e;
	const char *s = NULL;
	int64_t i = 0;
	bool b = false, present = true;
	static const char *const allowed[] = {"s", "i", NULL};

	(void)state;
	assert_int_equal(jsonu_parse_object(text, strlen(text), &o, &e), RCS_OK);
	assert_int_equal(jsonu_get_string(o, "s", true, 10, &s, &present, &e), RCS_OK);
	assert_string_equal(s, "hello");
	assert_true(present);
	assert_int_equal(jsonu_get_string(o, "s", true, 3, &s, NULL, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "s");
	assert_int_equal(jsonu_get_string(o, "i", true, 10, &s, NULL, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "i");
	assert_int_equal(jsonu_get_int(o, "i", true, 0, 100, &i, NULL, &e), RCS_OK);
	assert_int_equal(i, 42);
	assert_int_equal(jsonu_get_int(o, "i", true, 0, 10, &i, NULL, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_get_int(o, "big", true, 0, INT64_MAX, &i, NULL, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_get_bool(o, "b", true, &b, NULL, &e), RCS_OK);
	assert_true(b);
	assert_int_equal(jsonu_get_bool(o, "bs", true, &b, NULL, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_get_boolish(o, "bs", true, &b, NULL, &e), RCS_OK);
	assert_false(b);
	/* null and missing are the same: absent */
	assert_int_equal(jsonu_get_string(o, "n", false, 10, &s, &present, &e), RCS_OK);
	assert_false(present);
	assert_int_equal(jsonu_get_string(o, "missing", true, 10, &s, &present, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "missing");
	assert_int_equal(jsonu_get_string_array(o, "arr", true, 10, 10, &a, NULL, &e),
			 RCS_ERR_INVAL);
	assert_string_equal(e.field, "arr[1]");
	assert_int_equal(jsonu_get_array(o, "arr", true, 1, &a, NULL, &e), RCS_ERR_INVAL);
	assert_int_equal(jsonu_check_keys(o, allowed, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "b");
	json_object_put(o);
}

struct test_cfg {
	char *name;
	long long count;
	bool flag;
	struct cfg_strlist items;
};

static const struct cfg_opt test_opts[] = {
    {"name", CFG_STRING, offsetof(struct test_cfg, name), 0, 0, "S", "a name"},
    {"count_max", CFG_INT, offsetof(struct test_cfg, count), 1, 10, "N", "a count"},
    {"flag", CFG_BOOL, offsetof(struct test_cfg, flag), 0, 0, NULL, "a flag"},
    {"item", CFG_STRLIST, offsetof(struct test_cfg, items), 0, 0, "X", "items"},
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static void test_jsonu_text_same(void **state)
{
	(void)state;
	assert_true(jsonu_text_same(NULL, NULL));
	assert_false(jsonu_text_same(NULL, "{}"));
	assert_false(jsonu_text_same("[]", NULL));
	assert_true(jsonu_text_same("{\"a\":1,\"b\":[1,2]}", "{\"b\": [1, 2], \"a\": 1}"));
	assert_false(jsonu_text_same("{\"a\":1}", "{\"a\":2}"));
	assert_false(jsonu_text_same("[1,2]", "[2,1]"));
	assert_false(jsonu_text_same("{\"a\":1}", "{\"a\":1,\"b\":null}"));
	assert_true(jsonu_text_same("not json", "not json"));
	assert_false(jsonu_text_same("not json", "not  json"));
}

static void test_cfg_file_and_args(void **state)
{
	char path[] = "/tmp/rcs-cfg-XXXXXX";
	const char *text =
	    "# comment\n  name   first name \nitem a\nitem b\n\ncount_max 3\nflag no\n";
	char *argv[] = {"prog",   "--name", "second", "--count-max=7",
			"--flag", "--item", "c",      "rest"};
	struct test_cfg c;
	char err[256];
	int fd, next = 0;

	(void)state;
	memset(&c, 0, sizeof(c));
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(cfg_parse_file(test_opts, &c, path, err, sizeof(err)), RCS_OK);
	assert_string_equal(c.name, "first name");
	assert_int_equal(c.count, 3);
	assert_false(c.flag);
	assert_int_equal(c.items.n, 2);
	assert_int_equal(cfg_parse_args(test_opts, &c, 8, argv, 1, &next, err, sizeof(err)),
			 RCS_OK);
	assert_int_equal(next, 7);
	assert_string_equal(c.name, "second");
	assert_int_equal(c.count, 7);
	assert_true(c.flag);
	assert_int_equal(c.items.n, 3);
	cfg_free(test_opts, &c);

	/* errors name file:line and the option */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "name x\ncount_max 11\n", 20), 20);
	close(fd);
	memset(&c, 0, sizeof(c));
	assert_int_equal(cfg_parse_file(test_opts, &c, path, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, ":2:"));
	assert_non_null(strstr(err, "count_max"));
	cfg_free(test_opts, &c);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "bogus 1\n", 8), 8);
	close(fd);
	assert_int_equal(cfg_parse_file(test_opts, &c, path, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "bogus"));
	cfg_free(test_opts, &c);
	unlink(path);
	assert_int_equal(cfg_parse_file(test_opts, &c, path, err, sizeof(err)), RCS_ERR_IO);
	{
		char *bad[] = {"prog", "--nope"};
		assert_int_equal(cfg_parse_args(test_opts, &c, 2, bad, 1, &next, err, sizeof(err)),
				 RCS_ERR_INVAL);
		assert_non_null(strstr(err, "--nope"));
	}
	{
		char *bools[] = {"prog", "--flag", "false", "--name", "n", "--flag", "--item", "x"};
		memset(&c, 0, sizeof(c));
		assert_int_equal(
		    cfg_parse_args(test_opts, &c, 5, bools, 1, &next, err, sizeof(err)), RCS_OK);
		assert_false(c.flag); /* "--flag false" */
		assert_string_equal(c.name, "n");
		assert_int_equal(
		    cfg_parse_args(test_opts, &c, 8, bools, 5, &next, err, sizeof(err)), RCS_OK);
		assert_true(c.flag); /* "--flag" followed by another option */
		assert_int_equal(c.items.n, 1);
		cfg_free(test_opts, &c);
	}
	{
		/* "--config" without its file: refused, and *next stays within argv (fuzz_cfg) */
		char *cfg_last[] = {"prog", "--name", "n", "--config"};
		memset(&c, 0, sizeof(c));
		assert_int_equal(
		    cfg_parse_args(test_opts, &c, 4, cfg_last, 1, &next, err, sizeof(err)),
		    RCS_ERR_INVAL);
		assert_non_null(strstr(err, "--config"));
		assert_true(next <= 4);
		cfg_free(test_opts, &c);
	}
	assert_string_equal(cfg_find_arg(8, argv, "name"), "second");
	assert_string_equal(cfg_find_arg(8, argv, "count-max"), "7");
	assert_null(cfg_find_arg(8, argv, "config"));
}

/* A list the command line replaces (--mqtt): the file's values go once flags add some. */
static void test_cfg_strlist_replaced(void **state)
{
	char path[] = "/tmp/rcs-cfg-XXXXXX";
	const char *text = "item a\nitem b\n";
	char *argv[] = {"prog", "--item", "c", "--item", "d"};
	struct test_cfg c;
	char err[256];
	int fd, next = 0;
	size_t from_file;

	(void)state;
	memset(&c, 0, sizeof(c));
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(cfg_parse_file(test_opts, &c, path, err, sizeof(err)), RCS_OK);
	from_file = c.items.n;
	/* no flag of that list: the file's values stay */
	assert_int_equal(cfg_parse_args(test_opts, &c, 1, argv, 1, &next, err, sizeof(err)),
			 RCS_OK);
	cfg_strlist_replaced(&c.items, from_file);
	assert_int_equal(c.items.n, 2);
	assert_string_equal(c.items.items[0], "a");
	/* flags: they replace the file's, in their order */
	assert_int_equal(cfg_parse_args(test_opts, &c, 5, argv, 1, &next, err, sizeof(err)),
			 RCS_OK);
	cfg_strlist_replaced(&c.items, from_file);
	assert_int_equal(c.items.n, 2);
	assert_string_equal(c.items.items[0], "c");
	assert_string_equal(c.items.items[1], "d");
	cfg_free(test_opts, &c);
	/* flags alone */
	memset(&c, 0, sizeof(c));
	assert_int_equal(cfg_parse_args(test_opts, &c, 5, argv, 1, &next, err, sizeof(err)),
			 RCS_OK);
	cfg_strlist_replaced(&c.items, 0);
	assert_int_equal(c.items.n, 2);
	cfg_free(test_opts, &c);
	unlink(path);
}

/* Writes n bytes of data to a new temporary file; its path into path. */
static void secret_file(char *path, size_t len, const char *data, size_t n)
{
	int fd;

	snprintf(path, len, "/tmp/rcs-secret-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

static void test_cfg_read_secret(void **state)
{
	static const struct {
		const char *data;
		size_t n;
		const char *want; /* NULL: refused */
		enum rcs_err err;
	} cases[] = {
	    {"s3cret pass\n", 12, "s3cret pass", RCS_OK}, /* one final newline dropped */
	    {"s3cret\n\n", 8, "s3cret\n", RCS_OK},        /* only one */
	    {"s3cret\r\n", 8, "s3cret", RCS_OK},          /* a CRLF line end */
	    {"  spaced \t", 10, "  spaced \t", RCS_OK},   /* kept as they are */
	    {"no newline", 10, "no newline", RCS_OK},
	    {"", 0, NULL, RCS_ERR_INVAL},
	    {"\n", 1, NULL, RCS_ERR_INVAL},
	    {"a\0b\n", 4, NULL, RCS_ERR_INVAL},
	};
	char path[64], err[256], *big, *out;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		secret_file(path, sizeof(path), cases[i].data, cases[i].n);
		out = (char *)path; /* must be reset */
		assert_int_equal(
		    cfg_read_secret("mqtt_password_file", path, &out, err, sizeof(err)),
		    cases[i].err);
		if (cases[i].want) {
			assert_string_equal(out, cases[i].want);
		} else {
			assert_null(out);
			/* the option (as a flag) and the file are named */
			assert_non_null(strstr(err, "--mqtt-password-file"));
			assert_non_null(strstr(err, path));
		}
		cfg_secret_free(&out);
		assert_null(out);
		unlink(path);
	}
	/* missing, unreadable (a directory), too big */
	assert_int_equal(cfg_read_secret("x_file", "/nonexistent/pw", &out, err, sizeof(err)),
			 RCS_ERR_IO);
	assert_non_null(strstr(err, "--x-file /nonexistent/pw: No such file"));
	assert_null(out);
	assert_int_equal(cfg_read_secret("x_file", "/", &out, err, sizeof(err)), RCS_ERR_IO);
	assert_null(out);
	big = malloc(CFG_MAX_SECRET + 2);
	assert_non_null(big);
	memset(big, 'a', CFG_MAX_SECRET + 1);
	big[CFG_MAX_SECRET] = '\n'; /* the limit counts the final newline */
	secret_file(path, sizeof(path), big, CFG_MAX_SECRET + 1);
	assert_int_equal(cfg_read_secret("x_file", path, &out, err, sizeof(err)), RCS_ERR_TOOBIG);
	unlink(path);
	secret_file(path, sizeof(path), big, CFG_MAX_SECRET);
	assert_int_equal(cfg_read_secret("x_file", path, &out, err, sizeof(err)), RCS_OK);
	assert_int_equal(strlen(out), CFG_MAX_SECRET);
	cfg_secret_free(&out);
	unlink(path);
	free(big);
}

static void test_cfg_take_env_secret(void **state)
{
	char *out = NULL;

	(void)state;
	assert_int_equal(setenv("RCS_TEST_SECRET", "from env", 1), 0);
	assert_int_equal(cfg_take_env_secret("RCS_TEST_SECRET", &out), RCS_OK);
	assert_string_equal(out, "from env");
	assert_null(getenv("RCS_TEST_SECRET")); /* children won't inherit it */
	cfg_secret_free(&out);
	/* unset, or empty: no secret */
	assert_int_equal(cfg_take_env_secret("RCS_TEST_SECRET", &out), RCS_OK);
	assert_null(out);
	assert_int_equal(setenv("RCS_TEST_SECRET", "", 1), 0);
	assert_int_equal(cfg_take_env_secret("RCS_TEST_SECRET", &out), RCS_OK);
	assert_null(out);
	assert_null(getenv("RCS_TEST_SECRET"));
	/* out NULL: only dropped */
	assert_int_equal(setenv("RCS_TEST_SECRET", "drop me", 1), 0);
	assert_int_equal(cfg_take_env_secret("RCS_TEST_SECRET", NULL), RCS_OK);
	assert_null(getenv("RCS_TEST_SECRET"));
}

static void test_cfg_secret_resolve(void **state)
{
	char path[64], err[256], *value;
	enum cfg_secret_src from;

	(void)state;
	secret_file(path, sizeof(path), "from file\n", 10);

	/* the option's value first; the variable is dropped all the same */
	value = strdup("from flag");
	assert_int_equal(setenv("RCS_TEST_PW", "from env", 1), 0);
	assert_int_equal(cfg_secret_resolve("mqtt_password", &value, NULL, "RCS_TEST_PW", &from,
					    err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(value, "from flag");
	assert_int_equal(from, CFG_SECRET_VALUE);
	assert_null(getenv("RCS_TEST_PW"));
	cfg_secret_free(&value);

	/* then the file, over the environment */
	assert_int_equal(setenv("RCS_TEST_PW", "from env", 1), 0);
	assert_int_equal(cfg_secret_resolve("mqtt_password", &value, path, "RCS_TEST_PW", &from,
					    err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(value, "from file");
	assert_int_equal(from, CFG_SECRET_FILE);
	assert_null(getenv("RCS_TEST_PW"));
	cfg_secret_free(&value);

	/* then the environment */
	assert_int_equal(setenv("RCS_TEST_PW", "from env", 1), 0);
	assert_int_equal(cfg_secret_resolve("mqtt_password", &value, NULL, "RCS_TEST_PW", &from,
					    err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(value, "from env");
	assert_int_equal(from, CFG_SECRET_ENV);
	assert_null(getenv("RCS_TEST_PW"));
	cfg_secret_free(&value);

	/* nothing: no secret, no error */
	assert_int_equal(cfg_secret_resolve("mqtt_password", &value, NULL, "RCS_TEST_PW", &from,
					    err, sizeof(err)),
			 RCS_OK);
	assert_null(value);
	assert_int_equal(from, CFG_SECRET_NONE);
	assert_int_equal(
	    cfg_secret_resolve("mqtt_password", &value, NULL, NULL, NULL, err, sizeof(err)),
	    RCS_OK);
	assert_null(value);

	/* both the option and its file: refused, naming both */
	value = strdup("from flag");
	assert_int_equal(
	    cfg_secret_resolve("mqtt_password", &value, path, NULL, &from, err, sizeof(err)),
	    RCS_ERR_INVAL);
	assert_non_null(strstr(err, "--mqtt-password and --mqtt-password-file"));
	cfg_secret_free(&value);

	/* a bad file is an error, not a fall back to the environment */
	unlink(path);
	assert_int_equal(setenv("RCS_TEST_PW", "from env", 1), 0);
	assert_int_equal(cfg_secret_resolve("smtp_password", &value, path, "RCS_TEST_PW", &from,
					    err, sizeof(err)),
			 RCS_ERR_IO);
	assert_null(value);
	assert_non_null(strstr(err, "--smtp-password-file"));
	assert_null(getenv("RCS_TEST_PW"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_uuid_v7),
	    cmocka_unit_test(test_uuid_valid),
	    cmocka_unit_test(test_status_order),
	    cmocka_unit_test(test_buf_ceiling),
	    cmocka_unit_test(test_text),
	    cmocka_unit_test(test_text_join),
	    cmocka_unit_test(test_jsonu_parse),
	    cmocka_unit_test(test_jsonu_getters),
	    cmocka_unit_test(test_jsonu_text_same),
	    cmocka_unit_test(test_cfg_file_and_args),
	    cmocka_unit_test(test_cfg_strlist_replaced),
	    cmocka_unit_test(test_cfg_read_secret),
	    cmocka_unit_test(test_cfg_take_env_secret),
	    cmocka_unit_test(test_cfg_secret_resolve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
