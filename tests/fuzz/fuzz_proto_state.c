/*
 * fuzz_proto_state - a device's state message (retained, and its Last Will)
 * as the coordinator takes it (coordinator/bridge_apply.c bridge_apply_state,
 * static: this target does what it does): proto_state_decode, then
 * store_device_state on a device of the fixture's inventory.
 *
 * Properties: an accepted state re-encodes (proto_state_encode) to one that
 * decodes to the same fields; storing it succeeds, and the device record
 * then shows the reported online flag, tags and agent version.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"
#include "proto.h"
#include "store_devices.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

static int same_json(json_object *a, json_object *b)
{
	const char *ta = a ? jsonu_dump(a, NULL) : "[]";
	const char *tb = b ? jsonu_dump(b, NULL) : "[]";

	return strcmp(ta, tb) == 0;
}

static void check_roundtrip(const struct proto_state *s)
{
	struct proto_state again;
	struct jsonu_err e;
	json_object *o = proto_state_encode(s);
	size_t len = 0;
	const char *text = jsonu_dump(o, &len);
	enum rcs_err err = proto_state_decode(text, len, &again, &e);

	FUZZ_CHECK(err == RCS_OK, "an encoded state does not decode: %s: %s\n%s", e.field,
		   e.message, text);
	FUZZ_CHECK(
	    s->online == again.online && s->ts == again.ts && same_json(s->tags, again.tags) &&
		(s->agent_version == NULL) == (again.agent_version == NULL) &&
		(s->agent_version == NULL || strcmp(s->agent_version, again.agent_version) == 0),
	    "the state changed through encode and decode:\n%s", text);
	proto_state_free(&again);
	json_object_put(o);
}

static void apply(const struct proto_state *s)
{
	struct device_rec dev;
	const char *tags = s->tags ? jsonu_dump(s->tags, NULL) : NULL;
	const char *attrs = s->attributes ? jsonu_dump(s->attributes, NULL) : NULL;
	struct store_state_in in = {s->online, tags, s->agent_version, s->ts, attrs};
	struct store_state_out out;
	enum rcs_err err;

	err = store_device_state(fz.st, FZ_ROOT, FZ_DEV_OFFLINE, &in, FZ_NOW, &out);
	FUZZ_CHECK(err == RCS_OK, "store_device_state: %s", rcs_strerror(err));
	FUZZ_CHECK(out.stale == (!s->online && s->ts > 0 && out.last_ts > 0 && s->ts < out.last_ts),
		   "stale %d for online %d, ts %lld after %lld", out.stale, s->online,
		   (long long)s->ts, (long long)out.last_ts);
	if (out.stale)
		return; /* not applied: nothing below holds */
	FUZZ_CHECK(store_device_get(fz.st, FZ_ROOT, FZ_DEV_OFFLINE, &dev) == RCS_OK,
		   "store_device_get");
	FUZZ_CHECK(dev.online == s->online, "online is not what the device said");
	if (tags)
		FUZZ_CHECK(dev.reported_tags && strcmp(dev.reported_tags, tags) == 0,
			   "reported_tags %s, the device said %s",
			   dev.reported_tags ? dev.reported_tags : "(null)", tags);
	if (s->agent_version)
		FUZZ_CHECK(dev.agent_version && strcmp(dev.agent_version, s->agent_version) == 0,
			   "agent_version '%s', the device said '%s'",
			   dev.agent_version ? dev.agent_version : "(null)", s->agent_version);
	store_device_rec_free(&dev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_state s;
	struct jsonu_err e;
	enum rcs_err err;

	fz_tick();
	memset(&e, 0, sizeof(e));
	err = proto_state_decode((const char *)data, size, &s, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(s.root == NULL, "a refused state kept its tree");
		FUZZ_CHECK(e.message[0] != '\0', "a refused state without a message");
		return 0;
	}
	check_roundtrip(&s);
	apply(&s);
	proto_state_free(&s);
	return 0;
}
