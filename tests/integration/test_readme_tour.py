#!/usr/bin/env python3
"""Runs the README's tour as written: every ```sh block of "## A tour" before "Going
further", in order, in one bash, in a copy of the checkout (so its build, its tour/ files
and its daemons are the test's own). Only the two ports change, 8080 and 1884, to free ones.
What the commands print must be what the README shows in its "# ..." lines ("..." stands
for any text: idents, keys)."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from rcs_harness import SOURCE_DIR, free_port

README = os.path.join(SOURCE_DIR, "README.md")
TIMEOUT = 600  # the build included, on a loaded 2-core machine


MARK = "@@rcs-tour-block@@"


def tour_blocks(text):
    """The shell blocks of the tour, and the output lines each one shows."""
    start = text.index("\n## A tour")
    end = text.index("\nGoing further", start)
    blocks = re.findall(r"```sh\n(.*?)```", text[start:end], re.S)
    expected = [[line[2:] for line in b.splitlines() if line.startswith("# ")] for b in blocks]
    return blocks, expected


def copy_checkout(dst):
    """The checkout's files (tracked, and new ones not ignored), without its builds."""
    try:
        out = subprocess.run(["git", "-C", SOURCE_DIR, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = None
    if files is None:
        shutil.copytree(SOURCE_DIR, dst, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build*", "run", "tour", ".git"))
        return
    for f in files:
        src = os.path.join(SOURCE_DIR, f)
        if not os.path.lexists(src):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(os.path.join(dst, f)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, f), follow_symlinks=False)


def matches(expected, got):
    pattern = "^" + ".*".join(re.escape(p) for p in expected.split("...")) + "$"
    return re.match(pattern, got) is not None


class ReadmeTourTest(unittest.TestCase):

    def test_tour_runs_a_job_to_terminated(self):
        with open(README, encoding="utf-8") as f:
            blocks, expected = tour_blocks(f.read())
        self.assertGreaterEqual(len(blocks), 6, "the tour's blocks")
        self.assertIn("terminated", sum(expected, []))
        work = tempfile.mkdtemp(prefix="rcs-tour-")
        self.addCleanup(shutil.rmtree, work, True)
        copy_checkout(work)
        http_port, mqtt_port = free_port(), free_port()
        # a mark between blocks: a block that shows no output (the build) may print anything
        script = "set -euo pipefail\n" + ("echo %s\n" % MARK).join(blocks)
        script = script.replace("8080", str(http_port)).replace("1884", str(mqtt_port))
        p = subprocess.Popen(["bash", "-c", script], cwd=work, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            self.fail("the tour did not finish in %d s\nstdout:\n%s\nstderr (end):\n%s" %
                      (TIMEOUT, out, err[-3000:]))
        finally:
            # whatever the tour left running (its last block stops the daemons)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        def logs():
            text = ""
            for name in ("coordinator.log", "agent.log", "mosquitto.log"):
                path = os.path.join(work, "tour", name)
                if os.path.exists(path):
                    with open(path, errors="replace") as f:
                        text += "\n--- %s (end)\n%s" % (name, f.read()[-2000:])
            return text

        self.assertEqual(p.returncode, 0, "the tour failed\nstdout:\n%s\nstderr (end):\n%s%s" %
                         (out, err[-3000:], logs()))
        printed = out.split(MARK + "\n")
        self.assertEqual(len(printed), len(blocks), out)
        for block, want, got in zip(blocks, expected, printed):
            if not want:
                continue
            got = got.splitlines()
            self.assertEqual(len(got), len(want), "the block\n%s\nprinted\n%s" %
                             (block, "\n".join(got)))
            for w, line in zip(want, got):
                self.assertTrue(matches(w, line), "README shows %r, the tour printed %r" %
                                (w, line))


if __name__ == "__main__":
    unittest.main()
