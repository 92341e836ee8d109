#!/usr/bin/env python3
"""The agent says it is online only once the broker granted its subscriptions (docs/mqtt.md,
"Connection sequence"; docs/agent.md, "Connection").

A real mosquitto runs with its dynamic security plugin, which (unlike an acl_file, which
grants every subscription and delivers nothing) refuses a subscription its rules deny in the
SUBACK (0x80), as a NATS account's permissions do. Every client connects anonymously and may
do anything, but the rule of the test: device D's jobs filter, rcs/v1/<root>/<D>/jobs/+, is
denied, then allowed, then denied again, with mosquitto_ctrl as the broker's administrator.

Checked with the real coordinator and a real agent for D: while the filter is refused the
agent logs the refusal (filter and SUBACK code) and asks again, and D never shows online:
no state with "online": true reaches the broker, the coordinator shows D offline, and a job
for D is refused 409 device_offline (so none is sent to a device that would not receive it).
Once the rule allows the filter, the agent's next ask is granted on the same connection, D
comes online and runs a job to terminated. After a broker restart (persistence keeps the
retained online state of the last connection) with the filter refused again, the agent
reconnects in the same order: the retained state becomes "online": false and the coordinator
shows D offline; allowed again and the broker restarted, D comes online and runs a job.

Run (Debian's python3: it has paho-mqtt):
  RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_agent_suback.py
RCS_KEEP_TMP=1 keeps the directory (broker, coordinator and agent logs, the plugin's rules).
"""

import glob
import json
import os
import subprocess
import time
import unittest

from rcs_fixture import StackTest
from rcs_harness import Agent, Mosquitto, Watcher, make_ec_keypair, wait_for

DYNSEC = sorted(glob.glob("/usr/lib/*/mosquitto_dynamic_security.so") +
                glob.glob("/usr/lib/mosquitto_dynamic_security.so"))
ADMIN, ADMIN_PASSWORD = "admin", "dynsec-admin-pw"
ROLE = "devices"


class DynsecBroker(Mosquitto):
    """mosquitto with the dynamic security plugin: anonymous clients are in a group whose
    role (ROLE) starts without rules, so they may do anything (defaultACLAccess all true);
    deny() and allow() add and remove a rule refusing one subscription filter while the
    broker runs (the plugin then disconnects the clients of the role, who connect again under
    the new rules, and saves the rules); rule() changes the saved rules while it is stopped."""

    def __init__(self, workdir):
        if not DYNSEC:
            raise AssertionError("mosquitto's dynamic security plugin is missing "
                                 "(Debian package mosquitto, tools/deps.sh)")
        self.rules = os.path.join(workdir, "dynamic-security.json")
        super().__init__(workdir, extra_conf="plugin %s\nplugin_opt_config_file %s\n" % (
            DYNSEC[0], self.rules))
        subprocess.run(["mosquitto_ctrl", "dynsec", "init", self.rules, ADMIN, ADMIN_PASSWORD],
                       check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                       timeout=30)
        with open(self.rules) as f:
            rules = json.load(f)
        rules["defaultACLAccess"] = {"publishClientSend": True, "publishClientReceive": True,
                                     "subscribe": True, "unsubscribe": True}
        rules.setdefault("groups", []).append({"groupname": "anonymous",
                                               "roles": [{"rolename": ROLE}]})
        rules["roles"].append({"rolename": ROLE, "acls": []})
        rules["anonymousGroup"] = "anonymous"
        with open(self.rules, "w") as f:
            json.dump(rules, f)

    def ctrl(self, *args):
        p = subprocess.run(["mosquitto_ctrl", "-h", "127.0.0.1", "-p", str(self.port),
                            "-u", ADMIN, "-P", ADMIN_PASSWORD, "dynsec", *args],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0 or "rror" in p.stdout + p.stderr:
            raise AssertionError("mosquitto_ctrl dynsec %s: %s%s" % (
                " ".join(args), p.stdout, p.stderr))

    def deny(self, topic_filter):
        self.ctrl("addRoleACL", ROLE, "subscribeLiteral", topic_filter, "deny")

    def allow(self, topic_filter):
        self.ctrl("removeRoleACL", ROLE, "subscribeLiteral", topic_filter)

    def rule(self, topic_filter, deny):
        """(stopped) The saved rules with topic_filter denied (deny) or not."""
        with open(self.rules) as f:
            rules = json.load(f)
        role = [r for r in rules["roles"] if r["rolename"] == ROLE][0]
        role["acls"] = [a for a in role.get("acls", []) if a["topic"] != topic_filter]
        if deny:
            role["acls"].append({"acltype": "subscribeLiteral", "topic": topic_filter,
                                 "priority": 0, "allow": False})
        with open(self.rules, "w") as f:
            json.dump(rules, f)


class RefusedJobsFilterTest(StackTest):
    workdir_prefix = "rcs-agent-suback-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.key, cls.pub = make_ec_keypair(cls.workdir, "k")
        cls.broker = cls.own(DynsecBroker(cls.workdir))
        cls.broker.start()
        cls.start_coordinator(["--mqtt", cls.broker.url, "--signing-key", cls.key],
                              connected="status reports: ")
        r = cls.admin.post("/tasks", {"name": "echo", "script": "echo"})
        assert r.status == 201, r
        cls.task = r.json
        r = cls.admin.post("/devices", {"name": "d"})
        assert r.status == 201, r
        cls.d = r.json["entity_ident"]

    def topic(self, *rest):
        return "/".join(["rcs/v1", self.client_root, self.d] + list(rest))

    def online(self):
        r = self.admin.get("/devices/" + self.d)
        self.assertEqual(r.status, 200, r)
        return r.json["online"]

    def published_states(self, watcher, since=0):
        """The states D published while watcher was subscribed (not the retained ones a
        (re)subscription gets), from the since-th message recorded on."""
        return [json.loads(m[1]) for m in watcher.on(self.topic("state"))[since:] if not m[3]]

    def retained_state(self):
        """The state the broker keeps for D, as a new subscriber gets it."""
        w = Watcher(self.broker, self.topic("state"), prefix="retained-").start()
        try:
            wait_for(lambda: w.received(), timeout=5, what="D's retained state")
            topic, payload, qos, retain = w.received()[0]
            self.assertTrue(retain, "not the retained state")
            return json.loads(payload)
        finally:
            w.stop()

    def post_job(self):
        return self.admin.post("/tasks/%s/jobs" % self.task["ident"], {"entity_ident": self.d})

    def run_job(self):
        r = self.post_job()
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.json["status"], "transmited", r)
        job = r.json["ident"]
        done = wait_for(lambda: self.job(job)["status"] in ("terminated", "edge_error")
                        and self.job(job), timeout=30, what="the job ended")
        self.assertEqual(done["status"], "terminated", done)

    def refusals(self, agent, mark=0):
        return agent.read_log(tail=None)[mark:].count(
            "the broker refused the subscription to %s" % self.topic("jobs", "+"))

    def assert_not_online(self, agent, watcher, mark, since):
        """D is refused its jobs filter: the agent asked for it again (twice), and never
        said it is online meanwhile (from its log's offset mark, the watcher's since-th
        message)."""
        wait_for(lambda: self.refusals(agent, mark) >= 2, timeout=20,
                 what="the jobs filter refused twice (asked for again)")
        log = agent.read_log(tail=None)[mark:]
        self.assertIn("refused the subscription to %s (SUBACK code 0x80" %
                      self.topic("jobs", "+"), log)
        wait_for(lambda: not self.online(), timeout=10, what="D offline at the coordinator")
        time.sleep(1.0)
        self.assertFalse(self.online(), "D shown online with its jobs filter refused")
        said = self.published_states(watcher, since)
        self.assertEqual([s for s in said if s["online"]], [],
                         "a state online: true with the jobs filter refused")
        self.assertFalse(self.retained_state()["online"])
        r = self.post_job()
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.json["error"]["code"], "device_offline", r)
        self.assertIn("not online while the broker refuses the subscription to %s" %
                      self.topic("jobs", "+"), log)

    def test_online_only_once_the_jobs_filter_is_granted(self):
        jobs = self.topic("jobs", "+")
        self.broker.deny(jobs)
        watcher = Watcher(self.broker, self.topic("state")).start()
        self.clients.append(watcher)
        agent = Agent(self.workdir, self.broker.url, self.client_root, self.d,
                      trusted_keys=[self.pub], name="agent-d")
        self.agents.append(agent)
        agent.start()

        # refused on the first connection: never online
        self.assert_not_online(agent, watcher, 0, 0)

        # allowed (the plugin disconnects the agent, which connects again): granted, and D
        # comes online
        mark = len(agent.read_log(tail=None))
        self.broker.allow(jobs)
        wait_for(self.online, timeout=40, what="D online once its jobs filter is granted")
        self.assertTrue(self.retained_state()["online"])
        self.assertIn("subscribed to this device's jobs and cancels: online",
                      agent.read_log(tail=None)[mark:])
        self.run_job()

        # the broker restarted with the filter refused, the retained online: true of the
        # last connection kept (persistence): the agent connects again and says offline
        self.broker.stop()
        self.broker.rule(jobs, deny=True)
        mark = len(agent.read_log(tail=None))
        since = len(watcher.on(self.topic("state")))
        self.broker.start()
        wait_for(lambda: "connected to " in agent.read_log(tail=None)[mark:], timeout=30,
                 what="the agent connected again")
        self.assert_not_online(agent, watcher, mark, since)

        # allowed again: online after the reconnect, and a job runs
        mark = len(agent.read_log(tail=None))
        self.broker.allow(jobs)
        wait_for(self.online, timeout=40, what="D online after the reconnect")
        self.assertIn("subscribed to this device's jobs and cancels: online",
                      agent.read_log(tail=None)[mark:])
        self.run_job()
        self.assertTrue(agent.alive())


if __name__ == "__main__":
    unittest.main()
