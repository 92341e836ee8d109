#!/usr/bin/env python3
"""Integration tests of the rcs-coordinator command line (docs/coordinator.md): --help,
--version, init, key create/revoke, serve failures, SIGTERM, and a kill -9 during
concurrent job creation followed by a restart on the same database."""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unittest
import uuid

from rcs_fixture import StackTest
from rcs_harness import (AGENT, COORDINATOR, SCRIPTS_DIR, Agent, Coordinator, Mosquitto,
                         free_port, http, is_uuid, list_all, run_cli, wait_for)


class CliTest(StackTest):
    workdir_prefix = "rcs-cli-"

    def setUp(self):
        self.coords = []

    def tearDown(self):
        for c in self.coords:
            if c.alive():
                c.stop(signal.SIGKILL)

    def db(self, name):
        return os.path.join(self.workdir, name + ".db")

    def start(self, db, extra_args=()):
        c = Coordinator(self.workdir, extra_args=extra_args, db=db)
        self.coords.append(c)
        return c.start()

    def assertMessage(self, out, err):
        self.assertTrue((out + err).strip(), "no message on stdout or stderr")

    def serve_fails(self, *args):
        p = subprocess.Popen([COORDINATOR, "serve", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("serve %s did not exit" % " ".join(args))
        self.assertNotEqual(p.returncode, 0, (out, err))
        self.assertMessage(out, err)
        return out + err

    # -- help / version -------------------------------------------------------------------

    def test_help(self):
        rc, out, err = run_cli("--help", check=False)
        self.assertEqual(rc, 0, err)
        self.assertIn("usage", out.lower())
        for word in ("serve", "init", "key"):
            self.assertIn(word, out)

    def test_version(self):
        rc, out, err = run_cli("--version", check=False)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"\d+\.\d+\.\d+")

    def test_bad_command_line(self):
        for args in (("frobnicate",), ("--no-such-flag",), ("serve", "--no-such-flag"),
                     ("init",), ("key", "create", "--db", self.db("nokey")),
                     ("serve", "--config"), ("serve", "--db"), ("init", "--db"),
                     ("serve", "--config", self.db("no-such-config"))):
            with self.subTest(args=args):
                rc, out, err = run_cli(*args, check=False)
                self.assertGreater(rc, 0, "refused by an exit code, not killed by a signal")
                self.assertMessage(out, err)

    # -- init / keys ----------------------------------------------------------------------

    def test_init(self):
        db = self.db("init")
        rc, out, err = run_cli("init", "--db", db, "--user", "alice")
        t1 = json.loads(out)
        self.assertTrue(is_uuid(t1["client_root"]), t1)
        self.assertIsInstance(t1["api_key"], str)
        self.assertGreaterEqual(len(t1["api_key"]), 16)

        root = str(uuid.uuid4())
        rc, out, err = run_cli("init", "--db", db, "--client-root", root, "--user", "bob")
        t2 = json.loads(out)
        self.assertEqual(t2["client_root"], root)
        self.assertNotEqual(t2["api_key"], t1["api_key"])

        rc, out, err = run_cli("init", "--db", db, "--user", "carol")
        t3 = json.loads(out)
        self.assertNotIn(t3["client_root"], (t1["client_root"], root))

        rc, out, err = run_cli("init", "--db", db, "--client-root", "not-a-uuid", "--user", "d",
                               check=False)
        self.assertNotEqual(rc, 0)
        self.assertMessage(out, err)

        # The keys are admin keys of their tenants; created_user is the init user.
        c = self.start(db)
        for t, user in ((t1, "alice"), (t2, "bob")):
            api = c.api(t["api_key"])
            r = api.post("/tasks", {"name": "t", "script": "echo"})
            self.assertEqual(r.status, 201, r)
            self.assertEqual(r.json["client_root"], t["client_root"])
            self.assertEqual(r.json["created_user"], user)
            self.assertEqual(len(list_all(api, "/tasks")), 1)
        self.assertEqual(c.stop(), 0)

    def test_key_create_and_revoke(self):
        db = self.db("keys")
        t = json.loads(run_cli("init", "--db", db, "--user", "admin")[1])
        rc, out, err = run_cli("key", "create", "--db", db, "--client-root", t["client_root"],
                               "--user", "vera", "--role", "viewer")
        k = json.loads(out)
        self.assertTrue(is_uuid(k["ident"]), k)
        self.assertIsInstance(k["api_key"], str)
        self.assertNotEqual(k["api_key"], t["api_key"])

        for role in ("root", "", "Admin"):
            with self.subTest(role=role):
                rc, out, err = run_cli("key", "create", "--db", db, "--client-root",
                                       t["client_root"], "--user", "x", "--role", role,
                                       check=False)
                self.assertNotEqual(rc, 0)
                self.assertMessage(out, err)
        rc, out, err = run_cli("key", "create", "--db", db, "--client-root", str(uuid.uuid4()),
                               "--user", "x", "--role", "viewer", check=False)
        self.assertNotEqual(rc, 0, out)
        self.assertMessage(out, err)

        c = self.start(db)
        vera = c.api(k["api_key"])
        self.assertEqual(vera.get("/tasks").status, 200)
        self.assertEqual(vera.post("/tasks", {"name": "x", "script": "echo"}).status, 403)
        run_cli("key", "revoke", "--db", db, "--ident", k["ident"])
        self.assertEqual(vera.get("/tasks").status, 401)
        self.assertEqual(c.api(t["api_key"]).get("/tasks").status, 200)
        self.assertEqual(c.stop(), 0)

    # -- serve ----------------------------------------------------------------------------

    def test_serve_unwritable_db(self):
        blocker = os.path.join(self.workdir, "a-file")
        with open(blocker, "w") as f:
            f.write("not a directory\n")
        self.serve_fails("--db", os.path.join(blocker, "rcs.db"), "--listen",
                         "127.0.0.1:%d" % free_port(), "--scripts-dir", SCRIPTS_DIR)

    def test_serve_port_in_use(self):
        db = self.db("busy")
        run_cli("init", "--db", db, "--user", "admin")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            msg = self.serve_fails("--db", db, "--listen", "127.0.0.1:%d" % port,
                                   "--scripts-dir", SCRIPTS_DIR)
        self.assertIn("cannot listen on 127.0.0.1:%d: the address is in use" % port, msg)

    def test_second_coordinator_on_a_busy_port_fails(self):
        """Two coordinators never share a port (no SO_REUSEPORT): the second one says the
        port is taken and exits, the first one goes on answering alone."""
        first, second = self.db("first"), self.db("second")
        key = json.loads(run_cli("init", "--db", first, "--user", "admin")[1])["api_key"]
        run_cli("init", "--db", second, "--user", "admin")
        broker = Mosquitto(self.workdir)
        broker.start()
        self.addCleanup(broker.stop)
        c = self.start(first, ["--mqtt", broker.url])
        wait_for(lambda: "status reports: " in c.read_log(), what="first coordinator connected")
        msg = self.serve_fails("--db", second, "--listen", "127.0.0.1:%d" % c.port,
                               "--scripts-dir", SCRIPTS_DIR, "--mqtt", broker.url)
        self.assertIn("cannot listen on 127.0.0.1:%d: the address is in use" % c.port, msg)
        self.assertNotIn("port 0", msg)
        api = c.api(key)
        for _ in range(20):
            self.assertEqual(api.get("/tasks").status, 200)
        # the second one never reached the broker: it would have taken over the first one's
        # session (same client id) and cut it off
        self.assertNotIn("lost", c.read_log())
        self.assertEqual(c.stop(), 0)
        # the same port is free again at once for a restart, its closed connections in
        # TIME_WAIT notwithstanding (SO_REUSEADDR)
        c.start()
        self.assertEqual(api.get("/tasks").status, 200)

    def test_serve_bad_listen(self):
        db = self.db("badlisten")
        run_cli("init", "--db", db, "--user", "admin")
        self.serve_fails("--db", db, "--listen", "not-an-address", "--scripts-dir", SCRIPTS_DIR)

    def test_serve_check(self):
        # --check loads the configuration and keys, refuses what serve would refuse, and
        # exits without touching the database or the broker
        db = self.db("check")
        port = free_port()
        args = ["serve", "--check", "--db", db, "--listen", "127.0.0.1:%d" % free_port()]
        for url in ("tcp://127.0.0.1:%d" % port, "mqtt://127.0.0.1:%d" % port):
            rc, out, err = run_cli(*args, "--mqtt", url, check=False)
            self.assertEqual((rc, out.strip()), (0, "configuration OK"), err)
        for url in ("http://127.0.0.1:%d" % port, "127.0.0.1:%d" % port):
            with self.subTest(url=url):
                rc, out, err = run_cli(*args, "--mqtt", url, check=False)
                self.assertEqual(rc, 2, (out, err))
                self.assertIn("MQTT URL %s: expected tcp://" % url, err)
                self.assertNotIn("configuration OK", out)
        self.assertFalse(os.path.exists(db))

    def test_sigterm_exits_zero(self):
        db = self.db("sigterm")
        t = json.loads(run_cli("init", "--db", db, "--user", "admin")[1])
        c = self.start(db)
        self.assertEqual(c.api(t["api_key"]).get("/tasks").status, 200)
        self.assertEqual(c.stop(signal.SIGTERM), 0)

    # -- crash ----------------------------------------------------------------------------

    def test_kill9_during_job_creation(self):
        db = self.db("crash")
        t = json.loads(run_cli("init", "--db", db, "--user", "admin")[1])
        c = self.start(db)
        api = c.api(t["api_key"])
        r = api.post("/tasks", {"name": "crash", "script": "echo"})
        self.assertEqual(r.status, 201, r)
        task = r.json["ident"]
        devices = []
        for i in range(4):
            r = api.post("/devices", {"name": "d%d" % i, "tags": []})
            self.assertEqual(r.status, 201, r)
            devices.append(r.json["entity_ident"])

        created = []
        lock = threading.Lock()
        first = threading.Event()
        start = threading.Barrier(21)

        def create(i):
            start.wait()
            try:
                r = http("POST", "%s/tasks/%s/jobs" % (c.base, task),
                         body={"entity_ident": devices[i % 4], "comment": "c%d" % i},
                         headers={"api-key": t["api_key"]}, timeout=10)
                if r.status == 201:
                    with lock:
                        created.append(r.json["ident"])
                    first.set()
            except Exception:  # noqa: BLE001 - the server is killed under it
                pass

        threads = [threading.Thread(target=create, args=(i,)) for i in range(20)]
        for th in threads:
            th.start()
        start.wait()
        first.wait(timeout=10)
        self.assertEqual(c.stop(signal.SIGKILL), -signal.SIGKILL)
        for th in threads:
            th.join(timeout=30)
        with lock:
            answered = list(created)

        p = subprocess.run(["sqlite3", db, "PRAGMA integrity_check"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")

        c2 = self.start(db)
        api = c2.api(t["api_key"])
        jobs = list_all(api, "/jobs")
        idents = [j["ident"] for j in jobs]
        for ident in answered:
            self.assertIn(ident, idents, "a job answered 201 is lost after kill -9")
        self.assertLessEqual(len(jobs), 20)
        for j in jobs:
            self.assertEqual(j["task"]["ident"], task)
            r = api.get("/jobs/%s/history" % j["ident"])
            self.assertEqual(r.status, 200, r)
            statuses = [i["status"] for i in r.json["items"]]
            self.assertIn("initial", statuses, j["ident"])
            self.assertIn("pending", statuses, j["ident"])
            self.assertEqual(statuses[0], j["status"])
            self.assertEqual(statuses[-1], "initial")
        # The restarted server works normally.
        r = api.post("/tasks/%s/jobs" % task, {"entity_ident": devices[0]})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(c2.stop(), 0)
        p = subprocess.run(["sqlite3", db, "PRAGMA integrity_check"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.stdout.strip(), "ok")
        print("\nkill -9: %d of 20 jobs answered before the kill, %d stored" % (
            len(answered), len(jobs)))


class BrokerPasswordTest(StackTest):
    """Both daemons against a mosquitto that requires a user name and password
    (allow_anonymous false, password_file): the password from --mqtt-password-file or
    RCS_MQTT_PASSWORD authenticates, and neither /proc/PID/cmdline nor /proc/PID/environ
    of the daemons (nor of the agent's sandbox launcher) shows it; a secret file that
    can't be used stops the daemon at start with the option and the file named."""

    workdir_prefix = "rcs-secrets-"
    COORD_PW = "coord pw 1"
    DEV_PW = "dev pw 2"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        pwfile = os.path.join(cls.workdir, "mosquitto.passwd")
        for i, (user, pw) in enumerate((("coord", cls.COORD_PW), ("dev", cls.DEV_PW))):
            subprocess.run(["mosquitto_passwd", "-b"] + (["-c"] if i == 0 else []) +
                           [pwfile, user, pw], check=True, capture_output=True, timeout=30)
        cls.start_broker(persistence=False,
                         extra_conf="allow_anonymous false\npassword_file %s\n" % pwfile)
        cls.coord_pwfile = cls.secret("coord.pw", cls.COORD_PW + "\n")
        cls.dev_pwfile = cls.secret("dev.pw", cls.DEV_PW + "\n")

    @classmethod
    def secret(cls, name, text):
        path = os.path.join(cls.workdir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.alive():
                p.stop(signal.SIGKILL)

    def env(self, **kw):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCS_MQTT_")}
        env.update(kw)
        return env

    def coordinator(self, name, args, env=None):
        c = Coordinator(self.workdir, db=os.path.join(self.workdir, name + ".db"), env=env,
                        extra_args=["--mqtt", self.broker.url, "--mqtt-client-id", name,
                                    "--mqtt-username", "coord", *args])
        c.init_tenant()
        self.procs.append(c)
        return c.start()

    def agent(self, name, args, env=None):
        a = Agent(self.workdir, self.broker.url, str(uuid.uuid4()), str(uuid.uuid4()),
                  name=name, env=env,
                  extra_args=["--require-signature", "false", "--mqtt-username", "dev", *args])
        self.procs.append(a)
        return a.start()

    def assertConnected(self, proc):
        wait_for(lambda: "connected to " + self.broker.url in proc.read_log(), timeout=20,
                 what="connected to the broker")
        self.assertNotIn("not authori", proc.read_log())

    def assertHidden(self, pid, secret):
        """The secret is neither in the command line nor in the environment of pid and
        its children (the agent's sandbox launcher)."""
        pids = [pid]
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            pids += [int(x) for x in f.read().split()]
        for p in pids:
            for what in ("cmdline", "environ"):
                with open("/proc/%d/%s" % (p, what), "rb") as f:
                    self.assertNotIn(secret.encode(), f.read(), "%s of %d" % (what, p))

    def test_coordinator_password_from_file(self):
        c = self.coordinator("coord-file", ["--mqtt-password-file", self.coord_pwfile])
        self.assertConnected(c)
        self.assertHidden(c.proc.pid, self.COORD_PW)
        self.assertNotIn("visible to every user", c.read_log())

    def test_coordinator_password_from_environment(self):
        c = self.coordinator("coord-env", [], env=self.env(RCS_MQTT_PASSWORD=self.COORD_PW))
        self.assertConnected(c)
        self.assertHidden(c.proc.pid, self.COORD_PW)

    def test_coordinator_password_flag_warns(self):
        c = self.coordinator("coord-flag", ["--mqtt-password", self.COORD_PW])
        self.assertConnected(c)
        self.assertIn("--mqtt-password on the command line is visible to every user"
                      " of this host", c.read_log())
        self.assertIn("use --mqtt-password-file FILE", c.read_log())

    def test_agent_password_from_file(self):
        a = self.agent("agent-file", ["--mqtt-password-file", self.dev_pwfile])
        self.assertConnected(a)
        self.assertHidden(a.pid, self.DEV_PW)
        self.assertNotIn("visible to every user", a.read_log())

    def test_agent_password_from_environment(self):
        a = self.agent("agent-env", [], env=self.env(RCS_MQTT_PASSWORD=self.DEV_PW))
        self.assertConnected(a)
        self.assertHidden(a.pid, self.DEV_PW)

    def test_wrong_password_refused(self):
        # the check of the checks: a wrong password from the file is not let in
        wrong = self.secret("wrong.pw", "not the password\n")

        def refused():
            with open(self.broker.log_path, "rb") as f:
                return f.read().count(b"not authorised")

        before = refused()
        a = self.agent("agent-wrong", ["--mqtt-password-file", wrong])
        wait_for(lambda: refused() > before, timeout=20, what="the broker refusing the agent")
        self.assertNotIn("connected to " + self.broker.url, a.read_log())

    def test_bad_secret_files(self):
        empty = self.secret("empty.pw", "")
        newline = self.secret("newline.pw", "\n")
        missing = os.path.join(self.workdir, "missing.pw")
        agent_args = [AGENT, "--mqtt", self.broker.url, "--client-root", str(uuid.uuid4()),
                      "--entity-ident", str(uuid.uuid4()), "--state-dir",
                      os.path.join(self.workdir, "bad-state"), "--require-signature", "false"]
        coord_args = [COORDINATOR, "serve", "--check", "--db",
                      os.path.join(self.workdir, "bad.db"), "--listen", "127.0.0.1:1"]
        cases = [("--mqtt-password-file", missing, "No such file or directory"),
                 ("--mqtt-password-file", empty, "the file is empty"),
                 ("--mqtt-password-file", newline, "the file is empty"),
                 ("--mqtt-password-file", self.workdir, "Is a directory"),
                 ("--mqtt-key-passphrase-file", missing, "No such file or directory")]
        for argv in (agent_args, coord_args):
            for flag, path, why in cases + ([("--smtp-password-file", empty, "the file is empty")]
                                             if argv is coord_args else []):
                with self.subTest(daemon=os.path.basename(argv[0]), flag=flag, path=path):
                    p = subprocess.run(argv + [flag, path], capture_output=True, text=True,
                                       timeout=30)
                    self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                    self.assertIn("%s %s: %s" % (flag, path, why), p.stderr)
                    self.assertNotIn("configuration OK", p.stdout)
            # both the password and its file
            p = subprocess.run(argv + ["--mqtt-password", "x", "--mqtt-password-file",
                                       self.dev_pwfile], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn("--mqtt-password and --mqtt-password-file: give one of them",
                          p.stderr)
        # in a config file too
        conf = self.secret("agent.conf", "mqtt_password_file %s\n" % missing)
        p = subprocess.run(agent_args + ["--config", conf, "--check"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--mqtt-password-file %s: No such file" % missing, p.stderr)
        # a good file passes --check
        p = subprocess.run(coord_args + ["--mqtt-password-file", self.coord_pwfile],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout), (0, "configuration OK\n"), p.stderr)


if __name__ == "__main__":
    unittest.main()
