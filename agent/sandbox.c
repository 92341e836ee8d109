/*
 * sandbox.c - the agent side of the script jail (see sandbox.h): config, the
 * job message, the watchdog loop and the host services the child asks for
 * over its socket. The wire format both sides use is sandbox_wire.c's.
 *
 * Size: over 1,000 lines on purpose: everything here works on one run's state
 * (struct sbx_run, private to this file) and answers through its reply and
 * violation paths (run_reply, run_violation, run_finish); the host services
 * (rcs.exec, rcs.file, rcs.config) are each a few handlers of that one loop.
 * Cutting them out would make struct sbx_run and those paths an interface
 * of their own, with each new file able to put a run in states only the loop
 * should; kept whole, the jail's parent side can be read, and audited, in one
 * place.
 *
 * One run is a struct sbx_run on sandbox_run()'s stack. The launcher forks
 * the child (sandbox_launcher.c); the agent sends it SBX_JOB over the job
 * socket, then the loop polls that socket, cancel_fd and the launcher's
 * control channel against a CLOCK_MONOTONIC deadline; each complete frame
 * from the child is checked (size, fields, order) and answered. Anything
 * malformed ends the job as a sandbox violation: the child is killed (by the
 * launcher, on request), never trusted further.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jsonu.h"
#include "log.h"
#include "sandbox.h"
#include "sandbox_int.h"

#define SBX_KILL_GRACE_MS 250  /* after the deadline, for the child's own timeout report */
#define SBX_REAP_WAIT_MS  2000 /* a child that hung up gets this long to exit */
#define SBX_KILL_WAIT_MS  5000 /* the launcher reports a killed child's exit within this */
#define SBX_EXEC_STEP_MS  20   /* how often a running command is checked for exit */
#define SBX_EXEC_DRAIN    64   /* reads of what is left in the pipe after the exit */
#define SBX_SOURCE_MAX    ((size_t)16 << 20)
#define SBX_READ_CHUNK    16384

static const char *const sbx_exec_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LC_ALL=C",
    NULL,
};

/* ---- config ---- */

/* NAME of "NAME=/abs/path": its length, 0 when the entry is malformed. */
static size_t sbx_command_name(const char *entry)
{
	const char *eq = strchr(entry, '=');
	size_t n;

	if (eq == NULL || eq[1] != '/')
		return 0;
	n = (size_t)(eq - entry);
	if (n == 0 || n > SANDBOX_EXEC_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = entry[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return 0;
	}
	return n;
}

/* Copies in to eff with defaults for the zero fields, and checks it. */
static enum rcs_err sbx_config_effective(const struct sandbox_config *in,
					 struct sandbox_config *eff, char *errbuf, size_t errlen)
{
	*eff = *in;
	if (eff->mem_limit == 0)
		eff->mem_limit = SANDBOX_DEFAULT_MEM_LIMIT;
	if (eff->max_response == 0)
		eff->max_response = SANDBOX_DEFAULT_MAX_RESPONSE;
	if (eff->exec_timeout == 0)
		eff->exec_timeout = SANDBOX_DEFAULT_EXEC_TIMEOUT;
	if (eff->exec_max_output == 0)
		eff->exec_max_output = SANDBOX_DEFAULT_EXEC_MAX_OUTPUT;
	if (eff->mem_limit < SANDBOX_MIN_MEM_LIMIT || eff->mem_limit > SANDBOX_MAX_MEM_LIMIT) {
		snprintf(errbuf, errlen, "mem_limit must be between %zu and %zu bytes",
			 SANDBOX_MIN_MEM_LIMIT, SANDBOX_MAX_MEM_LIMIT);
		return RCS_ERR_INVAL;
	}
	if (eff->max_response > SANDBOX_MAX_RESPONSE_MAX) {
		snprintf(errbuf, errlen, "max_response must be at most %zu bytes",
			 SANDBOX_MAX_RESPONSE_MAX);
		return RCS_ERR_INVAL;
	}
	if (eff->exec_timeout < 1 || eff->exec_timeout > SANDBOX_MAX_EXEC_TIMEOUT) {
		snprintf(errbuf, errlen, "exec_timeout must be between 1 and %d seconds",
			 SANDBOX_MAX_EXEC_TIMEOUT);
		return RCS_ERR_INVAL;
	}
	if (eff->exec_max_output > SANDBOX_MAX_EXEC_OUTPUT) {
		snprintf(errbuf, errlen, "exec_max_output must be at most %zu bytes",
			 SANDBOX_MAX_EXEC_OUTPUT);
		return RCS_ERR_INVAL;
	}
	for (size_t i = 0; eff->allow_command && i < eff->allow_command->n; i++) {
		const char *e = eff->allow_command->items[i];
		size_t n = sbx_command_name(e);

		if (n == 0) {
			snprintf(errbuf, errlen,
				 "allow_command '%.200s': expected NAME=/absolute/path"
				 " (NAME of letters, digits, '_', '.', '-', at most %d)",
				 e, SANDBOX_EXEC_NAME_MAX);
			return RCS_ERR_INVAL;
		}
		for (size_t j = 0; j < i; j++) {
			const char *o = eff->allow_command->items[j];

			if (sbx_command_name(o) == n && memcmp(o, e, n) == 0) {
				snprintf(errbuf, errlen, "allow_command '%.*s' given twice", (int)n,
					 e);
				return RCS_ERR_INVAL;
			}
		}
	}
	for (size_t i = 0; eff->file_dir && i < eff->file_dir->n; i++) {
		if (eff->file_dir->items[i][0] != '/') {
			snprintf(errbuf, errlen, "file_dir '%.200s' is not an absolute path",
				 eff->file_dir->items[i]);
			return RCS_ERR_INVAL;
		}
	}
	return RCS_OK;
}

enum rcs_err sandbox_config_check(const struct sandbox_config *cfg, char *errbuf, size_t errlen)
{
	struct sandbox_config eff;

	return sbx_config_effective(cfg, &eff, errbuf, errlen);
}

void sandbox_result_free(struct sandbox_result *r)
{
	if (r == NULL)
		return;
	free(r->response);
	memset(r, 0, sizeof(*r));
}

/* ---- one run ---- */

struct sbx_run {
	struct sandbox_config cfg; /* effective */
	const struct sandbox_host *host;
	const struct sandbox_job *job;
	const char *ident;
	long long timeout;
	struct sbx_spawn sp; /* the child, through the launcher */
	int fd;
	int cancel_fd;
	int64_t deadline_ms, kill_at_ms;
	size_t rx_max; /* largest frame body from the child */
	size_t tx_max; /* largest frame body to the child */

	unsigned char hdr[SBX_FRAME_HDR];
	size_t hdr_got;
	char *body;
	size_t body_len, body_got;

	struct buf out; /* SBX_JOB, then replies, not yet written */
	size_t out_off;
	bool job_sent; /* SBX_JOB is out: out holds replies from now on */

	bool hello, eof, done;
	const char *cause; /* of the outcome (run_finish) */
	bool sleeping;
	int64_t sleep_until;
	int64_t progress_last; /* -1: none yet */
	bool progress_pending;
	struct buf progress;
	unsigned log_lines;

	enum sandbox_outcome outcome;
	struct buf reason;
	char *response; /* SANDBOX_OK, NULL for nil */
	bool reboot;
	char resume[SANDBOX_PHASE_MAX + 1]; /* rcs.reboot{resume = ...}, "" when not asked */
	long long within;
};

static void run_finish(struct sbx_run *r, enum sandbox_outcome outcome, const char *cause,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Sets the outcome, its cause (docs/mqtt.md, a report's `error`; NULL for SANDBOX_OK) and
 * reason (the first one wins), and ends the loop. */
static void run_finish(struct sbx_run *r, enum sandbox_outcome outcome, const char *cause,
		       const char *fmt, ...)
{
	va_list ap;
	char tmp[SANDBOX_REASON_MAX + 64];

	if (r->done)
		return;
	r->done = true;
	r->outcome = outcome;
	r->cause = cause;
	buf_reset(&r->reason);
	if (fmt == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	buf_appendf(&r->reason, "%s", tmp);
}

static void run_violation(struct sbx_run *r, const char *what)
{
	log_warnx("job %s: sandbox violation: %s", r->ident, what);
	run_finish(r, SANDBOX_ERROR, "sandbox_violation", "sandbox violation: %s", what);
}

/*
 * Appends text from the child to out as one line: at most max bytes, control
 * characters as spaces, invalid UTF-8 as '?', "..." when cut.
 */
static void run_sanitize(struct buf *out, const char *s, size_t n, size_t max)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		size_t j = i, k;
		uint32_t cp;

		k = text_utf8_next(u, n, &j, &cp) ? j - i : 0;

		if (i + (k ? k : 1) > max)
			break;
		if (k == 0 || (k == 1 && (u[i] < 0x20 || u[i] == 0x7f))) {
			buf_append(out, k == 0 ? "?" : " ", 1);
			i++;
		} else {
			buf_append(out, s + i, k);
			i += k;
		}
	}
	if (i < n)
		buf_append(out, "...", 3);
}

static void run_reply(struct sbx_run *r, uint8_t op, size_t nf, const char *const *f,
		      const size_t *fl)
{
	if (sandbox_wire_encode(&r->out, op, nf, f, fl) != RCS_OK)
		run_finish(r, SANDBOX_ERROR, "script_error",
			   "sandbox: reply too large for the child");
}

static void run_reply_err(struct sbx_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void run_reply_err(struct sbx_run *r, const char *fmt, ...)
{
	char msg[512];
	const char *f = msg;
	size_t fl;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fl = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
	run_reply(r, SBX_REPLY_ERR, 1, &f, &fl);
}

static void run_reply_ok(struct sbx_run *r)
{
	run_reply(r, SBX_REPLY_OK, 0, NULL, NULL);
}

/* A field as a C string, refusing NUL bytes and more than max bytes. */
static bool run_cstr(const struct sbx_msg *m, size_t i, size_t max, char *out, size_t outlen)
{
	if (m->flen[i] > max || m->flen[i] >= outlen || memchr(m->f[i], '\0', m->flen[i]) != NULL)
		return false;
	memcpy(out, m->f[i], m->flen[i]);
	out[m->flen[i]] = '\0';
	return true;
}

/* Text for the host: NUL-free UTF-8 of at most SANDBOX_TEXT_MAX bytes. */
static bool run_text(const struct sbx_msg *m, size_t i, char *out, size_t outlen)
{
	return run_cstr(m, i, SANDBOX_TEXT_MAX, out, outlen) &&
	       text_utf8_valid(m->f[i], m->flen[i]);
}

static void run_progress_deliver(struct sbx_run *r, int64_t now)
{
	r->progress_pending = false;
	r->progress_last = now;
	if (r->host && r->host->progress)
		r->host->progress(r->host->ctx, r->progress.data ? r->progress.data : "");
}

static void run_progress(struct sbx_run *r, const struct sbx_msg *m)
{
	char text[SANDBOX_TEXT_MAX + 1];
	int64_t now = sandbox_now_ms();

	if (m->nfields != 1)
		return run_violation(r, "progress: bad fields");
	if (!run_text(m, 0, text, sizeof(text)))
		return run_reply_err(r,
				     "rcs.progress: text must be UTF-8 without NUL, at most %d"
				     " bytes",
				     SANDBOX_TEXT_MAX);
	buf_reset(&r->progress);
	buf_append(&r->progress, text, strlen(text));
	r->progress_pending = true;
	if (r->progress_last < 0 || now - r->progress_last >= 1000)
		run_progress_deliver(r, now);
	run_reply_ok(r);
}

static void run_log(struct sbx_run *r, const struct sbx_msg *m)
{
	static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
	char level[8], text[SANDBOX_TEXT_MAX + 1];
	const char *lv = NULL;

	if (m->nfields != 2)
		return run_violation(r, "log: bad fields");
	if (run_cstr(m, 0, sizeof(level) - 1, level, sizeof(level)))
		for (size_t i = 0; levels[i] != NULL; i++)
			if (strcmp(level, levels[i]) == 0)
				lv = levels[i];
	if (lv == NULL)
		return run_reply_err(r, "rcs.log: level must be debug, info, warn or error");
	if (!run_text(m, 1, text, sizeof(text)))
		return run_reply_err(r, "rcs.log: text must be UTF-8 without NUL, at most %d bytes",
				     SANDBOX_TEXT_MAX);
	r->log_lines++;
	if (r->host && r->host->log) {
		if (r->log_lines <= SANDBOX_LOG_MAX_LINES)
			r->host->log(r->host->ctx, lv, text);
		else if (r->log_lines == SANDBOX_LOG_MAX_LINES + 1)
			r->host->log(r->host->ctx, "warn",
				     "more than 1000 log lines: the rest of"
				     " this job's lines are dropped");
	}
	run_reply_ok(r);
}

/* Config keys: 1..SANDBOX_CONFIG_KEY_MAX bytes of UTF-8 without control characters. */
static bool run_config_key(const struct sbx_msg *m, char *key, size_t keylen)
{
	if (m->flen[0] == 0 || !run_cstr(m, 0, SANDBOX_CONFIG_KEY_MAX, key, keylen) ||
	    !text_utf8_valid(key, m->flen[0]))
		return false;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

static void run_config_get(struct sbx_run *r, const struct sbx_msg *m)
{
	char key[SANDBOX_CONFIG_KEY_MAX + 1];
	char *value = NULL;
	const char *f;
	size_t fl;
	enum rcs_err err;

	if (m->nfields != 1)
		return run_violation(r, "config.get: bad fields");
	if (!run_config_key(m, key, sizeof(key)))
		return run_reply_err(r, "rcs.config.get: key must be 1 to %d bytes of text",
				     SANDBOX_CONFIG_KEY_MAX);
	if (r->host == NULL || r->host->config_get == NULL)
		return run_reply_err(r, "rcs.config is not available on this device");
	err = r->host->config_get(r->host->ctx, key, &value);
	if (err == RCS_ERR_NOTFOUND) {
		run_reply(r, SBX_REPLY_OK, 0, NULL, NULL);
	} else if (err != RCS_OK || value == NULL) {
		run_reply_err(r, "rcs.config.get: %s",
			      rcs_strerror(err != RCS_OK ? err : RCS_ERR_INTERNAL));
	} else if (strlen(value) > SANDBOX_CONFIG_VALUE_MAX) {
		run_reply_err(r, "rcs.config.get: the value of '%s' is longer than %d bytes", key,
			      SANDBOX_CONFIG_VALUE_MAX);
	} else {
		f = value;
		fl = strlen(value);
		run_reply(r, SBX_REPLY_OK, 1, &f, &fl);
	}
	free(value);
}

static void run_config_set(struct sbx_run *r, const struct sbx_msg *m)
{
	char key[SANDBOX_CONFIG_KEY_MAX + 1];
	char *value = NULL;
	enum rcs_err err;

	if (m->nfields != 2)
		return run_violation(r, "config.set: bad fields");
	if (!run_config_key(m, key, sizeof(key)))
		return run_reply_err(r, "rcs.config.set: key must be 1 to %d bytes of text",
				     SANDBOX_CONFIG_KEY_MAX);
	if (m->flen[1] > SANDBOX_CONFIG_VALUE_MAX || memchr(m->f[1], '\0', m->flen[1]) ||
	    !text_utf8_valid(m->f[1], m->flen[1]))
		return run_reply_err(r,
				     "rcs.config.set: value must be UTF-8 without NUL, at most"
				     " %d bytes",
				     SANDBOX_CONFIG_VALUE_MAX);
	if (r->host == NULL || r->host->config_set == NULL)
		return run_reply_err(r, "rcs.config is not available on this device");
	value = strndup(m->f[1], m->flen[1]);
	if (value == NULL)
		return run_reply_err(r, "rcs.config.set: out of memory");
	err = r->host->config_set(r->host->ctx, key, value);
	if (err != RCS_OK)
		run_reply_err(r, "rcs.config.set: %s", rcs_strerror(err));
	else
		run_reply_ok(r);
	free(value);
}

static void run_sleep(struct sbx_run *r, const struct sbx_msg *m)
{
	long long ms = 0;

	if (m->nfields != 1 || m->flen[0] == 0 || m->flen[0] > 12)
		return run_violation(r, "sleep: bad fields");
	for (size_t i = 0; i < m->flen[0]; i++) {
		if (m->f[0][i] < '0' || m->f[0][i] > '9')
			return run_violation(r, "sleep: bad duration");
		ms = ms * 10 + (m->f[0][i] - '0');
	}
	r->sleeping = true;
	r->sleep_until = sandbox_now_ms() + ms;
}

/* rcs.reboot() (no fields), or rcs.reboot{resume = phase, within = seconds}: the phase a
 * word of 1-32 a-z, 0-9, _ and within in range (the child checked them; so does the agent). */
static void run_reboot(struct sbx_run *r, const struct sbx_msg *m)
{
	char phase[SANDBOX_PHASE_MAX + 1], within[16];
	long long w = 0;

	if (m->nfields == 0) {
		r->reboot = true;
		return run_reply_ok(r);
	}
	if (m->nfields != 2 || !run_cstr(m, 0, SANDBOX_PHASE_MAX, phase, sizeof(phase)) ||
	    phase[0] == '\0' ||
	    strspn(phase, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(phase) ||
	    !run_cstr(m, 1, 6, within, sizeof(within)) || within[0] == '\0' ||
	    strspn(within, "0123456789") != strlen(within) ||
	    (w = strtoll(within, NULL, 10)) < SANDBOX_WITHIN_MIN || w > SANDBOX_WITHIN_MAX)
		return run_violation(r, "reboot: bad fields");
	memcpy(r->resume, phase, sizeof(r->resume));
	r->within = w;
	run_reply_ok(r);
}

/* rcs.state.get(key) -> OK [type, value] or OK [] */
static void run_state_get(struct sbx_run *r, const struct sbx_msg *m)
{
	char key[SANDBOX_STATE_KEY_MAX + 1];
	char type = 0, *value = NULL;
	enum rcs_err err;

	if (m->nfields != 1)
		return run_violation(r, "state.get: bad fields");
	if (!run_cstr(m, 0, SANDBOX_STATE_KEY_MAX, key, sizeof(key)))
		return run_reply_err(r, "rcs.state.get: key must be 1 to %d bytes of text",
				     SANDBOX_STATE_KEY_MAX);
	if (r->host == NULL || r->host->state_get == NULL)
		return run_reply_err(r, "rcs.state is not available on this device");
	err = r->host->state_get(r->host->ctx, key, &type, &value);
	if (err == RCS_ERR_NOTFOUND) {
		run_reply(r, SBX_REPLY_OK, 0, NULL, NULL);
	} else if (err != RCS_OK) {
		run_reply_err(r, "rcs.state.get: %s", rcs_strerror(err));
	} else {
		const char *f[2] = {&type, value};
		size_t fl[2] = {1, strlen(value)};
		run_reply(r, SBX_REPLY_OK, 2, f, fl);
	}
	free(value);
}

/* rcs.state.set(key, value) -> OK [], journaled by the host before the reply */
static void run_state_set(struct sbx_run *r, const struct sbx_msg *m)
{
	char key[SANDBOX_STATE_KEY_MAX + 1], why[256] = "";
	char *value = NULL;
	char type = 0;
	enum rcs_err err;

	if (m->nfields != 1 && m->nfields != 3)
		return run_violation(r, "state.set: bad fields");
	if (m->nfields == 3 && (m->flen[1] != 1 || m->flen[2] > SANDBOX_STATE_VALUE_MAX))
		return run_violation(r, "state.set: bad value");
	if (!run_cstr(m, 0, SANDBOX_STATE_KEY_MAX, key, sizeof(key)))
		return run_reply_err(r, "rcs.state.set: key must be 1 to %d bytes of text",
				     SANDBOX_STATE_KEY_MAX);
	if (r->host == NULL || r->host->state_set == NULL)
		return run_reply_err(r, "rcs.state is not available on this device");
	if (m->nfields == 3) {
		type = m->f[1][0];
		if ((value = malloc(m->flen[2] + 1)) == NULL)
			return run_reply_err(r, "rcs.state.set: out of memory");
		memcpy(value, m->f[2], m->flen[2]);
		value[m->flen[2]] = '\0';
	}
	err = r->host->state_set(r->host->ctx, key, type, value, m->nfields == 3 ? m->flen[2] : 0,
				 why, sizeof(why));
	if (err != RCS_OK)
		run_reply_err(r, "%s", why[0] ? why : rcs_strerror(err));
	else
		run_reply_ok(r);
	free(value);
}

/* ---- rcs.exec ---- */

enum run_wait { RUN_WAIT_DONE, RUN_WAIT_CANCELLED, RUN_WAIT_DEADLINE };

static bool run_cancelled(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (fd < 0)
		return false;
	return poll(&p, 1, timeout_ms) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* waitpid that retries on EINTR; false when pid is not (or no longer) ours. */
static bool run_waitpid(pid_t pid, int *status, int flags)
{
	pid_t w;

	do {
		w = waitpid(pid, status, flags);
	} while (w < 0 && errno == EINTR);
	return w == pid;
}

/* The allowlisted path of command name, or NULL. */
static const char *run_command(const struct sbx_run *r, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; r->cfg.allow_command && i < r->cfg.allow_command->n; i++) {
		const char *e = r->cfg.allow_command->items[i];

		if (sbx_command_name(e) == n && memcmp(e, name, n) == 0)
			return e + n + 1;
	}
	return NULL;
}

/* Reads what the command wrote to its pipe fd into output (what exceeds output's ceiling is
 * dropped: *truncated). While it runs, one read and back to the deadline checks; once it
 * exited, what is left in the pipe, at most *drain reads more (a process it left behind may
 * keep writing). True at the pipe's end. */
static bool run_exec_read(int fd, struct buf *output, bool exited, int *drain, bool *truncated)
{
	for (;;) {
		char tmp[SBX_READ_CHUNK];
		ssize_t got;
		size_t keep;

		if (exited && (*drain)-- <= 0)
			return true; /* a process it left behind keeps writing */
		got = read(fd, tmp, sizeof(tmp));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == EAGAIN)
			return exited;
		if (got <= 0)
			return true;
		keep = output->max - output->len;
		if ((size_t)got < keep)
			keep = (size_t)got;
		if (keep < (size_t)got)
			*truncated = true;
		if (keep > 0)
			buf_append(output, tmp, keep);
		if (!exited)
			return false; /* back to the deadline checks */
	}
}

/* rcs.exec's answer: the exit code (128 + the signal's number when a signal ended it), the
 * output, the signal, whether it timed out, whether the output was cut. */
static void run_exec_reply(struct sbx_run *r, int status, const struct buf *output, bool timed_out,
			   bool truncated)
{
	char code[16], sig[16];
	const char *f[5];
	size_t fl[5];

	snprintf(code, sizeof(code), "%d",
		 WIFEXITED(status)     ? WEXITSTATUS(status)
		 : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
				       : -1);
	snprintf(sig, sizeof(sig), "%d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	f[0] = code;
	f[1] = output->data ? output->data : "";
	f[2] = sig;
	f[3] = timed_out ? "1" : "0";
	f[4] = truncated ? "1" : "0";
	for (int i = 0; i < 5; i++)
		fl[i] = i == 1 ? output->len : strlen(f[i]);
	run_reply(r, SBX_REPLY_OK, 5, f, fl);
}

/*
 * Runs path with argv (no shell, minimal environment, stdin /dev/null,
 * stdout+stderr into one pipe, its own process group, cwd the first
 * file_dir), keeping at most exec_max_output bytes, killing the group at
 * exec_timeout. Watches cancel_fd and the job's deadline meanwhile.
 */
static enum run_wait run_spawn(struct sbx_run *r, const char *name, const char *path, char **argv)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t all, none;
	int p[2] = {-1, -1};
	pid_t pid = -1;
	int rc, status = 0;
	bool exited = false, out_eof = false, timed_out = false, truncated = false;
	bool fa_ok = false, attr_ok = false;
	int drain = SBX_EXEC_DRAIN; /* reads left once the command exited */
	struct buf output;
	int64_t exec_deadline = sandbox_now_ms() + r->cfg.exec_timeout * 1000;
	const char *cwd =
	    r->cfg.file_dir && r->cfg.file_dir->n > 0 ? r->cfg.file_dir->items[0] : "/";
	enum run_wait ret = RUN_WAIT_DONE;

	buf_init(&output, r->cfg.exec_max_output);
	/* posix_spawn reports exec failures on glibc, not everywhere (nor under valgrind) */
	if (access(path, X_OK) != 0) {
		run_reply_err(r, "rcs.exec: %s: cannot run %s: %s", name, path, strerror(errno));
		goto out;
	}
	if (pipe2(p, O_CLOEXEC) != 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) != 0) {
		run_reply_err(r, "rcs.exec: %s: pipe: %s", name, strerror(errno));
		goto out;
	}
	fa_ok = posix_spawn_file_actions_init(&fa) == 0;
	attr_ok = posix_spawnattr_init(&attr) == 0;
	sigfillset(&all);
	sigemptyset(&none);
	if (!fa_ok || !attr_ok ||
	    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) != 0 ||
	    posix_spawn_file_actions_adddup2(&fa, p[1], 1) != 0 ||
	    posix_spawn_file_actions_adddup2(&fa, p[1], 2) != 0 ||
	    posix_spawn_file_actions_addclosefrom_np(&fa, 3) != 0 ||
	    posix_spawn_file_actions_addchdir_np(&fa, cwd) != 0 ||
	    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
						POSIX_SPAWN_SETSIGDEF) != 0 ||
	    posix_spawnattr_setpgroup(&attr, 0) != 0 ||
	    posix_spawnattr_setsigmask(&attr, &none) != 0 ||
	    posix_spawnattr_setsigdefault(&attr, &all) != 0) {
		run_reply_err(r, "rcs.exec: %s: cannot prepare the command", name);
		goto out;
	}
	rc = posix_spawn(&pid, path, &fa, &attr, argv, (char *const *)sbx_exec_env);
	if (rc != 0) {
		pid = -1;
		run_reply_err(r, "rcs.exec: %s: cannot run %s (in %s): %s", name, path, cwd,
			      strerror(rc));
		goto out;
	}
	close(p[1]);
	p[1] = -1;

	while (!exited || !out_eof) {
		struct pollfd pf[2];
		nfds_t n = 0;
		int64_t now = sandbox_now_ms();

		memset(pf, 0, sizeof(pf));
		if (!exited && run_waitpid(pid, &status, WNOHANG))
			exited = true;
		if (now >= r->kill_at_ms) {
			ret = RUN_WAIT_DEADLINE;
			break;
		}
		if (!exited && now >= exec_deadline) {
			timed_out = true;
			kill(-pid, SIGKILL);
			run_waitpid(pid, &status, 0);
			exited = true;
		}
		if (!out_eof) {
			pf[n].fd = p[0];
			pf[n++].events = POLLIN;
		}
		if (r->cancel_fd >= 0) {
			pf[n].fd = r->cancel_fd;
			pf[n++].events = POLLIN;
		}
		/* once the command exited, take what's in the pipe and stop: a
		   daemon it left behind may hold the pipe open forever */
		if (poll(pf, n, exited ? 0 : SBX_EXEC_STEP_MS) < 0 && errno != EINTR)
			break;
		if (r->cancel_fd >= 0 && (pf[n - 1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ret = RUN_WAIT_CANCELLED;
			break;
		}
		if (!out_eof)
			out_eof = run_exec_read(p[0], &output, exited, &drain, &truncated);
	}
	if (ret != RUN_WAIT_DONE)
		goto out;
	run_exec_reply(r, status, &output, timed_out, truncated);
	pid = -1; /* reaped */
out:
	if (pid > 0 && !exited) {
		kill(-pid, SIGKILL);
		run_waitpid(pid, &status, 0);
	} else if (pid > 0 && ret != RUN_WAIT_DONE) {
		kill(-pid, SIGKILL); /* what's left of its group */
	}
	if (attr_ok)
		posix_spawnattr_destroy(&attr);
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	if (p[0] >= 0)
		close(p[0]);
	if (p[1] >= 0)
		close(p[1]);
	buf_free(&output);
	return ret;
}

static enum run_wait run_exec(struct sbx_run *r, const struct sbx_msg *m)
{
	char name[SANDBOX_EXEC_NAME_MAX + 1];
	char **argv = NULL;
	const char *path;
	size_t nargs;
	enum run_wait ret = RUN_WAIT_DONE;

	if (m->nfields < 1 || m->nfields - 1 > SANDBOX_EXEC_MAX_ARGS) {
		run_violation(r, "exec: bad fields");
		goto out;
	}
	if (!run_cstr(m, 0, SANDBOX_EXEC_NAME_MAX, name, sizeof(name))) {
		run_reply_err(r, "rcs.exec: bad command name");
		goto out;
	}
	path = run_command(r, name);
	if (path == NULL) {
		run_reply_err(r, "rcs.exec: command '%s' is not allowed on this device", name);
		goto out;
	}
	nargs = m->nfields - 1;
	argv = calloc(nargs + 2, sizeof(*argv));
	if (argv == NULL) {
		run_reply_err(r, "rcs.exec: out of memory");
		goto out;
	}
	argv[0] = strdup(path);
	for (size_t i = 0; argv[0] != NULL && i < nargs; i++) {
		if (m->flen[i + 1] > SANDBOX_EXEC_ARG_MAX ||
		    memchr(m->f[i + 1], '\0', m->flen[i + 1]) != NULL) {
			run_reply_err(r,
				      "rcs.exec: argument #%zu must be text without NUL, at most"
				      " %d bytes",
				      i + 2, SANDBOX_EXEC_ARG_MAX);
			goto out;
		}
		argv[i + 1] = strndup(m->f[i + 1], m->flen[i + 1]);
		if (argv[i + 1] == NULL)
			break;
	}
	if (argv[0] == NULL || (nargs > 0 && argv[nargs] == NULL)) {
		run_reply_err(r, "rcs.exec: out of memory");
		goto out;
	}
	ret = run_spawn(r, name, path, argv);
out:
	for (size_t i = 0; argv != NULL && argv[i] != NULL; i++)
		free(argv[i]);
	free(argv);
	return ret;
}

/* rcs.rollback: the agent's rollback_command, run as rcs.exec runs a command (its answer
 * too); none configured: a Lua error. */
static enum run_wait run_rollback(struct sbx_run *r, const struct sbx_msg *m)
{
	char *argv[2];

	if (m->nfields != 0) {
		run_violation(r, "rollback: bad fields");
		return RUN_WAIT_DONE;
	}
	if (r->cfg.rollback_command == NULL) {
		run_reply_err(r, "rcs.rollback: no rollback_command is configured on this device");
		return RUN_WAIT_DONE;
	}
	log_info("job %s: rolling back: %s", r->ident, r->cfg.rollback_command);
	argv[0] = (char *)r->cfg.rollback_command;
	argv[1] = NULL;
	return run_spawn(r, "rollback", r->cfg.rollback_command, argv);
}

/* ---- rcs.file ---- */

/*
 * Checks a script's path: relative, 1..SANDBOX_PATH_MAX bytes, no NUL, no
 * empty, "." or ".." component. Copies it to out.
 */
static bool run_path(const struct sbx_msg *m, size_t i, char *out, size_t outlen)
{
	const char *c;

	if (m->flen[i] == 0 || !run_cstr(m, i, SANDBOX_PATH_MAX, out, outlen) || out[0] == '/')
		return false;
	for (c = out;;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);

		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (slash == NULL)
			return true;
		c = slash + 1;
	}
}

/*
 * Opens the directory holding path's last component under base, following
 * no symbolic link below base (O_NOFOLLOW on every component). *last points
 * into path (which is modified). -1 with errno on failure.
 */
static int run_open_parent(const char *base, char *path, const char **last)
{
	int dfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *c = path;

	while (dfd >= 0) {
		char *slash = strchr(c, '/');
		struct stat st;
		int nfd, saved;

		if (slash == NULL) {
			*last = c;
			return dfd;
		}
		*slash = '\0';
		nfd = openat(dfd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		saved = errno;
		if (nfd < 0 && (saved == ENOTDIR || saved == ELOOP) &&
		    fstatat(dfd, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
			saved = ELOOP; /* say why: a symlink, not a file */
		*slash = '/';
		close(dfd);
		errno = saved;
		dfd = nfd;
		c = slash + 1;
	}
	return -1;
}

static const char *run_file_strerror(int err)
{
	if (err == ELOOP)
		return "symbolic links are not followed";
	if (err == ENOTDIR)
		return "not a directory (or a symbolic link)";
	return strerror(err);
}

static void run_file_read(struct sbx_run *r, const struct sbx_msg *m)
{
	char path[SANDBOX_PATH_MAX + 1], work[SANDBOX_PATH_MAX + 1];
	const char *last, *f;
	struct buf data;
	struct stat st;
	int dfd = -1, fd = -1, err = ENOENT;
	size_t fl;

	buf_init(&data, SANDBOX_FILE_MAX);
	if (m->nfields != 1) {
		run_violation(r, "file.read: bad fields");
		goto out;
	}
	if (!run_path(m, 0, path, sizeof(path))) {
		run_reply_err(r, "rcs.file.read: the path must be relative, without '.', '..' or"
				 " empty components");
		goto out;
	}
	if (r->cfg.file_dir == NULL || r->cfg.file_dir->n == 0) {
		run_reply_err(r, "rcs.file: no file_dir is configured on this device");
		goto out;
	}
	/* the first configured directory that has it */
	for (size_t i = 0; i < r->cfg.file_dir->n && fd < 0; i++) {
		memcpy(work, path, sizeof(work));
		dfd = run_open_parent(r->cfg.file_dir->items[i], work, &last);
		if (dfd >= 0) {
			fd = openat(dfd, last,
				    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
			err = errno;
			close(dfd);
			dfd = -1;
		} else {
			err = errno;
		}
		if (fd < 0 && err != ENOENT)
			break;
	}
	if (fd < 0) {
		run_reply_err(r, "rcs.file.read: %s: %s", path, run_file_strerror(err));
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		run_reply_err(r, "rcs.file.read: %s: not a regular file", path);
		goto out;
	}
	for (;;) {
		char tmp[SBX_READ_CHUNK];
		ssize_t got = read(fd, tmp, sizeof(tmp));

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			run_reply_err(r, "rcs.file.read: %s: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		if (buf_append(&data, tmp, (size_t)got) != RCS_OK) {
			run_reply_err(r, "rcs.file.read: %s: larger than %d bytes", path,
				      SANDBOX_FILE_MAX);
			goto out;
		}
	}
	f = data.data ? data.data : "";
	fl = data.len;
	run_reply(r, SBX_REPLY_OK, 1, &f, &fl);
out:
	if (fd >= 0)
		close(fd);
	buf_free(&data);
}

/* Writes data to dfd/tmp, then renames it over dfd/last (atomic replace). */
static int run_write_atomic(int dfd, const char *last, const char *data, size_t len)
{
	char tmp[64];
	static unsigned counter;
	struct stat st;
	mode_t mode = 0644;
	int fd = -1, err = 0;
	size_t off = 0;

	if (fstatat(dfd, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISLNK(st.st_mode))
			return ELOOP;
		if (!S_ISREG(st.st_mode))
			return EISDIR;
		mode = st.st_mode & 0777;
	} else if (errno != ENOENT) {
		return errno;
	}
	snprintf(tmp, sizeof(tmp), ".rcs-write.%ld.%u", (long)getpid(),
		 __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return errno;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : EIO;
			goto out;
		}
		off += (size_t)w;
	}
	if (fsync(fd) != 0) {
		err = errno;
		goto out;
	}
	if (close(fd) != 0) {
		fd = -1;
		err = errno;
		goto out;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, last) != 0)
		err = errno;
out:
	if (fd >= 0)
		close(fd);
	if (err != 0)
		unlinkat(dfd, tmp, 0);
	return err;
}

/* rcs.disk.free(path): the free bytes (for an unprivileged user) of a directory under the
 * first file_dir, or of the artifact directory for "" (docs/lua-api.md). */
static void run_disk_free(struct sbx_run *r, const struct sbx_msg *m)
{
	char path[SANDBOX_PATH_MAX + 1], num[32];
	const char *last, *f = num;
	struct statvfs sv;
	size_t fl;
	int dfd = -1, fd = -1;

	if (m->nfields != 1) {
		run_violation(r, "disk.free: bad fields");
		goto out;
	}
	if (m->flen[0] == 0) {
		if (r->cfg.artifact_dir == NULL) {
			run_reply_err(r, "rcs.disk.free: no artifact directory on this device");
			goto out;
		}
		fd = open(r->cfg.artifact_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else if (!run_path(m, 0, path, sizeof(path))) {
		run_reply_err(r, "rcs.disk.free: the path must be relative, without '.', '..' or"
				 " empty components");
		goto out;
	} else if (r->cfg.file_dir == NULL || r->cfg.file_dir->n == 0) {
		run_reply_err(r, "rcs.file: no file_dir is configured on this device");
		goto out;
	} else {
		dfd = run_open_parent(r->cfg.file_dir->items[0], path, &last);
		if (dfd >= 0)
			fd = openat(dfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0 || fstatvfs(fd, &sv) != 0) {
		run_reply_err(r, "rcs.disk.free: %s: %s", m->flen[0] ? path : "(artifacts)",
			      run_file_strerror(errno));
		goto out;
	}
	fl = (size_t)snprintf(num, sizeof(num), "%llu",
			      (unsigned long long)sv.f_bavail * (unsigned long long)sv.f_frsize);
	run_reply(r, SBX_REPLY_OK, 1, &f, &fl);
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
}

static void run_file_write(struct sbx_run *r, const struct sbx_msg *m)
{
	char path[SANDBOX_PATH_MAX + 1], work[SANDBOX_PATH_MAX + 1];
	const char *last = NULL;
	int dfd = -1, err = ENOENT;

	if (m->nfields != 2 || m->flen[1] > SANDBOX_FILE_MAX) {
		run_violation(r, "file.write: bad fields");
		goto out;
	}
	if (!run_path(m, 0, path, sizeof(path))) {
		run_reply_err(r, "rcs.file.write: the path must be relative, without '.', '..' or"
				 " empty components");
		goto out;
	}
	if (r->cfg.file_dir == NULL || r->cfg.file_dir->n == 0) {
		run_reply_err(r, "rcs.file: no file_dir is configured on this device");
		goto out;
	}
	/* the first configured directory where the path's directory exists */
	for (size_t i = 0; i < r->cfg.file_dir->n && dfd < 0; i++) {
		memcpy(work, path, sizeof(work));
		dfd = run_open_parent(r->cfg.file_dir->items[i], work, &last);
		err = dfd < 0 ? errno : 0;
		if (dfd < 0 && err != ENOENT)
			break;
	}
	if (dfd < 0) {
		run_reply_err(r, "rcs.file.write: %s: %s", path, run_file_strerror(err));
		goto out;
	}
	err = run_write_atomic(dfd, last, m->f[1], m->flen[1]);
	if (err != 0)
		run_reply_err(r, "rcs.file.write: %s: %s", path,
			      err == EISDIR ? "not a regular file" : run_file_strerror(err));
	else
		run_reply_ok(r);
out:
	if (dfd >= 0)
		close(dfd);
}

/* ---- the result ---- */

/* rcs.fail(code, text) and rcs.rollback: the job ends edge_error with that code as its cause,
 * one of sandbox_fail_codes (the child checked it; so does the agent). */
static void run_fail(struct sbx_run *r, const struct sbx_msg *m, const char *text)
{
	for (size_t i = 0; sandbox_fail_codes[i]; i++) {
		if (strlen(sandbox_fail_codes[i]) == m->flen[1] &&
		    memcmp(sandbox_fail_codes[i], m->f[1], m->flen[1]) == 0) {
			run_finish(r, SANDBOX_ERROR, sandbox_fail_codes[i], "%s", text);
			return;
		}
	}
	run_violation(r, "result: unknown failure code");
}

static void run_result(struct sbx_run *r, const struct sbx_msg *m)
{
	struct buf text;
	long kind = -1;

	buf_init(&text, SANDBOX_REASON_MAX + 64);
	if (m->nfields < 1 || m->nfields > 3 || m->flen[0] == 0 || m->flen[0] > 2) {
		run_violation(r, "result: bad fields");
		goto out;
	}
	kind = 0;
	for (size_t i = 0; i < m->flen[0]; i++) {
		if (m->f[0][i] < '0' || m->f[0][i] > '9') {
			run_violation(r, "result: bad kind");
			goto out;
		}
		kind = kind * 10 + (m->f[0][i] - '0');
	}
	if ((m->nfields == 3) != (kind == SBX_RES_FAIL)) {
		run_violation(r, "result: bad fields");
		goto out;
	}
	if (m->nfields >= 2)
		run_sanitize(&text, m->f[m->nfields - 1], m->flen[m->nfields - 1],
			     SANDBOX_REASON_MAX);
	switch (kind) {
	case SBX_RES_OK:
		if (m->nfields != 2) {
			run_violation(r, "result: no text");
		} else if (m->flen[1] > r->cfg.max_response) {
			run_finish(r, SANDBOX_ERROR, "script_error", "response too large");
		} else if (memchr(m->f[1], '\0', m->flen[1]) != NULL ||
			   !text_utf8_valid(m->f[1], m->flen[1])) {
			run_finish(r, SANDBOX_ERROR, "script_error",
				   "bad response: not NUL-free UTF-8 text");
		} else {
			r->response = strndup(m->f[1], m->flen[1]);
			if (r->response == NULL)
				run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
					   "agent out of memory for the response");
			else
				run_finish(r, SANDBOX_OK, NULL, NULL);
		}
		break;
	case SBX_RES_NIL:
		run_finish(r, SANDBOX_OK, NULL, NULL);
		break;
	case SBX_RES_SCRIPT:
		run_finish(r, SANDBOX_ERROR, "script_error", "script error: %s",
			   text.data ? text.data : "");
		break;
	case SBX_RES_BADRESP:
		run_finish(r, SANDBOX_ERROR, "script_error", "bad response: %s",
			   text.data ? text.data : "");
		break;
	case SBX_RES_TOOBIG:
		run_finish(r, SANDBOX_ERROR, "script_error", "response too large");
		break;
	case SBX_RES_MEMORY:
		run_finish(r, SANDBOX_ERROR, "memory_limit", "memory limit exceeded");
		break;
	case SBX_RES_TIMEOUT:
		run_finish(r, SANDBOX_TIMEOUT, "timeout", "timeout after %lld s", r->timeout);
		break;
	case SBX_RES_NOSECCOMP:
		run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
			   "sandbox unavailable: seccomp refused");
		break;
	case SBX_RES_FAIL:
		run_fail(r, m, text.data ? text.data : "");
		break;
	case SBX_RES_SETUP:
		log_warnx("job %s: sandbox setup failed: %s", r->ident, text.data ? text.data : "");
		run_finish(r, SANDBOX_ERROR, "sandbox_unavailable", "sandbox setup failed: %s",
			   text.data ? text.data : "");
		break;
	default:
		run_violation(r, "result: unknown kind");
		break;
	}
out:
	buf_free(&text);
}

/* ---- the loop ---- */

static enum run_wait run_frame(struct sbx_run *r, const char *body, size_t len)
{
	struct sbx_msg m;

	if (sandbox_wire_decode(body, len, &m) != RCS_OK) {
		run_violation(r, "malformed message");
		return RUN_WAIT_DONE;
	}
	if (r->out.len > r->out_off || r->sleeping) {
		run_violation(r, "request before the previous reply");
		return RUN_WAIT_DONE;
	}
	if (!r->hello && m.op != SBX_HELLO && m.op != SBX_RESULT) {
		run_violation(r, "request before HELLO");
		return RUN_WAIT_DONE;
	}
	switch (m.op) {
	case SBX_HELLO:
		if (r->hello || m.nfields != 1 || m.flen[0] != 1 ||
		    (m.f[0][0] != '0' && m.f[0][0] != '1')) {
			run_violation(r, "bad HELLO");
			break;
		}
		r->hello = true;
		if (m.f[0][0] == '0') {
			if (!r->cfg.allow_no_seccomp) {
				run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
					   "sandbox unavailable: seccomp refused");
				break;
			}
			log_warnx("job %s: the script runs without its seccomp filter"
				  " (allow_no_seccomp)",
				  r->ident);
		}
		if (r->host && r->host->started)
			r->host->started(r->host->ctx);
		break;
	case SBX_PROGRESS:
		run_progress(r, &m);
		break;
	case SBX_LOG:
		run_log(r, &m);
		break;
	case SBX_CONFIG_GET:
		run_config_get(r, &m);
		break;
	case SBX_CONFIG_SET:
		run_config_set(r, &m);
		break;
	case SBX_EXEC:
		return run_exec(r, &m);
	case SBX_SLEEP:
		run_sleep(r, &m);
		break;
	case SBX_FILE_READ:
		run_file_read(r, &m);
		break;
	case SBX_FILE_WRITE:
		run_file_write(r, &m);
		break;
	case SBX_REBOOT:
		run_reboot(r, &m);
		break;
	case SBX_DISK_FREE:
		run_disk_free(r, &m);
		break;
	case SBX_ROLLBACK:
		return run_rollback(r, &m);
	case SBX_STATE_GET:
		run_state_get(r, &m);
		break;
	case SBX_STATE_SET:
		run_state_set(r, &m);
		break;
	case SBX_RESULT:
		run_result(r, &m);
		break;
	default:
		run_violation(r, "unexpected message");
		break;
	}
	return RUN_WAIT_DONE;
}

/* Feeds bytes from the child to the frame assembler, handling each complete frame. */
static enum run_wait run_feed(struct sbx_run *r, const char *p, size_t n)
{
	enum run_wait w = RUN_WAIT_DONE;

	while (n > 0 && !r->done && w == RUN_WAIT_DONE) {
		size_t take;

		if (r->hdr_got < SBX_FRAME_HDR) {
			take = SBX_FRAME_HDR - r->hdr_got < n ? SBX_FRAME_HDR - r->hdr_got : n;
			memcpy(r->hdr + r->hdr_got, p, take);
			r->hdr_got += take;
			p += take;
			n -= take;
			if (r->hdr_got < SBX_FRAME_HDR)
				break;
			r->body_len = sandbox_wire_len(r->hdr);
			r->body_got = 0;
			if (r->body_len < 2 || r->body_len > r->rx_max) {
				char what[64];

				snprintf(what, sizeof(what), "message of %zu bytes", r->body_len);
				run_violation(r, what);
				break;
			}
			free(r->body);
			r->body = malloc(r->body_len);
			if (r->body == NULL) {
				run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
					   "agent out of memory");
				break;
			}
			continue;
		}
		take = r->body_len - r->body_got < n ? r->body_len - r->body_got : n;
		memcpy(r->body + r->body_got, p, take);
		r->body_got += take;
		p += take;
		n -= take;
		if (r->body_got == r->body_len) {
			w = run_frame(r, r->body, r->body_len);
			r->hdr_got = 0;
		}
	}
	return w;
}

static void run_flush(struct sbx_run *r)
{
	while (r->out_off < r->out.len) {
		ssize_t w = send(r->fd, r->out.data + r->out_off, r->out.len - r->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (w <= 0) {
			r->eof = true; /* the child is gone; its exit status tells why */
			return;
		}
		r->out_off += (size_t)w;
	}
	r->out_off = 0;
	if (r->job_sent) {
		buf_reset(&r->out);
		return;
	}
	/* SBX_JOB is out: its megabytes go, replies get their own ceiling */
	r->job_sent = true;
	buf_free(&r->out);
	buf_init(&r->out, r->tx_max + SBX_FRAME_HDR);
}

static void run_loop(struct sbx_run *r)
{
	while (!r->done && !r->eof) {
		struct pollfd pf[3];
		nfds_t n = 0, icancel = 0, ictl = 0;
		int64_t now = sandbox_now_ms(), wake = r->kill_at_ms;
		int rc;

		memset(pf, 0, sizeof(pf));
		if (now >= r->kill_at_ms) {
			run_finish(r, SANDBOX_TIMEOUT, "timeout", "timeout after %lld s",
				   r->timeout);
			break;
		}
		if (r->sleeping && now >= r->sleep_until) {
			r->sleeping = false;
			run_reply_ok(r);
		}
		if (r->sleeping && r->sleep_until < wake)
			wake = r->sleep_until;
		if (r->progress_pending && now - r->progress_last >= 1000)
			run_progress_deliver(r, now);
		if (r->progress_pending && r->progress_last + 1000 < wake)
			wake = r->progress_last + 1000;
		if (r->out.len > r->out_off)
			run_flush(r);

		pf[n].fd = r->fd;
		pf[n++].events = (short)(POLLIN | (r->out.len > r->out_off ? POLLOUT : 0));
		if (r->cancel_fd >= 0) {
			icancel = n;
			pf[n].fd = r->cancel_fd;
			pf[n++].events = POLLIN;
		}
		/* the launcher: the child's exit (read on), or its own death */
		if (!r->sp.exited && !r->sp.lost) {
			ictl = n;
			pf[n].fd = r->sp.ctl;
			pf[n++].events = POLLIN;
		}
		rc = poll(pf, n,
			  (int)(wake - now < 1       ? 1
				: wake - now > 60000 ? 60000
						     : wake - now));
		if (rc < 0 && errno != EINTR) {
			run_finish(r, SANDBOX_ERROR, "sandbox_unavailable", "sandbox: poll: %s",
				   strerror(errno));
			break;
		}
		if (rc <= 0)
			continue;
		if (icancel > 0 && (pf[icancel].revents & (POLLIN | POLLHUP | POLLERR))) {
			run_finish(r, SANDBOX_CANCELLED, "cancelled", "cancelled");
			break;
		}
		if (ictl > 0 && pf[ictl].revents != 0) {
			sandbox_launcher_read(&r->sp);
			if (r->sp.lost) {
				run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
					   "sandbox unavailable: the sandbox launcher died");
				break;
			}
		}
		if (pf[0].revents & POLLOUT)
			run_flush(r);
		if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			char tmp[SBX_READ_CHUNK];
			ssize_t got = read(r->fd, tmp, sizeof(tmp));
			enum run_wait w;

			if (got < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (got <= 0) {
				r->eof = true;
				break;
			}
			w = run_feed(r, tmp, (size_t)got);
			if (w == RUN_WAIT_CANCELLED)
				run_finish(r, SANDBOX_CANCELLED, "cancelled", "cancelled");
			else if (w == RUN_WAIT_DEADLINE)
				run_finish(r, SANDBOX_TIMEOUT, "timeout", "timeout after %lld s",
					   r->timeout);
		}
	}
}

static const char *run_signame(int sig)
{
	switch (sig) {
	case SIGSEGV:
		return "SIGSEGV";
	case SIGBUS:
		return "SIGBUS";
	case SIGILL:
		return "SIGILL";
	case SIGFPE:
		return "SIGFPE";
	case SIGABRT:
		return "SIGABRT";
	case SIGKILL:
		return "SIGKILL";
	case SIGSYS:
		return "SIGSYS: forbidden system call";
	case SIGXFSZ:
		return "SIGXFSZ";
	case SIGPIPE:
		return "SIGPIPE";
	case SIGTERM:
		return "SIGTERM";
	default:
		return "signal";
	}
}

/*
 * Waits for the launcher to report the child's exit. After an outcome the
 * child is killed at once; a child that hung up on its own gets
 * SBX_REAP_WAIT_MS to finish exiting, and its exit status becomes the
 * outcome.
 */
static void run_reap(struct sbx_run *r)
{
	int status;

	if (!r->done)
		sandbox_launcher_wait(&r->sp, SBX_REAP_WAIT_MS);
	if (!r->sp.exited && !r->sp.lost) {
		sandbox_launcher_kill(&r->sp);
		if (!sandbox_launcher_wait(&r->sp, SBX_KILL_WAIT_MS) && !r->sp.lost)
			sandbox_launcher_broken("did not report a killed child's exit");
	}
	if (r->done)
		return;
	status = r->sp.status;
	if (!r->sp.exited)
		run_finish(r, SANDBOX_ERROR, "sandbox_unavailable",
			   "sandbox unavailable: the sandbox launcher died");
	else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
		run_finish(r, SANDBOX_TIMEOUT, "timeout", "timeout: cpu time limit exceeded");
	else if (WIFSIGNALED(status))
		run_finish(r, SANDBOX_CRASHED, "crashed", "killed by signal %d (%s)",
			   WTERMSIG(status), run_signame(WTERMSIG(status)));
	else
		run_finish(r, SANDBOX_ERROR, "crashed",
			   "the sandbox exited with status %d without a result",
			   WEXITSTATUS(status));
}

/* A JSON field of SBX_JOB: the object's text, or nothing. */
static void run_job_json(json_object *o, const char **f, size_t *fl)
{
	*f = "";
	*fl = 0;
	if (o == NULL)
		return;
	*f = jsonu_dump(o, fl);
	if (*f == NULL) {
		*f = "";
		*fl = 0;
	}
}

/* Queues SBX_JOB, the child's first message: everything it needs to know. */
static enum rcs_err run_job_message(struct sbx_run *r)
{
	const char *f[SBX_JOB_NFIELDS_];
	size_t fl[SBX_JOB_NFIELDS_];
	char num[SBX_JOB_NFIELDS_][24];
	enum rcs_err err;

	memset(num, 0, sizeof(num));
	f[SBX_JOB_SCRIPT_NAME] = r->job->script_name;
	fl[SBX_JOB_SCRIPT_NAME] = strlen(r->job->script_name);
	f[SBX_JOB_SOURCE] = r->job->source;
	fl[SBX_JOB_SOURCE] = r->job->len;
	run_job_json(r->job->variables, &f[SBX_JOB_VARIABLES], &fl[SBX_JOB_VARIABLES]);
	run_job_json(r->job->constants, &f[SBX_JOB_CONSTANTS], &fl[SBX_JOB_CONSTANTS]);
	run_job_json(r->job->job, &f[SBX_JOB_DATA], &fl[SBX_JOB_DATA]);
	run_job_json(r->job->artifacts, &f[SBX_JOB_ARTIFACTS], &fl[SBX_JOB_ARTIFACTS]);
	snprintf(num[SBX_JOB_TIMEOUT], sizeof(num[0]), "%lld", r->timeout);
	snprintf(num[SBX_JOB_DEADLINE], sizeof(num[0]), "%" PRId64, r->deadline_ms);
	snprintf(num[SBX_JOB_MEM_LIMIT], sizeof(num[0]), "%zu", r->cfg.mem_limit);
	snprintf(num[SBX_JOB_MAX_RESPONSE], sizeof(num[0]), "%zu", r->cfg.max_response);
	snprintf(num[SBX_JOB_NO_SECCOMP], sizeof(num[0]), "%d", r->cfg.allow_no_seccomp ? 1 : 0);
	snprintf(num[SBX_JOB_RX_MAX], sizeof(num[0]), "%zu", r->tx_max);
	snprintf(num[SBX_JOB_TX_MAX], sizeof(num[0]), "%zu", r->rx_max);
	for (int i = SBX_JOB_TIMEOUT; i < SBX_JOB_NFIELDS_; i++) {
		f[i] = num[i];
		fl[i] = strlen(num[i]);
	}
	r->out.max = SBX_JOB_MAX + SBX_FRAME_HDR;
	err = sandbox_wire_encode(&r->out, SBX_JOB, SBX_JOB_NFIELDS_, f, fl);
	if (err != RCS_OK)
		log_warnx("job %s: the job is too large for the sandbox (%s)", r->ident,
			  rcs_strerror(err));
	return err;
}

/* Has the launcher fork the child and serves it until an outcome; the child is reaped. */
static enum rcs_err run_child(struct sbx_run *r)
{
	int sv[2] = {-1, -1};
	char why[SANDBOX_REASON_MAX / 4];
	enum rcs_err err = RCS_OK;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		log_warn("job %s: socketpair", r->ident);
		err = RCS_ERR_IO;
		goto out;
	}
	r->deadline_ms = sandbox_now_ms() + r->timeout * 1000;
	r->kill_at_ms = r->deadline_ms + SBX_KILL_GRACE_MS;
	err = run_job_message(r);
	if (err != RCS_OK)
		goto out;
	err = sandbox_launcher_spawn(sv[1], &r->sp, why, sizeof(why));
	sv[1] = -1; /* the launcher's now (or closed) */
	if (err != RCS_OK) {
		err = RCS_OK; /* an outcome, not a caller's error */
		log_warnx("job %s: sandbox unavailable: %s", r->ident, why);
		run_finish(r, SANDBOX_ERROR, "sandbox_unavailable", "sandbox unavailable: %s", why);
		goto out;
	}
	r->fd = sv[0];
	sv[0] = -1;
	if (fcntl(r->fd, F_SETFL, O_NONBLOCK) != 0)
		run_finish(r, SANDBOX_ERROR, "sandbox_unavailable", "sandbox: fcntl: %s",
			   strerror(errno));
	run_loop(r);
	run_reap(r);
out:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	return err;
}

enum rcs_err sandbox_run(const struct sandbox_config *cfg, const struct sandbox_host *host,
			 const struct sandbox_job *job, struct sandbox_result *out)
{
	struct sbx_run r;
	char errbuf[256];
	enum rcs_err err = RCS_OK;

	memset(&r, 0, sizeof(r));
	r.sp.pid = -1;
	r.sp.ctl = -1;
	r.fd = -1;
	r.progress_last = -1;
	buf_init(&r.out, 0);
	buf_init(&r.progress, SANDBOX_TEXT_MAX);
	buf_init(&r.reason, SANDBOX_REASON_MAX + 128);
	if (out == NULL || cfg == NULL || job == NULL) {
		err = RCS_ERR_INVAL;
		goto out;
	}
	memset(out, 0, sizeof(*out));
	r.ident = job->job_ident ? job->job_ident : "-";
	err = sbx_config_effective(cfg, &r.cfg, errbuf, sizeof(errbuf));
	if (err != RCS_OK) {
		log_warnx("job %s: sandbox config: %s", r.ident, errbuf);
		goto out;
	}
	if (job->source == NULL || job->script_name == NULL ||
	    (job->cancel_fd >= 0 && fcntl(job->cancel_fd, F_GETFD) < 0)) {
		err = RCS_ERR_INVAL;
		goto out;
	}
	if (job->len > SBX_SOURCE_MAX) {
		err = RCS_ERR_TOOBIG;
		goto out;
	}
	r.host = host;
	r.job = job;
	r.cancel_fd = job->cancel_fd;
	r.timeout = job->timeout > 0 ? job->timeout : SANDBOX_DEFAULT_TIMEOUT;
	if (r.timeout > SANDBOX_MAX_TIMEOUT)
		r.timeout = SANDBOX_MAX_TIMEOUT;
	/* frame ceilings: the largest field either side may send, plus framing */
	r.rx_max = r.cfg.max_response > SANDBOX_FILE_MAX ? r.cfg.max_response : SANDBOX_FILE_MAX;
	if (r.rx_max < (size_t)SANDBOX_EXEC_MAX_ARGS * SANDBOX_EXEC_ARG_MAX)
		r.rx_max = (size_t)SANDBOX_EXEC_MAX_ARGS * SANDBOX_EXEC_ARG_MAX;
	r.rx_max += SBX_FRAME_SLACK;
	r.tx_max =
	    (r.cfg.exec_max_output > SANDBOX_FILE_MAX ? r.cfg.exec_max_output : SANDBOX_FILE_MAX) +
	    SBX_FRAME_SLACK;
	r.out.max = r.tx_max + SBX_FRAME_HDR;

	if (run_cancelled(r.cancel_fd, 0))
		run_finish(&r, SANDBOX_CANCELLED, "cancelled", "cancelled");
	else
		err = run_child(&r);
	if (err != RCS_OK)
		goto out;
	out->outcome = r.outcome;
	out->cause = r.outcome == SANDBOX_OK ? NULL : r.cause;
	out->reboot = r.reboot;
	if (r.resume[0] != '\0' && r.outcome == SANDBOX_OK) {
		memcpy(out->resume, r.resume, sizeof(out->resume));
		out->within = r.within;
	}
	if (r.outcome == SANDBOX_OK) {
		out->response = r.response;
		r.response = NULL;
	} else {
		out->response = strdup(r.reason.data ? r.reason.data : "failed");
		if (out->response == NULL) {
			err = RCS_ERR_NOMEM;
			goto out;
		}
	}
	log_debug("job %s: sandbox outcome %d%s%s", r.ident, (int)out->outcome,
		  out->outcome == SANDBOX_OK ? "" : ": ",
		  out->outcome == SANDBOX_OK ? "" : out->response);
out:
	sandbox_launcher_release(&r.sp); /* a child still running is killed and reaped */
	if (err != RCS_OK && out != NULL)
		sandbox_result_free(out);
	if (r.fd >= 0)
		close(r.fd);
	free(r.body);
	free(r.response);
	buf_free(&r.out);
	buf_free(&r.progress);
	buf_free(&r.reason);
	return err;
}
