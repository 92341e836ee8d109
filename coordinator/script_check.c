/*
 * script_check.c - compiles a script with Lua's parser (lua_load), without running it.
 * A fresh state per check, no library opened, its memory bounded.
 */
#include "script_check.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parsing a 256 KiB source takes a few MiB; a budget far above that stops a pathological
 * input from taking the coordinator's memory. */
#define SCRIPT_CHECK_MEM_MAX (64u * 1024u * 1024u)

struct script_mem {
	size_t used;
	bool over;
};

static void *script_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct script_mem *m = ud;
	void *p;

	if (ptr == NULL)
		osize = 0;
	if (nsize == 0) {
		free(ptr);
		m->used -= osize;
		return NULL;
	}
	if (nsize > osize && m->used - osize + nsize > SCRIPT_CHECK_MEM_MAX) {
		m->over = true;
		return NULL;
	}
	p = realloc(ptr, nsize);
	if (p != NULL)
		m->used = m->used - osize + nsize;
	return p;
}

/* The line of "name:LINE: message", or 0. Script names hold no ':', and Lua may cut a
 * long name short in its messages: the line is what follows the first ':'. */
static int script_line(const char *msg)
{
	const char *p = strchr(msg, ':');
	long line = 0;

	if (p == NULL || p[1] < '0' || p[1] > '9')
		return 0;
	for (p++; *p >= '0' && *p <= '9' && line < 100000000; p++)
		line = line * 10 + (*p - '0');
	return *p == ':' ? (int)line : 0;
}

enum rcs_err script_check(const char *name, const char *src, size_t len, char *msg, size_t msglen,
			  int *line)
{
	struct script_mem mem = {0, false};
	char chunk[80];
	lua_State *L;
	enum rcs_err err = RCS_ERR_INVAL;
	int status;

	*line = 0;
	if (msglen > 0)
		msg[0] = '\0';
	/* "=name": Lua's messages start "name:LINE:" */
	snprintf(chunk, sizeof(chunk), "=%s", name);
	L = lua_newstate(script_alloc, &mem);
	if (L == NULL) {
		snprintf(msg, msglen, "out of memory");
		err = RCS_ERR_NOMEM;
		goto out;
	}
	status = luaL_loadbufferx(L, src, len, chunk, "t");
	if (status == LUA_OK) {
		err = RCS_OK;
	} else if (status == LUA_ERRMEM || mem.over) {
		snprintf(msg, msglen, "the script is too complex to compile");
		err = RCS_ERR_NOMEM;
	} else {
		const char *m = lua_tostring(L, -1);

		snprintf(msg, msglen, "%s", m ? m : "does not compile");
		*line = script_line(msg);
	}
out:
	if (L != NULL)
		lua_close(L);
	return err;
}
