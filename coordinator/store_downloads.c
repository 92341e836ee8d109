/*
 * store_downloads.c - token secrets, the artifacts of a job, the bytes served per job. See
 * store_downloads.h; store_int.h for what the store's files share.
 */
#include "store_downloads.h"

#include <stdio.h>
#include <string.h>

#include "store_int.h"
#include "uuid.h"

enum rcs_err store_token_secret_add(struct store *st, int64_t now)
{
	char hex[STORE_TOKEN_SECRET_HEX + 1], at[24];
	enum rcs_err err = rcs_random_hex(hex, STORE_TOKEN_SECRET_HEX / 2);

	snprintf(at, sizeof(at), "%lld", (long long)now);
	if (err == RCS_OK)
		err = store_write(st,
				  "INSERT INTO artifact_secrets(secret, created_at)"
				  " VALUES(?, CAST(? AS INTEGER))",
				  NULL, 2, hex, at);
	explicit_bzero(hex, sizeof(hex));
	return err;
}

static enum rcs_err secrets_read(struct store *st, char (*out)[STORE_TOKEN_SECRET_HEX + 1],
				 size_t max, size_t *n)
{
	struct store_stmt *s = NULL;
	enum rcs_err err;
	bool row = false;

	*n = 0;
	store_lock(st);
	err = store_stmt(st, "SELECT secret FROM artifact_secrets ORDER BY id DESC", &s);
	while (err == RCS_OK && (err = store_next(st, s, "token secrets", &row)) == RCS_OK && row &&
	       *n < max) {
		store_val_copy(s, 0, out[*n], STORE_TOKEN_SECRET_HEX + 1);
		if (strlen(out[*n]) == STORE_TOKEN_SECRET_HEX)
			(*n)++;
	}
	store_stmt_done(st, s);
	store_unlock(st);
	return err;
}

enum rcs_err store_token_secrets(struct store *st, int64_t now,
				 char (*out)[STORE_TOKEN_SECRET_HEX + 1], size_t max, size_t *n)
{
	enum rcs_err err = secrets_read(st, out, max, n);

	if (err == RCS_OK && *n == 0) {
		err = store_token_secret_add(st, now);
		if (err == RCS_OK)
			err = secrets_read(st, out, max, n);
	}
	if (err == RCS_OK && *n == 0)
		err = RCS_ERR_DB;
	return err;
}

/* size and the version's total of the row of store_job_artifact */
struct job_artifact_row {
	long long size, total;
};

static enum rcs_err job_artifact_row(struct store_stmt *s, void *arg)
{
	struct job_artifact_row *r = arg;

	r->size = store_val_int(s, 0);
	r->total = store_val_int(s, 1);
	return RCS_OK;
}

enum rcs_err store_job_artifact(struct store *st, const char *job, const char *sha256,
				long long *size, long long *total)
{
	struct job_artifact_row r = {0, 0};
	enum rcs_err err;

	err =
	    store_get_one(st,
			  "SELECT ta.size, (SELECT sum(t2.size) FROM task_artifacts t2 WHERE"
			  " t2.task_ident = ta.task_ident AND t2.version = ta.version) FROM jobs j"
			  " JOIN task_artifacts ta ON ta.task_ident = j.task_ident AND"
			  " ta.version = j.task_version AND ta.client_root = j.client_root"
			  " WHERE j.ident = ? AND ta.sha256 = ? LIMIT 1",
			  job, sha256, NULL, job_artifact_row, &r);
	*size = r.size;
	*total = r.total;
	return err;
}

enum rcs_err store_job_download_begin(struct store *st, const char *job, const char *sha256,
				      long long len, long long cap, long long *served, bool *first)
{
	char n[24];
	int changes = 0;
	enum rcs_err err;

	*served = 0;
	*first = false;
	snprintf(n, sizeof(n), "%lld", len);
	err = store_sp_begin(st);
	if (err != RCS_OK)
		return err;
	err = store_write(st,
			  "INSERT INTO job_downloads(job_ident, sha256, bytes) VALUES(?, ?, 0)"
			  " ON CONFLICT DO NOTHING",
			  &changes, 2, job, sha256);
	*first = err == RCS_OK && changes > 0;
	if (err == RCS_OK)
		err = store_get_one(st, "SELECT sum(bytes) FROM job_downloads WHERE job_ident = ?",
				    job, NULL, NULL, store_row_int, served);
	if (err == RCS_OK && *served < cap)
		err = store_write(st,
				  "UPDATE job_downloads SET bytes = bytes + CAST(? AS INTEGER)"
				  " WHERE job_ident = ? AND sha256 = ?",
				  NULL, 3, n, job, sha256);
	return store_sp_end(st, err);
}

enum rcs_err store_job_download_end(struct store *st, const char *job, const char *sha256,
				    long long len, long long sent)
{
	char n[24];

	if (sent >= len)
		return RCS_OK;
	snprintf(n, sizeof(n), "%lld", len - sent);
	return store_write(st,
			   "UPDATE job_downloads SET bytes = bytes - CAST(? AS INTEGER)"
			   " WHERE job_ident = ? AND sha256 = ?",
			   NULL, 3, n, job, sha256);
}
