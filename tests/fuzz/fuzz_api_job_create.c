/*
 * fuzz_api_job_create - the body of POST /v3/commands/tasks/<id>/jobs,
 * through the real handler (coordinator/api_jobs.c api_job_create,
 * job_read_common: fields, notification lists, variables checked against
 * the task's variables_info; the signature check of a signed task against
 * the trusted key; device presence) on the fixture of fuzz_coord.h; a
 * created job is then cancelled (PATCH /jobs/<id>/cancel), first with the
 * same input as its body (refused: a cancel takes no fields, and the input
 * is a job request), then with an empty one.
 *
 * Each input is sent for FZ_TASK_ECHO (a variable of each type) and
 * FZ_TASK_SIGNED (manifest-1's variables_info).
 *
 * Properties: no body makes a handler answer 5xx; a job is created only for
 * a device of the tenant that is online (neither task allows offline
 * devices), with the task's ident and version; a cancel with fields is
 * answered 400 and changes nothing; an empty one answers the job cancelled.
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

static void create(const char *task, const uint8_t *data, size_t size)
{
	const char *seg[3] = {"tasks", task, "jobs"};
	const char *cseg[3] = {"jobs", NULL, "cancel"};
	json_object *ans = NULL, *cans = NULL;
	int status;

	if (fz_call(api_job_create, "POST", seg, 3, data, size, &ans) != 201)
		goto out;
	FUZZ_CHECK(strcmp(jsonu_member_str(ans, "entity_ident"), FZ_DEV_ONLINE) == 0,
		   "a job for a device that is not online: %s", jsonu_dump(ans, NULL));
	FUZZ_CHECK(strcmp(jsonu_member_str(jsonu_member(ans, "task"), "ident"), task) == 0,
		   "a job of another task");
	cseg[1] = jsonu_member_str(ans, "ident");
	FUZZ_CHECK(uuid_valid(cseg[1]), "a job without an ident");
	status = fz_call(api_job_cancel, "PATCH", cseg, 3, data, size, &cans);
	FUZZ_CHECK(status == 400, "a cancel with a job request as its body answered %d", status);
	json_object_put(cans);
	cans = NULL;
	status = fz_call_str(api_job_cancel, "PATCH", cseg, 3, "{}", &cans);
	FUZZ_CHECK(status == 200, "cancel answered %d", status);
	FUZZ_CHECK(strcmp(jsonu_member_str(cans, "status"), "cancelled") == 0,
		   "cancel answered status %s", jsonu_member_str(cans, "status"));
out:
	json_object_put(cans);
	json_object_put(ans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_tick();
	create(FZ_TASK_ECHO, data, size);
	create(FZ_TASK_SIGNED, data, size);
	return 0;
}
