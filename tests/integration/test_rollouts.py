#!/usr/bin/env python3
"""Integration tests of group sends (docs/api.md "Rollouts"): rollout rates, pause, resume
and cancel, aborts, retries with the agents' cause codes, windows, continuous tag sends and
a coordinator killed mid-rollout, against a real mosquitto, coordinator and agents (fake
devices speaking protocol v1 for the many-device cases, real rcs-agents for the causes)."""

import json
import os
import signal
import threading
import time
import unittest
import urllib.request

from rcs_harness import Agent, FakeDevice, free_port, list_all, wait_for
from rcs_fixture import CoordinatorTest, StackTest


class ScriptedDevice(FakeDevice):
    """A fake device whose answers are scripted per attempt: outcomes is a list of
    (status, error) for its 1st, 2nd, ... job ((\"terminated\", None) when it runs out);
    hold=True leaves jobs at edge_running until finish() is called. A repeated envelope of a
    finished job is answered with its final report again, as the agent does."""

    def __init__(self, broker, client_root, entity_ident, outcomes=(), hold=False, tags=()):
        super().__init__(broker, client_root, entity_ident, auto=False, tags=tags)
        self.outcomes = list(outcomes)
        self.hold = hold
        self.held = []
        self.finals = {}  # job -> its final report

    def _on_message(self, client, userdata, msg):
        super()._on_message(client, userdata, msg)
        if msg.topic.split("/")[-1] == "cancel":
            return
        env = json.loads(msg.payload)
        job = env["job"]
        with self.lock:
            first = [e["job"] for e in self.envelopes].count(job) == 1
            n = len(set(e["job"] for e in self.envelopes))
        if not first:
            with self.lock:
                final = self.finals.get(job)
            if final is not None:
                self.client.publish(self._status_topic(job), final, qos=1)
            return
        for st in ("edge_transmitted", "edge_started", "edge_running"):
            self.report(job, st)
        if self.hold:
            with self.lock:
                self.held.append(job)
            return
        self.finish(job, n)

    def finish(self, job, n=None):
        status, error = ("terminated", None)
        if n is not None and n <= len(self.outcomes):
            status, error = self.outcomes[n - 1]
        with self.lock:
            seq = self.seq.get(job, 0) + 1
            self.seq[job] = seq
        body = {"v": 1, "job": job, "status": status, "seq": seq, "ts": int(time.time()),
                "response": "ok" if status == "terminated" else "failed"}
        if error:
            body["error"] = error
        with self.lock:
            self.finals[job] = json.dumps(body)
        self.client.publish(self._status_topic(job), json.dumps(body), qos=1)


class Events:
    """Records the messages of a topic filter (paho), as (topic, payload dict)."""

    def __init__(self, broker, topic_filter):
        import paho.mqtt.client as mqtt
        self.items = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.client = mqtt.Client(client_id="rec-%d-%f" % (os.getpid(), time.time()))
        self.client.on_connect = lambda c, u, f, rc: (c.subscribe(topic_filter, 1),
                                                      self.ready.set())
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", broker.port, keepalive=5)
        self.client.loop_start()
        self.ready.wait(10)
        time.sleep(0.3)  # the subscription is acknowledged

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.items.append((msg.topic, json.loads(msg.payload)))

    def all(self):
        with self.lock:
            return list(self.items)

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


class RolloutTest(CoordinatorTest):
    workdir_prefix = "rcs-rollout-"

    @classmethod
    def setUpClass(cls):
        super(CoordinatorTest, cls).setUpClass()  # the broker first
        cls.start_broker()
        cls.metrics_port = free_port()
        cls.start_coordinator(["--mqtt", cls.broker.url, "--metrics-listen",
                               "127.0.0.1:%d" % cls.metrics_port])
        cls.task = None

    def setUp(self):
        if RolloutTest.task is None:
            RolloutTest.task = self.make_task(name="rollout")["ident"]

    def fleet(self, n, tags=(), **kw):
        """n new devices, each online as a ScriptedDevice; returns [(ident, device)]."""
        out = []
        for i in range(n):
            ident = self.make_device(name="d%d" % i, tags=tags)["entity_ident"]
            d = ScriptedDevice(self.broker, self.client_root, ident, **kw).start()
            self.fakes.append(d)
            out.append((ident, d))
        for ident, _ in out:
            wait_for(lambda: self.admin.get("/devices/" + ident).json["online"], timeout=10,
                     what="device online")
        return out

    def send(self, idents, **members):
        body = {"ident_list": idents}
        body.update(members)
        r = self.admin.post("/tasks/%s/jobs/list" % self.task, body)
        self.assertStatus(r, 201)
        return r.json

    def group(self, gid):
        r = self.admin.get("/groups/" + gid)
        self.assertStatus(r, 200)
        return r.json

    def jobs(self, gid):
        return list_all(self.admin, "/jobs", group_ident=gid)

    def wait_group(self, gid, status, timeout=20):
        return wait_for(lambda: (lambda g: g if g["status"] == status else None)(
            self.group(gid)), timeout=timeout, what="group %s" % status)

    # ---- bad input ----

    def test_bad_input(self):
        dev = self.make_device(name="bad")["entity_ident"]
        base = "/tasks/%s/jobs/list" % self.task
        cases = [
            ({"rollout": {}}, "rollout"),
            ({"rollout": []}, "rollout"),
            ({"rollout": {"max_per_minute": 0}}, "rollout.max_per_minute"),
            ({"rollout": {"max_per_minute": 100001}}, "rollout.max_per_minute"),
            ({"rollout": {"max_per_minute": "6"}}, "rollout.max_per_minute"),
            ({"rollout": {"max_per_minute": 6, "speed": 1}}, "rollout.speed"),
            ({"rollout": {"exponential": {"base_per_minute": 5, "factor": 0.5,
                                          "after_succeeded": 1}}},
             "rollout.exponential.factor"),
            ({"rollout": {"exponential": {"base_per_minute": 5, "factor": 2}}},
             "rollout.exponential.after_succeeded"),
            ({"abort": {"failure_percent": 101}}, "abort.failure_percent"),
            ({"abort": {"failure_percent": True}}, "abort.failure_percent"),
            ({"abort": {"failure_percent": 5, "min_finished": 0}}, "abort.min_finished"),
            ({"window": {"days": ["mon"], "start": "25:00", "duration_min": 5}},
             "window.start"),
            ({"window": {"days": ["xyz"], "start": "01:00", "duration_min": 5}},
             "window.days"),
            ({"window": {"days": [], "start": "01:00", "duration_min": 5}}, "window.days"),
            ({"window": {"days": ["mon"], "start": "01:00", "duration_min": 0}},
             "window.duration_min"),
            ({"window": {"days": ["mon"], "start": "01:00", "duration_min": 5,
                         "utc_offset_min": 900}}, "window.utc_offset_min"),
            ({"retry": {"max_attempts": 11}}, "retry.max_attempts"),
            ({"retry": {}}, "retry.max_attempts"),
            ({"retry": {"max_attempts": 2, "backoff_s": -1}}, "retry.backoff_s"),
            ({"retry": {"max_attempts": 2, "backoff_factor": 11}}, "retry.backoff_factor"),
            ({"continuous": True}, "continuous"),
        ]
        for extra, field in cases:
            body = {"ident_list": [dev]}
            body.update(extra)
            self.assertError(self.admin.post(base, body), 400, "validation_failed", field)
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task, {"tag": "x", "continuous": 1})
        self.assertError(r, 400, "validation_failed", "continuous")
        # a task's default retry is checked the same way
        r = self.admin.post("/tasks", {"name": "t", "script": "echo",
                                       "retry": {"max_attempts": 0}})
        self.assertError(r, 400, "validation_failed", "retry.max_attempts")
        # the group actions: unknown group, a body with members
        self.assertError(self.admin.patch("/groups/%s/pause" % dev), 404, "not_found")
        self.assertError(self.admin.patch("/groups/nope/resume"), 404, "not_found")

    # ---- rates ----

    def test_rollout_rate_and_order(self):
        fleet = self.fleet(24)
        idents = [i for i, _ in fleet][::-1]  # the list's order, not the devices'
        sent_at = time.time()
        ans = self.send(idents, rollout={"max_per_minute": 600})
        gid = ans["group"]["ident"]
        self.assertEqual(ans["group"]["name"], gid)  # a group send without a name
        self.assertTrue(all(j["status"] == "pending" and j["response"] == "waiting for rollout"
                            for j in ans["items"]), ans["items"][:2])
        g = self.group(gid)
        self.assertEqual(g["rollout"], {"max_per_minute": 600})
        self.assertEqual(g["status"], "running")
        seen = {}
        start = time.time()
        deadline = start + 30
        while len(seen) < len(idents) and time.time() < deadline:
            now = time.time()
            for j in self.jobs(gid):
                if j["status"] != "pending" and j["ident"] not in seen:
                    seen[j["ident"]] = (now, j["entity_ident"])
            time.sleep(0.05)
        self.assertEqual(len(seen), len(idents))
        times = sorted(t for t, _ in seen.values())
        # 600 a minute is 10 a second: 24 jobs take about 2.3 s, never all at once
        self.assertGreater(times[-1] - times[0], 1.5, times)
        # by any moment, no more than the rate earned since the send (the bucket starts
        # empty; the scheduler releases what was earned at each of its runs, a second apart:
        # docs/architecture.md "Release")
        for i, t in enumerate(times):
            self.assertLessEqual(i + 1, 10 * (t - sent_at) * 1.1 + 3, (sent_at, times))
        # released in the list's order (ties within a poll)
        order = [dev for _, dev in sorted(seen.values())]
        pos = {d: i for i, d in enumerate(idents)}
        for a, b in zip(order, order[1:]):
            self.assertLess(pos[a], pos[b] + 12, order)
        g = self.wait_group(gid, "completed")
        self.assertEqual(g["counts"], {"terminated": 24})
        self.assertIsNone(g["reason"])

    def latency(self):
        """The delivery latency histogram's samples (GET /metrics), by name and labels."""
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                         if line.startswith("rcs_job_delivery_latency"))}

    def test_delivery_latency_from_release(self):
        """A job held by its rollout counts from its release, in fractions of a second
        (docs/coordinator.md "Metrics")."""
        before = self.latency()
        fleet = self.fleet(3)
        # 60 a minute: released about a second apart, each reaching its device at once
        gid = self.send([i for i, _ in fleet], rollout={"max_per_minute": 60})["group"]["ident"]
        self.wait_group(gid, "completed")
        after = self.latency()
        name = "rcs_job_delivery_latency_seconds"
        n = after[name + "_count"] - before[name + "_count"]
        self.assertGreaterEqual(n, 3)
        le1 = name + '_bucket{le="1"}'
        self.assertEqual(after[le1] - before[le1], n, (before, after))
        total = after[name + "_sum"] - before[name + "_sum"]
        self.assertLess(total, n)
        self.assertNotAlmostEqual(total, round(total), places=4)

    def test_exponential(self):
        fleet = self.fleet(8)
        ans = self.send([i for i, _ in fleet],
                        rollout={"exponential": {"base_per_minute": 60, "factor": 4,
                                                 "after_succeeded": 2}})
        gid = ans["group"]["ident"]
        g = self.group(gid)
        self.assertEqual(g["rollout"], {"exponential": {"base_per_minute": 60, "factor": 4,
                                                        "after_succeeded": 2}})
        t0 = time.time()
        self.wait_group(gid, "completed", timeout=30)
        # 60 a minute for the first two, then 240 and 960: far less than 8 s at 60
        self.assertLess(time.time() - t0, 7.5)

    # ---- pause, resume, cancel ----

    def test_pause_resume_cancel(self):
        fleet = self.fleet(6)
        events = Events(self.broker, "rcs/v1/%s/events/groups/+" % self.client_root)
        try:
            ans = self.send([i for i, _ in fleet], rollout={"max_per_minute": 60},
                            group_name="paced")
            gid = ans["group"]["ident"]
            wait_for(lambda: self.group(gid)["counts"].get("terminated", 0) >= 1,
                     what="a first job done")
            r = self.admin.patch("/groups/%s/pause" % gid)
            self.assertStatus(r, 200)
            self.assertEqual(r.json["status"], "paused")
            done = r.json["counts"].get("terminated", 0)
            time.sleep(2.5)
            g = self.group(gid)
            self.assertEqual(g["status"], "paused")
            self.assertLessEqual(g["counts"].get("terminated", 0), done + 1)
            pend = [j for j in self.jobs(gid) if j["status"] == "pending"]
            self.assertTrue(pend)
            # the jobs the rollout held say the group is paused, not "waiting for rollout"
            self.assertEqual({j["response"] for j in pend}, {"group paused"})
            self.assertEqual(self.admin.patch("/groups/%s/pause" % gid).status, 200)
            r = self.admin.patch("/groups/%s/resume" % gid)
            self.assertStatus(r, 200)
            self.assertEqual(r.json["status"], "running")
            self.assertNotIn("group paused", [j["response"] for j in self.jobs(gid)])
            self.assertIn("waiting for rollout", [j["response"] for j in self.jobs(gid)])
            before = self.group(gid)["counts"].get("terminated", 0)
            wait_for(lambda: self.group(gid)["counts"].get("terminated", 0) > before,
                     timeout=10, what="releases after the resume")
            r = self.admin.patch("/groups/%s/cancel" % gid, {})
            self.assertStatus(r, 200)
            self.assertEqual(r.json["status"], "cancelled")
            self.assertIn("cancelled through the API", r.json["reason"])
            self.assertNotIn("pending", r.json["counts"])
            self.assertGreaterEqual(r.json["counts"].get("cancelled", 0), 1)
            # its jobs say who cancelled them
            ended = [j for j in self.jobs(gid) if j["status"] == "cancelled"]
            self.assertTrue(ended)
            self.assertTrue(all(j["response"].startswith("group cancelled by ")
                                for j in ended), ended)
            self.assertError(self.admin.patch("/groups/%s/resume" % gid), 409, "group_ended")
            self.assertError(self.admin.patch("/groups/%s/pause" % gid), 409, "group_ended")
            self.assertError(self.admin.patch("/groups/%s/cancel" % gid), 409, "group_ended")
            self.assertError(self.admin.patch("/groups/%s/cancel" % gid, {"x": 1}), 400,
                             "validation_failed")
            # one event per change of status, on the group's topic
            wait_for(lambda: len([e for t, e in events.all() if t.endswith(gid)]) >= 3,
                     what="group events")
            got = [e["status"] for t, e in events.all() if t.endswith(gid)]
            self.assertEqual(got, ["paused", "running", "cancelled"])
        finally:
            events.stop()
        # a completed group cannot be paused
        fleet = self.fleet(1)
        gid = self.send([fleet[0][0]], group_name="quick")["group"]["ident"]
        self.wait_group(gid, "completed")
        self.assertError(self.admin.patch("/groups/%s/pause" % gid), 409, "group_ended")
        # a viewer may not act on groups
        viewer = self.coord.api(self.coord.create_key(self.client_root, "v", "viewer")
                                ["api_key"])
        self.assertError(viewer.patch("/groups/%s/resume" % gid), 403, "forbidden")

    def test_cancel_tells_devices(self):
        """A group cancel tells each device holding one of its jobs, after the cancel is
        stored: the device's cancel message names the job, which is cancelled for good."""
        fleet = self.fleet(3, hold=True)
        gid = self.send([i for i, _ in fleet], group_name="held")["group"]["ident"]
        wait_for(lambda: all(d.held for _, d in fleet), timeout=20, what="jobs held")
        r = self.admin.patch("/groups/%s/cancel" % gid, {})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["counts"], {"cancelled": 3})
        for _, d in fleet:
            job = d.held[0]
            wait_for(lambda: [c for c in d.cancels if c.get("job") == job], timeout=10,
                     what="the cancel of %s on its device" % job)
            self.assertEqual(self.admin.get("/jobs/" + job).json["status"], "cancelled")

    # ---- abort ----

    def test_abort(self):
        fleet = self.fleet(10, outcomes=[("edge_error", "script_error")])
        ans = self.send([i for i, _ in fleet], rollout={"max_per_minute": 120},
                        abort={"failure_percent": 50, "min_finished": 2})
        gid = ans["group"]["ident"]
        g = self.wait_group(gid, "aborted", timeout=20)
        self.assertIn("failed", g["reason"])
        self.assertEqual(g["abort"], {"failure_percent": 50, "min_finished": 2})

        def settled():
            jobs = self.jobs(gid)
            return jobs if all(j["status"] in ("edge_error", "cancelled") for j in jobs) \
                else None
        jobs = wait_for(settled, timeout=10, what="jobs ended")
        cancelled = [j for j in jobs if j["status"] == "cancelled"]
        failed = [j for j in jobs if j["status"] == "edge_error"]
        self.assertGreaterEqual(len(failed), 2)
        self.assertGreaterEqual(len(cancelled), 5)
        for j in cancelled:
            self.assertTrue(j["response"].startswith("group aborted: "), j)
        for j in failed:
            self.assertEqual(j["error_code"], "script_error")
        # a cancelled job never reached its device
        sent = set()
        for _, d in fleet:
            sent.update(d.jobs_received())
        self.assertFalse(sent & set(j["ident"] for j in cancelled))
        self.assertError(self.admin.patch("/groups/%s/resume" % gid), 409, "group_ended")

    # ---- retries ----

    def test_retry(self):
        (flaky, fd), (broken, bd), (fine, _) = self.fleet(1, outcomes=[
            ("edge_error", "timeout"), ("edge_error", "script_error")]) + self.fleet(
            1, outcomes=[("edge_error", "signature_invalid")]) + self.fleet(1)
        ans = self.send([flaky, broken, fine],
                        retry={"max_attempts": 3, "backoff_s": 1, "backoff_factor": 1.5})
        gid = ans["group"]["ident"]
        g = self.wait_group(gid, "completed", timeout=30)
        self.assertEqual(g["retry"], {"max_attempts": 3, "backoff_s": 1, "backoff_factor": 1.5})
        self.assertEqual(g["counts"], {"terminated": 2, "edge_error": 1})
        self.assertEqual(g["total"], 5)
        # the causes of the latest attempts only: the flaky device's retried errors are not
        self.assertEqual(g["error_codes"], {"signature_invalid": 1})
        jobs = self.jobs(gid)
        mine = sorted((j for j in jobs if j["entity_ident"] == flaky),
                      key=lambda j: j["attempt"])
        self.assertEqual([j["attempt"] for j in mine], [1, 2, 3])
        self.assertEqual([j["status"] for j in mine], ["edge_error", "edge_error", "terminated"])
        self.assertEqual([j["error_code"] for j in mine], ["timeout", "script_error", None])
        self.assertIsNone(mine[0]["retry_of"])
        self.assertEqual(mine[1]["retry_of"], mine[0]["ident"])
        self.assertEqual(mine[2]["retry_of"], mine[1]["ident"])
        # after the backoff: 1 s, then 1.5 s
        self.assertGreaterEqual(mine[1]["created_at"], mine[0]["update_at"])
        # a permanent cause is never retried
        no = [j for j in jobs if j["entity_ident"] == broken]
        self.assertEqual(len(no), 1)
        self.assertEqual(no[0]["error_code"], "signature_invalid")
        self.assertEqual(len(bd.jobs_received()), 1)
        # a task's default retry applies when the send names none
        t = self.make_task(name="retrying", retry={"max_attempts": 2, "backoff_s": 0})
        self.assertEqual(t["retry"], {"max_attempts": 2, "backoff_s": 0})
        (dev, _), = self.fleet(1, outcomes=[("edge_error", "interrupted")])
        r = self.admin.post("/tasks/%s/jobs/list" % t["ident"], {"ident_list": [dev]})
        self.assertStatus(r, 201)
        gid = r.json["group"]["ident"]
        g = self.wait_group(gid, "completed")
        self.assertEqual(g["retry"], {"max_attempts": 2, "backoff_s": 0, "backoff_factor": 2})
        self.assertEqual(g["counts"], {"terminated": 1})
        self.assertEqual(g["statuses"], {"terminated": 1, "edge_error": 1})

    def test_update_failures_never_retried_and_abort(self):
        # what an update script ends with (docs/lua-api.md rcs.fail, rcs.rollback) repeats
        # identically: never retried; and it counts as a failure for abort
        codes = ["install_failed", "health_check_failed", "incompatible", "rolled_back"]
        fleet = []
        for c in codes:
            fleet += self.fleet(1, outcomes=[("edge_error", c)])
        ans = self.send([i for i, _ in fleet], retry={"max_attempts": 3, "backoff_s": 0})
        g = self.wait_group(ans["group"]["ident"], "completed", timeout=30)
        self.assertEqual(g["counts"], {"edge_error": 4})
        self.assertEqual(g["total"], 4)
        self.assertEqual(g["error_codes"], {c: 1 for c in codes})
        jobs = self.jobs(ans["group"]["ident"])
        self.assertEqual(sorted(j["error_code"] for j in jobs), sorted(codes))
        self.assertEqual({j["attempt"] for j in jobs}, {1})
        for _, d in fleet:
            self.assertEqual(len(d.jobs_received()), 1)
        fleet = self.fleet(8, outcomes=[("edge_error", "rolled_back")])
        ans = self.send([i for i, _ in fleet], rollout={"max_per_minute": 120},
                        abort={"failure_percent": 50, "min_finished": 2},
                        retry={"max_attempts": 3, "backoff_s": 0})
        gid = ans["group"]["ident"]
        g = self.wait_group(gid, "aborted", timeout=20)
        self.assertIn("failed", g["reason"])

        def settled():
            jobs = self.jobs(gid)
            return jobs if all(j["status"] in ("edge_error", "cancelled") for j in jobs) \
                else None
        jobs = wait_for(settled, timeout=10, what="jobs ended")
        failed = [j for j in jobs if j["status"] == "edge_error"]
        self.assertGreaterEqual(len(failed), 2)
        self.assertEqual({j["error_code"] for j in failed}, {"rolled_back"})
        self.assertEqual({j["attempt"] for j in jobs}, {1})

    # ---- windows ----

    def test_window(self):
        every = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        now = time.gmtime()
        minute = now.tm_hour * 60 + now.tm_min

        def hhmm(m):
            m %= 1440
            return "%02d:%02d" % (m // 60, m % 60)
        fleet = self.fleet(2)
        # open: from five minutes ago for half an hour (local time UTC+2)
        ans = self.send([fleet[0][0]], window={"days": every, "start": hhmm(minute + 120 - 5),
                                               "duration_min": 30, "utc_offset_min": 120})
        gid = ans["group"]["ident"]
        g = self.wait_group(gid, "completed")
        self.assertEqual(g["window"]["utc_offset_min"], 120)
        # closed: it opens in two hours
        ans = self.send([fleet[1][0]], window={"days": every, "start": hhmm(minute + 120),
                                               "duration_min": 10})
        gid = ans["group"]["ident"]
        time.sleep(2.5)
        g = self.group(gid)
        self.assertEqual(g["status"], "running")
        self.assertEqual(g["counts"], {"pending": 1})
        job = self.jobs(gid)[0]
        self.assertEqual(job["response"], "waiting for rollout")
        self.assertEqual(fleet[1][1].jobs_received(), [])
        r = self.admin.patch("/groups/%s/cancel" % gid)
        self.assertEqual(r.json["counts"], {"cancelled": 1})

    # ---- continuous ----

    def test_continuous(self):
        (first, d1), = self.fleet(1, tags=["cont"])
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task,
                            {"tag": "cont", "continuous": True})
        self.assertStatus(r, 201)
        gid = r.json["group"]["ident"]
        self.assertEqual(len(r.json["items"]), 1)
        wait_for(lambda: self.group(gid)["counts"] == {"terminated": 1}, what="first job")
        g = self.group(gid)
        self.assertEqual(g["status"], "running")  # stays open
        self.assertTrue(g["continuous"])
        self.assertEqual(g["tag"], "cont")
        # an operator tag later: one job
        (second, d2), = self.fleet(1)
        self.assertStatus(self.admin.patch("/devices/" + second, {"tags": ["cont"]}), 200)
        wait_for(lambda: self.group(gid)["counts"] == {"terminated": 2}, what="second job")
        # tagged again: no second job
        self.admin.patch("/devices/" + second, {"tags": []})
        self.admin.patch("/devices/" + second, {"tags": ["cont", "x"]})
        time.sleep(1)
        self.assertEqual(len([j for j in self.jobs(gid) if j["entity_ident"] == second]), 1)
        self.assertEqual(len(d2.jobs_received()), 1)
        # a reported tag (the device's own state)
        third = self.make_device(name="reports")["entity_ident"]
        d3 = ScriptedDevice(self.broker, self.client_root, third, tags=["cont"]).start()
        self.fakes.append(d3)
        wait_for(lambda: self.group(gid)["counts"] == {"terminated": 3}, what="third job")
        self.assertEqual(len(d3.jobs_received()), 1)
        # paused: a device that gains the tag gets its job held, saying why; the resume
        # sends it
        self.assertStatus(self.admin.patch("/groups/%s/pause" % gid), 200)
        (late, d5), = self.fleet(1)
        self.admin.patch("/devices/" + late, {"tags": ["cont"]})
        job = wait_for(lambda: [j for j in self.jobs(gid) if j["entity_ident"] == late],
                       what="the paused group's job")[0]
        self.assertEqual((job["status"], job["response"]), ("pending", "group paused"))
        self.assertEqual(d5.jobs_received(), [])
        self.assertStatus(self.admin.patch("/groups/%s/resume" % gid), 200)
        wait_for(lambda: self.group(gid)["counts"] == {"terminated": 4}, what="fourth job")
        # cancelled: closed for good
        self.assertEqual(self.admin.patch("/groups/%s/cancel" % gid).json["status"],
                         "cancelled")
        (fourth, d4), = self.fleet(1, tags=["cont"])
        time.sleep(1)
        self.assertEqual(d4.jobs_received(), [])


class RestartTest(StackTest):
    """A rollout and a retry across kill -9 of the coordinator."""

    workdir_prefix = "rcs-rollout-restart-"
    check_coordinator = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.start_broker()
        cls.start_coordinator(["--mqtt", cls.broker.url])

    def device(self, **kw):
        r = self.admin.post("/devices", {"name": "d", "tags": []})
        d = ScriptedDevice(self.broker, self.client_root, r.json["entity_ident"], **kw).start()
        self.fakes.append(d)
        wait_for(lambda: self.admin.get("/devices/" + d.entity).json["online"], what="online")
        return d

    def test_kill_mid_rollout_and_retry_due_while_down(self):
        task = self.admin.post("/tasks", {"name": "t", "script": "echo"}).json["ident"]
        fleet = [self.device() for _ in range(8)]
        flaky = self.device(outcomes=[("edge_error", "timeout")])
        r = self.admin.post("/tasks/%s/jobs/list" % task,
                            {"ident_list": [d.entity for d in fleet],
                             "rollout": {"max_per_minute": 60}})
        gid = r.json["group"]["ident"]
        r = self.admin.post("/tasks/%s/jobs/list" % task,
                            {"ident_list": [flaky.entity],
                             "retry": {"max_attempts": 2, "backoff_s": 3}})
        rid = r.json["group"]["ident"]

        def done(g):
            return self.admin.get("/groups/" + g).json["counts"].get("terminated", 0)
        wait_for(lambda: done(gid) >= 3, what="three released")
        wait_for(lambda: self.admin.get("/groups/" + rid).json["total"] == 2,
                 what="the retry made")
        self.coord.stop(signal.SIGKILL)
        killed = time.time()
        released = sum(1 for d in fleet if d.jobs_received())
        time.sleep(4)  # the retry falls due meanwhile
        self.coord.start()
        restarted = time.time()
        wait_for(lambda: self.admin.get("/groups/" + gid).json["status"] == "completed",
                 timeout=30, what="rollout completed")
        wait_for(lambda: self.admin.get("/groups/" + rid).json["status"] == "completed",
                 timeout=15, what="retry completed")
        # each device got exactly one job, once (no job released twice)
        for d in fleet:
            self.assertEqual(len(set(d.jobs_received())), 1, d.jobs_received())
        # the pace held after the restart: the rest at about one a second
        self.assertGreaterEqual(time.time() - restarted, (8 - released) - 3)
        g = self.admin.get("/groups/" + gid).json
        self.assertEqual(g["counts"], {"terminated": 8})
        # the retry went out once, after the restart
        self.assertEqual(len(set(flaky.jobs_received())), 2)
        jobs = list_all(self.admin, "/jobs", group_ident=rid)
        second = [j for j in jobs if j["attempt"] == 2][0]
        self.assertEqual(second["status"], "terminated")
        self.assertGreaterEqual(second["update_at"], int(killed))


class AgentCauseTest(StackTest):
    """Real agents: the `error` of their edge_error reports becomes the job's error_code;
    a transient cause is retried, a permanent one is not."""

    workdir_prefix = "rcs-rollout-agents-"
    check_coordinator = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.start_broker()
        cls.start_coordinator(["--mqtt", cls.broker.url])

    def agent(self, name, **kw):
        ident = self.admin.post("/devices", {"name": name, "tags": []}).json["entity_ident"]
        a = Agent(self.workdir, self.broker.url, self.client_root, ident, name=name, **kw)
        a.start()
        self.agents.append(a)
        wait_for(lambda: self.admin.get("/devices/" + ident).json["online"], what="online")
        return ident

    def test_causes(self):
        lax = self.agent("lax", extra_args=["--require-signature=false"])
        from rcs_harness import make_ec_keypair
        _, pub = make_ec_keypair(self.workdir, "trusted")
        # unsigned tasks are refused: signature_invalid
        strict = self.agent("strict", trusted_keys=[pub])
        r = self.admin.put("/scripts/boom", {"source": "error('boom')"})
        self.assertIn(r.status, (200, 201), r)
        task = self.admin.post("/tasks", {"name": "boom", "script": "boom"}).json["ident"]
        r = self.admin.post("/tasks/%s/jobs/list" % task,
                            {"ident_list": [lax, strict],
                             "retry": {"max_attempts": 2, "backoff_s": 0}})
        self.assertEqual(r.status, 201, r)
        gid = r.json["group"]["ident"]
        wait_for(lambda: self.admin.get("/groups/" + gid).json["status"] == "completed",
                 timeout=30, what="group completed")
        jobs = list_all(self.admin, "/jobs", group_ident=gid)
        mine = sorted((j for j in jobs if j["entity_ident"] == lax), key=lambda j: j["attempt"])
        self.assertEqual([j["attempt"] for j in mine], [1, 2])
        self.assertEqual([j["error_code"] for j in mine], ["script_error", "script_error"])
        self.assertIn("boom", mine[0]["response"])
        other = [j for j in jobs if j["entity_ident"] == strict]
        self.assertEqual(len(other), 1)
        self.assertEqual(other[0]["error_code"], "signature_invalid")
        g = self.admin.get("/groups/" + gid).json
        self.assertEqual(g["counts"], {"edge_error": 2})


if __name__ == "__main__":
    unittest.main()
