#include "http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonu.h"

#define HTTP_CONNECT_TIMEOUT_S 10L
#define HTTP_API_PATH          "/v3/commands"

/* A key goes into a header line: printable ASCII, no space. */
static bool http_key_ok(const char *key)
{
	if (*key == '\0' || strlen(key) > 1024)
		return false;
	for (const char *p = key; *p != '\0'; p++)
		if (*p <= ' ' || *p > '~')
			return false;
	return true;
}

enum rcs_err http_init(struct http_client *c, const char *url, const char *key, long timeout_s,
		       char *errbuf, size_t errlen)
{
	size_t n;
	struct buf h;
	enum rcs_err err = RCS_OK;

	memset(c, 0, sizeof(*c));
	c->timeout_s = timeout_s;
	buf_init(&h, 2048);
	if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
		snprintf(errbuf, errlen, "the API URL '%s' does not start with http:// or https://",
			 url);
		err = RCS_ERR_INVAL;
		goto out;
	}
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		n--;
	if (n >= strlen(HTTP_API_PATH) &&
	    memcmp(url + n - strlen(HTTP_API_PATH), HTTP_API_PATH, strlen(HTTP_API_PATH)) == 0)
		n -= strlen(HTTP_API_PATH);
	if (n + strlen(HTTP_API_PATH) >= sizeof(c->base)) {
		snprintf(errbuf, errlen, "the API URL is longer than %d bytes", HTTP_MAX_URL - 20);
		err = RCS_ERR_INVAL;
		goto out;
	}
	memcpy(c->base, url, n);
	memcpy(c->base + n, HTTP_API_PATH, strlen(HTTP_API_PATH) + 1);
	if (key != NULL) {
		if (!http_key_ok(key)) {
			snprintf(errbuf, errlen,
				 "the API key holds a space or a character that is not printable "
				 "ASCII (is it the key?)");
			err = RCS_ERR_INVAL;
			goto out;
		}
		err = buf_appendf(&h, "api-key: %s", key);
		if (err != RCS_OK)
			goto out;
		c->key_header = h.data;
		h.data = NULL;
	}
	c->curl = curl_easy_init();
	if (c->curl == NULL)
		err = RCS_ERR_NOMEM;
out:
	buf_free(&h);
	return err;
}

void http_free(struct http_client *c)
{
	if (c->curl != NULL)
		curl_easy_cleanup(c->curl);
	c->curl = NULL;
	if (c->key_header != NULL) {
		explicit_bzero(c->key_header, strlen(c->key_header));
		free(c->key_header);
		c->key_header = NULL;
	}
}

struct http_sink {
	struct buf *body;
	bool toobig;
};

static size_t http_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct http_sink *s = arg;
	size_t n = size * nmemb;

	if (buf_append(s->body, data, n) != RCS_OK) {
		s->toobig = true;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	return n;
}

/* One request's state between http_begin and http_perform. */
struct http_req {
	struct curl_slist *hdrs;
	struct buf url;
	struct http_sink sink;
	char cerr[CURL_ERROR_SIZE];
};

/* Sets the handle up for path with the fixed headers, content_type and extra (either may
 * be NULL), the answer read into r. */
static enum rcs_err http_begin(struct http_client *c, const char *path, const char *content_type,
			       const char *extra, struct http_req *q, struct http_resp *r,
			       char *errbuf, size_t errlen)
{
	CURL *curl = c->curl;
	struct curl_slist *tmp;
	enum rcs_err err;

	memset(r, 0, sizeof(*r));
	buf_init(&r->body, HTTP_MAX_BODY);
	buf_init(&q->url, 2 * HTTP_MAX_URL);
	q->hdrs = NULL;
	q->sink.body = &r->body;
	q->sink.toobig = false;
	q->cerr[0] = '\0';
	err = buf_appendf(&q->url, "%s%s", c->base, path);
	if (err != RCS_OK) {
		snprintf(errbuf, errlen, "the request's URL is too long");
		return err;
	}
	const char *const fixed[] = {"Accept: application/json", content_type,
				     "User-Agent: rcs/" RCS_VERSION, c->key_header, extra};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (fixed[i] == NULL)
			continue;
		tmp = curl_slist_append(q->hdrs, fixed[i]);
		if (tmp == NULL) {
			snprintf(errbuf, errlen, "out of memory");
			return RCS_ERR_NOMEM;
		}
		q->hdrs = tmp;
	}
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, q->url.data);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, q->hdrs);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT,
			 c->timeout_s < HTTP_CONNECT_TIMEOUT_S ? c->timeout_s
							       : HTTP_CONNECT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &q->sink);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, q->cerr);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 1L);
	return RCS_OK;
}

/* Runs the request set up; what http_call returns. */
static enum rcs_err http_perform(struct http_client *c, const char *method, const char *path,
				 struct http_req *q, struct http_resp *r, char *errbuf,
				 size_t errlen)
{
	CURLcode rc = curl_easy_perform(c->curl);

	if (rc != CURLE_OK) {
		if (q->sink.toobig) {
			snprintf(errbuf, errlen, "the answer to %s %s is larger than %u bytes",
				 method, path, HTTP_MAX_BODY);
			return RCS_ERR_TOOBIG;
		}
		snprintf(errbuf, errlen, "cannot reach the API at %s: %s", c->base,
			 q->cerr[0] ? q->cerr : curl_easy_strerror(rc));
		return RCS_ERR_IO;
	}
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->body.len > 0) {
		struct jsonu_err je;
		/* not JSON (a proxy's HTML page, say): r->json stays NULL, the caller tells */
		if (jsonu_parse(r->body.data, r->body.len, HTTP_JSON_DEPTH, &r->json, &je) !=
		    RCS_OK)
			r->json = NULL;
	}
	return RCS_OK;
}

static void http_end(struct http_req *q, struct http_resp *r, enum rcs_err err)
{
	if (err != RCS_OK)
		http_resp_free(r);
	curl_slist_free_all(q->hdrs);
	q->hdrs = NULL;
	buf_free(&q->url);
}

enum rcs_err http_call(struct http_client *c, const char *method, const char *path,
		       json_object *body, struct http_resp *r, char *errbuf, size_t errlen)
{
	CURL *curl = c->curl;
	struct http_req q;
	const char *payload = NULL;
	size_t plen = 0;
	enum rcs_err err;

	err = http_begin(c, path, "Content-Type: application/json", NULL, &q, r, errbuf, errlen);
	if (err != RCS_OK)
		goto out;
	if (body != NULL) {
		payload = jsonu_dump(body, &plen);
		if (payload == NULL) {
			snprintf(errbuf, errlen, "out of memory");
			err = RCS_ERR_NOMEM;
			goto out;
		}
	}
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s);
	if (payload != NULL) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)plen);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	}
	err = http_perform(c, method, path, &q, r, errbuf, errlen);
out:
	http_end(&q, r, err);
	return err;
}

/* The file's bytes for libcurl, exactly size of them. */
struct http_src {
	const struct http_upload *u;
	long long left;
	int err; /* errno of a failed read; -1: the file ended early */
};

static size_t http_read(char *data, size_t size, size_t nitems, void *arg)
{
	struct http_src *s = arg;
	size_t want = size * nitems;
	ssize_t got;

	if ((long long)want > s->left)
		want = (size_t)s->left;
	if (want == 0)
		return 0;
	do
		got = read(s->u->fd, data, want);
	while (got < 0 && errno == EINTR);
	if (got <= 0) {
		s->err = got < 0 ? errno : -1;
		return CURL_READFUNC_ABORT;
	}
	s->left -= got;
	return (size_t)got;
}

static int http_xfer(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		     curl_off_t ulnow)
{
	const struct http_upload *u = ((struct http_src *)arg)->u;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	u->progress(u->arg, (long long)ulnow, u->size);
	return 0;
}

enum rcs_err http_upload(struct http_client *c, const char *path, const struct http_upload *u,
			 struct http_resp *r, char *errbuf, size_t errlen)
{
	CURL *curl = c->curl;
	struct http_req q;
	struct http_src src = {u, u->size, 0};
	char digest[96] = "";
	enum rcs_err err;

	if (u->sha256 != NULL)
		snprintf(digest, sizeof(digest), "rcs-sha256: %.64s", u->sha256);
	err = http_begin(c, path, "Content-Type: application/octet-stream",
			 digest[0] ? digest : NULL, &q, r, errbuf, errlen);
	if (err != RCS_OK)
		goto out;
	curl_easy_setopt(curl, CURLOPT_POST, 1L);
	curl_easy_setopt(curl, CURLOPT_READFUNCTION, http_read);
	curl_easy_setopt(curl, CURLOPT_READDATA, &src);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)u->size);
	/* no total timeout for a body of any size: a transfer that stalls fails instead */
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, c->timeout_s);
	if (u->progress != NULL) {
		curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, http_xfer);
		curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &src);
	}
	err = http_perform(c, "POST", path, &q, r, errbuf, errlen);
	if (err == RCS_ERR_IO && src.err != 0) {
		/* the file, not the network: say so */
		if (src.err < 0)
			snprintf(errbuf, errlen,
				 "the file ended before its %lld bytes (did it change during the "
				 "upload?)",
				 u->size);
		else
			snprintf(errbuf, errlen, "reading the file: %s", strerror(src.err));
	}
out:
	http_end(&q, r, err);
	return err;
}

void http_resp_free(struct http_resp *r)
{
	if (r->json != NULL)
		json_object_put(r->json);
	r->json = NULL;
	buf_free(&r->body);
}

enum rcs_err http_escape(struct buf *b, const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0); /* letters, digits and -._~ kept, %XX else */
	enum rcs_err err = e ? buf_append(b, e, strlen(e)) : RCS_ERR_NOMEM;

	curl_free(e);
	return err;
}
