#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "rcs";
static volatile enum log_level log_level_cur = LOG_LVL_INFO;
static bool log_journal;

static const char *const log_names[] = {"error", "warning", "info", "debug"};
/* syslog priorities of the levels, the "<N>" prefixes journald reads (sd-daemon.h's SD_ERR...) */
static const int log_prios[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};

bool log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (js == NULL || sscanf(js, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init(const char *prog, enum log_level level)
{
	log_prog = prog;
	log_level_cur = level;
	log_journal = log_stderr_is_journal();
}

void log_set_level(enum log_level level)
{
	log_level_cur = level;
}

bool log_enabled(enum log_level level)
{
	return level <= log_level_cur;
}

static void log_vmsg(enum log_level level, const char *func, int with_errno, const char *fmt,
		     va_list ap)
{
	char msg[1024];
	char head[96];
	char ts[32];
	int saved = errno;
	struct timespec now;
	struct tm tm;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (log_journal) {
		/* the journal records the time, the pid and the program's name itself */
		snprintf(head, sizeof(head), "<%d>", log_prios[level]);
	} else {
		clock_gettime(CLOCK_REALTIME, &now);
		gmtime_r(&now.tv_sec, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(head, sizeof(head), "%s.%03ldZ %s[%ld]: ", ts, now.tv_nsec / 1000000L,
			 log_prog, (long)getpid());
	}
	/* one write per line: lines of several threads never mix */
	if (with_errno)
		fprintf(stderr, "%s%s: %s: %s: %s\n", head, log_names[level], func, msg,
			strerror(saved));
	else
		fprintf(stderr, "%s%s: %s: %s\n", head, log_names[level], func, msg);
	errno = saved;
}

void log_msg(enum log_level level, const char *func, int with_errno, const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(level))
		return;
	va_start(ap, fmt);
	log_vmsg(level, func, with_errno, fmt, ap);
	va_end(ap);
}

void log_fatal(const char *func, int with_errno, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_LVL_ERR, func, with_errno, fmt, ap);
	va_end(ap);
	exit(1);
}
