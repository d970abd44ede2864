"""The PostgreSQL image's settings: a cluster in UTF-8 (the minimal image's
default SQL_ASCII made psycopg hand text back as bytes, and the audit service
failed on it), no JIT, and a POSTGRES_PASSWORD that TCP connections must
give."""
from __future__ import annotations

import psycopg
import pytest

from container_helpers import free_ports
from infra.docker.pipeline import POSTGRES


def test_a_password_is_required_over_tcp_and_text_is_utf8(containers):
    (port,) = free_ports(1)
    containers.run("postgres-password", POSTGRES,
                   env={"PGPORT": str(port), "POSTGRES_PASSWORD": "s3cret"},
                   ready=lambda s: s.exec(["pg_isready", "-h", "127.0.0.1", "-p", str(port),
                                           "-q"])[0] == 0)
    params = dict(host="127.0.0.1", port=port, user="samsa", dbname="samsa_audit",
                  connect_timeout=10)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(**params).close()
    with psycopg.connect(password="s3cret", **params) as conn:
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        assert conn.execute("SHOW jit").fetchone() == ("off",)
        assert conn.execute("SELECT 'été'").fetchone() == ("été",)
