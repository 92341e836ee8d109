/*
 * cmd_artifacts.c - rcs artifacts upload|list|show|rm (docs/cli.md; the API: docs/api.md
 * "Artifacts"). An upload is hashed first (its SHA-256 sent as rcs-sha256, so the
 * coordinator refuses bytes that changed on the way), then streamed with its length, with a
 * progress bar on a terminal.
 */
#include <errno.h>
#include <mbedtls/sha256.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "jsonu.h"
#include "table.h"
#include "text.h"

#define ART_PATH "/artifacts"

/* An artifact on the command line: sha256:<hex>, or the 64 hex digits alone, into out
 * ("sha256:<hex>"). */
static int art_ident(struct cli *c, const char *what, char out[72])
{
	const char *hex = strncmp(what, "sha256:", 7) == 0 ? what + 7 : what;

	if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64)
		return cli_fail(c, CLI_USAGE,
				"'%.80s' is not an artifact: sha256: and 64 lowercase hex digits",
				what);
	snprintf(out, 72, "sha256:%s", hex);
	return CLI_OK;
}

/* The SHA-256 of f's bytes (lowercase hex), f rewound after. */
static int art_hash(struct cli *c, const char *path, FILE *f, char out[65])
{
	mbedtls_sha256_context ctx;
	unsigned char piece[65536], hash[32];
	size_t n;
	int ok;

	mbedtls_sha256_init(&ctx);
	ok = mbedtls_sha256_starts_ret(&ctx, 0) == 0;
	while (ok && (n = fread(piece, 1, sizeof(piece), f)) > 0)
		ok = mbedtls_sha256_update_ret(&ctx, piece, n) == 0;
	ok = ok && !ferror(f) && mbedtls_sha256_finish_ret(&ctx, hash) == 0;
	mbedtls_sha256_free(&ctx);
	if (!ok || fseek(f, 0, SEEK_SET) != 0)
		return cli_fail(c, CLI_USAGE, "%s: cannot be read", path);
	text_hex_encode(hash, sizeof(hash), out);
	return CLI_OK;
}

static void art_size(long long n, char *out, size_t len)
{
	if (n >= 1024LL * 1024 * 1024)
		snprintf(out, len, "%.1f GiB", (double)n / (1024.0 * 1024 * 1024));
	else if (n >= 1024 * 1024)
		snprintf(out, len, "%.1f MiB", (double)n / (1024.0 * 1024));
	else if (n >= 1024)
		snprintf(out, len, "%.1f KiB", (double)n / 1024.0);
	else
		snprintf(out, len, "%lld B", n);
}

int cmd_artifacts_upload(struct cli *c)
{
	const char *file = c->pos[0], *slash = strrchr(file, '/');
	const char *name = c->o.name ? c->o.name : (slash ? slash + 1 : file);
	struct http_resp r = {0};
	struct buf path;
	struct stat sb;
	char sha[65], size[32], errbuf[512] = "";
	FILE *f = fopen(file, "rb");
	enum rcs_err err;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (f == NULL || fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
		rc = cli_fail(c, CLI_USAGE, "%s: %s", file,
			      f == NULL ? strerror(errno) : "not a regular file");
		goto out;
	}
	rc = art_hash(c, file, f, sha);
	if (rc != CLI_OK)
		goto out;
	if (buf_appendf(&path, ART_PATH) != RCS_OK || cli_query(&path, "name", name) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the name is too long");
		goto out;
	}
	err = http_upload(&c->http, path.data, f, (long long)sb.st_size, sha,
			  !c->o.json && isatty(STDERR_FILENO), &r, errbuf, sizeof(errbuf));
	rc = cli_answer(c, err, errbuf, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
	} else {
		art_size(cli_int(r.json, "size"), size, sizeof(size));
		printf("%s %s (%s, %s)\n",
		       r.status == 201 ? "uploaded" : "already there:", cli_show(r.json, "ident"),
		       cli_show(r.json, "name"), size);
	}
	http_resp_free(&r);
out:
	if (f != NULL)
		fclose(f);
	buf_free(&path);
	return rc;
}

int cmd_artifacts_list(struct cli *c)
{
	static const char *const heads[] = {"IDENT", "NAME", "SIZE", "CREATED", "TASKS"};
	struct buf path;
	struct http_resp r = {0};
	struct table t;
	json_object *items;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	table_init(&t, 5, heads);
	if (buf_appendf(&path, ART_PATH) != RCS_OK || cli_query_paging(c, &path) != RCS_OK ||
	    cli_query(&path, "sort", c->o.sort) != RCS_OK ||
	    cli_query(&path, "name", c->o.name) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the filters are too long");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	if (c->o.json) {
		cli_print_raw(&r);
		goto out;
	}
	items = cli_array(r.json, "items");
	table_keep(&t, 0);
	for (size_t i = 0; items && i < json_object_array_length(items); i++) {
		json_object *it = json_object_array_get_idx(items, i), *used;
		char id[24], size[32], when[32], tasks[16];
		const char *sha = cli_str(it, "sha256");

		used = cli_array(it, "used_by");
		snprintf(id, sizeof(id), "%.12s", sha ? sha : "-");
		art_size(cli_int(it, "size"), size, sizeof(size));
		snprintf(tasks, sizeof(tasks), "%zu", used ? json_object_array_length(used) : 0);
		const char *row[] = {id, cli_show(it, "name"), size,
				     cli_when(it, "created_at", when, sizeof(when)), tasks};
		if (table_add(&t, row) != RCS_OK) {
			rc = cli_fail(c, CLI_API, "out of memory");
			goto out;
		}
	}
	table_print(&t, stdout, table_term_width());
	cli_page_footer(r.json);
out:
	table_free(&t);
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

int cmd_artifacts_show(struct cli *c)
{
	struct http_resp r = {0};
	char ident[72], path[128], when[64], size[32];
	json_object *used;
	int rc = art_ident(c, c->pos[0], ident);

	if (rc != CLI_OK)
		return rc;
	snprintf(path, sizeof(path), ART_PATH "/%s", ident);
	rc = cli_call(c, "GET", path, NULL, &r, NULL);
	if (rc != CLI_OK)
		return rc;
	if (c->o.json) {
		cli_print_raw(&r);
	} else {
		art_size(cli_int(r.json, "size"), size, sizeof(size));
		printf("ident:    %s\nname:     %s\nsize:     %lld (%s)\ncreated:  %s by %s\n",
		       cli_show(r.json, "ident"), cli_show(r.json, "name"),
		       (long long)cli_int(r.json, "size"), size,
		       cli_time(r.json, "created_at", when, sizeof(when)),
		       cli_show(r.json, "created_user"));
		used = cli_array(r.json, "used_by");
		printf("used by:  %s\n", used && json_object_array_length(used) ? "" : "no task");
		for (size_t i = 0; used && i < json_object_array_length(used); i++)
			printf("  task %s\n",
			       json_object_get_string(json_object_array_get_idx(used, i)));
	}
	http_resp_free(&r);
	return CLI_OK;
}

int cmd_artifacts_rm(struct cli *c)
{
	struct http_resp r = {0};
	char ident[72], path[128];
	int rc = art_ident(c, c->pos[0], ident);

	if (rc != CLI_OK)
		return rc;
	snprintf(path, sizeof(path), ART_PATH "/%s", ident);
	rc = cli_call(c, "DELETE", path, NULL, &r,
		      "an artifact a task's current version or a job not yet ended pins stays:"
		      " `rcs artifacts show` lists the tasks");
	if (rc != CLI_OK)
		return rc;
	http_resp_free(&r);
	if (!c->o.json)
		printf("deleted %s\n", ident);
	return CLI_OK;
}
