/*
 * cli.c - the helpers of cli.h the subcommands share: calling the API and
 * printing its answers and errors, queries, names resolved to idents.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "jsonu.h"
#include "status.h"
#include "table.h"
#include "uuid.h"

int cli_fail(const struct cli *c, int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "rcs: %s%s", c->cmd ? c->cmd : "", c->cmd ? ": " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

int cli_call(struct cli *c, const char *method, const char *path, json_object *body,
	     struct http_resp *r, const char *hint)
{
	char errbuf[512] = "";
	enum rcs_err err = http_call(&c->http, method, path, body, r, errbuf, sizeof(errbuf));

	return cli_answer(c, err, errbuf, r, hint);
}

int cli_answer(struct cli *c, enum rcs_err err, const char *errbuf, struct http_resp *r,
	       const char *hint)
{
	char clean[1024];
	json_object *e;
	const char *code, *msg, *field;

	if (err != RCS_OK)
		return cli_fail(c, CLI_API, "%s", err == RCS_ERR_NOMEM ? "out of memory" : errbuf);
	if (r->status >= 200 && r->status < 300) {
		if (r->status != 204 && r->json == NULL) {
			table_clean(clean, sizeof(clean), r->body.data ? r->body.data : "", 0);
			cli_fail(c, CLI_API,
				 "HTTP %ld from %s with a body that is not JSON: %.200s", r->status,
				 c->http.base, clean);
			http_resp_free(r);
			return CLI_API;
		}
		return CLI_OK;
	}
	e = r->json ? jsonu_member(r->json, "error") : NULL;
	code = e ? cli_str(e, "code") : NULL;
	msg = e ? cli_str(e, "message") : NULL;
	field = e ? cli_str(jsonu_member(e, "details"), "field") : NULL;
	if (msg != NULL) {
		table_clean(clean, sizeof(clean), msg, 0);
		cli_fail(c, CLI_API, "%s (%s, HTTP %ld%s%s)", clean, code ? code : "?", r->status,
			 field ? ", field " : "", field ? field : "");
	} else {
		table_clean(clean, sizeof(clean), r->body.data ? r->body.data : "", 0);
		cli_fail(c, CLI_API, "HTTP %ld from %s: %.200s", r->status, c->http.base, clean);
	}
	/* the hint is for a coordinator without the feature: it doesn't know the route (404,
	 * 405) or the member (400 naming exactly it); not for its answers about the request */
	if (hint != NULL &&
	    (r->status == 404 || r->status == 405 ||
	     (r->status == 400 && field != NULL &&
	      (strcmp(field, "rollout") == 0 || strcmp(field, "abort") == 0 ||
	       strcmp(field, "retry") == 0 || strcmp(field, "window") == 0 ||
	       strcmp(field, "continuous") == 0 || strcmp(field, "ident_prefix") == 0 ||
	       strcmp(field, "ident_suffix") == 0 || strcmp(field, "artifacts") == 0 ||
	       strcmp(field, "download") == 0))))
		fprintf(stderr, "rcs: %s\n", hint);
	http_resp_free(r);
	return CLI_API;
}

void cli_print_raw(const struct http_resp *r)
{
	if (r->body.len == 0)
		return;
	fwrite(r->body.data, 1, r->body.len, stdout);
	if (r->body.data[r->body.len - 1] != '\n')
		fputc('\n', stdout);
}

enum rcs_err cli_query(struct buf *path, const char *k, const char *v)
{
	enum rcs_err err;

	if (v == NULL)
		return RCS_OK;
	err = buf_appendf(path, "%c%s=", strchr(path->data ? path->data : "", '?') ? '&' : '?', k);
	return err != RCS_OK ? err : http_escape(path, v);
}

enum rcs_err cli_query_paging(struct cli *c, struct buf *path)
{
	char n[32];
	enum rcs_err err = RCS_OK;

	if (c->o.page > 0) {
		snprintf(n, sizeof(n), "%lld", c->o.page);
		err = cli_query(path, "page", n);
	}
	if (err == RCS_OK && c->o.per_page > 0) {
		snprintf(n, sizeof(n), "%lld", c->o.per_page);
		err = cli_query(path, "per_page", n);
	}
	return err;
}

void cli_page_footer(json_object *page)
{
	int64_t p = cli_int(page, "page"), n = cli_int(page, "total_pages");

	if (n > 1)
		printf("(page %lld of %lld, %lld in all: --page N for another)\n", (long long)p,
		       (long long)n, (long long)cli_int(page, "total_items"));
}

json_object *cli_array(json_object *o, const char *k)
{
	json_object *a = jsonu_member(o, k);

	return a != NULL && json_object_is_type(a, json_type_array) ? a : NULL;
}

const char *cli_str(json_object *o, const char *k)
{
	json_object *v = o ? jsonu_member(o, k) : NULL;

	return v != NULL && json_object_is_type(v, json_type_string) ? json_object_get_string(v)
								     : NULL;
}

const char *cli_show(json_object *o, const char *k)
{
	static char slots[CLI_SHOW_SLOTS][512];
	static unsigned next;
	char *out = slots[next++ % CLI_SHOW_SLOTS];
	const char *v = cli_str(o, k);

	table_clean(out, sizeof(slots[0]), v != NULL ? v : "-", 0);
	return out;
}

int64_t cli_int(json_object *o, const char *k)
{
	json_object *v = o ? jsonu_member(o, k) : NULL;

	return v != NULL && json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
}

const char *cli_text(json_object *o, const char *k)
{
	json_object *v = o ? jsonu_member(o, k) : NULL;

	if (v == NULL)
		return NULL;
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return jsonu_dump(v, NULL);
}

const char *cli_time(json_object *o, const char *k, char *out, size_t len)
{
	table_time(out, len, cli_int(o, k));
	return out;
}

const char *cli_when(json_object *o, const char *k, char *out, size_t len)
{
	table_time_short(out, len, cli_int(o, k), (int64_t)time(NULL));
	return out;
}

const char *cli_join(json_object *a, const char *sep, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0;
	     a && json_object_is_type(a, json_type_array) && i < json_object_array_length(a); i++) {
		int n = snprintf(out + o, len - o, "%s%s", o ? sep : "",
				 json_object_get_string(json_object_array_get_idx(a, i)));
		if (n < 0 || (size_t)n >= len - o) {
			out[o] = '\0'; /* the strings that fit whole */
			break;
		}
		o += (size_t)n;
	}
	return out;
}

const char *cli_group_progress(json_object *g, char *out, size_t len)
{
	json_object *counts = jsonu_member(g, "counts"), *p = jsonu_member(g, "progress");
	long long done = 0, total = 0;
	bool by_counts = counts != NULL && json_object_is_type(counts, json_type_object);

	/* the devices, each by its latest attempt (docs/api.md "Progress") */
	if (p != NULL && json_object_is_type(jsonu_member(p, "devices"), json_type_int)) {
		snprintf(out, len, "%lld/%lld", (long long)cli_int(p, "ended"),
			 (long long)cli_int(p, "devices"));
		return out;
	}
	if (!by_counts)
		counts = jsonu_member(g, "statuses");
	if (counts == NULL || !json_object_is_type(counts, json_type_object))
		return NULL;
	json_object_object_foreach(counts, name, v)
	{
		enum job_status st;
		long long n = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;

		if (n <= 0)
			continue;
		total += n;
		if (status_parse(name, &st) && status_is_terminal(st))
			done += n;
	}
	if (!by_counts && cli_int(g, "total") > total)
		total = cli_int(g, "total");
	snprintf(out, len, "%lld/%lld", done, total);
	return out;
}

bool cli_short_part(const char *what, bool prefix, char out[UUID_STR_LEN])
{
	char hex[32];
	size_t n = 0, o = 0;

	for (const char *p = what; *p; p++) {
		if (*p == '-')
			continue;
		if (!isxdigit((unsigned char)*p) || n == sizeof(hex))
			return false;
		hex[n++] = (char)tolower((unsigned char)*p);
	}
	if (n < CLI_SHORT_MIN)
		return false;
	/* the dashes where a UUID has them: before its hex digits 8, 12, 16 and 20 */
	for (size_t i = 0, k = prefix ? 0 : 32 - n; i < n; i++, k++) {
		if (i > 0 && (k == 8 || k == 12 || k == 16 || k == 20))
			out[o++] = '-';
		out[o++] = hex[i];
	}
	out[o] = '\0';
	return true;
}

#define CLI_SHORT_HINT                                                                             \
	"a short ident needs a coordinator that takes ident_prefix and ident_suffix "              \
	"(docs/cli.md): give the whole ident"

/* Adds the idents (member idk) of list?param=part to ids (*n of them, at most CLI_SHORT_SHOW,
 * none twice); *more when there are others. */
static int cli_short_list(struct cli *c, const char *list, const char *param, const char *part,
			  const char *idk, char (*ids)[UUID_STR_LEN], size_t *n, bool *more)
{
	struct buf path;
	struct http_resp r = {0};
	json_object *items;
	size_t ni;
	int rc;

	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "%s", list) != RCS_OK ||
	    cli_query(&path, "per_page", "5") != RCS_OK ||
	    cli_query(&path, param, part) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "out of memory");
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, CLI_SHORT_HINT);
	if (rc != CLI_OK)
		goto out;
	items = cli_array(r.json, "items");
	ni = items ? json_object_array_length(items) : 0;
	if (cli_int(r.json, "total_items") > (int64_t)ni)
		*more = true;
	for (size_t i = 0; i < ni; i++) {
		const char *id = cli_str(json_object_array_get_idx(items, i), idk);
		bool seen = false;

		if (id == NULL || !uuid_valid(id))
			continue;
		for (size_t j = 0; j < *n; j++)
			seen = seen || strcmp(ids[j], id) == 0;
		if (seen)
			continue;
		if (*n < CLI_SHORT_SHOW)
			snprintf(ids[(*n)++], UUID_STR_LEN, "%s", id);
		else
			*more = true;
	}
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

/* The one item of list whose ident begins or ends with the short ident what (docs/cli.md
 * "Short idents"): one request for each end. *found: some matched (several: CLI_API said). */
static int cli_by_short(struct cli *c, const char *list, const char *kind, const char *idk,
			const char *what, char *out, bool *found)
{
	char part[UUID_STR_LEN], ids[CLI_SHORT_SHOW][UUID_STR_LEN], clean[64];
	char all[CLI_SHORT_SHOW * (UUID_STR_LEN + 2) + 8];
	size_t n = 0, len = 0;
	bool more = false;
	int rc;

	*found = false;
	cli_short_part(what, true, part);
	rc = cli_short_list(c, list, "ident_prefix", part, idk, ids, &n, &more);
	if (rc == CLI_OK && cli_short_part(what, false, part))
		rc = cli_short_list(c, list, "ident_suffix", part, idk, ids, &n, &more);
	if (rc != CLI_OK || n == 0)
		return rc;
	*found = true;
	if (n == 1 && !more) {
		snprintf(out, UUID_STR_LEN, "%s", ids[0]);
		return CLI_OK;
	}
	all[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len +=
		    (size_t)snprintf(all + len, sizeof(all) - len, "%s%s", i ? ", " : "", ids[i]);
	table_clean(clean, sizeof(clean), what, 0);
	return cli_fail(c, CLI_API, "%s %s is ambiguous: %s%s (give more of its digits)", kind,
			clean, all, more ? ", ..." : "");
}

/* The groups a name resolves to that are listed besides the most recent (docs/cli.md
 * "Output"). */
#define CLI_NAME_OTHERS 4

/* Says on stderr which of the items (newest first) of a name that several share is taken. */
static void cli_by_name_newest(struct cli *c, const char *kind, const char *idk, const char *what,
			       json_object *page, json_object *items, const char *id)
{
	char clean[128], others[CLI_NAME_OTHERS * (UUID_STR_LEN + 2) + 8];
	size_t n = json_object_array_length(items), len = 0;
	long long total = (long long)cli_int(page, "total_items");

	others[0] = '\0';
	for (size_t i = 1; i < n && len < sizeof(others); i++) {
		const char *o = cli_str(json_object_array_get_idx(items, i), idk);

		len += (size_t)snprintf(others + len, sizeof(others) - len, "%s%s",
					i > 1 ? ", " : "", o && uuid_valid(o) ? o : "?");
	}
	if (total > (long long)n && len < sizeof(others))
		snprintf(others + len, sizeof(others) - len, ", ...");
	table_clean(clean, sizeof(clean), what, 0);
	cli_fail(c, 0, "%s %s: %s (the most recent of %lld: also %s)", kind, clean, id,
		 total > (long long)n ? total : (long long)n, others);
}

/* Finds the item of list path?name=what (newest: the first of several, said on stderr; else
 * the one item); its ident member into out. *found: some item has the name. */
static int cli_by_name_only(struct cli *c, const char *list, const char *kind, const char *idk,
			    const char *what, bool newest, char *out, bool *found)
{
	struct buf path;
	struct http_resp r = {0};
	json_object *items;
	int rc;

	*found = false;
	buf_init(&path, CLI_MAX_PATH);
	if (buf_appendf(&path, "%s", list) != RCS_OK ||
	    cli_query(&path, "per_page", newest ? "5" : "2") != RCS_OK ||
	    cli_query(&path, "name", what) != RCS_OK) {
		rc = cli_fail(c, CLI_USAGE, "the %s name is too long", kind);
		goto out;
	}
	rc = cli_call(c, "GET", path.data, NULL, &r, NULL);
	if (rc != CLI_OK)
		goto out;
	items = jsonu_member(r.json, "items");
	if (items == NULL || !json_object_is_type(items, json_type_array) ||
	    json_object_array_length(items) == 0)
		goto out;
	*found = true;
	if (json_object_array_length(items) > 1 && !newest) {
		rc = cli_fail(c, CLI_API, "%lld %ss are named '%s': give the ident",
			      (long long)cli_int(r.json, "total_items"), kind, what);
	} else {
		const char *id = cli_str(json_object_array_get_idx(items, 0), idk);

		if (id == NULL || !uuid_valid(id)) {
			rc = cli_fail(c, CLI_API, "the API's answer for '%s' has no ident", what);
		} else {
			snprintf(out, UUID_STR_LEN, "%s", id);
			if (json_object_array_length(items) > 1)
				cli_by_name_newest(c, kind, idk, what, r.json, items, id);
		}
	}
out:
	http_resp_free(&r);
	buf_free(&path);
	return rc;
}

/* What names an item of list: its ident, its name (when named; a name wins over a short
 * ident, as a branch does in git), or a short ident (docs/cli.md "Short idents"). */
static int cli_by_name(struct cli *c, const char *list, const char *kind, const char *idk,
		       const char *what, bool named, bool newest, char *out)
{
	char part[UUID_STR_LEN], clean[128];
	bool is_short = cli_short_part(what, true, part), found = false;
	int rc = CLI_OK;

	if (uuid_valid(what)) {
		snprintf(out, UUID_STR_LEN, "%s", what);
		return CLI_OK;
	}
	if (named)
		rc = cli_by_name_only(c, list, kind, idk, what, newest, out, &found);
	if (rc == CLI_OK && !found && is_short)
		rc = cli_by_short(c, list, kind, idk, what, out, &found);
	if (rc != CLI_OK || found)
		return rc;
	table_clean(clean, sizeof(clean), what, 0);
	if (!named && !is_short)
		return cli_fail(c, CLI_API,
				"'%s' is not a %s ident (a UUID, or %d or more of its hex digits "
				"from its start or its end)",
				clean, kind, CLI_SHORT_MIN);
	if (!named)
		return cli_fail(c, CLI_API, "no %s ident begins or ends with '%s'", kind, clean);
	if (is_short)
		return cli_fail(c, CLI_API,
				"no %s named '%s', and no %s ident begins or ends with it", kind,
				clean, kind);
	return cli_fail(c, CLI_API, "no %s named '%s' (give its ident?)", kind, clean);
}

/* Whether ident (a UUID) begins or ends with the short ident what. */
static bool cli_short_match(const char *what, const char *ident)
{
	char part[UUID_STR_LEN];
	size_t n, len = strlen(ident);

	if (cli_short_part(what, true, part) && strncmp(ident, part, strlen(part)) == 0)
		return true;
	if (!cli_short_part(what, false, part))
		return false;
	n = strlen(part);
	return n <= len && strcmp(ident + len - n, part) == 0;
}

int cli_walk_ident(struct cli *c, const char *list, const char *kind, const char *what, char *out)
{
	char path[128], clean[64], first[UUID_STR_LEN] = "";
	struct http_resp r = {0};
	long long found = 0;
	int rc = CLI_OK;

	table_clean(clean, sizeof(clean), what, 0);
	if (uuid_valid(what)) {
		snprintf(out, UUID_STR_LEN, "%s", what);
		return CLI_OK;
	}
	if (!cli_short_part(what, true, first))
		return cli_fail(c, CLI_API,
				"'%s' is not a %s ident (a UUID, or %d or more of its hex digits "
				"from its start or its end)",
				clean, kind, CLI_SHORT_MIN);
	first[0] = '\0';
	for (int page = 1; page <= CLI_NAMES_PAGES && rc == CLI_OK; page++) {
		json_object *items;
		size_t n;

		snprintf(path, sizeof(path), "%s?per_page=%d&page=%d", list, CLI_NAMES_PAGE, page);
		rc = cli_call(c, "GET", path, NULL, &r, NULL);
		if (rc != CLI_OK)
			break;
		items = cli_array(r.json, "items");
		n = items ? json_object_array_length(items) : 0;
		for (size_t i = 0; i < n; i++) {
			const char *id = cli_str(json_object_array_get_idx(items, i), "ident");

			if (id == NULL || !uuid_valid(id) || !cli_short_match(what, id))
				continue;
			if (found++ == 0)
				snprintf(first, sizeof(first), "%s", id);
		}
		n = (size_t)cli_int(r.json, "total_pages");
		http_resp_free(&r);
		if ((size_t)page >= n)
			break;
	}
	if (rc != CLI_OK)
		return rc;
	if (found > 1)
		return cli_fail(c, CLI_API,
				"%s %s is ambiguous: %lld %ss begin or end so (give more "
				"of its digits)",
				kind, clean, found, kind);
	if (found == 0)
		return cli_fail(c, CLI_API, "no %s ident begins or ends with '%s'", kind, clean);
	snprintf(out, UUID_STR_LEN, "%s", first);
	return CLI_OK;
}

int cli_task_ident(struct cli *c, const char *what, char *out)
{
	/* hidden tasks too: they are left out of the list, not out of use */
	return cli_by_name(c, "/tasks?hide=true", "task", "ident", what, true, false, out);
}

int cli_device_ident(struct cli *c, const char *what, char *out)
{
	return cli_by_name(c, "/devices", "device", "entity_ident", what, true, false, out);
}

int cli_group_ident(struct cli *c, const char *what, char *out)
{
	/* names are not unique: a send's name is often reused (docs/cli.md "Output") */
	return cli_by_name(c, "/groups?sort=-created_at", "group", "ident", what, true, true, out);
}

int cli_job_ident(struct cli *c, const char *what, char *out)
{
	return cli_by_name(c, "/jobs", "job", "ident", what, false, false, out);
}

const char **cli_idents(json_object *items, const char *k, size_t *n)
{
	size_t ni = items ? json_object_array_length(items) : 0;
	const char **ids = calloc(ni ? ni : 1, sizeof(*ids));

	*n = 0;
	for (size_t i = 0; ids && i < ni; i++)
		ids[(*n)++] = cli_str(json_object_array_get_idx(items, i), k);
	return ids;
}

/* One GET for names: quietly nothing on any error (names only help to read, docs/cli.md
 * "Tables"). */
static json_object *cli_names_get_page(struct cli *c, const char *path, struct http_resp *r)
{
	char errbuf[256];

	if (http_call(&c->http, "GET", path, NULL, r, errbuf, sizeof(errbuf)) != RCS_OK ||
	    r->status != 200 || r->json == NULL)
		return NULL;
	return r->json;
}

static void cli_names_add(struct cli_names *nm, json_object *d)
{
	const char *id = cli_str(d, "entity_ident"), *name = cli_str(d, "name");
	json_object *v;

	if (id == NULL || name == NULL || !json_object_object_get_ex(nm->want, id, &v))
		return;
	if (json_object_is_type(v, json_type_null)) {
		json_object_object_add(nm->want, id, json_object_new_string(name));
		nm->left--;
	}
}

/* One GET /devices/<id> for each ident still without a name. */
static void cli_names_each(struct cli *c, struct cli_names *nm)
{
	char path[64 + UUID_STR_LEN];
	struct http_resp r = {0};
	json_object *ans;

	json_object_object_foreach(nm->want, id, v)
	{
		if (v != NULL)
			continue;
		snprintf(path, sizeof(path), "/devices/%s", id);
		ans = cli_names_get_page(c, path, &r);
		if (ans != NULL)
			cli_names_add(nm, ans);
		http_resp_free(&r);
	}
}

void cli_names_load(struct cli *c, struct cli_names *nm, const char *const *ids, size_t n)
{
	char path[64];
	struct http_resp r = {0};
	json_object *ans;

	nm->want = json_object_new_object();
	nm->left = 0;
	for (size_t i = 0; nm->want && i < n; i++)
		if (ids[i] != NULL && uuid_valid(ids[i]) &&
		    !json_object_object_get_ex(nm->want, ids[i], NULL) &&
		    json_object_object_add(nm->want, ids[i], NULL) == 0)
			nm->left++;
	if (nm->left > 0 && nm->left <= CLI_NAMES_EACH) {
		cli_names_each(c, nm);
		return;
	}
	/* many: pages of every device until each is named, or one GET each for those left
	 * when that is fewer requests than the pages left */
	for (int p = 1; nm->left > 0 && p <= CLI_NAMES_PAGES; p++) {
		json_object *items;
		size_t ni;
		int64_t pages;

		snprintf(path, sizeof(path), "/devices?per_page=%d&page=%d", CLI_NAMES_PAGE, p);
		ans = cli_names_get_page(c, path, &r);
		items = cli_array(ans, "items");
		ni = items ? json_object_array_length(items) : 0;
		pages = cli_int(ans, "total_pages");
		for (size_t i = 0; i < ni; i++)
			cli_names_add(nm, json_object_array_get_idx(items, i));
		http_resp_free(&r);
		if (ni < CLI_NAMES_PAGE || pages <= p)
			break;
		if ((int64_t)nm->left <= pages - p) {
			cli_names_each(c, nm);
			break;
		}
	}
}

const char *cli_names_of(const struct cli_names *nm, const char *ident)
{
	json_object *v;

	if (nm->want == NULL || ident == NULL || !json_object_object_get_ex(nm->want, ident, &v))
		return NULL;
	return v != NULL && json_object_is_type(v, json_type_string) ? json_object_get_string(v)
								     : NULL;
}

void cli_names_free(struct cli_names *nm)
{
	json_object_put(nm->want);
	nm->want = NULL;
}

const char *cli_device_cell(char *out, size_t len, const struct cli_names *nm, const char *ident,
			    size_t digits)
{
	char id[UUID_STR_LEN];
	const char *name = cli_names_of(nm, ident);

	table_short(id, sizeof(id), ident, digits);
	snprintf(out, len, "%s%s%s", id, name ? " " : "", name ? name : "");
	return out;
}

const char *cli_device_line(char *out, size_t len, const struct cli_names *nm, const char *ident)
{
	char id[UUID_STR_LEN];
	const char *name = cli_names_of(nm, ident);

	table_short(id, sizeof(id), ident, TABLE_SHORT_MIN);
	if (name != NULL)
		snprintf(out, len, "%s (%s)", name, id);
	else
		snprintf(out, len, "%s", id);
	return out;
}

int cli_read_file(struct cli *c, const char *path, struct buf *b)
{
	FILE *fp = NULL;
	char chunk[8192];
	size_t n;
	int rc = CLI_OK;

	fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (fp == NULL) {
		rc = cli_fail(c, CLI_USAGE, "%s: %s", path, strerror(errno));
		goto out;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
		if (buf_append(b, chunk, n) != RCS_OK) {
			rc = cli_fail(c, CLI_USAGE, "%s: larger than %zu bytes", path, b->max);
			goto out;
		}
	}
	if (ferror(fp))
		rc = cli_fail(c, CLI_USAGE, "%s: %s", path, strerror(errno));
	else if (b->data == NULL && buf_append(b, "", 0) != RCS_OK)
		rc = cli_fail(c, CLI_USAGE, "out of memory");
out:
	if (fp != NULL && fp != stdin)
		fclose(fp);
	return rc;
}
