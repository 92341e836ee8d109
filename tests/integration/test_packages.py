#!/usr/bin/env python3
"""The Debian packages (tools/package.sh; docs/deploy.md, "Packages") installed with dpkg -i
into a fresh Debian bookworm root:

- tools/package.sh makes the amd64 packages from this checkout (into the test's build
  directory) and lintian reports no error;
- a minbase root made by debootstrap, cached as a tarball between runs (RCS_CACHE_DIR,
  default /var/cache/rcs), unpacked anew for each run; the packages' Depends installed with
  apt-get from the cached root's lists (the downloaded .debs cached too);
- dpkg -i of both packages: the system users exist, `--version` of each binary answers
  (rcs, the command line, is in the coordinator's package, with its man page), the
  coordinator starts as its unit's ExecStart would (the unit's user, its StateDirectory=,
  its config file; only --listen added, on a free port), answers the API with the stock
  scripts of the package, serves the dashboard under /ui/, answers rcs, and stops cleanly
  on SIGTERM;
- dpkg --purge leaves no file behind but the state directory.

Needs root (debootstrap, chroot) and debootstrap: without either it is skipped, saying so;
RCS_NO_SKIP=1 (set by .ci/run) makes that a failure. The first run needs the Debian mirror
(debootstrap, apt-get); later runs only when the packages' Depends change.

Run (as root): RCS_BIN_DIR=build/bin RCS_SOURCE_DIR=. python3 tests/integration/test_packages.py
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from rcs_harness import BIN_DIR, SOURCE_DIR, free_port, http

CACHE_DIR = os.environ.get("RCS_CACHE_DIR", "/var/cache/rcs")
SUITE = "bookworm"
ROOT_TAR = os.path.join(CACHE_DIR, "debootstrap-%s-minbase.tar" % SUITE)
APT_ARCHIVES = os.path.join(CACHE_DIR, "apt-archives")
BUILD_DIR = os.path.dirname(BIN_DIR)


def mirror():
    """The Debian mirror this machine's apt uses (deb.debian.org when none is found)."""
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
        return "needs root (debootstrap, chroot, dpkg -i into the root it makes)"
    for tool in ("debootstrap", "lintian", "chroot", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            return "%s is not installed (tools/deps.sh test installs it)" % tool
    return None


def file_list(root):
    """Every file, link and folder under root, but what dpkg, apt and the kernel keep."""
    skip = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/lib/dpkg", "/var/cache",
            "/var/log", "/var/lib/apt")
    out = set()
    for d, dirs, files in os.walk(root):
        rel = "/" + os.path.relpath(d, root) if d != root else "/"
        if rel.startswith(skip):
            dirs[:] = []
            continue
        for n in dirs + files:
            out.add(os.path.join(rel, n))
    return out


class PackagesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        reason = why_not()
        if reason:
            # CI sets RCS_NO_SKIP=1: there, an install test that can't run is a failure
            if os.environ.get("RCS_NO_SKIP") == "1":
                raise AssertionError("test_packages cannot run (RCS_NO_SKIP=1): " + reason)
            raise unittest.SkipTest(reason)
        cls.t0 = time.time()
        cls.work = tempfile.mkdtemp(prefix="rcs-packages-")
        cls.mounts = []
        try:
            cls.build_packages()
            cls.make_root()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for m in reversed(getattr(cls, "mounts", [])):
            subprocess.run(["umount", "-l", m], capture_output=True)
        if os.environ.get("RCS_KEEP_TMP") is None and getattr(cls, "work", None):
            shutil.rmtree(cls.work, ignore_errors=True)
        if hasattr(cls, "t0"):
            print("test_packages: %.0f s" % (time.time() - cls.t0))

    @classmethod
    def build_packages(cls):
        cls.dist = os.path.join(cls.work, "dist")
        env = dict(os.environ, RCS_SKIP_DEPS="1", RCS_DIST=cls.dist,
                   RCS_PKG_BUILD=os.path.join(BUILD_DIR, "pkg"))
        cls.package_log = run([os.path.join(SOURCE_DIR, "tools", "package.sh"), "amd64"],
                              timeout=1200, env=env).stderr
        cls.debs = {}
        for n in os.listdir(cls.dist):
            cls.debs[n.split("_")[0]] = os.path.join(cls.dist, n)

    @classmethod
    def make_root(cls):
        """A fresh root from the cached debootstrap tarball (made on the first run)."""
        os.makedirs(CACHE_DIR, exist_ok=True)
        if not os.path.exists(ROOT_TAR):
            tmp = tempfile.mkdtemp(prefix="debootstrap-", dir=CACHE_DIR)
            os.chmod(tmp, 0o755)
            try:
                run(["debootstrap", "--variant=minbase", SUITE, tmp, mirror()], timeout=1800)
                shutil.copy("/etc/resolv.conf", os.path.join(tmp, "etc", "resolv.conf"))
                with open(os.path.join(tmp, "etc", "apt", "sources.list"), "w") as f:
                    f.write("deb %s %s main\n" % (mirror(), SUITE))
                run(["chroot", tmp, "apt-get", "update"], timeout=600)
                run(["tar", "-C", tmp, "-cf", ROOT_TAR + ".new", "."], timeout=600)
                os.rename(ROOT_TAR + ".new", ROOT_TAR)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        cls.root = os.path.join(cls.work, "root")
        os.makedirs(cls.root)
        run(["tar", "-C", cls.root, "-xf", ROOT_TAR], timeout=600)
        os.chmod(cls.root, 0o755)  # "/" of the root: mkdtemp made the tarball's 0700
        os.makedirs(APT_ARCHIVES, exist_ok=True)
        for src, dst in ((APT_ARCHIVES, "var/cache/apt/archives"), ("/proc", "proc")):
            target = os.path.join(cls.root, dst)
            os.makedirs(target, exist_ok=True)
            run(["mount", "--bind", src, target])
            cls.mounts.append(target)
        # what the packages need from Debian, installed first: the purge must leave the root
        # as it was before dpkg -i, not before these
        depends = ", ".join(run(["dpkg-deb", "-f", d, "Depends"]).stdout.strip()
                            for d in cls.debs.values())
        r = cls.chroot(["apt-get", "satisfy", "-y", "-q", "--no-install-recommends", depends],
                       check=False, timeout=900)
        if r.returncode != 0:
            # new versions since the cached lists: read the mirror's again, once
            cls.chroot(["apt-get", "update"], timeout=600)
            cls.chroot(["apt-get", "satisfy", "-y", "-q", "--no-install-recommends", depends],
                       timeout=900)

    @classmethod
    def chroot(cls, args, check=True, timeout=300, user=None):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
               "LC_ALL": "C"}
        pre = ["chroot"] + (["--userspec=%s:%s" % (user, user)] if user else []) + [cls.root]
        return run(pre + args, check=check, timeout=timeout, env=env)

    def unit(self, name):
        with open(os.path.join(self.root, "lib", "systemd", "system", name)) as f:
            text = f.read()
        return dict(re.findall(r"(?m)^(\w+)=(.*)$", text))

    def test_packages(self):
        self.assertEqual(sorted(self.debs), ["rcs-agent", "rcs-coordinator"])
        self.assertNotRegex(self.package_log, r"(?m)^E: ", "lintian errors")
        for d in self.debs.values():
            self.assertIn("libsystemd0", run(["dpkg-deb", "-f", d, "Depends"]).stdout)

        before = file_list(self.root)
        inside = []
        for d in self.debs.values():
            shutil.copy(d, os.path.join(self.root, "tmp"))
            inside.append("/tmp/" + os.path.basename(d))
        self.chroot(["dpkg", "-i", *inside])
        for user in ("rcs-coordinator", "rcs-agent"):
            self.assertEqual(self.chroot(["getent", "passwd", user]).returncode, 0)
        # rcs, the command line, comes with the coordinator
        for prog in ("rcs-coordinator", "rcs-agent", "rcs"):
            out = self.chroot([prog, "--version"]).stdout
            self.assertRegex(out, r"^%s \d+\.\d+\.\d+\n$" % prog)
        for page in ("man8/rcs-coordinator.8.gz", "man8/rcs-agent.8.gz", "man1/rcs.1.gz"):
            self.assertTrue(os.path.exists(os.path.join(self.root, "usr/share/man", page)), page)
        self.assertTrue(os.path.islink(os.path.join(
            self.root, "etc/systemd/system/multi-user.target.wants/rcs-coordinator.service")),
            "the unit is not enabled")
        self.run_coordinator_as_unit()

        self.chroot(["dpkg", "--purge", "rcs-coordinator", "rcs-agent"])
        left = file_list(self.root) - before
        # kept: the state directories, and the system users (Debian never removes one: files
        # may still be owned by it), with the backups of the account files adduser made
        kept = ("/var/lib/rcs-", "/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-")
        self.assertEqual(sorted(p for p in left if not p.startswith(kept)), [],
                         "left behind by the purge")

    def run_coordinator_as_unit(self):
        u = self.unit("rcs-coordinator.service")
        self.assertEqual(u["Type"], "notify")
        user, state = u["User"], u["StateDirectory"]
        # systemd makes the StateDirectory= for the unit's user
        sd = os.path.join(self.root, "var", "lib", state)
        os.makedirs(sd, exist_ok=True)
        self.chroot(["chown", "%s:%s" % (user, user), "/var/lib/" + state])
        os.chmod(sd, int(u.get("StateDirectoryMode", "0755"), 8))
        port = free_port()
        argv = u["ExecStart"].split() + ["--listen", "127.0.0.1:%d" % port]
        conf = argv[argv.index("--config") + 1]
        with open(self.root + conf) as f:
            db = re.search(r"(?m)^db (\S+)", f.read()).group(1)
        tenant = json.loads(self.chroot([argv[0], "init", "--db", db, "--user", "admin"],
                                        user=user).stdout)
        log = open(os.path.join(self.work, "coordinator.log"), "w+b")
        self.addCleanup(log.close)
        p = subprocess.Popen([shutil.which("chroot"), "--userspec=%s:%s" % (user, user),
                              self.root, *argv], stdout=log, stderr=log,
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        try:
            base = "http://127.0.0.1:%d/v3/commands" % port
            deadline = time.time() + 20
            while True:
                self.assertIsNone(p.poll(), "the coordinator exited")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    self.assertLess(time.time(), deadline, "the coordinator did not listen")
                    time.sleep(0.1)
            r = http("GET", base + "/health")
            self.assertEqual((r.status, r.json["database"]), (200, "ok"))
            r = http("GET", base + "/scripts", headers={"api-key": tenant["api_key"]})
            self.assertEqual(r.status, 200)
            self.assertIn("echo", json.dumps(r.json), "the package's stock scripts")
            # the dashboard, from the binary, and rcs against the installed coordinator
            r = http("GET", "http://127.0.0.1:%d/ui/" % port)
            self.assertEqual(r.status, 200)
            self.assertIn("<script type=\"module\"", r.raw)
            out = self.chroot(["rcs", "--url", "http://127.0.0.1:%d" % port, "--api-key",
                               tenant["api_key"], "tasks", "list", "--json"]).stdout
            self.assertIn("total_items", out)
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = None
            log.seek(0)
            out = log.read().decode()
        self.assertEqual(rc, 0, out)
        self.assertIn("stopping", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
