/*
 * dl_admit.c - the admission of devices' chunks over MQTT. See dl_admit.h.
 *
 * A table of the devices with chunks in flight, or whose byte rate still paces the next one
 * (open addressing on the device's ident, linear probing; an entry that is neither is free
 * again). The rate: each chunk admitted moves the device's next free instant on by
 * len / rate, so chunks go out no faster than the rate, with no burst beyond one chunk.
 */
#include "dl_admit.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uuid.h"

struct dl_dev {
	char ident[UUID_STR_LEN]; /* "" : free */
	int inflight;
	int64_t next_us; /* the device's next chunk not before this */
};

struct dl_admit {
	long long rate;
	struct dl_dev dev[DL_ADMIT_DEVICES];
};

struct dl_admit *dl_admit_new(long long rate)
{
	struct dl_admit *a = calloc(1, sizeof(*a));

	if (a != NULL)
		a->rate = rate > 0 ? rate : 0;
	return a;
}

void dl_admit_free(struct dl_admit *a)
{
	free(a);
}

static size_t dl_hash(const char *s)
{
	size_t h = 14695981039346656037ULL & SIZE_MAX;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * (size_t)1099511628211ULL;
	return h % DL_ADMIT_DEVICES;
}

/* Whether entry d holds nothing any more at now_us (neither chunks nor pace). */
static bool dl_idle(const struct dl_dev *d, int64_t now_us)
{
	return d->inflight == 0 && d->next_us <= now_us;
}

/* The device's entry: found, or a free or idle one taken for it (now_us >= 0); NULL when the
 * table is full (or, now_us < 0, when it has none). */
static struct dl_dev *dl_find(struct dl_admit *a, const char *device, int64_t now_us)
{
	size_t h = dl_hash(device);
	struct dl_dev *spare = NULL;

	for (size_t i = 0; i < DL_ADMIT_DEVICES; i++) {
		struct dl_dev *d = &a->dev[(h + i) % DL_ADMIT_DEVICES];
		if (d->ident[0] == '\0') {
			if (spare == NULL)
				spare = d;
			break; /* the end of the probe: not there */
		}
		if (strcmp(d->ident, device) == 0)
			return d;
		if (spare == NULL && now_us >= 0 && dl_idle(d, now_us))
			spare = d;
	}
	if (spare == NULL || now_us < 0)
		return NULL;
	/* an idle entry reused keeps the probe's chain unbroken: it is never emptied */
	memset(spare, 0, sizeof(*spare));
	snprintf(spare->ident, sizeof(spare->ident), "%s", device);
	return spare;
}

bool dl_admit(struct dl_admit *a, const struct dl_ask *ask, int64_t now_us, int64_t *at_us)
{
	struct dl_dev *d = dl_find(a, ask->device, now_us);

	/* a group's download limits come after this, in chunks_get.c (dl_limits.h, shared with
	 * the HTTP route) */
	if (d == NULL || d->inflight >= DL_ADMIT_INFLIGHT)
		return false;
	*at_us = d->next_us > now_us ? d->next_us : now_us;
	if (a->rate > 0)
		d->next_us = *at_us + (int64_t)((long long)ask->len * 1000000LL / a->rate);
	d->inflight++;
	return true;
}

void dl_admit_done(struct dl_admit *a, const char *device)
{
	struct dl_dev *d = dl_find(a, device, -1);

	if (d != NULL && d->inflight > 0)
		d->inflight--;
}

int dl_admit_inflight(const struct dl_admit *a, const char *device)
{
	struct dl_dev *d = dl_find((struct dl_admit *)a, device, -1);

	return d != NULL ? d->inflight : 0;
}
