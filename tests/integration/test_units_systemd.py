#!/usr/bin/env python3
"""The packages' systemd units (docs/deploy.md, "The units") run by a real systemd, booted in
a container with systemd-nspawn:

- tools/package.sh makes the amd64 packages; a Debian bookworm root with systemd (the
  debootstrap minbase root of test_packages.py plus systemd, systemd-sysv and dbus, cached as
  a tarball between runs: RCS_CACHE_DIR, default /var/cache/rcs) gets them with dpkg -i,
  their Depends from apt-get; the configuration as docs/deploy.md gives it: a signing key
  made with openssl, the coordinator's broker and signing key, the agent's broker, trusted
  key and one allow_command, but no device identity yet;
- the container boots (it shares the host's network: mosquitto runs on the host, on a free
  port); the coordinator's unit is active (Type=notify: after READY=1), the agent's has
  failed with exit status 2, is not restarted, and its error is in `journalctl -p err`;
- the first tenant (`runuser ... rcs-coordinator init`) and an operator key (`key create`)
  made inside, the device registered through the API from the host, its identity appended
  to agent.conf, `rcs-agent --check`, `systemctl restart rcs-agent`: active, online;
- jobs from the host through the API reach `terminated`: the stock `echo`, and the stock
  `exec` running an allowlisted command: the jail (the launcher's fork, the child's
  resource limits and its own seccomp filter, execve of the command) works inside the
  unit's sandbox, whose seccomp filter, no_new_privs and empty capability sets the agent
  is seen to run under; a sleeping job's child has one more seccomp filter, its own, and
  a cancel ends it;
- `systemctl reload` of both keeps them active with the same main pid; a forged envelope
  is refused and logged as a warning (PRIORITY=4) in the journal, whose lines carry no
  time or pid of their own; `systemctl kill -s KILL rcs-agent`: Restart=on-failure brings
  it back and it runs jobs again;
- `systemctl stop` of both ends them cleanly (Result=success), the container powers off,
  and no process is left in its control group.

Needs root (chroot, mounts, systemd-nspawn), systemd-nspawn (systemd-container), nsenter,
and what tools/package.sh uses, on a machine or in a container (not in a chroot, where
systemd-nspawn cannot mount /); without them it is skipped, saying so; RCS_NO_SKIP=1 (set by
.ci/run) makes that a failure. The first run needs the Debian mirror (debootstrap,
apt-get); later runs only when the packages' Depends change.

Run (as root): RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. python3 tests/integration/test_units_systemd.py
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

from rcs_harness import (BIN_DIR, SOURCE_DIR, Api, Mosquitto, free_port, http,
                         make_ec_keypair, wait_for)

CACHE_DIR = os.environ.get("RCS_CACHE_DIR", "/var/cache/rcs")
SUITE = "bookworm"
# the minbase root test_packages.py makes and caches, and this test's root made from it
MINBASE_TAR = os.path.join(CACHE_DIR, "debootstrap-%s-minbase.tar" % SUITE)
SYSTEMD_TAR = os.path.join(CACHE_DIR, "%s-systemd.tar" % SUITE)
SYSTEMD_DEBS = ["systemd", "systemd-sysv", "dbus"]
APT_ARCHIVES = os.path.join(CACHE_DIR, "apt-archives")
BUILD_DIR = os.path.dirname(BIN_DIR)
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
              "LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
UNITS = ("rcs-coordinator", "rcs-agent")


def note(msg):
    print("test_units_systemd: " + msg, flush=True)


def mirror():
    """The Debian mirror this machine's apt uses (as test_packages.py)."""
    for d in ("/etc/apt/sources.list.d", "/etc/apt"):
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".list", ".sources")):
                continue
            with open(os.path.join(d, name)) as f:
                text = f.read()
            m = re.search(r"(?m)^(?:URIs:|deb)\s+(\S+/debian)/?\s", text + "\n")
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


def run(args, timeout=600, check=True, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(args), r.returncode,
                                                          r.stdout[-4000:], r.stderr[-4000:]))
    return r


def why_not():
    if os.geteuid() != 0:
        return "needs root (chroot, mounts, systemd-nspawn)"
    tools = ["systemd-nspawn", "nsenter", "chroot", "dpkg-shlibdeps", "lintian", "mosquitto"]
    if not os.path.exists(SYSTEMD_TAR) and not os.path.exists(MINBASE_TAR):
        tools.append("debootstrap")
    for tool in tools:
        if shutil.which(tool) is None:
            return "%s is not installed (tools/deps.sh test installs it)" % tool
    if cgroup_roots() is None:
        return "no cgroup hierarchy this test knows (/sys/fs/cgroup)"
    if in_chroot():
        return ("this runs in a chroot: systemd-nspawn needs / to be a mount point (a machine"
                " or a container, not a chroot)")
    return None


def in_chroot():
    """Whether / is not a mount point of this process's view, as in a chroot: there
    systemd-nspawn cannot make / a slave mount."""
    try:
        with open("/proc/self/mountinfo") as f:
            return not any(line.split()[4] == "/" for line in f if len(line.split()) > 4)
    except OSError:
        return False


def cgroup_roots():
    """The cgroup hierarchies a container's own group is made in: the unified one and, on a
    hybrid layout, systemd's named v1 hierarchy (systemd-nspawn uses both)."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return ["/sys/fs/cgroup"]
    if os.path.isdir("/sys/fs/cgroup/systemd") and os.path.isdir("/sys/fs/cgroup/unified"):
        return ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]
    return None


def cgroup_pids(path):
    """Every pid in the cgroup path and below it."""
    pids = set()
    for d, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids.update(int(p) for p in f.read().split())
            except OSError:
                pass
    return pids


def remove_stale_cgroups():
    """The control groups of an earlier run that could not clean up (killed with SIGKILL,
    say): its container's processes are ended and the groups removed."""
    for r in cgroup_roots():
        for name in os.listdir(r):
            m = re.match(r"^rcs-units-(\d+)$", name)
            if m is None or os.path.exists("/proc/%s" % m.group(1)):
                continue
            path = os.path.join(r, name)
            for pid in cgroup_pids(path):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            shutil.rmtree("/run/systemd/nspawn/propagate/" + name, ignore_errors=True)
            note("removed the container of an earlier run (%s)" % path)
            try:
                wait_for(lambda: not cgroup_pids(path), timeout=10, what="its end")
            finally:
                remove_cgroup(path)


def mounts_under(path):
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return [m for m in points if m == path or m.startswith(path + "/")]


def remove_stale_roots():
    """The folders (and mounts) of an earlier run killed before its cleanup."""
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(r"^rcs-units-(\d+)-", name)
        if m is None or os.path.exists("/proc/%s" % m.group(1)):
            continue
        path = os.path.join(tmp, name)
        # its broker: a process whose command line names a file there
        for pid in os.listdir("/proc"):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if (path + "/").encode() in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        for point in sorted(mounts_under(path), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        if mounts_under(path):
            continue  # never remove what is still mounted there
        note("removed the root of an earlier run (%s)" % path)
        shutil.rmtree(path, ignore_errors=True)


def remove_cgroup(path):
    for d, _, _ in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(d)
        except OSError:
            pass


class UnitsSystemdTest(unittest.TestCase):
    """One container for the class: setUpClass builds, installs, configures and boots;
    the tests run in name order, each step on the state the one before left."""

    @classmethod
    def setUpClass(cls):
        reason = why_not()
        if reason:
            # CI sets RCS_NO_SKIP=1: there, a test that can't run is a failure
            if os.environ.get("RCS_NO_SKIP") == "1":
                raise AssertionError("test_units_systemd cannot run (RCS_NO_SKIP=1): " + reason)
            raise unittest.SkipTest(reason)
        cls.t0 = time.time()
        cls.work = tempfile.mkdtemp(prefix="rcs-units-%d-" % os.getpid())
        cls.name = "rcs-units-%d" % os.getpid()
        cls.mounts = []
        cls.nspawn = None
        cls.broker = None
        cls.passed = set()
        cls.cgroups = [os.path.join(r, cls.name) for r in cgroup_roots()]
        cls.addClassCleanup(cls.cleanup)
        remove_stale_cgroups()
        remove_stale_roots()
        cls.build_packages()
        cls.make_root()
        cls.install()
        cls.broker = Mosquitto(cls.work, persistence=False).start()
        cls.configure()
        cls.boot()
        note("ready after %.0f s" % (time.time() - cls.t0))

    # -- the root ----------------------------------------------------------------------

    @classmethod
    def build_packages(cls):
        dist = os.path.join(cls.work, "dist")
        env = dict(os.environ, RCS_SKIP_DEPS="1", RCS_DIST=dist,
                   RCS_PKG_BUILD=os.path.join(BUILD_DIR, "pkg"))
        run([os.path.join(SOURCE_DIR, "tools", "package.sh"), "amd64"], timeout=1200, env=env)
        cls.debs = sorted(os.path.join(dist, n) for n in os.listdir(dist))

    @classmethod
    def cached_root(cls):
        """The minbase root with systemd, as a tarball in CACHE_DIR (made when missing)."""
        os.makedirs(CACHE_DIR, exist_ok=True)
        if os.path.exists(SYSTEMD_TAR):
            return
        tmp = tempfile.mkdtemp(prefix="systemd-root-", dir=CACHE_DIR)
        os.chmod(tmp, 0o755)
        mounted = []
        try:
            if os.path.exists(MINBASE_TAR):
                run(["tar", "-C", tmp, "-xf", MINBASE_TAR], timeout=600)
            else:
                # what test_packages.py makes and caches, made here when it hasn't run yet
                run(["debootstrap", "--variant=minbase", SUITE, tmp, mirror()], timeout=1800)
                shutil.copy("/etc/resolv.conf", os.path.join(tmp, "etc", "resolv.conf"))
                with open(os.path.join(tmp, "etc", "apt", "sources.list"), "w") as f:
                    f.write("deb %s %s main\n" % (mirror(), SUITE))
                run(["chroot", tmp, "apt-get", "update"], timeout=600, env=CHROOT_ENV)
            os.makedirs(APT_ARCHIVES, exist_ok=True)
            target = os.path.join(tmp, "var/cache/apt/archives")
            run(["mount", "--bind", APT_ARCHIVES, target])
            mounted.append(target)
            args = ["chroot", tmp, "apt-get", "install", "-y", "-q", "--no-install-recommends"]
            if run(args + SYSTEMD_DEBS, check=False, timeout=900, env=CHROOT_ENV).returncode:
                run(["chroot", tmp, "apt-get", "update"], timeout=600, env=CHROOT_ENV)
                run(args + SYSTEMD_DEBS, timeout=900, env=CHROOT_ENV)
            run(["umount", target])
            mounted.remove(target)
            run(["tar", "-C", tmp, "-cf", SYSTEMD_TAR + ".new", "."], timeout=600)
            os.rename(SYSTEMD_TAR + ".new", SYSTEMD_TAR)
        finally:
            for m in mounted:
                subprocess.run(["umount", "-l", m], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def make_root(cls):
        cls.cached_root()
        cls.root = os.path.join(cls.work, "root")
        os.makedirs(cls.root)
        run(["tar", "-C", cls.root, "-xf", SYSTEMD_TAR], timeout=600)
        os.chmod(cls.root, 0o755)

    @classmethod
    def chroot(cls, args, check=True, timeout=300):
        return run(["chroot", cls.root] + args, check=check, timeout=timeout, env=CHROOT_ENV)

    @classmethod
    def install(cls):
        """The packages' Depends from apt (the cached .debs), then dpkg -i of both."""
        for src, dst in ((APT_ARCHIVES, "var/cache/apt/archives"), ("/proc", "proc")):
            target = os.path.join(cls.root, dst)
            os.makedirs(target, exist_ok=True)
            run(["mount", "--bind", src, target])
            cls.mounts.append(target)
        depends = ", ".join(run(["dpkg-deb", "-f", d, "Depends"]).stdout.strip()
                            for d in cls.debs)
        satisfy = ["apt-get", "satisfy", "-y", "-q", "--no-install-recommends", depends]
        if cls.chroot(satisfy, check=False, timeout=900).returncode != 0:
            cls.chroot(["apt-get", "update"], timeout=600)  # newer versions: the lists again
            cls.chroot(satisfy, timeout=900)
        inside = []
        for d in cls.debs:
            shutil.copy(d, os.path.join(cls.root, "tmp"))
            inside.append("/tmp/" + os.path.basename(d))
        cls.chroot(["dpkg", "-i", *inside])
        for target in reversed(cls.mounts):
            run(["umount", target])
        cls.mounts = []

    @classmethod
    def owner(cls, user):
        with open(os.path.join(cls.root, "etc", "passwd")) as f:
            for line in f:
                col = line.split(":")
                if col[0] == user:
                    return int(col[2]), int(col[3])
        raise AssertionError("no user %s in the root" % user)

    @classmethod
    def configure(cls):
        """docs/deploy.md: the signing key pair, the coordinator's configuration, and the
        agent's but for the device's identity (made through the API once it runs)."""
        etc = os.path.join(cls.root, "etc", "rcs")
        key, pub = make_ec_keypair(cls.work, "signing")
        shutil.copy(key, os.path.join(etc, "signing-key.pem"))
        os.chown(os.path.join(etc, "signing-key.pem"), *cls.owner("rcs-coordinator"))
        os.chmod(os.path.join(etc, "signing-key.pem"), 0o600)
        shutil.copy(pub, os.path.join(etc, "signing-pub.pem"))
        os.chmod(os.path.join(etc, "signing-pub.pem"), 0o644)

        cls.port = free_port()
        cls.base = "http://127.0.0.1:%d/v3/commands" % cls.port
        path = os.path.join(etc, "coordinator.conf")
        with open(path) as f:
            text = f.read()
        text, n = re.subn(r"(?m)^listen .*$", "listen 127.0.0.1:%d" % cls.port, text)
        assert n == 1, "no listen line in the packaged coordinator.conf"
        text += "mqtt %s\nsigning_key /etc/rcs/signing-key.pem\n" % cls.broker.url
        with open(path, "w") as f:
            f.write(text)

        cls.agent_conf = os.path.join(etc, "agent.conf")
        with open(cls.agent_conf, "a") as f:
            f.write("mqtt %s\ntrusted_key /etc/rcs/signing-pub.pem\n"
                    "allow_command uname=/bin/uname\n" % cls.broker.url)

    # -- the container -----------------------------------------------------------------

    @classmethod
    def boot(cls):
        """systemd-nspawn --boot in control groups of its own (cls.cgroups), which the
        cleanup empties and removes; waits until systemd has finished booting."""
        groups = cls.cgroups
        for g in groups:
            os.makedirs(g, exist_ok=True)

        def enter_groups():
            os.setsid()  # a process group of its own
            for g in groups:
                with open(os.path.join(g, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))

        cls.console = open(os.path.join(cls.work, "console.log"), "w+b")
        # --register=no: no machined on this host; --keep-unit: nor a system bus
        cls.nspawn = subprocess.Popen(
            ["systemd-nspawn", "--quiet", "-D", cls.root, "--register=no", "--keep-unit",
             "--boot", "--machine", cls.name],
            stdin=subprocess.DEVNULL, stdout=cls.console, stderr=subprocess.STDOUT,
            preexec_fn=enter_groups)
        cls.pid1 = wait_for(cls.container_init, timeout=30, interval=0.1,
                            what="the container's systemd")

        def booted():
            # fails until systemd listens on its private socket
            r = cls.inside(["systemctl", "is-system-running", "--wait"], check=False,
                           timeout=120)
            return r if r.stdout.strip() in ("running", "degraded", "maintenance",
                                             "stopping") else None
        r = wait_for(booted, timeout=120, interval=0.2, what="the container's boot")
        if r.stdout.strip() not in ("running", "degraded"):
            raise AssertionError("the container's boot: %s\n%s" % (r.stdout, cls.read_console()))

    @classmethod
    def container_init(cls):
        """The pid (on the host) of the container's PID 1: systemd-nspawn's child."""
        if cls.nspawn.poll() is not None:
            raise AssertionError("systemd-nspawn exited with %d:\n%s" % (
                cls.nspawn.returncode, cls.read_console()))
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % p) as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == cls.nspawn.pid and "(systemd)" in stat:
                return int(p)
        return None

    @classmethod
    def read_console(cls):
        cls.console.flush()
        with open(cls.console.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-6000:]

    @classmethod
    def inside(cls, args, check=True, timeout=60):
        """Runs args in the container (its mount, UTS, IPC, network and pid namespaces)."""
        r = run(["nsenter", "-t", str(cls.pid1), "-m", "-u", "-i", "-n", "-p", "--", *args],
                check=False, timeout=timeout, env=CHROOT_ENV)
        if check and r.returncode != 0:
            raise AssertionError("in the container, %s failed (%d):\n%s\n%s\n%s" % (
                " ".join(args), r.returncode, r.stdout[-3000:], r.stderr[-3000:],
                cls.status_text()))
        return r

    @classmethod
    def status_text(cls):
        try:
            r = run(["nsenter", "-t", str(cls.pid1), "-m", "-u", "-i", "-n", "-p", "--",
                     "systemctl", "status", "--no-pager", "-l", "-n", "30", *UNITS],
                    check=False, timeout=30, env=CHROOT_ENV)
            return r.stdout[-6000:]
        except Exception as e:  # the container may be gone
            return "(no status: %s)" % e

    @classmethod
    def poweroff(cls, timeout=60):
        """Powers the container off; returns systemd-nspawn's exit code. Falls back to
        SIGTERM of systemd-nspawn (it halts the container), then to SIGKILL of the
        container's init (ending its pid namespace) and of systemd-nspawn."""
        p = cls.nspawn
        if p is None:
            return None
        if p.poll() is None:
            try:
                cls.inside(["systemctl", "poweroff", "--no-block"], check=False, timeout=30)
                p.wait(timeout=timeout)
            except (subprocess.TimeoutExpired, AssertionError):
                pass
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            try:
                os.kill(cls.pid1, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        cls.nspawn = None
        cls.console.close()
        return p.returncode

    @classmethod
    def cleanup(cls):
        """Runs whatever happened: the container, anything left in its control groups,
        the broker, mounts, the root."""
        errors = []
        if cls.nspawn is not None:
            cls.poweroff()
        for g in getattr(cls, "cgroups", []):
            left = cgroup_pids(g) if os.path.isdir(g) else set()
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if left:
                errors.append("processes left in %s: %s" % (g, sorted(left)))
                try:
                    wait_for(lambda: not cgroup_pids(g), timeout=10, what="their end")
                except AssertionError as e:
                    errors.append(str(e))
            remove_cgroup(g)
        # systemd-nspawn's own leftover on a host without systemd
        shutil.rmtree("/run/systemd/nspawn/propagate/" + getattr(cls, "name", "-"),
                      ignore_errors=True)
        if cls.broker is not None:
            cls.broker.stop()
        for m in reversed(getattr(cls, "mounts", [])):
            subprocess.run(["umount", "-l", m], capture_output=True)
        if os.environ.get("RCS_KEEP_TMP") is None and getattr(cls, "work", None):
            shutil.rmtree(cls.work, ignore_errors=True)
        else:
            note("kept %s" % cls.work)
        if hasattr(cls, "t0"):
            note("%.0f s in all" % (time.time() - cls.t0))
        if errors:
            raise AssertionError("; ".join(errors))

    # -- helpers -----------------------------------------------------------------------

    def show(self, unit, *props):
        out = self.inside(["systemctl", "show", unit, "-p", ",".join(props)]).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def assertActive(self, *units):
        r = self.inside(["systemctl", "is-active", *units], check=False)
        self.assertEqual(r.stdout.split(), ["active"] * len(units), self.status_text())

    def journal(self, unit, priority):
        """The unit's journal entries of priority and above, as dicts (journalctl -o json)."""
        out = self.inside(["journalctl", "-u", unit, "-p", priority, "-o", "json",
                           "--no-pager"]).stdout
        entries = []
        for line in out.splitlines():
            e = json.loads(line)
            m = e.get("MESSAGE")
            if isinstance(m, list):  # not UTF-8: journalctl gives the bytes
                e["MESSAGE"] = bytes(m).decode("utf-8", "replace")
            entries.append(e)
        return entries

    def messages(self, unit, priority):
        return [e["MESSAGE"] for e in self.journal(unit, priority)]

    def proc_status(self, pid):
        """/proc/PID/status of a process in the container, the real uid as Uid."""
        text = self.inside(["cat", "/proc/%d/status" % pid]).stdout
        fields = dict(re.findall(r"(?m)^(\w+):\s*(.*)$", text))
        fields["Uid"] = fields["Uid"].split()[0]
        return fields

    def processes(self, name):
        """The pids of the container's processes named name (their comm)."""
        out = self.inside(["sh", "-c", "for s in /proc/[0-9]*/comm; do "
                           "[ \"$(cat $s 2>/dev/null)\" = %s ] && echo ${s%%/comm}; done; "
                           "true" % name]).stdout
        return [int(line.rsplit("/", 1)[1]) for line in out.split()]

    def main_pid(self, unit):
        return int(self.show(unit, "MainPID")["MainPID"])

    def run_job(self, task, variables=None, timeout=60):
        api = self.operator()
        body = {"entity_ident": self.device["entity_ident"]}
        if variables is not None:
            body["variables"] = variables
        r = api.post("/tasks/%s/jobs" % task["ident"], body)
        self.assertEqual(r.status, 201, r)
        ident = r.json["ident"]

        def done():
            j = api.get("/jobs/" + ident).json
            return j if j["status"] in ("terminated", "edge_error", "cancelled",
                                        "expired") else None
        try:
            return wait_for(done, timeout=timeout, interval=0.2, what="job %s" % ident)
        except AssertionError:
            raise AssertionError("job %s did not end: %r\n%s\n%s" % (
                ident, api.get("/jobs/%s/history" % ident).json, self.status_text(),
                "\n".join(self.messages("rcs-agent", "debug")[-30:])))

    def operator(self):
        return Api(self.base, type(self).operator_key)

    def admin(self):
        return Api(self.base, type(self).admin_key)

    def assertTerminated(self, job):
        self.assertEqual(job["status"], "terminated", "%r\n%s" % (
            job, "\n".join(self.messages("rcs-agent", "debug")[-30:])))
        return job

    # -- the steps ---------------------------------------------------------------------

    def setUp(self):
        # every step needs the tenant and the device of the first
        if self._testMethodName != "test_1_boot" and "test_1_boot" not in self.passed:
            self.fail("test_1_boot failed: this step can't run")

    def tearDown(self):
        if self._outcome.success:
            self.passed.add(self._testMethodName)

    def test_1_boot(self):
        cls = type(self)
        for u in UNITS:
            self.assertTrue(os.path.islink(os.path.join(
                self.root, "etc/systemd/system/multi-user.target.wants/%s.service" % u)),
                "%s is not enabled" % u)
        # Type=notify: active once the daemon said READY=1
        self.assertActive("rcs-coordinator")
        r = http("GET", self.base + "/health")
        self.assertEqual(r.status, 200, r)
        self.assertEqual((r.json["database"], r.json["broker"]), ("ok", "connected"))
        # the agent without its device's identity: exit status 2, not restarted, the
        # reason an error in the journal (SyslogLevel=err: the line has no priority)
        s = self.show("rcs-agent", "ActiveState", "Result", "ExecMainStatus", "NRestarts")
        self.assertEqual(s, {"ActiveState": "failed", "Result": "exit-code",
                             "ExecMainStatus": "2", "NRestarts": "0"}, self.status_text())
        errors = self.messages("rcs-agent", "err")
        self.assertTrue(any(m.startswith("rcs-agent: ") and "--client-root" in m
                            for m in errors), errors)

        # the first tenant and a second key, inside, as docs/deploy.md says
        out = self.inside(["runuser", "-u", "rcs-coordinator", "--", "rcs-coordinator", "init",
                           "--db", "/var/lib/rcs-coordinator/rcs.db", "--user", "admin"]).stdout
        tenant = json.loads(out)
        cls.client_root, cls.admin_key = tenant["client_root"], tenant["api_key"]
        out = self.inside(["runuser", "-u", "rcs-coordinator", "--", "rcs-coordinator", "key",
                           "create", "--db", "/var/lib/rcs-coordinator/rcs.db",
                           "--client-root", cls.client_root, "--user", "ops",
                           "--role", "operator"]).stdout
        cls.operator_key = json.loads(out)["api_key"]
        r = self.admin().get("/scripts")
        self.assertEqual(r.status, 200, r)
        self.assertIn("exec", json.dumps(r.json), "the package's stock scripts")

        # the device: registered from the host, its identity in agent.conf, a restart
        r = self.admin().post("/devices", {"name": "container", "tags": ["nspawn"]})
        self.assertEqual(r.status, 201, r)
        cls.device = r.json
        with open(cls.agent_conf, "a") as f:
            f.write("client_root %s\nentity_ident %s\n" % (cls.client_root,
                                                          cls.device["entity_ident"]))
        r = self.inside(["rcs-agent", "--config", "/etc/rcs/agent.conf", "--check"])
        self.assertEqual(r.stdout, "configuration OK\n")
        self.inside(["systemctl", "restart", "rcs-agent"], timeout=120)
        self.assertActive(*UNITS)
        self.assertEqual(self.show("rcs-coordinator", "StatusText")["StatusText"], "serving")
        self.assertEqual(self.show("rcs-agent", "StatusText")["StatusText"], "connected")
        wait_for(lambda: self.admin().get("/devices/" + cls.device["entity_ident"])
                 .json["online"], timeout=30, what="the device online")

    def test_2_jobs(self):
        # the unit's sandbox is in force on the agent: a seccomp filter, no_new_privs, no
        # capabilities (docs/deploy.md, "The units")
        fields = self.proc_status(self.main_pid("rcs-agent"))
        self.assertEqual((fields["Seccomp"], fields["NoNewPrivs"], fields["CapEff"],
                          fields["CapBnd"]), ("2", "1", "0" * 16, "0" * 16), fields)
        self.assertEqual(fields["Uid"], self.inside(["id", "-u", "rcs-agent"]).stdout.strip())

        echo = self.admin().post("/tasks", {
            "name": "echo", "script": "echo",
            "variables_info": {"message": {"type": "string", "optional": True}}})
        self.assertEqual(echo.status, 201, echo)
        self.assertIsNotNone(echo.json["signature"], "signed with the packaged signing_key")
        type(self).echo = echo.json
        job = self.assertTerminated(self.run_job(echo.json, {"message": "from systemd"}))
        self.assertEqual(job["response"], "from systemd")

        # rcs.exec: the jailed child asks the launcher, which runs the allowlisted program
        exe = self.admin().post("/tasks", {
            "name": "exec", "script": "exec",
            "variables_info": {"command": {"type": "string"},
                               "args": {"type": "string", "optional": True}}})
        self.assertEqual(exe.status, 201, exe)
        job = self.assertTerminated(self.run_job(exe.json, {"command": "uname", "args": "-s"}))
        self.assertEqual(json.loads(job["response"]), {"code": 0, "output": "Linux\n"})
        job = self.run_job(exe.json, {"command": "rm", "args": "-rf /"})
        self.assertEqual(job["status"], "edge_error", job)
        self.assertIn("command 'rm' is not allowed", job["response"])

        # a job asleep in the jail: its child runs as the unit's user under the unit's
        # seccomp filter and the one it loaded itself, stacked on it; a cancel ends it
        r = self.admin().put("/scripts/nap", {"source": 'rcs.sleep(120) return "woke"'})
        self.assertIn(r.status, (200, 201), r)
        r = self.admin().post("/tasks", {"name": "nap", "script": "nap", "timeout": 300})
        self.assertEqual(r.status, 201, r)
        r = self.operator().post("/tasks/%s/jobs" % r.json["ident"],
                                 {"entity_ident": self.device["entity_ident"]})
        self.assertEqual(r.status, 201, r)
        nap = r.json["ident"]
        jail = wait_for(lambda: self.processes("rcs-jail"), timeout=30,
                        what="the job's jailed child")
        self.assertEqual(len(jail), 1, jail)
        child = self.proc_status(jail[0])
        self.assertEqual((child["Seccomp"], child["NoNewPrivs"], child["CapEff"], child["Uid"]),
                         ("2", "1", "0" * 16, fields["Uid"]), child)
        self.assertGreater(int(child["Seccomp_filters"]), int(fields["Seccomp_filters"]),
                           "the child's own filter, on top of the unit's")
        note("seccomp filters: %s on the agent, %s on its jailed child" % (
            fields["Seccomp_filters"], child["Seccomp_filters"]))
        r = self.operator().patch("/jobs/%s/cancel" % nap)
        self.assertEqual(r.status, 200, r)
        wait_for(lambda: self.operator().get("/jobs/" + nap).json["status"] == "cancelled",
                 timeout=30, what="the job cancelled")
        wait_for(lambda: not self.processes("rcs-jail"), timeout=30, what="the child's end")

    def test_3_reload(self):
        for unit in UNITS:
            pid = self.main_pid(unit)
            self.inside(["systemctl", "reload", unit], timeout=60)
            self.assertActive(unit)
            self.assertEqual(self.main_pid(unit), pid, "%s restarted on reload" % unit)
        wait_for(lambda: any("SIGHUP: trusted keys (1), allowlists and tags reloaded" in m
                             for m in self.messages("rcs-agent", "info")),
                 timeout=10, what="the agent's reload in the journal")
        wait_for(lambda: any("SIGHUP: reloading stock scripts" in m
                             for m in self.messages("rcs-coordinator", "info")),
                 timeout=10, what="the coordinator's reload in the journal")

    def test_4_journal(self):
        # a forged envelope straight to the device's topic: refused, a warning
        job = str(uuid.uuid4())
        topic = "rcs/v1/%s/%s/jobs/%s" % (self.client_root, self.device["entity_ident"], job)
        self.broker.pub(topic, '{"v": 1, "job": "%s"' % job)
        text = "job %s refused: malformed envelope" % job
        entry = wait_for(lambda: [e for e in self.journal("rcs-agent", "warning")
                                  if text in e["MESSAGE"]],
                         timeout=20, what="the refusal in the journal")[0]
        self.assertEqual(entry["PRIORITY"], "4", entry)
        self.assertTrue(entry["MESSAGE"].startswith("warning: "), entry)
        self.assertNotIn(text, "\n".join(self.messages("rcs-agent", "err")))
        # under the journal, lines carry no time nor pid of their own (docs/deploy.md, "Logs")
        for unit in UNITS:
            msgs = self.messages(unit, "info")
            self.assertTrue(msgs, unit)
            for m in msgs:
                self.assertNotRegex(m, r"^\d{4}-\d\d-\d\dT|\b%s\[\d+\]" % unit)
                self.assertNotRegex(m, r"^<\d>", "a priority prefix journald did not read")

    def test_5_restart_after_kill(self):
        before = self.show("rcs-agent", "MainPID", "NRestarts")
        self.inside(["systemctl", "kill", "-s", "KILL", "rcs-agent"])

        def back():
            s = self.show("rcs-agent", "ActiveState", "MainPID", "NRestarts")
            return s if (s["ActiveState"] == "active" and s["MainPID"] != before["MainPID"]
                         and s["MainPID"] != "0") else None
        s = wait_for(back, timeout=60, interval=0.2, what="rcs-agent restarted")
        self.assertEqual(int(s["NRestarts"]), int(before["NRestarts"]) + 1)
        job = self.assertTerminated(self.run_job(self.echo, {"message": "after the kill"}))
        self.assertEqual(job["response"], "after the kill")

    def test_6_stop(self):
        cls = type(self)
        self.inside(["systemctl", "stop", *UNITS], timeout=120)
        for unit in UNITS:
            s = self.show(unit, "ActiveState", "Result", "MainPID")
            self.assertEqual(s, {"ActiveState": "inactive", "Result": "success",
                                 "MainPID": "0"}, unit)
            self.assertTrue(any("stopping" in m for m in self.messages(unit, "info")), unit)
        rc = cls.poweroff()
        self.assertEqual(rc, 0, "systemd-nspawn's exit code")
        for g in cls.cgroups:
            self.assertEqual(cgroup_pids(g), set(), "processes left in " + g)


if __name__ == "__main__":
    unittest.main(verbosity=2)
