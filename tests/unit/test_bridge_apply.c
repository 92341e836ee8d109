/*
 * Unit tests of the MQTT bridge's inbound queue (coordinator/bridge_apply.c,
 * docs/coordinator.md "Bulk sends"): the queue takes every message paho hands it, however many
 * wait, since paho has acknowledged each to the broker already and would hand a refused one
 * back only as the next packet arrives; past 100,000 queued it is pressed, and the reports no
 * longer wait for the event feed; a whole batch queued is worth another in the round; past its
 * ceiling in bytes a message is dropped (and said so) rather than refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bridge_int.h"
#include "proto.h"

#define QUEUED_MANY 250000 /* more than the 200,000 the queue once stopped at */
#define REPORT_LEN  91     /* the length of what queue_reports queues */

struct fixture {
	struct bridge_link link;
	struct bridge_apply *a;
	struct proto_topic t;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->link.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(f->link.efd >= 0);
	f->a = bridge_apply_new(&f->link, NULL);
	assert_non_null(f->a);
	f->t.kind = PROTO_STATUS;
	strcpy(f->t.client_root, "01a22b11-dca3-71b3-bcbc-298b41918c7e");
	strcpy(f->t.entity_ident, "01a22b11-dca3-71b4-853d-9e5a3955c25c");
	strcpy(f->t.job, "01a22b11-dcb3-7075-abcf-de84798af1b6");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	bridge_apply_free(f->a);
	close(f->link.efd);
	free(f);
	return 0;
}

/* Queues n reports of REPORT_LEN bytes; how many bridge_apply_queue took (answered true). */
static size_t queue_reports(struct fixture *f, size_t n)
{
	char payload[128];
	size_t taken = 0;

	memset(payload, ' ', sizeof(payload));
	for (size_t i = 0; i < n; i++) {
		int len = snprintf(payload, sizeof(payload),
				   "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\","
				   "\"seq\":%08zu}",
				   f->t.job, i + 1);

		assert_int_equal(len, REPORT_LEN);
		taken += bridge_apply_queue(f->a, &f->t, payload, (size_t)len);
	}
	return taken;
}

static void test_queue_takes_every_message(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(queue_reports(f, 99999), 99999);
	assert_false(bridge_apply_pressed(f->a));
	assert_int_equal(queue_reports(f, 1), 1);
	assert_true(bridge_apply_pressed(f->a));
	assert_int_equal(queue_reports(f, QUEUED_MANY - 100000), QUEUED_MANY - 100000);
	assert_int_equal(bridge_apply_queued(f->a), QUEUED_MANY);
	assert_int_equal(bridge_apply_waiting(f->a), QUEUED_MANY);
}

static void test_another_batch_once_one_is_queued(void **state)
{
	struct fixture *f = *state;

	assert_false(bridge_apply_more(f->a));
	queue_reports(f, 999);
	assert_false(bridge_apply_more(f->a));
	queue_reports(f, 1);
	assert_true(bridge_apply_more(f->a));
}

/* Past the ceiling a message is answered "taken" (never left to paho) but not queued. */
static void test_ceiling_drops(void **state)
{
	struct fixture *f = *state;
	size_t one;

	queue_reports(f, 1);
	one = bridge_apply_queued(f->a);
	assert_int_equal(one, 1);
	/* room for 10 such messages: the record's size is the queue's business, so measure
	 * it through the ceiling: 10 fit under 10 x 1 KiB, the 11th and on are dropped */
	bridge_apply_limit(f->a, 10 * 1024);
	assert_int_equal(queue_reports(f, 500), 500);
	assert_true(bridge_apply_queued(f->a) >= 10);
	assert_true(bridge_apply_queued(f->a) < 10 * 1024 / REPORT_LEN);
	assert_int_equal(queue_reports(f, 5), 5);
	assert_true(bridge_apply_queued(f->a) < 10 * 1024 / REPORT_LEN);
	/* a higher ceiling: queued again */
	bridge_apply_limit(f->a, 1024 * 1024);
	{
		size_t before = bridge_apply_queued(f->a);

		queue_reports(f, 3);
		assert_int_equal(bridge_apply_queued(f->a), before + 3);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_queue_takes_every_message, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_another_batch_once_one_is_queued, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ceiling_drops, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
