/*
 * fuzz_coord.c - the coordinator fixture of the fuzz targets. See fuzz_coord.h.
 */
#include "fuzz_coord.h"

#include <string.h>

#include "fuzz_util.h"
#include "jsonu.h"
#include "lifecycle.h"
#include "manifest.h"
#include "render.h"
#include "store.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "store_keys.h"
#include "store_tasks.h"

struct fuzz_coord fz;

static const char ECHO_SRC[] = "local msg = rcs.variables.message\nreturn msg or \"pong\"\n";
static const char ECHO_VARS[] =
    "{\"message\": {\"type\": \"string\", \"optional\": true, \"alias\": \"Message\"},"
    " \"delay\": {\"type\": \"integer\", \"optional\": true},"
    " \"at\": {\"type\": \"timestamp\", \"optional\": true},"
    " \"ratio\": {\"type\": \"number\", \"optional\": true},"
    " \"loud\": {\"type\": \"boolean\", \"optional\": true, \"description\": \"shout\"}}";

/* ---- fake transport: presence counts, nothing is delivered ---- */

static void hook_job_due(void *ctx, const char *ident)
{
	(void)ctx;
	(void)ident;
}

static void hook_jobs_due(void *ctx, const struct job_new *jobs, size_t n)
{
	(void)ctx;
	(void)jobs;
	(void)n;
}

static void hook_job_cancelled(void *ctx, const struct job_rec *job)
{
	(void)ctx;
	FUZZ_CHECK(job != NULL && uuid_valid(job->ident), "job_cancelled without a record");
}

/* The record goes out as an event, rendered: it must be the job, as JSON. */
static void hook_job_changed(void *ctx, const struct job_rec *job)
{
	json_object *o = NULL;
	struct jsonu_err e;
	struct render w;
	struct buf rec;

	(void)ctx;
	FUZZ_CHECK(strcmp(job->client_root, FZ_ROOT) == 0, "an event for tenant %s",
		   job->client_root);
	buf_init(&rec, (size_t)8 << 20);
	render_init(&w, &rec);
	render_job(&w, job);
	FUZZ_CHECK(render_end(&w) == RCS_OK, "job %s: its record does not render", job->ident);
	FUZZ_CHECK(jsonu_parse(rec.data, rec.len, JSONU_MAX_DEPTH, &o, &e) == RCS_OK,
		   "a job event is not JSON (%s): %.*s", e.message, (int)rec.len, rec.data);
	FUZZ_CHECK(json_object_is_type(o, json_type_object) &&
		       strcmp(jsonu_member_str(o, "ident"), job->ident) == 0,
		   "a job event is not the job's record: %.*s", (int)rec.len, rec.data);
	json_object_put(o);
	buf_free(&rec);
}

static const struct lifecycle_hooks fz_hooks = {
    .job_due = hook_job_due,
    .jobs_due = hook_jobs_due,
    .job_cancelled = hook_job_cancelled,
    .job_changed = hook_job_changed,
};

/* ---- fixture ---- */

static json_object *fz_parse(const char *text)
{
	json_object *o = NULL;
	struct jsonu_err e;

	if (jsonu_parse(text, strlen(text), JSONU_MAX_DEPTH, &o, &e) != RCS_OK) {
		fprintf(stderr, "fuzz: fixture JSON: %s\n", e.message);
		abort();
	}
	return o;
}

static void fz_ok(enum rcs_err err, const char *what)
{
	if (err != RCS_OK) {
		fprintf(stderr, "fuzz: fixture: %s: %s\n", what, rcs_strerror(err));
		abort();
	}
}

static void fz_task(const char *ident, long long version, const char *name, const char *script,
		    const char *src, size_t src_len, json_object *vi, json_object *constants,
		    json_object *mails, json_object *statuses, json_object *sig)
{
	struct task_write t;
	char sha[SHA256_HEX_LEN];

	sha256_hex(src, src_len, sha);
	memset(&t, 0, sizeof(t));
	t.ident = ident;
	t.client_root = FZ_ROOT;
	t.version = version;
	t.name = name;
	t.script = script;
	t.script_src = src;
	t.script_len = src_len;
	t.script_sha256 = sha;
	t.variables_info = vi ? jsonu_dump(vi, NULL) : NULL;
	t.constants = constants ? jsonu_dump(constants, NULL) : NULL;
	t.comment = "fixture";
	t.active = true;
	t.is_public = true;
	t.timeout = 300;
	t.created_user = FZ_USER;
	t.created_at = t.update_at = FZ_NOW - 100;
	t.mail_list = mails ? jsonu_dump(mails, NULL) : NULL;
	t.status_list = statuses ? jsonu_dump(statuses, NULL) : NULL;
	t.signature = sig ? jsonu_dump(sig, NULL) : NULL;
	fz_ok(store_task_put(fz.st, &t, true), "task");
}

static void fz_setup(void)
{
	char *vec = fuzz_vector("manifest-1.json", NULL);
	char *keyid = fuzz_vector("manifest-1.keyid", NULL);
	char *sigval = fuzz_vector("manifest-1.sig.b64", NULL);
	json_object *m = fz_parse(vec), *sig = json_object_new_object();
	json_object *vi = fz_parse(ECHO_VARS);
	json_object *empty_o = json_object_new_object(), *empty_a = json_object_new_array();
	json_object *mails = fz_parse("[\"ops@example.com\"]");
	json_object *statuses = fz_parse("[\"terminated\", \"edge_error\"]");
	json_object *script = jsonu_member(m, "script");
	const char *script_name = jsonu_member_str(m, "script_name");
	struct store_state_in state = {true, "[\"rep-tag\"]", "0.1.0", 0, NULL};
	struct store_state_out came;

	fz_ok(store_open(":memory:", &fz.st), "store_open");
	fz_ok(store_tenant_create(fz.st, FZ_ROOT, FZ_NOW - 1000), "tenant");
	fz_ok(store_script_put(fz.st, "", "echo", ECHO_SRC, strlen(ECHO_SRC), FZ_NOW - 1000, NULL),
	      "stock script");
	fz_ok(store_script_put(fz.st, FZ_ROOT, script_name, json_object_get_string(script),
			       (size_t)json_object_get_string_len(script), FZ_NOW - 1000, NULL),
	      "script");
	json_object_object_add(sig, "alg", json_object_new_string("ES256"));
	json_object_object_add(sig, "key_id", json_object_new_string(keyid));
	json_object_object_add(sig, "value", json_object_new_string(sigval));
	fz_task(FZ_TASK_SIGNED, json_object_get_int64(jsonu_member(m, "version")), "Set config",
		script_name, json_object_get_string(script),
		(size_t)json_object_get_string_len(script), jsonu_member(m, "variables_info"),
		jsonu_member(m, "constants"), empty_a, empty_a, sig);
	fz_task(FZ_TASK_ECHO, 1, "Echo", "echo", ECHO_SRC, strlen(ECHO_SRC), vi, empty_o, mails,
		statuses, NULL);
	fz_ok(store_device_insert(fz.st, FZ_ROOT, FZ_DEV_ONLINE, "pump-7", "[\"site-a\"]",
				  FZ_NOW - 500),
	      "device");
	fz_ok(store_device_insert(fz.st, FZ_ROOT, FZ_DEV_OFFLINE, "pump-8",
				  "[\"site-a\",\"model-x\"]", FZ_NOW - 500),
	      "device");
	fz_ok(store_device_state(fz.st, FZ_ROOT, FZ_DEV_ONLINE, &state, FZ_NOW - 10, &came),
	      "device state");
	json_object_put(m);
	json_object_put(sig);
	json_object_put(vi);
	json_object_put(empty_o);
	json_object_put(empty_a);
	json_object_put(mails);
	json_object_put(statuses);
	free(vec);
	free(keyid);
	free(sigval);

	fz.lc.st = fz.st;
	fz.lc.hooks = &fz_hooks;
	fz.app.st = fz.st;
	fz.app.lc = &fz.lc;
}

static void fz_teardown(void)
{
	store_close(fz.st);
	fz.st = NULL;
}

static void fz_atexit(void)
{
	fz_teardown();
	signer_free(fz.signer);
	fz.signer = NULL;
}

void fz_init(void)
{
	char *trusted[] = {(char *)fuzz_vector_path("manifest-1.pub.pem")};

	fuzz_quiet();
	memset(&fz, 0, sizeof(fz));
	fz_ok(signer_open(NULL, NULL, trusted, 1, &fz.signer), "signer");
	fz.app.signer = fz.signer;
	fz.app.auth_fail_limit = 120;
	fz.app.max_body = 1024 * 1024;
	fz_setup();
	atexit(fz_atexit);
}

void fz_tick(void)
{
	if (++fz.runs % FZ_RESET == 0) {
		fz_teardown();
		fz_setup();
	}
}

int fz_call(api_handler fn, const char *method, const char *const *seg, int nseg,
	    const uint8_t *body, size_t len, json_object **answer)
{
	struct api_req req;
	struct api_resp resp;
	json_object *ans = NULL;
	struct jsonu_err e;

	memset(&req, 0, sizeof(req));
	memset(&resp, 0, sizeof(resp));
	req.app = &fz.app;
	req.method = method;
	for (int i = 0; i < nseg && i < API_MAX_SEGMENTS; i++)
		req.seg[i] = seg[i];
	req.nseg = nseg;
	req.body = len > 0 ? (const char *)body : NULL;
	req.body_len = len;
	snprintf(req.auth.client_root, sizeof(req.auth.client_root), "%s", FZ_ROOT);
	snprintf(req.auth.key_ident, sizeof(req.auth.key_ident), "%s", FZ_DEV_OFFLINE);
	snprintf(req.auth.user, sizeof(req.auth.user), "%s", FZ_USER);
	req.auth.role = ROLE_ADMIN;
	req.now = FZ_NOW;
	fn(&req, &resp);
	/* an answer serialized by the handler itself must be JSON too */
	if (resp.text) {
		FUZZ_CHECK(resp.body == NULL, "an answer with both a tree and a text");
		FUZZ_CHECK(jsonu_parse(resp.text, resp.text_len, JSONU_MAX_DEPTH, &ans, &e) ==
			       RCS_OK,
			   "%s /%s answered text that is not JSON (%s): %.*s", method, seg[0],
			   e.message, (int)resp.text_len, resp.text);
		free(resp.text);
		resp.text = NULL;
	} else {
		ans = resp.body;
	}
	FUZZ_CHECK(resp.status >= 200 &&
			   resp.status<500, "%s /%s%s%s answered %d: %s", method, seg[0], nseg> 1
		       ? "/"
		       : "",
		   nseg > 1 ? seg[1] : "", resp.status, ans ? jsonu_dump(ans, NULL) : "(no body)");
	if (resp.status != 204)
		FUZZ_CHECK(json_object_is_type(ans, json_type_object),
			   "answer %d without a JSON object", resp.status);
	if (resp.status >= 400) {
		json_object *err = jsonu_member(ans, "error");
		const char *msg = jsonu_member_str(err, "message");
		FUZZ_CHECK(jsonu_member_str(err, "code") != NULL && msg != NULL,
			   "error answer without code or message: %s", jsonu_dump(ans, NULL));
	}
	if (getenv("RCS_FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz: %s /%s%s%s: %d %.300s\n", method, seg[0],
			nseg > 1 ? "/" : "", nseg > 1 ? seg[1] : "", resp.status,
			ans ? jsonu_dump(ans, NULL) : "");
	if (answer)
		*answer = ans;
	else if (ans)
		json_object_put(ans);
	return resp.status;
}

int fz_call_str(api_handler fn, const char *method, const char *const *seg, int nseg,
		const char *body, json_object **answer)
{
	return fz_call(fn, method, seg, nseg, (const uint8_t *)body, body ? strlen(body) : 0,
		       answer);
}

void fz_job_new(const char *task, const char *device, char ident[UUID_STR_LEN])
{
	struct job_batch b;
	struct job_new one;

	memset(&b, 0, sizeof(b));
	fz_ok(uuid_v7(one.ident), "uuid");
	one.entity_ident = device;
	b.client_root = FZ_ROOT;
	b.task_ident = task;
	b.task_version = 1;
	b.task_name = "Echo";
	b.created_user = FZ_USER;
	b.variables = "{}";
	b.mail_list = "[]";
	b.status_list = "[]";
	b.task_mail_list = "[]";
	b.task_status_list = "[]";
	b.now = FZ_NOW;
	b.jobs = &one;
	b.n = 1;
	fz_ok(store_jobs_create(fz.st, &b), "job");
	memcpy(ident, one.ident, UUID_STR_LEN);
}
