#!/usr/bin/env python3
"""Integration tests of single jobs against docs/api.md (coordinator without MQTT, so jobs
stay pending): creation, variables validation, scheduling, ttl, notification lists, reads,
history, cancel, listing filters, roles and tenants."""

import time
import unittest
import uuid

from rcs_harness import is_uuid, list_all, with_query
from rcs_fixture import CoordinatorTest

# Every job field of the specification.
JOB_FIELDS = ("ident", "task", "group", "client_root", "entity_ident", "target", "comment",
              "status", "created_user", "created_at", "update_at", "scheduled_time",
              "response_time", "ttl", "payload", "response", "notification_mail_list",
              "notification_status_list")

TYPED_VARS = {
    "s": {"type": "string", "alias": "S"},
    "t": {"type": "timestamp"},
    "i": {"type": "integer"},
    "n": {"type": "number"},
    "b": {"type": "boolean"},
    "o": {"type": "string", "optional": True},
}
GOOD_VARS = {"s": "text", "t": 1732200000, "i": -3, "n": 2.5, "b": False}


class JobsTest(CoordinatorTest):
    roles = other_tenant = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        r = cls.other.post("/devices", {"name": "other-dev", "tags": []})
        assert r.status == 201, r
        cls.other_device = r.json["entity_ident"]

        r = cls.admin.post("/devices", {"name": "dev-1", "tags": []})
        assert r.status == 201, r
        cls.device = r.json["entity_ident"]
        r = cls.admin.post("/tasks", {"name": "Plain", "script": "echo"})
        assert r.status == 201, r
        cls.plain = r.json
        r = cls.admin.post("/tasks", {"name": "Typed", "script": "echo",
                                      "variables_info": TYPED_VARS})
        assert r.status == 201, r
        cls.typed = r.json

    # -- helpers --------------------------------------------------------------------------

    def post_job(self, task=None, api=None, **body):
        body.setdefault("entity_ident", self.device)
        task = task or self.plain
        return (api or self.admin).post("/tasks/%s/jobs" % task["ident"], body)

    def job(self, task=None, api=None, **body):
        r = self.post_job(task, api, **body)
        self.assertStatus(r, 201)
        return r.json

    def history(self, job_ident, **params):
        r = self.admin.get(with_query("/jobs/%s/history" % job_ident, **params))
        self.assertStatus(r, 200)
        return r.json

    # -- creation -------------------------------------------------------------------------

    def test_create_job_record(self):
        now = time.time()
        r = self.post_job(comment="now")
        self.assertStatus(r, 201)
        j = r.json
        for f in JOB_FIELDS:
            self.assertIn(f, j)
        self.assertTrue(is_uuid(j["ident"]), j["ident"])
        self.assertEqual(j["task"]["ident"], self.plain["ident"])
        self.assertEqual(j["task"]["name"], "Plain")
        self.assertEqual(j["task"]["version"], self.plain["version"])
        self.assertIsNone(j["group"])
        self.assertEqual(j["client_root"], self.client_root)
        self.assertEqual(j["entity_ident"], self.device)
        self.assertIsNone(j["target"])
        self.assertEqual(j["comment"], "now")
        self.assertEqual(j["status"], "pending")
        self.assertEqual(j["created_user"], "admin")
        self.assertLessEqual(abs(j["created_at"] - now), 5)
        self.assertLessEqual(abs(j["update_at"] - now), 5)
        self.assertIsNone(j["scheduled_time"])
        self.assertIsNone(j["response_time"])
        self.assertIsNone(j["ttl"])
        self.assertIsNone(j["payload"])
        self.assertIsNone(j["response"])
        self.assertEqual(j["notification_mail_list"], [])
        self.assertEqual(j["notification_status_list"], [])

        r = self.viewer.get("/jobs/" + j["ident"])
        self.assertStatus(r, 200)
        for f in JOB_FIELDS:
            self.assertEqual(r.json[f], j[f], f)

    def test_job_without_comment(self):
        j = self.job()
        self.assertIn(j["comment"], (None, ""))

    def test_unknown_job(self):
        for path in ("/jobs/" + str(uuid.uuid4()), "/jobs/not-a-uuid",
                     "/jobs/%s/history" % uuid.uuid4()):
            self.assertError(self.admin.get(path), 404, "not_found")
        self.assertError(self.admin.patch("/jobs/%s/cancel" % uuid.uuid4()), 404, "not_found")

    def test_unknown_task(self):
        self.assertError(self.admin.post("/tasks/%s/jobs" % uuid.uuid4(),
                                         {"entity_ident": self.device}), 404, "not_found")
        self.assertError(self.admin.post("/tasks/not-a-uuid/jobs",
                                         {"entity_ident": self.device}), 404, "not_found")
        self.assertError(self.admin.get("/tasks/%s/jobs" % uuid.uuid4()), 404, "not_found")

    # -- variables ------------------------------------------------------------------------

    def test_variables_valid(self):
        j = self.job(self.typed, variables=GOOD_VARS)
        self.assertEqual(j["variables"], GOOD_VARS)
        v = dict(GOOD_VARS, o="given", n=7, b=True)  # an integer is a number too
        j = self.job(self.typed, variables=v)
        self.assertEqual(j["variables"], v)
        self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["variables"], v)

    def test_variables_required(self):
        for name in ("s", "t", "i", "n", "b"):
            v = dict(GOOD_VARS)
            del v[name]
            with self.subTest(missing=name):
                self.assertError(self.post_job(self.typed, variables=v), 400,
                                 "validation_failed", "variables." + name)
        self.assertError(self.post_job(self.typed), 400, "validation_failed")
        self.assertError(self.post_job(self.typed, variables=[]), 400, "validation_failed",
                         "variables")

    def test_variables_wrong_type(self):
        cases = [("s", 5), ("s", None), ("s", ["x"]), ("t", "2024-11-21"), ("t", 1.5),
                 ("t", True), ("i", "1"), ("i", 1.5), ("i", True), ("n", "2.5"), ("n", False),
                 ("b", "true"), ("b", 1), ("b", None), ("o", 5)]
        for name, value in cases:
            with self.subTest(name=name, value=value):
                v = dict(GOOD_VARS)
                v[name] = value
                self.assertError(self.post_job(self.typed, variables=v), 400,
                                 "validation_failed", "variables." + name)

    def test_variables_integer_range(self):
        # the whole signed 64-bit range is kept exactly; above it json-c's unsigned values
        # are refused rather than clamped to 2^63-1
        for value in (2**63 - 1, -2**63):
            with self.subTest(value=value):
                j = self.job(self.typed, variables=dict(GOOD_VARS, i=value))
                self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["variables"]["i"],
                                 value)
        for value in (2**63, 2**64 - 1):
            with self.subTest(value=value):
                self.assertError(self.post_job(self.typed, variables=dict(GOOD_VARS, i=value)),
                                 400, "validation_failed", "variables.i")
        self.assertError(self.post_job(self.typed, variables=dict(GOOD_VARS, i=2**64)), 400,
                         "invalid_json")

    def test_variables_unknown_name(self):
        v = dict(GOOD_VARS, zzz=1)
        self.assertError(self.post_job(self.typed, variables=v), 400, "validation_failed",
                         "variables.zzz")
        self.assertError(self.post_job(variables={"x": 1}), 400, "validation_failed",
                         "variables.x")
        self.job(variables={})

    # -- scheduled_time, ttl, comment -----------------------------------------------------

    def test_scheduled_time(self):
        future = int(time.time()) + 3600
        j = self.job(scheduled_time=future)
        self.assertEqual(j["scheduled_time"], future)
        self.assertEqual(j["status"], "pending")
        self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["scheduled_time"], future)
        past = int(time.time()) - 3600
        j = self.job(scheduled_time=past)
        self.assertEqual(j["status"], "pending")
        for bad in ("tomorrow", 1.5, [], True):
            with self.subTest(scheduled_time=bad):
                self.assertError(self.post_job(scheduled_time=bad), 400, "validation_failed",
                                 "scheduled_time")

    def test_ttl(self):
        self.assertEqual(self.job(ttl=60)["ttl"], 60)
        self.assertEqual(self.job(ttl=31536000)["ttl"], 31536000)
        for bad in (0, -1, 31536001, "60", 1.5):
            with self.subTest(ttl=bad):
                self.assertError(self.post_job(ttl=bad), 400, "validation_failed", "ttl")

    def test_ttl_expires_without_a_broker(self):
        """The scheduler runs without --mqtt: a pending job whose ttl runs out is expired
        (docs/api.md), with its reason; one scheduled later keeps its ttl from then."""
        j = self.job(ttl=1)
        later = self.job(ttl=1, scheduled_time=int(time.time()) + 3600)
        deadline = time.time() + 15
        while time.time() < deadline:
            r = self.admin.get("/jobs/" + j["ident"])
            if r.json["status"] == "expired":
                break
            time.sleep(0.2)
        self.assertEqual(r.json["status"], "expired", r)
        self.assertIn("ttl", r.json["response"])
        self.assertIsInstance(r.json["response_time"], int)
        history = [h["status"] for h in list_all(self.admin, "/jobs/%s/history" % j["ident"])]
        self.assertEqual(history, ["expired", "pending", "initial"])
        self.assertEqual(self.admin.get("/jobs/" + later["ident"]).json["status"], "pending")

    def test_comment_and_unknown_fields(self):
        self.assertEqual(self.job(comment="é ünïcode ✓")["comment"], "é ünïcode ✓")
        self.assertError(self.post_job(comment=5), 400, "validation_failed", "comment")
        self.assertError(self.post_job(colour="red"), 400, "validation_failed", "colour")
        self.assertError(self.post_job(status="terminated"), 400, "validation_failed", "status")

    # -- notification lists ---------------------------------------------------------------

    def test_notification_lists(self):
        j = self.job(notification_mail_list=["ops@example.com", "x.y+z@sub.example.org"],
                     notification_status_list=["terminated", "edge_error"])
        self.assertEqual(j["notification_mail_list"], ["ops@example.com", "x.y+z@sub.example.org"])
        self.assertEqual(j["notification_status_list"], ["terminated", "edge_error"])
        r = self.admin.get("/jobs/" + j["ident"])
        self.assertEqual(r.json["notification_mail_list"], j["notification_mail_list"])
        self.assertEqual(r.json["notification_status_list"], j["notification_status_list"])

    def test_job_lists_are_the_jobs_own(self):
        r = self.admin.post("/tasks", {"name": "Notifying", "script": "echo",
                                       "notification_mail_list": ["task@example.com"],
                                       "notification_status_list": ["terminated"]})
        self.assertStatus(r, 201)
        j = self.job(r.json)
        self.assertEqual(j["notification_mail_list"], [])
        self.assertEqual(j["notification_status_list"], [])

    def test_notification_lists_invalid(self):
        cases = [
            ({"notification_status_list": ["done"]}, "notification_status_list"),
            ({"notification_status_list": "terminated"}, "notification_status_list"),
            ({"notification_status_list": [5]}, "notification_status_list"),
            ({"notification_mail_list": ["not-an-address"]}, "notification_mail_list"),
            ({"notification_mail_list": ["a@"]}, "notification_mail_list"),
            ({"notification_mail_list": ["@example.com"]}, "notification_mail_list"),
            ({"notification_mail_list": ["ops@example.com\r\nBcc: evil@example.net"]},
             "notification_mail_list"),
            ({"notification_mail_list": ["ops@example.com\n"]}, "notification_mail_list"),
            ({"notification_mail_list": "ops@example.com"}, "notification_mail_list"),
            ({"notification_mail_list": [5]}, "notification_mail_list"),
        ]
        for body, field in cases:
            with self.subTest(body=body):
                r = self.post_job(**body)
                self.assertError(r, 400, "validation_failed")
                self.assertTrue(r.json["error"]["details"]["field"].startswith(field), r.raw)

    # -- entity_ident ---------------------------------------------------------------------

    def test_entity_ident(self):
        self.assertError(self.post_job(entity_ident=str(uuid.uuid4())), 404, "not_found",
                         "entity_ident")
        self.assertError(self.post_job(entity_ident=self.other_device), 404, "not_found",
                         "entity_ident")
        for bad in ("not-a-uuid", 5, "", None):
            with self.subTest(entity_ident=bad):
                self.assertError(self.post_job(entity_ident=bad), 400, "validation_failed",
                                 "entity_ident")
        self.assertError(self.admin.post("/tasks/%s/jobs" % self.plain["ident"], {}), 400,
                         "validation_failed", "entity_ident")

    def test_inactive_task(self):
        r = self.admin.post("/tasks", {"name": "Inactive", "script": "echo", "active": "false"})
        self.assertStatus(r, 201)
        task = r.json
        self.assertError(self.post_job(task), 409, "task_inactive")
        self.assertEqual(list_all(self.admin, "/tasks/%s/jobs" % task["ident"]), [])
        r = self.admin.patch("/tasks/" + task["ident"], {"active": True})
        self.assertStatus(r, 200)
        self.job(r.json)

    # -- history and cancel ---------------------------------------------------------------

    def test_history(self):
        j = self.job()
        h = self.history(j["ident"])
        self.assertEqual((h["page"], h["per_page"], h["total_pages"], h["total_items"]),
                         (1, 500, 1, 2))
        self.assertEqual([i["status"] for i in h["items"]], ["pending", "initial"])
        for item in h["items"]:
            for f in JOB_FIELDS:
                self.assertIn(f, item)
            self.assertEqual(item["ident"], j["ident"])
            self.assertEqual(item["entity_ident"], self.device)
            self.assertEqual(item["task"]["ident"], self.plain["ident"])

        h = self.history(j["ident"], per_page=1)
        self.assertEqual((h["page"], h["per_page"], h["total_pages"], h["total_items"]),
                         (1, 1, 2, 2))
        self.assertEqual([i["status"] for i in h["items"]], ["pending"])
        h = self.history(j["ident"], per_page=1, page=2)
        self.assertEqual(h["page"], 2)
        self.assertEqual([i["status"] for i in h["items"]], ["initial"])
        h = self.history(j["ident"], per_page=1, page=3)
        self.assertEqual(h["items"], [])
        self.assertError(self.admin.get(with_query("/jobs/%s/history" % j["ident"],
                                                   per_page=501)),
                         400, "invalid_parameter", "per_page")

    def test_cancel(self):
        j = self.job()
        r = self.admin.patch("/jobs/%s/cancel" % j["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["ident"], j["ident"])
        self.assertEqual(r.json["status"], "cancelled")
        self.assertEqual(self.viewer.get("/jobs/" + j["ident"]).json["status"], "cancelled")
        self.assertError(self.admin.patch("/jobs/%s/cancel" % j["ident"]), 409, "job_terminal")
        h = self.history(j["ident"])
        self.assertEqual([i["status"] for i in h["items"]], ["cancelled", "pending", "initial"])
        self.assertEqual(h["total_items"], 3)

    def test_cancel_says_who_and_why(self):
        """A cancel records who cancelled and the optional reason, in the job's response
        and the history item of the cancel (docs/api.md "Jobs")."""
        who = self.operator.get("/whoami").json["user"]
        j = self.job()
        r = self.operator.patch("/jobs/%s/cancel" % j["ident"], {"reason": "wrong firmware"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["response"], "cancelled by %s: wrong firmware" % who)
        self.assertEqual(self.viewer.get("/jobs/" + j["ident"]).json["response"],
                         r.json["response"])
        item = self.history(j["ident"])["items"][0]
        self.assertEqual((item["status"], item["response"]), ("cancelled", r.json["response"]))
        # without a reason (no body, {}, an empty one): who
        for body in (None, {}, {"reason": ""}):
            with self.subTest(body=body):
                j = self.job()
                r = self.operator.patch("/jobs/%s/cancel" % j["ident"], body)
                self.assertStatus(r, 200)
                self.assertEqual(r.json["response"], "cancelled by %s" % who)
        j = self.job()
        for body, field in (({"reason": 5}, "reason"), ({"reason": "x" * 501}, "reason"),
                            ({"why": "x"}, "why")):
            with self.subTest(body=body):
                self.assertError(self.operator.patch("/jobs/%s/cancel" % j["ident"], body),
                                 400, "validation_failed", field)
        self.assertEqual(self.viewer.get("/jobs/" + j["ident"]).json["status"], "pending")

    def test_cancel_scheduled(self):
        j = self.job(scheduled_time=int(time.time()) + 3600)
        r = self.operator.patch("/jobs/%s/cancel" % j["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")
        self.assertEqual(r.json["scheduled_time"], j["scheduled_time"])
        self.assertGreaterEqual(r.json["update_at"], j["update_at"])

    def test_cancel_roles(self):
        j = self.job()
        self.assertError(self.viewer.patch("/jobs/%s/cancel" % j["ident"]), 403, "forbidden")
        self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["status"], "pending")
        r = self.operator.patch("/jobs/%s/cancel" % j["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["status"], "cancelled")

    # -- listings -------------------------------------------------------------------------

    def test_filters(self):
        task = self.make_task(name="Filtered")
        d1 = self.make_device(name="f1")["entity_ident"]
        d2 = self.make_device(name="f2")["entity_ident"]
        j1 = self.job(task, entity_ident=d1)
        j2 = self.job(task, entity_ident=d2)
        j3 = self.job(task, entity_ident=d1)
        other_task_job = self.job(entity_ident=d1)
        self.assertStatus(self.admin.patch("/jobs/%s/cancel" % j3["ident"]), 200)

        def idents(**params):
            return [j["ident"] for j in list_all(self.viewer, "/jobs", sort="created_at",
                                                 **params)]

        t = task["ident"]
        self.assertEqual(idents(task_ident=t), [j1["ident"], j2["ident"], j3["ident"]])
        self.assertEqual(idents(entity_ident=d1),
                         [j1["ident"], j3["ident"], other_task_job["ident"]])
        self.assertEqual(idents(task_ident=t, entity_ident=d1), [j1["ident"], j3["ident"]])
        self.assertEqual(idents(task_ident=t, status="cancelled"), [j3["ident"]])
        self.assertEqual(idents(task_ident=t, status="pending"), [j1["ident"], j2["ident"]])
        self.assertEqual(idents(task_ident=t, status="running"), [])
        for status in ("initial", "transmited", "edge_transmitted", "edge_started",
                       "edge_running", "terminated", "edge_error", "expired"):
            self.assertEqual(idents(task_ident=t, status=status), [], status)
        for j in list_all(self.viewer, "/jobs", status="pending"):
            self.assertEqual(j["status"], "pending")
        all_jobs = idents()
        for j in (j1, j2, j3, other_task_job):
            self.assertIn(j["ident"], all_jobs)

        r = self.viewer.get(with_query("/jobs", task_ident=t, per_page=2))
        self.assertStatus(r, 200)
        self.assertEqual((r.json["total_items"], r.json["total_pages"], len(r.json["items"])),
                         (3, 2, 2))

        for params, field in (({"status": "bogus"}, "status"),
                              ({"status": "PENDING"}, "status"),
                              ({"task_ident": "not-a-uuid"}, "task_ident"),
                              ({"entity_ident": "not-a-uuid"}, "entity_ident"),
                              ({"group_ident": "not-a-uuid"}, "group_ident"),
                              ({"per_page": 501}, "per_page")):
            with self.subTest(params=params):
                self.assertError(self.viewer.get(with_query("/jobs", **params)), 400,
                                 "invalid_parameter", field)

        # a wrong status names the value and the valid ones
        r = self.viewer.get("/jobs?status=finished")
        self.assertError(r, 400, "invalid_parameter", "status")
        msg = r.json["error"]["message"]
        self.assertIn("'finished'", msg)
        self.assertIn("initial, pending, transmited, edge_transmitted, edge_started, "
                      "edge_running, terminated, edge_error, cancelled, expired, or running",
                      msg)
        r = self.operator.post("/tasks/%s/jobs" % t, {
            "entity_ident": d2, "notification_status_list": ["terminated", "done"]})
        self.assertError(r, 400, "validation_failed", "notification_status_list[1]")
        self.assertIn("(not 'done')", r.json["error"]["message"])
        self.assertIn("initial, pending, transmited", r.json["error"]["message"])

        # Jobs of a task, newest first by default.
        r = self.viewer.get("/tasks/%s/jobs" % t)
        self.assertStatus(r, 200)
        self.assertEqual((r.json["page"], r.json["per_page"], r.json["total_pages"],
                          r.json["total_items"]), (1, 50, 1, 3))
        self.assertEqual([j["ident"] for j in r.json["items"]],
                         [j3["ident"], j2["ident"], j1["ident"]])
        self.assertEqual(r.json["items"][0]["status"], "cancelled")

    def test_group_filter(self):
        task = self.make_task(name="Grouped")
        d1 = self.make_device(name="g1")["entity_ident"]
        d2 = self.make_device(name="g2")["entity_ident"]
        r = self.admin.post("/tasks/%s/jobs/list" % task["ident"],
                            {"ident_list": [d1, d2], "group_name": "jobs-group"})
        self.assertStatus(r, 201)
        group = r.json["group"]
        expected = [j["ident"] for j in r.json["items"]]
        self.job(task, entity_ident=d1)  # not in the group
        got = list_all(self.viewer, "/jobs", group_ident=group["ident"])
        self.assertEqual(sorted(j["ident"] for j in got), sorted(expected))
        for j in got:
            self.assertEqual(j["group"]["name"], "jobs-group")
            self.assertEqual(j["task"]["name"], "Grouped")

    def test_concurrent_creation(self):
        import threading
        task = self.make_task(name="Concurrent")
        devs = [self.make_device(name="c%d" % i)["entity_ident"] for i in range(4)]
        results = []
        lock = threading.Lock()

        def create(i):
            r = self.post_job(task, entity_ident=devs[i % 4], comment="c%d" % i)
            with lock:
                results.append(r)

        threads = [threading.Thread(target=create, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual([r.status for r in results], [201] * 20, results)
        idents = set(r.json["ident"] for r in results)
        self.assertEqual(len(idents), 20)
        listed = list_all(self.admin, "/tasks/%s/jobs" % task["ident"])
        self.assertEqual(set(j["ident"] for j in listed), idents)
        for ident in idents:
            self.assertEqual(self.history(ident)["total_items"], 2)

    # -- roles and tenants ----------------------------------------------------------------

    def test_roles(self):
        self.assertError(self.post_job(api=self.viewer), 403, "forbidden")
        self.assertError(self.post_job(self.typed, api=self.viewer, variables=GOOD_VARS), 403,
                         "forbidden")
        j = self.job(api=self.operator, comment="by operator")
        self.assertEqual(j["created_user"], "olga")
        self.assertEqual(j["status"], "pending")
        self.assertStatus(self.viewer.get("/jobs/" + j["ident"]), 200)
        self.assertStatus(self.viewer.get("/jobs/%s/history" % j["ident"]), 200)

    def test_other_tenant(self):
        j = self.job()
        self.assertError(self.other.get("/jobs/" + j["ident"]), 404, "not_found")
        self.assertError(self.other.get("/jobs/%s/history" % j["ident"]), 404, "not_found")
        self.assertError(self.other.patch("/jobs/%s/cancel" % j["ident"]), 404, "not_found")
        self.assertError(self.other.get("/tasks/%s/jobs" % self.plain["ident"]), 404,
                         "not_found")
        self.assertError(self.other.post("/tasks/%s/jobs" % self.plain["ident"],
                                         {"entity_ident": self.other_device}), 404, "not_found")
        self.assertNotIn(j["ident"], [x["ident"] for x in list_all(self.other, "/jobs")])
        self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["status"], "pending")


if __name__ == "__main__":
    unittest.main()
