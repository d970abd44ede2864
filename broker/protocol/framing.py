"""Length-prefixed framing, sans-IO: feed received bytes in, get whole frames out.

    frame := size:int32 payload:byte[size]

The decoder never holds more than one partial frame, and it refuses a frame
whose announced size exceeds ``max_frame_bytes`` *before* buffering its
payload, so a peer cannot make the receiver hold unbounded memory.

Two ways to drive it, one per decoder (not mixed):

* push (an event loop): ``feed(data)`` returns every frame completed;
* pull (a blocking socket): ``next_frame()`` until it returns None, then
  ``receive_buffer()``, ``sock.recv_into`` it, ``received(n)``. A big frame
  is received straight into a buffer of its own size (one copy, no
  reassembly); small frames arrive several to a read.
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

    __slots__ = ("_buffer", "max_frame_bytes", "failure", "_chunk", "_big", "_big_have")

    #: pull mode: frames bigger than this are received into a buffer of their own
    BIG_FRAME_BYTES = 1 << 16

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._buffer = bytearray()
        self.max_frame_bytes = max_frame_bytes
        # set when a bad frame size follows good frames in one feed: those
        # frames are returned, and the connection must then be closed
        self.failure: ProtocolError | None = None
        self._chunk: bytearray | None = None     # pull mode: where small reads land
        self._big: bytearray | None = None       # pull mode: the big frame being received
        self._big_have = 0

    @property
    def buffered(self) -> int:
        """Bytes held that are not yet returned as a frame."""
        return len(self._buffer) + self._big_have

    @property
    def partial_frame_bytes(self) -> int:
        """The whole size (size field included) of the frame being received,
        once its size field is in; 0 when no frame is partly received. What a
        receiver must be ready to hold to complete it."""
        buf = self._buffer
        if len(buf) < SIZE_BYTES:
            return 0
        return SIZE_BYTES + _SIZE.unpack_from(buf, 0)[0]

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | memoryview]:
        """Add received bytes; return every frame now complete, in order.

        Frames that lie wholly inside ``data`` come back as memoryviews of it
        (no copy: the caller must not mutate ``data`` while it uses them); a
        frame completed from buffered bytes comes back as bytes."""
        if self.failure is not None:
            raise self.failure
        frames: list[bytes | memoryview] = []
        buf = self._buffer
        pos = 0
        end = len(data)
        unpack = _SIZE.unpack_from
        if buf:
            # finish the partial frame held from earlier reads first
            if len(buf) < SIZE_BYTES:
                take = min(SIZE_BYTES - len(buf), end)
                buf += data[:take]
                pos = take
                if len(buf) < SIZE_BYTES:
                    return frames
                self._check_size(unpack(buf, 0)[0])
            need = SIZE_BYTES + unpack(buf, 0)[0] - len(buf)
            take = min(need, end - pos)
            buf += data[pos:pos + take]
            pos += take
            if take < need:
                return frames
            frames.append(bytes(buf[SIZE_BYTES:]))
            buf.clear()
        view = memoryview(data) if type(data) is not memoryview else data
        check = self._check_size
        while end - pos >= SIZE_BYTES:
            (size,) = unpack(view, pos)
            try:
                check(size)
            except ProtocolError as exc:
                if not frames:
                    raise
                # hand out the good frames before it; the next feed raises
                self.failure = exc
                return frames
            stop = pos + SIZE_BYTES + size
            if stop > end:
                break
            frames.append(view[pos + SIZE_BYTES:stop])
            pos = stop
        if pos < end:
            buf += view[pos:]
        return frames

    def _check_size(self, size: int) -> None:
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes} bytes")

    # ------------------------------------------------------------ pull mode

    def next_frame(self) -> bytes | bytearray | None:
        """The next whole frame received (pull mode), or None when more bytes
        are needed; raises ProtocolError on a bad frame size."""
        big = self._big
        if big is not None:
            if self._big_have < len(big):
                return None
            self._big, self._big_have = None, 0
            return big
        buf = self._buffer
        if len(buf) < SIZE_BYTES:
            return None
        (size,) = _SIZE.unpack_from(buf, 0)
        self._check_size(size)
        stop = SIZE_BYTES + size
        if len(buf) >= stop:
            frame = bytes(buf[SIZE_BYTES:stop])
            del buf[:stop]
            return frame
        if size > self.BIG_FRAME_BYTES:
            # the buffer holds only the start of this frame: go on in a buffer of its size
            self._big = big = bytearray(size)
            self._big_have = have = len(buf) - SIZE_BYTES
            big[:have] = buf[SIZE_BYTES:]
            buf.clear()
        return None

    def receive_buffer(self) -> memoryview:
        """Where the next received bytes go (pull mode): pass it to
        ``sock.recv_into``, then call ``received(n)``. Call next_frame()
        first: only when it returned None is a receive needed."""
        if self._big is not None:
            return memoryview(self._big)[self._big_have:]
        if self._chunk is None:
            self._chunk = bytearray(self.BIG_FRAME_BYTES)
        return memoryview(self._chunk)

    def received(self, count: int) -> None:
        """``count`` bytes were written at the start of the last receive_buffer()."""
        if self._big is not None:
            self._big_have += count
        else:
            self._buffer += memoryview(self._chunk)[:count]
