/*
 * api_jobs.h - what a job's creation shares with the bulk sends (api_jobs.c, api_bulk.c;
 * docs/api.md, "Jobs" and "Bulk sends and groups"): the request's common members read from
 * the body and checked against the task, and the batch made of them. Private to those two
 * files: the handlers themselves are declared in api.h.
 */
#ifndef RCS_API_JOBS_H
#define RCS_API_JOBS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "api.h"
#include "rollout.h"
#include "store_tasks.h"

#define API_BULK_ANSWER_MAX ((size_t)512 << 20) /* bytes of a bulk send's answer */

struct job_batch;

/* A bulk send's "offline" (docs/api.md "Bulk sends and groups"): absent, the task's
 * allow_offline decides; "queue" and "reject" decide for the send. */
enum api_offline {
	API_OFFLINE_TASK,
	API_OFFLINE_QUEUE,
	API_OFFLINE_REJECT,
};

/* What every job creation shares, read from the body and checked against the task. */
struct api_job_req {
	struct task_rec task;
	/* the task's declared variables, as the checks take them */
	json_object *task_vi;
	json_object *variables; /* borrowed from body or empty */
	const char *comment;
	long long scheduled_time;
	long long ttl;
	json_object *mail_list;
	json_object *status_list;
	const char *group_name;
	/* group sends (docs/api.md "Rollouts") */
	struct group_settings gs;
	bool group_send; /* rollout, abort, window, retry or continuous: a group is made */
	const char *tag; /* a tag send's tag */
	enum api_offline offline;
};

/* Loads the task of the path (req->seg[1]) the caller may see, its declared variables, and
 * checks its signature against the trusted keys. On failure the answer is set and false
 * returned; jr is freed by api_job_req_free either way. */
bool api_job_load_task(struct api_req *req, struct api_resp *r, struct api_job_req *jr);
/* Reads the common members of the body (those of allowed) into jr and checks them against
 * the task. On failure the answer is set and false returned. */
bool api_job_read_common(struct api_req *req, struct api_resp *r, json_object *body,
			 const char *const *allowed, struct api_job_req *jr);
/* A batch of jr's jobs for the caller (b zeroed first; its jobs, group and the rest are the
 * caller's to add). */
void api_job_batch_init(struct api_req *req, struct api_job_req *jr, struct job_batch *b);
void api_job_req_free(struct api_job_req *jr);

#endif
