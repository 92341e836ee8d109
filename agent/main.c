/*
 * rcs-agent: the device side of the Remote Command Service.
 *
 * This build knows its command line and configuration file (so deployments
 * can be prepared and checked with --check) but has no MQTT link yet: it
 * refuses to start rather than pretend to take jobs.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cfg.h"
#include "log.h"
#include "uuid.h"

struct agent_settings {
	char *mqtt;
	char *client_root;
	char *entity_ident;
	char *state_dir;
	struct cfg_strlist trusted_key;
	struct cfg_strlist tag;
	struct cfg_strlist allow_command;
	bool check;
};

#define OPT(name, type, field, arg, help) \
	{ name, type, offsetof(struct agent_settings, field), 0, 0, arg, help }

static const struct cfg_opt agent_opts[] = {
	OPT("mqtt", CFG_STRING, mqtt, "URL", "broker (tcp://host:port or ssl://host:port)"),
	OPT("client_root", CFG_STRING, client_root, "UUID", "tenant of this device"),
	OPT("entity_ident", CFG_STRING, entity_ident, "UUID", "this device's ident"),
	OPT("state_dir", CFG_STRING, state_dir, "DIR", "journal and settings directory"),
	OPT("trusted_key", CFG_STRLIST, trusted_key, "PEM", "task signing key to trust (repeatable)"),
	OPT("tag", CFG_STRLIST, tag, "TAG", "tag this device reports (repeatable)"),
	OPT("allow_command", CFG_STRLIST, allow_command, "NAME=PATH",
	    "command rcs.exec may run (repeatable)"),
	OPT("check", CFG_BOOL, check, NULL, "check the configuration, then exit"),
	{ NULL, 0, 0, 0, 0, NULL, NULL },
};

static void usage(FILE *fp)
{
	fprintf(fp, "usage: rcs-agent --mqtt URL --client-root UUID --entity-ident UUID"
		    " --state-dir DIR [options]\n       rcs-agent --help | --version\n\n");
	cfg_usage(fp, agent_opts);
	fprintf(fp, "  --config FILE                config file (mosquitto.conf style)\n");
}

int main(int argc, char **argv)
{
	struct agent_settings s;
	char err[512];
	const char *config;
	int next = 1, rc = 2;

	memset(&s, 0, sizeof(s));
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
	config = cfg_find_arg(argc, argv, "config");
	if ((config && cfg_parse_file(agent_opts, &s, config, err, sizeof(err)) != RCS_OK) ||
	    cfg_parse_args(agent_opts, &s, argc, argv, 1, &next, err, sizeof(err)) != RCS_OK) {
		fprintf(stderr, "rcs-agent: %s\n", err);
		goto out;
	}
	if (next < argc) {
		fprintf(stderr, "rcs-agent: unexpected argument '%s'\n", argv[next]);
		goto out;
	}
	if (s.mqtt == NULL || s.state_dir == NULL || !uuid_valid(s.client_root) ||
	    !uuid_valid(s.entity_ident)) {
		fprintf(stderr, "rcs-agent: --mqtt, --state-dir, --client-root UUID and"
				" --entity-ident UUID are required\n");
		goto out;
	}
	if (s.check) {
		printf("configuration OK\n");
		rc = 0;
		goto out;
	}
	fprintf(stderr, "rcs-agent: this build has no MQTT link yet; nothing to run\n");
	rc = 1;
out:
	cfg_free(agent_opts, &s);
	return rc;
}
