#!/usr/bin/env python3
"""Integration tests of the device inventory (/devices), API keys (/keys, the key CLI)
and authentication/roles, against docs/api.md."""

import os
import time
import unittest
import uuid

from rcs_harness import (http, is_uuid, list_all, on_postgres, run_cli,
                         with_query)
from rcs_fixture import CoordinatorTest

DEVICE_FIELDS = ("entity_ident", "client_root", "name", "tags", "reported_tags", "online",
                 "last_seen", "agent_version", "created_at", "update_at")
KEY_FIELDS = ("ident", "user", "role", "client_root", "created_at", "revoked_at")


class DevicesTest(CoordinatorTest):
    roles = other_tenant = True

    def tag(self, prefix="t"):
        return "%s-%s" % (prefix, uuid.uuid4().hex[:8])

    def listed(self, api=None, **params):
        return [d["entity_ident"] for d in list_all(api or self.admin, "/devices", **params)]

    def test_create_and_read(self):
        tags = ["lab", "x:y/z.1-_A"]
        r = self.admin.post("/devices", {"name": "router-1", "tags": tags})
        self.assertStatus(r, 201)
        d = r.json
        for f in DEVICE_FIELDS:
            self.assertIn(f, d)
        self.assertTrue(is_uuid(d["entity_ident"]), d)
        self.assertEqual(d["client_root"], self.client_root)
        self.assertEqual(d["name"], "router-1")
        self.assertEqual(d["tags"], tags)
        self.assertIn(d["reported_tags"], ([], None))
        self.assertIs(d["online"], False)
        self.assertLessEqual(abs(d["created_at"] - time.time()), 5)
        r = self.viewer.get("/devices/" + d["entity_ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json, d)
        d2 = self.make_device(name="router-2")
        self.assertNotEqual(d2["entity_ident"], d["entity_ident"])
        self.assertEqual(d2["tags"], [])

    def test_unknown_device(self):
        self.assertError(self.admin.get("/devices/" + str(uuid.uuid4())), 404, "not_found")
        self.assertError(self.admin.get("/devices/not-a-uuid"), 404, "not_found")
        self.assertError(self.admin.patch("/devices/" + str(uuid.uuid4()), {"name": "x"}),
                         404, "not_found")
        self.assertError(self.admin.delete("/devices/" + str(uuid.uuid4())), 404, "not_found")

    def test_list_filters(self):
        tag = self.tag("lab")
        a = self.make_device(name="a", tags=[tag, "other"])["entity_ident"]
        b = self.make_device(name="b", tags=[tag])["entity_ident"]
        c = self.make_device(name="c", tags=[self.tag("x")])["entity_ident"]
        self.assertEqual(self.listed(tag=tag), [a, b])
        everything = self.listed()
        for d in (a, b, c):
            self.assertIn(d, everything)
        # Without MQTT no device is online.
        self.assertEqual(self.listed(online="false"), everything)
        self.assertEqual(self.listed(online="true"), [])
        self.assertEqual(self.listed(tag=tag, online="false"), [a, b])
        self.assertEqual(self.listed(tag=self.tag("none")), [])
        r = self.viewer.get(with_query("/devices", tag=tag, per_page=1))
        self.assertStatus(r, 200)
        self.assertEqual((r.json["total_items"], r.json["total_pages"], len(r.json["items"])),
                         (2, 2, 1))
        self.assertError(self.admin.get(with_query("/devices", online="maybe")), 400,
                         "invalid_parameter", "online")
        self.assertError(self.admin.get(with_query("/devices", per_page=501)), 400,
                         "invalid_parameter", "per_page")

    def test_patch(self):
        old, new = self.tag("old"), self.tag("new")
        d = self.make_device(name="before", tags=[old])
        path = "/devices/" + d["entity_ident"]
        r = self.admin.patch(path, {"tags": [new, "lab"]})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["tags"], [new, "lab"])
        self.assertEqual(r.json["name"], "before")
        r = self.admin.patch(path, {"name": "after"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["name"], "after")
        self.assertEqual(r.json["tags"], [new, "lab"])
        r = self.admin.get(path)
        self.assertEqual((r.json["name"], r.json["tags"]), ("after", [new, "lab"]))
        self.assertEqual(r.json["entity_ident"], d["entity_ident"])
        self.assertEqual(self.listed(tag=old), [])
        self.assertEqual(self.listed(tag=new), [d["entity_ident"]])
        self.assertError(self.admin.patch(path, {"entity_ident": str(uuid.uuid4())}), 400,
                         "validation_failed", "entity_ident")
        self.assertError(self.admin.patch(path, {"tags": ["bad tag"]}), 400, "validation_failed")
        self.assertEqual(self.admin.get(path).json["tags"], [new, "lab"])

    def test_delete(self):
        d = self.make_device(name="doomed")
        path = "/devices/" + d["entity_ident"]
        task = self.make_task(name="for deleted device")
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": d["entity_ident"]})
        self.assertStatus(r, 201)
        job = r.json
        r = self.admin.delete(path)
        self.assertStatus(r, 204)
        self.assertError(self.admin.get(path), 404, "not_found")
        self.assertError(self.admin.delete(path), 404, "not_found")
        self.assertNotIn(d["entity_ident"], self.listed())
        # Its jobs stay.
        r = self.admin.get("/jobs/" + job["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["entity_ident"], d["entity_ident"])
        # No new jobs for it.
        self.assertError(self.admin.post("/tasks/%s/jobs" % task["ident"],
                                         {"entity_ident": d["entity_ident"]}), 404, "not_found")

    def test_bad_tags(self):
        cases = [["has space"], [""], ["x" * 65], ["ok", 5], "lab", ["semi;colon"],
                 ["t%d" % i for i in range(65)], [None]]
        for tags in cases:
            with self.subTest(tags=tags):
                r = self.admin.post("/devices", {"name": "bad", "tags": tags})
                self.assertError(r, 400, "validation_failed")
                self.assertTrue(r.json["error"]["details"]["field"].startswith("tags"), r.raw)
        ok = ["x" * 64] + ["t%d" % i for i in range(63)]
        self.make_device(name="limits", tags=ok)
        self.assertError(self.admin.post("/devices", {"name": "x", "tags": [], "online": True}),
                         400, "validation_failed", "online")

    def test_roles_and_tenants(self):
        d = self.make_device(name="roles")
        path = "/devices/" + d["entity_ident"]
        for api in (self.operator, self.viewer):
            self.assertError(api.post("/devices", {"name": "x", "tags": []}), 403, "forbidden")
            self.assertError(api.patch(path, {"name": "x"}), 403, "forbidden")
            self.assertError(api.delete(path), 403, "forbidden")
            self.assertStatus(api.get(path), 200)
            self.assertStatus(api.get("/devices"), 200)
        self.assertError(self.other.get(path), 404, "not_found")
        self.assertError(self.other.patch(path, {"name": "x"}), 404, "not_found")
        self.assertError(self.other.delete(path), 404, "not_found")
        self.assertNotIn(d["entity_ident"], self.listed(self.other))
        self.assertEqual(self.admin.get(path).json["name"], "roles")


class KeysTest(CoordinatorTest):
    roles = other_tenant = True

    def new_key(self, user, role, api=None):
        r = (api or self.admin).post("/keys", {"user": user, "role": role})
        self.assertStatus(r, 201)
        return r.json

    def test_create_list_revoke(self):
        k = self.new_key("bob", "operator")
        for f in KEY_FIELDS + ("api_key",):
            self.assertIn(f, k)
        self.assertTrue(is_uuid(k["ident"]))
        self.assertIsInstance(k["api_key"], str)
        self.assertGreaterEqual(len(k["api_key"]), 16)
        self.assertEqual((k["user"], k["role"], k["client_root"]),
                         ("bob", "operator", self.client_root))
        self.assertIsNone(k["revoked_at"])
        self.assertLessEqual(abs(k["created_at"] - time.time()), 5)

        r = self.admin.get("/keys")
        self.assertStatus(r, 200)
        self.assertNotIn(k["api_key"], r.raw)
        self.assertNotIn(self.admin_key, r.raw)
        keys = {x["ident"]: x for x in list_all(self.admin, "/keys")}
        self.assertIn(k["ident"], keys)
        self.assertNotIn("api_key", keys[k["ident"]])
        self.assertEqual((keys[k["ident"]]["user"], keys[k["ident"]]["role"]), ("bob", "operator"))

        # Works at once, with its role.
        bob = self.coord.api(k["api_key"])
        self.assertStatus(bob.get("/tasks"), 200)
        self.assertError(bob.post("/tasks", {"name": "x", "script": "echo"}), 403, "forbidden")

        self.assertStatus(self.admin.delete("/keys/" + k["ident"]), 204)
        self.assertError(bob.get("/tasks"), 401, "unauthorized")
        self.assertError(bob.get("/keys"), 401, "unauthorized")
        listed = {x["ident"]: x for x in list_all(self.admin, "/keys")}
        if k["ident"] in listed:
            self.assertIsNotNone(listed[k["ident"]]["revoked_at"])

    def test_keys_stored_hashed(self):
        import subprocess
        k = self.new_key("ivan", "viewer")
        cli = self.coord.create_key(self.client_root, "judy", "viewer")
        if on_postgres():
            import pg_server
            dump_cmd = [os.path.join(pg_server.shared().bindir, "pg_dump"), self.coord.db]
        else:
            dump_cmd = ["sqlite3", self.coord.db, ".dump"]
        p = subprocess.run(dump_cmd, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        dump = p.stdout
        self.assertIn(b"ivan", dump)
        for key in (k["api_key"], cli["api_key"], self.admin_key):
            self.assertNotIn(key.encode(), dump)

    def test_admin_key_from_api(self):
        k = self.new_key("carol", "admin")
        carol = self.coord.api(k["api_key"])
        r = carol.post("/tasks", {"name": "by carol", "script": "echo"})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["created_user"], "carol")
        v = self.new_key("dave", "viewer", api=carol)
        self.assertEqual(v["role"], "viewer")
        dave = self.coord.api(v["api_key"])
        self.assertStatus(dave.get("/tasks/" + r.json["ident"]), 200)
        self.assertError(dave.post("/keys", {"user": "x", "role": "admin"}), 403, "forbidden")

    def test_key_validation(self):
        for body, field in (({"user": "x", "role": "root"}, "role"),
                            ({"user": "x"}, "role"),
                            ({"role": "viewer"}, "user"),
                            ({"user": "", "role": "viewer"}, "user"),
                            ({"user": 5, "role": "viewer"}, "user"),
                            ({"user": "x", "role": "viewer", "client_root": str(uuid.uuid4())},
                             "client_root")):
            with self.subTest(body=body):
                self.assertError(self.admin.post("/keys", body), 400, "validation_failed", field)

    def test_key_endpoints_need_admin(self):
        k = self.new_key("erin", "viewer")
        for api in (self.operator, self.viewer):
            self.assertError(api.post("/keys", {"user": "x", "role": "admin"}), 403, "forbidden")
            self.assertError(api.delete("/keys/" + k["ident"]), 403, "forbidden")
        self.assertStatus(self.coord.api(k["api_key"]).get("/tasks"), 200)

    def test_other_tenant_keys(self):
        k = self.new_key("frank", "viewer")
        self.assertError(self.other.delete("/keys/" + k["ident"]), 404, "not_found")
        self.assertNotIn(k["ident"], [x["ident"] for x in list_all(self.other, "/keys")])
        self.assertStatus(self.coord.api(k["api_key"]).get("/tasks"), 200)
        self.assertError(self.admin.delete("/keys/" + str(uuid.uuid4())), 404, "not_found")

    def test_cli_keys_take_effect_while_serving(self):
        k = self.coord.create_key(self.client_root, "gina", "viewer")
        self.assertTrue(is_uuid(k["ident"]))
        gina = self.coord.api(k["api_key"])
        self.assertStatus(gina.get("/tasks"), 200)
        self.assertIn(k["ident"], [x["ident"] for x in list_all(self.admin, "/keys")])
        run_cli("key", "revoke", "--db", self.coord.db, "--ident", k["ident"])
        self.assertError(gina.get("/tasks"), 401, "unauthorized")
        # A tenant made by init while serving works at once too.
        t = self.coord.init_tenant(user="henry")
        self.assertStatus(self.coord.api(t["api_key"]).get("/tasks"), 200)

    def test_unauthenticated(self):
        for path in ("/tasks", "/jobs", "/devices", "/keys", "/groups", "/scripts",
                     "/tasks/" + str(uuid.uuid4())):
            with self.subTest(path=path):
                self.assertError(http("GET", self.admin.base + path), 401, "unauthorized")
                self.assertError(self.coord.api("no-such-key").get(path), 401, "unauthorized")
                self.assertError(self.coord.api("").get(path), 401, "unauthorized")
        self.assertError(self.coord.api(self.admin_key + "x").get("/tasks"), 401,
                         "unauthorized")
        self.assertError(http("POST", self.admin.base + "/tasks",
                              body={"name": "unauth", "script": "echo"}), 401, "unauthorized")
        self.assertError(self.coord.api("no-such-key").post("/devices",
                                                           {"name": "unauth", "tags": []}),
                         401, "unauthorized")
        self.assertNotIn("unauth",
                         [t["name"] for t in list_all(self.admin, "/tasks", hide="true")])
        self.assertNotIn("unauth", [d["name"] for d in list_all(self.admin, "/devices")])

    def test_roles_on_representative_endpoints(self):
        r = self.admin.post("/tasks", {"name": "roles", "script": "echo"})
        self.assertStatus(r, 201)
        task = r.json
        r = self.admin.post("/devices", {"name": "roles", "tags": []})
        self.assertStatus(r, 201)
        dev = r.json["entity_ident"]
        r = self.admin.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": dev})
        self.assertStatus(r, 201)
        job = r.json

        viewer_denied = [
            ("POST", "/tasks", {"name": "x", "script": "echo"}),
            ("PATCH", "/tasks/" + task["ident"], {"comment": "x"}),
            ("DELETE", "/tasks/" + task["ident"], None),
            ("PUT", "/scripts/x", {"source": "return 1"}),
            ("POST", "/devices", {"name": "x", "tags": []}),
            ("DELETE", "/devices/" + dev, None),
            ("POST", "/keys", {"user": "x", "role": "viewer"}),
            ("POST", "/tasks/%s/jobs" % task["ident"], {"entity_ident": dev}),
            ("POST", "/tasks/%s/jobs/list" % task["ident"], {"ident_list": [dev]}),
            ("POST", "/tasks/%s/jobs/tags" % task["ident"], {"tag": "x"}),
            ("PATCH", "/jobs/%s/cancel" % job["ident"], None),
        ]
        for method, path, body in viewer_denied:
            with self.subTest(role="viewer", method=method, path=path):
                self.assertError(self.viewer.request(method, path, body=body), 403, "forbidden")
        for method, path, body in viewer_denied[:7]:
            with self.subTest(role="operator", method=method, path=path):
                self.assertError(self.operator.request(method, path, body=body), 403,
                                 "forbidden")
        for path in ("/tasks", "/tasks/" + task["ident"], "/jobs", "/jobs/" + job["ident"],
                     "/jobs/%s/history" % job["ident"], "/devices", "/devices/" + dev,
                     "/groups", "/scripts", "/scripts/echo", "/tasks/%s/jobs" % task["ident"]):
            with self.subTest(role="viewer", path=path):
                self.assertStatus(self.viewer.get(path), 200)
        # Nothing changed.
        self.assertEqual(self.admin.get("/tasks/" + task["ident"]).json, task)
        self.assertEqual(self.admin.get("/jobs/" + job["ident"]).json["status"], "pending")
        self.assertStatus(self.admin.get("/devices/" + dev), 200)
        self.assertError(self.admin.get("/scripts/x"), 404, "not_found")
        # Operators do create and cancel jobs.
        r = self.operator.post("/tasks/%s/jobs" % task["ident"], {"entity_ident": dev})
        self.assertStatus(r, 201)
        self.assertStatus(self.operator.patch("/jobs/%s/cancel" % r.json["ident"]), 200)


if __name__ == "__main__":
    unittest.main()
