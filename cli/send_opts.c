/*
 * send_opts.c - the parsing of rcs send's rollout options into the bulk send's members
 * (docs/cli.md "Rollouts"; the members: docs/api.md "Rollouts"): --window, --exponential,
 * the retry's backoff factor, --download-max-rate's size. The API checks the ranges again (400
 * naming the member).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "send.h"

static const char *const send_days[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};

static int send_day(const char *s, size_t n)
{
	for (int i = 0; i < 7; i++)
		if (n == 3 && strncmp(s, send_days[i], 3) == 0)
			return i;
	return -1;
}

/* "mon,wed", "mon-fri", "fri-mon", "daily" into a bit per day (mon = bit 0); 0 when bad. */
static unsigned send_day_bits(const char *s, size_t len)
{
	unsigned bits = 0;
	size_t i = 0;

	if (len == 5 && strncmp(s, "daily", 5) == 0)
		return 0x7f;
	while (i < len) {
		size_t n = 0;
		int a, b;

		while (i + n < len && s[i + n] != ',')
			n++;
		a = send_day(s + i, n < 3 ? n : 3);
		b = a;
		if (n == 7 && s[i + 3] == '-')
			b = send_day(s + i + 4, 3);
		else if (n != 3)
			a = -1;
		if (a < 0 || b < 0)
			return 0;
		for (int d = a;; d = (d + 1) % 7) {
			bits |= 1u << d;
			if (d == b)
				break;
		}
		i += n + 1;
		if (i == len && s[len - 1] == ',')
			return 0;
	}
	return bits;
}

/* "120", "120m", "2h" into minutes; -1 when bad. */
static long send_minutes(const char *s)
{
	char *end = NULL;
	long v;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || v > 100000)
		return -1;
	if (*end == 'h' && end[1] == '\0')
		return v * 60;
	if ((*end == 'm' && end[1] == '\0') || *end == '\0')
		return v;
	return -1;
}

enum rcs_err send_parse_window(const char *spec, long long utc_offset_min, json_object **out,
			       char *errbuf, size_t errlen)
{
	const char *s1 = strchr(spec, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
	unsigned bits = s1 ? send_day_bits(spec, (size_t)(s1 - spec)) : 0;
	int hh = -1, mm = -1, n = 0;
	long dur = -1;
	char start[8];
	json_object *w = NULL, *days = NULL;

	*out = NULL;
	if (s2 != NULL && sscanf(s1 + 1, "%2d:%2d%n", &hh, &mm, &n) == 2 && s1 + 1 + n == s2)
		dur = send_minutes(s2 + 1);
	if (bits == 0 || hh < 0 || hh > 23 || mm < 0 || mm > 59 || s1[1 + 2] != ':' || dur < 1 ||
	    dur > 1440) {
		snprintf(errbuf, errlen,
			 "'%s': write it DAYS/HH:MM/DURATION, e.g. sat,sun/02:00/2h or "
			 "mon-fri/22:30/90 (days mon..sun, a range, or daily; 1 to 1440 minutes)",
			 spec);
		return RCS_ERR_INVAL;
	}
	snprintf(start, sizeof(start), "%02d:%02d", hh, mm);
	w = json_object_new_object();
	days = json_object_new_array();
	for (int d = 0; days && d < 7; d++)
		if (bits & (1u << d))
			json_object_array_add(days, json_object_new_string(send_days[d]));
	if (w == NULL || days == NULL || json_object_object_add(w, "days", days) != 0) {
		json_object_put(days);
		json_object_put(w);
		snprintf(errbuf, errlen, "out of memory");
		return RCS_ERR_NOMEM;
	}
	json_object_object_add(w, "start", json_object_new_string(start));
	json_object_object_add(w, "duration_min", json_object_new_int64(dur));
	json_object_object_add(w, "utc_offset_min", json_object_new_int64(utc_offset_min));
	*out = w;
	return RCS_OK;
}

enum rcs_err send_parse_bytes(const char *s, long long lo, long long hi, long long *out)
{
	static const char units[] = "KMGT";
	const char *u;
	char *end = NULL;
	double d, scale = 1;

	if (!isdigit((unsigned char)s[0]))
		return RCS_ERR_INVAL;
	errno = 0;
	d = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(d) || strspn(s, "0123456789.") != (size_t)(end - s))
		return RCS_ERR_INVAL; /* decimal digits only (no hexadecimal, no exponent) */
	if (*end != '\0') {
		u = strchr(units, toupper((unsigned char)*end));
		if (u == NULL)
			return RCS_ERR_INVAL;
		for (const char *p = units; p <= u; p++)
			scale *= 1024;
		end++;
		if (*end == 'i' && end[1] == 'B')
			end += 2;
		else if (*end == 'B' || *end == 'b')
			end++;
		if (*end != '\0')
			return RCS_ERR_INVAL;
	}
	d = floor(d * scale);
	if (d < (double)lo || d > (double)hi)
		return RCS_ERR_INVAL;
	*out = (long long)d;
	return RCS_OK;
}

enum rcs_err send_parse_number(const char *s, double lo, double hi, double *out)
{
	char *end = NULL;
	double d;

	errno = 0;
	d = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !isfinite(d) || d < lo || d > hi)
		return RCS_ERR_INVAL;
	*out = d;
	return RCS_OK;
}

enum rcs_err send_parse_exponential(const char *spec, json_object **out, char *errbuf,
				    size_t errlen)
{
	long long base = 0, after = 0;
	char fac[64];
	int n = 0;
	double f = 0;
	json_object *e;

	*out = NULL;
	if (sscanf(spec, "%lld,%63[^,],%lld%n", &base, fac, &after, &n) != 3 || spec[n] != '\0' ||
	    !isdigit((unsigned char)spec[0]) || base < 1 || after < 1 ||
	    send_parse_number(fac, 1, 10, &f) != RCS_OK) {
		snprintf(errbuf, errlen,
			 "'%s': write it N,F,K: N jobs a minute, times F (1 to 10) each time K "
			 "more jobs have terminated, e.g. 10,2,20",
			 spec);
		return RCS_ERR_INVAL;
	}
	e = json_object_new_object();
	if (e == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return RCS_ERR_NOMEM;
	}
	json_object_object_add(e, "base_per_minute", json_object_new_int64(base));
	json_object_object_add(e, "factor", json_object_new_double(f));
	json_object_object_add(e, "after_succeeded", json_object_new_int64(after));
	*out = e;
	return RCS_OK;
}
