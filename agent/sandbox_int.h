/*
 * sandbox_int.h - what sandbox.c (the parent: watchdog and host services)
 * and sandbox_child.c (the jailed child) share. Not for other modules.
 *
 * The wire: every message is a frame
 *     u32 length (big-endian, of what follows) | u8 op | u8 nfields |
 *     nfields x (u32 length (big-endian) | bytes)
 * with length <= the receiver's ceiling and exactly filled by the fields.
 * Fields are bytes (not NUL-terminated); numbers travel as decimal text.
 * The child sends one request and waits for its reply; the parent answers
 * each request with SBX_REPLY_OK or SBX_REPLY_ERR (fields below).
 */
#ifndef RCS_SANDBOX_INT_H
#define RCS_SANDBOX_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "sandbox.h"

#define SBX_MAX_FIELDS (SANDBOX_EXEC_MAX_ARGS + 2)
#define SBX_FRAME_HDR  4
/* bytes of framing and small fields on top of the largest data field */
#define SBX_FRAME_SLACK (16 << 10)

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
	SBX_REBOOT,     /*                      -> OK [] */
	SBX_RESULT,     /* kind (enum sbx_result_kind, decimal)[, text]; the last message */
	/* parent -> child */
	SBX_REPLY_OK = 64,
	SBX_REPLY_ERR, /* message: raised as a Lua error */
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
	SBX_RES_MAX_,
};

struct sbx_msg {
	uint8_t op;
	size_t nfields;
	const char *f[SBX_MAX_FIELDS]; /* into the decoded body */
	size_t flen[SBX_MAX_FIELDS];
};

/* What the parent prepared for the child before fork (read-only there). */
struct sbx_child_args {
	const struct sandbox_config *cfg; /* effective values, defaults applied */
	const struct sandbox_job *job;
	long long timeout;   /* effective seconds */
	int64_t deadline_ms; /* CLOCK_MONOTONIC ms when the script's time is up */
	int fd;              /* the child's end of the socketpair */
	pid_t parent;        /* the agent's pid: the child dies with it */
	size_t rx_max;       /* largest frame body the parent may send */
	size_t tx_max;       /* largest frame body the parent accepts */
};

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

/* true when s[0..n) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
bool sandbox_utf8_valid(const char *s, size_t n);

/*
 * The child: never returns. Sends HELLO or a RESULT, serves the script,
 * sends its RESULT, _exit()s.
 */
_Noreturn void sandbox_child_main(const struct sbx_child_args *a);

#endif
