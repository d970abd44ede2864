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


class DecompressionLimitError(CorruptMessageError):
    """A payload inflates beyond the limit it was decompressed with (the work
    stopped there). The broker first checks wrappers on its event loop with a
    small limit and, on this error, again on a worker thread with the full one."""


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


def decompress(codec: int, data: bytes | memoryview,
               max_bytes: int = MAX_DECOMPRESSED) -> bytes:
    """Decompress a wrapper's payload; raise only ``CorruptMessageError`` on
    garbage, a truncated payload or trailing data after the first gzip member
    or lz4/zstd frame (a reader that went on would see messages the broker
    never checked), and ``DecompressionLimitError`` for one expanding beyond
    ``max_bytes`` (the work stops there)."""
    try:
        return _decompress(codec, data, max_bytes)
    except CorruptMessageError:
        raise
    except Exception as exc:  # the codec libraries raise many types on garbage
        raise CorruptMessageError(
            f"cannot decompress a {_codec_name(codec)} payload: {exc}") from None


def _too_large(codec_name: str, max_bytes: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{codec_name} payload inflates beyond {max_bytes} bytes")


def _decompress(codec: int, data: bytes | memoryview, max_bytes: int) -> bytes:
    if codec == Codec.GZIP:
        d = zlib.decompressobj(wbits=31)
        out = d.decompress(data, max_bytes)
        if not d.eof:
            if d.unconsumed_tail or len(out) >= max_bytes:
                raise _too_large("gzip", max_bytes)
            raise CorruptMessageError("gzip payload is truncated")
        if d.unused_data:
            raise CorruptMessageError(f"gzip payload has {len(d.unused_data)} bytes after its "
                                      f"first member (one member only)")
        return out
    if codec == Codec.LZ4:
        import lz4.frame
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(bytes(data), max_length=max_bytes)
        if not d.eof:
            if len(out) >= max_bytes:
                raise _too_large("lz4", max_bytes)
            raise CorruptMessageError("lz4 payload is truncated")
        if d.unused_data:
            raise CorruptMessageError(f"lz4 payload has {len(d.unused_data)} bytes after its "
                                      f"first frame (one frame only)")
        return out
    if codec == Codec.ZSTD:
        import zstandard
        data = bytes(data)
        # A streaming zstd decompressor cannot be capped: it would expand a
        # few KiB into gigabytes before any size check. The one-shot API
        # trusts a declared content size and otherwise stops at
        # max_output_size; it also refuses a truncated frame.
        declared = zstandard.frame_content_size(data)
        if declared > max_bytes:
            raise _too_large("zstd", max_bytes)
        try:
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=max_bytes,
                                                           allow_extra_data=False)
        except zstandard.ZstdError as exc:
            if declared < 0 and "full frame" in str(exc):
                # no declared size: the output buffer ran out (or the frame
                # is truncated; a retry with a larger limit tells which)
                raise _too_large("zstd", max_bytes) from None
            if "unused data" in str(exc):
                raise CorruptMessageError("zstd payload has bytes after its first frame "
                                          "(one frame only)") from None
            raise
    raise CorruptMessageError(f"unknown compression codec {codec}")


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"codec-{codec}"
