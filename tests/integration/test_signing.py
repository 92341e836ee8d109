#!/usr/bin/env python3
"""Integration tests of task signatures (docs/signing.md, docs/api.md "Signatures"): the
coordinator signs with --signing-key, refuses signatures that don't verify against
--trusted-key, and accepts an offline openssl signature set by a PATCH of only `signature`.
Every signature is checked with openssl over a manifest rebuilt here."""

import base64
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from rcs_harness import COORDINATOR, Coordinator
from rcs_fixture import CoordinatorTest


def openssl(*args, data=None):
    p = subprocess.run(["openssl", *args], input=data, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), p.stderr.decode()))
    return p.stdout


def make_key(dirname, name):
    """An EC P-256 key pair: returns (private PEM path, public PEM path, key_id)."""
    priv = os.path.join(dirname, name + ".pem")
    pub = os.path.join(dirname, name + "-pub.pem")
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", priv)
    openssl("ec", "-in", priv, "-pubout", "-out", pub)
    der = openssl("pkey", "-pubin", "-in", pub, "-outform", "DER")
    return priv, pub, hashlib.sha256(der).hexdigest()[:16]


def canon(value):
    """RFC 8785 for the values these tests use (strings, integers, nested objects)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class SigningBase(CoordinatorTest):
    """The keys, the coordinator's signing flags and the helpers of the signing tests."""

    @classmethod
    def setUpClass(cls):
        cls.keydir = tempfile.mkdtemp(prefix="rcs-keys-")
        cls.addClassCleanup(shutil.rmtree, cls.keydir, ignore_errors=True)
        cls.key, cls.pub, cls.key_id = make_key(cls.keydir, "k")
        cls.other_key, cls.other_pub, cls.other_key_id = make_key(cls.keydir, "other")
        cls.extra_args = cls.signing_args()
        super().setUpClass()

    @classmethod
    def signing_args(cls):
        """The coordinator's signing flags, made once the keys are."""
        return ("--signing-key", cls.key, "--trusted-key", cls.pub)

    # -- helpers --------------------------------------------------------------------------

    def script_bytes(self, name):
        r = self.admin.get("/scripts/" + name)
        self.assertStatus(r, 200)
        return r.json["source"].encode("utf-8")

    def manifest(self, task):
        """Manifest v1, or v2 for a task with artifacts (docs/signing.md)."""
        data = self.script_bytes(task["script"])
        arts = task.get("artifacts") or {}
        text = ("rcs-task-signature-v%d\n"
                "client_root: %s\n"
                "task: %s\n"
                "version: %d\n"
                "script: %s\n"
                "script_sha256: %s\n"
                "constants: %s\n"
                "variables_info: %s\n") % (
                    2 if arts else 1, task["client_root"], task["ident"], task["version"],
                    task["script"], hashlib.sha256(data).hexdigest(),
                    canon(task.get("constants") or {}), canon(task.get("variables_info") or {}))
        if arts:
            signed = {k: {"sha256": a["ident"][len("sha256:"):], "size": a["size"]}
                      for k, a in arts.items()}
            text += "artifacts: %s\nrelease: %s\n" % (
                canon(signed), "null" if task.get("release") is None else canon(task["release"]))
        return text.encode("utf-8")

    def verifies(self, pub, manifest, value):
        d = tempfile.mkdtemp(dir=self.keydir)
        with open(os.path.join(d, "manifest"), "wb") as f:
            f.write(manifest)
        with open(os.path.join(d, "sig.der"), "wb") as f:
            f.write(base64.b64decode(value, validate=True))
        p = subprocess.run(["openssl", "dgst", "-sha256", "-verify", pub, "-signature",
                            os.path.join(d, "sig.der"), os.path.join(d, "manifest")],
                           capture_output=True, timeout=60)
        return p.returncode == 0

    def sign(self, key, manifest):
        """What an operator does offline: openssl dgst -sha256 -sign key | base64."""
        return base64.b64encode(openssl("dgst", "-sha256", "-sign", key,
                                        data=manifest)).decode()

    def assertSignedByCoordinator(self, task):
        sig = task["signature"]
        self.assertIsInstance(sig, dict, task)
        self.assertEqual(sig["alg"], "ES256")
        self.assertEqual(sig["key_id"], self.key_id)
        self.assertRegex(sig["value"], r"^[A-Za-z0-9+/]+={0,2}$")
        self.assertTrue(self.verifies(self.pub, self.manifest(task), sig["value"]),
                        "signature does not verify over:\n%s" % self.manifest(task).decode())

    def create_task(self, **fields):
        body = {"name": "signed", "script": "echo",
                "constants": {"a": "x", "n": 5, "nested": {"z": 1, "b": "é ✓"}, "B": "up"},
                "variables_info": {"message": {"type": "string", "alias": "Message",
                                               "optional": True}}}
        body.update(fields)
        r = self.admin.post("/tasks", body)
        self.assertStatus(r, 201)
        return r.json



class SigningTest(SigningBase):
    def test_create_is_signed(self):
        t = self.create_task()
        self.assertEqual(t["script_sha256"], hashlib.sha256(self.script_bytes("echo")).hexdigest())
        self.assertSignedByCoordinator(t)
        # Sanity of the check itself: the manifest of another version does not verify.
        wrong = dict(t, version=t["version"] + 1)
        self.assertFalse(self.verifies(self.pub, self.manifest(wrong), t["signature"]["value"]))
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json["signature"],
                         t["signature"])

    def test_task_without_constants(self):
        t = self.create_task(constants={}, variables_info={})
        self.assertSignedByCoordinator(t)
        self.assertIn(b"constants: {}\nvariables_info: {}\n", self.manifest(t))

    def test_update_signs_new_version(self):
        t = self.create_task()
        r = self.admin.patch("/tasks/" + t["ident"], {"constants": {"a": "y"}})
        self.assertStatus(r, 200)
        u = r.json
        self.assertEqual(u["version"], 2)
        self.assertNotEqual(u["signature"]["value"], t["signature"]["value"])
        self.assertSignedByCoordinator(u)
        self.assertFalse(self.verifies(self.pub, self.manifest(u), t["signature"]["value"]))
        r = self.admin.put("/tasks/" + t["ident"], {"name": "signed", "script": "echo"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], 3)
        self.assertSignedByCoordinator(r.json)

    def test_script_change_resigns(self):
        self.assertStatus(self.admin.put("/scripts/signed_s", {"source": "return 1\n"}), 201)
        t = self.create_task(script="signed_s")
        self.assertSignedByCoordinator(t)
        r = self.admin.put("/scripts/signed_s", {"source": "return 2\n"})
        self.assertStatus(r, 200)
        self.assertIn({"ident": t["ident"], "version": 2},
                      [{"ident": x["ident"], "version": x["version"]}
                       for x in r.json["tasks_updated"]])
        u = self.admin.get("/tasks/" + t["ident"]).json
        self.assertEqual(u["version"], 2)
        self.assertEqual(u["script_sha256"], hashlib.sha256(b"return 2\n").hexdigest())
        self.assertSignedByCoordinator(u)

    def test_offline_signature(self):
        t = self.create_task()
        path = "/tasks/" + t["ident"]
        manifest = self.manifest(t)

        # Signed by a key the coordinator doesn't trust.
        sig = {"alg": "ES256", "key_id": self.other_key_id,
               "value": self.sign(self.other_key, manifest)}
        self.assertTrue(self.verifies(self.other_pub, manifest, sig["value"]))
        self.assertError(self.admin.patch(path, {"signature": sig}), 400, "validation_failed",
                         "signature")
        # Untrusted key that claims the trusted key's id.
        sig = dict(sig, key_id=self.key_id)
        self.assertError(self.admin.patch(path, {"signature": sig}), 400, "validation_failed",
                         "signature")
        # Trusted key, but over another version's manifest.
        stale = self.manifest(dict(t, version=t["version"] + 1))
        sig = {"alg": "ES256", "key_id": self.key_id, "value": self.sign(self.key, stale)}
        self.assertError(self.admin.patch(path, {"signature": sig}), 400, "validation_failed",
                         "signature")
        # Malformed signature objects.
        good_value = self.sign(self.key, manifest)
        for bad in ({"alg": "RS256", "key_id": self.key_id, "value": good_value},
                    {"alg": "ES256", "key_id": self.key_id, "value": "not base64!"},
                    {"alg": "ES256", "key_id": self.key_id,
                     "value": base64.b64encode(b"\x30\x06\x02\x01\x01\x02\x01\x01").decode()},
                    {"alg": "ES256", "key_id": self.key_id},
                    "signature", 5):
            with self.subTest(signature=bad):
                self.assertError(self.admin.patch(path, {"signature": bad}), 400,
                                 "validation_failed", "signature")
        self.assertEqual(self.admin.get(path).json, t)

        # Trusted key over the current manifest: accepted, version unchanged.
        sig = {"alg": "ES256", "key_id": self.key_id, "value": good_value}
        r = self.admin.patch(path, {"signature": sig})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], t["version"])
        self.assertEqual(r.json["signature"], sig)
        g = self.admin.get(path).json
        self.assertEqual(g["version"], t["version"])
        self.assertEqual(g["signature"], sig)

        # The next version carries the coordinator's own signature again.
        r = self.admin.patch(path, {"comment": "changed"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], t["version"] + 1)
        self.assertNotEqual(r.json["signature"]["value"], good_value)
        self.assertSignedByCoordinator(r.json)

    def test_operator_cannot_set_signature(self):
        t = self.create_task()
        op = self.coord.api(self.coord.create_key(self.client_root, "olga", "operator")["api_key"])
        sig = {"alg": "ES256", "key_id": self.key_id,
               "value": self.sign(self.key, self.manifest(t))}
        self.assertError(op.patch("/tasks/" + t["ident"], {"signature": sig}), 403, "forbidden")


class EncryptedKeyTest(SigningTest):
    """The same tests with the signing key encrypted (openssl ec -aes256), its passphrase
    in --signing-key-passphrase-file; and the passphrase from RCS_SIGNING_KEY_PASSPHRASE,
    a wrong one, none."""

    PASSPHRASE = "correct horse battery"

    @classmethod
    def signing_args(cls):
        cls.passfile = os.path.join(cls.keydir, "passphrase")
        with open(cls.passfile, "w") as f:
            f.write(cls.PASSPHRASE + "\n")
        cls.enc_key = os.path.join(cls.keydir, "k-enc.pem")
        openssl("ec", "-in", cls.key, "-aes256", "-passout", "file:" + cls.passfile,
                "-out", cls.enc_key)
        with open(cls.enc_key) as f:
            assert "ENCRYPTED" in f.read()
        return ("--signing-key", cls.enc_key, "--signing-key-passphrase-file", cls.passfile,
                "--trusted-key", cls.pub)

    def check(self, *args, env=None):
        p = subprocess.run([COORDINATOR, "serve", "--check", "--db",
                            os.path.join(self.keydir, "check.db"), "--listen", "127.0.0.1:1",
                            "--signing-key", self.enc_key, *args],
                           capture_output=True, text=True, timeout=30, env=env)
        return p.returncode, p.stdout + p.stderr

    def test_passphrase_not_on_command_line(self):
        with open("/proc/%d/cmdline" % self.coord.proc.pid, "rb") as f:
            cmdline = f.read()
        self.assertIn(self.passfile.encode(), cmdline)
        self.assertNotIn(self.PASSPHRASE.encode(), cmdline)

    def test_wrong_or_missing_passphrase(self):
        wrong = os.path.join(self.keydir, "wrong")
        with open(wrong, "w") as f:
            f.write("not it\n")
        rc, out = self.check("--signing-key-passphrase-file", wrong)
        self.assertEqual(rc, 1, out)
        self.assertIn("--signing-key %s: wrong passphrase" % self.enc_key, out)
        self.assertNotIn("configuration OK", out)
        env = {k: v for k, v in os.environ.items() if k != "RCS_SIGNING_KEY_PASSPHRASE"}
        rc, out = self.check(env=env)
        self.assertEqual(rc, 1, out)
        self.assertIn("is encrypted: give its passphrase with --signing-key-passphrase-file",
                      out)
        rc, out = self.check("--signing-key-passphrase-file", wrong + ".missing")
        self.assertEqual(rc, 2, out)
        self.assertIn("--signing-key-passphrase-file %s.missing: No such file" % wrong, out)
        rc, out = self.check("--signing-key-passphrase-file", self.passfile)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.startswith("configuration OK\n"), out)  # stdout first

    def test_passphrase_from_environment(self):
        env = dict(os.environ, RCS_SIGNING_KEY_PASSPHRASE=self.PASSPHRASE)
        rc, out = self.check(env=env)
        self.assertEqual(rc, 0, out)
        self.assertTrue(out.startswith("configuration OK\n"), out)  # stdout first
        # serving: tasks signed, the variable wiped from the daemon's environment
        c = Coordinator(self.keydir, extra_args=("--signing-key", self.enc_key),
                        db=os.path.join(self.keydir, "env.db"), env=env)
        tenant = c.init_tenant(user="admin")
        c.start()
        try:
            with open("/proc/%d/environ" % c.proc.pid, "rb") as f:
                self.assertNotIn(self.PASSPHRASE.encode(), f.read())
            r = c.api(tenant["api_key"]).post("/tasks", {"name": "env", "script": "echo"})
            self.assertStatus(r, 201)
            sig = r.json["signature"]
            self.assertEqual(sig["key_id"], self.key_id)
            manifest = self.manifest(r.json)
            self.assertTrue(self.verifies(self.pub, manifest, sig["value"]))
        finally:
            self.assertEqual(c.stop(), 0)


class UnsignedTest(CoordinatorTest):
    """A coordinator without --signing-key leaves tasks unsigned."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()

    def test_signature_null(self):
        t = self.make_task(name="unsigned", constants={"a": 1})
        self.assertIn("signature", t)
        self.assertIsNone(t["signature"])
        r = self.admin.patch("/tasks/" + t["ident"], {"comment": "x"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], 2)
        self.assertIsNone(r.json["signature"])
        self.assertIsNone(self.admin.get("/tasks/" + t["ident"]).json["signature"])


class ArtifactSigningBase(SigningBase):
    """Tasks with artifacts: helpers (an artifact uploaded, a task pinning it)."""

    def artifact(self, data):
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=30)
        try:
            c.request("POST", "/v3/commands/artifacts?name=fw", body=data,
                      headers={"api-key": self.admin_key,
                               "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            body = json.loads(r.read())
            self.assertIn(r.status, (200, 201), body)
            return body["ident"]
        finally:
            c.close()

    def art_task(self, **fields):
        body = {"artifacts": {"firmware": self.artifact(b"firmware 1.2.3"),
                              "notes.txt": self.artifact(b"notes")},
                "release": {"stream": "stable", "seq": 12, "device_types": ["gw"],
                            "allow_downgrade": False}}
        body.update(fields)
        return self.create_task(**body)


class ArtifactSigningOfflineTest(ArtifactSigningBase):
    """With --signing-key but not --sign-artifacts, a task with artifacts is left unsigned
    (an admin API key alone cannot get firmware signed): an operator signs manifest v2
    offline with openssl and PATCHes the signature, checked against --trusted-key; a job
    goes out only while that signature verifies. Tasks without artifacts keep v1."""

    def test_left_unsigned_then_signed_offline(self):
        t = self.art_task()
        self.assertIsNone(t["signature"])
        path = "/tasks/" + t["ident"]
        manifest = self.manifest(t)
        self.assertTrue(manifest.startswith(b"rcs-task-signature-v2\n"))
        self.assertIn(b"\nrelease: {\"allow_downgrade\":false,\"device_types\":[\"gw\"],"
                      b"\"seq\":12,\"stream\":\"stable\"}\n", manifest)
        # a v1 signature of the same version does not cover the artifacts
        v1 = manifest.split(b"artifacts: ")[0].replace(b"-v2\n", b"-v1\n", 1)
        sig = {"alg": "ES256", "key_id": self.key_id, "value": self.sign(self.key, v1)}
        self.assertError(self.admin.patch(path, {"signature": sig}), 400, "validation_failed",
                         "signature")
        sig = {"alg": "ES256", "key_id": self.key_id, "value": self.sign(self.key, manifest)}
        r = self.admin.patch(path, {"signature": sig})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["version"], r.json["signature"]), (1, sig))
        # the job goes out: its signature verifies against the trusted key
        dev = self.make_device()
        r = self.admin.post(path + "/jobs", {"entity_ident": dev["entity_ident"],
                                             "variables": {"message": "hi"}})
        self.assertStatus(r, 201)
        # a new version is unsigned again
        r = self.admin.patch(path, {"release": {"stream": "stable", "seq": 13}})
        self.assertEqual((r.json["version"], r.json["signature"]), (2, None))
        # without artifacts the coordinator signs manifest v1 itself
        r = self.admin.patch(path, {"artifacts": None, "release": None})
        self.assertEqual(r.json["version"], 3)
        self.assertSignedByCoordinator(r.json)
        self.assertTrue(self.manifest(r.json).startswith(b"rcs-task-signature-v1\n"))


class ArtifactSigningCoordinatorTest(ArtifactSigningBase):
    """With --sign-artifacts as well, the coordinator signs manifest v2 itself."""

    @classmethod
    def signing_args(cls):
        return ("--signing-key", cls.key, "--trusted-key", cls.pub, "--sign-artifacts")

    def test_signed_over_manifest_v2(self):
        t = self.art_task()
        self.assertSignedByCoordinator(t)
        self.assertTrue(self.manifest(t).startswith(b"rcs-task-signature-v2\n"))
        # the release is signed: another seq does not verify
        wrong = dict(t, release=dict(t["release"], seq=11))
        self.assertFalse(self.verifies(self.pub, self.manifest(wrong), t["signature"]["value"]))
        # so is each artifact's size and hash
        arts = dict(t["artifacts"])
        arts["firmware"] = dict(arts["firmware"], size=arts["firmware"]["size"] + 1)
        self.assertFalse(self.verifies(self.pub, self.manifest(dict(t, artifacts=arts)),
                                       t["signature"]["value"]))
        # without a release: "release: null"
        u = self.admin.patch("/tasks/" + t["ident"], {"release": None}).json
        self.assertEqual(u["version"], 2)
        self.assertIn(b"\nrelease: null\n", self.manifest(u))
        self.assertSignedByCoordinator(u)


if __name__ == "__main__":
    unittest.main()
