#!/usr/bin/env python3
"""Integration tests of the devices' artifact downloads (docs/api.md, "Device downloads";
docs/mqtt.md, "Job envelope") on a real mosquitto and rcs-coordinator: the envelope of a job
whose task pins artifacts carries them and an artifact_token (never in the job's record or
event); GET /v3/devices/artifacts/<sha256> with that token answers the bytes, with Range and
If-Range (a download resumed), 401 for a bad or missing token, 404 for an artifact the job
does not pin or a token of another job, 410 once the job has ended; the bytes served per job
are capped at 3x its artifacts' size (429); the first download of each artifact of a job is
audited once; the metrics count the bytes served; --device-listen serves that route and
nothing else. A group's download limits (docs/api.md, "Download limits"): with
max_concurrent 1 a second device gets 429 busy with Retry-After while the first downloads, and
its download once the first is done; max_bytes_per_s paces the group's devices together (a
loose bound), and the API stays quick meanwhile.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_device_downloads.py
"""

import hashlib
import http.client
import json
import os
import threading
import time
import unittest

import test_openapi as oa  # docs/openapi.json and its validator
from rcs_fixture import StackTest
from rcs_harness import FakeDevice, free_port, run_cli, wait_for

DEV_PATH = "/v3/devices/artifacts/"


class DeviceDownloadsBase(StackTest):
    """A mosquitto, a coordinator with --device-listen and --metrics-listen, three
    artifacts and a task pinning two of them; helpers."""
    workdir_prefix = "rcs-devdl-"
    device_port = free_port()
    metrics_port = free_port()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.start_stack(coord_args=("--device-listen", "127.0.0.1:%d" % cls.device_port,
                                    "--metrics-listen", "127.0.0.1:%d" % cls.metrics_port))
        cls.fw = os.urandom(300000)
        cls.notes = b"release notes\n"
        cls.fw_id = cls.upload(cls.fw, "fw.bin")
        cls.notes_id = cls.upload(cls.notes, "notes")
        cls.other_id = cls.upload(b"not pinned", "other")
        r = cls.admin.post("/tasks", {"name": "update", "script": "echo",
                                      "artifacts": {"firmware": cls.fw_id,
                                                    "notes.txt": cls.notes_id},
                                      "release": {"stream": "stable", "seq": 3},
                                      "download_timeout": 600})
        assert r.status == 201, r
        cls.task = r.json
        cls.fakes = []

    @classmethod
    def tearDownClass(cls):
        for d in cls.fakes:
            try:
                d.stop()
            except Exception:
                pass
        super().tearDownClass()

    @classmethod
    def upload(cls, data, name):
        c = http.client.HTTPConnection("127.0.0.1", cls.coord.port, timeout=30)
        try:
            c.request("POST", "/v3/commands/artifacts?name=" + name, body=data,
                      headers={"api-key": cls.admin_key,
                               "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            body = json.loads(r.read())
            assert r.status in (200, 201), body
            return body["ident"]
        finally:
            c.close()

    def get(self, sha, token, port=None, headers=None, path=None):
        """GET of the device route (or path) on port (the main listener's by default):
        (status, headers, body)."""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        c = http.client.HTTPConnection("127.0.0.1", port or self.coord.port, timeout=30)
        try:
            c.request("GET", path or DEV_PATH + sha, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def device_job(self):
        """A new device (a FakeDevice that does not answer) with a job of the task: the
        device, the job's ident and the envelope it received."""
        dev = self.class_device()
        fake = FakeDevice(self.broker, self.client_root, dev["entity_ident"], auto=False).start()
        self.fakes.append(fake)
        wait_for(lambda: self.admin.get("/devices/" + dev["entity_ident"]).json.get("online"),
                 timeout=15, what="the device online")
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"],
                            {"entity_ident": dev["entity_ident"]})
        self.assertEqual(r.status, 201, r)
        job = r.json["ident"]
        wait_for(lambda: job in fake.jobs_received(), timeout=15, what="the envelope")
        env = [e for e in fake.envelopes if e["job"] == job][0]
        return fake, job, env

    def served_bytes(self):
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



class DeviceDownloadsTest(DeviceDownloadsBase):
    def test_envelope_download_resume_and_end(self):
        fake, job, env = self.device_job()
        sha_fw = self.fw_id[len("sha256:"):]
        self.assertEqual(env["artifacts"], {
            "firmware": {"sha256": sha_fw, "size": len(self.fw)},
            "notes.txt": {"sha256": self.notes_id[len("sha256:"):], "size": len(self.notes)}})
        self.assertEqual(env["release"], {"stream": "stable", "seq": 3, "device_types": [],
                                          "allow_downgrade": False})
        self.assertEqual(env["download_timeout"], 600)
        token = env["artifact_token"]
        self.assertRegex(token, r"^rcs1\.[A-Za-z0-9_-]+$")
        # the token is the envelope's only: not in the job's record nor its history
        self.assertNotIn(token, json.dumps(self.admin.get("/jobs/" + job).json))
        self.assertNotIn(token, json.dumps(self.admin.get("/jobs/%s/history" % job).json))

        before = self.served_bytes()
        st, h, body = self.get(sha_fw, token)
        self.assertEqual(st, 200, body[:200])
        self.assertEqual(hashlib.sha256(body).hexdigest(), sha_fw)
        self.assertEqual(h["etag"], '"%s"' % sha_fw)
        self.assertEqual(h["accept-ranges"], "bytes")
        # a download cut at 100000 bytes resumes from there
        st, h, rest = self.get(sha_fw, token, headers={"Range": "bytes=100000-",
                                                       "If-Range": '"%s"' % sha_fw})
        self.assertEqual(st, 206)
        self.assertEqual(h["content-range"], "bytes 100000-%d/%d" % (len(self.fw) - 1,
                                                                       len(self.fw)))
        self.assertEqual(self.fw[:100000] + rest, self.fw)
        # an If-Range of other bytes: the whole
        sha_notes = self.notes_id[len("sha256:"):]
        st, _, whole = self.get(sha_notes, token, headers={"Range": "bytes=5-9",
                                                           "If-Range": '"%s"' % ("0" * 64)})
        self.assertEqual((st, whole), (200, self.notes))
        st, h, _ = self.get(sha_fw, token, headers={"Range": "bytes=%d-" % len(self.fw)})
        self.assertEqual((st, h["content-range"]), (416, "bytes */%d" % len(self.fw)))
        wait_for(lambda: self.served_bytes() >= before + 2 * len(self.fw) - 100000,
                 timeout=10, what="the bytes served counted")

        # the same route on the device listener
        st, _, body = self.get(sha_fw, token, port=self.device_port)
        self.assertEqual((st, body), (200, self.fw))

        # bad tokens
        self.assertEqual(self.get(sha_fw, None)[0], 401)
        self.assertEqual(self.get(sha_fw, "rcs1.AAAA")[0], 401)
        bad = token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB")
        self.assertEqual(self.get(sha_fw, bad)[0], 401)
        self.assertEqual(self.get(sha_fw, None, headers={"Authorization": token})[0], 401)
        # an artifact the job does not pin, or not an artifact at all
        self.assertEqual(self.get(self.other_id[len("sha256:"):], token)[0], 404)
        self.assertEqual(self.get("0" * 64, token)[0], 404)
        self.assertEqual(self.get("xyz", token)[0], 404)

        # audited once per job and artifact, as the device, never with the token
        audit = self.admin.get("/audit?target=" + job).json["items"]
        mine = [a for a in audit if a["path"] == DEV_PATH + sha_fw]
        self.assertEqual(len(mine), 1, audit)
        self.assertEqual((mine[0]["user"], mine[0]["path"]), (fake.entity, DEV_PATH + sha_fw))
        self.assertNotIn(token, json.dumps(audit))

        # the device's progress: the job record keeps the last one, after the job ends too
        self.assertIsNone(self.job(job)["progress"])
        fake.report(job, "edge_transmitted")
        fake.report(job, "edge_started")
        for done in (0, 100000, 300014):
            fake.client.publish(fake._status_topic(job), json.dumps(
                {"v": 1, "job": job, "status": "edge_running", "seq": fake.seq[job] + 1,
                 "ts": int(time.time()), "response": "downloading",
                 "progress": {"done": done, "total": 300014}}), qos=1)
            fake.seq[job] += 1
        wait_for(lambda: (self.job(job)["progress"] or {}).get("done") == 300014, timeout=15,
                 what="the last progress")
        self.assertEqual(self.job(job)["progress"], {"done": 300014, "total": 300014})
        # the job ends: its token serves nothing more
        fake.report(job, "terminated", "done")
        wait_for(lambda: self.job(job)["status"] == "terminated", timeout=15,
                 what="the job terminated")
        self.assertEqual(self.job(job)["progress"], {"done": 300014, "total": 300014})
        st, _, body = self.get(sha_fw, token)
        self.assertEqual(st, 410)
        self.assertEqual(json.loads(body)["error"]["code"], "job_terminal")
        # nor is it in the coordinator's log
        self.assertNotIn(token, self.coord_log())

    def test_token_of_another_job(self):
        _, job1, env1 = self.device_job()
        _, job2, env2 = self.device_job()
        self.assertNotEqual(env1["artifact_token"], env2["artifact_token"])
        sha = self.notes_id[len("sha256:"):]
        self.assertEqual(self.get(sha, env1["artifact_token"])[2], self.notes)
        self.assertEqual(self.get(sha, env2["artifact_token"])[2], self.notes)
        # a job cancelled: its token is refused, the other one's still serves
        self.assertEqual(self.admin.patch("/jobs/%s/cancel" % job1).status, 200)
        self.assertEqual(self.get(sha, env1["artifact_token"])[0], 410)
        self.assertEqual(self.get(sha, env2["artifact_token"])[0], 200)

    def test_bytes_per_job_capped(self):
        """3x the job's artifacts (300014 bytes): then 429 with Retry-After."""
        _, job, env = self.device_job()
        token = env["artifact_token"]
        sha = self.fw_id[len("sha256:"):]
        total = len(self.fw) + len(self.notes)
        got = 0
        for _ in range(3):
            st, _, body = self.get(sha, token)
            self.assertEqual(st, 200)
            got += len(body)
        self.assertLess(got, 3 * total)
        # a small range still fits; then the cap is reached
        st, _, body = self.get(sha, token, headers={"Range": "bytes=0-41"})
        self.assertEqual(st, 206)
        st, h, body = self.get(sha, token, headers={"Range": "bytes=0-99"})
        self.assertEqual(st, 429, body)
        self.assertEqual(json.loads(body)["error"]["code"], "too_many_requests")
        self.assertTrue(int(h["retry-after"]) > 0)

    def test_device_listener_serves_only_downloads(self):
        for path in ("/v3/commands/tasks", "/v3/commands/artifacts", "/", "/metrics",
                     "/v3/commands/health"):
            st, _, body = self.get(None, None, port=self.device_port, path=path)
            self.assertEqual(st, 404, (path, body[:200]))
        # with an api key too
        st, _, _ = self.get(None, None, port=self.device_port, path="/v3/commands/tasks",
                            headers={"api-key": self.admin_key})
        self.assertEqual(st, 404)
        # and the main listener keeps its API
        self.assertEqual(self.admin.get("/tasks").status, 200)
        # only GET
        c = http.client.HTTPConnection("127.0.0.1", self.device_port, timeout=10)
        try:
            c.request("POST", DEV_PATH + "0" * 64, body=b"x")
            self.assertEqual(c.getresponse().status, 405)
        finally:
            c.close()

    def conform(self, st, h, body):
        """The answer (st, h, body) as docs/openapi.json documents the device route."""
        op = oa.find_op("GET", "/devices/artifacts/{sha256}")
        self.assertIn(str(st), op["responses"], "%d is not documented" % st)
        spec = oa.resolve(op["responses"][str(st)])
        for name in spec.get("headers", {}):
            self.assertIn(name.lower(), h, "%d without its %s header" % (st, name))
        media = list(spec["content"])[0]
        self.assertEqual(h["content-type"].split(";")[0], media)
        if media == "application/json":
            answer = json.loads(body)
            self.assertEqual(oa.validate(oa.resolve(spec["content"][media]["schema"]), answer),
                             [])
            self.assertEqual(answer["error"]["code"],
                             spec["content"][media]["example"]["error"]["code"])

    def test_answers_as_openapi_documents(self):
        """Every answer of the device route, as docs/openapi.json documents it."""
        fake, job, env = self.device_job()
        token = env["artifact_token"]
        sha = self.notes_id[len("sha256:"):]
        self.conform(*self.get(sha, token))
        self.conform(*self.get(sha, token, headers={"Range": "bytes=2-5"}))
        self.conform(*self.get(sha, token, headers={"Range": "bytes=%d-" % len(self.notes)}))
        self.conform(*self.get(sha, "rcs1.AAAA"))
        self.conform(*self.get(self.other_id[len("sha256:"):], token))
        for _ in range(6):  # 3x the artifacts' size, then 429
            st, h, body = self.get(self.fw_id[len("sha256:"):], token)
            if st != 200:
                break
        self.assertEqual(st, 429)
        self.conform(st, h, body)
        self.assertEqual(self.admin.patch("/jobs/%s/cancel" % job).status, 200)
        st, h, body = self.get(sha, token)
        self.assertEqual(st, 410)
        self.conform(st, h, body)
        # what the document says of the route itself
        self.assertEqual(oa.device_operations()[0][1], "/devices/artifacts/{sha256}")
        self.assertEqual(DEV_PATH, "/v3/devices/artifacts/")


class DownloadLimitsTest(DeviceDownloadsBase):
    """A group's download limits, held by the coordinator that serves the downloads."""

    def group_jobs(self, n, download):
        """n new online devices (FakeDevices that do not answer) with a job each of one list
        send taking download: the group's ident and [(fake, job, envelope)]."""
        fakes = []
        for _ in range(n):
            dev = self.class_device()
            fake = FakeDevice(self.broker, self.client_root, dev["entity_ident"],
                              auto=False).start()
            self.fakes.append(fake)
            fakes.append(fake)
        for fake in fakes:
            wait_for(lambda: self.admin.get("/devices/" + fake.entity).json.get("online"),
                     timeout=15, what="the device online")
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                            {"ident_list": [f.entity for f in fakes], "download": download})
        self.assertEqual(r.status, 201, r)
        group = r.json["group"]["ident"]
        out = []
        for fake in fakes:
            job = [j["ident"] for j in r.json["items"] if j["entity_ident"] == fake.entity][0]
            wait_for(lambda: job in fake.jobs_received(), timeout=15, what="the envelope")
            out.append((fake, job, [e for e in fake.envelopes if e["job"] == job][0]))
        return group, out

    def test_download_validated(self):
        dev = self.class_device()
        for download, field in (({"max_concurrent": 0}, "download.max_concurrent"),
                                ({"max_concurrent": 1.5}, "download.max_concurrent"),
                                ({"max_concurrent": 1000001}, "download.max_concurrent"),
                                ({"max_bytes_per_s": 10}, "download.max_bytes_per_s"),
                                ({"max_bytes_per_s": "1M"}, "download.max_bytes_per_s"),
                                ({"max_bytes_per_s": 2 ** 41}, "download.max_bytes_per_s"),
                                ({"rate": 5}, "download.rate"),
                                ({}, "download"),
                                (5, "download")):
            r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"],
                                {"ident_list": [dev["entity_ident"]], "download": download})
            self.assertEqual(r.status, 400, (download, r))
            self.assertEqual(r.json["error"]["details"].get("field"), field, (download, r.json))

    def test_max_concurrent(self):
        group, jobs = self.group_jobs(2, {"max_concurrent": 1})
        record = self.admin.get("/groups/" + group).json
        self.assertEqual(record["download"], {"max_concurrent": 1})
        sha = self.fw_id[len("sha256:"):]
        (_, _, env_a), (_, _, env_b) = jobs
        # the first device downloads (a part: it goes on downloading)
        st, _, body = self.get(sha, env_a["artifact_token"], headers={"Range": "bytes=0-99"})
        self.assertEqual((st, body), (206, self.fw[:100]))
        # the second is held back while the first downloads
        st, h, body = self.get(sha, env_b["artifact_token"])
        self.assertEqual(st, 429, body[:200])
        self.assertEqual(json.loads(body)["error"]["code"], "busy")
        self.assertTrue(1 <= int(h["retry-after"]) <= 30, h)
        # the first goes on: it holds its place
        st, _, body = self.get(sha, env_a["artifact_token"], headers={"Range": "bytes=100-"})
        self.assertEqual((st, body), (206, self.fw[100:]))
        # done: its place is free a moment later (2 s after its last byte; 5 s when the
        # first's request is still counted in flight, its end not yet seen by the server),
        # and the second downloads
        st, h, body = self.get(sha, env_b["artifact_token"])
        for _ in range(3):
            if st != 429:
                break
            self.assertTrue(1 <= int(h["retry-after"]) <= 5, h)
            time.sleep(int(h["retry-after"]) + 0.2)
            st, h, body = self.get(sha, env_b["artifact_token"])
        self.assertEqual((st, body), (200, self.fw))
        # a group without limits holds nothing back
        _, free = self.group_jobs(2, {"max_bytes_per_s": 1 << 30})
        st1, _, _ = self.get(sha, free[0][2]["artifact_token"], headers={"Range": "bytes=0-9"})
        st2, _, _ = self.get(sha, free[1][2]["artifact_token"], headers={"Range": "bytes=0-9"})
        self.assertEqual((st1, st2), (206, 206))

    def test_rate_shared(self):
        """Two devices of a group at 100000 bytes/s fetch 600000 bytes between them: about
        5 s (a second's worth may go at once); the API answers meanwhile."""
        rate = 100000
        group, jobs = self.group_jobs(2, {"max_bytes_per_s": rate})
        self.assertEqual(self.admin.get("/groups/" + group).json["download"],
                         {"max_bytes_per_s": rate})
        sha = self.fw_id[len("sha256:"):]
        results = {}

        def fetch(i, token):
            results[i] = self.get(sha, token)

        started = time.monotonic()
        threads = [threading.Thread(target=fetch, args=(i, env["artifact_token"]))
                   for i, (_, _, env) in enumerate(jobs)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        api_started = time.monotonic()
        self.assertEqual(self.admin.get("/tasks").status, 200)
        api_took = time.monotonic() - api_started
        for t in threads:
            t.join(60)
        took = time.monotonic() - started
        for i in range(2):
            self.assertEqual((results[i][0], results[i][2]), (200, self.fw))
        total = 2 * len(self.fw)
        # at most the rate after the first second's worth, with room for slow machines
        self.assertGreaterEqual(took, (total - rate) / rate * 0.7, took)
        self.assertLess(took, 40, took)
        self.assertLess(api_took, 2.0, api_took)


class SecretRotationTest(DeviceDownloadsBase):
    """rcs-coordinator artifact-secret rotate: the coordinators make tokens with the new
    secret from their next start, and the tokens issued before stay valid."""

    def test_rotation(self):
        _, job1, env1 = self.device_job()
        sha = self.notes_id[len("sha256:"):]
        _, out, _ = run_cli("artifact-secret", "rotate", "--db", self.coord.db)
        self.assertIn("new artifact token secret", out)
        self.coord.stop()
        self.replace_coordinator(("--mqtt", self.broker.url, "--device-listen",
                                  "127.0.0.1:%d" % self.device_port))
        wait_for(lambda: "status reports: " in self.coord_log(), timeout=20,
                 what="the coordinator connected to the broker")
        _, job2, env2 = self.device_job()
        # the token made before the rotation, and the one made after it
        for env in (env1, env2):
            self.assertEqual(self.get(sha, env["artifact_token"])[2], self.notes)


if __name__ == "__main__":
    unittest.main()
