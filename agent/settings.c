/*
 * settings.c - rcs-agent's options and the policy SIGHUP reloads. See
 * settings.h; the options are documented in docs/agent.md.
 *
 * The policy in force is a reference-counted snapshot: the holder (struct
 * settings_live) keeps one reference, every settings_policy_get() another.
 * The lock of the holder guards only the pointer to the snapshot; the count
 * is atomic, so a snapshot is given back without the holder, and freed by
 * whoever drops its last reference.
 */
#include "settings.h"

#include <pthread.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "mqttc.h"
#include "uuid.h"
#include "vars.h"
#include "verify.h"

#define OPT(name, type, field, arg, help)                                                          \
	{                                                                                          \
		name, type, offsetof(struct settings, field), 0, 0, arg, help                      \
	}
#define OPT_INT(name, field, min, max, arg, help)                                                  \
	{                                                                                          \
		name, CFG_INT, offsetof(struct settings, field), min, max, arg, help               \
	}

static const struct cfg_opt settings_opts[] = {
    OPT("mqtt", CFG_STRLIST, mqtt, "URL",
	"broker: tcp://host:port or ssl://host:port (repeatable: several brokers, failover)"),
    OPT("client_root", CFG_STRING, client_root, "UUID", "tenant of this device"),
    OPT("entity_ident", CFG_STRING, entity_ident, "UUID",
	"this device's ident (its MQTT client id)"),
    OPT("state_dir", CFG_STRING, state_dir, "DIR", "journal and device settings"),
    OPT("trusted_key", CFG_STRLIST, trusted_key, "PEM",
	"public key whose task signatures are accepted (repeatable)"),
    OPT("artifact_trusted_key", CFG_STRLIST, artifact_trusted_key, "PEM",
	"public key whose signatures of tasks with artifacts are accepted, instead of the"
	" trusted_keys (repeatable)"),
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
    OPT("artifact_url", CFG_STRING, artifact_url, "BASE",
	"where artifacts are downloaded: http(s)://host[:port] of the coordinator"),
    OPT("artifact_cafile", CFG_STRING, artifact_cafile, "PEM",
	"CA certificates for an https:// artifact_url (default: the system's)"),
    OPT("artifact_dir", CFG_STRING, artifact_dir, "DIR",
	"downloaded artifacts and their cache (default <state_dir>/artifacts)"),
    OPT_INT("artifact_reserve", artifact_reserve, 0, 1LL << 40, "BYTES",
	    "free space kept beside a download (default 16 MiB)"),
    OPT_INT("artifact_cache_max", artifact_cache_max, 0, 1LL << 50, "BYTES",
	    "bytes of artifacts kept for later jobs (default 256 MiB)"),
    OPT_INT("artifact_max_rate", artifact_max_rate, 0, 1LL << 40, "BYTES",
	    "download rate cap in bytes/s (default 0: none)"),
    OPT("artifact_transport", CFG_STRING, artifact_transport, "http|mqtt|auto",
	"how artifacts are downloaded (default auto: http when artifact_url is set)"),
    OPT("device_type", CFG_STRING, device_type, "TYPE",
	"this device's model, matched against a release's device_types"),
    OPT("rollback_command", CFG_STRING, rollback_command, "PATH",
	"run by rcs.rollback() (default: none, rcs.rollback raises an error)"),
    OPT("inventory_command", CFG_STRING, inventory_command, "PATH",
	"prints the device's attributes as key=value lines, run at every connect and after"
	" every job (default: none)"),
    OPT("boot_id_file", CFG_STRING, boot_id_file, "FILE",
	"where the boot id is read, to tell a reboot from a restart (default"
	" /proc/sys/kernel/random/boot_id)"),
    OPT("allow_no_seccomp", CFG_BOOL, allow_no_seccomp, "BOOL",
	"run scripts even where seccomp is unavailable (emulators only; default false)"),
    OPT("debug", CFG_BOOL, debug, NULL, "verbose logs"),
    OPT("check", CFG_BOOL, check, NULL,
	"check the configuration and keys, print"
	" \"configuration OK\", exit"),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

/* A policy and its reference count (the count is settings.c's alone). */
struct settings_snapshot {
	atomic_int refs;
	struct settings_policy p;
};

struct settings_live {
	pthread_mutex_t lock; /* guards current (the pointer, not what it points to) */
	struct settings_snapshot *current;
};

void settings_usage(FILE *fp)
{
	fprintf(fp, "usage: rcs-agent --mqtt URL --client-root UUID --entity-ident UUID"
		    " --state-dir DIR [options]\n"
		    "       rcs-agent --help | --version\n\n"
		    "Every option is also a \"key value\" line of --config FILE (flags win).\n"
		    "SIGTERM stops cleanly; SIGHUP reloads trusted keys, allowlists and tags.\n\n");
	cfg_usage(fp, settings_opts);
	fprintf(fp, "  --config FILE                config file (mosquitto.conf style)\n");
}

static void settings_defaults(struct settings *s)
{
	memset(s, 0, sizeof(*s));
	s->require_signature = true;
	s->max_queue = 32;
	s->max_payload = 1024 * 1024;
	s->mem_limit = 64LL * 1024 * 1024;
	s->exec_timeout = 30;
	s->exec_max_output = 64 * 1024;
	s->artifact_reserve = 16LL * 1024 * 1024;
	s->artifact_cache_max = 256LL * 1024 * 1024;
}

/* artifact_url: http:// or https://, a host and maybe a port, nothing after but one '/'. */
static bool settings_artifact_url_valid(const char *u)
{
	const char *host;
	size_t n;

	if (strncmp(u, "http://", 7) == 0)
		host = u + 7;
	else if (strncmp(u, "https://", 8) == 0)
		host = u + 8;
	else
		return false;
	n = strcspn(host, "/?#@ \t");
	if (n == 0 || n > 255)
		return false;
	return host[n] == '\0' || (host[n] == '/' && host[n + 1] == '\0');
}

/* host[:port][/] is this machine (localhost, 127.0.0.0/8, [::1]). */
static bool settings_loopback(const char *host)
{
	size_t n = strcspn(host, ":/");

	if (strncmp(host, "[::1]", 5) == 0)
		return true;
	return (n == 9 && strncmp(host, "localhost", 9) == 0) || strncmp(host, "127.", 4) == 0;
}

/* The default artifact_dir, <state_dir>/artifacts, from the working directory when
 * state_dir is relative: scripts are given absolute paths (docs/agent.md "Artifacts"). A
 * working directory that cannot be read leaves it relative, and refused. */
static enum rcs_err settings_default_artifact_dir(struct settings *s)
{
	enum rcs_err e = RCS_ERR_NOMEM;
	char cwd[PATH_MAX] = "";
	const char *sep = "";
	size_t n;

	if (s->state_dir[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL)
		sep = "/";
	n = strlen(cwd) + strlen(sep) + strlen(s->state_dir) + sizeof("/artifacts");
	s->artifact_dir = malloc(n);
	if (s->artifact_dir != NULL) {
		snprintf(s->artifact_dir, n, "%s%s%s/artifacts", cwd, sep, s->state_dir);
		e = RCS_OK;
	}
	return e;
}

/* The artifact options after loading (docs/agent.md "Artifacts"); the directory's place
 * against the file_dirs is checked with the policy (settings_artifact_dir_valid). */
static enum rcs_err settings_artifacts(struct settings *s, char *err, size_t errlen)
{
	enum rcs_err e = RCS_ERR_INVAL;

	if (s->artifact_url != NULL && !settings_artifact_url_valid(s->artifact_url)) {
		snprintf(err, errlen,
			 "artifact_url '%s': expected http://HOST[:PORT] or https://HOST[:PORT]",
			 s->artifact_url);
		goto out;
	}
	if (s->artifact_transport == NULL)
		s->artifact_transport = strdup("auto");
	if (s->artifact_transport == NULL)
		goto nomem;
	if (strcmp(s->artifact_transport, "http") != 0 &&
	    strcmp(s->artifact_transport, "auto") != 0 &&
	    strcmp(s->artifact_transport, "mqtt") != 0) {
		snprintf(err, errlen, "artifact_transport '%s': expected http, mqtt or auto",
			 s->artifact_transport);
		goto out;
	}
	if (s->artifact_url != NULL && strncmp(s->artifact_url, "http://", 7) == 0 &&
	    !settings_loopback(s->artifact_url + 7))
		log_warnx("artifact_url %s: plain http on a network: the artifacts are verified,"
			  " but their token can be read on the way (use https://)",
			  s->artifact_url);
	if (strcmp(s->artifact_transport, "http") == 0 && s->artifact_url == NULL) {
		snprintf(err, errlen, "artifact_transport http needs artifact_url");
		goto out;
	}
	if (s->device_type != NULL && !vars_token_valid(s->device_type, 64, "-.:/")) {
		snprintf(err, errlen, "device_type '%s': 1-64 letters, digits or _-.:/",
			 s->device_type);
		goto out;
	}
	if (s->artifact_dir == NULL && settings_default_artifact_dir(s) != RCS_OK)
		goto nomem;
	if (s->artifact_dir[0] != '/') {
		snprintf(err, errlen, "artifact_dir '%s': not an absolute path", s->artifact_dir);
		goto out;
	}
	e = RCS_OK;
	goto out;
nomem:
	snprintf(err, errlen, "%s", rcs_strerror(RCS_ERR_NOMEM));
	e = RCS_ERR_NOMEM;
out:
	return e;
}

/* path with its links resolved into out (PATH_MAX), as far as it exists: the rest (not
 * created yet) appended as written. False when nothing of it resolves. */
static bool settings_resolve(const char *path, char *out)
{
	char head[PATH_MAX], tail[PATH_MAX] = "";
	char *slash;

	if (snprintf(head, sizeof(head), "%s", path) >= (int)sizeof(head))
		return false;
	for (;;) {
		if (realpath(head, out) != NULL) {
			size_t n = strlen(out);
			if (tail[0] != '\0' &&
			    snprintf(out + n, PATH_MAX - n, "%s%s", strcmp(out, "/") ? "/" : "",
				     tail) >= (int)(PATH_MAX - n))
				return false;
			return true;
		}
		slash = strrchr(head, '/');
		if (slash == NULL || slash == head)
			return false;
		{
			char t[PATH_MAX];
			snprintf(t, sizeof(t), "%s%s%s", slash + 1, tail[0] ? "/" : "", tail);
			snprintf(tail, sizeof(tail), "%s", t);
		}
		*slash = '\0';
	}
}

/* a is b or lies inside it. */
static bool settings_path_within(const char *a, const char *b)
{
	size_t n = strlen(b);

	if (strcmp(b, "/") == 0)
		return true;
	return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* artifact_dir may not lie inside a file_dir (the same directory, or one a link leads
 * into), nor hold one: a script must not reach the downloads (docs/agent.md "Artifacts").
 * Neither of them may hold boot_id_file (docs/agent.md "Phases"). */
static bool settings_artifact_dir_valid(const struct settings *s, char *err, size_t errlen)
{
	char ad[PATH_MAX], fd[PATH_MAX];

	if (s->artifact_dir == NULL)
		return true;
	if (!settings_resolve(s->artifact_dir, ad)) {
		snprintf(err, errlen, "artifact_dir '%s': cannot be resolved", s->artifact_dir);
		return false;
	}
	/* a job's script could write the boot id there and fake a reboot (docs/agent.md "Phases")
	 */
	if (s->boot_id_file != NULL && settings_resolve(s->boot_id_file, fd) &&
	    settings_path_within(fd, ad)) {
		snprintf(err, errlen, "boot_id_file '%s' lies in artifact_dir '%s'",
			 s->boot_id_file, s->artifact_dir);
		return false;
	}
	for (size_t i = 0; i < s->file_dir.n; i++) {
		char bf[PATH_MAX];
		if (!settings_resolve(s->file_dir.items[i], fd))
			continue;
		if (s->boot_id_file != NULL && settings_resolve(s->boot_id_file, bf) &&
		    settings_path_within(bf, fd)) {
			snprintf(err, errlen, "boot_id_file '%s' lies in file_dir '%s'",
				 s->boot_id_file, s->file_dir.items[i]);
			return false;
		}
		if (settings_path_within(ad, fd) || settings_path_within(fd, ad)) {
			snprintf(err, errlen,
				 "artifact_dir '%s' and file_dir '%s' overlap: scripts would reach"
				 " the downloads",
				 s->artifact_dir, s->file_dir.items[i]);
			return false;
		}
	}
	return true;
}

enum rcs_err settings_load(struct settings *s, int argc, char **argv, char *err, size_t errlen)
{
	const char *config = cfg_find_arg(argc, argv, "config");
	int next = 1;
	size_t mqtt_from_file = 0;
	enum rcs_err e;

	settings_defaults(s);
	if (config) {
		e = cfg_parse_file(settings_opts, s, config, err, errlen);
		if (e != RCS_OK)
			goto out;
		mqtt_from_file = s->mqtt.n;
	}
	e = cfg_parse_args(settings_opts, s, argc, argv, 1, &next, err, errlen);
	if (e != RCS_OK)
		goto out;
	/* --mqtt flags replace the file's brokers, as other flags win over the file */
	cfg_strlist_replaced(&s->mqtt, mqtt_from_file);
	if (next < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[next]);
		e = RCS_ERR_INVAL;
		goto out;
	}
	if (s->mqtt.n == 0 || s->state_dir == NULL || s->client_root == NULL ||
	    s->entity_ident == NULL) {
		snprintf(err, errlen,
			 "--mqtt, --client-root, --entity-ident and --state-dir are"
			 " required");
		e = RCS_ERR_INVAL;
		goto out;
	}
	e = mqttc_urls_check((const char *const *)s->mqtt.items, s->mqtt.n, err, errlen);
	if (e != RCS_OK)
		goto out;
	if (!uuid_valid(s->client_root) || !uuid_valid(s->entity_ident)) {
		snprintf(err, errlen, "--client-root and --entity-ident must be UUIDs");
		e = RCS_ERR_INVAL;
		goto out;
	}
	if (s->reboot_command == NULL)
		s->reboot_command = strdup("/sbin/reboot");
	if (s->rollback_command && s->rollback_command[0] != '/') {
		snprintf(err, errlen, "rollback_command '%s': not an absolute path",
			 s->rollback_command);
		e = RCS_ERR_INVAL;
		goto out;
	}
	if (s->boot_id_file == NULL)
		s->boot_id_file = strdup("/proc/sys/kernel/random/boot_id");
	if (s->boot_id_file == NULL || s->boot_id_file[0] != '/') {
		snprintf(err, errlen, "boot_id_file '%s': not an absolute path",
			 s->boot_id_file ? s->boot_id_file : "");
		e = RCS_ERR_INVAL;
		goto out;
	}
	if (s->inventory_command && s->inventory_command[0] != '/') {
		snprintf(err, errlen, "inventory_command '%s': not an absolute path",
			 s->inventory_command);
		e = RCS_ERR_INVAL;
		goto out;
	}
	e = settings_artifacts(s, err, errlen);
out:
	return e;
}

enum rcs_err settings_secrets(struct settings *s, char *err, size_t errlen)
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

void settings_secrets_to_env(const struct settings *s)
{
	if (s->mqtt_password_src == CFG_SECRET_ENV && s->mqtt_password)
		setenv("RCS_MQTT_PASSWORD", s->mqtt_password, 1);
	if (s->mqtt_key_passphrase_src == CFG_SECRET_ENV && s->mqtt_key_passphrase)
		setenv("RCS_MQTT_KEY_PASSPHRASE", s->mqtt_key_passphrase, 1);
}

void settings_brokers(const struct settings *s, char *out, size_t len)
{
	size_t used = 0;

	if (len == 0)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < s->mqtt.n && used < len; i++) {
		int w = snprintf(out + used, len - used, "%s%s", i ? ", " : "", s->mqtt.items[i]);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

bool settings_artifacts_over_mqtt(const struct settings *s)
{
	return s->artifact_transport != NULL &&
	       (strcmp(s->artifact_transport, "mqtt") == 0 ||
		(strcmp(s->artifact_transport, "auto") == 0 && s->artifact_url == NULL));
}

void settings_free(struct settings *s)
{
	cfg_free(settings_opts, s);
	cfg_secret_free(&s->mqtt_key_passphrase);
}

void settings_sandbox_config(const struct settings *s, const struct settings_policy *p,
			     struct sandbox_config *cfg)
{
	sandbox_config_defaults(cfg);
	if (s->mem_limit > 0)
		cfg->mem_limit = (size_t)s->mem_limit;
	if (s->exec_timeout > 0)
		cfg->exec_timeout = s->exec_timeout;
	if (s->exec_max_output > 0)
		cfg->exec_max_output = (size_t)s->exec_max_output;
	cfg->allow_command = &p->allow_command;
	cfg->file_dir = &p->file_dir;
	cfg->artifact_dir = s->artifact_dir;
	cfg->allow_no_seccomp = s->allow_no_seccomp;
	cfg->rollback_command = s->rollback_command;
}

/* ---- the policy ---- */

static void settings_snapshot_free(struct settings_snapshot *sn)
{
	struct settings_policy *p;

	if (sn == NULL)
		return;
	p = &sn->p;
	for (size_t i = 0; i < p->ntrusted; i++)
		sig_key_free(p->trusted[i]);
	free(p->trusted);
	for (size_t i = 0; i < p->nartifact_trusted; i++)
		sig_key_free(p->artifact_trusted[i]);
	free(p->artifact_trusted);
	if (p->tags)
		json_object_put(p->tags);
	cfg_strlist_free(&p->allow_command);
	cfg_strlist_free(&p->file_dir);
	free(sn);
}

static enum rcs_err settings_strlist_copy(const struct cfg_strlist *from, struct cfg_strlist *to)
{
	enum rcs_err err = RCS_ERR_NOMEM;

	to->n = 0;
	to->items = calloc(from->n + 1, sizeof(char *));
	if (to->items == NULL)
		goto out;
	for (size_t i = 0; i < from->n; i++) {
		to->items[i] = strdup(from->items[i]);
		if (to->items[i] == NULL)
			goto out;
		to->n++;
	}
	err = RCS_OK;
out:
	return err;
}

/* The checks of the allowlists: the jail checks them again (settings_policy_load). */
static bool settings_allowlists_valid(const struct settings *s, char *err, size_t errlen)
{
	bool ok = false;

	for (size_t i = 0; i < s->allow_command.n; i++) {
		const char *c = s->allow_command.items[i], *eq = strchr(c, '=');
		char name[65];
		if (eq == NULL || eq == c || (size_t)(eq - c) >= sizeof(name) || eq[1] != '/') {
			snprintf(err, errlen, "allow_command '%s': expected NAME=/absolute/path",
				 c);
			goto out;
		}
		snprintf(name, sizeof(name), "%.*s", (int)(eq - c), c);
		if (!vars_token_valid(name, 64, "-.")) {
			snprintf(err, errlen, "allow_command '%s': bad name", c);
			goto out;
		}
	}
	for (size_t i = 0; i < s->file_dir.n; i++) {
		struct stat sb;
		if (s->file_dir.items[i][0] != '/' || stat(s->file_dir.items[i], &sb) != 0 ||
		    !S_ISDIR(sb.st_mode)) {
			snprintf(err, errlen, "file_dir '%s': not an absolute path to a directory",
				 s->file_dir.items[i]);
			goto out;
		}
	}
	ok = true;
out:
	return ok;
}

/* The policy of s, one reference held; NULL with the reason in err. */
static struct settings_snapshot *settings_policy_load(const struct settings *s, char *err,
						      size_t errlen)
{
	struct settings_snapshot *sn = calloc(1, sizeof(*sn));
	struct settings_policy *p;
	struct sandbox_config cfg;
	enum rcs_err e;

	if (sn == NULL) {
		snprintf(err, errlen, "%s", rcs_strerror(RCS_ERR_NOMEM));
		goto out;
	}
	atomic_init(&sn->refs, 1);
	p = &sn->p;
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
	p->artifact_trusted = calloc(s->artifact_trusted_key.n + 1, sizeof(*p->artifact_trusted));
	if (p->artifact_trusted == NULL)
		goto fail;
	for (size_t i = 0; i < s->artifact_trusted_key.n; i++) {
		e = sig_key_load_public(s->artifact_trusted_key.items[i],
					&p->artifact_trusted[p->nartifact_trusted]);
		if (e != RCS_OK) {
			snprintf(err, errlen, "artifact_trusted_key %s: %s",
				 s->artifact_trusted_key.items[i], rcs_strerror(e));
			goto fail;
		}
		p->nartifact_trusted++;
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
	if (!settings_allowlists_valid(s, err, errlen) ||
	    !settings_artifact_dir_valid(s, err, errlen))
		goto fail;
	if (settings_strlist_copy(&s->allow_command, &p->allow_command) != RCS_OK ||
	    settings_strlist_copy(&s->file_dir, &p->file_dir) != RCS_OK)
		goto fail;
	/* the jail checks what it will be given, so a bad line fails here and not per job */
	settings_sandbox_config(s, p, &cfg);
	if (sandbox_config_check(&cfg, err, errlen) != RCS_OK)
		goto fail;
	goto out;
fail:
	settings_snapshot_free(sn);
	sn = NULL;
out:
	return sn;
}

struct settings_live *settings_live_new(const struct settings *s, char *err, size_t errlen)
{
	struct settings_live *l = calloc(1, sizeof(*l));

	if (l == NULL) {
		snprintf(err, errlen, "%s", rcs_strerror(RCS_ERR_NOMEM));
		goto out;
	}
	l->current = settings_policy_load(s, err, errlen);
	if (l->current == NULL) {
		free(l);
		l = NULL;
		goto out;
	}
	pthread_mutex_init(&l->lock, NULL);
out:
	return l;
}

void settings_live_free(struct settings_live *l)
{
	if (l == NULL)
		return;
	settings_policy_put(&l->current->p);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

struct settings_policy *settings_policy_get(struct settings_live *l)
{
	struct settings_snapshot *sn;

	pthread_mutex_lock(&l->lock);
	sn = l->current;
	atomic_fetch_add(&sn->refs, 1);
	pthread_mutex_unlock(&l->lock);
	return &sn->p;
}

void settings_policy_put(struct settings_policy *p)
{
	struct settings_snapshot *sn;

	if (p == NULL)
		return;
	sn = (struct settings_snapshot *)((char *)p - offsetof(struct settings_snapshot, p));
	if (atomic_fetch_sub(&sn->refs, 1) == 1)
		settings_snapshot_free(sn);
}

enum rcs_err settings_reload(struct settings_live *l, int argc, char **argv)
{
	struct settings fresh;
	struct settings_snapshot *sn = NULL, *old;
	char err[512] = "";
	enum rcs_err e;

	e = settings_load(&fresh, argc, argv, err, sizeof(err));
	if (e == RCS_OK) {
		sn = settings_policy_load(&fresh, err, sizeof(err));
		if (sn == NULL)
			e = RCS_ERR_INVAL;
	}
	settings_free(&fresh);
	if (e != RCS_OK) {
		log_warnx("SIGHUP: configuration not reloaded: %s", err);
		goto out;
	}
	pthread_mutex_lock(&l->lock);
	old = l->current;
	l->current = sn;
	pthread_mutex_unlock(&l->lock);
	settings_policy_put(&old->p);
	verify_forget_signatures();
	log_info("SIGHUP: trusted keys (%zu), allowlists and tags reloaded", sn->p.ntrusted);
out:
	return e;
}
