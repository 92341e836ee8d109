/*
 * artifact.c - a job's artifacts on the device. See artifact.h and docs/agent.md
 * "Artifacts".
 *
 * The directory holds <sha256> (complete, verified, 0444: the cache, its modification time
 * the last use) and <sha256>.part (being downloaded; the journal knows up to where its bytes
 * were fsynced). Everything is opened relative to the directory, never through a link.
 */
#define _FILE_OFFSET_BITS 64
#include "artifact.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fetch.h"
#include "fetch_mqtt.h"
#include "jsonu.h"
#include "log.h"

_Static_assert(sizeof(off_t) == 8, "artifact.c needs 64-bit file offsets");

/* ---- the cache ---- */

struct artifact_cached {
	char name[65];
	int64_t size;
	int64_t used; /* modification time, ns */
};

static bool artifact_kept(const char *sha, const struct artifact *keep, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(keep[i].sha256, sha) == 0)
			return true;
	return false;
}

static int artifact_cached_cmp(const void *a, const void *b)
{
	const struct artifact_cached *x = a, *y = b;

	return x->used < y->used ? -1 : x->used > y->used;
}

/* The complete artifacts of dirfd not in keep, oldest use first; *total: the bytes of all. */
static struct artifact_cached *artifact_cache_list(int dirfd, const struct artifact *keep, size_t n,
						   size_t *count, int64_t *total)
{
	struct artifact_cached *v = NULL, *nv;
	size_t cap = 0;
	struct dirent *d;
	DIR *dir;
	int fd = dup(dirfd);

	*count = 0;
	*total = 0;
	if (fd < 0 || (dir = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	rewinddir(dir);
	while ((d = readdir(dir)) != NULL) {
		struct stat st;
		if (!artifact_sha256_valid(d->d_name) ||
		    fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		*total += (int64_t)st.st_size;
		if (artifact_kept(d->d_name, keep, n))
			continue;
		if (*count == cap) {
			cap = cap ? cap * 2 : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (nv == NULL)
				break;
			v = nv;
		}
		snprintf(v[*count].name, sizeof(v[0].name), "%.64s", d->d_name);
		v[*count].size = (int64_t)st.st_size;
		v[*count].used = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		(*count)++;
	}
	closedir(dir);
	if (v != NULL)
		qsort(v, *count, sizeof(*v), artifact_cached_cmp);
	return v;
}

int64_t artifact_cache_trim(int dirfd, const struct artifact *keep, size_t n, int64_t max)
{
	struct artifact_cached *v;
	size_t count = 0;
	int64_t total = 0;

	v = artifact_cache_list(dirfd, keep, n, &count, &total);
	for (size_t i = 0; i < count && total > max; i++) {
		if (unlinkat(dirfd, v[i].name, 0) == 0) {
			total -= v[i].size;
			log_info("artifact cache: %s removed (least recently used)", v[i].name);
		}
	}
	free(v);
	return total;
}

/* ---- a job's downloads ---- */

/* The state of one job's downloads. */
struct artifact_job {
	const struct artifact_env *env;
	const struct artifact_set *set;
	struct artifact_outcome *out;
	int dirfd;
	int64_t done_before; /* bytes of the artifacts before the current one (and cached) */
	int64_t total;
	const char *current; /* name of the one downloading */
	int64_t last_report_ms;
	int last_percent;
	int64_t deadline_ms;
};

static int64_t artifact_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void artifact_fail(struct artifact_job *j, const char *cause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void artifact_fail(struct artifact_job *j, const char *cause, const char *fmt, ...)
{
	va_list ap;

	j->out->cause = cause;
	va_start(ap, fmt);
	vsnprintf(j->out->reason, sizeof(j->out->reason), fmt, ap);
	va_end(ap);
}

/* An edge_running report, at most one a second (and the first and last). */
static void artifact_report(struct artifact_job *j, int64_t done, bool force)
{
	int64_t now = artifact_now_ms();
	char text[160];
	int percent;

	if (j->env->progress == NULL || (!force && now - j->last_report_ms < 1000))
		return;
	percent = j->total > 0 ? (int)(done * 100 / j->total) : 100;
	if (!force && percent == j->last_percent && now - j->last_report_ms < 10000)
		return;
	j->last_report_ms = now;
	j->last_percent = percent;
	snprintf(text, sizeof(text), "downloading %s: %d %%", j->current ? j->current : "artifacts",
		 percent);
	j->env->progress(j->env->ctx, text, done, j->total);
}

static void artifact_progress_cb(void *ctx, int64_t offset)
{
	struct artifact_job *j = ctx;

	artifact_report(j, j->done_before + offset, false);
}

static enum rcs_err artifact_journal_cb(void *ctx, const char *sha256, int64_t offset)
{
	struct artifact_job *j = ctx;

	return journal_download_set(j->env->journal, sha256, offset);
}

/* Waits ms or until cancel_fd fires: false when cancelled. */
static bool artifact_wait(const struct artifact_env *env, int64_t ms)
{
	struct pollfd pfd = {env->cancel_fd, POLLIN, 0};

	if (ms <= 0)
		return true;
	return poll(&pfd, env->cancel_fd >= 0 ? 1 : 0, (int)ms) == 0;
}

/* Free bytes where the artifacts go. */
static int64_t artifact_free(int dirfd)
{
	struct statvfs sv;

	if (fstatvfs(dirfd, &sv) != 0)
		return -1;
	return (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
}

/* Deletes the part files that are not the job's (and forgets their offsets). */
static void artifact_parts_drop(struct artifact_job *j)
{
	struct dirent *d;
	DIR *dir;
	int fd = dup(j->dirfd);

	if (fd < 0 || (dir = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(dir);
	while ((d = readdir(dir)) != NULL) {
		char sha[65];
		if (strlen(d->d_name) != 64 + 5 || strcmp(d->d_name + 64, ".part") != 0)
			continue;
		snprintf(sha, sizeof(sha), "%.64s", d->d_name);
		if (!artifact_sha256_valid(sha) || artifact_kept(sha, j->set->a, j->set->n))
			continue;
		if (unlinkat(j->dirfd, d->d_name, 0) == 0) {
			journal_download_set(j->env->journal, sha, -1);
			log_info("artifact %s: an unfinished download removed to make room", sha);
		}
	}
	closedir(dir);
}

/* Room for need more bytes and the reserve, the cache trimmed if it must be. */
static bool artifact_room(struct artifact_job *j, int64_t need)
{
	int64_t free_b = artifact_free(j->dirfd), cached = 0;

	if (free_b >= 0 && free_b >= need + j->env->reserve)
		return true;
	/* what older jobs left in the cache goes first, least recently used first */
	cached = artifact_cache_trim(j->dirfd, j->set->a, j->set->n, INT64_MAX);
	cached = artifact_cache_trim(j->dirfd, j->set->a, j->set->n,
				     cached - (need + j->env->reserve - free_b));
	(void)cached;
	free_b = artifact_free(j->dirfd);
	if (free_b >= 0 && free_b >= need + j->env->reserve)
		return true;
	/* then the part files of other jobs' downloads (they would start over) */
	artifact_parts_drop(j);
	free_b = artifact_free(j->dirfd);
	return free_b >= 0 && free_b >= need + j->env->reserve;
}

/* The one artifact a, complete and verified, already in the directory: true (its use
 * time updated). A file there that doesn't verify is removed. */
static bool artifact_cached_ok(struct artifact_job *j, const struct artifact *a)
{
	char hex[65];
	int64_t size = 0;
	enum rcs_err err = fetch_hash_file(j->dirfd, a->sha256, hex, &size);

	if (err == RCS_ERR_NOTFOUND)
		return false;
	if (err == RCS_OK && size == a->size && strcmp(hex, a->sha256) == 0) {
		utimensat(j->dirfd, a->sha256, NULL, AT_SYMLINK_NOFOLLOW);
		return true;
	}
	log_warnx("artifact %s: the cached file does not verify: removed", a->sha256);
	unlinkat(j->dirfd, a->sha256, 0);
	return false;
}

/* Bytes of a still to download (its part file resumed from the journaled offset). */
static int64_t artifact_missing(struct artifact_job *j, const struct artifact *a)
{
	int64_t off = 0;

	if (journal_download_get(j->env->journal, a->sha256, &off) != RCS_OK)
		off = 0;
	return a->size - (off > a->size ? 0 : off);
}

/* The cause of a disk or journal failure. */
static const char *artifact_err_cause(enum rcs_err err)
{
	if (err == RCS_ERR_FULL)
		return "storage_full";
	if (err == RCS_ERR_DB || err == RCS_ERR_BUSY)
		return "journal_unavailable";
	return "artifact_unavailable";
}

/* A wrong result (size, hash, range): true to fetch once more from zero, false when it was
 * the second (the job fails artifact_invalid). */
static bool artifact_wrong(struct artifact_job *j, const struct artifact *a, struct fetch_part *p,
			   int *wrong, const char *what)
{
	(*wrong)++;
	if (*wrong >= 2) {
		artifact_fail(j, "artifact_invalid", "artifact %s (%s): %s, twice", a->name,
			      a->sha256, what);
		return false;
	}
	log_warnx("artifact %s (%s): %s: fetched once more from zero", a->name, a->sha256, what);
	if (fetch_part_reset(p) != RCS_OK ||
	    journal_download_set(j->env->journal, a->sha256, 0) != RCS_OK) {
		artifact_fail(j, "artifact_unavailable", "artifact %s: cannot empty its part file",
			      a->name);
		return false;
	}
	return true;
}

static void artifact_publish_get(void *ctx, const char *sha256, const char *payload)
{
	struct artifact_job *j = ctx;

	if (j->env->publish_get != NULL)
		j->env->publish_get(j->env->publish_ctx, sha256, payload);
}

/* The gets of a's bytes through the broker (artifact_request). */
static void artifact_request_mqtt(struct artifact_job *j, struct fetch_part *p,
				  struct fetch_result *res)
{
	struct fetch_mqtt_req req;

	memset(&req, 0, sizeof(req));
	req.chan = j->env->chan;
	req.job = j->env->job;
	req.cancel_fd = j->env->cancel_fd;
	req.deadline_ms = j->deadline_ms;
	req.max_rate = j->env->max_rate;
	req.journal = artifact_journal_cb;
	req.progress = artifact_progress_cb;
	req.publish_get = artifact_publish_get;
	req.ctx = j;
	fetch_mqtt_get(&req, p, res);
}

/* The request of a from p's offset, to its end or its failure. */
static void artifact_request(struct artifact_job *j, const struct artifact *a, struct fetch_part *p,
			     struct fetch_result *res)
{
	struct fetch_http req;
	char url[1400];
	size_t n;

	if (j->env->url == NULL) {
		artifact_request_mqtt(j, p, res);
		return;
	}
	n = strlen(j->env->url);

	while (n > 0 && j->env->url[n - 1] == '/')
		n--;
	snprintf(url, sizeof(url), "%.*s/v3/devices/artifacts/%s", (int)n, j->env->url, a->sha256);
	memset(&req, 0, sizeof(req));
	req.url = url;
	req.cafile = j->env->cafile;
	req.token = j->set->token;
	req.max_rate = j->env->max_rate;
	req.cancel_fd = j->env->cancel_fd;
	req.deadline_ms = j->deadline_ms;
	req.journal = artifact_journal_cb;
	req.progress = artifact_progress_cb;
	req.ctx = j;
	fetch_http(&req, p, res);
}

/* One whole transfer's end: true when a is complete and verified. */
static bool artifact_finish(struct artifact_job *j, const struct artifact *a, struct fetch_part *p,
			    int *wrong, bool *again)
{
	enum rcs_err err = fetch_part_sync(p, artifact_journal_cb, j);

	*again = false;
	if (err == RCS_OK)
		err = fetch_part_finish(j->dirfd, p);
	if (err == RCS_OK) {
		journal_download_set(j->env->journal, a->sha256, -1);
		return true;
	}
	if (err == RCS_ERR_VERIFY)
		*again = artifact_wrong(j, a, p, wrong, "its SHA-256 is not the signed one");
	else
		artifact_fail(j, artifact_err_cause(err), "artifact %s: %s", a->name,
			      rcs_strerror(err));
	return false;
}

/* Downloads a (not in the cache) until it is complete, refused, or its time is up. */
static bool artifact_get_one(struct artifact_job *j, const struct artifact *a)
{
	struct fetch_part p;
	struct fetch_result res;
	int64_t journaled = 0, backoff = ARTIFACT_BACKOFF_FIRST_MS, before;
	int wrong = 0;
	bool ok = false, again;
	enum rcs_err err;

	journal_download_get(j->env->journal, a->sha256, &journaled);
	err = fetch_part_open(j->dirfd, a->sha256, a->size, journaled, &p);
	if (err != RCS_OK) {
		artifact_fail(j, "artifact_unavailable", "artifact %s: its part file in %s: %s",
			      a->name, j->env->dir, rcs_strerror(err));
		return false;
	}
	if (p.offset > 0)
		log_info("artifact %s (%s): resumed at %lld of %lld bytes", a->name, a->sha256,
			 (long long)p.offset, (long long)a->size);
	for (;;) {
		/* the free space again before each resume */
		if (!artifact_room(j, a->size - p.offset)) {
			artifact_fail(j, "storage_full",
				      "artifact %s: %lld bytes still to fetch and %lld kept free do"
				      " not fit in %s",
				      a->name, (long long)(a->size - p.offset),
				      (long long)j->env->reserve, j->env->dir);
			break;
		}
		before = p.offset;
		artifact_request(j, a, &p, &res);
		if (res.outcome == FETCH_DONE) {
			if (artifact_finish(j, a, &p, &wrong, &again)) {
				ok = true;
				break;
			}
			if (again)
				continue;
			break;
		}
		if (res.outcome == FETCH_INVALID) {
			if (artifact_wrong(j, a, &p, &wrong, res.message))
				continue;
			break;
		}
		if (res.outcome == FETCH_FAILED) {
			artifact_fail(j, artifact_err_cause(res.err), "artifact %s: %s", a->name,
				      res.message);
			break;
		}
		if (res.outcome == FETCH_REFUSED) {
			artifact_fail(j, "artifact_unavailable", "artifact %s: %s", a->name,
				      res.message);
			break;
		}
		if (res.outcome == FETCH_CANCELLED && artifact_now_ms() < j->deadline_ms) {
			artifact_fail(j, "cancelled", "cancelled while downloading %s", a->name);
			break;
		}
		/* keep what came: a resume starts from there */
		err = fetch_part_sync(&p, artifact_journal_cb, j);
		if (err != RCS_OK) {
			artifact_fail(j, artifact_err_cause(err), "artifact %s: %s", a->name,
				      rcs_strerror(err));
			break;
		}
		if (res.outcome == FETCH_CANCELLED || artifact_now_ms() >= j->deadline_ms) {
			artifact_fail(
			    j, "artifact_unavailable",
			    "artifact %s: not downloaded within %lld s (%lld of %lld bytes)",
			    a->name, j->set->download_timeout, (long long)p.offset,
			    (long long)a->size);
			break;
		}
		if (p.offset > before)
			backoff = ARTIFACT_BACKOFF_FIRST_MS; /* it moves: not the server's fault */
		log_warnx("artifact %s: %s at %lld of %lld bytes: again in %lld s", a->name,
			  res.message, (long long)p.offset, (long long)a->size,
			  (long long)(backoff / 1000));
		if (!artifact_wait(j->env, res.retry_after * 1000LL > backoff
					       ? res.retry_after * 1000LL
					       : backoff)) {
			artifact_fail(j, "cancelled", "cancelled while downloading %s", a->name);
			break;
		}
		backoff =
		    backoff * 2 > ARTIFACT_BACKOFF_MAX_MS ? ARTIFACT_BACKOFF_MAX_MS : backoff * 2;
	}
	fetch_part_close(&p);
	return ok;
}

/* rcs.artifacts: {"<name>": {"path", "size", "sha256"}}. */
static json_object *artifact_table(const struct artifact_env *env, const struct artifact_set *set)
{
	json_object *t = json_object_new_object();

	for (size_t i = 0; t != NULL && i < set->n; i++) {
		json_object *o = json_object_new_object();
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", env->dir, set->a[i].sha256);
		json_object_object_add(o, "path", json_object_new_string(path));
		json_object_object_add(o, "size", json_object_new_int64(set->a[i].size));
		json_object_object_add(o, "sha256", json_object_new_string(set->a[i].sha256));
		json_object_object_add(t, set->a[i].name, o);
	}
	return t;
}

/* An earlier artifact of the set has the same bytes. */
static bool artifact_seen(const struct artifact_set *set, size_t i)
{
	for (size_t k = 0; k < i; k++)
		if (strcmp(set->a[k].sha256, set->a[i].sha256) == 0)
			return true;
	return false;
}

/* The downloads of every artifact not cached (cached[i]). */
static void artifact_download(struct artifact_job *j, const bool *cached, int64_t need)
{
	const struct artifact_set *set = j->set;

	if ((j->env->url == NULL && j->env->chan == NULL) ||
	    (j->env->url != NULL && !fetch_http_available())) {
		artifact_fail(j, "artifact_unavailable",
			      "the job has artifacts and this agent has no way to download them"
			      " (artifact_url%s)",
			      fetch_http_available() ? "" : ", WITH_ARTIFACT_HTTP");
		return;
	}
	if (!artifact_room(j, need)) {
		artifact_fail(j, "storage_full",
			      "%lld bytes to download and %lld kept free do not fit in %s"
			      " (%lld bytes free)",
			      (long long)need, (long long)j->env->reserve, j->env->dir,
			      (long long)artifact_free(j->dirfd));
		return;
	}
	artifact_report(j, j->done_before, true);
	if (j->env->url == NULL && j->env->subscribe != NULL)
		j->env->subscribe(j->env->publish_ctx, true);
	for (size_t i = 0; i < set->n; i++) {
		if (cached[i])
			continue;
		j->current = set->a[i].name;
		if (artifact_seen(set, i) && artifact_cached_ok(j, &set->a[i]))
			continue;
		if (!artifact_get_one(j, &set->a[i]))
			break;
		j->done_before += set->a[i].size;
		log_info("artifact %s (%s): %lld bytes, verified", set->a[i].name, set->a[i].sha256,
			 (long long)set->a[i].size);
	}
	if (j->env->url == NULL && j->env->subscribe != NULL)
		j->env->subscribe(j->env->publish_ctx, false);
	if (j->out->cause == NULL)
		artifact_report(j, j->done_before, true);
}

void artifact_fetch_all(const struct artifact_env *env, const struct artifact_set *set,
			struct artifact_outcome *out)
{
	struct artifact_job j;
	bool cached[ARTIFACT_MAX];
	int64_t need = 0;
	bool all = true;

	memset(out, 0, sizeof(*out));
	memset(&j, 0, sizeof(j));
	memset(cached, 0, sizeof(cached));
	j.env = env;
	j.set = set;
	j.out = out;
	j.last_percent = -1;
	j.dirfd = -1;
	if (set->n == 0)
		goto out;
	if (mkdir(env->dir, 0700) != 0 && errno != EEXIST) {
		artifact_fail(&j, "storage_full", "artifact_dir %s: %s", env->dir, strerror(errno));
		goto out;
	}
	j.dirfd = open(env->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (j.dirfd < 0) {
		artifact_fail(&j, "artifact_unavailable", "artifact_dir %s: %s", env->dir,
			      strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < set->n; i++) {
		j.total += set->a[i].size;
		/* a cached file is hashed again before a job uses it */
		cached[i] = artifact_cached_ok(&j, &set->a[i]);
		if (cached[i])
			j.done_before += set->a[i].size;
		else if (!artifact_seen(set, i))
			need += artifact_missing(&j, &set->a[i]);
		all = all && cached[i];
	}
	j.deadline_ms = artifact_now_ms() + set->download_timeout * 1000LL;
	if (!all)
		artifact_download(&j, cached, need);
	if (out->cause == NULL)
		artifact_cache_trim(j.dirfd, set->a, set->n, env->cache_max);
out:
	if (out->cause == NULL)
		out->table = artifact_table(env, set);
	if (j.dirfd >= 0)
		close(j.dirfd);
}
