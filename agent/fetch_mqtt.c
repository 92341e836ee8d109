/*
 * fetch_mqtt.c - an artifact's bytes through the broker. See fetch_mqtt.h.
 */
#define _FILE_OFFSET_BITS 64
#include "fetch_mqtt.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "jsonu.h"
#include "log.h"

/* One get in flight and, once it came, its bytes. */
struct fetch_mqtt_slot {
	bool used;
	bool filled;
	int64_t offset;
	size_t len;
	int64_t asked_ms;
	unsigned char *data; /* FETCH_MQTT_CHUNK bytes */
};

struct fetch_mqtt_chan {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char sha256[65]; /* the download in progress, "" when none */
	struct fetch_mqtt_slot slot[FETCH_MQTT_WINDOW];
	bool wrong_size;     /* data that was not the length asked */
	char error_code[32]; /* an error answer, "" when none */
	char error_message[160];
};

static int64_t fetch_mqtt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct fetch_mqtt_chan *fetch_mqtt_chan_new(void)
{
	struct fetch_mqtt_chan *c = calloc(1, sizeof(*c));
	bool ok = c != NULL;

	for (int i = 0; ok && i < FETCH_MQTT_WINDOW; i++)
		ok = (c->slot[i].data = malloc(FETCH_MQTT_CHUNK)) != NULL;
	if (!ok) {
		fetch_mqtt_chan_free(c);
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	return c;
}

void fetch_mqtt_chan_free(struct fetch_mqtt_chan *c)
{
	if (c == NULL)
		return;
	for (int i = 0; i < FETCH_MQTT_WINDOW; i++)
		free(c->slot[i].data);
	if (c->slot[0].data != NULL) {
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->cond);
	}
	free(c);
}

void fetch_mqtt_deliver(struct fetch_mqtt_chan *c, const char *sha256, int64_t offset,
			const void *data, size_t len)
{
	pthread_mutex_lock(&c->lock);
	if (strcmp(c->sha256, sha256) == 0) {
		for (int i = 0; i < FETCH_MQTT_WINDOW; i++) {
			struct fetch_mqtt_slot *s = &c->slot[i];
			if (!s->used || s->filled || s->offset != offset)
				continue;
			if (len != s->len) {
				c->wrong_size = true;
			} else {
				memcpy(s->data, data, len);
				s->filled = true;
			}
			pthread_cond_broadcast(&c->cond);
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
}

void fetch_mqtt_error(struct fetch_mqtt_chan *c, const char *sha256, const char *payload,
		      size_t len)
{
	json_object *o = NULL;
	struct jsonu_err e;
	const char *code = NULL, *message = NULL;

	if (jsonu_parse_object(payload, len, &o, &e) != RCS_OK ||
	    jsonu_get_string(o, "code", true, 31, &code, NULL, &e) != RCS_OK ||
	    jsonu_get_string(o, "message", false, 150, &message, NULL, &e) != RCS_OK) {
		log_warnx("artifact %s: a malformed error answer dropped", sha256);
		goto out;
	}
	pthread_mutex_lock(&c->lock);
	if (strcmp(c->sha256, sha256) == 0) {
		snprintf(c->error_code, sizeof(c->error_code), "%s", code);
		snprintf(c->error_message, sizeof(c->error_message), "%s", message ? message : "");
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
out:
	if (o != NULL)
		json_object_put(o);
}

static bool fetch_mqtt_stop(const struct fetch_mqtt_req *req)
{
	struct pollfd pfd = {req->cancel_fd, POLLIN, 0};

	if (req->deadline_ms > 0 && fetch_mqtt_now_ms() >= req->deadline_ms)
		return true;
	return req->cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

static void fetch_mqtt_ask(const struct fetch_mqtt_req *req, const struct fetch_part *p,
			   struct fetch_mqtt_slot *s)
{
	char payload[160];

	snprintf(payload, sizeof(payload),
		 "{\"v\":1,\"job\":\"%s\",\"offset\":%lld,\"length\":%zu}", req->job,
		 (long long)s->offset, s->len);
	s->asked_ms = fetch_mqtt_now_ms();
	req->publish_get(req->ctx, p->sha256, payload);
}

/* Under the lock: fills the free slots with the next gets; re-asks the stale ones. The
 * gets go out after the lock is released (asks: which slots). */
static void fetch_mqtt_plan(struct fetch_mqtt_chan *c, const struct fetch_part *p, int64_t *next,
			    bool asks[FETCH_MQTT_WINDOW])
{
	int64_t now = fetch_mqtt_now_ms();

	for (int i = 0; i < FETCH_MQTT_WINDOW; i++) {
		struct fetch_mqtt_slot *s = &c->slot[i];
		asks[i] = false;
		if (!s->used && *next < p->size) {
			s->used = true;
			s->filled = false;
			s->offset = *next;
			s->len = (size_t)(p->size - *next < FETCH_MQTT_CHUNK ? p->size - *next
									     : FETCH_MQTT_CHUNK);
			*next += (int64_t)s->len;
			asks[i] = true;
		} else if (s->used && !s->filled && now - s->asked_ms >= FETCH_MQTT_REASK_MS) {
			asks[i] = true;
		}
	}
}

/* The error answer as an outcome. */
static void fetch_mqtt_answer(struct fetch_mqtt_chan *c, struct fetch_result *res)
{
	if (strcmp(c->error_code, "busy") == 0) {
		res->outcome = FETCH_RETRY;
		res->retry_after = 5;
	} else {
		res->outcome = FETCH_REFUSED;
	}
	snprintf(res->message, sizeof(res->message), "%s%s%s", c->error_code,
		 c->error_message[0] ? ": " : "", c->error_message);
}

/* Takes the slot holding p's next bytes, if it came, into buf; true when taken. */
static bool fetch_mqtt_take(struct fetch_mqtt_chan *c, const struct fetch_part *p,
			    unsigned char *buf, size_t *len)
{
	for (int i = 0; i < FETCH_MQTT_WINDOW; i++) {
		struct fetch_mqtt_slot *s = &c->slot[i];
		if (s->used && s->filled && s->offset == p->offset) {
			memcpy(buf, s->data, s->len);
			*len = s->len;
			s->used = s->filled = false;
			return true;
		}
	}
	return false;
}

static void fetch_mqtt_run(const struct fetch_mqtt_req *req, struct fetch_part *p,
			   struct fetch_result *res, unsigned char *buf)
{
	struct fetch_mqtt_chan *c = req->chan;
	int64_t next = p->offset, moved_ms = fetch_mqtt_now_ms(), start_ms = moved_ms;
	int64_t first = p->offset;
	bool asks[FETCH_MQTT_WINDOW];
	size_t len = 0;
	bool got, pace;
	enum rcs_err err;

	while (p->offset < p->size) {
		if (fetch_mqtt_stop(req)) {
			res->outcome = FETCH_CANCELLED;
			snprintf(res->message, sizeof(res->message), "stopped");
			return;
		}
		/* artifact_max_rate: no get for bytes ahead of the rate */
		if (req->max_rate > 0 && next > p->offset &&
		    (next - first) * 1000 / req->max_rate > fetch_mqtt_now_ms() - start_ms)
			pace = true;
		else
			pace = false;
		pthread_mutex_lock(&c->lock);
		if (!pace)
			fetch_mqtt_plan(c, p, &next, asks);
		else
			memset(asks, 0, sizeof(asks));
		got = fetch_mqtt_take(c, p, buf, &len);
		if (!got && c->error_code[0] == '\0' && !c->wrong_size) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 200 * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&c->cond, &c->lock, &until);
			got = fetch_mqtt_take(c, p, buf, &len);
		}
		if (!got && c->error_code[0] != '\0') {
			fetch_mqtt_answer(c, res);
			pthread_mutex_unlock(&c->lock);
			return;
		}
		if (!got && c->wrong_size) {
			pthread_mutex_unlock(&c->lock);
			res->outcome = FETCH_INVALID;
			snprintf(res->message, sizeof(res->message),
				 "a chunk that is not the length asked for");
			return;
		}
		pthread_mutex_unlock(&c->lock);
		for (int i = 0; i < FETCH_MQTT_WINDOW; i++)
			if (asks[i])
				fetch_mqtt_ask(req, p, &c->slot[i]);
		if (!got) {
			if (fetch_mqtt_now_ms() - moved_ms >= FETCH_MQTT_STALL_MS) {
				res->outcome = FETCH_RETRY;
				snprintf(res->message, sizeof(res->message),
					 "no answer through the broker");
				return;
			}
			continue;
		}
		err = fetch_part_write(p, buf, len, req->journal, req->ctx);
		if (err != RCS_OK) {
			res->outcome = err == RCS_ERR_TOOBIG ? FETCH_INVALID : FETCH_FAILED;
			res->err = err;
			snprintf(res->message, sizeof(res->message), "writing the part file: %s",
				 rcs_strerror(err));
			return;
		}
		moved_ms = fetch_mqtt_now_ms();
		if (req->progress != NULL)
			req->progress(req->ctx, p->offset);
	}
	res->outcome = FETCH_DONE;
	snprintf(res->message, sizeof(res->message), "complete");
}

void fetch_mqtt_get(const struct fetch_mqtt_req *req, struct fetch_part *p,
		    struct fetch_result *res)
{
	struct fetch_mqtt_chan *c = req->chan;
	unsigned char *buf = malloc(FETCH_MQTT_CHUNK);

	memset(res, 0, sizeof(res[0]));
	if (buf == NULL) {
		res->outcome = FETCH_FAILED;
		res->err = RCS_ERR_NOMEM;
		return;
	}
	pthread_mutex_lock(&c->lock);
	snprintf(c->sha256, sizeof(c->sha256), "%s", p->sha256);
	for (int i = 0; i < FETCH_MQTT_WINDOW; i++)
		c->slot[i].used = c->slot[i].filled = false;
	c->wrong_size = false;
	c->error_code[0] = c->error_message[0] = '\0';
	pthread_mutex_unlock(&c->lock);
	fetch_mqtt_run(req, p, res, buf);
	pthread_mutex_lock(&c->lock);
	c->sha256[0] = '\0'; /* late chunks are dropped */
	pthread_mutex_unlock(&c->lock);
	free(buf);
}
