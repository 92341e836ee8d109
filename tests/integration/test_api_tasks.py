#!/usr/bin/env python3
"""Integration tests of /v3/commands/tasks against docs/api.md: create, read, list, PUT,
PATCH, DELETE, defaults, active/public/hide, validation, paging, roles, tenants."""

import hashlib
import time
import unittest
import uuid

from rcs_harness import is_uuid, list_all, with_query
from rcs_fixture import CoordinatorTest

# Every task field of the specification, plus the ones docs/api.md adds.
TASK_FIELDS = ("version", "ident", "client_root", "created_user", "update_user", "name",
               "script", "variables_info", "constants", "comment", "active", "public", "hide",
               "allow_offline", "created_at", "update_at", "notification_mail_list",
               "notification_status_list", "timeout", "script_sha256", "signature")

PLATFORM_FIELDS = {
    "ident": "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    "version": 7,
    "client_root": "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
    "created_user": "mallory",
    "created_at": 1700000000,
    "update_user": "mallory",
    "update_at": 1700000000,
    "script_sha256": "0" * 64,
}


class TasksTest(CoordinatorTest):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin2 = cls.role_api("admin2", "admin")
        cls.operator = cls.role_api("olga", "operator")
        cls.viewer = cls.role_api("vera", "viewer")
        # The creator of every task below is "admin"; this is the same user with a weaker role.
        cls.creator_as_operator = cls.role_api("admin", "operator")
        r = cls.admin.get("/scripts/echo")
        assert r.status == 200, r
        cls.echo_sha256 = hashlib.sha256(r.json["source"].encode("utf-8")).hexdigest()

    # -- helpers --------------------------------------------------------------------------

    def create(self, api=None, expect=201, **fields):
        body = {"name": "task", "script": "echo"}
        body.update(fields)
        r = (api or self.admin).post("/tasks", body)
        self.assertStatus(r, expect)
        return r.json

    def listed(self, api, **params):
        return [t["ident"] for t in list_all(api, "/tasks", **params)]

    def assertTimeNow(self, t, slack=5):
        self.assertIsInstance(t, int)
        self.assertLessEqual(abs(t - time.time()), slack, t)

    # -- create / read --------------------------------------------------------------------

    def test_create_defaults_and_read(self):
        t = self.create(name="Defaults")
        for f in TASK_FIELDS:
            self.assertIn(f, t)
        self.assertEqual(t["version"], 1)
        self.assertTrue(is_uuid(t["ident"]), t["ident"])
        self.assertEqual(t["ident"][14], "7", "idents are UUID version 7: %s" % t["ident"])
        self.assertEqual(t["client_root"], self.client_root)
        self.assertEqual(t["created_user"], "admin")
        self.assertIsNone(t["update_user"])
        self.assertEqual(t["name"], "Defaults")
        self.assertEqual(t["script"], "echo")
        self.assertEqual(t["variables_info"], {})
        self.assertEqual(t["constants"], {})
        self.assertEqual(t["active"], "true")
        self.assertIs(t["public"], True)
        self.assertIs(t["hide"], False)
        self.assertIs(t["allow_offline"], False)
        self.assertEqual(t["timeout"], 300)
        self.assertIsNone(t["signature"])
        self.assertEqual(t["notification_mail_list"], [])
        self.assertEqual(t["notification_status_list"], [])
        self.assertEqual(t["script_sha256"], self.echo_sha256)
        self.assertTimeNow(t["created_at"])
        self.assertTimeNow(t["update_at"])

        r = self.admin.get("/tasks/" + t["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json, t)
        self.assertIn(t["ident"], self.listed(self.admin))

    def test_create_all_fields_echoed(self):
        body = {
            "name": "Full", "script": "echo", "comment": "a comment",
            "variables_info": {"message": {"type": "string", "alias": "Message",
                                           "description": "what to echo", "optional": True}},
            "constants": {"a": "x", "n": 5, "nested": {"k": "v"}},
            "active": "true", "public": True, "hide": False, "allow_offline": True,
            "timeout": 60,
            "notification_mail_list": ["ops@example.com"],
            "notification_status_list": ["terminated", "edge_error"],
        }
        t = self.create(**body)
        for k, v in body.items():
            self.assertEqual(t[k], v, k)
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, t)

    def test_unknown_task(self):
        self.assertError(self.admin.get("/tasks/" + str(uuid.uuid4())), 404, "not_found")
        self.assertError(self.admin.get("/tasks/not-a-uuid"), 404, "not_found")
        self.assertError(self.admin.patch("/tasks/" + str(uuid.uuid4()), {"comment": "x"}),
                         404, "not_found")
        self.assertError(self.admin.put("/tasks/" + str(uuid.uuid4()),
                                        {"name": "x", "script": "echo"}), 404, "not_found")
        self.assertError(self.admin.delete("/tasks/" + str(uuid.uuid4())), 404, "not_found")

    # -- active ---------------------------------------------------------------------------

    def test_active_accepts_bool_and_string_written_as_string(self):
        for given, shown in (("false", "false"), (False, "false"),
                             ("true", "true"), (True, "true")):
            t = self.create(name="active %r" % (given,), active=given)
            self.assertEqual(t["active"], shown, given)
            self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json["active"], shown)
        t = self.create(name="active patch")
        r = self.admin.patch("/tasks/" + t["ident"], {"active": False})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["active"], "false")
        r = self.admin.patch("/tasks/" + t["ident"], {"active": "true"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["active"], "true")
        for bad in ("yes", 1, "TRUE ", []):
            self.assertError(self.admin.post("/tasks", {"name": "x", "script": "echo",
                                                        "active": bad}),
                             400, "validation_failed", "active")

    # -- PUT / PATCH ----------------------------------------------------------------------

    def test_put_replaces_writable_fields(self):
        t = self.create(name="Before", comment="c1", constants={"a": 1}, hide=True,
                        allow_offline=True, timeout=60, active="false",
                        variables_info={"v": {"type": "integer"}},
                        notification_mail_list=["a@example.com"],
                        notification_status_list=["terminated"])
        time.sleep(1.1)
        r = self.admin2.put("/tasks/" + t["ident"],
                            {"name": "After", "script": "echo", "comment": "c2"})
        self.assertStatus(r, 200)
        u = r.json
        self.assertEqual(u["ident"], t["ident"])
        self.assertEqual(u["version"], 2)
        self.assertEqual(u["name"], "After")
        self.assertEqual(u["comment"], "c2")
        # Omitted writable fields take their defaults again.
        self.assertEqual(u["constants"], {})
        self.assertEqual(u["variables_info"], {})
        self.assertIs(u["hide"], False)
        self.assertIs(u["allow_offline"], False)
        self.assertEqual(u["timeout"], 300)
        self.assertEqual(u["active"], "true")
        self.assertEqual(u["notification_mail_list"], [])
        self.assertEqual(u["notification_status_list"], [])
        # Platform-kept fields.
        self.assertEqual(u["created_user"], "admin")
        self.assertEqual(u["update_user"], "admin2")
        self.assertEqual(u["created_at"], t["created_at"])
        self.assertEqual(u["client_root"], self.client_root)
        self.assertGreater(u["update_at"], t["created_at"])
        self.assertTimeNow(u["update_at"])
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, u)

        r = self.admin.put("/tasks/" + t["ident"], {"name": "After", "script": "echo"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], 3)
        self.assertEqual(r.json["update_user"], "admin")

    def test_put_requires_name_and_script(self):
        t = self.create(name="Put required")
        self.assertError(self.admin.put("/tasks/" + t["ident"], {"script": "echo"}),
                         400, "validation_failed", "name")
        self.assertError(self.admin.put("/tasks/" + t["ident"], {"name": "x"}),
                         400, "validation_failed", "script")
        # Failed updates change nothing.
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, t)

    def test_patch_changes_only_given_fields(self):
        t = self.create(name="Patch me", comment="a", constants={"k": "v"},
                        variables_info={"m": {"type": "string"}}, timeout=42)
        time.sleep(1.1)
        r = self.admin2.patch("/tasks/" + t["ident"], {"comment": "b"})
        self.assertStatus(r, 200)
        u = r.json
        self.assertEqual(u["version"], 2)
        self.assertEqual(u["comment"], "b")
        for f in ("ident", "name", "script", "constants", "variables_info", "timeout",
                  "active", "public", "hide", "allow_offline", "created_user", "created_at",
                  "client_root", "notification_mail_list", "notification_status_list"):
            self.assertEqual(u[f], t[f], f)
        self.assertEqual(u["update_user"], "admin2")
        self.assertGreater(u["update_at"], t["update_at"])
        self.assertTimeNow(u["update_at"])
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, u)

        r = self.admin.patch("/tasks/" + t["ident"], {"timeout": 600, "hide": True})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], 3)
        self.assertEqual(r.json["timeout"], 600)
        self.assertIs(r.json["hide"], True)
        self.assertEqual(r.json["comment"], "b")
        self.assertEqual(r.json["update_user"], "admin")

    def test_patch_that_changes_nothing_makes_no_version(self):
        t = self.create(name="No-op", comment="a", constants={"k": "v", "n": 1},
                        variables_info={"m": {"type": "string"}}, timeout=42)
        tid = "/tasks/" + t["ident"]
        time.sleep(1.1)
        for body in ({}, {"comment": "a"}, {"retry": None},
                     {"name": "No-op", "timeout": 42, "active": "true", "hide": False,
                      "constants": {"n": 1, "k": "v"}, "variables_info": {"m": {"type": "string"}},
                      "notification_mail_list": []}):
            with self.subTest(body=body):
                r = self.admin2.patch(tid, body)
                self.assertStatus(r, 200)
                self.assertEqual(r.json, t, "the task as it was: version, update_user, update_at")
        self.assertEqual(self.admin.get(tid).json, t)
        # a change still makes one; null for retry removes it (nullable)
        r = self.admin2.patch(tid, {"retry": {"max_attempts": 2}})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["version"], r.json["update_user"]), (2, "admin2"))
        r = self.admin.patch(tid, {"retry": None})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["version"], r.json["retry"]), (3, None))

    def test_patch_null_is_refused_where_not_nullable(self):
        t = self.create(name="Nulls", comment="keep", timeout=42,
                        variables_info={"m": {"type": "string", "optional": True}})
        tid = "/tasks/" + t["ident"]
        for body, field in (({"comment": None}, "comment"), ({"timeout": None}, "timeout"),
                            ({"name": None}, "name"), ({"active": None}, "active"),
                            ({"comment": None, "retry": None}, "comment"),
                            ({"variables_info": None}, "variables_info"),
                            ({"variables_info": {"m": None}}, "variables_info.m"),
                            ({"variables_info": {"m": {"type": "string", "optional": None}}},
                             "variables_info.m.optional"),
                            ({"notification_mail_list": [None]}, "notification_mail_list[0]"),
                            ({"retry": {"max_attempts": None}}, "retry.max_attempts"),
                            ({"signature": {"alg": None}}, "signature.alg")):
            with self.subTest(body=body):
                self.assertError(self.admin.patch(tid, body), 400, "validation_failed", field)
        self.assertEqual(self.admin.get(tid).json, t)
        # inside constants (free-form) null is a value
        r = self.admin.patch(tid, {"constants": {"k": None}})
        self.assertStatus(r, 200)
        self.assertEqual((r.json["version"], r.json["constants"]), (2, {"k": None}))

    def test_patch_script(self):
        src = "return 'other'\n"
        self.assertStatus(self.admin.put("/scripts/other_script", {"source": src}), 201)
        t = self.create(name="Switch script")
        r = self.admin.patch("/tasks/" + t["ident"], {"script": "other_script"})
        self.assertStatus(r, 200)
        self.assertEqual(r.json["version"], 2)
        self.assertEqual(r.json["script"], "other_script")
        self.assertEqual(r.json["script_sha256"], hashlib.sha256(src.encode()).hexdigest())

    def test_patch_validation(self):
        t = self.create(name="Patch validation")
        tid = "/tasks/" + t["ident"]
        self.assertError(self.admin.patch(tid, {"timeout": "x"}), 400, "validation_failed",
                         "timeout")
        self.assertError(self.admin.patch(tid, {"script": "no_such_script"}), 400,
                         "validation_failed", "script")
        self.assertError(self.admin.patch(tid, {"name": ""}), 400, "validation_failed", "name")
        self.assertError(self.admin.patch(tid, {"colour": "red"}), 400, "validation_failed",
                         "colour")
        self.assertEqual(self.admin.get(tid).json["version"], 1)

    # -- DELETE ---------------------------------------------------------------------------

    def test_delete_keeps_job_snapshot(self):
        t = self.create(name="Doomed")
        dev = self.make_device(name="delete-task-dev")
        r = self.admin.post("/tasks/%s/jobs" % t["ident"], {"entity_ident": dev["entity_ident"]})
        self.assertStatus(r, 201)
        job = r.json
        r = self.admin.delete("/tasks/" + t["ident"])
        self.assertStatus(r, 204)
        self.assertError(self.admin.get("/tasks/" + t["ident"]), 404, "not_found")
        self.assertError(self.admin.delete("/tasks/" + t["ident"]), 404, "not_found")
        self.assertError(self.admin.patch("/tasks/" + t["ident"], {"comment": "x"}),
                         404, "not_found")
        self.assertError(self.admin.post("/tasks/%s/jobs" % t["ident"],
                                         {"entity_ident": dev["entity_ident"]}),
                         404, "not_found")
        self.assertNotIn(t["ident"], self.listed(self.admin, hide="true"))
        r = self.admin.get("/jobs/" + job["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["task"]["ident"], t["ident"])
        self.assertEqual(r.json["task"]["name"], "Doomed")
        self.assertEqual(r.json["task"]["version"], 1)

    # -- hide / public --------------------------------------------------------------------

    def test_hide(self):
        hidden = self.create(name="Hidden", hide=True)
        shown = self.create(name="Shown")
        self.assertIs(hidden["hide"], True)
        default = self.listed(self.admin)
        self.assertNotIn(hidden["ident"], default)
        self.assertIn(shown["ident"], default)
        everything = self.listed(self.admin, hide="true")
        self.assertIn(hidden["ident"], everything)
        self.assertIn(shown["ident"], everything)
        # Still readable and usable by its ident.
        self.assertStatus(self.viewer.get("/tasks/" + hidden["ident"]), 200)
        dev = self.make_device(name="hidden-task-dev")
        r = self.operator.post("/tasks/%s/jobs" % hidden["ident"],
                               {"entity_ident": dev["entity_ident"]})
        self.assertStatus(r, 201)

    def test_private_task_visible_to_creator_and_admins_only(self):
        private = self.create(name="Private", public=False)
        public = self.create(name="Public")
        self.assertIs(private["public"], False)
        path = "/tasks/" + private["ident"]
        # The creator, with any role, and every admin see it.
        for api in (self.admin, self.admin2, self.creator_as_operator):
            self.assertStatus(api.get(path), 200)
            self.assertIn(private["ident"], self.listed(api))
        # Other users don't, not even through its ident.
        dev = self.make_device(name="private-task-dev")
        for api in (self.operator, self.viewer):
            self.assertError(api.get(path), 404, "not_found")
            self.assertError(api.get(path + "/jobs"), 404, "not_found")
            listed = self.listed(api)
            self.assertNotIn(private["ident"], listed)
            self.assertIn(public["ident"], listed)
            self.assertNotIn(private["ident"], self.listed(api, hide="true"))
        self.assertError(self.operator.post(path + "/jobs", {"entity_ident": dev["entity_ident"]}),
                         404, "not_found")
        r = self.creator_as_operator.post(path + "/jobs", {"entity_ident": dev["entity_ident"]})
        self.assertStatus(r, 201)

    # -- validation -----------------------------------------------------------------------

    def test_variables_info_all_types_accepted(self):
        vi = {
            "s": {"type": "string", "alias": "S", "description": "a string"},
            "t": {"type": "timestamp", "alias": "T"},
            "i": {"type": "integer", "optional": True},
            "n": {"type": "number", "optional": False},
            "b": {"type": "boolean"},
            "x" * 64: {"type": "string"},
            "Under_score_9": {"type": "string"},
        }
        t = self.create(name="All types", variables_info=vi)
        self.assertEqual(t["variables_info"], vi)

    def test_variables_info_validation(self):
        cases = [
            ({"delay": {"type": "float"}}, "variables_info.delay.type"),
            ({"delay": {"alias": "Delay"}}, "variables_info.delay.type"),
            ({"delay": {"type": 5}}, "variables_info.delay.type"),
            ({"delay": {"type": "integer", "alias": 5}}, "variables_info.delay.alias"),
            ({"delay": {"type": "integer", "description": []}},
             "variables_info.delay.description"),
            ({"delay": {"type": "integer", "optional": "yes"}}, "variables_info.delay.optional"),
            ({"delay": {"type": "integer", "colour": "red"}}, "variables_info.delay.colour"),
            ({"delay": "integer"}, "variables_info.delay"),
            ([], "variables_info"),
            ("delay", "variables_info"),
        ]
        for vi, field in cases:
            with self.subTest(variables_info=vi):
                self.assertError(self.admin.post("/tasks", {"name": "x", "script": "echo",
                                                            "variables_info": vi}),
                                 400, "validation_failed", field)
        for name in ("bad name", "bad-name", "", "x" * 65, "dot.ted"):
            with self.subTest(variable=name):
                r = self.admin.post("/tasks", {"name": "x", "script": "echo",
                                               "variables_info": {name: {"type": "string"}}})
                self.assertError(r, 400, "validation_failed")
                self.assertTrue(r.json["error"]["details"]["field"].startswith("variables_info"),
                                r.raw)

    def test_unknown_field_rejected(self):
        self.assertError(self.admin.post("/tasks", {"name": "x", "script": "echo",
                                                    "colour": "red"}),
                         400, "validation_failed", "colour")

    def test_platform_assigned_fields_rejected(self):
        t = self.create(name="Platform fields")
        for field, value in PLATFORM_FIELDS.items():
            with self.subTest(field=field):
                body = {"name": "x", "script": "echo", field: value}
                self.assertError(self.admin.post("/tasks", body), 400, "validation_failed",
                                 field)
                self.assertError(self.admin.put("/tasks/" + t["ident"], body), 400,
                                 "validation_failed", field)
                self.assertError(self.admin.patch("/tasks/" + t["ident"], {field: value}), 400,
                                 "validation_failed", field)
        self.assertEqual(self.admin.get("/tasks/" + t["ident"]).json, t)

    def test_field_validation(self):
        cases = [
            ({"script": "echo"}, "name"),
            ({"name": "", "script": "echo"}, "name"),
            ({"name": "x" * 201, "script": "echo"}, "name"),
            ({"name": 5, "script": "echo"}, "name"),
            ({"name": "x"}, "script"),
            ({"name": "x", "script": "no_such_script"}, "script"),
            ({"name": "x", "script": 5}, "script"),
            ({"name": "x", "script": "echo", "timeout": 0}, "timeout"),
            ({"name": "x", "script": "echo", "timeout": 86401}, "timeout"),
            ({"name": "x", "script": "echo", "timeout": "300"}, "timeout"),
            ({"name": "x", "script": "echo", "public": "yes"}, "public"),
            ({"name": "x", "script": "echo", "hide": 1}, "hide"),
            ({"name": "x", "script": "echo", "allow_offline": "false"}, "allow_offline"),
            ({"name": "x", "script": "echo", "constants": []}, "constants"),
            ({"name": "x", "script": "echo", "comment": 5}, "comment"),
        ]
        for body, field in cases:
            with self.subTest(body=body):
                self.assertError(self.admin.post("/tasks", body), 400, "validation_failed", field)
        for body, field in (
                ({"notification_mail_list": "ops@example.com"}, "notification_mail_list"),
                ({"notification_mail_list": ["not-an-address"]}, "notification_mail_list"),
                ({"notification_status_list": ["done"]}, "notification_status_list")):
            body.update(name="x", script="echo")
            with self.subTest(body=body):
                r = self.admin.post("/tasks", body)
                self.assertError(r, 400, "validation_failed")
                self.assertTrue(r.json["error"]["details"]["field"].startswith(field), r.raw)
        # Limits themselves are fine.
        self.create(name="x" * 200, timeout=86400)
        self.create(name="y", timeout=1)

    # -- roles ----------------------------------------------------------------------------

    def test_roles(self):
        t = self.create(name="Roles")
        path = "/tasks/" + t["ident"]
        for api in (self.operator, self.viewer):
            self.assertError(api.post("/tasks", {"name": "x", "script": "echo"}), 403,
                             "forbidden")
            self.assertError(api.put(path, {"name": "x", "script": "echo"}), 403, "forbidden")
            self.assertError(api.patch(path, {"comment": "x"}), 403, "forbidden")
            self.assertError(api.delete(path), 403, "forbidden")
            self.assertStatus(api.get(path), 200)
            self.assertStatus(api.get("/tasks"), 200)
        self.assertEqual(self.admin.get(path).json, t)

    # -- paging and tenants ---------------------------------------------------------------

    def test_paging_and_tenant_isolation(self):
        tenant = self.coord.init_tenant(user="pager")
        self.assertNotEqual(tenant["client_root"], self.client_root)
        api = self.coord.api(tenant["api_key"])
        idents = []
        for i in range(7):
            r = api.post("/tasks", {"name": "p%d" % i, "script": "echo"})
            self.assertStatus(r, 201)
            self.assertEqual(r.json["client_root"], tenant["client_root"])
            self.assertEqual(r.json["created_user"], "pager")
            idents.append(r.json["ident"])

        r = api.get("/tasks")
        self.assertStatus(r, 200)
        self.assertEqual((r.json["page"], r.json["per_page"], r.json["total_pages"],
                          r.json["total_items"]), (1, 50, 1, 7))
        self.assertEqual([t["ident"] for t in r.json["items"]], idents)  # oldest first

        pages = []
        for page, expect in ((1, idents[0:3]), (2, idents[3:6]), (3, idents[6:7]), (4, [])):
            r = api.get(with_query("/tasks", page=page, per_page=3))
            self.assertStatus(r, 200)
            self.assertEqual(r.json["page"], page)
            self.assertEqual(r.json["per_page"], 3)
            self.assertEqual(r.json["total_pages"], 3)
            self.assertEqual(r.json["total_items"], 7)
            self.assertEqual([t["ident"] for t in r.json["items"]], expect, page)
            pages.append(r.json)
        self.assertEqual(pages[0]["items"][0]["name"], "p0")

        self.assertStatus(api.get(with_query("/tasks", per_page=500)), 200)
        for params, field in (({"per_page": 501}, "per_page"), ({"per_page": 0}, "per_page"),
                              ({"per_page": "x"}, "per_page"), ({"page": 0}, "page"),
                              ({"page": -1}, "page"), ({"page": "x"}, "page")):
            with self.subTest(params=params):
                self.assertError(api.get(with_query("/tasks", **params)), 400,
                                 "invalid_parameter", field)

        # Tenants see only their own tasks.
        mine = self.create(name="Tenant one")
        self.assertError(api.get("/tasks/" + mine["ident"]), 404, "not_found")
        self.assertError(api.patch("/tasks/" + mine["ident"], {"comment": "x"}), 404,
                         "not_found")
        self.assertError(api.delete("/tasks/" + mine["ident"]), 404, "not_found")
        self.assertError(self.admin.get("/tasks/" + idents[0]), 404, "not_found")
        self.assertNotIn(idents[0], self.listed(self.admin, hide="true"))
        self.assertEqual(self.admin.get("/tasks/" + mine["ident"]).json, mine)


if __name__ == "__main__":
    unittest.main()
