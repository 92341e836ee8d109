/*
 * test_agent_parts.c - the agent's settings (agent/settings.c), runner (agent/runner.c) and
 * link (agent/link.c) on their own, without a broker or a jail: options and their
 * precedence, secrets, the policy SIGHUP swaps; what the runner answers to each kind of
 * envelope and cancel (docs/agent.md "What happens to a job"); reports journaled by the
 * link before any connection; when the link may say the device is online (agent/presence.c,
 * docs/mqtt.md "Connection sequence").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "inventory.h"
#include "journal.h"
#include "link.h"
#include "manifest.h"
#include "mqttc.h"
#include "phase.h"
#include "presence.h"
#include "proto.h"
#include "runner.h"
#include "settings.h"
#include "uuid.h"

#define ROOT   "01a1ff99-08fb-74ea-982c-1b51c9f30e75"
#define ENTITY "01a1ff99-0b8c-7a13-badb-096b33a537d7"
#define TASK   "01a1ff99-1111-7a13-badb-096b33a537d7"

struct fx {
	char dir[64];
	char conf[128];
	struct settings set;
	struct settings_live *live;
	struct journal *journal;
	struct runner *runner;
	/* what the runner reported, in order */
	struct {
		char job[UUID_STR_LEN];
		enum job_status status;
		char response[512];
		int kind; /* 0 report, 1 resend, 2 refused without the journal */
	} got[16];
	int ngot;
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void record(struct fx *f, int kind, const char *job, enum job_status st, const char *resp)
{
	assert_true(f->ngot < 16);
	snprintf(f->got[f->ngot].job, sizeof(f->got[0].job), "%s", job);
	f->got[f->ngot].status = st;
	snprintf(f->got[f->ngot].response, sizeof(f->got[0].response), "%s", resp ? resp : "");
	f->got[f->ngot].kind = kind;
	f->ngot++;
}

static void on_report(void *ctx, const char *job, enum job_status st, const char *resp)
{
	record(ctx, 0, job, st, resp);
}

static void on_resend(void *ctx, const char *job)
{
	record(ctx, 1, job, JS_INITIAL, NULL);
}

static void on_refused(void *ctx, const char *job, const char *reason)
{
	record(ctx, 2, job, JS_EDGE_ERROR, reason);
}

/* Loads settings from a config file of lines plus extra flags. */
static enum rcs_err load(struct fx *f, const char *lines, const char *flag, const char *value,
			 char *err, size_t errlen)
{
	char *argv[] = {"rcs-agent", "--config", f->conf, (char *)flag, (char *)value, NULL};
	int argc = flag ? 5 : 3;

	write_file(f->conf, lines);
	return settings_load(&f->set, argc, argv, err, errlen);
}

static char base_conf[512];

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct runner_reports rep = {0}; /* no fail hook: edge_error through report */
	char err[256];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/rcs-agent-parts-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->conf, sizeof(f->conf), "%s/agent.conf", f->dir);
	snprintf(base_conf, sizeof(base_conf),
		 "mqtt tcp://127.0.0.1:9\nclient_root " ROOT "\nentity_ident " ENTITY
		 "\nstate_dir %s/state\nrequire_signature false\nmax_queue 2\ntag site-a\n",
		 f->dir);
	assert_int_equal(load(f, base_conf, NULL, NULL, err, sizeof(err)), RCS_OK);
	f->live = settings_live_new(&f->set, err, sizeof(err));
	assert_non_null(f->live);
	assert_int_equal(journal_open(f->set.state_dir, &f->journal), RCS_OK);
	rep.ctx = f;
	rep.report = on_report;
	rep.resend = on_resend;
	rep.refuse_unjournaled = on_refused;
	f->runner = runner_new(&f->set, f->live, f->journal, &rep);
	assert_non_null(f->runner);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];

	runner_free(f->runner);
	journal_close(f->journal);
	settings_live_free(f->live);
	settings_free(&f->set);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

/* ---- settings ---- */

static void test_settings_required_and_uuids(void **state)
{
	struct fx *f = *state;
	struct settings s;
	char err[256];
	char *only_mqtt[] = {"rcs-agent", "--mqtt", "tcp://127.0.0.1:9", NULL};
	char *bad_uuid[] = {"rcs-agent",      "--mqtt", "tcp://h:1",   "--client-root", "nope",
			    "--entity-ident", ENTITY,   "--state-dir", f->dir,          NULL};
	char *stray[] = {"rcs-agent", "--mqtt", "tcp://h:1", "extra", NULL};

	assert_int_equal(settings_load(&s, 3, only_mqtt, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "required"));
	settings_free(&s);
	assert_int_equal(settings_load(&s, 9, bad_uuid, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "UUID"));
	settings_free(&s);
	assert_int_equal(settings_load(&s, 4, stray, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "extra"));
	settings_free(&s);
}

/* The file first, the flags over it; defaults for what neither gives. */
static void test_settings_flags_win(void **state)
{
	struct fx *f = *state;
	char err[256];

	settings_free(&f->set);
	assert_int_equal(load(f, base_conf, "--max-queue", "7", err, sizeof(err)), RCS_OK);
	assert_int_equal(f->set.max_queue, 7);
	assert_false(f->set.require_signature);
	assert_int_equal(f->set.max_payload, 1024 * 1024);
	assert_string_equal(f->set.reboot_command, "/sbin/reboot");
	assert_int_equal(f->set.tag.n, 1);
	settings_free(&f->set);
	assert_int_equal(load(f, base_conf, "--max-queue", "0", err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "max_queue"));
	settings_free(&f->set);
	assert_int_equal(load(f, base_conf, NULL, NULL, err, sizeof(err)), RCS_OK);
}

/* Several brokers: mqtt repeated in the file, --mqtt repeated on the command line (which
 * replaces the file's), each URL checked, the list as a whole too (mqttc_urls_check). */
static void test_settings_brokers(void **state)
{
	struct fx *f = *state;
	char err[256], conf[1024], shown[256];

	settings_free(&f->set);
	snprintf(conf, sizeof(conf), "%smqtt mqtt://127.0.0.1:10\n", base_conf);
	assert_int_equal(load(f, conf, NULL, NULL, err, sizeof(err)), RCS_OK);
	assert_int_equal(f->set.mqtt.n, 2);
	assert_string_equal(f->set.mqtt.items[0], "tcp://127.0.0.1:9");
	assert_string_equal(f->set.mqtt.items[1], "mqtt://127.0.0.1:10");
	settings_brokers(&f->set, shown, sizeof(shown));
	assert_string_equal(shown, "tcp://127.0.0.1:9, mqtt://127.0.0.1:10");
	settings_free(&f->set);
	/* the command line's brokers replace the file's */
	assert_int_equal(load(f, conf, "--mqtt", "tcp://other:1883", err, sizeof(err)), RCS_OK);
	assert_int_equal(f->set.mqtt.n, 1);
	assert_string_equal(f->set.mqtt.items[0], "tcp://other:1883");
	settings_free(&f->set);
	/* each checked; one broker twice (tcp:// and mqtt:// are one); TLS and not mixed */
	snprintf(conf, sizeof(conf), "%smqtt http://127.0.0.1:10\n", base_conf);
	assert_int_equal(load(f, conf, NULL, NULL, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "http://127.0.0.1:10"));
	settings_free(&f->set);
	snprintf(conf, sizeof(conf), "%smqtt mqtt://127.0.0.1:9\n", base_conf);
	assert_int_equal(load(f, conf, NULL, NULL, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "twice"));
	settings_free(&f->set);
	/* (a build without TLS refuses ssl:// itself, saying so) */
	snprintf(conf, sizeof(conf), "%smqtt ssl://127.0.0.1:10\n", base_conf);
	assert_int_equal(load(f, conf, NULL, NULL, err, sizeof(err)), RCS_ERR_INVAL);
	assert_non_null(strstr(err, "TLS"));
	settings_free(&f->set);
	assert_int_equal(load(f, base_conf, NULL, NULL, err, sizeof(err)), RCS_OK);
}

/* mqttc_urls_check on its own: counts and schemes. */
static void test_mqtt_url_lists(void **state)
{
	const char *many[MQTTC_MAX_URLS + 1];
	char urls[MQTTC_MAX_URLS + 1][32], err[256];
	const char *one[] = {"tcp://a:1"};
	const char *two[] = {"mqtt://a:1", "tcp://b:1"};

	(void)state;
	assert_int_equal(mqttc_urls_check(one, 0, err, sizeof(err)), RCS_ERR_INVAL);
	assert_int_equal(mqttc_urls_check(one, 1, err, sizeof(err)), RCS_OK);
	assert_int_equal(mqttc_urls_check(two, 2, err, sizeof(err)), RCS_OK);
	for (int i = 0; i <= MQTTC_MAX_URLS; i++) {
		snprintf(urls[i], sizeof(urls[i]), "tcp://h%d:1883", i);
		many[i] = urls[i];
	}
	assert_int_equal(mqttc_urls_check(many, MQTTC_MAX_URLS, err, sizeof(err)), RCS_OK);
	assert_int_equal(mqttc_urls_check(many, MQTTC_MAX_URLS + 1, err, sizeof(err)),
			 RCS_ERR_INVAL);
	assert_non_null(strstr(err, "at most"));
}

/* A password from a file or the environment (the variable is unset once read). */
static void test_settings_secrets(void **state)
{
	struct fx *f = *state;
	char err[256], pw[128], conf[768];

	snprintf(pw, sizeof(pw), "%s/pw", f->dir);
	write_file(pw, "s3cret\n");
	snprintf(conf, sizeof(conf), "%smqtt_password_file %s\n", base_conf, pw);
	settings_free(&f->set);
	assert_int_equal(load(f, conf, NULL, NULL, err, sizeof(err)), RCS_OK);
	assert_int_equal(settings_secrets(&f->set, err, sizeof(err)), RCS_OK);
	assert_string_equal(f->set.mqtt_password, "s3cret");

	settings_free(&f->set);
	setenv("RCS_MQTT_PASSWORD", "from-env", 1);
	assert_int_equal(load(f, base_conf, NULL, NULL, err, sizeof(err)), RCS_OK);
	assert_int_equal(settings_secrets(&f->set, err, sizeof(err)), RCS_OK);
	assert_string_equal(f->set.mqtt_password, "from-env");
	assert_null(getenv("RCS_MQTT_PASSWORD"));
	/* handed on to a re-executed agent */
	settings_secrets_to_env(&f->set);
	assert_string_equal(getenv("RCS_MQTT_PASSWORD"), "from-env");
	unsetenv("RCS_MQTT_PASSWORD");
}

static bool policy_has_tag(const struct settings_policy *p, const char *tag)
{
	for (size_t i = 0; p->tags && i < json_object_array_length(p->tags); i++)
		if (strcmp(json_object_get_string(json_object_array_get_idx(p->tags, i)), tag) == 0)
			return true;
	return false;
}

/* SIGHUP swaps the policy whole; a snapshot taken before keeps the old one; a bad file
 * leaves the policy in force as it was. */
static void test_settings_reload_snapshots(void **state)
{
	struct fx *f = *state;
	char conf[768];
	char *argv[] = {"rcs-agent", "--config", f->conf, NULL};
	struct settings_policy *before, *after;

	before = settings_policy_get(f->live);
	assert_true(policy_has_tag(before, "site-a"));
	assert_false(before->require_signature);

	snprintf(conf, sizeof(conf), "%stag model-x\nrequire_signature true\ntrusted_key %s\n",
		 base_conf, RCS_VECTORS_DIR "/manifest-1.pub.pem");
	write_file(f->conf, conf);
	assert_int_equal(settings_reload(f->live, 3, argv), RCS_OK);
	after = settings_policy_get(f->live);
	assert_true(policy_has_tag(after, "model-x"));
	assert_true(after->require_signature);
	/* the old snapshot is untouched */
	assert_false(policy_has_tag(before, "model-x"));
	assert_false(before->require_signature);
	settings_policy_put(before);

	write_file(f->conf, "require_signature maybe\n");
	assert_int_not_equal(settings_reload(f->live, 3, argv), RCS_OK);
	before = settings_policy_get(f->live);
	assert_ptr_equal(before, after);
	settings_policy_put(before);
	settings_policy_put(after);
	write_file(f->conf, base_conf);
}

/* ---- runner ---- */

/* An unsigned envelope for job (the agent here does not require signatures). */
static char *envelope(const char *job, const char *src, size_t *len)
{
	struct proto_envelope env;
	json_object *o, *consts = json_object_new_object(), *info = json_object_new_object(),
			*vars = json_object_new_object();
	char *text;

	memset(&env, 0, sizeof(env));
	snprintf(env.job, sizeof(env.job), "%s", job);
	snprintf(env.client_root, sizeof(env.client_root), ROOT);
	snprintf(env.entity_ident, sizeof(env.entity_ident), ENTITY);
	snprintf(env.task_ident, sizeof(env.task_ident), TASK);
	env.task_version = 1;
	env.task_name = "t";
	env.script_name = "s";
	env.script_source = src;
	env.script_len = strlen(src);
	sha256_hex(src, strlen(src), env.script_sha256);
	env.constants = consts;
	env.variables_info = info;
	env.variables = vars;
	env.issued_at = (int64_t)time(NULL);
	env.timeout = 30;
	o = proto_envelope_encode(&env);
	assert_non_null(o);
	text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	assert_non_null(text);
	*len = strlen(text);
	json_object_put(o);
	json_object_put(consts);
	json_object_put(info);
	json_object_put(vars);
	return text;
}

static void new_job(char out[UUID_STR_LEN])
{
	assert_int_equal(uuid_v7(out), RCS_OK);
}

static void test_runner_queues_once(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN];
	enum journal_state st;
	size_t len;
	char *env;

	new_job(job);
	env = envelope(job, "return 1", &len);
	runner_envelope(f->runner, job, env, len);
	assert_int_equal(f->ngot, 1);
	assert_int_equal(f->got[0].kind, 0);
	assert_int_equal(f->got[0].status, JS_EDGE_TRANSMITTED);
	assert_string_equal(f->got[0].job, job);
	assert_int_equal(journal_get_state(f->journal, job, &st), RCS_OK);
	assert_int_equal(st, JOURNAL_QUEUED);
	/* the same envelope again: answered with the job's latest report, never queued twice */
	runner_envelope(f->runner, job, env, len);
	assert_int_equal(f->ngot, 2);
	assert_int_equal(f->got[1].kind, 1);
	free(env);
}

static void test_runner_refuses_bad_envelopes(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN], other[UUID_STR_LEN];
	size_t len;
	char *env;

	new_job(job);
	runner_envelope(f->runner, job, "{\"v\":1", 6);
	assert_int_equal(f->ngot, 1);
	assert_int_equal(f->got[0].status, JS_EDGE_ERROR);
	assert_non_null(strstr(f->got[0].response, "malformed envelope"));

	/* an envelope of another job on this job's topic */
	new_job(job);
	new_job(other);
	env = envelope(other, "return 1", &len);
	runner_envelope(f->runner, job, env, len);
	assert_int_equal(f->ngot, 2);
	assert_int_equal(f->got[1].status, JS_EDGE_ERROR);
	assert_non_null(strstr(f->got[1].response, "in a message for job"));
	free(env);

	new_job(job);
	runner_oversized(f->runner, job);
	assert_int_equal(f->ngot, 3);
	assert_non_null(strstr(f->got[2].response, "larger than the device accepts"));
	/* told once: the same job again says nothing more */
	runner_oversized(f->runner, job);
	assert_int_equal(f->ngot, 3);
}

/* The policy in force decides: once signatures are required, an unsigned task is refused. */
static void test_runner_follows_reloaded_policy(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN], conf[768];
	char *argv[] = {"rcs-agent", "--config", f->conf, NULL};
	size_t len;
	char *env;

	snprintf(conf, sizeof(conf), "%srequire_signature true\ntrusted_key %s\n", base_conf,
		 RCS_VECTORS_DIR "/manifest-1.pub.pem");
	write_file(f->conf, conf);
	assert_int_equal(settings_reload(f->live, 3, argv), RCS_OK);
	new_job(job);
	env = envelope(job, "return 1", &len);
	runner_envelope(f->runner, job, env, len);
	assert_int_equal(f->ngot, 1);
	assert_int_equal(f->got[0].status, JS_EDGE_ERROR);
	assert_string_equal(f->got[0].response, "signature required");
	free(env);
	write_file(f->conf, base_conf);
}

static void test_runner_queue_limit(void **state)
{
	struct fx *f = *state;
	char job[UUID_STR_LEN];
	size_t len;
	char *env;

	for (int i = 0; i < 3; i++) {
		new_job(job);
		env = envelope(job, "return 1", &len);
		runner_envelope(f->runner, job, env, len);
		free(env);
	}
	assert_int_equal(f->ngot, 3);
	assert_int_equal(f->got[0].status, JS_EDGE_TRANSMITTED);
	assert_int_equal(f->got[1].status, JS_EDGE_TRANSMITTED);
	assert_int_equal(f->got[2].status, JS_EDGE_ERROR);
	assert_non_null(strstr(f->got[2].response, "device busy"));
}

static void test_runner_cancels(void **state)
{
	struct fx *f = *state;
	char queued[UUID_STR_LEN], early[UUID_STR_LEN];
	enum journal_state st;
	size_t len;
	char *env;

	new_job(queued);
	env = envelope(queued, "return 1", &len);
	runner_envelope(f->runner, queued, env, len);
	free(env);
	runner_cancel(f->runner, queued);
	assert_int_equal(f->ngot, 2);
	assert_int_equal(f->got[1].status, JS_EDGE_ERROR);
	assert_string_equal(f->got[1].response, "cancelled before it started");
	assert_int_equal(journal_get_state(f->journal, queued, &st), RCS_OK);
	assert_int_equal(st, JOURNAL_DROPPED);
	/* a cancel of a job that ended already changes nothing */
	runner_cancel(f->runner, queued);
	assert_int_equal(f->ngot, 2);

	/* a cancel that overtook its envelope: the envelope, when it comes, never runs */
	new_job(early);
	runner_cancel(f->runner, early);
	assert_int_equal(f->ngot, 3);
	assert_string_equal(f->got[2].response, "cancelled before it arrived");
	env = envelope(early, "return 1", &len);
	runner_envelope(f->runner, early, env, len);
	free(env);
	assert_int_equal(f->ngot, 4);
	assert_int_equal(f->got[3].kind, 1);
	assert_int_equal(journal_get_state(f->journal, early, &st), RCS_OK);
	assert_int_equal(st, JOURNAL_DROPPED);
}

/* ---- link, without a broker ---- */

struct outbox_seen {
	int n;
	char job[UUID_STR_LEN];
	char payload[1024];
};

static void outbox_fn(void *ctx, long long id, const char *job, const char *payload)
{
	struct outbox_seen *o = ctx;

	(void)id;
	o->n++;
	snprintf(o->job, sizeof(o->job), "%s", job);
	snprintf(o->payload, sizeof(o->payload), "%s", payload);
}

/* A report is journaled in the outbox before anything is published: none is lost while
 * the broker is away. */
static void test_link_reports_wait_in_outbox(void **state)
{
	struct fx *f = *state;
	struct link_handlers h;
	struct outbox_seen seen;
	struct link *l;
	char job[UUID_STR_LEN];
	bool is_new = false;

	memset(&h, 0, sizeof(h));
	memset(&seen, 0, sizeof(seen));
	l = link_new(&f->set, f->live, f->journal, &h);
	assert_non_null(l);
	new_job(job);
	/* reports are of jobs the journal took */
	link_report(l, job, JS_EDGE_ERROR, "a reason");
	assert_int_equal(journal_outbox_each(f->journal, 10, outbox_fn, &seen), RCS_OK);
	assert_int_equal(seen.n, 0);
	assert_int_equal(
	    journal_receive(f->journal, job, TASK, 1, "{}", 2, (int64_t)time(NULL), &is_new),
	    RCS_OK);
	link_report(l, job, JS_EDGE_ERROR, "a reason");
	assert_int_equal(journal_outbox_each(f->journal, 10, outbox_fn, &seen), RCS_OK);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.job, job);
	assert_non_null(strstr(seen.payload, "\"edge_error\""));
	assert_non_null(strstr(seen.payload, "a reason"));
	/* not connected: these publish nothing and must not fail */
	link_publish_state(l, true);
	link_refuse_unjournaled(l, job, "storage full");
	link_stop(l);
	link_free(l);
}

/* An inventory command's output (docs/agent.md "Inventory"): valid lines kept, the rest
 * skipped and counted, the limits held. */
static void test_inventory_parse(void **state)
{
	const char *text = "# comment\n\n fw = 2.0.1 \nboard=x1\r\nno equals sign\n"
			   "bad key=1\n=empty\nctl=a\x01b\nnote=a=b:c\nfw=2.0.2\n";
	char why[160], big[8192];
	size_t skipped = 0, n = 0;
	json_object *o;

	(void)state;
	o = inventory_parse(text, strlen(text), &skipped, why, sizeof(why));
	assert_non_null(o);
	assert_int_equal(json_object_object_length(o), 3);
	assert_string_equal(json_object_get_string(json_object_object_get(o, "fw")), "2.0.2");
	assert_string_equal(json_object_get_string(json_object_object_get(o, "board")), "x1");
	assert_string_equal(json_object_get_string(json_object_object_get(o, "note")), "a=b:c");
	assert_int_equal(skipped, 4);
	assert_non_null(strstr(why, "no '='"));
	json_object_put(o);

	/* 40 keys: 32 kept */
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "k%d=v\n", i);
	o = inventory_parse(big, n, &skipped, why, sizeof(why));
	assert_int_equal(json_object_object_length(o), 32);
	assert_int_equal(skipped, 8);
	assert_non_null(strstr(why, "more than 32 keys"));
	json_object_put(o);

	/* 4 KiB in all: five values of 1000 bytes, four kept */
	n = 0;
	for (int i = 0; i < 5; i++) {
		n += (size_t)snprintf(big + n, sizeof(big) - n, "v%d=", i);
		memset(big + n, 'x', 1000);
		n += 1000;
		big[n++] = '\n';
	}
	o = inventory_parse(big, n, &skipped, why, sizeof(why));
	assert_int_equal(json_object_object_length(o), 4);
	assert_int_equal(skipped, 1);
	assert_non_null(strstr(why, "more than 4096 bytes"));
	json_object_put(o);
}

/* ---- phases: rcs.state's values, the boot id (docs/agent.md "Phases") ---- */

static void test_phase_state(void **state)
{
	json_object *st = NULL, *next = NULL;
	char *text = NULL, *v = NULL, why[256], type = 0;
	char big[JOURNAL_MAX_SCRIPT_STATE];

	(void)state;
	/* values of each type, then read back as they went in */
	assert_int_equal(
	    phase_state_set(NULL, "expect", 's', "2.0", 3, &next, &text, why, sizeof(why)), RCS_OK);
	assert_string_equal(text, "{\"expect\":\"2.0\"}");
	free(text);
	st = next;
	assert_int_equal(phase_state_set(st, "n", 'n', "41", 2, &next, &text, why, sizeof(why)),
			 RCS_OK);
	json_object_put(st);
	st = next;
	free(text);
	assert_int_equal(phase_state_set(st, "f", 'n', "2.5", 3, &next, &text, why, sizeof(why)),
			 RCS_OK);
	json_object_put(st);
	st = next;
	free(text);
	assert_int_equal(phase_state_set(st, "ok", 'b', "false", 5, &next, &text, why, sizeof(why)),
			 RCS_OK);
	json_object_put(st);
	st = next;
	assert_string_equal(text, "{\"expect\":\"2.0\",\"n\":41,\"f\":2.5,\"ok\":false}");
	free(text);
	assert_int_equal(phase_state_get(st, "n", &type, &v), RCS_OK);
	assert_int_equal(type, 'n');
	assert_string_equal(v, "41");
	free(v);
	assert_int_equal(phase_state_get(st, "f", &type, &v), RCS_OK);
	assert_int_equal(type, 'n');
	assert_string_equal(v, "2.5");
	free(v);
	assert_int_equal(phase_state_get(st, "ok", &type, &v), RCS_OK);
	assert_int_equal(type, 'b');
	assert_string_equal(v, "false");
	free(v);
	assert_int_equal(phase_state_get(st, "expect", &type, &v), RCS_OK);
	assert_int_equal(type, 's');
	free(v);
	assert_int_equal(phase_state_get(st, "none", &type, &v), RCS_ERR_NOTFOUND);
	/* removing a key */
	assert_int_equal(phase_state_set(st, "n", 0, NULL, 0, &next, &text, why, sizeof(why)),
			 RCS_OK);
	assert_null(strstr(text, "\"n\""));
	assert_int_equal(phase_state_get(next, "n", &type, &v), RCS_ERR_NOTFOUND);
	json_object_put(next);
	free(text);
	/* bad input: refused, naming what is wrong, and st is unchanged */
	assert_int_equal(phase_state_set(st, "", 's', "x", 1, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_non_null(strstr(why, "key"));
	assert_int_equal(phase_state_set(st, "a\nb", 's', "x", 1, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_int_equal(phase_state_set(st, "k", 'n', "nan", 3, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_non_null(strstr(why, "finite"));
	assert_int_equal(phase_state_set(st, "k", 'n', "1e999", 5, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_int_equal(phase_state_set(st, "k", 'b', "yes", 3, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_int_equal(phase_state_set(st, "k", 't', "{}", 2, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	assert_non_null(strstr(why, "string, a number or a boolean"));
	assert_int_equal(phase_state_set(st, "k", 's', "a\xff", 2, &next, &text, why, sizeof(why)),
			 RCS_ERR_INVAL);
	memset(big, 'x', sizeof(big));
	assert_int_equal(
	    phase_state_set(st, "k", 's', big, sizeof(big), &next, &text, why, sizeof(why)),
	    RCS_ERR_TOOBIG);
	assert_non_null(strstr(why, "more than 16384"));
	assert_null(next);
	assert_null(text);
	assert_int_equal(phase_state_get(st, "k", &type, &v), RCS_ERR_NOTFOUND);
	json_object_put(st);
	/* the journaled text back into a table; garbage starts empty */
	st = phase_state_parse("job", "{\"a\":1}");
	assert_non_null(st);
	json_object_put(st);
	assert_null(phase_state_parse("job", "[1]"));
	assert_null(phase_state_parse("job", "nope"));
}

static void test_phase_boot_id(void **state)
{
	struct fx *f = *state;
	char path[512], id[JOURNAL_MAX_BOOT_ID + 1];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/boot_id", f->dir);
	assert_int_equal(phase_boot_id(path, id), RCS_ERR_IO);
	assert_string_equal(id, "");
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("3f1c2d9e-6a5b-4c7d-8e9f-0a1b2c3d4e5f\nsecond line\n", fp);
	fclose(fp);
	assert_int_equal(phase_boot_id(path, id), RCS_OK);
	assert_string_equal(id, "3f1c2d9e-6a5b-4c7d-8e9f-0a1b2c3d4e5f");
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("\n", fp);
	fclose(fp);
	assert_int_equal(phase_boot_id(path, id), RCS_ERR_INVAL);
	assert_int_equal(phase_boot_id("/proc/sys/kernel/random/boot_id", id), RCS_OK);
	assert_int_equal(strlen(id), 36);
}

/* Online only once every filter of the connection there is was granted; a refusal says
 * offline once; answers of an earlier connection change nothing; a reconnect starts over. */
static void test_presence_order(void **state)
{
	struct presence p;

	(void)state;
	memset(&p, 0, sizeof(p));
	assert_false(presence_online(&p));
	assert_int_equal(presence_suback(&p, 0, 0, true), PRESENCE_NONE);

	/* both granted: online at the second, once */
	presence_connect(&p, 1, 2);
	assert_false(presence_online(&p));
	assert_int_equal(presence_suback(&p, 1, 1, true), PRESENCE_NONE);
	assert_false(presence_online(&p));
	assert_int_equal(presence_suback(&p, 1, 0, true), PRESENCE_ONLINE);
	assert_true(presence_online(&p));
	assert_int_equal(presence_suback(&p, 1, 0, true), PRESENCE_NONE);
	assert_true(presence_online(&p));

	/* lost: offline; the next connect waits for its own grants */
	presence_lost(&p);
	assert_false(presence_online(&p));
	presence_connect(&p, 2, 2);
	assert_int_equal(presence_suback(&p, 1, 0, true), PRESENCE_NONE); /* the last one's */
	assert_int_equal(presence_suback(&p, 1, 1, true), PRESENCE_NONE);
	assert_false(presence_online(&p));

	/* the jobs filter refused: offline said once, however often it is refused again */
	assert_int_equal(presence_suback(&p, 2, 1, true), PRESENCE_NONE);
	assert_int_equal(presence_suback(&p, 2, 0, false), PRESENCE_OFFLINE);
	assert_false(presence_online(&p));
	assert_int_equal(presence_suback(&p, 2, 0, false), PRESENCE_NONE);
	assert_int_equal(presence_suback(&p, 2, 0, false), PRESENCE_NONE);
	assert_int_equal(p.refusals, 3);
	assert_false(presence_online(&p));
	/* an index out of range (an unknown filter) changes nothing */
	assert_int_equal(presence_suback(&p, 2, 2, true), PRESENCE_NONE);
	assert_int_equal(presence_suback(&p, 2, 7, true), PRESENCE_NONE);
	assert_false(presence_online(&p));
	/* granted when asked again: online */
	assert_int_equal(presence_suback(&p, 2, 0, true), PRESENCE_ONLINE);
	assert_true(presence_online(&p));

	/* a reconnect refused again says offline again (a new connection's state) */
	presence_connect(&p, 3, 2);
	assert_false(presence_online(&p));
	assert_int_equal(presence_suback(&p, 3, 1, false), PRESENCE_OFFLINE);
	assert_int_equal(presence_suback(&p, 3, 0, true), PRESENCE_NONE);
	assert_false(presence_online(&p));
	/* lost while refused: an answer of that connection comes late and changes nothing */
	presence_lost(&p);
	assert_int_equal(presence_suback(&p, 3, 1, true), PRESENCE_NONE);
	assert_false(presence_online(&p));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_settings_required_and_uuids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_settings_flags_win, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_settings_brokers, setup, teardown),
	    cmocka_unit_test(test_mqtt_url_lists),
	    cmocka_unit_test_setup_teardown(test_settings_secrets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_settings_reload_snapshots, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner_queues_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner_refuses_bad_envelopes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner_follows_reloaded_policy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner_queue_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner_cancels, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_link_reports_wait_in_outbox, setup, teardown),
	    cmocka_unit_test(test_inventory_parse),
	    cmocka_unit_test(test_phase_state),
	    cmocka_unit_test(test_presence_order),
	    cmocka_unit_test_setup_teardown(test_phase_boot_id, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
