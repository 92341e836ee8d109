#!/usr/bin/env python3
"""Integration tests of the e-mail notifications of job status changes (seed: "Notification
rules" and "Events"; docs/coordinator.md "Notifications"; docs/api.md, GET /jobs/<id>/notifications):
a real mosquitto, the real rcs-coordinator (serve --mqtt --smtp-url ...), scripted devices
(FakeDevice) driving jobs through the real MQTT path, and a real SMTP server (aiosmtpd, the
harness's SmtpServer) on a free loopback port.

Checked: the combined example of the specification exactly; one mail per address per status
(an address on both levels, a duplicate in one list); the mail (envelope, Date, Message-ID,
From, To, Subject naming task, device and status, RFC 2047 for UTF-8, plain-text 8bit body
with job ident, task, device, status, time, comment and response, bounded in size, CRLF
line endings); no header injection through names; malformed addresses and unknown
statuses refused with 400 on every write (task create/replace/patch, job, bulk sends);
the notification list of a job (shape, 404 for another tenant); an SMTP server that is
down, answers 451 or is slow (retries, every mail once, the API and the job flow never
wait); kill -9 of the coordinator between the status change and the delivery; the
per-tenant hourly cap (suppressed); and serve without --smtp-url (recorded, not sent,
said once in the log).

The retry tests run the coordinator with --smtp-retry-base 1 (default 30 s, doubling) so
that they take seconds, not minutes.

Run (Debian's python3 has python3-aiosmtpd and python3-paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_notifications.py
RCS_KEEP_TMP=1 keeps each class's directory (broker and coordinator logs, database).
"""

import email.utils
import os
import re
import signal
import time
import unittest
import uuid

from rcs_harness import FakeDevice, list_all, wait_for
from rcs_fixture import CoordinatorTest, note

FROM = "rcs-notify@coordinator.test"
# every status a notification can name ("running" is only a filter alias)
STATUSES = ("initial", "pending", "transmited", "edge_transmitted", "edge_started",
            "edge_running", "edge_error", "terminated", "cancelled", "expired")
NOTIFICATION_FIELDS = ("address", "status", "state", "attempts")
STATES = ("queued", "sent", "failed", "suppressed")
# generous bounds for "fast" on a loaded test machine
FAST_API = 1.0       # seconds for one API call
FAST_JOB = 5.0       # seconds from POST to terminated with an automatic device


def status_of(mail):
    """The job status a mail is about: the status named in its Subject (else its body)."""
    for text in (mail.subject, mail.body):
        found = [s for s in STATUSES if re.search(r"(?<![a-z_])%s(?![a-z_])" % s, text)]
        if len(found) == 1:
            return found[0]
    return None


class NotifyTest(CoordinatorTest):
    """One mosquitto, one SMTP server (when smtp) and one coordinator per class (serve
    --mqtt <broker> --smtp-url <server> --smtp-from FROM + coord_args), a tenant with an
    admin key, helpers for devices, jobs and mails."""

    workdir_prefix = "rcs-notify-"
    smtp = True
    smtp_auth = None  # (user, password): the SMTP server requires AUTH
    coord_args = ()
    coord_env = None  # the coordinator's environment (None: this one's)

    @classmethod
    def more_coord_args(cls):
        """Arguments made once cls.workdir exists."""
        return []

    @classmethod
    def setUpClass(cls):
        super(CoordinatorTest, cls).setUpClass()  # the broker and SMTP server first
        cls.jobs = []  # every job ident the class created (for the duplicate check)
        cls.smtp_server = None
        cls.start_broker()
        args = ["--mqtt", cls.broker.url]
        if cls.smtp:
            cls.smtp_server = cls.start_smtp(auth=cls.smtp_auth)
            args += ["--smtp-url", cls.smtp_server.url, "--smtp-from", FROM]
        args += list(cls.coord_args) + cls.more_coord_args()
        cls.start_coordinator(args, env=cls.coord_env)
        cls.wait_connected()

    @classmethod
    def wait_connected(cls, mark=0):
        cls.wait_coord_log("status reports: ", mark=mark)

    def setUp(self):
        if self.smtp_server is not None:
            self.smtp_server.accept()
            if not self.smtp_server.running():
                self.smtp_server.start()

    def tearDown(self):
        self.assertTrue(self.coord.alive(), "coordinator died:\n" + self.coord_log()[-3000:])
        if self.smtp_server is not None:
            self.smtp_server.accept()

    # -- devices, tasks, jobs -------------------------------------------------------------

    def device(self, name="dev", auto=True, api=None, client_root=None):
        """An inventory device with a started FakeDevice, online; returns (entity, fake)."""
        api = api or self.admin
        r = api.post("/devices", {"name": name, "tags": ["notify"]})
        self.assertStatus(r, 201)
        ent = r.json["entity_ident"]
        fake = FakeDevice(self.broker, client_root or self.client_root, ent, auto=auto).start()
        self.fakes.append(fake)
        wait_for(lambda: api.get("/devices/" + ent).json.get("online") is True, timeout=15,
                 what="device %s online" % ent)
        return ent, fake

    def task(self, name="task", mails=(), statuses=(), api=None, **fields):
        body = {"name": name, "script": "echo", "notification_mail_list": list(mails),
                "notification_status_list": list(statuses)}
        body.update(fields)
        r = (api or self.admin).post("/tasks", body)
        self.assertStatus(r, 201)
        return r.json

    def post_job(self, task, entity, mails=None, statuses=None, api=None, **fields):
        body = {"entity_ident": entity}
        if mails is not None:
            body["notification_mail_list"] = list(mails)
        if statuses is not None:
            body["notification_status_list"] = list(statuses)
        body.update(fields)
        t0 = time.time()
        r = (api or self.admin).post("/tasks/%s/jobs" % task["ident"], body)
        took = time.time() - t0
        self.assertStatus(r, 201)
        self.jobs.append(r.json["ident"])
        r.json["_post_seconds"] = took
        return r.json

    def job(self, ident, api=None):
        r = (api or self.admin).get("/jobs/" + ident)
        self.assertStatus(r, 200)
        return r.json

    def wait_job(self, ident, status, timeout=15, api=None):
        return wait_for(lambda: self.job(ident, api)["status"] == status and True,
                        timeout=timeout, what="job %s %s" % (ident, status))

    def drive(self, fake, job, final, response=None):
        """Drives a job of a FakeDevice(auto=False) through the MQTT path to final
        (edge_error, or terminated through edge_started and edge_running)."""
        wait_for(lambda: job in fake.jobs_received(), timeout=10,
                 what="envelope of job %s at the device" % job)
        fake.report(job, "edge_transmitted")
        if final == "terminated":
            fake.report(job, "edge_started")
            fake.report(job, "edge_running")
        fake.report(job, final, response)
        self.wait_job(job, final)

    def notifications(self, ident, api=None):
        """The items of GET /jobs/<id>/notifications (all pages)."""
        return list_all(api or self.admin, "/jobs/%s/notifications" % ident)

    def wait_notifications(self, ident, predicate, timeout=15, what="notifications"):
        last = {}

        def check():
            last["items"] = self.notifications(ident)
            return predicate(last["items"]) and last["items"]
        try:
            return wait_for(check, timeout=timeout, interval=0.1, what=what)
        except AssertionError:
            raise AssertionError("job %s: timed out waiting for %s; notifications: %r\nlog:\n%s"
                                 % (ident, what, last.get("items"), self.coord_log()[-3000:]))

    # -- mails ----------------------------------------------------------------------------

    def mails(self, job=None, status=None, to=None):
        """Accepted mails about job (its ident in the body), status, to one address."""
        def match(m):
            return ((job is None or job in m.body) and
                    (status is None or status_of(m) == status) and
                    (to is None or to in m.rcpt_tos))
        return self.smtp_server.received(match)

    def summary(self, job):
        """Sorted [(address, status)] of the accepted mails about job, one per recipient."""
        return sorted((rcpt, status_of(m)) for m in self.mails(job) for rcpt in m.rcpt_tos)

    def wait_summary(self, job, expected, timeout=15, settle=1.5):
        """Waits until the mails about job are at least expected, then lets a moment pass
        and checks they are exactly expected (no duplicate, nothing more)."""
        expected = sorted(expected)
        try:
            wait_for(lambda: len(self.summary(job)) >= len(expected), timeout=timeout,
                     interval=0.1, what="%d mail(s) about job %s" % (len(expected), job))
        except AssertionError:
            raise AssertionError("job %s: mails %r, expected %r; notifications %r\nlog:\n%s" % (
                job, self.summary(job), expected, self.notifications(job),
                self.coord_log()[-3000:]))
        time.sleep(settle)
        self.assertEqual(self.summary(job), expected, "mails about job %s" % job)

    def assertNoDuplicateMails(self):
        """No (job, status, address) was mailed twice, over the whole class so far."""
        seen = {}
        for m in self.smtp_server.received():
            jobs = [j for j in self.jobs if j in m.body]
            for rcpt in m.rcpt_tos:
                key = (tuple(jobs), status_of(m), rcpt)
                seen[key] = seen.get(key, 0) + 1
        dups = {k: n for k, n in seen.items() if n > 1}
        self.assertEqual(dups, {}, "mails sent more than once: (jobs, status, address) -> count")

    def assertFast(self, seconds, what, limit=FAST_API):
        self.assertLess(seconds, limit, "%s took %.2fs" % (what, seconds))

    def timed(self, fn, *args, **kw):
        t0 = time.time()
        out = fn(*args, **kw)
        return out, time.time() - t0


# =========================================================================================


class RulesAndMailTest(NotifyTest):
    """Who gets which mail, what the mail looks like, what the API refuses."""

    coord_args = ("--smtp-retry-base", "1")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        other = cls.coord.init_tenant(user="eve")
        cls.other = cls.coord.api(other["api_key"])

    def test_combined_example_of_the_specification(self):
        """Seed rule 3: task a (edge_error, terminated) + job b (edge_error): on edge_error
        both are notified, on terminated only a."""
        ent, fake = self.device("combo-dev", auto=False)
        a, b = "a@x.test", "b@x.test"
        task = self.task("Combined", mails=[a], statuses=["edge_error", "terminated"])
        j1 = self.post_job(task, ent, mails=[b], statuses=["edge_error"])
        j2 = self.post_job(task, ent, mails=[b], statuses=["edge_error"])
        self.drive(fake, j1["ident"], "edge_error", "boom")
        self.drive(fake, j2["ident"], "terminated", "done")
        self.wait_summary(j1["ident"], [(a, "edge_error"), (b, "edge_error")])
        self.wait_summary(j2["ident"], [(a, "terminated")], settle=0.5)
        for m in self.mails(j1["ident"]) + self.mails(j2["ident"]):
            self.assertEqual(len(m.rcpt_tos), 1, "one recipient per mail: %r" % m)
            self.assertEqual(m.mail_from, FROM)

        n1 = self.notifications(j1["ident"])
        self.assertEqual(sorted((n["address"], n["status"], n["state"]) for n in n1),
                         [(a, "edge_error", "sent"), (b, "edge_error", "sent")], n1)
        n2 = self.notifications(j2["ident"])
        self.assertEqual([(n["address"], n["status"], n["state"]) for n in n2],
                         [(a, "terminated", "sent")], n2)
        for n in n1 + n2:
            self.assertEqual(n["attempts"], 1, n)
        self.assertNoDuplicateMails()

    def test_address_on_both_levels_one_mail_per_status(self):
        ent, _ = self.device("both-dev", auto=True)
        both, only = "both@x.test", "job-only@x.test"
        task = self.task("Levels", mails=[both], statuses=["edge_started", "terminated"])
        j = self.post_job(task, ent, mails=[both, only], statuses=["terminated", "edge_running"])
        self.wait_job(j["ident"], "terminated")
        expected = [(both, "edge_started"), (both, "edge_running"), (both, "terminated"),
                    (only, "edge_running"), (only, "terminated")]
        self.wait_summary(j["ident"], expected)
        items = self.notifications(j["ident"])
        self.assertEqual(sorted((n["address"], n["status"]) for n in items), sorted(expected),
                         items)
        self.assertNoDuplicateMails()

    def test_duplicate_address_in_one_list_one_mail(self):
        ent, _ = self.device("dup-dev", auto=True)
        task = self.task("Dups", mails=["dup@x.test", "dup@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent, mails=["dup@x.test"], statuses=["terminated", "terminated"])
        self.wait_job(j["ident"], "terminated")
        self.wait_summary(j["ident"], [("dup@x.test", "terminated")])

    def test_no_lists_no_mail(self):
        """Addresses without statuses (or statuses without addresses) notify nobody."""
        ent, _ = self.device("none-dev", auto=True)
        task = self.task("Quiet", mails=["quiet@x.test"], statuses=[])
        j1 = self.post_job(task, ent, statuses=["terminated"])
        j2 = self.post_job(self.task("Quiet2"), ent, mails=["quiet2@x.test"])
        self.wait_job(j1["ident"], "terminated")
        self.wait_job(j2["ident"], "terminated")
        time.sleep(1.5)
        self.assertEqual(self.summary(j1["ident"]) + self.summary(j2["ident"]), [])
        self.assertEqual(self.notifications(j1["ident"]), [])
        self.assertEqual(self.notifications(j2["ident"]), [])

    def test_repeated_status_one_mail(self):
        """A status reported twice (edge_running may repeat) is mailed once."""
        ent, fake = self.device("rep-dev", auto=False)
        task = self.task("Repeats", mails=["rep@x.test"], statuses=["edge_running"])
        j = self.post_job(task, ent)
        ident = j["ident"]
        wait_for(lambda: ident in fake.jobs_received(), what="envelope")
        for st in ("edge_transmitted", "edge_started", "edge_running", "edge_running",
                   "edge_running"):
            fake.report(ident, st, "step")
        fake.report(ident, "terminated", "done")
        self.wait_job(ident, "terminated")
        self.wait_summary(ident, [("rep@x.test", "edge_running")])

    def test_cancelled_notified(self):
        ent, fake = self.device("cancel-dev", auto=False)
        task = self.task("Cancelled", mails=["cancel@x.test"],
                         statuses=["cancelled", "terminated"])
        j = self.post_job(task, ent)
        wait_for(lambda: j["ident"] in fake.jobs_received(), what="envelope")
        r = self.admin.patch("/jobs/%s/cancel" % j["ident"])
        self.assertStatus(r, 200)
        self.wait_job(j["ident"], "cancelled")
        self.wait_summary(j["ident"], [("cancel@x.test", "cancelled")])

    def test_bulk_send_notifies_every_job(self):
        devs = [self.device("bulk-dev-%d" % i, auto=True)[0] for i in range(2)]
        task = self.task("Bulk", mails=["bulk-task@x.test"], statuses=["pending"])
        r = self.admin.post("/tasks/%s/jobs/list" % task["ident"], {
            "ident_list": devs, "notification_mail_list": ["bulk-job@x.test"],
            "notification_status_list": ["terminated"]})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["rejected"], [])
        idents = [j["ident"] for j in r.json["items"]]
        self.jobs.extend(idents)
        self.assertEqual(len(idents), 2)
        for ident in idents:
            self.wait_job(ident, "terminated")
        for ident in idents:
            self.wait_summary(ident, [("bulk-task@x.test", "pending"),
                                      ("bulk-job@x.test", "terminated")], settle=0.5)

    def test_mail_content(self):
        ent, _ = self.device("Lab Router 7", auto=True)
        to = "content@x.test"
        task = self.task("Nightly Reboot", mails=[to], statuses=["terminated"])
        t0 = time.time()
        j = self.post_job(task, ent, comment="maintenance window 42")
        ident = j["ident"]
        self.wait_job(ident, "terminated")
        self.wait_summary(ident, [(to, "terminated")], settle=0.2)
        m = self.mails(ident)[0]
        job = self.job(ident)

        # envelope
        self.assertEqual(m.mail_from, FROM)
        self.assertEqual(m.rcpt_tos, [to])
        # the usual headers, once each
        names = [n.lower() for n in m.header_names()]
        for h in ("date", "message-id", "from", "to", "subject"):
            self.assertEqual(names.count(h), 1, "header %s in %r" % (h, m.header_names()))
        when = email.utils.parsedate_to_datetime(str(m.message["Date"])).timestamp()
        self.assertLess(abs(when - time.time()), 300, "Date: %s" % m.message["Date"])
        self.assertRegex(str(m.message["Message-ID"]).strip(), r"^<[^<>@\s]+@[^<>@\s]+>$")
        self.assertEqual(email.utils.parseaddr(str(m.message["From"]))[1], FROM)
        self.assertEqual(email.utils.parseaddr(str(m.message["To"]))[1], to)
        # subject: task, device, status
        for part in ("Nightly Reboot", "Lab Router 7", "terminated"):
            self.assertIn(part, m.subject)
        # plain text, UTF-8, neither base64 nor quoted-printable (docs/coordinator.md)
        self.assertEqual(m.message.get_content_type(), "text/plain")
        self.assertEqual((m.message.get_content_charset() or "").lower(), "utf-8")
        cte = str(m.message.get("Content-Transfer-Encoding", "7bit")).lower()
        self.assertIn(cte, ("7bit", "8bit"))
        # body: job ident, task, device, status, time, comment, response
        body = m.body
        for part in (ident, "Nightly Reboot", "Lab Router 7", "terminated",
                     "maintenance window 42", "ok:" + ident):
            self.assertIn(part, body)
        days = {time.strftime("%Y-%m-%d", time.gmtime(t)) for t in (t0, time.time())}
        days |= {time.strftime("%Y-%m-%d", time.localtime(t)) for t in (t0, time.time())}
        self.assertTrue(any(d in body for d in days) or str(job["update_at"]) in body,
                        "no time of the status change in the body:\n" + body)
        # SMTP wants CRLF: no bare LF or CR anywhere in the mail
        self.assertEqual(m.content.count(b"\n"), m.content.count(b"\r\n"), m.content[:500])
        self.assertEqual(m.content.count(b"\r"), m.content.count(b"\r\n"), m.content[:500])
        # the same Message-ID never names two mails
        ids = [str(x.message["Message-ID"]) for x in self.smtp_server.received()]
        self.assertEqual(len(ids), len(set(ids)), "Message-IDs repeat: %r" % ids)

    def test_edge_error_mail_has_the_reason(self):
        ent, fake = self.device("err-dev", auto=False)
        task = self.task("Failing", mails=["err@x.test"], statuses=["edge_error"])
        j = self.post_job(task, ent)
        self.drive(fake, j["ident"], "edge_error", "disk full on /var")
        self.wait_summary(j["ident"], [("err@x.test", "edge_error")], settle=0.2)
        m = self.mails(j["ident"])[0]
        self.assertIn("edge_error", m.subject)
        self.assertIn("disk full on /var", m.body)

    def test_utf8_subject_and_body(self):
        dev_name = "Gerät Süd ✓"
        task_name = "Redémarrage de l'Ölpumpe — nuit 夜"
        ent, _ = self.device(dev_name, auto=True)
        task = self.task(task_name, mails=["utf8@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent, comment="für später")
        self.wait_job(j["ident"], "terminated")
        self.wait_summary(j["ident"], [("utf8@x.test", "terminated")], settle=0.2)
        m = self.mails(j["ident"])[0]
        # headers are 7-bit (RFC 2047 encoded words), the body is UTF-8
        m.raw_headers.decode("ascii")
        self.assertIn(task_name, m.subject)
        self.assertIn(dev_name, m.subject)
        self.assertIn(task_name, m.body)
        self.assertIn(dev_name, m.body)
        self.assertIn("für später", m.body)

    def test_long_response_bounded(self):
        ent, fake = self.device("long-dev", auto=False)
        task = self.task("Chatty", mails=["long@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent)
        response = "".join("line %05d of a long output\n" % i for i in range(1000))  # ~28 KB
        self.drive(fake, j["ident"], "terminated", response)
        self.wait_summary(j["ident"], [("long@x.test", "terminated")], settle=0.2)
        m = self.mails(j["ident"])[0]
        self.assertIn("line 00000 of a long output", m.body)
        self.assertNotIn("line 00999 of a long output", m.body)
        self.assertLess(len(m.content), 16 * 1024, "mail of %d bytes" % len(m.content))
        low = m.body.lower()
        self.assertTrue("..." in m.body or "truncat" in low or "more bytes" in low,
                        "the body does not say the response was cut:\n" + m.body[-300:])

    def test_long_utf8_response_stays_utf8(self):
        """The cut of a long response keeps the body valid UTF-8 (charset=utf-8)."""
        ent, fake = self.device("long-utf8-dev", auto=False)
        task = self.task("Chatty UTF-8", mails=["long8@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent)
        # 9062 bytes in lines of 151: the 4096th byte falls inside a character
        self.drive(fake, j["ident"], "terminated", "ab" + ("夜" * 50 + "\n") * 60)
        self.wait_summary(j["ident"], [("long8@x.test", "terminated")], settle=0.2)
        m = self.mails(j["ident"])[0]
        _, _, body = m.content.partition(b"\r\n\r\n")
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail("the body (charset=utf-8) is not valid UTF-8: %s; bytes %r" % (
                e, body[max(e.start - 10, 0):e.end + 10]))

    def test_long_lines_delivered(self):
        """A response (or comment) of one long line still makes a mail an SMTP server
        takes: no line over 998 characters (RFC 5321 4.5.3.1.6, RFC 5322 2.1.1; the
        test server, like many, refuses longer lines with 500)."""
        ent, fake = self.device("long-line-dev", auto=False)
        task = self.task("One long line", mails=["line@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent, comment="c" * 1500)
        self.drive(fake, j["ident"], "terminated", "x" * 3000)
        try:
            self.wait_summary(j["ident"], [("line@x.test", "terminated")], timeout=8,
                              settle=0.2)
        except AssertionError as e:
            self.fail("the mail with a 3000-byte response line and a 1500-byte comment was "
                      "not taken by the server: %s" % str(e).split("\nlog:")[0])
        m = self.mails(j["ident"])[0]
        longest = max(len(line) for line in m.content.split(b"\r\n"))
        self.assertLessEqual(longest, 998)

    def test_names_cannot_inject_headers(self):
        """CR/LF in the task name, the device name or the comment never starts a header."""
        to = "inj@x.test"
        r = self.admin.post("/devices", {"name": "dev\r\nX-Injected: 1", "tags": []})
        if r.status != 201:
            note("device name with CR/LF refused (%d): using a plain name" % r.status)
            ent, _ = self.device("inj-dev", auto=True)
        else:
            ent = r.json["entity_ident"]
            fake = FakeDevice(self.broker, self.client_root, ent, auto=True).start()
            self.fakes.append(fake)
            wait_for(lambda: self.admin.get("/devices/" + ent).json.get("online") is True,
                     timeout=15, what="device online")
        r = self.admin.post("/tasks", {"name": "x\r\nBcc: evil@x.test\r\nX-Evil: 1",
                                       "script": "echo", "notification_mail_list": [to],
                                       "notification_status_list": ["terminated"]})
        if r.status != 201:
            note("task name with CR/LF refused (%d): nothing to inject" % r.status)
            self.assertEqual(r.status, 400, r)
            return
        task = r.json
        j = self.post_job(task, ent, comment="c\r\nBcc: evil2@x.test\r\n\r\n.\r\nQUIT")
        self.wait_job(j["ident"], "terminated")
        self.wait_summary(j["ident"], [(to, "terminated")])
        m = self.mails(j["ident"])[0]
        names = [n.lower() for n in m.header_names()]
        self.assertNotIn("bcc", names, m.raw_headers)
        self.assertNotIn("x-evil", names, m.raw_headers)
        self.assertNotIn("x-injected", names, m.raw_headers)
        self.assertEqual(m.rcpt_tos, [to])
        self.assertEqual(self.smtp_server.received(
            lambda x: any("evil" in r for r in x.rcpt_tos)), [])
        self.assertEqual(names.count("subject"), 1, m.raw_headers)
        # the comment lands in the body, the SMTP dialogue was not cut short
        self.assertIn("QUIT", m.body)

    def test_invalid_lists_refused_everywhere(self):
        ent, _ = self.device("val-dev", auto=True)
        task = self.task("Valid", mails=["ok@x.test"], statuses=["terminated"])
        bad_mails = ["no-at-sign", "a@x.test\r\nBcc: evil@x.test", "a@x.test\n", "a b@x.test",
                     "<a@x.test>", "Name <a@x.test>", "a@", "@x.test", "a@@x.test", "",
                     "a@x.test,b@x.test", 5]
        bad_statuses = ["done", "", "edge-error", "terminated\r\n", 7]
        cases = [("notification_mail_list", [m], ["terminated"]) for m in bad_mails]
        cases += [("notification_status_list", ["ok@x.test"], [s]) for s in bad_statuses]
        # the bad item second: the field names its position
        cases.append(("notification_mail_list[1]", ["ok@x.test", "bad"], ["terminated"]))
        cases.append(("notification_status_list[1]", ["ok@x.test"], ["terminated", "nope"]))
        n_jobs = len(list_all(self.admin, "/tasks/%s/jobs" % task["ident"]))

        def writes(mails, statuses):
            lists = {"notification_mail_list": mails, "notification_status_list": statuses}
            yield "POST /tasks", lambda: self.admin.post(
                "/tasks", dict(name="bad", script="echo", **lists))
            yield "PUT /tasks/<id>", lambda: self.admin.put(
                "/tasks/" + task["ident"], dict(name="Valid", script="echo", **lists))
            yield "PATCH /tasks/<id>", lambda: self.admin.patch("/tasks/" + task["ident"], lists)
            yield "PATCH /tasks/<id> (mails only)", lambda: self.admin.patch(
                "/tasks/" + task["ident"], {"notification_mail_list": mails})
            yield "POST /tasks/<id>/jobs", lambda: self.admin.post(
                "/tasks/%s/jobs" % task["ident"], dict(entity_ident=ent, **lists))
            yield "POST /tasks/<id>/jobs/list", lambda: self.admin.post(
                "/tasks/%s/jobs/list" % task["ident"], dict(ident_list=[ent], **lists))
            yield "POST /tasks/<id>/jobs/tags", lambda: self.admin.post(
                "/tasks/%s/jobs/tags" % task["ident"], dict(tag="notify", **lists))

        for field, mails, statuses in cases:
            for what, call in writes(mails, statuses):
                if what.endswith("(mails only)") and field.startswith("notification_status"):
                    continue
                with self.subTest(write=what, mails=mails, statuses=statuses):
                    r = call()
                    self.assertError(r, 400, "validation_failed")
                    got = r.json["error"].get("details", {}).get("field", "")
                    self.assertTrue(got.startswith(field), "field %r, expected %r: %s" % (
                        got, field, r.raw))
                    self.assertNotIn("\r", r.raw)
        # nothing was written by the refused requests
        t = self.admin.get("/tasks/" + task["ident"]).json
        self.assertEqual((t["version"], t["notification_mail_list"],
                          t["notification_status_list"]), (1, ["ok@x.test"], ["terminated"]))
        self.assertEqual(len(list_all(self.admin, "/tasks/%s/jobs" % task["ident"])), n_jobs)
        # and good ones pass everywhere
        good = ["first.last+tag@sub.example.com", "o'brien@x.test", "UPPER@X.TEST"]
        r = self.admin.patch("/tasks/" + task["ident"], {"notification_mail_list": good})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["notification_mail_list"], good)
        j = self.post_job(task, ent, mails=good, statuses=["edge_error", "cancelled"])
        self.assertEqual(j["notification_mail_list"], good)

    def test_notifications_endpoint(self):
        ent, _ = self.device("shape-dev", auto=True)
        task = self.task("Shape", mails=["shape@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent)
        self.wait_job(j["ident"], "terminated")
        items = self.wait_notifications(j["ident"], lambda it: it and it[0]["state"] == "sent",
                                        what="sent")
        r = self.admin.get("/jobs/%s/notifications" % j["ident"])
        self.assertStatus(r, 200)
        for k in ("page", "per_page", "total_pages", "total_items", "items"):
            self.assertIn(k, r.json)
        self.assertEqual(len(items), 1)
        n = items[0]
        for k in NOTIFICATION_FIELDS:
            self.assertIn(k, n)
        self.assertEqual((n["address"], n["status"], n["state"]),
                         ("shape@x.test", "terminated", "sent"))
        self.assertIsInstance(n["attempts"], int)
        self.assertEqual(n["attempts"], 1)
        for k in ("created_at", "sent_at", "last_error"):
            if k not in n:
                note("notification item without %r: %r" % (k, n))
        if "sent_at" in n and "created_at" in n:
            self.assertGreaterEqual(n["sent_at"], n["created_at"])
        # another tenant's job, an unknown job, a malformed ident
        self.assertError(self.other.get("/jobs/%s/notifications" % j["ident"]), 404,
                         "not_found")
        self.assertError(self.admin.get("/jobs/%s/notifications" % uuid.uuid4()), 404,
                         "not_found")
        r = self.admin.get("/jobs/not-a-uuid/notifications")
        self.assertIn(r.status, (400, 404), r)
        # a job without lists: an empty list
        j2 = self.post_job(self.task("Silent"), ent)
        self.assertEqual(self.notifications(j2["ident"]), [])

    def test_tempfail_retried_then_sent(self):
        """451 for every DATA: retried with backoff, then sent once when accepted."""
        ent, _ = self.device("451-dev", auto=True)
        to = "retry@x.test"
        task = self.task("Retry", mails=[to], statuses=["terminated"])
        self.smtp_server.tempfail()
        j = self.post_job(task, ent)
        self.assertFast(j["_post_seconds"], "POST job while SMTP answers 451")
        self.wait_job(j["ident"], "terminated", timeout=FAST_JOB)
        items = self.wait_notifications(
            j["ident"], lambda it: it and it[0]["attempts"] >= 2, timeout=15,
            what="two refused attempts")
        self.assertEqual(items[0]["state"], "queued", items)
        self.assertTrue(items[0].get("last_error"), items)
        rejected = [x for x in self.smtp_server.rejected if to in x[1]]
        self.assertGreaterEqual(len(rejected), 2)
        self.assertEqual(self.mails(j["ident"]), [])
        self.smtp_server.accept()
        self.wait_summary(j["ident"], [(to, "terminated")], timeout=20)
        items = self.wait_notifications(j["ident"], lambda it: it[0]["state"] == "sent",
                                        what="sent")
        self.assertGreaterEqual(items[0]["attempts"], 3, items)
        self.assertNoDuplicateMails()


class DeliveryTest(NotifyTest):
    """An SMTP server that is down or slow, and a coordinator killed before delivery."""

    coord_args = ("--smtp-retry-base", "1")

    def test_smtp_down_while_jobs_finish(self):
        ent, _ = self.device("down-dev", auto=True)
        to = "down@x.test"
        task = self.task("Down", mails=[to], statuses=["terminated"])
        self.smtp_server.stop()
        down_at = time.time()
        jobs = []
        for i in range(3):
            j = self.post_job(task, ent, comment="down %d" % i)
            self.assertFast(j["_post_seconds"], "POST job while SMTP is down")
            jobs.append(j["ident"])
        for ident in jobs:
            self.wait_job(ident, "terminated", timeout=FAST_JOB)
        for ident in jobs:
            items = self.wait_notifications(
                ident, lambda it: it and it[0]["attempts"] >= 1, timeout=10,
                what="a failed attempt")
            self.assertEqual(len(items), 1, items)
            self.assertEqual(items[0]["state"], "queued", items)
            self.assertTrue(items[0].get("last_error"), "no last_error: %r" % items)
        # the API and the job flow do not wait for the mail server
        t0 = time.time()
        j = self.post_job(task, ent, comment="down 3")
        self.assertFast(j["_post_seconds"], "POST job while SMTP is down")
        self.wait_job(j["ident"], "terminated", timeout=FAST_JOB)
        self.assertLess(time.time() - t0, FAST_JOB)
        jobs.append(j["ident"])
        _, took = self.timed(self.notifications, jobs[0])
        self.assertFast(took, "GET notifications while SMTP is down")
        time.sleep(2)
        # exponential backoff (base 1 s): no hammering of a dead server
        down_for = time.time() - down_at
        attempts = max(self.notifications(jobs[0])[0]["attempts"], 1)
        self.assertLessEqual(attempts, int(down_for).bit_length() + 2,
                             "%d attempts in %.1fs with --smtp-retry-base 1" % (attempts,
                                                                                down_for))
        self.assertEqual(self.mails(to=to), [])
        # back up: every mail arrives, once
        self.smtp_server.start()
        for ident in jobs:
            self.wait_summary(ident, [(to, "terminated")], timeout=30, settle=0)
        time.sleep(2)
        for ident in jobs:
            self.assertEqual(self.summary(ident), [(to, "terminated")])
            items = self.notifications(ident)
            self.assertEqual([n["state"] for n in items], ["sent"], items)
        self.assertNoDuplicateMails()

    def test_kill9_between_status_change_and_delivery(self):
        ent, fake = self.device("kill-dev", auto=False)
        to = "kill@x.test"
        task = self.task("Killed", mails=[to], statuses=["edge_error", "terminated"])
        j = self.post_job(task, ent)
        sent_before = len(self.smtp_server.received())
        self.smtp_server.stop()  # nothing can be delivered
        self.drive(fake, j["ident"], "edge_error", "crashed")
        # the outbox row exists as soon as the status is visible
        items = self.notifications(j["ident"])
        self.assertEqual([(n["address"], n["status"]) for n in items], [(to, "edge_error")])
        self.assertIn(items[0]["state"], ("queued",), items)
        self.coord.stop(signal.SIGKILL)
        self.smtp_server.start()
        mark = len(self.coord_log())
        self.coord.start()
        self.wait_connected(mark)
        self.wait_summary(j["ident"], [(to, "edge_error")], timeout=30, settle=2)
        items = self.notifications(j["ident"])
        self.assertEqual([n["state"] for n in items], ["sent"], items)
        # mails sent before the crash were not sent again by the new process
        self.assertEqual(len(self.smtp_server.received()), sent_before + 1)
        self.assertNoDuplicateMails()

    def test_slow_smtp_does_not_slow_the_api_or_jobs(self):
        ent, _ = self.device("slow-dev", auto=True)
        to = "slow@x.test"
        task = self.task("Slow", mails=[to], statuses=["terminated"])
        self.smtp_server.slow(5)
        jobs = []
        t0 = time.time()
        for i in range(3):
            j = self.post_job(task, ent, comment="slow %d" % i)
            self.assertFast(j["_post_seconds"], "POST job while SMTP is slow")
            jobs.append(j["ident"])
        for ident in jobs:
            self.wait_job(ident, "terminated", timeout=FAST_JOB)
        self.assertLess(time.time() - t0, FAST_JOB + 1, "3 jobs to terminated")
        # while the first mail is in its 5 s DATA wait
        time.sleep(1)
        for what, call in (("GET notifications", lambda: self.notifications(jobs[0])),
                           ("GET job", lambda: self.job(jobs[0])),
                           ("GET jobs", lambda: self.admin.get("/jobs?per_page=5"))):
            _, took = self.timed(call)
            self.assertFast(took, what + " while SMTP is slow")
        t1 = time.time()
        j = self.post_job(task, ent, comment="slow 3")
        self.assertFast(j["_post_seconds"], "POST job while SMTP is slow")
        self.wait_job(j["ident"], "terminated", timeout=FAST_JOB)
        self.assertLess(time.time() - t1, FAST_JOB)
        jobs.append(j["ident"])
        self.smtp_server.accept()  # the mails still waiting go fast now
        for ident in jobs:
            self.wait_summary(ident, [(to, "terminated")], timeout=40, settle=0)
        self.assertNoDuplicateMails()


class SmtpAuthTest(NotifyTest):
    """--smtp-username/--smtp-password against a server that requires AUTH."""

    smtp_auth = ("rcs-mailer", "s3cret pass")
    coord_args = ("--smtp-username", "rcs-mailer", "--smtp-password", "s3cret pass",
                  "--smtp-retry-base", "1")

    def test_authenticated_delivery(self):
        ent, _ = self.device("auth-dev", auto=True)
        task = self.task("Auth", mails=["auth@x.test"], statuses=["terminated"])
        j = self.post_job(task, ent)
        self.wait_job(j["ident"], "terminated")
        self.wait_summary(j["ident"], [("auth@x.test", "terminated")])
        self.assertIn(("rcs-mailer", "s3cret pass", True), self.smtp_server.auth_attempts)
        self.assertNotIn("s3cret", self.coord_log(), "the password is in the log")

    def test_refused_credentials_retried(self):
        ent, _ = self.device("auth-dev-2", auto=True)
        task = self.task("Auth 2", mails=["auth2@x.test"], statuses=["terminated"])
        self.smtp_server.auth = ("rcs-mailer", "another password")
        try:
            j = self.post_job(task, ent)
            self.wait_job(j["ident"], "terminated")
            items = self.wait_notifications(
                j["ident"], lambda it: it and it[0]["attempts"] >= 1, what="a refused attempt")
            self.assertEqual(items[0]["state"], "queued", items)
            self.assertTrue(items[0].get("last_error"), items)
            self.assertEqual(self.mails(j["ident"]), [])
        finally:
            self.smtp_server.auth = self.smtp_auth
        self.wait_summary(j["ident"], [("auth2@x.test", "terminated")], timeout=20)
        self.assertNotIn("s3cret", self.coord_log(), "the password is in the log")


class SmtpPasswordFileTest(SmtpAuthTest):
    """The same with the password in --smtp-password-file: not on the command line."""

    coord_args = ("--smtp-username", "rcs-mailer", "--smtp-retry-base", "1")

    @classmethod
    def more_coord_args(cls):
        path = os.path.join(cls.workdir, "smtp.pw")
        with open(path, "w") as f:
            f.write("s3cret pass\n")
        return ["--smtp-password-file", path]

    def test_not_on_command_line(self):
        with open("/proc/%d/cmdline" % self.coord.proc.pid, "rb") as f:
            self.assertNotIn(b"s3cret", f.read())


class SmtpPasswordEnvTest(SmtpAuthTest):
    """The same with the password in RCS_SMTP_PASSWORD, gone from the environment after."""

    coord_args = ("--smtp-username", "rcs-mailer", "--smtp-retry-base", "1")
    coord_env = dict(os.environ, RCS_SMTP_PASSWORD="s3cret pass")

    def test_not_in_environment(self):
        for what in ("cmdline", "environ"):
            with open("/proc/%d/%s" % (self.coord.proc.pid, what), "rb") as f:
                self.assertNotIn(b"s3cret", f.read(), what)


class HourlyCapTest(NotifyTest):
    """--smtp-max-per-hour 2: the third mail of a tenant in an hour is suppressed."""

    coord_args = ("--smtp-max-per-hour", "2", "--smtp-retry-base", "1")

    def test_cap_per_tenant(self):
        ent, _ = self.device("cap-dev", auto=True)
        to = "cap@x.test"
        task = self.task("Capped", mails=[to],
                         statuses=["edge_transmitted", "edge_started", "edge_running",
                                   "terminated"])
        j = self.post_job(task, ent)
        self.wait_job(j["ident"], "terminated")
        items = self.wait_notifications(
            j["ident"], lambda it: len(it) == 4 and all(n["state"] != "queued" for n in it),
            what="4 notifications handled")
        states = sorted(n["state"] for n in items)
        self.assertEqual(states, ["sent", "sent", "suppressed", "suppressed"], items)
        time.sleep(1)
        self.assertEqual(len(self.mails(j["ident"])), 2, self.summary(j["ident"]))
        sent = {n["status"] for n in items if n["state"] == "sent"}
        self.assertEqual({s for _, s in self.summary(j["ident"])}, sent)

        # another tenant has its own cap
        other = self.coord.init_tenant(user="otto")
        api = self.coord.api(other["api_key"])
        ent2, _ = self.device("cap-dev-2", auto=True, api=api, client_root=other["client_root"])
        task2 = self.task("Capped 2", mails=["cap2@x.test"], statuses=["terminated"], api=api)
        j2 = self.post_job(task2, ent2, api=api)
        self.wait_job(j2["ident"], "terminated", api=api)
        self.wait_summary(j2["ident"], [("cap2@x.test", "terminated")])
        items = list_all(api, "/jobs/%s/notifications" % j2["ident"])
        self.assertEqual([n["state"] for n in items], ["sent"], items)
        # and the first tenant is still capped
        j3 = self.post_job(task, ent)
        self.wait_job(j3["ident"], "terminated")
        items = self.wait_notifications(
            j3["ident"], lambda it: len(it) == 4 and all(n["state"] != "queued" for n in it),
            what="4 notifications handled")
        self.assertEqual({n["state"] for n in items}, {"suppressed"}, items)
        self.assertEqual(self.mails(j3["ident"]), [])


class DefaultBackoffTest(NotifyTest):
    """Without --smtp-retry-base: the first retry of a failed mail waits 30 s."""

    def test_first_retry_after_30s(self):
        ent, _ = self.device("backoff-dev", auto=True)
        task = self.task("Backoff", mails=["backoff@x.test"], statuses=["terminated"])
        self.smtp_server.stop()
        j = self.post_job(task, ent)
        self.wait_job(j["ident"], "terminated")
        items = self.wait_notifications(j["ident"], lambda it: it and it[0]["attempts"] >= 1,
                                        what="a failed attempt")
        self.smtp_server.start()
        time.sleep(3)
        items = self.notifications(j["ident"])
        self.assertEqual((items[0]["state"], items[0]["attempts"]), ("queued", 1), items)
        self.assertIn("retry in 30s", self.coord_log())
        self.assertEqual(self.mails(j["ident"]), [])


class WithoutSmtpTest(NotifyTest):
    """serve without --smtp-url: notifications are recorded, not sent, and the log says
    so once."""

    smtp = False

    def test_recorded_but_not_sent(self):
        ent, _ = self.device("nosmtp-dev", auto=True)
        task = self.task("Unsent", mails=["unsent@x.test"], statuses=["terminated"])
        jobs = [self.post_job(task, ent)["ident"] for _ in range(3)]
        for ident in jobs:
            self.wait_job(ident, "terminated")
        time.sleep(1)
        for ident in jobs:
            items = self.notifications(ident)
            self.assertEqual([(n["address"], n["status"], n["state"], n["attempts"])
                              for n in items],
                             [("unsent@x.test", "terminated", "queued", 0)], items)
        log = self.coord_log()
        self.assertEqual(log.count("recorded but not sent"), 1, log[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
