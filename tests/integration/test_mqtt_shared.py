#!/usr/bin/env python3
"""Status reports through a shared subscription (docs/mqtt.md "Several coordinators").

Two coordinators (--node-id n1 and n2) on one PostgreSQL database (pg_server.py) and one
mosquitto. With --mqtt-shared-subscriptions auto both find, by the probe, that
the broker delivers on a shared subscription, connect again with a clean session (so that
one that dies leaves the group at once) and subscribe to reports as
$share/rcs-coordinators/...; a bulk send (by tag) to scripted devices ends with every job
terminated, and each report the devices sent was received by exactly one coordinator: the
coordinators' rcs_mqtt_reports_received_total add up to the reports sent, both received
some, and the (job, seq) pairs their --debug logs show applied are disjoint and together all
of them. Job events still come at QoS 1 (--events-qos's default). Devices that send a job's
four reports at once have them split between the two coordinators and out of order between
them; every job's history still holds all four, in the device's order (docs/coordinator.md,
"Reports as sets": a report waits for the one numbered before it). Both stop cleanly.

Started again with --mqtt-shared-subscriptions no (same node ids; their clean sessions
ended with their connections, so nothing of the shared group is left), each coordinator receives every report of the next bulk send.

A broker that accepts the shared subscription but delivers nothing on it (here: a
mosquitto whose ACL lets no one read the probe's topic, as NATS 2.9 does for any $share/
filter) makes auto settle on the plain subscription, and jobs work.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_mqtt_shared.py
"""

import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
import uuid

import paho.mqtt.client as mqtt

import pg_server
from rcs_harness import Coordinator, FakeDevice, Mosquitto, free_port, wait_for

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")


def note(msg):
    sys.stderr.write("\n[note] %s\n" % msg)


class CountingDevice(FakeDevice):
    """The harness's scripted device, counting the status reports it publishes. It pauses
    before each: until the store applies each (job, seq) once under concurrent coordinators
    (docs/mqtt.md "Several coordinators"), two of them applying consecutive reports of one
    job at the same instant could leave its status behind."""

    PACE = 0.2

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.sent = []  # (job, seq)
        publish = self.client.publish

        def counted(topic, payload=None, qos=0, retain=False, properties=None):
            info = publish(topic, payload, qos, retain)
            if topic.endswith("/status"):
                import json
                r = json.loads(payload)
                with self.lock:
                    self.sent.append((r["job"], r["seq"]))
            return info

        self.client.publish = counted

    def _on_message(self, client, userdata, msg):
        # answered from a thread of its own: paho sends what its callback publishes only
        # once the callback returned, which would undo the pauses
        threading.Thread(target=super()._on_message, args=(client, userdata, msg),
                         daemon=True).start()

    def report(self, job, status, response=None, seq=None):
        time.sleep(self.PACE)
        return super().report(job, status, response, seq)

    def reports(self):
        with self.lock:
            return list(self.sent)


class EventQos:
    """Records the QoS of the job events a QoS 1 subscription receives."""

    def __init__(self, broker, topic_filter):
        self.qos = []
        self.lock = threading.Lock()
        ready = threading.Event()
        self.c = mqtt.Client(client_id="ev-" + uuid.uuid4().hex[:12], clean_session=True)
        self.c.on_connect = lambda c, u, f, rc: c.subscribe(topic_filter, 1)
        self.c.on_subscribe = lambda *a: ready.set()
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", broker.port, keepalive=10)
        self.c.loop_start()
        if not ready.wait(10):
            raise AssertionError("no SUBACK")

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.qos.append(msg.qos)

    def levels(self):
        with self.lock:
            return list(self.qos)

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


class Node:
    """One coordinator of several: its node id and metrics port."""

    def __init__(self, workdir, db, broker, node_id, extra=()):
        self.metrics_port = free_port()
        self.node_id = node_id
        self.coord = Coordinator(workdir, db=db, extra_args=[
            "--mqtt", broker.url, "--node-id", node_id, "--debug",
            "--metrics-listen", "127.0.0.1:%d" % self.metrics_port, *extra])

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            text = r.read().decode()
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else None

    def applied(self):
        """(job, seq) of the reports this coordinator's --debug log shows it handled."""
        with open(self.coord.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        return set((j, int(s)) for j, s in
                   re.findall(r"job ([0-9a-f-]{36}): \w+ \(seq (\d+)\) (?:applied|ignored)",
                              text))


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class SharedSubscriptionTest(unittest.TestCase):
    DEVICES = 6
    FAST = 16  # devices that send a job's reports without a pause
    DEVICE_STATUSES = ["edge_transmitted", "edge_started", "edge_running", "terminated"]

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="rcs-shared-")
        cls.nodes = []
        cls.devices = []
        cls.fast = []
        cls.broker = None
        cls.addClassCleanup(cls._cleanup)
        cls.broker = Mosquitto(cls.workdir).start()
        cls.db = pg_server.shared().create_db()
        first = cls.start_nodes(("--mqtt-shared-subscriptions", "auto"))
        tenant = first[0].coord.init_tenant(user="admin")
        cls.client_root = tenant["client_root"]
        cls.key = tenant["api_key"]
        for n in first:
            n.coord.start()
        cls.admin = first[0].coord.api(cls.key)
        cls.task = cls.admin.post("/tasks", {"name": "shared", "script": "echo"}).json
        cls.tag = cls.add_devices("shared", cls.DEVICES, CountingDevice, cls.devices)
        cls.fast_tag = cls.add_devices("fast", cls.FAST, FakeDevice, cls.fast)

    @classmethod
    def add_devices(cls, name, n, kind, into):
        """n devices of kind (started) with a new tag of their own, which it returns."""
        tag = "%s-%s" % (name, uuid.uuid4().hex[:8])
        for i in range(n):
            r = cls.admin.post("/devices", {"name": "%s%d" % (name, i), "tags": [tag]})
            assert r.status == 201, r
            d = kind(cls.broker, cls.client_root, r.json["entity_ident"])
            into.append(d)
            d.start()
        return tag

    @classmethod
    def start_nodes(cls, extra):
        """Two coordinators on the test's database, not started yet."""
        nodes = [Node(cls.workdir, cls.db, cls.broker, n, extra) for n in ("n1", "n2")]
        cls.nodes += nodes
        return nodes

    @classmethod
    def _cleanup(cls):
        for d in cls.devices + cls.fast:
            try:
                d.client.loop_stop()
            except Exception:
                pass
        for n in cls.nodes:
            if n.coord.proc is not None:
                n.coord.stop(signal.SIGKILL)
        if cls.broker is not None:
            cls.broker.stop()
        if os.environ.get("RCS_KEEP_TMP") is None:
            shutil.rmtree(cls.workdir, ignore_errors=True)
        else:
            note("kept %s" % cls.workdir)

    def sent(self):
        out = []
        for d in self.devices:
            out += d.reports()
        return out

    def bulk_send(self, admin, until_terminated=True):
        """A send to every device by tag; waits for every job to end (or for the devices'
        final reports); returns the jobs (their idents)."""
        r = admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": self.tag})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(len(r.json["items"]), self.DEVICES, r.json)
        idents = [j["ident"] for j in r.json["items"]]
        if not until_terminated:
            return wait_for(lambda: all(any(j in d.final for d in self.devices)
                                        for j in idents) and idents, timeout=60,
                            what="the devices' final reports")
        jobs = wait_for(lambda: (lambda js: all(j["status"] in TERMINAL for j in js) and js)(
            [admin.get("/jobs/" + i).json for i in idents]), timeout=60,
            what="every job of the send ended")
        self.assertEqual({j["status"] for j in jobs}, {"terminated"},
                         [(j["ident"], j["status"]) for j in jobs])
        return jobs

    def wait_received(self, nodes, total, each):
        """Waits until the nodes' report counters add up (each: every node got all)."""
        def counts():
            c = [n.metric("rcs_mqtt_reports_received_total") for n in nodes]
            ok = all(x == total for x in c) if each else sum(c) == total
            return ok and c
        got = wait_for(counts, timeout=30, what="reports counted (%d sent)" % total)
        time.sleep(0.5)  # nothing more comes
        self.assertEqual([n.metric("rcs_mqtt_reports_received_total") for n in nodes], got)
        return got

    def check_histories_in_order(self, n1, n2):
        """Sends to the devices that report without pausing: a job's four reports go to
        either coordinator, message by message, and come to them out of order; each job's
        history holds every report, in seq order."""
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": self.fast_tag})
        self.assertEqual(r.status, 201, r)
        idents = [j["ident"] for j in r.json["items"]]
        self.assertEqual(len(idents), self.FAST)
        wait_for(lambda: all(self.admin.get("/jobs/" + i).json["status"] == "terminated"
                             for i in idents), timeout=60, what="the fast devices' jobs ended")
        split = 0
        a1, a2 = n1.applied(), n2.applied()
        for i in idents:
            items = self.admin.get("/jobs/%s/history?per_page=100" % i).json["items"]
            got = [h["status"] for h in reversed(items) if h["status"] in self.DEVICE_STATUSES]
            self.assertEqual(got, self.DEVICE_STATUSES, "job %s: history %r" % (
                i, [h["status"] for h in reversed(items)]))
            split += len({(i, k) for k in range(1, 5)} & a1) not in (0, 4)
        self.assertEqual({(i, k) for i in idents for k in range(1, 5)} - (a1 | a2), set())
        note("in order: %d jobs, %d of them with reports on both coordinators" % (
            len(idents), split))
        self.assertGreater(split, 0, "no job had its reports split between the coordinators")

    def test_a_shared_then_plain(self):
        n1, n2 = self.nodes[:2]
        for n in (n1, n2):
            wait_for(lambda: "status reports: shared subscription $share/rcs-coordinators/"
                     "rcs/v1/+/+/jobs/+/status (the broker delivered the probe)"
                     in n.coord.read_log(), timeout=20,
                     what="node %s on the shared subscription" % n.node_id)
            self.assertEqual(n.metric("rcs_mqtt_shared_subscription"), 1)
            self.assertIn("reconnecting with a clean session", n.coord.read_log())
        events = EventQos(self.broker, "rcs/v1/%s/events/#" % self.client_root)
        try:
            before = len(self.sent())
            for _ in range(2):
                self.bulk_send(self.admin)
            sent = self.sent()[before:]
            wait_for(lambda: events.levels(), what="job events")
            self.assertEqual(set(events.levels()), {1}, "events QoS (default 1)")
        finally:
            events.close()
        got = self.wait_received((n1, n2), len(sent), each=False)
        self.assertTrue(all(g > 0 for g in got), "reports not split: %r" % got)
        a1, a2 = n1.applied(), n2.applied()
        self.assertEqual(a1 & a2, set(), "reports received by both coordinators")
        self.assertEqual(a1 | a2, set(sent))
        note("shared: %d reports, received %r" % (len(sent), got))
        self.check_histories_in_order(n1, n2)
        for n in (n1, n2):
            self.assertEqual(n.coord.stop(), 0, n.coord.read_log())

        # the same nodes (their clean sessions ended with them) with shared subscriptions off
        m1, m2 = self.start_nodes(("--mqtt-shared-subscriptions", "no"))
        for n in (m1, m2):
            n.coord.start()
            wait_for(lambda: "status reports: plain subscription rcs/v1/+/+/jobs/+/status "
                     "(mqtt_shared_subscriptions no)" in n.coord.read_log(), timeout=20,
                     what="node %s on the plain subscription" % n.node_id)
            self.assertEqual(n.metric("rcs_mqtt_shared_subscription"), 0)
        # (both apply every report: the statuses are the store's business, not checked)
        before = len(self.sent())
        self.bulk_send(m2.coord.api(self.key), until_terminated=False)
        sent = self.sent()[before:]
        got = self.wait_received((m1, m2), len(sent), each=True)
        note("plain: %d reports, received %r" % (len(sent), got))
        for n in (m1, m2):
            self.assertEqual(n.coord.stop(), 0, n.coord.read_log())


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class ProbeNotDeliveredTest(unittest.TestCase):
    """auto on a broker that takes the shared subscription but delivers nothing on it (a
    coordinator on PostgreSQL: auto probes only on a database shared with others)."""

    def test_auto_falls_back_to_plain(self):
        w = tempfile.mkdtemp(prefix="rcs-shared-acl-")
        acl = os.path.join(w, "acl")
        with open(acl, "w") as f:
            # anonymous clients: the protocol's topics, not the probe's
            f.write("topic readwrite rcs/v1/+/+/jobs/#\n"
                    "topic readwrite rcs/v1/+/+/state\n"
                    "topic readwrite rcs/v1/+/events/#\n")
        broker = Mosquitto(w, extra_conf="acl_file %s\n" % acl).start()
        coord = Coordinator(w, db=pg_server.shared().create_db(), extra_args=[
            "--mqtt", broker.url, "--node-id", "n1", "--mqtt-shared-subscriptions", "auto"])
        dev = None
        try:
            tenant = coord.init_tenant(user="admin")
            coord.start()
            wait_for(lambda: "status reports: plain subscription rcs/v1/+/+/jobs/+/status (the "
                     "broker did not deliver the probe on a shared subscription within 5 s)"
                     in coord.read_log(), timeout=30, what="auto settled on plain")
            admin = coord.api(tenant["api_key"])
            task = admin.post("/tasks", {"name": "t", "script": "echo"}).json
            r = admin.post("/devices", {"name": "d", "tags": []})
            dev = FakeDevice(broker, tenant["client_root"], r.json["entity_ident"]).start()
            wait_for(lambda: admin.get("/devices/" + r.json["entity_ident"]).json["online"],
                     what="device online")
            j = admin.post("/tasks/%s/jobs" % task["ident"],
                           {"entity_ident": r.json["entity_ident"]}).json
            wait_for(lambda: admin.get("/jobs/" + j["ident"]).json["status"] == "terminated",
                     timeout=20, what="the job terminated")
            self.assertEqual(coord.stop(), 0, coord.read_log())
        finally:
            if dev is not None:
                dev.client.loop_stop()
            if coord.proc is not None:
                coord.stop(signal.SIGKILL)
            broker.stop()
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
