"""TLS to PostgreSQL (issue 30, point 1), the audit's database: a real
PostgreSQL that takes TCP connections over TLS with a password only. A
plaintext connection, an untrusted server certificate, a wrong host name and
a wrong password are refused; the audit's commands work with a URL that asks
for verify-full and reads its password from a libpq password file, and what
they hold is a TLS connection."""
from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from audit.store import Store
from broker.harness.postgres import PostgresServer, PostgresTls
from broker.security.ca import CertificateAuthority
from infra.local import airflow_stack


@pytest.fixture(scope="module")
def tls_postgres(tmp_path_factory):
    root = tmp_path_factory.mktemp("pg-pki")
    ca = CertificateAuthority.create(str(root / "ca"))
    stranger = CertificateAuthority.create(str(root / "stranger"), name="Stranger CA")
    cert, key = ca.issue("postgres", ["127.0.0.1"], str(root / "certs"))
    server = PostgresServer(database="audit", tls=PostgresTls(cert, key, ca.cert_path,
                                                               password="audit-pw")).start()
    yield server, ca.cert_path, stranger.cert_path
    server.stop()


def connect(server, **options):
    params = {"host": "127.0.0.1", "port": server.port, "user": server.user,
              "dbname": server.database, "password": "audit-pw", "connect_timeout": 5,
              **options}
    return psycopg.connect(**params)


def test_only_tls_a_trusted_certificate_its_name_and_the_password_get_in(tls_postgres):
    server, ca, stranger = tls_postgres
    with connect(server, sslmode="verify-full", sslrootcert=ca) as conn:
        [(ssl_on,)] = conn.execute(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchall()
        assert ssl_on is True
    refusals = [
        ({"sslmode": "disable"}, "no encryption"),                      # plaintext
        ({"sslmode": "verify-full", "sslrootcert": stranger}, "certificate verify failed"),
        ({"sslmode": "verify-full", "sslrootcert": ca, "host": "localhost"},
         "does not match host name"),
        ({"sslmode": "verify-full", "sslrootcert": ca, "password": "wrong"},
         "password authentication failed"),
    ]
    for options, words in refusals:
        with pytest.raises(psycopg.OperationalError, match=words):
            connect(server, **options).close()


def test_the_audit_uses_its_database_over_tls(tls_postgres):
    server, ca, _stranger = tls_postgres
    url = server.url
    assert "sslmode=verify-full" in url and "audit-pw" not in url
    done = subprocess.run([sys.executable, "-m", "audit", "db", "upgrade", "--db", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = subprocess.run([sys.executable, "-m", "audit", "report", "--db", url,
                             "--from", "2026-11-24T10:00", "--to", "2026-11-24T11:00"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    store = Store(url)
    try:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").scalar() is True
    finally:
        store.engine.dispose()
    plain = url.split("?", 1)[0] + "?sslmode=disable&passfile=" + server.passfile
    refused = subprocess.run([sys.executable, "-m", "audit", "report", "--db", plain],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 3 and "no encryption" in refused.stderr


def test_airflow_reaches_its_database_over_tls(tls_postgres, tmp_path):
    """Airflow's metadata database as ``airflow_stack up --db URL`` gives it:
    ``airflow db check`` over TLS (the sync and the async engine), and
    refused in plaintext."""
    server, _ca, _stranger = tls_postgres
    for url, works in ((server.url, True),
                       (server.url.split("?", 1)[0] + "?sslmode=disable&passfile="
                        + server.passfile, False)):
        env = airflow_stack.environment(str(tmp_path / "airflow"), 8080,
                                        "config/loader.toml", db_url=url)
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == url   # psycopg's async
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "airflow"),
                               "db", "check"], env=env, capture_output=True, text=True,
                              timeout=180)
        assert (done.returncode == 0) == works, done.stdout[-2000:] + done.stderr[-2000:]
        if works:
            assert "Connection successful" in done.stdout + done.stderr
        else:
            assert "no encryption" in done.stdout + done.stderr


def test_the_audit_takes_a_rotated_password_from_its_credentials_file(tmp_path):
    # issue 31: RDS keeps the master user's password in a secret it rotates;
    # the audit reads the user and password from that secret's form for
    # every new connection, so a rotation needs no restart
    import json
    from sqlalchemy import text
    from audit.store import CredentialsError
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    cert, key = ca.issue("postgres", ["127.0.0.1"], str(tmp_path / "certs"))
    server = PostgresServer(database="audit", user="audit", tls=PostgresTls(
        cert, key, ca.cert_path, password="pw-1")).start()
    try:
        url = (f"postgresql+psycopg://127.0.0.1:{server.port}/audit"
               f"?sslmode=verify-full&sslrootcert={ca.cert_path}")
        credentials = tmp_path / "audit-db.json"
        credentials.write_text(json.dumps({"username": "audit", "password": "pw-1",
                                           "engine": "postgres"}))
        store = Store(url, credentials_file=str(credentials))
        try:
            store.upgrade()
            with store.engine.begin() as conn:
                conn.execute(text("ALTER ROLE audit PASSWORD 'pw-2'"))    # the rotation
            store.engine.dispose()                   # the next query opens a new connection
            with pytest.raises(Exception, match="password authentication failed"):
                store.revision()                     # the file still says pw-1
            credentials.write_text(json.dumps({"username": "audit", "password": "pw-2"}))
            assert store.revision() == Store.head_revision()     # taken, no restart
        finally:
            store.close()
        # the commands take the file too; a malformed one is said in one line
        done = subprocess.run([sys.executable, "-m", "audit", "db", "revision", "--db", url,
                                "--db-credentials-file", str(credentials)],
                               capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        credentials.write_text('{"password": "pw-2"}')
        bad = subprocess.run([sys.executable, "-m", "audit", "db", "revision", "--db", url,
                              "--db-credentials-file", str(credentials)],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2, bad
        assert bad.stderr.strip().splitlines() == [
            f"error: the database credentials {credentials}: a JSON object with \"username\" "
            f"and \"password\" is expected"]
        with pytest.raises(CredentialsError):
            Store(url, credentials_file=str(tmp_path / "none.json"))
    finally:
        server.stop()
