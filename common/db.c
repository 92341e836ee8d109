/*
 * db.c - SQLite's result codes, the statement cache and migrations. See db.h.
 */
#include "db.h"

#include <errno.h>
#include <stdio.h>

#include "log.h"

enum rcs_err db_rc(sqlite3 *db, int rc, const char *who, const char *what)
{
	int sys;

	switch (rc) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return RCS_OK;
	default:
		break;
	}
	sys = sqlite3_system_errno(db);
	log_warnx("%s: %.100s: %s (%d/%d)", who, what, sqlite3_errmsg(db),
		  sqlite3_extended_errcode(db), sys);
	switch (rc & 0xff) {
	case SQLITE_FULL:
		return RCS_ERR_FULL;
	case SQLITE_IOERR:
		return sys == ENOSPC || sys == EDQUOT ? RCS_ERR_FULL : RCS_ERR_IO;
	case SQLITE_CANTOPEN:
	case SQLITE_PERM:
	case SQLITE_READONLY:
		return RCS_ERR_IO;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return RCS_ERR_BUSY;
	case SQLITE_CONSTRAINT:
		return RCS_ERR_EXISTS;
	case SQLITE_NOMEM:
		return RCS_ERR_NOMEM;
	case SQLITE_TOOBIG:
		return RCS_ERR_TOOBIG;
	default:
		return RCS_ERR_DB;
	}
}

enum rcs_err db_prepare_fresh(sqlite3 *db, const char *who, const char *sql, sqlite3_stmt **out)
{
	int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);

	if (rc != SQLITE_OK) {
		*out = NULL;
		return db_rc(db, rc, who, sql);
	}
	return RCS_OK;
}

enum rcs_err db_prepare(struct db_cache *c, sqlite3 *db, const char *who, const char *sql,
			sqlite3_stmt **out)
{
	enum rcs_err err;
	int free_slot = -1;

	*out = NULL;
	for (int i = 0; i < c->n; i++) {
		if (c->slot[i].sql != sql)
			continue;
		if (c->slot[i].busy)
			return db_prepare_fresh(db, who, sql, out); /* nested use */
		c->slot[i].busy = true;
		*out = c->slot[i].stmt;
		return RCS_OK;
	}
	if (c->n < DB_CACHE_MAX)
		free_slot = c->n;
	err = db_prepare_fresh(db, who, sql, out);
	if (err != RCS_OK || free_slot < 0)
		return err;
	c->slot[free_slot].sql = sql;
	c->slot[free_slot].stmt = *out;
	c->slot[free_slot].busy = true;
	c->n++;
	return RCS_OK;
}

void db_release(struct db_cache *c, sqlite3_stmt *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < c->n; i++) {
		if (c->slot[i].stmt == s) {
			sqlite3_reset(s);
			sqlite3_clear_bindings(s);
			c->slot[i].busy = false;
			return;
		}
	}
	sqlite3_finalize(s);
}

void db_cache_clear(struct db_cache *c)
{
	for (int i = 0; i < c->n; i++)
		sqlite3_finalize(c->slot[i].stmt);
	c->n = 0;
}

static enum rcs_err db_exec(sqlite3 *db, const char *who, const char *sql)
{
	return db_rc(db, sqlite3_exec(db, sql, NULL, NULL, NULL), who, sql);
}

static enum rcs_err db_pragma_int(sqlite3 *db, const char *who, const char *sql, long long *out)
{
	sqlite3_stmt *s = NULL;
	enum rcs_err err;
	int rc;

	*out = 0;
	err = db_prepare_fresh(db, who, sql, &s);
	if (err != RCS_OK)
		return err;
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int64(s, 0);
	else
		err = db_rc(db, rc, who, sql);
	sqlite3_finalize(s);
	return err;
}

enum rcs_err db_migrate(sqlite3 *db, const char *who, const char *const *migrations, size_t n,
			int app_id)
{
	long long have = 0, app = 0;
	char pragma[64];
	enum rcs_err err;

	if ((err = db_pragma_int(db, who, "PRAGMA application_id", &app)) != RCS_OK ||
	    (err = db_pragma_int(db, who, "PRAGMA user_version", &have)) != RCS_OK)
		return err;
	if (app_id != 0 && app != 0 && app != app_id) {
		log_warnx("%s: the database is another program's (application_id %lld)", who, app);
		return RCS_ERR_DB;
	}
	if (have > (long long)n) {
		log_warnx("%s: the database's schema %lld is newer than this program's (%zu)", who,
			  have, n);
		return RCS_ERR_DB;
	}
	for (long long v = have; v < (long long)n; v++) {
		err = db_exec(db, who, "BEGIN IMMEDIATE");
		if (err != RCS_OK)
			return err;
		err = db_exec(db, who, migrations[v]);
		if (err == RCS_OK) {
			snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %lld", v + 1);
			err = db_exec(db, who, pragma);
		}
		if (err == RCS_OK && v == 0 && app_id != 0) {
			snprintf(pragma, sizeof(pragma), "PRAGMA application_id = %d", app_id);
			err = db_exec(db, who, pragma);
		}
		if (err == RCS_OK)
			err = db_exec(db, who, "COMMIT");
		if (err != RCS_OK) {
			if (!sqlite3_get_autocommit(db))
				sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return err;
		}
		log_info("%s: migrated to schema %lld", who, v + 1);
	}
	return RCS_OK;
}
