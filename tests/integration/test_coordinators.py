#!/usr/bin/env python3
"""Integration tests of several coordinators on one PostgreSQL database (docs/scale-out.md,
"Several coordinators on PostgreSQL"; docs/architecture.md, "Claims"): a PostgreSQL made
with initdb (pg_server.py), one real mosquitto, two real rcs-coordinators on it with their
own --node-id and HTTP port and --lease 3, a real SMTP server (the harness's SmtpServer), a
real HTTP receiver of webhooks, and a fleet of scripted devices on one MQTT connection that
record every envelope and every job they run.

Checked: a task made through one coordinator is served by the other (its job sent and
finished); scheduled jobs fire once with both running (one envelope per job and device: the
60 s re-send is set out of the way with --resend-after); e-mails and webhook deliveries of
jobs go out once with both running; kill -9 of one coordinator halfway through a bulk send
to 200 devices: every job reaches one terminal status through the other within the lease
and a few seconds, its history holds each status once, and no device runs a job twice; a
retried group send makes one retry per failed job, released and sent once; cancels racing
the devices' reports leave each status once in a job's history. OppositeOrdersTest: each
coordinator on a broker of its own, the same reports reaching them in opposite orders: no
deadlock between their report transactions, the group's tallies count each job once.
BusyRetryTest: a status report and a state message whose write PostgreSQL breaks off (a lock
wait cut short) are applied again, not dropped. ClockSkewTest: a coordinator whose clock is
off the database server's (libfaketime) warns at its start. RecoverAfterReconnectTest: the
in-flight jobs are sent again after a reconnect lost the clean session of the shared
subscription.

Skipped without PostgreSQL's server (tools/deps.sh test installs it).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_coordinators.py
"""

import http.server
import json
import os
import random
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import paho.mqtt.client as mqtt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pg_server  # noqa: E402
from mqtt_proxy import MqttProxy  # noqa: E402
from rcs_harness import (Coordinator, Mosquitto, SmtpServer, free_port, wait_for,  # noqa: E402
                         with_query)

LEASE = 3
FROM = "rcs@coordinators.test"
TERMINAL = ("terminated", "edge_error", "cancelled", "expired")


class Fleet:
    """Scripted devices on one MQTT connection: each envelope is recorded; a job seen for
    the first time is run (recorded in runs) and answered edge_transmitted ... terminated
    after a delay (0 to max_delay s); a repeat of a finished job gets the final report again,
    a repeat of one running is dropped (it runs once)."""

    STEPS = ("edge_transmitted", "edge_started", "edge_running")

    def __init__(self, broker, client_root, entities, max_delay=0.0, fail_first=False,
                 steps=STEPS):
        self.fail_first = fail_first  # a device's first job ends edge_error (script_error)
        self.steps = steps  # the reports before the final one
        self.client_root = client_root
        self.entities = set(entities)
        self.max_delay = max_delay
        self.envelopes = {}  # entity -> [job, ...] as received
        self.runs = {}  # entity -> [job, ...] run
        self.final = {}
        self.timers = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.broker = broker
        self.client = mqtt.Client(client_id="fleet-" + uuid.uuid4().hex[:12],
                                  clean_session=True)
        self.client.max_inflight_messages_set(1000)
        self.client.on_connect = lambda c, u, f, rc: c.subscribe(
            "rcs/v1/%s/+/jobs/+" % client_root, 1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message

    def start(self):
        self.client.connect("127.0.0.1", self.broker.port, keepalive=10)
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise AssertionError("fleet did not subscribe")
        infos = [self.client.publish(
            "rcs/v1/%s/%s/state" % (self.client_root, e),
            json.dumps({"v": 1, "online": True, "tags": [], "agent_version": "fleet",
                        "ts": int(time.time())}), qos=1, retain=True)
            for e in self.entities]
        for i in infos:
            i.wait_for_publish(10)
        return self

    def stop(self):
        with self.lock:
            timers, self.timers = self.timers, []
        for t in timers:
            t.cancel()
        self.client.disconnect()
        self.client.loop_stop()

    def _on_message(self, client, userdata, msg):
        parts = msg.topic.split("/")
        if len(parts) != 6 or parts[3] not in self.entities:
            return
        env = json.loads(msg.payload)
        job, ent = env["job"], parts[3]
        with self.lock:
            self.envelopes.setdefault(ent, []).append(job)
            ran = job in self.runs.get(ent, [])
            if not ran:
                self.runs.setdefault(ent, []).append(job)
            final = self.final.get(job)
        if ran:
            if final:
                self.client.publish(self._topic(ent, job), final, qos=1)
            return
        delay = random.uniform(0, self.max_delay) if self.max_delay > 0 else 0
        if delay == 0:
            self._answer(ent, job)
            return
        t = threading.Timer(delay, self._answer, (ent, job))
        t.daemon = True
        with self.lock:
            self.timers.append(t)
        t.start()

    def _topic(self, ent, job):
        return "rcs/v1/%s/%s/jobs/%s/status" % (self.client_root, ent, job)

    def _answer(self, ent, job):
        payload = None
        with self.lock:
            fail = self.fail_first and self.runs.get(ent, [None])[0] == job
        end = "edge_error" if fail else "terminated"
        for seq, st in enumerate(self.steps + (end,), 1):
            msg = {"v": 1, "job": job, "status": st, "seq": seq, "ts": int(time.time()),
                   "response": "ok:" + job if st == "terminated" else None}
            if st == "edge_error":
                msg.update(response="failed", error="script_error")
            payload = json.dumps(msg)
            self.client.publish(self._topic(ent, job), payload, qos=1)
        with self.lock:
            self.final[job] = payload

    def received(self, ent):
        with self.lock:
            return list(self.envelopes.get(ent, []))

    def ran(self, ent):
        with self.lock:
            return list(self.runs.get(ent, []))


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POSTed body and answers 200."""

    def __init__(self):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/hook" % self.port
        self.bodies = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n))
                with outer.lock:
                    outer.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def of_jobs(self, jobs):
        with self.lock:
            return [b for b in self.bodies if b.get("data", {}).get("ident") in jobs]


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class TwoCoordinatorsTest(unittest.TestCase):
    # how the coordinators take the status reports (docs/mqtt.md "Several coordinators")
    """PostgreSQL, one mosquitto, SMTP and webhook receivers, coordinators a and b."""
    SHARED = "no"
    LEASE = LEASE

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="rcs-coords-")
        cls.coords = []
        cls.fleets = []
        cls.broker = cls.smtp = cls.recv = None
        cls.addClassCleanup(cls._cleanup)
        cls.db = pg_server.shared().create_db()
        cls.broker = Mosquitto(cls.workdir).start()
        cls.smtp = SmtpServer().start()
        cls.recv = Receiver()
        for node in ("node-a", "node-b"):
            c = Coordinator(cls.workdir, db=cls.db, extra_args=(
                "--node-id", node, "--lease", str(cls.LEASE), "--mqtt", cls.broker.url,
                "--resend-after", "3600", "--smtp-url", cls.smtp.url, "--smtp-from", FROM,
                "--webhook-allow-net", "127.0.0.1/32", "--webhook-retry-base", "1",
                "--mqtt-shared-subscriptions", cls.SHARED))
            cls.coords.append(c)
        tenant = cls.coords[0].init_tenant(user="admin")
        cls.client_root = tenant["client_root"]
        for c in cls.coords:
            c.start()
        cls.a, cls.b = (c.api(tenant["api_key"]) for c in cls.coords)
        for c in cls.coords:
            wait_for(lambda c=c: "status reports: " in c.read_log(), timeout=20,
                     what="coordinator connected to the broker")
        if cls.SHARED != "no":
            # the probe passed and the clean session took the shared subscription
            for c in cls.coords:
                wait_for(lambda c=c: "status reports: shared subscription" in c.read_log(),
                         timeout=30, what="the shared subscription taken")

    @classmethod
    def tearDownClass(cls):
        # the coordinators still running stop cleanly (their claims given up)
        for f in cls.fleets:
            f.stop()
        cls.fleets = []
        for c in cls.coords:
            if c.proc is not None and c.alive():
                log = c.read_log()[-3000:]
                rc = c.stop()
                if rc != 0:
                    raise AssertionError("coordinator exited with %r on SIGTERM:\n%s" % (
                        rc, log))

    @classmethod
    def _cleanup(cls):
        for f in cls.fleets:
            f.stop()
        for c in cls.coords:
            if c.proc is not None:
                c.stop(signal.SIGKILL)
        for x in (cls.broker, cls.smtp, cls.recv):
            if x is not None:
                x.stop()
        if os.environ.get("RCS_KEEP_TMP") is None:
            shutil.rmtree(cls.workdir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    def devices(self, prefix, n, max_delay=0.0, fail_first=False, steps=Fleet.STEPS):
        ents = []
        for i in range(n):
            api = self.a if i % 2 == 0 else self.b
            r = api.post("/devices", {"name": "%s%d" % (prefix, i), "tags": [prefix]})
            self.assertEqual(r.status, 201, r.raw)
            ents.append(r.json["entity_ident"])
        fleet = Fleet(self.broker, self.client_root, ents, max_delay=max_delay,
                      fail_first=fail_first, steps=steps).start()
        self.fleets.append(fleet)
        wait_for(lambda: self.b.get(with_query("/devices", tag=prefix, online="true",
                                               per_page=1)).json["total_items"] == n,
                 timeout=30, what="the devices online")
        return ents, fleet

    def task(self, api, name, **fields):
        body = {"name": name, "script": "echo"}
        body.update(fields)
        r = api.post("/tasks", body)
        self.assertEqual(r.status, 201, r.raw)
        return r.json

    def sql(self, query):
        return pg_server.shared().psql(query, db=self.db.rsplit("/", 1)[1])

    def job(self, api, ident):
        r = api.get("/jobs/" + ident)
        self.assertEqual(r.status, 200, r.raw)
        return r.json

    def wait_terminal(self, api, idents, timeout):
        left = set(idents)

        def check():
            for j in list(left):
                if self.job(api, j)["status"] in TERMINAL:
                    left.discard(j)
            return not left
        try:
            wait_for(check, timeout=timeout, interval=0.25,
                     what="%d jobs terminal" % len(idents))
        except AssertionError as e:
            # what is left, as the database has it, and what the coordinators said
            rows = self.sql("SELECT ident, status, claimed_by, lease_until, sent_at FROM jobs"
                            " WHERE ident IN (%s) ORDER BY ident" %
                            ",".join("'%s'" % j for j in sorted(left)))
            logs = "".join("\n--- %s:\n%s" % (c.log_path, "\n".join(
                l for l in c.read_log().splitlines() if "is online" not in l)[-6000:])
                for c in self.coords)
            raise AssertionError("%s: %d left (ident|status|claimed_by|lease_until|sent_at,"
                                 " now %d):\n%s%s" % (e, len(left), time.time(), rows,
                                                       logs)) from None

    def assertOnceEach(self, api, ident):
        """The job's history holds each status once, one of them terminal."""
        r = api.get(with_query("/jobs/%s/history" % ident, per_page=500))
        self.assertEqual(r.status, 200, r.raw)
        statuses = [h["status"] for h in r.json["items"]]
        self.assertEqual(len(statuses), len(set(statuses)), "%s: %r" % (ident, statuses))
        self.assertEqual(len([s for s in statuses if s in TERMINAL]), 1, statuses)

    # -- tests ----------------------------------------------------------------------------

    def test_a_task_of_one_served_by_the_other(self):
        ents, fleet = self.devices("cross", 1)
        task = self.task(self.a, "made on a")
        r = self.b.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": ents[0]})
        self.assertEqual(r.status, 201, r.raw)
        ident = r.json["ident"]
        self.wait_terminal(self.a, [ident], 15)
        self.assertEqual(self.job(self.a, ident)["status"], "terminated")
        self.assertEqual(fleet.received(ents[0]), [ident])
        self.assertOnceEach(self.b, ident)
        # each coordinator LISTENs on a connection of its own
        wait_for(lambda: self.sql("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                  " current_database() AND query = 'LISTEN rcs_work'"
                                  ).strip() == "2", timeout=10, what="two LISTEN connections")
        # and connects again when it is lost
        self.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
                 " current_database() AND query = 'LISTEN rcs_work'")
        wait_for(lambda: self.sql("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                  " current_database() AND query = 'LISTEN rcs_work'"
                                  ).strip() == "2", timeout=15,
                 what="two LISTEN connections again")
        # the sender's claim ended with the broker's acknowledgement
        wait_for(lambda: self.sql("SELECT count(*) FROM jobs WHERE ident = '%s' AND"
                                  " claimed_by IS NULL" % ident).strip() == "1",
                 timeout=10, what="the claim ended")

    def test_b_scheduled_jobs_fire_once(self):
        n = 20
        ents, fleet = self.devices("sched", n)
        task = self.task(self.b, "scheduled")
        at = int(time.time()) + 4
        jobs = []
        for i, e in enumerate(ents):
            api = self.a if i % 2 else self.b
            r = api.post("/tasks/%s/jobs" % task["ident"],
                         {"entity_ident": e, "scheduled_time": at})
            self.assertEqual(r.status, 201, r.raw)
            self.assertEqual(r.json["status"], "pending")
            jobs.append(r.json["ident"])
        self.wait_terminal(self.a, jobs, 30)
        time.sleep(self.LEASE + 1)  # a second sender would have sent by now
        for e, j in zip(ents, jobs):
            self.assertEqual(fleet.received(e), [j], "one envelope per job and device")
            self.assertEqual(self.job(self.b, j)["status"], "terminated")
            self.assertOnceEach(self.a, j)

    def test_c_mails_and_webhooks_once(self):
        n = 10
        ents, fleet = self.devices("mail", n)
        r = self.a.post("/webhooks", {"url": self.recv.url, "events": ["job.status"],
                                      "statuses": ["terminated"]})
        self.assertEqual(r.status, 201, r.raw)
        hook = r.json["ident"]
        task = self.task(self.a, "mailed", notification_mail_list=["ops@coordinators.test"],
                         notification_status_list=["terminated"])
        r = self.b.post("/tasks/%s/jobs/list" % task["ident"], {"ident_list": ents})
        self.assertEqual(r.status, 201, r.raw)
        jobs = [j["ident"] for j in r.json["items"]]
        self.assertEqual(len(jobs), n)
        self.wait_terminal(self.b, jobs, 30)
        self.smtp.wait_messages(n, lambda m: any(j in m.body for j in jobs), timeout=30)
        wait_for(lambda: len(self.recv.of_jobs(set(jobs))) >= n, timeout=30,
                 what="webhook deliveries")
        time.sleep(self.LEASE + 2)  # a second sender would have sent by now
        for j in jobs:
            mails = self.smtp.received(lambda m, j=j: j in m.body)
            self.assertEqual(len(mails), 1, "one mail for job %s" % j)
            # one delivery per job; delivery is at least once (docs/api.md "Webhooks"): on
            # a machine loaded past the 3 s lease, the other node may send the same
            # delivery again, under the same id, which receivers dedupe by
            hits = self.recv.of_jobs({j})
            self.assertEqual(len({h["id"] for h in hits}), 1,
                             "one delivery for job %s: %r" % (j, hits))
            self.assertTrue(all(h == hits[0] for h in hits), "the same delivery: %r" % hits)
        self.a.delete("/webhooks/" + hook)

    def test_d_retries_once(self):
        n = 10
        ents, fleet = self.devices("retry", n, fail_first=True)
        task = self.task(self.a, "retried")
        r = self.b.post("/tasks/%s/jobs/list" % task["ident"],
                        {"ident_list": ents, "retry": {"max_attempts": 3, "backoff_s": 1}})
        self.assertEqual(r.status, 201, r.raw)
        group = r.json["group"]["ident"]
        wait_for(lambda: self.a.get("/groups/" + group).json["status"] == "completed",
                 timeout=30, what="the group completed")
        time.sleep(self.LEASE + 1)  # a second release or retry would have come by now
        jobs = [j for j in self.a.get(with_query("/jobs", group_ident=group,
                                                 per_page=100)).json["items"]]
        self.assertEqual(len(jobs), 2 * n, "one retry per device: %r" % [
            (j["entity_ident"], j["attempt"], j["status"]) for j in jobs])
        for e in ents:
            mine = sorted((j["attempt"], j["status"]) for j in jobs if j["entity_ident"] == e)
            self.assertEqual(mine, [(1, "edge_error"), (2, "terminated")])
            self.assertEqual(len(fleet.received(e)), 2, "one envelope per attempt")

    def test_e_cancels_racing_reports(self):
        n = 20
        ents, fleet = self.devices("race", n, max_delay=1.0)
        task = self.task(self.a, "raced")
        r = self.a.post("/tasks/%s/jobs/list" % task["ident"], {"ident_list": ents})
        self.assertEqual(r.status, 201, r.raw)
        jobs = [j["ident"] for j in r.json["items"]]
        wait_for(lambda: all(fleet.received(e) for e in ents), timeout=20, what="envelopes")
        for i, j in enumerate(jobs):
            time.sleep(random.uniform(0, 0.08))
            api = self.a if i % 2 else self.b
            c = api.patch("/jobs/%s/cancel" % j)
            self.assertIn(c.status, (200, 409), c.raw)
        self.wait_terminal(self.a, jobs, 30)
        time.sleep(2)  # the reports still on their way arrive
        for j in jobs:
            self.assertIn(self.job(self.b, j)["status"], ("cancelled", "terminated"))
            h = self.b.get(with_query("/jobs/%s/history" % j, per_page=500)).json["items"]
            statuses = [x["status"] for x in h]
            self.assertEqual(len(statuses), len(set(statuses)), "%s: %r" % (j, statuses))
        for e in ents:
            self.assertEqual(len(fleet.ran(e)), 1)

    def test_z_kill9_halfway_through_a_bulk_send(self):
        n = 200
        ents, fleet = self.devices("bulk", n, max_delay=3.0)
        task = self.task(self.a, "bulk")
        # b held still (SIGSTOP) while a sends, so that a holds the claims when it dies
        # (plain: b's MQTT session keeps the reports for it meanwhile; shared: a's clean
        # session ends with its connection, b takes every report from then on, and sends
        # the jobs in flight again once a's sign of life lapsed, for the reports a lost)
        b = self.coords[1]
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            r = self.a.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": ents, "group_name": "half"})
            self.assertEqual(r.status, 201, r.raw)
            jobs = {j["entity_ident"]: j["ident"] for j in r.json["items"]}
            self.assertEqual(len(jobs), n)
            # halfway: the first envelopes arrived, most jobs not finished (the devices
            # take up to 3 s)
            wait_for(lambda: any(fleet.received(e) for e in ents), timeout=20,
                     interval=0.005, what="the first envelopes")
            os.kill(self.coords[0].proc.pid, signal.SIGKILL)
            self.coords[0].proc.wait()
            killed = time.time()
            state = self.sql(
                "SELECT status, claimed_by IS NOT NULL, count(*) FROM jobs WHERE group_ident"
                " = '%s' GROUP BY 1, 2 ORDER BY 1, 2" % r.json["group"]["ident"])
            print("kill -9 of node-a; its jobs (status|claimed|count):\n" + state,
                  file=sys.stderr)
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        # no 60 s re-send (--resend-after 3600): the lease and a few seconds
        self.wait_terminal(self.b, list(jobs.values()), self.LEASE + 20)
        print("all terminal %.1f s after the kill" % (time.time() - killed), file=sys.stderr)
        for e in ents:
            self.assertEqual(fleet.ran(e), [jobs[e]], "device %s ran its job once" % e)
            self.assertEqual(self.job(self.b, jobs[e])["status"], "terminated")
        for e in ents[::10]:
            self.assertOnceEach(self.b, jobs[e])
        self.assertTrue(b.alive())


class TwoCoordinatorsSharedTest(TwoCoordinatorsTest):
    """The same with the status reports through the shared subscription (clean sessions),
    and a coordinator that died started again under its node id."""
    SHARED = "auto"
    LEASE = 10  # test_y: a's restart well within it

    def test_y_node_started_again_after_dying(self):
        # a's clean session is in the share group: the reports the broker hands to a while
        # it is held still (SIGSTOP) die with it (kill -9). a started again under its node
        # id, before its sign of life lapsed for b, finds its row of the last run and sends
        # the in-flight jobs again; the devices answer with their final reports.
        n = 40
        # three reports per job: the broker, handing them out in turn, gives a the final
        # one of every other job (with four, b would get every final one)
        ents, fleet = self.devices("again", n, steps=("edge_transmitted", "edge_started"))
        task = self.task(self.b, "again")
        a = self.coords[0]
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            r = self.b.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": ents, "group_name": "again"})
            self.assertEqual(r.status, 201, r.raw)
            jobs = {j["entity_ident"]: j["ident"] for j in r.json["items"]}
            wait_for(lambda: all(fleet.ran(e) for e in ents), timeout=20,
                     what="every device ran its job")
            # their reports handed out by the broker, some to a
            wait_for(lambda: sum(self.job(self.b, jobs[e])["status"] in TERMINAL
                                 for e in ents[:5]) >= 1, timeout=10, what="reports to b")
            time.sleep(0.5)
        finally:
            os.kill(a.proc.pid, signal.SIGKILL)
            a.proc.wait()
            a.stop()
        open_jobs = [j for j in jobs.values() if self.job(self.b, j)["status"] not in TERMINAL]
        print("kill -9 of node-a: %d of %d jobs without their final report" %
              (len(open_jobs), n), file=sys.stderr)
        self.assertTrue(open_jobs, "no report went to a: nothing to recover")
        a.start()
        self.assertLess(time.time() - stopped, self.LEASE - 2,
                        "node-a was away about its lease: b would take over")
        wait_for(lambda: "previous clean session were lost" in a.read_log(), timeout=30,
                 what="node-a recovering:\n" + a.read_log()[-3000:])
        self.wait_terminal(self.b, list(jobs.values()), 30)
        for e in ents:
            self.assertEqual(fleet.ran(e), [jobs[e]], "device %s ran its job once" % e)
            self.assertEqual(self.job(self.b, jobs[e])["status"], "terminated")
        self.assertNotIn("stopped showing signs of life", self.coords[1].read_log())
        wait_for(lambda: "status reports: shared subscription" in a.read_log(), timeout=30,
                 what="node-a on the shared subscription again")


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class OppositeOrdersTest(unittest.TestCase):
    """Two coordinators on one PostgreSQL database, each on a broker of its own, and devices
    that report on both brokers, in opposite orders: coordinator a gets the reports of the
    jobs in ascending order, b in descending, both in bursts. Each applies every report (the
    job's row locked by its move, the group's row by the tallies of a job that ended);
    neither may wait for the other in a deadlock (PostgreSQL would break it after its
    deadlock_timeout, 1 s a time, and the reports would crawl), and the group's tallies
    count every job once."""

    N = 40

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="rcs-orders-")
        self.coords, self.clients, self.brokers = [], [], []
        self.addCleanup(self._cleanup)
        db = pg_server.shared().create_db()
        for node in ("order-a", "order-b"):
            broker = Mosquitto(self.workdir).start()
            self.brokers.append(broker)
            self.coords.append(Coordinator(self.workdir, db=db, extra_args=(
                "--node-id", node, "--lease", str(LEASE), "--mqtt", broker.url,
                "--resend-after", "3600", "--mqtt-shared-subscriptions", "no")))
        tenant = self.coords[0].init_tenant(user="admin")
        self.root = tenant["client_root"]
        for c in self.coords:
            c.start()
        for c in self.coords:
            wait_for(lambda c=c: "status reports: " in c.read_log(), timeout=20,
                     what="coordinator connected to its broker")
        self.api = self.coords[0].api(tenant["api_key"])

    def _cleanup(self):
        for cl in self.clients:
            cl.disconnect()
            cl.loop_stop()
        for c in self.coords:
            if c.proc is not None:
                c.stop(signal.SIGKILL)
        for b in self.brokers:
            b.stop()
        if os.environ.get("RCS_KEEP_TMP") is None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def test_reports_in_opposite_orders(self):
        ents = []
        for i in range(self.N):
            r = self.api.post("/devices", {"name": "o%d" % i, "tags": ["o"]})
            self.assertEqual(r.status, 201, r.raw)
            ents.append(r.json["entity_ident"])
        envelopes = {}
        lock = threading.Lock()
        for b in self.brokers:
            cl = mqtt.Client(client_id="orders-" + uuid.uuid4().hex[:12], clean_session=True)
            cl.max_inflight_messages_set(1000)
            ready = threading.Event()
            cl.on_connect = lambda c, u, f, rc: c.subscribe("rcs/v1/%s/+/jobs/+" % self.root, 1)
            cl.on_subscribe = lambda *a, ev=ready: ev.set()

            def on_message(c, u, msg):
                parts = msg.topic.split("/")
                if parts[3] == "events":
                    return  # rcs/v1/<root>/events/jobs/<job>: a job event, no envelope
                with lock:
                    envelopes[parts[5]] = parts[3]
            cl.on_message = on_message
            cl.connect("127.0.0.1", b.port, keepalive=10)
            cl.loop_start()
            self.assertTrue(ready.wait(10))
            self.clients.append(cl)
            for e in ents:
                cl.publish("rcs/v1/%s/%s/state" % (self.root, e), json.dumps(
                    {"v": 1, "online": True, "tags": [], "agent_version": "orders",
                     "ts": int(time.time())}), qos=1, retain=True).wait_for_publish(10)
        for c in self.coords:
            api = c.api(self.api.key)
            wait_for(lambda api=api: api.get(with_query(
                "/devices", tag="o", online="true", per_page=1)).json["total_items"] == self.N,
                timeout=30, what="the devices online")
        task = self.api.post("/tasks", {"name": "orders", "script": "echo"}).json
        marks = [os.path.getsize(c.log_path) for c in self.coords]
        r = self.api.post("/tasks/%s/jobs/list" % task["ident"],
                          {"ident_list": ents, "group_name": "orders"})
        self.assertEqual(r.status, 201, r.raw)
        jobs = sorted(j["ident"] for j in r.json["items"])
        wait_for(lambda: len(envelopes) == self.N, timeout=30, what="every envelope")
        # every report of every job, a's broker ascending, b's descending, at once
        bursts = []
        for cl, order in ((self.clients[0], jobs), (self.clients[1], jobs[::-1])):
            msgs = []
            for j in order:
                for seq, st in enumerate(("edge_transmitted", "edge_started", "edge_running",
                                          "terminated"), 1):
                    msgs.append(("rcs/v1/%s/%s/jobs/%s/status" % (self.root, envelopes[j], j),
                                 json.dumps({"v": 1, "job": j, "status": st, "seq": seq,
                                             "ts": int(time.time()), "response": "ok"})))
            bursts.append((cl, msgs))
        threads = [threading.Thread(target=lambda cl=cl, msgs=msgs: [
            cl.publish(t, p, qos=1) for t, p in msgs]) for cl, msgs in bursts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        gid = r.json["group"]["ident"]
        wait_for(lambda: self.api.get("/groups/" + gid).json["status"] == "completed",
                 timeout=60, interval=0.25, what="the group completed")
        self.assertEqual(self.api.get("/groups/" + gid).json["counts"],
                         {"terminated": self.N})
        for j in jobs[::7]:
            h = self.api.get("/jobs/%s/history" % j).json["items"]
            statuses = [x["status"] for x in h]
            self.assertEqual(len(statuses), len(set(statuses)), statuses)
        for c, mark in zip(self.coords, marks):
            with open(c.log_path, "rb") as f:
                f.seek(mark)
                log = f.read().decode("utf-8", "replace")
            self.assertNotIn("deadlock detected", log,
                             "the coordinators' report transactions deadlocked:\n" +
                             log[-3000:])
        for c in self.coords:
            self.assertTrue(c.alive())


class OneCoordinatorTest(unittest.TestCase):
    """One coordinator on a PostgreSQL database of its own (URL + db_suffix), a broker of its
    own, a tenant; self.cl, a device's MQTT client the test may set, is disconnected after."""

    db_suffix = ""
    coord_args = ()
    persistence = True
    ready_line = "status reports: "  # in the log once the reports' subscription is chosen

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="rcs-one-")
        self.cl = None
        self.addCleanup(self._cleanup)
        self.pg = pg_server.shared()
        url = self.pg.create_db()
        self.dbname = url.rsplit("/", 1)[1]
        self.broker = Mosquitto(self.workdir, persistence=self.persistence).start()
        self.coord = Coordinator(self.workdir, db=url + self.db_suffix, extra_args=(
            "--mqtt", self.mqtt_url(), "--resend-after", "3600", *self.coord_args))
        tenant = self.coord.init_tenant(user="admin")
        self.root = tenant["client_root"]
        self.coord.start()
        wait_for(lambda: self.ready_line in self.coord.read_log(), timeout=20,
                 what="coordinator connected to its broker")
        self.api = self.coord.api(tenant["api_key"])
        self.cl = None

    def _cleanup(self):
        if self.cl is not None:
            self.cl.disconnect()
            self.cl.loop_stop()
        if self.coord.proc is not None:
            self.coord.stop(signal.SIGKILL)
        self.broker.stop()
        if os.environ.get("RCS_KEEP_TMP") is None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def mqtt_url(self):
        """The broker's URL as the coordinator is given it."""
        return self.broker.url

    def device_with_job(self, name):
        """A device played by self.cl (online, subscribed to its jobs) and a job sent to it:
        the device's ident, the job and the topic of the job's status reports."""
        ent = self.api.post("/devices", {"name": name}).json["entity_ident"]
        envelopes = []
        if self.cl is not None:  # the last device's
            self.cl.disconnect()
            self.cl.loop_stop()
        self.cl = mqtt.Client(client_id=name + "-" + uuid.uuid4().hex[:12], clean_session=True)
        ready = threading.Event()
        self.cl.on_connect = lambda c, u, f, rc: c.subscribe(
            "rcs/v1/%s/%s/jobs/+" % (self.root, ent), 1)
        self.cl.on_subscribe = lambda *a: ready.set()
        self.cl.on_message = lambda c, u, msg: envelopes.append(msg.topic)
        self.cl.connect("127.0.0.1", self.broker.port, keepalive=10)
        self.cl.loop_start()
        self.assertTrue(ready.wait(10))
        self.publish_state(ent, True)
        wait_for(lambda: self.api.get("/devices/" + ent).json.get("online") is True,
                 what="the device online")
        task = self.api.post("/tasks", {"name": name, "script": "echo"}).json
        job = self.api.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": ent}).json
        wait_for(lambda: envelopes, what="the envelope")
        return ent, job, "rcs/v1/%s/%s/jobs/%s/status" % (self.root, ent, job["ident"])

    def publish_state(self, ent, online):
        self.cl.publish("rcs/v1/%s/%s/state" % (self.root, ent), json.dumps(
            {"v": 1, "online": online, "tags": [], "agent_version": "test",
             "ts": int(time.time())}), qos=1, retain=True).wait_for_publish(10)

    def report(self, topic, job, seq, status):
        self.cl.publish(topic, json.dumps(
            {"v": 1, "job": job["ident"], "status": status, "seq": seq,
             "ts": int(time.time()), "response": "ok"}), qos=1).wait_for_publish(10)

    def history(self, job):
        """The job's history statuses, oldest first."""
        return [h["status"] for h in reversed(self.api.get(
            "/jobs/%s/history" % job["ident"]).json["items"])]


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class BusyRetryTest(OneCoordinatorTest):
    """A device's status report and state message whose write PostgreSQL breaks off (here a
    lock wait cut short by lock_timeout, as a deadlock with another coordinator would) are
    applied again rather than dropped: another session holds the job's row, then the
    device's row, locked for longer than the coordinator's lock_timeout (500 ms, given in
    the URL's options) while the message arrives, and lets go well within the retries
    (5 attempts, 2.65 s in all). The report's batch leaves the job's row (docs/coordinator.md,
    "Reports as sets": it is held elsewhere), keeps the report and, after a second, applies
    it alone, waiting for the row: that wait is cut short and tried again."""

    HOLD = 1.2  # seconds a row stays locked
    HOLD_JOB = 2.0  # the job's row: past the second a report is kept, then a wait cut short
    db_suffix = "?options=-c%20lock_timeout%3D500"
    coord_args = ("--node-id", "busy")

    def held(self, row, then, hold=HOLD):
        """Locks row (a table and a condition) for hold seconds from another session, calls
        then() once the lock is held, and waits for the session to end."""
        t = threading.Thread(target=self.pg.psql, args=(
            "BEGIN; SELECT 1 FROM %s FOR UPDATE; SELECT pg_sleep(%s); COMMIT"
            % (row, hold),), kwargs={"db": self.dbname})
        t.start()
        wait_for(lambda: self.pg.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
            db=self.dbname).strip() == "1", timeout=10, interval=0.01, what="the row locked")
        then()
        t.join(30)

    def test_report_and_state_applied_again(self):
        ent, job, topic = self.device_with_job("busy")
        self.held("jobs WHERE ident = '%s'" % job["ident"],
                  lambda: self.report(topic, job, 1, "terminated"), self.HOLD_JOB)
        wait_for(lambda: self.api.get("/jobs/" + job["ident"]).json["status"] == "terminated",
                 timeout=10, what="the report applied once the row was free")
        self.held("devices WHERE entity_ident = '%s'" % ent,
                  lambda: self.publish_state(ent, False))
        wait_for(lambda: self.api.get("/devices/" + ent).json.get("online") is False,
                 timeout=10, what="the state applied once the row was free")
        log = self.coord.read_log()
        self.assertIn("job %s: its report waited" % job["ident"], log)
        self.assertIn("job %s: the database broke the change off (busy): applying it again"
                      % job["ident"], log)
        self.assertIn("device %s: the database broke the change off (busy): applying it again"
                      % ent, log)
        self.assertNotIn("not applied", log)
        self.assertEqual([h["status"] for h in self.api.get(
            "/jobs/%s/history" % job["ident"]).json["items"]],
            ["terminated", "transmited", "pending", "initial"])  # newest first

    def test_reports_kept_in_order_while_row_held(self):
        """Three reports of one job that come while another session holds the job's row
        (shorter than the second after which one is applied alone) are kept, in their order,
        through the rounds that find the row held, and applied in that order once it is free
        (docs/coordinator.md, "Reports as sets")."""
        ent, job, topic = self.device_with_job("kept")

        def reports():
            for seq, status in ((1, "edge_started"), (2, "edge_running"), (3, "terminated")):
                self.report(topic, job, seq, status)
                time.sleep(0.1)  # each its own batch, most likely
        self.held("jobs WHERE ident = '%s'" % job["ident"], reports, 0.7)
        wait_for(lambda: self.api.get("/jobs/" + job["ident"]).json["status"] == "terminated",
                 timeout=10, what="the reports applied once the row was free")
        self.assertEqual(self.history(job), ["initial", "pending", "transmited", "edge_started",
                                             "edge_running", "terminated"])
        log = self.coord.read_log()
        self.assertNotIn("its report waited", log)
        self.assertNotIn("not applied", log)


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class SeqGapTest(OneCoordinatorTest):
    """A report that comes before the one numbered just below it (as when two coordinators'
    shared subscription splits a job's reports) waits for it and is applied after it; one
    whose predecessor never comes is applied as it is, alone, after a second
    (docs/coordinator.md, "Reports as sets"; docs/mqtt.md, seq)."""

    def test_reports_applied_in_seq_order(self):
        ent, job, topic = self.device_with_job("gap")
        self.report(topic, job, 1, "edge_transmitted")
        self.report(topic, job, 3, "edge_running")
        time.sleep(0.3)  # seq 3 in a batch of its own, most likely
        self.report(topic, job, 2, "edge_started")
        want = ["initial", "pending", "transmited", "edge_transmitted", "edge_started",
                "edge_running"]
        wait_for(lambda: self.api.get("/jobs/" + job["ident"]).json["status"] ==
                 "edge_running" and len(self.history(job)) >= len(want), timeout=10,
                 what="the three reports applied")
        self.assertEqual(self.history(job), want)
        # seq 4 never comes: seq 5 is applied all the same
        self.report(topic, job, 5, "terminated")
        wait_for(lambda: self.api.get("/jobs/" + job["ident"]).json["status"] == "terminated",
                 timeout=10, what="the report after a gap applied")
        self.assertEqual(self.history(job), want + ["terminated"])
        self.assertIn("job %s: its report waited" % job["ident"], self.coord.read_log())


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class ProbeChoiceKeptTest(OneCoordinatorTest):
    """The probe's choice is kept by the connect it asks for: a coordinator on a shared
    database (mqtt_shared_subscriptions auto) whose probe comes back reconnects with a clean
    session to take the shared subscription, and takes it there without probing again. A
    probe of that connect could come too late (the retained states of a large fleet are
    delivered ahead of it), choose the plain subscription and reconnect with a persistent
    session, whose probe comes back, and so on: here the proxy drops the probe on the clean
    connections (docs/mqtt.md, "Several coordinators")."""

    coord_args = ("--node-id", "probe")
    ready_line = "status reports: shared subscription"

    def mqtt_url(self):
        self.proxy = MqttProxy(self.broker.port)
        self.proxy.drop_to_clean = "_coordinators/probe"
        self.proxy.start()
        self.addCleanup(self.proxy.stop)
        return self.proxy.url

    def test_one_reconnect(self):
        log = self.coord.read_log()
        self.assertIn("reconnecting with a clean session", log)
        # two probe deadlines (5 s each) and more: a probe on the clean connection would
        # have chosen the plain subscription by now, and reconnected
        time.sleep(12)
        log = self.coord.read_log()
        self.assertEqual(log.count("mqttc_reconnect: reconnecting with a"), 1, log)
        self.assertNotIn("status reports: plain subscription", log)
        self.assertNotIn("status reports: no shared subscription", log)
        self.assertEqual(self.proxy.dropped, 0)  # no probe on the clean connection


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class RecoverAfterReconnectTest(OneCoordinatorTest):
    """A coordinator that takes the shared subscription of reports in a clean session loses
    the reports on their way to it when that connection is lost (here its broker restarts
    without persistence): after the reconnect it sends its in-flight jobs again, and the
    device answers with where the job stands (docs/mqtt.md "Several coordinators"). The
    job was acknowledged (edge_transmitted), so neither the catch-up of a device back
    online nor the re-send after --resend-after (an hour) would send it."""

    persistence = False
    coord_args = ("--node-id", "recover", "--mqtt-shared-subscriptions", "yes")
    ready_line = "status reports: shared subscription"

    lost = "the reports on their way to this node's previous clean session were lost with it"

    def acknowledged_jobs(self, n):
        """n devices on one MQTT connection (online again after each reconnect), a job sent
        to each and acknowledged (edge_transmitted): the job idents, and the topics of the
        envelopes as they arrive."""
        ents = [self.api.post("/devices", {"name": "recover%d" % i}).json["entity_ident"]
                for i in range(n)]
        envelopes = []
        online = json.dumps({"v": 1, "online": True, "tags": [], "agent_version": "recover",
                             "ts": int(time.time())})
        self.cl = mqtt.Client(client_id="recover-" + uuid.uuid4().hex[:12], clean_session=True)
        self.cl.reconnect_delay_set(min_delay=1, max_delay=1)
        self.subscribed = threading.Event()

        def on_connect(c, u, f, rc):
            c.subscribe("rcs/v1/%s/+/jobs/+" % self.root, 1)
            for e in ents:
                c.publish("rcs/v1/%s/%s/state" % (self.root, e), online, qos=1, retain=True)
        self.cl.on_connect = on_connect
        self.cl.on_subscribe = lambda *a: self.subscribed.set()
        # rcs/v1/<root>/events/jobs/<job> matches the filter too: envelopes only
        self.cl.on_message = lambda c, u, msg: (
            msg.topic.split("/")[3] in ents and envelopes.append(msg.topic))
        self.cl.connect("127.0.0.1", self.broker.port, keepalive=10)
        self.cl.loop_start()
        for e in ents:
            wait_for(lambda: self.api.get("/devices/" + e).json.get("online") is True,
                     what="the device online")
        task = self.api.post("/tasks", {"name": "recover", "script": "echo"}).json
        jobs = [self.api.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": e}).json
                for e in ents]
        wait_for(lambda: len(envelopes) == n, what="the envelopes")
        for e, job in zip(ents, jobs):
            self.cl.publish("rcs/v1/%s/%s/jobs/%s/status" % (self.root, e, job["ident"]),
                            json.dumps({"v": 1, "job": job["ident"], "seq": 1,
                                        "status": "edge_transmitted", "ts": int(time.time())}),
                            qos=1)
        for job in jobs:
            wait_for(lambda: self.api.get("/jobs/" + job["ident"]).json["status"]
                     == "edge_transmitted", what="the job acknowledged")
        self.assertNotIn(self.lost, self.coord.read_log())
        return [job["ident"] for job in jobs], envelopes

    @staticmethod
    def sent(envelopes, job):
        return sum(t.endswith("/jobs/" + job) for t in envelopes)

    def restart_broker(self):
        """The broker restarted without sessions, the devices subscribed again before the
        coordinator reconnects (it is held still meanwhile): what it sends again after its
        reconnect reaches them, as it would reach an agent that reconnected first."""
        os.kill(self.coord.proc.pid, signal.SIGSTOP)
        try:
            self.subscribed.clear()
            self.broker.stop()
            self.broker.start()
            self.assertTrue(self.subscribed.wait(20), "the devices did not subscribe again")
        finally:
            os.kill(self.coord.proc.pid, signal.SIGCONT)

    def test_inflight_sent_again_after_reconnect(self):
        (job,), envelopes = self.acknowledged_jobs(1)
        self.restart_broker()
        wait_for(lambda: self.sent(envelopes, job) >= 2, timeout=30,
                 what="the in-flight job sent again after the reconnect")
        self.assertIn(self.lost, self.coord.read_log())
        self.assertEqual(self.api.get("/jobs/" + job).json["status"], "edge_transmitted")

    def test_a_job_locked_meanwhile_gets_a_later_pass(self):
        # the recovery claims the jobs FOR UPDATE SKIP LOCKED: one whose row another
        # coordinator's transaction holds at that instant (here a psql session) is passed
        # over, and sent in a later pass once it is free
        (free, locked), envelopes = self.acknowledged_jobs(2)
        holder = subprocess.Popen(
            [os.path.join(self.pg.bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
             "-d", self.pg.url(self.dbname)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            text=True)
        try:
            holder.stdin.write("BEGIN;\nSELECT 1 FROM jobs WHERE ident = '%s' FOR UPDATE;\n"
                               % locked)
            holder.stdin.flush()
            wait_for(lambda: self.pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND state ="
                " 'idle in transaction'" % self.dbname).strip() == "1",
                timeout=10, interval=0.05, what="the row locked")
            self.restart_broker()
            wait_for(lambda: self.sent(envelopes, free) >= 2, timeout=30,
                     what="the free job sent again after the reconnect")
            time.sleep(1.5)  # a second pass comes by while the row is still locked
            self.assertEqual(self.sent(envelopes, locked), 1, "sent while its row was locked")
            holder.stdin.write("COMMIT;\n")
            holder.stdin.close()
            self.assertEqual(holder.wait(10), 0)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        wait_for(lambda: self.sent(envelopes, locked) >= 2, timeout=10,
                 what="the locked job sent again once free")
        log = self.coord.read_log()
        self.assertIn(self.lost, log)
        self.assertIn("in-flight jobs were busy elsewhere", log)
        self.assertEqual(self.sent(envelopes, free), 2, "the free job sent again once")


FAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                             "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
                 if os.path.exists(p)), None)


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
class ClockSkewTest(unittest.TestCase):
    """A coordinator whose clock is off the database server's by more than 2 s says so at
    its start (leases and signs of life count on agreeing clocks, docs/scale-out.md); one
    whose clock agrees does not. The skewed clock is libfaketime's, for the coordinator
    alone."""

    WARNING = "this host's clock is %s s off the database server's"

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="rcs-skew-")
        self.addCleanup(self._cleanup)
        self.db = pg_server.shared().create_db()
        self.coords = []

    def _cleanup(self):
        for c in self.coords:
            if c.proc is not None:
                c.stop(signal.SIGKILL)
        if os.environ.get("RCS_KEEP_TMP") is None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, node, env=None):
        c = Coordinator(self.workdir, db=self.db, env=env, extra_args=("--node-id", node))
        self.coords.append(c)
        if len(self.coords) == 1:
            c.init_tenant(user="admin")
        c.start()
        wait_for(lambda: "serving as node" in c.read_log(), timeout=20, what="started")
        return c

    @unittest.skipIf(FAKETIME is None and not os.environ.get("RCS_NO_SKIP"),
                     "libfaketime is not installed")
    def test_skewed_clock_warned(self):
        agreeing = self.start("skew-a")
        self.assertNotIn("off the database server's", agreeing.read_log())
        env = dict(os.environ, LD_PRELOAD=FAKETIME, FAKETIME="+60s", DONT_FAKE_MONOTONIC="1")
        ahead = self.start("skew-b", env=env)
        log = ahead.read_log()
        self.assertTrue(any(self.WARNING % ("+%d" % d) in log for d in range(58, 63)), log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
