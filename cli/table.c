#include "table.h"

#include "uuid.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

void table_init(struct table *t, size_t ncols, const char *const *heads)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols > TABLE_MAX_COLS ? TABLE_MAX_COLS : ncols;
	for (size_t i = 0; i < t->ncols; i++)
		t->heads[i] = heads[i];
}

void table_clean(char *out, size_t len, const char *s, int keep_nl)
{
	size_t o = 0;

	if (len == 0)
		return;
	for (const unsigned char *p = (const unsigned char *)s; *p && o + 1 < len; p++) {
		unsigned char ch = *p;
		if ((ch < 0x20 && !(keep_nl && ch == '\n')) || ch == 0x7f)
			ch = '?';
		out[o++] = (char)ch;
	}
	/* cut short: never end inside a UTF-8 sequence */
	if (s[o] != '\0') {
		while (o > 0 && ((unsigned char)out[o - 1] & 0xc0) == 0x80)
			o--;
		if (o > 0 && ((unsigned char)out[o - 1] & 0xc0) == 0xc0)
			o--;
	}
	out[o] = '\0';
}

enum rcs_err table_add(struct table *t, const char *const *cells)
{
	char tmp[TABLE_MAX_CELL];
	enum rcs_err err = RCS_OK;

	if (t->nrows >= TABLE_MAX_ROWS)
		return RCS_ERR_TOOBIG;
	if ((t->nrows + 1) * t->ncols > t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 64 * t->ncols;
		char **p = realloc(t->cells, ncap * sizeof(*p));
		if (p == NULL)
			return RCS_ERR_NOMEM;
		t->cells = p;
		t->cap = ncap;
	}
	for (size_t i = 0; i < t->ncols; i++) {
		char *c;
		table_clean(tmp, sizeof(tmp), cells[i] != NULL ? cells[i] : "-", 0);
		c = strdup(tmp);
		if (c == NULL) {
			/* keep the table whole: what was copied of this row goes */
			for (size_t j = 0; j < i; j++)
				free(t->cells[t->nrows * t->ncols + j]);
			err = RCS_ERR_NOMEM;
			goto out;
		}
		t->cells[t->nrows * t->ncols + i] = c;
	}
	t->nrows++;
out:
	return err;
}

size_t table_text_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

void table_cut(char *s, size_t width)
{
	size_t cps = 0;
	char *p = s;

	while (*p) {
		if (((unsigned char)*p & 0xc0) != 0x80 && cps++ == width)
			break;
		p++;
	}
	*p = '\0';
}

/* Prints s in exactly w columns (cut with '~', padded unless last). */
static void table_cell(FILE *fp, const char *s, size_t w, int last)
{
	size_t cw = table_text_width(s);

	if (cw <= w) {
		fputs(s, fp);
		if (!last)
			fprintf(fp, "%*s", (int)(w - cw), "");
		return;
	}
	size_t cps = 0;
	const char *p = s;
	while (*p && cps < w - 1) {
		p++;
		while (((unsigned char)*p & 0xc0) == 0x80)
			p++;
		cps++;
	}
	fwrite(s, 1, (size_t)(p - s), fp);
	fputc('~', fp);
}

void table_print(const struct table *t, FILE *fp, size_t width)
{
	size_t w[TABLE_MAX_COLS], minw[TABLE_MAX_COLS], total = 0;

	if (t->ncols == 0)
		return;
	for (size_t c = 0; c < t->ncols; c++) {
		w[c] = table_text_width(t->heads[c]);
		minw[c] = w[c] > TABLE_MIN_WIDTH ? w[c] : TABLE_MIN_WIDTH;
		for (size_t r = 0; r < t->nrows; r++) {
			size_t cw = table_text_width(t->cells[r * t->ncols + c]);
			if (cw > w[c])
				w[c] = cw;
		}
		if (t->least[c] > minw[c])
			minw[c] = t->least[c];
		if (minw[c] > w[c])
			minw[c] = w[c];
		total += w[c] + (c > 0 ? 2 : 0);
	}
	while (width > 0 && total > width) {
		size_t widest = t->ncols;
		for (size_t c = 0; c < t->ncols; c++)
			if (w[c] > minw[c] && (widest == t->ncols || w[c] > w[widest]))
				widest = c;
		if (widest == t->ncols)
			break; /* every column at its least: lines wrap */
		w[widest]--;
		total--;
	}
	for (size_t c = 0; c < t->ncols; c++) {
		if (c > 0)
			fputs("  ", fp);
		table_cell(fp, t->heads[c], w[c], c + 1 == t->ncols);
	}
	fputc('\n', fp);
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			if (c > 0)
				fputs("  ", fp);
			table_cell(fp, t->cells[r * t->ncols + c], w[c], c + 1 == t->ncols);
		}
		fputc('\n', fp);
	}
}

void table_keep(struct table *t, size_t col)
{
	table_least(t, col, SIZE_MAX);
}

void table_least(struct table *t, size_t col, size_t width)
{
	if (col < t->ncols)
		t->least[col] = width;
}

void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

size_t table_term_width(void)
{
	struct winsize ws;

	if (!isatty(STDOUT_FILENO))
		return 0;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

void table_kv(FILE *fp, const char *key, const char *value)
{
	char tmp[TABLE_MAX_CELL * 4];

	table_clean(tmp, sizeof(tmp), value != NULL ? value : "-", 1);
	fprintf(fp, "%-16s", key);
	for (const char *p = tmp; *p; p++) {
		fputc(*p, fp);
		if (*p == '\n' && p[1] != '\0')
			fprintf(fp, "%16s", "");
	}
	fputc('\n', fp);
}

void table_time(char *out, size_t len, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || localtime_r(&tt, &tm) == NULL ||
	    strftime(out, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(out, len, "-");
}

void table_time_short(char *out, size_t len, int64_t t, int64_t now)
{
	time_t tt = (time_t)t, tn = (time_t)now;
	struct tm tm, tmn;
	bool today;

	if (t <= 0 || localtime_r(&tt, &tm) == NULL || localtime_r(&tn, &tmn) == NULL) {
		snprintf(out, len, "-");
		return;
	}
	today = tm.tm_year == tmn.tm_year && tm.tm_yday == tmn.tm_yday;
	if (strftime(out, len, today ? "%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(out, len, "-");
}

/* The 32 hex digits of a UUID, reversed (the last first), into rev; false when s is not a
 * UUID. */
static bool table_rev_hex(const char *s, char rev[33])
{
	size_t n = 0;

	if (s == NULL || !uuid_valid(s))
		return false;
	for (size_t i = 36; i-- > 0;)
		if (s[i] != '-')
			rev[n++] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 'a' : s[i]);
	rev[n] = '\0';
	return n == 32;
}

static int table_rev_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 33);
}

size_t table_short_len(const char *const *ids, size_t n)
{
	char(*rev)[33] = n ? malloc(n * sizeof(*rev)) : NULL;
	size_t m = 0, need = TABLE_SHORT_MIN;

	if (rev == NULL)
		return n ? 32 : need; /* out of memory: whole idents tell every one apart */
	for (size_t i = 0; i < n; i++)
		if (table_rev_hex(ids[i], rev[m]))
			m++;
	qsort(rev, m, sizeof(*rev), table_rev_cmp);
	/* sorted by their last digits first: the longest shared ending is between neighbours */
	for (size_t i = 1; i < m; i++) {
		size_t k = 0;
		while (k < 32 && rev[i][k] == rev[i - 1][k])
			k++;
		if (k < 32 && k + 1 > need)
			need = k + 1;
	}
	free(rev);
	return need;
}

const char *table_short(char *out, size_t len, const char *ident, size_t digits)
{
	size_t from = 36, n = 0;

	if (ident == NULL || !uuid_valid(ident)) {
		snprintf(out, len, "%s", ident != NULL ? ident : "-");
		return out;
	}
	while (from > 0 && n < digits) {
		from--;
		if (ident[from] != '-')
			n++;
	}
	snprintf(out, len, "%s", ident + from);
	return out;
}

void table_duration(char *out, size_t len, double seconds)
{
	long s = seconds < 0 ? 0 : (long)(seconds + 0.5);

	if (s < 60)
		snprintf(out, len, "%lds", s);
	else if (s < 3600)
		snprintf(out, len, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(out, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

void table_bytes(char *out, size_t len, long long n)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)n;
	size_t u = 0;

	if (n < 1024) {
		snprintf(out, len, "%lld B", n < 0 ? 0 : n);
		return;
	}
	v /= 1024.0;
	while (v >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	snprintf(out, len, "%.1f %s", v, units[u]);
}
