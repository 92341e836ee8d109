/*
 * chunks.c - the MQTT chunk server's life, paho's callbacks, the worker and the
 * subscription (docs/mqtt.md, "Artifacts over MQTT (the coordinator's side)"). See
 * chunks_int.h.
 *
 * The subscription: where the bridge's probe found that the broker delivers on a shared
 * subscription (and the database is shared), $share/rcs-coordinators/rcs/v1/+/+/artifacts/+/get,
 * so that the broker gives each get to one coordinator; else the plain filter, every
 * coordinator receiving every get and answering only those of the devices the database
 * assigns to it (store_node_owner). Always in a clean session: a coordinator that dies
 * leaves the share group at once, and a get that is lost is asked for again by the device.
 */
#include "chunks.h"
#include "chunks_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "store_queues.h"

#define CHUNKS_FILTER      "rcs/v1/+/+/artifacts/+/get"
#define CHUNKS_SHARED      "$share/rcs-coordinators/" CHUNKS_FILTER
#define CHUNKS_LOOK_US     1000000 /* the subscription's kind looked at again */
#define CHUNKS_DROP_LOG_US 10000000

/* ---- paho's threads ---- */

static void chunks_on_connected(void *ctx, bool session_present)
{
	struct chunks *c = ctx;

	(void)session_present;
	pthread_mutex_lock(&c->lock);
	c->connected = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static bool chunks_on_message(void *ctx, const char *topic, const void *payload, size_t len)
{
	struct chunks *c = ctx;
	struct chunks_get *g;

	metrics_mqtt_in();
	pthread_mutex_lock(&c->lock);
	if (c->n == CHUNKS_INBOX) {
		c->dropped++;
		pthread_mutex_unlock(&c->lock);
		metrics_artifact_get("dropped");
		return true; /* the device asks again */
	}
	g = &c->inbox[(c->head + c->n) % CHUNKS_INBOX];
	memset(g, 0, sizeof(*g));
	if (!chunks_topic_parse(topic, g)) {
		pthread_mutex_unlock(&c->lock);
		log_debug("dropped a message on unexpected topic '%.160s'", topic);
		metrics_artifact_get("dropped");
		return true;
	}
	/* a longer payload is no get: kept cut, it fails to parse (bad_request) */
	g->len = len < CHUNKS_MAX_BODY ? len : CHUNKS_MAX_BODY;
	memcpy(g->body, payload, g->len);
	g->body[g->len] = '\0';
	c->n++;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return true;
}

/* ---- the worker ---- */

/* The kind of subscription wanted: 2 shared, 1 plain. */
static int chunks_wanted(struct chunks *c)
{
	return store_shared(c->st) && c->bridge != NULL && bridge_shared_active(c->bridge) ? 2 : 1;
}

/* On a new connect (subscribed 0) or when the bridge's choice changed: the subscription of
 * the kind wanted taken, the other one left; in a clean session (chunks_opts asks for one:
 * a persistent one would be made clean first). */
static void chunks_subscribe(struct chunks *c, bool connect)
{
	int want = chunks_wanted(c);
	const char *filter[1], *drop[1];

	if (connect)
		c->subscribed = 0;
	if (!mqttc_connected(c->mq) || want == c->subscribed)
		return;
	if (!mqttc_clean(c->mq)) {
		if (mqttc_reconnect(c->mq, true) != RCS_OK)
			log_warnx("artifact gets: cannot reconnect with a clean session");
		return; /* the clean connect subscribes */
	}
	filter[0] = want == 2 ? CHUNKS_SHARED : CHUNKS_FILTER;
	if (mqttc_subscribe(c->mq, filter, 1) != RCS_OK) {
		log_warnx("artifact gets: cannot subscribe to %s", filter[0]);
		return;
	}
	if (c->subscribed != 0) {
		drop[0] = c->subscribed == 2 ? CHUNKS_SHARED : CHUNKS_FILTER;
		mqttc_unsubscribe(c->mq, drop, 1, NULL, NULL);
	}
	c->subscribed = want;
	log_info("artifact gets: %s subscription %s", want == 2 ? "shared" : "plain", filter[0]);
}

/* Takes one get from the inbox into g: false when there is none. */
static bool chunks_take(struct chunks *c, struct chunks_get *g)
{
	bool got;

	pthread_mutex_lock(&c->lock);
	got = c->n > 0;
	if (got) {
		*g = c->inbox[c->head];
		c->head = (c->head + 1) % CHUNKS_INBOX;
		c->n--;
	}
	pthread_mutex_unlock(&c->lock);
	return got;
}

/* Sleeps until a get or a connect comes, the stop, or wait_us (-1: no limit). */
static void chunks_idle(struct chunks *c, int64_t wait_us)
{
	struct timespec until;

	pthread_mutex_lock(&c->lock);
	if (c->n == 0 && !c->stop && !c->connected) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)(wait_us / 1000000);
		until.tv_nsec += (long)(wait_us % 1000000) * 1000;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->cond, &c->lock, &until);
	}
	pthread_mutex_unlock(&c->lock);
}

/* What the worker was asked for: whether to stop; *connect a connect came. */
static bool chunks_asked(struct chunks *c, bool *connect, unsigned long *dropped)
{
	bool stop;

	pthread_mutex_lock(&c->lock);
	stop = c->stop;
	*connect = c->connected;
	c->connected = false;
	*dropped = c->dropped;
	c->dropped = 0;
	pthread_mutex_unlock(&c->lock);
	return stop;
}

static void *chunks_worker(void *arg)
{
	struct chunks *c = arg;
	struct chunks_get *g = malloc(sizeof(*g));
	int64_t looked = 0, drop_logged = 0, next;
	unsigned long dropped = 0, lost = 0;
	bool connect = false;

	while (g != NULL && !chunks_asked(c, &connect, &dropped)) {
		int64_t now = chunks_now_us();

		if (connect || now - looked >= CHUNKS_LOOK_US) {
			chunks_subscribe(c, connect);
			looked = now;
		}
		lost += dropped;
		if (lost > 0 && now - drop_logged >= CHUNKS_DROP_LOG_US) {
			log_warnx("artifact gets: %lu dropped, too many waiting", lost);
			lost = 0;
			drop_logged = now;
		}
		/* at most a window's worth of gets between two looks at the chunks due */
		for (int i = 0; i < DL_ADMIT_INFLIGHT * 4 && chunks_take(c, g); i++)
			chunks_get_handle(c, g);
		next = chunks_send_due(c, chunks_now_us());
		if (next < 0 || next > CHUNKS_LOOK_US)
			next = CHUNKS_LOOK_US;
		if (next > 0)
			chunks_idle(c, next);
	}
	free(g);
	return NULL;
}

/* ---- life ---- */

enum rcs_err chunks_start(const struct chunks_opts *opts, struct store *st, struct chunks **out)
{
	struct mqttc_callbacks cb;
	struct chunks *c = calloc(1, sizeof(*c));
	enum rcs_err err = RCS_ERR_NOMEM;
	pthread_condattr_t ca;

	*out = NULL;
	if (c == NULL)
		return RCS_ERR_NOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	c->st = st;
	c->bridge = opts->bridge;
	snprintf(c->dir, sizeof(c->dir), "%s", opts->artifact_dir ? opts->artifact_dir : "");
	c->inbox = calloc(CHUNKS_INBOX, sizeof(*c->inbox));
	c->buf = malloc(CHUNKS_MAX_LEN);
	c->admit = dl_admit_new(opts->rate);
	c->dl = opts->dl;
	if (c->inbox == NULL || c->buf == NULL || c->admit == NULL)
		goto out;
	memset(&cb, 0, sizeof(cb));
	cb.ctx = c;
	cb.on_connected = chunks_on_connected;
	cb.on_message = chunks_on_message;
	err = mqttc_start(&opts->mqtt, &cb, &c->mq);
	if (err != RCS_OK)
		goto out;
	err = RCS_ERR_IO;
	if (pthread_create(&c->thread, NULL, chunks_worker, c) != 0)
		goto out;
	c->thread_started = true;
	*out = c;
	c = NULL;
	err = RCS_OK;
out:
	chunks_stop(c);
	return err;
}

void chunks_stop(struct chunks *c)
{
	if (c == NULL)
		return;
	mqttc_disconnect(c->mq, 1000); /* no callback after it */
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	chunks_get_clear(c);
	mqttc_stop(c->mq, 0);
	dl_admit_free(c->admit);
	free(c->buf);
	free(c->inbox);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
