"""Fuzzing: whatever bytes a peer sends, every decoder raises only
ProtocolError (or a subclass) — never IndexError, struct.error,
UnicodeDecodeError, MemoryError, RecursionError, a codec library's error…

Random bytes rarely get past a length or a CRC check, so besides plain
binary() the strategies below build inputs that are well-formed up to a point
(a readable request header, a message with a correct CRC) to reach the
deeper branches. Mutations of valid encodings live next to the round trips
(test_api.py, test_message.py)."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import api, message
from broker.protocol.api import ApiKey, decode_request, decode_response
from broker.protocol.compression import Codec, compress, decompress
from broker.protocol.errors import ProtocolError
from broker.protocol.framing import FrameDecoder
from broker.protocol.message import (decode_message_set, encode_message_set, first_timestamp,
                                     scan_valid_prefix, validate_message_set)

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

junk = st.binary(max_size=300)


def only_protocol_errors(fn, *args, **kwargs):
    """Run ``fn``; a ProtocolError is fine, anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except ProtocolError:
        return None


# --------------------------------------------------------------- requests and responses

@st.composite
def request_payloads(draw):
    """A readable header (often a known API) followed by random body bytes."""
    api_key = draw(st.one_of(st.sampled_from(list(ApiKey)), st.integers(-2**15, 2**15 - 1)))
    version = draw(st.sampled_from([0, 0, 0, 1, -1]))
    client = draw(st.one_of(st.just(b"\xff\xff"), st.just(b"\x00\x01c"), st.binary(max_size=4)))
    header = struct.pack(">hhi", api_key, version, draw(st.integers(-2**31, 2**31 - 1)))
    return header + client + draw(junk)


@SETTINGS
@given(st.one_of(junk, request_payloads()))
def test_decode_request(payload):
    only_protocol_errors(decode_request, payload)
    only_protocol_errors(decode_request, memoryview(payload))
    # the broker's fast path never raises: it declines (None) what it cannot take
    for limit in (1 << 30, 40):
        fast = api.decode_produce_frame(payload, limit)
        if fast is not None:
            header, request = decode_request(payload)
            assert (header.correlation_id, request.acks, request.timeout_ms) == fast[:3]
            assert request.entries == tuple(api.ProduceEntry(*e[:3]) for e in fast[3])
            for entry in fast[3]:
                if len(entry) > 3 and entry[3] is not None:
                    assert tuple(entry[3]) == tuple(validate_message_set(entry[2], limit))


@st.composite
def response_payloads(draw):
    """A header with error 0 (so the body is parsed), or random bytes."""
    ok_header = struct.pack(">ihh", draw(st.integers(-2**31, 2**31 - 1)), 0, -1)
    return draw(st.one_of(junk, st.builds(lambda b: ok_header + b, junk)))


@SETTINGS
@given(response_payloads())
def test_decode_response_for_every_api(payload):
    for api_key in ApiKey:
        only_protocol_errors(decode_response, api_key, payload)


@st.composite
def counted_bodies(draw):
    """Bodies made of plausible primitives: small counts and lengths that
    partly fit, so the array and string readers get exercised."""
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["i8", "i16", "i32", "i64", "str", "count"]))
        if kind == "str":
            raw = draw(st.binary(max_size=6))
            n = draw(st.sampled_from([len(raw), -1, len(raw) + 1, -2]))
            parts.append(struct.pack(">h", n) + raw)
        elif kind == "count":
            parts.append(struct.pack(">i", draw(st.integers(-2, 3))))
        else:
            fmt = {"i8": ">b", "i16": ">h", "i32": ">i", "i64": ">q"}[kind]
            bits = struct.calcsize(fmt) * 8
            parts.append(struct.pack(fmt, draw(st.integers(-2**(bits - 1),
                                                           2**(bits - 1) - 1))))
    return b"".join(parts)


@SETTINGS
@given(st.sampled_from(list(ApiKey)), counted_bodies())
def test_structured_bodies(api_key, body):
    request = struct.pack(">hhih", api_key, 0, 1, -1) + body
    only_protocol_errors(decode_request, request)
    if api.decode_produce_frame(request) is not None:
        decode_request(request)
    only_protocol_errors(decode_response, api_key, struct.pack(">ihh", 1, 0, -1) + body)


@st.composite
def replica_fetch_response_payloads(draw):
    """A ReplicaFetch response whose first result is well-formed up to its
    epochs, then plausible epochs and a message set length that may not fit:
    the epoch and message-set branches, which random bytes rarely reach."""
    head = api.encode_replica_fetch_result_header(
        draw(st.text(max_size=4)), draw(st.integers(-2, 3)), draw(st.integers(-1, 19)), "",
        draw(st.integers(-1, 5)), 0, draw(st.integers(-1, 100)), draw(st.integers(-1, 100)),
        (), 0)[:-8]                        # up to log_end: the epochs and the set are drawn
    n = draw(st.integers(-2, 4))
    epochs = b"".join(struct.pack(">iq", draw(st.integers(-1, 9)), draw(st.integers(-1, 99)))
                      for _ in range(max(0, draw(st.integers(0, 4)))))
    size = draw(st.integers(-2, 40))
    return b"".join([struct.pack(">ihh", 1, 0, -1), struct.pack(">i", draw(st.integers(-1, 2))),
                     head, struct.pack(">i", n), epochs, struct.pack(">i", size),
                     draw(st.binary(max_size=40))])


@SETTINGS
@given(replica_fetch_response_payloads())
def test_replica_fetch_responses(payload):
    only_protocol_errors(decode_response, ApiKey.REPLICA_FETCH, payload)
    only_protocol_errors(decode_response, ApiKey.REPLICA_FETCH, memoryview(payload))


# --------------------------------------------------------------- framing

@SETTINGS
@given(st.lists(junk, max_size=6), st.integers(1, 512))
def test_frame_decoder(chunks, limit):
    d = FrameDecoder(limit)
    for chunk in chunks:
        try:
            frames = d.feed(chunk)
        except ProtocolError:
            return                       # the connection is closed after this
        assert all(len(f) <= limit for f in frames)
        assert d.buffered < 4 + limit


# --------------------------------------------------------------- message sets

@st.composite
def crc_valid_messages(draw):
    """One message whose CRC is right but whose other fields may be anything,
    including a wrapper whose payload really decompresses (to junk or to a
    message set)."""
    magic = draw(st.sampled_from([0, 0, 0, 1, -1]))
    attributes = draw(st.one_of(st.integers(0, 3), st.integers(-128, 127)))
    timestamp = draw(st.integers(-2**63, 2**63 - 1))
    codec = attributes & 7
    if attributes in (1, 2, 3) and draw(st.booleans()):
        inner = draw(st.one_of(
            junk,
            st.builds(encode_message_set, st.lists(st.tuples(
                st.one_of(st.none(), st.binary(max_size=4)), st.binary(max_size=8),
                st.integers(0, 2**40)), max_size=3)),
            st.builds(lambda: b"")))
        rest = compress(codec, inner)
        key_length = draw(st.sampled_from([-1, -1, 0, len(rest) + 1]))
    else:
        rest = draw(st.binary(max_size=40))
        key_length = draw(st.one_of(st.just(-1), st.integers(-3, len(rest) + 2),
                                    st.integers(-2**31, 2**31 - 1)))
    body = struct.pack(">bbqi", magic, attributes, timestamp, key_length) + rest
    length = draw(st.one_of(st.just(len(body) + 4), st.integers(-2**31, 2**31 - 1)))
    return struct.pack(">iI", length, zlib.crc32(body)) + body


message_sets = st.one_of(
    junk,
    st.lists(crc_valid_messages(), max_size=4).map(b"".join),
    st.builds(lambda a, b: a + b, st.lists(crc_valid_messages(), max_size=3).map(b"".join),
              junk))


@SETTINGS
@given(message_sets, st.integers(0, 2**62))
def test_message_set_decoders(buf, base):
    only_protocol_errors(validate_message_set, buf)
    only_protocol_errors(validate_message_set, buf, max_message_bytes=30)
    only_protocol_errors(decode_message_set, buf, base)
    only_protocol_errors(decode_message_set, bytearray(buf), base, verify_crc=False)
    pos, count, _first, _newest = scan_valid_prefix(buf)   # never raises at all
    assert 0 <= pos <= len(buf) and 0 <= count
    if pos:
        assert scan_valid_prefix(memoryview(buf)[:pos])[:2] == (pos, count)
    first_timestamp(buf)
    whole = getattr(message, "whole_messages_length", None)
    if whole is not None:                  # reads length fields only; never raises
        length, only_partial_follows = whole(buf)
        assert 0 <= length <= len(buf)


@SETTINGS
@given(message_sets, st.data())
def test_mutated_message_sets(buf, data):
    if not buf:
        return
    i = data.draw(st.integers(0, len(buf) - 1))
    flipped = buf[:i] + bytes([buf[i] ^ data.draw(st.integers(1, 255))]) + buf[i + 1:]
    for candidate in (flipped, buf[:i]):
        only_protocol_errors(validate_message_set, candidate)
        only_protocol_errors(decode_message_set, candidate, 0)
        scan_valid_prefix(candidate)


# --------------------------------------------------------------- decompression

@SETTINGS
@given(st.integers(-8, 8), junk)
def test_decompress_random(codec, payload):
    only_protocol_errors(decompress, codec, payload)


@SETTINGS
@given(st.sampled_from([Codec.GZIP, Codec.LZ4, Codec.ZSTD]), st.binary(max_size=200),
       st.data())
def test_decompress_mutated(codec, data_, data):
    packed = compress(codec, data_)
    i = data.draw(st.integers(0, len(packed) - 1))
    flipped = packed[:i] + bytes([packed[i] ^ data.draw(st.integers(1, 255))]) + packed[i + 1:]
    only_protocol_errors(decompress, codec, flipped)
    only_protocol_errors(decompress, codec, packed[:i])
    only_protocol_errors(decompress, codec, packed + data.draw(st.binary(max_size=8)))


# --------------------------------------------------------------- accelerator vs reference

def outcome(fn, *args):
    """What ``fn`` returns, or the class of the ProtocolError it raises."""
    try:
        return fn(*args)
    except ProtocolError as exc:
        return type(exc)


needs_accelerator = pytest.mark.skipif(not getattr(message, "ACCELERATED", False),
                                       reason="the C accelerator is not built")


@needs_accelerator
@SETTINGS
@given(message_sets, st.integers(0, 2**62), st.booleans())
def test_accelerator_agrees_with_reference(buf, base, verify_crc):
    assert outcome(message.validate_message_set, buf) == \
        outcome(message.py_validate_message_set, buf)
    assert outcome(message.validate_message_set, buf, 30) == \
        outcome(message.py_validate_message_set, buf, 30)
    assert message.scan_valid_prefix(buf) == message.py_scan_valid_prefix(buf)
    assert outcome(message.decode_message_set, buf, base, verify_crc) == \
        outcome(message.py_decode_message_set, buf, base, verify_crc)


@needs_accelerator
@SETTINGS
@given(message_sets, st.data())
def test_accelerator_agrees_on_mutations(buf, data):
    if not buf:
        return
    i = data.draw(st.integers(0, len(buf) - 1))
    flipped = buf[:i] + bytes([buf[i] ^ data.draw(st.integers(1, 255))]) + buf[i + 1:]
    for candidate in (flipped, buf[:i], bytearray(flipped), memoryview(buf)[i:]):
        assert outcome(message.validate_message_set, candidate) == \
            outcome(message.py_validate_message_set, candidate)
        assert message.scan_valid_prefix(candidate) == message.py_scan_valid_prefix(candidate)
        assert outcome(message.decode_message_set, candidate, 7) == \
            outcome(message.py_decode_message_set, candidate, 7)


@needs_accelerator
@SETTINGS
@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(-2**63, 2**63 - 1))
def test_accelerated_encode_values_agrees(values, ts):
    assert message.encode_values(values, ts) == message.py_encode_values(values, ts)


# --------------------------------------------------------------- the broker's produce fast path

@SETTINGS
@given(st.lists(st.tuples(st.text(max_size=6), st.integers(-2, 3), message_sets), max_size=3),
       st.sampled_from([0, 1, 2, 3]), st.integers(20, 1 << 30), st.data())
def test_fast_produce_path_on_produce_requests(entries, acks, limit, data):
    request = api.ProduceRequest(acks, 100, tuple(api.ProduceEntry(*e) for e in entries))
    payload = api.encode_request(request, 3, "c")[4:]
    i = data.draw(st.integers(0, len(payload)))
    mutation = data.draw(st.sampled_from(["none", "flip", "cut"]))
    if mutation == "flip" and i < len(payload):
        payload = payload[:i] + bytes([payload[i] ^ data.draw(st.integers(1, 255))]) + \
            payload[i + 1:]
    elif mutation == "cut":
        payload = payload[:i]
    fast = api.decode_produce_frame(payload, limit)
    decoded = only_protocol_errors(decode_request, payload)
    if mutation == "none":
        assert fast is not None and decoded is not None
    if fast is None:
        return
    assert decoded is not None, "the fast path took a request decode_request refuses"
    header, request = decoded
    assert (header.correlation_id, request.acks, request.timeout_ms) == fast[:3]
    assert request.entries == tuple(api.ProduceEntry(*e[:3]) for e in fast[3])
    for entry in fast[3]:
        if len(entry) > 3 and entry[3] is not None:
            assert tuple(entry[3]) == tuple(validate_message_set(entry[2], limit))
