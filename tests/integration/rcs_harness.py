"""Test harness: starts the real daemons on loopback with free ports and generated
configs, talks to them over real HTTP/MQTT, and stops them by pid.

Environment (set by ctest): RCS_BIN_DIR (build/bin), RCS_SOURCE_DIR (repository root).
RCS_TEST_DB=postgres puts each coordinator that gets no database of its own on PostgreSQL: a
new database on a server the test process starts once (pg_server.py) and stops at its end.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection, HTTPException

SOURCE_DIR = os.environ.get(
    "RCS_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN_DIR = os.environ.get("RCS_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
COORDINATOR = os.path.join(BIN_DIR, "rcs-coordinator")
AGENT = os.path.join(BIN_DIR, "rcs-agent")
SCRIPTS_DIR = os.path.join(SOURCE_DIR, "scripts")


_PORTS_GIVEN = set()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now (never 1883), and not one
    this process was given before: the kernel may hand the same free port to two calls in
    a row, and a server given both (a NATS node's monitor and route ports) fails to start."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 1883 and port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def end_process(proc, sig, timeout):
    """Sends sig to a child process by pid (unless it has ended) and waits for it to end;
    kills it (SIGKILL) when it has not after timeout seconds. False when it had to be
    killed."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return False
    return True


def run_cli(*args, check=True):
    """Runs rcs-coordinator with args; returns (exit code, stdout, stderr)."""
    p = subprocess.run([COORDINATOR, *args], capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError("rcs-coordinator %s failed (%d): %s" % (
            " ".join(args), p.returncode, p.stderr))
    return p.returncode, p.stdout, p.stderr


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.raw = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return "<Response %d %s>" % (self.status, self.raw[:300])


def http(method, url, body=None, headers=None, raw=None, timeout=30):
    """One HTTP request. body is JSON-encoded unless raw (bytes) is given."""
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, dict(r.headers), r.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        return Response(e.code, dict(e.headers), e.read().decode("utf-8", "replace"))



def run_logged(args, log, timeout):
    """Runs a build step, its output appended to log; fails with the tail of it."""
    with open(log, "ab") as f:
        p = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if p.returncode != 0:
        with open(log, "rb") as f:
            tail = f.read().decode("utf-8", "replace")[-4000:]
        raise AssertionError("%s failed (%d):\n%s" % (" ".join(args), p.returncode, tail))


def tcp_nodelay(pid, remote_port):
    """TCP_NODELAY of each of process pid's established connections to
    127.0.0.1:remote_port (a list of booleans, in no order), read on copies of their
    sockets made with pidfd_getfd (Linux 5.6; needs the right to ptrace pid, which a test has
    over its own children). None when no such connection is found or a copy is refused."""
    import ctypes
    inodes = set()
    found = []
    with open("/proc/%d/net/tcp" % pid) as f:
        for line in f.read().splitlines()[1:]:
            col = line.split()
            if int(col[2].split(":")[1], 16) == remote_port and col[3] == "01":
                inodes.add(col[9])
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if not (target.startswith("socket:[") and target[8:-1] in inodes):
            continue
        libc = ctypes.CDLL(None, use_errno=True)
        pidfd = os.pidfd_open(pid)
        try:
            copy = libc.syscall(438, pidfd, int(fd), 0)  # SYS_pidfd_getfd
        finally:
            os.close(pidfd)
        if copy < 0:
            return None
        s = socket.socket(fileno=copy)
        try:
            found.append(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0)
        finally:
            s.close()  # the copy only
    return found or None


def copy_db(src, dst):
    """Copies an SQLite database with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix)

def test_db(workdir):
    """A new database for a coordinator: a SQLite file in workdir, or with
    RCS_TEST_DB=postgres the URL of a new database on the test process's PostgreSQL."""
    if os.environ.get("RCS_TEST_DB") == "postgres":
        import pg_server
        return pg_server.shared().create_db()
    return os.path.join(workdir, "rcs.db")


def remove_workdir(path):
    """Removes a test's directory, unless RCS_KEEP_TMP is set (then says where it is)."""
    if os.environ.get("RCS_KEEP_TMP") is None:
        shutil.rmtree(path, ignore_errors=True)
    else:
        sys.stderr.write("kept %s\n" % path)


def on_postgres():
    return os.environ.get("RCS_TEST_DB") == "postgres"


class Coordinator:
    """A real rcs-coordinator on a free loopback port with its own database (test_db)."""

    def __init__(self, workdir, extra_args=(), db=None, env=None, start_timeout=20):
        self.workdir = workdir
        self.env = env  # the daemon's environment (None: this one's)
        self.start_timeout = start_timeout
        self.db = db or test_db(workdir)
        self.port = free_port()
        self.base = "http://127.0.0.1:%d/v3/commands" % self.port
        self.extra_args = list(extra_args)
        if self.db.startswith("postgresql://") and "--node-id" not in self.extra_args:
            # as systemd's STATE_DIRECTORY keeps it: a restart on the same database is the
            # same node, with the same MQTT session (docs/coordinator.md, node_id)
            self.extra_args += ["--node-id", "test-" + self.db.rsplit("/", 1)[1]]
        self.proc = None
        self.log_path = os.path.join(workdir, "coordinator-%d.log" % self.port)

    def init_tenant(self, user="admin", client_root=None):
        args = ["init", "--db", self.db, "--user", user]
        if client_root:
            args += ["--client-root", client_root]
        _, out, _ = run_cli(*args)
        return json.loads(out)

    def create_key(self, client_root, user, role):
        _, out, _ = run_cli("key", "create", "--db", self.db, "--client-root", client_root,
                            "--user", user, "--role", role)
        return json.loads(out)

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [COORDINATOR, "serve", "--db", self.db, "--listen", "127.0.0.1:%d" % self.port,
             "--scripts-dir", SCRIPTS_DIR, *self.extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("coordinator exited with %d:\n%s" % (
                    self.proc.returncode, self.read_log()))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            self._wait_answering(deadline)
            return self
        raise AssertionError("coordinator did not start listening:\n" + self.read_log())

    def _wait_answering(self, deadline):
        """The port is taken before the store is opened and the API served (docs/architecture.md,
        serve.c): waits for the API's first answer, so that a coordinator that gives up starting (a
        full disk, say) is an AssertionError here rather than a reset connection later. A
        start that takes longer than the deadline returns as a listening one did."""
        while time.time() < deadline:
            try:
                conn = HTTPConnection("127.0.0.1", self.port, timeout=1)
                try:
                    conn.request("GET", "/v3/commands/health")
                    conn.getresponse().read()
                    return
                finally:
                    conn.close()
            except socket.timeout:
                continue
            except (OSError, HTTPException):
                if self.proc.poll() is not None:
                    raise AssertionError("coordinator exited with %d:\n%s" % (
                        self.proc.returncode, self.read_log()))
                time.sleep(0.05)

    def read_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-20000:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Stops the daemon by pid; returns its exit code."""
        if self.proc is None:
            return None
        if not end_process(self.proc, sig, timeout):
            raise AssertionError("coordinator did not stop on signal %d" % sig)
        self.log.close()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def api(self, key):
        return Api(self.base, key)


class Api:
    """Calls /v3/commands with one API key."""

    def __init__(self, base, key):
        self.base = base
        self.key = key

    def request(self, method, path, body=None, raw=None, headers=None):
        h = {}
        if self.key is not None:
            h["api-key"] = self.key
        h.update(headers or {})
        return http(method, self.base + path, body=body, raw=raw, headers=h)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body=body, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


# --- generic helpers for the API tests -------------------------------------------------

import re as _re
import urllib.parse as _urlparse

_UUID_RE = _re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def is_uuid(s):
    """True for a lowercase canonical UUID string (8-4-4-4-12 hex)."""
    return isinstance(s, str) and _UUID_RE.match(s) is not None


def with_query(path, **params):
    """path with ?k=v&... appended (values URL-encoded); None values are left out."""
    params = {k: v for k, v in params.items() if v is not None}
    if not params:
        return path
    return path + ("&" if "?" in path else "?") + _urlparse.urlencode(params)


def quote_segment(s):
    """One URL path segment, every reserved character escaped."""
    return _urlparse.quote(s, safe="")


def list_all(api, path, per_page=500, **params):
    """Follows the paging of a list endpoint (GET path?page=&per_page=) and returns every
    item. Raises AssertionError on a non-200 answer or a page without the paging fields."""
    items = []
    page = 1
    while True:
        r = api.get(with_query(path, page=page, per_page=per_page, **params))
        if r.status != 200 or not isinstance(r.json, dict):
            raise AssertionError("GET %s page %d: %r" % (path, page, r))
        for k in ("page", "per_page", "total_pages", "total_items", "items"):
            if k not in r.json:
                raise AssertionError("GET %s: no %r in %r" % (path, k, r))
        items.extend(r.json["items"])
        if page >= r.json["total_pages"] or not r.json["items"]:
            return items
        page += 1
        if page > 100000:
            raise AssertionError("GET %s: paging does not end" % path)


def http_big(port, method, path, body, headers=None, timeout=30):
    """Sends a (large) request body over a plain socket and returns the Response even when
    the server answers early and closes (e.g. 413) while the body is still being sent,
    which makes urllib fail with a broken pipe. path is the full path (/v3/commands/...)."""
    import select
    head = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1:%d" % port,
            "Content-Type: application/json", "Content-Length: %d" % len(body),
            "Connection: close"]
    head += ["%s: %s" % kv for kv in (headers or {}).items()]
    data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    reply = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            for i in range(0, len(data), 65536):
                if select.select([s], [], [], 0)[0]:
                    break  # the server answered already
                s.sendall(data[i:i + 65536])
        except OSError:
            pass
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    lines = head.decode("iso-8859-1").split("\r\n")
    if not lines or len(lines[0].split(" ")) < 2:
        raise AssertionError("no HTTP answer to %s %s: %r" % (method, path, reply[:200]))
    status = int(lines[0].split(" ")[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip()] = v.strip()
    if hdrs.get("Transfer-Encoding", "").lower() == "chunked":
        out, rest = b"", payload
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0], 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        payload = out
    return Response(status, hdrs, payload.decode("utf-8", "replace"))


# ---------------------------------------------------------------------------
# MQTT: a real mosquitto on a free loopback port, and a scripted device.

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


class Mosquitto:
    """A real mosquitto broker on 127.0.0.1:<free port> with a generated config.

    persistence: keep sessions and retained messages across restarts (on disk
    in workdir), like a production broker. restart() keeps the port.
    """

    def __init__(self, workdir, persistence=True, extra_conf=""):
        self.workdir = workdir
        self.port = free_port()
        self.url = "tcp://127.0.0.1:%d" % self.port
        self.conf = os.path.join(workdir, "mosquitto-%d.conf" % self.port)
        self.log_path = os.path.join(workdir, "mosquitto-%d.log" % self.port)
        with open(self.conf, "w") as f:
            f.write("listener %d 127.0.0.1\n" % self.port)
            f.write("allow_anonymous true\n")
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                # as root, mosquitto drops to the user "mosquitto", who cannot write
                # the persistence file into the private workdir: stay who we are
                f.write("user root\n")
            f.write("max_queued_messages 100000\n")
            f.write("max_inflight_messages 1000\n")
            if persistence:
                f.write("persistence true\n")
                f.write("persistence_location %s/\n" % workdir)
                f.write("persistence_file mosquitto-%d.db\n" % self.port)
            else:
                f.write("persistence false\n")
            f.write(extra_conf)
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", self.conf], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("mosquitto exited: " + open(self.log_path).read())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("mosquitto did not start")

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return
        end_process(self.proc, sig, 10)
        self.log.close()
        self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def pub(self, topic, payload, retain=False):
        """Publishes with mosquitto_pub (QoS 1); payload str or bytes."""
        args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.port), "-q", "1",
                "-t", topic]
        if retain:
            args.append("-r")
        if isinstance(payload, bytes):
            args += ["-s"]
            subprocess.run(args, input=payload, check=True, timeout=10)
        else:
            args += ["-m", payload]
            subprocess.run(args, check=True, timeout=10)


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Polls predicate() until it returns a true value; returns it, or fails."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what, last))


class Watcher:
    """A paho client (clean session) that records every message on a topic filter,
    subscribed with QoS 1: messages holds record(msg) of each, by default (topic, payload
    bytes, qos, retain). start() returns once the broker granted the subscription; a
    subclass may record something else (override record)."""

    def __init__(self, broker, topic_filter, prefix="watch-"):
        import threading
        import uuid
        import paho.mqtt.client as mqtt
        self.broker = broker
        self.filter = topic_filter
        self.messages = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(client_id=prefix + uuid.uuid4().hex[:12], clean_session=True)
        self.client.on_connect = lambda c, u, f, rc: c.subscribe(self.filter, 1)
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.on_message = self._on_message

    def record(self, msg):
        return (msg.topic, msg.payload, msg.qos, msg.retain)

    def _on_message(self, client, userdata, msg):
        item = self.record(msg)
        with self.lock:
            self.messages.append(item)

    def start(self):
        self.client.connect("127.0.0.1", self.broker.port, keepalive=10)
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise AssertionError("no SUBACK for " + self.filter)
        return self

    def stop(self):
        try:
            self.client.disconnect()
        finally:
            self.client.loop_stop()

    def received(self):
        """A copy of what was recorded so far."""
        with self.lock:
            return list(self.messages)

    def on(self, topic):
        """What was recorded of the messages on topic (by default records only)."""
        with self.lock:
            return [m for m in self.messages if m[0] == topic]


class FakeDevice:
    """A scripted device speaking protocol v1 with paho-mqtt (test tooling).

    It connects with client id = entity_ident and a persistent session,
    publishes its retained state (online) with a Last Will (offline), and
    records every envelope and cancel it receives. With auto=True it answers
    each new envelope with edge_transmitted, edge_started, edge_running and
    terminated (response "ok:<job>"); repeats of a finished job get the final
    report again. report() sends any report by hand.
    """

    def __init__(self, broker, client_root, entity_ident, auto=True, tags=()):
        import paho.mqtt.client as mqtt
        self.broker = broker
        self.client_root = client_root
        self.entity = entity_ident
        self.auto = auto
        self.tags = list(tags)
        self.envelopes = []
        self.cancels = []
        self.seq = {}
        self.final = {}
        self.lock = __import__("threading").Lock()
        self.base = "rcs/v1/%s/%s" % (client_root, entity_ident)
        self.client = mqtt.Client(client_id=entity_ident, clean_session=False)
        self.client.will_set(self.base + "/state", json.dumps(
            {"v": 1, "online": False, "tags": self.tags, "agent_version": "fake", "ts": 0}),
            qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.connected = False
        self.asked = {}  # SUBSCRIBE message id -> its filters
        self.refused = []  # filters the broker refused in a SUBACK (asked for again)

    def start(self):
        self.client.connect("127.0.0.1", self.broker.port, keepalive=5)
        self.client.loop_start()
        wait_for(lambda: self.connected, what="device connected")
        return self

    def stop(self, clean=True):
        if clean:
            self.client.publish(self.base + "/state", json.dumps(
                {"v": 1, "online": False, "tags": self.tags, "agent_version": "fake",
                 "ts": int(time.time())}), qos=1, retain=True).wait_for_publish(5)
            self.client.disconnect()
        else:
            # like a crash: drop the socket without DISCONNECT, so the Last Will fires
            self.client.socket().close()
        self.client.loop_stop()
        self.connected = False

    def _subscribe(self, client, filters):
        if not client.is_connected():
            return  # the next connect subscribes anew
        rc, mid = client.subscribe([(f, 1) for f in filters])
        with self.lock:
            self.asked[mid] = list(filters)

    def _on_subscribe(self, client, userdata, mid, granted):
        # like the agent (common/mqttc.c): a filter refused in the SUBACK (NATS, when the
        # JetStream consumer of a QoS 1 subscription cannot be made in time) is asked for
        # again a moment later
        with self.lock:
            filters = self.asked.pop(mid, [])
            refused = [f for f, g in zip(filters, granted) if g == 0x80]
            self.refused.extend(refused)
        if refused:
            t = __import__("threading").Timer(1.0, self._subscribe, (client, refused))
            t.daemon = True
            t.start()

    def _on_connect(self, client, userdata, flags, rc):
        self._subscribe(client, [self.base + "/jobs/+", self.base + "/jobs/+/cancel"])
        client.publish(self.base + "/state", json.dumps(
            {"v": 1, "online": True, "tags": self.tags, "agent_version": "fake",
             "ts": int(time.time())}), qos=1, retain=True)
        self.connected = True

    def _on_message(self, client, userdata, msg):
        parts = msg.topic.split("/")
        if parts[-1] == "cancel":
            with self.lock:
                self.cancels.append(json.loads(msg.payload))
            return
        env = json.loads(msg.payload)
        job = env["job"]
        with self.lock:
            repeat = any(e["job"] == job for e in self.envelopes)
            self.envelopes.append(env)
        if not self.auto:
            return
        if repeat:
            if job in self.final:
                self.client.publish(self._status_topic(job), self.final[job], qos=1)
            return
        for st in ("edge_transmitted", "edge_started", "edge_running"):
            self.report(job, st)
        self.final[job] = self.report(job, "terminated", "ok:" + job)

    def _status_topic(self, job):
        return "%s/jobs/%s/status" % (self.base, job)

    def report(self, job, status, response=None, seq=None, error=None, phase=None,
               within=None):
        with self.lock:
            if seq is None:
                seq = self.seq.get(job, 0) + 1
            self.seq[job] = max(seq, self.seq.get(job, 0))
        body = {"v": 1, "job": job, "status": status, "seq": seq, "ts": int(time.time()),
                "response": response}
        if error is not None:
            body["error"] = error  # an edge_error's cause (docs/mqtt.md "Status report")
        if phase is not None:
            body["phase"] = phase  # a job that spans a reboot (docs/mqtt.md "Status report")
        if within is not None:
            body["within"] = within
        payload = json.dumps(body)
        self.client.publish(self._status_topic(job), payload, qos=1)
        return payload

    def jobs_received(self):
        with self.lock:
            return [e["job"] for e in self.envelopes]


# ---------------------------------------------------------------------------
# The real device daemon (rcs-agent) and the keys it trusts.


def make_ec_keypair(workdir, name="signing"):
    """Makes an EC P-256 key pair with openssl in workdir: returns (private PEM path,
    public PEM path), named <name>-key.pem and <name>-pub.pem."""
    key = os.path.join(workdir, "%s-key.pem" % name)
    pub = os.path.join(workdir, "%s-pub.pem" % name)
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                    "-out", key], check=True, capture_output=True, timeout=30)
    subprocess.run(["openssl", "ec", "-in", key, "-pubout", "-out", pub], check=True,
                   capture_output=True, timeout=30)
    return key, pub


def key_id(pub_pem):
    """docs/signing.md: first 16 hex chars of SHA-256 of the DER SubjectPublicKeyInfo."""
    import hashlib
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", pub_pem, "-outform", "DER"],
                         check=True, capture_output=True, timeout=30).stdout
    return hashlib.sha256(der).hexdigest()[:16]


def canonical_json(x):
    """RFC 8785 for objects of strings, integers and nested objects (docs/signing.md)."""
    return json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def task_manifest(client_root, task_ident, version, script_name, source, constants=None,
                  variables_info=None):
    """The bytes a task signature covers (docs/signing.md); source str or bytes."""
    import hashlib
    if isinstance(source, str):
        source = source.encode()
    return ("rcs-task-signature-v1\n"
            "client_root: %s\ntask: %s\nversion: %d\nscript: %s\nscript_sha256: %s\n"
            "constants: %s\nvariables_info: %s\n" % (
                client_root, task_ident, version, script_name,
                hashlib.sha256(source).hexdigest(), canonical_json(constants or {}),
                canonical_json(variables_info or {}))).encode()


def sign_es256(key_pem, data, pub_pem):
    """A task signature object over data made with openssl (ES256, DER, base64)."""
    import base64
    der = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key_pem], input=data,
                         check=True, capture_output=True, timeout=30).stdout
    return {"alg": "ES256", "key_id": key_id(pub_pem),
            "value": base64.b64encode(der).decode()}


class Agent:
    """A real rcs-agent (build/bin/rcs-agent, or binary, optionally run through an
    emulator prefix such as ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]) for one
    device, with its state directory, log file and files directory in workdir.

    trusted_keys, tags, file_dirs: lists; allow_commands: a dict NAME -> PATH or a list
    of "NAME=PATH"; extra_args: more flags (e.g. ["--max-queue", "1"]). The state
    directory survives stop()/start(), like a device's disk. stop(sig) signals the pid
    and returns the exit code (negative signal number when killed by a signal).
    """

    def __init__(self, workdir, mqtt, client_root, entity_ident, trusted_keys=(), tags=(),
                 allow_commands=(), file_dirs=(), extra_args=(), binary=None, emulator=(),
                 state_dir=None, name=None, env=None):
        self.workdir = workdir
        self.mqtt = mqtt
        self.client_root = client_root
        self.entity_ident = entity_ident
        if isinstance(trusted_keys, str):
            trusted_keys = [trusted_keys]
        self.trusted_keys = list(trusted_keys)
        self.tags = list(tags)
        if isinstance(allow_commands, dict):
            allow_commands = ["%s=%s" % kv for kv in allow_commands.items()]
        self.allow_commands = list(allow_commands)
        self.file_dirs = list(file_dirs)
        self.extra_args = list(extra_args)
        self.binary = binary or AGENT
        self.emulator = list(emulator or ())
        self.name = name or ("agent-" + entity_ident[-12:])
        self.state_dir = state_dir or os.path.join(workdir, self.name + "-state")
        self.log_path = os.path.join(workdir, self.name + ".log")
        self.env = env
        self.proc = None
        self.log = None
        self.starts = 0

    def argv(self):
        args = [*self.emulator, self.binary, "--mqtt", self.mqtt,
                "--client-root", self.client_root, "--entity-ident", self.entity_ident,
                "--state-dir", self.state_dir]
        for k in self.trusted_keys:
            args += ["--trusted-key", k]
        for t in self.tags:
            args += ["--tag", t]
        for c in self.allow_commands:
            args += ["--allow-command", c]
        for d in self.file_dirs:
            args += ["--file-dir", d]
        return args + self.extra_args

    def start(self, wait=True, timeout=20):
        """Starts the agent; with wait, until its log says it started (or fails when it
        exits first)."""
        if self.proc is not None and self.proc.poll() is None:
            raise AssertionError("agent %s already running" % self.name)
        mark = len(self.read_log(tail=None))
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)
        self.starts += 1
        if wait:
            deadline = time.time() + timeout
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    rc = self.proc.returncode
                    self.log.close()
                    self.proc = None
                    raise AssertionError("agent %s exited with %d:\n%s" % (
                        self.name, rc, self.read_log()))
                if ": device %s of " % self.entity_ident in self.read_log(tail=None)[mark:]:
                    return self
                time.sleep(0.05)
            raise AssertionError("agent %s did not start:\n%s" % (self.name, self.read_log()))
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        """Sends sig to the running agent (e.g. SIGHUP)."""
        if not self.alive():
            raise AssertionError("agent %s is not running" % self.name)
        os.kill(self.proc.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Stops the agent by pid; returns its exit code (None when it wasn't started)."""
        if self.proc is None:
            return None
        if not end_process(self.proc, sig, timeout):
            self.log.close()
            self.proc = None
            raise AssertionError("agent %s did not stop on signal %d" % (self.name, sig))
        self.log.close()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def read_log(self, tail=20000):
        """The agent's log (stdout and stderr of every start), the last tail characters."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return text if tail is None else text[-tail:]

    def wait_log(self, text, timeout=10):
        """Waits until text appears in the log; returns the log."""
        return wait_for(lambda: text in self.read_log(tail=None) and self.read_log(tail=None),
                        timeout=timeout, what="%r in the log of agent %s" % (text, self.name))


# ---------------------------------------------------------------------------
# SMTP: a real mail server (aiosmtpd) in this process, for the notification tests.


class SmtpMessage:
    """One mail the SmtpServer accepted: the envelope (mail_from, rcpt_tos), the raw
    content bytes as received after DATA, and the arrival time. message is the parsed
    email (email.policy.default: decoded headers, get_content() for the body)."""

    def __init__(self, mail_from, rcpt_tos, content, at):
        import email
        import email.policy
        self.mail_from = mail_from
        self.rcpt_tos = list(rcpt_tos)
        self.content = bytes(content)
        self.at = at
        self.message = email.message_from_bytes(self.content, policy=email.policy.default)

    @property
    def raw_headers(self):
        """The header section as bytes, as sent (CRLF line endings, folding kept)."""
        head, _, _ = self.content.partition(b"\r\n\r\n")
        return head

    def header_names(self):
        """Names of the header fields, in order, read from the raw lines (a continuation
        line, starting with a space or tab, belongs to the field before it)."""
        names = []
        for line in self.raw_headers.split(b"\r\n"):
            if line[:1] in (b" ", b"\t") or not line:
                continue
            names.append(line.partition(b":")[0].decode("ascii", "replace").strip())
        return names

    @property
    def subject(self):
        """The Subject with RFC 2047 encoded words decoded."""
        import email.header
        raw = self.message.get("Subject", "")
        return str(email.header.make_header(email.header.decode_header(str(raw))))

    @property
    def body(self):
        """The plain-text body as str (decoded with its charset)."""
        return self.message.get_content()

    def __repr__(self):
        return "<SmtpMessage from %s to %s: %r>" % (self.mail_from, self.rcpt_tos,
                                                   self.content[:200])


class SmtpServer:
    """A real SMTP server on 127.0.0.1:<free port>: aiosmtpd's Controller (its own
    thread and event loop) in this process, collecting every accepted mail in messages.

    stop() closes the port (connections are refused, like a server that is down) and
    start() opens it again on the same port. Modes for the DATA answer:
      accept()        250, the mail is recorded in messages (the default)
      tempfail(code)  451 (or code) for every DATA: nothing is recorded in messages, the
                      attempt is counted in rejected
      slow(seconds)   sleeps that long before answering 250 (other connections are
                      served meanwhile)
    url is smtp://127.0.0.1:<port>. auth=(user, password) makes the server require SMTP
    AUTH (PLAIN or LOGIN, without TLS) with these credentials; auth_attempts records
    (user, password, accepted) of every try.
    """

    def __init__(self, port=None, hostname="127.0.0.1", auth=None):
        import threading
        self.hostname = hostname
        self.auth = auth
        self.auth_attempts = []
        self.port = port or free_port()
        self.url = "smtp://%s:%d" % (hostname, self.port)
        self.lock = threading.Lock()
        self.messages = []
        self.rejected = []  # (mail_from, rcpt_tos, time) of the DATA answered with an error
        self.data_commands = 0  # every DATA that reached the end of its content
        self.mode = "accept"
        self.delay = 0.0
        self.fail_reply = "451 4.3.0 Temporary failure, try again later"
        self.controller = None

    # -- modes -------------------------------------------------------------------------

    def accept(self):
        with self.lock:
            self.mode, self.delay = "accept", 0.0
        return self

    def tempfail(self, reply="451 4.3.0 Temporary failure, try again later"):
        with self.lock:
            self.mode, self.fail_reply = "tempfail", reply
        return self

    def slow(self, seconds):
        with self.lock:
            self.mode, self.delay = "slow", float(seconds)
        return self

    # -- life --------------------------------------------------------------------------

    def start(self):
        from aiosmtpd.controller import Controller
        if self.controller is not None:
            return self
        deadline = time.time() + 10
        while True:
            kw = {}
            if self.auth is not None:
                import logging
                import warnings
                # a test server on loopback: AUTH without TLS is what we want
                warnings.filterwarnings("ignore", module=r"aiosmtpd\..*")
                warnings.filterwarnings("ignore", message=".*AUTH while not requiring TLS.*")
                warnings.filterwarnings("ignore", message=".*login_data is deprecated.*")
                logging.getLogger("mail.log").setLevel(logging.ERROR)
                kw = dict(auth_required=True, auth_require_tls=False,
                          authenticator=self._authenticate)
            controller = Controller(_SmtpHandler(self), hostname=self.hostname, port=self.port,
                                    ready_timeout=10, **kw)
            try:
                controller.start()
                break
            except Exception:
                # the port of the last start may still be held for a moment
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        self.controller = controller
        return self

    def stop(self):
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def running(self):
        return self.controller is not None

    # -- what arrived ------------------------------------------------------------------

    def received(self, predicate=None):
        """A copy of the accepted messages, those predicate(msg) accepts when given."""
        with self.lock:
            msgs = list(self.messages)
        return [m for m in msgs if predicate is None or predicate(m)]

    def wait_messages(self, count, predicate=None, timeout=15.0):
        """Waits until at least count accepted messages match predicate; returns them."""
        return wait_for(lambda: len(self.received(predicate)) >= count and
                        self.received(predicate), timeout=timeout, interval=0.05,
                        what="%d mail(s) at the SMTP server" % count)

    def clear(self):
        with self.lock:
            self.messages = []
            self.rejected = []
            self.data_commands = 0

    def _authenticate(self, server, session, envelope, mechanism, auth_data):
        from aiosmtpd.smtp import AuthResult, LoginPassword
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        user = auth_data.login.decode("utf-8", "replace")
        password = auth_data.password.decode("utf-8", "replace")
        ok = (user, password) == tuple(self.auth)
        with self.lock:
            self.auth_attempts.append((user, password, ok))
        return AuthResult(success=ok, handled=False)

    async def _on_data(self, session, envelope):
        import asyncio
        with self.lock:
            mode, delay, reply = self.mode, self.delay, self.fail_reply
            self.data_commands += 1
        if mode == "slow" and delay > 0:
            await asyncio.sleep(delay)
        if mode == "tempfail":
            with self.lock:
                self.rejected.append((envelope.mail_from, list(envelope.rcpt_tos), time.time()))
            return reply
        content = envelope.original_content or envelope.content
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogateescape")
        msg = SmtpMessage(envelope.mail_from, envelope.rcpt_tos, content, time.time())
        with self.lock:
            self.messages.append(msg)
        return "250 2.0.0 Message accepted for delivery"


class _SmtpHandler:
    """aiosmtpd handler: hands DATA to its SmtpServer."""

    def __init__(self, server):
        self.server = server

    async def handle_DATA(self, server, session, envelope):
        return await self.server._on_data(session, envelope)
