/*
 * fuzz_cfg - the config file and command line parsers (common/cfg.c), over
 * a table with every option of rcs-coordinator serve and rcs-agent (every
 * CFG_* type, the same ranges).
 *
 * The input is parsed twice: as a config file (cfg_parse_file, through a
 * memfd so no file is written), and as a command line, one argument per
 * line (cfg_find_arg("config") then cfg_parse_args, as both daemons do).
 *
 * Properties: the error text is a terminated string naming the problem;
 * integers land within their range; a string list never holds more than
 * CFG_MAX_LIST values; *next is an argument index: first..argc (cfg.h: "argc
 * when all were options"); cfg_free releases everything (LeakSanitizer).
 */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cfg.h"
#include "fuzz_util.h"

#define FUZZ_MAX_ARGS 64

struct fuzz_settings {
	char *db, *listen, *scripts_dir, *signing_key, *mqtt, *mqtt_client_id, *mqtt_username;
	char *mqtt_password, *client_root, *entity_ident, *state_dir, *smtp_url, *reboot_command;
	struct cfg_strlist trusted_key, tag, allow_command, file_dir;
	long long max_body, threads, mqtt_max_payload, resend_after, smtp_max_per_hour;
	long long auth_fail_limit, max_queue, max_payload, mem_limit, exec_timeout;
	bool debug, check, require_signature, allow_no_seccomp;
};

#define S(name, field)                                                                             \
	{                                                                                          \
		name, CFG_STRING, offsetof(struct fuzz_settings, field), 0, 0, "X", "h"            \
	}
#define L(name, field)                                                                             \
	{                                                                                          \
		name, CFG_STRLIST, offsetof(struct fuzz_settings, field), 0, 0, "X", "h"           \
	}
#define I(name, field, min, max)                                                                   \
	{                                                                                          \
		name, CFG_INT, offsetof(struct fuzz_settings, field), min, max, "N", "h"           \
	}
#define B(name, field)                                                                             \
	{                                                                                          \
		name, CFG_BOOL, offsetof(struct fuzz_settings, field), 0, 0, NULL, "h"             \
	}

static const struct cfg_opt fuzz_opts[] = {
    S("db", db),
    S("listen", listen),
    S("scripts_dir", scripts_dir),
    S("signing_key", signing_key),
    L("trusted_key", trusted_key),
    I("max_body", max_body, 1024, 64LL * 1024 * 1024),
    I("threads", threads, 1, 64),
    S("mqtt", mqtt),
    S("mqtt_client_id", mqtt_client_id),
    S("mqtt_username", mqtt_username),
    S("mqtt_password", mqtt_password),
    I("mqtt_max_payload", mqtt_max_payload, 1024, 64LL * 1024 * 1024),
    I("resend_after", resend_after, 5, 86400),
    S("smtp_url", smtp_url),
    I("smtp_max_per_hour", smtp_max_per_hour, 0, 1000000),
    I("auth_fail_limit", auth_fail_limit, 0, 1000000),
    S("client_root", client_root),
    S("entity_ident", entity_ident),
    S("state_dir", state_dir),
    B("require_signature", require_signature),
    L("tag", tag),
    L("allow_command", allow_command),
    L("file_dir", file_dir),
    I("max_queue", max_queue, 1, 10000),
    I("max_payload", max_payload, 4096, 16LL * 1024 * 1024),
    I("mem_limit", mem_limit, 1024 * 1024, 4LL * 1024 * 1024 * 1024),
    I("exec_timeout", exec_timeout, 1, 86400),
    S("reboot_command", reboot_command),
    B("allow_no_seccomp", allow_no_seccomp),
    B("debug", debug),
    B("check", check),
    {NULL, 0, 0, 0, 0, NULL, NULL},
};

static int fuzz_fd = -1;
static char fuzz_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	fuzz_fd = memfd_create("rcs-fuzz-cfg", 0);
	if (fuzz_fd < 0)
		abort();
	snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
	return 0;
}

static void check_settings(const struct fuzz_settings *s)
{
	const struct cfg_strlist *lists[] = {&s->trusted_key, &s->tag, &s->allow_command,
					     &s->file_dir};

	for (const struct cfg_opt *o = fuzz_opts; o->name; o++) {
		if (o->type == CFG_INT) {
			long long v =
			    *(const long long *)(const void *)((const char *)s + o->offset);
			FUZZ_CHECK(v == 0 || (v >= o->min && v <= o->max), "%s = %lld out of range",
				   o->name, v);
		}
	}
	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		FUZZ_CHECK(lists[i]->n <= CFG_MAX_LIST, "a list holds %zu values", lists[i]->n);
		for (size_t k = 0; k < lists[i]->n; k++)
			FUZZ_CHECK(lists[i]->items[k] != NULL, "a NULL list value");
	}
}

static void check_errbuf(const char *errbuf, size_t len, enum rcs_err err)
{
	FUZZ_CHECK(memchr(errbuf, '\0', len) != NULL, "error text not terminated");
	if (err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG)
		FUZZ_CHECK(errbuf[0] != '\0', "error %s without a text", rcs_strerror(err));
}

static void fuzz_file(const uint8_t *data, size_t size)
{
	struct fuzz_settings s;
	char errbuf[512];
	enum rcs_err err;

	memset(&s, 0, sizeof(s));
	memset(errbuf, 'x', sizeof(errbuf));
	errbuf[sizeof(errbuf) - 1] = '\0';
	if (ftruncate(fuzz_fd, 0) != 0 || pwrite(fuzz_fd, data, size, 0) != (ssize_t)size)
		abort();
	errbuf[0] = '\0';
	err = cfg_parse_file(fuzz_opts, &s, fuzz_path, errbuf, sizeof(errbuf));
	FUZZ_CHECK(err == RCS_OK || err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG ||
		       err == RCS_ERR_NOMEM,
		   "cfg_parse_file answered %s", rcs_strerror(err));
	check_errbuf(errbuf, sizeof(errbuf), err);
	check_settings(&s);
	cfg_free(fuzz_opts, &s);
}

static void fuzz_args(const uint8_t *data, size_t size)
{
	struct fuzz_settings s;
	char *text = fuzz_strndup(data, size), *p = text;
	char *argv[FUZZ_MAX_ARGS + 1];
	char errbuf[512] = "";
	int argc = 0, next = -1;
	const char *config;
	enum rcs_err err;

	argv[argc++] = "rcs-fuzz";
	while (argc < FUZZ_MAX_ARGS) {
		char *nl = strchr(p, '\n');
		argv[argc++] = p;
		if (nl == NULL)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	argv[argc] = NULL;
	memset(&s, 0, sizeof(s));
	config = cfg_find_arg(argc, argv, "config");
	if (config)
		FUZZ_CHECK(config >= text && config <= text + size, "config path outside argv");
	err = cfg_parse_args(fuzz_opts, &s, argc, argv, 1, &next, errbuf, sizeof(errbuf));
	FUZZ_CHECK(err == RCS_OK || err == RCS_ERR_INVAL || err == RCS_ERR_TOOBIG ||
		       err == RCS_ERR_NOMEM,
		   "cfg_parse_args answered %s", rcs_strerror(err));
	check_errbuf(errbuf, sizeof(errbuf), err);
	FUZZ_CHECK(next >= 1 && next <= argc, "*next = %d with argc %d", next, argc);
	if (err == RCS_OK && next < argc)
		FUZZ_CHECK(strncmp(argv[next], "--", 2) != 0 || argv[next][2] == '\0',
			   "stopped at an option: '%s'", argv[next]);
	check_settings(&s);
	cfg_free(fuzz_opts, &s);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_file(data, size);
	fuzz_args(data, size);
	return 0;
}
