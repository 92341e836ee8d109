/*
 * phase.c - jobs that span a reboot: the boot id, rcs.state's values, the reboot command.
 * See phase.h; what they are for is docs/agent.md "Phases".
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "phase.h"

#include "jsonu.h"
#include "log.h"
#include "text.h"

extern char **environ;

enum rcs_err phase_boot_id(const char *path, char out[JOURNAL_MAX_BOOT_ID + 1])
{
	char buf[JOURNAL_MAX_BOOT_ID + 2];
	enum rcs_err err = RCS_ERR_IO;
	ssize_t n;
	size_t len;
	int fd;

	out[0] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto out;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		goto out;
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	buf[len] = '\0';
	err = RCS_ERR_INVAL;
	if (len == 0 || len > JOURNAL_MAX_BOOT_ID || !text_printable(buf, len))
		goto out;
	memcpy(out, buf, len + 1);
	err = RCS_OK;
out:
	return err;
}

/* The JSON value of an rcs.state value from the wire (phase.h); NULL with why. */
static json_object *phase_value(char type, const char *value, size_t len, char *why, size_t whylen)
{
	json_object *v = NULL;
	char num[64], *end = NULL;

	switch (type) {
	case 's':
		if (memchr(value, '\0', len) != NULL || !text_utf8_valid(value, len))
			snprintf(why, whylen,
				 "rcs.state.set: value must be UTF-8 text without NUL");
		else
			v = json_object_new_string_len(value, (int)len);
		break;
	case 'b':
		if (len == 4 && memcmp(value, "true", 4) == 0)
			v = json_object_new_boolean(1);
		else if (len == 5 && memcmp(value, "false", 5) == 0)
			v = json_object_new_boolean(0);
		else
			snprintf(why, whylen, "rcs.state.set: bad boolean");
		break;
	case 'n':
		if (len == 0 || len >= sizeof(num)) {
			snprintf(why, whylen, "rcs.state.set: bad number");
			break;
		}
		memcpy(num, value, len);
		num[len] = '\0';
		errno = 0;
		if (strspn(num, "-0123456789") == len) {
			long long i = strtoll(num, &end, 10);
			if (errno == 0 && *end == '\0')
				v = json_object_new_int64(i);
		} else {
			double d = strtod(num, &end);
			if (*end == '\0' && isfinite(d))
				v = json_object_new_double(d);
		}
		if (v == NULL)
			snprintf(why, whylen,
				 "rcs.state.set: value must be a finite number, not '%s'", num);
		break;
	default:
		snprintf(why, whylen,
			 "rcs.state.set: value must be a string, a number or a boolean");
		break;
	}
	return v;
}

enum rcs_err phase_state_set(json_object *state, const char *key, char type, const char *value,
			     size_t len, json_object **next, char **text, char *why, size_t whylen)
{
	json_object *copy = NULL, *v = NULL;
	enum rcs_err err = RCS_ERR_INVAL;
	const char *t;
	size_t n = 0, klen = key != NULL ? strlen(key) : 0;

	*next = NULL;
	*text = NULL;
	why[0] = '\0';
	if (klen == 0 || klen > PHASE_STATE_KEY || !text_printable(key, klen)) {
		snprintf(why, whylen,
			 "rcs.state.set: key must be 1 to %d bytes of UTF-8 without control"
			 " characters",
			 PHASE_STATE_KEY);
		goto out;
	}
	if (type != 0 && (v = phase_value(type, value, len, why, whylen)) == NULL)
		goto out;
	if (state != NULL ? json_object_deep_copy(state, &copy, NULL) != 0
			  : (copy = json_object_new_object()) == NULL) {
		err = RCS_ERR_NOMEM;
		snprintf(why, whylen, "rcs.state.set: out of memory");
		goto out;
	}
	if (v != NULL) {
		json_object_object_add(copy, key, v);
		v = NULL;
	} else {
		json_object_object_del(copy, key);
	}
	t = json_object_to_json_string_length(copy, JSON_C_TO_STRING_PLAIN, &n);
	if (t == NULL) {
		err = RCS_ERR_NOMEM;
		snprintf(why, whylen, "rcs.state.set: out of memory");
		goto out;
	}
	if (n > JOURNAL_MAX_SCRIPT_STATE) {
		err = RCS_ERR_TOOBIG;
		snprintf(why, whylen,
			 "rcs.state.set: rcs.state would take %zu bytes of JSON, more than %d", n,
			 JOURNAL_MAX_SCRIPT_STATE);
		goto out;
	}
	if ((*text = strdup(t)) == NULL) {
		err = RCS_ERR_NOMEM;
		goto out;
	}
	*next = copy;
	copy = NULL;
	err = RCS_OK;
out:
	json_object_put(v);
	json_object_put(copy);
	return err;
}

enum rcs_err phase_state_get(json_object *state, const char *key, char *type, char **value)
{
	json_object *v = NULL;
	const char *s = NULL;
	char num[64];

	*value = NULL;
	if (state == NULL || !json_object_object_get_ex(state, key, &v) || v == NULL)
		return RCS_ERR_NOTFOUND;
	switch (json_object_get_type(v)) {
	case json_type_string:
		*type = 's';
		s = json_object_get_string(v);
		break;
	case json_type_boolean:
		*type = 'b';
		s = json_object_get_boolean(v) ? "true" : "false";
		break;
	case json_type_int:
		*type = 'n';
		snprintf(num, sizeof(num), "%lld", (long long)json_object_get_int64(v));
		s = num;
		break;
	case json_type_double:
		*type = 'n';
		snprintf(num, sizeof(num), "%.17g", json_object_get_double(v));
		s = num;
		break;
	default:
		return RCS_ERR_NOTFOUND;
	}
	*value = strdup(s);
	return *value != NULL ? RCS_OK : RCS_ERR_NOMEM;
}

json_object *phase_state_parse(const char *job, const char *text)
{
	json_object *o;

	if (text == NULL)
		return NULL;
	o = json_tokener_parse(text);
	if (o != NULL && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	if (o == NULL)
		log_warnx("job %s: its journaled rcs.state is unreadable: starting empty", job);
	return o;
}

bool phase_run_command(const char *path)
{
	char *argv[2];
	pid_t pid;
	int status = 0;

	argv[0] = (char *)path;
	argv[1] = NULL;
	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0) {
		log_warn("command %s", path);
		return false;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
