"""A throwaway PostgreSQL server for the tests of the store's PostgreSQL backend.

PgServer initdb's a cluster into a temporary directory (as the unprivileged user nobody when
run as root: PostgreSQL refuses to run as root), starts it on a free loopback port with its
socket in that directory, makes databases for the tests and stops it by pid. Nothing of the
system's PostgreSQL service is used.

As a program it wraps one command (ctest's PostgreSQL variants of the store's unit tests):
    pg_server.py COMMAND ARGS...
runs COMMAND with RCS_TEST_PG_URL set to the server's postgres database (a test makes its
own databases there) and exits with its exit code.
"""

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

USER = "rcs"


def _bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not found:
        raise RuntimeError("PostgreSQL's server is not installed (tools/deps.sh test)")
    return os.path.dirname(found[-1])


def available():
    try:
        _bindir()
        return True
    except RuntimeError:
        return False


def _free_port():
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 1883:
            return port


class PgServer:
    def __init__(self):
        self.bindir = _bindir()
        self.dir = tempfile.mkdtemp(prefix="rcs-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.proc = None
        self.n = 0
        self._started = False  # once it ran, its port is known to clients and stays
        self._log_at = 0       # where in its log the current start began
        self._demote = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            os.chmod(self.dir, 0o700)

            def demote():
                os.setgid(pw.pw_gid)
                os.setgroups([])
                os.setuid(pw.pw_uid)
            self._demote = demote

    def _run(self, args, **kw):
        return subprocess.run(args, preexec_fn=self._demote, cwd=self.dir, capture_output=True,
                              text=True, timeout=120, **kw)

    def start(self):
        """initdb (the first time) and start the server; again after pause()."""
        if not os.path.exists(self.data):
            p = self._run([os.path.join(self.bindir, "initdb"), "-D", self.data, "-U", USER,
                           "-A", "trust", "--no-locale", "-E", "UTF8", "--no-sync"])
            if p.returncode != 0:
                raise RuntimeError("initdb failed: %s%s" % (p.stdout, p.stderr))
        if getattr(self, "log", None) is not None:
            self.log.close()
        self.log = open(os.path.join(self.dir, "postgres.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bindir, "postgres"), "-D", self.data, "-p", str(self.port),
             "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200"],
            preexec_fn=self._demote, cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                log = self.read_log()
                if (not self._started and self._log_at < 5000 and
                        "Address already in use" in log[self._log_at:]):
                    # the free port was taken between its choice and the bind: nobody
                    # knows this one yet, so another will do
                    self._log_at = len(log)
                    self.port = _free_port()
                    return self.start()
                raise RuntimeError("postgres exited with %d:\n%s" % (
                    self.proc.returncode, log))
            p = subprocess.run([os.path.join(self.bindir, "pg_isready"), "-h", "127.0.0.1",
                                "-p", str(self.port), "-U", USER, "-d", "postgres"],
                               capture_output=True, timeout=30)
            if p.returncode == 0:
                self._started = True
                return self
            time.sleep(0.1)
        raise RuntimeError("postgres did not start:\n" + self.read_log())

    def read_log(self):
        try:
            with open(os.path.join(self.dir, "postgres.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-20000:]
        except OSError:
            return ""

    def url(self, db="postgres"):
        return "postgresql://%s@127.0.0.1:%d/%s" % (USER, self.port, db)

    def psql(self, sql, db="postgres"):
        p = subprocess.run([os.path.join(self.bindir, "psql"), "-X", "-q", "-v",
                            "ON_ERROR_STOP=1", "-At", "-d", self.url(db), "-c", sql],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError("psql %s: %s" % (sql, p.stderr))
        return p.stdout

    def create_db(self, prefix="rcs"):
        """A new empty database: its URL."""
        self.n += 1
        name = "%s_%d_%d" % (prefix, os.getpid(), self.n)
        self.psql("CREATE DATABASE %s" % name)
        return self.url(name)

    def pause(self):
        """Stops the server (fast shutdown), keeping its data: start() brings it back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self):
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


_shared = None


def shared():
    """One server for the whole test process, stopped when it exits."""
    global _shared
    if _shared is None:
        import atexit
        _shared = PgServer().start()
        atexit.register(_shared.stop)
    return _shared


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    server = PgServer()
    try:
        server.start()
        env = dict(os.environ, RCS_TEST_PG_URL=server.url())
        return subprocess.run(argv[1:], env=env).returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
