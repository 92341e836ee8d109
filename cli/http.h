/*
 * http.h - the CLI's HTTP client: one libcurl handle, the API's base URL and key.
 *
 * Every request has a connect timeout and a total timeout, so an API that is down
 * or stops answering is an error within seconds, never a hang. Answers are read
 * into a bounded buffer (HTTP_MAX_BODY) and parsed as JSON when they hold any.
 * Calls: libcurl, common/buf, common/jsonu.
 */
#ifndef RCS_CLI_HTTP_H
#define RCS_CLI_HTTP_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "buf.h"
#include "err.h"

#define HTTP_MAX_BODY   (64u * 1024u * 1024u) /* bytes of one answer */
#define HTTP_MAX_URL    4096                  /* bytes of a base URL */
#define HTTP_JSON_DEPTH 64                    /* answers nest records in records */

struct http_client {
	void *curl;              /* CURL * */
	char base[HTTP_MAX_URL]; /* ".../v3/commands", no trailing slash */
	char *key_header;        /* "api-key: ...", wiped on free; NULL: no key */
	long timeout_s;
};

/* One answer: the status code, the body as received and, when it is JSON, the tree. */
struct http_resp {
	long status;
	struct buf body;
	json_object *json; /* owned; NULL for an empty or non-JSON body */
};

/*
 * Sets c up for url (the coordinator's address, with or without "/v3/commands"),
 * key (may be NULL) and timeout_s seconds per request. RCS_ERR_INVAL with errbuf
 * filled for a URL that is not http(s):// or too long, or a key that can't go in
 * a header; RCS_ERR_NOMEM. http_free() releases it in every case.
 */
enum rcs_err http_init(struct http_client *c, const char *url, const char *key, long timeout_s,
		       char *errbuf, size_t errlen);
void http_free(struct http_client *c);

/*
 * method path (below /v3/commands, with its query) with body (NULL: none) as JSON.
 * RCS_OK when an answer came, whatever its status (r filled: http_resp_free it);
 * RCS_ERR_IO when none did (refused, unresolved, timed out: errbuf says which);
 * RCS_ERR_TOOBIG for an answer over HTTP_MAX_BODY.
 */
enum rcs_err http_call(struct http_client *c, const char *method, const char *path,
		       json_object *body, struct http_resp *r, char *errbuf, size_t errlen);
void http_resp_free(struct http_resp *r);

/*
 * POST path (below /v3/commands, with its query) with the size bytes of f as the body
 * (application/octet-stream, streamed with its Content-Length, never read whole) and the
 * header "rcs-sha256: <sha256>" (NULL: none). progress: a bar on stderr (a terminal). No
 * total timeout: the upload fails when nothing moves for the client's timeout. Answers as
 * http_call.
 */
enum rcs_err http_upload(struct http_client *c, const char *path, FILE *f, long long size,
			 const char *sha256, bool progress, struct http_resp *r, char *errbuf,
			 size_t errlen);

/*
 * Appends s to b escaped for a URL path segment or a query value (every byte but
 * ALPHA / DIGIT / "-" / "." / "_" / "~" percent-encoded). RCS_ERR_TOOBIG past b's ceiling.
 */
enum rcs_err http_escape(struct buf *b, const char *s);

#endif
