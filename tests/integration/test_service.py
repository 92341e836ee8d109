#!/usr/bin/env python3
"""Both daemons as systemd services (docs/deploy.md, "The units", "Logs"), without systemd:

- readiness: each daemon sends READY=1 on $NOTIFY_SOCKET (a datagram socket of the test's,
  as systemd's) only once its database is open, its API listens and its broker is
  connected; with the broker down it waits for it; SIGHUP gives RELOADING=1 then READY=1,
  SIGTERM STOPPING=1 and a clean exit;
- logs: when stderr is the journal ($JOURNAL_STREAM names it), each line carries its
  syslog priority as a "<N>" prefix and no timestamp nor pid; a start that fails is at
  priority err as journald files it (the unit's SyslogLevel= for unprefixed lines), so
  `journalctl -p err` shows it;
- the units as installed: `systemd-analyze verify` finds nothing to say.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. python3 tests/integration/test_service.py
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import uuid

from rcs_fixture import StackTest
from rcs_harness import (AGENT, BIN_DIR, COORDINATOR, SCRIPTS_DIR, Mosquitto, free_port,
                         http)

BUILD_DIR = os.path.dirname(BIN_DIR)


class NotifySocket:
    """A unix datagram socket in the place of systemd's notification socket."""

    def __init__(self, workdir):
        self.path = os.path.join(workdir, "notify-%s.sock" % uuid.uuid4().hex[:8])
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []

    def wait(self, what, timeout):
        """Waits for a message holding the line `what`; returns it or None."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for m in self.messages:
                if what in m.split("\n"):
                    self.messages.remove(m)
                    return m
            self.sock.settimeout(max(0.01, deadline - time.time()))
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass
        return None

    def close(self):
        self.sock.close()
        os.unlink(self.path)


def journal_stream_env(log_file):
    """$JOURNAL_STREAM for a daemon whose stderr is log_file, as systemd sets it."""
    st = os.fstat(log_file.fileno())
    env = dict(os.environ)
    env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    return env


def unit_file(name):
    return os.path.join(BUILD_DIR, "packaging", name)


def unit_setting(name, key):
    with open(unit_file(name)) as f:
        for line in f:
            if line.startswith(key + "="):
                return line.split("=", 1)[1].strip()
    return None


SYSLOG_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5,
                 "info": 6, "debug": 7}


def journal_priorities(text, default):
    """(priority, message) of each line as journald files a stream's lines: a "<N>"
    prefix sets it, other lines get the unit's SyslogLevel=."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^<([0-7])>(.*)$", line)
        out.append((int(m.group(1)), m.group(2)) if m else (default, line))
    return out


class ServiceTest(StackTest):
    workdir_prefix = "rcs-service-"

    def setUp(self):
        self.procs = []
        self.notify = NotifySocket(self.workdir)
        self.addCleanup(self.notify.close)

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def spawn(self, args, log_name, journal=False):
        log = open(os.path.join(self.workdir, log_name), "w+b")
        self.addCleanup(log.close)
        env = journal_stream_env(log) if journal else dict(os.environ)
        env.pop("JOURNAL_STREAM", None) if not journal else None
        env["NOTIFY_SOCKET"] = self.notify.path
        p = subprocess.Popen(args, stdout=log, stderr=log, env=env)
        self.procs.append(p)
        return p, log

    def new_broker(self, port=None):
        b = Mosquitto(self.workdir, persistence=False)
        if port:
            b.port = port
            b.url = "tcp://127.0.0.1:%d" % port
            with open(b.conf) as f:
                conf = f.read()
            with open(b.conf, "w") as f:
                f.write(re.sub(r"listener \d+", "listener %d" % port, conf))
        self.addCleanup(b.stop)
        return b

    def coordinator(self, mqtt_url, journal=False):
        port = free_port()
        db = os.path.join(self.workdir, "rcs-%d.db" % port)
        args = [COORDINATOR, "serve", "--db", db, "--listen", "127.0.0.1:%d" % port,
                "--scripts-dir", SCRIPTS_DIR]
        if mqtt_url:
            args += ["--mqtt", mqtt_url]
        p, log = self.spawn(args, "coordinator-%d.log" % port, journal)
        return p, log, "http://127.0.0.1:%d/v3/commands" % port

    def stop(self, p):
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=15), 0)

    def test_coordinator_ready_after_broker(self):
        """No READY=1 while the broker is down; READY=1 once it is up, with the API
        answering and the broker connected; SIGHUP reloads, SIGTERM stops."""
        port = free_port()
        p, log, base = self.coordinator("tcp://127.0.0.1:%d" % port)
        self.assertIsNone(self.notify.wait("READY=1", 3), "ready without a broker")
        self.assertIsNone(p.poll())
        self.new_broker(port).start()
        self.assertIsNotNone(self.notify.wait("READY=1", 20), "no READY=1 after the broker")
        r = http("GET", base + "/health")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json["broker"], "connected")
        p.send_signal(signal.SIGHUP)
        self.assertIsNotNone(self.notify.wait("RELOADING=1", 10))
        self.assertIsNotNone(self.notify.wait("READY=1", 10))
        p.send_signal(signal.SIGTERM)
        self.assertIsNotNone(self.notify.wait("STOPPING=1", 10))
        self.assertEqual(p.wait(timeout=15), 0)

    def test_coordinator_ready_without_mqtt(self):
        """Without --mqtt: ready once the database is open and the API listens."""
        p, log, base = self.coordinator(None)
        self.assertIsNotNone(self.notify.wait("READY=1", 20))
        self.assertEqual(http("GET", base + "/health").json["broker"], "none")
        self.stop(p)

    def test_agent_ready_after_broker(self):
        port = free_port()
        state = os.path.join(self.workdir, "agent-%d" % port)
        p, log = self.spawn([AGENT, "--mqtt", "tcp://127.0.0.1:%d" % port,
                             "--client-root", str(uuid.uuid4()),
                             "--entity-ident", str(uuid.uuid4()), "--state-dir", state,
                             "--require-signature", "false"], "agent-%d.log" % port)
        self.assertIsNone(self.notify.wait("READY=1", 3), "ready without a broker")
        self.assertTrue(os.path.exists(os.path.join(state, "journal.db")))
        self.new_broker(port).start()
        self.assertIsNotNone(self.notify.wait("READY=1", 20), "no READY=1 after the broker")
        p.send_signal(signal.SIGHUP)
        self.assertIsNotNone(self.notify.wait("RELOADING=1", 10))
        self.assertIsNotNone(self.notify.wait("READY=1", 10))
        p.send_signal(signal.SIGTERM)
        self.assertIsNotNone(self.notify.wait("STOPPING=1", 10))
        self.assertEqual(p.wait(timeout=15), 0)

    def test_journal_priorities(self):
        """On the journal: "<6>info: ..." lines, no timestamp nor pid."""
        p, log, base = self.coordinator(None, journal=True)
        self.assertIsNotNone(self.notify.wait("READY=1", 20))
        self.stop(p)
        log.seek(0)
        lines = log.read().decode().splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^<[0-7]>(error|warning|info|debug): \w+: ")
        self.assertTrue(any(line.startswith("<6>info: ") and "serving" in line
                            for line in lines), lines)

    def test_not_journal_keeps_timestamps(self):
        """stderr elsewhere (a file, a terminal): time, program and pid on each line, even
        with a $JOURNAL_STREAM that names another file (inherited from a shell)."""
        port = free_port()
        log = open(os.path.join(self.workdir, "plain-%d.log" % port), "w+b")
        self.addCleanup(log.close)
        env = dict(os.environ, JOURNAL_STREAM="1:1")
        r = subprocess.run([COORDINATOR, "serve", "--db", os.path.join(self.workdir, "no", "x.db"),
                            "--listen", "127.0.0.1:%d" % port], stdout=log, stderr=log,
                           env=env, timeout=30)
        self.assertEqual(r.returncode, 1)
        log.seek(0)
        text = log.read().decode()
        self.assertRegex(text, r"(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z rcs-coordinator\[\d+\]: warning: ")

    def test_failed_start_is_an_error_in_the_journal(self):
        """A coordinator that can't open its database: `journalctl -p err` shows why."""
        level = unit_setting("rcs-coordinator.service", "SyslogLevel")
        self.assertIsNotNone(level, "the unit sets no SyslogLevel=")
        port = free_port()
        log = open(os.path.join(self.workdir, "fail-%d.log" % port), "w+b")
        self.addCleanup(log.close)
        r = subprocess.run([COORDINATOR, "serve", "--db",
                            os.path.join(self.workdir, "missing", "rcs.db"),
                            "--listen", "127.0.0.1:%d" % port], stdout=log, stderr=log,
                           env=journal_stream_env(log), timeout=30)
        self.assertEqual(r.returncode, 1)
        log.seek(0)
        lines = journal_priorities(log.read().decode(), SYSLOG_LEVELS[level])
        errors = [m for prio, m in lines if prio <= 3]
        self.assertTrue(any("cannot open database" in m for m in errors), lines)
        # the agent's unit files its unprefixed lines the same way
        self.assertEqual(unit_setting("rcs-agent.service", "SyslogLevel"), level)

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze not installed")
    def test_units_verify(self):
        """The units as `cmake --install` puts them, checked by systemd-analyze verify
        against the installed binaries (a DESTDIR as the root)."""
        root = tempfile.mkdtemp(prefix="root-", dir=self.workdir)
        r = subprocess.run(["cmake", "--install", BUILD_DIR],
                           env=dict(os.environ, DESTDIR=root), capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # the unit's other commands and the system's targets, as on any system
        os.makedirs(os.path.join(root, "bin"), exist_ok=True)
        shutil.copy("/bin/sh", os.path.join(root, "bin", "sh"))  # ExecReload's shell
        sysunits = os.path.join(root, "lib", "systemd", "system")
        os.makedirs(sysunits, exist_ok=True)
        for d in ("/lib/systemd/system", "/usr/lib/systemd/system"):
            for f in os.listdir(d) if os.path.isdir(d) else ():
                if f.endswith(".target") and not os.path.exists(os.path.join(sysunits, f)):
                    shutil.copy(os.path.join(d, f), os.path.join(sysunits, f))
        units = {}
        for d, _, files in os.walk(root):
            for f in files:
                if f.endswith(".service"):
                    units[f] = os.path.join(d, f)
        self.assertEqual(sorted(units), ["rcs-agent.service", "rcs-coordinator.service"])
        for unit, path in sorted(units.items()):
            r = subprocess.run(["systemd-analyze", "verify", "--root", root,
                                "--man=no", path], capture_output=True, text=True, timeout=60)
            self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""), unit)


if __name__ == "__main__":
    unittest.main(verbosity=2)
