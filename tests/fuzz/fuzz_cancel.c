/*
 * fuzz_cancel - the cancel message an agent receives
 * (common/proto.c proto_cancel_decode, as agent/link.c calls it).
 *
 * Properties: a refused message leaves nothing to free and names the
 * problem; an accepted one encodes (proto_cancel_encode) to a message that
 * decodes to the same job and reason.
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
	struct proto_cancel c, c2;
	struct jsonu_err e;
	json_object *o;
	const char *text;
	size_t len = 0;
	enum rcs_err err;

	memset(&e, 0, sizeof(e));
	err = proto_cancel_decode((const char *)data, size, &c, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(c.root == NULL, "a refused cancel kept its tree");
		FUZZ_CHECK(e.message[0] != '\0', "a refused cancel without a message");
		return 0;
	}
	FUZZ_CHECK(uuid_valid(c.job), "job '%s'", c.job);
	o = proto_cancel_encode(&c);
	text = jsonu_dump(o, &len);
	err = proto_cancel_decode(text, len, &c2, &e);
	FUZZ_CHECK(err == RCS_OK, "an encoded cancel does not decode: %s: %s\n%s", e.field,
		   e.message, text);
	FUZZ_CHECK(strcmp(c.job, c2.job) == 0, "job changed");
	FUZZ_CHECK((c.reason == NULL) == (c2.reason == NULL) &&
		       (c.reason == NULL || strcmp(c.reason, c2.reason) == 0),
		   "reason changed");
	proto_cancel_free(&c2);
	json_object_put(o);
	proto_cancel_free(&c);
	return 0;
}
