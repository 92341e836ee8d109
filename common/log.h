/*
 * log.h - one logging module for both daemons (OpenBSD style).
 *
 * Lines go to stderr as "<time> <prog>[pid]: <level>: <func>: message". When
 * stderr is the journal (systemd's JOURNAL_STREAM names it), each line is
 * "<N><level>: <func>: message" instead: N is its syslog priority (3 error,
 * 4 warning, 6 info, 7 debug), read by journald, which records the time and
 * the pid itself (docs/deploy.md, "Logs"). log_warn() appends
 * strerror(errno); the *x variants don't. fatal()/fatalx() log and exit(1).
 */
#ifndef RCS_LOG_H
#define RCS_LOG_H

#include <stdbool.h>

enum log_level { LOG_LVL_ERR = 0, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

/* prog is kept by pointer (pass a literal). Finds out whether stderr is the journal. */
void log_init(const char *prog, enum log_level level);
/*
 * True when stderr is the journal: $JOURNAL_STREAM ("device:inode") names
 * the file stderr is open on. Read again by each call (tests set it).
 */
bool log_stderr_is_journal(void);
void log_set_level(enum log_level level);
bool log_enabled(enum log_level level);

void log_msg(enum log_level level, const char *func, int with_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn void log_fatal(const char *func, int with_errno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_warn(...)  log_msg(LOG_LVL_WARN, __func__, 1, __VA_ARGS__)
#define log_warnx(...) log_msg(LOG_LVL_WARN, __func__, 0, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LVL_ERR, __func__, 0, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __func__, 0, __VA_ARGS__)
#define log_debug(...)                                                                             \
	do {                                                                                       \
		if (log_enabled(LOG_LVL_DEBUG))                                                    \
			log_msg(LOG_LVL_DEBUG, __func__, 0, __VA_ARGS__);                          \
	} while (0)
#define fatal(...)  log_fatal(__func__, 1, __VA_ARGS__)
#define fatalx(...) log_fatal(__func__, 0, __VA_ARGS__)

#endif
