/*
 * store.h - the core of the coordinator's storage, whose domains each have a header.
 *
 * Every SQL statement of the coordinator lives in the store's files, one per domain, each
 * with its header: store_keys.h, store_tasks.h, store_devices.h, store_jobs.h,
 * store_groups.h, store_webhooks.h, store_audit.h, store_outbox.h (the notifier's), and
 * store_queues.h (the due work of the transport, the scheduler and the senders, and the
 * claims that let coordinators share it). They reach the database through one backend seam
 * (store_int.h): SQLite (store_sqlite.c) or PostgreSQL (store_pg.c). This header is the
 * core (store.c): opening, readers, transactions, after-commit actions, pages of lists.
 * docs/architecture.md, "The store".
 *
 * Concurrency: one connection and one (recursive) lock: every call is atomic,
 * and store_tx_begin()/store_tx_end() make a group of calls one transaction
 * (the calling thread holds the lock in between). Writers never see
 * SQLITE_BUSY from each other; another process (the CLI) is waited for.
 *
 * Reads answer typed records (struct ..._rec, lists with their page), which the caller
 * frees with the matching _free function; render.h turns them into the API's JSON. JSON
 * documents that pass through (tags, variables, declared variables, constants, lists of
 * addresses and statuses, signatures) are JSON text on both sides, as the API checked
 * them. Every function returns an enum rcs_err: RCS_ERR_NOTFOUND for a missing object
 * or one of another tenant, RCS_ERR_FULL when the disk is full, RCS_ERR_DB for other
 * storage errors.
 */
#ifndef RCS_STORE_H
#define RCS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "uuid.h"

struct store;

/* Opens (creating when needed) and migrates the database at path. */
enum rcs_err store_open(const char *path, struct store **out);
void store_close(struct store *st);
/* A cheap query of the database (for health checks): RCS_OK, or the error of the
 * query; RCS_ERR_IO when the database file was removed or renamed since it was opened. */
enum rcs_err store_ping(struct store *st);

/*
 * Readers (docs/architecture.md, "Reads and group commit"): n more connections to the
 * database that only read, so reads never wait for a write. store_reader takes one (waiting
 * while all are taken; the store itself when there is no pool: an in-memory database or
 * a backend without readers) and store_reader_put gives it back. A reader is a struct
 * store every function that only reads takes; it sees every write committed before the
 * call. A write through it fails (RCS_ERR_DB).
 */
enum rcs_err store_readers_open(struct store *st, unsigned n);
struct store *store_reader(struct store *st);
void store_reader_put(struct store *st, struct store *r);
/* A read transaction on reader r (nothing on a store that isn't a reader): every read
 * until store_read_end sees one snapshot, so a page's count and its rows agree. */
enum rcs_err store_read_begin(struct store *r);
void store_read_end(struct store *r);

/* Groups calls into one transaction. end(commit=false) rolls back. Inside the
 * calling thread's own transaction, begin/end make a savepoint of it. */
enum rcs_err store_tx_begin(struct store *st);
enum rcs_err store_tx_end(struct store *st, bool commit);

/*
 * Runs fn(arg, committed) once the calling thread's outermost transaction has
 * ended, after the store's lock is released (committed false: rolled back, or
 * the commit failed). Registered inside a savepoint (a nested store_tx_begin)
 * that is rolled back, it runs at once with false, still inside the enclosing
 * transaction. Outside a transaction it runs at once with true. For what must
 * not happen before the data is durable, such as publishing a job's envelope.
 * RCS_ERR_NOMEM or RCS_ERR_FULL (more than STORE_ACTIONS_MAX waiting): not
 * registered, fn is not called.
 */
#define STORE_ACTIONS_MAX 1048576
enum rcs_err store_after_commit(struct store *st, void (*fn)(void *arg, bool committed), void *arg);

/*
 * A page of a list (page from 1, per_page 1..500) and the list's options, checked by the
 * API before they get here (docs/api.md "Lists"): sort is one of the keys the list takes
 * ("created_at", "update_at", "name"), never NULL; created_after/created_before bound
 * created_at (exclusive) when has_after/has_before; name is an exact name or NULL.
 */
struct store_page {
	long long page;
	long long per_page;
	const char *sort;
	bool desc;
	bool has_after, has_before;
	long long created_after, created_before;
	const char *name;
	/* ident_prefix, ident_suffix (docs/api.md "Lists"): lowercase hex and '-', "" when
	 * not given */
	char ident_prefix[UUID_STR_LEN], ident_suffix[UUID_STR_LEN];
};

/* Where a page of a list stands: the page asked for and the list's total (render.h writes
 * it as {page, per_page, total_pages, total_items, items}). */
struct store_page_info {
	long long page, per_page, total;
};

/* Idents (of jobs, tasks), in the order of the query that listed them; free with
 * store_idents_free. */
struct store_idents {
	char (*v)[UUID_STR_LEN];
	size_t n;
};
void store_idents_free(struct store_idents *ids);
/* Orders two idents of a store_idents' v (qsort, bsearch). */
int store_ident_cmp(const void *a, const void *b);
/* The database's size in bytes. */
enum rcs_err store_db_size(struct store *st, long long *bytes);

#endif
