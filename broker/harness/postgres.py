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

With ``tls`` (PostgresTls) the server takes TCP connections over TLS only
(``hostssl`` in pg_hba.conf, no ``host`` line: a plaintext connection finds
no entry), each with the user's password (SCRAM-SHA-256); ``url`` then
asks for ``sslmode=verify-full`` against the given authority and reads the
password from a libpq password file (``passfile``), never from the URL. The
harness itself creates the database over the server's Unix socket.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class PostgresTls:
    """The server's certificate and key (PEM), the authority clients check it
    against, and the user's password."""
    cert_file: str
    key_file: str
    ca_file: str
    password: str = field(repr=False, default="")


class PostgresServer:
    def __init__(self, database: str = "audit", user: str = "samsa", port: int = 0,
                 tls: PostgresTls | None = None) -> None:
        self.database = database
        self.user = user
        self.tls = tls
        self.port = port or free_ports(1)[0]
        self.bindir = find_bindir()
        self.directory: str | None = None
        self.process: SupervisedProcess | None = None
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        base = f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{self.database}"
        if self.tls is None:
            return base
        return (f"{base}?sslmode=verify-full&sslrootcert={self.tls.ca_file}"
                f"&passfile={self.passfile}")

    @property
    def passfile(self) -> str:
        """The libpq password file of the user (with ``tls``)."""
        return os.path.join(self.directory or "", "pgpass")

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
        options = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                   "-c", "full_page_writes=off"]
        if self.tls is not None:
            options += self._prepare_tls(data)
        self.process = SupervisedProcess("postgres", self._command(
            os.path.join(self.bindir, "postgres"), "-D", data, "-p", str(self.port),
            "-k", self.directory, *options),
            os.path.join(self.directory, "server.log"))
        self.process.start(ready_line=lambda line: b"ready to accept connections" in line)
        try:
            self.process.wait_ready(timeout)
        except Exception as exc:
            raise PostgresError(str(exc)) from None
        import psycopg
        from psycopg import sql
        # over the Unix socket (trusted): with tls, TCP takes TLS and a password
        with psycopg.connect(host=self.directory, port=self.port, user=self.user,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
            if self.tls is not None:
                conn.execute(sql.SQL("ALTER USER {} PASSWORD {}").format(
                    sql.Identifier(self.user), sql.Literal(self.tls.password)))
        if self.tls is not None:
            fd = os.open(self.passfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"127.0.0.1:{self.port}:*:{self.user}:{self.tls.password}\n")
        return self

    def _prepare_tls(self, data: str) -> list[str]:
        """The server's certificate and key copied where the server (user
        postgres when run as root) may read them, the key 0600 as PostgreSQL
        demands; pg_hba.conf: the socket trusted, TCP over TLS with a
        password only. The server's options."""
        cert, key = os.path.join(data, "server.crt"), os.path.join(data, "server.key")
        shutil.copyfile(self.tls.cert_file, cert)
        shutil.copyfile(self.tls.key_file, key)
        os.chmod(key, 0o600)
        with open(os.path.join(data, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\n"
                    "hostssl all all 127.0.0.1/32 scram-sha-256\n")
        if self._as_root:
            pg = pwd.getpwnam("postgres")
            for path in (cert, key, os.path.join(data, "pg_hba.conf")):
                os.chown(path, pg.pw_uid, pg.pw_gid)
        return ["-c", "ssl=on", "-c", f"ssl_cert_file={cert}", "-c", f"ssl_key_file={key}",
                "-c", "password_encryption=scram-sha-256"]

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
