/*
 * fuzz_proto_topic - MQTT topic names (common/proto.c proto_topic_parse),
 * which both daemons parse for every message the broker hands them (the
 * coordinator to route reports and states, the agent envelopes and cancels).
 *
 * Properties: only the five topic forms with valid UUIDs parse, and a parsed
 * topic built again with proto_topic_make is the input itself.
 */
#include <string.h>

#include "fuzz_util.h"
#include "proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *topic = fuzz_strndup(data, size);
	char again[PROTO_MAX_TOPIC];
	struct proto_topic t;
	enum rcs_err err = proto_topic_parse(topic, &t);

	if (err != RCS_OK) {
		FUZZ_CHECK(err == RCS_ERR_INVAL, "proto_topic_parse answered %s",
			   rcs_strerror(err));
		goto out;
	}
	FUZZ_CHECK(uuid_valid(t.client_root), "client_root '%s'", t.client_root);
	if (t.kind != PROTO_EVENT)
		FUZZ_CHECK(uuid_valid(t.entity_ident), "entity_ident '%s'", t.entity_ident);
	if (t.kind != PROTO_STATE)
		FUZZ_CHECK(uuid_valid(t.job), "job '%s'", t.job);
	proto_topic_make(again, t.kind, t.client_root, t.entity_ident, t.job);
	FUZZ_CHECK(strcmp(again, topic) == 0, "'%s' parsed and made again is '%s'", topic, again);
out:
	free(topic);
	return 0;
}
