/*
 * store_tasks.c - the store's scripts and tasks (with their versions). See store_tasks.h;
 * store_int.h for what the store's files share.
 */
#include "store_tasks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "store_int.h"

/* A row is there: what an existence check asks (store_get_one). */
static enum rcs_err row_found(struct store_stmt *s, void *arg)
{
	(void)s;
	(void)arg;
	return RCS_OK;
}

/* ---- scripts ---- */

/* The bytes of a script, kept once per content (the source as text of its exact length). */
static enum rcs_err store_blob_put(struct store *st, const char *sha, const char *src, size_t len)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(st,
			 "INSERT INTO script_blobs(sha256, source) VALUES(?, ?)"
			 " ON CONFLICT DO NOTHING",
			 &s);
	if (err != RCS_OK)
		return err;
	store_arg_text(s, 1, sha);
	store_arg_textn(s, 2, len ? src : "", len);
	err = store_done(st, s, "blob put");
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_script_put(struct store *st, const char *client_root, const char *name,
			      const char *src, size_t len, int64_t now, bool *created)
{
	char sha[SHA256_HEX_LEN];
	struct store_stmt *s = NULL;
	enum rcs_err err;

	sha256_hex(src, len, sha);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, sha, src, len);
	if (err != RCS_OK)
		goto out;
	if (created) {
		err = store_get_one(st, "SELECT 1 FROM scripts WHERE client_root = ? AND name = ?",
				    client_root, name, NULL, row_found, NULL);
		if (err != RCS_OK && err != RCS_ERR_NOTFOUND)
			goto out;
		*created = err == RCS_ERR_NOTFOUND;
	}
	err = store_stmt(
	    st,
	    "INSERT INTO scripts(client_root, name, sha256, size, updated_at)"
	    " VALUES(?, ?, ?, ?, ?) ON CONFLICT(client_root, name) DO UPDATE SET"
	    " sha256 = excluded.sha256, size = excluded.size,"
	    " updated_at = CASE WHEN scripts.sha256 = excluded.sha256 THEN scripts.updated_at"
	    " ELSE excluded.updated_at END",
	    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, name);
	store_arg_text(s, 3, sha);
	store_arg_int(s, 4, (long long)len);
	store_arg_int(s, 5, now);
	err = store_done(st, s, "script put");
out:
	store_stmt_done(st, s);
	return store_sp_end(st, err);
}

void store_script_rec_free(struct script_rec *r)
{
	free(r->name);
	free(r->source);
	r->name = r->source = NULL;
	r->source_len = 0;
}

void store_script_list_free(struct store_script_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		store_script_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

#define SCRIPT_COLS "s.name, s.sha256, s.size, s.client_root, s.updated_at"

/* A row of SCRIPT_COLS into a record (zeroed by the caller). */
static enum rcs_err script_row(struct store_stmt *s, void *arg)
{
	struct script_rec *r = arg;
	const char *root = store_val_text(s, 3);
	enum rcs_err err = RCS_OK;

	r->name = store_val_dup(s, 0, &err);
	store_val_copy(s, 1, r->sha256, sizeof(r->sha256));
	r->size = store_val_int(s, 2);
	r->stock = root == NULL || root[0] == '\0';
	r->updated_at = store_val_int(s, 4);
	return err;
}

/* script_row, and the source after SCRIPT_COLS. */
static enum rcs_err script_row_source(struct store_stmt *s, void *arg)
{
	struct script_rec *r = arg;
	enum rcs_err err = script_row(s, arg);

	if (err == RCS_OK) {
		r->source = store_val_dup(s, 5, &err);
		r->source_len = r->source ? store_val_len(s, 5) : 0;
	}
	return err;
}

enum rcs_err store_script_get(struct store *st, const char *client_root, const char *name,
			      bool with_source, struct script_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	if (with_source)
		err = store_get_one(st,
				    "SELECT " SCRIPT_COLS ", b.source"
				    " FROM scripts s JOIN script_blobs b ON b.sha256 = s.sha256"
				    " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
				    " ORDER BY s.client_root DESC LIMIT 1",
				    client_root, name, NULL, script_row_source, out);
	else
		err = store_get_one(st,
				    "SELECT " SCRIPT_COLS " FROM scripts s"
				    " WHERE s.name = ?2 AND s.client_root IN (?1, '')"
				    " ORDER BY s.client_root DESC LIMIT 1",
				    client_root, name, NULL, script_row, out);
	if (err != RCS_OK)
		store_script_rec_free(out);
	return err;
}

struct script_source {
	char **src;
	size_t *len;
	char *sha256;
};

static enum rcs_err script_source_row(struct store_stmt *s, void *arg)
{
	struct script_source *o = arg;
	enum rcs_err err = RCS_OK;
	char *p = store_val_dup(s, 0, &err);

	if (err != RCS_OK)
		return err;
	if (p == NULL) { /* NULL never stored: read as no bytes */
		p = calloc(1, 1);
		if (p == NULL)
			return RCS_ERR_NOMEM;
		*o->len = 0;
	} else {
		*o->len = store_val_len(s, 0);
	}
	*o->src = p;
	store_val_copy(s, 1, o->sha256, 65);
	return RCS_OK;
}

enum rcs_err store_script_source(struct store *st, const char *client_root, const char *name,
				 char **src, size_t *len, char sha256[65])
{
	struct script_source o = {src, len, sha256};

	*src = NULL;
	return store_get_one(
	    st,
	    "SELECT b.source, s.sha256 FROM scripts s JOIN script_blobs b"
	    " ON b.sha256 = s.sha256 WHERE s.name = ?2 AND s.client_root IN (?1, '')"
	    " ORDER BY s.client_root DESC LIMIT 1",
	    client_root, name, NULL, script_source_row, &o);
}

bool store_script_is_stock(struct store *st, const char *name)
{
	return store_get_one(st, "SELECT 1 FROM scripts WHERE client_root = '' AND name = ?", name,
			     NULL, NULL, row_found, NULL) == RCS_OK;
}

enum rcs_err store_script_delete(struct store *st, const char *client_root, const char *name)
{
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err =
	    store_get_one(st,
			  "SELECT 1 FROM tasks WHERE client_root = ? AND script = ? AND deleted = 0"
			  " LIMIT 1",
			  client_root, name, NULL, row_found, NULL);
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
				const struct store_page *pg, struct store_script_list *out)
{
	struct store_qb q = {.n = 0};
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	/* a tenant's script shadows a stock script of the same name */
	q.where[0] = '\0';
	store_qb_add(&q,
		     "(s.client_root = ?1 OR (s.client_root = '' AND NOT EXISTS (SELECT 1 FROM"
		     " scripts t WHERE t.client_root = ?1 AND t.name = s.name)))",
		     client_root);
	err = store_page_recs(st, SCRIPT_COLS, "scripts s", &q, "s.name", pg, &out->pg,
			      sizeof(*out->items), script_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_script_list_free(out);
	return err;
}

/* ---- tasks ---- */

#define TASK_COLS                                                                                  \
	"version, ident, client_root, created_user, update_user, name, script, variables_info,"    \
	" constants, comment, active, public, hide, allow_offline, created_at, update_at,"         \
	" mail_list, status_list, timeout, script_sha256, signature, retry, artifacts, release,"   \
	" download_timeout"

void store_task_rec_free(struct task_rec *r)
{
	free(r->created_user);
	free(r->update_user);
	free(r->name);
	free(r->script);
	free(r->variables_info);
	free(r->constants);
	free(r->comment);
	free(r->mail_list);
	free(r->status_list);
	free(r->signature);
	free(r->retry);
	free(r->artifacts);
	free(r->release);
	memset(r, 0, sizeof(*r));
}

void store_task_list_free(struct store_task_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		store_task_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

/* A row of TASK_COLS into a record (zeroed by the caller). */
static enum rcs_err task_row(struct store_stmt *s, void *arg)
{
	struct task_rec *r = arg;
	enum rcs_err err = RCS_OK;

	r->version = store_val_int(s, 0);
	store_val_copy(s, 1, r->ident, sizeof(r->ident));
	store_val_copy(s, 2, r->client_root, sizeof(r->client_root));
	r->created_user = store_val_dup(s, 3, &err);
	r->update_user = store_val_dup(s, 4, &err);
	r->name = store_val_dup(s, 5, &err);
	r->script = store_val_dup(s, 6, &err);
	r->variables_info = store_val_dup(s, 7, &err);
	r->constants = store_val_dup(s, 8, &err);
	r->comment = store_val_dup(s, 9, &err);
	r->active = store_val_bool(s, 10);
	r->is_public = store_val_bool(s, 11);
	r->hide = store_val_bool(s, 12);
	r->allow_offline = store_val_bool(s, 13);
	r->created_at = store_val_int(s, 14);
	r->update_at = store_val_int(s, 15);
	r->mail_list = store_val_dup(s, 16, &err);
	r->status_list = store_val_dup(s, 17, &err);
	r->timeout = store_val_int(s, 18);
	store_val_copy(s, 19, r->script_sha256, sizeof(r->script_sha256));
	r->signature = store_val_dup(s, 20, &err);
	r->retry = store_val_dup(s, 21, &err);
	r->artifacts = store_val_dup(s, 22, &err);
	r->release = store_val_dup(s, 23, &err);
	r->download_timeout = store_val_int(s, 24);
	return err;
}

/* Binds JSON text, or dflt when NULL (dflt NULL: SQL NULL). */
static void task_arg_json(struct store_stmt *s, int i, const char *json, const char *dflt)
{
	store_arg_text(s, i, json ? json : dflt);
}

/* The snapshot of version t->version, and the artifacts it pins (task_artifacts). */
static enum rcs_err task_version_put(struct store *st, const struct task_write *t)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err =
	    store_stmt(st,
		       "INSERT INTO task_versions(task_ident, version, script_name, script_sha256,"
		       " constants, variables_info, timeout, signature, artifacts, release,"
		       " download_timeout) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		       &s);
	if (err != RCS_OK)
		return err;
	store_arg_text(s, 1, t->ident);
	store_arg_int(s, 2, t->version);
	store_arg_text(s, 3, t->script);
	store_arg_text(s, 4, t->script_sha256);
	task_arg_json(s, 5, t->constants, "{}");
	task_arg_json(s, 6, t->variables_info, "{}");
	store_arg_int(s, 7, t->timeout);
	task_arg_json(s, 8, t->signature, NULL);
	task_arg_json(s, 9, t->artifacts_signed, NULL);
	task_arg_json(s, 10, t->release, NULL);
	store_arg_int(s, 11, t->download_timeout > 0 ? t->download_timeout : 86400);
	err = store_done(st, s, "task version put");
	for (size_t i = 0; err == RCS_OK && i < t->n_arts; i++) {
		store_stmt_done(st, s);
		s = NULL;
		err =
		    store_stmt(st,
			       "INSERT INTO task_artifacts(task_ident, version, name, client_root,"
			       " sha256, size) VALUES(?, ?, ?, ?, ?, ?)",
			       &s);
		if (err != RCS_OK)
			break;
		store_arg_text(s, 1, t->ident);
		store_arg_int(s, 2, t->version);
		store_arg_text(s, 3, t->arts[i].name);
		store_arg_text(s, 4, t->client_root);
		store_arg_text(s, 5, t->arts[i].sha256);
		store_arg_int(s, 6, t->arts[i].size);
		err = store_done(st, s, "task artifact put");
	}
	store_stmt_done(st, s);
	return err;
}

enum rcs_err store_task_put(struct store *st, const struct task_write *t, bool is_new)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_blob_put(st, t->script_sha256, t->script_src, t->script_len);
	if (err != RCS_OK)
		goto out;
	if (is_new)
		err = store_stmt(
		    st,
		    "INSERT INTO tasks(version, ident, client_root, created_user,"
		    " update_user, name, script, variables_info, constants, comment,"
		    " active, public, hide, allow_offline, created_at, update_at,"
		    " mail_list, status_list, timeout, script_sha256, signature, retry, artifacts,"
		    " release, download_timeout) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,"
		    "?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25)",
		    &s);
	else
		err = store_stmt(
		    st,
		    "UPDATE tasks SET version = ?1, update_user = ?5, name = ?6,"
		    " script = ?7, variables_info = ?8, constants = ?9, comment = ?10,"
		    " active = ?11, public = ?12, hide = ?13, allow_offline = ?14,"
		    " update_at = ?16, mail_list = ?17, status_list = ?18, timeout = ?19,"
		    " script_sha256 = ?20, signature = ?21, retry = ?22, artifacts = ?23,"
		    " release = ?24, download_timeout = ?25"
		    " WHERE ident = ?2 AND client_root = ?3 AND deleted = 0",
		    &s);
	if (err != RCS_OK)
		goto out;
	store_arg_int(s, 1, t->version);
	store_arg_text(s, 2, t->ident);
	store_arg_text(s, 3, t->client_root);
	store_arg_text(s, 4, t->created_user);
	store_arg_text(s, 5, t->update_user);
	store_arg_text(s, 6, t->name);
	store_arg_text(s, 7, t->script);
	task_arg_json(s, 8, t->variables_info, "{}");
	task_arg_json(s, 9, t->constants, "{}");
	store_arg_text(s, 10, t->comment ? t->comment : "");
	store_arg_int(s, 11, t->active);
	store_arg_int(s, 12, t->is_public);
	store_arg_int(s, 13, t->hide);
	store_arg_int(s, 14, t->allow_offline);
	store_arg_int(s, 15, t->created_at);
	store_arg_int(s, 16, t->update_at);
	task_arg_json(s, 17, t->mail_list, "[]");
	task_arg_json(s, 18, t->status_list, "[]");
	store_arg_int(s, 19, t->timeout);
	store_arg_text(s, 20, t->script_sha256);
	task_arg_json(s, 21, t->signature, NULL);
	task_arg_json(s, 22, t->retry, NULL);
	task_arg_json(s, 23, t->artifacts, NULL);
	task_arg_json(s, 24, t->release, NULL);
	store_arg_int(s, 25, t->download_timeout > 0 ? t->download_timeout : 86400);
	err = store_done(st, s, "task put");
	if (err == RCS_OK && store_changes(st) == 0)
		err = RCS_ERR_NOTFOUND;
	store_stmt_done(st, s);
	s = NULL;
	if (err == RCS_OK)
		err = task_version_put(st, t);
out:
	store_stmt_done(st, s);
	return store_sp_end(st, err);
}

enum rcs_err store_task_get_visible(struct store *st, const char *client_root, const char *ident,
				    const char *only_visible_to, struct task_rec *out)
{
	enum rcs_err err;

	if (only_visible_to == NULL)
		return store_task_get(st, client_root, ident, out);
	memset(out, 0, sizeof(*out));
	err = store_get_one(st,
			    "SELECT " TASK_COLS " FROM tasks WHERE ident = ?1 AND client_root = ?2"
			    " AND deleted = 0 AND NOT " STORE_TASK_HIDDEN("tasks", "?3"),
			    ident, client_root, only_visible_to, task_row, out);
	if (err != RCS_OK)
		store_task_rec_free(out);
	return err;
}

enum rcs_err store_task_get(struct store *st, const char *client_root, const char *ident,
			    struct task_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_get_one(st,
			    "SELECT " TASK_COLS " FROM tasks WHERE ident = ? AND client_root = ?"
			    " AND deleted = 0",
			    ident, client_root, NULL, task_row, out);
	if (err != RCS_OK)
		store_task_rec_free(out);
	return err;
}

enum rcs_err store_task_set_signature(struct store *st, const char *client_root, const char *ident,
				      const char *signature)
{
	enum rcs_err err;
	int changes = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "UPDATE tasks SET signature = ? WHERE ident = ? AND client_root = ?"
			  " AND deleted = 0",
			  &changes, 3, signature, ident, client_root);
	if (err == RCS_OK && changes == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK)
		err =
		    store_write(st,
				"UPDATE task_versions SET signature = ?1 WHERE task_ident = ?2 AND"
				" version = (SELECT version FROM tasks WHERE ident = ?2)",
				NULL, 2, signature, ident);
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
			      struct store_task_list *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	store_qb_add(&q, "deleted = 0", NULL);
	if (!f->include_hidden)
		store_qb_add(&q, "hide = 0", NULL);
	if (f->only_visible_to)
		store_qb_add(&q, "NOT " STORE_TASK_HIDDEN("tasks", "?"), f->only_visible_to);
	store_qb_list_opts(&q, pg, "", "ident", &o);
	err = store_page_recs(st, TASK_COLS, "tasks", &q, o.order, pg, &out->pg,
			      sizeof(*out->items), task_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_task_list_free(out);
	return err;
}

enum rcs_err store_tasks_using_script(struct store *st, const char *client_root, const char *name,
				      struct store_idents *out)
{
	struct store_stmt *s = NULL;
	size_t cap = 0;
	enum rcs_err err;
	bool row = false;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_stmt(st,
			 "SELECT ident FROM tasks WHERE client_root = ? AND script = ? AND"
			 " deleted = 0 ORDER BY ident",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, name);
	while ((err = store_next(st, s, "tasks using script", &row)) == RCS_OK && row) {
		if (out->n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			void *p = realloc(out->v, ncap * sizeof(*out->v));

			if (p == NULL) {
				err = RCS_ERR_NOMEM;
				break;
			}
			out->v = p;
			cap = ncap;
		}
		store_val_copy(s, 0, out->v[out->n++], UUID_STR_LEN);
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_idents_free(out);
	return err;
}

static enum rcs_err task_version_row(struct store_stmt *s, void *arg)
{
	struct task_version *out = arg;
	enum rcs_err err = RCS_OK;

	out->script_name = store_val_dup(s, 0, &err);
	out->script_src = store_val_dup(s, 1, &err);
	out->script_len = out->script_src ? store_val_len(s, 1) : 0;
	if (err == RCS_OK && out->script_src == NULL) {
		out->script_src = calloc(1, 1);
		if (out->script_src == NULL)
			err = RCS_ERR_NOMEM;
	}
	store_val_copy(s, 2, out->script_sha256, sizeof(out->script_sha256));
	out->constants = store_val_dup(s, 3, &err);
	out->variables_info = store_val_dup(s, 4, &err);
	out->signature = store_val_dup(s, 5, &err);
	out->timeout = store_val_int(s, 6);
	out->artifacts = store_val_dup(s, 7, &err);
	out->release = store_val_dup(s, 8, &err);
	out->download_timeout = store_val_int(s, 9);
	if (err == RCS_OK && out->script_name == NULL)
		err = RCS_ERR_DB; /* NOT NULL in the schema */
	return err;
}

enum rcs_err store_task_version_get(struct store *st, const char *task_ident, long long version,
				    struct task_version *out)
{
	char v[24];
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	snprintf(v, sizeof(v), "%lld", version);
	err = store_get_one(st,
			    "SELECT v.script_name, b.source, v.script_sha256, v.constants,"
			    " v.variables_info, v.signature, v.timeout, v.artifacts, v.release,"
			    " v.download_timeout FROM task_versions v"
			    " JOIN script_blobs b ON b.sha256 = v.script_sha256"
			    " WHERE v.task_ident = ? AND v.version = CAST(? AS INTEGER)",
			    task_ident, v, NULL, task_version_row, out);
	if (err != RCS_OK)
		store_task_version_free(out);
	return err;
}

void store_task_version_free(struct task_version *tv)
{
	free(tv->script_name);
	free(tv->script_src);
	free(tv->constants);
	free(tv->variables_info);
	free(tv->signature);
	free(tv->artifacts);
	free(tv->release);
	memset(tv, 0, sizeof(*tv));
}
