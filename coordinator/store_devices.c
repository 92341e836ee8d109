/*
 * store_devices.c - the store's the device inventory, tags and presence. See store.h; store_int.h
 * for what the store's files share.
 */
#include "store_int.h"

#include <stdio.h>

#include "jsonu.h"

/* ---- devices ---- */

#define DEVICE_COLS                                                                                \
	"entity_ident, client_root, name, tags, reported_tags, online, last_seen, agent_version,"  \
	" created_at, update_at"

static const struct store_col_map device_cols[] = {
    {"entity_ident", STORE_COL_STR},
    {"client_root", STORE_COL_STR},
    {"name", STORE_COL_STR},
    {"tags", STORE_COL_JSON},
    {"reported_tags", STORE_COL_JSON},
    {"online", STORE_COL_BOOL},
    {"last_seen", STORE_COL_INT},
    {"agent_version", STORE_COL_STR},
    {"created_at", STORE_COL_INT},
    {"update_at", STORE_COL_INT},
    {NULL, STORE_COL_STR},
};

static json_object *row_device(sqlite3_stmt *s)
{
	return store_row_map(s, device_cols);
}

static enum rcs_err store_device_tags_set(struct store *st, const char *client_root,
					  const char *entity_ident, json_object *tags, int reported)
{
	char rep[4];
	enum rcs_err err;

	snprintf(rep, sizeof(rep), "%d", reported);
	err = store_write(st, "DELETE FROM device_tags WHERE entity_ident = ? AND reported = ?",
			  NULL, 2, entity_ident, rep);
	for (size_t i = 0; err == RCS_OK && i < json_object_array_length(tags); i++) {
		const char *tag = json_object_get_string(json_object_array_get_idx(tags, i));
		err =
		    store_write(st,
				"INSERT OR IGNORE INTO device_tags(client_root, tag, entity_ident,"
				" reported) VALUES(?, ?, ?, ?)",
				NULL, 4, client_root, tag, entity_ident, rep);
	}
	return err;
}

enum rcs_err store_device_insert(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, json_object *tags,
				 int64_t now)
{
	char ts[32];
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "INSERT INTO devices(entity_ident, client_root, name, tags, created_at,"
			  " update_at) VALUES(?, ?, ?, ?, ?, ?)",
			  NULL, 6, entity_ident, client_root, name, jsonu_dump(tags, NULL), ts, ts);
	if (err == RCS_OK)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_devices_presence_reset(struct store *st)
{
	enum rcs_err err = store_sp_begin(st);

	if (err != RCS_OK)
		return err;
	err = store_write(st, "UPDATE devices SET online = 0 WHERE online <> 0", NULL, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_device_get(struct store *st, const char *client_root, const char *entity_ident,
			      json_object **out)
{
	return store_get_row(st,
			     "SELECT " DEVICE_COLS " FROM devices WHERE entity_ident = ? AND"
			     " client_root = ?",
			     entity_ident, client_root, NULL, row_device, out);
}

enum rcs_err store_device_update(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, json_object *tags,
				 int64_t now)
{
	char ts[32];
	int changes = 0;
	enum rcs_err err;

	snprintf(ts, sizeof(ts), "%lld", (long long)now);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "UPDATE devices SET name = coalesce(?, name), tags = coalesce(?, tags),"
			  " update_at = ? WHERE entity_ident = ? AND client_root = ?",
			  &changes, 5, name, tags ? jsonu_dump(tags, NULL) : NULL, ts, entity_ident,
			  client_root);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK && tags)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
	return store_sp_end(st, err);
}

enum rcs_err store_device_delete(struct store *st, const char *client_root,
				 const char *entity_ident)
{
	int changes = 0;
	enum rcs_err err =
	    store_write(st, "DELETE FROM devices WHERE entity_ident = ? AND client_root = ?",
			&changes, 2, entity_ident, client_root);

	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

enum rcs_err store_devices_list(struct store *st, const char *client_root, const char *tag,
				int online, const struct store_page *pg, json_object **out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;

	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	if (tag)
		store_qb_add(
		    &q,
		    "entity_ident IN (SELECT entity_ident FROM device_tags WHERE client_root ="
		    " devices.client_root AND tag = ?)",
		    tag);
	if (online == 0)
		store_qb_add(&q, "online = 0", NULL);
	else if (online == 1)
		store_qb_add(&q, "online = 1", NULL);
	store_qb_list_opts(&q, pg, "", "entity_ident", &o);
	return store_list(st, DEVICE_COLS, "devices", &q, o.order, pg, row_device, out);
}

static const struct store_col_map presence_cols[] = {
    {"entity_ident", STORE_COL_STR},
    {"online", STORE_COL_BOOL},
    {NULL, STORE_COL_STR},
};

static json_object *row_presence(sqlite3_stmt *s)
{
	return store_row_map(s, presence_cols);
}

enum rcs_err store_devices_with_tag(struct store *st, const char *client_root, const char *tag,
				    size_t max, json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT d.entity_ident, d.online FROM devices d WHERE d.entity_ident IN"
			    " (SELECT entity_ident FROM device_tags WHERE client_root = ?1 AND"
			    " tag = ?2) AND d.client_root = ?1 ORDER BY d.entity_ident",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, client_root);
	store_bind_text(s, 2, tag);
	err = store_rows(st, s, row_presence, max, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online)
{
	json_object *o = NULL;
	enum rcs_err err = store_get_row(st,
					 "SELECT entity_ident, online FROM devices WHERE"
					 " entity_ident = ? AND client_root = ?",
					 entity_ident, client_root, NULL, row_presence, &o);

	if (err == RCS_OK)
		*online = json_object_get_boolean(json_object_object_get(o, "online"));
	json_object_put(o);
	return err;
}

enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				bool online, json_object *tags, const char *agent_version,
				int64_t now, bool *came_online)
{
	json_object *dev = NULL, *was = NULL;
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*came_online = false;
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_device_get(st, client_root, entity_ident, &dev);
	if (err != RCS_OK)
		goto out;
	json_object_object_get_ex(dev, "online", &was);
	*came_online = online && !json_object_get_boolean(was);
	err = store_prepare(st,
			    "UPDATE devices SET online = ?1, last_seen = ?2,"
			    " agent_version = coalesce(?3, agent_version),"
			    " reported_tags = coalesce(?4, reported_tags)"
			    " WHERE entity_ident = ?5 AND client_root = ?6",
			    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int(s, 1, online);
	sqlite3_bind_int64(s, 2, now);
	store_bind_text(s, 3, agent_version);
	store_bind_json(s, 4, tags, NULL);
	store_bind_text(s, 5, entity_ident);
	store_bind_text(s, 6, client_root);
	err = store_rc(st->db, sqlite3_step(s), "device state");
	if (err == RCS_OK && tags)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 1);
out:
	store_release(st, s);
	json_object_put(dev);
	return store_sp_end(st, err);
}
