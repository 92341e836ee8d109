/*
 * jobtrace.so: an LD_PRELOAD probe for the agent benchmarks (tests/bench/bench_agents.py,
 * tests/bench/bench_footprint.py). Test tooling only, not the product; the agent is not
 * changed and does not know about it.
 *
 * The agent's reports carry whole seconds and its log milliseconds, too coarse for a
 * per-job overhead of a few milliseconds. This probe timestamps (CLOCK_MONOTONIC, ns, the
 * clock Python's time.monotonic() reads) the calls the agent makes into its shared
 * libraries, and measures its sandbox children exactly:
 *
 *   recv     paho hands the agent an envelope (the wrapped messageArrived callback)
 *   report   the agent hands paho a status report (MQTTAsync_sendMessage on .../status;
 *            the report is in the journal by then)
 *   fork     the jail forks (fork(): time of the call and of its return in the parent)
 *   child    in the child, written to a shared page (the jail closes every descriptor):
 *            the fork returned; seccomp_load() is called (= signals, rlimits, Lua state
 *            and the rcs API are set up); seccomp_load() returned; _exit() is called
 *   reap     waitpid() on the child, done as wait4(): the child's peak RSS (ru_maxrss,
 *            the kernel's VmHWM at its exit, in kB) and its CPU time
 *
 * The fork and the reap may happen in another process than the agent's main one (an agent
 * that forks its jails from a launcher process): the lines come from whichever process
 * made the call, into the same file.
 *
 * Set RCS_JOBTRACE=FILE; one line per event is appended to it:
 *   recv <ns> <job>
 *   report <ns> <job> <status>
 *   reap <ns> <pid> <fork_call_ns> <fork_ret_ns> <child_start_ns> <lua_ready_ns>
 *        <seccomp_done_ns> <child_exit_ns> <maxrss_kb> <utime_us> <stime_us> <status>
 * (a child time is 0 when the child did not get there, e.g. killed after its result).
 * Cost: a clock read and one write(2) per event, a few microseconds per job.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <MQTTAsync.h>
#include <seccomp.h>

struct child_times {
	volatile pid_t pid;
	volatile int64_t start, lua_ready, seccomp_done, exit;
};

static int trace_fd = -1;
static char trace_path[4096];
static dev_t trace_dev;
static ino_t trace_ino;
static struct child_times *shm;
static int64_t fork_call, fork_ret;
static pid_t (*real_fork)(void);
static int (*real_seccomp_load)(const scmp_filter_ctx);
static void (*real_exit)(int) __attribute__((noreturn));
static int (*real_set_callbacks)(MQTTAsync, void *, MQTTAsync_connectionLost *,
				 MQTTAsync_messageArrived *, MQTTAsync_deliveryComplete *);
static int (*real_send_message)(MQTTAsync, const char *, const MQTTAsync_message *,
				MQTTAsync_responseOptions *);
static MQTTAsync_messageArrived *agent_ma;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * The descriptor may have been closed behind our back (a process forked from the agent
 * that closes what it does not know, e.g. a jail launcher) and its number reused for
 * something else: write only to the file it was opened on, or open that again.
 */
static bool trace_ok(void)
{
	struct stat sb;
	int fd;

	if (trace_fd < 0)
		return false;
	if (fstat(trace_fd, &sb) == 0 && sb.st_dev == trace_dev && sb.st_ino == trace_ino)
		return true;
	fd = open(trace_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return false;
	trace_fd = fd; /* the old number is not ours any more: never closed */
	return true;
}

static void emit(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!trace_ok())
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < sizeof(line)) {
		ssize_t w = write(trace_fd, line, (size_t)n);
		(void)w;
	}
}

__attribute__((constructor)) static void jobtrace_init(void)
{
	const char *path = getenv("RCS_JOBTRACE");

	*(void **)&real_fork = dlsym(RTLD_NEXT, "fork");
	*(void **)&real_seccomp_load = dlsym(RTLD_NEXT, "seccomp_load");
	*(void **)&real_exit = dlsym(RTLD_NEXT, "_exit");
	*(void **)&real_set_callbacks = dlsym(RTLD_NEXT, "MQTTAsync_setCallbacks");
	*(void **)&real_send_message = dlsym(RTLD_NEXT, "MQTTAsync_sendMessage");
	if (path == NULL || *path == '\0')
		return;
	snprintf(trace_path, sizeof(trace_path), "%s", path);
	trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (trace_fd >= 0) {
		struct stat sb;
		if (fstat(trace_fd, &sb) == 0) {
			trace_dev = sb.st_dev;
			trace_ino = sb.st_ino;
		} else {
			close(trace_fd);
			trace_fd = -1;
		}
	}
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		shm = NULL;
}

/* the job ident: the path segment after ".../jobs/" */
static void job_of(const char *topic, char *out, size_t n)
{
	const char *p = strstr(topic, "/jobs/");
	size_t k = 0;

	out[0] = '\0';
	if (p == NULL)
		return;
	p += 6;
	while (p[k] && p[k] != '/' && k + 1 < n)
		k++;
	memcpy(out, p, k);
	out[k] = '\0';
}

static int wrapped_ma(void *context, char *topic, int topic_len, MQTTAsync_message *m)
{
	int64_t t = now_ns();
	char job[64];
	size_t len = strlen(topic);

	if (len < 7 || strcmp(topic + len - 7, "/cancel") != 0) {
		job_of(topic, job, sizeof(job));
		if (job[0])
			emit("recv %lld %s\n", (long long)t, job);
	}
	return agent_ma(context, topic, topic_len, m);
}

int MQTTAsync_setCallbacks(MQTTAsync handle, void *context, MQTTAsync_connectionLost *cl,
			   MQTTAsync_messageArrived *ma, MQTTAsync_deliveryComplete *dc)
{
	if (real_set_callbacks == NULL)
		return -1;
	if (ma != NULL && trace_fd >= 0) {
		agent_ma = ma;
		ma = wrapped_ma;
	}
	return real_set_callbacks(handle, context, cl, ma, dc);
}

int MQTTAsync_sendMessage(MQTTAsync handle, const char *dest, const MQTTAsync_message *msg,
			  MQTTAsync_responseOptions *response)
{
	size_t len = dest ? strlen(dest) : 0;

	if (trace_fd >= 0 && len > 7 && strcmp(dest + len - 7, "/status") == 0 && msg &&
	    msg->payload && msg->payloadlen > 0) {
		const char *p = msg->payload, *end = p + msg->payloadlen;
		const char *s = memmem(p, (size_t)msg->payloadlen, "\"status\"", 8);
		char job[64], status[32] = "?";

		if (s != NULL)
			s = memchr(s + 8, '"', (size_t)(end - s - 8));
		if (s != NULL) {
			size_t k = 0;
			s++;
			while (s + k < end && s[k] != '"' && k + 1 < sizeof(status))
				k++;
			memcpy(status, s, k);
			status[k] = '\0';
		}
		job_of(dest, job, sizeof(job));
		emit("report %lld %s %s\n", (long long)now_ns(), job, status);
	}
	return real_send_message(handle, dest, msg, response);
}

pid_t fork(void)
{
	int64_t t = now_ns();
	pid_t pid;

	if (shm != NULL)
		memset((void *)shm, 0, sizeof(*shm));
	pid = real_fork();
	if (pid == 0) {
		if (shm != NULL)
			shm->start = now_ns();
		return 0;
	}
	if (pid > 0 && shm != NULL) {
		fork_call = t;
		fork_ret = now_ns();
		shm->pid = pid;
	}
	return pid;
}

int seccomp_load(const scmp_filter_ctx ctx)
{
	int rc;

	if (shm != NULL && shm->start != 0 && shm->lua_ready == 0)
		shm->lua_ready = now_ns();
	rc = real_seccomp_load(ctx);
	if (shm != NULL && shm->start != 0 && shm->seccomp_done == 0)
		shm->seccomp_done = now_ns();
	return rc;
}

void _exit(int status)
{
	if (shm != NULL && shm->start != 0 && shm->exit == 0)
		shm->exit = now_ns();
	real_exit(status);
	for (;;)
		;
}

pid_t waitpid(pid_t pid, int *status, int options)
{
	struct rusage ru;
	int st = 0;
	pid_t got;

	memset(&ru, 0, sizeof(ru));
	got = wait4(pid, &st, options, &ru);
	if (status)
		*status = st;
	if (got > 0 && shm != NULL && got == shm->pid) {
		emit("reap %lld %d %lld %lld %lld %lld %lld %lld %ld %lld %lld %d\n",
		     (long long)now_ns(), (int)got, (long long)fork_call, (long long)fork_ret,
		     (long long)shm->start, (long long)shm->lua_ready, (long long)shm->seccomp_done,
		     (long long)shm->exit, ru.ru_maxrss,
		     (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
		     (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec, st);
		shm->pid = 0;
	}
	return got;
}
