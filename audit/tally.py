"""The counting kernel: fold messages into per-window tallies (pure Python
reference; ``audit._tally`` is its C twin, used when built, and the tests
hold the two to the same results).

A tally of one (topic, window) is a list of ints::

    [count, bytes, no_time, malformed, checksum, unique, unique_checksum,
     bucket_0, ..., bucket_n]

* ``count``: messages; ``bytes``: bytes of their values;
* ``no_time``: messages without a usable timestamp (<= 0, or at or after
  ``MAX_TIME_MS``, 2100-01-01: microseconds or nanoseconds taken for
  milliseconds): they are tallied in the window of ``now_ms`` (their
  arrival), and have no latency. The bound is fixed, not relative to
  ``now_ms``: every tier must put a message in the same window whatever its
  own clock says (a producer whose clock is days ahead stamps its events
  days ahead, and counts them there; a counter with a right clock must too);
* ``malformed``: values that are not an envelope with the event header
  (schemas/header.py): counted, but without an id;
* ``checksum``: the sum modulo 2^64 of ``id_hash(event_id)`` over every
  message with an id, duplicates included: order-independent and additive;
* ``unique``: ids seen for the first time by this tally's owner (when an id
  set is kept for the window, else 0); ``unique_checksum``: the sum modulo
  2^64 of their hashes (with ``unique``, the audit tells "every id the
  producers sent, some twice" from "some missing, others twice");
* ``bucket_i``: messages whose latency ``now_ms - timestamp`` is at most
  ``bounds[i]`` (and above ``bounds[i-1]``); the last bucket is the rest.

``id_hash`` mixes the 16 id bytes into 64 bits: a, b = the two halves as
little-endian uint64; x = a XOR (b * 0x9E3779B97F4A7C15); then MurmurHash3's
64-bit finaliser. Random ids (UUID4s) and structured ones (counters) alike
come out uniformly spread, which is what the checksum's guarantee needs.
"""
from __future__ import annotations

import bisect
import struct

from schemas.header import HeaderError, event_header

#: 2100-01-01T00:00Z: a timestamp at or after it is not milliseconds (no time)
MAX_TIME_MS = 4_102_444_800_000
_MASK = (1 << 64) - 1
# a message's header (broker/protocol/message.py): length, crc, magic, attributes,
# timestamp, key length
_MESSAGE_HEADER = struct.Struct(">iIbbqi")

COUNT, BYTES, NO_TIME, MALFORMED, CHECKSUM, UNIQUE, UNIQUE_CHECKSUM = range(7)
FIXED_FIELDS = 7
#: the fields summed modulo 2^64
CHECKSUMS = (CHECKSUM, UNIQUE_CHECKSUM)


def id_hash(event_id: bytes) -> int:
    a = int.from_bytes(event_id[:8], "little")
    b = int.from_bytes(event_id[8:16], "little")
    x = a ^ ((b * 0x9E3779B97F4A7C15) & _MASK)
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK
    x ^= x >> 33
    return x


def event_id_of(value) -> bytes | None:
    """The 16-byte event id of an envelope's header, None if malformed."""
    try:
        return event_header(value)[1]
    except HeaderError:
        return None


def _new(buckets: int) -> list[int]:
    return [0] * (FIXED_FIELDS + buckets)


def tally_values(acc: dict, values, timestamps, window_ms: int, now_ms: int,
                 bounds: tuple[int, ...], id_sets: dict | None = None) -> int:
    """Fold ``values`` (with their ``timestamps``, a list or one int for all)
    into ``acc`` ({window begin: tally}); ``id_sets`` ({window begin: set of
    id hashes}) when ids are deduplicated. Returns how many were folded."""
    n = len(values)
    stamps = timestamps if not isinstance(timestamps, int) else [timestamps] * n
    if len(stamps) != n:
        raise ValueError("values and timestamps differ in length")
    nb = len(bounds) + 1
    for value, ts in zip(values, stamps):
        _fold(acc, value, ts, window_ms, now_ms, bounds, nb, id_sets)
    return n


def tally_messages(acc: dict, messages, window_ms: int, now_ms: int, bounds: tuple[int, ...],
                   id_sets: dict | None = None) -> int:
    """As tally_values, from consumed messages (their ``timestamp`` and ``value``)."""
    nb = len(bounds) + 1
    for m in messages:
        _fold(acc, m[6], m[4], window_ms, now_ms, bounds, nb, id_sets)
    return len(messages)


def tally_message_set(acc: dict, buf, window_ms: int, now_ms: int, bounds: tuple[int, ...],
                      id_sets: dict | None = None) -> int:
    """As tally_values, from the whole, uncompressed messages of a fetched
    message set (``buf``), without decoding them into objects (the C twin
    walks the bytes; this reference reads them with the codec). A compressed
    wrapper or bad framing raises ValueError before anything is folded."""
    items = []
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < 22:
            raise ValueError("tally_message_set() needs whole, uncompressed messages")
        length, _crc, _magic, attributes, ts, key_length = _MESSAGE_HEADER.unpack_from(buf, pos)
        if length < 18 or pos + 4 + length > end or attributes & 0x07 \
                or not -1 <= key_length <= length - 18:
            raise ValueError("tally_message_set() needs whole, uncompressed messages")
        value_at = pos + 22 + max(key_length, 0)
        items.append((bytes(buf[value_at:pos + 4 + length]), ts))
        pos += 4 + length
    nb = len(bounds) + 1
    for value, ts in items:
        _fold(acc, value, ts, window_ms, now_ms, bounds, nb, id_sets)
    return len(items)


def _fold(acc, value, ts, window_ms, now_ms, bounds, nb, id_sets) -> None:
    if 0 < ts < MAX_TIME_MS:
        begin = ts - ts % window_ms
        latency = now_ms - ts
        bucket = bisect.bisect_left(bounds, latency) if latency > 0 else 0
        no_time = 0
    else:
        begin = now_ms - now_ms % window_ms
        bucket = -1
        no_time = 1
    tally = acc.get(begin)
    if tally is None:
        tally = acc[begin] = _new(nb)
    tally[COUNT] += 1
    tally[BYTES] += len(value)
    tally[NO_TIME] += no_time
    if bucket >= 0:
        tally[FIXED_FIELDS + bucket] += 1
    event_id = event_id_of(value)
    if event_id is None:
        tally[MALFORMED] += 1
        return
    h = id_hash(event_id)
    tally[CHECKSUM] = (tally[CHECKSUM] + h) & _MASK
    if id_sets is not None:
        seen = id_sets.get(begin)
        if seen is None:
            seen = id_sets[begin] = set()
        if h not in seen:
            seen.add(h)
            tally[UNIQUE] += 1
            tally[UNIQUE_CHECKSUM] = (tally[UNIQUE_CHECKSUM] + h) & _MASK
