/*
 * dl_pacer.c - suspended device downloads and their wake-up times (docs/api.md, "Download
 * limits"): one thread resumes each connection when its time comes. See dl_pacer.h.
 */
#include "dl_pacer.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct dl_sleeper {
	struct MHD_Connection *conn;
	int64_t wake_ms;
};

struct dl_pacer {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool stopping;
	struct dl_sleeper *s;
	size_t n, cap;
};

int64_t dl_pacer_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Resumes the sleepers due at now_ms (all when the pacer stops); the earliest wake-up of
 * those left, or -1. Under p->mu. */
static int64_t dl_pacer_wake(struct dl_pacer *p, int64_t now_ms)
{
	int64_t next = -1;
	size_t k = 0;

	for (size_t i = 0; i < p->n; i++) {
		if (p->stopping || p->s[i].wake_ms <= now_ms) {
			MHD_resume_connection(p->s[i].conn);
			continue;
		}
		if (next < 0 || p->s[i].wake_ms < next)
			next = p->s[i].wake_ms;
		p->s[k++] = p->s[i];
	}
	p->n = k;
	return next;
}

static void *dl_pacer_run(void *arg)
{
	struct dl_pacer *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->stopping || p->n > 0) {
		int64_t next = dl_pacer_wake(p, dl_pacer_now_ms());
		struct timespec ts;

		if (p->stopping)
			continue;
		if (next < 0) {
			pthread_cond_wait(&p->cv, &p->mu);
			continue;
		}
		ts.tv_sec = (time_t)(next / 1000);
		ts.tv_nsec = (long)(next % 1000) * 1000000;
		while (!p->stopping && dl_pacer_now_ms() < next &&
		       pthread_cond_timedwait(&p->cv, &p->mu, &ts) != ETIMEDOUT)
			; /* woken by a new sleeper or the stop: look again */
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

enum rcs_err dl_pacer_start(struct dl_pacer **out)
{
	struct dl_pacer *p = calloc(1, sizeof(*p));
	pthread_condattr_t ca;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	if (p == NULL)
		goto out;
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&p->thread, NULL, dl_pacer_run, p) != 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		err = RCS_ERR_IO;
		goto out;
	}
	*out = p;
	err = RCS_OK;
out:
	return err;
}

void dl_pacer_stop(struct dl_pacer *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	if (p->stopping) {
		pthread_mutex_unlock(&p->mu);
		return;
	}
	p->stopping = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
}

void dl_pacer_free(struct dl_pacer *p)
{
	if (p == NULL)
		return;
	dl_pacer_stop(p);
	free(p->s);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

bool dl_pacer_sleep(struct dl_pacer *p, void *conn, int64_t wake_ms)
{
	bool ok = false;

	pthread_mutex_lock(&p->mu);
	if (p->stopping)
		goto out;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		struct dl_sleeper *ns = realloc(p->s, cap * sizeof(*ns));

		if (ns == NULL)
			goto out;
		p->s = ns;
		p->cap = cap;
	}
	MHD_suspend_connection(conn);
	p->s[p->n].conn = conn;
	p->s[p->n].wake_ms = wake_ms;
	p->n++;
	pthread_cond_signal(&p->cv);
	ok = true;
out:
	pthread_mutex_unlock(&p->mu);
	return ok;
}
