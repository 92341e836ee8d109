"""Shared set-up and tear-down of the integration tests (rcs_harness.py has the daemons).

StackTest gives a test class its own directory and stops what the class starts in it (brokers,
SMTP servers, NATS clusters, coordinators, agents, scripted devices and clients) by pid at the
end, also when setUpClass fails half-way; its tearDownClass stops the coordinator with SIGTERM
and fails when it died during the tests or did not exit 0. CoordinatorTest is a StackTest with
one coordinator and a tenant with an admin key.

Environment: as rcs_harness.py (RCS_BIN_DIR, RCS_TEST_DB=postgres through test_db);
RCS_KEEP_TMP keeps each class's directory (remove_workdir).
"""

import signal
import sys
import tempfile
import unittest

from rcs_harness import (Agent, Coordinator, FakeDevice, Mosquitto, SmtpServer, remove_workdir,
                         wait_for)


def note(msg):
    """An observation worth reading in the test output (not a failure)."""
    sys.stderr.write("\n[note] %s\n" % msg)


def stop_quietly(thing):
    """Stops what a test class started, at its end, and never fails: a coordinator or agent
    still running by pid with SIGKILL; a scripted device (FakeDevice) cleanly, or at least
    its network loop when the broker is gone; a NATS cluster with stop_all(); anything else
    with stop() or, lacking it, close()."""
    try:
        if isinstance(thing, (Coordinator, Agent)):
            if thing.proc is not None:
                thing.stop(signal.SIGKILL)
        elif isinstance(thing, FakeDevice):
            try:
                thing.stop()
            except Exception:  # the broker is gone, already stopped...
                thing.client.loop_stop()
        elif hasattr(thing, "stop_all"):
            thing.stop_all()
        elif hasattr(thing, "stop"):
            thing.stop()
        else:
            thing.close()
    except Exception:
        pass


def stop_checked(coord, what="coordinator"):
    """Stops a coordinator with SIGTERM; fails (with the end of its log) when it had died
    before or exited with anything but 0."""
    alive = coord.alive()
    log = coord.read_log()[-4000:]
    rc = coord.stop()
    if not alive:
        raise AssertionError("%s died during the tests:\n%s" % (what, log))
    if rc != 0:
        raise AssertionError("%s exited with %r on SIGTERM:\n%s" % (what, rc, log))


class StackTest(unittest.TestCase):
    """Base class: a directory per test class (workdir_prefix) and what the class starts.

    tearDownClass stops what is in cls.clients and cls.fakes (lists the tests append to), then
    cls.coord with SIGTERM, and fails when it died or exited with anything but 0
    (check_coordinator False: it is only stopped at the end, with SIGKILL). At the end of
    the class, after tearDownClass and also when setUpClass failed, everything in
    cls.clients, cls.fakes and cls.agents is stopped, then cls.coord and every thing given to
    own() in the reverse order (stop_quietly), then the directory is removed (unless
    RCS_KEEP_TMP). start_broker(), start_smtp(), start_coordinator() and start_stack()
    start the usual daemons and own them. The names workdir, coord, broker, clients, fakes
    and agents of the class are the fixture's.
    """

    workdir_prefix = "rcs-test-"
    check_coordinator = True

    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(prefix=cls.workdir_prefix)
        cls.coord = cls.broker = None
        cls.clients, cls.fakes, cls.agents = [], [], []
        cls._owned = []
        cls.addClassCleanup(cls._stop_all)

    @classmethod
    def tearDownClass(cls):
        for thing in cls.clients + cls.fakes:
            stop_quietly(thing)
        cls.clients, cls.fakes = [], []
        if cls.check_coordinator and cls.coord is not None:
            stop_checked(cls.coord)

    @classmethod
    def _stop_all(cls):
        # cls.coord too: a test may have put another coordinator in its place
        for thing in cls.clients + cls.fakes + cls.agents + [cls.coord] + cls._owned[::-1]:
            if thing is not None:
                stop_quietly(thing)
        remove_workdir(cls.workdir)

    @classmethod
    def own(cls, thing):
        """thing (not started yet, or started) is stopped at the end of the class."""
        cls._owned.append(thing)
        return thing

    # -- the usual daemons -----------------------------------------------------------------

    @classmethod
    def start_broker(cls, **kw):
        """A mosquitto in workdir (Mosquitto's arguments), started; the first is cls.broker."""
        broker = cls.own(Mosquitto(cls.workdir, **kw))
        broker.start()
        if cls.broker is None:
            cls.broker = broker
        return broker

    @classmethod
    def start_smtp(cls, **kw):
        """An SMTP server in this process (SmtpServer's arguments), started."""
        return cls.own(SmtpServer(**kw)).start()

    @classmethod
    def start_coordinator(cls, extra_args=(), connected=None, timeout=20,
                          what="the coordinator connected to the broker", **kw):
        """cls.coord: a coordinator in workdir (Coordinator's arguments) with a tenant whose
        user is admin, started, and cls.client_root, cls.admin_key, cls.admin (an Api with
        the admin key). connected: a text its log shows once it is ready (e.g. "status
        reports: " once connected to the broker), waited for. Returns the tenant."""
        cls.coord = cls.own(Coordinator(cls.workdir, extra_args=extra_args, **kw))
        tenant = cls.coord.init_tenant(user="admin")
        cls.client_root = tenant["client_root"]
        cls.admin_key = tenant["api_key"]
        cls.coord.start()
        cls.admin = cls.coord.api(cls.admin_key)
        if connected is not None:
            wait_for(lambda: connected in cls.coord.read_log(), timeout=timeout, what=what)
        return tenant

    @classmethod
    def replace_coordinator(cls, extra_args=(), db=None, **kw):
        """A new coordinator in place of cls.coord (stopped by now), on its database unless
        db is given (Coordinator's arguments), started: cls.coord, and cls.admin with the
        same admin key. Returns it."""
        new = Coordinator(cls.workdir, extra_args=extra_args, db=db or cls.coord.db, **kw)
        cls.coord = new
        new.start()
        cls.admin = new.api(cls.admin_key)
        return new

    @classmethod
    def start_stack(cls, signing_key=None, coord_args=(), **broker_kw):
        """A mosquitto and a coordinator connected to it that signs tasks with signing_key
        (None: no signing); coord_args: more serve flags. Returns the tenant."""
        cls.start_broker(**broker_kw)
        args = ["--mqtt", cls.broker.url] + (["--signing-key", signing_key] if signing_key
                                              else [])
        return cls.start_coordinator(args + list(coord_args), connected="status reports: ")

    @classmethod
    def class_device(cls, name="dev", tags=()):
        """A new inventory device (POST /devices as admin); its record."""
        r = cls.admin.post("/devices", {"name": name, "tags": list(tags)})
        assert r.status == 201, r
        return r.json

    def job(self, ident):
        """A job's record (GET /jobs/<ident> as admin)."""
        r = self.admin.get("/jobs/" + ident)
        self.assertEqual(r.status, 200, r)
        return r.json

    @classmethod
    def wait_coord_log(cls, text, timeout=20, what="the coordinator connected to the broker",
                       mark=0):
        """Waits until text is in the coordinator's whole log after offset mark."""
        wait_for(lambda: text in cls.coord_log()[mark:], timeout=timeout, what=what)

    @classmethod
    def coord_log(cls, coord=None):
        """The whole log of coord (cls.coord), not only its end."""
        try:
            with open((coord or cls.coord).log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class CoordinatorTest(StackTest):
    """Base class: one coordinator per test class (serve + extra_args), a tenant with an
    admin key.

    self.admin is an Api with the admin key; make_device(), make_task() help.
    """

    extra_args = ()
    roles = False         # also cls.operator (user olga) and cls.viewer (vera): role_api()
    other_tenant = False  # also a second tenant (user eve): cls.other (an Api), cls.other_root

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.start_coordinator(cls.extra_args)
        if cls.roles:
            cls.operator = cls.role_api("olga", "operator")
            cls.viewer = cls.role_api("vera", "viewer")
        if cls.other_tenant:
            other = cls.coord.init_tenant(user="eve")
            cls.other_root = other["client_root"]
            cls.other = cls.coord.api(other["api_key"])

    @classmethod
    def role_api(cls, user, role, client_root=None):
        """An Api with a new key of user with role in client_root (the admin's tenant)."""
        return cls.coord.api(cls.coord.create_key(client_root or cls.client_root, user,
                                                  role)["api_key"])

    def assertStatus(self, resp, status):
        self.assertEqual(resp.status, status, "expected %d, got %r" % (status, resp))

    def assertError(self, resp, status, code, field=None):
        self.assertStatus(resp, status)
        self.assertIsNotNone(resp.json, resp.raw)
        self.assertIn("error", resp.json)
        self.assertEqual(resp.json["error"]["code"], code, resp.raw)
        self.assertTrue(resp.json["error"]["message"])
        if field is not None:
            self.assertEqual(resp.json["error"].get("details", {}).get("field"), field, resp.raw)

    def make_device(self, name="dev", tags=()):
        r = self.admin.post("/devices", {"name": name, "tags": list(tags)})
        self.assertStatus(r, 201)
        return r.json

    def make_task(self, **fields):
        body = {"name": "task", "script": "echo"}
        body.update(fields)
        r = self.admin.post("/tasks", body)
        self.assertStatus(r, 201)
        return r.json
