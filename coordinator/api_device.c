/*
 * api_device.c - the device download route (docs/api.md, "Device downloads"):
 * GET /v3/devices/artifacts/<sha256 hex> with "Authorization: Bearer <artifact token>",
 * answered on the main listener and on --device-listen (which serves nothing else). The token
 * names the job, the device and the tenant (art_token.h); the job must not have ended (410
 * job_terminal) and its task version must pin the artifact (else 404). Range and If-Range as
 * GET /artifacts/<ident>/content. The bytes served per job are capped at 3x its artifacts'
 * size (then 429), counted as they go out; the first download of each artifact of a job is
 * audited. The checks, the count and the reading of the bytes are art_serve.h's, which the
 * MQTT transport (chunks.c) shares. A job's group holds its devices to its download limits
 * (docs/api.md, "Download limits"; dl_limits.h): over max_concurrent devices a 429 busy with
 * Retry-After, and the group's byte rate paced by suspending the connection (dl_pacer.h).
 * See api.h.
 */
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api.h"
#include "art_serve.h"
#include "art_token.h"
#include "dl_limits.h"
#include "dl_pacer.h"
#include "log.h"
#include "metrics.h"
#include "store_groups.h"

#define DEV_PREFIX  "/v3/devices/artifacts/"
#define DEV_RETRY_S 60 /* Retry-After of a 429 */
#define DEV_BLOCK   (256 * 1024)

bool api_device_route(const char *url)
{
	return strncmp(url, DEV_PREFIX, sizeof(DEV_PREFIX) - 1) == 0;
}

/* One download under way: the bytes [start, start + len) of an artifact, counted as they go. */
struct dev_dl {
	struct api_app *app;
	char job[UUID_STR_LEN], sha[65];
	struct art_source *src; /* NULL: nothing to read (only the bytes to give back) */
	long long start, len, sent;
	/* the group's limits: its ident ("" for a job without a group or not admitted), the
	 * device, the connection (to suspend it), the rate, the artifact's size (a download
	 * that reached its end is complete) */
	char group[UUID_STR_LEN], device[UUID_STR_LEN];
	struct MHD_Connection *conn;
	long long rate, size;
};

/* A request's refusal, or its answer (the download's identity and what it tells). */
struct dev_req {
	struct api_resp r;
	struct art_want w;
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
	long long left = d->len - (long long)pos;
	ssize_t n;

	if (left <= 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	n = dev_pace(d, max < (size_t)left ? max : (size_t)left);
	if (n <= 0)
		return n == 0 ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
	n = art_source_read(d->src, d->start + (long long)pos, out, (size_t)n);
	if (n <= 0)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	d->sent += n;
	metrics_artifact_bytes(false, (unsigned long long)n);
	return n;
}

/* The download ended (sent or cut): what it did not send is given back to the job's cap. */
static void dev_free(void *cls)
{
	struct dev_dl *d = cls;

	art_serve_end(d->app->writer, d->job, d->sha, d->len, d->sent);
	if (d->group[0] && d->app->dl != NULL)
		dl_limits_end(d->app->dl, d->group, d->device,
			      d->len > 0 && d->start + d->sent >= d->size, dl_pacer_now_ms());
	metrics_artifact_download(-1);
	art_source_close(d->src);
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
	struct art_want *w = &q->w;
	struct store *rd = NULL;
	enum art_verdict v;
	enum rcs_err err;

	if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64) {
		api_error(&q->r, 404, "not_found", NULL, "no such artifact");
		return false;
	}
	memcpy(w->sha, hex, 65);
	if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0 || app->tokens == NULL ||
	    art_token_check(app->tokens, auth + 7, w->job, w->device, w->tenant) != RCS_OK) {
		api_error(&q->r, 401, "unauthorized", NULL,
			  "an artifact token is required: Authorization: Bearer <artifact_token>");
		return false;
	}
	rd = store_reader(app->st);
	v = art_serve_check(rd, w, &err);
	if (v == ART_SERVE_OK && w->group[0] && app->dl != NULL) {
		memcpy(q->group, w->group, sizeof(q->group));
		err = store_group_download(rd, q->group, &q->lim.max_concurrent,
					   &q->lim.max_bytes_per_s);
		v = err == RCS_OK             ? v
		    : err == RCS_ERR_NOTFOUND ? ART_SERVE_NOTFOUND
					      : ART_SERVE_ERROR;
	}
	store_reader_put(app->st, rd);
	if (v == ART_SERVE_TERMINAL)
		api_error(&q->r, 410, "job_terminal", NULL,
			  "the job has ended: its artifacts are no longer served");
	else if (v == ART_SERVE_NOTFOUND)
		api_error(&q->r, 404, "not_found", NULL, "the job does not pin this artifact");
	else if (v == ART_SERVE_ERROR)
		api_store_error(&q->r, err, "artifact");
	return q->r.status == 0;
}

/* The job's count of bytes (len more, held by this download) and, at its first download of
 * the artifact, the audit record (the device as its user, the job as its target; never the
 * token): false with q->r answered (429 over the cap, 503). */
static bool dev_account(struct api_app *app, struct MHD_Connection *conn, const char *url,
			struct dev_req *q, long long len, int status)
{
	char addr[INET6_ADDRSTRLEN];
	struct art_audit au = {"GET", url, NULL, status};
	long long served = 0;
	bool capped = false;
	enum rcs_err err;

	api_client_addr(conn, addr);
	au.remote = addr[0] ? addr : NULL;
	err = art_serve_begin(app->writer, &q->w, len, &au, &capped, &served);
	if (err != RCS_OK) {
		api_store_error(&q->r, err, "artifact");
		return false;
	}
	if (capped) {
		api_error(&q->r, 429, "too_many_requests", NULL,
			  "this job has been served %lld bytes, %d times its artifacts' size",
			  served, ART_SERVE_CAP_TIMES);
		q->r.retry_after = DEV_RETRY_S;
		return false;
	}
	return true;
}

/* The group's limits (docs/api.md "Download limits"): a place among the devices of the
 * group downloading now, else false with q->r answered (429 busy, Retry-After). */
static bool dev_admit(struct api_app *app, struct dev_req *q)
{
	int retry = 0;

	if (q->group[0] == '\0' || app->dl == NULL)
		return true;
	if (dl_limits_admit(app->dl, q->group, q->w.device, &q->lim, dl_pacer_now_ms(), &retry)) {
		q->admitted = true;
		return true;
	}
	api_error(&q->r, 429, "busy", NULL,
		  "the group's devices download at most %lld at once: try again later",
		  q->lim.max_concurrent);
	q->r.retry_after = retry;
	return false;
}

/* The download: its source open, its bytes to give back (and its place among the group's
 * devices) when it ends. NULL when the bytes cannot be read (given back then). */
static struct dev_dl *dev_open(struct api_app *app, const struct dev_req *q, long long start,
			       long long len)
{
	struct dev_dl *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		art_serve_end(app->writer, q->w.job, q->w.sha, len, 0);
		if (q->admitted)
			dl_limits_end(app->dl, q->group, q->w.device, false, dl_pacer_now_ms());
		return NULL;
	}
	d->app = app;
	memcpy(d->job, q->w.job, sizeof(d->job));
	memcpy(d->sha, q->w.sha, sizeof(d->sha));
	d->start = start;
	d->len = len;
	if (q->admitted) {
		memcpy(d->group, q->group, sizeof(d->group));
		memcpy(d->device, q->w.device, sizeof(d->device));
		d->rate = q->lim.max_bytes_per_s;
		d->size = q->w.a.size;
	}
	metrics_artifact_download(1);
	d->src = art_source_open(app->writer, app->artifact_dir, &q->w);
	if (d->src == NULL) {
		dev_free(d);
		return NULL;
	}
	return d;
}

/* 416: none of the range is in the artifact, with Content-Range: bytes * / size. */
static void dev_unsatisfiable(struct dev_req *q)
{
	struct MHD_Response *resp;
	const char *text;
	size_t len = 0;
	char cr[48];

	api_error(&q->r, 416, "range_not_satisfiable", NULL,
		  "the range is past the artifact's end (%lld bytes)", q->w.a.size);
	text = jsonu_dump(q->r.body, &len);
	resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return; /* the body alone then */
	snprintf(cr, sizeof(cr), "bytes */%lld", q->w.a.size);
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
	long long start = 0, len = q->w.a.size;
	char etag[72], cr[80];
	int ranged;

	snprintf(etag, sizeof(etag), "\"%s\"", q->w.sha);
	ranged = if_range && strcmp(if_range, etag) != 0
		     ? 0
		     : api_artifact_range(range, q->w.a.size, &start, &len);
	if (ranged < 0) {
		dev_unsatisfiable(q);
		return;
	}
	if (!dev_admit(app, q))
		return;
	if (!dev_account(app, conn, url, q, len, ranged > 0 ? 206 : 200)) {
		if (q->admitted) /* no bytes: its place is soon free */
			dl_limits_end(app->dl, q->group, q->w.device, true, dl_pacer_now_ms());
		return;
	}
	d = dev_open(app, q, start, len);
	if (d == NULL) {
		api_error(&q->r, 500, "internal", NULL, "the artifact's bytes cannot be read");
		return;
	}
	d->conn = conn;
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
		snprintf(cr, sizeof(cr), "bytes %lld-%lld/%lld", start, start + len - 1,
			 q->w.a.size);
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
	art_want_free(&q.w);
	return ret;
}
