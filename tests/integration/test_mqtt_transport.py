#!/usr/bin/env python3
"""Integration tests of the coordinator's MQTT transport (docs/mqtt.md,
docs/architecture.md, docs/api.md): a real mosquitto on a free loopback port with a generated config,
the real rcs-coordinator (serve --mqtt), and scripted devices speaking protocol v1
(FakeDevice from the harness, and FakeFleet below: many devices on one connection).

Checked: publish on creation (the POST answer already shows transmited), the envelope,
full status history in order, duplicates and stale seq ignored, device presence (retained
state, Last Will, reported tags), offline handling, scheduling, ttl expiry, cancel before
and after sending, late reports, at-least-once re-sends (device back online, coordinator
restart, reports without news), coordinator restart (SIGTERM and kill -9), broker restart,
the events topic, bulk sends of 500 devices, and a battery of bad messages published with
mosquitto_pub.

Run (Debian's python3: it has paho-mqtt 1.6.1):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_mqtt_transport.py
RCS_KEEP_TMP=1 keeps each class's directory (broker and coordinator logs, database).
"""

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import unittest
import urllib.request
import uuid

import paho.mqtt.client as mqtt

from mqtt_proxy import MqttProxy
from rcs_harness import (SCRIPTS_DIR, FakeDevice, Mosquitto, Watcher,
                         free_port, list_all, on_postgres, wait_for, with_query)
from rcs_fixture import CoordinatorTest, note

JOB_FIELDS = ("ident", "task", "group", "client_root", "entity_ident", "target", "comment",
              "status", "created_user", "created_at", "update_at", "scheduled_time",
              "response_time", "ttl", "payload", "response", "notification_mail_list",
              "notification_status_list")
ENVELOPE_FIELDS = {"v", "job", "client_root", "entity_ident", "task", "script", "constants",
                   "variables_info", "variables", "signature", "issued_at", "expires_at",
                   "timeout"}
TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
RANK = {"initial": 0, "pending": 1, "transmited": 2, "edge_transmitted": 3, "edge_started": 4,
        "edge_running": 5, "terminated": 6, "edge_error": 6, "cancelled": 6, "expired": 6}
# what a FakeDevice (auto=True) leaves in a job's history, oldest first
FULL_RUN = ["initial", "pending", "transmited", "edge_transmitted", "edge_started",
            "edge_running", "terminated"]


def mosquitto_pub(broker, topic, payload):
    """Publishes one message with mosquitto_pub (QoS 1, not retained); payload bytes or
    str; an empty payload is sent as a zero-length message."""
    if isinstance(payload, str):
        payload = payload.encode()
    if payload:
        broker.pub(topic, payload)
    else:
        subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(broker.port), "-q", "1",
                        "-t", topic, "-n"], check=True, timeout=10)


class RecordingDevice(FakeDevice):
    """A FakeDevice that also records every message it receives (time, topic, QoS,
    retain) and counts its connects."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.received = []  # (wall time, topic, qos, retain, payload bytes)
        self.connects = 0

    def _on_connect(self, client, userdata, flags, rc):
        self.connects += 1
        super()._on_connect(client, userdata, flags, rc)

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.received.append((time.time(), msg.topic, msg.qos, msg.retain, msg.payload))
        super()._on_message(client, userdata, msg)

    def envelopes_of(self, job):
        with self.lock:
            return [e for e in self.envelopes if e["job"] == job]

    def cancels_of(self, job):
        with self.lock:
            return [c for c in self.cancels if c.get("job") == job]

    def messages_on(self, suffix):
        with self.lock:
            return [m for m in self.received if m[1].endswith(suffix)]

    def crash(self):
        """Drops the connection without DISCONNECT, so the Last Will fires."""
        self.client.loop_stop()
        self.client.socket().close()
        self.connected = False

    def stop_quietly(self, clean=True):
        try:
            self.stop(clean=clean)
        except Exception:  # broker gone, already stopped...
            try:
                self.client.loop_stop()
            except Exception:
                pass


class FakeFleet:
    """Many scripted devices on one MQTT connection (FakeDevices are heavy).

    Publishes the retained state of each of its devices, subscribes to the envelopes of
    the tenant and answers those addressed to its devices like FakeDevice(auto=True):
    edge_transmitted, edge_started, edge_running, terminated ("ok:<job>"); a repeat of a
    finished job gets the final report again. An envelope for a device the fleet holds
    offline is recorded in sent_while_offline and answered when it comes online.
    """

    def __init__(self, broker, client_root, entities, tags=()):
        self.broker = broker
        self.client_root = client_root
        self.entities = set(entities)
        self.tags = list(tags)
        self.online = set()
        self.jobs = {}  # job -> entity
        self.final = {}
        self.held = {}  # entity -> [envelope] received while offline
        self.sent_while_offline = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(client_id="fleet-" + uuid.uuid4().hex[:12],
                                  clean_session=True)
        self.client.max_inflight_messages_set(1000)
        self.client.on_connect = lambda c, u, f, rc: c.subscribe(
            "rcs/v1/%s/+/jobs/+" % client_root, 1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message

    def start(self, online=True):
        self.client.connect("127.0.0.1", self.broker.port, keepalive=10)
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise AssertionError("fleet did not subscribe")
        if online:
            self.set_online(self.entities, True)
        return self

    def set_online(self, entities, online):
        entities = list(entities)
        infos = []
        for e in entities:
            infos.append(self.client.publish(
                "rcs/v1/%s/%s/state" % (self.client_root, e),
                json.dumps({"v": 1, "online": online, "tags": self.tags,
                            "agent_version": "fleet", "ts": int(time.time())}),
                qos=1, retain=True))
        for i in infos:
            i.wait_for_publish(10)
        held = []
        with self.lock:
            for e in entities:
                if online:
                    self.online.add(e)
                    held += self.held.pop(e, [])
                else:
                    self.online.discard(e)
        for env in held:
            self._answer(env)

    def stop(self):
        try:
            self.set_online(self.entities, False)
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    def _on_message(self, client, userdata, msg):
        parts = msg.topic.split("/")
        if len(parts) != 6 or parts[3] not in self.entities:
            return
        env = json.loads(msg.payload)
        with self.lock:
            if parts[3] not in self.online:
                self.sent_while_offline.append(env["job"])
                self.held.setdefault(parts[3], []).append(env)
                return
        self._answer(env)

    def _answer(self, env):
        job, ent = env["job"], env["entity_ident"]
        with self.lock:
            repeat = job in self.jobs
            self.jobs[job] = ent
            final = self.final.get(job)
        topic = "rcs/v1/%s/%s/jobs/%s/status" % (self.client_root, ent, job)
        if repeat:
            if final:
                self.client.publish(topic, final, qos=1)
            return
        for seq, st in enumerate(("edge_transmitted", "edge_started", "edge_running",
                                  "terminated"), 1):
            payload = json.dumps({"v": 1, "job": job, "status": st, "seq": seq,
                                  "ts": int(time.time()),
                                  "response": "ok:" + job if st == "terminated" else None})
            self.client.publish(topic, payload, qos=1)
        with self.lock:
            self.final[job] = payload


class MqttTest(CoordinatorTest):
    """One mosquitto and one coordinator (serve --mqtt) per class, a tenant with an admin
    key, helpers for devices and jobs. coord_args: more serve flags."""

    workdir_prefix = "rcs-mqtt-"
    coord_args = ()
    broker_persistence = True

    @classmethod
    def setUpClass(cls):
        super(CoordinatorTest, cls).setUpClass()  # the broker first
        cls.start_broker(persistence=cls.broker_persistence)
        cls.extra_args = ("--mqtt", cls.coordinator_broker()) + tuple(cls.coord_args)
        cls.start_coordinator(cls.extra_args)
        cls.wait_connected(cls.coord)

    @classmethod
    def coordinator_broker(cls):
        """The broker URL the coordinator is given."""
        return cls.broker.url

    @classmethod
    def wait_connected(cls, coord):
        wait_for(lambda: "status reports: " in cls.coord_log(coord), timeout=20,
                 what="the coordinator connected to the broker")

    @classmethod
    def class_task(cls, **fields):
        body = {"name": "task", "script": "echo"}
        body.update(fields)
        r = cls.admin.post("/tasks", body)
        assert r.status == 201, r
        return r.json

    @classmethod
    def start_fake(cls, entity, auto=True, tags=(), wait_online=True):
        d = RecordingDevice(cls.broker, cls.client_root, entity, auto=auto, tags=tags).start()
        cls.fakes.append(d)
        if wait_online:
            cls.wait_online(entity, True)
        return d

    @classmethod
    def wait_online(cls, entity, online=True, timeout=15):
        return wait_for(lambda: cls.admin.get("/devices/" + entity).json.get("online") is online,
                        timeout=timeout, what="device %s online=%s" % (entity, online))

    @classmethod
    def online_device(cls, name="dev", auto=True, tags=(), reported=()):
        """An inventory device with a started fake device; returns (record, fake)."""
        rec = cls.class_device(name, tags)
        return rec, cls.start_fake(rec["entity_ident"], auto=auto, tags=reported)

    # -- jobs ---------------------------------------------------------------------------

    def post_job(self, task, entity, status=201, **fields):
        body = {"entity_ident": entity}
        body.update(fields)
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], body)
        self.assertStatus(r, status)
        return r.json

    def wait_job(self, ident, statuses, timeout=15):
        if isinstance(statuses, str):
            statuses = (statuses,)
        last = {}

        def check():
            last["job"] = self.job(ident)
            return last["job"] if last["job"]["status"] in statuses else None
        try:
            return wait_for(check, timeout=timeout, what="job %s in %s" % (ident, statuses))
        except AssertionError:
            raise AssertionError("job %s: expected %s, still %r after %ss; history %r" % (
                ident, statuses, last.get("job", {}).get("status"), timeout,
                self.history(ident)))

    def history_items(self, ident):
        """History snapshots, oldest first."""
        r = self.admin.get("/jobs/%s/history" % ident)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["total_items"], len(r.json["items"]), r.raw[:300])
        return list(reversed(r.json["items"]))

    def history(self, ident):
        return [h["status"] for h in self.history_items(ident)]

    def assertCleanHistory(self, ident, expected=None):
        """The job's history moves forward only, without duplicates (edge_running may
        repeat), and ends in a terminal status; or equals expected (oldest first)."""
        h = self.history(ident)
        if expected is not None:
            self.assertEqual(h, expected, "history of job %s" % ident)
            return h
        self.assertEqual(h[:2], ["initial", "pending"], "history of job %s: %r" % (ident, h))
        for a, b in zip(h, h[1:]):
            ok = RANK[b] > RANK[a] or (a == b == "edge_running")
            self.assertTrue(ok, "history of job %s goes %s -> %s: %r" % (ident, a, b, h))
        self.assertIn(h[-1], TERMINAL, "history of job %s: %r" % (ident, h))
        return h

    def assertAnsweredTransmited(self, job):
        """docs/mqtt.md: a job for an online device is published within the creating request
        and the answer is the committed snapshot: transmited, even when the device is
        fast. Checked as a subtest, so the rest of the test goes on."""
        with self.subTest("the POST answer shows transmited"):
            self.assertEqual(job["status"], "transmited",
                             "POST answer of job %s: %s (history %r)" % (
                                 job["ident"], job["status"], self.history(job["ident"])))

    def assertAlive(self):
        self.assertTrue(self.coord.alive(), "coordinator died:\n" + self.coord.read_log()[-3000:])


# =========================================================================================


class TransportTest(MqttTest):
    """Jobs flowing between the REST API and scripted devices."""

    metrics_port = free_port()
    coord_args = ("--resend-after", "5", "--metrics-listen", "127.0.0.1:%d" % metrics_port)

    @classmethod
    def status_changes(cls, status):
        """rcs_job_status_changes_total of one status, from GET /metrics (docs/integrations.md)."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % cls.metrics_port,
                                    timeout=10) as r:
            text = r.read().decode()
        want = 'rcs_job_status_changes_total{status="%s"} ' % status
        return int(next(ln for ln in text.splitlines() if ln.startswith(want)).split()[-1])

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.task = cls.class_task(
            name="echo", timeout=30, constants={"c": 1},
            variables_info={"message": {"type": "string", "optional": True}})
        cls.task_offline = cls.class_task(name="echo-offline", allow_offline=True)
        cls.events = Watcher(cls.broker, "rcs/v1/+/events/#").start()
        cls.addClassCleanup(cls.events.stop)
        # A job a device received and acknowledged, then went quiet on: re-sent after
        # --resend-after without news (checked by test_zz_stale_job_resent, last).
        cls.stale_dev, cls.stale_fake = cls.online_device("stale", auto=False)
        r = cls.admin.post("/tasks/%s/jobs" % cls.task["ident"],
                           {"entity_ident": cls.stale_dev["entity_ident"]})
        assert r.status == 201, r
        cls.stale_job = r.json["ident"]
        wait_for(lambda: cls.stale_fake.envelopes_of(cls.stale_job), what="stale envelope")
        # the coordinator applies the report after this instant and keeps it in whole
        # seconds: the re-send comes no sooner than --resend-after - 1 s from here
        cls.stale_news = time.time()
        cls.stale_fake.report(cls.stale_job, "edge_transmitted")
        wait_for(lambda: cls.admin.get("/jobs/" + cls.stale_job).json["status"]
                 == "edge_transmitted", what="stale job acknowledged")

    # -- publish on creation, envelope, history ------------------------------------------

    def test_publish_on_creation(self):
        dev, fake = self.online_device("fast", auto=True)
        ent = dev["entity_ident"]
        before = int(time.time())
        job = self.post_job(self.task, ent, variables={"message": "hi"}, comment="c1")
        # published within the creating request: the answer already shows transmited
        self.assertAnsweredTransmited(job)
        if job["status"] == "transmited":
            self.assertIn("MQTT", job["response"] or "", job)
            self.assertIsNone(job["response_time"], job)
        ident = job["ident"]
        wait_for(lambda: fake.envelopes_of(ident), what="envelope received")
        env = fake.envelopes_of(ident)[0]
        self.assertEqual(set(env), ENVELOPE_FIELDS, env)
        self.assertEqual(env["v"], 1)
        self.assertEqual(env["job"], ident)
        self.assertEqual(env["client_root"], self.client_root)
        self.assertEqual(env["entity_ident"], ent)
        self.assertEqual(env["task"], {"ident": self.task["ident"], "version": 1,
                                       "name": "echo"})
        with open(os.path.join(SCRIPTS_DIR, "echo.lua"), "rb") as f:
            src = f.read()
        self.assertEqual(env["script"]["name"], "echo")
        self.assertEqual(env["script"]["source"].encode(), src)
        self.assertEqual(env["script"]["sha256"], hashlib.sha256(src).hexdigest())
        self.assertEqual(env["constants"], {"c": 1})
        self.assertEqual(env["variables_info"], self.task["variables_info"])
        self.assertEqual(env["variables"], {"message": "hi"})
        self.assertIsNone(env["signature"])
        self.assertIsNone(env["expires_at"])
        self.assertEqual(env["timeout"], 30)
        self.assertIsInstance(env["issued_at"], int)
        self.assertTrue(before - 1 <= env["issued_at"] <= time.time() + 1, env["issued_at"])
        msgs = fake.messages_on("/jobs/" + ident)
        self.assertTrue(msgs)
        self.assertEqual({(m[2], m[3]) for m in msgs}, {(1, False)},
                         "envelope: QoS 1, not retained")
        done = self.wait_job(ident, "terminated")
        self.assertEqual(done["response"], "ok:" + ident)
        self.assertIsInstance(done["response_time"], int)
        self.assertGreaterEqual(done["response_time"], done["created_at"])
        self.assertEqual(done["comment"], "c1")
        self.assertEqual(done["variables"], {"message": "hi"})

        # a fast device never shows in the POST answer: every one says transmited
        for _ in range(15):
            self.assertAnsweredTransmited(self.post_job(self.task, ent))

    def test_a_failing_report_costs_only_itself(self):
        """docs/architecture.md, "One job, from POST to the final report", step 6: the
        reports of a batch take no savepoint each; one that fails after writing rolls the
        batch back, and the batch is applied again message by message: the others are
        applied once, with one event each, and nothing of the failing one stays."""
        if on_postgres():
            self.skipTest("a batch of reports is one transaction on SQLite only")
        import sqlite3
        dev, fake = self.online_device("poisoned", auto=False)
        jobs = [self.post_job(self.task, dev["entity_ident"])["ident"] for _ in range(12)]
        for j in jobs:
            self.wait_job(j, "transmited")
        bad = jobs[6]
        db = sqlite3.connect(self.coord.db, timeout=30, isolation_level=None)
        self.addCleanup(db.close)
        # the job row's UPDATE goes through, its history row does not: the move fails after
        # writing
        db.execute("CREATE TRIGGER test_poison BEFORE INSERT ON job_history"
                   " WHEN NEW.job_ident = '%s' AND NEW.status = 'edge_transmitted'"
                   " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END" % bad)
        self.addCleanup(db.execute, "DROP TRIGGER IF EXISTS test_poison")
        topic = lambda j: "rcs/v1/%s/events/jobs/%s" % (self.client_root, j)  # noqa: E731
        counted = self.status_changes("edge_transmitted")
        # the reports queue up while this connection holds the write lock, so that the
        # worker takes most of them in one batch
        db.execute("BEGIN IMMEDIATE")
        try:
            for j in jobs:
                fake.report(j, "edge_transmitted", seq=1)
            time.sleep(1.0)
        finally:
            db.execute("ROLLBACK")
        for j in jobs:
            if j != bad:
                self.wait_job(j, "edge_transmitted")
        wait_for(lambda: "applied again message by message" in self.coord_log(),
                 what="the batch applied again")
        wait_for(lambda: "refused by the test" in self.coord_log()
                 or "report not applied" in self.coord_log(),
                 what="the failing report logged")
        time.sleep(0.5)
        for j in jobs:
            if j == bad:
                continue
            self.assertEqual(self.history(j), ["initial", "pending", "transmited",
                                               "edge_transmitted"], j)
            evs = [json.loads(m[1])["status"] for m in self.events.on(topic(j))]
            self.assertEqual(evs.count("edge_transmitted"), 1, "events of %s: %r" % (j, evs))
        self.assertEqual(self.job(bad)["status"], "transmited")
        self.assertEqual(self.history(bad), ["initial", "pending", "transmited"])
        self.assertNotIn("edge_transmitted",
                         [json.loads(m[1])["status"] for m in self.events.on(topic(bad))])
        # the metrics count what was committed: the batch's first attempt counts nothing
        self.assertEqual(self.status_changes("edge_transmitted") - counted, len(jobs) - 1)
        # without the fault the job goes on
        db.execute("DROP TRIGGER test_poison")
        fake.report(bad, "edge_transmitted", seq=2)
        self.wait_job(bad, "edge_transmitted")
        self.assertAlive()

    def test_a_failing_send_costs_only_itself(self):
        """docs/architecture.md, "One job, from POST to the final report", step 3: the
        moves of a chunk of envelopes take no savepoint each; one that fails after writing
        rolls the chunk back, and the chunk is prepared again job by job: the others are
        sent once, with one transmited each, and the failing one stays pending, unsent."""
        if on_postgres():
            self.skipTest("the trigger that makes a move fail is SQLite's")
        import sqlite3
        devs = [self.online_device("chunk%d" % i, auto=False) for i in range(6)]
        bad_dev = devs[3][0]["entity_ident"]
        db = sqlite3.connect(self.coord.db, timeout=30, isolation_level=None)
        self.addCleanup(db.close)
        # the job row's UPDATE goes through, its history row does not
        db.execute("CREATE TRIGGER test_poison_send BEFORE INSERT ON job_history"
                   " WHEN NEW.status = 'transmited' AND NEW.job_ident IN"
                   " (SELECT ident FROM jobs WHERE entity_ident = '%s')"
                   " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END" % bad_dev)
        self.addCleanup(db.execute, "DROP TRIGGER IF EXISTS test_poison_send")
        counted = self.status_changes("transmited")
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                            {"ident_list": [d[0]["entity_ident"] for d in devs]})
        self.assertStatus(r, 201)
        by_dev = {j["entity_ident"]: j["ident"] for j in r.json["items"]}
        self.assertEqual(len(by_dev), len(devs))
        bad = by_dev[bad_dev]
        for rec, fake in devs:
            if rec["entity_ident"] != bad_dev:
                j = by_dev[rec["entity_ident"]]
                self.wait_job(j, "transmited")
                wait_for(lambda: fake.envelopes_of(j), what="envelope of %s received" % j)
        wait_for(lambda: "prepared again job by job" in self.coord_log(),
                 what="the chunk prepared again")
        wait_for(lambda: "job %s: not sent" % bad in self.coord_log(),
                 what="the failing send logged")
        time.sleep(0.5)
        topic = lambda j: "rcs/v1/%s/events/jobs/%s" % (self.client_root, j)  # noqa: E731
        for rec, fake in devs:
            j = by_dev[rec["entity_ident"]]
            if j == bad:
                self.assertEqual(self.job(bad)["status"], "pending")
                self.assertEqual(self.history(bad), ["initial", "pending"])
                self.assertEqual(fake.envelopes_of(bad), [])
                continue
            self.assertEqual(self.history(j), ["initial", "pending", "transmited"], j)
            self.assertEqual(len(fake.envelopes_of(j)), 1, "envelopes of %s" % j)
            evs = [json.loads(m[1])["status"] for m in self.events.on(topic(j))]
            self.assertEqual(evs.count("transmited"), 1, "events of %s: %r" % (j, evs))
        # the chunk's first attempt counts nothing
        self.assertEqual(self.status_changes("transmited") - counted, len(devs) - 1)
        self.assertAlive()

    def test_history_in_order(self):
        dev, fake = self.online_device("hist", auto=True)
        ident = self.post_job(self.task, dev["entity_ident"])["ident"]
        done = self.wait_job(ident, "terminated")
        items = self.history_items(ident)
        self.assertEqual([h["status"] for h in items], FULL_RUN)
        r = self.admin.get("/jobs/%s/history" % ident)
        self.assertEqual(r.json["per_page"], 500)
        self.assertEqual(r.json["items"][0]["status"], "terminated", "newest first")
        for h in items:
            for k in JOB_FIELDS:
                self.assertIn(k, h)
            self.assertEqual(h["ident"], ident)
        at = [h["update_at"] for h in items]
        self.assertEqual(at, sorted(at), "update_at of the snapshots")
        self.assertIn("MQTT", items[2]["response"] or "")
        self.assertEqual(items[-1]["response"], "ok:" + ident)
        self.assertEqual(items[-1]["response_time"], done["response_time"])

    def test_duplicates_and_stale_seq_ignored(self):
        dev, fake = self.online_device("dups", auto=False)
        ident = self.post_job(self.task, dev["entity_ident"])["ident"]
        wait_for(lambda: fake.envelopes_of(ident), what="envelope")
        for st, seq, resp in (("edge_transmitted", 1, None),
                              ("edge_transmitted", 1, None),      # same seq again
                              ("edge_transmitted", 2, None),      # not after the current
                              ("edge_started", 3, None),
                              ("edge_running", 4, "10%"),
                              ("edge_running", 5, "50%"),         # progress: applied
                              ("edge_running", 5, "50%"),         # same seq again
                              ("edge_transmitted", 6, None),      # backwards
                              ("edge_started", 2, None),          # stale seq
                              ("terminated", 4, "stale"),         # stale seq, forward
                              ("terminated", 7, "done"),
                              ("edge_error", 8, "after the end"),  # terminal is final
                              ("terminated", 9, "again")):
            fake.report(ident, st, resp, seq=seq)
        # a sentinel job on the same connection: everything above has been handled
        sentinel = self.post_job(self.task, dev["entity_ident"])["ident"]
        wait_for(lambda: fake.envelopes_of(sentinel), what="sentinel envelope")
        for i, st in enumerate(("edge_transmitted", "edge_started", "edge_running",
                                "terminated"), 1):
            fake.report(sentinel, st, "s" if st == "terminated" else None, seq=i)
        self.wait_job(sentinel, "terminated")
        job = self.wait_job(ident, "terminated")
        self.assertEqual(job["response"], "done")
        items = self.history_items(ident)
        self.assertEqual([h["status"] for h in items],
                         ["initial", "pending", "transmited", "edge_transmitted",
                          "edge_started", "edge_running", "edge_running", "terminated"])
        self.assertEqual([h["response"] for h in items[5:]], ["10%", "50%", "done"])
        # no events for what was ignored
        topic = "rcs/v1/%s/events/jobs/%s" % (self.client_root, ident)
        wait_for(lambda: any(json.loads(m[1])["status"] == "terminated"
                             for m in self.events.on(topic)), what="terminated event")
        self.assertEqual([json.loads(m[1])["status"] for m in self.events.on(topic)
                          if json.loads(m[1])["status"] not in ("initial", "pending")],
                         ["transmited", "edge_transmitted", "edge_started", "edge_running",
                          "edge_running", "terminated"])

    # -- presence -----------------------------------------------------------------------

    def test_presence_from_state_and_last_will(self):
        t0 = int(time.time())
        dev = self.class_device("presence", tags=["op-tag"])
        ent = dev["entity_ident"]
        self.assertIs(dev["online"], False)
        self.assertIsNone(dev["last_seen"])
        fake = self.start_fake(ent, tags=["rep-tag"])
        rec = self.admin.get("/devices/" + ent).json
        self.assertIs(rec["online"], True)
        self.assertIsInstance(rec["last_seen"], int)
        self.assertTrue(t0 - 1 <= rec["last_seen"] <= time.time() + 1, rec)
        self.assertEqual(rec["agent_version"], "fake")
        self.assertEqual(rec["reported_tags"], ["rep-tag"])
        self.assertEqual(rec["tags"], ["op-tag"], "operator tags kept apart")
        online = [d["entity_ident"] for d in list_all(self.admin, "/devices", online="true")]
        self.assertIn(ent, online)

        # a tag send matches operator tags and reported tags
        for tag in ("op-tag", "rep-tag"):
            r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": tag})
            self.assertStatus(r, 201)
            self.assertEqual([j["entity_ident"] for j in r.json["items"]], [ent], tag)
            self.wait_job(r.json["items"][0]["ident"], "terminated")

        # the operator changes his tags: the reported ones stay, and still match
        r = self.admin.patch("/devices/" + ent, {"tags": ["op2"]})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["tags"], ["op2"])
        self.assertEqual(r.json["reported_tags"], ["rep-tag"])
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": "rep-tag"})
        self.assertStatus(r, 201)
        self.assertEqual([j["entity_ident"] for j in r.json["items"]], [ent])
        self.wait_job(r.json["items"][0]["ident"], "terminated")
        # the device reports other tags: the operator's stay
        fake.client.publish(fake.base + "/state", json.dumps(
            {"v": 1, "online": True, "tags": ["rep2"], "agent_version": "fake-2",
             "ts": int(time.time())}), qos=1, retain=True).wait_for_publish(5)
        wait_for(lambda: self.admin.get("/devices/" + ent).json["agent_version"] == "fake-2",
                 what="new agent_version")
        rec = self.admin.get("/devices/" + ent).json
        self.assertEqual(rec["reported_tags"], ["rep2"])
        self.assertEqual(rec["tags"], ["op2"])

        # clean stop: offline; last_seen stays
        fake.stop()
        rec = self.wait_online(ent, False)
        rec = self.admin.get("/devices/" + ent).json
        self.assertIsInstance(rec["last_seen"], int)
        # back, then a crash: the Last Will says offline
        fake2 = self.start_fake(ent, tags=["rep2"])
        fake2.crash()
        self.wait_online(ent, False)
        offline = [d["entity_ident"] for d in list_all(self.admin, "/devices", online="false")]
        self.assertIn(ent, offline)

    # -- offline devices ----------------------------------------------------------------

    def test_offline_refused_without_allow_offline(self):
        off = self.class_device("never-online")
        on, _ = self.online_device("on")
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"],
                            {"entity_ident": off["entity_ident"]})
        self.assertError(r, 409, "device_offline")
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                            {"ident_list": [off["entity_ident"], on["entity_ident"]]})
        self.assertStatus(r, 201)
        self.assertEqual([j["entity_ident"] for j in r.json["items"]], [on["entity_ident"]])
        self.assertEqual(len(r.json["rejected"]), 1, r.json["rejected"])
        rej = r.json["rejected"][0]
        self.assertEqual(rej["entity_ident"], off["entity_ident"])
        self.assertEqual(rej["error"]["code"], "device_offline")
        self.assertTrue(rej["error"]["message"])
        self.wait_job(r.json["items"][0]["ident"], "terminated")
        jobs = list_all(self.admin, "/jobs", entity_ident=off["entity_ident"])
        self.assertEqual(jobs, [], "no job for the refused device")

    def test_offline_queued_then_delivered_in_order(self):
        dev = self.class_device("later")
        ent = dev["entity_ident"]
        idents = [self.post_job(self.task_offline, ent)["ident"] for _ in range(3)]
        bulk = self.admin.post("/tasks/%s/jobs/list" % self.task_offline["ident"],
                               {"ident_list": [ent]})
        self.assertStatus(bulk, 201)
        self.assertEqual(bulk.json["rejected"], [])
        idents.append(bulk.json["items"][0]["ident"])
        time.sleep(1)
        with self.subTest("allow_offline: the jobs of an offline device wait pending"):
            self.assertEqual([self.job(i)["status"] for i in idents], ["pending"] * 4)
        fake = self.start_fake(ent)
        for i in idents:
            self.wait_job(i, "terminated")
        with self.subTest("history of the queued jobs"):
            for i in idents:
                self.assertCleanHistory(i, FULL_RUN)
        got = list(dict.fromkeys(fake.jobs_received()))  # at least once: repeats allowed
        self.assertEqual(got, idents, "delivered in creation order")

    # -- scheduling and ttl -------------------------------------------------------------

    def test_scheduled_job_not_sent_early_and_sent_on_time(self):
        dev, fake = self.online_device("sched")
        ent = dev["entity_ident"]
        now = time.time()
        sched = int(now) + 3
        job = self.post_job(self.task, ent, scheduled_time=sched)
        other = self.post_job(self.task, ent, scheduled_time=sched)  # cancelled before
        past = self.post_job(self.task, ent, scheduled_time=int(now) - 100)
        self.assertEqual(job["status"], "pending")
        self.assertEqual(job["scheduled_time"], sched)
        self.assertAnsweredTransmited(past)  # a past scheduled_time means now
        r = self.admin.patch("/jobs/%s/cancel" % other["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")
        time.sleep(max(0.0, now + 1 - time.time()))
        self.assertEqual(self.job(job["ident"])["status"], "pending", "sent early")
        self.assertEqual(fake.envelopes_of(job["ident"]), [], "sent early")
        done = self.wait_job(job["ident"], tuple(FULL_RUN[2:]),
                             timeout=max(0.5, sched + 2 - time.time()))
        # transmited is committed just before the publish: the envelope may land a moment
        # after the API shows it, so poll until the same deadline
        got = fake.messages_on("/jobs/" + job["ident"])
        deadline = max(sched + 2, time.time() + 0.5)
        while not got and time.time() < deadline:
            time.sleep(0.05)
            got = fake.messages_on("/jobs/" + job["ident"])
        self.assertTrue(got, "no envelope by scheduled_time + 2 (job is %s)" % done["status"])
        self.assertGreaterEqual(got[0][0], sched - 1, "envelope received before scheduled_time")
        self.wait_job(job["ident"], "terminated")
        items = self.history_items(job["ident"])
        self.assertEqual([h["status"] for h in items], FULL_RUN)
        self.assertTrue(sched - 1 <= items[2]["update_at"] <= sched + 1, items[2])
        self.wait_job(past["ident"], "terminated")
        # the cancelled one never went out
        self.assertEqual(self.history(other["ident"]), ["initial", "pending", "cancelled"])
        self.assertEqual(fake.envelopes_of(other["ident"]), [])

    def test_ttl_expiry(self):
        noack, noack_fake = self.online_device("noack", auto=False)
        fast, _ = self.online_device("fast-ttl", auto=True)
        off = self.class_device("off-ttl")
        j_sent = self.post_job(self.task, noack["entity_ident"], ttl=2)
        j_acked = self.post_job(self.task, noack["entity_ident"], ttl=2)
        j_fast = self.post_job(self.task, fast["entity_ident"], ttl=2)
        j_off = self.post_job(self.task_offline, off["entity_ident"], ttl=2)
        self.assertEqual(j_sent["ttl"], 2)
        with self.subTest("allow_offline: a job for an offline device waits pending"):
            self.assertEqual(j_off["status"], "pending")
        wait_for(lambda: noack_fake.envelopes_of(j_acked["ident"]), what="envelope")
        env = noack_fake.envelopes_of(j_acked["ident"])[0]
        self.assertEqual(env["expires_at"], j_acked["created_at"] + 2)
        noack_fake.report(j_acked["ident"], "edge_transmitted")   # received in time
        self.wait_job(j_fast["ident"], "terminated")

        for j in (j_sent, j_off):
            e = self.wait_job(j["ident"], "expired", timeout=8)
            self.assertIsInstance(e["response_time"], int)
            self.assertTrue(e["response"])
        self.assertEqual(self.history(j_sent["ident"]),
                         ["initial", "pending", "transmited", "expired"])
        with self.subTest("a queued job expires without being sent"):
            self.assertEqual(self.history(j_off["ident"]), ["initial", "pending", "expired"])
        time.sleep(max(0.0, j_acked["created_at"] + 2 + 1.5 - time.time()))
        self.assertEqual(self.job(j_acked["ident"])["status"], "edge_transmitted",
                         "ttl is about reception: an acknowledged job does not expire")
        self.assertEqual(self.job(j_fast["ident"])["status"], "terminated")

        # the device's late word on an expired job: kept in history, the status stays
        noack_fake.report(j_sent["ident"], "edge_transmitted")
        wait_for(lambda: len(self.history(j_sent["ident"])) == 5, what="late report kept")
        self.assertEqual(self.history(j_sent["ident"])[3:], ["expired", "edge_transmitted"])
        self.assertEqual(self.job(j_sent["ident"])["status"], "expired")

        # the offline device comes: gets its other job, never the expired one
        later = self.post_job(self.task_offline, off["entity_ident"])["ident"]
        off_fake = self.start_fake(off["entity_ident"])
        self.wait_job(later, "terminated")
        with self.subTest("an expired job is never delivered"):
            self.assertEqual(set(off_fake.jobs_received()), {later})
        noack_fake.report(j_acked["ident"], "terminated", "late but fine")
        self.wait_job(j_acked["ident"], "terminated")

    # -- cancel -------------------------------------------------------------------------

    def test_cancel_before_sending(self):
        dev = self.class_device("cancel-early")
        ent = dev["entity_ident"]
        doomed = self.post_job(self.task_offline, ent)["ident"]
        kept = self.post_job(self.task_offline, ent)["ident"]
        r = self.admin.patch("/jobs/%s/cancel" % doomed)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")
        fake = self.start_fake(ent)
        self.wait_job(kept, "terminated")
        self.assertEqual(self.job(doomed)["status"], "cancelled")
        with self.subTest("a job cancelled before sending is never sent"):
            self.assertEqual(self.history(doomed), ["initial", "pending", "cancelled"])
            self.assertEqual(set(fake.jobs_received()), {kept})

    def test_cancel_after_sending(self):
        dev, fake = self.online_device("cancel-late", auto=False)
        ent = dev["entity_ident"]
        running = self.post_job(self.task, ent)["ident"]
        sent = self.post_job(self.task, ent)["ident"]
        wait_for(lambda: fake.envelopes_of(running) and fake.envelopes_of(sent),
                 what="envelopes")
        fake.report(running, "edge_transmitted")
        fake.report(running, "edge_started")
        self.wait_job(running, "edge_started")
        for ident in (running, sent):
            r = self.admin.patch("/jobs/%s/cancel" % ident)
            self.assertStatus(r, 200)
            self.assertEqual(r.json["status"], "cancelled")
        for ident in (running, sent):
            wait_for(lambda: fake.cancels_of(ident), what="cancel message for %s" % ident)
            c = fake.cancels_of(ident)[0]
            self.assertEqual(c["v"], 1)
            self.assertEqual(c["job"], ident)
            self.assertIn("reason", c)
            msgs = fake.messages_on("/jobs/%s/cancel" % ident)
            self.assertEqual((msgs[0][2], msgs[0][3]), (1, False), "cancel: QoS 1, not retained")
        # the device's later reports are kept in history; the status stays cancelled
        fake.report(running, "edge_error", "aborted")
        fake.report(sent, "edge_transmitted")
        fake.report(sent, "terminated", "finished anyway")
        wait_for(lambda: self.history(running)[-1:] == ["edge_error"], what="late report kept")
        wait_for(lambda: self.history(sent)[-1:] == ["terminated"], what="late reports kept")
        self.assertEqual(self.history(running),
                         ["initial", "pending", "transmited", "edge_transmitted",
                          "edge_started", "cancelled", "edge_error"])
        self.assertEqual(self.history(sent),
                         ["initial", "pending", "transmited", "cancelled", "edge_transmitted",
                          "terminated"])
        for ident in (running, sent):
            self.assertEqual(self.job(ident)["status"], "cancelled")
            r = self.admin.patch("/jobs/%s/cancel" % ident)
            self.assertError(r, 409, "job_terminal")

    def test_cancel_of_terminated_job(self):
        dev, _ = self.online_device("cancel-done")
        ident = self.post_job(self.task, dev["entity_ident"])["ident"]
        self.wait_job(ident, "terminated")
        self.assertError(self.admin.patch("/jobs/%s/cancel" % ident), 409, "job_terminal")
        self.assertEqual(self.job(ident)["status"], "terminated")

    # -- events -------------------------------------------------------------------------

    def test_events_topic(self):
        dev, fake = self.online_device("events")
        ident = self.post_job(self.task, dev["entity_ident"])["ident"]
        final = self.wait_job(ident, "terminated")
        topic = "rcs/v1/%s/events/jobs/%s" % (self.client_root, ident)
        wait_for(lambda: any(json.loads(m[1])["status"] == "terminated"
                             for m in self.events.on(topic)), what="terminated event")
        msgs = self.events.on(topic)
        statuses = [json.loads(m[1])["status"] for m in msgs]
        history = self.history(ident)
        if statuses != history:
            self.assertEqual(statuses, history[2:],
                             "events of the job in order (with or without initial/pending)")
            note("events topic: no event for initial/pending (job creation); the first event"
                 " of a job is 'transmited'")
        for m in msgs:
            self.assertEqual((m[2], m[3]), (1, False), "events: QoS 1, not retained")
            rec = json.loads(m[1])
            for k in JOB_FIELDS:
                self.assertIn(k, rec)
            self.assertEqual(rec["ident"], ident)
            self.assertEqual(rec["client_root"], self.client_root)
        self.assertEqual(json.loads(msgs[-1][1]), final, "the last event is the job record")

        # a cancelled job: the cancel is an event too
        off = self.class_device("events-off")
        pend = self.post_job(self.task_offline, off["entity_ident"])["ident"]
        self.assertStatus(self.admin.patch("/jobs/%s/cancel" % pend), 200)
        topic = "rcs/v1/%s/events/jobs/%s" % (self.client_root, pend)
        wait_for(lambda: any(json.loads(m[1])["status"] == "cancelled"
                             for m in self.events.on(topic)), what="cancel event")
        self.assertEqual(json.loads(self.events.on(topic)[-1][1])["status"], "cancelled")

    # -- at least once --------------------------------------------------------------------

    def test_resent_when_device_comes_back(self):
        dev, fake = self.online_device("flaky", auto=False)
        ent = dev["entity_ident"]
        ident = self.post_job(self.task, ent)["ident"]
        wait_for(lambda: fake.envelopes_of(ident), what="envelope")
        fake.crash()  # before acknowledging
        self.wait_online(ent, False)
        self.assertEqual(self.job(ident)["status"], "transmited")
        fake2 = self.start_fake(ent, auto=True)
        wait_for(lambda: fake2.envelopes_of(ident), timeout=8,
                 what="unacknowledged job re-sent when the device came back")
        self.wait_job(ident, "terminated")
        self.assertCleanHistory(ident, FULL_RUN)

    def test_zz_stale_job_resent(self):
        """A job acknowledged and then without news is re-sent after --resend-after (5 s,
        backing off): the device answers the repeat with its current status."""
        ident = self.stale_job
        wait_for(lambda: len(self.stale_fake.envelopes_of(ident)) >= 2,
                 timeout=max(1.0, self.stale_news + 45 - time.time()),
                 what="envelope re-sent after --resend-after 5 without news")
        first_resend = [m[0] for m in self.stale_fake.messages_on("/jobs/" + ident)][1]
        delay = first_resend - self.stale_news
        note("job without news re-sent %.1fs after the last report was sent (--resend-after 5)"
             % delay)
        self.assertGreaterEqual(delay, 4.0, "re-sent before --resend-after")
        self.stale_fake.report(self.stale_job, "terminated", "done")
        self.wait_job(ident, "terminated")
        self.assertEqual(self.history(ident),
                         ["initial", "pending", "transmited", "edge_transmitted", "terminated"])


# =========================================================================================


class BulkTest(MqttTest):
    """Bulk sends of 500 devices: 480 on a FakeFleet connection and 20 FakeDevices. With a
    small events_backlog, so that the devices' reports wait for the event feed now and then
    (docs/mqtt.md, "Monitoring"): nothing is lost or reordered by it."""

    N = 500
    N_FAKES = 20
    coord_args = ("--events-backlog", "32")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.task = cls.class_task(name="bulk")
        cls.task_offline = cls.class_task(name="bulk-offline", allow_offline=True)
        cls.events = Watcher(cls.broker, "rcs/v1/+/events/jobs/+").start()
        cls.addClassCleanup(cls.events.stop)
        cls.ents = [cls.class_device("b%d" % i, tags=["bulk"])["entity_ident"]
                    for i in range(cls.N)]
        cls.fleet_ents = cls.ents[cls.N_FAKES:]
        cls.fleet = FakeFleet(cls.broker, cls.client_root, cls.fleet_ents,
                              tags=["fleet-rep"]).start()
        cls.addClassCleanup(cls.fleet.stop)
        cls.fake_of = {e: cls.start_fake(e, tags=["fake-rep"], wait_online=False)
                       for e in cls.ents[:cls.N_FAKES]}
        wait_for(lambda: cls.admin.get(with_query("/devices", tag="bulk", online="true",
                                                  per_page=1)).json["total_items"] == cls.N,
                 timeout=30, what="all bulk devices online")

    def group_statuses(self, group):
        r = self.admin.get("/groups/" + group)
        self.assertStatus(r, 200)
        return r.json["statuses"]

    def wait_group(self, group, statuses, timeout=30, what="group statuses"):
        last = {}

        def check():
            last["s"] = self.group_statuses(group)
            return last["s"] == statuses
        try:
            wait_for(check, timeout=timeout, what=what)
        except AssertionError:
            raise AssertionError("%s: expected %r, got %r after %ss" % (
                what, statuses, last.get("s"), timeout))

    def test_a_tag_send_500_all_terminated(self):
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"],
                            {"tag": "bulk", "group_name": "all-500"})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["rejected"], [])
        items = r.json["items"]
        self.assertEqual(len(items), self.N)
        self.assertEqual(sorted(j["entity_ident"] for j in items), sorted(self.ents))
        self.assertEqual({j["status"] for j in items}, {"pending"},
                         "bulk sends answer with their jobs as committed (pending)")
        group = r.json["group"]["ident"]
        self.wait_group(group, {"terminated": self.N}, what="all %d jobs terminated" % self.N)
        by_dev = {j["entity_ident"]: j["ident"] for j in items}
        for e, fake in self.fake_of.items():
            self.assertEqual(set(fake.jobs_received()), {by_dev[e]})
        for j in items[::25]:
            self.assertCleanHistory(j["ident"], FULL_RUN)
        self.assertEqual(self.fleet.sent_while_offline, [])
        # every job's events, complete and in the order of its history: they leave from
        # one publisher thread, which waits for room in the client's window rather than
        # drop an event (docs/mqtt.md, "Monitoring")
        prefix = "rcs/v1/%s/events/jobs/" % self.client_root
        idents = {j["ident"] for j in items}

        def events_by_job():
            by_job = {}
            with self.events.lock:
                msgs = list(self.events.messages)
            for topic, payload, _, _ in msgs:
                if topic.startswith(prefix) and topic[len(prefix):] in idents:
                    by_job.setdefault(topic[len(prefix):], []).append(
                        json.loads(payload)["status"])
            return by_job
        wait_for(lambda: sum(v[-1:] == ["terminated"] for v in events_by_job().values())
                 == self.N, timeout=30, what="the terminated event of every job")
        wrong = {k: v for k, v in events_by_job().items() if v != FULL_RUN[2:]}
        self.assertEqual(wrong, {}, "jobs whose events are missing or out of order")
        # no event was dropped; on SQLite, whose batches apply a thousand reports at once,
        # the reports waited for the feed (2,500 events against a backlog of 32); on
        # PostgreSQL each report is a transaction of its own and the feed may keep up
        log = self.coord_log()
        self.assertNotIn("events dropped", log)
        if not on_postgres():
            self.assertIn("device reports wait for the event feed", log)

    def test_b_offline_at_scale(self):
        offline = self.fleet_ents[:300]
        self.fleet.set_online(offline, False)
        wait_for(lambda: self.admin.get(with_query("/devices", tag="bulk", online="false",
                                                   per_page=1)).json["total_items"] == 300,
                 timeout=30, what="300 devices offline")
        # reported tag, task without allow_offline: the offline ones are rejected
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"],
                            {"tag": "fleet-rep", "group_name": "reported"})
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["items"]), len(self.fleet_ents) - 300)
        self.assertEqual(sorted(x["entity_ident"] for x in r.json["rejected"]), sorted(offline))
        self.assertEqual({x["error"]["code"] for x in r.json["rejected"]}, {"device_offline"})
        g1 = r.json["group"]["ident"]
        # the group keeps them, with why and what to do (docs/api.md "Bulk sends and groups")
        g = self.admin.get("/groups/" + g1).json
        self.assertEqual(g["rejected"], sorted(r.json["rejected"],
                                                key=lambda x: x["entity_ident"]))
        self.assertIn('"offline": "queue"', g["rejected"][0]["error"]["message"])
        self.assertNotIn("rejected", self.admin.get(with_query("/groups", name="reported")
                                                    ).json["items"][0])
        # "offline": "queue" queues them whatever the task says; "reject" rejects them
        # whatever it says; another value is refused, naming the member
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                            {"ident_list": offline[:10], "offline": "later"})
        self.assertError(r, 400, "validation_failed", field="offline")
        r = self.admin.post("/tasks/%s/jobs/list" % self.task_offline["ident"],
                            {"ident_list": offline[:10], "group_name": "refused",
                             "offline": "reject"})
        self.assertStatus(r, 201)
        self.assertEqual((len(r.json["items"]), len(r.json["rejected"])), (0, 10))
        self.assertIn("the send rejects offline devices", r.json["rejected"][0]["error"]["message"])
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"],
                            {"tag": "fleet-rep", "group_name": "queued-by-send",
                             "offline": "queue"})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["rejected"], [])
        self.assertEqual(len(r.json["items"]), len(self.fleet_ents))
        g3 = r.json["group"]["ident"]
        self.assertEqual(self.admin.get("/groups/" + g3).json["rejected"], [])
        # ident_list, allow_offline: all accepted, the offline ones wait pending
        r = self.admin.post("/tasks/%s/jobs/list" % self.task_offline["ident"],
                            {"ident_list": self.ents, "group_name": "queued"})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["rejected"], [])
        self.assertEqual(len(r.json["items"]), self.N)
        g2 = r.json["group"]["ident"]
        self.wait_group(g1, {"terminated": len(self.fleet_ents) - 300},
                        what="reported-tag group terminated")
        with self.subTest("allow_offline: jobs of offline devices wait pending"):
            self.wait_group(g2, {"terminated": self.N - 300, "pending": 300}, timeout=15,
                            what="online ones terminated, offline ones pending")
        with self.subTest("nothing is published for offline devices"):
            self.assertEqual(len(self.fleet.sent_while_offline), 0,
                             "%d envelopes published for offline devices"
                             % len(self.fleet.sent_while_offline))
        with self.subTest('"offline": "queue": jobs of offline devices wait pending'):
            self.wait_group(g3, {"terminated": len(self.fleet_ents) - 300, "pending": 300},
                            timeout=15, what="online ones terminated, offline ones pending")
        self.fleet.set_online(offline, True)
        self.wait_group(g2, {"terminated": self.N},
                        what="queued jobs delivered when their devices came online")
        self.wait_group(g3, {"terminated": len(self.fleet_ents)},
                        what="jobs queued by the send delivered when their devices came online")
        for j in r.json["items"][::50]:
            self.assertCleanHistory(j["ident"], FULL_RUN)


# =========================================================================================


class BulkEventsQos0Test(MqttTest):
    """A tag send to 500 devices with events at QoS 0 (--events-qos 0): nothing paces the
    events but the MQTT client, whose queue of publishes fills in bursts; each event is
    tried again as soon as the queue has room, none waits 2 s for an acknowledgement that
    never comes at QoS 0 and none is dropped (docs/mqtt.md, "Events QoS")."""

    N = 500
    coord_args = ("--events-qos", "0")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.task = cls.class_task(name="bulk-qos0")
        cls.events = Watcher(cls.broker, "rcs/v1/+/events/jobs/+").start()
        cls.addClassCleanup(cls.events.stop)
        cls.ents = [cls.class_device("q%d" % i, tags=["bulk0"])["entity_ident"]
                    for i in range(cls.N)]
        cls.fleet = FakeFleet(cls.broker, cls.client_root, cls.ents).start()
        cls.addClassCleanup(cls.fleet.stop)
        wait_for(lambda: cls.admin.get(with_query("/devices", tag="bulk0", online="true",
                                                  per_page=1)).json["total_items"] == cls.N,
                 timeout=30, what="all devices online")

    def test_every_event_of_a_send(self):
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"],
                            {"tag": "bulk0", "group_name": "qos0"})
        self.assertStatus(r, 201)
        idents = {j["ident"] for j in r.json["items"]}
        self.assertEqual(len(idents), self.N)
        prefix = "rcs/v1/%s/events/jobs/" % self.client_root

        def events_by_job():
            by_job = {}
            with self.events.lock:
                msgs = list(self.events.messages)
            for topic, payload, qos, _ in msgs:
                if topic.startswith(prefix) and topic[len(prefix):] in idents:
                    by_job.setdefault(topic[len(prefix):], []).append(
                        (json.loads(payload)["status"], qos))
            return by_job
        wait_for(lambda: sum(v[-1:] == [("terminated", 0)] for v in events_by_job().values())
                 == self.N, timeout=60, what="the terminated event of every job")
        want = [(st, 0) for st in FULL_RUN[2:]]
        wrong = {k: v for k, v in events_by_job().items() if v != want}
        self.assertEqual(wrong, {}, "jobs whose events are missing, out of order or not QoS 0")
        log = self.coord_log()
        self.assertNotIn("events not published", log)
        self.assertNotIn("events dropped", log)


class BadInputTest(MqttTest):
    """Malformed, oversized, wrongly typed, unknown-version and misaddressed messages,
    published with mosquitto_pub: logged and dropped; the coordinator keeps working and
    nothing changes."""

    coord_args = ("--mqtt-max-payload", "2048")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.task = cls.class_task(name="bad-input")
        cls.victim, cls.victim_fake = cls.online_device("victim", auto=False,
                                                        reported=["victim-tag"])
        cls.sentinel, cls.sentinel_fake = cls.online_device("sentinel", auto=True)
        cls.neighbour, _ = cls.online_device("neighbour", auto=True)
        cls.other_root = cls.coord.init_tenant(user="eve")["client_root"]

    def status_topic(self, job, entity=None, root=None):
        return "rcs/v1/%s/%s/jobs/%s/status" % (root or self.client_root,
                                                 entity or self.victim["entity_ident"], job)

    def state_topic(self, entity=None, root=None):
        return "rcs/v1/%s/%s/state" % (root or self.client_root,
                                       entity or self.victim["entity_ident"])

    def report(self, job_ident, **over):
        r = {"v": 1, "job": job_ident, "status": "terminated", "seq": 1, "ts": int(time.time()),
             "response": "bad"}
        r.update(over)
        return json.dumps({k: v for k, v in r.items() if v is not DROP})

    def warnings(self):
        return [line for line in self.coord_log().splitlines()
                if "drop" in line.lower() or "warn" in line.lower()]

    def sentinel_job(self):
        ident = self.post_job(self.task, self.sentinel["entity_ident"])["ident"]
        self.wait_job(ident, "terminated", timeout=15)
        self.assertAlive()

    def presence(self):
        d = self.admin.get("/devices/" + self.victim["entity_ident"]).json
        return {k: d[k] for k in ("online", "tags", "reported_tags", "agent_version")}

    def report_cases(self):
        """(name, topic(job), payload(job)): each would make the victim's job terminated
        (or otherwise change it) if it were applied."""
        nested = "[" * 900 + "]" * 900
        return [
            ("not JSON", None, lambda j: b"this is not json"),
            ("JSON array", None, lambda j: "[%s]" % self.report(j)),
            ("JSON string", None, lambda j: '"terminated"'),
            ("JSON null", None, lambda j: "null"),
            ("empty payload", None, lambda j: b""),
            ("truncated JSON", None, lambda j: self.report(j)[:-5]),
            ("trailing garbage", None, lambda j: self.report(j) + " trailing"),
            ("NUL inside", None, lambda j: self.report(j).encode() + b"\x00{}"),
            ("v missing", None, lambda j: self.report(j, v=DROP)),
            ("v 2", None, lambda j: self.report(j, v=2)),
            ("v 0", None, lambda j: self.report(j, v=0)),
            ("v string", None, lambda j: self.report(j, v="1")),
            ("job missing", None, lambda j: self.report(j, job=DROP)),
            ("job not a UUID", None, lambda j: self.report(j, job="job-1")),
            ("job not the topic's", None, lambda j: self.report(str(uuid.uuid4()))),
            ("status missing", None, lambda j: self.report(j, status=DROP)),
            ("status cancelled", None, lambda j: self.report(j, status="cancelled")),
            ("status expired", None, lambda j: self.report(j, status="expired")),
            ("status transmited", None, lambda j: self.report(j, status="transmited")),
            ("status pending", None, lambda j: self.report(j, status="pending")),
            ("status unknown", None, lambda j: self.report(j, status="finished")),
            ("status number", None, lambda j: self.report(j, status=6)),
            ("seq missing", None, lambda j: self.report(j, seq=DROP)),
            ("seq string", None, lambda j: self.report(j, seq="1")),
            ("seq float", None, lambda j: self.report(j, seq=1.5)),
            ("seq 0", None, lambda j: self.report(j, seq=0)),
            ("seq negative", None, lambda j: self.report(j, seq=-1)),
            ("seq 2^64", None, lambda j: self.report(j, seq=2 ** 64)),
            ("seq 10^30", None, lambda j: self.report(j, seq=10 ** 30)),
            ("seq NaN", None, lambda j: self.report(j).replace('"seq": 1', '"seq": NaN')),
            ("ts string", None, lambda j: self.report(j, ts="now")),
            ("response number", None, lambda j: self.report(j, response=5)),
            ("response object", None, lambda j: self.report(j, response={"a": 1})),
            ("response invalid UTF-8", None,
             lambda j: self.report(j, response="@@").encode().replace(b"@@", b"\xff\xfe\xc3")),
            ("deeply nested", None,
             lambda j: self.report(j, response="@@").replace('"@@"', nested)),
            ("over --mqtt-max-payload", None, lambda j: self.report(j, response="x" * 4096)),
            ("from another device", lambda j: self.status_topic(
                j, entity=self.neighbour["entity_ident"]), lambda j: self.report(j)),
            ("from another tenant", lambda j: self.status_topic(j, root=self.other_root),
             lambda j: self.report(j)),
            ("for a device not in the inventory", lambda j: self.status_topic(
                j, entity=str(uuid.uuid4())), lambda j: self.report(j)),
            ("client_root not a UUID", lambda j: "rcs/v1/tenant/%s/jobs/%s/status" % (
                self.victim["entity_ident"], j), lambda j: self.report(j)),
            ("job in topic not a UUID", lambda j: self.status_topic("job-1"),
             lambda j: self.report(j)),
        ]

    def test_bad_status_reports(self):
        ent = self.victim["entity_ident"]
        for name, topic_fn, payload_fn in self.report_cases():
            with self.subTest(name):
                job = self.post_job(self.task, ent)
                j = job["ident"]
                self.wait_job(j, "transmited")
                topic = topic_fn(j) if topic_fn else self.status_topic(j)
                n_warn = len(self.warnings())
                mosquitto_pub(self.broker, topic, payload_fn(j))
                self.sentinel_job()
                wait_for(lambda: len(self.warnings()) > n_warn, timeout=5,
                         what="a log line about the dropped message (%s)" % name)
                after = self.job(j)
                self.assertEqual(after["status"], "transmited", "%s: changed the job" % name)
                self.assertEqual(after["response"], job["response"])
                self.assertEqual(self.history(j), ["initial", "pending", "transmited"], name)
                # the job still works afterwards
                self.victim_fake.report(j, "edge_transmitted", seq=1)
                self.victim_fake.report(j, "terminated", "fine", seq=2)
                self.wait_job(j, "terminated")

    def test_unknown_job(self):
        j = str(uuid.uuid4())
        n_warn = len(self.warnings())
        mosquitto_pub(self.broker, self.status_topic(j), self.report(j))
        self.sentinel_job()
        wait_for(lambda: len(self.warnings()) > n_warn, timeout=5, what="logged")
        self.assertStatus(self.admin.get("/jobs/" + j), 404)

    def test_bad_state_messages(self):
        ent = self.victim["entity_ident"]
        before = self.presence()
        self.assertEqual(before["online"], True)
        n_devices = self.admin.get("/devices").json["total_items"]

        def state(**over):
            s = {"v": 1, "online": False, "tags": ["changed"], "agent_version": "bad",
                 "ts": int(time.time())}
            s.update(over)
            return json.dumps({k: v for k, v in s.items() if v is not DROP})
        nested = "[" * 900 + "]" * 900
        cases = [
            ("not JSON", None, b"offline!"),
            ("JSON array", None, "[%s]" % state()),
            ("truncated", None, state()[:-3]),
            ("trailing garbage", None, state() + "x"),
            ("v missing", None, state(v=DROP)),
            ("v 2", None, state(v=2)),
            ("v string", None, state(v="1")),
            ("online missing", None, state(online=DROP)),
            ("online string", None, state(online="false")),
            ("online number", None, state(online=0)),
            ("online null", None, state(online=None)),
            ("tags string", None, state(tags="changed")),
            ("tags numbers", None, state(tags=[1, 2])),
            ("too many tags", None, state(tags=["t%d" % i for i in range(65)])),
            ("tag too long", None, state(tags=["x" * 65])),
            ("agent_version number", None, state(agent_version=5)),
            ("ts string", None, state(ts="now")),
            ("invalid UTF-8", None,
             state(agent_version="@@").encode().replace(b"@@", b"\xc3\x28")),
            ("deeply nested", None, state(agent_version="@@").replace('"@@"', nested)),
            ("over --mqtt-max-payload", None, state(agent_version="a" * 40,
                                                    tags=["t" * 60] * 40)),
            ("another tenant's root", self.state_topic(root=self.other_root), state()),
            ("entity not a UUID", "rcs/v1/%s/device-1/state" % self.client_root, state()),
        ]
        for name, topic, payload in cases:
            with self.subTest(name):
                n_warn = len(self.warnings())
                mosquitto_pub(self.broker, topic or self.state_topic(), payload)
                self.sentinel_job()
                wait_for(lambda: len(self.warnings()) > n_warn, timeout=5,
                         what="a log line about the dropped state (%s)" % name)
                self.assertEqual(self.presence(), before, name)
        with self.subTest("empty payload (a retained state cleared)"):
            mosquitto_pub(self.broker, self.state_topic(), b"")
            self.sentinel_job()
            self.assertEqual(self.presence(), before)
        with self.subTest("device not in the inventory"):
            stranger = str(uuid.uuid4())
            n_warn = len(self.warnings())
            mosquitto_pub(self.broker, self.state_topic(entity=stranger),
                          state(online=True))
            self.sentinel_job()
            wait_for(lambda: len(self.warnings()) > n_warn, timeout=5, what="logged")
            self.assertStatus(self.admin.get("/devices/" + stranger), 404)
            self.assertEqual(self.admin.get("/devices").json["total_items"], n_devices)
        # the victim still gets jobs
        j = self.post_job(self.task, ent)["ident"]
        wait_for(lambda: self.victim_fake.envelopes_of(j), what="victim still served")
        self.victim_fake.report(j, "terminated", "ok", seq=1)
        self.wait_job(j, "terminated")

    def test_flood_of_garbage(self):
        """Hundreds of bad messages at once: no crash, no stall."""
        c = mqtt.Client(client_id="flood-" + uuid.uuid4().hex[:8], clean_session=True)
        c.max_inflight_messages_set(1000)
        c.connect("127.0.0.1", self.broker.port)
        c.loop_start()
        try:
            infos = []
            for i in range(300):
                j = str(uuid.uuid4())
                payload = [b"garbage", b"{}", b'{"v":1}', self.report(j).encode(),
                           b"[" * 1000, b"\xff" * 100][i % 6]
                topic = self.status_topic(j) if i % 2 else self.state_topic(
                    entity=str(uuid.uuid4()))
                infos.append(c.publish(topic, payload, qos=1))
            for i in infos:
                i.wait_for_publish(10)
        finally:
            c.disconnect()
            c.loop_stop()
        self.sentinel_job()
        self.assertEqual(self.presence()["online"], True)


DROP = object()  # a field left out of a generated message


# =========================================================================================


class RestartTest(MqttTest):
    """Coordinator restarts (kill -9 and SIGTERM) and a broker restart: nothing lost. The
    plain subscription in the persistent session: the reports sent while the coordinator
    is down wait for it there."""

    coord_args = ("--resend-after", "5", "--mqtt-shared-subscriptions", "no")
    shared = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.task = cls.class_task(name="restart")
        cls.task_offline = cls.class_task(name="restart-offline", allow_offline=True)

    def restart_coordinator(self, sig):
        old = self.coord
        rc = old.stop(sig)
        if sig == signal.SIGTERM:
            self.assertEqual(rc, 0, "exit code on SIGTERM:\n" + old.read_log()[-3000:])
        return old

    def start_again(self, old):
        new = self.replace_coordinator(self.extra_args, db=old.db)
        return new

    def _restart_scenario(self, sig):
        # A: offline, jobs queued; B: has a job, reports it while the coordinator is down;
        # E: received a job and never acknowledged it; C: a job scheduled across the restart
        a = self.class_device("A")
        queued = [self.post_job(self.task_offline, a["entity_ident"])["ident"]
                  for _ in range(4)]
        b, b_fake = self.online_device("B", auto=False)
        jb = self.post_job(self.task, b["entity_ident"])["ident"]
        e, e_fake = self.online_device("E", auto=False)
        je = self.post_job(self.task, e["entity_ident"])["ident"]
        c, c_fake = self.online_device("C", auto=True)
        sched = int(time.time()) + 5
        js = self.post_job(self.task, c["entity_ident"], scheduled_time=sched)["ident"]
        wait_for(lambda: b_fake.envelopes_of(jb) and e_fake.envelopes_of(je),
                 what="envelopes")

        old = self.restart_coordinator(sig)
        for st in ("edge_transmitted", "edge_started", "edge_running"):
            b_fake.report(jb, st)
        b_fake.report(jb, "terminated", "while the coordinator was away")
        time.sleep(0.5)
        self.start_again(old)
        self.wait_connected(self.coord)

        if self.shared:
            # the clean session lost them: the coordinator, alone, sends the in-flight job
            # again, and the device answers the repeat with its final report (as the agent
            # does, docs/mqtt.md "Several coordinators")
            wait_for(lambda: len(b_fake.envelopes_of(jb)) >= 2, timeout=10,
                     what="in-flight job sent again after the restart")
            b_fake.report(jb, "terminated", "while the coordinator was away")
            done = self.wait_job(jb, "terminated")
            self.assertEqual(done["response"], "while the coordinator was away")
            self.assertCleanHistory(jb, ["initial", "pending", "transmited", "terminated"])
        else:
            # reports sent while the coordinator was down are applied
            done = self.wait_job(jb, "terminated")
            self.assertEqual(done["response"], "while the coordinator was away")
            self.assertCleanHistory(jb, FULL_RUN)
        # the unacknowledged job is published again after the restart
        wait_for(lambda: len(e_fake.envelopes_of(je)) >= 2, timeout=10,
                 what="unacknowledged job re-sent after the restart")
        e_fake.report(je, "edge_transmitted")
        e_fake.report(je, "terminated", "ok")
        self.wait_job(je, "terminated")
        self.assertCleanHistory(je, ["initial", "pending", "transmited", "edge_transmitted",
                                     "terminated"])
        # the queued jobs go out when the device comes
        a_fake = self.start_fake(a["entity_ident"])
        for j in queued:
            self.wait_job(j, "terminated")
            self.assertCleanHistory(j, FULL_RUN)
        # at least once (repeats allowed), in creation order
        self.assertEqual(list(dict.fromkeys(a_fake.jobs_received())), queued)
        # the schedule survived the restart
        self.wait_job(js, "terminated", timeout=max(1.0, sched + 10 - time.time()))
        items = self.history_items(js)
        self.assertEqual([h["status"] for h in items], FULL_RUN)
        self.assertGreaterEqual(items[2]["update_at"], sched - 1, "sent before scheduled_time")
        if self.shared:
            # sent at its time; once more if the clean session was taken (and the in-flight
            # jobs sent again) after that, the machine being slow: the device drops repeats
            self.assertIn(len(c_fake.envelopes_of(js)), (1, 2))
        else:
            self.assertEqual(len(c_fake.envelopes_of(js)), 1)
        # and the new coordinator works as usual
        j = self.post_job(self.task, c["entity_ident"])
        self.assertAnsweredTransmited(j)
        self.wait_job(j["ident"], "terminated")

    def test_a_coordinator_kill9(self):
        self._restart_scenario(signal.SIGKILL)

    def test_b_coordinator_sigterm(self):
        self._restart_scenario(signal.SIGTERM)

    def test_bb_sigterm_in_a_burst_of_reports(self):
        """SIGTERM while reports pour in: each report the coordinator acknowledged to the
        broker is applied before it exits; the broker keeps the others in the persistent
        session for the next start. After the restart every job has its final report, once."""
        if self.shared:
            self.skipTest("in a clean session the reports not yet acknowledged go with it")
        dev, fake = self.online_device("burst", auto=False)
        jobs = [self.post_job(self.task, dev["entity_ident"])["ident"] for _ in range(150)]
        wait_for(lambda: all(fake.envelopes_of(j) for j in jobs), timeout=30,
                 what="every envelope")
        for j in jobs:
            fake.report(j, "terminated", "burst")
        old = self.restart_coordinator(signal.SIGTERM)
        self.start_again(old)
        self.wait_connected(self.coord)
        for j in jobs:
            self.wait_job(j, "terminated")
        for j in jobs[::10]:
            self.assertCleanHistory(j, ["initial", "pending", "transmited", "terminated"])

    def test_c_broker_restart(self):
        d1, d1_fake = self.online_device("D1", auto=True)
        d2, d2_fake = self.online_device("D2", auto=False)
        before = [self.post_job(self.task, d1["entity_ident"])["ident"] for _ in range(5)]
        in_flight = self.post_job(self.task, d2["entity_ident"])["ident"]
        to_cancel = self.post_job(self.task, d2["entity_ident"])["ident"]
        wait_for(lambda: d2_fake.envelopes_of(in_flight) and d2_fake.envelopes_of(to_cancel),
                 what="envelopes")
        d2_fake.report(in_flight, "edge_transmitted")
        self.wait_job(in_flight, "edge_transmitted")
        n_lost = self.coord_log().count("lost")

        self.broker.stop()
        wait_for(lambda: self.coord_log().count("lost") > n_lost, timeout=10,
                 what="the coordinator noticed the broker is gone")
        # the API keeps serving; a job created meanwhile waits pending
        during = self.post_job(self.task_offline, d1["entity_ident"])
        self.assertEqual(during["status"], "pending", "created while the broker is down")
        self.assertStatus(self.admin.get("/jobs/" + in_flight), 200)
        # a job the device has is cancelled while the broker is away
        r = self.admin.patch("/jobs/%s/cancel" % to_cancel)
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")
        time.sleep(1)
        self.broker.start()

        n = d2_fake.connects
        wait_for(lambda: d2_fake.connects > n, timeout=20, what="device reconnected")
        d2_fake.report(in_flight, "edge_started")
        d2_fake.report(in_flight, "edge_running")
        d2_fake.report(in_flight, "terminated", "after the broker restart")
        # the device, not knowing, reports on the cancelled job: kept in history, and the
        # device must still be told (docs/mqtt.md: a cancel message goes to the device)
        d2_fake.report(to_cancel, "edge_transmitted")
        wait_for(lambda: self.history(to_cancel)[-1:] == ["edge_transmitted"],
                 what="late report kept")
        self.assertEqual(self.history(to_cancel),
                         ["initial", "pending", "transmited", "cancelled", "edge_transmitted"])
        self.assertEqual(self.job(to_cancel)["status"], "cancelled")
        with self.subTest("a cancel made while the broker was down reaches the device"):
            wait_for(lambda: d2_fake.cancels_of(to_cancel), timeout=10,
                     what="cancel message for %s after the broker came back" % to_cancel)
        for j in before + [during["ident"], in_flight]:
            self.wait_job(j, "terminated", timeout=20)
            self.assertCleanHistory(j, FULL_RUN)
        self.assertEqual(self.job(in_flight)["response"], "after the broker restart")
        for dev in (d1, d2):
            self.assertIs(self.admin.get("/devices/" + dev["entity_ident"]).json["online"],
                          True)
        after = self.post_job(self.task, d1["entity_ident"])
        self.assertAnsweredTransmited(after)
        self.wait_job(after["ident"], "terminated")
        # at least once: repeats are allowed, nothing is missing or foreign
        self.assertEqual(set(d1_fake.jobs_received()),
                         set(before + [during["ident"], after["ident"]]))


class RestartSharedTest(RestartTest):
    """The restarts with the shared subscription (yes: auto takes it on a shared database
    only): its clean session loses the reports sent while the coordinator is down; the
    in-flight jobs are sent again."""

    coord_args = ("--resend-after", "5", "--mqtt-shared-subscriptions", "yes")
    shared = True

    @classmethod
    def wait_connected(cls, coord):
        super().wait_connected(coord)
        wait_for(lambda: "status reports: shared subscription" in cls.coord_log(coord),
                 timeout=20, what="the shared subscription taken")

    def test_c_broker_restart(self):
        self.skipTest("the broker restart is the plain subscription's case")


class BrokerWithoutPersistenceTest(MqttTest):
    """A broker restart that loses every session and retained message: both sides
    re-subscribe and re-publish, and jobs flow again. The coordinator's window of
    unacknowledged QoS 1 messages is 4 (mqtt_window), so that messages lost with a session
    would block it if they kept their places."""

    broker_persistence = False
    coord_args = ("--mqtt-window", "4")

    def test_broker_restart_without_sessions(self):
        task = self.class_task(name="np")
        dev, fake = self.online_device("np", auto=True)
        ent = dev["entity_ident"]
        self.wait_job(self.post_job(task, ent)["ident"], "terminated")
        n = fake.connects
        self.broker.stop()
        time.sleep(0.5)
        self.broker.start()
        wait_for(lambda: fake.connects > n, timeout=20, what="device reconnected")
        # the device re-published its state and the coordinator subscribed again
        self.wait_online(ent, True, timeout=15)
        job = self.post_job(task, ent)
        self.wait_job(job["ident"], "terminated", timeout=20)
        self.assertCleanHistory(job["ident"])
        self.assertIs(self.admin.get("/devices/" + ent).json["online"], True)

    def test_messages_lost_with_the_session_free_the_window(self):
        # events published while the broker is held still (SIGSTOP) fill the window and are
        # never acknowledged; the broker dies and a new one knows no session: the MQTT
        # library drops those messages without a word, and the coordinator counts its
        # window again from the library's list (docs/coordinator.md, mqtt_window), or every
        # publish would wait for room that never comes
        task = self.class_task(name="lost", allow_offline=True)
        ent = self.class_device("lost")["entity_ident"]
        jobs = [self.post_job(task, ent)["ident"] for _ in range(6)]
        connected = self.coord_log().count("connected to ")
        os.kill(self.broker.proc.pid, signal.SIGSTOP)
        try:
            for j in jobs:  # each cancel's event goes out (4 of them in the window)
                self.assertStatus(self.admin.patch("/jobs/%s/cancel" % j), 200)
            time.sleep(1)
        finally:
            self.broker.stop(signal.SIGKILL)
        self.broker.start()
        wait_for(lambda: self.coord_log().count("connected to ") > connected,
                 timeout=20, what="the coordinator connected to the new broker")
        # the new broker knew no session: a connect to it says so. Not always the last
        # one: a connect the coordinator gave up on (its CONNACK late on a loaded machine)
        # leaves a session there that the next attempt resumes; and the artifacts' own
        # connection (clean) logs its connects among the bridge's
        after = self.coord_log().split("connected to ")[connected + 1:]
        self.assertTrue(any(a.startswith(self.broker.url + " (session new)") for a in after),
                        "no new session on the new broker: %r" % after)
        fake = self.start_fake(ent, auto=True)
        self.wait_online(ent, True, timeout=15)
        for _ in range(3):  # more than the window's messages: envelope, cancels' room
            job = self.post_job(task, ent)
            self.wait_job(job["ident"], "terminated", timeout=20)
        self.assertTrue(fake.connects >= 1)


class ProxiedTest(MqttTest):
    """The coordinator reaches the broker through an MqttProxy (cls.proxy), which can hold
    back or slow down the PUBACKs of what it publishes."""

    @classmethod
    def coordinator_broker(cls):
        cls.proxy = MqttProxy(cls.broker.port).start()
        cls.addClassCleanup(cls.proxy.stop)
        return cls.proxy.url


class ConnectUnansweredTest(ProxiedTest):
    """The coordinator's first connect attempt gets no CONNACK (the proxy keeps its CONNECT):
    the attempt after it, once the connect timeout (5 s) gave up, is MQTT 3.1.1 as well.
    paho's default version would try 3.1 next, and a 3.1 CONNACK carries no session-present
    flag, which the coordinator reads to know whether the broker kept its session
    (docs/mqtt.md, at its top)."""

    @classmethod
    def coordinator_broker(cls):
        url = super().coordinator_broker()
        cls.proxy.stall_connects = 1
        return url

    def test_every_connect_is_mqtt_3_1_1(self):
        self.assertEqual(self.proxy.stalled, 1)
        # the coordinator's two connections (reports and artifacts): the one unanswered may
        # be either, and the other may connect first
        wait_for(lambda: len(self.proxy.levels) >= 3, timeout=20,
                 what="the connect after the unanswered one")
        self.assertEqual(set(self.proxy.levels), {4}, self.proxy.levels)
        # and the connection it kept works: a job goes out and ends
        task = self.class_task(name="level")
        _, dev = self.online_device("level")
        job = self.post_job(task, dev.entity)
        self.wait_job(job["ident"], "terminated", timeout=20)


class EventFeedStuckTest(ProxiedTest):
    """A broker that takes the devices' reports but acknowledges none of the events the
    coordinator publishes (here a proxy between them withholds those PUBACKs): once the
    window is full of unacknowledged events and the next one finds no room for 2 s, the
    event feed is stuck, and the reports no longer wait for it (events_backlog, docs/mqtt.md
    "Monitoring"): every job ends. Were they held while events wait, each device's reports
    would wait about 2 s per event of the device before (one event given up each 2 s).
    A stop then drops the events still queued rather than wait 2 s for each."""

    coord_args = ("--mqtt-window", "8", "--events-backlog", "2")

    def test_reports_go_on_while_no_event_is_acknowledged(self):
        task = self.class_task(name="stuck")
        devs = [self.online_device("stuck%d" % i, auto=False)[1] for i in range(10)]
        jobs = [self.post_job(task, d.entity)["ident"] for d in devs]
        for d, j in zip(devs, jobs):
            wait_for(lambda: d.envelopes_of(j), what="the envelope")
            self.wait_job(j, "transmited")
        self.proxy.withhold = "/events/"
        started = time.time()
        for d, j in zip(devs, jobs):  # 4 events each: 8 fill the window, then none fits
            for st in ("edge_transmitted", "edge_started", "edge_running"):
                d.report(j, st)
            d.report(j, "terminated", "ok:" + j)
            time.sleep(0.2)
        for j in jobs:
            self.wait_job(j, "terminated", timeout=max(1, 25 - (time.time() - started)))
        self.assertGreaterEqual(self.proxy.withheld, 8)
        wait_for(lambda: "the event feed is stuck" in self.coord_log(), timeout=10,
                 what="the stuck feed in the log")
        # a SIGTERM now, with most of the 40 events still queued, stops at once: they are
        # dropped rather than each given its 2 s in the window (over 60 s before); then the
        # coordinator starts again and serves
        old = self.coord
        t0 = time.monotonic()
        self.assertEqual(old.stop(timeout=120), 0)
        took = time.monotonic() - t0
        self.assertLess(took, 10, "the stop took %.1f s" % took)
        self.proxy.withhold = None
        new = self.replace_coordinator(self.extra_args, db=old.db)
        self.wait_connected(new)
        self.assertEqual(self.admin.get("/jobs/" + jobs[0]).json["status"], "terminated")


class StaleResendWaitsForReportsTest(ProxiedTest):
    """A broker that acknowledges the coordinator's events slowly (a proxy passes their
    PUBACKs on one each 0.7 s, well inside the 2 s after which the feed counts as stuck): the
    devices' reports wait for the event feed (events_backlog) for longer than
    --resend-after. Their jobs have no news in the database all that time, yet the news is
    in the coordinator's own queue: the re-send of jobs without news waits for it
    (docs/mqtt.md, "Delivery guarantees"), and each device gets its envelope once.
    Sent again, every job of a loaded coordinator adds four reports to its load (at 100,000
    devices it re-sent half the fleet).

    How the reports come to wait: the first group's reports fill the event window (4) and
    wait until fewer than 2 events are left, then are applied together, and their events
    (one to four a job) queue behind the window; the second group's reports, sent then, wait
    for all of those, 0.7 s each."""

    coord_args = ("--resend-after", "5", "--mqtt-window", "4", "--events-backlog", "2")

    def report_all(self, dev, job):
        for st in ("edge_transmitted", "edge_started", "edge_running"):
            dev.report(job, st)
        dev.report(job, "terminated", "ok:" + job)

    def test_no_resend_while_reports_wait(self):
        task = self.class_task(name="slowfeed")
        devs = [self.online_device("slowfeed%d" % i, auto=False)[1] for i in range(16)]
        jobs = [self.post_job(task, d.entity)["ident"] for d in devs]
        for d, j in zip(devs, jobs):
            wait_for(lambda: d.envelopes_of(j), what="the envelope")
            self.wait_job(j, "transmited")
        self.proxy.delay = 0.7
        self.proxy.withhold = "/events/"
        first, second = list(zip(devs, jobs))[:8], list(zip(devs, jobs))[8:]
        for d, j in first:
            self.report_all(d, j)
            time.sleep(0.1)
        for _, j in first:
            self.wait_job(j, "terminated", timeout=60)
        started = time.time()
        for d, j in second:
            self.report_all(d, j)
        for _, j in second:
            self.wait_job(j, "terminated", timeout=120)
        took = time.time() - started
        self.proxy.withhold = None
        self.assertGreater(took, 7, "the reports did not wait for the slow event feed")
        self.assertIn("device reports wait for the event feed", self.coord_log())
        time.sleep(1)
        for d, j in zip(devs, jobs):
            self.assertEqual(len(d.envelopes_of(j)), 1, "job %s sent again" % j)
        self.assertNotIn("without news", self.coord_log())


class PresenceAfterRestartTest(MqttTest):
    """A coordinator that starts takes no device for online from its last run (docs/mqtt.md,
    State): without a broker every device is offline; with a broker that knows nothing of
    a device (a new broker without persistence, as tools/run-local.sh starts), that device is
    offline and a job to it is refused as offline instead of being sent into the void; a
    device that publishes its state is online again."""

    def test_presence_is_the_brokers_word_after_a_restart(self):
        task = self.class_task(name="presence")
        stays, _ = self.online_device("stays", auto=True)
        gone, _ = self.online_device("gone", auto=True)
        old = self.coord
        self.assertEqual(old.stop(), 0)
        for fake in self.fakes:
            fake.stop_quietly()
        # no broker: nothing is known
        bare = self.replace_coordinator(db=old.db)
        for dev in (stays, gone):
            self.assertIs(self.admin.get("/devices/" + dev["entity_ident"]).json["online"],
                          False)
        self.assertEqual(bare.stop(), 0)
        # a new, empty broker; only "stays" comes back
        fresh = Mosquitto(self.workdir, persistence=False).start()
        self.addCleanup(fresh.stop)
        new = self.replace_coordinator(("--mqtt", fresh.url), db=old.db)
        self.wait_connected(new)
        d = RecordingDevice(fresh, self.client_root, stays["entity_ident"]).start()
        self.fakes.append(d)
        self.wait_online(stays["entity_ident"], True)
        self.assertIs(self.admin.get("/devices/" + gone["entity_ident"]).json["online"], False)
        r = self.admin.post("/tasks/%s/jobs" % task["ident"],
                            {"entity_ident": gone["entity_ident"]})
        self.assertError(r, 409, "device_offline")
        job = self.post_job(task, stays["entity_ident"])
        self.wait_job(job["ident"], "terminated")


class LateWillTest(MqttTest):
    """A broker cluster can deliver a connection's Last Will after the state of the device's
    next connection (docs/mqtt.md, State): an offline state older than the state applied last
    is not applied; the device's own will (same ts) is, and an online state always is."""

    def test_an_older_offline_state_is_not_applied(self):
        dev = self.class_device("late")["entity_ident"]
        topic = "rcs/v1/%s/%s/state" % (self.client_root, dev)
        c = mqtt.Client(client_id="late-will-test", clean_session=True)
        c.connect("127.0.0.1", self.broker.port, keepalive=10)
        c.loop_start()
        self.addCleanup(c.loop_stop)
        self.addCleanup(c.disconnect)
        t = int(time.time())

        def state(online, ts):
            c.publish(topic, json.dumps({"v": 1, "online": online, "tags": [],
                                         "agent_version": "late", "ts": ts}),
                      qos=1, retain=True).wait_for_publish(5)

        state(True, t)
        self.wait_online(dev, True)
        state(False, t - 5)  # the will of the connection before
        wait_for(lambda: "an offline state of %d not applied" % (t - 5) in self.coord_log(),
                 what="the late will logged")
        self.assertIs(self.admin.get("/devices/" + dev).json["online"], True)
        state(False, t)  # this connection's own will
        self.wait_online(dev, False)
        state(True, t - 100)  # a clock that went back: online all the same
        self.wait_online(dev, True)
        state(False, t - 100)
        self.wait_online(dev, False)


if __name__ == "__main__":
    unittest.main()
