/*
 * api_inventory.c - devices (the inventory), API keys and groups.
 */
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "api.h"
#include "lifecycle.h"
#include "proto.h"
#include "render.h"
#include "store.h"
#include "store_devices.h"
#include "store_groups.h"
#include "store_keys.h"
#include "uuid.h"
#include "validate.h"

#define DEVICE_MAX_NAME 200

/* ---- devices ---- */

/* The ceilings of the answers a render writes: a device record (tags are bounded by
 * validate.h) and a page of them. */
#define DEVICE_ANSWER_MAX (1u << 20)
#define DEVICE_PAGE_MAX   (64u << 20)

/* The attribute=KEY:VALUE filters (docs/api.md "Devices"), repeatable, all of which must
 * match: at most STORE_DEVICE_ATTR_FILTERS into attrs (NULL-ended). */
static bool device_attr_filters(struct api_req *req, struct api_resp *r, const char **attrs)
{
	size_t n = api_query_all(req, "attribute", attrs, STORE_DEVICE_ATTR_FILTERS);

	if (n > STORE_DEVICE_ATTR_FILTERS) {
		api_error(r, 400, "invalid_parameter", "attribute",
			  "at most %d 'attribute' filters", STORE_DEVICE_ATTR_FILTERS);
		return false;
	}
	attrs[n] = NULL;
	for (size_t i = 0; i < n; i++) {
		const char *colon = strchr(attrs[i], ':');

		if (colon == NULL || !proto_attr_key_valid(attrs[i], (size_t)(colon - attrs[i])) ||
		    !proto_attr_value_valid(colon + 1, strlen(colon + 1))) {
			api_error(r, 400, "invalid_parameter", "attribute",
				  "'attribute' must be KEY:VALUE, a valid attribute key and value");
			return false;
		}
	}
	return true;
}

void api_devices_list(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	const char *tag = api_query(req, "tag"), *online = api_query(req, "online");
	const char *attrs[STORE_DEVICE_ATTR_FILTERS + 1] = {NULL};
	struct store_device_list list;
	struct render w;
	struct buf b;
	int on = -1;
	enum rcs_err err;

	if (!api_list(req, r, API_DEFAULT_PER_PAGE, "created_at update_at name", false, true, &pg))
		return;
	if (tag && !validate_tag(tag)) {
		api_error(r, 400, "invalid_parameter", "tag", "'tag' is not a valid tag");
		return;
	}
	if (online) {
		if (strcmp(online, "true") == 0) {
			on = 1;
		} else if (strcmp(online, "false") == 0) {
			on = 0;
		} else {
			api_error(r, 400, "invalid_parameter", "online",
				  "'online' must be true or false");
			return;
		}
	}
	if (!device_attr_filters(req, r, attrs))
		return;
	err = store_devices_list(req->app->st, req->auth.client_root, tag, on,
				 attrs[0] ? attrs : NULL, &pg, &list);
	if (err != RCS_OK) {
		api_store_error(r, err, "device");
		return;
	}
	buf_init(&b, DEVICE_PAGE_MAX);
	render_init(&w, &b);
	render_device_list(&w, &list);
	store_device_list_free(&list);
	api_reply_buf(r, 200, &b, render_end(&w));
}

/* Answers with the device's record as it is stored now. */
static void device_reply(struct api_req *req, struct api_resp *r, int status, const char *ident)
{
	struct device_rec dev;
	struct render w;
	struct buf b;
	enum rcs_err err;

	err = store_device_get(req->app->st, req->auth.client_root, ident, &dev);
	if (err != RCS_OK) {
		api_store_error(r, err, "device");
		return;
	}
	buf_init(&b, DEVICE_ANSWER_MAX);
	render_init(&w, &b);
	render_device(&w, &dev);
	store_device_rec_free(&dev);
	api_reply_buf(r, status, &b, render_end(&w));
}

/* Reads name and tags (each optional unless required); *tags gets the tags as JSON text
 * (valid while body is), NULL when absent. */
static bool device_read(struct api_resp *r, json_object *body, bool required, const char **name,
			const char **tags)
{
	static const char *const fields[] = {"name", "tags", NULL};
	struct jsonu_err e;
	json_object *arr = NULL;
	bool present;

	static const char *const platform[] = {
	    "entity_ident",  "client_root", "online",    "last_seen",  "agent_version",
	    "reported_tags", "created_at",  "update_at", "attributes", NULL};

	for (size_t i = 0; platform[i]; i++) {
		if (json_object_object_get_ex(body, platform[i], NULL)) {
			api_error(r, 400, "validation_failed", platform[i],
				  "'%s' is assigned by the platform and cannot be set",
				  platform[i]);
			return false;
		}
	}
	if (jsonu_check_keys(body, fields, &e) != RCS_OK ||
	    jsonu_get_string(body, "name", required, DEVICE_MAX_NAME, name, &present, &e) !=
		RCS_OK ||
	    jsonu_get_string_array(body, "tags", false, VALIDATE_MAX_TAGS, 64, &arr, NULL, &e) !=
		RCS_OK ||
	    validate_tags(arr, "tags", &e) != RCS_OK) {
		api_invalid(r, &e);
		return false;
	}
	if (present && (*name)[0] == '\0') {
		api_error(r, 400, "validation_failed", "name", "'name' must not be empty");
		return false;
	}
	*tags = arr ? jsonu_dump(arr, NULL) : NULL;
	return true;
}

/* Stores a new or changed device and, in the same transaction, has it join the continuous
 * tag sends its tags now call for (docs/api.md "Rollouts"). */
static enum rcs_err device_write(struct api_req *req, const char *ident, const char *name,
				 const char *tags, bool is_new)
{
	enum rcs_err end, err = store_tx_begin(req->app->st);

	if (err != RCS_OK)
		return err;
	if (is_new)
		err = store_device_insert(req->app->st, req->auth.client_root, ident, name, tags,
					  req->now);
	else
		err = store_device_update(req->app->st, req->auth.client_root, ident, name, tags,
					  req->now);
	if (err == RCS_OK && tags != NULL)
		err =
		    lifecycle_device_changed(req->app->lc, req->auth.client_root, ident, req->now);
	end = store_tx_end(req->app->st, err == RCS_OK);
	return err != RCS_OK ? err : end; /* a full disk at the commit: RCS_ERR_FULL, a 503 */
}

void api_device_create(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	const char *name = NULL, *tags = NULL;
	char ident[UUID_STR_LEN];
	enum rcs_err err;

	if (!api_body_object(req, r, false, &body) || !device_read(r, body, true, &name, &tags))
		goto out;
	err = uuid_v7(ident);
	if (err == RCS_OK)
		err = device_write(req, ident, name, tags ? tags : "[]", true);
	if (err != RCS_OK)
		api_store_error(r, err, "device");
	else {
		snprintf(req->target, sizeof(req->target), "%s", ident); /* audit */
		device_reply(req, r, 201, ident);
	}
out:
	json_object_put(body);
}

void api_device_get(struct api_req *req, struct api_resp *r)
{
	if (uuid_valid(req->seg[1]))
		device_reply(req, r, 200, req->seg[1]);
	else
		api_store_error(r, RCS_ERR_NOTFOUND, "device");
}

void api_device_patch(struct api_req *req, struct api_resp *r)
{
	json_object *body = NULL;
	const char *name = NULL, *tags = NULL;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (!uuid_valid(req->seg[1])) {
		api_store_error(r, err, "device");
		return;
	}
	if (!api_body_object(req, r, false, &body) || !device_read(r, body, false, &name, &tags))
		goto out;
	err = device_write(req, req->seg[1], name, tags, false);
	if (err != RCS_OK)
		api_store_error(r, err, "device");
	else
		device_reply(req, r, 200, req->seg[1]);
out:
	json_object_put(body);
}

void api_device_delete(struct api_req *req, struct api_resp *r)
{
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (uuid_valid(req->seg[1]))
		err = store_device_delete(req->app->st, req->auth.client_root, req->seg[1]);
	if (err != RCS_OK)
		api_store_error(r, err, "device");
	else
		api_reply(r, 204, NULL);
}

/* ---- API keys ---- */

/* the ceiling of a key answer: a record, or a page of 500 */
#define API_KEY_ANSWER_MAX (64 * 1024 * 1024)

void api_keys_list(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct store_key_list page;
	struct render w;
	struct buf b;
	enum rcs_err err;

	if (!api_page(req, r, API_DEFAULT_PER_PAGE, &pg))
		return;
	err = store_keys_list(req->app->st, req->auth.client_root, &pg, &page);
	if (err != RCS_OK) {
		api_store_error(r, err, "key");
		return;
	}
	buf_init(&b, API_KEY_ANSWER_MAX);
	render_init(&w, &b);
	render_api_key_list(&w, &page);
	api_reply_buf(r, 200, &b, render_end(&w));
	store_key_list_free(&page);
}

/* GET /whoami: the caller's own key, so that a client (the dashboard, docs/dashboard.md)
 * shows only what the key's role may do (docs/api.md "API keys"). */
void api_whoami(struct api_req *req, struct api_resp *r)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "key_ident", json_object_new_string(req->auth.key_ident));
	json_object_object_add(o, "user", json_object_new_string(req->auth.user));
	json_object_object_add(o, "role", json_object_new_string(role_name(req->auth.role)));
	json_object_object_add(o, "client_root", json_object_new_string(req->auth.client_root));
	api_reply(r, 200, o);
}

void api_key_create(struct api_req *req, struct api_resp *r)
{
	static const char *const fields[] = {"user", "role", NULL};
	json_object *body = NULL;
	struct key_rec key;
	struct render w;
	struct buf b;
	const char *user = NULL, *role_s = NULL;
	struct jsonu_err e;
	enum role role;
	char secret[64], ident[UUID_STR_LEN];
	enum rcs_err err;

	memset(&key, 0, sizeof(key));
	secret[0] = '\0';
	if (!api_body_object(req, r, false, &body))
		goto out;
	if (jsonu_check_keys(body, fields, &e) != RCS_OK ||
	    jsonu_get_string(body, "user", true, 100, &user, NULL, &e) != RCS_OK ||
	    jsonu_get_string(body, "role", true, 16, &role_s, NULL, &e) != RCS_OK) {
		api_invalid(r, &e);
		goto out;
	}
	if (!vars_token_valid(user, 100, "-.@")) {
		api_error(r, 400, "validation_failed", "user",
			  "'user' must be 1-100 letters, digits or any of _-.@");
		goto out;
	}
	if (!role_parse(role_s, &role)) {
		api_error(r, 400, "validation_failed", "role",
			  "'role' must be viewer, operator or admin");
		goto out;
	}
	err =
	    auth_key_new(req->app->st, req->auth.client_root, user, role, req->now, secret, ident);
	if (err == RCS_OK)
		err = store_key_get(req->app->st, req->auth.client_root, ident, &key);
	if (err != RCS_OK) {
		api_store_error(r, err, "key");
		goto out;
	}
	/* audit: the ident, never the key */
	snprintf(req->target, sizeof(req->target), "%s", ident);
	/* the only time the key itself is shown */
	buf_init(&b, API_KEY_ANSWER_MAX);
	render_init(&w, &b);
	render_api_key_new(&w, &key, secret);
	api_reply_buf(r, 201, &b, render_end(&w));
out:
	explicit_bzero(secret, sizeof(secret));
	store_key_rec_free(&key);
	json_object_put(body);
}

void api_key_delete(struct api_req *req, struct api_resp *r)
{
	enum rcs_err err = RCS_ERR_NOTFOUND;

	if (uuid_valid(req->seg[1]))
		err = store_key_revoke(req->app->st, req->auth.client_root, req->seg[1], req->now);
	if (err != RCS_OK)
		api_store_error(r, err, "key");
	else
		api_reply(r, 204, NULL);
}

/* ---- groups ---- */

#define API_GROUP_TEXT_MAX ((size_t)64 << 20) /* bytes of a group, of a page of groups */

/* The filters of GET /groups besides name (docs/api.md "Bulk sends and groups"). */
static bool groups_filter(struct api_req *req, struct api_resp *r, struct store_group_filter *f)
{
	enum group_status gs;
	char names[80];
	size_t len = 0;

	f->status = api_query(req, "status");
	f->task_ident = api_query(req, "task_ident");
	f->tag = api_query(req, "tag");
	if (f->status && !group_status_parse(f->status, &gs)) {
		names[0] = '\0';
		for (int i = GROUP_RUNNING; i <= GROUP_CANCELLED && len < sizeof(names); i++)
			len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
						i > GROUP_RUNNING ? ", " : "",
						group_status_name((enum group_status)i));
		api_error(r, 400, "invalid_parameter", "status",
			  "'status' must be one of: %s (not '%.64s')", names, f->status);
		return false;
	}
	if (f->task_ident && !uuid_valid(f->task_ident)) {
		api_error(r, 400, "invalid_parameter", "task_ident", "'task_ident' must be a UUID");
		return false;
	}
	if (f->tag && !validate_tag(f->tag)) {
		api_error(r, 400, "invalid_parameter", "tag", "'tag' is not a valid tag");
		return false;
	}
	return true;
}

void api_groups_list(struct api_req *req, struct api_resp *r)
{
	struct store_page pg;
	struct store_group_filter f;
	struct store_group_list list;
	struct render w;
	struct buf page;
	enum rcs_err err;

	/* newest first by default */
	if (!api_list(req, r, API_DEFAULT_PER_PAGE, "created_at", true, true, &pg) ||
	    !groups_filter(req, r, &f))
		return;
	err =
	    store_groups_list(req->app->st, req->auth.client_root,
			      req->auth.role == ROLE_ADMIN ? NULL : req->auth.user, &f, &pg, &list);
	if (err != RCS_OK) {
		api_store_error(r, err, "group");
		return;
	}
	buf_init(&page, API_GROUP_TEXT_MAX);
	render_init(&w, &page);
	render_group_page(&w, &list);
	api_reply_buf(r, 200, &page, render_end(&w));
	store_group_list_free(&list);
}

void api_group_get(struct api_req *req, struct api_resp *r)
{
	struct group_rec g;
	struct render w;
	struct buf text;
	enum rcs_err err = RCS_ERR_NOTFOUND;

	memset(&g, 0, sizeof(g));
	if (uuid_valid(req->seg[1]))
		err = store_group_get(req->app->st, req->auth.client_root, req->seg[1],
				      req->auth.role == ROLE_ADMIN ? NULL : req->auth.user, &g);
	if (err != RCS_OK) {
		api_store_error(r, err, "group");
		return;
	}
	buf_init(&text, API_GROUP_TEXT_MAX);
	render_init(&w, &text);
	render_group(&w, &g);
	api_reply_buf(r, 200, &text, render_end(&w));
	store_group_rec_free(&g);
}
