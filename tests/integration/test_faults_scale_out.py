#!/usr/bin/env python3
"""Fault injection on the scaled-out shape, CI-sized: every scenario of tests/fault/faults.py
that the scale-out shape takes, once, with one seed and few devices (the full multi-seed
runs: tests/fault/faults.py --shape scale-out --seeds N --devices 1000).

The shape of docs/scale-out.md: two rcs-coordinators (node ids n1 and n2, a 5 s lease) on
one PostgreSQL database (pg_server.py) and a 3-node NATS cluster with MQTT (nats_cluster.py),
every client given every node's URL; real rcs-agents, simulated devices (tests/fault/
devsim.py, spread over the nodes) and an aiosmtpd server. Faults: kill -9 of one of the two
coordinators during a tag send (the other keeps serving); kill -9 and SIGSTOP of one NATS
node during sends and reports; kill -9 of agents mid-script and before their report was
acknowledged (their node stopped or killed); PostgreSQL's data directory on a full tmpfs
(skipped when mount is not permitted); the SMTP server down with a coordinator killed
meanwhile. Invariants after each: every accepted job ends in exactly one terminal status, no
device runs a job twice, history only moves forward, nothing accepted is lost (see
tests/fault/faults.py, which also says why clock-jump and agent-disk-full are not run in
this shape).

Skipped when nats-server or PostgreSQL's server is not installed (tools/deps.sh test).
Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_faults_scale_out.py
RCS_FAULT_SEED=N picks another seed; RCS_KEEP_TMP=1 keeps the work directories.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
import faults  # noqa: E402
from test_faults import check_scenario  # noqa: E402

SEED = int(os.environ.get("RCS_FAULT_SEED", "1"))
MISSING = faults.scale_out_missing()


@unittest.skipIf(MISSING, MISSING or "")
class ScaleOutFaultInjectionTest(unittest.TestCase):

    def scenario(self, name, **kw):
        check_scenario(self, name, SEED, "scale-out", **kw)

    def test_coordinator_kill9_during_bulk_send(self):
        self.scenario("coordinator-kill", devices=40)

    def test_nats_node_kill9_and_sigstop(self):
        self.scenario("broker", devices=30)

    def test_agent_kill9(self):
        self.scenario("agent-kill", agents=2)

    def test_database_full(self):
        self.scenario("db-full")

    def test_smtp_down(self):
        self.scenario("smtp")

    def test_refused_scenarios(self):
        for name in faults.SCALE_OUT_REFUSED:
            with self.assertRaises(ValueError) as cm:
                faults.run_scenario(name, SEED, shape="scale-out")
            self.assertIn("does not run in the scale-out shape", str(cm.exception))


if __name__ == "__main__":
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    unittest.main(verbosity=2)
