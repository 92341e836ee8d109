/*
 * Unit tests of coordinator/metrics.c (docs/coordinator.md, "Metrics"): the Prometheus text
 * format of the exposition over a real (empty) store: one HELP and TYPE line per family
 * before its samples, counters and gauges as `name{label="value"} N`, every histogram's
 * buckets cumulative, ending with le="+Inf" equal to _count, _sum the sum observed, and
 * label values escaped (backslash, double quote, line feed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "metrics.h"
#include "store.h"

/* ---- helpers ---- */

static bool mqtt_up;

static bool probe_up(void *ctx)
{
	return *(bool *)ctx;
}

static char *render_now(void)
{
	char dir[] = "/tmp/rcs-metrics-XXXXXX", path[64];
	struct store *st = NULL;
	struct buf b;
	char *text;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/m.db", dir);
	assert_int_equal(store_open(path, &st), RCS_OK);
	buf_init(&b, (size_t)1 << 20);
	assert_int_equal(metrics_render(st, &b), RCS_OK);
	store_close(st);
	unlink(path);
	rmdir(dir);
	assert_non_null(b.data);
	text = strdup(b.data);
	buf_free(&b);
	assert_non_null(text);
	return text;
}

/* The value of the sample line that starts with prefix ("name{labels}" or "name"), or -1. */
static double sample(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static size_t count_lines(const char *text, const char *prefix)
{
	size_t c = 0, n = strlen(prefix);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, prefix, n) == 0)
			c++;
	return c;
}

/* Every bucket series of histogram name cumulative, the last le="+Inf" = _count. */
static void check_histogram(const char *text, const char *name)
{
	char prefix[128], type[160];
	double last = 0, count;
	size_t n = 0;
	const char *p;

	snprintf(type, sizeof(type), "# TYPE %s histogram\n", name);
	assert_non_null(strstr(text, type));
	snprintf(prefix, sizeof(prefix), "%s_bucket{le=\"", name);
	for (p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
		const char *sp = strchr(p, ' ');
		double v;

		assert_non_null(sp);
		v = strtod(sp + 1, NULL);
		if (v < last)
			fail_msg("%s: bucket %.40s below the one before", name, p);
		last = v;
		n++;
		if (strncmp(p + strlen(prefix), "+Inf\"}", 6) == 0)
			break;
	}
	assert_non_null(p); /* ended with +Inf */
	assert_true(n >= 2);
	snprintf(prefix, sizeof(prefix), "%s_count", name);
	count = sample(text, prefix);
	assert_true(count >= 0);
	assert_true(last == count);
	snprintf(prefix, sizeof(prefix), "%s_sum", name);
	assert_true(sample(text, prefix) >= 0);
}

/* Every line: a comment (# HELP/# TYPE) or `name[{k="v",...}] number`. */
static void check_lines(const char *text)
{
	const char *p = text;

	while (*p) {
		const char *end = strchr(p, '\n');
		char line[512];
		char *sp, *num_end;

		assert_non_null(end); /* every line ends with \n */
		assert_true((size_t)(end - p) < sizeof(line));
		memcpy(line, p, (size_t)(end - p));
		line[end - p] = '\0';
		if (line[0] == '#') {
			assert_true(strncmp(line, "# HELP ", 7) == 0 ||
				    strncmp(line, "# TYPE ", 7) == 0);
		} else {
			assert_true(isalpha((unsigned char)line[0]) || line[0] == '_');
			sp = strrchr(line, ' ');
			assert_non_null(sp);
			strtod(sp + 1, &num_end);
			if (*num_end != '\0' || num_end == sp + 1)
				fail_msg("not a number at the end: '%s'", line);
			if (strchr(line, '{'))
				assert_true(sp[-1] == '}');
		}
		p = end + 1;
	}
}

/* ---- tests ---- */

static void test_label_escaping(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 1024);
	metrics_label(&b, "plain-value_1.0");
	assert_string_equal(b.data, "plain-value_1.0");
	buf_free(&b);
	buf_init(&b, 1024);
	metrics_label(&b, "a\\b\"c\nd");
	assert_string_equal(b.data, "a\\\\b\\\"c\\nd");
	buf_free(&b);
	buf_init(&b, 1024);
	metrics_label(&b, "\"\"\n\\");
	assert_string_equal(b.data, "\\\"\\\"\\n\\\\");
	buf_free(&b);
	buf_init(&b, 1024);
	metrics_label(&b, "");
	metrics_label(&b, NULL);
	assert_true(b.len == 0);
	buf_free(&b);
}

static void test_exposition(void **state)
{
	char *text;

	(void)state;
	/* run time buckets: 0.5 1 5 10 30 ... 14400 */
	metrics_job_run_time(0.5); /* le="0.5": the bound is inclusive */
	metrics_job_run_time(3);
	metrics_job_run_time(3);
	metrics_job_run_time(20000); /* +Inf only */
	metrics_job_run_time(-1);    /* counted as 0 */
	metrics_http("GET", 200, 0.001);
	metrics_http("GET", 200, 0.002);
	metrics_http("POST", 400, 0.3);
	metrics_http("BREW", 418, 99); /* another method: "other" */
	metrics_job_statuses(JS_TERMINATED, 3);
	metrics_job_status(JS_CANCELLED);
	metrics_webhook_attempt(true, false);
	metrics_webhook_attempt(false, true);
	mqtt_up = true;
	metrics_mqtt_probe(probe_up, &mqtt_up);
	metrics_mqtt_in();
	metrics_mqtt_out();
	metrics_mqtt_out();
	metrics_mqtt_report_in();
	metrics_mqtt_report_in();
	metrics_mqtt_shared(true);
	metrics_mqtt_broker("tcp://b2:1883");
	text = render_now();
	check_lines(text);

	/* the run time histogram, bucket by bucket */
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"0.5\"}") == 2);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"1\"}") == 2);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"5\"}") == 4);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"14400\"}") == 4);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"+Inf\"}") == 5);
	assert_true(sample(text, "rcs_job_run_time_seconds_count") == 5);
	assert_true(sample(text, "rcs_job_run_time_seconds_sum") == 20006.5);
	check_histogram(text, "rcs_job_run_time_seconds");
	check_histogram(text, "rcs_job_delivery_latency_seconds");
	assert_true(sample(text, "rcs_job_delivery_latency_seconds_bucket{le=\"+Inf\"}") == 0);
	check_histogram(text, "rcs_http_request_duration_seconds");
	assert_true(sample(text, "rcs_http_request_duration_seconds_bucket{le=\"0.005\"}") == 2);
	assert_true(sample(text, "rcs_http_request_duration_seconds_bucket{le=\"10\"}") == 3);
	assert_true(sample(text, "rcs_http_request_duration_seconds_bucket{le=\"+Inf\"}") == 4);

	/* counters and gauges */
	assert_non_null(strstr(text, "# TYPE rcs_http_requests_total counter\n"));
	assert_true(sample(text, "rcs_http_requests_total{method=\"GET\",code=\"200\"}") == 2);
	assert_true(sample(text, "rcs_http_requests_total{method=\"POST\",code=\"400\"}") == 1);
	assert_true(sample(text, "rcs_http_requests_total{method=\"other\",code=\"418\"}") == 1);
	assert_int_equal(count_lines(text, "rcs_http_requests_total{method=\"BREW\""), 0);
	assert_non_null(strstr(text, "# TYPE rcs_job_status_changes_total counter\n"));
	assert_true(sample(text, "rcs_job_status_changes_total{status=\"terminated\"}") == 3);
	assert_true(sample(text, "rcs_job_status_changes_total{status=\"cancelled\"}") == 1);
	assert_true(sample(text, "rcs_job_status_changes_total{status=\"pending\"}") == 0);
	assert_non_null(strstr(text, "# TYPE rcs_jobs gauge\n"));
	assert_true(sample(text, "rcs_jobs{status=\"pending\"}") == 0);
	/* groups by status: every status, each a sample */
	assert_non_null(strstr(text, "# TYPE rcs_groups gauge\n"));
	assert_true(sample(text, "rcs_groups{status=\"running\"}") == 0);
	assert_true(sample(text, "rcs_groups{status=\"paused\"}") == 0);
	assert_true(sample(text, "rcs_groups{status=\"completed\"}") == 0);
	assert_true(sample(text, "rcs_groups{status=\"aborted\"}") == 0);
	assert_true(sample(text, "rcs_groups{status=\"cancelled\"}") == 0);
	assert_true(sample(text, "rcs_mqtt_connected") == 1);
	assert_true(sample(text, "rcs_mqtt_messages_received_total") == 1);
	assert_true(sample(text, "rcs_mqtt_messages_sent_total") == 2);
	assert_true(sample(text, "rcs_mqtt_reports_received_total") == 2);
	assert_true(sample(text, "rcs_mqtt_shared_subscription") == 1);
	assert_true(sample(text, "rcs_mqtt_broker{url=\"tcp://b2:1883\"}") == 1);
	assert_true(sample(text, "rcs_webhook_attempts_total{result=\"delivered\"}") == 1);
	assert_true(sample(text, "rcs_webhook_attempts_total{result=\"error\"}") == 1);
	assert_true(sample(text, "rcs_webhook_deliveries_failed_total") == 1);
	assert_true(sample(text, "rcs_outbox_backlog{kind=\"webhook\"}") == 0);
	assert_true(sample(text, "rcs_devices_online") == 0);
	assert_true(sample(text, "rcs_database_size_bytes") > 0);

	/* one HELP and one TYPE per family */
	assert_int_equal(count_lines(text, "# TYPE rcs_job_run_time_seconds "), 1);
	assert_int_equal(count_lines(text, "# HELP rcs_job_run_time_seconds "), 1);
	assert_int_equal(count_lines(text, "# TYPE rcs_http_requests_total "), 1);
	free(text);

	/* counters only grow */
	metrics_job_run_time(7);
	mqtt_up = false;
	metrics_mqtt_shared(false);
	metrics_mqtt_broker(NULL);
	text = render_now();
	assert_true(sample(text, "rcs_mqtt_shared_subscription") == 0);
	assert_int_equal(count_lines(text, "rcs_mqtt_broker{"), 0);
	assert_int_equal(count_lines(text, "# TYPE rcs_mqtt_broker gauge"), 1);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"5\"}") == 4);
	assert_true(sample(text, "rcs_job_run_time_seconds_bucket{le=\"10\"}") == 5);
	assert_true(sample(text, "rcs_job_run_time_seconds_count") == 6);
	assert_true(sample(text, "rcs_mqtt_connected") == 0);
	check_histogram(text, "rcs_job_run_time_seconds");
	free(text);
}

/* The moments latencies are measured from: to the millisecond, taken once, per kind, and
 * a slot's newer job wins (docs/coordinator.md "Metrics"). */
static void test_clock(void **state)
{
	const char *a = "0193a2b4-0000-7000-8000-00000000c001";
	const char *b = "0193a2b4-0000-7000-8000-00000000c002";
	struct timespec pause = {0, 120 * 1000 * 1000};
	double took;

	(void)state;
	assert_true(metrics_clock_take(METRICS_DUE, a) < 0); /* never marked */
	metrics_clock_mark(METRICS_DUE, a);
	metrics_clock_mark(METRICS_STARTED, b);
	nanosleep(&pause, NULL);
	assert_true(metrics_clock_take(METRICS_STARTED, a) < 0); /* another kind */
	took = metrics_clock_take(METRICS_DUE, a);
	/* a fraction of a second, not whole seconds */
	assert_true(took >= 0.119 && took < 0.9);
	assert_true(metrics_clock_take(METRICS_DUE, a) < 0); /* taken once */
	took = metrics_clock_take(METRICS_STARTED, b);
	assert_true(took >= 0.119 && took < 0.9);
	/* more jobs than slots: the table stays bounded, the last marked is there */
	for (int i = 0; i < METRICS_CLOCK_SLOTS + 10; i++) {
		char id[40];
		snprintf(id, sizeof(id), "0193a2b4-0000-7000-8000-%012d", i);
		metrics_clock_mark(METRICS_DUE, id);
	}
	{
		char id[40];
		snprintf(id, sizeof(id), "0193a2b4-0000-7000-8000-%012d", METRICS_CLOCK_SLOTS + 9);
		assert_true(metrics_clock_take(METRICS_DUE, id) >= 0);
	}
	/* the histogram keeps the fraction */
	metrics_job_delivery_latency(0.3);
	{
		char *text = render_now();
		assert_true(sample(text, "rcs_job_delivery_latency_seconds_bucket{le=\"0.25\"}") ==
			    0);
		assert_true(sample(text, "rcs_job_delivery_latency_seconds_bucket{le=\"0.5\"}") ==
			    1);
		assert_true(sample(text, "rcs_job_delivery_latency_seconds_sum") == 0.3);
		free(text);
	}
}

/* GET /metrics?name=...: the families named only, whole (a histogram's buckets, sum and
 * count, their HELP and TYPE), and no database read unless a store's gauge is named: here
 * without a store at all. */
static void test_names_only(void **state)
{
	const char *const names[] = {"rcs_job_status_changes_total", "rcs_job_run_time_seconds",
				     "rcs_no_such_family"};
	struct buf b;
	char *all;

	(void)state;
	metrics_job_statuses(JS_TERMINATED, 3);
	buf_init(&b, (size_t)1 << 20);
	assert_int_equal(metrics_render_names(NULL, names, 3, &b), RCS_OK);
	assert_non_null(b.data);
	check_lines(b.data);
	check_histogram(b.data, "rcs_job_run_time_seconds");
	assert_true(sample(b.data, "rcs_job_status_changes_total{status=\"terminated\"}") >= 3);
	assert_int_equal(count_lines(b.data, "rcs_job_status_changes_total{"), JS__COUNT);
	assert_int_equal(count_lines(b.data, "# TYPE "), 2);
	assert_int_equal(count_lines(b.data, "rcs_jobs"), 0);
	assert_int_equal(count_lines(b.data, "rcs_job_delivery_latency"), 0);
	assert_int_equal(count_lines(b.data, "rcs_database_size_bytes"), 0);
	assert_int_equal(count_lines(b.data, "rcs_mqtt"), 0);
	/* the same lines as the whole exposition's */
	all = render_now();
	for (const char *p = b.data; *p;) {
		const char *nl = strchr(p, '\n');
		char line[512];

		assert_non_null(nl);
		snprintf(line, sizeof(line), "%.*s\n", (int)(nl - p), p);
		if (strncmp(line, "rcs_job_status_changes_total", 28) == 0)
			assert_non_null(strstr(all, line));
		p = nl + 1;
	}
	free(all);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_label_escaping),
	    cmocka_unit_test(test_exposition),
	    cmocka_unit_test(test_names_only),
	    cmocka_unit_test(test_clock),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
