/*
 * rcs-agent: the device side of the Remote Command Service.
 *
 *   start the sandbox launcher (one thread, nothing read yet) -> parse flags
 *   and config -> load keys and allowlists -> open the journal -> report jobs
 *   a crash interrupted -> connect -> run jobs -> SIGTERM: publish offline,
 *   stop cleanly (SIGHUP reloads keys, allowlists and tags; the launcher's
 *   death: stop cleanly and re-execute, see agent_reexec).
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "uuid.h"
#include "vars.h"
#include "verify.h"

#define OPT(name, type, field, arg, help)                                                          \
	{                                                                                          \
		name, type, offsetof(struct agent_settings, field), 0, 0, arg, help                \
	}
#define OPT_INT(name, field, min, max, arg, help)                                                  \
	{                                                                                          \
		name, CFG_INT, offsetof(struct agent_settings, field), min, max, arg, help         \
	}

static const struct cfg_opt agent_opts[] = {
    OPT("mqtt", CFG_STRING, mqtt, "URL", "broker: tcp://host:port or ssl://host:port"),
    OPT("client_root", CFG_STRING, client_root, "UUID", "tenant of this device"),
    OPT("entity_ident", CFG_STRING, entity_ident, "UUID",
	"this device's ident (its MQTT client id)"),
    OPT("state_dir", CFG_STRING, state_dir, "DIR", "journal and device settings"),
    OPT("trusted_key", CFG_STRLIST, trusted_key, "PEM",
	"public key whose task signatures are accepted (repeatable)"),
    OPT("require_signature", CFG_BOOL, require_signature, "BOOL",
	"refuse unsigned tasks (default true)"),
    OPT("tag", CFG_STRLIST, tag, "TAG", "tag this device reports (repeatable)"),
    OPT("allow_command", CFG_STRLIST, allow_command, "NAME=PATH",
	"command rcs.exec(NAME, ...) may run (repeatable)"),
    OPT("file_dir", CFG_STRLIST, file_dir, "DIR",
	"directory rcs.file.read/write may use (repeatable)"),
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
    OPT_INT("max_queue", max_queue, 1, 10000, "N", "jobs waiting at most (default 32)"),
    OPT_INT("max_payload", max_payload, 4096, 16LL * 1024 * 1024, "BYTES",
	    "largest envelope accepted (default 1048576)"),
    OPT_INT("mem_limit", mem_limit, 1024 * 1024, 4LL * 1024 * 1024 * 1024, "BYTES",
	    "memory a script may use (default 64 MiB)"),
    OPT_INT("exec_timeout", exec_timeout, 1, 86400, "SECONDS",
	    "time limit of an rcs.exec command (default 30)"),
    OPT_INT("exec_max_output", exec_max_output, 1024, 16LL * 1024 * 1024, "BYTES",
	    "output kept from an rcs.exec command (default 65536)"),
    OPT("reboot_command", CFG_STRING, reboot_command, "PATH",
	"run after rcs.reboot() (default /sbin/reboot)"),
    OPT("allow_no_seccomp", CFG_BOOL, allow_no_seccomp, "BOOL",
	"run scripts even where seccomp is unavailable (emulators only; default false)"),
    OPT("debug", CFG_BOOL, debug, NULL, "verbose logs"),
    OPT("check", CFG_BOOL, check, NULL,
	"check the configuration and keys, print"
	" \"configuration OK\", exit"),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static void usage(FILE *fp)
{
	fprintf(fp, "usage: rcs-agent --mqtt URL --client-root UUID --entity-ident UUID"
		    " --state-dir DIR [options]\n"
		    "       rcs-agent --help | --version\n\n"
		    "Every option is also a \"key value\" line of --config FILE (flags win).\n"
		    "SIGTERM stops cleanly; SIGHUP reloads trusted keys, allowlists and tags.\n\n");
	cfg_usage(fp, agent_opts);
	fprintf(fp, "  --config FILE                config file (mosquitto.conf style)\n");
}

static void settings_defaults(struct agent_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->require_signature = true;
	s->max_queue = 32;
	s->max_payload = 1024 * 1024;
	s->mem_limit = 64LL * 1024 * 1024;
	s->exec_timeout = 30;
	s->exec_max_output = 64 * 1024;
}

/* Reads config file then flags; errors into err. */
static enum rcs_err settings_load(struct agent_settings *s, int argc, char **argv, char *err,
				  size_t errlen)
{
	const char *config = cfg_find_arg(argc, argv, "config");
	int next = 1;
	enum rcs_err e;

	settings_defaults(s);
	if (config) {
		e = cfg_parse_file(agent_opts, s, config, err, errlen);
		if (e != RCS_OK)
			return e;
	}
	e = cfg_parse_args(agent_opts, s, argc, argv, 1, &next, err, errlen);
	if (e != RCS_OK)
		return e;
	if (next < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[next]);
		return RCS_ERR_INVAL;
	}
	if (s->mqtt == NULL || s->state_dir == NULL || s->client_root == NULL ||
	    s->entity_ident == NULL) {
		snprintf(err, errlen,
			 "--mqtt, --client-root, --entity-ident and --state-dir are"
			 " required");
		return RCS_ERR_INVAL;
	}
	if (!uuid_valid(s->client_root) || !uuid_valid(s->entity_ident)) {
		snprintf(err, errlen, "--client-root and --entity-ident must be UUIDs");
		return RCS_ERR_INVAL;
	}
	if (s->reboot_command == NULL)
		s->reboot_command = strdup("/sbin/reboot");
	return RCS_OK;
}

/*
 * Settles the broker password and key passphrase from their options, files
 * or the environment, first given wins (docs/agent.md); the variables are
 * unset either way. At start only: SIGHUP reloads neither.
 */
static enum rcs_err settings_secrets(struct agent_settings *s, char *err, size_t errlen)
{
	enum rcs_err e;

	e = cfg_secret_resolve("mqtt_password", &s->mqtt_password, s->mqtt_password_file,
			       "RCS_MQTT_PASSWORD", &s->mqtt_password_src, err, errlen);
	if (e == RCS_OK)
		e = cfg_secret_resolve("mqtt_key_passphrase", &s->mqtt_key_passphrase,
				       s->mqtt_key_passphrase_file, "RCS_MQTT_KEY_PASSPHRASE",
				       &s->mqtt_key_passphrase_src, err, errlen);
	return e;
}

/* The secrets that came from the environment, back into it for the re-executed agent. */
static void settings_secrets_to_env(const struct agent_settings *s)
{
	if (s->mqtt_password_src == CFG_SECRET_ENV && s->mqtt_password)
		setenv("RCS_MQTT_PASSWORD", s->mqtt_password, 1);
	if (s->mqtt_key_passphrase_src == CFG_SECRET_ENV && s->mqtt_key_passphrase)
		setenv("RCS_MQTT_KEY_PASSPHRASE", s->mqtt_key_passphrase, 1);
}

/* ---- policy: what SIGHUP reloads ---- */

static void policy_free(struct agent_policy *p)
{
	if (p == NULL)
		return;
	for (size_t i = 0; i < p->ntrusted; i++)
		sig_key_free(p->trusted[i]);
	free(p->trusted);
	if (p->tags)
		json_object_put(p->tags);
	cfg_strlist_free(&p->allow_command);
	cfg_strlist_free(&p->file_dir);
	free(p);
}

static enum rcs_err strlist_copy(const struct cfg_strlist *from, struct cfg_strlist *to)
{
	to->n = 0;
	to->items = calloc(from->n + 1, sizeof(char *));
	if (to->items == NULL)
		return RCS_ERR_NOMEM;
	for (size_t i = 0; i < from->n; i++) {
		to->items[i] = strdup(from->items[i]);
		if (to->items[i] == NULL)
			return RCS_ERR_NOMEM;
		to->n++;
	}
	return RCS_OK;
}

static struct agent_policy *policy_load(const struct agent_settings *s, char *err, size_t errlen)
{
	struct agent_policy *p = calloc(1, sizeof(*p));
	enum rcs_err e;

	if (p == NULL)
		return NULL;
	p->refs = 1;
	p->require_signature = s->require_signature;
	p->trusted = calloc(s->trusted_key.n + 1, sizeof(*p->trusted));
	p->tags = json_object_new_array();
	if (p->trusted == NULL)
		goto fail;
	for (size_t i = 0; i < s->trusted_key.n; i++) {
		e = sig_key_load_public(s->trusted_key.items[i], &p->trusted[p->ntrusted]);
		if (e != RCS_OK) {
			snprintf(err, errlen, "trusted_key %s: %s", s->trusted_key.items[i],
				 rcs_strerror(e));
			goto fail;
		}
		p->ntrusted++;
	}
	if (p->require_signature && p->ntrusted == 0) {
		snprintf(err, errlen,
			 "no trusted_key: every signed job would be refused"
			 " (or set require_signature false)");
		goto fail;
	}
	for (size_t i = 0; i < s->tag.n; i++) {
		if (!vars_token_valid(s->tag.items[i], 64, "-.:/")) {
			snprintf(err, errlen, "tag '%s': 1-64 letters, digits or _-.:/",
				 s->tag.items[i]);
			goto fail;
		}
		json_object_array_add(p->tags, json_object_new_string(s->tag.items[i]));
	}
	for (size_t i = 0; i < s->allow_command.n; i++) {
		const char *c = s->allow_command.items[i], *eq = strchr(c, '=');
		char name[65];
		if (eq == NULL || eq == c || (size_t)(eq - c) >= sizeof(name) || eq[1] != '/') {
			snprintf(err, errlen, "allow_command '%s': expected NAME=/absolute/path",
				 c);
			goto fail;
		}
		snprintf(name, sizeof(name), "%.*s", (int)(eq - c), c);
		if (!vars_token_valid(name, 64, "-.")) {
			snprintf(err, errlen, "allow_command '%s': bad name", c);
			goto fail;
		}
	}
	for (size_t i = 0; i < s->file_dir.n; i++) {
		struct stat sb;
		if (s->file_dir.items[i][0] != '/' || stat(s->file_dir.items[i], &sb) != 0 ||
		    !S_ISDIR(sb.st_mode)) {
			snprintf(err, errlen, "file_dir '%s': not an absolute path to a directory",
				 s->file_dir.items[i]);
			goto fail;
		}
	}
	if (strlist_copy(&s->allow_command, &p->allow_command) != RCS_OK ||
	    strlist_copy(&s->file_dir, &p->file_dir) != RCS_OK)
		goto fail;
	/* the jail checks what it will be given, so a bad line fails here and not per job */
	{
		struct sandbox_config cfg;
		sandbox_config_defaults(&cfg);
		cfg.mem_limit = (size_t)s->mem_limit;
		cfg.exec_timeout = s->exec_timeout;
		cfg.exec_max_output = (size_t)s->exec_max_output;
		cfg.allow_command = &p->allow_command;
		cfg.file_dir = &p->file_dir;
		cfg.allow_no_seccomp = s->allow_no_seccomp;
		if (sandbox_config_check(&cfg, err, errlen) != RCS_OK)
			goto fail;
	}
	return p;
fail:
	policy_free(p);
	return NULL;
}

static struct agent *agent_global;

struct agent_policy *agent_policy_get(struct agent *a)
{
	struct agent_policy *p;

	pthread_mutex_lock(&a->lock);
	p = a->policy;
	p->refs++;
	pthread_mutex_unlock(&a->lock);
	return p;
}

void agent_policy_put(struct agent_policy *p)
{
	bool last;

	pthread_mutex_lock(&agent_global->lock);
	last = --p->refs == 0;
	pthread_mutex_unlock(&agent_global->lock);
	if (last)
		policy_free(p);
}

static void agent_reload(struct agent *a, int argc, char **argv)
{
	struct agent_settings fresh;
	struct agent_policy *p, *old;
	char err[512];

	if (settings_load(&fresh, argc, argv, err, sizeof(err)) != RCS_OK ||
	    (p = policy_load(&fresh, err, sizeof(err))) == NULL) {
		log_warnx("SIGHUP: configuration not reloaded: %s", err);
		cfg_free(agent_opts, &fresh);
		return;
	}
	cfg_free(agent_opts, &fresh);
	pthread_mutex_lock(&a->lock);
	old = a->policy;
	a->policy = p;
	pthread_mutex_unlock(&a->lock);
	agent_policy_put(old);
	verify_forget_signatures();
	log_info("SIGHUP: trusted keys (%zu), allowlists and tags reloaded", p->ntrusted);
	link_publish_state(a, true);
}

static void agent_interrupted(void *ctx, const char *job)
{
	link_report(ctx, job, JS_EDGE_ERROR, "interrupted: the device restarted during the job");
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

int main(int argc, char **argv)
{
	struct agent_settings s;
	struct agent a;
	pthread_t runner;
	bool runner_started = false, relaunch = false;
	sigset_t sigs;
	char err[512];
	int sig, rc = 1;

	memset(&a, 0, sizeof(a));
	a.cancel_fd[0] = a.cancel_fd[1] = -1;
	log_init("rcs-agent", LOG_LVL_INFO);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
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
	if (settings_load(&s, argc, argv, err, sizeof(err)) != RCS_OK ||
	    settings_secrets(&s, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		cfg_free(agent_opts, &s);
		cfg_secret_free(&s.mqtt_key_passphrase);
		sandbox_launcher_stop();
		return 2;
	}
	{
		static const char *const visible[] = {"mqtt_password", NULL};
		cfg_warn_visible_secrets(argc, argv, visible);
	}
	if (s.debug)
		log_set_level(LOG_LVL_DEBUG);
	a.set = &s;
	pthread_mutex_init(&a.lock, NULL);
	pthread_cond_init(&a.cond, NULL);
	agent_global = &a;
	a.policy = policy_load(&s, err, sizeof(err));
	if (a.policy == NULL) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		rc = 2;
		goto out;
	}
	if (mqttc_url_check(s.mqtt, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		rc = 2;
		goto out;
	}
	if (s.check) {
		printf("configuration OK\n");
		rc = 0;
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);

	if (mkdir(s.state_dir, 0700) != 0 && errno != EEXIST) {
		log_warn("--state-dir %s", s.state_dir);
		goto out;
	}
	if (journal_open(s.state_dir, &a.journal) != RCS_OK) {
		log_warnx("cannot open the journal in %s", s.state_dir);
		goto out;
	}
	if (link_start(&a) != RCS_OK) {
		log_warnx("cannot use MQTT broker %s", s.mqtt);
		goto out;
	}
	/* jobs a crash or reboot cut short end as edge_error, never run again */
	journal_each_running(a.journal, agent_interrupted, &a);
	if (runner_start(&a, &runner) != RCS_OK) {
		log_warn("runner");
		goto out;
	}
	runner_started = true;
	log_info("rcs-agent %s: device %s of %s, broker %s", RCS_VERSION, s.entity_ident,
		 s.client_root, s.mqtt);
	for (;;) {
		if (sigwait(&sigs, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			agent_reload(&a, argc, argv);
			continue;
		}
		if (sig == SIGCHLD) {
			if (sandbox_launcher_check(err, sizeof(err)) == RCS_OK)
				continue; /* an rcs.exec or reboot command */
			log_warnx("the sandbox launcher %s: restarting the agent", err);
			pthread_mutex_lock(&a.lock);
			a.relaunch = true;
			pthread_mutex_unlock(&a.lock);
			relaunch = true;
			break;
		}
		log_info("signal %d: stopping", sig);
		break;
	}
	rc = 0;
out:
	if (runner_started) {
		pthread_mutex_lock(&a.lock);
		a.stop = true;
		pthread_cond_broadcast(&a.cond);
		if (a.running[0]) {
			char one = 1;
			if (write(a.cancel_fd[1], &one, 1) != 1)
				log_warn("cancel pipe");
		}
		pthread_mutex_unlock(&a.lock);
		pthread_join(runner, NULL);
	}
	sandbox_launcher_stop(); /* no job runs any more */
	link_stop(&a);
	journal_close(a.journal);
	if (a.cancel_fd[0] >= 0) {
		close(a.cancel_fd[0]);
		close(a.cancel_fd[1]);
	}
	if (a.policy)
		agent_policy_put(a.policy);
	if (relaunch)
		settings_secrets_to_env(&s);
	cfg_free(agent_opts, &s);
	cfg_secret_free(&s.mqtt_key_passphrase);
	if (relaunch)
		rc = agent_reexec(argv);
	return rc;
}
