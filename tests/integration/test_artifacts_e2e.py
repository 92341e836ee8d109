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

Over MQTT (docs/mqtt.md, "Artifacts over MQTT (the coordinator's side)"), a coordinator with
a low artifact_mqtt_rate: a real agent with artifact_transport mqtt (no artifact_url)
downloads a task's artifact through mosquitto and the coordinator, the job ends terminated
with the verified file, audited once, the bytes counted in the metrics; gets published by
hand as a device: a chunk's bytes (the last one cut at the artifact's end), and for a job of
another device, an artifact the job does not pin, a length over 65,536, a negative offset,
a payload that is no get, a cancelled job: the error code each one calls for and no byte;
twenty gets at once: at most 8 chunks in flight (and one sent), the rest busy; a job served
3 times its artifacts' size: busy, with HTTP's count (docs/api.md "Device downloads"). Two
coordinators on one PostgreSQL database with plain subscriptions (no shared one): every get
is answered once, by the coordinator the database assigns the device to, the other one
dropping it; once one of them stops, the other answers every device's gets.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_artifacts_e2e.py
"""

import hashlib
import http.client
import json
import os
import re
import signal
import threading
import time
import unittest
import uuid

import paho.mqtt.client as mqtt

import pg_server
from rcs_fixture import StackTest, note
from rcs_harness import Agent, Coordinator, FakeDevice, free_port, make_ec_keypair, wait_for

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
        return metric(self.metrics_port, 'rcs_artifact_bytes_total{direction="served"}')

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
def metric(port, name):
    """The value of one line of /metrics (name with its labels)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[-1])
    raise AssertionError("no %s in the metrics" % name)


class GetClient:
    """A paho client that publishes gets on a device's topics and records every answer under
    rcs/v1/<client_root>/+/artifacts/#."""

    def __init__(self, broker, client_root):
        self.root = client_root
        self.msgs = []
        self.lock = threading.Lock()
        self.c = mqtt.Client(client_id="getter-" + uuid.uuid4().hex[:8], clean_session=True)
        self.c.on_message = self._on_message
        subscribed = threading.Event()
        self.c.on_subscribe = lambda *a: subscribed.set()
        self.c.connect("127.0.0.1", broker.port)
        self.c.loop_start()
        self.c.subscribe("rcs/v1/%s/+/artifacts/#" % client_root, qos=0)
        assert subscribed.wait(10), "no SUBACK"

    def _on_message(self, client, userdata, msg):
        if msg.topic.endswith("/get"):
            return
        with self.lock:
            self.msgs.append((msg.topic, msg.payload))

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()

    def base(self, device, sha):
        return "rcs/v1/%s/%s/artifacts/%s/" % (self.root, device, sha)

    def get(self, device, sha, body):
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.c.publish(self.base(device, sha) + "get", payload, qos=0).wait_for_publish()

    def answers(self, device, sha):
        with self.lock:
            return [(t[len(self.base(device, sha)):], p) for t, p in self.msgs
                    if t.startswith(self.base(device, sha))]

    def error(self, device, sha, timeout=10):
        """The next error answer on the device's topic of sha (consumed), as a dict."""
        def take():
            with self.lock:
                for i, (t, p) in enumerate(self.msgs):
                    if t == self.base(device, sha) + "error":
                        del self.msgs[i]
                        return json.loads(p)
            return None
        return wait_for(take, timeout=timeout, what="an error answer on %s" % device)

    def clear(self):
        with self.lock:
            self.msgs.clear()


class ArtifactsOverMqttTest(StackTest):
    workdir_prefix = "rcs-art-mqtt-"
    RATE = 256 * 1024  # bytes/s per device: 8 chunks of 64 KiB in flight are 2 s of sending

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.metrics_port = free_port()
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.start_stack(cls.key, coord_args=(
            "--sign-artifacts", "--metrics-listen", "127.0.0.1:%d" % cls.metrics_port,
            "--artifact-mqtt-rate", str(cls.RATE)))
        cls.wait_coord_log("artifact gets: plain subscription", what="the gets subscribed")
        cls.fakes = []

    @classmethod
    def tearDownClass(cls):
        dead = [a.name for a in cls.agents if a.proc is not None and not a.alive()]
        super().tearDownClass()
        if dead:
            raise AssertionError("agents died during the tests: %s" % dead)

    upload = ArtifactsEndToEndTest.upload
    task = ArtifactsEndToEndTest.task
    send = ArtifactsEndToEndTest.send
    wait_job = ArtifactsEndToEndTest.wait_job

    def getter(self):
        g = GetClient(self.broker, self.client_root)
        self.addCleanup(g.close)
        return g

    def fake_job(self, task):
        """A device that does not answer (a FakeDevice) with a job of task: (device, job)."""
        dev = self.class_device()["entity_ident"]
        fake = FakeDevice(self.broker, self.client_root, dev, auto=False).start()
        self.fakes.append(fake)
        wait_for(lambda: self.admin.get("/devices/" + dev).json.get("online"), timeout=15,
                 what="the device online")
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": dev})
        self.assertEqual(r.status, 201, r)
        job = r.json["ident"]
        wait_for(lambda: job in fake.jobs_received(), timeout=15, what="the envelope")
        return dev, job

    def test_agent_downloads_over_mqtt(self):
        rec = self.class_device("mqtt-agent")
        a = Agent(self.workdir, self.broker.url, self.client_root, rec["entity_ident"],
                  name="mqtt-agent", trusted_keys=[self.pub],
                  extra_args=["--artifact-transport", "mqtt"])
        self.agents.append(a)
        a.start(timeout=30)
        wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json.get("online"),
                 timeout=20, what="the agent online")
        data = os.urandom(600 * 1024 + 7)  # ten chunks, the last one short
        sha = hashlib.sha256(data).hexdigest()
        ident = self.upload(data, "fw.bin")
        task = self.task("local f = rcs.artifacts.firmware\n"
                         "return {path = f.path, size = f.size, sha256 = f.sha256}",
                         {"firmware": ident})
        served = metric(self.metrics_port, 'rcs_artifact_bytes_total{direction="served"}')
        chunks = metric(self.metrics_port, 'rcs_artifact_mqtt_gets_total{answer="data"}')
        job = self.send(task, a)
        rec = self.wait_job(job, timeout=60)
        self.assertEqual(rec["status"], "terminated", (rec, a.read_log()))
        out = json.loads(rec["response"])
        self.assertEqual((out["size"], out["sha256"]), (len(data), sha))
        with open(out["path"], "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), sha)
        self.assertEqual(rec["progress"], {"done": len(data), "total": len(data)})
        # its own gets, back through its subscription to artifacts/+/#, are no surprise
        self.assertNotIn("unexpected topic", a.read_log(tail=None))
        # audited once, as the device's: the get topic as its path
        items = self.admin.get("/audit?target=" + job).json["items"]
        got = [i for i in items if i["method"] == "MQTT"]
        self.assertEqual(len(got), 1, items)
        self.assertEqual(got[0]["user"], a.entity_ident)
        self.assertEqual(got[0]["path"], "rcs/v1/%s/%s/artifacts/%s/get" % (
            self.client_root, a.entity_ident, sha))
        after = metric(self.metrics_port, 'rcs_artifact_bytes_total{direction="served"}')
        self.assertGreaterEqual(after - served, len(data))
        self.assertLess(after - served, 2 * len(data))
        self.assertGreaterEqual(
            metric(self.metrics_port, 'rcs_artifact_mqtt_gets_total{answer="data"}') - chunks,
            10)

    def test_group_max_concurrent_over_mqtt(self):
        """A group's download limits hold MQTT downloads too (docs/api.md "Download
        limits"): two agents of a group with max_concurrent 1 fetching through the broker,
        one at a time: the second's gets are answered busy, it waits and resumes; both jobs
        terminated."""
        agents = []
        for i in range(2):
            rec = self.class_device("mqtt-group-%d" % i)
            a = Agent(self.workdir, self.broker.url, self.client_root, rec["entity_ident"],
                      name="mqtt-group-%d" % i, trusted_keys=[self.pub],
                      extra_args=["--artifact-transport", "mqtt"])
            self.agents.append(a)
            a.start(timeout=30)
            agents.append(a)
        for a in agents:
            wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json.get("online"),
                     timeout=20, what="the agent online")
        data = os.urandom(1024 * 1024 + 3)  # 4 s at the device's rate
        sha = hashlib.sha256(data).hexdigest()
        task = self.task("return rcs.artifacts.fw.sha256", {"fw": self.upload(data, "fw-g")})
        busy = metric(self.metrics_port, 'rcs_artifact_mqtt_gets_total{answer="busy"}')
        r = self.admin.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": [a.entity_ident for a in agents],
                             "download": {"max_concurrent": 1}})
        self.assertEqual(r.status, 201, r)
        for j in r.json["items"]:
            rec = self.wait_job(j["ident"], timeout=120)
            self.assertEqual((rec["status"], rec["response"]), ("terminated", sha), rec)
        logs = [a.read_log(tail=None) for a in agents]
        held = [log for log in logs if "download at most 1 at once" in log]
        self.assertEqual(len(held), 1, [log[-2000:] for log in logs])
        self.assertGreater(
            metric(self.metrics_port, 'rcs_artifact_mqtt_gets_total{answer="busy"}'), busy)

    def test_gets_answered_and_refused(self):
        data = os.urandom(2 * 1024 * 1024 + 100)
        sha = hashlib.sha256(data).hexdigest()
        ident = self.upload(data, "image.bin")
        other = self.upload(os.urandom(1000), "other.bin")[len("sha256:"):]
        task = self.task("return 1", {"image": ident})
        dev, job = self.fake_job(task)
        dev2, job2 = self.fake_job(task)
        g = self.getter()

        # a chunk, and the last one cut at the artifact's end
        g.get(dev, sha, {"v": 1, "job": job, "offset": 65536, "length": 1000})
        wait_for(lambda: g.answers(dev, sha), what="the chunk")
        self.assertEqual(g.answers(dev, sha), [("data/65536", data[65536:66536])])
        g.clear()
        g.get(dev, sha, {"v": 1, "job": job, "offset": len(data) - 10, "length": 65536})
        wait_for(lambda: g.answers(dev, sha), what="the last chunk")
        self.assertEqual(g.answers(dev, sha), [("data/%d" % (len(data) - 10), data[-10:])])
        g.clear()

        # another device's job, on this device's topic; an artifact the job does not pin
        g.get(dev, sha, {"v": 1, "job": job2, "offset": 0, "length": 100})
        e = g.error(dev, sha)
        self.assertEqual((e["v"], e["job"], e["code"]), (1, job2, "not_found"), e)
        g.get(dev, other, {"v": 1, "job": job, "offset": 0, "length": 100})
        self.assertEqual(g.error(dev, other)["code"], "not_found")
        nobody = str(uuid.uuid4())
        g.get(nobody, sha, {"v": 1, "job": job, "offset": 0, "length": 100})
        self.assertEqual(g.error(nobody, sha)["code"], "not_found")
        g.get(dev2, sha, {"v": 1, "job": job, "offset": 0, "length": 100})
        self.assertEqual(g.error(dev2, sha)["code"], "not_found")
        # malformed gets
        for body in ({"v": 1, "job": job, "offset": 0, "length": 65537},
                     {"v": 1, "job": job, "offset": -1, "length": 10},
                     {"v": 1, "job": job, "offset": 0, "length": 0},
                     {"v": 2, "job": job, "offset": 0, "length": 10},
                     {"v": 1, "job": "not-a-job", "offset": 0, "length": 10},
                     {"v": 1, "job": job, "offset": len(data), "length": 10},
                     b"not json", b"x" * 5000):
            g.get(dev, sha, body)
            e = g.error(dev, sha)
            self.assertEqual(e["code"], "bad_request", (body, e))
            self.assertTrue(e["message"], e)
        time.sleep(0.5)
        self.assertEqual([a for a in g.answers(dev, sha) if a[0].startswith("data/")], [],
                         "bytes answered to a refused get")
        self.assertEqual([a for a in g.answers(dev, other) if a[0].startswith("data/")], [])

        # twenty gets at once: at most 8 chunks in flight, the rest busy
        g.clear()
        for i in range(20):
            g.get(dev, sha, {"v": 1, "job": job, "offset": i * 65536, "length": 65536})

        def settled():
            a = g.answers(dev, sha)
            return a if len(a) >= 20 else None
        answers = wait_for(settled, timeout=30, what="every get answered")
        time.sleep(0.5)
        answers = g.answers(dev, sha)
        chunks = [t for t, p in answers if t.startswith("data/")]
        busy = [json.loads(p) for t, p in answers if t == "error"]
        self.assertEqual(len(chunks) + len(busy), 20, answers)
        self.assertLessEqual(len(chunks), 9)  # 8 in flight, one maybe sent already
        self.assertGreaterEqual(len(chunks), 8)
        self.assertEqual({b["code"] for b in busy}, {"busy"}, busy)
        for t, p in answers:
            if t.startswith("data/"):
                off = int(t[len("data/"):])
                self.assertEqual(p, data[off:off + 65536])

        # the job cancelled: job_terminal, no byte
        g.clear()
        time.sleep(1)
        self.assertEqual(self.admin.patch("/jobs/%s/cancel" % job).status, 200)
        g.get(dev, sha, {"v": 1, "job": job, "offset": 0, "length": 100})
        self.assertEqual(g.error(dev, sha)["code"], "job_terminal")
        time.sleep(0.3)
        self.assertEqual([a for a in g.answers(dev, sha) if a[0].startswith("data/")], [])

    def test_bytes_per_job_capped(self):
        data = os.urandom(1000)
        sha = hashlib.sha256(data).hexdigest()
        task = self.task("return 1", {"small": self.upload(data, "small.bin")})
        dev, job = self.fake_job(task)
        g = self.getter()
        for i in range(3):  # the whole artifact three times: the cap
            g.get(dev, sha, {"v": 1, "job": job, "offset": 0, "length": 1000})
            wait_for(lambda: len(g.answers(dev, sha)) > i, what="chunk %d" % i)
        self.assertEqual(g.answers(dev, sha), [("data/0", data)] * 3)
        g.get(dev, sha, {"v": 1, "job": job, "offset": 500, "length": 10})
        e = g.error(dev, sha)
        self.assertEqual(e["code"], "busy", e)
        self.assertIn("3 times", e["message"])
        self.assertEqual(len(g.answers(dev, sha)), 3)
        # audited once, however many chunks
        items = self.admin.get("/audit?target=" + job).json["items"]
        self.assertEqual(len([i for i in items if i["method"] == "MQTT"]), 1, items)


class ArtifactsOverMqttSeveralTest(StackTest):
    """Two coordinators, n1 and n2, on one PostgreSQL database, both with
    --mqtt-shared-subscriptions no: each receives every get."""
    workdir_prefix = "rcs-art-mqtt2-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        db = pg_server.shared().create_db()
        cls.start_broker()
        common = ["--mqtt", cls.broker.url, "--mqtt-shared-subscriptions", "no"]
        cls.m1, cls.m2 = free_port(), free_port()
        cls.start_coordinator(common + ["--node-id", "n1", "--metrics-listen",
                                        "127.0.0.1:%d" % cls.m1], db=db,
                              connected="artifact gets: plain subscription")
        cls.c2 = cls.own(Coordinator(cls.workdir, db=db, extra_args=common + [
            "--node-id", "n2", "--metrics-listen", "127.0.0.1:%d" % cls.m2]))
        cls.c2.start()
        wait_for(lambda: "artifact gets: plain subscription" in cls.c2.read_log(), timeout=20,
                 what="n2's gets subscribed")
        cls.fakes = []


    upload = ArtifactsEndToEndTest.upload
    fake_job = ArtifactsOverMqttTest.fake_job
    getter = ArtifactsOverMqttTest.getter

    def test_each_get_answered_once(self):
        data = os.urandom(200000)
        sha = hashlib.sha256(data).hexdigest()
        ident = self.upload(data, "fw.bin")
        r = self.admin.post("/tasks", {"name": "two", "script": "echo",
                                       "artifacts": {"fw": ident}})
        self.assertEqual(r.status, 201, r)
        task = r.json
        devs = [self.fake_job(task) for _ in range(6)]
        g = self.getter()
        for dev, job in devs:
            for i in range(3):
                g.get(dev, sha, {"v": 1, "job": job, "offset": i * 1000, "length": 1000})
        for dev, job in devs:
            wait_for(lambda: len(g.answers(dev, sha)) >= 3, timeout=15,
                     what="the answers to %s" % dev)
        time.sleep(1.5)  # a second answer would have come by now
        for dev, job in devs:
            got = sorted(g.answers(dev, sha))
            self.assertEqual(got, [("data/%d" % (i * 1000), data[i * 1000:(i + 1) * 1000])
                                   for i in range(3)], dev)
        for dev, job in devs:
            items = self.admin.get("/audit?target=" + job).json["items"]
            self.assertEqual(len([i for i in items if i["method"] == "MQTT"]), 1, items)
        name = 'rcs_artifact_mqtt_gets_total{answer="%s"}'
        sent = [metric(m, name % "data") for m in (self.m1, self.m2)]
        dropped = [metric(m, name % "dropped") for m in (self.m1, self.m2)]
        self.assertEqual(sum(sent), 18, sent)
        self.assertEqual(dropped, sent[::-1])  # each get dropped by the other one
        note("chunks sent by n1, n2: %r" % sent)

        # n2 stops (its row of the running ones goes): n1 answers every device, once its
        # memory of the owners (5 s) has passed
        self.assertEqual(self.c2.stop(), 0, self.c2.read_log()[-3000:])
        time.sleep(5.5)
        g.clear()
        for dev, job in devs:
            g.get(dev, sha, {"v": 1, "job": job, "offset": 5000, "length": 10})
        for dev, job in devs:
            wait_for(lambda: g.answers(dev, sha), timeout=15, what="n1's answer to %s" % dev)
            self.assertEqual(g.answers(dev, sha), [("data/5000", data[5000:5010])])
        self.assertEqual(metric(self.m1, name % "data"), sent[0] + 6)


if __name__ == "__main__":
    unittest.main()
