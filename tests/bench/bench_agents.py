#!/usr/bin/env python3
"""Real-agents benchmark (BENCHMARKS.md, part 2): one tag send to 100 real rcs-agent processes.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-agents      (or the whole `bench` target)
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_agents.py --agents 100 --runs 3

Once: an EC P-256 signing key, a prepared database (one tenant, N devices holding the tag
"fleet", a task on the stock echo script, signed by the coordinator's key).

Per run, everything fresh (mosquitto on a free port, a copy of the database, new agent state
directories):

  agents run: rcs-coordinator serve --mqtt --signing-key; N rcs-agent processes, each with
      its own config file and state directory, trusting the public key, holding the tag;
      wait until the coordinator has all N online (an agent that dies while starting is
      started again and the exit recorded: agent_start_crashes); after 1 s, every agent's
      idle RSS (VmRSS); POST /tasks/<id>/jobs/tags; the time until all N jobs are
      terminated (the group's terminated count, polled every 20 ms); then every agent's
      VmHWM and, for the job's sandbox child, its peak RSS as the kernel reports it when it
      is reaped (ru_maxrss of wait4(), recorded by the jobtrace.so probe the agents run
      under; see jobtrace.c), and the on-device time per job (envelope received ->
      terminated report).
  baseline run: the same coordinator, broker and tag send to N fleetsim devices that answer
      every envelope at once (edge_transmitted .. terminated, no script, no journal).

ratio = agents time / baseline time (same run). Prints the runs and medians as JSON.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import benchlib as b
from benchlib import h

TAG = "fleet"


def agents_run(workdir, k, prep, n, timeout, keys):
    rundir = os.path.join(workdir, "agents-%d" % k)
    os.makedirs(rundir)
    db = os.path.join(rundir, "rcs.db")
    b.copy_db(prep["db"], db)
    broker = b.start_broker(rundir)
    coord = h.Coordinator(rundir, db=db, extra_args=("--mqtt", broker.url,
                                                     "--signing-key", keys[0]))
    agents = []
    crashes = []
    res = {}
    try:
        coord.start()
        api = coord.api(prep["api_key"])
        t_start = time.monotonic()
        for i, ident in enumerate(prep["idents"]):
            agents.append(b.AgentProc(rundir, "agent-%03d" % i, broker.url, prep["client_root"],
                                      ident, trusted_key=keys[1], tags=[TAG],
                                      trace=True).start())
        # An agent that dies while starting is started again, as systemd's Restart= would
        # (docs/agent.md); each such exit is recorded: it is a finding, not noise.
        deadline = time.monotonic() + timeout
        while b.total(api, "/devices?online=true&per_page=1") < n:
            for a in agents:
                rc = a.proc.poll()
                if rc is not None:
                    crashes.append({"agent": os.path.basename(a.dir), "exit": rc,
                                    "log_tail": a.read_log()[-300:]})
                    b.log("agent %s exited with %d while starting: restarted" % (
                        os.path.basename(a.dir), rc))
                    a.wait_stopped()
                    a.start()
            if time.monotonic() > deadline:
                raise RuntimeError("not all %d agents online after %ds" % (n, timeout))
            time.sleep(0.1)
        t_online = time.monotonic() - t_start
        time.sleep(1.0)
        idle = [b.proc_status(a.pid) for a in agents]
        # processes each agent keeps beside it (a jail launcher, if any)
        helpers = [b.descendants(a.pid) for a in agents]
        helpers_idle = [[b.proc_status(p) for p in hs] for hs in helpers]
        idle_pss = [b.smaps_rollup(a.pid) for a in agents[:10]]
        load1 = os.getloadavg()[0]
        cpu0 = sum(b.cpu_seconds(a.pid) for a in agents)
        done_t, t_post, group, statuses, created, rejected = b.tag_send_and_wait(
            api, prep["task"], TAG, "agents-%d" % k, n, timeout)
        cpu1 = sum(b.cpu_seconds(a.pid) for a in agents)
        time.sleep(0.5)  # the last reaps and reports are written
        after = [b.proc_status(a.pid) for a in agents]
        helpers_after = [[b.proc_status(p) for p in hs] for hs in helpers]
        traces = [b.read_trace(a.trace_path) for a in agents]
        child_peak, agent_peak, peak_with_child, on_device, child_life = [], [], [], [], []
        for a, st, tr in zip(agents, after, traces):
            hwm = st["VmHWM"]
            agent_peak.append(hwm)
            cp = max((r["maxrss_kb"] for r in tr["reap"]), default=None)
            child_peak.append(cp)
            peak_with_child.append(max(hwm, cp or 0))
            for r in tr["reap"]:
                child_life.append((r["t"] - r["fork_call"]) / 1e6)
            for job, t_recv in tr["recv"].items():
                t_term = tr["report"].get(job, {}).get("terminated")
                if t_term:
                    on_device.append((t_term - t_recv) / 1e6)
        kb = 1024.0
        res = {
            "complete": done_t is not None, "statuses": statuses, "created": created,
            "rejected": rejected, "load1_before_send": round(load1, 2),
            "agents_online_s": round(t_online, 2),
            "post_s": round(t_post, 4),
            "all_terminated_s": b.rnd(done_t),
            "agents_cpu_s_during_send": round(cpu1 - cpu0, 2),
            "idle_rss_mb": {"median": round(b.median(s["VmRSS"] for s in idle) / kb, 2),
                            "max": round(max(s["VmRSS"] for s in idle) / kb, 2),
                            "min": round(min(s["VmRSS"] for s in idle) / kb, 2)},
            "helper_processes_per_agent": b.median(len(hs) for hs in helpers),
            "idle_helpers_rss_mb_median": round(b.median(
                sum(x["VmRSS"] for x in hs if x) for hs in helpers_idle) / kb, 2),
            "helpers_vmhwm_mb_max": round(max(
                (x["VmHWM"] for hs in helpers_after for x in hs if x), default=0) / kb, 2),
            "idle_pss_mb_median_of_10": round(b.median(s["Pss"] for s in idle_pss) / kb, 2),
            "idle_private_mb_median_of_10": round(b.median(
                s["Private_Clean"] + s["Private_Dirty"] for s in idle_pss) / kb, 2),
            "agent_vmhwm_mb": {"median": round(b.median(agent_peak) / kb, 2),
                               "max": round(max(agent_peak) / kb, 2)},
            "child_peak_rss_mb": {
                "median": b.rnd(b.median(child_peak) and b.median(child_peak) / kb, 2),
                "max": b.rnd(max((c for c in child_peak if c), default=0) / kb, 2),
                "children_measured": sum(1 for c in child_peak if c)},
            "peak_rss_incl_child_mb": {"median": round(b.median(peak_with_child) / kb, 2),
                                       "max": round(max(peak_with_child) / kb, 2)},
            "on_device_ms": {"median": b.rnd(b.median(on_device)),
                             "p90": b.rnd(b.pct(on_device, 90)),
                             "max": b.rnd(max(on_device, default=None) if on_device else None),
                             "jobs": len(on_device)},
            "child_fork_to_reap_ms": {"median": b.rnd(b.median(child_life)),
                                      "p90": b.rnd(b.pct(child_life, 90))},
        }
    finally:
        rcs = b.stop_agents(agents)
        coord.stop()
        broker.stop()
    res["agents_exit_codes_nonzero"] = sum(1 for rc in rcs if rc not in (0, None))
    res["agent_start_crashes"] = crashes
    return res


def baseline_run(workdir, k, prep, n, timeout, keys):
    rundir = os.path.join(workdir, "baseline-%d" % k)
    os.makedirs(rundir)
    db = os.path.join(rundir, "rcs.db")
    b.copy_db(prep["db"], db)
    broker = b.start_broker(rundir)
    coord = h.Coordinator(rundir, db=db, extra_args=("--mqtt", broker.url,
                                                     "--signing-key", keys[0]))
    sim = None
    try:
        coord.start()
        api = coord.api(prep["api_key"])
        sim = b.Fleetsim(rundir, prep["idents"], prep["client_root"], broker.port)
        sim.wait_ready(timeout)
        b.wait_online(api, n, timeout)
        time.sleep(1.0)
        load1 = os.getloadavg()[0]
        done_t, t_post, group, statuses, created, rejected = b.tag_send_and_wait(
            api, prep["task"], TAG, "baseline-%d" % k, n, timeout)
    finally:
        if sim:
            sim.stop()
        coord.stop()
        broker.stop()
    return {"complete": done_t is not None, "all_terminated_s": b.rnd(done_t),
            "post_s": round(t_post, 4), "statuses": statuses, "load1_before_send": round(load1, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    b.ensure_deps()
    for f in (h.AGENT, h.COORDINATOR, b.FLEETSIM, b.JOBTRACE):
        if not os.path.exists(f):
            sys.exit("missing %s: build the bench target first" % f)
    n = a.agents
    workdir = tempfile.mkdtemp(prefix="rcs-bench-agents-")
    b.log("work directory", workdir)
    try:
        mach = b.machine()
        keys = h.make_ec_keypair(workdir)
        prep = b.prepare_tenant(workdir, n, tag=TAG, signing_key=keys[0])
        if not prep["task_record"].get("signature"):
            raise RuntimeError("the task was not signed")
        runs = []
        for k in range(1, a.runs + 1):
            others = b.busy_processes()
            r = agents_run(workdir, k, prep, n, a.timeout, keys)
            b.log("run %d agents: %s" % (k, r))
            base = baseline_run(workdir, k, prep, n, a.timeout, keys)
            b.log("run %d baseline: %s" % (k, base))
            r["baseline"] = base
            r["ratio"] = (round(r["all_terminated_s"] / base["all_terminated_s"], 2)
                          if r["complete"] and base["complete"] else None)
            r["other_cpu_use_before_run"] = others
            runs.append(r)
        med = {
            "all_terminated_s": b.median(r["all_terminated_s"] for r in runs),
            "baseline_s": b.median(r["baseline"]["all_terminated_s"] for r in runs),
            "ratio": b.median(r["ratio"] for r in runs),
            "post_s": b.median(r["post_s"] for r in runs),
            "idle_rss_mb": b.median(r["idle_rss_mb"]["median"] for r in runs),
            "idle_rss_mb_max": b.median(r["idle_rss_mb"]["max"] for r in runs),
            "agent_vmhwm_mb": b.median(r["agent_vmhwm_mb"]["median"] for r in runs),
            "child_peak_rss_mb": b.median(r["child_peak_rss_mb"]["median"] for r in runs),
            "peak_rss_incl_child_mb": b.median(r["peak_rss_incl_child_mb"]["median"]
                                               for r in runs),
            "peak_rss_incl_child_mb_max": b.median(r["peak_rss_incl_child_mb"]["max"]
                                                   for r in runs),
            "on_device_ms": b.median(r["on_device_ms"]["median"] for r in runs),
            "agents_cpu_s_during_send": b.median(r["agents_cpu_s_during_send"] for r in runs),
        }
        crashes = sum(len(r["agent_start_crashes"]) for r in runs)
        summary = {"agents": n, "machine": mach,
                   "incomplete_runs": sum(1 for r in runs if not r["complete"]),
                   "agent_start_crashes_total": crashes,
                   "loadavg_at_end": os.getloadavg(), "median": med,
                   "targets": {"all terminated <= 5 s": (med["all_terminated_s"] or 1e9) <= 5},
                   "runs": runs}
        out = b.json.dumps(summary, indent=1)
        print(out)
        b.write_json(a.json, summary)
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
