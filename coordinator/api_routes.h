/*
 * api_routes.h - the REST API's routes (api_routes.c), for the server (http_api.c).
 */
#ifndef RCS_API_ROUTES_H
#define RCS_API_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"

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

#endif
