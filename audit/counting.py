"""Counting what a tier saw, per (topic, time window), and the monitoring
events that carry the counts.

One small module used by every tier: the audited producer, the cluster
counters (``python -m audit count``), the mirror and the loader. It imports
the schemas (when it makes a writer) and nothing of the client, which never
imports it either: a producer reaches it through ``delivery_listener``.

* ``TierCounter`` folds messages into tallies (audit/tally.py; its C twin
  when built) and ``drain()`` turns what was counted since the last drain
  into monitoring events (``samsa.audit.MonitoringEvent`` records). Events
  are additive: the audit sums every event of a (tier, datacenter, topic,
  window), each event once by its ``event_id``.
* ``AuditedProducer`` counts what a producer delivered (acknowledged as its
  ``acks`` asks) by the message timestamp, which producers set to the event
  time.
* ``MonitoringPublisher`` publishes a counter's events to the audit topic
  every interval and on close; a failed publish is kept and sent again with
  the next one (the audit drops the copies it already has by event id).

The checksum: each tally carries the sum modulo 2^64 of a 64-bit hash of
every counted message's event id (duplicates included). Counts alone call 5
lost + 5 duplicated "complete"; with the sums the audit tells apart
complete (counts and sums equal), lost or duplicated only (counts differ),
and lost-and-duplicated (counts equal, sums differ), and where a tier
deduplicates ids (``dedup_ids``) it reports exact duplicates. A loss hides
behind an equal sum only if the hashes of the lost and of the extra
messages happen to sum to the same 64-bit value: about 1 in 2^64 per
compared window.
"""
from __future__ import annotations

import array
import itertools
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from audit import tally as _reference

#: the tally kernel: audit/_tally.c where it was built, else audit/tally.py
#: (the same functions: tally_values, tally_message_set, tally_messages, id_hash)
try:
    from audit import _tally as kernel
except ImportError:     # no C compiler: the reference, several times slower
    kernel = _reference

log = logging.getLogger(__name__)

AUDIT_TOPIC = "_audit"
DEFAULT_WINDOW_MS = 10 * 60 * 1000
#: upper bounds (ms) of the latency histogram's buckets; a last bucket holds the rest
DEFAULT_LATENCY_BOUNDS_MS = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
                             300_000, 900_000, 3_600_000)
TIERS = ("producer", "cluster", "mirror", "hadoop")     # hadoop: the warehouse loader
#: how long a counter remembers which windows' id sets it dropped: a message
#: of such a window is reported late (audit/compare.py tells a late copy from
#: a late first arrival by the sums); past this, it counts as first seen again
LATE_MEMORY_MS = 7 * 24 * 3600 * 1000
_SIGNED = 1 << 63


def id_hash(event_id: bytes) -> int:
    """The 64-bit hash of an event id that the checksums add up (audit/tally.py;
    the C kernel's where built)."""
    return kernel.id_hash(event_id)


def kernel_name() -> str:
    return "C" if kernel is not _reference else "pure Python"


@dataclass(frozen=True)
class CounterConfig:
    tier: str                        # producer, cluster, mirror, hadoop
    datacenter: str                  # where the counting happens
    cluster: str                     # the cluster counted
    window_ms: int = DEFAULT_WINDOW_MS
    latency_bounds_ms: tuple[int, ...] = DEFAULT_LATENCY_BOUNDS_MS
    dedup_ids: bool = False          # keep the ids of open windows: exact duplicates
    dedup_windows: int = 3           # how many windows back the id sets are kept (and
    #                                  any window counted since the last drain); a message
    #                                  of a window whose ids were dropped counts as late
    host: str = field(default_factory=socket.gethostname)
    service: str = ""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"unknown tier {self.tier!r}: one of {', '.join(TIERS)}")
        if self.window_ms <= 0:
            raise ValueError("window_ms must be positive")
        if list(self.latency_bounds_ms) != sorted(set(self.latency_bounds_ms)):
            raise ValueError("latency_bounds_ms must be strictly increasing")


def percentile(bounds: tuple[int, ...], counts: list[int], q: float) -> int:
    """The ``q`` quantile of a histogram, as the upper bound of its bucket
    (the last bucket, unbounded, answers its lower bound); -1 when empty."""
    total = sum(counts)
    if not total:
        return -1
    rank = q * total
    running = 0
    for i, c in enumerate(counts):
        running += c
        if running >= rank and c:
            return bounds[i] if i < len(bounds) else bounds[-1]
    return bounds[-1]


class TierCounter:
    """Tallies per (topic, window) of one tier. Thread-safe."""

    def __init__(self, config: CounterConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._tallies: dict[str, dict[int, list[int]]] = {}
        self._ids: dict[str, dict[int, set]] = {}
        # windows whose id sets were dropped (per topic): what is counted for
        # them afterwards is late; remembered LATE_MEMORY_MS
        self._dropped: dict[str, set[int]] = {}
        self.counted = 0

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def add_values(self, topic: str, values: list[bytes], timestamps: list[int] | int,
                   now_ms: int | None = None) -> None:
        """Count ``values`` of ``topic`` with their message timestamps."""
        if not isinstance(values, list):
            values = list(values)
        if not isinstance(timestamps, int) and not isinstance(timestamps, list):
            timestamps = list(timestamps)
        self._tally(topic, now_ms, kernel.tally_values, values, timestamps)

    def add_message_set(self, topic: str, message_set, now_ms: int | None = None) -> None:
        """Count the whole, uncompressed messages of a fetched message set of
        ``topic`` without decoding them (the mirror forwards such bytes)."""
        self._tally(topic, now_ms, kernel.tally_message_set, message_set)

    def _tally(self, topic: str, now_ms: int | None, kernel, *data) -> None:
        """``kernel(acc, *data, window_ms, now, bounds, ids)`` into ``topic``'s
        tallies (the audit topic itself is never counted)."""
        if topic == AUDIT_TOPIC:
            return
        cfg = self.config
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            acc = self._tallies.setdefault(topic, {})
            ids = self._ids.setdefault(topic, {}) if cfg.dedup_ids else None
            self.counted += kernel(acc, *data, cfg.window_ms, now, cfg.latency_bounds_ms, ids)

    def add_messages(self, messages: list, now_ms: int | None = None) -> None:
        """Count consumed messages (``Message`` tuples, any mix of topics)."""
        cfg = self.config
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            for topic, run in itertools.groupby(messages, key=lambda m: m[0]):
                if topic == AUDIT_TOPIC:
                    continue
                batch = list(run) if len(messages) > 1 else messages
                acc = self._tallies.setdefault(topic, {})
                ids = self._ids.setdefault(topic, {}) if cfg.dedup_ids else None
                self.counted += kernel.tally_messages(acc, batch, cfg.window_ms, now,
                                                       cfg.latency_bounds_ms, ids)

    def merge(self, topic: str, tallies: dict[int, list[int]],
              ids: dict[int, bytes] | None = None) -> None:
        """Add tallies made elsewhere (a Spark task's kernel call) to this
        counter's. ``ids``: the task's id hashes per window (``id_hashes``):
        then first sightings are counted against this counter's id sets (a
        copy another task saw first is a duplicate), not the task's own."""
        if topic == AUDIT_TOPIC:
            return
        if ids is not None and not self.config.dedup_ids:
            raise ValueError("merge(ids=...) needs a counter that keeps ids (dedup_ids)")
        R = _reference
        with self._lock:
            acc = self._tallies.setdefault(topic, {})
            for begin, t in tallies.items():
                mine = acc.get(begin)
                if mine is None:
                    mine = acc[begin] = list(t)
                    if ids is not None:
                        mine[R.UNIQUE] = mine[R.UNIQUE_CHECKSUM] = 0
                else:
                    if len(mine) != len(t):
                        raise ValueError("tallies made with different latency bounds")
                    for i, v in enumerate(t):
                        if ids is not None and i in (R.UNIQUE, R.UNIQUE_CHECKSUM):
                            continue
                        mine[i] = (mine[i] + v) % (1 << 64) if i in R.CHECKSUMS else mine[i] + v
                if ids is not None:
                    seen = self._ids.setdefault(topic, {}).setdefault(begin, set())
                    for h in array.array("Q", ids.get(begin, b"")):
                        if h not in seen:
                            seen.add(h)
                            mine[R.UNIQUE] += 1
                            mine[R.UNIQUE_CHECKSUM] = (mine[R.UNIQUE_CHECKSUM] + h) % (1 << 64)
            self.counted += sum(t[R.COUNT] for t in tallies.values())

    def pending(self) -> int:
        """Messages counted and not drained yet."""
        with self._lock:
            return sum(t[_reference.COUNT] for acc in self._tallies.values()
                       for t in acc.values())

    def drain(self, now_ms: int | None = None) -> list[dict]:
        """Monitoring events for everything counted since the last drain (and
        forget it); old windows' id sets are dropped."""
        cfg = self.config
        now = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            tallies, self._tallies = self._tallies, {}
            late = {topic: {b for b in acc if b in self._dropped.get(topic, ())}
                    for topic, acc in tallies.items()}
            if cfg.dedup_ids:
                oldest = now - now % cfg.window_ms - cfg.dedup_windows * cfg.window_ms
                # windows as far ahead of this clock are dropped alike (a
                # producer whose clock is days ahead stamps its events days
                # ahead: their ids must not wait days for the clock to pass)
                newest = now - now % cfg.window_ms + cfg.dedup_windows * cfg.window_ms
                forget = now - LATE_MEMORY_MS
                for topic, sets in self._ids.items():
                    dropped = self._dropped.setdefault(topic, set())
                    # a window still being counted keeps its ids (a counter
                    # catching up on old data), whatever its age
                    active = tallies.get(topic, {})
                    for begin in [b for b in sets
                                  if (b < oldest or b > newest) and b not in active]:
                        del sets[begin]
                        dropped.add(begin)
                    dropped.difference_update([b for b in dropped if b < forget])
        events = []
        for topic, acc in tallies.items():
            gone = late.get(topic, ())
            for begin, t in sorted(acc.items()):
                events.append(self.monitoring_event(topic, begin, t, now, late=begin in gone))
        return events

    def monitoring_event(self, topic: str, begin: int, t: list[int], now_ms: int,
                         late: bool = False) -> dict:
        """The event of one tally. ``late``: the window's id set had been
        dropped before it was counted (a copy re-sent long after its window,
        or a first arrival that late): its first-seen ids are reported as
        late, and the audit places them by their sums (audit/compare.py)."""
        cfg = self.config
        R = _reference
        counts = t[R.FIXED_FIELDS:]
        bounds = cfg.latency_bounds_ms
        checksum = t[R.CHECKSUM]
        unique = late_unique = unique_sum = late_sum = None
        if cfg.dedup_ids:
            first, first_sum = t[R.UNIQUE], _signed(t[R.UNIQUE_CHECKSUM])
            unique, unique_sum = (0, 0) if late else (first, first_sum)
            late_unique, late_sum = (first, first_sum) if late else (0, 0)
        return {
            "header": {"time_ms": now_ms, "host": cfg.host,
                       "service": cfg.service or f"samsa-audit-{cfg.tier}",
                       "event_id": uuid.uuid4().bytes},
            "tier": cfg.tier, "datacenter": cfg.datacenter, "cluster": cfg.cluster,
            "topic": topic, "window_begin_ms": begin, "window_end_ms": begin + cfg.window_ms,
            "message_count": t[R.COUNT], "byte_count": t[R.BYTES],
            "no_time_count": t[R.NO_TIME], "malformed_count": t[R.MALFORMED],
            "id_checksum": _signed(checksum),
            "unique_count": unique, "unique_checksum": unique_sum,
            "late_unique_count": late_unique, "late_unique_checksum": late_sum,
            "latency_ms": {"bounds_ms": list(bounds), "counts": counts,
                           "p50_ms": percentile(bounds, counts, 0.50),
                           "p95_ms": percentile(bounds, counts, 0.95),
                           "p99_ms": percentile(bounds, counts, 0.99)},
        }


def offset_clock(offset_ms: int) -> Callable[[], float]:
    """A clock ``offset_ms`` ahead of the system's (behind when negative),
    seconds since the epoch as ``time.time``: a producer host's clock that
    is off, for drills and tests (CLOCK_REALTIME cannot be offset per
    process or namespace: Linux time namespaces offset only the monotonic
    and boot clocks)."""
    offset_s = offset_ms / 1000

    def clock() -> float:
        return time.time() + offset_s
    return clock


def _signed(checksum: int) -> int:
    """A checksum (0..2^64-1) as the Avro long that carries it."""
    return checksum - (1 << 64) if checksum >= _SIGNED else checksum


def id_hashes(id_set) -> bytes:
    """A window's id set (the kernel's, C or Python) as packed 64-bit hashes,
    for ``TierCounter.merge(ids=...)``."""
    found = id_set.to_set() if hasattr(id_set, "to_set") else id_set
    return array.array("Q", sorted(found)).tobytes()


def unsigned_checksum(signed: int) -> int:
    """A monitoring event's ``id_checksum`` (an Avro long) back to 0..2^64-1."""
    return signed % (1 << 64)


# --------------------------------------------------------------------------- producer tier

class AuditedProducer:
    """Counts what ``producer`` (a Producer or ClusterProducer) delivers, in
    ``counter``; otherwise the producer is used as it is (``send``,
    ``send_many``, ``flush`` pass through). With a ``publisher``, ``close()``
    flushes, publishes what is left and closes the producer.

    ``AuditedProducer.publishing(producer, writer, ...)`` is the usual way:
    counts published to the audit topic of the cluster the producer writes
    to, through the same producer (so the same load balancer), every
    ``interval_s`` and on close.

    Windows are those of the message timestamps (the event times the
    application set, by its host's clock), not of the counter's clock
    (``clock``), which gives the latencies, the time of the monitoring
    events, and the window of a message without a usable timestamp."""

    def __init__(self, producer, counter: TierCounter,
                 publisher: "MonitoringPublisher | None" = None) -> None:
        self.producer = producer
        self.counter = counter
        self.publisher = publisher
        producer.delivery_listener = self._delivered

    @classmethod
    def publishing(cls, producer, writer, *, datacenter: str, cluster: str,
                   interval_s: float = 60.0, window_ms: int = DEFAULT_WINDOW_MS,
                   service: str = "",
                   clock: Callable[[], float] = time.time) -> "AuditedProducer":
        """``writer``: a schemas.ValueWriter of the audit topic's subject.
        ``clock``: the producer host's clock, seconds since the epoch (default
        the system's; ``offset_clock(ms)`` for a host whose clock is off, as
        drills and tests make one)."""
        counter = TierCounter(CounterConfig(tier="producer", datacenter=datacenter,
                                            cluster=cluster, window_ms=window_ms,
                                            service=service), clock=clock)
        publisher = MonitoringPublisher(counter, writer.encode, producer_sender(producer),
                                        interval_s).start()
        return cls(producer, counter, publisher)

    def _delivered(self, batches: list) -> None:
        add = self.counter.add_values
        for batch in batches:
            if getattr(batch, "encoded", None) is not None:    # send_message_set
                self.counter.add_message_set(batch.topic, batch.encoded)
            else:
                add(batch.topic, batch.values, batch.timestamps)

    def close(self, timeout: float | None = 60.0) -> None:
        try:
            self.producer.flush(timeout)
        finally:
            try:
                if self.publisher is not None:
                    self.publisher.close(timeout or 60.0)
            finally:
                self.producer.close(timeout)

    def __enter__(self) -> "AuditedProducer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        return getattr(self.producer, name)


# --------------------------------------------------------------------------- publishing

class MonitoringPublisher:
    """Publishes ``counter``'s monitoring events every ``interval_s`` and on
    close. ``send(values, timestamps)`` must deliver them or raise (e.g. a
    producer's ``send_many(AUDIT_TOPIC, ...)`` followed by ``result()``);
    ``encode(record)`` makes a value (a schemas.ValueWriter's ``encode``)."""

    def __init__(self, counter: TierCounter, encode: Callable[[dict], bytes],
                 send: Callable[[list[bytes], list[int]], None], interval_s: float = 60.0) -> None:
        self.counter = counter
        self.encode = encode
        self.send = send
        self.interval_s = interval_s
        self.published = 0
        self.failures = 0
        self._unsent: list[tuple[bytes, int]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def unsent(self) -> int:
        """Events drained but not delivered yet (a failed publish keeps them)."""
        with self._lock:
            return len(self._unsent)

    def start(self) -> "MonitoringPublisher":
        self._thread = threading.Thread(target=self._run, name="samsa-audit-publisher",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.publish()

    def publish(self) -> int:
        """Drain the counter and send its events (and any left from a failed
        publish); how many were sent (0 on failure: they are kept)."""
        with self._lock:
            for event in self.counter.drain():
                self._unsent.append((self.encode(event), event["header"]["time_ms"]))
            if not self._unsent:
                return 0
            values = [v for v, _ in self._unsent]
            stamps = [t for _, t in self._unsent]
            try:
                self.send(values, stamps)
            except Exception as exc:     # kept for the next publish: nothing is lost
                self.failures += 1
                log.warning("publishing %d monitoring events failed (%s); they will be sent "
                            "with the next publish", len(values), exc)
                return 0
            self._unsent.clear()
            self.published += len(values)
            return len(values)

    def publish_all(self) -> bool:
        """Publish; whether nothing counted so far is left unsent (what a
        caller that commits offsets only after their counts are out needs)."""
        self.publish()
        with self._lock:
            return not self._unsent

    def close(self, timeout: float = 30.0) -> None:
        """Stop the timer and publish what is left (retrying until ``timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        while True:
            self.publish()
            if not self._unsent or time.monotonic() >= deadline:
                break
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        if self._unsent:
            log.error("%d monitoring events could not be published before close",
                      len(self._unsent))


def producer_sender(producer, topic: str = AUDIT_TOPIC,
                    timeout_s: float = 30.0) -> Callable[[list[bytes], list[int]], None]:
    """A ``send`` for MonitoringPublisher through a Producer or a
    ClusterProducer: waits until every event is delivered (raises if one failed)."""
    def send(values: list[bytes], timestamps: list[int]) -> None:
        futures = [producer.send(topic, value, timestamp=ts)
                   for value, ts in zip(values, timestamps)]
        for future in futures:
            future.result(timeout_s)
    return send


def monitoring_writer(registry_url: str, zookeeper_tls: dict | None = None):
    """The ValueWriter of monitoring events (registering the shipped schema
    under the audit topic if it is not there yet); ``zookeeper_tls``: kazoo's
    TLS options for a registry in ZooKeeper (None: the environment's)."""
    from schemas import catalog
    from schemas.registry import SchemaRegistry
    from schemas.wire import ValueWriter
    registry = SchemaRegistry.open(registry_url, zookeeper_tls=zookeeper_tls)
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    return registry, ValueWriter(registry, AUDIT_TOPIC)


__all__ = ["TierCounter", "CounterConfig", "AuditedProducer", "MonitoringPublisher",
           "producer_sender", "monitoring_writer", "percentile", "unsigned_checksum", "id_hash",
           "id_hashes", "offset_clock",
           "AUDIT_TOPIC", "kernel_name"]
