/*
 * api.c - the handlers' side of the REST server: answers and error bodies, request
 * bodies, query parameters, pages and lists (docs/api.md). See api.h.
 */
#include "api.h"

#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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

/* The members of request bodies whose members are free-form JSON, null included: a job's
 * variables and a task's constants (docs/openapi.json, additionalProperties: true). */
static const char *const api_free_form[] = {"variables", "constants", NULL};

static bool api_in_list(const char *const *list, const char *s)
{
	for (size_t i = 0; list && list[i]; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	return false;
}

#define API_NULL_DEPTH 8

/*
 * Refuses a null anywhere in v (at path, "" for the body) but in the top-level members
 * named by nullable and inside the free-form ones: a member the document types as non-null
 * is never taken as "not given" (docs/api.md "Errors"). Objects and arrays deeper than
 * API_NULL_DEPTH are left to the handler's own checks.
 */
static enum rcs_err api_no_null(json_object *v, const char *path, int depth,
				const char *const *nullable, struct jsonu_err *e)
{
	char sub[sizeof(e->field)];
	enum rcs_err err = RCS_OK;

	if (depth > API_NULL_DEPTH)
		return RCS_OK;
	if (json_object_is_type(v, json_type_object)) {
		json_object_object_foreach(v, key, m)
		{
			snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", key);
			if (m == NULL && !(depth == 0 && api_in_list(nullable, key)))
				return jsonu_fail(
				    e, sub, "'%s' is null: leave it out or give a value", sub);
			/* a free-form member's own values may be null */
			if (m != NULL && !(depth == 0 && api_in_list(api_free_form, key)))
				err = api_no_null(m, sub, depth + 1, nullable, e);
			if (err != RCS_OK)
				return err;
		}
	} else if (json_object_is_type(v, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			json_object *m = json_object_array_get_idx(v, i);

			snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
			if (m == NULL)
				return jsonu_fail(
				    e, sub, "'%s' is null: leave it out or give a value", sub);
			err = api_no_null(m, sub, depth + 1, nullable, e);
			if (err != RCS_OK)
				return err;
		}
	}
	return RCS_OK;
}

bool api_body_object(struct api_req *req, struct api_resp *r, bool allow_empty, json_object **out)
{
	return api_body_object_nullable(req, r, allow_empty, NULL, out);
}

bool api_body_object_nullable(struct api_req *req, struct api_resp *r, bool allow_empty,
			      const char *const *nullable, json_object **out)
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
	if (api_no_null(*out, "", 0, nullable, &e) != RCS_OK) {
		api_invalid(r, &e);
		json_object_put(*out);
		*out = NULL;
		return false;
	}
	return true;
}

const char *api_query(struct api_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

struct api_query_collect {
	const char *name;
	const char **out;
	size_t max, n;
};

static enum MHD_Result api_query_collect(void *cls, enum MHD_ValueKind kind, const char *key,
					 const char *value)
{
	struct api_query_collect *c = cls;

	(void)kind;
	if (key != NULL && strcmp(key, c->name) == 0) {
		if (c->n < c->max)
			c->out[c->n] = value ? value : "";
		c->n++;
	}
	return MHD_YES;
}

size_t api_query_all(struct api_req *req, const char *name, const char **out, size_t max)
{
	struct api_query_collect c = {name, out, max, 0};

	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, api_query_collect, &c);
	return c.n;
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
	errno = 0;
	if (v[v[0] == '-'] >= '0' && v[v[0] == '-'] <= '9')
		n = strtoll(v, &end, 10);
	/* ERANGE: strtoll clamps to LLONG_MIN/LLONG_MAX, which a range up to INT64_MAX takes */
	if (end == NULL || *end != '\0' || errno == ERANGE || n < min || n > max) {
		api_error(r, 400, "invalid_parameter", name,
			  "'%s' must be an integer from %lld to %lld", name, min, max);
		return false;
	}
	*out = n;
	return true;
}

bool api_query_time(struct api_req *req, struct api_resp *r, const char *name, bool *has,
		    long long *out)
{
	*has = api_query(req, name) != NULL;
	return api_query_int(req, r, name, 0, API_MAX_TIME, out);
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

/* The place of word (wlen bytes) among the space-separated words of list, from 0; -1 when
 * it is none of them. */
static int api_word_index(const char *list, const char *word, size_t wlen)
{
	const char *p = list;

	for (int i = 0; p && *p; i++) {
		size_t n = strcspn(p, " ");

		if (n == wlen && strncmp(p, word, n) == 0)
			return i;
		p += n;
		p += strspn(p, " ");
	}
	return -1;
}

/* Whether word (wlen bytes) is one of the space-separated words of list. */
static bool api_word_in(const char *list, const char *word, size_t wlen)
{
	return api_word_index(list, word, wlen) >= 0;
}

/* Every key a list may be sorted by: store_page.sort points at one of these. */
static const char *const api_sort_names[] = {"created_at", "update_at", "name"};

#define API_MAX_NAME_QUERY 200

/* ident_prefix or ident_suffix k (docs/api.md "Lists"): 1 to 36 hex digits and '-', kept
 * lowercase in out (UUID_STR_LEN bytes, "" when not given). */
static bool api_ident_part(struct api_req *req, struct api_resp *r, const char *k, char *out)
{
	const char *v = api_query(req, k);
	size_t n = v ? strlen(v) : 0;

	out[0] = '\0';
	if (v == NULL)
		return true;
	if (n == 0 || n >= UUID_STR_LEN || strspn(v, "0123456789abcdefABCDEF-") != n) {
		api_error(r, 400, "invalid_parameter", k,
			  "'%s' must be 1 to %d hex digits or '-' (a part of an ident)", k,
			  UUID_STR_LEN - 1);
		return false;
	}
	for (size_t i = 0; i <= n; i++)
		out[i] = (char)tolower((unsigned char)v[i]);
	return true;
}

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
	if (!api_query_time(req, r, "created_after", &out->has_after, &out->created_after) ||
	    !api_query_time(req, r, "created_before", &out->has_before, &out->created_before))
		return false;
	out->name = with_name ? api_query(req, "name") : NULL;
	if (out->name && (out->name[0] == '\0' || strlen(out->name) > API_MAX_NAME_QUERY)) {
		api_error(r, 400, "invalid_parameter", "name", "'name' must be 1 to %d bytes",
			  API_MAX_NAME_QUERY);
		return false;
	}
	return api_ident_part(req, r, "ident_prefix", out->ident_prefix) &&
	       api_ident_part(req, r, "ident_suffix", out->ident_suffix);
}

struct api_query_check {
	const char *known;       /* the route's parameters */
	unsigned long long seen; /* bit i: the i-th word of known was given */
	char unknown[64];        /* the first one it doesn't take, cut to fit */
	char repeated[64];       /* the first one given twice */
};

static enum MHD_Result api_query_one(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct api_query_check *c = cls;
	int i;

	(void)kind;
	(void)value;
	if (key == NULL)
		return MHD_YES;
	i = api_word_index(c->known, key, strlen(key));
	if (i < 0) {
		snprintf(c->unknown, sizeof(c->unknown), "%s", key);
		return MHD_NO;
	}
	/* attribute (GET /devices) is the one filter that may be repeated: each one given
	 * must match (docs/api.md "Devices") */
	if (i < 64 && (c->seen & (1ULL << i)) && strcmp(key, "attribute") != 0) {
		snprintf(c->repeated, sizeof(c->repeated), "%s", key);
		return MHD_NO;
	}
	if (i < 64)
		c->seen |= 1ULL << i;
	return MHD_YES;
}

/* A query parameter the operation doesn't take is refused, not ignored: a misspelt
 * filter would otherwise answer everything; and one given twice too, as only one of its
 * values would be read (docs/api.md "Lists"). */
bool api_query_known(struct api_req *req, struct api_resp *r, const char *known)
{
	struct api_query_check c;

	c.known = known ? known : "";
	c.seen = 0;
	c.unknown[0] = '\0';
	c.repeated[0] = '\0';
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, api_query_one, &c);
	if (c.repeated[0] != '\0') {
		api_error(r, 400, "invalid_parameter", c.repeated,
			  "query parameter '%s' is given more than once", c.repeated);
		return false;
	}
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

/* See api.h. */
void api_client_addr(void *conn_, char *out)
{
	struct MHD_Connection *conn = conn_;
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
