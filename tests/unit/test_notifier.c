/*
 * Unit tests of notifier_format() (coordinator/notifier.c): the mail of one
 * notification. The headers (Date, Message-ID, From, To, Subject, MIME-Version,
 * Content-Type text/plain; charset=utf-8, 8bit), CRLF line endings everywhere,
 * CR/LF in a task or device name never starting a header line, a UTF-8 Subject
 * as RFC 2047 encoded words that decode back to the original, and a response
 * longer than 4096 bytes cut with a note (the cut never splitting a UTF-8
 * character).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "manifest.h"
#include "notifier.h"
#include "store_jobs.h"

#define JOB_ID  "0193a2b4-0000-7000-8000-00000000a001"
#define TASK_ID "0193a2b4-0000-7000-8000-00000000b002"
#define DEV_ID  "0193a2b4-0000-7000-8000-00000000c003"
#define FROM    "rcs@example.com"
#define TO      "ops@example.com"
#define MSGID   "5f1c0d2e.terminated@rcs.example.com"
#define NOW     1732200000 /* Thu, 21 Nov 2024 14:40:00 +0000 */

/* ---- helpers ---- */

/* The job record the notifier reads (strings borrowed: the record is never freed). */
static struct job_rec make_job(const char *task_name, const char *comment, const char *response)
{
	struct job_rec job;

	memset(&job, 0, sizeof(job));
	snprintf(job.ident, sizeof(job.ident), "%s", JOB_ID);
	snprintf(job.task_ident, sizeof(job.task_ident), "%s", TASK_ID);
	job.task_name = (char *)task_name;
	job.task_version = 3;
	snprintf(job.entity_ident, sizeof(job.entity_ident), "%s", DEV_ID);
	job.status = JS_TERMINATED;
	job.comment = (char *)comment;
	job.response = (char *)response;
	return job;
}

static char *format(const char *task_name, const char *device, const char *status,
		    const char *comment, const char *response)
{
	struct job_rec job = make_job(task_name, comment, response);
	char *mail = notifier_format(FROM, TO, &job, device, status, NOW, MSGID);

	assert_non_null(mail);
	return mail;
}

/* The header section (up to, not including, the blank line), malloc'd. */
static char *header_section(const char *mail)
{
	const char *end = strstr(mail, "\r\n\r\n");

	assert_non_null(end);
	return strndup(mail, (size_t)(end - mail) + 2); /* keeps the last CRLF */
}

static const char *body_of(const char *mail)
{
	const char *end = strstr(mail, "\r\n\r\n");

	assert_non_null(end);
	return end + 4;
}

/* How many header fields are named name (case-insensitive), and the unfolded
 * value of the last one (malloc'd, leading spaces removed) in *value. */
static int header_get(const char *mail, const char *name, char **value)
{
	char *head = header_section(mail);
	size_t nlen = strlen(name);
	int count = 0;

	if (value)
		*value = NULL;
	for (char *line = head; *line;) {
		char *eol = strstr(line, "\r\n");
		assert_non_null(eol);
		if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
			/* the value: this line and its continuation lines */
			char *v = line + nlen + 1, *end = eol;
			while (end[2] == ' ' || end[2] == '\t')
				end = strstr(end + 2, "\r\n");
			count++;
			if (value) {
				size_t k = 0;
				free(*value);
				*value = malloc((size_t)(end - v) + 1);
				for (char *p = v; p < end; p++)
					if (*p != '\r' && *p != '\n')
						(*value)[k++] = *p;
				(*value)[k] = '\0';
				char *s = *value;
				while (*s == ' ' || *s == '\t')
					s++;
				memmove(*value, s, strlen(s) + 1);
			}
			line = end + 2;
			continue;
		}
		line = eol + 2;
	}
	free(head);
	return count;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		size_t k;
		uint32_t cp;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xe0) == 0xc0) {
			k = 1;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		for (size_t j = 1; j <= k; j++) {
			if (i + j >= n || (s[i + j] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3f);
		}
		if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

/* Set by rfc2047_decode() when an encoded word holds a broken UTF-8 sequence. */
static bool rfc2047_bad_word;

/*
 * Decodes an unstructured header value with RFC 2047 encoded words
 * (=?charset?B?...?= or =?charset?Q?...?=; whitespace between two encoded
 * words is dropped). Every encoded word must be at most 75 characters and name
 * UTF-8; one that does not hold whole UTF-8 characters sets rfc2047_bad_word.
 * Returns a malloc'd string.
 */
static char *rfc2047_decode(const char *v)
{
	size_t cap = strlen(v) * 2 + 16, n = 0;
	char *out = calloc(1, cap);
	bool last_encoded = false;
	const char *p = v;

	rfc2047_bad_word = false;
	while (*p) {
		const char *ws = p;
		while (*p == ' ' || *p == '\t')
			p++;
		size_t wslen = (size_t)(p - ws);
		const char *tok = p;
		while (*p && *p != ' ' && *p != '\t')
			p++;
		size_t toklen = (size_t)(p - tok);
		if (toklen == 0)
			break;
		bool encoded = toklen > 6 && strncmp(tok, "=?", 2) == 0 &&
			       strncmp(tok + toklen - 2, "?=", 2) == 0;
		if (!encoded) {
			if (n > 0 || wslen == 0) {
				memcpy(out + n, ws, wslen);
				n += wslen;
			}
			memcpy(out + n, tok, toklen);
			n += toklen;
			last_encoded = false;
			continue;
		}
		if (!last_encoded && n > 0) {
			memcpy(out + n, ws, wslen);
			n += wslen;
		}
		assert_true(toklen <= 75); /* RFC 2047 section 2 */
		char word[128], *q1, *q2;
		memcpy(word, tok, toklen);
		word[toklen] = '\0';
		q1 = strchr(word + 2, '?');
		assert_non_null(q1);
		q2 = strchr(q1 + 1, '?');
		assert_non_null(q2);
		*q1 = '\0';
		assert_int_equal(strcasecmp(word + 2, "UTF-8"), 0);
		word[toklen - 2] = '\0';
		unsigned char dec[128];
		size_t dlen = 0;
		if (toupper((unsigned char)q1[1]) == 'B') {
			assert_int_equal(b64_decode(q2 + 1, dec, sizeof(dec), &dlen), RCS_OK);
		} else {
			assert_int_equal(toupper((unsigned char)q1[1]), 'Q');
			for (const char *s = q2 + 1; *s; s++) {
				if (*s == '_') {
					dec[dlen++] = ' ';
				} else if (*s == '=' && isxdigit((unsigned char)s[1]) &&
					   isxdigit((unsigned char)s[2])) {
					char hx[3] = {s[1], s[2], 0};
					dec[dlen++] = (unsigned char)strtol(hx, NULL, 16);
					s += 2;
				} else {
					dec[dlen++] = (unsigned char)*s;
				}
			}
		}
		/* each encoded word holds whole characters (RFC 2047 section 5) */
		if (!utf8_valid(dec, dlen))
			rfc2047_bad_word = true;
		memcpy(out + n, dec, dlen);
		n += dlen;
		last_encoded = true;
	}
	out[n] = '\0';
	return out;
}

/* Every \n is preceded by \r and every \r followed by \n. */
static void assert_crlf_only(const char *mail)
{
	for (size_t i = 0; mail[i]; i++) {
		if (mail[i] == '\n' && (i == 0 || mail[i - 1] != '\r'))
			fail_msg("bare LF at byte %zu: ...%.40s", i, mail + (i > 20 ? i - 20 : 0));
		if (mail[i] == '\r' && mail[i + 1] != '\n')
			fail_msg("bare CR at byte %zu: ...%.40s", i, mail + (i > 20 ? i - 20 : 0));
	}
	size_t n = strlen(mail);
	assert_true(n >= 2 && strcmp(mail + n - 2, "\r\n") == 0);
}

static const char *const KNOWN_HEADERS[] = {"Date",
					    "Message-ID",
					    "From",
					    "To",
					    "Subject",
					    "MIME-Version",
					    "Content-Type",
					    "Content-Transfer-Encoding",
					    "Auto-Submitted",
					    "Precedence",
					    "X-Auto-Response-Suppress",
					    "Reply-To",
					    "X-Mailer",
					    NULL};

/* Every header line is a continuation (space/tab) or starts a known field; none
 * is longer than 998 characters (RFC 5322 section 2.1.1). */
static void assert_header_lines_sane(const char *mail)
{
	char *head = header_section(mail);

	for (char *line = head; *line;) {
		char *eol = strstr(line, "\r\n");
		assert_non_null(eol);
		assert_true(eol - line <= 998);
		if (*line != ' ' && *line != '\t') {
			bool known = false;
			for (int i = 0; KNOWN_HEADERS[i]; i++) {
				size_t k = strlen(KNOWN_HEADERS[i]);
				if (strncasecmp(line, KNOWN_HEADERS[i], k) == 0 && line[k] == ':')
					known = true;
			}
			if (!known)
				fail_msg("unexpected header line: %.*s", (int)(eol - line), line);
		}
		line = eol + 2;
	}
	free(head);
}

static char *subject_of(const char *mail)
{
	char *v = NULL, *s;

	assert_int_equal(header_get(mail, "Subject", &v), 1);
	s = rfc2047_decode(v);
	free(v);
	return s;
}

static char *repeat(const char *unit, size_t times)
{
	size_t u = strlen(unit);
	char *s = malloc(u * times + 1);

	for (size_t i = 0; i < times; i++)
		memcpy(s + i * u, unit, u);
	s[u * times] = '\0';
	return s;
}

/* ---- tests ---- */

static void test_headers(void **state)
{
	char *mail =
	    format("Nightly Reboot", "Lab Router 7", "terminated", "window 42", "ok: done");
	char *v = NULL;

	(void)state;
	assert_int_equal(header_get(mail, "Date", &v), 1);
	assert_true(strncmp(v, "Thu, 21 Nov 2024 14:40:00 ", 26) == 0);
	assert_true(strcmp(v + 26, "+0000") == 0 || strcmp(v + 26, "GMT") == 0 ||
		    strcmp(v + 26, "-0000") == 0);
	free(v);
	assert_int_equal(header_get(mail, "Message-ID", &v), 1);
	assert_string_equal(v, "<" MSGID ">");
	free(v);
	assert_int_equal(header_get(mail, "From", &v), 1);
	assert_non_null(strstr(v, FROM));
	free(v);
	assert_int_equal(header_get(mail, "To", &v), 1);
	assert_non_null(strstr(v, TO));
	free(v);
	assert_int_equal(header_get(mail, "MIME-Version", &v), 1);
	assert_string_equal(v, "1.0");
	free(v);
	assert_int_equal(header_get(mail, "Content-Type", &v), 1);
	assert_non_null(strcasestr(v, "text/plain"));
	assert_true(strcasestr(v, "charset=utf-8") != NULL ||
		    strcasestr(v, "charset=\"utf-8\"") != NULL);
	free(v);
	assert_int_equal(header_get(mail, "Content-Transfer-Encoding", &v), 1);
	assert_int_equal(strcasecmp(v, "8bit"), 0);
	free(v);
	assert_int_equal(header_get(mail, "Bcc", NULL), 0);

	/* the subject names the task, the device and the new status */
	v = subject_of(mail);
	assert_non_null(strstr(v, "Nightly Reboot"));
	assert_non_null(strstr(v, "Lab Router 7"));
	assert_non_null(strstr(v, "terminated"));
	free(v);
	assert_header_lines_sane(mail);
	assert_crlf_only(mail);
	free(mail);
}

static void test_body(void **state)
{
	char *mail = format("Nightly Reboot", "Lab Router 7", "edge_error", "window 42",
			    "disk full on /var");
	const char *body = body_of(mail);

	(void)state;
	assert_non_null(strstr(body, JOB_ID));
	assert_non_null(strstr(body, "Nightly Reboot"));
	assert_non_null(strstr(body, "Lab Router 7"));
	assert_non_null(strstr(body, "edge_error"));
	assert_non_null(strstr(body, "2024-11-21") ? strstr(body, "14:40")
						   : strstr(body, "21 Nov 2024"));
	assert_non_null(strstr(body, "window 42"));
	assert_non_null(strstr(body, "disk full on /var"));
	free(mail);

	/* without a device name: the entity ident; without comment and response: fine */
	mail = format("T", NULL, "terminated", NULL, NULL);
	assert_non_null(strstr(body_of(mail), DEV_ID));
	char *s = subject_of(mail);
	assert_non_null(strstr(s, DEV_ID));
	free(s);
	assert_crlf_only(mail);
	free(mail);
}

static void test_crlf_everywhere(void **state)
{
	static const char *const nasty[] = {"a\nb",  "a\rb",        "a\r\nb",    "a\n\rb", "\r\n",
					    "\n.\n", "a\r\n.\r\nb", "tab\there", NULL};

	(void)state;
	for (int i = 0; nasty[i]; i++) {
		char *mail = format(nasty[i], nasty[i], "terminated", nasty[i], nasty[i]);
		assert_crlf_only(mail);
		assert_header_lines_sane(mail);
		free(mail);
	}
}

static void test_no_header_injection(void **state)
{
	static const char *const names[] = {
	    "x\r\nBcc: evil@example.net",
	    "x\nBcc: evil@example.net",
	    "x\rBcc: evil@example.net",
	    "x\r\n\r\nbody starts here",
	    "x\r\n Bcc: folded@example.net",
	    "Redémarrage\r\nBcc: evil@example.net", /* the encoded-word path */
	    NULL,
	};

	(void)state;
	for (int i = 0; names[i]; i++) {
		char *mail = format(names[i], "dev", "terminated", "c", "r");
		assert_header_lines_sane(mail);
		assert_int_equal(header_get(mail, "Bcc", NULL), 0);
		assert_int_equal(header_get(mail, "Subject", NULL), 1);
		assert_crlf_only(mail);
		free(mail);

		mail = format("task", names[i], "terminated", "c", "r");
		assert_header_lines_sane(mail);
		assert_int_equal(header_get(mail, "Bcc", NULL), 0);
		assert_int_equal(header_get(mail, "Subject", NULL), 1);
		assert_crlf_only(mail);
		free(mail);
	}
}

static void test_utf8_subject(void **state)
{
	static const struct {
		const char *task, *device;
	} cases[] = {
	    {"Redémarrage ✓", "Gerät Süd"},
	    {"夜間の再起動", "ルーター"},
	    {"plain task", "Gerät"},
	    /* long enough for several encoded words, cut between characters */
	    {"ééééééééééééééééééééééééééééééééééééééééééééééééééé",
	     "日本語日本語日本語日本語日本語"},
	    {"a😀b😀c😀d😀e😀f😀g😀h😀i😀j😀k😀l😀m😀n😀", "x"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *mail = format(cases[i].task, cases[i].device, "edge_error", "c", "r");
		char *head = header_section(mail), *s;

		/* the header section is 7-bit */
		for (const char *p = head; *p; p++)
			assert_true((unsigned char)*p < 0x80);
		s = subject_of(mail);
		if (rfc2047_bad_word)
			fail_msg("an encoded word of the Subject splits a UTF-8 character");
		assert_true(utf8_valid((const unsigned char *)s, strlen(s)));
		if (strstr(s, cases[i].task) == NULL || strstr(s, cases[i].device) == NULL)
			fail_msg("subject decodes to \"%s\", without \"%s\" or \"%s\"", s,
				 cases[i].task, cases[i].device);
		assert_non_null(strstr(s, "edge_error"));
		/* the body is UTF-8 as is (8bit) */
		assert_non_null(strstr(body_of(mail), cases[i].task));
		assert_non_null(strstr(body_of(mail), cases[i].device));
		assert_header_lines_sane(mail);
		assert_crlf_only(mail);
		free(s);
		free(head);
		free(mail);
	}
}

/* RFC 2047 section 2: a line of a header field holding encoded words is at most 76 characters. */
static void test_utf8_subject_line_length(void **state)
{
	char *mail = format("Redémarrage de la pompe à huile numéro sept", "Gerät Süd-Ost",
			    "terminated", "c", "r");
	char *head = header_section(mail);
	bool in_subject = false;

	(void)state;
	for (char *line = head; *line;) {
		char *eol = strstr(line, "\r\n");
		if (*line != ' ' && *line != '\t')
			in_subject = strncasecmp(line, "Subject:", 8) == 0;
		if (in_subject && eol - line > 76)
			fail_msg("Subject line of %d characters (RFC 2047: at most 76): %.*s",
				 (int)(eol - line), (int)(eol - line), line);
		line = eol + 2;
	}
	free(head);
	free(mail);
}

/* Names at their API limit (200 bytes) made of multi-byte characters: whatever
 * the subject keeps of them decodes to valid UTF-8. */
static void test_long_utf8_names_stay_valid(void **state)
{
	static const char *const units[] = {"é", "夜", "😀"};

	(void)state;
	for (size_t u = 0; u < 3; u++) {
		for (size_t lead = 0; lead < 4; lead++) {
			size_t ulen = strlen(units[u]);
			char *name = malloc(201), *rep = repeat(units[u], (200 - lead) / ulen);
			snprintf(name, 201, "%.*s%s", (int)lead, "aaaa", rep);
			char *mail = format(name, name, "terminated", name, "r");
			char *s = subject_of(mail);
			if (rfc2047_bad_word || !utf8_valid((const unsigned char *)s, strlen(s)))
				fail_msg(
				    "subject of a %zu-byte name (%zu leading ASCII, then %s) is "
				    "not valid UTF-8",
				    strlen(name), lead, units[u]);
			const char *b = body_of(mail);
			if (!utf8_valid((const unsigned char *)b, strlen(b)))
				fail_msg("body with a %zu-byte name is not valid UTF-8",
					 strlen(name));
			free(s);
			free(mail);
			free(rep);
			free(name);
		}
	}
}

static size_t count_char(const char *s, char c)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

static void test_response_truncated(void **state)
{
	char *resp = repeat("x", 10000), *mail, *full;
	const char *body;

	(void)state;
	/* long lines are wrapped, so count the response's bytes, not one run */
	mail = format("T", "D", "terminated", "c", resp);
	body = body_of(mail);
	assert_int_equal(count_char(body, 'x'), 4096);
	assert_true(strlen(mail) < 4096 + 3000);
	assert_crlf_only(mail);
	if (strcasestr(body, "more bytes") == NULL)
		fail_msg("the note does not say the response was cut: %s", body);

	/* exactly 4096 bytes: all of it, and no note */
	resp[4096] = '\0';
	full = format("T", "D", "terminated", "c", resp);
	assert_int_equal(count_char(body_of(full), 'x'), 4096);
	assert_null(strcasestr(body_of(full), "more bytes"));
	free(full);
	free(mail);

	/* lines count their bytes, CRLF or LF */
	free(resp);
	resp = repeat("yyyyyyy\n", 2000); /* 16000 bytes */
	mail = format("T", "D", "terminated", "c", resp);
	assert_true(strlen(body_of(mail)) < 4096 * 2 + 2000);
	assert_crlf_only(mail);
	free(mail);
	free(resp);
}

/* RFC 5321 4.5.3.1.6 / RFC 5322 2.1.1: no line of the mail is longer than 998
 * characters, whatever the response or the comment hold (one long line here). */
static void test_lines_at_most_998(void **state)
{
	char *resp = repeat("x", 4000), *comment = repeat("y", 4096);
	char *mail = format("T", "D", "terminated", comment, resp);
	size_t longest = 0, cur = 0;

	(void)state;
	for (const char *p = mail; *p; p++) {
		if (p[0] == '\r' && p[1] == '\n') {
			if (cur > longest)
				longest = cur;
			cur = 0;
			p++;
		} else {
			cur++;
		}
	}
	if (longest > 998)
		fail_msg("a line of %zu characters in the mail (at most 998)", longest);
	free(mail);
	free(comment);
	free(resp);
}

/* The cut of a long response never splits a UTF-8 character: the body declared
 * charset=utf-8 stays valid UTF-8. */
static void test_response_cut_keeps_utf8(void **state)
{
	static const char *const units[] = {"é", "夜", "😀"};

	(void)state;
	for (size_t u = 0; u < 3; u++) {
		for (size_t lead = 0; lead < 4; lead++) {
			char *rep = repeat(units[u], 3000), *text = malloc(strlen(rep) + 8);
			sprintf(text, "%.*s%s", (int)lead, "aaaa", rep);
			char *mail = format("T", "D", "terminated", NULL, text);
			const char *b = body_of(mail);
			if (!utf8_valid((const unsigned char *)b, strlen(b)))
				fail_msg(
				    "response of %zu bytes (%zu leading ASCII, then %s): the body "
				    "is not valid UTF-8",
				    strlen(text), lead, units[u]);
			free(mail);
			free(text);
			free(rep);
		}
	}
}

/* The same for a long comment (the API takes up to 4096 bytes). */
static void test_comment_cut_keeps_utf8(void **state)
{
	static const char *const units[] = {"é", "夜", "😀"};

	(void)state;
	for (size_t u = 0; u < 3; u++) {
		for (size_t lead = 0; lead < 4; lead++) {
			char *rep = repeat(units[u], 3000), *text = malloc(strlen(rep) + 8);
			size_t cut = 4096;
			sprintf(text, "%.*s%s", (int)lead, "aaaa", rep);
			while (((unsigned char)text[cut] & 0xc0) == 0x80)
				cut--;
			text[cut] = '\0';
			char *mail = format("T", "D", "terminated", text, "r");
			const char *b = body_of(mail);
			if (!utf8_valid((const unsigned char *)b, strlen(b)))
				fail_msg(
				    "comment of %zu bytes (%zu leading ASCII, then %s): the body "
				    "is not valid UTF-8",
				    strlen(text), lead, units[u]);
			free(mail);
			free(text);
			free(rep);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_headers),
	    cmocka_unit_test(test_body),
	    cmocka_unit_test(test_crlf_everywhere),
	    cmocka_unit_test(test_no_header_injection),
	    cmocka_unit_test(test_utf8_subject),
	    cmocka_unit_test(test_utf8_subject_line_length),
	    cmocka_unit_test(test_long_utf8_names_stay_valid),
	    cmocka_unit_test(test_response_truncated),
	    cmocka_unit_test(test_lines_at_most_998),
	    cmocka_unit_test(test_response_cut_keeps_utf8),
	    cmocka_unit_test(test_comment_cut_keeps_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
