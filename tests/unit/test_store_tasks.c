/* Unit tests of the store's keys, scripts and tasks as typed records (coordinator/store_keys.c,
 * coordinator/store_tasks.c) and of their renders (coordinator/render.c), on a database in
 * memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "manifest.h"
#include "render.h"
#include "store.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "store_test_db.h"

#define ROOT  "01890000-0000-7000-8000-000000000001"
#define OTHER "01890000-0000-7000-8000-000000000002"
#define TASK1 "01890000-0000-7000-8000-00000000000a"
#define TASK2 "01890000-0000-7000-8000-00000000000b"
#define KEY1  "01890000-0000-7000-8000-0000000000a1"
#define KEY2  "01890000-0000-7000-8000-0000000000a2"
#define KEY3  "01890000-0000-7000-8000-0000000000a3"

static const char SRC[] = "return rcs.variables.message";

static int setup(void **state)
{
	struct store *st = NULL;
	char db[256] = ":memory:";

	if (store_test_pg())
		assert_true(store_test_db("", db, sizeof(db)));
	assert_int_equal(store_open(db, &st), RCS_OK);
	assert_int_equal(store_tenant_create(st, ROOT, 100), RCS_OK);
	assert_int_equal(store_tenant_create(st, OTHER, 100), RCS_OK);
	*state = st;
	return 0;
}

static int teardown(void **state)
{
	store_close(*state);
	return 0;
}

/* What a render wrote, as text (the caller frees it with buf_free). */
#define RENDERED(b, call)                                                                          \
	do {                                                                                       \
		struct render w_;                                                                  \
		buf_init(&(b), 1 << 20);                                                           \
		render_init(&w_, &(b));                                                            \
		call;                                                                              \
		assert_int_equal(render_end(&w_), RCS_OK);                                         \
		assert_int_equal(buf_append(&(b), "", 1), RCS_OK);                                 \
	} while (0)
#define W (&w_)

static void test_keys(void **state)
{
	struct store *st = *state;
	struct store_page pg = {.page = 1, .per_page = 2, .sort = "created_at"};
	struct store_key_list l;
	struct key_rec k;
	struct buf b;

	assert_int_equal(store_key_create(st, KEY1, ROOT, "alice", ROLE_ADMIN, "h1", 10), RCS_OK);
	assert_int_equal(store_key_create(st, KEY2, ROOT, "bob", ROLE_VIEWER, "h2", 11), RCS_OK);
	assert_int_equal(store_key_create(st, KEY3, ROOT, "carol", ROLE_OPERATOR, "h3", 12),
			 RCS_OK);
	assert_int_equal(store_key_revoke(st, ROOT, KEY2, 20), RCS_OK);

	assert_int_equal(store_key_get(st, ROOT, KEY2, &k), RCS_OK);
	assert_string_equal(k.ident, KEY2);
	assert_string_equal(k.user, "bob");
	assert_int_equal(k.role, ROLE_VIEWER);
	assert_string_equal(k.client_root, ROOT);
	assert_int_equal(k.created_at, 11);
	assert_int_equal(k.revoked_at, 20);
	RENDERED(b, render_api_key(W, &k));
	assert_string_equal(b.data, "{\"ident\":\"" KEY2 "\",\"user\":\"bob\",\"role\":\"viewer\","
				    "\"client_root\":\"" ROOT "\",\"created_at\":11,"
				    "\"revoked_at\":20}");
	buf_free(&b);
	store_key_rec_free(&k);

	assert_int_equal(store_key_get(st, ROOT, KEY1, &k), RCS_OK);
	RENDERED(b, render_api_key_new(W, &k, "secret"));
	assert_string_equal(b.data, "{\"ident\":\"" KEY1 "\",\"user\":\"alice\",\"role\":\"admin\","
				    "\"client_root\":\"" ROOT "\",\"created_at\":10,"
				    "\"revoked_at\":null,\"api_key\":\"secret\"}");
	buf_free(&b);
	store_key_rec_free(&k);
	assert_int_equal(store_key_get(st, OTHER, KEY1, &k), RCS_ERR_NOTFOUND);
	assert_null(k.user);

	assert_int_equal(store_keys_list(st, ROOT, &pg, &l), RCS_OK);
	assert_int_equal(l.pg.total, 3);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.items[0].ident, KEY1);
	assert_string_equal(l.items[1].user, "bob");
	RENDERED(b, render_api_key_list(W, &l));
	{
		json_object *o = json_tokener_parse(b.data);

		assert_non_null(o);
		assert_int_equal(json_object_get_int(json_object_object_get(o, "total_pages")), 2);
		assert_int_equal(json_object_array_length(json_object_object_get(o, "items")), 2);
		json_object_put(o);
	}
	buf_free(&b);
	store_key_list_free(&l);
	pg.page = 2;
	assert_int_equal(store_keys_list(st, ROOT, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.items[0].role, ROLE_OPERATOR);
	store_key_list_free(&l);
	assert_int_equal(store_keys_list(st, OTHER, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	assert_int_equal(l.pg.total, 0);
	store_key_list_free(&l);
	assert_true(store_tenant_exists(st, ROOT));
	assert_false(store_tenant_exists(st, "01890000-0000-7000-8000-0000000000ff"));
}

static void test_scripts(void **state)
{
	struct store *st = *state;
	struct store_page pg = {.page = 1, .per_page = 50, .sort = "created_at"};
	const char odd[] = "-- \"q\"\n\x01 bytes\0after";
	/* PostgreSQL's text holds no NUL byte (docs/coordinator.md) */
	const size_t odd_len = store_test_pg() ? strlen(odd) : sizeof(odd) - 1;
	struct render_task_bump bump[1] = {{TASK1, 3}};
	struct store_script_list l;
	struct script_rec s;
	char sha[SHA256_HEX_LEN], got_sha[65];
	char *src = NULL;
	size_t len = 0;
	bool created = false;
	struct buf b;

	assert_int_equal(store_script_put(st, "", "echo", SRC, strlen(SRC), 5, NULL), RCS_OK);
	assert_int_equal(store_script_put(st, "", "stock-only", "return 1", 8, 5, NULL), RCS_OK);
	assert_int_equal(store_script_put(st, ROOT, "echo", odd, odd_len, 7, &created), RCS_OK);
	assert_true(created);
	assert_int_equal(store_script_put(st, ROOT, "echo", odd, odd_len, 9, &created), RCS_OK);
	assert_false(created);

	/* the tenant's shadows the stock one; the bytes come back exactly */
	sha256_hex(odd, odd_len, sha);
	assert_int_equal(store_script_get(st, ROOT, "echo", true, &s), RCS_OK);
	assert_string_equal(s.name, "echo");
	assert_string_equal(s.sha256, sha);
	assert_int_equal(s.size, odd_len);
	assert_false(s.stock);
	assert_int_equal(s.updated_at, 7); /* same bytes: unchanged */
	assert_int_equal(s.source_len, odd_len);
	assert_memory_equal(s.source, odd, odd_len);
	store_script_rec_free(&s);
	assert_int_equal(store_script_source(st, ROOT, "echo", &src, &len, got_sha), RCS_OK);
	assert_int_equal(len, odd_len);
	assert_memory_equal(src, odd, len);
	assert_string_equal(got_sha, sha);
	free(src);

	assert_int_equal(store_script_get(st, OTHER, "echo", false, &s), RCS_OK);
	assert_true(s.stock);
	assert_null(s.source);
	sha256_hex(SRC, strlen(SRC), sha);
	RENDERED(b, render_script(W, &s));
	{
		char want[512];

		snprintf(want, sizeof(want),
			 "{\"name\":\"echo\",\"sha256\":\"%s\",\"size\":%zu,\"stock\":true,"
			 "\"updated_at\":5}",
			 sha, strlen(SRC));
		assert_string_equal(b.data, want);
	}
	buf_free(&b);
	store_script_rec_free(&s);
	assert_int_equal(store_script_get(st, OTHER, "nope", true, &s), RCS_ERR_NOTFOUND);

	assert_int_equal(store_script_get(st, OTHER, "stock-only", true, &s), RCS_OK);
	RENDERED(b, render_script_put(W, &s, bump, 1));
	{
		char want[512], ssha[SHA256_HEX_LEN];

		sha256_hex("return 1", 8, ssha);
		snprintf(want, sizeof(want),
			 "{\"name\":\"stock-only\",\"sha256\":\"%s\",\"size\":8,\"stock\":true,"
			 "\"updated_at\":5,\"source\":\"return 1\",\"tasks_updated\":[{\"ident\":"
			 "\"" TASK1 "\",\"version\":3}]}",
			 ssha);
		assert_string_equal(b.data, want);
	}
	{
		json_object *o = json_tokener_parse(b.data), *u;

		assert_non_null(o);
		assert_string_equal(json_object_get_string(json_object_object_get(o, "source")),
				    "return 1");
		u = json_object_object_get(o, "tasks_updated");
		assert_int_equal(json_object_array_length(u), 1);
		assert_string_equal(json_object_get_string(json_object_object_get(
					json_object_array_get_idx(u, 0), "ident")),
				    TASK1);
		assert_int_equal(json_object_get_int(json_object_object_get(
				     json_object_array_get_idx(u, 0), "version")),
				 3);
		json_object_put(o);
	}
	buf_free(&b);
	store_script_rec_free(&s);

	/* the list: the tenant's echo instead of the stock one, in name order */
	assert_int_equal(store_scripts_list(st, ROOT, &pg, &l), RCS_OK);
	assert_int_equal(l.pg.total, 2);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.items[0].name, "echo");
	assert_false(l.items[0].stock);
	assert_null(l.items[0].source);
	assert_string_equal(l.items[1].name, "stock-only");
	assert_true(l.items[1].stock);
	store_script_list_free(&l);
	assert_true(store_script_is_stock(st, "echo"));
	assert_false(store_script_is_stock(st, "nope"));
}

static void task_write_init(struct task_write *t, const char *ident, const char *sha)
{
	memset(t, 0, sizeof(*t));
	t->ident = ident;
	t->client_root = ROOT;
	t->version = 1;
	t->name = "Echo \"it\"";
	t->script = "echo";
	t->script_src = SRC;
	t->script_len = strlen(SRC);
	t->script_sha256 = sha;
	t->variables_info = "{\"message\":{\"type\":\"string\"}}";
	t->constants = "{\"k\":[1,2]}";
	t->comment = "c";
	t->active = false;
	t->is_public = false;
	t->timeout = 300;
	t->created_user = "alice";
	t->created_at = t->update_at = 100;
	t->mail_list = "[\"ops@example.com\"]";
	t->status_list = "[\"terminated\"]";
}

static void test_tasks(void **state)
{
	struct store *st = *state;
	struct store_page pg = {.page = 1, .per_page = 50, .sort = "created_at"};
	struct task_filter f = {false, NULL};
	struct store_task_list l;
	struct store_idents ids;
	struct task_version tv;
	struct task_write t;
	struct task_rec r;
	char sha[SHA256_HEX_LEN], want[2048];
	struct buf b;

	sha256_hex(SRC, strlen(SRC), sha);
	assert_int_equal(store_script_put(st, "", "echo", SRC, strlen(SRC), 5, NULL), RCS_OK);
	task_write_init(&t, TASK1, sha);
	assert_int_equal(store_task_put(st, &t, true), RCS_OK);
	/* defaults for JSON members left NULL; public and hidden */
	task_write_init(&t, TASK2, sha);
	t.variables_info = t.constants = t.mail_list = t.status_list = NULL;
	t.comment = NULL;
	t.active = t.is_public = t.hide = true;
	t.created_user = "bob";
	assert_int_equal(store_task_put(st, &t, true), RCS_OK);

	assert_int_equal(store_task_get(st, ROOT, TASK1, &r), RCS_OK);
	assert_int_equal(r.version, 1);
	assert_string_equal(r.ident, TASK1);
	assert_string_equal(r.client_root, ROOT);
	assert_string_equal(r.created_user, "alice");
	assert_null(r.update_user);
	assert_string_equal(r.constants, "{\"k\":[1,2]}");
	assert_false(r.active);
	assert_false(r.is_public);
	assert_null(r.signature);
	RENDERED(b, render_task(W, &r));
	snprintf(want, sizeof(want),
		 "{\"version\":1,\"ident\":\"" TASK1 "\",\"client_root\":\"" ROOT "\","
		 "\"created_user\":\"alice\",\"update_user\":null,\"name\":\"Echo \\\"it\\\"\","
		 "\"script\":\"echo\",\"variables_info\":{\"message\":{\"type\":\"string\"}},"
		 "\"constants\":{\"k\":[1,2]},\"comment\":\"c\",\"active\":\"false\","
		 "\"public\":false,\"hide\":false,\"allow_offline\":false,\"created_at\":100,"
		 "\"update_at\":100,\"notification_mail_list\":[\"ops@example.com\"],"
		 "\"notification_status_list\":[\"terminated\"],\"timeout\":300,"
		 "\"script_sha256\":\"%s\",\"signature\":null,\"retry\":null,"
		 "\"artifacts\":{},\"release\":null,\"download_timeout\":86400}",
		 sha);
	assert_string_equal(b.data, want);
	buf_free(&b);
	store_task_rec_free(&r);

	assert_int_equal(store_task_get(st, ROOT, TASK2, &r), RCS_OK);
	assert_string_equal(r.variables_info, "{}");
	assert_string_equal(r.mail_list, "[]");
	assert_string_equal(r.comment, "");
	assert_true(r.active);
	store_task_rec_free(&r);

	/* who may see it: alice's private task is hidden from bob, not from alice */
	assert_int_equal(store_task_get_visible(st, ROOT, TASK1, "bob", &r), RCS_ERR_NOTFOUND);
	assert_int_equal(store_task_get_visible(st, ROOT, TASK1, "alice", &r), RCS_OK);
	store_task_rec_free(&r);
	assert_int_equal(store_task_get_visible(st, ROOT, TASK2, "alice", &r), RCS_OK);
	store_task_rec_free(&r);
	assert_int_equal(store_task_get(st, OTHER, TASK1, &r), RCS_ERR_NOTFOUND);

	/* lists: hidden ones only when asked for, others' private ones never */
	assert_int_equal(store_tasks_list(st, ROOT, &f, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].ident, TASK1);
	store_task_list_free(&l);
	f.include_hidden = true;
	f.only_visible_to = "bob";
	assert_int_equal(store_tasks_list(st, ROOT, &f, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.pg.total, 1);
	assert_string_equal(l.items[0].ident, TASK2);
	RENDERED(b, render_task_list(W, &l));
	{
		json_object *o = json_tokener_parse(b.data), *it;

		assert_non_null(o);
		it = json_object_array_get_idx(json_object_object_get(o, "items"), 0);
		assert_string_equal(json_object_get_string(json_object_object_get(it, "active")),
				    "true");
		assert_true(json_object_get_boolean(json_object_object_get(it, "hide")));
		json_object_put(o);
	}
	buf_free(&b);
	store_task_list_free(&l);

	/* a signature on the current version: the task and its snapshot */
	assert_int_equal(store_task_set_signature(st, ROOT, TASK1, "{\"alg\":\"ES256\"}"), RCS_OK);
	assert_int_equal(store_task_get(st, ROOT, TASK1, &r), RCS_OK);
	assert_string_equal(r.signature, "{\"alg\":\"ES256\"}");
	store_task_rec_free(&r);
	assert_int_equal(store_task_version_get(st, TASK1, 1, &tv), RCS_OK);
	assert_string_equal(tv.script_name, "echo");
	assert_int_equal(tv.script_len, strlen(SRC));
	assert_memory_equal(tv.script_src, SRC, tv.script_len);
	assert_string_equal(tv.script_sha256, sha);
	assert_string_equal(tv.constants, "{\"k\":[1,2]}");
	assert_string_equal(tv.variables_info, "{\"message\":{\"type\":\"string\"}}");
	assert_string_equal(tv.signature, "{\"alg\":\"ES256\"}");
	assert_int_equal(tv.timeout, 300);
	store_task_version_free(&tv);
	assert_int_equal(store_task_set_signature(st, OTHER, TASK1, NULL), RCS_ERR_NOTFOUND);

	/* a new version */
	task_write_init(&t, TASK1, sha);
	t.version = 2;
	t.update_user = "carol";
	t.update_at = 200;
	t.constants = "{}";
	assert_int_equal(store_task_put(st, &t, false), RCS_OK);
	assert_int_equal(store_task_get(st, ROOT, TASK1, &r), RCS_OK);
	assert_int_equal(r.version, 2);
	assert_string_equal(r.update_user, "carol");
	assert_int_equal(r.update_at, 200);
	assert_null(r.signature);
	store_task_rec_free(&r);
	assert_int_equal(store_task_version_get(st, TASK1, 2, &tv), RCS_OK);
	assert_string_equal(tv.constants, "{}");
	assert_null(tv.signature);
	store_task_version_free(&tv);

	assert_int_equal(store_tasks_using_script(st, ROOT, "echo", &ids), RCS_OK);
	assert_int_equal(ids.n, 2);
	assert_string_equal(ids.v[0], TASK1);
	assert_string_equal(ids.v[1], TASK2);
	store_idents_free(&ids);
	assert_int_equal(store_task_delete(st, ROOT, TASK1), RCS_OK);
	assert_int_equal(store_tasks_using_script(st, ROOT, "echo", &ids), RCS_OK);
	assert_int_equal(ids.n, 1);
	store_idents_free(&ids);
	assert_int_equal(store_tasks_using_script(st, OTHER, "echo", &ids), RCS_OK);
	assert_int_equal(ids.n, 0);
	assert_null(ids.v);
	store_idents_free(&ids);
}

/* PostgreSQL only: a lost connection fails what runs on it, and the next statement outside
 * a transaction connects again; a text with a NUL byte is refused, not cut short. */
static void test_pg_connection(void **state)
{
	struct store *st = *state;
	const char *url = store_test_pg_url();
	enum rcs_err err;

	if (url == NULL)
		return;
#ifdef RCS_WITH_POSTGRES
	assert_true(store_test_pg_exec(url, "SELECT pg_terminate_backend(pid) FROM"
					    " pg_stat_activity WHERE datname LIKE 't\\_%'"));
	err = store_tenant_create(st, "01890000-0000-7000-8000-0000000000c1", 100);
	assert_true(err == RCS_OK || err == RCS_ERR_IO);
	assert_int_equal(store_tenant_create(st, "01890000-0000-7000-8000-0000000000c2", 100),
			 RCS_OK);
	assert_true(store_tenant_exists(st, "01890000-0000-7000-8000-0000000000c2"));
	assert_int_equal(store_ping(st), RCS_OK);
	assert_int_equal(store_script_put(st, ROOT, "nul", "a\0b", 3, 5, NULL), RCS_ERR_INVAL);
	assert_int_equal(store_script_put(st, ROOT, "nul", "ab", 2, 5, NULL), RCS_OK);
#else
	(void)st;
	(void)err;
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_scripts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tasks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pg_connection, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
