/*
 * sandbox.h - the agent's script jail (docs/agent.md, promise 2 and "The sandbox
 * launcher"; what a script may call: docs/lua-api.md).
 *
 * Untrusted Lua never runs inside the agent process. sandbox_run() has a
 * child forked per job; the child sets resource limits, closes every
 * descriptor but its end of a socketpair, builds a fresh lua_State with a
 * counting allocator, only the libraries and globals a script may use and the
 * host API table `rcs`, installs a seccomp filter (read/write on that socket,
 * memory management, clocks, exit; anything else kills it) and then loads
 * the script as text and runs it. Every host action the script asks for
 * (progress, log, config, exec, sleep, files, reboot) is a bounded message
 * over the socket; the agent checks it against the allowlists of struct
 * sandbox_config, does it, and answers. The agent also is the watchdog: it
 * has the child SIGKILLed at the job's wall-clock timeout or when cancel_fd
 * fires. A crash, hang, memory bomb or protocol violation of the child ends
 * one job with an outcome, never the agent.
 *
 * The launcher. The children are not forked by the agent, which has threads
 * (MQTT, the runner): a child forked from a multithreaded process starts with
 * a copy of every lock another thread held at that instant (the time-zone
 * lock a log line takes, an allocator lock of ASan's runtime, ...) and can
 * wait on it forever. sandbox_launcher_start() forks, once, while the
 * process has a single thread and holds nothing secret, a small
 * single-threaded launcher process; sandbox_run() asks it for each child
 * (descriptors passed over a socketpair), and the launcher forks it, and
 * kills and reaps it when asked, reporting the exit status. Only the
 * launcher signals jail children: it is their parent and reaps them in the
 * same thread that kills them, so a pid it signals can't have been reused.
 * The launcher dies with the process that started it (PR_SET_PDEATHSIG) and
 * its children die with it. When the launcher dies, the run in progress ends
 * SANDBOX_ERROR "sandbox unavailable: the sandbox launcher died", later runs
 * end the same way at once, and sandbox_launcher_check() says so: the owner
 * must start a new one from a single-threaded process (rcs-agent restarts
 * itself, see main.c). Its life: sandbox_launcher.h.
 *
 * Calls: fork (in the launcher), posix_spawn (rcs.exec, in the agent),
 * libseccomp, Lua 5.4, json-c and common/ (buf, canon, log).
 * docs/lua-api.md is the script authors' reference.
 *
 * Requirements on the calling process:
 *  - sandbox_launcher_start() before any thread exists, from the main thread.
 *  - SIGCHLD must not be ignored, and nothing else in the process may reap
 *    children with waitpid(-1, ...): rcs.exec commands and the launcher are
 *    waited for by pid. SIGCHLD may be blocked (rcs-agent sigwait()s it to
 *    notice the launcher's death).
 *  - Under AddressSanitizer (detected at compile time, __SANITIZE_ADDRESS__ or
 *    __has_feature(address_sanitizer)) RLIMIT_AS is not set in the child,
 *    since ASan reserves terabytes of shadow address space; the allocator cap
 *    (mem_limit) still applies, and the filter also allows sigaltstack
 *    queries (ASan's longjmp interceptor). Elsewhere RLIMIT_AS is the
 *    child's address space once it read its job, plus mem_limit plus 64 MiB
 *    and its buffers.
 *  - valgrind has no seccomp(2): under it, run with allow_no_seccomp.
 *
 * Known limit: a fork without exec shares the launcher's address-space
 * layout, which is the agent's (the launcher is a fork of it), so a script
 * that reads addresses (tostring of a table) learns the agent's ASLR
 * offsets. It has no way to use them but the message protocol, which is
 * small, bounded and checked here. The launcher's memory, and so the
 * child's, holds nothing the agent read after it started: no configuration,
 * credentials, keys, journal or job but its own.
 */
#ifndef RCS_SANDBOX_H
#define RCS_SANDBOX_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "err.h"
#include "sandbox_config.h"

/*
 * Parent-side services, all called on the thread running sandbox_run, all
 * optional (NULL: progress/log/started are dropped, rcs.config raises
 * "not available"). Strings passed in are NUL-free, valid for the call only.
 */
struct sandbox_host {
	void *ctx;
	/* rcs.progress(text): at most one call per second, the last text wins;
	   a text still waiting when the script ends is dropped (the final report
	   supersedes it). */
	void (*progress)(void *ctx, const char *text);
	/* rcs.log(level, text): level is "debug", "info", "warn" or "error";
	   at most SANDBOX_LOG_MAX_LINES per job, then one "warn" saying so. */
	void (*log)(void *ctx, const char *level, const char *text);
	/* RCS_OK with *value malloc'd (freed by the sandbox), RCS_ERR_NOTFOUND
	   when unset, any other error is raised in the script. */
	enum rcs_err (*config_get)(void *ctx, const char *key, char **value);
	enum rcs_err (*config_set)(void *ctx, const char *key, const char *value);
	/* Called once when the child is jailed and the script is about to load. */
	void (*started)(void *ctx);
	/* rcs.state.get/set (docs/lua-api.md "rcs.state"): a value travels as its type ('s'
	   a string, 'n' a number as Lua writes it, 'b' "true" or "false") and its text
	   (len bytes); set with type 0 removes the key. state_get: RCS_OK with *type and
	   *value (malloc'd, freed by the sandbox), RCS_ERR_NOTFOUND when unset. state_set:
	   any error is raised in the script with why (NULL: "not available"). */
	enum rcs_err (*state_get)(void *ctx, const char *key, char *type, char **value);
	enum rcs_err (*state_set)(void *ctx, const char *key, char type, const char *value,
				  size_t len, char *why, size_t whylen);
};

enum sandbox_outcome {
	SANDBOX_OK,
	SANDBOX_ERROR,
	SANDBOX_TIMEOUT,
	SANDBOX_CANCELLED,
	SANDBOX_CRASHED,
};

struct sandbox_result {
	enum sandbox_outcome outcome;
	/* OK: the script's return value as text (nil -> NULL, string as is,
	   number/boolean as text, table -> canonical JSON), valid UTF-8 without
	   NUL, at most max_response bytes. Otherwise a one-line human reason:
	   "script error: [string \"echo\"]:3: boom", "timeout after 5 s",
	   "memory limit exceeded", "response too large", "bad response: ...",
	   "killed by signal 11 (SIGSEGV)", "timeout: cpu time limit exceeded",
	   "cancelled", "sandbox unavailable: seccomp refused",
	   "sandbox setup failed: ...", "sandbox violation: ...". */
	char *response;
	/* Not OK: why, as a report's `error` (docs/mqtt.md: "script_error", "timeout",
	   "memory_limit", "crashed", "cancelled", "sandbox_unavailable",
	   "sandbox_violation"); a constant string. NULL for OK. */
	const char *cause;
	bool reboot; /* the script called rcs.reboot() (whatever the outcome) */
	/* rcs.reboot{resume = ..., within = ...}: the phase to run after the reboot ("" when
	   not asked; the script ended there, outcome OK) and the seconds it has */
	char resume[SANDBOX_PHASE_MAX + 1];
	long long within;
};

/* Fills cfg with the defaults above; lists NULL, allow_no_seccomp false. */
void sandbox_config_defaults(struct sandbox_config *cfg);

/*
 * Checks cfg as the agent would use it: sizes and timeouts in range (0 means
 * the default), every allow_command entry "NAME=/abs/path" with NAME of
 * [A-Za-z0-9_.-] (at most SANDBOX_EXEC_NAME_MAX) and unique, every file_dir
 * absolute. RCS_ERR_INVAL with the offending entry in errbuf. sandbox_run
 * refuses a config that fails this check.
 */
enum rcs_err sandbox_config_check(const struct sandbox_config *cfg, char *errbuf, size_t errlen);

/*
 * Runs job's script in a jailed child and waits for its outcome (at most
 * job->timeout seconds plus a fraction, then it is killed).
 * RCS_OK whenever the job ran to an outcome (*out filled, free it with
 * sandbox_result_free); a launcher that is missing, dead or can't fork is
 * the outcome SANDBOX_ERROR "sandbox unavailable: ...". Errors, with *out
 * zeroed: RCS_ERR_INVAL for a bad config (see sandbox_config_check), job or
 * cancel_fd; RCS_ERR_TOOBIG for a source over 16 MiB or job data that
 * doesn't fit the child's first message (48 MiB); RCS_ERR_IO when socketpair
 * fails; RCS_ERR_NOMEM. Not reentrant per job, but independent runs may go
 * on in several threads (the launcher serves them all).
 */
enum rcs_err sandbox_run(const struct sandbox_config *cfg, const struct sandbox_host *host,
			 const struct sandbox_job *job, struct sandbox_result *out);

/* Frees r->response and zeroes r; r may be zeroed or already freed. */
void sandbox_result_free(struct sandbox_result *r);

#endif
