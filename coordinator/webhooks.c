/*
 * webhooks.c - webhook deliveries and the guard of their addresses. See webhooks.h.
 *
 * Size: the guard (a third of the file) and the sender are the two halves of webhooks.h;
 * the sender's fill, reap and loop are one design (docs/api.md, "Webhooks").
 */
#include "webhooks.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <mbedtls/md.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "lifecycle.h"
#include "log.h"
#include "metrics.h"
#include "render.h"
#include "store_groups.h"
#include "store_jobs.h"
#include "store_queues.h"
#include "store_webhooks.h"
#include "text.h"

#define WEBHOOKS_MAX_BODY    ((size_t)8 << 20) /* bytes of one delivery's body */
#define WEBHOOKS_MAX_BACKOFF 3600
#define WEBHOOKS_MAX_ALLOW   64
#define WEBHOOKS_ERR_MAX     300
#define WEBHOOKS_LOOK_MS     1000 /* a fill without a wake-up: retries due, lapsed claims */
/* a fill for a change at most this often: a bulk send's thousands of changes, each a wake-up,
 * would otherwise take the store's lock from the send between each of its batches */
#define WEBHOOKS_KICK_MS 50

/* ---- the guard ---- */

struct webhook_net {
	int family; /* AF_INET or AF_INET6 */
	unsigned char addr[16];
	int bits;
};

struct webhook_guard {
	struct webhook_net allow[WEBHOOKS_MAX_ALLOW];
	size_t n;
};

/* Whether the first bits of a and b agree. */
static bool net_match(const unsigned char *a, const unsigned char *b, int bits)
{
	int full = bits / 8, rest = bits % 8;

	if (memcmp(a, b, (size_t)full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[full] ^ b[full]) & (0xff << (8 - rest))) == 0;
}

static enum rcs_err net_parse(const char *s, struct webhook_net *n)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t hl = slash ? (size_t)(slash - s) : strlen(s);
	long bits = -1;

	if (hl == 0 || hl >= sizeof(host))
		return RCS_ERR_INVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	memset(n, 0, sizeof(*n));
	if (inet_pton(AF_INET, host, n->addr) == 1)
		n->family = AF_INET;
	else if (inet_pton(AF_INET6, host, n->addr) == 1)
		n->family = AF_INET6;
	else
		return RCS_ERR_INVAL;
	if (slash) {
		char *end = NULL;

		if (slash[1] < '0' || slash[1] > '9')
			return RCS_ERR_INVAL;
		bits = strtol(slash + 1, &end, 10);
		if (*end != '\0')
			return RCS_ERR_INVAL;
	}
	if (bits < 0)
		bits = n->family == AF_INET ? 32 : 128;
	if (bits > (n->family == AF_INET ? 32 : 128))
		return RCS_ERR_INVAL;
	n->bits = (int)bits;
	return RCS_OK;
}

enum rcs_err webhook_guard_new(const char *const *cidrs, size_t n, struct webhook_guard **out,
			       char *why, size_t why_len)
{
	struct webhook_guard *g = NULL;
	enum rcs_err err = RCS_OK;

	*out = NULL;
	if (n > WEBHOOKS_MAX_ALLOW) {
		snprintf(why, why_len, "at most %d --webhook-allow-net networks",
			 WEBHOOKS_MAX_ALLOW);
		return RCS_ERR_INVAL;
	}
	g = calloc(1, sizeof(*g));
	if (g == NULL)
		return RCS_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		if (net_parse(cidrs[i], &g->allow[i]) != RCS_OK) {
			snprintf(why, why_len,
				 "--webhook-allow-net %s: expected an address or ADDRESS/BITS",
				 cidrs[i]);
			err = RCS_ERR_INVAL;
			goto out;
		}
		g->n++;
	}
	*out = g;
	g = NULL;
out:
	free(g);
	return err;
}

void webhook_guard_free(struct webhook_guard *g)
{
	free(g);
}

/* The IPv4 networks no webhook reaches unless allowed: {a, b, c, d, bits, what}. */
static const struct {
	unsigned char a[4];
	int bits;
	const char *what;
} v4_forbidden[] = {
    {{0, 0, 0, 0}, 8, "a \"this network\" address"},
    {{10, 0, 0, 0}, 8, "a private address"},
    {{100, 64, 0, 0}, 10, "a shared (CGNAT) address"},
    {{127, 0, 0, 0}, 8, "a loopback address"},
    {{169, 254, 0, 0}, 16, "a link-local or cloud metadata address"},
    {{172, 16, 0, 0}, 12, "a private address"},
    {{192, 0, 0, 0}, 24, "a reserved address"},
    {{192, 0, 2, 0}, 24, "a documentation address"},
    {{192, 168, 0, 0}, 16, "a private address"},
    {{198, 18, 0, 0}, 15, "a reserved address"},
    {{198, 51, 100, 0}, 24, "a documentation address"},
    {{203, 0, 113, 0}, 24, "a documentation address"},
    {{224, 0, 0, 0}, 4, "a multicast address"},
    {{240, 0, 0, 0}, 4, "a reserved address"},
};

static const struct {
	unsigned char a[16];
	int bits;
	const char *what;
} v6_forbidden[] = {
    {{0}, 128, "the unspecified address"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "a loopback address"},
    {{0xfe, 0x80}, 10, "a link-local address"},
    {{0xfc}, 7, "a private (unique local) or cloud metadata address"},
    {{0xfe, 0xc0}, 10, "a site-local address"},
    {{0xff}, 8, "a multicast address"},
    {{0x01, 0x00}, 64, "a discard address"},
    {{0x20, 0x01, 0x0d, 0xb8}, 32, "a documentation address"},
};

/* The IPv4 address inside an IPv6 one (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d,
 * NAT64 64:ff9b::a.b.c.d), or NULL. */
static const unsigned char *v6_embedded_v4(const unsigned char *a)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
	static const unsigned char zero[12] = {0};

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
		return a + 12;
	if (memcmp(a, zero, 12) == 0 && (a[12] | a[13]) != 0)
		return a + 12; /* ::a.b.c.d, not :: or ::1 */
	return NULL;
}

static bool guard_allows(const struct webhook_guard *g, int family, const unsigned char *a)
{
	for (size_t i = 0; g && i < g->n; i++)
		if (g->allow[i].family == family &&
		    net_match(g->allow[i].addr, a, g->allow[i].bits))
			return true;
	return false;
}

static const char *v4_forbidden_what(const unsigned char *a)
{
	for (size_t i = 0; i < sizeof(v4_forbidden) / sizeof(v4_forbidden[0]); i++)
		if (net_match(v4_forbidden[i].a, a, v4_forbidden[i].bits))
			return v4_forbidden[i].what;
	if (a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255)
		return "the broadcast address";
	return NULL;
}

bool webhook_addr_allowed(const struct webhook_guard *g, const struct sockaddr *sa, char *why,
			  size_t why_len)
{
	char text[INET6_ADDRSTRLEN] = "?";
	const char *what = NULL;

	if (sa->sa_family == AF_INET) {
		const unsigned char *a =
		    (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)
			->sin_addr;

		inet_ntop(AF_INET, a, text, sizeof(text));
		if (guard_allows(g, AF_INET, a))
			return true;
		what = v4_forbidden_what(a);
	} else if (sa->sa_family == AF_INET6) {
		const unsigned char *a =
		    (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)
			->sin6_addr;
		const unsigned char *v4 = v6_embedded_v4(a);

		inet_ntop(AF_INET6, a, text, sizeof(text));
		if (guard_allows(g, AF_INET6, a) || (v4 && guard_allows(g, AF_INET, v4)))
			return true;
		for (size_t i = 0;
		     what == NULL && i < sizeof(v6_forbidden) / sizeof(v6_forbidden[0]); i++)
			if (net_match(v6_forbidden[i].a, a, v6_forbidden[i].bits))
				what = v6_forbidden[i].what;
		if (what == NULL && v4)
			what = v4_forbidden_what(v4);
	} else {
		what = "not an internet address";
	}
	if (what == NULL)
		return true;
	snprintf(why, why_len, "%s is %s (allow it with --webhook-allow-net)", text, what);
	return false;
}

enum rcs_err webhook_url_check(const struct webhook_guard *g, const char *url, char *why,
			       size_t why_len)
{
	CURLU *u = NULL;
	char *scheme = NULL, *host = NULL, *user = NULL, *port = NULL;
	struct addrinfo hints, *ai = NULL;
	char h[300];
	enum rcs_err err = RCS_ERR_INVAL;
	int rc;

	snprintf(why, why_len, "'url' must be an http:// or https:// URL");
	if (url == NULL || strlen(url) > WEBHOOK_URL_MAX ||
	    (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0))
		goto out;
	for (const char *p = url; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			goto out;
	u = curl_url();
	if (u == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		goto out;
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
		goto out;
	if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
		snprintf(why, why_len, "'url' may not hold a user name or password");
		goto out;
	}
	curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
	/* [v6] as the bare address for the resolver */
	snprintf(h, sizeof(h), "%s", host);
	if (h[0] == '[' && h[strlen(h) - 1] == ']') {
		memmove(h, h + 1, strlen(h));
		h[strlen(h) - 1] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(h, port ? port : "80", &hints, &ai);
	if (rc != 0 || ai == NULL) {
		snprintf(why, why_len, "the host of 'url' (%.200s) does not resolve: %s", h,
			 gai_strerror(rc));
		goto out;
	}
	for (struct addrinfo *p = ai; p; p = p->ai_next) {
		char reason[WEBHOOK_WHY_MAX];

		if (!webhook_addr_allowed(g, p->ai_addr, reason, sizeof(reason))) {
			/* "'url' resolves to a refused address: 127.0.0.1 is a loopback ..." */
			snprintf(why, why_len, "'url' resolves to a refused address: %s", reason);
			goto out;
		}
	}
	why[0] = '\0';
	err = RCS_OK;
out:
	if (ai)
		freeaddrinfo(ai);
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(port);
	curl_url_cleanup(u);
	return err;
}

enum rcs_err webhook_sign(const char *secret, int64_t ts, const char *body, size_t len,
			  char out[WEBHOOK_SIG_MAX])
{
	const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
	mbedtls_md_context_t ctx;
	unsigned char mac[32];
	char head[32], hex[65];
	int n, rc;

	out[0] = '\0';
	n = snprintf(head, sizeof(head), "%lld.", (long long)ts);
	mbedtls_md_init(&ctx);
	rc = md == NULL ? -1 : mbedtls_md_setup(&ctx, md, 1);
	if (rc == 0)
		rc = mbedtls_md_hmac_starts(&ctx, (const unsigned char *)secret, strlen(secret));
	if (rc == 0)
		rc = mbedtls_md_hmac_update(&ctx, (const unsigned char *)head, (size_t)n);
	if (rc == 0)
		rc = mbedtls_md_hmac_update(&ctx, (const unsigned char *)body, len);
	if (rc == 0)
		rc = mbedtls_md_hmac_finish(&ctx, mac);
	mbedtls_md_free(&ctx);
	if (rc != 0)
		return RCS_ERR_CRYPTO;
	text_hex_encode(mac, sizeof(mac), hex);
	snprintf(out, WEBHOOK_SIG_MAX, "t=%lld,v1=%s", (long long)ts, hex);
	return RCS_OK;
}

/* ---- the sender ---- */

/* One delivery on its way. */
struct hook_xfer {
	struct webhooks *w;
	CURL *c;
	struct curl_slist *hdrs;
	struct webhook_due d;
	char *body;
	int64_t started_ms;
	char errbuf[CURL_ERROR_SIZE];
	char refused[WEBHOOK_WHY_MAX]; /* the guard's reason when it refused the address */
};

struct webhooks {
	struct webhooks_opts o;
	struct store *st;
	struct lifecycle *lc;
	CURLM *multi;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	bool stop;
	bool kicked;              /* a change may have made deliveries due (hook_kick) */
	struct hook_xfer **xfers; /* max_inflight slots, NULL when free */
	size_t n_inflight;
};

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static size_t hook_discard(char *ptr, size_t size, size_t nmemb, void *userp)
{
	(void)ptr;
	(void)userp;
	return size * nmemb;
}

/* Every connection libcurl makes, to the address it makes it to: the guard's word first. */
static curl_socket_t hook_open_socket(void *clientp, curlsocktype purpose,
				      struct curl_sockaddr *addr)
{
	struct hook_xfer *x = clientp;

	if (purpose != CURLSOCKTYPE_IPCXN ||
	    !webhook_addr_allowed(x->w->o.guard, &addr->addr, x->refused, sizeof(x->refused))) {
		if (x->refused[0] == '\0')
			snprintf(x->refused, sizeof(x->refused), "connection refused by the guard");
		return CURL_SOCKET_BAD;
	}
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static void hook_xfer_free(struct hook_xfer *x)
{
	if (x == NULL)
		return;
	if (x->c) {
		if (x->w && x->w->multi)
			curl_multi_remove_handle(x->w->multi, x->c);
		curl_easy_cleanup(x->c);
	}
	curl_slist_free_all(x->hdrs);
	free(x->body);
	store_webhook_due_free(&x->d);
	free(x);
}

/* The delivery's body: {"id", "type", "ts", "data"}, data the job's record as its history
 * item n shows it, or the group's record. RCS_ERR_NOTFOUND when its subject is gone. */
static enum rcs_err hook_body(struct webhooks *w, const struct webhook_due *d, char **out)
{
	struct job_rec job;
	struct group_rec group;
	struct history_rec h;
	struct render r;
	struct buf b;
	bool is_job = strcmp(d->type, "job.status") == 0;
	enum rcs_err err;

	*out = NULL;
	memset(&job, 0, sizeof(job));
	memset(&group, 0, sizeof(group));
	memset(&h, 0, sizeof(h));
	buf_init(&b, WEBHOOKS_MAX_BODY);
	if (is_job) {
		err = store_job_rec_get(w->st, d->subject, &job);
		if (err == RCS_OK)
			err = store_job_history_item(w->st, d->subject, d->hist_n, &h);
		if (err != RCS_OK)
			goto out;
		/* the record as that history item shows it (docs/api.md, "Job history") */
		job.status = h.status;
		job.update_at = h.at;
		free(job.response);
		job.response = h.response;
		h.response = NULL;
		job.response_time = h.response_time;
		free(job.phase);
		job.phase = h.phase;
		h.phase = NULL;
	} else {
		err = store_group_get(w->st, d->client_root, d->subject, NULL, &group);
		if (err != RCS_OK)
			goto out;
	}
	render_init(&r, &b);
	render_obj_open(&r);
	render_kstr(&r, "id", d->ident);
	render_kstr(&r, "type", d->type);
	render_kint(&r, "ts", d->at);
	render_key(&r, "data");
	if (is_job)
		render_job(&r, &job);
	else
		render_webhook_group(&r, &group, d->status);
	render_obj_close(&r);
	err = render_end(&r);
	if (err == RCS_OK) {
		*out = b.data;
		b.data = NULL;
	}
out:
	buf_free(&b);
	free(h.response);
	free(h.phase);
	store_job_rec_free(&job);
	store_group_rec_free(&group);
	return err;
}

/* Records the outcome of an attempt: delivered, queued for a retry, or failed for good. */
static void hook_record(struct webhooks *w, const struct webhook_due *d, int64_t started_ms,
			long code, const char *error)
{
	struct webhook_attempt_rec a;
	int64_t now = (int64_t)time(NULL), next = now;
	const char *state = "delivered";

	memset(&a, 0, sizeof(a));
	a.at = now;
	a.duration_ms = started_ms ? now_ms() - started_ms : 0;
	a.status_code = code;
	a.error = (char *)error;
	if (error) {
		long long delay = (long long)w->o.retry_base
				  << (d->attempts < 16 ? d->attempts : 16);

		if (delay > WEBHOOKS_MAX_BACKOFF)
			delay = WEBHOOKS_MAX_BACKOFF;
		next = now + delay;
		state = next > d->created_at + w->o.give_up ? "failed" : "queued";
		log_warnx("webhook %s: delivery %s (%s %s): %s%s", d->webhook_ident, d->ident,
			  d->type, d->status, error,
			  strcmp(state, "failed") == 0 ? ": failed for good" : "");
	} else {
		log_debug("webhook %s: delivery %s delivered (%ld)", d->webhook_ident, d->ident,
			  code);
	}
	metrics_webhook_attempt(error == NULL, strcmp(state, "failed") == 0);
	if (store_webhook_attempt(w->st, d->id, &a, state, next) != RCS_OK)
		log_warnx("webhook %s: delivery %s: the attempt could not be recorded",
			  d->webhook_ident, d->ident);
}

/* Appends header h to *l: false, with *l as it was, when there is no memory for it. */
static bool hook_header(struct curl_slist **l, const char *h)
{
	struct curl_slist *n = curl_slist_append(*l, h);

	if (n == NULL)
		return false;
	*l = n;
	return true;
}

/* Starts one delivery in slot i (takes d's memory), or records why it cannot start. */
static void hook_begin(struct webhooks *w, size_t slot, struct webhook_due *d)
{
	struct hook_xfer *x = calloc(1, sizeof(*x));
	char sig[WEBHOOK_SIG_MAX], hdr[WEBHOOK_SIG_MAX + 64];
	bool ok;
	enum rcs_err err;

	if (x == NULL) {
		store_webhook_due_free(d);
		return;
	}
	x->w = w;
	x->d = *d;
	memset(d, 0, sizeof(*d));
	err = hook_body(w, &x->d, &x->body);
	if (err == RCS_ERR_NOTFOUND || err == RCS_ERR_TOOBIG) {
		struct webhook_attempt_rec a = {
		    .at = (int64_t)time(NULL), .duration_ms = 0, .status_code = 0, .error = NULL};

		a.error = err == RCS_ERR_NOTFOUND ? (char *)"the job or group is gone"
						  : (char *)"the body is too large";
		store_webhook_attempt(w->st, x->d.id, &a, "failed", a.at);
		hook_xfer_free(x);
		return;
	}
	if (err != RCS_OK) { /* the store failing for now: an attempt, retried later */
		hook_record(w, &x->d, now_ms(), 0, "the body could not be made");
		hook_xfer_free(x);
		return;
	}
	x->started_ms = now_ms();
	if (webhook_sign(x->d.secret, (int64_t)time(NULL), x->body, strlen(x->body), sig) !=
	    RCS_OK) {
		hook_record(w, &x->d, x->started_ms, 0, "the body could not be signed");
		hook_xfer_free(x);
		return;
	}
	x->c = curl_easy_init();
	if (x->c == NULL) {
		hook_record(w, &x->d, x->started_ms, 0, "libcurl unavailable");
		hook_xfer_free(x);
		return;
	}
	ok = hook_header(&x->hdrs, "Content-Type: application/json") &&
	     hook_header(&x->hdrs, "Expect:");
	snprintf(hdr, sizeof(hdr), "rcs-delivery: %s", x->d.ident);
	ok = ok && hook_header(&x->hdrs, hdr);
	snprintf(hdr, sizeof(hdr), "rcs-event: %s", x->d.type);
	ok = ok && hook_header(&x->hdrs, hdr);
	snprintf(hdr, sizeof(hdr), "rcs-signature: %s", sig);
	ok = ok && hook_header(&x->hdrs, hdr);
	if (!ok) {
		hook_record(w, &x->d, x->started_ms, 0, "out of memory for the headers");
		hook_xfer_free(x);
		return;
	}
	curl_easy_setopt(x->c, CURLOPT_URL, x->d.url);
	curl_easy_setopt(x->c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(x->c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(x->c, CURLOPT_PROXY, ""); /* the guard sees the receiver's address */
	curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, x->hdrs);
	curl_easy_setopt(x->c, CURLOPT_POSTFIELDS, x->body);
	curl_easy_setopt(x->c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->body));
	curl_easy_setopt(x->c, CURLOPT_USERAGENT, "rcs-coordinator/" RCS_VERSION);
	curl_easy_setopt(x->c, CURLOPT_OPENSOCKETFUNCTION, hook_open_socket);
	curl_easy_setopt(x->c, CURLOPT_OPENSOCKETDATA, x);
	curl_easy_setopt(x->c, CURLOPT_WRITEFUNCTION, hook_discard);
	curl_easy_setopt(x->c, CURLOPT_CONNECTTIMEOUT, (long)(w->o.timeout < 5 ? w->o.timeout : 5));
	curl_easy_setopt(x->c, CURLOPT_TIMEOUT, (long)w->o.timeout);
	curl_easy_setopt(x->c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->c, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(x->c, CURLOPT_PRIVATE, x);
	if (curl_multi_add_handle(w->multi, x->c) != CURLM_OK) {
		hook_record(w, &x->d, x->started_ms, 0, "libcurl refused the transfer");
		hook_xfer_free(x);
		return;
	}
	w->xfers[slot] = x;
	w->n_inflight++;
}

/* A transfer ended: its attempt recorded, its slot freed. */
static void hook_end(struct webhooks *w, CURL *c, CURLcode rc)
{
	struct hook_xfer *x = NULL;
	char error[WEBHOOKS_ERR_MAX];
	long code = 0;

	curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&x);
	if (x == NULL)
		return;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc == CURLE_OK && code >= 200 && code < 300) {
		hook_record(w, &x->d, x->started_ms, code, NULL);
	} else {
		if (x->refused[0])
			snprintf(error, sizeof(error), "address refused: %s", x->refused);
		else if (rc != CURLE_OK)
			snprintf(error, sizeof(error), "%s",
				 x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
		else if (code >= 300 && code < 400)
			snprintf(error, sizeof(error), "HTTP %ld: redirects are not followed",
				 code);
		else
			snprintf(error, sizeof(error), "HTTP %ld", code);
		hook_record(w, &x->d, x->started_ms, rc == CURLE_OK ? code : 0, error);
	}
	for (size_t i = 0; i < (size_t)w->o.max_inflight; i++)
		if (w->xfers[i] == x) {
			w->xfers[i] = NULL;
			w->n_inflight--;
		}
	hook_xfer_free(x);
}

/* One webhook's deliveries in the slots (hook_fill's tally). */
struct hook_tally {
	char ident[UUID_STR_LEN];
	size_t n;
};

/* The tally's row of webhook ident, added (at 0) when there is room: NULL when not. */
static struct hook_tally *hook_tally_of(struct hook_tally *t, size_t *n, size_t cap,
					const char *ident)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp(t[i].ident, ident) == 0)
			return &t[i];
	if (*n == cap)
		return NULL;
	snprintf(t[*n].ident, sizeof(t[*n].ident), "%s", ident);
	t[*n].n = 0;
	return &t[(*n)++];
}

/*
 * Takes due deliveries into the free slots, in one claim of the store (a batch): at most
 * per_hook of one webhook in flight, so a webhook that hangs holds only its own share. The
 * store's claim gives only the first queued delivery of each job (store_webhooks_due): one
 * of a job in flight here keeps the job's later ones out until its attempt is recorded.
 */
static void hook_fill(struct webhooks *w)
{
	struct store_webhook_due_list due = {.items = NULL, .n = 0};
	size_t max = (size_t)w->o.max_inflight, per_hook = (size_t)w->o.per_hook;
	size_t free_slots = max - w->n_inflight, n_skip = 0, n_tally = 0, slot = 0;
	long long *skip = NULL;
	struct hook_tally *tally = NULL;

	if (free_slots == 0)
		return;
	skip = calloc(max, sizeof(*skip));
	tally = calloc(max, sizeof(*tally));
	if (skip == NULL || tally == NULL)
		goto out;
	for (size_t i = 0; i < max; i++)
		if (w->xfers[i]) {
			struct hook_tally *t =
			    hook_tally_of(tally, &n_tally, max, w->xfers[i]->d.webhook_ident);

			skip[n_skip++] = w->xfers[i]->d.id;
			if (t)
				t->n++;
		}
	/* per webhook its first per_hook heads of jobs: its own in flight among them (read,
	 * which renews their claim, and skipped), then as many new ones as it has room for; the
	 * oldest first of every webhook's */
	if (store_webhooks_due(w->st, (int64_t)time(NULL), skip, n_skip, max + per_hook * 4,
			       per_hook, &due) != RCS_OK)
		goto out;
	for (size_t i = 0; i < due.n && w->n_inflight < max; i++) {
		struct hook_tally *t =
		    hook_tally_of(tally, &n_tally, max, due.items[i].webhook_ident);

		if (t == NULL || t->n >= per_hook)
			continue; /* claimed, not started: taken again in a later fill */
		while (w->xfers[slot] != NULL)
			slot++; /* a free one is there: n_inflight < max */
		hook_begin(w, slot, &due.items[i]);
		if (w->xfers[slot])
			t->n++;
	}
out:
	store_webhook_due_list_free(&due);
	free(skip);
	free(tally);
}

/* Records the attempts of the transfers that ended, in one transaction (a batch of the
 * store): how many ended. */
static size_t hook_reap(struct webhooks *w)
{
	CURLMsg *msg;
	int left = 0;
	size_t n = 0;
	bool tx = false;

	while ((msg = curl_multi_info_read(w->multi, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		if (n++ == 0)
			tx = store_tx_begin(w->st) == RCS_OK;
		hook_end(w, msg->easy_handle, msg->data.result);
	}
	if (tx && store_tx_end(w->st, true) != RCS_OK)
		log_warnx("webhooks: the attempts of %zu deliveries could not be recorded (sent "
			  "again)",
			  n);
	return n;
}

/*
 * The sender's loop: a fill whenever a slot was freed (a transfer ended), when woken by a
 * change (a delivery queued here or, on a shared database, by another coordinator: its
 * NOTIFY; at most every WEBHOOKS_KICK_MS), and every WEBHOOKS_LOOK_MS for retries come due
 * and claims of others that lapsed; in between, libcurl's transfers.
 */
static void *hook_loop(void *arg)
{
	struct webhooks *w = arg;
	int64_t next_look = 0, last_fill = 0;
	bool freed = true, kicked = false;

	for (;;) {
		int running = 0;
		int64_t now, wait;
		bool stop;

		pthread_mutex_lock(&w->lock);
		stop = w->stop;
		kicked = kicked || w->kicked;
		w->kicked = false;
		pthread_mutex_unlock(&w->lock);
		if (stop)
			break;
		now = now_ms();
		if (freed || now >= next_look || (kicked && now - last_fill >= WEBHOOKS_KICK_MS)) {
			hook_fill(w);
			last_fill = now_ms();
			next_look = last_fill + WEBHOOKS_LOOK_MS;
			freed = kicked = false;
		}
		curl_multi_perform(w->multi, &running);
		if (hook_reap(w) > 0) {
			freed = true; /* the freed slots at once */
			continue;
		}
		/* woken by a change (curl_multi_wakeup), a transfer, or the next look */
		now = now_ms();
		wait = kicked ? last_fill + WEBHOOKS_KICK_MS - now : next_look - now;
		curl_multi_poll(w->multi, NULL, 0, wait < 0 ? 0 : (int)wait, NULL);
	}
	for (size_t i = 0; i < (size_t)w->o.max_inflight; i++) {
		hook_xfer_free(w->xfers[i]); /* queued still: sent again after a restart */
		w->xfers[i] = NULL;
	}
	return NULL;
}

static void hook_kick(void *ctx)
{
	struct webhooks *w = ctx;

	pthread_mutex_lock(&w->lock);
	w->kicked = true;
	pthread_mutex_unlock(&w->lock);
	curl_multi_wakeup(w->multi);
}

enum rcs_err webhooks_start(const struct webhooks_opts *opts, struct store *st,
			    struct lifecycle *lc, struct webhooks **out)
{
	struct webhooks *w = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		goto out;
	pthread_mutex_init(&w->lock, NULL);
	w->o = *opts;
	if (w->o.retry_base <= 0)
		w->o.retry_base = 10;
	if (w->o.give_up <= 0)
		w->o.give_up = 86400;
	if (w->o.timeout <= 0)
		w->o.timeout = 10;
	if (w->o.max_inflight <= 0)
		w->o.max_inflight = WEBHOOKS_MAX_INFLIGHT;
	if (w->o.per_hook <= 0)
		w->o.per_hook = WEBHOOKS_PER_HOOK;
	if (w->o.per_hook > w->o.max_inflight)
		w->o.per_hook = w->o.max_inflight;
	w->st = st;
	w->lc = lc;
	w->xfers = calloc((size_t)w->o.max_inflight, sizeof(*w->xfers));
	w->multi = curl_multi_init();
	if (w->xfers == NULL || w->multi == NULL)
		goto out;
	if (pthread_create(&w->thread, NULL, hook_loop, w) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	w->started = true;
	lc->webhooks_changed = hook_kick;
	lc->webhooks_ctx = w;
	log_info("webhooks: %d deliveries at once (%d for one webhook), %d s timeout, retries for "
		 "%d s",
		 w->o.max_inflight, w->o.per_hook, w->o.timeout, w->o.give_up);
	*out = w;
	w = NULL;
	err = RCS_OK;
out:
	webhooks_stop(w);
	return err;
}

void webhooks_stop(struct webhooks *w)
{
	if (w == NULL)
		return;
	if (w->lc && w->lc->webhooks_ctx == w) {
		w->lc->webhooks_changed = NULL;
		w->lc->webhooks_ctx = NULL;
	}
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_mutex_unlock(&w->lock);
	if (w->multi)
		curl_multi_wakeup(w->multi);
	if (w->started)
		pthread_join(w->thread, NULL);
	if (w->multi)
		curl_multi_cleanup(w->multi);
	free(w->xfers);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
