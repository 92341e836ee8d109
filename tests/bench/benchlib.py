"""Helpers shared by the benchmarks of parts 2-4 (bench_agents.py, bench_rest.py,
bench_footprint.py): the machine, /proc readings, medians, the probe's trace files, the
prepared tenant, and tools/deps.sh bench. Test tooling only; see BENCHMARKS.md."""

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import rcs_harness as h  # noqa: E402

FLEETSIM = os.environ.get("RCS_FLEETSIM", os.path.join(h.BIN_DIR, "fleetsim"))
JOBTRACE = os.environ.get("RCS_JOBTRACE_SO", os.path.join(h.BIN_DIR, "jobtrace.so"))
FORKBASE = os.environ.get("RCS_FORKBASE", os.path.join(h.BIN_DIR, "forkbase"))


def log(*a):
    print("[bench %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def ensure_deps():
    """tools/deps.sh bench (quick when everything is there); RCS_BENCH_NO_DEPS=1 skips it."""
    if os.environ.get("RCS_BENCH_NO_DEPS"):
        return
    deps = os.path.join(h.SOURCE_DIR, "tools", "deps.sh")
    r = subprocess.run(["sh", deps, "bench"])
    if r.returncode != 0:
        raise SystemExit("tools/deps.sh bench failed (%d)" % r.returncode)


def median(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def pct(values, p):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def rnd(x, nd=3):
    return None if x is None else round(x, nd)


def proc_status(pid):
    """kB fields of /proc/<pid>/status (VmRSS, VmHWM, RssAnon, RssFile, ...), Threads."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if parts and parts[0].isdigit():
                    out[k] = int(parts[0])
    except OSError:
        return None
    return out


def smaps_rollup(pid):
    """kB fields of /proc/<pid>/smaps_rollup (Rss, Pss, Private_Dirty, ...)."""
    out = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[k] = int(parts[0])
    except OSError:
        return None
    return out


def children(pid):
    """pids of the direct children of every thread of pid."""
    kids = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    kids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return kids


def descendants(pid):
    """Every process below pid (children, grandchildren...): an agent's jail launcher, if
    it has one, and its jail children."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def machine():
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mosq = "?"
    if os.path.exists(h.MOSQUITTO):
        mosq = subprocess.run([h.MOSQUITTO, "-h"], capture_output=True,
                              text=True).stdout.splitlines()[0]
    return {"nproc": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "cpu": cpu, "kernel": platform.release(), "mosquitto": mosq,
            "loadavg_at_start": os.getloadavg()}


def _proc_cpu_ticks():
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                head, _, rest = f.read().rpartition(")")
            parts = rest.split()
            out[int(d)] = (head.split("(", 1)[1], int(parts[11]) + int(parts[12]))
        except (OSError, IndexError, ValueError):
            pass
    return out


def busy_processes(seconds=1.0, limit=6):
    """What else uses the CPU (other people's tests, fuzzers): the processes with the most
    CPU time over the next `seconds`, as "name NN%" (of one core), and the total."""
    a = _proc_cpu_ticks()
    time.sleep(seconds)
    bb = _proc_cpu_ticks()
    tck = os.sysconf("SC_CLK_TCK")
    use = []
    for pid, (name, t) in bb.items():
        if pid in a and a[pid][0] == name:
            d = (t - a[pid][1]) / tck / seconds * 100
            if d > 0:
                use.append((d, name))
    use.sort(reverse=True)
    return {"total_pct_of_one_core": round(sum(d for d, _ in use)),
            "top": ["%s %d%%" % (n, d) for d, n in use[:limit]]}


def start_broker(workdir):
    return h.Mosquitto(workdir, persistence=False, extra_conf="max_connections -1\n").start()


def prepare_tenant(workdir, ndevices, tag="fleet", signing_key=None, task_fields=None,
                   scripts=None):
    """A database with one tenant, ndevices devices holding tag, and a task on the stock
    echo script (signed when signing_key is given); scripts: {name: source} tenant
    scripts to PUT first. Returns a dict: db, client_root, api_key, task, idents."""
    import concurrent.futures
    extra = ["--signing-key", signing_key] if signing_key else []
    coord = h.Coordinator(workdir, db=os.path.join(workdir, "template.db"), extra_args=extra)
    tenant = coord.init_tenant(user="bench")
    coord.start()
    try:
        api = coord.api(tenant["api_key"])

        def make(i):
            r = api.post("/devices", {"name": "dev-%05d" % i, "tags": [tag]})
            if r.status != 201:
                raise RuntimeError("POST /devices: %r" % r)
            return r.json["entity_ident"]

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            idents = list(ex.map(make, range(ndevices)))
        for name, src in (scripts or {}).items():
            r = api.put("/scripts/%s" % name, {"source": src})
            if r.status not in (200, 201):
                raise RuntimeError("PUT /scripts/%s: %r" % (name, r))
        body = {"name": "bench echo", "script": "echo"}
        body.update(task_fields or {})
        r = api.post("/tasks", body)
        if r.status != 201:
            raise RuntimeError("POST /tasks: %r" % r)
        task = r.json
    finally:
        rc = coord.stop()
    if rc != 0:
        raise RuntimeError("coordinator exited with %r" % rc)
    return {"db": coord.db, "client_root": tenant["client_root"],
            "api_key": tenant["api_key"], "task": task["ident"], "task_record": task,
            "idents": idents}


copy_db = h.copy_db


def total(api, path):
    r = api.get(path)
    if r.status != 200:
        raise RuntimeError("GET %s: %r" % (path, r))
    return r.json["total_items"]


def wait_online(api, n, timeout):
    deadline = time.time() + timeout
    while total(api, "/devices?online=true&per_page=1") < n:
        if time.time() > deadline:
            raise RuntimeError("not all %d devices online in the coordinator after %ds" % (
                n, timeout))
        time.sleep(0.1)


def tag_send_and_wait(api, task, tag, group_name, n, timeout, poll=0.02):
    """POST /tasks/<task>/jobs/tags, then polls the group's terminated count every poll
    seconds. Returns (seconds from the POST until all n are terminated or None, POST
    seconds, group ident, group statuses)."""
    t0 = time.monotonic()
    r = api.post("/tasks/%s/jobs/tags" % task, {"tag": tag, "group_name": group_name})
    t_post = time.monotonic() - t0
    if r.status != 201:
        raise RuntimeError("tag send: %r" % r)
    group = r.json["group"]["ident"]
    path = "/jobs?group_ident=%s&status=terminated&per_page=1" % group
    done_t = None
    while True:
        done = total(api, path)
        t = time.monotonic() - t0
        if done >= n:
            done_t = t
            break
        if t > timeout:
            break
        time.sleep(poll)
    g = api.get("/groups/%s" % group)
    return done_t, t_post, group, (g.json.get("statuses") if g.status == 200 else None), \
        len(r.json["items"]), len(r.json["rejected"])


class GroupWatch:
    """The coordinator's group events (docs/mqtt.md, "Monitoring") seen by a monitor on the
    broker: when each group ended. Costs the coordinator nothing it would not do anyway,
    unlike polling a count of the group's jobs over the API (a scan of the group's jobs per
    poll, which in a 10,000-device send took a tenth of the coordinator's CPU)."""

    ENDED = ("completed", "aborted", "cancelled")

    def __init__(self, broker_port, client_root):
        import paho.mqtt.client as mqtt
        self.ended = {}  # group ident -> time.monotonic() of its event
        self.cond = threading.Condition()
        self.c = mqtt.Client(client_id="bench-watch-%d" % os.getpid(), protocol=mqtt.MQTTv311)
        self.c.on_message = self._on_message
        subscribed = threading.Event()
        self.c.on_subscribe = lambda *a: subscribed.set()
        self.c.connect("127.0.0.1", broker_port, keepalive=60)
        self.c.subscribe("rcs/v1/%s/events/groups/+" % client_root, qos=1)
        self.c.loop_start()
        if not subscribed.wait(30):
            self.close()
            raise RuntimeError("the group watch got no SUBACK")

    def _on_message(self, client, userdata, msg):
        t = time.monotonic()
        try:
            ev = json.loads(msg.payload)
        except ValueError:
            return
        if ev.get("status") in self.ENDED:
            with self.cond:
                self.ended.setdefault(msg.topic.rsplit("/", 1)[-1], t)
                self.cond.notify_all()

    def wait(self, group, timeout):
        """The time the group's end was seen, or None after timeout seconds."""
        with self.cond:
            self.cond.wait_for(lambda: group in self.ended, timeout)
            return self.ended.get(group)

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


def wait_terminated(api, group, n, t0, timeout, watch, confirm_every=2.0):
    """Seconds from t0 until all n jobs of the group were terminated (None: not within
    timeout), and how many were. The group's end event says when; the API's count says
    that all n are terminated (asked again every confirm_every seconds, should the event be
    lost)."""
    path = "/jobs?group_ident=%s&status=terminated&per_page=1" % group
    while True:
        seen = watch.wait(group, confirm_every)
        done = total(api, path)
        t = time.monotonic() - t0
        if done >= n:
            return (seen - t0 if seen is not None else t), done
        if seen is not None or t > timeout:
            return None, done  # ended with jobs not terminated, or too late


class Fleetsim:
    """tests/bench/fleetsim: N simulated devices answering every envelope at once."""

    def __init__(self, workdir, idents, client_root, port):
        self.idf = os.path.join(workdir, "idents-%d.txt" % port)
        with open(self.idf, "w") as f:
            f.write("\n".join(idents) + "\n")
        self.err = open(os.path.join(workdir, "fleetsim-%d.log" % port), "ab")
        self.ready = threading.Event()
        self.lines = []
        self.proc = subprocess.Popen(
            [FLEETSIM, "--idents", self.idf, "--root", client_root, "--port", str(port)],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("READY"):
                self.ready.set()

    def wait_ready(self, timeout=60):
        if not self.ready.wait(timeout):
            raise RuntimeError("fleetsim: devices not connected within %ds" % timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.t.join(5)
        self.err.close()


def read_trace(path):
    """Parses a jobtrace.so trace file: {"recv": {job: ns}, "report": {job: {status: ns}},
    "reap": [dict]} (first receive and first report of each status)."""
    recv, report, reap = {}, {}, []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return {"recv": recv, "report": report, "reap": reap}
    for line in lines:
        p = line.split()
        if not p:
            continue
        if p[0] == "recv" and len(p) == 3:
            recv.setdefault(p[2], int(p[1]))
        elif p[0] == "report" and len(p) == 4:
            report.setdefault(p[2], {}).setdefault(p[3], int(p[1]))
        elif p[0] == "reap" and len(p) == 13:
            keys = ("t", "pid", "fork_call", "fork_ret", "child_start", "lua_ready",
                    "seccomp_done", "child_exit", "maxrss_kb", "utime_us", "stime_us",
                    "status")
            reap.append(dict(zip(keys, (int(x) for x in p[1:]))))
    return {"recv": recv, "report": report, "reap": reap}


def write_json(path, obj):
    if path:
        with open(path, "w") as f:
            f.write(json.dumps(obj, indent=1) + "\n")


class AgentProc:
    """A real rcs-agent started from its own config file (agent.conf) with its own state
    directory, in workdir/<name>/; optionally under the jobtrace.so probe (trace=True:
    LD_PRELOAD, RCS_JOBTRACE=<dir>/trace.txt). Stopped by pid."""

    def __init__(self, workdir, name, mqtt, client_root, entity_ident, trusted_key=None,
                 tags=(), extra_lines=(), trace=False, binary=None):
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.entity_ident = entity_ident
        self.conf = os.path.join(self.dir, "agent.conf")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.trace_path = os.path.join(self.dir, "trace.txt") if trace else None
        lines = ["mqtt %s" % mqtt, "client_root %s" % client_root,
                 "entity_ident %s" % entity_ident, "state_dir %s" % os.path.join(self.dir, "state")]
        if trusted_key:
            lines.append("trusted_key %s" % trusted_key)
        else:
            lines.append("require_signature false")
        lines += ["tag %s" % t for t in tags]
        lines += list(extra_lines)
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.binary = binary or h.AGENT
        self.proc = None

    def start(self):
        env = dict(os.environ)
        if self.trace_path:
            env["LD_PRELOAD"] = JOBTRACE
            env["RCS_JOBTRACE"] = self.trace_path
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "--config", self.conf], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def started(self):
        try:
            with open(self.log_path, "rb") as f:
                return (": device %s of " % self.entity_ident).encode() in f.read()
        except OSError:
            return False

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def signal_stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)

    def wait_stopped(self, timeout=15):
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()
        rc = self.proc.returncode
        self.proc = None
        return rc


def stop_agents(agents):
    for a in agents:
        a.signal_stop()
    return [a.wait_stopped() for a in agents]


def smaps_by_file(pid, limit=12):
    """Rss and Pss (kB) of a process by mapped file (basename; [heap], [stack], [anon] for
    anonymous memory, thread stacks included): where its resident memory is."""
    out = {}
    cur = None
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
                    name = parts[5] if len(parts) >= 6 else "[anon]"
                    cur = out.setdefault(os.path.basename(name) if name.startswith("/")
                                         else name, {"rss_kb": 0, "pss_kb": 0})
                elif cur is not None and parts[0] == "Rss:":
                    cur["rss_kb"] += int(parts[1])
                elif cur is not None and parts[0] == "Pss:":
                    cur["pss_kb"] += int(parts[1])
    except OSError:
        return None
    top = sorted(out.items(), key=lambda kv: -kv[1]["rss_kb"])
    return {k: v for k, v in top[:limit] if v["rss_kb"] > 0}
