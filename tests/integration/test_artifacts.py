#!/usr/bin/env python3
"""Integration tests of the artifacts API (docs/api.md, "Artifacts") on the real
rcs-coordinator: uploads streamed to storage (201, then 200 for the same bytes; 412 when
rcs-sha256 differs; 413 over --artifact-max-size, from Content-Length or as a chunked body
passes it; 409 over --artifact-quota; 507 on a full disk, a small tmpfs mounted as root;
nothing kept by a refused or cut upload, and what a killed coordinator left removed at its
start), a 20 MB
upload that does not grow the coordinator's memory by its size, the list, one record, its
bytes with Range, If-Range and ETag (206, 416), deletes, roles (viewer reads, admin
writes, no key 401), another tenant's artifact 404, and the audit records of uploads and
deletes, and the bytes counted in the metrics.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_artifacts.py
"""

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from rcs_fixture import CoordinatorTest
from rcs_harness import free_port

PATH = "/v3/commands/artifacts"


def vm_hwm_kb(pid):
    """The peak resident memory of process pid (VmHWM, kB)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for %d" % pid)


def sanitized(pid):
    """Whether process pid runs with AddressSanitizer, whose quarantine keeps freed memory
    resident (the bound on its growth means nothing then)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


class Resp:
    def __init__(self, status, headers, data):
        self.status = status
        self.headers = headers
        self.data = data
        try:
            self.json = json.loads(data) if data else None
        except ValueError:
            self.json = None
        self.raw = data[:500]

    def __repr__(self):
        return "<%d %r>" % (self.status, self.raw)


class ArtifactsBase(CoordinatorTest):
    def req(self, method, path, key=None, body=None, headers=None, chunked=False):
        """One request on a connection of its own: key None is the admin's, "" none."""
        h = {} if headers is None else dict(headers)
        key = self.admin_key if key is None else key
        if key:
            h["api-key"] = key
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=60)
        try:
            if chunked:
                c.request(method, path, body=body, headers=h, encode_chunked=True)
            else:
                c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            c.close()

    def upload(self, data, name="fw.bin", key=None, sha=None, chunked=False):
        h = {"Content-Type": "application/octet-stream"}
        if sha:
            h["rcs-sha256"] = sha
        q = "?name=%s" % name if name is not None else ""
        body = data
        if chunked:
            body = (data[i:i + 65536] for i in range(0, len(data), 65536))
        return self.req("POST", PATH + q, key=key, body=body, headers=h, chunked=chunked)

    def assertChunkedRefused(self):
        """A chunked upload (no Content-Length) is answered 411 length_required before its
        body, which is not read."""
        s = socket.create_connection(("127.0.0.1", self.coord.port), timeout=30)
        try:
            s.sendall(("POST %s?name=chunked HTTP/1.1\r\nHost: x\r\napi-key: %s\r\n"
                       "Transfer-Encoding: chunked\r\nContent-Type: application/octet-stream"
                       "\r\n\r\n10\r\n0123456789abcdef\r\n" % (PATH, self.admin_key)).encode())
            answer = b""
            while b"}" not in answer:
                piece = s.recv(65536)
                if not piece:
                    break
                answer += piece
        finally:
            s.close()
        head, _, body = answer.decode("latin-1").partition("\r\n\r\n")
        self.assertIn(" 411 ", head.split("\r\n")[0], answer)
        self.assertEqual(json.loads(body)["error"]["code"], "length_required")
        self.assertEqual(self.tmp_files(), [])

    def assertErr(self, r, status, code, field=None):
        self.assertEqual(r.status, status, r)
        self.assertIsNotNone(r.json, r)
        self.assertEqual(r.json["error"]["code"], code, r)
        if field:
            self.assertEqual(r.json["error"]["details"]["field"], field, r)

    def artifact_dir(self):
        """The artifacts' directory (SQLite), None on PostgreSQL."""
        if self.coord.db.startswith("postgres"):
            return None
        return os.path.join(os.path.dirname(self.coord.db), "artifacts")

    def tmp_files(self):
        d = self.artifact_dir()
        if d is None or not os.path.isdir(os.path.join(d, ".tmp")):
            return []
        return os.listdir(os.path.join(d, ".tmp"))


class ArtifactsTest(ArtifactsBase):
    roles = other_tenant = True
    metrics_port = free_port()
    extra_args = ("--metrics-listen", "127.0.0.1:%d" % metrics_port)

    def artifact_bytes(self):
        """rcs_artifact_bytes_total by direction."""
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        finally:
            c.close()
        out = {}
        for line in text.splitlines():
            if line.startswith("rcs_artifact_bytes_total{"):
                out[line.split('"')[1]] = int(line.split()[-1])
        return out

    def test_metrics_count_bytes(self):
        data = os.urandom(70000)
        before = self.artifact_bytes()
        self.assertEqual(self.upload(data, name="counted").status, 201)
        self.assertEqual(self.upload(data, name="counted").status, 200)
        r = self.req("GET", PATH + "/sha256:%s/content" % hashlib.sha256(data).hexdigest(),
                     headers={"Range": "bytes=0-999"})
        self.assertEqual(r.status, 206)
        after = self.artifact_bytes()
        self.assertEqual(after["uploaded"] - before["uploaded"], 70000)
        self.assertEqual(after["served"] - before["served"], 1000)

    def test_upload_dedupe_show_list_delete(self):
        data = os.urandom(300000)
        sha = hashlib.sha256(data).hexdigest()
        r = self.upload(data, name="firmware-1.2", sha=sha)
        self.assertEqual(r.status, 201, r)
        rec = r.json
        self.assertEqual(rec["ident"], "sha256:" + sha)
        self.assertEqual(rec["sha256"], sha)
        self.assertEqual(rec["size"], len(data))
        self.assertEqual(rec["name"], "firmware-1.2")
        self.assertEqual(rec["created_user"], "admin")
        self.assertEqual(rec["used_by"], [])
        self.assertLessEqual(abs(rec["created_at"] - time.time()), 60)
        if self.artifact_dir():
            f = os.path.join(self.artifact_dir(), self.client_root, sha[:2], sha)
            with open(f, "rb") as fp:
                self.assertEqual(fp.read(), data)
        # the same bytes again: the record there is
        r = self.upload(data, name="other-name")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["name"], "firmware-1.2")
        self.assertEqual(self.tmp_files(), [])
        # show, list (also for a viewer), content
        r = self.req("GET", PATH + "/sha256:" + sha, key=self.viewer.key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, rec)
        r = self.req("GET", PATH + "?name=firmware-1.2", key=self.viewer.key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual([a["ident"] for a in r.json["items"]], [rec["ident"]])
        r = self.req("GET", PATH + "/sha256:%s/content" % sha, key=self.viewer.key)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.data, data)
        self.assertEqual(r.headers["etag"], '"%s"' % sha)
        self.assertEqual(r.headers["accept-ranges"], "bytes")
        self.assertEqual(r.headers["content-type"], "application/octet-stream")
        # another tenant has none
        r = self.req("GET", PATH + "/sha256:" + sha, key=self.other.key)
        self.assertErr(r, 404, "not_found")
        r = self.req("GET", PATH + "/sha256:%s/content" % sha, key=self.other.key)
        self.assertEqual(r.status, 404, r)
        # delete
        r = self.req("DELETE", PATH + "/sha256:" + sha, key=self.viewer.key)
        self.assertErr(r, 403, "forbidden")
        r = self.req("DELETE", PATH + "/sha256:" + sha)
        self.assertEqual(r.status, 204, r)
        r = self.req("GET", PATH + "/sha256:" + sha)
        self.assertEqual(r.status, 404, r)
        r = self.req("DELETE", PATH + "/sha256:" + sha)
        self.assertEqual(r.status, 404, r)
        if self.artifact_dir():
            self.assertFalse(os.path.exists(f))
        # audited: the upload, its copy, the delete (the key never)
        r = self.req("GET", "/v3/commands/audit?target=sha256:" + sha)
        self.assertEqual(r.status, 200, r)
        got = [(a["method"], a["status_code"]) for a in r.json["items"]]
        self.assertEqual(got, [("DELETE", 404), ("DELETE", 204), ("DELETE", 403),
                               ("POST", 200), ("POST", 201)], r)
        self.assertNotIn(self.admin_key, r.data.decode())

    def test_utf8_name(self):
        r = self.upload(b"utf-8 label", name="firmware-%C3%A9t%C3%A9-%E2%9C%93")
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["name"], "firmware-\u00e9t\u00e9-\u2713")
        self.assertEqual(self.req("DELETE", PATH + "/" + r.json["ident"]).status, 204)

    def test_list_newest_first_paged(self):
        idents = []
        for i in range(3):
            r = self.upload(b"list-%d" % i, name="listed")
            self.assertEqual(r.status, 201, r)
            idents.append(r.json["ident"])
            time.sleep(1.05)
        r = self.req("GET", PATH + "?name=listed&per_page=2")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["total_items"], 3)
        self.assertEqual(r.json["total_pages"], 2)
        self.assertEqual([a["ident"] for a in r.json["items"]], idents[::-1][:2])
        r = self.req("GET", PATH + "?name=listed&per_page=2&page=2")
        self.assertEqual([a["ident"] for a in r.json["items"]], idents[:1])
        r = self.req("GET", PATH + "?bogus=1")
        self.assertErr(r, 400, "invalid_parameter")

    def test_digest_mismatch_keeps_nothing(self):
        data = b"the bytes" * 1000
        r = self.upload(data, sha="0" * 64)
        self.assertErr(r, 412, "digest_mismatch", "rcs-sha256")
        sha = hashlib.sha256(data).hexdigest()
        self.assertEqual(self.req("GET", PATH + "/sha256:" + sha).status, 404)
        self.assertEqual(self.tmp_files(), [])
        # an upper-case header is the same digest
        r = self.upload(data, sha=sha.upper())
        self.assertEqual(r.status, 201, r)
        r = self.upload(data, sha="xyz")
        self.assertErr(r, 400, "invalid_parameter", "rcs-sha256")

    def test_refused_before_the_body(self):
        data = b"x" * 1000
        r = self.upload(data, key="")
        self.assertErr(r, 401, "unauthorized")
        self.assertEqual(r.headers.get("cache-control"), "no-store")
        r = self.upload(data, key="rcs_" + "0" * 48)
        self.assertErr(r, 401, "unauthorized")
        r = self.upload(data, key=self.viewer.key)
        self.assertErr(r, 403, "forbidden")
        r = self.upload(data, key=self.operator.key)
        self.assertErr(r, 403, "forbidden")
        # refused before the body, still audited once the key is known
        r = self.req("GET", "/v3/commands/audit?user=vera")
        self.assertEqual([(a["method"], a["path"], a["status_code"]) for a in r.json["items"]],
                         [("POST", PATH, 403)], r)
        r = self.upload(data, name=None)
        self.assertErr(r, 400, "invalid_parameter", "name")
        r = self.upload(data, name="a" * 129)
        self.assertErr(r, 400, "invalid_parameter", "name")
        r = self.upload(data, name="bad%01name")
        self.assertErr(r, 400, "invalid_parameter", "name")
        # C1 controls (U+0085, U+009B as UTF-8), DEL and bytes that are not UTF-8 neither
        for bad in ("bad%C2%85name", "csi%C2%9B2J", "del%7F", "latin1%E9t%E9", "%FF"):
            r = self.upload(data, name=bad)
            self.assertErr(r, 400, "invalid_parameter", "name")
        r = self.req("POST", PATH + "?name=a&x=1", body=data)
        self.assertErr(r, 400, "invalid_parameter", "x")
        sha = hashlib.sha256(data).hexdigest()
        self.assertEqual(self.req("GET", PATH + "/sha256:" + sha).status, 404)
        self.assertEqual(self.tmp_files(), [])
        # a malformed ident is a 400 naming it
        for bad in ("abc", "sha256:" + "A" * 64, "sha256:" + "0" * 63, "md5:" + "0" * 64):
            r = self.req("GET", PATH + "/" + bad)
            self.assertErr(r, 400, "invalid_parameter", "ident")

    def test_ranges(self):
        data = bytes(range(256)) * 40  # 10240 bytes
        sha = hashlib.sha256(data).hexdigest()
        self.assertIn(self.upload(data).status, (200, 201))
        url = PATH + "/sha256:%s/content" % sha
        etag = '"%s"' % sha
        for rng, lo, hi in (("bytes=0-99", 0, 99), ("bytes=10000-", 10000, 10239),
                            ("bytes=-40", 10200, 10239), ("bytes=10200-99999", 10200, 10239),
                            ("bytes=5-5", 5, 5)):
            r = self.req("GET", url, headers={"Range": rng})
            self.assertEqual(r.status, 206, (rng, r))
            self.assertEqual(r.data, data[lo:hi + 1], rng)
            self.assertEqual(r.headers["content-range"], "bytes %d-%d/10240" % (lo, hi))
            self.assertEqual(r.headers["etag"], etag)
        for rng in ("bytes=10240-", "bytes=99999-100000", "bytes=-0"):
            r = self.req("GET", url, headers={"Range": rng})
            self.assertEqual(r.status, 416, (rng, r))
            self.assertEqual(r.headers["content-range"], "bytes */10240")
        # malformed or several ranges: the whole
        for rng in ("bytes=5-1", "lines=1-2", "bytes=0-1,5-6", "bytes=x-"):
            r = self.req("GET", url, headers={"Range": rng})
            self.assertEqual(r.status, 200, (rng, r))
            self.assertEqual(r.data, data)
        # If-Range: the range only for these very bytes
        r = self.req("GET", url, headers={"Range": "bytes=0-9", "If-Range": etag})
        self.assertEqual(r.status, 206, r)
        self.assertEqual(r.data, data[:10])
        r = self.req("GET", url, headers={"Range": "bytes=0-9", "If-Range": '"%s"' % ("0" * 64)})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.data, data)

    def test_large_upload_is_streamed(self):
        """20 MB through the coordinator: its peak memory grows by far less (measured after
        a 2 MB upload, which takes what any upload takes: its buffers, the database's)."""
        data = os.urandom(20 * 1024 * 1024)
        sha = hashlib.sha256(data).hexdigest()
        pid = self.coord.proc.pid
        r = self.upload(os.urandom(2 * 1024 * 1024), name="warm-up")
        self.assertEqual(r.status, 201, r)
        before = vm_hwm_kb(pid)
        r = self.upload(data, name="big", sha=sha)
        self.assertEqual(r.status, 201, r)
        after = vm_hwm_kb(pid)
        bound = 12 * 1024 if not sanitized(pid) else 1 << 30
        self.assertLess(after - before, bound, "peak RSS grew from %d to %d kB" % (before,
                                                                                 after))
        # without rcs-sha256: the same
        data2 = os.urandom(20 * 1024 * 1024)
        r = self.upload(data2, name="big2")
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["sha256"], hashlib.sha256(data2).hexdigest())
        after2 = vm_hwm_kb(pid)
        self.assertLess(after2 - before, bound, "peak RSS grew from %d to %d kB" % (
            before, after2))
        r = self.req("GET", PATH + "/sha256:%s/content" % sha)
        self.assertEqual(r.status, 200)
        self.assertEqual(hashlib.sha256(r.data).hexdigest(), sha)
        r = self.req("GET", PATH + "/sha256:%s/content" % sha,
                     headers={"Range": "bytes=1048570-2097160"})
        self.assertEqual(r.status, 206)
        self.assertEqual(r.data, data[1048570:2097161])

    def test_max_body_does_not_apply(self):
        """--max-body is 1 MiB: a 3 MiB artifact still goes in."""
        r = self.upload(os.urandom(3 * 1024 * 1024), name="three")
        self.assertEqual(r.status, 201, r)


class ArtifactLimitsTest(ArtifactsBase):
    extra_args = ("--artifact-max-size", "100000", "--artifact-quota", "250000")

    def test_max_size(self):
        r = self.upload(b"y" * 100001)
        self.assertErr(r, 413, "payload_too_large")
        self.assertChunkedRefused()
        self.assertEqual(self.tmp_files(), [])
        r = self.upload(b"y" * 100000)
        self.assertEqual(r.status, 201, r)
        self.assertEqual(self.req("DELETE", PATH + "/" + r.json["ident"]).status, 204)

    def test_quota(self):
        made = []
        for c in b"ab":
            r = self.upload(bytes([c]) * 100000)
            self.assertEqual(r.status, 201, r)
            made.append(r.json["ident"])
            if c == ord("a"):
                # the same bytes again cost nothing (the upload itself fits the quota)
                self.assertEqual(self.upload(bytes([c]) * 100000).status, 200)
        r = self.upload(b"q" * 60000)
        self.assertErr(r, 409, "quota_exceeded")
        self.assertChunkedRefused()
        self.assertEqual(self.tmp_files(), [])
        # a copy named by rcs-sha256 of bytes the tenant has holds no quota: it is a 200
        a = b"a" * 100000
        r = self.upload(a, sha=hashlib.sha256(a).hexdigest())
        self.assertEqual(r.status, 200, r)
        r = self.upload(b"s" * 50000)
        self.assertEqual(r.status, 201, r)
        made.append(r.json["ident"])
        for ident in made:
            self.assertEqual(self.req("DELETE", PATH + "/" + ident).status, 204)

    def start_upload(self, length, sent):
        """An upload of length bytes (Content-Length) whose first sent bytes are on their
        way: the socket, to finish or close."""
        s = socket.create_connection(("127.0.0.1", self.coord.port))
        s.sendall(("POST %s?name=slow HTTP/1.1\r\nHost: x\r\napi-key: %s\r\nContent-Length: "
                   "%d\r\nContent-Type: application/octet-stream\r\n\r\n" % (
                       PATH, self.admin_key, length)).encode() + b"w" * sent)
        return s

    def test_quota_reserved_for_uploads_under_way(self):
        """An upload holds its Content-Length of the quota from its start: a second one
        that would not fit beside it is refused before its body; the first, finished, is
        stored; the quota comes back when an upload ends, or is cut."""
        r = self.upload(b"t" * 100000)
        self.assertEqual(r.status, 201, r)
        first = r.json["ident"]
        s = self.start_upload(100000, 1000)
        try:
            time.sleep(0.3)
            r = self.upload(b"u" * 60000)
            self.assertErr(r, 409, "quota_exceeded")
            s.sendall(b"w" * 99000)
            s.settimeout(30)
            answer = s.recv(65536).decode("latin-1")
            self.assertIn(" 201 ", answer.split("\r\n")[0])
        finally:
            s.close()
        made = self.req("GET", PATH + "?name=slow").json["items"]
        self.assertEqual(len(made), 1)
        # 200000 of 250000 stored: 60000 do not fit, 50000 do
        self.assertErr(self.upload(b"u" * 60000), 409, "quota_exceeded")
        for ident in (first, made[0]["ident"]):
            self.assertEqual(self.req("DELETE", PATH + "/" + ident).status, 204)
        # a cut upload gives its reservation back
        s = self.start_upload(100000, 10)
        time.sleep(0.3)
        s.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            r = self.upload(b"v" * 100000, name="after-cut")
            if r.status != 409:
                break
            time.sleep(0.2)
        self.assertEqual(r.status, 201, r)
        r2 = self.upload(b"x" * 100000, name="after-cut")
        self.assertEqual(r2.status, 201, r2)
        for ident in (r.json["ident"], r2.json["ident"]):
            self.assertEqual(self.req("DELETE", PATH + "/" + ident).status, 204)

    def test_cut_upload_keeps_nothing(self):
        """A client gone at half: no record, no temporary file."""
        s = socket.create_connection(("127.0.0.1", self.coord.port))
        s.sendall(("POST %s?name=cut HTTP/1.1\r\nHost: x\r\napi-key: %s\r\nContent-Length: "
                   "90000\r\nContent-Type: application/octet-stream\r\n\r\n" % (
                       PATH, self.admin_key)).encode() + b"c" * 45000)
        time.sleep(0.5)
        s.close()
        deadline = time.time() + 10
        while self.tmp_files() and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.tmp_files(), [])
        r = self.req("GET", PATH + "?name=cut")
        self.assertEqual(r.json["total_items"], 0)


    def test_sweep_at_start(self):
        """What a coordinator stopped in the middle of an upload left is removed at start."""
        if self.artifact_dir() is None:
            self.skipTest("PostgreSQL keeps no files")
        tmp = os.path.join(self.artifact_dir(), ".tmp")
        os.makedirs(tmp, exist_ok=True)
        with open(os.path.join(tmp, "left-by-a-crash.part"), "wb") as f:
            f.write(b"half")
        self.coord.stop(signal.SIGKILL)
        self.replace_coordinator(self.extra_args)
        self.assertEqual(self.tmp_files(), [])


class TaskArtifactsTest(ArtifactsBase):
    """Tasks that pin artifacts (docs/api.md, "Tasks"): the record's artifacts, release and
    download_timeout, their checks, new versions, and what pins an artifact against its
    delete (409 artifact_in_use): a task's current version, a job not yet ended."""
    other_tenant = True

    def art(self, data, name="fw.bin"):
        r = self.upload(data, name=name)
        self.assertIn(r.status, (200, 201), r)
        return r.json

    def task(self, **fields):
        body = {"name": "update", "script": "echo"}
        body.update(fields)
        return self.admin.post("/tasks", body)

    def test_record_and_checks(self):
        a = self.art(b"firmware one", name="fw-1.0")
        b = self.art(b"config", name="cfg")
        rel = {"stream": "stable", "seq": 7, "device_types": ["gw-1"]}
        r = self.task(artifacts={"firmware": a["ident"], "config.tar": b["ident"]},
                      release=rel, download_timeout=3600)
        self.assertStatus(r, 201)
        t = r.json
        self.assertEqual(t["artifacts"], {
            "firmware": {"ident": a["ident"], "size": 12, "name": "fw-1.0"},
            "config.tar": {"ident": b["ident"], "size": 6, "name": "cfg"}})
        self.assertEqual(t["release"], dict(rel, allow_downgrade=False))
        self.assertEqual(t["download_timeout"], 3600)
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, t)
        self.assertEqual(self.req("GET", PATH + "/" + a["ident"]).json["used_by"], [t["ident"]])
        # a task without artifacts: {}, no release, the default deadline
        plain = self.make_task()
        self.assertEqual((plain["artifacts"], plain["release"], plain["download_timeout"]),
                         ({}, None, 86400))

        missing = "sha256:" + "0" * 64
        for body, field in (
                ({"artifacts": {"fw": missing}}, "artifacts.fw"),
                ({"artifacts": {"fw": "sha256:" + "A" * 64}}, "artifacts.fw"),
                ({"artifacts": {"fw": a["sha256"]}}, "artifacts.fw"),
                ({"artifacts": {"fw": 5}}, "artifacts.fw"),
                ({"artifacts": {"Fw": a["ident"]}}, "artifacts"),
                ({"artifacts": {".fw": a["ident"]}}, "artifacts"),
                ({"artifacts": {"f" * 65: a["ident"]}}, "artifacts"),
                ({"artifacts": {"k%d" % i: a["ident"] for i in range(17)}}, "artifacts"),
                ({"artifacts": ["fw"]}, "artifacts"),
                ({"release": rel}, "release"),
                ({"artifacts": {"fw": a["ident"]}, "release": {"seq": 1}}, "release.stream"),
                ({"artifacts": {"fw": a["ident"]}, "release": {"stream": "s", "seq": -1}},
                 "release.seq"),
                ({"artifacts": {"fw": a["ident"]},
                  "release": {"stream": "s", "seq": 1, "x": 1}}, "release.x"),
                ({"artifacts": {"fw": a["ident"]},
                  "release": {"stream": "s" * 65, "seq": 1}}, "release.stream"),
                ({"artifacts": {"fw": a["ident"]},
                  "release": {"stream": "s", "seq": 1, "device_types": ["a b"]}},
                 "release.device_types"),
                ({"download_timeout": 59}, "download_timeout"),
                ({"download_timeout": 604801}, "download_timeout")):
            with self.subTest(body=body):
                self.assertError(self.task(**body), 400, "validation_failed", field)
        # another tenant's artifact is not this tenant's: 400 naming it
        oa = self.other.post("/tasks", {"name": "x", "script": "echo",
                                        "artifacts": {"fw": a["ident"]}})
        self.assertError(oa, 400, "validation_failed", "artifacts.fw")
        # 16 are taken
        r = self.task(artifacts={"k%d" % i: a["ident"] for i in range(16)})
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["artifacts"]), 16)
        self.assertStatus(self.admin.delete("/tasks/" + r.json["ident"]), 204)

    def test_versions_and_delete_in_use(self):
        a = self.art(b"image A", name="a")
        b = self.art(b"image B", name="b")
        t = self.task(artifacts={"fw": a["ident"]}).json
        path = "/tasks/" + t["ident"]
        # the same artifacts again: no new version; another one: a new version
        r = self.admin.patch(path, {"artifacts": {"fw": a["ident"]}})
        self.assertEqual(r.json["version"], 1)
        r = self.admin.patch(path, {"artifacts": {"fw": b["ident"]}})
        self.assertEqual(r.json["version"], 2)
        r = self.admin.patch(path, {"download_timeout": 120})
        self.assertEqual((r.json["version"], r.json["download_timeout"]), (3, 120))
        r = self.admin.patch(path, {"release": {"stream": "s", "seq": 2}})
        self.assertEqual(r.json["version"], 4)
        # a's last user is an old version: it may go; b is pinned by the current one
        self.assertEqual(self.req("DELETE", PATH + "/" + a["ident"]).status, 204)
        r = self.req("DELETE", PATH + "/" + b["ident"])
        self.assertErr(r, 409, "artifact_in_use")
        self.assertEqual(self.req("GET", PATH + "/" + b["ident"]).status, 200)
        # a job of the current version not yet ended pins b after the task moves on
        dev = self.make_device()
        job = self.admin.post(path + "/jobs", {"entity_ident": dev["entity_ident"]})
        self.assertStatus(job, 201)
        # removing the artifacts needs the release gone too
        self.assertError(self.admin.patch(path, {"artifacts": {}}), 400, "validation_failed",
                         "release")
        r = self.admin.patch(path, {"artifacts": None, "release": None})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["version"], r.json["artifacts"], r.json["release"]),
                         (5, {}, None))
        self.assertEqual(self.req("GET", PATH + "/" + b["ident"]).json["used_by"], [])
        self.assertErr(self.req("DELETE", PATH + "/" + b["ident"]), 409, "artifact_in_use")
        self.assertStatus(self.admin.patch("/jobs/%s/cancel" % job.json["ident"]), 200)
        self.assertEqual(self.req("DELETE", PATH + "/" + b["ident"]).status, 204)
        # PUT replaces: artifacts absent are none
        c = self.art(b"image C", name="c")
        self.assertEqual(self.admin.patch(path, {"artifacts": {"fw": c["ident"]}}).json["version"], 6)
        r = self.admin.put(path, {"name": "update", "script": "echo"})
        self.assertEqual((r.json["version"], r.json["artifacts"]), (7, {}))
        # a script's new bytes give the task a new version that pins the same artifacts
        self.assertStatus(self.admin.put("/scripts/art_s", {"source": "return 1\n"}), 201)
        r = self.admin.put(path, {"name": "update", "script": "art_s",
                                  "artifacts": {"fw": c["ident"]}})
        self.assertEqual(r.json["version"], 8)
        self.assertStatus(self.admin.put("/scripts/art_s", {"source": "return 2\n"}), 200)
        r = self.admin.get(path)
        self.assertEqual((r.json["version"], r.json["artifacts"]["fw"]["ident"]),
                         (9, c["ident"]))
        self.assertEqual(self.req("GET", PATH + "/" + c["ident"]).json["used_by"],
                         [t["ident"]])
        self.assertErr(self.req("DELETE", PATH + "/" + c["ident"]), 409, "artifact_in_use")
        # a deleted task pins nothing
        self.assertStatus(self.admin.delete(path), 204)
        self.assertEqual(self.req("DELETE", PATH + "/" + c["ident"]).status, 204)


class ArtifactDiskFullTest(ArtifactsBase):
    """The artifact directory on a 512 KiB tmpfs (SQLite; skipped when mount is not
    permitted): an upload that fills it answers 507 and keeps nothing."""

    mnt = tempfile.mkdtemp(prefix="rcs-art-full-")
    extra_args = ("--artifact-dir", mnt)

    @classmethod
    def setUpClass(cls):
        if os.environ.get("RCS_TEST_DB") == "postgres":
            os.rmdir(cls.mnt)
            raise unittest.SkipTest("PostgreSQL keeps the bytes in the database")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", cls.mnt],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            os.rmdir(cls.mnt)
            raise unittest.SkipTest("cannot mount a tmpfs: %s" % (p.stderr or p.stdout).strip())
        try:
            super().setUpClass()
        except BaseException:
            subprocess.run(["umount", "-l", cls.mnt], capture_output=True, timeout=30)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            subprocess.run(["umount", "-l", cls.mnt], capture_output=True, timeout=30)
            os.rmdir(cls.mnt)

    def artifact_dir(self):
        return self.mnt

    def test_disk_full(self):
        r = self.upload(os.urandom(2 * 1024 * 1024), name="too-big-for-the-disk")
        self.assertErr(r, 507, "storage_full")
        self.assertEqual(self.tmp_files(), [])
        self.assertEqual(self.req("GET", PATH).json["total_items"], 0)
        r = self.upload(b"small", name="fits")
        self.assertEqual(r.status, 201, r)


if __name__ == "__main__":
    unittest.main()
