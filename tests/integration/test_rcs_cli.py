#!/usr/bin/env python3
"""Integration tests of `rcs`, the operator's command line (docs/cli.md), against a real
stack: mosquitto, rcs-coordinator and real rcs-agents on free loopback ports.

Every subcommand, its exit codes (0 done, 1 failed, 2 usage, 3 API or connection error),
--json against the API's own answer, the configuration (flags, environment, config file),
bad input (a wrong key, an API that is down or silent, a value of the wrong type), `watch`
in a pseudo-terminal and without one, and the bash completion."""

import fcntl
import hashlib
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import tempfile
import termios
import time
import unittest
import uuid

from rcs_fixture import StackTest
from rcs_harness import BIN_DIR, SOURCE_DIR, Agent, Watcher, free_port, make_ec_keypair, wait_for

RCS = os.path.join(BIN_DIR, "rcs")
COMPLETION = os.path.join(SOURCE_DIR, "contrib", "bash-completion", "rcs")

# A script that sleeps `delay` seconds, then fails when `fail` is true, else answers "ok"
SLEEPY = """local d = rcs.variables.delay or 0
if d > 0 then rcs.sleep(d) end
if rcs.variables.fail then error("asked to fail") end
return "ok"
"""

SUBCOMMANDS = [("tasks", "list"), ("tasks", "show"), ("tasks", "create"),
               ("scripts", "list"), ("scripts", "show"), ("scripts", "put"),
               ("devices", "list"), ("devices", "show"), ("devices", "create"),
               ("devices", "tag"), ("jobs", "list"), ("jobs", "show"), ("jobs", "history"),
               ("jobs", "cancel"), ("groups", "list"), ("groups", "show"),
               ("groups", "pause"), ("groups", "resume"), ("groups", "cancel"),
               ("send",), ("watch",), ("tasks", "update"), ("tasks", "activate"),
               ("tasks", "deactivate"), ("devices", "rename"), ("devices", "delete"),
               ("keys", "list"), ("keys", "create"), ("keys", "revoke"),
               ("webhooks", "list"), ("webhooks", "create"), ("webhooks", "show"),
               ("webhooks", "update"), ("webhooks", "delete"), ("webhooks", "deliveries"),
               ("audit",), ("artifacts", "upload"), ("artifacts", "list"),
               ("artifacts", "show"), ("artifacts", "rm")]


class RcsCliTest(StackTest):
    workdir_prefix = "rcs-cli-"
    check_coordinator = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        key, cls.pub = make_ec_keypair(cls.workdir)
        # webhooks to a receiver on this host (rcs webhooks)
        cls.start_stack(key, coord_args=["--webhook-allow-net", "127.0.0.1/32",
                                         "--webhook-retry-base", "1"])
        cls.key = cls.admin_key
        cls.viewer_key = cls.coord.create_key(cls.client_root, "val", "viewer")["api_key"]
        cls.url = "http://127.0.0.1:%d" % cls.coord.port
        cls.api = cls.admin
        # three devices with agents: two on site-a, one on site-b
        cls.devices = {}
        for name, tag in (("pump-1", "site-a"), ("pump-2", "site-a"), ("pump-3", "site-b")):
            rec = cls.api.post("/devices", {"name": name, "tags": [tag]}).json
            cls.devices[name] = rec["entity_ident"]
            a = Agent(cls.workdir, cls.broker.url, cls.client_root, rec["entity_ident"],
                      trusted_keys=[cls.pub], name=name)
            cls.agents.append(a)
            a.start()
        for ident in cls.devices.values():
            wait_for(lambda: cls.api.get("/devices/" + ident).json.get("online") is True,
                     timeout=20, what="device %s online" % ident)
        assert cls.api.put("/scripts/sleepy", {"source": SLEEPY}).status == 201
        cls.task = cls.api.post("/tasks", {
            "name": "Sleepy", "script": "sleepy", "timeout": 60,
            "variables_info": {"delay": {"type": "integer", "optional": True},
                               "fail": {"type": "boolean", "optional": True}}}).json
        cls.echo = cls.api.post("/tasks", {
            "name": "Echo", "script": "echo",
            "variables_info": {"message": {"type": "string", "optional": True}}}).json

    # -- helpers -------------------------------------------------------------------------

    def env(self, **kw):
        """The environment rcs runs in: this stack's URL and key, a HOME without a
        config; kw adds (value None: removes) variables."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("RCS_")}
        e.update(RCS_URL=self.url, RCS_API_KEY=self.key, HOME=self.workdir, TERM="dumb")
        e.pop("XDG_CONFIG_HOME", None)
        for k, v in kw.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def rcs(self, *args, code=0, env=None, stdin=None, timeout=60):
        """Runs rcs with args; asserts its exit code; returns (stdout, stderr)."""
        p = subprocess.run([RCS, *args], capture_output=True, text=True, timeout=timeout,
                           env=env or self.env(), input=stdin)
        self.assertEqual(p.returncode, code, "rcs %s: exit %d, expected %d\nstdout: %s\n"
                         "stderr: %s" % (" ".join(args), p.returncode, code, p.stdout,
                                         p.stderr))
        return p.stdout, p.stderr

    def rcs_json(self, *args, **kw):
        out, _ = self.rcs(*args, "--json", **kw)
        return json.loads(out)

    def api_get(self, path):
        r = self.api.get(path)
        self.assertEqual(r.status, 200, r)
        return r.json

    def device(self, name, tags=()):
        return self.api.post("/devices", {"name": name, "tags": list(tags)}).json

    # -- help, usage, configuration --------------------------------------------------------

    def test_help_of_every_subcommand(self):
        out, _ = self.rcs("--help")
        for words in SUBCOMMANDS:
            self.assertIn(" ".join(words), out)
            sub, _ = self.rcs(*words, "--help", env=self.env(RCS_URL=None, RCS_API_KEY=None))
            self.assertTrue(sub.startswith("usage: rcs %s" % " ".join(words)), sub)
            self.assertIn("--json", sub)
        out, _ = self.rcs("tasks", "--help")
        self.assertIn("create", out)
        self.assertIn("rcs ", self.rcs("--version")[0])

    def test_usage_errors_exit_2(self):
        for args, msg in (((), "usage: rcs"),
                          (("frobnicate",), "unknown command 'frobnicate'"),
                          (("tasks",), "which action?"),
                          (("tasks", "lst"), "unknown action 'lst'"),
                          (("tasks", "list", "--bogus"), "unknown option '--bogus'"),
                          (("tasks", "show"), "missing arguments"),
                          (("jobs", "show", "a", "b"), "too many arguments"),
                          (("tasks", "list", "--per-page", "501"), "per_page"),
                          (("tasks", "list", "--page"), "needs a value"),
                          (("send", "Echo"), "--device DEVICE"),
                          (("send", "Echo", "--device", "x", "--tag", "y"), "--device DEVICE"),
                          (("send", "Echo", "--tag", "a", "--tag", "b"), "one tag"),
                          (("send", "Echo", "--tag", "a", "--schedule", "soon"), "not a time"),
                          (("send", "Echo", "--tag", "a", "--retries", "x"), "retries"),
                          (("devices", "list", "--online", "maybe"), "true or false"),
                          (("devices", "tag", "pump-1"), "--add TAG or --remove TAG")):
            _, err = self.rcs(*args, code=2)
            self.assertIn(msg, err, args)

    def test_configuration_sources(self):
        # nothing says where the API is: usage
        _, err = self.rcs("tasks", "list", code=2, env=self.env(RCS_URL=None))
        self.assertIn("no API URL", err)
        _, err = self.rcs("tasks", "list", code=2, env=self.env(RCS_API_KEY=None))
        self.assertIn("no API key", err)
        # the config file in ~/.config/rcs/config, in the format of docs/cli.md
        home = tempfile.mkdtemp(dir=self.workdir)
        os.makedirs(os.path.join(home, ".config", "rcs"))
        conf = os.path.join(home, ".config", "rcs", "config")
        with open(conf, "w") as f:
            f.write("# rcs\nurl %s\napi_key %s\ntimeout 5\n" % (self.url, self.key))
        os.chmod(conf, 0o600)
        e = self.env(RCS_URL=None, RCS_API_KEY=None, HOME=home)
        out, err = self.rcs("tasks", "list", env=e)
        self.assertIn("Sleepy", out)
        self.assertEqual(err, "")
        # the environment wins over the file, the flag over both
        _, err = self.rcs("tasks", "list", code=3,
                          env=self.env(HOME=home, RCS_API_KEY="rcs_wrong"))
        self.assertIn("unauthorized", err)
        out, _ = self.rcs("--api-key", self.key, "tasks", "list",
                          env=self.env(HOME=home, RCS_API_KEY="rcs_wrong"))
        self.assertIn("Sleepy", out)
        # api_key_file, and a file others may read: a warning
        keyfile = os.path.join(home, "key")
        with open(keyfile, "w") as f:
            f.write(self.key + "\n")
        other = os.path.join(home, "other.conf")
        with open(other, "w") as f:
            f.write("url %s\napi_key_file %s\n" % (self.url, keyfile))
        os.chmod(other, 0o644)
        out, err = self.rcs("tasks", "list", "--config", other,
                            env=self.env(RCS_URL=None, RCS_API_KEY=None))
        self.assertIn("Sleepy", out)
        self.assertIn("others may read it", err)
        # RCS_CONFIG names it too; a bad line is named with file:line
        with open(other, "w") as f:
            f.write("url %s\ncolour blue\n" % self.url)
        _, err = self.rcs("tasks", "list", code=2,
                          env=self.env(RCS_CONFIG=other, RCS_API_KEY=None))
        self.assertIn("%s:2: unknown option 'colour'" % other, err)
        _, err = self.rcs("tasks", "list", "--config", other + ".missing", code=2)
        self.assertIn("No such file", err)
        # a URL that is no URL, a key that can't be one
        _, err = self.rcs("tasks", "list", "--url", "127.0.0.1:1", code=2)
        self.assertIn("http://", err)
        _, err = self.rcs("tasks", "list", "--api-key", "two words", code=2)
        self.assertIn("API key", err)
        # the URL may carry the API's path and a final slash
        out, _ = self.rcs("tasks", "list", "--url", self.url + "/v3/commands/")
        self.assertIn("Sleepy", out)

    # -- bad input: a clear message, never a hang --------------------------------------------

    def test_wrong_key_exit_3_with_api_message(self):
        _, err = self.rcs("tasks", "list", code=3, env=self.env(RCS_API_KEY="rcs_nope"))
        self.assertRegex(err, r"rcs: tasks list: .+ \(unauthorized, HTTP 401\)")

    def test_api_down_exit_3_at_once(self):
        port = free_port()
        t0 = time.time()
        _, err = self.rcs("devices", "list", code=3,
                          env=self.env(RCS_URL="http://127.0.0.1:%d" % port))
        self.assertIn("cannot reach the API at http://127.0.0.1:%d" % port, err)
        self.assertLess(time.time() - t0, 10)

    def test_api_silent_times_out(self):
        # a server that takes the connection and never answers
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        try:
            t0 = time.time()
            _, err = self.rcs("tasks", "list", "--timeout", "2", code=3,
                              env=self.env(RCS_URL="http://127.0.0.1:%d" % s.getsockname()[1]))
            self.assertLess(time.time() - t0, 10)
            self.assertIn("imed out", err)
        finally:
            s.close()

    def test_not_json_answer_exit_3(self):
        # something else than the coordinator on the port (an HTML page)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        import threading

        def serve():
            c, _ = s.accept()
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\n"
                      b"<html></html>")
            c.close()
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        try:
            _, err = self.rcs("tasks", "list",
                              env=self.env(RCS_URL="http://127.0.0.1:%d" % s.getsockname()[1]),
                              code=3)
            self.assertIn("not JSON", err)
        finally:
            th.join(5)
            s.close()

    def test_role_too_weak_exit_3(self):
        _, err = self.rcs("devices", "create", "--name", "x", code=3,
                          env=self.env(RCS_API_KEY=self.viewer_key))
        self.assertIn("forbidden, HTTP 403", err)
        # reading is fine
        self.rcs("devices", "list", env=self.env(RCS_API_KEY=self.viewer_key))

    # -- scripts -----------------------------------------------------------------------------

    def test_scripts_put_show_list(self):
        src = "-- probe\nreturn 'hi'\n"
        path = os.path.join(self.workdir, "probe.lua")
        with open(path, "w") as f:
            f.write(src)
        out, _ = self.rcs("scripts", "put", "probe", path)
        self.assertIn("created script probe", out)
        out, _ = self.rcs("scripts", "show", "probe")
        self.assertEqual(out, src)
        # from stdin, a replacement
        out, _ = self.rcs("scripts", "put", "probe", stdin=src + "-- v2\n")
        self.assertIn("replaced script probe", out)
        self.assertEqual(self.rcs_json("scripts", "show", "probe"),
                         self.api_get("/scripts/probe"))
        self.assertEqual(self.rcs_json("scripts", "list"), self.api_get("/scripts"))
        out, _ = self.rcs("scripts", "list")
        self.assertRegex(out, r"(?m)^probe\s+\d+\s+false")
        self.assertRegex(out, r"(?m)^echo\s+\d+\s+true")
        # a script that does not compile: the API's message and code
        _, err = self.rcs("scripts", "put", "broken", stdin="if x then\n", code=3)
        self.assertIn("does not compile", err)
        self.assertIn("validation_failed, HTTP 400, field source", err)
        _, err = self.rcs("scripts", "show", "nosuch", code=3)
        self.assertIn("not_found, HTTP 404", err)
        _, err = self.rcs("scripts", "put", "x", os.path.join(self.workdir, "nofile"), code=2)
        self.assertIn("No such file", err)

    # -- tasks -------------------------------------------------------------------------------

    def test_tasks_create_list_show(self):
        out, _ = self.rcs("tasks", "create", "--name", "Reboot-" + uuid.uuid4().hex[:6],
                          "--script", "reboot", "--variable", "delay:integer:optional",
                          "--variable", "why:string", "--script-timeout", "20",
                          "--allow-offline", "--constants", '{"k": 1}', "--comment", "c")
        self.assertRegex(out, r"created task Reboot-\w+ \([0-9a-f-]{36}\), version 1")
        ident = out.split("(")[1].split(")")[0]
        t = self.api_get("/tasks/" + ident)
        self.assertEqual(t["variables_info"], {"delay": {"type": "integer", "optional": True},
                                               "why": {"type": "string"}})
        self.assertEqual((t["timeout"], t["allow_offline"], t["constants"], t["comment"]),
                         (20, True, {"k": 1}, "c"))
        self.assertEqual(self.rcs_json("tasks", "show", ident), t)
        self.assertEqual(self.rcs_json("tasks", "list"), self.api_get("/tasks"))
        self.assertEqual(self.rcs_json("tasks", "list", "--per-page", "1", "--page", "2"),
                         self.api_get("/tasks?page=2&per_page=1"))
        # by name
        self.assertEqual(self.rcs_json("tasks", "show", "Sleepy")["ident"], self.task["ident"])
        out, _ = self.rcs("tasks", "show", "Sleepy")
        self.assertRegex(out, r"(?m)^variables\s+delay\?, fail\?$")
        out, _ = self.rcs("tasks", "list", "--name", "Echo")
        self.assertIn(self.echo["ident"][-8:], out)  # its short ident
        self.assertNotIn("Sleepy", out)
        # a body from a file, flags on top; hidden tasks
        body = os.path.join(self.workdir, "task.json")
        with open(body, "w") as f:
            json.dump({"name": "FromFile", "script": "echo", "hide": True}, f)
        h = self.rcs_json("tasks", "create", "--from-file", body, "--comment", "flag")
        self.assertEqual((h["name"], h["hide"], h["comment"]), ("FromFile", True, "flag"))
        self.assertNotIn("FromFile", self.rcs("tasks", "list")[0])
        self.assertIn("FromFile", self.rcs("tasks", "list", "--hidden")[0])
        self.assertEqual(self.rcs_json("tasks", "show", "FromFile")["ident"], h["ident"])
        # what the API refuses: its message, exit 3
        _, err = self.rcs("tasks", "create", "--name", "x", "--script", "echo",
                          "--variable", "v:colour", code=3)
        self.assertIn("field variables_info.v.type", err)
        _, err = self.rcs("tasks", "create", "--script", "echo", code=3)
        self.assertIn("'name'", err)
        _, err = self.rcs("tasks", "create", "--variable", "v", code=2)
        self.assertIn("NAME:TYPE", err)
        _, err = self.rcs("tasks", "create", "--constants", "[1]", code=2)
        self.assertIn("--constants", err)
        _, err = self.rcs("tasks", "show", "NoSuchTask", code=3)
        self.assertIn("no task named 'NoSuchTask'", err)

    def test_table_fits_the_terminal(self):
        # a narrow terminal (COLUMNS is not read: the width comes from the terminal itself)
        out = self.run_pty(["tasks", "list"], cols=60)[1]
        lines = [l for l in out.replace("\r", "").split("\n") if l]
        self.assertTrue(lines and lines[0].startswith("IDENT"), out)
        self.assertTrue(all(len(l) <= 60 for l in lines), lines)
        self.assertIn("~", out)  # something was cut

    def test_tables_at_80_columns(self):
        """Short idents that differ, device names, whole times to the second and statuses:
        in 80 columns, names and responses give way (docs/cli.md "Tables")."""
        dev = self.device("a-pump-with-a-name-longer-than-any-column-ought-to-be")
        jobs = [self.rcs_json("send", "Echo", "--device", "pump-%d" % n, "--var",
                              "message=" + "a long response " * 8, "--wait")
                for n in (1, 2, 3)]
        rc, out = self.run_pty(["jobs", "list", "--per-page", "3"], cols=80)
        self.assertEqual(rc, 0, out)
        lines = [l for l in out.replace("\r", "").split("\n") if l]
        self.assertTrue(all(len(l) <= 80 for l in lines), lines)
        self.assertEqual(lines[0].split()[:3], ["IDENT", "TASK", "DEVICE"])
        rows = lines[1:4]
        shorts = [r.split()[0] for r in rows]
        self.assertEqual(shorts, [j["ident"][-8:] for j in jobs[::-1]])
        for r, n in zip(rows, (3, 2, 1)):
            self.assertRegex(r, r"^[0-9a-f]{8}  Echo +%s pump-%d +terminated +"
                             r"\d\d:\d\d:\d\d  a long" % (self.devices["pump-%d" % n][-8:], n))
        # the jobs show command names the device; the device list shows short idents
        out, _ = self.rcs("jobs", "show", jobs[0]["ident"])
        self.assertRegex(out, r"(?m)^device\s+pump-1 \(%s\)$" % self.devices["pump-1"])
        rc, out = self.run_pty(["devices", "list"], cols=80)
        lines = [l for l in out.replace("\r", "").split("\n") if l]
        self.assertTrue(all(len(l) <= 80 for l in lines), lines)
        self.assertTrue(any(l.startswith(dev["entity_ident"][-8:] + "  a-pump-with")
                            for l in lines), lines)

    def test_short_idents(self):
        """Wherever an ident goes, 6 or more hex digits of its start or its end do, when
        they name one object (docs/cli.md "Short idents")."""
        j = self.rcs_json("send", "Echo", "--device", self.devices["pump-2"][-10:], "--var",
                          "message=short", "--schedule", "+1h")
        self.assertEqual(j["entity_ident"], self.devices["pump-2"])
        job = j["ident"]
        for short in (job[-8:], job[-6:].upper(), job[:24], job[:28].replace("-", ""),
                      job[-17:]):
            self.assertEqual(self.rcs_json("jobs", "show", short)["ident"], job, short)
        self.assertEqual(self.rcs_json("jobs", "history", job[-7:]),
                         self.api_get("/jobs/%s/history" % job))
        out, _ = self.rcs("jobs", "cancel", job[-8:])
        self.assertEqual(out, "job %s cancelled\n" % job)
        self.assertEqual(self.rcs_json("tasks", "show", self.echo["ident"][-8:])["ident"],
                         self.echo["ident"])
        self.assertEqual(self.rcs_json("devices", "show", self.devices["pump-3"][-12:])
                         ["entity_ident"], self.devices["pump-3"])
        ans = self.rcs_json("send", "Echo", "--tag", "site-b", "--group", "short-g")
        g = ans["group"]["ident"]
        self.assertEqual(self.rcs_json("groups", "show", g[-8:])["ident"], g)
        # the same jobs (their statuses may move on between the two reads)
        idents = lambda page: sorted(j["ident"] for j in page["items"])
        self.assertEqual(idents(self.rcs_json("jobs", "list", "--group", g[-8:])),
                         idents(self.api_get("/jobs?group_ident=" + g)))
        rc, out = self.run_pty(["watch", g[-8:]], cols=80)
        self.assertEqual(rc, 0, out)
        # a name wins over a short ident: a device named like another one's ident end
        twin = self.device(self.devices["pump-1"][-8:])["entity_ident"]
        self.assertEqual(self.rcs_json("devices", "show", self.devices["pump-1"][-8:])
                         ["entity_ident"], twin)
        # several: the candidates; none: said; fewer than 6 digits: not a short ident
        two = [self.rcs_json("send", "Echo", "--device", "pump-1", "--schedule", "+1h")["ident"]
               for _ in range(2)]
        common = os.path.commonprefix(two)
        if len(common.replace("-", "")) >= 6:
            _, err = self.rcs("jobs", "show", common, code=3)
            self.assertIn("job %s is ambiguous: " % common, err)
            self.assertIn(two[0], err)
            self.assertIn(two[1], err)
        _, err = self.rcs("jobs", "show", "000000", code=3)
        self.assertIn("no job ident begins or ends with '000000'", err)
        _, err = self.rcs("jobs", "show", "e4a1f", code=3)
        self.assertIn("'e4a1f' is not a job ident", err)
        _, err = self.rcs("devices", "show", "0000000000", code=3)
        self.assertIn("no device named '0000000000', and no device ident begins or ends "
                      "with it", err)
        for t in two:
            self.api.patch("/jobs/%s/cancel" % t)

    # -- devices -----------------------------------------------------------------------------

    def test_devices_show_attributes(self):
        # what the device says it runs (docs/mqtt.md "State"), one key=value a line
        ident = self.devices["pump-2"]
        topic = "rcs/v1/%s/%s/state" % (self.client_root, ident)
        w = Watcher(self.broker, topic).start()
        try:
            w.client.publish(topic, json.dumps({"v": 1, "online": True, "attributes": {
                "fw_version": "2.4.1", "board": "x1"}}), qos=1).wait_for_publish()
            wait_for(lambda: self.api_get("/devices/" + ident)["attributes"]
                     == {"fw_version": "2.4.1", "board": "x1"}, timeout=10,
                     what="attributes stored")
        finally:
            w.stop()
        out, _ = self.rcs("devices", "show", "pump-2")
        self.assertRegex(out, r"(?m)^attributes\s+fw_version=2\.4\.1\n\s{16}board=x1$")
        self.assertEqual(self.rcs_json("devices", "show", "pump-2")["attributes"],
                         {"fw_version": "2.4.1", "board": "x1"})

    def test_devices_create_list_show_tag(self):
        name = "valve-" + uuid.uuid4().hex[:6]
        out, _ = self.rcs("devices", "create", "--name", name, "--tag", "lab", "--tag", "x:1")
        self.assertIn("created device %s" % name, out)
        ident = out.split("(")[1].split(")")[0]
        d = self.api_get("/devices/" + ident)
        self.assertEqual(d["tags"], ["lab", "x:1"])
        self.assertEqual(self.rcs_json("devices", "show", name), d)
        out, _ = self.rcs("devices", "show", ident)
        self.assertRegex(out, r"(?m)^tags\s+lab, x:1$")
        self.assertRegex(out, r"(?m)^attributes\s+-$")
        out, _ = self.rcs("devices", "tag", name, "--add", "new", "--remove", "lab",
                          "--add", "x:1")
        self.assertIn("tags: x:1, new", out)
        self.assertEqual(self.api_get("/devices/" + ident)["tags"], ["x:1", "new"])
        self.assertEqual(self.rcs_json("devices", "list", "--tag", "x:1"),
                         self.api_get("/devices?tag=x%3A1"))
        self.assertEqual(self.rcs_json("devices", "list", "--online", "true"),
                         self.api_get("/devices?online=true"))
        out, _ = self.rcs("devices", "list", "--tag", "site-a")
        self.assertIn("pump-1", out)
        self.assertNotIn("pump-3", out)
        self.assertRegex(out, r"pump-1\s+true\s+site-a")
        # a tag the API refuses
        _, err = self.rcs("devices", "tag", name, "--add", "bad tag", code=3)
        self.assertIn("validation_failed", err)
        # two devices of one name: the ident is needed
        self.device(name)
        _, err = self.rcs("devices", "show", name, code=3)
        self.assertIn("2 devices are named '%s'" % name, err)

    # -- send, jobs, groups ------------------------------------------------------------------

    def test_send_one_device_wait_done(self):
        out, err = self.rcs("send", "Echo", "--device", "pump-1", "--var", "message=hi",
                            "--wait")
        self.assertRegex(out, r"^job [0-9a-f-]{36} (pending|transmited) on pump-1 \(%s\)\n"
                         % self.devices["pump-1"][-8:])
        job = out.split()[1]
        # the watch's lines name the job by its short ident, as the tables do, in 80 columns
        self.assertIn("\njob %s: done, terminated 1\n" % job[-8:], out)
        self.assertEqual([l for l in out.splitlines()[1:] if job in l or len(l) > 80], [], out)
        self.assertRegex(out, r"(?m)^\d\d:\d\d:\d\d job %s  \d/1 ended" % job[-8:])
        j = self.api_get("/jobs/" + job)
        self.assertEqual((j["status"], j["response"], j["variables"]),
                         ("terminated", "hi", {"message": "hi"}))
        self.assertEqual(self.rcs_json("jobs", "show", job), j)
        out, _ = self.rcs("jobs", "show", job)
        self.assertRegex(out, r"(?m)^status\s+terminated$")
        self.assertRegex(out, r"(?m)^response\s+hi$")
        self.assertEqual(self.rcs_json("jobs", "history", job),
                         self.api_get("/jobs/%s/history" % job))
        out, _ = self.rcs("jobs", "history", job)
        # TIME (HH:MM:SS today, else with the date), STATUS, RESPONSE (one word here)
        statuses = [l.split()[-2] for l in out.splitlines()[1:]]
        self.assertEqual(statuses[0], "terminated")
        self.assertEqual(statuses[-1], "initial")
        self.assertEqual(self.rcs_json("jobs", "list", "--device", "pump-1", "--task", "Echo"),
                         self.api_get("/jobs?task_ident=%s&entity_ident=%s" % (
                             self.echo["ident"], self.devices["pump-1"])))
        # --wait --json: the job's last record
        j = self.rcs_json("send", "Echo", "--device", self.devices["pump-2"], "--wait")
        self.assertEqual(j["status"], "terminated")
        self.assertEqual(j, self.api_get("/jobs/" + j["ident"]))

    def test_send_tag_group_wait_lines(self):
        out, _ = self.rcs("send", "Sleepy", "--tag", "site-a", "--group", "wave-1",
                          "--var", "delay=1", "--wait")
        m = out.splitlines()[0]
        self.assertRegex(m, r"^group wave-1 \([0-9a-f-]{36}\): 2 jobs$")
        group = m.split("(")[1].split(")")[0]
        lines = [l for l in out.splitlines() if "group wave-1  " in l]
        self.assertGreaterEqual(len(lines), 2, out)
        self.assertRegex(lines[0], r"^\d\d:\d\d:\d\d group wave-1  \d/2 ended")
        self.assertIn("2/2 ended", lines[-1])
        self.assertIn("terminated 2", lines[-1])
        # one line per change: no two lines in a row with the same counts
        sums = [l.rsplit("  ", 1)[1] for l in lines]
        self.assertTrue(all(a != b for a, b in zip(sums, sums[1:])), lines)
        self.assertTrue(out.endswith("group wave-1: completed, terminated 2\n"), out)
        g = self.api_get("/groups/" + group)
        self.assertEqual(g["statuses"], {"terminated": 2})
        self.assertEqual(self.rcs_json("groups", "show", group), g)
        out, _ = self.rcs("groups", "show", group)
        self.assertRegex(out, r"(?m)^terminated\s+2$")
        self.assertRegex(out, r"(?m)^error_codes\s+-$")
        # the causes of the latest attempts that failed (docs/api.md "Rollouts")
        sent = self.rcs_json("send", "Sleepy", "--tag", "site-a", "--group", "wave-fail",
                             "--var", "fail=true")
        failed = sent["group"]["ident"]
        wait_for(lambda: self.api_get("/groups/" + failed)["status"] == "completed",
                 timeout=30, what="the failing group completed")
        self.assertEqual(self.api_get("/groups/" + failed)["error_codes"], {"script_error": 2})
        out, _ = self.rcs("groups", "show", failed)
        self.assertRegex(out, r"(?m)^error_codes\s+script_error=2$")
        self.assertEqual(self.rcs_json("groups", "list"), self.api_get("/groups"))
        self.assertIn("wave-1", self.rcs("groups", "list")[0])
        self.assertEqual(self.rcs_json("jobs", "list", "--group", group),
                         self.api_get("/jobs?group_ident=" + group))
        # watch of a group that has ended: its state at once
        out, _ = self.rcs("watch", group)
        self.assertIn("group wave-1: completed, terminated 2", out)

    def test_group_names(self):
        """Wherever a group ident goes, a group name does: of several groups of that name
        the most recent, said on stderr with the others (docs/cli.md "Output")."""
        sent = [self.rcs_json("send", "Echo", "--tag", "site-b", "--group", "gn-wave")
                ["group"]["ident"] for _ in range(3)]
        newest = sent[-1]
        which = "group gn-wave: %s (the most recent of 3: also %s, %s)" % (
            newest, sent[1], sent[0])
        # ended, so that two reads of it show the same
        wait_for(lambda: self.api_get("/groups/" + newest)["status"] == "completed",
                 timeout=30, what="group gn-wave completed")
        out, err = self.rcs("groups", "show", "gn-wave")
        self.assertRegex(out, r"(?m)^ident\s+%s$" % newest)
        self.assertIn(which, err)
        self.assertEqual(self.rcs_json("groups", "show", "gn-wave"),
                         self.api_get("/groups/" + newest))
        out, err = self.rcs("watch", "gn-wave")
        self.assertIn("group gn-wave: completed, terminated 1", out)
        self.assertIn(which, err)
        self.assertEqual(self.rcs_json("jobs", "list", "--group", "gn-wave"),
                         self.api_get("/jobs?group_ident=" + newest))
        # a name of one group: nothing said
        ans = self.rcs_json("send", "Echo", "--tag", "site-b", "--group", "gn-held",
                            "--schedule", "+1h")
        held = ans["group"]["ident"]
        out, err = self.rcs("groups", "pause", "gn-held")
        self.assertEqual((out, err), ("group gn-held: paused\n", ""))
        self.assertEqual(self.api_get("/groups/" + held)["status"], "paused")
        self.assertEqual(self.rcs_json("groups", "list", "--status", "paused"),
                         self.api_get("/groups?status=paused"))
        out, _ = self.rcs("groups", "list", "--status", "paused")
        self.assertIn(held[-8:], out)
        self.assertNotIn(newest[-8:], out)
        self.rcs("groups", "resume", "gn-held")
        out, _ = self.rcs("groups", "cancel", "gn-held")
        self.assertEqual(out, "group gn-held: cancelled\n")
        self.assertEqual(self.api_get("/groups/" + held)["status"], "cancelled")
        # an ident is taken as is; a name nobody has is an error
        out, err = self.rcs("groups", "show", sent[0])
        self.assertRegex(out, r"(?m)^ident\s+%s$" % sent[0])
        self.assertEqual(err, "")
        for args in (("groups", "show", "gn-nobody"), ("watch", "gn-nobody"),
                     ("groups", "cancel", "gn-nobody"),
                     ("jobs", "list", "--group", "gn-nobody")):
            with self.subTest(args=args):
                _, err = self.rcs(*args, code=3)
                self.assertIn("no group named 'gn-nobody'", err)
        _, err = self.rcs("groups", "list", "--status", "finished", code=3)
        self.assertIn("'finished'", err)

    def test_send_to_a_tag_nobody_holds(self):
        """A tag no device holds sends nothing: an error unless --allow-empty, and the
        group says why it has no job."""
        out, err = self.rcs("send", "Echo", "--tag", "flet", code=1)
        self.assertEqual(out, "0 jobs\n")
        self.assertIn("no device holds tag 'flet'", err)
        out, err = self.rcs("send", "Echo", "--tag", "flet", "--group", "gn-flet", "--wait",
                            code=1)
        self.assertRegex(out, r"^group gn-flet \([0-9a-f-]{36}\): 0 jobs\n$")
        self.assertIn("no device holds tag 'flet'", err)
        g = self.api_get("/groups?name=gn-flet")["items"][0]
        self.assertEqual((g["status"], g["reason"]), ("completed", "no device holds tag 'flet'"))
        ans = self.rcs_json("send", "Echo", "--tag", "flet", code=1)
        self.assertEqual((ans["items"], ans["rejected"]), ([], []))
        _, err = self.rcs("send", "Echo", "--tag", "flet", "--wait", code=1)
        self.assertIn("no device holds tag 'flet'", err)
        # told it may be empty: done
        out, err = self.rcs("send", "Echo", "--tag", "flet", "--allow-empty")
        self.assertEqual((out, err), ("0 jobs\n", ""))
        out, _ = self.rcs("send", "Echo", "--tag", "flet", "--allow-empty", "--wait")
        self.assertIn("completed, no jobs", out)

    def test_send_to_an_offline_device(self):
        # Sleepy does not allow offline devices: an offline one is left out, the group
        # keeps it, and the CLI says what to do; --offline queue queues its job
        away = self.api.post("/devices", {"name": "away-1", "tags": ["away"]}).json
        out, err = self.rcs("send", "Sleepy", "--device", "pump-1", "--device", "away-1",
                            "--group", "half", code=1)
        self.assertIn("group half", out)
        self.assertRegex(err, r"device away-1 \([0-9a-f]+\) rejected: the device is offline")
        self.assertIn("1 device was offline: send again to it with --offline queue", err)
        group = self.api_get("/groups?name=half")["items"][0]["ident"]
        self.assertEqual([x["entity_ident"] for x in self.api_get("/groups/" + group)[
            "rejected"]], [away["entity_ident"]])
        # groups show lists it as the tables show devices: short ident, name, why
        out, _ = self.rcs("groups", "show", "half")
        self.assertRegex(out, r"(?m)^REJECTED DEVICE +CODE +REASON\n%s away-1 +device_offline +"
                         r"the device is offline" % away["entity_ident"][-8:])
        self.assertNotIn(away["entity_ident"], out)
        rc, out = self.run_pty(["groups", "show", "half"], cols=80)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"(?m)^%s away-1 +device_offline +the device is offline"
                         % away["entity_ident"][-8:])
        self.assertTrue(all(len(l) <= 80 for l in out.replace("\r", "").split("\n")), out)
        ans = self.rcs_json("send", "Sleepy", "--device", "away-1", "--offline", "queue")
        self.assertEqual(ans["rejected"], [])
        self.assertEqual([j["status"] for j in ans["items"]], ["pending"])
        _, err = self.rcs("send", "Sleepy", "--device", "away-1", "--offline", "later",
                          code=2)
        self.assertIn("--offline: 'queue' or 'reject', not 'later'", err)
        self.rcs("jobs", "cancel", ans["items"][0]["ident"])

    def test_send_list_of_devices_bulk_json(self):
        ans = self.rcs_json("send", "Echo", "--device", "pump-1", "--device",
                            self.devices["pump-3"], "--device", str(uuid.uuid4()),
                            "--group", "listed", code=1)
        self.assertEqual(len(ans["items"]), 2)
        self.assertEqual(ans["group"]["name"], "listed")
        self.assertEqual([r["error"]["code"] for r in ans["rejected"]], ["not_found"])
        _, err = self.rcs("send", "Echo", "--device", "pump-1", "--device", str(uuid.uuid4()),
                          code=1)
        self.assertIn("rejected: no such device (not_found)", err)
        # a device that is there but away: its name next to its short ident
        away = self.device("away-pump")["entity_ident"]
        out, err = self.rcs("send", "Echo", "--device", "pump-1", "--device", away, code=1)
        self.assertIn("device away-pump (%s) rejected: " % away[-8:], err)
        self.assertRegex(out, r"(?m)^[0-9a-f]{8}  %s pump-1 " % self.devices["pump-1"][-8:])
        _, err = self.rcs("send", "Echo", "--device", "pump-1", "--device", away, "--json",
                          "--wait", code=1)
        self.assertIn("device away-pump (%s) rejected: " % away[-8:], err)

    def test_send_failed_job_exit_1(self):
        # a failed job says why: its status, the device's cause and its response
        out, _ = self.rcs("send", "Sleepy", "--device", "pump-3", "--var", "fail=true",
                          "--wait", code=1)
        self.assertIn("ended failed, edge_error 1", out)
        self.assertRegex(out, r"(?m)^  edge_error \(script_error\): .*asked to fail$")
        # a group: the causes of its failed jobs, most common first, each with a response
        out, _ = self.rcs("send", "Sleepy", "--tag", "site-b", "--var", "fail=yes", "--wait",
                          code=1)
        self.assertRegex(out, r"^group rcs-send-\d{8}-\d{6} ")
        self.assertIn("completed with failures, edge_error 1", out)
        self.assertRegex(out, r"(?m)^  edge_error causes: script_error 1$")
        ex = re.search(r"(?m)^    job ([0-9a-f]{8}): edge_error \(script_error\): .*asked to fail$",
                       out)
        self.assertIsNotNone(ex, out)
        failed = self.api_get("/jobs?status=edge_error&ident_suffix=" + ex.group(1))["items"]
        self.assertEqual(len(failed), 1, failed)
        # a group that ended well says nothing more
        out, _ = self.rcs("send", "Sleepy", "--tag", "site-b", "--wait")
        self.assertNotIn("causes", out)

    def test_send_variables_typed_by_the_task(self):
        # a value of the wrong type: said before anything is sent
        _, err = self.rcs("send", "Sleepy", "--device", "pump-1", "--var", "delay=soon",
                          code=2)
        self.assertIn("--var delay: 'soon' is not an integer", err)
        _, err = self.rcs("send", "Sleepy", "--device", "pump-1", "--var", "fail=maybe",
                          code=2)
        self.assertIn("is not a boolean", err)
        _, err = self.rcs("send", "Sleepy", "--device", "pump-1", "--var", "delay", code=2)
        self.assertIn("NAME=VALUE", err)
        # a name the task doesn't declare: the API's word
        _, err = self.rcs("send", "Sleepy", "--device", "pump-1", "--var", "colour=red",
                          code=3)
        self.assertIn("field variables.colour", err)
        _, err = self.rcs("send", "NoSuchTask", "--device", "pump-1", code=3)
        self.assertIn("no task named", err)
        _, err = self.rcs("send", "Echo", "--device", "no-such-device", code=3)
        self.assertIn("no device named 'no-such-device'", err)

    def test_schedule_cancel_and_a_cancelled_group(self):
        at = int(time.time()) + 3600
        j = self.rcs_json("send", "Echo", "--device", "pump-1", "--schedule", "+1h",
                          "--ttl", "7200", "--comment", "later")
        self.assertEqual(j["status"], "pending")
        self.assertIn(j["scheduled_time"], (at, at + 1, at + 2))
        self.assertEqual((j["ttl"], j["comment"]), (7200, "later"))
        out, _ = self.rcs("jobs", "cancel", j["ident"], "--reason", "wrong site")
        self.assertEqual(out, "job %s cancelled\n" % j["ident"])
        # who (the key's user) and why are kept with the job (docs/api.md)
        self.assertEqual(self.api_get("/jobs/" + j["ident"])["response"],
                         "cancelled by admin: wrong site")
        _, err = self.rcs("jobs", "cancel", j["ident"], code=3)
        self.assertIn("job_terminal, HTTP 409", err)
        _, err = self.rcs("jobs", "show", "not-a-job", code=3)
        self.assertIn("'not-a-job' is not a job ident", err)
        # an absolute time in UTC
        j = self.rcs_json("send", "Echo", "--device", "pump-2", "--schedule",
                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)))
        self.assertEqual(j["scheduled_time"], at)
        self.rcs("jobs", "cancel", j["ident"], "--json")
        # a group whose jobs are cancelled one by one completed: said so, not "failed"
        ans = self.rcs_json("send", "Echo", "--tag", "site-a", "--schedule", str(at),
                            "--group", "later")
        for item in ans["items"]:
            self.assertEqual(self.rcs_json("jobs", "cancel", item["ident"])["status"],
                             "cancelled")
        wait_for(lambda: self.api_get("/groups/" + ans["group"]["ident"])["status"]
                 == "completed", timeout=10, what="group later completed")
        out, _ = self.rcs("watch", ans["group"]["ident"])
        self.assertIn("group later: completed, cancelled 2 (2 not sent)", out)
        self.assertNotIn("failed", out)

    def test_progress_counts_devices(self):
        """A group's progress counts devices, a retry replacing the attempt it follows: the
        counts add up to the devices in the API, `watch` and `groups show`; an aborted group
        counts what it kept from going out; the ETA follows the rollout's pace (docs/api.md
        "Progress", docs/cli.md "Groups and watch")."""
        t = self.task["ident"]
        # two devices, each failing three times: six jobs, two devices, four retries
        ans = self.api.post("/tasks/%s/jobs/tags" % t, {
            "tag": "site-a", "group_name": "retried", "variables": {"fail": True},
            "retry": {"max_attempts": 3, "backoff_s": 0}}).json
        gid = ans["group"]["ident"]
        out, _ = self.rcs("watch", gid, code=1, timeout=90)
        lines = [l for l in out.splitlines() if "group retried  " in l]
        self.assertTrue(lines, out)
        for l in lines:
            self.assertRegex(l, r"  \d/2 ended", out)  # never "/3" ... "/6"
        self.assertIn("group retried: completed with failures, edge_error 2; 4 retries", out)
        g = self.api_get("/groups/" + gid)
        self.assertEqual((g["total"], sum(g["statuses"].values())), (6, 6))
        self.assertEqual(sum(g["counts"].values()), 2)
        self.assertEqual(g["progress"], {
            "devices": 2, "ended": 2, "succeeded": 0, "failed": 2, "cancelled": 0, "open": 0,
            "held": 0, "not_sent": 0, "retries": 4, "release_eta_s": None})
        listed = [i for i in self.api_get("/groups?name=retried")["items"]
                  if i["ident"] == gid]
        self.assertEqual(listed[0]["progress"], {
            k: g["progress"][k] for k in ("devices", "ended", "succeeded", "failed",
                                          "cancelled", "open")})
        out, _ = self.rcs("groups", "show", gid)
        self.assertRegex(out, r"(?m)^devices\s+2$")
        self.assertRegex(out, r"(?m)^progress\s+2 ended: 0 succeeded, 2 failed, 0 cancelled")
        self.assertRegex(out, r"(?m)^retries\s+4 \(jobs in all: 6\)$")
        self.assertRegex(out, r"(?m)^STATUS\s+DEVICES$")
        self.assertRegex(out, r"(?m)^edge_error\s+2$")
        # aborted at the first failure: the jobs it kept from going out are counted
        ans = self.api.post("/tasks/%s/jobs/list" % t, {
            "ident_list": [self.devices[n] for n in ("pump-1", "pump-2", "pump-3")],
            "group_name": "stopped", "variables": {"fail": True},
            "rollout": {"max_per_minute": 1},
            "abort": {"failure_percent": 1, "min_finished": 1}}).json
        gid = ans["group"]["ident"]
        out, _ = self.rcs("watch", gid, code=1, timeout=90)
        self.assertIn("3/3 ended  aborted", out)
        self.assertIn("group stopped: aborted, edge_error 1, cancelled 2 (2 not sent)", out)
        p = self.api_get("/groups/" + gid)["progress"]
        self.assertEqual((p["devices"], p["ended"], p["failed"], p["cancelled"],
                          p["not_sent"]), (3, 3, 1, 2, 2))
        # a slow rollout: the time left is the pace's, not the first job's
        ans = self.api.post("/tasks/%s/jobs/list" % t, {
            "ident_list": [self.devices[n] for n in ("pump-1", "pump-2", "pump-3")],
            "group_name": "paced", "rollout": {"max_per_minute": 1}}).json
        gid = ans["group"]["ident"]
        try:
            wait_for(lambda: self.api_get("/groups/" + gid)["progress"]["ended"] >= 1,
                     timeout=30, what="the first job of group paced ended")
            p = self.api_get("/groups/" + gid)["progress"]
            self.assertEqual(p["held"], 2)
            self.assertTrue(60 <= p["release_eta_s"] <= 120, p)
            out, _ = self.rcs("groups", "show", gid)
            self.assertRegex(out, r"(?m)^released in\s+(1m|2m)\d\ds at the rollout's pace$")
            p = subprocess.Popen([RCS, "watch", gid], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=self.env())
            line = wait_for(lambda: p.stdout.readline(), timeout=10, what="a first line")
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=10)
            self.assertRegex(line, r"1/3 ended  running  2 held  .*ETA (1m|2m)\d\ds  "
                                  r"pending 2, terminated 1$")
        finally:
            self.api.patch("/groups/%s/cancel" % gid)

    def test_rollouts_against_the_coordinator(self):
        """--rollout-per-minute, --abort-percent, --retries and groups pause|resume|cancel
        against this coordinator (docs/cli.md "Rollouts", docs/api.md "Rollouts")."""
        ans = self.rcs_json("send", "Echo", "--tag", "site-a", "--rollout-per-minute", "600",
                            "--abort-percent", "50", "--abort-min-finished", "2",
                            "--retries", "1")
        gid = ans["group"]["ident"]
        self.assertEqual(ans["group"]["name"], gid)  # no --group: named by its ident
        g = self.api_get("/groups/" + gid)
        self.assertEqual(g["rollout"], {"max_per_minute": 600})
        self.assertEqual(g["abort"], {"failure_percent": 50, "min_finished": 2})
        self.assertEqual(g["retry"], {"max_attempts": 2, "backoff_s": 30, "backoff_factor": 2})
        out, _ = self.rcs("watch", gid, timeout=90)
        self.assertEqual(self.api_get("/groups/" + gid)["status"], "completed")
        # one device's send with a rollout option becomes a list send
        j = self.rcs_json("send", "Echo", "--device", "pump-2", "--retries", "0")
        self.assertEqual(self.api_get("/groups/" + j["group"]["ident"])["retry"]["max_attempts"], 1)
        # pause, resume and cancel of a group whose jobs wait for their time
        at = int(time.time()) + 3600
        g = self.rcs_json("send", "Echo", "--tag", "site-a", "--schedule", str(at),
                          "--group", "paced", "--rollout-per-minute", "1")["group"]["ident"]
        out, _ = self.rcs("groups", "pause", g)
        self.assertIn("group %s: paused" % g, out)
        self.assertEqual(self.rcs_json("groups", "resume", g)["status"], "running")
        out, _ = self.rcs("groups", "show", g)
        self.assertIn("running", out)
        self.assertEqual(self.rcs_json("groups", "cancel", g)["status"], "cancelled")
        _, err = self.rcs("groups", "pause", g, code=3)
        self.assertIn("group_ended, HTTP 409", err)
        self.assertNotIn("need a coordinator with rollouts", err)
        # a value out of range is refused before any request (usage)
        _, err = self.rcs("send", "Echo", "--tag", "site-a", "--abort-percent", "20",
                          "--abort-min-finished", "2000000", code=2)


    # -- day two: keys, webhooks, audit, devices rename|delete, tasks update ---------------

    def test_keys_list_create_revoke(self):
        out, _ = self.rcs("keys", "create", "--user", "kim", "--role", "operator")
        first, key = out.splitlines()
        self.assertRegex(first, r"^created operator key [0-9a-f-]{36} for kim; the key, "
                                r"shown only now:$")
        ident = first.split()[3]
        # the key works at once, with its role
        self.rcs("tasks", "list", env=self.env(RCS_API_KEY=key))
        _, err = self.rcs("keys", "create", "--user", "x", "--role", "admin",
                          env=self.env(RCS_API_KEY=key), code=3)
        self.assertIn("HTTP 403", err)
        self.assertEqual(self.rcs_json("keys", "list", "--per-page", "500"),
                         self.api_get("/keys?per_page=500"))
        out, _ = self.rcs("keys", "list", "--per-page", "500")
        self.assertRegex(out, r"(?m)^%s +kim +operator +\d\d:\d\d:\d\d +-$" % ident[-8:])
        self.assertNotIn(key, out)
        # revoked by a short ident: refused at once
        out, _ = self.rcs("keys", "revoke", ident[-8:])
        self.assertEqual(out, "revoked key %s\n" % ident)
        _, err = self.rcs("tasks", "list", env=self.env(RCS_API_KEY=key), code=3)
        self.assertIn("HTTP 401", err)
        out, _ = self.rcs("keys", "list", "--per-page", "500")
        self.assertRegex(out, r"(?m)^%s +kim +operator +\S+ +\d\d:\d\d:\d\d$" % ident[-8:])
        ans = self.rcs_json("keys", "create", "--user", "lee", "--role", "viewer")
        self.assertEqual((ans["user"], ans["role"]), ("lee", "viewer"))
        self.assertTrue(ans["api_key"])
        _, err = self.rcs("keys", "revoke", "0a0a0a0a", code=3)
        self.assertIn("no key ident begins or ends with '0a0a0a0a'", err)
        _, err = self.rcs("keys", "create", "--user", "kim", code=2)
        self.assertIn("--user and --role", err)
        _, err = self.rcs("keys", "create", "--user", "kim", "--role", "boss", code=3)
        self.assertIn("field role", err)

    def test_webhooks_commands(self):
        import http.server
        import threading
        got = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                got.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self.send_response(204)
                self.end_headers()

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d/hook" % srv.server_address[1]
        try:
            out, _ = self.rcs("webhooks", "create", url, "--event", "group.status",
                              "--status", "completed")
            lines = out.splitlines()
            self.assertRegex(lines[0], r"^created webhook [0-9a-f-]{36} for %s$" % url)
            self.assertEqual(lines[1], "its secret, shown only now (rcs-signature, "
                                       "docs/integrations.md):")
            self.assertRegex(lines[2], r"^[0-9a-f]{64}$")
            hook = lines[0].split()[2]
            out, _ = self.rcs("webhooks", "list", "--per-page", "500")
            self.assertRegex(out, r"(?m)^%s +%s +group.status +completed +true " % (
                hook[-8:], url))
            self.assertEqual(self.rcs_json("webhooks", "show", hook[-8:]),
                             self.api_get("/webhooks/" + hook))
            out, _ = self.rcs("webhooks", "update", hook[:8], "--active", "false",
                              "--event", "job.status", "--event", "group.status")
            self.assertRegex(out, r"(?m)^active\s+false$")
            self.assertRegex(out, r"(?m)^events\s+job.status,group.status$")
            self.assertEqual(self.api_get("/webhooks/" + hook)["active"], False)
            self.rcs("webhooks", "update", hook, "--active", "true", "--status", "completed",
                     "--status", "terminated")
            # a send: its deliveries come, and the command shows them
            self.rcs("send", "Echo", "--tag", "site-b", "--group", "hooked", "--wait")
            wait_for(lambda: len(self.api_get("/webhooks/%s/deliveries" % hook)["items"]) >= 2
                     and all(d["state"] == "delivered" for d in self.api_get(
                         "/webhooks/%s/deliveries" % hook)["items"]),
                     timeout=30, what="the deliveries delivered")
            self.assertEqual(self.rcs_json("webhooks", "deliveries", hook),
                             self.api_get("/webhooks/%s/deliveries" % hook))
            out, _ = self.rcs("webhooks", "deliveries", hook)
            rows = out.splitlines()
            self.assertEqual(rows[0].split()[:4], ["ID", "CHANGED", "TYPE", "SUBJECT"])
            self.assertTrue(any("group.status" in r and "completed" in r and "delivered" in r
                                for r in rows[1:]), out)
            self.assertTrue(any("job.status" in r and "terminated" in r for r in rows[1:]), out)
            _, err = self.rcs("webhooks", "update", hook, code=2)
            self.assertIn("give what changes", err)
            _, err = self.rcs("webhooks", "create", url, code=2)
            self.assertIn("--event", err)
            _, err = self.rcs("webhooks", "create", "http://127.0.0.2/x", "--event",
                              "job.status", code=3)
            self.assertIn("field url", err)
            out, _ = self.rcs("webhooks", "delete", hook[-8:])
            self.assertEqual(out, "deleted webhook %s\n" % hook)
            self.assertEqual(self.api.get("/webhooks/" + hook).status, 404)
            _, err = self.rcs("webhooks", "show", hook, code=3)
            self.assertIn("not_found, HTTP 404", err)
        finally:
            srv.shutdown()
            srv.server_close()

    def test_audit(self):
        dev = self.rcs_json("devices", "create", "--name", "audited")["entity_ident"]
        self.rcs("devices", "rename", dev, "audited-2")
        ans = self.rcs_json("audit", "--target", dev, "--since", "-1h")
        since = int(time.time()) - 3600
        self.assertEqual([(a["method"], a["status_code"]) for a in ans["items"]],
                         [("PATCH", 200), ("POST", 201)])
        q = self.api_get("/audit?target=" + dev)
        self.assertEqual(ans["items"], q["items"])
        self.assertTrue(all(a["ts"] >= since - 2 for a in ans["items"]))
        out, _ = self.rcs("audit", "--target", dev, "--user", ans["items"][0]["user"])
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["TIME", "USER", "METHOD", "CODE", "PATH", "TARGET",
                                            "REMOTE"])
        self.assertRegex(lines[1], r"^\d\d:\d\d:\d\d +\S+ +PATCH +200 +\S*/devices/%s +%s " % (
            dev, dev[-8:]))
        self.assertEqual(len(lines), 3, out)
        # nothing before the records, nothing for another user
        self.assertEqual(self.rcs_json("audit", "--target", dev, "--until",
                                       str(since - 86400))["items"], [])
        self.assertEqual(self.rcs_json("audit", "--target", dev, "--user", "nobody")["items"],
                         [])
        _, err = self.rcs("audit", "--since", "yesterday", code=2)
        self.assertIn("--since 'yesterday': not a time", err)
        _, err = self.rcs("audit", env=self.env(RCS_API_KEY=self.viewer_key), code=3)
        self.assertIn("HTTP 403", err)

    def test_devices_rename_delete(self):
        dev = self.device("to-rename", ["spare"])["entity_ident"]
        out, _ = self.rcs("devices", "rename", "to-rename", "renamed-one")
        self.assertEqual(out, "device %s is now named renamed-one\n" % dev)
        self.assertEqual(self.rcs_json("devices", "show", "renamed-one")["entity_ident"], dev)
        _, err = self.rcs("devices", "show", "to-rename", code=3)
        self.assertIn("no device named 'to-rename'", err)
        self.assertEqual(self.rcs_json("devices", "rename", dev[-8:], "renamed-two")["name"],
                         "renamed-two")
        _, err = self.rcs("devices", "rename", dev, "", code=3)
        self.assertIn("field name", err)
        out, _ = self.rcs("devices", "delete", dev[-8:])
        self.assertEqual(out, "deleted device %s (its jobs stay)\n" % dev)
        self.assertEqual(self.api.get("/devices/" + dev).status, 404)
        _, err = self.rcs("devices", "delete", "renamed-two", code=3)
        self.assertIn("no device named 'renamed-two'", err)

    def test_tasks_update_deactivate(self):
        t = self.api.post("/tasks", {"name": "Changing", "script": "echo"}).json
        out, _ = self.rcs("tasks", "update", "Changing", "--comment", "v2", "--hide", "true",
                          "--variable", "message:string:optional")
        self.assertEqual(out, "updated task Changing (%s), version 2\n" % t["ident"])
        rec = self.api_get("/tasks/" + t["ident"])
        self.assertEqual((rec["comment"], rec["hide"], rec["version"]), ("v2", True, 2))
        self.assertEqual(rec["variables_info"], {"message": {"type": "string",
                                                             "optional": True}})
        out, _ = self.rcs("tasks", "update", t["ident"][-8:], "--comment", "v2")
        self.assertEqual(out, "task Changing (%s) unchanged, version 2\n" % t["ident"])
        out, _ = self.rcs("tasks", "deactivate", "Changing")
        self.assertEqual(out, "deactivated task Changing (%s), version 3\n" % t["ident"])
        self.assertEqual(self.api_get("/tasks/" + t["ident"])["active"], "false")
        _, err = self.rcs("send", "Changing", "--device", "pump-1", code=3)
        self.assertIn("task_inactive", err)
        self.assertEqual(self.rcs_json("tasks", "activate", "Changing")["active"], "true")
        self.rcs("send", "Changing", "--device", "pump-1", "--var", "message=back", "--wait")
        self.assertEqual(self.rcs_json("tasks", "update", "Changing", "--allow-offline",
                                       "true", "--name", "Changed")["allow_offline"], True)
        _, err = self.rcs("tasks", "update", "Changed", code=2)
        self.assertIn("give what changes", err)
        _, err = self.rcs("tasks", "update", "Changed", "--public", "maybe", code=2)
        self.assertIn("--public: true or false, not 'maybe'", err)
        _, err = self.rcs("tasks", "update", "Changed", "--script", "no-such-script", code=3)
        self.assertIn("field script", err)

    # -- send: rollout members, --var @file, past schedules, fleet-size output ---------------

    def test_send_window_exponential_continuous_backoff(self):
        # two days three days from now (UTC+1): the window is shut during the test
        names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        wd = time.gmtime(time.time() + 3600).tm_wday
        a, b = (wd + 3) % 7, (wd + 4) % 7
        days = sorted([a, b])
        ans = self.rcs_json("send", "Echo", "--tag", "site-b", "--group", "windowed",
                            "--window", "%s,%s/02:00/2h" % (names[a], names[b]),
                            "--window-utc-offset", "60",
                            "--rollout-per-minute", "1000", "--exponential", "10,2,20",
                            "--retries", "2", "--retry-backoff", "5",
                            "--retry-backoff-factor", "1.5")
        gid = ans["group"]["ident"]
        g = self.api_get("/groups/" + gid)
        self.assertEqual(g["window"], {"days": [names[d] for d in days], "start": "02:00",
                                       "duration_min": 120, "utc_offset_min": 60})
        self.assertEqual(g["status"], "running")
        self.assertEqual(g["rollout"], {"max_per_minute": 1000, "exponential": {
            "base_per_minute": 10, "factor": 2, "after_succeeded": 20}})
        self.assertEqual(g["retry"], {"max_attempts": 3, "backoff_s": 5, "backoff_factor": 1.5})
        self.rcs("groups", "cancel", gid)
        # the window's offset: this host's zone when not given (here UTC+2)
        ans = self.rcs_json("send", "Echo", "--device", "pump-3", "--window",
                            "%s-%s/22:30/90" % (names[a], names[b]),
                            env=self.env(TZ="UTC-2"))
        g = self.api_get("/groups/" + ans["group"]["ident"])
        self.assertEqual(g["window"], {"days": [names[d] for d in days], "start": "22:30",
                                       "duration_min": 90, "utc_offset_min": 120})
        self.rcs("groups", "cancel", ans["group"]["ident"])
        # continuous: a tag no device holds yet is no error, the group stays open
        ans = self.rcs_json("send", "Echo", "--tag", "kiosk-later", "--continuous")
        g = self.api_get("/groups/" + ans["group"]["ident"])
        self.assertEqual((g["continuous"], g["status"]), (True, "running"))
        self.rcs("groups", "cancel", ans["group"]["ident"])
        for args, msg in ((["--device", "pump-1", "--continuous"], "--continuous goes with"),
                          (["--tag", "site-b", "--retry-backoff", "5"], "go with --retries"),
                          (["--tag", "site-b", "--window", "someday/02:00/2h"], "DAYS/HH:MM"),
                          (["--tag", "site-b", "--window", "sat/25:00/2h"], "DAYS/HH:MM"),
                          (["--tag", "site-b", "--window", "sat/02:00/0"], "DAYS/HH:MM"),
                          (["--tag", "site-b", "--exponential", "10,2"], "N,F,K"),
                          (["--tag", "site-b", "--exponential", "10,20,5"], "N,F,K"),
                          (["--tag", "site-b", "--retries", "1", "--retry-backoff-factor",
                            "x"], "a number, 1 to 10"),
                          (["--tag", "site-b", "--window-utc-offset", "60"], "goes with"),
                          (["--tag", "site-b", "--window", "sat/02:00/1h",
                            "--window-utc-offset", "900"], "-720 to 840")):
            _, err = self.rcs("send", "Echo", *args, code=2)
            self.assertIn(msg, err)

    def test_send_download_limits(self):
        """--download-max-concurrent and --download-max-rate: the group's `download`."""
        ans = self.rcs_json("send", "Echo", "--device", "pump-1", "--download-max-concurrent",
                            "20", "--download-max-rate", "1.5M")
        gid = ans["group"]["ident"]
        self.assertEqual(self.api_get("/groups/" + gid)["download"],
                         {"max_concurrent": 20, "max_bytes_per_s": 1572864})
        ans = self.rcs_json("send", "Echo", "--tag", "site-b", "--download-max-rate", "500K")
        self.assertEqual(self.api_get("/groups/" + ans["group"]["ident"])["download"],
                         {"max_bytes_per_s": 512000})
        for rate in ("10X", "100", "2T", "-1M"):
            _, err = self.rcs("send", "Echo", "--tag", "site-b", "--download-max-rate", rate,
                              code=2)
            self.assertIn("--download-max-rate", err)

    def test_send_var_from_a_file(self):
        path = os.path.join(self.workdir, "message.txt")
        with open(path, "w") as f:
            f.write("from a file\nsecond line\n")
        j = self.rcs_json("send", "Echo", "--device", "pump-1", "--var", "message=@" + path,
                          "--wait")
        self.assertEqual(self.api_get("/jobs/" + j["ident"])["variables"],
                         {"message": "from a file\nsecond line\n"})
        # typed: an integer from a file, its final newline left out
        with open(path, "w") as f:
            f.write("0\n")
        j = self.rcs_json("send", "Sleepy", "--device", "pump-1", "--var", "delay=@" + path,
                          "--wait")
        self.assertEqual(self.api_get("/jobs/" + j["ident"])["variables"], {"delay": 0})
        # @- is stdin
        j = self.rcs_json("send", "Echo", "--device", "pump-1", "--var", "message=@-",
                          "--wait", stdin="piped in")
        self.assertEqual(self.api_get("/jobs/" + j["ident"])["variables"],
                         {"message": "piped in"})
        # @@ is a text that begins with @
        j = self.rcs_json("send", "Echo", "--device", "pump-1", "--var", "message=@@home",
                          "--wait")
        self.assertEqual(self.api_get("/jobs/" + j["ident"])["variables"], {"message": "@home"})
        missing = os.path.join(self.workdir, "no-such-file")
        _, err = self.rcs("send", "Echo", "--device", "pump-1", "--var",
                          "message=@" + missing, code=2)
        self.assertIn("%s: No such file or directory" % missing, err)
        self.assertIn("to send a text beginning with @, write @@", err)
        with open(path, "wb") as f:
            f.write(b"x" * (256 * 1024 + 1))
        _, err = self.rcs("send", "Echo", "--device", "pump-1", "--var", "message=@" + path,
                          code=2)
        self.assertIn("larger than 262144 bytes", err)
        with open(path, "wb") as f:
            f.write(b"a\0b")
        _, err = self.rcs("send", "Echo", "--device", "pump-1", "--var", "message=@" + path,
                          code=2)
        self.assertIn("holds a NUL byte", err)

    def test_schedule_in_the_past_warns(self):
        past = int(time.time()) - 7200
        j, err = self.rcs("send", "Echo", "--device", "pump-2", "--schedule", str(past),
                          "--json")
        self.assertIn("rcs: send: warning: --schedule %d is 2h0" % past, err)
        self.assertIn("in the past: the jobs are sent now", err)
        self.assertNotEqual(json.loads(j)["status"], "initial")
        out, err = self.rcs("send", "Echo", "--device", "pump-2", "--schedule", "+1h",
                            "--json")
        self.assertNotIn("warning", err)
        self.rcs("jobs", "cancel", json.loads(out)["ident"])

    def test_send_at_fleet_size_summary(self):
        devs = [self.device("fleet-%02d" % i, ["fleet-tag"] if i else [])["entity_ident"]
                for i in range(12)]
        args = ["send", "Echo"] + [a for d in devs for a in ("--device", d)]
        # offline devices queued: the first 10 jobs, then how many more and their statuses
        out, _ = self.rcs(*args, "--offline", "queue", "--group", "fleet-q")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(":")[1], " 12 jobs")
        self.assertEqual(lines[1].split(), ["JOB", "DEVICE", "STATUS"])
        self.assertEqual(len(lines), 13, out)
        self.assertRegex(lines[12], r"^\.\.\. and 2 more \(12 jobs: pending 12; --verbose "
                                    r"lists them all, rcs jobs list --group [0-9a-f-]{36} too\)$")
        gid = lines[12].split("--group ")[1].split()[0]
        # without a group: nothing to list them by later
        out, _ = self.rcs("send", "Echo", "--tag", "fleet-tag", "--offline", "queue")
        self.assertRegex(out.splitlines()[-1], r"^\.\.\. and 1 more \(11 jobs: pending 11; "
                                               r"--verbose lists them all\)$")
        for d in devs[1:]:
            for j in self.api_get("/jobs?status=pending&entity_ident=" + d)["items"]:
                self.assertEqual(self.api.patch("/jobs/%s/cancel" % j["ident"]).status, 200)
        out, _ = self.rcs(*args, "--offline", "queue", "--group", "fleet-v", "--verbose")
        self.assertEqual(len(out.splitlines()), 14, out)
        self.assertNotIn("more", out)
        # rejected: the first 10, then their count by code
        _, err = self.rcs(*args, "--offline", "reject", code=1)
        rej = [l for l in err.splitlines() if " rejected: " in l]
        self.assertEqual(len(rej), 10, err)
        self.assertIn("rcs: send: ... and 2 more rejected (12 in all: device_offline 12; "
                      "--verbose lists them)", err)
        _, err = self.rcs(*args, "--offline", "reject", "--verbose", code=1)
        self.assertEqual(len([l for l in err.splitlines() if " rejected: " in l]), 12, err)
        for name in ("fleet-q", "fleet-v"):
            self.rcs("groups", "cancel", name)
        for d in devs:
            self.assertEqual(self.api.delete("/devices/" + d).status, 204)
        self.assertEqual(self.api_get("/groups/" + gid)["status"], "cancelled")

    def test_groups_list_status_and_progress(self):
        self.rcs("send", "Echo", "--tag", "site-b", "--group", "progressed", "--wait")
        at = int(time.time()) + 3600
        held = self.rcs_json("send", "Echo", "--tag", "site-a", "--group", "held",
                             "--schedule", str(at))["group"]["ident"]
        rc, out = self.run_pty(["groups", "list", "--per-page", "5"], cols=80)
        self.assertEqual(rc, 0, out)
        lines = [l for l in out.replace("\r", "").split("\n") if l]
        self.assertTrue(all(len(l) <= 80 for l in lines), lines)
        self.assertEqual(lines[0].split(), ["IDENT", "NAME", "TASK", "STATUS", "PROGRESS",
                                            "CREATED", "BY", "CREATED"])
        self.assertRegex(lines[1], r"^%s +held +[0-9a-f]{8} +running +0/2 " % held[-8:])
        self.assertTrue(any(re.search(r" progressed +[0-9a-f]{8} +completed +1/1 ", l)
                            for l in lines), lines)
        out, _ = self.rcs("groups", "list", "--status", "completed", "--per-page", "500")
        self.assertNotIn(" held ", out)
        self.rcs("groups", "cancel", held)

    # -- artifacts ---------------------------------------------------------------------------

    def artifact_file(self, size, name=None):
        """A file of size random bytes in the work directory: (path, its sha256 hex)."""
        data = os.urandom(size)
        path = os.path.join(self.workdir, name or "art-%s.bin" % uuid.uuid4().hex[:8])
        with open(path, "wb") as f:
            f.write(data)
        return path, hashlib.sha256(data).hexdigest()

    def test_artifacts_upload_dedupe_list_show_rm(self):
        """docs/cli.md "Artifacts": upload (201, then 200 for the same bytes), its digest
        checked by the coordinator, list, show by name and short ident, rm."""
        path, sha = self.artifact_file(3 * 1024 * 1024 + 5)
        name = "fw-" + uuid.uuid4().hex[:6]
        out, err = self.rcs("artifacts", "upload", path, "--name", name)
        self.assertEqual(out, "uploaded artifact %s (sha256:%s, 3.0 MiB)\n" % (name, sha))
        self.assertEqual(err, "")  # no terminal: no bar
        rec = self.api_get("/artifacts/sha256:" + sha)
        self.assertEqual((rec["name"], rec["size"], rec["sha256"]), (name, 3 * 1024 * 1024 + 5, sha))
        # the same bytes again, under another name: 200, the record as it was
        again = self.rcs_json("artifacts", "upload", path, "--name", "other")
        self.assertEqual(again, rec)
        out, _ = self.rcs("artifacts", "upload", path)
        self.assertTrue(out.startswith("the same bytes are there already: artifact %s "
                                       "(sha256:%s), uploaded " % (name, sha)), out)
        self.assertEqual(self.api_get("/artifacts?name=other")["total_items"], 0)
        # the default name is the file's
        small, small_sha = self.artifact_file(100, "config-%s.tar" % uuid.uuid4().hex[:4])
        out, _ = self.rcs("artifacts", "upload", small)
        self.assertIn("uploaded artifact %s (sha256:%s, 100 B)" % (os.path.basename(small),
                                                                    small_sha), out)
        # list: the table, --json as the API's, --name
        out, _ = self.rcs("artifacts", "list")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["IDENT", "NAME", "SIZE", "USED", "BY", "CREATED"])
        row = [l for l in lines if l.startswith(sha[:8])]
        self.assertEqual(len(row), 1, out)
        self.assertRegex(row[0], r"^%s +%s +3\.0 MiB +- +\d\d:\d\d:\d\d$" % (sha[:8], name))
        self.assertEqual(self.rcs_json("artifacts", "list", "--per-page", "5"),
                         self.api_get("/artifacts?per_page=5"))
        listed = self.rcs_json("artifacts", "list", "--name", name)
        self.assertEqual([a["ident"] for a in listed["items"]], ["sha256:" + sha])
        # show: by name, by the start or end of its digits, "sha256:" or not, any case
        for what in (name, sha[:8], "sha256:" + sha[:10], sha[-7:], sha.upper(),
                     "sha256:" + sha):
            self.assertEqual(self.rcs_json("artifacts", "show", what), rec, what)
        out, _ = self.rcs("artifacts", "show", name)
        self.assertRegex(out, r"(?m)^ident +sha256:%s$" % sha)
        self.assertRegex(out, r"(?m)^size +3145733 bytes \(3\.0 MiB\)$")
        self.assertRegex(out, r"(?m)^used_by +-$")
        _, err = self.rcs("artifacts", "show", "no-such-artifact", code=3)
        self.assertIn("no artifact named 'no-such-artifact' (give its ident?)", err)
        _, err = self.rcs("artifacts", "show", "0f0f0f0f", code=3)
        self.assertIn("no artifact named '0f0f0f0f', and no artifact ident begins or ends "
                      "with it", err)
        # a name two artifacts share is not enough
        twin, twin_sha = self.artifact_file(10)
        self.rcs("artifacts", "upload", twin, "--name", name)
        _, err = self.rcs("artifacts", "show", name, code=3)
        self.assertIn("2 artifacts are named '%s'" % name, err)
        self.assertIn("give the ident", err)
        # rm: by short ident; then gone
        out, _ = self.rcs("artifacts", "rm", twin_sha[:12])
        self.assertEqual(out, "removed artifact %s (sha256:%s, 10 B)\n" % (name, twin_sha))
        self.assertEqual(self.api.get("/artifacts/sha256:" + twin_sha).status, 404)
        out, _ = self.rcs("artifacts", "rm", name)
        self.assertIn("removed artifact %s (sha256:%s" % (name, sha), out)
        _, err = self.rcs("artifacts", "rm", "sha256:" + sha, code=3)
        self.assertIn("not_found", err)
        self.rcs("artifacts", "rm", small_sha, "--json")

    def test_artifacts_upload_digest_and_refusals(self):
        path, sha = self.artifact_file(200 * 1024)
        other = hashlib.sha256(b"other").hexdigest()
        # --sha256: the coordinator checks the bytes against it, and keeps nothing if not
        _, err = self.rcs("artifacts", "upload", path, "--sha256", other, code=3)
        self.assertIn("digest_mismatch, HTTP 412, field rcs-sha256", err)
        self.assertIn("nothing was kept (is --sha256 the file's?)", err)
        self.assertEqual(self.api.get("/artifacts/sha256:" + sha).status, 404)
        rec = self.rcs_json("artifacts", "upload", path, "--sha256", sha.upper(), "--name", "ok")
        self.assertEqual(rec["ident"], "sha256:" + sha)
        # refused before anything is sent
        for args, msg in ((("--sha256", "abc"), "--sha256: 64 hex digits"),
                          (("--sha256", "z" * 64), "--sha256: 64 hex digits")):
            _, err = self.rcs("artifacts", "upload", path, *args, code=2)
            self.assertIn(msg, err)
        _, err = self.rcs("artifacts", "upload", "-", code=2)
        self.assertIn("give a file, not stdin", err)
        _, err = self.rcs("artifacts", "upload", self.workdir, code=2)
        self.assertIn("not a regular file", err)
        _, err = self.rcs("artifacts", "upload", os.path.join(self.workdir, "nope"), code=2)
        self.assertIn("No such file or directory", err)
        # a viewer reads, does not write
        viewer = self.env(RCS_API_KEY=self.viewer_key)
        _, err = self.rcs("artifacts", "upload", path, code=3, env=viewer)
        self.assertIn("HTTP 403", err)
        # refused from the headers, before the body: the answer still comes through (a
        # body over 1 MiB goes out after "Expect: 100-continue")
        big, _ = self.artifact_file(3 * 1024 * 1024)
        _, err = self.rcs("artifacts", "upload", big, code=3, env=viewer)
        self.assertIn("HTTP 403", err)
        self.assertEqual(self.rcs_json("artifacts", "show", sha[:8], env=viewer), rec)
        _, err = self.rcs("artifacts", "rm", sha[:8], code=3, env=viewer)
        self.assertIn("HTTP 403", err)
        # a name the coordinator refuses (a control character): its 400
        _, err = self.rcs("artifacts", "upload", path, "--name", "a\x01b", code=3)
        self.assertIn("HTTP 400, field name", err)
        self.rcs("artifacts", "rm", sha)

    def upload_peak_kb(self, size, name):
        """Uploads a file of size bytes; the peak RSS of rcs meanwhile, in kB.
        GNU time forks rcs itself and reports the maxrss of its wait4: exact, where sampling
        /proc could miss a short upload's peak (or read it before the exec), and not
        inflated by this test's own pages, which a child forked from here would carry into
        its rusage across the exec."""
        path, sha = self.artifact_file(size)
        peak_file = os.path.join(self.workdir, name + ".peak")
        with open(os.path.join(self.workdir, name + ".out"), "w+") as out:
            rc = subprocess.call(["/usr/bin/time", "-f", "%M", "-o", peak_file,
                                  RCS, "artifacts", "upload", path, "--name", name],
                                 stdout=out, stderr=subprocess.STDOUT, env=self.env())
            out.seek(0)
            text = out.read()
        self.assertEqual(rc, 0, text)
        self.assertIn("uploaded artifact %s (sha256:%s" % (name, sha), text)
        with open(peak_file) as f:
            peak = int(f.read().split()[-1])
        self.rcs("artifacts", "rm", sha)
        return peak

    def test_artifacts_upload_streams(self):
        """The file is sent as it is read, never whole in memory: the peak RSS of rcs for a
        64 MiB file stays within 12 MiB of its peak for a 64 KiB one, measured in the same
        run (libcurl, its TLS library, json-c and a sanitizer's runtime are in both)."""
        small = self.upload_peak_kb(64 * 1024, "small")
        big = self.upload_peak_kb(64 * 1024 * 1024, "big")
        self.assertLess(big - small, 12 * 1024,
                        "rcs peaked at %d kB for a 64 MiB file, %d kB for 64 KiB" % (big, small))

    def test_artifacts_upload_bar_on_a_terminal(self):
        path, sha = self.artifact_file(8 * 1024 * 1024)
        rc, out = self.run_pty(["artifacts", "upload", path, "--name", "tty"], cols=80)
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"hashing tty \[#+\] 100 %  8\.0 MiB of 8\.0 MiB")
        self.assertRegex(out, r"uploading tty \[#+\] 100 %  8\.0 MiB of 8\.0 MiB")
        self.assertIn("\r\x1b[K", out)  # the bar's line cleared before the result
        self.assertIn("uploaded artifact tty (sha256:%s, 8.0 MiB)" % sha, out)
        bars = [part for line in out.replace("\x1b[K", "").split("\n")
                for part in line.split("\r") if "[" in part]
        self.assertTrue(bars)
        for part in bars:
            self.assertLessEqual(len(part), 79, part)
        # the table in 80 columns: a long name gives way, the ident, size and time do not
        long_name = "a-firmware-image-with-a-name-longer-than-any-column-ought-to-be-" * 2
        other, other_sha = self.artifact_file(3000)
        self.rcs("artifacts", "upload", other, "--name", long_name[:128])
        rc, out = self.run_pty(["artifacts", "list"], cols=80)
        lines = [l for l in out.replace("\r", "").split("\n") if l]
        self.assertTrue(all(len(l) <= 80 for l in lines), lines)
        row = [l for l in lines if l.startswith(other_sha[:8])]
        self.assertRegex(row[0], r"^%s +a-firmware\S*~ +2\.9 KiB +- +\d\d:\d\d:\d\d$"
                         % other_sha[:8])
        self.rcs("artifacts", "rm", sha)
        self.rcs("artifacts", "rm", other_sha)

    def test_tasks_create_with_artifacts(self):
        """--artifact NAME=ARTIFACT names an artifact by ident, short ident or name; checked
        before anything is sent."""
        path, sha = self.artifact_file(4096)
        aname = "img-" + uuid.uuid4().hex[:6]
        self.rcs("artifacts", "upload", path, "--name", aname)
        base = ("tasks", "create", "--name", "Upd-" + aname, "--script", "echo")
        before = self.api_get("/tasks?per_page=1&hide=true")["total_items"]
        for args, code, msg in (
                (("--artifact", "Fw=" + aname), 2, "its NAME is 1 to 64 of a-z 0-9 _ . -"),
                (("--artifact", "fw"), 2, "write it NAME=ARTIFACT"),
                (("--artifact", "fw=" + aname, "--artifact", "fw=" + aname), 2,
                 "'fw' is given twice"),
                (tuple(a for i in range(17) for a in ("--artifact", "a%d=%s" % (i, aname))), 2,
                 "at most 16 artifacts"),
                (("--artifact", "fw=nothing-of-this-name"), 3,
                 "no artifact named 'nothing-of-this-name'")):
            _, err = self.rcs(*base, *args, code=code)
            self.assertIn(msg, err)
        self.assertEqual(self.api_get("/tasks?per_page=1&hide=true")["total_items"], before)
        p = subprocess.run([RCS, *base, "--artifact", "fw=" + aname, "--artifact",
                            "cfg=" + sha[-8:], "--json"], capture_output=True, text=True,
                           env=self.env(), timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        task = json.loads(p.stdout)
        want = {"ident": "sha256:" + sha, "size": 4096, "name": aname}
        self.assertEqual(task["artifacts"], {"fw": want, "cfg": want})
        out, _ = self.rcs("tasks", "show", task["ident"])
        self.assertIn("fw: %s, 4.0 KiB, sha256:%s" % (aname, sha), out)
        out, _ = self.rcs("artifacts", "show", aname)
        self.assertRegex(out, r"(?m)^used_by +Upd-%s \(%s\)$" % (aname, task["ident"]))
        _, err = self.rcs("artifacts", "rm", aname, code=3)
        self.assertIn("artifact_in_use, HTTP 409", err)
        self.assertIn("  Upd-%s (%s)" % (aname, task["ident"]), err)
        out, _ = self.rcs("tasks", "update", task["ident"], "--no-artifacts")
        self.assertIn("version 2", out)
        self.rcs("artifacts", "rm", aname)

    # -- watch -------------------------------------------------------------------------------

    def run_pty(self, args, cols=100, rows=30, timeout=60):
        """Runs rcs with stdout, stderr and stdin on a pseudo-terminal of cols x rows;
        returns (exit code, what it wrote)."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        p = subprocess.Popen([RCS, *args], stdin=slave, stdout=slave, stderr=slave,
                             env=self.env(TERM="xterm"), close_fds=True)
        os.close(slave)
        out = b""
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                r, _, _ = select.select([master], [], [], 0.5)
                if r:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break  # EIO: the other side is closed
                    if not chunk:
                        break
                    out += chunk
                elif p.poll() is not None:
                    break
            rc = p.wait(timeout=max(1, deadline - time.time()))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
        return rc, out.decode("utf-8", "replace")

    def test_watch_in_a_terminal_redraws_bars(self):
        ans = self.rcs_json("send", "Sleepy", "--tag", "site-a", "--group", "tty",
                            "--var", "delay=2")
        rc, out = self.run_pty(["watch", ans["group"]["ident"]])
        self.assertEqual(rc, 0, out)
        self.assertIn("\x1b[?25l", out)  # the cursor hidden, then shown again
        self.assertIn("\x1b[?25h", out)
        self.assertRegex(out, r"\x1b\[\d+A")  # redrawn in place: cursor up
        self.assertRegex(out, r"group tty  \d/2 ended")
        self.assertRegex(out, r"terminated\s+\[#+\]\s+2/2")
        self.assertRegex(out, r"edge_running\s+\[[#.]+\]\s+\d/2")
        self.assertIn("group tty: completed, terminated 2", out)
        for line in out.replace("\x1b[2K", "").split("\n"):
            self.assertLessEqual(len(line.split("\r")[-1]), 100)
        # send --wait on a terminal draws the same
        rc, out = self.run_pty(["send", "Sleepy", "--device", "pump-3", "--var", "delay=1",
                                "--wait"])
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"\x1b\[\d+A")
        self.assertRegex(out, r"terminated\s+\[#+\]\s+1/1")

    def test_watch_without_terminal_json_lines(self):
        ans = self.rcs_json("send", "Sleepy", "--tag", "site-a", "--group", "nd",
                            "--var", "delay=1")
        out, _ = self.rcs("watch", ans["group"]["ident"], "--json")
        recs = [json.loads(l) for l in out.splitlines()]
        self.assertGreaterEqual(len(recs), 2)
        self.assertEqual(recs[-1], self.api_get("/groups/" + ans["group"]["ident"]))
        self.assertEqual(recs[-1]["statuses"], {"terminated": 2})
        self.assertEqual(len(recs), len(set(json.dumps(r, sort_keys=True) for r in recs)))

    def test_watch_interrupted_and_unknown(self):
        ans = self.rcs_json("send", "Echo", "--tag", "site-b", "--group", "held",
                            "--schedule", "+1h")
        p = subprocess.Popen([RCS, "watch", ans["group"]["ident"]], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env())
        wait_for(lambda: p.stdout.readline(), timeout=10, what="a first line")
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 130)
        self.assertIn("group held: interrupted, pending 1", out)
        self.rcs("jobs", "cancel", ans["items"][0]["ident"])
        _, err = self.rcs("watch", str(uuid.uuid4()), code=3)
        self.assertIn("no such group", err)
        # the API going away during a watch: retried, then exit 3, no hang
        # (covered without a stop of the shared coordinator: a port nobody listens on)
        _, err = self.rcs("watch", ans["group"]["ident"], code=3,
                          env=self.env(RCS_URL="http://127.0.0.1:%d" % free_port()))
        self.assertIn("cannot reach the API", err)

    # -- bash completion ---------------------------------------------------------------------

    def complete(self, *words):
        """COMPREPLY of the completion function for the command line words (the last one
        being completed)."""
        script = 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _rcs; ' \
                 'printf "%s\\n" "${COMPREPLY[@]}"'
        p = subprocess.run(["bash", "-c", script, "bash", COMPLETION, "rcs", *words],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [w for w in p.stdout.splitlines() if w]

    def test_bash_completion(self):
        p = subprocess.run(["bash", "-n", COMPLETION], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.complete("gr"), ["groups"])
        self.assertEqual(self.complete("groups", ""), ["list", "show", "pause", "resume",
                                                      "cancel"])
        self.assertEqual(self.complete("--json", "devices", "t"), ["tag"])
        self.assertEqual(self.complete("devices", "list", "--online", "t"), ["true"])
        # the options of every subcommand are those its --help lists
        import re
        for words in SUBCOMMANDS:
            helptext, _ = self.rcs(*words, "--help")
            want = sorted(set(re.findall(r"(?m)^  (--[a-z0-9-]+)", helptext)))
            got = sorted(set(self.complete(*words, "--")))
            self.assertEqual(got, want, words)


class FakeApi:
    """An HTTP server on a free loopback port playing the API from a script: answers[(method,
    path)] is a list of (status, body) handed out in turn (the last one repeats); requests
    records (method, path, headers, parsed body) of each request. stop() closes the port."""

    def __init__(self, answers):
        import http.server
        import threading
        fake = self
        self.answers = {k: list(v) for k, v in answers.items()}
        self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def handle_one(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                fake.requests.append((self.command, self.path, dict(self.headers),
                                      json.loads(raw) if raw else None))
                queue = fake.answers.get((self.command, self.path.split("?")[0]))
                status, body = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else \
                    (404, {"error": {"code": "not_found", "message": "no such resource"}})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = handle_one

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class RcsCliFakeApiTest(unittest.TestCase):
    """What needs an API this repository's coordinator doesn't have (rollouts: docs/cli.md
    "Rollouts"), or one that goes away: a scripted HTTP server stands for it."""

    TASK = str(uuid.uuid4())
    GROUP = str(uuid.uuid4())

    def rcs(self, fake, *args, code=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCS_")}
        env.update(RCS_URL=fake.url, RCS_API_KEY="rcs_k", HOME=tempfile.gettempdir(),
                   TERM="dumb")
        p = subprocess.run([RCS, *args], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, code, "rcs %s: exit %d\nstdout: %s\nstderr: %s" % (
            " ".join(args), p.returncode, p.stdout, p.stderr))
        return p.stdout, p.stderr

    def group(self, **kw):
        g = {"ident": self.GROUP, "name": "r", "created_user": "a", "created_at": 1,
             "task_ident": self.TASK, "total": 4, "statuses": {}}
        g.update(kw)
        return g

    def test_rollout_options_in_the_send_body(self):
        task = {"ident": self.TASK, "name": "T", "variables_info": {}}
        dev = str(uuid.uuid4())
        fake = FakeApi({("GET", "/v3/commands/tasks/" + self.TASK): [(200, task)],
                        ("POST", "/v3/commands/tasks/%s/jobs/list" % self.TASK): [
                            (201, {"group": {"ident": self.GROUP, "name": "r",
                                             "created_user": "a"}, "items": [],
                                   "rejected": []})],
                        ("POST", "/v3/commands/tasks/%s/jobs/tags" % self.TASK): [
                            (201, {"group": None, "items": [], "rejected": []})]})
        try:
            # one device, but rollout options: a list send, with every member of docs/cli.md
            self.rcs(fake, "send", self.TASK, "--device", dev, "--rollout-per-minute", "30",
                     "--abort-percent", "10", "--abort-min-finished", "20", "--retries", "2",
                     "--group", "r")
            method, path, headers, body = fake.requests[-1]
            self.assertEqual((method, path), ("POST",
                                              "/v3/commands/tasks/%s/jobs/list" % self.TASK))
            self.assertEqual(headers.get("api-key"), "rcs_k")
            self.assertEqual(body, {"ident_list": [dev], "group_name": "r",
                                    "rollout": {"max_per_minute": 30},
                                    "abort": {"failure_percent": 10, "min_finished": 20},
                                    "retry": {"max_attempts": 3}})
            self.rcs(fake, "send", self.TASK, "--tag", "t", "--exponential", "5,1.5,7",
                     "--window", "daily/00:00/1440", "--window-utc-offset", "-300",
                     "--retries", "0", "--retry-backoff", "0", "--retry-backoff-factor", "10",
                     "--continuous")
            self.assertEqual(fake.requests[-1][3], {
                "tag": "t", "continuous": True,
                "rollout": {"exponential": {"base_per_minute": 5, "factor": 1.5,
                                            "after_succeeded": 7}},
                "window": {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                           "start": "00:00", "duration_min": 1440, "utc_offset_min": -300},
                "retry": {"max_attempts": 1, "backoff_s": 0, "backoff_factor": 10}})
            self.rcs(fake, "send", self.TASK, "--tag", "t", "--abort-percent", "0",
                     "--allow-empty")
            self.assertEqual(fake.requests[-1][3], {"tag": "t", "abort": {"failure_percent": 0}})
            _, err = self.rcs(fake, "send", self.TASK, "--tag", "t", code=1)
            self.assertIn("no device holds tag 't'", err)
        finally:
            fake.stop()

    def test_groups_list_progress_from_the_list(self):
        """A list whose items carry counts: progress from them, no request per group; a list
        without them: one GET /groups/<id> per row."""
        other = str(uuid.uuid4())
        bare = self.group(ident=other, name="s", status="paused")
        del bare["statuses"], bare["total"]
        page = {"page": 1, "per_page": 50, "total_pages": 1, "total_items": 2,
                "items": [self.group(status="running", counts={"terminated": 3, "edge_error": 1,
                                                               "pending": 6}),
                          bare]}
        fake = FakeApi({("GET", "/v3/commands/groups"): [(200, page)],
                        ("GET", "/v3/commands/groups/" + other): [
                            (200, self.group(ident=other, name="s", status="paused", total=7,
                                             statuses={"cancelled": 2, "initial": 3}))]})
        try:
            out, _ = self.rcs(fake, "groups", "list")
            rows = out.splitlines()[1:]
            self.assertRegex(rows[0], r"^\S+ +r +\S+ +running +4/10 ")
            self.assertRegex(rows[1], r"^\S+ +s +\S+ +paused +2/7 ")
            self.assertEqual([r[1] for r in fake.requests],
                             ["/v3/commands/groups", "/v3/commands/groups/" + other])
        finally:
            fake.stop()

    def test_groups_pause_resume_cancel_and_status(self):
        base = "/v3/commands/groups/" + self.GROUP
        fake = FakeApi({("PATCH", base + "/pause"): [(200, self.group(status="paused"))],
                        ("PATCH", base + "/resume"): [(200, self.group(status="running"))],
                        ("PATCH", base + "/cancel"): [(200, self.group(status="cancelled"))],
                        ("GET", base): [(200, self.group(
                            status="aborted", reason="40 % failed",
                            counts={"terminated": 3, "edge_error": 1}))]})
        try:
            for action, state in (("pause", "paused"), ("resume", "running"),
                                  ("cancel", "cancelled")):
                out, _ = self.rcs(fake, "groups", action, self.GROUP)
                self.assertEqual(out, "group %s: %s\n" % (self.GROUP, state))
                self.assertEqual(fake.requests[-1][:2], ("PATCH", base + "/" + action))
            out, _ = self.rcs(fake, "groups", "show", self.GROUP)
            self.assertRegex(out, r"(?m)^status\s+aborted$")
            self.assertRegex(out, r"(?m)^reason\s+40 % failed$")
            self.assertRegex(out, r"(?m)^edge_error\s+1$")
            out, _ = self.rcs(fake, "watch", self.GROUP, code=1)
            self.assertIn("group r: aborted, terminated 3, edge_error 1", out)
        finally:
            fake.stop()

    def test_group_name_of_many_groups(self):
        """A name 7 groups share: the API is asked newest first, the first is taken, four
        others are named and the rest counted."""
        idents = [self.GROUP] + [str(uuid.uuid4()) for _ in range(4)]
        page = {"page": 1, "per_page": 5, "total_pages": 2, "total_items": 7,
                "items": [self.group(ident=i, name="many") for i in idents]}
        fake = FakeApi({("GET", "/v3/commands/groups"): [(200, page)],
                        ("GET", "/v3/commands/groups/" + self.GROUP): [
                            (200, self.group(name="many", status="completed",
                                             counts={"terminated": 4}))]})
        try:
            out, err = self.rcs(fake, "groups", "show", "many")
            self.assertRegex(out, r"(?m)^ident\s+%s$" % self.GROUP)
            self.assertEqual(err, "rcs: groups show: group many: %s (the most recent of 7: "
                             "also %s, ...)\n" % (self.GROUP, ", ".join(idents[1:])))
            self.assertEqual(fake.requests[0][:2], (
                "GET", "/v3/commands/groups?sort=-created_at&per_page=5&name=many"))
        finally:
            fake.stop()

    def test_watch_follows_the_group_status(self):
        # "running" with every job ended is not the end (a retry may come): "completed" is
        base = "/v3/commands/groups/" + self.GROUP
        fake = FakeApi({("GET", base): [
            (200, self.group(status="running", counts={"pending": 4})),
            (200, self.group(status="running", counts={"terminated": 4})),
            (200, self.group(status="completed", counts={"terminated": 4}))]})
        try:
            out, _ = self.rcs(fake, "watch", self.GROUP)
            lines = out.splitlines()
            self.assertEqual(len(lines), 4, out)
            self.assertIn("0/4 ended  running", lines[0])
            self.assertIn("4/4 ended  running", lines[1])
            self.assertIn("4/4 ended  completed", lines[2])
            self.assertEqual(lines[3], "group r: completed, terminated 4")
        finally:
            fake.stop()

    def test_device_names_read_with_few_requests(self):
        """A jobs table reads its device names once: one page of GET /devices for many
        devices, one GET each for a few; short idents grow where two share their end."""
        devs = [str(uuid.uuid4()) for _ in range(12)]
        jobs = [str(uuid.uuid4()) for _ in range(12)]
        # the last 9 digits of another job's, and not its 10th from the end
        jobs[1] = jobs[1][:-10] + ("1" if jobs[0][-10] == "0" else "0") + jobs[0][-9:]
        job = lambda i: {"ident": jobs[i], "task": {"name": "T"}, "entity_ident": devs[i],
                         "status": "terminated", "update_at": 1, "response": "r%d" % i}
        page = lambda items: {"page": 1, "per_page": 50, "total_pages": 1,
                              "total_items": len(items), "items": items}
        fake = FakeApi({
            ("GET", "/v3/commands/jobs"): [(200, page([job(i) for i in range(12)]))],
            ("GET", "/v3/commands/devices"): [(200, page(
                [{"entity_ident": d, "name": "dev-%d" % i} for i, d in enumerate(devs)]))]})
        try:
            out, _ = self.rcs(fake, "jobs", "list")
        finally:
            fake.stop()
        rows = out.splitlines()[1:]
        self.assertEqual(rows[0].split()[:4], [jobs[0][-10:], "T", devs[0][-8:], "dev-0"])
        self.assertEqual(rows[1].split()[0], jobs[1][-10:])
        self.assertEqual(rows[5].split()[:4], [jobs[5][-10:], "T", devs[5][-8:], "dev-5"])
        gets = [r[1] for r in fake.requests if r[0] == "GET"]
        self.assertEqual(len(gets), 2, gets)
        self.assertTrue(gets[1].startswith("/v3/commands/devices?"), gets)
        # three devices: one GET each, no list
        fake = FakeApi({
            ("GET", "/v3/commands/jobs"): [(200, page([job(i) for i in range(3)]))],
            **{("GET", "/v3/commands/devices/" + d): [(200, {"entity_ident": d,
                                                             "name": "dev-%d" % i})]
               for i, d in enumerate(devs[:3])}})
        try:
            out, _ = self.rcs(fake, "jobs", "list")
        finally:
            fake.stop()
        self.assertIn("%s dev-2" % devs[2][-8:], out)
        self.assertEqual(sorted(r[1] for r in fake.requests if "/devices" in r[1]),
                         sorted("/v3/commands/devices/" + d for d in devs[:3]))

    def test_short_ident_on_an_older_coordinator(self):
        fake = FakeApi({("GET", "/v3/commands/jobs"): [(400, {"error": {
            "code": "invalid_parameter", "details": {"field": "ident_prefix"},
            "message": "unknown query parameter 'ident_prefix'"}})]})
        try:
            _, err = self.rcs(fake, "jobs", "show", "01a22365-c66", code=3)
        finally:
            fake.stop()
        self.assertIn("unknown query parameter 'ident_prefix'", err)
        self.assertIn("a short ident needs a coordinator that takes ident_prefix", err)

    # artifacts on a coordinator with task artifacts and in-use refusals (docs/cli.md
    # "Artifacts"), played by the fake

    A1 = hashlib.sha256(b"one").hexdigest()
    A2 = hashlib.sha256(b"two").hexdigest()
    A3 = hashlib.sha256(b"three").hexdigest()

    def art(self, sha, name, used_by=()):
        return {"ident": "sha256:" + sha, "sha256": sha, "size": 1234567, "name": name,
                "created_at": 1, "created_user": "a", "used_by": list(used_by)}

    def page(self, *items):
        return {"page": 1, "per_page": 50, "total_pages": 1, "total_items": len(items),
                "items": list(items)}

    def test_tasks_create_artifacts_body(self):
        """Each --artifact resolved to its ident (by name, by short ident, as given), the
        task's "artifacts" as docs/api.md "Artifacts" takes it; update --no-artifacts sends
        {}; tasks show lists them."""
        arts = "/v3/commands/artifacts"
        task = {"ident": self.TASK, "name": "Upd", "version": 1, "artifacts": {
            "fw": {"ident": "sha256:" + self.A1, "size": 1234567, "name": "firmware"},
            "cfg": {"ident": "sha256:" + self.A2, "size": 10, "name": "conf"}}}
        fake = FakeApi({("GET", arts): [(200, self.page(self.art(self.A1, "firmware"))),
                                        (200, self.page()),  # no artifact named A2[:10]
                                        (200, self.page(self.art(self.A1, "firmware"),
                                                        self.art(self.A2, "conf")))],
                        ("POST", "/v3/commands/tasks"): [(201, task)],
                        ("GET", "/v3/commands/tasks/" + self.TASK): [(200, task)],
                        ("PATCH", "/v3/commands/tasks/" + self.TASK): [(200, dict(
                            task, version=2, artifacts={}))]})
        try:
            self.rcs(fake, "tasks", "create", "--name", "Upd", "--script", "update",
                     "--artifact", "fw=firmware", "--artifact", "cfg=" + self.A2[:10],
                     "--artifact", "raw=sha256:" + self.A3)
            lookups = [r[1] for r in fake.requests if r[0] == "GET"]
            self.assertEqual(lookups, [arts + "?per_page=5&name=firmware",
                                       arts + "?per_page=5&name=" + self.A2[:10],
                                       arts + "?per_page=500&page=1"])
            method, path, headers, body = fake.requests[-1]
            self.assertEqual((method, path), ("POST", "/v3/commands/tasks"))
            self.assertEqual(body, {"name": "Upd", "script": "update", "artifacts": {
                "fw": "sha256:" + self.A1, "cfg": "sha256:" + self.A2,
                "raw": "sha256:" + self.A3}})
            self.rcs(fake, "tasks", "update", self.TASK, "--no-artifacts")
            self.assertEqual(fake.requests[-1][3], {"artifacts": {}})
            _, err = self.rcs(fake, "tasks", "update", self.TASK, "--no-artifacts",
                              "--artifact", "fw=" + self.A1, code=2)
            self.assertIn("--artifact or --no-artifacts, not both", err)
            out, _ = self.rcs(fake, "tasks", "show", self.TASK)
            self.assertIn("artifacts       fw: firmware, 1.2 MiB, sha256:%s\n"
                          "                cfg: conf, 10 B, sha256:%s\n" % (self.A1, self.A2),
                          out)
        finally:
            fake.stop()

    def test_artifacts_rm_in_use(self):
        """409 artifact_in_use: the API's message, then the tasks that pin the artifact by
        name, or that a job not yet ended needs it."""
        path = "/v3/commands/artifacts/sha256:" + self.A1
        in_use = (409, {"error": {"code": "artifact_in_use",
                                  "message": "the artifact is in use"}})
        other = str(uuid.uuid4())
        fake = FakeApi({("GET", path): [(200, self.art(self.A1, "fw", [self.TASK, other]))],
                        ("GET", "/v3/commands/artifacts"): [(200, self.page(
                            self.art(self.A1, "fw", [self.TASK, other])))],
                        ("DELETE", path): [in_use],
                        ("GET", "/v3/commands/tasks/" + self.TASK): [(200, {
                            "ident": self.TASK, "name": "Updater"})]})
        try:
            _, err = self.rcs(fake, "artifacts", "rm", self.A1, code=3)
            self.assertIn("rcs: artifacts rm: the artifact is in use (artifact_in_use, "
                          "HTTP 409)", err)
            self.assertIn("rm: the tasks that pin it (give them other artifacts", err)
            self.assertIn("\n  Updater (%s)\n  %s\n" % (self.TASK, other), err)
            out, _ = self.rcs(fake, "artifacts", "show", self.A1)
            self.assertIn("used_by         Updater (%s)\n                %s\n"
                          % (self.TASK, other), out)
            out, _ = self.rcs(fake, "artifacts", "list")
            self.assertRegex(out.splitlines()[1], r"^%s +fw +1\.2 MiB +2 tasks +\S"
                             % self.A1[:8])
        finally:
            fake.stop()
        fake = FakeApi({("GET", path): [(200, self.art(self.A1, "fw"))],
                        ("DELETE", path): [in_use]})
        try:
            _, err = self.rcs(fake, "artifacts", "rm", "sha256:" + self.A1, code=3)
            self.assertIn("no task pins it now: a job that has not ended needs it", err)
        finally:
            fake.stop()

    def test_artifact_short_ident_ambiguous(self):
        one, two = "abcdef12" + self.A1[8:], "abcdef12" + self.A2[8:]
        fake = FakeApi({("GET", "/v3/commands/artifacts"): [
            (200, self.page()),  # no artifact of that name
            (200, self.page(self.art(one, "a"), self.art(two, "b")))]})
        try:
            _, err = self.rcs(fake, "artifacts", "show", "ABCDEF12", code=3)
            out, _ = self.rcs(fake, "artifacts", "list")
        finally:
            fake.stop()
        self.assertIn("artifact ABCDEF12 is ambiguous: 2 match: sha256:abcdef12%s..., "
                      "sha256:abcdef12%s... (give more of its digits)"
                      % (self.A1[8:16], self.A2[8:16]), err)
        # the table's short idents tell the two apart
        self.assertEqual([l.split()[0] for l in out.splitlines()[1:]],
                         [one[:9], two[:9]] if one[8] != two[8] else [one[:10], two[:10]])

    def test_jobs_show_download_progress(self):
        job = str(uuid.uuid4())
        rec = {"ident": job, "status": "edge_running", "entity_ident": str(uuid.uuid4()),
               "task": {"ident": self.TASK, "name": "Upd", "version": 1},
               "progress": {"done": 44040192, "total": 104857600}}
        fake = FakeApi({("GET", "/v3/commands/jobs/" + job): [(200, rec)]})
        try:
            out, _ = self.rcs(fake, "jobs", "show", job)
        finally:
            fake.stop()
        self.assertIn("\nprogress        42 % (42.0 MiB of 100.0 MiB)\n", out)

    def test_watch_when_the_api_goes_away(self):
        base = "/v3/commands/groups/" + self.GROUP
        fake = FakeApi({("GET", base): [(200, self.group(statuses={"pending": 4}))]})
        p = subprocess.Popen([RCS, "watch", self.GROUP, "--url", fake.url, "--api-key", "k"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertIn("0/4 ended", p.stdout.readline())
            fake.stop()
            t0 = time.time()
            out, err = p.communicate(timeout=30)
            # retried (WATCH_RETRIES, a second apart), then a clear end
            self.assertEqual(p.returncode, 3, err)
            self.assertGreater(time.time() - t0, 2)
            self.assertIn("cannot reach the API", err)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
            fake.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
