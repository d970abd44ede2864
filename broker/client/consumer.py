"""A simple pull consumer of named partitions (groups come with ZooKeeper).

The consumer, not the broker, keeps its position: one offset per partition.
Each poll sends one Fetch for every assigned partition (long-poll: the broker
holds it until data arrives or ``max_wait_ms`` passes, so an idle consumer
does not spin), decodes the whole messages of each result and advances the
position past them. A fetch may end in a partial message: it is dropped and
fetched again next time. A message larger than ``fetch_max_bytes`` makes the
consumer retry that partition with a doubled size (up to
``max_fetch_bytes_limit``) instead of stalling.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import Message, decode_message_set, whole_messages_length

from .connection import BrokerConnection, BrokerConnectionError, parse_address

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ConsumerConfig:
    bootstrap: str = "127.0.0.1:9092"
    """Broker address host:port."""
    client_id: str = "samsa-consumer"
    fetch_max_bytes: int = 300 * 1024
    """Bytes asked for per partition per fetch (the paper's ~hundreds of KB)."""
    max_fetch_bytes_limit: int = 64 << 20
    """Upper bound when growing the fetch size for one oversized message."""
    max_wait_ms: int = 500
    """Long-poll: how long the broker may hold a fetch that has no data."""
    min_bytes: int = 1
    """The broker answers once this many bytes are available."""
    check_crcs: bool = True
    """Verify every message's CRC (catches corruption on disk or wire)."""
    auto_offset_reset: str = "earliest"
    """On OFFSET_OUT_OF_RANGE: "earliest", "latest" or "error" (raise)."""
    request_timeout_ms: int = 40_000
    reconnect_backoff_ms: int = 200
    """Wait before reconnecting after a connection loss; doubles with each
    failure in a row up to ``reconnect_backoff_max_ms``. Polling never gives
    up on an unreachable broker: it retries until its timeout."""
    reconnect_backoff_max_ms: int = 5_000
    pipeline_fetches: bool = True
    """Send the next fetch before decoding the current one, so the broker
    reads and sends while the client decodes."""

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in ("earliest", "latest", "error"):
            raise ValueError("auto_offset_reset must be earliest, latest or error")
        if self.fetch_max_bytes < 64:
            raise ValueError("fetch_max_bytes must be >= 64")
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
                                     request_timeout=config.request_timeout_ms / 1000)
        self._positions: dict[TopicPartition, int] = {}
        self._fetch_sizes: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._buffer: deque[Message] = deque()
        self._inflight: dict[TopicPartition, int] | None = None   # positions a fetch asked for
        self._failures_in_a_row = 0
        self._labels: dict[TopicPartition, object] = {}    # what Message.partition shows

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
        sizes, default = self._fetch_sizes, self.config.fetch_max_bytes
        entries = tuple(api.FetchEntry(t, p, off, sizes.get((t, p), default))
                        for (t, p), off in self._positions.items())
        request = api.FetchRequest(self.config.max_wait_ms, self.config.min_bytes, entries)
        try:
            self.conn.send(request)
        except BrokerConnectionError as exc:
            self._connection_failed(exc)
            return False
        self._failures_in_a_row = 0
        self._inflight = dict(self._positions)
        return True

    def _connection_failed(self, exc: Exception) -> None:
        self.conn.close()
        self._failures_in_a_row += 1
        backoff = min(self.config.reconnect_backoff_ms * 2 ** (self._failures_in_a_row - 1),
                      self.config.reconnect_backoff_max_ms)
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
            if r.error:
                raise SamsaError(r.error, r.message)
            self.high_watermarks[tp] = r.high_watermark
            data = r.message_set
            if not data:
                continue
            used, clean = whole_messages_length(data)
            if used == 0 and clean:
                self._grow_fetch_size(tp, len(data))
                continue
            positions[tp] = start + used if clean else start
            self._fetch_sizes.pop(tp, None)
            todo.append((tp, data, start))
        if self.config.pipeline_fetches:
            self._send_fetch()
        out: list[Message] = []
        for tp, data, start in todo:
            try:
                messages, _used = decode_message_set(data, start, self.config.check_crcs,
                                                     tp[0], self._labels.get(tp, tp[1]))
            except Exception:
                # do not skip what could not be read: resume at this fetch
                positions[tp] = start
                self._abandon_inflight()
                raise
            out.extend(messages)
        return out

    def _abandon_inflight(self) -> None:
        """Drop a fetch in flight whose answer would be stale."""
        if self._inflight is not None:
            self._inflight = None
            self.conn.close()

    def _grow_fetch_size(self, tp: TopicPartition, got: int) -> None:
        size = self._fetch_sizes.get(tp, self.config.fetch_max_bytes) * 2
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
        if policy == "error":
            raise SamsaError(r.error, r.message, earliest=r.earliest, latest=r.high_watermark)
        new = r.earliest if policy == "earliest" else r.high_watermark
        log.warning("offset %d of %s/%d is out of range (valid %d..%d); resetting to %s (%d)",
                    self._positions[tp], tp[0], tp[1], r.earliest, r.high_watermark, policy, new)
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
