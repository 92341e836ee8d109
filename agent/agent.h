/*
 * agent.h - the parts of rcs-agent and what they share.
 *
 *   main.c    flags and config, signals, the daemon's life
 *   link.c    the MQTT side: state and Last Will, envelopes and cancels in,
 *             reports out from the journal's outbox
 *   runner.c  the job worker: one job at a time, in arrival order, each in
 *             the sandbox, reporting as it goes
 *   verify.c  envelope checks (tenant, device, expiry, signature, version, variables)
 *   journal.c the SQLite journal in --state-dir
 *   sandbox*.c the jail: the launcher process that forks a jailed Lua child per job
 */
#ifndef RCS_AGENT_H
#define RCS_AGENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cfg.h"
#include "journal.h"
#include "manifest.h"
#include "mqttc.h"
#include "proto.h"
#include "sandbox.h"

struct agent_settings {
	char *mqtt;
	char *client_root;
	char *entity_ident;
	char *state_dir;
	struct cfg_strlist trusted_key;
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
	bool allow_no_seccomp;
	bool check;
	bool debug;
	/* not options: settled from the above, files and the environment at start */
	char *mqtt_key_passphrase;
	enum cfg_secret_src mqtt_password_src, mqtt_key_passphrase_src;
};

/* What SIGHUP reloads: swapped as a whole, reference-counted. */
struct agent_policy {
	int refs;
	struct sig_key **trusted;
	size_t ntrusted;
	json_object *tags; /* array of strings */
	struct cfg_strlist allow_command;
	struct cfg_strlist file_dir;
	bool require_signature;
};

struct agent {
	struct agent_settings *set;
	struct journal *journal;
	struct mqttc *mq;
	char state_topic[PROTO_MAX_TOPIC];

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct agent_policy *policy;
	bool stop;
	bool relaunch;              /* stopping because the sandbox launcher died */
	bool work;                  /* a job was queued */
	char running[UUID_STR_LEN]; /* job in the sandbox, "" when idle */
	int cancel_fd[2];           /* pipe: written to cancel the running job */
	bool reboot_pending;
	char reboot_job[UUID_STR_LEN];
};

/* ---- policy (main.c) ---- */
struct agent_policy *agent_policy_get(struct agent *a); /* takes a reference */
void agent_policy_put(struct agent_policy *p);

/* ---- link.c ---- */
enum rcs_err link_start(struct agent *a);
/* Publishes state offline (clean stop), disconnects. */
void link_stop(struct agent *a);
/* Journals a report and publishes it (or leaves it in the outbox until connected). */
void link_report(struct agent *a, const char *job, enum job_status status, const char *response);
/* Republishes the retained online state (tags changed). */
void link_publish_state(struct agent *a, bool online);
/* True when no report waits for the broker's acknowledgement. */
bool link_outbox_empty(struct agent *a);

/* ---- runner.c ---- */
enum rcs_err runner_start(struct agent *a, pthread_t *thread);
/* Cancels job: drops it when queued, kills it when running. */
void runner_cancel(struct agent *a, const char *job);

#endif
