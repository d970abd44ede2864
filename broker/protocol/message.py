"""Messages and message sets: the bytes that producers send, the log stores and
consumers fetch. Pure functions; no I/O.

Byte layout of one message (all integers big-endian)::

    message    := length:int32  crc:uint32  magic:int8  attributes:int8
                  timestamp:int64  key_length:int32  key:byte[key_length]
                  value:byte[length - 18 - max(key_length, 0)]
    length     := number of bytes after the length field (18 + key + value)
    crc        := CRC-32 (IEEE 802.3, as zlib.crc32) of every byte from
                  `magic` to the end of `value`; it does NOT cover `length`
                  or itself. A message whose length field is damaged is
                  caught because its bytes no longer hash to its crc.
    magic      := 0 (the only version)
    attributes := bits 0-2: compression codec (0 none, 1 gzip, 2 lz4, 3 zstd);
                  bits 3-7: zero
    timestamp  := milliseconds since the epoch, set by the producer
    key_length := -1 for no key, else the key's byte count

A message occupies ``4 + length`` bytes, so a message at byte offset X is
followed by the next one at ``X + 4 + length`` (the paper's addressing: the
offset *is* the byte position in the partition).

A message set is messages back to back, nothing else. A compressed message
set is stored as ONE wrapper message: codec in its attributes, no key,
timestamp = the newest inner timestamp, value = the compressed bytes of an
uncompressed inner message set (as in Kafka 0.7). Consumers see the inner
messages; each has the wrapper's offset, and only the last has the wrapper's
next offset, so a consumer that resumes from a committed `next_offset`
re-reads at most one wrapper and never skips a message.
"""
from __future__ import annotations

import struct
import zlib
from typing import Iterable, NamedTuple, Sequence

from .compression import MAX_DECOMPRESSED, Codec, compress, decompress
from .errors import CorruptMessageError, MessageTooLargeError

MAGIC = 0
# length, crc, magic, attributes, timestamp, key_length
_HEADER = struct.Struct(">iIbbqi")
HEADER_SIZE = _HEADER.size          # 22: the size of a message with no key and an empty value
LENGTH_SIZE = 4
_LENGTH = struct.Struct(">i")
# the part after the crc: magic, attributes, timestamp, key_length
_BODY_HEADER = struct.Struct(">bbqi")
_LENGTH_CRC = struct.Struct(">iI")
_CODEC_MASK = 0x07
_crc32 = zlib.crc32


class Message(NamedTuple):
    """One message as a consumer sees it (a named tuple: cheap to build).

    ``offset`` is the byte offset of the message (of its wrapper when it came
    compressed); ``next_offset`` is where to resume after it. ``topic`` and
    ``partition`` are filled in by the consumer ("" and -1 otherwise).
    """

    topic: str
    partition: int
    offset: int
    next_offset: int
    timestamp: int
    key: bytes | None
    value: bytes


class MessageSetInfo(NamedTuple):
    """What validating a message set learned about it (a named tuple: built
    once per produce request, so it must be cheap)."""

    count: int             # messages, counting the inner messages of wrappers
    size: int              # bytes
    first_timestamp: int   # -1 for an empty set
    max_timestamp: int     # -1 for an empty set


def message_size(key: bytes | None, value: bytes) -> int:
    """Bytes one message occupies in a message set."""
    return HEADER_SIZE + (len(key) if key is not None else 0) + len(value)


def encode_message(value: bytes, key: bytes | None = None, timestamp: int = 0,
                   codec: int = Codec.NONE) -> bytes:
    """Encode one message. ``value`` and ``key`` are bytes; ``timestamp`` ms."""
    if key is None:
        body = _BODY_HEADER.pack(MAGIC, codec, timestamp, -1) + value
    else:
        body = _BODY_HEADER.pack(MAGIC, codec, timestamp, len(key)) + key + value
    return _LENGTH_CRC.pack(len(body) + 4, _crc32(body)) + body


def encode_message_set(messages: Iterable[tuple[bytes | None, bytes, int]]) -> bytes:
    """Encode ``(key, value, timestamp)`` triples into one message set."""
    parts: list[bytes] = []
    append = parts.append
    pack_body, pack_head, crc32 = _BODY_HEADER.pack, _LENGTH_CRC.pack, _crc32
    for key, value, timestamp in messages:
        if key is None:
            body = pack_body(MAGIC, 0, timestamp, -1) + value
        else:
            body = pack_body(MAGIC, 0, timestamp, len(key)) + key + value
        append(pack_head(len(body) + 4, crc32(body)))
        append(body)
    return b"".join(parts)


def encode_values(values: Sequence[bytes], timestamp: int | Sequence[int]) -> bytes:
    """Encode key-less values (the fast path); ``timestamp`` is one int for
    all of them or a sequence with one per value."""
    if not isinstance(timestamp, int):
        if len(timestamp) != len(values):
            raise ValueError("values and timestamps differ in length")
        return encode_message_set(zip([None] * len(values), values, timestamp))
    prefix = _BODY_HEADER.pack(MAGIC, 0, timestamp, -1)
    prefix_crc = _crc32(prefix)
    pack_head, crc32 = _LENGTH_CRC.pack, _crc32
    parts: list[bytes] = []
    append = parts.append
    for value in values:
        append(pack_head(len(value) + 18, crc32(value, prefix_crc)))
        append(prefix)
        append(value)
    return b"".join(parts)


def compress_message_set(message_set: bytes, codec: int, timestamp: int) -> bytes:
    """Wrap an uncompressed message set into one compressed wrapper message."""
    if codec == Codec.NONE:
        return message_set
    return encode_message(compress(codec, message_set), None, timestamp, codec)


def validate_message_set(buf: bytes | bytearray | memoryview,
                         max_message_bytes: int = 1 << 30, *,
                         max_decompressed_bytes: int = MAX_DECOMPRESSED,
                         _inner: bool = False) -> MessageSetInfo:
    """Check that ``buf`` is exactly a sequence of whole, valid messages.

    Used by the broker on every produce: any bad CRC, bad magic, bad length,
    trailing partial message, nested compression, wrapper holding no message
    or oversized message raises ``CorruptMessageError`` (``MessageTooLargeError``
    for size, ``DecompressionLimitError`` for a wrapper inflating beyond
    ``max_decompressed_bytes``) and nothing of the set may be appended.
    """
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    count = 0
    first_ts = -1
    max_ts = -1
    unpack = _HEADER.unpack_from
    crc32 = _crc32
    try:
        while pos < end:
            if end - pos < HEADER_SIZE:
                raise CorruptMessageError(f"partial message at byte {pos} of the set")
            length, crc, magic, attributes, timestamp, key_length = unpack(mv, pos)
            stop = pos + 4 + length
            if length < 18 or stop > end:
                raise CorruptMessageError(f"bad message length {length} at byte {pos}")
            if length + 4 > max_message_bytes:
                raise MessageTooLargeError(
                    f"message of {length + 4} bytes at byte {pos} exceeds the limit of "
                    f"{max_message_bytes}")
            if crc32(mv[pos + 8:stop]) != crc:
                raise CorruptMessageError(f"CRC mismatch for the message at byte {pos}")
            if magic != MAGIC or attributes & ~_CODEC_MASK:
                raise CorruptMessageError(f"unknown magic/attributes at byte {pos}")
            if key_length < -1 or key_length > length - 18:
                raise CorruptMessageError(f"bad key length {key_length} at byte {pos}")
            if attributes:
                # Refuse nesting before decompressing: each level may hold
                # MAX_DECOMPRESSED bytes, so a few KiB nested deep would
                # otherwise pin gigabytes (and recurse without bound).
                if _inner:
                    raise CorruptMessageError("nested compression is not allowed")
                if key_length != -1:
                    raise CorruptMessageError("a compressed wrapper message must have no key")
                inner = _decompress_wrapper(attributes, mv[pos + 22:stop], pos,
                                            max_decompressed_bytes)
                info = validate_message_set(inner, max_message_bytes, _inner=True)
                if info.count == 0:
                    # a consumer could never get past it: it yields no message
                    # to take a next_offset from
                    raise CorruptMessageError(f"empty compressed wrapper at byte {pos}")
                count += info.count
            else:
                count += 1
            if first_ts < 0:
                first_ts = timestamp
            if timestamp > max_ts:
                max_ts = timestamp
            pos = stop
    finally:
        mv.release()
    return MessageSetInfo(count, end, first_ts, max_ts)


def scan_valid_prefix(buf: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """Length of the longest prefix of ``buf`` made of whole messages with good
    CRCs (shallow: wrappers are not opened), with its message count and its
    first and newest timestamps (-1 if none). Used by crash recovery."""
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    count = 0
    first_ts = -1
    max_ts = -1
    unpack = _HEADER.unpack_from
    crc32 = _crc32
    try:
        while end - pos >= HEADER_SIZE:
            length, crc, magic, attributes, timestamp, key_length = unpack(mv, pos)
            stop = pos + 4 + length
            if (length < 18 or stop > end or magic != MAGIC or attributes & ~_CODEC_MASK
                    or key_length < -1 or key_length > length - 18
                    or crc32(mv[pos + 8:stop]) != crc):
                break
            count += 1
            if first_ts < 0:
                first_ts = timestamp
            if timestamp > max_ts:
                max_ts = timestamp
            pos = stop
    finally:
        mv.release()
    return pos, count, first_ts, max_ts


def first_timestamp(buf: bytes | bytearray | memoryview) -> int:
    """Timestamp of the first message in ``buf`` (-1 if it holds no header)."""
    if len(buf) < HEADER_SIZE:
        return -1
    return _HEADER.unpack_from(buf, 0)[4]


def decode_message_set(buf: bytes | bytearray | memoryview, base_offset: int,
                       verify_crc: bool = True, topic: str = "", partition: int = -1, *,
                       _inner: bool = False) -> tuple[list[Message], int]:
    """Decode the whole messages at the start of ``buf``.

    ``base_offset`` is the byte offset of ``buf[0]`` in the partition. Returns
    the messages (wrappers opened) and the number of bytes they used; a
    partial message at the end of ``buf`` (a fetch cut it) is left for the
    next fetch. A CRC mismatch, a malformed message or nested compression
    raises ``CorruptMessageError``.
    """
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    out: list[Message] = []
    append = out.append
    unpack = _HEADER.unpack_from
    crc32 = _crc32
    new = tuple.__new__
    cls = Message
    try:
        while end - pos >= HEADER_SIZE:
            length, crc, magic, attributes, timestamp, key_length = unpack(mv, pos)
            stop = pos + 4 + length
            if stop > end:
                if length < 18:
                    raise CorruptMessageError(f"bad message length {length} at offset "
                                              f"{base_offset + pos}")
                break
            if length < 18 or magic != MAGIC or attributes & ~_CODEC_MASK or key_length < -1 \
                    or key_length > length - 18:
                # reserved attribute bits too, as the walk and the C decoder: a
                # consumer holds its position at what the walk refused, counting
                # on this to raise (else it would deliver these again and again)
                raise CorruptMessageError(f"malformed message at offset {base_offset + pos}")
            if verify_crc and crc32(mv[pos + 8:stop]) != crc:
                raise CorruptMessageError(f"CRC mismatch at offset {base_offset + pos}")
            if attributes:
                if _inner:
                    raise CorruptMessageError(f"nested compression at offset {base_offset + pos}")
                inner = _decompress_wrapper(attributes, mv[pos + 22:stop], base_offset + pos)
                inner_messages, used = decode_message_set(inner, 0, verify_crc, _inner=True)
                if used != len(inner):
                    raise CorruptMessageError(f"truncated inner message set at offset "
                                              f"{base_offset + pos}")
                offset = base_offset + pos
                last = len(inner_messages) - 1
                for i, m in enumerate(inner_messages):
                    append(new(cls, (topic, partition, offset,
                                     base_offset + stop if i == last else offset,
                                     m.timestamp, m.key, m.value)))
            elif key_length < 0:
                append(new(cls, (topic, partition, base_offset + pos, base_offset + stop,
                                 timestamp, None, bytes(mv[pos + 22:stop]))))
            else:
                key_end = pos + 22 + key_length
                append(new(cls, (topic, partition, base_offset + pos, base_offset + stop,
                                 timestamp, bytes(mv[pos + 22:key_end]),
                                 bytes(mv[key_end:stop]))))
            pos = stop
    finally:
        mv.release()
    return out, pos


def _decompress_wrapper(attributes: int, payload: memoryview, where: int,
                        max_bytes: int = MAX_DECOMPRESSED) -> bytes:
    try:
        return decompress(attributes & _CODEC_MASK, payload, max_bytes)
    except CorruptMessageError as exc:
        raise type(exc)(f"the wrapper at {where}: {exc}") from None


# ----------------------------------------------------------------- C accelerator
# broker/protocol/_speedups.c walks, checks and decodes plain messages in C.
# The functions above stay the reference: every error, compressed wrapper or
# other unusual case is handed back to them, so results (and error messages)
# are the same with or without the accelerator. SAMSA_PURE_PYTHON=1 turns it off.

py_validate_message_set = validate_message_set
py_scan_valid_prefix = scan_valid_prefix
py_decode_message_set = decode_message_set
py_encode_values = encode_values


def route_by_key(buf: bytes | bytearray | memoryview, partitions: int
                 ) -> tuple[list[bytes], list[int], bytes, int] | None:
    """Split whole, valid messages by key, as a keyed producer routes them:
    None when no message has a key (``buf`` can be forwarded as it is);
    else (parts, counts, unkeyed, unkeyed_count) with ``parts[i]`` the bytes
    of every message whose ``crc32(key) % partitions == i``, order kept,
    each message's bytes unchanged. (The mirror forwards message sets
    without decoding them; the C accelerator's ``route`` does the same.)"""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    spans: list[tuple[int, int, int]] = []
    keyed = False
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise ValueError("route_by_key() needs whole, valid messages")
        (length,) = _LENGTH.unpack_from(buf, pos)
        (key_length,) = _LENGTH.unpack_from(buf, pos + 18)
        if length < 18 or pos + 4 + length > end or not -1 <= key_length <= length - 18:
            raise ValueError("route_by_key() needs whole, valid messages")
        dest = partitions
        if key_length >= 0:
            keyed = True
            dest = _crc32(bytes(buf[pos + HEADER_SIZE:pos + HEADER_SIZE + key_length])) \
                % partitions
        spans.append((dest, pos, pos + 4 + length))
        pos += 4 + length
    if not keyed:
        return None
    chunks: list[list[bytes]] = [[] for _ in range(partitions + 1)]
    for dest, start, stop in spans:
        chunks[dest].append(bytes(buf[start:stop]))
    return ([b"".join(c) for c in chunks[:partitions]], [len(c) for c in chunks[:partitions]],
            b"".join(chunks[partitions]), len(chunks[partitions]))


py_route_by_key = route_by_key


def _load_speedups():
    import os
    if os.environ.get("SAMSA_PURE_PYTHON"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


_speedups = _load_speedups()
ACCELERATED = _speedups is not None
#: the C accelerator module (broker/protocol/_speedups.c), None where it is
#: not built or SAMSA_PURE_PYTHON is set: for the codec's other modules
speedups = _speedups

if _speedups is not None:
    _walk = _speedups.walk
    _cdecode = _speedups.decode
    _WRAPPER = 7

    def validate_message_set(buf: bytes | bytearray | memoryview,  # noqa: F811
                             max_message_bytes: int = 1 << 30, *,
                             max_decompressed_bytes: int = MAX_DECOMPRESSED,
                             **inner) -> MessageSetInfo:
        status, pos, count, first_ts, max_ts, wrappers = _walk(buf, max_message_bytes, True)
        if status or wrappers or inner:
            return py_validate_message_set(buf, max_message_bytes,
                                           max_decompressed_bytes=max_decompressed_bytes,
                                           **inner)
        return MessageSetInfo(count, pos, first_ts, max_ts)

    def scan_valid_prefix(buf: bytes | bytearray | memoryview  # noqa: F811
                          ) -> tuple[int, int, int, int]:
        _status, pos, count, first_ts, max_ts, _w = _walk(buf, 1 << 62, True)
        return pos, count, first_ts, max_ts

    def decode_message_set(buf: bytes | bytearray | memoryview, base_offset: int,  # noqa: F811
                           verify_crc: bool = True, topic: str = "",
                           partition: int = -1, **inner) -> tuple[list[Message], int]:
        if inner:   # the reference decoder's own recursion into a wrapper
            return py_decode_message_set(buf, base_offset, verify_crc, topic, partition,
                                         **inner)
        out, pos, status = _cdecode(buf, base_offset, verify_crc, topic, partition, Message)
        if status == 0 and pos == len(buf):
            return out, pos
        end = len(buf)
        mv = memoryview(buf)
        try:
            while status:
                if status != _WRAPPER:
                    # let the reference decoder raise its precise error
                    py_decode_message_set(mv[pos:], base_offset + pos, verify_crc, topic,
                                          partition)
                    raise CorruptMessageError(f"invalid message at offset {base_offset + pos}")
                size = 4 + _LENGTH.unpack_from(mv, pos)[0]
                inner, used = py_decode_message_set(mv[pos:pos + size], base_offset + pos,
                                                    verify_crc, topic, partition)
                out.extend(inner)
                pos += used
                if pos >= end:
                    break
                more, n, status = _cdecode(mv[pos:], base_offset + pos, verify_crc, topic,
                                           partition, Message)
                out.extend(more)
                pos += n
        finally:
            mv.release()
        return out, pos

    encode_values = _speedups.encode_values  # noqa: F811
    route_by_key = _speedups.route  # noqa: F811


def walk_message_set(buf: bytes | bytearray | memoryview, verify_crc: bool = True
                     ) -> tuple[int, int, int, int, int, int]:
    """(status, pos, count, first_ts, max_ts, wrappers) of the whole messages
    of ``buf`` from its start, without decoding them: status 0 when every
    byte is whole, valid messages, else where (``pos``) and why it stopped
    (1 partial, >1 invalid: a bad CRC with ``verify_crc``, a bad header).
    ``wrappers`` counts compressed wrappers (not opened)."""
    if _speedups is not None:
        return _speedups.walk(buf, 1 << 62, verify_crc)
    return py_walk_message_set(buf, verify_crc)


def py_walk_message_set(buf: bytes | bytearray | memoryview, verify_crc: bool = True
                        ) -> tuple[int, int, int, int, int, int]:
    """The reference walk_message_set (the C accelerator's ``walk`` gives the
    same; tests/protocol/test_speedups.py holds them to it)."""
    pos, end, count, first_ts, max_ts, wrappers = 0, len(buf), 0, -1, -1, 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            return 1, pos, count, first_ts, max_ts, wrappers
        length, crc, magic, attributes, ts, key_length = _HEADER.unpack_from(buf, pos)
        if length < 18:
            return 2, pos, count, first_ts, max_ts, wrappers
        if pos + 4 + length > end:
            return 1, pos, count, first_ts, max_ts, wrappers
        if verify_crc and _crc32(memoryview(buf)[pos + 8:pos + 4 + length]) != crc:
            return 4, pos, count, first_ts, max_ts, wrappers
        if magic != 0 or attributes & ~_CODEC_MASK:
            return 5, pos, count, first_ts, max_ts, wrappers
        if not -1 <= key_length <= length - 18:
            return 6, pos, count, first_ts, max_ts, wrappers
        if first_ts < 0:
            first_ts = ts
        max_ts = max(max_ts, ts)
        wrappers += 1 if attributes & _CODEC_MASK else 0
        count += 1
        pos += 4 + length
    return 0, pos, count, first_ts, max_ts, wrappers


def whole_messages_length(buf: bytes | bytearray | memoryview) -> tuple[int, bool]:
    """Bytes of the whole messages with sound headers at the start of ``buf``
    (no CRC check, wrappers not opened), and whether what follows is only a
    partial message (False: a malformed message, which a full decode will
    report). Lets a consumer ask for the next fetch before it decodes this
    one."""
    status, pos, _count, _first, _max, _wrappers = walk_message_set(buf, False)
    return pos, status in (0, 1)
