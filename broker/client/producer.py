"""The producer: batches messages per partition and sends them asynchronously.

Its parts: the codec builds each batch's message set
(``broker.protocol.message``, + compression); ``record_accumulator.py``
holds the open batch of each partition and the queue of ready ones (the
rule for when a batch is ready, and the locking, are stated there);
``partitioner.py`` picks the partition of a message sent without one;
``partition_counts.py`` learns each topic's partition count from the broker.
This module holds the configuration, the API and the sender thread.

Partitioning, when ``send()`` names no partition: a message with a key goes
to ``crc32(key) % partitions`` (the same partition from every producer;
the count is asked of the broker, blocking the first send of a topic);
one without a key follows ``partitioner``: "sticky" (default: one
partition until its batch leaves the accumulator, then the next,
round-robin), "random", or "any" (``api.ANY_PARTITION``: the broker picks,
round-robin per request; no metadata needed). While a topic's count is not
known yet — its first messages, a topic the broker does not know (it
auto-creates it), a broker that does not answer metadata — key-less
messages go to "any partition" too.

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
a later one (Kafka without idempotence behaves the same). A batch refused
with UNKNOWN_TOPIC_OR_PARTITION fails (as any error that is not retriable)
and makes the producer ask the topic's partition count again; a lost
connection makes it ask every topic's.

A replicated partition's batch refused with NOT_LEADER_FOR_PARTITION (the
broker does not lead it, or no longer) is handled as a lost connection:
every batch in flight goes back to the head of the queue, in order, and the
producer connects again after the back-off, to the address its ``leader``
callable names then (a ClusterProducer passes the partition's leader from
ZooKeeper), or to the same address (a load balancer, which may pick
another broker).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.compression import Codec
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import compress_message_set, encode_message_set, encode_values
from broker.security.tls import TlsClientSettings, client_context_of

from .authentication import SaslClientSettings, sasl_login_of
from .backoff import Backoff
from .connection import BrokerConnection, BrokerConnectionError, parse_address
from .partition_counts import PartitionCounts
from .partitioner import StickyPartitioner, key_partition
from .record_accumulator import Batch, RecordAccumulator, is_single

log = logging.getLogger(__name__)

RETRIABLE = {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_SHUTTING_DOWN,
             ErrorCode.STORAGE_ERROR, ErrorCode.NOT_ENOUGH_REPLICAS,
             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
PARTITIONERS = ("sticky", "random", "any")
_MAX_WRITE = 4 << 20           # bytes of produce frames per socket write
_SINGLES_PER_WRITE = 8192      # ~2 MB of 200-byte messages per write on the batch-1 path


@dataclass(frozen=True)
class ProducerConfig(TlsClientSettings, SaslClientSettings):
    bootstrap: str = "127.0.0.1:9092"
    """Broker (or load balancer) address host:port."""
    client_id: str = "samsa-producer"
    acks: str = "none"
    """"none" (fire and forget, the paper's default: fastest, errors only logged),
    "written" (answered once in the broker's log file), "flushed" (once fsync'ed
    and visible to consumers: nothing acknowledged is lost if the broker dies),
    "all" (once every in-sync replica has the messages: the partition's high
    watermark passed them)."""
    batch_size: int = 200
    """Messages per batch (per produce request). 1 sends each message alone."""
    batch_bytes: int = 512 * 1024
    """A batch is ready once its values reach this many bytes."""
    linger_ms: int = 5
    """How long a batch may wait to fill up; 0 sends as soon as the sender is free."""
    compression: str = "none"
    """"none", "gzip", "lz4" or "zstd": each batch becomes one compressed wrapper."""
    partitioner: str = "sticky"
    """For messages sent with neither key nor partition: "sticky" (one
    partition until its batch leaves the accumulator, then the next one,
    round-robin), "random" (a random partition per message), or "any" (the
    broker picks, round-robin per request: for brokers behind a load
    balancer that disagree on partition counts)."""
    metadata_max_age_ms: int = 300_000
    """How often each topic's partition count is asked again (a topic whose
    partitions grew is used in full after at most this long)."""
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
    broker_wait_ms: int = 10_000
    """A cluster producer (found through ZooKeeper) whose send finds no broker
    registered waits this long for one (a cluster still starting, a broker
    restarting), then fails saying so; as Kafka's max.block.ms for metadata.
    0: fail at once."""
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
        if self.partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, "
                             f"not {self.partitioner!r}")
        for name in ("batch_size", "batch_bytes", "max_in_flight", "buffer_messages",
                     "metadata_max_age_ms"):
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
            raise ValueError(f"acks must be none, written, flushed or all, not {self.acks!r}"
                             ) from None


SendFuture = Batch   # what send() returns: the batch is its own future


class Producer:
    """Thread-safe: any number of threads may call ``send``."""

    def __init__(self, config: ProducerConfig | None = None,
                 leader: Callable[[], str | None] | None = None, **overrides) -> None:
        """``leader``, if given, names the address to connect to at each
        (re)connection (None: not known now: wait and retry)."""
        if config is None:
            config = ProducerConfig(**overrides)
        elif overrides:
            raise TypeError("pass either a ProducerConfig or keyword settings")
        self.config = config
        self._acks = config.acks_mode
        self._codec = Codec.from_name(config.compression)
        host, port = parse_address(config.bootstrap)
        tls = client_context_of(config)
        sasl = sasl_login_of(config)
        self.conn = BrokerConnection(host, port, config.client_id,
                                     request_timeout=config.request_timeout_ms / 1000, tls=tls,
                                     sasl=sasl)
        self._leader = leader
        self._encoder = api.ProduceFrameEncoder(config.client_id, self._acks,
                                                config.request_timeout_ms)
        self._partition_counts = PartitionCounts(
            config.bootstrap, config.client_id, config.request_timeout_ms / 1000,
            config.metadata_max_age_ms, config.retry_backoff_ms, config.retry_backoff_max_ms,
            tls=tls, sasl=sasl)
        self._sticky = StickyPartitioner() if config.partitioner == "sticky" else None
        # batch_size 1, acks=none, no linger, no compression: gather the
        # messages per partition (Batch.singles); each still its own request
        gather_singles = (config.batch_size == 1 and self._acks == Acks.NONE
                          and config.linger_ms == 0 and not self._codec)
        self.accumulator = RecordAccumulator(config.batch_size, config.batch_bytes,
                                             config.linger_ms, config.buffer_messages,
                                             gather_singles)
        self._append = self.accumulator.append      # send()'s hot path: one lookup less
        # the sender completes batches under the accumulator's lock
        self._cond = self.accumulator.cond
        self._inflight: deque[tuple[int, Batch]] = deque()
        self._closed = False
        self.failed_batches = 0
        self.dropped_messages = 0       # given up on: their futures failed, logged as ERROR
        self._backoff = Backoff(config.retry_backoff_ms, config.retry_backoff_max_ms)
        # unanswered requests allowed per partition; None with acks=none (nothing waits)
        self._per_partition = (config.in_flight_per_partition if self._acks != Acks.NONE
                               else None)
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
        """Queue one message; returns the future of the batch it joins.
        Without ``partition`` the producer picks one (module docstring)."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        if partition is not None:
            return self._append(topic, partition, value, key, timestamp)
        if key is not None:
            return self._append(topic, self._key_partition(topic, key), value, key, timestamp)
        if self._sticky is not None:
            # the hot path: the topic's sticky batch still takes messages
            current = self._sticky.current.get(topic)
            if current is not None and current[1] is not None and current[1].accepting:
                return self._append(topic, current[0], value, None, timestamp)
        partition = self._keyless_partition(topic)
        batch = self._append(topic, partition, value, None, timestamp)
        if self._sticky is not None and partition >= 0:
            self._sticky.joined(topic, partition, batch)
        return batch

    def send_many(self, topic: str, values: list[bytes], key: bytes | None = None,
                  partition: int | None = None, timestamp: int | None = None) -> Batch:
        """Queue several messages for one partition in one call (one lock
        and one timestamp for all; they share the key, hence the partition;
        without key nor partition, the partition ``send()`` would pick for
        the first). This is the paper's producer API: the application hands
        over a set of messages. They still travel in batches of
        ``batch_size``. Returns the batch holding the last of them."""
        if not values:
            raise ValueError("no values to send")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        chosen = partition is None and key is None
        if partition is None:
            partition = (self._key_partition(topic, key) if key is not None
                         else self._keyless_partition(topic))
        last = self.accumulator.append_many(topic, partition, values, timestamp,
                                            None if key is None else [key] * len(values),
                                            yield_if_ready=True)[-1]
        if chosen and self._sticky is not None and partition >= 0:
            self._sticky.joined(topic, partition, last)
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
        return self.accumulator.append_many(topic, partition, values, timestamps, keys)

    def send_message_set(self, topic: str, partition: int, message_set: bytes, count: int,
                         max_timestamp: int) -> Batch:
        """Queue messages already encoded — whole, valid messages, as a fetch
        returns them: a mirror forwards them as they are, never building an
        object per message. One request carries them (with compression on,
        wrapped like any batch). ``count`` messages, the newest stamped
        ``max_timestamp``. After what was queued for the partition before."""
        if not message_set or count < 1:
            raise ValueError("no messages to send")
        return self.accumulator.append_encoded(topic, partition, message_set, count,
                                               max_timestamp)

    def partition_count(self, topic: str) -> int | None:
        """The topic's partition count as this producer knows it, asked of
        the broker if not known yet; None if the broker does not know the
        topic."""
        return self._partition_counts.count_now(topic)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until it is done (acknowledged,
        or written to the socket with acks=none, or failed); TimeoutError
        if messages are still unsent after ``timeout`` seconds."""
        self.accumulator.wait_until_empty(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Flush, then stop the sender and close the connection. Batches
        still not done after ``timeout`` fail ("the producer closed before
        these messages were acknowledged"), so every future completes; then
        the flush's TimeoutError is raised."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self.accumulator.begin_close()
            self._sender.join(timeout=10)
            self.conn.close()          # wakes a sender still blocked on the socket
            self._sender.join(timeout=1)
            self._fail_leftovers()
            self._partition_counts.close()
            self._closed = True

    def _fail_leftovers(self) -> None:
        with self._cond:
            leftovers = [b for _cid, b in self._inflight] + self.accumulator.take_all()
            self._inflight.clear()
            error = SamsaError(ErrorCode.UNKNOWN, "the producer closed before these messages "
                                                  "were acknowledged")
            for b in leftovers:
                if not b.done():
                    self._fail(b, error)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ partition choice

    def _key_partition(self, topic: str, key: bytes) -> int:
        """crc32(key) % partitions (the same partition from every producer);
        the count is asked of the broker, here, if not known yet."""
        count = self._partition_counts.count_now(topic)
        if count is None:
            raise SamsaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {topic!r} does not exist: create it before sending "
                             f"keyed messages (their partition depends on the count)")
        return key_partition(key, count)

    def _keyless_partition(self, topic: str) -> int:
        """As ``partitioner`` says; ANY_PARTITION while the count is not known."""
        if self.config.partitioner == "any":
            return api.ANY_PARTITION
        count = self._partition_counts.count(topic)
        if count is None:
            return api.ANY_PARTITION
        if self._sticky is not None:
            return self._sticky.partition(topic, count)
        return random.randrange(count)

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
        except SamsaError as exc:
            # the broker refused the connection itself (authentication: a
            # wrong password does not get better by retrying): every batch
            # fails with the broker's error, and the producer takes no more
            log.error("producer stops: %s", exc)
            self._fail_everything(exc)
        except Exception:   # never die silently: fail what is left
            log.exception("producer sender thread crashed")
            self._fail_everything(SamsaError(ErrorCode.UNKNOWN,
                                             "producer sender thread crashed"))

    def _fail_everything(self, error: SamsaError) -> None:
        with self._cond:
            for _cid, b in self._inflight:
                self._fail(b, error)
            for b in self.accumulator.take_all():
                self._fail(b, error)
            self.accumulator.closing = True
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
        room = (self.config.max_in_flight - len(self._inflight)
                if self._acks != Acks.NONE else 1 << 30)
        return self.accumulator.drain(room, bool(self._inflight), self._inflight_tps,
                                      self._per_partition)

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
                            or is_single(b) != is_single(last):
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
            cid = conn.take_correlation_ids()
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
        if is_single(run[0]):
            sent = self._send_singles(run, requeue)
            if sent is not None:
                return sent
        return self._send_batches(run, requeue)

    def _written_unacknowledged(self, batches: list[Batch], messages: int) -> None:
        """acks=none: the batches are done once written to the socket."""
        # one short critical section for all of them: send() contends for this lock
        with self._cond:
            self.sent_messages += messages
            self.accumulator.completed(messages)
        for b in batches:
            b.finish((b.partition, -1))
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
            if not is_single(b) or b.partition != partition or b.topic != topic:
                return None
            values += b.values
            stamps += b.timestamps
        for b in batches:
            b.attempts += 1
        conn = self.conn
        for i in range(0, len(values), _SINGLES_PER_WRITE):
            chunk = values[i:i + _SINGLES_PER_WRITE]
            cid = conn.take_correlation_ids(len(chunk))
            data = self._encoder.single_frames(cid, topic, partition, chunk,
                                               stamps[i:i + _SINGLES_PER_WRITE])
            if not self._write([data], [], requeue):
                return False
        self._written_unacknowledged(batches, len(values))
        return True

    def _write(self, frames, expected, batches) -> bool:
        try:
            if self._leader is not None and not self.conn.connected:
                address = self._leader()
                if address is None:
                    raise BrokerConnectionError("the partition has no live leader now")
                self.conn.host, self.conn.port = parse_address(address)
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
        if isinstance(response, api.ErrorResponse):
            error = SamsaError(response.error, response.message)
        else:
            result = response.results[0]
            error = SamsaError(result.error, result.message) if result.error else None
        if error is not None:
            if error.code == ErrorCode.NOT_LEADER_FOR_PARTITION and \
                    batch.attempts <= self.config.retries:
                # the oldest in flight goes back first, then the others
                self._inflight.appendleft((expected_cid, batch))
                self._connection_lost(error, [])
                return
            if error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._partition_counts.refresh(batch.topic)
            with self._cond:
                self._retry_or_fail(batch, error)
            return
        with self._cond:
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
        self._partition_counts.refresh()    # the next connection may reach another broker
        again = [b for _cid, b in self._inflight] + [b for b in unsent if not b.done()]
        self._inflight.clear()
        self._inflight_tps.clear()
        with self._cond:
            retry = []
            for b in again:
                if b.attempts > self.config.retries or self.accumulator.closing:
                    self._fail(b, SamsaError(ErrorCode.UNKNOWN, f"giving up after "
                                             f"{b.attempts} attempts: {exc}"))
                else:
                    retry.append(b)
            self.accumulator.requeue_front(retry)
        backoff = self._backoff.next_delay_ms()
        log.warning("producer lost its connection (%s); retrying %d batches in %d ms", exc,
                    len(retry), backoff)
        if not self.accumulator.closing:
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
            self.accumulator.requeue_front([batch])
        else:
            self._fail(batch, error)

    # _done and _fail: called with self._cond held
    def _done(self, batch: Batch, value) -> None:
        self._backoff.reset()
        n = batch.size()
        self.sent_messages += n
        batch.finish(value)
        self.accumulator.completed(n)

    def _fail(self, batch: Batch, error: BaseException) -> None:
        n = batch.size()
        self.failed_batches += 1
        self.dropped_messages += n
        log.error("DROPPED a batch of %d messages for %s/%d after %d attempts: %s (their "
                  "send() futures fail with this error; %d messages dropped so far)",
                  n, batch.topic, batch.partition, batch.attempts, error,
                  self.dropped_messages)
        batch.finish(None, error)
        self.accumulator.completed(n)
