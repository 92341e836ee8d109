#!/usr/bin/env python3
"""Coordinators benchmark (BENCHMARKS.md, section 7): the 10,000-device tag send of part 1
with one coordinator on SQLite, one on PostgreSQL, and two on one PostgreSQL database.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build-bench --target bench-coordinators
    # or: RCS_BIN_DIR=build-bench/bin python3 tests/bench/bench_coordinators.py \\
    #     --devices 10000 --runs 2 [--config sqlite:1 --config postgres:2 ...] [--json F]

Configurations (--config DB:N, repeatable; default sqlite:1, postgres:1, postgres:2):
  sqlite:1    one coordinator on a copy of a prepared SQLite file (part 1's shape)
  postgres:1  one coordinator on a PostgreSQL database
  postgres:2  two coordinators (--node-id bench-1, bench-2, docs/scale-out.md) on the same
              PostgreSQL database and the same mosquitto; the send is POSTed to the first
The PostgreSQL server is made with initdb in a temporary directory (tests/integration/
pg_server.py); the prepared tenant (N devices, an echo task) is made once in a template
database and every run gets a copy (CREATE DATABASE ... TEMPLATE). The devices are part
1's simulated fleet (fleetsim), the broker a fresh mosquitto per run.

Round k runs every configuration once, each followed by the broker-only baseline of that
same run (bench_fanout.baseline_run), so the ratio compares like with like on a shared
machine. Per run: the POST's answer time, the time until all N jobs are terminated (seen
through the coordinators' /metrics?name=rcs_job_status_changes_total, which reads no
database, so the bench's polling costs PostgreSQL nothing; --poll api counts through the
API as before, a SELECT per poll) and its ratio to the baseline, each coordinator's CPU
seconds (utime+stime from /proc) and peak RSS (VmHWM), PostgreSQL's CPU seconds (the postmaster's own and reaped children's
plus every live backend's, from /proc/<pid>/stat), the per-coordinator counters of
/metrics (--metrics-listen: reports received, MQTT messages in and out, status changes),
and the lines of each coordinator's log written during the send that look like errors.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

import bench_fanout as bf
from benchlib import copy_db, descendants, h, log, total

import pg_server  # tests/integration, on the path through benchlib  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")
METRICS = ("rcs_mqtt_reports_received_total", "rcs_mqtt_messages_received_total",
           "rcs_mqtt_messages_sent_total", "rcs_mqtt_shared_subscription")
BAD = re.compile(r"error|fail|cannot|warn|denied|timeout|timed out|lost|abort", re.I)


def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def pg_cpu(postmaster):
    """CPU seconds of the PostgreSQL server so far: the postmaster's utime+stime and its
    reaped children's (cutime+cstime: backends that ended), plus every live child's."""
    p = stat_fields(postmaster)
    t = sum(int(x) for x in p[11:15])
    for kid in descendants(postmaster):
        try:
            t += sum(int(x) for x in stat_fields(kid)[11:13])
        except OSError:
            pass  # ended meanwhile: its time is in the postmaster's cutime at the next look
    return t / TCK


def pg_rss_mb(postmaster):
    """Private memory of the server's processes (RssAnon summed; shared buffers apart)."""
    kb = 0
    for pid in [postmaster] + descendants(postmaster):
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        kb += int(line.split()[1])
        except OSError:
            pass
    return round(kb / 1024, 1)


def metrics(port):
    """The counters of METRICS from one coordinator's /metrics ({} when it does not answer
    within 10 s: /metrics reads the database through the writer's lock)."""
    out = {}
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        log("metrics of 127.0.0.1:%d: %r" % (port, e))
        return out
    changes = 0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, val = line.rpartition(" ")
        if name in METRICS:
            out[name] = int(float(val))
        elif name.startswith("rcs_job_status_changes_total{"):
            changes += int(float(val))
    out["rcs_job_status_changes_total"] = changes
    return out


TERMINATED = 'rcs_job_status_changes_total{status="terminated"}'


def terminated_now(port):
    """Jobs this coordinator moved to terminated since it started, from
    /metrics?name=rcs_job_status_changes_total (the in-memory counter: no database read, so
    the bench's polling costs PostgreSQL nothing); None when the coordinator does not serve
    that family alone (a coordinator before it: its /metrics reads the database)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics?name="
                                    "rcs_job_status_changes_total" % port, timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        log("metrics of 127.0.0.1:%d: %r" % (port, e))
        return None
    if "\nrcs_jobs{" in text or text.startswith("rcs_jobs{"):
        return None
    for line in text.splitlines():
        name, _, val = line.rpartition(" ")
        if name == TERMINATED:
            return int(float(val))
    return None


def log_size(c):
    try:
        return os.path.getsize(c.log_path)
    except OSError:
        return 0


def log_since(c, offset):
    """Lines the coordinator logged since offset: how many, and those that look bad."""
    try:
        with open(c.log_path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return {"lines": 0, "bad": 0, "bad_first": []}
    bad = [x for x in lines if BAD.search(x)]
    return {"lines": len(lines), "bad": len(bad), "bad_first": bad[:8]}


class Database:
    """Where each run's coordinators keep their data: copies of one prepared tenant."""

    def __init__(self, kind, workdir, n, pg, statements=False):
        self.kind, self.workdir, self.pg = kind, workdir, pg
        self.k = 0
        home = os.path.join(workdir, "prepare-" + kind)  # its idents file apart
        os.mkdir(home)
        if kind == "sqlite":
            self.prep = bf.prepare(home, n)
        else:
            url = pg.create_db("rcs_bench_template")
            self.template = url.rsplit("/", 1)[1]
            self.prep = bf.prepare(home, n, db=url)
            if statements:
                pg.psql("CREATE EXTENSION pg_stat_statements", db=self.template)
            pg.psql("VACUUM ANALYZE", db=self.template)

    def fresh(self):
        self.k += 1
        if self.kind == "sqlite":
            db = os.path.join(self.workdir, "run-%d.db" % self.k)
            copy_db(self.prep[0], db)
            return db
        name = "rcs_bench_run_%d_%d" % (os.getpid(), self.k)
        self.pg.psql("CREATE DATABASE %s TEMPLATE %s" % (name, self.template))
        return self.pg.url(name)


def pg_stats(pg, db):
    """The database's transaction and row counters (pg_stat_database)."""
    if not db.startswith("postgresql://"):
        return None
    cols = ("xact_commit", "xact_rollback", "deadlocks", "tup_returned", "tup_fetched",
            "tup_inserted", "tup_updated", "tup_deleted")
    name = db.rsplit("/", 1)[1]
    row = pg.psql("SELECT %s FROM pg_stat_database WHERE datname = '%s'" % (
        ", ".join(cols), name)).strip().split("|")
    out = dict(zip(cols, (int(x) for x in row)))
    # per table: where the rows read come from (sequential scans or indexes)
    # and how many of its updates were HOT (no index entry written: n_tup_hot_upd)
    for line in pg.psql("SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), "
                        "coalesce(idx_tup_fetch, 0), n_tup_upd, n_tup_hot_upd "
                        "FROM pg_stat_user_tables", db=name).split():
        t, *v = line.split("|")
        for k, x in zip(("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "n_tup_upd",
                         "n_tup_hot_upd"), v):
            out["%s.%s" % (t, k)] = int(x)
    return out


class WaitSampler:
    """Samples pg_stat_activity of one database every 0.1 s during the send (one psql with
    \\watch: one connection, about 1 ms of the server's CPU per sample): per sample, each
    active backend of the coordinators as its wait ('Lock:transactionid', ...) or 'CPU', with
    the first words of its statement."""

    SQL = ("SELECT 'sample' UNION ALL SELECT coalesce(wait_event_type || ':' || wait_event, "
           "'CPU') || '|' || left(regexp_replace(query, '\\s+', ' ', 'g'), 50) || ' ... ' || "
           "right(regexp_replace(query, '\\s+', ' ', 'g'), 40) "
           "FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
           "AND pid <> pg_backend_pid()")

    def __init__(self, pg, db):
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [os.path.join(pg.bindir, "psql"), "-X", "-q", "-At", "-d", pg.url(db)],
            stdin=subprocess.PIPE, stdout=self.out, stderr=subprocess.DEVNULL, text=True)
        self.proc.stdin.write(self.SQL + " \\watch 0.1\n")
        self.proc.stdin.flush()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.out.seek(0)
        samples, seen = 0, {}
        for line in self.out:
            line = line.strip()
            if line == "sample":
                samples += 1
            elif "|" in line:
                seen[line] = seen.get(line, 0) + 1
        self.out.close()
        waits = sum(v for k, v in seen.items() if k.startswith("Lock:"))
        return {"samples": samples, "active": sum(seen.values()), "lock_waits": waits,
                "top": sorted(([v, k] for k, v in seen.items()), reverse=True)[:8]}


def coordinators_run(workdir, label, database, ncoord, n, timeout, stall, statements,
                     coord_args=(), waits=False, poll_how="auto"):
    _, client_root, key, task, idf = database.prep
    db = database.fresh()
    broker = bf.start_broker(workdir, n)
    coords, sim, res = [], None, {}
    try:
        for i in range(ncoord):
            mport = h.free_port()
            args = ["--mqtt", broker.url, "--metrics-listen", "127.0.0.1:%d" % mport,
                    *coord_args]
            if db.startswith("postgresql://"):
                args += ["--node-id", "bench-%d" % (i + 1)]
            c = h.Coordinator(workdir, db=db, extra_args=args, start_timeout=120)
            c.metrics_port = mport
            c.start()
            coords.append(c)
        api = coords[0].api(key)
        sim = bf.Fleetsim(workdir, idf, client_root, broker.port)
        sim.wait_ready(timeout)
        deadline = time.time() + timeout
        for c in coords:
            while total(c.api(key), "/devices?online=true&per_page=1") < n:
                if time.time() > deadline:
                    raise RuntimeError("devices not online in the coordinator")
                time.sleep(0.2)
        time.sleep(1.0)  # let the state messages settle
        postmaster = database.pg.proc.pid if database.pg and db.startswith("postgresql") \
            else None
        load1 = os.getloadavg()[0]
        m0 = [metrics(c.metrics_port) for c in coords]
        # how the bench sees the jobs end: the coordinators' counters of terminated jobs
        # (GET /metrics?name=..., no database read) or, from a coordinator without it, the
        # API's count (a SELECT count(*) per poll, on PostgreSQL's CPU)
        t0s = [terminated_now(c.metrics_port) for c in coords]
        poll = "metrics" if poll_how != "api" and None not in t0s else "api"
        if poll_how == "metrics" and poll != "metrics":
            raise RuntimeError("--poll metrics: a coordinator does not serve "
                               "/metrics?name=rcs_job_status_changes_total alone")
        off = [log_size(c) for c in coords]
        cpu0 = [bf.cpu_of(c.proc.pid) for c in coords]
        pg0 = pg_cpu(postmaster) if postmaster else None
        s0 = pg_stats(database.pg, db)
        if statements and db.startswith("postgresql://"):
            database.pg.psql("SELECT pg_stat_statements_reset()", db=db.rsplit("/", 1)[1])
        sampler = WaitSampler(database.pg, db.rsplit("/", 1)[1]) \
            if waits and db.startswith("postgresql://") else None
        body = json.dumps({"tag": bf.TAG, "group_name": "bench-%s" % label}).encode()
        conn = bf.http.client.HTTPConnection("127.0.0.1", coords[0].port, timeout=300)
        t0 = time.monotonic()
        conn.request("POST", "/v3/commands/tasks/%s/jobs/tags" % task, body=body,
                     headers={"api-key": key, "Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        t_post = time.monotonic() - t0
        conn.close()
        if resp.status != 201:
            raise RuntimeError("tag send: %d %s" % (resp.status, raw[:500]))
        answer = json.loads(raw)
        group = answer["group"]["ident"]
        created = len(answer["items"])
        path = "/jobs?group_ident=%s&status=terminated&per_page=1" % group
        trace, last, t_last = [], -1, t_post
        while True:
            if poll == "metrics":
                now = [terminated_now(c.metrics_port) for c in coords]
                done = sum((x or 0) - y for x, y in zip(now, t0s))
            else:
                done = total(api, path)
            t_all = time.monotonic() - t0
            if done != last:
                last, t_last = done, t_all
                if not trace or t_all - trace[-1][0] >= 1.0:
                    trace.append((round(t_all, 1), done))
            if done >= n or t_all > timeout:
                break
            if t_all - t_last > stall:
                log("%s: no job terminated for %ds: stopped waiting" % (label, stall))
                break
            time.sleep(0.1)
        activity_samples = sampler.stop() if sampler else None
        if activity_samples:
            log("  pg_stat_activity samples: %s" % json.dumps(activity_samples))
        cpu1 = [bf.cpu_of(c.proc.pid) for c in coords]
        pg1 = pg_cpu(postmaster) if postmaster else None
        trace.append((round(t_all, 1), done))
        if poll == "metrics":
            done = total(api, path)  # the API's count, once the counters say all ended
        complete = done >= n
        m1 = [metrics(c.metrics_port) for c in coords]
        time.sleep(1.0)  # PostgreSQL's statistics are flushed about every second
        s1 = pg_stats(database.pg, db)
        top, calls = None, None
        if statements and db.startswith("postgresql://"):
            # the statements that took the server's time during the send
            top = database.pg.psql(
                "SELECT calls, round(total_exec_time), rows, "
                "regexp_replace(left(query, 110) || ' ... ' || right(query, 60), '\\s+', ' ',"
                " 'g') FROM pg_stat_statements "
                "ORDER BY total_exec_time DESC LIMIT 20", db=db.rsplit("/", 1)[1]).splitlines()
            for line in top:
                log("  pg_stat_statements: %s" % line)
            # every statement the coordinators ran during the send (the psql calls of the
            # bench itself left out), for the statements per report and per job
            calls = int(database.pg.psql(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                "WHERE query NOT ILIKE '%pg_stat%' "
                "AND query NOT ILIKE 'SELECT status, count(*) FROM jobs WHERE group_ident%'",
                db=db.rsplit("/", 1)[1]).strip() or 0)
        g = api.get("/groups/%s" % group)
        statuses = g.json.get("statuses") if g.status == 200 else None
        in_db, history = None, None
        if db.startswith("postgresql://"):
            # the rows as committed, next to the API's count and the group's tallies
            in_db = dict(x.split("|") for x in database.pg.psql(
                "SELECT status, count(*) FROM jobs WHERE group_ident = '%s' GROUP BY status"
                % group, db=db.rsplit("/", 1)[1]).split())
            # history items per job: the same in every run when each report was applied
            history = dict(x.split("|") for x in database.pg.psql(
                "SELECT n, count(*) FROM (SELECT count(*) AS n FROM job_history h JOIN jobs j"
                " ON j.ident = h.job_ident WHERE j.group_ident = '%s' GROUP BY j.ident) x"
                " GROUP BY n" % group, db=db.rsplit("/", 1)[1]).split())
        activity = None
        if not complete and db.startswith("postgresql://"):
            # what the coordinators' connections are doing while the jobs wait
            activity = database.pg.psql(
                "SELECT pid, state, coalesce(wait_event_type, '-'), coalesce(wait_event, '-'),"
                " round(extract(epoch FROM now() - xact_start)), left(query, 100) "
                "FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid()"
                % db.rsplit("/", 1)[1]).splitlines()
            for line in activity:
                log("  pg_stat_activity: %s" % line)
        if not complete:
            log("%s: only %d of %d jobs terminated %.0f s after the POST: %s" % (
                label, done, n, t_all, statuses))
        per = []
        for i, c in enumerate(coords):
            d = {k: m1[i][k] - m0[i].get(k, 0) for k in m1[i]
                 if k != "rcs_mqtt_shared_subscription"} if m1[i] else "no answer"
            if m1[i]:
                d["shared_subscription"] = m1[i].get("rcs_mqtt_shared_subscription")
            cpu = cpu1[i] - cpu0[i]
            per.append({"node": "bench-%d" % (i + 1) if len(coords) > 1 else "single",
                        "cpu_s": round(cpu, 2),
                        "cpu_us_per_job": round(cpu * 1e6 / max(created, 1)),
                        "peak_rss_mb": round(bf.vm_field(c.proc.pid, "VmHWM") / 2**20, 1),
                        "alive": c.alive(), "metrics": d, "log": log_since(c, off[i])})
        cpu_all = sum(cpu1) - sum(cpu0)
        reports = sum(p["metrics"].get("rcs_mqtt_reports_received_total", 0) for p in per
                      if isinstance(p["metrics"], dict))
        res = {"config": label, "complete": complete, "terminated": done, "created": created,
               "rejected": len(answer["rejected"]), "statuses": statuses, "statuses_in_db": in_db,
               "history_items_per_job": history, "pg_activity_samples": activity_samples,
               "load1_before_send": round(load1, 2), "poll": poll,
               "post_s": round(t_post, 4), "post_response_bytes": len(raw),
               "all_terminated_s": round(t_all, 3) if complete else None,
               "jobs_per_s": round(n / t_all, 1) if complete else None,
               "coordinators_cpu_s": round(cpu_all, 2),
               "coordinators_cpu_us_per_job": round(cpu_all * 1e6 / max(created, 1)),
               "postgres_cpu_s": round(pg1 - pg0, 2) if postmaster else None,
               "postgres_cpu_us_per_job": round((pg1 - pg0) * 1e6 / max(created, 1))
               if postmaster else None,
               "postgres_rss_anon_mb": pg_rss_mb(postmaster) if postmaster else None,
               "peak_rss_mb": max(p["peak_rss_mb"] for p in per),
               "postgres_per_job": {k: round((s1[k] - s0.get(k, 0)) / max(created, 1), 2)
                                    for k in s1 if s1[k] != s0.get(k, 0)} if s1 else None,
               "jobs_hot_updates": "%d of %d" % (
                   s1["jobs.n_tup_hot_upd"] - s0.get("jobs.n_tup_hot_upd", 0),
                   s1["jobs.n_tup_upd"] - s0.get("jobs.n_tup_upd", 0)) if s1 else None,
               "reports": reports, "pg_calls": calls,
               "pg_calls_per_report": round(calls / max(reports, 1), 3)
               if calls is not None else None,
               "pg_calls_per_job": round(calls / max(created, 1), 2)
               if calls is not None else None,
               "terminated_trace": trace, "pg_statements": top, "pg_activity_when_stalled": activity,
               "coordinators": per}
    finally:
        simres = sim.stop() if sim else None
        for i, c in enumerate(coords):
            alive = c.alive()
            t_stop = time.monotonic()
            try:
                rc = c.stop(timeout=60)
            except AssertionError as e:  # killed after 60 s: a finding, keep the run
                log("%s: coordinator %d: %s" % (label, i + 1, e))
                rc = "did not stop on SIGTERM within 60 s (killed)"
            if res.get("coordinators"):
                res["coordinators"][i]["stop_s"] = round(time.monotonic() - t_stop, 1)
            if res.get("coordinators"):
                res["coordinators"][i]["exit_code"] = rc
                res["coordinators"][i]["alive_at_end"] = alive
            shutil.copy(c.log_path, os.path.join(workdir, "%s-coordinator-%d.log" % (
                label.replace(":", "-"), i + 1)))
        broker.stop()
    res["sim"] = simres
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--config", action="append", choices=("sqlite:1", "postgres:1",
                                                          "postgres:2"),
                    help="DB:COORDINATORS (repeatable; default all three)")
    ap.add_argument("--timeout", type=int, default=600,
                    help="per phase, seconds (a run past it is reported incomplete)")
    ap.add_argument("--stall", type=int, default=90,
                    help="stop waiting when no job terminated for this many seconds (from "
                    "the POST's answer or the last job terminated)")
    ap.add_argument("--pg-log-slow", type=int, metavar="MS",
                    help="PostgreSQL logs the statements that take this long or longer "
                    "(log_min_duration_statement; the log is kept with --keep)")
    ap.add_argument("--coordinator-arg", action="append", default=[],
                    help="extra argument for every rcs-coordinator serve (repeatable), "
                    "e.g. --coordinator-arg=--lease=120")
    ap.add_argument("--pg-setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a PostgreSQL setting for the run (ALTER SYSTEM, repeatable), e.g. "
                    "plan_cache_mode=force_custom_plan")
    ap.add_argument("--pg-statements", action="store_true",
                    help="load pg_stat_statements and report the statements that took "
                    "PostgreSQL's time during each send")
    ap.add_argument("--pg-waits", action="store_true",
                    help="sample pg_stat_activity every 0.1 s during each send on PostgreSQL "
                    "(lock waits of the coordinators' statements)")
    ap.add_argument("--poll", choices=("auto", "metrics", "api"), default="auto",
                    help="how the bench sees the jobs end: the coordinators' counters of "
                    "terminated jobs (GET /metrics?name=rcs_job_status_changes_total, no "
                    "database read), the API's count of the group's terminated jobs (a "
                    "SELECT per poll, counted in PostgreSQL's CPU), or metrics when every "
                    "coordinator serves it (auto)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (the coordinators' logs are copied there)")
    a = ap.parse_args()
    configs = a.config or ["sqlite:1", "postgres:1", "postgres:2"]
    n = a.devices
    bf.raise_nofile(2 * n + 4096)  # mosquitto: the devices, the coordinators, the baseline
    workdir = tempfile.mkdtemp(prefix="rcs-bench-coord-")
    log("work directory", workdir)
    pg = None
    summary = {"devices": n, "machine": bf.machine(), "uptime_before": subprocess.run(
        ["uptime"], capture_output=True, text=True).stdout.strip(), "runs": []}
    try:
        dbs = {}
        if any(c.startswith("postgres") for c in configs):
            pg = pg_server.PgServer().start()
            for setting in a.pg_setting:
                name, _, value = setting.partition("=")
                pg.psql("ALTER SYSTEM SET %s = '%s'" % (name, value))
                pg.psql("SELECT pg_reload_conf()")
            if a.pg_log_slow is not None:
                pg.psql("ALTER SYSTEM SET log_min_duration_statement = %d" % a.pg_log_slow)
                pg.psql("SELECT pg_reload_conf()")
            summary["postgres"] = pg.psql("SHOW server_version").strip()
            if a.pg_statements:
                pg.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
                pg.pause()
                pg.start()
            dbs["postgres"] = Database("postgres", workdir, n, pg, a.pg_statements)
        if "sqlite:1" in configs:
            dbs["sqlite"] = Database("sqlite", workdir, n, None)
        for k in range(1, a.runs + 1):
            for cfg in configs:
                kind, count = cfg.split(":")
                label = "%s-run%d" % (cfg, k)
                log("%s: starting (load %s)" % (label, os.getloadavg()))
                try:
                    r = coordinators_run(workdir, label, dbs[kind], int(count), n, a.timeout,
                                         a.stall, a.pg_statements,
                                         a.coordinator_arg, a.pg_waits, a.poll)
                except Exception as e:  # a broken run is a finding: keep it, go on
                    log("%s failed: %r" % (label, e))
                    summary["runs"].append({"config": cfg, "run": k, "error": repr(e)})
                    continue
                r["config"], r["run"] = cfg, k
                env = int((r["sim"] or {}).get("env_bytes_avg") or 1200)
                b = bf.baseline_run(workdir, dbs[kind].prep, n, env, a.timeout)
                r["baseline_s"] = b["baseline_s"]
                r["ratio"] = (round(r["all_terminated_s"] / b["baseline_s"], 2)
                              if r["complete"] else None)
                log("%s: %s" % (label, json.dumps({x: y for x, y in r.items()
                                                   if x not in ("sim", "coordinators")})))
                for p in r["coordinators"]:
                    log("  %s" % json.dumps(p))
                summary["runs"].append(r)
        med = {}
        for cfg in configs:
            rs = [r for r in summary["runs"] if r["config"] == cfg and r.get("complete")]

            def m(key):
                v = [r[key] for r in rs if r.get(key) is not None]
                return statistics.median(v) if v else None
            med[cfg] = {k: m(k) for k in (
                "post_s", "all_terminated_s", "baseline_s", "ratio", "jobs_per_s",
                "coordinators_cpu_us_per_job", "postgres_cpu_us_per_job", "peak_rss_mb")}
            med[cfg]["complete_runs"] = len(rs)
        summary["median"] = med
        summary["uptime_after"] = subprocess.run(["uptime"], capture_output=True,
                                                 text=True).stdout.strip()
        out = json.dumps(summary, indent=1)
        print(out)
        if a.json:
            with open(a.json, "w") as f:
                f.write(out + "\n")
    finally:
        if pg is not None:
            if a.keep:
                shutil.copy(os.path.join(pg.dir, "postgres.log"), workdir)
            pg.stop()
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
