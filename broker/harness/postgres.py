"""Run a real PostgreSQL server (Debian's ``postgresql`` package) for the
audit's tests and the lab.

``PostgresServer().start()`` makes a data directory of its own under the
system's temporary directory (owned by the ``postgres`` user when run as
root: the server refuses to run as root, and a pytest directory is not
reachable by another user), runs ``initdb`` (trust authentication, user
``samsa``), starts ``postgres`` on a free loopback port as a
``SupervisedProcess`` (ready when it logs "ready to accept connections"),
and creates the database. ``url`` is a SQLAlchemy URL for psycopg.
``stop()`` is PostgreSQL's fast shutdown (SIGINT) and removes the directory.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

from broker.service_kit.process import SupervisedProcess, signal_group
from broker.service_kit.ports import free_ports

INSTALL_HINT = "PostgreSQL is not installed: apt-get install postgresql (Debian)"


class PostgresError(RuntimeError):
    pass


def find_bindir() -> str:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not candidates:
        raise PostgresError(INSTALL_HINT)
    return os.path.dirname(candidates[-1])


class PostgresServer:
    def __init__(self, database: str = "audit", user: str = "samsa", port: int = 0) -> None:
        self.database = database
        self.user = user
        self.port = port or free_ports(1)[0]
        self.bindir = find_bindir()
        self.directory: str | None = None
        self.process: SupervisedProcess | None = None
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _command(self, *argv: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self._as_root else list(argv)

    def start(self, timeout: float = 60.0) -> "PostgresServer":
        self.directory = tempfile.mkdtemp(prefix="samsa-postgres-")
        data = os.path.join(self.directory, "data")
        if self._as_root:
            try:
                pg = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresError("no 'postgres' user: " + INSTALL_HINT) from None
            os.chown(self.directory, pg.pw_uid, pg.pw_gid)
        init = subprocess.run(self._command(os.path.join(self.bindir, "initdb"), "-D", data,
                                            "-A", "trust", "-U", self.user, "-E", "UTF8"),
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise PostgresError(f"initdb failed: {init.stdout}{init.stderr}")
        self.process = SupervisedProcess("postgres", self._command(
            os.path.join(self.bindir, "postgres"), "-D", data, "-p", str(self.port),
            "-k", self.directory, "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=off", "-c", "full_page_writes=off"),
            os.path.join(self.directory, "server.log"))
        self.process.start(ready_line=lambda line: b"ready to accept connections" in line)
        try:
            self.process.wait_ready(timeout)
        except Exception as exc:
            raise PostgresError(str(exc)) from None
        import psycopg
        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.user,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is not None:
            # SIGINT: PostgreSQL's fast shutdown (SIGTERM would wait for clients)
            self.process.stop(timeout, polite=lambda: signal_group(self.process.pid,
                                                                   signal.SIGINT))
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def tail_log(self, lines: int = 40) -> str:
        return self.process.tail_log(lines) if self.process else "(not started)"

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
