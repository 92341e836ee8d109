#!/usr/bin/env python3
"""REST throughput benchmark (BENCHMARKS.md, part 3): wrk against the coordinator, and against
nginx serving the same JSON as static files (the baseline, measured in the same run).

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-rest      (or the whole `bench` target)
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_rest.py --runs 3

Setup: mosquitto on a free port, rcs-coordinator serve --mqtt (defaults: 4 HTTP threads)
with one tenant, one device simulated by fleetsim (online, answering every envelope at once
with its four reports) and a task on the stock echo script. One job is created and run;
its record (GET /jobs/<id>) and the answer of its creation (POST .../jobs, 201) become
static files of an nginx started by this script: its own config in the work directory
(free loopback port, pid file, error log, temp paths, no daemon mode, access log off,
worker_processes = cores, unlimited keep-alive requests), stopped by its pid. POST to the
static file is answered 201 with the file (error_page 405 =201 $uri).

Per run, each for --duration seconds, with the same wrk threads and connections, keep-alive:
  GET  nginx        /v3/commands/jobs/<id> (static file), right before and right after the
                    coordinator's GET: the GET baseline is the mean of the two
  GET  coordinator  /v3/commands/jobs/<id> with the api-key header
  POST nginx        /v3/commands/tasks/<task>/jobs (static file)
  POST coordinator  /v3/commands/tasks/<task>/jobs {"entity_ident": <device>}: every request
                    creates a job for the online device, published at once over MQTT; after
                    the run the script waits until every job created is terminated (the
                    drain time) before the next measurement.
wrk's Lua script sets the method and body and prints the figures as JSON (done()); any
non-2xx answer or socket error is counted and reported. Prints runs and medians as JSON.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import benchlib as b
from benchlib import h

WRK = shutil.which("wrk") or "/usr/bin/wrk"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

WRK_LUA = r"""
local method, body = os.getenv("BENCH_METHOD"), os.getenv("BENCH_BODY")
wrk.method = method
if body and body ~= "" then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end
local key = os.getenv("BENCH_API_KEY")
if key and key ~= "" then
  wrk.headers["api-key"] = key
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, ' ..
    '"read_errors": %d, "write_errors": %d, "timeouts": %d, "non_2xx": %d, ' ..
    '"latency_p50_us": %d, "latency_p99_us": %d, "latency_max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.timeout, e.status, latency:percentile(50), latency:percentile(99), latency.max))
end
"""


class Nginx:
    """nginx with its own config in workdir, on a free loopback port, no daemon mode."""

    def __init__(self, workdir, root):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(self.dir)
        self.port = h.free_port()
        self.pid_file = os.path.join(self.dir, "nginx.pid")
        self.error_log = os.path.join(self.dir, "error.log")
        self.conf = os.path.join(self.dir, "nginx.conf")
        temps = "\n".join("  %s_temp_path %s/tmp-%s;" % (t, self.dir, t) for t in
                          ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(self.conf, "w") as f:
            f.write("""daemon off;
master_process on;
worker_processes %d;
pid %s;
error_log %s warn;
events { worker_connections 4096; }
http {
  access_log off;
%s
  keepalive_requests 1000000000;
  keepalive_timeout 75s;
  default_type application/json;
  server {
    listen 127.0.0.1:%d;
    root %s;
    location / { error_page 405 =201 $uri; }
  }
}
""" % (os.cpu_count(), self.pid_file, self.error_log, temps, self.port, root))
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", self.conf, "-e",
                                      self.error_log], stdout=subprocess.DEVNULL,
                                     stderr=open(self.error_log, "ab"))
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: %s" % open(self.error_log).read())
            try:
                with __import__("socket").create_connection(("127.0.0.1", self.port), 0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)  # graceful: the master stops its workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def wrk(url, script, threads, conns, duration, method="GET", body="", key=""):
    env = dict(os.environ, BENCH_METHOD=method, BENCH_BODY=body, BENCH_API_KEY=key)
    p = subprocess.run([WRK, "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration,
                        "--timeout", "10s", "-s", script, url],
                       capture_output=True, text=True, env=env, timeout=duration + 60)
    for line in p.stdout.splitlines():
        if line.startswith("WRKJSON "):
            r = json.loads(line[8:])
            r["req_per_s"] = round(r["requests"] / (r["duration_us"] / 1e6), 1)
            r["errors"] = (r["connect_errors"] + r["read_errors"] + r["write_errors"] +
                           r["timeouts"] + r["non_2xx"])
            return r
    raise RuntimeError("wrk printed no result: %s %s" % (p.stdout[-2000:], p.stderr[-2000:]))


def wait_drained(api, total_jobs, timeout):
    """Seconds until every job of the tenant is terminated (the bridge caught up)."""
    t0 = time.monotonic()
    while True:
        done = b.total(api, "/jobs?status=terminated&per_page=1")
        if done >= total_jobs:
            return time.monotonic() - t0, done
        if time.monotonic() - t0 > timeout:
            return None, done
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk measurement")
    ap.add_argument("--threads", type=int, default=2, help="wrk threads (both servers)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (both)")
    ap.add_argument("--timeout", type=int, default=300, help="drain timeout, seconds")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--cpus", help="pin the coordinator to these CPUs (taskset -c), e.g. 0")
    a = ap.parse_args()
    b.ensure_deps()
    for f in (h.COORDINATOR, b.FLEETSIM, WRK, NGINX):
        if not os.path.exists(f):
            sys.exit("missing %s" % f)
    workdir = tempfile.mkdtemp(prefix="rcs-bench-rest-")
    os.chmod(workdir, 0o755)  # nginx's workers (nobody, when started as root) read www/
    b.log("work directory", workdir)
    broker = coord = sim = ngx = None
    try:
        mach = b.machine()
        prep = b.prepare_tenant(workdir, 1, tag="rest")
        device, task = prep["idents"][0], prep["task"]
        broker = b.start_broker(workdir)
        coord = h.Coordinator(workdir, db=prep["db"], extra_args=("--mqtt", broker.url))
        coord.start()
        if a.cpus:
            subprocess.run(["taskset", "-a", "-p", "-c", a.cpus, str(coord.proc.pid)],
                           check=True, stdout=subprocess.DEVNULL)
        api = coord.api(prep["api_key"])
        sim = b.Fleetsim(workdir, [device], prep["client_root"], broker.port)
        sim.wait_ready()
        b.wait_online(api, 1, 30)
        post_body = json.dumps({"entity_ident": device})
        r = api.post("/tasks/%s/jobs" % task, {"entity_ident": device})
        if r.status != 201:
            raise RuntimeError("POST job: %r" % r)
        post_answer, job = r.raw, r.json["ident"]
        jobs_total = 1
        if wait_drained(api, jobs_total, 30)[0] is None:
            raise RuntimeError("the first job did not terminate")
        g = api.get("/jobs/%s" % job)
        if g.status != 200:
            raise RuntimeError("GET job: %r" % g)
        get_path = "/v3/commands/jobs/%s" % job
        post_path = "/v3/commands/tasks/%s/jobs" % task
        www = os.path.join(workdir, "www")
        for path, content in ((get_path, g.raw), (post_path, post_answer)):
            f = os.path.join(www, path.lstrip("/"))
            os.makedirs(os.path.dirname(f), exist_ok=True)
            with open(f, "w") as fp:
                fp.write(content)
        for root, dirs, files in os.walk(www):
            os.chmod(root, 0o755)
            for fn in files:
                os.chmod(os.path.join(root, fn), 0o644)
        ngx = Nginx(workdir, www).start()
        script = os.path.join(workdir, "wrk.lua")
        with open(script, "w") as f:
            f.write(WRK_LUA)
        coord_base = "http://127.0.0.1:%d" % coord.port
        ngx_base = "http://127.0.0.1:%d" % ngx.port
        # the same bytes from both (sizes); a warm-up of each
        sizes = {"get_body_bytes": len(g.raw.encode()),
                 "post_answer_bytes": len(post_answer.encode())}
        T, C = a.threads, a.connections
        b.log("warm-up")
        wrk(ngx_base + get_path, script, T, C, 2)
        wrk(coord_base + get_path, script, T, C, 2, key=prep["api_key"])
        runs = []
        for k in range(1, a.runs + 1):
            others = b.busy_processes()
            load1 = os.getloadavg()[0]
            run = {"load1_before": round(load1, 2), "other_cpu_use_before_run": others}
            # nginx right before and right after the coordinator: the baseline is their
            # mean, so a load that changes during the run weighs on both sides alike
            ngx_before = wrk(ngx_base + get_path, script, T, C, a.duration)
            cpu0 = b.cpu_seconds(coord.proc.pid)
            run["get_coordinator"] = wrk(coord_base + get_path, script, T, C, a.duration,
                                         key=prep["api_key"])
            run["get_coordinator"]["coordinator_cpu_s"] = round(
                b.cpu_seconds(coord.proc.pid) - cpu0, 2)
            ngx_after = wrk(ngx_base + get_path, script, T, C, a.duration)
            run["get_nginx"] = {
                "req_per_s": round((ngx_before["req_per_s"] + ngx_after["req_per_s"]) / 2, 1),
                "errors": ngx_before["errors"] + ngx_after["errors"],
                "latency_p99_us": max(ngx_before["latency_p99_us"],
                                      ngx_after["latency_p99_us"]),
                "before": ngx_before, "after": ngx_after}
            run["post_nginx"] = wrk(ngx_base + post_path, script, T, C, a.duration,
                                    method="POST", body=post_body)
            cpu0 = b.cpu_seconds(coord.proc.pid)
            pc = wrk(coord_base + post_path, script, T, C, a.duration, method="POST",
                     body=post_body, key=prep["api_key"])
            created = pc["requests"] - pc["non_2xx"]
            jobs_total += created
            drain, done = wait_drained(api, jobs_total, a.timeout)
            pc["coordinator_cpu_s"] = round(b.cpu_seconds(coord.proc.pid) - cpu0, 2)
            pc["jobs_created"] = created
            pc["jobs_per_s"] = round(created / (pc["duration_us"] / 1e6), 1)
            pc["drain_s"] = b.rnd(drain, 2)
            pc["terminated_after_drain"] = done
            if drain is not None:
                pc["jobs_terminated_per_s_sustained"] = round(
                    created / (pc["duration_us"] / 1e6 + drain), 1)
            run["post_coordinator"] = pc
            run["get_ratio"] = round(run["get_coordinator"]["req_per_s"] /
                                     run["get_nginx"]["req_per_s"], 3)
            run["post_ratio"] = round(pc["req_per_s"] / run["post_nginx"]["req_per_s"], 3)
            b.log("run %d: GET coordinator %.0f/s nginx %.0f/s (%.3fx); POST coordinator "
                  "%.0f/s (drain %ss) nginx %.0f/s" % (
                      k, run["get_coordinator"]["req_per_s"], run["get_nginx"]["req_per_s"],
                      run["get_ratio"], pc["req_per_s"], pc["drain_s"],
                      run["post_nginx"]["req_per_s"]))
            runs.append(run)

        def med(path):
            vals = []
            for r in runs:
                v = r
                for p in path.split("."):
                    v = v.get(p) if isinstance(v, dict) else None
                vals.append(v)
            return b.median(vals)

        m = {"get_coordinator_req_per_s": med("get_coordinator.req_per_s"),
             "get_nginx_req_per_s": med("get_nginx.req_per_s"),
             "get_ratio": med("get_ratio"),
             "get_coordinator_p99_ms": b.rnd(med("get_coordinator.latency_p99_us") / 1000),
             "post_coordinator_jobs_per_s": med("post_coordinator.jobs_per_s"),
             "post_nginx_req_per_s": med("post_nginx.req_per_s"),
             "post_ratio": med("post_ratio"),
             "post_coordinator_p99_ms": b.rnd(med("post_coordinator.latency_p99_us") / 1000),
             "post_drain_s": med("post_coordinator.drain_s"),
             "post_jobs_terminated_per_s_sustained":
                 med("post_coordinator.jobs_terminated_per_s_sustained")}
        summary = {"cpus": a.cpus or "all", "duration_s": a.duration, "wrk_threads": T,
                   "wrk_connections": C, "nginx_workers": os.cpu_count(),
                   "coordinator_http_threads": 4, "machine": mach, "sizes": sizes,
                   "errors_total": sum(r[x]["errors"] for r in runs for x in
                                       ("get_nginx", "get_coordinator", "post_nginx",
                                        "post_coordinator")),
                   "loadavg_at_end": os.getloadavg(), "median": m,
                   "targets": {"GET >= 20000 req/s": m["get_coordinator_req_per_s"] >= 20000,
                               "GET >= 0.3x nginx": m["get_ratio"] >= 0.3,
                               "POST >= 2000 jobs/s": m["post_coordinator_jobs_per_s"] >= 2000,
                               "GET >= 0.5x nginx": m["get_ratio"] >= 0.5,
                               "POST >= 4000 jobs/s": m["post_coordinator_jobs_per_s"] >= 4000,
                               "POST p99 < 50 ms": m["post_coordinator_p99_ms"] < 50},
                   "runs": runs}
        print(json.dumps(summary, indent=1))
        b.write_json(a.json, summary)
    finally:
        if ngx:
            ngx.stop()
        if sim:
            sim.stop()
        if coord:
            coord.stop()
        if broker:
            broker.stop()
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
