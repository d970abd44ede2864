"""One client connection: framing in, ordered replies out, sendfile for fetches.

Requests are pipelined: the connection decodes every whole frame it has and
hands them to the broker, which appends one ``Reply`` per request that gets
an answer to ``outbox`` in request order. A reply may become ready later (a
long-poll fetch, a "flushed" produce ack); replies leave strictly in order,
so a ready reply waits behind an earlier one that is not.

A fetch reply's message bytes are *file regions* (segment, position,
length) sent with ``loop.sendfile`` (os.sendfile: zero-copy, the bytes never
enter Python). The segments are pinned until sent, so retention cannot close
their descriptors underneath.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from typing import Protocol

from broker.protocol.errors import ProtocolError
from broker.protocol.framing import FrameDecoder

log = logging.getLogger(__name__)

# While this many replies wait to be sent, stop reading new requests.
MAX_OUTSTANDING_REPLIES = 10_000


class FileRegion:
    __slots__ = ("segment", "position", "length")

    def __init__(self, segment, position: int, length: int) -> None:
        self.segment = segment
        self.position = position
        self.length = length

    def fileno(self) -> int:      # what loop.sendfile wants of a "file"
        return self.segment.fd


class Reply:
    """One response slot. ``parts`` are bytes or FileRegions; it leaves the
    outbox once ``ready``."""

    __slots__ = ("parts", "ready", "has_regions")

    def __init__(self, data: bytes | None = None) -> None:
        self.parts: list = [data] if data is not None else []
        self.ready = data is not None
        self.has_regions = False

    def set(self, parts: list, has_regions: bool = False) -> None:
        self.parts = parts
        self.has_regions = has_regions
        self.ready = True

    def release(self) -> None:
        if self.has_regions:
            for part in self.parts:
                if type(part) is FileRegion:
                    part.segment.unpin()
            self.has_regions = False


class Server(Protocol):
    """What a connection needs of the broker (BrokerServer provides it)."""

    config: object          # .max_request_bytes
    metrics: object         # .errors, .sendfile_bytes

    def handle_frames(self, conn: "Connection", frames: list) -> None: ...
    def connection_opened(self, conn: "Connection") -> None: ...
    def connection_closed(self, conn: "Connection") -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.config.max_request_bytes)
        self.outbox: deque[Reply] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._sending = False
        self._reading_paused = False
        self._write_paused = False
        self.close_after_flush = False
        self._sock_fd = -1

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self._sock_fd = sock.fileno() if sock is not None else -1
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # room for a whole fetch reply, so sendfile rarely has to wait
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.server.metrics.errors[("framing", "INVALID_REQUEST")] += 1
            self.close()
            return
        if frames:
            self.server.handle_frames(self, frames)
        if self.decoder.failure is not None and not self.closed:
            log.warning("closing connection from %s after its last good request: %s",
                        self.peer, self.decoder.failure)
            self.server.metrics.errors[("framing", "INVALID_REQUEST")] += 1
            self.close_after_flush = True
            self._pause_reading()
            self.pump()
            return
            if not self.closed and len(self.outbox) > MAX_OUTSTANDING_REPLIES:
                self._pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for reply in self.outbox:
            reply.release()
        self.outbox.clear()
        self.server.connection_closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._maybe_resume_reading()

    # ------------------------------------------------------------ replies

    def add_reply(self, reply: Reply) -> None:
        self.outbox.append(reply)

    def pump(self) -> None:
        """Send every ready reply at the head of the outbox, in order."""
        if self._sending or self.closed:
            return
        outbox = self.outbox
        while outbox and outbox[0].ready:
            chunks = []
            while outbox and outbox[0].ready and not outbox[0].has_regions:
                chunks.extend(outbox.popleft().parts)
            if chunks:
                self.transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])
            if not (outbox and outbox[0].ready):
                break
            reply = outbox[0]
            rest = self._send_regions_now(reply)
            if rest is None:
                outbox.popleft()
                reply.release()
                continue
            self._sending = True
            asyncio.get_running_loop().create_task(self._send_regions(reply, rest))
            return
        if self.close_after_flush and not outbox:
            self.close()
            return
        self._maybe_resume_reading()

    def _send_regions_now(self, reply: Reply) -> int | None:
        """Send a fetch reply at once with os.sendfile while the socket takes
        it (the common case: no task, no await). Returns None when all went
        out, else the index of the first part still to send (a region's
        position and length are advanced past what was sent)."""
        transport = self.transport
        metrics = self.server.metrics
        parts = reply.parts
        for i, part in enumerate(parts):
            if type(part) is not FileRegion:
                transport.write(part)
                continue
            if transport.get_write_buffer_size():
                return i       # the header is still queued: let asyncio order the rest
            sock_fd = self._sock_fd
            while part.length:
                try:
                    sent = os.sendfile(sock_fd, part.segment.fd, part.position, part.length)
                except BlockingIOError:
                    return i
                except OSError as exc:
                    log.info("fetch reply to %s failed: %s", self.peer, exc)
                    self.close()
                    return None
                if sent == 0:
                    self.close()
                    return None
                part.position += sent
                part.length -= sent
                metrics.sendfile_bytes += sent
        return None

    async def _send_regions(self, reply: Reply, start: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            for part in reply.parts[start:]:
                if type(part) is FileRegion:
                    if part.length:
                        await loop.sendfile(self.transport, part, part.position, part.length,
                                            fallback=False)
                        self.server.metrics.sendfile_bytes += part.length
                else:
                    self.transport.write(part)
        except (ConnectionError, OSError, RuntimeError) as exc:
            if not self.closed:
                log.info("fetch reply to %s failed: %s", self.peer, exc)
                self.close()
        finally:
            reply.release()
            if self.outbox and self.outbox[0] is reply:
                self.outbox.popleft()
            self._sending = False
        if not self.closed:
            self.pump()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    # ------------------------------------------------------------ flow control

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (self._reading_paused and not self._write_paused
                and len(self.outbox) < MAX_OUTSTANDING_REPLIES // 2 and not self.closed):
            self._reading_paused = False
            self.transport.resume_reading()
