/*
 * art_serve.c - what the devices' downloads share, over HTTP and over MQTT. See art_serve.h.
 */
#include "art_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "status.h"
#include "store_audit.h"
#include "store_downloads.h"
#include "store_jobs.h"

void art_want_free(struct art_want *w)
{
	store_artifact_rec_free(&w->a);
}

enum art_verdict art_serve_check(struct store *st, struct art_want *w, enum rcs_err *err)
{
	enum art_verdict v = ART_SERVE_OK;
	struct job_rec job;

	*err = store_job_rec_get(st, w->job, &job);
	if (*err != RCS_OK)
		return *err == RCS_ERR_NOTFOUND ? ART_SERVE_NOTFOUND : ART_SERVE_ERROR;
	if (strcmp(job.client_root, w->tenant) != 0 || strcmp(job.entity_ident, w->device) != 0)
		v = ART_SERVE_NOTFOUND;
	else if (status_is_terminal(job.status))
		v = ART_SERVE_TERMINAL;
	snprintf(w->group, sizeof(w->group), "%s", job.group_ident);
	store_job_rec_free(&job);
	if (v != ART_SERVE_OK)
		return v;
	*err = store_job_artifact(st, w->job, w->sha, &w->size, &w->total);
	if (*err == RCS_OK)
		*err = store_artifact_get(st, w->tenant, w->sha, &w->a);
	if (*err == RCS_ERR_NOTFOUND)
		return ART_SERVE_NOTFOUND;
	return *err == RCS_OK ? ART_SERVE_OK : ART_SERVE_ERROR;
}

enum rcs_err art_serve_begin(struct store *st, const struct art_want *w, long long len,
			     const struct art_audit *au, bool *capped, long long *served)
{
	long long cap = ART_SERVE_CAP_TIMES * w->total;
	bool first = false;
	struct audit_rec rec;
	enum rcs_err err = store_tx_begin(st);

	*capped = false;
	*served = 0;
	if (err != RCS_OK)
		return err;
	err = store_job_download_begin(st, w->job, w->sha, len, cap, served, &first);
	if (err == RCS_OK && first) {
		memset(&rec, 0, sizeof(rec));
		rec.client_root = (char *)w->tenant;
		rec.ts = (int64_t)time(NULL);
		rec.user = (char *)w->device;
		rec.method = (char *)au->method;
		rec.path = (char *)au->path;
		rec.target = (char *)w->job;
		rec.status_code = au->status;
		rec.remote = (char *)au->remote;
		err = store_audit_add(st, &rec);
	}
	err = store_tx_end(st, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
	if (err == RCS_OK && cap > 0 && *served >= cap)
		*capped = true;
	return err;
}

void art_serve_end(struct store *st, const char *job, const char *sha, long long len,
		   long long sent)
{
	enum rcs_err err;

	if (sent >= len)
		return;
	err = store_tx_begin(st);
	if (err == RCS_OK) {
		err = store_job_download_end(st, job, sha, len, sent);
		err = store_tx_end(st, err == RCS_OK) == RCS_OK ? err : RCS_ERR_DB;
	}
	if (err != RCS_OK)
		log_warnx("device download of job %s: its bytes not counted: %s", job,
			  rcs_strerror(err));
}

struct art_source {
	struct store *st;
	int fd; /* the file (SQLite), -1: the chunks of blob_id (PostgreSQL) */
	char blob_id[40];
	long long chunk; /* the chunk in buf, -1: none */
	size_t got;
	unsigned char *buf;
};

struct art_source *art_source_open(struct store *st, const char *dir, const struct art_want *w)
{
	struct art_source *s = calloc(1, sizeof(*s));
	char path[PATH_MAX];
	struct stat sb;

	if (s == NULL)
		return NULL;
	s->st = st;
	s->fd = -1;
	s->chunk = -1;
	if (w->a.blob_id[0]) {
		snprintf(s->blob_id, sizeof(s->blob_id), "%s", w->a.blob_id);
		s->buf = malloc(STORE_ARTIFACT_CHUNK);
		if (s->buf != NULL)
			return s;
	} else if (store_artifact_path(dir, w->tenant, w->sha, path, sizeof(path))) {
		s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (s->fd >= 0 && fstat(s->fd, &sb) == 0 && sb.st_size == w->a.size)
			return s;
		log_warnx("device download: %s: %s", path,
			  s->fd < 0 ? strerror(errno) : "not the size of its record");
	}
	art_source_close(s);
	return NULL;
}

ssize_t art_source_read(struct art_source *s, long long at, void *out, size_t max)
{
	long long c = at / STORE_ARTIFACT_CHUNK;
	size_t off = (size_t)(at % STORE_ARTIFACT_CHUNK);
	ssize_t n;

	if (s->fd >= 0) {
		n = pread(s->fd, out, max, (off_t)at);
		return n > 0 ? n : -1;
	}
	if (c != s->chunk) {
		s->chunk = -1;
		if (store_artifact_chunk(s->st, s->blob_id, c, s->buf, STORE_ARTIFACT_CHUNK,
					 &s->got) != RCS_OK)
			return -1;
		s->chunk = c;
	}
	if (off >= s->got)
		return -1;
	if (max > s->got - off)
		max = s->got - off;
	memcpy(out, s->buf + off, max);
	return (ssize_t)max;
}

void art_source_close(struct art_source *s)
{
	if (s == NULL)
		return;
	if (s->fd >= 0)
		close(s->fd);
	free(s->buf);
	free(s);
}
