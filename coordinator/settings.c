/*
 * settings.c - what rcs-coordinator's subcommands share of its settings: the database's
 * name as logs show it, secrets settled, required values, the database opened. See
 * settings.h.
 */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

/* The --db value as logs may show it: a password in a database URL
 * (postgresql://user:secret@host/db) replaced by "***" (docs/coordinator.md). */
void settings_db_shown(const char *db, char *out, size_t len)
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

/*
 * Settles each secret from its option, its file or the environment, first
 * given wins (docs/coordinator.md); the variables are unset either way.
 * False, with the reason on stderr, for a secret file that can't be used.
 */
bool settings_resolve_secrets(struct settings *s)
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

void settings_need(const char *value, const char *flag)
{
	if (value == NULL || *value == '\0') {
		fprintf(stderr, "rcs-coordinator: %s is required (see --help)\n", flag);
		exit(2);
	}
}

struct store *settings_open_db(const char *path)
{
	struct store *st = NULL;
	enum rcs_err err = store_open(path, &st);
	char shown[1024];

	if (err != RCS_OK) {
		settings_db_shown(path, shown, sizeof(shown));
		fprintf(stderr, "rcs-coordinator: cannot open database %s: %s\n", shown,
			rcs_strerror(err));
		exit(1);
	}
	return st;
}
