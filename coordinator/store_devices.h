/*
 * store_devices.h - the store's device inventory, tags and presence (store_devices.c). See store.h.
 */
#ifndef RCS_STORE_DEVICES_H
#define RCS_STORE_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/*
 * A device of the inventory as the API shows it (docs/api.md, "Devices"): tags and
 * reported_tags are JSON text (arrays of strings), last_seen 0 when never seen,
 * agent_version NULL when no state told it. Free with store_device_rec_free.
 */
struct device_rec {
	char entity_ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *name;
	char *tags;
	char *reported_tags;
	bool online;
	int64_t last_seen;
	char *agent_version;
	int64_t created_at, update_at;
};
void store_device_rec_free(struct device_rec *r);

/* A page of devices (store_devices_list); free with store_device_list_free. */
struct store_device_list {
	struct store_page_info pg;
	struct device_rec *items;
	size_t n;
};
void store_device_list_free(struct store_device_list *l);

/* tags: JSON text, an array of strings (checked by the caller). */
enum rcs_err store_device_insert(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now);
enum rcs_err store_device_get(struct store *st, const char *client_root, const char *entity_ident,
			      struct device_rec *out);
/* name or tags (JSON text) NULL: unchanged. */
enum rcs_err store_device_update(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now);
enum rcs_err store_device_delete(struct store *st, const char *client_root,
				 const char *entity_ident);
/* online: -1 any, 0 offline, 1 online; tag NULL: any. */
enum rcs_err store_devices_list(struct store *st, const char *client_root, const char *tag,
				int online, const struct store_page *pg,
				struct store_device_list *out);

/* A device holding a tag, and whether it is online (store_devices_with_tag). */
struct device_presence {
	char entity_ident[UUID_STR_LEN];
	bool online;
	int64_t created_at; /* a tag send's release order (docs/api.md "Rollouts") */
};
struct store_device_presence_list {
	struct device_presence *items;
	size_t n;
};
void store_device_presence_list_free(struct store_device_presence_list *l);
/* Devices holding tag (operator or reported), in entity_ident order; more than max:
 * RCS_ERR_TOOBIG. */
enum rcs_err store_devices_with_tag(struct store *st, const char *client_root, const char *tag,
				    size_t max, struct store_device_presence_list *out);
/* Marks every device offline: a coordinator starting knows nothing of presence until the
 * broker's retained states (or Last Wills) tell it (docs/mqtt.md, "Device state"). */
enum rcs_err store_devices_presence_reset(struct store *st);
/* Whether the tenant has the device, and whether it is online. */
enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online);

/* Applies a device's state message; RCS_ERR_NOTFOUND when the tenant has no
 * such device. tags (JSON text, an array of strings; NULL: unchanged) are the device's
 * reported tags. *came_online: it was offline; *tags_changed (may be NULL): the tags differ
 * from those it reported last (the same tags again write no tag rows). */
enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				bool online, const char *tags, const char *agent_version,
				int64_t now, bool *came_online, bool *tags_changed);
/* Devices online now. */
enum rcs_err store_devices_online(struct store *st, long long *n);

#endif
