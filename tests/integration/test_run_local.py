#!/usr/bin/python3
"""tools/run-local.sh, the README's command that runs the service, as a user runs it: it
builds (here into a build directory of its own, RCS_BUILD_DIR), starts mosquitto, the
coordinator on SQLite and an agent, sends a first job that ends `terminated`; the options
given to it reach `rcs-coordinator serve`; and when one of its daemons dies it says which,
stops the others and exits 1 rather than waiting on a stack that is no longer whole.

Run (Debian's python3): RCS_BIN_DIR is not used: the script builds its own programs.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

from rcs_harness import SOURCE_DIR, free_port, wait_for


def pids_of(name, marker):
    """Processes whose command line starts with a program called name and names marker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).decode(errors="replace") == name and \
                any(marker.encode() in a for a in argv):
            found.append(int(pid))
    return found


class RunLocalTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="rcs-run-local-")
        self.run_dir = os.path.join(self.work, "run")
        self.out_path = os.path.join(self.work, "out.txt")
        self.proc = None

    def tearDown(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for name in ("rcs-coordinator", "rcs-agent", "mosquitto"):
            for pid in pids_of(name, self.work):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.work, ignore_errors=True)

    def output(self):
        with open(self.out_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def test_first_job_options_and_a_daemon_that_dies(self):
        port, metrics = free_port(), free_port()
        env = dict(os.environ, RCS_PORT=str(port), RCS_RUN_DIR=self.run_dir,
                   RCS_BUILD_DIR=os.path.join(self.work, "build"))
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(
                [os.path.join(SOURCE_DIR, "tools", "run-local.sh"),
                 "--metrics-listen", "127.0.0.1:%d" % metrics],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        wait_for(lambda: "Press Ctrl-C to stop." in self.output() or
                 self.proc.poll() is not None, timeout=540, interval=0.5,
                 what="run-local.sh's stack up")
        text = self.output()
        self.assertIsNone(self.proc.poll(), text[-3000:])
        self.assertRegex(text, r'"status":"terminated"')
        self.assertIn("hello from the device", text)
        self.assertIn("(files in %s/)" % self.run_dir, text)
        # the option given to the script reached the coordinator
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics,
                                      timeout=10).read().decode()
        self.assertIn("rcs_", body)
        # the coordinator dies: the script notices, says which and why, and ends 1
        coordinators = pids_of("rcs-coordinator", self.run_dir)
        self.assertEqual(len(coordinators), 1, coordinators)
        os.kill(coordinators[0], signal.SIGKILL)
        self.assertEqual(self.proc.wait(60), 1)
        text = self.output()
        self.assertIn("rcs-coordinator stopped (exit status 137); the end of %s/coordinator.log"
                      % self.run_dir, text)
        self.assertIn("stopped", text.splitlines()[-1])
        # and it stopped the others of its stack
        deadline = time.time() + 10
        while time.time() < deadline and (pids_of("rcs-agent", self.run_dir) or
                                          pids_of("mosquitto", self.run_dir)):
            time.sleep(0.2)
        self.assertEqual(pids_of("rcs-agent", self.run_dir), [])
        self.assertEqual(pids_of("mosquitto", self.run_dir), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
