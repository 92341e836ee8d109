#include "http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum rcs_err http_call(struct http_client *c, const char *method, const char *path,
		       json_object *body, struct http_resp *r, char *errbuf, size_t errlen)
{
	CURL *curl = c->curl;
	struct curl_slist *hdrs = NULL, *tmp;
	struct buf url;
	struct http_sink sink;
	char cerr[CURL_ERROR_SIZE] = "";
	const char *payload = NULL;
	size_t plen = 0;
	CURLcode rc;
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	buf_init(&r->body, HTTP_MAX_BODY);
	buf_init(&url, 2 * HTTP_MAX_URL);
	sink.body = &r->body;
	sink.toobig = false;
	err = buf_appendf(&url, "%s%s", c->base, path);
	if (err != RCS_OK) {
		snprintf(errbuf, errlen, "the request's URL is too long");
		goto out;
	}
	const char *const fixed[] = {"Accept: application/json", "Content-Type: application/json",
				     "User-Agent: rcs/" RCS_VERSION, c->key_header};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (fixed[i] == NULL)
			continue;
		tmp = curl_slist_append(hdrs, fixed[i]);
		if (tmp == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		hdrs = tmp;
	}
	if (body != NULL) {
		payload = jsonu_dump(body, &plen);
		if (payload == NULL) {
			snprintf(errbuf, errlen, "out of memory");
			err = RCS_ERR_NOMEM;
			goto out;
		}
	}
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url.data);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT,
			 c->timeout_s < HTTP_CONNECT_TIMEOUT_S ? c->timeout_s
							       : HTTP_CONNECT_TIMEOUT_S);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 1L);
	if (payload != NULL) {
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload);
		curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)plen);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	}
	rc = curl_easy_perform(curl);
	if (rc != CURLE_OK) {
		if (sink.toobig) {
			snprintf(errbuf, errlen, "the answer to %s %s is larger than %u bytes",
				 method, path, HTTP_MAX_BODY);
			err = RCS_ERR_TOOBIG;
		} else {
			snprintf(errbuf, errlen, "cannot reach the API at %s: %s", c->base,
				 cerr[0] ? cerr : curl_easy_strerror(rc));
			err = RCS_ERR_IO;
		}
		goto out;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->body.len > 0) {
		struct jsonu_err je;
		/* not JSON (a proxy's HTML page, say): r->json stays NULL, the caller tells */
		if (jsonu_parse(r->body.data, r->body.len, HTTP_JSON_DEPTH, &r->json, &je) !=
		    RCS_OK)
			r->json = NULL;
	}
out:
	if (err != RCS_OK)
		http_resp_free(r);
	curl_slist_free_all(hdrs);
	buf_free(&url);
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

/* The upload's body, read from its file as libcurl asks. */
static size_t http_read(char *out, size_t size, size_t nmemb, void *arg)
{
	FILE *f = arg;
	size_t n = fread(out, 1, size * nmemb, f);

	return ferror(f) ? CURL_READFUNC_ABORT : n;
}

/* The bar: "uploading: 42 % (7.0 of 16.0 MiB)", drawn again in place. */
static int http_bar(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		    curl_off_t ulnow)
{
	(void)arg;
	(void)dltotal;
	(void)dlnow;
	if (ultotal > 0)
		fprintf(stderr, "\ruploading: %3d %% (%.1f of %.1f MiB)",
			(int)(ulnow * 100 / ultotal), (double)ulnow / 1048576.0,
			(double)ultotal / 1048576.0);
	return 0;
}

enum rcs_err http_upload(struct http_client *c, const char *path, FILE *f, long long size,
			 const char *sha256, bool progress, struct http_resp *r, char *errbuf,
			 size_t errlen)
{
	CURL *curl = c->curl;
	struct curl_slist *hdrs = NULL, *tmp;
	struct buf url;
	struct http_sink sink;
	char cerr[CURL_ERROR_SIZE] = "", sha_h[96];
	CURLcode rc;
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	buf_init(&r->body, HTTP_MAX_BODY);
	buf_init(&url, 2 * HTTP_MAX_URL);
	sink.body = &r->body;
	sink.toobig = false;
	snprintf(sha_h, sizeof(sha_h), "rcs-sha256: %s", sha256 ? sha256 : "");
	if (buf_appendf(&url, "%s%s", c->base, path) != RCS_OK) {
		snprintf(errbuf, errlen, "the request's URL is too long");
		err = RCS_ERR_INVAL;
		goto out;
	}
	const char *const fixed[] = {"Accept: application/json",
				     "Content-Type: application/octet-stream",
				     "User-Agent: rcs/" RCS_VERSION,
				     "Expect:",
				     c->key_header,
				     sha256 ? sha_h : NULL};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (fixed[i] == NULL)
			continue;
		tmp = curl_slist_append(hdrs, fixed[i]);
		if (tmp == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		hdrs = tmp;
	}
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url.data);
	curl_easy_setopt(curl, CURLOPT_POST, 1L);
	curl_easy_setopt(curl, CURLOPT_READFUNCTION, http_read);
	curl_easy_setopt(curl, CURLOPT_READDATA, f);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT,
			 c->timeout_s < HTTP_CONNECT_TIMEOUT_S ? c->timeout_s
							       : HTTP_CONNECT_TIMEOUT_S);
	/* no total timeout: a large file takes its time; stalled, it fails */
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, c->timeout_s);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, progress ? 0L : 1L);
	if (progress)
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, http_bar);
	rc = curl_easy_perform(curl);
	if (progress)
		fputc('\n', stderr);
	if (rc != CURLE_OK) {
		snprintf(errbuf, errlen, "cannot upload to the API at %s: %s", c->base,
			 cerr[0] ? cerr : curl_easy_strerror(rc));
		err = sink.toobig ? RCS_ERR_TOOBIG : RCS_ERR_IO;
		goto out;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->body.len > 0) {
		struct jsonu_err je;

		if (jsonu_parse(r->body.data, r->body.len, HTTP_JSON_DEPTH, &r->json, &je) !=
		    RCS_OK)
			r->json = NULL;
	}
out:
	if (err != RCS_OK)
		http_resp_free(r);
	curl_slist_free_all(hdrs);
	buf_free(&url);
	return err;
}
