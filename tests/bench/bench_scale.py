#!/usr/bin/env python3
"""Scaling benchmark (BENCHMARKS.md, part 6): the fan-out at several fleet sizes and the REST
figures, each with the coordinator on both cores and pinned to one (taskset -c 0), written
as one JSON file and drawn as plots.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-scale
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_scale.py --out build/bench-scale
    #     [--with-50k] [--runs 1] [--plot-only]

Per fleet size (quick: 1,000 and 10,000; --with-50k adds 50,000) and per CPU set (all, "0"):
bench_fanout.py --get-under-load (coordinator CPU per job from /proc/<pid>/stat, the time
until all are terminated as a ratio to the broker-only baseline of the same run, peak RSS,
GET /jobs/<id> latency while the send is committed and reported). Per CPU set:
bench_rest.py (GET and POST with wrk, nginx as the GET baseline). Results: OUT/scale.json;
plots (python3-matplotlib): OUT/fanout-*.png against devices and OUT/*-cores.png against
cores.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable or "/usr/bin/python3"
CPUSETS = (("all", None), ("1", "0"))  # label (cores), taskset list


def log(*a):
    print("bench_scale:", *a, file=sys.stderr, flush=True)


def run(script, args, out):
    cmd = [PY, os.path.join(HERE, script), *args, "--json", out]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def measure(a):
    res = {"fanout": [], "rest": []}
    sizes = [1000, 10000] + ([50000] if a.with_50k else [])
    for n in sizes:
        for label, cpus in CPUSETS:
            args = ["--devices", str(n), "--runs", str(a.runs), "--get-under-load",
                    "--timeout", "300" if n > 10000 else "120"]
            if cpus:
                args += ["--cpus", cpus]
            r = run("bench_fanout.py", args, os.path.join(a.out, "fanout-%d-%s.json" % (
                n, label)))
            m = r["median"]
            res["fanout"].append({"devices": n, "cores": label, **m,
                                  "incomplete_runs": r["incomplete_runs"]})
    if not a.no_rest:
        for label, cpus in CPUSETS:
            args = ["--runs", str(a.runs), "--duration", str(a.duration)]
            if cpus:
                args += ["--cpus", cpus]
            r = run("bench_rest.py", args, os.path.join(a.out, "rest-%s.json" % label))
            res["rest"].append({"cores": label, **r["median"],
                                "wrk_threads": r["wrk_threads"],
                                "wrk_connections": r["wrk_connections"]})
    return res


def plot(res, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fo = res["fanout"]
    figs = (("coordinator_cpu_us_per_job", "coordinator CPU per job (µs)", 150),
            ("ratio", "all terminated / broker-only baseline", 2),
            ("peak_rss_mb", "coordinator peak RSS (MB)", 150),
            ("get_under_load_p99_ms", "GET /jobs/<id> p99 during the send (ms)", 20))
    for key, title, target in figs:
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, _ in CPUSETS:
            pts = sorted((r["devices"], r.get(key)) for r in fo if r["cores"] == label and
                         r.get(key) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        label="cores: %s" % ("2 (all)" if label == "all" else label))
        ax.axhline(target, color="grey", linestyle="--", label="target")
        ax.set_xscale("log")
        ax.set_xlabel("devices")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        f = os.path.join(out, "fanout-%s.png" % key)
        fig.savefig(f, dpi=80)
        plt.close(fig)
        files.append(f)
    # against cores: fan-out at each size, GET and POST
    cores_figs = [("fanout", "coordinator_cpu_us_per_job", "fan-out CPU per job (µs)"),
                  ("fanout", "jobs_per_s", "fan-out jobs/s"),
                  ("rest", "get_coordinator_req_per_s", "GET /jobs/<id> req/s"),
                  ("rest", "post_coordinator_jobs_per_s", "POST .../jobs jobs/s")]
    fig, axes = plt.subplots(1, len(cores_figs), figsize=(16, 4))
    for ax, (part, key, title) in zip(axes, cores_figs):
        rows = res[part]
        groups = sorted({r.get("devices", 0) for r in rows})
        for g in groups:
            pts = [(1 if r["cores"] == "1" else os.cpu_count(), r.get(key)) for r in rows
                   if r.get("devices", 0) == g and r.get(key) is not None]
            pts.sort()
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        label=("%d devices" % g) if g else part)
        if part == "rest" and key.startswith("get"):
            pts = sorted((1 if r["cores"] == "1" else os.cpu_count(),
                          r.get("get_nginx_req_per_s")) for r in rows)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="s", linestyle=":",
                    label="nginx")
        ax.set_xticks([1, os.cpu_count()])
        ax.set_xlabel("coordinator cores")
        ax.set_title(title)
        ax.legend(fontsize="small")
    fig.tight_layout()
    f = os.path.join(out, "scale-cores.png")
    fig.savefig(f, dpi=80)
    plt.close(fig)
    files.append(f)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-scale", help="output directory")
    ap.add_argument("--runs", type=int, default=1, help="runs per point (medians)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk measurement")
    ap.add_argument("--with-50k", action="store_true", help="also 50,000 devices")
    ap.add_argument("--no-rest", action="store_true", help="only the fan-out")
    ap.add_argument("--plot-only", action="store_true",
                    help="draw the plots from OUT/scale.json without measuring")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "scale.json")
    if a.plot_only:
        with open(path) as f:
            res = json.load(f)
    else:
        res = measure(a)
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    for f in plot(res, a.out):
        log("wrote", f)


if __name__ == "__main__":
    main()
