"""Compression codecs: round trips, and decompression that refuses garbage,
truncation and bombs with CorruptMessageError while holding bounded memory."""
from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import compression
from broker.protocol.compression import Codec, compress, decompress
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
def test_bomb_is_refused_within_bounded_memory(codec, monkeypatch):
    # 32 MiB of zeros compress to a few KiB; with the limit lowered to 1 MiB
    # decompression must stop near the limit, not expand everything first.
    limit = 1 << 20
    bomb = compress(codec, bytes(32 << 20))
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED", limit)
    assert len(decompress(codec, compress(codec, bytes(limit)))) == limit
    tracemalloc.start()
    try:
        with pytest.raises(CorruptMessageError):
            decompress(codec, bomb)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit + len(bomb)


def test_zstd_bomb_without_declared_size_is_refused(monkeypatch):
    import zstandard
    limit = 1 << 20
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(8 << 20))
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED", limit)
    with pytest.raises(CorruptMessageError):
        decompress(Codec.ZSTD, bomb)


def test_from_name():
    assert Codec.from_name("GZip") is Codec.GZIP
    assert [Codec.from_name(c.name.lower()) for c in Codec] == list(Codec)
    with pytest.raises(ValueError, match="snappy"):
        Codec.from_name("snappy")
