#!/usr/bin/env python3
"""OWASP API Security Top 10 (2023) battery over every endpoint x method of the REST API.

The operations are read from docs/openapi.json, so a new endpoint is covered as soon as it is
documented; test_00 fails when the document lists one that CALLS (below) doesn't know how to
call, or when CALLS and the document disagree on its role. Against a real mosquitto, a real
SMTP server (the harness's SmtpServer) and the real rcs-coordinator (serve --mqtt --smtp-url),
with two tenants A (admin, operator, viewer, a second admin, a revoked admin key) and B:

- API2 broken authentication: every operation without a key, with an empty, malformed,
  over-long, unknown or revoked key: 401 `unauthorized` with the documented error body (the
  unknown and the revoked key indistinguishable), and nothing changed. The key is looked up
  by its SHA-256 hash, never compared byte by byte (static check of the code path). Key
  guessing: more than --auth-fail-limit unknown or revoked keys from one address make every
  request from it, on every operation, answer 429 with Retry-After (ThrottleTest); a request
  without a key is no guess; another address is not affected.
- API5 function-level authorization: every role below the documented `x-rcs-role` gets 403
  `forbidden` and changes nothing; the documented role itself succeeds with the documented
  code.
- API1 object-level authorization: tenant A's keys on tenant B's objects answer exactly like
  on objects that don't exist (status and body), for every operation with an object in its
  path; B's data is unchanged; no answer to A (lists, object reads, filters naming B's
  objects) holds anything of B; bulk sends naming B's devices (ident list, shared tag, a tag
  only B holds) reject them like unknown devices and publish nothing for them (a paho
  subscriber on the broker sees every message); private tasks are 404 for non-admin users.
- API3 object-property level: every platform-assigned field (the fields of the answer's
  schema that the request schema doesn't have, plus ident/client_root/status/history/...)
  in every POST/PUT/PATCH body is refused with 400 `validation_failed` naming it, as
  docs/api.md promises, and nothing is written; `signature` only alone in a PATCH; no answer
  except the one creating a key ever holds an api key secret.
- API4 resource consumption: page/per_page 0, negative, over 500, huge, non-numeric, with
  NUL on every list: 400 `invalid_parameter`; array fields over the documented maxItems and
  ident_list empty: 400; bodies over --max-body: 413.
- API8 injection: SQL metacharacters, LIKE/GLOB wildcards, NUL (%00) and unicode in every
  path ident, every filter parameter and the body references (entity_ident, ident_list,
  tag, script): a clean 400/404 exactly as documented, never 500, no row that doesn't
  match the literal value; CR/LF in notification addresses refused with 400 on every write;
  CR/LF in task and device names (they reach the mail Subject) never split a header (mails
  checked at the SMTP server). Every answer has Cache-Control: no-store and a JSON body.
- API9 inventory: every documented path answers 405 with the exact Allow list for the
  methods it doesn't document; undocumented paths are 404.

Run (Debian's python3 has paho-mqtt and aiosmtpd):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_api_security.py
RCS_KEEP_TMP=1 keeps the directory (broker and coordinator logs, database).
"""

import hashlib
import http.client
import json
import os
import re
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcs_fixture import StackTest, note  # noqa: E402
from rcs_harness import (SOURCE_DIR, Api, Coordinator, free_port, FakeDevice, Watcher,  # noqa: E402
                         http_big, quote_segment, wait_for, with_query)

DOC_PATH = os.path.join(SOURCE_DIR, "docs", "openapi.json")
with open(DOC_PATH, encoding="utf-8") as _f:
    DOC = json.load(_f)

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ROLES = ("viewer", "operator", "admin")
RANK = {r: i for i, r in enumerate(ROLES)}
FROM = "rcs-security@coordinator.test"
MAIL_TO = "sec-mail@x.test"


def resolve(node):
    """node with its local $ref followed (recursively at the top level)."""
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        target = DOC
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    return node


class Op:
    """One documented operation: method, path template, its parameters and schemas."""

    def __init__(self, method, path, item):
        self.method = method.upper()
        self.path = path
        self.doc = item[method]
        params = [resolve(p) for p in item.get("parameters", []) + self.doc.get("parameters", [])]
        self.path_params = [p for p in params if p["in"] == "path"]
        self.query_params = [p for p in params if p["in"] == "query"]
        self.role = self.doc.get("x-rcs-role")
        self.request_schema = None
        if "requestBody" in self.doc and "application/json" in resolve(
                self.doc["requestBody"])["content"]:  # not an artifact's bytes
            self.request_schema = resolve(
                resolve(self.doc["requestBody"])["content"]["application/json"]["schema"])
        self.ok_codes = sorted(int(c) for c in self.doc["responses"] if c.startswith("2"))

    @property
    def key(self):
        return (self.method, self.path)

    def response_schemas(self):
        for code, resp in self.doc["responses"].items():
            if code.startswith("2"):
                content = resolve(resp).get("content", {}).get("application/json")
                if content and "schema" in content:
                    yield resolve(content["schema"])

    def __repr__(self):
        return "%s %s" % self.key


def operations():
    """The operations that take an api key (those with security: [], GET /health and
    GET /openapi.json, are test_api_service.py's; the device route, served under servers of
    its own with an artifact token, test_device_downloads.py's)."""
    ops = []
    for path, item in DOC["paths"].items():
        if "servers" in item:
            continue
        for m in HTTP_METHODS:
            if m in item and item[m].get("security") != []:
                ops.append(Op(m, path, item))
    return ops


OPS = operations()


# ---------------------------------------------------------------------------------------
# The table: how to call each documented operation. role is what docs/api.md's role table
# says (checked against x-rcs-role), ok the success code, body(fx) a valid body built from
# the tenant fixtures fx, fresh: the call consumes the object its path names (a new one is
# made for each call that should succeed), creates: the call succeeds on a name not in use
# (and creates the object).

class Call:
    def __init__(self, role, ok, body=None, fresh=False, creates=False, raw=None, query=None):
        self.role, self.ok, self.body, self.fresh = role, ok, body, fresh
        self.creates = creates
        # a body of raw bytes (raw(fx), new ones each call) and the query it goes with
        self.raw, self.query = raw, query


CALLS = {
    ("GET", "/tasks"): Call("viewer", 200),
    ("POST", "/tasks"): Call("admin", 201, lambda fx: {
        "name": "sec task", "script": "echo", "allow_offline": True}),
    ("GET", "/tasks/{task_ident}"): Call("viewer", 200),
    ("PUT", "/tasks/{task_ident}"): Call("admin", 200, lambda fx: {
        "name": "sec put", "script": "echo", "allow_offline": True}),
    ("PATCH", "/tasks/{task_ident}"): Call("admin", 200, lambda fx: {"comment": "sec patch"}),
    ("DELETE", "/tasks/{task_ident}"): Call("admin", 204, fresh=True),
    ("GET", "/tasks/{task_ident}/jobs"): Call("viewer", 200),
    ("POST", "/tasks/{task_ident}/jobs"): Call("operator", 201, lambda fx: {
        "entity_ident": fx.device}),
    ("POST", "/tasks/{task_ident}/jobs/list"): Call("operator", 201, lambda fx: {
        "ident_list": [fx.device]}),
    ("POST", "/tasks/{task_ident}/jobs/tags"): Call("operator", 201, lambda fx: {
        "tag": fx.tag}),
    ("GET", "/jobs"): Call("viewer", 200),
    ("GET", "/jobs/{job_ident}"): Call("viewer", 200),
    ("GET", "/jobs/{job_ident}/history"): Call("viewer", 200),
    ("PATCH", "/jobs/{job_ident}/cancel"): Call("operator", 200, lambda fx: {}, fresh=True),
    ("GET", "/jobs/{job_ident}/notifications"): Call("viewer", 200),
    ("GET", "/groups"): Call("viewer", 200),
    ("GET", "/groups/{group_ident}"): Call("viewer", 200),
    ("PATCH", "/groups/{group_ident}/pause"): Call("operator", 200, lambda fx: {}, fresh=True),
    ("PATCH", "/groups/{group_ident}/resume"): Call("operator", 200, lambda fx: {}),
    ("PATCH", "/groups/{group_ident}/cancel"): Call("operator", 200, lambda fx: {}, fresh=True),
    ("GET", "/scripts"): Call("viewer", 200),
    ("GET", "/scripts/{name}"): Call("viewer", 200),
    ("PUT", "/scripts/{name}"): Call("admin", 201, lambda fx: {"source": "return 1\n"},
                                     fresh=True, creates=True),
    ("DELETE", "/scripts/{name}"): Call("admin", 204, fresh=True),
    ("GET", "/devices"): Call("viewer", 200),
    ("POST", "/devices"): Call("admin", 201, lambda fx: {"name": "sec dev", "tags": [fx.tag]}),
    ("GET", "/devices/{entity_ident}"): Call("viewer", 200),
    ("PATCH", "/devices/{entity_ident}"): Call("admin", 200, lambda fx: {"name": "sec renamed"}),
    ("DELETE", "/devices/{entity_ident}"): Call("admin", 204, fresh=True),
    ("GET", "/keys"): Call("viewer", 200),
    ("GET", "/whoami"): Call("viewer", 200),
    ("POST", "/keys"): Call("admin", 201, lambda fx: {"user": "sec-new", "role": "viewer"}),
    ("DELETE", "/keys/{ident}"): Call("admin", 204, fresh=True),
    # webhooks and the audit log: admin only, reads included
    ("GET", "/webhooks"): Call("admin", 200),
    ("POST", "/webhooks"): Call("admin", 201, lambda fx: {
        "url": HOOK_URL, "events": ["job.status"]}),
    ("GET", "/webhooks/{webhook_ident}"): Call("admin", 200),
    ("PATCH", "/webhooks/{webhook_ident}"): Call("admin", 200, lambda fx: {"active": False}),
    ("DELETE", "/webhooks/{webhook_ident}"): Call("admin", 204, fresh=True),
    ("GET", "/webhooks/{webhook_ident}/deliveries"): Call("admin", 200),
    ("GET", "/audit"): Call("admin", 200),
    # artifacts: an upload is raw bytes (new ones each call: the same again would be 200)
    ("GET", "/artifacts"): Call("viewer", 200),
    ("POST", "/artifacts"): Call("admin", 201, raw=lambda fx: os.urandom(48),
                                 query="name=sec-artifact"),
    ("GET", "/artifacts/{artifact_ident}"): Call("viewer", 200),
    ("DELETE", "/artifacts/{artifact_ident}"): Call("admin", 204, fresh=True),
    ("GET", "/artifacts/{artifact_ident}/content"): Call("viewer", 200),
}
# webhooks send to a loopback port nobody listens on (--webhook-allow-net 127.0.0.1/32)
HOOK_URL = "http://127.0.0.1:%d/sec-hook" % free_port()

# what a path parameter (by its name in the document) names
PARAM_KIND = {"task_ident": "task", "job_ident": "job", "group_ident": "group",
              "entity_ident": "device", "ident": "key", "name": "script",
              "webhook_ident": "webhook", "artifact_ident": "artifact"}
# what a uuid filter parameter names
FILTER_KIND = {"task_ident": "task", "group_ident": "group", "entity_ident": "device"}
# what a list names (its ident_prefix and ident_suffix filters match those idents)
LIST_KIND = {"/jobs": "job", "/tasks/{task_ident}/jobs": "job", "/tasks": "task",
             "/devices": "device", "/groups": "group"}
IDENT_RE = re.compile(r"^[0-9a-fA-F-]{1,36}$")

# the patterns the document gives for tags and script names
TAG_RE = re.compile(resolve(DOC["components"]["schemas"]["DeviceCreate"])
                    ["properties"]["tags"]["items"]["pattern"])
SCRIPT_RE = re.compile(resolve(DOC["components"]["parameters"]["script_name"])
                       ["schema"]["pattern"])
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                     r"[0-9a-fA-F]{12}$")
JOB_STATUS_FILTER = resolve(DOC["components"]["schemas"]["JobStatusFilter"])["enum"]

# SQL and LIKE/GLOB metacharacters, NUL and unicode: values for idents, filters, references
META = ["'", "\"", ";", "--", "%", "_", "\\", "\x00", "\x00x", "*", "?", "[a-z]", "..",
        "' OR '1'='1", "1' OR 1=1 --", "\"; DROP TABLE tasks; --", "%25", "%_%", "a%",
        "\u00e9", "\u202e", "\U0001f4a5", "\uff07 OR 1=1", "\u2028", "x\r\ny"]
# suffixes and edits of a valid value (a LIKE would still match, a NUL would cut it)
SUFFIXES = ["\x00", "\x00x", "'", "%", "_", "--", " OR 1=1", ";", "\\"]


def near_values(valid):
    """Values that look like valid but aren't: valid + suffixes, one character replaced by
    a wildcard, a prefix with a wildcard."""
    out = [valid + s for s in SUFFIXES]
    out += [valid[:-1] + "_", valid[:-1] + "%", valid[:3] + "%", "%" + valid[3:],
            valid[:-2] + "_" + valid[-1], " " + valid]
    return out


RECORDED = []   # (method, path, key, Response) of every request the battery made
SECRETS = []    # every api key secret the battery knows


class RecApi(Api):
    """An Api that records every answer (for the checks over all answers)."""

    def request(self, method, path, body=None, raw=None, headers=None):
        r = super().request(method, path, body=body, raw=raw, headers=headers)
        RECORDED.append((method, path, self.key, r))
        return r


def hdr(resp, name):
    return {k.lower(): v for k, v in resp.headers.items()}.get(name.lower())


def check_recorded(tc, records):
    """Checks over every recorded answer: never 5xx, Cache-Control no-store, JSON bodies,
    error bodies of the documented shape, no api key secret except in the answer that
    created it, no key hash."""
    hashes = [hashlib.sha256(s.encode()).hexdigest() for s in SECRETS]
    for method, path, key, r in records:
        where = "%s %s -> %r" % (method, path, r)
        tc.assertLess(r.status, 500, where)
        tc.assertIn("no-store", hdr(r, "Cache-Control") or "", where)
        if r.raw and hdr(r, "Content-Type") == "application/octet-stream":
            tc.assertIn(r.status, (200, 206), where)  # an artifact's bytes
            tc.assertTrue(path.endswith("/content"), where)
            continue
        if r.raw:
            tc.assertTrue((hdr(r, "Content-Type") or "").startswith("application/json"),
                          where)
            tc.assertIsNotNone(r.json, where)
        if r.status >= 400:
            tc.assertEqual(list(r.json), ["error"], where)
            tc.assertIsInstance(r.json["error"].get("code"), str, where)
            tc.assertTrue(r.json["error"].get("message"), where)
        tc.assertNotIn("key_hash", r.raw, where)
        for s, h in zip(SECRETS, hashes):
            tc.assertNotIn(h, r.raw, where)
            if s in r.raw:
                tc.assertTrue(method == "POST" and path == "/keys" and r.status == 201 and
                              r.json.get("api_key") == s, "secret leaked: " + where)


# ---------------------------------------------------------------------------------------

class Tenant:
    """A tenant with standing objects (task, device with a tag, job, group, script, key)
    made by its admin, fresh(kind) for objects a call consumes, and known: every ident and
    name of it (for the leak checks)."""

    def __init__(self, api, client_root, label):
        self.api = api
        self.client_root = client_root
        self.label = label
        self.known = {client_root}
        self.tag = "sec-%s-%s" % (label, uuid.uuid4().hex[:8])
        self.task = self.fresh("task")
        self.device = self.fresh("device")
        self.job = self.fresh("job")
        self.group = self.fresh("group")
        self.script = self.fresh("script")
        self.key = self.fresh("key")
        self.webhook = self.fresh("webhook")
        self.artifact = self.fresh("artifact")
        for k in self.api_list("/keys"):
            self.known.add(k["ident"])

    def api_list(self, path):
        r = self.api.get(with_query(path, per_page=500))
        assert r.status == 200, r
        return r.json["items"]

    def expect(self, r, status):
        if r.status != status:
            raise AssertionError("tenant %s fixture: expected %d, got %r" % (
                self.label, status, r))
        return r.json

    def fresh(self, kind, tags=None):
        n = uuid.uuid4().hex[:8]
        a = self.api
        if kind == "task":
            v = self.expect(a.post("/tasks", {"name": "sec-%s-task-%s" % (self.label, n),
                                              "script": "echo", "allow_offline": True}),
                            201)["ident"]
        elif kind == "device":
            v = self.expect(a.post("/devices", {
                "name": "sec-%s-dev-%s" % (self.label, n),
                "tags": [self.tag] if tags is None else list(tags)}), 201)["entity_ident"]
        elif kind == "job":
            v = self.expect(a.post("/tasks/%s/jobs" % self.task,
                                   {"entity_ident": self.device}), 201)["ident"]
        elif kind == "group":
            j = self.expect(a.post("/tasks/%s/jobs/list" % self.task, {
                "ident_list": [self.device], "group_name": "sec-%s-%s" % (self.label, n)}),
                201)
            v = j["group"]["ident"]
            for item in j["items"]:
                self.known.add(item["ident"])
        elif kind == "script":
            v = "sec-%s-script-%s" % (self.label, n)
            self.expect(a.put("/scripts/" + v, {"source": "return %r\n" % n}), 201)
        elif kind == "key":
            k = self.expect(a.post("/keys", {"user": "sec-%s-%s" % (self.label, n),
                                             "role": "viewer"}), 201)
            SECRETS.append(k["api_key"])
            v = k["ident"]
        elif kind == "webhook":
            v = self.expect(a.post("/webhooks", {"url": HOOK_URL, "events": ["job.status"]}),
                            201)["ident"]
        elif kind == "artifact":
            v = self.expect(a.request("POST", "/artifacts?name=sec-%s-art-%s" % (self.label, n),
                                      raw=os.urandom(64)), 201)["ident"]
        else:
            raise AssertionError("no fixture of kind %r" % kind)
        self.known.add(v)
        return v

    def standing(self, kind):
        return getattr(self, {"task": "task", "device": "device", "job": "job",
                              "group": "group", "script": "script", "key": "key",
                              "webhook": "webhook", "artifact": "artifact"}[kind])

    def snapshot(self):
        """What this tenant holds, as its admin sees it (job statuses only as cancelled or
        not: the transport moves them on its own)."""
        def items(path, **q):
            out, page = [], 1
            while True:
                r = self.api.get(with_query(path, page=page, per_page=500, **q))
                assert r.status == 200, r
                out += r.json["items"]
                if page >= r.json["total_pages"]:
                    return out
                page += 1
        # what a device reports itself (online, last_seen...) is no API write: left out
        reported = ("online", "last_seen", "reported_tags", "agent_version")
        return {
            "tasks": {t["ident"]: t for t in items("/tasks", hide="true")},
            "devices": {d["entity_ident"]: {k: v for k, v in d.items() if k not in reported}
                        for d in items("/devices")},
            "keys": {k["ident"]: k for k in items("/keys")},
            "scripts": {s["name"]: s for s in items("/scripts")},
            "groups": {g["ident"]: g for g in items("/groups")},
            "jobs": {j["ident"]: j["status"] == "cancelled" for j in items("/jobs")},
            "webhooks": {h["ident"]: h for h in items("/webhooks")},
            "artifacts": {x["ident"]: x for x in items("/artifacts")},
        }


MISSING = {"task": "00000000-0000-7000-8000-000000000001",
           "job": "00000000-0000-7000-8000-000000000002",
           "group": "00000000-0000-7000-8000-000000000003",
           "device": "00000000-0000-7000-8000-000000000004",
           "key": "00000000-0000-7000-8000-000000000005",
           "script": "sec-no-such-script",
           "webhook": "00000000-0000-7000-8000-000000000006",
           "artifact": "sha256:" + "0" * 64}


class SecurityTest(StackTest):
    """One mosquitto, one SMTP server, one coordinator (serve --mqtt --smtp-url) and the two
    tenants for the whole class."""

    workdir_prefix = "rcs-security-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.start_broker(persistence=False)
        cls.smtp = cls.start_smtp()
        # a limit no test reaches: the battery sends hundreds of bad keys from 127.0.0.1
        cls.coord = cls.own(Coordinator(cls.workdir, extra_args=[
            "--mqtt", cls.broker.url, "--smtp-url", cls.smtp.url, "--smtp-from", FROM,
            "--auth-fail-limit", "1000000", "--webhook-allow-net", "127.0.0.1/32"]))
        a = cls.coord.init_tenant(user="admin")
        b = cls.coord.init_tenant(user="eve")
        SECRETS.extend([a["api_key"], b["api_key"]])
        roles = {"operator": ("olga", "operator"), "viewer": ("vera", "viewer"),
                 "admin2": ("adam", "admin"), "revoked": ("rex", "admin")}
        keys = {}
        for name, (user, role) in roles.items():
            keys[name] = cls.coord.create_key(a["client_root"], user, role)
            SECRETS.append(keys[name]["api_key"])
        cls.coord.start()
        wait_for(lambda: "status reports: " in cls.coord.read_log(), timeout=20,
                 what="the coordinator connected to the broker")
        cls.monitor = Monitor(cls.broker).start()
        cls.clients.append(cls.monitor)
        api = lambda k: RecApi(cls.coord.base, k)  # noqa: E731
        cls.keys = {"admin": api(a["api_key"]), "operator": api(keys["operator"]["api_key"]),
                    "viewer": api(keys["viewer"]["api_key"])}
        cls.admin = cls.keys["admin"]
        cls.admin2 = api(keys["admin2"]["api_key"])
        cls.revoked = api(keys["revoked"]["api_key"])
        r = cls.admin.delete("/keys/" + keys["revoked"]["ident"])
        assert r.status == 204, r
        cls.A = Tenant(cls.admin, a["client_root"], "a")
        cls.B = Tenant(api(b["api_key"]), b["client_root"], "b")

    def tearDown(self):
        self.assertTrue(self.coord.alive(), "coordinator died:\n" + self.coord.read_log()[-3000:])

    # -- helpers ---------------------------------------------------------------------------

    def assertError(self, r, status, code, field=None, msg=""):
        where = "%s %r" % (msg, r)
        self.assertEqual(r.status, status, where)
        self.assertIsInstance(r.json, dict, where)
        self.assertEqual(list(r.json), ["error"], where)
        e = r.json["error"]
        self.assertEqual(e.get("code"), code, where)
        self.assertIsInstance(e.get("message"), str, where)
        self.assertTrue(e["message"], where)
        self.assertIsInstance(e.get("details", {}), dict, where)
        if field is not None:
            self.assertEqual(e.get("details", {}).get("field"), field, where)

    def assertSameAnswer(self, got, like, msg=""):
        """got answers like like: same status; an error has the same body, a success the
        same shape (keys)."""
        where = "%s\n  got:  %r\n  like: %r" % (msg, got, like)
        self.assertEqual(got.status, like.status, where)
        if like.status >= 400:
            self.assertEqual(got.json, like.json, where)
        elif isinstance(like.json, dict):
            self.assertEqual(sorted(got.json), sorted(like.json), where)

    def path(self, op, value):
        """op's path with its path parameter (if any) set to value (escaped)."""
        p = op.path
        for prm in op.path_params:
            p = p.replace("{%s}" % prm["name"], quote_segment(value))
        return p

    def obj(self, op, tenant, fresh=False):
        """The object of tenant op's path names (a fresh one when fresh)."""
        if not op.path_params:
            return None
        kind = PARAM_KIND[op.path_params[0]["name"]]
        return tenant.fresh(kind) if fresh else tenant.standing(kind)

    def missing(self, op):
        """A value op's path parameter could have that names nothing (a new script name
        each time: a PUT creates it)."""
        if not op.path_params:
            return None
        kind = PARAM_KIND[op.path_params[0]["name"]]
        return "sec-none-" + uuid.uuid4().hex[:8] if kind == "script" else MISSING[kind]

    def call(self, api, op, value=None, body=None, fx=None):
        c = CALLS[op.key]
        path, raw = self.path(op, value), None
        if body is None and c.raw is not None:
            path, raw = path + "?" + c.query, c.raw(fx or self.A)
        if body is None and c.body is not None:
            body = c.body(fx or self.A)
        return api.request(op.method, path, body=body, raw=raw)

    def online(self, tenant, ent):
        """Connects a scripted device (FakeDevice, no automatic answers) for ent and waits
        until the coordinator has it online; returns it."""
        fake = FakeDevice(self.broker, tenant.client_root, ent, auto=False).start()
        self.fakes.append(fake)
        wait_for(lambda: tenant.api.get("/devices/" + ent).json.get("online") is True,
                 timeout=15, what="device %s online" % ent)
        return fake

    def ops(self, pred=lambda op: True):
        return [op for op in OPS if pred(op)]

    # -- the table -------------------------------------------------------------------------

    def test_00_table_covers_openapi(self):
        documented = {op.key for op in OPS}
        self.assertEqual(sorted(documented - set(CALLS)), [],
                         "documented operations the battery doesn't know how to call: "
                         "add them to CALLS")
        self.assertEqual(sorted(set(CALLS) - documented), [],
                         "CALLS holds operations docs/openapi.json doesn't document")
        self.assertGreaterEqual(len(OPS), 29)
        for op in OPS:
            with self.subTest(op=op):
                c = CALLS[op.key]
                self.assertEqual(op.role, c.role, "x-rcs-role differs from the api.md roles")
                self.assertIn(c.ok, op.ok_codes)
                for p in op.path_params:
                    self.assertIn(p["name"], PARAM_KIND, "unknown path parameter")
                self.assertEqual(op.request_schema is not None, c.body is not None,
                                 "a body where the document has none, or none where it has")
                self.assertIn("401", op.doc["responses"])
                if op.role != "viewer":
                    self.assertIn("403", op.doc["responses"])
                if op.path_params and not c.creates:
                    self.assertIn("404", op.doc["responses"])

    # -- API2: authentication --------------------------------------------------------------

    def test_api2_no_unknown_revoked_key_401(self):
        before = self.A.snapshot()
        # 'a' * 300: over the 256 bytes a key may have; the admin key altered by one byte
        admin = self.admin.key
        bad = {"none": None, "empty": "", "unknown": "rcs_" + "0" * 48, "sql": "' OR '1'='1",
               "long": "a" * 300, "altered": admin[:-1] + ("0" if admin[-1] != "0" else "1"),
               "prefix": admin[:-8], "revoked": self.revoked.key}
        answers = {}
        for op in OPS:
            for name, key in bad.items():
                with self.subTest(op=op, key=name):
                    r = self.call(RecApi(self.coord.base, key), op, self.obj(op, self.A))
                    self.assertError(r, 401, "unauthorized")
                    answers.setdefault(name, set()).add(json.dumps(r.json, sort_keys=True))
        self.assertEqual(before, self.A.snapshot(), "a request without a valid key changed data")
        # one answer per kind of key, whatever the operation and whether its object exists
        for name, bodies in answers.items():
            self.assertEqual(len(bodies), 1, (name, bodies))
        # a revoked key can't be told from an unknown one
        self.assertEqual(answers["revoked"], answers["unknown"])
        self.assertEqual(answers["revoked"], answers["altered"])

    def test_api2_key_lookup_is_by_hash(self):
        # Constant-time comparison: the coordinator never compares key bytes. It hashes the
        # key it receives (SHA-256) and looks the hash up in SQLite (WHERE key_hash = ?, an
        # index lookup); a timing difference can only tell something about a hash prefix,
        # which doesn't help to find a key. Checked on the code path, so that a byte
        # comparison of secrets (strcmp/memcmp) can't come in unnoticed.
        with open(os.path.join(SOURCE_DIR, "coordinator", "auth.c"), encoding="utf-8") as f:
            src = f.read()
        m = re.search(r"\nenum auth_result auth_check\(.*?\n}\n", src, re.S)
        self.assertIsNotNone(m, "auth_check not found in coordinator/auth.c")
        body = m.group(0)
        self.assertRegex(body, r"auth_key_hash\(\s*key\s*,\s*hash\s*\)")
        self.assertRegex(body, r"store_key_lookup\([^;]*\bhash\b")
        self.assertNotRegex(body, r"(mem|str|strn|strcase|bcmp)cmp\s*\([^;]*\bkey\b")
        with open(os.path.join(SOURCE_DIR, "coordinator", "store_keys.c"), encoding="utf-8") as f:
            store = f.read()
        m = re.search(r"\nenum rcs_err store_key_lookup\(.*?\n}\n", store, re.S)
        self.assertIsNotNone(m, "store_key_lookup not found in coordinator/store_keys.c")
        self.assertIn("key_hash = ?", m.group(0))

    # -- API5: function-level authorization ------------------------------------------------

    def test_api5_roles(self):
        before = self.A.snapshot()
        for op in OPS:
            for role in ROLES[:RANK[op.role]]:
                with self.subTest(op=op, role=role):
                    r = self.call(self.keys[role], op, self.obj(op, self.A))
                    self.assertError(r, 403, "forbidden")
        # nor can a body ask for more: roles are the three documented ones, exactly
        for role in ("root", "superadmin", "owner", "ADMIN", "Admin", "admin ", " admin",
                     "admin\x00", "admin\r\n", "", "operator,admin", ["admin"], 2, None):
            with self.subTest(key_role=role):
                r = self.admin.post("/keys", {"user": "sec-escalate", "role": role})
                self.assertError(r, 400, "validation_failed", "role")
        self.assertEqual(before, self.A.snapshot(), "a request with a weak role changed data")
        # the documented role itself may
        for op in OPS:
            c = CALLS[op.key]
            with self.subTest(op=op, role=op.role):
                value = ("sec-new-" + uuid.uuid4().hex[:8] if c.creates else
                         self.obj(op, self.A, fresh=c.fresh))
                r = self.call(self.keys[op.role], op, value)
                self.assertEqual(r.status, c.ok, r)
                if op.key == ("POST", "/keys"):
                    SECRETS.append(r.json["api_key"])

    # -- API1: object-level authorization --------------------------------------------------

    def attackers(self):
        """(keys by role, their tenant, the other tenant): A's three roles against B, and
        B's admin against A."""
        return [(self.keys, self.A, self.B), ({"admin": self.B.api}, self.B, self.A)]

    def test_api1_other_tenant_objects_like_missing(self):
        for keys, own, victim in self.attackers():
            self.other_tenant_objects_like_missing(keys, own, victim)

    def other_tenant_objects_like_missing(self, keys, own, victim):
        # the victim's objects first (a fresh one for each call that would consume it)
        cases = [(op, role, self.obj(op, victim, CALLS[op.key].fresh))
                 for op in self.ops(lambda op: op.path_params) for role in keys]
        before = victim.snapshot()
        for op, role, value in cases:
            with self.subTest(op=op, role=role, victim=victim.label):
                foreign = self.call(keys[role], op, value, fx=own)
                missing = self.call(keys[role], op, self.missing(op), fx=own)
                self.assertSameAnswer(foreign, missing, "another tenant's object vs none")
                if RANK[role] < RANK[op.role]:
                    self.assertEqual(foreign.status, 403, foreign)
                elif op.key == ("PUT", "/scripts/{name}"):
                    # scripts are named per tenant: A gets its own script of that name
                    self.assertEqual(foreign.status, 201, foreign)
                    self.assertEqual(foreign.json["tasks_updated"], [])
                else:
                    self.assertError(foreign, 404, "not_found")
        self.assertEqual(before, victim.snapshot(),
                         "tenant %s changed tenant %s's data" % (own.label, victim.label))

    def test_api1_answers_hold_nothing_of_the_other_tenant(self):
        # every GET (lists with every page, objects) with every role
        for keys, own, other in self.attackers():
            for op in self.ops(lambda op: op.method == "GET"):
                for role in keys:
                    with self.subTest(op=op, role=role, tenant=own.label):
                        if RANK[role] < RANK[op.role]:  # the admin reads
                            self.assertError(keys[role].get(self.path(op, self.obj(op, own))),
                                             403, "forbidden")
                            continue
                        self.get_all_pages(keys[role], op, own, other)

    def get_all_pages(self, api, op, own, other):
        """GET op (with own's object in the path) page by page: nothing of other, every
        client_root own's."""
        path = self.path(op, self.obj(op, own))
        page = 1
        while True:
            q = {"page": page, "per_page": 500} if any(
                p["name"] == "per_page" for p in op.query_params) else {}
            if op.key == ("GET", "/tasks"):
                q["hide"] = "true"
            r = api.get(with_query(path, **q))
            self.assertEqual(r.status, 200, r)
            # the audit log holds the paths own's requests named, whatever they named
            for ident in other.known if op.key != ("GET", "/audit") else ():
                self.assertNotIn(ident, r.raw)
            if r.json is None and path.endswith("/content"):
                break  # an artifact's bytes (own's)
            items = r.json.get("items") if "items" in r.json else [r.json]
            for item in items:
                if "client_root" in item:
                    self.assertEqual(item["client_root"], own.client_root)
            if "total_pages" not in r.json or page >= r.json["total_pages"]:
                break
            page += 1

    def test_api1_filters_naming_b_objects(self):
        for op in self.ops(lambda op: op.method == "GET"):
            for prm in op.query_params:
                name = prm["name"]
                if name in FILTER_KIND:
                    kind = FILTER_KIND[name]
                    foreign, missing = self.B.standing(kind), MISSING[kind]
                elif name in ("ident_prefix", "ident_suffix"):
                    # B's object's whole ident: a prefix and a suffix of itself
                    kind = LIST_KIND[op.path]
                    foreign, missing = self.B.standing(kind), MISSING[kind]
                elif name == "tag":
                    foreign, missing = self.B.tag, "sec-no-such-tag"
                else:
                    continue
                for role in ROLES:
                    with self.subTest(op=op, filter=name, role=role):
                        path = self.path(op, self.obj(op, self.A))
                        f = self.keys[role].get(with_query(path, **{name: foreign}))
                        m = self.keys[role].get(with_query(path, **{name: missing}))
                        self.assertEqual(f.status, 200, f)
                        if name == "tag" and op.path == "/groups":
                            # a tag is a word, not B's object: A's own sends to the same
                            # word are A's groups, and the only ones it finds
                            own = self.keys[role].get(with_query(path, per_page=500)).json
                            self.assertEqual([g["ident"] for g in f.json["items"]],
                                             [g["ident"] for g in own["items"]
                                              if g["tag"] == foreign])
                            continue
                        self.assertEqual(f.json, m.json)
                        self.assertEqual(f.json["items"], [])

    def test_api1_body_references_to_b(self):
        a, b = self.A, self.B
        # a job for B's device: like a missing device
        for role in ("operator", "admin"):
            f = self.keys[role].post("/tasks/%s/jobs" % a.task, {"entity_ident": b.device})
            m = self.keys[role].post("/tasks/%s/jobs" % a.task,
                                     {"entity_ident": MISSING["device"]})
            self.assertSameAnswer(f, m)
            self.assertError(f, 404, "not_found", "entity_ident")
        # a task using B's script: like a missing script (the message names the script)
        for method, path, body in (("POST", "/tasks", {"name": "x"}),
                                   ("PUT", "/tasks/" + a.task, {"name": "x"}),
                                   ("PATCH", "/tasks/" + a.task, {})):
            f = self.admin.request(method, path, body=dict(body, script=b.script))
            m = self.admin.request(method, path, body=dict(body, script=MISSING["script"]))
            self.assertError(f, 400, "validation_failed", "script")
            self.assertEqual(f.json["error"]["message"].replace(b.script, "<s>"),
                             m.json["error"]["message"].replace(MISSING["script"], "<s>"))
        self.assertNotIn(b.device, json.dumps(a.snapshot()))

    def test_api1_bulk_sends_reject_b_devices(self):
        a, b = self.A, self.B
        shared = "sec-shared-" + uuid.uuid4().hex[:8]
        b_only = "sec-bonly-" + uuid.uuid4().hex[:8]
        a1 = a.fresh("device", tags=[shared])
        b1, b2 = b.fresh("device", tags=[shared]), b.fresh("device", tags=[shared])
        b3 = b.fresh("device", tags=[b_only])
        targets = (b1, b2, b3)
        # all online: a job created for one of B's devices would be published at once
        self.online(a, a1)
        fakes = [self.online(b, d) for d in targets]
        before = b.snapshot()
        op = self.keys["operator"]
        base = "/tasks/%s/jobs" % a.task

        r = op.post(base + "/list", {"ident_list": [b1, a1, MISSING["device"], b2],
                                     "group_name": "sec-list"})
        self.assertEqual(r.status, 201, r)
        self.assertEqual([j["entity_ident"] for j in r.json["items"]], [a1])
        rejected = {x["entity_ident"]: x["error"] for x in r.json["rejected"]}
        self.assertEqual(sorted(rejected), sorted([b1, b2, MISSING["device"]]))
        self.assertEqual(rejected[b1], rejected[MISSING["device"]])
        self.assertEqual(rejected[b2], rejected[MISSING["device"]])
        self.assertEqual(rejected[b1]["code"], "not_found")
        group = r.json["group"]["ident"]
        a_jobs = [j["ident"] for j in r.json["items"]]

        def no_group(resp):
            """The answer without its group's ident and time: a named send makes its group
            (empty) whatever the devices, so the group says nothing of B's devices."""
            body = dict(resp.json)
            if body.get("group"):
                body["group"] = {k: v for k, v in body["group"].items()
                                 if k not in ("ident", "created_at")}
            return body

        # only B's devices: like only missing ones (an empty group either way)
        f = op.post(base + "/list", {"ident_list": [b1], "group_name": "sec-none"})
        m = op.post(base + "/list", {"ident_list": [MISSING["device"]], "group_name": "sec-none"})
        self.assertEqual(f.status, 201, f)
        self.assertEqual(json.loads(json.dumps(no_group(f)).replace(b1, "<d>")),
                         json.loads(json.dumps(no_group(m)).replace(MISSING["device"], "<d>")))
        self.assertEqual(f.json["items"], [])
        self.assertEqual(op.get("/groups/" + f.json["group"]["ident"]).json["total"], 0)

        # a tag A and B both use: A's device only, B's devices not even named
        r = op.post(base + "/tags", {"tag": shared, "group_name": "sec-tag"})
        self.assertEqual(r.status, 201, r)
        self.assertEqual([j["entity_ident"] for j in r.json["items"]], [a1])
        self.assertEqual(r.json["rejected"], [])
        for d in targets:
            self.assertNotIn(d, r.raw)
        a_jobs += [j["ident"] for j in r.json["items"]]
        # a tag only B holds: like a tag nobody holds
        f = op.post(base + "/tags", {"tag": b_only, "group_name": "sec-none"})
        m = op.post(base + "/tags", {"tag": "sec-no-such-tag", "group_name": "sec-none"})
        self.assertEqual(f.status, 201, f)
        self.assertEqual((f.json["items"], f.json["rejected"]), ([], []))
        self.assertEqual(no_group(f), no_group(m))

        self.assertEqual(self.admin.get("/groups/" + group).json.get("total"), 1)
        # A's jobs went out on the broker: by then B's would have too
        wait_for(lambda: all(any(j in t for t, _ in self.monitor.received()) for j in a_jobs),
                 timeout=20, what="A's bulk jobs published")
        time.sleep(0.5)
        for topic, payload in self.monitor.received():
            if "/jobs/" not in topic and "/events/" not in topic:
                continue   # the devices' own state messages
            for d in targets:
                self.assertNotIn(d, topic)
                self.assertNotIn(d.encode(), payload, topic)
        for f in fakes:
            self.assertEqual(f.jobs_received(), [])
        self.assertEqual(before, b.snapshot())
        for d in targets:
            self.assertEqual(b.api.get(with_query("/jobs", entity_ident=d)).json["items"], [])

    def test_api1_private_tasks(self):
        a = self.A
        r = self.admin.post("/tasks", {"name": "sec private", "script": "echo", "public": False,
                                       "allow_offline": True})
        self.assertEqual(r.status, 201, r)
        private = r.json["ident"]
        a.known.add(private)
        # another admin of the tenant sees it
        self.assertEqual(self.admin2.get("/tasks/" + private).status, 200)
        for role in ("viewer", "operator"):
            api = self.keys[role]
            for method, path, body in (
                    ("GET", "/tasks/%s", None), ("GET", "/tasks/%s/jobs", None),
                    ("POST", "/tasks/%s/jobs", {"entity_ident": a.device}),
                    ("POST", "/tasks/%s/jobs/list", {"ident_list": [a.device]}),
                    ("POST", "/tasks/%s/jobs/tags", {"tag": a.tag})):
                with self.subTest(role=role, method=method, path=path):
                    f = api.request(method, path % private, body=body)
                    m = api.request(method, path % MISSING["task"], body=body)
                    self.assertSameAnswer(f, m)
                    self.assertEqual(f.status, 404 if RANK[role] >= RANK[
                        "operator" if method == "POST" else "viewer"] else 403, f)
            items = api.get(with_query("/tasks", hide="true", per_page=500)).json["items"]
            self.assertNotIn(private, [t["ident"] for t in items])

    def test_api1_private_task_jobs_hidden_too(self):
        # users who get 404 for a private task, and for its job list GET /tasks/<id>/jobs,
        # don't read the same jobs (task name, variables, response) through
        # GET /jobs?task_ident=<id>, GET /jobs/<id>, its history or notifications, and can't
        # cancel them
        r = self.admin.post("/tasks", {"name": "sec private 2", "script": "echo",
                                       "public": False, "allow_offline": True})
        self.assertEqual(r.status, 201, r)
        private = r.json["ident"]
        j = self.admin.post("/tasks/%s/jobs" % private, {"entity_ident": self.A.device})
        self.assertEqual(j.status, 201, j)
        job = j.json["ident"]
        for role in ("viewer", "operator"):
            api = self.keys[role]
            with self.subTest(role=role):
                self.assertSameAnswer(api.get("/jobs/" + job), api.get("/jobs/" + MISSING["job"]))
                self.assertSameAnswer(api.get("/jobs/%s/history" % job),
                                      api.get("/jobs/%s/history" % MISSING["job"]))
                self.assertEqual(api.get(with_query("/jobs", task_ident=private)).json["items"],
                                 [])
        self.assertSameAnswer(self.keys["operator"].patch("/jobs/%s/cancel" % job),
                              self.keys["operator"].patch("/jobs/%s/cancel" % MISSING["job"]))

    def test_api1_private_task_groups_hidden_too(self):
        # a bulk send of a private task makes a group that names the task and counts its
        # jobs by status: users who may not see the task don't see the group either
        groups = {}
        for public in (False, True):
            r = self.admin.post("/tasks", {"name": "sec group %s" % public, "script": "echo",
                                           "public": public, "allow_offline": True})
            self.assertEqual(r.status, 201, r)
            g = self.admin.post("/tasks/%s/jobs/list" % r.json["ident"],
                                {"ident_list": [self.A.device], "group_name": "sec g"})
            self.assertEqual(g.status, 201, g)
            groups[public] = g.json["group"]["ident"]
        private, public = groups[False], groups[True]
        self.assertEqual(self.admin.get("/groups/" + private).status, 200)
        listed = [g["ident"] for g in
                  self.admin.get(with_query("/groups", per_page=500)).json["items"]]
        self.assertIn(private, listed)
        for role in ("viewer", "operator"):
            api = self.keys[role]
            with self.subTest(role=role):
                self.assertSameAnswer(api.get("/groups/" + private),
                                      api.get("/groups/" + MISSING["group"]))
                self.assertEqual(api.get("/groups/" + public).status, 200)
                listed = [g["ident"] for g in
                          api.get(with_query("/groups", per_page=500)).json["items"]]
                self.assertNotIn(private, listed)
                self.assertIn(public, listed)

    # -- API3: object properties -----------------------------------------------------------

    EXTRA_PLATFORM = ("ident", "client_root", "created_at", "created_user", "update_at",
                      "update_user", "status", "history", "version")

    def platform_fields(self, op):
        """Fields the answer has and the request schema doesn't (plus EXTRA_PLATFORM)."""
        inputs = set(op.request_schema.get("properties", {}))
        out = {}
        for schema in op.response_schemas():
            for name, prop in schema.get("properties", {}).items():
                out.setdefault(name, resolve(prop))
                prop = resolve(prop)
                if prop.get("type") == "array" and "items" in prop:
                    for sub, sp in resolve(prop["items"]).get("properties", {}).items():
                        out.setdefault(sub, resolve(sp))
        for name in self.EXTRA_PLATFORM:
            out.setdefault(name, {})
        return {k: v for k, v in out.items() if k not in inputs}

    def sample(self, name, schema):
        if name == "client_root":
            return self.B.client_root
        if name in ("ident", "entity_ident", "task_ident", "job_ident"):
            return str(uuid.uuid4())
        if name == "status":
            return "terminated"
        if name == "signature":
            return {"alg": "ES256", "key_id": "0" * 16, "value": "AAAA"}
        t = schema.get("type")
        return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
            t, "x")

    def test_api3_platform_fields_refused(self):
        before = self.A.snapshot()
        for op in self.ops(lambda op: op.request_schema is not None):
            fields = self.platform_fields(op)
            self.assertTrue(fields, op)
            for name, schema in sorted(fields.items()):
                with self.subTest(op=op, field=name):
                    body = CALLS[op.key].body(self.A)
                    body[name] = self.sample(name, schema)
                    r = self.call(self.admin, op, self.obj(op, self.A), body=body)
                    self.assertError(r, 400, "validation_failed", name)
        after = self.A.snapshot()
        self.assertEqual(before, after, "a body with a platform-assigned field wrote something")

    def test_api3_signature_only_alone(self):
        sig = {"alg": "ES256", "key_id": "0" * 16, "value": "AAAA"}
        v = self.admin.get("/tasks/" + self.A.task).json["version"]
        r = self.admin.patch("/tasks/" + self.A.task, {"comment": "x", "signature": sig})
        self.assertError(r, 400, "validation_failed", "signature")
        self.assertEqual(self.admin.get("/tasks/" + self.A.task).json["version"], v)

    def test_api3_cancel_applies_nothing_from_a_body(self):
        job = self.A.fresh("job")
        r = self.keys["operator"].patch("/jobs/%s/cancel" % job, {
            "status": "terminated", "response": "forged", "client_root": self.B.client_root})
        if r.status == 400:
            self.assertError(r, 400, "validation_failed")
            r = self.keys["operator"].patch("/jobs/%s/cancel" % job)
        self.assertEqual(r.status, 200, r)
        j = self.admin.get("/jobs/" + job).json
        # the response says who cancelled (the key's user), never what the body said
        who = self.keys["operator"].get("/whoami").json["user"]
        self.assertEqual((j["status"], j["response"], j["client_root"]),
                         ("cancelled", "cancelled by %s" % who, self.A.client_root))

    def test_api3_cancel_refuses_body_fields(self):
        # docs/api.md: unknown or platform-assigned fields are refused (400
        # validation_failed); cancel has one body field, an optional reason
        job = self.A.fresh("job")
        r = self.keys["operator"].patch("/jobs/%s/cancel" % job, {"status": "terminated"})
        self.assertError(r, 400, "validation_failed", "status")

    # -- API4: resource consumption --------------------------------------------------------

    BAD_PER_PAGE = ["0", "-1", "501", "1000000", "99999999999999999999", "-99999999999999999999",
                    "abc", "1e3", "5.0", "0x10", "", " 5", "+5", "5 ", "\x00", "5\x00",
                    "5\x00x", "%", "'", "1;--", "\u0665", "5_"]
    BAD_PAGE = ["0", "-1", "abc", "1.5", "", " 1", "+1", "1\x00", "1\x00x", "%", "1000000001",
                "99999999999999999999"]

    def test_api4_paging_limits(self):
        for op in self.ops(lambda op: op.method == "GET"):
            names = [p["name"] for p in op.query_params]
            if "per_page" not in names:
                continue
            path = self.path(op, self.obj(op, self.A))
            for field, values in (("per_page", self.BAD_PER_PAGE), ("page", self.BAD_PAGE)):
                for v in values:
                    with self.subTest(op=op, field=field, value=v):
                        r = self.admin.get(with_query(path, **{field: v}))
                        self.assertError(r, 400, "invalid_parameter", field)
            with self.subTest(op=op, per_page=1):
                r = self.admin.get(with_query(path, per_page=1))
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json["per_page"], 1)
                self.assertLessEqual(len(r.json["items"]), 1)
            with self.subTest(op=op, per_page=500):
                self.assertEqual(self.admin.get(with_query(path, per_page=500)).status, 200)

    def items_for(self, name, n):
        if name == "ident_list":
            return [str(uuid.uuid4()) for _ in range(n)]
        if name == "tags":
            return ["t%d" % i for i in range(n)]
        if name == "notification_mail_list":
            return ["m%d@x.test" % i for i in range(n)]
        if name == "notification_status_list":
            statuses = resolve(DOC["components"]["schemas"]["JobStatus"])["enum"]
            return [statuses[i % len(statuses)] for i in range(n)]
        if name in ("events", "statuses"):  # webhooks
            schema = resolve(DOC["components"]["schemas"]["WebhookCreate"])["properties"][name]
            values = schema["items"]["enum"]
            return [values[i % len(values)] for i in range(n)]
        raise AssertionError("no item generator for array field %r" % name)

    def test_api4_array_limits(self):
        before = self.A.snapshot()
        seen = set()
        for op in self.ops(lambda op: op.request_schema is not None):
            for name, prop in op.request_schema.get("properties", {}).items():
                prop = resolve(prop)
                if prop.get("type") != "array":
                    continue
                cases = []
                if "maxItems" in prop:
                    cases.append(prop["maxItems"] + 1)
                if prop.get("minItems", 0) > 0:
                    cases.append(prop["minItems"] - 1)
                for n in cases:
                    seen.add(name)
                    with self.subTest(op=op, field=name, items=n):
                        body = CALLS[op.key].body(self.A)
                        body[name] = self.items_for(name, n)
                        r = self.call(self.admin, op, self.obj(op, self.A), body=body)
                        self.assertError(r, 400, "validation_failed")
                        self.assertTrue(r.json["error"]["details"]["field"].startswith(name), r)
        # the documented limits (docs/api.md): 1-10000 idents in a bulk send, 64 tags
        self.assertIn("ident_list", seen)
        self.assertIn("tags", seen)
        self.assertEqual(before, self.A.snapshot())

    def test_api4_body_size_limit(self):
        big = json.dumps({"name": "x" * (1024 * 1024 + 1024)}).encode()
        for op in self.ops(lambda op: op.request_schema is not None):
            with self.subTest(op=op):
                r = http_big(self.coord.port, op.method, "/v3/commands" + self.path(
                    op, self.obj(op, self.A)), big, headers={"api-key": self.admin.key})
                RECORDED.append((op.method, op.path, self.admin.key, r))
                self.assertError(r, 413, "payload_too_large")

    # -- API8: injection -------------------------------------------------------------------

    def test_api8_metacharacters_in_path_idents(self):
        before = self.B.snapshot()
        for op in self.ops(lambda op: op.path_params):
            kind = PARAM_KIND[op.path_params[0]["name"]]
            values = META + near_values(self.A.standing(kind))
            if kind != "script":
                values.append(self.A.standing(kind).upper())
            missing = self.call(self.admin, op, self.missing(op))
            for v in values:
                with self.subTest(op=op, value=v):
                    r = self.call(self.admin, op, v)
                    if kind == "artifact":
                        # an ident that is not sha256: and 64 lowercase hex digits
                        self.assertError(r, 400, "invalid_parameter", "ident")
                    elif kind == "script" and op.method == "PUT":
                        if SCRIPT_RE.match(v):
                            # a valid name: the tenant gets a script of exactly that name
                            self.assertEqual(r.status, 201, r)
                            self.assertEqual(r.json["name"], v)
                            self.assertEqual(self.admin.delete("/scripts/" + v).status, 204)
                        else:
                            self.assertError(r, 400, "validation_failed", "name")
                    else:
                        self.assertSameAnswer(r, missing)
        self.assertEqual(before, self.B.snapshot())

    def filter_valid(self, prm, value):
        name, schema = prm["name"], resolve(prm["schema"])
        if schema.get("format") == "uuid":
            return bool(UUID_RE.match(value))
        if name == "status":
            return value in schema.get("enum", JOB_STATUS_FILTER)
        if schema.get("type") == "boolean":
            return value in ("true", "false")
        if name == "tag":
            return bool(TAG_RE.match(value))
        if name == "sort":
            return value in schema["enum"]
        if schema.get("type") == "integer":
            return value.isascii() and value.isdigit() and int(value) < 2 ** 63
        if name == "name":
            return 1 <= len(value.encode("utf-8")) <= schema["maxLength"]
        if name in ("ident_prefix", "ident_suffix"):
            return bool(IDENT_RE.match(value))
        if name in ("user", "target"):  # the audit log's exact filters
            return len(value.encode("utf-8")) <= schema["maxLength"]
        if name == "attribute":  # KEY:VALUE, split at the first ':' (docs/api.md "Devices")
            # a %00 stays the three characters "%00" (docs/api.md)
            key, colon, val = value.replace("\x00", "%00").partition(":")
            return (bool(colon) and bool(re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key)) and
                    len(val.encode("utf-8")) <= 1024 and
                    not any(ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f for ch in val))
        raise AssertionError("no rule for the filter %r" % name)

    def test_api8_metacharacters_in_filters(self):
        # a value each filter takes; the time bounds far in the future, the name nobody's
        valid = {"status": "pending", "hide": "true", "online": "false", "tag": self.A.tag,
                 "created_after": "99999999999", "created_before": "99999999999",
                 "name": "sec-no-such-name", "user": "sec-no-such-user",
                 "target": "sec-no-such-target", "since": "99999999999", "until": "0",
                 "ident_prefix": "0000000000", "ident_suffix": "0000000000",
                 "attribute": "sec-no-such-key:sec-no-such-value"}
        for op in self.ops(lambda op: op.method == "GET"):
            path = self.path(op, self.obj(op, self.A))
            for prm in op.query_params:
                name = prm["name"]
                if name in ("page", "per_page"):
                    continue
                if name == "sort":
                    good = resolve(prm["schema"])["enum"][0]
                elif name == "status" and "enum" in resolve(prm["schema"]):
                    good = resolve(prm["schema"])["enum"][0]  # a group's
                else:
                    good = valid.get(name) or self.A.standing(FILTER_KIND[name])
                r = self.admin.get(with_query(path, **{name: good}))
                self.assertEqual(r.status, 200, r)
                for v in META + near_values(good):
                    with self.subTest(op=op, filter=name, value=v):
                        r = self.admin.get(with_query(path, **{name: v}))
                        if name == "sort" and self.filter_valid(prm, v):
                            self.assertEqual(r.status, 200, r)
                        elif self.filter_valid(prm, v):
                            # a value that is valid as it stands matches it literally: nobody
                            # holds these
                            self.assertEqual(r.status, 200, r)
                            self.assertEqual(r.json["items"], [])
                        else:
                            self.assertError(r, 400, "invalid_parameter", name)

    def test_api8_metacharacters_in_body_references(self):
        a = self.A
        before = a.snapshot()
        base = "/tasks/%s/jobs" % a.task
        for v in META + near_values(a.device) + near_values(a.tag):
            with self.subTest(value=v):
                r = self.admin.post(base, {"entity_ident": v})
                if UUID_RE.match(v):
                    self.assertError(r, 404, "not_found", "entity_ident")
                else:
                    self.assertError(r, 400, "validation_failed", "entity_ident")
                r = self.admin.post(base + "/list", {"ident_list": [a.device, v]})
                if UUID_RE.match(v):
                    self.assertEqual(r.status, 201, r)
                else:
                    self.assertError(r, 400, "validation_failed", "ident_list[1]")
                r = self.admin.post(base + "/tags", {"tag": v})
                if TAG_RE.match(v):
                    self.assertEqual((r.status, r.json["items"]), (201, []), r)
                else:
                    self.assertError(r, 400, "validation_failed", "tag")
                r = self.admin.post("/tasks", {"name": "sec meta", "script": v})
                self.assertError(r, 400, "validation_failed", "script")
        after = a.snapshot()
        # only the list sends with a UUID-like value created jobs, for the standing device
        self.assertEqual({k: v for k, v in after.items() if k != "jobs"},
                         {k: v for k, v in before.items() if k != "jobs"})
        for ident in set(after["jobs"]) - set(before["jobs"]):
            self.assertEqual(self.admin.get("/jobs/" + ident).json["entity_ident"], a.device)

    BAD_MAILS = ["a@x.test\r\nBcc: evil@x.test", "a@x.test\nBcc: evil@x.test", "a@x.test\r",
                 "\r\nRCPT TO:<evil@x.test>", "a@x.test\u2028Bcc: evil@x.test",
                 "a@x.test\u0085", "a@x.test\x00evil@x.test", "a@x.test>\r\nX-Evil: 1",
                 "a@x.test\tBcc: evil@x.test", "\u00e9@x.test"]

    def test_api8_crlf_in_notification_addresses(self):
        before = self.A.snapshot()
        ops = self.ops(lambda op: op.request_schema is not None and
                       "notification_mail_list" in op.request_schema.get("properties", {}))
        self.assertGreaterEqual(len(ops), 6)
        for op in ops:
            for addr in self.BAD_MAILS:
                for mails in ([addr], ["ok@x.test", addr]):
                    with self.subTest(op=op, mails=mails):
                        body = CALLS[op.key].body(self.A)
                        body["notification_mail_list"] = mails
                        body["notification_status_list"] = ["transmited"]
                        r = self.call(self.admin, op, self.obj(op, self.A), body=body)
                        self.assertError(r, 400, "validation_failed",
                                         "notification_mail_list[%d]" % (len(mails) - 1))
        # the key's user becomes created_user of everything the key writes
        r = self.admin.post("/keys", {"user": "bob\r\nBcc: evil@x.test", "role": "viewer"})
        self.assertError(r, 400, "validation_failed", "user")
        self.assertEqual(before, self.A.snapshot())

    def test_api8_crlf_in_names_never_splits_a_mail_header(self):
        # SECURITY.md: header values are stripped of control characters, non-ASCII subjects
        # RFC 2047-encoded. Task and device names reach the Subject.
        dev = self.admin.post("/devices", {"name": "dev\r\nX-Inj-Dev: 1\rX-Inj-Cr: 1\nX-Lf: 1",
                                           "tags": []})
        self.assertEqual(dev.status, 201, dev)
        ent = dev.json["entity_ident"]
        self.online(self.A, ent)   # jobs go out (transmited, the mailed status) when online
        names = ["Sec\r\nBcc: evil@x.test\r\nX-Evil: 1\r\n\r\n.\r\nRCPT TO:<evil2@x.test>",
                 "T\u00e2che\r\nBcc: evil3@x.test\nX-Evil-Utf8: 1\u2028X-Sep: 1"]
        jobs = []
        for i, name in enumerate(names):
            if i == 0:
                r = self.admin.post("/tasks", {
                    "name": name, "script": "echo", "allow_offline": True,
                    "notification_mail_list": [MAIL_TO],
                    "notification_status_list": ["transmited"]})
            else:   # the other name through PATCH
                r = self.admin.post("/tasks", {
                    "name": "clean", "script": "echo", "allow_offline": True,
                    "notification_mail_list": [MAIL_TO],
                    "notification_status_list": ["transmited"]})
                self.assertEqual(r.status, 201, r)
                r = self.admin.patch("/tasks/" + r.json["ident"], {"name": name})
            self.assertIn(r.status, (200, 201), r)
            self.assertEqual(r.json["name"], name)
            j = self.admin.post("/tasks/%s/jobs" % r.json["ident"], {
                "entity_ident": ent, "comment": "c\r\nBcc: evil4@x.test\r\n.\r\nQUIT"})
            self.assertEqual(j.status, 201, j)
            jobs.append(j.json["ident"])
        allowed = {"date", "message-id", "from", "to", "subject", "mime-version",
                   "content-type", "content-transfer-encoding", "auto-submitted"}
        for job in jobs:
            with self.subTest(job=job):
                msgs = self.smtp.wait_messages(1, lambda m: job in m.body, timeout=30)
                self.assertEqual(len(msgs), 1, msgs)
                m = msgs[0]
                names_ = [n.lower() for n in m.header_names()]
                self.assertEqual(sorted(set(names_)), sorted(allowed), m.raw_headers)
                self.assertEqual(len(names_), len(set(names_)), m.raw_headers)
                self.assertEqual(m.rcpt_tos, [MAIL_TO])
                self.assertIn(b"\r\nTo: <%s>\r\n" % MAIL_TO.encode(), m.raw_headers)
                for line in m.raw_headers.split(b"\r\n"):
                    self.assertNotIn(b"\r", line)
                    self.assertNotIn(b"\n", line)
                self.assertIn("evil", m.subject)   # the name is there, as text
                self.assertIn("QUIT", m.body)
        self.assertEqual(self.smtp.received(
            lambda x: any("evil" in r for r in x.rcpt_tos)), [])

    # -- API9: inventory -------------------------------------------------------------------

    def test_api9_undocumented_methods_and_paths(self):
        for path, item in DOC["paths"].items():
            documented = {m.upper() for m in HTTP_METHODS if m in item}
            op = next((o for o in OPS if o.path == path), None)
            if op is None:
                continue  # served without a key: test_api_service.py
            p = self.path(op, self.obj(op, self.A))
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"):
                if method in documented:
                    continue
                with self.subTest(path=path, method=method):
                    r = self.admin.request(method, p, body={} if method in (
                        "POST", "PUT", "PATCH") else None)
                    self.assertError(r, 405, "method_not_allowed")
                    allow = {m.strip() for m in (hdr(r, "Allow") or "").split(",")}
                    self.assertEqual(allow, documented)
        for p in ("/admin", "/debug", "/internal", "/users", "/tenants", "/config", "/status",
                  "/metrics", "/openapi.yaml", "/health/db",
                  "/keys/%s/secret" % self.A.key, "/tasks/%s/versions" % self.A.task,
                  "/jobs/%s/payload" % self.A.job, "/devices/%s/jobs" % self.A.device):
            with self.subTest(path=p):
                self.assertError(self.admin.get(p), 404, "not_found")

    # -- over every answer -----------------------------------------------------------------

    def test_zz_every_answer(self):
        self.assertGreater(len(RECORDED), 1000)
        check_recorded(self, RECORDED)
        log = self.coord.read_log()
        self.assertNotRegex(log, r"-> 5\d\d", "a 5xx answer was logged")
        self.assertTrue(self.coord.alive())


class Monitor(Watcher):
    """Records (topic, payload bytes) of everything under rcs/v1/ on the broker."""

    def __init__(self, broker):
        super().__init__(broker, "rcs/v1/#", prefix="sec-monitor-")

    def record(self, msg):
        return (msg.topic, bytes(msg.payload))


class ThrottleTest(StackTest):
    """Key guessing: --auth-fail-limit 3."""

    workdir_prefix = "rcs-security-throttle-"
    LIMIT = 3

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.coord = cls.own(Coordinator(cls.workdir,
                                        extra_args=["--auth-fail-limit", str(cls.LIMIT)]))
        cls.tenant = cls.coord.init_tenant(user="admin")
        SECRETS.append(cls.tenant["api_key"])
        cls.coord.start()

    def assert429(self, r, where=""):
        where = "%s %r %r" % (where, r, r.headers)
        self.assertEqual(r.status, 429, where)
        self.assertEqual(r.json["error"]["code"], "too_many_requests", where)
        wait = int(hdr(r, "Retry-After") or "0")
        self.assertTrue(0 < wait <= 60, where)

    def from_address(self, source, key):
        conn = http.client.HTTPConnection("127.0.0.1", self.coord.port, timeout=10,
                                          source_address=(source, 0))
        try:
            conn.request("GET", "/v3/commands/tasks", headers={"api-key": key})
            r = conn.getresponse()
            return r.status
        finally:
            conn.close()

    def test_key_guessing_gets_429_everywhere(self):
        base = self.coord.base
        records_from = len(RECORDED)
        admin = RecApi(base, self.tenant["api_key"])
        # the window of this address starts now; everything below takes seconds
        for _ in range(self.LIMIT + 3):   # no key at all is not a guess
            r = RecApi(base, None).get("/tasks")
            self.assertEqual(r.status, 401, r)
        self.assertEqual(admin.get("/tasks").status, 200)
        k = admin.post("/keys", {"user": "gone", "role": "admin"})
        self.assertEqual(k.status, 201, k)
        SECRETS.append(k.json["api_key"])
        self.assertEqual(admin.delete("/keys/" + k.json["ident"]).status, 204)
        revoked = RecApi(base, k.json["api_key"])
        guesses = [RecApi(base, "rcs_" + uuid.uuid4().hex * 2) if i % 2 == 0 else revoked
                   for i in range(self.LIMIT + 1)]
        for g in guesses:   # the guesses themselves are answered 401
            r = g.get("/tasks")
            self.assertEqual(r.status, 401, r)
        r = guesses[0].get("/tasks")
        self.assert429(r)
        # every operation, with the valid admin key, from this address
        for op in OPS:
            p = op.path
            for prm in op.path_params:
                p = p.replace("{%s}" % prm["name"], MISSING[PARAM_KIND[prm["name"]]])
            with self.subTest(op=op):
                r = admin.request(op.method, p, body={} if op.request_schema else None)
                self.assert429(r, repr(op))
        self.assert429(RecApi(base, None).get("/tasks"))
        self.assertIn("too many unknown api keys", self.coord.read_log())
        # another client address is not affected
        try:
            status = self.from_address("127.0.0.2", self.tenant["api_key"])
        except OSError as e:
            note("no second loopback address (%s): per-address check skipped" % e)
        else:
            self.assertEqual(status, 200)
        check_recorded(self, RECORDED[records_from:])


if __name__ == "__main__":
    unittest.main()
