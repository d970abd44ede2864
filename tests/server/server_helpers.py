"""Helpers of the broker-server tests (tests/broker_helpers.py holds the
ones every directory uses)."""
from __future__ import annotations

from broker_helpers import metric, scrape_metrics


def requests_handled(broker, api_name: str) -> float:
    """How many ``api_name`` requests (e.g. "fetch") the broker has handled.
    The broker counts a request in the event-loop step that handles it: once
    counted, a fetch is answered or parked."""
    return metric(scrape_metrics(broker.metrics_port), "samsa_requests_total",
                  api=api_name) or 0
