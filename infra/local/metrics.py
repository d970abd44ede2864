"""Reading a process's Prometheus ``/metrics`` (the brokers', the mirrors'):
the lab's readiness check of a mirror and its status."""
from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]


def scrape(host: str, port: int, timeout: float = 2.0) -> Samples | None:
    """/metrics as {(sample, labels): value}; None when it does not answer,
    {} when what it answers is no metrics text."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as resp:
            text = resp.read().decode(errors="replace")
    except (OSError, urllib.error.URLError, ValueError):
        return None
    try:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}
    except ValueError:
        return {}
