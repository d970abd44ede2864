"""Compression codecs for wrapper messages (attributes bits 0-2). Pure functions.

gzip uses the standard library; lz4 (frame format) and zstd use the ``lz4``
and ``zstandard`` packages. Decompression output is capped so that a small
malicious payload cannot expand into unbounded memory.
"""
from __future__ import annotations

import enum
import gzip
import zlib

from .errors import CorruptMessageError

MAX_DECOMPRESSED = 64 << 20   # a wrapper may hold at most 64 MiB of inner messages


class Codec(enum.IntEnum):
    NONE = 0
    GZIP = 1
    LZ4 = 2
    ZSTD = 3

    @classmethod
    def from_name(cls, name: str) -> "Codec":
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression codec {name!r}; "
                             f"choose one of {', '.join(c.name.lower() for c in cls)}") from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == Codec.GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == Codec.LZ4:
        import lz4.frame
        return lz4.frame.compress(data)
    if codec == Codec.ZSTD:
        import zstandard
        return zstandard.ZstdCompressor(level=3).compress(data)
    if codec == Codec.NONE:
        return data
    raise ValueError(f"unknown codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a wrapper's payload; raise only ``CorruptMessageError`` on
    garbage, a truncated payload or one expanding beyond ``MAX_DECOMPRESSED``."""
    try:
        return _decompress(codec, data)
    except CorruptMessageError:
        raise
    except Exception as exc:  # the codec libraries raise many types on garbage
        raise CorruptMessageError(
            f"cannot decompress a {_codec_name(codec)} payload: {exc}") from None


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == Codec.GZIP:
        d = zlib.decompressobj(wbits=31)
        out = d.decompress(data, MAX_DECOMPRESSED)
        if d.unconsumed_tail or not d.eof:
            raise CorruptMessageError("gzip payload is truncated or too large")
        return out
    if codec == Codec.LZ4:
        import lz4.frame
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(bytes(data), max_length=MAX_DECOMPRESSED)
        if not d.eof:
            raise CorruptMessageError("lz4 payload is truncated or too large")
        return out
    if codec == Codec.ZSTD:
        import zstandard
        data = bytes(data)
        # A streaming zstd decompressor cannot be capped: it would expand a
        # few KiB into gigabytes before any size check. The one-shot API
        # trusts a declared content size and otherwise stops at
        # max_output_size; it also refuses a truncated frame.
        declared = zstandard.frame_content_size(data)
        if declared > MAX_DECOMPRESSED:
            raise CorruptMessageError(f"zstd payload declares {declared} bytes, beyond the "
                                      f"limit of {MAX_DECOMPRESSED}")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=MAX_DECOMPRESSED)
    raise CorruptMessageError(f"unknown compression codec {codec}")


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"codec-{codec}"
