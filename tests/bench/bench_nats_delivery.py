#!/usr/bin/env python3
"""Delivery on the NATS cluster (BENCHMARKS.md section 20): per job, the seconds from
`transmited` to `edge_transmitted` (the job's history, whole seconds) and the agent's log
time of its edge_transmitted, with two coordinators on one PostgreSQL (pg_server.py), a
3-node NATS cluster (nats_cluster.py) and N_AGENTS real agents, every client given the three
nodes. Tag sends: 2 at the start, 2 after SETTLE seconds, one through coordinator a followed
at once by its kill -9, ROUNDS through b, a started again, ROUNDS through both. Prints one
line per job (SLOW: more than 5 s), the count, and the coordinators' re-send lines.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. [N_AGENTS=10 ROUNDS=6 SETTLE=8
     RESEND_UNACKED_AFTER=0] /usr/bin/python3 tests/bench/bench_nats_delivery.py
"""

import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import pg_server  # noqa: E402
from nats_cluster import NatsCluster  # noqa: E402
from rcs_harness import Agent, Coordinator, make_ec_keypair, wait_for  # noqa: E402

N_AGENTS = int(os.environ.get("N_AGENTS", "6"))
ROUNDS = int(os.environ.get("ROUNDS", "4"))
RESEND = os.environ.get("RESEND_AFTER", "60")
UNACKED = os.environ.get("RESEND_UNACKED_AFTER")  # unset: the coordinator's default


def rotated(urls, i):
    i %= len(urls)
    return urls[i:] + urls[:i]


def hist(api, j):
    items = api.get("/jobs/%s/history?per_page=50" % j).json["items"]
    return {h["status"]: h["update_at"] for h in items}


def main():
    w = tempfile.mkdtemp(prefix="rcs-natsdelay-")
    print("workdir", w, flush=True)
    cluster = NatsCluster(w).start()
    srv = pg_server.shared()
    db = srv.create_db()
    key, pub = make_ec_keypair(w, "signing")
    urls = cluster.mqtt_urls
    coords = []
    agents = []
    try:
        for i, node in enumerate(("probe-a", "probe-b")):
            args = ["--node-id", node, "--lease", "5", "--signing-key", key,
                    "--resend-after", RESEND]
            if UNACKED is not None:
                args += ["--resend-unacked-after", UNACKED]
            for u in rotated(urls, i):
                args += ["--mqtt", u]
            coords.append(Coordinator(w, db=db, extra_args=args))
        tenant = coords[0].init_tenant(user="admin")
        for c in coords:
            c.start()
        apis = [c.api(tenant["api_key"]) for c in coords]
        for c in coords:
            wait_for(lambda c=c: "connected to" in c.read_log(), timeout=60, what="connected")
        devs = []
        for i in range(N_AGENTS):
            r = apis[0].post("/devices", {"name": "dev-%d" % i, "tags": []})
            mine = rotated(urls, i)
            extra = []
            for u in mine[1:]:
                extra += ["--mqtt", u]
            a = Agent(w, mine[0], tenant["client_root"], r.json["entity_ident"],
                      trusted_keys=[pub], tags=["fleet"], name="dev-%d" % i, extra_args=extra)
            agents.append(a)
            a.start()
            devs.append(r.json["entity_ident"])
        for d in devs:
            wait_for(lambda d=d: apis[1].get("/devices/" + d).json["online"], timeout=60,
                     what="online")
        r = apis[0].put("/scripts/quick", {"source": "return 'ok'"})
        task = apis[0].post("/tasks", {"name": "quick", "script": "quick", "timeout": 60}).json
        all_jobs = []

        def send(api, label):
            t0 = time.time()
            r = api.post("/tasks/%s/jobs/tags" % task["ident"], {"tag": "fleet"})
            assert r.status == 201, r
            js = [(j["ident"], j["entity_ident"], label, t0) for j in r.json["items"]]
            all_jobs.extend(js)
            return js

        def wait_acked(api, js, timeout=130):
            def check():
                return all(api.get("/jobs/" + j[0]).json["status"] not in
                           ("pending", "transmited") for j in js)
            wait_for(check, timeout=timeout, interval=0.5, what="edge_transmitted")

        for rnd in range(2):
            js = send(apis[rnd % 2], "before-%d" % rnd)
            wait_acked(apis[1], js)
        time.sleep(float(os.environ.get("SETTLE", "8")))
        for rnd in range(2):
            js = send(apis[rnd % 2], "settled-%d" % rnd)
            wait_acked(apis[1], js)
        js = send(apis[0], "kill")
        os.kill(coords[0].proc.pid, signal.SIGKILL)
        coords[0].proc.wait()
        print("killed a at", time.time(), flush=True)
        wait_acked(apis[1], js)
        for rnd in range(ROUNDS):
            js = send(apis[1], "after-%d" % rnd)
            wait_acked(apis[1], js)
            time.sleep(1)
        # a restarted
        coords[0].proc = None
        coords[0].start()
        wait_for(lambda: "connected to" in coords[0].read_log(), timeout=60, what="a again")
        for rnd in range(ROUNDS):
            js = send(apis[rnd % 2], "restart-%d" % rnd)
            wait_acked(apis[1], js)
        slow = worst = 0
        for j, dev, label, t0 in all_jobs:
            h = hist(apis[1], j)
            d = h.get("edge_transmitted", 0) - h.get("transmited", 0)
            mark = " SLOW" if d > 5 else ""
            alog = agents[devs.index(dev)].read_log(tail=None)
            got = [l[11:23] for l in alog.splitlines() if j + ": edge_transmitted" in l]
            mark += " agent=%s" % ",".join(got)
            slow += d > 5
            worst = max(worst, d)
            print("%-10s %s dev=%s created=%.0f transmited=%s edge=%s delta=%s%s" % (
                label, j, devs.index(dev), t0, h.get("transmited"), h.get("edge_transmitted"),
                d, mark), flush=True)
        print("jobs=%d slow=%d worst=%ds" % (len(all_jobs), slow, worst), flush=True)
        for c in coords:
            log = c.read_log()
            print("---", c.log_path, "re-send lines:", flush=True)
            for line in log.splitlines():
                if "re-send" in line or "again" in line or "refused" in line:
                    print("  ", line)
    finally:
        for a in agents:
            if a.alive():
                a.stop()
        for c in coords:
            if c.alive():
                c.stop()
        cluster.stop_all()
        if not os.environ.get("RCS_KEEP_TMP"):
            shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
