/*
 * fuzz_coord.h - a coordinator without network for the fuzz targets: the
 * real store (SQLite in memory), signer, lifecycle and REST handlers.
 *
 * The fixture holds one tenant (the client_root of tests/vectors/manifest-1),
 * two tasks and two devices with fixed idents, so seed inputs can name them:
 *   FZ_TASK_SIGNED  manifest-1's task, version 3, script set_config.lua, its
 *                   constants and variables_info, signed with the vector's key
 *                   (which the signer trusts);
 *   FZ_TASK_ECHO    stock script "echo", one optional variable of each type,
 *                   not allow_offline, notification lists set;
 *   FZ_DEV_ONLINE   tags site-a, online (reported tag rep-tag);
 *   FZ_DEV_OFFLINE  tags site-a and model-x, never seen.
 * A fake transport (lifecycle hooks that deliver nothing) makes presence
 * count, as with --mqtt. Every FZ_RESET inputs the database is rebuilt, so
 * what the handlers create does not pile up.
 */
#ifndef RCS_FUZZ_COORD_H
#define RCS_FUZZ_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "http_api.h"
#include "lifecycle.h"

#define FZ_ROOT        "6f1c2a9e-3b7d-4c5e-9a1f-2d8e7b6c5a43"
#define FZ_TASK_SIGNED "0b9d4e2f-7a61-4c83-b5d2-9e1f3a6c8d70"
#define FZ_TASK_ECHO   "01a1ffa0-2b85-7194-bf3d-177d559dec42"
#define FZ_DEV_ONLINE  "01a1ffa0-2b22-7049-8259-f0eebb68ebab"
#define FZ_DEV_OFFLINE "01a1ffa0-2b22-7049-8259-f0eebb68ebac"
#define FZ_USER        "alice"
#define FZ_NOW         1795290050
#define FZ_RESET       4096

struct fuzz_coord {
	struct store *st;
	struct signer *signer;
	struct lifecycle lc;
	struct api_app app;
	unsigned long runs;
};

extern struct fuzz_coord fz;

/* Builds the fixture (once, from LLVMFuzzerInitialize); aborts on failure. */
void fz_init(void);
/* Call at the start of every input: rebuilds the database every FZ_RESET inputs. */
void fz_tick(void);

/*
 * Runs a handler as http_api.c would after routing and authentication (as
 * FZ_USER, admin, of FZ_ROOT): seg are the path segments after /v3/commands.
 * Aborts on an answer of 5xx or none (a body must never cause those); returns
 * the status and, when answer is not NULL, hands over the answer's body.
 */
int fz_call(api_handler fn, const char *method, const char *const *seg, int nseg,
	    const uint8_t *body, size_t len, json_object **answer);

/* Same with a C string body (for the fixture's own requests). */
int fz_call_str(api_handler fn, const char *method, const char *const *seg, int nseg,
		const char *body, json_object **answer);

/* Creates a job of task for device (pending) with store_jobs_create; ident gets its ident. */
void fz_job_new(const char *task, const char *device, char ident[UUID_STR_LEN]);

#endif
