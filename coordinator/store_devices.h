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
 * agent_version NULL when no state told it, attributes JSON text (an object of strings)
 * or NULL when no state brought any. Free with store_device_rec_free.
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
	char *attributes;
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
/* online: -1 any, 0 offline, 1 online; tag NULL: any; attributes NULL or a NULL-ended
 * list of "KEY:VALUE", each of which the device's attributes must hold (at most
 * STORE_DEVICE_ATTR_FILTERS). */
#define STORE_DEVICE_ATTR_FILTERS 4
enum rcs_err store_devices_list(struct store *st, const char *client_root, const char *tag,
				int online, const char *const *attributes,
				const struct store_page *pg, struct store_device_list *out);

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
/* The presence of n devices of the tenant in one read (a list send's; idents sorted by
 * strcmp, unique): found[i] false for a device the tenant does not have, online[i] its
 * presence. */
enum rcs_err store_devices_presence_of(struct store *st, const char *client_root,
				       const char *const *idents, size_t n, bool *found,
				       bool *online);
/* Whether the tenant has the device, and whether it is online. */
enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online);

/* A device's state message as the store applies it (docs/mqtt.md, "State"). */
struct store_state_in {
	bool online;
	const char *tags;          /* JSON text, an array of strings; NULL: unchanged */
	const char *agent_version; /* NULL: unchanged */
	int64_t ts;                /* the message's ts: its connection's start; 0: none */
	const char *attributes;    /* JSON text, an object of strings; NULL: unchanged */
};

/* What applying it found and did. */
struct store_state_out {
	bool was_online;   /* it was online before */
	bool came_online;  /* it was offline, and the state says online */
	bool tags_changed; /* the tags differ from those it reported last (the same tags
			    * again write no tag rows) */
	bool stale;        /* an offline state older than the state applied last: a Last
			    * Will or a retained copy of an earlier connection, not applied */
	int64_t last_ts;   /* the ts of the state applied last (0: none) */
};

/* Applies a device's state message at now (the coordinator's clock: last_seen);
 * RCS_ERR_NOTFOUND when the tenant has no such device. An online state is always applied
 * (a device whose clock went back must not be kept offline); an offline one only when its
 * ts is not older than the last state's, or either has none (older agents). */
enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				const struct store_state_in *in, int64_t now,
				struct store_state_out *out);
/* Devices online now. */
enum rcs_err store_devices_online(struct store *st, long long *n);

#endif
