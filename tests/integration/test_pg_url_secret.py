"""A password in a PostgreSQL --db URL never reaches the coordinator's log or its error
messages (docs/coordinator.md): the log shows postgresql://user:***@host/db.

Needs Debian's postgresql (tools/deps.sh test) and a coordinator built with the PostgreSQL
backend; otherwise skipped, saying so (RCS_NO_SKIP=1, set by .ci/run, makes that a failure).
"""
import os
import subprocess
import time
import unittest

import pg_server
from rcs_harness import COORDINATOR, free_port

SECRET = "s3cret-pw-in-url"


def why_not():
    if not pg_server.available():
        return "PostgreSQL's server is not installed (tools/deps.sh test installs it)"
    r = subprocess.run([COORDINATOR, "serve", "--db", "postgresql://nobody@127.0.0.1:1/x",
                        "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    if "no PostgreSQL backend" in r.stderr:
        return "this coordinator is built without the PostgreSQL backend"
    return None


class PgUrlSecretTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = why_not()
        if reason:
            if os.environ.get("RCS_NO_SKIP") == "1":
                raise AssertionError("test_pg_url_secret cannot run (RCS_NO_SKIP=1): " + reason)
            raise unittest.SkipTest(reason)
        cls.pg = pg_server.PgServer()
        cls.pg.start()

    @classmethod
    def tearDownClass(cls):
        cls.pg.stop()

    def with_password(self, url):
        scheme, rest = url.split("://", 1)
        user, host = rest.split("@", 1)
        return "%s://%s:%s@%s" % (scheme, user, SECRET, host)

    def test_serving_log(self):
        url = self.with_password(self.pg.create_db())
        p = subprocess.Popen([COORDINATOR, "serve", "--db", url, "--listen",
                              "127.0.0.1:%d" % free_port()],
                             stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            lines = []
            while time.time() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "serving" in line:
                    break
        finally:
            p.terminate()
            rest = p.communicate(timeout=30)[1]
        log = "".join(lines) + rest
        self.assertRegex(log, r"serving as node \S+ \(database postgresql://")
        self.assertIn(":***@", log)
        self.assertNotIn(SECRET, log)

    def test_error_message(self):
        url = self.with_password(self.pg.create_db()).rsplit("/", 1)[0] + "/no_such_db"
        r = subprocess.run([COORDINATOR, "serve", "--db", url, "--listen",
                            "127.0.0.1:%d" % free_port()],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot open database postgresql://", r.stderr)
        self.assertIn(":***@", r.stderr)
        self.assertNotIn(SECRET, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
