"""Metrics of the audit's counters, in Prometheus text format over HTTP.

  samsa_audit_messages_counted_total{tier,cluster}   messages counted
  samsa_audit_events_published_total{tier,cluster}   monitoring events delivered
  samsa_audit_publish_failures_total{tier,cluster}   publishes that failed (retried)
  samsa_audit_unsent_events{tier,cluster}            drained, not delivered yet
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


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


def serve_metrics(port: int, *collectors) -> int:
    """Serve /metrics on ``port`` (0: any free); the port bound."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server.server_port
