"""The audit service: monitoring events from the analysis cluster's audit
topic into the database, once each; reports and the completeness endpoint
over HTTP (audit/web.py).

Events are read at least once (a consumer group on the audit topic whose
offsets are acknowledged only after the events are committed to the
database) and stored once (by event id), so neither a crash nor a
publisher's resend counts anything twice. A value that is not a readable
monitoring event is counted (``malformed``; the metric
samsa_audit_malformed_events_total), logged, and skipped:
it never stops the service. Nor does a database that cannot be written: a
server down, a password rotated while the credentials file lags, the file
missing. The chunk read is kept, and writing it is tried again every
``STORE_RETRY_S`` until it succeeds (samsa_audit_store_failures_total counts
the failed tries). Nothing more is read meanwhile and nothing is
acknowledged, so nothing is lost and the order is kept. An event that the
database itself refuses (a value too long for its column, a character it
cannot hold) is not retried: the chunk is stored one event at a time, and
each event refused is counted as malformed and skipped.
"""
from __future__ import annotations

import logging
import threading
import time

from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
from broker.service_kit.logging_setup import RateLimitedLog

from audit import report
from audit.config import ServeConfig
from audit.counting import AUDIT_TOPIC
from audit.credentials import CredentialsError
from audit.store import Store

log = logging.getLogger(__name__)

#: seconds between tries of a chunk the database did not take
STORE_RETRY_S = 1.0


class AuditService:
    def __init__(self, config: ServeConfig, store: Store | None = None) -> None:
        from schemas import catalog
        from schemas.registry import SchemaRegistry
        from schemas.wire import ValueReader
        self.config = config
        self.store = store or Store(config.effective_db_url,
                                    credentials_file=config.db_credentials_file)
        self.store.upgrade()
        self.registry = SchemaRegistry.open(
            config.effective_registry,
            zookeeper_tls=config.credentials.zookeeper_tls_settings().kazoo_options())
        self.registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
        self.reader = ValueReader(self.registry, subject=AUDIT_TOPIC)
        self.consumer = GroupConsumer(GroupConsumerConfig(
            zookeeper=config.zookeeper, group=config.group, topics=(AUDIT_TOPIC,),
            auto_offset_reset=config.auto_offset_reset, explicit_acknowledgement=True,
            on_corrupt="skip", **config.credentials.group_settings()))
        self.consumed = 0            # monitoring events read
        self.stored = 0              # new ones stored
        self.duplicates = 0          # read again, already stored
        self.malformed = 0           # values that are not monitoring events
        self.store_failures = 0      # writes of a chunk the database refused (tried again)
        # a chunk read but not stored yet: (its events, its offsets)
        self._unstored: tuple[list[dict], dict] | None = None
        self._stop = threading.Event()
        self._limited_log = RateLimitedLog(log)
        self.http = None
        # the verdicts per state /metrics last read (served while the
        # database cannot be read)
        self.last_window_counts: dict[str, int] | None = None

    # ------------------------------------------------------------ consuming

    def run(self) -> None:
        while not self._stop.is_set():
            self.step(timeout_ms=200)

    def step(self, timeout_ms: int = 200) -> int:
        """Read one chunk of the audit topic into the database; how many were
        new. A chunk the database did not take is tried again first."""
        if self._unstored is None:
            read = self._read(timeout_ms)
            if read is None:
                return 0
            self._unstored = read
        events, offsets = self._unstored
        from sqlalchemy.exc import SQLAlchemyError
        # received when stored: a chunk held through an outage is not judged
        # against the producers' grace as if it had arrived before it
        received_ms = int(time.time() * 1000)
        try:
            new = self.store.add_events(events, received_ms=received_ms)
        except (SQLAlchemyError, CredentialsError) as exc:
            if not _unreachable(exc):
                # the database refuses these events themselves (a value too
                # long for its column, a character it cannot hold): one at a
                # time, those it refuses counted as malformed and skipped
                new = self._store_one_by_one(events, received_ms)
            else:
                self.store_failures += 1
                self._limited_log.log(logging.ERROR, "store failed",
                                      "cannot store %d monitoring events (kept, tried again "
                                      "in %.0f s): %s", len(events), STORE_RETRY_S,
                                      _first_line(exc))
                self._stop.wait(STORE_RETRY_S)
                return 0
        self._unstored = None
        self.consumed += len(events)
        self.stored += new
        self.duplicates += len(events) - new
        self.consumer.acknowledge(offsets)
        return new

    def _store_one_by_one(self, events: list[dict], received_ms: int) -> int:
        """Store ``events`` one at a time; the database's refusals of an
        event counted as malformed (and left out of ``events``, so they count
        as neither read nor stored). Raises what says the database is not
        reachable (the chunk is then kept)."""
        from sqlalchemy.exc import SQLAlchemyError
        new = 0
        for event in list(events):
            try:
                new += self.store.add_events([event], received_ms=received_ms)
            except (SQLAlchemyError, CredentialsError) as exc:
                if _unreachable(exc):
                    raise
                events.remove(event)
                self.malformed += 1
                self._limited_log.log(logging.WARNING, "refused event",
                                      "the database refuses a monitoring event of %s/%s "
                                      "(skipped): %s", event.get("topic"), event.get("tier"),
                                      _first_line(exc))
        return new

    def _read(self, timeout_ms: int) -> tuple[list[dict], dict] | None:
        """The next chunk's monitoring events (the malformed counted and
        skipped) and the offsets that acknowledge it; None when there was
        nothing."""
        chunk = self.consumer.poll(timeout_ms=timeout_ms)
        if not chunk:
            return None
        events = []
        for m in chunk:
            try:
                event = self.reader.decode(m.value)
                if event["window_end_ms"] <= event["window_begin_ms"] \
                        or event["message_count"] < 0:
                    raise ValueError("a window that ends before it begins, or a negative count")
                events.append(event)
            except ValueError as exc:      # EnvelopeError included
                self.malformed += 1
                self._limited_log.log(logging.WARNING, "malformed monitoring event",
                                "skipping a value of %s/%s at offset %d that is not a "
                                "monitoring event: %s", m.topic, m.partition, m.offset, exc)
        return events, {(m.topic, m.partition): m.next_offset for m in chunk}

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------ answering

    def verdicts(self, topic: str | None, begin_ms: int, end_ms: int, tier: str | None = None,
                 now_ms: int | None = None):
        """Verdicts of the windows that begin in [begin_ms, end_ms)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return report.verdicts(self.store, topic, begin_ms, end_ms, now, self.config.grace_ms,
                               tier)

    def serve_http(self) -> int:
        from audit.web import start_http
        self.http = start_http(self, self.config.http_host, self.config.http_port,
                               self.config.http)
        return self.http.server_port

    def close(self) -> None:
        self.stop()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        try:
            self.consumer.close()
        finally:
            self.registry.close()
            self.store.close()


def _unreachable(exc: BaseException) -> bool:
    """Whether a store error says the database cannot be reached (or logged
    into) now, which waiting may mend, rather than that it refuses the data."""
    from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout
    return isinstance(exc, (CredentialsError, OperationalError, InterfaceError,
                            DisconnectionError, PoolTimeout))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
