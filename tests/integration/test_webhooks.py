#!/usr/bin/env python3
"""Integration tests of webhooks (docs/api.md, "Webhooks"; docs/integrations.md): the real
rcs-coordinator (serve without --mqtt: jobs stay pending, cancels end them) and a real HTTP
receiver (http.server on a free loopback port) that checks every signature with hmac.

Checked: the endpoints (create with a generated secret shown once, list, get, patch, delete,
admin role, another tenant's 404); URLs refused when saved (not http(s), private, loopback,
link-local and metadata addresses, user:password) and, without --webhook-allow-net, loopback
by name and by number; the address refused at connect (a saved webhook whose network is no
longer allowed after a restart: a failed attempt naming the address); deliveries of every
history item (initial, pending, cancelled) in order per job, signed
(rcs-signature t=<ts>,v1=HMAC-SHA256(secret, "<ts>.<body>")) with rcs-delivery = the body's
id; a receiver answering 500 then 200 (retried, attempts listed with their codes); one that
hangs (timed out and retried, while another webhook's deliveries and the API go on); one that
redirects (not followed); one that always fails (failed once --webhook-give-up has passed);
the statuses filter; a flood of one hanging webhook (a thousand jobs due) leaving room for
another webhook's deliveries; deliveries at fleet speed (450 to a receiver answering in 5 ms
within 15 s, in order per job, beside a hanging webhook).

The coordinator runs with --webhook-retry-base 1 --webhook-timeout 2 --webhook-give-up 6 so
that retries take seconds.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_webhooks.py
"""

import hashlib
import hmac
import http.server
import json
import os
import shutil
import socketserver
import tempfile
import threading
import time
import unittest

from rcs_harness import Coordinator, free_port, is_uuid, wait_for
from rcs_fixture import CoordinatorTest

SECRET = "s3cret-for-the-webhook-tests"


class Receiver:
    """An HTTP server on 127.0.0.1: every POST recorded as (path, headers, body, ok), where ok
    says whether its signature checked out; the answer chosen by the path's first segment:
    /ok 200, /flaky/<n> 500 n times then 200, /hang sleeps 10 s, /slow/<ms> 200 after ms
    milliseconds, /redirect 302, /fail 500."""

    def __init__(self):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.hits = []
        self.counts = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                ok = outer.check(self.headers, body)
                with outer.lock:
                    outer.hits.append((self.path, dict(self.headers), body, ok))
                    count = outer.counts[self.path] = outer.counts.get(self.path, 0) + 1
                kind = self.path.split("/")[1]
                code = 200
                if kind == "flaky" and count <= int(self.path.split("/")[2]):
                    code = 500
                elif kind == "fail":
                    code = 500
                elif kind == "hang":
                    outer.stop_event.wait(10)
                elif kind == "slow":
                    time.sleep(int(self.path.split("/")[2]) / 1000.0)
                elif kind == "redirect":
                    code = 302
                self.send_response(code)
                if code == 302:
                    self.send_header("Location", outer.url + "/ok/redirected")
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            # the sender opens up to --webhook-per-hook connections at once: with the
            # default backlog of 5 the kernel drops them and the requests come seconds late
            request_queue_size = 256

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def check(headers, body):
        sig = headers.get("rcs-signature", "")
        parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
        if "t" not in parts or "v1" not in parts:
            return False
        mac = hmac.new(SECRET.encode(), parts["t"].encode() + b"." + body,
                       hashlib.sha256).hexdigest()
        return hmac.compare_digest(mac, parts["v1"])

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()

    def on(self, path):
        with self.lock:
            return [h for h in self.hits if h[0] == path]


class WebhookTest(CoordinatorTest):
    extra_args = ("--webhook-allow-net", "127.0.0.1/32", "--webhook-retry-base", "1",
                  "--webhook-timeout", "2", "--webhook-give-up", "6")

    @classmethod
    def setUpClass(cls):
        cls.recv = Receiver().start()
        super().setUpClass()
        cls.task = cls.admin.post("/tasks", {"name": "hook task", "script": "echo",
                                             "allow_offline": True}).json
        cls.device = cls.admin.post("/devices", {"name": "hook dev", "tags": []}).json

    @classmethod
    def tearDownClass(cls):
        cls.recv.stop()
        super().tearDownClass()

    def hook(self, path, **fields):
        body = {"url": self.recv.url + path, "events": ["job.status"], "secret": SECRET}
        body.update(fields)
        r = self.admin.post("/webhooks", body)
        self.assertStatus(r, 201)
        self.addCleanup(self.admin.delete, "/webhooks/" + r.json["ident"])
        return r.json

    def job(self):
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"],
                            {"entity_ident": self.device["entity_ident"]})
        self.assertStatus(r, 201)
        return r.json

    def deliveries(self, hook):
        r = self.admin.get("/webhooks/%s/deliveries?per_page=500" % hook["ident"])
        self.assertStatus(r, 200)
        return r.json["items"]

    def test_crud_and_roles(self):
        r = self.admin.post("/webhooks", {"url": self.recv.url + "/ok/crud",
                                          "events": ["job.status", "group.status"]})
        self.assertStatus(r, 201)
        hook = r.json
        self.assertTrue(is_uuid(hook["ident"]))
        self.assertEqual(len(hook["secret"]), 64)  # generated, shown once
        self.assertEqual(hook["statuses"], [])
        got = self.admin.get("/webhooks/" + hook["ident"])
        self.assertStatus(got, 200)
        self.assertNotIn("secret", got.json)
        listed = self.admin.get("/webhooks").json
        self.assertIn(hook["ident"], [h["ident"] for h in listed["items"]])
        self.assertNotIn("secret", json.dumps(listed))
        p = self.admin.patch("/webhooks/" + hook["ident"],
                             {"active": False, "statuses": ["terminated", "completed"]})
        self.assertStatus(p, 200)
        self.assertEqual(p.json["active"], False)
        self.assertEqual(p.json["statuses"], ["terminated", "completed"])
        viewer = self.coord.api(self.coord.create_key(self.client_root, "v", "viewer")["api_key"])
        self.assertError(viewer.get("/webhooks"), 403, "forbidden")
        operator = self.coord.api(
            self.coord.create_key(self.client_root, "o", "operator")["api_key"])
        self.assertError(operator.post("/webhooks", {"url": self.recv.url, "events": []}), 403,
                         "forbidden")
        other = self.coord.api(self.coord.init_tenant(user="other")["api_key"])
        self.assertError(other.get("/webhooks/" + hook["ident"]), 404, "not_found")
        self.assertError(other.delete("/webhooks/" + hook["ident"]), 404, "not_found")
        self.assertError(other.get("/webhooks/%s/deliveries" % hook["ident"]), 404, "not_found")
        self.assertStatus(self.admin.delete("/webhooks/" + hook["ident"]), 204)
        self.assertError(self.admin.get("/webhooks/" + hook["ident"]), 404, "not_found")

    def test_bad_bodies(self):
        for body, field in [
                ({"url": "ftp://127.0.0.1/x", "events": ["job.status"]}, "url"),
                ({"url": "http://10.0.0.7/x", "events": ["job.status"]}, "url"),
                ({"url": "http://192.168.1.1/x", "events": ["job.status"]}, "url"),
                ({"url": "http://169.254.169.254/latest", "events": ["job.status"]}, "url"),
                ({"url": "http://[::1]:80/", "events": ["job.status"]}, "url"),
                ({"url": "http://[::ffff:10.0.0.1]/", "events": ["job.status"]}, "url"),
                ({"url": "http://127.0.0.2/x", "events": ["job.status"]}, "url"),
                ({"url": "http://u:p@127.0.0.1/x", "events": ["job.status"]}, "url"),
                ({"url": "not a url", "events": ["job.status"]}, "url"),
                ({"url": self.recv.url, "events": []}, "events"),
                ({"url": self.recv.url, "events": ["job.created"]}, "events"),
                ({"url": self.recv.url, "events": ["job.status", "job.status"]}, "events"),
                ({"url": self.recv.url, "events": ["job.status"], "statuses": ["bogus"]},
                 "statuses"),
                ({"url": self.recv.url, "events": ["job.status"], "secret": "short"}, "secret"),
                ({"url": self.recv.url, "events": ["job.status"], "extra": 1}, "extra"),
                ({"events": ["job.status"]}, "url")]:
            with self.subTest(body=body):
                self.assertError(self.admin.post("/webhooks", body), 400, "validation_failed",
                                 field)
        # a saved webhook can't be moved to an address the guard refuses either
        hook = self.admin.post("/webhooks", {"url": self.recv.url + "/ok/patch",
                                             "events": ["job.status"]}).json
        for url in ("http://169.254.169.254/latest", "http://10.0.0.7/x", "ftp://127.0.0.1/x"):
            with self.subTest(patch=url):
                self.assertError(self.admin.patch("/webhooks/" + hook["ident"], {"url": url}),
                                 400, "validation_failed", "url")
        self.assertEqual(self.admin.get("/webhooks/" + hook["ident"]).json["url"],
                         self.recv.url + "/ok/patch")
        self.assertStatus(self.admin.delete("/webhooks/" + hook["ident"]), 204)

    def test_signed_ordered_deliveries(self):
        hook = self.hook("/ok/order")
        jobs = [self.job() for _ in range(3)]
        for j in jobs:
            self.assertStatus(self.admin.patch("/jobs/%s/cancel" % j["ident"]), 200)
        wait_for(lambda: len(self.recv.on("/ok/order")) >= 9, timeout=20,
                 what="9 deliveries")
        hits = self.recv.on("/ok/order")
        self.assertEqual(len(hits), 9)
        per_job = {}
        for _, headers, body, ok in hits:
            self.assertTrue(ok, "bad signature: %r" % headers)
            doc = json.loads(body)
            self.assertEqual(sorted(doc), ["data", "id", "ts", "type"])
            self.assertEqual(doc["type"], "job.status")
            self.assertEqual(headers["rcs-delivery"], doc["id"])
            self.assertTrue(is_uuid(doc["id"]))
            per_job.setdefault(doc["data"]["ident"], []).append(doc["data"]["status"])
        for j in jobs:
            self.assertEqual(per_job[j["ident"]], ["initial", "pending", "cancelled"])
        # the receiver answers before the coordinator records the attempt
        last = {}

        def recorded():
            last["items"] = self.deliveries(hook)
            return len(last["items"]) == 9 and all(d["state"] == "delivered"
                                                   for d in last["items"])
        wait_for(recorded, timeout=10, what="9 deliveries recorded as delivered")
        items = last["items"]
        self.assertEqual(items[0]["attempts"][0]["status_code"], 200)

    def test_group_status_deliveries(self):
        # every change of a group's status, with the group's record as GET /groups/<id> shows
        # it, the status the change made
        self.hook("/ok/groups", events=["group.status"])
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                            {"ident_list": [self.device["entity_ident"]], "group_name": "hooked",
                             "rollout": {"max_per_minute": 1}})
        self.assertStatus(r, 201)
        gid = r.json["group"]["ident"]
        for action in ("pause", "resume", "cancel"):
            self.assertStatus(self.admin.patch("/groups/%s/%s" % (gid, action)), 200)
        wait_for(lambda: len(self.recv.on("/ok/groups")) >= 3, timeout=20,
                 what="3 group deliveries")
        time.sleep(1.5)
        docs = [json.loads(h[2]) for h in self.recv.on("/ok/groups")]
        self.assertTrue(all(h[3] for h in self.recv.on("/ok/groups")), "bad signature")
        self.assertEqual([d["type"] for d in docs], ["group.status"] * 3)
        self.assertEqual([d["data"]["status"] for d in docs], ["paused", "running", "cancelled"])
        record = self.admin.get("/groups/" + gid).json
        self.assertEqual(docs[-1]["data"]["ident"], gid)
        self.assertEqual(sorted(docs[-1]["data"]), sorted(record))

    def test_statuses_filter(self):
        self.hook("/ok/filter", statuses=["cancelled"])
        j = self.job()
        self.admin.patch("/jobs/%s/cancel" % j["ident"])
        wait_for(lambda: len(self.recv.on("/ok/filter")) >= 1, timeout=20, what="a delivery")
        time.sleep(1.5)
        statuses = [json.loads(h[2])["data"]["status"] for h in self.recv.on("/ok/filter")]
        self.assertEqual(statuses, ["cancelled"])

    def test_retry_after_500(self):
        hook = self.hook("/flaky/2")
        self.job()
        wait_for(lambda: all(d["state"] == "delivered" for d in self.deliveries(hook)) and
                 len(self.deliveries(hook)) == 2, timeout=30, what="delivered after retries")
        first = [d for d in self.deliveries(hook) if d["status"] == "initial"][0]
        codes = [a["status_code"] for a in first["attempts"]]
        self.assertEqual(codes, [500, 500, 200])
        self.assertEqual(first["attempts"][0]["error"], "HTTP 500")
        # in order: pending was delivered after initial
        statuses = [json.loads(h[2])["data"]["status"] for h in self.recv.on("/flaky/2")]
        self.assertEqual(statuses, ["initial", "initial", "initial", "pending"])
        # each attempt is signed at its own time: t= is the attempt's "at", not the body's ts
        ts = [int(dict(p.split("=", 1) for p in h[1]["rcs-signature"].split(","))["t"])
              for h in self.recv.on("/flaky/2") if json.loads(h[2])["data"]["status"] ==
              "initial"]
        self.assertEqual(len(ts), 3)
        for t, a in zip(ts, first["attempts"]):
            self.assertLessEqual(abs(t - a["at"]), 1, (ts, first["attempts"]))
        self.assertGreater(ts[2], ts[0])

    def test_hang_does_not_block(self):
        hang = self.hook("/hang/x")
        ok = self.hook("/ok/beside-hang")
        t0 = time.time()
        for _ in range(5):
            self.job()
        self.assertLess(time.time() - t0, 10, "the API waited for a receiver")
        wait_for(lambda: len(self.recv.on("/ok/beside-hang")) >= 10, timeout=15,
                 what="the other webhook's deliveries")
        wait_for(lambda: any(a["error"] and "imeout" in a["error"] or
                             a["error"] and "timed out" in a["error"]
                             for d in self.deliveries(hang) for a in d["attempts"]),
                 timeout=20, what="a timed-out attempt")

    def test_redirect_not_followed(self):
        hook = self.hook("/redirect/x")
        self.job()
        wait_for(lambda: any(d["attempts"] for d in self.deliveries(hook)), timeout=20,
                 what="an attempt")
        a = [d for d in self.deliveries(hook) if d["attempts"]][0]["attempts"][0]
        self.assertEqual(a["status_code"], 302)
        self.assertIn("redirect", a["error"])
        time.sleep(1)
        self.assertEqual(self.recv.on("/ok/redirected"), [])

    def test_gives_up(self):
        hook = self.hook("/fail/x")
        self.job()
        wait_for(lambda: len(self.deliveries(hook)) == 2 and
                 all(d["state"] == "failed" for d in self.deliveries(hook)),
                 timeout=40, what="deliveries failed")
        ds = self.deliveries(hook)
        for d in ds:
            self.assertGreaterEqual(len(d["attempts"]), 1)
            self.assertEqual(d["last_error"], "HTTP 500")
            self.assertIsNone(d["next_at"])
        # retried before giving up: the first of the job's two for sure; the second waits
        # behind it (one job's deliveries go in order) and may have little of its 6 s left
        # when its turn comes on a busy machine
        self.assertGreaterEqual(max(len(d["attempts"]) for d in ds), 2, ds)


class FloodTest(CoordinatorTest):
    """A receiver that hangs with a thousand jobs' deliveries due (2000 queued, a thousand at
    the head of their job's order) holds at most its share of the sender (4 at once): a
    webhook saved after them still gets its deliveries within a few attempt timeouts, not
    after the flood (500 rounds of 2 s)."""

    extra_args = ("--webhook-allow-net", "127.0.0.1/32", "--webhook-retry-base", "1",
                  "--webhook-timeout", "2", "--webhook-give-up", "600")
    FLOOD_DEVICES = 200
    FLOOD_SENDS = 5

    @classmethod
    def setUpClass(cls):
        cls.recv = Receiver().start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        cls.recv.stop()
        super().tearDownClass()

    def test_flood_of_one_hook_leaves_room(self):
        hang = self.admin.post("/webhooks", {"url": self.recv.url + "/hang/flood",
                                             "events": ["job.status"], "secret": SECRET})
        self.assertStatus(hang, 201)
        task = self.admin.post("/tasks", {"name": "flood", "script": "echo",
                                          "allow_offline": True}).json
        devices = [self.admin.post("/devices", {"name": "d%d" % i, "tags": []}).json
                   ["entity_ident"] for i in range(self.FLOOD_DEVICES)]
        for _ in range(self.FLOOD_SENDS):
            r = self.admin.post("/tasks/%s/jobs/list" % task["ident"],
                                {"ident_list": devices})
            self.assertStatus(r, 201)
            self.assertEqual(len(r.json["items"]), self.FLOOD_DEVICES)
        wait_for(lambda: self.recv.on("/hang/flood"), timeout=20, what="the flood's first hit")
        ok = self.admin.post("/webhooks", {"url": self.recv.url + "/ok/after-flood",
                                           "events": ["job.status"], "secret": SECRET})
        self.assertStatus(ok, 201)
        for _ in range(2):
            self.assertStatus(self.admin.post("/tasks/%s/jobs" % task["ident"],
                                              {"entity_ident": devices[0]}), 201)
        wait_for(lambda: len(self.recv.on("/ok/after-flood")) >= 4, timeout=30,
                 what="the other webhook's 4 deliveries beside the flood")
        self.assertTrue(all(h[3] for h in self.recv.on("/ok/after-flood")))
        queued = self.admin.get("/webhooks/%s/deliveries?per_page=500" %
                                hang.json["ident"]).json["items"]
        self.assertTrue(any(d["state"] == "queued" for d in queued), "the flood was drained")
        self.assertStatus(self.admin.delete("/webhooks/" + hang.json["ident"]), 204)


class FleetSpeedTest(CoordinatorTest):
    """Deliveries at fleet speed (docs/api.md, "Webhooks"): a receiver answering in 5 ms gets
    the 450 deliveries of a 150-device send and its cancel (initial, pending, cancelled of
    each job) within 15 s of the cancel (about a second here), each job's in order, while a
    webhook that hangs on every delivery holds only its own share of the sender. A sender
    that filled its slots five times a second, 4 at once per webhook, took 20 a second at
    most: 22 s at least."""

    extra_args = ("--webhook-allow-net", "127.0.0.1/32", "--webhook-timeout", "5",
                  "--webhook-give-up", "600")
    DEVICES = 150

    @classmethod
    def setUpClass(cls):
        cls.recv = Receiver().start()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        cls.recv.stop()
        super().tearDownClass()

    def test_deliveries_fill_as_slots_free_in_order_per_job(self):
        for path in ("/slow/5", "/hang/beside"):
            r = self.admin.post("/webhooks", {"url": self.recv.url + path,
                                              "events": ["job.status"], "secret": SECRET})
            self.assertStatus(r, 201)
        task = self.admin.post("/tasks", {"name": "speed", "script": "echo",
                                          "allow_offline": True}).json
        devices = [self.admin.post("/devices", {"name": "s%d" % i, "tags": []}).json
                   ["entity_ident"] for i in range(self.DEVICES)]
        r = self.admin.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": devices, "group_name": "speed"})
        self.assertStatus(r, 201)
        jobs = [j["ident"] for j in r.json["items"]]
        self.assertEqual(len(jobs), self.DEVICES)
        self.assertStatus(self.admin.patch("/groups/%s/cancel" % r.json["group"]["ident"]),
                          200)
        want = 3 * self.DEVICES
        t0 = time.monotonic()
        wait_for(lambda: len(self.recv.on("/slow/5")) >= want, timeout=15,
                 what="%d deliveries within 15 s" % want)
        took = time.monotonic() - t0
        per_job = {}
        for _, headers, body, ok in self.recv.on("/slow/5"):
            self.assertTrue(ok, "bad signature: %r" % headers)
            doc = json.loads(body)
            per_job.setdefault(doc["data"]["ident"], []).append(doc["data"]["status"])
        self.assertEqual(sorted(per_job), sorted(jobs))
        for j in jobs:
            self.assertEqual(per_job[j], ["initial", "pending", "cancelled"], j)
        # several jobs' deliveries were on their way at once: the hanging webhook got the
        # first of many jobs, not one
        self.assertGreater(len(self.recv.on("/hang/beside")), 4)
        print("%d deliveries in %.1f s after the cancel" % (want, took))


class GuardTest(unittest.TestCase):
    """Without --webhook-allow-net: loopback refused when saved; a webhook saved while its
    network was allowed is refused at connect, with the reason in its attempt."""

    def test_refused_at_save_and_connect(self):
        workdir = tempfile.mkdtemp(prefix="rcs-hooks-")
        recv = Receiver().start()
        coord = None
        try:
            coord = Coordinator(workdir, extra_args=["--webhook-allow-net", "127.0.0.1/32",
                                                      "--webhook-retry-base", "1"])
            tenant = coord.init_tenant()
            coord.start()
            admin = coord.api(tenant["api_key"])
            hook = admin.post("/webhooks", {"url": recv.url + "/ok/guard",
                                            "events": ["job.status"], "secret": SECRET}).json
            self.assertEqual(coord.stop(), 0)
            coord = Coordinator(workdir, extra_args=["--webhook-retry-base", "1"],
                                db=coord.db)
            coord.start()
            for url in ("http://127.0.0.1/", "http://localhost:%d/" % recv.port,
                        "http://127.1/"):
                r = admin.__class__(coord.base, tenant["api_key"]).post(
                    "/webhooks", {"url": url, "events": ["job.status"]})
                self.assertEqual(r.status, 400, r)
                self.assertEqual(r.json["error"]["details"]["field"], "url")
                # one sentence: which address, and why it is refused
                self.assertRegex(r.json["error"]["message"],
                                 r"^'url' resolves to a refused address: (127\.0\.0\.1|::1) "
                                 r"is a loopback address \(allow it with --webhook-allow-net\)$")
            admin = coord.api(tenant["api_key"])
            task = admin.post("/tasks", {"name": "t", "script": "echo",
                                         "allow_offline": True}).json
            dev = admin.post("/devices", {"name": "d", "tags": []}).json
            admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": dev["entity_ident"]})

            def refused():
                items = admin.get("/webhooks/%s/deliveries" % hook["ident"]).json["items"]
                return [a for d in items for a in d["attempts"]
                        if a["error"] and "address refused" in a["error"]]
            wait_for(lambda: refused(), timeout=20, what="an attempt refused at connect")
            self.assertIn("127.0.0.1 is a loopback address", refused()[0]["error"])
            self.assertEqual(recv.on("/ok/guard"), [])
        finally:
            recv.stop()
            if coord:
                coord.stop()
            if os.environ.get("RCS_KEEP_TMP") is None:
                shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
