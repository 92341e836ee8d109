/*
 * sandbox_wire.c - what both sides of the script jail use (see
 * sandbox_int.h): the frames on the socket between the agent and a jailed
 * child, UTF-8 checks, the monotonic clock in milliseconds, and closing
 * inherited descriptors. Used by sandbox.c (the agent side),
 * sandbox_launcher.c and sandbox_child.c (docs/agent.md "The sandbox
 * launcher").
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sandbox_int.h"

void sandbox_close_from(int first)
{
	struct rlimit rl;

	if (close_range((unsigned)first, ~0U, 0) == 0)
		return;
	/* no close_range (old kernel or emulator): one by one */
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > (1u << 20))
		rl.rlim_cur = 1u << 20;
	for (rlim_t i = (rlim_t)first; i < rl.rlim_cur; i++)
		close((int)i);
}

int64_t sandbox_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sbx_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

uint32_t sandbox_wire_len(const unsigned char hdr[SBX_FRAME_HDR])
{
	return (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
}

enum rcs_err sandbox_wire_encode(struct buf *out, uint8_t op, size_t nfields, const char *const *f,
				 const size_t *flen)
{
	unsigned char hdr[SBX_FRAME_HDR + 2];
	size_t body = 2;
	enum rcs_err err;

	if (nfields > SBX_MAX_FIELDS)
		return RCS_ERR_TOOBIG;
	for (size_t i = 0; i < nfields; i++) {
		if (flen[i] > UINT32_MAX - SBX_FRAME_HDR ||
		    body > UINT32_MAX - SBX_FRAME_HDR - flen[i])
			return RCS_ERR_TOOBIG;
		body += SBX_FRAME_HDR + flen[i];
	}
	if (body + SBX_FRAME_HDR > out->max || out->len > out->max - body - SBX_FRAME_HDR)
		return RCS_ERR_TOOBIG;
	sbx_put32(hdr, (uint32_t)body);
	hdr[4] = op;
	hdr[5] = (unsigned char)nfields;
	err = buf_append(out, hdr, sizeof(hdr));
	for (size_t i = 0; err == RCS_OK && i < nfields; i++) {
		unsigned char l[SBX_FRAME_HDR];

		sbx_put32(l, (uint32_t)flen[i]);
		err = buf_append(out, l, sizeof(l));
		if (err == RCS_OK && flen[i] > 0)
			err = buf_append(out, f[i], flen[i]);
	}
	return err;
}

enum rcs_err sandbox_wire_decode(const char *body, size_t len, struct sbx_msg *m)
{
	const unsigned char *p = (const unsigned char *)body;
	size_t off = 2;

	memset(m, 0, sizeof(*m));
	if (len < 2)
		return RCS_ERR_INVAL;
	m->op = p[0];
	if (!((m->op >= SBX_HELLO && m->op <= SBX_RESULT) || m->op == SBX_REPLY_OK ||
	      m->op == SBX_REPLY_ERR || m->op == SBX_JOB))
		return RCS_ERR_INVAL;
	m->nfields = p[1];
	if (m->nfields > SBX_MAX_FIELDS)
		return RCS_ERR_INVAL;
	for (size_t i = 0; i < m->nfields; i++) {
		uint32_t fl;

		if (len - off < SBX_FRAME_HDR)
			return RCS_ERR_INVAL;
		fl = sandbox_wire_len(p + off);
		off += SBX_FRAME_HDR;
		if (fl > len - off)
			return RCS_ERR_INVAL;
		m->f[i] = body + off;
		m->flen[i] = fl;
		off += fl;
	}
	return off == len ? RCS_OK : RCS_ERR_INVAL;
}
