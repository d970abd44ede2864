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


def rss_mb(pid: int) -> float:
    """The resident size of process ``pid``, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
