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
        """20 MB through the coordinator: its peak memory grows by far less."""
        data = os.urandom(20 * 1024 * 1024)
        sha = hashlib.sha256(data).hexdigest()
        pid = self.coord.proc.pid
        before = vm_hwm_kb(pid)
        r = self.upload(data, name="big", sha=sha)
        self.assertEqual(r.status, 201, r)
        after = vm_hwm_kb(pid)
        bound = 12 * 1024 if not sanitized(pid) else 1 << 30
        self.assertLess(after - before, bound, "peak RSS grew from %d to %d kB" % (before,
                                                                                 after))
        # chunked, with no Content-Length: the same
        data2 = os.urandom(20 * 1024 * 1024)
        r = self.upload(data2, name="big2", chunked=True)
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
        r = self.upload(b"z" * 100001, chunked=True)
        self.assertErr(r, 413, "payload_too_large")
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
        r = self.upload(b"r" * 60000, chunked=True)
        self.assertErr(r, 409, "quota_exceeded")
        self.assertEqual(self.tmp_files(), [])
        r = self.upload(b"s" * 50000)
        self.assertEqual(r.status, 201, r)
        made.append(r.json["ident"])
        for ident in made:
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
