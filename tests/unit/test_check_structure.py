#!/usr/bin/python3
"""tools/check-structure.py on the fixture tree tests/vectors/structure/: it must report each
kind of violation the fixture holds (a file without a reason, a bridge file, a function, a
circle of calls, one of includes, an include that runs back up, struct bridge), none of what
the fixture only seems to hold (a call in a comment or a string, a static namesake, a file with
its reason), and an exception that no longer occurs as stale."""
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("RCS_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(SRC, "tools", "check-structure.py")
FIXTURE = os.path.join(SRC, "tests", "vectors", "structure")
LIMITS = ["--file-lines", "40", "--bridge-lines", "30", "--function-lines", "10",
          "--struct-members", "3"]


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, "--root", FIXTURE] + LIMITS + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    return p.returncode, p.stdout


def expect(cond, what, out):
    if not cond:
        sys.stderr.write(f"FAIL: {what}\n--- output ---\n{out}")
        sys.exit(1)


def main():
    with open(os.path.join(FIXTURE, "expected.txt"), encoding="utf-8") as f:
        expected = f.read()
    rc, out = run("--exceptions", os.devnull)
    expect(rc == 1, f"exit 1 on violations, not {rc}", out)
    expect(out == expected, "the output is tests/vectors/structure/expected.txt", out)
    for line in [
            "file over 40 lines without a reason at its top: coordinator/big.c (45)",
            "bridge file over 30 lines: coordinator/bridge_send.c (35)",
            "function over 10 lines: coordinator/long.c long_fn (12)",
            "circle: coordinator/ping.c coordinator/pong.c",
            "circle: coordinator/north.c coordinator/south.c",
            "runs back up: coordinator/low_int.h -> coordinator/low.c",
            "struct bridge over 3 members: coordinator/bridge_send.c (4)"]:
        expect(line in out.split("\n"), f"reported: {line}", out)
    for name in ["reasoned.c", "quiet.c", "long.c helper"]:
        expect(name not in out, f"not reported: {name}", out)

    # every violation listed: none fails; one listed without its figure matches too
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("# the fixture's violations\n")
        for line in expected.split("\n"):
            if line and not line.startswith(" "):
                f.write(line.replace(" (45)", "") + "\n")
        known = f.name
    try:
        rc, out = run("--exceptions", known, "--known")
        expect(rc == 0, f"exit 0 with every violation known, not {rc}", out)
        expect(all(l.startswith("known: ") for l in out.split("\n") if l),
               "each listed one is told as known", out)
        # one listed that no longer occurs fails as stale
        with open(known, "a", encoding="utf-8") as f:
            f.write("function over 10 lines: coordinator/long.c gone_fn (11)\n")
        rc, out = run("--exceptions", known)
        expect(rc == 1, f"exit 1 on a stale exception, not {rc}", out)
        expect("stale exception (no longer occurs, take it out of the list): function over 10"
               " lines: coordinator/long.c gone_fn" in out, "the stale one is named", out)
    finally:
        os.unlink(known)
    print("ok")


if __name__ == "__main__":
    main()
