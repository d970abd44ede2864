"""Databases for the audit's tests: SQLite files, and one real PostgreSQL
server for the session (a fresh database per test)."""
from __future__ import annotations

import itertools

import pytest

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server():
    from broker.harness.postgres import PostgresServer
    server = PostgresServer(database="audit_0").start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A new, empty database on the session's PostgreSQL server."""
    import psycopg
    name = f"audit_{next(_databases)}"
    with psycopg.connect(host="127.0.0.1", port=postgres_server.port, user=postgres_server.user,
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    from audit.store import Store
    url = f"sqlite:///{tmp_path / 'audit.db'}" if request.param == "sqlite" \
        else request.getfixturevalue("postgres_url")
    s = Store(url)
    s.upgrade()
    yield s
    s.close()
