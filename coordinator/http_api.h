/*
 * http_api.h - the REST API under /v3/commands on libmicrohttpd.
 *
 * http_api.c owns the server: reading bounded bodies, authentication by the api-key header,
 * the audited dispatch of state-changing requests on writer threads, and sending the answers
 * (docs/api.md). api_routes.c routes a request to its handler; the handlers see api.h only.
 */
#ifndef RCS_HTTP_API_H
#define RCS_HTTP_API_H

#include "api.h"
#include "err.h"

struct http_api;

/* Takes the listening address ("HOST:PORT") now: a port in use fails here, saying so,
 * before the coordinator touches its broker. Nothing is served until http_api_start. */
enum rcs_err http_api_listen(const char *listen, struct http_api **out);
/* Starts serving on the socket of http_api_listen with nthreads worker threads. */
enum rcs_err http_api_start(struct http_api *h, struct api_app *app, unsigned nthreads);
/* Before http_api_start: h serves the device download route only (--device-listen;
 * docs/api.md "Device downloads"), every other path a 404. */
void http_api_devices_only(struct http_api *h);
void http_api_stop(struct http_api *h);

#endif
