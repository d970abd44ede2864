"""One source cluster copied into the target: a consumer-group member in the
source, the target writer, and the window of messages in between.

The rule that makes the mirror lose nothing: a source offset is acknowledged
to the group (and so committed to ZooKeeper) only after every message before
it has been acknowledged by the target (acks=all: docs/mirror.md). Chunks are sent in the
order they were fetched and acknowledged in that order too, even when a later
chunk's batches finish first; a chunk whose send failed is sent again, whole,
after a back-off (its messages that did arrive become duplicates), and the
chunks behind it wait. A crash therefore re-sends at most what was sent and
not yet committed: duplicates, never gaps.

With the audit on, the mirror tier's counts go first: a chunk's offsets are
acknowledged only once the monitoring events that count it are published
(every ``audit_publish_interval_ms``; the commit follows), so a crash
re-copies and counts again what it had counted and not published — the
audit sees duplicates, never a loss that did not happen.

Partitions change hands without copying twice: when the group takes
partitions from this process (a member joined or left, or this one stops),
the consumer's ``on_revoke`` asks the pipe's thread to finish what is in
flight (every sent chunk acknowledged by the target, up to the consumer's
``revoke_timeout_ms``), publish the counts and acknowledge their offsets;
the consumer commits and only then releases the partitions, so their new
owner starts after the last copy made here.

The window (messages sent and not yet acknowledged) is capped by
``max_unacknowledged``: when full, the pipe stops fetching until the target
catches up, which is also how a target outage holds the mirror back.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from operator import attrgetter

from broker.client.backoff import Backoff
from broker.client.consumer import RawChunk
from broker.client.errors import CorruptDataError, InvalidOffsetError
from broker.client.group_consumer import GroupConsumer, GroupConsumerConfig
from broker.client.producer import Batch
from broker.protocol.message import Message

from broker.coordination.named_cluster import NamedCluster

from .config import MirrorConfig
from .metrics import MirrorMetrics
from .target import TargetCluster, is_retriable

log = logging.getLogger(__name__)

_topic = attrgetter("topic")
_partition = attrgetter("partition")
_value = attrgetter("value")
_key = attrgetter("key")
_timestamp = attrgetter("timestamp")


class MirrorFailure(RuntimeError):
    """A send failed in a way no retry can cure: the mirror stops."""


@dataclass
class Chunk:
    """Fetched messages on their way to the target: decoded ones grouped by
    topic, and message sets forwarded as bytes (``raw``)."""
    by_topic: dict[str, tuple[list[bytes], list[int], list[bytes | None]]]
    offsets: dict[tuple[str, str], int]              # (topic, bp) -> next offset
    stats: dict[tuple[str, str], tuple[int, int]]     # (topic, bp) -> (messages, log bytes)
    last_timestamps: dict[tuple[str, str], int]
    count: int
    raw: list[RawChunk] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    error: BaseException | None = None
    attempts: int = 0


def split_chunk(items: list) -> Chunk:
    """What one poll returned — RawChunks (message sets to forward as bytes)
    and decoded Messages (data with compressed wrappers, or a decoding
    consumer) — as one Chunk: per source partition where to resume, how
    much, and the last timestamp."""
    raws = [x for x in items if type(x) is RawChunk]
    if not raws:
        return _split_messages(items)
    messages = [x for x in items if type(x) is not RawChunk]
    chunk = _split_messages(messages) if messages else Chunk({}, {}, {}, {}, 0)
    for r in raws:
        tp = (r.topic, r.partition)
        chunk.offsets[tp] = max(chunk.offsets.get(tp, 0), r.next_offset)
        before = chunk.stats.get(tp, (0, 0))
        chunk.stats[tp] = (before[0] + r.count, before[1] + r.next_offset - r.offset)
        chunk.last_timestamps[tp] = max(chunk.last_timestamps.get(tp, -1), r.max_timestamp)
        chunk.count += r.count
    chunk.raw = raws
    return chunk


def _split_messages(messages: list[Message]) -> Chunk:
    """Group fetched messages by topic, and note per source partition where
    to resume, how much, and the last timestamp. (Loops run in C: map/zip
    over the named tuples.)"""
    n = len(messages)
    parts = list(zip(map(_topic, messages), map(_partition, messages)))
    last = dict(zip(parts, range(n)))
    first = dict(zip(reversed(parts), range(n - 1, -1, -1)))
    counts = Counter(parts)
    offsets, stats, stamps = {}, {}, {}
    for tp, i in last.items():
        m = messages[i]
        offsets[tp] = m.next_offset
        stamps[tp] = m.timestamp
        stats[tp] = (counts[tp], m.next_offset - messages[first[tp]].offset)
    topics = {tp[0] for tp in last}
    if len(topics) == 1:
        by_topic = {topics.pop(): (list(map(_value, messages)), list(map(_timestamp, messages)),
                                   list(map(_key, messages)))}
    else:
        by_topic = {}
        for m in messages:
            group = by_topic.get(m.topic)
            if group is None:
                group = by_topic[m.topic] = ([], [], [])
            group[0].append(m.value)
            group[1].append(m.timestamp)
            group[2].append(m.key)
    return Chunk(by_topic, offsets, stats, stamps, n)


class SourcePipe:
    """Copies the partitions this process owns in one source cluster. Its
    ``run()`` is the body of one thread; ``stop()`` asks it to drain and end."""

    def __init__(self, source: NamedCluster, config: MirrorConfig, target: TargetCluster,
                 metrics: MirrorMetrics, blacklist: str | None, consumer_id: str,
                 counter=None, publisher=None) -> None:
        self.source = source
        self.counter = counter          # the audit's TierCounter of this source, if any
        self.publisher = publisher      # ...and its MonitoringPublisher
        self._counted: dict[tuple[str, str], int] = {}   # acknowledged once published
        self._published_at = time.monotonic()
        self.config = config
        self.target = target
        self.metrics = metrics
        self.pending: deque[Chunk] = deque()
        self.unacknowledged = 0
        self.acknowledged: dict[tuple[str, str], int] = {}   # (topic, bp) -> next offset
        self.copied = 0
        self.forwarded = 0          # of them, copied as bytes (never decoded)
        self._stopping = threading.Event()
        self._close_lock = threading.Lock()   # the pipe's thread and Mirror.close may both close
        self._closed = False
        self._backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._skipped_reported = 0
        self._thread: int | None = None                 # the ident of run()'s thread
        self._handovers: list[tuple[threading.Event, float]] = []
        self._handover_lock = threading.Lock()
        self.handovers = 0
        # last: its member may call back (on_revoke) as soon as it exists
        self.consumer = GroupConsumer(GroupConsumerConfig(
            zookeeper=source.zookeeper, group=config.group, whitelist=config.whitelist,
            blacklist=blacklist, consumer_id=consumer_id, auto_offset_reset="earliest",
            auto_commit=True, auto_commit_interval_ms=config.commit_interval_ms,
            explicit_acknowledgement=True, fetch_max_bytes=config.fetch_max_bytes,
            fetch_rate_bytes=config.fetch_rate_bytes,
            fetch_rtt_max_bytes=config.fetch_rtt_max_bytes,
            fetchers_per_broker=config.fetchers_per_source_broker,
            receive_buffer_bytes=config.socket_receive_buffer_bytes,
            raw_chunks=config.forward_bytes,
            queue_chunks=8, session_timeout_ms=config.session_timeout_ms,
            on_corrupt=config.on_corrupt, **config.credentials.group_settings()),
            on_revoke=self._on_revoke)

    # ------------------------------------------------------------ the thread

    def run(self) -> None:
        """Fetch, send, acknowledge, until stopped; raises MirrorFailure."""
        cap = self.config.max_unacknowledged
        self._thread = threading.get_ident()
        try:
            while not self._stopping.is_set():
                if self._handovers:
                    self._serve_handovers()
                self._settle(block=self.unacknowledged >= cap)
                self._publish_counts()
                if self.unacknowledged >= cap:
                    continue
                try:
                    messages = self.consumer.poll(timeout_ms=100)
                except (CorruptDataError, InvalidOffsetError) as exc:
                    log.critical("mirror %s: %s; stopping without committing anything past it "
                                 "(on_corrupt=raise; set on_corrupt=skip to copy around it)",
                                 self.config.group, exc)
                    raise MirrorFailure(f"corrupt data in source {self.source.name}: "
                                        f"{exc}") from None
                skipped = self.consumer.corrupt_skipped_bytes
                if skipped != self._skipped_reported:
                    self.metrics.corrupt_skipped(self.source.name,
                                                 skipped - self._skipped_reported)
                    self._skipped_reported = skipped
                if messages:
                    chunk = split_chunk(messages)
                    self._send(chunk)
                    self.pending.append(chunk)
                    self.unacknowledged += chunk.count
                    self.metrics.set_unacknowledged(self.source.name, self.unacknowledged)
            self._drain(timeout=30)
        except _Stopped:
            pass
        finally:
            self.close()

    def stop(self) -> None:
        self._stopping.set()

    # ------------------------------------------------------------ hand-over

    def _on_revoke(self, partitions, deadline: float) -> None:
        """The consumer gives partitions up (its coordination thread, or the
        thread closing it): return once everything in flight is acknowledged
        and its counts published, or at ``deadline``."""
        if threading.get_ident() == self._thread or self._thread is None or self._closed:
            self._hand_over(deadline)          # close() on the pipe's thread, or no thread
            return
        done = threading.Event()
        with self._handover_lock:
            self._handovers.append((done, deadline))
        if not done.wait(max(0.0, deadline - time.monotonic())):
            log.warning("mirror %s: hand-over of %d partitions of %s timed out with %d messages "
                        "in flight: the new owner copies them again", self.config.group,
                        len(partitions), self.source.name, self.unacknowledged)

    def _serve_handovers(self) -> None:
        """On the pipe's thread: settle, publish, acknowledge; wake the askers."""
        with self._handover_lock:
            asks, self._handovers = self._handovers, []
        self._hand_over(min(deadline for _done, deadline in asks))
        for done, _deadline in asks:
            done.set()

    def _hand_over(self, deadline: float) -> None:
        started = time.monotonic()
        try:
            while self.pending and time.monotonic() < deadline:
                self._settle(block=True, deadline=deadline)
            self._publish_counts(force=True)
        except (_Stopped, MirrorFailure) as exc:
            log.warning("mirror %s: hand-over interrupted: %s", self.config.group, exc)
        self.handovers += 1
        log.info("mirror %s: handed over partitions of %s in %.0f ms (%d messages still in "
                 "flight)", self.config.group, self.source.name,
                 (time.monotonic() - started) * 1000, self.unacknowledged)

    # ------------------------------------------------------------ sending

    def _send(self, chunk: Chunk) -> None:
        """Hand the chunk to the target; a failure is kept on the chunk and
        dealt with when the chunk reaches the head of the window."""
        chunk.attempts += 1
        chunk.error = None
        chunk.batches = []
        try:
            for topic, (values, stamps, keys) in chunk.by_topic.items():
                self.target.ensure_topic(topic, self.source.name)
                chunk.batches += self.target.send(topic, values, stamps, keys)
            for r in chunk.raw:
                self.target.ensure_topic(r.topic, self.source.name)
                chunk.batches += self.target.send_message_set(r.topic, r.data, r.count,
                                                              r.max_timestamp)
        except Exception as exc:   # noqa: BLE001 - judged at the head of the window
            chunk.error = exc
            return
        now_ms = time.time() * 1000
        ages = {tp: max(0.0, (now_ms - ts) / 1000) for tp, ts in chunk.last_timestamps.items()}
        self.metrics.written(self.source.name, ages, min(ages.values()))

    def _settle(self, block: bool, deadline: float | None = None) -> None:
        """Acknowledge the finished chunks at the head of the window, in
        order; re-send a failed one. With ``block``, wait for the head (until
        ``deadline``, time.monotonic(), if given)."""
        while self.pending:
            chunk = self.pending[0]
            if chunk.error is None:
                unfinished = next((b for b in chunk.batches if not b.done()), None)
                if unfinished is not None:
                    if not block or (deadline is not None and time.monotonic() >= deadline):
                        return
                    try:
                        unfinished.result(timeout=0.1)
                    except Exception:   # noqa: BLE001 - looked at below, once all are done
                        pass
                    continue
                chunk.error = next((b.exception() for b in chunk.batches
                                    if b.exception() is not None), None)
            if chunk.error is not None:
                self._retry(chunk)
                continue
            self.pending.popleft()
            self._backoff.reset()
            self.unacknowledged -= chunk.count
            self.metrics.set_unacknowledged(self.source.name, self.unacknowledged)
            self.acknowledged.update(chunk.offsets)
            self.copied += chunk.count
            self.forwarded += sum(r.count for r in chunk.raw)
            self.metrics.copied(self.source.name, chunk.stats)
            if self.counter is not None:       # the audit counts what the target acknowledged
                for topic, (values, stamps, _keys) in chunk.by_topic.items():
                    self.counter.add_values(topic, values, stamps)
                for r in chunk.raw:
                    self.counter.add_message_set(r.topic, r.data)
            if self.publisher is not None:     # committed once the counts are published
                self._counted.update(chunk.offsets)
            else:
                self.consumer.acknowledge(chunk.offsets)

    def _publish_counts(self, force: bool = False) -> None:
        """Every audit publish interval (or now, with ``force``): publish the
        counts, then acknowledge the offsets they cover (the next commit
        takes them)."""
        if self.publisher is None or not self._counted:
            return
        interval = self.config.audit_publish_interval_ms / 1000
        if not force and time.monotonic() - self._published_at < interval:
            return
        self._published_at = time.monotonic()
        if self.publisher.publish_all():
            self.consumer.acknowledge(dict(self._counted))
            self._counted.clear()

    def _retry(self, chunk: Chunk) -> None:
        error = chunk.error
        code = getattr(error, "code", None)
        self.metrics.send_error(self.source.name, code.name if hasattr(code, "name")
                                else type(error).__name__)
        if not is_retriable(error):
            log.critical("mirror %s: cannot copy %d messages from %s (%s); stopping without "
                         "committing them", self.config.group, chunk.count, self.source.name,
                         error)
            raise MirrorFailure(f"sending to {self.target.ref.name} failed for good: {error}")
        backoff = self._backoff.next_delay_ms() / 1000
        log.warning("mirror %s: sending %d messages from %s to %s failed (%s); sending them "
                    "again in %.1f s (attempt %d)", self.config.group, chunk.count,
                    self.source.name, self.target.ref.name, error, backoff, chunk.attempts + 1)
        # wait out the back-off, but not past a stop: what is unsent is fetched again
        # after a restart, from the committed offsets
        if self._stopping.wait(backoff):
            raise _Stopped()
        self.metrics.resend(self.source.name, chunk.count)
        self._send(chunk)

    def _drain(self, timeout: float) -> None:
        """On stop: wait (up to ``timeout``) for what is in flight, so the
        final commit covers it."""
        deadline = time.monotonic() + timeout
        try:
            while self.pending and time.monotonic() < deadline:
                self._settle(block=True, deadline=deadline)
        except (_Stopped, MirrorFailure):
            pass
        if self.pending:
            log.warning("mirror %s: stopping with %d messages from %s unacknowledged: they "
                        "will be copied again after a restart", self.config.group,
                        self.unacknowledged, self.source.name)

    def close(self) -> None:
        """Publish the counts, leave the group, committing what was
        acknowledged (idempotent; a second caller waits for the first)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            started = time.monotonic()
            try:
                self._publish_counts(force=True)
            except Exception as exc:   # noqa: BLE001 - not committed: copied again after a restart
                log.warning("publishing the mirror's counts of %s failed: %s",
                            self.source.name, exc)
            try:
                self.consumer.close()          # commits what was acknowledged
            except Exception as exc:   # noqa: BLE001
                log.warning("closing the consumer of %s failed: %s", self.source.name, exc)
            log.info("mirror %s: pipe from %s closed in %.1f s (%d copied)", self.config.group,
                     self.source.name, time.monotonic() - started, self.copied)


class _Stopped(Exception):
    """Asked to stop while backing off."""
