/*
 * rcs-coordinator: the REST API, storage and job lifecycle of the Remote
 * Command Service.
 *
 *   parse flags and config -> open storage -> load stock scripts and keys ->
 *   serve the API -> wait for SIGTERM (SIGHUP reloads) -> clean shutdown.
 */
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

#include "cfg.h"
#include "auth.h"
#include "http_api.h"
#include "lifecycle.h"
#include "log.h"
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

struct settings {
	char *db;
	char *listen;
	char *scripts_dir;
	char *signing_key;
	char *signing_key_passphrase_file;
	struct cfg_strlist trusted_key;
	long long max_body;
	long long threads;
	struct cfg_strlist mqtt;
	char *mqtt_shared_subscriptions;
	long long events_qos;
	long long events_backlog;
	long long mqtt_window;
	char *mqtt_client_id;
	char *node_id;
	long long lease;
	char *mqtt_username;
	char *mqtt_password;
	char *mqtt_password_file;
	char *mqtt_cafile;
	char *mqtt_certfile;
	char *mqtt_keyfile;
	char *mqtt_key_passphrase_file;
	long long mqtt_max_payload;
	long long resend_after;
	char *smtp_url;
	char *smtp_from;
	char *smtp_username;
	char *smtp_password;
	char *smtp_password_file;
	long long smtp_max_per_hour;
	long long smtp_retry_base;
	long long auth_fail_limit;
	/* webhooks and metrics */
	struct cfg_strlist webhook_allow_net;
	long long webhook_retry_base;
	long long webhook_give_up;
	long long webhook_timeout;
	long long webhook_max_inflight;
	char *metrics_listen;
	bool debug;
	bool check;
	/* subcommand options */
	char *client_root;
	char *user;
	char *role;
	char *ident;
	/* secrets from files and the environment, not options (resolve_secrets) */
	char *signing_key_passphrase;
	char *mqtt_key_passphrase;
};

#define OPT(name, type, field, arg, help)                                                          \
	{                                                                                          \
		name, type, offsetof(struct settings, field), 0, 0, arg, help                      \
	}
#define OPT_INT(name, field, min, max, arg, help)                                                  \
	{                                                                                          \
		name, CFG_INT, offsetof(struct settings, field), min, max, arg, help               \
	}

/* The --db value as logs may show it: a password in a database URL
 * (postgresql://user:secret@host/db) replaced by "***" (docs/coordinator.md). */
static void coord_db_shown(const char *db, char *out, size_t len)
{
	const char *scheme = strstr(db, "://"), *at, *colon;

	snprintf(out, len, "%s", db);
	if (scheme == NULL)
		return;
	at = strchr(scheme + 3, '@');
	if (at == NULL || memchr(scheme + 3, '/', (size_t)(at - scheme - 3)) != NULL)
		return;
	colon = memchr(scheme + 3, ':', (size_t)(at - scheme - 3));
	if (colon != NULL)
		snprintf(out, len, "%.*s:***%s", (int)(colon - db), db, at);
}
static const struct cfg_opt serve_opts[] = {
    OPT("db", CFG_STRING, db, "PATH",
	"SQLite database file (created when missing) or postgresql:// URL"),
    OPT("listen", CFG_STRING, listen, "HOST:PORT", "address of the REST API"),
    OPT("scripts_dir", CFG_STRING, scripts_dir, "DIR", "stock Lua scripts (<name>.lua)"),
    OPT("signing_key", CFG_STRING, signing_key, "PEM", "EC P-256 key that signs tasks"),
    OPT("signing_key_passphrase_file", CFG_STRING, signing_key_passphrase_file, "FILE",
	"passphrase of an encrypted signing_key (or RCS_SIGNING_KEY_PASSPHRASE)"),
    OPT("trusted_key", CFG_STRLIST, trusted_key, "PEM",
	"public key accepted for task signatures (repeatable)"),
    OPT_INT("max_body", max_body, 1024, 64LL * 1024 * 1024, "BYTES",
	    "largest request body (default 1048576)"),
    OPT_INT("threads", threads, 1, 64, "N", "HTTP worker threads (default: the online cores)"),
    OPT("mqtt", CFG_STRLIST, mqtt, "URL",
	"broker: tcp://host:port or ssl://host:port (repeatable: several brokers, failover)"),
    OPT("mqtt_shared_subscriptions", CFG_STRING, mqtt_shared_subscriptions, "auto|yes|no",
	"status reports through a shared subscription (default auto: shared database, broker "
	"delivers)"),
    OPT_INT("events_qos", events_qos, 0, 1, "0|1",
	    "QoS of the job and group events published (default 1)"),
    OPT_INT("events_backlog", events_backlog, 1, 65536, "N",
	    "events waiting to be published from which device reports wait (default 8192)"),
    OPT_INT("mqtt_window", mqtt_window, 1, 10000, "N",
	    "QoS 1 messages published and not yet acknowledged by the broker (default 1000)"),
    OPT("mqtt_client_id", CFG_STRING, mqtt_client_id, "ID",
	"MQTT client id (default rcs-coordinator-<node id>)"),
    OPT("node_id", CFG_STRING, node_id, "ID",
	"this coordinator's name among several (default: host name + random, kept)"),
    OPT_INT("lease", lease, 1, 3600, "SECONDS",
	    "claims of once-only work end this long after a coordinator stops (default 15)"),
    OPT("mqtt_username", CFG_STRING, mqtt_username, "NAME", "broker user name"),
    OPT("mqtt_password", CFG_STRING, mqtt_password, "SECRET",
	"broker password (shown by ps: prefer mqtt_password_file)"),
    OPT("mqtt_password_file", CFG_STRING, mqtt_password_file, "FILE",
	"file holding the broker password (or RCS_MQTT_PASSWORD)"),
    OPT("mqtt_cafile", CFG_STRING, mqtt_cafile, "PEM", "CA certificates for ssl://"),
    OPT("mqtt_certfile", CFG_STRING, mqtt_certfile, "PEM", "client certificate for ssl://"),
    OPT("mqtt_keyfile", CFG_STRING, mqtt_keyfile, "PEM", "client key for ssl://"),
    OPT("mqtt_key_passphrase_file", CFG_STRING, mqtt_key_passphrase_file, "FILE",
	"passphrase of an encrypted mqtt_keyfile (or RCS_MQTT_KEY_PASSPHRASE)"),
    OPT_INT("mqtt_max_payload", mqtt_max_payload, 1024, 64LL * 1024 * 1024, "BYTES",
	    "larger device messages are dropped (default 1048576)"),
    OPT_INT("resend_after", resend_after, 5, 86400, "SECONDS",
	    "re-send a job's envelope after this long without news (default 60)"),
    OPT("smtp_url", CFG_STRING, smtp_url, "URL",
	"mail server for notifications: smtp://host:port or smtps://host:port"),
    OPT("smtp_from", CFG_STRING, smtp_from, "ADDR", "sender address of notifications"),
    OPT("smtp_username", CFG_STRING, smtp_username, "NAME", "SMTP user name"),
    OPT("smtp_password", CFG_STRING, smtp_password, "SECRET",
	"SMTP password (shown by ps: prefer smtp_password_file)"),
    OPT("smtp_password_file", CFG_STRING, smtp_password_file, "FILE",
	"file holding the SMTP password (or RCS_SMTP_PASSWORD)"),
    OPT_INT("smtp_max_per_hour", smtp_max_per_hour, 0, 1000000, "N",
	    "mails per tenant and hour, beyond: suppressed (default 600, 0: no cap)"),
    OPT_INT("smtp_retry_base", smtp_retry_base, 1, 3600, "SECONDS",
	    "first retry of a failed mail, doubling up to an hour (default 30)"),
    OPT_INT("auth_fail_limit", auth_fail_limit, 0, 1000000, "N",
	    "unknown api keys per client address and minute before 429 (default 120, 0: off)"),
    OPT("webhook_allow_net", CFG_STRLIST, webhook_allow_net, "CIDR",
	"network webhooks may reach although private, loopback or link-local (repeatable)"),
    OPT_INT("webhook_retry_base", webhook_retry_base, 1, 3600, "SECONDS",
	    "first retry of a failed webhook delivery, doubling up to an hour (default 10)"),
    OPT_INT("webhook_give_up", webhook_give_up, 1, 30LL * 86400, "SECONDS",
	    "a webhook delivery not made this long after the change is failed (default 86400)"),
    OPT_INT("webhook_timeout", webhook_timeout, 1, 300, "SECONDS",
	    "time for one webhook delivery attempt (default 10)"),
    OPT_INT("webhook_max_inflight", webhook_max_inflight, 1, 256, "N",
	    "webhook deliveries at once (default 16; 4 of them for one webhook)"),
    OPT("metrics_listen", CFG_STRING, metrics_listen, "HOST:PORT",
	"serve Prometheus metrics on http://HOST:PORT/metrics"),
    OPT("debug", CFG_BOOL, debug, NULL, "log every request"),
    OPT("check", CFG_BOOL, check, NULL, "check the configuration and keys, then exit"),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static const struct cfg_opt admin_opts[] = {
    OPT("db", CFG_STRING, db, "PATH", "SQLite database file or postgresql:// URL"),
    OPT("client_root", CFG_STRING, client_root, "UUID", "tenant"),
    OPT("user", CFG_STRING, user, "NAME", "user name"),
    OPT("role", CFG_STRING, role, "ROLE", "viewer, operator or admin"),
    OPT("ident", CFG_STRING, ident, "KEY_IDENT", "key ident"),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: rcs-coordinator init --db PATH [--client-root UUID] --user NAME\n"
		"       rcs-coordinator key create --db PATH --client-root UUID --user NAME --role "
		"ROLE\n"
		"       rcs-coordinator key revoke --db PATH --ident KEY_IDENT\n"
		"       rcs-coordinator serve --db PATH --listen HOST:PORT [options]\n"
		"       rcs-coordinator --help | --version\n"
		"\n"
		"init creates a tenant and prints {\"client_root\", \"api_key\"} (an admin key).\n"
		"key create prints {\"api_key\", \"ident\"}; keys take effect at once, also while\n"
		"serve runs. Every serve option is also a \"key value\" line of --config FILE.\n"
		"\nserve options:\n");
	cfg_usage(fp, serve_opts);
	fprintf(fp, "  --config FILE                config file (mosquitto.conf style)\n");
}

/* Parses argv[first..] (and --config) into s; exits 2 on an error. */
static void parse_opts(const struct cfg_opt *opts, struct settings *s, int argc, char **argv,
		       int first)
{
	char err[512];
	const char *config = cfg_find_arg(argc, argv, "config");
	int next = first;
	size_t mqtt_from_file;

	if (config && cfg_parse_file(opts, s, config, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: %s\n", err);
		exit(2);
	}
	mqtt_from_file = s->mqtt.n;
	if (cfg_parse_args(opts, s, argc, argv, first, &next, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: %s\n", err);
		exit(2);
	}
	/* --mqtt flags replace the file's brokers, as other flags win over the file */
	cfg_strlist_replaced(&s->mqtt, mqtt_from_file);
	if (next < argc) {
		fprintf(stderr, "rcs-coordinator: unexpected argument '%s'\n", argv[next]);
		exit(2);
	}
}

/*
 * Settles each secret from its option, its file or the environment, first
 * given wins (docs/coordinator.md); the variables are unset either way.
 * False, with the reason on stderr, for a secret file that can't be used.
 */
static bool resolve_secrets(struct settings *s)
{
	char err[512];
	enum rcs_err e;

	e = cfg_secret_resolve("mqtt_password", &s->mqtt_password, s->mqtt_password_file,
			       "RCS_MQTT_PASSWORD", NULL, err, sizeof(err));
	if (e == RCS_OK)
		e = cfg_secret_resolve("smtp_password", &s->smtp_password, s->smtp_password_file,
				       "RCS_SMTP_PASSWORD", NULL, err, sizeof(err));
	if (e == RCS_OK)
		e = cfg_secret_resolve("signing_key_passphrase", &s->signing_key_passphrase,
				       s->signing_key_passphrase_file, "RCS_SIGNING_KEY_PASSPHRASE",
				       NULL, err, sizeof(err));
	if (e == RCS_OK)
		e = cfg_secret_resolve("mqtt_key_passphrase", &s->mqtt_key_passphrase,
				       s->mqtt_key_passphrase_file, "RCS_MQTT_KEY_PASSPHRASE", NULL,
				       err, sizeof(err));
	if (e != RCS_OK)
		fprintf(stderr, "rcs-coordinator: %s\n", err);
	return e == RCS_OK;
}

static void need(const char *value, const char *flag)
{
	if (value == NULL || *value == '\0') {
		fprintf(stderr, "rcs-coordinator: %s is required (see --help)\n", flag);
		exit(2);
	}
}

static struct store *open_db(const char *path)
{
	struct store *st = NULL;
	enum rcs_err err = store_open(path, &st);
	char shown[1024];

	if (err != RCS_OK) {
		coord_db_shown(path, shown, sizeof(shown));
		fprintf(stderr, "rcs-coordinator: cannot open database %s: %s\n", shown,
			rcs_strerror(err));
		exit(1);
	}
	return st;
}

/*
 * The audit record of a subcommand that changed the database (docs/api.md, "Audit"), in
 * its transaction: method "CLI", path the subcommand, user the account that ran it.
 */
static enum rcs_err cli_audit(struct store *st, const char *client_root, const char *what,
			      const char *target, int status)
{
	struct audit_rec a;
	struct passwd *pw = getpwuid(getuid());
	char user[128];

	snprintf(user, sizeof(user), "%s", pw && pw->pw_name ? pw->pw_name : "?");
	memset(&a, 0, sizeof(a));
	a.client_root = (char *)client_root;
	a.ts = (int64_t)time(NULL);
	a.user = user;
	a.method = (char *)"CLI";
	a.path = (char *)what;
	a.target = (char *)target;
	a.status_code = status;
	a.remote = (char *)"local";
	return store_audit_add(st, &a);
}

static int cmd_init(struct settings *s)
{
	struct store *st;
	char root[UUID_STR_LEN], key[64], ident[UUID_STR_LEN];
	int64_t now = (int64_t)time(NULL);
	enum rcs_err err;

	need(s->db, "--db");
	need(s->user, "--user");
	if (!vars_token_valid(s->user, 100, "-.@")) {
		fprintf(stderr, "rcs-coordinator: --user must be 1-100 letters, digits or _-.@\n");
		return 2;
	}
	if (s->client_root) {
		if (!uuid_valid(s->client_root)) {
			fprintf(stderr, "rcs-coordinator: --client-root must be a UUID\n");
			return 2;
		}
		snprintf(root, sizeof(root), "%s", s->client_root);
	} else if (uuid_v7(root) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: no randomness available\n");
		return 1;
	}
	st = open_db(s->db);
	if (store_tenant_exists(st, root)) {
		fprintf(stderr, "rcs-coordinator: tenant %s already exists (use key create)\n",
			root);
		store_close(st);
		return 1;
	}
	err = store_tx_begin(st);
	if (err == RCS_OK) {
		err = store_tenant_create(st, root, now);
		if (err == RCS_OK)
			err = auth_key_new(st, root, s->user, ROLE_ADMIN, now, key, ident);
		if (err == RCS_OK)
			err = cli_audit(st, root, "rcs-coordinator init", ident, 201);
		err = err == RCS_OK ? store_tx_end(st, true) : (store_tx_end(st, false), err);
	}
	store_close(st);
	if (err != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: init failed: %s\n", rcs_strerror(err));
		return 1;
	}
	printf("{\"client_root\": \"%s\", \"api_key\": \"%s\"}\n", root, key);
	explicit_bzero(key, sizeof(key));
	return 0;
}

static int cmd_key(struct settings *s, const char *what)
{
	struct store *st;
	char key[64], ident[UUID_STR_LEN];
	enum role role;
	enum rcs_err err;

	need(s->db, "--db");
	if (strcmp(what, "revoke") == 0) {
		need(s->ident, "--ident");
		st = open_db(s->db);
		err = store_tx_begin(st);
		if (err == RCS_OK) {
			char root[UUID_STR_LEN];

			err = store_key_client_root(st, s->ident, root);
			if (err == RCS_OK)
				err = store_key_revoke(st, NULL, s->ident, (int64_t)time(NULL));
			if (err == RCS_OK)
				err = cli_audit(st, root, "rcs-coordinator key revoke", s->ident,
						200);
			err =
			    err == RCS_OK ? store_tx_end(st, true) : (store_tx_end(st, false), err);
		}
		store_close(st);
		if (err != RCS_OK) {
			fprintf(stderr, "rcs-coordinator: key revoke: %s\n", rcs_strerror(err));
			return 1;
		}
		printf("{\"ident\": \"%s\", \"revoked\": true}\n", s->ident);
		return 0;
	}
	if (strcmp(what, "create") != 0) {
		fprintf(stderr, "rcs-coordinator: unknown key command '%s'\n", what);
		return 2;
	}
	need(s->client_root, "--client-root");
	need(s->user, "--user");
	need(s->role, "--role");
	if (!role_parse(s->role, &role)) {
		fprintf(stderr, "rcs-coordinator: --role must be viewer, operator or admin\n");
		return 2;
	}
	if (!vars_token_valid(s->user, 100, "-.@")) {
		fprintf(stderr, "rcs-coordinator: --user must be 1-100 letters, digits or _-.@\n");
		return 2;
	}
	st = open_db(s->db);
	if (!store_tenant_exists(st, s->client_root)) {
		fprintf(stderr, "rcs-coordinator: no tenant %s (run init first)\n", s->client_root);
		store_close(st);
		return 1;
	}
	err = store_tx_begin(st);
	if (err == RCS_OK) {
		err = auth_key_new(st, s->client_root, s->user, role, (int64_t)time(NULL), key,
				   ident);
		if (err == RCS_OK)
			err =
			    cli_audit(st, s->client_root, "rcs-coordinator key create", ident, 201);
		err = err == RCS_OK ? store_tx_end(st, true) : (store_tx_end(st, false), err);
	}
	store_close(st);
	if (err != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: key create: %s\n", rcs_strerror(err));
		return 1;
	}
	printf("{\"api_key\": \"%s\", \"ident\": \"%s\"}\n", key, ident);
	explicit_bzero(key, sizeof(key));
	return 0;
}

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
	struct bridge *bridge;
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
	return err == RCS_OK;
}

/* The settings read and checked, nothing started: 0, or the exit code (2: a bad setting). */
static int serve_settings(struct serve *sv)
{
	struct settings *s = sv->s;
	char why[256];
	int rc = 2;

	need(s->db, "--db");
	need(s->listen, "--listen");
	if (!resolve_secrets(s))
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
	return true;
}

/* The database (a failure ends the process, open_db), the stock scripts, and the claims of
 * once-only work under this node's id (docs/architecture.md "Claims"). */
static bool serve_open_store(struct serve *sv)
{
	sv->st = open_db(sv->s->db);
	if (sv->s->scripts_dir && load_stock_scripts(sv->st, sv->s->scripts_dir) != RCS_OK)
		return false;
	store_claims_setup(sv->st, sv->node_id, sv->s->lease);
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
	if (bridge_start(&bo, sv->st, &sv->lc, &sv->bridge) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot use MQTT broker %s\n", sv->brokers);
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
	if (http_api_start(sv->http, &sv->app, (unsigned)s->threads) != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: cannot serve on %s\n", s->listen);
		return false;
	}
	coord_db_shown(s->db, shown, sizeof(shown));
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
	       serve_listen_others(sv) && serve_start_api(sv);
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
	http_api_stop(sv->http);
	if (st)
		store_listen_stop(st);
	metrics_mqtt_probe(NULL, NULL);
	sched_stop(sv->sched); /* before the bridge: no transport call after this */
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
	store_close(st);
	signer_free(sv->signer);
	webhook_guard_free(sv->guard);
	free(sv->keep);
	if (sv->curl_ready)
		curl_global_cleanup();
}

/* The daemon's life: the settings checked (and no more with --check), every part started,
 * serving until a signal, then the clean stop of whatever was started. */
static int cmd_serve(struct settings *s)
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

int main(int argc, char **argv)
{
	struct settings s;
	const char *cmd;
	int rc;

	memset(&s, 0, sizeof(s));
	s.max_body = 1024 * 1024;
	/* one HTTP thread per online core (at most 64) */
	s.threads = sysconf(_SC_NPROCESSORS_ONLN);
	if (s.threads < 1)
		s.threads = 1;
	if (s.threads > 64)
		s.threads = 64;
	s.mqtt_max_payload = 1024 * 1024;
	s.resend_after = 60;
	s.lease = STORE_LEASE_DEFAULT;
	s.events_qos = 1;
	s.events_backlog = 8192;
	s.mqtt_window = 1000;
	s.smtp_max_per_hour = 600;
	s.smtp_retry_base = 30;
	s.auth_fail_limit = 120;
	s.webhook_retry_base = 10;
	s.webhook_give_up = 86400;
	s.webhook_timeout = 10;
	s.webhook_max_inflight = 16;
	log_init("rcs-coordinator", LOG_LVL_INFO);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("rcs-coordinator %s\n", RCS_VERSION);
		return 0;
	}
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		}
	}
	if (strcmp(cmd, "serve") == 0) {
		static const char *const visible[] = {"mqtt_password", "smtp_password", NULL};

		parse_opts(serve_opts, &s, argc, argv, 2);
		if (s.debug)
			log_set_level(LOG_LVL_DEBUG);
		cfg_warn_visible_secrets(argc, argv, visible);
		rc = cmd_serve(&s);
		cfg_free(serve_opts, &s);
		cfg_secret_free(&s.signing_key_passphrase);
		cfg_secret_free(&s.mqtt_key_passphrase);
	} else if (strcmp(cmd, "init") == 0) {
		parse_opts(admin_opts, &s, argc, argv, 2);
		rc = cmd_init(&s);
		cfg_free(admin_opts, &s);
	} else if (strcmp(cmd, "key") == 0 && argc >= 3) {
		parse_opts(admin_opts, &s, argc, argv, 3);
		rc = cmd_key(&s, argv[2]);
		cfg_free(admin_opts, &s);
	} else {
		fprintf(stderr, "rcs-coordinator: unknown command '%s' (see --help)\n", cmd);
		rc = 2;
	}
	return rc;
}
