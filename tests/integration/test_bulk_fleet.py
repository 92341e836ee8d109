#!/usr/bin/env python3
"""A tag send to a simulated fleet of 6,000 devices (tests/bench/fleetsim.c, one MQTT
connection per device, each answering its envelope with its four reports at once) through a
real mosquitto and the coordinator on SQLite.

Checked: every job ends `terminated`, each device got its envelope exactly once, and the
coordinator applied reports while the send was still going on: a bulk send's envelopes go
out a round at a time with the reports received applied between rounds (docs/coordinator.md,
"Bulk sends"), so the first job ends before the last is sent. Sent whole before any report is
applied, a large send held every report in memory until its end, and at 100,000 devices the
reports filled the coordinator's queue (BENCHMARKS.md section 23).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_bulk_fleet.py
RCS_KEEP_TMP=1 keeps the directory.
"""

import os
import sqlite3
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import bench_fanout as bf  # noqa: E402
import rcs_harness as h  # noqa: E402

DEVICES = 6000
WAIT = 300


class BulkFleetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        bf.raise_nofile()
        cls.workdir = tempfile.mkdtemp(prefix="rcs-bulk-fleet-")
        cls.addClassCleanup(h.remove_workdir, cls.workdir)
        cls.db, cls.root, cls.key, cls.task, idf = bf.prepare(cls.workdir, DEVICES)
        cls.broker = bf.start_broker(cls.workdir, DEVICES)
        cls.addClassCleanup(cls.broker.stop)
        cls.coord = h.Coordinator(cls.workdir, db=cls.db,
                                  extra_args=["--mqtt", cls.broker.url])
        cls.coord.start()
        cls.addClassCleanup(cls.coord.stop)
        cls.sim = bf.Fleetsim(cls.workdir, idf, cls.root, cls.broker.port)
        cls.addClassCleanup(lambda: cls.sim.proc.poll() is None and cls.sim.stop())
        cls.sim.wait_ready(WAIT)
        cls.api = cls.coord.api(cls.key)
        h.wait_for(lambda: bf.total(cls.api, "/devices?online=true&per_page=1") >= DEVICES,
                   timeout=WAIT, what="every device online")

    def test_tag_send_applies_reports_while_it_sends(self):
        r = self.api.post("/tasks/%s/jobs/tags" % self.task,
                          {"tag": bf.TAG, "group_name": "bulk-fleet"})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(len(r.json["items"]), DEVICES)
        self.assertEqual(r.json["rejected"], [])
        group = r.json["group"]["ident"]
        path = "/jobs?group_ident=%s&status=terminated&per_page=1" % group
        h.wait_for(lambda: bf.total(self.api, path) >= DEVICES, timeout=WAIT,
                   what="all %d jobs terminated" % DEVICES)
        time.sleep(1)  # a second envelope, were one sent, would have come by now
        self.assertEqual(self.sim.stop()["envelopes"], DEVICES)
        with sqlite3.connect("file:%s?mode=ro" % self.coord.db, uri=True) as db:
            (last_sent,) = db.execute(
                "SELECT max(at) FROM job_history WHERE status = 'transmited'").fetchone()
            (first_end,) = db.execute(
                "SELECT min(at) FROM job_history WHERE status = 'terminated'").fetchone()
            (ends,) = db.execute(
                "SELECT count(*) FROM job_history WHERE status = 'terminated'").fetchone()
        self.assertEqual(ends, DEVICES)
        self.assertLess(first_end, last_sent,
                        "no report was applied before the last envelope was sent")


if __name__ == "__main__":
    unittest.main()
