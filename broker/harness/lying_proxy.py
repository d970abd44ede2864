"""A lying proxy for the audit's tests: it stands between producers and a
broker (or a load balancer), forwards everything, and in produce requests
silently drops some messages and sends others twice, while the producers
see success. What the audit must catch, made on purpose.

    proxy = LyingProxy(("127.0.0.1", broker_port), decide).start()
    producer = Producer(bootstrap=f"127.0.0.1:{proxy.port}", acks="flushed")
    ...
    proxy.dropped, proxy.doubled        # what it did: (topic, timestamp, value)
    proxy.close()

``decide(topic, message)`` says how many copies of a message go on: 0
(dropped), 1, or 2 (doubled). Produce requests are decoded with the
protocol codec (compressed wrappers opened) and encoded again, uncompressed,
with the same correlation id; every other request, and every response,
passes as bytes. The broker's answers (offsets) are of what it received,
which the producer does not check. One thread per direction and
connection; for tests on loopback only.
"""
from __future__ import annotations

import socket
import threading
from typing import Callable

from broker.protocol.api import (
    ApiKey,
    ProduceEntry,
    ProduceRequest,
    decode_request,
    decode_request_header,
    encode_request,
)
from broker.protocol.framing import FrameDecoder
from broker.protocol.message import Message, decode_message_set, encode_message_set

MAX_FRAME = 64 << 20


class LyingProxy:
    def __init__(self, upstream: tuple[str, int],
                 decide: Callable[[str, Message], int], host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.decide = decide
        self._server = socket.create_server((host, 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self.dropped: list[tuple[str, int, bytes]] = []
        self.doubled: list[tuple[str, int, bytes]] = []

    def start(self) -> "LyingProxy":
        threading.Thread(target=self._accept, name="lying-proxy", daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._copy, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        frames = FrameDecoder(MAX_FRAME)
        try:
            while True:
                data = client.recv(1 << 16)
                if not data:
                    break
                for frame in frames.feed(data):
                    server.sendall(self._rewrite(bytes(frame)))
        except OSError:
            pass
        finally:
            _shut(server)
            _shut(client)

    def _rewrite(self, payload: bytes) -> bytes:
        """The frame to send on for a request ``payload``."""
        header, _ = decode_request_header(payload)
        if header.api_key != ApiKey.PRODUCE:
            return len(payload).to_bytes(4, "big") + payload
        header, request = decode_request(payload)
        entries = []
        for entry in request.entries:
            messages, _ = decode_message_set(entry.message_set, 0)
            kept = []
            for m in messages:
                copies = self.decide(entry.topic, m)
                with self._lock:
                    if copies == 0:
                        self.dropped.append((entry.topic, m.timestamp, m.value))
                    elif copies == 2:
                        self.doubled.append((entry.topic, m.timestamp, m.value))
                kept += [(m.key, m.value, m.timestamp)] * copies
            entries.append(ProduceEntry(entry.topic, entry.partition,
                                        encode_message_set(kept)))
        return encode_request(ProduceRequest(request.acks, request.timeout_ms, tuple(entries)),
                              header.correlation_id, header.client_id)

    def _copy(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _shut(sink)
            _shut(source)

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        with self._lock:
            for s in self._sockets:
                _shut(s)
                s.close()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
