/*
 * api_service.c - what the REST API serves without an api key: the health of
 * the coordinator and its OpenAPI document (docs/api.md, "Service").
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "mqtt_bridge.h"
#include "store.h"

/* GET /health: 200 while the database answers, else 503; the broker as the MQTT client sees it. */
void api_health(struct api_req *req, struct api_resp *r)
{
	json_object *o = json_object_new_object();
	const char *broker = "none";
	bool db_ok = store_ping(req->app->st) == RCS_OK;

	if (req->app->bridge)
		broker = bridge_connected(req->app->bridge) ? "connected" : "disconnected";
	json_object_object_add(o, "status", json_object_new_string(db_ok ? "ok" : "unavailable"));
	json_object_object_add(o, "database", json_object_new_string(db_ok ? "ok" : "unavailable"));
	json_object_object_add(o, "broker", json_object_new_string(broker));
	api_reply(r, db_ok ? 200 : 503, o);
}

/* GET /openapi.json: docs/openapi.json as it was when the coordinator was built. */
void api_openapi(struct api_req *req, struct api_resp *r)
{
	char *text = malloc(api_openapi_json_len);

	(void)req;
	if (text == NULL) {
		api_error(r, 503, "unavailable", NULL, "out of memory, retry later");
		return;
	}
	memcpy(text, api_openapi_json, api_openapi_json_len);
	api_reply_text(r, 200, text, api_openapi_json_len);
}
