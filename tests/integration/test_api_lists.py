#!/usr/bin/env python3
"""Integration tests of the list options of docs/api.md "Lists": sort (created_at,
update_at, name; '-' for descending), created_after / created_before, name, the default
orders (jobs, groups and history newest first; tasks and devices oldest first), and 400 for
a query parameter an operation doesn't take; the range of the time filters."""

import time
import unittest

from rcs_harness import list_all, with_query
from rcs_fixture import CoordinatorTest
from test_openapi import op_params, operations

# The latest time a time filter takes (docs/api.md "Lists"): 2^53-1
MAX_TIME = 9007199254740991


def idents(items, key="ident"):
    return [x[key] for x in items]


class ListsTest(CoordinatorTest):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # three tasks and three devices a second apart (created_at is in seconds), then jobs
        cls.tasks, cls.devices = [], []
        for i, name in enumerate(("tango", "alpha", "mike")):
            if i:
                time.sleep(1.05)
            r = cls.admin.post("/tasks", {"name": name, "script": "echo"})
            assert r.status == 201, r
            cls.tasks.append(r.json)
            r = cls.admin.post("/devices", {"name": name, "tags": ["lists"]})
            assert r.status == 201, r
            cls.devices.append(r.json)
        cls.task = cls.tasks[0]["ident"]
        cls.jobs = []
        for i, dev in enumerate(cls.devices):
            if i:
                time.sleep(1.05)
            r = cls.admin.post("/tasks/%s/jobs" % cls.task, {"entity_ident": dev["entity_ident"]})
            assert r.status == 201, r
            cls.jobs.append(r.json)
        # the oldest job changes last: the newest update_at
        time.sleep(1.05)
        r = cls.admin.patch("/jobs/%s/cancel" % cls.jobs[0]["ident"])
        assert r.status == 200, r

    def get_all(self, path, **params):
        return list_all(self.admin, path, **params)

    def test_default_orders(self):
        jobs = idents(self.jobs)
        self.assertEqual(idents(self.get_all("/tasks/%s/jobs" % self.task)), jobs[::-1])
        mine = [j for j in idents(self.get_all("/jobs")) if j in jobs]
        self.assertEqual(mine, jobs[::-1], "jobs: newest first")
        self.assertEqual(idents(self.get_all("/tasks")), idents(self.tasks), "tasks: oldest first")
        self.assertEqual(idents(self.get_all("/devices"), "entity_ident"),
                         idents(self.devices, "entity_ident"), "devices: oldest first")
        history = self.get_all("/jobs/%s/history" % jobs[0])
        self.assertEqual([h["status"] for h in history], ["cancelled", "pending", "initial"])

    def test_sort(self):
        jobs = idents(self.jobs)
        base = "/tasks/%s/jobs" % self.task
        self.assertEqual(idents(self.get_all(base, sort="created_at")), jobs)
        self.assertEqual(idents(self.get_all(base, sort="-created_at")), jobs[::-1])
        # job 0 was cancelled last
        self.assertEqual(idents(self.get_all(base, sort="-update_at")),
                         [jobs[0], jobs[2], jobs[1]])
        self.assertEqual(idents(self.get_all(base, sort="update_at")),
                         [jobs[1], jobs[2], jobs[0]])
        self.assertEqual(idents(self.get_all("/jobs", sort="-update_at"))[0], jobs[0])
        names = [t["name"] for t in self.get_all("/tasks", sort="name")]
        self.assertEqual(names, ["alpha", "mike", "tango"])
        names = [t["name"] for t in self.get_all("/tasks", sort="-name")]
        self.assertEqual(names, ["tango", "mike", "alpha"])
        self.assertEqual(idents(self.get_all("/tasks", sort="-created_at")),
                         idents(self.tasks)[::-1])
        names = [d["name"] for d in self.get_all("/devices", sort="name")]
        self.assertEqual(names, ["alpha", "mike", "tango"])
        # groups: newest first, created_at ascending on request
        g = []
        for name in ("g1", "g2"):
            r = self.admin.post("/tasks/%s/jobs/tags" % self.task,
                                {"tag": "lists-none", "group_name": name})
            self.assertStatus(r, 201)
            g.append(r.json["group"]["ident"])
        self.assertEqual([x for x in idents(self.get_all("/groups")) if x in g], g[::-1])
        self.assertEqual([x for x in idents(self.get_all("/groups", sort="created_at"))
                          if x in g], g)
        # history oldest first on request
        history = self.get_all("/jobs/%s/history" % jobs[0], sort="update_at")
        self.assertEqual([h["status"] for h in history], ["initial", "pending", "cancelled"])
        # paging follows the order: no item twice, none left out
        pages = [self.admin.get(with_query(base, sort="-update_at", per_page=1, page=p))
                 for p in (1, 2, 3)]
        self.assertEqual([p.json["items"][0]["ident"] for p in pages],
                         [jobs[0], jobs[2], jobs[1]])

    def test_created_bounds(self):
        t = self.tasks
        first, last = t[0]["created_at"], t[2]["created_at"]
        self.assertEqual(idents(self.get_all("/tasks", created_after=first)),
                         idents(t[1:]))
        self.assertEqual(idents(self.get_all("/tasks", created_before=last)),
                         idents(t[:2]))
        self.assertEqual(idents(self.get_all("/tasks", created_after=first,
                                             created_before=last)), [t[1]["ident"]])
        self.assertEqual(self.get_all("/tasks", created_after=last), [])
        d = [x["entity_ident"] for x in self.devices]
        self.assertEqual(idents(self.get_all("/devices", created_after=self.devices[0]
                                             ["created_at"]), "entity_ident"), d[1:])
        j = idents(self.jobs)
        got = idents(self.get_all("/jobs", created_before=self.jobs[1]["created_at"],
                                  task_ident=self.task))
        self.assertEqual(got, [j[0]])
        r = self.admin.get(with_query("/tasks/%s/jobs" % self.task,
                                      created_after=self.jobs[0]["created_at"], per_page=1))
        self.assertEqual((r.json["total_items"], r.json["items"][0]["ident"]), (2, j[2]))

    def test_ident_parts(self):
        """ident_prefix and ident_suffix: the short idents of docs/cli.md, found by one
        request; hex digits and '-' only, any case."""
        j = self.jobs[1]["ident"]
        for path, key, obj in (("/jobs", "ident", self.jobs[1]),
                               ("/tasks/%s/jobs" % self.task, "ident", self.jobs[1]),
                               ("/tasks", "ident", self.tasks[2]),
                               ("/devices", "entity_ident", self.devices[0])):
            ident = obj[key]
            got = idents(self.get_all(path, ident_suffix=ident[-12:]), key)
            self.assertEqual(got, [ident], path)
            got = idents(self.get_all(path, ident_suffix=ident[-8:].upper()), key)
            self.assertEqual(got, [ident], path + " upper case")
            got = idents(self.get_all(path, ident_prefix=ident), key)
            self.assertEqual(got, [ident], path + " the whole ident")
            # a prefix of the time part: this object and others made the same second
            self.assertIn(ident, idents(self.get_all(path, ident_prefix=ident[:11]), key))
        r = self.admin.post("/tasks/%s/jobs/tags" % self.task,
                            {"tag": "lists-none", "group_name": "parts"})
        self.assertStatus(r, 201)
        g = r.json["group"]["ident"]
        self.assertEqual(idents(self.get_all("/groups", ident_suffix=g[-12:])), [g])
        self.assertEqual(idents(self.get_all("/jobs", ident_prefix=j[:13],
                                             ident_suffix=j[-4:])), [j])
        self.assertEqual(self.get_all("/jobs", ident_suffix="000000000000" if
                                      not j.endswith("000000000000") else "111111111111"), [])
        for bad in ("xyz", "%", "_1", "a" * 37):
            r = self.admin.get(with_query("/jobs", ident_prefix=bad))
            self.assertStatus(r, 400)
            self.assertEqual(r.json["error"]["details"]["field"], "ident_prefix")
            r = self.admin.get(with_query("/devices", ident_suffix=bad))
            self.assertStatus(r, 400)
            self.assertEqual(r.json["error"]["details"]["field"], "ident_suffix")
        r = self.admin.get(with_query("/jobs/%s/history" % j, ident_prefix=j[:8]))
        self.assertStatus(r, 400)

    def test_name(self):
        self.assertEqual(idents(self.get_all("/tasks", name="mike")), [self.tasks[2]["ident"]])
        self.assertEqual(self.get_all("/tasks", name="mik"), [], "exact names only")
        self.assertEqual(self.get_all("/tasks", name="MIKE"), [])
        self.assertEqual(idents(self.get_all("/devices", name="alpha"), "entity_ident"),
                         [self.devices[1]["entity_ident"]])
        self.assertEqual(idents(self.get_all("/devices", name="alpha", tag="lists",
                                             online="false"), "entity_ident"),
                         [self.devices[1]["entity_ident"]])

    def test_group_filters(self):
        """GET /groups takes name (exact), status, task_ident and tag (docs/api.md "Bulk
        sends and groups"), alone or together."""
        t0, t1 = self.tasks[0]["ident"], self.tasks[1]["ident"]

        def send(task, body):
            r = self.admin.post("/tasks/%s/jobs/tags" % task, body)
            self.assertStatus(r, 201)
            return r.json["group"]["ident"]

        empty = send(t0, {"tag": "gf-none", "group_name": "gf-empty"})
        running = send(t0, {"tag": "gf-cont", "group_name": "gf-wave", "continuous": True})
        paused = send(t1, {"tag": "gf-cont", "group_name": "gf-wave", "continuous": True})
        self.assertStatus(self.admin.patch("/groups/%s/pause" % paused), 200)
        mine = {empty, running, paused}

        def got(**params):
            return [x for x in idents(self.get_all("/groups", **params)) if x in mine]

        self.assertEqual(got(name="gf-wave"), [paused, running], "newest first")
        self.assertEqual(got(name="gf-wav"), [], "exact names only")
        self.assertEqual(got(status="paused"), [paused])
        self.assertEqual(got(status="running"), [running])
        self.assertEqual(got(status="completed"), [empty])
        self.assertEqual(got(status="cancelled"), [])
        self.assertEqual(got(task_ident=t1), [paused])
        self.assertEqual(got(tag="gf-cont"), [paused, running])
        self.assertEqual(got(tag="gf-none"), [empty])
        self.assertEqual(got(name="gf-wave", task_ident=t0, status="running", tag="gf-cont"),
                         [running])
        self.assertEqual(got(name="gf-wave", status="completed"), [])
        r = self.admin.get(with_query("/groups", name="gf-wave", per_page=1))
        self.assertEqual((r.json["total_items"], idents(r.json["items"])), (2, [paused]))
        # a wrong status names the value and the valid ones
        r = self.admin.get("/groups?status=finished")
        self.assertError(r, 400, "invalid_parameter", "status")
        msg = r.json["error"]["message"]
        self.assertIn("'finished'", msg)
        self.assertIn("running, paused, completed, aborted, cancelled", msg)
        for params, field in (({"status": ""}, "status"), ({"status": "Paused"}, "status"),
                              ({"task_ident": "alpha"}, "task_ident"),
                              ({"tag": "no spaces"}, "tag"), ({"name": ""}, "name")):
            with self.subTest(params=params):
                self.assertError(self.admin.get(with_query("/groups", **params)), 400,
                                 "invalid_parameter", field)
        self.admin.patch("/groups/%s/cancel" % paused)
        self.admin.patch("/groups/%s/cancel" % running)

    def test_bad_values(self):
        task_jobs = "/tasks/%s/jobs" % self.task
        for path, params, field in (
                ("/jobs", {"sort": "bogus"}, "sort"),
                ("/jobs", {"sort": "name"}, "sort"),
                ("/jobs", {"sort": "--created_at"}, "sort"),
                ("/jobs", {"sort": ""}, "sort"),
                ("/groups", {"sort": "update_at"}, "sort"),
                ("/jobs/%s/history" % self.jobs[0]["ident"], {"sort": "created_at"}, "sort"),
                ("/tasks", {"created_after": "-1"}, "created_after"),
                ("/tasks", {"created_after": "yesterday"}, "created_after"),
                ("/devices", {"created_before": "1.5"}, "created_before"),
                ("/devices", {"name": ""}, "name"),
                ("/tasks", {"page": "1000000001"}, "page"),
                ("/tasks", {"page": str(2 ** 64)}, "page"),
                ("/tasks", {"name": "x" * 201}, "name")):
            with self.subTest(path=path, params=params):
                self.assertError(self.admin.get(with_query(path, **params)), 400,
                                 "invalid_parameter", field)

    def test_time_filters_range(self):
        """Every query parameter in Unix seconds takes 0 .. MAX_TIME, as the document says,
        and refuses anything else naming it (2^63 and above were taken as 2^63-1)."""
        found = []
        for method, path, op, item in operations():
            for p in op_params(op, item):
                if p["in"] != "query" or "Unix seconds" not in p.get("description", ""):
                    continue
                found.append(p["name"])
                with self.subTest(op="%s %s" % (method, path), param=p["name"]):
                    self.assertEqual((p["schema"].get("minimum"), p["schema"].get("maximum")),
                                     (0, MAX_TIME))
                    url = path.replace("{task_ident}", self.task)
                    self.assertNotIn("{", url)
                    for v in (0, MAX_TIME):
                        self.assertStatus(self.admin.get(with_query(url, **{p["name"]: v})), 200)
                    for v in (MAX_TIME + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 30, -1,
                              -2 ** 63 - 1):
                        r = self.admin.get(with_query(url, **{p["name"]: v}))
                        self.assertError(r, 400, "invalid_parameter", p["name"])
                        self.assertIn(str(MAX_TIME), r.json["error"]["message"])
        self.assertEqual(sorted(set(found)),
                         ["created_after", "created_before", "since", "until"])

    def test_repeated_query_parameters(self):
        """A parameter given twice is a 400 naming it, even with the same value: only one
        would be read."""
        job = self.jobs[1]["ident"]
        for method, path, name in (
                ("GET", "/jobs?page=1&page=2", "page"),
                ("GET", "/jobs?page=1&per_page=5&page=1", "page"),
                ("GET", "/tasks?sort=name&name=mike&sort=-name", "sort"),
                ("GET", "/jobs?status=pending&status=cancelled", "status"),
                ("GET", "/devices?tag=lists&tag=other", "tag"),
                ("GET", "/tasks/%s/jobs?created_after=0&created_after=0" % self.task,
                 "created_after"),
                ("GET", "/audit?since=0&until=1&since=1", "since"),
                ("GET", "/jobs/%s/history?per_page=1&per_page=2" % job, "per_page")):
            with self.subTest(method=method, path=path):
                r = self.admin.request(method, path)
                self.assertError(r, 400, "invalid_parameter", name)
                self.assertIn("'%s'" % name, r.json["error"]["message"])
        # each once is fine
        self.assertStatus(self.admin.get("/jobs?page=1&per_page=5&status=pending"), 200)

    def test_unknown_query_parameters(self):
        """A parameter an operation doesn't take is a 400 naming it, never ignored."""
        job = self.jobs[1]["ident"]
        for method, path in (
                ("GET", "/jobs?stauts=pending"),
                ("GET", "/jobs?status=pending&page=1&limit=5"),
                ("GET", "/tasks?name=alpha&hidden=true"),
                ("GET", "/devices?tags=lists"),
                ("GET", "/groups?name=g1&state=paused"),
                ("GET", "/scripts?sort=name"),
                ("GET", "/keys?created_after=0"),
                ("GET", "/jobs/%s?verbose=1" % job),
                ("GET", "/jobs/%s/history?created_after=0" % job),
                ("GET", "/jobs/%s/notifications?sort=created_at" % job),
                ("POST", "/tasks/%s/jobs?dry_run=true" % self.task),
                ("PATCH", "/jobs/%s/cancel?force" % job)):
            with self.subTest(method=method, path=path):
                name = path.split("?")[1].split("&")[-1].split("=")[0]
                body = {"entity_ident": self.devices[0]["entity_ident"]} \
                    if method == "POST" else None
                r = self.admin.request(method, path, body)
                self.assertError(r, 400, "invalid_parameter", name)
                self.assertIn("'%s'" % name, r.json["error"]["message"])
        # nothing was done by the refused requests
        self.assertEqual(self.admin.get("/jobs/%s" % job).json["status"], "pending")
        self.assertEqual(len(self.get_all("/tasks/%s/jobs" % self.task)), 3)
        # the documented ones are fine
        for path in ("/jobs?status=pending&group_ident=%s" % self.jobs[0]["ident"],
                     "/tasks?hide=true&name=alpha", "/devices?tag=lists&online=false",
                     "/jobs/%s/history?page=1&per_page=10" % job, "/scripts?page=1"):
            with self.subTest(path=path):
                self.assertStatus(self.admin.get(path), 200)


if __name__ == "__main__":
    unittest.main()
