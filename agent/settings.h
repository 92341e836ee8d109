/*
 * settings.h - rcs-agent's configuration: the options (flags and the
 * --config file, docs/agent.md "Configuration reference") and the part of
 * them SIGHUP reloads (docs/agent.md "Running it").
 *
 * Two kinds:
 *   struct settings         read once at start, then never written: the
 *                           broker, the idents, limits, secrets. Everyone
 *                           reads it without a lock.
 *   struct settings_policy  what SIGHUP reloads: trusted keys, allowlists,
 *                           tags, require_signature. A read-only snapshot,
 *                           reference-counted: settings_policy_get() hands
 *                           out the one in force, settings_reload() swaps a
 *                           new one in whole (under the lock of a struct
 *                           settings_live), and a holder keeps a consistent
 *                           view until settings_policy_put(), however many
 *                           reloads happen meanwhile.
 *
 * Thread-safe: any thread may get and put snapshots while the main thread
 * reloads. See docs/architecture.md for where this sits among the agent's
 * modules.
 */
#ifndef RCS_AGENT_SETTINGS_H
#define RCS_AGENT_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <json-c/json.h>

#include "cfg.h"
#include "err.h"
#include "manifest.h"
#include "sandbox.h"

struct settings {
	struct cfg_strlist mqtt; /* brokers, in the order they are tried (docs/agent.md) */
	char *client_root;
	char *entity_ident;
	char *state_dir;
	struct cfg_strlist trusted_key;
	struct cfg_strlist artifact_trusted_key;
	struct cfg_strlist tag;
	struct cfg_strlist allow_command;
	struct cfg_strlist file_dir;
	bool require_signature;
	char *mqtt_username;
	char *mqtt_password;
	char *mqtt_password_file;
	char *mqtt_cafile;
	char *mqtt_certfile;
	char *mqtt_keyfile;
	char *mqtt_key_passphrase_file;
	long long max_queue;
	long long max_payload;
	long long mem_limit;
	long long exec_timeout;
	long long exec_max_output;
	char *reboot_command;
	/* artifacts (docs/agent.md "Artifacts") */
	char *artifact_url;       /* http(s)://host[:port], NULL: none */
	char *artifact_cafile;    /* CA certificates for https:// (NULL: the system's) */
	char *artifact_dir;       /* default <state_dir>/artifacts */
	char *artifact_transport; /* "http", "mqtt" or "auto" (default) */
	long long artifact_reserve;
	long long artifact_cache_max;
	long long artifact_max_rate;
	char *device_type;
	char *rollback_command;  /* NULL: none (docs/lua-api.md "rcs.rollback") */
	char *inventory_command; /* NULL: none (docs/agent.md "Inventory") */
	char *boot_id_file; /* default /proc/sys/kernel/random/boot_id (docs/agent.md "Phases") */
	bool allow_no_seccomp;
	bool check;
	bool debug;
	/* not options: settled from the above, files and the environment at start */
	char *mqtt_key_passphrase;
	enum cfg_secret_src mqtt_password_src, mqtt_key_passphrase_src;
};

/* What SIGHUP reloads. Read-only for everyone but settings.c. */
struct settings_policy {
	struct sig_key **trusted;
	size_t ntrusted;
	struct sig_key **artifact_trusted; /* artifact_trusted_key */
	size_t nartifact_trusted;
	json_object *tags; /* array of strings */
	struct cfg_strlist allow_command;
	struct cfg_strlist file_dir;
	bool require_signature;
};

/* The policy in force: swapped whole by settings_reload. */
struct settings_live;

/* The usage text: the command line, then every option. */
void settings_usage(FILE *fp);

/*
 * Reads the --config file, then the flags (flags win), into s (defaults
 * first); checks the required options. RCS_ERR_INVAL with the reason in err.
 * Free s with settings_free, even after an error.
 */
enum rcs_err settings_load(struct settings *s, int argc, char **argv, char *err, size_t errlen);

/*
 * Settles the broker password and key passphrase from their options, files
 * or the environment, first given wins (docs/agent.md "Secrets"); the
 * variables are unset either way. At start only: SIGHUP reloads neither.
 */
enum rcs_err settings_secrets(struct settings *s, char *err, size_t errlen);

/* The secrets that came from the environment, back into it for the re-executed agent. */
void settings_secrets_to_env(const struct settings *s);

/* The brokers of --mqtt as one line for the logs ("tcp://a:1883, tcp://b:1883"). */
void settings_brokers(const struct settings *s, char *out, size_t len);

/* Artifacts come through the broker: artifact_transport mqtt, or auto without artifact_url
 * (docs/agent.md "Artifacts over MQTT"). */
bool settings_artifacts_over_mqtt(const struct settings *s);

/* Releases what settings_load and settings_secrets allocated (secrets wiped). */
void settings_free(struct settings *s);

/* The jail's configuration for a job under policy p (s: the limits). */
void settings_sandbox_config(const struct settings *s, const struct settings_policy *p,
			     struct sandbox_config *cfg);

/*
 * Loads the policy of s (keys read, tags, allowlists and the jail's
 * configuration checked) as the one in force. NULL with the reason in err.
 */
struct settings_live *settings_live_new(const struct settings *s, char *err, size_t errlen);
void settings_live_free(struct settings_live *l);

/* The policy in force, a reference taken; give it back with settings_policy_put. */
struct settings_policy *settings_policy_get(struct settings_live *l);
void settings_policy_put(struct settings_policy *p);

/*
 * SIGHUP: reads the configuration again (argc, argv as at start) and, when it
 * is good, puts its policy in force and forgets which signatures verified
 * (they are checked again with the new keys); logs either way. Snapshots
 * taken before keep the old policy. RCS_OK when the policy was swapped.
 */
enum rcs_err settings_reload(struct settings_live *l, int argc, char **argv);

#endif
