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

/* Reads a kept id: 1 when keep_file holds one, 0 when it is missing or empty, -1 when it
 * holds something else (an operator's edit to fix, never overwritten). */
static int node_read(const char *keep_file, char out[NODE_ID_MAX + 1])
{
	char line[NODE_ID_MAX + 8];
	FILE *f = fopen(keep_file, "r");
	int got = 0;

	if (f == NULL)
		return 0;
	if (fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\r\n")] = '\0';
		if (node_id_valid(line)) {
			memcpy(out, line, strlen(line) + 1);
			got = 1;
		} else if (line[0] != '\0') {
			got = -1;
		}
	}
	fclose(f);
	return got;
}

/* Writes id to keep_file whole or not at all (a new file renamed over it, synced). */
static bool node_write(const char *keep_file, const char *id)
{
	char tmp[4096];
	FILE *f = NULL;
	bool ok = false;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new", keep_file) >= sizeof(tmp))
		goto out;
	f = fopen(tmp, "w");
	if (f == NULL)
		goto out;
	ok = fprintf(f, "%s\n", id) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
	if (fclose(f) != 0)
		ok = false;
	if (ok && rename(tmp, keep_file) != 0)
		ok = false;
	if (!ok)
		unlink(tmp);
out:
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
			     bool *kept, char *why, size_t why_len)
{
	enum rcs_err err = RCS_OK;
	int got = 0;

	if (kept)
		*kept = given != NULL;
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
	if (keep_file != NULL)
		got = node_read(keep_file, out);
	if (got < 0) {
		snprintf(
		    why, why_len,
		    "%s: not a node id (1 to %d of the characters A-Z a-z 0-9 - _): correct it,"
		    " or remove it for a new one",
		    keep_file, NODE_ID_MAX);
		err = RCS_ERR_INVAL;
		goto out;
	}
	if (got > 0) {
		if (kept)
			*kept = true;
		goto out;
	}
	err = node_new(out);
	if (err != RCS_OK) {
		snprintf(why, why_len, "cannot make a node id: no random numbers");
		goto out;
	}
	if (keep_file == NULL) {
		log_info("node id %s (not kept: give --node-id to keep one across restarts)", out);
		goto out;
	}
	if (!node_write(keep_file, out)) {
		log_warn("cannot keep the node id in %s (a new one at the next start: give"
			 " --node-id)",
			 keep_file);
		goto out;
	}
	if (kept)
		*kept = true;
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
