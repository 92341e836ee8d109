#!/usr/bin/env python3
"""Several brokers and failover (docs/mqtt.md "Several brokers").

Two real mosquitto brokers; a coordinator and a real rcs-agent are both given both URLs
(--mqtt twice; the agent's first from its config file is replaced by its flags). Both land
on broker 1, the first that answers, and a signed job runs to terminated. Broker 1 is
killed by pid (SIGKILL: no clean close); both fail over to broker 2, where the agent's
retained state (online) is published again (checked with a subscriber of broker 2), the
coordinator's /metrics names broker 2, and a job sent then runs to terminated. The
coordinator runs with --events-qos 0: a subscriber of the events feed with QoS 1 receives
them at QoS 0. Agent and coordinator stop cleanly (exit 0), the agent's last state on
broker 2 says offline.

A second coordinator given a broker that does not answer first, then broker 2, connects to
broker 2. A broker list mixing TLS and plain TCP, or naming one broker twice, is refused
at start.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_mqtt_failover.py
"""

import json
import os
import signal
import subprocess
import time
import unittest
import urllib.request

from rcs_fixture import StackTest, note
from rcs_harness import (COORDINATOR, Agent, Coordinator, Watcher, free_port,
                         make_ec_keypair, wait_for)


class FailoverTest(StackTest):
    workdir_prefix = "rcs-failover-"
    check_coordinator = False  # the tests stop it

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        w = cls.workdir
        cls.b1 = cls.start_broker()
        cls.b2 = cls.start_broker()
        cls.key, cls.pub = make_ec_keypair(w, "signing")
        cls.metrics_port = free_port()
        cls.start_coordinator([
            "--mqtt", cls.b1.url, "--mqtt", cls.b2.url, "--signing-key", cls.key,
            "--events-qos", "0", "--metrics-listen", "127.0.0.1:%d" % cls.metrics_port])
        r = cls.admin.post("/tasks", {"name": "echo", "script": "echo"})
        assert r.status == 201, r
        cls.task = r.json
        r = cls.admin.post("/devices", {"name": "failover", "tags": []})
        assert r.status == 201, r
        cls.entity = r.json["entity_ident"]
        # the config file names another broker: the command line's --mqtt replace it
        conf = os.path.join(w, "agent.conf")
        with open(conf, "w") as f:
            f.write("mqtt tcp://127.0.0.1:%d\n" % free_port())
        cls.agent = cls.own(Agent(w, cls.b1.url, cls.client_root, cls.entity,
                                  trusted_keys=[cls.pub], name="agent-failover",
                                  extra_args=["--mqtt", cls.b2.url, "--config", conf]))

    # -- helpers --------------------------------------------------------------------------

    def subscriber(self, broker, topic_filter):
        s = Watcher(broker, topic_filter, prefix="sub-").start()
        self.clients.append(s)
        return s

    def device(self):
        r = self.admin.get("/devices/" + self.entity)
        self.assertEqual(r.status, 200, r)
        return r.json

    def run_job(self):
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": self.entity})
        self.assertEqual(r.status, 201, r)
        ident = r.json["ident"]
        done = wait_for(lambda: self.job(ident)["status"] in
                        ("terminated", "edge_error", "expired", "cancelled") and self.job(ident),
                        timeout=30, what="job %s done" % ident)
        self.assertEqual(done["status"], "terminated", done)
        return done

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            return r.read().decode()

    @staticmethod
    def landed(log, broker, n, of=2):
        return "connected to %s (session new; broker %d of %d)" % (broker.url, n, of) in log

    # -- the test -------------------------------------------------------------------------

    def test_failover_to_the_second_broker(self):
        events = self.subscriber(self.b1, "rcs/v1/%s/events/#" % self.client_root)
        wait_for(lambda: self.landed(self.coord.read_log(), self.b1, 1), timeout=20,
                 what="the coordinator on broker 1")
        self.agent.start()
        wait_for(lambda: self.landed(self.agent.read_log(), self.b1, 1), timeout=20,
                 what="the agent on broker 1")
        self.assertIn("brokers %s, %s" % (self.b1.url, self.b2.url), self.agent.read_log())
        wait_for(lambda: self.device()["online"], timeout=15, what="the device online")
        first = self.run_job()
        self.assertIn('rcs_mqtt_broker{url="%s"} 1' % self.b1.url, self.metrics())

        # --events-qos 0: the events of the job came at QoS 0 to a QoS 1 subscription
        wait_for(lambda: [m for m in events.received() if first["ident"] in m[0]
                          and b'"terminated"' in m[1]], what="the job's final event")
        self.assertEqual({m[2] for m in events.received()}, {0})

        # broker 1 dies without closing anything
        os.kill(self.b1.proc.pid, signal.SIGKILL)
        self.b1.proc.wait()
        wait_for(lambda: self.landed(self.coord.read_log(), self.b2, 2), timeout=30,
                 what="the coordinator on broker 2:\n" + self.coord.read_log()[-2000:])
        wait_for(lambda: self.landed(self.agent.read_log(), self.b2, 2), timeout=30,
                 what="the agent on broker 2")
        self.assertIn("connection to %s lost" % self.b1.url, self.coord.read_log())

        # the agent's retained state was published again on broker 2
        state_topic = "rcs/v1/%s/%s/state" % (self.client_root, self.entity)
        st = self.subscriber(self.b2, state_topic)
        msg = wait_for(lambda: st.received(), what="the retained state on broker 2")[0]
        if not msg[3]:
            # published after this subscription (the agent says it is online once broker 2
            # granted its subscriptions): a new subscription gets it as the retained state
            st = self.subscriber(self.b2, state_topic)
            msg = wait_for(lambda: st.received(), what="the retained state on broker 2")[0]
        self.assertTrue(msg[3], "not retained")
        self.assertTrue(json.loads(msg[1])["online"])
        # on broker 2 (it may be between its first connection there and the one that takes
        # the shared subscription)
        wait_for(lambda: 'rcs_mqtt_broker{url="%s"} 1' % self.b2.url in self.metrics(),
                 timeout=20, what="the coordinator's broker gauge on broker 2")

        # a job sent now reaches the device through broker 2
        events2 = self.subscriber(self.b2, "rcs/v1/%s/events/#" % self.client_root)
        second = self.run_job()
        self.assertEqual(second["response"], first["response"])
        wait_for(lambda: [m for m in events2.received() if second["ident"] in m[0]],
                 what="the second job's events on broker 2")
        self.assertEqual({m[2] for m in events2.received()}, {0})

        # clean stops: the agent says offline (on broker 2), both exit 0
        self.assertEqual(self.agent.stop(), 0, self.agent.read_log())
        wait_for(lambda: any(not json.loads(m[1])["online"] for m in st.received()),
                 what="the agent's offline state on broker 2")
        wait_for(lambda: not self.device()["online"], what="the device offline")
        self.assertEqual(self.coord.stop(), 0, self.coord.read_log())
        note("coordinator: %s" % [l for l in self.coord.read_log().splitlines()
                                  if "connected to" in l or "lost" in l])

    def test_first_broker_down_at_start(self):
        dead = "tcp://127.0.0.1:%d" % free_port()
        c = self.own(Coordinator(self.workdir, db=os.path.join(self.workdir, "second.db"),
                                 extra_args=["--mqtt", dead, "--mqtt", self.b2.url,
                                             "--node-id", "second"]))
        c.start()
        wait_for(lambda: "connected to %s (session new; broker 2 of 2)" % self.b2.url
                 in c.read_log(), timeout=30, what="the second coordinator on broker 2")
        self.assertEqual(c.stop(), 0, c.read_log())

    def test_bad_broker_lists(self):
        for urls, why in ((["tcp://127.0.0.1:1", "ssl://127.0.0.1:2"], "TLS or none"),
                          (["tcp://127.0.0.1:1", "mqtt://127.0.0.1:1"], "given twice"),
                          (["tcp://127.0.0.1:1", "http://127.0.0.1:2"], "expected tcp://")):
            args = [COORDINATOR, "serve", "--db", os.path.join(self.workdir, "x.db"),
                    "--listen", "127.0.0.1:%d" % free_port(), "--check"]
            for u in urls:
                args += ["--mqtt", u]
            p = subprocess.run(args, capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p)
            self.assertIn(why, p.stderr)
        p = subprocess.run([COORDINATOR, "serve", "--db", os.path.join(self.workdir, "x.db"),
                            "--listen", "127.0.0.1:1", "--check",
                            "--mqtt-shared-subscriptions", "sometimes"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("--mqtt-shared-subscriptions", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
