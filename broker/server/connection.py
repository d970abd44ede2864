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

Limits (what a misbehaving client can hold; docs/protocol.md section 5):
  * requests queued per connection: once more than
    ``max_queued_requests_per_connection`` replies wait (parked long-polls
    included), the connection stops reading until half of them are sent;
  * request bytes being read, broker-wide: a frame's bytes are reserved in
    the ``RequestMemoryPool`` once its size is known; while the pool cannot
    grant them the connection stops reading;
  * idle connections (no bytes in, nothing pending) are closed by the
    server's sweep after ``connections_max_idle_ms``.
Reading is paused for several reasons at once (a set); it resumes when none
is left. When a connection closes, its pending replies are released at once
and the server drops its parked fetches.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from typing import Protocol

from broker.service_kit.logging_setup import RateLimitedLog
from broker.protocol.errors import ProtocolError
from broker.protocol.framing import FrameDecoder

log = logging.getLogger(__name__)
#: a fetch reply on the TLS listener is read and encrypted this much at a
#: time, and no more is written while the transport holds this much unsent:
#: a client that reads slowly costs the broker about that, not its fetch size
TLS_CHUNK_BYTES = 64 << 10
TLS_WRITE_HIGH_WATER = 1 << 20
# a client can send bad frames at will: a few lines a minute, then a count
limited_log = RateLimitedLog(log)


class FileRegion:
    """A byte range of a segment file, to be sent with sendfile."""

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

    config: object          # .max_request_bytes, .max_queued_requests_per_connection
    metrics: object         # .errors, .sendfile_bytes, .connections_throttled
    memory_pool: object     # RequestMemoryPool

    def handle_frames(self, conn: "Connection", frames: list) -> None: ...
    def connection_opened(self, conn: "Connection") -> None: ...
    def connection_closed(self, conn: "Connection") -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, server: Server, tls: bool = False) -> None:
        self.server = server
        # a connection of the TLS listener: its transport encrypts, so a
        # fetch's file regions are read and written through it (sendfile
        # would put clear text on the wire)
        self.tls = tls
        # who the peer is: a TLS client certificate's subject, User:<name>
        # once a SASL exchange succeeded, else User:ANONYMOUS (server.py)
        self.principal: str | None = None
        self.sasl = None          # its SaslExchange until authenticated (authentication.py)
        self.authorized = None    # (ACL generation, {permission: decision}) (authorization.py)
        self._writable = asyncio.Event()        # cleared while asyncio says pause_writing
        self._writable.set()
        self.decoder = FrameDecoder(server.config.max_request_bytes)
        self.outbox: deque[Reply] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self._sending = False
        self._reading_paused = False
        self._pause_reasons: set[str] = set()
        self.close_after_flush = False
        self._sock_fd = -1
        self.max_queued = server.config.max_queued_requests_per_connection
        self.reserved = 0              # bytes of the memory pool held for the partial frame
        self._waiting_for_memory = False
        self.last_active = time.monotonic()
        self.parked_fetches: set = set()   # its parked fetches (written by fetch.py only)

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self._sock_fd = sock.fileno() if sock is not None and not self.tls else -1
        if self.tls:
            from broker.security.tls import principal_of
            self.principal = principal_of(transport.get_extra_info("peercert"))
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # -1 leaves the kernel's autotuning on: it grows the buffer
                # with the link's bandwidth x round trip (a WAN consumer)
                size = self.server.config.socket_send_buffer_bytes
                if size > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            limited_log.log(logging.WARNING, "bad frame", "closing connection from %s: %s",
                            self.peer, exc)
            self.server.metrics.errors[("framing", "INVALID_REQUEST")] += 1
            self.close()
            return
        if self.decoder.partial_frame_bytes != self.reserved:
            self._account_partial_frame()
        if frames:
            self.server.handle_frames(self, frames)
        if self.closed:
            return
        if self.decoder.failure is not None:
            limited_log.log(logging.WARNING, "bad frame",
                            "closing connection from %s after its last good request: %s",
                            self.peer, self.decoder.failure)
            self.server.metrics.errors[("framing", "INVALID_REQUEST")] += 1
            self.close_after_flush = True
            self.pause_reading("closing")
            self.pump()
            return
        if len(self.outbox) > self.max_queued:
            self.server.metrics.connections_throttled += 1
            self.pause_reading("outbox")

    def _account_partial_frame(self) -> None:
        """Hold pool memory for the frame being received (all of it, once its
        size is known); stop reading while the pool cannot grant it."""
        want = self.decoder.partial_frame_bytes
        pool = self.server.memory_pool
        if self.sasl is not None:
            # not authenticated: frames of 4 KiB at most, and so many such
            # connections at most (authentication.py); the pool is for those
            # who are, and a stranger must not drain it
            want = 0
        if self.reserved:
            pool.release(self.reserved)
            self.reserved = 0
        if want and not pool.try_reserve(want):
            self.pause_reading("memory")
            if not self._waiting_for_memory:
                self._waiting_for_memory = True
                pool.wait(self._retry_reserve)
            return
        self.reserved = want

    def _retry_reserve(self) -> bool:
        """Called by the pool when memory was released: True when done waiting."""
        if self.closed:
            self._waiting_for_memory = False
            return True
        want = self.decoder.partial_frame_bytes
        if want and not self.server.memory_pool.try_reserve(want):
            return False
        self.reserved = want
        self._waiting_for_memory = False
        self.resume_reading("memory")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()           # a reply waiting to write gives up
        pending = len(self.outbox)
        for reply in self.outbox:
            reply.release()
        self.outbox.clear()
        if self.reserved:
            self.server.memory_pool.release(self.reserved)
            self.reserved = 0
        if pending > 1 or self.parked_fetches:
            log.info("connection from %s closed with %d requests unanswered (%d parked "
                     "fetches); dropped", self.peer, pending, len(self.parked_fetches))
        self.server.connection_closed(self)

    def pause_writing(self) -> None:
        self._writable.clear()
        self.pause_reading("write")

    def resume_writing(self) -> None:
        self._writable.set()
        self.resume_reading("write")

    # ------------------------------------------------------------ replies

    def add_reply(self, reply: Reply) -> None:
        self.outbox.append(reply)

    def pump(self) -> None:
        """Send every ready reply at the head of the outbox, in order."""
        if self._sending or self.closed:
            return
        if self.transport.is_closing():
            # the peer is gone and connection_lost has not run yet: writing
            # now would only make asyncio warn once per write
            return
        outbox = self.outbox
        while outbox and outbox[0].ready:
            chunks = []
            while outbox and outbox[0].ready and not outbox[0].has_regions:
                chunks.extend(outbox.popleft().parts)
            if chunks:
                self.transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])
                self.last_active = time.monotonic()
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
        out (or the send failed and the connection is closed), else the index
        of the first part still to send (a region's position and length are
        advanced past what was sent)."""
        transport = self.transport
        metrics = self.server.metrics
        parts = reply.parts
        for i, part in enumerate(parts):
            if type(part) is not FileRegion:
                transport.write(part)
                continue
            if self.tls:
                # encrypted in user space: read and written through TLS a
                # chunk at a time, while the transport's buffer is short
                while part.length:
                    if transport.get_write_buffer_size() >= TLS_WRITE_HIGH_WATER:
                        return i
                    if not self._send_tls_chunk(part):
                        return None
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

    def _send_tls_chunk(self, part: FileRegion) -> bool:
        """Read the next chunk of ``part`` and write it through TLS; False
        (the connection closed) when the read fails or comes short (the
        segment was cut under it: the frame's length would lie)."""
        want = min(part.length, TLS_CHUNK_BYTES)
        try:
            data = os.pread(part.segment.fd, want, part.position)
        except OSError as exc:
            log.info("fetch reply to %s failed: %s", self.peer, exc)
            self.close()
            return False
        if len(data) != want:
            log.info("fetch reply to %s: %d bytes read of %d (the segment was cut); "
                     "closing", self.peer, len(data), want)
            self.close()
            return False
        self.transport.write(data)
        self.server.metrics.tls_fetch_bytes += want
        part.position += want
        part.length -= want
        return True

    async def _send_regions(self, reply: Reply, start: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            for part in reply.parts[start:]:
                if type(part) is FileRegion and self.tls:
                    while part.length and not self.closed:
                        if self.transport.get_write_buffer_size() >= TLS_WRITE_HIGH_WATER:
                            if self._writable.is_set():     # asyncio's limits are higher
                                await asyncio.sleep(0.005)
                            else:
                                await self._writable.wait()
                            continue
                        if not self._send_tls_chunk(part):
                            break
                elif type(part) is FileRegion:
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

    def pause_reading(self, reason: str) -> None:
        """Stop reading for ``reason`` (several may hold at once)."""
        self._pause_reasons.add(reason)
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self, reason: str) -> None:
        self._pause_reasons.discard(reason)
        if self._reading_paused and not self._pause_reasons and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    def _maybe_resume_reading(self) -> None:
        if "outbox" in self._pause_reasons and len(self.outbox) <= self.max_queued // 2:
            self.resume_reading("outbox")
