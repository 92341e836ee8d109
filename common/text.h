/*
 * text.h - UTF-8, hex and lists joined, the one implementation both daemons use (JSON bodies,
 * canonical JSON, digests, identifiers, what scripts hand back).
 */
#ifndef RCS_TEXT_H
#define RCS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Decodes the code point of UTF-8 at s[*i] (n bytes in all) into *cp and
 * advances *i. False on a malformed, truncated or overlong sequence, a
 * surrogate or a code point past U+10FFFF (*i is left as it was).
 */
bool text_utf8_next(const unsigned char *s, size_t n, size_t *i, uint32_t *cp);
/* Whether s (n bytes) is valid UTF-8 as text_utf8_next reads it. */
bool text_utf8_valid(const char *s, size_t n);
/* Whether s (n bytes) is valid UTF-8 without control characters (C0, DEL, C1): a label, an
 * attribute key or value (docs/mqtt.md "Device state"). */
bool text_printable(const char *s, size_t n);
/* Lowercase hex of in (n bytes) into out, which holds 2 * n + 1 bytes (NUL-terminated). */
void text_hex_encode(const unsigned char *in, size_t n, char *out);
/* The value of one hex digit (either case), -1 for anything else. */
int text_hex_digit(char c);
/* n bytes from the 2 * n hex digits at hex (either case) into out: false, and out partly
 * written, when one of them is not a hex digit. */
bool text_hex_decode(const char *hex, size_t n, unsigned char *out);
/* items[0..n) joined by sep into out (len bytes, NUL-terminated; cut short to fit). */
void text_join(char *const *items, size_t n, const char *sep, char *out, size_t len);

#endif
