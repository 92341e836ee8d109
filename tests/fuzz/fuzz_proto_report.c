/*
 * fuzz_proto_report - a device's status report as the coordinator takes it
 * (coordinator/bridge_apply.c bridge_apply_report, which is static: this
 * target does what it does): proto_report_decode, then the report applied
 * with lifecycle_move to a fresh pending job of the device in a real store.
 *
 * Properties: the plain path and the JSON path decode it alike (proto.h); an accepted
 * report re-encodes (proto_report_encode) to one
 * that decodes to the same fields; its status is one a device may report;
 * applying it never fails but for the reasons a report may be refused, and
 * an applied report leaves the job in the reported status with its response.
 */
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"
#include "lifecycle.h"
#include "proto.h"
#include "store_jobs.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_init();
	return 0;
}

static void check_roundtrip(const struct proto_report *r)
{
	struct proto_report again;
	struct jsonu_err e;
	json_object *o = proto_report_encode(r);
	size_t len = 0;
	const char *text = jsonu_dump(o, &len);
	enum rcs_err err = proto_report_decode(text, len, &again, &e);

	FUZZ_CHECK(err == RCS_OK, "an encoded report does not decode: %s: %s\n%s", e.field,
		   e.message, text);
	FUZZ_CHECK(strcmp(r->job, again.job) == 0 && r->status == again.status &&
		       r->seq == again.seq && r->ts == again.ts &&
		       (r->response == NULL) == (again.response == NULL) &&
		       (r->response == NULL || strcmp(r->response, again.response) == 0) &&
		       (r->phase == NULL) == (again.phase == NULL) &&
		       (r->phase == NULL || strcmp(r->phase, again.phase) == 0) &&
		       r->within == again.within,
		   "the report changed through encode and decode:\n%s", text);
	proto_report_free(&again);
	json_object_put(o);
}

static void apply(const struct proto_report *r)
{
	char job[UUID_STR_LEN];
	struct job_move mv;
	enum store_move res;
	struct job_rec after;
	enum rcs_err err;

	fz_job_new(FZ_TASK_ECHO, FZ_DEV_ONLINE, job);
	memset(&mv, 0, sizeof(mv));
	mv.client_root = FZ_ROOT;
	mv.entity_ident = FZ_DEV_ONLINE;
	mv.ident = job;
	mv.to = r->status;
	mv.response = r->response;
	mv.replace_response = true;
	mv.set_response_time = status_is_terminal(r->status);
	mv.seq = r->seq;
	mv.now = FZ_NOW;
	err = lifecycle_move(&fz.lc, &mv, &res, &after);
	FUZZ_CHECK(err == RCS_OK, "a report on a pending job: %s", rcs_strerror(err));
	FUZZ_CHECK(res == STORE_MOVE_APPLIED, "a report on a pending job was not applied (%d)",
		   (int)res);
	FUZZ_CHECK(after.status == r->status, "applied %s, the job is %s", status_name(r->status),
		   status_name(after.status));
	FUZZ_CHECK((r->response == NULL && after.response == NULL) ||
		       (r->response && after.response && strcmp(r->response, after.response) == 0),
		   "the job's response is not the report's");
	store_job_rec_free(&after);

	/* the same report again (same seq) changes nothing (docs/mqtt.md) */
	err = lifecycle_move(&fz.lc, &mv, &res, NULL);
	FUZZ_CHECK(err == RCS_OK && res == STORE_MOVE_DUPLICATE, "a repeated report: %s, %d",
		   rcs_strerror(err), (int)res);
}

static bool same_text(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* The plain path and the JSON path give the same report, or the same error. */
static void check_paths(const uint8_t *data, size_t size, enum rcs_err err,
			const struct proto_report *r, const struct jsonu_err *e)
{
	struct proto_report j;
	struct jsonu_err ej;
	enum rcs_err jerr;

	memset(&ej, 0, sizeof(ej));
	jerr = proto_report_decode_json((const char *)data, size, &j, &ej);
	FUZZ_CHECK(err == jerr, "decoded %d, by the JSON path %d", (int)err, (int)jerr);
	if (err == RCS_OK)
		FUZZ_CHECK(strcmp(r->job, j.job) == 0 && r->status == j.status && r->seq == j.seq &&
			       r->ts == j.ts && same_text(r->response, j.response) &&
			       same_text(r->error, j.error),
			   "the two paths decoded different reports");
	else
		FUZZ_CHECK(strcmp(e->field, ej.field) == 0 && strcmp(e->message, ej.message) == 0,
			   "the two paths refused it differently: %s / %s", e->message, ej.message);
	proto_report_free(&j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_report r;
	struct jsonu_err e;
	enum rcs_err err;

	fz_tick();
	memset(&e, 0, sizeof(e));
	err = proto_report_decode((const char *)data, size, &r, &e);
	check_paths(data, size, err, &r, &e);
	if (err != RCS_OK) {
		FUZZ_CHECK(r.root == NULL && r.text == NULL, "a refused report kept its tree");
		FUZZ_CHECK(e.message[0] != '\0', "a refused report without a message");
		return 0;
	}
	FUZZ_CHECK(uuid_valid(r.job) && status_is_device(r.status) && r.seq >= 1,
		   "decoded job '%s', status %d, seq %lld", r.job, (int)r.status, r.seq);
	check_roundtrip(&r);
	apply(&r);
	proto_report_free(&r);
	return 0;
}
