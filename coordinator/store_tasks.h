/*
 * store_tasks.h - the store's scripts (client_root "" holds the stock scripts) and tasks with their
 * versions (store_tasks.c). See store.h.
 */
#ifndef RCS_STORE_TASKS_H
#define RCS_STORE_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum rcs_err store_script_put(struct store *st, const char *client_root, const char *name,
			      const char *src, size_t len, int64_t now, bool *created);
/* A script as the API shows it; source (with source_len) only when asked for, else NULL.
 * Free with store_script_rec_free. */
struct script_rec {
	char *name;
	char sha256[65];
	long long size;
	bool stock; /* one of the stock scripts (client_root "") */
	int64_t updated_at;
	char *source;
	size_t source_len;
};
void store_script_rec_free(struct script_rec *r);
struct store_script_list {
	struct store_page_info pg;
	struct script_rec *items;
	size_t n;
};
void store_script_list_free(struct store_script_list *l);

/* Looks in the tenant's scripts, then the stock ones. */
enum rcs_err store_script_get(struct store *st, const char *client_root, const char *name,
			      bool with_source, struct script_rec *out);
/* Exact bytes (malloc'd, NUL-terminated, caller frees) and hex sha256. */
enum rcs_err store_script_source(struct store *st, const char *client_root, const char *name,
				 char **src, size_t *len, char sha256[65]);
bool store_script_is_stock(struct store *st, const char *name);
/* RCS_ERR_CONFLICT when a task still uses it. */
enum rcs_err store_script_delete(struct store *st, const char *client_root, const char *name);
enum rcs_err store_scripts_list(struct store *st, const char *client_root,
				const struct store_page *pg, struct store_script_list *out);

/* One artifact a task version pins (docs/api.md, "Tasks"): its key in the task, its SHA-256
 * (hex) and size. */
struct task_artifact {
	const char *name;
	const char *sha256;
	long long size;
};

/* JSON members are JSON text (the API serializes what it validated); NULL takes the
 * default ({} or [], no signature). */
struct task_write {
	const char *ident;
	const char *client_root;
	long long version;
	const char *name;
	const char *script;
	const char *script_src; /* exact bytes of this version */
	size_t script_len;
	const char *script_sha256;
	const char *variables_info; /* object */
	const char *constants;      /* object */
	const char *comment;
	bool active, is_public, hide, allow_offline;
	long long timeout;
	const char *created_user;
	const char *update_user; /* NULL on create */
	int64_t created_at, update_at;
	const char *mail_list;   /* array of strings */
	const char *status_list; /* array of strings */
	const char *signature;   /* object or NULL */
	const char *retry;       /* the default retry of its bulk sends: object or NULL */
	/* artifacts: the record's {"<key>": {"ident","size","name"}} (NULL: none), the version's
	 * {"<key>": {"sha256","size"}} (what manifest v2 signs), and the same as rows */
	const char *artifacts, *artifacts_signed;
	const struct task_artifact *arts;
	size_t n_arts;
	const char *release; /* object or NULL */
	long long download_timeout;
};

/* Inserts (version 1) or updates a task, recording the version's snapshot. */
enum rcs_err store_task_put(struct store *st, const struct task_write *t, bool is_new);

/* A task as the API shows it (docs/api.md, "Tasks"); JSON members as JSON text. Free with
 * store_task_rec_free. */
struct task_rec {
	long long version;
	char ident[UUID_STR_LEN];
	char client_root[UUID_STR_LEN];
	char *created_user;
	char *update_user; /* NULL until a second version */
	char *name;
	char *script;
	char *variables_info; /* object */
	char *constants;      /* object */
	char *comment;
	bool active, is_public, hide, allow_offline;
	int64_t created_at, update_at;
	char *mail_list;   /* array of strings */
	char *status_list; /* array of strings */
	long long timeout;
	char script_sha256[65];
	char *signature; /* object, NULL when unsigned */
	char *retry;     /* the default retry of its bulk sends: object, NULL: none */
	char *artifacts; /* {"<key>": {"ident","size","name"}}, NULL: none */
	char *release;   /* object, NULL: none */
	long long download_timeout;
};
void store_task_rec_free(struct task_rec *r);
struct store_task_list {
	struct store_page_info pg;
	struct task_rec *items;
	size_t n;
};
void store_task_list_free(struct store_task_list *l);

enum rcs_err store_task_get(struct store *st, const char *client_root, const char *ident,
			    struct task_rec *out);
/* store_task_get for a user who is no admin (only_visible_to; NULL: anyone): a task that is
 * neither public nor theirs is RCS_ERR_NOTFOUND, like another tenant's. */
enum rcs_err store_task_get_visible(struct store *st, const char *client_root, const char *ident,
				    const char *only_visible_to, struct task_rec *out);
/* Sets the signature (JSON text of an object, NULL: none) of the task's current version
 * (version unchanged). */
enum rcs_err store_task_set_signature(struct store *st, const char *client_root, const char *ident,
				      const char *signature);
enum rcs_err store_task_delete(struct store *st, const char *client_root, const char *ident);

struct task_filter {
	bool include_hidden;
	const char *only_visible_to; /* user: non-public tasks of others are left out; NULL: all */
};
enum rcs_err store_tasks_list(struct store *st, const char *client_root,
			      const struct task_filter *f, const struct store_page *pg,
			      struct store_task_list *out);

/* Idents of live tasks of the tenant using a script, in ident order. */
enum rcs_err store_tasks_using_script(struct store *st, const char *client_root, const char *name,
				      struct store_idents *out);

/* The immutable snapshot of one task version (what a job carries); JSON members as JSON
 * text. */
struct task_version {
	char *script_name;
	char *script_src;
	size_t script_len;
	char script_sha256[65];
	char *constants;      /* object */
	char *variables_info; /* object */
	char *signature;      /* object, NULL when unsigned */
	long long timeout;
	char *artifacts; /* {"<key>": {"sha256","size"}}, NULL: none */
	char *release;   /* object, NULL: none */
	long long download_timeout;
};
enum rcs_err store_task_version_get(struct store *st, const char *task_ident, long long version,
				    struct task_version *out);
void store_task_version_free(struct task_version *tv);

#endif
