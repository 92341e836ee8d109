#!/usr/bin/env python3
"""The dashboard (docs/dashboard.md) in a real headless browser: Debian's chromium driven by
chromedriver through python3-selenium, against a real coordinator, mosquitto and fake
devices on loopback. In order: a wrong key is refused with a message, then the right one
signs in; a bulk send's group page reaches its final counts as the devices report, without
a reload; a job's history shows as a timeline; a value of the wrong type in a task's send
form is refused before anything is sent, then a good one sends a job that the page follows
to its end; a send with rollout fields (wrong values named, nothing sent; then a group with
exactly those settings, shown in words) paused, resumed and cancelled from its page; a
viewer shown no send form and no group controls (an operator shown both); device names on
the group, job and jobs pages, a device's page with its jobs, the devices searched by name
and sorted by a column, the send form taking a device's name, the API's status names with
their meaning; a list of devices given by names and short idents (the unknown and ambiguous
ones named, nothing sent; then each device once); a job's cancel with a reason, shown in its
response; a file uploaded on the artifacts page with its progress, listed, refused
deletion while in use (409) and deleted, a job's download progress, and a viewer shown no
upload or delete; a group of 10,000 jobs pages through the API and stays responsive; the pages
fit a phone's width; a revoked key ends the session with a message; sign out; an API that
goes down shows a banner, the page stays, a page opened meanwhile says so with Try again,
which loads it once the API is back. Nothing but the expected
refusals is ever logged in the browser's console (no script error, no CSP violation).

The screenshot of the group page is written to the test's build directory
(dashboard.png next to bin/); RCS_SCREENSHOT=<file> writes it there as well (docs/img/
dashboard.png is made so: see docs/dashboard.md).

Without chromium, chromedriver or python3-selenium (tools/deps.sh test installs them) the
test is skipped, saying so; RCS_NO_SKIP=1 (set by .ci/run) makes that a failure.
RCS_CHROMIUM and RCS_CHROMEDRIVER name other programs than /usr/bin/chromium and
/usr/bin/chromedriver.

Run: /usr/bin/python3 tests/integration/test_dashboard.py (Debian's python3, for python3-selenium;
ctest sets RCS_BIN_DIR and RCS_SOURCE_DIR).
"""

import http.client
import json
import os
import shutil
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcs_fixture import StackTest  # noqa: E402
from rcs_harness import BIN_DIR, FakeDevice, wait_for  # noqa: E402

CHROMIUM = os.environ.get("RCS_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RCS_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 30  # seconds: generous, for a loaded machine
HUGE = 10000


def missing():
    """Why the browser test can't run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium is not installed"
    for p in (CHROMIUM, CHROMEDRIVER):
        if not os.access(p, os.X_OK):
            return "%s is not installed" % p
    return None


class TestDashboard(StackTest):
    workdir_prefix = "rcs-dash-"

    @classmethod
    def setUpClass(cls):
        why = missing()
        if why:
            why += ": tools/deps.sh test installs chromium, chromium-driver and python3-selenium"
            # CI sets RCS_NO_SKIP=1: there, a browser test that can't run is a failure
            if os.environ.get("RCS_NO_SKIP") == "1":
                raise AssertionError("test_dashboard cannot run (RCS_NO_SKIP=1): " + why)
            raise unittest.SkipTest(why)
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        super().setUpClass()
        cls.start_stack()
        cls.key = cls.admin_key
        cls.api = cls.admin
        cls.driver = None
        cls.addClassCleanup(cls._quit_driver)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--user-data-dir=" + os.path.join(cls.workdir, "chromium"),
                  "--window-size=1280,1000"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        cls.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        cls.driver.set_window_size(1280, 1000)
        cls.ui = "http://127.0.0.1:%d/ui/" % cls.coord.port

    @classmethod
    def _quit_driver(cls):
        if cls.driver:
            cls.driver.quit()
            cls.driver = None

    @classmethod
    def tearDownClass(cls):
        cls._quit_driver()
        super().tearDownClass()

    # ---- helpers ----

    def post(self, path, body, status=201):
        r = self.api.post(path, body)
        self.assertEqual(r.status, status, r)
        return r.json

    def console(self, allowed=()):
        """The browser console since the last call: fails on any error or warning but
        those whose text holds one of allowed (an expected refusal), which are returned."""
        bad, seen = [], []
        for e in self.driver.get_log("browser"):
            if e.get("level") not in ("SEVERE", "WARNING"):
                continue
            if any(a in e.get("message", "") for a in allowed):
                seen.append(e["message"])
            else:
                bad.append("%s %s" % (e.get("level"), e.get("message")))
        self.assertEqual(bad, [], "browser console:\n" + "\n".join(bad))
        return seen

    def q(self, css, root=None):
        return (root or self.driver).find_element("css selector", css)

    def click(self, css):
        """Clicks the element css finds, finding it again should the page have drawn it anew
        between the find and the click (a refresh of the page's data)."""
        from selenium.common.exceptions import StaleElementReferenceException
        for attempt in range(5):
            try:
                return self.q(css).click()
            except StaleElementReferenceException:
                if attempt == 4:
                    raise
                time.sleep(0.1)

    def qs(self, css):
        return self.driver.find_elements("css selector", css)

    def wait_css(self, css, what=None, timeout=WAIT):
        return wait_for(lambda: (self.qs(css) or [None])[0], timeout=timeout, interval=0.1,
                        what=what or css)

    def texts(self, css):
        """The texts of the elements css finds; None when the page drew them anew between
        the find and the read (a refresh of the page's data): the caller's wait looks again."""
        from selenium.common.exceptions import StaleElementReferenceException
        try:
            return [e.text for e in self.qs(css)]
        except StaleElementReferenceException:
            return None

    def wait_text(self, css, text, timeout=WAIT):
        def ok():
            return any(text in t for t in self.texts(css) or [])
        wait_for(ok, timeout=timeout, interval=0.1, what="%r in %s" % (text, css))

    def signin(self, key):
        """Signs in anew: the session's key forgotten, then key typed into the form."""
        self.driver.get(self.ui)
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.refresh()
        box = self.wait_css("#api-key")
        box.clear()
        box.send_keys(key)
        self.click("#signin")

    def make_devices(self, n, tag, auto):
        out = []
        for i in range(n):
            d = self.post("/devices", {"name": "%s-%d" % (tag, i), "tags": [tag]})
            dev = FakeDevice(self.broker, self.client_root, d["entity_ident"], auto=auto,
                             tags=[tag]).start()
            self.fakes.append(dev)
            out.append(dev)
        for dev in out:
            wait_for(lambda: self.api.get("/devices/" + dev.entity).json["online"],
                     timeout=WAIT, what="device online")
        return out

    def no_overflow(self):
        return self.driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1")

    # ---- the steps, in order ----

    def test_0_send_form_checks(self):
        """send.js's checks of each type, run in the browser (docs/api.md "Jobs")."""
        self.driver.get(self.ui)
        self.wait_css("#api-key")
        cases = [
            ("integer", "42", "42"), ("integer", "-7", "-7"),
            ("integer", "9223372036854775807", "9223372036854775807"),
            ("integer", "9223372036854775808", None), ("integer", "-9223372036854775809", None),
            ("integer", "1.5", None), ("integer", "abc", None), ("integer", "07", None),
            ("integer", "", None), ("integer", "1e3", None),
            ("number", "3.14", "3.14"), ("number", "-2e3", "-2e3"), ("number", "1.5.2", None),
            ("number", "NaN", None), ("number", "Infinity", None), ("number", "1e999", None),
            ("boolean", "true", "true"), ("boolean", "false", "false"), ("boolean", "yes", None),
            ("timestamp", "0", "0"), ("timestamp", "-1", None),
            ("timestamp", "1970-01-01T00:01:00Z", "60"),
            ("timestamp", "2026-12-31T23:59:00+01:00", "1798757940"),
            ("timestamp", "2026-13-01 00:00", None), ("timestamp", "tomorrow", None),
            ("string", "hi \"there\"", '"hi \\"there\\""'), ("string", "", '""'),
            ("string", "é" * 32768, '"' + "é" * 32768 + '"'), ("string", "é" * 32769, None),
        ]
        got = self.driver.execute_async_script("""
            const [cases, done] = arguments;
            import('./js/send.js').then((m) => done(cases.map(([t, v]) => {
                const r = m.checkValue(t, v);
                return r.ok ? r.json : null;
            })), (e) => done(String(e)));""", [[t, v] for t, v, _ in cases])
        self.assertIsInstance(got, list, got)
        for (t, v, want), g in zip(cases, got):
            self.assertEqual(g, want, "%s %r" % (t, v[:40]))
        body = self.driver.execute_async_script("""
            const done = arguments[0];
            import('./js/send.js').then((m) => done([
                m.bodyText({entity_ident: 'x'}, {n: '9223372036854775807', s: '"a"'}),
                m.bodyText({}, {}), m.bodyText({tag: 't'}, null),
                m.parseDeviceList('a').ok, m.parseDeviceList('').ok,
                m.parseDeviceList('a, "b c";d\\n e').entries, m.parseDeviceList('"b').ok,
                m.parseDeviceList('é'.repeat(100)).ok, m.parseDeviceList('é'.repeat(101)).ok]));""")
        self.assertEqual(json.loads(body[0]), {"entity_ident": "x", "variables": {
            "n": 9223372036854775807, "s": "a"}})
        self.assertEqual(body[1:], ['{"variables":{}}', '{"tag":"t"}', True, False,
                                    ["a", "b c", "d", "e"], False, True, False])
        # the rollout members as the API takes them, each value checked (docs/api.md "Rollouts")
        cases = [
            ({}, {}, []),
            ({"rate": "100000"}, {"rollout": {"max_per_minute": 100000}}, []),
            ({"rate": "100001"}, {}, ["rate"]), ({"rate": "1.5"}, {}, ["rate"]),
            ({"expBase": "10", "expFactor": "1.5", "expAfter": "20"},
             {"rollout": {"exponential": {"base_per_minute": 10, "factor": 1.5, "after_succeeded": 20}}}, []),
            ({"expBase": "10"}, {}, ["expAfter", "expFactor"]),
            ({"expBase": "10", "expFactor": "11", "expAfter": "1000001"}, {}, ["expAfter", "expFactor"]),
            ({"abortPct": "0"}, {"abort": {"failure_percent": 0}}, []),
            ({"abortPct": "12.5", "abortMin": "7"}, {"abort": {"failure_percent": 12.5, "min_finished": 7}}, []),
            ({"abortMin": "7"}, {}, ["abortPct"]), ({"abortPct": "-1"}, {}, ["abortPct"]),
            ({"retryMax": "10", "retryBackoff": "0", "retryFactor": "1"},
             {"retry": {"max_attempts": 10, "backoff_s": 0, "backoff_factor": 1}}, []),
            ({"retryMax": "11"}, {}, ["retryMax"]), ({"retryBackoff": "86401"}, {}, ["retryBackoff", "retryMax"]),
            ({"days": ["mon", "sun"], "start": "23:30", "duration": "1440", "offset": "-720"},
             {"window": {"days": ["mon", "sun"], "start": "23:30", "duration_min": 1440,
                         "utc_offset_min": -720}}, []),
            ({"days": ["mon"], "start": "24:00", "duration": "0", "offset": "841"}, {},
             ["duration", "offset", "start"]),
            ({"start": "02:00"}, {}, ["days", "duration"]),
            ({"continuous": True}, {"continuous": True}, []),
        ]
        got = self.driver.execute_async_script("""
            const [cases, done] = arguments;
            import('./js/send.js').then((m) => done(cases.map((v) => {
                const r = m.rolloutMembers(v);
                return [Object.keys(r.errors).length ? {} : r.members, Object.keys(r.errors).sort()];
            })), (e) => done(String(e)));""", [v for v, _, _ in cases])
        self.assertIsInstance(got, list, got)
        for (v, members, errors), g in zip(cases, got):
            self.assertEqual(g, [members, errors], v)
        words = self.driver.execute_async_script("""
            const done = arguments[0];
            import('./js/send.js').then((m) => done([
                m.describeRollout({max_per_minute: 10}),
                m.describeRollout({exponential: {base_per_minute: 5, factor: 3, after_succeeded: 1}}),
                m.describeRollout({exponential: {base_per_minute: 5, factor: 1.5, after_succeeded: 2}}),
                m.describeAbort({failure_percent: 20}),
                m.describeRetry({max_attempts: 2, backoff_s: 30, backoff_factor: 2}),
                m.describeRetry({max_attempts: 4, backoff_s: 7200, backoff_factor: 3}),
                m.describeWindow({days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'],
                                  start: '22:00', duration_min: 90, utc_offset_min: -330})]));""")
        self.assertEqual(words, [
            "10 a minute", "5 a minute, tripling with every 1 succeeded job",
            "5 a minute, times 1.5 with every 2 succeeded jobs",
            "stop when 20 % or more have failed, once 1 device has finished",
            "up to 2 attempts, the next after 30 s",
            "up to 4 attempts, the next after 2 h, then 3 times longer each time",
            "every day, from 22:00 for 90 min (UTC-05:30)"])
        self.console()

    def test_1_wrong_key_then_sign_in(self):
        self.signin("rcs_not_a_key")
        self.wait_text("#signin-msg", "refused")
        self.assertIn("unknown or revoked", self.q("#signin-msg").text)
        # the console is read: the refused request is there
        self.assertTrue(self.console(allowed=["401"]), "no 401 in the browser's console")
        self.signin(self.key)
        self.wait_css("section.page-groups")
        self.wait_text("main", "No groups yet")
        self.assertEqual(self.driver.execute_script(
            "return sessionStorage.length"), 1)
        self.console()

    def test_2_group_reaches_its_final_counts_live(self):
        devs = self.make_devices(6, "site-a", auto=False)
        task = self.post("/tasks", {"name": "Echo", "script": "echo", "variables_info": {
            "message": {"type": "string", "optional": True}}})
        self.__class__.echo = task
        sent = self.post("/tasks/%s/jobs/tags" % task["ident"], {
            "tag": "site-a", "group_name": "night-run", "variables": {"message": "hi"}})
        group = sent["group"]["ident"]
        self.__class__.group = group
        self.driver.get(self.ui + "#/groups")
        self.wait_text("table.groups", "night-run")
        self.click("table.groups a[href='#/groups/%s']" % group)
        self.wait_css("#group-done[data-total='6']")
        # the page must not reload from here on
        self.driver.execute_script("window.__still = 'here'")
        wait_for(lambda: all(d.jobs_received() for d in devs), timeout=WAIT,
                 what="every device got its job")
        for i, d in enumerate(devs):
            job = d.jobs_received()[0]
            for st in ("edge_transmitted", "edge_started", "edge_running"):
                d.report(job, st)
            if i < 4:
                d.report(job, "terminated", "ok")
            else:
                d.report(job, "edge_error", "script error: boom", error="rolled_back")
        self.wait_css("#group-done[data-done='6']", "6 of 6 finished")
        self.wait_text("#group-error-codes", "rolled_back: 2")
        wait_for(lambda: self.qs(".bar-row[data-status='terminated'][data-count='4']") and
                 self.qs(".bar-row[data-status='edge_error'][data-count='2']"),
                 timeout=WAIT, what="bars of 4 terminated, 2 edge_error")
        self.assertEqual(len(self.qs(".bar-row")), 2)
        # the jobs table follows too
        wait_for(lambda: len(self.qs("table.jobs tr[data-status='terminated']")) == 4,
                 timeout=WAIT, what="4 terminated rows")
        self.assertEqual(self.driver.execute_script("return window.__still"), "here")
        self.assertTrue(self.no_overflow())
        shot = os.path.join(os.path.dirname(BIN_DIR), "dashboard.png")
        self.driver.save_screenshot(shot)
        if os.environ.get("RCS_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["RCS_SCREENSHOT"])
        self.console()

    def test_2b_group_without_jobs_warns(self):
        """A send that made no job (a tag nobody holds) is completed, with a warning saying
        why, not only a green badge."""
        sent = self.post("/tasks/%s/jobs/tags" % self.echo["ident"], {
            "tag": "site-typo", "group_name": "typo-run"})
        self.assertEqual(sent["items"], [])
        self.driver.get(self.ui + "#/groups/" + sent["group"]["ident"])
        self.wait_text(".group-head .notice.warn",
                       "Nothing was sent: no device holds tag 'site-typo'.")
        self.driver.get(self.ui + "#/groups/" + self.group)
        self.wait_css("#group-done[data-total='6']")
        self.assertFalse(self.qs(".group-head .notice.warn"))
        self.console()

    def test_3_job_timeline(self):
        self.driver.get(self.ui + "#/groups/" + self.group + "?status=edge_error")
        link = self.wait_css("table.jobs tr[data-status='edge_error'] a")
        link.click()
        self.wait_css("#timeline")
        wait_for(lambda: len(self.qs("#timeline li")) >= 6, timeout=WAIT,
                 what="six changes in the timeline")
        statuses = [li.get_attribute("data-status") for li in self.qs("#timeline li")]
        self.assertEqual(statuses[0], "initial")
        self.assertEqual(statuses[-1], "edge_error")
        self.assertIn("boom", self.q("#timeline li:last-child").text)
        self.assertEqual(self.qs("#cancel-job"), [])
        self.console()

    def test_3b_job_phases(self):
        """A job that spans a reboot: its page shows its phase, and its timeline each change's
        phase, where each phase begins (docs/dashboard.md "A job")."""
        dev = self.make_devices(1, "phased", auto=False)[0]
        job = self.post("/tasks/%s/jobs" % self.echo["ident"],
                        {"entity_ident": dev.entity, "variables": {"message": "fw"}})["ident"]
        wait_for(lambda: job in dev.jobs_received(), timeout=WAIT, what="envelope received")
        dev.report(job, "edge_transmitted")
        dev.report(job, "edge_started")
        dev.report(job, "edge_running", "installing", phase="install")
        dev.report(job, "edge_running", "rebooting", phase="verify", within=600)
        self.driver.get(self.ui + "#/jobs/" + job)
        self.wait_css("#timeline li[data-phase='verify']")
        self.wait_text("#job-phase", "verify")
        dev.report(job, "edge_running", "checking health", phase="verify")
        dev.report(job, "terminated", "running 4.2.0", phase="verify")
        wait_for(lambda: self.qs("#timeline li[data-status='terminated'][data-phase='verify']"),
                 timeout=WAIT, what="the job page shows its end in its phase")
        items = self.qs("#timeline li")
        phases = [li.get_attribute("data-phase") for li in items]
        self.assertEqual(phases[-4:], ["install", "verify", "verify", "verify"])
        self.assertIsNone(phases[0])
        starts = [li.text for li in items if "begins" in li.text]
        self.assertEqual(len(starts), 2, starts)
        self.assertIn("phase install begins", starts[0])
        self.assertIn("phase verify begins", starts[1])
        self.assertIn("rebooting", starts[1])
        self.console()

    def test_4_send_form(self):
        dev = self.make_devices(1, "bench", auto=True)[0]
        task = self.post("/tasks", {"name": "Blink", "script": "echo", "variables_info": {
            "times": {"type": "integer", "alias": "Times"},
            "ratio": {"type": "number", "optional": True},
            "loud": {"type": "boolean", "optional": True},
            "message": {"type": "string", "optional": True}}})
        before = self.api.get("/jobs?per_page=1").json["total_items"]
        self.driver.get(self.ui + "#/tasks")
        self.wait_css("table.tasks a[href='#/tasks/%s']" % task["ident"]).click()
        self.wait_css("#send-form")
        self.q("#f-device").send_keys(dev.entity)
        self.q("#var-times").send_keys("three")
        self.q("#var-ratio").send_keys("1.5.2")
        self.click("#send")
        self.wait_text("#var-times-error", "an integer is expected")
        self.wait_text("#var-ratio-error", "a number is expected")
        self.wait_text("#send-msg", "nothing was sent")
        self.assertEqual(self.q("#var-times").get_attribute("aria-invalid"), "true")
        time.sleep(0.5)
        self.assertEqual(self.api.get("/jobs?per_page=1").json["total_items"], before)
        self.q("#var-times").clear()
        self.q("#var-times").send_keys("9223372036854775807")
        self.q("#var-ratio").clear()
        from selenium.webdriver.support.ui import Select
        Select(self.q("#var-loud")).select_by_value("true")
        self.click("#send")
        self.wait_css("section.page-jobs #timeline")
        job = self.driver.current_url.rsplit("/", 1)[1]
        r = self.api.get("/jobs/" + job).json
        self.assertEqual(r["variables"], {"times": 9223372036854775807, "loud": True})
        wait_for(lambda: self.qs("#timeline li[data-status='terminated']"), timeout=WAIT,
                 what="the job page shows its end")
        self.console()

    def group_of(self, ident):
        return self.api.get("/groups/" + ident).json

    def test_4b_send_with_rollout_then_pause_resume_cancel(self):
        """The send form's rollout fields make the members exactly as the API takes them
        (a wrong value is named and nothing is sent); the group page says them in words and
        its pause, resume and cancel change the group's status."""
        before = self.api.get("/groups?per_page=1").json["total_items"]
        self.driver.get(self.ui + "#/tasks/" + self.echo["ident"])
        self.wait_css("#send-form")
        self.click("#target-tag")
        self.q("#f-tag").send_keys("site-a")
        self.q("#f-group").clear()
        self.q("#f-group").send_keys("paced")
        self.click("#rollout summary")
        for css, value in (("#f-rate", "0"), ("#f-exp-base", "1"), ("#f-exp-factor", "2"),
                           ("#f-abort-pct", "101"), ("#f-retry-max", "3"),
                           ("#f-retry-backoff", "60"), ("#f-win-start", "2:00"),
                           ("#f-win-duration", "120")):
            self.q(css).send_keys(value)
        self.q("#f-win-offset").clear()
        self.q("#f-win-offset").send_keys("60")
        self.click("#send")
        self.wait_text("#f-rate-error", "an integer from 1 to 100000")
        self.wait_text("#f-exp-after-error", "needed for an exponential pace")
        self.wait_text("#f-abort-pct-error", "a number from 0 to 100")
        self.wait_text("#f-days-error", "choose at least one day")
        self.wait_text("#f-win-start-error", "HH:MM")
        self.wait_text("#send-msg", "nothing was sent")
        time.sleep(0.5)
        self.assertEqual(self.api.get("/groups?per_page=1").json["total_items"], before)
        for css, value in (("#f-rate", "100"), ("#f-exp-after", "5"), ("#f-abort-pct", "10"),
                           ("#f-abort-min", "50"), ("#f-win-start", "02:00")):
            self.q(css).clear()
            self.q(css).send_keys(value)
        self.click("#f-day-sat")
        self.click("#f-day-sun")
        self.click("#send")
        self.wait_css("#group-done")
        gid = self.driver.current_url.rsplit("/", 1)[1]
        g = self.group_of(gid)
        self.assertEqual(g["name"], "paced")
        self.assertEqual(g["rollout"], {"max_per_minute": 100, "exponential": {
            "base_per_minute": 1, "factor": 2, "after_succeeded": 5}})
        self.assertEqual(g["abort"], {"failure_percent": 10, "min_finished": 50})
        self.assertEqual(g["retry"]["max_attempts"], 3)
        self.assertEqual(g["retry"]["backoff_s"], 60)
        self.assertEqual(g["window"], {"days": ["sat", "sun"], "start": "02:00",
                                       "duration_min": 120, "utc_offset_min": 60})
        self.assertFalse(g["continuous"])
        # the settings in words, not JSON
        self.wait_text("[data-setting='rollout']",
                       "1 a minute, doubling with every 5 succeeded jobs, up to 100 a minute")
        self.assertEqual(self.q("[data-setting='abort']").text,
                         "stop when 10 % or more have failed, once 50 devices have finished")
        self.assertEqual(self.q("[data-setting='window']").text,
                         "sat, sun, from 02:00 for 2 h (UTC+01:00)")
        self.assertIn("up to 3 attempts, the next after 1 min", self.q("[data-setting='retry']").text)
        self.assertNotIn("{", self.q(".group-head").text)
        # pause, resume, cancel: each changes the group's status, on the page too
        self.click("#group-pause")
        self.wait_css(".group-head .badge[data-group-status='paused']")
        self.assertEqual(self.group_of(gid)["status"], "paused")
        self.assertEqual(self.qs("#group-pause"), [])
        self.click("#group-resume")
        self.wait_css(".group-head .badge[data-group-status='running']")
        self.assertEqual(self.group_of(gid)["status"], "running")
        self.click("#group-cancel")
        self.driver.switch_to.alert.dismiss()  # asked first: nothing happens
        time.sleep(0.5)
        self.assertEqual(self.group_of(gid)["status"], "running")
        self.click("#group-cancel")
        self.driver.switch_to.alert.accept()
        self.wait_css(".group-head .badge[data-group-status='cancelled']")
        self.assertEqual(self.group_of(gid)["status"], "cancelled")
        self.assertEqual(self.qs("#group-controls"), [])
        # the groups list filters by status and name (GET /groups?status=&name=)
        self.driver.get(self.ui + "#/groups")
        self.wait_css("table.groups")
        from selenium.webdriver.support.ui import Select
        Select(self.q("#group-status-filter")).select_by_value("cancelled")
        self.wait_css("table.groups tr[data-group='%s']" % gid)
        wait_for(lambda: len(self.qs("table.groups tbody tr")) == 1, timeout=WAIT,
                 what="only the cancelled group")
        self.q("#group-name-filter").send_keys("night-run")
        self.click("#group-filter")
        self.wait_text("main .notice.info", "No group matches these filters.")
        self.console()

    def test_4c_viewer_sees_no_form_and_no_controls(self):
        held = self.post("/tasks/%s/jobs/tags" % self.echo["ident"], {
            "tag": "site-a", "group_name": "held", "rollout": {"max_per_minute": 1},
            "window": {"days": ["mon"], "start": "00:00", "duration_min": 1}})
        gid = held["group"]["ident"]
        self.__class__.held = gid
        try:
            for role, may in (("operator", True), ("viewer", False)):
                k = self.post("/keys", {"user": "v-" + role, "role": role})
                self.signin(k["api_key"])
                self.wait_css("section.page-groups")
                self.wait_text("#who", role)
                self.driver.get(self.ui + "#/groups/" + gid)
                self.wait_css("#group-progress")
                self.wait_css(".group-head .badge[data-group-status='running']")
                self.assertEqual(bool(self.qs("#group-pause")), may, role)
                self.assertEqual(bool(self.qs("#group-cancel")), may, role)
                # a job of it, not ended: Cancel the job for the roles that may
                self.wait_css("table.jobs tr[data-status='pending'] a[href^='#/jobs/']").click()
                self.wait_css("#timeline")
                self.assertEqual(bool(self.qs("#cancel-job")), may, role)
                self.driver.get(self.ui + "#/tasks/" + self.echo["ident"])
                self.wait_css("#send-form, #no-send")
                self.assertEqual(bool(self.qs("#send-form")), may, role)
                if not may:
                    self.assertIn("role (viewer) may not send", self.q("#no-send").text)
        finally:
            self.signin(self.key)
            self.wait_css("section.page-groups")
        # signin() forgets the key under a polling page: its next requests are refused
        self.console(allowed=["401"])

    def test_4d_device_names_and_the_device_page(self):
        """Device names on the group, job and jobs pages, linked to the device's page with
        its record and jobs; search by name; sort by a column; the send form takes a name;
        the API's status names with their meaning."""
        self.driver.get(self.ui + "#/groups/" + self.group)
        self.wait_css("table.jobs tbody tr")
        wait_for(lambda: all(t.startswith("site-a-")
                             for t in self.texts("table.jobs a.device") or ["stale"]),
                 timeout=WAIT, what="device names in the group's jobs")
        self.assertEqual(len(self.qs("table.jobs a.device")), 6)
        # the API's status names, with plain words as the title
        badge = self.q(".bar-row[data-status='edge_error'] .badge")
        self.assertEqual(badge.text, "edge_error")
        self.assertIn("error", badge.get_attribute("title"))
        self.assertNotEqual(badge.get_attribute("title"), "edge_error")
        opts = [o.text for o in self.qs("#status-filter option")]
        self.assertIn("transmited", opts)
        self.assertIn("edge_running", opts)
        self.assertNotIn("transmitted", opts)
        self.assertNotIn("running", opts)
        # the job page names its device
        self.click("table.jobs tr[data-status='edge_error'] td a[href^='#/jobs/']")
        self.wait_css("#timeline")
        link = self.wait_css(".facts a.device")
        name = link.text
        self.assertTrue(name.startswith("site-a-"), name)
        # the device's page: its record and its jobs
        link.click()
        self.wait_text("#device-name", name)
        dev = self.driver.current_url.rsplit("/", 1)[1]
        wait_for(lambda: self.qs("table.jobs tbody tr[data-job]"), timeout=WAIT, what="its jobs")
        want = self.api.get("/jobs?entity_ident=" + dev).json["total_items"]
        self.assertGreaterEqual(want, 1)
        self.assertEqual(len(self.qs("table.jobs tbody tr[data-job]")), want)
        self.assertIn("site-a", self.q(".device-head").text)
        # what it says it runs (docs/api.md "Devices"), shown as text
        fake = next(f for f in self.fakes if f.entity == dev)
        fake.client.publish(fake.base + "/state", json.dumps({
            "v": 1, "online": True, "tags": fake.tags, "agent_version": "fake",
            "ts": int(time.time()), "attributes": {"fw_version": "2.4.1", "board": "<b>x1</b>"}}),
            qos=1, retain=True).wait_for_publish(5)
        wait_for(lambda: self.api.get("/devices/" + dev).json["attributes"].get("board"),
                 timeout=WAIT, what="attributes stored")
        self.driver.refresh()
        self.wait_text(".device-head dl.attributes", "fw_version")
        attrs = self.q(".device-head dl.attributes")
        self.assertEqual([e.text for e in attrs.find_elements("css selector", "dt")],
                         ["fw_version", "board"])
        self.assertEqual([e.text for e in attrs.find_elements("css selector", "dd")],
                         ["2.4.1", "<b>x1</b>"])
        # the jobs page names devices too
        self.driver.get(self.ui + "#/jobs")
        wait_for(lambda: name in (self.texts("table.jobs a.device") or []),
                 timeout=WAIT, what="a device name on the jobs page")
        # the devices list: search by name, sort by a column
        self.driver.get(self.ui + "#/devices")
        self.wait_css("table.devices")
        self.q("#name-filter").send_keys("site-a-3")
        self.click("#filter")
        wait_for(lambda: len(self.qs("table.devices tbody tr")) == 1, timeout=WAIT,
                 what="one device named site-a-3")
        self.assertIn("site-a-3", self.q("table.devices tbody tr").text)
        self.driver.get(self.ui + "#/devices?tag=site-a")
        self.wait_css("table.devices")
        self.click("th a[data-sort='name']")
        self.wait_css("th[aria-sort='ascending'] a[data-sort='name']")
        names = [e.text for e in self.qs("table.devices tbody tr td:first-child strong")]
        self.assertEqual(names, sorted(names))
        self.click("th a[data-sort='name']")
        self.wait_css("th[aria-sort='descending'] a[data-sort='name']")
        names = [e.text for e in self.qs("table.devices tbody tr td:first-child strong")]
        self.assertEqual(names, sorted(names, reverse=True))
        self.assertEqual(names[0], "site-a-5")
        # the send form takes a device's name: an unknown one is refused, a known one sent
        self.driver.get(self.ui + "#/tasks/" + self.echo["ident"])
        self.wait_css("#send-form")
        self.q("#f-device").send_keys("no-such-device")
        self.click("#send")
        self.wait_text("#f-device-error", 'no device is named "no-such-device"')
        self.q("#f-device").clear()
        self.q("#f-device").send_keys(name)
        self.click("#send")
        self.wait_css("section.page-jobs #timeline")
        job = self.driver.current_url.rsplit("/", 1)[1]
        self.assertEqual(self.api.get("/jobs/" + job).json["entity_ident"], dev)
        self.console()

    def test_4e_artifacts_page(self):
        """docs/dashboard.md "Artifacts": a file uploaded through the page with its
        progress, then listed; the same bytes again; delete asks first, shows the API's
        409 while the artifact is in use, then removes it; a viewer sees no upload and no
        delete; a job's download progress as a bar."""
        import hashlib
        data = os.urandom(300 * 1024 + 7)
        sha = hashlib.sha256(data).hexdigest()
        path = os.path.join(self.workdir, "pump-fw-1.4.bin")
        with open(path, "wb") as f:
            f.write(data)
        self.driver.get(self.ui + "#/artifacts")
        self.wait_css("#upload-form")
        self.assertEqual(self.q("#nav a[aria-current='page']").text, "Artifacts")
        self.q("#artifact-file").send_keys(path)
        self.assertEqual(self.q("#artifact-name").get_attribute("value"), "pump-fw-1.4.bin")
        # the label's checks, run in the browser (docs/api.md "Artifacts")
        got = self.driver.execute_async_script("""
            const [names, done] = arguments;
            import('./js/artifacts.js').then((m) => done(names.map(m.nameProblem)),
                                             (e) => done(String(e)));""",
                                               ["fw", "é" * 64, "é" * 65, "a\u0007b", "a\u0085b", ""])
        self.assertEqual(got, ["", "", "a name is at most 128 bytes",
                               "a name holds no control character",
                               "a name holds no control character", "give the artifact a name"])
        self.q("#artifact-name").clear()
        self.driver.execute_script("arguments[0].value = arguments[1]",
                                   self.q("#artifact-name"), "pump\tfirmware")
        self.click("#artifact-upload")
        self.wait_text("#artifact-name-error", "a name holds no control character")
        self.q("#artifact-name").clear()
        self.q("#artifact-name").send_keys("pump firmware 1.4")
        self.click("#artifact-upload")
        self.wait_text("#upload-msg", "Uploaded pump firmware 1.4 (%s, 300.0 KiB)." % sha[:12])
        bar = self.q("#upload-progress")
        self.assertEqual(bar.get_attribute("aria-valuenow"), "100")
        self.assertEqual(bar.get_attribute("data-done"), str(len(data)))
        self.assertIn("100 % · 300.0 KiB of 300.0 KiB", bar.text)
        rec = self.api.get("/artifacts/sha256:" + sha).json
        self.assertEqual((rec["name"], rec["size"]), ("pump firmware 1.4", len(data)))
        row = self.wait_css("table.artifacts tr[data-artifact='%s']" % sha)
        self.assertIn("pump firmware 1.4", row.text)
        self.assertIn(sha[:12], row.text)
        self.assertIn("300.0 KiB", row.text)
        self.assertIn("no task", row.text)
        # the same bytes again: the record the coordinator has, its name kept
        self.q("#artifact-file").send_keys(path)
        self.click("#artifact-upload")
        self.wait_text("#upload-msg", "The same bytes are there already: pump firmware 1.4")
        self.assertEqual(len(self.qs("table.artifacts tr[data-artifact='%s']" % sha)), 1)
        # in use: a task that pins it
        task = self.api.post("/tasks", {"name": "Flash pumps", "script": "echo",
                                        "artifacts": {"fw": "sha256:" + sha}})
        self.assertEqual(task.status, 201, task)
        self.driver.refresh()
        row = self.wait_css("table.artifacts tr[data-artifact='%s']" % sha)
        self.wait_text("table.artifacts tr[data-artifact='%s'] a.task" % sha, "Flash pumps")
        self.click("button[data-delete='%s']" % sha)
        self.driver.switch_to.alert.dismiss()  # asked first: nothing happens
        time.sleep(0.3)
        self.assertEqual(self.api.get("/artifacts/sha256:" + sha).status, 200)
        self.click("button[data-delete='%s']" % sha)
        self.driver.switch_to.alert.accept()
        self.wait_text("#artifacts-msg", "pump firmware 1.4 is in use, so it was not deleted")
        self.assertEqual(self.api.get("/artifacts/sha256:" + sha).status, 200)
        # a task's page lists its artifacts (the record's member: docs/api.md "Tasks")
        self.driver.execute_script("location.hash = arguments[0]", "#/tasks/" + task.json["ident"])
        item = self.wait_css("#task-artifacts li[data-artifact-key='fw']")
        self.assertEqual(item.text, "fw: pump firmware 1.4 (%s, 300.0 KiB)" % sha[:12])
        self.assertEqual(self.q("a", item).get_attribute("href").split("#", 1)[1],
                         "/artifacts?name=pump+firmware+1.4")
        self.assertEqual(self.api.patch("/tasks/" + task.json["ident"],
                                        {"artifacts": {}}).status, 200)
        self.driver.get(self.ui + "#/artifacts")
        self.wait_css("table.artifacts tr[data-artifact='%s']" % sha)
        self.click("button[data-delete='%s']" % sha)
        self.driver.switch_to.alert.accept()
        self.wait_text("#artifacts-msg", "Deleted pump firmware 1.4 (%s)." % sha[:12])
        wait_for(lambda: not self.qs("table.artifacts tr[data-artifact='%s']" % sha),
                 timeout=WAIT, what="the row gone")
        self.assertEqual(self.api.get("/artifacts/sha256:" + sha).status, 404)
        # a job's download progress, as the agent reports it (docs/mqtt.md "Status report")
        dev = self.make_devices(1, "dl", auto=False)[0]
        dl = self.post("/tasks", {"name": "Download", "script": "echo"})
        job = self.post("/tasks/%s/jobs/list" % dl["ident"],
                        {"ident_list": [dev.entity]})["items"][0]["ident"]
        wait_for(lambda: dev.jobs_received(), timeout=WAIT, what="the envelope")
        dev.report(job, "edge_transmitted")
        dev.report(job, "edge_started")
        dev.client.publish(dev._status_topic(job), json.dumps({
            "v": 1, "job": job, "status": "edge_running", "seq": 3, "ts": int(time.time()),
            "response": "downloading firmware: 42 %",
            "progress": {"done": 44040192, "total": 104857600}}), qos=1)
        with dev.lock:
            dev.seq[job] = 3
        wait_for(lambda: self.api.get("/jobs/" + job).json.get("progress") ==
                 {"done": 44040192, "total": 104857600}, timeout=WAIT,
                 what="edge_running with progress")
        self.driver.execute_script("location.hash = arguments[0]", "#/jobs/" + job)
        bar = self.wait_css("#job-progress")
        self.assertEqual(bar.get_attribute("aria-valuenow"), "42")
        self.assertIn("42 % · 42.0 MiB of 100.0 MiB", bar.text)
        dev.report(job, "terminated", "ok")
        # a viewer: the list, no upload, no delete
        k = self.post("/keys", {"user": "art-viewer", "role": "viewer"})
        other = self.api.post("/artifacts?name=viewer-sees-it", raw=b"x" * 10,
                              headers={"Content-Type": "application/octet-stream"})
        self.assertIn(other.status, (200, 201), other)
        try:
            self.signin(k["api_key"])
            self.wait_css("section.page-groups")
            self.driver.get(self.ui + "#/artifacts")
            self.wait_css("table.artifacts")
            self.wait_text("#no-upload", "role (viewer) may not upload or delete")
            self.assertEqual(self.qs("#upload-form"), [])
            self.assertEqual(self.qs("button[data-delete]"), [])
            self.assertIn("viewer-sees-it", self.q("table.artifacts").text)
        finally:
            self.signin(self.key)
            self.wait_css("section.page-groups")
        self.api.delete("/artifacts/" + other.json["ident"])
        self.console(allowed=["401", "409"])

    def test_4f_progress_counts_devices(self):
        """A group's progress counts devices: its retries never grow the total, its words
        follow its status, and a rollout that holds jobs says when they will all be out
        (docs/dashboard.md, docs/api.md "Progress")."""
        devs = self.make_devices(3, "site-p", auto=False)
        sent = self.post("/tasks/%s/jobs/tags" % self.echo["ident"], {
            "tag": "site-p", "group_name": "retried", "retry": {"max_attempts": 2,
                                                                "backoff_s": 0}})
        gid = sent["group"]["ident"]
        self.driver.get(self.ui + "#/groups/" + gid)
        self.wait_css("#group-done[data-total='3']")
        wait_for(lambda: all(d.jobs_received() for d in devs), timeout=WAIT,
                 what="every device got its job")
        for d in devs:
            d.report(d.jobs_received()[0], "edge_error", "boom")
        wait_for(lambda: all(len(d.jobs_received()) == 2 for d in devs), timeout=WAIT,
                 what="every device got its retry")
        for d in devs:
            d.report(d.jobs_received()[1], "terminated", "ok")
        # six jobs, three devices: 3 / 3, never 3 / 6
        self.wait_css("#group-done[data-done='3'][data-total='3']")
        self.wait_text("#group-words", "completed · 3 retries")
        self.assertEqual(self.group_of(gid)["total"], 6)
        # a rollout holding its jobs (a window of one minute a week): when all will be out
        self.driver.get(self.ui + "#/groups/" + self.held)
        self.wait_text("#group-words", "held for release")
        self.assertIn("at the rollout's pace", self.q("#group-words").text)
        self.driver.get(self.ui + "#/groups")
        self.wait_text("table.groups tr[data-group='%s']" % gid, "3 / 3 devices ended")
        self.console()

    def test_4g_send_list_takes_names_and_short_idents(self):
        """The send form's list of devices takes names (in quotes when they hold a space)
        and short idents besides UUIDs, resolved through GET /devices before anything is
        sent; every unknown or ambiguous entry is named and nothing is sent
        (docs/dashboard.md "The send form")."""
        devs = self.make_devices(3, "site-n", auto=True)
        twins = [self.post("/devices", {"name": "twin"})["entity_ident"] for _ in range(2)]
        spaced = self.post("/devices", {"name": "lab bench 1"})["entity_ident"]
        # a short ident the two twins share (UUIDv7: made together, same time digits)
        shared = os.path.commonprefix(twins).rstrip("-")
        self.assertGreaterEqual(len(shared.replace("-", "")), 6, twins)
        before = self.api.get("/groups?per_page=1").json["total_items"]
        self.driver.get(self.ui + "#/tasks/" + self.echo["ident"])
        self.wait_css("#send-form")
        self.click("#target-list")
        box = self.wait_css("#f-idents")
        box.send_keys('site-n-0, no-such-pump\ntwin %s 0a0a0a "lab bench 1"' % shared)
        self.q("#f-group").clear()
        self.q("#f-group").send_keys("by-names")
        self.click("#send")
        self.wait_text("#f-idents-error", 'no such device: "no-such-pump", "0a0a0a"')
        err = self.q("#f-idents-error").text
        self.assertIn('ambiguous: "twin" (2 devices have this name', err)
        self.assertIn('"%s" (' % shared, err)
        self.assertIn("device idents begin or end with it: give more of its digits", err)
        self.assertNotIn("site-n-0", err)
        self.assertNotIn("lab bench", err)
        self.wait_text("#send-msg", "nothing was sent")
        time.sleep(0.5)
        self.assertEqual(self.api.get("/groups?per_page=1").json["total_items"], before)
        # names, a short ident from the end, one from the start, a whole (upper-case) UUID,
        # a device given twice: each device once
        box.clear()
        box.send_keys('site-n-0 %s;%s\n%s site-n-0 "lab bench 1"' % (
            devs[1].entity[-8:], devs[2].entity[:23], twins[0].upper()))
        self.click("#send")
        self.wait_css("#group-done")
        gid = self.driver.current_url.rsplit("/", 1)[1]
        g = self.group_of(gid)
        self.assertEqual(g["name"], "by-names")
        jobs = self.api.get("/jobs?per_page=50&group_ident=" + gid).json["items"]
        sent = {j["entity_ident"] for j in jobs} | {r["entity_ident"] for r in g.get("rejected", [])}
        self.assertEqual(sent, {devs[0].entity, devs[1].entity, devs[2].entity, twins[0], spaced})
        self.assertEqual(len(jobs) + len(g.get("rejected", [])), 5)
        self.console()

    def test_4h_cancel_a_job_with_a_reason(self):
        """A job's Cancel asks for an optional reason first ("Keep it" changes nothing); the
        reason goes with PATCH /jobs/<id>/cancel and the job's response says who and why
        (docs/dashboard.md "A job", docs/api.md)."""
        who = self.api.get("/whoami").json["user"]
        pend = self.api.get("/jobs?per_page=2&status=pending&group_ident=" + self.held).json["items"]
        self.assertEqual(len(pend), 2, pend)
        job, other = pend[0]["ident"], pend[1]["ident"]
        self.driver.get(self.ui + "#/jobs/" + job)
        self.wait_css("#timeline")
        self.click("#cancel-job")
        self.wait_css("#cancel-reason").send_keys("wrong firmware for this site")
        self.click("#cancel-keep")
        self.wait_css("#cancel-job")
        self.assertFalse(self.qs("#cancel-form"))
        time.sleep(0.5)
        self.assertEqual(self.api.get("/jobs/" + job).json["status"], "pending")
        # a reason over 500 bytes is refused in the page, nothing is sent
        self.click("#cancel-job")
        box = self.wait_css("#cancel-reason")
        self.driver.execute_script("arguments[0].value = 'é'.repeat(251)", box)
        self.click("#cancel-confirm")
        self.wait_text("#cancel-reason-error", "at most 500 bytes (this is 502)")
        self.assertEqual(self.api.get("/jobs/" + job).json["status"], "pending")
        box.clear()
        box.send_keys("wrong firmware for this site")
        self.click("#cancel-confirm")
        want = "cancelled by %s: wrong firmware for this site" % who
        self.wait_css("#timeline li[data-status='cancelled']")
        self.wait_text(".facts pre.resp", want)
        self.assertIn(want, self.q("#timeline li[data-status='cancelled']").text)
        self.assertFalse(self.qs("#cancel-job") or self.qs("#cancel-form"))
        r = self.api.get("/jobs/" + job).json
        self.assertEqual((r["status"], r["response"]), ("cancelled", want))
        # no reason: "cancelled by <user>" alone
        self.driver.get(self.ui + "#/jobs/" + other)
        self.wait_css("#cancel-job").click()
        self.wait_css("#cancel-confirm").click()
        self.wait_css("#timeline li[data-status='cancelled']")
        r = self.api.get("/jobs/" + other).json
        self.assertEqual((r["status"], r["response"]), ("cancelled", "cancelled by " + who))
        self.console()

    def test_5_huge_group(self):
        task = self.post("/tasks", {"name": "Offline", "script": "echo",
                                    "allow_offline": True})
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=30)
        idents = []
        for i in range(HUGE):
            c.request("POST", "/v3/commands/devices", json.dumps({"name": "big-%d" % i}),
                      {"api-key": self.key, "Content-Type": "application/json"})
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 201, body)
            idents.append(json.loads(body)["entity_ident"])
        c.close()
        sent = self.post("/tasks/%s/jobs/list" % task["ident"],
                         {"ident_list": idents, "group_name": "everything"})
        self.assertEqual(len(sent["items"]), HUGE)
        group = sent["group"]["ident"]
        t0 = time.time()
        self.driver.get(self.ui + "#/groups/" + group)
        self.wait_css("#group-done[data-total='%d']" % HUGE)
        self.wait_text(".pager .pageinfo", "Page 1 of 200 · 10,000 jobs")
        self.assertEqual(len(self.qs("table.jobs tbody tr")), 50)
        self.click(".pager button[data-go='next']")
        self.wait_text(".pager .pageinfo", "Page 2 of 200")
        self.assertLess(time.time() - t0, WAIT)
        # responsive: a script runs at once between two polls
        self.assertEqual(self.driver.execute_script("return 1 + 1"), 2)
        self.driver.get(self.ui + "#/devices")
        self.wait_text(".pager .pageinfo", "devices")
        self.assertEqual(len(self.qs("table.devices tbody tr")), 50)
        self.console()

    def test_6_phone_width(self):
        self.driver.set_window_size(390, 844)
        try:
            dev = self.api.get("/devices?tag=site-a&per_page=1").json["items"][0]["entity_ident"]
            for page in ("#/groups/" + self.group, "#/groups", "#/tasks/" + self.echo["ident"],
                         "#/devices", "#/jobs", "#/devices/" + dev, "#/artifacts"):
                self.driver.get(self.ui + page)
                self.wait_css("main section table, main section form, #group-progress")
                time.sleep(0.3)
                self.assertTrue(self.no_overflow(), page + " is wider than a phone")
        finally:
            self.driver.set_window_size(1280, 1000)
        self.console()

    def test_7_revoked_key_ends_the_session(self):
        k = self.post("/keys", {"user": "olga", "role": "viewer"})
        self.signin(k["api_key"])
        self.wait_css("section.page-groups")
        self.driver.get(self.ui + "#/groups/" + self.group)
        self.wait_css("#group-progress")
        self.assertEqual(self.api.delete("/keys/" + k["ident"]).status, 204)
        self.wait_text("#signin-msg", "session has ended", timeout=WAIT)
        self.assertEqual(self.driver.execute_script("return sessionStorage.length"), 0)
        self.console(allowed=["401"])

    def test_8_sign_out(self):
        self.signin(self.key)
        self.wait_css("section.page-groups")
        self.click("#signout")
        self.wait_text("#signin-msg", "Signed out")
        self.assertEqual(self.driver.execute_script("return sessionStorage.length"), 0)
        self.driver.get(self.ui + "#/devices")
        self.wait_css("#api-key")
        self.assertEqual(self.qs("section.page-devices"), [])
        self.console()

    def test_9_api_down_and_back(self):
        self.signin(self.key)
        self.driver.get(self.ui + "#/groups/" + self.group)
        self.wait_css("#group-done[data-done='6']")
        job = self.api.get("/jobs?group_ident=%s&per_page=1" % self.group).json["items"][0]["ident"]
        self.coord.stop()
        try:
            self.wait_css("#banner:not([hidden])", "the no-connection banner")
            self.assertIn("No connection", self.q("#banner").text)
            # the page keeps what it showed
            self.assertTrue(self.qs("#group-done[data-done='6']"))
            # a page loaded while the API is down says so, no spinner left
            self.driver.get(self.ui + "#/devices")
            self.wait_css("main .notice.error")
            self.assertIn("did not answer", self.q("main .notice.error").text)
            self.assertEqual(self.qs("main .loading"), [])
            self.assertEqual(self.q("#try-again").text, "Try again")
            # a page that can't load at all (a job's) too
            self.driver.get(self.ui + "#/jobs/" + job)
            self.wait_css("main .notice.error #try-again")
        finally:
            self.coord.start()
        time.sleep(1)
        self.assertEqual(self.qs("#timeline"), [])  # it waits for the button
        self.click("#try-again")
        self.wait_css("#timeline")
        wait_for(lambda: self.q("#banner").get_attribute("hidden") is not None, timeout=WAIT,
                 what="the banner gone")
        # the API going away mid-request is refused, reset or cut off, as the browser saw it
        self.console(allowed=["ERR_CONNECTION_REFUSED", "ERR_CONNECTION_RESET",
                              "ERR_SOCKET_NOT_CONNECTED", "ERR_EMPTY_RESPONSE",
                              "ERR_CONNECTION_CLOSED", "Failed to fetch"])


if __name__ == "__main__":
    unittest.main()
