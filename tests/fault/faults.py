#!/usr/bin/env python3
"""Fault injection for the Remote Command Service.

Starts the real stack on free loopback ports (never 1883): a real mosquitto, the real
rcs-coordinator, real rcs-agents and/or simulated devices (devsim.py: many MQTT devices in
one process), a real SMTP server (aiosmtpd); injects faults; then checks invariants:

  I1  every accepted job reaches exactly one terminal status (terminated, edge_error,
      cancelled, expired: docs/architecture.md) and keeps it;
  I2  no device runs a job twice (real agents: a marker file per job written by the
      script; simulated devices: their journal);
  I3  a job's status history only moves forward (initial < pending < transmited <
      edge_transmitted < edge_started < edge_running < terminal; edge_running may repeat;
      after cancelled/expired only what the device said is appended; nothing after
      terminated/edge_error);
  I4  no accepted job is lost (every job a 201 answer listed exists and ends); a request
      whose answer was lost is all or nothing (a bulk send: every job of the group or
      none); no device receives a job the coordinator does not know.

Scenarios (each takes a seed; the seed picks the fault's timing and shape):

  coordinator-kill  a tag send to --devices simulated devices; a first send without
                    faults measures its phases (request, publishing, reports); the seed
                    picks a phase and a moment in it for a kill -9 of the coordinator (and,
                    for half of the seeds, a second kill during the recovery); restart;
                    I1-I4, the group all or nothing.
  broker            kill -9 + restart and SIGSTOP/SIGCONT of mosquitto, during sends and
                    during reports (devices working), with simulated devices and 2 agents.
  agent-kill        real agents: kill -9 mid-script at random points (and again), and after
                    the script finished but before the broker acknowledged the report
                    (broker SIGSTOPped, or broker down); restart; I1-I3, seq only grows.
  db-full           the coordinator's database on a small tmpfs that fills up: 503 with the
                    JSON error body, no partial rows, reads keep working, reports arriving
                    meanwhile are not lost, recovery once a filler file is deleted.
  agent-disk-full   the agent's state directory on a full tmpfs: a new job is refused with
                    a reason (edge_error), never run unjournaled; normal again once freed.
  clock-jump        the coordinator under libfaketime (its clock only: the kernel's is
                    never set, so the timerfd that tells the coordinator about a set clock
                    is not exercised); the clock jumps forward and back around
                    scheduled_time (also across a kill -9): each scheduled job fires once
                    and never before its time; and the re-send of a silent device's job
                    goes on after the clock went back.
  smtp              the SMTP server down (and a coordinator kill -9 meanwhile), then
                    refusing with 451, then back: jobs unaffected, every mail delivered once
                    later; with --long also the give-up after 10 attempts ("failed").

Shapes (--shape; the invariants are the same in both):

  single     (default) one coordinator on SQLite, one mosquitto: every scenario above.
  scale-out  the shape of docs/scale-out.md: two coordinators (--node-id n1 and n2,
             --lease 5) on one PostgreSQL database (a server made with initdb in a temporary
             directory, tests/integration/pg_server.py; the fleet prepared once and copied
             with CREATE DATABASE ... TEMPLATE) and a 3-node NATS cluster with JetStream and
             MQTT (tests/integration/nats_cluster.py). Every client gets every node's URL:
             each coordinator and agent its list starting on another node, simulated devices
             spread over the nodes and moving to the next one when theirs fails. Requests
             go to the two coordinators in turn (to the survivor while one is dead). Needs
             nats-server and PostgreSQL's server (tools/deps.sh test), else Skip.
    coordinator-kill  the seed also picks which coordinator is killed (kill -9, and for half
                      the seeds again during its restart); the faulted send goes to it, the
                      other keeps serving; the killed one is started again. Also checked
                      (verify_sim, I2; history, I1/I3): no device ran a job twice, every job
                      one terminal status.
    broker            the seed picks the NATS node killed (kill -9, then started again on
                      its store) or stopped (SIGSTOP, SIGCONT) in each round.
    agent-kill        as in single; the broker faults hit the node the agent is connected
                      to (its /connz).
    smtp              as in single; the seed picks the coordinator killed meanwhile.
    db-full           PostgreSQL of its own for the run, its data directory on a 64 MB tmpfs
                      and its write-ahead log outside it (initdb --waldir): a table that
                      cannot grow fails its statement (SQLSTATE 53100, the coordinators
                      answer 503), where a log that cannot grow would stop the server
                      (PANIC), a database outage rather than a full disk, decided by where
                      the log is in its segment rather than by the seed. The checks are
                      single's; after the kill -9s on the full disk the server must still
                      run and read every job (instead of SQLite's integrity_check).
  Left out of scale-out (asked for, they are refused with the reason):
    clock-jump        each coordinator compares claim leases (lease_until) and scheduled
                      times with its own clock (time()); with libfaketime on one of the two,
                      the other (true clock) sends the scheduled jobs when they are due and
                      a jump only ends or stretches the faked one's leases as the other sees
                      them. The single shape's checks (each scheduled job fires once, never
                      before its time by the coordinator's clock) have no single clock to
                      hold to: the scenario would test nothing it claims.
    agent-disk-full   the fault is on the agent's own disk; the coordinators' shape adds
                      nothing that agent-kill does not already run on it.

The database is read directly only through db_rows() (sqlite3 on a file, psql on a
postgresql:// URL), e.g. the job statuses at the moment of a kill. Scale-out runs also
record, as stats, the PostgreSQL deadlocks the coordinators logged (pg_deadlocks_logged,
with a note) and the SUBSCRIBE filters a NATS node refused to a simulated device
(suback_refused: such a device connects again, where the agent would stay without its
subscription; docs/scale-out.md, "Testing").

Run (as root for the tmpfs scenarios; Debian's python3 has paho-mqtt and aiosmtpd):

  cmake --build build -j2
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/fault/faults.py \
      --seeds 5 --devices 1000 [--scenarios coordinator-kill,broker] [--json out.json]
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/fault/faults.py \
      --shape scale-out --seeds 5 --devices 200 [--scenarios ...]

tests/integration/test_faults.py runs every scenario once with one seed and fewer devices
(ctest), tests/integration/test_faults_scale_out.py every scenario of the scale-out shape.
Exit status 1 when an invariant was violated.
"""

import argparse
import atexit
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import pg_server  # noqa: E402
import rcs_harness as h  # noqa: E402
from devsim import DeviceSim  # noqa: E402
from nats_cluster import NATS_SERVER, NatsCluster  # noqa: E402

TERMINAL = ("terminated", "edge_error", "cancelled", "expired")
RANK = {"initial": 0, "pending": 1, "transmited": 2, "edge_transmitted": 3, "edge_started": 4,
        "edge_running": 5, "terminated": 6, "edge_error": 6, "cancelled": 6, "expired": 6}
DEVICE_STATUSES = ("edge_transmitted", "edge_started", "edge_running", "terminated",
                   "edge_error")
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# the script real agents run: a marker per job (I2), optional work time, a known answer
RUN_SCRIPT = """local id = rcs.job.ident
local ok, old = pcall(rcs.file.read, "runs-" .. id)
rcs.file.write("runs-" .. id, (ok and old or "") .. "x")
local secs = rcs.variables.secs or 0
if secs > 0 then
  rcs.progress("working")
  rcs.sleep(secs)
end
return "done " .. id
"""
RUN_VARS = {"secs": {"type": "number", "optional": True},
            "pad": {"type": "string", "optional": True}}

_T0 = time.time()


def log(*a):
    print("[fault %6.1fs]" % (time.time() - _T0), *a, file=sys.stderr, flush=True)


class Skip(Exception):
    """The scenario cannot run here (e.g. mount not permitted); the message says why."""


SHAPES = ("single", "scale-out")
# the scale-out shape's lease (--lease): a killed coordinator's claims pass to the other soon
SCALE_OUT_LEASE = 5
# scenarios left out of the scale-out shape, and why (the module's docstring says more)
SCALE_OUT_REFUSED = {
    "clock-jump": "each coordinator compares claim leases and scheduled times with its own "
                  "clock, so with libfaketime on one of two coordinators the other (true "
                  "clock) sends the scheduled jobs and a jump only ends or stretches leases: "
                  "the single shape's checks (fires once, never before its time by the "
                  "coordinator's clock) do not apply",
    "agent-disk-full": "the fault is on the agent's own disk; the coordinators' shape adds "
                       "nothing agent-kill does not already run on it",
}


def scale_out_missing():
    """Why the scale-out shape cannot run here (None: it can)."""
    if not os.path.exists(NATS_SERVER):
        return "nats-server is not installed (Debian package nats-server)"
    if not pg_server.available():
        return "PostgreSQL's server is not installed (Debian package postgresql)"
    return None


# ---------------------------------------------------------------------------------------
# processes


class Coord(h.Coordinator):
    """rcs_harness.Coordinator (its port kept across restarts) with an environment
    (LD_PRELOAD for libfaketime), a longer start and its full log."""

    def __init__(self, workdir, extra_args=(), db=None, env=None):
        super().__init__(workdir, extra_args=extra_args, db=db, env=env, start_timeout=30)

    def full_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def mark(self):
        return len(self.full_log())

    def wait_connected(self, mark=0, timeout=40):
        h.wait_for(lambda: "connected to" in self.full_log()[mark:], timeout=timeout,
                   interval=0.1, what="the coordinator connected to the broker")

    def kill9(self):
        return self.stop(signal.SIGKILL)


def broker_kill9(b):
    b.stop(signal.SIGKILL)


def broker_node(run, b, client_id=None):
    """The node of the broker a fault hits: None for mosquitto; of a NATS cluster the one
    client_id is connected to, else one the seed picks."""
    if not isinstance(b, Cluster):
        return None
    node = b.node_of(client_id) if client_id else None
    return node if node is not None else run.rng.randrange(len(b.nodes))


def broker_down(b, node):
    """kill -9 of mosquitto or of the NATS node."""
    if node is None:
        broker_kill9(b)
    else:
        b.kill9(node)


def broker_up(b, node):
    if node is None:
        b.start()
    else:
        b.start(node)


def broker_pause(b, node):
    """SIGSTOP of mosquitto or of the NATS node."""
    if node is None:
        sig(b.proc, signal.SIGSTOP)
    else:
        b.sigstop(node)


def broker_resume(b, node):
    if node is None:
        sig(b.proc, signal.SIGCONT)
    else:
        b.sigcont(node)


def broker_malformed(b, client_id):
    """How often the broker dropped a client whose id begins with client_id for a malformed
    packet (mosquitto's log)."""
    if not isinstance(b, h.Mosquitto):
        return 0
    try:
        with open(b.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return 0
    return len(re.findall(r"Client %s\S* disconnected due to malformed packet"
                          % re.escape(client_id), text))


def sig(proc, s):
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, s)


class Run:
    """One scenario run with one seed: a work directory, what it started (stopped by
    close(), in reverse order), and what it found (violations, notes, stats)."""

    def __init__(self, scenario, seed, keep=False, shape="single"):
        self.scenario = scenario
        self.seed = seed
        self.shape = shape
        # the single shape keeps the seeds' meaning it always had
        self.rng = random.Random("%s/%d" % (scenario, seed) if shape == "single" else
                                 "%s/%s/%d" % (shape, scenario, seed))
        self.keep = keep
        self.workdir = tempfile.mkdtemp(prefix="rcs-fault-%s-%d-" % (scenario, seed))
        self.violations = []
        self.notes = []
        self.stats = {}
        self._cleanups = []
        self.coords = []
        self._agents = 0

    def violation(self, text):
        log("VIOLATION [%s seed %d]: %s" % (self.scenario, self.seed, text))
        self.violations.append(text)

    def check(self, cond, text):
        if not cond:
            self.violation(text)
        return bool(cond)

    def note(self, text):
        log("note [%s seed %d]: %s" % (self.scenario, self.seed, text))
        self.notes.append(text)

    def stat(self, key, value):
        self.stats[key] = value

    def on_close(self, fn):
        self._cleanups.append(fn)

    def close(self):
        for fn in reversed(self._cleanups):
            try:
                fn()
            except Exception as e:  # cleanup goes on
                log("cleanup: %r" % e)
        self._cleanups = []
        if self.keep:
            log("kept", self.workdir)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the stack ---------------------------------------------------------------------

    @property
    def scaled(self):
        return self.shape == "scale-out"

    def broker(self, **kw):
        """mosquitto, or for the scale-out shape a 3-node NATS cluster (Cluster)."""
        if self.scaled:
            c = Cluster(self.workdir)
            self.on_close(c.stop)
            return c
        b = h.Mosquitto(self.workdir, **kw)
        with open(b.conf, "a") as f:
            f.write("max_connections -1\n")
        b.start()

        def stop():
            sig(b.proc, signal.SIGCONT)
            b.stop()
        self.on_close(stop)
        return b

    def coordinator(self, db, args, env=None):
        c = Coord(self.workdir, extra_args=args, db=db, env=env)
        self.coords.append(c)

        def stop():
            if c.proc is not None:
                c.stop(signal.SIGKILL)
        self.on_close(stop)
        return c

    def database(self):
        """A new database: an SQLite file, or for the scale-out shape a new PostgreSQL
        database (one server per process, pg_server.py)."""
        if self.scaled:
            return pg_server.shared().create_db("fault")
        return os.path.join(self.workdir, "rcs.db")

    def coordinators(self, db, broker, args, env=None):
        """The coordinators of the shape on db: one (single), or two (scale-out: node ids
        n1 and n2, --lease SCALE_OUT_LEASE, every NATS node's URL, each list starting on
        another node). Not started."""
        if not self.scaled:
            return [self.coordinator(db, ["--mqtt", broker.url] + list(args), env=env)]
        out = []
        for i in range(2):
            mq = []
            for u in rotated(broker.urls, i):
                mq += ["--mqtt", u]
            out.append(self.coordinator(db, ["--node-id", "n%d" % (i + 1), "--lease",
                                             str(SCALE_OUT_LEASE)] + mq + list(args), env=env))
        return out

    def api(self, coords, key):
        """The API: the coordinator's, or with several each request to the next one alive
        (AltApi)."""
        if len(coords) == 1:
            return coords[0].api(key)
        return AltApi(coords, key)

    def start_all(self, coords):
        for c in coords:
            c.start()
        for c in coords:
            c.wait_connected()

    def stop_coordinator_cleanly(self, c):
        """SIGTERM at the end: the coordinator must still be alive and exit 0."""
        if not self.check(c.alive(), "the coordinator died:\n" + c.read_log()[-3000:]):
            return
        rc = c.stop()
        self.check(rc == 0, "coordinator exited %r on SIGTERM:\n%s" % (rc, c.read_log()[-3000:]))

    def sim(self, broker, client_root, idents, **kw):
        s = DeviceSim(broker_ports(broker), client_root, idents, **kw)
        self.on_close(s.stop)
        return s.start(timeout=60 + len(idents) / 20)

    def agent(self, broker, client_root, ident, name, pub, **kw):
        fdir = os.path.join(self.workdir, name + "-files")
        os.makedirs(fdir, exist_ok=True)
        urls = broker_urls(broker)
        if len(urls) > 1:
            # every node, the list starting on another node for each agent
            urls = rotated(urls, self._agents)
            self._agents += 1
            extra = list(kw.pop("extra_args", ()))
            for u in urls[1:]:
                extra += ["--mqtt", u]
            kw["extra_args"] = extra
        a = h.Agent(self.workdir, urls[0], client_root, ident, trusted_keys=[pub],
                    file_dirs=[fdir], name=name, **kw)
        a.files = fdir

        def stop():
            if a.proc is not None:
                try:
                    a.stop(signal.SIGKILL)
                except Exception:
                    pass
        self.on_close(stop)
        return a

    def tmpfs(self, name, size, owner=None):
        """Mounts a tmpfs of size (e.g. "4m") at workdir/name (its root owned by owner, a
        (uid, gid), if given); Skip when not permitted."""
        path = os.path.join(self.workdir, name)
        os.makedirs(path, exist_ok=True)
        opts = "size=%s,mode=0700" % size
        if owner is not None:
            opts += ",uid=%d,gid=%d" % owner
            os.chmod(self.workdir, 0o755)  # the owner must reach it
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs",
                            path], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise Skip("cannot mount a tmpfs (%s): %s; run as root in a container that "
                       "allows mount" % (path, (p.stderr or p.stdout).strip()))

        def umount():
            r = subprocess.run(["umount", path], capture_output=True, timeout=30)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)
        self.on_close(umount)
        return path


def rotated(items, i):
    """items starting at the i-th (mod len)."""
    items = list(items)
    i %= len(items)
    return items[i:] + items[:i]


class Cluster:
    """The scale-out shape's broker: a 3-node NATS cluster with JetStream and MQTT
    (tests/integration/nats_cluster.py). A node is faulted by index: kill9(i) and start(i),
    sigstop(i) and sigcont(i)."""

    def __init__(self, workdir):
        self.c = NatsCluster(workdir).start()
        self.nodes = self.c.nodes

    @property
    def urls(self):
        return self.c.mqtt_urls

    @property
    def ports(self):
        return [n.mqtt_port for n in self.nodes]

    def kill9(self, i):
        self.c.stop_node(i, signal.SIGKILL)

    def start(self, i):
        self.c.start_node(i)

    def sigstop(self, i):
        sig(self.nodes[i].proc, signal.SIGSTOP)

    def sigcont(self, i):
        sig(self.nodes[i].proc, signal.SIGCONT)

    def node_of(self, client_id):
        """The index of the node client_id is connected to (None: none)."""
        for i, n in enumerate(self.nodes):
            if n.alive() and client_id in self.c.mqtt_client_ids(i):
                return i
        return None

    def logs(self):
        return self.c.logs()

    def stop(self):
        for i in range(len(self.nodes)):
            self.sigcont(i)
        self.c.stop_all()


def broker_urls(b):
    return list(b.urls) if isinstance(b, Cluster) else [b.url]


def broker_ports(b):
    return list(b.ports) if isinstance(b, Cluster) else [b.port]


def _refused(e):
    return isinstance(e, ConnectionRefusedError) or isinstance(
        getattr(e, "reason", None), ConnectionRefusedError)


class AltApi:
    """The API through several coordinators (rcs_harness.Api's methods): each request goes
    to the next coordinator alive, in turn. A GET whose connection fails is tried on the
    next; a write only when its connection was refused (it never reached a coordinator)."""

    def __init__(self, coords, key):
        self.coords = list(coords)
        self.key = key
        self.i = 0
        self.lock = threading.Lock()

    def request(self, method, path, body=None, **kw):
        last = None
        for _ in range(2 * len(self.coords)):
            with self.lock:
                c = self.coords[self.i % len(self.coords)]
                self.i += 1
            if not c.alive():
                continue
            try:
                return c.api(self.key).request(method, path, body=body, **kw)
            except OSError as e:
                last = e
                if method != "GET" and not _refused(e):
                    raise
        if last is not None:
            raise last
        raise ConnectionRefusedError("no coordinator is running")

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


def fill(path, name="filler"):
    """Writes a filler file into the filesystem of path until it is full; returns its
    path."""
    f = os.path.join(path, name)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    if os.write(fd, chunk) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return f


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# ---------------------------------------------------------------------------------------
# the API side of the checks


def jobs_by_ident(api, **filters):
    return {j["ident"]: j for j in h.list_all(api, "/jobs", **filters)}


def count(api, path, **params):
    r = api.get(h.with_query(path, page=1, per_page=1, **params))
    if r.status != 200:
        raise AssertionError("GET %s: %r" % (path, r))
    return r.json["total_items"]


def history(api, ident):
    """Statuses of a job's history snapshots, oldest first (plus the snapshots)."""
    items = h.list_all(api, "/jobs/%s/history" % ident)
    items.reverse()
    return items


def history_violations(ident, items, final_status):
    st = [i["status"] for i in items]
    out = []
    if not st:
        return ["job %s: empty history" % ident]
    if st[0] != "initial":
        out.append("job %s: history starts with %s: %s" % (ident, st[0], st))
    k = next((i for i, s in enumerate(st) if s in TERMINAL), None)
    before = st if k is None else st[:k + 1]
    for a, b in zip(before, before[1:]):
        if a not in RANK or b not in RANK:
            out.append("job %s: unknown status in history %s" % (ident, st))
            break
        if not (RANK[b] > RANK[a] or a == b == "edge_running"):
            out.append("job %s: history moves %s -> %s: %s" % (ident, a, b, st))
            break
    if k is not None:
        if final_status != st[k]:
            out.append("job %s: status %s, but its history ended first with %s: %s" % (
                ident, final_status, st[k], st))
        after = st[k + 1:]
        if st[k] in ("terminated", "edge_error") and after:
            out.append("job %s: history goes on after %s: %s" % (ident, st[k], st))
        if st[k] in ("cancelled", "expired"):
            bad = [s for s in after if s not in DEVICE_STATUSES]
            if bad:
                out.append("job %s: after %s the history holds %s: %s" % (ident, st[k], bad,
                                                                          st))
    return out


def wait_terminal(api, idents, lister, timeout, what="jobs"):
    """Polls lister() (-> {ident: record}) until every ident is terminal; returns the last
    records (those not terminal after timeout are left as they are)."""
    idents = set(idents)
    deadline = time.time() + timeout
    t0 = time.time()
    recs = {}
    while True:
        recs = lister()
        left = [i for i in idents if recs.get(i, {}).get("status") not in TERMINAL]
        if not left:
            return recs, time.time() - t0
        if time.time() > deadline:
            return recs, None
        time.sleep(0.5)


def verify_jobs(run, api, idents, recs, expect=None, history_check=True):
    """I1, I3, I4 for the accepted jobs idents (recs: the latest records). expect(ident,
    record) may return a text naming what is wrong with a terminal job (None: fine).
    Returns {status: count}."""
    counts = {}
    hist_targets = []
    for ident in sorted(idents):
        rec = recs.get(ident)
        if rec is None:
            r = api.get("/jobs/" + ident)
            if r.status == 404:
                run.violation("accepted job %s is lost (404)" % ident)
                continue
            rec = r.json
        s = rec.get("status")
        counts[s] = counts.get(s, 0) + 1
        if s not in TERMINAL:
            run.violation("job %s (device %s) did not end: still %s" % (
                ident, rec.get("entity_ident"), s))
        elif expect is not None:
            what = expect(ident, rec)
            if what:
                run.violation("job %s: %s" % (ident, what))
        hist_targets.append((ident, s))
    if history_check:
        bad = []

        def one(t):
            ident, s = t
            return history_violations(ident, history(api, ident), s)
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            for v in ex.map(one, hist_targets):
                bad += v
        for v in bad[:50]:
            run.violation(v)
        if len(bad) > 50:
            run.violation("... and %d more history violations" % (len(bad) - 50))
    return counts


def verify_sim(run, sim, group_jobs, known_jobs, expect_ran=True):
    """I2 and I4 on simulated devices: group_jobs {ident: record} of one send (one job per
    device), known_jobs every job ident the coordinator has for these devices."""
    snap = sim.snapshot()
    for e in snap["errors"][:20]:
        run.violation("devsim: " + e)
    if snap["suback_refused"]:
        run.stat("suback_refused", snap["suback_refused"])
    for job, n in snap["runs"].items():
        if n > 1:
            run.violation("job %s ran %d times on device %s" % (job, n, snap["job_device"][job]))
    phantom = [j for j in snap["envelopes"] if j not in known_jobs]
    for j in phantom[:20]:
        run.violation("device %s received job %s, which the coordinator does not know" % (
            snap["job_device"][j], j))
    per_device = {}
    for ident, rec in group_jobs.items():
        per_device.setdefault(rec["entity_ident"], []).append(ident)
        dev = snap["job_device"].get(ident)
        if dev is not None and dev != rec["entity_ident"]:
            run.violation("job %s of device %s reached device %s" % (ident,
                                                                     rec["entity_ident"], dev))
        if expect_ran and rec.get("status") == "terminated" and snap["runs"].get(ident) != 1:
            run.violation("job %s is terminated but its device ran it %r times" % (
                ident, snap["runs"].get(ident, 0)))
    for dev, jobs in per_device.items():
        if len(jobs) > 1:
            run.violation("one send made %d jobs for device %s: %s" % (len(jobs), dev, jobs))
    return snap


def agent_runs(agent, job):
    try:
        with open(os.path.join(agent.files, "runs-" + job)) as f:
            return len(f.read())
    except OSError:
        return 0


def verify_agent_runs(run, agents_jobs):
    """I2 on real agents: agents_jobs [(agent, job record)]."""
    for a, rec in agents_jobs:
        n = agent_runs(a, rec["ident"])
        if n > 1:
            run.violation("job %s ran %d times on agent %s" % (rec["ident"], n, a.name))
        if rec["status"] == "terminated":
            if n != 1:
                run.violation("job %s terminated on agent %s but its script ran %d times" % (
                    rec["ident"], a.name, n))
            if rec.get("response") != "done " + rec["ident"]:
                run.violation("job %s terminated with response %r" % (rec["ident"],
                                                                      rec.get("response")))


def sim_expect(ident, rec):
    if rec["status"] != "terminated":
        return "ended %s (%r), expected terminated" % (rec["status"], rec.get("response"))
    if rec.get("response") != "ok:" + ident:
        return "terminated with response %r, expected %r" % (rec.get("response"), "ok:" + ident)
    return None


class DbError(Exception):
    pass


def db_rows(db, sql, *params):
    """The rows of a read-only query on a coordinator's database, straight from the
    database (a coordinator may be dead): db an SQLite file (sqlite3, read-only) or a
    postgresql:// URL (psql, its values as text); params fill the ? placeholders."""
    if db.startswith("postgresql://"):
        k = [0]

        def var(_):
            k[0] += 1
            return ":'p%d'" % k[0]
        args = [shutil.which("psql") or os.path.join(pg_server._bindir(), "psql"), "-X", "-q",
                "-v", "ON_ERROR_STOP=1", "-At", "-F", "\t", "-d", db]
        for i, v in enumerate(params, 1):
            args += ["-v", "p%d=%s" % (i, v)]
        # from stdin: psql interpolates :'name' there, not in -c
        p = subprocess.run(args, input=re.sub(r"\?", var, sql) + ";\n", capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise DbError(p.stderr.strip())
        return [tuple(line.split("\t")) for line in p.stdout.splitlines()]
    try:
        con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        raise DbError(str(e))


def db_status_counts(db, group_name=None):
    """Job statuses straight from the database (used while a coordinator is dead, to
    record the moment of a kill)."""
    try:
        if group_name:
            rows = db_rows(db, "SELECT status, count(*) FROM jobs WHERE group_ident IN "
                           "(SELECT ident FROM groups WHERE name = ?) GROUP BY status",
                           group_name)
        else:
            rows = db_rows(db, "SELECT status, count(*) FROM jobs GROUP BY status")
        return {st: int(n) for st, n in rows}
    except DbError as e:
        return {"error": str(e)}


# ---------------------------------------------------------------------------------------
# a prepared fleet: a database with one tenant, N devices tagged "fleet", the RUN_SCRIPT
# task, made once per process and copied for each run


_FLEETS = {}


def make_devices(api, names, tags, threads=4):
    def make(name):
        r = api.post("/devices", {"name": name, "tags": list(tags)})
        if r.status != 201:
            raise AssertionError("POST /devices: %r" % r)
        return r.json["entity_ident"]
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        return list(ex.map(make, names))


def make_run_task(api, name="fault run", **fields):
    r = api.put("/scripts/faultrun", {"source": RUN_SCRIPT})
    if r.status not in (200, 201):
        raise AssertionError("PUT /scripts/faultrun: %r" % r)
    body = {"name": name, "script": "faultrun", "variables_info": RUN_VARS, "timeout": 120}
    body.update(fields)
    r = api.post("/tasks", body)
    if r.status != 201:
        raise AssertionError("POST /tasks: %r" % r)
    return r.json


def fleet(n, shape="single"):
    """The fleet of n devices: an SQLite file, or (scale-out) a PostgreSQL database that
    fleet_db() copies (CREATE DATABASE ... TEMPLATE)."""
    if (shape, n) in _FLEETS:
        return _FLEETS[(shape, n)]
    d = tempfile.mkdtemp(prefix="rcs-fault-fleet-")
    atexit.register(shutil.rmtree, d, True)
    key, pub = h.make_ec_keypair(d, "k")
    db = os.path.join(d, "fleet.db")
    if shape == "scale-out":
        db = pg_server.shared().create_db("fleet%d" % n)
    c = Coord(d, extra_args=["--signing-key", key], db=db)
    tenant = c.init_tenant(user="fault")
    c.start()
    try:
        api = c.api(tenant["api_key"])
        t0 = time.time()
        idents = make_devices(api, ["sim-%05d" % i for i in range(n)], ["fleet"])
        log("fleet: %d devices made in %.1fs" % (n, time.time() - t0))
        task = make_run_task(api)
    finally:
        rc = c.stop()
    if rc != 0:
        raise AssertionError("coordinator exited %r:\n%s" % (rc, c.read_log()))
    f = {"db": c.db, "client_root": tenant["client_root"], "key": tenant["api_key"],
         "task": task, "idents": idents, "signing_key": key, "pub": pub}
    _FLEETS[(shape, n)] = f
    return f


def fleet_db(run, f):
    """A copy of the fleet's database for this run."""
    if run.scaled:
        server = pg_server.shared()
        server.n += 1
        name = "fault_%d_%d" % (os.getpid(), server.n)
        server.psql("CREATE DATABASE %s TEMPLATE %s" % (name, f["db"].rsplit("/", 1)[1]))
        return server.url(name)
    db = os.path.join(run.workdir, "rcs.db")
    h.copy_db(f["db"], db)
    return db


def fleet_stack(run, n, coord_args=(), online_timeout=None):
    """A copy of the n-device fleet database, a broker, the coordinator(s) of the shape
    (signing key, --resend-after 5 unless coord_args has one), the simulated devices
    online. Returns (fleet, broker, coordinators, api, sim)."""
    f = fleet(n, run.shape)
    db = fleet_db(run, f)
    broker = run.broker()
    args = ["--signing-key", f["signing_key"]]
    if "--resend-after" not in coord_args:
        args += ["--resend-after", "5"]
    coords = run.coordinators(db, broker, args + list(coord_args))
    run.start_all(coords)
    api = run.api(coords, f["key"])
    t0 = time.time()
    sim = run.sim(broker, f["client_root"], f["idents"], tags=["fleet"])
    h.wait_for(lambda: count(api, "/devices", online="true") >= n,
               timeout=online_timeout or (30 + n / 20), interval=0.2,
               what="%d devices online in the coordinator" % n)
    run.stat("fleet_online_s", round(time.time() - t0, 2))
    return f, broker, coords, api, sim


# ---------------------------------------------------------------------------------------
# 1. kill -9 of the coordinator during a bulk send


def tag_send(api, task, group, **extra):
    body = {"tag": "fleet", "group_name": group}
    body.update(extra)
    return api.post("/tasks/%s/jobs/tags" % task, body)


def scenario_coordinator_kill(run, devices, **_):
    f, broker, coords, api, sim = fleet_stack(run, devices)
    task = f["task"]["ident"]
    n = devices

    # a send without faults first: the invariants hold, and its phases set the kill window
    t0 = time.time()
    r = tag_send(api, task, "warm-up")
    t_answer = time.time() - t0
    run.check(r.status == 201, "warm-up tag send: %r" % r)
    warm = {j["ident"] for j in r.json["items"]}
    wg = r.json["group"]["ident"]
    h.wait_for(lambda: count(api, "/jobs", group_ident=wg, status="terminated") == n,
               timeout=60 + n / 10, interval=0.02, what="warm-up send terminated")
    t_done = time.time() - t0
    firsts = sim.snapshot()["first_envelope_at"]
    t_env = max(firsts[j] for j in warm if j in firsts) - t0
    recs = jobs_by_ident(api, group_ident=wg)
    verify_jobs(run, api, warm, recs, expect=sim_expect, history_check=False)
    run.stat("warm_up_s", {"answer": round(t_answer, 3), "last_envelope": round(t_env, 3),
                           "all_terminated": round(t_done, 3)})

    # the seed picks the phase of the send the kill falls into, then the moment in it
    group = "faulted-%d" % run.seed
    phase = run.rng.choice(["request", "publishing", "reports"])
    lo, hi = {"request": (0.0, t_answer * 1.2), "publishing": (t_answer, max(t_env, t_answer)),
              "reports": (t_env, max(t_done, t_env))}[phase]
    delay = run.rng.uniform(lo, hi)
    second = run.rng.random() < 0.5
    delay2 = run.rng.uniform(0, 1.0)
    # scale-out: the seed picks the coordinator killed; the faulted send goes to it, every
    # other request to either (the survivor while it is dead)
    coord = coords[run.rng.randrange(len(coords))] if len(coords) > 1 else coords[0]
    coord_api = coord.api(f["key"])
    run.stat("kill_phase", phase)
    run.stat("kill_delay_s", round(delay, 3))
    if len(coords) > 1:
        run.stat("killed_coordinator", coords.index(coord) + 1)
    answer = {}

    def post():
        try:
            answer["r"] = tag_send(coord_api, task, group)
        except Exception as e:  # the kill cut the connection
            answer["exc"] = repr(e)
    th = threading.Thread(target=post)
    before = sim.snapshot()
    t_post = time.monotonic()
    th.start()
    time.sleep(max(0.0, t_post + delay - time.monotonic()))
    coord.kill9()
    th.join(60)
    snap = sim.snapshot()
    stage = db_status_counts(coord.db, group)
    r = answer.get("r")
    run.stat("post_answer", r.status if r is not None else answer.get("exc", "none"))
    run.stat("at_kill_db_statuses", stage)
    run.stat("at_kill_envelopes_received",
             sum(snap["envelopes"].values()) - sum(before["envelopes"].values()))
    log("coordinator killed %.3fs into the send (%s): answer %s, db %s" % (
        delay, phase, run.stats["post_answer"], stage))
    mark = coord.mark()
    coord.start()
    if second:
        time.sleep(delay2)
        coord.kill9()
        run.stat("second_kill_after_restart_s", round(delay2, 3))
        run.stat("at_second_kill_db_statuses", db_status_counts(coord.db, group))
        mark = coord.mark()
        coord.start()
    t_restart = time.time()
    coord.wait_connected(mark)

    # what was accepted: the 201's jobs; a lost answer: the group is all or nothing
    accepted = set()
    if r is not None:
        if run.check(r.status == 201, "faulted tag send answered %r" % r):
            accepted = {j["ident"] for j in r.json["items"]}
            run.check(len(accepted) == n and not r.json["rejected"],
                      "faulted send: %d jobs, %d rejected" % (len(accepted),
                                                             len(r.json["rejected"])))
    groups = [g for g in h.list_all(api, "/groups") if g["name"] == group]
    run.check(len(groups) <= 1, "one request made %d groups: %r" % (len(groups), groups))
    if r is not None and r.status == 201:
        run.check([g["ident"] for g in groups] == [r.json["group"]["ident"]],
                  "the answered group %s is not stored: %r" % (r.json["group"]["ident"], groups))
    group_jobs = {}
    if groups:
        group_jobs = jobs_by_ident(api, group_ident=groups[0]["ident"])
        run.check(len(group_jobs) == n,
                  "group %s holds %d jobs, expected all %d or none" % (group, len(group_jobs), n))
        for j in accepted - set(group_jobs):
            run.violation("accepted job %s is not in its group" % j)
        accepted |= set(group_jobs)
    run.stat("committed", bool(groups))

    recs, took = wait_terminal(api, accepted, lambda: jobs_by_ident(
        api, group_ident=groups[0]["ident"]) if groups else {}, timeout=90 + n / 10)
    run.stat("recovery_s", round(time.time() - t_restart, 2) if took is not None else None)
    verify_jobs(run, api, accepted, recs, expect=sim_expect)
    known = set(jobs_by_ident(api, task_ident=task))
    run.check(known == warm | set(group_jobs),
              "the coordinator has %d jobs of the task, expected %d" % (
                  len(known), len(warm | set(group_jobs))))
    snap = verify_sim(run, sim, {j: recs[j] for j in accepted if j in recs}, known)
    run.stat("envelope_repeats", sum(snap["envelopes"].values()) - sum(snap["runs"].values()))
    for c in coords:
        run.stop_coordinator_cleanly(c)


# ---------------------------------------------------------------------------------------
# 2. broker kill -9 / SIGSTOP during sends and during reports


def scenario_broker(run, devices, **_):
    f, broker, coords, api, sim = fleet_stack(run, devices)
    task = f["task"]["ident"]
    # two real agents in the fleet as well
    agents = []
    for i in range(2):
        r = api.post("/devices", {"name": "agent-%d" % i, "tags": ["fleet"]})
        a = run.agent(broker, f["client_root"], r.json["entity_ident"], "agent-%d" % i,
                      f["pub"])
        a.start()
        agents.append(a)
    total = devices + len(agents)
    h.wait_for(lambda: count(api, "/devices", online="true") >= total, timeout=30,
               what="agents online")
    by_agent = {a.entity_ident: a for a in agents}
    rounds = [("kill9", "send"), ("stop", "send"), ("kill9", "reports"), ("stop", "reports")]
    for k, (fault, when) in enumerate(rounds):
        name = "%s-during-%s" % (fault, when)
        work = 0.0 if when == "send" else round(run.rng.uniform(1.0, 2.5), 2)
        sim.set_work_seconds(work)
        group = "round-%d-%s" % (k, name)
        answer = {}
        env0 = sum(sim.snapshot()["envelopes"].values())

        def post():
            answer["r"] = tag_send(api, task, group, variables={"secs": work})
        th = threading.Thread(target=post)
        t0 = time.time()
        th.start()
        if when == "send":
            # from the request on: the jobs are being committed and published
            time.sleep(run.rng.uniform(0, 0.05 + devices / 2000))
        else:
            # while the devices work and report
            th.join(60)
            h.wait_for(lambda: sum(sim.snapshot()["runs"].values()) >= devices // 3,
                       timeout=30, interval=0.02, what="devices working")
            time.sleep(run.rng.uniform(0, work / 2))
        fault_at = time.time() - t0
        snap = sim.snapshot()
        node = broker_node(run, broker)
        if fault == "kill9":
            down = run.rng.uniform(0.5, 2.0)
            broker_down(broker, node)
            time.sleep(down)
            broker_up(broker, node)
        else:
            down = run.rng.uniform(1.0, 5.0)
            broker_pause(broker, node)
            time.sleep(down)
            broker_resume(broker, node)
        t_back = time.time()
        th.join(60)
        r = answer.get("r")
        if not run.check(r is not None and r.status == 201, "%s: tag send answered %r" % (
                name, r)):
            continue
        jobs = {j["ident"]: j for j in r.json["items"]}
        run.check(len(jobs) == total, "%s: %d jobs for %d devices" % (name, len(jobs), total))
        # when is everything back: all devices online (docs/mqtt.md: within 10 s), all jobs ended
        online_s = ended_s = None
        deadline = time.time() + 90 + devices / 10
        recs = {}
        progress, progress_at = -1, time.time()
        while time.time() < deadline and (online_s is None or ended_s is None):
            if online_s is None and count(api, "/devices", online="true") >= total:
                online_s = time.time() - t_back
            if ended_s is None:
                recs = jobs_by_ident(api, group_ident=r.json["group"]["ident"])
                done = sum(1 for i in jobs if recs.get(i, {}).get("status") in TERMINAL)
                if done == len(jobs):
                    ended_s = time.time() - t_back
                elif done != progress:
                    progress, progress_at = done, time.time()
                elif time.time() - progress_at > 30 and broker_malformed(broker,
                                                                          "rcs-coordinator"):
                    break  # the coordinator is locked out (see below): no use waiting
            time.sleep(0.2)
        if online_s is None:
            # which ones, and what they last reported: a repeat then says where to look
            away = [(d.get("name"), d.get("entity_ident"), d.get("last_seen"),
                     "agent" if d.get("entity_ident") in by_agent else "simulated")
                    for d in h.list_all(api, "/devices", online="false")]
            run.check(False, "%s: not every device online again: offline %r" % (name, away))
        run.stat(name, {"fault_at_s": round(fault_at, 3), "down_s": round(down, 2),
                        "node": None if node is None else broker.nodes[node].name,
                        "work_s": work,
                        "envelopes_before_fault": sum(snap["envelopes"].values()) - env0,
                        "finished_before_fault": sum(1 for j in jobs if j in snap["runs"]),
                        "all_ended_after_s": round(ended_s, 2) if ended_s is not None else None,
                        "all_online_after_s": round(online_s, 2) if online_s is not None
                        else None})
        log("round %s: %s" % (name, run.stats[name]))

        def expect(ident, rec):
            if rec["entity_ident"] in by_agent:
                return None if rec["status"] == "terminated" else "ended %s (%r)" % (
                    rec["status"], rec.get("response"))
            return sim_expect(ident, rec)
        stuck = [i for i in jobs if recs.get(i, {}).get("status") not in TERMINAL]
        if stuck:
            malformed = broker_malformed(broker, "rcs-coordinator")
            if malformed:
                run.violation(
                    "%s: %d jobs never ended because the broker disconnected the coordinator "
                    "%d times for a malformed packet: after the broker came back, every "
                    "reconnect of the coordinator re-sends its in-flight QoS 1 PUBLISH "
                    "packets (DUP) and one of them carries a corrupted topic (its first "
                    "bytes overwritten, as by a use after free in paho.mqtt.c 1.3.12's "
                    "in-flight list), so the coordinator never stays connected" % (name, len(stuck), malformed))
        verify_jobs(run, api, jobs, recs, expect=expect)
        verify_agent_runs(run, [(by_agent[j["entity_ident"]], recs.get(i, j))
                                for i, j in jobs.items() if j["entity_ident"] in by_agent])
        known = set(jobs_by_ident(api, task_ident=task))
        verify_sim(run, sim, {i: recs[i] for i in jobs if i in recs and
                              recs[i]["entity_ident"] not in by_agent}, known)
        if stuck:
            run.violation("rounds after %s not run: the stack did not recover" % name)
            break
    for a in agents:
        run.check(a.alive(), "agent %s died:\n%s" % (a.name, a.read_log()[-2000:]))
    for c in coords:
        run.stop_coordinator_cleanly(c)


# ---------------------------------------------------------------------------------------
# 3. kill -9 of agents mid-script and before their report is acknowledged


class StatusRecorder:
    """Every status report on the broker (paho, clean session), to check seq."""

    def __init__(self, broker, client_root):
        import paho.mqtt.client as mqtt
        self.reports = []
        self.lock = threading.Lock()
        self.c = mqtt.Client(client_id="fault-rec-%d" % os.getpid(), clean_session=True)
        self.c.on_connect = lambda c, u, fl, rc: c.subscribe(
            "rcs/v1/%s/+/jobs/+/status" % client_root, 1)
        self.c.on_message = self._msg
        self.c.reconnect_delay_set(0.2, 2)
        # of a NATS cluster its last node (a clean session: what passes meanwhile is missed
        # while that node is faulted, which only leaves fewer reports to compare)
        self.c.connect("127.0.0.1", broker_ports(broker)[-1], keepalive=10)
        self.c.loop_start()

    def _msg(self, c, u, m):
        try:
            p = json.loads(m.payload)
        except ValueError:
            return
        with self.lock:
            self.reports.append(p)

    def of(self, job):
        with self.lock:
            return [p for p in self.reports if p.get("job") == job]

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()


def seq_violations(job, reports):
    """The same seq must never carry two different reports (seq only grows across
    restarts: a reused seq is dropped by the coordinator as a duplicate)."""
    by_seq = {}
    out = []
    for p in reports:
        key = (p.get("status"), p.get("response"))
        prev = by_seq.setdefault(p.get("seq"), key)
        if prev != key:
            out.append("job %s: seq %s carried %s and then %s" % (job, p.get("seq"), prev, key))
    return out


def agent_stack(run, n_agents, coord_args=()):
    d = run.workdir
    key, pub = h.make_ec_keypair(d, "k")
    broker = run.broker()
    coords = run.coordinators(run.database(), broker, ["--signing-key", key, "--resend-after",
                                                       "5", *coord_args])
    tenant = coords[0].init_tenant(user="fault")
    run.start_all(coords)
    api = run.api(coords, tenant["api_key"])
    task = make_run_task(api)
    agents = []
    for i in range(n_agents):
        r = api.post("/devices", {"name": "agent-%d" % i, "tags": ["agents"]})
        a = run.agent(broker, tenant["client_root"], r.json["entity_ident"], "agent-%d" % i, pub)
        a.start()
        agents.append(a)
    h.wait_for(lambda: count(api, "/devices", online="true") >= n_agents, timeout=30,
               what="agents online")
    rec = StatusRecorder(broker, tenant["client_root"])
    run.on_close(rec.stop)
    return broker, coords, api, task, agents, tenant, rec


def post_job(api, task, device, **fields):
    """A single job for device (an Agent or an entity ident)."""
    body = {"entity_ident": getattr(device, "entity_ident", device)}
    body.update(fields)
    r = api.post("/tasks/%s/jobs" % task["ident"], body)
    if r.status != 201:
        raise AssertionError("POST job: %r" % r)
    return r.json


def agent_expect(ident, rec):
    if rec["status"] == "edge_error" and not rec.get("response"):
        return "edge_error without a reason"
    return None


def scenario_agent_kill(run, agents=3, **_):
    broker, coords, api, task, ags, tenant, recorder = agent_stack(run, agents)
    all_jobs = []  # (agent, ident)

    # a) kill -9 at a random point of a queue of jobs, restart, maybe again
    plans = {}
    for a in ags:
        secs = [round(run.rng.uniform(0.3, 2.0), 2) for _ in range(3)]
        kills = 1 + (run.rng.random() < 0.5)
        # each kill that many seconds after the jobs were posted / the agent restarted
        plans[a.name] = [(round(run.rng.uniform(0.05, sum(secs)), 2),
                          round(run.rng.uniform(0.1, 1.5), 2)) for _ in range(kills)]
        for s in secs:
            all_jobs.append((a, post_job(api, task, a, variables={"secs": s})["ident"]))
    run.stat("kill_plans", {k: ["kill -9 after %ss, down %ss" % p for p in v]
                            for k, v in plans.items()})

    def execute(a):
        for after, down in plans[a.name]:
            time.sleep(after)
            a.stop(signal.SIGKILL)
            time.sleep(down)
            a.start()
    with concurrent.futures.ThreadPoolExecutor(len(ags)) as ex:
        list(ex.map(execute, ags))

    # b) finished, report not acknowledged: broker SIGSTOPped while the script ends
    # c) the same with the broker down (the report surely never left the agent)
    for variant in ("broker-sigstop", "broker-down"):
        a = ags[run.rng.randrange(len(ags))]
        h.wait_for(lambda: all(api.get("/jobs/" + j).json["status"] in TERMINAL
                               for ag, j in all_jobs if ag is a), timeout=60,
                   what="agent %s idle" % a.name)
        h.wait_for(lambda: api.get("/devices/" + a.entity_ident).json["online"], timeout=20,
                   what="agent %s online" % a.name)
        job = post_job(api, task, a, variables={"secs": 1.5})["ident"]
        all_jobs.append((a, job))
        h.wait_for(lambda: api.get("/jobs/" + job).json["status"] == "edge_running",
                   timeout=20, interval=0.05, what="job %s running" % job)
        mark = len(a.read_log(tail=None))
        node = broker_node(run, broker, a.entity_ident)  # NATS: the agent's node
        if variant == "broker-sigstop":
            broker_pause(broker, node)
        else:
            broker_down(broker, node)
        h.wait_for(lambda: ("job %s: terminated" % job) in a.read_log(tail=None)[mark:],
                   timeout=20, what="the script of %s finished" % job)
        time.sleep(0.2)
        a.stop(signal.SIGKILL)
        if variant == "broker-sigstop":
            broker_resume(broker, node)
        else:
            broker_up(broker, node)
        time.sleep(run.rng.uniform(0.2, 1.5))
        a.start()
        run.stat(variant, {"agent": a.name, "job": job,
                           "node": None if node is None else broker.nodes[node].name})

    idents = [j for _, j in all_jobs]
    recs, took = wait_terminal(api, idents, lambda: jobs_by_ident(api, task_ident=task["ident"]),
                               timeout=90)
    counts = verify_jobs(run, api, idents, recs, expect=agent_expect)
    run.stat("statuses", counts)
    reasons = {}
    for j in idents:
        if recs.get(j, {}).get("status") == "edge_error":
            why = (recs[j].get("response") or "")[:60]
            reasons[why] = reasons.get(why, 0) + 1
    run.stat("edge_error_reasons", reasons)
    verify_agent_runs(run, [(a, recs.get(j, {"ident": j, "status": "?"})) for a, j in all_jobs])
    for a, j in all_jobs:
        for v in seq_violations(j, recorder.of(j)):
            run.violation(v)
    # the two unacknowledged reports must have arrived: their scripts ran to the end
    for variant in ("broker-sigstop", "broker-down"):
        job = run.stats.get(variant, {}).get("job")
        if job:
            rec = recs.get(job, {})
            run.check(rec.get("status") == "terminated",
                      "%s: job %s whose script finished before the agent was killed ended "
                      "%s (%r), expected terminated: the journaled report was lost" % (
                          variant, job, rec.get("status"), rec.get("response")))
    for a in ags:
        run.check(a.alive(), "agent %s is not running:\n%s" % (a.name, a.read_log()[-2000:]))
    for c in coords:
        run.stop_coordinator_cleanly(c)


# ---------------------------------------------------------------------------------------
# 4. the coordinator's database on a full filesystem


def is_unavailable(r):
    e = (r.json or {}).get("error") if isinstance(r.json, dict) else None
    return (r.status == 503 and isinstance(e, dict) and e.get("code") == "unavailable" and
            isinstance(e.get("message"), str) and e["message"] != "")


def full_pg(run):
    """scale-out db-full: a PostgreSQL server of this run whose data directory is on a
    small tmpfs, its write-ahead log (initdb --waldir) outside it: a table that cannot grow
    is an ERROR of the statement (SQLSTATE 53100), where a log that cannot grow would stop
    the server. Returns (mount, server, database URL)."""
    server = pg_server.PgServer()
    run.on_close(server.stop)
    owner = None
    if os.geteuid() == 0:  # the server runs as nobody (pg_server.py)
        st = os.stat(server.dir)
        owner = (st.st_uid, st.st_gid)
    mnt = run.tmpfs("dbfs", "64m", owner=owner)
    server.data = os.path.join(mnt, "data")
    p = server._run([os.path.join(server.bindir, "initdb"), "-D", server.data, "-U",
                     pg_server.USER, "-A", "trust", "--no-locale", "-E", "UTF8", "--no-sync",
                     "--waldir", os.path.join(server.dir, "wal")])
    if p.returncode != 0:
        raise AssertionError("initdb failed: %s%s" % (p.stdout, p.stderr))
    server.start()
    return mnt, server, server.create_db("full")


def db_check(db, server=None):
    """After kill -9s on a full disk: SQLite's integrity_check, or for PostgreSQL that its
    server runs and reads every job. Returns a list of problems."""
    if db.startswith("postgresql://"):
        if server is not None and (server.proc is None or server.proc.poll() is not None):
            return ["the PostgreSQL server exited:\n" + server.read_log()[-2000:]]
        try:
            db_rows(db, "SELECT count(*), count(DISTINCT status) FROM jobs")
            return []
        except DbError as e:
            return ["reading the jobs: %s" % e]
    con = sqlite3.connect(db, timeout=10)
    try:
        ic = con.execute("PRAGMA integrity_check").fetchall()
    finally:
        con.close()
    return [] if ic == [("ok",)] else ["integrity_check: %r" % ic[:5]]


def scenario_db_full(run, **_):
    server = None
    if run.scaled:
        mnt, server, db = full_pg(run)
    else:
        mnt = run.tmpfs("dbfs", "12m")
        db = os.path.join(mnt, "rcs.db")
    broker = run.broker()
    coords = run.coordinators(db, broker, ["--resend-after", "5"])
    tenant = coords[0].init_tenant(user="fault")
    run.start_all(coords)
    api = run.api(coords, tenant["api_key"])
    # scale-out: the seed picks the coordinator killed on the full disk at the end
    coord = coords[run.rng.randrange(len(coords))] if len(coords) > 1 else coords[0]

    def alive():
        return all(c.alive() for c in coords)
    n = 20
    idents = make_devices(api, ["full-%02d" % i for i in range(n)], ["fleet"])
    task = make_run_task(api)
    sim = run.sim(broker, tenant["client_root"], idents, tags=["fleet"])
    h.wait_for(lambda: count(api, "/devices", online="true") >= n, timeout=30,
               what="devices online")
    t = task["ident"]
    r = tag_send(api, t, "before")
    run.check(r.status == 201, "send before the disk filled: %r" % r)
    accepted = {j["ident"] for j in r.json["items"]}
    wait_terminal(api, accepted, lambda: jobs_by_ident(api, task_ident=t), 30)

    # jobs in flight when the disk fills: their reports arrive while it is full
    sim.hold()
    r = tag_send(api, t, "in-flight")
    run.check(r.status == 201, "in-flight send: %r" % r)
    inflight = {j["ident"] for j in r.json["items"]}
    accepted |= inflight
    h.wait_for(lambda: count(api, "/jobs", group_ident=r.json["group"]["ident"],
                             status="running") == n, timeout=30, what="jobs running")

    filler = fill(mnt)
    run.stat("free_bytes_after_fill", free_bytes(mnt))
    log("filesystem full: %d bytes free" % free_bytes(mnt))
    sim.release()  # the reports now arrive while the database cannot grow
    time.sleep(1.0)

    def totals():
        return (count(api, "/jobs"), count(api, "/groups"), count(api, "/devices"),
                count(api, "/tasks"))
    base = totals()
    pad = "p" * 30000
    attempts = [
        ("tag send, 20 jobs with 30 KB each", lambda k: tag_send(
            api, t, "full-%d" % k, variables={"pad": pad})),
        ("single job with 60 KB", lambda k: api.post("/tasks/%s/jobs" % t, {
            "entity_ident": idents[0], "variables": {"pad": "q" * 60000},
            "comment": "full-%d" % k})),
        ("single small job", lambda k: api.post("/tasks/%s/jobs" % t, {
            "entity_ident": idents[1], "comment": "full-%d" % k})),
        ("device", lambda k: api.post("/devices", {"name": "full-dev-%d-%s" % (k, "x" * 150),
                                                   "tags": ["t%d" % i for i in range(64)]})),
        ("task", lambda k: api.post("/tasks", {"name": "full-task-%d" % k, "script": "echo",
                                               "constants": {"blob": "c" * 60000}})),
    ]
    results = []
    failed_groups = []
    k = 0
    for rounds in range(3):
        for what, fn in attempts:
            k += 1
            try:
                r = fn(k)
            except Exception as e:
                run.violation("%s while the disk is full: no answer (%r); coordinator alive: %s"
                              % (what, e, alive()))
                continue
            results.append((what, r.status))
            now = totals()
            if r.status == 503:
                run.check(is_unavailable(r), "%s: 503 without the JSON error body "
                          "{error: {code: unavailable, message}}: %r" % (what, r))
                run.check(now == base, "%s answered 503 but left rows behind: totals "
                          "(jobs, groups, devices, tasks) %r -> %r" % (what, base, now))
                if what.startswith("tag send"):
                    failed_groups.append("full-%d" % k)
            elif r.status == 201:
                # it fit: then it must be there in full
                if what.startswith("tag send"):
                    got = count(api, "/jobs", group_ident=r.json["group"]["ident"])
                    run.check(got == n, "%s answered 201 with %d of %d jobs stored" % (
                        what, got, n))
                    accepted |= {j["ident"] for j in r.json["items"]}
                elif what.startswith("single"):
                    accepted.add(r.json["ident"])
                    got = api.get("/jobs/" + r.json["ident"])
                    run.check(got.status == 200, "%s answered 201, then GET %r" % (what, got))
                base = now
            else:
                run.violation("%s while the disk is full answered %r, expected 503 "
                              "unavailable (or 201)" % (what, r))
                base = now
            # reads keep working
            g = api.get("/jobs?per_page=5")
            run.check(g.status == 200, "GET /jobs while the disk is full: %r" % g)
    run.stat("answers_while_full", results)
    run.check(any(s == 503 for _, s in results),
              "no request was refused although the filesystem is full (%d bytes free): %r" % (
                  free_bytes(mnt), results))
    for c in coords:
        run.check(c.alive(), "the coordinator died on the full disk:\n" + c.read_log()[-3000:])
    log_full = "".join(c.read_log() for c in coords)

    os.unlink(filler)
    t_free = time.time()
    ok = None
    for i in range(40):
        r = tag_send(api, t, "after")
        if r.status == 201:
            ok = r
            break
        time.sleep(0.25)
    if run.check(ok is not None, "still no 201 after the filler was deleted: %r" % r):
        run.stat("first_201_after_free_s", round(time.time() - t_free, 2))
        accepted |= {j["ident"] for j in ok.json["items"]}
    names = {g["name"] for g in h.list_all(api, "/groups")}
    for g in failed_groups:
        run.check(g not in names, "refused send %s left its group behind" % g)
    recs, took = wait_terminal(api, accepted, lambda: jobs_by_ident(api, task_ident=t), 60)
    run.stat("in_flight_ended_after_free_s", round(took, 2) if took is not None else None)

    def expect(ident, rec):
        if rec["status"] != "terminated":
            return "ended %s (%r), expected terminated" % (rec["status"], rec.get("response"))
        return None
    verify_jobs(run, api, accepted, recs, expect=expect)
    verify_sim(run, sim, {}, set(jobs_by_ident(api, task_ident=t)))
    if "could not be stored" in log_full or "not applied" in log_full:
        run.note("reports that arrived while the disk was full were not stored (the log says "
                 "so); the re-send after resend_after recovered them")
    # a kill -9 while the disk is full, a start while it is still full (it may refuse to
    # start, but not damage anything), then a start once it is freed
    filler = fill(mnt)
    coord.kill9()
    try:
        coord.start()
        started_full = True
        r = api.get("/jobs?per_page=1")
        run.check(r.status == 200, "GET /jobs after a restart on the full disk: %r" % r)
        coord.kill9()
    except AssertionError as e:
        started_full = False
        run.note("the coordinator does not start while its filesystem is full: %s" %
                 str(e).strip().splitlines()[-1][:300])
    run.stat("starts_on_full_disk", started_full)
    os.unlink(filler)
    coord.start()
    coord.kill9()
    for problem in db_check(db, server):
        run.violation("after kill -9 on a full disk: " + problem)
    coord.start()
    coord.wait_connected(0)
    recs = jobs_by_ident(api, task_ident=t)
    for j in accepted:
        run.check(recs.get(j, {}).get("status") == "terminated",
                  "job %s after the restarts: %r" % (j, recs.get(j)))
    for c in coords:
        run.stop_coordinator_cleanly(c)


# ---------------------------------------------------------------------------------------
# 5. the agent's state directory full


def scenario_agent_disk_full(run, **_):
    d = run.workdir
    key, pub = h.make_ec_keypair(d, "k")
    broker = run.broker()
    coord = run.coordinator(os.path.join(d, "rcs.db"), ["--mqtt", broker.url, "--signing-key",
                                                        key, "--resend-after", "5"])
    tenant = coord.init_tenant(user="fault")
    coord.start()
    coord.wait_connected()
    api = coord.api(tenant["api_key"])
    task = make_run_task(api)
    state = run.tmpfs("agentfs", "3m")
    r = api.post("/devices", {"name": "full-agent", "tags": []})
    a = run.agent(broker, tenant["client_root"], r.json["entity_ident"], "full-agent", pub,
                  state_dir=os.path.join(state, "state"))
    a.start()
    h.wait_for(lambda: api.get("/devices/" + a.entity_ident).json["online"], timeout=20,
               what="agent online")
    jobs = []
    j0 = post_job(api, task, a)["ident"]
    jobs.append(j0)
    recs, _ = wait_terminal(api, [j0], lambda: jobs_by_ident(api, task_ident=task["ident"]), 30)
    run.check(recs[j0]["status"] == "terminated", "job before the disk filled: %r" % recs[j0])

    filler = fill(state)
    run.stat("free_bytes_after_fill", free_bytes(state))
    mark = len(a.read_log(tail=None))
    refused = []
    for variables in ({"pad": "z" * 60000}, {"pad": "y" * 60000}, {}):
        refused.append(post_job(api, task, a, variables=variables)["ident"])
    jobs += refused
    # while full: no job may run (its marker would show it), each should be refused with a
    # reason that reaches the coordinator (edge_error)
    deadline = time.time() + 15
    while time.time() < deadline:
        st = {j: api.get("/jobs/" + j).json["status"] for j in refused}
        if all(s in TERMINAL for s in st.values()):
            break
        time.sleep(0.5)
    st = {j: api.get("/jobs/" + j).json for j in refused}
    agent_log = a.read_log(tail=None)[mark:]
    run.stat("while_full", {j: (v["status"], v.get("response")) for j, v in st.items()})
    for j, v in st.items():
        if agent_runs(a, j) > 0:
            # it ran while the disk was full: it must at least be in the journal
            con = sqlite3.connect("file:%s?mode=ro" % os.path.join(state, "state", "journal.db"),
                                  uri=True, timeout=5)
            try:
                known = con.execute("SELECT count(*) FROM jobs WHERE ident = ?",
                                    (j,)).fetchone()[0]
            finally:
                con.close()
            run.check(known == 1, "job %s ran while the state directory was full and is not "
                      "in the journal" % j)
            continue
        if v["status"] != "edge_error":
            run.violation(
                "job %s sent while the agent's state directory is full is still %s after 15 s: "
                "the agent refused it (log: %r) without an edge_error report with the reason, "
                "so the operator sees no reason and the job waits for the next re-send" % (
                    j, v["status"], [line for line in agent_log.splitlines()
                                     if j in line][:3]))
        elif not str(v.get("response") or "").startswith(
                "storage full: the agent cannot journal the job, refused"):
            run.violation("job %s refused while the state directory is full with the "
                          "reason %r instead of the storage-full one" % (j, v.get("response")))
    # the large envelopes can't fit: at least one job is refused, not left waiting
    run.check(any(v["status"] == "edge_error" and agent_runs(a, j) == 0
                  for j, v in st.items()),
              "no job was refused while the state directory was full: %r" % {
                  j: v["status"] for j, v in st.items()})
    os.unlink(filler)
    t_free = time.time()
    after = post_job(api, task, a)["ident"]
    jobs.append(after)
    recs, took = wait_terminal(api, jobs, lambda: jobs_by_ident(api, task_ident=task["ident"]),
                               90)
    run.stat("after_free", {j: (recs[j]["status"], recs[j].get("response")) for j in jobs
                            if j in recs})
    run.stat("all_ended_after_free_s", round(time.time() - t_free, 2) if took else None)
    verify_jobs(run, api, jobs, recs, expect=agent_expect)
    verify_agent_runs(run, [(a, recs[j]) for j in jobs if j in recs])
    for j in refused:
        if st[j]["status"] == "edge_error" and agent_runs(a, j):
            run.violation("job %s was refused (edge_error) and ran later anyway" % j)
    run.check(recs.get(after, {}).get("status") == "terminated",
              "a job after the space was freed: %r" % recs.get(after))
    run.check(a.alive(), "agent died:\n" + a.read_log()[-2000:])
    run.stop_coordinator_cleanly(coord)


# ---------------------------------------------------------------------------------------
# 6. clock jumps around scheduled_time (libfaketime)


def faketime_lib():
    for lib in FAKETIME_LIBS:
        if os.path.exists(lib):
            return lib
    return None


class FakeClock:
    """The coordinator's clock through libfaketime: a timestamp file read on every call
    (FAKETIME_NO_CACHE), rewritten to jump; the monotonic clock stays real."""

    def __init__(self, workdir):
        self.lib = faketime_lib()
        if self.lib is None:
            raise Skip("libfaketime is not installed (Debian package libfaketime): "
                       "apt-get install libfaketime")
        self.file = os.path.join(workdir, "faketime.rc")
        self.offset = 0
        self.set(0)
        self.env = dict(os.environ)
        self.env.update({"LD_PRELOAD": self.lib, "FAKETIME_TIMESTAMP_FILE": self.file,
                         "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1"})
        self.env.pop("FAKETIME", None)
        # does it work here at all?
        p = subprocess.run(["date", "+%s"], env=self.env, capture_output=True, text=True)
        self.set(3600)
        q = subprocess.run(["date", "+%s"], env=self.env, capture_output=True, text=True)
        self.set(0)
        try:
            jump = int(q.stdout) - int(p.stdout)
        except ValueError:
            jump = None
        if jump is None or abs(jump - 3600) > 5:
            raise Skip("libfaketime does not shift the clock here (date moved %r s)" % jump)

    def set(self, offset):
        self.offset = int(offset)
        tmp = self.file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+ds\n" % self.offset)
        os.replace(tmp, self.file)

    def jump(self, seconds):
        self.set(self.offset + seconds)

    def now(self):
        return time.time() + self.offset


def scenario_clock_jump(run, **_):
    clock = FakeClock(run.workdir)
    broker = run.broker()
    db = os.path.join(run.workdir, "rcs.db")
    coord = run.coordinator(db, ["--mqtt", broker.url, "--resend-after", "5"], env=clock.env)
    tenant = coord.init_tenant(user="fault")
    coord.start()
    coord.wait_connected()
    api = coord.api(tenant["api_key"])
    n = 8
    idents = make_devices(api, ["clock-%d" % i for i in range(n)], ["clock"])
    task = make_run_task(api)
    sim = run.sim(broker, tenant["client_root"], idents, tags=["clock"])
    h.wait_for(lambda: count(api, "/devices", online="true") >= n, timeout=30,
               what="devices online")
    scheduled = {}  # job -> scheduled_time

    def post_at(dev, when, label):
        rec = post_job(api, task, idents[dev], scheduled_time=int(when), comment=label)
        scheduled[rec["ident"]] = int(when)
        run.check(rec["status"] == "pending", "%s: scheduled job answered %s" % (
            label, rec["status"]))
        return rec["ident"]

    def envelope_time(job):
        return sim.snapshot()["first_envelope_at"].get(job)

    def fired_within(jobs, seconds, poke=False):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if all(sim.envelopes_of(j) >= 1 for j in jobs):
                return True
            if poke:
                sim.poke(7)
            time.sleep(0.5)
        return all(sim.envelopes_of(j) >= 1 for j in jobs)

    # A: a forward jump over three scheduled times
    base = clock.now()
    fwd = [post_at(i, base + 60 + 30 * i, "A forward-%d" % i) for i in range(3)]
    time.sleep(1.0)
    run.check(all(sim.envelopes_of(j) == 0 for j in fwd), "A: sent before its time")
    t_jump = time.time()
    clock.jump(200)
    quiet = fired_within(fwd, 20)
    run.stat("A_fired_without_other_activity", quiet)
    if not quiet:
        run.check(fired_within(fwd, 20, poke=True), "A: the jobs did not fire after a forward "
                  "jump past their scheduled_time, even with MQTT traffic")
    run.stat("A_forward_jump_fire_latency_s",
             [round(envelope_time(j) - t_jump, 2) if envelope_time(j) else None for j in fwd])
    # the coordinator does follow the fake clock
    j = post_job(api, task, idents[7])
    run.check(abs(j["created_at"] - clock.now()) < 5,
              "the coordinator does not follow libfaketime: created_at %d, fake now %d" % (
                  j["created_at"], clock.now()))

    # B: the clock goes back an hour before the scheduled time, then forward again
    base = clock.now()
    b = post_at(3, base + 6, "B backward-before")
    clock.jump(-3600)
    time.sleep(10)
    run.check(sim.envelopes_of(b) == 0, "B: the job fired although the clock was set back an "
              "hour before its scheduled_time")
    t_jump = time.time()
    clock.jump(3600)
    quiet = fired_within([b], 8)
    run.stat("B_fired_without_other_activity", quiet)
    if not quiet:
        run.note("B: after the clock went back an hour and forward again, the due job waited "
                 "for the next wake-up of the coordinator's worker: it sleeps in poll() for a "
                 "time computed from wall-clock deadlines before the jump; only a clock set "
                 "the kernel sees (timerfd TFD_TIMER_CANCEL_ON_SET) or new work wakes it, "
                 "and libfaketime makes no such clock set")
        run.check(fired_within([b], 20, poke=True), "B: the job did not fire once the clock "
                  "was back past its scheduled_time, even with MQTT traffic")
    run.stat("B_fire_latency_after_clock_back_s",
             round(envelope_time(b) - t_jump, 2) if envelope_time(b) else None)

    # C: the clock goes back after the job fired: it must not fire again
    base = clock.now()
    c = post_at(4, base + 2, "C backward-after")
    run.check(fired_within([c], 20, poke=True), "C: did not fire")
    h.wait_for(lambda: api.get("/jobs/" + c).json["status"] == "terminated", timeout=20,
               what="C terminated")
    clock.jump(-600)
    for _ in range(8):
        sim.poke(7)
        time.sleep(0.5)
    clock.jump(600)
    time.sleep(2)

    # D: a forward jump while the coordinator is dead (kill -9): fires once after the start
    base = clock.now()
    d = post_at(5, base + 40, "D across-kill")
    coord.kill9()
    clock.jump(120)
    mark = coord.mark()
    t_start = time.time()
    coord.start()
    coord.wait_connected(mark)
    run.check(fired_within([d], 30), "D: did not fire after the restart")
    run.stat("D_fire_latency_after_restart_s",
             round(envelope_time(d) - t_start, 2) if envelope_time(d) else None)

    # E: small jumps back and forth around one scheduled time, traffic meanwhile. No step
    # forward is longer than --resend-after (5 s): the job fires near the +4 step, and a
    # larger jump right after its send would make it look silent to the re-send sweep, its
    # envelope sent again (docs/mqtt.md "Delivery guarantees"), had the device not ended it
    # within that 0.7 s
    base = clock.now()
    e = post_at(6, base + 4, "E jitter")
    for step in (-2, 3, -5, 1, -1, 4, -3, 3):
        clock.jump(step)
        sim.poke(7)
        time.sleep(0.7)
    run.check(fired_within([e], 30, poke=True), "E: did not fire")
    # every scheduled job ends before F holds the devices' workers: a job held silent gets
    # its envelope again after resend_after, which F wants for its own job only
    h.wait_for(lambda: all(api.get("/jobs/" + j).json["status"] == "terminated"
                           for j in scheduled), timeout=30, what="A to E terminated")

    # F: the clock goes back while a device is silent on a job: the re-send of its envelope
    # (resend_after, docs/mqtt.md) must go on
    sim.hold()
    f = post_job(api, task, idents[7])["ident"]
    h.wait_for(lambda: sim.envelopes_of(f) >= 2, timeout=30, interval=0.2,
               what="F: the envelope of a silent job re-sent (resend_after 5)")
    before = sim.envelopes_of(f)
    clock.jump(-600)
    t_back = time.time()
    resent = None
    while time.time() < t_back + 30:
        if sim.envelopes_of(f) > before:
            resent = round(time.time() - t_back, 1)
            break
        sim.poke(0)
        time.sleep(1)
    run.stat("F_resend_after_clock_back_600s", resent)
    run.check(resent is not None,
              "F: after the clock went back 600 s, the envelope of job %s (device silent, "
              "--resend-after 5) was not re-sent for 30 s (re-sent %d times before): the "
              "re-send sweep waits until the wall clock catches up (scheduler.c next_sweep "
              "is a wall-clock instant, store_jobs_stale compares wall-clock update_at/sent_at "
              "from before the jump)" % (f, before - 1))
    clock.jump(600)
    sim.release()
    h.wait_for(lambda: api.get("/jobs/" + f).json["status"] == "terminated", timeout=60,
               what="F: job terminated once released")
    clock.set(0)

    jobs = list(scheduled) + [f]
    recs, took = wait_terminal(api, jobs, lambda: jobs_by_ident(api, task_ident=task["ident"]),
                               30)
    verify_jobs(run, api, jobs, recs, expect=sim_expect)
    time.sleep(2)  # late duplicates would show now
    snap = sim.snapshot()
    for j, when in scheduled.items():
        n_env = snap["envelopes"].get(j, 0)
        run.check(n_env == 1, "scheduled job %s (%s) fired %d times, expected once" % (
            j, recs.get(j, {}).get("comment"), n_env))
        hist = history(api, j)
        sent = [x for x in hist if x["status"] == "transmited"]
        if run.check(len(sent) == 1, "job %s: %d transmited snapshots" % (j, len(sent))):
            # by the coordinator's own clock, never early (1 s of slack)
            run.check(sent[0]["update_at"] >= when - 1,
                      "job %s (%s) sent at %d, before its scheduled_time %d" % (
                          j, recs.get(j, {}).get("comment"), sent[0]["update_at"], when))
    verify_sim(run, sim, {j: recs[j] for j in jobs if j in recs},
               set(jobs_by_ident(api, task_ident=task["ident"])))
    clock_log = coord.full_log().count("the system clock was set")
    run.stat("coordinator_saw_clock_set", clock_log)
    if clock_log == 0:
        run.note("libfaketime changes only what the coordinator reads from the clock; the "
                 "kernel's CLOCK_REALTIME is never set, so the worker's timerfd "
                 "(TFD_TIMER_CANCEL_ON_SET) never fires and 'a change of the system clock "
                 "reschedules at once' is not exercised: jumps are noticed at the next "
                 "wake-up (sweep, deadline or traffic)")
    run.stop_coordinator_cleanly(coord)


# ---------------------------------------------------------------------------------------
# 7. the SMTP server down, refusing, back


def scenario_smtp(run, long=False, **_):
    smtp = h.SmtpServer().start()
    run.on_close(smtp.stop)
    broker = run.broker()
    coords = run.coordinators(run.database(), broker, [
        "--smtp-url", smtp.url, "--smtp-from", "rcs@fault.test", "--smtp-retry-base", "1",
        "--resend-after", "5"])
    tenant = coords[0].init_tenant(user="fault")
    run.start_all(coords)
    api = run.api(coords, tenant["api_key"])
    # scale-out: the seed picks the coordinator killed while the mails wait
    coord = coords[run.rng.randrange(len(coords))] if len(coords) > 1 else coords[0]
    n = 10
    idents = make_devices(api, ["mail-%d" % i for i in range(n)], ["fleet"])
    to = "ops@fault.test"
    task = make_run_task(api, notification_mail_list=[to],
                         notification_status_list=["transmited", "terminated"])
    run.sim(broker, tenant["client_root"], idents, tags=["fleet"])
    h.wait_for(lambda: count(api, "/devices", online="true") >= n, timeout=30,
               what="devices online")
    t = task["ident"]
    expected = {}  # job -> set of statuses mailed

    def send(group):
        t0 = time.time()
        r = tag_send(api, t, group)
        took = time.time() - t0
        run.check(r.status == 201, "%s: %r" % (group, r))
        run.check(took < 2.0, "%s: the tag send took %.2fs with the SMTP server in trouble" % (
            group, took))
        ids = {j["ident"] for j in r.json["items"]}
        for j in ids:
            expected[j] = {"transmited", "terminated"}
        return ids

    # down: jobs go on as usual, notifications wait queued with their error
    smtp.stop()
    t0 = time.time()
    down_jobs = send("smtp-down")
    recs, took = wait_terminal(api, down_jobs, lambda: jobs_by_ident(api, task_ident=t), 20)
    run.check(took is not None and took < 10, "jobs with the SMTP server down took %r s" % took)
    verify_jobs(run, api, down_jobs, recs, expect=sim_expect)
    h.wait_for(lambda: all(any(x["attempts"] >= 1 for x in notifications(api, j))
                           for j in down_jobs), timeout=30, what="failed attempts recorded")
    for j in sorted(down_jobs)[:3]:
        items = notifications(api, j)
        run.check(all(x["state"] == "queued" and x.get("last_error") for x in items),
                  "job %s while SMTP is down: %r" % (j, items))
    # kill -9 while mails wait; they are in the outbox (database), so they survive
    coord.kill9()
    mark = coord.mark()
    coord.start()
    coord.wait_connected(mark)
    more = send("smtp-down-after-restart")
    # 451 for every mail for a while
    smtp.tempfail()
    smtp.start()
    time.sleep(run.rng.uniform(2, 4))
    run.stat("rejected_with_451", len(smtp.rejected))
    smtp.accept()
    all_jobs = down_jobs | more
    recs, _ = wait_terminal(api, all_jobs, lambda: jobs_by_ident(api, task_ident=t), 30)
    verify_jobs(run, api, all_jobs, recs, expect=sim_expect)
    # with retries doubling from 1 s, everything arrives within a minute or so
    deadline = time.time() + 90
    while time.time() < deadline:
        states = [x["state"] for j in all_jobs for x in notifications(api, j)]
        if states and all(s == "sent" for s in states):
            break
        time.sleep(1)
    states = {}
    for j in all_jobs:
        for x in notifications(api, j):
            states[x["state"]] = states.get(x["state"], 0) + 1
    run.stat("notification_states", states)
    run.stat("down_to_all_sent_s", round(time.time() - t0, 1))
    check_mails(run, api, smtp, all_jobs, expected, to)
    if long:
        # a server that never comes back: after 10 attempts (1+2+...+256 s) 'failed'
        smtp.stop()
        gone = send("smtp-gone")
        t_gone = time.time()
        deadline = time.time() + 900
        while time.time() < deadline:
            st = [x["state"] for j in gone for x in notifications(api, j)]
            if st and all(s == "failed" for s in st):
                break
            time.sleep(5)
        items = [x for j in gone for x in notifications(api, j)]
        run.stat("gave_up_after_s", round(time.time() - t_gone))
        run.check(all(x["state"] == "failed" and x["attempts"] == 10 for x in items),
                  "after the SMTP server stayed away: %r" % items[:3])
    for c in coords:
        run.stop_coordinator_cleanly(c)


def notifications(api, job):
    r = api.get("/jobs/%s/notifications" % job)
    if r.status != 200:
        raise AssertionError("GET notifications: %r" % r)
    return r.json["items"]


def check_mails(run, api, smtp, jobs, expected, to):
    mails = smtp.received()
    seen = {}
    ids = {}
    for m in mails:
        mid = m.message.get("Message-ID")
        ids[mid] = ids.get(mid, 0) + 1
        body = m.body
        job = next((j for j in jobs if j in body), None)
        if job is None:
            continue
        status = next((s for s in ("transmited", "terminated") if s in m.subject), None)
        seen.setdefault((job, status), 0)
        seen[(job, status)] += 1
    for mid, c in ids.items():
        run.check(c == 1, "Message-ID %s delivered %d times" % (mid, c))
    for job, statuses in expected.items():
        for s in statuses:
            run.check(seen.get((job, s)) == 1, "job %s: %r mails for %s, expected 1" % (
                job, seen.get((job, s), 0), s))
        for x in notifications(api, job):
            run.check(x["state"] == "sent", "job %s: notification %r" % (job, x))


# ---------------------------------------------------------------------------------------

SCENARIOS = {
    "coordinator-kill": scenario_coordinator_kill,
    "broker": scenario_broker,
    "agent-kill": scenario_agent_kill,
    "db-full": scenario_db_full,
    "agent-disk-full": scenario_agent_disk_full,
    "clock-jump": scenario_clock_jump,
    "smtp": scenario_smtp,
}


def scenario_refused(name, shape):
    """Why scenario name does not run in shape (None: it does)."""
    if shape == "scale-out":
        return SCALE_OUT_REFUSED.get(name)
    return None


def run_scenario(name, seed, keep=False, shape="single", **kw):
    """Runs one scenario with one seed in shape ("single", "scale-out"); returns a result
    dict (ok, skipped, violations, notes, stats, seconds, shape). A scenario the shape
    does not take raises ValueError."""
    why = scenario_refused(name, shape)
    if why:
        raise ValueError("scenario %s does not run in the %s shape: %s" % (name, shape, why))
    log("=== %s, seed %d%s" % (name, seed, "" if shape == "single" else ", " + shape))
    run = Run(name, seed, keep=keep or bool(os.environ.get("RCS_KEEP_TMP")), shape=shape)
    t0 = time.time()
    skipped = None
    try:
        if shape == "scale-out" and scale_out_missing():
            raise Skip(scale_out_missing())
        SCENARIOS[name](run, **kw)
    except Skip as e:
        skipped = str(e)
        log("skipped: %s" % e)
    except Exception as e:
        run.violation("the scenario stopped: %s\n%s%s" % (
            e, traceback.format_exc()[-3000:],
            "".join("\n--- coordinator log ---\n" + c.read_log()[-2500:] for c in run.coords)))
    finally:
        if run.scaled:
            deadlocks = sum(c.full_log().count("deadlock detected") for c in run.coords)
            run.stat("pg_deadlocks_logged", deadlocks)
            if deadlocks:
                run.note(
                    "the coordinators logged %d PostgreSQL deadlocks (40P01) applying reports: "
                    "both receive every report (NATS has no shared subscription) and each "
                    "applies a batch of them in one transaction, a job's row locked by its "
                    "move and its group's row by the tallies of a job that ended, so two "
                    "batches wait for each other until PostgreSQL's deadlock_timeout (1 s) "
                    "ends one move ('report not applied: busy'); reports slow to about one "
                    "a second while it lasts" % deadlocks)
        if run.violations and not run.keep:
            for c in run.coords:
                log("coordinator log tail:\n" + c.read_log()[-2000:])
        run.close()
    res = {"scenario": name, "seed": seed, "shape": shape, "ok": not run.violations,
           "skipped": skipped,
           "seconds": round(time.time() - t0, 1), "violations": run.violations,
           "notes": run.notes, "stats": run.stats}
    log("=== %s, seed %d: %s in %.1fs" % (name, seed, "SKIPPED" if skipped else (
        "ok" if res["ok"] else "%d VIOLATIONS" % len(run.violations)), res["seconds"]))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--devices", type=int, default=1000,
                    help="simulated devices of coordinator-kill (default 1000)")
    ap.add_argument("--broker-devices", type=int, default=None,
                    help="simulated devices of broker (default: --devices)")
    ap.add_argument("--agents", type=int, default=4, help="real agents of agent-kill")
    ap.add_argument("--scenarios", default=None,
                    help="comma-separated, from: %s (default: every one the shape takes)" %
                    ", ".join(SCENARIOS))
    ap.add_argument("--long", action="store_true",
                    help="smtp: also wait for the give-up after 10 attempts (~9 minutes)")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--keep", action="store_true", help="keep work directories")
    ap.add_argument("--shape", choices=SHAPES, default="single",
                    help="single: one coordinator on SQLite, one mosquitto (default); "
                    "scale-out: two coordinators on one PostgreSQL, a 3-node NATS cluster "
                    "(docs/scale-out.md)")
    a = ap.parse_args()
    if a.scenarios is None:
        names = [n for n in SCENARIOS if not scenario_refused(n, a.shape)]
    else:
        names = [n.strip() for n in a.scenarios.split(",")]
    for name in names:
        if name not in SCENARIOS:
            ap.error("unknown scenario %r" % name)
        if scenario_refused(name, a.shape):
            ap.error("scenario %s does not run in the %s shape: %s" % (
                name, a.shape, scenario_refused(name, a.shape)))
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results = []
    for name in names:
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            kw = {}
            if name == "coordinator-kill":
                kw["devices"] = a.devices
            elif name == "broker":
                kw["devices"] = a.broker_devices or a.devices
            elif name == "agent-kill":
                kw["agents"] = a.agents
            elif name == "smtp":
                kw["long"] = a.long and seed == a.first_seed
            results.append(run_scenario(name, seed, keep=a.keep, shape=a.shape, **kw))
    print(json.dumps(results, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = [r for r in results if not r["ok"]]
    print("\nsummary:", file=sys.stderr)
    for r in results:
        print("  %-17s seed %-3d %-8s %6.1fs %s" % (
            r["scenario"], r["seed"], "skipped" if r["skipped"] else (
                "ok" if r["ok"] else "FAILED"), r["seconds"],
            ("; ".join(v.splitlines()[0] for v in r["violations"][:3]))[:300]), file=sys.stderr)
    print("%d passed, %d failed" % (len(results) - len(bad), len(bad)), file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
