/*
 * fetch_http.c - one HTTP(S) request for what an artifact's part file lacks, on libcurl
 * (docs/agent.md "Artifacts"). See fetch.h. Without RCS_WITH_ARTIFACT_HTTP (a static
 * agent: Debian's libcurl cannot be linked statically, BENCHMARKS.md) the transport is
 * absent and fetch_http says so.
 */
#define _FILE_OFFSET_BITS 64
#include "fetch.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef RCS_WITH_ARTIFACT_HTTP
#include <curl/curl.h>
#endif

#include "log.h"

#ifdef RCS_WITH_ARTIFACT_HTTP

#define FETCH_CONNECT_TIMEOUT 30 /* seconds */
#define FETCH_STALL_TIME      60 /* seconds under 1 byte/s: the connection is dead */
#define FETCH_MAX_RETRY_AFTER 3600

/* One transfer's state, shared by libcurl's callbacks. */
struct fetch_xfer {
	const struct fetch_http *req;
	struct fetch_part *p;
	struct fetch_result *res;
	int64_t first;       /* the offset asked for */
	long status;         /* of the last status line */
	bool range_ok;       /* a 206's Content-Range matched */
	bool checked;        /* the headers were judged, the body may come */
	bool accept;         /* the body is the artifact's bytes */
	enum rcs_err wr_err; /* why the write callback stopped */
	bool too_long;       /* the body ran past the signed size */
	bool bad_range;      /* a 206 without the right Content-Range */
	bool cancelled;      /* cancel_fd or the deadline */
	int64_t last_progress;
};

static int64_t fetch_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool fetch_should_stop(const struct fetch_http *req)
{
	struct pollfd pfd = {req->cancel_fd, POLLIN, 0};

	if (req->deadline_ms > 0 && fetch_now_ms() >= req->deadline_ms)
		return true;
	return req->cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

static size_t fetch_header_cb(char *data, size_t size, size_t n, void *arg)
{
	struct fetch_xfer *x = arg;
	size_t len = size * n;
	char line[512];

	if (len >= sizeof(line))
		return len; /* no header the agent reads is that long */
	memcpy(line, data, len);
	line[len] = '\0';
	if (strncmp(line, "HTTP/", 5) == 0) {
		const char *sp = strchr(line, ' ');
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->range_ok = false;
		x->res->retry_after = 0;
	} else if (strncasecmp(line, "Content-Range:", 14) == 0) {
		const char *v = line + 14;
		while (*v == ' ' || *v == '\t')
			v++;
		x->range_ok = fetch_content_range_ok(v, x->first, x->p->size);
	} else if (strncasecmp(line, "Retry-After:", 12) == 0) {
		long s = strtol(line + 12, NULL, 10);
		x->res->retry_after = (int)(s < 0                       ? 0
					    : s > FETCH_MAX_RETRY_AFTER ? FETCH_MAX_RETRY_AFTER
									: s);
	}
	return len;
}

/* The headers are in: may the body be written to the part? */
static bool fetch_judge(struct fetch_xfer *x)
{
	x->checked = true;
	if (x->status == 206) {
		if (!x->range_ok) {
			x->bad_range = true;
			return false;
		}
		x->accept = true;
	} else if (x->status == 200) {
		/* the whole file: start over (a server without ranges) */
		if (x->p->offset > 0 && fetch_part_reset(x->p) != RCS_OK) {
			x->wr_err = RCS_ERR_IO;
			return false;
		}
		x->first = 0;
		x->accept = true;
	}
	return true;
}

static size_t fetch_write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct fetch_xfer *x = arg;
	size_t len = size * n;
	enum rcs_err err;

	if (!x->checked && !fetch_judge(x))
		return 0;
	if (!x->accept)
		return len; /* an error page: read and dropped */
	err = fetch_part_write(x->p, data, len, x->req->journal, x->req->ctx);
	if (err == RCS_ERR_TOOBIG) {
		x->too_long = true;
		return 0;
	}
	if (err != RCS_OK) {
		x->wr_err = err;
		return 0;
	}
	return len;
}

static int fetch_xfer_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			 curl_off_t ulnow)
{
	struct fetch_xfer *x = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	if (fetch_should_stop(x->req)) {
		x->cancelled = true;
		return 1;
	}
	if (x->req->progress != NULL && x->p->offset != x->last_progress) {
		x->last_progress = x->p->offset;
		x->req->progress(x->req->ctx, x->p->offset);
	}
	return 0;
}

/* The handle's options for this request; false when libcurl refuses one. */
static bool fetch_setup(CURL *c, struct fetch_xfer *x, struct curl_slist **hdrs, char *range,
			size_t range_len)
{
	const struct fetch_http *req = x->req;
	char auth[1100];
	bool ok = true;

	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", req->token ? req->token : "");
	*hdrs = curl_slist_append(NULL, auth);
	explicit_bzero(auth, sizeof(auth));
	if (*hdrs == NULL)
		return false;
	ok = ok && curl_easy_setopt(c, CURLOPT_URL, req->url) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs) == CURLE_OK;
	ok = ok &&
	     curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)FETCH_CONNECT_TIMEOUT) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)FETCH_STALL_TIME) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, fetch_header_cb) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_HEADERDATA, x) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_write_cb) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, x) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, fetch_xfer_cb) == CURLE_OK;
	ok = ok && curl_easy_setopt(c, CURLOPT_XFERINFODATA, x) == CURLE_OK;
	if (req->cafile != NULL)
		ok = ok && curl_easy_setopt(c, CURLOPT_CAINFO, req->cafile) == CURLE_OK;
	if (req->max_rate > 0)
		ok = ok && curl_easy_setopt(c, CURLOPT_MAX_RECV_SPEED_LARGE,
					    (curl_off_t)req->max_rate) == CURLE_OK;
	if (x->first > 0) {
		snprintf(range, range_len, "%lld-", (long long)x->first);
		ok = ok && curl_easy_setopt(c, CURLOPT_RANGE, range) == CURLE_OK;
	}
	return ok;
}

/* What the status and the transfer's end make of it. */
static void fetch_outcome_of(struct fetch_xfer *x, CURLcode rc)
{
	struct fetch_result *res = x->res;

	res->status = x->status;
	if (x->cancelled) {
		res->outcome = FETCH_CANCELLED;
		snprintf(res->message, sizeof(res->message), "stopped");
	} else if (x->wr_err != RCS_OK) {
		res->outcome = FETCH_FAILED;
		res->err = x->wr_err;
		snprintf(res->message, sizeof(res->message), "writing the part file: %s",
			 rcs_strerror(x->wr_err));
	} else if (x->too_long) {
		res->outcome = FETCH_INVALID;
		snprintf(res->message, sizeof(res->message),
			 "the server sent more than the signed"
			 " size");
	} else if (x->bad_range) {
		res->outcome = FETCH_INVALID;
		snprintf(res->message, sizeof(res->message),
			 "the server's Content-Range is not the range asked for");
	} else if (x->status == 401 || x->status == 403 || x->status == 404 || x->status == 410) {
		res->outcome = FETCH_REFUSED;
		snprintf(res->message, sizeof(res->message), "HTTP %ld", x->status);
	} else if (rc == CURLE_OK && x->accept && x->p->offset == x->p->size) {
		res->outcome = FETCH_DONE;
		snprintf(res->message, sizeof(res->message), "complete");
	} else if (rc == CURLE_OK && (x->status == 200 || x->status == 206)) {
		res->outcome = FETCH_RETRY;
		snprintf(res->message, sizeof(res->message), "the body ended at %lld of %lld bytes",
			 (long long)x->p->offset, (long long)x->p->size);
	} else if (rc == CURLE_OK && x->status >= 300 && x->status < 400) {
		res->outcome = FETCH_REFUSED;
		snprintf(res->message, sizeof(res->message), "HTTP %ld: redirects are not followed",
			 x->status);
	} else if (rc == CURLE_OK && x->status >= 400 && x->status < 500 && x->status != 408 &&
		   x->status != 429) {
		res->outcome = FETCH_REFUSED;
		snprintf(res->message, sizeof(res->message), "HTTP %ld", x->status);
	} else {
		res->outcome = FETCH_RETRY;
		if (rc != CURLE_OK)
			snprintf(res->message, sizeof(res->message), "%s", curl_easy_strerror(rc));
		else
			snprintf(res->message, sizeof(res->message), "HTTP %ld", x->status);
	}
}

bool fetch_http_available(void)
{
	return true;
}

enum rcs_err fetch_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? RCS_OK : RCS_ERR_IO;
}

void fetch_http(const struct fetch_http *req, struct fetch_part *p, struct fetch_result *res)
{
	struct fetch_xfer x;
	struct curl_slist *hdrs = NULL;
	char range[64];
	CURL *c = NULL;
	CURLcode rc;

	memset(res, 0, sizeof(*res));
	memset(&x, 0, sizeof(x));
	x.req = req;
	x.p = p;
	x.res = res;
	x.first = p->offset;
	x.last_progress = -1;
	if (p->offset >= p->size) {
		res->outcome = FETCH_DONE;
		goto out;
	}
	c = curl_easy_init();
	if (c == NULL || !fetch_setup(c, &x, &hdrs, range, sizeof(range))) {
		res->outcome = FETCH_FAILED;
		res->err = RCS_ERR_NOMEM;
		snprintf(res->message, sizeof(res->message), "cannot set up the HTTP client");
		goto out;
	}
	rc = curl_easy_perform(c);
	if (!x.checked && rc == CURLE_OK)
		fetch_judge(&x); /* an empty body */
	fetch_outcome_of(&x, rc);
out:
	curl_slist_free_all(hdrs);
	if (c != NULL)
		curl_easy_cleanup(c);
}

#else /* without the HTTP transport */

bool fetch_http_available(void)
{
	return false;
}

enum rcs_err fetch_global_init(void)
{
	return RCS_OK;
}

void fetch_http(const struct fetch_http *req, struct fetch_part *p, struct fetch_result *res)
{
	(void)req;
	(void)p;
	memset(res, 0, sizeof(*res));
	res->outcome = FETCH_REFUSED;
	snprintf(res->message, sizeof(res->message),
		 "this agent was built without the HTTP transport (WITH_ARTIFACT_HTTP)");
}

#endif
