#!/usr/bin/env python3
"""The install path of tools/deps.sh (the README's commands start with it): after
`tools/deps.sh test`, no foreign architecture was added to dpkg, and both cross sysroots
(toolchains/cross-sysroot.cmake) hold what their toolchain file needs, every library in them
finding the libraries it loads. A sysroot made into a new folder from the target's Debian
packages (network to the Debian mirror, as the install itself) is complete, is made again when
its package list changes, and leaves dpkg's architectures as they were.

Run (Debian's python3):
  RCS_SOURCE_DIR=. /usr/bin/python3 tests/integration/test_install_path.py
"""

import os
import shutil
import subprocess
import tempfile
import unittest

from rcs_harness import SOURCE_DIR

DEPS = os.path.join(SOURCE_DIR, "tools", "deps.sh")
SYSROOT_DIR = os.environ.get("RCS_SYSROOT_DIR", "/opt/rcs-sysroot")
TRIPLETS = {"aarch64-linux-gnu": ("aarch64", "qemu-aarch64", "ELF 64-bit"),
            "arm-linux-gnueabihf": ("arm", "qemu-arm", "ELF 32-bit")}


def foreign_architectures():
    out = subprocess.run(["dpkg", "--print-foreign-architectures"], capture_output=True,
                         text=True, check=True).stdout
    return set(out.split())


def deps(*args, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([DEPS, *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def can_write_sysroots():
    if os.geteuid() == 0:
        return True
    return subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0


class InstalledSysrootsTest(unittest.TestCase):
    """What `tools/deps.sh test` left on this machine."""

    def test_no_foreign_architecture_added(self):
        before = os.path.join(SYSROOT_DIR, ".foreign-before")
        self.assertTrue(os.path.isfile(before), "tools/deps.sh test records dpkg's foreign "
                        "architectures when it first makes a sysroot: run it first")
        with open(before) as f:
            had = set(f.read().split())
        added = foreign_architectures() - had
        self.assertEqual(added, set(), "dpkg has foreign architectures the install added")

    def test_sysroots_complete(self):
        r = deps("check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for t in TRIPLETS:
            sr = os.path.join(SYSROOT_DIR, t)
            with open(os.path.join(sr, ".rcs-debs")) as f:
                self.assertIn("libpaho-mqtt-dev", f.read().split())

    def test_loader_and_libc_from_one_package(self):
        """qemu-user runs the agents with the sysroot's loader and libc (-L sysroot): both
        come from the target's libc6, so they are the same version."""
        for t, (cpu, qemu, elf) in TRIPLETS.items():
            libdir = os.path.join(SYSROOT_DIR, t, "lib", t)
            names = os.listdir(libdir)
            loader = [n for n in names if n.startswith("ld-linux")]
            self.assertEqual(len(loader), 1, names)
            for n in (loader[0], "libc.so.6"):
                out = subprocess.run(["file", "-L", os.path.join(libdir, n)],
                                     capture_output=True, text=True).stdout
                self.assertIn(elf, out)
            if shutil.which(qemu):
                # the loader runs under qemu by itself and names its version
                v = subprocess.run([qemu, "-L", os.path.join(SYSROOT_DIR, t),
                                    os.path.join(libdir, "libc.so.6")], capture_output=True,
                                   text=True, timeout=60)
                self.assertIn("GNU C Library", v.stdout, v.stderr)

    def test_check_names_what_is_missing(self):
        """A sysroot that lacks a file the toolchain needs, or a library another one loads,
        or was made from another list, fails the check with its name."""
        tmp = tempfile.mkdtemp(prefix="rcs-sysroot-check-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for t in TRIPLETS:
            shutil.copytree(os.path.join(SYSROOT_DIR, t), os.path.join(tmp, t), symlinks=True)
        t = "aarch64-linux-gnu"
        os.remove(os.path.join(tmp, t, "usr", "lib", t, "pkgconfig", "json-c.pc"))
        ssl = os.path.join(tmp, t, "usr", "lib", t, "libssl.so.3")
        os.remove(ssl)
        with open(os.path.join(tmp, "arm-linux-gnueabihf", ".rcs-debs"), "a") as f:
            f.write(" another-package")
        r = deps("check", env={"RCS_SYSROOT_DIR": tmp})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no usr/lib/%s/pkgconfig/json-c.pc" % t, r.stdout)
        self.assertIn("loads libssl.so.3", r.stdout)
        self.assertIn("arm-linux-gnueabihf: not made from the list", r.stdout)


@unittest.skipUnless(can_write_sysroots(), "making a sysroot needs root or sudo without a "
                     "password (apt-get as root)")
class MakeSysrootsTest(unittest.TestCase):
    """tools/deps.sh makes both sysroots into an empty folder, and again when the list
    changes, without adding a foreign architecture."""

    def test_make_and_remake(self):
        tmp = tempfile.mkdtemp(prefix="rcs-sysroots-")
        self.addCleanup(subprocess.run, ["sudo", "-n", "rm", "-rf", tmp] if os.geteuid()
                        else ["rm", "-rf", tmp])
        env = {"RCS_SYSROOT_DIR": tmp}
        had = foreign_architectures()
        r = deps("sysroots", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(foreign_architectures(), had)
        r = deps("check", env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # nothing to do when the list is the same
        r = deps("sysroots", env=env)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # another list: that sysroot (only) is made again, into a new folder
        t = "arm-linux-gnueabihf"
        stamp = os.path.join(tmp, t, ".rcs-debs")
        ino = os.stat(os.path.join(tmp, t)).st_ino
        other = os.stat(os.path.join(tmp, "aarch64-linux-gnu")).st_ino
        with open(stamp) as f:
            listed = f.read()
        with open(stamp, "w") as f:
            f.write(listed.replace(" libseccomp2", ""))
        r = deps("sysroots", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("making the armhf sysroot", r.stderr)
        self.assertNotIn("arm64", r.stderr)
        self.assertNotEqual(os.stat(os.path.join(tmp, t)).st_ino, ino)
        self.assertEqual(os.stat(os.path.join(tmp, "aarch64-linux-gnu")).st_ino, other)
        with open(stamp) as f:
            self.assertEqual(f.read(), listed)
        self.assertEqual(deps("check", env=env).returncode, 0)
        self.assertEqual(sorted(n for n in os.listdir(tmp) if not n.startswith(".")),
                         sorted(TRIPLETS), "no half-made folder left beside the sysroots")


if __name__ == "__main__":
    unittest.main(verbosity=2)
