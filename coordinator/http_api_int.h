/*
 * http_api_int.h - what the REST server's files share (http_api.c, api_reply.c,
 * api_routes.c), private to them; the handlers see http_api.h only.
 */
#ifndef RCS_HTTP_API_INT_H
#define RCS_HTTP_API_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "http_api.h"

/* ---- api_routes.c: the routes with each operation's role and query parameters ---- */

/* Splits path (after the prefix) into segments in place; false when too many or empty. */
bool api_split(char *path, const char **seg, int *nseg);
/* True when the request's path is one served without an api key (/health, /openapi.json). */
bool api_route_is_open(const struct api_req *req);
/* Answers the request by its route (open: the routes served without a key), or with 404,
 * 405 (allow: the methods the path takes), 403 or 400 for an unknown query parameter. */
void api_route_dispatch(bool open, struct api_req *req, struct api_resp *r, char *allow,
			size_t allow_len);
/* The slow checks of the request's route that need no store, made before its transaction
 * (req->prechecked); a request they refuse is answered in resp. */
void api_route_precheck(struct api_req *req, struct api_resp *resp);

/* ---- api_reply.c ---- */

/* A query parameter the operation doesn't take is refused, not ignored (known: its
 * parameters, space-separated; NULL: none): false with r answered. */
bool api_query_known(struct api_req *req, struct api_resp *r, const char *known);

#endif
