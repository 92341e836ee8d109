/*
 * table.h - output for people: tables sized to the terminal, "key  value" views,
 * times and durations.
 *
 * Text from the API (a device's response, a name) is shown with its control
 * characters replaced, so what a device reports can't move the cursor or
 * change the terminal. Widths count code points (UTF-8).
 */
#ifndef RCS_CLI_TABLE_H
#define RCS_CLI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

#define TABLE_MAX_COLS  12
#define TABLE_MAX_ROWS  100000
#define TABLE_MAX_CELL  4096 /* bytes of a cell; longer text is cut */
#define TABLE_MIN_WIDTH 4    /* a column never shrinks below this (or its header) */

struct table {
	size_t ncols;
	const char *heads[TABLE_MAX_COLS]; /* borrowed */
	size_t least[TABLE_MAX_COLS];      /* table_least, table_keep */
	char **cells;                      /* nrows * ncols, owned */
	size_t nrows, cap;
};

/* ncols (at most TABLE_MAX_COLS) columns named by heads, kept by pointer. */
void table_init(struct table *t, size_t ncols, const char *const *heads);
/* Adds a row of ncols cells (NULL shows as "-"), copied and cleaned. RCS_ERR_NOMEM,
 * RCS_ERR_TOOBIG past TABLE_MAX_ROWS. */
enum rcs_err table_add(struct table *t, const char *const *cells);
/* Prints the header and rows; width 0: no limit, else columns shrink (widest first)
 * and cells are cut with '~' so that no line is wider. */
void table_print(const struct table *t, FILE *fp, size_t width);
/* Column col is never cut (short idents, times, statuses): the others give way. */
void table_keep(struct table *t, size_t col);
/* Column col is never narrower than width (a short ident that begins its cells). */
void table_least(struct table *t, size_t col, size_t width);
void table_free(struct table *t);

/* Columns of the terminal on stdout; 0 when stdout is not a terminal. */
size_t table_term_width(void);
/* Code points of s (the display width the tables assume). */
size_t table_text_width(const char *s);
/* Cuts s in place to at most width code points. */
void table_cut(char *s, size_t width);
/* Copies s into out (len bytes) with control characters (but '\n' when keep_nl) as '?'. */
void table_clean(char *out, size_t len, const char *s, int keep_nl);

/* "key:" padded to 16 columns, then value (cleaned; "-" for NULL); lines after the
 * first of a multi-line value are indented under the first. */
void table_kv(FILE *fp, const char *key, const char *value);
/* A Unix time as local "YYYY-MM-DD HH:MM:SS"; "-" for t <= 0. */
void table_time(char *out, size_t len, int64_t t);
/* A Unix time for a table (docs/cli.md "Tables"), to the second: "HH:MM:SS" on now's local
 * day, else "YYYY-MM-DD HH:MM:SS"; "-" for t <= 0. */
void table_time_short(char *out, size_t len, int64_t t, int64_t now);

/*
 * Short idents (docs/cli.md "Tables"): the last hex digits of a UUID, which are random in
 * a UUIDv7 (its first ones are its time, which the objects of one send share).
 * TABLE_SHORT_MIN digits unless two of the idents need more to differ.
 */
#define TABLE_SHORT_MIN 8
/* The number of final hex digits (TABLE_SHORT_MIN to 32) that tell the n idents apart (the
 * same ident twice is one ident; NULLs and what is not a UUID are left out). */
size_t table_short_len(const char *const *ids, size_t n);
/* The last digits hex digits of ident (with the '-' between them, as in the UUID) into
 * out; ident itself when it is not a UUID, "-" when NULL. Returns out. */
const char *table_short(char *out, size_t len, const char *ident, size_t digits);

/* Seconds as "12s", "3m05s", "2h07m". */
void table_duration(char *out, size_t len, double seconds);
/* Bytes for people, in units of 1024: "512 B", "1.5 KiB", "12.3 MiB", "4.0 GiB". */
void table_bytes(char *out, size_t len, long long n);

#endif
