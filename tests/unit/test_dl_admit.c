/* Unit tests of coordinator/dl_admit.c: a device's chunks over MQTT admitted at most
 * DL_ADMIT_INFLIGHT at once and paced at its byte rate; devices apart from each other; the
 * table of devices bounded (docs/mqtt.md, "Artifacts over MQTT (the coordinator's side)"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl_admit.h"

#define DEV_A "0190a000-0000-7000-8000-00000000000a"
#define DEV_B "0190a000-0000-7000-8000-00000000000b"
#define JOB   "0190a000-0000-7000-8000-000000000001"
#define ROOT  "0190a000-0000-7000-8000-0000000000ff"

static void test_inflight_capped_per_device(void **state)
{
	struct dl_admit *a = dl_admit_new(0);
	struct dl_ask ask = {ROOT, DEV_A, JOB, 65536};
	struct dl_ask other = {ROOT, DEV_B, JOB, 65536};
	int64_t at = -1;

	(void)state;
	assert_non_null(a);
	for (int i = 0; i < DL_ADMIT_INFLIGHT; i++) {
		assert_true(dl_admit(a, &ask, 1000, &at));
		assert_int_equal(at, 1000); /* no rate: at once */
	}
	assert_int_equal(dl_admit_inflight(a, DEV_A), DL_ADMIT_INFLIGHT);
	assert_false(dl_admit(a, &ask, 1000, &at));  /* the ninth: busy */
	assert_true(dl_admit(a, &other, 1000, &at)); /* another device is apart */
	dl_admit_done(a, DEV_A);
	assert_true(dl_admit(a, &ask, 1000, &at)); /* a place freed */
	assert_false(dl_admit(a, &ask, 1000, &at));
	for (int i = 0; i < DL_ADMIT_INFLIGHT; i++)
		dl_admit_done(a, DEV_A);
	assert_int_equal(dl_admit_inflight(a, DEV_A), 0);
	dl_admit_done(a, DEV_A); /* one too many: nothing below 0 */
	assert_int_equal(dl_admit_inflight(a, DEV_A), 0);
	dl_admit_free(a);
}

static void test_rate_paces(void **state)
{
	struct dl_admit *a = dl_admit_new(65536); /* a chunk of 64 KiB a second */
	struct dl_ask ask = {ROOT, DEV_A, JOB, 65536};
	struct dl_ask half = {ROOT, DEV_B, JOB, 32768};
	int64_t at = -1;

	(void)state;
	assert_true(dl_admit(a, &ask, 5000000, &at));
	assert_int_equal(at, 5000000);
	assert_true(dl_admit(a, &ask, 5000000, &at));
	assert_int_equal(at, 6000000);
	assert_true(dl_admit(a, &ask, 5100000, &at));
	assert_int_equal(at, 7000000);
	/* the rate is the device's: another one starts at once, its next after len / rate */
	assert_true(dl_admit(a, &half, 5000000, &at));
	assert_int_equal(at, 5000000);
	assert_true(dl_admit(a, &half, 5000000, &at));
	assert_int_equal(at, 5500000);
	/* idle long enough: no credit saved up beyond now */
	for (int i = 0; i < 3; i++)
		dl_admit_done(a, DEV_A);
	assert_true(dl_admit(a, &ask, 60000000, &at));
	assert_int_equal(at, 60000000);
	dl_admit_free(a);
}

static void test_devices_bounded(void **state)
{
	struct dl_admit *a = dl_admit_new(0);
	char dev[40];
	struct dl_ask ask = {ROOT, dev, JOB, 1};
	int64_t at;

	(void)state;
	for (int i = 0; i < DL_ADMIT_DEVICES; i++) {
		snprintf(dev, sizeof(dev), "0190a000-0000-7000-8000-%012d", i);
		assert_true(dl_admit(a, &ask, 1, &at));
	}
	snprintf(dev, sizeof(dev), "0190a000-0000-7000-8000-%012d", DL_ADMIT_DEVICES);
	assert_false(dl_admit(a, &ask, 1, &at)); /* every entry busy */
	snprintf(dev, sizeof(dev), "0190a000-0000-7000-8000-%012d", 7);
	dl_admit_done(a, dev); /* idle now: its entry serves another device */
	snprintf(dev, sizeof(dev), "0190a000-0000-7000-8000-%012d", DL_ADMIT_DEVICES);
	assert_true(dl_admit(a, &ask, 1, &at));
	assert_int_equal(dl_admit_inflight(a, dev), 1);
	snprintf(dev, sizeof(dev), "0190a000-0000-7000-8000-%012d", 8);
	assert_int_equal(dl_admit_inflight(a, dev), 1);
	dl_admit_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_inflight_capped_per_device),
	    cmocka_unit_test(test_rate_paces),
	    cmocka_unit_test(test_devices_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
