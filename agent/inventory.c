/*
 * inventory.c - the device's attributes from its inventory_command. See inventory.h.
 */
#include "inventory.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"

#define INV_TIMEOUT_MS (10 * 1000) /* a command running longer is killed */
#define INV_MAX_OUTPUT (64 * 1024) /* bytes read of its output; the rest is dropped */

static const char *const inv_env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
				      "/sbin:/bin",
				      "LANG=C", NULL};

struct inventory {
	char *path;
	inventory_cb cb;
	void *ctx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool due, stop;
	char last_why[160]; /* what the last run skipped: logged once, not at every run */
};

static void inv_skip(size_t *skipped, char *why, size_t whylen, const char *reason,
		     const char *line, size_t len)
{
	if (*skipped == 0)
		snprintf(why, whylen, "%s in line '%.*s'", reason, (int)(len > 48 ? 48 : len),
			 line);
	(*skipped)++;
}

static void inv_trim(const char **s, size_t *n)
{
	while (*n > 0 && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
		(*n)--;
}

/* The bytes of keys and values in o. */
static size_t inv_bytes(json_object *o)
{
	size_t total = 0;

	json_object_object_foreach(o, key, val)
	{
		total += strlen(key) + (size_t)json_object_get_string_len(val);
	}
	return total;
}

/* One line of the output (without its newline) into o. */
static void inv_line(json_object *o, const char *line, size_t len, size_t *skipped, char *why,
		     size_t whylen)
{
	const char *eq = memchr(line, '=', len), *k = line, *v;
	size_t kn, vn;
	char key[PROTO_MAX_ATTR_KEY + 1];
	json_object *old = NULL, *nv;

	inv_trim(&k, &len);
	if (len == 0 || k[0] == '#')
		return;
	if (eq == NULL) {
		inv_skip(skipped, why, whylen, "no '='", k, len);
		return;
	}
	kn = (size_t)(eq - k);
	v = eq + 1;
	vn = len - kn - 1;
	inv_trim(&k, &kn);
	inv_trim(&v, &vn);
	if (!proto_attr_key_valid(k, kn)) {
		inv_skip(skipped, why, whylen, "not a valid key", k, len);
		return;
	}
	if (!proto_attr_value_valid(v, vn)) {
		inv_skip(skipped, why, whylen, "not a valid value", k, len);
		return;
	}
	memcpy(key, k, kn);
	key[kn] = '\0';
	json_object_object_get_ex(o, key, &old);
	if (old == NULL && json_object_object_length(o) >= PROTO_MAX_ATTRS) {
		inv_skip(skipped, why, whylen, "more than 32 keys", k, len);
		return;
	}
	if (inv_bytes(o) - (old ? kn + (size_t)json_object_get_string_len(old) : 0) + kn + vn >
	    PROTO_MAX_ATTRS_BYTES) {
		inv_skip(skipped, why, whylen, "more than 4096 bytes", k, len);
		return;
	}
	nv = json_object_new_string_len(v, (int)vn);
	if (nv)
		json_object_object_add(o, key, nv);
}

json_object *inventory_parse(const char *text, size_t n, size_t *skipped, char *why, size_t whylen)
{
	json_object *o = json_object_new_object();
	size_t start = 0;

	*skipped = 0;
	if (whylen > 0)
		why[0] = '\0';
	if (o == NULL)
		return NULL;
	while (start < n) {
		const char *nl = memchr(text + start, '\n', n - start);
		size_t end = nl ? (size_t)(nl - text) : n;

		inv_line(o, text + start, end - start, skipped, why, whylen);
		start = end + 1;
	}
	return o;
}

static int64_t inv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the command's output from fd until its end or the deadline; false: timed out. */
static bool inv_read(int fd, char *out, size_t cap, size_t *n)
{
	int64_t deadline = inv_now_ms() + INV_TIMEOUT_MS;
	char sink[4096];

	*n = 0;
	for (;;) {
		struct pollfd pfd = {fd, POLLIN, 0};
		int64_t left = deadline - inv_now_ms();
		ssize_t got;

		if (left <= 0)
			return false;
		if (poll(&pfd, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (*n < cap)
			got = read(fd, out + *n, cap - *n);
		else
			got = read(fd, sink, sizeof(sink)); /* past the cap: dropped */
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return true;
		if (*n < cap)
			*n += (size_t)got;
	}
}

/* Runs the command; its output (NUL-terminated) in out. False when it could not run, timed
 * out or failed (the reason logged). */
static bool inv_run(struct inventory *inv, char *out, size_t cap, size_t *n)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	char *argv[2] = {inv->path, NULL};
	int p[2] = {-1, -1}, status = 0;
	pid_t pid = -1;
	bool ok = false, done;

	*n = 0;
	sigemptyset(&none);
	sigfillset(&all);
	if (pipe2(p, O_CLOEXEC) != 0) {
		log_warn("inventory command: pipe");
		return false;
	}
	if (posix_spawn_file_actions_init(&fa) != 0) {
		close(p[0]);
		close(p[1]);
		return false;
	}
	posix_spawnattr_init(&attr);
	if (posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0 &&
	    posix_spawn_file_actions_adddup2(&fa, p[1], 1) == 0 &&
	    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0) == 0 &&
	    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
						POSIX_SPAWN_SETSIGDEF) == 0 &&
	    posix_spawnattr_setpgroup(&attr, 0) == 0 &&
	    posix_spawnattr_setsigmask(&attr, &none) == 0 &&
	    posix_spawnattr_setsigdefault(&attr, &all) == 0 &&
	    posix_spawn(&pid, inv->path, &fa, &attr, argv, (char *const *)inv_env) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(p[1]);
	if (pid <= 0) {
		log_warnx("inventory command %s could not be started", inv->path);
		goto out;
	}
	done = inv_read(p[0], out, cap - 1, n);
	out[*n] = '\0';
	if (!done) {
		kill(-pid, SIGKILL);
		log_warnx("inventory command %s: killed after %d s", inv->path,
			  INV_TIMEOUT_MS / 1000);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (done && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
		log_warnx("inventory command %s: exit status %d (attributes unchanged)", inv->path,
			  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	else
		ok = done;
out:
	close(p[0]);
	return ok;
}

static void inv_once(struct inventory *inv)
{
	char *out = malloc(INV_MAX_OUTPUT + 1), why[160];
	size_t n = 0, skipped = 0;
	json_object *attrs = NULL;

	if (out == NULL || !inv_run(inv, out, INV_MAX_OUTPUT + 1, &n))
		goto out;
	attrs = inventory_parse(out, n, &skipped, why, sizeof(why));
	if (attrs == NULL)
		goto out;
	/* the same problem at every run is logged once */
	if (skipped > 0 && strcmp(why, inv->last_why) != 0)
		log_warnx("inventory command %s: %zu line(s) skipped, the first: %s", inv->path,
			  skipped, why);
	snprintf(inv->last_why, sizeof(inv->last_why), "%s", skipped ? why : "");
	inv->cb(inv->ctx, attrs);
out:
	json_object_put(attrs);
	free(out);
}

static void *inv_loop(void *arg)
{
	struct inventory *inv = arg;

	pthread_mutex_lock(&inv->lock);
	for (;;) {
		while (!inv->stop && !inv->due)
			pthread_cond_wait(&inv->cond, &inv->lock);
		if (inv->stop)
			break;
		inv->due = false;
		pthread_mutex_unlock(&inv->lock);
		inv_once(inv);
		pthread_mutex_lock(&inv->lock);
	}
	pthread_mutex_unlock(&inv->lock);
	return NULL;
}

struct inventory *inventory_start(const char *path, inventory_cb cb, void *ctx)
{
	struct inventory *inv = calloc(1, sizeof(*inv));

	if (inv == NULL)
		return NULL;
	inv->path = strdup(path);
	inv->cb = cb;
	inv->ctx = ctx;
	pthread_mutex_init(&inv->lock, NULL);
	pthread_cond_init(&inv->cond, NULL);
	if (inv->path == NULL || pthread_create(&inv->thread, NULL, inv_loop, inv) != 0) {
		pthread_mutex_destroy(&inv->lock);
		pthread_cond_destroy(&inv->cond);
		free(inv->path);
		free(inv);
		return NULL;
	}
	return inv;
}

void inventory_kick(struct inventory *inv)
{
	if (inv == NULL)
		return;
	pthread_mutex_lock(&inv->lock);
	inv->due = true;
	pthread_cond_signal(&inv->cond);
	pthread_mutex_unlock(&inv->lock);
}

void inventory_stop(struct inventory *inv)
{
	if (inv == NULL)
		return;
	pthread_mutex_lock(&inv->lock);
	inv->stop = true;
	pthread_cond_signal(&inv->cond);
	pthread_mutex_unlock(&inv->lock);
	pthread_join(inv->thread, NULL);
	pthread_mutex_destroy(&inv->lock);
	pthread_cond_destroy(&inv->cond);
	free(inv->path);
	free(inv);
}
