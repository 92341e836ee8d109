#!/usr/bin/env python3
"""Webhook benchmark (BENCHMARKS.md, "Webhooks at fleet speed"): the deliveries of one tag
send to a fleet of simulated devices, to a local receiver.

Not part of the normal test run; never asserts on timings. Run it with

    cmake --build build --target bench-webhooks
    # or: RCS_BIN_DIR=build/bin /usr/bin/python3 tests/bench/bench_webhooks.py --devices 1000

Per size N, on a fresh mosquitto and a fresh copy of a prepared SQLite database (one tenant,
N devices holding the tag "fleet", a task on the stock echo script):

  receiver: Python's ThreadingHTTPServer on 127.0.0.1 answering 200 at once (after
      --receiver-ms milliseconds if given), recording when each delivery came and, per job,
      the statuses in the order they came.
  baseline: the receiver's own rate: --clients plain keep-alive HTTP clients (http.client)
      POSTing bodies of a delivery's size in a loop for --baseline-s seconds. What the
      receiver can take on this machine; the coordinator's rate is reported as a ratio of it.
  reference: rcs-coordinator serve --mqtt on SQLite, fleetsim connects the N devices, one
      tag send without a webhook: the time until its group ended.
  run: then a webhook on every job and group status (--webhook-allow-net 127.0.0.1/32)
      to the receiver, and the same tag send again; the
      group's end event (seen on the broker) is the send's last status change. Measured:
      the deliveries (the queued backlog of rcs_outbox_backlog{kind="webhook"} back to 0),
      deliveries/s from the first to the last, the drain time (the last delivery after the
      group's end event), the coordinator's CPU, and per-job order (each job's statuses as
      they came equal to its history's).

Prints every size's result as JSON (--json FILE writes them too).
"""

import argparse
import http.client
import http.server
import json
import os
import resource
import socketserver
import threading
import time

from benchlib import (Fleetsim, GroupWatch, copy_db, h, log, machine,  # noqa: E402
                      prepare_tenant, total, wait_online)

TAG = "fleet"


def raise_nofile():
    """Children (mosquitto, fleetsim) inherit this: one descriptor per device each."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Receiver:
    """An HTTP receiver on 127.0.0.1: each POST's arrival time, and each job's statuses in
    the order they came (job.status deliveries)."""

    def __init__(self, delay_ms=0):
        self.port = h.free_port()
        self.url = "http://127.0.0.1:%d/hook" % self.port
        self.lock = threading.Lock()
        self.times = []
        self.per_job = {}
        self.groups = []
        self.parse = True
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                t = time.monotonic()
                # recorded before the answer: the job's next delivery comes only after it
                doc = json.loads(body) if outer.parse else None
                with outer.lock:
                    outer.times.append(t)
                    if doc is None:
                        pass
                    elif doc["type"] == "job.status":
                        outer.per_job.setdefault(doc["data"]["ident"], []).append(
                            doc["data"]["status"])
                    else:
                        outer.groups.append(doc["data"]["status"])
                if delay_ms:
                    time.sleep(delay_ms / 1000.0)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self.server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self):
        with self.lock:
            self.times, self.per_job, self.groups = [], {}, []

    def count(self):
        with self.lock:
            return len(self.times)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def baseline(recv, clients, seconds, body):
    """Requests a second the receiver answers to `clients` plain keep-alive clients."""
    recv.reset()
    recv.parse = False
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def loop(i):
        c = http.client.HTTPConnection("127.0.0.1", recv.port, timeout=10)
        while time.monotonic() < stop:
            c.request("POST", "/baseline", body=body,
                      headers={"Content-Type": "application/json"})
            c.getresponse().read()
            counts[i] += 1
        c.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    recv.parse = True
    recv.reset()
    return sum(counts) / took


def backlog(port):
    """rcs_outbox_backlog{kind="webhook"} of the coordinator's metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith('rcs_outbox_backlog{kind="webhook"}'):
            return int(float(line.split()[-1]))
    raise RuntimeError("no webhook backlog in /metrics")


def tag_send(api, port, task, group_name, timeout):
    """POST /tasks/<task>/jobs/tags with a timeout of the benchmark's (a 10,000-device send
    with a webhook records 20,000 deliveries in its transaction). (group ident, seconds)."""
    body = json.dumps({"tag": TAG, "group_name": group_name}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v3/commands/tasks/%s/jobs/tags" % task, body=body,
              headers={"api-key": api.key, "Content-Type": "application/json"})
    resp = c.getresponse()
    raw = resp.read()
    took = time.monotonic() - t0
    c.close()
    if resp.status != 201:
        raise RuntimeError("tag send: %d %s" % (resp.status, raw[:300]))
    return json.loads(raw)["group"]["ident"], took


def cpu_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(workdir, n, args):
    log("preparing %d devices" % n)
    prep = prepare_tenant(workdir, n, tag=TAG)
    db = os.path.join(workdir, "run-%d.db" % n)
    copy_db(prep["db"], db)
    broker = h.Mosquitto(workdir, persistence=False, extra_conf="max_connections -1\n"
                         "max_queued_messages %d\n" % max(100000, 5 * n)).start()
    recv = Receiver(args.receiver_ms)
    mport = h.free_port()
    coord = h.Coordinator(workdir, db=db, extra_args=(
        "--mqtt", broker.url, "--webhook-allow-net", "127.0.0.1/32",
        "--metrics-listen", "127.0.0.1:%d" % mport, *args.coord_arg))
    sim = watch = None
    try:
        coord.start()
        api = coord.api(prep["api_key"])
        sim = Fleetsim(workdir, prep["idents"], prep["client_root"], broker.port)
        sim.wait_ready(args.timeout)
        wait_online(api, n, args.timeout)
        time.sleep(0.5)
        watch = GroupWatch(broker.port, prep["client_root"])
        # the reference: the same send without a webhook (its status changes record no
        # delivery, the sender has nothing to do)
        t_ref0 = time.monotonic()
        ref_group, ref_post = tag_send(api, coord.port, prep["task"], "ref", args.timeout)
        t_ref = watch.wait(ref_group, args.timeout)
        if t_ref is None:
            raise RuntimeError("the reference group did not end within %ds" % args.timeout)
        log("reference: the send without a webhook ended after %.2f s" % (t_ref - t_ref0))
        r = api.post("/webhooks", {"url": recv.url, "events": ["job.status", "group.status"]})
        if r.status != 201:
            raise RuntimeError("POST /webhooks: %r" % r)
        # a delivery's body is about the size of a job's record
        one = api.post("/tasks/%s/jobs" % prep["task"], {"entity_ident": prep["idents"][0]})
        body = json.dumps({"id": "x" * 36, "type": "job.status", "ts": 0,
                           "data": one.json}).encode()
        base = baseline(recv, args.clients, args.baseline_s, body)
        log("baseline: the receiver answers %.0f requests/s to %d plain clients" % (
            base, args.clients))
        while backlog(mport) > 0:
            time.sleep(0.1)
        recv.reset()
        cpu0 = cpu_of(coord.proc.pid)
        t0 = time.monotonic()
        group, post = tag_send(api, coord.port, prep["task"], "wh", args.timeout)
        if args.post_only:
            res = {"devices": n, "post_s": round(post, 2),
                   "post_without_webhook_s": round(ref_post, 2)}
            log(json.dumps(res))
            return res
        t_end = watch.wait(group, args.timeout)
        if t_end is None:
            raise RuntimeError("the group did not end within %ds" % args.timeout)
        deadline = time.monotonic() + args.timeout
        while backlog(mport) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("deliveries not drained within %ds" % args.timeout)
            time.sleep(0.2)
        cpu1 = cpu_of(coord.proc.pid)
        with recv.lock:
            times = sorted(recv.times)
            per_job = dict(recv.per_job)
            groups = list(recv.groups)
        delivered = len(times)
        first, last = times[0], times[-1]
        # per-job order: each job's statuses as they came against its history's (a sample)
        bad = 0
        sample = list(per_job)[:args.order_sample]
        for j in sample:
            hist = api.get("/jobs/%s/history?per_page=100&sort=update_at" % j)
            want = [x["status"] for x in hist.json["items"]]
            if want != per_job[j]:
                bad += 1
                if bad <= 3:
                    log("job %s: history %s, deliveries %s" % (j, want, per_job[j]))
        terminated = total(api, "/jobs?group_ident=%s&status=terminated&per_page=1" % group)
        res = {
            "devices": n, "jobs_terminated": terminated,
            "deliveries": delivered, "job_deliveries": sum(len(v) for v in per_job.values()),
            "group_deliveries": groups,
            "send_to_group_end_s": round(t_end - t0, 2),
            "send_without_webhook_s": round(t_ref - t_ref0, 2),
            "post_s": round(post, 2), "post_without_webhook_s": round(ref_post, 2),
            "first_delivery_s": round(first - t0, 2),
            "last_delivery_s": round(last - t0, 2),
            "deliveries_per_s": round(delivered / max(last - first, 1e-3), 1),
            "drain_after_last_change_s": round(max(last - t_end, 0), 2),
            "receiver_baseline_per_s": round(base, 1),
            "ratio_to_baseline": round(delivered / max(last - first, 1e-3) / base, 2),
            "coordinator_cpu_s": round(cpu1 - cpu0, 2),
            "order_checked_jobs": len(sample), "order_violations": bad,
        }
        log(json.dumps(res))
        return res
    finally:
        if watch:
            watch.close()
        if sim:
            sim.stop()
        coord.stop()
        broker.stop()
        recv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, action="append",
                    help="fleet size (repeatable; default 1000)")
    ap.add_argument("--receiver-ms", type=float, default=0,
                    help="the receiver's delay before answering")
    ap.add_argument("--clients", type=int, default=16, help="clients of the baseline")
    ap.add_argument("--baseline-s", type=float, default=3.0)
    ap.add_argument("--order-sample", type=int, default=1000,
                    help="jobs whose order of deliveries is checked against their history")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--coord-arg", action="append", default=[],
                    help="an extra argument of rcs-coordinator serve (repeatable)")
    ap.add_argument("--post-only", action="store_true",
                    help="only the send's POST with and without the webhook, no drain")
    ap.add_argument("--json", help="write the results there too")
    args = ap.parse_args()
    raise_nofile()
    out = {"machine": machine(), "runs": []}
    import tempfile
    for n in args.devices or [1000]:
        with tempfile.TemporaryDirectory(prefix="rcs-bench-webhooks-") as wd:
            out["runs"].append(run(wd, n, args))
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
