#!/usr/bin/env python3
"""Integration tests of error handling against docs/api.md: bad bodies, unknown routes and
methods, bad query parameters, SQL metacharacters, body size limit. The server must keep
answering afterwards (and the base class checks it exits 0 on SIGTERM)."""

import copy
import socket
import unittest
import uuid

import json

from rcs_harness import http, http_big, list_all, quote_segment, with_query
from rcs_fixture import CoordinatorTest
from test_openapi import operations, request_example, request_schema, resolve

SQLI = "' OR 1=1 --"


def props_of(schema):
    """The properties a (resolved) request schema names: {name: schema}, allOf/oneOf/anyOf
    merged."""
    s = resolve(schema)
    out = dict(s.get("properties", {}))
    for k in ("allOf", "oneOf", "anyOf"):
        for sub in s.get(k, []):
            out.update(props_of(sub))
    return out


PLACEHOLDERS = {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": ["x"],
                "object": {}}


def null_bodies(example, props):
    """(member, body, field) for each member props types as non-null (those example lacks
    given their schema's example or a placeholder: the null is refused before any other
    check), with null in its place; and for a member that is a typed object or array, with
    null in place of one of its members or items."""
    example = copy.deepcopy(example)
    for name, p in props.items():
        if name not in example:
            p = resolve(p)
            example[name] = copy.deepcopy(p.get("example", PLACEHOLDERS.get(p.get("type"), "x")))
    for name, value in example.items():
        p = resolve(props.get(name, {}))
        if p.get("nullable"):
            continue
        body = copy.deepcopy(example)
        body[name] = None
        yield name, body, name
        sub = props_of(p) if isinstance(value, dict) else {}
        for k in value if isinstance(value, dict) else ():
            if k in sub and not resolve(sub[k]).get("nullable"):
                body = copy.deepcopy(example)
                body[name][k] = None
                yield name, body, "%s.%s" % (name, k)
        if isinstance(value, list) and value:
            body = copy.deepcopy(example)
            body[name][0] = None
            yield name, body, "%s[0]" % name


class ErrorsTest(CoordinatorTest):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        r = cls.admin.post("/tasks", {"name": "base", "script": "echo"})
        assert r.status == 201, r
        cls.task = r.json
        r = cls.admin.post("/devices", {"name": "base", "tags": ["base"]})
        assert r.status == 201, r
        cls.device = r.json["entity_ident"]

    def post_raw(self, path, raw):
        return self.admin.post(path, raw=raw)

    def assertNoTaskNamed(self, name):
        names = [t["name"] for t in list_all(self.admin, "/tasks", hide="true")]
        self.assertNotIn(name, names)

    # -- bodies ---------------------------------------------------------------------------

    def test_malformed_json(self):
        for raw in (b'{"name": ', b'{"name": "x", "script": "echo"', b"not json", b"{'a': 1}",
                    b'{"name": "x",}', b'{"name": "x", "script": "echo"} trailing', b""):
            with self.subTest(raw=raw):
                self.assertError(self.post_raw("/tasks", raw), 400, "invalid_json")
        self.assertNoTaskNamed("x")

    def test_truncated_json_names_where_the_body_ends(self):
        """A body cut short is reported at its end, not at offset 0."""
        for raw in (b'{"name": ', b'{"name": "x", "script": "ech', b'{"name": "x", "constants": [1, 2',
                    b'{"name": "x", "script": "echo", "hide": tr'):
            with self.subTest(raw=raw):
                r = self.post_raw("/tasks", raw)
                self.assertError(r, 400, "invalid_json")
                self.assertIn("truncated", r.json["error"]["message"])
                self.assertIn("offset %d" % len(raw), r.json["error"]["message"])
        r = self.post_raw("/tasks", b'{"name" "x"}')
        self.assertError(r, 400, "invalid_json")
        self.assertIn("offset 8", r.json["error"]["message"])

    def test_body_not_an_object(self):
        for raw in (b'[{"name": "x", "script": "echo"}]', b"[1, 2]", b"null", b'"str"', b"42",
                    b"true"):
            with self.subTest(raw=raw):
                self.assertError(self.post_raw("/tasks", raw), 400, "invalid_json")
        self.assertError(self.post_raw("/tasks/%s/jobs" % self.task["ident"], b"[]"), 400,
                         "invalid_json")
        self.assertError(self.post_raw("/devices", b"[]"), 400, "invalid_json")

    def test_deep_nesting(self):
        deep = (b'{"name": "deep", "script": "echo", "constants": {"a": ' + b"[" * 100 +
                b"]" * 100 + b"}}")
        self.assertError(self.post_raw("/tasks", deep), 400, "invalid_json")
        deep_obj = (b'{"name": "deep", "script": "echo", "constants": ' + b'{"a": ' * 100 +
                    b"1" + b"}" * 100 + b"}")
        self.assertError(self.post_raw("/tasks", deep_obj), 400, "invalid_json")
        self.assertNoTaskNamed("deep")
        # A modest depth is fine.
        ok = (b'{"name": "nested", "script": "echo", "constants": {"a": ' + b"[" * 10 +
              b"1" + b"]" * 10 + b"}}")
        r = self.post_raw("/tasks", ok)
        self.assertStatus(r, 201)
        self.assertEqual(r.json["constants"], {"a": [[[[[[[[[[1]]]]]]]]]]})

    def test_invalid_utf8(self):
        for raw in (b'{"name": "\xff\xfe", "script": "echo"}',
                    b'{"name": "caf\xe9", "script": "echo"}',
                    b'{"name": "\xc0\xaf", "script": "echo"}',
                    b'{"name": "\xed\xa0\x80", "script": "echo"}'):
            with self.subTest(raw=raw):
                self.assertError(self.post_raw("/tasks", raw), 400, "invalid_json")
        r = self.post_raw("/tasks", '{"name": "café ✓", "script": "echo"}'.encode("utf-8"))
        self.assertStatus(r, 201)
        self.assertEqual(r.json["name"], "café ✓")

    def test_body_over_default_limit(self):
        big = {"name": "too big", "script": "echo", "comment": "x" * (2 * 1024 * 1024)}
        r = http_big(self.coord.port, "POST", "/v3/commands/tasks", json.dumps(big).encode(),
                     headers={"api-key": self.admin_key})
        self.assertError(r, 413, "payload_too_large")
        self.assertNoTaskNamed("too big")

    def test_answers_are_json(self):
        for r in (self.admin.get("/tasks"), self.admin.get("/nothing"),
                  self.admin.post("/tasks", raw=b"{"), self.coord.api("bad").get("/tasks")):
            with self.subTest(r=r):
                ctype = {k.lower(): v for k, v in r.headers.items()}.get("content-type", "")
                self.assertTrue(ctype.startswith("application/json"), r.headers)
                self.assertIsNotNone(r.json, r.raw)

    def test_wrong_json_types_are_validation_errors(self):
        self.assertError(self.admin.post("/tasks", {"name": ["x"], "script": "echo"}), 400,
                         "validation_failed", "name")
        self.assertError(self.admin.post("/tasks", {"name": "x", "script": {"a": 1}}), 400,
                         "validation_failed", "script")

    def test_null_is_refused_where_the_document_says_non_null(self):
        """Every member of every request body the document types as non-null, and those of
        its typed objects and arrays, answers 400 naming it when null (it was taken as "not
        given"); nullable members, and null inside free-form ones, are taken."""
        ids = {"task_ident": self.task["ident"], "entity_ident": self.device,
               "webhook_ident": str(uuid.uuid4()), "name": "nulls"}
        tried = set()
        for method, template, op, _ in operations():
            example, schema = request_example(method, template), request_schema(method, template)
            if not isinstance(example, dict):
                continue
            path = template
            for k, v in ids.items():
                path = path.replace("{%s}" % k, v)
            for name, body, field in null_bodies(example, props_of(schema)):
                with self.subTest(op="%s %s" % (method, template), field=field):
                    r = self.admin.request(method, path, body)
                    self.assertError(r, 400, "validation_failed", field)
                    self.assertIn("null", r.json["error"]["message"])
                    tried.add(name)
        for name in ("name", "script", "comment", "timeout", "active", "entity_ident",
                     "ident_list", "tag", "rollout", "retry", "tags", "source", "user", "role",
                     "url", "events", "secret"):
            self.assertIn(name, tried)
        self.assertEqual(self.admin.get("/tasks/" + self.task["ident"]).json["version"], 1)
        # nullable: retry (none), and null inside constants (free-form)
        r = self.admin.post("/tasks", {"name": "nullable", "script": "echo", "retry": None,
                                       "constants": {"k": None}})
        self.assertStatus(r, 201)
        self.assertIsNone(r.json["retry"])
        self.assertEqual(r.json["constants"], {"k": None})

    # -- routes and methods ---------------------------------------------------------------

    def test_unknown_routes(self):
        for path in ("/nothing", "/tasks/%s/nothing" % self.task["ident"], "/jobs/x/y/z",
                     "/tasks/%s/jobs/nothing" % self.task["ident"]):
            with self.subTest(path=path):
                self.assertError(self.admin.get(path), 404, "not_found")
        base = "http://127.0.0.1:%d" % self.coord.port
        for url in (base + "/", base + "/v2/commands/tasks", base + "/v3/commandsx/tasks",
                    base + "/v3/tasks"):
            with self.subTest(url=url):
                self.assertError(http("GET", url, headers={"api-key": self.admin_key}), 404,
                                 "not_found")

    def test_wrong_method(self):
        job = self.admin.post("/tasks/%s/jobs" % self.task["ident"],
                              {"entity_ident": self.device}).json
        cases = [("DELETE", "/groups", "GET"), ("POST", "/groups", "GET"),
                 ("PUT", "/scripts", "GET"), ("PATCH", "/jobs", "GET"),
                 ("DELETE", "/tasks", "GET"), ("POST", "/jobs/%s/history" % job["ident"], "GET"),
                 ("GET", "/jobs/%s/cancel" % job["ident"], "PATCH"),
                 ("POST", "/jobs/%s/cancel" % job["ident"], "PATCH"),
                 ("GET", "/tasks/%s/jobs/list" % self.task["ident"], "POST")]
        for method, path, allowed in cases:
            with self.subTest(method=method, path=path):
                r = self.admin.request(method, path, body={} if method != "GET" else None)
                self.assertError(r, 405, "method_not_allowed")
                allow = {k.lower(): v for k, v in r.headers.items()}.get("allow", "")
                self.assertIn(allowed, [m.strip() for m in allow.split(",")], r.headers)
        self.assertEqual(self.admin.get("/jobs/" + job["ident"]).json["status"], "pending")

    # -- query parameters -----------------------------------------------------------------

    def test_bad_page_params(self):
        for path in ("/tasks", "/jobs", "/devices", "/groups", "/scripts", "/keys",
                     "/tasks/%s/jobs" % self.task["ident"]):
            for params, field in (({"page": 0}, "page"), ({"page": -1}, "page"),
                                  ({"page": "abc"}, "page"), ({"page": "1.5"}, "page"),
                                  ({"per_page": 0}, "per_page"), ({"per_page": 501}, "per_page"),
                                  ({"per_page": "1e3"}, "per_page"),
                                  ({"per_page": "99999999999999999999999"}, "per_page")):
                with self.subTest(path=path, params=params):
                    self.assertError(self.admin.get(with_query(path, **params)), 400,
                                     "invalid_parameter", field)
            # A page number too big for any integer: refused, or a page past the end.
            r = self.admin.get(with_query(path, page="99999999999999999999999"))
            if r.status == 200:
                self.assertEqual(r.json["items"], [])
            else:
                self.assertError(r, 400, "invalid_parameter", "page")

    def test_sql_metacharacters(self):
        q = quote_segment(SQLI)
        for path in ("/tasks/" + q, "/jobs/" + q, "/jobs/%s/history" % q, "/devices/" + q,
                     "/groups/" + q, "/tasks/%s/jobs" % q):
            with self.subTest(path=path):
                self.assertError(self.admin.get(path), 404, "not_found")
        self.assertError(self.admin.patch("/jobs/%s/cancel" % q), 404, "not_found")
        self.assertError(self.admin.delete("/tasks/" + q), 404, "not_found")
        self.assertError(self.admin.delete("/devices/" + q), 404, "not_found")
        self.assertIn(self.admin.get("/scripts/" + q).status, (400, 404))
        self.assertIn(self.admin.delete("/scripts/" + q).status, (400, 404))
        for field in ("task_ident", "entity_ident", "group_ident", "status"):
            with self.subTest(filter=field):
                self.assertError(self.admin.get(with_query("/jobs", **{field: SQLI})), 400,
                                 "invalid_parameter", field)
        r = self.admin.get(with_query("/devices", tag=SQLI))
        self.assertIn(r.status, (200, 400), r)
        if r.status == 200:
            self.assertEqual(r.json["items"], [])
        else:
            self.assertError(r, 400, "invalid_parameter", "tag")
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task["ident"], {"tag": SQLI})
        self.assertIn(r.status, (201, 400), r)
        if r.status == 201:
            self.assertEqual(r.json["items"], [])
        r = self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": SQLI})
        self.assertError(r, 400, "validation_failed", "entity_ident")
        r = self.admin.post("/tasks/%s/jobs/list" % self.task["ident"], {"ident_list": [SQLI]})
        self.assertError(r, 400, "validation_failed")

        # Metacharacters in stored text are just text.
        name = "x'); DROP TABLE tasks; --"
        r = self.admin.post("/tasks", {"name": name, "script": "echo",
                                       "comment": "\" OR \"\"=\"", "constants": {SQLI: SQLI}})
        self.assertStatus(r, 201)
        r = self.admin.get("/tasks/" + r.json["ident"])
        self.assertEqual(r.json["name"], name)
        self.assertEqual(r.json["constants"], {SQLI: SQLI})
        self.assertStatus(self.admin.get("/tasks/" + self.task["ident"]), 200)
        r = self.admin.post("/devices", {"name": SQLI, "tags": []})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["name"], SQLI)

    def test_garbage_http(self):
        for raw in (b"GARBAGE\r\n\r\n", b"GET /v3/commands/tasks HTTP/9.9\r\n\r\n",
                    b"GET " + b"/x" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 100):
            # Only the server's survival matters here, not how it answers.
            with socket.create_connection(("127.0.0.1", self.coord.port), timeout=1) as s:
                try:
                    s.sendall(raw)
                    s.shutdown(socket.SHUT_WR)
                    s.recv(4096)
                except OSError:
                    pass
        self.assertStatus(self.admin.get("/tasks"), 200)

    def test_zz_still_answers(self):
        # Runs last in this class (methods run in name order).
        r = self.admin.get("/tasks/" + self.task["ident"])
        self.assertStatus(r, 200)
        self.assertEqual(r.json["ident"], self.task["ident"])
        self.assertStatus(self.admin.post("/tasks", {"name": "after errors", "script": "echo"}),
                          201)
        self.assertTrue(self.coord.alive())


class MaxBodyTest(CoordinatorTest):
    extra_args = ("--max-body", "65536")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()

    def test_body_over_limit(self):
        big = {"name": "big", "script": "echo", "comment": "x" * (100 * 1024)}
        self.assertError(self.send_big("POST", "/tasks", big), 413, "payload_too_large")
        self.assertError(self.send_big("PUT", "/scripts/big", {"source": "-" * (100 * 1024)}),
                         413, "payload_too_large")
        # Also when the client doesn't say the length up front (chunked).
        r = self.admin.post("/tasks", raw=iter([json.dumps(big).encode()]),
                            headers={"Transfer-Encoding": "chunked"})
        self.assertError(r, 413, "payload_too_large")
        names = [t["name"] for t in list_all(self.admin, "/tasks", hide="true")]
        self.assertNotIn("big", names)
        self.assertError(self.admin.get("/scripts/big"), 404, "not_found")

    def send_big(self, method, path, body):
        return http_big(self.coord.port, method, "/v3/commands" + path,
                        json.dumps(body).encode(), headers={"api-key": self.admin_key})

    def test_body_under_limit(self):
        r = self.admin.put("/scripts/smaller", {"source": "-" * (60 * 1024) + "\n"})
        self.assertStatus(r, 201)
        self.assertEqual(r.json["size"], 60 * 1024 + 1)

    def test_zz_still_answers(self):
        self.assertStatus(self.admin.get("/tasks"), 200)
        self.assertTrue(self.coord.alive())


class KeyGuessingTest(CoordinatorTest):
    """Repeated unknown keys from one address are slowed down (429 for a minute)."""

    extra_args = ("--auth-fail-limit", "5")

    def test_unknown_keys_then_429(self):
        guesser = self.coord.api("rcs_" + "0" * 48)
        for i in range(6):
            self.assertError(guesser.get("/tasks"), 401, "unauthorized")
        r = guesser.get("/tasks")
        self.assertError(r, 429, "too_many_requests")
        wait = int(r.headers.get("Retry-After", "0"))
        self.assertTrue(0 < wait <= 60, r.headers)
        # while it lasts, a valid key from the same address is refused too: a guess that
        # hits a real key can't be told from one that doesn't
        self.assertError(self.admin.get("/tasks"), 429, "too_many_requests")
        # a request without any key is not a guess and is not counted, but is refused too
        self.assertError(self.coord.api(None).get("/tasks"), 429, "too_many_requests")
        self.assertIn("too many unknown api keys", self.coord.read_log())


class KeyGuessingDefaultTest(CoordinatorTest):
    """The default limit leaves ordinary mistakes alone."""

    def test_a_few_bad_keys_are_only_401(self):
        guesser = self.coord.api("rcs_" + "1" * 48)
        for i in range(30):
            self.assertError(guesser.get("/tasks"), 401, "unauthorized")
        self.assertStatus(self.admin.get("/tasks"), 200)


if __name__ == "__main__":
    unittest.main()
