/* Unit tests of the rcs command line's own parts (cli/): times and typed variables of
 * send, its rollout options, tables sized to a width, a group's progress, the progress arithmetic
 * of watch, URL escaping and where the configuration comes from. Their use against a real API:
 * tests/integration/ test_rcs_cli.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli.h"
#include "config.h"
#include "http.h"
#include "list.h"
#include "send.h"
#include "table.h"
#include "watch.h"

static void test_send_parse_time(void **state)
{
	time_t now = 1800000000;
	int64_t t = 0;
	struct tm tm;

	(void)state;
	assert_int_equal(send_parse_time("1700000000", now, &t), RCS_OK);
	assert_int_equal(t, 1700000000);
	assert_int_equal(send_parse_time("+30s", now, &t), RCS_OK);
	assert_int_equal(t, now + 30);
	assert_int_equal(send_parse_time("+10m", now, &t), RCS_OK);
	assert_int_equal(t, now + 600);
	assert_int_equal(send_parse_time("+2h", now, &t), RCS_OK);
	assert_int_equal(t, now + 7200);
	assert_int_equal(send_parse_time("+1d", now, &t), RCS_OK);
	assert_int_equal(t, now + 86400);
	assert_int_equal(send_parse_time("2027-01-02T03:04:05Z", now, &t), RCS_OK);
	assert_int_equal(t, 1798859045);
	assert_int_equal(send_parse_time("2027-01-02T03:04Z", now, &t), RCS_OK);
	assert_int_equal(t, 1798859040);
	/* without Z: local time */
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = 127;
	tm.tm_mon = 0;
	tm.tm_mday = 2;
	tm.tm_isdst = -1;
	assert_int_equal(send_parse_time("2027-01-02", now, &t), RCS_OK);
	assert_int_equal(t, (int64_t)mktime(&tm));
	assert_int_equal(send_parse_time("2027-01-02 03:04:05", now, &t), RCS_OK);
	for (const char *const *bad =
		 (const char *const[]){"", "soon", "+10", "+m", "+10x", "-5", "+1hh", "2027-13-40",
				       "2027-01-02T03:04:05+01", NULL};
	     *bad != NULL; bad++)
		assert_int_equal(send_parse_time(*bad, now, &t), RCS_ERR_INVAL);
}

/* The member of a parsed object as compact JSON, for comparisons. */
static void assert_json(json_object *o, const char *want)
{
	assert_non_null(o);
	assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), want);
	json_object_put(o);
}

static void test_send_window_exponential(void **state)
{
	json_object *o = NULL;
	char err[384];
	double d = 0;

	(void)state;
	assert_int_equal(send_parse_window("sat,sun/02:00/2h", 60, &o, err, sizeof(err)), RCS_OK);
	assert_json(o, "{\"days\":[\"sat\",\"sun\"],\"start\":\"02:00\",\"duration_min\":120,"
		       "\"utc_offset_min\":60}");
	/* a range, one that wraps past Sunday, daily; minutes with or without m */
	assert_int_equal(send_parse_window("mon-wed,fri/22:30/90m", -300, &o, err, sizeof(err)),
			 RCS_OK);
	assert_json(o, "{\"days\":[\"mon\",\"tue\",\"wed\",\"fri\"],\"start\":\"22:30\","
		       "\"duration_min\":90,\"utc_offset_min\":-300}");
	assert_int_equal(send_parse_window("sat-mon/00:00/1440", 0, &o, err, sizeof(err)), RCS_OK);
	assert_json(o, "{\"days\":[\"mon\",\"sat\",\"sun\"],\"start\":\"00:00\","
		       "\"duration_min\":1440,\"utc_offset_min\":0}");
	assert_int_equal(send_parse_window("daily/23:59/1", 0, &o, err, sizeof(err)), RCS_OK);
	json_object_put(o);
	for (const char *const *bad =
		 (const char *const[]){"", "sat", "sat/02:00", "sat/2:00/60", "sat/24:00/60",
				       "sat/02:60/60", "sat/02:00/0", "sat/02:00/1441",
				       "sat/02:00/25h", "sat/02:00/60s", "sat,/02:00/60",
				       ",sat/02:00/60", "saturday/02:00/60", "sat-/02:00/60",
				       "sat/02:00/60/x", NULL};
	     *bad != NULL; bad++) {
		assert_int_equal(send_parse_window(*bad, 0, &o, err, sizeof(err)), RCS_ERR_INVAL);
		assert_null(o);
		assert_non_null(strstr(err, "DAYS/HH:MM/DURATION"));
	}
	assert_int_equal(send_parse_exponential("10,2,20", &o, err, sizeof(err)), RCS_OK);
	assert_json(o, "{\"base_per_minute\":10,\"factor\":2.0,\"after_succeeded\":20}");
	assert_int_equal(send_parse_exponential("1,1.25,1", &o, err, sizeof(err)), RCS_OK);
	assert_json(o, "{\"base_per_minute\":1,\"factor\":1.25,\"after_succeeded\":1}");
	for (const char *const *bad =
		 (const char *const[]){"", "10", "10,2", "10,2,20,1", "0,2,20", "10,0.5,20",
				       "10,11,20", "10,2,0", "-1,2,3", "10,x,20", NULL};
	     *bad != NULL; bad++)
		assert_int_equal(send_parse_exponential(*bad, &o, err, sizeof(err)), RCS_ERR_INVAL);
	assert_int_equal(send_parse_number("1.5", 1, 10, &d), RCS_OK);
	assert_true(d == 1.5);
	assert_int_equal(send_parse_number("0.9", 1, 10, &d), RCS_ERR_INVAL);
	assert_int_equal(send_parse_number("nan", 1, 10, &d), RCS_ERR_INVAL);
}

static void list_test_row(struct list_row *r, const char **cells)
{
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "name");
	cells[2] = list_printf(r, "%lld", (long long)cli_int(r->item, "n"));
	cells[3] = list_when(r, "at");
}

/* list.h: a row's cells live in its bounded scratch; a page becomes a table whose short
 * idents tell the page's idents apart; joined strings keep those that fit whole. */
static void test_list(void **state)
{
	static const char *const heads[] = {"IDENT", "NAME", "N", "AT"};
	const struct list_spec l = {
	    .heads = heads, .ncols = 4, .keep = 1u, .idents = {"ident"}, .row = list_test_row};
	struct list_row *r = calloc(1, sizeof(*r));
	struct cli c;
	struct http_resp resp = {0};
	char path[] = "/tmp/rcs-test-list-XXXXXX", text[4096], joined[12];
	json_object *a;
	int fd, out;
	ssize_t n;

	(void)state;
	assert_non_null(r);
	/* the scratch: cells until it is full, then NULL; printf text cut at its end */
	for (size_t i = 0; i < LIST_SCRATCH / 1024; i++)
		assert_non_null(list_cell(r, 1024));
	assert_null(list_cell(r, 1));
	r->used = LIST_SCRATCH - 4;
	assert_string_equal(list_printf(r, "%s", "abcdefgh"), "abc");
	assert_int_equal(r->used, LIST_SCRATCH);
	assert_null(list_printf(r, "x"));
	free(r);
	/* joined: the strings that fit whole */
	a = json_tokener_parse("[\"alpha\", \"beta\", \"gamma\"]");
	assert_string_equal(cli_join(a, ", ", joined, sizeof(joined)), "alpha, beta");
	assert_string_equal(cli_join(NULL, ", ", joined, sizeof(joined)), "");
	json_object_put(a);
	/* a page as a table on stdout */
	memset(&c, 0, sizeof(c));
	c.cmd = "test list";
	resp.status = 200;
	resp.json = json_tokener_parse(
	    "{\"items\": [{\"ident\": \"01a1ffa0-2e50-70a2-a483-9fa404ae0bdd\", \"name\": \"one\","
	    " \"n\": 7, \"at\": 0}, {\"ident\": \"01a1ffa0-2e50-70a2-a483-9fa404ae1bdd\","
	    " \"name\": \"two\", \"n\": 8}], \"page\": 1, \"per_page\": 50,"
	    " \"total\": 2}");
	assert_non_null(resp.json);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	fflush(stdout);
	out = dup(1);
	assert_true(dup2(fd, 1) >= 0);
	assert_int_equal(list_print(&c, &resp, &l), CLI_OK);
	fflush(stdout);
	assert_true(dup2(out, 1) >= 0);
	close(out);
	n = pread(fd, text, sizeof(text) - 1, 0);
	assert_true(n > 0);
	text[n] = '\0';
	close(fd);
	unlink(path);
	/* the idents differ in their 4th digit from the end: TABLE_SHORT_MIN are shown */
	assert_non_null(strstr(text, "IDENT"));
	assert_non_null(strstr(text, "\n04ae0bdd  one "));
	assert_non_null(strstr(text, "\n04ae1bdd  two "));
	assert_null(strstr(text, "9fa4"));
	assert_non_null(strstr(text, " 7 "));
	json_object_put(resp.json);
}

/* --download-max-rate's sizes: K, M, G, T are powers of 1024 */
static void test_send_parse_bytes(void **state)
{
	long long v = 0;

	(void)state;
	assert_int_equal(send_parse_bytes("100000", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 100000);
	assert_int_equal(send_parse_bytes("500K", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 512000);
	assert_int_equal(send_parse_bytes("10M", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 10485760);
	assert_int_equal(send_parse_bytes("1.5m", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 1572864);
	assert_int_equal(send_parse_bytes("2GiB", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 2147483648LL);
	assert_int_equal(send_parse_bytes("1T", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 1LL << 40);
	assert_int_equal(send_parse_bytes("1kb", 1024, 1LL << 40, &v), RCS_OK);
	assert_int_equal(v, 1024);
	for (const char *const *bad =
		 (const char *const[]){"", "M", "-1M", "10X", "10MM", "1023", "2T", "10 M", "0x10",
				       "nan", "inf", NULL};
	     *bad != NULL; bad++)
		assert_int_equal(send_parse_bytes(*bad, 1024, 1LL << 40, &v), RCS_ERR_INVAL);
}

static void test_cli_group_progress(void **state)
{
	char out[48];
	json_object *g;

	(void)state;
	/* progress (devices, each by its latest attempt: docs/api.md "Progress") wins */
	g = json_tokener_parse("{\"total\": 29, \"statuses\": {\"terminated\": 19}, "
			       "\"progress\": {\"devices\": 25, \"ended\": 19}}");
	assert_string_equal(cli_group_progress(g, out, sizeof(out)), "19/25");
	json_object_put(g);
	/* counts (each device's latest attempt) next; the final statuses are done */
	g = json_tokener_parse("{\"total\": 9, \"statuses\": {\"edge_error\": 4}, \"counts\": "
			       "{\"terminated\": 3, \"edge_error\": 1, \"expired\": 1, "
			       "\"cancelled\": 1, \"pending\": 2, \"edge_running\": 1}}");
	assert_string_equal(cli_group_progress(g, out, sizeof(out)), "6/9");
	json_object_put(g);
	/* without counts: statuses, and total when it is larger */
	g = json_tokener_parse("{\"total\": 7, \"statuses\": {\"terminated\": 2, \"x\": 1}}");
	assert_string_equal(cli_group_progress(g, out, sizeof(out)), "2/7");
	json_object_put(g);
	g = json_tokener_parse("{\"counts\": {}}");
	assert_string_equal(cli_group_progress(g, out, sizeof(out)), "0/0");
	json_object_put(g);
	g = json_tokener_parse("{\"total\": 7}");
	assert_null(cli_group_progress(g, out, sizeof(out)));
	json_object_put(g);
	assert_null(cli_group_progress(NULL, out, sizeof(out)));
}

static void test_send_var_value(void **state)
{
	json_object *v = NULL;
	char err[256];

	(void)state;
	assert_int_equal(send_var_value("integer", "-42", 0, &v, err, sizeof(err)), RCS_OK);
	assert_true(json_object_is_type(v, json_type_int));
	assert_int_equal(json_object_get_int64(v), -42);
	json_object_put(v);
	assert_int_equal(send_var_value("integer", "4x", 0, &v, err, sizeof(err)), RCS_ERR_INVAL);
	assert_null(v);
	assert_string_equal(err, "'4x' is not an integer");
	assert_int_equal(send_var_value("integer", "99999999999999999999", 0, &v, err, sizeof(err)),
			 RCS_ERR_INVAL);
	assert_int_equal(send_var_value("number", "1.5", 0, &v, err, sizeof(err)), RCS_OK);
	assert_true(json_object_is_type(v, json_type_double));
	json_object_put(v);
	assert_int_equal(send_var_value("number", "nan", 0, &v, err, sizeof(err)), RCS_ERR_INVAL);
	assert_int_equal(send_var_value("number", "", 0, &v, err, sizeof(err)), RCS_ERR_INVAL);
	assert_int_equal(send_var_value("boolean", "yes", 0, &v, err, sizeof(err)), RCS_OK);
	assert_true(json_object_get_boolean(v));
	json_object_put(v);
	assert_int_equal(send_var_value("boolean", "false", 0, &v, err, sizeof(err)), RCS_OK);
	assert_false(json_object_get_boolean(v));
	json_object_put(v);
	assert_int_equal(send_var_value("boolean", "maybe", 0, &v, err, sizeof(err)),
			 RCS_ERR_INVAL);
	assert_int_equal(send_var_value("timestamp", "+1h", 1000, &v, err, sizeof(err)), RCS_OK);
	assert_int_equal(json_object_get_int64(v), 4600);
	json_object_put(v);
	assert_int_equal(send_var_value("timestamp", "12", 1000, &v, err, sizeof(err)), RCS_OK);
	assert_int_equal(json_object_get_int64(v), 12);
	json_object_put(v);
	/* a string, and a variable the task doesn't declare: the text as it is */
	assert_int_equal(send_var_value("string", "42", 0, &v, err, sizeof(err)), RCS_OK);
	assert_string_equal(json_object_get_string(v), "42");
	json_object_put(v);
	assert_int_equal(send_var_value(NULL, "x=y", 0, &v, err, sizeof(err)), RCS_OK);
	assert_string_equal(json_object_get_string(v), "x=y");
	json_object_put(v);
}

/* What table_print writes for width. */
static char *table_text(const struct table *t, size_t width)
{
	char *out = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&out, &len);

	assert_non_null(fp);
	table_print(t, fp, width);
	fclose(fp);
	return out;
}

static void test_table(void **state)
{
	static const char *const heads[] = {"IDENT", "NAME", "STATUS"};
	struct table t;
	char *out, clean[16];

	(void)state;
	table_init(&t, 3, heads);
	assert_int_equal(
	    table_add(&t, (const char *const[]){"0193a5c4-5678-7def-9abc", "pump-7", "terminated"}),
	    RCS_OK);
	assert_int_equal(
	    table_add(&t, (const char *const[]){"x", "p\xc3\xa9\xc3\xa9\xc3\xa9", NULL}), RCS_OK);
	/* no limit: as wide as the widest cells */
	out = table_text(&t, 0);
	assert_string_equal(out, "IDENT                    NAME    STATUS\n"
				 "0193a5c4-5678-7def-9abc  pump-7  terminated\n"
				 "x                        p\xc3\xa9\xc3\xa9\xc3\xa9    -\n");
	free(out);
	/* 30 columns: the widest column gives way first, cut with '~' */
	out = table_text(&t, 30);
	for (char *line = out, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
		*nl = '\0';
		assert_true(table_text_width(line) <= 30);
	}
	free(out);
	out = table_text(&t, 30);
	assert_non_null(strstr(out, "0193a5c4-~  pump-7  terminated\n"));
	free(out);
	/* narrower than every column at its least: columns stop at their header or 4 */
	out = table_text(&t, 5);
	assert_non_null(strstr(out, "IDENT  NAME  STATUS\n"));
	free(out);
	table_free(&t);

	/* a device's text can't drive the terminal */
	table_clean(clean, sizeof(clean), "a\x1b[2Jb\n", 0);
	assert_string_equal(clean, "a?[2Jb?");
	table_clean(clean, sizeof(clean), "a\nb", 1);
	assert_string_equal(clean, "a\nb");
	/* cut short on a code point's boundary */
	table_clean(clean, 6, "\xc3\xa9\xc3\xa9\xc3\xa9", 0);
	assert_string_equal(clean, "\xc3\xa9\xc3\xa9");
	assert_int_equal(table_text_width("p\xc3\xa9"), 2);
	snprintf(clean, sizeof(clean), "p\xc3\xa9\xc3\xa9x");
	table_cut(clean, 3);
	assert_string_equal(clean, "p\xc3\xa9\xc3\xa9");
	table_cut(clean, 0);
	assert_string_equal(clean, "");

	table_duration(clean, sizeof(clean), 5);
	assert_string_equal(clean, "5s");
	table_duration(clean, sizeof(clean), 185);
	assert_string_equal(clean, "3m05s");
	table_duration(clean, sizeof(clean), 7620);
	assert_string_equal(clean, "2h07m");
}

/* Short idents: the last digits of UUIDv7 idents that share their time, as many as tell
 * them apart; columns that keep their width (docs/cli.md "Tables"). */
static void test_table_short_idents(void **state)
{
	static const char *const heads[] = {"IDENT", "DEVICE", "STATUS", "UPDATED", "RESPONSE"};
	const char *ids[] = {"01a22365-c66d-7e01-8a3b-51c6f2d9e4a1",
			     "01a22365-c66d-7e02-9b44-0fd3a8c7e4a1", /* the same 4 last digits */
			     "01a22365-c66d-7e01-8a3b-51c6f2d9e4a1", /* the first again */
			     NULL, "pump"};
	const char *close[] = {"01a22365-c66d-7e01-8a3b-51c6f2d9e4a1",
			       "01a22365-c66d-7e01-9a3b-51c6f2d9e4a1"}; /* 15 digits the same */
	char out[UUID_STR_LEN], line[256];
	struct table t;
	char *txt;

	(void)state;
	assert_int_equal(table_short_len(ids, 5), TABLE_SHORT_MIN);
	assert_int_equal(table_short_len(ids, 0), TABLE_SHORT_MIN);
	assert_int_equal(table_short_len(close, 2), 16);
	assert_string_equal(table_short(out, sizeof(out), ids[0], 8), "f2d9e4a1");
	assert_string_equal(table_short(out, sizeof(out), ids[0], 12), "51c6f2d9e4a1");
	assert_string_equal(table_short(out, sizeof(out), ids[0], 15), "a3b-51c6f2d9e4a1");
	assert_string_equal(table_short(out, sizeof(out), close[0], 16), "8a3b-51c6f2d9e4a1");
	assert_string_equal(table_short(out, sizeof(out), ids[0], 32), ids[0]);
	assert_string_equal(table_short(out, sizeof(out), "pump", 8), "pump");
	assert_string_equal(table_short(out, sizeof(out), NULL, 8), "-");

	/* 80 columns: the idents, the status and the time whole; the rest gives way */
	table_init(&t, 5, heads);
	table_keep(&t, 0);
	table_least(&t, 1, 9);
	table_keep(&t, 2);
	table_keep(&t, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(
		    table_add(&t,
			      (const char *const[]){
				  i == 1 ? "0fd3a8c7" : "51c6f2d9",
				  "f2d9e4a1 a-device-with-a-rather-long-name-indeed",
				  "edge_running", "2026-11-27 22:10:05",
				  "a response that goes on and on, longer than any terminal"}),
		    RCS_OK);
	txt = table_text(&t, 80);
	for (char *l = txt, *nl; (nl = strchr(l, '\n')) != NULL; l = nl + 1) {
		*nl = '\0';
		assert_true(table_text_width(l) <= 80);
		if (l != txt) {
			snprintf(line, sizeof(line), "%s", l);
			assert_non_null(strstr(line, "  edge_running  2026-11-27 22:10:05  "));
			assert_non_null(strstr(line, "  f2d9e4a1 "));
		}
	}
	free(txt);
	/* narrower than what is kept: the kept columns stay whole, lines wrap */
	txt = table_text(&t, 20);
	assert_non_null(strstr(txt, "51c6f2d9  f2d9e4a1~  edge_running  2026-11-27 22:10:05  "));
	free(txt);
	table_free(&t);
}

/* Table times to the second: without the date on the day of now. */
static void test_table_time_short(void **state)
{
	char out[32];
	struct tm tm;
	time_t t;

	(void)state;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = 126;
	tm.tm_mon = 10;
	tm.tm_mday = 28;
	tm.tm_hour = 22;
	tm.tm_min = 10;
	tm.tm_sec = 5;
	tm.tm_isdst = -1;
	t = mktime(&tm);
	table_time_short(out, sizeof(out), t, t + 3600);
	assert_string_equal(out, "22:10:05");
	table_time_short(out, sizeof(out), t, t + 86400);
	assert_string_equal(out, "2026-11-28 22:10:05");
	table_time_short(out, sizeof(out), 0, t);
	assert_string_equal(out, "-");
}

/* What a person types for an ident: hex digits of its start or its end, '-' anywhere. */
static void test_cli_short_part(void **state)
{
	char out[UUID_STR_LEN];

	(void)state;
	assert_true(cli_short_part("01a22365-c66", true, out));
	assert_string_equal(out, "01a22365-c66");
	assert_true(cli_short_part("01A22365C66D", true, out));
	assert_string_equal(out, "01a22365-c66d");
	assert_true(cli_short_part("01a22365-c66", false, out));
	assert_string_equal(out, "01a22365c66"); /* as the last 11 digits of an ident */
	assert_true(cli_short_part("f2d9e4a1", false, out));
	assert_string_equal(out, "f2d9e4a1");
	assert_true(cli_short_part("8a3b51c6f2d9e4a1", false, out));
	assert_string_equal(out, "8a3b-51c6f2d9e4a1");
	assert_true(cli_short_part("01a22365c66d7e018a3b51c6f2d9e4a1", false, out));
	assert_string_equal(out, "01a22365-c66d-7e01-8a3b-51c6f2d9e4a1");
	assert_true(cli_short_part("abcdef", true, out));
	assert_false(cli_short_part("abcde", true, out)); /* fewer than 6 digits */
	assert_false(cli_short_part("abc-de", true, out));
	assert_false(cli_short_part("pump-7", true, out));
	assert_false(cli_short_part("f2d9e4a1%", false, out));
	assert_false(cli_short_part("01a22365c66d7e018a3b51c6f2d9e4a1ff", false, out));
}

static void test_watch_progress(void **state)
{
	struct watch_snap s[3];
	char line[256];

	(void)state;
	memset(s, 0, sizeof(s));
	s[0].t = 0;
	s[0].total = 10;
	s[0].counts[JS_PENDING] = 10;
	assert_int_equal(watch_done(&s[0]), 0);
	assert_false(watch_finished(&s[0]));
	assert_true(watch_rate(s, 1, JS__COUNT) < 0); /* no telling yet */
	s[1] = s[0];
	s[1].t = 2;
	s[1].counts[JS_PENDING] = 4;
	s[1].counts[JS_TERMINATED] = 5;
	s[1].counts[JS_EDGE_ERROR] = 1;
	assert_int_equal(watch_done(&s[1]), 6);
	assert_true(watch_rate(s, 2, JS__COUNT) > 2.99 && watch_rate(s, 2, JS__COUNT) < 3.01);
	assert_true(watch_rate(s, 2, JS_TERMINATED) > 2.49);
	assert_true(watch_failed(&s[1]));
	/* the rate looks back WATCH_WINDOW seconds at most */
	s[2] = s[1];
	s[2].t = 2 + WATCH_WINDOW + 1;
	s[2].counts[JS_PENDING] = 0;
	s[2].counts[JS_TERMINATED] = 9;
	assert_true(watch_rate(s, 3, JS_TERMINATED) > 0.249 &&
		    watch_rate(s, 3, JS_TERMINATED) < 0.251);
	assert_true(watch_finished(&s[2]));
	/* a group with a status (docs/cli.md "Rollouts") ends when it says so */
	snprintf(s[2].state, sizeof(s[2].state), "%s", "running");
	assert_false(watch_finished(&s[2]));
	snprintf(s[2].state, sizeof(s[2].state), "%s", "completed");
	assert_true(watch_finished(&s[2]));
	s[0].counts[JS_PENDING] = 0;
	s[0].counts[JS_TERMINATED] = 10;
	assert_false(watch_failed(&s[0]));
	snprintf(s[0].state, sizeof(s[0].state), "%s", "aborted");
	assert_true(watch_failed(&s[0]));
	s[0].total = 0;
	s[0].counts[JS_TERMINATED] = 0;
	s[0].state[0] = '\0';
	assert_true(watch_finished(&s[0])); /* no jobs: nothing to wait for */

	/* a bar: its share filled, the line in the width */
	watch_bar(line, sizeof(line), "terminated", 5, 10, 0.5, 10, 80);
	assert_int_equal(strlen(line), 80 - 3); /* the tail's padding trimmed */
	assert_non_null(strstr(line, "]      5/10         0.5/s  ETA 10s"));
	{
		const char *b = strchr(line, '['), *e = strchr(line, ']');
		size_t hashes = 0;
		for (const char *p = b + 1; p < e; p++)
			hashes += *p == '#';
		assert_true(hashes * 2 >= (size_t)(e - b - 1) - 1 &&
			    hashes * 2 <= (size_t)(e - b - 1) + 1);
	}
	watch_bar(line, sizeof(line), "pending", 0, 0, -1, -1, 20); /* too narrow: 10 at least */
	assert_non_null(strstr(line, "[..........]"));
}

/* A record's detail in the watch's header (docs/cli.md "Groups and watch"): a job's phase and
 * its download while under way, a group's error codes; nothing else. */
static void test_watch_detail(void **state)
{
	static const struct {
		const char *rec;
		int group;
		const char *want;
	} cases[] = {
	    {"{\"status\": \"edge_running\", \"phase\": \"verify\", \"progress\": null}", 0,
	     "phase verify"},
	    {"{\"status\": \"edge_running\", \"phase\": \"install\","
	     " \"progress\": {\"done\": 42, \"total\": 100}}",
	     0, "phase install, download 42 %"},
	    {"{\"status\": \"edge_running\", \"phase\": null,"
	     " \"progress\": {\"done\": 1, \"total\": 4}}",
	     0, "download 25 %"},
	    /* an ended job's download is over whatever it said last */
	    {"{\"status\": \"edge_error\", \"phase\": \"verify\","
	     " \"progress\": {\"done\": 1, \"total\": 4}}",
	     0, "phase verify"},
	    {"{\"status\": \"pending\"}", 0, ""},
	    {"{\"status\": \"running\", \"error_codes\": {\"rolled_back\": 3,"
	     " \"reboot_timeout\": 1}}",
	     1, "rolled_back 3, reboot_timeout 1"},
	    {"{\"status\": \"running\", \"error_codes\": {}, \"phase\": \"x\"}", 1, ""},
	};
	char out[160];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_object *o = json_tokener_parse(cases[i].rec);

		assert_non_null(o);
		watch_detail(o, cases[i].group, out, sizeof(out));
		assert_string_equal(out, cases[i].want);
		json_object_put(o);
	}
	/* a short buffer is cut, not overrun */
	{
		json_object *o = json_tokener_parse(cases[1].rec);
		watch_detail(o, 0, out, 8);
		assert_string_equal(out, "phase i");
		json_object_put(o);
	}
}

/* A group's end in words and its time left (docs/cli.md "Groups and watch"): the group's
 * status names the end, a job cancelled in a completed group is no failure, and what the
 * rollout holds goes out at its pace whatever the rate so far. */
static void test_watch_words_and_eta(void **state)
{
	struct watch_snap s;
	char line[256];

	(void)state;
	memset(&s, 0, sizeof(s));
	s.release_eta = -1;
	s.total = 25;
	s.counts[JS_TERMINATED] = 24;
	s.counts[JS_CANCELLED] = 1;
	snprintf(s.state, sizeof(s.state), "%s", "completed");
	assert_false(watch_failed(&s));
	assert_string_equal(watch_end_word(&s, 0), "completed");
	assert_string_equal(watch_end_word(&s, 1), "interrupted");
	s.counts[JS_EDGE_ERROR] = 1;
	s.counts[JS_TERMINATED] = 23;
	assert_true(watch_failed(&s));
	assert_string_equal(watch_end_word(&s, 0), "completed with failures");
	snprintf(s.state, sizeof(s.state), "%s", "aborted");
	assert_string_equal(watch_end_word(&s, 0), "aborted");
	/* without a group status (a job, an older coordinator) a cancelled job is a failure */
	s.state[0] = '\0';
	s.counts[JS_EDGE_ERROR] = 0;
	assert_true(watch_failed(&s));
	assert_string_equal(watch_end_word(&s, 0), "ended failed");
	s.counts[JS_CANCELLED] = 0;
	s.counts[JS_TERMINATED] = 25;
	assert_string_equal(watch_end_word(&s, 0), "done");

	/* 6 of 25 ended in 10 s: 0.6/s, 32 s at that rate; the rollout needs 4m45s more */
	memset(&s, 0, sizeof(s));
	snprintf(s.state, sizeof(s.state), "%s", "running");
	s.total = 25;
	s.counts[JS_TERMINATED] = 6;
	s.counts[JS_PENDING] = 19;
	s.release_eta = -1;
	assert_true(watch_eta(&s, 19, 0.6) > 31.6 && watch_eta(&s, 19, 0.6) < 31.7);
	s.held = 19;
	s.release_eta = 285;
	assert_true(watch_eta(&s, 19, 0.6) == 285);
	assert_true(watch_eta(&s, 19, -1) == 285); /* no rate yet: the pace tells */
	watch_bar(line, sizeof(line), "terminated", 6, 25, 0.6, watch_eta(&s, 19, 0.6), 100);
	assert_non_null(strstr(line, "ETA 4m45s"));
	/* paused: nothing is released, no time to tell */
	snprintf(s.state, sizeof(s.state), "%s", "paused");
	assert_true(watch_eta(&s, 19, 0.6) < 0);
	/* nothing left */
	snprintf(s.state, sizeof(s.state), "%s", "running");
	assert_true(watch_eta(&s, 0, 0.6) < 0);
}

/* what a server sends is shown without control characters, "-" for a missing member */
static void test_cli_show(void **state)
{
	json_object *o = json_tokener_parse("{\"name\":\"a\\u001b[2Jb\",\"n\":1}");
	const char *a, *b;

	(void)state;
	assert_non_null(o);
	a = cli_show(o, "name");
	b = cli_show(o, "missing");
	assert_string_equal(a, "a?[2Jb");
	assert_string_equal(b, "-");
	assert_string_equal(cli_show(o, "n"), "-"); /* not a string */
	assert_string_equal(a, "a?[2Jb");           /* still there: another slot */
	assert_null(cli_str(o, "missing"));
	json_object_put(o);
}

static void test_http_escape(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 64);
	assert_int_equal(http_escape(&b, "a b/c:d~_.-\xc3\xa9"), RCS_OK);
	assert_string_equal(b.data, "a%20b%2Fc%3Ad~_.-%C3%A9");
	buf_reset(&b);
	b.max = 4;
	assert_int_equal(http_escape(&b, "a b"), RCS_ERR_TOOBIG);
	buf_free(&b);
}

static void test_http_init(void **state)
{
	struct http_client c;
	char err[256];

	(void)state;
	assert_int_equal(http_init(&c, "http://h:1/", "k", 5, err, sizeof(err)), RCS_OK);
	assert_string_equal(c.base, "http://h:1/v3/commands");
	http_free(&c);
	assert_int_equal(http_init(&c, "https://h/v3/commands//", NULL, 5, err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(c.base, "https://h/v3/commands");
	http_free(&c);
	assert_int_equal(http_init(&c, "h:1", "k", 5, err, sizeof(err)), RCS_ERR_INVAL);
	http_free(&c);
	assert_int_equal(http_init(&c, "http://h", "a\r\nX-Evil: 1", 5, err, sizeof(err)),
			 RCS_ERR_INVAL);
	http_free(&c);
}

static void test_config(void **state)
{
	char dir[] = "/tmp/rcs-cli-test-XXXXXX", path[256], keyfile[256], err[512];
	struct config cf;
	FILE *fp;

	(void)state;
	assert_non_null(mkdtemp(dir));
	unsetenv("RCS_URL");
	unsetenv("RCS_API_KEY");
	unsetenv("RCS_CONFIG");
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", dir, 1);
	/* no file at the default place: nothing, and no error */
	assert_int_equal(config_settle(&cf, NULL, NULL, NULL, -1, err, sizeof(err)), RCS_OK);
	assert_null(cf.url);
	assert_null(cf.api_key);
	assert_int_equal(cf.timeout, CONFIG_TIMEOUT_DEFAULT);
	config_free(&cf);
	/* ~/.config/rcs/config */
	snprintf(path, sizeof(path), "%s/.config", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.config/rcs", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.config/rcs/config", dir);
	fp = fopen(path, "w");
	fputs("# the lab\nurl http://file:1\napi_key rcs_file\ntimeout 7\n", fp);
	fclose(fp);
	chmod(path, 0600);
	assert_int_equal(config_settle(&cf, NULL, NULL, NULL, -1, err, sizeof(err)), RCS_OK);
	assert_string_equal(cf.url, "http://file:1");
	assert_string_equal(cf.api_key, "rcs_file");
	assert_int_equal(cf.timeout, 7);
	config_free(&cf);
	/* the environment over the file, the flags over both */
	setenv("RCS_URL", "http://env:1", 1);
	setenv("RCS_API_KEY", "rcs_env", 1);
	assert_int_equal(config_settle(&cf, NULL, NULL, NULL, -1, err, sizeof(err)), RCS_OK);
	assert_string_equal(cf.url, "http://env:1");
	assert_string_equal(cf.api_key, "rcs_env");
	config_free(&cf);
	assert_int_equal(config_settle(&cf, NULL, "http://flag:1", "rcs_flag", 9, err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(cf.url, "http://flag:1");
	assert_string_equal(cf.api_key, "rcs_flag");
	assert_int_equal(cf.timeout, 9);
	config_free(&cf);
	unsetenv("RCS_URL");
	unsetenv("RCS_API_KEY");
	/* --config FILE with api_key_file */
	snprintf(keyfile, sizeof(keyfile), "%s/key", dir);
	fp = fopen(keyfile, "w");
	fputs("rcs_from_file\n", fp);
	fclose(fp);
	snprintf(path, sizeof(path), "%s/other", dir);
	fp = fopen(path, "w");
	fprintf(fp, "url http://other:1\napi_key_file %s\n", keyfile);
	fclose(fp);
	chmod(path, 0600);
	assert_int_equal(config_settle(&cf, path, NULL, NULL, -1, err, sizeof(err)), RCS_OK);
	assert_string_equal(cf.api_key, "rcs_from_file");
	config_free(&cf);
	/* a bad line names the file and the line; a file named but missing is an error */
	fp = fopen(path, "w");
	fputs("url http://other:1\ntimeout 0\n", fp);
	fclose(fp);
	assert_int_equal(config_settle(&cf, path, NULL, NULL, -1, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, ":2: timeout"));
	config_free(&cf);
	setenv("RCS_CONFIG", "/nonexistent/rcs.conf", 1);
	assert_int_equal(config_settle(&cf, NULL, NULL, NULL, -1, err, sizeof(err)), RCS_ERR_IO);
	config_free(&cf);
	unsetenv("RCS_CONFIG");
	unlink(keyfile);
	unlink(path);
	snprintf(path, sizeof(path), "%s/.config/rcs/config", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/.config/rcs", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/.config", dir);
	rmdir(path);
	rmdir(dir);
}

/* Artifacts (docs/cli.md "Artifacts"): idents and their short forms, the names a task gives
 * them, the short idents of a table, sizes for people and the upload's bar. */
static void test_artifacts(void **state)
{
	char hex[80], line[256];
	bool whole = false;
	const char *a = "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b";
	const char *b = "3a7bd3e2ff0a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1c";
	const char *c = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

	(void)state;
	snprintf(line, sizeof(line), "sha256:%s", a);
	assert_true(cli_artifact_hex(line, hex, sizeof(hex), &whole));
	assert_true(whole);
	assert_string_equal(hex, a);
	assert_true(cli_artifact_hex("SHA256:3A7BD3", hex, sizeof(hex), &whole));
	assert_false(whole);
	assert_string_equal(hex, "3a7bd3");
	assert_true(cli_artifact_hex("4f1b4f1b", hex, sizeof(hex), &whole));
	assert_false(cli_artifact_hex("3a7bd", hex, sizeof(hex), &whole)); /* under 6 digits */
	assert_false(cli_artifact_hex("firmware", hex, sizeof(hex), &whole));
	assert_false(cli_artifact_hex("sha256:", hex, sizeof(hex), &whole));
	snprintf(line, sizeof(line), "%s0", a); /* 65 digits */
	assert_false(cli_artifact_hex(line, hex, sizeof(hex), &whole));

	assert_true(cli_artifact_key_ok("fw"));
	assert_true(cli_artifact_key_ok("_rootfs-2.1.img"));
	assert_true(cli_artifact_key_ok("0"));
	assert_false(cli_artifact_key_ok(""));
	assert_false(cli_artifact_key_ok(".hidden"));
	assert_false(cli_artifact_key_ok("-x"));
	assert_false(cli_artifact_key_ok("Firmware"));
	assert_false(cli_artifact_key_ok("a b"));
	assert_false(cli_artifact_key_ok("a/b"));
	memset(line, 'a', 65);
	line[65] = '\0';
	assert_false(cli_artifact_key_ok(line));
	line[64] = '\0';
	assert_true(cli_artifact_key_ok(line));

	{
		const char *two[] = {a, c, NULL, a};
		const char *three[] = {a, b, c};
		assert_int_equal(cli_artifact_short_len(two, 4), CLI_ART_SHORT);
		assert_int_equal(cli_artifact_short_len(three, 3), 9); /* a, b share 8 */
		assert_int_equal(cli_artifact_short_len(NULL, 0), CLI_ART_SHORT);
	}

	table_bytes(line, sizeof(line), 0);
	assert_string_equal(line, "0 B");
	table_bytes(line, sizeof(line), 1023);
	assert_string_equal(line, "1023 B");
	table_bytes(line, sizeof(line), 1536);
	assert_string_equal(line, "1.5 KiB");
	table_bytes(line, sizeof(line), 12900000);
	assert_string_equal(line, "12.3 MiB");
	table_bytes(line, sizeof(line), 4LL << 30);
	assert_string_equal(line, "4.0 GiB");
	table_bytes(line, sizeof(line), (1LL << 30) - 1); /* not "1024.0 MiB" */
	assert_string_equal(line, "1.0 GiB");

	cli_bytes_bar(line, sizeof(line), "uploading fw.bin", 1 << 20, 4 << 20, 2 << 20, 80);
	assert_int_equal(table_text_width(line), 80);
	assert_non_null(strstr(line, "]  25 %  1.0 MiB of 4.0 MiB  2.0 MiB/s"));
	{
		const char *s = strchr(line, '['), *e = strchr(line, ']');
		size_t hashes = 0;
		for (const char *p = s + 1; p < e; p++)
			hashes += *p == '#';
		assert_int_equal(hashes, (size_t)(e - s - 1) / 4);
	}
	cli_bytes_bar(line, sizeof(line), "up\x1b[2Jx", 5, 5, 0, 30); /* narrow: no bar */
	assert_string_equal(line, "up?[2Jx 100 %  5 B of 5 B");
	cli_bytes_bar(line, sizeof(line), "x", 0, 0, 0, 60); /* an empty file: done */
	assert_non_null(strstr(line, "100 %  0 B of 0 B"));
	assert_null(strchr(line, '.'));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_send_parse_time),
	    cmocka_unit_test(test_send_var_value),
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_watch_progress),
	    cmocka_unit_test(test_watch_words_and_eta),
	    cmocka_unit_test(test_watch_detail),
	    cmocka_unit_test(test_http_escape),
	    cmocka_unit_test(test_http_init),
	    cmocka_unit_test(test_config),
	    cmocka_unit_test(test_cli_show),
	    cmocka_unit_test(test_table_short_idents),
	    cmocka_unit_test(test_table_time_short),
	    cmocka_unit_test(test_cli_short_part),
	    cmocka_unit_test(test_send_window_exponential),
	    cmocka_unit_test(test_send_parse_bytes),
	    cmocka_unit_test(test_cli_group_progress),
	    cmocka_unit_test(test_list),
	    cmocka_unit_test(test_artifacts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
