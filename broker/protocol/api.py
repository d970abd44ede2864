"""Requests and responses of the Samsa protocol (version 0), sans-IO.

Every request and response is an immutable record (a frozen dataclass; a
NamedTuple for the produce, fetch and replica fetch requests) whose
``encode_body()`` returns its body (the frame payload after the header), with
a ``decode_*`` function that reads one from a ``Reader``, raising only
``ProtocolError`` on malformed input. ``encode_request``/``encode_response``
add the header and size prefix.

Primitive types (big-endian)::

    int8 int16 int32 int64   signed integers
    string  := length:int16 utf8:byte[length]       (length -1 = null)
    bytes   := length:int32 byte[length]             (length -1 = null)
    array[T]:= count:int32 T[count]

Request  := header body;  header := api_key:int16 api_version:int16
                                    correlation_id:int32 client_id:string
Response := correlation_id:int32 error:int16 message:string body
            (when error != 0 the request failed as a whole and no body follows)

Bodies are documented on each class below and in docs/protocol.md.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from .errors import ErrorCode, ProtocolError
from .message import encode_values
from .message import speedups as _speedups

API_VERSION = 0
ANY_PARTITION = -1
LATEST = -1      # Offsets request "time" for the flushed end (the last visible offset)
EARLIEST = -2    # Offsets request "time" for the earliest retained offset


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    OFFSETS = 2
    METADATA = 3
    CREATE_TOPIC = 4
    DELETE_TOPIC = 5
    REPLICA_FETCH = 6       # a follower's fetch from its leader (Kafka 0.8's replica Fetch)
    LEADER_EPOCH_END = 7    # where a leader epoch ends (Kafka's OffsetsForLeaderEpoch, KIP-101)
    SASL_HANDSHAKE = 8      # choose an authentication mechanism (Kafka's SaslHandshake)
    SASL_AUTHENTICATE = 9   # one message of the mechanism's exchange (Kafka's SaslAuthenticate)


class Acks(enum.IntEnum):
    """When the broker answers a produce request."""

    NONE = 0      # never: fire and forget (the paper's default); errors close the connection
    WRITTEN = 1   # once the messages are in the log file (the OS page cache)
    FLUSHED = 2   # once the messages are fsync'ed, and so visible to consumers
    ALL = 3       # once every in-sync replica has the messages (the high watermark passed them)


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEADER = struct.Struct(">hhi")
_I16_I32 = struct.Struct(">hi")


class Reader:
    """Bounds-checked reading of primitive types from a buffer."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, st: struct.Struct) -> int:
        pos = self.pos
        if pos + st.size > len(self.buf):
            raise ProtocolError(f"truncated: needed {st.size} bytes at {pos}, "
                                f"have {len(self.buf) - pos}")
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)[0]

    def int8(self) -> int:
        return self._take(_I8)

    def int16(self) -> int:
        return self._take(_I16)

    def int32(self) -> int:
        return self._take(_I32)

    def int64(self) -> int:
        return self._take(_I64)

    def raw_string(self) -> bytes | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(f"bad string length {n} at {self.pos - 2}")
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s

    def string(self) -> str | None:
        raw = self.raw_string()
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def required_string(self, what: str) -> str:
        s = self.string()
        if s is None:
            raise ProtocolError(f"{what} must not be null")
        return s

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(f"bad bytes length {n} at {self.pos - 4}")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def count(self, min_item_bytes: int) -> int:
        """An array count, checked against the bytes left so that a forged
        count cannot make the decoder loop or allocate for nothing."""
        n = self.int32()
        if n < 0 or n * min_item_bytes > len(self.buf) - self.pos:
            raise ProtocolError(f"bad array count {n} at {self.pos - 4}")
        return n

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ProtocolError(f"{len(self.buf) - self.pos} unexpected trailing bytes")


def enc_string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    raw = s.encode("utf-8")
    if len(raw) > 32767:
        raise ValueError("string longer than 32767 bytes")
    return _I16.pack(len(raw)) + raw


# Error messages often quote what the client sent (a topic name may be 32,767
# bytes long): bounded here, once, so no response can fail to encode.
MAX_MESSAGE_BYTES = 1000


def enc_message(s: str | None) -> bytes:
    """An error ``message`` string, cut to MAX_MESSAGE_BYTES bytes of UTF-8
    (on a character boundary) with a visible marker when it was longer."""
    if s is None:
        return _I16.pack(-1)
    raw = s.encode("utf-8")
    if len(raw) > MAX_MESSAGE_BYTES:
        marker = f"... ({len(raw)} bytes, cut)".encode()
        raw = raw[:MAX_MESSAGE_BYTES - len(marker)].decode("utf-8", "ignore").encode() + marker
    return _I16.pack(len(raw)) + raw


def quote_name(name: str, limit: int = 200) -> str:
    """A name quoted for an error message, shortened past ``limit`` characters."""
    if len(name) <= limit:
        return repr(name)
    return repr(name[:limit]) + f"... ({len(name)} characters)"


def enc_bytes(b: bytes | None) -> bytes:
    if b is None:
        return _I32.pack(-1)
    return _I32.pack(len(b)) + b


# ----------------------------------------------------------------- header

class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    def encode(self) -> bytes:
        return _HEADER.pack(self.api_key, self.api_version, self.correlation_id) + \
            enc_string(self.client_id)


_HEADER_FIXED = struct.Struct(">hhih")    # api_key, api_version, correlation_id, client_id length


def decode_request_header(buf: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Decode a request header; returns it and the position of the body.

    Once the fixed part is read, errors carry the correlation id (see
    decode_request)."""
    if len(buf) < 10:
        raise ProtocolError(f"truncated request header ({len(buf)} bytes)")
    api_key, version, correlation_id, n = _HEADER_FIXED.unpack_from(buf, 0)
    if n == -1:
        client_id = None
    elif n < 0 or 10 + n > len(buf):
        raise _with_correlation(ProtocolError(f"bad client_id length {n}"),
                                RequestHeader(api_key, version, correlation_id, None),
                                ErrorCode.INVALID_REQUEST)
    else:
        try:
            client_id = str(buf[10:10 + n], "utf-8")
        except UnicodeDecodeError:
            raise _with_correlation(ProtocolError("client_id is not valid UTF-8"),
                                    RequestHeader(api_key, version, correlation_id, None),
                                    ErrorCode.INVALID_REQUEST) from None
    return RequestHeader(api_key, version, correlation_id, client_id), 10 + max(n, 0)


# ----------------------------------------------------------------- produce

class ProduceEntry(NamedTuple):
    topic: str
    partition: int          # ANY_PARTITION (-1): the broker picks one
    message_set: bytes


class ProduceRequest(NamedTuple):
    """acks:int8 timeout_ms:int32 entries:array[topic:string partition:int32
    message_set:bytes]"""

    acks: int
    timeout_ms: int
    entries: tuple[ProduceEntry, ...]

    def encode_body(self) -> bytes:
        parts = [_I8.pack(self.acks), _I32.pack(self.timeout_ms), _I32.pack(len(self.entries))]
        for e in self.entries:
            parts += (enc_string(e.topic), _I32.pack(e.partition), enc_bytes(e.message_set))
        return b"".join(parts)


_produce_frame = _speedups.produce_frame if _speedups is not None else None
# the accelerator's produce decoder itself, for the broker's batch-1 path:
# (correlation_id, acks, timeout_ms, [(topic, partition, start, stop, count,
# first_ts, max_ts)]) of a plain, valid produce frame, else None; None when
# the accelerator is missing
produce_frame_c = _produce_frame
_single_frames = getattr(_speedups, "single_frames", None)
_PRODUCE_FIXED = struct.Struct(">bii")    # acks, timeout_ms, entry count
_PARTITION_SIZE = struct.Struct(">ii")    # partition, message set size


def decode_produce_request(r: Reader) -> ProduceRequest:
    acks, timeout_ms, entries = _decode_produce_body(r.buf, r.pos)
    return ProduceRequest(acks, timeout_ms, tuple(ProduceEntry(*e) for e in entries))


def _decode_produce_body(buf, pos: int) -> tuple[int, int, list[tuple[str, int, object]]]:
    # The broker's hottest decoder (one call per produce request): plain
    # struct reads with explicit bounds checks instead of Reader calls.
    end = len(buf)
    if pos + 9 > end:
        raise ProtocolError("truncated produce request")
    acks, timeout_ms, count = _PRODUCE_FIXED.unpack_from(buf, pos)
    pos += 9
    if not 0 <= acks <= 3:           # Acks; the C accelerator has the same range
        raise ProtocolError(f"unknown acks mode {acks}")
    if count < 0 or count * 10 > end - pos:
        raise ProtocolError(f"bad array count {count}")
    entries = []
    for _ in range(count):
        if pos + 2 > end:
            raise ProtocolError("truncated produce entry")
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
        if n < 0 or pos + n + 8 > end:
            raise ProtocolError(f"bad topic length {n}")
        try:
            topic = str(buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("topic is not valid UTF-8") from None
        pos += n
        partition, size = _PARTITION_SIZE.unpack_from(buf, pos)
        pos += 8
        if size < 0 or pos + size > end:
            raise ProtocolError(f"bad message set size {size}")
        entries.append((topic, partition, buf[pos:pos + size]))
        pos += size
    if pos != end:
        raise ProtocolError(f"{end - pos} unexpected trailing bytes")
    return acks, timeout_ms, entries


def decode_produce_frame(payload, max_message_bytes: int = 1 << 30):
    """The broker's fast path: (correlation_id, acks, timeout_ms, entries) of
    a well-formed version-0 produce request, without building objects; None
    for anything else (then ``decode_request`` decodes it or says what is
    wrong). Each entry is (topic, partition, message_set, info), where info is
    (count, size, first_ts, max_ts) when the message set was already validated
    (by the C accelerator) and None when the caller must validate it."""
    if _produce_frame is not None:
        fast = _produce_frame(payload, max_message_bytes)
        if fast is not None:
            return produce_of_c_frame(payload, fast)
    return _py_decode_produce_frame(payload)


def produce_of_c_frame(payload, fast: tuple):
    """decode_produce_frame's answer from what ``produce_frame_c(payload, ...)``
    returned (not None) for it: for a caller that has parsed it already."""
    return fast[0], fast[1], fast[2], [
        (topic, partition, payload[start:stop], (n, stop - start, first_ts, max_ts))
        for topic, partition, start, stop, n, first_ts, max_ts in fast[3]]


def _py_decode_produce_frame(payload):
    try:
        if len(payload) < 10:
            return None
        api_key, version, correlation_id, n = _HEADER_FIXED.unpack_from(payload, 0)
        if api_key != ApiKey.PRODUCE or version != API_VERSION or n < -1:
            return None
        if n > 0:
            str(payload[10:10 + n], "utf-8")     # the client id must still be valid
        acks, timeout_ms, entries = _decode_produce_body(payload, 10 + max(n, 0))
    except (ProtocolError, UnicodeDecodeError):
        return None
    return correlation_id, acks, timeout_ms, [(t, p, ms, None) for t, p, ms in entries]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    topic: str
    partition: int          # the partition written (the broker's choice for ANY)
    error: int
    message: str
    base_offset: int        # offset of the first message appended (-1 on error)
    end_offset: int         # offset after the last message appended (-1 on error)


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    """results:array[topic:string partition:int32 error:int16 message:string
    base_offset:int64 end_offset:int64]"""

    results: tuple[ProduceResult, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(len(self.results))]
        for x in self.results:
            parts += (enc_string(x.topic), _I32.pack(x.partition), _I16.pack(x.error),
                      enc_message(x.message), _I64.pack(x.base_offset), _I64.pack(x.end_offset))
        return b"".join(parts)


def decode_produce_response(r: Reader) -> ProduceResponse:
    out = []
    for _ in range(r.count(26)):
        out.append(ProduceResult(r.required_string("topic"), r.int32(), r.int16(),
                                 r.string() or "", r.int64(), r.int64()))
    r.done()
    return ProduceResponse(tuple(out))


# ----------------------------------------------------------------- fetch

class FetchEntry(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_bytes: int


class FetchRequest(NamedTuple):
    """max_wait_ms:int32 min_bytes:int32 entries:array[topic:string
    partition:int32 offset:int64 max_bytes:int32]"""

    max_wait_ms: int
    min_bytes: int
    entries: tuple[FetchEntry, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(self.max_wait_ms), _I32.pack(self.min_bytes),
                 _I32.pack(len(self.entries))]
        for e in self.entries:
            parts += (enc_string(e.topic), _I32.pack(e.partition), _I64.pack(e.offset),
                      _I32.pack(e.max_bytes))
        return b"".join(parts)


def decode_fetch_request(r: Reader) -> FetchRequest:
    max_wait = r.int32()
    min_bytes = r.int32()
    if max_wait < 0 or min_bytes < 0:
        raise ProtocolError("max_wait_ms and min_bytes must not be negative")
    entries = []
    for _ in range(r.count(18)):
        topic = r.required_string("topic")
        partition = r.int32()
        offset = r.int64()
        max_bytes = r.int32()
        if max_bytes < 0:
            raise ProtocolError("max_bytes must not be negative")
        entries.append(FetchEntry(topic, partition, offset, max_bytes))
    r.done()
    return FetchRequest(max_wait, min_bytes, tuple(entries))


_FETCH_RESULT_TAIL = struct.Struct(">qqi")


def encode_fetch_result_header(topic: str, partition: int, error: int, message: str,
                               earliest: int, high_watermark: int, size: int) -> bytes:
    """Everything of one fetch result up to its message-set bytes, which the
    broker then sends straight from the segment file (sendfile)."""
    return (enc_string(topic) + _I32.pack(partition) + _I16.pack(error) + enc_message(message)
            + _FETCH_RESULT_TAIL.pack(earliest, high_watermark, size))


_CORRUPT_RANGE = struct.Struct(">qq")


def encode_corrupt_range(start: int, next_valid: int) -> bytes:
    """The message_set of a CORRUPT_MESSAGE fetch result for a quarantined
    range: corrupt_start:int64 next_valid:int64 (docs/protocol.md 6.2)."""
    return _CORRUPT_RANGE.pack(start, next_valid)


def decode_corrupt_range(message_set: bytes | memoryview) -> tuple[int, int]:
    """(corrupt_start, next_valid) of a CORRUPT_MESSAGE fetch result."""
    if len(message_set) != _CORRUPT_RANGE.size:
        raise ProtocolError(f"a CORRUPT_MESSAGE fetch result carries 16 bytes, not "
                            f"{len(message_set)}")
    start, next_valid = _CORRUPT_RANGE.unpack(bytes(message_set))
    if not 0 <= start < next_valid:
        raise ProtocolError(f"bad corrupt range {start}..{next_valid}")
    return start, next_valid


@dataclass(frozen=True, slots=True)
class FetchResult:
    topic: str
    partition: int
    error: int
    message: str
    earliest: int           # earliest retained offset of the partition
    high_watermark: int     # flushed end: the offset after the last visible message
    message_set: bytes      # may end in a partial message


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """results:array[topic:string partition:int32 error:int16 message:string
    earliest:int64 high_watermark:int64 message_set:bytes]"""

    results: tuple[FetchResult, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(len(self.results))]
        for x in self.results:
            parts.append(encode_fetch_result_header(x.topic, x.partition, x.error, x.message,
                                                    x.earliest, x.high_watermark,
                                                    len(x.message_set)))
            parts.append(x.message_set)
        return b"".join(parts)


def decode_fetch_response(r: Reader) -> FetchResponse:
    out = []
    for _ in range(r.count(30)):
        topic = r.required_string("topic")
        partition = r.int32()
        error = r.int16()
        message = r.string() or ""
        earliest = r.int64()
        hw = r.int64()
        n = r.int32()
        if n < -1 or r.pos + n > len(r.buf):
            raise ProtocolError(f"bad message set size {n}")
        # a view, not a copy: a fetch carries hundreds of KB
        ms = memoryview(r.buf)[r.pos:r.pos + n] if n > 0 else b""
        r.pos += max(n, 0)
        out.append(FetchResult(topic, partition, error, message, earliest, hw, ms))
    r.done()
    return FetchResponse(tuple(out))


# ----------------------------------------------------------------- offsets

@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    """topic:string partition:int32 time:int64 max_offsets:int32

    time: LATEST (-1), EARLIEST (-2), or milliseconds since the epoch."""

    API: ClassVar[ApiKey] = ApiKey.OFFSETS
    topic: str
    partition: int
    time: int
    max_offsets: int = 1

    def encode_body(self) -> bytes:
        return (enc_string(self.topic) + _I32.pack(self.partition) + _I64.pack(self.time)
                + _I32.pack(self.max_offsets))


def decode_offsets_request(r: Reader) -> OffsetsRequest:
    req = OffsetsRequest(r.required_string("topic"), r.int32(), r.int64(), r.int32())
    r.done()
    if req.max_offsets < 1:
        raise ProtocolError("max_offsets must be at least 1")
    return req


@dataclass(frozen=True, slots=True)
class OffsetsResponse:
    """error:int16 message:string offsets:array[int64] (newest first)"""

    error: int
    message: str
    offsets: tuple[int, ...]

    def encode_body(self) -> bytes:
        return (_I16.pack(self.error) + enc_message(self.message) + _I32.pack(len(self.offsets))
                + b"".join(_I64.pack(o) for o in self.offsets))


def decode_offsets_response(r: Reader) -> OffsetsResponse:
    error = r.int16()
    message = r.string() or ""
    offsets = tuple(r.int64() for _ in range(r.count(8)))
    r.done()
    return OffsetsResponse(error, message, offsets)


# ----------------------------------------------------------------- metadata

@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """topics:array[string] (empty: every topic)"""

    API: ClassVar[ApiKey] = ApiKey.METADATA
    topics: tuple[str, ...] = ()

    def encode_body(self) -> bytes:
        return _I32.pack(len(self.topics)) + b"".join(enc_string(t) for t in self.topics)


def decode_metadata_request(r: Reader) -> MetadataRequest:
    topics = tuple(r.required_string("topic") for _ in range(r.count(2)))
    r.done()
    return MetadataRequest(topics)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    earliest: int           # earliest retained offset
    latest: int             # flushed end offset (high watermark)
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    error: int
    message: str
    config: tuple[tuple[str, str], ...] = ()
    partitions: tuple[PartitionInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """broker_id:int32 host:string port:int32
    topics:array[name:string error:int16 message:string
                 config:array[key:string value:string]
                 partitions:array[partition:int32 earliest:int64 latest:int64
                                  size_bytes:int64 segments:int32]]
    max_message_bytes:int32"""

    broker_id: int
    host: str
    port: int
    topics: tuple[TopicInfo, ...] = field(default_factory=tuple)
    # the largest message the broker accepts: a length above it read at a
    # fetch offset means "not a message boundary" (docs/protocol.md 6.2)
    max_message_bytes: int = 1 << 20

    def encode_body(self) -> bytes:
        parts = [_I32.pack(self.broker_id), enc_string(self.host), _I32.pack(self.port),
                 _I32.pack(len(self.topics))]
        for t in self.topics:
            parts += (enc_string(t.name), _I16.pack(t.error), enc_message(t.message),
                      _I32.pack(len(t.config)))
            for k, v in t.config:
                parts += (enc_string(k), enc_string(v))
            parts.append(_I32.pack(len(t.partitions)))
            for p in t.partitions:
                parts += (_I32.pack(p.partition), _I64.pack(p.earliest), _I64.pack(p.latest),
                          _I64.pack(p.size_bytes), _I32.pack(p.segments))
        parts.append(_I32.pack(self.max_message_bytes))
        return b"".join(parts)


def decode_metadata_response(r: Reader) -> MetadataResponse:
    broker_id = r.int32()
    host = r.string() or ""
    port = r.int32()
    topics = []
    for _ in range(r.count(12)):
        name = r.required_string("topic")
        error = r.int16()
        message = r.string() or ""
        config = tuple((r.required_string("key"), r.required_string("value"))
                       for _ in range(r.count(4)))
        parts = tuple(PartitionInfo(r.int32(), r.int64(), r.int64(), r.int64(), r.int32())
                      for _ in range(r.count(32)))
        topics.append(TopicInfo(name, error, message, config, parts))
    max_message_bytes = r.int32()
    r.done()
    return MetadataResponse(broker_id, host, port, tuple(topics), max_message_bytes)


# ----------------------------------------------------------------- topic admin

@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """name:string partitions:int32 config:array[key:string value:string]"""

    API: ClassVar[ApiKey] = ApiKey.CREATE_TOPIC
    name: str
    partitions: int
    config: tuple[tuple[str, str], ...] = ()

    def encode_body(self) -> bytes:
        parts = [enc_string(self.name), _I32.pack(self.partitions), _I32.pack(len(self.config))]
        for k, v in self.config:
            parts += (enc_string(k), enc_string(v))
        return b"".join(parts)


def decode_create_topic_request(r: Reader) -> CreateTopicRequest:
    name = r.required_string("topic")
    partitions = r.int32()
    config = tuple((r.required_string("key"), r.required_string("value"))
                   for _ in range(r.count(4)))
    r.done()
    return CreateTopicRequest(name, partitions, config)


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    """name:string"""

    API: ClassVar[ApiKey] = ApiKey.DELETE_TOPIC
    name: str

    def encode_body(self) -> bytes:
        return enc_string(self.name)


def decode_delete_topic_request(r: Reader) -> DeleteTopicRequest:
    req = DeleteTopicRequest(r.required_string("topic"))
    r.done()
    return req


@dataclass(frozen=True, slots=True)
class EmptyResponse:
    """No body: the answer to CreateTopic and DeleteTopic, whose outcome is the
    response header's error code and message."""

    def encode_body(self) -> bytes:
        return b""


def decode_empty_response(r: Reader) -> EmptyResponse:
    r.done()
    return EmptyResponse()


# ----------------------------------------------------------------- replica fetch

class ReplicaFetchEntry(NamedTuple):
    topic: str
    partition: int
    leader_epoch: int       # the epoch of the leader the follower believes it follows
    offset: int             # the follower's log end: where it wants to read from
    max_bytes: int


class ReplicaFetchRequest(NamedTuple):
    """replica_id:int32 max_wait_ms:int32 min_bytes:int32
    entries:array[topic:string partition:int32 leader_epoch:int32 offset:int64
    max_bytes:int32]

    A follower's fetch from its leader (a NamedTuple like FetchRequest: every
    follower sends one after another, all the time)."""

    replica_id: int         # the follower's broker id
    max_wait_ms: int
    min_bytes: int
    entries: tuple[ReplicaFetchEntry, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(self.replica_id), _I32.pack(self.max_wait_ms),
                 _I32.pack(self.min_bytes), _I32.pack(len(self.entries))]
        for e in self.entries:
            parts += (enc_string(e.topic), _REPLICA_FETCH_ENTRY.pack(
                e.partition, e.leader_epoch, e.offset, e.max_bytes))
        return b"".join(parts)


_REPLICA_FETCH_ENTRY = struct.Struct(">iiqi")     # partition, leader_epoch, offset, max_bytes


def decode_replica_fetch_request(r: Reader) -> ReplicaFetchRequest:
    replica_id = r.int32()
    max_wait = r.int32()
    min_bytes = r.int32()
    if replica_id < 0:
        raise ProtocolError(f"replica_id must be a broker id (>= 0), not {replica_id}")
    if max_wait < 0 or min_bytes < 0:
        raise ProtocolError("max_wait_ms and min_bytes must not be negative")
    entries = []
    for _ in range(r.count(22)):
        topic = r.required_string("topic")
        partition = r.int32()
        leader_epoch = r.int32()
        offset = r.int64()
        max_bytes = r.int32()
        if max_bytes < 0:
            raise ProtocolError("max_bytes must not be negative")
        entries.append(ReplicaFetchEntry(topic, partition, leader_epoch, offset, max_bytes))
    r.done()
    return ReplicaFetchRequest(replica_id, max_wait, min_bytes, tuple(entries))


class EpochStart(NamedTuple):
    """One leader-epoch entry: ``epoch`` began (its leader's first message)
    at ``start_offset``."""

    epoch: int
    start_offset: int


_EPOCH_START = struct.Struct(">iq")
_REPLICA_RESULT_MIDDLE = struct.Struct(">iqqqi")  # leader_epoch, earliest, hw, log_end, #epochs


def encode_replica_fetch_result_header(topic: str, partition: int, error: int, message: str,
                                       leader_epoch: int, earliest: int, high_watermark: int,
                                       log_end: int, epochs: tuple[tuple[int, int], ...],
                                       size: int) -> bytes:
    """Everything of one replica fetch result up to its ``size`` message-set
    bytes, which the broker then sends straight from the segment file
    (sendfile), as encode_fetch_result_header does for Fetch."""
    return b"".join([
        enc_string(topic), _I32.pack(partition), _I16.pack(error), enc_message(message),
        _REPLICA_RESULT_MIDDLE.pack(leader_epoch, earliest, high_watermark, log_end,
                                    len(epochs)),
        *(_EPOCH_START.pack(epoch, start) for epoch, start in epochs),
        _I32.pack(size)])


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    topic: str
    partition: int
    error: int
    message: str
    leader_epoch: int       # the leader's current epoch
    earliest: int           # the leader's earliest retained offset
    high_watermark: int     # the committed end: every in-sync replica has the bytes below
    log_end: int            # the leader's written end (its log end offset)
    epochs: tuple[EpochStart, ...]  # (epoch, start_offset) entries covering the bytes sent
    message_set: bytes      # raw log bytes from the entry's offset; may end in a partial message


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse:
    """results:array[topic:string partition:int32 error:int16 message:string
    leader_epoch:int32 earliest:int64 high_watermark:int64 log_end:int64
    epochs:array[epoch:int32 start_offset:int64] message_set:bytes]"""

    results: tuple[ReplicaFetchResult, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(len(self.results))]
        for x in self.results:
            parts.append(encode_replica_fetch_result_header(
                x.topic, x.partition, x.error, x.message, x.leader_epoch, x.earliest,
                x.high_watermark, x.log_end, x.epochs, len(x.message_set)))
            parts.append(x.message_set)
        return b"".join(parts)


def decode_replica_fetch_response(r: Reader) -> ReplicaFetchResponse:
    out = []
    for _ in range(r.count(46)):
        topic = r.required_string("topic")
        partition = r.int32()
        error = r.int16()
        message = r.string() or ""
        leader_epoch = r.int32()
        earliest = r.int64()
        hw = r.int64()
        log_end = r.int64()
        epochs = tuple(EpochStart(r.int32(), r.int64()) for _ in range(r.count(12)))
        n = r.int32()
        if n < -1 or r.pos + n > len(r.buf):
            raise ProtocolError(f"bad message set size {n}")
        # a view, not a copy, as decode_fetch_response gives
        ms = memoryview(r.buf)[r.pos:r.pos + n] if n > 0 else b""
        r.pos += max(n, 0)
        out.append(ReplicaFetchResult(topic, partition, error, message, leader_epoch, earliest,
                                      hw, log_end, epochs, ms))
    r.done()
    return ReplicaFetchResponse(tuple(out))


# ----------------------------------------------------------------- leader epoch end

_LEADER_EPOCH_END_ENTRY = struct.Struct(">iii")   # partition, current_leader_epoch, epoch


@dataclass(frozen=True, slots=True)
class LeaderEpochEndEntry:
    topic: str
    partition: int
    current_leader_epoch: int   # the epoch of the leader the asker believes it asks
    epoch: int                  # the epoch whose end is asked (the asker's latest)


@dataclass(frozen=True, slots=True)
class LeaderEpochEndRequest:
    """replica_id:int32 entries:array[topic:string partition:int32
    current_leader_epoch:int32 epoch:int32]

    Kafka's OffsetsForLeaderEpoch (KIP-101): a replica that becomes a follower
    asks where its latest epoch ends on the leader, and truncates there."""

    API: ClassVar[ApiKey] = ApiKey.LEADER_EPOCH_END
    replica_id: int
    entries: tuple[LeaderEpochEndEntry, ...] = ()

    def encode_body(self) -> bytes:
        parts = [_I32.pack(self.replica_id), _I32.pack(len(self.entries))]
        for e in self.entries:
            parts += (enc_string(e.topic), _LEADER_EPOCH_END_ENTRY.pack(
                e.partition, e.current_leader_epoch, e.epoch))
        return b"".join(parts)


def decode_leader_epoch_end_request(r: Reader) -> LeaderEpochEndRequest:
    replica_id = r.int32()
    entries = tuple(LeaderEpochEndEntry(r.required_string("topic"), r.int32(), r.int32(),
                                        r.int32())
                    for _ in range(r.count(14)))
    r.done()
    return LeaderEpochEndRequest(replica_id, entries)


@dataclass(frozen=True, slots=True)
class LeaderEpochEndResult:
    topic: str
    partition: int
    error: int
    message: str
    epoch: int              # the largest epoch <= the asked one the leader knows; -1: none
    end_offset: int         # where that epoch ends: the start of the next one, or the log end


@dataclass(frozen=True, slots=True)
class LeaderEpochEndResponse:
    """results:array[topic:string partition:int32 error:int16 message:string
    epoch:int32 end_offset:int64]"""

    results: tuple[LeaderEpochEndResult, ...]

    def encode_body(self) -> bytes:
        parts = [_I32.pack(len(self.results))]
        for x in self.results:
            parts += (enc_string(x.topic), _I32.pack(x.partition), _I16.pack(x.error),
                      enc_message(x.message), _I32.pack(x.epoch), _I64.pack(x.end_offset))
        return b"".join(parts)


def decode_leader_epoch_end_response(r: Reader) -> LeaderEpochEndResponse:
    out = []
    for _ in range(r.count(22)):
        out.append(LeaderEpochEndResult(r.required_string("topic"), r.int32(), r.int16(),
                                        r.string() or "", r.int32(), r.int64()))
    r.done()
    return LeaderEpochEndResponse(tuple(out))


# ----------------------------------------------------------------- authentication

#: the most bytes of one authentication message (SCRAM's are under 1 KiB):
#: before a connection has authenticated its frames are capped near this
MAX_SASL_BYTES = 2048


@dataclass(frozen=True, slots=True)
class SaslHandshakeRequest:
    """mechanism:string   ("SCRAM-SHA-512")"""

    API: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE
    mechanism: str

    def encode_body(self) -> bytes:
        return enc_string(self.mechanism)


def decode_sasl_handshake_request(r: Reader) -> SaslHandshakeRequest:
    req = SaslHandshakeRequest(r.required_string("mechanism"))
    r.done()
    return req


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse:
    """mechanisms:array[string]   the mechanisms the listener takes (also sent
    with the UNSUPPORTED_SASL_MECHANISM error's message)"""

    mechanisms: tuple[str, ...]

    def encode_body(self) -> bytes:
        return _I32.pack(len(self.mechanisms)) + b"".join(enc_string(m)
                                                          for m in self.mechanisms)


def decode_sasl_handshake_response(r: Reader) -> SaslHandshakeResponse:
    mechanisms = tuple(r.required_string("mechanism") for _ in range(r.count(2)))
    r.done()
    return SaslHandshakeResponse(mechanisms)


def _sasl_bytes(r: Reader) -> bytes:
    data = r.bytes_()
    if data is None:
        raise ProtocolError("auth_bytes must not be null")
    if len(data) > MAX_SASL_BYTES:
        raise ProtocolError(f"auth_bytes of {len(data)} bytes (at most {MAX_SASL_BYTES})")
    return bytes(data)


@dataclass(frozen=True, slots=True)
class SaslAuthenticateRequest:
    """auth_bytes:bytes   the client's next message of the exchange"""

    API: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE
    auth_bytes: bytes

    def encode_body(self) -> bytes:
        return enc_bytes(self.auth_bytes)


def decode_sasl_authenticate_request(r: Reader) -> SaslAuthenticateRequest:
    req = SaslAuthenticateRequest(_sasl_bytes(r))
    r.done()
    return req


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    """auth_bytes:bytes   the server's next message of the exchange"""

    auth_bytes: bytes

    def encode_body(self) -> bytes:
        return enc_bytes(self.auth_bytes)


def decode_sasl_authenticate_response(r: Reader) -> SaslAuthenticateResponse:
    resp = SaslAuthenticateResponse(_sasl_bytes(r))
    r.done()
    return resp


# NamedTuple classes cannot declare class variables in their body.
ProduceRequest.API = ApiKey.PRODUCE
FetchRequest.API = ApiKey.FETCH
ReplicaFetchRequest.API = ApiKey.REPLICA_FETCH

# ----------------------------------------------------------------- dispatch

REQUEST_DECODERS = {
    ApiKey.PRODUCE: decode_produce_request,
    ApiKey.FETCH: decode_fetch_request,
    ApiKey.OFFSETS: decode_offsets_request,
    ApiKey.METADATA: decode_metadata_request,
    ApiKey.CREATE_TOPIC: decode_create_topic_request,
    ApiKey.DELETE_TOPIC: decode_delete_topic_request,
    ApiKey.REPLICA_FETCH: decode_replica_fetch_request,
    ApiKey.LEADER_EPOCH_END: decode_leader_epoch_end_request,
    ApiKey.SASL_HANDSHAKE: decode_sasl_handshake_request,
    ApiKey.SASL_AUTHENTICATE: decode_sasl_authenticate_request,
}

RESPONSE_DECODERS = {
    ApiKey.PRODUCE: decode_produce_response,
    ApiKey.FETCH: decode_fetch_response,
    ApiKey.OFFSETS: decode_offsets_response,
    ApiKey.METADATA: decode_metadata_response,
    ApiKey.CREATE_TOPIC: decode_empty_response,
    ApiKey.DELETE_TOPIC: decode_empty_response,
    ApiKey.REPLICA_FETCH: decode_replica_fetch_response,
    ApiKey.LEADER_EPOCH_END: decode_leader_epoch_end_response,
    ApiKey.SASL_HANDSHAKE: decode_sasl_handshake_response,
    ApiKey.SASL_AUTHENTICATE: decode_sasl_authenticate_response,
}


def encode_request(request, correlation_id: int, client_id: str | None) -> bytes:
    """The whole frame (size prefix included) of a request."""
    payload = (_HEADER.pack(request.API, API_VERSION, correlation_id) + enc_string(client_id)
               + request.encode_body())
    return _I32.pack(len(payload)) + payload


_RESPONSE_OK = _I16.pack(0) + enc_string(None)
# correlation_id:int32 + error:int16 + null message:int16
_RESPONSE_OK_HEADER_SIZE = 4 + len(_RESPONSE_OK)


def encode_response(correlation_id: int, response) -> bytes:
    """The whole frame (size prefix included) of a successful response."""
    body = response.encode_body()
    return (_I32.pack(len(body) + _RESPONSE_OK_HEADER_SIZE) + _I32.pack(correlation_id)
            + _RESPONSE_OK + body)


def encode_response_header(correlation_id: int, body_size: int) -> bytes:
    """Size prefix and header of a successful response whose body of
    ``body_size`` bytes is sent separately (fetch: sendfile)."""
    return (_I32.pack(body_size + _RESPONSE_OK_HEADER_SIZE) + _I32.pack(correlation_id)
            + _RESPONSE_OK)


def encode_error_response(correlation_id: int, error: int, message: str) -> bytes:
    """The whole frame of a response saying the request failed as a whole."""
    payload = _I32.pack(correlation_id) + _I16.pack(error) + enc_message(message)
    return _I32.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """A request that failed as a whole (the header's error was not NONE)."""

    error: int
    message: str


def decode_request(payload: bytes | memoryview):
    """Decode a request frame payload into (header, request).

    Raises ``ProtocolError``; if the header itself was readable its
    correlation id is attached as ``exc.correlation_id`` so the broker can
    answer with an error response instead of only closing the connection."""
    header, pos = decode_request_header(payload)
    try:
        decoder = REQUEST_DECODERS[ApiKey(header.api_key)]
    except ValueError:
        raise _with_correlation(ProtocolError(f"unknown API key {header.api_key}"),
                                header, ErrorCode.UNSUPPORTED_VERSION) from None
    if header.api_version != API_VERSION:
        raise _with_correlation(
            ProtocolError(f"unsupported version {header.api_version} of API {header.api_key}"),
            header, ErrorCode.UNSUPPORTED_VERSION)
    try:
        return header, decoder(Reader(payload, pos))
    except ProtocolError as exc:
        raise _with_correlation(exc, header, exc.code) from None


def _with_correlation(exc: ProtocolError, header: RequestHeader, code: int) -> ProtocolError:
    exc.code = code
    exc.correlation_id = header.correlation_id
    exc.api_key = header.api_key
    return exc


def decode_response(api_key: int, payload: bytes | memoryview):
    """Decode a response frame payload into (correlation_id, response); the
    response is an ``ErrorResponse`` when the request failed as a whole."""
    r = Reader(payload)
    correlation_id = r.int32()
    error = r.int16()
    message = r.string() or ""
    if error != ErrorCode.NONE:
        r.done()
        return correlation_id, ErrorResponse(error, message)
    try:
        decoder = RESPONSE_DECODERS[ApiKey(api_key)]
    except ValueError:
        raise ValueError(f"unknown API key {api_key}") from None
    return correlation_id, decoder(r)


class ProduceFrameEncoder:
    """Encodes single-entry produce request frames quickly (the producer's hot
    path): the same bytes as ``encode_request(ProduceRequest(...))`` without
    building dataclasses per request."""

    __slots__ = ("_client", "_tail", "_topics", "_middles")

    def __init__(self, client_id: str | None, acks: int, timeout_ms: int) -> None:
        self._client = enc_string(client_id)
        self._tail = _I8.pack(acks) + _I32.pack(timeout_ms) + _I32.pack(1)
        self._topics: dict[str, bytes] = {}
        self._middles: dict[tuple[str, int], bytes] = {}

    def frame(self, correlation_id: int, topic: str, partition: int, message_set: bytes) -> bytes:
        t = self._topics.get(topic)
        if t is None:
            t = self._topics[topic] = enc_string(topic)
        head = (_HEADER.pack(ApiKey.PRODUCE, API_VERSION, correlation_id) + self._client
                + self._tail + t + _I32.pack(partition) + _I32.pack(len(message_set)))
        return _I32.pack(len(head) + len(message_set)) + head + message_set

    def single_frames(self, first_correlation_id: int, topic: str, partition: int,
                      values: list[bytes], timestamps: list[int]) -> bytes:
        """The frames of one key-less message each, back to back, correlation
        ids from ``first_correlation_id`` on (modulo 2**31): the same bytes as
        ``frame()`` of ``encode_values([value], timestamp)`` for each; one C
        call when the accelerator is built."""
        middle = self._middles.get((topic, partition))
        if middle is None:
            t = self._topics.get(topic) or enc_string(topic)
            middle = self._middles[(topic, partition)] = (self._client + self._tail + t
                                                          + _I32.pack(partition))
        if _single_frames is not None:
            return _single_frames(middle, first_correlation_id, values, timestamps)
        return b"".join(self.frame((first_correlation_id + i) & 0x7FFFFFFF, topic, partition,
                                   encode_values([v], ts))
                        for i, (v, ts) in enumerate(zip(values, timestamps)))
