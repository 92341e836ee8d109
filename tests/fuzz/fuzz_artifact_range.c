/*
 * fuzz_artifact_range - the Range header of GET /artifacts/<ident>/content
 * (coordinator/api_artifacts.c api_artifact_range), which any viewer's key sends.
 *
 * The input: its first 6 bytes the artifact's size (little-endian), the rest the
 * header. Properties: a range that applies lies whole inside the artifact and is
 * not empty; only a "bytes=" header of one range applies or is unsatisfiable; an
 * unsatisfiable one starts at or past the end (or asks for the last 0 bytes).
 */
#include <string.h>

#include "api.h"
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
	long long total = 0, start = -7, len = -7;
	char *h;
	int r;

	if (size < 6)
		return 0;
	for (int i = 5; i >= 0; i--)
		total = total * 256 + data[i];
	h = fuzz_strndup(data + 6, size - 6);
	r = api_artifact_range(h, total, &start, &len);
	FUZZ_CHECK(r >= -1 && r <= 1, "answered %d", r);
	if (r != 0)
		FUZZ_CHECK(strncmp(h, "bytes=", 6) == 0 && strchr(h, ',') == NULL,
			   "'%s' applies (%d)", h, r);
	if (r == 1)
		FUZZ_CHECK(start >= 0 && len >= 1 && start + len <= total,
			   "'%s' of %lld bytes: [%lld, +%lld)", h, total, start, len);
	else
		FUZZ_CHECK(start == -7 && len == -7, "'%s' set a range it refused", h);
	if (r == -1)
		FUZZ_CHECK(total == 0 || h[6] == '-' || strtoll(h + 6, NULL, 10) >= total,
			   "'%s' of %lld bytes is not past the end", h, total);
	free(h);
	return 0;
}
