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
acknowledged, so nothing is lost and the order is kept.
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
        # a chunk read but not stored yet: (events, its offsets, when it was read)
        self._unstored: tuple[list[dict], dict, int] | None = None
        self._stop = threading.Event()
        self._limited_log = RateLimitedLog(log)
        self.http = None

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
        events, offsets, received_ms = self._unstored
        from sqlalchemy.exc import SQLAlchemyError
        try:
            new = self.store.add_events(events, received_ms=received_ms)
        except (SQLAlchemyError, CredentialsError) as exc:
            self.store_failures += 1
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self._limited_log.log(logging.ERROR, "store failed",
                                  "cannot store %d monitoring events (kept, tried again in "
                                  "%.0f s): %s", len(events), STORE_RETRY_S, first)
            self._stop.wait(STORE_RETRY_S)
            return 0
        self._unstored = None
        self.consumed += len(events)
        self.stored += new
        self.duplicates += len(events) - new
        self.consumer.acknowledge(offsets)
        return new

    def _read(self, timeout_ms: int) -> tuple[list[dict], dict, int] | None:
        """The next chunk's monitoring events (the malformed counted and
        skipped), the offsets that acknowledge it, and when it was read;
        None when there was nothing."""
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
        return (events, {(m.topic, m.partition): m.next_offset for m in chunk},
                int(time.time() * 1000))

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
