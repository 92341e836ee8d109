/*
 * fuzz_notification - the notification lists of task and job bodies
 * (coordinator/validate.c validate_mail_list, validate_status_list,
 * validate_email) and the mail made of a status change
 * (coordinator/notifier.c notifier_format) from what operators and devices
 * wrote: task name, device name, job comment, the device's response.
 *
 * Input: a JSON object {"notification_mail_list": [...],
 * "notification_status_list": [...], "task_name", "device_name", "comment",
 * "response", "task_version", "now"}; the lists are read as the handlers read
 * them (jsonu_get_string_array with their bounds), and a mail is made for
 * each address that passed (the first four at most), for each listed status.
 *
 * Properties: an address passes only when it has one '@', no space, control
 * character or <>; the mail has only CRLF line ends; its header lines are
 * the nine the notifier writes (Subject may be folded), hold no control
 * character and no line is over 998 bytes (RFC 5322); so nothing the
 * operators or the device wrote can add a header or a recipient.
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_coord.h"
#include "fuzz_util.h"
#include "notifier.h"
#include "store_jobs.h"
#include "validate.h"

#define FUZZ_FROM "rcs@example.com"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	return 0;
}

static void check_address(const char *a)
{
	const char *at = strchr(a, '@');

	FUZZ_CHECK(at != NULL && strchr(at + 1, '@') == NULL && at != a && at[1] != '\0',
		   "'%s' passed without one inner '@'", a);
	FUZZ_CHECK(strpbrk(a, " <>\r\n\t") == NULL && fuzz_printable_line(a),
		   "'%s' passed with a space, control character or <>", a);
}

static void check_mail(const char *mail)
{
	static const char *const headers[] = {"Date: ",           "Message-ID: <",
					      "From: <",          "To: <",
					      "Subject:",         "MIME-Version: ",
					      "Content-Type: ",   "Content-Transfer-Encoding: ",
					      "Auto-Submitted: ", NULL};
	const char *p = mail;
	bool in_header = true, after_subject = false;

	FUZZ_CHECK(mail != NULL, "no mail");
	while (*p) {
		const char *eol = strstr(p, "\r\n");
		size_t len;

		FUZZ_CHECK(eol != NULL, "the mail does not end with CRLF");
		len = (size_t)(eol - p);
		FUZZ_CHECK(memchr(p, '\n', len) == NULL && memchr(p, '\r', len) == NULL,
			   "a bare CR or LF in the mail");
		FUZZ_CHECK(len <= 998, "a line of %zu bytes", len);
		if (in_header && len == 0) {
			in_header = false;
		} else if (in_header) {
			bool known = false;
			for (size_t i = 0; headers[i] && !known; i++)
				known = strncmp(p, headers[i], strlen(headers[i])) == 0;
			if (!known) /* only the Subject is folded */
				FUZZ_CHECK(after_subject && p[0] == ' ',
					   "unexpected header line: %.*s", (int)len, p);
			else
				after_subject = strncmp(p, "Subject:", 8) == 0;
			for (size_t i = 0; i < len; i++)
				FUZZ_CHECK((unsigned char)p[i] >= 0x20 && p[i] != 0x7f,
					   "a control character in a header: %.*s", (int)len, p);
		}
		p = eol + 2;
	}
	FUZZ_CHECK(!in_header, "the mail has no body");
}

/* The job record the notifier reads; its strings are borrowed from in. */
static struct job_rec job_record(json_object *in)
{
	struct job_rec job;
	json_object *v;

	memset(&job, 0, sizeof(job));
	snprintf(job.ident, sizeof(job.ident), "%s", "01a1ffa0-2e50-70a2-a483-9fa404ae0bdd");
	snprintf(job.entity_ident, sizeof(job.entity_ident), "%s", FZ_DEV_ONLINE);
	snprintf(job.task_ident, sizeof(job.task_ident), "%s", FZ_TASK_ECHO);
	v = jsonu_member(in, "task_version");
	job.task_version = v ? json_object_get_int64(v) : 1;
	job.task_name = (char *)jsonu_member_str(in, "task_name");
	job.comment = (char *)jsonu_member_str(in, "comment");
	job.response = (char *)jsonu_member_str(in, "response");
	return job;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_object *in = NULL, *mails = NULL, *statuses = NULL;
	struct job_rec job;
	struct jsonu_err e;
	const char *device = NULL, *s = NULL;
	int64_t now = FZ_NOW, version = 1;
	size_t nmail = 0;

	if (jsonu_parse_object((const char *)data, size, &in, &e) != RCS_OK)
		goto out;
	/* as api_tasks.c and api_jobs.c read them */
	if (jsonu_get_string_array(in, "notification_mail_list", false, VALIDATE_MAX_MAILS, 254,
				   &mails, NULL, &e) != RCS_OK ||
	    jsonu_get_string_array(in, "notification_status_list", false, 16, 32, &statuses, NULL,
				   &e) != RCS_OK)
		goto out;
	if (validate_mail_list(mails, "notification_mail_list", &e) == RCS_OK) {
		for (size_t i = 0; mails && i < json_object_array_length(mails); i++)
			check_address(json_object_get_string(json_object_array_get_idx(mails, i)));
	} else {
		FUZZ_CHECK(strncmp(e.field, "notification_mail_list[", 23) == 0, "field '%s'",
			   e.field);
		mails = NULL;
	}
	if (validate_status_list(statuses, "notification_status_list", &e) != RCS_OK)
		statuses = NULL;

	/* the store hands the notifier strings: anything else is not a job record */
	if (jsonu_get_string(in, "task_name", false, 200, &s, NULL, &e) != RCS_OK ||
	    jsonu_get_string(in, "comment", false, 4096, &s, NULL, &e) != RCS_OK ||
	    jsonu_get_string(in, "response", false, 64 * 1024, &s, NULL, &e) != RCS_OK ||
	    jsonu_get_string(in, "device_name", false, 200, &device, NULL, &e) != RCS_OK ||
	    jsonu_get_int(in, "now", false, 0, 253402300799LL, &now, NULL, &e) != RCS_OK ||
	    jsonu_get_int(in, "task_version", false, 1, INT32_MAX, &version, NULL, &e) != RCS_OK)
		goto out;
	job = job_record(in);
	for (size_t i = 0; mails && i < json_object_array_length(mails) && nmail < 4;
	     i++, nmail++) {
		const char *to = json_object_get_string(json_object_array_get_idx(mails, i));
		size_t n = statuses ? json_object_array_length(statuses) : 1;
		for (size_t k = 0; k < n; k++) {
			const char *st =
			    statuses
				? json_object_get_string(json_object_array_get_idx(statuses, k))
				: "terminated";
			char *mail =
			    notifier_format(FUZZ_FROM, to, &job, device, st, now,
					    "0123456789abcdef0123456789abcdef.terminated@rcs");
			check_mail(mail);
			free(mail);
		}
	}
out:
	json_object_put(in);
	return 0;
}
