#!/usr/bin/env python3
"""Fan-out benchmark (BENCHMARKS.md, part 1): one tag send to a fleet of simulated devices.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_fanout.py --devices 10000 --runs 3

Per run, on a fresh mosquitto (max_queued_messages 100000, max_connections -1, free port)
and a fresh copy of a prepared database (one tenant, N devices holding the tag "fleet", a
task on the stock echo script):

  coordinator run: rcs-coordinator serve --mqtt, fleetsim connects the N devices, wait until
      the coordinator has them all online, POST /tasks/<id>/jobs/tags, measure the POST's
      latency (request sent to the answer's last byte received; the client's parsing of
      the answer is reported apart, as post_with_client_parse_s), the time until all N jobs
      are terminated (the group's end event on rcs/v1/<root>/events/groups/<group>, seen by
      a monitor on the broker, then GET /jobs?group_ident=..&status=terminated confirming all
      N), jobs/s, and the coordinator's peak RSS (VmHWM).
  baseline run: the same simulator and broker without the coordinator: one extra MQTT
      connection publishes N envelopes of the size the coordinator sent and waits for the
      4N reports (fleetsim --baseline).

  --floors: after each baseline, what the send's messages cost without the coordinator's
      work (BENCHMARKS.md, "Floors"), each with events at QoS 1 and at QoS 0:
      ideal: fleetsim --baseline --events: the extra connection also publishes the five
          events of each job (one per envelope and per report, of the size of the job's
          record) and waits for every acknowledgement: the broker's and the devices' limit
          for the coordinator's whole exchange, with a client that costs next to nothing;
      paho: mqttfloor, the same exchange through the coordinator's own MQTT client
          (common/mqttc.c on paho) and nothing else: its time, and its CPU per job (the
          floor under the coordinator's CPU per job with this client);
      mosquitto: mqttfloor --client mosquitto, the same through libmosquitto, for
          comparison (when mqttfloor was built with it).

  --offline-first: the tag send while the whole fleet is offline (the task allows it; the
      jobs wait pending), then fleetsim connects the N devices: the time from its start
      until all N are terminated, and the coordinator's CPU meanwhile (each device coming
      online has its pending jobs sent: the catch-up of a fleet back online). No baseline.

Prints every run and the medians as JSON (--json FILE writes them too).
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from benchlib import (FLEETSIM, GroupWatch, copy_db, h, log, total,  # noqa: E402
                      wait_terminated)

MQTTFLOOR = os.environ.get("RCS_MQTTFLOOR", os.path.join(h.BIN_DIR, "mqttfloor"))

TAG = "fleet"


def raise_nofile(need=0):
    """Children (mosquitto, fleetsim) inherit this: one descriptor per device each. Run as
    root, the hard limit is raised to need (bounded by fs.nr_open) when it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < need and os.geteuid() == 0:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                hard = min(need, int(f.read()))
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def vm_field(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cpu_split(pid):
    """(user, system) CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(parts[11]) / tck, int(parts[12]) / tck


def cpu_of(pid):
    """user+system CPU seconds of a process so far."""
    return sum(cpu_split(pid))


class Fleetsim:
    def __init__(self, workdir, idents_file, client_root, port, extra=()):
        self.lines = []
        self.ready = threading.Event()
        self.err = open(os.path.join(workdir, "fleetsim-%d.log" % port), "ab")
        self.proc = subprocess.Popen(
            [FLEETSIM, "--idents", idents_file, "--root", client_root, "--port", str(port),
             *extra], stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            self.lines.append(line)
            if line.startswith("READY"):
                self.ready.set()

    def wait_ready(self, timeout):
        if not self.ready.wait(timeout):
            raise RuntimeError("fleetsim: not all devices connected within %ds" % timeout)

    def result(self, timeout=600):
        self.proc.wait(timeout=timeout)
        self.t.join(5)
        self.err.close()
        for line in reversed(self.lines):
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError("fleetsim printed no result: %r" % self.lines[-5:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(2)
        return self.result()


def start_broker(workdir, n):
    # the baseline's one "coordinator" connection may have all 4n reports queued at once
    b = h.Mosquitto(workdir, persistence=False, extra_conf="max_connections -1\n"
                    "max_queued_messages %d\n" % max(100000, 5 * n))
    return b.start()


def prepare(workdir, n, db=None, allow_offline=False):
    """A database (db: a path or a postgresql:// URL; default workdir/template.db) with one
    tenant, n devices tagged TAG and an echo task (allow_offline: its jobs wait for offline
    devices); returns (db, client_root, api key, task ident, idents file)."""
    coord = h.Coordinator(workdir, db=db or os.path.join(workdir, "template.db"))
    tenant = coord.init_tenant(user="bench")
    coord.start()
    api = coord.api(tenant["api_key"])
    t0 = time.time()

    def make(i):
        r = api.post("/devices", {"name": "sim-%05d" % i, "tags": [TAG]})
        if r.status != 201:
            raise RuntimeError("POST /devices: %r" % r)
        return r.json["entity_ident"]

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        idents = list(ex.map(make, range(n)))
    log("created %d devices in %.1f s" % (n, time.time() - t0))
    r = api.post("/tasks", {"name": "bench echo", "script": "echo",
                            "allow_offline": allow_offline})
    if r.status != 201:
        raise RuntimeError("POST /tasks: %r" % r)
    task = r.json["ident"]
    rc = coord.stop()
    if rc != 0:
        raise RuntimeError("coordinator exited with %r" % rc)
    idf = os.path.join(workdir, "idents.txt")
    with open(idf, "w") as f:
        f.write("\n".join(idents) + "\n")
    return coord.db, tenant["client_root"], tenant["api_key"], task, idf


def pin(pid, cpus):
    """Every thread of pid (and the ones it starts later) on these CPUs (taskset -c)."""
    if cpus:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True,
                       stdout=subprocess.DEVNULL)


class GetSampler:
    """GET /jobs/<id> one after the other on one keep-alive connection, each latency kept
    with the time it was sent (seconds since t0): the latency of a read while the bulk
    send is committed and its reports come in."""

    def __init__(self, port, key, job):
        self.port, self.key, self.path = port, key, "/v3/commands/jobs/%s" % job
        self.samples, self.errors = [], 0
        self.stop_ev = threading.Event()
        self.t0 = time.monotonic()
        self.t = threading.Thread(target=self._run, daemon=True)

    def start(self, t0):
        self.t0 = t0
        self.t.start()

    def _run(self):
        conn = None
        while not self.stop_ev.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                s = time.monotonic()
                conn.request("GET", self.path, headers={"api-key": self.key})
                r = conn.getresponse()
                r.read()
                e = time.monotonic()
                if r.status != 200:
                    self.errors += 1
                self.samples.append((s - self.t0, e - s))
            except (OSError, http.client.HTTPException):
                self.errors += 1
                conn = None
            time.sleep(0.002)

    def result(self, t_post):
        self.stop_ev.set()
        self.t.join(35)

        def stats(v):
            v = sorted(v)
            if not v:
                return None
            q = lambda p: round(v[min(len(v) - 1, int(p / 100 * len(v)))] * 1000, 2)
            return {"n": len(v), "p50_ms": q(50), "p90_ms": q(90), "p99_ms": q(99),
                    "max_ms": round(v[-1] * 1000, 2)}
        return {"all": stats([d for _, d in self.samples]),
                "during_post": stats([d for s, d in self.samples if s < t_post]),
                "after_post": stats([d for s, d in self.samples if s >= t_post]),
                "errors": self.errors}


def callgrind_ctl(pid, opt):
    subprocess.run(["callgrind_control", opt, str(pid)], check=True, stdout=subprocess.DEVNULL,
                   timeout=120)


def callgrind_total(path):
    """Instructions (Ir) of a callgrind dump: its summary line."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return None


def coordinator_run(workdir, k, prep, n, timeout, coord_args=(), cpus=None,
                    get_under_load=False, callgrind=False, offline_first=False):
    template, client_root, key, task, idf = prep
    db = os.path.join(workdir, "run-%d.db" % k)
    copy_db(template, db)
    broker = start_broker(workdir, n)
    real = h.COORDINATOR
    if callgrind:
        # the coordinator under callgrind: counters zeroed right before the POST and dumped
        # once all jobs are terminated and their events out, so the dump holds the send, its
        # reports and its events only
        wrapper = os.path.join(workdir, "coordinator-callgrind.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s/"
                    "callgrind.out.%%p %s \"$@\"\n" % (workdir, real))
        os.chmod(wrapper, 0o755)
        h.COORDINATOR = wrapper
    coord = h.Coordinator(workdir, db=db, extra_args=("--mqtt", broker.url, *coord_args),
                          start_timeout=120 if callgrind else 20)
    sim = watch = None
    try:
        try:
            coord.start()  # the harness starts h.COORDINATOR
        finally:
            h.COORDINATOR = real
        pin(coord.proc.pid, cpus)
        api = coord.api(key)
        if offline_first:
            # the fleet comes online after the send: each device's state message has the
            # coordinator send it its pending jobs (bridge_catch_up), N devices at once
            return offline_first_run(workdir, k, coord, api, prep, n, timeout, broker)
        sim = Fleetsim(workdir, idf, client_root, broker.port)
        sim.wait_ready(timeout)
        deadline = time.time() + timeout
        while total(api, "/devices?online=true&per_page=1") < n:
            if time.time() > deadline:
                raise RuntimeError("devices not online in the coordinator")
            time.sleep(0.1)
        sampler = None
        if get_under_load:
            # one job of its own on the first device, terminated before the send: the
            # record the sampler reads while the bulk send runs
            with open(idf) as f:
                first = f.readline().strip()
            r = api.post("/tasks/%s/jobs" % task, {"entity_ident": first})
            if r.status != 201:
                raise RuntimeError("POST job: %r" % r)
            sampler = GetSampler(coord.port, api.key, r.json["ident"])
            while api.get("/jobs/%s" % r.json["ident"]).json.get("status") != "terminated":
                if time.time() > deadline:
                    raise RuntimeError("the sampler's job did not terminate")
                time.sleep(0.05)
        time.sleep(0.5)  # let the state messages settle
        watch = GroupWatch(broker.port, client_root)
        load1 = os.getloadavg()[0]
        rss_before = vm_field(coord.proc.pid, "VmRSS")
        cpu0 = cpu_of(coord.proc.pid)
        sys0 = cpu_split(coord.proc.pid)[1]
        body = json.dumps({"tag": TAG, "group_name": "bench-%d" % k}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", coord.port, timeout=60)
        if callgrind:
            callgrind_ctl(coord.proc.pid, "-z")
        t0 = time.monotonic()
        if sampler:
            sampler.start(t0)
        conn.request("POST", "/v3/commands/tasks/%s/jobs/tags" % task, body=body,
                     headers={"api-key": api.key, "Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        # the answer is complete with its last byte; parsing its 10,000 records in Python
        # (~50 ms) is the client's time and is reported on its own
        t_post = time.monotonic() - t0
        r = h.Response(resp.status, dict(resp.getheaders()), raw.decode("utf-8", "replace"))
        t_post_parsed = time.monotonic() - t0
        conn.close()
        if r.status != 201:
            raise RuntimeError("tag send: %r" % r)
        group = r.json["group"]["ident"]
        created, rejected = len(r.json["items"]), len(r.json["rejected"])
        t_all, done = wait_terminated(api, group, n, t0, timeout, watch)
        complete = t_all is not None
        instr = None
        if callgrind:
            # under valgrind the event publisher's thread lags behind: the dump waits for
            # the group's end event, which leaves after every job event of the send
            if complete and watch.wait(group, timeout) is None:
                log("run %d: no group event within %ds: the dump misses events" % (k, timeout))
            callgrind_ctl(coord.proc.pid, "-d")
            dumps = sorted(f for f in os.listdir(workdir)
                           if f.startswith("callgrind.out.%d." % coord.proc.pid))
            if dumps:
                instr = callgrind_total(os.path.join(workdir, dumps[-1]))
                shutil.copy(os.path.join(workdir, dumps[-1]),
                            callgrind if isinstance(callgrind, str) else workdir)
        get_load = sampler.result(t_post) if sampler else None
        # the size of a job's event: the job's record (docs/mqtt.md), as GET answers it
        one = api.get("/jobs/%s" % r.json["items"][0]["ident"]) if created else None
        event_bytes = len(one.raw.encode()) if one is not None and one.status == 200 else None
        g = api.get("/groups/%s" % group)
        statuses = g.json.get("statuses") if g.status == 200 else None
        if not complete:
            log("run %d: only %d of %d jobs terminated after %ds: %s" % (
                k, done, n, timeout, statuses))
        cpu1 = cpu_of(coord.proc.pid)
        sys1 = cpu_split(coord.proc.pid)[1]
        hwm = vm_field(coord.proc.pid, "VmHWM")
        res = {"complete": complete, "load1_before_send": load1, "statuses": statuses, "post_s": round(t_post, 4),
               "post_with_client_parse_s": round(t_post_parsed, 4),
               "post_response_bytes": len(raw),
               "all_terminated_s": round(t_all, 3) if complete else None,
               "jobs_per_s": round(n / t_all, 1) if complete else None, "peak_rss_mb": round(hwm / 2**20, 1),
               "rss_before_send_mb": round(rss_before / 2**20, 1),
               "coordinator_cpu_s": round(cpu1 - cpu0, 2),
               "coordinator_cpu_us_per_job": round((cpu1 - cpu0) * 1e6 / max(created, 1)),
               # of which in the kernel (sockets: a system call per MQTT packet)
               "coordinator_sys_us_per_job": round((sys1 - sys0) * 1e6 / max(created, 1)),
               "get_under_load": get_load, "instructions": instr,
               "instructions_per_job": round(instr / max(created, 1)) if instr else None, "cpus": cpus or "all", "created": created,
               "rejected": rejected, "event_bytes": event_bytes}
    finally:
        if watch:
            watch.close()
        simres = sim.stop() if sim else None
        coord.stop()
        broker.stop()
    res["sim"] = simres
    # the database's growth per job (the coordinator checkpoints its WAL when it stops):
    # the job row, its history rows and the indexes
    grown = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p)) - \
        os.path.getsize(template)
    res["db_bytes_per_job"] = round(grown / max(res["created"], 1))
    res["devices_per_connection"] = simres.get("devices_per_connection", 1) if simres else None
    return res


def offline_first_run(workdir, k, coord, api, prep, n, timeout, broker):
    """The tag send while every device is offline (its jobs wait pending), then the fleet
    connects: the time from fleetsim's start until all N jobs are terminated, and the
    coordinator's CPU in it. The caller stops the coordinator and the broker."""
    _, client_root, _, task, idf = prep
    r = api.post("/tasks/%s/jobs/tags" % task, {"tag": TAG, "group_name": "offline-%d" % k})
    if r.status != 201:
        raise RuntimeError("tag send: %r" % r)
    group = r.json["group"]["ident"]
    created = len(r.json["items"])
    watch = GroupWatch(broker.port, client_root)
    sim = None
    try:
        cpu0 = cpu_of(coord.proc.pid)
        t0 = time.monotonic()
        sim = Fleetsim(workdir, idf, client_root, broker.port)
        t_all, done = wait_terminated(api, group, n, t0, timeout, watch)
        cpu1 = cpu_of(coord.proc.pid)
    finally:
        watch.close()
        simres = sim.stop() if sim else None
    complete = t_all is not None
    if not complete:
        log("run %d: only %d of %d jobs terminated after %ds" % (k, done, n, timeout))
    return {"complete": complete, "created": created, "offline_first": True,
            "online_to_all_terminated_s": round(t_all, 3) if complete else None,
            "coordinator_cpu_s": round(cpu1 - cpu0, 2),
            "coordinator_cpu_us_per_job": round((cpu1 - cpu0) * 1e6 / max(created, 1)),
            "sim": simres}


def baseline_run(workdir, prep, n, env_size, timeout, extra=()):
    """fleetsim --baseline on a fresh broker; extra: more fleetsim flags (--events ...)."""
    _, client_root, _, _, idf = prep
    broker = start_broker(workdir, n)
    try:
        sim = Fleetsim(workdir, idf, client_root, broker.port,
                       extra=("--baseline", "--env-size", str(env_size),
                              "--timeout", str(timeout), *extra))
        res = sim.result(timeout + 30)
    finally:
        broker.stop()
    if res.get("baseline_s", -1) <= 0:
        raise RuntimeError("baseline did not complete: %r" % res)
    return res


def mqttfloor_clients():
    """The clients mqttfloor was built with: paho, and mosquitto when libmosquitto was
    found."""
    return tuple(subprocess.run([MQTTFLOOR, "--clients"], capture_output=True, text=True,
                                check=True).stdout.split())


def floors_run(workdir, prep, n, env_size, event_size, timeout, clients=("paho",)):
    """The send's messages without the coordinator's work (see --floors): per events QoS,
    fleetsim's baseline with the five events of each job (ideal), and mqttfloor against
    fleetsim's devices (per client: paho, mosquitto)."""
    _, client_root, _, _, idf = prep
    out = {}
    for qos in (1, 0):
        out["ideal_qos%d" % qos] = baseline_run(
            workdir, prep, n, env_size, timeout,
            extra=("--events", "--event-size", str(event_size), "--event-qos", str(qos)))
        for client in clients:
            out["%s_qos%d" % (client, qos)] = mqttfloor_run(
                workdir, n, client_root, idf, env_size, event_size, qos, client, timeout)
    return out


def mqttfloor_run(workdir, n, client_root, idf, env_size, event_size, qos, client, timeout):
    broker = start_broker(workdir, n)
    sim = None
    try:
        sim = Fleetsim(workdir, idf, client_root, broker.port)
        sim.wait_ready(timeout)
        p = subprocess.run([MQTTFLOOR, "--url", broker.url, "--root", client_root,
                            "--idents", idf, "--env-size", str(env_size),
                            "--event-size", str(event_size), "--events-qos", str(qos),
                            "--timeout", str(timeout), "--client", client],
                           capture_output=True, text=True, timeout=timeout + 60)
        if p.returncode != 0:
            raise RuntimeError("mqttfloor failed: %s" % p.stderr.strip()[-500:])
        return json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        if sim:
            sim.stop()
        broker.stop()


def machine():
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = "%.1f GiB" % (int(line.split()[1]) / 2**20)
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "memory": mem, "kernel": platform.release(), "cpu": cpu,
            "mosquitto": subprocess.run([h.MOSQUITTO, "-h"], capture_output=True, text=True)
            .stdout.splitlines()[0] if os.path.exists(h.MOSQUITTO) else "?"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=120,
                    help="per phase, seconds (a run past it is reported incomplete)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--coordinator-arg", action="append", default=[],
                    help="extra argument for rcs-coordinator serve (repeatable), e.g. --debug")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--cpus", help="pin the coordinator to these CPUs (taskset -c), e.g. 0")
    ap.add_argument("--get-under-load", action="store_true",
                    help="GET /jobs/<id> in a loop from the POST until all are terminated "
                    "and report its latency percentiles")
    ap.add_argument("--callgrind", metavar="FILE",
                    help="run the coordinator under valgrind --tool=callgrind and report its "
                    "instructions per job (the send and its reports; slow: use ~2,000 "
                    "devices); the dump is copied to FILE")
    ap.add_argument("--floors", action="store_true",
                    help="after each baseline, the send's messages without the coordinator's "
                    "work: fleetsim's baseline with the events, and the coordinator's MQTT "
                    "client alone (mqttfloor), events at QoS 1 and 0")
    ap.add_argument("--offline-first", action="store_true",
                    help="send while every device is offline, then connect the fleet: the "
                    "time from the fleet's start until all are terminated (the catch-up of "
                    "N devices coming online at once); no baseline")
    a = ap.parse_args()
    if a.floors and a.offline_first:
        ap.error("--floors goes with the send to an online fleet, not --offline-first")

    soft, hard = raise_nofile()
    n = a.devices
    if soft < n + 100:
        log("RLIMIT_NOFILE is %d (hard %d): too low for one connection per device; fleetsim "
            "puts several of the %d devices on each connection" % (soft, hard, n))
    workdir = tempfile.mkdtemp(prefix="rcs-bench-")
    log("work directory", workdir)
    try:
        sim_ceiling = json.loads(subprocess.run([FLEETSIM, "--selftest"], capture_output=True,
                                                text=True, check=True).stdout)
        prep = prepare(workdir, n, allow_offline=a.offline_first)
        runs = []
        clients = mqttfloor_clients() if a.floors else ()
        if a.offline_first:
            for k in range(1, a.runs + 1):
                c = coordinator_run(workdir, k, prep, n, a.timeout, a.coordinator_arg,
                                    a.cpus, offline_first=True)
                c.pop("sim", None)
                log("run %d: %s" % (k, json.dumps(c)))
                runs.append(c)
            out = {"devices": n, "machine": machine(), "offline_first": True, "runs": runs,
                   "median_online_to_all_terminated_s": statistics.median(
                       r["online_to_all_terminated_s"] for r in runs
                       if r["online_to_all_terminated_s"] is not None) if any(
                       r["complete"] for r in runs) else None}
            print(json.dumps(out, indent=1))
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(out, f, indent=1)
            return
        for k in range(1, a.runs + 1):
            c = coordinator_run(workdir, k, prep, n, a.timeout, a.coordinator_arg, a.cpus,
                                a.get_under_load, a.callgrind or False)
            log("run %d coordinator: %s" % (k, json.dumps({x: y for x, y in c.items()
                                                           if x != "sim"})))
            env = int(c["sim"]["env_bytes_avg"]) or 1200
            b = baseline_run(workdir, prep, n, env, a.timeout)
            log("run %d baseline: %.3f s (%d envelopes of %d bytes, 4x%d reports)" % (
                k, b["baseline_s"], n, env, n))
            c["baseline_s"] = b["baseline_s"]
            c["baseline"] = b
            c["ratio"] = (round(c["all_terminated_s"] / b["baseline_s"], 2)
                          if c["complete"] else None)
            if a.floors:
                ev = c.get("event_bytes") or 600
                fl = floors_run(workdir, prep, n, env, ev, a.timeout, clients)
                bs = b["baseline_s"]
                c["floors"] = {"event_bytes": ev, "runs": fl}
                for key, r in fl.items():
                    c["floors"][key + "_ratio"] = round(
                        (r.get("floor_s") or r["baseline_s"]) / bs, 2)
                    if "cpu_us_per_job" in r:
                        c["floors"][key + "_cpu_us_per_job"] = r["cpu_us_per_job"]
                    else:  # fleetsim: the devices' CPU and the ideal client's together
                        c["floors"][key + "_sim_cpu_us_per_job"] = round(
                            r["cpu_during_exchange_s"] * 1e6 / n, 1)
                log("run %d floors: %s" % (k, json.dumps({x: y for x, y in c["floors"].items()
                                                         if x != "runs"})))
            gl = (c["get_under_load"] or {}).get("all") or {}
            c["get_p99_ms"], c["get_p50_ms"] = gl.get("p99_ms"), gl.get("p50_ms")
            runs.append(c)

        def med(key):
            v = [r[key] for r in runs if r[key] is not None]
            return statistics.median(v) if v else float("nan")

        sims = [r["sim"] for r in runs] + [r["baseline"] for r in runs]
        summary = {
            "devices": n, "cpus": a.cpus or "all", "machine": machine(),
            "incomplete_runs": sum(1 for r in runs if not r["complete"]),
            "load_average_at_end": os.getloadavg(),
            "median": {"post_s": med("post_s"),
                       "post_with_client_parse_s": med("post_with_client_parse_s"),
                       "all_terminated_s": med("all_terminated_s"),
                       "jobs_per_s": med("jobs_per_s"), "peak_rss_mb": med("peak_rss_mb"),
                       "baseline_s": med("baseline_s"),
                       "baseline_jobs_per_s": round(n / med("baseline_s"), 1),
                       "ratio": med("ratio"),
                       "coordinator_cpu_s": med("coordinator_cpu_s"),
                       "coordinator_cpu_us_per_job": med("coordinator_cpu_us_per_job"),
                       "coordinator_sys_us_per_job": med("coordinator_sys_us_per_job"),
                       "instructions_per_job": med("instructions_per_job"),
                       "get_under_load_p99_ms": med("get_p99_ms"),
                       "get_under_load_p50_ms": med("get_p50_ms"),
                       "db_bytes_per_job": med("db_bytes_per_job")},
            "devices_per_connection": runs[0]["devices_per_connection"],
            "simulator": {
                "selftest": sim_ceiling,
                "cpu_us_per_msg_max": max(s["cpu_us_per_msg"] for s in sims),
                "baseline_cpu_s_median": statistics.median(
                    r["baseline"]["cpu_during_exchange_s"] for r in runs)},
            "targets": {},
            "runs": runs,
        }
        m = summary["median"]
        summary["targets"] = {
            "post <= 0.300 s": m["post_s"] <= 0.3,
            "all terminated <= 5 s": m["all_terminated_s"] <= 5,
            "<= 3x baseline": m["ratio"] <= 3,
            "peak RSS <= 100 MB": m["peak_rss_mb"] <= 100,
            "CPU per job <= 150 us": m["coordinator_cpu_us_per_job"] <= 150,
            "<= 2x baseline": m["ratio"] <= 2,
        }
        if a.floors:
            summary["floors_median"] = {
                key: statistics.median(r["floors"][key] for r in runs)
                for key in runs[0]["floors"] if key not in ("runs", "event_bytes")}
        if a.get_under_load:
            summary["targets"]["GET under load p99 < 20 ms"] = m["get_under_load_p99_ms"] < 20
        out = json.dumps(summary, indent=1)
        print(out)
        if a.json:
            with open(a.json, "w") as f:
                f.write(out + "\n")
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
