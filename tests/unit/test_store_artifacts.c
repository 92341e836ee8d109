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

#include "store.h"
#include "store_artifacts.h"
#include "store_int.h"
#include "store_keys.h"
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
