/*
 * fuzz_api_device - the bodies of POST /v3/commands/devices and PATCH
 * /v3/commands/devices/<id>, through the real handlers
 * (coordinator/api_inventory.c api_device_create, api_device_patch,
 * device_read, validate_tags) on the fixture of fuzz_coord.h (the PATCH on
 * FZ_DEV_OFFLINE).
 *
 * Properties: no body makes a handler answer 5xx; a device written shows
 * the body's name and tags.
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

static void check_device(const uint8_t *data, size_t size, json_object *ans)
{
	json_object *body = NULL, *tags;
	struct jsonu_err e;
	const char *name;

	FUZZ_CHECK(jsonu_parse_object((const char *)data, size, &body, &e) == RCS_OK,
		   "wrote a device from a body that is no JSON object");
	name = jsonu_member_str(body, "name");
	if (name)
		FUZZ_CHECK(strcmp(jsonu_member_str(ans, "name"), name) == 0,
			   "the device's name is not the one sent");
	tags = jsonu_member(body, "tags");
	if (tags)
		FUZZ_CHECK(strcmp(jsonu_dump(jsonu_member(ans, "tags"), NULL),
				  jsonu_dump(tags, NULL)) == 0,
			   "tags %s, sent %s", jsonu_dump(jsonu_member(ans, "tags"), NULL),
			   jsonu_dump(tags, NULL));
	json_object_put(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const create[] = {"devices"};
	static const char *const patch[] = {"devices", FZ_DEV_OFFLINE};
	json_object *ans = NULL;

	fz_tick();
	if (fz_call(api_device_create, "POST", create, 1, data, size, &ans) == 201)
		check_device(data, size, ans);
	json_object_put(ans);
	ans = NULL;
	if (fz_call(api_device_patch, "PATCH", patch, 2, data, size, &ans) == 200)
		check_device(data, size, ans);
	json_object_put(ans);
	return 0;
}
