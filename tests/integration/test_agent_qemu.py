#!/usr/bin/env python3
"""The agent cross-built for 64-bit ARM (toolchains/aarch64-linux-gnu.cmake) and for 32-bit
ARM (toolchains/arm-linux-gnueabihf.cmake), agent only, each run under qemu-user against a
real mosquitto and the native coordinator: full signed jobs end terminated, one of them across
a reboot (its reboot command plays it). qemu-user refuses
seccomp, so that agent runs with --allow-no-seccomp; without it the agent must refuse to run
scripts unjailed (edge_error naming seccomp).

The builds go to the test's temporary directory. An architecture is skipped only when its
qemu or cross compiler is missing (tools/deps.sh test installs both, and unpacks the sysroots
the toolchain files build against and qemu-user runs the agents with).

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent_qemu.py
RCS_KEEP_TMP=1 keeps the directory (build, logs).
"""

import json
import os
import shutil
import subprocess
import time
import unittest

from rcs_fixture import StackTest, note
from rcs_harness import SOURCE_DIR, Agent, make_ec_keypair, run_logged, wait_for

# The sysroots tools/deps.sh unpacks from the targets' Debian packages
# (toolchains/cross-sysroot.cmake): qemu-user takes the loader and every library from there.
SYSROOT_DIR = os.environ.get("RCS_SYSROOT_DIR", "/opt/rcs-sysroot")
ARCHES = {
    "aarch64": ("aarch64-linux-gnu", "qemu-aarch64", "ARM aarch64"),
    "armhf": ("arm-linux-gnueabihf", "qemu-arm", "32-bit LSB"),
}
TERMINAL = ("terminated", "edge_error", "cancelled", "expired")


def missing(arch):
    triplet, qemu = ARCHES[arch][:2]
    return [t for t in (qemu, triplet + "-gcc") if shutil.which(t) is None]


class QemuAgentBase:
    """One architecture's cross build and jobs; subclasses name the architecture."""
    ARCH = None
    workdir_prefix = "rcs-qemu-"

    @classmethod
    def setUpClass(cls):
        triplet, qemu, cls.file_says = ARCHES[cls.ARCH]
        cls.emulator = [qemu, "-L", os.path.join(SYSROOT_DIR, triplet)]
        super().setUpClass()
        # the cross build: agent only, in the test's own directory
        cls.build = os.path.join(cls.workdir, "build-" + cls.ARCH)
        log = os.path.join(cls.workdir, "build.log")
        t0 = time.time()
        run_logged(["cmake", "-S", SOURCE_DIR, "-B", cls.build,
             "-DCMAKE_TOOLCHAIN_FILE=%s/toolchains/%s.cmake" % (SOURCE_DIR, triplet),
             "-DWITH_COORDINATOR=OFF", "-DWITH_TESTS=OFF"], log, 120)
        run_logged(["cmake", "--build", cls.build, "-j2"], log, 240)
        cls.build_seconds = time.time() - t0
        cls.binary = os.path.join(cls.build, "bin", "rcs-agent")
        # the native side
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.start_stack(cls.key)

    def emulated_agent(self, name, extra_args=()):
        r = self.admin.post("/devices", {"name": name, "tags": []})
        self.assertEqual(r.status, 201, r)
        files = os.path.join(self.workdir, name + "-files")
        os.makedirs(files)
        a = Agent(self.workdir, self.broker.url, self.client_root, r.json["entity_ident"],
                  trusted_keys=[self.pub], tags=[self.ARCH], file_dirs=[files],
                  extra_args=list(extra_args), binary=self.binary, emulator=self.emulator,
                  name=name)
        a.files = files
        self.agents.append(a)
        a.start(timeout=30)
        wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json["online"],
                 timeout=30, what="emulated device %s online" % name)
        return a

    def run_job(self, task, agent, variables=None, timeout=60):
        body = {"entity_ident": agent.entity_ident}
        if variables is not None:
            body["variables"] = variables
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], body)
        self.assertEqual(r.status, 201, r)
        ident = r.json["ident"]
        return wait_for(lambda: (lambda j: j if j["status"] in TERMINAL else None)(
            self.admin.get("/jobs/" + ident).json), timeout=timeout,
            what="job %s ended" % ident)

    def history(self, ident):
        r = self.admin.get("/jobs/%s/history" % ident)
        return [h["status"] for h in reversed(r.json["items"])]

    def test_binary_architecture(self):
        out = subprocess.run(["file", "-L", self.binary], capture_output=True, text=True,
                             timeout=30).stdout
        self.assertIn(self.file_says, out)
        self.assertIn("ARM", out)
        v = subprocess.run([*self.emulator, self.binary, "--version"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(v.returncode, 0, v.stderr)
        self.assertTrue(v.stdout.startswith("rcs-agent "), v.stdout)
        note("%s build took %.0f s" % (self.ARCH, self.build_seconds))

    def test_signed_job_under_qemu(self):
        a = self.emulated_agent("arm", ["--allow-no-seccomp"])
        dev = self.admin.get("/devices/" + a.entity_ident).json
        self.assertEqual(dev["reported_tags"], [self.ARCH])
        task = self.admin.post("/tasks", {
            "name": "echo", "script": "echo",
            "variables_info": {"message": {"type": "string", "optional": True}}}).json
        self.assertIsNotNone(task["signature"])
        done = self.run_job(task, a, {"message": "hello from " + self.ARCH})
        self.assertEqual((done["status"], done["response"]),
                         ("terminated", "hello from " + self.ARCH), self.history(done["ident"]))
        self.assertEqual(self.history(done["ident"]),
                         ["initial", "pending", "transmited", "edge_transmitted",
                          "edge_started", "edge_running", "terminated"])
        # host services through the emulated agent: progress, file, config, job data
        src = ('rcs.progress("on arm")\nrcs.file.write("out.txt", rcs.job.ident)\n'
               'rcs.config.set("arch", "%s")\n'
               'return {f = rcs.file.read("out.txt"), c = rcs.config.get("arch")}\n' % self.ARCH)
        r = self.admin.put("/scripts/armhost", {"source": src})
        self.assertIn(r.status, (200, 201), r)
        task = self.admin.post("/tasks", {"name": "armhost", "script": "armhost"}).json
        done = self.run_job(task, a)
        self.assertEqual(done["status"], "terminated", done)
        self.assertEqual(json.loads(done["response"]), {"f": done["ident"], "c": self.ARCH})
        self.assertIn("without its seccomp filter", a.read_log(),
                      "the agent warns that scripts run unjailed")
        # SIGTERM through qemu: clean stop, state offline
        self.assertEqual(a.stop(), 0)
        wait_for(lambda: self.admin.get("/devices/" + a.entity_ident).json["online"] is False,
                 timeout=15, what="emulated device offline")

    def test_two_phase_job_under_qemu(self):
        """A job across a reboot (docs/agent.md "Phases"): the reboot command writes a new
        boot id and stops the agent, as a reboot would; started again, the agent runs the
        job's phase "verify" with rcs.job.rebooted and rcs.state."""
        boot = os.path.join(self.workdir, "qemu-boot_id-" + self.ARCH)
        with open(boot, "w") as f:
            f.write("boot-0\n")
        reboot = os.path.join(self.workdir, "qemu-reboot-%s.sh" % self.ARCH)
        with open(reboot, "w") as f:
            f.write("#!/bin/sh\necho boot-1 > %s\nkill -TERM $PPID\n" % boot)
        os.chmod(reboot, 0o755)
        a = self.emulated_agent("arm-phases", ["--allow-no-seccomp", "--reboot-command",
                                               reboot, "--boot-id-file", boot])
        src = ('if rcs.job.phase == nil then rcs.state.set("n", 1)'
               ' rcs.reboot{resume = "verify", within = 60} end\n'
               'return {phase = rcs.job.phase, rebooted = rcs.job.rebooted,'
               ' n = rcs.state.get("n")}\n')
        r = self.admin.put("/scripts/armphases", {"source": src})
        self.assertIn(r.status, (200, 201), r)
        task = self.admin.post("/tasks", {"name": "armphases", "script": "armphases"}).json
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": a.entity_ident})
        self.assertEqual(r.status, 201, r)
        ident = r.json["ident"]
        wait_for(lambda: a.proc.poll() is not None, timeout=60,
                 what="the emulated agent stopped by its reboot command")
        self.assertEqual(a.stop(), 0)
        a.start(timeout=30)
        done = wait_for(lambda: (lambda j: j if j["status"] in TERMINAL else None)(
            self.admin.get("/jobs/" + ident).json), timeout=60, what="job %s ended" % ident)
        self.assertEqual(done["status"], "terminated", self.history(ident))
        self.assertEqual(json.loads(done["response"]),
                         {"phase": "verify", "rebooted": True, "n": 1})
        self.assertEqual(a.stop(), 0)

    def test_refuses_to_run_without_seccomp(self):
        a = self.emulated_agent("arm-strict")
        task = self.admin.post("/tasks", {"name": "echo", "script": "echo"}).json
        done = self.run_job(task, a)
        self.assertEqual(done["status"], "edge_error", done)
        self.assertIn("seccomp", done["response"])
        # the text docs/lua-api.md lists for it
        self.assertEqual(done["response"], "sandbox unavailable: seccomp refused")
        self.assertNotIn("terminated", self.history(done["ident"]))
        self.assertTrue(a.alive(), a.read_log())


@unittest.skipIf(missing("aarch64"), "needs %s (tools/deps.sh test installs them)"
                 % " and ".join(missing("aarch64")))
class Aarch64AgentTest(QemuAgentBase, StackTest):
    ARCH = "aarch64"


@unittest.skipIf(missing("armhf"), "needs %s (tools/deps.sh test installs them)"
                 % " and ".join(missing("armhf")))
class ArmhfAgentTest(QemuAgentBase, StackTest):
    ARCH = "armhf"


if __name__ == "__main__":
    unittest.main(verbosity=2)
