#!/usr/bin/env python3
"""Artifacts end to end (docs/api.md "Artifacts" and "Device downloads", docs/agent.md
"Artifacts", docs/lua-api.md "rcs.artifacts"): a real mosquitto, the real rcs-coordinator
(serve --signing-key --sign-artifacts --device-listen --metrics-listen) and a real rcs-agent
trusting the signing key, whose artifact_url is the coordinator's device listener.

Checked: an artifact uploaded through the API, a task pinning it and a job of that task:
the agent verifies the signed manifest, downloads the artifact with the envelope's token,
hands it to the script as rcs.artifacts (path, size, sha256), the job ends terminated with
them, its record's progress reached the artifact's size, the download audited once; a second
job of the same task downloads nothing (the agent's cache: no byte more served); an agent
killed with -9 in the middle of a larger download (artifact_max_rate) and started again
resumes with a Range: the coordinator serves less than twice the artifact. A group's download
limits (docs/api.md "Download limits") with two real agents: with max_concurrent 1 the second
is answered 429 busy while the first downloads, waits and resumes, and both jobs end
terminated; with max_bytes_per_s the two share the rate (a loose bound).

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_artifacts_e2e.py
"""

import hashlib
import http.client
import json
import os
import re
import signal
import time
import unittest

from rcs_fixture import StackTest
from rcs_harness import Agent, free_port, make_ec_keypair, wait_for

MIB = 1 << 20
DEV_PATH = "/v3/devices/artifacts/"
TERMINAL = ("terminated", "edge_error", "coordinator_error", "cancelled", "expired",
            "timed_out")


class ArtifactsEndToEndTest(StackTest):
    workdir_prefix = "rcs-art-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.device_port = free_port()
        cls.metrics_port = free_port()
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.start_stack(cls.key, coord_args=(
            "--sign-artifacts", "--device-listen", "127.0.0.1:%d" % cls.device_port,
            "--metrics-listen", "127.0.0.1:%d" % cls.metrics_port))

    @classmethod
    def tearDownClass(cls):
        dead = [a.name for a in cls.agents if a.proc is not None and not a.alive()]
        super().tearDownClass()
        if dead:
            raise AssertionError("agents died during the tests: %s" % dead)

    # -- helpers ---------------------------------------------------------------------------

    def upload(self, data, name):
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=60)
        try:
            c.request("POST", "/v3/commands/artifacts?name=" + name, body=data,
                      headers={"api-key": self.admin_key,
                               "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            body = json.loads(r.read())
            self.assertIn(r.status, (200, 201), body)
            return body["ident"]
        finally:
            c.close()

    def agent(self, name, *extra):
        rec = self.class_device(name)
        a = Agent(self.workdir, self.broker.url, self.client_root, rec["entity_ident"],
                  name=name, trusted_keys=[self.pub],
                  extra_args=["--artifact-url", "http://127.0.0.1:%d" % self.device_port,
                              *extra])
        self.agents.append(a)
        a.start(timeout=30)
        self.wait_online(a)
        return a

    def wait_online(self, a, timeout=20):
        wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json.get("online"),
                 timeout=timeout, what="device %s online" % a.name)

    def task(self, source, artifacts):
        name = "s-%s" % os.urandom(4).hex()
        r = self.admin.put("/scripts/" + name, {"source": source})
        self.assertIn(r.status, (200, 201), r)
        r = self.admin.post("/tasks", {"name": name, "script": name, "timeout": 120,
                                       "artifacts": artifacts})
        self.assertEqual(r.status, 201, r)
        self.assertIsNotNone(r.json.get("signature"), r.json)
        return r.json

    def send(self, task, a):
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": a.entity_ident})
        self.assertEqual(r.status, 201, r)
        return r.json["ident"]

    def wait_job(self, ident, timeout=60):
        return wait_for(lambda: (lambda j: j if j["status"] in TERMINAL else None)(
            self.job(ident)), timeout=timeout, what="job %s ended" % ident)

    def served(self):
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        finally:
            c.close()
        for line in text.splitlines():
            if line.startswith('rcs_artifact_bytes_total{direction="served"}'):
                return int(line.split()[-1])
        raise AssertionError("no served bytes in the metrics")

    def downloads_audited(self, job, sha):
        items = self.admin.get("/audit?target=" + job).json["items"]
        return [a for a in items if a["path"] == DEV_PATH + sha]

    # -- the tests -------------------------------------------------------------------------

    def test_download_verify_run_then_cache(self):
        a = self.agent("basic")
        data = os.urandom(3 * MIB + 5)
        sha = hashlib.sha256(data).hexdigest()
        ident = self.upload(data, "fw.bin")
        self.assertEqual(ident, "sha256:" + sha)
        task = self.task("local f = rcs.artifacts.firmware\n"
                         "return {path = f.path, size = f.size, sha256 = f.sha256}",
                         {"firmware": ident})
        before = self.served()
        job = self.send(task, a)
        rec = self.wait_job(job)
        self.assertEqual(rec["status"], "terminated", (rec, a.read_log()))
        out = json.loads(rec["response"])
        self.assertEqual((out["size"], out["sha256"]), (len(data), sha))
        with open(out["path"], "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), sha)
        self.assertEqual(rec["progress"], {"done": len(data), "total": len(data)})
        self.assertEqual(len(self.downloads_audited(job, sha)), 1)
        wait_for(lambda: self.served() >= before + len(data), timeout=10,
                 what="the bytes served counted")
        after = self.served()
        self.assertLess(after - before, 2 * len(data))

        # the same task again: from the agent's cache, nothing served
        job2 = self.send(task, a)
        rec2 = self.wait_job(job2)
        self.assertEqual(rec2["status"], "terminated", (rec2, a.read_log()))
        self.assertEqual(json.loads(rec2["response"])["sha256"], sha)
        self.assertEqual(self.served(), after)
        self.assertEqual(self.downloads_audited(job2, sha), [])

    def test_resume_after_kill_9(self):
        a = self.agent("killed", "--artifact-max-rate", str(2 * MIB))
        data = os.urandom(12 * MIB)
        sha = hashlib.sha256(data).hexdigest()
        ident = self.upload(data, "image.bin")
        task = self.task("return rcs.artifacts.image.sha256", {"image": ident})
        part = os.path.join(a.state_dir, "artifacts", sha + ".part")

        def part_size():
            try:
                return os.path.getsize(part)
            except OSError:
                return 0
        before = self.served()
        job = self.send(task, a)
        wait_for(lambda: part_size() >= 6 * MIB, timeout=30, what="half the download")
        a.stop(signal.SIGKILL)
        self.assertLess(part_size(), len(data))
        # what was served until the connection was gone (the socket buffers included)
        last = [-1, -2]

        def settled():
            last[:] = [last[1], self.served()]
            time.sleep(0.3)
            return last[0] == last[1]
        wait_for(settled, timeout=15, what="the served bytes settled")
        at_cut = last[1]
        self.assertGreater(at_cut - before, 4 * MIB)
        mark = len(a.read_log(tail=None))
        a.start(timeout=30)
        rec = self.wait_job(job, timeout=60)
        self.assertEqual((rec["status"], rec["response"]), ("terminated", sha),
                         (rec, a.read_log()))
        self.assertEqual(rec["progress"], {"done": len(data), "total": len(data)})
        log = a.read_log(tail=None)[mark:]
        m = re.search(r"artifact image \(%s\): resumed at (\d+) of %d bytes" % (sha, len(data)),
                      log)
        self.assertIsNotNone(m, log)
        resumed_at = int(m.group(1))
        self.assertGreaterEqual(resumed_at, 4 * MIB)   # journaled every 4 MiB at least
        # the coordinator served a Range from there: the rest of the artifact, nothing more
        wait_for(lambda: self.served() >= at_cut + len(data) - resumed_at, timeout=10,
                 what="the bytes served counted")
        self.assertEqual(self.served() - at_cut, len(data) - resumed_at)
        self.assertLess(self.served() - before, 2 * len(data))
        self.assertEqual(len(self.downloads_audited(job, sha)), 1)


    def group_send(self, task, agents, download):
        r = self.admin.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": [a.entity_ident for a in agents],
                             "download": download})
        self.assertEqual(r.status, 201, r)
        by_dev = {j["entity_ident"]: j["ident"] for j in r.json["items"]}
        return [by_dev[a.entity_ident] for a in agents]

    def test_group_max_concurrent(self):
        """Two agents of a group downloading one at a time: the second waits, then
        downloads; both jobs terminated."""
        agents = [self.agent("one-at-a-time-%d" % i, "--artifact-max-rate", str(2 * MIB))
                  for i in range(2)]
        data = os.urandom(4 * MIB)
        sha = hashlib.sha256(data).hexdigest()
        task = self.task("return rcs.artifacts.fw.sha256", {"fw": self.upload(data, "fw")})
        jobs = self.group_send(task, agents, {"max_concurrent": 1})
        recs = [self.wait_job(j, timeout=120) for j in jobs]
        for a, rec in zip(agents, recs):
            self.assertEqual((rec["status"], rec["response"]), ("terminated", sha),
                             (rec, a.read_log()))
            self.assertEqual(rec["progress"], {"done": len(data), "total": len(data)})
        # one of them was held back (429 busy) while the other downloaded, and waited
        logs = [a.read_log(tail=None) for a in agents]
        held = [log for log in logs if re.search(r"artifact fw: HTTP 429 at \d+ of %d bytes"
                                                 % len(data), log)]
        self.assertEqual(len(held), 1, logs)

    def test_group_rate_shared(self):
        """Two agents of a group at 1 MiB/s between them fetch 3 MiB each: about 5 s."""
        agents = [self.agent("paced-%d" % i) for i in range(2)]
        data = os.urandom(3 * MIB)
        sha = hashlib.sha256(data).hexdigest()
        task = self.task("return rcs.artifacts.img.sha256", {"img": self.upload(data, "img")})
        started = time.monotonic()
        jobs = self.group_send(task, agents, {"max_bytes_per_s": MIB})
        recs = [self.wait_job(j, timeout=120) for j in jobs]
        took = time.monotonic() - started
        for a, rec in zip(agents, recs):
            self.assertEqual((rec["status"], rec["response"]), ("terminated", sha),
                             (rec, a.read_log()))
        # 6 MiB at 1 MiB/s, a second's worth at once: 5 s, with room for slow machines
        self.assertGreater(took, 3.5, took)


if __name__ == "__main__":
    unittest.main()
