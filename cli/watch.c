#include "watch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jsonu.h"
#include "table.h"
#include "uuid.h"

static volatile sig_atomic_t watch_stop;

static void watch_on_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

long long watch_done(const struct watch_snap *s)
{
	long long n = 0;

	for (int i = 0; i < JS__COUNT; i++)
		if (status_is_terminal((enum job_status)i))
			n += s->counts[i];
	return n;
}

int watch_finished(const struct watch_snap *s)
{
	if (s->state[0] != '\0')
		return strcmp(s->state, "completed") == 0 || strcmp(s->state, "aborted") == 0 ||
		       strcmp(s->state, "cancelled") == 0;
	return watch_done(s) >= s->total;
}

int watch_failed(const struct watch_snap *s)
{
	return s->counts[JS_EDGE_ERROR] > 0 || s->counts[JS_EXPIRED] > 0 ||
	       (s->counts[JS_CANCELLED] > 0 && strcmp(s->state, "completed") != 0) ||
	       strcmp(s->state, "aborted") == 0 || strcmp(s->state, "cancelled") == 0;
}

const char *watch_end_word(const struct watch_snap *s, int interrupted)
{
	if (interrupted)
		return "interrupted";
	if (strcmp(s->state, "completed") == 0)
		return watch_failed(s) ? "completed with failures" : "completed";
	if (strcmp(s->state, "aborted") == 0 || strcmp(s->state, "cancelled") == 0)
		return s->state;
	return watch_failed(s) ? "ended failed" : "done";
}

double watch_eta(const struct watch_snap *s, long long left, double rate)
{
	double eta = left > 0 && rate > 0 ? (double)left / rate : -1;

	if (left <= 0 || strcmp(s->state, "paused") == 0)
		return -1; /* a paused group releases nothing: no time to tell */
	/* what the rollout still holds goes out at its pace, however fast the first ones ended */
	if (s->held > 0 && s->release_eta >= 0 && s->release_eta > eta)
		eta = s->release_eta;
	return eta;
}

static long long watch_count(const struct watch_snap *s, int st)
{
	return st == JS__COUNT ? watch_done(s) : s->counts[st];
}

double watch_rate(const struct watch_snap *samples, size_t n, int st)
{
	const struct watch_snap *last, *first = NULL;

	if (n < 2)
		return -1;
	last = &samples[n - 1];
	for (size_t i = 0; i + 1 < n; i++)
		if (last->t - samples[i].t <= WATCH_WINDOW) {
			first = &samples[i];
			break;
		}
	if (first == NULL)
		first = &samples[n - 2];
	if (last->t - first->t < 0.5)
		return -1;
	return (double)(watch_count(last, st) - watch_count(first, st)) / (last->t - first->t);
}

void watch_bar(char *out, size_t len, const char *label, long long count, long long total,
	       double rate, double eta_s, size_t width)
{
	char bar[256], tail[80], r[24] = "", eta[32] = "";
	size_t bw, fill, fixed;

	/* a tail of one width whatever the rate, so that the bars line up */
	if (rate > 0)
		snprintf(r, sizeof(r), "%.1f/s", rate);
	if (eta_s >= 0 && count < total) {
		char d[24];
		table_duration(d, sizeof(d), eta_s);
		snprintf(eta, sizeof(eta), "ETA %s", d);
	}
	snprintf(tail, sizeof(tail), "%6lld/%-6lld %9s  %-10s", count, total, r, eta);
	fixed = 2 + 17 + 3 + strlen(tail); /* "  label[bar] tail" */
	bw = width > fixed + 10 ? width - fixed : 10;
	if (bw > sizeof(bar) - 1)
		bw = sizeof(bar) - 1;
	fill = total > 0 ? (size_t)((double)bw * (double)count / (double)total + 0.5) : 0;
	if (fill > bw)
		fill = bw;
	memset(bar, '#', fill);
	memset(bar + fill, '.', bw - fill);
	bar[bw] = '\0';
	snprintf(out, len, "  %-17s[%s] %s", label, bar, tail);
	for (size_t n = strlen(out); n > 0 && out[n - 1] == ' '; n--)
		out[n - 1] = '\0';
}

/* "code n, ..." of a group's error codes into out (len > 0). */
static void watch_codes(json_object *codes, char *out, size_t len)
{
	size_t o = 0;

	if (codes == NULL || !json_object_is_type(codes, json_type_object))
		return;
	json_object_object_foreach(codes, k, v)
	{
		int n = snprintf(out + o, len - o, "%s%s %lld", o ? ", " : "", k,
				 json_object_is_type(v, json_type_int)
				     ? (long long)json_object_get_int64(v)
				     : 0LL);

		if (n < 0 || (size_t)n >= len - o)
			return;
		o += (size_t)n;
	}
}

void watch_detail(json_object *rec, int is_group, char *out, size_t len)
{
	json_object *p = jsonu_member(rec, "progress");
	const char *phase = cli_str(rec, "phase");
	char clean[64] = "";
	size_t o;

	if (len == 0)
		return;
	out[0] = '\0';
	if (is_group) {
		watch_codes(jsonu_member(rec, "error_codes"), out, len);
		return;
	}
	if (phase != NULL) {
		table_clean(clean, sizeof(clean), phase, 0);
		snprintf(out, len, "phase %s", clean);
	}
	/* a download under way: the job's progress before its end */
	o = strlen(out);
	if (p != NULL && json_object_is_type(p, json_type_object) && cli_int(p, "total") > 0 &&
	    cli_int(p, "done") < cli_int(p, "total") && o < len) {
		const char *st = cli_str(rec, "status");
		enum job_status js;

		if (st == NULL || !status_parse(st, &js) || !status_is_terminal(js))
			snprintf(out + o, len - o, "%sdownload %d %%", o ? ", " : "",
				 (int)(100.0 * (double)cli_int(p, "done") /
				       (double)cli_int(p, "total")));
	}
}

/* Reads a group's (or a job's) record into s. */
static void watch_read(json_object *rec, int is_group, struct watch_snap *s)
{
	json_object *counts, *progress = jsonu_member(rec, "progress");
	const char *st;
	enum job_status js;
	long long sum = 0;
	bool by_device;

	memset(s->counts, 0, sizeof(s->counts));
	s->other = 0;
	s->state[0] = '\0';
	s->held = s->not_sent = s->retries = 0;
	s->release_eta = -1;
	watch_detail(rec, is_group, s->detail, sizeof(s->detail));
	if (!is_group) {
		s->total = 1;
		st = cli_str(rec, "status");
		if (st != NULL && status_parse(st, &js))
			s->counts[js] = 1;
		else
			s->other = 1;
		return;
	}
	s->total = cli_int(rec, "total");
	st = cli_str(rec, "status");
	if (st != NULL)
		snprintf(s->state, sizeof(s->state), "%s", st);
	counts = jsonu_member(rec, "counts");
	by_device = counts != NULL && json_object_is_type(counts, json_type_object);
	if (!by_device)
		counts = jsonu_member(rec, "statuses");
	if (counts == NULL || !json_object_is_type(counts, json_type_object))
		return;
	json_object_object_foreach(counts, k, v)
	{
		long long n = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
		if (status_parse(k, &js))
			s->counts[js] += n;
		else
			s->other += n;
		sum += n;
	}
	if (!by_device)
		return;
	/* devices: the latest attempts' counts add up to them (docs/api.md "Progress") */
	s->total = sum;
	if (progress != NULL && json_object_is_type(progress, json_type_object)) {
		json_object *eta = jsonu_member(progress, "release_eta_s");
		s->held = cli_int(progress, "held");
		s->not_sent = cli_int(progress, "not_sent");
		s->retries = cli_int(progress, "retries");
		if (eta != NULL && json_object_is_type(eta, json_type_int))
			s->release_eta = (double)json_object_get_int64(eta);
	}
}

static int watch_same(const struct watch_snap *a, const struct watch_snap *b)
{
	return a->total == b->total && a->other == b->other &&
	       memcmp(a->counts, b->counts, sizeof(a->counts)) == 0 &&
	       strcmp(a->state, b->state) == 0 && strcmp(a->detail, b->detail) == 0 &&
	       a->held == b->held && a->not_sent == b->not_sent && a->retries == b->retries;
}

/* "terminated 7, edge_error 1, cancelled 2 (2 not sent); 3 retries" */
static void watch_summary(const struct watch_snap *s, char *out, size_t len)
{
	size_t o = 0;
	int n;

	out[0] = '\0';
	for (int i = 0; i < JS__COUNT; i++) {
		char extra[48] = "";
		if (s->counts[i] == 0)
			continue;
		if (i == JS_CANCELLED && s->not_sent > 0)
			snprintf(extra, sizeof(extra), " (%lld not sent)", s->not_sent);
		n = snprintf(out + o, len - o, "%s%s %lld%s", o ? ", " : "",
			     status_name((enum job_status)i), s->counts[i], extra);
		if (n < 0 || (size_t)n >= len - o)
			return;
		o += (size_t)n;
	}
	if (s->other > 0) {
		n = snprintf(out + o, len - o, "%sother %lld", o ? ", " : "", s->other);
		if (n < 0 || (size_t)n >= len - o)
			return;
		o += (size_t)n;
	}
	if (s->retries > 0)
		snprintf(out + o, len - o, "; %lld retr%s", s->retries,
			 s->retries == 1 ? "y" : "ies");
}

/* "7/10 ended  running  3 held  12s  0.5/s  ETA 6s", then the record's detail
 * ("  rolled_back 1", "  phase verify") */
static void watch_head(const struct watch_snap *samples, size_t n, char *out, size_t len)
{
	const struct watch_snap *s = &samples[n - 1];
	double rate = watch_rate(samples, n, JS__COUNT);
	double left_s = watch_eta(s, s->total - watch_done(s), rate);
	char el[32], held[40] = "", r[24] = "", eta[48] = "";
	size_t o;

	table_duration(el, sizeof(el), s->t);
	if (s->held > 0)
		snprintf(held, sizeof(held), "  %lld held", s->held);
	if (rate > 0 && s->total > watch_done(s))
		snprintf(r, sizeof(r), "  %.1f/s", rate);
	if (left_s >= 0) {
		char d[24];
		table_duration(d, sizeof(d), left_s);
		snprintf(eta, sizeof(eta), "  ETA %s", d);
	}
	snprintf(out, len, "%lld/%lld ended%s%s%s  %s%s%s", watch_done(s), s->total,
		 s->state[0] ? "  " : "", s->state, held, el, r, eta);
	o = strlen(out);
	if (s->detail[0] != '\0' && o < len)
		snprintf(out + o, len - o, "  %s", s->detail);
}

struct watch_tty {
	int lines;            /* lines drawn last time */
	int shown[JS__COUNT]; /* statuses that have had a line (they keep it) */
};

static void watch_draw(struct watch_tty *d, const char *title, const struct watch_snap *samples,
		       size_t n)
{
	const struct watch_snap *s = &samples[n - 1];
	size_t width = table_term_width();
	char line[512], head[320];
	int lines = 0;

	if (width == 0 || width > sizeof(line) - 1)
		width = width == 0 ? 80 : sizeof(line) - 1;
	if (d->lines > 0)
		printf("\033[%dA", d->lines);
	watch_head(samples, n, head, sizeof(head));
	snprintf(line, sizeof(line), "%s  %s", title, head);
	table_cut(line, width);
	printf("\r\033[2K%s\n", line);
	lines++;
	for (int i = 0; i < JS__COUNT; i++) {
		double rate;
		if (s->counts[i] > 0)
			d->shown[i] = 1;
		if (!d->shown[i])
			continue;
		rate = status_is_terminal((enum job_status)i) ? watch_rate(samples, n, i) : -1;
		watch_bar(line, sizeof(line), status_name((enum job_status)i), s->counts[i],
			  s->total, rate,
			  rate > 0 ? watch_eta(s, s->total - s->counts[i], rate) : -1, width);
		table_cut(line, width);
		printf("\r\033[2K%s\n", line);
		lines++;
	}
	/* lines a status had before and no longer has: none (statuses keep their line) */
	d->lines = lines;
	fflush(stdout);
}

static double watch_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps seconds, in steps, until then or a signal asks to stop. */
static void watch_sleep(double seconds)
{
	double end = watch_now() + seconds;

	while (!watch_stop && watch_now() < end) {
		struct timespec step = {0, 100 * 1000 * 1000};
		nanosleep(&step, NULL);
	}
}

/* ---- why it failed (after "ended failed") ---- */

#define WATCH_WHY_PAGE  500 /* failed jobs of a group read for their causes */
#define WATCH_WHY_CODES 8   /* distinct causes told apart; more are "other causes" */
#define WATCH_WHY_SHOWN 3   /* causes shown with an example */

/* "  edge_error (script_error): <response>": a failed job's status, the device's cause and
 * its response, on one line cut to the terminal (indent: spaces before it). */
static void watch_why_job(json_object *job, const char *indent, size_t width)
{
	char line[512], resp[384];
	const char *code = cli_str(job, "error_code");
	const char *text = cli_str(job, "response");

	table_clean(resp, sizeof(resp), text ? text : "", 0);
	snprintf(line, sizeof(line), "%s%s%s%s%s%s%s", indent, cli_show(job, "status"),
		 code ? " (" : "", code ? cli_show(job, "error_code") : "", code ? ")" : "",
		 resp[0] ? ": " : "", resp);
	table_cut(line, width);
	printf("%s\n", line);
}

struct watch_cause {
	const char *code; /* the device's error_code, "" when none */
	long long n;
	json_object *example; /* the first job of this cause */
};

/* Tallies the causes of the failed jobs in items, most common first: *n of them. */
static size_t watch_causes(json_object *items, struct watch_cause *c, long long *other)
{
	size_t n = 0, len = (size_t)json_object_array_length(items);

	*other = 0;
	for (size_t i = 0; i < len; i++) {
		json_object *job = json_object_array_get_idx(items, i);
		const char *code = cli_str(job, "error_code");
		size_t k;

		code = code ? code : "";
		for (k = 0; k < n && strcmp(c[k].code, code) != 0; k++)
			;
		if (k == n && n == WATCH_WHY_CODES) {
			(*other)++;
			continue;
		}
		if (k == n)
			c[n++] = (struct watch_cause){code, 0, job};
		c[k].n++;
	}
	for (size_t i = 1; i < n; i++) /* a few entries: insertion sort, stable */
		for (size_t j = i; j > 0 && c[j].n > c[j - 1].n; j--) {
			struct watch_cause t = c[j];
			c[j] = c[j - 1];
			c[j - 1] = t;
		}
	return n;
}

/* Why a group ended failed: its reason (an abort's), and the causes of its edge_error jobs,
 * most common first, each with one job's response (docs/cli.md "watch"). */
static void watch_why_group(struct cli *c, const char *group, json_object *rec, size_t width)
{
	struct watch_cause causes[WATCH_WHY_CODES];
	const char *ids[WATCH_WHY_SHOWN] = {NULL};
	size_t digits;
	struct http_resp r = {0};
	struct buf path, line;
	char errbuf[256], clean[256];
	json_object *items;
	long long other = 0, total;
	size_t n;

	buf_init(&path, CLI_MAX_PATH);
	buf_init(&line, 1024);
	if (cli_str(rec, "reason") != NULL) {
		table_clean(clean, sizeof(clean), cli_str(rec, "reason"), 0);
		printf("  reason: %s\n", clean);
	}
	if (buf_appendf(&path, "/jobs?status=edge_error&per_page=%d", WATCH_WHY_PAGE) != RCS_OK ||
	    cli_query(&path, "group_ident", group) != RCS_OK ||
	    http_call(&c->http, "GET", path.data, NULL, &r, errbuf, sizeof(errbuf)) != RCS_OK ||
	    r.status != 200 || (items = cli_array(r.json, "items")) == NULL)
		goto out; /* the summary above stands; the causes are a bonus */
	n = watch_causes(items, causes, &other);
	if (n == 0)
		goto out;
	total = cli_int(r.json, "total_items");
	buf_appendf(&line, "  edge_error causes:");
	for (size_t i = 0; i < n; i++)
		buf_appendf(&line, "%s %s %lld", i ? "," : "",
			    causes[i].code[0] ? causes[i].code : "(none)", causes[i].n);
	if (other > 0)
		buf_appendf(&line, ", other causes %lld", other);
	if (total > (long long)json_object_array_length(items))
		buf_appendf(&line, " (of the first %zu of %lld)",
			    (size_t)json_object_array_length(items), total);
	table_clean(clean, sizeof(clean), line.data ? line.data : "", 0);
	table_cut(clean, width);
	printf("%s\n", clean);
	/* the examples' short idents, as the tables show them (docs/cli.md "Tables") */
	for (size_t i = 0; i < n && i < WATCH_WHY_SHOWN; i++)
		ids[i] = cli_str(causes[i].example, "ident");
	digits = table_short_len(ids, n < WATCH_WHY_SHOWN ? n : WATCH_WHY_SHOWN);
	for (size_t i = 0; i < n && i < WATCH_WHY_SHOWN; i++) {
		char indent[64], id[UUID_STR_LEN];
		snprintf(indent, sizeof(indent),
			 "    job %s: ", table_short(id, sizeof(id), ids[i], digits));
		watch_why_job(causes[i].example, indent, width);
	}
out:
	http_resp_free(&r);
	buf_free(&path);
	buf_free(&line);
}

int watch_run(struct cli *c, const char *group, const char *job, enum watch_out mode,
	      long long interval)
{
	struct watch_snap samples[WATCH_SAMPLES], prev;
	struct watch_tty tty;
	struct sigaction sa, old_int, old_term;
	struct http_resp r = {0};
	struct buf path;
	char title[160], errbuf[512], summary[512], sid[UUID_STR_LEN];
	size_t n = 0;
	double start = watch_now();
	const char *term = getenv("TERM");
	int rc = CLI_OK, polls = 0, have_prev = 0, failures = 0;
	json_object *last = NULL;

	memset(&tty, 0, sizeof(tty));
	memset(&prev, 0, sizeof(prev));
	buf_init(&path, CLI_MAX_PATH);
	if (mode == WATCH_AUTO)
		mode = table_term_width() > 0 && term != NULL && strcmp(term, "dumb") != 0
			   ? WATCH_TTY
			   : WATCH_LINES;
	if (group == NULL && job == NULL) {
		rc = cli_fail(c, CLI_API, "nothing to watch");
		goto out;
	}
	if (buf_appendf(&path, "%s", group ? "/groups/" : "/jobs/") != RCS_OK ||
	    http_escape(&path, group ? group : job) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the ident is too long");
		goto out;
	}
	watch_stop = 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watch_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	if (mode == WATCH_TTY)
		fputs("\033[?25l", stdout); /* the cursor, back at the end */
	/* "job 1c9e20ab", "group wave-1": a short ident, as the tables show it */
	snprintf(title, sizeof(title), "%s %s", group ? "group" : "job",
		 table_short(sid, sizeof(sid), group ? group : job, TABLE_SHORT_MIN));
	for (;;) {
		struct watch_snap *s;
		enum rcs_err err;

		if (watch_stop) {
			rc = CLI_INTERRUPTED;
			break;
		}
		http_resp_free(&r);
		last = NULL;
		err = http_call(&c->http, "GET", path.data, NULL, &r, errbuf, sizeof(errbuf));
		if (err == RCS_ERR_IO && ++failures < WATCH_RETRIES && polls > 0) {
			watch_sleep((double)interval);
			continue;
		}
		rc = cli_answer(c, err, errbuf, &r, NULL);
		if (rc != CLI_OK)
			break;
		failures = 0;
		polls++;
		last = r.json;
		if (n == WATCH_SAMPLES) {
			memmove(samples, samples + 1, sizeof(samples[0]) * (WATCH_SAMPLES - 1));
			n--;
		}
		s = &samples[n++];
		s->t = watch_now() - start;
		watch_read(r.json, group != NULL, s);
		if (group != NULL && polls == 1 && cli_str(r.json, "name") != NULL &&
		    cli_str(r.json, "name")[0] != '\0') {
			char clean[128];
			table_clean(clean, sizeof(clean), cli_str(r.json, "name"), 0);
			snprintf(title, sizeof(title), "group %s", clean);
		}
		if (mode == WATCH_TTY) {
			watch_draw(&tty, title, samples, n);
		} else if (!have_prev || !watch_same(&prev, s)) {
			if (mode == WATCH_NDJSON) {
				printf("%s\n", jsonu_dump(r.json, NULL));
			} else if (mode == WATCH_LINES) {
				char head[320], when[32];
				time_t now = time(NULL);
				struct tm tm;
				localtime_r(&now, &tm);
				strftime(when, sizeof(when), "%H:%M:%S", &tm);
				watch_head(samples, n, head, sizeof(head));
				watch_summary(s, summary, sizeof(summary));
				printf("%s %s  %s  %s\n", when, title, head, summary);
			}
			fflush(stdout);
		}
		prev = *s;
		have_prev = 1;
		if (watch_finished(s)) {
			rc = watch_failed(s) ? CLI_FAILED : CLI_OK;
			break;
		}
		watch_sleep((double)interval);
	}
	if (mode == WATCH_TTY)
		fputs("\033[?25h", stdout);
	if (have_prev && rc != CLI_API) {
		if (mode == WATCH_FINAL_JSON && last != NULL)
			printf("%s\n", jsonu_dump(last, NULL));
		else if (mode == WATCH_TTY || mode == WATCH_LINES) {
			watch_summary(&prev, summary, sizeof(summary));
			printf("%s: %s, %s\n", title, watch_end_word(&prev, rc == CLI_INTERRUPTED),
			       summary[0] ? summary : "no jobs");
			if (rc == CLI_FAILED && last != NULL) {
				size_t width = table_term_width();
				width = width == 0 ? 160 : width;
				if (group != NULL)
					watch_why_group(c, group, last, width);
				else
					watch_why_job(last, "  ", width);
			}
		}
	}
	fflush(stdout);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_watch(struct cli *c)
{
	char group[UUID_STR_LEN];
	int rc = cli_group_ident(c, c->pos[0], group);

	if (rc != CLI_OK)
		return rc;
	return watch_run(c, group, NULL, c->o.json ? WATCH_NDJSON : WATCH_AUTO,
			 c->o.interval > 0 ? c->o.interval : 1);
}
