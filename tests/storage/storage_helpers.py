"""Helpers shared by the storage tests: a fake clock, building message sets,
reading a log back whole. Plain functions, so hypothesis tests can use them
without pytest fixtures. Must never reach into a Log's private state."""
from __future__ import annotations

import os
from typing import Iterable, NamedTuple, Sequence

from broker.protocol.message import (decode_message_set, encode_message_set, message_size,
                                     validate_message_set)
from broker.storage.errors import CorruptRangeError
from broker.storage.log import Log

Triple = tuple[bytes | None, bytes, int]      # (key, value, timestamp) as a producer gives it

READ_ALL = 1 << 30


class Stored(NamedTuple):
    """What the storage layer is responsible for in a decoded message (the
    protocol's Message may carry more, e.g. the consumer's topic)."""

    offset: int
    next_offset: int
    timestamp: int
    key: bytes | None
    value: bytes


def decode(data: bytes, offset: int) -> tuple[list[Stored], int]:
    """decode_message_set, reduced to the fields storage must preserve."""
    messages, used = decode_message_set(data, offset)
    return [Stored(m.offset, m.next_offset, m.timestamp, m.key, m.value)
            for m in messages], used


class FakeClock:
    """Wall-clock milliseconds that move only when the test says so."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def append(log: Log, triples: Sequence[Triple]) -> tuple[int, list[Stored]]:
    """Append ``triples`` as one message set, the way the broker does
    (validate, then append). Returns the base offset and the messages a
    consumer must later see for them."""
    message_set = encode_message_set(triples)
    info = validate_message_set(message_set)
    offset = log.append(message_set, info.count, info.first_timestamp, info.max_timestamp)
    return offset, expected_messages(offset, triples)


def expected_messages(offset: int, triples: Iterable[Triple]) -> list[Stored]:
    """The messages a consumer decodes for ``triples`` stored from ``offset``."""
    out = []
    for key, value, ts in triples:
        size = message_size(key, value)
        out.append(Stored(offset, offset + size, ts, key, value))
        offset += size
    return out


def read_from(log: Log, offset: int) -> list[Stored]:
    """Every visible message from ``offset`` on, fetching segment by segment
    as a consumer does (one read never crosses a segment end)."""
    out: list[Stored] = []
    while offset < log.visible_end:
        data = log.read(offset, READ_ALL)
        assert data, f"empty read at {offset} below visible_end {log.visible_end}"
        messages, used = decode(data, offset)
        assert used == len(data), "a read must end on a message boundary here"
        out.extend(messages)
        offset += used
    return out


def read_skipping_quarantine(log: Log, offset: int) -> tuple[list[Stored], list[tuple[int, int]]]:
    """Like ``read_from``, but a read at a quarantined range skips to its end,
    as a consumer does with the broker's CORRUPT_MESSAGE. Returns the messages
    and the ranges skipped."""
    out: list[Stored] = []
    skipped: list[tuple[int, int]] = []
    while offset < log.visible_end:
        try:
            data = log.read(offset, READ_ALL)
        except CorruptRangeError as exc:
            assert exc.start <= offset < exc.end
            skipped.append((exc.start, exc.end))
            offset = exc.end
            continue
        assert data, f"empty read at {offset} below visible_end {log.visible_end}"
        messages, used = decode(data, offset)
        assert used == len(data), "a read must end on a message boundary here"
        out.extend(messages)
        offset += used
    return out, skipped


def segment_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))
