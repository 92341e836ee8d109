/*
 * fuzz_chunks_get - a device's get of an artifact's chunk over MQTT
 * (coordinator/chunks_get.c chunks_topic_parse, chunks_ask_parse), which any
 * device may publish on its topics.
 *
 * The input: up to its first NUL the topic, the rest the payload (cut at
 * CHUNKS_MAX_BODY, as the coordinator keeps it). Properties: a topic taken has a
 * UUID tenant and device and a 64-hex SHA-256; a get taken names a job ident, an
 * offset >= 0 and a length of 1 to 65,536; a refused one says why.
 */
#include <string.h>

#include "chunks_int.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t tlen = nul ? (size_t)(nul - data) : size;
	char *topic = fuzz_strndup(data, tlen);
	struct chunks_get g;
	struct chunks_ask a;
	char why[200] = "";

	memset(&g, 0, sizeof(g));
	memset(&a, 0, sizeof(a));
	if (chunks_topic_parse(topic, &g))
		FUZZ_CHECK(uuid_valid(g.tenant) && uuid_valid(g.device) && strlen(g.sha) == 64 &&
			       strspn(g.sha, "0123456789abcdef") == 64 &&
			       strstr(topic, "/artifacts/") != NULL,
			   "took the topic '%s'", topic);
	if (nul != NULL) {
		size_t blen = size - tlen - 1;
		g.len = blen < CHUNKS_MAX_BODY ? blen : CHUNKS_MAX_BODY;
		memcpy(g.body, nul + 1, g.len);
		g.body[g.len] = '\0';
		if (chunks_ask_parse(&g, &a, why, sizeof(why)))
			FUZZ_CHECK(uuid_valid(a.job) && a.offset >= 0 && a.length >= 1 &&
				       a.length <= CHUNKS_MAX_LEN,
				   "took job '%s' offset %lld length %lld", a.job, a.offset,
				   a.length);
		else
			FUZZ_CHECK(why[0] != '\0', "refused a get without saying why");
	}
	free(topic);
	return 0;
}
