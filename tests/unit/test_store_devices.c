/*
 * Unit tests of the store's devices, the transport's and scheduler's queues and the e-mail
 * outbox (coordinator/store_devices.c, store_queues.c, store_outbox.c) on a real SQLite
 * file, and of their records' renders (render_device).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <unistd.h>

#include "render.h"
#include "store.h"
#include "store_devices.h"
#include "store_groups.h"
#include "store_keys.h"
#include "store_outbox.h"
#include "store_queues.h"
#include "store_test_db.h"

#define NOW 1700000000LL

struct fixture {
	char dir[64];
	char path[128];
	struct store *st;
	char root[UUID_STR_LEN];
};

/* Fixed idents, in ident order. */
#define DEV_ON  "00000000-0000-7000-8000-00000000d001"
#define DEV_OFF "00000000-0000-7000-8000-00000000d002"
#define JOB(n)  "00000000-0000-7000-8000-0000000000" n

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-devs-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_true(store_test_db(f->dir, f->path, sizeof(f->path)));
	assert_int_equal(store_open(f->path, &f->st), RCS_OK);
	assert_int_equal(uuid_v7(f->root), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, f->root, 100), RCS_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[256];

	store_close(f->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return 1;
	free(f);
	return 0;
}

/* Runs SQL on a connection of its own (no foreign keys: rows of other domains stand
 * alone), with each @ROOT@ replaced by the tenant. */
/* store_device_state with a state of no ts (older agents); came, changed may be NULL. */
static enum rcs_err state_at(struct store *st, const char *root, const char *dev, bool online,
			     const char *tags, const char *version, int64_t now, bool *came,
			     bool *changed)
{
	struct store_state_in in = {online, tags, version, 0, NULL};
	struct store_state_out out;
	enum rcs_err err = store_device_state(st, root, dev, &in, now, &out);

	if (came)
		*came = out.came_online;
	if (changed)
		*changed = out.tags_changed;
	return err;
}

static void sql(struct fixture *f, const char *text)
{
	char full[8192];
	size_t n = 0;
	sqlite3 *db = NULL;
	char *msg = NULL;
	int rc;

	for (const char *p = text; *p != '\0';) {
		if (strncmp(p, "@ROOT@", 6) == 0) {
			assert_true(n + UUID_STR_LEN < sizeof(full));
			memcpy(full + n, f->root, strlen(f->root));
			n += strlen(f->root);
			p += 6;
		} else {
			assert_true(n + 1 < sizeof(full));
			full[n++] = *p++;
		}
	}
	full[n] = '\0';
	if (store_test_pg()) {
#ifdef RCS_WITH_POSTGRES
		char pg[8300];

		/* replica: no foreign keys (their triggers don't fire) */
		snprintf(pg, sizeof(pg), "SET session_replication_role = replica; %s", full);
		if (!store_test_pg_exec(f->path, pg))
			fail_msg("%s", full);
#endif
		return;
	}
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	rc = sqlite3_exec(db, full, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", full, msg ? msg : "?");
	sqlite3_close(db);
}

static long long sql_int(struct fixture *f, const char *query)
{
	long long v = store_test_db_int(f->path, query, NULL);

	assert_true(v >= -1);
	return v;
}

static char *rendered_device(const struct device_rec *r)
{
	struct render w;
	struct buf b;
	char *text;

	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_device(&w, r);
	assert_int_equal(render_end(&w), RCS_OK);
	text = strdup(b.data);
	buf_free(&b);
	return text;
}

/* ---- render ---- */

static void test_render_device(void **state)
{
	struct device_rec r;
	char *text;

	(void)state;
	memset(&r, 0, sizeof(r));
	snprintf(r.entity_ident, sizeof(r.entity_ident), "%s", DEV_ON);
	snprintf(r.client_root, sizeof(r.client_root), "%s", DEV_OFF);
	r.name = "pump \"7\"";
	r.tags = "[\"lab\",\"x:y/z\"]";
	r.reported_tags = "[]";
	r.created_at = 10;
	r.update_at = 11;
	/* never seen: last_seen and agent_version null */
	text = rendered_device(&r);
	assert_string_equal(text, "{\"entity_ident\":\"" DEV_ON "\",\"client_root\":\"" DEV_OFF
				  "\",\"name\":\"pump \\\"7\\\"\",\"tags\":[\"lab\",\"x:y/z\"],"
				  "\"reported_tags\":[],\"online\":false,\"last_seen\":null,"
				  "\"agent_version\":null,\"created_at\":10,\"update_at\":11,"
				  "\"attributes\":{}}");
	free(text);
	r.online = true;
	r.last_seen = 12;
	r.agent_version = "0.1.0";
	r.reported_tags = "[\"rep\"]";
	r.attributes = "{\"fw\":\"2.0\"}";
	text = rendered_device(&r);
	assert_string_equal(text, "{\"entity_ident\":\"" DEV_ON "\",\"client_root\":\"" DEV_OFF
				  "\",\"name\":\"pump \\\"7\\\"\",\"tags\":[\"lab\",\"x:y/z\"],"
				  "\"reported_tags\":[\"rep\"],\"online\":true,\"last_seen\":12,"
				  "\"agent_version\":\"0.1.0\",\"created_at\":10,\"update_at\":11,"
				  "\"attributes\":{\"fw\":\"2.0\"}}");
	free(text);
}

static void test_render_device_list(void **state)
{
	struct device_rec items[2];
	struct store_device_list l = {
	    .pg = {.page = 1, .per_page = 2, .total = 3}, .items = items, .n = 2};
	struct render w;
	struct buf b;

	(void)state;
	memset(items, 0, sizeof(items));
	for (int i = 0; i < 2; i++) {
		snprintf(items[i].entity_ident, sizeof(items[i].entity_ident), "%s",
			 i ? DEV_OFF : DEV_ON);
		snprintf(items[i].client_root, sizeof(items[i].client_root), "r");
		items[i].name = "n";
		items[i].tags = "[]";
		items[i].reported_tags = "[]";
	}
	buf_init(&b, 1 << 16);
	render_init(&w, &b);
	render_device_list(&w, &l);
	assert_int_equal(render_end(&w), RCS_OK);
	assert_string_equal(
	    b.data, "{\"page\":1,\"per_page\":2,\"total_pages\":2,\"total_items\":3,\"items\":["
		    "{\"entity_ident\":\"" DEV_ON "\",\"client_root\":\"r\",\"name\":\"n\","
		    "\"tags\":[],\"reported_tags\":[],\"online\":false,\"last_seen\":null,"
		    "\"agent_version\":null,\"created_at\":0,\"update_at\":0,\"attributes\":{}},"
		    "{\"entity_ident\":\"" DEV_OFF "\",\"client_root\":\"r\",\"name\":\"n\","
		    "\"tags\":[],\"reported_tags\":[],\"online\":false,\"last_seen\":null,"
		    "\"agent_version\":null,\"created_at\":0,\"update_at\":0,\"attributes\":{}}]}");
	buf_free(&b);
}

/* ---- devices ---- */

static void test_device_records(void **state)
{
	struct fixture *f = *state;
	struct store_page pg = {.page = 1, .per_page = 10, .sort = "created_at"};
	struct store_device_list l;
	struct device_rec d;
	bool online = true;

	assert_int_equal(
	    store_device_insert(f->st, f->root, DEV_ON, "one", "[\"lab\",\"a/b\"]", 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_OFF, "two", "[]", 101), RCS_OK);
	/* the same ident again is refused */
	assert_int_not_equal(store_device_insert(f->st, f->root, DEV_ON, "x", "[]", 102), RCS_OK);

	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_string_equal(d.entity_ident, DEV_ON);
	assert_string_equal(d.client_root, f->root);
	assert_string_equal(d.name, "one");
	assert_string_equal(d.tags, "[\"lab\",\"a/b\"]");
	assert_string_equal(d.reported_tags, "[]");
	assert_false(d.online);
	assert_int_equal(d.last_seen, 0);
	assert_null(d.agent_version);
	assert_int_equal(d.created_at, 100);
	assert_int_equal(d.update_at, 100);
	store_device_rec_free(&d);
	/* another tenant's, or none */
	assert_int_equal(
	    store_device_get(f->st, "00000000-0000-7000-8000-000000000000", DEV_ON, &d),
	    RCS_ERR_NOTFOUND);
	assert_int_equal(store_device_presence(f->st, f->root, DEV_ON, &online), RCS_OK);
	assert_false(online);

	/* name only, then tags only */
	assert_int_equal(store_device_update(f->st, f->root, DEV_ON, "uno", NULL, 200), RCS_OK);
	assert_int_equal(store_device_update(f->st, f->root, DEV_ON, NULL, "[\"new\"]", 201),
			 RCS_OK);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_string_equal(d.name, "uno");
	assert_string_equal(d.tags, "[\"new\"]");
	assert_int_equal(d.update_at, 201);
	store_device_rec_free(&d);
	assert_int_equal(store_device_update(f->st, f->root, JOB("99"), "x", NULL, 1),
			 RCS_ERR_NOTFOUND);

	/* lists: all, by tag (the old tag is gone), by presence */
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, NULL, &pg, &l), RCS_OK);
	assert_int_equal(l.pg.total, 2);
	assert_int_equal(l.pg.page, 1);
	assert_int_equal(l.pg.per_page, 10);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.items[0].entity_ident, DEV_ON);
	assert_string_equal(l.items[1].name, "two");
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, "lab", -1, NULL, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	assert_int_equal(l.pg.total, 0);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, "new", 0, NULL, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, 1, NULL, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	store_device_list_free(&l);
	pg.per_page = 1;
	pg.page = 2;
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, NULL, &pg, &l), RCS_OK);
	assert_int_equal(l.pg.total, 2);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].entity_ident, DEV_OFF);
	store_device_list_free(&l);

	assert_int_equal(store_device_delete(f->st, f->root, DEV_OFF), RCS_OK);
	assert_int_equal(store_device_delete(f->st, f->root, DEV_OFF), RCS_ERR_NOTFOUND);
	assert_int_equal(store_device_get(f->st, f->root, DEV_OFF, &d), RCS_ERR_NOTFOUND);
}

/* A list send's devices read at once (store_devices_presence_of): each found or not, with
 * its presence; another tenant's device is not found, nor is one never made. */
static void test_presence_of_many(void **state)
{
	struct fixture *f = *state;
	char other[UUID_STR_LEN], theirs[UUID_STR_LEN];
	const char *idents[4];
	bool found[4], online[4];

	assert_int_equal(uuid_v7(other), RCS_OK);
	assert_int_equal(uuid_v7(theirs), RCS_OK);
	assert_int_equal(store_tenant_create(f->st, other, 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, other, theirs, "theirs", "[]", 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "one", "[]", 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_OFF, "two", "[]", 100), RCS_OK);
	assert_int_equal(state_at(f->st, f->root, DEV_ON, true, NULL, NULL, 150, NULL, NULL),
			 RCS_OK);
	/* in strcmp order: JOB("99") (none), DEV_ON, DEV_OFF, theirs (a later UUID v7) */
	idents[0] = JOB("99");
	idents[1] = DEV_ON;
	idents[2] = DEV_OFF;
	idents[3] = theirs;
	found[0] = online[0] = true;
	assert_int_equal(store_devices_presence_of(f->st, f->root, idents, 4, found, online),
			 RCS_OK);
	assert_false(found[0]);
	assert_false(online[0]);
	assert_true(found[1]);
	assert_true(online[1]);
	assert_true(found[2]);
	assert_false(online[2]);
	assert_false(found[3]);
	assert_int_equal(store_devices_presence_of(f->st, f->root, idents, 0, found, online),
			 RCS_OK);
}

static void test_device_state_and_tags(void **state)
{
	struct fixture *f = *state;
	struct store_device_presence_list p;
	struct device_rec d;
	bool came = true, online = false;

	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "one", "[\"lab\"]", 100),
			 RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_OFF, "two", "[\"lab\"]", 100),
			 RCS_OK);
	assert_int_equal(state_at(f->st, f->root, JOB("99"), true, NULL, NULL, 150, &came, NULL),
			 RCS_ERR_NOTFOUND);
	assert_false(came);
	assert_int_equal(
	    state_at(f->st, f->root, DEV_ON, true, "[\"rep\",\"rep\"]", "0.2.0", 150, &came, NULL),
	    RCS_OK);
	assert_true(came);
	/* still online: not coming online again; tags and version unchanged when absent */
	assert_int_equal(state_at(f->st, f->root, DEV_ON, true, NULL, NULL, 160, &came, NULL),
			 RCS_OK);
	assert_false(came);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_true(d.online);
	assert_int_equal(d.last_seen, 160);
	assert_string_equal(d.agent_version, "0.2.0");
	assert_string_equal(d.reported_tags, "[\"rep\",\"rep\"]");
	assert_string_equal(d.tags, "[\"lab\"]");
	store_device_rec_free(&d);
	assert_int_equal(store_device_presence(f->st, f->root, DEV_ON, &online), RCS_OK);
	assert_true(online);

	/* operator and reported tags both count */
	assert_int_equal(store_devices_with_tag(f->st, f->root, "lab", 10, &p), RCS_OK);
	assert_int_equal(p.n, 2);
	assert_string_equal(p.items[0].entity_ident, DEV_ON);
	assert_true(p.items[0].online);
	assert_string_equal(p.items[1].entity_ident, DEV_OFF);
	assert_false(p.items[1].online);
	store_device_presence_list_free(&p);
	assert_int_equal(store_devices_with_tag(f->st, f->root, "rep", 10, &p), RCS_OK);
	assert_int_equal(p.n, 1);
	store_device_presence_list_free(&p);
	assert_int_equal(store_devices_with_tag(f->st, f->root, "lab", 1, &p), RCS_ERR_TOOBIG);
	assert_int_equal(p.n, 0);
	assert_null(p.items);
	/* the same state again (a reconnect's) changes no tags; other tags do */
	{
		bool changed = true;

		assert_int_equal(state_at(f->st, f->root, DEV_ON, true, "[\"rep\",\"rep\"]", NULL,
					  165, &came, &changed),
				 RCS_OK);
		assert_false(came);
		assert_false(changed);
		assert_int_equal(
		    state_at(f->st, f->root, DEV_ON, true, NULL, NULL, 165, &came, &changed),
		    RCS_OK);
		assert_false(changed);
		assert_int_equal(
		    state_at(f->st, f->root, DEV_ON, true, "[\"rep\"]", NULL, 166, &came, &changed),
		    RCS_OK);
		assert_true(changed);
		assert_int_equal(store_devices_with_tag(f->st, f->root, "rep", 10, &p), RCS_OK);
		assert_int_equal(p.n, 1);
		store_device_presence_list_free(&p);
	}
	/* reported tags replaced */
	assert_int_equal(state_at(f->st, f->root, DEV_ON, false, "[]", NULL, 170, &came, NULL),
			 RCS_OK);
	assert_int_equal(store_devices_with_tag(f->st, f->root, "rep", 10, &p), RCS_OK);
	assert_int_equal(p.n, 0);
	store_device_presence_list_free(&p);

	assert_int_equal(state_at(f->st, f->root, DEV_OFF, true, NULL, NULL, 180, &came, NULL),
			 RCS_OK);
	assert_int_equal(store_devices_presence_reset(f->st), RCS_OK);
	assert_int_equal(store_device_presence(f->st, f->root, DEV_OFF, &online), RCS_OK);
	assert_false(online);
}

/* The order of a device's states (docs/mqtt.md, "State"): an offline state older than the
 * state applied last is a Last Will or a retained copy of an earlier connection, which a
 * broker cluster can deliver after the next connection's online state: not applied. An
 * online state is applied whatever its ts (a device whose clock went back), an offline one
 * of the same connection (same ts) is, and one without ts (older agents) always is. */
static void test_device_state_order(void **state)
{
	struct fixture *f = *state;
	struct store_state_in in = {true, NULL, NULL, 2000, NULL};
	struct store_state_out out;
	struct device_rec d;
	bool online = false;

	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "one", "[]", 100), RCS_OK);
	/* connection 2000 online */
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 150, &out), RCS_OK);
	assert_true(out.came_online);
	assert_false(out.stale);
	assert_int_equal(out.last_ts, 0);
	/* connection 1999's Last Will, late: not applied, nothing written */
	in.online = false;
	in.ts = 1999;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 160, &out), RCS_OK);
	assert_true(out.stale);
	assert_true(out.was_online);
	assert_int_equal(out.last_ts, 2000);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_true(d.online);
	assert_int_equal(d.last_seen, 150);
	store_device_rec_free(&d);
	/* connection 2000's own Last Will: applied */
	in.ts = 2000;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 170, &out), RCS_OK);
	assert_false(out.stale);
	assert_true(out.was_online);
	assert_int_equal(store_device_presence(f->st, f->root, DEV_ON, &online), RCS_OK);
	assert_false(online);
	/* online with an earlier clock (reset by a power cut): applied, and the new reference */
	in.online = true;
	in.ts = 500;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 180, &out), RCS_OK);
	assert_true(out.came_online);
	assert_int_equal(out.last_ts, 2000);
	in.online = false;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 190, &out), RCS_OK);
	assert_false(out.stale);
	assert_int_equal(out.last_ts, 500);
	/* online again, then an offline state without ts: applied */
	in.online = true;
	in.ts = 600;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 200, &out), RCS_OK);
	in.online = false;
	in.ts = 0;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 210, &out), RCS_OK);
	assert_false(out.stale);
	assert_int_equal(store_device_presence(f->st, f->root, DEV_ON, &online), RCS_OK);
	assert_false(online);
	/* and a state without ts keeps the reference: a late Will of before it is still late */
	in.online = true;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 220, &out), RCS_OK);
	in.online = false;
	in.ts = 599;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 230, &out), RCS_OK);
	assert_true(out.stale);
	assert_int_equal(out.last_ts, 600);
}

/* ---- the transport's and scheduler's queues ---- */

/* A job row of the device, as far as the queues look at it. */
#define JOB_ROW(id, dev, status, update, sched, expires, sent, sends)                              \
	"INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name, entity_ident,"  \
	" status, created_user, created_at, update_at, scheduled_time, expires_at, sent_at, "      \
	"sends,"                                                                                   \
	" variables, mail_list, status_list, task_mail_list, task_status_list) VALUES('" id        \
	"', '@ROOT@', 't', 1, 'T', '" dev "', '" status "', 'u', 1, " update ", " sched            \
	", " expires ", " sent ", " sends ", '{}', '[]', '[]', '[]', '[]');"

static void assert_idents(const struct store_idents *ids, const char *const *want, size_t n)
{
	assert_int_equal(ids->n, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(ids->v[i], want[i]);
}

static void test_queues(void **state)
{
	struct fixture *f = *state;
	struct store_idents ids;
	bool came = false;
	int64_t next = 0;

	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "on", "[]", 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_OFF, "off", "[]", 100), RCS_OK);
	assert_int_equal(state_at(f->st, f->root, DEV_ON, true, NULL, NULL, 100, &came, NULL),
			 RCS_OK);
	/* NOW = 1700000000 */
	sql(f, JOB_ROW(JOB("01"), DEV_ON, "pending", "1", "NULL", "NULL", "NULL", "0") JOB_ROW(
		   JOB("02"), DEV_ON, "pending", "1", "1700000100", "NULL", "NULL", "0")
		   JOB_ROW(JOB("03"), DEV_OFF, "pending", "1", "NULL", "NULL", "NULL", "0") JOB_ROW(
		       JOB("04"), DEV_ON, "transmited", "1700000000", "NULL", "NULL", "1700000000",
		       "1") JOB_ROW(JOB("05"), DEV_ON, "edge_running", "1699999000", "NULL", "NULL",
				    "1699999000", "1")
		       JOB_ROW(JOB("06"), DEV_ON, "pending", "1", "1699999999", "1699999990",
			       "NULL", "0") JOB_ROW(JOB("07"), DEV_ON, "transmited", "1700000000",
						    "NULL", "1699999995", "NULL", "1")
			   JOB_ROW(JOB("08"), DEV_ON, "terminated", "1", "NULL", "1", "NULL", "1"));

	{
		const char *const want[] = {JOB("01"), JOB("06")};
		assert_int_equal(store_jobs_ready(f->st, NULL, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_ready(f->st, DEV_ON, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_ready(f->st, DEV_ON, NOW, 1, &ids), RCS_OK);
		assert_idents(&ids, want, 1);
		store_idents_free(&ids);
	}
	/* the offline device's jobs wait */
	assert_int_equal(store_jobs_ready(f->st, DEV_OFF, NOW, 10, &ids), RCS_OK);
	assert_int_equal(ids.n, 0);
	store_idents_free(&ids);
	/* later, the scheduled one is due too */
	{
		const char *const want[] = {JOB("01"), JOB("02"), JOB("06")};
		assert_int_equal(store_jobs_ready(f->st, NULL, NOW + 100, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 3);
		store_idents_free(&ids);
	}
	{
		const char *const want[] = {JOB("04"), JOB("07")};
		assert_int_equal(store_jobs_unacked(f->st, NULL, NOW + 100, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_unacked(f->st, DEV_ON, NOW + 100, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		/* 04 sent at NOW, 07 at no known time: before NOW, 04 was sent on the connection
		 * there is, not again */
		assert_int_equal(store_jobs_unacked(f->st, NULL, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want + 1, 1);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_unacked(f->st, DEV_OFF, NOW + 100, 10, &ids), RCS_OK);
		assert_int_equal(ids.n, 0);
		store_idents_free(&ids);
	}
	{
		const char *const want[] = {JOB("05")};
		assert_int_equal(store_jobs_stale(f->st, NOW, 60, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 1);
		store_idents_free(&ids);
	}
	/* the early re-send of envelopes not acknowledged (docs/mqtt.md "Delivery guarantees"):
	 * the transmited jobs of online devices 10 s after their last send, once */
	{
		const char *const want[] = {JOB("04"), JOB("07")};
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 9, 10, 10, &ids), RCS_OK);
		assert_int_equal(ids.n, 0);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 10, 10, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 10, 10, 1, &ids), RCS_OK);
		assert_idents(&ids, want, 1);
		store_idents_free(&ids);
		/* 04 re-sent 10 s after its move: not again, however long it waits */
		sql(f, "UPDATE jobs SET sent_at = 1700000010 WHERE ident = '" JOB("04") "'");
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 1000, 10, 10, &ids), RCS_OK);
		assert_idents(&ids, want + 1, 1);
		store_idents_free(&ids);
		/* re-sent sooner (a reconnect's catch-up, 5 s after): once more 10 s later */
		sql(f, "UPDATE jobs SET sent_at = 1700000005 WHERE ident = '" JOB("04") "'");
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 14, 10, 10, &ids), RCS_OK);
		assert_idents(&ids, want + 1, 1);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_unacked_late(f->st, NOW + 15, 10, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		sql(f, "UPDATE jobs SET sent_at = 1700000000 WHERE ident = '" JOB("04") "'");
	}
	/* every in-flight job of online devices, a page at a time after an ident */
	{
		const char *const want[] = {JOB("04"), JOB("05"), JOB("07")};
		assert_int_equal(store_jobs_inflight(f->st, NULL, NOW + 1, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 3);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_inflight(f->st, "", NOW + 1, NOW, 2, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_inflight(f->st, JOB("05"), NOW + 1, NOW, 2, &ids),
				 RCS_OK);
		assert_idents(&ids, want + 2, 1);
		store_idents_free(&ids);
		/* 04 was sent at NOW: after the recovery began, on the session there is */
		assert_int_equal(store_jobs_inflight(f->st, NULL, NOW, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want + 1, 2);
		store_idents_free(&ids);
	}
	/* what a pass of the recovery would find, whoever claims it: one claimed by another
	 * node is not sent, and is counted as left for a later pass */
	{
		const char *const want[] = {JOB("04"), JOB("07")};
		long long left = -1;

		assert_int_equal(store_jobs_inflight_left(f->st, NOW + 1, &left), RCS_OK);
		assert_int_equal(left, 3);
		assert_int_equal(store_jobs_inflight_left(f->st, NOW, &left), RCS_OK);
		assert_int_equal(left, 2);
		sql(f, "UPDATE jobs SET claimed_by = 'another', lease_until = 9999999999"
		       " WHERE ident = '" JOB("05") "'");
		assert_int_equal(store_jobs_inflight(f->st, NULL, NOW + 1, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
		assert_int_equal(store_jobs_inflight_left(f->st, NOW + 1, &left), RCS_OK);
		assert_int_equal(left, 3);
		sql(f, "UPDATE jobs SET claimed_by = NULL, lease_until = NULL"
		       " WHERE ident = '" JOB("05") "'");
	}
	{
		const char *const want[] = {JOB("06"), JOB("07")};
		assert_int_equal(store_jobs_expired(f->st, NOW, 10, &ids), RCS_OK);
		assert_idents(&ids, want, 2);
		store_idents_free(&ids);
	}
	assert_int_equal(store_jobs_expired(f->st, NOW, 0, &ids), RCS_OK);
	assert_int_equal(ids.n, 0);
	store_idents_free(&ids);
	assert_int_equal(store_next_wakeup(f->st, NOW, &next), RCS_OK);
	assert_int_equal(next, 1699999990);
	/* a held job's retry backoff ends (release_at) */
	sql(f, "UPDATE jobs SET held = 1, release_at = 1699999950 WHERE ident = '" JOB("01") "'");
	assert_int_equal(store_next_wakeup(f->st, NOW - 60, &next), RCS_OK);
	assert_int_equal(next, 1699999950);
	sql(f, "UPDATE jobs SET held = 0, release_at = NULL WHERE ident = '" JOB("01") "'");

	assert_int_equal(store_job_mark_sent(f->st, JOB("04"), NOW + 5, true), RCS_OK);
	assert_int_equal(
	    sql_int(f,
		    "SELECT sends * 10000000000 + sent_at FROM jobs WHERE ident = '" JOB("04") "'"),
	    2 * 10000000000LL + NOW + 5);
	/* an early re-send is not counted: its time only */
	assert_int_equal(store_job_mark_sent(f->st, JOB("04"), NOW + 7, false), RCS_OK);
	assert_int_equal(
	    sql_int(f,
		    "SELECT sends * 10000000000 + sent_at FROM jobs WHERE ident = '" JOB("04") "'"),
	    2 * 10000000000LL + NOW + 7);
	/* the clock went back: last news and sends no later than now */
	assert_int_equal(store_jobs_clock_back(f->st, NOW - 500), RCS_OK);
	assert_int_equal(
	    sql_int(f, "SELECT max(CASE WHEN update_at > coalesce(sent_at, 0) THEN update_at"
		       " ELSE coalesce(sent_at, 0) END) FROM jobs"
		       " WHERE status IN ('transmited', 'edge_running')"),
	    NOW - 500);
}

/* ---- the outbox ---- */

#define NOTIFICATION_ROW(id, status, address, state, attempts, next)                               \
	"INSERT INTO notifications(id, job_ident, client_root, status, address, state, attempts,"  \
	" created_at, next_at) VALUES(" id ", '" JOB("01") "', '@ROOT@', '" status "', '" address  \
							   "', '" state "', " attempts             \
							   ", 50, " next ");"

#ifdef RCS_WITH_POSTGRES
/* The NOTIFYs l received within ms milliseconds. */
static int pg_notified(PGconn *l, int ms)
{
	struct pollfd p = {PQsocket(l), POLLIN, 0};
	PGnotify *n;
	int got = 0;

	for (int waited = 0; waited < ms; waited += 50) {
		if (poll(&p, 1, 50) > 0)
			assert_int_equal(PQconsumeInput(l), 1);
		while ((n = PQnotifies(l)) != NULL) {
			got++;
			PQfreemem(n);
		}
	}
	return got;
}
#endif

/* PostgreSQL's wake-ups (docs/architecture.md, "Claims"): an INSERT ... SELECT of the
 * outboxes that inserts nothing (a status change without mail lists or webhooks) wakes no
 * one; one that queued a row does. */
static void test_pg_wakeups(void **state)
{
#ifdef RCS_WITH_POSTGRES
	struct fixture *f = *state;
	PGconn *l;

	if (!store_test_pg())
		skip();
	l = PQconnectdb(f->path);
	assert_int_equal(PQstatus(l), CONNECTION_OK);
	PQclear(PQexec(l, "LISTEN rcs_work"));
	/* sql() runs as a replica (no foreign keys): the wake-up triggers fire all the same */
	assert_true(store_test_pg_exec(
	    f->path, "ALTER TABLE notifications ENABLE ALWAYS TRIGGER notifications_work;"
		     " ALTER TABLE webhook_deliveries ENABLE ALWAYS TRIGGER"
		     " webhook_deliveries_work"));
	sql(f, "INSERT INTO notifications SELECT * FROM notifications WHERE false;"
	       " INSERT INTO webhook_deliveries SELECT * FROM webhook_deliveries WHERE false");
	assert_int_equal(pg_notified(l, 500), 0);
	sql(f, NOTIFICATION_ROW("1", "terminated", "a@example.com", "queued", "0", "1"));
	assert_int_equal(pg_notified(l, 3000), 1);
	PQfinish(l);
#else
	(void)state;
	skip();
#endif
}

static void test_outbox(void **state)
{
	struct fixture *f = *state;
	struct store_notification_due_list l;
	int64_t next = 0;
	long long n = -1;

	assert_int_equal(store_notifications_due(f->st, NOW, 10, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	store_notification_due_list_free(&l);
	assert_int_equal(store_notification_next(f->st, &next), RCS_OK);
	assert_int_equal(next, 0);
	sql(f, NOTIFICATION_ROW("1", "terminated", "a@example.com", "queued", "0",
				"1699999995") NOTIFICATION_ROW("2", "edge_error", "b@example.com",
							       "queued", "3", "1699999990")
		   NOTIFICATION_ROW("3", "terminated", "c@example.com", "queued", "0", "1700000100")
		       NOTIFICATION_ROW("4", "terminated", "d@example.com", "failed", "9", "1"));

	assert_int_equal(store_notifications_due(f->st, NOW, 10, &l), RCS_OK);
	assert_int_equal(l.n, 2);
	assert_int_equal(l.items[0].id, 2);
	assert_string_equal(l.items[0].job_ident, JOB("01"));
	assert_string_equal(l.items[0].client_root, f->root);
	assert_string_equal(l.items[0].status, "edge_error");
	assert_string_equal(l.items[0].address, "b@example.com");
	assert_int_equal(l.items[0].attempts, 3);
	assert_int_equal(l.items[0].created_at, 50);
	assert_int_equal(l.items[1].id, 1);
	store_notification_due_list_free(&l);
	assert_int_equal(store_notifications_due(f->st, NOW, 1, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.items[0].id, 2);
	store_notification_due_list_free(&l);
	assert_int_equal(store_notification_next(f->st, &next), RCS_OK);
	assert_int_equal(next, 1699999990);

	assert_int_equal(store_notification_update(f->st, 2, "sent", NOW, NOW, NULL), RCS_OK);
	assert_int_equal(store_notification_update(f->st, 1, "queued", NOW, NOW + 30, "later"),
			 RCS_OK);
	assert_int_equal(store_notifications_sent_since(f->st, f->root, NOW - 10, &n), RCS_OK);
	assert_int_equal(n, 1);
	assert_int_equal(sql_int(f, "SELECT attempts FROM notifications WHERE id = 1"), 1);
	assert_int_equal(store_notifications_due(f->st, NOW, 10, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	store_notification_due_list_free(&l);
	assert_int_equal(store_notification_next(f->st, &next), RCS_OK);
	assert_int_equal(next, NOW + 30);
}

/* ---- claims of several coordinators (docs/architecture.md "Claims") ---- */

static bool ident_in(const struct store_idents *ids, const char *id)
{
	for (size_t i = 0; i < ids->n; i++)
		if (strcmp(ids->v[i], id) == 0)
			return true;
	return false;
}

static void test_claims(void **state)
{
	struct fixture *f = *state;
	struct store *b = NULL;
	struct store_idents ia, ib;
	struct store_notification_due_list la, lb;
	bool came = false;

	assert_int_equal(store_open(f->path, &b), RCS_OK);
	store_claims_setup(f->st, "node-a", 15);
	store_claims_setup(b, "node-b", 15);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "on", "[]", 100), RCS_OK);
	assert_int_equal(state_at(f->st, f->root, DEV_ON, true, NULL, NULL, 100, &came, NULL),
			 RCS_OK);
	for (int i = 10; i < 20; i++) {
		char row[1024], id[8];

		snprintf(id, sizeof(id), "%02d", i);
		snprintf(row, sizeof(row),
			 "INSERT INTO jobs(ident, client_root, task_ident, task_version, task_name,"
			 " entity_ident, status, created_user, created_at, update_at, variables,"
			 " mail_list, status_list, task_mail_list, task_status_list)"
			 " VALUES('%s%s', '@ROOT@', 't', 1, 'T', '%s', 'pending', 'u', 1, 1, '{}',"
			 " '[]', '[]', '[]', '[]');",
			 JOB(""), id, DEV_ON);
		sql(f, row);
	}

	/* the due jobs: claimed on SQLite; on PostgreSQL only read, the chunk that sends them
	 * claiming them with their move (docs/architecture.md "Claims") */
	assert_int_equal(store_jobs_ready(f->st, NULL, NOW, 4, &ia), RCS_OK);
	assert_int_equal(ia.n, 4);
	assert_int_equal(store_jobs_ready(b, NULL, NOW, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, store_test_pg() ? 10 : 6);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE claimed_by IS NOT NULL"),
			 store_test_pg() ? 0 : 10);
	store_idents_free(&ia);
	store_idents_free(&ib);
	sql(f, "UPDATE jobs SET status = 'transmited', claimed_by = NULL, lease_until = NULL");

	/* jobs sent without news (the re-send of stale jobs, after 1 s): two claimers get
	 * disjoint rows; together, all of them */
	assert_int_equal(store_jobs_stale(f->st, NOW, 1, 4, &ia), RCS_OK);
	assert_int_equal(ia.n, 4);
	assert_int_equal(store_jobs_stale(b, NOW, 1, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 6);
	for (size_t i = 0; i < ia.n; i++)
		assert_false(ident_in(&ib, ia.v[i]));
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE claimed_by = 'node-a'"), 4);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM jobs WHERE claimed_by = 'node-b'"), 6);
	store_idents_free(&ib);
	/* a claim is its holder's to take again, not another's while its lease runs */
	assert_int_equal(store_jobs_stale(f->st, NOW + 10, 1, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 4);
	for (size_t i = 0; i < ia.n; i++)
		assert_true(ident_in(&ib, ia.v[i]));
	store_idents_free(&ib);
	assert_int_equal(store_jobs_stale(b, NOW + 10, 1, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 6);
	store_idents_free(&ib);
	/* an expired lease is taken over (a's were renewed at NOW + 10 until NOW + 25) */
	assert_int_equal(store_jobs_stale(b, NOW + 26, 1, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 10);
	store_idents_free(&ib);
	store_idents_free(&ia);

	/* sent by a, whose lease lapsed before the broker's ack: b sends it again, a doesn't */
	sql(f, "UPDATE jobs SET status = 'transmited', claimed_by = 'node-a',"
	       " lease_until = 1700000015 WHERE ident = '" JOB(
		   "10") "';"
			 "UPDATE jobs SET status = 'transmited', claimed_by = 'node-a',"
			 " lease_until = NULL WHERE ident = '" JOB("11") "'");
	assert_int_equal(store_jobs_orphaned(b, NOW + 10, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 0);
	store_idents_free(&ib);
	assert_int_equal(store_jobs_orphaned(f->st, NOW + 20, 100, &ia), RCS_OK);
	assert_int_equal(ia.n, 0);
	store_idents_free(&ia);
	assert_int_equal(store_jobs_orphaned(b, NOW + 20, 100, &ib), RCS_OK);
	assert_int_equal(ib.n, 1);
	assert_string_equal(ib.v[0], JOB("10"));
	store_idents_free(&ib);
	/* the broker acknowledged a's envelopes: their claims end, every one of the list (one
	 * statement run once per job) */
	sql(f, "UPDATE jobs SET claimed_by = 'node-a', lease_until = 1700000015"
	       " WHERE ident IN ('" JOB("10") "', '" JOB("11") "', '" JOB("12") "')");
	ia.v = calloc(3, sizeof(*ia.v));
	assert_non_null(ia.v);
	snprintf(ia.v[0], sizeof(ia.v[0]), "%s", JOB("10"));
	snprintf(ia.v[1], sizeof(ia.v[1]), "%s", JOB("11"));
	snprintf(ia.v[2], sizeof(ia.v[2]), "%s", JOB("12"));
	ia.n = 3;
	assert_int_equal(store_jobs_unclaim(f->st, &ia), RCS_OK);
	store_idents_free(&ia);
	assert_int_equal(
	    sql_int(f, "SELECT count(*) FROM jobs WHERE ident IN ('" JOB("10") "', '" JOB(
			   "11") "', '" JOB("12") "') AND"
						  " claimed_by IS NULL AND lease_until IS NULL"),
	    3);

	/* the e-mail outbox: the same */
	sql(f, NOTIFICATION_ROW("1", "terminated", "a@example.com", "queued", "0", "1699999995")
		   NOTIFICATION_ROW("2", "terminated", "b@example.com", "queued", "0", "1699999996")
		       NOTIFICATION_ROW("3", "terminated", "c@example.com", "queued", "0",
					"1699999997"));
	assert_int_equal(store_notifications_due(f->st, NOW, 1, &la), RCS_OK);
	assert_int_equal(la.n, 1);
	assert_int_equal(la.items[0].id, 1);
	assert_int_equal(store_notifications_due(b, NOW, 10, &lb), RCS_OK);
	assert_int_equal(lb.n, 2);
	assert_int_equal(lb.items[0].id, 2);
	assert_int_equal(lb.items[1].id, 3);
	store_notification_due_list_free(&lb);
	assert_int_equal(store_notifications_due(b, NOW + 10, 10, &lb), RCS_OK);
	assert_int_equal(lb.n, 2);
	store_notification_due_list_free(&lb);
	assert_int_equal(store_notifications_due(b, NOW + 16, 10, &lb), RCS_OK);
	assert_int_equal(lb.n, 3);
	store_notification_due_list_free(&lb);
	/* an update ends the claim */
	assert_int_equal(store_notification_update(f->st, 1, "sent", NOW, NOW, NULL), RCS_OK);
	assert_int_equal(sql_int(f, "SELECT count(*) FROM notifications WHERE id = 1 AND"
				    " claimed_by IS NULL"),
			 1);
	store_notification_due_list_free(&la);

	if (store_test_pg()) {
		/* PostgreSQL: rows another transaction is claiming are passed over, not waited
		 * for (FOR UPDATE SKIP LOCKED) */
		sql(f,
		    "UPDATE jobs SET status = 'transmited', claimed_by = NULL, lease_until = NULL");
		assert_int_equal(store_tx_begin(f->st), RCS_OK);
		assert_int_equal(store_jobs_stale(f->st, NOW, 1, 3, &ia), RCS_OK);
		assert_int_equal(ia.n, 3);
		assert_int_equal(store_jobs_stale(b, NOW, 1, 100, &ib), RCS_OK);
		assert_int_equal(ib.n, 7);
		for (size_t i = 0; i < ia.n; i++)
			assert_false(ident_in(&ib, ia.v[i]));
		assert_int_equal(store_tx_end(f->st, true), RCS_OK);
		store_idents_free(&ia);
		store_idents_free(&ib);
	}
	/* a group's releases: one node at a time (its token bucket) */
	{
		struct store_group_list ga, gb;

		sql(f, "UPDATE jobs SET status = 'pending' WHERE ident NOT IN ('" JOB(
			   "10") "', '" JOB("11") "')");
		sql(f, "INSERT INTO groups(ident, client_root, name, task_ident, created_user,"
		       " created_at, status) VALUES('" JOB(
			   "g1") "', '@ROOT@', 'g', 't', 'u', 1,"
				 " 'running');"
				 "UPDATE jobs SET held = 1, group_ident = '" JOB(
				     "g1") "' WHERE ident = '" JOB("19") "'");
		assert_int_equal(store_groups_releasing(f->st, time(NULL), NULL, 0, 10, &ga),
				 RCS_OK);
		assert_int_equal(ga.n, 1);
		assert_int_equal(store_groups_releasing(b, time(NULL), NULL, 0, 10, &gb), RCS_OK);
		assert_int_equal(gb.n, 0);
		store_group_list_free(&gb);
		store_group_list_free(&ga);
		assert_int_equal(store_groups_releasing(f->st, time(NULL), NULL, 0, 10, &ga),
				 RCS_OK);
		assert_int_equal(ga.n, 1);
		store_group_list_free(&ga);
		/* a's lease ended */
		sql(f, "UPDATE groups SET lease_until = 1");
		assert_int_equal(store_groups_releasing(b, time(NULL), NULL, 0, 10, &gb), RCS_OK);
		assert_int_equal(gb.n, 1);
		store_group_list_free(&gb);
		/* only groups with a held job due (a retry's backoff, a scheduled time) */
		sql(f, "UPDATE jobs SET release_at = 4000000000 WHERE ident = '" JOB("19") "'");
		assert_int_equal(store_groups_releasing(b, time(NULL), NULL, 0, 10, &gb), RCS_OK);
		assert_int_equal(gb.n, 0);
		store_group_list_free(&gb);
		sql(f, "UPDATE jobs SET release_at = NULL, scheduled_time = 4000000000 WHERE ident "
		       "= '" JOB("19") "'");
		assert_int_equal(store_groups_releasing(b, time(NULL), NULL, 0, 10, &gb), RCS_OK);
		assert_int_equal(gb.n, 0);
		store_group_list_free(&gb);
		sql(f, "UPDATE jobs SET release_at = 5, scheduled_time = NULL WHERE ident = '" JOB(
			   "19") "'");
		/* page after page, in their order: a newer group is read after the older ones */
		{
			static const char *const rows[] = {
			    "INSERT INTO groups(ident, client_root, name, task_ident, created_user,"
			    " created_at, status) VALUES('" JOB("g0") "', '@ROOT@', 'g', 't', 'u',"
								      " 2, 'running')",
			    "INSERT INTO groups(ident, client_root, name, task_ident, created_user,"
			    " created_at, status) VALUES('" JOB("g2") "', '@ROOT@', 'g', 't', 'u',"
								      " 1, 'running')",
			    "UPDATE jobs SET held = 1, group_ident = '" JOB("g0") "' WHERE ident ="
										  " '" JOB(
										      "18") "'",
			    "UPDATE jobs SET held = 1, group_ident = '" JOB("g2") "' WHERE ident ="
										  " '" JOB(
										      "17") "'",
			};

			for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
				sql(f, rows[i]);
		}
		{
			const char *order[] = {JOB("g1"), JOB("g2"), JOB("g0")};
			char after[UUID_STR_LEN] = "";
			int64_t after_at = 0;

			for (size_t i = 0; i < 3; i++) {
				assert_int_equal(store_groups_releasing(b, time(NULL),
									i ? after : NULL, after_at,
									1, &gb),
						 RCS_OK);
				assert_int_equal(gb.n, 1);
				assert_string_equal(gb.items[0].ident, order[i]);
				snprintf(after, sizeof(after), "%s", gb.items[0].ident);
				after_at = gb.items[0].created_at;
				store_group_list_free(&gb);
			}
			assert_int_equal(
			    store_groups_releasing(b, time(NULL), after, after_at, 1, &gb), RCS_OK);
			assert_int_equal(gb.n, 0);
			store_group_list_free(&gb);
		}
		/* a group without a rate keeps no bucket: its tokens are left as they were */
		{
			struct store_idents ids = {.v = NULL, .n = 0};
			long long before =
			    sql_int(f, "SELECT coalesce(tokens, -7) FROM groups WHERE"
				       " ident = '" JOB("g2") "'");
			int64_t at = 0;

			assert_int_equal(
			    store_group_release(b, JOB("g2"), time(NULL), 10, -1, 0, &ids, &at),
			    RCS_OK);
			assert_int_equal(ids.n, 1);
			assert_int_equal(sql_int(f, "SELECT coalesce(tokens, -7) FROM groups WHERE"
						    " ident = '" JOB("g2") "'"),
					 before);
			store_idents_free(&ids);
		}
		sql(f, "UPDATE jobs SET held = 0, group_ident = NULL WHERE ident IN ('" JOB(
			   "17") "', '" JOB("18") "')");
	}
	/* webhook deliveries: the first queued one of each subject; a later one of a subject
	 * whose first another node holds waits (order per job) */
	{
		struct store_webhook_due_list da, db;
		int64_t now = (int64_t)time(NULL);
		char rows[2048];

		snprintf(
		    rows, sizeof(rows),
		    "INSERT INTO webhooks(ident, client_root, url, events, statuses, secret,"
		    " created_user, created_at, update_at) VALUES('w1', '@ROOT@',"
		    " 'http://h.test/', '[\"job.status\"]', '[]', 's', 'u', 1, 1);"
		    "INSERT INTO webhook_deliveries(id, ident, webhook_ident, client_root, type,"
		    " subject, hist_n, status, at, state, created_at, next_at) VALUES"
		    " (1, 'd1', 'w1', '@ROOT@', 'job.status', 'j1', 1, 'initial', 1, 'queued', 1,"
		    " %lld), (2, 'd2', 'w1', '@ROOT@', 'job.status', 'j1', 2, 'pending', 1,"
		    " 'queued', 1, %lld), (3, 'd3', 'w1', '@ROOT@', 'job.status', 'j2', 1,"
		    " 'initial', 1, 'queued', 1, %lld)",
		    (long long)now - 5, (long long)now - 5, (long long)now - 5);
		sql(f, rows);
		assert_int_equal(store_webhooks_due(f->st, now, NULL, 0, 1, 0, &da), RCS_OK);
		assert_int_equal(da.n, 1);
		assert_int_equal(da.items[0].id, 1);
		assert_string_equal(da.items[0].url, "http://h.test/");
		assert_int_equal(store_webhooks_due(b, now, NULL, 0, 10, 0, &db), RCS_OK);
		assert_int_equal(db.n, 1);
		assert_int_equal(db.items[0].id, 3);
		store_webhook_due_list_free(&db);
		assert_int_equal(store_webhooks_due(b, now, NULL, 0, 10, 0, &db), RCS_OK);
		assert_int_equal(db.n, 1); /* its own again, never d2 before d1 is done */
		assert_int_equal(db.items[0].id, 3);
		store_webhook_due_list_free(&db);
		store_webhook_due_list_free(&da);
	}
	/* the coordinators running: seen within the lease */
	{
		long long others = -1;
		bool left = true;
		int64_t db_now = 0;

		/* the database's clock, as this host's (one machine) */
		assert_int_equal(store_clock(f->st, &db_now), RCS_OK);
		assert_true(llabs((long long)(db_now - (int64_t)time(NULL))) <= 2);

		assert_int_equal(store_nodes_others(b, NOW, &others), RCS_OK);
		assert_int_equal(others, 0);
		assert_int_equal(store_node_left(f->st, &left), RCS_OK);
		assert_false(left);
		assert_int_equal(store_node_beat(f->st, NOW), RCS_OK);
		/* a row before the first beat: the last run did not stop cleanly */
		assert_int_equal(store_node_left(f->st, &left), RCS_OK);
		assert_true(left);
		assert_int_equal(store_node_beat(b, NOW), RCS_OK);
		assert_int_equal(store_nodes_others(b, NOW + 5, &others), RCS_OK);
		assert_int_equal(others, 1);
		assert_int_equal(store_nodes_others(b, NOW + 16, &others), RCS_OK);
		assert_int_equal(others, 0);
		assert_int_equal(store_node_gone(f->st), RCS_OK);
		assert_int_equal(store_nodes_others(b, NOW, &others), RCS_OK);
		assert_int_equal(others, 0);
		assert_int_equal(store_node_left(f->st, &left), RCS_OK);
		assert_false(left);
	}
	/* a clean stop gives the claims up at once */
	assert_int_equal(store_claims_release(b), RCS_OK);
	assert_int_equal(store_jobs_ready(f->st, NULL, NOW, 100, &ia), RCS_OK);
	assert_true(ia.n >= 7); /* all but the two sent and the held one */
	store_idents_free(&ia);
	store_close(b);
}

/* Device attributes (docs/api.md "Devices"): a state brings them, one without leaves them as
 * they are, {} clears them; the list filters on KEY:VALUE pairs, every one given matching. */
static void test_device_attributes(void **state)
{
	struct fixture *f = *state;
	struct store_page pg = {.page = 1, .per_page = 10};
	struct store_device_list l;
	struct device_rec d;
	struct store_state_in in = {true, NULL, "1.0", 0, NULL};
	struct store_state_out out;
	const char *fw2[] = {"fw:2.0", NULL}, *fw1[] = {"fw:1.0", NULL},
		   *both[] = {"fw:2.0", "board:x1", NULL}, *mixed[] = {"fw:2.0", "board:y", NULL},
		   *colon[] = {"note:a:b", NULL};

	assert_int_equal(store_device_insert(f->st, f->root, DEV_ON, "one", "[]", 100), RCS_OK);
	assert_int_equal(store_device_insert(f->st, f->root, DEV_OFF, "two", "[]", 101), RCS_OK);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_null(d.attributes);
	store_device_rec_free(&d);

	in.attributes = "{\"fw\":\"2.0\",\"board\":\"x1\",\"note\":\"a:b\"}";
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 150, &out), RCS_OK);
	in.attributes = "{\"fw\":\"1.0\",\"board\":\"x1\"}";
	assert_int_equal(store_device_state(f->st, f->root, DEV_OFF, &in, 150, &out), RCS_OK);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_non_null(strstr(d.attributes, "\"fw\""));
	assert_non_null(strstr(d.attributes, "\"2.0\""));
	store_device_rec_free(&d);

	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, fw2, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].entity_ident, DEV_ON);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, fw1, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.items[0].entity_ident, DEV_OFF);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, 1, both, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, mixed, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	store_device_list_free(&l);
	/* the value holds the rest after the key's colon */
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, colon, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	store_device_list_free(&l);

	/* a state without attributes keeps them; the next ones replace them */
	in.attributes = NULL;
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 160, &out), RCS_OK);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, fw2, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 1);
	store_device_list_free(&l);
	in.attributes = "{\"fw\":\"1.0\"}";
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 170, &out), RCS_OK);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, fw2, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 0);
	store_device_list_free(&l);
	assert_int_equal(store_devices_list(f->st, f->root, NULL, -1, fw1, &pg, &l), RCS_OK);
	assert_int_equal(l.n, 2);
	store_device_list_free(&l);
	in.attributes = "{}";
	assert_int_equal(store_device_state(f->st, f->root, DEV_ON, &in, 180, &out), RCS_OK);
	assert_int_equal(store_device_get(f->st, f->root, DEV_ON, &d), RCS_OK);
	assert_string_equal(d.attributes, "{}");
	store_device_rec_free(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_render_device),
	    cmocka_unit_test(test_render_device_list),
	    cmocka_unit_test_setup_teardown(test_device_records, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_device_state_and_tags, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_presence_of_many, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_device_attributes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_device_state_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queues, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_outbox, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pg_wakeups, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_claims, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
