/*
 * text.c - UTF-8, hex and lists joined. See text.h.
 */
#include "text.h"

#include <stdio.h>

bool text_utf8_next(const unsigned char *s, size_t n, size_t *i, uint32_t *cp)
{
	unsigned char c = s[*i];
	size_t k;
	uint32_t v;

	if (c < 0x80) {
		*cp = c;
		(*i)++;
		return true;
	}
	if ((c & 0xe0) == 0xc0) {
		k = 1;
		v = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		k = 2;
		v = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		k = 3;
		v = c & 0x07;
	} else {
		return false;
	}
	if (n - *i <= k)
		return false;
	for (size_t j = 1; j <= k; j++) {
		if ((s[*i + j] & 0xc0) != 0x80)
			return false;
		v = (v << 6) | (s[*i + j] & 0x3f);
	}
	if ((k == 1 && v < 0x80) || (k == 2 && v < 0x800) || (k == 3 && v < 0x10000) ||
	    v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return false;
	*cp = v;
	*i += k + 1;
	return true;
}

bool text_printable(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	uint32_t cp;

	while (i < n) {
		if (!text_utf8_next(u, n, &i, &cp) || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return false;
	}
	return true;
}

bool text_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	uint32_t cp;

	while (i < n) {
		if (u[i] < 0x80) {
			i++; /* ASCII: the common case, without a call */
			continue;
		}
		if (!text_utf8_next(u, n, &i, &cp))
			return false;
	}
	return true;
}

void text_hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 0xf];
	}
	out[2 * n] = '\0';
}

int text_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool text_hex_decode(const char *hex, size_t n, unsigned char *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = text_hex_digit(hex[2 * i]),
		    lo = hi < 0 ? -1 : text_hex_digit(hex[2 * i + 1]);

		if (lo < 0)
			return false;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

void text_join(char *const *items, size_t n, const char *sep, char *out, size_t len)
{
	size_t used = 0;

	if (len == 0)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++) {
		int w = snprintf(out + used, len - used, "%s%s", i ? sep : "", items[i]);

		if (w < 0)
			break;
		used += (size_t)w;
	}
}
