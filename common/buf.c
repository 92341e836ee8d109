#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

static enum rcs_err buf_reserve(struct buf *b, size_t n)
{
	size_t want, ncap;
	char *p;

	if (n > b->max || b->len > b->max - n)
		return RCS_ERR_TOOBIG;
	want = b->len + n + 1;
	if (want <= b->cap)
		return RCS_OK;
	ncap = b->cap ? b->cap : 256;
	while (ncap < want)
		ncap *= 2;
	if (ncap > b->max + 1)
		ncap = b->max + 1;
	p = realloc(b->data, ncap);
	if (p == NULL)
		return RCS_ERR_NOMEM;
	b->data = p;
	b->cap = ncap;
	return RCS_OK;
}

enum rcs_err buf_append(struct buf *b, const void *data, size_t n)
{
	enum rcs_err err = buf_reserve(b, n);

	if (err != RCS_OK)
		return err;
	if (n > 0)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return RCS_OK;
}

char *buf_room(struct buf *b, size_t n, enum rcs_err *err)
{
	*err = buf_reserve(b, n);
	return *err == RCS_OK ? b->data + b->len : NULL;
}

void buf_added(struct buf *b, size_t n)
{
	b->len += n;
	b->data[b->len] = '\0';
}

enum rcs_err buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	enum rcs_err err;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return RCS_ERR_INVAL;
	err = buf_reserve(b, (size_t)n);
	if (err != RCS_OK)
		return err;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return RCS_OK;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
