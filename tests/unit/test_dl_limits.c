/* Unit tests of coordinator/dl_limits.c: a group's devices downloading at once and its
 * shared byte rate (docs/api.md "Download limits"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "dl_limits.h"

#define G1 "0190a0a0-0000-7000-8000-000000000001"
#define G2 "0190a0a0-0000-7000-8000-000000000002"
#define D1 "0190a0a0-0000-7000-8000-0000000000d1"
#define D2 "0190a0a0-0000-7000-8000-0000000000d2"
#define D3 "0190a0a0-0000-7000-8000-0000000000d3"

static void test_concurrent(void **state)
{
	struct dl_limits *l = NULL;
	struct dl_limit one = {1, 0}, none = {0, 0};
	int64_t t = 1000000;
	int ra = -1;

	(void)state;
	assert_int_equal(dl_limits_new(&l), RCS_OK);
	/* the first device holds the one place; a second is refused while it downloads */
	assert_true(dl_limits_admit(l, G1, D1, &one, t, &ra));
	assert_int_equal(ra, 0);
	assert_false(dl_limits_admit(l, G1, D2, &one, t + 10, &ra));
	assert_int_equal(ra, DL_RETRY_S); /* all in flight: no end foreseen */
	/* the same device again (a resume, the next artifact): admitted */
	assert_true(dl_limits_admit(l, G1, D1, &one, t + 20, &ra));
	dl_limits_end(l, G1, D1, false, t + 30);
	assert_int_equal(dl_limits_active(l, G1, t + 40), 1);
	/* a request in flight still: the end of the first did not free the place */
	assert_false(dl_limits_admit(l, G1, D2, &one, t + 50, &ra));
	/* cut off without its last byte: it keeps its place DL_IDLE_MS after its last request */
	dl_limits_end(l, G1, D1, false, t + 1000);
	assert_false(dl_limits_admit(l, G1, D2, &one, t + 2000, &ra));
	assert_int_equal(ra, (DL_IDLE_MS - 1000 + 999) / 1000);
	/* another group is not held by G1's devices */
	assert_true(dl_limits_admit(l, G2, D2, &one, t + 2000, &ra));
	dl_limits_end(l, G2, D2, true, t + 2000);
	/* idle long enough: the place is free */
	assert_int_equal(dl_limits_active(l, G1, t + 1000 + DL_IDLE_MS), 0);
	assert_true(dl_limits_admit(l, G1, D2, &one, t + 1000 + DL_IDLE_MS, &ra));
	/* a download that reached its artifact's end frees it after DL_DONE_MS */
	dl_limits_end(l, G1, D2, true, t + 40000);
	assert_false(dl_limits_admit(l, G1, D3, &one, t + 40000 + DL_DONE_MS - 1, &ra));
	assert_int_equal(ra, 1);
	assert_true(dl_limits_admit(l, G1, D3, &one, t + 40000 + DL_DONE_MS, &ra));
	/* no limit: every device is admitted (and counted) */
	assert_true(dl_limits_admit(l, G2, D1, &none, t + 50000, &ra));
	assert_true(dl_limits_admit(l, G2, D2, &none, t + 50000, &ra));
	assert_true(dl_limits_admit(l, G2, D3, &none, t + 50000, &ra));
	assert_int_equal(dl_limits_active(l, G2, t + 50001), 3);
	dl_limits_free(l);
}

static void test_concurrent_two(void **state)
{
	struct dl_limits *l = NULL;
	struct dl_limit two = {2, 0};
	char dev[8][40];
	int admitted = 0, ra = 0;

	(void)state;
	assert_int_equal(dl_limits_new(&l), RCS_OK);
	for (int i = 0; i < 8; i++) {
		snprintf(dev[i], sizeof(dev[i]), "dev-%d", i);
		admitted += dl_limits_admit(l, G1, dev[i], &two, 5000, &ra);
	}
	assert_int_equal(admitted, 2);
	assert_int_equal(dl_limits_active(l, G1, 5000), 2);
	dl_limits_free(l);
}

static void test_rate(void **state)
{
	struct dl_limits *l = NULL;
	const long long rate = 100000;
	int64_t t = 500000, wait = 0;
	size_t sent = 0, got;

	(void)state;
	assert_int_equal(dl_limits_new(&l), RCS_OK);
	/* no rate: all of it */
	assert_int_equal(dl_limits_take(l, G1, 0, 65536, t, &wait), 65536);
	/* a full second's worth at first, then nothing until the bucket fills */
	assert_int_equal(dl_limits_take(l, G1, rate, 65536, t, &wait), 65536);
	assert_int_equal(dl_limits_take(l, G1, rate, 65536, t, &wait), rate - 65536);
	assert_int_equal(dl_limits_take(l, G1, rate, 65536, t, &wait), 0);
	assert_true(wait >= 1 && wait <= 101); /* a tenth of a second's worth */
	/* the rate shared over ten seconds, asked for in blocks at every millisecond */
	for (int64_t ms = 1; ms <= 10000; ms++)
		sent += dl_limits_take(l, G1, rate, 4096, t + ms, &wait);
	assert_true(sent >= (size_t)(rate * 10 * 99 / 100) && sent <= (size_t)(rate * 10));
	/* another group has its own bucket */
	got = dl_limits_take(l, G2, rate, 4096, t + 10000, &wait);
	assert_int_equal(got, 4096);
	/* a clock that went back gives no more than a full bucket */
	got = dl_limits_take(l, G1, rate, (size_t)rate * 4, t, &wait);
	assert_true(got <= (size_t)rate);
	dl_limits_free(l);
}

/* A whole chunk reserved (the MQTT transport): due at once while the bucket holds it, then
 * later by the time its bytes take; the HTTP route's take waits for the debt too. */
static void test_reserve(void **state)
{
	struct dl_limits *l = NULL;
	const long long rate = 100000;
	int64_t t = 800000, wait = 0;

	(void)state;
	assert_int_equal(dl_limits_new(&l), RCS_OK);
	assert_int_equal(dl_limits_reserve(l, G1, 0, 65536, t), 0); /* no rate */
	assert_int_equal(dl_limits_reserve(l, G1, rate, 65536, t), 0);
	/* 131072 taken of 100000: 31072 bytes of debt, 311 ms */
	assert_int_equal(dl_limits_reserve(l, G1, rate, 65536, t), 311);
	assert_int_equal(dl_limits_take(l, G1, rate, 4096, t + 100, &wait), 0);
	assert_true(wait > 200);
	/* paid back by then, and the bucket fills as before */
	assert_true(dl_limits_take(l, G1, rate, 4096, t + 400, &wait) > 0);
	/* a long run of chunks: due at the rate */
	wait = 0;
	for (int i = 0; i < 100; i++)
		wait = dl_limits_reserve(l, G2, rate, 10000, t);
	assert_true(wait >= 8900 && wait <= 9100);
	dl_limits_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_concurrent),
	    cmocka_unit_test(test_concurrent_two),
	    cmocka_unit_test(test_rate),
	    cmocka_unit_test(test_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
