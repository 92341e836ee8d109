/* Unit tests of render_jobs.c's job, history, notification and group records: the exact text of
 * each, as the API answers it (docs/api.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <json-c/json.h>

#include "manifest.h"
#include "proto.h"
#include "render.h"
#include "store_groups.h"
#include "store_jobs.h"

#define JOB  "0193a2b4-0000-7000-8000-00000000a001"
#define JOB2 "0193a2b4-0000-7000-8000-00000000a002"
#define TASK "0193a2b4-0000-7000-8000-00000000b002"
#define DEV  "0193a2b4-0000-7000-8000-00000000c003"
#define DEV2 "0193a2b4-0000-7000-8000-00000000c004"
#define ROOT "0193a2b4-0000-7000-8000-00000000d004"

/* A pending job without group, comment or response; strings borrowed. */
static struct job_rec job(void)
{
	struct job_rec r;

	memset(&r, 0, sizeof(r));
	memcpy(r.ident, JOB, sizeof(JOB));
	memcpy(r.client_root, ROOT, sizeof(ROOT));
	memcpy(r.entity_ident, DEV, sizeof(DEV));
	memcpy(r.task_ident, TASK, sizeof(TASK));
	r.task_version = 3;
	r.task_name = "Echo";
	r.status = JS_PENDING;
	r.created_user = "alice";
	r.created_at = r.update_at = 200;
	r.mail_list = "[]";
	r.status_list = "[]";
	r.variables = "{\"m\":\"hi\"}";
	return r;
}

#define JOB_TEXT(ident, dev, status, update_at, response_time, response)                           \
	JOB_TEXT_P(ident, dev, status, update_at, response_time, response, "null")
/* with the job's phase (docs/api.md "Jobs") */
#define JOB_TEXT_P(ident, dev, status, update_at, response_time, response, phase)                  \
	"{\"ident\":\"" ident "\",\"task\":{\"version\":3,\"ident\":\"" TASK                       \
	"\",\"name\":\"Echo\"},"                                                                   \
	"\"group\":null,\"client_root\":\"" ROOT "\",\"entity_ident\":\"" dev                      \
	"\",\"target\":null,"                                                                      \
	"\"comment\":null,\"status\":\"" status                                                    \
	"\",\"created_user\":\"alice\",\"created_at\":200,"                                        \
	"\"update_at\":" update_at ",\"scheduled_time\":null,\"response_time\":" response_time     \
	",\"ttl\":null,\"payload\":null,\"response\":" response ",\"notification_mail_list\":[],"  \
	"\"notification_status_list\":[],\"variables\":{\"m\":\"hi\"},\"attempt\":1,"              \
	"\"retry_of\":null,\"error_code\":null,\"progress\":null,\"phase\":" phase "}"

static void test_job(void **state)
{
	struct job_rec r = job();
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_job(&w, &r);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(b.data, JOB_TEXT(JOB, DEV, "pending", "200", "null", "null"));
	buf_free(&b);
	/* a group, a schedule, a ttl */
	memcpy(r.group_ident, TASK, sizeof(TASK));
	r.group_name = "night";
	r.scheduled_time = 300;
	r.ttl = 60;
	r.comment = "c";
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_job(&w, &r);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_non_null(strstr(b.data, "\"group\":{\"ident\":\"" TASK "\",\"name\":\"night\"}"));
	assert_non_null(
	    strstr(b.data, "\"scheduled_time\":300,\"response_time\":null,\"ttl\":60,"));
	assert_non_null(strstr(b.data, "\"comment\":\"c\","));
	buf_free(&b);
	/* the phase of its last report */
	r.phase = "verify";
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_job(&w, &r);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_non_null(strstr(b.data, "\"progress\":null,\"phase\":\"verify\"}"));
	buf_free(&b);
}

/* Each history entry is the job's record with the entry's status, time, response and phase
 * (the job's own phase is its last one). */
static void test_history_page(void **state)
{
	struct job_rec r = job();
	struct history_rec h[2] = {{JS_TERMINATED, 260, "done", 260, "verify"},
				   {JS_PENDING, 200, NULL, 0, NULL}};
	struct store_history_list l = {
	    .pg = {.page = 1, .per_page = 2, .total = 3}, .items = h, .n = 2};
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	r.phase = "install";
	render_history_page(&w, &r, &l);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(
	    b.data,
	    "{\"page\":1,\"per_page\":2,\"total_pages\":2,\"total_items\":3,\"items\":[" JOB_TEXT_P(
		JOB, DEV, "terminated", "260", "260", "\"done\"",
		"\"verify\"") "," JOB_TEXT(JOB, DEV, "pending", "200", "null", "null") "]}");
	buf_free(&b);
}

/* A batch's copies carry their own idents and are the records render_job writes. */
static void test_job_batch(void **state)
{
	struct job_rec r = job();
	struct render_job_copy c;
	struct render w;
	struct buf b;

	(void)state;
	memset(&c, 0, sizeof(c));
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_arr_open(&w);
	render_job_batch(&w, &c, &r, false);
	memcpy(r.ident, JOB2, sizeof(JOB2));
	memcpy(r.entity_ident, DEV2, sizeof(DEV2));
	render_job_batch(&w, &c, &r, true);
	render_arr_close(&w);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_non_null(c.text);
	assert_string_equal(b.data,
			    "[" JOB_TEXT(JOB, DEV, "pending", "200", "null", "null") "," JOB_TEXT(
				JOB2, DEV2, "pending", "200", "null", "null") "]");
	render_job_copy_free(&c);
	buf_free(&b);
}

static void test_notification_page(void **state)
{
	struct job_notification_rec n[2] = {
	    {"ops@example.com", "terminated", "sent", 1, 200, 201, NULL},
	    {"dev@example.com", "pending", "queued", 2, 200, 0, "421 try later"},
	};
	struct store_job_notification_list l = {
	    .pg = {.page = 1, .per_page = 50, .total = 2}, .items = n, .n = 2};
	struct render w;
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_job_notification_page(&w, &l);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(
	    b.data, "{\"page\":1,\"per_page\":50,\"total_pages\":1,\"total_items\":2,\"items\":["
		    "{\"address\":\"ops@example.com\",\"status\":\"terminated\",\"state\":\"sent\","
		    "\"attempts\":1,\"created_at\":200,\"sent_at\":201,\"last_error\":null},"
		    "{\"address\":\"dev@example.com\",\"status\":\"pending\",\"state\":\"queued\","
		    "\"attempts\":2,\"created_at\":200,\"sent_at\":null,"
		    "\"last_error\":\"421 try later\"}]}");
	buf_free(&b);
}

/* A group of a list has no counts; GET /groups/<id> has its total and statuses. */
static void test_group(void **state)
{
	struct group_rec g;
	struct store_group_list l = {
	    .pg = {.page = 1, .per_page = 50, .total = 1}, .items = &g, .n = 1};
	struct render w;
	struct buf b;

	(void)state;
	memset(&g, 0, sizeof(g));
	memcpy(g.ident, JOB, sizeof(JOB));
	memcpy(g.task_ident, TASK, sizeof(TASK));
	g.name = "night";
	g.created_user = "alice";
	g.created_at = 200;
	g.task_version = 3;
	g.task_name = "Echo";
	/* a list's progress: the tallies' six counts (docs/api.md "Progress") */
	g.progress = (struct group_progress){.devices = 9,
					     .ended = 5,
					     .succeeded = 3,
					     .failed = 1,
					     .cancelled = 1,
					     .open = 4,
					     .held = 2,
					     .release_eta_s = 30};
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_group_page(&w, &l);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(
	    b.data,
	    "{\"page\":1,\"per_page\":50,\"total_pages\":1,\"total_items\":1,\"items\":["
	    "{\"ident\":\"" JOB "\",\"name\":\"night\",\"created_user\":\"alice\","
	    "\"created_at\":200,\"task_ident\":\"" TASK "\",\"task\":{\"version\":3,"
	    "\"ident\":\"" TASK "\",\"name\":\"Echo\"},\"status\":\"running\","
	    "\"reason\":null,\"tag\":null,\"rollout\":null,\"abort\":null,"
	    "\"window\":null,\"retry\":null,\"continuous\":false,\"download\":null,\"progress\":{"
	    "\"devices\":9,\"ended\":5,\"succeeded\":3,\"failed\":1,\"cancelled\":1,"
	    "\"open\":4}}]}");
	buf_free(&b);
	/* GET /groups/<id>: every setting, the totals and the latest attempts' counts */
	g.with_counts = true;
	g.total = 7;
	g.statuses[0] = (struct group_count){JS_EDGE_STARTED, 1};
	g.statuses[1] = (struct group_count){JS_PENDING, 6};
	g.n_statuses = 2;
	g.counts[0] = (struct group_count){JS_PENDING, 5};
	g.n_counts = 1;
	g.progress = (struct group_progress){
	    .devices = 5, .open = 5, .held = 3, .retries = 2, .release_eta_s = -1};
	g.error_codes[0] = (struct group_error_count){"rolled_back", 2};
	g.error_codes[1] = (struct group_error_count){"timeout", 1};
	g.n_error_codes = 2;
	g.status = GROUP_ABORTED;
	g.reason = "too many";
	g.tag = "lab";
	g.settings = (struct group_settings){
	    .max_per_minute = 60,
	    .base_per_minute = 5,
	    .factor_milli = 1500,
	    .after_succeeded = 10,
	    .has_abort = true,
	    .failure_pct = 1250,
	    .min_finished = 4,
	    .has_window = true,
	    .days = 1u | 4u | 64u,
	    .start_min = 22 * 60 + 5,
	    .duration_min = 90,
	    .utc_offset_min = -300,
	    .has_retry = true,
	    .max_attempts = 3,
	    .backoff_s = 30,
	    .backoff_milli = 2000,
	    .continuous = true,
	    .dl_max_concurrent = 2,
	    .dl_max_bytes_per_s = 1048576,
	};
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_group(&w, &g);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(
	    b.data,
	    "{\"ident\":\"" JOB
	    "\",\"name\":\"night\",\"created_user\":\"alice\",\"created_at\":200,"
	    "\"task_ident\":\"" TASK "\",\"task\":{\"version\":3,\"ident\":\"" TASK "\","
	    "\"name\":\"Echo\"},\"status\":\"aborted\",\"reason\":\"too many\",\"tag\":\"lab\","
	    "\"rollout\":{\"max_per_minute\":60,\"exponential\":{\"base_per_minute\":5,"
	    "\"factor\":1.5,\"after_succeeded\":10}},\"abort\":{\"failure_percent\":12.5,"
	    "\"min_finished\":4},\"window\":{\"days\":[\"mon\",\"wed\",\"sun\"],\"start\":"
	    "\"22:05\",\"duration_min\":90,\"utc_offset_min\":-300},\"retry\":{"
	    "\"max_attempts\":3,\"backoff_s\":30,\"backoff_factor\":2},\"continuous\":true,"
	    "\"download\":{\"max_concurrent\":2,\"max_bytes_per_s\":1048576},"
	    "\"progress\":{\"devices\":5,\"ended\":0,\"succeeded\":0,\"failed\":0,"
	    "\"cancelled\":0,\"open\":5,\"held\":3,\"not_sent\":0,\"retries\":2,"
	    "\"release_eta_s\":null},\"total\":7,\"statuses\":{\"edge_started\":1,\"pending\":6},"
	    "\"counts\":{"
	    "\"pending\":5},\"error_codes\":{\"rolled_back\":2,\"timeout\":1}}");
	buf_free(&b);
}

/* render_envelope writes the JSON proto_envelope_encode builds, which the agent decodes. */
static void test_envelope_as_encoded(void **state)
{
	static const char src[] = "local s = \"a\\\"b\"\nreturn rcs.variables.message .. s\n";
	json_object *constants = json_tokener_parse("{\"c\":1,\"nested\":{\"l\":[1,\"\u00e9\"]}}");
	json_object *vinfo = json_tokener_parse("{\"message\":{\"type\":\"string\"}}");
	json_object *sig = json_tokener_parse(
	    "{\"alg\":\"ES256\",\"key_id\":\"0123456789abcdef\",\"value\":\"AAAA\"}");
	const char *vars[] = {"{\"message\":\"hi \\\"there\\\"\"}", "{}"};

	(void)state;
	for (int k = 0; k < 2; k++) {
		struct proto_envelope env, back;
		struct jsonu_err e;
		struct render w;
		struct buf b;
		json_object *want, *got;
		char *text;
		size_t len;

		memset(&env, 0, sizeof(env));
		snprintf(env.job, sizeof(env.job), "0190a0b0-0000-7000-8000-00000000000%d", k);
		snprintf(env.client_root, sizeof(env.client_root), "%s",
			 "0190a0b0-0000-7000-8000-0000000000aa");
		snprintf(env.entity_ident, sizeof(env.entity_ident), "%s",
			 "0190a0b0-0000-7000-8000-0000000000bb");
		snprintf(env.task_ident, sizeof(env.task_ident), "%s",
			 "0190a0b0-0000-7000-8000-0000000000cc");
		env.task_version = 3;
		env.task_name = k ? "plain" : "Ech\"o \u00e9\t";
		env.script_name = "echo";
		sha256_hex(src, strlen(src), env.script_sha256);
		env.script_source = src;
		env.script_len = strlen(src);
		env.constants = k ? NULL : constants;
		env.variables_info = vinfo;
		env.signature = k ? NULL : sig;
		env.issued_at = 1700000000;
		env.expires_at = k ? 0 : 1700003600;
		env.timeout = 30;
		text = proto_envelope_version_text(&env, &len);
		assert_non_null(text);
		assert_int_equal(strlen(text), len);
		buf_init(&b, 1 << 20);
		render_init(&w, &b);
		render_envelope(&w, &env, text, len, vars[k]);
		assert_int_equal(render_end(&w), RCS_OK);
		env.variables = json_tokener_parse(vars[k]);
		want = proto_envelope_encode(&env);
		got = json_tokener_parse(b.data);
		assert_non_null(got);
		assert_true(json_object_equal(want, got));
		assert_int_equal(proto_envelope_decode(b.data, b.len, &back, &e), RCS_OK);
		assert_string_equal(back.task_name, env.task_name);
		proto_envelope_free(&back);
		json_object_put(want);
		json_object_put(got);
		json_object_put(env.variables);
		buf_free(&b);
		free(text);
	}
	json_object_put(constants);
	json_object_put(vinfo);
	json_object_put(sig);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_job),       cmocka_unit_test(test_history_page),
	    cmocka_unit_test(test_job_batch), cmocka_unit_test(test_notification_page),
	    cmocka_unit_test(test_group),     cmocka_unit_test(test_envelope_as_encoded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
