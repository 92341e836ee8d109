/*
 * store_artifacts.c - the store's artifacts (docs/api.md, "Artifacts"): their records, and
 * their bytes as files (SQLite: a temporary file, fsynced, renamed, its directory fsynced)
 * or as chunks in the database (PostgreSQL, table artifact_chunks, hex through the seam's
 * text parameters). See store_artifacts.h; store_int.h for what the store's files share.
 */
#include "store_artifacts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "store_int.h"
#include "uuid.h"
#include "text.h"

/* Where uploads write before their bytes are whole: <dir>/.tmp (docs/coordinator.md). */
#define ARTIFACT_TMP ".tmp"

void store_artifact_rec_free(struct artifact_rec *r)
{
	free(r->name);
	free(r->created_user);
	memset(r, 0, sizeof(*r));
}

void store_artifact_list_free(struct store_artifact_list *l)
{
	for (size_t i = 0; l->items && i < l->n; i++)
		store_artifact_rec_free(&l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

bool store_artifacts_in_db(const struct store *st)
{
	return st->dialect == STORE_DIALECT_POSTGRES;
}

bool store_artifact_path(const char *dir, const char *client_root, const char *sha256, char *path,
			 size_t size)
{
	int n = snprintf(path, size, "%s/%s/%.2s/%s", dir, client_root, sha256, sha256);

	return n > 0 && (size_t)n < size;
}

#define ARTIFACT_COLS "sha256, size, name, created_at, created_user, blob_id"

static enum rcs_err artifact_row(struct store_stmt *s, void *arg)
{
	struct artifact_rec *r = arg;
	enum rcs_err err = RCS_OK;

	store_val_copy(s, 0, r->sha256, sizeof(r->sha256));
	r->size = store_val_int(s, 1);
	r->name = store_val_dup(s, 2, &err);
	r->created_at = store_val_int(s, 3);
	r->created_user = store_val_dup(s, 4, &err);
	store_val_copy(s, 5, r->blob_id, sizeof(r->blob_id));
	return err;
}

enum rcs_err store_artifact_get(struct store *st, const char *client_root, const char *sha256,
				struct artifact_rec *out)
{
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	err = store_get_one(st,
			    "SELECT " ARTIFACT_COLS " FROM artifacts WHERE client_root = ?1 AND"
			    " sha256 = ?2",
			    client_root, sha256, NULL, artifact_row, out);
	if (err != RCS_OK)
		store_artifact_rec_free(out);
	return err;
}

enum rcs_err store_artifacts_usage(struct store *st, const char *client_root, long long *bytes)
{
	*bytes = 0;
	return store_get_one(st,
			     "SELECT coalesce(sum(size), 0) FROM artifacts WHERE client_root = ?1",
			     client_root, NULL, NULL, store_row_int, bytes);
}

enum rcs_err store_artifacts_list(struct store *st, const char *client_root,
				  const struct store_page *pg, struct store_artifact_list *out)
{
	struct store_qb q = {.n = 0};
	struct store_qb_opts o;
	const char *dir = pg->desc ? "DESC" : "ASC";
	char order[160];
	void *items = NULL;
	enum rcs_err err;

	memset(out, 0, sizeof(*out));
	q.where[0] = '\0';
	store_qb_add(&q, "client_root = ?", client_root);
	store_qb_list_opts(&q, pg, "", "sha256", &o);
	if (pg->sort == NULL || strcmp(pg->sort, "created_at") == 0)
		snprintf(order, sizeof(order), "created_at %s, sha256 %s", dir, dir);
	else
		snprintf(order, sizeof(order), "%s %s, created_at %s, sha256 %s", pg->sort, dir,
			 dir, dir);
	err = store_page_recs(st, ARTIFACT_COLS, "artifacts", &q, order, pg, &out->pg,
			      sizeof(*out->items), artifact_row, &items, &out->n);
	out->items = items;
	if (err != RCS_OK)
		store_artifact_list_free(out);
	return err;
}

/* ---- uploads ---- */

struct artifact_sink {
	struct store *st;
	bool db; /* chunks in the database (PostgreSQL), else a file */
	bool keep;
	char client_root[UUID_STR_LEN];
	char dir[PATH_MAX / 2];
	char tmp[PATH_MAX];
	int fd;
	char blob_id[UUID_STR_LEN];
	long long n_chunks;
	unsigned char *buf; /* a chunk being filled (PostgreSQL) */
	size_t buf_len;
	char *hex;
	long long size;
};

static enum rcs_err artifact_errno(int e)
{
	return e == ENOSPC || e == EDQUOT ? RCS_ERR_FULL : RCS_ERR_IO;
}

/* mkdir of path when it is not there. */
static enum rcs_err artifact_mkdir(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return RCS_OK;
	log_warnx("artifacts: cannot make %s: %s", path, strerror(errno));
	return artifact_errno(errno);
}

static enum rcs_err artifact_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	enum rcs_err err = RCS_OK;

	if (fd < 0 || fsync(fd) != 0) {
		log_warnx("artifacts: cannot sync %s: %s", path, strerror(errno));
		err = artifact_errno(errno);
	}
	if (fd >= 0)
		close(fd);
	return err;
}

static enum rcs_err sink_open_file(struct artifact_sink *k)
{
	char path[PATH_MAX], id[UUID_STR_LEN];
	enum rcs_err err;

	err = artifact_mkdir(k->dir);
	snprintf(path, sizeof(path), "%s/" ARTIFACT_TMP, k->dir);
	if (err == RCS_OK)
		err = artifact_mkdir(path);
	if (err == RCS_OK)
		err = uuid_v7(id);
	if (err != RCS_OK)
		return err;
	if ((size_t)snprintf(k->tmp, sizeof(k->tmp), "%s/%s.part", path, id) >= sizeof(k->tmp))
		return RCS_ERR_TOOBIG;
	k->fd = open(k->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (k->fd < 0) {
		log_warnx("artifacts: cannot create %s: %s", k->tmp, strerror(errno));
		k->tmp[0] = '\0';
		return artifact_errno(errno);
	}
	return RCS_OK;
}

/* An upload of the database (PostgreSQL): its row, so that a coordinator that stops in
 * the middle removes its chunks at the next start (store_artifacts_sweep). */
static enum rcs_err sink_open_db(struct artifact_sink *k, int64_t now)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	k->buf = malloc(STORE_ARTIFACT_CHUNK);
	k->hex = malloc(2 * STORE_ARTIFACT_CHUNK + 1);
	if (k->buf == NULL || k->hex == NULL)
		return RCS_ERR_NOMEM;
	err = uuid_v7(k->blob_id);
	if (err != RCS_OK)
		return err;
	store_lock(k->st);
	err = store_stmt(
	    k->st, "INSERT INTO artifact_uploads(blob_id, node, started_at) VALUES(?1, ?2, ?3)",
	    &s);
	if (err == RCS_OK) {
		store_arg_text(s, 1, k->blob_id);
		store_arg_text(s, 2, store_claim_node(k->st));
		store_arg_int(s, 3, now);
		err = store_done(k->st, s, "artifact upload");
	}
	store_stmt_done(k->st, s);
	store_unlock(k->st);
	return err;
}

enum rcs_err store_artifact_sink_open(struct store *st, const char *dir, const char *client_root,
				      int64_t now, struct artifact_sink **out)
{
	struct artifact_sink *k = calloc(1, sizeof(*k));
	enum rcs_err err;

	*out = NULL;
	if (k == NULL)
		return RCS_ERR_NOMEM;
	k->st = st;
	k->fd = -1;
	k->db = store_artifacts_in_db(st);
	snprintf(k->client_root, sizeof(k->client_root), "%s", client_root);
	if ((size_t)snprintf(k->dir, sizeof(k->dir), "%s", dir ? dir : "") >= sizeof(k->dir))
		err = RCS_ERR_TOOBIG;
	else
		err = k->db ? sink_open_db(k, now) : sink_open_file(k);
	if (err != RCS_OK) {
		store_artifact_sink_free(k);
		return err;
	}
	*out = k;
	return RCS_OK;
}

/* The chunk filled so far into the database, as chunk n_chunks. */
static enum rcs_err sink_flush(struct artifact_sink *k)
{
	static const char digits[] = "0123456789abcdef";
	struct store_stmt *s = NULL;
	enum rcs_err err;

	if (k->buf_len == 0)
		return RCS_OK;
	for (size_t i = 0; i < k->buf_len; i++) {
		k->hex[2 * i] = digits[k->buf[i] >> 4];
		k->hex[2 * i + 1] = digits[k->buf[i] & 15];
	}
	store_lock(k->st);
	err = store_stmt(k->st,
			 "INSERT INTO artifact_chunks(blob_id, n, data) VALUES(?1, ?2,"
			 " decode(?3, 'hex'))",
			 &s);
	if (err == RCS_OK) {
		store_arg_text(s, 1, k->blob_id);
		store_arg_int(s, 2, k->n_chunks);
		store_arg_textn(s, 3, k->hex, 2 * k->buf_len);
		err = store_done(k->st, s, "artifact chunk");
	}
	store_stmt_done(k->st, s);
	store_unlock(k->st);
	if (err == RCS_OK) {
		k->n_chunks++;
		k->buf_len = 0;
	}
	return err;
}

enum rcs_err store_artifact_sink_write(struct artifact_sink *k, const void *data, size_t n)
{
	const unsigned char *p = data;
	enum rcs_err err = RCS_OK;

	while (n > 0 && err == RCS_OK) {
		size_t take = n;

		if (k->db) {
			if (take > STORE_ARTIFACT_CHUNK - k->buf_len)
				take = STORE_ARTIFACT_CHUNK - k->buf_len;
			memcpy(k->buf + k->buf_len, p, take);
			k->buf_len += take;
			if (k->buf_len == STORE_ARTIFACT_CHUNK)
				err = sink_flush(k);
		} else {
			ssize_t w = write(k->fd, p, take);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				log_warnx("artifacts: cannot write %s: %s", k->tmp,
					  w < 0 ? strerror(errno) : "nothing written");
				return w < 0 ? artifact_errno(errno) : RCS_ERR_IO;
			}
			take = (size_t)w;
		}
		k->size += (long long)take;
		p += take;
		n -= take;
	}
	return err;
}

long long store_artifact_sink_size(const struct artifact_sink *k)
{
	return k->size;
}

/* The temporary file fsynced and renamed to its place, the directories fsynced. */
static enum rcs_err sink_place_file(struct artifact_sink *k, const char *sha256)
{
	char path[PATH_MAX], sub[PATH_MAX];
	enum rcs_err err = RCS_OK;

	if (fsync(k->fd) != 0) {
		log_warnx("artifacts: cannot sync %s: %s", k->tmp, strerror(errno));
		return artifact_errno(errno);
	}
	if (!store_artifact_path(k->dir, k->client_root, sha256, path, sizeof(path)))
		return RCS_ERR_TOOBIG;
	snprintf(sub, sizeof(sub), "%s/%s", k->dir, k->client_root);
	err = artifact_mkdir(sub);
	snprintf(sub, sizeof(sub), "%s/%s/%.2s", k->dir, k->client_root, sha256);
	if (err == RCS_OK)
		err = artifact_mkdir(sub);
	if (err != RCS_OK)
		return err;
	if (rename(k->tmp, path) != 0) {
		log_warnx("artifacts: cannot rename %s: %s", k->tmp, strerror(errno));
		return artifact_errno(errno);
	}
	k->tmp[0] = '\0';
	return artifact_fsync_dir(sub);
}

static enum rcs_err sink_insert(struct artifact_sink *k, const struct artifact_rec *in)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;

	err = store_stmt(k->st,
			 "INSERT INTO artifacts(client_root, sha256, size, name, created_at,"
			 " created_user, blob_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, k->client_root);
	store_arg_text(s, 2, in->sha256);
	store_arg_int(s, 3, k->size);
	store_arg_text(s, 4, in->name ? in->name : "");
	store_arg_int(s, 5, in->created_at);
	store_arg_text(s, 6, in->created_user ? in->created_user : "");
	store_arg_text(s, 7, k->db ? k->blob_id : NULL);
	err = store_done(k->st, s, "artifact add");
	store_stmt_done(k->st, s);
	s = NULL;
	if (err == RCS_OK && k->db)
		err = store_stmt(k->st, "DELETE FROM artifact_uploads WHERE blob_id = ?1", &s);
	if (err == RCS_OK && k->db) {
		store_arg_text(s, 1, k->blob_id);
		err = store_done(k->st, s, "artifact upload end");
	}
out:
	store_stmt_done(k->st, s);
	return err;
}

enum rcs_err store_artifact_sink_commit(struct artifact_sink *k, const struct artifact_rec *in,
					long long quota, struct artifact_rec *out, bool *created)
{
	long long used = 0;
	enum rcs_err err;

	*created = false;
	memset(out, 0, sizeof(*out));
	err = k->db ? sink_flush(k) : RCS_OK;
	if (err != RCS_OK)
		return err;
	err = store_sp_begin(k->st);
	if (err != RCS_OK)
		return err;
	err = store_artifact_get(k->st, k->client_root, in->sha256, out);
	if (err != RCS_ERR_NOTFOUND)
		goto out; /* the tenant has these bytes (RCS_OK), or an error */
	err = store_artifacts_usage(k->st, k->client_root, &used);
	if (err == RCS_OK && quota > 0 && used + k->size > quota)
		err = RCS_ERR_CONFLICT;
	if (err == RCS_OK && !k->db)
		err = sink_place_file(k, in->sha256);
	if (err == RCS_OK)
		err = sink_insert(k, in);
	if (err == RCS_OK)
		err = store_artifact_get(k->st, k->client_root, in->sha256, out);
	if (err == RCS_OK) {
		*created = true;
		k->keep = true;
	}
out:
	return store_sp_end(k->st, err);
}

/* The chunks of an upload and its row removed (PostgreSQL). */
static void sink_drop_chunks(struct store *st, const char *blob_id)
{
	if (store_write(st, "DELETE FROM artifact_chunks WHERE blob_id = ?1", NULL, 1, blob_id) !=
		RCS_OK ||
	    store_write(st, "DELETE FROM artifact_uploads WHERE blob_id = ?1", NULL, 1, blob_id) !=
		RCS_OK)
		log_warnx("artifacts: the chunks of upload %s stay until the next start", blob_id);
}

void store_artifact_sink_free(struct artifact_sink *k)
{
	if (k == NULL)
		return;
	if (k->fd >= 0)
		close(k->fd);
	if (k->tmp[0] && unlink(k->tmp) != 0)
		log_warnx("artifacts: cannot remove %s: %s", k->tmp, strerror(errno));
	if (k->db && k->blob_id[0] && !k->keep)
		sink_drop_chunks(k->st, k->blob_id);
	free(k->buf);
	free(k->hex);
	free(k);
}

/* ---- deletes, the sweep at start, reads ---- */

/* A deleted artifact's file, removed once the delete committed. */
struct artifact_gone {
	struct store *st;
	char client_root[UUID_STR_LEN];
	char sha256[65];
	char path[PATH_MAX];
};

/* Under the store's lock, and only while the tenant has no record of these bytes: an
 * upload of the same bytes may have committed between the delete's commit and this (its
 * file renamed into the same place), and its file stays. */
static void artifact_unlink_after(void *arg, bool committed)
{
	struct artifact_gone *g = arg;
	struct artifact_rec r;
	enum rcs_err err;

	if (committed) {
		store_lock(g->st);
		err = store_artifact_get(g->st, g->client_root, g->sha256, &r);
		if (err == RCS_OK)
			store_artifact_rec_free(&r);
		else if (err == RCS_ERR_NOTFOUND && unlink(g->path) != 0 && errno != ENOENT)
			log_warnx("artifacts: cannot remove %s: %s", g->path, strerror(errno));
		store_unlock(g->st);
	}
	free(g);
}

enum rcs_err store_artifact_delete(struct store *st, const char *dir, const char *client_root,
				   const char *sha256)
{
	struct artifact_rec r;
	struct artifact_gone *g = NULL;
	enum rcs_err err;
	bool in_use = false;
	int n = 0;

	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_artifact_get(st, client_root, sha256, &r);
	if (err != RCS_OK)
		goto out;
	err = store_artifact_in_use(st, client_root, sha256, &in_use);
	if (err == RCS_OK && in_use)
		err = RCS_ERR_CONFLICT;
	if (err == RCS_OK)
		err =
		    store_write(st, "DELETE FROM artifacts WHERE client_root = ?1 AND sha256 = ?2",
				&n, 2, client_root, sha256);
	if (err == RCS_OK && n == 0)
		err = RCS_ERR_NOTFOUND;
	if (err == RCS_OK && r.blob_id[0])
		err = store_write(st, "DELETE FROM artifact_chunks WHERE blob_id = ?1", NULL, 1,
				  r.blob_id);
	else if (err == RCS_OK && dir && (g = calloc(1, sizeof(*g))) == NULL)
		err = RCS_ERR_NOMEM;
	else if (err == RCS_OK && dir &&
		 store_artifact_path(dir, client_root, sha256, g->path, sizeof(g->path))) {
		g->st = st;
		snprintf(g->client_root, sizeof(g->client_root), "%s", client_root);
		snprintf(g->sha256, sizeof(g->sha256), "%s", sha256);
		err = store_after_commit(st, artifact_unlink_after, g);
		if (err == RCS_OK)
			g = NULL; /* the action's */
	}
	free(g);
	store_artifact_rec_free(&r);
out:
	return store_sp_end(st, err);
}

/* A row is there (store_get_one). */
static enum rcs_err artifact_row_found(struct store_stmt *s, void *arg)
{
	(void)s;
	*(bool *)arg = true;
	return RCS_OK;
}

enum rcs_err store_artifact_in_use(struct store *st, const char *client_root, const char *sha256,
				   bool *in_use)
{
	enum rcs_err err;

	*in_use = false;
	err = store_get_one(st,
			    "SELECT 1 FROM task_artifacts ta WHERE ta.client_root = ?1 AND"
			    " ta.sha256 = ?2 AND (EXISTS (SELECT 1 FROM tasks t WHERE"
			    " t.ident = ta.task_ident AND t.version = ta.version AND t.deleted = 0)"
			    " OR EXISTS (SELECT 1 FROM jobs j WHERE j.client_root = ?1 AND"
			    " j.task_ident = ta.task_ident AND j.task_version = ta.version AND"
			    " j.status IN " JOBS_OPEN_LIST ")) LIMIT 1",
			    client_root, sha256, NULL, artifact_row_found, in_use);
	return err == RCS_ERR_NOTFOUND ? RCS_OK : err;
}

enum rcs_err store_artifact_used_by(struct store *st, const char *client_root, const char *sha256,
				    struct store_idents *out)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	bool row = false;

	memset(out, 0, sizeof(*out));
	store_lock(st);
	err = store_stmt(st,
			 "SELECT t.ident FROM task_artifacts ta JOIN tasks t ON t.ident ="
			 " ta.task_ident AND t.version = ta.version AND t.deleted = 0 WHERE"
			 " ta.client_root = ? AND ta.sha256 = ? GROUP BY t.ident ORDER BY t.ident"
			 " LIMIT 100",
			 &s);
	if (err != RCS_OK)
		goto out;
	store_arg_text(s, 1, client_root);
	store_arg_text(s, 2, sha256);
	while ((err = store_next(st, s, "artifact used by", &row)) == RCS_OK && row) {
		void *p = realloc(out->v, (out->n + 1) * sizeof(*out->v));

		if (p == NULL) {
			err = RCS_ERR_NOMEM;
			break;
		}
		out->v = p;
		store_val_copy(s, 0, out->v[out->n++], UUID_STR_LEN);
	}
out:
	store_stmt_done(st, s);
	store_unlock(st);
	if (err != RCS_OK)
		store_idents_free(out);
	return err;
}

static enum rcs_err sweep_dir(const char *dir)
{
	char path[PATH_MAX], f[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "%s/" ARTIFACT_TMP, dir);
	d = opendir(path);
	if (d == NULL)
		return errno == ENOENT ? RCS_OK : RCS_ERR_IO;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(f, sizeof(f), "%s/%s", path, e->d_name) < sizeof(f) &&
		    unlink(f) == 0)
			n++;
	}
	closedir(d);
	if (n > 0)
		log_info("artifacts: removed %d temporary file(s) of uploads that did not end", n);
	return RCS_OK;
}

enum rcs_err store_artifacts_sweep(struct store *st, const char *dir, const char *node, int64_t now)
{
	char before[24];
	enum rcs_err err;

	if (!store_artifacts_in_db(st))
		return dir ? sweep_dir(dir) : RCS_OK;
	snprintf(before, sizeof(before), "%lld", (long long)(now - 86400));
	err = store_write(st,
			  "DELETE FROM artifact_chunks WHERE blob_id IN (SELECT blob_id FROM"
			  " artifact_uploads WHERE node = ?1 OR started_at < CAST(?2 AS INTEGER))",
			  NULL, 2, node ? node : "", before);
	if (err == RCS_OK)
		err = store_write(st,
				  "DELETE FROM artifact_uploads WHERE node = ?1 OR started_at <"
				  " CAST(?2 AS INTEGER)",
				  NULL, 2, node ? node : "", before);
	return err;
}

struct chunk_out {
	unsigned char *buf;
	size_t cap, got;
};

static enum rcs_err chunk_row(struct store_stmt *s, void *arg)
{
	struct chunk_out *o = arg;
	const char *t = store_val_text(s, 0);
	size_t len = store_val_len(s, 0);

	if (t == NULL || len % 2 != 0 || len / 2 > o->cap)
		return RCS_ERR_DB;
	if (!text_hex_decode(t, len / 2, o->buf))
		return RCS_ERR_DB;
	o->got = len / 2;
	return RCS_OK;
}

enum rcs_err store_artifact_chunk(struct store *st, const char *blob_id, long long n, void *buf,
				  size_t cap, size_t *got)
{
	struct chunk_out o = {buf, cap, 0};
	char num[24];
	enum rcs_err err;

	snprintf(num, sizeof(num), "%lld", n);
	err = store_get_one(st,
			    "SELECT encode(data, 'hex') FROM artifact_chunks WHERE blob_id = ?1 AND"
			    " n = CAST(?2 AS INTEGER)",
			    blob_id, num, NULL, chunk_row, &o);
	*got = o.got;
	return err;
}
