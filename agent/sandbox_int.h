/*
 * sandbox_int.h - what sandbox.c (the agent side: watchdog and host
 * services), sandbox_wire.c (the frames both sides use), sandbox_launcher.c
 * (the launcher process that forks the jail children) and sandbox_child.c
 * (the jailed child) share. Not for other modules.
 *
 * The wire between the agent and a child: every message is a frame
 *     u32 length (big-endian, of what follows) | u8 op | u8 nfields |
 *     nfields x (u32 length (big-endian) | bytes)
 * with length <= the receiver's ceiling and exactly filled by the fields.
 * Fields are bytes (not NUL-terminated); numbers travel as decimal text.
 * The agent first sends SBX_JOB (everything the child needs: the launcher
 * that forked it knows nothing of the job); then the child sends one request
 * at a time and waits for its reply; the agent answers each request with
 * SBX_REPLY_OK or SBX_REPLY_ERR (fields below).
 */
#ifndef RCS_SANDBOX_INT_H
#define RCS_SANDBOX_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "text.h" /* UTF-8: text_utf8_valid, text_utf8_next */
#include "sandbox_config.h"

#define SBX_MAX_FIELDS (SANDBOX_EXEC_MAX_ARGS + 2)
#define SBX_FRAME_HDR  4
/* bytes of framing and small fields on top of the largest data field */
#define SBX_FRAME_SLACK (16 << 10)
/* ceiling of the SBX_JOB frame: the script (16 MiB at most) and its JSON data */
#define SBX_JOB_MAX ((size_t)48 << 20)

enum sbx_op {
	/* child -> parent                 fields */
	SBX_HELLO = 1,  /* seccomp "1"|"0": the child is jailed, the script loads next */
	SBX_PROGRESS,   /* text */
	SBX_LOG,        /* level, text */
	SBX_CONFIG_GET, /* key                  -> OK [value] or OK [] when unset */
	SBX_CONFIG_SET, /* key, value           -> OK [] */
	SBX_EXEC,      /* name, args...        -> OK [code, output, signal, timed_out, truncated] */
	SBX_SLEEP,     /* milliseconds         -> OK [] */
	SBX_FILE_READ, /* path                 -> OK [data] */
	SBX_FILE_WRITE, /* path, data           -> OK [] */
	SBX_REBOOT,     /* [phase, within]      -> OK [] (with a phase: the script ends next) */
	SBX_DISK_FREE,  /* path ("": artifact_dir) -> OK [bytes, decimal] */
	SBX_ROLLBACK,   /* (runs rollback_command) -> OK [as SBX_EXEC's] */
	SBX_STATE_GET,  /* key                  -> OK [type, value] or OK [] when unset */
	SBX_STATE_SET,  /* key[, type, value]   -> OK [] (no value: the key removed) */
	SBX_RESULT,     /* kind (enum sbx_result_kind, decimal)[, text]; the last message */
	/* parent -> child */
	SBX_REPLY_OK = 64,
	SBX_REPLY_ERR, /* message: raised as a Lua error */
	SBX_JOB,       /* the first message: fields enum sbx_job_field */
};

/* The fields of SBX_JOB, in order. JSON fields are text, empty for none. */
enum sbx_job_field {
	SBX_JOB_SCRIPT_NAME,  /* chunk name */
	SBX_JOB_SOURCE,       /* the script's exact bytes */
	SBX_JOB_VARIABLES,    /* JSON object or empty */
	SBX_JOB_CONSTANTS,    /* JSON object or empty */
	SBX_JOB_DATA,         /* JSON object (rcs.job) or empty */
	SBX_JOB_ARTIFACTS,    /* JSON object (rcs.artifacts) or empty */
	SBX_JOB_TIMEOUT,      /* effective seconds */
	SBX_JOB_DEADLINE,     /* CLOCK_MONOTONIC ms when the script's time is up */
	SBX_JOB_MEM_LIMIT,    /* bytes */
	SBX_JOB_MAX_RESPONSE, /* bytes */
	SBX_JOB_NO_SECCOMP,   /* "1": allow_no_seccomp */
	SBX_JOB_RX_MAX,       /* largest frame body the agent may send the child */
	SBX_JOB_TX_MAX,       /* largest frame body the agent accepts from the child */
	SBX_JOB_NFIELDS_,
};

enum sbx_result_kind {
	SBX_RES_OK = 0,    /* text: the response */
	SBX_RES_NIL,       /* the script returned nothing or nil */
	SBX_RES_SCRIPT,    /* text: the Lua error message */
	SBX_RES_BADRESP,   /* text: why the return value can't be a response */
	SBX_RES_TOOBIG,    /* response over max_response */
	SBX_RES_MEMORY,    /* the allocator cap was hit */
	SBX_RES_TIMEOUT,   /* the count hook saw the deadline pass */
	SBX_RES_NOSECCOMP, /* seccomp refused and not allowed to run without it */
	SBX_RES_SETUP,     /* text: the child could not prepare the state */
	SBX_RES_FAIL,      /* code (one of sandbox_fail_codes), text: rcs.fail, rcs.rollback */
	SBX_RES_MAX_,
};

/* The codes rcs.fail may end a job with (docs/lua-api.md "rcs.fail"): a report's `error`. */
static const char *const sandbox_fail_codes[] = {"install_failed", "health_check_failed",
						 "incompatible", "rolled_back", NULL};

struct sbx_msg {
	uint8_t op;
	size_t nfields;
	const char *f[SBX_MAX_FIELDS]; /* into the decoded body */
	size_t flen[SBX_MAX_FIELDS];
};

/* What the child knows of its job, decoded from SBX_JOB (read-only once filled). */
struct sbx_child_args {
	const struct sandbox_config *cfg; /* mem_limit, max_response, allow_no_seccomp */
	const struct sandbox_job *job;    /* script_name, source, len, variables, constants, job */
	long long timeout;                /* effective seconds */
	int64_t deadline_ms;              /* CLOCK_MONOTONIC ms when the script's time is up */
	size_t rx_max;                    /* largest frame body the agent may send */
	size_t tx_max;                    /* largest frame body the agent accepts */
};

/* ---- the wire and helpers of both sides (sandbox_wire.c) ---- */

/*
 * Appends one frame to out. RCS_ERR_TOOBIG when it would exceed out's
 * ceiling (out unchanged, as far as buf_append leaves it) or a field count or
 * length doesn't fit the format.
 */
enum rcs_err sandbox_wire_encode(struct buf *out, uint8_t op, size_t nfields, const char *const *f,
				 const size_t *flen);

/*
 * Decodes a frame body (what follows the length prefix) of len bytes into m,
 * whose fields point into body. RCS_ERR_INVAL for anything malformed:
 * empty body, unknown op, too many fields, a field running past the end,
 * trailing bytes.
 */
enum rcs_err sandbox_wire_decode(const char *body, size_t len, struct sbx_msg *m);

/* Reads the 4-byte big-endian length prefix. */
uint32_t sandbox_wire_len(const unsigned char hdr[SBX_FRAME_HDR]);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t sandbox_now_ms(void);

/*
 * The child, in the process the launcher just forked (the launcher's pid is
 * launcher; fd is the child's end of its job socket): never returns. Reads
 * SBX_JOB, jails itself, sends HELLO or a RESULT, serves the script, sends
 * its RESULT, _exit()s.
 */
_Noreturn void sandbox_child_main(int fd, pid_t launcher);

/* ---- the launcher (sandbox_launcher.c), used by sandbox.c ---- */

/* One jail child as the agent sees it: the launcher's control channel for it. */
struct sbx_spawn {
	pid_t pid;   /* for logs: only the launcher signals it */
	int ctl;     /* SOCK_SEQPACKET to the launcher; -1 once released */
	bool exited; /* the launcher reaped it; status is its wait status */
	int status;
	bool lost; /* the launcher died or broke the protocol before reporting the exit */
};

/*
 * Asks the launcher to fork a jail child that serves child_fd (taken: closed
 * here whatever happens) and waits for its answer. RCS_OK with *s filled
 * (sandbox_launcher_release it); otherwise RCS_ERR_IO with a reason in why
 * ("the sandbox launcher died", "cannot fork: ...") and s->ctl == -1.
 */
enum rcs_err sandbox_launcher_spawn(int child_fd, struct sbx_spawn *s, char *why, size_t len);

/* Reads what the launcher said on s->ctl, if anything: sets exited/status or lost. */
void sandbox_launcher_read(struct sbx_spawn *s);

/* Waits up to ms for the child's exit (or the launcher's loss). true once exited. */
bool sandbox_launcher_wait(struct sbx_spawn *s, int ms);

/* Asks the launcher to SIGKILL the child (nothing once it exited or the launcher is lost). */
void sandbox_launcher_kill(struct sbx_spawn *s);

/*
 * Marks the launcher unusable (it stopped answering) and kills it: its jail
 * children die with it, and the process that started it gets SIGCHLD.
 */
void sandbox_launcher_broken(const char *why);

/* Closes the control channel: the launcher kills the child if it still runs, and reaps it. */
void sandbox_launcher_release(struct sbx_spawn *s);

#endif
