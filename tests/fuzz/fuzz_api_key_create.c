/*
 * fuzz_api_key_create - the body of POST /v3/commands/keys, through the real
 * handler (coordinator/api_inventory.c api_key_create: user, role,
 * auth_key_new) on the fixture of fuzz_coord.h.
 *
 * Properties: no body makes the handler answer 5xx; a key is made only for
 * one of the three roles, for the user named, and is shown once with its
 * secret, which authenticates (store_key_lookup of its hash) as that user,
 * role and tenant.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"
#include "store_keys.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const seg[] = {"keys"};
	json_object *ans = NULL, *body = NULL;
	struct jsonu_err e;
	struct auth a;
	const char *secret;
	char hash[65];
	enum role role;

	fz_tick();
	if (fz_call(api_key_create, "POST", seg, 1, data, size, &ans) != 201)
		goto out;
	FUZZ_CHECK(jsonu_parse_object((const char *)data, size, &body, &e) == RCS_OK,
		   "made a key from a body that is no JSON object");
	FUZZ_CHECK(role_parse(jsonu_member_str(body, "role"), &role), "made a key of no role");
	secret = jsonu_member_str(ans, "api_key");
	FUZZ_CHECK(secret != NULL, "a new key without its secret");
	auth_key_hash(secret, hash);
	FUZZ_CHECK(store_key_lookup(fz.st, hash, &a) == RCS_OK, "a new key does not authenticate");
	FUZZ_CHECK(strcmp(a.user, jsonu_member_str(body, "user")) == 0 && a.role == role &&
		       strcmp(a.client_root, FZ_ROOT) == 0,
		   "a new key authenticates as %s (%s) of %s", a.user, role_name(a.role),
		   a.client_root);
out:
	json_object_put(body);
	json_object_put(ans);
	return 0;
}
