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

struct api_route {
	const char *method;
	const char *pattern; /* segments after /v3/commands; ":" is one ident */
	enum role min_role;
	api_handler fn;
	const char *query; /* the query parameters it takes, space-separated; NULL: none */
};

/* The query parameters of lists (docs/api.md "Paging" and "Lists"). */
#define Q_PAGE "page per_page"
#define Q_LIST Q_PAGE " sort created_after created_before"

static const struct api_route api_routes[] = {
    {"GET", "tasks", ROLE_VIEWER, api_tasks_list, Q_LIST " name hide"},
    {"POST", "tasks", ROLE_ADMIN, api_task_create, NULL},
    {"GET", "tasks/:", ROLE_VIEWER, api_task_get, NULL},
    {"PUT", "tasks/:", ROLE_ADMIN, api_task_put, NULL},
    {"PATCH", "tasks/:", ROLE_ADMIN, api_task_patch, NULL},
    {"DELETE", "tasks/:", ROLE_ADMIN, api_task_delete, NULL},
    {"GET", "tasks/:/jobs", ROLE_VIEWER, api_task_jobs_list,
     Q_LIST " status group_ident entity_ident"},
    {"POST", "tasks/:/jobs", ROLE_OPERATOR, api_job_create, NULL},
    {"POST", "tasks/:/jobs/list", ROLE_OPERATOR, api_jobs_bulk_list, NULL},
    {"POST", "tasks/:/jobs/tags", ROLE_OPERATOR, api_jobs_bulk_tags, NULL},
    {"GET", "jobs", ROLE_VIEWER, api_jobs_list,
     Q_LIST " status group_ident task_ident entity_ident"},
    {"GET", "jobs/:", ROLE_VIEWER, api_job_get, NULL},
    {"GET", "jobs/:/history", ROLE_VIEWER, api_job_history, Q_PAGE " sort"},
    {"PATCH", "jobs/:/cancel", ROLE_OPERATOR, api_job_cancel, NULL},
    {"GET", "jobs/:/notifications", ROLE_VIEWER, api_job_notifications, Q_PAGE},
    {"GET", "groups", ROLE_VIEWER, api_groups_list, Q_LIST},
    {"GET", "groups/:", ROLE_VIEWER, api_group_get, NULL},
    {"PATCH", "groups/:/pause", ROLE_OPERATOR, api_group_pause, NULL},
    {"PATCH", "groups/:/resume", ROLE_OPERATOR, api_group_resume, NULL},
    {"PATCH", "groups/:/cancel", ROLE_OPERATOR, api_group_cancel, NULL},
    {"GET", "scripts", ROLE_VIEWER, api_scripts_list, Q_PAGE},
    {"GET", "scripts/:", ROLE_VIEWER, api_script_get, NULL},
    {"PUT", "scripts/:", ROLE_ADMIN, api_script_put, NULL},
    {"DELETE", "scripts/:", ROLE_ADMIN, api_script_delete, NULL},
    {"GET", "devices", ROLE_VIEWER, api_devices_list, Q_LIST " name tag online"},
    {"POST", "devices", ROLE_ADMIN, api_device_create, NULL},
    {"GET", "devices/:", ROLE_VIEWER, api_device_get, NULL},
    {"PATCH", "devices/:", ROLE_ADMIN, api_device_patch, NULL},
    {"DELETE", "devices/:", ROLE_ADMIN, api_device_delete, NULL},
    {"GET", "keys", ROLE_VIEWER, api_keys_list, Q_PAGE},
    {"POST", "keys", ROLE_ADMIN, api_key_create, NULL},
    {"DELETE", "keys/:", ROLE_ADMIN, api_key_delete, NULL},
    /* webhooks and the audit log */
    {"GET", "webhooks", ROLE_ADMIN, api_webhooks_list, Q_PAGE},
    {"POST", "webhooks", ROLE_ADMIN, api_webhook_create, NULL},
    {"GET", "webhooks/:", ROLE_ADMIN, api_webhook_get, NULL},
    {"PATCH", "webhooks/:", ROLE_ADMIN, api_webhook_patch, NULL},
    {"DELETE", "webhooks/:", ROLE_ADMIN, api_webhook_delete, NULL},
    {"GET", "webhooks/:/deliveries", ROLE_ADMIN, api_webhook_deliveries, Q_PAGE},
    {"GET", "audit", ROLE_ADMIN, api_audit_list, Q_PAGE " user target since until"},
};

#define API_N_ROUTES (sizeof(api_routes) / sizeof(api_routes[0]))

/* Paths served without an api key (min_role unused): never counted by, nor refused by, the
 * throttle of unknown keys. */
static const struct api_route api_open_routes[] = {
    {"GET", "health", ROLE_VIEWER, api_health, NULL},
    {"GET", "openapi.json", ROLE_VIEWER, api_openapi, NULL},
};

#define API_N_OPEN_ROUTES (sizeof(api_open_routes) / sizeof(api_open_routes[0]))

/* ---- answers ---- */

void api_reply(struct api_resp *r, int status, json_object *body)
{
	if (r->body)
		json_object_put(r->body);
	free(r->text);
	r->text = NULL;
	r->status = status;
	r->body = body;
}

void api_reply_text(struct api_resp *r, int status, char *text, size_t len)
{
	api_reply(r, status, NULL);
	r->text = text;
	r->text_len = len;
}

void api_reply_buf(struct api_resp *r, int status, struct buf *b, enum rcs_err err)
{
	if (err != RCS_OK) {
		buf_free(b);
		api_store_error(r, err, "answer");
		return;
	}
	api_reply_text(r, status, b->data, b->len);
	b->data = NULL;
	buf_free(b);
}

void api_error(struct api_resp *r, int status, const char *code, const char *field, const char *fmt,
	       ...)
{
	char msg[512];
	json_object *o = json_object_new_object(), *e = json_object_new_object();
	json_object *details = json_object_new_object();
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_object_object_add(e, "code", json_object_new_string(code));
	json_object_object_add(e, "message", json_object_new_string(msg));
	if (field && *field)
		json_object_object_add(details, "field", json_object_new_string(field));
	json_object_object_add(e, "details", details);
	json_object_object_add(o, "error", e);
	api_reply(r, status, o);
}

void api_invalid(struct api_resp *r, const struct jsonu_err *e)
{
	api_error(r, 400, "validation_failed", e->field, "%s", e->message);
}

void api_store_error(struct api_resp *r, enum rcs_err err, const char *what)
{
	switch (err) {
	case RCS_ERR_NOTFOUND:
		api_error(r, 404, "not_found", NULL, "no such %s", what);
		break;
	case RCS_ERR_CONFLICT:
	case RCS_ERR_EXISTS:
		api_error(r, 409, "conflict", NULL, "the %s is in a state that forbids this", what);
		break;
	case RCS_ERR_FULL:
	case RCS_ERR_BUSY:
	case RCS_ERR_IO:
		api_error(r, 503, "unavailable", NULL, "storage is unavailable, retry later");
		break;
	case RCS_ERR_TOOBIG:
		api_error(r, 413, "payload_too_large", NULL, "too many items");
		break;
	default:
		log_warnx("%s: %s", what, rcs_strerror(err));
		api_error(r, 500, "internal", NULL, "internal error");
		break;
	}
}

bool api_body_object(struct api_req *req, struct api_resp *r, bool allow_empty, json_object **out)
{
	struct jsonu_err e;

	*out = NULL;
	if (req->body == NULL || req->body_len == 0) {
		if (allow_empty) {
			*out = json_object_new_object();
			return true;
		}
		api_error(r, 400, "invalid_json", NULL, "a JSON object body is required");
		return false;
	}
	if (jsonu_parse_object(req->body, req->body_len, out, &e) != RCS_OK) {
		api_error(r, 400, "invalid_json", NULL, "%s", e.message);
		return false;
	}
	return true;
}

const char *api_query(struct api_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

static bool api_query_int(struct api_req *req, struct api_resp *r, const char *name, long long min,
			  long long max, long long *out)
{
	const char *v = api_query(req, name);
	char *end = NULL;
	long long n = 0;

	if (v == NULL)
		return true;
	/* digits, with an optional '-': no space, '+' or anything else strtoll would skip */
	if (v[v[0] == '-'] >= '0' && v[v[0] == '-'] <= '9')
		n = strtoll(v, &end, 10);
	if (end == NULL || *end != '\0' || n < min || n > max) {
		api_error(r, 400, "invalid_parameter", name,
			  "'%s' must be an integer from %lld to %lld", name, min, max);
		return false;
	}
	*out = n;
	return true;
}

bool api_page(struct api_req *req, struct api_resp *r, long long default_per_page,
	      struct store_page *out)
{
	memset(out, 0, sizeof(*out));
	out->page = 1;
	out->per_page = default_per_page;
	out->sort = "created_at";
	return api_query_int(req, r, "page", 1, 1000000000LL, &out->page) &&
	       api_query_int(req, r, "per_page", 1, API_MAX_PER_PAGE, &out->per_page);
}

/* Whether word (wlen bytes) is one of the space-separated words of list. */
static bool api_word_in(const char *list, const char *word, size_t wlen)
{
	const char *p = list;

	while (p && *p) {
		size_t n = strcspn(p, " ");

		if (n == wlen && strncmp(p, word, n) == 0)
			return true;
		p += n;
		p += strspn(p, " ");
	}
	return false;
}

/* Every key a list may be sorted by: store_page.sort points at one of these. */
static const char *const api_sort_names[] = {"created_at", "update_at", "name"};

#define API_MAX_NAME_QUERY 200

bool api_list(struct api_req *req, struct api_resp *r, long long default_per_page,
	      const char *sort_keys, bool default_desc, bool with_name, struct store_page *out)
{
	const char *sort, *key;
	size_t klen;

	if (!api_page(req, r, default_per_page, out))
		return false;
	sort = api_query(req, "sort");
	out->desc = sort ? sort[0] == '-' : default_desc;
	key = sort ? sort + (sort[0] == '-') : sort_keys;
	klen = sort ? strlen(key) : strcspn(sort_keys, " ");
	out->sort = NULL;
	for (size_t i = 0; i < sizeof(api_sort_names) / sizeof(api_sort_names[0]); i++)
		if (strlen(api_sort_names[i]) == klen && strncmp(api_sort_names[i], key, klen) == 0)
			out->sort = api_sort_names[i];
	if (out->sort == NULL || !api_word_in(sort_keys, key, klen)) {
		api_error(r, 400, "invalid_parameter", "sort",
			  "'sort' must be one of: %s (a leading '-' for descending order)",
			  sort_keys);
		return false;
	}
	out->has_after = api_query(req, "created_after") != NULL;
	out->has_before = api_query(req, "created_before") != NULL;
	if (!api_query_int(req, r, "created_after", 0, INT64_MAX, &out->created_after) ||
	    !api_query_int(req, r, "created_before", 0, INT64_MAX, &out->created_before))
		return false;
	out->name = with_name ? api_query(req, "name") : NULL;
	if (out->name && (out->name[0] == '\0' || strlen(out->name) > API_MAX_NAME_QUERY)) {
		api_error(r, 400, "invalid_parameter", "name", "'name' must be 1 to %d bytes",
			  API_MAX_NAME_QUERY);
		return false;
	}
	return true;
}

/* ---- routing ---- */

/* Splits path (after the prefix) into segments in place; false when too many or empty. */
static bool api_split(char *path, const char **seg, int *nseg)
{
	char *p = path;

	*nseg = 0;
	if (*p == '/')
		p++;
	if (*p == '\0')
		return true;
	for (;;) {
		char *slash = strchr(p, '/');
		if (*nseg >= API_MAX_SEGMENTS)
			return false;
		seg[(*nseg)++] = p;
		if (slash == NULL)
			break;
		*slash = '\0';
		p = slash + 1;
		if (*p == '\0')
			break; /* a trailing slash is tolerated */
	}
	for (int i = 0; i < *nseg; i++)
		if (seg[i][0] == '\0')
			return false;
	return true;
}

/* Whether the path's segments are pattern's ("tasks/:/jobs": ":" is any one segment),
 * compared in place: every request is matched against every route. */
static bool api_match(const char *pattern, const char *const *seg, int nseg)
{
	const char *p = pattern;
	int i = 0;

	if (*p == '\0')
		return nseg == 0;
	for (;;) {
		size_t len = strcspn(p, "/");

		if (i >= nseg)
			return false;
		if (!(len == 1 && p[0] == ':') &&
		    (strncmp(p, seg[i], len) != 0 || seg[i][len] != '\0'))
			return false;
		i++;
		if (p[len] == '\0')
			break;
		p += len + 1;
	}
	return i == nseg;
}

struct api_query_check {
	const char *known; /* the route's parameters */
	char unknown[64];  /* the first one it doesn't take, cut to fit */
};

static enum MHD_Result api_query_one(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct api_query_check *c = cls;

	(void)kind;
	(void)value;
	if (key == NULL || api_word_in(c->known, key, strlen(key)))
		return MHD_YES;
	snprintf(c->unknown, sizeof(c->unknown), "%s", key);
	return MHD_NO;
}

/* A query parameter the operation doesn't take is refused, not ignored: a misspelt
 * filter would otherwise answer everything (docs/api.md "Lists"). */
static bool api_query_known(struct api_req *req, struct api_resp *r, const char *known)
{
	struct api_query_check c;

	c.known = known ? known : "";
	c.unknown[0] = '\0';
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, api_query_one, &c);
	if (c.unknown[0] == '\0')
		return true;
	if (known)
		api_error(r, 400, "invalid_parameter", c.unknown,
			  "unknown query parameter '%s' (this operation takes: %s)", c.unknown,
			  known);
	else
		api_error(r, 400, "invalid_parameter", c.unknown,
			  "unknown query parameter '%s' (this operation takes none)", c.unknown);
	return false;
}

/* True when the request's path is one of routes (whatever the method). */
static bool api_path_in(const struct api_route *routes, size_t n, const struct api_req *req)
{
	for (size_t i = 0; i < n; i++)
		if (api_match(routes[i].pattern, req->seg, req->nseg))
			return true;
	return false;
}

static void api_dispatch(const struct api_route *routes, size_t n, struct api_req *req,
			 struct api_resp *r, char *allow, size_t allow_len)
{
	const struct api_route *found = NULL;
	bool path_known = false;
	size_t alen = 0;

	allow[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (!api_match(routes[i].pattern, req->seg, req->nseg))
			continue;
		path_known = true;
		alen += (size_t)snprintf(allow + alen, allow_len - alen, "%s%s", alen ? ", " : "",
					 routes[i].method);
		if (alen >= allow_len)
			alen = allow_len - 1;
		if (strcmp(routes[i].method, req->method) == 0)
			found = &routes[i];
	}
	if (found == NULL) {
		if (path_known)
			api_error(r, 405, "method_not_allowed", NULL,
				  "method %s is not allowed here (allowed: %s)", req->method,
				  allow);
		else
			api_error(r, 404, "not_found", NULL, "no such resource");
		return;
	}
	allow[0] = '\0';
	if (req->auth.role < found->min_role) {
		api_error(r, 403, "forbidden", NULL, "the role '%s' may not do this (needs '%s')",
			  role_name(req->auth.role), role_name(found->min_role));
		return;
	}
	if (!api_query_known(req, r, found->query))
		return;
	found->fn(req, r);
}

/* ---- libmicrohttpd glue ---- */

static int api_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

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
		if (r[0] == '%' && (hi = api_hex(r[1])) >= 0 && (lo = api_hex(r[2])) >= 0 &&
		    (hi | lo) != 0) {
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

	if (r->text) {
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

static void api_client_addr(struct MHD_Connection *conn, char out[INET6_ADDRSTRLEN])
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	socklen_t len;

	out[0] = '\0';
	if (ci == NULL || ci->client_addr == NULL)
		return;
	len = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						     : sizeof(struct sockaddr_in);
	if (getnameinfo(ci->client_addr, len, out, INET6_ADDRSTRLEN, NULL, 0, NI_NUMERICHOST) != 0)
		out[0] = '\0';
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
 * Checks made before the audit's transaction. Every state-changing request holds the store's
 * lock (its transaction) for its whole handler, so a handler's slow work that needs no store
 * is made here first, outside it: resolving a webhook's host (a name server may take
 * seconds) and Lua's parser on a script. The handler then sees req->prechecked and skips
 * them. A request they refuse is answered at once and still audited.
 *
 * What stays inside on purpose, because it depends on what the transaction reads: signing
 * a task's new version (ES256 over the manifest of the version number and script digest read
 * in the transaction), checking a PATCHed signature against the current version, and a job's
 * check of its task's signature (cached per task version, signer.h). Hashing a new API key is
 * one SHA-256 (auth.h): cheap.
 */
static const struct {
	api_handler fn;
	api_handler precheck;
} api_prechecks[] = {
    {api_webhook_create, api_webhook_precheck},
    {api_webhook_patch, api_webhook_precheck},
    {api_script_put, api_script_precheck},
};

/* The route the request goes to, when its method, role and query parameters pass (the
 * dispatcher answers the rest); NULL otherwise. */
static const struct api_route *api_route_of(const struct api_route *routes, size_t n,
					    struct api_req *req)
{
	struct api_resp probe = {.status = 0};
	const struct api_route *found = NULL;

	for (size_t i = 0; i < n && found == NULL; i++)
		if (api_match(routes[i].pattern, req->seg, req->nseg) &&
		    strcmp(routes[i].method, req->method) == 0)
			found = &routes[i];
	if (found &&
	    (req->auth.role < found->min_role || !api_query_known(req, &probe, found->query)))
		found = NULL;
	api_reply(&probe, 0, NULL); /* frees the answer api_query_known may have set */
	return found;
}

static void api_precheck(struct api_req *req, struct api_resp *resp)
{
	const struct api_route *route = api_route_of(api_routes, API_N_ROUTES, req);

	for (size_t i = 0; route && i < sizeof(api_prechecks) / sizeof(api_prechecks[0]); i++)
		if (api_prechecks[i].fn == route->fn) {
			api_prechecks[i].precheck(req, resp);
			req->prechecked = resp->status == 0;
		}
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

	api_precheck(req, resp);
	err = store_tx_begin(app->st);
	if (err != RCS_OK) {
		api_store_error(resp, err, "audit log");
		return;
	}
	if (resp->status == 0)
		api_dispatch(api_routes, API_N_ROUTES, req, resp, allow, allow_len);
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
 * announced or actual body over app->max_body is refused without being kept. */
static bool api_body_read(const struct api_app *app, struct MHD_Connection *conn, void **con_cls,
			  const char *upload_data, size_t *upload_data_size, enum MHD_Result *ret)
{
	struct api_conn *c = *con_cls;

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
		/* refuse an announced oversize body before reading it */
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (cl != NULL && strtoull(cl, NULL, 10) > app->max_body)
			c->too_big = true;
		if (!c->too_big)
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
		api_dispatch(api_routes, API_N_ROUTES, req, resp, allow, allow_len);
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
	if (api_path_in(api_open_routes, API_N_OPEN_ROUTES, req))
		api_dispatch(api_open_routes, API_N_OPEN_ROUTES, req, resp, allow, allow_len);
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
	if (api_body_read(app, conn, con_cls, upload_data, upload_data_size, &ret))
		return ret;
	c = *con_cls;
	started_us = api_now_us();
	memset(&req, 0, sizeof(req));
	req.app = app;
	req.conn = conn;
	req.method = method;
	req.now = (int64_t)time(NULL);
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
	unsigned want = (nthreads ? nthreads : 1) * API_WRITERS_PER_THREAD;

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
	log_info("REST API listening on %s", h->listen);
	return RCS_OK;
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
