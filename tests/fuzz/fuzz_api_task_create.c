/*
 * fuzz_api_task_create - the body of POST /v3/commands/tasks, through the
 * real handler (coordinator/api_tasks.c api_task_create: task_apply_body,
 * vars_info_validate, the notification lists, the script lookup, signing,
 * storage) on the fixture of fuzz_coord.h.
 *
 * Properties: no body makes the handler answer 5xx; errors carry a code and
 * a message; a created task is version 1 and shows the body's name and
 * script, and reads back with GET /tasks/<ident>.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const seg[] = {"tasks"};
	json_object *ans = NULL, *body = NULL;
	struct jsonu_err e;
	const char *ident, *get[2];

	fz_tick();
	if (fz_call(api_task_create, "POST", seg, 1, data, size, &ans) != 201)
		goto out;
	FUZZ_CHECK(jsonu_parse_object((const char *)data, size, &body, &e) == RCS_OK,
		   "created a task from a body that is no JSON object");
	ident = jsonu_member_str(ans, "ident");
	FUZZ_CHECK(uuid_valid(ident), "created task without an ident");
	FUZZ_CHECK(json_object_get_int64(jsonu_member(ans, "version")) == 1, "version is not 1");
	FUZZ_CHECK(strcmp(jsonu_member_str(ans, "name"), jsonu_member_str(body, "name")) == 0 &&
		       strcmp(jsonu_member_str(ans, "script"), jsonu_member_str(body, "script")) ==
			   0,
		   "the task is not what the body said: %s", jsonu_dump(ans, NULL));
	get[0] = "tasks";
	get[1] = ident;
	FUZZ_CHECK(fz_call(api_task_get, "GET", get, 2, NULL, 0, NULL) == 200,
		   "a created task does not read back");
out:
	json_object_put(body);
	json_object_put(ans);
	return 0;
}
