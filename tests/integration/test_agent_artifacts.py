#!/usr/bin/env python3
"""The agent's artifacts end to end (docs/agent.md "Artifacts", docs/lua-api.md
"rcs.artifacts"): a real rcs-agent, a real mosquitto on a free loopback port, and an HTTP
server of this test standing for the coordinator's device route
(GET /v3/devices/artifacts/<sha256>, Authorization: Bearer <token>, Range). Envelopes are
published by the test (unsigned tasks: the agents run with --require-signature=false).

Checked: a job's artifact downloaded before its script, handed to it as rcs.artifacts (a
0444 file), rcs.disk.free, progress reports with {done, total}; a second job with the same
artifact downloads nothing (the cache, hashed again); a connection cut midway resumes with
a Range from where it stopped; an agent killed with -9 midway resumes from its journaled
offset after its restart (the .part kept, the job not interrupted), bytes past that offset
(a power cut) cut away; artifact_max_rate; releases (device types, no downgrade);
storage_full before any byte is fetched; wrong bytes fetched twice then artifact_invalid
(the script never run); a redirect not followed, a body longer than the signed size and a
wrong Content-Range refused; a cancel during a download (the part kept); a malformed
"artifacts" refused; a 404 ends the job; the config refuses an artifact_dir inside a
file_dir and warns of a plain http:// artifact_url that is not on this machine; the token
is never logged. ArtifactsOverMqttTest: the same device side through the broker
(artifact_transport mqtt) against a stand-in for the coordinator's chunks, with a lost
chunk, a busy answer, not_found and a kill -9. ArtifactsAarch64Test, ArtifactsArmhfTest: the
HTTP cases again with the agent cross-built for 64-bit ARM and for 32-bit ARM, under
qemu-user.

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent_artifacts.py
RCS_KEEP_TMP=1 keeps the directory (broker and agent logs).
"""

import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

from rcs_harness import AGENT, SOURCE_DIR, Agent, Mosquitto, Watcher, run_logged, wait_for

SYSROOT_DIR = os.environ.get("RCS_SYSROOT_DIR", "/opt/rcs-sysroot")

MIB = 1 << 20
TOKEN = "rcs1.dGVzdC10b2tlbi1vZi10aGUtam9i"


class ArtifactServer:
    """Serves artifacts by SHA-256 with Range, and remembers every request. Faults per
    artifact: cut (a list of absolute offsets: the connection is closed once the body
    reaches each, once), wrong (the bytes served have one byte changed),
    rate (bytes/s)."""

    def __init__(self):
        self.files = {}
        self.faults = {}
        self.log = []      # (sha, range header or None, status)
        self.served = {}   # sha -> bytes of body sent
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                try:
                    server.handle(self)
                except OSError:
                    pass   # the agent hung up (a cut, a refused answer, a kill)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def add(self, data, **faults):
        sha = hashlib.sha256(data).hexdigest()
        self.files[sha] = data
        self.faults[sha] = dict(faults)
        return sha

    def requests(self, sha):
        with self.lock:
            return [e for e in self.log if e[0] == sha]

    def handle(self, h):
        m = re.fullmatch(r"/v3/devices/artifacts/([0-9a-f]{64})", h.path)
        rng = h.headers.get("Range")
        sha = m.group(1) if m else None
        if h.headers.get("Authorization") != "Bearer " + TOKEN:
            return self.answer(h, sha, rng, 401)
        if sha not in self.files:
            return self.answer(h, sha, rng, 404)
        data = self.files[sha]
        f = self.faults[sha]
        if f.get("redirect"):
            with self.lock:
                self.log.append((sha, rng, 302))
            h.send_response(302)
            h.send_header("Location", "http://127.0.0.1:9/elsewhere")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if f.get("longer"):
            data = data + b"more than was signed"
        if f.get("wrong"):
            data = bytes([data[0] ^ 0xff]) + data[1:]
        first = 0
        if rng:
            rm = re.fullmatch(r"bytes=(\d+)-", rng)
            first = int(rm.group(1))
            if first >= len(data):
                return self.answer(h, sha, rng, 416)
        with self.lock:
            self.log.append((sha, rng, 206 if rng else 200))
        h.send_response(206 if rng else 200)
        if rng:
            shift = 1 if f.get("bad_range") else 0   # a range other than the one asked for
            h.send_header("Content-Range", "bytes %d-%d/%d" % (first - shift, len(data) - 1,
                                                                len(data)))
        h.send_header("Content-Length", str(len(data) - first))
        h.send_header("ETag", '"%s"' % sha)
        h.end_headers()
        with self.lock:
            cuts = f.get("cut") or []
            # an answer with the wrong range is refused by the agent: it takes no cut
            cut = (None if rng and f.get("bad_range")
                   else next((c for c in cuts if c > first), None))
        at, chunk, start = first, 64 * 1024, time.time()
        try:
            while at < len(data):
                end = min(len(data), at + chunk)
                if cut is not None and end >= cut:
                    end = cut
                h.wfile.write(data[at:end])
                with self.lock:
                    self.served[sha] = self.served.get(sha, 0) + (end - at)
                at = end
                if cut is not None and at >= cut:
                    with self.lock:
                        cuts.remove(cut)   # each cut once, when it was reached
                    h.wfile.flush()
                    h.close_connection = True
                    h.connection.shutdown(2)
                    return
                if f.get("rate"):
                    ahead = (at - first) / f["rate"] - (time.time() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        except OSError:
            pass

    def answer(self, h, sha, rng, status):
        with self.lock:
            self.log.append((sha, rng, status))
        h.send_response(status)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Reports(Watcher):
    def record(self, msg):
        return (msg.topic.split("/")[5], json.loads(msg.payload))

    def of(self, job):
        with self.lock:
            return [p for j, p in self.messages if j == job]


class ArtifactsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix="rcs-artifacts-")
        cls.broker = Mosquitto(cls.workdir).start()
        cls.server = ArtifactServer()
        cls.client_root = str(uuid.uuid4())
        cls.reports = Reports(cls.broker, "rcs/v1/%s/+/jobs/+/status" % cls.client_root,
                              prefix="art-").start()
        cls.states = Watcher(cls.broker, "rcs/v1/%s/+/state" % cls.client_root,
                             prefix="art-state-").start()
        cls.agents = []

    @classmethod
    def tearDownClass(cls):
        for a in cls.agents:
            a.stop(signal.SIGKILL)
        cls.reports.stop()
        cls.states.stop()
        cls.server.stop()
        cls.broker.stop()
        if os.environ.get("RCS_KEEP_TMP"):
            print("kept", cls.workdir)
        else:
            shutil.rmtree(cls.workdir, ignore_errors=True)

    binary, emulator, agent_args = None, (), ()
    over_http = True

    def agent(self, name, *extra):
        fdir = os.path.join(self.workdir, name + "-files")
        os.makedirs(fdir, exist_ok=True)
        transport = (["--artifact-url", self.server.url] if self.over_http
                     else ["--artifact-transport", "mqtt"])
        a = Agent(self.workdir, self.broker.url, self.client_root, str(uuid.uuid4()),
                  name=name, file_dirs=[fdir], binary=self.binary, emulator=self.emulator,
                  extra_args=["--require-signature=false", *transport, *self.agent_args,
                              *extra])
        a.files = fdir
        self.agents.append(a)
        return self.started(a)

    def started(self, a):
        """Starts a and waits until it subscribed (its state says online)."""
        topic = "rcs/v1/%s/%s/state" % (self.client_root, a.entity_ident)
        seen = len(self.states.on(topic))
        a.start(timeout=30)
        wait_for(lambda: [m for m in self.states.on(topic)[seen:]
                          if json.loads(m[1]).get("online")],
                 timeout=30, what="agent %s online" % a.name)
        return a

    def publish(self, a, source, arts, **extra):
        job = str(uuid.uuid4())
        env = {
            "v": 1, "job": job, "client_root": self.client_root,
            "entity_ident": a.entity_ident,
            "task": {"ident": str(uuid.uuid4()), "version": 1, "name": "update"},
            "script": {"name": "update", "sha256": hashlib.sha256(source.encode()).hexdigest(),
                       "source": source},
            "constants": {}, "variables_info": {}, "variables": {}, "signature": None,
            "issued_at": int(time.time()), "expires_at": None, "timeout": 60,
            "artifacts": {k: {"sha256": hashlib.sha256(v).hexdigest(), "size": len(v)}
                          for k, v in arts.items()},
            "artifact_token": TOKEN,
        }
        env.update(extra)
        self.broker.pub("rcs/v1/%s/%s/jobs/%s" % (self.client_root, a.entity_ident, job),
                        json.dumps(env))
        return job

    def downloads(self, sha):
        """How many times sha was fetched from its start (HTTP requests without a Range, or
        gets of offset 0 through the broker)."""
        if self.over_http:
            return sum(1 for r in self.server.requests(sha) if r[1] is None)
        return sum(1 for g in self.chunks.requests(sha) if g[1] == 0)

    def final(self, job, timeout=60):
        def done():
            reps = self.reports.of(job)
            return [r for r in reps if r["status"] in ("terminated", "edge_error")]
        return wait_for(done, timeout=timeout, what="the final report of %s" % job)[0]

    # -- the tests ---------------------------------------------------------------------

    def test_download_then_script_then_cache(self):
        a = self.agent("basic")
        data = os.urandom(3 * MIB + 17)
        sha = self.server.add(data)
        script = ("local f = rcs.artifacts.fw\n"
                  "assert(not pcall(function() rcs.artifacts.fw = 1 end))\n"
                  "assert(not pcall(rcs.disk.free, '../..'))\n"
                  "return {path = f.path, size = f.size, sha256 = f.sha256,"
                  " free = rcs.disk.free(''), free_files = rcs.disk.free('sub')}")
        os.makedirs(os.path.join(a.files, "sub"), exist_ok=True)
        job = self.publish(a, script, {"fw": data})
        rep = self.final(job)
        self.assertEqual(rep["status"], "terminated", rep)
        out = json.loads(rep["response"])
        self.assertEqual(out["size"], len(data))
        self.assertEqual(out["sha256"], sha)
        self.assertEqual(out["path"], os.path.join(a.state_dir, "artifacts", sha))
        self.assertGreater(out["free"], 0)
        self.assertGreater(out["free_files"], 0)
        self.assertEqual(os.stat(out["path"]).st_mode & 0o777, 0o444)
        with open(out["path"], "rb") as f:
            self.assertEqual(f.read(), data)
        statuses = [r["status"] for r in self.reports.of(job)]
        self.assertEqual(statuses[:2], ["edge_transmitted", "edge_started"], statuses)
        progress = [r["progress"] for r in self.reports.of(job) if "progress" in r]
        self.assertTrue(progress, statuses)
        self.assertEqual({p["total"] for p in progress}, {len(data)})
        self.assertEqual(progress[-1]["done"], len(data))
        self.assertIn("downloading fw: 100 %", [r.get("response") for r in self.reports.of(job)])
        self.assertEqual(self.downloads(sha), 1)
        self.assertNotIn(TOKEN, a.read_log(tail=None))  # the token is never logged

        # the same artifact again: from the cache, nothing downloaded
        job2 = self.publish(a, "return rcs.artifacts.fw.size", {"fw": data})
        rep2 = self.final(job2)
        self.assertEqual((rep2["status"], rep2["response"]), ("terminated", str(len(data))))
        self.assertEqual(self.downloads(sha), 1)
        # a cached file that was altered is hashed again, refused and fetched afresh
        os.chmod(out["path"], 0o644)
        with open(out["path"], "r+b") as f:
            f.write(b"X")
        job3 = self.publish(a, "return rcs.artifacts.fw.size", {"fw": data})
        self.assertEqual(self.final(job3)["status"], "terminated")
        self.assertEqual(self.downloads(sha), 2)
        with open(out["path"], "rb") as f:
            self.assertEqual(f.read(), data)

    def test_resume_after_a_cut_connection(self):
        a = self.agent("cut")
        data = os.urandom(12 * MIB)
        sha = self.server.add(data, cut=[int(len(data) * 0.3), int(len(data) * 0.7)])
        job = self.publish(a, "return rcs.artifacts.image.size", {"image": data})
        rep = self.final(job)
        self.assertEqual(rep["status"], "terminated", rep)
        reqs = self.server.requests(sha)
        self.assertEqual([r[1] for r in reqs],
                         [None, "bytes=%d-" % int(len(data) * 0.3),
                          "bytes=%d-" % int(len(data) * 0.7)], reqs)
        self.assertLess(self.server.served[sha], 1.2 * len(data))
        self.assertIn("again in 1 s", a.read_log())

    def test_resume_after_kill_9(self):
        rate = 2 * MIB
        a = self.agent("killed", "--artifact-max-rate", str(rate))
        data = os.urandom(12 * MIB)
        sha = self.server.add(data)
        part = os.path.join(a.state_dir, "artifacts", sha + ".part")

        def part_size():
            try:
                return os.path.getsize(part)
            except OSError:
                return 0
        job = self.publish(a, "return rcs.artifacts.fw.sha256", {"fw": data})
        wait_for(lambda: self.server.requests(sha), timeout=10, what="the download")
        started = time.time()
        wait_for(lambda: part_size() >= 6 * MIB, timeout=30, what="half the download")
        elapsed = time.time() - started
        # artifact_max_rate: 6 MiB at 2 MiB/s take close to 3 s
        self.assertGreater(elapsed, 2.0)
        a.stop(signal.SIGKILL)
        self.assertTrue(os.path.exists(part), "the .part was not kept")
        at_kill = part_size()
        # a power cut: bytes past the journaled offset that never reached the disk (here:
        # garbage written after the kill) must not end up in the file
        with open(part, "ab") as f:
            f.write(b"\xee" * MIB)
        self.started(a)
        rep = self.final(job)
        self.assertEqual((rep["status"], rep["response"]), ("terminated", sha), rep)
        reqs = self.server.requests(sha)
        self.assertEqual(len(reqs), 2, reqs)
        resumed_at = int(re.fullmatch(r"bytes=(\d+)-", reqs[1][1]).group(1))
        self.assertGreaterEqual(resumed_at, 4 * MIB)   # journaled every 4 MiB at least
        self.assertLessEqual(resumed_at, at_kill)
        statuses = [r["status"] for r in self.reports.of(job)]
        self.assertEqual(statuses.count("edge_started"), 1, statuses)
        self.assertNotIn("interrupted", json.dumps(self.reports.of(job)))

    def test_cancel_during_a_download(self):
        a = self.agent("cancelled", "--artifact-max-rate", str(MIB))
        data = os.urandom(8 * MIB)
        sha = self.server.add(data)
        marker = os.path.join(a.files, "ran")
        job = self.publish(a, "rcs.file.write('ran', 'x') return 1", {"fw": data})
        part = os.path.join(a.state_dir, "artifacts", sha + ".part")
        wait_for(lambda: os.path.exists(part) and os.path.getsize(part) > MIB, timeout=30,
                 what="the download under way")
        self.broker.pub("rcs/v1/%s/%s/jobs/%s/cancel" % (self.client_root, a.entity_ident, job),
                        json.dumps({"v": 1, "job": job, "reason": "test"}))
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "cancelled"), rep)
        self.assertIn("cancelled while downloading fw", rep["response"])
        self.assertFalse(os.path.exists(marker))
        # the part stays: a later job with the same artifact resumes it
        self.assertTrue(os.path.exists(part))

    def test_releases(self):
        a = self.agent("release", "--device-type", "board-a")
        data = os.urandom(2000)
        sha = self.server.add(data)

        def release(seq, types=(), downgrade=False):
            return {"stream": "firmware", "seq": seq, "device_types": list(types),
                    "allow_downgrade": downgrade}
        job = self.publish(a, "return 1", {"fw": data}, release=release(5, ["board-b"]))
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "incompatible"), rep)
        self.assertEqual(self.server.requests(sha), [])   # nothing downloaded first
        job = self.publish(a, "return 1", {"fw": data}, release=release(5, ["board-a"]))
        self.assertEqual(self.final(job)["status"], "terminated")
        job = self.publish(a, "return 1", {"fw": data}, release=release(4))
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "rollback_refused"),
                         rep)
        job = self.publish(a, "return 1", {"fw": data}, release=release(4, downgrade=True))
        self.assertEqual(self.final(job)["status"], "terminated")
        self.assertEqual(len(self.server.requests(sha)), 1)

    def test_storage_full_before_any_byte(self):
        a = self.agent("full", "--artifact-reserve", str(1 << 40))
        data = os.urandom(MIB)
        sha = self.server.add(data)
        marker = os.path.join(a.files, "ran")
        job = self.publish(a, "rcs.file.write('ran', 'x') return 1", {"fw": data})
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "storage_full"), rep)
        self.assertEqual(self.server.requests(sha), [])
        self.assertFalse(os.path.exists(marker))

    def test_wrong_bytes_twice_is_artifact_invalid(self):
        a = self.agent("wrong")
        data = os.urandom(MIB + 5)
        sha = self.server.add(data, wrong=True)
        marker = os.path.join(a.files, "ran")
        job = self.publish(a, "rcs.file.write('ran', 'x') return 1", {"fw": data})
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "artifact_invalid"),
                         rep)
        self.assertEqual(self.downloads(sha), 2)
        self.assertFalse(os.path.exists(marker))
        self.assertFalse(os.path.exists(os.path.join(a.state_dir, "artifacts", sha)))

    def test_what_the_signature_excludes(self):
        """No redirect is followed; a body longer than the signed size and a 206 whose
        Content-Range is not the range asked for are wrong results (twice: artifact_invalid)."""
        a = self.agent("strict")
        data = os.urandom(MIB)
        sha = self.server.add(data, redirect=True)
        rep = self.final(self.publish(a, "return 1", {"fw": data}))
        self.assertEqual((rep["status"], rep.get("error")),
                         ("edge_error", "artifact_unavailable"), rep)
        self.assertIn("redirects are not followed", rep["response"])
        self.assertEqual(len(self.server.requests(sha)), 1)

        data = os.urandom(MIB)
        sha = self.server.add(data, longer=True)
        rep = self.final(self.publish(a, "return 1", {"fw": data}))
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "artifact_invalid"),
                         rep)
        self.assertIn("more than the signed size", rep["response"])
        self.assertEqual(len(self.server.requests(sha)), 2)

        # a cut, then a resume answered with the wrong range: from zero once more, the same
        data = os.urandom(2 * MIB)
        sha = self.server.add(data, bad_range=True, cut=[MIB, MIB + MIB // 2])
        rep = self.final(self.publish(a, "return 1", {"fw": data}))
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "artifact_invalid"),
                         rep)
        self.assertIn("Content-Range", rep["response"])
        self.assertEqual([r[1] for r in self.server.requests(sha)],
                         [None, "bytes=%d-" % MIB, None, "bytes=%d-" % (MIB + MIB // 2)])

    def test_refused_and_malformed(self):
        a = self.agent("refused")
        data = os.urandom(1000)
        # not on the server: 404 ends the job without retrying
        job = self.publish(a, "return 1", {"fw": data})
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")),
                         ("edge_error", "artifact_unavailable"), rep)
        self.assertIn("HTTP 404", rep["response"])
        # a malformed "artifacts" is refused on arrival, with the reason
        job = self.publish(a, "return 1", {}, artifacts={"Bad Name": {"sha256": "0", "size": 1}})
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")), ("edge_error", "envelope_invalid"))
        self.assertIn("'Bad Name' is not an artifact key", rep["response"])

    def test_artifact_dir_inside_a_file_dir_refused(self):
        fdir = os.path.join(self.workdir, "shared-files")
        os.makedirs(fdir, exist_ok=True)
        r = subprocess.run([AGENT, "--mqtt", self.broker.url, "--client-root", self.client_root,
                            "--entity-ident", str(uuid.uuid4()), "--state-dir",
                            os.path.join(self.workdir, "x-state"), "--require-signature=false",
                            "--file-dir", fdir, "--artifact-dir", os.path.join(fdir, "a"),
                            "--check"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("overlap", r.stderr)

    def test_plain_http_on_a_network_warned(self):
        def check(url):
            return subprocess.run(
                [AGENT, "--mqtt", self.broker.url, "--client-root", self.client_root,
                 "--entity-ident", str(uuid.uuid4()), "--state-dir",
                 os.path.join(self.workdir, "y-state"), "--require-signature=false",
                 "--artifact-url", url, "--check"], capture_output=True, text=True, timeout=30)
        r = check("http://192.0.2.1:8080")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("plain http on a network", r.stderr)
        for quiet in ("http://127.0.0.1:8080", "https://192.0.2.1:8443"):
            self.assertNotIn("plain http", check(quiet).stderr)
        self.assertEqual(check("http://192.0.2.1/v3").returncode, 2)


class MqttChunks:
    """Stands for the coordinator's MQTT transport (docs/mqtt.md "Artifacts over MQTT"):
    answers each get on rcs/v1/<client_root>/+/artifacts/+/get from the server's files with
    the raw bytes on .../data/<offset> (QoS 0), or an error on .../error. Faults per
    artifact: drop (offsets whose first get is not answered), busy (the first get answered
    busy), missing (not_found). gets holds (sha, offset, length) of every get."""

    def __init__(self, broker, client_root, server):
        import paho.mqtt.client as mqtt
        self.server, self.gets, self.lock = server, [], threading.Lock()
        self.faults = {}
        self.subscribed = threading.Event()
        self.client = mqtt.Client(client_id="art-coord-" + uuid.uuid4().hex[:8],
                                  clean_session=True)
        self.client.on_connect = lambda c, u, f, rc: c.subscribe(
            "rcs/v1/%s/+/artifacts/+/get" % client_root, 1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self.on_get
        self.client.connect("127.0.0.1", broker.port, keepalive=10)
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise AssertionError("no SUBACK")

    def on_get(self, client, userdata, msg):
        parts = msg.topic.split("/")
        base, sha = "/".join(parts[:-1]), parts[5]
        req = json.loads(msg.payload)
        off, length = req["offset"], req["length"]
        f = self.faults.setdefault(sha, {})
        with self.lock:
            self.gets.append((sha, off, length))
        if sha not in self.server.files or f.get("missing"):
            err = {"v": 1, "job": req["job"], "code": "not_found", "message": "no such"}
            return client.publish(base + "/error", json.dumps(err), qos=0)
        if f.get("busy"):
            f["busy"] = False
            err = {"v": 1, "job": req["job"], "code": "busy", "message": "later"}
            return client.publish(base + "/error", json.dumps(err), qos=0)
        if off in f.get("drop", set()):
            f["drop"].discard(off)
            return None
        data = self.server.files[sha][off:off + min(length, 65536)]
        if self.server.faults.get(sha, {}).get("wrong") and off == 0:
            data = bytes([data[0] ^ 0xff]) + data[1:]
        return client.publish(base + "/data/%d" % off, data, qos=0)

    def requests(self, sha):
        with self.lock:
            return [g for g in self.gets if g[0] == sha]

    def stop(self):
        self.client.disconnect()
        self.client.loop_stop()


class ArtifactsOverMqttTest(ArtifactsTest):
    """The same device side with artifact_transport mqtt: the bytes come as chunks through
    the broker; a chunk lost is asked for again, a busy answer waited out, a not_found ends
    the job, a kill -9 resumes from the journaled offset."""

    over_http = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.chunks = MqttChunks(cls.broker, cls.client_root, cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.chunks.stop()
        super().tearDownClass()

    def test_chunks_through_the_broker(self):
        a = self.agent("mqtt")
        data = os.urandom(MIB + 1234)
        sha = self.server.add(data)
        self.chunks.faults[sha] = {"drop": {3 * 65536}, "busy": True}
        job = self.publish(a, "return rcs.artifacts.fw.sha256", {"fw": data})
        rep = self.final(job, timeout=90)
        self.assertEqual((rep["status"], rep["response"]), ("terminated", sha), rep)
        gets = self.chunks.requests(sha)
        self.assertTrue(all(g[2] <= 65536 for g in gets), gets)
        # the lost chunk was asked for twice; the busy one again after the wait
        self.assertEqual(sum(1 for g in gets if g[1] == 3 * 65536), 2, gets)
        self.assertEqual(sum(1 for g in gets if g[1] == 0), 2, gets)
        self.assertEqual(self.server.requests(sha), [])   # nothing over HTTP
        with open(os.path.join(a.state_dir, "artifacts", sha), "rb") as f:
            self.assertEqual(f.read(), data)
        # not_found ends the job
        data = os.urandom(1000)
        job = self.publish(a, "return 1", {"fw": data})
        rep = self.final(job)
        self.assertEqual((rep["status"], rep.get("error")),
                         ("edge_error", "artifact_unavailable"), rep)
        self.assertIn("not_found", rep["response"])

    def test_resume_after_kill_9_over_mqtt(self):
        a = self.agent("mqtt-killed", "--artifact-max-rate", str(2 * MIB))
        data = os.urandom(12 * MIB)
        sha = self.server.add(data)
        part = os.path.join(a.state_dir, "artifacts", sha + ".part")

        def part_size():
            try:
                return os.path.getsize(part)
            except OSError:
                return 0
        job = self.publish(a, "return rcs.artifacts.fw.sha256", {"fw": data})
        wait_for(lambda: self.chunks.requests(sha), timeout=10, what="the download")
        started = time.time()
        wait_for(lambda: part_size() >= 6 * MIB, timeout=30, what="half the download")
        self.assertGreater(time.time() - started, 2.0)   # artifact_max_rate paces the gets
        a.stop(signal.SIGKILL)
        at_kill, mark = part_size(), len(self.chunks.requests(sha))
        with open(part, "ab") as f:   # a power cut's unsynced bytes
            f.write(b"\xee" * MIB)
        self.started(a)
        rep = self.final(job, timeout=90)
        self.assertEqual((rep["status"], rep["response"]), ("terminated", sha), rep)
        resumed_at = min(g[1] for g in self.chunks.requests(sha)[mark:])
        self.assertGreaterEqual(resumed_at, 4 * MIB)
        self.assertLessEqual(resumed_at, at_kill)
        self.assertEqual(self.downloads(sha), 1)
        statuses = [r["status"] for r in self.reports.of(job)]
        self.assertEqual(statuses.count("edge_started"), 1, statuses)

    # the HTTP client's own cases
    test_resume_after_a_cut_connection = None
    test_what_the_signature_excludes = None
    test_refused_and_malformed = None
    test_artifact_dir_inside_a_file_dir_refused = None
    test_plain_http_on_a_network_warned = None
    test_resume_after_kill_9 = None
    test_releases = None


def cross_missing(triplet, qemu):
    """What the cross build of an architecture lacks here (qemu, compiler, sysroot)."""
    out = [t for t in (qemu, triplet + "-gcc") if shutil.which(t) is None]
    if not os.path.isdir(os.path.join(SYSROOT_DIR, triplet)):
        out.append("the %s sysroot" % triplet)
    return out


class CrossArtifactsBase(ArtifactsTest):
    """The downloads, the cut and the kill -9 again with the agent cross-built for TRIPLET
    (toolchains/<triplet>.cmake, whose sysroot has libcurl: tools/deps.sh) under qemu-user
    (which refuses seccomp: --allow-no-seccomp)."""
    TRIPLET, QEMU = None, None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        build = os.path.join(cls.workdir, "build-" + cls.TRIPLET)
        log = os.path.join(cls.workdir, "build-%s.log" % cls.TRIPLET)
        run_logged(["cmake", "-S", SOURCE_DIR, "-B", build,
                    "-DCMAKE_TOOLCHAIN_FILE=%s/toolchains/%s.cmake" % (SOURCE_DIR, cls.TRIPLET),
                    "-DWITH_COORDINATOR=OFF", "-DWITH_TESTS=OFF"], log, 120)
        run_logged(["cmake", "--build", build, "-j2", "--target", "rcs-agent"], log, 300)
        with open(log) as f:
            if "artifacts over HTTP(S) (libcurl): ON" not in f.read():
                raise unittest.SkipTest("the %s sysroot has no libcurl (one made before it"
                                        " held it: tools/deps.sh sysroots makes it again)"
                                        % cls.TRIPLET)
        cls.binary = os.path.join(build, "bin", "rcs-agent")
        cls.emulator = [cls.QEMU, "-L", os.path.join(SYSROOT_DIR, cls.TRIPLET)]
        cls.agent_args = ["--allow-no-seccomp"]

    # the configuration checks and the release logic are the native run's
    test_artifact_dir_inside_a_file_dir_refused = None
    test_plain_http_on_a_network_warned = None
    test_releases = None
    test_refused_and_malformed = None
    test_storage_full_before_any_byte = None
    test_cancel_during_a_download = None


@unittest.skipIf(cross_missing("aarch64-linux-gnu", "qemu-aarch64"),
                 "needs %s (tools/deps.sh test)"
                 % ", ".join(cross_missing("aarch64-linux-gnu", "qemu-aarch64")))
class ArtifactsAarch64Test(CrossArtifactsBase):
    """The HTTP cases with the agent cross-built for 64-bit ARM."""
    TRIPLET, QEMU = "aarch64-linux-gnu", "qemu-aarch64"


@unittest.skipIf(cross_missing("arm-linux-gnueabihf", "qemu-arm"),
                 "needs %s (tools/deps.sh test)"
                 % ", ".join(cross_missing("arm-linux-gnueabihf", "qemu-arm")))
class ArtifactsArmhfTest(CrossArtifactsBase):
    """The HTTP cases with the agent cross-built for 32-bit ARM (64-bit file offsets)."""
    TRIPLET, QEMU = "arm-linux-gnueabihf", "qemu-arm"


del CrossArtifactsBase  # its subclasses' only: not a test of its own

if __name__ == "__main__":
    unittest.main()
