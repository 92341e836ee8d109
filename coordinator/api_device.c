/*
 * api_device.c - the device download route (docs/api.md, "Device downloads"):
 * GET /v3/devices/artifacts/<sha256 hex> with "Authorization: Bearer <artifact token>",
 * answered on the main listener and on --device-listen (which serves nothing else). The token
 * names the job, the device and the tenant (art_token.h); the job must not have ended (410
 * job_terminal) and its task version must pin the artifact (else 404). Range and If-Range as
 * GET /artifacts/<ident>/content. The bytes served per job are capped at 3x its artifacts'
 * size (then 429), counted as they go out; the first download of each artifact of a job is
 * audited. A job's group holds its devices to its download limits (docs/api.md, "Download
 * limits"; dl_limits.h): over max_concurrent devices a 429 busy with Retry-After, and the
 * group's byte rate paced by suspending the connection (dl_pacer.h). See api.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "art_token.h"
#include "dl_limits.h"
#include "dl_pacer.h"
#include "log.h"
#include "metrics.h"
#include "status.h"
#include "store_artifacts.h"
#include "store_audit.h"
#include "store_downloads.h"
#include "store_groups.h"
#include "store_jobs.h"

#define DEV_PREFIX    "/v3/devices/artifacts/"
#define DEV_CAP_TIMES 3  /* the bytes of a job's artifacts it may be served in all */
#define DEV_RETRY_S   60 /* Retry-After of a 429 */
#define DEV_BLOCK     (256 * 1024)

bool api_device_route(const char *url)
{
	return strncmp(url, DEV_PREFIX, sizeof(DEV_PREFIX) - 1) == 0;
}

/* One download under way: the bytes [start, start + len) of an artifact, from its file or
 * its chunks, counted as they go. */
struct dev_dl {
	struct api_app *app;
	char job[UUID_STR_LEN], sha[65];
	int fd; /* the file (SQLite), -1: the chunks of blob_id (PostgreSQL) */
	char blob_id[40];
	long long start, len, sent, chunk;
	size_t got;
	unsigned char *buf; /* a chunk */
	/* the group's limits: its ident ("" for a job without a group), the device, the
	 * connection (to suspend it), the rate, the artifact's size (a download that reached
	 * its end is complete) */
	char group[UUID_STR_LEN], device[UUID_STR_LEN];
	struct MHD_Connection *conn;
	long long rate, size;
};

/* A request's refusal, or its answer (the download's identity and what it tells). */
struct dev_req {
	struct api_resp r;
	char job[UUID_STR_LEN], device[UUID_STR_LEN], tenant[UUID_STR_LEN], sha[65];
	long long size, total;
	struct artifact_rec a;
	char group[UUID_STR_LEN]; /* the job's group, "" for none */
	struct dl_limit lim;      /* its download limits */
	bool admitted;            /* counted by the group's limits (dl_limits_admit) */
};

/* Of take bytes, those the group's rate lets go now (0: the connection suspended until
 * more may, or -1: it cannot be, the pacer stopping). */
static ssize_t dev_pace(struct dev_dl *d, size_t take)
{
	int64_t now = dl_pacer_now_ms(), wait = 0;
	size_t got;

	if (d->rate <= 0 || d->app->dl == NULL || d->app->pacer == NULL)
		return (ssize_t)take;
	got = dl_limits_take(d->app->dl, d->group, d->rate, take, now, &wait);
	if (got > 0)
		return (ssize_t)got;
	return dl_pacer_sleep(d->app->pacer, d->conn, now + wait) ? 0 : -1;
}

static ssize_t dev_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct dev_dl *d = cls;
	long long at = d->start + (long long)pos, left = d->len - (long long)pos;
	size_t take = max < (size_t)left ? max : (size_t)left;
	size_t off = 0;
	ssize_t n;

	if (left <= 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (d->fd < 0) {
		long long c = at / STORE_ARTIFACT_CHUNK;

		off = (size_t)(at % STORE_ARTIFACT_CHUNK);
		if (c != d->chunk) {
			d->chunk = -1;
			if (store_artifact_chunk(d->app->writer, d->blob_id, c, d->buf,
						 STORE_ARTIFACT_CHUNK, &d->got) != RCS_OK)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			d->chunk = c;
		}
		if (off >= d->got)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (take > d->got - off)
			take = d->got - off;
	}
	n = dev_pace(d, take);
	if (n <= 0)
		return n == 0 ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
	take = (size_t)n;
	if (d->fd >= 0) {
		n = pread(d->fd, out, take, (off_t)at);
		if (n <= 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	} else {
		memcpy(out, d->buf + off, take);
		n = (ssize_t)take;
	}
	d->sent += n;
	metrics_artifact_bytes(false, (unsigned long long)n);
	return n;
}

/* The download ended (sent or cut): what it did not send is given back to the job's cap. */
static void dev_free(void *cls)
{
	struct dev_dl *d = cls;
	struct store *st = d->app->writer;
	enum rcs_err err = store_tx_begin(st);

	if (err == RCS_OK) {
		err = store_job_download_end(st, d->job, d->sha, d->len, d->sent);
		err = store_tx_end(st, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
	}
	if (err != RCS_OK)
		log_warnx("device download of job %s: its bytes not counted: %s", d->job,
			  rcs_strerror(err));
	if (d->group[0] && d->app->dl != NULL)
		dl_limits_end(d->app->dl, d->group, d->device,
			      d->len > 0 && d->start + d->sent >= d->size, dl_pacer_now_ms());
	metrics_artifact_download(-1);
	if (d->fd >= 0)
		close(d->fd);
	free(d->buf);
	free(d);
}

/* Sends r (an error, or r->mhd) on conn. */
static int dev_send(struct MHD_Connection *conn, struct api_resp *r, int64_t started_us)
{
	struct MHD_Response *resp = r->mhd;
	const char *text = "";
	size_t len = 0;
	char ra[16];
	int ret = MHD_NO;
	struct timespec ts;

	if (resp == NULL) {
		text = r->body ? jsonu_dump(r->body, &len) : "";
		resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
		if (resp != NULL) {
			MHD_add_response_header(resp, "Content-Type", "application/json");
			MHD_add_response_header(resp, "Cache-Control", "no-store");
		}
	}
	if (resp != NULL) {
		if (r->status == 401)
			MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
		if (r->retry_after > 0) {
			snprintf(ra, sizeof(ra), "%d", r->retry_after);
			MHD_add_response_header(resp, "Retry-After", ra);
		}
		if (r->status == 405)
			MHD_add_response_header(resp, "Allow", "GET");
		ret = (int)MHD_queue_response(conn, (unsigned)r->status, resp);
		MHD_destroy_response(resp);
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	metrics_http("GET", r->status,
		     (double)((int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - started_us) / 1e6);
	json_object_put(r->body);
	r->body = NULL;
	r->mhd = NULL;
	return ret;
}

/* The path's artifact and the token's job, checked against the store: false with q->r
 * answered (401, 404, 410). */
static bool dev_check(struct api_app *app, struct MHD_Connection *conn, const char *url,
		      struct dev_req *q)
{
	const char *hex = url + sizeof(DEV_PREFIX) - 1;
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	struct store *rd = NULL;
	struct job_rec job;
	bool have_job = false;
	enum rcs_err err;

	if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64) {
		api_error(&q->r, 404, "not_found", NULL, "no such artifact");
		return false;
	}
	memcpy(q->sha, hex, 65);
	if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0 || app->tokens == NULL ||
	    art_token_check(app->tokens, auth + 7, q->job, q->device, q->tenant) != RCS_OK) {
		api_error(&q->r, 401, "unauthorized", NULL,
			  "an artifact token is required: Authorization: Bearer <artifact_token>");
		return false;
	}
	rd = store_reader(app->st);
	err = store_job_rec_get(rd, q->job, &job);
	have_job = err == RCS_OK;
	if (err == RCS_OK &&
	    (strcmp(job.client_root, q->tenant) != 0 || strcmp(job.entity_ident, q->device) != 0))
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK && status_is_terminal(job.status)) {
		api_error(&q->r, 410, "job_terminal", NULL,
			  "the job has ended: its artifacts are no longer served");
		goto out;
	}
	if (err == RCS_OK)
		err = store_job_artifact(rd, q->job, q->sha, &q->size, &q->total);
	if (err == RCS_OK)
		err = store_artifact_get(rd, q->tenant, q->sha, &q->a);
	if (err == RCS_OK && job.group_ident[0] && app->dl != NULL) {
		memcpy(q->group, job.group_ident, sizeof(q->group));
		err = store_group_download(rd, q->group, &q->lim.max_concurrent,
					   &q->lim.max_bytes_per_s);
	}
	if (err == RCS_ERR_NOTFOUND)
		api_error(&q->r, 404, "not_found", NULL, "the job does not pin this artifact");
	else if (err != RCS_OK)
		api_store_error(&q->r, err, "artifact");
out:
	if (have_job)
		store_job_rec_free(&job);
	store_reader_put(app->st, rd);
	return q->r.status == 0;
}

/* The audit record of a job's first download of an artifact (docs/api.md, "Audit"): the
 * device as its user, the job as its target; never the token. */
static enum rcs_err dev_audit(struct store *st, struct MHD_Connection *conn, const char *url,
			      struct dev_req *q, int status)
{
	char addr[INET6_ADDRSTRLEN];
	struct audit_rec rec;

	api_client_addr(conn, addr);
	memset(&rec, 0, sizeof(rec));
	rec.client_root = q->tenant;
	rec.ts = (int64_t)time(NULL);
	rec.user = q->device;
	rec.method = "GET";
	rec.path = (char *)url;
	rec.target = q->job;
	rec.status_code = status;
	rec.remote = addr[0] ? addr : NULL;
	return store_audit_add(st, &rec);
}

/* The job's count of bytes (len more, held by this download) and, at its first download of
 * the artifact, the audit record: false with q->r answered (429 over the cap, 503). */
static bool dev_account(struct api_app *app, struct MHD_Connection *conn, const char *url,
			struct dev_req *q, long long len, int status)
{
	struct store *st = app->writer;
	long long served = 0, cap = DEV_CAP_TIMES * q->total;
	bool first = false;
	enum rcs_err err = store_tx_begin(st);

	if (err == RCS_OK) {
		err = store_job_download_begin(st, q->job, q->sha, len, cap, &served, &first);
		if (err == RCS_OK && first)
			err = dev_audit(st, conn, url, q, status);
		err = store_tx_end(st, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
	}
	if (err != RCS_OK) {
		api_store_error(&q->r, err, "artifact");
		return false;
	}
	if (served >= cap && cap > 0) {
		api_error(&q->r, 429, "too_many_requests", NULL,
			  "this job has been served %lld bytes, %d times its artifacts' size",
			  served, DEV_CAP_TIMES);
		q->r.retry_after = DEV_RETRY_S;
		return false;
	}
	return true;
}

/* What the download needs of the group's limits (an admitted request ends in dev_free). */
static void dev_dl_limits(struct dev_dl *d, const struct dev_req *q)
{
	if (!q->admitted)
		return;
	memcpy(d->group, q->group, sizeof(d->group));
	memcpy(d->device, q->device, sizeof(d->device));
	d->rate = q->lim.max_bytes_per_s;
	d->size = q->a.size;
}

/* The group's limits (docs/api.md "Download limits"): a place among the devices of the
 * group downloading now, else false with q->r answered (429 busy, Retry-After). */
static bool dev_admit(struct api_app *app, struct dev_req *q)
{
	int retry = 0;

	if (q->group[0] == '\0' || app->dl == NULL)
		return true;
	if (dl_limits_admit(app->dl, q->group, q->device, &q->lim, dl_pacer_now_ms(), &retry)) {
		q->admitted = true;
		return true;
	}
	api_error(&q->r, 429, "busy", NULL,
		  "the group's devices download at most %lld at once: try again later",
		  q->lim.max_concurrent);
	q->r.retry_after = retry;
	return false;
}

/* The download's source: its file open, or a chunk's buffer. NULL when it cannot be read. */
static struct dev_dl *dev_source(struct api_app *app, const struct dev_req *q)
{
	struct dev_dl *d = calloc(1, sizeof(*d));
	char path[PATH_MAX];
	struct stat sb;

	if (d == NULL)
		return NULL;
	d->app = app;
	d->fd = -1;
	d->chunk = -1;
	memcpy(d->job, q->job, sizeof(d->job));
	memcpy(d->sha, q->sha, sizeof(d->sha));
	dev_dl_limits(d, q);
	if (q->a.blob_id[0]) {
		snprintf(d->blob_id, sizeof(d->blob_id), "%s", q->a.blob_id);
		d->buf = malloc(STORE_ARTIFACT_CHUNK);
		if (d->buf != NULL)
			return d;
	} else if (store_artifact_path(app->artifact_dir, q->tenant, q->sha, path, sizeof(path))) {
		d->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (d->fd >= 0 && fstat(d->fd, &sb) == 0 && sb.st_size == q->a.size)
			return d;
		log_warnx("device download: %s: %s", path,
			  d->fd < 0 ? strerror(errno) : "not the size of its record");
		if (d->fd >= 0)
			close(d->fd);
	}
	free(d);
	return NULL;
}

/* 416: none of the range is in the artifact, with Content-Range: bytes * / size. */
static void dev_unsatisfiable(struct dev_req *q)
{
	struct MHD_Response *resp;
	const char *text;
	size_t len = 0;
	char cr[48];

	api_error(&q->r, 416, "range_not_satisfiable", NULL,
		  "the range is past the artifact's end (%lld bytes)", q->a.size);
	text = jsonu_dump(q->r.body, &len);
	resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return; /* the body alone then */
	snprintf(cr, sizeof(cr), "bytes */%lld", q->a.size);
	MHD_add_response_header(resp, "Content-Range", cr);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	q->r.mhd = resp;
}

/* The answer to a request that passed dev_check: 200, 206, 416 or a refusal. */
static void dev_serve(struct api_app *app, struct MHD_Connection *conn, const char *url,
		      struct dev_req *q)
{
	const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
	const char *if_range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Range");
	struct MHD_Response *resp;
	struct dev_dl *d;
	long long start = 0, len = q->a.size;
	char etag[72], cr[80];
	int ranged;

	snprintf(etag, sizeof(etag), "\"%s\"", q->sha);
	ranged = if_range && strcmp(if_range, etag) != 0
		     ? 0
		     : api_artifact_range(range, q->a.size, &start, &len);
	if (ranged < 0) {
		dev_unsatisfiable(q);
		return;
	}
	if (!dev_admit(app, q))
		return;
	if (!dev_account(app, conn, url, q, len, ranged > 0 ? 206 : 200)) {
		if (q->admitted) /* no bytes: its place is soon free */
			dl_limits_end(app->dl, q->group, q->device, true, dl_pacer_now_ms());
		return;
	}
	d = dev_source(app, q);
	if (d == NULL) {
		d = calloc(1, sizeof(*d)); /* no source: only to give the bytes back */
		if (d != NULL) {
			d->app = app;
			d->fd = -1;
			memcpy(d->job, q->job, sizeof(d->job));
			memcpy(d->sha, q->sha, sizeof(d->sha));
			dev_dl_limits(d, q);
			d->len = len;
			metrics_artifact_download(1);
			dev_free(d);
		}
		api_error(&q->r, 500, "internal", NULL, "the artifact's bytes cannot be read");
		return;
	}
	d->start = start;
	d->len = len;
	d->conn = conn;
	metrics_artifact_download(1);
	resp = MHD_create_response_from_callback((uint64_t)len, DEV_BLOCK, dev_read, d, dev_free);
	if (resp == NULL) {
		dev_free(d); /* gives the bytes back */
		api_error(&q->r, 500, "internal", NULL, "the artifact's bytes cannot be read");
		return;
	}
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "ETag", etag);
	MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (ranged > 0) {
		snprintf(cr, sizeof(cr), "bytes %lld-%lld/%lld", start, start + len - 1, q->a.size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	q->r.status = ranged > 0 ? 206 : 200;
	q->r.mhd = resp;
}

int api_device_answer(struct api_app *app, void *conn_, const char *url, const char *method,
		      bool only)
{
	struct MHD_Connection *conn = conn_;
	struct dev_req q;
	struct timespec ts;
	int64_t started_us;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	started_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	memset(&q, 0, sizeof(q));
	if (only && !api_device_route(url))
		api_error(&q.r, 404, "not_found", NULL,
			  "this listener serves the device downloads only (" DEV_PREFIX
			  "<sha256>)");
	else if (strcmp(method, "GET") != 0)
		api_error(&q.r, 405, "method_not_allowed", NULL, "only GET is served here");
	else if (dev_check(app, conn, url, &q))
		dev_serve(app, conn, url, &q);
	if (q.r.status == 0)
		api_error(&q.r, 500, "internal", NULL, "internal error");
	log_debug("GET %s -> %d (device download)", only ? "device listener" : DEV_PREFIX,
		  q.r.status);
	ret = dev_send(conn, &q.r, started_us);
	store_artifact_rec_free(&q.a);
	return ret;
}
