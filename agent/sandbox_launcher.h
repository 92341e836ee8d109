/*
 * sandbox_launcher.h - the life of the sandbox's launcher process, which forks the jail
 * children (why there is one: sandbox.h, "The launcher"; docs/agent.md, "The sandbox
 * launcher"). rcs-agent's main starts, checks and stops it; sandbox_run asks it for
 * children through sandbox_int.h.
 */
#ifndef RCS_SANDBOX_LAUNCHER_H
#define RCS_SANDBOX_LAUNCHER_H

#include <stddef.h>

#include "err.h"

/*
 * Forks the launcher. Call it while the process has a single thread and
 * before it reads anything secret: the launcher keeps a copy of the memory
 * as it is now. Call it from the thread that lives as long as the process
 * (main): the launcher's parent-death signal follows the thread that forked
 * it. argv (argc strings, may be NULL) is wiped in the launcher's
 * copy (a password given as a flag must not reach the jail). The launcher
 * keeps stdin, stdout and stderr and its socket, closes every other
 * descriptor, ignores SIGINT, SIGTERM and SIGHUP (it follows its owner), and
 * is named "rcs-launcher" (its children "rcs-jail").
 * A process forked from the owner has no launcher until it starts its own.
 * RCS_OK; RCS_ERR_EXISTS when this process already has a running launcher;
 * RCS_ERR_IO when socketpair or fork fail. A dead or broken launcher is
 * stopped and replaced.
 */
enum rcs_err sandbox_launcher_start(int argc, char **argv);

/*
 * RCS_OK while the launcher runs and answers. RCS_ERR_IO when it died (it is
 * reaped here) or stopped answering, with what happened to it in why ("was
 * killed by signal 9", "exited with status 1", "did not answer");
 * RCS_ERR_NOTFOUND when this process started none.
 */
enum rcs_err sandbox_launcher_check(char *why, size_t len);

/*
 * Stops the launcher (it kills and reaps a child still running) and reaps
 * it, waiting at most 2 s before killing it. Nothing when there is none.
 * Call it only when no sandbox_run is in progress.
 */
void sandbox_launcher_stop(void);

#endif
