/*
 * notifier.c - e-mail notifications over SMTP. See notifier.h.
 */
#include "notifier.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "log.h"
#include "manifest.h"
#include "store_devices.h"
#include "store_jobs.h"
#include "store_outbox.h"
#include "store_queues.h"

#define NOTIFIER_BATCH        100
#define NOTIFIER_MAX_RESPONSE 4096 /* bytes of the job's response quoted in a mail */
#define NOTIFIER_MAX_MAIL     (64 * 1024)
#define NOTIFIER_MAX_BACKOFF  3600

struct notifier {
	struct notifier_opts o;
	char *smtp_url, *from, *username, *password;
	struct store *st;
	struct lifecycle *lc;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	bool kicked;
};

/* ---- the mail ---- */

/* The longest prefix of s of at most max bytes that ends between UTF-8 characters. */
static size_t mail_utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return n;
	n = max;
	while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	return n;
}

/* Appends s to a header: control characters (CR, LF...) become spaces. */
static void mail_header_text(struct buf *b, const char *s, size_t max)
{
	max = s ? mail_utf8_cut(s, max) : 0;
	for (size_t i = 0; s && s[i] && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		char ch = c < 0x20 || c == 0x7f ? ' ' : (char)c;
		buf_append(b, &ch, 1);
	}
}

static bool mail_is_ascii(const char *s)
{
	for (; s && *s; s++)
		if ((unsigned char)*s >= 0x80)
			return false;
	return true;
}

/* A Subject: ASCII as is, otherwise RFC 2047 encoded words (UTF-8, base64). */
static void mail_subject(struct buf *b, const char *subject)
{
	struct buf clean;
	char enc[512];

	buf_init(&clean, 400);
	mail_header_text(&clean, subject, 300);
	if (clean.data == NULL || mail_is_ascii(clean.data)) {
		buf_appendf(b, "Subject: %s\r\n", clean.data ? clean.data : "");
	} else {
		/* encoded words of at most 36 input bytes (lines under 76 characters, RFC 2047),
		 * cut between UTF-8 characters */
		size_t i = 0, n = clean.len;
		buf_appendf(b, "Subject:");
		while (i < n) {
			size_t k = n - i > 36 ? 36 : n - i;
			while (i + k < n && k > 0 &&
			       ((unsigned char)clean.data[i + k] & 0xc0) == 0x80)
				k--;
			if (b64_encode(clean.data + i, k, enc, sizeof(enc)) != RCS_OK)
				break;
			buf_appendf(b, " =?UTF-8?B?%s?=%s", enc, i + k < n ? "\r\n" : "");
			i += k;
		}
		buf_appendf(b, "\r\n");
	}
	buf_free(&clean);
}

#define MAIL_LINE_MAX 900 /* SMTP allows 998 bytes a line: long lines are wrapped */

/*
 * Appends at most max bytes of body text (cut between UTF-8 characters),
 * every line ending in CRLF and none longer than MAIL_LINE_MAX bytes (libcurl
 * does the SMTP dot-stuffing).
 */
static void mail_body_text(struct buf *b, const char *s, size_t max)
{
	size_t line = 0;

	if (s == NULL)
		return;
	max = mail_utf8_cut(s, max);
	for (size_t i = 0; i < max; i++) {
		if (s[i] == '\r')
			continue;
		if (s[i] == '\n') {
			buf_append(b, "\r\n", 2);
			line = 0;
			continue;
		}
		if (line >= MAIL_LINE_MAX && ((unsigned char)s[i] & 0xc0) != 0x80) {
			buf_append(b, "\r\n", 2);
			line = 0;
		}
		buf_append(b, &s[i], 1);
		line++;
	}
}

char *notifier_format(const char *from, const char *to, const struct job_rec *job,
		      const char *device_name, const char *status, int64_t now,
		      const char *message_id)
{
	struct buf b;
	char date[64], when[64], subject[512];
	const char *task_name = job->task_name;
	const char *device = device_name ? device_name : job->entity_ident;
	const char *response = job->response, *comment = job->comment;
	time_t t = (time_t)now;
	struct tm tm;
	char *out = NULL;

	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	snprintf(subject, sizeof(subject), "[rcs] %.*s on %.*s: %s",
		 (int)mail_utf8_cut(task_name ? task_name : "?", 150), task_name ? task_name : "?",
		 (int)mail_utf8_cut(device ? device : "?", 100), device ? device : "?", status);
	buf_init(&b, NOTIFIER_MAX_MAIL);
	buf_appendf(&b, "Date: %s\r\n", date);
	buf_appendf(&b, "Message-ID: <%s>\r\n", message_id);
	buf_appendf(&b, "From: <%s>\r\n", from);
	buf_appendf(&b, "To: <%s>\r\n", to);
	mail_subject(&b, subject);
	buf_appendf(&b, "MIME-Version: 1.0\r\n"
			"Content-Type: text/plain; charset=utf-8\r\n"
			"Content-Transfer-Encoding: 8bit\r\n"
			"Auto-Submitted: auto-generated\r\n\r\n");
	buf_appendf(&b, "Job %s is now %s.\r\n\r\n", job->ident, status);
	buf_appendf(&b, "Job:      %s\r\n", job->ident);
	buf_append(&b, "Task:     ", 10);
	mail_body_text(&b, task_name, 200);
	buf_appendf(&b, " (%s, version %lld)\r\n", job->task_ident, job->task_version);
	buf_append(&b, "Device:   ", 10);
	mail_body_text(&b, device, 200);
	buf_appendf(&b, " (%s)\r\n", job->entity_ident);
	buf_appendf(&b, "Status:   %s\r\n", status);
	buf_appendf(&b, "Time:     %s\r\n", when);
	buf_append(&b, "Comment:  ", 10);
	mail_body_text(&b, comment ? comment : "-", 1000);
	buf_append(&b, "\r\n", 2);
	buf_append(&b, "Response:\r\n", 11);
	mail_body_text(&b, response ? response : "-", NOTIFIER_MAX_RESPONSE);
	if (response && strlen(response) > NOTIFIER_MAX_RESPONSE)
		buf_appendf(&b, "\r\n[... %zu more bytes: see the job in the API]",
			    strlen(response) - NOTIFIER_MAX_RESPONSE);
	buf_append(&b, "\r\n", 2);
	out = b.data; /* NULL only when nothing could be allocated: every part is bounded */
	b.data = NULL;
	buf_free(&b);
	return out;
}

/* ---- sending ---- */

struct mail_reader {
	const char *data;
	size_t len, off;
};

static size_t mail_read(char *ptr, size_t size, size_t nmemb, void *userp)
{
	struct mail_reader *r = userp;
	size_t room = size * nmemb, n = r->len - r->off;

	if (n > room)
		n = room;
	memcpy(ptr, r->data + r->off, n);
	r->off += n;
	return n;
}

/* Aborts a transfer when the coordinator stops. */
static int mail_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			 curl_off_t ulnow)
{
	struct notifier *n = clientp;
	bool stop;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	pthread_mutex_lock(&n->lock);
	stop = n->stop;
	pthread_mutex_unlock(&n->lock);
	return stop ? 1 : 0;
}

/* Sends one mail; RCS_OK when the server accepted it, else err text in errbuf. */
static enum rcs_err notifier_send(struct notifier *n, const char *to, const char *mail,
				  char *errbuf)
{
	CURL *c = curl_easy_init();
	struct curl_slist *rcpt = NULL;
	struct mail_reader r = {mail, strlen(mail), 0};
	char addr[300];
	enum rcs_err err = RCS_OK;
	CURLcode rc;

	errbuf[0] = '\0';
	if (c == NULL) {
		snprintf(errbuf, CURL_ERROR_SIZE, "curl unavailable");
		return RCS_ERR_NOMEM;
	}
	snprintf(addr, sizeof(addr), "<%s>", to);
	rcpt = curl_slist_append(NULL, addr);
	if (rcpt == NULL) {
		snprintf(errbuf, CURL_ERROR_SIZE, "out of memory for the recipient");
		curl_easy_cleanup(c);
		return RCS_ERR_NOMEM;
	}
	curl_easy_setopt(c, CURLOPT_URL, n->smtp_url);
	curl_easy_setopt(c, CURLOPT_MAIL_FROM, n->from);
	curl_easy_setopt(c, CURLOPT_MAIL_RCPT, rcpt);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, mail_read);
	curl_easy_setopt(c, CURLOPT_READDATA, &r);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_USE_SSL, (long)CURLUSESSL_TRY); /* STARTTLS when offered */
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, mail_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, n);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)n->o.timeout);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	if (n->username) {
		curl_easy_setopt(c, CURLOPT_USERNAME, n->username);
		curl_easy_setopt(c, CURLOPT_PASSWORD, n->password ? n->password : "");
	}
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		long code = 0;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (errbuf[0] == '\0')
			snprintf(errbuf, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
		if (code >= 500 && code < 600 && rc != CURLE_LOGIN_DENIED) {
			/* a permanent refusal of this mail (5xx): retrying would not help; refused
			 * credentials are the coordinator's configuration, retried until fixed */
			size_t l = strlen(errbuf);
			snprintf(errbuf + l, CURL_ERROR_SIZE - l, " (server answered %ld)", code);
			err = RCS_ERR_INVAL;
		} else {
			err = RCS_ERR_IO;
		}
	}
	curl_slist_free_all(rcpt);
	curl_easy_cleanup(c);
	return err;
}

static void notifier_one(struct notifier *n, const struct notification_due *row, int64_t now)
{
	long long id = row->id;
	long long attempts = row->attempts;
	const char *job_ident = row->job_ident, *root = row->client_root;
	const char *status = row->status, *to = row->address;
	struct device_rec dev;
	bool have_dev = false;
	struct job_rec job;
	char errbuf[CURL_ERROR_SIZE + 1], msgid[160], key[256], h[SHA256_HEX_LEN];
	char *mail = NULL;
	long long sent = 0;
	enum rcs_err err;

	if (n->o.max_per_hour > 0 &&
	    store_notifications_sent_since(n->st, root, now - 3600, &sent) == RCS_OK &&
	    sent >= n->o.max_per_hour) {
		log_warnx(
		    "tenant %s: more than %lld mails this hour: notification to %s suppressed",
		    root, n->o.max_per_hour, to);
		store_notification_update(n->st, id, "suppressed", now, now, "hourly cap reached");
		return;
	}
	if (store_job_rec_get(n->st, job_ident, &job) != RCS_OK) {
		store_notification_update(n->st, id, "failed", now, now, "job not found");
		return;
	}
	have_dev = store_device_get(n->st, root, job.entity_ident, &dev) == RCS_OK;
	/* the same Message-ID for every attempt of one notification: receivers can dedupe */
	snprintf(key, sizeof(key), "%s/%s/%s", job_ident, status, to);
	sha256_hex(key, strlen(key), h);
	snprintf(msgid, sizeof(msgid), "%.32s.%s@rcs", h, status);
	/* the status the mail is about, whatever the job shows now */
	mail = notifier_format(n->from, to, &job, have_dev ? dev.name : NULL, status, now, msgid);
	if (mail == NULL) {
		store_notification_update(n->st, id, "failed", now, now, "mail too large");
		goto out;
	}
	err = notifier_send(n, to, mail, errbuf);
	if (err == RCS_OK) {
		store_notification_update(n->st, id, "sent", now, now, NULL);
		log_info("job %s: %s notified to %s", job_ident, status, to);
	} else if (err == RCS_ERR_INVAL || attempts + 1 >= n->o.max_attempts) {
		store_notification_update(n->st, id, "failed", now, now, errbuf);
		log_warnx("job %s: notification to %s failed for good: %s", job_ident, to, errbuf);
	} else {
		long long delay = (long long)n->o.retry_base << (attempts < 16 ? attempts : 16);
		if (delay > NOTIFIER_MAX_BACKOFF)
			delay = NOTIFIER_MAX_BACKOFF;
		store_notification_update(n->st, id, "queued", now, now + delay, errbuf);
		log_warnx("job %s: notification to %s not sent (%s), retry in %llds", job_ident, to,
			  errbuf, delay);
	}
out:
	free(mail);
	if (have_dev)
		store_device_rec_free(&dev);
	store_job_rec_free(&job);
}

static void *notifier_loop(void *arg)
{
	struct notifier *n = arg;

	pthread_mutex_lock(&n->lock);
	while (!n->stop) {
		struct store_notification_due_list rows = {.items = NULL, .n = 0};
		int64_t now = (int64_t)time(NULL), next = 0;
		struct timespec until;

		n->kicked = false;
		pthread_mutex_unlock(&n->lock);
		if (store_notifications_due(n->st, now, NOTIFIER_BATCH, &rows) == RCS_OK) {
			for (size_t i = 0; i < rows.n; i++) {
				bool held = false;

				/* a batch may outlast the claim's lease: each mail is claimed
				 * again right before it goes (docs/architecture.md "Claims") */
				if (store_notification_renew(n->st, rows.items[i].id,
							     (int64_t)time(NULL),
							     &held) == RCS_OK &&
				    held)
					notifier_one(n, &rows.items[i], now);
			}
		}
		bool more = rows.n == NOTIFIER_BATCH;
		store_notification_due_list_free(&rows);
		store_notification_next(n->st, &next);
		pthread_mutex_lock(&n->lock);
		if (more || n->kicked)
			continue;
		/* sleep until woken (a status change) or the next retry is due */
		clock_gettime(CLOCK_REALTIME, &until);
		now = (int64_t)until.tv_sec;
		until.tv_sec += next > now ? (time_t)(next - now) : (next ? 1 : 3600);
		/* a shared database: another coordinator's claims lapse unannounced; a look
		 * every second behind the NOTIFY of new mail (store_listen) */
		if (store_shared(n->st) && until.tv_sec > (time_t)now + 1)
			until.tv_sec = (time_t)now + 1;
		while (!n->stop && !n->kicked)
			if (pthread_cond_timedwait(&n->cond, &n->lock, &until) != 0)
				break;
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

static void notifier_kick(void *ctx)
{
	struct notifier *n = ctx;

	pthread_mutex_lock(&n->lock);
	n->kicked = true;
	pthread_cond_signal(&n->cond);
	pthread_mutex_unlock(&n->lock);
}

enum rcs_err notifier_start(const struct notifier_opts *opts, struct store *st,
			    struct lifecycle *lc, struct notifier **out)
{
	struct notifier *n = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	*out = NULL;
	if (strncmp(opts->smtp_url, "smtp://", 7) != 0 &&
	    strncmp(opts->smtp_url, "smtps://", 8) != 0) {
		log_warnx("--smtp-url %s: expected smtp://host:port or smtps://host:port",
			  opts->smtp_url);
		return RCS_ERR_INVAL;
	}
	if (opts->from == NULL || strchr(opts->from, '@') == NULL ||
	    strpbrk(opts->from, "\r\n<>")) {
		log_warnx("--smtp-from: an e-mail address is required");
		return RCS_ERR_INVAL;
	}
	n = calloc(1, sizeof(*n));
	if (n == NULL)
		goto out;
	pthread_mutex_init(&n->lock, NULL);
	pthread_cond_init(&n->cond, NULL);
	n->o = *opts;
	n->smtp_url = strdup(opts->smtp_url);
	n->from = strdup(opts->from);
	n->username = opts->username ? strdup(opts->username) : NULL;
	n->password = opts->password ? strdup(opts->password) : NULL;
	if (n->o.max_attempts <= 0)
		n->o.max_attempts = 10;
	if (n->o.retry_base <= 0)
		n->o.retry_base = 30;
	if (n->o.timeout <= 0)
		n->o.timeout = 30;
	n->st = st;
	n->lc = lc;
	if (n->smtp_url == NULL || n->from == NULL)
		goto out;
	if (pthread_create(&n->thread, NULL, notifier_loop, n) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	n->started = true;
	lc->changed = notifier_kick;
	lc->changed_ctx = n;
	log_info("e-mail notifications through %s from %s", opts->smtp_url, opts->from);
	*out = n;
	n = NULL;
	err = RCS_OK;
out:
	notifier_stop(n);
	return err;
}

void notifier_stop(struct notifier *n)
{
	if (n == NULL)
		return;
	if (n->lc && n->lc->changed_ctx == n) {
		n->lc->changed = NULL;
		n->lc->changed_ctx = NULL;
	}
	pthread_mutex_lock(&n->lock);
	n->stop = true;
	pthread_cond_signal(&n->cond);
	pthread_mutex_unlock(&n->lock);
	if (n->started)
		pthread_join(n->thread, NULL);
	free(n->smtp_url);
	free(n->from);
	free(n->username);
	if (n->password)
		explicit_bzero(n->password, strlen(n->password));
	free(n->password);
	pthread_cond_destroy(&n->cond);
	pthread_mutex_destroy(&n->lock);
	free(n);
}
