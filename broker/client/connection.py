"""A blocking connection to one broker: pipelined requests, in-order responses.

Uses only the codec (broker.protocol), never the server or the storage.
Thread-safety: ``send``/``send_frames`` may be called by one thread while
another calls ``receive`` (sends hold a lock); other use is single-threaded.
(The producer's one sender thread does both itself.)
"""
from __future__ import annotations

import select
import ssl
import socket
import struct
import threading
import time
from collections import deque

from broker.protocol import api
from broker.protocol.errors import ErrorCode, ProtocolError, SamsaError
from broker.protocol.framing import FrameDecoder
from .authentication import SaslLogin, authenticate

DEFAULT_MAX_RESPONSE_BYTES = 256 << 20


class BrokerConnectionError(ConnectionError):
    """The connection to a broker failed or was closed."""


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """'host:port' (or 'host') -> (host, port), with a clear error."""
    host, sep, port = address.strip().rpartition(":")
    if not sep:
        return address.strip(), default_port
    try:
        port_number = int(port)
    except ValueError:
        raise ValueError(f"bad broker address {address!r}: port must be a number") from None
    if not 0 < port_number < 65536:
        raise ValueError(f"bad broker address {address!r}: port out of range")
    return host.strip("[]") or "127.0.0.1", port_number


#: Linux's struct tcp_info: where tcpi_min_rtt (microseconds) is (Linux 4.10+;
#: before it, tcpi_rtt, the smoothed estimate); enough of it to read that far.
TCP_INFO_OPTION = getattr(socket, "TCP_INFO", None)
TCP_INFO_RTT_AT = 68
TCP_INFO_MIN_RTT_AT = 148
TCP_INFO_BYTES = 152


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str = "samsa-python",
                 connect_timeout: float = 10.0, request_timeout: float | None = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 receive_buffer_bytes: int = 1 << 20,
                 tls: "ssl.SSLContext | None" = None, sasl: "SaslLogin | None" = None) -> None:
        """``receive_buffer_bytes``: SO_RCVBUF; -1 leaves the kernel's
        autotuning on (up to net.ipv4.tcp_rmem's maximum), which a reader
        across a WAN needs: a fixed buffer caps what it receives per round
        trip. ``tls``: a client context (broker/security/tls.py's
        ``client_context``) for a broker's TLS listener: the broker's
        certificate and host name are checked at connect. ``sasl``: a user
        and password to authenticate with (SCRAM-SHA-512) right after
        connecting (authentication.py); a refusal raises SamsaError."""
        self.host = host
        self.receive_buffer_bytes = receive_buffer_bytes
        self.port = port
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self._sock: socket.socket | None = None
        self.connected_at: float | None = None     # time.monotonic() of the last connect
        self._frames = FrameDecoder(max_response_bytes)    # received bytes, framed
        self._next_correlation_id = 0
        self._pending: deque[tuple[int, int]] = deque()   # (correlation id, api key)
        self._send_lock = threading.Lock()
        self.tls = tls
        self.sasl = sasl

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise BrokerConnectionError(
                f"cannot connect to broker {self.address}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            except ssl.SSLCertVerificationError as exc:
                sock.close()
                raise BrokerConnectionError(
                    f"TLS with broker {self.address}: its certificate is not trusted "
                    f"({exc.verify_message})") from None
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise BrokerConnectionError(
                    f"TLS with broker {self.address} failed: {exc} (is it the broker's TLS "
                    f"port?)") from None
        sock.settimeout(self.request_timeout)
        self._sock = sock
        self.connected_at = time.monotonic()
        self._frames = FrameDecoder(self.max_response_bytes)
        self._pending.clear()
        if self.sasl is not None:
            try:
                authenticate(self, self.sasl)
            except BaseException:
                self.close()
                raise

    def round_trip_s(self) -> float | None:
        """The network's round trip on this connection: the lowest the kernel
        measured (TCP_INFO's min_rtt, over its last 5 minutes by default:
        net.ipv4.tcp_min_rtt_wlen), not the smoothed estimate, which a
        reader's delayed ACKs stretch to the broker's answer time (a long
        poll: tens of ms on a LAN). None when not connected or where the
        kernel does not tell."""
        sock = self._sock
        if sock is None or TCP_INFO_OPTION is None:
            return None
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO_OPTION, TCP_INFO_BYTES)
        except OSError:
            return None
        at = TCP_INFO_MIN_RTT_AT if len(info) >= TCP_INFO_MIN_RTT_AT + 4 else TCP_INFO_RTT_AT
        if len(info) < at + 4:
            return None
        return struct.unpack_from("=I", info, at)[0] / 1e6

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self.connected_at = None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._frames = FrameDecoder(self.max_response_bytes)
        self._pending.clear()

    # ------------------------------------------------------------ sending

    def take_correlation_ids(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive correlation ids (they wrap at 2**31)
        for frames the caller encodes itself; the first of them."""
        first = (self._next_correlation_id + 1) & 0x7FFFFFFF
        self._next_correlation_id = (first + count - 1) & 0x7FFFFFFF
        return first

    def encode(self, request, expect_response: bool = True) -> tuple[int, bytes]:
        """Assign a correlation id and encode ``request`` as a frame."""
        cid = self.take_correlation_ids()
        return cid, api.encode_request(request, cid, self.client_id)

    def send_frames(self, frames: list[bytes], expected: list[tuple[int, int]]) -> None:
        """Write pre-encoded request frames in one go; ``expected`` lists the
        (correlation id, api key) of those that will be answered."""
        if self._sock is None:
            self.connect()
        with self._send_lock:
            self._pending.extend(expected)
            try:
                self._sock.sendall(b"".join(frames) if len(frames) > 1 else frames[0])
            except OSError as exc:
                self.close()
                raise BrokerConnectionError(f"send to broker {self.address} failed: "
                                            f"{exc.strerror or exc}") from None

    def send(self, request, expect_response: bool = True) -> int:
        cid, frame = self.encode(request)
        self.send_frames([frame], [(cid, request.API)] if expect_response else [])
        return cid

    # ------------------------------------------------------------ receiving

    def receive(self):
        """Read the next response (they come in request order); returns
        (correlation id, decoded response)."""
        if self._sock is None or not self._pending:
            raise BrokerConnectionError("no request is waiting for a response")
        cid_expected, api_key = self._pending[0]
        payload = self._read_frame()
        try:
            cid, response = api.decode_response(api_key, payload)
        except ProtocolError as exc:
            self.close()
            raise BrokerConnectionError(f"unreadable response from {self.address}: {exc}") \
                from None
        if cid != cid_expected:
            self.close()
            raise BrokerConnectionError(f"response out of order from {self.address}: "
                                        f"expected correlation id {cid_expected}, got {cid}")
        self._pending.popleft()
        return cid, response

    @property
    def waiting_responses(self) -> int:
        return len(self._pending)

    def response_ready(self, timeout: float) -> bool:
        """Whether the next response's first bytes are here, waiting up to
        ``timeout`` seconds for them (without consuming anything)."""
        if self._frames.buffered:
            return True
        if self._sock is None:
            return True      # receive() will say what is wrong
        if self.tls is not None and self._sock.pending():
            return True      # decrypted already: select cannot see it
        try:
            readable, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            return True
        if readable and self.tls is not None:
            # TLS records that hold no data (TLS 1.3's session tickets) make
            # the socket readable too: read what there is, without waiting
            return self._read_available()
        return bool(readable)

    def _read_available(self) -> bool:
        """Read what the TLS socket has, without blocking; whether any of a
        response is here now (or the connection ended: receive() says so)."""
        sock = self._sock
        sock.setblocking(False)
        try:
            count = sock.recv_into(self._frames.receive_buffer())
            if count == 0:
                return True
            self._frames.received(count)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except OSError:
            return True
        finally:
            sock.settimeout(self.request_timeout)
        return bool(self._frames.buffered)

    def _read_frame(self) -> bytes | bytearray:
        frames = self._frames
        try:
            frame = frames.next_frame()
            while frame is None:
                count = self._sock.recv_into(frames.receive_buffer())
                if count == 0:
                    raise EOFError
                frames.received(count)
                frame = frames.next_frame()
            return frame
        except EOFError:
            self.close()
            raise BrokerConnectionError(f"broker {self.address} closed the connection") from None
        except ProtocolError as exc:
            self.close()
            raise BrokerConnectionError(f"broker {self.address}: {exc}") from None
        except (OSError, ValueError, AttributeError) as exc:   # timeout, reset, closed socket
            self.close()
            if isinstance(exc, socket.timeout):
                raise BrokerConnectionError(f"no response from broker {self.address} within "
                                            f"{self.request_timeout}s") from None
            raise BrokerConnectionError(f"receive from broker {self.address} failed: "
                                        f"{exc}") from None

    def request(self, request):
        """Send one request and wait for its response. An error response for
        the whole request raises SamsaError."""
        self.send(request)
        _cid, response = self.receive()
        if isinstance(response, api.ErrorResponse):
            raise SamsaError(response.error, response.message)
        return response

    def __enter__(self) -> "BrokerConnection":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check(error: int, message: str, **fields) -> None:
    """Raise SamsaError for a non-zero per-entry error code."""
    if error != ErrorCode.NONE:
        raise SamsaError(error, message, **fields)
