/* Unit tests of coordinator/ui.c: the dashboard's lookup and Content-Types. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "ui.h"

static void test_lookup(void **state)
{
	const struct ui_file *f;

	(void)state;
	assert_true(ui_n_files >= 3);
	f = ui_lookup("");
	assert_non_null(f);
	assert_string_equal(f->path, "index.html");
	assert_ptr_equal(ui_lookup("index.html"), f);
	assert_true(f->len > 0 && memcmp(f->data, "<!doctype html>", 15) == 0);
	assert_int_equal(f->data[f->len], 0); /* a NUL after the bytes, not counted */
	/* the device page and the names of devices (docs/dashboard.md) */
	assert_non_null(ui_lookup("js/names.js"));
	f = ui_lookup("js/app.js");
	assert_non_null(f);
	assert_string_equal(f->path, "js/app.js");
	/* every file is found by its own path */
	for (size_t i = 0; i < ui_n_files; i++)
		assert_ptr_equal(ui_lookup(ui_files[i].path), &ui_files[i]);
}

static void test_nothing_else(void **state)
{
	static const char *const bad[] = {
	    "/index.html",
	    "../index.html",
	    "js/../index.html",
	    "js/..",
	    "..",
	    "js//app.js",
	    "js/",
	    "js",
	    "./index.html",
	    "index.html/",
	    "INDEX.HTML",
	    "index.html\\",
	    "nope.html",
	    "index.html ",
	    "js/app.js%00",
	    "%2e%2e/index.html",
	    "\x01",
	    "\xc3\xa9.html",
	    "index.html?x=1",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_null(ui_lookup(bad[i]));
}

static void test_content_types(void **state)
{
	(void)state;
	assert_string_equal(ui_content_type("index.html"), "text/html; charset=utf-8");
	assert_string_equal(ui_content_type("app.css"), "text/css; charset=utf-8");
	assert_string_equal(ui_content_type("js/app.js"), "text/javascript; charset=utf-8");
	assert_string_equal(ui_content_type("favicon.svg"), "image/svg+xml");
	assert_string_equal(ui_content_type("a.png"), "image/png");
	assert_string_equal(ui_content_type("x.bin"), "application/octet-stream");
	assert_string_equal(ui_content_type(".js"), "application/octet-stream");
	assert_string_equal(ui_content_type("js"), "application/octet-stream");
	/* the policy forbids what the pages must never do */
	assert_non_null(strstr(ui_csp, "default-src 'none'"));
	assert_non_null(strstr(ui_csp, "script-src 'self'"));
	assert_non_null(strstr(ui_csp, "frame-ancestors 'none'"));
	assert_null(strstr(ui_csp, "unsafe"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lookup),
	    cmocka_unit_test(test_nothing_else),
	    cmocka_unit_test(test_content_types),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
