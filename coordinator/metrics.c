/*
 * metrics.c - Prometheus metrics. See metrics.h.
 */
#include "metrics.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store.h"
#include "store_devices.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_outbox.h"
#include "store_webhooks.h"

#define METRICS_MAX_TEXT ((size_t)1 << 20)
#define METRICS_CODES    64 /* distinct HTTP status codes kept per method */

struct histo {
	const double *le;
	size_t n;
	unsigned long long counts[16]; /* per bucket, not cumulative; the last: +Inf */
	double sum;
	unsigned long long count;
};

static const double http_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double latency_le[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600};
static const double run_le[] = {0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400};

static const char *const http_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "other"};
#define N_METHODS (sizeof(http_methods) / sizeof(http_methods[0]))

static struct {
	pthread_mutex_t lock;
	struct {
		int code;
		unsigned long long n;
	} http[N_METHODS][METRICS_CODES];
	struct histo http_time, latency, run;
	bool mqtt_up;
	bool (*probe)(void *ctx);
	void *probe_ctx;
	unsigned long long mqtt_in, mqtt_out;
	unsigned long long job_changes[JS__COUNT];
	unsigned long long hook_ok, hook_err, hook_failed;
	unsigned long long art_in, art_out; /* artifacts' bytes uploaded, served */
	long long art_downloads;            /* devices' downloads under way */
	/* gets over MQTT by answer: data, then the error codes (metrics_artifact_get) */
	unsigned long long art_gets[METRICS_GET_ANSWERS];
	/* several brokers and coordinators */
	unsigned long long mqtt_reports_in;
	unsigned long long resent_unacked; /* early re-sends of unacknowledged envelopes */
	bool mqtt_shared;
	char mqtt_broker[512]; /* "": not connected */
} m = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .http_time = {http_le, sizeof(http_le) / sizeof(http_le[0]), {0}, 0, 0},
    .latency = {latency_le, sizeof(latency_le) / sizeof(latency_le[0]), {0}, 0, 0},
    .run = {run_le, sizeof(run_le) / sizeof(run_le[0]), {0}, 0, 0},
};

static void histo_add(struct histo *h, double v)
{
	size_t i = 0;

	if (v < 0)
		v = 0;
	while (i < h->n && v > h->le[i])
		i++;
	h->counts[i]++;
	h->sum += v;
	h->count++;
}

void metrics_http(const char *method, int code, double seconds)
{
	size_t mi = N_METHODS - 1;

	for (size_t i = 0; i + 1 < N_METHODS; i++)
		if (method && strcmp(method, http_methods[i]) == 0)
			mi = i;
	pthread_mutex_lock(&m.lock);
	for (size_t i = 0; i < METRICS_CODES; i++) {
		if (m.http[mi][i].code == 0)
			m.http[mi][i].code = code;
		if (m.http[mi][i].code == code) {
			m.http[mi][i].n++;
			break;
		}
	}
	histo_add(&m.http_time, seconds);
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_probe(bool (*probe)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&m.lock);
	m.probe = probe;
	m.probe_ctx = ctx;
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_in(void)
{
	pthread_mutex_lock(&m.lock);
	m.mqtt_in++;
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_out(void)
{
	pthread_mutex_lock(&m.lock);
	m.mqtt_out++;
	pthread_mutex_unlock(&m.lock);
}

void metrics_resent_unacked(size_t n)
{
	pthread_mutex_lock(&m.lock);
	m.resent_unacked += n;
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_report_in(void)
{
	pthread_mutex_lock(&m.lock);
	m.mqtt_reports_in++;
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_shared(bool shared)
{
	pthread_mutex_lock(&m.lock);
	m.mqtt_shared = shared;
	pthread_mutex_unlock(&m.lock);
}

void metrics_mqtt_broker(const char *url)
{
	pthread_mutex_lock(&m.lock);
	snprintf(m.mqtt_broker, sizeof(m.mqtt_broker), "%s", url ? url : "");
	pthread_mutex_unlock(&m.lock);
}

void metrics_job_status(enum job_status to)
{
	pthread_mutex_lock(&m.lock);
	if ((int)to >= 0 && to < JS__COUNT)
		m.job_changes[to]++;
	pthread_mutex_unlock(&m.lock);
}

void metrics_job_statuses(enum job_status to, size_t n)
{
	pthread_mutex_lock(&m.lock);
	if ((int)to >= 0 && to < JS__COUNT)
		m.job_changes[to] += n;
	pthread_mutex_unlock(&m.lock);
}

void metrics_job_delivery_latency(double seconds)
{
	pthread_mutex_lock(&m.lock);
	histo_add(&m.latency, seconds);
	pthread_mutex_unlock(&m.lock);
}

void metrics_job_run_time(double seconds)
{
	pthread_mutex_lock(&m.lock);
	histo_add(&m.run, seconds);
	pthread_mutex_unlock(&m.lock);
}

/* ---- the moments latencies are measured from ---- */

static struct {
	pthread_mutex_t lock;
	struct metrics_moment {
		char ident[UUID_STR_LEN];
		int64_t ms;
	} slots[2][METRICS_CLOCK_SLOTS];
} clocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t metrics_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A job's slot: FNV-1a of its ident. */
static struct metrics_moment *metrics_slot(enum metrics_clock kind, const char *ident)
{
	uint32_t h = 2166136261u;

	for (const char *p = ident; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return &clocks.slots[kind == METRICS_STARTED][h % METRICS_CLOCK_SLOTS];
}

void metrics_clock_mark(enum metrics_clock kind, const char *ident)
{
	int64_t now = metrics_now_ms();
	struct metrics_moment *s;

	if (ident == NULL || strlen(ident) >= UUID_STR_LEN)
		return;
	pthread_mutex_lock(&clocks.lock);
	s = metrics_slot(kind, ident);
	snprintf(s->ident, sizeof(s->ident), "%s", ident);
	s->ms = now;
	pthread_mutex_unlock(&clocks.lock);
}

double metrics_clock_take(enum metrics_clock kind, const char *ident)
{
	int64_t now = metrics_now_ms(), at = 0;
	struct metrics_moment *s;

	if (ident == NULL)
		return -1;
	pthread_mutex_lock(&clocks.lock);
	s = metrics_slot(kind, ident);
	if (s->ms > 0 && strcmp(s->ident, ident) == 0) {
		at = s->ms;
		s->ms = 0;
		s->ident[0] = '\0';
	}
	pthread_mutex_unlock(&clocks.lock);
	if (at == 0)
		return -1;
	return now > at ? (double)(now - at) / 1000.0 : 0.0;
}

void metrics_webhook_attempt(bool delivered, bool failed)
{
	pthread_mutex_lock(&m.lock);
	if (delivered)
		m.hook_ok++;
	else
		m.hook_err++;
	if (failed)
		m.hook_failed++;
	pthread_mutex_unlock(&m.lock);
}

void metrics_artifact_bytes(bool uploaded, unsigned long long n)
{
	pthread_mutex_lock(&m.lock);
	if (uploaded)
		m.art_in += n;
	else
		m.art_out += n;
	pthread_mutex_unlock(&m.lock);
}

void metrics_artifact_download(int delta)
{
	pthread_mutex_lock(&m.lock);
	m.art_downloads += delta;
	pthread_mutex_unlock(&m.lock);
}

static const char *const get_answers[METRICS_GET_ANSWERS] = {
    "data", "busy", "job_terminal", "not_found", "bad_request", "dropped"};

void metrics_artifact_get(const char *answer)
{
	pthread_mutex_lock(&m.lock);
	for (int i = 0; i < METRICS_GET_ANSWERS; i++)
		if (strcmp(answer, get_answers[i]) == 0)
			m.art_gets[i]++;
	pthread_mutex_unlock(&m.lock);
}

static void histo_write(struct buf *b, const char *name, const char *help, const struct histo *h)
{
	unsigned long long cum = 0;

	buf_appendf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (size_t i = 0; i < h->n; i++) {
		cum += h->counts[i];
		buf_appendf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], cum);
	}
	cum += h->counts[h->n];
	buf_appendf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
	buf_appendf(b, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, h->count);
}

void metrics_label(struct buf *b, const char *v)
{
	for (const char *p = v ? v : ""; *p; p++) {
		if (*p == '\\')
			buf_appendf(b, "\\\\");
		else if (*p == '"')
			buf_appendf(b, "\\\"");
		else if (*p == '\n')
			buf_appendf(b, "\\n");
		else
			buf_appendf(b, "%c", *p);
	}
}

/* name{key="value"} N: the value escaped. */
static void sample_ull(struct buf *b, const char *name, const char *key, const char *value,
		       unsigned long long n)
{
	buf_appendf(b, "%s{%s=\"", name, key);
	metrics_label(b, value);
	buf_appendf(b, "\"} %llu\n", n);
}

static void gauge(struct buf *b, const char *name, const char *help, long long v)
{
	buf_appendf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

static enum rcs_err metrics_render_some(struct store *st, const char *const *names, size_t n,
					struct buf *b);

/* Whether the family is asked for (n == 0: all are). */
static bool family_asked(const char *family, size_t len, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(names[i]) == len && strncmp(names[i], family, len) == 0)
			return true;
	return n == 0;
}

/* The family of a line of the text format: its sample's name less a histogram's suffix, or
 * the name a "# HELP"/"# TYPE" line is about. */
static bool line_asked(const char *line, size_t len, const char *const *names, size_t n)
{
	static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
	size_t k;

	if (len > 7 && (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0))
		line += 7, len -= 7;
	for (k = 0; k < len && line[k] != '{' && line[k] != ' '; k++)
		;
	if (family_asked(line, k, names, n))
		return true;
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t sl = strlen(suffixes[i]);

		if (k > sl && strncmp(line + k - sl, suffixes[i], sl) == 0 &&
		    family_asked(line, k - sl, names, n))
			return true;
	}
	return false;
}

enum rcs_err metrics_render_names(struct store *st, const char *const *names, size_t n,
				  struct buf *out)
{
	struct buf all;
	enum rcs_err err;

	if (n == 0)
		return metrics_render(st, out);
	buf_init(&all, METRICS_MAX_TEXT);
	err = metrics_render_some(st, names, n, &all);
	for (size_t at = 0; err == RCS_OK && at < all.len;) {
		const char *line = all.data + at, *nl = memchr(line, '\n', all.len - at);
		size_t len = nl ? (size_t)(nl - line) : all.len - at;

		if (line_asked(line, len, names, n))
			buf_appendf(out, "%.*s\n", (int)len, line);
		at += len + 1;
	}
	buf_free(&all);
	return err; /* nothing asked for exists: an empty answer */
}

enum rcs_err metrics_render(struct store *st, struct buf *b)
{
	return metrics_render_some(st, NULL, 0, b);
}

/* The store's gauges asked for (all: n == 0), read outside this module's lock. */
static enum rcs_err metrics_store_read(struct store *st, const char *const *names, size_t n,
				       long long *by_status, long long *groups, long long *online,
				       long long *mails, long long *hooks, long long *size)
{
	enum rcs_err err = RCS_OK;

#define ASKED(f) family_asked(f, strlen(f), names, n)
	if (ASKED("rcs_jobs"))
		err = store_jobs_by_status(st, by_status);
	if (err == RCS_OK && ASKED("rcs_groups"))
		err = store_groups_by_status(st, groups);
	if (err == RCS_OK && ASKED("rcs_devices_online"))
		err = store_devices_online(st, online);
	if (err == RCS_OK && ASKED("rcs_outbox_backlog"))
		err = store_notification_backlog(st, mails);
	if (err == RCS_OK && ASKED("rcs_outbox_backlog"))
		err = store_webhook_backlog(st, hooks);
	if (err == RCS_OK && ASKED("rcs_database_size_bytes"))
		err = store_db_size(st, size);
#undef ASKED
	return err;
}

/* The exposition; with names, the store read only for the gauges named (the caller keeps
 * the named families' lines). */
static enum rcs_err metrics_render_some(struct store *st, const char *const *names, size_t n,
					struct buf *b)
{
	long long by_status[JS__COUNT] = {0}, groups[GROUP__COUNT] = {0}, online = 0, mails = 0,
		  hooks = 0, size = 0;
	enum rcs_err err;

	err = metrics_store_read(st, names, n, by_status, groups, &online, &mails, &hooks, &size);
	if (err != RCS_OK)
		return err;
	pthread_mutex_lock(&m.lock);
	if (m.probe)
		m.mqtt_up = m.probe(m.probe_ctx);
	buf_appendf(b, "# HELP rcs_job_status_changes_total Jobs that came to each status.\n"
		       "# TYPE rcs_job_status_changes_total counter\n");
	for (int i = 0; i < JS__COUNT; i++)
		sample_ull(b, "rcs_job_status_changes_total", "status",
			   status_name((enum job_status)i), m.job_changes[i]);
	buf_appendf(b, "# HELP rcs_jobs Jobs in each status now.\n# TYPE rcs_jobs gauge\n");
	for (int i = 0; i < JS__COUNT; i++)
		sample_ull(b, "rcs_jobs", "status", status_name((enum job_status)i),
			   (unsigned long long)(by_status[i] > 0 ? by_status[i] : 0));
	buf_appendf(b, "# HELP rcs_groups Groups (bulk sends) in each status now.\n"
		       "# TYPE rcs_groups gauge\n");
	for (int i = 0; i < GROUP__COUNT; i++)
		sample_ull(b, "rcs_groups", "status", group_status_name((enum group_status)i),
			   (unsigned long long)(groups[i] > 0 ? groups[i] : 0));
	histo_write(b, "rcs_job_delivery_latency_seconds",
		    "Seconds from a job's release (its creation, or the end of its hold) to"
		    " edge_transmitted.",
		    &m.latency);
	histo_write(b, "rcs_job_run_time_seconds",
		    "Seconds from edge_started to the job's final status.", &m.run);
	buf_appendf(b, "# HELP rcs_http_requests_total API requests by method and status code.\n"
		       "# TYPE rcs_http_requests_total counter\n");
	for (size_t i = 0; i < N_METHODS; i++)
		for (size_t k = 0; k < METRICS_CODES && m.http[i][k].code; k++) {
			buf_appendf(b, "rcs_http_requests_total{method=\"");
			metrics_label(b, http_methods[i]);
			buf_appendf(b, "\",code=\"%d\"} %llu\n", m.http[i][k].code, m.http[i][k].n);
		}
	histo_write(b, "rcs_http_request_duration_seconds", "Seconds to answer an API request.",
		    &m.http_time);
	gauge(b, "rcs_mqtt_connected", "1 while the coordinator is connected to its broker.",
	      m.mqtt_up ? 1 : 0);
	buf_appendf(b,
		    "# HELP rcs_mqtt_messages_received_total MQTT messages received.\n"
		    "# TYPE rcs_mqtt_messages_received_total counter\n"
		    "rcs_mqtt_messages_received_total %llu\n"
		    "# HELP rcs_mqtt_messages_sent_total MQTT messages published.\n"
		    "# TYPE rcs_mqtt_messages_sent_total counter\n"
		    "rcs_mqtt_messages_sent_total %llu\n",
		    m.mqtt_in, m.mqtt_out);
	/* several brokers and coordinators (docs/coordinator.md "Metrics") */
	buf_appendf(b,
		    "# HELP rcs_mqtt_reports_received_total Device status reports received.\n"
		    "# TYPE rcs_mqtt_reports_received_total counter\n"
		    "rcs_mqtt_reports_received_total %llu\n"
		    "# HELP rcs_jobs_resent_unacked_total Envelopes sent again because no device"
		    " acknowledged them within resend_unacked_after.\n"
		    "# TYPE rcs_jobs_resent_unacked_total counter\n"
		    "rcs_jobs_resent_unacked_total %llu\n",
		    m.mqtt_reports_in, m.resent_unacked);
	gauge(b, "rcs_mqtt_shared_subscription",
	      "1 while status reports come through the shared subscription.",
	      m.mqtt_shared ? 1 : 0);
	buf_appendf(b, "# HELP rcs_mqtt_broker The broker connected to (1), by URL.\n"
		       "# TYPE rcs_mqtt_broker gauge\n");
	if (m.mqtt_broker[0] != '\0') {
		buf_appendf(b, "rcs_mqtt_broker{url=\"");
		metrics_label(b, m.mqtt_broker);
		buf_appendf(b, "\"} 1\n");
	}
	buf_appendf(b,
		    "# HELP rcs_webhook_attempts_total Webhook delivery attempts by result.\n"
		    "# TYPE rcs_webhook_attempts_total counter\n"
		    "rcs_webhook_attempts_total{result=\"delivered\"} %llu\n"
		    "rcs_webhook_attempts_total{result=\"error\"} %llu\n"
		    "# HELP rcs_webhook_deliveries_failed_total Webhook deliveries given up.\n"
		    "# TYPE rcs_webhook_deliveries_failed_total counter\n"
		    "rcs_webhook_deliveries_failed_total %llu\n",
		    m.hook_ok, m.hook_err, m.hook_failed);
	buf_appendf(b,
		    "# HELP rcs_artifact_bytes_total Bytes of artifacts uploaded and served.\n"
		    "# TYPE rcs_artifact_bytes_total counter\n"
		    "rcs_artifact_bytes_total{direction=\"uploaded\"} %llu\n"
		    "rcs_artifact_bytes_total{direction=\"served\"} %llu\n"
		    "# HELP rcs_artifact_downloads Devices' downloads of artifacts under way.\n"
		    "# TYPE rcs_artifact_downloads gauge\n"
		    "rcs_artifact_downloads %lld\n",
		    m.art_in, m.art_out, m.art_downloads);
	buf_appendf(b, "# HELP rcs_artifact_mqtt_gets_total Devices' gets of artifact chunks over"
		       " MQTT by answer.\n"
		       "# TYPE rcs_artifact_mqtt_gets_total counter\n");
	for (int i = 0; i < METRICS_GET_ANSWERS; i++)
		buf_appendf(b, "rcs_artifact_mqtt_gets_total{answer=\"%s\"} %llu\n", get_answers[i],
			    m.art_gets[i]);
	pthread_mutex_unlock(&m.lock);
	gauge(b, "rcs_devices_online", "Devices online now.", online);
	buf_appendf(b,
		    "# HELP rcs_outbox_backlog Queued deliveries of each outbox.\n"
		    "# TYPE rcs_outbox_backlog gauge\n"
		    "rcs_outbox_backlog{kind=\"email\"} %lld\n"
		    "rcs_outbox_backlog{kind=\"webhook\"} %lld\n",
		    mails, hooks);
	gauge(b, "rcs_database_size_bytes", "Size of the database in bytes.", size);
	return b->len > 0 && b->data ? RCS_OK : RCS_ERR_TOOBIG;
}

/* ---- the listener ---- */

struct metrics_server {
	struct MHD_Daemon *daemon;
	struct store *st;
};

/* The families a request names (?name=F, repeatable; docs/coordinator.md "Metrics"). */
struct metrics_asked {
	const char *v[METRICS_NAMES_MAX];
	size_t n;
};

static enum MHD_Result metrics_name_arg(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct metrics_asked *a = cls;

	(void)kind;
	if (strcmp(key, "name") == 0 && value && value[0] && a->n < METRICS_NAMES_MAX)
		a->v[a->n++] = value;
	return MHD_YES;
}

static bool metrics_names(struct MHD_Connection *conn, struct metrics_asked *a)
{
	a->n = 0;
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, metrics_name_arg, a);
	return true;
}

static enum MHD_Result metrics_handle(void *cls, struct MHD_Connection *conn, const char *url,
				      const char *method, const char *version,
				      const char *upload_data, size_t *upload_data_size,
				      void **con_cls)
{
	struct metrics_server *s = cls;
	struct metrics_asked names = {.n = 0};
	struct MHD_Response *resp;
	struct buf b;
	unsigned code = 200;
	enum MHD_Result ret;

	(void)version;
	(void)upload_data;
	if (*con_cls == NULL) {
		*con_cls = s;
		return MHD_YES;
	}
	*upload_data_size = 0;
	buf_init(&b, METRICS_MAX_TEXT);
	if (strcmp(url, "/metrics") != 0) {
		code = 404;
		buf_appendf(&b, "not found: GET /metrics\n");
	} else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		code = 405;
		buf_appendf(&b, "method not allowed: GET /metrics\n");
	} else if (metrics_names(conn, &names) &&
		   metrics_render_names(s->st, names.v, names.n, &b) != RCS_OK) {
		code = 503;
		b.len = 0;
		buf_appendf(&b, "metrics unavailable\n");
	}
	resp = MHD_create_response_from_buffer(b.len, b.data ? b.data : (void *)"",
					       MHD_RESPMEM_MUST_COPY);
	buf_free(&b);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum rcs_err metrics_serve(const char *listen, struct store *st, struct metrics_server **out)
{
	struct metrics_server *s = NULL;
	struct addrinfo hints, *ai = NULL;
	char host[256];
	const char *colon = strrchr(listen, ':');
	enum rcs_err err = RCS_ERR_INVAL;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	*out = NULL;
	if (colon == NULL || colon == listen || (size_t)(colon - listen) >= sizeof(host)) {
		log_warnx("--metrics-listen %s: expected HOST:PORT", listen);
		goto out;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || ai == NULL) {
		log_warnx("--metrics-listen %s: cannot resolve", listen);
		goto out;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	s->st = st;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, metrics_handle, s, MHD_OPTION_SOCK_ADDR,
				     ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				     MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
	if (s->daemon == NULL) {
		log_warnx("cannot serve metrics on %s", listen);
		err = RCS_ERR_IO;
		goto out;
	}
	log_info("metrics on http://%s/metrics", listen);
	*out = s;
	s = NULL;
	err = RCS_OK;
out:
	if (ai)
		freeaddrinfo(ai);
	free(s);
	return err;
}

void metrics_stop(struct metrics_server *s)
{
	if (s == NULL)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	free(s);
}
