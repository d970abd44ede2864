"""The audit's metrics, as prometheus_client collectors read at scrape time
(served by broker/service_kit/metrics_http.py).

Of a counter (``python -m audit count``), ``CounterMetrics``:
  samsa_audit_messages_counted_total{tier,cluster}   messages counted
  samsa_audit_events_published_total{tier,cluster}   monitoring events delivered
  samsa_audit_publish_failures_total{tier,cluster}   publishes that failed (retried)
  samsa_audit_unsent_events{tier,cluster}            drained, not delivered yet

Of the audit service (``python -m audit serve``, its /metrics), ``ServiceMetrics``:
  samsa_audit_events_read_total                      monitoring events read
  samsa_audit_events_stored_total                    stored (new)
  samsa_audit_events_deduplicated_total              read again, dropped
  samsa_audit_malformed_events_total                 values that are not monitoring events
  samsa_audit_store_failures_total                   writes the database refused (tried again)
  samsa_audit_windows{state}                         verdicts per state over the
                                                     default period (a query per scrape;
                                                     the last read while the database
                                                     cannot be read)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


from audit.compare import summary


class CounterMetrics:
    """Read at scrape time from a TierCounter and its MonitoringPublisher."""

    def __init__(self, counter, publisher) -> None:
        self.counter = counter
        self.publisher = publisher

    def collect(self):
        cfg = self.counter.config
        labels = ["tier", "cluster"]
        values = [cfg.tier, cfg.cluster]
        for name, doc, value, kind in (
                ("samsa_audit_messages_counted", "Messages counted", self.counter.counted,
                 CounterMetricFamily),
                ("samsa_audit_events_published", "Monitoring events delivered",
                 self.publisher.published, CounterMetricFamily),
                ("samsa_audit_publish_failures", "Publishes that failed (retried)",
                 self.publisher.failures, CounterMetricFamily),
                ("samsa_audit_unsent_events", "Monitoring events not delivered yet",
                 self.publisher.unsent, GaugeMetricFamily)):
            family = kind(name, doc, labels=labels)
            family.add_metric(values, value)
            yield family


@dataclass(frozen=True)
class ServiceMetrics:
    """Read at scrape time from an AuditService (audit/service.py)."""
    service: Any

    def collect(self):
        service = self.service
        for name, doc, value in (
                ("samsa_audit_events_read", "Monitoring events read", service.consumed),
                ("samsa_audit_events_stored", "Monitoring events stored (new)", service.stored),
                ("samsa_audit_events_deduplicated", "Monitoring events read again, dropped",
                 service.duplicates),
                ("samsa_audit_malformed_events", "Values of the audit topic that are not "
                 "monitoring events", service.malformed),
                ("samsa_audit_store_failures", "Writes of monitoring events the database "
                 "refused (tried again)", service.store_failures)):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        now = int(time.time() * 1000)
        begin = now - service.config.default_hours * 3_600_000
        from sqlalchemy.exc import SQLAlchemyError

        from audit.credentials import CredentialsError
        try:
            counts = summary(service.verdicts(None, begin, now))
            service.last_window_counts = counts
        except (SQLAlchemyError, CredentialsError):
            # the database cannot be read: the last verdicts read stand (a
            # loss stays paged), the counters above still answer
            counts = service.last_window_counts
            if counts is None:
                return
        windows = GaugeMetricFamily("samsa_audit_windows",
                                    "Verdicts per state over the default period",
                                    labels=["state"])
        for state, count in counts.items():
            windows.add_metric([state], count)
        yield windows
