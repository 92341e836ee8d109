/*
 * scheduler.c - every timer of the coordinator. See scheduler.h.
 */
#include "scheduler.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rollout.h"
#include "status.h"
#include "store.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_queues.h"

#define SCHED_EXPIRE_LIMIT 5000 /* jobs expired per query */
#define SCHED_REBOOT_LIMIT 1000 /* jobs ended reboot_timeout per query */
#define SCHED_GROUPS_MAX   256  /* groups releasing jobs, read at a time */
#define SCHED_RELEASE_MAX  5000 /* jobs a group releases per run */
/*
 * The longest sleep, in seconds. Deadlines are wall-clock instants; a clock set is seen at
 * once through the timerfd, but one the kernel doesn't report (slewed, or faked for a test)
 * only at a wake-up: the thread wakes at least this often, compares the clock with the
 * deadlines, and touches storage only when one has come or the clock went back.
 */
#define SCHED_MAX_SLEEP 1

struct sched {
	struct store *st;
	struct lifecycle *lc;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	bool stop;
	bool wake;                 /* recompute the next deadline */
	bool transport_changed;    /* a transport came or went: sweep anew */
	struct sched_transport tr; /* tr.ctx NULL: none */
	int efd;                   /* eventfd: sched_wake, sched_stop */
	int clock_fd;              /* timerfd: the wall clock was set */
	bool link_up;              /* the transport was connected at the last look */
};

static void sched_kick(struct sched *s)
{
	uint64_t one = 1;

	if (write(s->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("eventfd");
}

static void sched_timers(void *ctx)
{
	sched_wake(ctx);
}

static int64_t sched_min(int64_t a, int64_t b)
{
	return a == 0 ? b : (b == 0 || a < b ? a : b);
}

/* One group's release (its own transaction); returns when it is due again (0: not known). */
static int64_t sched_release_group(struct sched *s, const struct group_rec *g, int64_t now,
				   int64_t now_ms)
{
	const struct group_settings *gs = &g->settings;
	struct store_idents ids = {.v = NULL, .n = 0};
	double rate, tokens = -1; /* no rate: no bucket */
	int64_t at = 0, next = 0;
	size_t limit = SCHED_RELEASE_MAX;
	enum rcs_err err, end;

	if (!rollout_window_open(gs, now)) {
		next = rollout_window_next(gs, now);
		goto out;
	}
	rate = rollout_rate(gs, g->n_succeeded);
	if (rate > 0) {
		tokens =
		    rollout_tokens((double)g->tokens_milli / 1000.0, g->tokens_at_ms, now_ms, rate);
		limit = tokens < (double)SCHED_RELEASE_MAX ? (size_t)tokens : SCHED_RELEASE_MAX;
	}
	err = store_tx_begin(s->st);
	if (err == RCS_OK) {
		err = store_group_release(s->st, g->ident, now, limit,
					  tokens < 0 ? -1 : (long long)(tokens * 1000.0), now_ms,
					  &ids, &at);
		if (err == RCS_OK)
			err = lifecycle_jobs_released(s->lc, &ids);
		end = store_tx_end(s->st, err == RCS_OK);
		if (err == RCS_OK)
			err = end;
	}
	if (err != RCS_OK) {
		log_warnx("group %s: jobs not released: %s", g->ident, rcs_strerror(err));
		next = now + 1;
	} else if (ids.n > 0) {
		log_debug("group %s: %zu jobs released", g->ident, ids.n);
	}
	store_idents_free(&ids);
	/* due already: the rate or the limit held the rest back; a second later */
	if (at != 0)
		next = sched_min(next, at <= now ? now + 1 : at);
out:
	return next;
}

/*
 * Releases the held jobs of running groups (docs/api.md "Rollouts"): inside the group's
 * window, after a retry's backoff, at the rollout's rate (a token bucket kept with the
 * group, so that a restart keeps the pace). Each group's release is one transaction; the
 * transport gets the jobs once it commits. Every group with a held job due is looked at,
 * SCHED_GROUPS_MAX at a time: one whose window is closed or whose rate holds its jobs back
 * never keeps a newer group waiting. Returns the next time a release is due (0: none).
 */
static int64_t sched_release(struct sched *s, int64_t now)
{
	struct store_group_list groups = {.items = NULL, .n = 0};
	char after[UUID_STR_LEN] = "";
	int64_t after_at = 0, now_ms, next = 0;
	struct timespec ts;
	bool more = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	while (more) {
		if (store_groups_releasing(s->st, now, after[0] ? after : NULL, after_at,
					   SCHED_GROUPS_MAX, &groups) != RCS_OK) {
			next = sched_min(next, now + 1);
			break;
		}
		for (size_t i = 0; i < groups.n; i++)
			next =
			    sched_min(next, sched_release_group(s, &groups.items[i], now, now_ms));
		more = groups.n == SCHED_GROUPS_MAX;
		if (more) {
			snprintf(after, sizeof(after), "%s", groups.items[groups.n - 1].ident);
			after_at = groups.items[groups.n - 1].created_at;
		}
		store_group_list_free(&groups);
	}
	return next;
}

/* See scheduler.h. */
size_t sched_reboot_timeouts(struct store *st, struct lifecycle *lc, int64_t now, size_t *moved)
{
	struct store_idents ids;
	size_t n;

	if (store_jobs_reboot_due(st, now, SCHED_REBOOT_LIMIT, &ids) != RCS_OK)
		return 0;
	n = ids.n;
	for (size_t i = 0; i < n; i++) {
		struct job_rec job;
		struct job_move m;
		char response[80];
		enum store_move res = STORE_MOVE_DUPLICATE;

		if (store_job_rec_get(st, ids.v[i], &job) != RCS_OK)
			continue;
		snprintf(response, sizeof(response), "device did not come back within %lld s",
			 (long long)job.reboot_within);
		store_job_rec_free(&job);
		m = (struct job_move){
		    .ident = ids.v[i],
		    .to = JS_EDGE_ERROR,
		    .response = response,
		    .set_response_time = true,
		    .now = now,
		    .error_code = "reboot_timeout",
		    .reboot_timeout = true,
		};
		if (lifecycle_move(lc, &m, &res, NULL) == RCS_OK && res == STORE_MOVE_APPLIED) {
			log_info("job %s: %s (reboot_timeout)", ids.v[i], response);
			(*moved)++;
		}
	}
	store_idents_free(&ids);
	return n;
}

/* Whether the device's reports reach the store now: the transport connected, its reports
 * not held in its backlog. */
static bool sched_link_up(const struct sched_transport *tr)
{
	return tr->ctx != NULL && tr->ready(tr->ctx) &&
	       (tr->reports_held == NULL || !tr->reports_held(tr->ctx));
}

/*
 * The device's reports reaching the store, as the scheduler saw it last: when they do again
 * (at start, after a lost connection, after a backlog held them) every reboot deadline is
 * pushed to at least now + its within, so that the coordinator's own downtime or backlog
 * never fails a device (docs/api.md "Jobs"). Returns whether they reach it now.
 */
static bool sched_link(struct sched *s, const struct sched_transport *tr, int64_t now)
{
	bool up = sched_link_up(tr);

	if (up && !s->link_up && store_jobs_reboot_push(s->st, now) != RCS_OK) {
		log_warnx("reboot deadlines not pushed: looked at again in a second");
		up = false;
	}
	s->link_up = up;
	return up;
}

/*
 * Expires jobs past their ttl, has the transport send those whose time came; returns the
 * next deadline (0: none). A deadline that is already past (a job that could not be
 * expired: the disk is full, say) comes back a second later, not at once: the thread
 * never spins on storage that fails.
 */
static int64_t sched_run(struct sched *s, const struct sched_transport *tr, int64_t now)
{
	struct store_idents ids;
	int64_t next = 0, release;
	size_t n = 0, moved = 0, n_reboot = 0, moved_reboot = 0;

	if (store_jobs_expired(s->st, now, SCHED_EXPIRE_LIMIT, &ids) == RCS_OK) {
		n = ids.n;
		for (size_t i = 0; i < n; i++) {
			struct job_move m = {
			    .ident = ids.v[i],
			    .to = JS_EXPIRED,
			    .response = "expired: not received by the device within its ttl",
			    .set_response_time = true,
			    .now = now,
			};
			enum store_move res;

			if (lifecycle_move(s->lc, &m, &res, NULL) == RCS_OK)
				moved++;
		}
		store_idents_free(&ids);
	}
	if (sched_link(s, tr, now))
		n_reboot = sched_reboot_timeouts(s->st, s->lc, now, &moved_reboot);
	release = sched_release(s, now);
	if (tr->ctx && tr->ready(tr->ctx))
		tr->send_due(tr->ctx, now);
	/* a full page that moved: more are due at once */
	if ((n == SCHED_EXPIRE_LIMIT && moved > 0) ||
	    (n_reboot == SCHED_REBOOT_LIMIT && moved_reboot > 0))
		return now;
	if (store_next_wakeup(s->st, now, &next) != RCS_OK || (next != 0 && next <= now))
		next = now + 1;
	/* a shared database: other coordinators' writes (a job made or scheduled there, a claim
	 * whose lease ended) are looked for every second behind their NOTIFY (store_listen);
	 * and this coordinator says it is running */
	if (store_shared(s->st)) {
		next = sched_min(next, now + 1);
		if (store_node_beat(s->st, now) != RCS_OK)
			log_warnx("this coordinator's sign of life not stored");
	}
	return sched_min(next, release);
}

/* Arms the timerfd so that setting the wall clock wakes the thread. */
static void sched_arm_clock(struct sched *s)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = (time_t)time(NULL) + 10L * 365 * 86400;
	if (timerfd_settime(s->clock_fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &its, NULL) <
	    0)
		log_warn("timerfd");
}

static void *sched_thread(void *arg)
{
	struct sched *s = arg;
	int64_t next_deadline = 0, next_sweep = 0, last_now = 0;
	bool run = true;

	sched_arm_clock(s);
	for (;;) {
		struct pollfd pfd[2] = {{s->efd, POLLIN, 0}, {s->clock_fd, POLLIN, 0}};
		struct sched_transport tr;
		int64_t now = (int64_t)time(NULL), until;
		int timeout_ms;

		pthread_mutex_lock(&s->lock);
		if (s->stop) {
			pthread_mutex_unlock(&s->lock);
			break;
		}
		if (s->wake)
			run = true;
		s->wake = false;
		if (s->transport_changed)
			next_sweep = now;
		s->transport_changed = false;
		tr = s->tr;
		pthread_mutex_unlock(&s->lock);

		if (now < last_now) {
			/* the wall clock went back (timerfd reports only settimeofday and
			 * the like; this also catches a slewed or faked clock) */
			log_info("the system clock went back %llds: rescheduling",
				 (long long)(last_now - now));
			store_jobs_clock_back(s->st, now);
			next_sweep = now;
			run = true;
		}
		last_now = now;
		/* a connection that came back pushes the reboot deadlines before any is due */
		if (sched_link_up(&tr) != s->link_up)
			run = true;
		if (run || (next_deadline && now >= next_deadline)) {
			next_deadline = sched_run(s, &tr, now);
			run = false;
		}
		if (tr.ctx && now >= next_sweep) {
			if (tr.ready(tr.ctx))
				tr.resend(tr.ctx, now);
			next_sweep = now + (tr.resend_every > 0 ? tr.resend_every : 1);
		}
		/* sleep until a wake, a clock change, or the next deadline */
		until = tr.ctx ? next_sweep : 0;
		if (next_deadline && (until == 0 || next_deadline < until))
			until = next_deadline;
		now = (int64_t)time(NULL);
		/* deadlines are whole seconds: due now, or the next look a second away at most */
		timeout_ms = until != 0 && until <= now ? 0 : SCHED_MAX_SLEEP * 1000;
		if (poll(pfd, 2, timeout_ms) < 0 && errno != EINTR)
			log_warn("poll");
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			if (read(s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_warn("eventfd");
		}
		if (pfd[1].revents & POLLIN) {
			uint64_t v;
			/* ECANCELED: the wall clock was set; deadlines are recomputed */
			if (read(s->clock_fd, &v, sizeof(v)) < 0 && errno != ECANCELED &&
			    errno != EAGAIN)
				log_warn("timerfd");
			log_info("the system clock was set: rescheduling");
			sched_arm_clock(s);
			now = (int64_t)time(NULL);
			if (now < last_now)
				store_jobs_clock_back(s->st, now);
			last_now = now;
			next_sweep = now; /* a wall-clock instant: computed anew */
			run = true;
		}
	}
	return NULL;
}

enum rcs_err sched_start(struct store *st, struct lifecycle *lc, struct sched **out)
{
	struct sched *s = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		goto out;
	pthread_mutex_init(&s->lock, NULL);
	s->st = st;
	s->lc = lc;
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	s->clock_fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->efd < 0 || s->clock_fd < 0) {
		log_warn("eventfd/timerfd");
		err = RCS_ERR_IO;
		goto out;
	}
	if (pthread_create(&s->thread, NULL, sched_thread, s) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	s->thread_started = true;
	lc->timers = sched_timers;
	lc->timers_ctx = s;
	*out = s;
	s = NULL;
	err = RCS_OK;
out:
	sched_free(s);
	return err;
}

void sched_set_transport(struct sched *s, const struct sched_transport *t)
{
	pthread_mutex_lock(&s->lock);
	if (t)
		s->tr = *t;
	else
		memset(&s->tr, 0, sizeof(s->tr));
	s->transport_changed = true;
	s->wake = true;
	pthread_mutex_unlock(&s->lock);
	sched_kick(s);
}

void sched_wake(struct sched *s)
{
	pthread_mutex_lock(&s->lock);
	s->wake = true;
	pthread_mutex_unlock(&s->lock);
	sched_kick(s);
}

void sched_stop(struct sched *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_mutex_unlock(&s->lock);
	if (s->thread_started) {
		sched_kick(s);
		pthread_join(s->thread, NULL);
		s->thread_started = false;
	}
}

void sched_free(struct sched *s)
{
	if (s == NULL)
		return;
	sched_stop(s);
	if (s->lc && s->lc->timers_ctx == s) {
		s->lc->timers = NULL;
		s->lc->timers_ctx = NULL;
	}
	if (s->efd >= 0)
		close(s->efd);
	if (s->clock_fd >= 0)
		close(s->clock_fd);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
