/*
 * fuzz_canon - the strict JSON parser (common/jsonu.c) and RFC 8785
 * canonicalization (common/canon.c), as both daemons run them on the
 * constants and variables_info of a task before signing or verifying.
 *
 * Properties checked on every input the parser accepts:
 *   - canon_json succeeds, or fails leaving its buffer as it was;
 *   - its output is JSON the parser accepts again (but for integers beyond
 *     64 bits, which it refuses), and canonical: the canonical form of the
 *     re-parsed output is the output itself;
 *   - it is the same after the tree went through json-c's own serializer
 *     and back (what the coordinator stores and sends in envelopes is that
 *     serialization, and the agent canonicalizes what it received: a
 *     difference would make a valid signature fail on the device).
 */
#include <string.h>

#include "buf.h"
#include "canon.h"
#include "fuzz_util.h"
#include "jsonu.h"

#define CANON_FUZZ_MAX (4 * 1024 * 1024)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

/* Canonical text of text (len bytes); RCS_OK or the parser's/canon's error. */
static enum rcs_err canon_text(const char *text, size_t len, struct buf *out)
{
	json_object *v = NULL;
	struct jsonu_err e;
	enum rcs_err err = jsonu_parse(text, len, JSONU_MAX_DEPTH, &v, &e);

	if (err == RCS_OK)
		err = canon_json(v, out);
	json_object_put(v);
	return err;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_object *v = NULL, *v2 = NULL;
	struct jsonu_err e;
	struct buf c1, c2, c3;
	const char *dumped;
	size_t dumped_len = 0;
	enum rcs_err err;

	buf_init(&c1, CANON_FUZZ_MAX);
	buf_init(&c2, CANON_FUZZ_MAX);
	buf_init(&c3, CANON_FUZZ_MAX);
	memset(&e, 0, sizeof(e));
	err = jsonu_parse((const char *)data, size, JSONU_MAX_DEPTH, &v, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(v == NULL, "a failed parse returned a tree");
		FUZZ_CHECK(e.message[0] != '\0', "a failed parse without a message");
		goto out;
	}
	err = canon_json(v, &c1);
	if (err != RCS_OK) {
		FUZZ_CHECK(c1.len == 0, "canon_json failed (%s) but left %zu bytes",
			   rcs_strerror(err), c1.len);
		goto out;
	}
	FUZZ_CHECK(c1.data != NULL && strlen(c1.data) == c1.len, "canonical text holds a NUL");

	/*
	 * canonical output is canonical; the one thing the parser may refuse in
	 * it is an integer beyond 64 bits (a double of 2^63 or more printed as
	 * digits, which json-c could only clamp)
	 */
	err = jsonu_parse(c1.data, c1.len, JSONU_MAX_DEPTH, &v2, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(strstr(e.message, "integer out of range") != NULL,
			   "canonical text does not parse again: %s\n%s", e.message, c1.data);
	} else {
		err = canon_json(v2, &c2);
		FUZZ_CHECK(err == RCS_OK, "canonical text does not canonicalize again: %s\n%s",
			   rcs_strerror(err), c1.data);
		FUZZ_CHECK(c1.len == c2.len && memcmp(c1.data, c2.data, c1.len) == 0,
			   "canonicalization is not idempotent:\n%s\n%s", c1.data, c2.data);
	}

	/* json-c serialization and back keeps the canonical form */
	dumped = jsonu_dump(v, &dumped_len);
	FUZZ_CHECK(dumped != NULL, "json-c could not serialize a parsed tree");
	err = canon_text(dumped, dumped_len, &c3);
	FUZZ_CHECK(err == RCS_OK, "json-c's serialization does not parse again: %s\n%s",
		   rcs_strerror(err), dumped);
	FUZZ_CHECK(c1.len == c3.len && memcmp(c1.data, c3.data, c1.len) == 0,
		   "canonical form changes through json-c's serializer:\n%s\n%s\nvia %s", c1.data,
		   c3.data, dumped);
out:
	json_object_put(v);
	json_object_put(v2);
	buf_free(&c1);
	buf_free(&c2);
	buf_free(&c3);
	return 0;
}
