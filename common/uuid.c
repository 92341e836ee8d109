#include "uuid.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "text.h"

enum rcs_err rcs_random(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return RCS_ERR_IO;
		}
		p += got;
		n -= (size_t)got;
	}
	return RCS_OK;
}

/* The 8-4-4-4-12 text form (a bulk send makes thousands: no snprintf) */
static void uuid_format(const unsigned char b[16], char out[UUID_STR_LEN])
{
	/* the 8-4-4-4-12 groups: each written as hex, its NUL replaced by the dash */
	text_hex_encode(b, 4, out);
	out[8] = '-';
	text_hex_encode(b + 4, 2, out + 9);
	out[13] = '-';
	text_hex_encode(b + 6, 2, out + 14);
	out[18] = '-';
	text_hex_encode(b + 8, 2, out + 19);
	out[23] = '-';
	text_hex_encode(b + 10, 6, out + 24);
}

/*
 * Monotonic within the process (RFC 9562 section 6.2, method 1): ids made in
 * the same millisecond share its timestamp and count up in the 12 bits of
 * rand_a, so a batch of jobs lists in creation order.
 */
static pthread_mutex_t uuid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t uuid_last_ms;
static uint16_t uuid_counter;

enum rcs_err uuid_v7(char out[UUID_STR_LEN])
{
	unsigned char b[16];
	struct timespec ts;
	uint64_t ms;
	uint16_t counter;
	enum rcs_err err;

	err = rcs_random(b + 6, 10);
	if (err != RCS_OK)
		return err;
	clock_gettime(CLOCK_REALTIME, &ts);
	ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	pthread_mutex_lock(&uuid_lock);
	if (ms > uuid_last_ms) {
		uuid_last_ms = ms;
		/* start low in the range so many ids fit in one millisecond */
		uuid_counter = (uint16_t)(((b[6] << 8) | b[7]) & 0x01ff);
	} else if (++uuid_counter > 0x0fff) {
		uuid_last_ms++; /* borrow the next millisecond */
		uuid_counter = 0;
	}
	ms = uuid_last_ms;
	counter = uuid_counter;
	pthread_mutex_unlock(&uuid_lock);
	for (int i = 0; i < 6; i++)
		b[i] = (unsigned char)(ms >> (40 - 8 * i));
	b[6] = (unsigned char)(0x70 | ((counter >> 8) & 0x0f));
	b[7] = (unsigned char)(counter & 0xff);
	b[8] = (unsigned char)(0x80 | (b[8] & 0x3f));
	uuid_format(b, out);
	return RCS_OK;
}

bool uuid_valid(const char *s)
{
	static const char dash_at[] = {8, 13, 18, 23};
	size_t i, d = 0;

	if (s == NULL || strlen(s) != 36)
		return false;
	for (i = 0; i < 36; i++) {
		char c = s[i];
		if (d < sizeof(dash_at) && (size_t)dash_at[d] == i) {
			if (c != '-')
				return false;
			d++;
			continue;
		}
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return false;
	}
	return true;
}

enum rcs_err rcs_random_hex(char *out, size_t n)
{
	unsigned char b[64];
	enum rcs_err err;

	if (n > sizeof(b))
		return RCS_ERR_TOOBIG;
	err = rcs_random(b, n);
	if (err != RCS_OK)
		return err;
	text_hex_encode(b, n, out);
	return RCS_OK;
}
