#!/usr/bin/python3
"""Jobs that span a reboot, on the coordinator's side (docs/api.md "Jobs", docs/mqtt.md
"Status report"): a real mosquitto and coordinator, devices simulated with paho
(FakeDevice, no automatic answers) that report phases and a "rebooting" report with
within = 30.

- A device that goes silent after "rebooting": its job becomes edge_error reboot_timeout
  ("device did not come back within 30 s") after about 30 s, not before; the reports it
  sends later are kept in the history, the job unchanged, and no cancel is sent for them.
- A device that reports its next phase in time: its job ends terminated with its phase shown
  (the record, each history item, the events, `rcs jobs show` and `rcs jobs history`).
- A job cancelled between its phases is cancelled and the cancel delivered.
- The coordinator stopped while a device reboots: the deadline counts from its start again.
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcs_harness import BIN_DIR, FakeDevice, wait_for  # noqa: E402
from rcs_fixture import CoordinatorTest  # noqa: E402

RCS = os.path.join(BIN_DIR, "rcs")
WITHIN = 30


class Events:
    """Records the job events of a tenant (paho), as payload dicts."""

    def __init__(self, broker, topic_filter):
        import paho.mqtt.client as mqtt
        self.items = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.client = mqtt.Client(client_id="ev-%d-%f" % (os.getpid(), time.time()))
        self.client.on_connect = lambda c, u, f, rc: (c.subscribe(topic_filter, 1),
                                                      self.ready.set())
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", broker.port, keepalive=5)
        self.client.loop_start()
        self.ready.wait(10)
        time.sleep(0.3)  # the subscription is acknowledged

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.items.append(json.loads(msg.payload))

    def of(self, job):
        with self.lock:
            return [e for e in self.items if e.get("ident") == job]

    def stop(self):
        self.client.loop_stop()
        self.client.disconnect()


class RebootPhasesTest(CoordinatorTest):
    workdir_prefix = "rcs-phases-"

    @classmethod
    def setUpClass(cls):
        super(CoordinatorTest, cls).setUpClass()  # the broker first
        cls.start_broker()
        cls.start_coordinator(["--mqtt", cls.broker.url], connected="status reports: ")
        cls.events = Events(cls.broker, "rcs/v1/%s/events/jobs/+" % cls.client_root)
        cls.clients.append(cls.events)
        cls.url = "http://127.0.0.1:%d" % cls.coord.port

    def device(self, name):
        ident = self.make_device(name=name)["entity_ident"]
        fake = FakeDevice(self.broker, self.client_root, ident, auto=False).start()
        self.fakes.append(fake)
        wait_for(lambda: self.admin.get("/devices/" + ident).json["online"], timeout=10,
                 what="device online")
        return ident, fake

    def send(self, task, ident, fake):
        r = self.admin.post("/tasks/%s/jobs" % task, {"entity_ident": ident})
        self.assertStatus(r, 201)
        job = r.json["ident"]
        wait_for(lambda: job in fake.jobs_received(), timeout=10, what="envelope received")
        return job

    def to_reboot(self, fake, job):
        """The first run: install, then "rebooting" into verify with within (its time)."""
        fake.report(job, "edge_transmitted")
        fake.report(job, "edge_started")
        fake.report(job, "edge_running", "writing the image", phase="install")
        t = time.time()
        fake.report(job, "edge_running", "rebooting", phase="verify", within=WITHIN)
        wait_for(lambda: self.job(job)["response"] == "rebooting", timeout=10,
                 what="the rebooting report applied")
        return t

    def history(self, job):
        r = self.admin.get("/jobs/%s/history?sort=update_at" % job)
        self.assertStatus(r, 200)
        return r.json["items"]

    def rcs(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCS_")}
        env.update(RCS_URL=self.url, RCS_API_KEY=self.admin_key, HOME=self.workdir,
                   TERM="dumb")
        p = subprocess.run([RCS, *args], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_1_silent_device_times_out_and_one_in_time_ends(self):
        task = self.make_task(name="update-1")["ident"]
        silent, fs = self.device("silent")
        back, fb = self.device("back")
        held, fh = self.device("held")
        ja = self.send(task, silent, fs)
        jb = self.send(task, back, fb)
        jc = self.send(task, held, fh)
        t_a = self.to_reboot(fs, ja)
        self.to_reboot(fb, jb)
        self.to_reboot(fh, jc)
        rec = self.job(ja)
        self.assertEqual((rec["status"], rec["phase"]), ("edge_running", "verify"))

        # the device that came back in time: its next phase, then its end
        time.sleep(2)
        fb.report(jb, "edge_running", "checking health", phase="verify")
        fb.report(jb, "terminated", "running 4.2.0", phase="verify")
        wait_for(lambda: self.job(jb)["status"] == "terminated", timeout=10,
                 what="the job that came back terminated")
        rec = self.job(jb)
        self.assertEqual(rec["phase"], "verify")
        self.assertIsNone(rec["error_code"])
        phases = [(h["status"], h["response"], h["phase"]) for h in self.history(jb)]
        self.assertEqual(phases[-4:], [
            ("edge_running", "writing the image", "install"),
            ("edge_running", "rebooting", "verify"),
            ("edge_running", "checking health", "verify"),
            ("terminated", "running 4.2.0", "verify"),
        ])
        self.assertEqual(phases[0][2], None)
        wait_for(lambda: any(e["status"] == "terminated" and e["phase"] == "verify"
                             for e in self.events.of(jb)), timeout=10, what="the end's event")
        self.assertTrue(any(e["phase"] == "install" for e in self.events.of(jb)))
        out = self.rcs("jobs", "show", jb)
        self.assertRegex(out, r"(?m)^phase\s+verify$")
        out = self.rcs("jobs", "history", jb)
        self.assertEqual(out.splitlines()[0].split(), ["TIME", "PHASE", "STATUS", "RESPONSE"])
        self.assertIn("install", out)

        # a job cancelled between its phases: cancelled at once, the cancel delivered; what
        # its device says afterwards is history only
        r = self.admin.patch("/jobs/%s/cancel" % jc, {"reason": "wrong image"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")
        wait_for(lambda: any(c["job"] == jc for c in fh.cancels), timeout=10,
                 what="the cancel delivered")
        fh.report(jc, "edge_running", "checking health", phase="verify")
        wait_for(lambda: len(self.history(jc)) == 9, timeout=10, what="the late report kept")
        self.assertEqual(self.job(jc)["status"], "cancelled")

        # the silent one: not before its 30 s, then reboot_timeout
        wait_for(lambda: self.job(ja)["status"] != "edge_running", timeout=WITHIN + 30,
                 interval=0.5, what="the silent device's job ended")
        rec = self.job(ja)
        self.assertEqual(rec["status"], "edge_error", rec)
        self.assertEqual(rec["error_code"], "reboot_timeout")
        self.assertEqual(rec["response"], "device did not come back within %d s" % WITHIN)
        self.assertEqual(rec["phase"], "verify")
        waited = rec["response_time"] - t_a
        self.assertGreaterEqual(waited, WITHIN - 1.5, rec)
        self.assertLess(waited, WITHIN + 10, rec)
        wait_for(lambda: any(e["status"] == "edge_error" and
                             e["error_code"] == "reboot_timeout" and e["phase"] == "verify"
                             for e in self.events.of(ja)), timeout=10,
                 what="the reboot_timeout event")
        n = len(self.history(ja))
        # it comes back late: history only, the job as it was, no cancel for it
        fs.report(ja, "edge_running", "checking health", phase="verify")
        fs.report(ja, "terminated", "running 4.2.0", phase="verify")
        wait_for(lambda: len(self.history(ja)) == n + 2, timeout=10,
                 what="the late reports kept")
        late = self.history(ja)[-2:]
        self.assertEqual([(h["status"], h["response"]) for h in late],
                         [("edge_running", "checking health"), ("terminated", "running 4.2.0")])
        rec = self.job(ja)
        self.assertEqual((rec["status"], rec["error_code"], rec["response"]),
                         ("edge_error", "reboot_timeout",
                          "device did not come back within %d s" % WITHIN))
        time.sleep(1)
        self.assertEqual([c for c in fs.cancels if c["job"] == ja], [])
        self.assertIn("reboot_timeout", self.rcs("jobs", "show", ja))

    def test_2_coordinator_downtime_never_fails_a_device(self):
        task = self.make_task(name="update-2")["ident"]
        ident, fake = self.device("during-restart")
        job = self.send(task, ident, fake)
        self.to_reboot(fake, job)
        time.sleep(3)
        cls = type(self)
        self.assertEqual(cls.coord.stop(), 0)
        time.sleep(12)
        cls.replace_coordinator(["--mqtt", cls.broker.url])
        started = time.time()
        wait_for(lambda: "status reports: " in cls.coord_log(), timeout=20,
                 what="the new coordinator connected")
        wait_for(lambda: self.job(job)["status"] != "edge_running", timeout=WITHIN + 30,
                 interval=0.5, what="the job ended")
        rec = self.job(job)
        self.assertEqual((rec["status"], rec["error_code"]), ("edge_error", "reboot_timeout"))
        # counted from the coordinator's start, not from the report 15 s before it
        self.assertGreaterEqual(rec["response_time"], started + WITHIN - 1.5, rec)


if __name__ == "__main__":
    unittest.main(verbosity=2)
