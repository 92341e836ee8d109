/*
 * sandbox_launcher.c - the launcher that forks every jail child (see
 * sandbox.h), and the agent's side of talking to it.
 *
 * The launcher is a fork of the agent made by sandbox_launcher_start() while
 * the agent has one thread and has read nothing secret. It stays
 * single-threaded and small: one poll loop over
 *   - the main socket (SOCK_SEQPACKET) from the agent. Each message is a
 *     SPAWN request carrying two descriptors (SCM_RIGHTS): the child's end of
 *     its job socket (the agent talks to the child over it directly; the
 *     launcher never reads it) and the launcher's end of a fresh control
 *     channel (SOCK_SEQPACKET) for that child. A hang-up means the agent is
 *     gone or stopping: every child is killed and reaped, the launcher exits.
 *   - one control channel per child. Launcher -> agent: STARTED pid or
 *     FAILED errno, later EXITED wait-status once the child is reaped (then
 *     the launcher closes it). Agent -> launcher: KILL. The agent closing its
 *     end means it is done with the child: killed if still running, reaped
 *     without a report.
 *   - a self-pipe written by its SIGCHLD handler: children are reaped there.
 * Every message is one fixed-size struct lnch_msg: both ends are the same
 * program.
 *
 * Why only the launcher signals jail children: it is their parent and reaps
 * them in the same thread that kills them, so a pid in its table is a live
 * process or an unreaped zombie, never a recycled pid. The agent isn't the
 * parent: a kill(pid) from it could race with the launcher's waitpid.
 *
 * Lifetimes: the launcher dies with its owner (PR_SET_PDEATHSIG, with
 * getppid() checked after setting it), and each child with the launcher
 * (sandbox_child.c does the same). The agent learns of a dead launcher from
 * a hang-up (control channel or main socket) or from SIGCHLD and
 * sandbox_launcher_check(); a launcher that hung up or stopped answering is
 * marked broken and killed, so its owner always gets the SIGCHLD.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cfg.h"
#include "log.h"
#include "sandbox_int.h"
#include "sandbox_launcher.h"

#define LNCH_FD           3           /* the main socket, in the launcher */
#define LNCH_MAGIC        0x52435331u /* "RCS1" */
#define LNCH_MAX_CHILDREN 64          /* jail children at once; more are refused (EAGAIN) */
#define LNCH_MAX_FDS      4           /* descriptors read from one request (2 expected) */
#define LNCH_ANSWER_MS    5000        /* a live launcher answers in microseconds */
#define LNCH_STOP_WAIT_MS 2000        /* sandbox_launcher_stop: time to exit on its own */
#define LNCH_REAP_WAIT_MS 1000        /* sandbox_launcher_check: a killed launcher to be reaped */

enum lnch_op { LNCH_SPAWN = 1, LNCH_STARTED, LNCH_FAILED, LNCH_EXITED, LNCH_KILL };

struct lnch_msg {
	uint32_t magic;
	uint32_t op;
	int32_t pid;
	int32_t value; /* FAILED: errno; EXITED: wait status */
};

/* One message on fd without blocking; false when it didn't go out whole. */
static bool lnch_send(int fd, enum lnch_op op, pid_t pid, int value)
{
	struct lnch_msg m = {LNCH_MAGIC, (uint32_t)op, (int32_t)pid, (int32_t)value};
	ssize_t w;

	do {
		w = send(fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
	} while (w < 0 && errno == EINTR);
	return w == (ssize_t)sizeof(m);
}

/*
 * One message from fd without blocking: 1 read, 0 hang-up or garbage, -1
 * nothing yet. A peer that closed with a message of ours unread makes the
 * next recv fail ECONNRESET once, ahead of what it sent before closing (an
 * EXITED after our KILL): that is read by the retry.
 */
static int lnch_recv(int fd, struct lnch_msg *m)
{
	ssize_t got;
	bool reset = false;

	for (;;) {
		got = recv(fd, m, sizeof(*m), MSG_DONTWAIT);
		if (got >= 0 || (errno != EINTR && (errno != ECONNRESET || reset)))
			break;
		reset = reset || errno == ECONNRESET;
	}
	if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -1;
	return got == (ssize_t)sizeof(*m) && m->magic == LNCH_MAGIC ? 1 : 0;
}

/* ==== the launcher process ==== */

struct lnch_child {
	pid_t pid; /* 0: free slot */
	int ctl;   /* -1: the agent let go; reaped without a report */
};

static struct lnch_child lnch_kids[LNCH_MAX_CHILDREN];
static int lnch_sigpipe[2] = {-1, -1};
static pid_t lnch_self;

static void lnch_on_sigchld(int sig)
{
	int saved = errno;
	char one = 1;

	(void)sig;
	if (write(lnch_sigpipe[1], &one, 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
	errno = saved;
}

static struct lnch_child *lnch_find(pid_t pid)
{
	for (int i = 0; i < LNCH_MAX_CHILDREN; i++)
		if (lnch_kids[i].pid == pid)
			return &lnch_kids[i];
	return NULL;
}

/* Reaps every child that exited and reports it on its control channel. */
static void lnch_reap(void)
{
	char drain[64];
	pid_t pid;
	int status;

	while (read(lnch_sigpipe[0], drain, sizeof(drain)) > 0)
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct lnch_child *k = lnch_find(pid);

		if (k == NULL)
			continue;
		if (k->ctl >= 0) {
			lnch_send(k->ctl, LNCH_EXITED, pid, status);
			close(k->ctl);
		}
		k->pid = 0;
		k->ctl = -1;
	}
}

/* The agent said something about child k, or hung up. */
static void lnch_control(struct lnch_child *k)
{
	struct lnch_msg m;
	int got = lnch_recv(k->ctl, &m);

	if (got < 0)
		return;
	kill(k->pid, SIGKILL); /* a zombie until lnch_reap: never a recycled pid */
	if (got == 1 && m.op == LNCH_KILL)
		return;
	/* hang-up (or garbage): the agent is done with this child */
	close(k->ctl);
	k->ctl = -1;
}

/* Forks a jail child on child_fd, answering on ctl; takes both descriptors. */
static void lnch_spawn(int child_fd, int ctl)
{
	struct lnch_child *k = lnch_find(0);
	pid_t pid = -1;
	int err = EAGAIN; /* no free slot */

	if (k != NULL) {
		pid = fork();
		err = errno;
	}
	if (pid == 0)
		sandbox_child_main(child_fd, lnch_self);
	if (pid < 0) {
		lnch_send(ctl, LNCH_FAILED, 0, err);
		goto out;
	}
	k->pid = pid;
	k->ctl = ctl;
	ctl = -1; /* the slot's now */
	if (!lnch_send(k->ctl, LNCH_STARTED, pid, 0)) {
		kill(pid, SIGKILL); /* nobody waits for it: reaped without a report */
		close(k->ctl);
		k->ctl = -1;
	}
out:
	close(child_fd);
	if (ctl >= 0)
		close(ctl);
}

/* Reads one request from the main socket. false when the agent hung up. */
static bool lnch_request(void)
{
	struct lnch_msg m;
	struct iovec iov = {&m, sizeof(m)};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * LNCH_MAX_FDS)];
	} cm;
	struct msghdr mh;
	int fds[LNCH_MAX_FDS];
	size_t nfds = 0;
	ssize_t got;

	memset(&cm, 0, sizeof(cm));
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	do {
		got = recvmsg(LNCH_FD, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	} while (got < 0 && errno == EINTR);
	if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return true;
	if (got < 0)
		log_warn("sandbox launcher: recvmsg");
	if (got <= 0)
		return false;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < LNCH_MAX_FDS)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if (got != (ssize_t)sizeof(m) || m.magic != LNCH_MAGIC || m.op != LNCH_SPAWN || nfds != 2 ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
		log_warnx("sandbox launcher: malformed request ignored");
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		return true;
	}
	lnch_spawn(fds[0], fds[1]);
	return true;
}

/* The agent is gone or stopping: no child outlives the launcher. */
static _Noreturn void lnch_shutdown(void)
{
	for (int i = 0; i < LNCH_MAX_CHILDREN; i++)
		if (lnch_kids[i].pid > 0)
			kill(lnch_kids[i].pid, SIGKILL);
	for (int i = 0; i < LNCH_MAX_CHILDREN; i++) {
		if (lnch_kids[i].pid <= 0)
			continue;
		while (waitpid(lnch_kids[i].pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	_exit(0); /* not exit(): nothing of the agent's is flushed or freed twice */
}

static _Noreturn void lnch_loop(void)
{
	for (;;) {
		struct pollfd pf[2 + LNCH_MAX_CHILDREN];
		int slot[2 + LNCH_MAX_CHILDREN];
		nfds_t n = 2;

		memset(pf, 0, sizeof(pf));
		pf[0].fd = lnch_sigpipe[0];
		pf[0].events = POLLIN;
		pf[1].fd = LNCH_FD;
		pf[1].events = POLLIN;
		for (int i = 0; i < LNCH_MAX_CHILDREN; i++) {
			if (lnch_kids[i].pid > 0 && lnch_kids[i].ctl >= 0) {
				pf[n].fd = lnch_kids[i].ctl;
				pf[n].events = POLLIN;
				slot[n++] = i;
			}
		}
		if (poll(pf, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_warn("sandbox launcher: poll");
			break;
		}
		if (pf[0].revents != 0)
			lnch_reap();
		for (nfds_t i = 2; i < n; i++)
			if (pf[i].revents != 0 && lnch_kids[slot[i]].ctl == pf[i].fd)
				lnch_control(&lnch_kids[slot[i]]);
		if (pf[1].revents != 0 && !lnch_request())
			break;
	}
	lnch_shutdown();
}

/* Wipes the launcher's copy of the command line (a --mqtt-password) and of the
 * secrets the agent takes from its environment, and names it. */
static void lnch_wipe_args(int argc, char **argv)
{
	static const char *const secret_env[] = {"RCS_MQTT_PASSWORD", "RCS_MQTT_KEY_PASSPHRASE"};
	size_t len0 = argc > 0 && argv != NULL && argv[0] != NULL ? strlen(argv[0]) : 0;

	for (size_t i = 0; i < sizeof(secret_env) / sizeof(secret_env[0]); i++)
		cfg_take_env_secret(secret_env[i], NULL);
	for (int i = 0; argv != NULL && i < argc; i++)
		if (argv[i] != NULL)
			memset(argv[i], 0, strlen(argv[i]));
	if (len0 > 0)
		snprintf(argv[0], len0 + 1, "rcs-launcher");
	prctl(PR_SET_NAME, "rcs-launcher", 0, 0, 0);
}

static _Noreturn void lnch_main(int sock, pid_t owner, int argc, char **argv)
{
	struct sigaction sa;
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != owner)
		_exit(0); /* the owner died before the line above */
	lnch_self = getpid();
	lnch_wipe_args(argc, argv);
	if (sock != LNCH_FD && dup2(sock, LNCH_FD) != LNCH_FD)
		_exit(1);
	sandbox_close_from(LNCH_FD + 1);
	if (pipe2(lnch_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0)
		_exit(1);
	for (int i = 0; i < LNCH_MAX_CHILDREN; i++)
		lnch_kids[i].ctl = -1;
	/* the owner decides when to stop (and may have left SIGCHLD ignored) */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = lnch_on_sigchld;
	sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	lnch_loop();
}

/* ==== the owner's side (the agent, any thread) ==== */

static struct {
	pthread_mutex_t lock;
	pid_t owner;  /* the process that started the launcher; 0: none */
	pid_t pid;    /* the launcher; -1 once reaped */
	int fd;       /* the owner's end of the main socket */
	bool broken;  /* died, hung up or stopped answering: never asked again */
	bool by_exit; /* why is to be replaced by its exit status once reaped */
	char why[96]; /* what happened to it */
} lnch = {PTHREAD_MUTEX_INITIALIZER, 0, -1, -1, false, false, ""};

static void lnch_status_text(int status, char *out, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(out, len, "was killed by signal %d", WTERMSIG(status));
	else if (WIFEXITED(status))
		snprintf(out, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(out, len, "ended with wait status %d", status);
}

/* Reaps the launcher if it exited (WNOHANG) or once it does (0). Locked. */
static bool lnch_reap_locked(int flags)
{
	int status = 0;
	pid_t w;

	if (lnch.pid <= 0)
		return true;
	do {
		w = waitpid(lnch.pid, &status, flags);
	} while (w < 0 && errno == EINTR);
	if (w == 0)
		return false;
	if (w < 0) /* not our child after all: someone reaped it */
		snprintf(lnch.why, sizeof(lnch.why), "is gone");
	else if (!lnch.broken || lnch.by_exit)
		lnch_status_text(status, lnch.why, sizeof(lnch.why));
	lnch.pid = -1;
	lnch.broken = true;
	return true;
}

/* Marks the launcher broken and kills it (the owner gets its SIGCHLD). Locked. */
static void lnch_break_locked(const char *why, bool by_exit)
{
	if (lnch.owner != getpid() || lnch.broken)
		return;
	lnch.broken = true;
	lnch.by_exit = by_exit;
	snprintf(lnch.why, sizeof(lnch.why), "%s", why);
	if (lnch.pid > 0) /* not reaped yet (only done under this lock): still our child */
		kill(lnch.pid, SIGKILL);
}

static void lnch_break(const char *why, bool by_exit)
{
	pthread_mutex_lock(&lnch.lock);
	lnch_break_locked(why, by_exit);
	pthread_mutex_unlock(&lnch.lock);
}

void sandbox_launcher_broken(const char *why)
{
	log_warnx("sandbox launcher %s: killing it", why);
	lnch_break(why, false);
}

/* Stops and reaps this process's launcher; forgets one inherited from a parent. Locked. */
static void lnch_stop_locked(void)
{
	int64_t until;

	if (lnch.owner != getpid()) {
		if (lnch.fd >= 0)
			close(lnch.fd); /* our copy of the parent's socket */
		goto reset;
	}
	if (lnch.fd >= 0)
		close(lnch.fd); /* the launcher's cue to kill its children and exit */
	until = sandbox_now_ms() + LNCH_STOP_WAIT_MS;
	while (!lnch_reap_locked(WNOHANG) && sandbox_now_ms() < until)
		poll(NULL, 0, 5);
	if (lnch.pid > 0) {
		kill(lnch.pid, SIGKILL);
		lnch_reap_locked(0);
	}
reset:
	lnch.owner = 0;
	lnch.pid = -1;
	lnch.fd = -1;
	lnch.broken = false;
	lnch.by_exit = false;
	lnch.why[0] = '\0';
}

enum rcs_err sandbox_launcher_start(int argc, char **argv)
{
	int sv[2] = {-1, -1};
	pid_t owner = getpid(), pid;
	enum rcs_err err = RCS_OK;

	pthread_mutex_lock(&lnch.lock);
	if (lnch.owner == owner && lnch.pid > 0 && !lnch.broken) {
		err = RCS_ERR_EXISTS;
		goto out;
	}
	lnch_stop_locked();
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		log_warn("sandbox launcher: socketpair");
		err = RCS_ERR_IO;
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		log_warn("sandbox launcher: fork");
		err = RCS_ERR_IO;
		goto out;
	}
	if (pid == 0) {
		close(sv[0]);
		lnch_main(sv[1], owner, argc, argv);
	}
	lnch.owner = owner;
	lnch.pid = pid;
	lnch.fd = sv[0];
	sv[0] = -1;
	log_debug("sandbox launcher %ld started", (long)pid);
out:
	pthread_mutex_unlock(&lnch.lock);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	return err;
}

enum rcs_err sandbox_launcher_check(char *why, size_t len)
{
	enum rcs_err err = RCS_OK;

	pthread_mutex_lock(&lnch.lock);
	if (lnch.owner != getpid() || lnch.fd < 0) {
		snprintf(why, len, "was not started");
		err = RCS_ERR_NOTFOUND;
		goto out;
	}
	lnch_reap_locked(WNOHANG);
	if (lnch.broken && lnch.pid > 0) {
		/* it was killed (lnch_break_locked) or its end closed as it exited: it is a
		 * zombie in a moment, and its wait status says more than "died" */
		int64_t until = sandbox_now_ms() + LNCH_REAP_WAIT_MS;

		while (!lnch_reap_locked(WNOHANG) && sandbox_now_ms() < until)
			poll(NULL, 0, 2);
	}
	if (lnch.broken) {
		snprintf(why, len, "%s", lnch.why);
		err = RCS_ERR_IO;
	}
out:
	pthread_mutex_unlock(&lnch.lock);
	return err;
}

void sandbox_launcher_stop(void)
{
	pthread_mutex_lock(&lnch.lock);
	lnch_stop_locked();
	pthread_mutex_unlock(&lnch.lock);
}

/* Sends the SPAWN request with its two descriptors. Locked. */
static bool lnch_request_spawn(int child_fd, int ctl)
{
	struct lnch_msg m = {LNCH_MAGIC, LNCH_SPAWN, 0, 0};
	struct iovec iov = {&m, sizeof(m)};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * 2)];
	} cm;
	struct msghdr mh;
	struct cmsghdr *c;
	int fds[2] = {child_fd, ctl};
	ssize_t w;

	memset(&cm, 0, sizeof(cm));
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	do {
		w = sendmsg(lnch.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	} while (w < 0 && errno == EINTR);
	return w == (ssize_t)sizeof(m);
}

enum rcs_err sandbox_launcher_spawn(int child_fd, struct sbx_spawn *s, char *why, size_t len)
{
	struct lnch_msg m;
	int cv[2] = {-1, -1};
	int64_t until;
	int got = -1, saved = 0;
	bool sent = false;
	enum rcs_err err = RCS_ERR_IO;

	memset(s, 0, sizeof(*s));
	s->pid = -1;
	s->ctl = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, cv) != 0) {
		snprintf(why, len, "socketpair: %s", strerror(errno));
		goto out;
	}
	pthread_mutex_lock(&lnch.lock);
	if (lnch.owner != getpid() || lnch.fd < 0) {
		snprintf(why, len, "no sandbox launcher was started");
	} else if (lnch.broken) {
		snprintf(why, len, "the sandbox launcher died");
	} else {
		sent = lnch_request_spawn(child_fd, cv[1]);
		saved = errno;
		if (!sent && saved == EAGAIN)
			snprintf(why, len, "the sandbox launcher is busy");
		else if (!sent) /* EPIPE, ECONNRESET: its end is closed */
			lnch_break_locked("died", true);
		if (!sent && saved != EAGAIN)
			snprintf(why, len, "the sandbox launcher died");
	}
	pthread_mutex_unlock(&lnch.lock);
	if (!sent)
		goto out;
	close(cv[1]); /* the launcher has its own copies now */
	cv[1] = -1;
	s->ctl = cv[0];
	cv[0] = -1;
	until = sandbox_now_ms() + LNCH_ANSWER_MS;
	while (got < 0 && sandbox_now_ms() < until) {
		struct pollfd p = {.fd = s->ctl, .events = POLLIN};
		int64_t left = until - sandbox_now_ms();

		if (poll(&p, 1, left > 0 ? (int)left : 0) > 0)
			got = lnch_recv(s->ctl, &m);
	}
	if (got == 1 && m.op == LNCH_STARTED && m.pid > 0) {
		s->pid = m.pid;
		err = RCS_OK;
		goto out;
	}
	if (got == 1 && m.op == LNCH_FAILED) {
		snprintf(why, len, "cannot fork: %s", strerror(m.value));
	} else if (got < 0) {
		snprintf(why, len, "the sandbox launcher did not answer");
		sandbox_launcher_broken("did not answer");
	} else {
		snprintf(why, len, "the sandbox launcher died");
		lnch_break("died", true);
	}
	close(s->ctl);
	s->ctl = -1;
out:
	close(child_fd);
	if (cv[0] >= 0)
		close(cv[0]);
	if (cv[1] >= 0)
		close(cv[1]);
	return err;
}

void sandbox_launcher_read(struct sbx_spawn *s)
{
	struct lnch_msg m;
	int got;

	if (s->ctl < 0 || s->exited || s->lost)
		return;
	got = lnch_recv(s->ctl, &m);
	if (got < 0)
		return;
	if (got == 1 && m.op == LNCH_EXITED && m.pid == s->pid) {
		s->exited = true;
		s->status = m.value;
		return;
	}
	s->lost = true; /* it hung up without the exit: it died (its children with it) */
	lnch_break("died", true);
}

bool sandbox_launcher_wait(struct sbx_spawn *s, int ms)
{
	int64_t until = sandbox_now_ms() + ms;

	while (s->ctl >= 0 && !s->exited && !s->lost) {
		struct pollfd p = {.fd = s->ctl, .events = POLLIN};
		int64_t left = until - sandbox_now_ms();
		int rc;

		if (left <= 0)
			break;
		rc = poll(&p, 1, (int)left);
		if (rc < 0 && errno != EINTR)
			break;
		if (rc > 0)
			sandbox_launcher_read(s);
	}
	return s->exited;
}

void sandbox_launcher_kill(struct sbx_spawn *s)
{
	if (s->ctl < 0 || s->exited || s->lost)
		return;
	/* refused once the launcher closed the channel: its EXITED may be waiting */
	if (!lnch_send(s->ctl, LNCH_KILL, s->pid, 0))
		sandbox_launcher_read(s);
}

void sandbox_launcher_release(struct sbx_spawn *s)
{
	if (s->ctl >= 0)
		close(s->ctl);
	s->ctl = -1;
}
