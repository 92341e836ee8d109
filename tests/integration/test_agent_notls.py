#!/usr/bin/env python3
"""The agent built without TLS (-DWITH_TLS=OFF, paho's plain variant): no OpenSSL in the
program, a signed job over tcp:// ends terminated, and an ssl:// or mqtts:// broker URL is
refused at start (and by --check) with a message that names the build option.

The build goes to the test's temporary directory (agent only, the host's compiler).

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent_notls.py
RCS_KEEP_TMP=1 keeps the directory (build, logs).
"""

import os
import subprocess
import sys
import time
import unittest

from rcs_fixture import StackTest
from rcs_harness import SOURCE_DIR, Agent, make_ec_keypair, run_logged, wait_for

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")


class NoTlsAgentTest(StackTest):
    workdir_prefix = "rcs-notls-"
    check_coordinator = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.build = os.path.join(cls.workdir, "build")
        log = os.path.join(cls.workdir, "build.log")
        t0 = time.time()
        run_logged(["cmake", "-S", SOURCE_DIR, "-B", cls.build, "-DWITH_COORDINATOR=OFF",
             "-DWITH_TESTS=OFF", "-DWITH_TLS=OFF"], log, 120)
        run_logged(["cmake", "--build", cls.build, "-j2", "--target", "rcs-agent"], log, 300)
        sys.stderr.write("\n[note] agent without TLS built in %.0f s\n" % (time.time() - t0))
        cls.binary = os.path.join(cls.build, "bin", "rcs-agent")
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.start_stack(cls.key)

    def device(self, name):
        r = self.admin.post("/devices", {"name": name, "tags": []})
        self.assertEqual(r.status, 201, r)
        return r.json["entity_ident"]

    def test_links_no_openssl(self):
        out = subprocess.run(["ldd", self.binary], capture_output=True, text=True,
                             timeout=30).stdout
        self.assertIn("libpaho-mqtt3a.so", out)
        for lib in ("libssl", "libcrypto", "libpaho-mqtt3as"):
            self.assertNotIn(lib, out)
        self.assertIn("libmbedcrypto", out, "signatures are still checked")

    def test_signed_job_over_tcp(self):
        a = Agent(self.workdir, self.broker.url, self.client_root, self.device("plain"),
                  trusted_keys=[self.pub], binary=self.binary, name="plain")
        self.agents.append(a)
        a.start(timeout=30)
        wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json["online"],
                 timeout=30, what="device online")
        task = self.admin.post("/tasks", {
            "name": "echo", "script": "echo",
            "variables_info": {"message": {"type": "string", "optional": True}}}).json
        self.assertIsNotNone(task["signature"])
        r = self.admin.post("/tasks/%s/jobs" % task["ident"],
                            {"entity_ident": a.entity_ident, "variables": {"message": "plain"}})
        self.assertEqual(r.status, 201, r)
        done = wait_for(lambda: (lambda j: j if j["status"] in TERMINAL else None)(
            self.admin.get("/jobs/" + r.json["ident"]).json), timeout=60, what="job ended")
        self.assertEqual((done["status"], done["response"]), ("terminated", "plain"), done)
        self.assertEqual(a.stop(), 0)

    def test_refuses_tls_urls(self):
        ident = self.device("tls")
        for url in ("ssl://127.0.0.1:%d" % self.broker.port,
                    "mqtts://127.0.0.1:%d" % self.broker.port):
            state = os.path.join(self.workdir, "state-" + url.split(":")[0])
            p = subprocess.run([self.binary, "--mqtt", url, "--client-root", self.client_root,
                                "--entity-ident", ident, "--state-dir", state,
                                "--trusted-key", self.pub],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0, p.stderr)
            self.assertIn("this build has no TLS (built with WITH_TLS=OFF)", p.stderr)
            # --check says so too, rather than "configuration OK"
            c = subprocess.run([self.binary, "--check", "--mqtt", url, "--client-root",
                                self.client_root, "--entity-ident", ident, "--state-dir",
                                state, "--trusted-key", self.pub],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(c.returncode, 2, (c.stdout, c.stderr))
            self.assertIn("this build has no TLS (built with WITH_TLS=OFF)", c.stderr)
            self.assertNotIn("configuration OK", c.stdout)
        self.assertFalse(self.admin.get("/devices/" + ident).json["online"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
