"""Length-prefixed framing, sans-IO: feed received bytes in, get whole frames out.

    frame := size:int32 payload:byte[size]

The decoder never holds more than one partial frame, and it refuses a frame
whose announced size exceeds ``max_frame_bytes`` *before* buffering its
payload, so a peer cannot make the receiver hold unbounded memory.
"""
from __future__ import annotations

import struct

from .errors import FrameTooLargeError, ProtocolError

_SIZE = struct.Struct(">i")
SIZE_BYTES = 4


def encode_frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Accumulates bytes and splits them into frames.

    Not thread-safe: one decoder per connection, used by one thread.
    After it raises, the connection is beyond repair: close it.
    """

    __slots__ = ("_buffer", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._buffer = bytearray()
        self.max_frame_bytes = max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame now complete, in order."""
        buf = self._buffer
        if buf:
            buf += data
            view = buf
        else:
            view = data
        frames: list[bytes] = []
        pos = 0
        end = len(view)
        unpack = _SIZE.unpack_from
        limit = self.max_frame_bytes
        while end - pos >= SIZE_BYTES:
            (size,) = unpack(view, pos)
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > limit:
                raise FrameTooLargeError(
                    f"frame of {size} bytes exceeds the limit of {limit} bytes")
            stop = pos + SIZE_BYTES + size
            if stop > end:
                break
            frames.append(bytes(view[pos + SIZE_BYTES:stop]))
            pos = stop
        if buf:
            del buf[:pos]
        elif pos < end:
            buf += view[pos:]
        return frames
