#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "rcs";
static volatile enum log_level log_level_cur = LOG_LVL_INFO;

static const char *const log_names[] = {"error", "warning", "info", "debug"};

void log_init(const char *prog, enum log_level level)
{
	log_prog = prog;
	log_level_cur = level;
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
	char ts[32];
	int saved = errno;
	struct timespec now;
	struct tm tm;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	if (with_errno)
		fprintf(stderr, "%s.%03ldZ %s[%ld]: %s: %s: %s: %s\n", ts, now.tv_nsec / 1000000L,
			log_prog, (long)getpid(), log_names[level], func, msg, strerror(saved));
	else
		fprintf(stderr, "%s.%03ldZ %s[%ld]: %s: %s: %s\n", ts, now.tv_nsec / 1000000L,
			log_prog, (long)getpid(), log_names[level], func, msg);
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
