/*
 * journal.h - the agent's journal: what it received, what it ran, what it
 * still has to report (docs/agent.md "What happens to a job"; docs/mqtt.md
 * "Delivery guarantees" for the outbox). One SQLite file,
 * <state_dir>/journal.db, in WAL mode with synchronous=FULL (devices lose
 * power), foreign keys on, schema versioned by PRAGMA user_version.
 *
 * What it keeps:
 *   - every job ident ever received (so no job runs twice), its task ident and
 *     version, the raw envelope (until pruned) and its arrival order;
 *   - per job: the local state (queued, running, done, dropped), the last
 *     report seq (per job, from 1, never reused, across restarts) and the
 *     latest report it made, which is the final report once terminal;
 *   - the outbox: status reports not yet acknowledged by the broker;
 *   - the highest version run of each task (the rollback check);
 *   - the device settings of rcs.config.get/set;
 *   - the downloads of artifacts: each <sha256>.part's offset fsynced so far, and which
 *     jobs are still downloading (docs/agent.md "Artifacts"); the highest release
 *     completed on each stream.
 *
 * Every call is safe from any thread: one connection behind one mutex. No
 * call runs a caller's callback while holding the lock (the *_each functions
 * collect first, then call), so a callback may call back into the journal.
 * Every write returns only once it is durable (committed and fsynced).
 *
 * Errors common to every function: RCS_ERR_INVAL for a NULL journal or
 * malformed arguments, RCS_ERR_NOMEM, RCS_ERR_DB for any other storage error
 * (logged with SQLite's message), RCS_ERR_BUSY if another process holds the
 * file locked for more than a few seconds, and RCS_ERR_FULL when the disk
 * (or the cap of journal_set_max_size) is full: the write is rolled back and
 * nothing changed, so the agent can refuse new work with a reason instead of
 * corrupting its state.
 */
#ifndef RCS_JOURNAL_H
#define RCS_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "proto.h"
#include "status.h"
#include "uuid.h"

#define JOURNAL_FILE               "journal.db"
#define JOURNAL_SCHEMA_VERSION     3
#define JOURNAL_MAX_CONFIG_KEY     128         /* bytes */
#define JOURNAL_MAX_CONFIG_VALUE   (64 * 1024) /* bytes */
#define JOURNAL_MAX_CONFIG_KEYS    1024        /* settings rows */
#define JOURNAL_MAX_OUTBOX         10000       /* unacknowledged non-terminal reports */
#define JOURNAL_KEEP_FINAL_REPORTS 1000        /* finished jobs whose final report is kept */
#define JOURNAL_KEEP_IDENTS        100000      /* finished jobs whose ident is kept */

struct journal;

enum journal_state { JOURNAL_QUEUED, JOURNAL_RUNNING, JOURNAL_DONE, JOURNAL_DROPPED };

/* Name of a state ("queued", ...; "unknown" when out of range). */
const char *journal_state_name(enum journal_state st);

/*
 * Opens (creating when needed) <state_dir>/journal.db; state_dir itself is
 * created (mode 0700) when missing, the file is created mode 0600. Migrates
 * the schema to JOURNAL_SCHEMA_VERSION and runs a quick integrity check.
 * Returns RCS_ERR_IO when the directory or file can't be created or opened,
 * RCS_ERR_DB when the file is not a journal, is corrupt, or comes from a
 * newer agent (higher schema version), RCS_ERR_TOOBIG for a path longer than
 * PATH_MAX. On success *out is a journal for journal_close().
 */
enum rcs_err journal_open(const char *state_dir, struct journal **out);

/* Closes the database (a final WAL checkpoint) and frees j. NULL is fine. */
void journal_close(struct journal *j);

/*
 * Caps the database at about max_bytes (rounded down to whole pages; 0 lifts
 * the cap). Past it every write fails with RCS_ERR_FULL exactly as on a full
 * disk. For a state directory on a shared partition, and for tests.
 */
enum rcs_err journal_set_max_size(struct journal *j, uint64_t max_bytes);

/*
 * Records a received envelope exactly once: job ident (a UUID), task ident
 * (NULL or "" when the envelope could not be decoded) and version (0 then),
 * the raw payload (len <= PROTO_MAX_PAYLOAD, else RCS_ERR_TOOBIG) and its
 * arrival order. A new job starts QUEUED. *is_new is false when the job ident
 * was seen before (in any state; nothing is changed then). Returns only after
 * the row is durable: the caller acknowledges the MQTT message after this.
 */
enum rcs_err journal_receive(struct journal *j, const char *job, const char *task_ident,
			     long long task_version, const char *payload, size_t len, int64_t now,
			     bool *is_new);

/* State of a job. RCS_ERR_NOTFOUND for a job never received (or long pruned). */
enum rcs_err journal_get_state(struct journal *j, const char *job, enum journal_state *out);

/*
 * Moves a job to st. Allowed: QUEUED -> RUNNING, DONE, DROPPED;
 * RUNNING -> DONE, DROPPED; and any state to itself (no change).
 * DONE and DROPPED are final: RCS_ERR_CONFLICT for any other move.
 * RCS_ERR_NOTFOUND for an unknown job.
 */
enum rcs_err journal_set_state(struct journal *j, const char *job, enum journal_state st);

/*
 * The oldest QUEUED job by arrival: its ident into job and its payload
 * (malloc'd, NUL-terminated, *len bytes without the NUL; the caller frees it).
 * RCS_ERR_NOTFOUND when none is queued.
 */
enum rcs_err journal_next_queued(struct journal *j, char job[UUID_STR_LEN], char **payload,
				 size_t *len);

/* Number of QUEUED jobs. */
enum rcs_err journal_count_queued(struct journal *j, size_t *n);

/*
 * Appends a status report to the outbox with the job's next seq (per job,
 * from 1, never reused, survives restarts) and returns the encoded payload
 * (proto_report_encode; malloc'd, the caller frees it) to publish, and the
 * outbox row id for journal_outbox_ack(). status must be one a device reports
 * (edge_*, terminated) and move the job forward (status_can_move from its
 * latest report; edge_running may repeat), else RCS_ERR_INVAL / RCS_ERR_CONFLICT.
 * response may be NULL; over PROTO_MAX_RESPONSE bytes is RCS_ERR_TOOBIG.
 * Terminal reports (terminated/edge_error) also mark the job DONE (a DROPPED
 * job stays DROPPED) and are kept as the job's final report; after one, any
 * further report is RCS_ERR_CONFLICT. RCS_ERR_NOTFOUND for a job never
 * received (journal_receive it first). RCS_ERR_FULL when JOURNAL_MAX_OUTBOX
 * reports wait unacknowledged and this one is not terminal (progress while
 * offline is dropped; final reports are always kept). id and payload may be
 * NULL when not wanted.
 */
enum rcs_err journal_report(struct journal *j, const char *job, enum job_status status,
			    const char *response, int64_t now, long long *id, char **payload);
/* journal_report with the cause of an edge_error (error: one word, docs/mqtt.md "Status
 * report"; NULL: none), kept in the report and in the job's final report. */
enum rcs_err journal_report_cause(struct journal *j, const char *job, enum job_status status,
				  const char *response, const char *error, int64_t now,
				  long long *id, char **payload);

/* An edge_running report of a download: response and "progress": {"done", "total"} in bytes
 * (docs/mqtt.md "Status report"); RCS_ERR_INVAL when done < 0 or done > total. */
enum rcs_err journal_report_progress(struct journal *j, const char *job, const char *response,
				     int64_t done, int64_t total, int64_t now, long long *id,
				     char **payload);
/*
 * Outbox rows not yet acknowledged by the broker, oldest first: calls
 * fn(ctx, id, job, payload) for each, at most max of them. The rows are read
 * first and fn runs without the lock held (it may call journal_outbox_ack);
 * the strings are valid during the call only.
 */
enum rcs_err journal_outbox_each(struct journal *j, size_t max,
				 void (*fn)(void *ctx, long long id, const char *job,
					    const char *payload),
				 void *ctx);

/* The broker acknowledged outbox row id: deletes it. Ids are never reused, so
 * an id already acknowledged is not an error (RCS_OK, nothing changes). */
enum rcs_err journal_outbox_ack(struct journal *j, long long id);

/* Number of outbox rows waiting for the broker. */
enum rcs_err journal_outbox_count(struct journal *j, size_t *n);

/* The journal's PRAGMA synchronous (2: FULL, every commit synced; 1: NORMAL),
 * -1 on error. For diagnostics and tests: outside an acknowledgement it is FULL. */
int journal_synchronous(struct journal *j);

/*
 * The final report of a finished job (payload malloc'd, the caller frees it),
 * to re-send when the same job arrives again: it goes to the outbox again
 * with the SAME seq (it is a repeat, the coordinator applies a seq once). If
 * that report is still waiting in the outbox, that row is returned instead of
 * a second copy. RCS_ERR_NOTFOUND if the job has no final report (unknown,
 * unfinished, or its report pruned past JOURNAL_KEEP_FINAL_REPORTS).
 */
enum rcs_err journal_resend_final(struct journal *j, const char *job, long long *id,
				  char **payload);

/* Latest report of a job (any status), for answering a repeat of an
 * unfinished job; as journal_resend_final otherwise. RCS_ERR_NOTFOUND when
 * the job has made no report yet. */
enum rcs_err journal_resend_latest(struct journal *j, const char *job, long long *id,
				   char **payload);

/* The "rebooting" report of a job that asked to be continued after a reboot: edge_running,
 * response "rebooting", its phase (journal_phase_reboot) and within (PROTO_WITHIN_MIN..MAX
 * seconds, else RCS_ERR_INVAL), docs/mqtt.md "Status report". */
enum rcs_err journal_report_rebooting(struct journal *j, const char *job, long long within,
				      int64_t now, long long *id, char **payload);

/* Highest task version ever run of task_ident (0 when none). */
enum rcs_err journal_task_version(struct journal *j, const char *task_ident, long long *version);

/* Records that version of task_ident runs. Keeps the highest: recording an
 * older version than the one recorded changes nothing. version >= 1. */
enum rcs_err journal_task_version_set(struct journal *j, const char *task_ident, long long version);

/*
 * Persisted device settings for rcs.config.get/set. A key is 1..128 bytes
 * (JOURNAL_MAX_CONFIG_KEY), a value at most 64 KiB (JOURNAL_MAX_CONFIG_VALUE),
 * both NUL-free strings: RCS_ERR_TOOBIG past those, RCS_ERR_INVAL for an
 * empty key. At most JOURNAL_MAX_CONFIG_KEYS keys (RCS_ERR_FULL when a new
 * key would pass it). journal_config_get returns a malloc'd copy (the caller
 * frees it) or RCS_ERR_NOTFOUND; journal_config_set with value NULL deletes
 * the key (no error when it was not set).
 */
enum rcs_err journal_config_get(struct journal *j, const char *key, char **value);
enum rcs_err journal_config_set(struct journal *j, const char *key, const char *value);

/*
 * At start: jobs left RUNNING by a crash or reboot, in arrival order. Calls
 * fn(ctx, job) for each, without the lock held (fn may call journal_report,
 * which is what the caller does: edge_error "interrupted").
 */
enum rcs_err journal_each_running(struct journal *j, void (*fn)(void *ctx, const char *job),
				  void *ctx);

/*
 * Downloads of artifacts (docs/agent.md "Artifacts"), by lowercase hex SHA-256 (else
 * RCS_ERR_INVAL). journal_download_get: the offset up to which <sha256>.part was fsynced,
 * RCS_ERR_NOTFOUND (and 0) when none was journaled. journal_download_set: records it, after
 * the caller's fsync; a negative offset forgets it (the file is complete or gone).
 */
enum rcs_err journal_download_get(struct journal *j, const char *sha256, int64_t *offset);
enum rcs_err journal_download_set(struct journal *j, const char *sha256, int64_t offset);
/* Marks a RUNNING job as downloading its artifacts (on) or running its script (off).
 * RCS_ERR_NOTFOUND for an unknown job. */
enum rcs_err journal_set_downloading(struct journal *j, const char *job, bool on);
/* Whether job is marked downloading (a job requeued by journal_requeue_downloading still is:
 * it resumes its downloads). RCS_ERR_NOTFOUND for an unknown job. */
enum rcs_err journal_get_downloading(struct journal *j, const char *job, bool *on);
/* At start, before journal_each_running: the jobs a crash or power cut stopped while they
 * were downloading go back to QUEUED, still marked downloading (their script never
 * started: they resume), *n of them. */
enum rcs_err journal_requeue_downloading(struct journal *j, size_t *n);

/* Releases (docs/agent.md "Releases"): the highest seq completed on stream (1-64 bytes;
 * RCS_ERR_NOTFOUND and 0 when none), and recording one completed (the highest is kept). */
enum rcs_err journal_release_seq(struct journal *j, const char *stream, long long *seq);
enum rcs_err journal_release_done(struct journal *j, const char *stream, long long seq);

/*
 * Jobs that span a reboot (docs/agent.md "Phases"). A job gets a phase when its script asks
 * to be continued after a reboot (rcs.reboot{resume = ...}); from then on every report of
 * the job carries it (journal_report and the others add it). journal_phase_reboot: the job
 * (RUNNING) waits for its reboot to run phase (a word, proto_word_valid), one more reboot
 * counted, its runs of the phase back to 0, boot_id (at most JOURNAL_MAX_BOOT_ID bytes, ""
 * when unknown) kept. journal_phase_start: the phase's script starts (no longer waiting, one
 * more run, the boot id it runs under). RCS_ERR_NOTFOUND for an unknown job, one not
 * RUNNING, or (start) one without a phase.
 */
#define JOURNAL_MAX_BOOT_ID      64
#define JOURNAL_MAX_SCRIPT_STATE (16 * 1024) /* bytes of rcs.state's JSON text */
struct journal_phase {
	char phase[PROTO_MAX_PHASE + 1]; /* "": the job has no phase (its first run) */
	bool waiting;                    /* waits for its reboot: the phase has not started */
	int runs;                        /* runs of the phase started */
	int reboots;                     /* reboots the job asked for */
	char boot_id[JOURNAL_MAX_BOOT_ID + 1];
};
enum rcs_err journal_phase_get(struct journal *j, const char *job, struct journal_phase *out);
enum rcs_err journal_phase_reboot(struct journal *j, const char *job, const char *phase,
				  const char *boot_id);
enum rcs_err journal_phase_start(struct journal *j, const char *job, const char *boot_id);
/* A RUNNING job waiting for its reboot back to QUEUED (the reboot did not come): it is the
 * next one journal_next_queued returns, as any queued job with a phase. */
enum rcs_err journal_requeue_job(struct journal *j, const char *job);
/* At start, before journal_each_running: the jobs with a phase that were waiting for their
 * reboot, or whose phase was cut short fewer than max_runs runs into it, back to QUEUED
 * (*n of them); the others stay RUNNING, for journal_each_running (interrupted). */
enum rcs_err journal_requeue_phases(struct journal *j, int max_runs, size_t *n);
/* rcs.state of a job: its JSON text (malloc'd; NULL when none was set), and replacing it
 * (json NULL: empty; over JOURNAL_MAX_SCRIPT_STATE bytes: RCS_ERR_TOOBIG). Durable when
 * set returns; dropped with the job's final report. */
enum rcs_err journal_script_state_get(struct journal *j, const char *job, char **json);
enum rcs_err journal_script_state_set(struct journal *j, const char *job, const char *json);

/*
 * Housekeeping: drops the envelope payloads of DONE/DROPPED jobs received
 * more than keep seconds before now. Idents stay, so repeats are still
 * recognised and answered; bounded all the same: the final reports of all
 * but the newest JOURNAL_KEEP_FINAL_REPORTS finished jobs are dropped, and
 * the rows of all but the newest JOURNAL_KEEP_IDENTS finished jobs (never a
 * job with a report still in the outbox). keep >= 0.
 */
enum rcs_err journal_prune(struct journal *j, int64_t now, int64_t keep);

#endif
