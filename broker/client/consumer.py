"""A simple pull consumer of named partitions (groups come with ZooKeeper).

The consumer, not the broker, keeps its position: one offset per partition.
Each poll sends one Fetch for every assigned partition (long-poll: the broker
holds it until data arrives or ``max_wait_ms`` passes, so an idle consumer
does not spin), decodes the whole messages of each result and advances the
position past them. A fetch may end in a partial message: it is dropped and
fetched again next time. A message larger than ``fetch_max_bytes`` makes the
consumer retry that partition with a doubled size (up to
``max_fetch_bytes_limit``) instead of stalling — unless the length read is
one no message can have (above the broker's ``max_message_bytes``, from
Metadata, or running past the high watermark): then the position is not a
message boundary, and the consumer raises ``InvalidOffsetError``.

Corrupt data (a CRC mismatch in fetched bytes, or a range the broker
quarantined and answers with CORRUPT_MESSAGE) never hides the intact messages
before it: they are delivered first, and the next poll raises
``CorruptDataError`` with the bad offset and where intact data resumes (the
position stays at the bad offset until the application seeks past it). With
``on_corrupt="skip"`` the consumer skips the damage itself, logs a WARNING
and counts it (``corrupt_skipped_bytes``/``corrupt_skips``).
"""
from __future__ import annotations

import logging
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from broker.protocol import api
from broker.protocol.errors import CorruptMessageError, ErrorCode, ProtocolError, SamsaError
from broker.protocol.message import (Message, decode_message_set, scan_valid_prefix,
                                     walk_message_set, whole_messages_length)

from broker.security.tls import TlsClientSettings, client_context_of

from .authentication import SaslClientSettings, sasl_login_of
from .backoff import Backoff
from .connection import BrokerConnection, BrokerConnectionError, parse_address
from .errors import CorruptDataError, InvalidOffsetError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class RawChunk(NamedTuple):
    """With ``raw_chunks``: one partition's fetched messages as the bytes the
    broker sent (whole messages, CRCs checked when ``check_crcs``), not
    decoded: what a mirror forwards. ``offset``/``next_offset`` as a
    Message's: where the first starts, where the one after the last will."""
    topic: str
    partition: object               # the partition, or its label (see label_partition)
    offset: int
    next_offset: int
    data: bytes
    count: int
    first_timestamp: int
    max_timestamp: int


@dataclass(frozen=True)
class ConsumerConfig(TlsClientSettings, SaslClientSettings):
    bootstrap: str = "127.0.0.1:9092"
    """Broker address host:port."""
    client_id: str = "samsa-consumer"
    fetch_max_bytes: int = 300 * 1024
    """Bytes asked for per partition per fetch (the paper's ~hundreds of KB)."""
    fetch_rate_bytes: int = 0
    """Across a long round trip, ask each partition for more than
    ``fetch_max_bytes``: the connection's round-trip time (the lowest the
    kernel measured: BrokerConnection.round_trip_s) x this many bytes per
    second, up to ``fetch_rtt_max_bytes`` and to what keeps the whole answer
    under the connection's response limit (256 MiB) -- a fetch sized for the
    bandwidth-delay product.
    On a LAN (round trip x rate below ``fetch_max_bytes``) it changes
    nothing. 0: always ``fetch_max_bytes``."""
    fetch_rtt_max_bytes: int = 16 << 20
    """The most ``fetch_rate_bytes`` makes a partition's fetch ask for."""
    max_fetch_bytes_limit: int = 64 << 20
    """Upper bound when growing the fetch size for one oversized message."""
    max_wait_ms: int = 500
    """Long-poll: how long the broker may hold a fetch that has no data."""
    min_bytes: int = 1
    """The broker answers once this many bytes are available."""
    check_crcs: bool = True
    """Verify every message's CRC (catches corruption on disk or wire)."""
    auto_offset_reset: str = "earliest"
    """On OFFSET_OUT_OF_RANGE: "earliest", "latest" or "error" (raise). Every
    reset is logged as a WARNING with the bytes it skips or replays and
    counted (``offset_resets``). The default differs from Kafka's "latest" on
    purpose: this is a log pipeline that promises at-least-once delivery, and
    "earliest" turns an out-of-range position into duplicates (data replayed)
    where "latest" would turn it into silent loss (data skipped)."""
    on_corrupt: str = "raise"
    """Corrupt data: "raise" (default) delivers the intact messages before it,
    then raises CorruptDataError; "skip" jumps to where intact data resumes,
    logs a WARNING and counts what it skipped."""
    raw_chunks: bool = False
    """poll() returns a RawChunk per partition instead of a Message per
    message (the mirror's forwarding path). Data holding a compressed
    wrapper, or corrupt data, is still decoded into Messages, so a poll may
    return both kinds."""
    request_timeout_ms: int = 40_000
    reconnect_backoff_ms: int = 200
    """Wait before reconnecting after a connection loss; doubles with each
    failure in a row up to ``reconnect_backoff_max_ms``. Polling never gives
    up on an unreachable broker: it retries until its timeout."""
    reconnect_backoff_max_ms: int = 5_000
    pipeline_fetches: bool = True
    """Send the next fetch before decoding the current one, so the broker
    reads and sends while the client decodes."""
    receive_buffer_bytes: int = 1 << 20
    """SO_RCVBUF of the connection; -1: the kernel's autotuning (a consumer
    across a WAN: a fixed buffer caps what arrives per round trip)."""

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in ("earliest", "latest", "error"):
            raise ValueError("auto_offset_reset must be earliest, latest or error")
        if self.on_corrupt not in ("raise", "skip"):
            raise ValueError("on_corrupt must be raise or skip")
        if self.fetch_max_bytes < 64:
            raise ValueError("fetch_max_bytes must be >= 64")
        if self.fetch_rate_bytes < 0:
            raise ValueError("fetch_rate_bytes must be >= 0 (0: off)")
        if self.fetch_rate_bytes and not (self.fetch_max_bytes <= self.fetch_rtt_max_bytes
                                          <= self.max_fetch_bytes_limit):
            raise ValueError("fetch_rtt_max_bytes must be between fetch_max_bytes and "
                             "max_fetch_bytes_limit")
        if self.receive_buffer_bytes == 0 or self.receive_buffer_bytes < -1:
            raise ValueError("receive_buffer_bytes must be -1 (autotuning) or a size")
        if self.request_timeout_ms <= self.max_wait_ms:
            raise ValueError("request_timeout_ms must exceed max_wait_ms")


class Consumer:
    """Pull messages from a set of partitions you name.

    >>> c = Consumer(ConsumerConfig(bootstrap="127.0.0.1:9092"))
    >>> c.assign([("events", 0)], start="earliest")
    >>> for m in c.messages(timeout_ms=1000): print(m.offset, m.value)

    Not thread-safe: one thread per consumer.
    """

    def __init__(self, config: ConsumerConfig | None = None, **overrides) -> None:
        if config is None:
            config = ConsumerConfig(**overrides)
        elif overrides:
            raise TypeError("pass either a ConsumerConfig or keyword settings")
        self.config = config
        host, port = parse_address(config.bootstrap)
        self.conn = BrokerConnection(host, port, config.client_id,
                                     request_timeout=config.request_timeout_ms / 1000,
                                     receive_buffer_bytes=config.receive_buffer_bytes,
                                     tls=client_context_of(config),
                                     sasl=sasl_login_of(config))
        self._positions: dict[TopicPartition, int] = {}
        self._fetch_sizes: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._buffer: deque[Message] = deque()
        self._inflight: dict[TopicPartition, int] | None = None   # positions a fetch asked for
        self._backoff = Backoff(config.reconnect_backoff_ms, config.reconnect_backoff_max_ms)
        self._labels: dict[TopicPartition, object] = {}    # what Message.partition shows
        self._pending_error: SamsaError | None = None   # raised once what came before is out
        self._max_message_bytes: int | None = None      # the broker's, from Metadata
        # what the application (and a group's metrics) can read
        self.corrupt_skips = 0
        self.corrupt_skipped_bytes = 0
        self.offset_resets = 0
        self.reset_skipped_bytes = 0
        self.reset_replayed_bytes = 0
        self.skip_listener = None       # called with (tp, offset, next_offset) on each skip

    # ------------------------------------------------------------ positions

    def assign(self, partitions: list[TopicPartition], start: str | int = "latest") -> None:
        """Consume these partitions, starting at "earliest", "latest" or an offset."""
        self._abandon_inflight()
        self._positions = {}
        self._buffer.clear()
        for tp in partitions:
            self._positions[(tp[0], int(tp[1]))] = 0
            self.seek(tp, start)

    def label_partition(self, tp: TopicPartition, label: object) -> None:
        """Show ``label`` instead of the partition number in the messages of
        ``tp`` (a consumer group labels them "broker-partition")."""
        self._labels[(tp[0], int(tp[1]))] = label

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def position(self, tp: TopicPartition) -> int:
        """The offset the next message of ``tp`` will be fetched from."""
        return self._positions[tp]

    def seek(self, tp: TopicPartition, where: str | int) -> None:
        """Move to an offset, or "earliest"/"latest". Drops buffered messages of tp."""
        tp = (tp[0], int(tp[1]))
        if tp not in self._positions:
            raise KeyError(f"{tp} is not assigned")
        if where == "earliest":
            offset = self._offsets(tp, api.EARLIEST)[0]
        elif where == "latest":
            offset = self._offsets(tp, api.LATEST)[0]
        elif isinstance(where, int) and where >= 0:
            offset = where
        else:
            raise ValueError(f"seek wants an offset >= 0, 'earliest' or 'latest', not {where!r}")
        self._positions[tp] = offset
        self._buffer = deque(m for m in self._buffer if (m.topic, m.partition) != tp)

    def seek_to_time(self, tp: TopicPartition, time_ms: int) -> int:
        """Move to the start of the newest segment that begins at or before
        ``time_ms`` (Kafka 0.7 semantics: never skips a message newer than
        the time); to the earliest offset if none does. Returns the offset."""
        tp = (tp[0], int(tp[1]))
        offsets = self._offsets(tp, time_ms)
        offset = offsets[0] if offsets else self._offsets(tp, api.EARLIEST)[0]
        self.seek(tp, offset)
        return offset

    def _offsets(self, tp: TopicPartition, time: int) -> list[int]:
        resp = self._request(api.OffsetsRequest(tp[0], tp[1], time, 1))
        if resp.error:
            raise SamsaError(resp.error, resp.message)
        return list(resp.offsets)

    # ------------------------------------------------------------ fetching

    def poll(self, timeout_ms: int | None = None) -> list[Message]:
        """Messages fetched since the last call (possibly none once
        ``timeout_ms`` passes; ``None`` waits for at least one message)."""
        if self._buffer:
            out = list(self._buffer)
            self._buffer.clear()
            return out
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error
        if not self._positions:
            raise RuntimeError("no partitions assigned")
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            if self._inflight is None and not self._send_fetch():
                # the broker is unreachable: keep trying (a restart, a network blip)
                if deadline is not None and time.monotonic() >= deadline:
                    return []
                continue
            if deadline is not None:
                left = deadline - time.monotonic()
                if not self.conn.response_ready(left):
                    return []      # the fetch stays in flight for the next poll
            messages = self._complete_fetch()
            if messages:
                return messages
            if self._pending_error is not None:
                error, self._pending_error = self._pending_error, None
                raise error
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def messages(self, timeout_ms: int | None = None) -> Iterator[Message]:
        """Iterate over messages forever, blocking for new ones. With
        ``timeout_ms`` the iteration ends after that long without a message."""
        while True:
            batch = self.poll(timeout_ms)
            if not batch:
                if timeout_ms is not None:
                    return
                continue
            yield from batch

    def __iter__(self) -> Iterator[Message]:
        return self.messages()

    def _send_fetch(self) -> bool:
        """Ask for every assigned partition from its position (long-poll).
        False (after a back-off wait) if the broker cannot be reached."""
        sizes, default = self._fetch_sizes, self._partition_fetch_bytes()
        entries = tuple(api.FetchEntry(t, p, off, sizes.get((t, p), default))
                        for (t, p), off in self._positions.items())
        request = api.FetchRequest(self.config.max_wait_ms, self.config.min_bytes, entries)
        try:
            self.conn.send(request)
        except BrokerConnectionError as exc:
            self._connection_failed(exc)
            return False
        self._backoff.reset()
        self._inflight = dict(self._positions)
        return True

    def _partition_fetch_bytes(self) -> int:
        """What each partition asks for: ``fetch_max_bytes``, or across a long
        round trip the bandwidth-delay product (``fetch_rate_bytes``)."""
        cfg = self.config
        if not cfg.fetch_rate_bytes:
            return cfg.fetch_max_bytes
        rtt = self.conn.round_trip_s()
        if rtt is None:
            return cfg.fetch_max_bytes
        wanted = int(rtt * cfg.fetch_rate_bytes)
        # the whole answer must stay under the connection's response limit
        room = (self.conn.max_response_bytes - (1 << 20)) // max(1, len(self._positions))
        return max(cfg.fetch_max_bytes, min(cfg.fetch_rtt_max_bytes, wanted, room))

    def _connection_failed(self, exc: Exception) -> None:
        self.conn.close()
        backoff = self._backoff.next_delay_ms()
        log.warning("consumer: %s; retrying in %d ms", exc, backoff)
        time.sleep(backoff / 1000)

    def _complete_fetch(self) -> list[Message]:
        """Receive the fetch in flight; ask for the next one at once (so the
        broker works while this one is decoded), then decode this one."""
        asked, self._inflight = self._inflight, None
        try:
            _cid, resp = self.conn.receive()
        except BrokerConnectionError as exc:
            self._connection_failed(exc)
            return []
        if isinstance(resp, api.ErrorResponse):
            raise SamsaError(resp.error, resp.message)
        todo = []
        positions = self._positions
        for r in resp.results:
            tp = (r.topic, r.partition)
            start = positions.get(tp)
            if start is None or asked.get(tp) != start:
                continue      # unassigned or moved by seek() meanwhile: stale data
            if r.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                self._reset_out_of_range(tp, r)
                continue
            if r.error == ErrorCode.CORRUPT_MESSAGE:
                try:
                    _bad_start, next_valid = api.decode_corrupt_range(r.message_set)
                except ProtocolError:
                    raise SamsaError(r.error, r.message) from None
                self._corrupt(tp, start, next_valid, "the broker quarantined these bytes")
                continue
            if r.error == ErrorCode.INVALID_OFFSET:
                self._defer(InvalidOffsetError(tp[0], tp[1], start,
                                               "the broker found no valid message there"))
                continue
            if r.error:
                raise SamsaError(r.error, r.message)
            self.high_watermarks[tp] = r.high_watermark
            data = r.message_set
            if not data:
                continue
            used, clean = whole_messages_length(data)
            if used == 0 and clean:
                length = struct.unpack_from(">i", data, 0)[0] if len(data) >= 4 else 0
                if (4 + length > self._broker_max_message_bytes(tp)
                        or start + 4 + length > r.high_watermark):
                    self._defer(InvalidOffsetError(
                        tp[0], tp[1], start, f"the length there reads {length}, more than any "
                        f"message can have"))
                    continue
                self._grow_fetch_size(tp, len(data))
                continue
            positions[tp] = start + used if clean else start
            self._fetch_sizes.pop(tp, None)
            todo.append((tp, data, start, used, clean))
        if self.config.pipeline_fetches:
            self._send_fetch()
        out: list[Message] = []
        raw = self.config.raw_chunks
        for tp, data, start, used, clean in todo:
            label = self._labels.get(tp, tp[1])
            if raw:
                chunk = raw_chunk(data, used, clean, start, self.config.check_crcs, tp[0],
                                  label)
                if chunk is not None:
                    out.append(chunk)
                    continue
            try:
                messages, _used = decode_message_set(data, start, self.config.check_crcs,
                                                     tp[0], label)
            except CorruptMessageError as exc:
                # deliver the intact messages before the bad one, then report it
                messages, bad, next_offset = self._salvage(data, start, tp, label)
                positions[tp] = bad
                self._abandon_inflight()
                out.extend(messages)
                self._corrupt(tp, bad, next_offset, str(exc))
                continue
            out.extend(messages)
        return out

    def _salvage(self, data, start: int, tp: TopicPartition, label
                 ) -> tuple[list[Message], int, int | None]:
        """The intact messages at the head of ``data`` (which failed to decode
        as a whole), the offset of the first bad one and where the next one
        would start (None if its length cannot be trusted)."""
        good = scan_valid_prefix(data)[0]       # whole messages with good CRCs
        messages: list[Message] = []
        pos = 0
        while pos < good:                       # one by one: a wrapper may hide bad inner data
            size = 4 + struct.unpack_from(">i", data, pos)[0]
            try:
                one, _n = decode_message_set(data[pos:pos + size], start + pos,
                                             self.config.check_crcs, tp[0], label)
            except CorruptMessageError:
                break
            messages.extend(one)
            pos += size
        bad = start + pos
        next_offset = None
        if len(data) - pos >= 4:
            length = struct.unpack_from(">i", data, pos)[0]
            limit = self._broker_max_message_bytes(tp)
            high = self.high_watermarks.get(tp, bad + 4 + length)
            if 18 <= length and 4 + length <= limit and bad + 4 + length <= high:
                next_offset = bad + 4 + length
        return messages, bad, next_offset

    def _corrupt(self, tp: TopicPartition, offset: int, next_offset: int | None,
                 reason: str) -> None:
        """Skip the damage (on_corrupt="skip", when where to go on is known) or
        defer the error until the messages before it are delivered."""
        if self.config.on_corrupt == "skip" and next_offset is not None:
            log.warning("consumer: corrupt data in %s/%d at offset %d (%s); skipping %d bytes "
                        "to offset %d (on_corrupt=skip)", tp[0], tp[1], offset, reason,
                        next_offset - offset, next_offset)
            self.corrupt_skips += 1
            self.corrupt_skipped_bytes += next_offset - offset
            self._positions[tp] = next_offset
            if self.skip_listener is not None:
                self.skip_listener(tp, offset, next_offset)
            return
        self._positions[tp] = offset
        self._defer(CorruptDataError(tp[0], tp[1], offset, next_offset, reason))

    def _defer(self, error: SamsaError) -> None:
        """Raise ``error`` at the next poll, after what this one returns; the
        fetch in flight (sent from positions past the error) is dropped."""
        self._abandon_inflight()
        if self._pending_error is None:
            self._pending_error = error

    def _broker_max_message_bytes(self, tp: TopicPartition) -> int:
        """The broker's max_message_bytes (Metadata), asked once."""
        if self._max_message_bytes is None:
            try:
                resp = self.conn.request(api.MetadataRequest((tp[0],))) \
                    if self._inflight is None else None
            except (BrokerConnectionError, SamsaError):
                resp = None
            if resp is None:
                return 1 << 20
            self._max_message_bytes = resp.max_message_bytes
        return self._max_message_bytes

    def _abandon_inflight(self) -> None:
        """Drop a fetch in flight whose answer would be stale."""
        if self._inflight is not None:
            self._inflight = None
            self.conn.close()

    def _grow_fetch_size(self, tp: TopicPartition, got: int) -> None:
        size = max(self._fetch_sizes.get(tp, self.config.fetch_max_bytes), got) * 2
        if size > self.config.max_fetch_bytes_limit:
            raise SamsaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"a message at offset {self._positions[tp]} of {tp[0]}/{tp[1]} is "
                             f"larger than max_fetch_bytes_limit "
                             f"({self.config.max_fetch_bytes_limit} bytes)")
        log.info("message at %s/%d offset %d is larger than %d bytes; fetching %d",
                 tp[0], tp[1], self._positions[tp], got, size)
        self._fetch_sizes[tp] = size

    def _reset_out_of_range(self, tp: TopicPartition, r: api.FetchResult) -> None:
        policy = self.config.auto_offset_reset
        old = self._positions[tp]
        if old > r.high_watermark:
            # offsets are never reused: a log that ends below what we read
            # was deleted and re-created, or lost data on the broker
            log.warning("consumer: %s/%d ends at offset %d, below this consumer's offset %d: "
                        "the topic was deleted and re-created, or the broker lost data",
                        tp[0], tp[1], r.high_watermark, old)
        if policy == "error":
            raise SamsaError(r.error, r.message, earliest=r.earliest, latest=r.high_watermark)
        new = r.earliest if policy == "earliest" else r.high_watermark
        self.offset_resets += 1
        if new > old:
            self.reset_skipped_bytes += new - old
            effect = f"SKIPPING {new - old} bytes (deleted by retention, never read)"
        else:
            self.reset_replayed_bytes += old - new
            effect = f"REPLAYING up to {old - new} bytes (already read: duplicates)"
        log.warning("consumer: offset %d of %s/%d is out of range (valid %d..%d); "
                    "auto_offset_reset=%s moves it to %d, %s", old, tp[0], tp[1], r.earliest,
                    r.high_watermark, policy, new, effect)
        self._positions[tp] = new

    def _request(self, request):
        """One request/response, reconnecting once after a lost connection.
        A fetch in flight is dropped first (its answer would come first)."""
        self._abandon_inflight()
        for attempt in (1, 2):
            try:
                response = self.conn.request(request)
                return response
            except BrokerConnectionError:
                if attempt == 2:
                    raise
                self.conn.close()
                time.sleep(self.config.reconnect_backoff_ms / 1000)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def raw_chunk(data, used: int, clean: bool, start: int, check_crcs: bool, topic: str,
              label) -> "RawChunk | None":
    """The whole messages of ``data`` (``used``, ``clean``: what
    whole_messages_length said of it) as a RawChunk, or None when they hold
    a compressed wrapper or fail a check (then the caller decodes them)."""
    if not clean:       # a malformed length after them: the decoding path reports it
        return None
    status, pos, count, first_ts, max_ts, wrappers = walk_message_set(data[:used], check_crcs)
    if status or wrappers or not count:
        return None
    return RawChunk(topic, label, start, start + pos, bytes(data[:pos]), count, first_ts, max_ts)
