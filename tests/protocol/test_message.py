"""Messages and message sets: round trips, byte-offset addressing, compressed
wrappers, CRC coverage, and what validation refuses."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol.compression import Codec, compress
from broker.protocol.errors import CorruptMessageError, MessageTooLargeError, ProtocolError
from broker.protocol.message import (
    HEADER_SIZE, compress_message_set, decode_message_set, encode_message, encode_message_set,
    encode_values, first_timestamp, message_size, scan_valid_prefix, validate_message_set)

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CODECS = [Codec.GZIP, Codec.LZ4, Codec.ZSTD]

# Negative timestamps are not used: the set's first/newest timestamp treat
# any negative value as "none" (see docs/protocol.md, message format).
timestamps = st.integers(0, 2**63 - 1)
triples = st.tuples(st.one_of(st.none(), st.binary(max_size=16)), st.binary(max_size=64),
                    timestamps)
message_lists = st.lists(triples, max_size=8)
base_offsets = st.integers(0, 2**62)


def plain(messages):
    return [(m.key, m.value, m.timestamp) for m in messages]


def raw_message(magic=0, attributes=0, timestamp=0, key_length=-1, rest=b"", length=None,
                crc=None) -> bytes:
    """A message with every field chosen, CRC computed unless given."""
    body = struct.pack(">bbqi", magic, attributes, timestamp, key_length) + rest
    return struct.pack(">iI", len(body) + 4 if length is None else length,
                       zlib.crc32(body) if crc is None else crc) + body


# --------------------------------------------------------------- round trips

@SETTINGS
@given(message_lists, base_offsets)
def test_message_set_round_trip(triples_, base):
    ms = encode_message_set(triples_)
    info = validate_message_set(ms)
    assert (info.count, info.size) == (len(triples_), len(ms))
    assert info.first_timestamp == (triples_[0][2] if triples_ else -1)
    assert info.max_timestamp == max([t for _k, _v, t in triples_] + [-1])
    messages, used = decode_message_set(ms, base)
    assert used == len(ms)
    assert plain(messages) == triples_
    # offsets are byte positions: each message starts where the previous ended
    expected_offset = base
    for m, (key, value, _ts) in zip(messages, triples_):
        assert m.offset == expected_offset
        size = message_size(key, value)
        assert m.next_offset == m.offset + size
        length = struct.unpack_from(">i", ms, m.offset - base)[0]
        assert m.next_offset == m.offset + 4 + length
        expected_offset = m.next_offset
    assert expected_offset == base + len(ms)


@SETTINGS
@given(message_lists)
def test_encoders_agree(triples_):
    ms = encode_message_set(triples_)
    assert ms == b"".join(encode_message(v, k, t) for k, v, t in triples_)
    assert scan_valid_prefix(ms)[:2] == (len(ms), len(triples_))
    if triples_:
        assert first_timestamp(ms) == triples_[0][2]


@SETTINGS
@given(st.lists(st.binary(max_size=32), max_size=8), timestamps)
def test_encode_values_is_keyless_messages_with_one_timestamp(values, ts):
    assert encode_values(values, ts) == encode_message_set([(None, v, ts) for v in values])


@SETTINGS
@given(st.lists(triples, min_size=1, max_size=8), st.sampled_from(CODECS), base_offsets,
       timestamps)
def test_compressed_round_trip(triples_, codec, base, wrapper_ts):
    inner = encode_message_set(triples_)
    wrapper = compress_message_set(inner, codec, wrapper_ts)
    info = validate_message_set(wrapper)
    assert (info.count, info.size) == (len(triples_), len(wrapper))
    assert info.first_timestamp == info.max_timestamp == wrapper_ts   # the wrapper's
    messages, used = decode_message_set(wrapper, base)
    assert used == len(wrapper)
    assert plain(messages) == triples_
    # every inner message carries the wrapper's offset; only the last one
    # moves a consumer past the wrapper
    assert {m.offset for m in messages} == {base}
    assert [m.next_offset for m in messages] == [base] * (len(triples_) - 1) + \
        [base + len(wrapper)]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([Codec.NONE] + CODECS),
                          st.lists(triples, min_size=1, max_size=4)), max_size=5),
       base_offsets)
def test_mixed_plain_and_compressed_sets(parts, base):
    chunks = [compress_message_set(encode_message_set(ts), codec, 7) for codec, ts in parts]
    ms = b"".join(chunks)
    assert validate_message_set(ms).count == sum(len(ts) for _c, ts in parts)
    messages, used = decode_message_set(ms, base)
    assert used == len(ms)
    assert plain(messages) == [t for _c, ts in parts for t in ts]
    # resuming from any message's next_offset never skips a message
    for i, m in enumerate(messages):
        rest, _ = decode_message_set(ms[m.next_offset - base:], m.next_offset)
        assert len(rest) >= len(messages) - i - 1


def test_compress_with_no_codec_is_the_set_itself():
    ms = encode_message(b"v")
    assert compress_message_set(ms, Codec.NONE, 0) is ms


# --------------------------------------------------------------- partial tails

@SETTINGS
@given(st.lists(triples, min_size=1, max_size=6), base_offsets, st.data())
def test_a_cut_set_decodes_its_whole_messages_and_validation_refuses_it(triples_, base, data):
    ms = encode_message_set(triples_)
    cut = data.draw(st.integers(0, len(ms) - 1))
    messages, used = decode_message_set(ms[:cut], base)
    ends = [m.next_offset - base for m in decode_message_set(ms, base)[0]]
    whole = [e for e in ends if e <= cut]
    assert used == (whole[-1] if whole else 0)
    assert plain(messages) == triples_[:len(whole)]
    if cut not in [0] + ends:
        with pytest.raises(CorruptMessageError):
            validate_message_set(ms[:cut])
    assert scan_valid_prefix(ms[:cut])[:2] == (used, len(whole))


def test_max_bytes_smaller_than_one_message_decodes_nothing():
    ms = encode_message(b"x" * 100)
    assert decode_message_set(ms[:50], 0) == ([], 0)
    # the client reads the length to learn the fetch size it needs
    assert 4 + struct.unpack_from(">i", ms)[0] == len(ms)


@SETTINGS
@given(st.lists(triples, min_size=1, max_size=6), st.binary(max_size=40))
def test_scan_valid_prefix_stops_at_garbage(triples_, garbage):
    ms = encode_message_set(triples_)
    pos, count, first, newest = scan_valid_prefix(ms + garbage)
    assert pos >= len(ms) and count >= len(triples_)
    assert scan_valid_prefix(ms + b"\x00" * 22)[:2] == (len(ms), len(triples_))
    assert first == triples_[0][2]
    assert newest >= max(t for _k, _v, t in triples_)


def test_empty_set():
    assert validate_message_set(b"").count == 0
    assert validate_message_set(b"").first_timestamp == -1
    assert decode_message_set(b"", 0) == ([], 0)
    assert scan_valid_prefix(b"") == (0, 0, -1, -1)
    assert first_timestamp(b"") == -1


# --------------------------------------------------------------- CRC

SAMPLES = [
    encode_message(b"hi", None, 1000),
    encode_message(b"value", b"key", -5),
    encode_message(b"", None, 0),
    encode_message_set([(b"a", b"b", 1), (None, b"c", 2)]),
] + [compress_message_set(encode_message_set([(b"a", b"b", 1), (None, b"c" * 50, 2)]), c, 2)
     for c in CODECS]


@pytest.mark.parametrize("ms", SAMPLES, ids=lambda ms: f"{len(ms)}B")
def test_flipping_any_byte_is_caught(ms):
    validate_message_set(ms)
    for i in range(len(ms)):
        for mask in (0x01, 0x80, 0xFF):
            bad = ms[:i] + bytes([ms[i] ^ mask]) + ms[i + 1:]
            with pytest.raises(CorruptMessageError):
                validate_message_set(bad)


@SETTINGS
@given(st.lists(triples, min_size=1, max_size=4), st.sampled_from([Codec.NONE] + CODECS),
       st.data())
def test_flipping_a_random_byte_is_caught(triples_, codec, data):
    ms = compress_message_set(encode_message_set(triples_), codec, 0)
    i = data.draw(st.integers(0, len(ms) - 1))
    bad = ms[:i] + bytes([ms[i] ^ data.draw(st.integers(1, 255))]) + ms[i + 1:]
    with pytest.raises(CorruptMessageError):
        validate_message_set(bad)


def test_crc_does_not_cover_length_but_a_wrong_length_is_still_caught():
    m = encode_message(b"hello", b"k", 3)
    assert int.from_bytes(m[4:8], "big") == zlib.crc32(m[8:])
    for length in (18, 19, len(m) - 5, len(m) - 3, len(m), 2**31 - 1, 17, 0, -1):
        bad = length.to_bytes(4, "big", signed=True) + m[4:]
        with pytest.raises(CorruptMessageError):
            validate_message_set(bad)


def test_decode_checks_crc_unless_told_not_to():
    m = encode_message(b"hello")
    bad = m[:-1] + b"X"
    with pytest.raises(CorruptMessageError, match="CRC"):
        decode_message_set(bad, 0)
    assert decode_message_set(bad, 0, verify_crc=False)[0][0].value == b"hellX"
    assert scan_valid_prefix(bad)[0] == 0


# --------------------------------------------------------------- what validation refuses

def test_bad_magic_attributes_and_key_length():
    for bad in (raw_message(magic=1, rest=b"v"),
                raw_message(attributes=0x08, rest=b"v"),        # bits 3-7 must be zero
                raw_message(attributes=-128, rest=b"v"),
                raw_message(key_length=-2, rest=b"v"),
                raw_message(key_length=2, rest=b"v")):          # longer than what follows
        with pytest.raises(CorruptMessageError):
            validate_message_set(bad)
        assert scan_valid_prefix(bad)[0] == 0


@pytest.mark.parametrize("codec", [4, 5, 6, 7])
def test_unknown_codec(codec):
    bad = raw_message(attributes=codec, rest=b"payload")
    with pytest.raises(CorruptMessageError, match="codec"):
        validate_message_set(bad)
    with pytest.raises(CorruptMessageError, match="codec"):
        decode_message_set(bad, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_wrapper_rules(codec):
    inner = encode_message(b"v", None, 1)
    payload = compress(codec, inner)
    with pytest.raises(CorruptMessageError, match="no key"):
        validate_message_set(raw_message(attributes=codec, key_length=0, rest=payload))
    with pytest.raises(CorruptMessageError, match="decompress"):
        validate_message_set(raw_message(attributes=codec, rest=b"not compressed"))
    # the inner set must be whole and valid
    for bad_inner in (inner[:-1], inner[:4] + b"\x00\x00\x00\x00" + inner[8:]):
        wrapper = raw_message(attributes=codec, rest=compress(codec, bad_inner))
        with pytest.raises(CorruptMessageError):
            validate_message_set(wrapper)
        with pytest.raises(CorruptMessageError):
            decode_message_set(wrapper, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_empty_wrapper_is_refused(codec):
    # it yields no message, so a consumer would get no next_offset to move on with
    with pytest.raises(CorruptMessageError, match="empty"):
        validate_message_set(compress_message_set(b"", codec, 0))


@pytest.mark.parametrize("codec", CODECS)
def test_nested_compression_is_refused(codec):
    nested = compress_message_set(compress_message_set(encode_message(b"v"), codec, 0),
                                  codec, 0)
    with pytest.raises(CorruptMessageError, match="nested"):
        validate_message_set(nested)
    with pytest.raises(CorruptMessageError, match="nested"):
        decode_message_set(nested, 0)


def test_nesting_is_refused_without_opening_the_inner_wrapper(monkeypatch):
    import broker.protocol.message as message
    calls = []
    real = message.decompress

    def counting(codec, data, *limit):
        calls.append(codec)
        return real(codec, data, *limit)

    ms = encode_message(b"v")
    for _ in range(50):
        ms = compress_message_set(ms, Codec.GZIP, 0)
    monkeypatch.setattr(message, "decompress", counting)
    for check in (validate_message_set, lambda b: decode_message_set(b, 0)):
        calls.clear()
        with pytest.raises(CorruptMessageError, match="nested"):
            check(ms)
        assert len(calls) == 1      # each level could hold 64 MiB: open only one


def test_deep_nesting_raises_only_corrupt_message():
    ms = encode_message(b"v")
    for _ in range(1500):           # deeper than the recursion limit
        ms = compress_message_set(ms, Codec.LZ4, 0)
    with pytest.raises(CorruptMessageError):
        validate_message_set(ms)
    with pytest.raises(CorruptMessageError):
        decode_message_set(ms, 0)


def test_message_too_large():
    ms = encode_message(b"x" * 100)
    assert validate_message_set(ms, max_message_bytes=len(ms)).count == 1
    with pytest.raises(MessageTooLargeError) as info:
        validate_message_set(ms, max_message_bytes=len(ms) - 1)
    assert isinstance(info.value, CorruptMessageError)
    assert isinstance(info.value, ProtocolError)
    # inner messages are held to the limit too
    wrapper = compress_message_set(ms, Codec.GZIP, 0)
    assert len(wrapper) < len(ms)
    with pytest.raises(MessageTooLargeError):
        validate_message_set(wrapper, max_message_bytes=len(ms) - 1)


def test_header_size():
    assert HEADER_SIZE == 22 == len(encode_message(b""))
    assert message_size(None, b"") == 22
    assert message_size(b"ab", b"cde") == 27 == len(encode_message(b"cde", b"ab"))
