/*
 * api.h - what the REST API's handlers see: the request and its answer (struct api_req,
 * struct api_resp), the answers and error bodies, bodies, query parameters, pages and lists
 * (api.c), and the handlers themselves (api_tasks.c, api_scripts.c, api_jobs.c, api_inventory.c,
 * api_groups.c, api_webhooks.c, api_service.c), which api_routes.c routes to. The server
 * around them is http_api.h's (docs/api.md).
 */
#ifndef RCS_API_H
#define RCS_API_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "jsonu.h"
#include "signer.h"
#include "store.h"
#include "store_keys.h"

#define API_MAX_SEGMENTS     8
#define API_DEFAULT_PER_PAGE 50
#define API_MAX_PER_PAGE     500
#define API_MAX_BULK         10000

struct art_tokens;
struct bridge;
struct dl_limits;
struct dl_pacer;
struct group_settings;
struct lifecycle;
struct webhook_guard;

struct api_app {
	struct store *st;
	struct lifecycle *lc;
	struct signer *signer;
	struct bridge *bridge;    /* NULL without --mqtt */
	unsigned auth_fail_limit; /* unknown keys per client address and minute, then 429 */
	size_t max_body;
	/* webhooks: the guard of their addresses (webhooks.h); NULL allows no forbidden net */
	const struct webhook_guard *webhook_guard;
	/* the store itself (st is a reader of it while a read is answered) */
	struct store *writer;
	/* artifacts (docs/api.md "Artifacts"): their files' directory (SQLite), the largest
	 * artifact, the bytes per tenant */
	char artifact_dir[1024];
	long long artifact_max_size, artifact_quota;
	/* the signing key signs tasks with artifacts too (--sign-artifacts; docs/signing.md) */
	bool sign_artifacts;
	/* what makes and checks artifact tokens (art_token.h) */
	struct art_tokens *tokens;
	/* the groups' download limits (dl_limits.h) and the pace of their rates (dl_pacer.h);
	 * NULL: none held */
	struct dl_limits *dl;
	struct dl_pacer *pacer;
};

struct api_req {
	struct api_app *app;
	void *conn; /* struct MHD_Connection */
	const char *method;
	const char *seg[API_MAX_SEGMENTS]; /* path segments after /v3/commands */
	int nseg;
	const char *body; /* NULL when the request had none */
	size_t body_len;
	struct auth auth;
	int64_t now;
	/* the object a state-changing request acted on, for the audit log: a handler that
	 * creates one names it here; "" takes the ident in the path */
	char target[UUID_STR_LEN + 64];
	/* an upload streamed to storage as it came (POST /artifacts, api_artifacts.c), or NULL */
	struct api_upload *upload;
	/* the handler's slow checks that need no store (a webhook's host resolved, a script
	 * compiled) were made and passed before its transaction (http_api.c, api_prechecks) */
	bool prechecked;
};

struct api_resp {
	int status;
	json_object *body; /* owned; NULL for 204 */
	char *text;        /* owned (malloc'd): a JSON answer already serialized, else NULL */
	size_t text_len;
	int retry_after; /* seconds, for a Retry-After header (0: none) */
	void *mhd;       /* struct MHD_Response: an answer the handler made whole (bytes) */
};

typedef void (*api_handler)(struct api_req *req, struct api_resp *resp);

/* ---- for handlers ---- */

/* The address of the client of conn (a struct MHD_Connection) as numeric text, "" when
 * unknown; out holds INET6_ADDRSTRLEN bytes. */
void api_client_addr(void *conn, char *out);

/* Sets an error answer: {"error": {code, message, details: {field}}}. */
void api_error(struct api_resp *r, int status, const char *code, const char *field, const char *fmt,
	       ...) __attribute__((format(printf, 5, 6)));
/* 400 validation_failed from a jsonu_err. */
void api_invalid(struct api_resp *r, const struct jsonu_err *e);
/* Maps a storage error to its answer (404, 409, 503, 500). */
void api_store_error(struct api_resp *r, enum rcs_err err, const char *what);
/* Sets a JSON answer (takes body). */
void api_reply(struct api_resp *r, int status, json_object *body);
/* Sets a JSON answer already serialized (takes text, malloc'd, len bytes). */
void api_reply_text(struct api_resp *r, int status, char *text, size_t len);

/* Sets the JSON answer a render (render.h) wrote into b, taking b's data (b is freed
 * either way); err, the render's outcome, other than RCS_OK answers as a storage error. */
void api_reply_buf(struct api_resp *r, int status, struct buf *b, enum rcs_err err);
/* Parses the body as a JSON object; on failure sets 400 invalid_json and returns false.
 * The caller owns *out. An absent body is an error unless allow_empty (then *out is {}).
 * A null anywhere in it but in a job's variables and a task's constants (free-form) is 400
 * validation_failed naming it: a member typed non-null is never "not given". */
bool api_body_object(struct api_req *req, struct api_resp *r, bool allow_empty, json_object **out);
/* api_body_object, but the top-level members named by nullable (NULL-terminated) may be
 * null: those the OpenAPI document types as nullable. */
bool api_body_object_nullable(struct api_req *req, struct api_resp *r, bool allow_empty,
			      const char *const *nullable, json_object **out);
/* Query parameter or NULL. */
const char *api_query(struct api_req *req, const char *name);
/* Every value of a repeated query parameter, in order, into out (at most max); returns how
 * many there are, which may be more than max. */
size_t api_query_all(struct api_req *req, const char *name, const char **out, size_t max);
/* A query parameter the operation doesn't take, or one given twice, is refused, not ignored
 * (known: its parameters, space-separated, at most 64; NULL: none): false with r answered
 * (docs/api.md "Lists"). */
bool api_query_known(struct api_req *req, struct api_resp *r, const char *known);
/* The latest time a query filter takes, 2^53-1 Unix seconds: the largest integer every JSON
 * parser reads exactly, so a client checking the document's maximum agrees with the server
 * (2^63-1 is read as 2^63 by most), docs/api.md "Lists". */
#define API_MAX_TIME 9007199254740991LL
/* A time filter in Unix seconds, 0 to API_MAX_TIME: *has whether it was given, *out its
 * value (left as is when absent); on a bad value 400 invalid_parameter naming it, false. */
bool api_query_time(struct api_req *req, struct api_resp *r, const char *name, bool *has,
		    long long *out);
/* Reads page/per_page; on a bad value sets 400 invalid_parameter and returns false.
 * The list options are left at created_at, ascending, no bounds. */
bool api_page(struct api_req *req, struct api_resp *r, long long default_per_page,
	      struct store_page *out);
/*
 * api_page, then the list options of docs/api.md "Lists": sort ("key" ascending, "-key"
 * descending; keys: the space-separated sort_keys, the first one the default, descending
 * when default_desc), created_after and created_before (Unix seconds), name when
 * with_name, ident_prefix and ident_suffix. A bad value sets 400 invalid_parameter naming it and
 * returns false.
 */
bool api_list(struct api_req *req, struct api_resp *r, long long default_per_page,
	      const char *sort_keys, bool default_desc, bool with_name, struct store_page *out);

/* Loads a task the caller may see (public ones, its own, any for admins);
 * RCS_ERR_NOTFOUND otherwise, also for a malformed ident. */
struct task_rec;
enum rcs_err api_task_load(struct api_req *req, const char *ident, struct task_rec *out);

/* handlers (api_tasks.c) */
void api_tasks_list(struct api_req *req, struct api_resp *r);
void api_task_create(struct api_req *req, struct api_resp *r);
void api_task_get(struct api_req *req, struct api_resp *r);
void api_task_put(struct api_req *req, struct api_resp *r);
void api_task_patch(struct api_req *req, struct api_resp *r);
void api_task_delete(struct api_req *req, struct api_resp *r);
/* Gives every task of the tenant using the script a new version with its new bytes;
 * *bumped (malloc'd, *n of them) gets each task's ident and new version. */
struct render_task_bump;
enum rcs_err api_tasks_bump_script(struct api_req *req, const char *name,
				   struct render_task_bump **bumped, size_t *n);
/* handlers (api_scripts.c) */
void api_scripts_list(struct api_req *req, struct api_resp *r);
void api_script_get(struct api_req *req, struct api_resp *r);
void api_script_put(struct api_req *req, struct api_resp *r);
void api_script_delete(struct api_req *req, struct api_resp *r);

/* handlers (api_jobs.c) */
void api_task_jobs_list(struct api_req *req, struct api_resp *r);
void api_job_create(struct api_req *req, struct api_resp *r);
void api_jobs_bulk_list(struct api_req *req, struct api_resp *r);
void api_jobs_bulk_tags(struct api_req *req, struct api_resp *r);
void api_jobs_list(struct api_req *req, struct api_resp *r);
void api_job_get(struct api_req *req, struct api_resp *r);
void api_job_history(struct api_req *req, struct api_resp *r);
void api_job_cancel(struct api_req *req, struct api_resp *r);
void api_job_notifications(struct api_req *req, struct api_resp *r);

/* handlers (api_inventory.c) */
void api_devices_list(struct api_req *req, struct api_resp *r);
void api_device_create(struct api_req *req, struct api_resp *r);
void api_device_get(struct api_req *req, struct api_resp *r);
void api_device_patch(struct api_req *req, struct api_resp *r);
void api_device_delete(struct api_req *req, struct api_resp *r);
void api_keys_list(struct api_req *req, struct api_resp *r);
void api_key_create(struct api_req *req, struct api_resp *r);
void api_whoami(struct api_req *req, struct api_resp *r);
void api_key_delete(struct api_req *req, struct api_resp *r);
void api_groups_list(struct api_req *req, struct api_resp *r);
void api_group_get(struct api_req *req, struct api_resp *r);

/* handlers (api_webhooks.c) */
void api_webhooks_list(struct api_req *req, struct api_resp *r);
void api_webhook_create(struct api_req *req, struct api_resp *r);
void api_webhook_get(struct api_req *req, struct api_resp *r);
void api_webhook_patch(struct api_req *req, struct api_resp *r);
void api_webhook_delete(struct api_req *req, struct api_resp *r);
void api_webhook_deliveries(struct api_req *req, struct api_resp *r);
void api_audit_list(struct api_req *req, struct api_resp *r);

/* checks made before the transaction of a state-changing request (http_api.c,
 * api_prechecks): they answer only when the request fails them, else leave r alone */
void api_webhook_precheck(struct api_req *req, struct api_resp *r);
void api_script_precheck(struct api_req *req, struct api_resp *r);

/* artifacts (api_artifacts.c; docs/api.md "Artifacts"): the upload is read as it comes,
 * before its handler: api_upload_begin at a request's first call (true: it is an upload,
 * *out its state, or NULL when it was refused and answered at once; *ret for
 * libmicrohttpd), api_upload_data with each piece of the body, api_upload_free at the end */
struct api_upload;
bool api_upload_begin(struct api_app *app, void *conn, const char *url, const char *method,
		      struct api_upload **out, int *ret);
void api_upload_data(struct api_upload *up, const char *data, size_t n);
void api_upload_free(struct api_upload *up);
/* removes what uploads that did not end left (at start) */
enum rcs_err api_artifacts_sweep(struct api_app *app, const char *node);
void api_artifact_upload(struct api_req *req, struct api_resp *r);
void api_artifacts_list(struct api_req *req, struct api_resp *r);
void api_artifact_get(struct api_req *req, struct api_resp *r);
void api_artifact_content(struct api_req *req, struct api_resp *r);
void api_artifact_delete(struct api_req *req, struct api_resp *r);
/* A Range header (h, NULL: none) of one range against size bytes: 0, none applies (the
 * whole: absent, malformed or several ranges); 1, [*start, *start + *len), *len >= 1;
 * -1, none of it is satisfiable (416). */
int api_artifact_range(const char *h, long long size, long long *start, long long *len);

/* The device download route, GET /v3/devices/artifacts/<sha256 hex> with an artifact token
 * (api_device.c; docs/api.md "Device downloads"): whether url is on it, and its answer,
 * queued on conn (an MHD_Result). only: the device listener, where any other path is a
 * 404. */
bool api_device_route(const char *url);
int api_device_answer(struct api_app *app, void *conn, const char *url, const char *method,
		      bool only);
/* handlers without an api key (api_service.c) */
void api_health(struct api_req *req, struct api_resp *r);
void api_openapi(struct api_req *req, struct api_resp *r);

/* docs/openapi.json, embedded at build time (openapi_json.c, generated by embed.cmake) */
extern const unsigned char api_openapi_json[];
extern const size_t api_openapi_json_len;

/* ---- group sends (api_groups.c; docs/api.md "Rollouts") ---- */

/* A retry's defaults: the first backoff and its factor (thousandths). */
#define API_RETRY_BACKOFF_S    30
#define API_RETRY_FACTOR_MILLI 2000
/* Reads a retry object ({max_attempts, backoff_s, backoff_factor}) into g. */
enum rcs_err api_group_retry_read(json_object *o, struct group_settings *g, struct jsonu_err *e);
/* Reads a bulk send's rollout, abort, window, retry, download and continuous members (continuous:
 * tag sends only) into g, with the task's default retry (JSON text, NULL: none) when the
 * send gives none; *any: any of them applies (the send makes a group). On bad input the
 * answer is set (400 naming the field) and false returned. */
bool api_group_settings_read(struct api_resp *r, json_object *body, bool tag_send,
			     const char *task_retry, struct group_settings *g, bool *any);
void api_group_pause(struct api_req *req, struct api_resp *r);
void api_group_resume(struct api_req *req, struct api_resp *r);
void api_group_cancel(struct api_req *req, struct api_resp *r);

#endif
