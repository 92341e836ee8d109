/*
 * store_tasks.c - the store's scripts and tasks (with their versions). See store.h; store_int.h for
 * what the store's files share.
 */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonu.h"
#include "manifest.h"

/* ---- scripts ---- */

static enum rcs_err store_blob_put(struct store *st, const char *sha, const char *src, size_t len)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	err = store_prepare(st, "INSERT OR IGNORE INTO script_blobs(sha256, source) VALUES(?, ?)",
			    &s);
	if (err != RCS_OK)
		return err;
	sqlite3_bind_text(s, 1, sha, -1, SQLITE_STATIC);
	sqlite3_bind_blob64(s, 2, src, len, SQLITE_STATIC);
	err = store_rc(st->db, sqlite3_step(s), "blob put");
	store_release(st, s);
	return err;
}

enum rcs_err store_script_put(struct store *st, const char *client_root, const char *name,
			      const char *src, size_t len, int64_t now, bool *created)
{
	char sha[SHA256_HEX_LEN];
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	sha256_hex(src, len, sha);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, sha, src, len);
	if (err != RCS_OK)
		goto out;
	if (created) {
		json_object *o = NULL;
		*created =
		    store_get_row(st, "SELECT 1 FROM scripts WHERE client_root = ? AND name = ?",
				  client_root, name, NULL, store_row_exists, &o) == RCS_ERR_NOTFOUND;
		json_object_put(o);
	}
	err = store_prepare(st,
			    "INSERT INTO scripts(client_root, name, sha256, size, updated_at)"
			    " VALUES(?, ?, ?, ?, ?) ON CONFLICT(client_root, name) DO UPDATE SET"
			    " sha256 = excluded.sha256, size = excluded.size,"
			    " updated_at = CASE WHEN sha256 = excluded.sha256 THEN updated_at"
			    " ELSE excluded.updated_at END",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, client_root);
	store_bind_text(s, 2, name);
	store_bind_text(s, 3, sha);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)len);
	sqlite3_bind_int64(s, 5, now);
	err = store_rc(st->db, sqlite3_step(s), "script put");
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

static json_object *row_script(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "name", store_col_str(s, 0));
	json_object_object_add(o, "sha256", store_col_str(s, 1));
	json_object_object_add(o, "size", store_col_int(s, 2));
	json_object_object_add(o, "stock",
			       json_object_new_boolean(store_col_text(s, 3)[0] == '\0'));
	json_object_object_add(o, "updated_at", store_col_int(s, 4));
	if (sqlite3_column_count(s) > 5)
		json_object_object_add(o, "source", store_col_str(s, 5));
	return o;
}

enum rcs_err store_script_get(struct store *st, const char *client_root, const char *name,
			      bool with_source, json_object **out)
{
	const char *sql =
	    with_source
		? "SELECT s.name, s.sha256, s.size, s.client_root, s.updated_at, b.source"
		  " FROM scripts s JOIN script_blobs b ON b.sha256 = s.sha256"
		  " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
		  " ORDER BY s.client_root DESC LIMIT 1"
		: "SELECT s.name, s.sha256, s.size, s.client_root, s.updated_at FROM scripts s"
		  " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
		  " ORDER BY s.client_root DESC LIMIT 1";

	return store_get_row(st, sql, client_root, name, NULL, row_script, out);
}

enum rcs_err store_script_source(struct store *st, const char *client_root, const char *name,
				 char **src, size_t *len, char sha256[65])
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*src = NULL;
	store_lock(st);
	err =
	    store_prepare(st,
			  "SELECT b.source, s.sha256 FROM scripts s JOIN script_blobs b"
			  " ON b.sha256 = s.sha256 WHERE s.name = ?2 AND s.client_root IN (?1, '')"
			  " ORDER BY s.client_root DESC LIMIT 1",
			  &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, client_root);
	store_bind_text(s, 2, name);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		size_t n = (size_t)sqlite3_column_bytes(s, 0);
		char *p = malloc(n + 1);
		if (p == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
		if (n)
			memcpy(p, sqlite3_column_blob(s, 0), n);
		p[n] = '\0';
		*src = p;
		*len = n;
		snprintf(sha256, 65, "%s", store_col_text(s, 1));
	} else {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "script source");
	}
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

bool store_script_is_stock(struct store *st, const char *name)
{
	json_object *o = NULL;
	enum rcs_err err =
	    store_get_row(st, "SELECT 1 FROM scripts WHERE client_root = '' AND name = ?", name,
			  NULL, NULL, store_row_exists, &o);
	json_object_put(o);
	return err == RCS_OK;
}

enum rcs_err store_script_delete(struct store *st, const char *client_root, const char *name)
{
	json_object *o = NULL;
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err =
	    store_get_row(st,
			  "SELECT 1 FROM tasks WHERE client_root = ? AND script = ? AND deleted = 0"
			  " LIMIT 1",
			  client_root, name, NULL, store_row_exists, &o);
	json_object_put(o);
	if (err == RCS_OK) {
		err = RCS_ERR_CONFLICT;
		goto out;
	}
	if (err != RCS_ERR_NOTFOUND)
		goto out;
	err = store_write(st, "DELETE FROM scripts WHERE client_root = ? AND name = ?", &changes, 2,
			  client_root, name);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
out:
	return store_sp_end(st, err);
}

enum rcs_err store_scripts_list(struct store *st, const char *client_root,
				const struct store_page *pg, json_object **out)
{
	struct store_qb q = {.n = 0};

	/* a tenant's script shadows a stock script of the same name */
	q.where[0] = '\0';
	store_qb_add(&q,
		     "(s.client_root = ?1 OR (s.client_root = '' AND NOT EXISTS (SELECT 1 FROM"
		     " scripts t WHERE t.client_root = ?1 AND t.name = s.name)))",
		     client_root);
	return store_list(st, "s.name, s.sha256, s.size, s.client_root, s.updated_at", "scripts s",
			  &q, "s.name", pg, row_script, out);
}

/* ---- tasks ---- */

#define TASK_COLS                                                                                  \
	"version, ident, client_root, created_user, update_user, name, script, variables_info,"    \
	" constants, comment, active, public, hide, allow_offline, created_at, update_at,"         \
	" mail_list, status_list, timeout, script_sha256, signature"

static json_object *row_task(sqlite3_stmt *s)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "version", store_col_int(s, 0));
	json_object_object_add(o, "ident", store_col_str(s, 1));
	json_object_object_add(o, "client_root", store_col_str(s, 2));
	json_object_object_add(o, "created_user", store_col_str(s, 3));
	json_object_object_add(o, "update_user", store_col_str(s, 4));
	json_object_object_add(o, "name", store_col_str(s, 5));
	json_object_object_add(o, "script", store_col_str(s, 6));
	json_object_object_add(o, "variables_info", store_col_json(s, 7));
	json_object_object_add(o, "constants", store_col_json(s, 8));
	json_object_object_add(o, "comment", store_col_str(s, 9));
	json_object_object_add(
	    o, "active", json_object_new_string(sqlite3_column_int(s, 10) ? "true" : "false"));
	json_object_object_add(o, "public", store_col_bool(s, 11));
	json_object_object_add(o, "hide", store_col_bool(s, 12));
	json_object_object_add(o, "allow_offline", store_col_bool(s, 13));
	json_object_object_add(o, "created_at", store_col_int(s, 14));
	json_object_object_add(o, "update_at", store_col_int(s, 15));
	json_object_object_add(o, "notification_mail_list", store_col_json(s, 16));
	json_object_object_add(o, "notification_status_list", store_col_json(s, 17));
	json_object_object_add(o, "timeout", store_col_int(s, 18));
	json_object_object_add(o, "script_sha256", store_col_str(s, 19));
	json_object_object_add(o, "signature", store_col_json(s, 20));
	return o;
}

enum rcs_err store_task_put(struct store *st, const struct task_write *t, bool is_new)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int changes;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, t->script_sha256, t->script_src, t->script_len);
	if (err != RCS_OK)
		goto out;
	if (is_new)
		err = store_prepare(
		    st,
		    "INSERT INTO tasks(version, ident, client_root, created_user,"
		    " update_user, name, script, variables_info, constants, comment,"
		    " active, public, hide, allow_offline, created_at, update_at,"
		    " mail_list, status_list, timeout, script_sha256, signature)"
		    " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,"
		    "?18,?19,?20,?21)",
		    &s);
	else
		err = store_prepare(
		    st,
		    "UPDATE tasks SET version = ?1, update_user = ?5, name = ?6,"
		    " script = ?7, variables_info = ?8, constants = ?9, comment = ?10,"
		    " active = ?11, public = ?12, hide = ?13, allow_offline = ?14,"
		    " update_at = ?16, mail_list = ?17, status_list = ?18, timeout = ?19,"
		    " script_sha256 = ?20, signature = ?21"
		    " WHERE ident = ?2 AND client_root = ?3 AND deleted = 0",
		    &s);
	if (err != RCS_OK)
		goto out;
	sqlite3_bind_int64(s, 1, t->version);
	store_bind_text(s, 2, t->ident);
	store_bind_text(s, 3, t->client_root);
	store_bind_text(s, 4, t->created_user);
	store_bind_text(s, 5, t->update_user);
	store_bind_text(s, 6, t->name);
	store_bind_text(s, 7, t->script);
	store_bind_json(s, 8, t->variables_info, "{}");
	store_bind_json(s, 9, t->constants, "{}");
	store_bind_text(s, 10, t->comment ? t->comment : "");
	sqlite3_bind_int(s, 11, t->active);
	sqlite3_bind_int(s, 12, t->is_public);
	sqlite3_bind_int(s, 13, t->hide);
	sqlite3_bind_int(s, 14, t->allow_offline);
	sqlite3_bind_int64(s, 15, t->created_at);
	sqlite3_bind_int64(s, 16, t->update_at);
	store_bind_json(s, 17, t->mail_list, "[]");
	store_bind_json(s, 18, t->status_list, "[]");
	sqlite3_bind_int64(s, 19, t->timeout);
	store_bind_text(s, 20, t->script_sha256);
	store_bind_json(s, 21, t->signature, NULL);
	err = store_rc(st->db, sqlite3_step(s), "task put");
	if (err != RCS_OK)
		goto out;
	changes = sqlite3_changes(st->db);
	if (changes == 0) {
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	store_release(st, s);
	s = NULL;
	err = store_prepare(
	    st,
	    "INSERT INTO task_versions(task_ident, version, script_name, script_sha256,"
	    " constants, variables_info, timeout, signature)"
	    " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, t->ident);
	sqlite3_bind_int64(s, 2, t->version);
	store_bind_text(s, 3, t->script);
	store_bind_text(s, 4, t->script_sha256);
	store_bind_json(s, 5, t->constants, "{}");
	store_bind_json(s, 6, t->variables_info, "{}");
	sqlite3_bind_int64(s, 7, t->timeout);
	store_bind_json(s, 8, t->signature, NULL);
	err = store_rc(st->db, sqlite3_step(s), "task version put");
out:
	store_release(st, s);
	return store_sp_end(st, err);
}

enum rcs_err store_task_get_visible(struct store *st, const char *client_root, const char *ident,
				    const char *only_visible_to, json_object **out)
{
	if (only_visible_to == NULL)
		return store_task_get(st, client_root, ident, out);
	return store_get_row(st,
			     "SELECT " TASK_COLS " FROM tasks WHERE ident = ?1 AND client_root = ?2"
			     " AND deleted = 0 AND NOT " STORE_TASK_HIDDEN("tasks", "?3"),
			     ident, client_root, only_visible_to, row_task, out);
}

enum rcs_err store_task_get(struct store *st, const char *client_root, const char *ident,
			    json_object **out)
{
	return store_get_row(st,
			     "SELECT " TASK_COLS " FROM tasks WHERE ident = ? AND client_root = ?"
			     " AND deleted = 0",
			     ident, client_root, NULL, row_task, out);
}

enum rcs_err store_task_set_signature(struct store *st, const char *client_root, const char *ident,
				      json_object *signature)
{
	const char *sig = signature ? jsonu_dump(signature, NULL) : NULL;
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "UPDATE tasks SET signature = ? WHERE ident = ? AND client_root = ?"
			  " AND deleted = 0",
			  &changes, 3, sig, ident, client_root);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK)
		err =
		    store_write(st,
				"UPDATE task_versions SET signature = ?1 WHERE task_ident = ?2 AND"
				" version = (SELECT version FROM tasks WHERE ident = ?2)",
				NULL, 2, sig, ident);
	return store_sp_end(st, err);
}

enum rcs_err store_task_delete(struct store *st, const char *client_root, const char *ident)
{
	int changes = 0;
	enum rcs_err err = store_write(st,
				       "UPDATE tasks SET deleted = 1 WHERE ident = ? AND"
				       " client_root = ? AND deleted = 0",
				       &changes, 2, ident, client_root);

	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	return err;
}

enum rcs_err store_tasks_list(struct store *st, const char *client_root,
			      const struct task_filter *f, const struct store_page *pg,
			      json_object **out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;

	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	store_qb_add(&q, "deleted = 0", NULL);
	if (!f->include_hidden)
		store_qb_add(&q, "hide = 0", NULL);
	if (f->only_visible_to)
		store_qb_add(&q, "NOT " STORE_TASK_HIDDEN("tasks", "?"), f->only_visible_to);
	store_qb_list_opts(&q, pg, "", "ident", &o);
	return store_list(st, TASK_COLS, "tasks", &q, o.order, pg, row_task, out);
}

enum rcs_err store_tasks_using_script(struct store *st, const char *client_root, const char *name,
				      json_object **out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;

	*out = NULL;
	store_lock(st);
	err = store_prepare(st,
			    "SELECT ident FROM tasks WHERE client_root = ? AND script = ? AND"
			    " deleted = 0 ORDER BY ident",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, client_root);
	store_bind_text(s, 2, name);
	err = store_rows(st, s, store_row_first_str, SIZE_MAX, out);
out:
	store_release(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_task_version_get(struct store *st, const char *task_ident, long long version,
				    struct task_version *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_prepare(st,
			    "SELECT v.script_name, b.source, v.script_sha256, v.constants,"
			    " v.variables_info, v.signature, v.timeout FROM task_versions v"
			    " JOIN script_blobs b ON b.sha256 = v.script_sha256"
			    " WHERE v.task_ident = ? AND v.version = ?",
			    &s);
	if (err != RCS_OK)
		goto out;
	store_bind_text(s, 1, task_ident);
	sqlite3_bind_int64(s, 2, version);
	rc = sqlite3_step(s);
	if (rc != SQLITE_ROW) {
		err = rc == SQLITE_DONE ? RCS_ERR_NOTFOUND : store_rc(st->db, rc, "task version");
		goto out;
	}
	out->script_name = strdup(store_col_text(s, 0));
	out->script_len = (size_t)sqlite3_column_bytes(s, 1);
	out->script_src = malloc(out->script_len + 1);
	if (out->script_name == NULL || out->script_src == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	if (out->script_len)
		memcpy(out->script_src, sqlite3_column_blob(s, 1), out->script_len);
	out->script_src[out->script_len] = '\0';
	snprintf(out->script_sha256, sizeof(out->script_sha256), "%s", store_col_text(s, 2));
	out->constants = store_col_json(s, 3);
	out->variables_info = store_col_json(s, 4);
	out->signature = store_col_json(s, 5);
	out->timeout = sqlite3_column_int64(s, 6);
out:
	store_release(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_task_version_free(out);
	return err;
}

void store_task_version_free(struct task_version *tv)
{
	free(tv->script_name);
	free(tv->script_src);
	if (tv->constants)
		json_object_put(tv->constants);
	if (tv->variables_info)
		json_object_put(tv->variables_info);
	if (tv->signature)
		json_object_put(tv->signature);
	memset(tv, 0, sizeof(*tv));
}
