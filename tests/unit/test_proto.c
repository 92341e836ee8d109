/* Unit tests of common/proto.c: topics and the four message kinds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "manifest.h"
#include "buf.h"
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

/* ---- a report's two paths give the same report (proto_report_decode) ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static unsigned rnd(unsigned n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (unsigned)(rng_state % n);
}

/* Whitespace as JSON allows it between tokens: mostly none. */
static void put_ws(char *out, size_t size)
{
	static const char *const ws[] = {"", "", "", " ", "\n  ", "\t", "\r\n"};

	strncat(out, ws[rnd(sizeof(ws) / sizeof(ws[0]))], size - strlen(out) - 1);
}

/* A report's text from variants of each member: mostly what agents send, and each kind of
 * text the plain path must leave to the general one. */
static void make_report(char *out, size_t size, const char *long_text)
{
	static const char *const vs[] = {"1",     "1",  "1",   "2",    "0",
					 "\"1\"", "01", "1.0", "null", "-1"};
	static const char *const jobs[] = {
	    "\"" JOB "\"", "\"" JOB "\"",  "\"" JOB "\"",
	    "\"x\"",       "\"" JOB "x\"", "\"\\u0030" JOB "\"",
	    "null",        "12",           "\"01a1ff99-0cb5-7cdc-9b13-20e73ed7e40\""};
	static const char *const statuses[] = {"\"edge_transmitted\"",
					       "\"edge_started\"",
					       "\"edge_running\"",
					       "\"terminated\"",
					       "\"edge_error\"",
					       "\"cancelled\"",
					       "\"transmited\"",
					       "\"EDGE_RUNNING\"",
					       "\"edge_runn\\u0069ng\"",
					       "null",
					       "3",
					       "\"\""};
	static const char *const seqs[] = {"1",
					   "2",
					   "4",
					   "999999999999999999",
					   "1000000000000000000",
					   "9223372036854775806",
					   "9223372036854775807",
					   "0",
					   "-1",
					   "1e3",
					   "3.0",
					   "\"3\"",
					   "null",
					   "007",
					   "true"};
	static const char *const tss[] = {"1795392000", "0",     "null",  "-5",
					  "1.5",        "\"1\"", "false", "1795392000123"};
	static const char *const responses[] = {NULL,
						NULL,
						"null",
						"\"ok\"",
						"\"\"",
						"\"with \\\"quotes\\\"\"",
						"\"\xc3\xbcnicode\"",
						"\"tab\tinside\"",
						"\"a\\u0000b\"",
						"42",
						"[1]",
						"{\"a\":1}",
						"LONG",
						"LONG+1"};
	static const char *const errors[] = {NULL,
					     NULL,
					     "null",
					     "\"timeout\"",
					     "\"script_error\"",
					     "\"Bad\"",
					     "\"\"",
					     "\"a23456789012345678901234567890123\"",
					     "1"};
	static const char *const phases[] = {NULL,
					     NULL,
					     "null",
					     "\"verify\"",
					     "\"install_2\"",
					     "\"Verify\"",
					     "\"\"",
					     "\"a23456789012345678901234567890123\"",
					     "\"ver\\u0069fy\"",
					     "3"};
	static const char *const withins[] = {NULL, NULL,    "null", "900", "30",    "86400",
					      "29", "86401", "-5",   "1e3", "\"60\""};
	const char *members[12][2];
	size_t n = 0;

	/* each member mostly one of its first (valid) variants */
#define PICK(a, good) (a)[rnd(6) ? rnd(good) : rnd(sizeof(a) / sizeof((a)[0]))]
	members[n][0] = "v", members[n++][1] = PICK(vs, 1);
	members[n][0] = "job", members[n++][1] = PICK(jobs, 1);
	members[n][0] = "status", members[n++][1] = PICK(statuses, 5);
	members[n][0] = "seq", members[n++][1] = PICK(seqs, 6);
	members[n][0] = "ts", members[n++][1] = PICK(tss, 3);
	members[n][0] = "response", members[n++][1] = PICK(responses, 7);
	members[n][0] = "error", members[n++][1] = PICK(errors, 5);
	members[n][0] = "phase", members[n++][1] = PICK(phases, 5);
	members[n][0] = "within", members[n++][1] = PICK(withins, 6);
#undef PICK
	if (rnd(20) == 0)
		members[n][0] = "extra", members[n++][1] = "1";
	if (rnd(20) == 0)
		members[n][0] = "seq", members[n++][1] = "5"; /* twice */
	if (rnd(30) == 0)
		members[rnd((unsigned)n)][1] = NULL; /* a required one missing, now and then */
	/* in any order */
	for (size_t i = n; i > 1; i--) {
		size_t j = rnd((unsigned)i);
		const char *k = members[i - 1][0], *v = members[i - 1][1];

		members[i - 1][0] = members[j][0], members[i - 1][1] = members[j][1];
		members[j][0] = k, members[j][1] = v;
	}
	out[0] = '\0';
	put_ws(out, size);
	strncat(out, "{", size - strlen(out) - 1);
	for (size_t i = 0, put = 0; i < n; i++) {
		const char *v = members[i][1];

		if (v == NULL)
			continue;
		if (put++ > 0)
			strncat(out, ",", size - strlen(out) - 1);
		put_ws(out, size);
		strncat(out, "\"", size - strlen(out) - 1);
		strncat(out, members[i][0], size - strlen(out) - 1);
		strncat(out, "\"", size - strlen(out) - 1);
		put_ws(out, size);
		strncat(out, ":", size - strlen(out) - 1);
		put_ws(out, size);
		if (strcmp(v, "LONG") == 0 || strcmp(v, "LONG+1") == 0) {
			strncat(out, "\"", size - strlen(out) - 1);
			strncat(out, long_text + (v[4] == '+' ? 0 : 1), size - strlen(out) - 1);
			strncat(out, "\"", size - strlen(out) - 1);
		} else {
			strncat(out, v, size - strlen(out) - 1);
		}
		put_ws(out, size);
	}
	strncat(out, "}", size - strlen(out) - 1);
	put_ws(out, size);
	switch (rnd(40)) {
	case 0:
		strncat(out, "x", size - strlen(out) - 1); /* after the object */
		break;
	case 1:
		out[strlen(out) / 2] = '\0'; /* cut short */
		break;
	case 2:
		strncat(out, "{}", size - strlen(out) - 1);
		break;
	default:
		break;
	}
}

/* An edge_running report's progress (docs/mqtt.md "Status report"): encoded, decoded, kept
 * on edge_running only; malformed ones refused naming progress. */
static void test_report_progress(void **state)
{
	static const char *const bad[] = {"{\"done\":11,\"total\":10}",
					  "{\"done\":-1,\"total\":10}",
					  "{\"done\":1}",
					  "{\"done\":1,\"total\":2,\"x\":3}",
					  "[1,2]",
					  "{\"done\":\"1\",\"total\":2}"};
	struct proto_report r = {.status = JS_EDGE_RUNNING,
				 .seq = 3,
				 .ts = 10,
				 .response = "downloading firmware: 42 %",
				 .has_progress = true,
				 .progress_done = 42,
				 .progress_total = 100};
	struct proto_report d;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	char buf[512];
	size_t len;

	(void)state;
	memcpy(r.job, JOB, sizeof(JOB));
	o = proto_report_encode(&r);
	text = jsonu_dump(o, &len);
	assert_non_null(strstr(text, "\"progress\":{\"done\":42,\"total\":100}"));
	assert_int_equal(proto_report_decode(text, len, &d, &e), RCS_OK);
	assert_true(d.has_progress);
	assert_int_equal(d.progress_done, 42);
	assert_int_equal(d.progress_total, 100);
	proto_report_free(&d);
	json_object_put(o);
	/* null, or on another status: none */
	snprintf(buf, sizeof(buf),
		 "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\",\"seq\":2,\"ts\":1,"
		 "\"progress\":null}",
		 JOB);
	assert_int_equal(proto_report_decode(buf, strlen(buf), &d, &e), RCS_OK);
	assert_false(d.has_progress);
	proto_report_free(&d);
	snprintf(buf, sizeof(buf),
		 "{\"v\":1,\"job\":\"%s\",\"status\":\"terminated\",\"seq\":2,\"ts\":1,"
		 "\"progress\":{\"done\":1,\"total\":1}}",
		 JOB);
	assert_int_equal(proto_report_decode(buf, strlen(buf), &d, &e), RCS_OK);
	assert_false(d.has_progress);
	proto_report_free(&d);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf),
			 "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\",\"seq\":2,"
			 "\"ts\":1,\"progress\":%s}",
			 JOB, bad[i]);
		assert_int_not_equal(proto_report_decode(buf, strlen(buf), &d, &e), RCS_OK);
		assert_string_equal(e.field, "progress");
	}
}

/* A report's phase and a "rebooting" report's within (docs/mqtt.md "Status report"):
 * encoded, decoded on both paths; within kept on edge_running with a phase only; malformed
 * ones refused naming the member. */
static void test_report_phase(void **state)
{
	static const char *const bad[][2] = {
	    {"\"phase\":\"Verify\"", "phase"},
	    {"\"phase\":\"\"", "phase"},
	    {"\"phase\":3", "phase"},
	    {"\"phase\":\"a23456789012345678901234567890123\"", "phase"},
	    {"\"phase\":\"verify\",\"within\":29", "within"},
	    {"\"phase\":\"verify\",\"within\":86401", "within"},
	    {"\"phase\":\"verify\",\"within\":\"60\"", "within"}};
	struct proto_report r = {.status = JS_EDGE_RUNNING,
				 .seq = 4,
				 .ts = 10,
				 .response = "rebooting",
				 .phase = "verify",
				 .within = 600};
	struct proto_report d;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	char buf[512];
	size_t len;

	(void)state;
	memcpy(r.job, JOB, sizeof(JOB));
	o = proto_report_encode(&r);
	text = jsonu_dump(o, &len);
	assert_non_null(strstr(text, "\"phase\":\"verify\""));
	assert_non_null(strstr(text, "\"within\":600"));
	assert_int_equal(proto_report_decode(text, len, &d, &e), RCS_OK);
	assert_string_equal(d.phase, "verify");
	assert_int_equal(d.within, 600);
	proto_report_free(&d);
	assert_int_equal(proto_report_decode_json(text, len, &d, &e), RCS_OK);
	assert_string_equal(d.phase, "verify");
	assert_int_equal(d.within, 600);
	proto_report_free(&d);
	json_object_put(o);
	/* a final report keeps its phase, never a within */
	r.status = JS_TERMINATED;
	o = proto_report_encode(&r);
	text = jsonu_dump(o, &len);
	assert_null(strstr(text, "within"));
	assert_int_equal(proto_report_decode(text, len, &d, &e), RCS_OK);
	assert_string_equal(d.phase, "verify");
	assert_int_equal(d.within, 0);
	proto_report_free(&d);
	json_object_put(o);
	/* a within without a phase: none */
	snprintf(buf, sizeof(buf),
		 "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\",\"seq\":2,\"ts\":1,"
		 "\"within\":60}",
		 JOB);
	assert_int_equal(proto_report_decode(buf, strlen(buf), &d, &e), RCS_OK);
	assert_null(d.phase);
	assert_int_equal(d.within, 0);
	proto_report_free(&d);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf),
			 "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\",\"seq\":2,"
			 "\"ts\":1,%s}",
			 JOB, bad[i][0]);
		assert_int_not_equal(proto_report_decode(buf, strlen(buf), &d, &e), RCS_OK);
		assert_string_equal(e.field, bad[i][1]);
	}
}

static void test_report_plain_path_as_json(void **state)
{
	size_t size = PROTO_MAX_RESPONSE + 4096, plain = 0, accepted = 0;
	char *text = malloc(size), *long_text = malloc(PROTO_MAX_RESPONSE + 2);

	(void)state;
	assert_non_null(text);
	assert_non_null(long_text);
	memset(long_text, 'r', PROTO_MAX_RESPONSE + 1); /* LONG+1: one byte too many */
	long_text[PROTO_MAX_RESPONSE + 1] = '\0';
	for (int i = 0; i < 40000; i++) {
		struct proto_report a, b;
		struct jsonu_err ea, eb;
		enum rcs_err ra, rb;

		make_report(text, size, long_text);
		ra = proto_report_decode(text, strlen(text), &a, &ea);
		rb = proto_report_decode_json(text, strlen(text), &b, &eb);
		if (ra != rb)
			fail_msg("%s: %d by proto_report_decode, %d by the JSON path", text, ra,
				 rb);
		if (ra == RCS_OK) {
			accepted++;
			plain += a.text != NULL;
			assert_string_equal(a.job, b.job);
			assert_int_equal(a.status, b.status);
			assert_int_equal(a.seq, b.seq);
			assert_int_equal(a.ts, b.ts);
			assert_int_equal(a.response == NULL, b.response == NULL);
			if (a.response)
				assert_string_equal(a.response, b.response);
			assert_int_equal(a.error == NULL, b.error == NULL);
			if (a.error)
				assert_string_equal(a.error, b.error);
			assert_int_equal(a.phase == NULL, b.phase == NULL);
			if (a.phase)
				assert_string_equal(a.phase, b.phase);
			assert_int_equal(a.within, b.within);
		} else {
			assert_string_equal(ea.field, eb.field);
			assert_string_equal(ea.message, eb.message);
			assert_null(a.text);
			assert_null(a.root);
		}
		proto_report_free(&a);
		proto_report_free(&b);
	}
	/* both paths were taken, the plain one for most accepted reports */
	assert_true(accepted > 1000);
	assert_true(plain > accepted / 2);
	assert_true(plain < accepted);
	free(text);
	free(long_text);
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
	/* attributes (docs/mqtt.md "Device state"): an object of valid keys and values */
	s.attributes = json_tokener_parse("{\"fw\":\"2.0\",\"board.rev\":\"B\"}");
	o = proto_state_encode(&s);
	text = jsonu_dump(o, &len);
	assert_int_equal(proto_state_decode(text, len, &ds, &e), RCS_OK);
	assert_string_equal(json_object_get_string(json_object_object_get(ds.attributes, "fw")),
			    "2.0");
	proto_state_free(&ds);
	json_object_put(o);
	json_object_put(s.attributes);
	s.attributes = NULL;
	{
		static const char *const bad[] = {
		    "{\"v\":1,\"online\":true,\"attributes\":[]}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"fw\":1}}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"a b\":\"1\"}}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"a:b\":\"1\"}}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"\":\"1\"}}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"fw\":\"a\\u0007\"}}",
		    "{\"v\":1,\"online\":true,\"attributes\":{\"fw\":\"a\\u0085\"}}",
		    NULL};
		for (size_t i = 0; bad[i]; i++) {
			assert_int_equal(proto_state_decode(bad[i], strlen(bad[i]), &ds, &e),
					 RCS_ERR_INVAL);
			assert_string_equal(e.field, "attributes");
		}
	}
	{
		/* 33 keys, or more than 4 KiB: refused */
		struct buf b;

		buf_init(&b, 1 << 16);
		buf_appendf(&b, "%s", "{\"v\":1,\"online\":true,\"attributes\":{");
		for (int i = 0; i < 33; i++)
			buf_appendf(&b, "%s\"k%d\":\"v\"", i ? "," : "", i);
		buf_appendf(&b, "%s", "}}");
		assert_int_equal(proto_state_decode(b.data, b.len, &ds, &e), RCS_ERR_INVAL);
		buf_reset(&b);
		buf_appendf(&b, "%s", "{\"v\":1,\"online\":true,\"attributes\":{");
		for (int i = 0; i < 5; i++) {
			buf_appendf(&b, "%s\"k%d\":\"", i ? "," : "", i);
			for (int j = 0; j < 1000; j++)
				buf_appendf(&b, "%s", "x");
			buf_appendf(&b, "%s", "\"");
		}
		buf_appendf(&b, "%s", "}}");
		assert_int_equal(proto_state_decode(b.data, b.len, &ds, &e), RCS_ERR_INVAL);
		buf_free(&b);
	}

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
	    cmocka_unit_test(test_report_plain_path_as_json),
	    cmocka_unit_test(test_report_progress),
	    cmocka_unit_test(test_report_phase),
	    cmocka_unit_test(test_state_and_cancel),
	    cmocka_unit_test(test_envelope_checks_script_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
