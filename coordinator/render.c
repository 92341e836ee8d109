/*
 * render.c - records to the API's JSON text (render.h). The writer below, then one
 * function per record; the jobs' side (jobs, history, notifications, groups, envelopes) is
 * render_jobs.c.
 */
#include "render.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "store.h"
#include "store_audit.h"
#include "store_devices.h"
#include "store_keys.h"
#include "store_tasks.h"
#include "store_webhooks.h"

void render_init(struct render *w, struct buf *out)
{
	memset(w, 0, sizeof(*w));
	w->out = out;
	w->first[0] = true;
}

enum rcs_err render_end(struct render *w)
{
	if (w->err == RCS_OK && w->depth != 0)
		w->err = RCS_ERR_INTERNAL;
	return w->err;
}

static void render_put(struct render *w, const char *s, size_t n)
{
	if (w->err == RCS_OK)
		w->err = buf_append(w->out, s, n);
}

/* Whether a comma goes before the next value: between array elements and members (a key
 * took its own), so the caller writes it with the value in one go. */
static bool render_comma(struct render *w)
{
	bool comma;

	if (w->after_key) {
		w->after_key = false;
		return false;
	}
	comma = !w->first[w->depth];
	w->first[w->depth] = false;
	return comma;
}

/* What goes before a value: a comma between array elements (a key wrote its own). */
static void render_sep(struct render *w)
{
	if (render_comma(w))
		render_put(w, ",", 1);
}

/* Room for n more bytes of output; NULL once a write failed (the error sticks). */
static char *render_room(struct render *w, size_t n)
{
	return w->err == RCS_OK ? buf_room(w->out, n, &w->err) : NULL;
}

static void render_open(struct render *w, char c)
{
	render_sep(w);
	render_put(w, &c, 1);
	if (w->depth + 1 >= RENDER_MAX_DEPTH) {
		if (w->err == RCS_OK)
			w->err = RCS_ERR_INTERNAL;
		return;
	}
	w->depth++;
	w->first[w->depth] = true;
}

static void render_close(struct render *w, char c)
{
	if (w->depth == 0) {
		if (w->err == RCS_OK)
			w->err = RCS_ERR_INTERNAL;
		return;
	}
	w->depth--;
	render_put(w, &c, 1);
}

void render_obj_open(struct render *w)
{
	render_open(w, '{');
}

void render_obj_close(struct render *w)
{
	render_close(w, '}');
}

void render_arr_open(struct render *w)
{
	render_open(w, '[');
}

void render_arr_close(struct render *w)
{
	render_close(w, ']');
}

/* The string's bytes, escaped as RFC 8259 requires; the rest (valid UTF-8, checked where
 * it came in) as it is, a run at a time. */
#define RENDER_SHORT 128 /* a string up to this long without escapes: one write */

/* Whether any of the 8 bytes in v is a control character (< 0x20), '"' or '\\', by the
 * word-at-a-time tests for a zero byte and for a byte under n; a byte from 0x80 up never
 * counts. A word that does is looked at byte by byte. */
static bool render_word_needs_escape(uint64_t v)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
	uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');

	return (((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
}

/* The length of s's first run that needs no escape. */
static size_t render_plain_len(const char *s, size_t len)
{
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		memcpy(&v, s + i, 8);
		if (render_word_needs_escape(v))
			break;
	}
	while (i < len && (unsigned char)s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
		i++;
	return i;
}

/* [,]"s" followed by tail (a key's colon, or nothing) written in place when s is short and
 * needs no escape; false (nothing written, the comma still due) when it isn't. */
static bool render_quoted_short(struct render *w, bool comma, const char *s, size_t len,
				const char *tail, size_t tail_len)
{
	size_t n = (comma ? 1 : 0) + len + 2 + tail_len;
	char *p;

	if (len > RENDER_SHORT || render_plain_len(s, len) != len)
		return false;
	p = render_room(w, n);
	if (p == NULL)
		return true;
	if (comma)
		*p++ = ',';
	*p++ = '"';
	memcpy(p, s, len);
	p += len;
	*p++ = '"';
	if (tail_len > 0)
		memcpy(p, tail, tail_len);
	buf_added(w->out, n);
	return true;
}

/* [,]"s" escaped. */
static void render_escaped(struct render *w, bool comma, const char *s, size_t len)
{
	size_t run = 0;

	if (render_quoted_short(w, comma, s, len, "", 0))
		return;
	render_put(w, comma ? ",\"" : "\"", comma ? 2 : 1);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		size_t n = 0;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		render_put(w, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"':
			n = 2, memcpy(esc, "\\\"", 2);
			break;
		case '\\':
			n = 2, memcpy(esc, "\\\\", 2);
			break;
		case '\n':
			n = 2, memcpy(esc, "\\n", 2);
			break;
		case '\r':
			n = 2, memcpy(esc, "\\r", 2);
			break;
		case '\t':
			n = 2, memcpy(esc, "\\t", 2);
			break;
		case '\b':
			n = 2, memcpy(esc, "\\b", 2);
			break;
		case '\f':
			n = 2, memcpy(esc, "\\f", 2);
			break;
		default:
			n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c);
			break;
		}
		render_put(w, esc, n);
	}
	render_put(w, s + run, len - run);
	render_put(w, "\"", 1);
}

void render_key(struct render *w, const char *key)
{
	size_t len = strlen(key);
	bool comma = render_comma(w);

	if (!render_quoted_short(w, comma, key, len, ":", 1)) {
		render_escaped(w, comma, key, len);
		render_put(w, ":", 1);
	}
	w->after_key = true;
}

void render_strn(struct render *w, const char *s, size_t len)
{
	if (s == NULL)
		render_null(w);
	else
		render_escaped(w, render_comma(w), s, len);
}

void render_str(struct render *w, const char *s)
{
	render_strn(w, s, s ? strlen(s) : 0);
}

void render_int(struct render *w, long long v)
{
	char num[24], *end = num + sizeof(num), *p = end;
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--p = '-';
	if (render_comma(w))
		*--p = ',';
	render_put(w, p, (size_t)(end - p));
}

void render_bool(struct render *w, bool v)
{
	render_sep(w);
	render_put(w, v ? "true" : "false", v ? 4 : 5);
}

void render_null(struct render *w)
{
	if (render_comma(w))
		render_put(w, ",null", 5);
	else
		render_put(w, "null", 4);
}

void render_raw(struct render *w, const char *json)
{
	render_rawn(w, json, json ? strlen(json) : 0);
}

void render_rawn(struct render *w, const char *json, size_t len)
{
	if (json == NULL || len == 0) {
		render_null(w);
		return;
	}
	render_sep(w);
	render_put(w, json, len);
}

void render_kstr(struct render *w, const char *key, const char *s)
{
	render_key(w, key);
	render_str(w, s);
}

void render_kint(struct render *w, const char *key, long long v)
{
	render_key(w, key);
	render_int(w, v);
}

void render_kint_opt(struct render *w, const char *key, long long v)
{
	render_key(w, key);
	if (v)
		render_int(w, v);
	else
		render_null(w);
}

void render_kbool(struct render *w, const char *key, bool v)
{
	render_key(w, key);
	render_bool(w, v);
}

void render_kraw(struct render *w, const char *key, const char *json)
{
	render_key(w, key);
	render_raw(w, json);
}

void render_page_open(struct render *w, const struct store_page_info *pg)
{
	render_obj_open(w);
	render_kint(w, "page", pg->page);
	render_kint(w, "per_page", pg->per_page);
	render_kint(w, "total_pages",
		    pg->per_page > 0 ? (pg->total + pg->per_page - 1) / pg->per_page : 0);
	render_kint(w, "total_items", pg->total);
	render_key(w, "items");
	render_arr_open(w);
}

void render_page_close(struct render *w)
{
	render_arr_close(w);
	render_obj_close(w);
}

/* ---- records: keys and scripts ---- */

static void render_api_key_members(struct render *w, const struct key_rec *r)
{
	render_kstr(w, "ident", r->ident);
	render_kstr(w, "user", r->user);
	render_kstr(w, "role", role_name(r->role));
	render_kstr(w, "client_root", r->client_root);
	render_kint(w, "created_at", r->created_at);
	render_kint_opt(w, "revoked_at", r->revoked_at);
}

void render_api_key(struct render *w, const struct key_rec *r)
{
	render_obj_open(w);
	render_api_key_members(w, r);
	render_obj_close(w);
}

void render_api_key_new(struct render *w, const struct key_rec *r, const char *secret)
{
	render_obj_open(w);
	render_api_key_members(w, r);
	render_kstr(w, "api_key", secret);
	render_obj_close(w);
}

void render_api_key_list(struct render *w, const struct store_key_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_api_key(w, &l->items[i]);
	render_page_close(w);
}

static void render_script_members(struct render *w, const struct script_rec *r)
{
	render_kstr(w, "name", r->name);
	render_kstr(w, "sha256", r->sha256);
	render_kint(w, "size", r->size);
	render_kbool(w, "stock", r->stock);
	render_kint(w, "updated_at", r->updated_at);
	if (r->source != NULL) {
		render_key(w, "source");
		render_strn(w, r->source, r->source_len);
	}
}

void render_script(struct render *w, const struct script_rec *r)
{
	render_obj_open(w);
	render_script_members(w, r);
	render_obj_close(w);
}

void render_script_list(struct render *w, const struct store_script_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_script(w, &l->items[i]);
	render_page_close(w);
}

void render_script_put(struct render *w, const struct script_rec *r,
		       const struct render_task_bump *bumped, size_t n)
{
	render_obj_open(w);
	render_script_members(w, r);
	render_key(w, "tasks_updated");
	render_arr_open(w);
	for (size_t i = 0; i < n; i++) {
		render_obj_open(w);
		render_kstr(w, "ident", bumped[i].ident);
		render_kint(w, "version", bumped[i].version);
		render_obj_close(w);
	}
	render_arr_close(w);
	render_obj_close(w);
}

/* (end of keys and scripts) */

/* ---- records: tasks ---- */

void render_task(struct render *w, const struct task_rec *r)
{
	render_obj_open(w);
	render_kint(w, "version", r->version);
	render_kstr(w, "ident", r->ident);
	render_kstr(w, "client_root", r->client_root);
	render_kstr(w, "created_user", r->created_user);
	render_kstr(w, "update_user", r->update_user);
	render_kstr(w, "name", r->name);
	render_kstr(w, "script", r->script);
	render_kraw(w, "variables_info", r->variables_info);
	render_kraw(w, "constants", r->constants);
	render_kstr(w, "comment", r->comment);
	render_kstr(w, "active", r->active ? "true" : "false");
	render_kbool(w, "public", r->is_public);
	render_kbool(w, "hide", r->hide);
	render_kbool(w, "allow_offline", r->allow_offline);
	render_kint(w, "created_at", r->created_at);
	render_kint(w, "update_at", r->update_at);
	render_kraw(w, "notification_mail_list", r->mail_list);
	render_kraw(w, "notification_status_list", r->status_list);
	render_kint(w, "timeout", r->timeout);
	render_kstr(w, "script_sha256", r->script_sha256);
	render_kraw(w, "signature", r->signature);
	render_kraw(w, "retry", r->retry); /* docs/api.md "Rollouts" */
	/* docs/api.md "Tasks": the artifacts it pins, its release */
	render_kraw(w, "artifacts", r->artifacts ? r->artifacts : "{}");
	render_kraw(w, "release", r->release);
	render_kint(w, "download_timeout", r->download_timeout);
	render_obj_close(w);
}

void render_task_list(struct render *w, const struct store_task_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_task(w, &l->items[i]);
	render_page_close(w);
}

/* (end of tasks) */

/* ---- records: devices ---- */

void render_device(struct render *w, const struct device_rec *r)
{
	render_obj_open(w);
	render_kstr(w, "entity_ident", r->entity_ident);
	render_kstr(w, "client_root", r->client_root);
	render_kstr(w, "name", r->name);
	render_kraw(w, "tags", r->tags);
	render_kraw(w, "reported_tags", r->reported_tags);
	render_kbool(w, "online", r->online);
	render_kint_opt(w, "last_seen", r->last_seen);
	render_kstr(w, "agent_version", r->agent_version);
	render_kint(w, "created_at", r->created_at);
	render_kint(w, "update_at", r->update_at);
	render_kraw(w, "attributes", r->attributes ? r->attributes : "{}");
	render_obj_close(w);
}

void render_device_list(struct render *w, const struct store_device_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_device(w, &l->items[i]);
	render_page_close(w);
}

/* (end of devices) */

/* webhooks and the audit log */

static void render_webhook_members(struct render *w, const struct webhook_rec *r)
{
	render_kstr(w, "ident", r->ident);
	render_kstr(w, "url", r->url);
	render_kraw(w, "events", r->events);
	render_kraw(w, "statuses", r->statuses);
	render_kbool(w, "active", r->active);
	render_kstr(w, "created_user", r->created_user);
	render_kint(w, "created_at", r->created_at);
	render_kint(w, "update_at", r->update_at);
}

void render_webhook(struct render *w, const struct webhook_rec *r)
{
	render_obj_open(w);
	render_webhook_members(w, r);
	render_obj_close(w);
}

void render_webhook_new(struct render *w, const struct webhook_rec *r, const char *secret)
{
	render_obj_open(w);
	render_webhook_members(w, r);
	if (secret)
		render_kstr(w, "secret", secret);
	render_obj_close(w);
}

void render_webhook_list(struct render *w, const struct store_webhook_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++)
		render_webhook(w, &l->items[i]);
	render_page_close(w);
}

void render_webhook_delivery_page(struct render *w, const struct store_webhook_delivery_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++) {
		const struct webhook_delivery_rec *d = &l->items[i];

		render_obj_open(w);
		render_kstr(w, "id", d->ident);
		render_kstr(w, "type", d->type);
		render_kstr(w, "subject", d->subject);
		render_kstr(w, "status", d->status);
		render_kint(w, "ts", d->at);
		render_kstr(w, "state", d->state);
		render_kint(w, "created_at", d->created_at);
		render_kint_opt(w, "next_at", strcmp(d->state, "queued") == 0 ? d->next_at : 0);
		render_kint_opt(w, "done_at", d->done_at);
		render_kstr(w, "last_error", d->last_error);
		render_key(w, "attempts");
		render_arr_open(w);
		for (size_t k = 0; k < d->n; k++) {
			render_obj_open(w);
			render_kint(w, "at", d->attempts[k].at);
			render_kint(w, "duration_ms", d->attempts[k].duration_ms);
			render_kint_opt(w, "status_code", d->attempts[k].status_code);
			render_kstr(w, "error", d->attempts[k].error);
			render_obj_close(w);
		}
		render_arr_close(w);
		render_obj_close(w);
	}
	render_page_close(w);
}

void render_audit_page(struct render *w, const struct store_audit_list *l)
{
	render_page_open(w, &l->pg);
	for (size_t i = 0; i < l->n; i++) {
		const struct audit_rec *a = &l->items[i];

		render_obj_open(w);
		render_kint(w, "id", a->id);
		render_kint(w, "ts", a->ts);
		render_kstr(w, "user", a->user);
		render_kstr(w, "key_ident", a->key_ident);
		render_kstr(w, "method", a->method);
		render_kstr(w, "path", a->path);
		render_kstr(w, "target", a->target);
		render_kint(w, "status_code", a->status_code);
		render_kstr(w, "remote", a->remote);
		render_obj_close(w);
	}
	render_page_close(w);
}

/* (end of webhooks and the audit log) */
