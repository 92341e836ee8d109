/* Unit tests of coordinator/validate.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "validate.h"

static json_object *parse(const char *text)
{
	json_object *o = NULL;
	struct jsonu_err e;

	assert_int_equal(jsonu_parse(text, strlen(text), 32, &o, &e), RCS_OK);
	return o;
}

static void test_variables_info(void **state)
{
	struct jsonu_err e;
	json_object *vi;

	(void)state;
	vi = parse("{\"when\": {\"type\": \"timestamp\", \"alias\": \"When\"},"
		   " \"n\": {\"type\": \"integer\", \"optional\": true, \"description\": \"d\"}}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_OK);
	json_object_put(vi);

	vi = parse("{\"x\": {\"type\": \"float\"}}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "variables_info.x.type");
	json_object_put(vi);

	vi = parse("{\"x\": {\"alias\": \"no type\"}}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "variables_info.x.type");
	json_object_put(vi);

	vi = parse("{\"x\": {\"type\": \"string\", \"color\": 1}}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "variables_info.x.color");
	json_object_put(vi);

	vi = parse("{\"bad name\": {\"type\": \"string\"}}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_ERR_INVAL);
	json_object_put(vi);

	vi = parse("{\"x\": \"string\"}");
	assert_int_equal(vars_info_validate(vi, &e), RCS_ERR_INVAL);
	json_object_put(vi);
}

static void test_variables(void **state)
{
	static const struct {
		const char *vars, *field;
	} cases[] = {
	    {"{\"s\": \"x\"}", "variables.t"},
	    {"{\"s\": 1, \"t\": 1}", "variables.s"},
	    {"{\"s\": \"x\", \"t\": \"2024-01-01\"}", "variables.t"},
	    {"{\"s\": \"x\", \"t\": -5}", "variables.t"},
	    {"{\"s\": \"x\", \"t\": 1, \"i\": 1.5}", "variables.i"},
	    /* the 64-bit range, both ends included; beyond it refused, not clamped */
	    {"{\"s\": \"x\", \"t\": 1, \"i\": 9223372036854775807}", NULL},
	    {"{\"s\": \"x\", \"t\": 1, \"i\": -9223372036854775808}", NULL},
	    {"{\"s\": \"x\", \"t\": 1, \"i\": 9223372036854775808}", "variables.i"},
	    {"{\"s\": \"x\", \"t\": 1, \"i\": 18446744073709551615}", "variables.i"},
	    {"{\"s\": \"x\", \"t\": 18446744073709551615}", "variables.t"},
	    {"{\"s\": \"x\", \"t\": 1, \"b\": \"true\"}", "variables.b"},
	    {"{\"s\": \"x\", \"t\": 1, \"extra\": 1}", "variables.extra"},
	};
	struct jsonu_err e;
	json_object *vi, *v;

	(void)state;
	vi = parse("{\"s\": {\"type\": \"string\"}, \"t\": {\"type\": \"timestamp\"},"
		   " \"i\": {\"type\": \"integer\", \"optional\": true},"
		   " \"n\": {\"type\": \"number\", \"optional\": true},"
		   " \"b\": {\"type\": \"boolean\", \"optional\": true}}");
	v = parse("{\"s\": \"x\", \"t\": 1732200000, \"n\": 1.5, \"b\": false}");
	assert_int_equal(vars_validate(v, vi, &e), RCS_OK);
	json_object_put(v);

	/* each case: the variables, the answer, the field named (NULL: accepted) */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		v = parse(cases[i].vars);
		assert_non_null(v);
		assert_int_equal(vars_validate(v, vi, &e), cases[i].field ? RCS_ERR_INVAL : RCS_OK);
		if (cases[i].field)
			assert_string_equal(e.field, cases[i].field);
		json_object_put(v);
	}
	/* beyond 64 bits the JSON text itself is refused (json-c would clamp) */
	assert_int_equal(jsonu_parse("{\"i\": 18446744073709551616}", 27, 32, &v, &e),
			 RCS_ERR_INVAL);
	assert_int_equal(jsonu_parse("{\"i\": -9223372036854775809}", 27, 32, &v, &e),
			 RCS_ERR_INVAL);

	assert_int_equal(vars_validate(NULL, vi, &e), RCS_ERR_INVAL);
	assert_int_equal(vars_validate(NULL, NULL, &e), RCS_OK);
	v = parse("{\"a\": 1}");
	assert_int_equal(vars_validate(v, NULL, &e), RCS_ERR_INVAL);
	json_object_put(v);
	json_object_put(vi);
}

static void test_email(void **state)
{
	(void)state;
	assert_true(validate_email("ops@example.com"));
	assert_true(validate_email("a.b+tag@sub.example.org"));
	assert_false(validate_email("ops@example.com\r\nBcc: x@y.z"));
	assert_false(validate_email("ops@exa\nmple.com"));
	assert_false(validate_email("no-at-sign"));
	assert_false(validate_email("@example.com"));
	assert_false(validate_email("a@"));
	assert_false(validate_email("a@@b.c"));
	assert_false(validate_email("a b@c.d"));
	assert_false(validate_email("Name <a@b.c>"));
	assert_false(validate_email("a@b..c"));
	assert_true(validate_email("root@localhost"));
	assert_true(validate_email("ops@mail_host.example"));
	assert_true(validate_email("first.last@example.test"));
	assert_false(validate_email("a..b@example.test"));
	assert_false(validate_email(".ab@example.test"));
	assert_false(validate_email("ab.@example.test"));
	assert_false(validate_email("a@.example.test"));
	assert_false(validate_email("a@example.test."));
	assert_false(validate_email("a@b.c,d@e.f"));
	assert_false(validate_email("\xc3\xa9@b.c"));
	assert_false(validate_email(NULL));
}

static void test_lists_and_tags(void **state)
{
	struct jsonu_err e;
	json_object *a;

	(void)state;
	a = parse("[\"terminated\", \"edge_error\"]");
	assert_int_equal(validate_status_list(a, "notification_status_list", &e), RCS_OK);
	json_object_put(a);
	a = parse("[\"terminated\", \"done\"]");
	assert_int_equal(validate_status_list(a, "notification_status_list", &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "notification_status_list[1]");
	json_object_put(a);
	a = parse("[\"a@b.c\", \"bad\"]");
	assert_int_equal(validate_mail_list(a, "notification_mail_list", &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "notification_mail_list[1]");
	json_object_put(a);
	assert_true(validate_tag("site:paris/floor-2.a_b"));
	assert_false(validate_tag(""));
	assert_false(validate_tag("has space"));
	assert_false(validate_tag("x' OR '1'='1"));
	a = parse("[\"ok\", \"not ok\"]");
	assert_int_equal(validate_tags(a, "tags", &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "tags[1]");
	json_object_put(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_variables_info),
	    cmocka_unit_test(test_variables),
	    cmocka_unit_test(test_email),
	    cmocka_unit_test(test_lists_and_tags),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
