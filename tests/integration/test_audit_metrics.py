#!/usr/bin/env python3
"""Integration tests of the audit log (docs/api.md, "Audit") and the Prometheus metrics
(docs/coordinator.md, "Metrics") of the real rcs-coordinator.

Audit: every state-changing request is recorded with its user, key ident, method, path,
target, status code and address, refused ones (400, 403, 404) too, reads not at all; the
key never appears; newest first, paged; filters user, target, since, until; admin only;
nothing in the API changes or deletes a record; the coordinator's own init, key create and
key revoke subcommands are recorded.

Metrics: GET /metrics on --metrics-listen parsed with Debian's python3-prometheus-client
text parser: the families, their types, histograms with cumulative buckets ending in +Inf,
counters that follow the API's requests and the jobs' statuses; no tenant or device
label; and, when Debian's prometheus is installed, one real scrape by it.

Run: RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_audit_metrics.py
"""

import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from rcs_harness import free_port, run_cli, wait_for
from rcs_fixture import CoordinatorTest


class AuditTest(CoordinatorTest):
    metrics_port = free_port()
    extra_args = ("--metrics-listen", "127.0.0.1:%d" % metrics_port)

    def audit(self, **params):
        q = "&".join("%s=%s" % kv for kv in params.items())
        r = self.admin.get("/audit" + ("?" + q if q else ""))
        self.assertStatus(r, 200)
        return r.json

    def test_changes_recorded_reads_not(self):
        before = self.audit()["total_items"]
        task = self.admin.post("/tasks", {"name": "audited", "script": "echo"}).json
        self.admin.get("/tasks/" + task["ident"])
        self.assertStatus(self.admin.patch("/tasks/" + task["ident"], {"comment": "x"}), 200)
        self.assertError(self.admin.post("/tasks", {"name": 5}), 400, "validation_failed")
        items = self.audit(per_page=3)["items"]
        self.assertEqual(self.audit()["total_items"], before + 3)
        self.assertEqual([i["status_code"] for i in items], [400, 200, 201])
        self.assertEqual([i["method"] for i in items], ["POST", "PATCH", "POST"])
        self.assertEqual(items[1]["target"], task["ident"])
        self.assertEqual(items[2]["target"], task["ident"])
        self.assertEqual(items[2]["path"], "/v3/commands/tasks")
        for i in items:
            self.assertEqual(i["user"], "admin")
            self.assertEqual(i["remote"], "127.0.0.1")
            self.assertEqual(len(i["key_ident"]), 36)
        self.assertGreater(items[0]["id"], items[1]["id"])

    def test_refused_and_roles(self):
        viewer_key = self.coord.create_key(self.client_root, "vic", "viewer")
        viewer = self.coord.api(viewer_key["api_key"])
        self.assertError(viewer.post("/devices", {"name": "x", "tags": []}), 403, "forbidden")
        self.assertError(viewer.get("/audit"), 403, "forbidden")
        rec = self.audit(user="vic")["items"]
        self.assertEqual([(r["method"], r["status_code"]) for r in rec], [("POST", 403)])
        self.assertEqual(rec[0]["key_ident"], viewer_key["ident"])
        self.assertError(self.admin.delete("/audit"), 405, "method_not_allowed")
        self.assertError(self.admin.delete("/audit/%d" % rec[0]["id"]), 404, "not_found")
        self.assertError(self.admin.get("/audit?since=yesterday"), 400, "invalid_parameter",
                         "since")
        self.assertError(self.admin.get("/audit?bogus=1"), 400, "invalid_parameter", "bogus")

    def test_keys_never_recorded(self):
        r = self.admin.post("/keys", {"user": "newbie", "role": "operator"})
        self.assertStatus(r, 201)
        key = r.json["api_key"]
        self.assertStatus(self.admin.delete("/keys/" + r.json["ident"]), 204)
        text = self.admin.get("/audit?per_page=500").raw
        self.assertNotIn(key, text)
        self.assertNotIn(self.admin_key, text)
        rec = self.audit(target=r.json["ident"])["items"]
        self.assertEqual([x["method"] for x in rec], ["DELETE", "POST"])

    def test_filters_and_paging(self):
        for n in range(3):
            self.admin.post("/devices", {"name": "page%d" % n, "tags": []})
        now = int(time.time())
        page = self.audit(per_page=2, page=1)
        self.assertEqual(len(page["items"]), 2)
        self.assertGreaterEqual(page["total_pages"], 2)
        self.assertEqual(self.audit(since=now + 100)["total_items"], 0)
        self.assertEqual(self.audit(until=0)["total_items"], 0)
        self.assertGreaterEqual(self.audit(since=now - 100, until=now + 100)["total_items"], 3)
        other = self.coord.api(self.coord.init_tenant(user="other")["api_key"])
        self.assertEqual(other.get("/audit").json["items"][0]["path"], "rcs-coordinator init")

    def test_cli_recorded(self):
        k = self.coord.create_key(self.client_root, "clikey", "viewer")
        run_cli("key", "revoke", "--db", self.coord.db, "--ident", k["ident"])
        rec = self.audit(target=k["ident"])["items"]
        self.assertEqual([(r["method"], r["path"], r["status_code"]) for r in rec],
                         [("CLI", "rcs-coordinator key revoke", 200),
                          ("CLI", "rcs-coordinator key create", 201)])
        self.assertIsNone(rec[0]["key_ident"])

    # ---- metrics ----

    def scrape(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain"))
            return r.read().decode()

    def families(self):
        return {f.name: f for f in text_string_to_metric_families(self.scrape())}

    def test_metrics_parse(self):
        self.admin.get("/tasks")
        fams = self.families()
        want = {"rcs_job_status_changes": "counter", "rcs_jobs": "gauge", "rcs_groups": "gauge",
                "rcs_job_delivery_latency_seconds": "histogram",
                "rcs_job_run_time_seconds": "histogram", "rcs_http_requests": "counter",
                "rcs_http_request_duration_seconds": "histogram",
                "rcs_mqtt_connected": "gauge", "rcs_mqtt_messages_received": "counter",
                "rcs_mqtt_messages_sent": "counter", "rcs_devices_online": "gauge",
                "rcs_outbox_backlog": "gauge", "rcs_database_size_bytes": "gauge",
                "rcs_webhook_attempts": "counter"}
        for name, kind in want.items():
            self.assertIn(name, fams)
            self.assertEqual(fams[name].type, kind, name)
        for f in fams.values():
            for s in f.samples:
                self.assertFalse({"client_root", "tenant", "entity_ident", "device"} &
                                 set(s.labels), s)
        h = fams["rcs_http_request_duration_seconds"]
        buckets = [s for s in h.samples if s.name.endswith("_bucket")]
        self.assertEqual(buckets[-1].labels["le"], "+Inf")
        counts = [s.value for s in buckets]
        self.assertEqual(counts, sorted(counts))
        count = [s.value for s in h.samples if s.name.endswith("_count")][0]
        self.assertEqual(counts[-1], count)
        gets = [s.value for s in fams["rcs_http_requests"].samples
                if s.labels == {"method": "GET", "code": "200"}]
        self.assertTrue(gets and gets[0] >= 1)
        self.assertGreater([s.value for s in fams["rcs_database_size_bytes"].samples][0], 0)
        kinds = {s.labels["kind"] for s in fams["rcs_outbox_backlog"].samples}
        self.assertEqual(kinds, {"email", "webhook"})

    def test_metrics_follow_jobs(self):
        def changes(status):
            return [s.value for s in self.families()["rcs_job_status_changes"].samples
                    if s.labels["status"] == status and s.name.endswith("_total")][0]
        before = changes("cancelled")
        task = self.admin.post("/tasks", {"name": "m", "script": "echo",
                                          "allow_offline": True}).json
        dev = self.admin.post("/devices", {"name": "m", "tags": []}).json
        job = self.admin.post("/tasks/%s/jobs" % task["ident"],
                              {"entity_ident": dev["entity_ident"]}).json
        self.admin.patch("/jobs/%s/cancel" % job["ident"])
        self.assertEqual(changes("cancelled"), before + 1)
        jobs = [s.value for s in self.families()["rcs_jobs"].samples
                if s.labels["status"] == "cancelled"]
        self.assertGreaterEqual(jobs[0], 1)

    def test_metrics_groups_by_status(self):
        def groups():
            return {s.labels["status"]: s.value
                    for s in self.families()["rcs_groups"].samples}
        before = groups()
        self.assertEqual(set(before), {"running", "paused", "completed", "aborted",
                                       "cancelled"})
        task = self.admin.post("/tasks", {"name": "g", "script": "echo",
                                          "allow_offline": True}).json
        dev = self.admin.post("/devices", {"name": "g", "tags": []}).json
        sent = self.admin.post("/tasks/%s/jobs/list" % task["ident"], {
            "ident_list": [dev["entity_ident"]], "group_name": "gauged",
            "rollout": {"max_per_minute": 1}}).json
        gid = sent["group"]["ident"]
        self.admin.patch("/groups/%s/pause" % gid)
        now = groups()
        self.assertEqual(now["paused"], before["paused"] + 1)
        self.admin.patch("/groups/%s/cancel" % gid)
        now = groups()
        self.assertEqual((now["paused"], now["cancelled"]),
                         (before["paused"], before["cancelled"] + 1))

    def test_metrics_names_only(self):
        # ?name= (repeatable): those families alone, parseable, a histogram whole
        url = ("http://127.0.0.1:%d/metrics?name=rcs_job_status_changes_total"
               "&name=rcs_http_request_duration_seconds&name=rcs_devices_online"
               % self.metrics_port)
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        self.assertEqual(set(fams), {"rcs_job_status_changes", "rcs_http_request_duration_seconds",
                                     "rcs_devices_online"})
        self.assertEqual(fams["rcs_http_request_duration_seconds"].type, "histogram")
        self.assertTrue({s.name for s in fams["rcs_http_request_duration_seconds"].samples} >=
                        {"rcs_http_request_duration_seconds_bucket",
                         "rcs_http_request_duration_seconds_count"})
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics?name=rcs_none"
                                    % self.metrics_port, timeout=10) as r:
            self.assertEqual((r.status, r.read()), (200, b""))

    def test_metrics_other_paths(self):
        base = "http://127.0.0.1:%d" % self.metrics_port
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/nope", timeout=10)
        self.assertEqual(e.exception.code, 404)

    @unittest.skipUnless(shutil.which("prometheus"), "Debian's prometheus is not installed")
    def test_real_prometheus_scrape(self):
        work = tempfile.mkdtemp(prefix="rcs-prom-")
        port = free_port()
        conf = os.path.join(work, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n"
                    "  - job_name: rcs\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % self.metrics_port)
        log = open(os.path.join(work, "prom.log"), "wb")
        proc = subprocess.Popen(["prometheus", "--config.file", conf,
                                 "--storage.tsdb.path", os.path.join(work, "data"),
                                 "--web.listen-address", "127.0.0.1:%d" % port],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            def up():
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/api/v1/query?query=up" % port,
                            timeout=2) as r:
                        return '"value":[' in r.read().decode() and \
                            self._prom_value(port, "up") == "1"
                except OSError:
                    return False
            wait_for(up, timeout=25, interval=0.5, what="prometheus scraped the coordinator")
            self.assertIsNotNone(self._prom_value(port, "rcs_database_size_bytes"))
        finally:
            proc.terminate()
            proc.wait(timeout=15)
            log.close()
            shutil.rmtree(work, ignore_errors=True)

    @staticmethod
    def _prom_value(port, query):
        import json
        with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/query?query=%s" % (port, query),
                                    timeout=2) as r:
            res = json.loads(r.read())["data"]["result"]
        return res[0]["value"][1] if res else None


if __name__ == "__main__":
    unittest.main(verbosity=2)
