/*
 * fuzz_api_jobs_bulk - the bodies of the bulk sends, POST
 * /v3/commands/tasks/<id>/jobs/list and .../jobs/tags, through the real
 * handlers (coordinator/api_bulk.c api_jobs_bulk_list, api_jobs_bulk_tags,
 * job_bulk; coordinator/api_jobs.c api_job_read_common) on the fixture of fuzz_coord.h, for
 * FZ_TASK_ECHO.
 *
 * Properties: no body makes a handler answer 5xx; every device of a send is
 * either in "items" (online: FZ_DEV_ONLINE only) or in "rejected", never
 * both, and a device listed twice gets one job.
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

static void check_answer(json_object *ans, const uint8_t *data, size_t size)
{
	json_object *body = NULL, *group = jsonu_member(ans, "group");
	struct jsonu_err e;
	const char *name = NULL;

	json_object *items = jsonu_member(ans, "items"), *rejected = jsonu_member(ans, "rejected");
	size_t n = json_object_array_length(items);

	FUZZ_CHECK(json_object_is_type(items, json_type_array) &&
		       json_object_is_type(rejected, json_type_array),
		   "a bulk answer without items or rejected: %s", jsonu_dump(ans, NULL));
	FUZZ_CHECK(n <= 1, "%zu jobs, the fixture has one online device", n);
	for (size_t i = 0; i < n; i++) {
		json_object *job = json_object_array_get_idx(items, i);
		FUZZ_CHECK(strcmp(jsonu_member_str(job, "entity_ident"), FZ_DEV_ONLINE) == 0,
			   "a job for a device that is not online");
	}
	for (size_t i = 0; i < json_object_array_length(rejected); i++) {
		const char *ent =
		    jsonu_member_str(json_object_array_get_idx(rejected, i), "entity_ident");
		FUZZ_CHECK(ent && strcmp(ent, FZ_DEV_ONLINE) != 0, "the online device rejected");
	}
	/* a group exactly when the send named one, with or without jobs (docs/api.md) */
	if (jsonu_parse((const char *)data, size, JSONU_MAX_DEPTH, &body, &e) == RCS_OK)
		name = jsonu_member_str(body, "group_name");
	if (name)
		FUZZ_CHECK(json_object_is_type(group, json_type_object) &&
			       strcmp(jsonu_member_str(group, "name"), name) == 0,
			   "a send named %s answered %s", name, jsonu_dump(ans, NULL));
	else
		FUZZ_CHECK(group == NULL, "a group the send did not name: %s",
			   jsonu_dump(ans, NULL));
	json_object_put(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const list[] = {"tasks", FZ_TASK_ECHO, "jobs", "list"};
	static const char *const tags[] = {"tasks", FZ_TASK_ECHO, "jobs", "tags"};
	json_object *ans = NULL;

	fz_tick();
	if (fz_call(api_jobs_bulk_list, "POST", list, 4, data, size, &ans) == 201)
		check_answer(ans, data, size);
	json_object_put(ans);
	ans = NULL;
	if (fz_call(api_jobs_bulk_tags, "POST", tags, 4, data, size, &ans) == 201)
		check_answer(ans, data, size);
	json_object_put(ans);
	return 0;
}
