"""The producer: batches messages per partition and sends them asynchronously.

Three layers (as kafka-python / aiokafka do):
  * batch builder — ``encode_values`` / ``encode_message_set`` (+ compression)
    turn a batch's messages into one message set;
  * ``Batch`` — the messages bound for one partition and a ``SendFuture``
    that completes when the batch is acknowledged (or sent, with acks=none);
  * accumulator — an open batch per partition. A batch is *ready* when it
    holds ``batch_size`` messages or ``batch_bytes`` bytes, when it is
    ``linger_ms`` old, or when ``flush()``/``close()`` asks.

One sender thread takes ready batches, encodes one produce request per batch,
writes them pipelined (many requests per socket write), and, unless acks is
"none", reads the responses in order, keeping at most ``max_in_flight``
requests unanswered, and at most ``max_in_flight_per_partition`` of them for
one partition. A lost connection or a retriable error puts the batch back at
the head of the queue after a back-off (up to ``retries`` times): delivery
is at-least-once. Order within a partition holds under retries too as long
as ``max_in_flight_per_partition`` is 1 (the default while retries are on):
no later batch of a partition is sent while an earlier one may still be
retried. With more in flight per partition, a retried batch can land after
a later one (Kafka without idempotence behaves the same).

Partitioning: a message with a key goes to ``crc32(key) % partitions`` (the
same partition from every producer); without a key, to "any partition"
(the broker picks one round-robin; no metadata needed, works behind a load
balancer), or to a random partition with ``partitioner="random"``.
"""
from __future__ import annotations

import logging
import random
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Callable

from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.compression import Codec
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import compress_message_set, encode_message_set, encode_values

from .admin import AdminClient
from .backoff import Backoff
from .connection import BrokerConnection, BrokerConnectionError, parse_address

log = logging.getLogger(__name__)

RETRIABLE = {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_SHUTTING_DOWN,
             ErrorCode.STORAGE_ERROR}
_MAX_WRITE = 4 << 20
_SINGLES_PER_WRITE = 8192
_SINGLES_PER_GROUP = 1024      # messages gathered in one Batch.singles before it is ready
_PICK_SCAN = 1024              # ready batches looked at per pick (see _pick_ready)      # ~2 MB of 200-byte messages per write on the batch-1 path


@dataclass(frozen=True)
class ProducerConfig:
    bootstrap: str = "127.0.0.1:9092"
    """Broker (or load balancer) address host:port."""
    client_id: str = "samsa-producer"
    acks: str = "none"
    """"none" (fire and forget, the paper's default: fastest, errors only logged),
    "written" (answered once in the broker's log file), "flushed" (once fsync'ed
    and visible to consumers: nothing acknowledged is lost if the broker dies)."""
    batch_size: int = 200
    """Messages per batch (per produce request). 1 sends each message alone."""
    batch_bytes: int = 512 * 1024
    """A batch is sent once its values reach this many bytes."""
    linger_ms: int = 5
    """How long a batch may wait to fill up; 0 sends as soon as the sender is free."""
    compression: str = "none"
    """"none", "gzip", "lz4" or "zstd": each batch becomes one compressed wrapper."""
    partitioner: str = "any"
    """For messages without a key: "any" (the broker picks) or "random"."""
    request_timeout_ms: int = 30_000
    retries: int = 10
    """Resends of a batch after a lost connection or a retriable error."""
    retry_backoff_ms: int = 100
    """Wait before resending after a lost connection or a retriable error
    response (timeout, shutting down, storage error); doubles with each
    failure in a row up to ``retry_backoff_max_ms``, with ±20 % jitter (10
    retries ride out ~13 s without a broker, e.g. a restart)."""
    retry_backoff_max_ms: int = 2_000
    max_in_flight: int = 5
    """Unanswered requests allowed on the connection (acks written/flushed)."""
    max_in_flight_per_partition: int | None = None
    """Unanswered requests allowed for one partition. None (default): 1 while
    ``retries`` > 0, so a retried batch can never land after a later one
    (order within a partition holds under failures); ``max_in_flight``
    otherwise. Raising it pipelines more per partition (more throughput to a
    single partition with acks written/flushed) at the price of that order
    when a batch is retried. Measured (bench/RESULTS.md, issue 9): 200-byte
    messages, acks=flushed, one partition, batches of 200: about half the
    throughput of 5 in flight; acks=none is not affected (nothing waits)."""
    buffer_messages: int = 200_000
    """send() blocks while this many messages wait to be sent (back-pressure)."""
    reconnect_interval_ms: int = 600_000
    """Close and reopen the connection this often, between requests (as Kafka
    0.7's reconnect.time.interval.ms): producers behind a load balancer spread
    over the brokers again after one failed and came back. 0: never."""

    def __post_init__(self) -> None:
        try:
            self.acks_mode
            Codec.from_name(self.compression)
        except (KeyError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        if self.partitioner not in ("any", "random"):
            raise ValueError("partitioner must be 'any' or 'random'")
        for name in ("batch_size", "batch_bytes", "max_in_flight", "buffer_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.buffer_messages < self.batch_size:
            raise ValueError("buffer_messages must be >= batch_size")
        if self.linger_ms < 0 or self.retries < 0 or self.reconnect_interval_ms < 0:
            raise ValueError("linger_ms, retries and reconnect_interval_ms must be >= 0")
        if self.max_in_flight_per_partition is not None and self.max_in_flight_per_partition < 1:
            raise ValueError("max_in_flight_per_partition must be >= 1")

    @property
    def in_flight_per_partition(self) -> int:
        if self.max_in_flight_per_partition is not None:
            return self.max_in_flight_per_partition
        return 1 if self.retries > 0 else self.max_in_flight

    @property
    def acks_mode(self) -> Acks:
        try:
            return Acks[self.acks.upper()]
        except KeyError:
            raise ValueError(f"acks must be none, written or flushed, not {self.acks!r}") from None


class Batch:
    """The messages bound for one partition, and the future of their send:
    ``send()`` returns the batch the message joined. It completes when the
    batch is acknowledged (with acks=none: written to the socket);
    ``result()`` returns (partition, base offset) or raises. With
    batch_size 1 and acks=none the messages of a partition are gathered in
    one such object (``singles``), each still sent in its own request: the
    future is shared, and done when all of them are written."""

    __slots__ = ("topic", "partition", "values", "timestamps", "keys", "nbytes", "created",
                 "attempts", "retry_at", "singles", "encoded", "encoded_count",
                 "_done", "_value", "_error", "_event")

    def __init__(self, topic: str, partition: int, created: float,
                 singles: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        # batch_size 1 with acks=none: key-less messages that travel each in
        # its own request, gathered here only to spare an object per message
        # (they are done together: written to the socket)
        self.singles = singles
        # send_message_set(): messages already encoded (a mirror's copy),
        # sent as these bytes; then ``values`` stays empty
        self.encoded: bytes | None = None
        self.encoded_count = 0
        self.values: list[bytes] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] | None = None     # made when a keyed message joins
        self.nbytes = self.attempts = 0
        self.retry_at = 0.0             # monotonic time before which a retry waits
        self.created = created
        self._done = False
        self._error: BaseException | None = None
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._done

    def size(self) -> int:
        """How many messages the batch holds."""
        return self.encoded_count if self.encoded is not None else len(self.values)

    def _finish(self, value=None, error: BaseException | None = None) -> None:
        self._value, self._error, self._done = value, error, True
        if self._event is not None:
            self._event.set()

    def result(self, timeout: float | None = None):
        if not self._done:
            if self._event is None:
                self._event = threading.Event()
                if self._done:
                    self._event.set()
            if not self._event.wait(timeout):
                raise TimeoutError("the batch was not acknowledged in time")
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self) -> BaseException | None:
        return self._error


def _single(b: Batch) -> bool:
    """Can the batch go as single-message requests (gathered, or one
    key-less message)?"""
    return b.singles or (len(b.values) == 1 and b.keys is None)


SendFuture = Batch   # what send() returns: the batch is its own future


class Producer:
    """Thread-safe: any number of threads may call ``send``."""

    def __init__(self, config: ProducerConfig | None = None, **overrides) -> None:
        if config is None:
            config = ProducerConfig(**overrides)
        elif overrides:
            raise TypeError("pass either a ProducerConfig or keyword settings")
        self.config = config
        self._acks = config.acks_mode
        self._codec = Codec.from_name(config.compression)
        host, port = parse_address(config.bootstrap)
        self.conn = BrokerConnection(host, port, config.client_id,
                                     request_timeout=config.request_timeout_ms / 1000)
        self._encoder = api.ProduceFrameEncoder(config.client_id, self._acks,
                                                config.request_timeout_ms)
        self._admin: AdminClient | None = None
        self._partition_counts: dict[str, int] = {}
        # send() takes the plain lock (cheap); the sender and flush() wait on
        # conditions over the same lock, and are notified only when waiting.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._sender_idle = False
        self._waiters = 0           # threads in flush() or blocked by back-pressure
        self._open: dict[tuple[str, int], Batch] = {}
        self._ready: deque[Batch] = deque()
        self._inflight: deque[tuple[int, Batch]] = deque()
        self._queued = 0            # messages accepted by send() and not yet done
        self._flushing = 0
        self._closing = False
        self._closed = False
        self.failed_batches = 0
        self.dropped_messages = 0       # given up on: their futures failed, logged as ERROR
        self._backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._per_partition = config.in_flight_per_partition
        # batch_size 1, acks=none, no linger, no compression: gather the
        # messages per partition (Batch.singles); each still its own request
        self._gather_singles = (config.batch_size == 1 and self._acks == Acks.NONE
                                and config.linger_ms == 0 and not self._codec)
        self._inflight_tps: dict[tuple[str, int], int] = {}   # acks != none: unanswered
        self.sent_messages = 0
        # Called on the sender thread with every list of batches delivered
        # (acknowledged as ``acks`` asks; with acks=none, written to the
        # socket), after their futures completed; what audits count. Keep it
        # quick, and never call the producer from it.
        self.delivery_listener: Callable[[list[Batch]], None] | None = None
        self._sender = threading.Thread(target=self._run, name="samsa-producer-sender",
                                        daemon=True)
        self._sender.start()

    # ------------------------------------------------------------ the API

    def send(self, topic: str, value: bytes, key: bytes | None = None,
             partition: int | None = None, timestamp: int | None = None) -> SendFuture:
        """Queue one message; returns the future of the batch it joins."""
        if partition is None:
            partition = self._choose_partition(topic, key)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        cfg = self.config
        with self._lock:
            if self._closing:
                raise RuntimeError("the producer is closed")
            if self._queued >= cfg.buffer_messages:
                self._wait_for_room()
            if cfg.batch_size == 1:
                if self._gather_singles and key is None:
                    # each message its own request, acks=none: gathered per
                    # partition for the sender (see Batch.singles)
                    tp = (topic, partition)
                    group = self._open.get(tp)
                    if group is None:
                        group = self._open[tp] = Batch(topic, partition, 0.0, True)
                        if self._sender_idle:
                            self._cond.notify_all()
                    group.values.append(value)
                    group.timestamps.append(timestamp)
                    self._queued += 1
                    if len(group.values) >= _SINGLES_PER_GROUP:
                        self._ready_up(tp, group)
                    return group
                if self._gather_singles:
                    # a keyed message: its own batch, behind the gathered ones
                    # of its partition (order within a partition)
                    group = self._open.get((topic, partition))
                    if group is not None:
                        self._ready_up((topic, partition), group)
                # each message is its own batch: straight to the ready queue
                batch = Batch(topic, partition, 0.0)
                batch.values.append(value)
                batch.timestamps.append(timestamp)
                if key is not None:
                    batch.keys = [key]
                self._queued += 1
                self._ready.append(batch)
                if self._sender_idle:
                    self._cond.notify_all()
                return batch
            tp = (topic, partition)
            batch = self._open.get(tp) or self._new_open_batch(tp)
            batch.values.append(value)
            batch.timestamps.append(timestamp)
            if key is not None or batch.keys is not None:
                if batch.keys is None:
                    batch.keys = [None] * (len(batch.values) - 1)
                batch.keys.append(key)
            batch.nbytes += len(value)
            self._queued += 1
            if len(batch.values) < cfg.batch_size and batch.nbytes < cfg.batch_bytes:
                return batch
            self._ready_up(tp, batch)
            busy = not self._sender_idle
        if busy:
            # A batch is ready and the sender thread is busy: hand it the
            # interpreter now (sleep(0) releases the GIL) instead of after
            # the 5 ms switch interval, with batches piling up meanwhile.
            # Measured: 0.83 -> 0.63 client CPU us per message (RESULTS.md).
            time.sleep(0)
        return batch

    def send_many(self, topic: str, values: list[bytes], key: bytes | None = None,
                  partition: int | None = None, timestamp: int | None = None) -> Batch:
        """Queue several messages for one partition in one call (one lock
        and one timestamp for all; they share the key, hence the partition).
        This is the paper's producer API: the application hands over a set of
        messages. They still travel in batches of ``batch_size``. Returns the
        batch holding the last of them."""
        if not values:
            raise ValueError("no values to send")
        if partition is None:
            partition = self._choose_partition(topic, key)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        with self._lock:
            if self._closing:
                raise RuntimeError("the producer is closed")
            ready = len(self._ready)
            last = self._enqueue((topic, partition), values, timestamp,
                                 None if key is None else [key] * len(values))[-1]
            busy = len(self._ready) > ready and not self._sender_idle
        if busy:
            time.sleep(0)       # as in send(): the sender has work, let it run now
        return last

    def send_records(self, topic: str, partition: int, values: list[bytes],
                     timestamps: list[int], keys: list[bytes | None] | None = None
                     ) -> list[Batch]:
        """Queue messages for one partition, each with its own timestamp
        (and key, when ``keys`` is given): a copy of existing messages, as
        the mirror makes. Returns every batch they joined, oldest first."""
        n = len(values)
        if not n:
            return []
        if len(timestamps) != n or (keys is not None and len(keys) != n):
            raise ValueError("values, timestamps and keys differ in length")
        with self._lock:
            if self._closing:
                raise RuntimeError("the producer is closed")
            return self._enqueue((topic, partition), values, timestamps, keys)

    def send_message_set(self, topic: str, partition: int, message_set: bytes, count: int,
                         max_timestamp: int) -> Batch:
        """Queue messages already encoded — whole, valid messages, as a fetch
        returns them: a mirror forwards them as they are, never building an
        object per message. One request carries them (with compression on,
        wrapped like any batch). ``count`` messages, the newest stamped
        ``max_timestamp``. After what was queued for the partition before."""
        if not message_set or count < 1:
            raise ValueError("no messages to send")
        with self._lock:
            if self._closing:
                raise RuntimeError("the producer is closed")
            if self._queued >= self.config.buffer_messages:
                self._wait_for_room()
            tp = (topic, partition)
            open_batch = self._open.get(tp)
            if open_batch is not None:
                self._ready_up(tp, open_batch)       # order within the partition
            batch = Batch(topic, partition, time.monotonic())
            batch.encoded, batch.encoded_count = message_set, count
            batch.timestamps.append(max_timestamp)
            batch.nbytes = len(message_set)
            self._queued += count
            self._ready.append(batch)
            if self._sender_idle:
                self._cond.notify_all()
            return batch

    # called with self._lock held
    def _enqueue(self, tp: tuple[str, int], values: list[bytes], timestamps: int | list[int],
                 keys: list[bytes | None] | None) -> list[Batch]:
        """Append messages to the partition's open batches, readying each
        that fills; ``timestamps`` is one for all or one per value. Returns
        the batches touched, oldest first."""
        cfg = self.config
        touched: list[Batch] = []
        shared_stamp = isinstance(timestamps, int)
        i, n = 0, len(values)
        while i < n:
            if self._queued >= cfg.buffer_messages:
                self._wait_for_room()
            batch = self._open.get(tp) or self._new_open_batch(tp)
            j = i + cfg.batch_size - len(batch.values)
            chunk = values[i:j]
            if keys is not None or batch.keys is not None:
                if batch.keys is None:
                    batch.keys = [None] * len(batch.values)
                batch.keys.extend(keys[i:j] if keys is not None else [None] * len(chunk))
            batch.values.extend(chunk)
            batch.timestamps.extend([timestamps] * len(chunk) if shared_stamp
                                    else timestamps[i:j])
            batch.nbytes += sum(map(len, chunk))
            self._queued += len(chunk)
            i += len(chunk)
            touched.append(batch)
            if len(batch.values) >= cfg.batch_size or batch.nbytes >= cfg.batch_bytes:
                self._ready_up(tp, batch)
        return touched

    # called with self._lock held
    def _new_open_batch(self, tp: tuple[str, int]) -> Batch:
        batch = self._open[tp] = Batch(tp[0], tp[1], time.monotonic())
        if self._sender_idle:
            self._cond.notify_all()     # it may sleep without a linger deadline
        return batch

    def _ready_up(self, tp: tuple[str, int], batch: Batch) -> None:
        """A full batch leaves the accumulator for the sender."""
        del self._open[tp]
        self._ready.append(batch)
        if self._sender_idle:
            self._cond.notify_all()

    def _wait_for_room(self) -> None:
        """Back-pressure: block send() (lock held) until the buffer drains."""
        self._waiters += 1
        try:
            while self._queued >= self.config.buffer_messages and not self._closing:
                self._cond.wait()
        finally:
            self._waiters -= 1
        if self._closing:
            raise RuntimeError("the producer is closed")

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until it is done (acknowledged,
        or written to the socket with acks=none)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._waiters += 1
            self._cond.notify_all()
            try:
                while self._queued:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"{self._queued} messages still unsent")
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
                self._waiters -= 1

    def close(self, timeout: float | None = 60.0) -> None:
        """Flush, then stop the sender and close the connection. Batches
        still not done after ``timeout`` fail ("the producer closed before
        they were acknowledged"): every future completes."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._sender.join(timeout=10)
            self.conn.close()          # wakes a sender still blocked on the socket
            self._sender.join(timeout=1)
            self._fail_leftovers()
            if self._admin is not None:
                self._admin.close()
            self._closed = True

    def _fail_leftovers(self) -> None:
        with self._cond:
            leftovers = [b for _cid, b in self._inflight] + list(self._ready) + \
                list(self._open.values())
            self._inflight.clear()
            self._ready.clear()
            self._open.clear()
            error = SamsaError(ErrorCode.UNKNOWN, "the producer closed before these messages "
                                                  "were acknowledged")
            for b in leftovers:
                if not b.done():
                    self._fail(b, error)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        """crc32(key) % partitions for a keyed message (the same partition
        from every producer); else "any" (the broker picks) or random."""
        if key is not None:
            return zlib.crc32(key) % self._partitions_of(topic)
        if self.config.partitioner == "random":
            return random.randrange(self._partitions_of(topic))
        return api.ANY_PARTITION

    def _partitions_of(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            with self._cond:    # one metadata client, used under the lock
                if self._admin is None:
                    self._admin = AdminClient(self.config.bootstrap, self.config.client_id)
                count = self._admin.partition_count(topic)
                if count is None:
                    raise SamsaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"topic {topic!r} does not exist: create it before sending "
                                     f"keyed messages (their partition depends on the count)")
                self._partition_counts[topic] = count
        return count

    # ------------------------------------------------------------ the sender thread

    def _run(self) -> None:
        try:
            while True:
                if self._reconnect_due():
                    self._reconnect()
                batches = self._take_ready()
                if batches is None:
                    return
                if batches:
                    self._send(batches)
                if self._inflight and (not batches
                                       or len(self._inflight) >= self.config.max_in_flight):
                    self._read_response()
        except Exception:   # never die silently: fail what is left
            log.exception("producer sender thread crashed")
            with self._cond:
                error = SamsaError(ErrorCode.UNKNOWN, "producer sender thread crashed")
                for _cid, b in self._inflight:
                    self._fail(b, error)
                while self._ready:
                    self._fail(self._ready.popleft(), error)
                for b in list(self._open.values()):
                    self._fail(b, error)
                self._open.clear()
                self._closing = True
                self._cond.notify_all()

    def _reconnect_due(self) -> bool:
        interval = self.config.reconnect_interval_ms
        at = self.conn.connected_at
        return bool(interval) and at is not None and \
            time.monotonic() - at >= interval / 1000

    def _reconnect(self) -> None:
        """Take the answers still due, then close: the next request connects
        again (through the load balancer, maybe to another broker)."""
        while self._inflight and self.conn.connected:
            self._read_response()
        log.debug("producer reconnecting to %s after %d ms", self.conn.address,
                  self.config.reconnect_interval_ms)
        self.conn.close()

    def _take_ready(self) -> list[Batch] | None:
        """Ready batches to send now (possibly none if responses are due);
        None when closing with nothing left."""
        linger = self.config.linger_ms / 1000
        room = (self.config.max_in_flight - len(self._inflight)
                if self._acks != Acks.NONE else 1 << 30)
        with self._cond:
            while True:
                now = time.monotonic()
                if self._open and (self._flushing or self._closing or linger == 0
                                   or any(now - b.created >= linger for b in self._open.values())):
                    for tp, b in list(self._open.items()):
                        if self._flushing or self._closing or now - b.created >= linger:
                            del self._open[tp]
                            self._ready.append(b)
                wake_at = None
                if self._ready and room > 0:
                    out, wake_at = self._pick_ready(room, now)
                    if out:
                        return out
                if self._inflight:
                    return []
                if self._closing and not self._open and not self._ready:
                    return None
                timeout = None if wake_at is None else max(0.0, wake_at - now)
                if self._open:
                    oldest = min(b.created for b in self._open.values())
                    due = max(0.0, oldest + linger - now)
                    timeout = due if timeout is None else min(timeout, due)
                self._sender_idle = True
                self._cond.wait(timeout)
                self._sender_idle = False

    def _pick_ready(self, room: int, now: float) -> tuple[list[Batch], float | None]:
        """Up to ``room`` ready batches that may go now, in queue order: not
        waiting out a retry back-off, and not for a partition that already
        has ``max_in_flight_per_partition`` unanswered (nor behind a batch of
        its partition that is held back: order within a partition). Also the
        earliest time a held-back retry becomes due. Called with the lock."""
        acks = self._acks != Acks.NONE
        if not acks and not self._ready[0].retry_at:
            out = []                  # the common case: nothing to hold back
            while self._ready and len(out) < room:
                out.append(self._ready.popleft())
            return out, None
        out: list[Batch] = []
        keep: list[Batch] = []
        held: set[tuple[str, int]] = set()
        wake_at = None
        counts = self._inflight_tps
        limit = self._per_partition
        taken: dict[tuple[str, int], int] = {}
        ready = self._ready
        # look at the head of the queue only: a bounded cost per call even
        # when thousands of batches of one held-back partition wait
        for _ in range(min(len(ready), _PICK_SCAN)):
            b = ready.popleft()
            tp = (b.topic, b.partition)
            if len(out) >= room or tp in held:
                keep.append(b)
                continue
            if b.retry_at > now:
                held.add(tp)
                keep.append(b)
                wake_at = b.retry_at if wake_at is None else min(wake_at, b.retry_at)
                continue
            if acks and counts.get(tp, 0) + taken.get(tp, 0) >= limit:
                held.add(tp)
                keep.append(b)
                continue
            taken[tp] = taken.get(tp, 0) + 1
            out.append(b)
        ready.extendleft(reversed(keep))
        return out, wake_at

    def _send(self, batches: list[Batch]) -> None:
        if self._acks == Acks.NONE and not self._codec:
            if self._send_singles(batches) is not None:
                return
            if any(b.singles for b in batches):
                # several partitions, or keyed messages among gathered ones:
                # in order, each run of one partition and one kind on its own
                runs: list[list[Batch]] = []
                for b in batches:
                    last = runs[-1][0] if runs else None
                    if last is None or b.topic != last.topic or b.partition != last.partition \
                            or _single(b) != _single(last):
                        runs.append([])
                    runs[-1].append(b)
                start = 0                       # runs are consecutive slices of batches
                for run in runs:
                    # a lost connection requeues this run and every later one,
                    # in order: no later run may overtake it
                    if not self._send_run(run, batches[start:]):
                        return
                    start += len(run)
                return
        self._send_batches(batches)

    def _send_batches(self, batches: list[Batch], requeue: list[Batch] | None = None) -> bool:
        """Each batch one message set in one produce request. False if the
        connection was lost (then ``requeue``, default ``batches``, went back
        to the head of the queue with acks=none)."""
        requeue = batches if requeue is None else requeue
        frames: list[bytes] = []
        expected: list[tuple[int, int]] = []
        size = 0
        encode_frame = self._encoder.frame
        conn = self.conn
        for b in batches:
            if b.encoded is not None:
                ms = b.encoded
            elif b.keys is None:
                ts = b.timestamps
                ms = encode_values(b.values, ts[0] if ts[0] == ts[-1] and len(set(ts)) == 1
                                   else ts)
            else:
                ms = encode_message_set(zip(b.keys, b.values, b.timestamps))
            if self._codec:
                ms = compress_message_set(ms, self._codec, max(b.timestamps))
            conn._next_correlation_id = cid = (conn._next_correlation_id + 1) & 0x7FFFFFFF
            frame = encode_frame(cid, b.topic, b.partition, ms)
            frames.append(frame)
            size += len(frame)
            b.attempts += 1
            if self._acks != Acks.NONE:
                expected.append((cid, api.ApiKey.PRODUCE))
                self._inflight.append((cid, b))
                tp = (b.topic, b.partition)
                self._inflight_tps[tp] = self._inflight_tps.get(tp, 0) + 1
            if size >= _MAX_WRITE:
                if not self._write(frames, expected, requeue):
                    return False
                frames, expected, size = [], [], 0
        if frames and not self._write(frames, expected, requeue):
            return False
        if self._acks == Acks.NONE:
            self._written_unacknowledged(batches, sum(b.size() for b in batches))
        return True

    def _send_run(self, run: list[Batch], requeue: list[Batch]) -> bool:
        """acks=none batches of one partition and one kind: as single-message
        requests when they are such, else one request per batch. False if the
        connection was lost (``requeue`` went back to the queue, in order)."""
        if _single(run[0]):
            sent = self._send_singles(run, requeue)
            if sent is not None:
                return sent
        return self._send_batches(run, requeue)

    def _written_unacknowledged(self, batches: list[Batch], messages: int) -> None:
        """acks=none: the batches are done once written to the socket."""
        # one short critical section for all of them: send() contends for this lock
        with self._lock:
            self._queued -= messages
            self.sent_messages += messages
            if self._waiters:
                self._cond.notify_all()
        for b in batches:
            b._finish((b.partition, -1))
        if self.delivery_listener is not None:
            self._tell_listener(batches)

    def _tell_listener(self, batches: list[Batch]) -> None:
        try:
            self.delivery_listener(batches)
        except Exception:     # a listener's bug must not stop the sender
            log.exception("the producer's delivery listener failed")

    def _send_singles(self, batches: list[Batch],
                      requeue: list[Batch] | None = None) -> bool | None:
        """acks=none, batches of one key-less message each for one partition
        (batch_size=1, the paper's batch-1 test): their frames in one encoder
        call per _SINGLES_PER_WRITE instead of two Python encodes each. None
        (nothing sent) for anything else; False if the connection was lost
        (``requeue``, default ``batches``, went back to the queue)."""
        requeue = batches if requeue is None else requeue
        first = batches[0]
        topic, partition = first.topic, first.partition
        values, stamps = [], []
        for b in batches:
            if not _single(b) or b.partition != partition or b.topic != topic:
                return None
            values += b.values
            stamps += b.timestamps
        for b in batches:
            b.attempts += 1
        conn = self.conn
        for i in range(0, len(values), _SINGLES_PER_WRITE):
            chunk = values[i:i + _SINGLES_PER_WRITE]
            cid = (conn._next_correlation_id + 1) & 0x7FFFFFFF
            conn._next_correlation_id = (cid + len(chunk) - 1) & 0x7FFFFFFF
            data = self._encoder.single_frames(cid, topic, partition, chunk,
                                               stamps[i:i + _SINGLES_PER_WRITE])
            if not self._write([data], [], requeue):
                return False
        self._written_unacknowledged(batches, len(values))
        return True

    def _write(self, frames, expected, batches) -> bool:
        try:
            self.conn.send_frames(frames, expected)
            return True
        except BrokerConnectionError as exc:
            self._connection_lost(exc, batches if self._acks == Acks.NONE else [])
            return False

    def _read_response(self) -> None:
        try:
            cid, response = self.conn.receive()
        except BrokerConnectionError as exc:
            self._connection_lost(exc, [])
            return
        expected_cid, batch = self._inflight.popleft()
        self._answered(batch)
        with self._cond:
            if isinstance(response, api.ErrorResponse):
                self._retry_or_fail(batch, SamsaError(response.error, response.message))
                return
            result = response.results[0]
            if result.error:
                self._retry_or_fail(batch, SamsaError(result.error, result.message))
                return
            self._done(batch, (result.partition, result.base_offset))
        if self.delivery_listener is not None:
            self._tell_listener([batch])

    def _answered(self, batch: Batch) -> None:
        tp = (batch.topic, batch.partition)
        left = self._inflight_tps.get(tp, 0) - 1
        if left > 0:
            self._inflight_tps[tp] = left
        else:
            self._inflight_tps.pop(tp, None)

    def _connection_lost(self, exc: Exception, unsent: list[Batch]) -> None:
        """Requeue every batch whose fate is unknown, oldest first."""
        self.conn.close()
        again = [b for _cid, b in self._inflight] + [b for b in unsent if not b.done()]
        self._inflight.clear()
        self._inflight_tps.clear()
        with self._cond:
            retry = []
            for b in again:
                if b.attempts > self.config.retries or self._closing:
                    self._fail(b, SamsaError(ErrorCode.UNKNOWN, f"giving up after "
                                             f"{b.attempts} attempts: {exc}"))
                else:
                    retry.append(b)
            self._ready.extendleft(reversed(retry))
        backoff = self._backoff.next_delay_ms()
        log.warning("producer lost its connection (%s); retrying %d batches in %d ms", exc,
                    len(retry), backoff)
        if not self._closing:
            time.sleep(backoff / 1000)

    def _retry_or_fail(self, batch: Batch, error: SamsaError) -> None:
        """Called with the lock. A retriable error waits a back-off (the broker
        said why it failed: resending at once would fail the same way)."""
        if error.code in RETRIABLE and batch.attempts <= self.config.retries:
            delay = self._backoff.next_delay_ms()
            log.warning("retrying a batch of %d messages for %s/%d in %d ms (attempt %d of "
                        "%d): %s", batch.size(), batch.topic, batch.partition, delay,
                        batch.attempts + 1, self.config.retries + 1, error)
            batch.retry_at = time.monotonic() + delay / 1000
            self._ready.appendleft(batch)
        else:
            self._fail(batch, error)

    # called with self._cond held
    def _done(self, batch: Batch, value) -> None:
        self._backoff.reset()
        n = batch.size()
        self._queued -= n
        self.sent_messages += n
        batch._finish(value)
        if self._waiters:
            self._cond.notify_all()

    def _fail(self, batch: Batch, error: BaseException) -> None:
        n = batch.size()
        self._queued -= n
        self.failed_batches += 1
        self.dropped_messages += n
        log.error("DROPPED a batch of %d messages for %s/%d after %d attempts: %s (their "
                  "send() futures fail with this error; %d messages dropped so far)",
                  n, batch.topic, batch.partition, batch.attempts, error,
                  self.dropped_messages)
        batch._finish(None, error)
        if self._waiters:
            self._cond.notify_all()
