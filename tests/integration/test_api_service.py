#!/usr/bin/env python3
"""What the coordinator serves without an api key: GET /v3/commands/health and
GET /v3/commands/openapi.json (docs/api.md, "Service").

Checked: health without a broker (broker "none"), with a broker (connected, then
disconnected once the broker is stopped, connected again once it is back), and with the
database file removed under the running coordinator (503, "unavailable"); every answer
against the Health schema of docs/openapi.json, closed. openapi.json is byte for byte the
repository's docs/openapi.json (embedded in the binary: the test runs the coordinator from
a directory without it), as application/json. Neither needs a key, neither is counted by or
refused by the throttle of unknown keys (--auth-fail-limit), and other methods answer 405.

Run: python3 tests/integration/test_api_service.py (ctest sets RCS_BIN_DIR and RCS_SOURCE_DIR).
"""

import os
import shutil
import sys
import tempfile
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcs_harness as H  # noqa: E402
from rcs_harness import SOURCE_DIR  # noqa: E402
from rcs_fixture import CoordinatorTest  # noqa: E402
from test_openapi import DOC, find_op, validate  # noqa: E402

DOC_PATH = os.path.join(SOURCE_DIR, "docs", "openapi.json")


def header(resp, name):
    for k, v in resp.headers.items():
        if k.lower() == name.lower():
            return v
    return None


class ServiceChecks:
    """Assertions shared by the classes below (a CoordinatorTest mixin)."""

    def health(self, expect, database, broker):
        r = H.Api(self.coord.base, None).get("/health")
        self.assertEqual(r.status, expect, r)
        op = find_op("GET", "/health")
        self.assertIn(str(r.status), op["responses"])
        schema = op["responses"][str(r.status)]["content"]["application/json"]["schema"]
        self.assertEqual(validate(schema, r.json, "$", None, True), [])
        self.assertTrue((header(r, "Content-Type") or "").startswith("application/json"))
        self.assertEqual(r.json, {"status": "ok" if expect == 200 else "unavailable",
                                  "database": database, "broker": broker})
        return r


class ServiceWithoutBrokerTest(ServiceChecks, CoordinatorTest):

    extra_args = ("--auth-fail-limit", "2")

    @classmethod
    def setUpClass(cls):
        # from a directory without docs/: what is served is what the binary holds
        elsewhere = tempfile.mkdtemp(prefix="rcs-test-cwd-")
        cls.addClassCleanup(shutil.rmtree, elsewhere, ignore_errors=True)
        cls.addClassCleanup(os.chdir, os.getcwd())
        os.chdir(elsewhere)
        super().setUpClass()

    def test_a_health(self):
        self.health(200, "ok", "none")

    def test_a_openapi_json_is_the_document(self):
        r = H.Api(self.coord.base, None).get("/openapi.json")
        self.assertEqual(r.status, 200, r)
        self.assertTrue((header(r, "Content-Type") or "").startswith("application/json"))
        with open(DOC_PATH, "rb") as f:
            self.assertEqual(r.raw.encode("utf-8"), f.read())
        self.assertEqual(r.json, DOC)

    def test_a_a_key_is_not_needed_nor_checked(self):
        for path in ("/health", "/openapi.json"):
            for key in (None, "rcs_not_a_key_" + uuid.uuid4().hex, self.admin_key):
                with self.subTest(path=path, key=key):
                    self.assertEqual(self.coord.api(key).get(path).status, 200)

    def test_b_other_methods(self):
        for path in ("/health", "/openapi.json"):
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                with self.subTest(path=path, method=method):
                    r = H.Api(self.coord.base, None).request(method, path)
                    self.assertError(r, 405, "method_not_allowed")
                    self.assertEqual(header(r, "Allow"), "GET")

    def test_b_unknown_parameter(self):
        # refused as by every operation (docs/api.md "Lists"), and documented: 400
        for path in ("/health", "/openapi.json"):
            with self.subTest(path=path):
                r = H.Api(self.coord.base, None).get(path + "?verbose=1")
                self.assertError(r, 400, "invalid_parameter")
                self.assertEqual(r.json["error"]["details"]["field"], "verbose")
                op = find_op("GET", path)
                self.assertIn("400", op["responses"])
                spec = op["responses"]["400"]
                media = DOC["components"]["responses"][spec["$ref"].rsplit("/", 1)[1]]
                schema = media["content"]["application/json"]["schema"]
                self.assertEqual(validate(schema, r.json, "$", None, True), [])

    def test_c_not_counted_nor_refused_by_the_throttle(self):
        nokey = H.Api(self.coord.base, None)
        for _ in range(10):  # many more than the limit (2): not counted
            self.assertEqual(nokey.get("/health").status, 200)
            self.assertEqual(nokey.get("/openapi.json").status, 200)
        self.assertStatus(self.admin.get("/tasks"), 200)
        for _ in range(3):
            self.assertError(self.coord.api("rcs_" + uuid.uuid4().hex).get("/tasks"), 401,
                             "unauthorized")
        self.assertError(self.admin.get("/tasks"), 429, "too_many_requests")
        # throttled: the service still answers
        self.health(200, "ok", "none")
        self.assertEqual(nokey.get("/openapi.json").status, 200)

    def test_d_database_removed(self):
        self.health(200, "ok", "none")
        if H.on_postgres():
            # PostgreSQL stopped while serving: 503 while it is away, 200 once it is back
            # (PostgresRestartTest checks reads and writes around it)
            import pg_server
            pg = pg_server.shared()
            pg.pause()
            try:
                self.health(503, "unavailable", "none")
            finally:
                pg.start()
            H.wait_for(lambda: H.Api(self.coord.base, None).get("/health").status == 200,
                       timeout=30, what="GET /health 200 once PostgreSQL is back")
            return
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.coord.db + suffix):
                os.remove(self.coord.db + suffix)
        self.health(503, "unavailable", "none")
        self.assertIn("removed or renamed", self.coord.read_log())


@unittest.skipUnless(H.on_postgres(), "a PostgreSQL restart (RCS_TEST_DB=postgres)")
class PostgresRestartTest(CoordinatorTest):
    """PostgreSQL restarted under a serving coordinator: requests answer 503 with a JSON
    error body while it is away, nothing crashes, and reads and writes work again once it is
    back, without restarting the coordinator (docs/coordinator.md, "PostgreSQL")."""

    def test_restart(self):
        import pg_server
        pg = pg_server.shared()
        self.assertEqual(self.admin.post("/devices", {"name": "before", "tags": []}).status, 201)
        pg.pause()
        try:
            r = self.admin.get("/tasks")
            self.assertEqual(r.status, 503, r)
            self.assertIsInstance(r.json, dict)
            r = self.admin.post("/devices", {"name": "while-away", "tags": []})
            self.assertEqual(r.status, 503, r)
        finally:
            pg.start()
        H.wait_for(lambda: self.admin.get("/devices").status == 200, timeout=30,
                   what="GET /devices 200 once PostgreSQL is back")
        self.assertEqual(self.admin.post("/devices", {"name": "after", "tags": []}).status, 201)
        names = sorted(d["name"] for d in self.admin.get("/devices").json["items"])
        self.assertEqual(names, ["after", "before"])
        self.assertTrue(self.coord.alive())


class ServiceWithBrokerTest(ServiceChecks, CoordinatorTest):

    @classmethod
    def setUpClass(cls):
        super(CoordinatorTest, cls).setUpClass()  # the broker first
        cls.start_broker(persistence=False)
        cls.start_coordinator(("--mqtt", cls.broker.url))

    def broker_is(self, state):
        H.wait_for(lambda: H.Api(self.coord.base, None).get("/health").json.get("broker") == state,
                   timeout=30, what="broker %s in GET /health" % state)

    def test_connected_then_disconnected_then_back(self):
        self.broker_is("connected")
        # on PostgreSQL the coordinator then probes the shared subscription of status
        # reports and reconnects with a clean session to take it: not the broker going away
        seen = set()

        def settled():
            seen.add(H.Api(self.coord.base, None).get("/health").json.get("broker"))
            return "status reports: " in self.coord.read_log()
        H.wait_for(settled, timeout=30, interval=0.02, what="the subscription of reports chosen")
        self.assertEqual(seen, {"connected"}, "GET /health while the session changes")
        self.health(200, "ok", "connected")
        self.broker.stop()
        self.broker_is("disconnected")
        self.health(200, "ok", "disconnected")
        self.broker.start()
        self.broker_is("connected")
        self.health(200, "ok", "connected")


if __name__ == "__main__":
    unittest.main()
