/*
 * api_artifacts.c - the artifacts API (docs/api.md, "Artifacts"): an upload streamed to
 * storage as libmicrohttpd hands its body in (authenticated from its headers before a byte
 * is taken, its SHA-256 computed on the way, never held whole: --max-body does not apply),
 * then made a record by its handler in the request's audited transaction; the list, one
 * record, its bytes with ranges, deletes. See api.h; the storage is store_artifacts.h's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mbedtls/sha256.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "log.h"
#include "metrics.h"
#include "store_artifacts.h"
#include "store_audit.h"
#include "text.h"

#define ART_PATH "/v3/commands/artifacts"

struct api_upload {
	struct api_app *app;
	struct artifact_sink *sink;
	mbedtls_sha256_context sha;
	char want[65]; /* rcs-sha256, lowercase; "": none */
	char name[STORE_ARTIFACT_NAME_MAX + 1];
	long long used; /* the tenant's bytes when the upload began */
	long long received;
	/* the quota this upload holds until it ends (its Content-Length; 0: none, as a copy of
	 * an artifact the tenant has, named by rcs-sha256, adds nothing) */
	long long reserved;
	char client_root[UUID_STR_LEN];
	/* a refusal met while the body came (413, 409, 507, 500): the rest is discarded */
	int status;
	const char *code;
	char msg[160];
};

/* ---- the quota uploads under way hold (docs/api.md, "Artifacts") ---- */

/* Per tenant, the bytes uploads under way on this coordinator have reserved: an upload's
 * length counts against the quota from its first byte, so two at once cannot both fit. */
#define ART_RESERVE_SLOTS 256

static struct {
	pthread_mutex_t lock;
	struct {
		char client_root[UUID_STR_LEN];
		long long bytes;
	} t[ART_RESERVE_SLOTS];
} art_reserved = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Reserves len bytes of the tenant's quota (used: its stored bytes): 1 done, 0 over the
 * quota, -1 no slot free (too many tenants uploading at once). */
static int art_reserve(const char *client_root, long long used, long long len, long long quota)
{
	int ret = -1, slot = -1;

	pthread_mutex_lock(&art_reserved.lock);
	for (int i = 0; i < ART_RESERVE_SLOTS; i++) {
		if (strcmp(art_reserved.t[i].client_root, client_root) == 0) {
			slot = i;
			break;
		}
		if (slot < 0 && art_reserved.t[i].client_root[0] == '\0')
			slot = i;
	}
	if (slot >= 0) {
		ret = used + art_reserved.t[slot].bytes + len > quota ? 0 : 1;
		if (ret == 1) {
			snprintf(art_reserved.t[slot].client_root, UUID_STR_LEN, "%s", client_root);
			art_reserved.t[slot].bytes += len;
		}
	}
	pthread_mutex_unlock(&art_reserved.lock);
	return ret;
}

static void art_release(const char *client_root, long long len)
{
	pthread_mutex_lock(&art_reserved.lock);
	for (int i = 0; i < ART_RESERVE_SLOTS; i++) {
		if (strcmp(art_reserved.t[i].client_root, client_root) != 0)
			continue;
		art_reserved.t[i].bytes -= len;
		if (art_reserved.t[i].bytes <= 0)
			memset(&art_reserved.t[i], 0, sizeof(art_reserved.t[i]));
		break;
	}
	pthread_mutex_unlock(&art_reserved.lock);
}

/* ---- the upload's first call: its headers ---- */

/* An answer sent at once, before the body (libmicrohttpd then reads none of it). */
static int art_send_now(struct MHD_Connection *conn, struct api_resp *r)
{
	size_t len = 0;
	const char *text = r->body ? jsonu_dump(r->body, &len) : "";
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	int ret = MHD_NO;

	metrics_http("POST", r->status, 0);
	log_debug("POST " ART_PATH " -> %d (before the body)", r->status);
	if (resp) {
		MHD_add_response_header(resp, "Content-Type", "application/json");
		MHD_add_response_header(resp, "Cache-Control", "no-store");
		if (r->retry_after > 0) {
			char ra[16];

			snprintf(ra, sizeof(ra), "%d", r->retry_after);
			MHD_add_response_header(resp, "Retry-After", ra);
		}
		ret = (int)MHD_queue_response(conn, (unsigned)r->status, resp);
		MHD_destroy_response(resp);
	}
	json_object_put(r->body);
	r->body = NULL;
	return ret;
}

/* The key of the request's headers: an admin's, else r answered (401, 403, 429, 503); true
 * when the key is known (*a is its tenant and user). */
static bool art_auth(struct api_app *app, struct store *st, struct MHD_Connection *conn,
		     struct auth *a, struct api_resp *r)
{
	char addr[INET6_ADDRSTRLEN] = "";
	const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "api-key");
	enum rcs_err err = RCS_OK;
	int wait = 0;

	if (app->auth_fail_limit > 0)
		api_client_addr(conn, addr);
	switch (
	    auth_check(st, key, addr, app->auth_fail_limit, (int64_t)time(NULL), a, &wait, &err)) {
	case AUTH_OK:
		if (a->role < ROLE_ADMIN)
			api_error(r, 403, "forbidden", NULL,
				  "the role '%s' may not do this (needs 'admin')",
				  role_name(a->role));
		return true;
	case AUTH_MISSING:
		api_error(r, 401, "unauthorized", NULL, "the api-key header is required");
		break;
	case AUTH_UNKNOWN:
		api_error(r, 401, "unauthorized", NULL, "unknown or revoked api key");
		break;
	case AUTH_THROTTLED:
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
	return false;
}

/* The audit record of an upload refused before its body (docs/api.md, "Audit"). */
static void art_audit_refusal(struct api_app *app, struct MHD_Connection *conn,
			      const struct auth *a, int status)
{
	char addr[INET6_ADDRSTRLEN];
	struct audit_rec rec;
	enum rcs_err err;

	api_client_addr(conn, addr);
	memset(&rec, 0, sizeof(rec));
	rec.client_root = (char *)a->client_root;
	rec.ts = (int64_t)time(NULL);
	rec.user = (char *)a->user;
	rec.key_ident = (char *)a->key_ident;
	rec.method = "POST";
	rec.path = ART_PATH;
	rec.status_code = status;
	rec.remote = addr[0] ? addr : NULL;
	err = store_tx_begin(app->writer);
	if (err == RCS_OK) {
		err = store_audit_add(app->writer, &rec);
		err = store_tx_end(app->writer, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
	}
	if (err != RCS_OK)
		log_warnx("artifacts: the audit record of a refused upload: %s", rcs_strerror(err));
}

struct art_query {
	const char *bad;
};

static enum MHD_Result art_query_one(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct art_query *q = cls;

	(void)kind;
	(void)value;
	if (strcmp(key, "name") != 0 && q->bad == NULL)
		q->bad = key;
	return MHD_YES;
}

/* Whether s is a name: 1 to 128 bytes of valid UTF-8 without control characters (C0, DEL,
 * C1: a label shown in a terminal or a page must not steer it). */
static bool art_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0, i = 0;
	uint32_t cp;

	if (n == 0 || n > STORE_ARTIFACT_NAME_MAX)
		return false;
	while (i < n) {
		if (!text_utf8_next((const unsigned char *)s, n, &i, &cp) || cp < 0x20 ||
		    (cp >= 0x7f && cp <= 0x9f))
			return false;
	}
	return true;
}

/* Copies 64 hex digits of s, lowercased, into out: false when s is not that. */
static bool art_hex64(const char *s, char out[65])
{
	if (s == NULL || strlen(s) != 64)
		return false;
	for (int i = 0; i < 64; i++) {
		char c = s[i];

		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
		out[i] = c;
	}
	out[64] = '\0';
	return true;
}

/* The request's query and headers: false with r answered (400, 413, 409). */
static bool art_headers(struct api_app *app, struct store *st, struct MHD_Connection *conn,
			const struct auth *a, struct api_upload *up, struct api_resp *r)
{
	struct art_query q = {NULL};
	const char *name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "name");
	const char *sha = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "rcs-sha256");
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	long long len = -1;
	struct artifact_rec have;
	char *end = NULL;
	int res;
	enum rcs_err err;

	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, art_query_one, &q);
	if (q.bad) {
		api_error(r, 400, "invalid_parameter", q.bad, "unknown query parameter '%.64s'",
			  q.bad);
		return false;
	}
	if (!art_name_ok(name)) {
		api_error(r, 400, "invalid_parameter", "name",
			  "'name' is required: 1 to %d bytes, no control characters",
			  STORE_ARTIFACT_NAME_MAX);
		return false;
	}
	snprintf(up->name, sizeof(up->name), "%s", name);
	if (sha && !art_hex64(sha, up->want)) {
		api_error(r, 400, "invalid_parameter", "rcs-sha256",
			  "the rcs-sha256 header must be 64 hex digits");
		return false;
	}
	/* the length first: size and quota are checked before a byte is read */
	if (cl != NULL && cl[0] >= '0' && cl[0] <= '9') {
		errno = 0;
		len = strtoll(cl, &end, 10);
		if (errno != 0 || *end != '\0')
			len = -1;
	}
	if (len < 0) {
		api_error(r, 411, "length_required", NULL,
			  "an upload needs a Content-Length (no chunked transfer)");
		return false;
	}
	if (len > app->artifact_max_size) {
		api_error(r, 413, "payload_too_large", NULL,
			  "the artifact is larger than %lld bytes", app->artifact_max_size);
		return false;
	}
	err = store_artifacts_usage(st, a->client_root, &up->used);
	if (err != RCS_OK) {
		api_store_error(r, err, "artifacts");
		return false;
	}
	/* a copy of an artifact the tenant has (by rcs-sha256) adds nothing: it holds no quota */
	if (up->want[0] && store_artifact_get(st, a->client_root, up->want, &have) == RCS_OK) {
		store_artifact_rec_free(&have);
		return true;
	}
	res = len > 0 ? art_reserve(a->client_root, up->used, len, app->artifact_quota) : 1;
	if (res == 0) {
		api_error(r, 409, "quota_exceeded", NULL,
			  "the tenant's artifacts, with the uploads under way, would hold more than"
			  " %lld bytes",
			  app->artifact_quota);
		return false;
	}
	if (res < 0) {
		api_error(r, 503, "unavailable", NULL, "too many uploads under way: try again");
		r->retry_after = 5;
		return false;
	}
	up->reserved = len;
	snprintf(up->client_root, sizeof(up->client_root), "%s", a->client_root);
	return true;
}

bool api_upload_begin(struct api_app *app, void *conn_, const char *url, const char *method,
		      struct api_upload **out, int *ret)
{
	struct MHD_Connection *conn = conn_;
	struct api_resp r = {.status = 0};
	struct api_upload *up = NULL;
	struct store *rd;
	struct auth a;
	enum rcs_err err;
	bool known;

	*out = NULL;
	if (strcmp(method, "POST") != 0 ||
	    (strcmp(url, ART_PATH) != 0 && strcmp(url, ART_PATH "/") != 0))
		return false;
	up = calloc(1, sizeof(*up));
	if (up == NULL) {
		*ret = MHD_NO;
		return true;
	}
	up->app = app;
	mbedtls_sha256_init(&up->sha);
	rd = store_reader(app->st);
	known = art_auth(app, rd, conn, &a, &r);
	if (r.status == 0 && art_headers(app, rd, conn, &a, up, &r)) {
		err = store_artifact_sink_open(app->writer, app->artifact_dir, a.client_root,
					       (int64_t)time(NULL), &up->sink);
		if (err == RCS_ERR_FULL)
			api_error(&r, 507, "storage_full", NULL, "the server's storage is full");
		else if (err != RCS_OK)
			api_store_error(&r, err, "artifact");
		if (err == RCS_OK && mbedtls_sha256_starts_ret(&up->sha, 0) != 0)
			api_error(&r, 500, "internal", NULL, "internal error");
	}
	store_reader_put(app->st, rd);
	if (r.status != 0) {
		if (known)
			art_audit_refusal(app, conn, &a, r.status);
		api_upload_free(up);
		*ret = art_send_now(conn, &r);
		return true;
	}
	*out = up;
	*ret = MHD_YES;
	return true;
}

/* ---- the body, piece by piece ---- */

static void art_refuse(struct api_upload *up, int status, const char *code, const char *msg)
{
	up->status = status;
	up->code = code;
	snprintf(up->msg, sizeof(up->msg), "%s", msg);
	store_artifact_sink_free(up->sink); /* nothing kept */
	up->sink = NULL;
}

void api_upload_data(struct api_upload *up, const char *data, size_t n)
{
	enum rcs_err err;

	if (up->status != 0)
		return; /* refused: the rest is read and dropped */
	up->received += (long long)n;
	if (up->received > up->app->artifact_max_size) {
		art_refuse(up, 413, "payload_too_large", "the artifact is larger than the limit");
		return;
	}
	if (mbedtls_sha256_update_ret(&up->sha, (const unsigned char *)data, n) != 0) {
		art_refuse(up, 500, "internal", "internal error");
		return;
	}
	err = store_artifact_sink_write(up->sink, data, n);
	if (err == RCS_ERR_FULL)
		art_refuse(up, 507, "storage_full", "the server's storage is full");
	else if (err != RCS_OK)
		art_refuse(up, 500, "internal", "the artifact could not be stored");
}

void api_upload_free(struct api_upload *up)
{
	if (up == NULL)
		return;
	store_artifact_sink_free(up->sink);
	mbedtls_sha256_free(&up->sha);
	if (up->reserved > 0)
		art_release(up->client_root, up->reserved);
	free(up);
}

/* ---- the handlers ---- */

/* The record of a (docs/api.md, "Artifacts"); used_by: the tasks whose current version pins
 * it, NULL: looked up in st for the tenant (none when the lookup fails). */
static json_object *art_json(struct store *st, const char *client_root,
			     const struct artifact_rec *a)
{
	json_object *o = json_object_new_object(), *used = json_object_new_array();
	struct store_idents ids;
	char ident[72];

	snprintf(ident, sizeof(ident), "sha256:%s", a->sha256);
	json_object_object_add(o, "ident", json_object_new_string(ident));
	json_object_object_add(o, "sha256", json_object_new_string(a->sha256));
	json_object_object_add(o, "size", json_object_new_int64(a->size));
	json_object_object_add(o, "name", json_object_new_string(a->name ? a->name : ""));
	json_object_object_add(o, "created_at", json_object_new_int64(a->created_at));
	json_object_object_add(o, "created_user",
			       json_object_new_string(a->created_user ? a->created_user : ""));
	if (store_artifact_used_by(st, client_root, a->sha256, &ids) == RCS_OK) {
		for (size_t i = 0; i < ids.n; i++)
			json_object_array_add(used, json_object_new_string(ids.v[i]));
		store_idents_free(&ids);
	}
	json_object_object_add(o, "used_by", used);
	return o;
}

void api_artifact_upload(struct api_req *req, struct api_resp *r)
{
	struct api_upload *up = req->upload;
	struct artifact_rec in, out;
	unsigned char hash[32];
	bool created = false;
	enum rcs_err err;

	if (up == NULL || (up->status == 0 && mbedtls_sha256_finish_ret(&up->sha, hash) != 0)) {
		api_error(r, 500, "internal", NULL, "internal error");
		return;
	}
	if (up->status != 0) {
		api_error(r, up->status, up->code, NULL, "%s", up->msg);
		return;
	}
	memset(&in, 0, sizeof(in));
	for (int i = 0; i < 32; i++)
		snprintf(in.sha256 + 2 * i, 3, "%02x", hash[i]);
	snprintf(req->target, sizeof(req->target), "sha256:%s", in.sha256);
	if (up->want[0] && strcmp(up->want, in.sha256) != 0) {
		api_error(r, 412, "digest_mismatch", "rcs-sha256",
			  "the bytes' SHA-256 is %s, not the rcs-sha256 header's", in.sha256);
		store_artifact_sink_free(up->sink); /* nothing kept */
		up->sink = NULL;
		return;
	}
	in.name = up->name;
	in.created_at = req->now;
	in.created_user = req->auth.user;
	err = store_artifact_sink_commit(up->sink, &in, req->app->artifact_quota, &out, &created);
	if (err == RCS_ERR_CONFLICT)
		api_error(r, 409, "quota_exceeded", NULL,
			  "the tenant's artifacts would hold more than %lld bytes",
			  req->app->artifact_quota);
	else if (err == RCS_ERR_FULL)
		api_error(r, 507, "storage_full", NULL, "the server's storage is full");
	else if (err != RCS_OK)
		api_store_error(r, err, "artifact");
	else
		api_reply(r, created ? 201 : 200,
			  art_json(req->app->st, req->auth.client_root, &out));
	if (err == RCS_OK && created)
		metrics_artifact_bytes(true, (unsigned long long)out.size);
	store_artifact_rec_free(&out);
	store_artifact_sink_free(up->sink); /* a copy's bytes gone before the answer */
	up->sink = NULL;
	/* the bytes are stored (or not): they count as the tenant's from now on, not as an
	 * upload's, before the client can send its next one */
	if (up->reserved > 0)
		art_release(up->client_root, up->reserved);
	up->reserved = 0;
}

void api_artifacts_list(struct api_req *req, struct api_resp *r)
{
	struct store_artifact_list l;
	struct store_page pg;
	json_object *o, *items;
	enum rcs_err err;

	if (!api_list(req, r, API_DEFAULT_PER_PAGE, "created_at name", true, true, &pg))
		return;
	err = store_artifacts_list(req->app->st, req->auth.client_root, &pg, &l);
	if (err != RCS_OK) {
		api_store_error(r, err, "artifact");
		return;
	}
	o = json_object_new_object();
	items = json_object_new_array();
	json_object_object_add(o, "page", json_object_new_int64(l.pg.page));
	json_object_object_add(o, "per_page", json_object_new_int64(l.pg.per_page));
	json_object_object_add(
	    o, "total_pages",
	    json_object_new_int64(
		l.pg.per_page > 0 ? (l.pg.total + l.pg.per_page - 1) / l.pg.per_page : 0));
	json_object_object_add(o, "total_items", json_object_new_int64(l.pg.total));
	for (size_t i = 0; i < l.n; i++)
		json_object_array_add(items,
				      art_json(req->app->st, req->auth.client_root, &l.items[i]));
	json_object_object_add(o, "items", items);
	store_artifact_list_free(&l);
	api_reply(r, 200, o);
}

/* The path's ident ("sha256:<64 lowercase hex>") into sha: false with r answered (400). */
static bool art_ident(struct api_req *req, struct api_resp *r, char sha[65])
{
	const char *id = req->seg[1];

	if (strncmp(id, "sha256:", 7) != 0 || !art_hex64(id + 7, sha) || strcmp(id + 7, sha) != 0) {
		api_error(r, 400, "invalid_parameter", "ident",
			  "an artifact's ident is sha256: and 64 lowercase hex digits");
		return false;
	}
	return true;
}

/* The tenant's artifact of the path into a: false with r answered (400, 404). */
static bool art_load(struct api_req *req, struct api_resp *r, struct artifact_rec *a)
{
	char sha[65];
	enum rcs_err err;

	if (!art_ident(req, r, sha))
		return false;
	err = store_artifact_get(req->app->st, req->auth.client_root, sha, a);
	if (err != RCS_OK)
		api_store_error(r, err, "artifact");
	return err == RCS_OK;
}

void api_artifact_get(struct api_req *req, struct api_resp *r)
{
	struct artifact_rec a;

	if (!art_load(req, r, &a))
		return;
	api_reply(r, 200, art_json(req->app->st, req->auth.client_root, &a));
	store_artifact_rec_free(&a);
}

void api_artifact_delete(struct api_req *req, struct api_resp *r)
{
	char sha[65];
	enum rcs_err err;

	if (!art_ident(req, r, sha))
		return;
	err =
	    store_artifact_delete(req->app->st, req->app->artifact_dir, req->auth.client_root, sha);
	if (err == RCS_ERR_CONFLICT) {
		api_error(r, 409, "artifact_in_use", NULL,
			  "a task's current version or a job not yet ended needs it (see used_by)");
		return;
	}
	if (err != RCS_OK) {
		api_store_error(r, err, "artifact");
		return;
	}
	api_reply(r, 204, NULL);
}

/* ---- the bytes, with ranges (RFC 9110, section 14) ---- */

static bool art_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* A number of h up to end (*end: where it stopped): false on none or an overflow. */
static bool art_num(const char *h, long long *v, char **end)
{
	if (!art_digit(*h))
		return false;
	errno = 0;
	*v = strtoll(h, end, 10);
	return errno == 0;
}

int api_artifact_range(const char *h, long long size, long long *start, long long *len)
{
	long long a, b = size - 1;
	char *end;

	if (h == NULL || strncmp(h, "bytes=", 6) != 0 || strchr(h, ',') != NULL)
		return 0;
	h += 6;
	if (*h == '-') {
		if (!art_num(h + 1, &a, &end) || *end != '\0')
			return 0;
		if (a == 0 || size == 0)
			return -1;
		*len = a < size ? a : size;
		*start = size - *len;
		return 1;
	}
	if (!art_num(h, &a, &end) || *end != '-')
		return 0;
	h = end + 1;
	if (*h != '\0' && (!art_num(h, &b, &end) || *end != '\0' || b < a))
		return 0;
	if (a >= size)
		return -1;
	if (b >= size)
		b = size - 1;
	*start = a;
	*len = b - a + 1;
	return 1;
}

/* The chunks of the database (PostgreSQL), read one at a time as the answer goes out. */
struct art_stream {
	struct store *st;
	char blob_id[40];
	long long start, chunk;
	size_t got;
	unsigned char buf[STORE_ARTIFACT_CHUNK];
};

static ssize_t art_stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct art_stream *s = cls;
	long long at = s->start + (long long)pos, n = at / STORE_ARTIFACT_CHUNK;
	size_t off = (size_t)(at % STORE_ARTIFACT_CHUNK), take;

	if (n != s->chunk) {
		s->chunk = -1;
		if (store_artifact_chunk(s->st, s->blob_id, n, s->buf, sizeof(s->buf), &s->got) !=
		    RCS_OK)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		s->chunk = n;
	}
	if (off >= s->got)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	take = s->got - off < max ? s->got - off : max;
	memcpy(out, s->buf + off, take);
	metrics_artifact_bytes(false, take);
	return (ssize_t)take;
}

/* The answer's bytes [start, start + len) of a: from its file at an offset, or its chunks. */
static struct MHD_Response *art_body(struct api_req *req, const struct artifact_rec *a,
				     long long start, long long len)
{
	struct MHD_Response *resp = NULL;
	char path[PATH_MAX];
	struct stat sb;
	int fd;

	if (a->blob_id[0]) {
		struct art_stream *s = calloc(1, sizeof(*s));

		if (s == NULL)
			return NULL;
		s->st = req->app->writer;
		snprintf(s->blob_id, sizeof(s->blob_id), "%s", a->blob_id);
		s->start = start;
		s->chunk = -1;
		resp = MHD_create_response_from_callback((uint64_t)len, 64 * 1024, art_stream_read,
							 s, free);
		if (resp == NULL)
			free(s);
		return resp;
	}
	if (!store_artifact_path(req->app->artifact_dir, req->auth.client_root, a->sha256, path,
				 sizeof(path)))
		return NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size != a->size) {
		log_warnx("artifacts: %s: %s", path,
			  fd < 0 ? strerror(errno) : "not the size of its record");
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	resp = MHD_create_response_from_fd_at_offset64((uint64_t)len, fd, (uint64_t)start);
	if (resp == NULL)
		close(fd);
	else
		metrics_artifact_bytes(false, (unsigned long long)len);
	return resp;
}

/* 416: none of the range is in the artifact, with Content-Range: bytes * / size. */
static void art_unsatisfiable(struct api_resp *r, long long size)
{
	struct api_resp e = {.status = 0};
	struct MHD_Response *resp;
	const char *text;
	size_t len = 0;
	char cr[48];

	api_error(&e, 416, "range_not_satisfiable", NULL,
		  "the range is past the artifact's end (%lld bytes)", size);
	text = jsonu_dump(e.body, &len);
	resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	json_object_put(e.body);
	if (resp == NULL) {
		api_error(r, 500, "internal", NULL, "internal error");
		return;
	}
	snprintf(cr, sizeof(cr), "bytes */%lld", size);
	MHD_add_response_header(resp, "Content-Range", cr);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	r->status = 416;
	r->mhd = resp;
}

void api_artifact_content(struct api_req *req, struct api_resp *r)
{
	struct MHD_Connection *conn = req->conn;
	const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
	const char *if_range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-Range");
	struct MHD_Response *resp;
	struct artifact_rec a;
	long long start = 0, len;
	char etag[72], cr[80];
	int ranged;

	if (!art_load(req, r, &a))
		return;
	len = a.size;
	snprintf(etag, sizeof(etag), "\"%s\"", a.sha256);
	/* If-Range: the range applies only to these very bytes */
	ranged = if_range && strcmp(if_range, etag) != 0
		     ? 0
		     : api_artifact_range(range, a.size, &start, &len);
	if (ranged < 0) {
		art_unsatisfiable(r, a.size);
		goto out;
	}
	resp = art_body(req, &a, start, len);
	if (resp == NULL) {
		api_error(r, 500, "internal", NULL, "the artifact's bytes cannot be read");
		goto out;
	}
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "ETag", etag);
	MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	if (ranged > 0) {
		snprintf(cr, sizeof(cr), "bytes %lld-%lld/%lld", start, start + len - 1, a.size);
		MHD_add_response_header(resp, "Content-Range", cr);
	}
	r->status = ranged > 0 ? 206 : 200;
	r->mhd = resp;
out:
	store_artifact_rec_free(&a);
}

enum rcs_err api_artifacts_sweep(struct api_app *app, const char *node)
{
	return store_artifacts_sweep(app->writer, app->artifact_dir, node, (int64_t)time(NULL));
}
