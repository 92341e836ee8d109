/*
 * settings.h - rcs-coordinator's settings, from its command line and configuration file
 * (docs/coordinator.md), and what main.c's subcommands and serve.c share of them.
 */
#ifndef RCS_COORD_SETTINGS_H
#define RCS_COORD_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "cfg.h"

struct store;

struct settings {
	char *db;
	char *listen;
	char *device_listen; /* a second listener: the device download route only, or NULL */
	char *scripts_dir;
	char *signing_key;
	char *signing_key_passphrase_file;
	struct cfg_strlist trusted_key;
	bool sign_artifacts; /* the signing key signs tasks with artifacts too */
	long long max_body;
	char *artifact_dir; /* NULL: artifacts/ beside the database */
	long long artifact_max_size, artifact_quota;
	long long threads;
	struct cfg_strlist mqtt;
	char *mqtt_shared_subscriptions;
	long long events_qos;
	long long events_backlog;
	long long mqtt_window;
	long long artifact_mqtt_rate; /* bytes/s per device of chunks over MQTT (0: no limit) */
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
	long long resend_unacked_after;
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
	long long webhook_per_hook;
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

/* The --db value as logs may show it: a password in a database URL
 * (postgresql://user:secret@host/db) replaced by "***" (docs/coordinator.md). */
void settings_db_shown(const char *db, char *out, size_t len);
/* Settles each secret from its option, its file or the environment, first given wins
 * (docs/coordinator.md); the variables are unset either way. False, with the reason on
 * stderr, for a secret file that can't be used. */
bool settings_resolve_secrets(struct settings *s);
/* Exits 2, naming flag, when value is not given. */
void settings_need(const char *value, const char *flag);
/* Opens the database or exits 1, saying why. */
struct store *settings_open_db(const char *path);

/* rcs-coordinator serve (serve.c): the daemon's life; its exit code. */
int serve_run(struct settings *s);

#endif
