/*
 * test_artifact.c - the agent's artifacts on their own (docs/agent.md "Artifacts"): the
 * envelope's "artifacts" (agent/artifact.c), the part file and its resume after a lost
 * connection, a kill or a power cut (agent/fetch.c), the offsets in the journal, the
 * cache's trim, the artifact options (agent/settings.c). The HTTP transfer itself runs
 * against a real server in tests/integration/test_agent_artifacts.py.
 */
#define _FILE_OFFSET_BITS 64
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "artifact.h"
#include "fetch.h"
#include "journal.h"
#include "manifest.h"
#include "proto.h"
#include "settings.h"

#define ROOT   "01a1ff99-08fb-74ea-982c-1b51c9f30e75"
#define ENTITY "01a1ff99-0b8c-7a13-badb-096b33a537d7"
#define SHA_A  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

struct fx {
	char dir[64];
	int dirfd;
	struct journal *journal;
	/* offsets the part file journaled, in order */
	int64_t journaled[64];
	int njournaled;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-artifact-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->dirfd = open(f->dir, O_RDONLY | O_DIRECTORY);
	assert_true(f->dirfd >= 0);
	assert_int_equal(journal_open(f->dir, &f->journal), RCS_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	journal_close(f->journal);
	close(f->dirfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static enum rcs_err record_offset(void *ctx, const char *sha256, int64_t offset)
{
	struct fx *f = ctx;

	assert_true(f->njournaled < 64);
	f->journaled[f->njournaled++] = offset;
	return journal_download_set(f->journal, sha256, offset);
}

/* n bytes of a pattern that differs per offset (so a wrong resume shows in the hash). */
static unsigned char *pattern(size_t n)
{
	unsigned char *p = malloc(n);

	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + (i >> 12)) & 0xff);
	return p;
}

static int64_t file_size(struct fx *f, const char *name)
{
	struct stat st;

	if (fstatat(f->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return -1;
	return (int64_t)st.st_size;
}

/* ---- the envelope ---- */

static enum rcs_err decode(const char *json, struct artifact_set *set, char *reason, size_t n)
{
	json_object *o = json_tokener_parse(json);
	enum rcs_err err;

	assert_non_null(o);
	err = artifact_set_decode(o, set, reason, n);
	json_object_put(o);
	return err;
}

static void test_envelope_artifacts(void **state)
{
	struct artifact_set set;
	char reason[256], json[4096];
	static const char *const bad[] = {
	    /* a name outside [a-z0-9_][a-z0-9_.-]{0,63} */
	    "{\"artifacts\":{\"Fw\":{\"sha256\":\"" SHA_A
	    "\",\"size\":1}},\"artifact_token\":\"t\"}",
	    "{\"artifacts\":{\".fw\":{\"sha256\":\"" SHA_A
	    "\",\"size\":1}},\"artifact_token\":\"t\"}",
	    /* a hash that is not 64 lowercase hex, a negative size, a member more */
	    "{\"artifacts\":{\"fw\":{\"sha256\":\"ABC\",\"size\":1}},\"artifact_token\":\"t\"}",
	    "{\"artifacts\":{\"fw\":{\"sha256\":\"" SHA_A
	    "\",\"size\":-1}},\"artifact_token\":\"t\"}",
	    "{\"artifacts\":{\"fw\":{\"sha256\":\"" SHA_A "\",\"size\":1,\"url\":\"x\"}},"
	    "\"artifact_token\":\"t\"}",
	    /* artifacts without a token, a token with a space, a timeout out of range */
	    "{\"artifacts\":{\"fw\":{\"sha256\":\"" SHA_A "\",\"size\":1}}}",
	    "{\"artifacts\":{\"fw\":{\"sha256\":\"" SHA_A "\",\"size\":1}},\"artifact_token\":\"a "
	    "b\"}",
	    "{\"download_timeout\":59}",
	    "{\"artifacts\":[]}",
	};
	size_t used;

	(void)state;
	assert_int_equal(decode("{}", &set, reason, sizeof(reason)), RCS_OK);
	assert_int_equal(set.n, 0);
	assert_int_equal(set.download_timeout, 86400);
	assert_int_equal(decode("{\"artifacts\":{\"fw\":{\"sha256\":\"" SHA_A "\",\"size\":"
				"5000000000},\"boot.img\":{\"sha256\":\"" SHA_A "\",\"size\":0}},"
				"\"artifact_token\":\"rcs1.abc-_\",\"download_timeout\":600}",
				&set, reason, sizeof(reason)),
			 RCS_OK);
	assert_int_equal(set.n, 2);
	assert_string_equal(set.a[0].name, "fw");
	assert_int_equal(set.a[0].size, 5000000000LL); /* 64-bit sizes */
	assert_string_equal(set.token, "rcs1.abc-_");
	assert_int_equal(set.download_timeout, 600);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reason[0] = '\0';
		assert_int_equal(decode(bad[i], &set, reason, sizeof(reason)), RCS_ERR_INVAL);
		assert_non_null(strstr(reason, "malformed envelope"));
	}
	/* at most 16 */
	used = (size_t)snprintf(json, sizeof(json), "{\"artifact_token\":\"t\",\"artifacts\":{");
	for (int i = 0; i < 17; i++)
		used += (size_t)snprintf(json + used, sizeof(json) - used,
					 "%s\"a%d\":{\"sha256\":\"" SHA_A "\",\"size\":1}",
					 i ? "," : "", i);
	snprintf(json + used, sizeof(json) - used, "}}");
	assert_int_equal(decode(json, &set, reason, sizeof(reason)), RCS_ERR_INVAL);
	assert_non_null(strstr(reason, "more than 16"));
}

/* Releases: device types and no downgrade on a stream (docs/agent.md "Releases"). */
static void test_release_checks(void **state)
{
	struct fx *f = *state;
	struct artifact_set set;
	char reason[256];
	static const char *const bad[] = {
	    "{\"release\":{\"seq\":1}}",
	    "{\"release\":{\"stream\":\"a b\",\"seq\":1}}",
	    "{\"release\":{\"stream\":\"fw\",\"seq\":-1}}",
	    "{\"release\":{\"stream\":\"fw\",\"seq\":1,\"device_types\":[1]}}",
	    "{\"release\":{\"stream\":\"fw\",\"seq\":1,\"channel\":\"x\"}}",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(decode(bad[i], &set, reason, sizeof(reason)), RCS_ERR_INVAL);
	assert_int_equal(decode("{\"release\":null}", &set, reason, sizeof(reason)), RCS_OK);
	assert_null(artifact_release_check(&set, NULL, f->journal, reason, sizeof(reason)));

	assert_int_equal(decode("{\"release\":{\"stream\":\"fw\",\"seq\":5,\"device_types\":"
				"[\"board-a\",\"board-b\"]}}",
				&set, reason, sizeof(reason)),
			 RCS_OK);
	assert_null(artifact_release_check(&set, "board-b", f->journal, reason, sizeof(reason)));
	assert_string_equal(
	    artifact_release_check(&set, "board-c", f->journal, reason, sizeof(reason)),
	    "incompatible");
	/* a device without device_type takes only releases for any type */
	assert_string_equal(artifact_release_check(&set, NULL, f->journal, reason, sizeof(reason)),
			    "incompatible");
	assert_int_equal(journal_release_done(f->journal, "fw", 5), RCS_OK);
	assert_int_equal(journal_release_done(f->journal, "fw", 3), RCS_OK); /* the highest kept */
	/* the same seq again is fine; an older one is refused unless allowed */
	assert_null(artifact_release_check(&set, "board-a", f->journal, reason, sizeof(reason)));
	assert_int_equal(
	    decode("{\"release\":{\"stream\":\"fw\",\"seq\":4}}", &set, reason, sizeof(reason)),
	    RCS_OK);
	assert_string_equal(artifact_release_check(&set, NULL, f->journal, reason, sizeof(reason)),
			    "rollback_refused");
	assert_non_null(strstr(reason, "older than 5"));
	assert_int_equal(decode("{\"release\":{\"stream\":\"fw\",\"seq\":4,"
				"\"allow_downgrade\":true}}",
				&set, reason, sizeof(reason)),
			 RCS_OK);
	assert_null(artifact_release_check(&set, NULL, f->journal, reason, sizeof(reason)));
	/* another stream knows nothing of fw */
	assert_int_equal(
	    decode("{\"release\":{\"stream\":\"modem\",\"seq\":1}}", &set, reason, sizeof(reason)),
	    RCS_OK);
	assert_null(artifact_release_check(&set, NULL, f->journal, reason, sizeof(reason)));
}

/* ---- the part file ---- */

/* Bytes arrive, offsets are journaled every 4 MiB after an fsync; the whole verifies, is
 * renamed 0444, and the journal forgets it. */
static void test_part_writes_journals_and_finishes(void **state)
{
	struct fx *f = *state;
	size_t n = (size_t)(10 << 20) + 12345;
	unsigned char *data = pattern(n);
	struct fetch_part p;
	char sha[65], hex[65];
	int64_t off = -1, size = 0;
	struct stat st;

	sha256_hex(data, n, sha);
	assert_int_equal(fetch_part_open(f->dirfd, sha, (int64_t)n, 0, &p), RCS_OK);
	for (size_t at = 0; at < n; at += 100000) {
		size_t k = n - at < 100000 ? n - at : 100000;
		assert_int_equal(fetch_part_write(&p, data + at, k, record_offset, f), RCS_OK);
	}
	/* every 4 MiB at least: two offsets journaled within the 10 MiB */
	assert_int_equal(f->njournaled, 2);
	assert_true(f->journaled[0] >= FETCH_JOURNAL_EVERY);
	assert_true(f->journaled[1] - f->journaled[0] >= FETCH_JOURNAL_EVERY);
	assert_int_equal(journal_download_get(f->journal, sha, &off), RCS_OK);
	assert_int_equal(off, f->journaled[1]);
	/* nothing past the signed size */
	assert_int_equal(fetch_part_write(&p, data, 1, record_offset, f), RCS_ERR_TOOBIG);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_OK);
	fetch_part_close(&p);
	assert_int_equal(fstatat(f->dirfd, sha, &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_mode & 0777, 0444);
	assert_int_equal(fetch_hash_file(f->dirfd, sha, hex, &size), RCS_OK);
	assert_string_equal(hex, sha);
	assert_int_equal(size, (int64_t)n);
	assert_int_equal(file_size(f, "x"), -1);
	free(data);
}

/* A power cut after a journaled offset: bytes past it (never synced) are cut away, the
 * bytes before it hashed again from zero; the download goes on from there and verifies. */
static void test_part_resumes_from_the_journal(void **state)
{
	struct fx *f = *state;
	size_t n = (size_t)(9 << 20);
	unsigned char *data = pattern(n);
	struct fetch_part p;
	char sha[65], name[80];
	int64_t off = 0;

	sha256_hex(data, n, sha);
	snprintf(name, sizeof(name), "%s.part", sha);
	assert_int_equal(fetch_part_open(f->dirfd, sha, (int64_t)n, 0, &p), RCS_OK);
	assert_int_equal(fetch_part_write(&p, data, (size_t)(5 << 20), record_offset, f), RCS_OK);
	fetch_part_close(&p); /* killed: 5 MiB on disk, 5 MiB journaled */
	assert_int_equal(journal_download_get(f->journal, sha, &off), RCS_OK);
	assert_int_equal(off, 5 << 20);
	/* the power cut: the disk kept 6.5 MiB, the last 1.5 never synced (here: garbage) */
	{
		int fd = openat(f->dirfd, name, O_WRONLY);
		unsigned char junk[4096];
		memset(junk, 0x5a, sizeof(junk));
		assert_true(fd >= 0);
		for (int64_t at = 5 << 20; at < (int64_t)(6.5 * (1 << 20)); at += 4096)
			assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)at), 4096);
		close(fd);
	}
	assert_int_equal(fetch_part_open(f->dirfd, sha, (int64_t)n, off, &p), RCS_OK);
	assert_int_equal(p.offset, 5 << 20);
	assert_int_equal(file_size(f, name), 5 << 20);
	assert_int_equal(
	    fetch_part_write(&p, data + p.offset, n - (size_t)p.offset, record_offset, f), RCS_OK);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_OK);
	fetch_part_close(&p);

	/* a file shorter than its journaled offset (the disk lied): from zero */
	sha256_hex("abc", 3, sha);
	snprintf(name, sizeof(name), "%s.part", sha);
	assert_int_equal(fetch_part_open(f->dirfd, sha, 3, 0, &p), RCS_OK);
	assert_int_equal(fetch_part_write(&p, "a", 1, NULL, NULL), RCS_OK);
	fetch_part_close(&p);
	assert_int_equal(fetch_part_open(f->dirfd, sha, 3, 2, &p), RCS_OK);
	assert_int_equal(p.offset, 0);
	assert_int_equal(fetch_part_write(&p, "abc", 3, NULL, NULL), RCS_OK);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_OK);
	fetch_part_close(&p);
	free(data);
}

/* Wrong bytes never become the artifact; a link in place of the part file is not followed. */
static void test_part_refuses_wrong_bytes_and_links(void **state)
{
	struct fx *f = *state;
	struct fetch_part p;
	char sha[65], name[80], hex[65];
	int64_t size;

	sha256_hex("right", 5, sha);
	assert_int_equal(fetch_part_open(f->dirfd, sha, 5, 0, &p), RCS_OK);
	assert_int_equal(fetch_part_write(&p, "wrong", 5, NULL, NULL), RCS_OK);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_ERR_VERIFY);
	assert_int_equal(file_size(f, sha), -1);
	/* emptied, it takes the right bytes */
	assert_int_equal(fetch_part_reset(&p), RCS_OK);
	assert_int_equal(fetch_part_write(&p, "rig", 3, NULL, NULL), RCS_OK);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_ERR_VERIFY); /* short */
	assert_int_equal(fetch_part_write(&p, "ht", 2, NULL, NULL), RCS_OK);
	assert_int_equal(fetch_part_finish(f->dirfd, &p), RCS_OK);
	fetch_part_close(&p);

	sha256_hex("other", 5, sha);
	snprintf(name, sizeof(name), "%s.part", sha);
	assert_int_equal(symlinkat("/etc/passwd", f->dirfd, name), 0);
	assert_int_equal(fetch_part_open(f->dirfd, sha, 5, 0, &p), RCS_ERR_FORBIDDEN);
	assert_int_equal(symlinkat("/etc/passwd", f->dirfd, sha), 0);
	assert_int_equal(fetch_hash_file(f->dirfd, sha, hex, &size), RCS_ERR_FORBIDDEN);
}

static void test_content_range(void **state)
{
	(void)state;
	assert_true(fetch_content_range_ok("bytes 100-199/200", 100, 200));
	assert_true(fetch_content_range_ok("bytes 100-199/200\r\n", 100, 200));
	assert_true(fetch_content_range_ok("bytes 4294967296-8589934591/8589934592", 4294967296LL,
					   8589934592LL));
	assert_false(fetch_content_range_ok("bytes 0-199/200", 100, 200));
	assert_false(fetch_content_range_ok("bytes 100-198/200", 100, 200));
	assert_false(fetch_content_range_ok("bytes 100-199/*", 100, 200));
	assert_false(fetch_content_range_ok("bytes 100-199/2000", 100, 200));
	assert_false(fetch_content_range_ok("bytes 100-199/200, 0-1", 100, 200));
	assert_false(fetch_content_range_ok("", 100, 200));
}

/* ---- the journal and the cache ---- */

static void test_journal_offsets(void **state)
{
	struct fx *f = *state;
	int64_t off = 7;

	assert_int_equal(journal_download_get(f->journal, SHA_A, &off), RCS_ERR_NOTFOUND);
	assert_int_equal(off, 0);
	assert_int_equal(journal_download_set(f->journal, SHA_A, 5000000000LL), RCS_OK);
	/* it survives a restart */
	journal_close(f->journal);
	assert_int_equal(journal_open(f->dir, &f->journal), RCS_OK);
	assert_int_equal(journal_download_get(f->journal, SHA_A, &off), RCS_OK);
	assert_int_equal(off, 5000000000LL);
	assert_int_equal(journal_download_set(f->journal, SHA_A, -1), RCS_OK);
	assert_int_equal(journal_download_get(f->journal, SHA_A, &off), RCS_ERR_NOTFOUND);
	assert_int_equal(journal_download_set(f->journal, "ABC", 1), RCS_ERR_INVAL);
}

/* A job stopped while downloading goes back to the queue, still marked downloading; one
 * whose script ran stays running (reported interrupted by the runner). */
static void test_journal_requeues_downloads(void **state)
{
	struct fx *f = *state;
	const char *a = "01a1ff99-0000-7000-8000-00000000000a";
	const char *b = "01a1ff99-0000-7000-8000-00000000000b";
	enum journal_state st;
	bool is_new, on = true;
	size_t n = 0;

	assert_int_equal(journal_receive(f->journal, a, ROOT, 1, "{}", 2, 1, &is_new), RCS_OK);
	assert_int_equal(journal_receive(f->journal, b, ROOT, 1, "{}", 2, 1, &is_new), RCS_OK);
	assert_int_equal(journal_set_state(f->journal, a, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_set_state(f->journal, b, JOURNAL_RUNNING), RCS_OK);
	assert_int_equal(journal_get_downloading(f->journal, a, &on), RCS_OK);
	assert_false(on);
	assert_int_equal(journal_set_downloading(f->journal, a, true), RCS_OK);
	journal_close(f->journal);
	assert_int_equal(journal_open(f->dir, &f->journal), RCS_OK);
	assert_int_equal(journal_requeue_downloading(f->journal, &n), RCS_OK);
	assert_int_equal(n, 1);
	assert_int_equal(journal_get_state(f->journal, a, &st), RCS_OK);
	assert_int_equal(st, JOURNAL_QUEUED);
	assert_int_equal(journal_get_downloading(f->journal, a, &on), RCS_OK);
	assert_true(on);
	assert_int_equal(journal_get_state(f->journal, b, &st), RCS_OK);
	assert_int_equal(st, JOURNAL_RUNNING);
}

/* A download's progress report carries "progress" {"done", "total"}. */
static void test_journal_progress_report(void **state)
{
	struct fx *f = *state;
	const char *a = "01a1ff99-0000-7000-8000-00000000000c";
	char *payload = NULL;
	bool is_new;

	assert_int_equal(journal_receive(f->journal, a, ROOT, 1, "{}", 2, 1, &is_new), RCS_OK);
	assert_int_equal(journal_report(f->journal, a, JS_EDGE_STARTED, NULL, 1, NULL, NULL),
			 RCS_OK);
	assert_int_equal(journal_report_progress(f->journal, a, "downloading fw: 42 %", 42, 100, 2,
						 NULL, &payload),
			 RCS_OK);
	assert_non_null(strstr(payload, "\"progress\":{\"done\":42,\"total\":100}"));
	assert_non_null(strstr(payload, "\"status\":\"edge_running\""));
	free(payload);
	assert_int_equal(journal_report_progress(f->journal, a, "x", 101, 100, 2, NULL, NULL),
			 RCS_ERR_INVAL);
}

/* The coordinator reads it back; a malformed one is refused, naming the field. */
static void test_progress_decoded(void **state)
{
	static const char ok[] = "{\"v\":1,\"job\":\"01a1ff99-0000-7000-8000-00000000000c\","
				 "\"status\":\"edge_running\",\"seq\":3,\"ts\":2,\"response\":"
				 "\"downloading fw: 42 %\",\"progress\":{\"done\":42,\"total\":"
				 "5000000000}}";
	static const char *const bad[] = {
	    "{\"v\":1,\"job\":\"01a1ff99-0000-7000-8000-00000000000c\",\"status\":"
	    "\"edge_running\",\"seq\":3,\"ts\":2,\"progress\":{\"done\":43,\"total\":42}}",
	    "{\"v\":1,\"job\":\"01a1ff99-0000-7000-8000-00000000000c\",\"status\":"
	    "\"edge_running\",\"seq\":3,\"ts\":2,\"progress\":{\"done\":-1,\"total\":42}}",
	    "{\"v\":1,\"job\":\"01a1ff99-0000-7000-8000-00000000000c\",\"status\":"
	    "\"edge_running\",\"seq\":3,\"ts\":2,\"progress\":{\"done\":1}}",
	};
	struct proto_report r;
	struct jsonu_err e;

	(void)state;
	assert_int_equal(proto_report_decode(ok, strlen(ok), &r, &e), RCS_OK);
	assert_true(r.has_progress);
	assert_int_equal(r.progress_done, 42);
	assert_int_equal(r.progress_total, 5000000000LL);
	proto_report_free(&r);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&e, 0, sizeof(e));
		assert_int_equal(proto_report_decode(bad[i], strlen(bad[i]), &r, &e),
				 RCS_ERR_INVAL);
		assert_true(e.field[0] != '\0'); /* named */
	}
}

static void put_file(struct fx *f, const char *content, time_t used, char sha[65])
{
	struct timespec ts[2] = {{used, 0}, {used, 0}};
	int fd;

	sha256_hex(content, strlen(content), sha);
	fd = openat(f->dirfd, sha, O_WRONLY | O_CREAT | O_EXCL, 0444);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	assert_int_equal(futimens(fd, ts), 0);
	close(fd);
}

/* The least recently used go first; never one the live job needs; part files stay. */
static void test_cache_trim(void **state)
{
	struct fx *f = *state;
	char old[65], mid[65], young[65], kept[65];
	struct artifact keep;

	put_file(f, "0123456789", 1000, old);
	put_file(f, "abcdefghij", 2000, mid);
	put_file(f, "ABCDEFGHIJ", 3000, young);
	put_file(f, "klmnopqrst", 500, kept); /* the oldest, but the job's */
	assert_int_equal(mkdirat(f->dirfd, "sub", 0700), 0);
	memset(&keep, 0, sizeof(keep));
	snprintf(keep.sha256, sizeof(keep.sha256), "%s", kept);
	assert_int_equal(artifact_cache_trim(f->dirfd, &keep, 1, 40), 40);
	assert_int_equal(artifact_cache_trim(f->dirfd, &keep, 1, 25), 20);
	assert_int_equal(file_size(f, old), -1);
	assert_int_equal(file_size(f, mid), -1);
	assert_int_equal(file_size(f, young), 10);
	assert_int_equal(file_size(f, kept), 10);
	assert_int_equal(artifact_cache_trim(f->dirfd, &keep, 1, 0), 10);
	assert_int_equal(file_size(f, kept), 10);
}

/* Writes n bytes named name into dirfd. */
static bool put_bytes(int dirfd, const char *name, size_t n)
{
	static char chunk[65536];
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	bool ok = fd >= 0;

	for (size_t at = 0; ok && at < n; at += sizeof(chunk))
		ok = write(fd, chunk, n - at < sizeof(chunk) ? n - at : sizeof(chunk)) > 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A job needing need bytes on the small disk: the cause its downloads end with. */
static const char *room_for(struct fx *f, const char *dir, int64_t need, char sha[65])
{
	struct artifact_env env;
	struct artifact_set set;
	static struct artifact_outcome out;

	memset(&env, 0, sizeof(env));
	env.dir = dir;
	env.url = "http://127.0.0.1:9"; /* nothing listens: the download itself fails */
	env.cache_max = INT64_MAX;
	env.journal = f->journal;
	env.cancel_fd = -1;
	memset(&set, 0, sizeof(set));
	set.n = 1;
	snprintf(set.a[0].name, sizeof(set.a[0].name), "fw");
	snprintf(set.a[0].sha256, sizeof(set.a[0].sha256), "%s", sha);
	set.a[0].size = need;
	set.download_timeout = 1;
	snprintf(set.token, sizeof(set.token), "t");
	artifact_fetch_all(&env, &set, &out);
	if (out.table != NULL)
		json_object_put(out.table);
	return out.cause ? out.cause : "";
}

/*
 * A small disk (an 8 MiB tmpfs in a private mount namespace of a child: needs root, else
 * skipped): the cache makes room first, then other jobs' part files; what still does not fit
 * is storage_full before any byte. The child's exit code: 0 passed, 77 skip, else the step.
 */
static int small_disk_child(struct fx *f)
{
	char dir[128], old[65], other[65], name[80];
	int dfd;

	snprintf(dir, sizeof(dir), "%s/art", f->dir);
	if (mkdir(dir, 0700) != 0)
		return 1;
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=8m") != 0)
		return 77;
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	memset(old, 'b', 64);
	old[64] = '\0';
	memset(other, 'c', 64);
	other[64] = '\0';
	snprintf(name, sizeof(name), "%s.part", other);
	if (dfd < 0 || !put_bytes(dfd, old, 3 << 20) || !put_bytes(dfd, name, 2 << 20))
		return 2;
	/* 4 MiB: the cached file goes, the other download's part stays */
	{
		char sha[65];
		memset(sha, 'd', 64);
		sha[64] = '\0';
		if (strcmp(room_for(f, dir, 4 << 20, sha), "artifact_unavailable") != 0)
			return 4;
		if (file_size(&(struct fx){.dirfd = dfd}, old) != -1 ||
		    file_size(&(struct fx){.dirfd = dfd}, name) != 2 << 20)
			return 5;
		/* 7 MiB: the part files of other downloads go too */
		memset(sha, 'e', 64);
		if (strcmp(room_for(f, dir, 7 << 20, sha), "artifact_unavailable") != 0)
			return 6;
		if (file_size(&(struct fx){.dirfd = dfd}, name) != -1)
			return 7;
		/* 9 MiB never fit */
		memset(sha, 'f', 64);
		if (strcmp(room_for(f, dir, 9 << 20, sha), "storage_full") != 0)
			return 8;
	}
	close(dfd);
	return 0;
}

static void test_small_disk(void **state)
{
	struct fx *f = *state;
	int status = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(small_disk_child(f));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		skip();
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- the options ---- */

static enum rcs_err load(struct fx *f, const char *extra, struct settings *s, char *err, size_t n)
{
	char conf[128], text[1024];
	char *argv[] = {"rcs-agent", "--config", conf, NULL};
	FILE *fp;

	snprintf(conf, sizeof(conf), "%s/agent.conf", f->dir);
	snprintf(text, sizeof(text),
		 "mqtt tcp://127.0.0.1:9\nclient_root " ROOT "\nentity_ident " ENTITY
		 "\nstate_dir %s/state\nrequire_signature false\n%s",
		 f->dir, extra);
	fp = fopen(conf, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	return settings_load(s, 3, argv, err, n);
}

static void test_options(void **state)
{
	struct fx *f = *state;
	struct settings s;
	struct settings_live *live;
	char err[512], extra[512], want[128];
	static const char *const bad[] = {
	    "artifact_url ftp://h\n",    "artifact_url http://h/path\n",
	    "artifact_url http://u@h\n", "artifact_transport carrier-pigeon\n",
	    "artifact_transport http\n", "artifact_dir relative\n",
	    "device_type a b\n",         "artifact_reserve -1\n",
	};

	assert_int_equal(load(f, "", &s, err, sizeof(err)), RCS_OK);
	snprintf(want, sizeof(want), "%s/state/artifacts", f->dir);
	assert_string_equal(s.artifact_dir, want);
	settings_free(&s);
	/* a relative state_dir: the default artifact_dir is made absolute */
	{
		char cwd[PATH_MAX];
		assert_non_null(getcwd(cwd, sizeof(cwd)));
		assert_int_equal(chdir(f->dir), 0);
		assert_int_equal(load(f, "state_dir rel/state\n", &s, err, sizeof(err)), RCS_OK);
		assert_int_equal(chdir(cwd), 0);
		snprintf(want, sizeof(want), "%s/rel/state/artifacts", f->dir);
		assert_string_equal(s.artifact_dir, want);
		settings_free(&s);
	}
	assert_int_equal(load(f, "", &s, err, sizeof(err)), RCS_OK);
	assert_int_equal(s.artifact_reserve, 16 << 20);
	assert_int_equal(s.artifact_cache_max, 256 << 20);
	assert_int_equal(s.artifact_max_rate, 0);
	assert_string_equal(s.artifact_transport, "auto");
	settings_free(&s);
	assert_int_equal(load(f,
			      "artifact_url https://coord.example:8443/\nartifact_max_rate 1000\n"
			      "device_type board-v2\n",
			      &s, err, sizeof(err)),
			 RCS_OK);
	assert_string_equal(s.device_type, "board-v2");
	settings_free(&s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(load(f, bad[i], &s, err, sizeof(err)) == RCS_OK, 0);
		settings_free(&s);
	}
	/* artifact_dir inside a file_dir (through a link too), the same, or holding one */
	assert_int_equal(mkdirat(f->dirfd, "files", 0700), 0);
	assert_int_equal(symlinkat("files", f->dirfd, "link"), 0);
	{
		const char *dirs[][2] = {{"files/art", "files"},
					 {"files", "files"},
					 {"link/art", "files"},
					 {"files/..", "files"}};
		for (size_t i = 0; i < 4; i++) {
			snprintf(extra, sizeof(extra), "artifact_dir %s/%s\nfile_dir %s/%s\n",
				 f->dir, dirs[i][0], f->dir, dirs[i][1]);
			assert_int_equal(load(f, extra, &s, err, sizeof(err)), RCS_OK);
			live = settings_live_new(&s, err, sizeof(err));
			assert_null(live);
			assert_non_null(strstr(err, "overlap"));
			settings_free(&s);
		}
	}
	snprintf(extra, sizeof(extra), "artifact_dir %s/art\nfile_dir %s/files\n", f->dir, f->dir);
	assert_int_equal(load(f, extra, &s, err, sizeof(err)), RCS_OK);
	live = settings_live_new(&s, err, sizeof(err));
	assert_non_null(live);
	settings_live_free(live);
	settings_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_envelope_artifacts),
	    cmocka_unit_test_setup_teardown(test_release_checks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_part_writes_journals_and_finishes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_part_resumes_from_the_journal, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_part_refuses_wrong_bytes_and_links, setup,
					    teardown),
	    cmocka_unit_test(test_content_range),
	    cmocka_unit_test_setup_teardown(test_journal_offsets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_requeues_downloads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_journal_progress_report, setup, teardown),
	    cmocka_unit_test(test_progress_decoded),
	    cmocka_unit_test_setup_teardown(test_cache_trim, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_small_disk, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_options, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
