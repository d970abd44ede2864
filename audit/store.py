"""The audit's database: every monitoring event once, and the sums the
comparisons are made of.

One table, ``monitoring_events``, one row per event, keyed by the event's
id: an event delivered twice (the audit topic is read at least once, and
publishers resend what they are not sure was delivered) is stored once
(``INSERT ... ON CONFLICT DO NOTHING``). Counts per (topic, window, tier,
datacenter, cluster) are sums over the rows, made when asked: events are
additive by design (audit/counting.py).

The id checksum is stored as two 32-bit halves (``checksum_hi``,
``checksum_lo``) so that summing thousands of them stays inside a 64-bit
integer on every database (SQLite's SUM raises on overflow); the sum modulo
2^64 is put together in Python.

The schema is created and upgraded by Alembic (audit/migrations):
``Store.upgrade()`` runs the migrations to the latest version;
``python -m audit db upgrade`` does it from the command line.

SQLite (a file) is the embedded default; PostgreSQL is used by giving its
URL (``postgresql+psycopg://user@host:port/db``). Its user and password may
come from a credentials file instead (``credentials_file``: JSON with
``username`` and ``password``, the form of the secret RDS keeps for a
database's master user), read again for every new connection: a password
rotated in the file is taken without a restart (the connections already
open stay as they are, as PostgreSQL keeps them).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.engine import Engine

from audit.counting import unsigned_checksum
from audit.credentials import CredentialsError, read_credentials  # noqa: F401 (re-exported)

metadata = MetaData()

events_table = Table(
    "monitoring_events", metadata,
    Column("event_id", LargeBinary(16), primary_key=True),
    Column("tier", String(32), nullable=False),
    Column("datacenter", String(128), nullable=False),
    Column("cluster", String(128), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("window_begin_ms", BigInteger, nullable=False),
    Column("window_end_ms", BigInteger, nullable=False),
    Column("message_count", BigInteger, nullable=False),
    Column("byte_count", BigInteger, nullable=False),
    Column("no_time_count", BigInteger, nullable=False),
    Column("malformed_count", BigInteger, nullable=False),
    Column("checksum_hi", BigInteger, nullable=False),
    Column("checksum_lo", BigInteger, nullable=False),
    Column("unique_count", BigInteger, nullable=True),
    Column("unique_checksum_hi", BigInteger, nullable=True),
    Column("unique_checksum_lo", BigInteger, nullable=True),
    Column("late_unique_count", BigInteger, nullable=True),
    Column("late_checksum_hi", BigInteger, nullable=True),
    Column("late_checksum_lo", BigInteger, nullable=True),
    Column("latency_json", Text, nullable=False),
    Column("host", String(255), nullable=False),
    Column("service", String(255), nullable=False),
    Column("event_time_ms", BigInteger, nullable=False),
    Column("received_ms", BigInteger, nullable=False),
    Index("ix_events_topic_window", "topic", "window_begin_ms"),
)

MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


@dataclass
class TierTotals:
    """The sums of one (topic, window, tier, datacenter, cluster)."""
    topic: str
    window_begin_ms: int
    window_end_ms: int
    tier: str
    datacenter: str
    cluster: str
    message_count: int
    byte_count: int
    no_time_count: int
    malformed_count: int
    checksum: int                   # 0 .. 2^64-1
    unique_count: int | None        # None unless every event of the group carried one
    events: int
    latency_counts: list[int]
    latency_bounds_ms: list[int]
    # the sums that place late copies (the checksums: None unless every event
    # carried them; late_unique_count: of the events that did)
    unique_checksum: int | None = None
    late_unique_count: int | None = None
    late_unique_checksum: int | None = None
    # when the audit received the group's latest event (ms, the audit's
    # clock): a producer's report of an old window starts its grace anew
    reported_ms: int | None = None


def default_url(directory: str = ".") -> str:
    return f"sqlite:///{os.path.abspath(os.path.join(directory, 'audit.db'))}"


#: a PostgreSQL server that does not answer: a connection attempt gives up
#: after this many seconds, and a connection whose peer went silent is found
#: dead by TCP keepalives within about a minute (not the kernel's two hours),
#: so the service's retry, its failure counter and its alert go on
CONNECT_TIMEOUT_S = 10


def _connect_args(url: str) -> dict:
    if not url.startswith("postgresql"):
        return {}
    return {"connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1, "keepalives_idle": 30,
            "keepalives_interval": 10, "keepalives_count": 3}


class Store:
    def __init__(self, url: str, engine: Engine | None = None,
                 credentials_file: str = "") -> None:
        self.url = url
        self.engine = engine or create_engine(url, future=True, pool_pre_ping=True,
                                              connect_args=_connect_args(url))
        self.dialect = self.engine.dialect.name
        if credentials_file:
            read_credentials(credentials_file)          # a bad file: said now, not later

            @event.listens_for(self.engine, "do_connect")
            def _credentials(_dialect, _record, _args, params) -> None:
                params["user"], params["password"] = read_credentials(credentials_file)

    # ------------------------------------------------------------ schema

    def upgrade(self, revision: str = "head") -> None:
        """Run the Alembic migrations up to ``revision``."""
        from alembic import command
        from alembic.config import Config
        cfg = Config()
        cfg.set_main_option("script_location", MIGRATIONS)
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        with self.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)

    @staticmethod
    def head_revision() -> str:
        """The newest schema revision of the migrations shipped."""
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        cfg = Config()
        cfg.set_main_option("script_location", MIGRATIONS)
        return ScriptDirectory.from_config(cfg).get_current_head()

    def revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext
        with self.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    # ------------------------------------------------------------ writing

    def add_events(self, events: Iterable[dict], received_ms: int) -> int:
        """Store monitoring events (decoded records) not stored yet; how many were new."""
        rows = [_row(e, received_ms) for e in events]
        if not rows:
            return 0
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            raise ValueError(f"unsupported database {self.dialect!r}: sqlite or postgresql")
        # duplicates inside one batch too: the first wins
        unique = list({r["event_id"]: r for r in reversed(rows)}.values())
        statement = insert(events_table).on_conflict_do_nothing(
            index_elements=["event_id"]).returning(events_table.c.event_id)
        with self.engine.begin() as connection:
            # RETURNING names the rows inserted: the count of new events on
            # every database (rowcount of a batched insert is not reliable)
            return len(connection.execute(statement, unique).all())

    # ------------------------------------------------------------ reading

    def totals(self, topic: str | None = None, begin_ms: int | None = None,
               end_ms: int | None = None, tier: str | None = None) -> list[TierTotals]:
        """Sums per (topic, window, tier, datacenter, cluster) of the windows
        that begin in [begin_ms, end_ms)."""
        t = events_table
        query = select(
            t.c.topic, t.c.window_begin_ms, func.max(t.c.window_end_ms), t.c.tier,
            t.c.datacenter, t.c.cluster, func.sum(t.c.message_count),
            func.sum(t.c.byte_count), func.sum(t.c.no_time_count),
            func.sum(t.c.malformed_count), func.sum(t.c.checksum_hi),
            func.sum(t.c.checksum_lo), func.sum(t.c.unique_count), func.count(t.c.unique_count),
            func.count(), func.sum(t.c.unique_checksum_hi), func.sum(t.c.unique_checksum_lo),
            func.sum(t.c.late_unique_count), func.sum(t.c.late_checksum_hi),
            func.sum(t.c.late_checksum_lo), func.count(t.c.late_unique_count),
            func.max(t.c.received_ms)).group_by(
                t.c.topic, t.c.window_begin_ms, t.c.tier, t.c.datacenter, t.c.cluster)
        query = _filtered(query, topic, begin_ms, end_ms, tier)
        out = []
        with self.engine.connect() as connection:
            for row in connection.execute(query):
                (topic_, wb, we, tier_, dc, cluster, count, size, no_time, malformed, hi, lo,
                 unique, with_unique, n, u_hi, u_lo, late, late_hi, late_lo, with_late,
                 reported) = row
                checksum = _joined(hi, lo)
                sums = with_late == n           # every event of a counter that sends them
                if with_unique == n and not sums and late is not None:
                    # older counters' events beside newer ones: the newer ones keep
                    # late first sightings out of unique_count; count them in
                    # (compare.py then claims no exactness: no sums)
                    unique = int(unique) + int(late)
                out.append(TierTotals(topic_, int(wb), int(we), tier_, dc, cluster, int(count),
                                      int(size), int(no_time), int(malformed), checksum,
                                      int(unique) if with_unique == n else None, int(n), [], [],
                                      _joined(u_hi, u_lo) if sums else None,
                                      int(late) if late is not None else None,
                                      _joined(late_hi, late_lo) if sums else None,
                                      int(reported)))
        self._add_latency(out, topic, begin_ms, end_ms, tier)
        return sorted(out, key=lambda r: (r.topic, r.window_begin_ms, r.tier, r.datacenter,
                                          r.cluster))

    def _add_latency(self, totals: list[TierTotals], topic, begin_ms, end_ms, tier) -> None:
        """Sum the latency histograms (stored per event as JSON) into ``totals``."""
        index = {(r.topic, r.window_begin_ms, r.tier, r.datacenter, r.cluster): r
                 for r in totals}
        t = events_table
        query = select(t.c.topic, t.c.window_begin_ms, t.c.tier, t.c.datacenter, t.c.cluster,
                       t.c.latency_json)
        query = _filtered(query, topic, begin_ms, end_ms, tier)
        with self.engine.connect() as connection:
            for row in connection.execute(query):
                total = index.get(tuple(row[:5]))
                latency = json.loads(row[5])
                if total is None:
                    continue
                counts = latency["counts"]
                if not total.latency_counts:
                    total.latency_counts = list(counts)
                    total.latency_bounds_ms = list(latency["bounds_ms"])
                elif latency["bounds_ms"] == total.latency_bounds_ms:
                    total.latency_counts = [a + b for a, b in zip(total.latency_counts, counts)]

    def topics(self) -> list[str]:
        with self.engine.connect() as connection:
            return [r[0] for r in connection.execute(
                select(events_table.c.topic).distinct().order_by(events_table.c.topic))]

    def event_count(self) -> int:
        with self.engine.connect() as connection:
            return connection.execute(select(func.count()).select_from(events_table)).scalar()

    def close(self) -> None:
        self.engine.dispose()


def _joined(hi, lo) -> int:
    """A checksum summed as two 32-bit halves, back to 0..2^64-1."""
    return ((int(hi) << 32) + int(lo)) % (1 << 64)


def _halves(signed: int | None) -> tuple[int | None, int | None]:
    if signed is None:
        return None, None
    checksum = unsigned_checksum(signed)
    return checksum >> 32, checksum & 0xFFFFFFFF


def _filtered(query, topic: str | None, begin_ms: int | None, end_ms: int | None,
              tier: str | None):
    t = events_table
    if topic is not None:
        query = query.where(t.c.topic == topic)
    if begin_ms is not None:
        query = query.where(t.c.window_begin_ms >= begin_ms)
    if end_ms is not None:
        query = query.where(t.c.window_begin_ms < end_ms)
    if tier is not None:
        query = query.where(t.c.tier == tier)
    return query


def _row(event: dict, received_ms: int) -> dict:
    checksum = unsigned_checksum(event["id_checksum"])
    header = event["header"]
    unique_hi, unique_lo = _halves(event.get("unique_checksum"))
    late_hi, late_lo = _halves(event.get("late_unique_checksum"))
    return {
        "event_id": bytes(header["event_id"]), "tier": event["tier"],
        "datacenter": event["datacenter"], "cluster": event["cluster"], "topic": event["topic"],
        "window_begin_ms": event["window_begin_ms"], "window_end_ms": event["window_end_ms"],
        "message_count": event["message_count"], "byte_count": event["byte_count"],
        "no_time_count": event["no_time_count"], "malformed_count": event["malformed_count"],
        "checksum_hi": checksum >> 32, "checksum_lo": checksum & 0xFFFFFFFF,
        "unique_count": event.get("unique_count"),
        "unique_checksum_hi": unique_hi, "unique_checksum_lo": unique_lo,
        "late_unique_count": event.get("late_unique_count"),
        "late_checksum_hi": late_hi, "late_checksum_lo": late_lo,
        "latency_json": json.dumps(event["latency_ms"], separators=(",", ":")),
        "host": header["host"], "service": header["service"],
        "event_time_ms": header["time_ms"], "received_ms": received_ms,
    }
