/*
 * forkbase: the baseline of the agent's per-job overhead (tests/bench/bench_footprint.py).
 * Test tooling only, not the product.
 *
 * The agent runs each script in a child it forks from itself. The least any fork-based
 * jail of that size can cost is a fork of a process as large as the agent and a waitpid;
 * the least a Lua jail can cost adds a fresh Lua state running the script. This program
 * makes itself as large as asked (--rss-kb: anonymous memory, written, so every page is
 * resident and private, as the agent's heap is), then times, over --iterations rounds:
 *
 *   fork   fork(); the child _exit(0)s; waitpid()
 *   lua    fork(); the child opens a Lua 5.4 state with the standard libraries, runs the
 *          stock echo script's text (returns "pong"), _exit(0)s; waitpid()
 *
 * and prints one JSON line: {"mode", "rss_kb", "iterations", "median_us", "mean_us",
 * "p90_us", "min_us"} (with --samples also "samples_us", every round, sorted). No seccomp,
 * no rlimits, no socket, no journal: only the floor.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static const char echo_lua[] = "local msg = (rcs and rcs.variables.message) or nil\n"
			       "if msg == nil then\n  msg = \"pong\"\nend\nreturn msg\n";

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void child_lua(void)
{
	lua_State *L = luaL_newstate();

	if (L == NULL)
		_exit(2);
	luaL_openlibs(L);
	if (luaL_dostring(L, echo_lua) != LUA_OK || lua_tostring(L, -1) == NULL)
		_exit(3);
	_exit(0);
}

int main(int argc, char **argv)
{
	const char *mode = "fork";
	long rss_kb = 0, n = 1000;
	int samples = 0;
	double *t, sum = 0;
	char *ballast = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--rss-kb") == 0 && i + 1 < argc)
			rss_kb = atol(argv[++i]);
		else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
			n = atol(argv[++i]);
		else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
			mode = argv[++i];
		else if (strcmp(argv[i], "--samples") == 0)
			samples = 1;
		else {
			fprintf(stderr, "usage: forkbase [--mode fork|lua] [--rss-kb KB]"
					" [--iterations N] [--samples]\n");
			return 2;
		}
	}
	if (n < 1 || (strcmp(mode, "fork") != 0 && strcmp(mode, "lua") != 0)) {
		fprintf(stderr, "forkbase: bad arguments\n");
		return 2;
	}
	if (rss_kb > 0) {
		ballast = malloc((size_t)rss_kb * 1024);
		if (ballast == NULL)
			return 1;
		memset(ballast, 1, (size_t)rss_kb * 1024);
	}
	t = calloc((size_t)n, sizeof(*t));
	if (t == NULL)
		return 1;
	for (long i = 0; i < n; i++) {
		double t0 = now_us();
		int st;
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			if (mode[0] == 'l')
				child_lua();
			_exit(0);
		}
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "forkbase: child failed (%d)\n", st);
			return 1;
		}
		t[i] = now_us() - t0;
		sum += t[i];
	}
	qsort(t, (size_t)n, sizeof(*t), cmp);
	printf("{\"mode\": \"%s\", \"rss_kb\": %ld, \"iterations\": %ld, \"median_us\": %.1f,"
	       " \"mean_us\": %.1f, \"p90_us\": %.1f, \"min_us\": %.1f",
	       mode, rss_kb, n, t[n / 2], sum / (double)n, t[(n * 9) / 10], t[0]);
	if (samples) {
		printf(", \"samples_us\": [");
		for (long i = 0; i < n; i++)
			printf("%s%.1f", i ? ", " : "", t[i]);
		printf("]");
	}
	printf("}\n");
	free(t);
	free(ballast);
	return 0;
}
