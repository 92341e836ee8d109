#!/usr/bin/env python3
"""Broker access control as shipped (deploy/README.md, deploy/mosquitto/rcs.conf and
rcs.acl, tools/provision-device.sh, docs/mqtt.md "Broker configuration").

A real mosquitto runs with a configuration generated from deploy/mosquitto/rcs.conf (only
the listener, the persistence location, the password file and the log destination are
rewritten to the test's directory) and a copy of the ACL file as shipped, to which
tools/provision-device.sh appends the blocks of coordinator accounts. The coordinator's
account (one of several: --node-id n1, rcs-coordinator-n1) and the devices A and B
(created in a real coordinator's inventory through the REST API) are provisioned with
tools/provision-device.sh, which also reloads the broker (--broker-pid). The coordinator
logs in with its account (on its own SQLite database: the plain subscription); a second
coordinator's account (n2) gets its rights the same way, once however often it is made,
and n2, on PostgreSQL, finds by its probe the shared subscription delivered under the ACL;
no device reads the probe's topics; the single account rcs-coordinator still works.

Checked with paho clients, by effects (mosquitto 2.0 denies silently: a denied PUBLISH is
acknowledged and dropped, a denied subscription is granted in the SUBACK but delivers
nothing): anonymous and bad passwords are refused; device A receives none of B's jobs,
cancels, state or the events feed, whatever it subscribes to ('#', rcs/v1/+/+/jobs/#, B's
exact topics); A's status report, state, envelope and cancel on B's topics change nothing;
A connecting with client id B (or '#', '+') gets client id A: B's session stays; accounts
named '+', '#', 'x#', '+/+', 'events' or with a '/' ('<B>/jobs', 'events/jobs', ...) get
nothing of anyone's and reach no one (rcs.acl's deny lines); the monitoring
account reads events and states only; a real rcs-agent with A's credentials runs a signed
job to terminated and its presence reaches the coordinator. Artifacts over MQTT
(docs/mqtt.md): the coordinator's second account (<its username>-chunks, made by the
script with the same password) answers A's own get on A's topics, with an error or the
bytes; A reads none of B's artifact topics, its get on B's topic reaches neither B nor the
coordinator, and A cannot write chunks (data, error) even to itself; the shipped
configuration bounds a client's queue in bytes too (max_queued_bytes).

Run (Debian's python3: it has paho-mqtt 1.6.1):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_broker_acl.py
RCS_KEEP_TMP=1 keeps the directory (broker, coordinator and agent logs, password file).
"""

import json
import concurrent.futures
import os
import shutil
import subprocess
import threading
import time
import unittest
import uuid

import paho.mqtt.client as mqtt

import pg_server
from rcs_fixture import StackTest, note
from rcs_harness import (SOURCE_DIR, Agent, Coordinator, FakeDevice, Mosquitto, make_ec_keypair,
                         wait_for)

DEPLOY_DIR = os.path.join(SOURCE_DIR, "deploy", "mosquitto")
SHIPPED_CONF = os.path.join(DEPLOY_DIR, "rcs.conf")
SHIPPED_ACL = os.path.join(DEPLOY_DIR, "rcs.acl")
PROVISION = os.path.join(SOURCE_DIR, "tools", "provision-device.sh")
TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
# how long a denied message gets to show up anyway, after an ordered marker arrived
GRACE = 0.4


# ---------------------------------------------------------------------------------------
# the broker, configured from the shipped files


def shipped_directives():
    """The active (non-comment) lines of deploy/mosquitto/rcs.conf as (key, value)."""
    out = []
    with open(SHIPPED_CONF) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(" ")
            out.append((key, value.strip()))
    return out


class ShippedBroker(Mosquitto):
    """mosquitto with deploy/mosquitto/rcs.conf, made to run in workdir on a free port:
    the listener, persistence_location, password_file and log_dest are rewritten, the ACL
    file is the shipped one; every other line is kept as it is."""

    REWRITTEN = ("listener", "persistence_location", "password_file", "acl_file", "log_dest",
                 "pid_file", "user")

    def __init__(self, workdir, password_file, acl_file):
        super().__init__(workdir)
        self.password_file = password_file
        lines = []
        log_dest = False
        for key, value in shipped_directives():
            if key == "listener":
                lines.append("listener %d 127.0.0.1" % self.port)
            elif key == "persistence_location":
                lines.append("persistence_location %s/" % workdir)
            elif key == "password_file":
                lines.append("password_file %s" % password_file)
            elif key == "acl_file":
                lines.append("acl_file %s" % acl_file)
            elif key == "log_dest":
                if not log_dest:
                    lines.append("log_dest stderr")
                log_dest = True
            elif key in ("pid_file", "user"):
                continue
            else:
                if "/etc/" in value or "/var/" in value:
                    raise AssertionError("rcs.conf: %s %s is a path the test does not "
                                         "rewrite" % (key, value))
                lines.append("%s %s" % (key, value))
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # as root, mosquitto would drop to the user "mosquitto", who cannot read the
            # private workdir: stay who we are
            lines.append("user root")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


# ---------------------------------------------------------------------------------------
# MQTT clients


class Client:
    """A paho client (MQTT 3.1.1) that records its CONNACK, its disconnects and every
    message it receives. It does not reconnect by itself: a client the broker drops stays
    disconnected (so two sessions with one client id cannot take turns)."""

    def __init__(self, broker, username, password, client_id, clean_session=True,
                 state_topic=None):
        self.broker = broker
        self.client_id = client_id
        self.c = mqtt.Client(client_id=client_id, clean_session=clean_session,
                             protocol=mqtt.MQTTv311)
        if username is not None:
            self.c.username_pw_set(username, password)
        self.lock = threading.Lock()
        self.messages = []  # (topic, payload bytes, retain)
        self.connacks = []
        self.disconnects = 0
        self.subacks = {}
        self.state_topic = state_topic
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = self._on_disconnect
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_subscribe

    def _on_connect(self, client, userdata, flags, rc):
        with self.lock:
            self.connacks.append(rc)

    def _on_disconnect(self, client, userdata, rc):
        with self.lock:
            self.disconnects += 1
        client.disconnect()  # ends paho's loop instead of reconnecting

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((msg.topic, msg.payload, msg.retain))

    def _on_subscribe(self, client, userdata, mid, granted):
        with self.lock:
            self.subacks[mid] = granted

    def connect(self, timeout=10):
        """Connects; returns the CONNACK code (0: accepted)."""
        self.c.connect("127.0.0.1", self.broker.port, keepalive=30)
        self.c.loop_start()
        wait_for(lambda: self.connacks, timeout=timeout, what="CONNACK for %s" % self.client_id)
        return self.connacks[0]

    def close(self):
        try:
            self.c.disconnect()
        finally:
            self.c.loop_stop()

    def subscribe(self, *filters):
        """Subscribes (QoS 1) and waits for the SUBACK; returns the granted QoS list."""
        rc, mid = self.c.subscribe([(f, 1) for f in filters])
        if rc != mqtt.MQTT_ERR_SUCCESS:
            raise AssertionError("subscribe failed: %d" % rc)
        return wait_for(lambda: self.subacks.get(mid), what="SUBACK")

    def publish(self, topic, payload, retain=False):
        """Publishes with QoS 1 and waits for the broker's PUBACK (which mosquitto sends
        for a denied message too): afterwards the broker has routed or dropped it."""
        if not isinstance(payload, (bytes, str)):
            payload = json.dumps(payload)
        info = self.c.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(10)
        if not info.is_published():
            raise AssertionError("no PUBACK for %s" % topic)

    def received(self, predicate=None):
        with self.lock:
            msgs = list(self.messages)
        return [m for m in msgs if predicate is None or predicate(m)]

    def connected(self):
        return self.c.is_connected()


class AuthDevice(FakeDevice):
    """The harness's scripted device (client id = entity_ident, persistent session,
    retained state, Last Will) logging in with its broker account."""

    def __init__(self, broker, client_root, entity_ident, password, auto=True, tags=()):
        super().__init__(broker, client_root, entity_ident, auto=auto, tags=tags)
        self.client.username_pw_set(entity_ident, password)
        self.client.on_disconnect = self._on_disconnect
        self.connacks = []
        self.disconnects = 0
        self.raw = []   # (topic, payload) of every message received
        self.bad = []   # (topic, payload, error) of those that are no envelope or cancel

    def _on_connect(self, client, userdata, flags, rc):
        self.connacks.append(rc)
        if rc == 0:
            super()._on_connect(client, userdata, flags, rc)

    def _on_disconnect(self, client, userdata, rc):
        self.disconnects += 1
        self.connected = False

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.raw.append((msg.topic, msg.payload))
        try:
            super()._on_message(client, userdata, msg)
        except (ValueError, KeyError, TypeError) as e:
            with self.lock:
                self.bad.append((msg.topic, msg.payload, repr(e)))

    def foreign(self):
        """Messages that are not an envelope or cancel of a job the coordinator made."""
        with self.lock:
            return list(self.bad)

    def publish_state(self, online=True, tags=None):
        self.client.publish(self.base + "/state", json.dumps(
            {"v": 1, "online": online, "tags": list(self.tags if tags is None else tags),
             "agent_version": "fake", "ts": int(time.time())}),
            qos=1, retain=True).wait_for_publish(10)

    def cancels_of(self, job):
        with self.lock:
            return [c for c in self.cancels if c.get("job") == job]

    def envelopes_of(self, job):
        with self.lock:
            return [e for e in self.envelopes if e["job"] == job]


# ---------------------------------------------------------------------------------------


def provision(*args, api_key=None):
    """Runs tools/provision-device.sh with /bin/sh; returns its configuration lines as a
    dict (key -> value)."""
    env = dict(os.environ)
    if api_key is not None:
        env["RCS_API_KEY"] = api_key
    p = subprocess.run(["/bin/sh", PROVISION, *args], capture_output=True, text=True,
                       timeout=60, env=env)
    if p.returncode != 0:
        raise AssertionError("provision-device.sh %s failed (%d): %s" % (
            " ".join(args), p.returncode, p.stderr))
    out = {}
    for line in p.stdout.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition(" ")
            out[k] = v
    return out


class AclHelpers:
    """What BrokerAclTest and NatsAclTest (test_nats_acl.py) ask of the API and the
    protocol; the waits' default timeouts are each class's WAIT_DEVICE and WAIT_JOB."""

    def topic(self, entity, *rest):
        return "/".join(["rcs/v1", self.client_root, entity] + list(rest))

    def device(self, ident):
        r = self.admin.get("/devices/" + ident)
        self.assertEqual(r.status, 200, r)
        return r.json

    def wait_device(self, ident, timeout=None, **fields):
        timeout = timeout or self.WAIT_DEVICE
        return wait_for(lambda: all(self.device(ident).get(k) == v for k, v in fields.items())
                        and self.device(ident), timeout=timeout,
                        what="device %s with %r" % (ident, fields))

    def wait_job(self, ident, statuses=TERMINAL, timeout=None):
        timeout = timeout or self.WAIT_JOB
        if isinstance(statuses, str):
            statuses = (statuses,)
        return wait_for(lambda: self.job(ident)["status"] in statuses and self.job(ident),
                        timeout=timeout, what="job %s in %s" % (ident, statuses))

    def connect_b(self, broker, port, auto):
        """Device B with its account (an AuthDevice tagged b) on broker at port, logged in;
        stopped at the end of the test."""
        d = AuthDevice(broker, self.client_root, self.b, self.B["mqtt_password"], auto=auto,
                       tags=["b"])
        self.fakes.append(d)
        d.client.connect("127.0.0.1", port, keepalive=30)
        d.client.loop_start()
        wait_for(lambda: d.connacks, what="B's CONNACK")
        self.assertEqual(d.connacks[0], 0, "B could not log in")
        wait_for(lambda: d.connected, what="B connected")

        def stop():
            if d.connected:
                d.stop()
            else:
                d.client.loop_stop()
        self.addCleanup(stop)
        return d

    def history(self, ident):
        r = self.admin.get("/jobs/%s/history" % ident)
        self.assertEqual(r.status, 200, r)
        return [h["status"] for h in reversed(r.json["items"])]

    def report(self, job, status, seq, response=None):
        return {"v": 1, "job": job, "status": status, "seq": seq, "ts": int(time.time()),
                "response": response}

    def envelope(self, entity, job):
        """A job envelope as an attacker would forge it (an unsigned command)."""
        return {"v": 1, "job": job, "client_root": self.client_root, "entity_ident": entity,
                "task": {"ident": str(uuid.uuid4()), "version": 1, "name": "forged"},
                "script": {"name": "x", "sha256": "0" * 64, "source": "return 1"},
                "constants": {}, "variables_info": {}, "variables": {}, "signature": None,
                "issued_at": int(time.time()), "expires_at": None, "timeout": 30}

    # artifacts over MQTT (docs/mqtt.md): A and B are connected clients of each device,
    # online, B subscribed to its own artifacts/#, A to its own (and whatever the broker
    # lets it try)
    def upload(self, data):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=30)
        try:
            c.request("POST", "/v3/commands/artifacts?name=acl.bin", body=data,
                      headers={"api-key": self.admin_key,
                               "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            body = json.loads(r.read())
            self.assertIn(r.status, (200, 201), body)
            return body["ident"][len("sha256:"):]
        finally:
            c.close()

    def check_artifact_topics(self, a, b):
        """A's own get answered, with the bytes and with an error, by the coordinator's
        -chunks account; A's get on B's topic reaches neither B nor the coordinator, and no
        chunk or error A writes reaches anyone, A itself included."""
        data = os.urandom(5000)
        sha = self.upload(data)
        r = self.admin.post("/tasks", {"name": "acl-art-" + uuid.uuid4().hex[:6],
                                       "script": "echo",
                                       "artifacts": {"blob": "sha256:" + sha}})
        self.assertEqual(r.status, 201, r)
        task = r.json
        ra = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": self.a})
        rb = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": self.b})
        self.assertEqual((ra.status, rb.status), (201, 201), (ra, rb))
        ja, jb = ra.json["ident"], rb.json["ident"]
        wait = self.WAIT_DEVICE

        def on(entity, tail):
            return lambda m: m[0] == self.topic(entity, "artifacts", sha, *tail.split("/"))

        def chunk(c, entity, job, offset, length):
            """The chunk c asked for on entity's topic, asked again until it comes (while a
            busy cluster's interest spreads: a get is QoS 0 on the way out)."""
            def come():
                got = c.received(on(entity, "data/%d" % offset))
                if not got:
                    c.publish(self.topic(entity, "artifacts", sha, "get"),
                              {"v": 1, "job": job, "offset": offset, "length": length})
                    time.sleep(0.5)
                return got
            return wait_for(come, timeout=wait, what="the chunk of %s" % entity)

        # A's own get: the bytes, from the coordinator's -chunks account
        got = chunk(a, self.a, ja, 0, 1000)
        self.assertEqual(got[0][1], data[:1000])
        # ...and an error answer (B's job on A's topic), asked again until it comes (QoS 0
        # both ways, as the chunks)
        def error_come():
            got = a.received(on(self.a, "error"))
            if not got:
                a.publish(self.topic(self.a, "artifacts", sha, "get"),
                          {"v": 1, "job": jb, "offset": 0, "length": 10})
                time.sleep(0.5)
            return got
        err = wait_for(error_come, timeout=wait, what="A's error answer")
        self.assertEqual(json.loads(err[0][1])["code"], "not_found")

        # A on B's topics: its get reaches neither B nor the coordinator; its forged chunks
        # and errors reach no one, not even itself
        a.publish(self.topic(self.b, "artifacts", sha, "get"),
                  {"v": 1, "job": jb, "offset": 0, "length": 1000})
        a.publish(self.topic(self.b, "artifacts", sha, "data", "0"), b"forged")
        a.publish(self.topic(self.b, "artifacts", sha, "error"),
                  {"v": 1, "job": jb, "code": "busy", "message": "forged"})
        a.publish(self.topic(self.a, "artifacts", sha, "data", "1000"), b"forged")
        # B's own get after them: once its answer came, A's would have come too
        chunk(b, self.b, jb, 1000, 10)
        time.sleep(GRACE)
        self.assertEqual({m[0] for m in b.received() if not m[0].endswith("/get")},
                         {self.topic(self.b, "artifacts", sha, "data", "1000")},
                         "B received what A forged, or an answer to A's get")
        self.assertFalse(b.received(lambda m: m[0].endswith("/get") and b'"offset": 0' in m[1]),
                         "B read A's get on its topic")
        self.assertFalse(a.received(lambda m: self.b in m[0]), "A read B's artifact topics")
        self.assertFalse(a.received(on(self.a, "data/1000")), "A wrote a chunk to itself")
        self.admin.patch("/jobs/%s/cancel" % ja)
        self.admin.patch("/jobs/%s/cancel" % jb)


class BrokerAclTest(AclHelpers, StackTest):
    """One broker with the shipped configuration, one coordinator with its own account,
    devices A and B, a monitoring account and accounts with wildcard-ish names."""

    workdir_prefix = "rcs-acl-"
    WAIT_DEVICE, WAIT_JOB = 10, 15  # seconds
    # accounts an administrator might create by mistake, all with one password
    ODD_PASSWORD = "odd-password-1"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        w = cls.workdir
        cls.pwfile = os.path.join(w, "rcs.passwd")

        # the coordinator's account first: the script creates the password file
        cls.acl = os.path.join(w, "rcs.acl")
        shutil.copyfile(SHIPPED_ACL, cls.acl)
        coord_acct = provision("--coordinator", "--node-id", "n1", "--password-file",
                               cls.pwfile, "--acl-file", cls.acl)
        assert coord_acct["mqtt_username"] == "rcs-coordinator-n1", coord_acct
        assert coord_acct["node_id"] == "n1", coord_acct
        cls.broker = cls.own(ShippedBroker(w, cls.pwfile, cls.acl)).start()

        cls.key, cls.pub = make_ec_keypair(w, "signing")
        cls.start_coordinator([
            "--mqtt", cls.broker.url, "--mqtt-username", coord_acct["mqtt_username"],
            "--mqtt-password", coord_acct["mqtt_password"], "--signing-key", cls.key,
            "--node-id", "n1", "--mqtt-shared-subscriptions", "auto"],
            connected="status reports: ",
            what="the coordinator connected to the broker with its account")

        # devices A and B: inventory record and broker account in one go
        pid = str(cls.broker.proc.pid)
        api = "http://127.0.0.1:%d" % cls.coord.port
        cls.A = provision("--api", api, "--name", "device A", "--tag", "acl",
                          "--password-file", cls.pwfile, "--broker-pid", pid,
                          "--broker-url", cls.broker.url, api_key=cls.admin_key)
        cls.B = provision("--api", api + "/v3/commands", "--name", "device B",
                          "--password-file", cls.pwfile, "--broker-pid", pid,
                          api_key=cls.admin_key)
        cls.a = cls.A["entity_ident"]
        cls.b = cls.B["entity_ident"]

        # accounts whose names contain wildcards or '/', or collide with a topic level
        cls.odd_users = ["+", "#", "x#", "+/+", "events", "events/jobs", "%s/jobs" % cls.b,
                         "%s/%s" % (cls.client_root, cls.b), "rcs/v1/%s" % cls.client_root]
        # on a copy renamed over the file, as the provisioning script does: the broker may
        # still be reloading for B, and mosquitto_passwd rewrites a file in place
        copy = cls.pwfile + ".odd"
        shutil.copy2(cls.pwfile, copy)
        for u in cls.odd_users:
            subprocess.run(["mosquitto_passwd", "-b", copy, u, cls.ODD_PASSWORD],
                           check=True, capture_output=True, timeout=30)
        os.replace(copy, cls.pwfile)
        # the monitoring account, the last one: once it can log in, all of them can
        cls.M = provision("--monitor", "--password-file", cls.pwfile, "--broker-pid", pid)
        wait_for(lambda: cls.try_login("rcs-monitor", cls.M["mqtt_password"]) == 0,
                 timeout=10, what="the broker reloaded its password file")
        cls.task = cls.admin.post("/tasks", {"name": "echo", "script": "echo"}).json
        assert cls.task.get("signature"), cls.task

    @classmethod
    def try_login(cls, username, password, client_id=None):
        c = Client(cls.broker, username, password, client_id or "probe-%s" % uuid.uuid4())
        try:
            return c.connect()
        finally:
            c.close()

    # -- helpers ---------------------------------------------------------------------------

    def client(self, username, password, client_id=None, connect=True, **kw):
        c = Client(self.broker, username, password, client_id or username, **kw)
        self.clients.append(c)
        self.addCleanup(c.close)
        if connect:
            self.assertEqual(c.connect(), 0, "%s could not log in" % username)
        return c

    def device_a(self, client_id=None):
        """A client with A's account that, like a device, publishes its retained state."""
        c = self.client(self.a, self.A["mqtt_password"], client_id=client_id or self.a)
        c.publish(self.topic(self.a, "state"), {"v": 1, "online": True, "tags": ["spy"],
                                                "agent_version": "spy",
                                                "ts": int(time.time())}, retain=True)
        self.wait_device(self.a, online=True, agent_version="spy")
        return c

    def device_b(self, auto=False):
        d = self.connect_b(self.broker, self.broker.port, auto)
        self.wait_device(self.b, online=True)
        return d

    def post_job(self, entity):
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": entity})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["status"], "transmited", r)
        return r.json

    def assertOnlyOwnTopics(self, c, entity, what):
        foreign = [m for m in c.received()
                   if not m[0].startswith("rcs/v1/%s/%s/jobs/" % (self.client_root, entity))]
        self.assertEqual(foreign, [], "%s received other topics than its own jobs" % what)

    def assertNothing(self, c, what):
        self.assertEqual(c.received(), [], "%s received messages" % what)

    # -- the configuration ----------------------------------------------------------------

    def test_shipped_configuration(self):
        d = dict(shipped_directives())
        self.assertEqual(d.get("allow_anonymous"), "false")
        self.assertEqual(d.get("use_username_as_clientid"), "true")
        self.assertEqual(d.get("persistence"), "true")
        self.assertEqual(d.get("max_queued_messages"), "100000")
        self.assertEqual(d.get("max_queued_bytes"), str(64 * 1024 * 1024))
        self.assertEqual(d.get("max_inflight_messages"), "1000")
        self.assertIn("password_file", d)
        self.assertEqual(os.path.basename(d.get("acl_file", "")), "rcs.acl")
        # the reason for the queue sizes is written down next to them
        with open(SHIPPED_CONF) as f:
            text = f.read()
        before = text.split("max_queued_messages 100000")[0].rsplit("\n\n", 1)[-1]
        self.assertIn("drop", before)
        # the password file holds hashes only, and the script made it private
        with open(self.pwfile) as f:
            for line in f:
                user, _, hashed = line.rstrip("\n").partition(":")
                self.assertTrue(hashed.startswith("$"), "%s: not hashed" % user)
        self.assertEqual(os.stat(self.pwfile).st_mode & 0o007, 0, "password file is world-readable")

    # -- who may connect ------------------------------------------------------------------

    def test_anonymous_refused(self):
        for cid in ("anon-%s" % uuid.uuid4(), self.b):
            c = self.client(None, None, client_id=cid, connect=False)
            self.assertIn(c.connect(), (4, 5), "anonymous connect with client id %s" % cid)
            wait_for(lambda: not c.connected(), what="refused client closed")

    def test_bad_passwords_refused(self):
        cases = [(self.a, "wrong"), (self.a, self.B["mqtt_password"]), (self.a, ""),
                 (self.a.upper(), self.A["mqtt_password"]),
                 ("rcs-coordinator", self.A["mqtt_password"]),
                 ("rcs-monitor", "x" * 48), ("nobody", self.A["mqtt_password"]),
                 ("+", "wrong"), ("", self.A["mqtt_password"])]
        for user, password in cases:
            self.assertIn(self.try_login(user, password), (4, 5),
                          "login %r with a wrong password" % user)
        # and the right ones work
        self.assertEqual(self.try_login(self.a, self.A["mqtt_password"]), 0)
        self.assertEqual(self.try_login(self.b, self.B["mqtt_password"]), 0)

    # -- reading --------------------------------------------------------------------------

    def test_device_reads_only_its_own_jobs(self):
        b = self.device_b(auto=False)
        spy = self.device_a()
        granted = spy.subscribe(
            "#", "rcs/v1/+/+/jobs/#", "rcs/v1/+/+/jobs/+", "rcs/v1/+/+/jobs/+/cancel",
            self.topic(self.b, "jobs", "+"), self.topic(self.b, "jobs", "+", "cancel"),
            self.topic(self.b, "#"), "rcs/v1/+/%s/jobs/+" % self.b, "rcs/v1/+/+/state",
            self.topic(self.b, "state"), "rcs/v1/+/+/jobs/+/status", "rcs/v1/+/events/#",
            self.topic(self.a, "jobs", "+"), self.topic(self.a, "jobs", "+", "cancel"))
        note("SUBACK for device A's subscriptions (2.0 grants, then delivers nothing): %r"
             % (granted,))
        self.wait_device(self.a, online=True)

        # a job for B, and its cancel: B gets both
        jb = self.post_job(self.b)["ident"]
        wait_for(lambda: b.envelopes_of(jb), what="B received its job")
        r = self.admin.patch("/jobs/%s/cancel" % jb)
        self.assertEqual(r.status, 200, r)
        wait_for(lambda: b.cancels_of(jb), what="B received the cancel")
        # then a job for A, published after them on the coordinator's one connection
        ja = self.post_job(self.a)["ident"]
        wait_for(lambda: spy.received(lambda m: m[0] == self.topic(self.a, "jobs", ja)),
                 what="A received its own job")
        time.sleep(GRACE)
        self.assertOnlyOwnTopics(spy, self.a, "device A")
        self.assertFalse([m for m in spy.received() if jb.encode() in m[1] or jb in m[0]],
                         "device A saw B's job")
        self.assertTrue(b.connected)
        # finish A's job so nothing is left hanging
        self.admin.patch("/jobs/%s/cancel" % ja)

    # -- writing --------------------------------------------------------------------------

    def test_device_cannot_write_for_another_device(self):
        b = self.device_b(auto=False)
        mon = self.client("rcs-monitor", self.M["mqtt_password"])
        mon.subscribe("rcs/v1/+/events/#")
        jb = self.post_job(self.b)["ident"]
        wait_for(lambda: b.envelopes_of(jb), what="B received its job")

        attacker = self.client(self.a, self.A["mqtt_password"])
        forged_job = str(uuid.uuid4())
        attacker.publish(self.topic(self.b, "jobs", jb, "status"),
                         self.report(jb, "terminated", 50, "forged by A"))
        attacker.publish(self.topic(self.b, "state"),
                         {"v": 1, "online": False, "tags": ["forged"], "agent_version": "evil",
                          "ts": int(time.time())}, retain=True)
        attacker.publish(self.topic(self.b, "jobs", forged_job), self.envelope(self.b, forged_job))
        attacker.publish(self.topic(self.b, "jobs", jb, "cancel"),
                         {"v": 1, "job": jb, "reason": "forged by A"})
        attacker.publish("rcs/v1/%s/events/jobs/%s" % (self.client_root, jb),
                         dict(self.job(jb), status="terminated", response="forged by A"))

        # B's own messages after them: once they took effect, A's would have too
        b.publish_state(tags=["b", "marker"])
        b.report(jb, "edge_transmitted", seq=1)
        self.wait_device(self.b, online=True, reported_tags=["b", "marker"])
        self.wait_job(jb, "edge_transmitted")
        wait_for(lambda: mon.received(lambda m: b'"edge_transmitted"' in m[1]),
                 what="the event of B's report")
        time.sleep(GRACE)
        job = self.job(jb)
        self.assertEqual(job["status"], "edge_transmitted")
        self.assertIsNone(job["response"])
        self.assertNotIn("terminated", self.history(jb))
        dev = self.device(self.b)
        self.assertTrue(dev["online"])
        self.assertNotIn("forged", dev["reported_tags"])
        self.assertNotEqual(dev["agent_version"], "evil")
        self.assertEqual(b.jobs_received(), [jb], "B received a forged envelope")
        self.assertEqual(b.foreign(), [], "B received messages that are no job of its own")
        self.assertEqual(b.cancels, [], "B received a forged cancel")
        self.assertFalse(mon.received(lambda m: b"forged by A" in m[1]),
                         "the monitor received a forged event")
        # the retained state is B's own
        mon2 = self.client("rcs-monitor", self.M["mqtt_password"])
        mon.close()
        mon2.subscribe(self.topic(self.b, "state"))
        st = wait_for(lambda: mon2.received(), what="B's retained state")
        self.assertIn(b"marker", st[0][1])
        self.assertNotIn(b"forged", st[0][1])

        # and B's own reports still work to the end
        b.report(jb, "edge_started", seq=2)
        b.report(jb, "terminated", "done by B", seq=3)
        self.assertEqual(self.wait_job(jb)["response"], "done by B")

    # -- sessions -------------------------------------------------------------------------

    def test_client_id_bound_to_username(self):
        b = self.device_b(auto=True)
        impostors = []
        for cid in ("#", "+", self.b):
            genuine_a = self.client(self.a, self.A["mqtt_password"])
            imp = self.client(self.a, self.A["mqtt_password"], client_id=cid)
            imp.subscribe("#", self.topic(self.b, "jobs", "+"), "rcs/v1/+/+/jobs/#")
            impostors.append(imp)
            # the client calling itself cid got A's session: A's earlier one was taken over
            wait_for(lambda: not genuine_a.connected(), timeout=5,
                     what="A's own session taken over by the client calling itself %r" % cid)
            self.assertEqual(genuine_a.disconnects, 1)
        # ... and B's never was
        time.sleep(GRACE)
        self.assertTrue(b.connected, "B was disconnected")
        self.assertEqual(b.disconnects, 0)
        self.assertEqual(b.connacks, [0])
        self.assertTrue(impostors[-1].connected())
        # B still gets and runs its jobs; the client of A calling itself B gets none of it
        jb = self.post_job(self.b)["ident"]
        self.assertEqual(self.wait_job(jb)["status"], "terminated")
        self.assertEqual(b.jobs_received(), [jb])
        self.assertEqual(b.foreign(), [], "B received messages that are no job of its own")
        time.sleep(GRACE)
        for imp in impostors:
            self.assertNothing(imp, "the client of A calling itself %r" % imp.client_id)
        log = self.broker.log_text()
        for cid in ("#", "+"):
            self.assertNotIn(" as %s (" % cid, log, "the client id %r reached the broker" % cid)

    # -- odd account names ----------------------------------------------------------------

    def test_wildcard_and_slash_usernames_get_nothing(self):
        b = self.device_b(auto=False)
        a = self.device_a()
        a.subscribe(self.topic(self.a, "jobs", "+"))
        mon = self.client("rcs-monitor", self.M["mqtt_password"])
        mon.subscribe("rcs/v1/+/events/#", "rcs/v1/+/+/state")
        odd = []
        for i, u in enumerate(self.odd_users):
            if u.startswith("#"):
                # mosquitto reads such a line of the password file as a comment
                self.assertIn(self.try_login(u, self.ODD_PASSWORD), (4, 5))
                continue
            c = self.client(u, self.ODD_PASSWORD, client_id="ignored-%d" % i)
            c.user = u
            filters = ["#", "rcs/v1/+/+/jobs/#", "rcs/v1/+/+/state", "rcs/v1/+/events/#",
                       self.topic(self.b, "jobs", "+"), self.topic(self.b, "jobs", "+", "cancel"),
                       self.topic(self.a, "jobs", "+"), "rcs/v1/+/%s/jobs/+" % u,
                       "rcs/v1/+/%s/jobs/+/cancel" % u, "rcs/v1/%s/jobs/+" % u]
            c.subscribe(*[f for f in filters if "#" not in f[:-1]])
            odd.append(c)

        jb = self.post_job(self.b)["ident"]
        wait_for(lambda: b.envelopes_of(jb), what="B received its job")
        ja = self.post_job(self.a)["ident"]
        wait_for(lambda: a.received(lambda m: ja in m[0]), what="A received its job")
        for i, c in enumerate(odd):
            u = c.user
            c.publish(self.topic(self.b, "jobs", jb, "status"),
                      self.report(jb, "terminated", 60 + i, "forged by %s" % u))
            c.publish(self.topic(self.b, "state"),
                      {"v": 1, "online": False, "tags": ["forged"], "agent_version": "evil",
                       "ts": int(time.time())}, retain=True)
            for level in [self.b] + ([u] if not set("+#") & set(u) else []):
                t = "rcs/v1/%s/%s" % (self.client_root, level)
                c.publish(t + "/jobs/" + str(uuid.uuid4()), self.envelope(self.b, jb))
                c.publish(t + "/jobs/%s/cancel" % jb, {"v": 1, "job": jb, "reason": "forged"})
                c.publish(t + "/state", {"v": 1, "online": True, "tags": ["forged"],
                                         "agent_version": "evil", "ts": 0})
            c.publish("rcs/v1/%s/events/jobs/%s" % (self.client_root, jb), {"forged": u})
        b.publish_state(tags=["b", "marker2"])
        b.report(jb, "edge_transmitted", seq=1)
        b.report(jb, "terminated", "done by B", seq=2)
        done = self.wait_job(jb)
        self.assertEqual(done["response"], "done by B")
        self.wait_device(self.b, online=True, reported_tags=["b", "marker2"])
        wait_for(lambda: mon.received(lambda m: b"done by B" in m[1]),
                 what="the monitor got the event of B's job")
        time.sleep(GRACE)

        for c in odd:
            self.assertNothing(c, "account %r" % c.user)
        self.assertEqual(b.jobs_received(), [jb])
        self.assertEqual(b.foreign(), [], "B received messages that are no job of its own")
        self.assertEqual(b.cancels, [])
        self.assertOnlyOwnTopics(a, self.a, "device A")
        self.assertNotIn("forged", self.device(self.b)["reported_tags"])
        self.assertFalse(mon.received(lambda m: b"forged" in m[1] or b"evil" in m[1]),
                         "the monitor saw a forged message")
        self.assertNotIn("terminated", [s for s in self.history(jb)][:-1])
        # the monitor reads events and states, nothing else
        self.assertTrue(mon.received(lambda m: "/events/jobs/" in m[0]))
        self.assertTrue(mon.received(lambda m: m[0].endswith("/state")))
        self.assertFalse(mon.received(lambda m: "/events/" not in m[0]
                                      and not m[0].endswith("/state")))
        # mosquitto refused the patterns for '+' and '#' outright
        log = self.broker.log_text()
        self.assertIn('dangerous username "+"', log)
        self.assertIn('dangerous username "x#"', log)
        self.admin.patch("/jobs/%s/cancel" % ja)

    def test_monitor_reads_no_jobs_and_writes_nothing(self):
        b = self.device_b(auto=True)
        mon = self.client("rcs-monitor", self.M["mqtt_password"])
        mon.subscribe("#", "rcs/v1/+/+/jobs/#", "rcs/v1/+/events/#")
        mon.publish(self.topic(self.b, "jobs", str(uuid.uuid4())),
                    self.envelope(self.b, str(uuid.uuid4())))
        jb = self.post_job(self.b)["ident"]
        self.wait_job(jb)
        wait_for(lambda: mon.received(lambda m: b'"terminated"' in m[1]),
                 what="the monitor got the final event")
        time.sleep(GRACE)
        # the coordinator may legitimately send jb twice (at-least-once: a re-send when B's
        # state arrives again before its acknowledgement); what must not arrive is the
        # monitor's forged envelope
        self.assertEqual(set(b.jobs_received()), {jb}, "B received the monitor's envelope")
        self.assertEqual(b.foreign(), [], "B received messages that are no job of its own")
        self.assertFalse(mon.received(lambda m: "/events/" not in m[0]
                                      and not m[0].endswith("/state")),
                         "the monitor read job topics")

    # -- new credentials ------------------------------------------------------------------

    def test_new_password_for_existing_device(self):
        api = "http://127.0.0.1:%d" % self.coord.port
        pid = str(self.broker.proc.pid)
        c1 = provision("--api", api, "--name", "device C", "--password-file", self.pwfile,
                       "--broker-pid", pid, api_key=self.admin_key)
        ident = c1["entity_ident"]
        old = wait_for(lambda: self.try_login(ident, c1["mqtt_password"]) == 0 and
                       self.client(ident, c1["mqtt_password"]), what="C can log in")
        c2 = provision("--api", api, "--entity-ident", ident, "--password-file", self.pwfile,
                       "--broker-pid", pid, api_key=self.admin_key)
        self.assertEqual((c2["entity_ident"], c2["client_root"]), (ident, self.client_root))
        self.assertNotEqual(c2["mqtt_password"], c1["mqtt_password"])
        # the reload closes the session of the old password and refuses it from then on
        wait_for(lambda: not old.connected(), what="C's old session closed at the reload")
        self.assertIn(self.try_login(ident, c1["mqtt_password"]), (4, 5))
        self.assertEqual(self.try_login(ident, c2["mqtt_password"]), 0)
        # still one inventory record, and the coordinator kept its session through reloads
        self.assertEqual(len([d for d in self.admin.get("/devices?per_page=500").json["items"]
                              if d["entity_ident"] == ident]), 1)
        # (one connect, and one more to take the shared subscription in a clean session;
        # the connection for artifacts connects once too, in a clean session from the start)
        log = self.coord.read_log()
        switches = log.count("delivers on a shared subscription of")
        chunks = log.count("artifact gets: plain subscription")
        self.assertEqual(chunks, 1, log)
        self.assertEqual(log.count("connected to") - switches - chunks, 1, log)
        # an unknown device gets no account
        p = subprocess.run(["/bin/sh", PROVISION, "--api", api, "--entity-ident",
                            str(uuid.uuid4()), "--password-file", self.pwfile],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, RCS_API_KEY=self.admin_key))
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("404", p.stderr)
        self.assertEqual(p.stdout, "")
        # a mosquitto ACL with a NATS accounts file: refused, neither file touched
        nats = os.path.join(self.workdir, "accounts.conf")
        with open(nats, "w") as f:
            f.write("# -- end of users --\n")
        with open(self.acl) as f:
            acl_before = f.read()
        p = subprocess.run(["/bin/sh", PROVISION, "--coordinator", "--node-id", "n9",
                            "--acl-file", self.acl, "--nats-accounts", nats],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("--acl-file is mosquitto's", p.stderr)
        with open(self.acl) as f:
            self.assertEqual(f.read(), acl_before)
        with open(nats) as f:
            self.assertEqual(f.read(), "# -- end of users --\n")

    def test_provisioning_in_a_row_keeps_every_session(self):
        # each run reloads the broker; a reload that read the password file while the
        # next run rewrote it would drop the clients whose lines it missed (the
        # coordinator included): the script renames a whole new file into place
        api = "http://127.0.0.1:%d" % self.coord.port
        pid = str(self.broker.proc.pid)
        before = self.coord.read_log().count("connected to")
        watcher = self.client(self.a, self.A["mqtt_password"])
        # the way it works, which a lucky timing can't hide: one run replaces the file
        # (another inode while the old one is still held), keeping its mode and owner,
        # rather than rewriting it in place
        old_file = os.stat(self.pwfile)
        first = provision("--api", api, "--name", "burst first", "--password-file",
                          self.pwfile, api_key=self.admin_key)
        new_file = os.stat(self.pwfile)
        self.assertNotEqual(new_file.st_ino, old_file.st_ino, "rewritten in place")
        self.assertEqual((new_file.st_mode, new_file.st_uid, new_file.st_gid),
                         (old_file.st_mode, old_file.st_uid, old_file.st_gid))
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            made = list(ex.map(lambda i: provision(
                "--api", api, "--name", "burst %d" % i, "--password-file", self.pwfile,
                "--broker-pid", pid, api_key=self.admin_key), range(12)))
        for d in [first] + made:
            wait_for(lambda: self.try_login(d["entity_ident"], d["mqtt_password"]) == 0,
                     timeout=10, what="a provisioned device can log in")
        time.sleep(GRACE)
        self.assertTrue(watcher.connected(), "A's session was dropped by a reload")
        self.assertEqual(self.coord.read_log().count("connected to"), before,
                         self.coord.read_log())
        self.assertEqual([f for f in os.listdir(self.workdir) if ".new." in f], [])

    # -- several coordinators --------------------------------------------------------------

    @unittest.skipUnless(pg_server.available(), "PostgreSQL's server is not installed")
    def test_several_coordinators(self):
        # n1 on its own SQLite database shares with no one: the plain subscription
        wait_for(lambda: "status reports: plain subscription" in self.coord.read_log(),
                 what="n1's subscription:\n" + self.coord.read_log()[-2000:])
        self.assertIn("(the database is not shared with other coordinators)",
                      self.coord.read_log())
        spy = self.device_a()
        spy.subscribe("#", "rcs/v1/_coordinators/#", "rcs/v1/_coordinators/probe/+")
        pid = str(self.broker.proc.pid)
        acct = None
        for _ in range(2):  # made twice: one block
            acct = provision("--coordinator", "--node-id", "n2", "--password-file",
                             self.pwfile, "--acl-file", self.acl, "--broker-pid", pid)
        self.assertEqual(acct["mqtt_username"], "rcs-coordinator-n2")
        with open(self.acl) as f:
            acl = f.read()
        self.assertEqual(acl.count("\nuser rcs-coordinator-n2\n"), 1)
        self.assertEqual(acl.count("\nuser rcs-coordinator-n2-chunks\n"), 1)
        self.assertEqual(acl.count("\nuser rcs-coordinator-n1\n"), 1)
        wait_for(lambda: self.try_login("rcs-coordinator-n2", acct["mqtt_password"]) == 0,
                 what="n2 can log in")
        # n2 on PostgreSQL (a database others may share): the probe came back under the
        # ACL, reports through the shared subscription
        c2 = Coordinator(self.workdir, db=pg_server.shared().create_db(), extra_args=[
            "--mqtt", self.broker.url, "--mqtt-username", acct["mqtt_username"],
            "--mqtt-password", acct["mqtt_password"], "--node-id", "n2",
            "--mqtt-shared-subscriptions", "auto"])
        c2.start()
        try:
            wait_for(lambda: "status reports: shared subscription" in c2.read_log(),
                     timeout=20, what="n2's probe delivered:\n" + c2.read_log()[-2000:])
            # its connection for artifacts follows, with its own account
            wait_for(lambda: "artifact gets: shared subscription" in c2.read_log(),
                     timeout=10, what="n2's gets shared:\n" + c2.read_log()[-2000:])
            # a device forging a probe reaches no one, and reads none
            spy.publish("rcs/v1/_coordinators/probe/rcs-coordinator-n2", "forged")
            time.sleep(GRACE)
            self.assertFalse(spy.received(lambda m: m[0].startswith("rcs/v1/_coordinators")),
                             "a device read a probe")
        finally:
            self.assertEqual(c2.stop(), 0, c2.read_log())
        self.assertNotIn("not authori", c2.read_log().lower())
        # the single coordinator's account of before still has its rights
        old = provision("--coordinator", "--password-file", self.pwfile, "--broker-pid", pid)
        self.assertEqual(old["mqtt_username"], "rcs-coordinator")
        self.assertNotIn("node_id", old)
        wait_for(lambda: self.try_login("rcs-coordinator", old["mqtt_password"]) == 0,
                 what="rcs-coordinator can log in")

    # -- artifacts over MQTT ---------------------------------------------------------------

    def test_artifact_topics(self):
        b = self.client(self.b, self.B["mqtt_password"])
        b.subscribe(self.topic(self.b, "artifacts", "#"))
        b.publish(self.topic(self.b, "state"), {"v": 1, "online": True, "tags": [],
                                                "agent_version": "b-spy",
                                                "ts": int(time.time())}, retain=True)
        self.wait_device(self.b, online=True, agent_version="b-spy")
        a = self.device_a()
        # mosquitto grants what it then delivers nothing on
        a.subscribe(self.topic(self.a, "artifacts", "#"), self.topic(self.b, "artifacts", "#"),
                    "rcs/v1/+/+/artifacts/#", "#")
        self.check_artifact_topics(a, b)
        self.assertNotIn("not authori", self.coord.read_log().lower())

    # -- end to end -----------------------------------------------------------------------

    def test_real_agent_with_its_account(self):
        """rcs-agent with A's provisioned account, through the shipped broker setup."""
        cfg = os.path.join(self.workdir, "agent-a.conf")
        with open(cfg, "w") as f:
            for k in ("mqtt", "client_root", "entity_ident", "mqtt_username", "mqtt_password"):
                f.write("%s %s\n" % (k, self.A[k]))
        os.chmod(cfg, 0o600)
        agent = Agent(self.workdir, self.broker.url, self.client_root, self.a,
                      trusted_keys=[self.pub], name="agent-a", extra_args=["--config", cfg])
        self.agents.append(agent)
        agent.start()
        try:
            self.wait_device(self.a, online=True, timeout=15)
            dev = wait_for(lambda: self.device(self.a)["agent_version"] not in (None, "spy")
                           and self.device(self.a),
                           what="the agent's state reached the coordinator")
            j = self.post_job(self.a)["ident"]
            done = self.wait_job(j, timeout=20)
            self.assertEqual(done["status"], "terminated", self.history(j))
            self.assertEqual(done["response"], "pong")
            self.assertEqual(self.history(j), ["initial", "pending", "transmited",
                                               "edge_transmitted", "edge_started",
                                               "edge_running", "terminated"])
            self.assertNotIn("not authori", agent.read_log().lower())
        finally:
            self.assertEqual(agent.stop(), 0)
        self.wait_device(self.a, online=False)
        self.assertNotIn("not authori", self.coord.read_log().lower())
        self.assertNotIn("cannot subscribe", self.coord.read_log())
        note("device A: %s" % json.dumps(dev))


if __name__ == "__main__":
    unittest.main(verbosity=2)
