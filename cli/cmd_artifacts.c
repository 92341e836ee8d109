/*
 * cmd_artifacts.c - rcs artifacts upload|list|show|rm, and the artifact idents the other
 * commands take (tasks create --artifact) (docs/cli.md "Artifacts"; the API: docs/api.md
 * "Artifacts").
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "list.h"
#include "jsonu.h"
#include "table.h"
#include "uuid.h"

#define ART_HASH_BLOCK (1024 * 1024) /* bytes read at a time to hash a file */
#define ART_BAR_EVERY  0.1           /* seconds between two drawings of the bar */
#define ART_TASK_NAMES 8             /* tasks named by GET /tasks/<id> in show and rm */
#define ART_NO_ROUTE                                                                               \
	"this coordinator has no artifacts: it needs one with docs/api.md \"Artifacts\""

bool cli_artifact_hex(const char *what, char *hex, size_t len, bool *whole)
{
	size_t n = 0;

	if (strncasecmp(what, "sha256:", 7) == 0)
		what += 7;
	for (const char *p = what; *p; p++) {
		if (!isxdigit((unsigned char)*p) || n + 1 >= len || n == 64)
			return false;
		hex[n++] = (char)tolower((unsigned char)*p);
	}
	hex[n] = '\0';
	*whole = n == 64;
	return n >= CLI_SHORT_MIN;
}

bool cli_artifact_key_ok(const char *key)
{
	size_t n = strlen(key);

	if (n == 0 || n > 64 || key[0] == '.' || key[0] == '-')
		return false;
	for (const char *p = key; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
		      *p == '.' || *p == '-'))
			return false;
	return true;
}

size_t cli_artifact_short_len(const char *const *hexes, size_t n)
{
	size_t need = CLI_ART_SHORT;

	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; hexes[i] != NULL && j < n; j++) {
			size_t k = 0;

			if (hexes[j] == NULL || strcmp(hexes[i], hexes[j]) == 0)
				continue;
			while (hexes[i][k] && hexes[i][k] == hexes[j][k])
				k++;
			if (k + 1 > need)
				need = k + 1;
		}
	return need > 64 ? 64 : need;
}

void cli_bytes_bar(char *out, size_t len, const char *label, long long done, long long total,
		   double rate, size_t width)
{
	char bar[128], tail[128], d[24], t[24], r[32] = "", lab[64];
	size_t bw = 0, fill;
	int pct = total > 0 ? (int)(100.0 * (double)done / (double)total) : 100;

	table_clean(lab, sizeof(lab), label, 0);
	table_cut(lab, 24);
	table_bytes(d, sizeof(d), done);
	table_bytes(t, sizeof(t), total);
	if (rate > 0) {
		char rb[24];
		table_bytes(rb, sizeof(rb), (long long)rate);
		snprintf(r, sizeof(r), "  %s/s", rb);
	}
	snprintf(tail, sizeof(tail), "%3d %%  %s of %s%s", pct > 100 ? 100 : pct, d, t, r);
	/* "label [bar] tail": the bar takes what is left, up to its buffer; none below 10 */
	if (width > table_text_width(lab) + strlen(tail) + 4 + 10)
		bw = width - table_text_width(lab) - strlen(tail) - 4;
	if (bw > sizeof(bar) - 1)
		bw = sizeof(bar) - 1;
	fill = total > 0 ? (size_t)((double)bw * (double)done / (double)total) : bw;
	if (fill > bw)
		fill = bw;
	memset(bar, '#', fill);
	memset(bar + fill, '.', bw - fill);
	bar[bw] = '\0';
	if (bw > 0)
		snprintf(out, len, "%s [%s] %s", lab, bar, tail);
	else
		snprintf(out, len, "%s %s", lab, tail);
}

/* ---- idents ---- */

/* Adds the idents of the items of page whose sha256 begins or ends with hex to ids (up to
 * CLI_SHORT_SHOW); counts them all in *found. */
static void art_short_page(json_object *items, const char *hex, char (*ids)[CLI_ART_IDENT_LEN],
			   size_t *found)
{
	size_t n = items ? json_object_array_length(items) : 0, hl = strlen(hex);

	for (size_t i = 0; i < n; i++) {
		json_object *it = json_object_array_get_idx(items, i);
		const char *sha = cli_str(it, "sha256");

		if (sha == NULL || strlen(sha) != 64 ||
		    (strncmp(sha, hex, hl) != 0 && strcmp(sha + 64 - hl, hex) != 0))
			continue;
		if (*found < CLI_SHORT_SHOW)
			snprintf(ids[*found], CLI_ART_IDENT_LEN, "sha256:%s", sha);
		(*found)++;
	}
}

/* The one artifact whose SHA-256 begins or ends with hex, from the pages of the list (it
 * takes no ident_prefix: a tenant has few artifacts). */
static int art_by_short(struct cli *c, const char *what, const char *hex, char *out)
{
	char path[96], ids[CLI_SHORT_SHOW][CLI_ART_IDENT_LEN], clean[80], all[512];
	struct http_resp r = {0};
	size_t found = 0, len = 0;
	int rc = CLI_OK;

	for (int page = 1; page <= CLI_NAMES_PAGES && rc == CLI_OK; page++) {
		int64_t pages;

		snprintf(path, sizeof(path), "/artifacts?per_page=%d&page=%d", CLI_NAMES_PAGE,
			 page);
		rc = cli_call(c, "GET", path, NULL, &r, ART_NO_ROUTE);
		if (rc != CLI_OK)
			break;
		art_short_page(cli_array(r.json, "items"), hex, ids, &found);
		pages = cli_int(r.json, "total_pages");
		http_resp_free(&r);
		if (page >= pages)
			break;
	}
	if (rc != CLI_OK)
		return rc;
	table_clean(clean, sizeof(clean), what, 0);
	if (found == 0)
		return cli_fail(c, CLI_API,
				"no artifact named '%s', and no artifact ident begins or ends "
				"with it",
				clean);
	if (found == 1) {
		snprintf(out, CLI_ART_IDENT_LEN, "%s", ids[0]);
		return CLI_OK;
	}
	all[0] = '\0';
	for (size_t i = 0; i < found && i < CLI_SHORT_SHOW; i++)
		len += (size_t)snprintf(all + len, sizeof(all) - len, "%s%.23s...", i ? ", " : "",
					ids[i]);
	return cli_fail(c, CLI_API,
			"artifact %s is ambiguous: %zu match: %s%s (give more of its "
			"digits)",
			clean, found, all, found > CLI_SHORT_SHOW ? ", ..." : "");
}

/* The artifact named what: CLI_OK with *found and out when exactly one has the name. */
static int art_by_name(struct cli *c, const char *what, char *out, bool *found)
{
	struct buf path;
	struct http_resp r = {0};
	json_object *items;
	char clean[160], all[512];
	size_t n, len = 0;
	int rc;

	*found = false;
	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/artifacts?per_page=%d", CLI_SHORT_SHOW) != RCS_OK ||
	    cli_query(&path, "name", what) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the artifact name is too long");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, ART_NO_ROUTE);
	if (rc != CLI_OK)
		goto out;
	items = cli_array(r.json, "items");
	n = items ? json_object_array_length(items) : 0;
	if (n == 0)
		goto out;
	*found = true;
	if (n == 1) {
		const char *id = cli_str(json_object_array_get_idx(items, 0), "ident");
		bool whole = false;
		char hex[80];

		if (id == NULL || !cli_artifact_hex(id, hex, sizeof(hex), &whole) || !whole)
			rc = cli_fail(c, CLI_API, "the API's answer for '%s' has no ident", what);
		else
			snprintf(out, CLI_ART_IDENT_LEN, "sha256:%.64s", hex);
		goto out;
	}
	all[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(all + len, sizeof(all) - len, "%s%.23s...", i ? ", " : "",
					cli_show(json_object_array_get_idx(items, i), "ident"));
	table_clean(clean, sizeof(clean), what, 0);
	rc = cli_fail(c, CLI_API, "%lld artifacts are named '%s': %s%s (give the ident)",
		      (long long)cli_int(r.json, "total_items"), clean, all,
		      cli_int(r.json, "total_items") > (int64_t)n ? ", ..." : "");
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cli_artifact_ident(struct cli *c, const char *what, char *out)
{
	char hex[80];
	bool whole = false, is_hex = cli_artifact_hex(what, hex, sizeof(hex), &whole), found;
	int rc;

	if (is_hex && whole) {
		snprintf(out, CLI_ART_IDENT_LEN, "sha256:%.64s", hex);
		return CLI_OK;
	}
	if (what[0] == '\0')
		return cli_fail(c, CLI_USAGE,
				"an artifact is its ident, a short ident or its name");
	/* a name wins over a short ident, as elsewhere (docs/cli.md "Short idents") */
	rc = art_by_name(c, what, out, &found);
	if (rc != CLI_OK || found)
		return rc;
	if (is_hex)
		return art_by_short(c, what, hex, out);
	table_clean(hex, sizeof(hex), what, 0);
	return cli_fail(c, CLI_API, "no artifact named '%s' (give its ident?)", hex);
}

/* ---- upload ---- */

struct art_bar {
	const char *verb, *name;
	double t0, last;
};

static double art_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The columns of the terminal on stderr (where the bar goes). */
static size_t art_width(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

static void art_progress(void *arg, long long done, long long total)
{
	struct art_bar *b = arg;
	double now = art_now();
	char line[512], label[320];
	size_t width = art_width();

	if (now - b->last < ART_BAR_EVERY && done < total)
		return;
	b->last = now;
	snprintf(label, sizeof(label), "%s %s", b->verb, b->name);
	cli_bytes_bar(line, sizeof(line), label, done, total,
		      now - b->t0 > 0.5 ? (double)done / (now - b->t0) : 0, width - 1);
	fprintf(stderr, "\r%s\x1b[K", line);
	fflush(stderr);
}

/* The SHA-256 of the size bytes of fd (from its start) as hex; a bar on b when not NULL. */
static int art_hash(struct cli *c, int fd, const char *path, long long size, struct art_bar *b,
		    char hex[65])
{
	mbedtls_sha256_context sha;
	unsigned char *block = malloc(ART_HASH_BLOCK), hash[32];
	long long done = 0;
	ssize_t n = 0;
	int rc = CLI_OK;

	mbedtls_sha256_init(&sha);
	if (block == NULL || mbedtls_sha256_starts_ret(&sha, 0) != 0) {
		rc = cli_fail(c, CLI_API, "out of memory");
		goto out;
	}
	while (done < size) {
		n = read(fd, block, ART_HASH_BLOCK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (mbedtls_sha256_update_ret(&sha, block, (size_t)n) != 0)
			break;
		done += n;
		if (b != NULL)
			art_progress(b, done, size);
	}
	if (done != size || mbedtls_sha256_finish_ret(&sha, hash) != 0) {
		rc = cli_fail(c, CLI_USAGE, "%s: %s", path,
			      n < 0 ? strerror(errno) : "it changed while it was read");
		goto out;
	}
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", hash[i]);
	if (lseek(fd, 0, SEEK_SET) != 0)
		rc = cli_fail(c, CLI_USAGE, "%s: %s", path, strerror(errno));
out:
	mbedtls_sha256_free(&sha);
	free(block);
	return rc;
}

/* Opens path, a regular file, into *fd with its size. */
static int art_open(struct cli *c, const char *path, int *fd, long long *size)
{
	struct stat sb;

	if (strcmp(path, "-") == 0)
		return cli_fail(c, CLI_USAGE,
				"give a file, not stdin: its size and SHA-256 are read before "
				"its bytes are sent");
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &sb) != 0)
		return cli_fail(c, CLI_USAGE, "%s: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return cli_fail(c, CLI_USAGE, "%s: not a regular file", path);
	*size = (long long)sb.st_size;
	return CLI_OK;
}

static void art_said(const char *what, json_object *a)
{
	char sz[24];

	table_bytes(sz, sizeof(sz), cli_int(a, "size"));
	printf("%s %s (%s, %s)\n", what, cli_show(a, "name"), cli_show(a, "ident"), sz);
}

int cmd_artifacts_upload(struct cli *c)
{
	const char *file = c->pos[0], *base = strrchr(file, '/');
	const char *name = c->o.name ? c->o.name : (base ? base + 1 : file);
	struct art_bar bar = {"hashing", name, art_now(), 0};
	struct http_upload up = {.fd = -1};
	struct http_resp r = {0};
	struct buf path;
	char hex[80], errbuf[512] = "", tm[32];
	bool whole = false, tty = isatty(STDERR_FILENO);
	enum rcs_err err;
	long status;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	rc = art_open(c, file, &up.fd, &up.size);
	if (rc != CLI_OK)
		goto out;
	if (c->o.sha256 != NULL &&
	    (!cli_artifact_hex(c->o.sha256, hex, sizeof(hex), &whole) || !whole)) {
		rc = cli_fail(c, CLI_USAGE, "--sha256: 64 hex digits, not '%s'", c->o.sha256);
		goto out;
	}
	/* the digest first, so that the coordinator checks the bytes it got (412 if not) */
	if (c->o.sha256 == NULL) {
		rc = art_hash(c, up.fd, file, up.size, tty ? &bar : NULL, hex);
		if (rc != CLI_OK)
			goto out;
	}
	if (buf_appendf(&path, "/artifacts") != RCS_OK ||
	    cli_query(&path, "name", name) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the name is too long");
		goto out;
	}
	up.sha256 = hex;
	bar = (struct art_bar){"uploading", name, art_now(), 0};
	up.progress = tty ? art_progress : NULL;
	up.arg = &bar;
	err = http_upload(&c->http, path.data, &up, &r, errbuf, sizeof(errbuf));
	if (tty)
		fputs("\r\x1b[K", stderr);
	status = err == RCS_OK ? r.status : 0;
	rc = cli_answer(c, err, errbuf, &r, ART_NO_ROUTE);
	if (status == 412)
		fprintf(stderr, "rcs: %s: nothing was kept%s\n", c->cmd,
			c->o.sha256 ? " (is --sha256 the file's?)"
				    : "; the file changed while it was sent?");
	if (rc != CLI_OK)
		goto out;
	if (c->o.json)
		cli_print_raw(&r);
	else if (r.status == 201)
		art_said("uploaded artifact", r.json);
	else
		printf("the same bytes are there already: artifact %s (%s), uploaded %s by %s\n",
		       cli_show(r.json, "name"), cli_show(r.json, "ident"),
		       cli_time(r.json, "created_at", tm, sizeof(tm)),
		       cli_show(r.json, "created_user"));
out:
	if (up.fd >= 0)
		close(up.fd);
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

/* ---- list, show, rm ---- */

/* An artifact in a table: the first digits of its SHA-256. */
static const char *art_short_text(char *out, size_t len, const char *hex, size_t digits)
{
	snprintf(out, len, "%.*s", (int)digits, hex ? hex : "-");
	return out;
}

static void art_row(struct list_row *r, const char **cells)
{
	json_object *used = cli_array(r->item, "used_by");
	size_t nu = used ? json_object_array_length(used) : 0;
	char *sz = list_cell(r, 24);

	if (sz)
		table_bytes(sz, 24, cli_int(r->item, "size"));
	cells[0] = list_short(r, 0);
	cells[1] = cli_str(r->item, "name");
	cells[2] = sz;
	cells[3] = used == NULL ? NULL
		   : nu == 0    ? "-"
				: list_printf(r, "%zu task%s", nu, nu == 1 ? "" : "s");
	cells[4] = list_when(r, "created_at");
}

int cmd_artifacts_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT", "NAME", "SIZE", "USED BY", "CREATED"};
	static const struct list_spec l = {.heads = heads,
					   .ncols = 5,
					   .keep = 1u << 0 | 1u << 2 | 1u << 4,
					   .idents = {"sha256"},
					   .short_len = cli_artifact_short_len,
					   .short_text = art_short_text,
					   .hint = ART_NO_ROUTE,
					   .row = art_row};
	struct buf path;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "/artifacts") != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "sort", c->o.sort) != RCS_OK ||
	    cli_query(&path, "name", c->o.name) != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
	else
		rc = list_run(c, path.data, &l);
	buf_free(&path);
	return rc;
}

/* The tasks of a's used_by, one a line: "Name (ident)" for the first ART_TASK_NAMES (read
 * quietly: a task not read is shown by its ident). */
static void art_used_by(struct cli *c, json_object *a, char *out, size_t len)
{
	json_object *used = cli_array(a, "used_by");
	size_t n = used ? json_object_array_length(used) : 0, o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n && o < len; i++) {
		const char *id = json_object_get_string(json_object_array_get_idx(used, i));
		struct http_resp r = {0};
		char path[64], errbuf[256];
		const char *name = NULL;

		if (id == NULL || !uuid_valid(id))
			continue;
		snprintf(path, sizeof(path), "/tasks/%s", id);
		if (i < ART_TASK_NAMES &&
		    http_call(&c->http, "GET", path, NULL, &r, errbuf, sizeof(errbuf)) == RCS_OK &&
		    r.status == 200)
			name = cli_str(r.json, "name");
		o += (size_t)snprintf(out + o, len - o, "%s%s%s%s%s", o ? "\n" : "",
				      name ? name : "", name ? " (" : "", id, name ? ")" : "");
		http_resp_free(&r);
	}
}

int cmd_artifacts_show(struct cli *c)
{
	char id[CLI_ART_IDENT_LEN], path[96], sz[64], h[24], tm[32], used[2048];
	struct http_resp r = {0};
	int rc;

	rc = cli_artifact_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/artifacts/%s", id);
	rc = cli_call(c, "GET", path, NULL, &r, ART_NO_ROUTE);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	table_bytes(h, sizeof(h), cli_int(r.json, "size"));
	snprintf(sz, sizeof(sz), "%lld bytes (%s)", (long long)cli_int(r.json, "size"), h);
	table_kv(stdout, "ident", cli_str(r.json, "ident"));
	table_kv(stdout, "name", cli_str(r.json, "name"));
	table_kv(stdout, "size", sz);
	table_kv(stdout, "sha256", cli_str(r.json, "sha256"));
	table_kv(stdout, "created", cli_time(r.json, "created_at", tm, sizeof(tm)));
	table_kv(stdout, "created_user", cli_str(r.json, "created_user"));
	if (jsonu_member(r.json, "used_by") != NULL) {
		art_used_by(c, r.json, used, sizeof(used));
		table_kv(stdout, "used_by", used[0] ? used : NULL);
	}
out:
	http_resp_free(&r);
	return rc;
}

/* After a 409 artifact_in_use: what holds it, read again (quietly). */
static void art_in_use(struct cli *c, const char *path)
{
	struct http_resp r = {0};
	char errbuf[256], used[2048];

	if (http_call(&c->http, "GET", path, NULL, &r, errbuf, sizeof(errbuf)) != RCS_OK ||
	    r.status != 200)
		goto out;
	art_used_by(c, r.json, used, sizeof(used));
	if (used[0] == '\0') {
		fprintf(stderr,
			"rcs: %s: no task pins it now: a job that has not ended needs it "
			"(try again once it has)\n",
			c->cmd);
		goto out;
	}
	fprintf(stderr,
		"rcs: %s: the tasks that pin it (give them other artifacts, "
		"rcs tasks update TASK --artifact or --no-artifacts, or delete them):\n",
		c->cmd);
	for (char *line = strtok(used, "\n"); line != NULL; line = strtok(NULL, "\n"))
		fprintf(stderr, "  %s\n", line);
out:
	http_resp_free(&r);
}

int cmd_artifacts_rm(struct cli *c)
{
	char id[CLI_ART_IDENT_LEN], path[96], errbuf[512] = "";
	struct http_resp rec = {0}, r = {0};
	const char *code = NULL;
	enum rcs_err err;
	bool in_use;
	int rc;

	rc = cli_artifact_ident(c, c->pos[0], id);
	if (rc != CLI_OK)
		goto out;
	snprintf(path, sizeof(path), "/artifacts/%s", id);
	rc = cli_call(c, "GET", path, NULL, &rec, ART_NO_ROUTE);
	if (rc != CLI_OK)
		goto out;
	err = http_call(&c->http, "DELETE", path, NULL, &r, errbuf, sizeof(errbuf));
	if (err == RCS_OK && r.status == 409)
		code = cli_str(jsonu_member(r.json, "error"), "code");
	in_use = code != NULL && strcmp(code, "artifact_in_use") == 0;
	rc = cli_answer(c, err, errbuf, &r, NULL);
	if (in_use)
		art_in_use(c, path);
	if (rc == CLI_OK && !c->o.json)
		art_said("removed artifact", rec.json);
out:
	http_resp_free(&rec);
	http_resp_free(&r);
	return rc;
}
