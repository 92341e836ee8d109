#!/usr/bin/env python3
"""Integration tests of bulk sends and groups against docs/api.md: POST
/tasks/<id>/jobs/list and /jobs/tags, answer {group, items, rejected}, groups and their
status counts, GET /jobs?group_ident=, and one send to 2000 devices."""

import http.client
import json
import threading
import time
import unittest
import uuid

from rcs_harness import http as http_request, is_uuid, list_all, with_query
from rcs_fixture import CoordinatorTest


class KeepAlive:
    """A persistent HTTP/1.1 connection (much faster than a new one per request)."""

    def __init__(self, port, key):
        self.port = port
        self.key = key
        self.conn = None

    def request(self, method, path, body):
        data = json.dumps(body).encode()
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self.conn.request(method, "/v3/commands" + path, body=data,
                                  headers={"api-key": self.key,
                                           "Content-Type": "application/json"})
                r = self.conn.getresponse()
                raw = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, json.loads(raw) if raw else None
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()


class BulkTest(CoordinatorTest):
    roles = other_tenant = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        r = cls.admin.post("/tasks", {"name": "Bulk task", "script": "echo"})
        assert r.status == 201, r
        cls.task = r.json

    def new_tag(self, prefix):
        return "%s-%s" % (prefix, uuid.uuid4().hex[:8])

    def devices(self, n, tags=(), api=None):
        out = []
        for i in range(n):
            r = (api or self.admin).post("/devices", {"name": "bulk-%d" % i, "tags": list(tags)})
            self.assertStatus(r, 201)
            out.append(r.json["entity_ident"])
        return out

    def send_list(self, body, task=None, api=None):
        return (api or self.admin).post("/tasks/%s/jobs/list" % (task or self.task)["ident"],
                                        body)

    def send_tag(self, body, task=None, api=None):
        return (api or self.admin).post("/tasks/%s/jobs/tags" % (task or self.task)["ident"],
                                        body)

    def jobs_of_device(self, entity_ident):
        return list_all(self.admin, "/jobs", entity_ident=entity_ident)

    # -- ident_list -----------------------------------------------------------------------

    def test_ident_list_with_rejections(self):
        d1, d2 = self.devices(2)
        unknown = str(uuid.uuid4())
        foreign = self.devices(1, api=self.other)[0]
        r = self.send_list({"ident_list": [d1, unknown, d2, foreign], "comment": "bulk"})
        self.assertStatus(r, 201)
        self.assertEqual(set(r.json), {"group", "items", "rejected"})
        self.assertIsNone(r.json["group"])
        items = r.json["items"]
        self.assertEqual(sorted(j["entity_ident"] for j in items), sorted([d1, d2]))
        for j in items:
            self.assertTrue(is_uuid(j["ident"]))
            self.assertEqual(j["status"], "pending")
            self.assertEqual(j["comment"], "bulk")
            self.assertIsNone(j["group"])
            self.assertEqual(j["task"]["ident"], self.task["ident"])
            self.assertEqual(j["created_user"], "admin")
            self.assertEqual(self.admin.get("/jobs/" + j["ident"]).json["status"], "pending")
        rejected = {x["entity_ident"]: x["error"] for x in r.json["rejected"]}
        self.assertEqual(set(rejected), {unknown, foreign})
        for err in rejected.values():
            self.assertEqual(err["code"], "not_found")
            self.assertTrue(err["message"])
        self.assertEqual(self.jobs_of_device(unknown), [])
        self.assertEqual(list_all(self.other, "/jobs", entity_ident=foreign), [])

    def test_malformed_ident_fails_whole_request(self):
        d1, d2 = self.devices(2)
        r = self.send_list({"ident_list": [d1, "not-a-uuid", d2], "group_name": "never"})
        self.assertError(r, 400, "validation_failed")
        self.assertTrue(r.json["error"]["details"]["field"].startswith("ident_list"), r.raw)
        self.assertEqual(self.jobs_of_device(d1), [])
        self.assertEqual(self.jobs_of_device(d2), [])
        self.assertNotIn("never", [g["name"] for g in list_all(self.admin, "/groups")])
        for body in ({"ident_list": []}, {"ident_list": d1}, {"ident_list": [d1, 5]}, {},
                     {"ident_list": [d1], "colour": "red"}):
            with self.subTest(body=body):
                r = self.send_list(body)
                self.assertError(r, 400, "validation_failed")
        self.assertEqual(self.jobs_of_device(d1), [])

    def test_duplicates_counted_once(self):
        d1, = self.devices(1)
        r = self.send_list({"ident_list": [d1, d1, d1]})
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["items"]), 1)
        self.assertEqual(r.json["rejected"], [])
        self.assertEqual(len(self.jobs_of_device(d1)), 1)
        h = self.admin.get("/jobs/%s/history" % r.json["items"][0]["ident"])
        self.assertStatus(h, 200)
        self.assertEqual([i["status"] for i in h.json["items"]], ["pending", "initial"])

    def test_ident_list_limit(self):
        d1, = self.devices(1)
        idents = [d1] + [str(uuid.uuid4()) for _ in range(10000)]
        r = self.send_list({"ident_list": idents})
        self.assertError(r, 400, "validation_failed", "ident_list")
        self.assertEqual(self.jobs_of_device(d1), [])
        r = self.send_list({"ident_list": idents[:10000]})
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["items"]), 1)
        self.assertEqual(len(r.json["rejected"]), 9999)

    def test_variables_validated_once(self):
        r = self.admin.post("/tasks", {"name": "Needs msg", "script": "echo",
                                       "variables_info": {"msg": {"type": "string"}}})
        self.assertStatus(r, 201)
        task = r.json
        d1, d2 = self.devices(2)
        self.assertError(self.send_list({"ident_list": [d1, d2]}, task), 400,
                         "validation_failed")
        self.assertError(self.send_list({"ident_list": [d1, d2], "variables": {"msg": 5}}, task),
                         400, "validation_failed", "variables.msg")
        self.assertEqual(list_all(self.admin, "/tasks/%s/jobs" % task["ident"]), [])
        r = self.send_list({"ident_list": [d1, d2], "variables": {"msg": "hi"}}, task)
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["items"]), 2)

    def test_inactive_task(self):
        r = self.admin.post("/tasks", {"name": "Off", "script": "echo", "active": False})
        self.assertStatus(r, 201)
        d1, = self.devices(1)
        self.assertError(self.send_list({"ident_list": [d1]}, r.json), 409, "task_inactive")
        self.assertError(self.send_tag({"tag": "any"}, r.json), 409, "task_inactive")
        self.assertEqual(self.jobs_of_device(d1), [])

    def test_unknown_task(self):
        d1, = self.devices(1)
        r = self.admin.post("/tasks/%s/jobs/list" % uuid.uuid4(), {"ident_list": [d1]})
        self.assertError(r, 404, "not_found")
        r = self.other.post("/tasks/%s/jobs/list" % self.task["ident"], {"ident_list": [d1]})
        self.assertError(r, 404, "not_found")
        r = self.other.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": "x"})
        self.assertError(r, 404, "not_found")
        self.assertEqual(self.jobs_of_device(d1), [])

    def test_roles(self):
        d1, = self.devices(1)
        self.assertError(self.send_list({"ident_list": [d1]}, api=self.viewer), 403, "forbidden")
        self.assertError(self.send_tag({"tag": "x"}, api=self.viewer), 403, "forbidden")
        self.assertEqual(self.jobs_of_device(d1), [])
        r = self.send_list({"ident_list": [d1], "group_name": "by-olga"}, api=self.operator)
        self.assertStatus(r, 201)
        self.assertEqual(r.json["items"][0]["created_user"], "olga")
        self.assertEqual(r.json["group"]["created_user"], "olga")

    # -- groups ---------------------------------------------------------------------------

    def test_group(self):
        devs = self.devices(3)
        name = "night-reboot"
        comment = 'grouped / "quoted" \\ \t\u00e9\u20ac\U0001f600 \u0001 </script>'
        r = self.send_list({"ident_list": devs, "group_name": name, "comment": comment})
        self.assertStatus(r, 201)
        group = r.json["group"]
        # the records of the answer are the jobs' records, exactly as GET answers them
        for j in r.json["items"]:
            self.assertEqual(j["comment"], comment)
            self.assertEqual(self.viewer.get("/jobs/" + j["ident"]).json, j)
        self.assertTrue(is_uuid(group["ident"]))
        self.assertEqual(group["name"], name)
        self.assertEqual(group["created_user"], "admin")
        items = r.json["items"]
        self.assertEqual(len(items), 3)
        for j in items:
            self.assertEqual(j["group"]["name"], name)
            if "ident" in j["group"]:
                self.assertEqual(j["group"]["ident"], group["ident"])

        groups = {g["ident"]: g for g in list_all(self.viewer, "/groups")}
        self.assertIn(group["ident"], groups)
        g = groups[group["ident"]]
        self.assertEqual(g["name"], name)
        self.assertEqual(g["created_user"], "admin")
        self.assertLessEqual(abs(g["created_at"] - time.time()), 5)

        r = self.viewer.get("/groups/" + group["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["ident"], group["ident"])
        self.assertEqual(r.json["name"], name)
        self.assertEqual(r.json["total"], 3)
        self.assertEqual(r.json["statuses"], {"pending": 3})

        # A job outside the group, then the listing by group.
        self.assertStatus(self.admin.post("/tasks/%s/jobs" % self.task["ident"],
                                          {"entity_ident": devs[0]}), 201)
        listed = list_all(self.viewer, "/jobs", group_ident=group["ident"])
        self.assertEqual(sorted(j["ident"] for j in listed), sorted(j["ident"] for j in items))
        for j in listed:
            self.assertEqual(j["task"]["name"], "Bulk task")
            self.assertEqual(j["group"]["name"], name)
            self.assertEqual(j["status"], "pending")
            self.assertIn(j["entity_ident"], devs)
            self.assertIn("response", j)

        self.assertStatus(self.admin.patch("/jobs/%s/cancel" % items[0]["ident"]), 200)
        r = self.viewer.get("/groups/" + group["ident"])
        self.assertEqual(r.json["total"], 3)
        self.assertEqual(r.json["statuses"], {"pending": 2, "cancelled": 1})

        # Same name twice: two groups.
        r2 = self.send_list({"ident_list": devs[:1], "group_name": name})
        self.assertStatus(r2, 201)
        self.assertNotEqual(r2.json["group"]["ident"], group["ident"])
        self.assertEqual(len(list_all(self.viewer, "/jobs", group_ident=group["ident"])), 3)

    def test_group_other_tenant_and_unknown(self):
        d1, = self.devices(1)
        r = self.send_list({"ident_list": [d1], "group_name": "private-group"})
        self.assertStatus(r, 201)
        gid = r.json["group"]["ident"]
        self.assertError(self.other.get("/groups/" + gid), 404, "not_found")
        self.assertNotIn(gid, [g["ident"] for g in list_all(self.other, "/groups")])
        self.assertEqual(list_all(self.other, "/jobs", group_ident=gid), [])
        self.assertError(self.admin.get("/groups/" + str(uuid.uuid4())), 404, "not_found")
        self.assertError(self.admin.get("/groups/not-a-uuid"), 404, "not_found")

    # -- tags -----------------------------------------------------------------------------

    def test_tag_send(self):
        tag = self.new_tag("blue")
        blue = self.devices(2, tags=[tag, "x"])
        blue += self.devices(1, tags=[tag])
        self.devices(2, tags=[self.new_tag("red")])
        self.devices(1, tags=[tag], api=self.other)
        r = self.send_tag({"tag": tag, "comment": "by tag"})
        self.assertStatus(r, 201)
        self.assertEqual(set(r.json), {"group", "items", "rejected"})
        self.assertIsNone(r.json["group"])
        self.assertEqual(r.json["rejected"], [])
        self.assertEqual(sorted(j["entity_ident"] for j in r.json["items"]), sorted(blue))
        for j in r.json["items"]:
            self.assertEqual(j["status"], "pending")
            self.assertEqual(j["comment"], "by tag")
            self.assertEqual(j["client_root"], self.client_root)

        r = self.send_tag({"tag": tag, "group_name": "blue-group"}, api=self.operator)
        self.assertStatus(r, 201)
        self.assertEqual(r.json["group"]["name"], "blue-group")
        self.assertEqual(len(r.json["items"]), 3)
        self.assertEqual(r.json["rejected"], [])
        r = self.viewer.get("/groups/" + r.json["group"]["ident"])
        self.assertEqual((r.json["total"], r.json["statuses"]), (3, {"pending": 3}))

    def test_named_group_without_jobs(self):
        """group_name makes the group even when no job comes of the send: a tag no device
        holds, or a list whose devices are all rejected (docs/api.md)."""
        tag = self.new_tag("nobody")
        r = self.send_tag({"tag": tag, "group_name": "empty-wave"})
        self.assertStatus(r, 201)
        self.assertEqual((r.json["items"], r.json["rejected"]), ([], []))
        group = r.json["group"]
        self.assertIsNotNone(group, "a named send answers its group")
        self.assertTrue(is_uuid(group["ident"]))
        self.assertEqual((group["name"], group["created_user"]), ("empty-wave", "admin"))
        g = self.viewer.get("/groups/" + group["ident"])
        self.assertStatus(g, 200)
        self.assertEqual((g.json["name"], g.json["total"], g.json["statuses"]),
                         ("empty-wave", 0, {}))
        # completed at once, and saying why it has no job
        self.assertEqual((g.json["status"], g.json["reason"]),
                         ("completed", "no device holds tag '%s'" % tag))
        self.assertIn(group["ident"], [x["ident"] for x in list_all(self.viewer, "/groups")])
        r = self.send_list({"ident_list": [str(uuid.uuid4())], "group_name": "all-rejected"})
        self.assertStatus(r, 201)
        self.assertEqual(len(r.json["rejected"]), 1)
        g = self.viewer.get("/groups/" + r.json["group"]["ident"]).json
        self.assertEqual((g["total"], g["status"]), (0, "completed"))
        self.assertEqual(g["reason"], "no job: every device of the send was rejected (1)")
        # a continuous send waits for devices to come: open, no reason
        r = self.send_tag({"tag": self.new_tag("later"), "continuous": True})
        self.assertStatus(r, 201)
        g = self.viewer.get("/groups/" + r.json["group"]["ident"]).json
        self.assertEqual((g["status"], g["reason"]), ("running", None))
        self.admin.patch("/groups/%s/cancel" % g["ident"])
        # a group that got jobs has no reason
        d, = self.devices(1)
        r = self.send_list({"ident_list": [d], "group_name": "one"})
        g = self.viewer.get("/groups/" + r.json["group"]["ident"]).json
        self.assertEqual((g["total"], g["reason"]), (1, None))
        # without group_name, still no group
        r = self.send_tag({"tag": self.new_tag("nobody")})
        self.assertStatus(r, 201)
        self.assertIsNone(r.json["group"])

    def test_tag_validation(self):
        self.assertError(self.send_tag({}), 400, "validation_failed", "tag")
        self.assertError(self.send_tag({"tag": 5}), 400, "validation_failed", "tag")
        self.assertError(self.send_tag({"tag": ["a"]}), 400, "validation_failed", "tag")

    # -- scale ----------------------------------------------------------------------------

    def test_bulk_2000_devices_by_tag(self):
        tag = self.new_tag("fleet")
        n = 2000
        created = []
        lock = threading.Lock()
        errors = []

        def worker(count):
            c = KeepAlive(self.coord.port, self.admin_key)
            try:
                for i in range(count):
                    status, body = c.request("POST", "/devices", {"name": "fleet", "tags": [tag]})
                    if status != 201:
                        errors.append((status, body))
                        return
                    with lock:
                        created.append(body["entity_ident"])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(n // 4,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(set(created)), n)

        t0 = time.time()
        r = http_request("POST", self.admin.base + "/tasks/%s/jobs/tags" % self.task["ident"],
                         body={"tag": tag, "group_name": "fleet-group"},
                         headers={"api-key": self.admin_key}, timeout=120)
        elapsed = time.time() - t0
        self.assertStatus(r, 201)
        self.assertEqual(r.json["rejected"], [])
        self.assertEqual(len(r.json["items"]), n)
        self.assertEqual(set(j["entity_ident"] for j in r.json["items"]), set(created))
        gid = r.json["group"]["ident"]
        expected = set(j["ident"] for j in r.json["items"])
        self.assertEqual(len(expected), n)

        seen = []
        for page in (1, 2, 3, 4, 5):
            p = self.viewer.get(with_query("/jobs", group_ident=gid, page=page, per_page=500))
            self.assertStatus(p, 200)
            self.assertEqual((p.json["total_items"], p.json["total_pages"]), (n, 4))
            self.assertEqual(len(p.json["items"]), 500 if page <= 4 else 0)
            seen += [j["ident"] for j in p.json["items"]]
        self.assertEqual(len(seen), n)
        self.assertEqual(set(seen), expected)
        g = self.viewer.get("/groups/" + gid).json
        self.assertEqual((g["total"], g["statuses"]), (n, {"pending": n}))
        r = self.viewer.get(with_query("/devices", tag=tag, per_page=1))
        self.assertEqual(r.json["total_items"], n)
        print("\nbulk of %d by tag: %.2f s" % (n, elapsed))


if __name__ == "__main__":
    unittest.main()
