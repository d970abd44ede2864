"""Compression codecs: round trips, and decompression that refuses garbage,
truncation and bombs with CorruptMessageError while holding bounded memory."""
from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import compression
from broker.protocol.compression import (Codec, DecompressionLimitError, compress,
                                         decompress)
from broker.protocol.errors import CorruptMessageError

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CODECS = [Codec.GZIP, Codec.LZ4, Codec.ZSTD]


@SETTINGS
@given(st.binary(max_size=2000), st.sampled_from(CODECS))
def test_round_trip(data, codec):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


def test_none_is_identity_for_compress_only():
    assert compress(Codec.NONE, b"abc") == b"abc"
    with pytest.raises(CorruptMessageError):     # a wrapper never has codec 0
        decompress(Codec.NONE, b"abc")


@pytest.mark.parametrize("codec", [-1, 4, 7, 99])
def test_unknown_codec(codec):
    with pytest.raises(CorruptMessageError, match="codec"):
        decompress(codec, b"abc")
    with pytest.raises(ValueError):
        compress(codec, b"abc")


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_is_refused(codec):
    packed = compress(codec, bytes(range(256)) * 8)
    for cut in range(len(packed)):
        with pytest.raises(CorruptMessageError):
            decompress(codec, packed[:cut])


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from(CODECS))
def test_garbage_raises_only_corrupt_message(garbage, codec):
    try:
        decompress(codec, garbage)
    except CorruptMessageError:
        pass


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_is_refused_within_bounded_memory(codec):
    # 32 MiB of zeros compress to a few KiB; with the limit lowered to 1 MiB
    # decompression must stop near the limit, not expand everything first.
    limit = 1 << 20
    bomb = compress(codec, bytes(32 << 20))
    assert len(decompress(codec, compress(codec, bytes(limit)), limit)) == limit
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(codec, bomb, limit)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit + len(bomb)


def test_zstd_bomb_without_declared_size_is_refused():
    import zstandard
    limit = 1 << 20
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(8 << 20))
    with pytest.raises(DecompressionLimitError):
        decompress(Codec.ZSTD, bomb, limit)


def test_from_name():
    assert Codec.from_name("GZip") is Codec.GZIP
    assert [Codec.from_name(c.name.lower()) for c in Codec] == list(Codec)
    with pytest.raises(ValueError, match="snappy"):
        Codec.from_name("snappy")


@pytest.mark.parametrize("codec", CODECS)
def test_trailing_data_after_the_first_member_or_frame_is_refused(codec):
    """Issue 9, defect 8: the broker used to check the first gzip member only,
    while readers that go on (gzip.decompress) would return what follows."""
    first, second = compress(codec, b"checked"), compress(codec, b"never checked")
    assert decompress(codec, first) == b"checked"
    with pytest.raises(CorruptMessageError, match="after its first"):
        decompress(codec, first + second)
    with pytest.raises(CorruptMessageError):
        decompress(codec, first + b"\0garbage")


def test_a_wrapper_with_two_gzip_members_is_refused_by_the_broker_and_the_reader():
    from broker.protocol.message import (decode_message_set, encode_message,
                                         encode_message_set, validate_message_set)
    inner = encode_message_set([(None, b"a", 1)])
    sneaked = encode_message_set([(None, b"sneaked in", 1)])
    wrapper = encode_message(compress(Codec.GZIP, inner) + compress(Codec.GZIP, sneaked),
                             None, 1, codec=Codec.GZIP)
    with pytest.raises(CorruptMessageError):
        validate_message_set(wrapper)
    with pytest.raises(CorruptMessageError):
        decode_message_set(wrapper, 0)
