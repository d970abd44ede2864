"""The audit service: monitoring events from the analysis cluster's audit
topic into the database, once each; reports and the completeness endpoint
over HTTP (audit/web.py).

Events are read at least once (a consumer group on the audit topic whose
offsets are acknowledged only after the events are committed to the
database) and stored once (by event id), so neither a crash nor a
publisher's resend counts anything twice. A value that is not a readable
monitoring event is counted (``malformed``; the metric
samsa_audit_malformed_events_total), logged, and skipped:
it never stops the service.
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
from audit.store import Store

log = logging.getLogger(__name__)


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
        self._stop = threading.Event()
        self._limited_log = RateLimitedLog(log)
        self.http = None

    # ------------------------------------------------------------ consuming

    def run(self) -> None:
        while not self._stop.is_set():
            self.step(timeout_ms=200)

    def step(self, timeout_ms: int = 200) -> int:
        """Read one chunk of the audit topic into the database; how many were new."""
        chunk = self.consumer.poll(timeout_ms=timeout_ms)
        if not chunk:
            return 0
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
        new = self.store.add_events(events, received_ms=int(time.time() * 1000))
        self.consumed += len(events)
        self.stored += new
        self.duplicates += len(events) - new
        self.consumer.acknowledge({(m.topic, m.partition): m.next_offset for m in chunk})
        return new

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
