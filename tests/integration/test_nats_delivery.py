#!/usr/bin/env python3
"""A job reaches an online device on the NATS cluster without waiting for the 60 s re-send
(docs/mqtt.md "Delivery guarantees", docs/scale-out.md "The broker cluster: NATS").

Two coordinators on one PostgreSQL database (pg_server.py), a 3-node NATS cluster
(nats_cluster.py), every client given the three nodes' URLs, so that each coordinator
re-sends, once, an envelope still `transmited` to an online device 10 s after its send
(`resend_unacked_after`, on by default with several --mqtt brokers); `--resend-after` is
the default 60 s throughout.

- A device whose envelope the cluster acknowledged but never delivered: a scripted device
  (paho) with a new session publishes its online state before its job subscription is in
  place, as an agent does when a NATS node refused its job filter in the SUBACK and it asks
  again a moment later; a job sent meanwhile is stored by the cluster (the coordinator has
  its PUBACK) and never reaches the device: the device's JetStream consumer, made by the
  later SUBSCRIBE, delivers only what comes after it. The job reaches the device and
  `edge_transmitted` well before the 60 s re-send (within 40 s), through the early re-send
  (`re-sending N jobs not acknowledged 10s after their send` in the log of the coordinator
  that did it, `rcs_jobs_resent_unacked_total` on its /metrics), and no re-send of jobs
  without news was made meanwhile.
- Real agents: tag sends through both coordinators, a kill -9 of one right after a send
  through it, sends through the survivor, the killed one started again, sends through both:
  every job of an online device reaches `edge_transmitted` (or later) within 25 s of its
  send (less than NATS's 30 s redelivery and the 60 s re-send); each ends `terminated`
  once. The early re-sends made on the way are counted and printed (usually none).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_nats_delivery.py
RCS_KEEP_TMP=1 keeps the directory.
"""

import json
import os
import re
import signal
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402
from nats_cluster import NatsCluster  # noqa: E402
from rcs_fixture import StackTest, note  # noqa: E402
from rcs_harness import (Agent, Coordinator, FakeDevice, free_port,  # noqa: E402
                         make_ec_keypair, wait_for)

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
ACKED = ("edge_transmitted", "edge_started", "edge_running") + TERMINAL
N_AGENTS = 4
LEASE = 5
EARLY = re.compile(r"re-sending (\d+) jobs not acknowledged (\d+)s after their send")
STALE = "jobs without news for"


def rotated(urls, i):
    """urls starting at the i-th (mod len)."""
    i %= len(urls)
    return urls[i:] + urls[:i]


class LateSubscriber(FakeDevice):
    """A scripted device that says it is online at its connect but subscribes to its jobs
    only when told (subscribe_now): the shape of an agent whose job filter a NATS node
    refused in the SUBACK, asked for again a moment later (docs/scale-out.md)."""

    def _on_connect(self, client, userdata, flags, rc):
        client.publish(self.base + "/state", json.dumps(
            {"v": 1, "online": True, "tags": self.tags, "agent_version": "fake",
             "ts": int(time.time())}), qos=1, retain=True)
        self.connected = True

    def subscribe_now(self):
        self._subscribe(self.client, [self.base + "/jobs/+", self.base + "/jobs/+/cancel"])


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server (initdb) is not installed")
class NatsDeliveryTest(StackTest):
    workdir_prefix = "rcs-natsdelivery-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        w = cls.workdir
        cls.cluster = cls.own(NatsCluster(w)).start()
        urls = cls.cluster.mqtt_urls
        cls.db = pg_server.shared().create_db()
        cls.key, cls.pub = make_ec_keypair(w, "signing")
        cls.coords, cls.metrics = [], []
        for i, node in enumerate(("deliv-a", "deliv-b")):
            port = free_port()
            args = ["--node-id", node, "--lease", str(LEASE), "--signing-key", cls.key,
                    "--metrics-listen", "127.0.0.1:%d" % port]
            for u in rotated(urls, i):
                args += ["--mqtt", u]
            cls.coords.append(cls.own(Coordinator(w, db=cls.db, extra_args=args)))
            cls.metrics.append(port)
        tenant = cls.coords[0].init_tenant(user="admin")
        cls.client_root = tenant["client_root"]
        for c in cls.coords:
            c.start()
        cls.apis = [c.api(tenant["api_key"]) for c in cls.coords]
        for c in cls.coords:
            wait_for(lambda c=c: "status reports: " in c.read_log(), timeout=90,
                     what="coordinator connected to NATS and subscribed")
        cls.devs = []
        for i in range(N_AGENTS):
            r = cls.apis[0].post("/devices", {"name": "dev-%d" % i, "tags": []})
            assert r.status == 201, r
            mine = rotated(urls, i + 1)
            extra = []
            for u in mine[1:]:
                extra += ["--mqtt", u]
            agent = Agent(w, mine[0], cls.client_root, r.json["entity_ident"],
                          trusted_keys=[cls.pub], tags=["fleet"], name="dev-%d" % i,
                          extra_args=extra)
            cls.agents.append(agent)
            agent.start()
            cls.devs.append(r.json["entity_ident"])
        for ident in cls.devs:
            wait_for(lambda ident=ident: cls.apis[1].get("/devices/" + ident).json["online"],
                     timeout=60, what="device %s online" % ident)
        r = cls.apis[0].put("/scripts/quick", {"source": "return 'ok'"})
        assert r.status in (200, 201), r
        cls.task = cls.apis[0].post("/tasks", {"name": "quick", "script": "quick",
                                               "timeout": 60}).json

    # -- helpers ---------------------------------------------------------------------------

    def early_resends(self, coord):
        """The jobs coord's log says it sent again early (their count), and its seconds."""
        found = EARLY.findall(self.full_log(coord))
        return sum(int(n) for n, _ in found), {s for _, s in found}

    @staticmethod
    def full_log(coord):
        with open(coord.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def metric(self, i, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics[i],
                                    timeout=10) as r:
            text = r.read().decode()
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else None

    def status(self, api, ident):
        return api.get("/jobs/" + ident).json.get("status")

    def wait_acked(self, api, idents, timeout, what):
        def check():
            return all(self.status(api, j) in ACKED for j in idents)
        wait_for(check, timeout=timeout, interval=0.25, what=what)

    def tag_send(self, api):
        r = api.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": "fleet"})
        self.assertEqual(r.status, 201, r)
        jobs = [j["ident"] for j in r.json["items"]]
        self.assertEqual(len(jobs), N_AGENTS)
        return jobs

    # -- tests -----------------------------------------------------------------------------

    def test_1_envelope_the_cluster_never_delivered(self):
        api = self.apis[0]
        r = api.post("/devices", {"name": "late", "tags": []})
        self.assertEqual(r.status, 201, r)
        ent = r.json["entity_ident"]
        late = LateSubscriber(self.cluster.nodes[2], self.client_root, ent)
        late.start()
        try:
            wait_for(lambda: api.get("/devices/" + ent).json["online"], timeout=60,
                     what="the late subscriber online")
            before = [self.early_resends(c)[0] for c in self.coords]
            r = api.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": ent})
            self.assertEqual(r.status, 201, r)
            job = r.json["ident"]
            sent = time.time()
            self.assertEqual(r.json["status"], "transmited", r.json)
            # the envelope is in the cluster (acknowledged to the coordinator: its claim
            # ended) before the device's subscription exists
            wait_for(lambda: api.get("/jobs/" + job).json.get("status") == "transmited",
                     timeout=10, what="the job transmited")
            time.sleep(1)
            late.subscribe_now()
            wait_for(lambda: job in late.jobs_received(), timeout=40, interval=0.2,
                     what="the envelope at the device before the 60 s re-send")
            got = time.time() - sent
            self.wait_acked(api, [job], 20, "the job acknowledged")
            note("envelope the cluster did not deliver: at the device %.1f s after the send"
                 % got)
            after = [self.early_resends(c) for c in self.coords]
            early = sum(a[0] for a in after) - sum(before)
            self.assertGreaterEqual(early, 1, [c.read_log()[-3000:] for c in self.coords])
            self.assertEqual(set().union(*[a[1] for a in after]), {"10"})
            self.assertGreaterEqual(sum(self.metric(i, "rcs_jobs_resent_unacked_total") or 0
                                        for i in range(2)), 1)
            for c in self.coords:
                self.assertNotIn(STALE, self.full_log(c))
            self.assertEqual(self.status(api, job), "terminated")
        finally:
            late.stop()

    def test_2_jobs_reach_online_agents_across_a_kill(self):
        a, b = self.apis
        before = sum(self.early_resends(c)[0] for c in self.coords)
        sends = []
        for i in range(2):
            sends.append(self.tag_send(self.apis[i % 2]))
            self.wait_acked(b, sends[-1], 25, "a send's jobs acknowledged")
        # kill -9 of a right after a send through it
        sends.append(self.tag_send(a))
        os.kill(self.coords[0].proc.pid, signal.SIGKILL)
        self.coords[0].proc.wait()
        self.coords[0].log.close()
        self.coords[0].proc = None
        self.wait_acked(b, sends[-1], 25, "the killed coordinator's send acknowledged")
        for i in range(3):
            sends.append(self.tag_send(b))
            self.wait_acked(b, sends[-1], 25, "a send's jobs acknowledged after the kill")
        self.coords[0].start()
        wait_for(lambda: "status reports: " in self.coords[0].read_log(), timeout=90,
                 what="the killed coordinator back")
        for i in range(3):
            sends.append(self.tag_send(self.apis[i % 2]))
            self.wait_acked(b, sends[-1], 25, "a send's jobs acknowledged after the restart")
        every = [j for s in sends for j in s]
        wait_for(lambda: all(self.status(b, j) in TERMINAL for j in every), timeout=120,
                 interval=0.5, what="every job ended")
        for j in every:
            self.assertEqual(self.status(b, j), "terminated")
            hist = [h["status"] for h in b.get("/jobs/%s/history" % j).json["items"]]
            self.assertEqual(hist.count("terminated"), 1, hist)
        early = sum(self.early_resends(c)[0] for c in self.coords) - before
        note("%d jobs, each acknowledged within 25 s; early re-sends on the way: %d"
             % (len(every), early))


if __name__ == "__main__":
    unittest.main(verbosity=2)
