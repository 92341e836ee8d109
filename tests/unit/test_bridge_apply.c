/*
 * Unit tests of the MQTT bridge's inbound queue (coordinator/bridge_apply.c,
 * docs/coordinator.md "Bulk sends"): the queue takes every message paho hands it, however many
 * wait, since paho has acknowledged each to the broker already and would hand a refused one
 * back only as the next packet arrives; past 100,000 queued it is pressed, and the reports no
 * longer wait for the event feed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bridge_int.h"
#include "proto.h"

#define QUEUED_MANY 250000 /* more than the 200,000 the queue once stopped at */

static void test_queue_takes_every_message(void **state)
{
	struct bridge_link link;
	struct bridge_apply *a;
	struct proto_topic t;
	char payload[128];
	size_t taken = 0;
	int len;

	(void)state;
	memset(&link, 0, sizeof(link));
	link.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(link.efd >= 0);
	a = bridge_apply_new(&link, NULL);
	assert_non_null(a);
	memset(&t, 0, sizeof(t));
	t.kind = PROTO_STATUS;
	strcpy(t.client_root, "01a22b11-dca3-71b3-bcbc-298b41918c7e");
	strcpy(t.entity_ident, "01a22b11-dca3-71b4-853d-9e5a3955c25c");
	strcpy(t.job, "01a22b11-dcb3-7075-abcf-de84798af1b6");
	for (size_t i = 0; i < QUEUED_MANY; i++) {
		len = snprintf(payload, sizeof(payload),
			       "{\"v\":1,\"job\":\"%s\",\"status\":\"edge_running\",\"seq\":%zu}",
			       t.job, i + 1);
		assert_true(len > 0 && (size_t)len < sizeof(payload));
		if (i + 1 == 100000)
			assert_false(bridge_apply_pressed(a));
		taken += bridge_apply_queue(a, &t, payload, (size_t)len);
	}
	assert_int_equal(taken, QUEUED_MANY);
	assert_int_equal(bridge_apply_queued(a), QUEUED_MANY);
	assert_int_equal(bridge_apply_waiting(a), QUEUED_MANY);
	assert_true(bridge_apply_pressed(a));
	bridge_apply_free(a);
	close(link.efd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_queue_takes_every_message),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
