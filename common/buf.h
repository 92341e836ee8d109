/*
 * buf.h - a bounded, growable byte buffer (curl's dynbuf idea).
 *
 * Every buffer has a ceiling fixed at init; appending past it fails with
 * RCS_ERR_TOOBIG and leaves the buffer as it was. The data is always
 * NUL-terminated (the NUL is not counted in len). buf_free() releases it.
 */
#ifndef RCS_BUF_H
#define RCS_BUF_H

#include <stddef.h>

#include "err.h"

struct buf {
	char *data;
	size_t len;
	size_t cap;
	size_t max; /* ceiling for len */
};

void buf_init(struct buf *b, size_t max);
enum rcs_err buf_append(struct buf *b, const void *data, size_t n);
enum rcs_err buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Room for n more bytes at the end: where to write them, or NULL (*err says why; the buffer
 * is as it was). buf_added(b, k) then counts the k <= n bytes written there. */
char *buf_room(struct buf *b, size_t n, enum rcs_err *err);
void buf_added(struct buf *b, size_t n);
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

#endif
