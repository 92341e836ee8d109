#!/usr/bin/env python3
"""The service on a 3-node NATS cluster (docs/scale-out.md, "The broker cluster: NATS").

A NATS cluster with JetStream and MQTT (nats_cluster.py, no accounts: test_nats_acl.py
checks those), the coordinator (SQLite) connected to node 1, two real rcs-agents
connected to nodes 2 and 3: a job to one device and a tag send to both reach
`terminated` across the nodes; both devices show online; each node's /connz names the
MQTT client ids (rcs-coordinator-<node id> on node 1, the entity idents on nodes 2 and
3); every topic level the service uses is valid on NATS (UUIDs: no '.', no blank), and
the retained device state is kept by the cluster: readable on another node, still there
while the node the device was connected to is down, and the device is back online once
that node is up again.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_nats_cluster.py
RCS_KEEP_TMP=1 keeps the directory (node configurations and logs, daemon logs).
"""

import json
import os
import threading
import unittest
import uuid

import paho.mqtt.client as mqtt

from nats_cluster import NatsCluster
from rcs_fixture import StackTest, note
from rcs_harness import Agent, is_uuid, make_ec_keypair, wait_for

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
NODE_ID = "nats-test-1"


def retained(node, topic, timeout=30):
    """The retained message of topic as a new client on node gets it (payload bytes)."""
    got = []
    ev = threading.Event()
    c = mqtt.Client(client_id="reader-%s" % uuid.uuid4().hex[:10], clean_session=True,
                    protocol=mqtt.MQTTv311)

    def on_connect(client, userdata, flags, rc):
        if rc == 0:
            client.subscribe(topic, 1)

    def on_message(client, userdata, msg):
        got.append((msg.payload, msg.retain))
        ev.set()
    c.on_connect = on_connect
    c.on_message = on_message
    c.connect("127.0.0.1", node.mqtt_port, keepalive=30)
    c.loop_start()
    try:
        ev.wait(timeout)
    finally:
        c.disconnect()
        c.loop_stop()
    if not got:
        raise AssertionError("no retained message on %s at %s" % (topic, node.name))
    return got[0]


class NatsClusterTest(StackTest):
    workdir_prefix = "rcs-nats-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        w = cls.workdir
        cls.cluster = cls.own(NatsCluster(w)).start()
        cls.n1, cls.n2, cls.n3 = cls.cluster.nodes

        cls.key, cls.pub = make_ec_keypair(w, "signing")
        cls.start_coordinator([
            # an envelope NATS loses while a fresh session's interest spreads over the
            # cluster under load comes again soon (docs/mqtt.md, re-sends)
            "--resend-after", "10",
            "--mqtt", cls.n1.mqtt_url, "--node-id", NODE_ID, "--signing-key", cls.key],
            db=os.path.join(w, "rcs.db"), connected="connected to", timeout=30,
            what="the coordinator connected to NATS node 1")

        cls.devs = []
        for name, node in (("pump-a", cls.n2), ("pump-b", cls.n3)):
            r = cls.admin.post("/devices", {"name": name, "tags": []})
            assert r.status == 201, r
            agent = Agent(w, node.mqtt_url, cls.client_root, r.json["entity_ident"],
                          trusted_keys=[cls.pub], tags=["nats"], name=name)
            cls.agents.append(agent)
            agent.start()
            cls.devs.append(r.json["entity_ident"])
        cls.a_agent, cls.b_agent = cls.agents
        cls.a, cls.b = cls.devs
        for ident in cls.devs:
            wait_for(lambda: cls.admin.get("/devices/" + ident).json["online"], timeout=40,
                     what="device %s online through NATS" % ident)
        cls.task = cls.admin.post("/tasks", {"name": "echo", "script": "echo"}).json
        assert cls.task.get("signature"), cls.task

    @classmethod
    def tearDownClass(cls):
        for a in cls.agents:
            if a.alive():
                a.stop()
        super().tearDownClass()

    # -- helpers ---------------------------------------------------------------------------

    def device(self, ident):
        r = self.admin.get("/devices/" + ident)
        self.assertEqual(r.status, 200, r)
        return r.json

    def wait_job(self, ident, timeout=60):
        return wait_for(lambda: self.job(ident)["status"] in TERMINAL and self.job(ident),
                        timeout=timeout, what="job %s finished" % ident)

    def history(self, ident):
        r = self.admin.get("/jobs/%s/history" % ident)
        return [h["status"] for h in reversed(r.json["items"])]

    def state_topic(self, ident):
        return "rcs/v1/%s/%s/state" % (self.client_root, ident)

    # -- tests -----------------------------------------------------------------------------

    def test_1_single_job_and_tag_send(self):
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": self.a})
        self.assertEqual(r.status, 201, r)
        done = self.wait_job(r.json["ident"])
        self.assertEqual(done["status"], "terminated", self.history(r.json["ident"]))
        self.assertEqual(done["response"], "pong")
        self.assertEqual(self.history(r.json["ident"]),
                         ["initial", "pending", "transmited", "edge_transmitted",
                          "edge_started", "edge_running", "terminated"])

        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": "nats"})
        self.assertEqual(r.status, 201, r)
        items = r.json["items"]
        self.assertEqual(sorted(j["entity_ident"] for j in items), sorted(self.devs))
        for j in items:
            done = self.wait_job(j["ident"])
            self.assertEqual(done["status"], "terminated", self.history(j["ident"]))
            self.assertEqual(done["response"], "pong")
        for ident in self.devs:
            dev = self.device(ident)
            self.assertTrue(dev["online"], dev)
            self.assertEqual(dev["reported_tags"], ["nats"])

    def test_2_connz_names_the_clients(self):
        ids = [wait_for(lambda: self.cluster.mqtt_client_ids(i), timeout=20,
                        what="MQTT clients on node %d" % (i + 1)) for i in range(3)]
        note("MQTT client ids per node: %r" % ids)
        self.assertIn("rcs-coordinator-" + NODE_ID, ids[0])
        self.assertIn(self.a, ids[1])
        self.assertIn(self.b, ids[2])
        self.assertNotIn(self.a, ids[0] + ids[2])
        self.assertNotIn(self.b, ids[0] + ids[1])

    def test_3_topic_levels_valid_on_nats(self):
        # every level of our topics is a UUID or a fixed word: no '.', no blank, nothing
        # NATS would have to escape or refuse
        self.assertTrue(is_uuid(self.client_root))
        for ident in self.devs:
            self.assertTrue(is_uuid(ident))
            dev = self.device(ident)
            self.assertEqual(dev["client_root"], self.client_root)
        # the subjects NATS made of them: the subscriptions of node 1 (the coordinator's)
        subs = []
        for c in self.cluster.connz(0).get("connections", []):
            subs += c.get("subscriptions_list") or []
        note("node 1 subscriptions: %r" % subs)
        ours = [s for s in subs if s.startswith("rcs.v1.")]
        self.assertIn("rcs.v1.*.*.jobs.*.status", ours)
        self.assertIn("rcs.v1.*.*.state", ours)
        self.assertFalse([s for s in ours if "//" in s or " " in s])

    def test_4_retained_state_kept_by_the_cluster(self):
        # B published its state on node 3: a new client on node 1 gets it as retained
        payload, is_retained = retained(self.n1, self.state_topic(self.b))
        state = json.loads(payload)
        self.assertTrue(is_retained)
        self.assertTrue(state["online"])
        self.assertEqual(state["tags"], ["nats"])
        # node 3 goes down (a crash: no Last Will is published for B, its node is gone)
        self.cluster.stop_node(2)
        # until JetStream has elected new leaders for what node 3 led, a new client's
        # session (even a clean one) is not made and its CONNECT waits: on a loaded
        # machine that took over 60 s once
        payload, _ = wait_for(lambda: self._try_retained(self.n2, self.state_topic(self.b)),
                              timeout=150, interval=1,
                              what="B's state readable on node 2 with node 3 down")
        self.assertEqual(json.loads(payload)["tags"], ["nats"])
        # a job for A still runs meanwhile (nodes 1 and 2)
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": self.a})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.wait_job(r.json["ident"], timeout=90)["status"], "terminated")
        # node 3 back on its store: B reconnects to it, is online and runs a job
        self.cluster.start_node(2, timeout=90)
        wait_for(lambda: self.b in self.cluster.mqtt_client_ids(2), timeout=90,
                 what="B connected to node 3 again")
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": self.b})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.wait_job(r.json["ident"], timeout=90)["status"], "terminated",
                         self.history(r.json["ident"]))
        self.assertTrue(self.device(self.b)["online"])
        # a clean stop: B's offline state is retained on the cluster
        self.assertEqual(self.b_agent.stop(), 0)
        wait_for(lambda: not self.device(self.b)["online"], timeout=40, what="B offline")
        # each node keeps its own copy of the retained messages, fed from the cluster's
        # stream: node 2's copy may follow the coordinator's view by a moment
        wait_for(lambda: self._retained_offline(self.n2, self.state_topic(self.b)), timeout=30,
                 what="B's offline state retained on node 2")

    def _retained_offline(self, node, topic):
        got = self._try_retained(node, topic)
        return got is not None and json.loads(got[0])["online"] is False

    def _try_retained(self, node, topic):
        try:
            return retained(node, topic, timeout=15)
        except (AssertionError, OSError) as e:
            note("%s: %s" % (node.name, e))
            return None


if __name__ == "__main__":
    unittest.main(verbosity=2)
