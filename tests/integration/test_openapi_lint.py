#!/usr/bin/env python3
"""docs/openapi.json passes Redocly's linter (its recommended rules, redocly.yaml) without an
error or a warning.

Redocly's CLI comes from npm: tools/deps.sh test installs the version
tools/redocly/package-lock.json pins into /opt/rcs-node (RCS_NODE_DIR elsewhere);
RCS_REDOCLY names another redocly program. Without it the test is skipped, saying so;
RCS_NO_SKIP=1 (set by .ci/run) makes that a failure.

Run: python3 tests/integration/test_openapi_lint.py (ctest sets RCS_SOURCE_DIR).
"""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcs_harness import SOURCE_DIR  # noqa: E402

DOC_PATH = os.path.join(SOURCE_DIR, "docs", "openapi.json")
NODE_DIR = os.environ.get("RCS_NODE_DIR", "/opt/rcs-node")
CONFIG = os.path.join(SOURCE_DIR, "redocly.yaml")
# the entries of .redocly.lint-ignore.yaml (next to redocly.yaml)
IGNORED = 1
REDOCLY = os.environ.get("RCS_REDOCLY", os.path.join(NODE_DIR, "node_modules", ".bin", "redocly"))


class TestOpenApiLint(unittest.TestCase):

    def setUp(self):
        if not os.access(REDOCLY, os.X_OK):
            why = ("Redocly's CLI is not installed (%s): tools/deps.sh test installs it" % REDOCLY)
            # CI sets RCS_NO_SKIP=1: there, a lint that can't run is a failure
            if os.environ.get("RCS_NO_SKIP") == "1":
                self.fail(why)
            self.skipTest(why)

    def test_no_error_and_no_warning(self):
        # from the repository's root, where .redocly.lint-ignore.yaml is
        p = subprocess.run([REDOCLY, "lint", "--config", CONFIG, "--format=json",
                            "--max-problems=1000", DOC_PATH],
                           cwd=SOURCE_DIR, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, REDOCLY_TELEMETRY="off",
                                    REDOCLY_SUPPRESS_UPDATE_NOTICE="true", NO_COLOR="1"))
        out = p.stdout[p.stdout.find("{"):] if "{" in p.stdout else ""
        try:
            report = json.loads(out)
        except ValueError:
            self.fail("redocly lint gave no JSON report (exit %d):\n%s\n%s" % (
                p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        totals = report.get("totals", {})
        problems = ["%s %s: %s (%s)" % (
            pr.get("severity"), pr.get("ruleId"), pr.get("message"),
            ", ".join(loc.get("pointer", "") for loc in pr.get("location", [])))
            for pr in report.get("problems", [])]
        self.assertEqual(problems, [], "redocly lint of docs/openapi.json:\n  " + "\n  ".join(problems))
        # .redocly.lint-ignore.yaml lists, with the reason, the problems that don't apply
        self.assertEqual((totals.get("errors"), totals.get("warnings"), totals.get("ignored")),
                         (0, 0, IGNORED), "redocly lint totals: %r" % totals)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])


if __name__ == "__main__":
    unittest.main()
