#!/usr/bin/env python3
"""Integration tests of /v3/commands/scripts against docs/api.md: stock scripts, tenant
scripts (PUT/GET/DELETE), script bytes pinned by task versions, names, roles, tenants."""

import hashlib
import os
import time
import unittest

from rcs_harness import SCRIPTS_DIR, list_all, quote_segment
from rcs_fixture import CoordinatorTest

SCRIPT_FIELDS = ("name", "sha256", "size", "stock", "updated_at")


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ScriptsTest(CoordinatorTest):
    roles = True

    def scripts(self, api=None):
        return {s["name"]: s for s in list_all(api or self.admin, "/scripts")}

    def put_script(self, name, source, expect=None, api=None):
        r = (api or self.admin).put("/scripts/" + name, {"source": source})
        if expect is not None:
            self.assertStatus(r, expect)
        return r

    # -- stock ----------------------------------------------------------------------------

    def test_stock_echo_listed(self):
        with open(os.path.join(SCRIPTS_DIR, "echo.lua"), "rb") as f:
            data = f.read()
        listed = self.scripts()
        self.assertIn("echo", listed)
        echo = listed["echo"]
        for f in SCRIPT_FIELDS:
            self.assertIn(f, echo)
        self.assertNotIn("source", echo)
        self.assertIs(echo["stock"], True)
        self.assertEqual(echo["sha256"], hashlib.sha256(data).hexdigest())
        self.assertEqual(echo["size"], len(data))
        self.assertIsInstance(echo["updated_at"], int)

        r = self.viewer.get("/scripts/echo")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["source"], data.decode("utf-8"))
        self.assertIs(r.json["stock"], True)
        self.assertEqual(r.json["name"], "echo")
        self.assertEqual(r.json["sha256"], hashlib.sha256(data).hexdigest())

        # Every <name>.lua of --scripts-dir is a stock script.
        for fn in os.listdir(SCRIPTS_DIR):
            if fn.endswith(".lua"):
                self.assertIn(fn[:-4], listed)
                self.assertIs(listed[fn[:-4]]["stock"], True)

    def test_stock_scripts_read_only(self):
        before = self.admin.get("/scripts/echo").json
        self.assertError(self.put_script("echo", "return 'hacked'\n"), 403, "forbidden")
        self.assertError(self.admin.delete("/scripts/echo"), 403, "forbidden")
        self.assertEqual(self.admin.get("/scripts/echo").json["source"], before["source"])
        # Stock scripts are visible to (and reserved for) every tenant.
        other = self.coord.api(self.coord.init_tenant(user="stock-other")["api_key"])
        self.assertIs(self.scripts(other)["echo"]["stock"], True)
        self.assertError(other.put("/scripts/echo", {"source": "return 1\n"}), 403, "forbidden")

    # -- tenant scripts -------------------------------------------------------------------

    def test_put_get_delete(self):
        src = "return 'one'\n"
        r = self.put_script("my_script-1.0", src, 201)
        s = r.json
        self.assertEqual(s["name"], "my_script-1.0")
        self.assertEqual(s["sha256"], sha256(src))
        self.assertEqual(s["size"], len(src.encode()))
        self.assertIs(s["stock"], False)
        self.assertLessEqual(abs(s["updated_at"] - time.time()), 5)
        self.assertEqual(s["source"], src)
        self.assertEqual(s["tasks_updated"], [])

        r = self.viewer.get("/scripts/my_script-1.0")
        self.assertStatus(r, 200)
        self.assertEqual(r.json["source"], src)
        self.assertEqual(r.json["sha256"], sha256(src))
        self.assertIs(r.json["stock"], False)
        listed = self.scripts()["my_script-1.0"]
        self.assertNotIn("source", listed)
        self.assertEqual(listed["sha256"], sha256(src))

        src2 = "-- ünïcode\nreturn 'two'\n"
        r = self.put_script("my_script-1.0", src2, 200)
        self.assertEqual(r.json["sha256"], sha256(src2))
        self.assertEqual(r.json["size"], len(src2.encode()))
        self.assertEqual(self.admin.get("/scripts/my_script-1.0").json["source"], src2)

        self.assertStatus(self.admin.delete("/scripts/my_script-1.0"), 204)
        self.assertError(self.admin.get("/scripts/my_script-1.0"), 404, "not_found")
        self.assertError(self.admin.delete("/scripts/my_script-1.0"), 404, "not_found")
        self.assertNotIn("my_script-1.0", self.scripts())

    def test_unknown_script(self):
        self.assertError(self.admin.get("/scripts/no_such_script"), 404, "not_found")
        self.assertError(self.admin.delete("/scripts/no_such_script"), 404, "not_found")

    def test_delete_script_in_use(self):
        self.put_script("inuse", "return 1\n", 201)
        r = self.admin.post("/tasks", {"name": "uses inuse", "script": "inuse"})
        self.assertStatus(r, 201)
        task = r.json
        self.assertError(self.admin.delete("/scripts/inuse"), 409, "conflict")
        self.assertStatus(self.admin.get("/scripts/inuse"), 200)
        self.assertStatus(self.admin.delete("/tasks/" + task["ident"]), 204)
        self.assertStatus(self.admin.delete("/scripts/inuse"), 204)

    def test_new_bytes_give_tasks_a_new_version(self):
        src1 = "return 'v1'\n"
        self.put_script("bump", src1, 201)
        a = self.make_task(name="A", script="bump")
        b = self.make_task(name="B", script="bump")
        c = self.make_task(name="C", script="echo")
        self.assertEqual(a["script_sha256"], sha256(src1))
        b = self.admin.patch("/tasks/" + b["ident"], {"comment": "now v2"}).json
        self.assertEqual(b["version"], 2)
        dev = self.make_device(name="bump-dev")
        r = self.admin.post("/tasks/%s/jobs" % a["ident"], {"entity_ident": dev["entity_ident"]})
        self.assertStatus(r, 201)
        job = r.json
        self.assertEqual(job["task"]["version"], 1)

        src2 = "return 'v2'\n"
        r = self.put_script("bump", src2, 200)
        self.assertEqual(r.json["sha256"], sha256(src2))
        updated = {t["ident"]: t["version"] for t in r.json["tasks_updated"]}
        self.assertEqual(updated, {a["ident"]: 2, b["ident"]: 3})
        self.assertNotIn(c["ident"], updated)

        a2 = self.admin.get("/tasks/" + a["ident"]).json
        self.assertEqual(a2["version"], 2)
        self.assertEqual(a2["script_sha256"], sha256(src2))
        self.assertEqual(self.admin.get("/tasks/" + b["ident"]).json["version"], 3)
        self.assertEqual(self.admin.get("/tasks/" + c["ident"]).json["version"], 1)

        # The job created before keeps its task version; a new job gets the new one.
        r = self.admin.get("/jobs/" + job["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["task"]["version"], 1)
        r = self.admin.post("/tasks/%s/jobs" % a["ident"], {"entity_ident": dev["entity_ident"]})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["task"]["version"], 2)

    def test_bad_names(self):
        for name in ("bad name", "bad$name", "a" * 65, "semi;colon", "sl\\ash", "x'y"):
            with self.subTest(name=name):
                r = self.put_script(quote_segment(name), "return 1\n")
                self.assertStatus(r, 400)
                self.assertIn(r.json["error"]["code"], ("validation_failed", "invalid_parameter"),
                              r.raw)
        # The longest allowed name and every allowed character class.
        self.put_script("A-z_0." + "a" * 58, "return 1\n", 201)

    def test_bad_sources(self):
        self.assertError(self.admin.put("/scripts/badsrc", {}), 400, "validation_failed",
                         "source")
        self.assertError(self.admin.put("/scripts/badsrc", {"source": 5}), 400,
                         "validation_failed", "source")
        self.assertError(self.admin.put("/scripts/badsrc", {"source": "x" * (256 * 1024 + 1)}),
                         400, "validation_failed", "source")
        self.assertError(self.admin.put("/scripts/badsrc", {"source": "return 1", "extra": 1}),
                         400, "validation_failed", "extra")
        self.assertError(self.admin.get("/scripts/badsrc"), 404, "not_found")
        # Exactly 256 KiB is allowed.
        big = "-" * (256 * 1024 - 1) + "\n"
        r = self.put_script("bigsrc", big, 201)
        self.assertEqual(r.json["size"], 256 * 1024)

    def test_source_must_compile(self):
        """Lua's parser checks the source at upload: a syntax error is a 400 with Lua's
        message and line, and nothing is stored (docs/api.md, Scripts)."""
        cases = (("local x = 1\nif x then\n  return\n", 4, "'end' expected"),
                 ("return 1 +\n", 2, "unexpected symbol"),
                 ("x = = 2", 1, "unexpected symbol near '='"),
                 ("\x1bLuaT", 0, "binary chunk"),
                 ("goto nowhere", 1, "no visible label 'nowhere'"))
        for source, line, words in cases:
            with self.subTest(source=source):
                r = self.put_script("syntax", source)
                self.assertError(r, 400, "validation_failed", "source")
                msg = r.json["error"]["message"]
                self.assertIn("does not compile", msg)
                self.assertIn(words, msg)
                if line:
                    self.assertIn("syntax:%d:" % line, msg)
                    self.assertEqual(r.json["error"]["details"]["line"], line, r.raw)
                else:
                    self.assertNotIn("line", r.json["error"]["details"])
                self.assertError(self.admin.get("/scripts/syntax"), 404, "not_found")
        # the longest names too (Lua cuts them short in its messages)
        r = self.put_script("n" * 64, "x = = 2")
        self.assertError(r, 400, "validation_failed", "source")
        self.assertEqual(r.json["error"]["details"]["line"], 1, r.raw)
        # an update that does not compile keeps the stored version
        self.put_script("syntax", "return 1\n", 201)
        self.assertError(self.put_script("syntax", "return (\n"), 400, "validation_failed",
                         "source")
        self.assertEqual(self.admin.get("/scripts/syntax").json["source"], "return 1\n")
        # compiled, never run: errors and endless loops at run time are the device's matter
        self.put_script("syntax", "error('at run time')\nwhile true do end\n", 200)

    def test_roles(self):
        self.put_script("roles", "return 1\n", 201)
        for api in (self.operator, self.viewer):
            self.assertError(api.put("/scripts/roles", {"source": "return 2\n"}), 403,
                             "forbidden")
            self.assertError(api.put("/scripts/roles_new", {"source": "return 2\n"}), 403,
                             "forbidden")
            self.assertError(api.delete("/scripts/roles"), 403, "forbidden")
            self.assertStatus(api.get("/scripts"), 200)
            self.assertStatus(api.get("/scripts/roles"), 200)
        self.assertEqual(self.admin.get("/scripts/roles").json["source"], "return 1\n")
        self.assertError(self.admin.get("/scripts/roles_new"), 404, "not_found")

    def test_tenant_isolation(self):
        self.put_script("mine", "return 'tenant one'\n", 201)
        other = self.coord.api(self.coord.init_tenant(user="other")["api_key"])
        self.assertError(other.get("/scripts/mine"), 404, "not_found")
        self.assertNotIn("mine", self.scripts(other))
        self.assertError(other.delete("/scripts/mine"), 404, "not_found")
        # The same name is free in the other tenant and independent.
        r = other.put("/scripts/mine", {"source": "return 'tenant two'\n"})
        self.assertStatus(r, 201)
        self.assertEqual(self.admin.get("/scripts/mine").json["source"], "return 'tenant one'\n")
        self.assertEqual(other.get("/scripts/mine").json["source"], "return 'tenant two'\n")
        # A task of tenant one can't use a script only tenant two has.
        other.put("/scripts/only_two", {"source": "return 2\n"})
        self.assertError(self.admin.post("/tasks", {"name": "x", "script": "only_two"}),
                         400, "validation_failed", "script")


if __name__ == "__main__":
    unittest.main()
