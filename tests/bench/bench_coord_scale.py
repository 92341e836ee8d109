#!/usr/bin/env python3
"""Coordinators against fleet size (BENCHMARKS.md): the tag send of bench_coordinators.py at
1,000, 10,000 and 100,000 devices, one coordinator on SQLite and one on PostgreSQL, written
as one JSON file and drawn as two plots.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-coord-scale
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_coord_scale.py --out OUT
    #     [--sizes 1000,10000,100000] [--runs 1] [--plot-only]

Per size, one bench_coordinators.py run (--config sqlite:1 --config postgres:1, its own
PostgreSQL made with initdb, fleetsim with one connection per device: past 20,000
connections fleetsim spreads them over source addresses 127.0.0.2, .3, ...; the open-files
limit is raised when run as root). Results: OUT/coord-scale.json, with per size and engine
the time until all jobs are terminated, the coordinator's and PostgreSQL's CPU per job and
the coordinator's peak RSS; plots (python3-matplotlib): OUT/coord-scale-time.png and
OUT/coord-scale-cpu.png against devices.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable or "/usr/bin/python3"
ENGINES = (("sqlite:1", "SQLite"), ("postgres:1", "PostgreSQL"))
KEYS = ("post_s", "all_terminated_s", "baseline_s", "coordinators_cpu_us_per_job",
        "postgres_cpu_us_per_job", "peak_rss_mb", "load1_before_send", "complete")


def log(*a):
    print("bench_coord_scale:", *a, file=sys.stderr, flush=True)


def measure(a):
    rows = []
    for n in a.sizes:
        out = os.path.join(a.out, "coord-%d.json" % n)
        cmd = [PY, os.path.join(HERE, "bench_coordinators.py"), "--devices", str(n),
               "--runs", str(a.runs), "--timeout", str(a.timeout), "--json", out]
        for cfg, _ in ENGINES:
            cmd += ["--config", cfg]
        log(" ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            res = json.load(f)
        for r in res["runs"]:
            row = {"devices": n, "config": r["config"], "run": r.get("run")}
            if "error" in r:
                row["error"] = r["error"]
            row.update({k: r.get(k) for k in KEYS})
            rows.append(row)
            log(json.dumps(row))
    return rows


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(cfg, key):
        pts = sorted((r["devices"], r[key]) for r in rows
                     if r["config"] == cfg and r.get("complete") and r.get(key) is not None)
        return [p[0] for p in pts], [p[1] for p in pts]

    def figure(name, title, lines, ylog):
        fig, ax = plt.subplots(figsize=(6, 4))
        for cfg, key, label, style in lines:
            x, y = series(cfg, key)
            ax.plot(x, y, label=label, **style)
        ax.set_xscale("log")
        if ylog:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("devices")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        f = os.path.join(out, name)
        fig.savefig(f, dpi=80)
        plt.close(fig)
        return f

    dot = {"marker": "o"}
    return [
        figure("coord-scale-time.png", "POST to all jobs terminated (s)",
               [(cfg, "all_terminated_s", name, dot) for cfg, name in ENGINES], True),
        figure("coord-scale-cpu.png", "CPU per job (µs)",
               [(cfg, "coordinators_cpu_us_per_job", "coordinator, %s" % name, dot)
                for cfg, name in ENGINES] +
               [("postgres:1", "postgres_cpu_us_per_job", "PostgreSQL's own",
                 {"marker": "s", "linestyle": ":"})], False),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench-coord-scale", help="output directory")
    ap.add_argument("--sizes", default="1000,10000,100000",
                    help="fleet sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=1, help="runs per size and engine")
    ap.add_argument("--timeout", type=int, default=1800,
                    help="per phase of a run, seconds (bench_coordinators.py --timeout)")
    ap.add_argument("--plot-only", action="store_true",
                    help="draw the plots from OUT/coord-scale.json without measuring")
    a = ap.parse_args()
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "coord-scale.json")
    if a.plot_only:
        with open(path) as f:
            rows = json.load(f)["rows"]
    else:
        rows = measure(a)
        with open(path, "w") as f:
            json.dump({"rows": rows, "uname": os.uname().release,
                       "cpus": os.cpu_count()}, f, indent=1)
    for f in plot(rows, a.out):
        log("plot", f)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
