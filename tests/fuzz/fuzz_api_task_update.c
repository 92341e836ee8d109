/*
 * fuzz_api_task_update - the body of PUT and PATCH /v3/commands/tasks/<id>,
 * through the real handlers (coordinator/api_tasks.c task_update,
 * task_apply_body, task_set_signature for a PATCH of the signature alone) on
 * the fixture of fuzz_coord.h.
 *
 * Each input is sent as PUT to a fresh task (created from BASE), then as
 * PATCH to the same task, and, when it is an object with the one member
 * "signature", as PATCH to FZ_TASK_SIGNED (whose current version the vector
 * key signed: the signature check against the trusted key runs for real).
 *
 * Properties: no body makes a handler answer 5xx; an update answers the next
 * version; a signature set on FZ_TASK_SIGNED is null or verifies.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"

static const char BASE[] =
    "{\"name\": \"Base\", \"script\": \"echo\", \"comment\": \"base\","
    " \"variables_info\": {\"message\": {\"type\": \"string\", \"optional\": true}},"
    " \"constants\": {\"retries\": 3}, \"allow_offline\": true,"
    " \"notification_mail_list\": [\"ops@example.com\"],"
    " \"notification_status_list\": [\"terminated\"]}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

/* A fresh task from BASE; its ident into ident. */
static void fresh_task(char ident[UUID_STR_LEN])
{
	static const char *const seg[] = {"tasks"};
	json_object *ans = NULL;

	FUZZ_CHECK(fz_call_str(api_task_create, "POST", seg, 1, BASE, &ans) == 201,
		   "fixture task not created");
	snprintf(ident, UUID_STR_LEN, "%s", jsonu_member_str(ans, "ident"));
	json_object_put(ans);
}

/* Sends the input to a fresh task; returns the version it answered (0: refused). */
static long long update(api_handler fn, const char *method, const char *ident, long long before,
			const uint8_t *data, size_t size)
{
	const char *seg[2] = {"tasks", ident};
	json_object *ans = NULL;
	long long v = 0;

	if (fz_call(fn, method, seg, 2, data, size, &ans) == 200) {
		v = (long long)json_object_get_int64(jsonu_member(ans, "version"));
		/* a PATCH of the signature alone keeps the version */
		FUZZ_CHECK(v == before + 1 || (fn == api_task_patch && v == before),
			   "%s of version %lld answered version %lld", method, before, v);
	}
	json_object_put(ans);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const signed_seg[] = {"tasks", FZ_TASK_SIGNED};
	json_object *body = NULL, *ans = NULL, *sig;
	struct jsonu_err e;

	char ident[UUID_STR_LEN];
	long long v;

	fz_tick();
	fresh_task(ident);
	v = update(api_task_put, "PUT", ident, 1, data, size);
	update(api_task_patch, "PATCH", ident, v ? v : 1, data, size);
	if (jsonu_parse_object((const char *)data, size, &body, &e) != RCS_OK ||
	    json_object_object_length(body) != 1 || jsonu_member(body, "signature") == NULL)
		goto out;
	if (fz_call(api_task_patch, "PATCH", signed_seg, 2, data, size, &ans) == 200) {
		FUZZ_CHECK(json_object_get_int64(jsonu_member(ans, "version")) == 3,
			   "a signature changed the version");
		sig = jsonu_member(ans, "signature");
		FUZZ_CHECK(sig == NULL ||
			       strcmp(jsonu_dump(sig, NULL),
				      jsonu_dump(jsonu_member(body, "signature"), NULL)) == 0,
			   "the stored signature is not the one sent");
	}
out:
	json_object_put(ans);
	json_object_put(body);
	return 0;
}
