/*
 * sandbox_child.c - the jailed side of the sandbox (see sandbox.h).
 *
 * Runs in the child the launcher forked for sandbox_run(), never in the
 * agent. In order: signals back to their defaults, the parent-death signal
 * (the parent is the launcher), every descriptor but the job socket closed,
 * the job read from the agent (SBX_JOB), time zone and json-c warm-up (both
 * would open files later), resource limits, the lua_State built (libraries,
 * sandbox environment, `rcs`), the seccomp filter, HELLO, then the script.
 * The Lua state is closed (its finalizers run), the result goes back as one
 * RESULT message and the child _exit()s: nothing else here is ever freed,
 * the process is.
 *
 * Size: over 1,000 lines on purpose: it is the whole of what runs inside the jail,
 * and every function of the Lua host API (docs/lua-api.md) reads the one
 * private struct child (the job, the limits, the replies from the agent) and
 * relies on the order above (no file opened after the filter, nothing left
 * to free). Split, the host API and the child's set-up would need that state
 * and that order as an interface between files, for no caller outside them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <seccomp.h>

#include "canon.h"
#include "jsonu.h"
#include "sandbox_int.h"

#if defined(__SANITIZE_ADDRESS__)
#define CHILD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHILD_ASAN 1
#endif
#endif

#define CHILD_FD         3                  /* the socket, once everything else is closed */
#define CHILD_HOOK_COUNT 1000               /* instructions between two deadline checks */
#define CHILD_AS_SLACK   ((size_t)64 << 20) /* RLIMIT_AS above the image and mem_limit */
#define CHILD_KEY_MAX    64                 /* bytes of a number written as a JSON member name */
#define CHILD_LOAD_SLOT  5                  /* load(f): the slot holding f's last piece */

/* exit statuses of a child that could not talk to its parent */
enum { CHILD_EXIT_IO = 3, CHILD_EXIT_PROTO = 4, CHILD_EXIT_PANIC = 5 };

struct child {
	const struct sbx_child_args *a;
	size_t mem_used;
	size_t mem_limit;
	bool mem_refused; /* the allocator said no at least once */
	bool timed_out;   /* the count hook saw the deadline */
	bool seccomp;     /* the filter is loaded */
	struct buf tx;    /* frame being sent */
	char *rx;         /* frame being received (body) */
	size_t rx_cap;
	enum sbx_result_kind kind; /* the outcome child_run found */
	struct buf res;            /* its text */
};

static struct child *child_of(lua_State *L)
{
	void *ud = NULL;

	lua_getallocf(L, &ud);
	return ud;
}

/* ---- memory: the counting allocator ---- */

static void *child_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct child *c = ud;
	void *p;

	if (ptr == NULL)
		osize = 0; /* osize then encodes the object type */
	if (nsize == 0) {
		free(ptr);
		c->mem_used -= osize;
		return NULL;
	}
	if (nsize > osize && nsize - osize > c->mem_limit - c->mem_used) {
		c->mem_refused = true;
		return NULL;
	}
	p = realloc(ptr, nsize);
	if (p == NULL) {
		c->mem_refused = true;
		return NULL;
	}
	c->mem_used = c->mem_used - osize + nsize;
	return p;
}

/* ---- the wire ---- */

static void child_write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(CHILD_FD, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(CHILD_EXIT_IO);
		p += w;
		n -= (size_t)w;
	}
}

static void child_read_all(char *p, size_t n)
{
	while (n > 0) {
		ssize_t r = read(CHILD_FD, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			_exit(CHILD_EXIT_IO);
		p += r;
		n -= (size_t)r;
	}
}

/* Callers keep every field within the parent's ceiling; a frame over it is a bug. */
static void child_send(struct child *c, uint8_t op, size_t nf, const char *const *f,
		       const size_t *fl)
{
	buf_reset(&c->tx);
	if (sandbox_wire_encode(&c->tx, op, nf, f, fl) != RCS_OK)
		_exit(CHILD_EXIT_PROTO);
	child_write_all(c->tx.data, c->tx.len);
}

static void child_recv(struct child *c, struct sbx_msg *m)
{
	unsigned char hdr[SBX_FRAME_HDR];
	uint32_t len;

	child_read_all((char *)hdr, sizeof(hdr));
	len = sandbox_wire_len(hdr);
	if (len > c->a->rx_max)
		_exit(CHILD_EXIT_PROTO);
	if (len > c->rx_cap) {
		char *p = realloc(c->rx, len);

		if (p == NULL)
			_exit(CHILD_EXIT_PROTO);
		c->rx = p;
		c->rx_cap = len;
	}
	child_read_all(c->rx, len);
	if (sandbox_wire_decode(c->rx, len, m) != RCS_OK ||
	    (m->op != SBX_REPLY_OK && m->op != SBX_REPLY_ERR) ||
	    (m->op == SBX_REPLY_ERR && m->nfields != 1))
		_exit(CHILD_EXIT_PROTO);
}

/* Sends the final message and ends the child. */
static _Noreturn void child_result(struct child *c, enum sbx_result_kind kind, const char *text,
				   size_t len)
{
	char k[16];
	const char *f[2] = {k, text};
	size_t fl[2];

	fl[0] = (size_t)snprintf(k, sizeof(k), "%d", (int)kind);
	fl[1] = len;
	child_send(c, SBX_RESULT, text ? 2 : 1, f, fl);
	_exit(0);
}

/*
 * One host call: sends the request, waits for the reply. An error reply is
 * raised as a Lua error at the script's position; an OK reply stays in
 * *reply (valid until the next call).
 */
static void child_call(lua_State *L, uint8_t op, size_t nf, const char *const *f, const size_t *fl,
		       struct sbx_msg *reply)
{
	struct child *c = child_of(L);

	child_send(c, op, nf, f, fl);
	child_recv(c, reply);
	if (reply->op == SBX_REPLY_ERR) {
		luaL_where(L, 1);
		lua_pushlstring(L, reply->f[0], reply->flen[0]);
		lua_concat(L, 2);
		lua_error(L);
	}
}

/* A string argument of at most max bytes, without NUL. */
static const char *child_checkstr(lua_State *L, int arg, size_t max, const char *what, size_t *len)
{
	const char *s = luaL_checklstring(L, arg, len);

	if (*len > max)
		luaL_error(L, "%s longer than %d bytes", what, (int)max);
	if (memchr(s, '\0', *len) != NULL)
		luaL_error(L, "%s contains a NUL byte", what);
	return s;
}

/* ---- the host API: rcs.* ---- */

static int rcs_progress(lua_State *L)
{
	struct sbx_msg m;
	size_t len;
	const char *s = child_checkstr(L, 1, SANDBOX_TEXT_MAX, "rcs.progress: text", &len);

	child_call(L, SBX_PROGRESS, 1, &s, &len, &m);
	return 0;
}

static int rcs_log(lua_State *L)
{
	static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
	struct sbx_msg m;
	const char *f[2];
	size_t fl[2];

	f[0] = levels[luaL_checkoption(L, 1, NULL, levels)];
	fl[0] = strlen(f[0]);
	f[1] = child_checkstr(L, 2, SANDBOX_TEXT_MAX, "rcs.log: text", &fl[1]);
	child_call(L, SBX_LOG, 2, f, fl, &m);
	return 0;
}

static int rcs_config_get(lua_State *L)
{
	struct sbx_msg m;
	size_t len;
	const char *key = child_checkstr(L, 1, SANDBOX_CONFIG_KEY_MAX, "rcs.config: key", &len);

	child_call(L, SBX_CONFIG_GET, 1, &key, &len, &m);
	if (m.nfields == 0)
		lua_pushnil(L);
	else
		lua_pushlstring(L, m.f[0], m.flen[0]);
	return 1;
}

static int rcs_config_set(lua_State *L)
{
	struct sbx_msg m;
	const char *f[2];
	size_t fl[2];

	f[0] = child_checkstr(L, 1, SANDBOX_CONFIG_KEY_MAX, "rcs.config: key", &fl[0]);
	f[1] = child_checkstr(L, 2, SANDBOX_CONFIG_VALUE_MAX, "rcs.config: value", &fl[1]);
	child_call(L, SBX_CONFIG_SET, 2, f, fl, &m);
	return 0;
}

static lua_Integer child_field_int(const struct sbx_msg *m, size_t i)
{
	char tmp[32];
	size_t n = m->flen[i] < sizeof(tmp) - 1 ? m->flen[i] : sizeof(tmp) - 1;

	memcpy(tmp, m->f[i], n);
	tmp[n] = '\0';
	return (lua_Integer)strtoll(tmp, NULL, 10);
}

/* rcs.exec(name, args...) -> {code, output, signal, timed_out, truncated} */
static int rcs_exec(lua_State *L)
{
	const char *f[SBX_MAX_FIELDS];
	size_t fl[SBX_MAX_FIELDS];
	struct sbx_msg m;
	int n = lua_gettop(L);
	lua_Integer sig;

	while (n > 1 && lua_isnil(L, n)) /* trailing nils: rcs.exec(name, cond and x or nil) */
		n--;
	f[0] = child_checkstr(L, 1, SANDBOX_EXEC_NAME_MAX, "rcs.exec: name", &fl[0]);
	if (n - 1 > SANDBOX_EXEC_MAX_ARGS)
		return luaL_error(L, "rcs.exec: more than %d arguments", SANDBOX_EXEC_MAX_ARGS);
	for (int i = 2; i <= n; i++) {
		if (lua_type(L, i) != LUA_TSTRING)
			return luaL_error(L, "rcs.exec: argument #%d must be a string, not %s", i,
					  luaL_typename(L, i));
		f[i - 1] =
		    child_checkstr(L, i, SANDBOX_EXEC_ARG_MAX, "rcs.exec: argument", &fl[i - 1]);
	}
	child_call(L, SBX_EXEC, (size_t)n, f, fl, &m);
	if (m.nfields != 5)
		_exit(CHILD_EXIT_PROTO);
	lua_createtable(L, 0, 5);
	lua_pushinteger(L, child_field_int(&m, 0));
	lua_setfield(L, -2, "code");
	lua_pushlstring(L, m.f[1], m.flen[1]);
	lua_setfield(L, -2, "output");
	sig = child_field_int(&m, 2);
	if (sig > 0) {
		lua_pushinteger(L, sig);
		lua_setfield(L, -2, "signal");
	}
	lua_pushboolean(L, child_field_int(&m, 3) != 0);
	lua_setfield(L, -2, "timed_out");
	lua_pushboolean(L, child_field_int(&m, 4) != 0);
	lua_setfield(L, -2, "truncated");
	return 1;
}

static int rcs_sleep(lua_State *L)
{
	lua_Number s = luaL_checknumber(L, 1);
	char ms[32];
	const char *f = ms;
	size_t fl;
	struct sbx_msg m;

	if (!(s >= 0) || s > (lua_Number)SANDBOX_MAX_TIMEOUT)
		return luaL_error(L, "rcs.sleep: seconds must be between 0 and %d",
				  SANDBOX_MAX_TIMEOUT);
	fl = (size_t)snprintf(ms, sizeof(ms), "%lld", (long long)(s * 1000.0 + 0.5));
	child_call(L, SBX_SLEEP, 1, &f, &fl, &m);
	return 0;
}

/* rcs.reboot{resume = "<phase>", within = <seconds>}: the checked phase and within. */
static void child_reboot_args(lua_State *L, const char **phase, size_t *plen, lua_Integer *within)
{
	int isnum = 0;

	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "resume");
	*phase = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, plen) : NULL;
	if (*phase == NULL || *plen == 0 || *plen > SANDBOX_PHASE_MAX ||
	    strspn(*phase, "abcdefghijklmnopqrstuvwxyz0123456789_") != *plen)
		luaL_error(L,
			   "rcs.reboot: resume must be a phase name of 1 to %d characters a-z, 0-9"
			   " and _",
			   SANDBOX_PHASE_MAX);
	lua_getfield(L, 1, "within");
	if (lua_isnil(L, -1)) {
		*within = SANDBOX_WITHIN_DEFAULT;
	} else {
		*within = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
		if (!isnum || *within < SANDBOX_WITHIN_MIN || *within > SANDBOX_WITHIN_MAX)
			luaL_error(L, "rcs.reboot: within must be whole seconds from %d to %d",
				   SANDBOX_WITHIN_MIN, SANDBOX_WITHIN_MAX);
	}
	lua_pop(L, 1); /* within; the phase stays on the stack, *phase points into it */
}

/* rcs.reboot(): after the final report. rcs.reboot{resume = ..., within = ...}: the script
 * ends here (pcall cannot catch it), the job goes on in that phase after the reboot. */
static int rcs_reboot(lua_State *L)
{
	struct sbx_msg m;
	const char *f[2];
	size_t fl[2];
	char w[24];
	lua_Integer within = 0;

	if (lua_isnoneornil(L, 1)) {
		child_call(L, SBX_REBOOT, 0, NULL, NULL, &m);
		return 0;
	}
	child_reboot_args(L, &f[0], &fl[0], &within);
	fl[1] = (size_t)snprintf(w, sizeof(w), "%lld", (long long)within);
	f[1] = w;
	child_call(L, SBX_REBOOT, 2, f, fl, &m);
	child_result(child_of(L), SBX_RES_NIL, NULL, 0);
}

/* rcs.state.get(key) -> the value or nil */
static int rcs_state_get(lua_State *L)
{
	struct sbx_msg m;
	size_t len;
	const char *key = child_checkstr(L, 1, SANDBOX_STATE_KEY_MAX, "rcs.state: key", &len);
	char num[64];

	child_call(L, SBX_STATE_GET, 1, &key, &len, &m);
	if (m.nfields == 0) {
		lua_pushnil(L);
		return 1;
	}
	if (m.nfields != 2 || m.flen[0] != 1)
		_exit(CHILD_EXIT_PROTO);
	switch (m.f[0][0]) {
	case 's':
		lua_pushlstring(L, m.f[1], m.flen[1]);
		break;
	case 'b':
		lua_pushboolean(L, m.flen[1] == 4 && memcmp(m.f[1], "true", 4) == 0);
		break;
	case 'n':
		if (m.flen[1] == 0 || m.flen[1] >= sizeof(num))
			_exit(CHILD_EXIT_PROTO);
		memcpy(num, m.f[1], m.flen[1]);
		num[m.flen[1]] = '\0';
		if (lua_stringtonumber(L, num) == 0)
			_exit(CHILD_EXIT_PROTO);
		break;
	default:
		_exit(CHILD_EXIT_PROTO);
	}
	return 1;
}

/* rcs.state.set(key, value): a string, number or boolean; nil removes the key */
static int rcs_state_set(lua_State *L)
{
	struct sbx_msg m;
	const char *f[3];
	size_t fl[3];
	char num[64];
	size_t nf = 3;

	f[0] = child_checkstr(L, 1, SANDBOX_STATE_KEY_MAX, "rcs.state: key", &fl[0]);
	fl[1] = 1;
	switch (lua_type(L, 2)) {
	case LUA_TNONE:
	case LUA_TNIL:
		nf = 1;
		break;
	case LUA_TSTRING:
		f[1] = "s";
		f[2] = lua_tolstring(L, 2, &fl[2]);
		if (fl[2] > SANDBOX_STATE_VALUE_MAX)
			return luaL_error(L, "rcs.state.set: value longer than %d bytes",
					  SANDBOX_STATE_VALUE_MAX);
		break;
	case LUA_TNUMBER:
		f[1] = "n";
		if (lua_isinteger(L, 2)) {
			fl[2] = (size_t)snprintf(num, sizeof(num), LUA_INTEGER_FMT,
						 (LUAI_UACINT)lua_tointeger(L, 2));
		} else {
			lua_Number d = lua_tonumber(L, 2);
			if (!isfinite(d))
				return luaL_error(L,
						  "rcs.state.set: value must be a finite number");
			fl[2] = (size_t)snprintf(num, sizeof(num), "%.17g", (double)d);
		}
		f[2] = num;
		break;
	case LUA_TBOOLEAN:
		f[1] = "b";
		f[2] = lua_toboolean(L, 2) ? "true" : "false";
		fl[2] = strlen(f[2]);
		break;
	default:
		return luaL_error(
		    L, "rcs.state.set: value must be a string, number or boolean, not %s",
		    luaL_typename(L, 2));
	}
	child_call(L, SBX_STATE_SET, nf, f, fl, &m);
	return 0;
}

/* Ends the script at once (pcall cannot catch it): the job ends edge_error with code. */
static _Noreturn void child_fail(lua_State *L, const char *code, const char *text, size_t len)
{
	char k[16];
	const char *f[3] = {k, code, text};
	size_t fl[3];

	fl[0] = (size_t)snprintf(k, sizeof(k), "%d", (int)SBX_RES_FAIL);
	fl[1] = strlen(code);
	fl[2] = len > SANDBOX_REASON_MAX ? SANDBOX_REASON_MAX : len;
	child_send(child_of(L), SBX_RESULT, 3, f, fl);
	_exit(0);
}

static int rcs_fail(lua_State *L)
{
	const char *code = luaL_checkstring(L, 1);
	size_t len;
	const char *text = luaL_checklstring(L, 2, &len);

	for (size_t i = 0; sandbox_fail_codes[i]; i++)
		if (strcmp(code, sandbox_fail_codes[i]) == 0)
			child_fail(L, sandbox_fail_codes[i], text, len);
	return luaL_error(L,
			  "rcs.fail: unknown code '%s' (install_failed, health_check_failed,"
			  " incompatible or rolled_back)",
			  code);
}

/* rcs.rollback(text[, {reboot = true}]): the agent's rollback_command, then the job ends
 * edge_error rolled_back (and the device reboots after the final report when asked). */
static int rcs_rollback(lua_State *L)
{
	size_t len;
	const char *text = luaL_checklstring(L, 1, &len);
	bool reboot = false;
	struct sbx_msg m;

	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TTABLE);
		lua_getfield(L, 2, "reboot");
		if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
			return luaL_error(L, "rcs.rollback: reboot must be a boolean");
		reboot = lua_toboolean(L, -1);
		lua_pop(L, 1);
	}
	child_call(L, SBX_ROLLBACK, 0, NULL, NULL, &m);
	if (m.nfields != 5)
		_exit(CHILD_EXIT_PROTO);
	if (child_field_int(&m, 0) != 0 || child_field_int(&m, 3) != 0)
		return luaL_error(L, "rcs.rollback: the rollback command failed (exit %d%s): %s",
				  (int)child_field_int(&m, 0),
				  child_field_int(&m, 3) != 0 ? ", timed out" : "",
				  lua_pushlstring(L, m.f[1], m.flen[1] > 512 ? 512 : m.flen[1]));
	if (reboot)
		child_call(L, SBX_REBOOT, 0, NULL, NULL, &m);
	child_fail(L, "rolled_back", text, len);
}

static int rcs_file_read(lua_State *L)
{
	struct sbx_msg m;
	size_t len;
	const char *path = child_checkstr(L, 1, SANDBOX_PATH_MAX, "rcs.file: path", &len);

	child_call(L, SBX_FILE_READ, 1, &path, &len, &m);
	if (m.nfields != 1)
		_exit(CHILD_EXIT_PROTO);
	lua_pushlstring(L, m.f[0], m.flen[0]);
	return 1;
}

static int rcs_disk_free(lua_State *L)
{
	struct sbx_msg m;
	size_t len;
	const char *path = luaL_checklstring(L, 1, &len);

	if (len > SANDBOX_PATH_MAX || memchr(path, '\0', len) != NULL)
		return luaL_error(L, "rcs.disk.free: path longer than %d bytes or with NUL",
				  SANDBOX_PATH_MAX);
	child_call(L, SBX_DISK_FREE, 1, &path, &len, &m);
	if (m.nfields != 1 || m.flen[0] == 0 || m.flen[0] > 20)
		_exit(CHILD_EXIT_PROTO);
	{
		char num[24];
		memcpy(num, m.f[0], m.flen[0]);
		num[m.flen[0]] = '\0';
		lua_pushinteger(L, (lua_Integer)strtoll(num, NULL, 10));
	}
	return 1;
}

static int rcs_file_write(lua_State *L)
{
	struct sbx_msg m;
	const char *f[2];
	size_t fl[2];

	f[0] = child_checkstr(L, 1, SANDBOX_PATH_MAX, "rcs.file: path", &fl[0]);
	f[1] = luaL_checklstring(L, 2, &fl[1]);
	if (fl[1] > SANDBOX_FILE_MAX)
		return luaL_error(L, "rcs.file.write: data longer than %d bytes", SANDBOX_FILE_MAX);
	child_call(L, SBX_FILE_WRITE, 2, f, fl, &m);
	return 0;
}

/* ---- the sandbox environment ---- */

/* Globals of the base library a script keeps; the rest (dofile, loadfile,
   print, warn, require, collectgarbage, load) is dropped or wrapped. */
static const char *const child_base_globals[] = {
    "assert",   "error",  "getmetatable", "ipairs",   "next",   "pairs",        "pcall",
    "rawequal", "rawget", "rawlen",       "rawset",   "select", "setmetatable", "tonumber",
    "tostring", "type",   "xpcall",       "_VERSION", NULL,
};

/* Libraries opened (like linit.c) and copied whole into the environment. */
static const luaL_Reg child_libs[] = {
    {LUA_GNAME, luaopen_base},
    {LUA_STRLIBNAME, luaopen_string},
    {LUA_TABLIBNAME, luaopen_table},
    {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8},
    {LUA_COLIBNAME, luaopen_coroutine},
    {LUA_OSLIBNAME, luaopen_os}, /* only time, clock, date are copied */
    {NULL, NULL},
};

static const char *const child_os_allowed[] = {"time", "clock", "date", NULL};

static const luaL_Reg child_rcs_funcs[] = {
    {"progress", rcs_progress}, {"log", rcs_log},       {"exec", rcs_exec},
    {"sleep", rcs_sleep},       {"reboot", rcs_reboot}, {"fail", rcs_fail},
    {"rollback", rcs_rollback}, {NULL, NULL},
};

static const luaL_Reg child_rcs_config[] = {
    {"get", rcs_config_get},
    {"set", rcs_config_set},
    {NULL, NULL},
};

static const luaL_Reg child_rcs_state[] = {
    {"get", rcs_state_get},
    {"set", rcs_state_set},
    {NULL, NULL},
};

static const luaL_Reg child_rcs_disk[] = {
    {"free", rcs_disk_free},
    {NULL, NULL},
};

static const luaL_Reg child_rcs_file[] = {
    {"read", rcs_file_read},
    {"write", rcs_file_write},
    {NULL, NULL},
};

static int child_env_index(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TSTRING)
		return luaL_error(L, "unknown global '%s'", lua_tostring(L, 2));
	return luaL_error(L, "unknown global (a %s key)", luaL_typename(L, 2));
}

static int child_env_newindex(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TSTRING)
		return luaL_error(L, "assignment to unknown global '%s' (declare it local)",
				  lua_tostring(L, 2));
	return luaL_error(L, "assignment to unknown global (a %s key)", luaL_typename(L, 2));
}

static int child_readonly_newindex(lua_State *L)
{
	return luaL_error(L, "attempt to modify a read-only table");
}

/* The iterator of a read-only proxy: next() over the table behind it (upvalue 1). */
static int child_readonly_next(lua_State *L)
{
	lua_settop(L, 2);
	if (lua_next(L, lua_upvalueindex(1)) != 0)
		return 2;
	lua_pushnil(L);
	return 1;
}

/* __pairs of a read-only proxy: iterates without handing out the table itself. */
static int child_readonly_pairs(lua_State *L)
{
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushcclosure(L, child_readonly_next, 1);
	lua_pushvalue(L, 1);
	lua_pushnil(L);
	return 3;
}

static int child_readonly_len(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)lua_rawlen(L, lua_upvalueindex(1)));
	return 1;
}

/*
 * Marks the metatables of our read-only proxies, so a returned rcs.job reads
 * as its contents. A light userdata key: no script can make one.
 */
static const char child_readonly_key = 'r';

/* Replaces the table on top with a read-only proxy of it. */
static void child_make_readonly(lua_State *L)
{
	int t = lua_gettop(L);

	lua_newtable(L);          /* proxy */
	lua_createtable(L, 0, 6); /* its metatable */
	lua_pushboolean(L, 1);
	lua_rawsetp(L, -2, &child_readonly_key);
	lua_pushvalue(L, t);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, child_readonly_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushvalue(L, t);
	lua_pushcclosure(L, child_readonly_pairs, 1);
	lua_setfield(L, -2, "__pairs");
	lua_pushvalue(L, t);
	lua_pushcclosure(L, child_readonly_len, 1);
	lua_setfield(L, -2, "__len");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_replace(L, t);
}

/*
 * Pushes a JSON value as Lua (objects -> tables, arrays -> sequences, null ->
 * nil). With readonly every table becomes a read-only proxy.
 */
static void child_push_json(lua_State *L, json_object *v, int depth, bool readonly)
{
	if (depth > JSONU_MAX_DEPTH)
		luaL_error(L, "job data nested deeper than %d levels", JSONU_MAX_DEPTH);
	luaL_checkstack(L, 8, "job data");
	switch (json_object_get_type(v)) {
	case json_type_null:
		lua_pushnil(L);
		break;
	case json_type_boolean:
		lua_pushboolean(L, json_object_get_boolean(v));
		break;
	case json_type_int:
		lua_pushinteger(L, (lua_Integer)json_object_get_int64(v));
		break;
	case json_type_double:
		lua_pushnumber(L, (lua_Number)json_object_get_double(v));
		break;
	case json_type_string:
		lua_pushlstring(L, json_object_get_string(v),
				(size_t)json_object_get_string_len(v));
		break;
	case json_type_array: {
		size_t n = json_object_array_length(v);

		lua_createtable(L, n < INT32_MAX ? (int)n : 0, 0);
		for (size_t i = 0; i < n; i++) {
			child_push_json(L, json_object_array_get_idx(v, i), depth + 1, readonly);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		if (readonly)
			child_make_readonly(L);
		break;
	}
	case json_type_object:
		lua_newtable(L);
		json_object_object_foreach(v, key, val)
		{
			child_push_json(L, val, depth + 1, readonly);
			lua_setfield(L, -2, key);
		}
		if (readonly)
			child_make_readonly(L);
		break;
	}
}

/* The reader of load(f): the pieces f returns, until nil or an empty string (as Lua's). */
static const char *child_load_reader(lua_State *L, void *ud, size_t *size)
{
	(void)ud;
	luaL_checkstack(L, 2, "too many nested functions");
	lua_pushvalue(L, 1);
	lua_call(L, 0, 1);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		*size = 0;
		return NULL;
	}
	if (!lua_isstring(L, -1))
		luaL_error(L, "reader function must return a string");
	lua_replace(L, CHILD_LOAD_SLOT);
	return lua_tolstring(L, CHILD_LOAD_SLOT, size);
}

/*
 * load(chunk [, chunkname [, mode [, env]]]): Lua's own load (lbaselib.c),
 * so its errors carry the caller's position and name, but text only (mode
 * is checked and ignored) and the sandbox env (upvalue 1) by default.
 */
static int child_load(lua_State *L)
{
	size_t len;
	const char *s = lua_tolstring(L, 1, &len);
	int env = lua_isnone(L, 4) ? lua_upvalueindex(1) : 4; /* an explicit nil stays nil */
	int status;

	luaL_optstring(L, 3, "t");
	if (s != NULL) {
		status = luaL_loadbufferx(L, s, len, luaL_optstring(L, 2, s), "t");
	} else {
		const char *name = luaL_optstring(L, 2, "=(load)");

		luaL_checktype(L, 1, LUA_TFUNCTION);
		lua_settop(L, CHILD_LOAD_SLOT);
		status = lua_load(L, child_load_reader, NULL, name, "t");
	}
	if (status != LUA_OK) {
		luaL_pushfail(L);
		lua_insert(L, -2);
		return 2;
	}
	lua_pushvalue(L, env);
	if (lua_setupvalue(L, -2, 1) == NULL)
		lua_pop(L, 1);
	return 1;
}

/*
 * collectgarbage([opt [, arg]]) with the harmless options only. As in Lua,
 * fail (nil) when lua_gc can't serve the call (-1: inside a finalizer).
 */
static int child_collectgarbage(lua_State *L)
{
	static const char *const opts[] = {"collect", "count", "step", "isrunning", NULL};
	int res;

	switch (luaL_checkoption(L, 1, "collect", opts)) {
	case 0:
		res = lua_gc(L, LUA_GCCOLLECT);
		if (res != -1)
			lua_pushinteger(L, res);
		break;
	case 1:
		res = lua_gc(L, LUA_GCCOUNT);
		if (res != -1)
			lua_pushnumber(L, (lua_Number)res +
					      (lua_Number)lua_gc(L, LUA_GCCOUNTB) / 1024);
		break;
	case 2:
		res = lua_gc(L, LUA_GCSTEP, (int)luaL_optinteger(L, 2, 0));
		if (res != -1)
			lua_pushboolean(L, res);
		break;
	default:
		res = lua_gc(L, LUA_GCISRUNNING);
		if (res != -1)
			lua_pushboolean(L, res);
		break;
	}
	if (res == -1)
		luaL_pushfail(L);
	return 1;
}

/* Copies every field of the table at src into a new table on top. */
static void child_copy_table(lua_State *L, int src)
{
	lua_newtable(L);
	lua_pushnil(L);
	while (lua_next(L, src) != 0) {
		lua_pushvalue(L, -2);
		lua_insert(L, -2);
		lua_rawset(L, -4);
	}
}

static void child_push_rcs(lua_State *L, const struct sandbox_job *job)
{
	lua_newtable(L);
	luaL_setfuncs(L, child_rcs_funcs, 0);
	luaL_newlib(L, child_rcs_config);
	lua_setfield(L, -2, "config");
	luaL_newlib(L, child_rcs_file);
	lua_setfield(L, -2, "file");
	luaL_newlib(L, child_rcs_disk);
	lua_setfield(L, -2, "disk");
	luaL_newlib(L, child_rcs_state);
	lua_setfield(L, -2, "state");
	if (job->artifacts != NULL && json_object_is_type(job->artifacts, json_type_object)) {
		child_push_json(L, job->artifacts, 0, true);
	} else {
		lua_newtable(L);
		child_make_readonly(L);
	}
	lua_setfield(L, -2, "artifacts");
	if (job->variables != NULL && json_object_is_type(job->variables, json_type_object))
		child_push_json(L, job->variables, 0, false);
	else
		lua_newtable(L);
	lua_setfield(L, -2, "variables");
	if (job->constants != NULL && json_object_is_type(job->constants, json_type_object))
		child_push_json(L, job->constants, 0, false);
	else
		lua_newtable(L);
	lua_setfield(L, -2, "constants");
	if (job->job != NULL && json_object_is_type(job->job, json_type_object)) {
		child_push_json(L, job->job, 0, true);
	} else {
		lua_newtable(L);
		child_make_readonly(L);
	}
	lua_setfield(L, -2, "job");
}

/*
 * Protected: opens the libraries, builds the sandbox environment and leaves
 * it in the registry under "rcs.env". The real globals table is emptied, so
 * nothing reaches dofile & co even by accident.
 */
static int child_setup(lua_State *L)
{
	struct child *c = child_of(L);
	int g, env, loaded;

	for (const luaL_Reg *lib = child_libs; lib->name != NULL; lib++) {
		luaL_requiref(L, lib->name, lib->func, 0);
		lua_pop(L, 1);
	}
	lua_pushglobaltable(L);
	g = lua_gettop(L);
	lua_newtable(L);
	env = lua_gettop(L);
	for (const char *const *name = child_base_globals; *name != NULL; name++) {
		lua_getfield(L, g, *name);
		lua_setfield(L, env, *name);
	}

	lua_pushvalue(L, env);
	lua_pushcclosure(L, child_load, 1);
	lua_setfield(L, env, "load");
	lua_pushcfunction(L, child_collectgarbage);
	lua_setfield(L, env, "collectgarbage");

	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	loaded = lua_gettop(L);
	for (const luaL_Reg *lib = child_libs + 1; lib->name != NULL; lib++) {
		if (strcmp(lib->name, LUA_OSLIBNAME) == 0)
			continue;
		lua_getfield(L, -1, lib->name);
		child_copy_table(L, lua_gettop(L));
		lua_setfield(L, env, lib->name);
		lua_pop(L, 1);
	}
	/* the string metatable's __index is the sandbox's own string table */
	lua_pushliteral(L, "");
	if (!lua_getmetatable(L, -1))
		return luaL_error(L, "no string metatable");
	lua_getfield(L, env, LUA_STRLIBNAME);
	lua_setfield(L, -2, "__index");
	lua_pop(L, 2);
	/* os: time, clock, date */
	lua_getfield(L, -1, LUA_OSLIBNAME);
	lua_newtable(L);
	for (const char *const *name = child_os_allowed; *name != NULL; name++) {
		lua_getfield(L, -2, *name);
		lua_setfield(L, -2, *name);
	}
	lua_setfield(L, env, LUA_OSLIBNAME);
	lua_pop(L, 1); /* os */

	child_push_rcs(L, c->a->job);
	lua_setfield(L, env, "rcs");
	lua_pushvalue(L, env);
	lua_setfield(L, env, LUA_GNAME);

	/*
	 * Error messages name a function by looking it up in the loaded modules
	 * (luaL_argerror, luaL_traceback): as in stock Lua, _G there is the
	 * script's globals, and the host API is named too. Only C code reaches
	 * this table; the real globals stay empty.
	 */
	lua_pushvalue(L, env);
	lua_setfield(L, loaded, LUA_GNAME);
	lua_getfield(L, env, "rcs");
	lua_getfield(L, -1, "config");
	lua_setfield(L, loaded, "rcs.config");
	lua_getfield(L, -1, "file");
	lua_setfield(L, loaded, "rcs.file");
	lua_setfield(L, loaded, "rcs");
	lua_pop(L, 1); /* _LOADED */

	/* empty the real globals: only the sandbox env is reachable from now on */
	lua_pushnil(L);
	while (lua_next(L, g) != 0) {
		lua_pop(L, 1);
		lua_pushvalue(L, -1);
		lua_pushnil(L);
		lua_rawset(L, g);
	}
	/* unknown globals are errors, and the env's metatable can't be changed */
	lua_createtable(L, 0, 3);
	lua_pushcfunction(L, child_env_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, child_env_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, env);

	lua_pushvalue(L, env);
	lua_setfield(L, LUA_REGISTRYINDEX, "rcs.env");
	return 0;
}

/* ---- the deadline ---- */

/*
 * Every CHILD_HOOK_COUNT instructions: past the deadline, raise an error and
 * re-arm at every instruction, so no pcall in the script can get past it.
 * (Finalizers run without hooks; string patterns run in C: those the
 * parent's watchdog kills.)
 */
static void child_hook(lua_State *L, lua_Debug *ar)
{
	struct child *c = child_of(L);

	(void)ar;
	if (!c->timed_out) {
		if (sandbox_now_ms() < c->a->deadline_ms)
			return;
		c->timed_out = true;
	}
	lua_sethook(L, child_hook, LUA_MASKCOUNT, 1);
	lua_pushfstring(L, "timeout after %d s", (int)c->a->timeout);
	lua_error(L);
}

/* ---- the result ---- */

struct conv {
	struct child *c;
	const void *path[JSONU_MAX_DEPTH + 1]; /* tables being converted: recursion check */
	int depth;
	size_t est; /* rough size of the JSON text so far */
	enum sbx_result_kind kind;
	char why[160];
};

static json_object *conv_fail(struct conv *cv, enum sbx_result_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static json_object *conv_fail(struct conv *cv, enum sbx_result_kind kind, const char *fmt, ...)
{
	va_list ap;

	if (cv->kind == SBX_RES_OK) {
		cv->kind = kind;
		va_start(ap, fmt);
		vsnprintf(cv->why, sizeof(cv->why), fmt, ap);
		va_end(ap);
	}
	return NULL;
}

static json_object *conv_value(lua_State *L, struct conv *cv, int idx);

/* A number as Lua writes it ("%.14g", floats keep a ".0"). */
static void conv_number_text(lua_State *L, int idx, char *out, size_t n)
{
	if (lua_isinteger(L, idx)) {
		snprintf(out, n, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
		return;
	}
	snprintf(out, n, LUA_NUMBER_FMT, (LUAI_UACNUMBER)lua_tonumber(L, idx));
	if (out[strspn(out, "-0123456789")] == '\0')
		strncat(out, ".0", n - strlen(out) - 1);
}

static json_object *conv_table(lua_State *L, struct conv *cv, int idx)
{
	const void *p = lua_topointer(L, idx);
	json_object *o = NULL, *v;
	lua_Integer n = 0, maxk = 0;
	bool seq = true;

	if (cv->depth >= JSONU_MAX_DEPTH)
		return conv_fail(cv, SBX_RES_BADRESP, "tables nested deeper than %d levels",
				 JSONU_MAX_DEPTH);
	for (int i = 0; i < cv->depth; i++)
		if (cv->path[i] == p)
			return conv_fail(cv, SBX_RES_BADRESP, "recursive table");
	if (!lua_checkstack(L, 4))
		return conv_fail(cv, SBX_RES_MEMORY, "stack");
	cv->path[cv->depth++] = p;

	lua_pushnil(L);
	while (lua_next(L, idx) != 0) {
		lua_pop(L, 1);
		n++;
		if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
			if (lua_tointeger(L, -1) > maxk)
				maxk = lua_tointeger(L, -1);
		} else {
			seq = false;
		}
	}
	if (seq && n > 0 && maxk == n) {
		o = json_object_new_array_ext((int)(n < INT32_MAX ? n : 0));
		if (o == NULL) {
			conv_fail(cv, SBX_RES_MEMORY, "json");
			goto fail;
		}
		for (lua_Integer i = 1; i <= n; i++) {
			lua_rawgeti(L, idx, i);
			v = conv_value(L, cv, lua_gettop(L));
			lua_pop(L, 1);
			if (v == NULL || json_object_array_add(o, v) != 0) {
				json_object_put(v);
				goto fail;
			}
		}
		goto done;
	}
	o = json_object_new_object();
	if (o == NULL) {
		conv_fail(cv, SBX_RES_MEMORY, "json");
		goto fail;
	}
	lua_pushnil(L);
	while (lua_next(L, idx) != 0) {
		char num[CHILD_KEY_MAX];
		const char *key = num;
		size_t klen;

		if (lua_type(L, -2) == LUA_TSTRING) {
			key = lua_tolstring(L, -2, &klen);
			if (memchr(key, '\0', klen) != NULL) {
				conv_fail(cv, SBX_RES_BADRESP, "a table key contains a NUL byte");
				lua_pop(L, 2);
				goto fail;
			}
		} else if (lua_type(L, -2) == LUA_TNUMBER) {
			conv_number_text(L, -2, num, sizeof(num));
			klen = strlen(num);
		} else {
			conv_fail(cv, SBX_RES_BADRESP, "a table key of type %s",
				  luaL_typename(L, -2));
			lua_pop(L, 2);
			goto fail;
		}
		if (json_object_object_get_ex(o, key, NULL)) {
			conv_fail(cv, SBX_RES_BADRESP, "duplicate key \"%.64s\"", key);
			lua_pop(L, 2);
			goto fail;
		}
		cv->est += klen + 4;
		v = conv_value(L, cv, lua_gettop(L));
		lua_pop(L, 1);
		if (v == NULL || json_object_object_add(o, key, v) != 0) {
			json_object_put(v);
			lua_pop(L, 1);
			goto fail;
		}
	}
done:
	cv->depth--;
	return o;
fail:
	cv->depth--;
	json_object_put(o);
	return NULL;
}

static json_object *conv_value(lua_State *L, struct conv *cv, int idx)
{
	json_object *o = NULL;
	size_t len;
	const char *s;
	int top = lua_gettop(L);

	cv->est += 8;
	if (cv->est > cv->c->a->cfg->max_response)
		return conv_fail(cv, SBX_RES_TOOBIG, "too large");
	switch (lua_type(L, idx)) {
	case LUA_TBOOLEAN:
		o = json_object_new_boolean(lua_toboolean(L, idx));
		break;
	case LUA_TNUMBER:
		if (lua_isinteger(L, idx)) {
			o = json_object_new_int64((int64_t)lua_tointeger(L, idx));
			break;
		}
		if (!isfinite(lua_tonumber(L, idx)))
			return conv_fail(cv, SBX_RES_BADRESP, "NaN or infinity cannot be JSON");
		o = json_object_new_double((double)lua_tonumber(L, idx));
		break;
	case LUA_TSTRING:
		s = lua_tolstring(L, idx, &len);
		cv->est += len;
		if (cv->est > cv->c->a->cfg->max_response)
			return conv_fail(cv, SBX_RES_TOOBIG, "too large");
		if (!text_utf8_valid(s, len))
			return conv_fail(cv, SBX_RES_BADRESP, "a string is not valid UTF-8");
		o = json_object_new_string_len(s, (int)len);
		break;
	case LUA_TTABLE:
		if (!lua_checkstack(L, 3))
			return conv_fail(cv, SBX_RES_MEMORY, "stack");
		if (lua_getmetatable(L, idx)) {
			if (lua_rawgetp(L, -1, &child_readonly_key) != LUA_TNIL &&
			    lua_getfield(L, -2, "__index") == LUA_TTABLE) {
				/* one of our read-only proxies: the table behind it */
				o = conv_table(L, cv, lua_gettop(L));
				lua_settop(L, top);
				return o;
			}
			lua_settop(L, top);
		}
		return conv_table(L, cv, idx);
	default:
		return conv_fail(cv, SBX_RES_BADRESP, "a %s value cannot be JSON",
				 luaL_typename(L, idx));
	}
	if (o == NULL)
		return conv_fail(cv, SBX_RES_MEMORY, "json");
	return o;
}

/* Stores the response text of the value at idx in c->res and c->kind. */
static void child_response(lua_State *L, struct child *c, int idx)
{
	struct conv cv;
	json_object *o = NULL;
	const char *s;
	size_t len;
	enum rcs_err err;

	memset(&cv, 0, sizeof(cv));
	cv.c = c;
	cv.kind = SBX_RES_OK;
	switch (lua_type(L, idx)) {
	case LUA_TNONE:
	case LUA_TNIL:
		c->kind = SBX_RES_NIL;
		return;
	case LUA_TSTRING:
		s = lua_tolstring(L, idx, &len);
		if (len > c->a->cfg->max_response) {
			c->kind = SBX_RES_TOOBIG;
			return;
		}
		if (memchr(s, '\0', len) != NULL || !text_utf8_valid(s, len)) {
			c->kind = SBX_RES_BADRESP;
			buf_appendf(&c->res, "not NUL-free UTF-8 text");
			return;
		}
		break;
	case LUA_TNUMBER:
	case LUA_TBOOLEAN:
		s = luaL_tolstring(L, idx, &len);
		break;
	case LUA_TTABLE:
		o = conv_value(L, &cv, idx);
		if (o == NULL) {
			c->kind = cv.kind;
			buf_appendf(&c->res, "%s", cv.why);
			return;
		}
		err = canon_json(o, &c->res);
		json_object_put(o);
		if (err == RCS_OK && c->res.len > c->a->cfg->max_response)
			err = RCS_ERR_TOOBIG;
		c->kind = err == RCS_OK           ? SBX_RES_OK
			  : err == RCS_ERR_TOOBIG ? SBX_RES_TOOBIG
			  : err == RCS_ERR_NOMEM  ? SBX_RES_MEMORY
						  : SBX_RES_BADRESP;
		if (err == RCS_ERR_INVAL)
			buf_appendf(&c->res, "not representable as JSON");
		return;
	default:
		c->kind = SBX_RES_BADRESP;
		buf_appendf(&c->res, "a %s value cannot be a response", luaL_typename(L, idx));
		return;
	}
	c->kind = buf_append(&c->res, s, len) == RCS_OK ? SBX_RES_OK : SBX_RES_MEMORY;
}

/* The error object at idx as one line of text in c->res (SCRIPT or MEMORY). */
static void child_error(lua_State *L, struct child *c, int status, int idx)
{
	const char *msg;
	size_t len;

	if (status == LUA_ERRMEM) {
		c->kind = SBX_RES_MEMORY;
		return;
	}
	if (lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER) {
		msg = lua_tolstring(L, idx, &len);
	} else {
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
		len = strlen(msg);
	}
	if (c->mem_refused && strcmp(msg, "not enough memory") == 0) {
		c->kind = SBX_RES_MEMORY;
		return;
	}
	c->kind = SBX_RES_SCRIPT;
	/* one byte more than the parent keeps, so it can tell the text was cut */
	buf_append(&c->res, msg, len > SANDBOX_REASON_MAX ? SANDBOX_REASON_MAX + 1 : len);
}

/*
 * Protected: loads the script (text only) with the sandbox env as _ENV, runs
 * it under the count hook and turns its outcome into c->kind / c->res.
 */
static int child_run(lua_State *L)
{
	struct child *c = child_of(L);
	const struct sandbox_job *job = c->a->job;
	int status;

	status = luaL_loadbufferx(L, job->source, job->len, job->script_name, "t");
	if (status == LUA_OK) {
		lua_getfield(L, LUA_REGISTRYINDEX, "rcs.env");
		if (lua_setupvalue(L, -2, 1) == NULL)
			lua_pop(L, 1);
		lua_sethook(L, child_hook, LUA_MASKCOUNT, CHILD_HOOK_COUNT);
		status = lua_pcall(L, 0, 1, 0);
		lua_sethook(L, NULL, 0, 0);
	}
	if (c->timed_out) {
		c->kind = SBX_RES_TIMEOUT;
		return 0;
	}
	/* no finalizer may run while the result is read */
	lua_gc(L, LUA_GCSTOP);
	if (status != LUA_OK)
		child_error(L, c, status, lua_gettop(L));
	else
		child_response(L, c, lua_gettop(L));
	return 0;
}

static int child_panic(lua_State *L)
{
	struct child *c = child_of(L);
	const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
	char text[256];
	int n = snprintf(text, sizeof(text), "lua panic: %s", msg);

	child_result(c, SBX_RES_SETUP, text, n < 0 ? 0 : n < (int)sizeof(text) ? (size_t)n : 255);
}

/* ---- the jail ---- */

static void child_signals(pid_t parent)
{
	struct sigaction sa;
	sigset_t none;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &sa, NULL); /* SIGKILL, SIGSTOP and reserved ones fail: fine */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(CHILD_EXIT_IO);
}

/*
 * Things that would open files once the filter is in: the time zone (glibc
 * re-reads /etc/localtime in mktime() unless TZ names it) and json-c's hash
 * seed (getrandom or /dev/urandom on first use).
 */
static void child_warm_up(void)
{
	time_t now = time(NULL);
	struct tm tm;
	json_object *o;

	if (getenv("TZ") == NULL)
		setenv("TZ", ":/etc/localtime", 1);
	tzset();
	localtime_r(&now, &tm);
	mktime(&tm);
	o = json_object_new_object();
	if (o != NULL) {
		json_object_object_add(o, "warm-up", NULL);
		json_object_put(o);
	}
}

/* Bytes of address space the process uses now (0 when /proc can't tell). */
static size_t child_vsz(void)
{
	char tmp[128];
	unsigned long long pages = 0;
	ssize_t n;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, tmp, sizeof(tmp) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	tmp[n] = '\0';
	if (sscanf(tmp, "%llu", &pages) != 1)
		return 0;
	return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Moves the socket to CHILD_FD and closes every other descriptor. */
static void child_fds(int fd)
{
	if (fd != CHILD_FD && dup2(fd, CHILD_FD) != CHILD_FD)
		_exit(CHILD_EXIT_IO);
	for (int i = 0; i < CHILD_FD; i++)
		close(i);
	sandbox_close_from(CHILD_FD + 1);
}

/* ---- the job (SBX_JOB, the agent's first message) ---- */

/* A decimal field of SBX_JOB; a bad one ends the child (the agent wrote it). */
static long long child_job_num(const struct sbx_msg *m, int i)
{
	long long v = 0;

	if (m->flen[i] == 0 || m->flen[i] > 18)
		_exit(CHILD_EXIT_PROTO);
	for (size_t k = 0; k < m->flen[i]; k++) {
		if (m->f[i][k] < '0' || m->f[i][k] > '9')
			_exit(CHILD_EXIT_PROTO);
		v = v * 10 + (m->f[i][k] - '0');
	}
	return v;
}

/* A JSON field of SBX_JOB as a tree (NULL when empty): the agent's own text,
 * so anything but one whole JSON value is a protocol error. */
static json_object *child_job_json(const struct sbx_msg *m, int i)
{
	json_object *o = NULL;

	if (m->flen[i] == 0)
		return NULL;
	if (jsonu_parse(m->f[i], m->flen[i], JSONU_MAX_DEPTH + 2, &o, NULL) != RCS_OK || o == NULL)
		_exit(CHILD_EXIT_PROTO);
	return o;
}

/* Reads and decodes SBX_JOB into a, cfg and job (which keep pointing into it). */
static void child_job(struct sbx_child_args *a, struct sandbox_config *cfg, struct sandbox_job *job)
{
	unsigned char hdr[SBX_FRAME_HDR];
	struct sbx_msg m;
	uint32_t len;
	char *body, *name;

	child_read_all((char *)hdr, sizeof(hdr));
	len = sandbox_wire_len(hdr);
	if (len > SBX_JOB_MAX)
		_exit(CHILD_EXIT_PROTO);
	body = malloc(len ? len : 1);
	if (body == NULL)
		_exit(CHILD_EXIT_PANIC);
	child_read_all(body, len);
	if (sandbox_wire_decode(body, len, &m) != RCS_OK || m.op != SBX_JOB ||
	    m.nfields != SBX_JOB_NFIELDS_)
		_exit(CHILD_EXIT_PROTO);
	name = strndup(m.f[SBX_JOB_SCRIPT_NAME], m.flen[SBX_JOB_SCRIPT_NAME]);
	if (name == NULL)
		_exit(CHILD_EXIT_PANIC);
	memset(job, 0, sizeof(*job));
	job->script_name = name;
	job->source = m.f[SBX_JOB_SOURCE];
	job->len = m.flen[SBX_JOB_SOURCE];
	job->variables = child_job_json(&m, SBX_JOB_VARIABLES);
	job->constants = child_job_json(&m, SBX_JOB_CONSTANTS);
	job->job = child_job_json(&m, SBX_JOB_DATA);
	job->artifacts = child_job_json(&m, SBX_JOB_ARTIFACTS);
	job->cancel_fd = -1;
	sandbox_config_defaults(cfg);
	cfg->mem_limit = (size_t)child_job_num(&m, SBX_JOB_MEM_LIMIT);
	cfg->max_response = (size_t)child_job_num(&m, SBX_JOB_MAX_RESPONSE);
	cfg->allow_no_seccomp = child_job_num(&m, SBX_JOB_NO_SECCOMP) != 0;
	memset(a, 0, sizeof(*a));
	a->cfg = cfg;
	a->job = job;
	a->timeout = child_job_num(&m, SBX_JOB_TIMEOUT);
	a->deadline_ms = (int64_t)child_job_num(&m, SBX_JOB_DEADLINE);
	a->rx_max = (size_t)child_job_num(&m, SBX_JOB_RX_MAX);
	a->tx_max = (size_t)child_job_num(&m, SBX_JOB_TX_MAX);
}

/*
 * Lowers a limit (never above the current hard limit). Where the hard limit
 * can't be changed (valgrind refuses it for RLIMIT_NOFILE) the soft one is
 * enough: the child can't raise it, setrlimit is not in its filter.
 */
static bool child_limit(int res, rlim_t soft, rlim_t hard)
{
	struct rlimit rl;

	if (getrlimit(res, &rl) != 0)
		return false;
	if (rl.rlim_max != RLIM_INFINITY && hard > rl.rlim_max)
		hard = rl.rlim_max;
	if (soft > hard)
		soft = hard;
	rl.rlim_cur = soft;
	if (setrlimit(res, &(struct rlimit){soft, hard}) == 0)
		return true;
	return setrlimit(res, &rl) == 0;
}

static const char *child_rlimits(const struct sbx_child_args *a, size_t vsz)
{
	rlim_t cpu = (rlim_t)a->timeout + 1;

	if (!child_limit(RLIMIT_CORE, 0, 0))
		return "RLIMIT_CORE";
	if (!child_limit(RLIMIT_FSIZE, 0, 0))
		return "RLIMIT_FSIZE";
	if (!child_limit(RLIMIT_NPROC, 0, 0))
		return "RLIMIT_NPROC";
	if (!child_limit(RLIMIT_NOFILE, CHILD_FD + 1, CHILD_FD + 1))
		return "RLIMIT_NOFILE";
	if (!child_limit(RLIMIT_CPU, cpu, cpu + 1))
		return "RLIMIT_CPU";
#ifndef CHILD_ASAN
	/* address space: what the forked image holds now, plus the Lua heap and slack
	   (not set when that doesn't fit rlim_t: a 32-bit device near 4 GiB) */
	uint64_t as = (uint64_t)vsz + a->cfg->mem_limit + CHILD_AS_SLACK + a->rx_max + a->tx_max;

	if (vsz > 0 && as < (uint64_t)RLIM_INFINITY &&
	    !child_limit(RLIMIT_AS, (rlim_t)as, (rlim_t)as))
		return "RLIMIT_AS";
#else
	(void)vsz;
#endif
	return NULL;
}

static int child_rule(scmp_filter_ctx f, const char *name, unsigned n,
		      const struct scmp_arg_cmp *cmp)
{
	int nr = seccomp_syscall_resolve_name(name);

	if (nr == __NR_SCMP_ERROR)
		return -1;
	return seccomp_rule_add_array(f, SCMP_ACT_ALLOW, nr, n, cmp);
}

/*
 * The filter: kill the process on any system call but reading and writing
 * the socket, memory management (no executable mappings), clocks and exit.
 * Returns false when the kernel (or qemu-user) refuses it.
 */
static bool child_seccomp(void)
{
	static const char *const plain[] = {
	    "brk",        "munmap",       "mremap",        "madvise",      "exit",
	    "exit_group", "rt_sigreturn", "clock_gettime", "gettimeofday", "restart_syscall",
	    NULL};
	/* not on every architecture (32-bit arm, x86_64): added where they exist */
	static const char *const optional[] = {"clock_gettime64", "time", "sigreturn", NULL};
	struct scmp_arg_cmp fd = SCMP_A0(SCMP_CMP_EQ, CHILD_FD, 0);
	struct scmp_arg_cmp noexec = SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0);
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_KILL_PROCESS);
	bool ok = false, mmap_ok;

	if (f == NULL)
		f = seccomp_init(SCMP_ACT_KILL);
	if (f == NULL)
		goto out;
	if (seccomp_attr_set(f, SCMP_FLTATR_CTL_NNP, 1) != 0)
		goto out;
	if (child_rule(f, "read", 1, &fd) != 0 || child_rule(f, "write", 1, &fd) != 0 ||
	    child_rule(f, "mprotect", 1, &noexec) != 0)
		goto out;
	mmap_ok = child_rule(f, "mmap", 1, &noexec) == 0;
	mmap_ok = child_rule(f, "mmap2", 1, &noexec) == 0 || mmap_ok; /* 32-bit arm */
	if (!mmap_ok)
		goto out;
	for (const char *const *n = plain; *n != NULL; n++)
		if (child_rule(f, *n, 0, NULL) != 0)
			goto out;
	for (const char *const *n = optional; *n != NULL; n++)
		child_rule(f, *n, 0, NULL);
	/*
	 * Opening a file fails (EACCES) instead of killing: glibc's malloc reads
	 * /proc/sys/vm/overcommit_memory the first time it shrinks a thread's heap
	 * and copes when it can't. (The child now runs on the launcher's main
	 * arena, but a library that opens a file by the way must not kill it.)
	 */
	{
		const char *const opens[] = {"open", "openat", NULL};
		for (const char *const *n = opens; *n != NULL; n++) {
			int nr = seccomp_syscall_resolve_name(*n);
			if (nr != __NR_SCMP_ERROR &&
			    seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), nr, 0) != 0)
				goto out;
		}
	}
#ifdef CHILD_ASAN
	/* ASan's longjmp interceptor asks for the alternate signal stack (a query: no new one) */
	{
		struct scmp_arg_cmp query = SCMP_A0(SCMP_CMP_EQ, 0, 0);

		if (child_rule(f, "sigaltstack", 1, &query) != 0)
			goto out;
	}
#endif
	ok = seccomp_load(f) == 0;
out:
	if (f != NULL)
		seccomp_release(f);
	return ok;
}

_Noreturn void sandbox_child_main(int fd, pid_t launcher)
{
	/* this process's only ones */
	static struct child c;
	static struct sbx_child_args args;
	static struct sandbox_config cfg;
	static struct sandbox_job job;
	const struct sbx_child_args *a = &args;
	lua_State *L;
	const char *failed;
	const char *hello;
	size_t hello_len = 1, vsz;
	int status;

	child_signals(launcher);
	prctl(PR_SET_NAME, "rcs-jail", 0, 0, 0);
	child_fds(fd); /* the launcher's other descriptors go first */
	child_job(&args, &cfg, &job);
	memset(&c, 0, sizeof(c));
	c.a = a;
	c.mem_limit = a->cfg->mem_limit;
	buf_init(&c.tx, a->tx_max + SBX_FRAME_HDR);
	buf_init(&c.res, a->cfg->max_response + SANDBOX_REASON_MAX + 1);
	child_warm_up();
	child_fds(CHILD_FD); /* anything the warm-up left open */
	vsz = child_vsz();
	failed = child_rlimits(a, vsz);
	if (failed != NULL)
		child_result(&c, SBX_RES_SETUP, failed, strlen(failed));

	L = lua_newstate(child_alloc, &c);
	if (L == NULL)
		child_result(&c, SBX_RES_MEMORY, NULL, 0);
	lua_atpanic(L, child_panic);
	lua_pushcfunction(L, child_setup);
	status = lua_pcall(L, 0, 0, 0);
	if (status == LUA_ERRMEM)
		child_result(&c, SBX_RES_MEMORY, NULL, 0);
	if (status != LUA_OK) {
		size_t len = 0;
		const char *msg = lua_tolstring(L, -1, &len);

		child_result(&c, SBX_RES_SETUP, msg ? msg : "?", msg ? len : 1);
	}
	lua_gc(L, LUA_GCCOLLECT);

	c.seccomp = child_seccomp();
	if (!c.seccomp && !a->cfg->allow_no_seccomp)
		child_result(&c, SBX_RES_NOSECCOMP, NULL, 0);
	hello = c.seccomp ? "1" : "0";
	child_send(&c, SBX_HELLO, 1, &hello, &hello_len);

	lua_pushcfunction(L, child_run);
	status = lua_pcall(L, 0, 0, 0);
	if (status != LUA_OK) {
		if (c.timed_out)
			child_result(&c, SBX_RES_TIMEOUT, NULL, 0);
		if (status == LUA_ERRMEM)
			child_result(&c, SBX_RES_MEMORY, NULL, 0);
		failed = "the script's outcome could not be read";
		child_result(&c, SBX_RES_SETUP, failed, strlen(failed));
	}
	/*
	 * The outcome is in c.res: close the state, as lua.c does, so the
	 * finalizers of what is still alive run (they may still call rcs.*).
	 * Hooks are off in finalizers: one that hangs meets the watchdog. Not
	 * past the deadline, where the script's result is all that is left.
	 */
	if (c.kind != SBX_RES_TIMEOUT && sandbox_now_ms() < a->deadline_ms)
		lua_close(L);
	if (c.kind == SBX_RES_NIL || c.kind == SBX_RES_TIMEOUT || c.kind == SBX_RES_MEMORY ||
	    c.kind == SBX_RES_TOOBIG)
		child_result(&c, c.kind, NULL, 0);
	child_result(&c, c.kind, c.res.data ? c.res.data : "", c.res.len);
}
