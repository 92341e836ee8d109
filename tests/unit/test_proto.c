/* Unit tests of common/proto.c: topics and the four message kinds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "proto.h"

#define ROOT "01a1ff99-08fb-74ea-982c-1b51c9f30e75"
#define DEV  "01a1ff99-0b8c-7a13-badb-096b33a537d7"
#define JOB  "01a1ff99-0cb5-7cdc-9b13-20e73ed7e40b"

static void test_topics_round_trip(void **state)
{
	const enum proto_kind kinds[] = {PROTO_JOB,   PROTO_CANCEL, PROTO_STATUS,
					 PROTO_STATE, PROTO_EVENT,  PROTO_GROUP_EVENT};
	char topic[PROTO_MAX_TOPIC];
	struct proto_topic t;

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		proto_topic_make(topic, kinds[i], ROOT, DEV, JOB);
		assert_int_equal(proto_topic_parse(topic, &t), RCS_OK);
		assert_int_equal(t.kind, kinds[i]);
		assert_string_equal(t.client_root, ROOT);
		assert_string_equal(t.job, kinds[i] == PROTO_STATE ? "" : JOB);
		assert_string_equal(t.entity_ident,
				    kinds[i] == PROTO_EVENT || kinds[i] == PROTO_GROUP_EVENT ? ""
											     : DEV);
	}
	proto_topic_make(topic, PROTO_GROUP_EVENT, ROOT, NULL, JOB);
	assert_string_equal(topic, "rcs/v1/" ROOT "/events/groups/" JOB);
	proto_topic_make(topic, PROTO_STATUS, ROOT, DEV, JOB);
	assert_string_equal(topic, "rcs/v1/" ROOT "/" DEV "/jobs/" JOB "/status");
	/* the subscription filters of both daemons (docs/mqtt.md) */
	proto_topic_make(topic, PROTO_STATUS, PROTO_ANY, PROTO_ANY, PROTO_ANY);
	assert_string_equal(topic, "rcs/v1/+/+/jobs/+/status");
	proto_topic_make(topic, PROTO_STATE, PROTO_ANY, PROTO_ANY, NULL);
	assert_string_equal(topic, "rcs/v1/+/+/state");
	proto_topic_make(topic, PROTO_JOB, ROOT, DEV, PROTO_ANY);
	assert_string_equal(topic, "rcs/v1/" ROOT "/" DEV "/jobs/+");
	proto_topic_make(topic, PROTO_CANCEL, ROOT, DEV, PROTO_ANY);
	assert_string_equal(topic, "rcs/v1/" ROOT "/" DEV "/jobs/+/cancel");
	/* a filter is never a topic a message may have */
	assert_int_equal(proto_topic_parse("rcs/v1/+/+/jobs/+/status", &t), RCS_ERR_INVAL);
}

static void test_topics_refused(void **state)
{
	static const char *const bad[] = {
	    "",
	    "rcs/v2/" ROOT "/" DEV "/state",
	    "rcs/v1/" ROOT "/" DEV "/state/x",
	    "rcs/v1/+/" DEV "/state",
	    "rcs/v1/" ROOT "/#",
	    "rcs/v1/" ROOT "/" DEV "/jobs/" JOB "/other",
	    "rcs/v1/" ROOT "/" DEV "/jobs/not-a-uuid",
	    "rcs/v1/" ROOT "/events/jobs/" JOB "/x",
	    "rcs/v1/" ROOT "/" DEV "/jobs/" JOB "/status/a/b/c/d",
	    NULL,
	};
	struct proto_topic t;

	(void)state;
	for (size_t i = 0; bad[i]; i++)
		assert_int_equal(proto_topic_parse(bad[i], &t), RCS_ERR_INVAL);
	assert_int_equal(proto_topic_parse(NULL, &t), RCS_ERR_INVAL);
}

static void test_report(void **state)
{
	struct proto_report r = {.status = JS_TERMINATED, .seq = 4, .ts = 10, .response = "ok"};
	struct proto_report d;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	size_t len;

	(void)state;
	memcpy(r.job, JOB, sizeof(JOB));
	o = proto_report_encode(&r);
	text = jsonu_dump(o, &len);
	assert_int_equal(proto_report_decode(text, len, &d, &e), RCS_OK);
	assert_string_equal(d.job, JOB);
	assert_int_equal(d.status, JS_TERMINATED);
	assert_int_equal(d.seq, 4);
	assert_string_equal(d.response, "ok");
	assert_null(d.error);
	proto_report_free(&d);
	json_object_put(o);
	/* an edge_error's cause (docs/mqtt.md): encoded, decoded; only for edge_error */
	r.status = JS_EDGE_ERROR;
	r.error = "script_error";
	o = proto_report_encode(&r);
	text = jsonu_dump(o, &len);
	assert_non_null(strstr(text, "\"error\":\"script_error\""));
	assert_int_equal(proto_report_decode(text, len, &d, &e), RCS_OK);
	assert_string_equal(d.error, "script_error");
	proto_report_free(&d);
	json_object_put(o);
	r.status = JS_TERMINATED;
	o = proto_report_encode(&r);
	assert_null(strstr(jsonu_dump(o, NULL), "error"));
	json_object_put(o);
	text = "{\"v\":1,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":1,\"ts\":1,"
	       "\"error\":\"timeout\"}";
	assert_int_equal(proto_report_decode(text, strlen(text), &d, &e), RCS_OK);
	assert_null(d.error);
	proto_report_free(&d);

#define BAD(json, fld)                                                                             \
	do {                                                                                       \
		const char *t_ = json;                                                             \
		assert_int_equal(proto_report_decode(t_, strlen(t_), &d, &e), RCS_ERR_INVAL);      \
		assert_string_equal(e.field, fld);                                                 \
		assert_null(d.root);                                                               \
	} while (0)
	BAD("{\"v\":2,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":1,\"ts\":1}", "v");
	BAD("{\"v\":1,\"job\":\"x\",\"status\":\"terminated\",\"seq\":1,\"ts\":1}", "job");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"cancelled\",\"seq\":1,\"ts\":1}", "status");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"transmited\",\"seq\":1,\"ts\":1}", "status");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":0,\"ts\":1}", "seq");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":\"1\",\"ts\":1}",
	    "seq");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":1,\"ts\":1,\"x\":1}",
	    "x");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"terminated\",\"seq\":1,\"ts\":1,"
	    "\"response\":5}",
	    "response");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"edge_error\",\"seq\":1,\"ts\":1,"
	    "\"error\":\"Bad Code\"}",
	    "error");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"edge_error\",\"seq\":1,\"ts\":1,"
	    "\"error\":7}",
	    "error");
	BAD("{\"v\":1,\"job\":\"" JOB "\",\"status\":\"edge_error\",\"seq\":1,\"ts\":1,"
	    "\"error\":\"\"}",
	    "error");
#undef BAD
}

static void test_state_and_cancel(void **state)
{
	struct proto_state s = {.online = true, .agent_version = "1.2", .ts = 7};
	struct proto_state ds;
	struct proto_cancel c = {.reason = "stop"}, dc;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	size_t len;

	(void)state;
	o = proto_state_encode(&s);
	text = jsonu_dump(o, &len);
	assert_int_equal(proto_state_decode(text, len, &ds, &e), RCS_OK);
	assert_true(ds.online);
	assert_int_equal(json_object_array_length(ds.tags), 0);
	assert_string_equal(ds.agent_version, "1.2");
	proto_state_free(&ds);
	json_object_put(o);
	text = "{\"v\":1,\"online\":\"yes\"}";
	assert_int_equal(proto_state_decode(text, strlen(text), &ds, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "online");
	text = "{\"v\":1,\"online\":true,\"tags\":[1]}";
	assert_int_equal(proto_state_decode(text, strlen(text), &ds, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "tags[0]");

	memcpy(c.job, JOB, sizeof(JOB));
	o = proto_cancel_encode(&c);
	text = jsonu_dump(o, &len);
	assert_int_equal(proto_cancel_decode(text, len, &dc, &e), RCS_OK);
	assert_string_equal(dc.job, JOB);
	assert_string_equal(dc.reason, "stop");
	proto_cancel_free(&dc);
	json_object_put(o);
}

static void test_envelope_checks_script_hash(void **state)
{
	struct proto_envelope env, d;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	size_t len;
	char *tampered;

	(void)state;
	memset(&env, 0, sizeof(env));
	memcpy(env.job, JOB, sizeof(JOB));
	memcpy(env.client_root, ROOT, sizeof(ROOT));
	memcpy(env.entity_ident, DEV, sizeof(DEV));
	memcpy(env.task_ident, JOB, sizeof(JOB));
	env.task_version = 3;
	env.task_name = "Echo";
	env.script_name = "echo";
	env.script_source = "return 1";
	env.script_len = 8;
	sha256_hex(env.script_source, env.script_len, env.script_sha256);
	env.issued_at = 5;
	env.timeout = 30;
	o = proto_envelope_encode(&env);
	text = jsonu_dump(o, &len);
	assert_int_equal(proto_envelope_decode(text, len, &d, &e), RCS_OK);
	assert_int_equal(d.task_version, 3);
	assert_int_equal(d.expires_at, 0);
	assert_null(d.signature);
	assert_memory_equal(d.script_source, "return 1", 8);
	proto_envelope_free(&d);
	/* one byte of the script changed: the hash no longer matches */
	tampered = strdup(text);
	*strstr(tampered, "return 1") = 'R';
	assert_int_equal(proto_envelope_decode(tampered, len, &d, &e), RCS_ERR_INVAL);
	assert_string_equal(e.field, "script.sha256");
	free(tampered);
	json_object_put(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_topics_round_trip),
	    cmocka_unit_test(test_topics_refused),
	    cmocka_unit_test(test_report),
	    cmocka_unit_test(test_state_and_cancel),
	    cmocka_unit_test(test_envelope_checks_script_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
