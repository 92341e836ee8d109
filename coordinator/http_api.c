/*
 * http_api.c - the REST server: bodies, auth, routing, answers. See http_api.h.
 */
#include "http_api.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api_routes.h"
#include "auth.h"
#include "buf.h"
#include "log.h"
#include "manifest.h"
#include "metrics.h"
#include "store.h"
#include "store_audit.h"
#include "store_keys.h"
#include "ui.h"
#include "uuid.h"
#include "text.h"

#define API_PREFIX             "/v3/commands"
#define API_MAX_URL            2048
#define API_WRITERS_PER_THREAD 2 /* writer threads per HTTP thread (api_writer) */
#define API_WRITERS_MAX        128

struct api_conn;

struct http_api {
	struct MHD_Daemon *daemon;
	struct api_app *app;
	int fd; /* the listening socket until libmicrohttpd takes it, else -1 */
	bool ipv6;
	char listen[300];
	bool devices_only; /* --device-listen: the device download route only (api_device.c) */
	/* the writers (api_writer): state-changing requests, their connections suspended */
	pthread_mutex_t wlock;
	pthread_cond_t wcond;
	struct api_conn *whead, *wtail;
	bool wstop;
	bool winit; /* wlock and wcond are made */
	unsigned nwriters;
	pthread_t writers[API_WRITERS_MAX];
};

/* Per-request state kept across libmicrohttpd's calls. */
struct api_conn {
	struct buf body;
	struct api_upload *up; /* POST /artifacts: streamed to storage (api_artifacts.c) */
	bool too_big;
	bool had_body;
	/* a state-changing request handed to a writer: what it needs after api_handle returned,
	 * and its answer, sent once the connection is resumed (answered) */
	struct MHD_Connection *conn;
	const char *url; /* libmicrohttpd's, valid for the request */
	char path[API_MAX_URL];
	struct api_req req;
	struct api_resp resp;
	char allow[128];
	int64_t started_us;
	bool answered;
	struct api_conn *next;
};

/* ---- libmicrohttpd glue ---- */

/*
 * Decodes the %HH escapes of the path and of query names and values, except
 * %00: a NUL would end the C string there, and "<ident>%00junk" would read as
 * "<ident>", "tag=lab%00x" as "lab". Left as the three characters "%00", it
 * fails every check of an ident, a name, a tag or a number (404 or 400).
 */
static size_t api_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
	char *w = s;
	const char *r = s;
	int hi, lo;

	(void)cls;
	(void)conn;
	while (*r != '\0') {
		if (r[0] == '%' && (hi = text_hex_digit(r[1])) >= 0 &&
		    (lo = text_hex_digit(r[2])) >= 0 && (hi | lo) != 0) {
			*w++ = (char)(hi * 16 + lo);
			r += 3;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
	return (size_t)(w - s);
}

static enum MHD_Result api_send(struct MHD_Connection *conn, struct api_resp *r, const char *allow)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len = 0;
	const char *text = "";

	if (r->mhd) {
		resp = r->mhd; /* the handler's whole answer, destroyed below */
		r->mhd = NULL;
	} else if (r->text) {
		/* the buffer is handed over: freed by MHD with the response */
		resp = MHD_create_response_from_buffer(r->text_len, r->text, MHD_RESPMEM_MUST_FREE);
		if (resp)
			r->text = NULL;
	} else if (r->body) {
		text = jsonu_dump(r->body, &len);
		resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	} else {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	}
	if (resp == NULL)
		return MHD_NO;
	if (r->body || r->text_len > 0)
		MHD_add_response_header(resp, "Content-Type", "application/json");
	if (allow && *allow)
		MHD_add_response_header(resp, "Allow", allow);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (r->retry_after > 0) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", r->retry_after);
		MHD_add_response_header(resp, "Retry-After", ra);
	}
	ret = MHD_queue_response(conn, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ---- the dashboard (docs/dashboard.md) ---- */

#define UI_PREFIX "/ui"

/* True for /ui and every path under /ui/: the dashboard's, served without a key. */
static bool api_is_ui(const char *url)
{
	size_t n = strlen(UI_PREFIX);

	return strncmp(url, UI_PREFIX, n) == 0 && (url[n] == '\0' || url[n] == '/');
}

/*
 * One answer under /ui/: an embedded file (ui.h: a lookup in a fixed table, so no path
 * reaches anything else), a redirect of /ui to /ui/, 404 or 405, each with the dashboard's
 * Content-Security-Policy and the other security headers.
 */
static enum MHD_Result api_ui_send(struct MHD_Connection *conn, const char *url, const char *method)
{
	const struct ui_file *f = NULL;
	const char *text = NULL;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned status = 200;

	if (strcmp(url, UI_PREFIX) == 0) {
		status = 308;
		text = "the dashboard is at /ui/\n";
	} else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		status = 405;
		text = "method not allowed: the dashboard's files take GET and HEAD\n";
	} else if ((f = ui_lookup(url + strlen(UI_PREFIX "/"))) == NULL) {
		status = 404;
		text = "no such file in the dashboard\n";
	}
	if (f)
		resp = MHD_create_response_from_buffer(f->len, (void *)(uintptr_t)f->data,
						       MHD_RESPMEM_PERSISTENT);
	else
		resp = MHD_create_response_from_buffer(strlen(text), (void *)(uintptr_t)text,
						       MHD_RESPMEM_PERSISTENT);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type",
				f ? ui_content_type(f->path) : "text/plain; charset=utf-8");
	MHD_add_response_header(resp, "Content-Security-Policy", ui_csp);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "Cross-Origin-Opener-Policy", "same-origin");
	MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
	/* the files change with the binary: a browser asks again, never serves a stale copy */
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	if (status == 308)
		MHD_add_response_header(resp, "Location", UI_PREFIX "/");
	if (status == 405)
		MHD_add_response_header(resp, "Allow", "GET, HEAD");
	log_debug("%s %s -> %u", method, url, status);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* The api-key header's key (auth.c), answered here: 401, 429 with Retry-After, or 503. */
static void api_authenticate(struct api_app *app, struct MHD_Connection *conn, struct api_req *req,
			     struct api_resp *r)
{
	char addr[INET6_ADDRSTRLEN] = "";
	const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "api-key");
	enum rcs_err err;
	int wait;

	if (app->auth_fail_limit > 0)
		api_client_addr(conn, addr);
	switch (auth_check(app->st, key, addr, app->auth_fail_limit, req->now, &req->auth, &wait,
			   &err)) {
	case AUTH_OK:
		break;
	case AUTH_MISSING:
		api_error(r, 401, "unauthorized", NULL, "the api-key header is required");
		break;
	case AUTH_UNKNOWN:
		api_error(r, 401, "unauthorized", NULL, "unknown or revoked api key");
		break;
	case AUTH_THROTTLED:
		log_warnx("client %s: too many unknown api keys, refused for %d s", addr, wait);
		api_error(
		    r, 429, "too_many_requests", NULL,
		    "too many requests with unknown api keys from this address: retry in %d s",
		    wait);
		r->retry_after = wait;
		break;
	case AUTH_ERROR:
		api_store_error(r, err, "api key");
		break;
	}
}

static int64_t api_now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* ---- the audit log (docs/api.md, "Audit") ---- */

static bool api_changes(const char *method)
{
	return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
	       strcmp(method, "OPTIONS") != 0;
}

/* The object a request acted on: what the handler named, else the path's ident after the
 * collection ("tasks/<id>/jobs" -> the task). */
static void api_audit_target(const struct api_req *req, char *out, size_t len)
{
	if (req->target[0])
		snprintf(out, len, "%s", req->target);
	else if (req->nseg >= 2)
		snprintf(out, len, "%.*s", 100, req->seg[1]);
	else
		out[0] = '\0';
}

/*
 * A request that may change state: dispatched inside one transaction with its audit record
 * ({ts, user, key_ident, method, path, target, status_code, remote}), so the change and its
 * record are committed together; a refused request (4xx) leaves its record alone. The key
 * itself is never recorded: only its ident. When the record cannot be written, the change
 * is rolled back and the answer is the storage's error.
 */
static void api_dispatch_audited(struct api_app *app, struct MHD_Connection *conn, const char *url,
				 struct api_req *req, struct api_resp *resp, char *allow,
				 size_t allow_len)
{
	char addr[INET6_ADDRSTRLEN] = "", target[sizeof(req->target)], path[512];
	struct audit_rec a;
	enum rcs_err err;

	api_route_precheck(req, resp);
	err = store_tx_begin(app->st);
	if (err != RCS_OK) {
		api_store_error(resp, err, "audit log");
		return;
	}
	if (resp->status == 0)
		api_route_dispatch(false, req, resp, allow, allow_len);
	if (resp->status == 0)
		api_error(resp, 500, "internal", NULL, "internal error");
	api_client_addr(conn, addr);
	api_audit_target(req, target, sizeof(target));
	snprintf(path, sizeof(path), "%s", url); /* the path only: no query, never a key */
	memset(&a, 0, sizeof(a));
	a.client_root = req->auth.client_root;
	a.ts = req->now;
	a.user = req->auth.user;
	a.key_ident = req->auth.key_ident;
	a.method = (char *)req->method;
	a.path = path;
	a.target = target[0] ? target : NULL;
	a.status_code = resp->status;
	a.remote = addr[0] ? addr : NULL;
	err = store_audit_add(app->st, &a);
	if (err == RCS_OK) {
		err = store_tx_end(app->st, true);
	} else {
		store_tx_end(app->st, false);
		if (resp->status < 400) {
			/* not recorded: not done */
			allow[0] = '\0';
			api_store_error(resp, err, "audit log");
		}
		return;
	}
	if (err != RCS_OK)
		api_store_error(resp, err, "change");
}

/*
 * Writers: a state-changing request, once authenticated on its HTTP thread, is handed to a
 * writer thread with its connection suspended, so the HTTP threads go on answering reads
 * while it waits for the store's writer and its group commit (docs/architecture.md, "Reads
 * and group commit"). The writer runs api_dispatch_audited and resumes the connection;
 * libmicrohttpd then calls api_handle again, which sends the answer.
 */
static void *api_writer(void *arg)
{
	struct http_api *h = arg;

	for (;;) {
		struct api_conn *c;

		pthread_mutex_lock(&h->wlock);
		while (h->whead == NULL && !h->wstop)
			pthread_cond_wait(&h->wcond, &h->wlock);
		c = h->whead;
		if (c != NULL) {
			h->whead = c->next;
			if (h->whead == NULL)
				h->wtail = NULL;
		}
		pthread_mutex_unlock(&h->wlock);
		if (c == NULL)
			break; /* stopping, nothing left */
		api_dispatch_audited(h->app, c->conn, c->url, &c->req, &c->resp, c->allow,
				     sizeof(c->allow));
		pthread_mutex_lock(&h->wlock);
		c->answered = true;
		pthread_mutex_unlock(&h->wlock);
		MHD_resume_connection(c->conn);
	}
	return NULL;
}

/* Hands the request to a writer: false when there are none (any more), and the caller
 * runs it itself. req's segments point into path (on the caller's stack): path is copied
 * into c and the segments moved there; its body is c's already. */
static bool api_writer_take(struct http_api *h, struct api_conn *c, struct MHD_Connection *conn,
			    const char *url, const struct api_req *req, const char *path,
			    int64_t started_us)
{
	bool taken = false;

	if (h->nwriters == 0)
		return false;
	c->conn = conn;
	c->url = url;
	memcpy(c->path, path, sizeof(c->path));
	c->req = *req;
	for (int i = 0; i < req->nseg; i++)
		c->req.seg[i] = c->path + (req->seg[i] - path);
	c->allow[0] = '\0';
	memset(&c->resp, 0, sizeof(c->resp));
	c->started_us = started_us;
	c->answered = false;
	c->next = NULL;
	pthread_mutex_lock(&h->wlock);
	if (!h->wstop) {
		/* suspended before a writer can see it: it resumes only a suspended connection */
		MHD_suspend_connection(conn);
		if (h->wtail)
			h->wtail->next = c;
		else
			h->whead = c;
		h->wtail = c;
		pthread_cond_signal(&h->wcond);
		taken = true;
	}
	pthread_mutex_unlock(&h->wlock);
	return taken;
}

/* A resumed connection: the answer a writer made (api_writer), taken off the connection. */
static void api_conn_resumed(struct api_conn *c, struct api_resp *resp, char *allow,
			     size_t allow_len, int64_t *started_us)
{
	*resp = c->resp;
	memset(&c->resp, 0, sizeof(c->resp));
	snprintf(allow, allow_len, "%s", c->allow);
	*started_us = c->started_us;
	c->answered = false;
}

/* The request's body, as libmicrohttpd hands it in pieces, into the connection's state (made
 * at the first call): true while the request is not whole yet, with what to return in *ret. An
 * announced or actual body over app->max_body is refused without being kept; an upload's
 * goes to storage as it comes. */
static bool api_body_read(struct api_app *app, struct MHD_Connection *conn, const char *url,
			  const char *method, void **con_cls, const char *upload_data,
			  size_t *upload_data_size, enum MHD_Result *ret)
{
	struct api_conn *c = *con_cls;
	int r = MHD_YES;

	*ret = MHD_YES;
	if (c == NULL) {
		const char *cl;

		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			*ret = MHD_NO;
			return true;
		}
		buf_init(&c->body, app->max_body);
		*con_cls = c;
		if (api_upload_begin(app, conn, url, method, &c->up, &r)) {
			c->too_big = c->up == NULL; /* refused and answered: nothing kept */
			*ret = (enum MHD_Result)r;
			return true;
		}
		/* refuse an announced oversize body before reading it */
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (cl != NULL && strtoull(cl, NULL, 10) > app->max_body)
			c->too_big = true;
		if (!c->too_big)
			return true;
	}
	if (*upload_data_size > 0 && c->up) {
		api_upload_data(c->up, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return true;
	}
	if (*upload_data_size > 0 && !c->too_big) {
		c->had_body = true;
		if (buf_append(&c->body, upload_data, *upload_data_size) != RCS_OK) {
			c->too_big = true;
			buf_free(&c->body);
		}
		*upload_data_size = 0;
		return true;
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0; /* discard the rest of an oversize body */
		return true;
	}
	return false;
}

/* A request that needs a key: authenticated with a reader of the store's pool, so that reads
 * (the key, then a GET's handler) never wait for a write (docs/architecture.md, "Reads and
 * group commit"); a change goes to a writer, or is made here. True when a writer took it: it
 * is answered once resumed. */
static bool api_route_keyed(struct http_api *h, struct api_conn *c, struct MHD_Connection *conn,
			    const char *url, struct api_req *req, const char *path,
			    struct api_resp *resp, char *allow, size_t allow_len,
			    int64_t started_us)
{
	struct api_app *app = h->app;
	struct api_app view = *app;
	bool taken = false;

	view.st = store_reader(app->st);
	api_authenticate(&view, conn, req, resp);
	if (resp->status == 0 && api_changes(req->method)) {
		store_reader_put(app->st, view.st);
		view.st = NULL;
		taken = api_writer_take(h, c, conn, url, req, path, started_us);
		if (!taken)
			api_dispatch_audited(app, conn, url, req, resp, allow, allow_len);
	} else if (resp->status == 0) {
		/* one snapshot for the whole answer: a page's count and its rows, a job and its
		 * history (a failed begin leaves the reads to fail by themselves) */
		bool snap = store_read_begin(view.st) == RCS_OK;

		req->app = &view;
		api_route_dispatch(false, req, resp, allow, allow_len);
		req->app = app;
		if (snap)
			store_read_end(view.st);
	}
	if (!taken)
		store_reader_put(app->st, view.st);
	return taken;
}

/* A whole request of the API to its route, open or keyed: true when a writer took it (it is
 * answered once resumed), else *resp holds the answer. */
static bool api_route_request(struct http_api *h, struct api_conn *c, struct MHD_Connection *conn,
			      const char *url, struct api_req *req, struct api_resp *resp,
			      char *allow, size_t allow_len, int64_t started_us)
{
	char path[API_MAX_URL];

	if (strlen(url) >= sizeof(path) || strncmp(url, API_PREFIX, strlen(API_PREFIX)) != 0 ||
	    (url[strlen(API_PREFIX)] != '/' && url[strlen(API_PREFIX)] != '\0')) {
		api_error(resp, 404, "not_found", NULL, "no such resource");
		return false;
	}
	snprintf(path, sizeof(path), "%s", url + strlen(API_PREFIX));
	if (!api_split(path, req->seg, &req->nseg)) {
		api_error(resp, 404, "not_found", NULL, "no such resource");
		return false;
	}
	if (api_route_is_open(req))
		api_route_dispatch(true, req, resp, allow, allow_len);
	else if (api_route_keyed(h, c, conn, url, req, path, resp, allow, allow_len, started_us))
		return true;
	if (resp->status == 0) {
		log_warnx("%s %s: handler gave no answer", req->method, url);
		api_error(resp, 500, "internal", NULL, "internal error");
	}
	return false;
}

/* The answer sent, counted and logged, and freed. */
static enum MHD_Result api_answer(struct MHD_Connection *conn, const char *method, const char *url,
				  struct api_resp *resp, const char *allow, int64_t started_us)
{
	enum MHD_Result ret;

	metrics_http(method, resp->status, (double)(api_now_us() - started_us) / 1e6);
	if (resp->status >= 500)
		log_warnx("%s %s -> %d", method, url, resp->status);
	else
		log_debug("%s %s -> %d", method, url, resp->status);
	ret = api_send(conn, resp, allow);
	if (resp->body)
		json_object_put(resp->body);
	free(resp->text);
	return ret;
}

/* libmicrohttpd's handler of every request: called again for each piece of a body, and once
 * more for a connection a writer resumed. */
static enum MHD_Result api_handle(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http_api *h = cls;
	struct api_app *app = h->app;
	struct api_conn *c;
	struct api_req req;
	struct api_resp resp = {.status = 0};
	char allow[128] = "";
	int64_t started_us;
	enum MHD_Result ret;

	(void)version;
	c = *con_cls;
	if (c != NULL && c->answered) {
		/* resumed: a writer answered (api_writer) */
		api_conn_resumed(c, &resp, allow, sizeof(allow), &started_us);
		return api_answer(conn, method, url, &resp, allow, started_us);
	}
	if (c == NULL && (h->devices_only || api_device_route(url)))
		return (enum MHD_Result)api_device_answer(app, conn, url, method, h->devices_only);
	if (api_body_read(app, conn, url, method, con_cls, upload_data, upload_data_size, &ret))
		return ret;
	c = *con_cls;
	started_us = api_now_us();
	memset(&req, 0, sizeof(req));
	req.app = app;
	req.conn = conn;
	req.method = method;
	req.now = (int64_t)time(NULL);
	req.upload = c->up;
	if (c->too_big) {
		api_error(&resp, 413, "payload_too_large", NULL,
			  "the request body is larger than %zu bytes", app->max_body);
		return api_answer(conn, method, url, &resp, allow, started_us);
	}
	if (api_is_ui(url))
		return api_ui_send(conn, url, method);
	if (c->had_body) {
		req.body = c->body.data;
		req.body_len = c->body.len;
	}
	if (api_route_request(h, c, conn, url, &req, &resp, allow, sizeof(allow), started_us))
		return MHD_YES; /* answered once resumed */
	return api_answer(conn, method, url, &resp, allow, started_us);
}

static void api_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			  enum MHD_RequestTerminationCode toe)
{
	struct api_conn *c = *con_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (c == NULL)
		return;
	/* a writer's answer the connection never sent: the daemon stopped (http_api_stop)
	 * between the writer's resume and the connection's next turn */
	json_object_put(c->resp.body);
	free(c->resp.text);
	buf_free(&c->body);
	api_upload_free(c->up);
	free(c);
	*con_cls = NULL;
}

static void api_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void api_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	log_warnx("http: %s", msg);
}

/*
 * The listening socket is ours, not libmicrohttpd's, so that a port another program holds
 * (another coordinator, say) fails here with the system's reason and the address asked for.
 * SO_REUSEADDR only lets a restart take the port back from connections in TIME_WAIT;
 * SO_REUSEPORT is never set: two coordinators can't share a port.
 */
static int api_listen_socket(const struct addrinfo *ai, const char *listen_arg)
{
	int fd, one = 1;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		log_warnx("cannot listen on %s: %s", listen_arg, strerror(errno));
		return -1;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno == EADDRINUSE)
			log_warnx(
			    "cannot listen on %s: the address is in use (another program, or "
			    "another rcs-coordinator, listens there: stop it or choose another "
			    "--listen)",
			    listen_arg);
		else
			log_warnx("cannot listen on %s: %s", listen_arg, strerror(errno));
		close(fd);
		return -1;
	}
	if (listen(fd, 1024) != 0) {
		log_warnx("cannot listen on %s: %s", listen_arg, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

enum rcs_err http_api_listen(const char *listen_arg, struct http_api **out)
{
	struct http_api *h = NULL;
	struct addrinfo hints, *ai = NULL;
	char host[256];
	const char *colon, *port;
	enum rcs_err err = RCS_ERR_INVAL;

	*out = NULL;
	colon = strrchr(listen_arg, ':');
	if (colon == NULL || colon == listen_arg || (size_t)(colon - listen_arg) >= sizeof(host) ||
	    strlen(listen_arg) >= sizeof(h->listen)) {
		log_warnx("--listen %s: expected HOST:PORT", listen_arg);
		goto out;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - listen_arg), listen_arg);
	port = colon + 1;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL) {
		log_warnx("--listen %s: cannot resolve", listen_arg);
		goto out;
	}
	h = calloc(1, sizeof(*h));
	if (h == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	snprintf(h->listen, sizeof(h->listen), "%s", listen_arg);
	h->ipv6 = ai->ai_family == AF_INET6;
	h->fd = api_listen_socket(ai, listen_arg);
	if (h->fd < 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	*out = h;
	h = NULL;
	err = RCS_OK;
out:
	if (ai)
		freeaddrinfo(ai);
	free(h);
	return err;
}

enum rcs_err http_api_start(struct http_api *h, struct api_app *app, unsigned nthreads)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_SUSPEND_RESUME;
	unsigned want = h->devices_only ? 0 : (nthreads ? nthreads : 1) * API_WRITERS_PER_THREAD;

	if (h->ipv6)
		flags |= MHD_USE_IPv6;
	h->app = app;
	pthread_mutex_init(&h->wlock, NULL);
	pthread_cond_init(&h->wcond, NULL);
	h->winit = true;
	if (want > API_WRITERS_MAX)
		want = API_WRITERS_MAX;
	while (h->nwriters < want &&
	       pthread_create(&h->writers[h->nwriters], NULL, api_writer, h) == 0)
		h->nwriters++;
	if (h->nwriters < want)
		log_warnx("%u of %u writer threads started", h->nwriters, want);
	h->daemon = MHD_start_daemon(
	    flags, 0, NULL, NULL, api_handle, h, MHD_OPTION_EXTERNAL_LOGGER, api_mhd_log, NULL,
	    MHD_OPTION_LISTEN_SOCKET, h->fd, MHD_OPTION_NOTIFY_COMPLETED, api_completed, NULL,
	    MHD_OPTION_UNESCAPE_CALLBACK, api_unescape, NULL, MHD_OPTION_THREAD_POOL_SIZE,
	    nthreads ? nthreads : 1, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)4000, MHD_OPTION_END);
	if (h->daemon == NULL) {
		log_warnx("cannot serve HTTP on %s", h->listen);
		return RCS_ERR_IO;
	}
	h->fd = -1; /* libmicrohttpd's now: MHD_stop_daemon closes it */
	log_info("%s listening on %s", h->devices_only ? "device downloads" : "REST API",
		 h->listen);
	return RCS_OK;
}

void http_api_devices_only(struct http_api *h)
{
	h->devices_only = true;
}

void http_api_stop(struct http_api *h)
{
	if (h == NULL)
		return;
	/* the writers first: each request handed to one is answered and its connection
	 * resumed (what comes after is run on its HTTP thread), so none stays suspended */
	if (h->winit) {
		pthread_mutex_lock(&h->wlock);
		h->wstop = true;
		pthread_cond_broadcast(&h->wcond);
		pthread_mutex_unlock(&h->wlock);
		for (unsigned i = 0; i < h->nwriters; i++)
			pthread_join(h->writers[i], NULL);
	}
	if (h->daemon)
		MHD_stop_daemon(h->daemon);
	if (h->fd >= 0)
		close(h->fd);
	if (h->winit) {
		pthread_cond_destroy(&h->wcond);
		pthread_mutex_destroy(&h->wlock);
	}
	free(h);
}
