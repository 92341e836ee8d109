/*
 * serve.c - rcs-coordinator serve: the daemon's life as named steps over one struct serve
 * (the settings checked, every part started in order, serving until a signal, the clean stop
 * in the reverse order: docs/architecture.md, "The coordinator"). See settings.h.
 */
#include "settings.h"

#include <dirent.h>
#include <pwd.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "art_token.h"
#include "dl_limits.h"
#include "dl_pacer.h"
#include "cfg.h"
#include "auth.h"
#include "http_api.h"
#include "lifecycle.h"
#include "log.h"
#include "chunks.h"
#include "mqtt_bridge.h"
#include "notifier.h"
#include "scheduler.h"
#include "script_check.h"
#include "service.h"
#include "signer.h"
#include "store.h"
#include "store_audit.h"
#include "store_devices.h"
#include "store_keys.h"
#include "store_queues.h"
#include "store_tasks.h"
#include "uuid.h"
#include "validate.h"
#include "webhooks.h"
#include "metrics.h"
#include "node.h"
#include "text.h"

#define SCRIPT_FILE_MAX (256 * 1024)

/* Loads every <name>.lua of dir as a stock script. */
static enum rcs_err load_stock_scripts(struct store *st, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	enum rcs_err err = RCS_OK;
	int n = 0;

	if (d == NULL) {
		log_warn("--scripts-dir %s", dir);
		return RCS_ERR_IO;
	}
	while ((de = readdir(d)) != NULL) {
		char path[4096], name[80], msg[SCRIPT_CHECK_MSG_MAX], *src = NULL;
		size_t len = strlen(de->d_name), got;
		int line;
		FILE *fp;

		if (len < 5 || len - 4 >= sizeof(name) || strcmp(de->d_name + len - 4, ".lua") != 0)
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(len - 4), de->d_name);
		if (!vars_token_valid(name, 64, "-.")) {
			log_warnx("%s/%s: not a valid script name, skipped", dir, de->d_name);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fp = fopen(path, "rb");
		if (fp == NULL) {
			log_warn("%s", path);
			continue;
		}
		src = malloc(SCRIPT_FILE_MAX + 1);
		got = src ? fread(src, 1, SCRIPT_FILE_MAX + 1, fp) : 0;
		fclose(fp);
		if (src == NULL || got > SCRIPT_FILE_MAX) {
			log_warnx("%s: larger than %d bytes, skipped", path, SCRIPT_FILE_MAX);
			free(src);
			continue;
		}
		if (script_check(name, src, got, msg, sizeof(msg), &line) != RCS_OK) {
			log_warnx("%s: does not compile, skipped: %s", path, msg);
			free(src);
			continue;
		}
		err = store_script_put(st, "", name, src, got, (int64_t)time(NULL), NULL);
		free(src);
		if (err != RCS_OK)
			break;
		n++;
	}
	closedir(d);
	if (err == RCS_OK)
		log_info("%d stock scripts from %s", n, dir);
	return err;
}

static bool main_bridge_up(void *ctx)
{
	return bridge_connected(ctx);
}

/* Another coordinator committed work that may be due (store_listen's thread). */
static void main_work_notified(void *ctx)
{
	struct lifecycle *lc = ctx;

	if (lc->timers)
		lc->timers(lc->timers_ctx);
	if (lc->changed)
		lc->changed(lc->changed_ctx);
	if (lc->webhooks_changed)
		lc->webhooks_changed(lc->webhooks_ctx);
}

/* What the steps of `serve` share: each start step adds its part, and serve_stop takes down
 * whatever was started, in the order of a clean stop (docs/architecture.md, "The
 * coordinator"). */
struct serve {
	struct settings *s;
	struct store *st;
	struct signer *signer;
	struct http_api *http;
	struct http_api *devhttp;  /* --device-listen, or NULL */
	struct art_tokens *tokens; /* artifact tokens (art_token.h) */
	struct bridge *bridge;
	struct chunks *chunks; /* artifacts over MQTT (chunks.h) */
	struct sched *sched;
	struct notifier *notifier;
	struct webhook_guard *guard;
	struct webhooks *hooks;
	struct metrics_server *metrics;
	struct lifecycle lc;
	struct api_app app;
	sigset_t sigs;
	bool ready; /* systemd was told, so it is told of the stop too */
	char node_id[NODE_ID_MAX + 1], client_id[NODE_ID_MAX + 32];
	char *keep;
	bool node_kept; /* the node id comes back at the next start */
	bool curl_ready;
	char brokers[1024];
	enum bridge_shared shared;
	bool node_died; /* this node's last run did not stop cleanly */
};

/* The signing key and the trusted keys; false (exit 1) with the reason told. */
static bool serve_load_keys(struct serve *sv)
{
	struct settings *s = sv->s;
	enum rcs_err err;

	err = signer_open(s->signing_key, s->signing_key_passphrase, s->trusted_key.items,
			  s->trusted_key.n, &sv->signer);
	if (err == RCS_ERR_AUTH && s->signing_key_passphrase) {
		fprintf(stderr, "rcs-coordinator: --signing-key %s: wrong passphrase\n",
			s->signing_key);
	} else if (err == RCS_ERR_AUTH) {
		fprintf(stderr,
			"rcs-coordinator: --signing-key %s is encrypted: give its passphrase with"
			" --signing-key-passphrase-file FILE or RCS_SIGNING_KEY_PASSPHRASE\n",
			s->signing_key);
	} else if (err == RCS_ERR_CRYPTO && s->signing_key_passphrase) {
		fprintf(stderr,
			"rcs-coordinator: --signing-key %s: not an EC P-256 key, or encrypted in a"
			" way this build cannot read (PKCS#8 with AES: re-encrypt it with"
			" openssl ec -aes256)\n",
			s->signing_key);
	} else if (err != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot load keys: %s\n", rcs_strerror(err));
	}
	if (err == RCS_OK && s->sign_artifacts && s->signing_key == NULL)
		log_warnx("--sign-artifacts without --signing-key: tasks with artifacts are left"
			  " unsigned, for an operator to sign offline (docs/signing.md)");
	return err == RCS_OK;
}

/* The settings read and checked, nothing started: 0, or the exit code (2: a bad setting). */
static int serve_settings(struct serve *sv)
{
	struct settings *s = sv->s;
	char why[256];
	int rc = 2;

	settings_need(s->db, "--db");
	settings_need(s->listen, "--listen");
	if (!settings_resolve_secrets(s))
		goto out;
	if (!serve_load_keys(sv)) {
		rc = 1;
		goto out;
	}
	if (s->mqtt.n > 0 && mqttc_urls_check((const char *const *)s->mqtt.items, s->mqtt.n, why,
					      sizeof(why)) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: %s\n", why);
		goto out;
	}
	if (bridge_shared_parse(s->mqtt_shared_subscriptions, &sv->shared) != RCS_OK) {
		fprintf(
		    stderr,
		    "rcs-coordinator: --mqtt-shared-subscriptions: '%s' is not auto, yes or no\n",
		    s->mqtt_shared_subscriptions);
		goto out;
	}
	text_join(s->mqtt.items, s->mqtt.n, ", ", sv->brokers, sizeof(sv->brokers));
	if (webhook_guard_new((const char *const *)s->webhook_allow_net.items,
			      s->webhook_allow_net.n, &sv->guard, why, sizeof(why)) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: %s\n", why);
		goto out;
	}
	sv->keep = node_id_keep_file(s->db);
	if (node_id_resolve(s->node_id, s->check ? NULL : sv->keep, sv->node_id, &sv->node_kept,
			    why, sizeof(why)) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: %s\n", why);
		goto out;
	}
	snprintf(sv->client_id, sizeof(sv->client_id), "rcs-coordinator-%s", sv->node_id);
	rc = 0;
out:
	return rc;
}

/* The process's state before any thread: libcurl's global state (the webhook sender's and the
 * notifier's), and the signals, taken by this thread only, with sigwait(). */
static bool serve_process_setup(struct serve *sv)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "rcs-coordinator: cannot initialise libcurl\n");
		return false;
	}
	sv->curl_ready = true;
	sigemptyset(&sv->sigs);
	sigaddset(&sv->sigs, SIGTERM);
	sigaddset(&sv->sigs, SIGINT);
	sigaddset(&sv->sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sv->sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	return true;
}

/* The port first: a second coordinator on a busy port must not reach the broker. */
static bool serve_open_port(struct serve *sv)
{
	if (http_api_listen(sv->s->listen, &sv->http) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve on %s\n", sv->s->listen);
		return false;
	}
	if (sv->s->device_listen != NULL) {
		if (http_api_listen(sv->s->device_listen, &sv->devhttp) != RCS_OK) {
			fprintf(stderr, "rcs-coordinator: cannot serve on --device-listen %s\n",
				sv->s->device_listen);
			return false;
		}
		http_api_devices_only(sv->devhttp);
	}
	return true;
}

/* The database (a failure ends the process, open_db), the stock scripts, and the claims of
 * once-only work under this node's id (docs/architecture.md "Claims"). */
static bool serve_open_store(struct serve *sv)
{
	sv->st = settings_open_db(sv->s->db);
	if (sv->s->scripts_dir && load_stock_scripts(sv->st, sv->s->scripts_dir) != RCS_OK)
		return false;
	store_claims_setup(sv->st, sv->node_id, sv->s->lease);
	/* the secrets of artifact tokens, shared by every coordinator of the database */
	if (art_tokens_open(sv->st, (int64_t)time(NULL), &sv->tokens) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot read the artifact tokens' secrets\n");
		return false;
	}
	return true;
}

/* Presence is the broker's word since this start, never the last run's (docs/mqtt.md); on a
 * shared database (PostgreSQL) it is reset only when no other coordinator is running: one that
 * is sees the devices online (docs/scale-out.md). */
static bool serve_reset_presence(struct serve *sv)
{
	struct store *st = sv->st;
	long long others = 0;
	int64_t db_now = 0;

	if (!store_shared(st))
		return store_devices_presence_reset(st) == RCS_OK;
	if (store_node_left(st, &sv->node_died) != RCS_OK ||
	    store_nodes_others(st, (int64_t)time(NULL), &others) != RCS_OK ||
	    store_node_beat(st, (int64_t)time(NULL)) != RCS_OK)
		return false;
	if (store_clock(st, &db_now) == RCS_OK &&
	    llabs((long long)(db_now - (int64_t)time(NULL))) > 2)
		log_warnx("this host's clock is %+lld s off the database server's: leases and"
			  " signs of life count on agreeing clocks (keep them synchronised,"
			  " docs/scale-out.md)",
			  (long long)((int64_t)time(NULL) - db_now));
	if (others > 0) {
		log_info("%lld other coordinators run on this database: device presence"
			 " kept",
			 others);
		return true;
	}
	return store_devices_presence_reset(st) == RCS_OK;
}

/* The webhook sender, whose wake-up is set before anything can change a job's status. */
static bool serve_start_webhooks(struct serve *sv)
{
	struct settings *s = sv->s;
	struct webhooks_opts wo;

	sv->lc.st = sv->st;
	sv->lc.hooks = NULL; /* no transport: jobs are stored and stay pending */
	memset(&wo, 0, sizeof(wo));
	wo.guard = sv->guard;
	wo.retry_base = (int)s->webhook_retry_base;
	wo.give_up = (int)s->webhook_give_up;
	wo.timeout = (int)s->webhook_timeout;
	wo.max_inflight = (int)s->webhook_max_inflight;
	wo.per_hook = (int)s->webhook_per_hook;
	if (webhooks_start(&wo, sv->st, &sv->lc, &sv->hooks) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot start the webhook sender\n");
		return false;
	}
	return true;
}

/* The e-mail notifier, with --smtp-url; without, notifications are only recorded. */
static bool serve_start_notifier(struct serve *sv)
{
	struct settings *s = sv->s;
	struct notifier_opts no;

	if (s->smtp_url == NULL) {
		log_info("no --smtp-url: notifications are recorded but not sent");
		return true;
	}
	memset(&no, 0, sizeof(no));
	no.smtp_url = s->smtp_url;
	no.from = s->smtp_from;
	no.username = s->smtp_username;
	no.password = s->smtp_password;
	no.max_per_hour = s->smtp_max_per_hour;
	no.retry_base = (int)s->smtp_retry_base;
	if (notifier_start(&no, sv->st, &sv->lc, &sv->notifier) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot send notifications with %s\n",
			s->smtp_url);
		return false;
	}
	return true;
}

/* The MQTT transport, with --mqtt; without, jobs are stored and wait pending. */
static bool serve_start_bridge(struct serve *sv)
{
	struct settings *s = sv->s;
	struct bridge_opts bo;

	if (s->mqtt.n == 0) {
		log_info("no --mqtt: jobs are stored and wait pending (ttl still expires them)");
		return true;
	}
	memset(&bo, 0, sizeof(bo));
	bo.mqtt.urls = (const char *const *)s->mqtt.items;
	bo.mqtt.nurls = s->mqtt.n;
	bo.shared = sv->shared;
	bo.stable_client_id = sv->node_kept || s->mqtt_client_id;
	bo.node_died = sv->node_died;
	bo.events_qos = (int)s->events_qos;
	bo.events_backlog = (size_t)s->events_backlog;
	bo.mqtt.max_inflight = (int)s->mqtt_window;
	bo.mqtt.client_id = s->mqtt_client_id ? s->mqtt_client_id : sv->client_id;
	bo.mqtt.username = s->mqtt_username;
	bo.mqtt.password = s->mqtt_password;
	bo.mqtt.cafile = s->mqtt_cafile;
	bo.mqtt.certfile = s->mqtt_certfile;
	bo.mqtt.keyfile = s->mqtt_keyfile;
	bo.mqtt.key_passphrase = s->mqtt_key_passphrase;
	bo.max_payload = (size_t)s->mqtt_max_payload;
	bo.resend_after = s->resend_after;
	/* a cluster's brokers may lose an envelope they acknowledged (docs/mqtt.md, "Delivery
	 * guarantees"): re-sent after 10 s when several are given, unless set */
	bo.resend_unacked_after = s->resend_unacked_after >= 0 ? s->resend_unacked_after
				  : s->mqtt.n > 1              ? 10
							       : 0;
	bo.tokens = sv->tokens;
	if (bridge_start(&bo, sv->st, &sv->lc, &sv->bridge) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot use MQTT broker %s\n", sv->brokers);
		return false;
	}
	return true;
}

/* The artifacts' chunks over MQTT, with --mqtt (chunks.h): on a connection of their own, as
 * the client id and user of the bridge's with "-chunks" appended (docs/coordinator.md). */
static bool serve_start_chunks(struct serve *sv)
{
	struct settings *s = sv->s;
	struct chunks_opts co;
	char id[NODE_ID_MAX + 64], user[256];
	const char *base = s->mqtt_client_id ? s->mqtt_client_id : sv->client_id;

	if (s->mqtt.n == 0)
		return true;
	memset(&co, 0, sizeof(co));
	co.mqtt.urls = (const char *const *)s->mqtt.items;
	co.mqtt.nurls = s->mqtt.n;
	snprintf(id, sizeof(id), "%.*s-chunks", (int)(sizeof(id) - 8), base);
	co.mqtt.client_id = id;
	if (s->mqtt_username) {
		snprintf(user, sizeof(user), "%.*s-chunks", (int)(sizeof(user) - 8),
			 s->mqtt_username);
		co.mqtt.username = user;
	}
	co.mqtt.password = s->mqtt_password;
	co.mqtt.cafile = s->mqtt_cafile;
	co.mqtt.certfile = s->mqtt_certfile;
	co.mqtt.keyfile = s->mqtt_keyfile;
	co.mqtt.key_passphrase = s->mqtt_key_passphrase;
	/* no TCP_NODELAY: it is set per process and port (mqttc.h), and the bridge's
	 * connection keeps Nagle's algorithm for its many small publishes; a chunk fills
	 * its segments anyway */
	co.mqtt.nodelay = false;
	co.mqtt.clean = true;
	co.rate = s->artifact_mqtt_rate;
	co.artifact_dir = sv->app.artifact_dir;
	co.dl = sv->app.dl;
	co.bridge = sv->bridge;
	if (chunks_start(&co, sv->st, &sv->chunks) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve artifacts over MQTT broker %s\n",
			sv->brokers);
		return false;
	}
	return true;
}

/* The metrics listener, with --metrics-listen, and its probe of the broker's connection. */
static bool serve_start_metrics(struct serve *sv)
{
	const char *listen = sv->s->metrics_listen;

	if (listen && metrics_serve(listen, sv->st, &sv->metrics) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve metrics on %s\n", listen);
		return false;
	}
	if (sv->bridge)
		metrics_mqtt_probe(main_bridge_up, sv->bridge);
	return true;
}

/* Every timer, with or without a transport: ttl expiry, scheduled sends, re-sends. */
static bool serve_start_scheduler(struct serve *sv)
{
	if (sched_start(sv->st, &sv->lc, &sv->sched) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot start the scheduler\n");
		return false;
	}
	if (sv->bridge) {
		struct sched_transport tr;

		bridge_transport(sv->bridge, &tr);
		sched_set_transport(sv->sched, &tr);
	}
	return true;
}

/* Other coordinators' new work wakes the scheduler, the notifier, the webhook sender. */
static bool serve_listen_others(struct serve *sv)
{
	if (store_listen(sv->st, main_work_notified, &sv->lc) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot listen for other coordinators' work\n");
		return false;
	}
	return true;
}

/* Artifacts (docs/api.md "Artifacts"): their directory (SQLite: --artifact-dir, else
 * artifacts/ beside the database), their limits, and what uploads a stop cut left removed. */
static bool serve_artifacts(struct serve *sv)
{
	struct settings *s = sv->s;
	const char *slash = strrchr(s->db, '/');
	int n;

	if (s->artifact_dir)
		n = snprintf(sv->app.artifact_dir, sizeof(sv->app.artifact_dir), "%s",
			     s->artifact_dir);
	else if (slash)
		n = snprintf(sv->app.artifact_dir, sizeof(sv->app.artifact_dir), "%.*s/artifacts",
			     (int)(slash - s->db), s->db);
	else
		n = snprintf(sv->app.artifact_dir, sizeof(sv->app.artifact_dir), "artifacts");
	if (n < 0 || (size_t)n >= sizeof(sv->app.artifact_dir)) {
		fprintf(stderr, "rcs-coordinator: --artifact-dir is too long\n");
		return false;
	}
	sv->app.artifact_max_size = s->artifact_max_size;
	sv->app.artifact_quota = s->artifact_quota;
	sv->app.sign_artifacts = s->sign_artifacts;
	sv->app.tokens = sv->tokens;
	/* the groups' download limits, held by this coordinator (docs/api.md "Download
	 * limits") */
	if (dl_limits_new(&sv->app.dl) != RCS_OK || dl_pacer_start(&sv->app.pacer) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot start the download limits\n");
		return false;
	}
	if (api_artifacts_sweep(&sv->app, sv->node_id) != RCS_OK)
		log_warnx("artifacts: what interrupted uploads left could not all be removed");
	return true;
}

/* The API's threads on the port opened first, each with a reader of its own: reads never wait
 * for the writer. */
static bool serve_start_api(struct serve *sv)
{
	struct settings *s = sv->s;
	char shown[1024];

	if (store_readers_open(sv->st, (unsigned)s->threads) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot open the database's readers\n");
		return false;
	}
	sv->app.st = sv->st;
	sv->app.lc = &sv->lc;
	sv->app.signer = sv->signer;
	sv->app.bridge = sv->bridge;
	sv->app.max_body = (size_t)s->max_body;
	sv->app.auth_fail_limit = (unsigned)s->auth_fail_limit;
	sv->app.webhook_guard = sv->guard;
	sv->app.writer = sv->st;
	if (!serve_artifacts(sv))
		return false;
	if (http_api_start(sv->http, &sv->app, (unsigned)s->threads) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve on %s\n", s->listen);
		return false;
	}
	if (sv->devhttp != NULL &&
	    http_api_start(sv->devhttp, &sv->app, (unsigned)s->threads) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve on %s\n", s->device_listen);
		return false;
	}
	settings_db_shown(s->db, shown, sizeof(shown));
	log_info("rcs-coordinator %s serving as node %s (database %s)", RCS_VERSION, sv->node_id,
		 shown);
	return true;
}

/* Every part, in the order that each needs the ones before: false at the first that fails. */
static bool serve_start(struct serve *sv)
{
	return serve_process_setup(sv) && serve_open_port(sv) && serve_open_store(sv) &&
	       serve_reset_presence(sv) && serve_start_webhooks(sv) && serve_start_notifier(sv) &&
	       serve_start_bridge(sv) && serve_start_metrics(sv) && serve_start_scheduler(sv) &&
	       serve_listen_others(sv) && serve_start_api(sv) && serve_start_chunks(sv);
}

/* Serving until SIGTERM or SIGINT; SIGHUP reloads the stock scripts. Ready for systemd once
 * the broker is connected too, or SERVICE_READY_WAIT seconds later all the same
 * (docs/deploy.md, "The units"). */
static void serve_wait_signal(struct serve *sv)
{
	time_t ready_by = time(NULL) + SERVICE_READY_WAIT;
	int sig;

	for (;;) {
		if (!sv->ready && (sv->bridge == NULL || bridge_connected(sv->bridge))) {
			service_ready("serving");
			sv->ready = true;
		} else if (!sv->ready && time(NULL) >= ready_by) {
			log_warnx("not connected to the MQTT broker %s yet: ready all the same,"
				  " retrying in the background",
				  sv->brokers);
			service_ready("serving; MQTT broker not connected yet");
			sv->ready = true;
		}
		if (service_sigwait(&sv->sigs, sv->ready ? -1 : 100, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			log_info("SIGHUP: reloading stock scripts");
			service_reloading();
			if (sv->s->scripts_dir)
				load_stock_scripts(sv->st, sv->s->scripts_dir);
			service_ready("serving");
			continue;
		}
		log_info("signal %d: stopping", sig);
		break;
	}
}

/* A clean stop, of whatever was started: the threads that move jobs stop before the
 * callbacks they call go (docs/architecture.md, "The coordinator"). */
static void serve_stop(struct serve *sv)
{
	struct store *st = sv->st;

	if (sv->ready)
		service_stopping();
	dl_pacer_stop(sv->app.pacer); /* no download stays suspended by its group's rate */
	http_api_stop(sv->devhttp);
	http_api_stop(sv->http);
	if (st)
		store_listen_stop(st);
	metrics_mqtt_probe(NULL, NULL);
	chunks_stop(sv->chunks); /* before the bridge, whose state it asks */
	sched_stop(sv->sched);   /* before the bridge: no transport call after this */
	bridge_stop(sv->bridge);
	sched_free(sv->sched); /* after the bridge, whose worker may wake it until it stopped */
	notifier_stop(sv->notifier);
	webhooks_stop(sv->hooks);
	metrics_stop(sv->metrics);
	/* what this node claimed and didn't finish goes to the others at once */
	if (st && store_shared(st) && store_claims_release(st) != RCS_OK)
		log_warnx("claims not given up: the others take them when their lease ends");
	if (st && store_shared(st) && store_node_gone(st) != RCS_OK)
		log_warnx("this coordinator's row of the running ones stays until its lease ends");
	art_tokens_free(sv->tokens);
	dl_pacer_free(sv->app.pacer);
	dl_limits_free(sv->app.dl);
	store_close(st);
	signer_free(sv->signer);
	webhook_guard_free(sv->guard);
	free(sv->keep);
	if (sv->curl_ready)
		curl_global_cleanup();
}

/* The daemon's life: the settings checked (and no more with --check), every part started,
 * serving until a signal, then the clean stop of whatever was started. */
int serve_run(struct settings *s)
{
	struct serve sv;
	int rc;

	memset(&sv, 0, sizeof(sv));
	sv.s = s;
	sv.shared = BRIDGE_SHARED_AUTO;
	rc = serve_settings(&sv);
	if (rc == 0 && s->check)
		printf("configuration OK\n");
	else if (rc == 0 && serve_start(&sv))
		serve_wait_signal(&sv);
	else if (rc == 0)
		rc = 1;
	serve_stop(&sv);
	return rc;
}
