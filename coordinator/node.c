/*
 * node.c - the coordinator's node id. See node.h.
 */
#include "node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "text.h"
#include "uuid.h"

static bool node_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

bool node_id_valid(const char *id)
{
	size_t n = 0;

	if (id == NULL || *id == '\0')
		return false;
	for (; id[n]; n++)
		if (n >= NODE_ID_MAX || !node_char(id[n]))
			return false;
	return true;
}

/* Reads a kept id: true when keep_file holds a valid one. */
static bool node_read(const char *keep_file, char out[NODE_ID_MAX + 1])
{
	char line[NODE_ID_MAX + 8];
	FILE *f = fopen(keep_file, "r");
	bool ok = false;

	if (f == NULL)
		return false;
	if (fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\r\n")] = '\0';
		if (node_id_valid(line)) {
			memcpy(out, line, strlen(line) + 1);
			ok = true;
		}
	}
	fclose(f);
	return ok;
}

/* host name (its characters outside [A-Za-z0-9_-] as '-', at most 40) + '-' + 8 hex */
static enum rcs_err node_new(char out[NODE_ID_MAX + 1])
{
	char host[256] = "";
	unsigned char rnd[4];
	char hex[9];
	size_t n;

	if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
		snprintf(host, sizeof(host), "coordinator");
	host[40] = '\0';
	for (n = 0; host[n]; n++)
		if (!node_char(host[n]))
			host[n] = '-';
	if (rcs_random(rnd, sizeof(rnd)) != RCS_OK)
		return RCS_ERR_IO;
	text_hex_encode(rnd, sizeof(rnd), hex);
	hex[8] = '\0';
	snprintf(out, NODE_ID_MAX + 1, "%.40s-%.8s", host, hex);
	return RCS_OK;
}

enum rcs_err node_id_resolve(const char *given, const char *keep_file, char out[NODE_ID_MAX + 1],
			     char *why, size_t why_len)
{
	enum rcs_err err = RCS_OK;
	FILE *f;

	if (given != NULL) {
		if (!node_id_valid(given)) {
			snprintf(why, why_len,
				 "--node-id: 1 to %d of the characters A-Z a-z 0-9 - _",
				 NODE_ID_MAX);
			err = RCS_ERR_INVAL;
			goto out;
		}
		snprintf(out, NODE_ID_MAX + 1, "%s", given);
		goto out;
	}
	if (keep_file != NULL && node_read(keep_file, out))
		goto out;
	err = node_new(out);
	if (err != RCS_OK) {
		snprintf(why, why_len, "cannot make a node id: no random numbers");
		goto out;
	}
	if (keep_file == NULL) {
		log_info("node id %s (not kept: give --node-id to keep one across restarts)", out);
		goto out;
	}
	f = fopen(keep_file, "w");
	if (f == NULL || fprintf(f, "%s\n", out) < 0)
		log_warn("cannot keep the node id in %s", keep_file);
	if (f != NULL && fclose(f) != 0)
		log_warn("cannot keep the node id in %s", keep_file);
out:
	return err;
}

char *node_id_keep_file(const char *db)
{
	const char *sd = getenv("STATE_DIRECTORY");
	size_t n;
	char *p = NULL;

	if (sd != NULL && *sd == '/') {
		n = strcspn(sd, ":"); /* systemd lists several directories with ':' */
		if (asprintf(&p, "%.*s/node-id", (int)n, sd) < 0)
			p = NULL;
	} else if (db != NULL && strstr(db, "://") == NULL && strcmp(db, ":memory:") != 0) {
		if (asprintf(&p, "%s.node-id", db) < 0)
			p = NULL;
	}
	return p;
}
