/* Unit tests of coordinator/rollout.c: release rates and the token bucket, windows, retry
 * delays and causes (docs/api.md "Rollouts"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "rollout.h"

/* 2026-11-23 was a Monday; 00:00 UTC */
#define MONDAY 1795392000LL

static void test_rates(void **state)
{
	struct group_settings g;

	(void)state;
	memset(&g, 0, sizeof(g));
	assert_false(rollout_has_rate(&g));
	assert_false(rollout_holds(&g));
	assert_true(rollout_rate(&g, 0) == 0.0);
	g.max_per_minute = 60;
	assert_true(rollout_holds(&g));
	assert_true(rollout_rate(&g, 1000) == 60.0);
	/* exponential: base x factor^(succeeded / after), capped by max_per_minute */
	g.base_per_minute = 10;
	g.factor_milli = 2000;
	g.after_succeeded = 5;
	assert_true(rollout_rate(&g, 0) == 10.0);
	assert_true(rollout_rate(&g, 4) == 10.0);
	assert_true(rollout_rate(&g, 5) == 20.0);
	assert_true(rollout_rate(&g, 14) == 40.0);
	assert_true(rollout_rate(&g, 15) == 60.0); /* 80, capped */
	assert_true(rollout_rate(&g, 1000000000LL) == 60.0);
	g.max_per_minute = 0;
	assert_true(rollout_rate(&g, 1000000000LL) == ROLLOUT_MAX_RATE);
	g.factor_milli = 1500;
	assert_true(fabs(rollout_rate(&g, 10) - 22.5) < 1e-9);
}

/* The bucket: rate x time, at most two seconds' worth (one job at least). */
static void test_bucket(void **state)
{
	double t;

	(void)state;
	assert_true(rollout_bucket(60) == 2.0);
	assert_true(rollout_bucket(6) == 1.0);
	assert_true(rollout_bucket(600) == 20.0);
	t = rollout_tokens(0, 1000, 1500, 600); /* half a second at 10/s */
	assert_true(fabs(t - 5.0) < 1e-9);
	assert_true(rollout_tokens(0, 1000, 1000 + 3600000, 600) == 20.0); /* down an hour */
	assert_true(rollout_tokens(3, 5000, 1000, 600) == 3.0);            /* clock went back */
	assert_true(rollout_tokens(-1, 0, 0, 60) == 0.0);
	/* a minute of one-second ticks at 60/min releases 60, within 10 % */
	{
		double tokens = 1;
		long released = 0;

		for (int64_t ms = 0; ms <= 60000; ms += 1000) {
			tokens = rollout_tokens(tokens, ms - 1000 < 0 ? 0 : ms - 1000, ms, 60);
			released += (long)tokens;
			tokens -= (double)(long)tokens;
		}
		assert_in_range(released, 54, 66);
	}
	/* and with late, uneven ticks as well */
	{
		double tokens = 1;
		long released = 0;
		int64_t at = 0;

		for (int64_t ms = 700; ms <= 60000; ms += 700 + (ms % 3) * 400) {
			tokens = rollout_tokens(tokens, at, ms, 600);
			at = ms;
			released += (long)tokens;
			tokens -= (double)(long)tokens;
		}
		assert_in_range(released, 540, 660);
	}
}

static void test_days_and_times(void **state)
{
	(void)state;
	assert_int_equal(rollout_day_bit("mon"), 0);
	assert_int_equal(rollout_day_bit("sun"), 6);
	assert_int_equal(rollout_day_bit("Mon"), -1);
	assert_int_equal(rollout_day_bit(NULL), -1);
	assert_string_equal(rollout_day_name(2), "wed");
	assert_int_equal(rollout_parse_hhmm("00:00"), 0);
	assert_int_equal(rollout_parse_hhmm("23:59"), 1439);
	assert_int_equal(rollout_parse_hhmm("24:00"), -1);
	assert_int_equal(rollout_parse_hhmm("9:00"), -1);
	assert_int_equal(rollout_parse_hhmm("09:60"), -1);
	assert_int_equal(rollout_parse_hhmm("0a:00"), -1);
}

static void test_windows(void **state)
{
	struct group_settings g;

	(void)state;
	memset(&g, 0, sizeof(g));
	assert_true(rollout_window_open(&g, MONDAY));
	g.has_window = true;
	g.days = 1u << 0; /* Monday */
	g.start_min = 22 * 60;
	g.duration_min = 180; /* 22:00 to 01:00 on Tuesday */
	assert_false(rollout_window_open(&g, MONDAY + 21 * 3600 + 3599));
	assert_true(rollout_window_open(&g, MONDAY + 22 * 3600));
	assert_true(rollout_window_open(&g, MONDAY + 24 * 3600 + 3599)); /* Tuesday 00:59 */
	assert_false(rollout_window_open(&g, MONDAY + 25 * 3600));
	assert_false(rollout_window_open(&g, MONDAY + 7 * 86400 - 3600)); /* Sunday 23:00 */
	/* the next opening */
	assert_int_equal(rollout_window_next(&g, MONDAY), MONDAY + 22 * 3600);
	assert_int_equal(rollout_window_next(&g, MONDAY + 23 * 3600), MONDAY + 23 * 3600);
	assert_int_equal(rollout_window_next(&g, MONDAY + 25 * 3600),
			 MONDAY + 7 * 86400 + 22 * 3600);
	/* local time UTC+2: Monday 22:00 local is 20:00 UTC */
	g.utc_offset_min = 120;
	assert_true(rollout_window_open(&g, MONDAY + 20 * 3600));
	assert_false(rollout_window_open(&g, MONDAY + 23 * 3600)); /* 01:00 local Tuesday */
	assert_int_equal(rollout_window_next(&g, MONDAY), MONDAY + 20 * 3600);
	/* UTC-5: Sunday 22:00 local is Monday 03:00 UTC */
	g.utc_offset_min = -300;
	g.days = 1u << 6;
	assert_true(rollout_window_open(&g, MONDAY + 3 * 3600));
	assert_false(rollout_window_open(&g, MONDAY + 6 * 3600));
	/* every day */
	g.days = 0x7f;
	g.utc_offset_min = 0;
	for (int d = 0; d < 7; d++)
		assert_true(rollout_window_open(&g, MONDAY + d * 86400 + 22 * 3600 + 60));
	/* before 1970 too */
	assert_true(rollout_window_open(&g, -86400 + 22 * 3600 + 1));
	g.days = 0;
	assert_int_equal(rollout_window_next(&g, MONDAY), 0);
}

static void test_retries(void **state)
{
	struct group_settings g;

	(void)state;
	memset(&g, 0, sizeof(g));
	g.backoff_s = 30;
	g.backoff_milli = 2000;
	assert_int_equal(rollout_retry_delay(&g, 1), 30);
	assert_int_equal(rollout_retry_delay(&g, 2), 60);
	assert_int_equal(rollout_retry_delay(&g, 3), 120);
	assert_int_equal(rollout_retry_delay(&g, 30), ROLLOUT_MAX_DELAY);
	g.backoff_milli = 1000;
	assert_int_equal(rollout_retry_delay(&g, 9), 30);
	g.backoff_s = 0;
	assert_int_equal(rollout_retry_delay(&g, 3), 0);
	/* causes */
	assert_true(rollout_error_permanent("signature_invalid"));
	assert_true(rollout_error_permanent("variables_invalid"));
	assert_true(rollout_error_permanent("rollback_refused"));
	assert_true(rollout_error_permanent("sandbox_violation"));
	/* rcs.fail's codes, rcs.rollback's and a reboot that did not come back */
	assert_true(rollout_error_permanent("install_failed"));
	assert_true(rollout_error_permanent("health_check_failed"));
	assert_true(rollout_error_permanent("incompatible"));
	assert_true(rollout_error_permanent("rolled_back"));
	assert_true(rollout_error_permanent("reboot_timeout"));
	assert_false(rollout_error_permanent("script_error"));
	assert_false(rollout_error_permanent("timeout"));
	assert_false(rollout_error_permanent("interrupted"));
	assert_false(rollout_error_permanent("storage_full"));
	assert_false(rollout_error_permanent(NULL));
}

/* The time to release what a group holds, at its pace and in its window (docs/api.md
 * "Progress"). */
static void test_release_eta(void **state)
{
	struct group_settings g;

	(void)state;
	memset(&g, 0, sizeof(g));
	/* nothing held, or no rollout: nothing holds it back */
	assert_int_equal(rollout_release_eta(&g, 0, 0, MONDAY), 0);
	assert_int_equal(rollout_release_eta(&g, 25, 0, MONDAY), 0);
	/* 25 jobs at 5 a minute: 5 minutes, not the seconds the first ones took */
	g.max_per_minute = 5;
	assert_int_equal(rollout_release_eta(&g, 25, 0, MONDAY), 300);
	assert_int_equal(rollout_release_eta(&g, 1, 0, MONDAY), 12);
	/* exponential: at the pace reached so far (10 a minute after 20 successes, × 2) */
	g.max_per_minute = 0;
	g.base_per_minute = 5;
	g.factor_milli = 2000;
	g.after_succeeded = 20;
	assert_int_equal(rollout_release_eta(&g, 25, 20, MONDAY), 150);
	/* a window: Monday 22:00-23:00; outside it the wait for it is added */
	g.base_per_minute = 0;
	g.factor_milli = 0;
	g.after_succeeded = 0;
	g.max_per_minute = 10;
	g.has_window = true;
	g.days = 1u << 0;
	g.start_min = 22 * 60;
	g.duration_min = 60;
	assert_int_equal(rollout_release_eta(&g, 30, 0, MONDAY + 22 * 3600), 180);
	assert_int_equal(rollout_release_eta(&g, 30, 0, MONDAY), 22 * 3600 + 180);
	/* 700 jobs: 600 this Monday, the last 100 next Monday, ten minutes in */
	assert_int_equal(rollout_release_eta(&g, 700, 0, MONDAY + 22 * 3600), 7 * 86400 + 600);
	/* a window without a rate: everything when it opens */
	g.max_per_minute = 0;
	assert_int_equal(rollout_release_eta(&g, 5000, 0, MONDAY + 3600), 21 * 3600);
	/* a window without a day: no telling */
	g.days = 0;
	assert_int_equal(rollout_release_eta(&g, 5, 0, MONDAY), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rates),          cmocka_unit_test(test_bucket),
	    cmocka_unit_test(test_days_and_times), cmocka_unit_test(test_windows),
	    cmocka_unit_test(test_retries),        cmocka_unit_test(test_release_eta),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
