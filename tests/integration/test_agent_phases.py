#!/usr/bin/env python3
"""Jobs that span a reboot, end to end (docs/agent.md "Phases", docs/lua-api.md
"rcs.reboot{...}" and "rcs.state"): a real mosquitto, the real coordinator and real agents.

The harness plays the bootloader: an agent's reboot_command is a script in the test's
directory that writes a new boot id into the agent's boot_id_file and stops the agent with
SIGTERM, as a real reboot would; the test then starts the agent again. Checked: the whole
sequence (first run, "rebooting" with its phase and within, the phase "verify" after the
reboot with rcs.job.rebooted true and rcs.state restored, terminated, every report after the
first run carrying the phase); a restart without a new boot id (rebooted false); a phase
killed with -9 runs again, the third time ends it edge_error interrupted; a reboot command
that does not reboot (the agent resumes the phase itself after 60 s, rebooted false), a job
sent meanwhile waiting for the sequence, a cancel between the phases not stopping it; bad
arguments of rcs.reboot and rcs.state; a config whose artifact_dir holds boot_id_file.

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent_phases.py
"""

import hashlib
import json
import os
import signal
import subprocess
import time
import unittest

from rcs_harness import AGENT, wait_for
from test_agent import AgentTest, write_exe

SEQUENCE = '''
if rcs.job.phase == nil then
  rcs.state.set("expect", "2.0")
  rcs.state.set("count", 41)
  rcs.state.set("ok", true)
  rcs.state.set("gone", "x")
  rcs.state.set("gone", nil)
  rcs.file.write("installed", "2.0")
  rcs.reboot{resume = "verify", within = 120}
  error("not reached: rcs.reboot{resume} ends the script")
end
if rcs.job.phase == "verify" then
  return {phase = rcs.job.phase, rebooted = rcs.job.rebooted,
          expect = rcs.state.get("expect"), count = rcs.state.get("count") + 1,
          ok = rcs.state.get("ok"), gone = rcs.state.get("gone") == nil,
          installed = rcs.file.read("installed")}
end
error("unknown phase " .. tostring(rcs.job.phase))
'''

# each run of the phase leaves an x, then waits to be killed
REPEAT = '''
if rcs.job.phase == nil then
  rcs.reboot{resume = "verify"}
end
local ok, old = pcall(rcs.file.read, "runs")
rcs.file.write("runs", (ok and old or "") .. "x")
rcs.progress("verifying")
rcs.sleep(120)
return "verified"
'''


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class PhaseAgents(AgentTest):
    """Agents whose reboot command plays the reboot, and helpers (no tests of its own)."""

    workdir_prefix = "rcs-phases-"

    def phase_agent(self, name, reboot="bootloader", extra_args_more=(), **kw):
        """An agent whose reboot command plays a reboot: "bootloader" writes a new boot id
        and stops the agent, "restart" stops it without a new boot id, "nothing" returns."""
        w = self.workdir
        boot = os.path.join(w, name + "-boot_id")
        with open(boot, "w") as f:
            f.write("boot-0\n")
        log = os.path.join(w, name + "-reboots")
        body = "#!/bin/sh\necho reboot >> %s\n" % log
        if reboot == "bootloader":
            body += "echo \"boot-$(date +%%s%%N)\" > %s\n" % boot
            # the new image, when an install left one (StockUpdateTest)
            body += ("test -e {w}/fw-next && mv {w}/fw-next {w}/fw-current\n"
                     .format(w=w))
        if reboot in ("bootloader", "restart"):
            body += "kill -TERM $PPID\n"
        script = write_exe(os.path.join(w, name + "-reboot.sh"), body)
        a = self.new_agent(name, extra_args=["--reboot-command", script, "--boot-id-file",
                                             boot, *extra_args_more], **kw)
        a.boot_file, a.reboot_log, a.reboot_script = boot, log, script
        return a

    @staticmethod
    def reboots(agent):
        try:
            with open(agent.reboot_log) as f:
                return len(f.read().splitlines())
        except OSError:
            return 0

    def wait_stopped(self, agent, timeout=20):
        """The reboot command stopped the agent: it exited by itself (SIGTERM: status 0)."""
        wait_for(lambda: agent.proc.poll() is not None, timeout=timeout,
                 what="agent %s stopped by its reboot command" % agent.name)
        self.assertEqual(agent.stop(), 0, agent.read_log()[-2000:])
        self.wait_online(agent, False)

    def restart(self, agent, online=True):
        """online False: an agent whose resumed phase may reboot it again before it says it
        is online (it says so only once the broker granted its subscriptions)."""
        agent.start()
        if online:
            self.wait_online(agent, True)

    def reps(self, job):
        return [p for _, p in self.device_reports(job)]


class PhasesTest(PhaseAgents):
    """rcs.reboot{resume, within}, rcs.state, rcs.job.phase/rebooted and the agent's rules."""

    def test_sequence_across_a_reboot(self):
        a = self.phase_agent("seq")
        j = self.post_job(self.script_task(SEQUENCE, timeout=30), a)
        wait_for(lambda: ("edge_running", "rebooting") in self.history(j["ident"], True),
                 timeout=20, what="the rebooting report")
        self.wait_stopped(a)
        self.assertEqual(self.reboots(a), 1)
        with open(a.boot_file) as f:
            self.assertNotEqual(f.read().strip(), "boot-0")
        self.restart(a)
        done = self.assertTerminated(self.wait_job(j["ident"], timeout=30))
        self.assertEqual(json.loads(done["response"]),
                         {"phase": "verify", "rebooted": True, "expect": "2.0", "count": 42,
                          "ok": True, "gone": True, "installed": "2.0"})
        self.assertEqual(self.reboots(a), 1, "rebooted again after the last phase")
        h = self.history(j["ident"], True)
        i = h.index(("edge_running", "rebooting"))
        self.assertIn(("edge_running", "phase verify (rebooted)"), h[i + 1:])
        # the reports: none before the reboot has a phase; the rebooting one has the next
        # phase and within; every later one carries the phase, the final report too
        reps = self.reps(j["ident"])
        rb = [p for p in reps if p.get("response") == "rebooting"]
        self.assertEqual(len(rb), 1, reps)
        self.assertEqual((rb[0]["status"], rb[0]["phase"], rb[0]["within"]),
                         ("edge_running", "verify", 120))
        for p in reps:
            if p["seq"] < rb[0]["seq"]:
                self.assertNotIn("phase", p, p)
            else:
                self.assertEqual(p.get("phase"), "verify", p)
        self.assertEqual(reps[-1]["status"], "terminated")
        log = a.read_log(tail=None)
        self.assertLess(log.index("job %s: edge_running: rebooting" % j["ident"]),
                        log.index("rebooting as job %s asked, into its next phase" % j["ident"]))

    def test_restart_without_a_new_boot_id(self):
        a = self.phase_agent("norb", reboot="restart")
        j = self.post_job(self.script_task(SEQUENCE, timeout=30), a)
        self.wait_stopped(a)
        self.restart(a)
        done = self.assertTerminated(self.wait_job(j["ident"], timeout=30))
        out = json.loads(done["response"])
        self.assertIs(out["rebooted"], False)
        self.assertEqual((out["expect"], out["count"]), ("2.0", 42))
        self.assertIn(("edge_running", "phase verify (not rebooted)"),
                      self.history(j["ident"], True))

    def test_phase_killed_runs_again_then_interrupted(self):
        a = self.phase_agent("kill")
        runs = os.path.join(a.files, "runs")
        j = self.post_job(self.script_task(REPEAT, timeout=300), a)
        self.wait_stopped(a)
        for n in (1, 2, 3):
            self.restart(a)
            wait_for(lambda: read(runs) == "x" * n,
                     timeout=20, what="run %d of the phase" % n)
            time.sleep(1)  # mid-phase, its reports out
            self.assertEqual(a.stop(signal.SIGKILL), -signal.SIGKILL)
            self.wait_online(a, False)
        self.restart(a)
        done = self.assertEdgeError(self.wait_job(j["ident"], timeout=20),
                                    "during phase verify 3 times")
        self.assertEqual(done["error_code"], "interrupted")
        time.sleep(1)
        self.assertEqual(read(runs), "xxx", "the phase ran a fourth time")
        self.assertEqual(self.reps(j["ident"])[-1].get("phase"), "verify")
        # the device serves other jobs afterwards
        self.assertTerminated(self.run_job(self.script_task('return "next"'), a), "next")

    def test_reboot_that_does_not_come(self):
        """The reboot command returns and the device stays up: the agent resumes the phase
        itself after 60 s (rebooted false). A job sent meanwhile waits for the sequence; a
        cancel between the phases is recorded but the sequence goes on."""
        a = self.phase_agent("stay", reboot="nothing")
        first = self.post_job(self.script_task(SEQUENCE, timeout=30), a)
        wait_for(lambda: self.reboots(a) == 1, timeout=20, what="the reboot command")
        t0 = time.time()
        second = self.post_job(self.script_task('return rcs.job.phase == nil and "second"'), a)
        wait_for(lambda: "edge_transmitted" in self.history(second["ident"]), timeout=10,
                 what="the second job queued on the device")
        r = self.admin.patch("/jobs/%s/cancel" % first["ident"])
        self.assertEqual(r.status, 200, r)
        a.wait_log("job %s: cancelled between its phases" % first["ident"])
        time.sleep(5)
        self.assertNotIn("edge_started", self.history(second["ident"]),
                         "a job started between the phases of another")
        wait_for(lambda: any(p["status"] == "terminated" for p in self.reps(first["ident"])),
                 timeout=90, what="the first job's phase resumed by the agent")
        self.assertGreater(time.time() - t0, 50)
        final = self.reps(first["ident"])[-1]
        self.assertEqual((final["status"], final["phase"]), ("terminated", "verify"))
        self.assertIs(json.loads(final["response"])["rebooted"], False)
        self.assertIn("did not reboot within 60 s", a.read_log(tail=None))
        self.assertEqual(self.job(first["ident"])["status"], "cancelled")
        self.assertTerminated(self.wait_job(second["ident"], timeout=20), "second")
        t_first = max(p["ts"] for p in self.reps(first["ident"]))
        started = [p["ts"] for p in self.reps(second["ident"]) if p["status"] == "edge_started"]
        self.assertGreaterEqual(started[0], t_first)
        self.assertEqual(self.reboots(a), 1)

    def test_bad_arguments(self):
        a = self.phase_agent("bad", reboot="nothing")
        cases = [
            ('rcs.reboot{resume = "Verify"}', "resume must be a phase name"),
            ('rcs.reboot{resume = ""}', "resume must be a phase name"),
            ('rcs.reboot{resume = string.rep("a", 33)}', "resume must be a phase name"),
            ('rcs.reboot{}', "resume must be a phase name"),
            ('rcs.reboot{resume = "v", within = 29}', "within must be whole seconds"),
            ('rcs.reboot{resume = "v", within = 86401}', "within must be whole seconds"),
            ('rcs.reboot{resume = "v", within = 60.5}', "within must be whole seconds"),
            ('rcs.state.set("k", {})', "value must be a string, number or boolean"),
            ('rcs.state.set("k", 0/0)', "finite number"),
            ('rcs.state.set("", 1)', "key must be"),
            ('rcs.state.set("k", string.rep("x", 16000)) rcs.state.set("l", string.rep("y", 1000))',
             "more than 16384"),
        ]
        for src, why in cases:
            done = self.run_job(self.script_task(
                'rcs.state.set("keep", 1) ' + src + ' return "no error"'), a)
            self.assertEdgeError(done, why)
            self.assertEqual(done["error_code"], "script_error", src)
        self.assertEqual(self.reboots(a), 0)
        # rcs.state in a job without phases, a value that fits, and a caught error
        done = self.assertTerminated(self.run_job(self.script_task(
            'rcs.state.set("a", "x") rcs.state.set("b", 2.5) rcs.state.set("c", false)'
            ' local ok = pcall(rcs.state.set, "d", {})'
            ' return {a = rcs.state.get("a"), b = rcs.state.get("b"),'
            ' c = rcs.state.get("c"), d = rcs.state.get("d") == nil, ok = ok,'
            ' phase = rcs.job.phase == nil, rebooted = rcs.job.rebooted}'), a))
        self.assertEqual(json.loads(done["response"]),
                         {"a": "x", "b": 2.5, "c": False, "d": True, "ok": False,
                          "phase": True, "rebooted": False})

    def test_too_many_reboots(self):
        a = self.phase_agent("many", reboot="restart")
        src = ('local n = (rcs.state.get("n") or 0) + 1 rcs.state.set("n", n)'
               ' rcs.reboot{resume = "p" .. n}')
        j = self.post_job(self.script_task(src), a)
        for _ in range(8):
            self.wait_stopped(a)
            a.start()  # it may run its next phase and stop before it is seen online
        done = self.assertEdgeError(self.wait_job(j["ident"], timeout=20),
                                    "after 8 reboots: at most 8 per job")
        self.assertEqual(done["error_code"], "script_error")
        self.assertEqual(self.reboots(a), 8)
        self.assertEqual(self.reps(j["ident"])[-1].get("phase"), "p8")

    def test_boot_id_file_in_artifact_dir_refused(self):
        d = os.path.join(self.workdir, "arts")
        os.makedirs(d, exist_ok=True)
        base = [AGENT, "--check", "--mqtt", self.broker.url, "--client-root",
                self.client_root, "--entity-ident", self.client_root, "--state-dir",
                os.path.join(self.workdir, "refused-state"), "--require-signature=false"]
        for args, why in (
                (["--artifact-dir", d, "--boot-id-file", os.path.join(d, "boot_id")],
                 "boot_id_file '%s' lies in artifact_dir" % os.path.join(d, "boot_id")),
                (["--boot-id-file", "boot_id"], "boot_id_file 'boot_id': not an absolute path")):
            p = subprocess.run(base + args, capture_output=True, text=True, timeout=20)
            self.assertEqual(p.returncode, 2, p)
            self.assertIn(why, p.stderr)


class StockUpdateTest(PhaseAgents):
    """The stock update script's whole sequence (docs/lua-api.md "A job across a reboot"):
    install the task's artifact, reboot into it, check the running version and the health
    command, terminated; a failing health check rolls back (rollback_command, then a
    reboot into the old version) and ends rolled_back."""

    coord_args = ("--sign-artifacts",)

    def test_stock_update_sequence(self):
        w = self.workdir
        cur, nxt = os.path.join(w, "fw-current"), os.path.join(w, "fw-next")
        healthy, rolled = os.path.join(w, "healthy"), os.path.join(w, "rolled")
        with open(cur, "w") as f:
            f.write("1.0\n")
        install = write_exe(os.path.join(w, "install.sh"),
                            "#!/bin/sh\ncmp -s \"$1\" %s/fw.bin && echo 2.0 > %s\n"
                            % (w, nxt))
        version = write_exe(os.path.join(w, "version.sh"), "#!/bin/sh\ncat %s\n" % cur)
        health = write_exe(os.path.join(w, "health.sh"),
                           "#!/bin/sh\ntest -e %s || { echo sick; exit 1; }\n" % healthy)
        rollback = write_exe(os.path.join(w, "rollback.sh"),
                             "#!/bin/sh\necho rollback >> %s\necho 1.0 > %s\n" % (rolled, nxt))
        data = os.urandom(100000)
        with open(os.path.join(w, "fw.bin"), "wb") as f:
            f.write(data)
        r = self.admin.post("/artifacts?name=fw-2.0.bin", raw=data,
                            headers={"Content-Type": "application/octet-stream"})
        self.assertIn(r.status, (200, 201), r)
        a = self.phase_agent(
            "upd", allow_commands={"install": install, "version": version, "health": health},
            extra_args_more=["--rollback-command", rollback, "--artifact-url",
                             "http://127.0.0.1:%d" % self.coord.port])
        task = self.stock_task("update", artifacts={"firmware": r.json["ident"]},
                               constants={"version": "2.0"},
                               variables_info={"reboot": {"type": "boolean", "optional": True}})
        open(healthy, "w").close()
        j = self.post_job(task, a, {"reboot": True})
        self.wait_stopped(a)
        self.restart(a)
        done = self.assertTerminated(self.wait_job(j["ident"], timeout=30))
        out = json.loads(done["response"])
        self.assertEqual((out["version"], out["rebooted"]), ("2.0", True))
        self.assertEqual(out["installed"], hashlib.sha256(data).hexdigest())
        self.assertIsNone(read(rolled))
        # the same update on a device that comes back sick: rolled back, into the old version
        with open(cur, "w") as f:
            f.write("1.0\n")
        os.unlink(healthy)
        j = self.post_job(task, a, {"reboot": True})
        self.wait_stopped(a)
        self.restart(a, online=False)
        self.wait_stopped(a)  # the reboot into the old version, after the final report
        done = self.assertEdgeError(self.wait_job(j["ident"], timeout=30), "health check failed")
        self.assertEqual(done["error_code"], "rolled_back")
        self.assertEqual(read(rolled), "rollback\n")
        self.assertEqual(read(cur), "1.0\n")
        self.assertEqual(self.reps(j["ident"])[-1].get("phase"), "verify")
        self.restart(a)


if __name__ == "__main__":
    unittest.main(verbosity=2)
