/*
 * dl_limits.c - a group's download limits (docs/api.md, "Download limits"): the devices of
 * each group that download now, and each group's bucket of bytes. A group's entry goes
 * when no device of it downloads and its bucket is full again. See dl_limits.h.
 */
#include "dl_limits.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "uuid.h"

#define DL_IDENT_MAX UUID_STR_LEN

struct dl_device {
	char ident[DL_IDENT_MAX];
	unsigned inflight; /* admitted requests not yet ended */
	int64_t until_ms;  /* with none in flight: downloading until then */
};

struct dl_group {
	char ident[DL_IDENT_MAX];
	struct dl_device *dev;
	size_t n, cap;
	long long rate; /* the rate the bucket was last filled at; 0: none seen */
	double tokens;  /* bytes that may go out now */
	int64_t at_ms;  /* when tokens was counted */
};

struct dl_limits {
	pthread_mutex_t mu;
	struct dl_group *g;
	size_t n, cap;
};

enum rcs_err dl_limits_new(struct dl_limits **out)
{
	struct dl_limits *l = calloc(1, sizeof(*l));

	*out = NULL;
	if (l == NULL)
		return RCS_ERR_NOMEM;
	pthread_mutex_init(&l->mu, NULL);
	*out = l;
	return RCS_OK;
}

void dl_limits_free(struct dl_limits *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->g[i].dev);
	free(l->g);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* Whether a device downloads at now_ms. */
static bool dl_device_active(const struct dl_device *d, int64_t now_ms)
{
	return d->inflight > 0 || now_ms < d->until_ms;
}

/* Drops the devices that no longer download. */
static void dl_group_prune(struct dl_group *g, int64_t now_ms)
{
	size_t k = 0;

	for (size_t i = 0; i < g->n; i++)
		if (dl_device_active(&g->dev[i], now_ms))
			g->dev[k++] = g->dev[i];
	g->n = k;
}

/* The bucket at now_ms, filled at rate (holding at most one second's worth). */
static void dl_group_fill(struct dl_group *g, long long rate, int64_t now_ms)
{
	if (g->rate != rate || g->at_ms == 0 || now_ms < g->at_ms) {
		/* a first fill, a new rate or a clock that went back: a full second */
		g->rate = rate;
		g->tokens = (double)rate;
	} else {
		g->tokens += (double)rate * (double)(now_ms - g->at_ms) / 1000.0;
		if (g->tokens > (double)rate)
			g->tokens = (double)rate;
	}
	g->at_ms = now_ms;
}

/* Whether a group's entry holds nothing worth keeping: no device downloads and its bucket
 * would be full again. */
static bool dl_group_idle(struct dl_group *g, int64_t now_ms)
{
	dl_group_prune(g, now_ms);
	return g->n == 0 && (g->rate == 0 || now_ms - g->at_ms >= 1000);
}

/* The group's entry, made when make (NULL: none, or no memory). Idle entries of other
 * groups go on the way. */
static struct dl_group *dl_group_find(struct dl_limits *l, const char *group, bool make,
				      int64_t now_ms)
{
	struct dl_group *found = NULL;
	size_t k = 0;

	for (size_t i = 0; i < l->n; i++) {
		struct dl_group *g = &l->g[i];

		if (strcmp(g->ident, group) != 0 && dl_group_idle(g, now_ms)) {
			free(g->dev);
			continue;
		}
		l->g[k] = *g;
		if (strcmp(l->g[k].ident, group) == 0)
			found = &l->g[k];
		k++;
	}
	l->n = k;
	if (found != NULL || !make)
		goto out;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct dl_group *ng = realloc(l->g, cap * sizeof(*ng));

		if (ng == NULL)
			goto out;
		l->g = ng;
		l->cap = cap;
	}
	found = &l->g[l->n++];
	memset(found, 0, sizeof(*found));
	strncpy(found->ident, group, sizeof(found->ident) - 1);
out:
	return found;
}

static struct dl_device *dl_device_find(struct dl_group *g, const char *device)
{
	for (size_t i = 0; i < g->n; i++)
		if (strcmp(g->dev[i].ident, device) == 0)
			return &g->dev[i];
	return NULL;
}

/* Seconds until a place is likely to be free: the nearest end of a device with no request
 * in flight, else DL_RETRY_S. */
static int dl_retry_after(const struct dl_group *g, int64_t now_ms)
{
	int64_t best = -1;

	for (size_t i = 0; i < g->n; i++)
		if (g->dev[i].inflight == 0 && (best < 0 || g->dev[i].until_ms - now_ms < best))
			best = g->dev[i].until_ms - now_ms;
	if (best < 0)
		return DL_RETRY_S;
	best = (best + 999) / 1000;
	return best < 1 ? 1 : best > DL_IDLE_MS / 1000 ? DL_IDLE_MS / 1000 : (int)best;
}

bool dl_limits_admit(struct dl_limits *l, const char *group, const char *device,
		     const struct dl_limit *lim, int64_t now_ms, int *retry_after_s)
{
	struct dl_group *g;
	struct dl_device *d;
	bool ok = true;

	*retry_after_s = 0;
	pthread_mutex_lock(&l->mu);
	g = dl_group_find(l, group, true, now_ms);
	if (g == NULL)
		goto out; /* no memory: not held back for it */
	dl_group_prune(g, now_ms);
	d = dl_device_find(g, device);
	if (d == NULL && lim->max_concurrent > 0 && (long long)g->n >= lim->max_concurrent) {
		*retry_after_s = dl_retry_after(g, now_ms);
		ok = false;
		goto out;
	}
	if (d == NULL) {
		if (g->n == g->cap) {
			size_t cap = g->cap ? g->cap * 2 : 4;
			struct dl_device *nd = realloc(g->dev, cap * sizeof(*nd));

			if (nd == NULL)
				goto out;
			g->dev = nd;
			g->cap = cap;
		}
		d = &g->dev[g->n++];
		memset(d, 0, sizeof(*d));
		strncpy(d->ident, device, sizeof(d->ident) - 1);
	}
	d->inflight++;
out:
	pthread_mutex_unlock(&l->mu);
	return ok;
}

void dl_limits_end(struct dl_limits *l, const char *group, const char *device, bool complete,
		   int64_t now_ms)
{
	struct dl_group *g;
	struct dl_device *d;

	pthread_mutex_lock(&l->mu);
	g = dl_group_find(l, group, false, now_ms);
	d = g ? dl_device_find(g, device) : NULL;
	if (d != NULL) {
		if (d->inflight > 0)
			d->inflight--;
		d->until_ms = now_ms + (complete ? DL_DONE_MS : DL_IDLE_MS);
	}
	pthread_mutex_unlock(&l->mu);
}

size_t dl_limits_take(struct dl_limits *l, const char *group, long long rate, size_t want,
		      int64_t now_ms, int64_t *wait_ms)
{
	struct dl_group *g;
	size_t got = want;

	*wait_ms = 0;
	if (rate <= 0 || want == 0)
		return want;
	pthread_mutex_lock(&l->mu);
	g = dl_group_find(l, group, true, now_ms);
	if (g == NULL)
		goto out;
	dl_group_fill(g, rate, now_ms);
	if (g->tokens < 1.0) {
		/* the time one block's worth (at most a tenth of a second's) takes to come */
		double need =
		    (double)want < (double)rate / 10.0 ? (double)want : (double)rate / 10.0;

		if (need < 1.0)
			need = 1.0;
		*wait_ms = (int64_t)((need - g->tokens) * 1000.0 / (double)rate) + 1;
		got = 0;
		goto out;
	}
	if ((double)got > g->tokens)
		got = (size_t)g->tokens;
	g->tokens -= (double)got;
out:
	pthread_mutex_unlock(&l->mu);
	return got;
}

int64_t dl_limits_reserve(struct dl_limits *l, const char *group, long long rate, size_t bytes,
			  int64_t now_ms)
{
	struct dl_group *g;
	int64_t wait = 0;

	if (rate <= 0 || bytes == 0)
		return 0;
	pthread_mutex_lock(&l->mu);
	g = dl_group_find(l, group, true, now_ms);
	if (g != NULL) {
		dl_group_fill(g, rate, now_ms);
		g->tokens -= (double)bytes;
		if (g->tokens < 0)
			wait = (int64_t)(-g->tokens * 1000.0 / (double)rate) + 1;
	}
	pthread_mutex_unlock(&l->mu);
	return wait;
}

size_t dl_limits_active(struct dl_limits *l, const char *group, int64_t now_ms)
{
	struct dl_group *g;
	size_t n = 0;

	pthread_mutex_lock(&l->mu);
	g = dl_group_find(l, group, false, now_ms);
	if (g != NULL) {
		dl_group_prune(g, now_ms);
		n = g->n;
	}
	pthread_mutex_unlock(&l->mu);
	return n;
}
