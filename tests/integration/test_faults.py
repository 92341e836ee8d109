#!/usr/bin/env python3
"""Fault injection, CI-sized: every scenario of tests/fault/faults.py once, with one seed and
fewer devices (the full multi-seed runs: tests/fault/faults.py --seeds N --devices 1000).

Real mosquitto, rcs-coordinator, rcs-agents, simulated devices (tests/fault/devsim.py) and
an aiosmtpd server on free loopback ports; faults: kill -9 of the coordinator during a
200-device tag send; kill -9 and SIGSTOP of the broker during sends and reports; kill -9 of
agents mid-script and before their report was acknowledged; the coordinator's database and
the agent's state directory on a full tmpfs (skipped when mount is not permitted); clock
jumps around scheduled_time through libfaketime (skipped when it is not installed); the
SMTP server down, refusing, back. Invariants checked after each: every accepted job ends in
exactly one terminal status, no device runs a job twice, history only moves forward, no
accepted job is lost (see tests/fault/faults.py).

Run (as root for the tmpfs scenarios; Debian's python3):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_faults.py
RCS_FAULT_SEED=N picks another seed; RCS_KEEP_TMP=1 keeps the work directories;
RCS_NO_SKIP=1 (set by .ci/run) makes a scenario that cannot run here a failure.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))
import faults  # noqa: E402

SEED = int(os.environ.get("RCS_FAULT_SEED", "1"))


def check_scenario(test, name, seed, shape, **kw):
    """Runs fault scenario name with seed on shape (faults.py --shape) and fails test with
    the violations and the command that repeats the run; a scenario that cannot run is
    skipped, or fails where CI sets RCS_NO_SKIP=1."""
    res = faults.run_scenario(name, seed, shape=shape, **kw)
    if res["skipped"]:
        if os.environ.get("RCS_NO_SKIP") == "1":
            test.fail("fault scenario %s could not run: %s" % (name, res["skipped"]))
        test.skipTest(res["skipped"])
    if not res["ok"]:
        args = " ".join("--%s %s" % kv for kv in sorted(kw.items()))
        shown = "\n".join("- " + v for v in res["violations"][:15])
        more = len(res["violations"]) - 15
        test.fail("fault scenario %s (%s), seed %d: %d invariant violation(s):\n%s%s\n"
                  "stats: %s\nrepeat with: RCS_BIN_DIR=build/bin /usr/bin/python3 "
                  "tests/fault/faults.py --shape %s --scenarios %s --first-seed %d "
                  "--seeds 1 %s" % (
                      name, shape, seed, len(res["violations"]), shown,
                      "\n- ... %d more" % more if more > 0 else "", res["stats"], shape,
                      name, seed, args))


class FaultInjectionTest(unittest.TestCase):

    def scenario(self, name, **kw):
        check_scenario(self, name, SEED, "single", **kw)

    def test_coordinator_kill9_during_bulk_send(self):
        self.scenario("coordinator-kill", devices=200)

    def test_broker_kill9_and_sigstop(self):
        self.scenario("broker", devices=100)

    def test_agent_kill9(self):
        self.scenario("agent-kill", agents=2)

    def test_coordinator_database_full(self):
        self.scenario("db-full")

    def test_agent_state_dir_full(self):
        self.scenario("agent-disk-full")

    def test_clock_jumps(self):
        self.scenario("clock-jump")

    def test_smtp_down(self):
        self.scenario("smtp")


if __name__ == "__main__":
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    unittest.main()
