#!/usr/bin/env python3
"""Several threads publishing on one MQTT client at once lose nothing.

The coordinator publishes from several threads on its one client (the MQTT bridge's worker
sends envelopes, its event publisher sends job events, the HTTP threads send the envelope of
a job they created), and so does the agent. paho 1.3.11 loses a QoS 1 message now and then
when two threads call it at once; common/mqttc.c sends one request at a time per client.

mqttc_stress (tests/integration/mqttc_stress.c) publishes from N threads on one client of
common/mqttc.c to a real mosquitto started here, while a second client counts what arrives.
Without the lock, 4 threads x 5,000 messages lost 8-10 of them on every run.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_mqttc_concurrency.py
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from rcs_harness import BIN_DIR, Mosquitto

STRESS = os.path.join(BIN_DIR, "mqttc_stress")


class ConcurrentPublishTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="rcs-mqttc-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.broker = Mosquitto(self.workdir, persistence=False).start()
        self.addCleanup(self.broker.stop)

    def stress(self, threads, messages, env=None, out=None, window=1000, qos=1):
        p = subprocess.run([STRESS, "--url", self.broker.url, "--threads", str(threads),
                            "--messages", str(messages), "--timeout", "60",
                            "--window", str(window), "--qos", str(qos)],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, **(env or {})))
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        self.assertTrue(lines, "mqttc_stress printed no result (rc %d): %s" % (
            p.returncode, p.stderr[-2000:]))
        res = json.loads(lines[-1])
        if out is not None:
            out.extend(ln for ln in p.stdout.splitlines() if not ln.startswith("{"))
        return p.returncode, res

    def test_paho_trace_only_on_request(self):
        """paho's trace is off (docs/coordinator.md, after the options) unless
        MQTT_C_CLIENT_TRACE asks for it; then its level is the user's."""
        quiet, traced = [], []
        env = {k: "" for k in ("MQTT_C_CLIENT_TRACE", "MQTT_C_CLIENT_TRACE_LEVEL")}
        rc, res = self.stress(1, 20, env=env, out=quiet)
        self.assertEqual((rc, res["missing"]), (0, 0), res)
        self.assertEqual(quiet, [])
        rc, res = self.stress(1, 20, out=traced, env={"MQTT_C_CLIENT_TRACE": "ON",
                                                      "MQTT_C_CLIENT_TRACE_LEVEL": "PROTOCOL"})
        self.assertEqual((rc, res["missing"]), (0, 0), res)
        self.assertTrue([ln for ln in traced if "PUBLISH" in ln],
                        "no PUBLISH in paho's trace: %r" % traced[:20])

    def test_one_thread(self):
        rc, res = self.stress(1, 5000)
        self.assertEqual((rc, res["missing"], res["refused"]), (0, 0, 0), res)

    def test_four_threads_lose_nothing(self):
        for run in range(3):
            rc, res = self.stress(4, 5000)
            self.assertEqual(res["published"], 20000, res)
            self.assertEqual(res["missing"], 0, "run %d: %r" % (run, res))
            self.assertEqual(rc, 0, res)

    def test_small_window_never_waits_for_paho(self):
        """common/mqttc.c keeps the window of unacknowledged QoS 1 messages itself
        (docs/coordinator.md, option mqtt_window): paho does not wake its sending thread
        when an acknowledgement makes room in its own window, so a message that waited there
        sat up to a second (with a window of 8, 8,000 messages took 17 s instead of 0.4 s;
        these 32,000 would not arrive within the 60 s the tool waits)."""
        for window in (1, 8):
            rc, res = self.stress(4, 8000, window=window)
            self.assertEqual(res["published"], 32000, res)
            self.assertEqual(res["missing"], 0, "window %d: %r" % (window, res))
            self.assertEqual(rc, 0, res)

    def test_qos0_burst_never_stalls(self):
        """QoS 0 publishes faster than paho's sending thread writes them (the coordinator's
        events with events_qos 0 in a large send) fill paho's queue of requests: the client
        then says RCS_ERR_FULL, and the publisher waits for room. Nothing at QoS 0 is ever
        acknowledged: the wait must end as soon as paho's queue has room, not after the 2 s
        that would have the coordinator drop the event (docs/mqtt.md, "Events QoS").
        Before, each of these runs stalled (a wait that ended without room) at least once."""
        for run in range(2):
            rc, res = self.stress(4, 20000, qos=0)
            self.assertEqual(res["published"], 80000, res)
            self.assertEqual(res["stalls"], 0, "run %d: %r" % (run, res))
            self.assertEqual(res["missing"], 0, "run %d: %r" % (run, res))
            self.assertEqual(rc, 0, res)

    def test_qos0_burst_leaves_the_window_open(self):
        """QoS 0 and QoS 1 publishes at once on one client with a small window: the queued
        QoS 0 ones take no place in the window when it is counted again from paho's list
        (common/mqttc.c, mqttc_pending). Counted, they held the window shut and the QoS 1
        publishers stalled, 2 s each."""
        rc, res = self.stress(4, 20000, window=8, qos="mixed")
        self.assertEqual(res["published"], 80000, res)
        self.assertEqual(res["stalls"], 0, res)
        self.assertEqual(res["missing"], 0, res)
        self.assertEqual(rc, 0, res)


if __name__ == "__main__":
    unittest.main(verbosity=2)
