#!/usr/bin/env python3
"""Integration tests of the real device daemon, rcs-agent, end to end (docs/architecture.md,
docs/mqtt.md, docs/lua-api.md, docs/signing.md, docs/agent.md): a real mosquitto
on a free loopback port, the real rcs-coordinator (serve --mqtt --signing-key), and real
agents trusting the signing key's public half, one per inventory device (POST /devices).

Checked: a full job, every host API function (rcs.variables/constants/job, progress, log,
config.get/set across a restart, exec, reboot, sleep, file.read/write), the stock scripts
(echo, sysinfo, get_config, set_config, exec, reboot, update), cancel before and during a
run, timeout, kill -9 mid-script then restart, repeat delivery, one job at a time in order,
the queue bound, forged/unsigned/tampered/foreign/expired/rolled-back envelopes published
with mosquitto_pub, a battery of jail escapes (each must end edge_error with the agent
alive), unsigned tasks from a coordinator without a signing key, SIGTERM (online false),
SIGHUP (tags reloaded), the sandbox launcher (no secret in it, it and the jail child die with
the agent; killing it ends the running job edge_error, the agent restarts itself and runs the
jobs that waited).

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent.py
RCS_KEEP_TMP=1 keeps each class's directory (broker, coordinator and agent logs).
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import uuid

from rcs_harness import (AGENT, Agent, Watcher, make_ec_keypair, sign_es256,
                         task_manifest, tcp_nodelay, wait_for)
from rcs_fixture import StackTest

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
FULL_RUN = ["initial", "pending", "transmited", "edge_transmitted", "edge_started",
            "edge_running", "terminated"]


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


class Recorder(Watcher):
    """Records every message on a topic filter with its arrival time:
    messages holds (time, topic, payload bytes)."""

    def __init__(self, broker, topic_filter):
        super().__init__(broker, topic_filter, prefix="rec-")

    def record(self, msg):
        return (time.time(), msg.topic, msg.payload)

    def for_job(self, job):
        """(time, decoded payload) of the messages whose topic names job."""
        out = []
        with self.lock:
            msgs = list(self.messages)
        for t, topic, payload in msgs:
            parts = topic.split("/")
            if len(parts) >= 6 and parts[5] == job and parts[3] != "events":
                try:
                    out.append((t, json.loads(payload)))
                except ValueError:
                    out.append((t, payload))
        return out


class AgentTest(StackTest):
    """One mosquitto, one coordinator (serve --mqtt --signing-key) per class, a tenant
    with an admin key, recorders of every envelope and status report, and helpers to
    start real agents for new inventory devices."""

    workdir_prefix = "rcs-agent-"
    signing = True        # coordinator started with --signing-key
    coord_args = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.start_stack(cls.key if cls.signing else None, cls.coord_args)
        cls.envelopes = cls.recorder("rcs/v1/%s/+/jobs/+" % cls.client_root)
        cls.reports = cls.recorder("rcs/v1/%s/+/jobs/+/status" % cls.client_root)
        cls.script_seq = 0

    @classmethod
    def recorder(cls, topic_filter):
        r = Recorder(cls.broker, topic_filter).start()
        cls.clients.append(r)
        return r

    @classmethod
    def tearDownClass(cls):
        dead = [a.name for a in cls.agents if a.proc is not None and not a.alive()]
        super().tearDownClass()
        if dead:
            raise AssertionError("agents died during the tests: %s" % dead)

    # -- devices and agents --------------------------------------------------------------

    @classmethod
    def new_agent(cls, name, start=True, files=True, **kw):
        """A new inventory device and a real agent for it (trusting k's public half unless
        trusted_keys is given), with a files directory <workdir>/<name>-files."""
        rec = cls.class_device(name)
        kw.setdefault("trusted_keys", [cls.pub])
        if files:
            fdir = os.path.join(cls.workdir, name + "-files")
            os.makedirs(fdir, exist_ok=True)
            kw.setdefault("file_dirs", [fdir])
        a = Agent(cls.workdir, cls.broker.url, cls.client_root, rec["entity_ident"],
                  name=name, **kw)
        a.device = rec
        a.files = kw.get("file_dirs", [None])[0] if kw.get("file_dirs") else None
        cls.agents.append(a)
        if start:
            a.start()
            cls.wait_online(a, True)
        return a

    @classmethod
    def wait_online(cls, agent, online=True, timeout=15):
        ident = agent.entity_ident if isinstance(agent, Agent) else agent
        return wait_for(lambda: cls.admin.get("/devices/" + ident).json.get("online") is online,
                        timeout=timeout, what="device %s online=%s" % (ident, online))

    # -- scripts, tasks, jobs ------------------------------------------------------------

    @classmethod
    def script_task(cls, source, timeout=30, name=None, **fields):
        """Uploads source as a new script and creates a task for it."""
        cls.script_seq += 1
        sname = name or "t%d-%s" % (cls.script_seq, uuid.uuid4().hex[:8])
        r = cls.admin.put("/scripts/" + sname, {"source": source})
        assert r.status in (200, 201), r
        body = {"name": sname, "script": sname, "timeout": timeout}
        body.update(fields)
        r = cls.admin.post("/tasks", body)
        assert r.status == 201, r
        return r.json

    @classmethod
    def stock_task(cls, script, **fields):
        body = {"name": script, "script": script}
        body.update(fields)
        r = cls.admin.post("/tasks", body)
        assert r.status == 201, r
        return r.json

    def post_job(self, task, agent, variables=None, status=201, **fields):
        body = {"entity_ident": agent.entity_ident if isinstance(agent, Agent) else agent}
        if variables is not None:
            body["variables"] = variables
        body.update(fields)
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], body)
        self.assertEqual(r.status, status, r)
        return r.json

    def wait_job(self, ident, statuses=TERMINAL, timeout=20):
        if isinstance(statuses, str):
            statuses = (statuses,)
        last = {}

        def check():
            last["job"] = self.job(ident)
            return last["job"] if last["job"]["status"] in statuses else None
        try:
            return wait_for(check, timeout=timeout, what="job %s in %s" % (ident, statuses))
        except AssertionError:
            raise AssertionError("job %s: expected %s, still %r after %ss; history %r" % (
                ident, statuses, last.get("job", {}).get("status"), timeout,
                self.history(ident, responses=True)))

    def run_job(self, task, agent, variables=None, timeout=20, **fields):
        """Creates a job and waits until it ended; returns the job record."""
        j = self.post_job(task, agent, variables, **fields)
        return self.wait_job(j["ident"], timeout=timeout)

    def history_items(self, ident):
        """History snapshots, oldest first."""
        r = self.admin.get("/jobs/%s/history" % ident)
        self.assertEqual(r.status, 200, r)
        return list(reversed(r.json["items"]))

    def history(self, ident, responses=False):
        if responses:
            return [(h["status"], h["response"]) for h in self.history_items(ident)]
        return [h["status"] for h in self.history_items(ident)]

    def device_reports(self, job):
        """The status reports the agent published for job: [(time, report)]."""
        return [(t, p) for t, p in self.reports.for_job(job) if isinstance(p, dict)]

    def assertTerminated(self, job, response=None):
        self.assertEqual(job["status"], "terminated", "job %s: %r" % (
            job["ident"], self.history(job["ident"], responses=True)))
        if response is not None:
            self.assertEqual(job["response"], response)
        return job

    def assertEdgeError(self, job, *reasons):
        """The job ended edge_error and its response contains every reason."""
        self.assertEqual(job["status"], "edge_error", "job %s: %r" % (
            job["ident"], self.history(job["ident"], responses=True)))
        for r in reasons:
            self.assertIn(r, job["response"] or "", "job %s" % job["ident"])
        return job

    def assertAgentAlive(self, agent):
        self.assertTrue(agent.alive(), "agent %s died:\n%s" % (agent.name, agent.read_log()[-3000:]))


# =========================================================================================


class EndToEndTest(AgentTest):
    """One agent ("main") with an allowlist, a files directory and a reboot command;
    every host API function, the stock scripts, cancel, timeout, queueing, repeat
    delivery, forged envelopes and the jail escape battery. The coordinator signs tasks
    with artifacts too (the stock update), which the agent downloads from its listener."""

    coord_args = ("--sign-artifacts",)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        w = cls.workdir
        cls.reboot_marker = os.path.join(w, "rebooted")
        reboot = write_exe(os.path.join(w, "reboot.sh"),
                           "#!/bin/sh\necho \"$(date +%%s.%%N)\" >> %s\n" % cls.reboot_marker)
        fetch = write_exe(os.path.join(w, "fetch.sh"), "#!/bin/sh\nexec cp \"$1\" \"$2\"\n")
        cls.install_log = os.path.join(w, "installed")
        install = write_exe(os.path.join(w, "install.sh"),
                            "#!/bin/sh\necho \"$1\" >> %s\n" % cls.install_log)
        cls.outside = os.path.join(w, "outside")
        os.makedirs(cls.outside)
        with open(os.path.join(cls.outside, "secret.txt"), "w") as f:
            f.write("outside secret\n")
        cls.main = cls.new_agent(
            "main", tags=["lab"],
            allow_commands={"echo": "/bin/echo", "uname": "/bin/uname",
                            "uptime": "/usr/bin/uptime", "fetch": fetch, "install": install,
                            "sha256sum": "/usr/bin/sha256sum"},
            extra_args=["--reboot-command", reboot,
                        "--artifact-url", "http://127.0.0.1:%d" % cls.coord.port])
        cls.files = cls.main.files
        os.makedirs(os.path.join(cls.files, "sub"))
        # symbolic links inside the files directory that lead out of it
        os.symlink(os.path.join(cls.outside, "secret.txt"), os.path.join(cls.files, "link"))
        os.symlink(cls.outside, os.path.join(cls.files, "dirlink"))
        os.symlink("/etc/passwd", os.path.join(cls.files, "passwd"))
        cls.marker_task = cls.script_task(
            'rcs.file.write(rcs.variables.marker, "ran") return "wrote " .. rcs.variables.marker',
            variables_info={"marker": {"type": "string"}})

    def setUp(self):
        self.assertAgentAlive(self.main)

    def reboots(self):
        try:
            with open(self.reboot_marker) as f:
                return len(f.read().splitlines())
        except OSError:
            return 0

    def test_broker_connection_nodelay(self):
        # a report goes out at once, not after the broker's delayed ACK: the agent's
        # connection has TCP_NODELAY; the coordinator's keep Nagle's algorithm, which merges
        # the bridge's many small publishes (BENCHMARKS.md, parts 1 and 4): its connection
        # for artifact chunks (docs/mqtt.md) too, since the option holds per process and port
        agent = tcp_nodelay(self.main.proc.pid, self.broker.port)
        if agent is None:
            self.skipTest("this kernel doesn't let the test copy the agent's socket")
        self.assertEqual(agent, [True])
        coord = wait_for(lambda: (lambda v: v if v and len(v) == 2 else None)(
            tcp_nodelay(self.coord.proc.pid, self.broker.port)), timeout=10,
            what="the coordinator's two connections to the broker")
        self.assertEqual(coord, [False, False])

    # -- a full job ----------------------------------------------------------------------

    def test_full_job_end_to_end(self):
        task = self.stock_task("echo", variables_info={"message": {"type": "string",
                                                                   "optional": True}})
        self.assertIsNotNone(task["signature"], "the coordinator signs with --signing-key")
        j = self.post_job(task, self.main, {"message": "hello device"})
        t0 = time.time()
        done = self.wait_job(j["ident"])
        self.assertTerminated(done, "hello device")
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(self.history(j["ident"]), FULL_RUN)
        # what the agent published: increasing seq, statuses in order
        reps = [p for _, p in self.device_reports(j["ident"])]
        self.assertEqual([p["status"] for p in reps],
                         ["edge_transmitted", "edge_started", "edge_running", "terminated"])
        self.assertEqual([p["seq"] for p in reps], [1, 2, 3, 4])
        for p in reps:
            self.assertEqual(p["v"], 1)
        # the envelope the coordinator sent carried the signature
        envs = [p for _, p in self.envelopes.for_job(j["ident"])]
        self.assertEqual(len(envs), 1)
        self.assertEqual(envs[0]["signature"], task["signature"])
        self.assertIn("job %s: terminated: hello device" % j["ident"], self.main.read_log())
        # without the optional variable
        self.assertTerminated(self.run_job(task, self.main, {}), "pong")

    # -- host API ------------------------------------------------------------------------

    def test_host_variables_constants_job(self):
        src = ("local ro = not pcall(function() rcs.job.ident = 'x' end)\n"
               "return {v = rcs.variables, c = rcs.constants, j = rcs.job, ro = ro,\n"
               "        n = #rcs.variables.name}\n")
        task = self.script_task(
            src, constants={"mode": "fast", "depth": 3, "nested": {"k": "v"}},
            variables_info={"name": {"type": "string"}, "count": {"type": "integer"},
                            "ratio": {"type": "number"}, "flag": {"type": "boolean"},
                            "when": {"type": "timestamp"},
                            "opt": {"type": "string", "optional": True}})
        variables = {"name": "pump", "count": 7, "ratio": 1.5, "flag": True,
                     "when": 1700000000}
        done = self.assertTerminated(self.run_job(task, self.main, variables))
        r = json.loads(done["response"])
        self.assertEqual(r["v"], variables)
        self.assertEqual(r["c"], {"mode": "fast", "depth": 3, "nested": {"k": "v"}})
        self.assertEqual(r["j"]["ident"], done["ident"])
        self.assertEqual(r["j"]["client_root"], self.client_root)
        self.assertEqual(r["j"]["entity_ident"], self.main.entity_ident)
        self.assertEqual(r["j"]["task"], {"ident": task["ident"], "version": task["version"],
                                          "name": task["name"]})
        self.assertIsInstance(r["j"]["issued_at"], int)
        self.assertLessEqual(abs(r["j"]["issued_at"] - done["created_at"]), 2)
        self.assertTrue(r["ro"], "rcs.job must be read-only")
        self.assertEqual(r["n"], 4)
        # canonical JSON (RFC 8785): sorted members, no whitespace
        self.assertEqual(done["response"], json.dumps(r, sort_keys=True, separators=(",", ":")))

    def test_host_progress(self):
        src = ('rcs.progress("step one")\nrcs.sleep(1.2)\nrcs.progress("step two")\n'
               'rcs.sleep(1.2)\nreturn "done"\n')
        task = self.script_task(src)
        j = self.post_job(task, self.main)
        seen = wait_for(lambda: ("edge_running", "step one") in self.history(
            j["ident"], responses=True), timeout=5, what="progress 'step one' in the history")
        self.assertTrue(seen)
        done = self.assertTerminated(self.wait_job(j["ident"]), "done")
        h = self.history(done["ident"], responses=True)
        running = [r for s, r in h if s == "edge_running"]
        self.assertIn("step one", running)
        self.assertIn("step two", running)
        self.assertLess(running.index("step one"), running.index("step two"))
        self.assertEqual(h[-1], ("terminated", "done"))
        # fast progress is rate limited: at most one report a second, the last text wins
        src = ('for i = 1, 200 do rcs.progress("p" .. i) end\nrcs.sleep(1.5)\n'
               'return "fast"\n')
        done = self.assertTerminated(self.run_job(self.script_task(src), self.main), "fast")
        running = [r for s, r in self.history(done["ident"], responses=True)
                   if s == "edge_running"]
        self.assertLessEqual(len(running), 4, running)
        self.assertIn("p200", running)

    def test_host_log(self):
        mark = "log-marker-" + uuid.uuid4().hex
        src = ('rcs.log("info", "%s info")\nrcs.log("warn", "%s warn")\n'
               'rcs.log("error", "%s error")\nreturn "logged"\n') % (mark, mark, mark)
        done = self.assertTerminated(self.run_job(self.script_task(src), self.main), "logged")
        log = self.main.read_log(tail=None)
        for level in ("info", "warn", "error"):
            self.assertIn("job %s: script: %s %s" % (done["ident"], mark, level), log)
        # a bad level is a script error
        done = self.run_job(self.script_task('rcs.log("loud", "x")'), self.main)
        self.assertEdgeError(done, "script error")

    def test_host_exec(self):
        src = ('local r = rcs.exec("echo", "hello", "a b", "$(id)", "; touch x")\n'
               'return {code = r.code, output = r.output, sig = r.signal,'
               ' to = r.timed_out, tr = r.truncated}\n')
        done = self.assertTerminated(self.run_job(self.script_task(src), self.main))
        r = json.loads(done["response"])
        self.assertEqual(r["code"], 0)
        self.assertEqual(r["output"], "hello a b $(id) ; touch x\n")
        self.assertNotIn("sig", r)
        self.assertFalse(r.get("to"))
        self.assertFalse(r.get("tr"))
        self.assertFalse(os.path.exists(os.path.join(self.files, "x")))

    def test_host_file_read_write(self):
        with open(os.path.join(self.files, "given.txt"), "w") as f:
            f.write("from the test\n")
        src = ('rcs.file.write("sub/a.txt", "written by " .. rcs.job.ident)\n'
               'return rcs.file.read("sub/a.txt") .. "|" .. rcs.file.read("given.txt")\n')
        done = self.assertTerminated(self.run_job(self.script_task(src), self.main))
        self.assertEqual(done["response"], "written by %s|from the test\n" % done["ident"])
        with open(os.path.join(self.files, "sub", "a.txt")) as f:
            self.assertEqual(f.read(), "written by " + done["ident"])
        # a missing file is a Lua error naming the path
        done = self.run_job(self.script_task('return rcs.file.read("nope.txt")'), self.main)
        self.assertEdgeError(done, "nope.txt")

    def test_host_sleep_and_cancel_during_sleep(self):
        t0 = time.time()
        done = self.run_job(self.script_task('rcs.sleep(1.5) return "slept"'), self.main)
        self.assertTerminated(done, "slept")
        self.assertGreaterEqual(time.time() - t0, 1.4)
        # cancel during a long sleep ends the job at once
        j = self.post_job(self.script_task('rcs.progress("sleeping") rcs.sleep(60)'
                                           ' return "woke"'), self.main)
        wait_for(lambda: ("edge_running", "sleeping") in self.history(j["ident"], True),
                 timeout=5, what="the job sleeping")
        t0 = time.time()
        r = self.admin.patch("/jobs/%s/cancel" % j["ident"])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["status"], "cancelled")
        # the agent stops the script and reports edge_error, kept in the history
        wait_for(lambda: "edge_error" in self.history(j["ident"]), timeout=5,
                 what="the agent's edge_error after the cancel")
        self.assertLess(time.time() - t0, 3)
        self.assertEqual(self.job(j["ident"])["status"], "cancelled")
        h = self.history(j["ident"], responses=True)
        self.assertEqual(h[-1][0], "edge_error")
        self.assertIn("cancel", h[-1][1])
        self.assertNotIn("terminated", self.history(j["ident"]))
        # and the agent goes on with the next job
        self.assertTerminated(self.run_job(self.script_task("return 1"), self.main), "1")

    def test_fail_and_rollback(self):
        # rcs.fail and rcs.rollback (docs/lua-api.md): the job ends edge_error with the code
        # as its error_code; rcs.rollback runs the agent's rollback_command, and with
        # {reboot = true} the device reboots after the final report
        marker = os.path.join(self.workdir, "rolled-back")
        rb = write_exe(os.path.join(self.workdir, "rollback.sh"),
                       "#!/bin/sh\necho ran >> %s\n" % marker)
        a = self.new_agent("rb", extra_args=["--rollback-command", rb,
                                             "--reboot-command", os.path.join(
                                                 self.workdir, "reboot.sh")])
        done = self.assertEdgeError(self.run_job(self.script_task(
            'pcall(rcs.fail, "health_check_failed", "service x did not start")\n'
            'return "not here"'), a))
        self.assertEqual(done["response"], "service x did not start")
        self.assertEqual(done["error_code"], "health_check_failed")
        before = self.reboots()
        done = self.assertEdgeError(self.run_job(self.script_task(
            'rcs.rollback("health check failed: rolled back", {reboot = true})'), a))
        self.assertEqual(done["response"], "health check failed: rolled back")
        self.assertEqual(done["error_code"], "rolled_back")
        with open(marker) as f:
            self.assertEqual(f.read(), "ran\n")
        wait_for(lambda: self.reboots() == before + 1, timeout=5, what="the reboot command")
        self.assertIn("job %s: rolling back: %s" % (done["ident"], rb), a.read_log())
        # without a rollback_command, or with an unknown code: a script error
        done = self.assertEdgeError(self.run_job(self.script_task('rcs.rollback("x")'),
                                                 self.main), "no rollback_command")
        self.assertEqual(done["error_code"], "script_error")
        done = self.assertEdgeError(self.run_job(self.script_task('rcs.fail("oops", "x")'),
                                                 self.main), "unknown code 'oops'")
        self.assertEqual(done["error_code"], "script_error")
        self.assertEqual(self.reboots(), before + 1)

    def test_host_reboot(self):
        before = self.reboots()
        src = ('rcs.reboot()\nrcs.progress("asked")\nrcs.sleep(1.5)\nreturn "bye"\n')
        j = self.post_job(self.script_task(src), self.main)
        wait_for(lambda: ("edge_running", "asked") in self.history(j["ident"], True),
                 timeout=5, what="the script past rcs.reboot()")
        self.assertEqual(self.reboots(), before, "reboot before the job ended")
        done = self.assertTerminated(self.wait_job(j["ident"]), "bye")
        wait_for(lambda: self.reboots() == before + 1, timeout=5, what="the reboot command")
        log = self.main.read_log(tail=None)
        i_final = log.find("job %s: terminated" % done["ident"])
        i_reboot = log.find("rebooting as job %s asked" % done["ident"])
        self.assertGreaterEqual(i_final, 0)
        self.assertGreater(i_reboot, i_final, "reboot logged before the final report")
        # a script that fails after rcs.reboot() does not reboot
        done = self.run_job(self.script_task('rcs.reboot() error("changed my mind")'),
                            self.main)
        self.assertEdgeError(done, "changed my mind")
        time.sleep(1)
        self.assertEqual(self.reboots(), before + 1)

    # -- stock scripts -------------------------------------------------------------------

    def test_stock_sysinfo(self):
        done = self.assertTerminated(self.run_job(self.stock_task("sysinfo"), self.main))
        r = json.loads(done["response"])
        self.assertEqual(r["job"], done["ident"])
        self.assertLessEqual(abs(r["time"] - time.time()), 5)
        self.assertIn("Linux", r["uname"])
        if os.path.exists("/usr/bin/uptime"):
            self.assertIn("load average", r["uptime"])

    def test_stock_exec(self):
        task = self.stock_task("exec", variables_info={
            "command": {"type": "string"}, "args": {"type": "string", "optional": True}})
        done = self.assertTerminated(self.run_job(task, self.main, {"command": "echo",
                                                                    "args": "hello  world"}))
        self.assertEqual(json.loads(done["response"]), {"code": 0, "output": "hello world\n"})
        done = self.run_job(task, self.main, {"command": "rm", "args": "-rf /"})
        self.assertEdgeError(done, "command 'rm' is not allowed on this device")

    def test_stock_reboot(self):
        before = self.reboots()
        task = self.stock_task("reboot", variables_info={"delay": {"type": "integer",
                                                                   "optional": True}})
        self.assertTerminated(self.run_job(task, self.main, {"delay": 0}), "reboot scheduled")
        wait_for(lambda: self.reboots() == before + 1, timeout=5, what="the reboot command")

    def test_stock_update(self):
        """update installs the task's artifact "firmware" (downloaded by the agent from the
        coordinator and verified against the task's signature): nothing from variables."""
        data = os.urandom(300000)
        digest = hashlib.sha256(data).hexdigest()
        r = self.admin.post("/artifacts?name=firmware-%s.bin" % uuid.uuid4().hex[:6], raw=data,
                            headers={"Content-Type": "application/octet-stream"})
        self.assertIn(r.status, (200, 201), r)
        task = self.stock_task("update", artifacts={"firmware": r.json["ident"]},
                               variables_info={"reboot": {"type": "boolean",
                                                          "optional": True}})
        with open(self.install_log, "a"):
            pass
        with open(self.install_log) as f:
            installed = f.read().splitlines()
        done = self.assertTerminated(self.run_job(task, self.main))
        self.assertEqual(json.loads(done["response"]),
                         {"installed": digest, "size": len(data), "reboot": False})
        with open(self.install_log) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), len(installed) + 1, lines)
        path = lines[-1]
        self.assertFalse(path.startswith(self.files), path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)
        progress = [r for s, r in self.history(done["ident"], True) if s == "edge_running"]
        self.assertIn("installing " + digest[:12], progress)
        # a task of update without the artifact installs nothing, whatever its variables say
        bare = self.stock_task("update", variables_info={"url": {"type": "string"}})
        done = self.run_job(bare, self.main, {"url": "http://127.0.0.1:9/fw.bin"})
        self.assertEdgeError(done, "the task pins no artifact named firmware")
        with open(self.install_log) as f:
            self.assertEqual(f.read().splitlines(), lines)

    # -- cancel, timeout, queueing -------------------------------------------------------

    def test_cancel_before_and_during_run(self):
        busy = self.post_job(self.script_task('rcs.progress("busy") local x = 0'
                                              ' while true do x = x + 1 end'), self.main)
        wait_for(lambda: ("edge_running", "busy") in self.history(busy["ident"], True),
                 timeout=5, what="the first job running")
        queued = self.post_job(self.marker_task, self.main, {"marker": "cancelled-marker"})
        wait_for(lambda: "edge_transmitted" in self.history(queued["ident"]), timeout=5,
                 what="the second job waiting on the device")
        # cancel before it runs: the device drops it
        r = self.admin.patch("/jobs/%s/cancel" % queued["ident"])
        self.assertEqual(r.status, 200, r)
        wait_for(lambda: "edge_error" in self.history(queued["ident"]), timeout=5,
                 what="the device dropping the queued job")
        # cancel during the run: the device kills the busy loop
        t0 = time.time()
        r = self.admin.patch("/jobs/%s/cancel" % busy["ident"])
        self.assertEqual(r.status, 200, r)
        wait_for(lambda: "edge_error" in self.history(busy["ident"]), timeout=5,
                 what="the device stopping the running job")
        self.assertLess(time.time() - t0, 3)
        self.assertEqual(self.job(busy["ident"])["status"], "cancelled")
        self.assertEqual(self.job(queued["ident"])["status"], "cancelled")
        hq = self.history(queued["ident"], True)
        self.assertNotIn("edge_started", [s for s, _ in hq])
        self.assertIn("cancelled before it started", hq[-1][1])
        hb = self.history(busy["ident"], True)
        self.assertIn("cancel", hb[-1][1])
        # the cancelled job never ran, and it does not run later
        self.assertTerminated(self.run_job(self.script_task("return 2"), self.main), "2")
        self.assertFalse(os.path.exists(os.path.join(self.files, "cancelled-marker")))
        statuses = [p["status"] for _, p in self.device_reports(queued["ident"])]
        self.assertEqual(statuses, ["edge_transmitted", "edge_error"])

    def test_timeout(self):
        t0 = time.time()
        done = self.run_job(self.script_task("while true do end", timeout=2), self.main)
        self.assertEdgeError(done, "timeout after 2 s")
        self.assertLess(time.time() - t0, 6)

    def test_one_job_at_a_time_in_order(self):
        task = self.script_task('rcs.sleep(0.6) return rcs.job.ident')
        jobs = [self.post_job(task, self.main)["ident"] for _ in range(3)]
        for j in jobs:
            self.assertTerminated(self.wait_job(j), j)
        spans = []
        for j in jobs:
            reps = {p["status"]: t for t, p in self.device_reports(j)}
            spans.append((reps["edge_started"], reps["terminated"]))
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            self.assertLess(s1, s2, "jobs started out of order: %r" % spans)
            self.assertGreaterEqual(s2, e1, "jobs overlapped: %r" % spans)
        # the coordinator's view says the same (whole seconds)
        starts = []
        for j in jobs:
            h = {x["status"]: x["update_at"] for x in self.history_items(j)}
            starts.append((h["edge_started"], h["terminated"]))
        for (s1, e1), (s2, e2) in zip(starts, starts[1:]):
            self.assertGreaterEqual(s2, e1, starts)

    def test_repeat_delivery_runs_once(self):
        counter = "count-%s" % uuid.uuid4().hex[:8]
        src = ('local ok, old = pcall(rcs.file.read, rcs.variables.counter)\n'
               'local n = (ok and tonumber(old) or 0) + 1\n'
               'rcs.file.write(rcs.variables.counter, tostring(n))\nreturn n\n')
        task = self.script_task(src, variables_info={"counter": {"type": "string"}})
        done = self.assertTerminated(self.run_job(task, self.main, {"counter": counter}), "1")
        job = done["ident"]
        envs = self.envelopes.for_job(job)
        self.assertEqual(len(envs), 1)
        env = envs[0][1]
        # the coordinator has the report; the test's own subscriber may get it a moment later
        final = wait_for(lambda: [p for _, p in self.device_reports(job)
                                  if p["status"] == "terminated"], timeout=5,
                         what="the recorder got the final report")
        self.assertEqual(len(final), 1)
        history = self.history_items(job)
        topic = "rcs/v1/%s/%s/jobs/%s" % (self.client_root, self.main.entity_ident, job)
        for _ in range(2):
            self.broker.pub(topic, json.dumps(env))
        wait_for(lambda: len([p for _, p in self.device_reports(job)
                              if p["status"] == "terminated"]) >= 3, timeout=5,
                 what="the final report sent again for each repeat")
        again = [p for _, p in self.device_reports(job) if p["status"] == "terminated"]
        for p in again:
            self.assertEqual((p["seq"], p["response"]), (final[0]["seq"], "1"))
        self.assertIn("job %s: received again, report sent again" % job, self.main.read_log())
        with open(os.path.join(self.files, counter)) as f:
            self.assertEqual(f.read(), "1", "the repeated job ran again")
        time.sleep(0.5)
        self.assertEqual(len(self.history_items(job)), len(history))
        # a new job of the same task runs (and counts) normally
        self.assertTerminated(self.run_job(task, self.main, {"counter": counter}), "2")

    # -- forged envelopes (published with mosquitto_pub) --------------------------------

    def genuine_envelope(self, marker):
        """Runs a real job of marker_task (it writes the file `marker`) and returns its
        envelope as the coordinator sent it."""
        done = self.assertTerminated(self.run_job(self.marker_task, self.main,
                                                  {"marker": marker}))
        self.assertTrue(os.path.exists(os.path.join(self.files, marker)))
        return self.envelopes.for_job(done["ident"])[0][1]

    def publish_forged(self, env, topic_device=None, raw=None):
        """Publishes env under a new job ident on the main device's job topic; returns
        the job ident."""
        job = str(uuid.uuid4())
        env = dict(env, job=job)
        topic = "rcs/v1/%s/%s/jobs/%s" % (self.client_root,
                                          topic_device or self.main.entity_ident, job)
        self.broker.pub(topic, raw if raw is not None else json.dumps(env))
        return job

    def assertRefused(self, job, reason, marker=None):
        """The agent answered job with edge_error only (reason in it), never started it."""
        wait_for(lambda: self.device_reports(job), timeout=5,
                 what="the agent's answer to forged job %s" % job)
        time.sleep(0.2)
        reps = [p for _, p in self.device_reports(job)]
        self.assertEqual([p["status"] for p in reps], ["edge_error"], reps)
        self.assertIn(reason, reps[0]["response"])
        self.assertIn("job %s refused: " % job, self.main.read_log(tail=None))
        if marker:
            self.assertFalse(os.path.exists(os.path.join(self.files, marker)),
                             "the forged script ran")

    def test_cancel_overtaking_its_envelope(self):
        """A cancel that arrives before its envelope (the coordinator cancelled while it was
        publishing) makes the envelope a repeat: the script never runs."""
        env = self.genuine_envelope("genuine-" + uuid.uuid4().hex[:6])
        marker = "overtaken-" + uuid.uuid4().hex[:6]
        job = str(uuid.uuid4())
        base = "rcs/v1/%s/%s/jobs/%s" % (self.client_root, self.main.entity_ident, job)
        self.broker.pub(base + "/cancel", json.dumps({"v": 1, "job": job, "reason": "test"}))
        wait_for(lambda: self.device_reports(job), timeout=5, what="the cancel's answer")
        self.broker.pub(base, json.dumps(dict(env, job=job, variables={"marker": marker})))
        time.sleep(1.0)
        reps = [p for _, p in self.device_reports(job)]
        self.assertTrue(reps, "no report for the cancelled job")
        self.assertEqual({p["status"] for p in reps}, {"edge_error"}, reps)
        self.assertIn("cancelled before it arrived", reps[0]["response"])
        self.assertFalse(os.path.exists(os.path.join(self.files, marker)),
                         "the cancelled job ran")

    def test_forged_envelopes_refused(self):
        env = self.genuine_envelope("genuine-" + uuid.uuid4().hex[:6])
        self.assertIsNotNone(env["signature"])
        other_key, other_pub = make_ec_keypair(self.workdir, "other")
        manifest = task_manifest(self.client_root, env["task"]["ident"],
                                 env["task"]["version"], env["script"]["name"],
                                 env["script"]["source"], env["constants"],
                                 env["variables_info"])
        bad_source = env["script"]["source"].replace('"ran"', '"RAN"')
        self.assertNotEqual(bad_source, env["script"]["source"])
        bad_sha = hashlib.sha256(bad_source.encode()).hexdigest()
        other_dev = self.class_device("other")
        cases = [
            ("unsigned", dict(env, signature=None), "signature required"),
            ("other key", dict(env, signature=sign_es256(other_key, manifest, other_pub)),
             "unknown signing key"),
            ("other key, trusted key_id",
             dict(env, signature=dict(sign_es256(other_key, manifest, other_pub),
                                      key_id=env["signature"]["key_id"])),
             "signature does not verify"),
            ("garbage signature value",
             dict(env, signature=dict(env["signature"], value="AAAA" + env["signature"]
                                      ["value"][4:])), ""),
            ("alg none", dict(env, signature=dict(env["signature"], alg="none")),
             "not accepted"),
            ("tampered script byte, sha256 updated",
             dict(env, script=dict(env["script"], source=bad_source, sha256=bad_sha)),
             "signature does not verify"),
            ("tampered script byte, sha256 kept",
             dict(env, script=dict(env["script"], source=bad_source)), ""),
            ("tampered constants", dict(env, constants={"x": 1}), "signature does not verify"),
            ("tampered version", dict(env, task=dict(env["task"], version=env["task"]
                                                     ["version"] + 5)),
             "signature does not verify"),
            ("another device's envelope", dict(env, entity_ident=other_dev["entity_ident"]),
             "envelope for another device"),
            ("another tenant's envelope", dict(env, client_root=str(uuid.uuid4())),
             "envelope for another tenant"),
            ("expired", dict(env, expires_at=int(time.time()) - 10), "expired at"),
        ]
        for name, forged, reason in cases:
            with self.subTest(name):
                marker = "forged-" + uuid.uuid4().hex[:8]
                forged = dict(forged, variables={"marker": marker})
                job = self.publish_forged(forged)
                self.assertRefused(job, reason, marker)
        with self.subTest("malformed"):
            job = self.publish_forged(env, raw=b'{"v": 1, "job": "x"')
            self.assertRefused(job, "malformed envelope")
        # the genuine envelope still works under a new ident: the checks are not flaky
        marker = "regenuine-" + uuid.uuid4().hex[:6]
        job = self.publish_forged(dict(env, variables={"marker": marker}))
        wait_for(lambda: any(p["status"] == "terminated" for _, p in self.device_reports(job)),
                 timeout=5, what="the genuine envelope re-published under a new ident")
        self.assertTrue(os.path.exists(os.path.join(self.files, marker)))
        self.assertAgentAlive(self.main)

    def test_version_rollback_refused(self):
        src = 'rcs.file.write(rcs.variables.marker, "ran") return "v" .. rcs.job.task.version'
        task = self.script_task(src, variables_info={"marker": {"type": "string"}})
        m1 = "v1-" + uuid.uuid4().hex[:6]
        done = self.assertTerminated(self.run_job(task, self.main, {"marker": m1}), "v1")
        env1 = self.envelopes.for_job(done["ident"])[0][1]
        r = self.admin.patch("/tasks/" + task["ident"], {"comment": "v2"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["version"], 2)
        self.assertTerminated(self.run_job(task, self.main, {"marker": "v2-" + m1}), "v2")
        # a v1 envelope arriving now: genuinely signed by the coordinator...
        marker = "rollback-" + uuid.uuid4().hex[:6]
        job = self.publish_forged(dict(env1, variables={"marker": marker}))
        self.assertRefused(job, "task version 1 is older than version 2 already run", marker)
        # ... and one signed here with openssl over the v1 manifest (docs/signing.md)
        manifest = task_manifest(self.client_root, task["ident"], 1, task["script"],
                                 env1["script"]["source"], {}, task["variables_info"])
        sig = sign_es256(self.key, manifest, self.pub)
        marker = "rollback2-" + uuid.uuid4().hex[:6]
        job = self.publish_forged(dict(env1, signature=sig, variables={"marker": marker}))
        self.assertRefused(job, "older than version 2", marker)

    def test_version_rollback_job_created_earlier_delivered_later(self):
        """A job of v1 scheduled to go out later, after a job of v2 ran."""
        src = 'rcs.file.write(rcs.variables.marker, "ran") return "v" .. rcs.job.task.version'
        task = self.script_task(src, variables_info={"marker": {"type": "string"}})
        m1 = "late-v1-" + uuid.uuid4().hex[:6]
        late = self.post_job(task, self.main, {"marker": m1},
                             scheduled_time=int(time.time()) + 3)
        self.assertEqual(late["task"]["version"], 1)
        r = self.admin.patch("/tasks/" + task["ident"], {"comment": "v2"})
        self.assertEqual(r.status, 200, r)
        self.assertTerminated(self.run_job(task, self.main, {"marker": "late-v2-" + m1}), "v2")
        done = self.wait_job(late["ident"], timeout=15)
        self.assertEdgeError(done, "older than version 2")
        self.assertFalse(os.path.exists(os.path.join(self.files, m1)))

    # -- the jail ------------------------------------------------------------------------

    def run_battery(self, cases, timeout=10, batch=20):
        """cases: [(name, source, reason substring or None)]: every job must end
        edge_error (reason in its response), the agent alive, within the task timeout."""
        pending = []
        for name, src, reason in cases:
            task = self.script_task(src, timeout=timeout)
            pending.append((name, src, reason, self.post_job(task, self.main)["ident"]))
        for name, src, reason, job in pending:
            with self.subTest(name):
                done = self.wait_job(job, timeout=timeout + 10 + len(pending) * 0.5)
                self.assertEqual(done["status"], "edge_error", "%s: %s -> %r" % (
                    name, src, (done["status"], done["response"])))
                if isinstance(reason, str):
                    reason = (reason,)
                if reason and not any(r in (done["response"] or "") for r in reason):
                    self.fail("%s: %s: expected one of %r in %r" % (
                        name, src, reason, done["response"]))
        self.assertAgentAlive(self.main)
        self.assertTrue(self.coord.alive())

    def test_jail_globals_and_modules(self):
        self.run_battery([
            ("io", "return io.open('/etc/passwd'):read('a')", "unknown global 'io'"),
            ("os.execute", "os.execute('touch %s/pwned')" % self.workdir, "execute"),
            ("os.getenv", "return os.getenv('HOME')", "getenv"),
            ("os.exit", "os.exit(0)", "exit"),
            ("require", "return require('io')", "unknown global 'require'"),
            ("package", "return package.loadlib('libc.so.6', 'system')",
             "unknown global 'package'"),
            ("debug", "return debug.getregistry()", "unknown global 'debug'"),
            ("dofile", "dofile('/etc/passwd')", "unknown global 'dofile'"),
            ("loadfile", "return loadfile('/etc/passwd')", "unknown global 'loadfile'"),
            ("print", "print('x')", "unknown global 'print'"),
            ("rawget _ENV", "return rawget(_ENV, 'io') or rawget(_G, 'debug') or "
                            "error('contained')", "contained"),
            ("collectgarbage stop", "return collectgarbage('stop')", "stop"),
        ])
        self.assertFalse(os.path.exists(os.path.join(self.workdir, "pwned")))

    def test_jail_bytecode_and_load(self):
        self.run_battery([
            ("load(string.dump)", "return assert(load(string.dump(function() return 1 end)))()",
             "binary chunk"),
            ("load(string.dump, 'b')",
             "return assert(load(string.dump(function() return 1 end), 'x', 'b'))()",
             "binary chunk"),
            ("load bytecode via reader",
             "local p = {string.dump(function() return 1 end)} local i = 0"
             " return assert(load(function() i = i + 1 return p[i] end))()", "binary chunk"),
            ("load escape sequence", "return assert(load('\\27Lua'))()", "binary chunk"),
            ("load reaching io", "return load('return io')()", "unknown global 'io'"),
            ("load reaching os.execute", "return load('return os.execute')()('id')",
             "nil value"),
            ("load with _G env", "return load('return debug', 'c', 't', _G)().traceback()",
             "unknown global 'debug'"),
            ("load with nil env", "return load('return io', 'c', 't', nil)().open('/etc/passwd')",
             "nil value"),
            ("load _G.require", "return load('return _G')().require('os')",
             "unknown global 'require'"),
        ])

    def test_jail_string_metatable(self):
        self.run_battery([
            ("string metatable dump",
             "return getmetatable('').__index.dump(os.time)", "unable to dump"),
            ("string metatable __index to io",
             "getmetatable('').__index = function(s, k) return io end return ('x').y",
             "unknown global 'io'"),
            ("setmetatable on a string", "return setmetatable('', {})", "table expected"),
            ("string metatable changed, then error",
             "getmetatable('').__index.rep = function() return 'pwned' end error('set')",
             "set"),
        ])
        # nothing carries over to the next job: a fresh state each time
        done = self.run_job(self.script_task("return ('x'):rep(2) .. ('y'):upper()"),
                            self.main)
        self.assertTerminated(done, "xxY")

    def test_jail_hangs(self):
        t0 = time.time()
        self.run_battery([
            ("while true", "while true do end", "timeout after 2 s"),
            ("while true in pcall",
             "while true do pcall(function() while true do end end) end", "timeout after 2 s"),
            ("while true in a coroutine",
             "coroutine.wrap(function() while true do end end)()", "timeout after 2 s"),
            ("pcall in a coroutine",
             "local co = coroutine.create(function() while true do"
             " pcall(function() while true do end end) end end)"
             " while true do coroutine.resume(co) end", "timeout after 2 s"),
            ("backtracking string.find",
             "return string.find(string.rep('a', 40) .. 'b', string.rep('a*', 20) .. 'c')",
             "timeout"),
            ("looping __gc",
             "setmetatable({}, {__gc = function() while true do end end}) collectgarbage()"
             " return 1", "timeout"),
            ("looping __gc when the state is closed",
             "rawset(_ENV, 'keep', setmetatable({}, {__gc = function() while true do end"
             " end})) return 1", "timeout after 2 s"),
        ], timeout=2)
        self.assertLess(time.time() - t0, 40)

    def test_jail_coroutine_close_chain(self):
        src = ("local coro = false\n"
               "for i = 1, 40000 do\n"
               "  local previous = coro\n"
               "  coro = coroutine.create(function()\n"
               "    local cc <close> = setmetatable({}, {__close = function()\n"
               "      if previous then assert(coroutine.close(previous)) end\n"
               "    end})\n"
               "    coroutine.yield()\n"
               "  end)\n"
               "  assert(coroutine.resume(coro))\n"
               "end\n"
               "return tostring(coroutine.close(coro))\n")
        self.run_battery([("coroutine.close chain", src, None)], timeout=8)

    def test_jail_memory_and_recursion(self):
        self.run_battery([
            ("string.rep 1e9", "return #string.rep('x', 1e9)", "memory limit exceeded"),
            ("table fill", "local t = {} for i = 1, 1e9 do t[i] = i end",
             "memory limit exceeded"),
            ("string doubling", "local s = 'x' while true do s = s .. s end",
             "memory limit exceeded"),
            ("string.rep 2^40", "return #string.rep('x', 2^40)", "too large"),
            ("nested tables", "local t = {} while true do t = {t, t} end",
             "memory limit exceeded"),
            # docs/lua-api.md (Limits) promises "stack overflow" here; with the default
            # 64 MiB heap the million-slot Lua stack runs out of memory first
            ("deep recursion", "local function f() return 1 + f() end return f()",
             ("stack overflow", "memory limit exceeded")),
            ("C stack: __index", "local t = setmetatable({}, {}) getmetatable(t).__index ="
             " function(t, k) return t[k] end return t.x", "stack overflow"),
            ("C stack: gsub", "local function f(s) return (string.gsub(s, '.', f)) end"
             " return f('x')", "overflow"),
            ("C stack: coroutine.wrap", "local function f() return coroutine.wrap(f)() end"
             " return f()", None),
            ("parser nesting", "local s = string.rep('(', 1e5) return load('return ' .. s)()",
             None),
        ], timeout=15)

    def test_jail_return_values(self):
        self.run_battery([
            ("recursive table", "local t = {} t.self = t return t", "bad response"),
            ("recursive array", "local t = {} t[1] = t return t", "bad response"),
            ("function", "return function() end", "bad response"),
            ("coroutine", "return {co = coroutine.create(function() end)}", "bad response"),
            ("NaN", "return {x = 0/0}", "bad response"),
            ("non-UTF-8", "return '\\255\\254'", "bad response"),
            ("mixed keys 1 and '1'", "return {[1] = 'a', ['1'] = 'b'}", "bad response"),
            ("too deep", "local t = {} for i = 1, 100 do t = {t} end return t",
             "bad response"),
            ("huge string", "return string.rep('x', 70000)", "response too large"),
            ("huge table", "local t = {} for i = 1, 20000 do t[i] = string.rep('y', 10) end"
                           " return t", "response too large"),
        ])

    def test_jail_exec(self):
        pwned = os.path.join(self.workdir, "exec-pwned")
        check = ('if pcall(rcs.file.read, "pwned") then return "ESCAPED" end\n'
                 'error("contained: " .. r.output)\n')
        self.run_battery([
            ("semicolon", 'local r = rcs.exec("echo", "a; touch %s")\n%s' % (pwned, check),
             "contained: a; touch %s" % pwned),
            ("command substitution",
             'local r = rcs.exec("echo", "$(touch %s)", "`touch %s`")\n%s' % (
                 pwned, pwned, check), "contained: $(touch"),
            ("pipe and &&", 'local r = rcs.exec("echo", "x | touch pwned && touch pwned")\n'
                            + check, "contained: x | touch pwned && touch pwned"),
            ("unlisted name", 'rcs.exec("sh", "-c", "touch %s")' % pwned,
             "command 'sh' is not allowed on this device"),
            ("a path as the name", 'rcs.exec("/bin/echo", "x")', "not allowed"),
            ("metacharacters in the name", 'rcs.exec("echo; touch %s")' % pwned,
             "not allowed"),
            ("relative path name", 'rcs.exec("../echo", "x")', "not allowed"),
            ("non-string argument", 'rcs.exec("echo", {})', None),
        ])
        self.assertFalse(os.path.exists(pwned))
        self.assertFalse(os.path.exists(os.path.join(self.files, "pwned")))

    def test_jail_file_paths(self):
        secret = os.path.join(self.outside, "secret.txt")
        self.run_battery([
            ("dot-dot read", 'return rcs.file.read("../outside/secret.txt")', None),
            ("dot-dot inside", 'return rcs.file.read("sub/../../outside/secret.txt")', None),
            ("dot-dot write", 'rcs.file.write("../outside/pwned", "x")', None),
            ("absolute read", 'return rcs.file.read("/etc/passwd")', None),
            ("absolute write", 'rcs.file.write("%s/pwned", "x")' % self.outside, None),
            ("symlink read", 'return rcs.file.read("link")', None),
            ("symlink to /etc/passwd", 'return rcs.file.read("passwd")', None),
            ("symlink write", 'rcs.file.write("link", "overwritten")', None),
            ("directory symlink read", 'return rcs.file.read("dirlink/secret.txt")', None),
            ("directory symlink write", 'rcs.file.write("dirlink/pwned", "x")', None),
            ("dot component", 'return rcs.file.read("./given.txt")', None),
            ("empty component", 'return rcs.file.read("sub//a.txt")', None),
            ("empty path", 'return rcs.file.read("")', None),
            ("NUL in path", 'return rcs.file.read("link\\0x")', None),
        ])
        with open(secret) as f:
            self.assertEqual(f.read(), "outside secret\n")
        self.assertFalse(os.path.exists(os.path.join(self.outside, "pwned")))
        self.assertTrue(os.path.islink(os.path.join(self.files, "link")))

    def test_script_allocating_and_freeing_memory(self):
        """Ordinary scripts that build and drop a few MiB (well under mem_limit) must run
        to the end: the jail is for escapes, not for string concatenation."""
        cases = [
            ("strings built and dropped",
             "for round = 1, 5 do\n  local t = {}\n"
             "  for i = 1, 5000 do t[i] = string.rep('x', 3000) .. i end\n"
             "  t = nil\n  collectgarbage()\nend\nreturn 'ok'\n"),
            ("concatenation in a loop",
             "local s = ''\nfor i = 1, 3000 do s = s .. string.rep('y', 100) end\n"
             "local n = #s\ns = nil\ncollectgarbage()\nreturn n\n"),
        ]
        jobs = [(name, src, self.post_job(self.script_task(src), self.main)["ident"])
                for name, src in cases]
        for name, src, job in jobs:
            with self.subTest(name):
                done = self.wait_job(job)
                self.assertEqual(done["status"], "terminated", "%s:\n%s-> %r" % (
                    name, src, (done["status"], done["response"])))

    def test_zz_agent_still_serves(self):
        """After everything above: the same agent process still runs jobs."""
        self.assertEqual(self.main.starts, 1)
        task = self.stock_task("echo")
        self.assertTerminated(self.run_job(task, self.main), "pong")
        self.assertTrue(self.admin.get("/devices/" + self.main.entity_ident).json["online"])


# =========================================================================================


class DeviceLifecycleTest(AgentTest):
    """Agents stopped, killed, restarted and reloaded; the queue bound."""

    def test_inventory_attributes(self):
        # inventory_command (docs/agent.md "Inventory"): its key=value lines become the
        # device's attributes at connect and after every job; garbage is skipped, logged once
        version = os.path.join(self.workdir, "inv-version")
        with open(version, "w") as f:
            f.write("1.0")
        inv = write_exe(os.path.join(self.workdir, "inventory.sh"),
                        "#!/bin/sh\necho \"fw=$(cat %s)\"\necho board = x1\n"
                        "echo 'not a pair'\necho 'bad key=1'\n" % version)
        a = self.new_agent("inv", extra_args=["--inventory-command", inv])
        ident = a.entity_ident

        def attrs():
            return self.admin.get("/devices/" + ident).json.get("attributes")

        wait_for(lambda: attrs() == {"fw": "1.0", "board": "x1"}, timeout=15,
                 what="attributes at connect")

        def listed(*filters):
            q = "&".join("attribute=" + urllib.parse.quote(f, safe="") for f in filters)
            r = self.admin.get("/devices?per_page=100&" + q)
            self.assertEqual(r.status, 200, r)
            return [d["entity_ident"] for d in r.json["items"]]

        self.assertIn(ident, listed("fw:1.0"))
        self.assertIn(ident, listed("fw:1.0", "board:x1"))
        self.assertNotIn(ident, listed("fw:1.0", "board:x2"))
        self.assertNotIn(ident, listed("fw:2.0"))
        # a job changes what the device runs: the attributes follow after it
        with open(version, "w") as f:
            f.write("2.0")
        self.assertTerminated(self.run_job(self.script_task('return "installed"'), a))
        wait_for(lambda: attrs() == {"fw": "2.0", "board": "x1"}, timeout=15,
                 what="attributes after a job")
        self.assertIn(ident, listed("fw:2.0"))
        self.assertNotIn(ident, listed("fw:1.0"))
        log = a.read_log()
        self.assertEqual(log.count("line(s) skipped"), 1, log[-2000:])
        self.assertIn("no '=' in line 'not a pair'", log)
        # bad filters
        for q in ("attribute=fw", "attribute=bad%20key:1", "attribute=a:1&attribute=b:1"
                  "&attribute=c:1&attribute=d:1&attribute=e:1"):
            r = self.admin.get("/devices?" + q)
            self.assertEqual(r.status, 400, (q, r))
            self.assertEqual(r.json["error"]["details"]["field"], "attribute", r)
        # a state message with bad attributes is dropped and logged, nothing else changes
        topic = "rcs/v1/%s/%s/state" % (self.client_root, ident)
        w = self.recorder(topic)
        w.client.publish(topic, json.dumps({"v": 1, "online": True,
                                            "attributes": {"fw": "\u0007"}}),
                         qos=1, retain=False).wait_for_publish()
        wait_for(lambda: "dropped a state message from %s" % ident in self.coord.read_log(),
                 timeout=10, what="bad state logged")
        self.assertEqual(attrs(), {"fw": "2.0", "board": "x1"})
        self.assertAgentAlive(a)

    def test_config_persists_across_restart(self):
        a = self.new_agent("cfg")
        set_task = self.stock_task("set_config", variables_info={
            "key": {"type": "string"}, "value": {"type": "string"}})
        get_task = self.stock_task("get_config", constants={"keys": ["ntp", "missing"]},
                                   variables_info={"key": {"type": "string",
                                                           "optional": True}})
        done = self.assertTerminated(self.run_job(set_task, a, {"key": "ntp",
                                                                "value": "pool.ntp.org"}))
        self.assertEqual(json.loads(done["response"]), {"key": "ntp", "value": "pool.ntp.org"})
        self.assertIn("job %s: script: setting ntp changed" % done["ident"], a.read_log())
        done = self.assertTerminated(self.run_job(set_task, a, {"key": "ntp",
                                                                "value": "time.example"}))
        self.assertEqual(json.loads(done["response"]),
                         {"key": "ntp", "previous": "pool.ntp.org", "value": "time.example"})
        self.assertEqual(a.stop(), 0)
        self.wait_online(a, False)
        a.start()
        self.wait_online(a, True)
        done = self.assertTerminated(self.run_job(get_task, a, {"key": "ntp"}))
        self.assertEqual(json.loads(done["response"]), {"ntp": "time.example"})
        done = self.assertTerminated(self.run_job(get_task, a, {}))
        self.assertEqual(json.loads(done["response"]), {"ntp": "time.example"})
        # rcs.config directly: get of an unset key is nil
        src = ('return {a = rcs.config.get("ntp"), b = tostring(rcs.config.get("nope"))}')
        done = self.assertTerminated(self.run_job(self.script_task(src), a))
        self.assertEqual(json.loads(done["response"]), {"a": "time.example", "b": "nil"})

    def test_kill9_mid_script_then_restart(self):
        a = self.new_agent("crash")
        src = ('local ok, old = pcall(rcs.file.read, "runs")\n'
               'rcs.file.write("runs", (ok and old or "") .. "x")\n'
               'rcs.progress("running") rcs.sleep(30) return "finished"\n')
        task = self.script_task(src, timeout=60)
        j = self.post_job(task, a)
        queued = self.post_job(self.script_task('return "after restart"'), a)
        wait_for(lambda: ("edge_running", "running") in self.history(j["ident"], True),
                 timeout=5, what="the script running")
        wait_for(lambda: "edge_transmitted" in self.history(queued["ident"]), timeout=5,
                 what="the second job queued")
        time.sleep(0.5)  # mid-script, the reports so far acknowledged
        children = self.children(a.pid)
        self.assertTrue(children, "no sandbox child process")
        self.assertEqual(a.stop(signal.SIGKILL), -signal.SIGKILL)
        # the jailed child dies with its agent
        wait_for(lambda: not any(os.path.exists("/proc/%d" % c) and
                                 not self.zombie(c) for c in children),
                 timeout=5, what="the sandbox child gone after kill -9 of the agent")
        self.wait_online(a, False)  # the Last Will
        a.start()
        self.wait_online(a, True)
        done = self.wait_job(j["ident"])
        self.assertEdgeError(done, "interrupted")
        self.assertTerminated(self.wait_job(queued["ident"]), "after restart")
        with open(os.path.join(a.files, "runs")) as f:
            self.assertEqual(f.read(), "x", "the interrupted job ran again")
        h = self.history(j["ident"])
        self.assertEqual(h[-1], "edge_error")
        self.assertNotIn("terminated", h)
        # seq keeps growing across restarts; a report the broker had not acknowledged
        # before the kill may come again after the restart, with its own seq and status
        reps = [p for _, p in self.device_reports(j["ident"])]
        by_seq = {}
        for p in reps:
            self.assertEqual(by_seq.setdefault(p["seq"], p["status"]), p["status"], reps)
        final = [p for p in reps if p["status"] == "edge_error"]
        self.assertEqual(len({p["seq"] for p in final}), 1, reps)
        self.assertEqual(final[0]["seq"], max(by_seq), reps)
        self.assertEqual(sorted(by_seq), list(range(1, max(by_seq) + 1)), reps)

    @staticmethod
    def children(pid):
        out = []
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return out

    @staticmethod
    def zombie(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    def test_sigterm_publishes_offline(self):
        a = self.new_agent("term")
        self.assertTrue(self.admin.get("/devices/" + a.entity_ident).json["online"])
        j = self.post_job(self.script_task('rcs.progress("long") rcs.sleep(30)', timeout=60), a)
        wait_for(lambda: ("edge_running", "long") in self.history(j["ident"], True),
                 timeout=5, what="the script running")
        t0 = time.time()
        self.assertEqual(a.stop(signal.SIGTERM), 0)
        self.assertLess(time.time() - t0, 5, "SIGTERM took too long")
        rec = self.wait_online(a, False, timeout=5)
        self.assertTrue(rec)
        self.assertFalse(self.admin.get("/devices/" + a.entity_ident).json["online"])
        self.assertIn("stopping", a.read_log())
        # the interrupted job ends edge_error (reported now, or after the next start)
        a.start()
        self.wait_online(a, True)
        self.assertEdgeError(self.wait_job(j["ident"]), "interrupted")

    def test_sighup_reloads_tags(self):
        conf = os.path.join(self.workdir, "hup.conf")
        with open(conf, "w") as f:
            f.write("# agent config\ntag site-a\ntag model-x\n")
        a = self.new_agent("hup", extra_args=["--config", conf])
        dev = "/devices/" + a.entity_ident
        wait_for(lambda: sorted(self.admin.get(dev).json["reported_tags"]) ==
                 ["model-x", "site-a"], timeout=5, what="the configured tags reported")
        with open(conf, "w") as f:
            f.write("# agent config\ntag site-b\n")
        a.send_signal(signal.SIGHUP)
        wait_for(lambda: self.admin.get(dev).json["reported_tags"] == ["site-b"], timeout=5,
                 what="the reloaded tags reported")
        self.assertIn("SIGHUP", a.read_log())
        self.assertTrue(a.alive())
        # a broken config is not applied and the agent keeps going
        with open(conf, "w") as f:
            f.write("tag bad tag with spaces\n")
        a.send_signal(signal.SIGHUP)
        a.wait_log("configuration not reloaded", timeout=5)
        self.assertTrue(a.alive())
        self.assertEqual(self.admin.get(dev).json["reported_tags"], ["site-b"])
        # a tag send reaches it by the reported tag
        task = self.stock_task("echo")
        r = self.admin.post("/tasks/%s/jobs/tags" % task["ident"], {"tag": "site-b"})
        self.assertEqual(r.status, 201, r)
        self.assertEqual([x["entity_ident"] for x in r.json["items"]], [a.entity_ident])
        self.assertTerminated(self.wait_job(r.json["items"][0]["ident"]), "pong")

    def test_queue_bound(self):
        a = self.new_agent("busy", extra_args=["--max-queue", "1"])
        task = self.script_task('rcs.sleep(1.5) return "ok"')
        first = self.post_job(task, a)
        wait_for(lambda: "edge_started" in self.history(first["ident"]), timeout=5,
                 what="the first job started")
        second = self.post_job(task, a)
        third = self.post_job(task, a)
        results = [self.wait_job(j["ident"]) for j in (first, second, third)]
        busy = [r for r in results if r["status"] == "edge_error"
                and "device busy" in (r["response"] or "")]
        ok = [r for r in results if r["status"] == "terminated"]
        self.assertEqual(len(busy), 1, [(r["status"], r["response"]) for r in results])
        self.assertEqual(len(ok), 2, [(r["status"], r["response"]) for r in results])
        self.assertEqual(busy[0]["ident"], third["ident"])
        self.assertNotIn("edge_started", self.history(third["ident"]))


# =========================================================================================


class LauncherTest(AgentTest):
    """The sandbox launcher (docs/agent.md): the agent's only child, forked before the agent
    read its configuration; every jail child is its child. It dies with the agent; when it
    dies, the job it was running ends edge_error, the agent restarts itself (same pid) and
    runs the jobs that waited."""

    @staticmethod
    def children(pid):
        return DeviceLifecycleTest.children(pid)

    @staticmethod
    def proc_text(pid, name):
        try:
            with open("/proc/%d/%s" % (pid, name), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def launcher_of(self, agent):
        kids = self.children(agent.pid)
        self.assertEqual(len(kids), 1, "the agent's children: %r" % kids)
        self.assertEqual(self.proc_text(kids[0], "comm").strip(), "rcs-launcher")
        return kids[0]

    def gone(self, pid):
        return not os.path.exists("/proc/%d" % pid) or DeviceLifecycleTest.zombie(pid)

    def test_launcher_holds_no_secret_and_dies_with_the_agent(self):
        a = self.new_agent("launch", extra_args=["--mqtt-username", "pump-7",
                                                 "--mqtt-password", "s3cret-pw"])
        launcher = self.launcher_of(a)
        self.assertIn("s3cret-pw", self.proc_text(a.pid, "cmdline"))
        self.assertNotIn("s3cret-pw", self.proc_text(launcher, "cmdline"),
                         "the launcher's copy of the command line is wiped")
        j = self.post_job(self.script_task('rcs.progress("running") rcs.sleep(30)',
                                           timeout=60), a)
        wait_for(lambda: ("edge_running", "running") in self.history(j["ident"], True),
                 timeout=10, what="the script running")
        jails = self.children(launcher)
        self.assertEqual(len(jails), 1, jails)
        self.assertEqual(self.proc_text(jails[0], "comm").strip(), "rcs-jail")
        self.assertIn("Seccomp:\t2", self.proc_text(jails[0], "status"))
        self.assertEqual(self.children(jails[0]), [])
        self.assertEqual(a.stop(signal.SIGKILL), -signal.SIGKILL)
        wait_for(lambda: self.gone(launcher) and self.gone(jails[0]), timeout=5,
                 what="the launcher and the jail child gone with the agent")
        # a clean stop takes the launcher along too
        a.start()
        self.wait_online(a, True)
        self.assertEdgeError(self.wait_job(j["ident"]), "interrupted")
        launcher = self.launcher_of(a)
        self.assertEqual(a.stop(), 0)
        wait_for(lambda: self.gone(launcher), timeout=5, what="the launcher gone on SIGTERM")

    def test_killing_the_launcher_fails_the_job_and_the_agent_recovers(self):
        a = self.new_agent("relaunch")
        src = ('local ok, old = pcall(rcs.file.read, "runs")\n'
               'rcs.file.write("runs", (ok and old or "") .. "x")\n'
               'rcs.progress("running") rcs.sleep(30) return "finished"\n')
        j = self.post_job(self.script_task(src, timeout=60), a)
        queued = self.post_job(self.script_task('return "after the restart"'), a)
        wait_for(lambda: ("edge_running", "running") in self.history(j["ident"], True),
                 timeout=10, what="the script running")
        wait_for(lambda: "edge_transmitted" in self.history(queued["ident"]), timeout=10,
                 what="the second job queued")
        pid = a.pid
        launcher = self.launcher_of(a)
        jail = self.children(launcher)
        self.assertEqual(len(jail), 1, jail)
        os.kill(launcher, signal.SIGKILL)
        done = self.wait_job(j["ident"], timeout=15)
        self.assertEdgeError(done, "sandbox unavailable: the sandbox launcher died")
        self.assertNotIn("terminated", self.history(j["ident"]))
        wait_for(lambda: self.gone(jail[0]), timeout=5, what="the jail child gone")
        # the agent restarted itself (same process) and ran the job that waited
        self.assertTerminated(self.wait_job(queued["ident"], timeout=30), "after the restart")
        self.assertTrue(a.alive())
        self.assertEqual(a.pid, pid)
        log = a.read_log(tail=None)
        self.assertIn("the sandbox launcher was killed by signal 9: restarting the agent", log)
        fresh = self.launcher_of(a)
        self.assertNotEqual(fresh, launcher)
        # online again once its subscriptions are granted, which may come after the waiting
        # job's reports (docs/mqtt.md, "Connection sequence": the outbox goes first)
        self.wait_online(a, True)
        self.assertTerminated(self.run_job(self.script_task('return "and more"'), a),
                              "and more")
        with open(os.path.join(a.files, "runs")) as f:
            self.assertEqual(f.read(), "x", "the failed job ran again")
        self.assertEqual(a.stop(), 0)


# =========================================================================================


class CommandLineTest(unittest.TestCase):
    """Command lines the agent refuses: exit code 2 and a message naming the problem,
    never a crash (a flag that wants a value given last, an unknown flag, a missing
    config file, a URL this build can't use), with --check too."""

    def test_refused_command_lines(self):
        workdir = tempfile.mkdtemp(prefix="rcs-agent-cli-")
        self.addCleanup(shutil.rmtree, workdir, True)
        base = ["--mqtt", "tcp://127.0.0.1:9", "--client-root", str(uuid.uuid4()),
                "--entity-ident", str(uuid.uuid4()), "--state-dir",
                os.path.join(workdir, "state"), "--require-signature=false"]
        cases = [(["--config"], "--config"), (base + ["--mqtt"], "--mqtt"),
                 (base + ["--no-such-flag"], "no-such-flag"),
                 (base + ["--config", os.path.join(workdir, "missing.conf")], "missing.conf"),
                 (base + ["--mqtt", "http://127.0.0.1:9"], "expected tcp://"),
                 (base + ["--inventory-command", "inventory.sh"],
                  "inventory_command 'inventory.sh': not an absolute path"),
                 (base + ["--rollback-command", "bin/rollback"],
                  "rollback_command 'bin/rollback': not an absolute path")]
        for args, said in cases:
            for check in ([], ["--check"]):
                with self.subTest(args=args[-2:], check=check):
                    p = subprocess.run([AGENT, *check, *args], capture_output=True,
                                       text=True, timeout=30)
                    self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
                    self.assertIn(said, p.stderr)
        p = subprocess.run([AGENT, "--check", *base], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"), p.stderr)
        self.assertFalse(os.path.exists(os.path.join(workdir, "state")))


# =========================================================================================


class UnsignedTasksTest(AgentTest):
    """A coordinator without --signing-key: its tasks go out with
    signature null. An agent refuses them by default; one with --require-signature false
    runs them; a task signed offline with openssl (docs/signing.md) runs everywhere."""

    signing = False

    def test_unsigned_refused_by_default(self):
        a = self.new_agent("strict")
        task = self.stock_task("echo")
        self.assertIsNone(task["signature"])
        done = self.run_job(task, a)
        self.assertEdgeError(done, "signature required")
        env = self.envelopes.for_job(done["ident"])[0][1]
        self.assertIsNone(env["signature"])
        self.assertNotIn("edge_started", self.history(done["ident"]))
        self.assertTrue(a.alive())

    def test_unsigned_accepted_without_require_signature(self):
        a = self.new_agent("lax", trusted_keys=[], extra_args=["--require-signature=false"])
        task = self.stock_task("echo")
        self.assertTerminated(self.run_job(task, a), "pong")

    def test_require_signature_false_as_written_in_help(self):
        """`rcs-agent --help` documents `--require-signature BOOL` (and docs/agent.md says
        every config key is also a flag): the value as a separate argument must work."""
        a = self.new_agent("lax2", trusted_keys=[], start=False,
                           extra_args=["--require-signature", "false"])
        a.start()
        self.wait_online(a, True)
        self.assertTerminated(self.run_job(self.stock_task("echo"), a), "pong")

    def test_require_signature_false_in_config_file(self):
        conf = os.path.join(self.workdir, "lax3.conf")
        with open(conf, "w") as f:
            f.write("require_signature false\n")
        a = self.new_agent("lax3", trusted_keys=[], extra_args=["--config", conf])
        self.assertTerminated(self.run_job(self.stock_task("echo"), a), "pong")

    def test_signed_offline_accepted(self):
        a = self.new_agent("offline-signed")
        task = self.script_task('return "signed offline"')
        src = self.admin.get("/scripts/" + task["script"]).json["source"]
        manifest = task_manifest(self.client_root, task["ident"], task["version"],
                                 task["script"], src, task["constants"],
                                 task["variables_info"])
        sig = sign_es256(self.key, manifest, self.pub)
        r = self.admin.patch("/tasks/" + task["ident"], {"signature": sig})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["version"], task["version"])
        self.assertTerminated(self.run_job(task, a), "signed offline")
        # signed with a key the agent doesn't trust
        other_key, other_pub = make_ec_keypair(self.workdir, "untrusted")
        task2 = self.script_task('return "other"')
        src = self.admin.get("/scripts/" + task2["script"]).json["source"]
        manifest = task_manifest(self.client_root, task2["ident"], task2["version"],
                                 task2["script"], src, {}, {})
        r = self.admin.patch("/tasks/" + task2["ident"],
                             {"signature": sign_es256(other_key, manifest, other_pub)})
        self.assertEqual(r.status, 200, r)
        self.assertEdgeError(self.run_job(task2, a), "unknown signing key")


if __name__ == "__main__":
    unittest.main(verbosity=2)
