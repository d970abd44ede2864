"""The mirror's metrics, in Prometheus text format over HTTP (served by
broker/service_kit/metrics_http.py; MirrorMetrics is the collector).

Bumped per chunk of messages (never per message) as plain numbers under one
lock; a collector turns them into metric families when Prometheus scrapes.
Per source partition ("source", "topic", "partition" = broker-partition):

  samsa_mirror_messages_total, samsa_mirror_bytes_total
        copied and acknowledged (acks=all) by the target: rate() = throughput
  samsa_mirror_lag_bytes        source log end - next offset to copy, for every
                                partition of the group's topics, owned by this
                                process, another or nobody (each process reports
                                the group's whole lag: take max, not sum)
  samsa_mirror_lag_status       Burrow's status of the partition (docs/lag.md)
  samsa_mirror_lag_messages     the same in messages, estimated: bytes behind /
                                the partition's mean message size so far
  samsa_mirror_record_age_seconds  now - timestamp of the last message copied,
                                when it was written to the target
Per source: samsa_mirror_unacknowledged_messages (sent, not yet acknowledged by the
target), samsa_mirror_resent_messages_total (sent again after a retriable
failure: an upper bound on the duplicates it caused), samsa_mirror_send_errors_total,
samsa_mirror_corrupt_skipped_bytes_total (corrupt source data skipped, on_corrupt=skip),
samsa_mirror_write_age_seconds (histogram of the age of each chunk's newest
message when written).
"""
from __future__ import annotations

import bisect
import threading
from collections import defaultdict

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)


AGE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
PartitionKey = tuple[str, str, str]        # (source, topic, broker-partition)


class MirrorMetrics:
    """Thread-safe: the source pipes and the lag probe update it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.messages: dict[PartitionKey, int] = defaultdict(int)
        self.bytes: dict[PartitionKey, int] = defaultdict(int)
        self.lag_bytes: dict[PartitionKey, int] = {}
        self.lag_status: dict[PartitionKey, int] = {}
        self.record_age: dict[PartitionKey, float] = {}
        self.unacknowledged: dict[str, int] = defaultdict(int)
        self.resent: dict[str, int] = defaultdict(int)
        self.corrupt_skipped_bytes: dict[str, int] = defaultdict(int)
        self.send_errors: dict[tuple[str, str], int] = defaultdict(int)
        self.age_buckets: dict[str, list[int]] = {}
        self.age_sum: dict[str, float] = defaultdict(float)

    def copied(self, source: str, per_partition: dict[tuple[str, str], tuple[int, int]]) -> None:
        """Acknowledged by the target: (topic, bp) -> (messages, bytes)."""
        with self._lock:
            for (topic, bp), (count, size) in per_partition.items():
                key = (source, topic, bp)
                self.messages[key] += count
                self.bytes[key] += size

    def written(self, source: str, ages: dict[tuple[str, str], float], newest_age: float) -> None:
        """Sent to the target: the age of each partition's last message, and
        of the chunk's newest."""
        with self._lock:
            for (topic, bp), age in ages.items():
                self.record_age[(source, topic, bp)] = age
            buckets = self.age_buckets.get(source)
            if buckets is None:
                buckets = self.age_buckets[source] = [0] * (len(AGE_BUCKETS) + 1)
            buckets[bisect.bisect_left(AGE_BUCKETS, newest_age)] += 1
            self.age_sum[source] += newest_age

    def set_unacknowledged(self, source: str, count: int) -> None:
        self.unacknowledged[source] = count      # one store: atomic under the GIL

    def send_error(self, source: str, error: str) -> None:
        with self._lock:
            self.send_errors[(source, error)] += 1

    def corrupt_skipped(self, source: str, nbytes: int) -> None:
        with self._lock:
            self.corrupt_skipped_bytes[source] += nbytes

    def resend(self, source: str, count: int) -> None:
        with self._lock:
            self.resent[source] += count

    def set_lag(self, source: str, lags: dict[tuple[str, str], int],
                statuses: dict[tuple[str, str], int] | None = None) -> None:
        """Every partition of the group's topics in ``source`` (owned here,
        elsewhere or by nobody): bytes behind, and the lag status."""
        with self._lock:
            for key in [k for k in self.lag_bytes if k[0] == source]:
                del self.lag_bytes[key]
            for key in [k for k in self.lag_status if k[0] == source]:
                del self.lag_status[key]
            for (topic, bp), lag in lags.items():
                self.lag_bytes[(source, topic, bp)] = lag
            for (topic, bp), status in (statuses or {}).items():
                self.lag_status[(source, topic, bp)] = status

    def lag_messages(self, key: PartitionKey) -> float:
        count, size = self.messages.get(key, 0), self.bytes.get(key, 0)
        mean = size / count if count else 0
        lag = self.lag_bytes.get(key, 0)
        return lag / mean if mean else float(lag > 0)

    def total_lag_bytes(self, source: str | None = None) -> int:
        with self._lock:
            return sum(v for k, v in self.lag_bytes.items() if source in (None, k[0]))

    def collect(self):
        with self._lock:
            yield from self._families()

    def _families(self):
        labels = ["source", "topic", "partition"]
        for name, doc, data in (
                ("samsa_mirror_messages", "Messages copied and acknowledged by the target",
                 self.messages),
                ("samsa_mirror_bytes", "Payload bytes copied and acknowledged by the target",
                 self.bytes)):
            family = CounterMetricFamily(name, doc, labels=labels)
            for key, value in data.items():
                family.add_metric(list(key), value)
            yield family
        lag = GaugeMetricFamily("samsa_mirror_lag_bytes",
                                "Bytes of the source partition not yet copied", labels=labels)
        lag_msgs = GaugeMetricFamily(
            "samsa_mirror_lag_messages", "Messages of the source partition not yet copied "
            "(estimated: bytes behind / mean message size)", labels=labels)
        for key, value in self.lag_bytes.items():
            lag.add_metric(list(key), value)
            lag_msgs.add_metric(list(key), self.lag_messages(key))
        yield lag
        yield lag_msgs
        status = GaugeMetricFamily(
            "samsa_mirror_lag_status", "The group's status on the source partition "
            "(docs/lag.md): 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 REWIND", labels=labels)
        for key, value in self.lag_status.items():
            status.add_metric(list(key), value)
        yield status
        age = GaugeMetricFamily("samsa_mirror_record_age_seconds",
                                "now - timestamp of the last message copied, when written",
                                labels=labels)
        for key, value in self.record_age.items():
            age.add_metric(list(key), value)
        yield age
        for name, doc, data in (
                ("samsa_mirror_unacknowledged_messages",
                 "Messages sent to the target and not yet acknowledged", self.unacknowledged),):
            family = GaugeMetricFamily(name, doc, labels=["source"])
            for source, value in data.items():
                family.add_metric([source], value)
            yield family
        resent = CounterMetricFamily("samsa_mirror_resent_messages",
                                     "Messages sent again after a retriable failure",
                                     labels=["source"])
        for source, value in self.resent.items():
            resent.add_metric([source], value)
        yield resent
        skipped = CounterMetricFamily("samsa_mirror_corrupt_skipped_bytes",
                                      "Corrupt source bytes skipped (on_corrupt=skip)",
                                      labels=["source"])
        for source, value in self.corrupt_skipped_bytes.items():
            skipped.add_metric([source], value)
        yield skipped
        errors = CounterMetricFamily("samsa_mirror_send_errors", "Failed sends to the target",
                                     labels=["source", "error"])
        for (source, error), value in self.send_errors.items():
            errors.add_metric([source, error], value)
        yield errors
        hist = HistogramMetricFamily("samsa_mirror_write_age_seconds",
                                     "Age of each chunk's newest message when written",
                                     labels=["source"])
        for source, buckets in self.age_buckets.items():
            cumulative, running = [], 0
            for bound, count in zip(list(AGE_BUCKETS) + [float("inf")], buckets):
                running += count
                cumulative.append((str(bound) if bound != float("inf") else "+Inf", running))
            hist.add_metric([source], cumulative, self.age_sum[source])
        yield hist
