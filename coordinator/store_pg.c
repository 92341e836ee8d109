/*
 * store_pg.c - the store's PostgreSQL backend (--db postgresql://...): the migrations of
 * store_schema.c (table schema_version), opening and closing, and the operations of the
 * backend seam of store_int.h over libpq. The domain files' SQL is the subset both engines
 * take; at prepare this backend translates it to PostgreSQL's: ?N and ? parameters to $N, the
 * column user to "user" (a reserved word here), INTEGER to BIGINT (casts: SQLite's integers
 * are 64 bits; booleans too are BIGINT, 0 and 1, as the domain files compare them), SQLite's
 * scalar max(a, b) and min(a, b) to greatest and least, and it drops SQLite's index hints
 * (INDEXED BY). A migration's schema words too: SQLite's rowid key (INTEGER PRIMARY KEY) to
 * an identity column, BLOB to TEXT (script sources), WITHOUT ROWID dropped. Where that is not
 * enough a statement has a text per dialect (STORE_SQL). Statements are prepared once per
 * connection (pg_run), results are text; parameters bound as integers are sent as int8, the
 * others as text of a type the server infers. docs/architecture.md, "The store".
 * Size: over 800 lines: one engine's side of the seam, whose parts (the translation, the statements
 * kept per connection, reconnects, the LISTEN thread) share the connection's private state.
 */
#include "store_int.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

/* ---- statements ---- */

#define PG_PARAMS_MAX 65535 /* the protocol's bound */
#define PG_INT8OID    20
#define PG_TEXTOID    25
#define PG_PREP_SLOTS 4096 /* prepared statements kept per connection (a power of 2) */

/* The connection and the statements prepared on it, by the hash of their text and the types
 * of their parameters (named s<id>; key 0 is a free slot). */
struct pg_conn {
	PGconn *c;
	long long changes; /* rows the last statement changed */
	bool idle;         /* no transaction was open after the last statement */
	struct pg_prep {
		uint64_t key;
		unsigned id;
	} prep[PG_PREP_SLOTS];
	unsigned n_prep;
};

static struct pg_conn *pg_conn(struct store *st)
{
	return st->conn;
}

struct pg_stmt {
	struct store_stmt base; /* first: the seam's view of it */
	char *sql;              /* translated */
	int n_params;
	char **vals; /* n_params of each */
	Oid *types;
	PGresult *res;
	int row, n_rows;
	bool ran;
	bool nul; /* a text parameter holds a NUL byte, which PostgreSQL's text can't */
};

static struct pg_stmt *pg(struct store_stmt *s)
{
	return (struct pg_stmt *)s;
}

/* The SQLSTATE of a failed result (or of the connection's loss) as an rcs_err. */
static enum rcs_err pg_rc(struct store *st, const PGresult *r, const char *what)
{
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = r ? PQresultErrorMessage(r) : PQerrorMessage(pg_conn(st)->c);

	log_warnx("store: %.100s: %s (%s)", what, msg ? msg : "?", state ? state : "-");
	if (PQstatus(pg_conn(st)->c) != CONNECTION_OK || state == NULL)
		return RCS_ERR_IO;
	if (strncmp(state, "23", 2) == 0) /* integrity constraint violation */
		return RCS_ERR_EXISTS;
	if (strcmp(state, "53100") == 0 || strcmp(state, "53400") == 0) /* disk full, limits */
		return RCS_ERR_FULL;
	if (strcmp(state, "53200") == 0)
		return RCS_ERR_NOMEM;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
	    strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0)
		return RCS_ERR_BUSY;
	if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
	    strncmp(state, "58", 2) == 0)
		return RCS_ERR_IO;
	if (strcmp(state, "54000") == 0)
		return RCS_ERR_TOOBIG;
	return RCS_ERR_DB;
}

static bool pg_ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* Whether the identifier of n bytes at p is word (case-insensitive). */
static bool pg_word(const char *p, size_t n, const char *word)
{
	return strlen(word) == n && strncasecmp(p, word, n) == 0;
}

/* Whether the call whose '(' is at p has two arguments or more (a comma at its own level). */
static bool pg_two_args(const char *p)
{
	int depth = 0;
	bool quote = false;

	for (; *p; p++) {
		if (quote) {
			if (*p == '\'')
				quote = false;
		} else if (*p == '\'') {
			quote = true;
		} else if (*p == '(') {
			depth++;
		} else if (*p == ')') {
			if (--depth == 0)
				return false;
		} else if (*p == ',' && depth == 1) {
			return true;
		}
	}
	return false;
}

/* The length of white space and then the words next at p (case-insensitive, a whole word),
 * 0 when p does not go on with them. */
static size_t pg_then(const char *p, const char *next)
{
	const char *q = p;
	size_t n = strlen(next);

	while (*q == ' ' || *q == '\n')
		q++;
	if (q == p || strncasecmp(q, next, n) != 0 || pg_ident_char(q[n]))
		return 0;
	return (size_t)(q - p) + n;
}

/* Translates the common SQL to PostgreSQL's (the file's header), a migration's (schema) with
 * its schema words: a malloc'd text and the number of parameters; NULL when out of memory. */
static char *pg_translate(const char *sql, bool schema, int *n_params)
{
	/* every rewrite at most quadruples what it replaces ("?" -> "$NNN"): never cut */
	size_t cap = strlen(sql) * 8 + 64, o = 0;
	char *out = malloc(cap);
	const char *p = sql;
	int top = 0;

	*n_params = 0;
	if (out == NULL)
		return NULL;
	while (*p && o + 16 < cap) {
		if (*p == '\'' || *p == '"') {
			char q = *p;

			out[o++] = *p++;
			while (*p && o + 16 < cap) {
				out[o++] = *p;
				if (*p++ == q)
					break;
			}
		} else if (*p == '?') {
			long n;
			char *end;

			p++;
			if (isdigit((unsigned char)*p)) {
				n = strtol(p, &end, 10);
				p = end;
			} else {
				n = top + 1;
			}
			if (n < 1 || n > PG_PARAMS_MAX) { /* the store's own SQL: a bug */
				free(out);
				return NULL;
			}
			if (n > top)
				top = (int)n;
			o += (size_t)snprintf(out + o, cap - o, "$%ld", n);
		} else if ((isalpha((unsigned char)*p) || *p == '_') &&
			   (p == sql || !pg_ident_char(p[-1]))) {
			const char *w = p;
			size_t n, k;

			while (pg_ident_char(*p))
				p++;
			n = (size_t)(p - w);
			if (schema && pg_word(w, n, "integer") &&
			    (k = pg_then(p, "PRIMARY KEY")) > 0) {
				p += k; /* SQLite's rowid key */
				o += (size_t)snprintf(out + o, cap - o,
						      "BIGINT GENERATED BY DEFAULT AS IDENTITY"
						      " PRIMARY KEY");
			} else if (schema && pg_word(w, n, "without") &&
				   (k = pg_then(p, "ROWID")) > 0) {
				p += k; /* SQLite's table option */
			} else if (schema && pg_word(w, n, "blob")) {
				o += (size_t)snprintf(out + o, cap - o, "TEXT");
			} else if (pg_word(w, n, "indexed")) {
				/* SQLite's index hint: PostgreSQL's planner chooses */
				while (*p == ' ')
					p++;
				while (pg_ident_char(*p)) /* BY */
					p++;
				while (*p == ' ')
					p++;
				while (pg_ident_char(*p)) /* the index */
					p++;
			} else if (pg_word(w, n, "user"))
				o += (size_t)snprintf(out + o, cap - o, "\"user\"");
			else if (pg_word(w, n, "integer"))
				o += (size_t)snprintf(out + o, cap - o, "BIGINT");
			else if (pg_word(w, n, "max") && *p == '(' && pg_two_args(p))
				o += (size_t)snprintf(out + o, cap - o, "greatest");
			else if (pg_word(w, n, "min") && *p == '(' && pg_two_args(p))
				o += (size_t)snprintf(out + o, cap - o, "least");
			else {
				memcpy(out + o, w, n);
				o += n;
			}
		} else {
			out[o++] = *p++;
		}
	}
	if (*p) { /* cannot happen: every rewrite is shorter than the room left */
		free(out);
		return NULL;
	}
	out[o] = '\0';
	*n_params = top;
	return out;
}

static enum rcs_err pg_exec(struct store *st, const char *sql)
{
	PGresult *r = PQexec(pg_conn(st)->c, sql);
	enum rcs_err err = RCS_OK;

	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		err = pg_rc(st, r, sql);
	PQclear(r);
	return err;
}

static enum rcs_err pg_prepare(struct store *st, const char *sql, bool cached,
			       struct store_stmt **out)
{
	struct pg_stmt *w = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	(void)st;
	(void)cached;
	*out = NULL;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		goto out;
	w->base.be = &store_pg_backend;
	w->sql = pg_translate(sql, false, &w->n_params);
	if (w->sql == NULL)
		goto out;
	if (w->n_params > PG_PARAMS_MAX) {
		log_warnx("store: %.100s: more than %d parameters", sql, PG_PARAMS_MAX);
		err = RCS_ERR_INTERNAL;
		goto out;
	}
	w->vals = calloc((size_t)w->n_params + 1, sizeof(*w->vals));
	w->types = calloc((size_t)w->n_params + 1, sizeof(*w->types));
	if (w->vals == NULL || w->types == NULL)
		goto out;
	*out = &w->base;
	w = NULL;
	err = RCS_OK;
out:
	if (w) {
		free(w->vals);
		free(w->types);
		free(w->sql);
		free(w);
	}
	return err;
}

static void pg_release(struct store *st, struct store_stmt *s)
{
	struct pg_stmt *w = pg(s);

	(void)st;
	for (int i = 0; i < w->n_params; i++)
		free(w->vals[i]);
	PQclear(w->res);
	free(w->vals);
	free(w->types);
	free(w->sql);
	free(w);
}

/* The statement's key: its text and the types its parameters are bound with. */
static uint64_t pg_key(const struct pg_stmt *w)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = w->sql; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	for (int i = 0; i < w->n_params; i++)
		h = (h ^ (w->types[i] == PG_INT8OID ? 'i' : 't')) * 1099511628211ULL;
	return h ? h : 1;
}

/* The slot of key: its own, or the free one where it goes (NULL: the table is half full,
 * statements are no longer kept). */
static struct pg_prep *pg_slot(struct pg_conn *c, uint64_t key)
{
	for (size_t i = 0; i < PG_PREP_SLOTS; i++) {
		struct pg_prep *e = &c->prep[(key + i) & (PG_PREP_SLOTS - 1)];

		if (e->key == key)
			return e;
		if (e->key == 0)
			return c->n_prep >= PG_PREP_SLOTS / 2 ? NULL : e;
	}
	return NULL;
}

/* The number of the parameter an error names ("... parameter $3"), 0 for none. */
static int pg_err_param(const PGresult *r)
{
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
	const char *d = msg ? strchr(msg, '$') : NULL;

	if (state == NULL || d == NULL ||
	    (strcmp(state, "42P18") != 0 && strcmp(state, "42P08") != 0))
		return 0;
	return (int)strtol(d + 1, NULL, 10);
}

/*
 * Prepares w as name. A parameter bound as text is sent untyped, for the server to take the
 * type its place in the statement asks for; where that is none ("?1 IS NULL") or two
 * ("CASE WHEN ?3 IS NULL ... ELSE ?3"), it is prepared again with that parameter as text.
 * Inside a transaction a savepoint keeps the transaction alive through those attempts.
 */
static enum rcs_err pg_make(struct store *st, struct pg_stmt *w, const char *name, const char *what)
{
	struct pg_conn *c = pg_conn(st);
	bool sp = PQtransactionStatus(c->c) == PQTRANS_INTRANS;
	enum rcs_err err = RCS_ERR_DB;
	Oid *types = malloc(((size_t)w->n_params + 1) * sizeof(*types));
	PGresult *r = NULL;

	if (types == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	memcpy(types, w->types, (size_t)w->n_params * sizeof(*types));
	for (int tries = 0; tries <= w->n_params; tries++) {
		int bad;

		if (sp && (err = pg_exec(st, "SAVEPOINT pg_prep")) != RCS_OK)
			goto out;
		r = PQprepare(c->c, name, w->sql, w->n_params, types);
		if (PQresultStatus(r) == PGRES_COMMAND_OK) {
			err = sp ? pg_exec(st, "RELEASE pg_prep") : RCS_OK;
			goto out;
		}
		bad = pg_err_param(r);
		if (bad < 1 || bad > w->n_params || types[bad - 1] == PG_TEXTOID) {
			err = pg_rc(st, r, what);
			if (sp)
				pg_exec(st, "ROLLBACK TO pg_prep; RELEASE pg_prep");
			goto out;
		}
		if (sp && (err = pg_exec(st, "ROLLBACK TO pg_prep; RELEASE pg_prep")) != RCS_OK)
			goto out;
		types[bad - 1] = PG_TEXTOID;
		PQclear(r);
		r = NULL;
	}
out:
	free(types);
	PQclear(r);
	return err;
}

/* Runs w through the connection's prepared statement of its text and types (prepared the
 * first time), or through an unnamed one when no more are kept. */
static enum rcs_err pg_run(struct store *st, struct pg_stmt *w, const char *what)
{
	struct pg_conn *c = pg_conn(st);
	uint64_t key = pg_key(w);
	struct pg_prep *e = pg_slot(c, key);
	char name[24] = "";
	enum rcs_err err;

	if (e && e->key == key) {
		snprintf(name, sizeof(name), "s%u", e->id);
	} else {
		if (e)
			snprintf(name, sizeof(name), "s%u", c->n_prep + 1);
		err = pg_make(st, w, name, what);
		if (err != RCS_OK)
			return err;
		if (e) {
			e->key = key;
			e->id = ++c->n_prep;
		}
	}
	w->res =
	    PQexecPrepared(c->c, name, w->n_params, (const char *const *)w->vals, NULL, NULL, 0);
	return RCS_OK;
}

/* Forgets the prepared statements (a new connection has none). */
static void pg_forget(struct pg_conn *c)
{
	memset(c->prep, 0, sizeof(c->prep));
	c->n_prep = 0;
}

/* COMMIT of a transaction an error ended answers ROLLBACK: the commit failed. */
static bool pg_rolled_back(const char *sql, PGresult *r)
{
	return strcmp(sql, "COMMIT") == 0 && strcmp(PQcmdStatus(r), "ROLLBACK") == 0;
}

static void pg_reset(struct store_stmt *s)
{
	struct pg_stmt *w = pg(s);

	PQclear(w->res);
	w->res = NULL;
	w->ran = false;
	w->row = w->n_rows = 0;
}

static enum rcs_err pg_step(struct store *st, struct store_stmt *s, const char *what, bool *row)
{
	struct pg_stmt *w = pg(s);
	struct pg_conn *c = pg_conn(st);
	enum rcs_err err = RCS_OK;
	const char *tuples;
	bool retry;

	*row = false;
	if (w->ran) {
		if (w->row + 1 < w->n_rows)
			w->row++, *row = true;
		else
			w->row = w->n_rows;
		goto out;
	}
	w->ran = true;
	c->changes = 0;
	/* a lost connection comes back at the next statement outside a transaction (a BEGIN
	 * after the failed one's ROLLBACK): never in the middle of one */
	retry = c->idle || strcmp(w->sql, "BEGIN") == 0;
	if (PQstatus(c->c) != CONNECTION_OK && retry) {
		log_warnx("store: the connection to PostgreSQL was lost; reconnecting");
		PQreset(c->c);
		pg_forget(c);
	}
	if (w->nul) {
		log_warnx("store: %.100s: a text with a NUL byte", what);
		err = RCS_ERR_INVAL;
		goto out;
	}
	err = pg_run(st, w, what);
	/* a connection that dies at its first statement (a server that went away and came
	 * back since the last one: the socket libpq kept is dead): a BEGIN or a read outside
	 * a transaction runs again once, on a new one (a write might have been done by the
	 * server before it went away: never twice) */
	if ((err != RCS_OK || PQresultStatus(w->res) == PGRES_FATAL_ERROR) &&
	    PQstatus(c->c) != CONNECTION_OK && retry &&
	    (strcmp(w->sql, "BEGIN") == 0 || strncmp(w->sql, "SELECT", 6) == 0)) {
		log_warnx("store: the connection to PostgreSQL was lost; reconnecting");
		PQclear(w->res);
		w->res = NULL;
		PQreset(c->c);
		pg_forget(c);
		err = pg_run(st, w, what);
	}
	if (err != RCS_OK)
		goto out;
	switch (PQresultStatus(w->res)) {
	case PGRES_TUPLES_OK:
	case PGRES_COMMAND_OK:
		break;
	default:
		c->changes = 0;
		err = pg_rc(st, w->res, what);
		goto out;
	}
	if (pg_rolled_back(w->sql, w->res)) {
		log_warnx("store: %.100s: the transaction was rolled back", what);
		err = RCS_ERR_DB;
		goto out;
	}
	tuples = PQcmdTuples(w->res);
	c->changes = tuples[0] ? strtoll(tuples, NULL, 10) : 0;
	w->n_rows = PQntuples(w->res);
	w->row = 0;
	*row = w->n_rows > 0;
out:
	if (PQtransactionStatus(c->c) != PQTRANS_UNKNOWN) /* unknown: the connection is lost */
		c->idle = PQtransactionStatus(c->c) == PQTRANS_IDLE;
	return err;
}

static void pg_bind(struct store_stmt *s, int i, char *v, Oid type)
{
	struct pg_stmt *w = pg(s);

	if (i < 1 || i > w->n_params) {
		free(v);
		return;
	}
	free(w->vals[i - 1]);
	w->vals[i - 1] = v;
	w->types[i - 1] = type;
}

static void pg_bind_text(struct store_stmt *s, int i, const char *v, size_t len)
{
	size_t n = len == (size_t)-1 ? strlen(v) : len;
	char *c = malloc(n + 1);

	if (memchr(v, '\0', n) != NULL)
		pg(s)->nul = true;
	/* out of memory binds NULL: the statement fails on its NOT NULL constraint */
	if (c) {
		memcpy(c, v, n);
		c[n] = '\0';
	}
	pg_bind(s, i, c, 0);
}

static void pg_bind_int(struct store_stmt *s, int i, long long v)
{
	char num[24], *c;

	snprintf(num, sizeof(num), "%lld", v);
	c = strdup(num);
	pg_bind(s, i, c, PG_INT8OID);
}

static void pg_bind_null(struct store_stmt *s, int i)
{
	pg_bind(s, i, NULL, 0);
}

static bool pg_has(struct store_stmt *s, int i)
{
	struct pg_stmt *w = pg(s);

	return w->res && w->row < w->n_rows && i < PQnfields(w->res);
}

static bool pg_is_null(struct store_stmt *s, int i)
{
	return !pg_has(s, i) || PQgetisnull(pg(s)->res, pg(s)->row, i);
}

static const char *pg_text(struct store_stmt *s, int i)
{
	if (pg_is_null(s, i))
		return NULL;
	return PQgetvalue(pg(s)->res, pg(s)->row, i);
}

static size_t pg_len(struct store_stmt *s, int i)
{
	if (pg_is_null(s, i))
		return 0;
	return (size_t)PQgetlength(pg(s)->res, pg(s)->row, i);
}

/* Integers as text; a boolean (a comparison as a column) as 1 or 0. */
static long long pg_integer(struct store_stmt *s, int i)
{
	const char *t = pg_text(s, i);

	if (t == NULL)
		return 0;
	if (t[0] == 't' && t[1] == '\0')
		return 1;
	return strtoll(t, NULL, 10);
}

static long long pg_changes(struct store *st)
{
	return pg_conn(st)->changes;
}

/* An error inside a transaction leaves it open but failed: it still needs its ROLLBACK. */
static bool pg_in_tx(struct store *st)
{
	PGTransactionStatusType t = PQtransactionStatus(pg_conn(st)->c);

	return t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

static enum rcs_err pg_ping(struct store *st)
{
	struct pg_conn *c = pg_conn(st);

	/* a lost connection comes back here, outside a transaction */
	if (PQstatus(c->c) != CONNECTION_OK && c->idle) {
		log_warnx("store: the connection to PostgreSQL was lost; reconnecting");
		PQreset(c->c);
		pg_forget(c);
	}
	if (PQstatus(c->c) != CONNECTION_OK) {
		log_warnx("store: %s", PQerrorMessage(c->c));
		return RCS_ERR_IO;
	}
	return pg_exec(st, "SELECT 1");
}

static void pg_close(struct store *st)
{
	struct pg_conn *c = pg_conn(st);

	if (c == NULL)
		return;
	if (c->c)
		PQfinish(c->c);
	free(c);
	st->conn = NULL;
}

/* ---- opening ---- */

/* The one-value answer of sql as an integer (0 for none). */
static enum rcs_err pg_value(struct store *st, const char *sql, long long *v)
{
	PGresult *r = PQexec(pg_conn(st)->c, sql);
	enum rcs_err err = RCS_OK;

	*v = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		err = pg_rc(st, r, sql);
	else if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
		*v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return err;
}

/* Connects to url with the session settings as connection parameters, so that PQreset
 * keeps them (a SET would be gone after a reconnect): UTF-8, read-only transactions for a
 * reader, no parallel workers for the writer. */
/* Settings a URL may give and otherwise gets: a server that stops answering (packets
 * dropped, no reset) is given up within seconds rather than the kernel's minutes, so a
 * reconnect under the store's lock or the LISTEN thread's connect never hangs for long. */
static const char *const pg_defaults[][2] = {
    {"connect_timeout", "10"},     {"keepalives", "1"},       {"keepalives_idle", "30"},
    {"keepalives_interval", "10"}, {"keepalives_count", "3"},
};
#define PG_N_DEFAULTS (sizeof(pg_defaults) / sizeof(pg_defaults[0]))
#define PG_CONN_KEYS  96

/*
 * A connection to the database of url: its parameters as the URL gives them, UTF-8, the
 * defaults above where the URL is silent, and added to the URL's own `options` (a
 * search_path given there holds for every connection): for a reader transactions
 * read-only; for the writer no parallel workers. The writer's statements are short and
 * keyed, and the few a planner runs in parallel (the look at the due jobs of a large send)
 * took twice the CPU that way on the machines of BENCHMARKS.md section 26.
 */
static PGconn *pg_connect(const char *url, bool read_only)
{
	const char *keys[PG_CONN_KEYS], *vals[PG_CONN_KEYS];
	const char *extra = read_only ? "-c default_transaction_read_only=on"
				      : "-c max_parallel_workers_per_gather=0";
	PQconninfoOption *info = PQconninfoParse(url, NULL);
	char *options = NULL;
	bool given[PG_N_DEFAULTS] = {false};
	size_t n = 0;
	PGconn *c = NULL;

	if (info == NULL) {
		/* not a URL libpq reads: its connect says why */
		keys[0] = "dbname", vals[0] = url, keys[1] = vals[1] = NULL;
		c = PQconnectdbParams(keys, vals, 1);
		goto out;
	}
	for (PQconninfoOption *o = info; o->keyword; o++) {
		if (o->val == NULL || o->val[0] == '\0' ||
		    strcmp(o->keyword, "client_encoding") == 0)
			continue;
		for (size_t i = 0; i < PG_N_DEFAULTS; i++)
			if (strcmp(o->keyword, pg_defaults[i][0]) == 0)
				given[i] = true;
		if (strcmp(o->keyword, "options") == 0) {
			size_t len = strlen(o->val) + strlen(extra) + 2;

			options = malloc(len);
			if (options == NULL)
				goto out;
			snprintf(options, len, "%s %s", o->val, extra);
			continue;
		}
		if (n + PG_N_DEFAULTS + 3 >= PG_CONN_KEYS)
			break; /* more than libpq has */
		keys[n] = o->keyword, vals[n++] = o->val;
	}
	keys[n] = "client_encoding", vals[n++] = "UTF8";
	for (size_t i = 0; i < PG_N_DEFAULTS; i++)
		if (!given[i])
			keys[n] = pg_defaults[i][0], vals[n++] = pg_defaults[i][1];
	keys[n] = "options", vals[n++] = options ? options : extra;
	keys[n] = vals[n] = NULL;
	c = PQconnectdbParams(keys, vals, 0);
out:
	free(options);
	if (info)
		PQconninfoFree(info);
	return c;
}

/* Runs migration m of store_schema.c: its common SQL translated, then PostgreSQL's own. */
static enum rcs_err pg_migration(struct store *st, const struct store_migration *m)
{
	enum rcs_err err = RCS_OK;
	char *sql = NULL;
	int n_params;

	if (m->sql) {
		sql = pg_translate(m->sql, true, &n_params);
		err = sql ? pg_exec(st, sql) : RCS_ERR_NOMEM;
	}
	if (err == RCS_OK && m->postgres)
		err = pg_exec(st, m->postgres);
	free(sql);
	return err;
}

/* Runs the migrations the database lacks, all in one transaction; an advisory lock keeps
 * coordinators that start together from running one twice. */
static enum rcs_err pg_migrate(struct store *st)
{
	size_t n = store_migrations_of(STORE_DIALECT_POSTGRES);
	enum rcs_err err;
	long long have = 0;
	char sql[96];

	err = pg_exec(st, "SET client_min_messages = warning;"
			  "CREATE TABLE IF NOT EXISTS schema_version(version BIGINT NOT NULL)");
	if (err != RCS_OK)
		return err;
	err = pg_exec(st, "BEGIN; SELECT pg_advisory_xact_lock(7210521)");
	if (err != RCS_OK)
		return err;
	err = pg_value(st, "SELECT max(version) FROM schema_version", &have);
	if (err == RCS_OK && have > (long long)n) {
		log_warnx("store: the database's schema %lld is newer than this program's (%zu)",
			  have, n);
		err = RCS_ERR_DB;
	}
	for (long long v = have; err == RCS_OK && v < (long long)n; v++) {
		err = pg_migration(st, &store_migrations[v]);
		if (err == RCS_OK) {
			snprintf(
			    sql, sizeof(sql),
			    "DELETE FROM schema_version; INSERT INTO schema_version VALUES(%lld)",
			    v + 1);
			err = pg_exec(st, sql);
		}
		if (err == RCS_OK)
			log_info("store: migrated to schema %lld", v + 1);
	}
	if (err == RCS_OK)
		err = pg_exec(st, "COMMIT");
	if (err != RCS_OK && pg_in_tx(st))
		pg_exec(st, "ROLLBACK");
	return err;
}

/* Connects st to the database of url: the writer, or a reader (read only). */
static enum rcs_err pg_open_conn(struct store *st, const char *url, bool read_only)
{
	struct pg_conn *c = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto out;
	st->conn = c;
	c->c = pg_connect(url, read_only);
	if (c->c == NULL || PQstatus(c->c) != CONNECTION_OK) {
		/* libpq's message names the host, never the password */
		log_warnx("store: PostgreSQL: %s", c->c ? PQerrorMessage(c->c) : "out of memory");
		err = RCS_ERR_IO;
		goto out;
	}
	c->idle = true;
	err = RCS_OK;
out:
	return err;
}

static enum rcs_err pg_open(struct store *st, const char *url)
{
	enum rcs_err err = pg_open_conn(st, url, false);

	if (err == RCS_OK)
		err = pg_migrate(st);
	return err;
}

/* ---- LISTEN: wake-ups from other coordinators (docs/architecture.md "Claims") ---- */

/* A second connection of its own, on a thread of its own, LISTENing on channel rcs_work
 * (migration 5's triggers and store_claims_release NOTIFY it); reconnects after a loss. */
struct pg_listen {
	PGconn *c;
	PQconninfoOption *info; /* the store connection's parameters */
	void (*fn)(void *ctx);
	void *ctx;
	atomic_ulong *hooks_gen; /* the store's: webhooks changed (store_int.h) */
	pthread_t thread;
	int efd; /* eventfd: stop */
	bool stop;
	pthread_mutex_t lock;
};

static bool pg_listen_stopping(struct pg_listen *l)
{
	bool stop;

	pthread_mutex_lock(&l->lock);
	stop = l->stop;
	pthread_mutex_unlock(&l->lock);
	return stop;
}

/* Connects with the store connection's parameters and LISTENs; false when it can't. */
static bool pg_listen_connect(struct pg_listen *l)
{
	const char *keys[64], *vals[64];
	size_t n = 0;
	PGresult *r;
	bool ok;

	for (PQconninfoOption *o = l->info; o->keyword && n < 63; o++)
		if (o->val && o->val[0]) {
			keys[n] = o->keyword;
			vals[n++] = o->val;
		}
	keys[n] = vals[n] = NULL;
	l->c = PQconnectdbParams(keys, vals, 0);
	if (l->c == NULL || PQstatus(l->c) != CONNECTION_OK) {
		log_warnx("store: LISTEN connection: %s",
			  l->c ? PQerrorMessage(l->c) : "out of memory");
		goto fail;
	}
	r = PQexec(l->c, "LISTEN rcs_work");
	ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	if (ok)
		return true;
	log_warnx("store: LISTEN: %s", PQerrorMessage(l->c));
fail:
	if (l->c)
		PQfinish(l->c);
	l->c = NULL;
	return false;
}

static void *pg_listen_thread(void *arg)
{
	struct pg_listen *l = arg;

	while (!pg_listen_stopping(l)) {
		struct pollfd pfd[2] = {{l->efd, POLLIN, 0}, {-1, POLLIN, 0}};
		bool woke = false;

		if (l->c == NULL) {
			if (!pg_listen_connect(l)) {
				poll(pfd, 1, 1000); /* again a second later, or the stop */
				continue;
			}
			atomic_fetch_add(l->hooks_gen, 1); /* webhooks changed meanwhile? */
			l->fn(l->ctx); /* what was notified while not listening */
		}
		pfd[1].fd = PQsocket(l->c);
		if (poll(pfd, 2, 1000) < 0 && errno != EINTR)
			log_warn("poll");
		if (pfd[0].revents & POLLIN)
			break;
		if (pfd[1].revents == 0)
			continue;
		if (!PQconsumeInput(l->c) || PQstatus(l->c) != CONNECTION_OK) {
			log_warnx("store: LISTEN connection lost; reconnecting");
			PQfinish(l->c);
			l->c = NULL;
			continue;
		}
		for (PGnotify *nt; (nt = PQnotifies(l->c)) != NULL; PQfreemem(nt)) {
			if (nt->extra && strcmp(nt->extra, "webhooks") == 0)
				atomic_fetch_add(l->hooks_gen, 1);
			woke = true;
		}
		if (woke)
			l->fn(l->ctx);
	}
	return NULL;
}

/* The seam's listen (the caller holds the store's lock). */
static enum rcs_err pg_listen(struct store *st, void (*fn)(void *ctx), void *ctx)
{
	struct pg_listen *l = NULL;
	enum rcs_err err = RCS_ERR_NOMEM;

	if (st->listen)
		return RCS_ERR_INVAL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		goto out;
	pthread_mutex_init(&l->lock, NULL);
	l->fn = fn;
	l->ctx = ctx;
	l->hooks_gen = &st->hooks_gen;
	l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->info = PQconninfo(pg_conn(st)->c);
	if (l->efd < 0 || l->info == NULL) {
		err = RCS_ERR_IO;
		goto out;
	}
	if (pthread_create(&l->thread, NULL, pg_listen_thread, l) != 0) {
		err = RCS_ERR_IO;
		goto out;
	}
	st->listen = l;
	l = NULL;
	err = RCS_OK;
out:
	if (l) {
		if (l->info)
			PQconninfoFree(l->info);
		if (l->efd >= 0)
			close(l->efd);
		pthread_mutex_destroy(&l->lock);
		free(l);
	}
	return err;
}

static void pg_listen_stop(struct store *st)
{
	struct pg_listen *l = st->listen;
	uint64_t one = 1;

	if (l == NULL)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_mutex_unlock(&l->lock);
	if (write(l->efd, &one, sizeof(one)) < 0)
		log_warn("eventfd");
	pthread_join(l->thread, NULL);
	if (l->c)
		PQfinish(l->c);
	PQconninfoFree(l->info);
	close(l->efd);
	pthread_mutex_destroy(&l->lock);
	free(l);
	st->listen = NULL;
}

/* Wakes the LISTENing coordinators at the commit of the caller's transaction. */
static enum rcs_err pg_notify(struct store *st, const char *what)
{
	static const char sql[] = "SELECT pg_notify('rcs_work', ?1)";
	struct store_stmt *s = NULL;
	enum rcs_err err;
	bool row = false;

	err = pg_prepare(st, sql, true, &s);
	if (err == RCS_OK) {
		pg_bind_text(s, 1, what, (size_t)-1);
		err = pg_step(st, s, sql, &row);
	}
	if (s)
		pg_release(st, s);
	return err;
}

/* A reader: another connection, whose transactions only read (docs/architecture.md, "Reads
 * and group commit"). */
static enum rcs_err pg_open_reader(struct store *r, const char *url)
{
	return pg_open_conn(r, url, true);
}

const struct store_backend store_pg_backend = {
    .name = "postgresql",
    .dialect = STORE_DIALECT_POSTGRES,
    /* READ COMMITTED: one coordinator's writes are serialized by the store's lock on its
     * one connection; rows other writers (the CLI) change are taken by their constraints */
    .begin_sql = "BEGIN",
    STORE_BACKEND_OPS(pg),
    .shared = true,
    .listen = pg_listen,
    .listen_stop = pg_listen_stop,
    .notify = pg_notify,
};
