/*
 * store_devices.c - the store's device inventory, tags and presence. See store_devices.h;
 * store_int.h for what the store's files share.
 */
#include "store_devices.h"

#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jsonu.h"
#include "store_int.h"

/* ---- devices ---- */

#define DEVICE_COLS                                                                                \
	"entity_ident, client_root, name, tags, reported_tags, online, last_seen, agent_version,"  \
	" created_at, update_at, attributes"

void store_device_rec_free(struct device_rec *r)
{
	if (r == NULL)
		return;
	free(r->name);
	free(r->tags);
	free(r->reported_tags);
	free(r->agent_version);
	free(r->attributes);
	memset(r, 0, sizeof(*r));
}

void store_device_list_free(struct store_device_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->n; i++)
		store_device_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

void store_device_presence_list_free(struct store_device_presence_list *l)
{
	if (l == NULL)
		return;
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* The row of DEVICE_COLS as a record (freed again on an error). */
static enum rcs_err device_read(struct store_stmt *s, struct device_rec *r)
{
	enum rcs_err err = RCS_OK;

	memset(r, 0, sizeof(*r));
	store_val_copy(s, 0, r->entity_ident, sizeof(r->entity_ident));
	store_val_copy(s, 1, r->client_root, sizeof(r->client_root));
	r->name = store_val_dup(s, 2, &err);
	r->tags = store_val_dup(s, 3, &err);
	r->reported_tags = store_val_dup(s, 4, &err);
	r->online = store_val_bool(s, 5);
	r->last_seen = store_val_null(s, 6) ? 0 : store_val_int(s, 6);
	r->agent_version = store_val_dup(s, 7, &err);
	r->created_at = store_val_int(s, 8);
	r->update_at = store_val_int(s, 9);
	r->attributes = store_val_dup(s, 10, &err);
	if (err != RCS_OK)
		store_device_rec_free(r);
	return err;
}

static enum rcs_err device_read_one(struct store_stmt *s, void *arg)
{
	return device_read(s, arg);
}

/*
 * Sets the device's tags of one kind (reported 0: the operator's, 1: the device's) from
 * tags, JSON text: an array of strings. The caller holds the lock.
 */
static enum rcs_err store_device_tags_set(struct store *st, const char *client_root,
					  const char *entity_ident, const char *tags, int reported)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err =
	    store_stmt(st, "DELETE FROM device_tags WHERE entity_ident = ?1 AND reported = ?2", &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, entity_ident);
	store_arg_int(s, 2, reported);
	err = store_done(st, s, "device tags");
	store_stmt_done(st, s);
	s = NULL;
	if (err != RCS_OK)
		goto out;
	err = store_stmt(
	    st,
	    STORE_SQL(st,
		      "INSERT OR IGNORE INTO device_tags(client_root, tag, entity_ident, reported)"
		      " SELECT ?1, value, ?2, ?3 FROM json_each(?4) WHERE type = 'text'",
		      "INSERT INTO device_tags(client_root, tag, entity_ident, reported)"
		      " SELECT ?1, e #>> '{}', ?2, ?3 FROM json_array_elements(CAST(?4 AS json)) e"
		      " WHERE json_typeof(e) = 'string' ON CONFLICT DO NOTHING"),
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, entity_ident);
	store_arg_int(s, 3, reported);
	store_arg_text(s, 4, tags);
	err = store_done(st, s, "device tags");
out:
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_device_insert(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_stmt(st,
			 "INSERT INTO devices(entity_ident, client_root, name, tags, created_at,"
			 " update_at) VALUES(?1, ?2, ?3, ?4, ?5, ?5)",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, entity_ident);
	store_arg_text(s, 2, client_root);
	store_arg_text(s, 3, name);
	store_arg_text(s, 4, tags);
	store_arg_int(s, 5, now);
	err = store_done(st, s, "device insert");
	if (err == RCS_OK)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
out:
	store_stmt_done(st, s);
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
			      struct device_rec *out)
{
	memset(out, 0, sizeof(*out));
	return store_get_one(st,
			     "SELECT " DEVICE_COLS " FROM devices WHERE entity_ident = ? AND"
			     " client_root = ?",
			     entity_ident, client_root, NULL, device_read_one, out);
}

enum rcs_err store_device_update(struct store *st, const char *client_root,
				 const char *entity_ident, const char *name, const char *tags,
				 int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_stmt(st,
			 "UPDATE devices SET name = coalesce(?1, name), tags = coalesce(?2, tags),"
			 " update_at = ?3 WHERE entity_ident = ?4 AND client_root = ?5",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, name);
	store_arg_text(s, 2, tags);
	store_arg_int(s, 3, now);
	store_arg_text(s, 4, entity_ident);
	store_arg_text(s, 5, client_root);
	err = store_done(st, s, "device update");
	if (err == RCS_OK && store_changes(st) == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK && tags)
		err = store_device_tags_set(st, client_root, entity_ident, tags, 0);
out:
	store_stmt_done(st, s);
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
				int online, const char *const *attributes,
				const struct store_page *pg, struct store_device_list *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
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
	/* "KEY:VALUE": keys hold no ':' (docs/api.md "Devices"), so the pair names one
	 * attribute; each one given must match */
	for (size_t i = 0; attributes && attributes[i]; i++)
		store_qb_add(
		    &q,
		    STORE_SQL(st,
			      "EXISTS (SELECT 1 FROM json_each(devices.attributes) a WHERE"
			      " a.type = 'text' AND a.key || ':' || a.value = ?)",
			      "EXISTS (SELECT 1 FROM json_each_text(CAST(devices.attributes AS"
			      " json)) a WHERE a.key || ':' || a.value = ?)"),
		    attributes[i]);
	store_qb_list_opts(&q, pg, "", "entity_ident", &o);
	err = store_page_recs(st, DEVICE_COLS, "devices", &q, o.order, pg, &out->pg,
			      sizeof(*out->items), device_read_one, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_device_list_free(out);
	return err;
}

enum rcs_err store_devices_with_tag(struct store *st, const char *client_root, const char *tag,
				    size_t max, struct store_device_presence_list *out)
{
	struct store_stmt *s = NULL;
	size_t cap = 0;
	bool row = false;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_stmt(st,
			 "SELECT d.entity_ident, d.online, d.created_at FROM devices d WHERE"
			 " d.entity_ident IN"
			 " (SELECT entity_ident FROM device_tags WHERE client_root = ?1 AND"
			 " tag = ?2) AND d.client_root = ?1 ORDER BY d.entity_ident",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, tag);
	while ((err = store_next(st, s, "devices with tag", &row)) == RCS_OK && row) {
		if (out->n >= max) {
			err = RCS_ERR_TOOBIG;
			break;
		}
		if (out->n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct device_presence *p;

			if (ncap > max)
				ncap = max;
			p = realloc(out->items, ncap * sizeof(*p));
			if (p == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			out->items = p;
			cap = ncap;
		}
		store_val_copy(s, 0, out->items[out->n].entity_ident,
			       sizeof(out->items[out->n].entity_ident));
		out->items[out->n].online = store_val_bool(s, 1);
		out->items[out->n].created_at = store_val_int(s, 2);
		out->n++;
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_device_presence_list_free(out);
	return err;
}

static enum rcs_err presence_read(struct store_stmt *s, void *arg)
{
	*(bool *)arg = store_val_bool(s, 0);
	return RCS_OK;
}

/* The idents as a JSON array of strings (NULL: out of memory). */
static json_object *devices_json_array(const char *const *idents, size_t n)
{
	json_object *a = json_object_new_array_ext((int)n);

	for (size_t i = 0; a != NULL && i < n; i++) {
		json_object *v = json_object_new_string(idents[i]);

		if (v == NULL || json_object_array_add(a, v) != 0) {
			json_object_put(v);
			json_object_put(a);
			a = NULL;
		}
	}
	return a;
}

static int devices_ident_cmp(const void *key, const void *elem)
{
	return strcmp(key, *(const char *const *)elem);
}

enum rcs_err store_devices_presence_of(struct store *st, const char *client_root,
				       const char *const *idents, size_t n, bool *found,
				       bool *online)
{
	struct store_stmt *s = NULL;
	json_object *list = devices_json_array(idents, n);
	bool row = false;
	enum rcs_err err = list ? RCS_OK : RCS_ERR_NOMEM;

	memset(found, 0, n * sizeof(*found));
	memset(online, 0, n * sizeof(*online));
	store_lock(st);
	if (err == RCS_OK)
		err = store_stmt(
		    st,
		    STORE_SQL(st,
			      "SELECT entity_ident, online FROM devices WHERE client_root = ?1 AND"
			      " entity_ident IN (SELECT value FROM json_each(?2))",
			      "SELECT entity_ident, online FROM devices WHERE client_root = ?1 AND"
			      " entity_ident = ANY(ARRAY(SELECT json_array_elements_text(CAST(?2 AS"
			      " json))))"),
		    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, jsonu_dump(list, NULL));
	while ((err = store_next(st, s, "devices' presence", &row)) == RCS_OK && row) {
		const char *const *at =
		    bsearch(store_val_text(s, 0), idents, n, sizeof(*idents), devices_ident_cmp);

		if (at != NULL) {
			found[at - idents] = true;
			online[at - idents] = store_val_bool(s, 1);
		}
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	json_object_put(list);
	return err;
}

enum rcs_err store_device_presence(struct store *st, const char *client_root,
				   const char *entity_ident, bool *online)
{
	return store_get_one(
	    st, "SELECT online FROM devices WHERE entity_ident = ? AND client_root = ?",
	    entity_ident, client_root, NULL, presence_read, online);
}

/* What a state message finds of its device: whether it was online, whether the tags it
 * reports (NULL: none) differ from those stored, and the ts of the state applied last. */
struct device_was {
	const char *tags;
	bool online, tags_differ;
	int64_t ts;
};

static enum rcs_err device_was_read(struct store_stmt *s, void *arg)
{
	struct device_was *w = arg;
	const char *stored = store_val_text(s, 1);

	w->online = store_val_bool(s, 0);
	w->tags_differ = w->tags != NULL && (stored == NULL || strcmp(stored, w->tags) != 0);
	w->ts = store_val_null(s, 2) ? 0 : store_val_int(s, 2);
	return RCS_OK;
}

enum rcs_err store_device_state(struct store *st, const char *client_root, const char *entity_ident,
				const struct store_state_in *in, int64_t now,
				struct store_state_out *out)
{
	struct store_stmt *s = NULL;
	struct device_was was = {.tags = in->tags};
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_get_one(st,
			    "SELECT online, reported_tags, state_ts FROM devices WHERE"
			    " entity_ident = ? AND client_root = ?",
			    entity_ident, client_root, NULL, device_was_read, &was);
	if (err != RCS_OK)
		goto out;
	out->last_ts = was.ts;
	out->was_online = was.online;
	if (!in->online && in->ts > 0 && was.ts > 0 && in->ts < was.ts) {
		out->stale = true;
		goto out;
	}
	out->came_online = in->online && !was.online;
	out->tags_changed = was.tags_differ;
	err = store_stmt(st,
			 "UPDATE devices SET online = ?1, last_seen = ?2,"
			 " agent_version = coalesce(?3, agent_version),"
			 " reported_tags = coalesce(?4, reported_tags),"
			 " state_ts = coalesce(?7, state_ts),"
			 " attributes = coalesce(?8, attributes)"
			 " WHERE entity_ident = ?5 AND client_root = ?6",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, in->online);
	store_arg_int(s, 2, now);
	store_arg_text(s, 3, in->agent_version);
	store_arg_text(s, 4, in->tags);
	store_arg_text(s, 5, entity_ident);
	store_arg_text(s, 6, client_root);
	store_arg_opt_int(s, 7, in->ts);
	store_arg_text(s, 8, in->attributes);
	err = store_done(st, s, "device state");
	/* the tag rows follow the reported tags; the same tags again leave them as they are */
	if (err == RCS_OK && was.tags_differ)
		err = store_device_tags_set(st, client_root, entity_ident, in->tags, 1);
out:
	store_stmt_done(st, s);
	return store_sp_end(st, err);
}

/* Devices online now (the metrics). */
enum rcs_err store_devices_online(struct store *st, long long *n)
{
	*n = 0;
	return store_get_one(st, "SELECT count(*) FROM devices WHERE online = 1", NULL, NULL, NULL,
			     store_row_int, n);
}
