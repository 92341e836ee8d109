#!/usr/bin/env python3
"""A tag send to a simulated fleet of 6,000 devices (tests/bench/fleetsim.c, one MQTT
connection per device, each answering its envelope with its four reports at once) through a
real mosquitto and the coordinator on SQLite.

Checked: every job ends `terminated`, each device got its envelope exactly once, and the
coordinator applied reports while the send was still going on: a bulk send's envelopes go
out a round at a time with the reports received applied between rounds (docs/coordinator.md,
"Bulk sends"), so the first job ends before the last is sent. The order is read from the
job events (docs/mqtt.md, `rcs/v1/<client_root>/events/jobs/<job>`), which the coordinator
publishes in the order it commits the moves: a `terminated` comes before the last
`transmited`. The history's times are whole seconds, and a fast machine sends and ends all
6,000 jobs within one. Sent whole before any report is applied, a large send held every
report in memory until its end, and at 100,000 devices the reports filled the
coordinator's queue (BENCHMARKS.md section 23).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_bulk_fleet.py
RCS_KEEP_TMP=1 keeps the directory.
"""

import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
import unittest

import paho.mqtt.client as mqtt

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

    def watch_events(self):
        """Subscribes to the job events; returns the list their statuses go into, in the
        order the broker delivers them (appended by paho's thread alone)."""
        statuses, granted, ready = [], [], threading.Event()

        def on_subscribe(c, u, mid, qos):
            granted.extend(qos)
            ready.set()
        cl = mqtt.Client(client_id="bulk-fleet-events", clean_session=True)
        cl.on_connect = lambda c, u, f, rc: c.subscribe(
            "rcs/v1/%s/events/jobs/+" % self.root, 1)
        cl.on_subscribe = on_subscribe
        cl.on_message = lambda c, u, msg: statuses.append(json.loads(msg.payload)["status"])
        cl.connect("127.0.0.1", self.broker.port, keepalive=30)
        cl.loop_start()
        self.addCleanup(cl.loop_stop)
        self.addCleanup(cl.disconnect)
        self.assertTrue(ready.wait(10), "no SUBACK for the job events")
        self.assertEqual(granted, [1], "the job events' subscription was refused")
        return statuses

    def test_tag_send_applies_reports_while_it_sends(self):
        events = self.watch_events()
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
            (ends,) = db.execute(
                "SELECT count(*) FROM job_history WHERE status = 'terminated'").fetchone()
        self.assertEqual(ends, DEVICES)
        h.wait_for(lambda: events.count("terminated") >= DEVICES, timeout=60,
                   what="every job's terminated event")
        seen = list(events)
        self.assertEqual(seen.count("transmited"), DEVICES, "a transmited event is missing")
        first_end = seen.index("terminated")
        last_sent = len(seen) - 1 - seen[::-1].index("transmited")
        self.assertLess(first_end, last_sent,
                        "no report was applied before the last envelope was sent")


if __name__ == "__main__":
    unittest.main()
