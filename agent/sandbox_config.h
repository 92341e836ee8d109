/*
 * sandbox_config.h - what both sides of the jail know of a run: the sandbox's settings,
 * the job it runs, their defaults and the fixed ceilings of the Lua host API
 * (docs/lua-api.md, docs/agent.md), and the closing of inherited descriptors that every
 * process of it does. The agent's side (sandbox.h), the launcher and the jailed child
 * (sandbox_child.c, which gets the settings over the wire) all take them from here.
 */
#ifndef RCS_SANDBOX_CONFIG_H
#define RCS_SANDBOX_CONFIG_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cfg.h"

/* Defaults (sandbox_config_defaults) and the fixed ceilings of the host API. */
#define SANDBOX_DEFAULT_MEM_LIMIT       ((size_t)64 << 20)
#define SANDBOX_DEFAULT_MAX_RESPONSE    ((size_t)64 << 10)
#define SANDBOX_DEFAULT_EXEC_TIMEOUT    30
#define SANDBOX_DEFAULT_EXEC_MAX_OUTPUT ((size_t)64 << 10)
#define SANDBOX_DEFAULT_TIMEOUT         300 /* job->timeout <= 0 */

#define SANDBOX_MIN_MEM_LIMIT ((size_t)1 << 20)
#if SIZE_MAX > 0xffffffffu
#define SANDBOX_MAX_MEM_LIMIT ((size_t)4 << 30)
#else
#define SANDBOX_MAX_MEM_LIMIT ((size_t)3 << 30)
/* Closes every descriptor from first up (close_range, or one by one); sandbox_wire.c. */
void sandbox_close_from(int first);

#endif
#define SANDBOX_MAX_RESPONSE_MAX ((size_t)16 << 20) /* ceiling for max_response */
#define SANDBOX_MAX_EXEC_OUTPUT  ((size_t)16 << 20) /* ceiling for exec_max_output */
#define SANDBOX_MAX_EXEC_TIMEOUT 86400
#define SANDBOX_MAX_TIMEOUT      (7 * 86400)

#define SANDBOX_TEXT_MAX         4096       /* rcs.progress / rcs.log text, bytes */
#define SANDBOX_LOG_MAX_LINES    1000       /* rcs.log lines per job; more are dropped */
#define SANDBOX_CONFIG_KEY_MAX   128        /* rcs.config key, bytes */
#define SANDBOX_CONFIG_VALUE_MAX (16 << 10) /* rcs.config value, bytes */
#define SANDBOX_EXEC_MAX_ARGS    64         /* rcs.exec arguments after the name */
#define SANDBOX_EXEC_ARG_MAX     4096       /* bytes per argument */
#define SANDBOX_EXEC_NAME_MAX    64         /* NAME of allow_command NAME=PATH */
#define SANDBOX_PATH_MAX         1024       /* rcs.file path, bytes */
#define SANDBOX_FILE_MAX         (1 << 20)  /* rcs.file.read / write data, bytes */
#define SANDBOX_REASON_MAX       1024       /* failure reasons, bytes */
#define SANDBOX_PHASE_MAX        32         /* rcs.reboot{resume = ...}: bytes of a phase */
#define SANDBOX_WITHIN_MIN       30         /* rcs.reboot{within = ...}: seconds */
#define SANDBOX_WITHIN_MAX       86400
#define SANDBOX_WITHIN_DEFAULT   900
#define SANDBOX_STATE_KEY_MAX    128        /* rcs.state key, bytes */
#define SANDBOX_STATE_VALUE_MAX  (16 << 10) /* rcs.state value, bytes */

struct sandbox_config {
	size_t mem_limit;    /* bytes the Lua allocator may hold (default 64 MiB) */
	size_t max_response; /* bytes of the result text (default 64 KiB) */
	const struct cfg_strlist *allow_command; /* "NAME=/abs/path" entries rcs.exec may run */
	const struct cfg_strlist *file_dir;      /* directories rcs.file.read/write may touch */
	const char *artifact_dir;     /* rcs.disk.free(""): the artifacts' directory; NULL: none */
	long long exec_timeout;       /* seconds (default 30) */
	size_t exec_max_output;       /* bytes of stdout+stderr kept (default 64 KiB) */
	const char *rollback_command; /* absolute path rcs.rollback runs; NULL: none */
	bool allow_no_seccomp;        /* run even when the kernel/emulator refuses seccomp
					 (qemu-user does); default false = refuse to run */
};

struct sandbox_job {
	const char *job_ident;   /* for log lines */
	const char *script_name; /* chunk name in error messages: [string "NAME"]:LINE: */
	const char *source;      /* exact bytes, already signature-verified */
	size_t len;
	json_object *variables, *constants; /* objects (NULL: empty table) */
	json_object *artifacts; /* rcs.artifacts, read-only: {"<name>": {path, size, sha256}}
				   (NULL: empty table) */
	json_object *job;       /* becomes the read-only table rcs.job, e.g. {ident, task:{ident,
				   version, name}, entity_ident, client_root} */
	long long timeout;      /* wall-clock seconds for the whole script (<= 0: 300) */
	int cancel_fd; /* becomes readable (or hangs up) when the job is cancelled; -1: none.
			  Only polled, never read. */
};

/* Fills cfg with the defaults above; lists NULL, allow_no_seccomp false. */
static inline void sandbox_config_defaults(struct sandbox_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mem_limit = SANDBOX_DEFAULT_MEM_LIMIT;
	cfg->max_response = SANDBOX_DEFAULT_MAX_RESPONSE;
	cfg->exec_timeout = SANDBOX_DEFAULT_EXEC_TIMEOUT;
	cfg->exec_max_output = SANDBOX_DEFAULT_EXEC_MAX_OUTPUT;
}

/* Closes every descriptor from first up (close_range, or one by one); sandbox_wire.c. */
void sandbox_close_from(int first);

#endif
