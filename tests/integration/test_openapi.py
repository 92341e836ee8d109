#!/usr/bin/env python3
"""Conformance of docs/openapi.json with the real rcs-coordinator.

Two parts:

- TestOpenApiDocument checks the document itself (no server): OpenAPI 3.0.3, every $ref
  resolves, the operations are exactly those of docs/api.md, every operation documents its
  success code, 401 and the error codes that apply, the schemas carry the contract's fields,
  and every example matches its schema.
- TestOpenApiConformance starts a real coordinator (harness CoordinatorTest), drives every
  documented operation with real requests (objects created first, bodies built from the
  documented examples) and checks each answer against the document: the status code is a
  documented response of the operation, the body matches the documented schema (required
  fields, JSON types, nullable, enums, UUID format; paged lists item by item), and error
  answers match the Error schema. Answers are checked with the schemas closed: an object
  schema that doesn't say additionalProperties is taken as additionalProperties: false, so
  a field the server sends that the document doesn't name fails the test. It also fails if an operation was not exercised, and
  checks 401/403/404/405/400/409/413 where the document says they happen. Webhooks send to a
  loopback port nobody listens on (--webhook-allow-net 127.0.0.1/32): their deliveries and
  failed attempts are checked too, and the audit log of the requests made.

Schema checking is a small resolver + validator written here (stdlib only): it follows local
$refs and understands type, nullable, required, properties, additionalProperties, items,
enum, format uuid, pattern, minimum/maximum, min/maxItems, min/maxLength, allOf/oneOf/anyOf.

Run: python3 tests/integration/test_openapi.py (ctest sets RCS_BIN_DIR and RCS_SOURCE_DIR).
"""

import copy
import hashlib
import http.client
import json
import os
import re
import select
import socket
import sys
import time
import unittest
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rcs_harness as H  # noqa: E402
from rcs_harness import SOURCE_DIR  # noqa: E402
from rcs_fixture import CoordinatorTest  # noqa: E402

DOC_PATH = os.path.join(SOURCE_DIR, "docs", "openapi.json")
with open(DOC_PATH, encoding="utf-8") as _f:
    DOC = json.load(_f)

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# The operations of docs/api.md: the document must list exactly these.
API_MD_OPERATIONS = {
    ("GET", "/tasks"), ("POST", "/tasks"),
    ("GET", "/tasks/{task_ident}"), ("PUT", "/tasks/{task_ident}"),
    ("PATCH", "/tasks/{task_ident}"), ("DELETE", "/tasks/{task_ident}"),
    ("GET", "/tasks/{task_ident}/jobs"), ("POST", "/tasks/{task_ident}/jobs"),
    ("POST", "/tasks/{task_ident}/jobs/list"), ("POST", "/tasks/{task_ident}/jobs/tags"),
    ("GET", "/jobs"), ("GET", "/jobs/{job_ident}"), ("GET", "/jobs/{job_ident}/history"),
    ("PATCH", "/jobs/{job_ident}/cancel"), ("GET", "/jobs/{job_ident}/notifications"),
    ("GET", "/groups"), ("GET", "/groups/{group_ident}"),
    ("PATCH", "/groups/{group_ident}/pause"), ("PATCH", "/groups/{group_ident}/resume"),
    ("PATCH", "/groups/{group_ident}/cancel"),
    ("GET", "/whoami"),
    ("GET", "/scripts"), ("GET", "/scripts/{name}"), ("PUT", "/scripts/{name}"),
    ("DELETE", "/scripts/{name}"),
    ("POST", "/devices"), ("GET", "/devices"), ("GET", "/devices/{entity_ident}"),
    ("PATCH", "/devices/{entity_ident}"), ("DELETE", "/devices/{entity_ident}"),
    ("POST", "/keys"), ("GET", "/keys"), ("DELETE", "/keys/{ident}"),
    ("GET", "/health"), ("GET", "/openapi.json"),
    # webhooks and the audit log
    ("POST", "/webhooks"), ("GET", "/webhooks"), ("GET", "/webhooks/{webhook_ident}"),
    ("PATCH", "/webhooks/{webhook_ident}"), ("DELETE", "/webhooks/{webhook_ident}"),
    ("GET", "/webhooks/{webhook_ident}/deliveries"), ("GET", "/audit"),
    # artifacts
    ("GET", "/artifacts"), ("POST", "/artifacts"), ("GET", "/artifacts/{artifact_ident}"),
    ("DELETE", "/artifacts/{artifact_ident}"), ("GET", "/artifacts/{artifact_ident}/content"),
}

# Operations whose body or answer is raw bytes (application/octet-stream), not JSON: an
# artifact's upload (its 413 is --artifact-max-size's, not --max-body's) and its content.
BYTES_BODY = {("POST", "/artifacts")}
BYTES_ANSWER = {("GET", "/artifacts/{artifact_ident}/content", "200"),
                ("GET", "/artifacts/{artifact_ident}/content", "206")}
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

# The reads only admins may make (docs/api.md: webhooks and the audit log).
ADMIN_READS = {("GET", "/webhooks"), ("GET", "/webhooks/{webhook_ident}"),
               ("GET", "/webhooks/{webhook_ident}/deliveries"), ("GET", "/audit")}

# The operations served without an api key (security: []).
OPEN_OPERATIONS = {("GET", "/health"), ("GET", "/openapi.json")}

STATUSES = ["initial", "pending", "transmited", "edge_transmitted", "edge_started",
            "edge_running", "terminated", "edge_error", "cancelled", "expired"]

JOB_REQUIRED = ["ident", "task", "group", "client_root", "entity_ident", "target", "comment",
                "status", "created_user", "created_at", "update_at", "scheduled_time",
                "response_time", "ttl", "payload", "response", "notification_mail_list",
                "notification_status_list"]
JOB_NULLABLE = ["group", "target", "comment", "scheduled_time", "response_time", "ttl",
                "payload", "response"]
TASK_REQUIRED = ["version", "ident", "client_root", "created_user", "update_user", "name",
                 "script", "variables_info", "constants", "comment", "active", "public",
                 "hide", "allow_offline", "created_at", "update_at",
                 "notification_mail_list", "notification_status_list"]

ROLE_RANK = {"viewer": 0, "operator": 1, "admin": 2}

# Operations for which docs/api.md names a 409.
CONFLICT_OPERATIONS = {
    ("POST", "/tasks/{task_ident}/jobs"), ("POST", "/tasks/{task_ident}/jobs/list"),
    ("POST", "/tasks/{task_ident}/jobs/tags"), ("PATCH", "/jobs/{job_ident}/cancel"),
    ("DELETE", "/scripts/{name}"),
    ("PATCH", "/groups/{group_ident}/pause"), ("PATCH", "/groups/{group_ident}/resume"),
    ("PATCH", "/groups/{group_ident}/cancel"),
}


# --------------------------------------------------------------------------------------
# The document: operations, $ref resolution, validation
# --------------------------------------------------------------------------------------

def operations():
    """[(METHOD, path template, operation, path item)] in document order: the API's under
    /v3/commands (a path item with servers of its own, the device route, is not one of
    them: device_operations)."""
    out = []
    for path, item in DOC["paths"].items():
        if "servers" in item:
            continue
        for m in HTTP_METHODS:
            if m in item:
                out.append((m.upper(), path, item[m], item))
    return out


def device_operations():
    """[(METHOD, path template, operation, path item)] of the path items served under
    servers of their own (docs/api.md "Device downloads"; checked by
    tests/integration/test_device_downloads.py against the real route)."""
    out = []
    for path, item in DOC["paths"].items():
        if "servers" in item:
            for m in HTTP_METHODS:
                if m in item:
                    out.append((m.upper(), path, item[m], item))
    return out


def find_op(method, template):
    item = DOC["paths"].get(template)
    if item is None or method.lower() not in item:
        return None
    return item[method.lower()]


def resolve_ref(ref):
    if not ref.startswith("#/"):
        raise ValueError("only local $refs are supported: %r" % ref)
    cur = DOC
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError("unresolvable $ref %r" % ref)
        cur = cur[part]
    return cur


def resolve(node):
    """Follows $refs until a node without one."""
    for _ in range(64):
        if not (isinstance(node, dict) and "$ref" in node):
            return node
        node = resolve_ref(node["$ref"])
    raise ValueError("$ref loop")


def op_params(op, item):
    """Resolved parameters of an operation (path-item ones, overridden by the operation's)."""
    params = {}
    for p in item.get("parameters", []) + op.get("parameters", []):
        p = resolve(p)
        params[(p["name"], p["in"])] = p
    return list(params.values())


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


TYPE_OK = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def validate(schema, value, where="$", errors=None, closed=False):
    """Checks value against an OpenAPI 3.0 schema; returns a list of error strings.

    closed: an object schema that doesn't say additionalProperties is taken as
    additionalProperties: false, so a field the document doesn't name is an error (the
    answers of the server are checked so: the document must name every field it sends;
    free-form objects say additionalProperties: true).
    """
    if errors is None:
        errors = []
    schema = resolve(schema)
    if value is None:
        typed = any(k in schema for k in ("type", "allOf", "oneOf", "anyOf", "enum", "properties"))
        if typed and not schema.get("nullable", False):
            errors.append("%s: null, but the schema is not nullable" % where)
        return errors
    for sub in schema.get("allOf", []):
        validate(sub, value, where, errors, closed)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            n = sum(1 for sub in schema[key] if not validate(sub, value, where, [], closed))
            if (key == "oneOf" and n != 1) or (key == "anyOf" and n == 0):
                errors.append("%s: %r matches %d of the %s alternatives" % (where, value, n, key))
    t = schema.get("type")
    if t is not None:
        if t not in TYPE_OK:
            errors.append("%s: schema has unknown type %r" % (where, t))
            return errors
        if not TYPE_OK[t](value):
            errors.append("%s: expected %s, got %s (%s)" % (
                where, t, json_type(value), json.dumps(value)[:80]))
            return errors
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %r is not one of %r" % (where, value, schema["enum"]))
    if isinstance(value, str):
        if schema.get("format") == "uuid" and not UUID_RE.match(value):
            errors.append("%s: %r is not a UUID" % (where, value))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append("%s: %r does not match %s" % (where, value, schema["pattern"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append("%s: shorter than %d" % (where, schema["minLength"]))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append("%s: longer than %d" % (where, schema["maxLength"]))
    if TYPE_OK["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append("%s: %r is below the minimum %r" % (where, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append("%s: %r is above the maximum %r" % (where, value, schema["maximum"]))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append("%s: missing required field %r" % (where, name))
        addl = schema.get("additionalProperties", None)
        if addl is None and closed and "allOf" not in schema:
            addl = False
        for k, v in value.items():
            if k in props:
                validate(props[k], v, "%s.%s" % (where, k), errors, closed)
            elif addl is False:
                errors.append("%s: field %r is not allowed%s" % (
                    where, k, "" if "additionalProperties" in schema else
                    " (the schema doesn't name it)"))
            elif isinstance(addl, dict):
                validate(addl, v, "%s.%s" % (where, k), errors, closed)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (where, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (where, schema["maxItems"]))
        if "items" in schema:
            for i, v in enumerate(value):
                validate(schema["items"], v, "%s[%d]" % (where, i), errors, closed)
    return errors


def media_examples(media):
    """The example values of a media type object (example or examples)."""
    if media is None:
        return []
    if "example" in media:
        return [media["example"]]
    return [resolve(e)["value"] for e in media.get("examples", {}).values()]


def request_example(method, template):
    op = find_op(method, template)
    rb = op.get("requestBody") if op else None
    if not rb:
        return None
    if "application/json" not in resolve(rb)["content"]:
        return None  # raw bytes (BYTES_BODY)
    exs = media_examples(resolve(rb)["content"].get("application/json"))
    return copy.deepcopy(exs[0]) if exs else None


def request_schema(method, template):
    op = find_op(method, template)
    rb = op.get("requestBody") if op else None
    json_body = resolve(rb).get("content", {}).get("application/json") if rb else None
    return json_body["schema"] if json_body else None  # none, or raw bytes (an artifact)


def response_schema(op, status):
    spec = op["responses"].get(str(status))
    if spec is None:
        return None
    content = resolve(spec).get("content")
    if not content:
        return None
    return content["application/json"]["schema"]


def walk(node, path="#"):
    """Yields (json pointer, node) for every dict in the document."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, "%s/%s" % (path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, "%s/%d" % (path, i))


def enum_duplicates(doc):
    """'pointer: value' for every value an enum of doc lists a second time (equal as JSON
    Schema compares: 1 and 1.0 are the same, true and 1 are not)."""
    found = []
    for where, node in walk(doc):
        values = node.get("enum")
        if not isinstance(values, list):
            continue
        seen = []
        for v in values:
            key = (type(v) is bool, v if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True))
            if key in seen:
                found.append("%s: %r" % (where, v))
            seen.append(key)
    return found


def paged(schema):
    s = resolve(schema)
    props = s.get("properties", {})
    return all(k in props for k in ("page", "per_page", "total_pages", "total_items", "items"))


# --------------------------------------------------------------------------------------
# Part 1: the document alone
# --------------------------------------------------------------------------------------

class TestOpenApiDocument(unittest.TestCase):

    def test_version_servers_security(self):
        self.assertEqual(DOC.get("openapi"), "3.0.3")
        self.assertTrue(DOC["info"].get("title"))
        self.assertTrue(DOC["info"].get("version"))
        self.assertTrue(any(s["url"].endswith("/v3/commands") for s in DOC["servers"]))
        schemes = DOC["components"]["securitySchemes"]
        header = [n for n, s in schemes.items()
                  if s.get("type") == "apiKey" and s.get("in") == "header" and s.get("name") == "api-key"]
        self.assertTrue(header, "no apiKey security scheme in header 'api-key'")
        self.assertIn({header[0]: []}, DOC.get("security", []), "api-key must apply to every operation")
        for method, path, op, _ in operations():
            self.assertEqual(op.get("security") == [], (method, path) in OPEN_OPERATIONS,
                             "%s %s: security" % (method, path))

    def test_device_route(self):
        """The device route: under /v3 on its own servers, with the artifact token (an HTTP
        bearer scheme), not an api key; its path parameter documented; no role."""
        ops = device_operations()
        self.assertEqual([(m, p) for m, p, _, _ in ops], [("GET", "/devices/artifacts/{sha256}")])
        scheme = DOC["components"]["securitySchemes"]["artifactToken"]
        self.assertEqual((scheme["type"], scheme["scheme"]), ("http", "bearer"))
        for method, path, op, item in ops:
            self.assertTrue(all(s["url"].endswith("/v3") for s in item["servers"]))
            self.assertEqual(op["security"], [{"artifactToken": []}])
            self.assertNotIn("x-rcs-role", op)
            names = {p["name"] for p in op_params(op, item) if p["in"] == "path"}
            self.assertEqual(names, set(re.findall(r"{([^}]+)}", path)))
            codes = set(op["responses"])
            self.assertEqual(codes, {"200", "206", "401", "404", "410", "416", "429", "503"})
            self.assertIn("Retry-After", resolve(op["responses"]["429"]).get("headers", {}))

    def test_refs_resolve(self):
        for where, node in walk(DOC):
            if "$ref" in node and isinstance(node["$ref"], str):
                try:
                    resolve(node)
                except (KeyError, ValueError) as e:
                    self.fail("%s: %s" % (where, e))

    def test_operations_are_those_of_api_md(self):
        documented = {(m, p) for m, p, _, _ in operations()}
        self.assertEqual(sorted(API_MD_OPERATIONS - documented), [], "missing from openapi.json")
        self.assertEqual(sorted(documented - API_MD_OPERATIONS), [], "not in docs/api.md")

    def test_operation_responses(self):
        ids = set()
        error_schema = DOC["components"]["schemas"]["Error"]
        for method, path, op, item in operations():
            with self.subTest(op="%s %s" % (method, path)):
                self.assertTrue(op.get("operationId"))
                self.assertNotIn(op["operationId"], ids)
                ids.add(op["operationId"])
                codes = set(op["responses"])
                self.assertFalse({"default"} & codes, "a default response hides undocumented codes")
                self.assertTrue([c for c in codes if c.startswith("2")], "no success response")
                # any request with a body over --max-body, before routing and the api key
                self.assertIn("413", codes)
                # an unknown or repeated query parameter, whatever the operation takes
                self.assertIn("400", codes)
                if (method, path) in OPEN_OPERATIONS:
                    self.assertNotIn("x-rcs-role", op)
                    self.assertFalse({"401", "403", "429"} & codes, "no api key, no throttle")
                    continue
                role = op.get("x-rcs-role")
                self.assertIn(role, ROLE_RANK)
                self.assertEqual(role == "viewer", method == "GET" and (method, path) not in ADMIN_READS,
                                 "viewer may every GET but the admin reads, nothing else")
                if (method, path) in ADMIN_READS:
                    self.assertEqual(role, "admin")
                self.assertIn("401", codes)
                self.assertEqual("403" in codes, role != "viewer")
                has_body = "requestBody" in op
                # an address that sent too many unknown keys, whatever key it sends now
                self.assertIn("429", codes)
                if has_body:
                    self.assertIn("400", codes)
                    self.assertTrue(request_example(method, path) is not None
                                    or (method, path) in BYTES_BODY, "request body without example")
                params = op_params(op, item)
                names = {p["name"] for p in params if p["in"] == "path"}
                self.assertEqual(names, set(re.findall(r"{([^}]+)}", path)), "path parameters")
                if names and (method, path) != ("PUT", "/scripts/{name}"):  # PUT creates
                    self.assertIn("404", codes)
                if any(p["name"] == "per_page" for p in params):
                    self.assertIn("400", codes)
                for code, spec in op["responses"].items():
                    spec = resolve(spec)
                    self.assertTrue(spec.get("description"), code)
                    if code == "204":
                        self.assertNotIn("content", spec)
                        continue
                    if (method, path, code) in BYTES_ANSWER:
                        self.assertEqual(list(spec.get("content", {})), ["application/octet-stream"])
                        continue
                    self.assertIn("application/json", spec.get("content", {}), code)
                    if int(code) >= 400 and (method, path, code) != ("GET", "/health", "503"):
                        self.assertIs(resolve(spec["content"]["application/json"]["schema"]), error_schema, code)
                    elif int(code) < 300:
                        self.assertEqual(resolve(spec["content"]["application/json"]["schema"]).get("type"), "object")
                if (method, path) in CONFLICT_OPERATIONS:
                    self.assertIn("409", codes)
        self.assertIn("MethodNotAllowed", DOC["components"]["responses"])
        self.assertIn("Allow", DOC["components"]["responses"]["MethodNotAllowed"].get("headers", {}))
        self.assertIn("Retry-After", DOC["components"]["responses"]["TooManyRequests"].get("headers", {}))

    def test_schemas_carry_the_contract(self):
        schemas = DOC["components"]["schemas"]
        for name in ("Task", "Job", "Group", "GroupDetail", "Device", "Script", "ApiKey",
                     "BulkResult", "Error", "Notification"):
            self.assertIn(name, schemas)
        job = schemas["Job"]
        self.assertEqual(sorted(set(JOB_REQUIRED) - set(job["required"])), [])
        for f in JOB_NULLABLE:
            self.assertTrue(job["properties"][f].get("nullable"), "Job.%s must be nullable" % f)
        for f in job["required"]:
            self.assertIn(f, job["properties"])
        self.assertEqual(resolve(job["properties"]["status"])["enum"], STATUSES)
        self.assertEqual(sorted(set(resolve(job["properties"]["task"])["required"])), ["ident", "name", "version"])
        task = schemas["Task"]
        self.assertEqual(sorted(set(TASK_REQUIRED) - set(task["required"])), [])
        self.assertTrue(task["properties"]["update_user"].get("nullable"))
        self.assertEqual(task["properties"]["active"].get("type"), "string")
        self.assertEqual(sorted(task["properties"]["active"].get("enum", [])), ["false", "true"])
        self.assertEqual(sorted(schemas["BulkResult"]["required"]), ["group", "items", "rejected"])
        self.assertTrue(schemas["BulkResult"]["properties"]["group"].get("nullable"))
        err = schemas["Error"]
        self.assertEqual(err["required"], ["error"])
        self.assertEqual(sorted(err["properties"]["error"]["required"]), ["code", "message"])
        self.assertIn("details", err["properties"]["error"]["properties"])
        self.assertEqual(sorted(schemas["Notification"]["required"]), ["address", "attempts", "state", "status"])
        self.assertEqual(schemas["Notification"]["properties"]["state"]["enum"],
                         ["queued", "sent", "failed", "suppressed"])
        for f in ("ident", "name", "created_user"):
            self.assertIn(f, schemas["Group"]["required"])
        for f in ("total", "statuses"):
            self.assertIn(f, schemas["GroupDetail"]["required"])
        # webhooks and the audit log: a webhook's record never holds its secret
        self.assertNotIn("secret", schemas["Webhook"]["properties"])
        self.assertNotIn("secret", schemas["WebhookCreated"]["required"])
        self.assertEqual(sorted(schemas["WebhookCreate"]["required"]), ["events", "url"])
        self.assertEqual(schemas["WebhookDelivery"]["properties"]["state"]["enum"],
                         ["queued", "delivered", "failed"])
        for f in ("next_at", "done_at", "last_error"):
            self.assertTrue(schemas["WebhookDelivery"]["properties"][f].get("nullable"), f)
        for f in ("status_code", "error"):
            self.assertTrue(schemas["WebhookAttempt"]["properties"][f].get("nullable"), f)
        self.assertEqual(sorted(schemas["AuditRecord"]["required"]),
                         sorted(["id", "ts", "user", "key_ident", "method", "path", "target",
                                 "status_code", "remote"]))
        self.assertNotIn("api_key", schemas["AuditRecord"]["properties"])

    def test_every_nullable_has_a_type(self):
        # OpenAPI 3.0: nullable without type means nothing (and Redocly's lint refuses it)
        for where, node in walk(DOC):
            if node.get("nullable") is True:
                self.assertIn("type", node, where)

    def test_enums_have_no_duplicates(self):
        # JSON Schema: an enum's values "SHOULD be unique"; validators that compile every
        # schema (ajv strict mode) refuse a duplicate and then skip the operations whose
        # schemas hold it, and Redocly's lint does not notice
        self.assertEqual(enum_duplicates({"a": {"enum": ["x", "y", "x"]}}), ["#/a: 'x'"])
        self.assertEqual(enum_duplicates({"a": [{"enum": [1, 1.0, True]}]}), ["#/a/0: 1.0"])
        found = enum_duplicates(DOC)
        self.assertEqual(found, [], "enum values listed twice:\n  " + "\n  ".join(found))

    def test_error_codes_are_those_the_server_sends(self):
        sent = set()
        coord = os.path.join(SOURCE_DIR, "coordinator")
        for name in sorted(os.listdir(coord)):
            if name.endswith(".c"):
                with open(os.path.join(coord, name), encoding="utf-8") as f:
                    text = f.read()
                sent |= set(re.findall(r'api_error\(\s*[^,]+,\s*\d+,\s*"([a-z_]+)"', text))
                sent |= set(re.findall(r'job_rejected\([^,]+,\s*"([a-z_]+)"', text))
        self.assertIn("signature_invalid", sent)  # the pattern still finds them all
        enum = DOC["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
        self.assertEqual(sorted(sent - set(enum)), [], "codes the server sends, not in Error.code")
        self.assertEqual(sorted(set(enum) - sent), [], "codes in Error.code the server never sends")

    def test_examples_match_schemas(self):
        count = 0
        for name, schema in DOC["components"]["schemas"].items():
            if "example" in schema:
                count += 1
                self.assertEqual(validate(schema, schema["example"], name, None, True), [])
        for name, p in DOC["components"]["parameters"].items():
            if "example" in p:
                count += 1
                self.assertEqual(validate(p["schema"], p["example"], name), [])
        for method, path, op, _ in operations():
            where = "%s %s" % (method, path)
            rb = op.get("requestBody")
            if rb and (method, path) not in BYTES_BODY:
                media = resolve(rb)["content"]["application/json"]
                for ex in media_examples(media):
                    count += 1
                    self.assertEqual(validate(media["schema"], ex, where + " request", None, True), [])
            for code, spec in op["responses"].items():
                media = resolve(spec).get("content", {}).get("application/json")
                for ex in media_examples(media):
                    count += 1
                    self.assertEqual(validate(media["schema"], ex, "%s %s" % (where, code), None, True), [])
        self.assertGreater(count, 50)

    def test_validator_is_not_vacuous(self):
        job = copy.deepcopy(DOC["components"]["schemas"]["Job"]["example"])
        ref = {"$ref": "#/components/schemas/Job"}
        self.assertEqual(validate(ref, job), [])
        bad = dict(job, status="running")
        self.assertTrue(validate(ref, bad))
        bad = dict(job)
        del bad["payload"]
        self.assertTrue(any("payload" in e for e in validate(ref, bad)))
        self.assertTrue(validate(ref, dict(job, created_at=None)))
        self.assertTrue(validate(ref, dict(job, created_at="1732200000")))
        self.assertTrue(validate(ref, dict(job, created_at=True)))
        self.assertTrue(validate(ref, dict(job, ident="nope")))
        self.assertEqual(validate(ref, dict(job, scheduled_time=None, group={"name": "g"})), [])
        page = {"$ref": "#/components/schemas/JobPage"}
        self.assertTrue(validate(page, {"page": 1, "per_page": 50, "total_pages": 1,
                                        "total_items": 1, "items": [dict(job, task={})]}))
        self.assertTrue(validate({"$ref": "#/components/schemas/Error"}, {"error": {"code": "x"}}))
        # closed: a field the schema doesn't name fails, free-form objects still take any
        extra = dict(job, no_such_field=1)
        self.assertEqual(validate(ref, extra), [])
        self.assertTrue(any("no_such_field" in e for e in validate(ref, extra, closed=True)))
        nested = dict(job, task=dict(job["task"], extra=1))
        self.assertTrue(any("$.task" in e for e in validate(ref, nested, closed=True)))
        self.assertEqual(validate(ref, dict(job, variables={"any": 1}), closed=True), [])
        self.assertTrue(validate(page, {"page": 1, "per_page": 50, "total_pages": 1,
                                        "total_items": 1, "items": [dict(job, x=1)]}, closed=True))


# --------------------------------------------------------------------------------------
# Part 2: the document against a real coordinator
# --------------------------------------------------------------------------------------

def raw_request(port, method, path, body, headers, timeout=30):
    """Sends a (large) body and reads the answer even when the server answers before it
    has read the whole body and closes. Returns a harness Response."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1:%d" % port,
                "Content-Length: %d" % len(body), "Connection: close"]
        head += ["%s: %s" % kv for kv in headers.items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        off = 0
        deadline = time.time() + timeout
        while off < len(body) and time.time() < deadline:
            r, w, _ = select.select([sock], [sock], [], 1.0)
            if r:
                break  # the server answered already
            if w:
                try:
                    off += sock.send(body[off:off + 65536])
                except (BrokenPipeError, ConnectionResetError):
                    break
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        data = resp.read()
        return H.Response(resp.status, dict(resp.getheaders()), data.decode("utf-8", "replace"))
    finally:
        sock.close()


def header(resp, name):
    for k, v in resp.headers.items():
        if k.lower() == name.lower():
            return v
    return None


class TestOpenApiConformance(CoordinatorTest):

    # webhooks to a loopback port nobody listens on: their deliveries fail fast
    extra_args = ("--webhook-allow-net", "127.0.0.1/32")
    HOOK_URL = "http://127.0.0.1:%d/rcs-hook" % H.free_port()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fixture_problems = []
        cls.fx = {}

        def make(what, method, path, body, expect, key):
            r = cls.admin.request(method, path, body=body)
            if r.status != expect or not isinstance(r.json, dict) or key not in r.json:
                cls.fixture_problems.append("%s: %s %s -> %r" % (what, method, path, r))
                return None
            return r.json

        dev = make("device", "POST", "/devices", {"name": "fx-device", "tags": ["lab", "fx"]}, 201, "entity_ident")
        cls.fx["entity_ident"] = dev["entity_ident"] if dev else str(uuid.uuid4())
        # from the documented example, so the documented job bodies (variables) fit it
        task = make("task", "POST", "/tasks", dict(request_example("POST", "/tasks"), name="fx-task"), 201, "ident")
        cls.fx["task_ident"] = task["ident"] if task else str(uuid.uuid4())
        job = make("job", "POST", "/tasks/%s/jobs" % cls.fx["task_ident"],
                   {"entity_ident": cls.fx["entity_ident"]}, 201, "ident")
        cls.fx["job_ident"] = job["ident"] if job else str(uuid.uuid4())
        bulk = make("group", "POST", "/tasks/%s/jobs/list" % cls.fx["task_ident"],
                    {"ident_list": [cls.fx["entity_ident"]], "group_name": "fx-group"}, 201, "group")
        cls.fx["group_ident"] = (bulk["group"] or {}).get("ident", str(uuid.uuid4())) if bulk else str(uuid.uuid4())
        cls.fx["name"] = "fx_script"
        make("script", "PUT", "/scripts/fx_script", {"source": "return 1\n"}, 201, "name")
        key = make("key", "POST", "/keys", {"user": "fx-key", "role": "viewer"}, 201, "ident")
        cls.fx["ident"] = key["ident"] if key else str(uuid.uuid4())
        # an artifact of no bytes: an upload of none (a documented query's) is its copy
        art = cls.admin.request("POST", "/artifacts?name=fx-artifact", raw=b"")
        if art.status not in (200, 201) or not isinstance(art.json, dict):
            cls.fixture_problems.append("artifact: %r" % art)
        cls.fx["artifact_ident"] = "sha256:" + EMPTY_SHA256
        hook = make("webhook", "POST", "/webhooks", {"url": cls.HOOK_URL, "events": ["job.status"]},
                    201, "ident")
        cls.fx["webhook_ident"] = hook["ident"] if hook else str(uuid.uuid4())
        viewer = make("viewer key", "POST", "/keys", {"user": "vera", "role": "viewer"}, 201, "api_key")
        operator = make("operator key", "POST", "/keys", {"user": "otto", "role": "operator"}, 201, "api_key")
        if viewer is None or operator is None:
            # fall back to the CLI so the role tests can still run
            viewer = viewer or cls.coord.create_key(cls.client_root, "vera", "viewer")
            operator = operator or cls.coord.create_key(cls.client_root, "otto", "operator")
        cls.viewer = cls.coord.api(viewer["api_key"])
        cls.operator = cls.coord.api(operator["api_key"])

    # ---- helpers ------------------------------------------------------------------------

    def need_fixtures(self):
        if self.fixture_problems:
            self.fail("fixtures could not be created:\n  " + "\n  ".join(self.fixture_problems))

    def path_of(self, template, params=None):
        values = dict(self.fx)
        values.update(params or {})

        def sub(m):
            return urllib.parse.quote(str(values[m.group(1)]), safe="")
        return re.sub(r"{([^}]+)}", sub, template)

    def generic_body(self, method, template):
        """The documented example body, made valid for the fixtures."""
        body = request_example(method, template)
        if isinstance(body, dict):
            if "entity_ident" in body:
                body["entity_ident"] = self.fx["entity_ident"]
            if "ident_list" in body:
                body["ident_list"] = [self.fx["entity_ident"]]
            if "url" in body:
                body["url"] = self.HOOK_URL
        return body

    def call(self, method, template, params=None, query=None, body=None, raw=None, api=None):
        api = api or self.admin
        path = self.path_of(template, params)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return api.request(method, path, body=body, raw=raw)

    def conform(self, method, template, resp, expect=None, code=None):
        """Asserts that resp is a documented answer of the operation and matches its schema."""
        op = find_op(method, template)
        label = "%s %s" % (method, template)
        self.assertIsNotNone(op, "%s is not in openapi.json" % label)
        status = str(resp.status)
        self.assertIn(status, op["responses"], "%s answered %s, not documented (documented: %s): %s" % (
            label, status, sorted(op["responses"]), resp.raw[:500]))
        if expect is not None:
            self.assertEqual(resp.status, expect, "%s: expected %d, got %r" % (label, expect, resp))
        spec = resolve(op["responses"][status])
        if "content" not in spec:
            self.assertEqual(resp.raw, "", "%s %s documents no body but got %r" % (label, status, resp.raw[:200]))
            return resp
        ctype = header(resp, "Content-Type") or ""
        if (method, template, status) in BYTES_ANSWER:
            self.assertEqual(ctype, "application/octet-stream", label)
            for h in resolve(op["responses"][status]).get("headers", {}):
                self.assertIsNotNone(header(resp, h), "%s %s without %s" % (label, status, h))
            return resp
        self.assertTrue(ctype.startswith("application/json"), "%s: Content-Type %r" % (label, ctype))
        self.assertIsNotNone(resp.json, "%s: body is not JSON: %r" % (label, resp.raw[:300]))
        # closed: a field the server sends that the document doesn't name fails
        errors = validate(spec["content"]["application/json"]["schema"], resp.json, "$", None, True)
        if resp.status >= 400:
            errors += validate({"$ref": "#/components/schemas/Error"}, resp.json, "$(Error)")
            if code is not None:
                self.assertEqual(resp.json.get("error", {}).get("code"), code, "%s: %s" % (label, resp.raw[:300]))
        self.assertEqual(errors, [], "%s -> %s does not match the documented schema:\n  %s\nbody: %s" % (
            label, status, "\n  ".join(errors[:30]), resp.raw[:800]))
        return resp

    def check(self, method, template, params=None, query=None, body=None, expect=None, code=None,
              api=None, raw=None, note=""):
        """Drives one request (subTest: a failure is recorded and the flow goes on)."""
        self.exercised.add((method, template))
        resp = None
        with self.subTest(op="%s %s" % (method, template), note=note):
            resp = self.call(method, template, params, query, body, raw, api)
            self.conform(method, template, resp, expect, code)
        return resp

    @staticmethod
    def got(resp, status, key):
        return (resp is not None and resp.status == status and isinstance(resp.json, dict)
                and key in resp.json)

    # ---- the conformance pass over every operation ---------------------------------------

    def test_conformance_of_every_operation(self):
        self.exercised = set()
        C = self.check
        rnd = str(uuid.uuid4())

        # devices
        body = request_example("POST", "/devices")
        r = C("POST", "/devices", body=body, expect=201)
        dev = r.json["entity_ident"] if self.got(r, 201, "entity_ident") else self.fx["entity_ident"]
        if self.got(r, 201, "entity_ident"):
            self.assertEqual(r.json["name"], body["name"])
            self.assertEqual(sorted(r.json["tags"]), sorted(body["tags"]))
        r = C("GET", "/devices", expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(dev, [d.get("entity_ident") for d in r.json["items"]])
        C("GET", "/devices", query={"tag": "lab", "online": "false"}, expect=200, note="filters")
        C("GET", "/devices/{entity_ident}", {"entity_ident": dev}, expect=200)
        body = request_example("PATCH", "/devices/{entity_ident}")
        r = C("PATCH", "/devices/{entity_ident}", {"entity_ident": dev}, body=body, expect=200)
        if self.got(r, 200, "name"):
            self.assertEqual(r.json["name"], body["name"])
        r = C("POST", "/devices", body={"name": "to-delete"}, expect=201, note="for DELETE")
        dev2 = r.json["entity_ident"] if self.got(r, 201, "entity_ident") else rnd
        C("DELETE", "/devices/{entity_ident}", {"entity_ident": dev2}, expect=204)
        C("GET", "/devices/{entity_ident}", {"entity_ident": dev2}, expect=404, code="not_found",
          note="deleted device")

        # scripts
        C("GET", "/scripts", expect=200)
        r = C("GET", "/scripts/{name}", {"name": "echo"}, expect=200, note="stock script")
        if self.got(r, 200, "stock"):
            self.assertIs(r.json["stock"], True)
        sname = resolve(DOC["components"]["parameters"]["script_name"])["schema"]["example"]
        body = request_example("PUT", "/scripts/{name}")
        r = C("PUT", "/scripts/{name}", {"name": sname}, body=body, expect=201, note="new")
        C("GET", "/scripts/{name}", {"name": sname}, expect=200)
        C("PUT", "/scripts/{name}", {"name": "echo"}, body=body, expect=403, code="forbidden",
          note="stock name is read-only")
        C("DELETE", "/scripts/{name}", {"name": "echo"}, expect=403, code="forbidden",
          note="stock name is read-only")

        # tasks
        body = request_example("POST", "/tasks")
        r = C("POST", "/tasks", body=body, expect=201)
        task = r.json if self.got(r, 201, "ident") else {"ident": self.fx["task_ident"], "version": 1}
        if self.got(r, 201, "ident"):
            self.assertEqual(task["version"], 1)
            self.assertEqual(task["name"], body["name"])
            self.assertIsNone(task["update_user"])
        tid = task["ident"]
        r = C("GET", "/tasks", expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(tid, [t.get("ident") for t in r.json["items"]])
        C("GET", "/tasks", query={"hide": "true", "page": 1, "per_page": 10}, expect=200, note="hide")
        C("GET", "/tasks/{task_ident}", {"task_ident": tid}, expect=200)
        r = C("PUT", "/tasks/{task_ident}", {"task_ident": tid},
              body=request_example("PUT", "/tasks/{task_ident}"), expect=200)
        if self.got(r, 200, "version"):
            self.assertEqual(r.json["version"], task.get("version", 1) + 1)
            self.assertIsNotNone(r.json["update_user"])
        r = C("PATCH", "/tasks/{task_ident}", {"task_ident": tid},
              body=request_example("PATCH", "/tasks/{task_ident}"), expect=200)
        if self.got(r, 200, "version"):
            self.assertEqual(r.json["version"], task.get("version", 1) + 2)
        r = C("PATCH", "/tasks/{task_ident}", {"task_ident": tid}, body={"signature": None},
              expect=200, note="null signature")
        if self.got(r, 200, "signature"):
            self.assertIsNone(r.json["signature"])
            self.assertEqual(r.json["version"], task.get("version", 1) + 2)
        self.assertEqual(validate(request_schema("PATCH", "/tasks/{task_ident}"), {"signature": None}), [])

        # a task using the new script: replacing the script's bytes gives it a new version
        r = C("POST", "/tasks", body=dict(request_example("POST", "/tasks"), name="uses-" + sname,
                                          script=sname, variables_info={}),
              expect=201, note="task on the tenant's script")
        t2 = r.json if self.got(r, 201, "ident") else {"ident": rnd, "version": 1}
        r = C("PUT", "/scripts/{name}", {"name": sname}, body={"source": body_source_v2()},
              expect=200, note="replace")
        if self.got(r, 200, "tasks_updated"):
            self.assertIn({"ident": t2["ident"], "version": t2.get("version", 1) + 1},
                          [{"ident": t.get("ident"), "version": t.get("version")} for t in r.json["tasks_updated"]])
        C("DELETE", "/scripts/{name}", {"name": sname}, expect=409, code="conflict", note="in use")
        C("DELETE", "/tasks/{task_ident}", {"task_ident": t2["ident"]}, expect=204)
        C("GET", "/tasks/{task_ident}", {"task_ident": t2["ident"]}, expect=404, code="not_found",
          note="deleted task")
        C("DELETE", "/scripts/{name}", {"name": sname}, expect=204)
        C("GET", "/scripts/{name}", {"name": sname}, expect=404, code="not_found", note="deleted script")

        # jobs
        body = request_example("POST", "/tasks/{task_ident}/jobs")
        body["entity_ident"] = dev
        body["notification_status_list"] = sorted(set(body.get("notification_status_list", [])) | {"cancelled"})
        r = C("POST", "/tasks/{task_ident}/jobs", {"task_ident": tid}, body=body, expect=201)
        job = r.json if self.got(r, 201, "ident") else {"ident": self.fx["job_ident"]}
        jid = job["ident"]
        if self.got(r, 201, "ident"):
            self.assertEqual(job["entity_ident"], dev)
            self.assertEqual(job["task"]["ident"], tid)
            self.assertIsNone(job["group"])
            self.assertEqual(job["comment"], body.get("comment"))
            self.assertIn(job["status"], ("pending", "transmited"))
        r = C("GET", "/tasks/{task_ident}/jobs", {"task_ident": tid}, expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(jid, [j.get("ident") for j in r.json["items"]])
        C("GET", "/jobs", expect=200)
        r = C("GET", "/jobs", query={"task_ident": tid, "entity_ident": dev, "status": "pending"},
              expect=200, note="filters")
        r = C("GET", "/jobs", query={"status": "running"}, expect=200, note="status=running")
        r = C("GET", "/jobs/{job_ident}", {"job_ident": jid}, expect=200)
        if self.got(r, 200, "ident"):
            self.assertEqual(r.json["ident"], jid)
        r = C("GET", "/jobs/{job_ident}/history", {"job_ident": jid}, expect=200)
        if self.got(r, 200, "items") and self.got(r, 200, "per_page"):
            self.assertEqual(r.json["per_page"], 500)
            self.assertTrue(r.json["items"], "history is empty")
        r = C("PATCH", "/jobs/{job_ident}/cancel", {"job_ident": jid}, expect=200)
        if self.got(r, 200, "status"):
            self.assertEqual(r.json["status"], "cancelled")
        C("PATCH", "/jobs/{job_ident}/cancel", {"job_ident": jid}, expect=409, code="job_terminal",
          note="already cancelled")
        r = C("GET", "/jobs/{job_ident}/history", {"job_ident": jid}, expect=200, note="after cancel")
        if self.got(r, 200, "items") and r.json["items"]:
            self.assertEqual(r.json["items"][0].get("status"), "cancelled", "history is newest first")
        r = C("GET", "/jobs/{job_ident}/notifications", {"job_ident": jid}, expect=200)
        if self.got(r, 200, "items") and not r.json["items"]:
            sys.stderr.write("\nNOTE: GET /jobs/{job_ident}/notifications had no item to check "
                             "(cancelled job with trigger 'cancelled', no SMTP)\n")

        # bulk sends and groups
        body = request_example("POST", "/tasks/{task_ident}/jobs/list")
        unknown = str(uuid.uuid4())
        body["ident_list"] = [dev, unknown]
        r = C("POST", "/tasks/{task_ident}/jobs/list", {"task_ident": tid}, body=body, expect=201)
        gid = self.fx["group_ident"]
        if self.got(r, 201, "items"):
            self.assertEqual([j.get("entity_ident") for j in r.json["items"]], [dev])
            self.assertEqual([x.get("entity_ident") for x in r.json["rejected"]], [unknown])
            self.assertEqual(r.json["rejected"][0]["error"]["code"], "not_found")
            self.assertEqual((r.json["group"] or {}).get("name"), body["group_name"])
            gid = (r.json["group"] or {}).get("ident", gid)
            for j in r.json["items"]:
                self.assertEqual((j.get("group") or {}).get("name"), body["group_name"])
        body = request_example("POST", "/tasks/{task_ident}/jobs/tags")
        r = C("POST", "/tasks/{task_ident}/jobs/tags", {"task_ident": tid}, body=body, expect=201)
        if self.got(r, 201, "items"):
            self.assertIn(dev, [j.get("entity_ident") for j in r.json["items"]])
            self.assertEqual((r.json["group"] or {}).get("name"), body["group_name"])
        r = C("POST", "/tasks/{task_ident}/jobs/list", {"task_ident": tid},
              body={"ident_list": [dev]}, expect=201, note="without group_name")
        if self.got(r, 201, "group"):
            self.assertIsNone(r.json["group"])
        r = C("GET", "/groups", expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(gid, [g.get("ident") for g in r.json["items"]])
        r = C("GET", "/groups/{group_ident}", {"group_ident": gid}, expect=200)
        if self.got(r, 200, "total"):
            self.assertEqual(r.json["total"], 1)
            self.assertEqual(sum(r.json["statuses"].values()), 1)
        r = C("GET", "/jobs", query={"group_ident": gid}, expect=200, note="group_ident")
        if self.got(r, 200, "items"):
            self.assertEqual(r.json["total_items"], 1)
            self.assertEqual([j.get("entity_ident") for j in r.json["items"]], [dev])
        # group sends (docs/api.md, Rollouts): a rollout's group, paused, resumed, cancelled
        body = dict(request_example("POST", "/tasks/{task_ident}/jobs/list"),
                    ident_list=[dev], group_name="paced", rollout={"max_per_minute": 1},
                    abort={"failure_percent": 50}, retry={"max_attempts": 2},
                    window={"days": ["mon"], "start": "00:00", "duration_min": 1440})
        r = C("POST", "/tasks/{task_ident}/jobs/list", {"task_ident": tid}, body=body,
              expect=201, note="rollout")
        rg = (r.json["group"] or {}).get("ident", gid) if self.got(r, 201, "group") else gid
        r = C("PATCH", "/groups/{group_ident}/pause", {"group_ident": rg}, expect=200)
        if self.got(r, 200, "status"):
            self.assertEqual(r.json["status"], "paused")
            self.assertEqual(r.json["rollout"], {"max_per_minute": 1})
        r = C("PATCH", "/groups/{group_ident}/resume", {"group_ident": rg}, body={}, expect=200)
        if self.got(r, 200, "status"):
            self.assertEqual(r.json["status"], "running")
        r = C("PATCH", "/groups/{group_ident}/cancel", {"group_ident": rg}, expect=200)
        if self.got(r, 200, "status"):
            self.assertEqual(r.json["status"], "cancelled")
        C("PATCH", "/groups/{group_ident}/pause", {"group_ident": rg}, expect=409,
          code="group_ended", note="a cancelled group")
        r = C("GET", "/groups/{group_ident}", {"group_ident": rg}, expect=200, note="cancelled")

        # keys
        body = request_example("POST", "/keys")
        r = C("POST", "/keys", body=body, expect=201)
        kid = r.json["ident"] if self.got(r, 201, "ident") else rnd
        new_key = r.json.get("api_key") if self.got(r, 201, "api_key") else None
        if new_key:
            self.assertEqual(r.json["role"], body["role"])
            self.assertStatus(self.coord.api(new_key).get("/tasks"), 200)
        r = C("GET", "/keys", expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(kid, [k.get("ident") for k in r.json["items"]])
            self.assertFalse([k for k in r.json["items"] if "api_key" in k], "GET /keys shows secrets")
        C("DELETE", "/keys/{ident}", {"ident": kid}, expect=204)
        if new_key:
            self.assertError(self.coord.api(new_key).get("/tasks"), 401, "unauthorized")
        # the caller's own key: each role reads its own
        for name, role in (("viewer", "viewer"), ("operator", "operator"), ("admin", "admin")):
            r = C("GET", "/whoami", api=getattr(self, name), expect=200, note=name)
            if self.got(r, 200, "role"):
                self.assertEqual(r.json["role"], role)

        # webhooks: created, listed, read, changed; a job's changes give deliveries whose
        # attempts fail (nobody listens on the URL's port); deleted
        body = self.generic_body("POST", "/webhooks")
        r = C("POST", "/webhooks", body=dict(body, statuses=[]), expect=201,
              note="generated secret, every status")
        hid = r.json["ident"] if self.got(r, 201, "ident") else rnd
        if self.got(r, 201, "secret"):
            self.assertEqual(len(r.json["secret"]), 64)
            self.assertEqual(r.json["events"], body["events"])
        r = C("POST", "/webhooks", body=dict(body, secret="a-secret-of-the-caller-1"), expect=201,
              note="own secret")
        if self.got(r, 201, "ident"):
            self.assertNotIn("secret", r.json)
            hid2 = r.json["ident"]
        else:
            hid2 = rnd
        r = C("GET", "/webhooks", expect=200)
        if self.got(r, 200, "items"):
            self.assertIn(hid, [h.get("ident") for h in r.json["items"]])
        r = C("GET", "/webhooks/{webhook_ident}", {"webhook_ident": hid}, expect=200)
        if self.got(r, 200, "ident"):
            self.assertNotIn("secret", r.json)
        C("POST", "/webhooks", body=dict(body, url="http://10.0.0.1/x"), expect=400,
          code="validation_failed", note="private address")
        r = C("POST", "/tasks/{task_ident}/jobs", {"task_ident": tid},
              body={"entity_ident": dev}, expect=201, note="for webhook deliveries")
        r = C("PATCH", "/webhooks/{webhook_ident}", {"webhook_ident": hid2},
              body=self.generic_body("PATCH", "/webhooks/{webhook_ident}"), expect=200)
        if self.got(r, 200, "active"):
            self.assertIs(r.json["active"], False)

        def attempted():
            got = self.call("GET", "/webhooks/{webhook_ident}/deliveries", {"webhook_ident": hid})
            return got if got.status == 200 and any(d.get("attempts") for d in got.json.get("items", [])) else None
        H.wait_for(attempted, timeout=30, what="a delivery attempt")
        r = C("GET", "/webhooks/{webhook_ident}/deliveries", {"webhook_ident": hid}, expect=200)
        if self.got(r, 200, "items"):
            self.assertTrue(r.json["items"], "no delivery")
            tried = [d for d in r.json["items"] if d["attempts"]]
            self.assertTrue(tried)
            self.assertIsNone(tried[0]["attempts"][0]["status_code"])
            self.assertTrue(tried[0]["attempts"][0]["error"])
        C("DELETE", "/webhooks/{webhook_ident}", {"webhook_ident": hid2}, expect=204)
        C("GET", "/webhooks/{webhook_ident}", {"webhook_ident": hid2}, expect=404, code="not_found",
          note="deleted webhook")

        # the audit log: the requests above, newest first
        r = C("GET", "/audit", expect=200)
        if self.got(r, 200, "items"):
            self.assertTrue(r.json["items"])
            self.assertEqual(r.json["items"][0].get("path"), "/v3/commands/webhooks/" + hid2)
        r = C("GET", "/audit", query={"target": hid, "user": "admin", "since": 0,
                                      "until": 2 ** 40}, expect=200, note="filters")
        if self.got(r, 200, "items"):
            self.assertEqual([(a["method"], a["status_code"]) for a in r.json["items"]],
                             [("POST", 201)])
        self.assertFalse([a for a in self.admin.get("/audit?per_page=500").json["items"]
                          if self.admin_key in json.dumps(a)], "a key in the audit log")

        # artifacts: an upload (201), its copy (200), a digest that differs (412), the list,
        # the record, the bytes whole and ranged (206, 416), the delete
        data = bytes(range(256)) * 4
        aid = "sha256:" + hashlib.sha256(data).hexdigest()
        aq = {"name": "oa-artifact"}
        r = C("POST", "/artifacts", query=aq, raw=data, expect=201)
        if self.got(r, 201, "ident"):
            self.assertEqual((r.json["ident"], r.json["size"]), (aid, len(data)))
        C("POST", "/artifacts", query=aq, raw=data, expect=200, note="the same bytes")
        r = self.admin.request("POST", "/artifacts?name=oa", raw=b"other",
                               headers={"rcs-sha256": "0" * 64})
        self.exercised.add(("POST", "/artifacts"))
        self.conform("POST", "/artifacts", r, 412, "digest_mismatch")
        r = C("GET", "/artifacts", query={"name": "oa-artifact"}, expect=200)
        if self.got(r, 200, "items"):
            self.assertEqual([a["ident"] for a in r.json["items"]], [aid])
        C("GET", "/artifacts/{artifact_ident}", {"artifact_ident": aid}, expect=200)
        r = C("GET", "/artifacts/{artifact_ident}/content", {"artifact_ident": aid}, expect=200)
        self.assertEqual(header(r, "ETag"), '"%s"' % aid[7:])
        for rng, status in (("bytes=0-9", 206), ("bytes=2000-", 416)):
            r = self.admin.request("GET", self.path_of("/artifacts/{artifact_ident}/content",
                                                       {"artifact_ident": aid}),
                                   headers={"Range": rng})
            self.conform("GET", "/artifacts/{artifact_ident}/content", r, status)
        C("GET", "/artifacts/{artifact_ident}", {"artifact_ident": "sha256:x"}, expect=400,
          code="invalid_parameter", note="malformed ident")
        C("DELETE", "/artifacts/{artifact_ident}", {"artifact_ident": aid}, expect=204)
        C("GET", "/artifacts/{artifact_ident}", {"artifact_ident": aid}, expect=404,
          code="not_found", note="deleted artifact")

        # the service: no api key
        nokey = H.Api(self.coord.base, None)
        r = C("GET", "/health", api=nokey, expect=200)
        if self.got(r, 200, "broker"):
            self.assertEqual(r.json, {"status": "ok", "database": "ok", "broker": "none"})
        r = C("GET", "/openapi.json", api=nokey, expect=200)
        with open(DOC_PATH, encoding="utf-8") as f:
            self.assertEqual(r.raw, f.read(), "GET /openapi.json is not docs/openapi.json")

        documented = {(m, p) for m, p, _, _ in operations()}
        self.assertEqual(sorted(documented - self.exercised), [],
                         "documented operations this test did not exercise")

    # ---- codes the document promises for every operation ----------------------------------

    def test_unauthorized_for_every_operation(self):
        self.need_fixtures()
        for method, template, op, _ in operations():
            if (method, template) in OPEN_OPERATIONS:
                continue
            for key in (None, "rcs_not_a_key_" + uuid.uuid4().hex):
                with self.subTest(op="%s %s" % (method, template), key=key):
                    self.assertIn("401", op["responses"])
                    r = self.call(method, template, body=self.generic_body(method, template),
                                  api=H.Api(self.coord.base, key))
                    self.conform(method, template, r, 401, "unauthorized")

    def test_forbidden_for_weak_roles(self):
        self.need_fixtures()
        for method, template, op, _ in operations():
            if (method, template) in OPEN_OPERATIONS:
                continue
            role = op["x-rcs-role"]
            for name, api in (("viewer", self.viewer), ("operator", self.operator)):
                if ROLE_RANK[name] >= ROLE_RANK[role]:
                    continue
                with self.subTest(op="%s %s" % (method, template), role=name):
                    r = self.call(method, template, body=self.generic_body(method, template), api=api)
                    self.conform(method, template, r, 403, "forbidden")

    def test_viewer_may_every_get(self):
        self.need_fixtures()
        for method, template, op, _ in operations():
            if method == "GET" and op.get("x-rcs-role", "viewer") == "viewer":
                with self.subTest(op="%s %s" % (method, template)):
                    self.conform(method, template, self.call(method, template, api=self.viewer), 200)

    def test_operator_may_send_and_cancel(self):
        self.need_fixtures()
        for method, template, op, _ in operations():
            if op.get("x-rcs-role") != "operator" or method == "PATCH":
                continue
            with self.subTest(op="%s %s" % (method, template)):
                r = self.call(method, template, body=self.generic_body(method, template), api=self.operator)
                self.conform(method, template, r, 201)
        with self.subTest(op="PATCH /jobs/{job_ident}/cancel"):
            r = self.call("POST", "/tasks/{task_ident}/jobs", body=self.generic_body("POST", "/tasks/{task_ident}/jobs"))
            self.conform("POST", "/tasks/{task_ident}/jobs", r, 201)
            r = self.call("PATCH", "/jobs/{job_ident}/cancel", {"job_ident": r.json["ident"]}, api=self.operator)
            self.conform("PATCH", "/jobs/{job_ident}/cancel", r, 200)

    def test_method_not_allowed(self):
        self.need_fixtures()
        spec = DOC["components"]["responses"]["MethodNotAllowed"]
        schema = spec["content"]["application/json"]["schema"]
        for template, item in DOC["paths"].items():
            if "servers" in item:
                continue  # the device route: test_device_downloads.py
            allowed = {m.upper() for m in HTTP_METHODS if m in item}
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
                if method in allowed:
                    continue
                with self.subTest(path=template, method=method):
                    r = self.call(method, template, body={} if method in ("POST", "PUT", "PATCH") else None)
                    self.assertEqual(r.status, 405, "%s %s: expected 405, got %r" % (method, template, r))
                    self.assertIsNotNone(r.json, r.raw)
                    self.assertEqual(validate(schema, r.json), [])
                    self.assertEqual(r.json["error"]["code"], "method_not_allowed")
                    allow = header(r, "Allow")
                    self.assertIsNotNone(allow, "405 without an Allow header")
                    listed = {m.strip().upper() for m in allow.split(",") if m.strip()} - {"HEAD", "OPTIONS"}
                    self.assertEqual(listed, allowed, "Allow header of %s" % template)

    def test_not_found(self):
        self.need_fixtures()
        with self.subTest(route="unknown"):
            r = self.admin.get("/no-such-route")
            self.assertError(r, 404, "not_found")
        for method, template, op, item in operations():
            names = re.findall(r"{([^}]+)}", template)
            if not names or (method, template) == ("PUT", "/scripts/{name}"):
                continue
            variants = [str(uuid.uuid4()), "not-a-uuid"] if names != ["name"] else ["no_such_script"]
            if names == ["artifact_ident"]:  # a malformed one is a 400
                variants = ["sha256:" + "0" * 64]
            for v in variants:
                with self.subTest(op="%s %s" % (method, template), ident=v):
                    self.assertIn("404", op["responses"])
                    r = self.call(method, template, {n: v for n in names},
                                  body=self.generic_body(method, template))
                    self.conform(method, template, r, 404, "not_found")
        with self.subTest(op="POST /tasks/{task_ident}/jobs", case="unknown device"):
            r = self.call("POST", "/tasks/{task_ident}/jobs", body={"entity_ident": str(uuid.uuid4())})
            self.conform("POST", "/tasks/{task_ident}/jobs", r, 404, "not_found")
            self.assertEqual(r.json["error"].get("details", {}).get("field"), "entity_ident")

    def test_bad_request(self):
        self.need_fixtures()
        for method, template, op, item in operations():
            label = "%s %s" % (method, template)
            params = {"name": "oa_bad_request"}
            if "requestBody" in op and (method, template) not in BYTES_BODY:
                with self.subTest(op=label, case="invalid json"):
                    r = self.call(method, template, params, raw=b'{"name": ')
                    self.conform(method, template, r, 400, "invalid_json")
                schema = resolve(request_schema(method, template))
                if schema.get("additionalProperties") is False:
                    with self.subTest(op=label, case="unknown field"):
                        body = self.generic_body(method, template)
                        body["no_such_field"] = 1
                        r = self.call(method, template, params, body=body)
                        self.conform(method, template, r, 400, "validation_failed")
                        self.assertEqual(r.json["error"].get("details", {}).get("field"), "no_such_field")
                if schema.get("required"):
                    with self.subTest(op=label, case="missing required"):
                        r = self.call(method, template, params, body={})
                        self.conform(method, template, r, 400, "validation_failed")
                        self.assertIn(r.json["error"].get("details", {}).get("field"), schema["required"])
            names = {p["name"] for p in op_params(op, item) if p["in"] == "query"}
            for qname, bad in (("per_page", "501"), ("page", "0"), ("per_page", "x"),
                               ("group_ident", "not-a-uuid"), ("status", "bogus")):
                if qname in names:
                    with self.subTest(op=label, query="%s=%s" % (qname, bad)):
                        r = self.call(method, template, query={qname: bad})
                        self.conform(method, template, r, 400, "invalid_parameter")
                        self.assertEqual(r.json["error"].get("details", {}).get("field"), qname)
        with self.subTest(op="POST /tasks", case="platform-assigned field"):
            body = dict(request_example("POST", "/tasks"), version=7)
            r = self.call("POST", "/tasks", body=body)
            self.conform("POST", "/tasks", r, 400, "validation_failed")
        with self.subTest(op="POST /tasks/{task_ident}/jobs/list", case="malformed ident"):
            r = self.call("POST", "/tasks/{task_ident}/jobs/list", body={"ident_list": ["nope"]})
            self.conform("POST", "/tasks/{task_ident}/jobs/list", r, 400)

    def test_payload_too_large(self):
        # every operation: the body is refused before routing, whatever the method
        self.need_fixtures()
        big = json.dumps({"pad": "x" * (1024 * 1024 + 1024)}).encode()
        for method, template, op, _ in operations():
            if (method, template) in BYTES_BODY:
                continue  # --max-body does not apply (test_artifacts.py checks its 413)
            with self.subTest(op="%s %s" % (method, template)):
                self.assertIn("413", op["responses"])
                path = "/v3/commands" + self.path_of(template, {"name": "oa_too_large"})
                r = raw_request(self.coord.port, method, path, big,
                                {"api-key": self.admin_key, "Content-Type": "application/json"})
                self.conform(method, template, r, 413, "payload_too_large")

    def test_notification_addresses(self):
        """The addresses the server takes are those the document describes: plain local@domain
        (no RFC 5322 'email' format: root@localhost and a domain with '_' are taken), and no
        empty dot-separated word in either part."""
        self.need_fixtures()
        item = resolve(DOC["components"]["schemas"]["Notification"])["properties"]["address"]
        self.assertNotIn("format", item)
        taken = ["root@localhost", "ops@mail_host.example", "first.last+tag@example.test"]
        refused = ["a..b@example.test", ".ab@example.test", "ab.@example.test",
                   "a@.example.test", "a@example.test.", "a@example..test", "a b@example.test"]
        sends = [("POST", "/tasks", {}),
                 ("PATCH", "/tasks/{task_ident}", {}),
                 ("POST", "/tasks/{task_ident}/jobs", {"entity_ident": self.fx["entity_ident"]}),
                 ("POST", "/tasks/{task_ident}/jobs/list", {"ident_list": [self.fx["entity_ident"]]})]
        for method, template, base in sends:
            body = dict(request_example(method, template), **base) if method == "POST" else {}
            schema = resolve(request_schema(method, template))["properties"]["notification_mail_list"]
            with self.subTest(op="%s %s" % (method, template), addresses=taken):
                self.assertEqual(validate(schema, taken), [])
                r = self.call(method, template, body=dict(body, notification_mail_list=taken))
                self.conform(method, template, r, 200 if method == "PATCH" else 201)
            for a in refused:
                with self.subTest(op="%s %s" % (method, template), address=a):
                    self.assertTrue(validate(schema, ["ok@example.test", a]), "the document takes %r" % a)
                    r = self.call(method, template,
                                  body=dict(body, notification_mail_list=["ok@example.test", a]))
                    self.conform(method, template, r, 400, "validation_failed")
                    self.assertEqual(r.json["error"]["details"].get("field"), "notification_mail_list[1]")

    def test_conflicts(self):
        self.need_fixtures()
        r = self.admin.post("/tasks", dict(request_example("POST", "/tasks"), name="inactive", active="false"))
        self.conform("POST", "/tasks", r, 201)
        self.assertEqual(r.json["active"], "false")
        tid = r.json["ident"]
        for template in ("/tasks/{task_ident}/jobs", "/tasks/{task_ident}/jobs/list",
                         "/tasks/{task_ident}/jobs/tags"):
            with self.subTest(op="POST " + template):
                r = self.call("POST", template, {"task_ident": tid}, body=self.generic_body("POST", template))
                self.conform("POST", template, r, 409, "task_inactive")

    def test_paging(self):
        self.need_fixtures()
        for method, template, op, item in operations():
            params = {p["name"]: p for p in op_params(op, item) if p["in"] == "query"}
            if method != "GET" or "per_page" not in params:
                continue
            default = resolve(params["per_page"]["schema"]).get("default")
            label = "%s %s" % (method, template)
            with self.subTest(op=label, case="defaults"):
                r = self.conform(method, template, self.call(method, template), 200)
                self.assertEqual(r.json["page"], 1)
                self.assertEqual(r.json["per_page"], default)
                if r.json["total_items"] > 0:
                    self.assertEqual(r.json["total_pages"], -(-r.json["total_items"] // default))
            with self.subTest(op=label, case="per_page=1"):
                r = self.conform(method, template, self.call(method, template, query={"per_page": 1}), 200)
                self.assertEqual(r.json["per_page"], 1)
                self.assertLessEqual(len(r.json["items"]), 1)
                self.assertEqual(r.json["total_pages"], r.json["total_items"])
            with self.subTest(op=label, case="past the end"):
                r = self.conform(method, template, self.call(method, template, query={"page": 1000}), 200)
                self.assertEqual(r.json["items"], [])
                self.assertEqual(r.json["page"], 1000)

    def test_documented_query_parameters_are_accepted(self):
        self.need_fixtures()
        values = {"group_ident": self.fx["group_ident"], "task_ident": self.fx["task_ident"],
                  "entity_ident": self.fx["entity_ident"]}
        for method, template, op, item in operations():
            query = {}
            for p in op_params(op, item):
                if p["in"] != "query":
                    continue
                v = values.get(p["name"], p.get("example", resolve(p["schema"]).get("example")))
                self.assertIsNotNone(v, "%s %s: query parameter %s has no example" % (method, template, p["name"]))
                query[p["name"]] = json.dumps(v) if isinstance(v, bool) else v
            if not query:
                continue
            for name in list(query) + [None]:
                q = query if name is None else {name: query[name]}
                with self.subTest(op="%s %s" % (method, template), query=q):
                    self.conform(method, template, self.call(method, template, query=q), 200)


class TestOpenApiThrottled(CoordinatorTest):
    """429 too_many_requests after too many unknown keys from one address (--auth-fail-limit)."""

    extra_args = ("--auth-fail-limit", "2")

    def test_too_many_requests_for_every_operation(self):
        spec = DOC["components"]["responses"]["TooManyRequests"]
        for _ in range(3):  # more than the limit: 401 each
            r = self.coord.api("rcs_not_a_key_" + uuid.uuid4().hex).get("/tasks")
            self.assertError(r, 401, "unauthorized")
        r = self.coord.api("rcs_not_a_key_" + uuid.uuid4().hex).get("/tasks")
        self.assertError(r, 429, "too_many_requests")
        ident = str(uuid.uuid4())
        for method, template, op, _ in operations():
            if (method, template) in OPEN_OPERATIONS:
                continue
            with self.subTest(op="%s %s" % (method, template)):
                self.assertIn("429", op["responses"])
                path = re.sub(r"{[^}]+}", ident if "name" not in template else "x", template)
                body = request_example(method, template)
                r = self.admin.request(method, path, body=body)  # a valid key changes nothing
                self.assertEqual(r.status, 429, "%s %s: %r" % (method, template, r))
                self.assertEqual(validate(response_schema(op, 429), r.json, "$", None, True), [])
                self.assertEqual(validate(spec["content"]["application/json"]["schema"], r.json,
                                          "$", None, True), [])
                self.assertEqual(r.json["error"]["code"], "too_many_requests")
                retry = header(r, "Retry-After")
                self.assertIsNotNone(retry, "429 without Retry-After")
                self.assertTrue(1 <= int(retry) <= 60, retry)
        for template in ("/health", "/openapi.json"):
            with self.subTest(op="GET " + template, case="no key while throttled"):
                r = H.Api(self.coord.base, None).get(template)
                self.assertEqual(r.status, 200, r)


def body_source_v2():
    return "-- version 2\nreturn \"site ok v2: \" .. rcs.job\n"


if __name__ == "__main__":
    unittest.main()
