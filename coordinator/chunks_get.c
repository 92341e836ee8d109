/*
 * chunks_get.c - one get of an artifact's chunk over MQTT, from its payload to its answer
 * (docs/mqtt.md, "Artifacts over MQTT (the coordinator's side)"). Worker-thread only. See
 * chunks_int.h.
 */
#include "chunks_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "jsonu.h"
#include "log.h"
#include "metrics.h"
#include "store_groups.h"
#include "store_queues.h"

#define CHUNKS_LOG_EVERY_US  1000000 /* one line a second at most about bad gets */
#define CHUNKS_FULL_RETRY_US 5000    /* the client's queue was full: the chunk tries again */

int64_t chunks_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void chunks_topic(char *out, size_t size, const char *tenant, const char *device,
			 const char *sha, const char *tail)
{
	snprintf(out, size, "rcs/v1/%s/%s/artifacts/%s/%s", tenant, device, sha, tail);
}

/* A bad get, logged: one line a second at most, with the count of those not logged. */
static void chunks_log_bad(struct chunks *c, const struct chunks_get *g, const char *why)
{
	int64_t now = chunks_now_us();

	if (c->logged_us != 0 && now - c->logged_us < CHUNKS_LOG_EVERY_US) {
		c->unlogged++;
		return;
	}
	log_warnx("artifact get of device %s (%s): %s%s", g->device, g->sha, why,
		  c->unlogged ? " (and more gets refused, not logged)" : "");
	c->logged_us = now;
	c->unlogged = 0;
}

/* The error answer {"v":1,"job","code","message"} on .../error, at QoS 0. */
static void chunks_error(struct chunks *c, const struct chunks_get *g, const char *job,
			 const char *code, const char *fmt, ...)
{
	char topic[256], msg[200];
	json_object *o = json_object_new_object();
	const char *text;
	size_t len = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	metrics_artifact_get(code);
	if (o == NULL)
		return;
	json_object_object_add(o, "v", json_object_new_int(1));
	json_object_object_add(o, "job", jsonu_new_string_or_null(job && job[0] ? job : NULL));
	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "message", json_object_new_string(msg));
	text = jsonu_dump(o, &len);
	chunks_topic(topic, sizeof(topic), g->tenant, g->device, g->sha, "error");
	if (text == NULL || mqttc_publish(c->mq, topic, text, len, 0, false, 0) != RCS_OK)
		log_debug("artifact get of device %s: the %s answer not published", g->device,
			  code);
	json_object_put(o);
}

bool chunks_ask_parse(const struct chunks_get *g, struct chunks_ask *a, char *why, size_t n)
{
	json_object *o = NULL;
	struct jsonu_err e;
	const char *job = NULL;
	int64_t v = 0, offset = 0, length = 0;
	bool ok = false;

	memset(&e, 0, sizeof(e));
	if (jsonu_parse_object(g->body, g->len, &o, &e) != RCS_OK)
		goto out;
	if (jsonu_get_string(o, "job", true, UUID_STR_LEN - 1, &job, NULL, &e) == RCS_OK &&
	    uuid_valid(job))
		snprintf(a->job, sizeof(a->job), "%s", job);
	else if (e.field[0] == '\0')
		jsonu_fail(&e, "job", "not a job ident");
	if (e.field[0] == '\0' && jsonu_get_int(o, "v", true, 1, 1, &v, NULL, &e) == RCS_OK &&
	    jsonu_get_int(o, "offset", true, 0, INT64_MAX, &offset, NULL, &e) == RCS_OK &&
	    jsonu_get_int(o, "length", true, 1, CHUNKS_MAX_LEN, &length, NULL, &e) == RCS_OK) {
		a->offset = offset;
		a->length = length;
		ok = true;
	}
out:
	if (!ok)
		snprintf(why, n, "%.64s%s%.120s", e.field, e.field[0] ? ": " : "",
			 e.message[0] ? e.message : "not a JSON object");
	if (o != NULL)
		json_object_put(o);
	return ok;
}

bool chunks_topic_parse(const char *topic, struct chunks_get *g)
{
	const char *seg[7];
	size_t len[7];
	const char *p = topic;
	int n = 0;

	while (n < 7) {
		const char *slash = strchr(p, '/');
		seg[n] = p;
		len[n] = slash ? (size_t)(slash - p) : strlen(p);
		n++;
		if (slash == NULL)
			break;
		p = slash + 1;
	}
	if (n != 7 || seg[6][len[6]] != '\0' || len[4] != 9 || len[2] != UUID_STR_LEN - 1 ||
	    len[3] != UUID_STR_LEN - 1 || len[5] != 64 || strncmp(seg[4], "artifacts/", 10) != 0 ||
	    strcmp(seg[6], "get") != 0)
		return false;
	memcpy(g->tenant, seg[2], len[2]);
	g->tenant[len[2]] = '\0';
	memcpy(g->device, seg[3], len[3]);
	g->device[len[3]] = '\0';
	memcpy(g->sha, seg[5], 64);
	g->sha[64] = '\0';
	return uuid_valid(g->tenant) && uuid_valid(g->device) &&
	       strspn(g->sha, "0123456789abcdef") == 64;
}

/* Whether this coordinator answers the device's gets: always on the shared subscription
 * (the broker gave it this one) or on a database of its own; else the one the database
 * assigns the device to (store_node_owner), remembered for CHUNKS_OWNER_S. */
static bool chunks_mine(struct chunks *c, const char *device)
{
	struct chunks_owner *o;
	int64_t now = chunks_now_us();
	size_t h = 0;
	bool mine = true;

	if (c->subscribed != 1 || !store_shared(c->st))
		return true;
	for (const char *p = device; *p; p++)
		h = h * 31 + (unsigned char)*p;
	o = &c->own[h % CHUNKS_OWNERS];
	if (strcmp(o->device, device) == 0 && o->until_us > now)
		return o->mine;
	if (store_node_owner(c->st, (int64_t)time(NULL), device, &mine) != RCS_OK)
		return true; /* answered twice rather than never */
	snprintf(o->device, sizeof(o->device), "%s", device);
	o->mine = mine;
	o->until_us = now + (int64_t)CHUNKS_OWNER_S * 1000000;
	return mine;
}

/* The same chunk is due already (a get asked again): its answer is on its way. */
static bool chunks_due_already(const struct chunks *c, const struct art_want *w, long long off)
{
	for (size_t i = 0; i < CHUNKS_DUE; i++) {
		const struct chunks_due *d = &c->due[i];
		if (d->used && d->offset == off && strcmp(d->w.device, w->device) == 0 &&
		    strcmp(d->w.sha, w->sha) == 0 && strcmp(d->w.tenant, w->tenant) == 0)
			return true;
	}
	return false;
}

static struct chunks_due *chunks_due_slot(struct chunks *c)
{
	for (size_t i = 0; i < CHUNKS_DUE && c->ndue < CHUNKS_DUE; i++)
		if (!c->due[i].used)
			return &c->due[i];
	return NULL;
}

/* The download limits of w's group (docs/api.md "Download limits"): remembered for
 * CHUNKS_GROUP_S; none for a job without a group, or when the store cannot say. */
static struct dl_limit chunks_group_limits(struct chunks *c, const struct art_want *w,
					   int64_t now_us)
{
	struct chunks_group *slot = &c->groups[0];
	struct dl_limit lim = {0, 0};
	struct store *rd;

	for (size_t i = 0; i < CHUNKS_GROUPS; i++) {
		struct chunks_group *g = &c->groups[i];

		if (g->ident[0] && strcmp(g->ident, w->group) == 0 &&
		    now_us - g->read_us < (int64_t)CHUNKS_GROUP_S * 1000000)
			return g->lim;
		if (g->read_us < slot->read_us)
			slot = g;
	}
	rd = store_reader(c->st);
	if (store_group_download(rd, w->group, &lim.max_concurrent, &lim.max_bytes_per_s) != RCS_OK)
		memset(&lim, 0, sizeof(lim));
	store_reader_put(c->st, rd);
	snprintf(slot->ident, sizeof(slot->ident), "%s", w->group);
	slot->lim = lim;
	slot->read_us = now_us;
	return lim;
}

/* The group's limits for a chunk of len bytes: false (answered busy) when max_concurrent
 * other devices of the group download; else *grouped (a place held until the chunk goes)
 * and *at_us no earlier than the group's byte rate lets the chunk go. */
static bool chunks_group_admit(struct chunks *c, const struct chunks_get *g,
			       const struct art_want *w, long long len, int64_t *at_us,
			       bool *grouped)
{
	int64_t now_us = chunks_now_us(), now_ms = now_us / 1000, wait_ms;
	struct dl_limit lim;
	int retry = 0;

	*grouped = false;
	if (c->dl == NULL || w->group[0] == '\0')
		return true;
	lim = chunks_group_limits(c, w, now_us);
	if (!dl_limits_admit(c->dl, w->group, w->device, &lim, now_ms, &retry)) {
		chunks_error(c, g, w->job, "busy",
			     "the group's devices download at most %lld at once: try again in"
			     " %d s",
			     lim.max_concurrent, retry);
		return false;
	}
	*grouped = true;
	wait_ms = dl_limits_reserve(c->dl, w->group, lim.max_bytes_per_s, (size_t)len, now_ms);
	if (now_us + wait_ms * 1000 > *at_us)
		*at_us = now_us + wait_ms * 1000;
	return true;
}

/* Checked: the chunk admitted (per device, then by its group's limits), counted against the
 * job's cap and put among those due (without its record's strings, which stay w's); else
 * answered busy. */
static void chunks_admit(struct chunks *c, const struct chunks_get *g, struct art_want *w,
			 long long off, long long len)
{
	char topic[256];
	struct dl_ask ask = {w->tenant, w->device, w->job, (size_t)len};
	struct art_audit au = {"MQTT", topic, NULL, 200};
	struct chunks_due *d = NULL;
	long long served = 0;
	bool capped = false, grouped = false;
	int64_t at_us = 0;
	enum rcs_err err;

	chunks_topic(topic, sizeof(topic), g->tenant, g->device, g->sha, "get");
	if (!dl_admit(c->admit, &ask, chunks_now_us(), &at_us)) {
		chunks_error(c, g, w->job, "busy", "%d chunks in flight for this device already",
			     DL_ADMIT_INFLIGHT);
		return;
	}
	d = chunks_due_slot(c);
	if (d == NULL) {
		dl_admit_done(c->admit, w->device);
		chunks_error(c, g, w->job, "busy", "too many chunks in flight");
		return;
	}
	if (!chunks_group_admit(c, g, w, len, &at_us, &grouped)) {
		dl_admit_done(c->admit, w->device);
		return;
	}
	err = art_serve_begin(c->st, w, len, &au, &capped, &served);
	if (err != RCS_OK || capped) {
		dl_admit_done(c->admit, w->device);
		if (grouped) /* no bytes: its place is soon free */
			dl_limits_end(c->dl, w->group, w->device, true, chunks_now_us() / 1000);
		if (capped)
			chunks_error(c, g, w->job, "busy",
				     "this job has been served %lld bytes, %d times its"
				     " artifacts' size",
				     served, ART_SERVE_CAP_TIMES);
		else
			chunks_error(c, g, w->job, "busy", "the coordinator cannot count it now");
		return;
	}
	d->used = true;
	d->w = *w;
	d->w.a.name = d->w.a.created_user = NULL;
	d->offset = off;
	d->len = len;
	d->at_us = at_us;
	d->grouped = grouped;
	c->ndue++;
}

void chunks_get_handle(struct chunks *c, const struct chunks_get *g)
{
	struct chunks_ask a;
	struct art_want w;
	struct store *rd;
	enum art_verdict v;
	enum rcs_err err = RCS_OK;
	char why[200];

	memset(&a, 0, sizeof(a));
	memset(&w, 0, sizeof(w));
	if (!chunks_ask_parse(g, &a, why, sizeof(why))) {
		chunks_log_bad(c, g, why);
		chunks_error(c, g, a.job, "bad_request", "%s", why);
		return;
	}
	if (!chunks_mine(c, g->device)) {
		metrics_artifact_get("dropped");
		return;
	}
	memcpy(w.job, a.job, sizeof(w.job));
	memcpy(w.device, g->device, sizeof(w.device));
	memcpy(w.tenant, g->tenant, sizeof(w.tenant));
	memcpy(w.sha, g->sha, sizeof(w.sha));
	rd = store_reader(c->st);
	v = art_serve_check(rd, &w, &err);
	store_reader_put(c->st, rd);
	if (v == ART_SERVE_NOTFOUND) {
		chunks_log_bad(c, g, "no such job of the device pinning that artifact");
		chunks_error(c, g, a.job, "not_found",
			     "no such job of this device, or it does not pin this artifact");
	} else if (v == ART_SERVE_TERMINAL) {
		chunks_error(c, g, a.job, "job_terminal",
			     "the job has ended: its artifacts are no longer served");
	} else if (v == ART_SERVE_ERROR) {
		log_warnx("artifact get of device %s: %s", g->device, rcs_strerror(err));
		chunks_error(c, g, a.job, "busy", "the coordinator cannot read its database now");
	} else if (a.offset >= w.a.size) {
		chunks_log_bad(c, g, "an offset past the artifact's end");
		chunks_error(c, g, a.job, "bad_request",
			     "offset past the artifact's end (%lld bytes)", w.a.size);
	} else if (chunks_due_already(c, &w, a.offset)) {
		metrics_artifact_get("dropped");
	} else {
		chunks_admit(c, g, &w, a.offset,
			     a.length < w.a.size - a.offset ? a.length : w.a.size - a.offset);
	}
	art_want_free(&w);
}

/* The source of the tenant's artifact: kept open from an earlier chunk, or opened (in the
 * place of the least recently used). NULL when its bytes cannot be read. */
static struct art_source *chunks_source(struct chunks *c, const struct art_want *w, int64_t now_us)
{
	struct chunks_source *s = &c->src[0];

	for (size_t i = 0; i < CHUNKS_SOURCES; i++) {
		struct chunks_source *t = &c->src[i];
		if (t->src != NULL && strcmp(t->sha, w->sha) == 0 &&
		    strcmp(t->tenant, w->tenant) == 0) {
			t->used_us = now_us;
			return t->src;
		}
		if (t->src == NULL || (s->src != NULL && t->used_us < s->used_us))
			s = t;
	}
	art_source_close(s->src);
	memset(s, 0, sizeof(*s));
	s->src = art_source_open(c->st, c->dir, w);
	if (s->src == NULL)
		return NULL;
	snprintf(s->tenant, sizeof(s->tenant), "%s", w->tenant);
	snprintf(s->sha, sizeof(s->sha), "%s", w->sha);
	s->used_us = now_us;
	return s->src;
}

/* The chunk's bytes into c's buffer: false when they cannot be read. */
static bool chunks_read(struct chunks *c, const struct chunks_due *d, int64_t now_us)
{
	struct art_source *src = chunks_source(c, &d->w, now_us);
	long long got = 0;
	ssize_t n;

	while (src != NULL && got < d->len) {
		n = art_source_read(src, d->offset + got, c->buf + got, (size_t)(d->len - got));
		if (n <= 0)
			return false;
		got += n;
	}
	return src != NULL;
}

/* The chunk gone (sent: counted; else its bytes given back to its job's cap). */
static void chunks_due_end(struct chunks *c, struct chunks_due *d, bool sent)
{
	if (sent) {
		metrics_artifact_bytes(false, (unsigned long long)d->len);
		metrics_artifact_get("data");
	} else {
		art_serve_end(c->st, d->w.job, d->w.sha, d->len, 0);
	}
	dl_admit_done(c->admit, d->w.device);
	if (d->grouped)
		dl_limits_end(c->dl, d->w.group, d->w.device, d->offset + d->len >= d->w.a.size,
			      chunks_now_us() / 1000);
	art_want_free(&d->w);
	memset(d, 0, sizeof(*d));
	c->ndue--;
}

/* Publishes one chunk due: false when the client's queue is full (it waits a little). */
static bool chunks_send_one(struct chunks *c, struct chunks_due *d, int64_t now_us)
{
	char topic[256], tail[40];
	enum rcs_err err;

	if (!chunks_read(c, d, now_us)) {
		log_warnx("artifact %s of tenant %s: its bytes cannot be read", d->w.sha,
			  d->w.tenant);
		chunks_due_end(c, d, false);
		return true;
	}
	snprintf(tail, sizeof(tail), "data/%lld", d->offset);
	chunks_topic(topic, sizeof(topic), d->w.tenant, d->w.device, d->w.sha, tail);
	err = mqttc_publish(c->mq, topic, c->buf, (size_t)d->len, 0, false, 0);
	if (err == RCS_ERR_FULL)
		return false;
	/* not connected: the device asks again, as for a chunk lost on the way */
	chunks_due_end(c, d, err == RCS_OK);
	return true;
}

int64_t chunks_send_due(struct chunks *c, int64_t now_us)
{
	int64_t next = -1;

	for (size_t i = 0; i < CHUNKS_DUE && c->ndue > 0; i++) {
		struct chunks_due *d = &c->due[i];
		if (!d->used)
			continue;
		if (d->at_us <= now_us && !chunks_send_one(c, d, now_us))
			d->at_us = now_us + CHUNKS_FULL_RETRY_US;
		if (d->used && (next < 0 || d->at_us - now_us < next))
			next = d->at_us > now_us ? d->at_us - now_us : 0;
	}
	return next;
}

void chunks_get_clear(struct chunks *c)
{
	for (size_t i = 0; i < CHUNKS_DUE; i++)
		if (c->due[i].used)
			chunks_due_end(c, &c->due[i], false);
	for (size_t i = 0; i < CHUNKS_SOURCES; i++) {
		art_source_close(c->src[i].src);
		memset(&c->src[i], 0, sizeof(c->src[i]));
	}
}
