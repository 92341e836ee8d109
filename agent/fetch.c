/*
 * fetch.c - an artifact's part file: resumed, hashed, fsynced, journaled, verified and
 * renamed. See fetch.h; the transfer itself is fetch_http.c.
 */
#define _FILE_OFFSET_BITS 64
#include "fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define FETCH_READ_CHUNK (16 * 1024)

/* artifacts past 2 GiB on 32-bit ARM too (docs/agent.md "Artifacts") */
_Static_assert(sizeof(off_t) == 8, "fetch.c needs 64-bit file offsets");

static void fetch_hex(const unsigned char d[32], char hex[65])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 15];
	}
	hex[64] = '\0';
}

/* Hashes the first n bytes of fd into sha (started afresh). */
static enum rcs_err fetch_hash_fd(int fd, int64_t n, mbedtls_sha256_context *sha)
{
	unsigned char chunk[FETCH_READ_CHUNK];
	enum rcs_err err = RCS_ERR_IO;
	int64_t at = 0;

	mbedtls_sha256_starts_ret(sha, 0);
	while (at < n) {
		size_t want = (size_t)(n - at < FETCH_READ_CHUNK ? n - at : FETCH_READ_CHUNK);
		ssize_t got = pread(fd, chunk, want, (off_t)at);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			goto out;
		mbedtls_sha256_update_ret(sha, chunk, (size_t)got);
		at += got;
	}
	err = RCS_OK;
out:
	return err;
}

enum rcs_err fetch_hash_file(int dirfd, const char *name, char hex[65], int64_t *size)
{
	mbedtls_sha256_context sha;
	unsigned char d[32];
	struct stat st;
	enum rcs_err err;
	int fd;

	hex[0] = '\0';
	*size = 0;
	mbedtls_sha256_init(&sha);
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = errno == ENOENT  ? RCS_ERR_NOTFOUND
		      : errno == ELOOP ? RCS_ERR_FORBIDDEN
				       : RCS_ERR_IO;
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err = RCS_ERR_FORBIDDEN;
		goto out;
	}
	err = fetch_hash_fd(fd, (int64_t)st.st_size, &sha);
	if (err != RCS_OK)
		goto out;
	mbedtls_sha256_finish_ret(&sha, d);
	fetch_hex(d, hex);
	*size = (int64_t)st.st_size;
out:
	if (fd >= 0)
		close(fd);
	mbedtls_sha256_free(&sha);
	return err;
}

enum rcs_err fetch_part_open(int dirfd, const char *sha256, int64_t size, int64_t journaled,
			     struct fetch_part *p)
{
	char name[FETCH_NAME_LEN];
	struct stat st;
	enum rcs_err err = RCS_ERR_IO;

	memset(p, 0, sizeof(*p));
	p->fd = -1;
	mbedtls_sha256_init(&p->sha);
	snprintf(p->sha256, sizeof(p->sha256), "%s", sha256);
	p->size = size;
	snprintf(name, sizeof(name), "%s.part", sha256);
	p->fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (p->fd < 0) {
		err = errno == ELOOP ? RCS_ERR_FORBIDDEN : RCS_ERR_IO;
		goto out;
	}
	if (fstat(p->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		err = RCS_ERR_FORBIDDEN;
		goto out;
	}
	/* a power cut may have kept fewer bytes than journaled (the fsync of a later offset
	 * never happened, or the disk lied): then nothing is trusted */
	if (journaled < 0 || journaled > size || (int64_t)st.st_size < journaled)
		journaled = 0;
	if (ftruncate(p->fd, (off_t)journaled) != 0)
		goto out;
	err = fetch_hash_fd(p->fd, journaled, &p->sha);
	if (err != RCS_OK)
		goto out;
	p->offset = p->synced = journaled;
out:
	if (err != RCS_OK)
		fetch_part_close(p);
	return err;
}

enum rcs_err fetch_part_reset(struct fetch_part *p)
{
	if (ftruncate(p->fd, 0) != 0)
		return RCS_ERR_IO;
	mbedtls_sha256_starts_ret(&p->sha, 0);
	p->offset = p->synced = 0;
	return RCS_OK;
}

enum rcs_err fetch_part_sync(struct fetch_part *p, fetch_journal_fn journal, void *ctx)
{
	enum rcs_err err = RCS_OK;

	if (p->synced == p->offset)
		return RCS_OK;
	if (fdatasync(p->fd) != 0)
		return errno == ENOSPC ? RCS_ERR_FULL : RCS_ERR_IO;
	if (journal != NULL)
		err = journal(ctx, p->sha256, p->offset);
	if (err == RCS_OK)
		p->synced = p->offset;
	return err;
}

enum rcs_err fetch_part_write(struct fetch_part *p, const void *data, size_t n,
			      fetch_journal_fn journal, void *ctx)
{
	const char *c = data;
	size_t done = 0;

	if ((int64_t)n > p->size - p->offset)
		return RCS_ERR_TOOBIG;
	while (done < n) {
		ssize_t w = pwrite(p->fd, c + done, n - done, (off_t)p->offset);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 && errno == ENOSPC ? RCS_ERR_FULL : RCS_ERR_IO;
		mbedtls_sha256_update_ret(&p->sha, (const unsigned char *)c + done, (size_t)w);
		done += (size_t)w;
		p->offset += w;
	}
	if (p->offset - p->synced >= FETCH_JOURNAL_EVERY)
		return fetch_part_sync(p, journal, ctx);
	return RCS_OK;
}

enum rcs_err fetch_part_finish(int dirfd, struct fetch_part *p)
{
	char name[FETCH_NAME_LEN], hex[65];
	unsigned char d[32];
	mbedtls_sha256_context copy;
	enum rcs_err err = RCS_ERR_VERIFY;

	mbedtls_sha256_init(&copy);
	if (p->offset != p->size)
		goto out;
	mbedtls_sha256_clone(&copy, &p->sha);
	mbedtls_sha256_finish_ret(&copy, d);
	fetch_hex(d, hex);
	if (strcmp(hex, p->sha256) != 0)
		goto out;
	err = RCS_ERR_IO;
	snprintf(name, sizeof(name), "%s.part", p->sha256);
	if (fchmod(p->fd, 0444) != 0 || fsync(p->fd) != 0 ||
	    renameat(dirfd, name, dirfd, p->sha256) != 0 || fsync(dirfd) != 0)
		goto out;
	err = RCS_OK;
out:
	mbedtls_sha256_free(&copy);
	return err;
}

void fetch_part_close(struct fetch_part *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	mbedtls_sha256_free(&p->sha);
}

bool fetch_content_range_ok(const char *value, int64_t first, int64_t size)
{
	char want[96];
	size_t n;

	/* exactly one range, the one asked for, of the signed size (no multipart) */
	snprintf(want, sizeof(want), "bytes %lld-%lld/%lld", (long long)first,
		 (long long)(size - 1), (long long)size);
	n = strlen(want);
	if (strncasecmp(value, want, 6) != 0 || strncmp(value + 6, want + 6, n - 6) != 0)
		return false;
	value += n;
	while (*value == ' ' || *value == '\t' || *value == '\r' || *value == '\n')
		value++;
	return *value == '\0';
}
