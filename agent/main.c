/*
 * rcs-agent: the device side of the Remote Command Service (docs/agent.md).
 *
 *   start the sandbox launcher (one thread, nothing read yet) -> parse flags
 *   and config -> load keys and allowlists -> open the journal -> connect ->
 *   report jobs a crash interrupted -> run jobs -> SIGTERM: publish offline,
 *   stop cleanly (SIGHUP reloads keys, allowlists and tags; the launcher's
 *   death: stop cleanly and re-execute, see agent_reexec).
 *
 * main.c owns the daemon's life and wires the modules together
 * (docs/architecture.md): settings.c (options, the policy SIGHUP reloads),
 * journal.c, link.c (MQTT) and runner.c (jobs). link.c and runner.c do not
 * know each other: the link hands what it receives to the runner, and the
 * runner its reports to the link, through the callbacks below.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fetch.h"
#include "inventory.h"
#include "journal.h"
#include "link.h"
#include "log.h"
#include "mqttc.h"
#include "runner.h"
#include "sandbox.h"
#include "sandbox_launcher.h"
#include "service.h"
#include "settings.h"

/* The daemon's parts; main.c's alone. */
struct agent {
	struct settings set;
	struct settings_live *live;
	struct journal *journal;
	struct link *link;
	struct runner *runner;
	struct inventory *inventory; /* NULL: no inventory_command */
};

/* ---- the runner's reports, to the link ---- */

static void agent_report(void *ctx, const char *job, enum job_status status, const char *response)
{
	struct agent *a = ctx;

	link_report(a->link, job, status, response);
	if (status_is_terminal(status))
		inventory_kick(a->inventory); /* after every job (docs/agent.md "Inventory") */
}

static void agent_fail(void *ctx, const char *job, const char *error, const char *response)
{
	struct agent *a = ctx;

	link_report_cause(a->link, job, JS_EDGE_ERROR, response, error);
	inventory_kick(a->inventory);
}

static void agent_progress(void *ctx, const char *job, const char *response, int64_t done,
			   int64_t total)
{
	struct agent *a = ctx;

	link_report_progress(a->link, job, response, done, total);
}

static void agent_rebooting(void *ctx, const char *job, long long within)
{
	struct agent *a = ctx;

	link_report_rebooting(a->link, job, within);
}

static void agent_resend(void *ctx, const char *job)
{
	struct agent *a = ctx;

	link_resend(a->link, job);
}

static void agent_refuse_unjournaled(void *ctx, const char *job, const char *reason)
{
	struct agent *a = ctx;

	link_refuse_unjournaled(a->link, job, reason);
}

/* ---- what the link receives, to the runner ---- */

static void agent_envelope(void *ctx, const char *job, const char *payload, size_t len)
{
	struct agent *a = ctx;

	runner_envelope(a->runner, job, payload, len);
}

static void agent_oversized(void *ctx, const char *job)
{
	struct agent *a = ctx;

	runner_oversized(a->runner, job);
}

static void agent_cancel(void *ctx, const char *job)
{
	struct agent *a = ctx;

	runner_cancel(a->runner, job);
}

static void agent_artifact_get(void *ctx, const char *sha256, const char *payload)
{
	struct agent *a = ctx;

	link_artifact_get(a->link, sha256, payload);
}

static void agent_artifact_subscribe(void *ctx, bool on)
{
	struct agent *a = ctx;

	link_artifacts_subscribe(a->link, on);
}

static void agent_artifact_data(void *ctx, const char *sha256, int64_t offset, const void *data,
				size_t len)
{
	struct agent *a = ctx;

	runner_artifact_data(a->runner, sha256, offset, data, len);
}

static void agent_artifact_error(void *ctx, const char *sha256, const char *payload, size_t len)
{
	struct agent *a = ctx;

	runner_artifact_error(a->runner, sha256, payload, len);
}

static void agent_report_acked(void *ctx)
{
	struct agent *a = ctx;

	runner_report_acked(a->runner);
}

/* at every connect: the attributes again (docs/agent.md "Inventory") */
static void agent_connected(void *ctx)
{
	struct agent *a = ctx;

	inventory_kick(a->inventory);
}

static void agent_attributes(void *ctx, json_object *attrs)
{
	struct agent *a = ctx;

	link_set_attributes(a->link, attrs);
}

/*
 * The link and the runner, each with the other's functions as callbacks;
 * neither runs anything yet. False when out of memory.
 */
static bool agent_wire(struct agent *a)
{
	const struct runner_reports rep = {a,
					   agent_report,
					   agent_resend,
					   agent_refuse_unjournaled,
					   agent_fail,
					   agent_progress,
					   agent_artifact_get,
					   agent_artifact_subscribe,
					   agent_rebooting};
	const struct link_handlers h = {a,
					agent_envelope,
					agent_oversized,
					agent_cancel,
					agent_report_acked,
					agent_artifact_data,
					agent_artifact_error,
					agent_connected};

	a->runner = runner_new(&a->set, a->live, a->journal, &rep);
	a->link = link_new(&a->set, a->live, a->journal, &h);
	if (a->link != NULL && a->set.inventory_command != NULL)
		a->inventory = inventory_start(a->set.inventory_command, agent_attributes, a);
	return a->runner != NULL && a->link != NULL &&
	       (a->set.inventory_command == NULL || a->inventory != NULL);
}

/*
 * The sandbox launcher died (killed, crashed, or stopped answering and was
 * killed). A new one must be forked by a process with a single thread, which
 * this one no longer is: the agent, stopped cleanly, re-executes itself (same
 * pid, same arguments) and starts over as at boot; the journal keeps the
 * queued jobs and the outbox. At most one restart a second. Returns (exit
 * status 1, for the service manager to restart it) only when exec fails, as
 * under qemu-user without binfmt_misc.
 */
static int agent_reexec(char **argv)
{
	sleep(1);
	sandbox_close_from(3); /* nothing but stdin, stdout and stderr reaches the new image */
	log_info("restarting: %s", argv[0]);
	execv("/proc/self/exe", argv);
	log_warn("cannot re-execute /proc/self/exe; exiting for the service manager to"
		 " restart the agent");
	return 1;
}

/* The service manager's status line for the broker connection (docs/mqtt.md, "Connection
 * sequence"). */
static const char *agent_link_status(struct agent *a)
{
	if (link_online(a->link))
		return "connected";
	if (link_connected(a->link))
		return "connected, not online: the broker has not granted the job subscriptions";
	return "MQTT broker not connected";
}

/* Serves until a signal stops the agent: tells systemd it is ready, reloads its settings on
 * SIGHUP, watches the sandbox launcher on SIGCHLD. True when the launcher died and the agent
 * must start again (*ready: systemd was told it is). */
static bool agent_serve(struct agent *a, int argc, char **argv, sigset_t *sigs, const char *brokers,
			bool *ready)
{
	char err[512] = "";
	bool relaunch = false;
	time_t ready_by;
	int sig;

	/* ready for systemd once connected to the broker, or SERVICE_READY_WAIT seconds later
	   all the same: jobs queued in the journal run meanwhile (docs/deploy.md, "The units") */
	ready_by = time(NULL) + SERVICE_READY_WAIT;
	for (;;) {
		if (!*ready && link_connected(a->link)) {
			service_ready("connected");
			*ready = true;
		} else if (!*ready && time(NULL) >= ready_by) {
			log_warnx("not connected to the MQTT broker %s yet: ready all the same,"
				  " retrying in the background",
				  brokers);
			service_ready("MQTT broker not connected yet");
			*ready = true;
		}
		if (service_sigwait(sigs, *ready ? -1 : 100, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			service_reloading();
			if (settings_reload(a->live, argc, argv) == RCS_OK)
				link_publish_state(a->link, true);
			service_ready(agent_link_status(a));
			continue;
		}
		if (sig == SIGCHLD) {
			if (sandbox_launcher_check(err, sizeof(err)) == RCS_OK)
				continue; /* an rcs.exec or reboot command */
			log_warnx("the sandbox launcher %s: restarting the agent", err);
			relaunch = true;
			break;
		}
		log_info("signal %d: stopping", sig);
		break;
	}
	return relaunch;
}

int main(int argc, char **argv)
{
	struct agent a;
	struct settings *s = &a.set;
	bool relaunch = false;
	sigset_t sigs;
	char err[512] = "", brokers[1024] = "";
	int rc = 1;
	bool ready = false;

	memset(&a, 0, sizeof(a));
	log_init("rcs-agent", LOG_LVL_INFO);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			settings_usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("rcs-agent %s\n", RCS_VERSION);
			return 0;
		}
	}
	/* the jail's launcher: forked while this process has one thread and has
	   read no configuration, credential, key or job (sandbox.h); children are
	   waited for, whatever SIGCHLD disposition the agent was started with */
	signal(SIGCHLD, SIG_DFL);
	/* blocked before the launcher exists, so that its death is never missed (the
	   main loop takes SIGCHLD with sigwait; the launcher resets its own mask) */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (sandbox_launcher_start(argc, argv) != RCS_OK) {
		fprintf(stderr, "rcs-agent: cannot start the sandbox launcher\n");
		return 1;
	}
	if (settings_load(s, argc, argv, err, sizeof(err)) != RCS_OK ||
	    settings_secrets(s, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		settings_free(s);
		sandbox_launcher_stop();
		return 2;
	}
	{
		static const char *const visible[] = {"mqtt_password", NULL};
		cfg_warn_visible_secrets(argc, argv, visible);
	}
	if (s->debug)
		log_set_level(LOG_LVL_DEBUG);
	a.live = settings_live_new(s, err, sizeof(err));
	if (a.live == NULL) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		rc = 2;
		goto out;
	}
	/* the brokers' URLs were checked by settings_load (mqttc_urls_check) */
	settings_brokers(s, brokers, sizeof(brokers));
	if (s->check) {
		printf("configuration OK\n");
		rc = 0;
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	if (fetch_global_init() != RCS_OK) { /* before the link's and the runner's threads */
		log_warnx("cannot set up the HTTP client of artifacts");
		goto out;
	}

	if (mkdir(s->state_dir, 0700) != 0 && errno != EEXIST) {
		log_warn("--state-dir %s", s->state_dir);
		goto out;
	}
	if (journal_open(s->state_dir, &a.journal) != RCS_OK) {
		log_warnx("cannot open the journal in %s", s->state_dir);
		goto out;
	}
	if (!agent_wire(&a)) {
		log_warnx("%s", rcs_strerror(RCS_ERR_NOMEM));
		goto out;
	}
	if (link_start(a.link) != RCS_OK) {
		log_warnx("cannot use MQTT broker %s", brokers);
		goto out;
	}
	if (runner_start(a.runner) != RCS_OK) {
		log_warn("runner");
		goto out;
	}
	log_info("rcs-agent %s: device %s of %s, broker%s %s", RCS_VERSION, s->entity_ident,
		 s->client_root, s->mqtt.n > 1 ? "s" : "", brokers);
	relaunch = agent_serve(&a, argc, argv, &sigs, brokers, &ready);
	rc = 0;
out:
	if (ready && !relaunch)
		service_stopping();
	runner_stop(a.runner, relaunch);
	sandbox_launcher_stop(); /* no job runs any more */
	inventory_stop(a.inventory);
	link_stop(a.link);
	journal_close(a.journal);
	runner_free(a.runner);
	link_free(a.link);
	settings_live_free(a.live);
	if (relaunch)
		settings_secrets_to_env(s);
	settings_free(s);
	if (relaunch)
		rc = agent_reexec(argv);
	return rc;
}
