/*
 * rcs-coordinator: the REST API, storage and job lifecycle of the Remote Command Service.
 * main.c reads the command line and the configuration file, and runs a subcommand: init and
 * key here, serve in serve.c (open storage, load stock scripts and keys, serve the API and
 * MQTT, wait for SIGTERM, stop cleanly).
 */
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "settings.h"
#include "auth.h"
#include "cfg.h"
#include "log.h"
#include "store.h"
#include "store_audit.h"
#include "store_downloads.h"
#include "store_keys.h"
#include "store_queues.h"
#include "uuid.h"
#include "validate.h"
#include "webhooks.h"

#define OPT(name, type, field, arg, help)                                                          \
	{                                                                                          \
		name, type, offsetof(struct settings, field), 0, 0, arg, help                      \
	}
#define OPT_INT(name, field, min, max, arg, help)                                                  \
	{                                                                                          \
		name, CFG_INT, offsetof(struct settings, field), min, max, arg, help               \
	}

static const struct cfg_opt serve_opts[] = {
    OPT("db", CFG_STRING, db, "PATH",
	"SQLite database file (created when missing) or postgresql:// URL"),
    OPT("listen", CFG_STRING, listen, "HOST:PORT", "address of the REST API"),
    OPT("device_listen", CFG_STRING, device_listen, "HOST:PORT",
	"a second address serving only the devices' artifact downloads"),
    OPT("scripts_dir", CFG_STRING, scripts_dir, "DIR", "stock Lua scripts (<name>.lua)"),
    OPT("signing_key", CFG_STRING, signing_key, "PEM", "EC P-256 key that signs tasks"),
    OPT("signing_key_passphrase_file", CFG_STRING, signing_key_passphrase_file, "FILE",
	"passphrase of an encrypted signing_key (or RCS_SIGNING_KEY_PASSPHRASE)"),
    OPT("sign_artifacts", CFG_BOOL, sign_artifacts, NULL,
	"signing_key signs tasks with artifacts too (default: they are signed offline)"),
    OPT("trusted_key", CFG_STRLIST, trusted_key, "PEM",
	"public key accepted for task signatures (repeatable)"),
    OPT_INT("max_body", max_body, 1024, 64LL * 1024 * 1024, "BYTES",
	    "largest request body (default 1048576)"),
    OPT("artifact_dir", CFG_STRING, artifact_dir, "DIR",
	"artifacts' files on SQLite (default: artifacts/ beside the database)"),
    OPT_INT("artifact_max_size", artifact_max_size, 1, 1LL << 50, "BYTES",
	    "largest artifact (default 4 GiB)"),
    OPT_INT("artifact_quota", artifact_quota, 1, 1LL << 56, "BYTES",
	    "bytes of artifacts per tenant (default 64 GiB)"),
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
    OPT_INT("artifact_mqtt_rate", artifact_mqtt_rate, 0, 1LL << 40, "BYTES",
	    "bytes per second per device of artifacts over MQTT (default 1048576, 0: no limit)"),
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
    OPT_INT("resend_unacked_after", resend_unacked_after, 0, 86400, "SECONDS",
	    "re-send once, this long after its send, a job an online device has not"
	    " acknowledged (default 10 with several --mqtt brokers, else 0: never)"),
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
    OPT_INT("webhook_max_inflight", webhook_max_inflight, 1, 1024, "N",
	    "webhook deliveries at once (default 256)"),
    OPT_INT("webhook_per_hook", webhook_per_hook, 1, 1024, "N",
	    "webhook deliveries at once for one webhook (default 64)"),
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
		"       rcs-coordinator artifact-secret rotate --db PATH\n"
		"       rcs-coordinator serve --db PATH --listen HOST:PORT [options]\n"
		"       rcs-coordinator --help | --version\n"
		"\n"
		"init creates a tenant and prints {\"client_root\", \"api_key\"} (an admin key).\n"
		"key create prints {\"api_key\", \"ident\"}; keys take effect at once, also while\n"
		"serve runs. artifact-secret rotate adds the secret new artifact tokens are made\n"
		"with (at each coordinator's next start); tokens already issued stay valid. Every "
		"serve option is also a \"key value\" line of --config FILE.\n"
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

	settings_need(s->db, "--db");
	settings_need(s->user, "--user");
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
	st = settings_open_db(s->db);
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

/* A new secret for artifact tokens (docs/mqtt.md, "Artifact token"): the newest signs the
 * tokens a coordinator makes from its next start; every one kept still verifies. */
static int cmd_artifact_secret(struct settings *s, const char *what)
{
	struct store *st;
	enum rcs_err err;

	settings_need(s->db, "--db");
	if (strcmp(what, "rotate") != 0) {
		fprintf(stderr, "rcs-coordinator: artifact-secret takes rotate\n");
		return 2;
	}
	st = settings_open_db(s->db);
	err = store_tx_begin(st);
	if (err == RCS_OK) {
		err = store_token_secret_add(st, (int64_t)time(NULL));
		if (err == RCS_OK)
			err = cli_audit(st, NULL, "rcs-coordinator artifact-secret rotate", NULL,
					201);
		err = err == RCS_OK ? store_tx_end(st, true) : (store_tx_end(st, false), err);
	}
	store_close(st);
	if (err != RCS_OK) {
		fprintf(stderr, "rcs-coordinator: artifact-secret rotate failed: %s\n",
			rcs_strerror(err));
		return 1;
	}
	printf("a new artifact token secret: coordinators make tokens with it from their next"
	       " start; tokens already issued stay valid\n");
	return 0;
}

static int cmd_key(struct settings *s, const char *what)
{
	struct store *st;
	char key[64], ident[UUID_STR_LEN];
	enum role role;
	enum rcs_err err;

	settings_need(s->db, "--db");
	if (strcmp(what, "revoke") == 0) {
		settings_need(s->ident, "--ident");
		st = settings_open_db(s->db);
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
	settings_need(s->client_root, "--client-root");
	settings_need(s->user, "--user");
	settings_need(s->role, "--role");
	if (!role_parse(s->role, &role)) {
		fprintf(stderr, "rcs-coordinator: --role must be viewer, operator or admin\n");
		return 2;
	}
	if (!vars_token_valid(s->user, 100, "-.@")) {
		fprintf(stderr, "rcs-coordinator: --user must be 1-100 letters, digits or _-.@\n");
		return 2;
	}
	st = settings_open_db(s->db);
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

int main(int argc, char **argv)
{
	struct settings s;
	const char *cmd;
	int rc;

	memset(&s, 0, sizeof(s));
	s.max_body = 1024 * 1024;
	s.artifact_max_size = 4LL << 30;
	s.artifact_quota = 64LL << 30;
	/* one HTTP thread per online core (at most 64) */
	s.threads = sysconf(_SC_NPROCESSORS_ONLN);
	if (s.threads < 1)
		s.threads = 1;
	if (s.threads > 64)
		s.threads = 64;
	s.mqtt_max_payload = 1024 * 1024;
	s.resend_after = 60;
	s.resend_unacked_after = -1; /* serve.c: by the number of brokers */
	s.lease = STORE_LEASE_DEFAULT;
	s.events_qos = 1;
	s.events_backlog = 8192;
	s.mqtt_window = 1000;
	s.artifact_mqtt_rate = 1024 * 1024;
	s.smtp_max_per_hour = 600;
	s.smtp_retry_base = 30;
	s.auth_fail_limit = 120;
	s.webhook_retry_base = 10;
	s.webhook_give_up = 86400;
	s.webhook_timeout = 10;
	s.webhook_max_inflight = WEBHOOKS_MAX_INFLIGHT;
	s.webhook_per_hook = WEBHOOKS_PER_HOOK;
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
		rc = serve_run(&s);
		cfg_free(serve_opts, &s);
		cfg_secret_free(&s.signing_key_passphrase);
		cfg_secret_free(&s.mqtt_key_passphrase);
	} else if (strcmp(cmd, "init") == 0) {
		parse_opts(admin_opts, &s, argc, argv, 2);
		rc = cmd_init(&s);
		cfg_free(admin_opts, &s);
	} else if (strcmp(cmd, "artifact-secret") == 0 && argc >= 3) {
		parse_opts(admin_opts, &s, argc, argv, 3);
		rc = cmd_artifact_secret(&s, argv[2]);
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
