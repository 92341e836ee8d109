/*
 * Unit tests of the store's artifacts (coordinator/store_artifacts.c) on a real SQLite file
 * (the bytes as files under the artifact directory) or, in the .pg variant, on PostgreSQL
 * (the bytes as chunks of at most 1 MiB in the database).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "art_token.h"
#include "manifest.h"
#include "store.h"
#include "store_artifacts.h"
#include "store_downloads.h"
#include "store_int.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "store_test_db.h"

#define NOW   1700000000LL
#define SHA_A "aa00000000000000000000000000000000000000000000000000000000000001"
#define SHA_B "bb00000000000000000000000000000000000000000000000000000000000002"

struct fixture {
	char dir[64];
	char path[128];
	char adir[96];
	struct store *st;
	char root[UUID_STR_LEN];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_true(store_test_dir_db("arts", f->dir, sizeof(f->dir), f->path, sizeof(f->path)));
	snprintf(f->adir, sizeof(f->adir), "%s/artifacts", f->dir);
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(uuid_v7(f->root), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, f->root, 100), RCS_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	store_close(f->st);
	if (!store_test_dir_gone(f->dir))
		return 1;
	free(f);
	return 0;
}

/* The files in the upload's temporary directory. */
static int tmp_files(const struct fixture *f)
{
	char p[160];
	struct dirent *e;
	DIR *d;
	int n = 0;

	snprintf(p, sizeof(p), "%s/.tmp", f->adir);
	d = opendir(p);
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static long long db_count(const struct fixture *f, const char *sql)
{
	return store_test_db_int(f->path, sql, NULL);
}

/* Uploads len bytes of value c (in pieces of 7777) as sha: the store's answer. */
static enum rcs_err upload(struct fixture *f, const char *sha, size_t len, int c, long long quota,
			   bool *created, struct artifact_rec *out)
{
	struct artifact_sink *k = NULL;
	struct artifact_rec in = {.name = "fw.bin", .created_at = NOW, .created_user = "ann"};
	unsigned char piece[7777];
	enum rcs_err err;

	memset(piece, c, sizeof(piece));
	snprintf(in.sha256, sizeof(in.sha256), "%s", sha);
	assert_int_equal(store_artifact_sink_open(f->st, f->adir, f->root, NOW, &k), RCS_OK);
	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(piece) ? len - done : sizeof(piece);

		assert_int_equal(store_artifact_sink_write(k, piece, n), RCS_OK);
		done += n;
	}
	assert_int_equal(store_artifact_sink_size(k), (long long)len);
	err = store_artifact_sink_commit(k, &in, quota, out, created);
	store_artifact_sink_free(k);
	return err;
}

/* The stored bytes of sha, all of value c and len long (a file, or the chunks). */
static void check_bytes(struct fixture *f, const char *sha, size_t len, int c)
{
	struct artifact_rec r;
	unsigned char *buf = malloc(STORE_ARTIFACT_CHUNK);
	size_t total = 0, got = 0;

	assert_non_null(buf);
	assert_int_equal(store_artifact_get(f->st, f->root, sha, &r), RCS_OK);
	assert_int_equal(r.size, (long long)len);
	if (store_artifacts_in_db(f->st)) {
		for (long long n = 0;; n++) {
			enum rcs_err err = store_artifact_chunk(f->st, r.blob_id, n, buf,
								STORE_ARTIFACT_CHUNK, &got);
			if (err == RCS_ERR_NOTFOUND)
				break;
			assert_int_equal(err, RCS_OK);
			assert_true(got <= STORE_ARTIFACT_CHUNK);
			for (size_t i = 0; i < got; i++)
				assert_int_equal(buf[i], c);
			total += got;
		}
	} else {
		char p[256];
		FILE *fp;

		assert_true(store_artifact_path(f->adir, f->root, sha, p, sizeof(p)));
		fp = fopen(p, "rb");
		assert_non_null(fp);
		while ((got = fread(buf, 1, STORE_ARTIFACT_CHUNK, fp)) > 0) {
			for (size_t i = 0; i < got; i++)
				assert_int_equal(buf[i], c);
			total += got;
		}
		fclose(fp);
	}
	assert_int_equal(total, len);
	store_artifact_rec_free(&r);
	free(buf);
}

/* An upload makes its record once committed, at <dir>/<root>/<2 hex>/<sha> or in chunks
 * of 1 MiB; the same bytes again are the record there is, and leave nothing behind. */
static void test_upload_dedupe(void **state)
{
	struct fixture *f = *state;
	size_t len = 2 * STORE_ARTIFACT_CHUNK + 12345;
	struct artifact_rec r;
	bool created = false;
	long long used = 0;

	assert_int_equal(upload(f, SHA_A, len, 'a', 0, &created, &r), RCS_OK);
	assert_true(created);
	assert_string_equal(r.sha256, SHA_A);
	assert_int_equal(r.size, (long long)len);
	assert_string_equal(r.name, "fw.bin");
	assert_string_equal(r.created_user, "ann");
	assert_int_equal(r.created_at, NOW);
	store_artifact_rec_free(&r);
	check_bytes(f, SHA_A, len, 'a');
	if (store_artifacts_in_db(f->st))
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 3);
	assert_int_equal(upload(f, SHA_A, len, 'a', 0, &created, &r), RCS_OK);
	assert_false(created);
	assert_int_equal(r.created_at, NOW);
	store_artifact_rec_free(&r);
	assert_int_equal(tmp_files(f), 0);
	if (store_artifacts_in_db(f->st)) {
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 3);
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_uploads"), 0);
	}
	assert_int_equal(store_artifacts_usage(f->st, f->root, &used), RCS_OK);
	assert_int_equal(used, (long long)len);
	assert_int_equal(store_artifact_get(f->st, "other", SHA_A, &r), RCS_ERR_NOTFOUND);
}

/* Over the quota: RCS_ERR_CONFLICT and nothing kept; an empty artifact is one. */
static void test_quota(void **state)
{
	struct fixture *f = *state;
	struct artifact_rec r;
	bool created = true;

	assert_int_equal(upload(f, SHA_A, 1000, 'a', 1500, &created, &r), RCS_OK);
	store_artifact_rec_free(&r);
	assert_int_equal(upload(f, SHA_B, 501, 'b', 1500, &created, &r), RCS_ERR_CONFLICT);
	assert_false(created);
	assert_int_equal(store_artifact_get(f->st, f->root, SHA_B, &r), RCS_ERR_NOTFOUND);
	assert_int_equal(tmp_files(f), 0);
	assert_int_equal(db_count(f, "SELECT count(*) FROM artifacts"), 1);
	if (store_artifacts_in_db(f->st))
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 1);
	assert_int_equal(upload(f, SHA_B, 0, 'b', 1500, &created, &r), RCS_OK);
	assert_true(created);
	assert_int_equal(r.size, 0);
	store_artifact_rec_free(&r);
	check_bytes(f, SHA_B, 0, 'b');
}

/* An upload ended without its commit leaves nothing; what a crash left is swept at start. */
static void test_abort_sweep(void **state)
{
	struct fixture *f = *state;
	struct artifact_sink *k = NULL;

	assert_int_equal(store_artifact_sink_open(f->st, f->adir, f->root, NOW, &k), RCS_OK);
	assert_int_equal(store_artifact_sink_write(k, "abc", 3), RCS_OK);
	if (!store_artifacts_in_db(f->st))
		assert_int_equal(tmp_files(f), 1);
	store_artifact_sink_free(k);
	assert_int_equal(tmp_files(f), 0);
	assert_int_equal(db_count(f, "SELECT count(*) FROM artifacts"), 0);
	if (store_artifacts_in_db(f->st)) {
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 0);
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_uploads"), 0);
	}
	/* a crash: the temporary file or the upload's row and chunks stay */
	if (!store_artifacts_in_db(f->st)) {
		char p[192];
		FILE *fp;

		(void)mkdir(f->adir, 0700); /* made by the upload on SQLite */
		snprintf(p, sizeof(p), "%s/.tmp", f->adir);
		(void)mkdir(p, 0700);
		snprintf(p, sizeof(p), "%s/.tmp/left.part", f->adir);
		fp = fopen(p, "w");
		assert_non_null(fp);
		fclose(fp);
		assert_int_equal(tmp_files(f), 1);
	} else {
		assert_int_equal(
		    store_write(f->st,
				"INSERT INTO artifact_uploads(blob_id, node, started_at)"
				" VALUES('b1', 'n1', 1700000000), ('b2', 'n2', 1700000000),"
				" ('b3', 'n2', 1600000000)",
				NULL, 0),
		    RCS_OK);
		assert_int_equal(
		    store_write(f->st,
				"INSERT INTO artifact_chunks(blob_id, n, data) VALUES"
				"('b1', 0, decode('00', 'hex')), ('b2', 0, decode('00',"
				" 'hex')), ('b3', 0, decode('00', 'hex'))",
				NULL, 0),
		    RCS_OK);
	}
	assert_int_equal(store_artifacts_sweep(f->st, f->adir, "n1", NOW), RCS_OK);
	assert_int_equal(tmp_files(f), 0);
	if (store_artifacts_in_db(f->st)) {
		/* another coordinator's upload begun within the day stays */
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 1);
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_uploads"), 1);
	}
}

/* A delete takes the record and, once committed, the bytes; a rolled back one keeps both, and
 * so does one whose bytes came back before its commit. */
static void test_delete(void **state)
{
	struct fixture *f = *state;
	struct artifact_rec r;
	bool created;
	char p[256];

	assert_int_equal(upload(f, SHA_A, 5000, 'a', 0, &created, &r), RCS_OK);
	store_artifact_rec_free(&r);
	assert_true(store_artifact_path(f->adir, f->root, SHA_A, p, sizeof(p)));
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_OK);
	assert_int_equal(store_tx_end(f->st, false), RCS_OK);
	check_bytes(f, SHA_A, 5000, 'a');
	assert_int_equal(store_artifact_delete(f->st, f->adir, "other", SHA_A), RCS_ERR_NOTFOUND);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_OK);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	assert_int_equal(store_artifact_get(f->st, f->root, SHA_A, &r), RCS_ERR_NOTFOUND);
	assert_int_equal(access(p, F_OK), -1);
	if (store_artifacts_in_db(f->st))
		assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_chunks"), 0);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_ERR_NOTFOUND);
	/* the same bytes uploaded again once the delete is made, before its file is removed:
	 * the new file stays */
	assert_int_equal(upload(f, SHA_A, 5000, 'a', 0, &created, &r), RCS_OK);
	store_artifact_rec_free(&r);
	assert_int_equal(store_tx_begin(f->st), RCS_OK);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_OK);
	assert_int_equal(upload(f, SHA_A, 5000, 'a', 0, &created, &r), RCS_OK);
	assert_true(created);
	store_artifact_rec_free(&r);
	assert_int_equal(store_tx_end(f->st, true), RCS_OK);
	check_bytes(f, SHA_A, 5000, 'a');
}

/* The list: newest first, filtered by name, paged. */
/* A task of version version pinning sha as "fw" (n_arts 0: none). */
static void put_task(struct fixture *f, const char *ident, long long version, const char *sha)
{
	static const char src[] = "return 1";
	struct task_artifact art = {.name = "fw", .sha256 = sha, .size = 5000};
	struct task_write t;
	char ssha[65], rec[200], sig[200];

	memset(&t, 0, sizeof(t));
	sha256_hex(src, strlen(src), ssha);
	assert_int_equal(store_script_put(f->st, f->root, "s", src, strlen(src), NOW, NULL),
			 RCS_OK);
	t.ident = ident;
	t.client_root = f->root;
	t.version = version;
	t.name = "update";
	t.script = "s";
	t.script_src = src;
	t.script_len = strlen(src);
	t.script_sha256 = ssha;
	t.created_user = "ann";
	t.timeout = 60;
	if (sha != NULL) {
		snprintf(rec, sizeof(rec),
			 "{\"fw\":{\"ident\":\"sha256:%s\",\"size\":5000,\"name\":\"x\"}}", sha);
		snprintf(sig, sizeof(sig), "{\"fw\":{\"sha256\":\"%s\",\"size\":5000}}", sha);
		t.artifacts = rec;
		t.artifacts_signed = sig;
		t.arts = &art;
		t.n_arts = 1;
		t.release =
		    "{\"stream\":\"s\",\"seq\":1,\"device_types\":[],\"allow_downgrade\":false}";
		t.download_timeout = 600;
	}
	assert_int_equal(store_task_put(f->st, &t, version == 1), RCS_OK);
}

static bool in_use(struct fixture *f, const char *sha)
{
	bool used = true;

	assert_int_equal(store_artifact_in_use(f->st, f->root, sha, &used), RCS_OK);
	return used;
}

/* What pins an artifact: a task's current version, a job not yet ended of any version; a
 * delete is refused meanwhile (docs/api.md, "Artifacts"). */
static void test_in_use(void **state)
{
	struct fixture *f = *state;
	struct artifact_rec out;
	struct store_idents ids;
	struct task_version tv;
	struct task_rec tr;
	char task[UUID_STR_LEN], sql[600];
	bool created;

	assert_int_equal(upload(f, SHA_A, 5000, 'a', 0, &created, &out), RCS_OK);
	store_artifact_rec_free(&out);
	assert_false(in_use(f, SHA_A));
	assert_int_equal(uuid_v7(task), RCS_OK);
	put_task(f, task, 1, SHA_A);
	assert_true(in_use(f, SHA_A));
	assert_int_equal(store_artifact_used_by(f->st, f->root, SHA_A, &ids), RCS_OK);
	assert_int_equal(ids.n, 1);
	assert_string_equal(ids.v[0], task);
	store_idents_free(&ids);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_ERR_CONFLICT);
	/* the record and the version keep the artifacts, the release and the deadline */
	assert_int_equal(store_task_get(f->st, f->root, task, &tr), RCS_OK);
	assert_non_null(strstr(tr.artifacts, SHA_A));
	assert_non_null(strstr(tr.release, "\"stream\""));
	assert_int_equal(tr.download_timeout, 600);
	store_task_rec_free(&tr);
	assert_int_equal(store_task_version_get(f->st, task, 1, &tv), RCS_OK);
	assert_non_null(strstr(tv.artifacts, "\"sha256\""));
	assert_null(strstr(tv.artifacts, "ident"));
	assert_int_equal(tv.download_timeout, 600);
	store_task_version_free(&tv);

	/* version 2 pins none: a job of version 1 not yet ended still needs it */
	put_task(f, task, 2, NULL);
	assert_false(in_use(f, SHA_A));
	assert_int_equal(store_task_version_get(f->st, task, 2, &tv), RCS_OK);
	assert_null(tv.artifacts);
	assert_int_equal(tv.download_timeout, 86400);
	store_task_version_free(&tv);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
		 " entity_ident, status, created_user, created_at, update_at, variables, mail_list,"
		 " status_list, task_mail_list, task_status_list) VALUES('%s', '%s', '%s', 1, 'u',"
		 " 'd', 'edge_running', 'ann', 1, 1, '{}', '[]', '[]', '[]', '[]')",
		 task, f->root, task);
	assert_int_equal(store_write(f->st, sql, NULL, 0), RCS_OK);
	assert_true(in_use(f, SHA_A));
	assert_int_equal(store_artifact_used_by(f->st, f->root, SHA_A, &ids), RCS_OK);
	assert_int_equal(ids.n, 0); /* used_by names tasks' current versions only */
	store_idents_free(&ids);
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_ERR_CONFLICT);
	assert_int_equal(store_write(f->st, "UPDATE jobs SET status = 'terminated'", NULL, 0),
			 RCS_OK);
	assert_false(in_use(f, SHA_A));
	assert_int_equal(store_artifact_delete(f->st, f->adir, f->root, SHA_A), RCS_OK);
}

/* Artifact tokens: made and checked by every coordinator of a database (the secret is in
 * it), a byte changed or another database's token refused, a rotated secret still verifying
 * the tokens it made. */
static void test_tokens(void **state)
{
	static const char job[] = "0192f0a1-7c3e-7d4b-9a2f-3e4d5c6b7a81";
	static const char dev[] = "0192f0a1-7c3e-7d4b-9a2f-3e4d5c6b7a82";
	struct fixture *f = *state;
	struct art_tokens *t1 = NULL, *t2 = NULL;
	char tok[ART_TOKEN_MAX], bad[ART_TOKEN_MAX], j[UUID_STR_LEN], d[UUID_STR_LEN],
	    c[UUID_STR_LEN];

	assert_int_equal(art_tokens_open(f->st, NOW, &t1), RCS_OK);
	assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_secrets"), 1);
	assert_int_equal(art_token_make(t1, job, dev, f->root, NOW, tok), RCS_OK);
	assert_memory_equal(tok, "rcs1.", 5);
	assert_int_equal(strlen(tok), 5 + 118);
	assert_int_equal(art_token_check(t1, tok, j, d, c), RCS_OK);
	assert_string_equal(j, job);
	assert_string_equal(d, dev);
	assert_string_equal(c, f->root);
	/* another coordinator of the database: the same secret */
	assert_int_equal(art_tokens_open(f->st, NOW, &t2), RCS_OK);
	assert_int_equal(db_count(f, "SELECT count(*) FROM artifact_secrets"), 1);
	assert_int_equal(art_token_check(t2, tok, j, d, c), RCS_OK);
	/* every byte counts */
	for (size_t i = 5; i < strlen(tok); i += 7) {
		snprintf(bad, sizeof(bad), "%s", tok);
		bad[i] = bad[i] == 'A' ? 'B' : 'A';
		assert_int_equal(art_token_check(t1, bad, j, d, c), RCS_ERR_AUTH);
	}
	assert_int_equal(art_token_check(t1, tok + 1, j, d, c), RCS_ERR_AUTH);
	assert_int_equal(art_token_check(t1, "rcs1.", j, d, c), RCS_ERR_AUTH);
	assert_int_equal(art_token_check(t1, "", j, d, c), RCS_ERR_AUTH);
	assert_int_equal(art_token_make(t1, "not-a-uuid", dev, f->root, NOW, bad), RCS_ERR_INVAL);
	/* a new secret signs from then on; the old one still verifies */
	art_tokens_free(t2);
	assert_int_equal(store_token_secret_add(f->st, NOW + 1), RCS_OK);
	assert_int_equal(art_tokens_open(f->st, NOW + 1, &t2), RCS_OK);
	assert_int_equal(art_token_make(t2, job, dev, f->root, NOW + 1, bad), RCS_OK);
	assert_string_not_equal(bad, tok);
	assert_int_equal(art_token_check(t2, tok, j, d, c), RCS_OK);
	assert_int_equal(art_token_check(t2, bad, j, d, c), RCS_OK);
	art_tokens_free(t1);
	art_tokens_free(t2);
	/* another database's secret: refused */
	assert_int_equal(store_write(f->st, "DELETE FROM artifact_secrets", NULL, 0), RCS_OK);
	assert_int_equal(art_tokens_open(f->st, NOW, &t1), RCS_OK);
	assert_int_equal(art_token_check(t1, tok, j, d, c), RCS_ERR_AUTH);
	art_tokens_free(t1);
}

/* The bytes served per job: each download holds its length from its start, gives back what
 * it did not send, and none begins once the cap is reached; the first of each artifact says
 * so (audited once). */
static void test_download_accounting(void **state)
{
	static const char job[] = "0192f0a1-7c3e-7d4b-9a2f-3e4d5c6b7a81";
	struct fixture *f = *state;
	long long served = -1;
	bool first = false;

	assert_int_equal(store_job_download_begin(f->st, job, SHA_A, 400, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 0);
	assert_true(first);
	assert_int_equal(store_job_download_begin(f->st, job, SHA_A, 400, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 400);
	assert_false(first);
	/* the second was cut after 100 bytes */
	assert_int_equal(store_job_download_end(f->st, job, SHA_A, 400, 100), RCS_OK);
	assert_int_equal(store_job_download_begin(f->st, job, SHA_B, 450, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 500);
	assert_true(first);
	assert_int_equal(store_job_download_begin(f->st, job, SHA_B, 10, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 950);
	/* 960 of 1000: one more begins, then none */
	assert_int_equal(store_job_download_begin(f->st, job, SHA_A, 400, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 960);
	assert_int_equal(store_job_download_begin(f->st, job, SHA_A, 1, 1000, &served, &first),
			 RCS_OK);
	assert_int_equal(served, 1360);
	assert_int_equal(db_count(f, "SELECT sum(bytes) FROM job_downloads"), 1360);
}

static void test_list(void **state)
{
	struct fixture *f = *state;
	struct store_artifact_list l;
	struct store_page pg = {.page = 1, .per_page = 1, .desc = true};
	struct artifact_sink *k = NULL;
	struct artifact_rec in = {
	    .sha256 = SHA_B, .name = "other", .created_at = NOW + 5, .created_user = "bob"};
	struct artifact_rec r;
	bool created;

	assert_int_equal(upload(f, SHA_A, 10, 'a', 0, &created, &r), RCS_OK);
	store_artifact_rec_free(&r);
	assert_int_equal(store_artifact_sink_open(f->st, f->adir, f->root, NOW, &k), RCS_OK);
	assert_int_equal(store_artifact_sink_write(k, "xy", 2), RCS_OK);
	assert_int_equal(store_artifact_sink_commit(k, &in, 0, &r, &created), RCS_OK);
	store_artifact_sink_free(k);
	store_artifact_rec_free(&r);
	assert_int_equal(store_artifacts_list(f->st, f->root, &pg, &l), RCS_OK);
	assert_int_equal(l.pg.total, 2);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].sha256, SHA_B);
	store_artifact_list_free(&l);
	pg.page = 2;
	assert_int_equal(store_artifacts_list(f->st, f->root, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].sha256, SHA_A);
	store_artifact_list_free(&l);
	pg.page = 1;
	pg.per_page = 10;
	pg.name = "fw.bin";
	assert_int_equal(store_artifacts_list(f->st, f->root, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].sha256, SHA_A);
	store_artifact_list_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_upload_dedupe, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_quota, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abort_sweep, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_in_use, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_download_accounting, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
