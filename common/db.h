/*
 * db.h - what the coordinator's store and the agent's journal share on SQLite
 * (docs/architecture.md): one mapping of SQLite's result codes to rcs_err, one cache of
 * prepared statements, one migration engine. Each caller serialises its own use of a
 * connection (a struct db_cache belongs to one connection and is used under its lock).
 */
#ifndef RCS_DB_H
#define RCS_DB_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/*
 * RCS_OK for SQLITE_OK, _ROW and _DONE; otherwise logs "who: what: SQLite's message" and
 * maps: FULL, and an I/O error from ENOSPC or EDQUOT, to RCS_ERR_FULL; other I/O errors,
 * CANTOPEN, PERM and READONLY to RCS_ERR_IO; BUSY and LOCKED to RCS_ERR_BUSY; CONSTRAINT
 * to RCS_ERR_EXISTS; NOMEM, TOOBIG as such; anything else to RCS_ERR_DB.
 */
enum rcs_err db_rc(sqlite3 *db, int rc, const char *who, const char *what);

#define DB_CACHE_MAX 64

/* Statements of constant SQL, prepared once: parsing SQL was half the cost of applying a
 * report (BENCHMARKS.md). */
struct db_cache {
	struct {
		const char *sql; /* a string literal or static array: compared by address */
		sqlite3_stmt *stmt;
		bool busy; /* in use: a nested use of the same SQL gets a statement of its own */
	} slot[DB_CACHE_MAX];
	int n;
};

/* A statement for this use only (finalized by db_release). */
enum rcs_err db_prepare_fresh(sqlite3 *db, const char *who, const char *sql, sqlite3_stmt **out);
/* The cached statement of sql (kept for the connection's life when a slot is free); give
 * it back with db_release. sql must be a string literal or a static array. */
enum rcs_err db_prepare(struct db_cache *c, sqlite3 *db, const char *who, const char *sql,
			sqlite3_stmt **out);
/* Ends the use of a statement: reset and kept when cached, finalized otherwise. NULL is
 * fine. */
void db_release(struct db_cache *c, sqlite3_stmt *s);
/* Finalizes every cached statement (before closing the connection). */
void db_cache_clear(struct db_cache *c);

/*
 * Brings the schema (PRAGMA user_version) to n: migration v (0-based) runs in a
 * transaction of its own with the version it reaches. With app_id != 0 the file must be
 * new or carry that application_id (set by the first migration): another program's
 * database is RCS_ERR_DB. A schema newer than n is RCS_ERR_DB too.
 */
enum rcs_err db_migrate(sqlite3 *db, const char *who, const char *const *migrations, size_t n,
			int app_id);

#endif
