#!/usr/bin/env python3
"""The scaled-out shape end to end (docs/scale-out.md): two coordinators on one PostgreSQL
database, a 3-node NATS cluster as the broker, real rcs-agents.

Each coordinator and each agent is given the MQTT ports of all three NATS nodes (--mqtt
three times, each list starting on another node) and fails over between them. Checked:
- a task made through one coordinator is sent by the other, and its job reaches
  `terminated` on a device connected to a third node;
- a NATS node killed (SIGKILL, by pid) while a tag send runs: every job of the send still
  ends `terminated`, each job with one `terminated` in its history, and the clients that
  were on that node are connected to another one afterwards;
- a coordinator killed (kill -9) right after it accepted a tag send: the other one finishes
  every job of the send (the dead one's claims end with its lease).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_scale_out.py
RCS_KEEP_TMP=1 keeps the directory.
"""

import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402
from nats_cluster import NatsCluster  # noqa: E402
from rcs_fixture import StackTest  # noqa: E402
from rcs_harness import Agent, Coordinator, make_ec_keypair, wait_for  # noqa: E402

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
LEASE = 3
N_AGENTS = 4
SLOW = "rcs.sleep(2) return 'slept'"


def rotated(urls, i):
    """urls starting at the i-th (mod len)."""
    i %= len(urls)
    return urls[i:] + urls[:i]


@unittest.skipUnless(pg_server.available(), "PostgreSQL's server (initdb) is not installed")
class ScaleOutTest(StackTest):
    workdir_prefix = "rcs-scale-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.coords = []
        w = cls.workdir
        cls.cluster = cls.own(NatsCluster(w)).start()
        urls = cls.cluster.mqtt_urls
        cls.db = pg_server.shared().create_db()
        cls.key, cls.pub = make_ec_keypair(w, "signing")
        for i, node in enumerate(("scale-a", "scale-b")):
            # --resend-after: an envelope NATS loses while a fresh session's interest
            # spreads over the cluster under load comes again soon (docs/mqtt.md)
            args = ["--node-id", node, "--lease", str(LEASE), "--signing-key", cls.key,
                    "--resend-after", "10"]
            for u in rotated(urls, i):
                args += ["--mqtt", u]
            cls.coords.append(cls.own(Coordinator(w, db=cls.db, extra_args=args)))
        tenant = cls.coords[0].init_tenant(user="admin")
        cls.client_root = tenant["client_root"]
        for c in cls.coords:
            c.start()
        cls.a, cls.b = (c.api(tenant["api_key"]) for c in cls.coords)
        for c in cls.coords:
            wait_for(lambda c=c: "connected to" in c.read_log(), timeout=60,
                     what="coordinator connected to NATS")
        cls.devs = []
        for i in range(N_AGENTS):
            r = cls.a.post("/devices", {"name": "dev-%d" % i, "tags": []})
            assert r.status == 201, r
            mine = rotated(urls, i + 2)
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
            wait_for(lambda ident=ident: cls.b.get("/devices/" + ident).json["online"],
                     timeout=60, what="device %s online" % ident)

    # -- helpers ---------------------------------------------------------------------------

    def script_task(self, api, name, source):
        r = api.put("/scripts/" + name, {"source": source})
        self.assertIn(r.status, (200, 201), r)
        r = api.post("/tasks", {"name": name, "script": name, "timeout": 60})
        self.assertEqual(r.status, 201, r)
        return r.json

    def wait_terminal(self, api, idents, timeout):
        def check():
            left = [j for j in idents
                    if api.get("/jobs/" + j).json.get("status") not in TERMINAL]
            return not left
        wait_for(check, timeout=timeout, interval=0.5, what="%d jobs ended" % len(idents))

    def assertTerminatedOnce(self, api, ident):
        job = api.get("/jobs/" + ident).json
        self.assertEqual(job["status"], "terminated", job)
        hist = [h["status"] for h in api.get("/jobs/%s/history" % ident).json["items"]]
        self.assertEqual(hist.count("terminated"), 1, hist)
        self.assertEqual(hist.count("edge_started"), 1, hist)

    # -- tests -----------------------------------------------------------------------------

    def test_1_task_of_one_sent_by_the_other(self):
        task = self.script_task(self.a, "quick", "return 'ok'")
        r = self.b.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": self.devs[0]})
        self.assertEqual(r.status, 201, r)
        self.wait_terminal(self.a, [r.json["ident"]], 60)
        self.assertTerminatedOnce(self.a, r.json["ident"])
        self.assertEqual(self.a.get("/jobs/" + r.json["ident"]).json["response"], "ok")

    def test_2_nats_node_killed_during_a_send(self):
        task = self.script_task(self.a, "slow-node", SLOW)
        r = self.a.post("/tasks/%s/jobs/tags" % task["ident"], {"tag": "fleet"})
        self.assertEqual(r.status, 201, r)
        jobs = [j["ident"] for j in r.json["items"]]
        self.assertEqual(len(jobs), N_AGENTS)
        # node 1: coordinator a's first broker and one agent's
        self.cluster.stop_node(0)
        try:
            self.wait_terminal(self.b, jobs, 150)
            for j in jobs:
                self.assertTerminatedOnce(self.b, j)
            for a in self.agents:
                self.assertTrue(a.alive(), a.name)
            for c in self.coords:
                self.assertTrue(c.alive())
        finally:
            self.cluster.start_node(0)
        # the clients that were on node 1 work on another node
        r = self.b.post("/tasks/%s/jobs/tags" % task["ident"], {"tag": "fleet"})
        self.assertEqual(r.status, 201, r)
        again = [j["ident"] for j in r.json["items"]]
        self.wait_terminal(self.a, again, 150)
        for j in again:
            self.assertTerminatedOnce(self.a, j)

    def test_3_coordinator_killed_after_a_send(self):
        task = self.script_task(self.b, "slow-coord", SLOW)
        r = self.a.post("/tasks/%s/jobs/tags" % task["ident"], {"tag": "fleet"})
        self.assertEqual(r.status, 201, r)
        jobs = [j["ident"] for j in r.json["items"]]
        os.kill(self.coords[0].proc.pid, signal.SIGKILL)
        self.coords[0].proc.wait()
        # within the lease, the re-sends and NATS's redelivery of unacknowledged messages
        self.wait_terminal(self.b, jobs, LEASE + 120)
        for j in jobs:
            self.assertTerminatedOnce(self.b, j)
        self.assertTrue(self.coords[1].alive())


if __name__ == "__main__":
    unittest.main(verbosity=2)
