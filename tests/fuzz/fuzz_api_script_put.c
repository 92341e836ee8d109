/*
 * fuzz_api_script_put - the body of PUT /v3/commands/scripts/<name>, through
 * the real handler (coordinator/api_tasks.c api_script_put, with
 * script_bump_tasks re-versioning the tasks using a changed script) on the
 * fixture of fuzz_coord.h.
 *
 * Each input is sent for three names: "echo" (a stock script: read-only),
 * "set_config.lua" (used by FZ_TASK_SIGNED: a new source gives it a new
 * version) and "fz-new" (the tenant's own, unused).
 *
 * Properties: no body makes the handler answer 5xx; a stored script answers
 * its name, the source sent and the SHA-256 of that source.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"
#include "manifest.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

static void put(const char *name, const uint8_t *data, size_t size)
{
	const char *seg[2] = {"scripts", name};
	json_object *ans = NULL, *body = NULL;
	struct jsonu_err e;
	const char *src, *got;
	char sha[SHA256_HEX_LEN];
	int status = fz_call(api_script_put, "PUT", seg, 2, data, size, &ans);

	if (status != 200 && status != 201)
		goto out;
	FUZZ_CHECK(strcmp(name, "echo") != 0, "a stock script was overwritten");
	FUZZ_CHECK(jsonu_parse_object((const char *)data, size, &body, &e) == RCS_OK,
		   "stored a script from a body that is no JSON object");
	src = jsonu_member_str(body, "source");
	got = jsonu_member_str(ans, "source");
	FUZZ_CHECK(strcmp(jsonu_member_str(ans, "name"), name) == 0, "answered another script");
	FUZZ_CHECK(got && strcmp(got, src) == 0, "the stored source is not the one sent");
	sha256_hex(src, strlen(src), sha);
	FUZZ_CHECK(strcmp(jsonu_member_str(ans, "sha256"), sha) == 0, "sha256 of another source");
	FUZZ_CHECK(json_object_is_type(jsonu_member(ans, "tasks_updated"), json_type_array),
		   "no tasks_updated");
out:
	json_object_put(body);
	json_object_put(ans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_tick();
	put("echo", data, size);
	put("set_config.lua", data, size);
	put("fz-new", data, size);
	return 0;
}
