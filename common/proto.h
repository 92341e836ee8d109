/*
 * proto.h - the MQTT protocol v1 (docs/mqtt.md): topics and payloads,
 * one encoder and one decoder for each, used by both daemons and their tests.
 *
 * Topics:
 *   rcs/v1/<client_root>/<entity_ident>/jobs/<job>          envelope  (coordinator -> device)
 *   rcs/v1/<client_root>/<entity_ident>/jobs/<job>/cancel   cancel    (coordinator -> device)
 *   rcs/v1/<client_root>/<entity_ident>/jobs/<job>/status   report    (device -> coordinator)
 *   rcs/v1/<client_root>/<entity_ident>/state               state     (device, retained, LWT)
 *   rcs/v1/<client_root>/events/jobs/<job>                  job record (coordinator -> anyone)
 *
 * Decoders check everything (the "v": 1, types, sizes, UUIDs) and report the
 * offending field through struct jsonu_err. A decoded message borrows its
 * strings and objects from its parsed tree (root), released by the matching
 * *_free(). Encoders return a new json_object (json_object_put it).
 */
#ifndef RCS_PROTO_H
#define RCS_PROTO_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "jsonu.h"
#include "status.h"
#include "uuid.h"

#define PROTO_VERSION      1
#define PROTO_MAX_TOPIC    160
#define PROTO_MAX_PAYLOAD  (1024 * 1024) /* default ceiling of any message */
#define PROTO_MAX_SCRIPT   (256 * 1024)
#define PROTO_MAX_RESPONSE (64 * 1024)
#define PROTO_MAX_ERROR    32 /* bytes of a report's cause code */
#define PROTO_MAX_PHASE    32 /* bytes of a job's phase name (docs/mqtt.md "Status report") */
#define PROTO_WITHIN_MIN   30 /* a "rebooting" report's within, seconds */
#define PROTO_WITHIN_MAX   86400
#define PROTO_MAX_TAGS     64
/* A device's attributes (docs/mqtt.md "Device state"): at most 32, keys
 * [A-Za-z0-9_.-]{1,64}, values printable UTF-8 of at most 1024 bytes, 4 KiB of keys and
 * values in all */
#define PROTO_MAX_ATTRS       32
#define PROTO_MAX_ATTR_KEY    64
#define PROTO_MAX_ATTR_VALUE  1024
#define PROTO_MAX_ATTRS_BYTES 4096

/* PROTO_GROUP_EVENT: rcs/v1/<client_root>/events/groups/<group> (the job argument of
 * proto_topic_make is the group's ident) */
enum proto_kind {
	PROTO_JOB,
	PROTO_CANCEL,
	PROTO_STATUS,
	PROTO_STATE,
	PROTO_EVENT,
	PROTO_GROUP_EVENT
};

struct proto_topic {
	enum proto_kind kind;
	char client_root[UUID_STR_LEN];
	char entity_ident[UUID_STR_LEN]; /* empty for PROTO_EVENT */
	char job[UUID_STR_LEN];          /* empty for PROTO_STATE */
};

/* Builds a topic into out (PROTO_MAX_TOPIC bytes). entity/job ignored where unused.
 * PROTO_ANY for a part makes a subscription filter: every topic and filter of the
 * protocol is built here (docs/mqtt.md). */
#define PROTO_ANY "+"
void proto_topic_make(char out[PROTO_MAX_TOPIC], enum proto_kind kind, const char *client_root,
		      const char *entity_ident, const char *job);
/* Parses a topic; RCS_ERR_INVAL unless it is one of the five forms with valid UUIDs. */
enum rcs_err proto_topic_parse(const char *topic, struct proto_topic *out);

/* ---- job envelope ---- */

struct proto_envelope {
	char job[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char entity_ident[UUID_STR_LEN];
	char task_ident[UUID_STR_LEN];
	long long task_version;
	const char *task_name;
	const char *script_name;
	char script_sha256[65];
	const char *script_source;
	size_t script_len;
	json_object *constants;      /* object */
	json_object *variables_info; /* object */
	json_object *variables;      /* object */
	json_object *signature;      /* object, or NULL */
	int64_t issued_at;
	int64_t expires_at; /* 0: never */
	long long timeout;  /* seconds */
	/* artifacts (docs/mqtt.md "Job envelope"): {"<name>": {"sha256", "size"}}, NULL: none
	 * (the members below are then absent from the envelope); with them, the release (NULL:
	 * null), the download's deadline (seconds) and the token that authorizes the downloads */
	json_object *artifacts;
	json_object *release;
	long long download_timeout;
	const char *artifact_token;
	json_object *root; /* decoded: owns the above; encode: unused */
};

#define PROTO_MAX_ARTIFACTS    16
#define PROTO_MAX_ARTIFACT_KEY 64
#define PROTO_MAX_TOKEN        512

/* The envelope as a json-c tree: the reference the coordinator's render_envelope is tested
 * against, and how the tests and fuzz_envelope build envelopes. */
json_object *proto_envelope_encode(const struct proto_envelope *env);
/* The members of env that come from its task version alone (script, constants,
 * variables_info, signature, timeout; artifacts, release, download_timeout) as JSON text without
 * the braces ("script":{...},...), to be written into each envelope of that version (the
 * coordinator's render_envelope); NULL when out of memory. Free with free(). */
char *proto_envelope_version_text(const struct proto_envelope *env, size_t *len);
/* Also checks that script_sha256 is the SHA-256 of script.source. */
enum rcs_err proto_envelope_decode(const char *payload, size_t len, struct proto_envelope *out,
				   struct jsonu_err *e);
void proto_envelope_free(struct proto_envelope *env);

/* ---- status report ---- */

struct proto_report {
	char job[UUID_STR_LEN];
	enum job_status status; /* a device status: edge_*, terminated */
	long long seq;          /* >= 1 */
	int64_t ts;
	const char *response; /* may be NULL */
	/* edge_error: the cause, one word (docs/mqtt.md "Status report"); NULL: not given
	 * (older agents) */
	const char *error;
	/* edge_running of a download: "progress": {"done", "total"} in bytes (docs/mqtt.md) */
	bool has_progress;
	int64_t progress_done, progress_total;
	/* the phase the job runs in (rcs.reboot{resume = ...}, docs/lua-api.md); NULL: its
	 * first run, or an older agent */
	const char *phase;
	/* edge_running "rebooting" with a phase: the seconds the device has to report again
	 * (PROTO_WITHIN_MIN..MAX); 0: not given */
	long long within;
	json_object *root; /* what response and error point into: the parsed JSON, */
	char *text;        /* or a copy of the payload (proto_report_decode's plain path) */
};

json_object *proto_report_encode(const struct proto_report *r);
/* A report as a device sends it (docs/mqtt.md "Status report"). A report as agents write
 * it (a flat object of its members, strings without escapes, plain integers) is read
 * without building a JSON tree; anything else, valid or not, goes the general way
 * (proto_report_decode_json), which names what is wrong. Both give the same report for any
 * text the first accepts (tests/unit/test_proto.c, tests/fuzz/fuzz_proto_report.c). */
enum rcs_err proto_report_decode(const char *payload, size_t len, struct proto_report *out,
				 struct jsonu_err *e);
enum rcs_err proto_report_decode_json(const char *payload, size_t len, struct proto_report *out,
				      struct jsonu_err *e);
void proto_report_free(struct proto_report *r);
/* A cause code or a phase name: 1-32 of a-z, 0-9 and _. */
bool proto_word_valid(const char *s);

/* ---- device state (retained, and the Last Will) ---- */

struct proto_state {
	bool online;
	json_object *tags; /* array of strings; may be NULL when encoding (written as []) */
	const char *agent_version;
	int64_t ts;
	json_object *root;
	/* an object of strings (PROTO_MAX_ATTRS...); NULL: none told (not written) */
	json_object *attributes;
};

/* Whether key (n bytes) may name an attribute; whether value may be one. */
bool proto_attr_key_valid(const char *key, size_t n);
bool proto_attr_value_valid(const char *value, size_t n);
/* Checks attrs (an object) against the limits above; e names what is wrong. */
enum rcs_err proto_attrs_check(json_object *attrs, struct jsonu_err *e);

json_object *proto_state_encode(const struct proto_state *s);
enum rcs_err proto_state_decode(const char *payload, size_t len, struct proto_state *out,
				struct jsonu_err *e);
void proto_state_free(struct proto_state *s);

/* ---- cancel ---- */

struct proto_cancel {
	char job[UUID_STR_LEN];
	const char *reason;
	json_object *root;
};

json_object *proto_cancel_encode(const struct proto_cancel *c);
enum rcs_err proto_cancel_decode(const char *payload, size_t len, struct proto_cancel *out,
				 struct jsonu_err *e);
void proto_cancel_free(struct proto_cancel *c);

#endif
