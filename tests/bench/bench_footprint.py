#!/usr/bin/env python3
"""Agent footprint benchmark (BENCHMARKS.md, part 4): the agent's size, memory and per-job overhead.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-footprint      (or the whole `bench` target)
    # or: RCS_BIN_DIR=build/bin python3 tests/bench/bench_footprint.py --runs 3 --jobs 1000 \
    #        --build-root build/bench-footprint

1. Size. Cross builds of the agent alone (-DWITH_COORDINATOR=OFF -DWITH_TESTS=OFF) for
   aarch64 and armhf (toolchains/*.cmake): dynamic (default build type, and MinSizeRel) and
   static (-DWITH_STATIC=ON -DCMAKE_BUILD_TYPE=MinSizeRel, with a linker map), each stripped
   with <triplet>-strip; the static ones are run once under qemu-user (--version). Baseline:
   a static "hello world" from the same cross compiler (-Os, stripped): the size of static
   glibc's start-up, stdio and locale code that any static C program carries. The linker
   map of each static build attributes the file's bytes to the libraries.

2. Memory of the native agent (RCS_BIN_DIR), per run a fresh agent on a fresh mosquitto:
   idle RSS (VmRSS, and PSS/private from smaps_rollup, and by mapped file) 2 s after it
   connected, and the same for the static agent built for this machine (MinSizeRel); during a job
   (a signed task whose script sleeps 2 s: the agent's and the sandbox child's RSS, sampled
   after 1 s, and their summed PSS). Baseline: mosquitto_sub, connected to the same broker
   and idle, measured at the same time: a minimal C MQTT client process.

3. Per-job overhead over --jobs sequential trivial jobs (the stock echo script, signed). The
   script plays the coordinator: it takes one envelope the real coordinator built and signed,
   then publishes it --jobs times under new job idents to the agent (QoS 1), each after the
   previous one's terminated report. The agent runs under the jobtrace.so probe (see
   jobtrace.c), which timestamps with CLOCK_MONOTONIC: envelope received (paho's callback),
   each report handed to paho (after the journal has it), the jail's fork, the child's
   start, the child's call of seccomp_load() (signals, rlimits, Lua state and rcs API set
   up), its return, and the reap (with the child's peak RSS from wait4()). Per job:
     received -> edge_started                    checks, signature, journal, queue
     fork -> seccomp loaded                      the jail's fork + Lua state setup
     overhead = the sum of the two (the target's definition)
     received -> terminated                      everything on the device for a trivial job
   Medians over the jobs, then over the runs. The agent's own log (millisecond timestamps)
   gives edge_transmitted -> terminated as a cross-check of the probe, and 200 jobs on the
   same agent without the probe give the probe's cost (end to end, from this script).
   Baseline (same run, in ten slices between the jobs): tests/bench/forkbase, a process as
   large as the agent (as much private memory as the agent's idle RssAnon, written;
   forkbase's own libc and liblua stand for the agent's shared libraries) timing
   fork+_exit+waitpid, and fork + a fresh Lua state (standard libraries) running the echo
   script + waitpid: the floor of any fork-based Lua jail of the agent's size.

Prints everything as JSON (--json FILE writes it too).
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import benchlib as b
from benchlib import h

# the sysroots tools/deps.sh makes (toolchains/cross-sysroot.cmake)
SYSROOTS = os.environ.get("RCS_SYSROOT_DIR", "/opt/rcs-sysroot")
ARCHES = {"aarch64": ("aarch64-linux-gnu", "toolchains/aarch64-linux-gnu.cmake",
                      ["qemu-aarch64", "-L", os.path.join(SYSROOTS, "aarch64-linux-gnu")]),
          "armhf": ("arm-linux-gnueabihf", "toolchains/arm-linux-gnueabihf.cmake",
                    ["qemu-arm", "-L", os.path.join(SYSROOTS, "arm-linux-gnueabihf")])}
SLEEP_LUA = "-- bench: holds the sandbox for 2 s\nrcs.sleep(2)\nreturn \"slept\"\n"

# ---------------------------------------------------------------------------------------
# 1. size


def run_quiet(cmd, log_path, **kw):
    with open(log_path, "ab") as f:
        f.write(("\n$ %s\n" % " ".join(cmd)).encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d), see %s" % (cmd[0], r.returncode, log_path))


def map_breakdown(map_path):
    """Bytes of the allocated, file-backed output sections by input library, from a GNU ld
    map: {"libcrypto.a": n, ..., "(agent objects)": n, "(linker)": n}."""
    keep = re.compile(r"^\.(text|rodata|data|eh_frame|gcc_except_table|init_array|fini_array|"
                      r"data\.rel\.ro|tdata|got|ARM\.exidx|ARM\.extab|init|fini|plt|rela|rel|"
                      r"preinit_array|note|stapsdt|gnu\.)")
    out = {}
    sec = None
    pending = None
    started = False
    with open(map_path, errors="replace") as f:
        for line in f:
            if not started:
                started = line.startswith("Linker script and memory map")
                continue
            if line and not line[0].isspace():
                name = line.split()[0] if line.split() else ""
                sec = name if keep.match(name) and not name.startswith(".bss") else None
                continue
            if sec is None:
                continue
            parts = line.split()
            if pending is not None and parts and parts[0].startswith("0x"):
                parts = [pending] + parts
                pending = None
            if len(parts) == 1 and parts[0].startswith("."):
                pending = parts[0]
                continue
            if len(parts) >= 4 and parts[0].startswith(".") and parts[1].startswith("0x") \
                    and parts[2].startswith("0x"):
                if parts[0].startswith((".bss", ".tbss")):
                    continue
                size = int(parts[2], 16)
                src = " ".join(parts[3:])
                m = re.search(r"([^/]+\.a)\(", src)
                if m:
                    key = m.group(1)
                elif "CMakeFiles" in src:
                    key = "(agent objects)"
                else:
                    key = "(start files, linker)"
                out[key] = out.get(key, 0) + size
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def build_variant(src, root, arch, kind, log_path):
    """arch "native": this machine's compiler, no toolchain file."""
    triplet, toolchain, _ = ARCHES.get(arch, ("", None, None))
    bdir = os.path.join(root, "%s-%s" % (arch, kind))
    args = ["cmake", "-S", src, "-B", bdir, "-DWITH_COORDINATOR=OFF", "-DWITH_TESTS=OFF"]
    if toolchain:
        args.append("-DCMAKE_TOOLCHAIN_FILE=%s" % os.path.join(src, toolchain))
    mapfile = None
    if kind in ("static", "static-notls"):
        mapfile = os.path.join(bdir, "rcs-agent.map")
        args += ["-DWITH_STATIC=ON", "-DCMAKE_BUILD_TYPE=MinSizeRel",
                 "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-Map=%s" % mapfile]
        # without TLS: paho's plain variant, no OpenSSL (-DWITH_TLS=OFF)
        args.append("-DWITH_TLS=%s" % ("OFF" if kind == "static-notls" else "ON"))
    elif kind == "dynamic-minsize":
        args += ["-DCMAKE_BUILD_TYPE=MinSizeRel"]
    else:
        args += ["-DCMAKE_BUILD_TYPE=RelWithDebInfo"]  # the project's default
    run_quiet(args, log_path)
    run_quiet(["cmake", "--build", bdir, "-j%d" % (os.cpu_count() or 2), "--target",
               "rcs-agent"], log_path)
    binary = os.path.join(bdir, "bin", "rcs-agent")
    stripped = binary + ".stripped"
    shutil.copy2(binary, stripped)
    run_quiet(["%s-strip" % triplet if triplet else "strip", stripped], log_path)
    res = {"unstripped_bytes": os.path.getsize(binary),
           "stripped_bytes": os.path.getsize(stripped)}
    if mapfile and os.path.exists(mapfile):
        res["by_library_bytes"] = map_breakdown(mapfile)
    if kind.startswith("static") and arch in ARCHES:
        emu = ARCHES[arch][2]
        r = subprocess.run(emu + [stripped, "--version"], capture_output=True, text=True,
                           timeout=60)
        res["runs_under_qemu"] = r.returncode == 0 and "rcs-agent" in r.stdout
    return res


def hello_static(root, arch, log_path):
    triplet = ARCHES[arch][0]
    d = os.path.join(root, "hello")
    os.makedirs(d, exist_ok=True)
    c = os.path.join(d, "hello.c")
    with open(c, "w") as f:
        f.write('#include <stdio.h>\nint main(void) { printf("hello\\n"); return 0; }\n')
    out = os.path.join(d, "hello-static-%s" % arch)
    run_quiet(["%s-gcc" % triplet, "-Os", "-static", "-o", out, c], log_path)
    run_quiet(["%s-strip" % triplet, out], log_path)
    return os.path.getsize(out)


def sizes(src, root):
    os.makedirs(root, exist_ok=True)
    log_path = os.path.join(root, "builds.log")
    res = {}
    for arch in ARCHES:
        t0 = time.monotonic()
        res[arch] = {kind: build_variant(src, root, arch, kind, log_path)
                     for kind in ("dynamic", "dynamic-minsize", "static", "static-notls")}
        res[arch]["hello_static_bytes"] = hello_static(root, arch, log_path)
        res[arch]["static_ratio_to_hello"] = round(
            res[arch]["static"]["stripped_bytes"] / res[arch]["hello_static_bytes"], 1)
        b.log("%s: built in %.0f s: dynamic %d, static %d, static without TLS %d bytes"
              " stripped" % (arch, time.monotonic() - t0,
                             res[arch]["dynamic"]["stripped_bytes"],
                             res[arch]["static"]["stripped_bytes"],
                             res[arch]["static-notls"]["stripped_bytes"]))
    native = os.path.join(root, "rcs-agent-native.stripped")
    shutil.copy2(h.AGENT, native)
    subprocess.run(["strip", native], check=True)
    res["native_dynamic_stripped_bytes"] = os.path.getsize(native)
    # the static agent for this machine, to measure a static agent's memory (part 2)
    st = build_variant(src, root, "native", "static", log_path)
    res["native_static_stripped_bytes"] = st["stripped_bytes"]
    res["native_static_binary"] = os.path.join(root, "native-static", "bin",
                                               "rcs-agent.stripped")
    st = build_variant(src, root, "native", "static-notls", log_path)
    res["native_static_notls_stripped_bytes"] = st["stripped_bytes"]
    res["native_static_notls_binary"] = os.path.join(root, "native-static-notls", "bin",
                                                     "rcs-agent.stripped")
    return res


# ---------------------------------------------------------------------------------------
# setup: keys, a tenant, signed tasks, the envelopes the coordinator built


def capture_envelopes(workdir):
    """Runs the real coordinator (with a signing key) once: a device, an echo task and a
    2 s sleep task (a tenant script), one job of each; returns what the agents need."""
    import paho.mqtt.client as mqtt
    keys = h.make_ec_keypair(workdir)
    broker = b.start_broker(workdir)
    coord = h.Coordinator(workdir, db=os.path.join(workdir, "rcs.db"),
                          extra_args=("--mqtt", broker.url, "--signing-key", keys[0]))
    tenant = coord.init_tenant(user="bench")
    got = {}
    ev = threading.Event()
    try:
        coord.start()
        api = coord.api(tenant["api_key"])
        dev = api.post("/devices", {"name": "footprint"}).json["entity_ident"]
        r = api.put("/scripts/sleep2", {"source": SLEEP_LUA})
        if r.status not in (200, 201):
            raise RuntimeError("PUT /scripts: %r" % r)
        echo = api.post("/tasks", {"name": "echo", "script": "echo"}).json
        sleep = api.post("/tasks", {"name": "sleep", "script": "sleep2"}).json
        if not echo.get("signature") or not sleep.get("signature"):
            raise RuntimeError("tasks not signed")
        root = tenant["client_root"]
        base = "rcs/v1/%s/%s" % (root, dev)
        c = mqtt.Client(client_id="bench-capture")

        def on_message(_c, _u, msg):
            if msg.topic.count("/") == 5:
                got[msg.topic.rsplit("/", 1)[1]] = msg.payload.decode()
                ev.set()

        c.on_message = on_message
        c.connect("127.0.0.1", broker.port)
        c.subscribe(base + "/jobs/+", qos=1)
        c.loop_start()
        time.sleep(0.3)
        # the device is online as far as the coordinator can tell (its retained state)
        c.publish(base + "/state", json.dumps({"v": 1, "online": True, "tags": [],
                                               "agent_version": "bench",
                                               "ts": int(time.time())}), qos=1, retain=True)
        h.wait_for(lambda: b.total(api, "/devices?online=true&per_page=1") == 1,
                   what="device online")
        envs = {}
        for name, task in (("echo", echo), ("sleep", sleep)):
            ev.clear()
            j = api.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": dev})
            if j.status != 201:
                raise RuntimeError("POST job: %r" % j)
            h.wait_for(lambda: j.json["ident"] in got, what="envelope")
            envs[name] = json.loads(got[j.json["ident"]])
        c.publish(base + "/state", b"", qos=1, retain=True).wait_for_publish()
        c.loop_stop()
        c.disconnect()
    finally:
        coord.stop()
        broker.stop()
    return {"keys": keys, "client_root": root, "device": dev, "envelopes": envs}


class Driver:
    """Plays the coordinator over MQTT: publishes an envelope under a new job ident and
    waits for that job's terminated (or edge_error) report."""

    def __init__(self, broker, setup):
        import paho.mqtt.client as mqtt
        self.base = "rcs/v1/%s/%s" % (setup["client_root"], setup["device"])
        self.envs = setup["envelopes"]
        self.final = {}
        self.cond = threading.Condition()
        self.c = mqtt.Client(client_id="bench-driver-%s" % uuid.uuid4().hex[:8])
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", broker.port)
        # no Nagle delay between this client's PUBACKs and its next envelope
        self.c.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.c.subscribe(self.base + "/jobs/+/status", qos=1)
        self.c.loop_start()
        time.sleep(0.2)

    def _on_message(self, _c, _u, msg):
        rep = json.loads(msg.payload)
        if rep.get("status") in ("terminated", "edge_error"):
            with self.cond:
                self.final[rep["job"]] = (time.monotonic(), rep["status"], rep.get("response"))
                self.cond.notify_all()

    def run(self, name, timeout=30):
        """One job; returns (job ident, publish time, (final time, status, response))."""
        env = dict(self.envs[name])
        job = str(uuid.uuid4())
        env["job"] = job
        t0 = time.monotonic()
        self.c.publish(self.base + "/jobs/" + job, json.dumps(env), qos=1)
        with self.cond:
            if not self.cond.wait_for(lambda: job in self.final, timeout):
                raise RuntimeError("job %s: no final report in %ds" % (job, timeout))
            fin = self.final[job]
        if fin[1] != "terminated":
            raise RuntimeError("job %s ended %s: %s" % (job, fin[1], fin[2]))
        return job, t0, fin

    def stop(self):
        self.c.loop_stop()
        self.c.disconnect()


def start_agent(rundir, name, broker, setup, trace, binary=None):
    a = b.AgentProc(rundir, name, broker.url, setup["client_root"], setup["device"],
                    trusted_key=setup["keys"][1], trace=trace, binary=binary).start()
    h.wait_for(lambda: a.started() or a.proc.poll() is not None, timeout=20,
               what="agent started")
    if a.proc.poll() is not None:
        raise RuntimeError("agent exited: %s" % a.read_log())
    # connected and its state published
    h.wait_for(lambda: "connected to" in a.read_log(), timeout=20, what="agent connected")
    return a


# ---------------------------------------------------------------------------------------
# 2. memory


def memory_run(rundir, setup, static_binary=None, static_notls_binary=None):
    broker = b.start_broker(rundir)
    agent = agent_t = sub = drv = None
    static = static_notls = None
    try:
        if static_binary and os.path.exists(static_binary):
            a = start_agent(rundir, "agent-static", broker, setup, trace=False,
                            binary=static_binary)
            time.sleep(2.0)
            static = (b.proc_status(a.pid), b.smaps_rollup(a.pid))
            a.signal_stop()
            a.wait_stopped()
        if static_notls_binary and os.path.exists(static_notls_binary):
            a = start_agent(rundir, "agent-static-notls", broker, setup, trace=False,
                            binary=static_notls_binary)
            time.sleep(2.0)
            static_notls = (b.proc_status(a.pid), b.smaps_rollup(a.pid),
                            [b.smaps_rollup(p) for p in b.descendants(a.pid)])
            a.signal_stop()
            a.wait_stopped()
        agent = start_agent(rundir, "agent", broker, setup, trace=False)
        agent_t = start_agent(rundir, "agent-probe", broker, setup, trace=True)
        sub = subprocess.Popen(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port),
                                "-q", "1", "-t", "bench/idle/#"], stdout=subprocess.DEVNULL)
        time.sleep(2.0)
        idle = b.proc_status(agent.pid)
        idle_roll = b.smaps_rollup(agent.pid)
        idle_files = b.smaps_by_file(agent.pid)
        # processes the agent keeps beside it while idle (a jail launcher, if any)
        helpers = b.descendants(agent.pid)
        helper_st = [b.proc_status(p) for p in helpers]
        helper_roll = [b.smaps_rollup(p) for p in helpers]
        probe = b.proc_status(agent_t.pid)
        sub_st = b.proc_status(sub.pid)
        sub_roll = b.smaps_rollup(sub.pid)
        agent_t.signal_stop()
        agent_t.wait_stopped()
        agent_t = None
        # during a job: the sleep task holds the sandbox child for 2 s
        drv = Driver(broker, setup)
        result = {}

        def job():
            result["r"] = drv.run("sleep")

        t = threading.Thread(target=job)
        t.start()
        during = None
        deadline = time.time() + 10
        while time.time() < deadline:
            kids = [p for p in b.descendants(agent.pid) if p not in helpers]
            if kids:
                time.sleep(1.0)  # the child is sleeping in rcs.sleep, its Lua state set up
                kid = kids[0]
                during = {"agent": b.proc_status(agent.pid),
                          "agent_roll": b.smaps_rollup(agent.pid),
                          "helpers_roll": [b.smaps_rollup(p) for p in helpers],
                          "child": b.proc_status(kid), "child_roll": b.smaps_rollup(kid)}
                break
            time.sleep(0.005)
        t.join(30)
        after = b.proc_status(agent.pid)
    finally:
        if drv:
            drv.stop()
        if sub:
            sub.terminate()
            sub.wait()
        for a in (agent, agent_t):
            if a:
                a.signal_stop()
                a.wait_stopped()
        broker.stop()
    kb = 1024.0
    res = {"idle_rss_mb": round(idle["VmRSS"] / kb, 2),
           "idle_rss_anon_mb": round(idle["RssAnon"] / kb, 2),
           "idle_rss_file_mb": round(idle["RssFile"] / kb, 2),
           "idle_pss_mb": round(idle_roll["Pss"] / kb, 2),
           "idle_private_mb": round((idle_roll["Private_Clean"] +
                                     idle_roll["Private_Dirty"]) / kb, 2),
           "idle_threads": idle["Threads"],
           "idle_helper_processes": len(helpers),
           "idle_helpers_rss_mb": round(sum(x["VmRSS"] for x in helper_st if x) / kb, 2),
           "idle_tree_pss_mb": round((idle_roll["Pss"] + sum(
               x["Pss"] for x in helper_roll if x)) / kb, 2),
           "idle_rss_with_probe_mb": round(probe["VmRSS"] / kb, 2),
           "baseline_mosquitto_sub_rss_mb": round(sub_st["VmRSS"] / kb, 2),
           "baseline_mosquitto_sub_pss_mb": round(sub_roll["Pss"] / kb, 2),
           "idle_rss_ratio_to_mosquitto_sub": round(idle["VmRSS"] / sub_st["VmRSS"], 2),
           "agent_vmhwm_after_sleep_job_mb": round(after["VmHWM"] / kb, 2),
           "idle_rss_kb": idle["VmRSS"], "idle_rss_anon_kb": idle["RssAnon"],
           "idle_rss_by_mapping_kb": idle_files}
    if static:
        res["static_agent_idle_rss_mb"] = round(static[0]["VmRSS"] / kb, 2)
        res["static_agent_idle_pss_mb"] = round(static[1]["Pss"] / kb, 2)
    if static_notls:
        res["static_notls_agent_idle_rss_mb"] = round(static_notls[0]["VmRSS"] / kb, 2)
        res["static_notls_agent_idle_pss_mb"] = round(static_notls[1]["Pss"] / kb, 2)
        # with its jail launcher (a fork of the agent: the two share their pages)
        res["static_notls_tree_idle_pss_mb"] = round((static_notls[1]["Pss"] + sum(
            x["Pss"] for x in static_notls[2] if x)) / kb, 2)
    if during and during["child"]:
        res.update({
            "job_agent_rss_mb": round(during["agent"]["VmRSS"] / kb, 2),
            "job_child_rss_mb": round(during["child"]["VmRSS"] / kb, 2),
            "job_child_rss_anon_mb": round(during["child"]["RssAnon"] / kb, 2),
            "job_agent_plus_child_rss_mb": round(
                (during["agent"]["VmRSS"] + during["child"]["VmRSS"]) / kb, 2),
            "job_agent_plus_child_pss_mb": round(
                (during["agent_roll"]["Pss"] + during["child_roll"]["Pss"]) / kb, 2),
            "job_tree_pss_mb": round((during["agent_roll"]["Pss"] + during["child_roll"]["Pss"]
                                      + sum(x["Pss"] for x in during["helpers_roll"] if x))
                                     / kb, 2),
            "job_child_private_mb": round((during["child_roll"]["Private_Clean"] +
                                           during["child_roll"]["Private_Dirty"]) / kb, 2)})
    return res


# ---------------------------------------------------------------------------------------
# 3. per-job overhead

SPANS = (
    ("recv_to_edge_transmitted", "recv", "edge_transmitted"),
    ("recv_to_edge_started", "recv", "edge_started"),
    ("edge_started_to_fork", "edge_started", "fork_call"),
    ("fork_to_child_running", "fork_call", "child_start"),
    ("child_setup_lua_state", "child_start", "lua_ready"),
    ("seccomp_load", "lua_ready", "seccomp_done"),
    ("fork_to_seccomp_loaded", "fork_call", "seccomp_done"),
    ("script_result_and_reap", "seccomp_done", "reap"),
    ("reap_to_terminated", "reap", "terminated"),
    ("recv_to_terminated", "recv", "terminated"),
)


def log_crosscheck(log_text):
    """edge_transmitted -> terminated per job from the agent's log (ms timestamps)."""
    seen = {}
    out = []
    pat = re.compile(r"^(\S+)T(\d\d):(\d\d):(\d\d\.\d+)Z .*link_report: job (\S+): (\w+)")
    for line in log_text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        t = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
        job, st = m.group(5), m.group(6)
        if st == "edge_transmitted":
            seen[job] = t
        elif st == "terminated" and job in seen:
            d = t - seen[job]
            out.append(d * 1000 if d >= 0 else (d + 86400) * 1000)
    return out


def overhead_run(rundir, setup, njobs, nplain, idle_kb):
    # set_tcp_nodelay: without it each hop through the broker may wait for a delayed ACK
    # (~40 ms); the on-device figures don't include the broker, this only makes 1,000
    # sequential jobs take seconds instead of minutes
    broker = h.Mosquitto(rundir, persistence=False,
                         extra_conf="set_tcp_nodelay true\n").start()
    agent = drv = None
    e2e = []
    e2e_plain = []
    try:
        agent = start_agent(rundir, "agent-jobs", broker, setup, trace=True)
        drv = Driver(broker, setup)
        for _ in range(5):  # warm-up: first job creates tables' pages, loads code
            drv.run("echo")
        with open(agent.trace_path, "w"):
            pass  # the warm-up jobs are not counted
        log_mark = len(agent.read_log())
        jobs = []
        final_at = {}
        fb = {"fork": [], "lua": []}
        blocks = 10
        for i in range(njobs):
            job, t0, fin = drv.run("echo")
            jobs.append((job, t0))
            final_at[job] = fin[0]
            if (i + 1) % max(1, njobs // blocks) == 0:
                # the baseline in slices between the jobs: the same load weighs on both
                for mode in fb:
                    r = subprocess.run([b.FORKBASE, "--mode", mode, "--rss-kb", str(idle_kb),
                                        "--iterations", str(max(1, njobs // blocks)),
                                        "--samples"], capture_output=True, text=True,
                                       check=True)
                    fb[mode] += json.loads(r.stdout)["samples_us"]
            e2e.append((fin[0] - t0) * 1000)
        rss_after = b.proc_status(agent.pid)
        log_ms = log_crosscheck(agent.read_log()[log_mark:])
        agent.signal_stop()
        agent.wait_stopped()
        tr = b.read_trace(agent.trace_path)
        # the same, without the probe: its cost end to end
        agent2 = start_agent(rundir, "agent-plain", broker, setup, trace=False)
        try:
            for _ in range(5):
                drv.run("echo")
            for _ in range(nplain):
                job, t0, fin = drv.run("echo")
                e2e_plain.append((fin[0] - t0) * 1000)
        finally:
            agent2.signal_stop()
            agent2.wait_stopped()
    finally:
        if drv:
            drv.stop()
        if agent:
            agent.signal_stop()
            agent.wait_stopped()
        broker.stop()
    # per job: the agent's events; reaps pair with jobs in order (one job at a time)
    reaps = tr["reap"]
    if len(reaps) != njobs:
        raise RuntimeError("%d reaps for %d jobs" % (len(reaps), njobs))
    spans = {name: [] for name, _, _ in SPANS}
    overhead, pub_to_recv, maxrss, term_to_driver = [], [], [], []
    for (job, t_pub), rp in zip(jobs, reaps):
        ev = dict(tr["report"].get(job, {}))
        ev["recv"] = tr["recv"].get(job)
        for k in ("fork_call", "child_start", "lua_ready", "seccomp_done"):
            ev[k] = rp[k] or None
        ev["reap"] = rp["t"]
        for name, a0, a1 in SPANS:
            if ev.get(a0) and ev.get(a1):
                spans[name].append((ev[a1] - ev[a0]) / 1e6)
        if ev.get("recv") and ev.get("edge_started") and ev.get("seccomp_done"):
            overhead.append((ev["edge_started"] - ev["recv"] +
                             ev["seccomp_done"] - ev["fork_call"]) / 1e6)
        if ev.get("recv"):
            pub_to_recv.append((ev["recv"] / 1e9 - t_pub) * 1000)
        if ev.get("terminated") and job in final_at:
            term_to_driver.append((final_at[job] - ev["terminated"] / 1e9) * 1000)
        maxrss.append(rp["maxrss_kb"])
    med = {name: b.rnd(b.median(v), 3) for name, v in spans.items()}
    res = {
        "jobs": njobs,
        "median_ms": med,
        "p90_ms": {name: b.rnd(b.pct(v, 90), 3) for name, v in spans.items()},
        "overhead_ms": b.rnd(b.median(overhead)),
        "overhead_p90_ms": b.rnd(b.pct(overhead, 90)),
        "end_to_end_ms_probe": b.rnd(b.median(e2e)),
        "end_to_end_ms_no_probe": b.rnd(b.median(e2e_plain)),
        "jobs_without_probe": nplain,
        "publish_to_recv_ms": b.rnd(b.median(pub_to_recv)),
        "terminated_report_to_driver_ms": b.rnd(b.median(term_to_driver)),
        "log_edge_transmitted_to_terminated_mean_ms": b.rnd(
            sum(log_ms) / len(log_ms) if log_ms else None),
        "probe_edge_transmitted_to_terminated_mean_ms": None,
        "child_peak_rss_mb": round(b.median(maxrss) / 1024, 2),
        "agent_vmhwm_after_jobs_mb": round(rss_after["VmHWM"] / 1024, 2),
        "agent_rss_after_jobs_mb": round(rss_after["VmRSS"] / 1024, 2),
        "baseline_fork_waitpid_ms": round(b.median(fb["fork"]) / 1000, 3),
        "baseline_fork_lua_waitpid_ms": round(b.median(fb["lua"]) / 1000, 3),
        "baseline_rounds": len(fb["fork"]),
        "baseline_rss_kb": idle_kb,
    }
    tt = []
    for job, _ in jobs:
        r = tr["report"].get(job, {})
        if "edge_transmitted" in r and "terminated" in r:
            tt.append((r["terminated"] - r["edge_transmitted"]) / 1e6)
    res["probe_edge_transmitted_to_terminated_mean_ms"] = b.rnd(sum(tt) / len(tt) if tt
                                                                else None)
    res["ratio_overhead_to_fork_lua"] = round(res["overhead_ms"] / res[
        "baseline_fork_lua_waitpid_ms"], 1)
    res["ratio_jail_to_fork_lua"] = round(med["fork_to_seccomp_loaded"] / res[
        "baseline_fork_lua_waitpid_ms"], 2)
    res["ratio_overhead_to_fork"] = round(res["overhead_ms"] / res[
        "baseline_fork_waitpid_ms"], 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--jobs-without-probe", type=int, default=200)
    ap.add_argument("--build-root", help="where the cross builds go (kept: incremental)")
    ap.add_argument("--skip-sizes", action="store_true", help="no cross builds")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    b.ensure_deps()
    for f in (h.AGENT, h.COORDINATOR, b.JOBTRACE, b.FORKBASE):
        if not os.path.exists(f):
            sys.exit("missing %s: build the bench target first" % f)
    workdir = tempfile.mkdtemp(prefix="rcs-bench-footprint-")
    b.log("work directory", workdir)
    summary = {"machine": b.machine(), "runs": a.runs, "jobs": a.jobs}
    try:
        if not a.skip_sizes:
            root = os.path.abspath(a.build_root or os.path.join(workdir, "builds"))
            summary["sizes"] = sizes(h.SOURCE_DIR, root)
        setup = capture_envelopes(workdir)
        mem, ovh = [], []
        for k in range(1, a.runs + 1):
            others = b.busy_processes()
            rundir = os.path.join(workdir, "run-%d" % k)
            os.makedirs(rundir)
            sz = summary.get("sizes", {})
            m = memory_run(rundir, setup, sz.get("native_static_binary"),
                           sz.get("native_static_notls_binary"))
            m["other_cpu_use_before_run"] = others
            b.log("run %d memory: %s" % (k, m))
            o = overhead_run(rundir, setup, a.jobs, a.jobs_without_probe,
                             m["idle_rss_anon_kb"])
            o["load1_after"] = round(os.getloadavg()[0], 2)
            b.log("run %d overhead: %s" % (k, o))
            mem.append(m)
            ovh.append(o)

        def med(rows, key):
            return b.median(r.get(key) for r in rows)

        summary["memory_runs"] = mem
        summary["overhead_runs"] = ovh
        summary["median"] = {
            "idle_rss_mb": med(mem, "idle_rss_mb"),
            "idle_pss_mb": med(mem, "idle_pss_mb"),
            "idle_private_mb": med(mem, "idle_private_mb"),
            "static_agent_idle_rss_mb": med(mem, "static_agent_idle_rss_mb"),
            "static_notls_agent_idle_rss_mb": med(mem, "static_notls_agent_idle_rss_mb"),
            "static_notls_tree_idle_pss_mb": med(mem, "static_notls_tree_idle_pss_mb"),
            "idle_tree_pss_mb": med(mem, "idle_tree_pss_mb"),
            "baseline_mosquitto_sub_rss_mb": med(mem, "baseline_mosquitto_sub_rss_mb"),
            "idle_rss_ratio_to_mosquitto_sub": med(mem, "idle_rss_ratio_to_mosquitto_sub"),
            "job_agent_rss_mb": med(mem, "job_agent_rss_mb"),
            "job_child_rss_mb": med(mem, "job_child_rss_mb"),
            "job_agent_plus_child_pss_mb": med(mem, "job_agent_plus_child_pss_mb"),
            "overhead_ms": med(ovh, "overhead_ms"),
            "recv_to_edge_started_ms": b.median(o["median_ms"]["recv_to_edge_started"]
                                                for o in ovh),
            "fork_to_seccomp_loaded_ms": b.median(o["median_ms"]["fork_to_seccomp_loaded"]
                                                  for o in ovh),
            "recv_to_terminated_ms": b.median(o["median_ms"]["recv_to_terminated"]
                                              for o in ovh),
            "baseline_fork_waitpid_ms": med(ovh, "baseline_fork_waitpid_ms"),
            "baseline_fork_lua_waitpid_ms": med(ovh, "baseline_fork_lua_waitpid_ms"),
            "ratio_overhead_to_fork_lua": med(ovh, "ratio_overhead_to_fork_lua"),
            "ratio_jail_to_fork_lua": med(ovh, "ratio_jail_to_fork_lua"),
        }
        m = summary["median"]
        t = {"idle RSS <= 4 MB": m["idle_rss_mb"] <= 4,
             "overhead <= 5 ms per job": m["overhead_ms"] <= 5}
        if "sizes" in summary:
            t["static aarch64 <= 2.5 MB"] = (
                summary["sizes"]["aarch64"]["static"]["stripped_bytes"] <= 2.5 * 2**20)
            t["static aarch64 without TLS <= 2.5 MB"] = (
                summary["sizes"]["aarch64"]["static-notls"]["stripped_bytes"] <= 2.5 * 2**20)
        summary["targets"] = t
        summary["loadavg_at_end"] = os.getloadavg()
        print(json.dumps(summary, indent=1))
        b.write_json(a.json, summary)
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
