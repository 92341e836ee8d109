"""A 3-node NATS cluster with JetStream and MQTT on loopback, for the integration tests
(docs/scale-out.md, "The broker cluster: NATS").

    cluster = NatsCluster(workdir).start()       # waits until every node serves MQTT
    cluster.mqtt_urls                             # ["tcp://127.0.0.1:<port>", ...], node order
    cluster.nodes[1].mqtt_port                    # one node's MQTT port
    cluster.stop_node(1); cluster.start_node(1)   # kill by pid, start again on its store
    cluster.connz(0)                              # /connz of node 0 (MQTT client ids)
    cluster.stop_all()

Every node gets free ports (client, cluster route, MQTT, HTTP monitoring), its own
JetStream store in workdir and a generated configuration naming the routes of all three.
accounts: text of an accounts block appended to every node's generated configuration;
None runs without authentication. conf_for(node, nodes) instead produces each node's whole
file (test_nats_acl.py: the shipped deploy/nats/node-<n>.conf, rewritten); probe_auth
(username, password) is what the readiness probe connects with.
"""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
import uuid

from rcs_harness import end_process, free_port, wait_for

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
CLUSTER_NAME = "rcs"


class NatsNode:
    """One nats-server of the cluster."""

    def __init__(self, workdir, index):
        self.index = index
        self.name = "n%d" % (index + 1)
        self.client_port = free_port()
        self.cluster_port = free_port()
        self.mqtt_port = free_port()
        self.http_port = free_port()
        self.store_dir = os.path.join(workdir, "nats-%s-store" % self.name)
        self.conf = os.path.join(workdir, "nats-%s.conf" % self.name)
        self.log_path = os.path.join(workdir, "nats-%s.log" % self.name)
        self.proc = None
        self.log = None

    @property
    def mqtt_url(self):
        return "tcp://127.0.0.1:%d" % self.mqtt_port

    # the harness's Mosquitto has .port and .url: a node can stand in for it
    @property
    def port(self):
        return self.mqtt_port

    @property
    def url(self):
        return self.mqtt_url

    def monitor(self, path, timeout=5):
        """GET path on the node's monitoring port, decoded JSON (None when unreachable)."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.http_port, path),
                                        timeout=timeout) as r:
                return json.loads(r.read().decode())
        except (OSError, ValueError):
            return None

    def read_log(self, tail=20000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-tail:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def default_conf(node, nodes, accounts=None):
    """The configuration of one node: server_name, its ports, the routes to every node,
    JetStream on its own store, MQTT; accounts (text) appended when given."""
    routes = ",\n    ".join("nats-route://127.0.0.1:%d" % n.cluster_port for n in nodes)
    return """server_name: %(name)s
listen: 127.0.0.1:%(client)d
http: 127.0.0.1:%(http)d
jetstream {
  store_dir: "%(store)s"
}
cluster {
  name: %(cluster)s
  listen: 127.0.0.1:%(cport)d
  routes: [
    %(routes)s
  ]
}
mqtt {
  listen: 127.0.0.1:%(mqtt)d
}
%(accounts)s
""" % {"name": node.name, "client": node.client_port, "http": node.http_port,
       "store": node.store_dir, "cluster": CLUSTER_NAME, "cport": node.cluster_port,
       "routes": routes, "mqtt": node.mqtt_port, "accounts": accounts or ""}


class NatsCluster:
    """Three nats-server processes forming one JetStream cluster with MQTT."""

    def __init__(self, workdir, size=3, accounts=None, conf_for=None, probe_auth=None):
        self.workdir = workdir
        self.nodes = [NatsNode(workdir, i) for i in range(size)]
        self.accounts = accounts
        self.conf_for = conf_for
        # (username, password) the readiness probe connects with (None: anonymous)
        self.probe_auth = probe_auth
        for n in self.nodes:
            os.makedirs(n.store_dir, exist_ok=True)
            text = conf_for(n, self.nodes) if conf_for else default_conf(n, self.nodes, accounts)
            with open(n.conf, "w") as f:
                f.write(text)

    @property
    def mqtt_urls(self):
        return [n.mqtt_url for n in self.nodes]

    # -- life ------------------------------------------------------------------------------

    def start(self, timeout=60):
        """Starts every node and waits until the cluster is ready; on failure the nodes
        are stopped again (by pid) before the error is raised."""
        try:
            for n in self.nodes:
                self._spawn(n)
            self.wait_ready(timeout=timeout)
        except BaseException:
            self.stop_all()
            raise
        return self

    def _spawn(self, node):
        if node.alive():
            raise AssertionError("nats node %s already running" % node.name)
        node.log = open(node.log_path, "ab")
        node.proc = subprocess.Popen([NATS_SERVER, "-c", node.conf], stdout=node.log,
                                     stderr=subprocess.STDOUT)

    def start_node(self, i, timeout=60):
        """Starts node i again (same ports, same JetStream store) and waits until the
        cluster serves MQTT on every running node."""
        self._spawn(self.nodes[i])
        self.wait_ready(timeout=timeout)

    def stop_node(self, i, sig=signal.SIGKILL):
        """Stops node i by pid (SIGKILL by default: a crash); returns its exit code."""
        n = self.nodes[i]
        if n.proc is None:
            return None
        end_process(n.proc, sig, 15)
        n.log.close()
        rc = n.proc.returncode
        n.proc = None
        return rc

    def stop_all(self):
        for i in range(len(self.nodes)):
            self.stop_node(i, signal.SIGTERM)

    # -- readiness -------------------------------------------------------------------------

    def running(self):
        return [n for n in self.nodes if n.proc is not None]

    def wait_ready(self, timeout=60):
        """Waits until every running node has its routes to the other running ones,
        JetStream has a meta leader, and an MQTT connect (with probe_auth) works on each."""
        up = self.running()

        def check():
            for n in up:
                if n.proc.poll() is not None:
                    raise AssertionError("nats node %s exited with %d:\n%s" % (
                        n.name, n.proc.returncode, n.read_log()))
                routez = n.monitor("/routez")
                if routez is None or routez.get("num_routes", 0) < len(up) - 1:
                    return False
                jsz = n.monitor("/jsz")
                if not jsz or not (jsz.get("meta_cluster") or {}).get("leader"):
                    return False
            return True

        deadline = time.time() + timeout
        wait_for(check, timeout=timeout, interval=0.2, what="the NATS cluster's routes and "
                 "JetStream meta leader")
        for n in up:
            # the first MQTT client of a node makes the MQTT streams (a few seconds); a
            # node whose session-stream leader just died refuses connects for a while
            wait_for(lambda: self.mqtt_probe(n) == 0, timeout=max(5, deadline - time.time()),
                     interval=0.5, what="an MQTT connect on NATS node %s:\n%s" % (
                         n.name, n.read_log(3000)))

    def mqtt_probe(self, node, client_id=None):
        """One MQTT 3.1.1 connect to node (clean session): the CONNACK code, or -1."""
        import paho.mqtt.client as mqtt
        got = []
        ev = threading.Event()
        c = mqtt.Client(client_id=client_id or "probe-%s" % uuid.uuid4().hex[:12],
                        clean_session=True, protocol=mqtt.MQTTv311)
        if self.probe_auth:
            c.username_pw_set(*self.probe_auth)

        def on_connect(client, userdata, flags, rc):
            got.append(rc)
            ev.set()
        c.on_connect = on_connect
        try:
            c.connect("127.0.0.1", node.mqtt_port, keepalive=10)
        except OSError:
            return -1
        c.loop_start()
        try:
            ev.wait(8)
            return got[0] if got else -1
        finally:
            try:
                c.disconnect()
            finally:
                c.loop_stop()

    # -- monitoring ------------------------------------------------------------------------

    def connz(self, i):
        """/connz of node i with the MQTT client id of each connection (subs too)."""
        return self.nodes[i].monitor("/connz?subs=1&auth=1&limit=1024") or {}

    def mqtt_client_ids(self, i):
        return [c.get("mqtt_client") for c in self.connz(i).get("connections", [])
                if c.get("mqtt_client")]

    def logs(self, tail=3000):
        return "\n".join("--- %s ---\n%s" % (n.name, n.read_log(tail)) for n in self.nodes)

