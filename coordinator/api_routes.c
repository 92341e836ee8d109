/*
 * api_routes.c - the REST API's routes: each operation's method, path, role, handler and
 * query parameters, matching a request to its route, and the checks made before a change's
 * transaction (docs/api.md). See api_routes.h.
 */
#include "api_routes.h"

#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

struct api_route {
	const char *method;
	const char *pattern; /* segments after /v3/commands; ":" is one ident */
	enum role min_role;
	api_handler fn;
	const char *query; /* the query parameters it takes, space-separated; NULL: none */
};

/* The query parameters of lists (docs/api.md "Paging" and "Lists"). */
#define Q_PAGE "page per_page"
#define Q_LIST Q_PAGE " sort created_after created_before ident_prefix ident_suffix"

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
    {"GET", "groups", ROLE_VIEWER, api_groups_list, Q_LIST " name status task_ident tag"},
    {"GET", "groups/:", ROLE_VIEWER, api_group_get, NULL},
    {"PATCH", "groups/:/pause", ROLE_OPERATOR, api_group_pause, NULL},
    {"PATCH", "groups/:/resume", ROLE_OPERATOR, api_group_resume, NULL},
    {"PATCH", "groups/:/cancel", ROLE_OPERATOR, api_group_cancel, NULL},
    {"GET", "scripts", ROLE_VIEWER, api_scripts_list, Q_PAGE},
    {"GET", "scripts/:", ROLE_VIEWER, api_script_get, NULL},
    {"PUT", "scripts/:", ROLE_ADMIN, api_script_put, NULL},
    {"DELETE", "scripts/:", ROLE_ADMIN, api_script_delete, NULL},
    {"GET", "devices", ROLE_VIEWER, api_devices_list, Q_LIST " name tag online attribute"},
    {"POST", "devices", ROLE_ADMIN, api_device_create, NULL},
    {"GET", "devices/:", ROLE_VIEWER, api_device_get, NULL},
    {"PATCH", "devices/:", ROLE_ADMIN, api_device_patch, NULL},
    {"DELETE", "devices/:", ROLE_ADMIN, api_device_delete, NULL},
    {"GET", "keys", ROLE_VIEWER, api_keys_list, Q_PAGE},
    {"POST", "keys", ROLE_ADMIN, api_key_create, NULL},
    {"DELETE", "keys/:", ROLE_ADMIN, api_key_delete, NULL},
    {"GET", "whoami", ROLE_VIEWER, api_whoami, NULL},
    /* webhooks and the audit log */
    {"GET", "webhooks", ROLE_ADMIN, api_webhooks_list, Q_PAGE},
    {"POST", "webhooks", ROLE_ADMIN, api_webhook_create, NULL},
    {"GET", "webhooks/:", ROLE_ADMIN, api_webhook_get, NULL},
    {"PATCH", "webhooks/:", ROLE_ADMIN, api_webhook_patch, NULL},
    {"DELETE", "webhooks/:", ROLE_ADMIN, api_webhook_delete, NULL},
    {"GET", "webhooks/:/deliveries", ROLE_ADMIN, api_webhook_deliveries, Q_PAGE},
    {"GET", "audit", ROLE_ADMIN, api_audit_list, Q_PAGE " user target since until"},
    /* artifacts (an upload's body is read before: api_upload_begin) */
    {"GET", "artifacts", ROLE_VIEWER, api_artifacts_list, Q_LIST " name"},
    {"POST", "artifacts", ROLE_ADMIN, api_artifact_upload, "name"},
    {"GET", "artifacts/:", ROLE_VIEWER, api_artifact_get, NULL},
    {"DELETE", "artifacts/:", ROLE_ADMIN, api_artifact_delete, NULL},
    {"GET", "artifacts/:/content", ROLE_VIEWER, api_artifact_content, NULL},
};

#define API_N_ROUTES (sizeof(api_routes) / sizeof(api_routes[0]))

/* Paths served without an api key (min_role unused): never counted by, nor refused by, the
 * throttle of unknown keys. */
static const struct api_route api_open_routes[] = {
    {"GET", "health", ROLE_VIEWER, api_health, NULL},
    {"GET", "openapi.json", ROLE_VIEWER, api_openapi, NULL},
};

#define API_N_OPEN_ROUTES (sizeof(api_open_routes) / sizeof(api_open_routes[0]))

/* Splits path (after the prefix) into segments in place; false when too many or empty. */
bool api_split(char *path, const char **seg, int *nseg)
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

bool api_route_is_open(const struct api_req *req)
{
	return api_path_in(api_open_routes, API_N_OPEN_ROUTES, req);
}

void api_route_dispatch(bool open, struct api_req *req, struct api_resp *r, char *allow,
			size_t allow_len)
{
	if (open)
		api_dispatch(api_open_routes, API_N_OPEN_ROUTES, req, r, allow, allow_len);
	else
		api_dispatch(api_routes, API_N_ROUTES, req, r, allow, allow_len);
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

void api_route_precheck(struct api_req *req, struct api_resp *resp)
{
	const struct api_route *route = api_route_of(api_routes, API_N_ROUTES, req);

	for (size_t i = 0; route && i < sizeof(api_prechecks) / sizeof(api_prechecks[0]); i++)
		if (api_prechecks[i].fn == route->fn) {
			api_prechecks[i].precheck(req, resp);
			req->prechecked = resp->status == 0;
		}
}
