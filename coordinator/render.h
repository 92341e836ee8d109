/*
 * render.h - the only place that turns the store's records into the API's JSON
 * (docs/architecture.md): records in, JSON text out, appended to a struct buf. The shapes
 * are those of docs/api.md and docs/openapi.json; the same writer makes the job events of
 * docs/mqtt.md, "Monitoring".
 *
 * A struct render writes one value; its error is sticky (the first failure, usually
 * RCS_ERR_TOOBIG from the buffer's ceiling, stays, and the writes after it do nothing), so a
 * record is written without a check per member and render_end tells the outcome.
 */
#ifndef RCS_RENDER_H
#define RCS_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"
#include "uuid.h"

/* The store's records it writes (store_*.h) */
struct device_rec;
struct group_rec;
struct job_notification_rec;
struct job_rec;
struct key_rec;
struct script_rec;
struct store_audit_list;
struct store_device_list;
struct store_group_list;
struct store_history_list;
struct store_job_list;
struct store_job_notification_list;
struct store_key_list;
struct store_page_info;
struct store_script_list;
struct store_task_list;
struct store_webhook_delivery_list;
struct store_webhook_list;
struct task_rec;
struct webhook_rec;

#define RENDER_MAX_DEPTH 16

struct render {
	struct buf *out;
	enum rcs_err err;
	int depth;
	bool first[RENDER_MAX_DEPTH]; /* nothing written yet at this level */
	bool after_key;
};

void render_init(struct render *w, struct buf *out);
/* The error of the first write that failed, or RCS_OK. */
enum rcs_err render_end(struct render *w);

/* Values: inside an object each follows a render_key. */
void render_obj_open(struct render *w);
void render_obj_close(struct render *w);
void render_arr_open(struct render *w);
void render_arr_close(struct render *w);
void render_key(struct render *w, const char *key);
/* A JSON string, escaped; NULL writes null. */
void render_str(struct render *w, const char *s);
void render_strn(struct render *w, const char *s, size_t len);
void render_int(struct render *w, long long v);
void render_bool(struct render *w, bool v);
void render_null(struct render *w);
/* JSON text the store holds (written by the service itself, never a client's bytes
 * unchecked); NULL writes null. */
void render_raw(struct render *w, const char *json);
/* The same with its length: len bytes of JSON text, after a comma where one is due (a value,
 * or members of an object already written as text); NULL or 0 bytes writes null. */
void render_rawn(struct render *w, const char *json, size_t len);

/* key: value pairs of an object */
void render_kstr(struct render *w, const char *key, const char *s);
void render_kint(struct render *w, const char *key, long long v);
/* 0 written as null: times and durations the record leaves unset */
void render_kint_opt(struct render *w, const char *key, long long v);
void render_kbool(struct render *w, const char *key, bool v);
void render_kraw(struct render *w, const char *key, const char *json);

/* A page of a list: {page, per_page, total_pages, total_items, items: [ ... written between
 * the two calls ... ]} (docs/api.md, "Lists"). */
void render_page_open(struct render *w, const struct store_page_info *pg);
void render_page_close(struct render *w);

/* ---- records (each writes one value: an object) ---- */

/* keys and scripts */

/* An API key: {ident, user, role, client_root, created_at, revoked_at}. (render_key writes
 * an object's key: the record's writer is render_api_key.) */
void render_api_key(struct render *w, const struct key_rec *r);
/* A key just created: the record with its secret, api_key, the only time it is shown. */
void render_api_key_new(struct render *w, const struct key_rec *r, const char *secret);
void render_api_key_list(struct render *w, const struct store_key_list *l);
/* A script: {name, sha256, size, stock, updated_at}, and source when the record holds it. */
void render_script(struct render *w, const struct script_rec *r);
void render_script_list(struct render *w, const struct store_script_list *l);
/* A task that got a new version: an item of a script's tasks_updated. */
struct render_task_bump {
	char ident[UUID_STR_LEN];
	long long version;
};
/* The answer of PUT /scripts/<name>: the script with tasks_updated, [{ident, version}]. */
void render_script_put(struct render *w, const struct script_rec *r,
		       const struct render_task_bump *bumped, size_t n);

/* (end of keys and scripts) */

/* tasks */

/* A task as docs/api.md "Tasks" shows it (active as the string "true" or "false"). */
void render_task(struct render *w, const struct task_rec *r);
void render_task_list(struct render *w, const struct store_task_list *l);

/* (end of tasks) */

/* devices */

/* A device record (docs/api.md, "Devices"). */
void render_device(struct render *w, const struct device_rec *r);
/* A page of devices. */
void render_device_list(struct render *w, const struct store_device_list *l);

/* (end of devices) */

/* jobs, history, notifications, groups (render_jobs.c) */

/* The job record of GET /jobs/<id>, the job lists, the bulk sends' answers and the job events
 * of docs/mqtt.md, "Monitoring". */
void render_job(struct render *w, const struct job_rec *r);
void render_job_page(struct render *w, const struct store_job_list *l);
/*
 * The records of a batch's jobs (store_jobs_batch_each): the first rendered, and those like
 * it (like_first) copies of its text with their own idents, the only values they differ in.
 * c starts zeroed; render_job_copy_free frees it.
 */
struct render_job_copy {
	char *text;
	size_t len, ident_at, entity_at; /* where the two idents are in text */
};
void render_job_batch(struct render *w, struct render_job_copy *c, const struct job_rec *r,
		      bool like_first);
void render_job_copy_free(struct render_job_copy *c);
/* A page of a job's history: each entry the job's record with the entry's status, time
 * (update_at), response and response time. */
void render_history_page(struct render *w, const struct job_rec *job,
			 const struct store_history_list *l);
void render_job_notification(struct render *w, const struct job_notification_rec *r);
void render_job_notification_page(struct render *w, const struct store_job_notification_list *l);
/* {ident, name, created_user, created_at, task_ident}, and total and statuses when the record
 * has its counts (GET /groups/<id>). */
void render_group(struct render *w, const struct group_rec *r);

struct proto_envelope;
/*
 * A job's envelope (docs/mqtt.md, "Job envelope"): env's own members, its task version's
 * (version_text, from proto_envelope_version_text: the same for every job of the version)
 * and variables, the job's stored JSON object (NULL: {}). env->variables is not used. The
 * same JSON as proto_envelope_encode, written without building it again for each job.
 */
void render_envelope(struct render *w, const struct proto_envelope *env, const char *version_text,
		     size_t version_len, const char *variables);
void render_group_page(struct render *w, const struct store_group_list *l);
/* The data of a group.status delivery (webhooks): the group and the status it came to. */
void render_webhook_group(struct render *w, const struct group_rec *r, const char *status);

/* (end of jobs, history, notifications, groups) */

/* webhooks and the audit log */

/* A webhook (docs/api.md, "Webhooks"): {ident, url, events, statuses, active, created_user,
 * created_at, update_at}, never its secret. */
void render_webhook(struct render *w, const struct webhook_rec *r);
/* A webhook just created: the record, with the secret when it was generated (shown once). */
void render_webhook_new(struct render *w, const struct webhook_rec *r, const char *secret);
void render_webhook_list(struct render *w, const struct store_webhook_list *l);
/* A page of deliveries, each with its attempts. */
void render_webhook_delivery_page(struct render *w, const struct store_webhook_delivery_list *l);
/* A page of the audit log (docs/api.md, "Audit"). */
void render_audit_page(struct render *w, const struct store_audit_list *l);

/* (end of webhooks and the audit log) */

#endif
