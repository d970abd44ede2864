"""A client's TLS session over a connected socket, through memory BIOs.

Python's ``SSLSocket`` decrypts one TLS record (16 KiB at most) per
``recv_into`` call, and OpenSSL reads each record from the socket in two
system calls (its header, then its body): a 200 KiB fetch answer costs some
26 calls into OpenSSL and 26 into the kernel, each with the interpreter's
overhead around it. Here the socket is read in large pieces (up to
``RAW_READ_BYTES``) into an incoming ``MemoryBIO``, and ``recv_into``
decrypts as many records as the caller's buffer takes in one call; what is
written is encrypted into an outgoing ``MemoryBIO`` and sent whole. The
cipher's work is the same: what is saved is the per-record overhead, which
on this project's machines costs more than the cipher (bench/RESULTS.md,
"TLS against plaintext").

The channel stands where ``BrokerConnection`` keeps its socket and answers
the calls it makes of one (``recv_into``, ``sendall``, ``pending``,
``fileno``, timeouts, ``getpeercert``, ``close``). Errors are the socket's
and ``ssl``'s own: a timeout is ``socket.timeout``, a non-blocking read with
nothing to read ``BlockingIOError``, a refused certificate
``ssl.SSLCertVerificationError``.

Invariants:

* every byte read from the socket goes into the incoming BIO before any is
  decrypted, and nothing is read from the socket while decrypted or raw
  bytes are already here for the caller (``pending``);
* every ``sendall`` leaves the outgoing BIO empty: what ``ssl`` encrypted
  (records, and any TLS message it owes the broker after a read) is on the
  socket when it returns; a read never writes to the socket;
* ``ssl``'s session state is touched under one lock, so that a sender and a
  reader on two threads never run OpenSSL on it at once; encrypted bytes are
  taken from the outgoing BIO and written to the socket under another, so
  that records reach the socket in the order they were made (the socket's
  reads are under neither).
"""
from __future__ import annotations

import socket
import ssl
import threading

#: how much of the socket one read takes (several records at a time)
RAW_READ_BYTES = 1 << 20


class TlsChannel:
    """A TLS client session on ``sock`` (connected; its timeout is the
    handshake's until ``settimeout``). ``handshake()`` before any other use."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext,
                 server_hostname: str | None) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._session = context.wrap_bio(self._incoming, self._outgoing,
                                         server_side=False, server_hostname=server_hostname)
        self._lock = threading.Lock()          # the session
        self._send_lock = threading.Lock()     # the outgoing BIO to the socket
        self._ended = False                 # the broker closed the connection

    # ------------------------------------------------------------ session

    def handshake(self) -> None:
        """TLS's handshake, over the socket (its timeout applies to each
        read). Raises what ``ssl`` raises (a certificate not trusted, a
        protocol error), ``ConnectionResetError`` when the broker closed the
        connection during it, ``socket.timeout``."""
        while True:
            try:
                with self._lock:
                    self._session.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                data = self._sock.recv(RAW_READ_BYTES)
                if not data:
                    raise ConnectionResetError(
                        "the broker closed the connection during the TLS handshake") from None
                self._incoming.write(data)

    def getpeercert(self, binary_form: bool = False):
        return self._session.getpeercert(binary_form)

    def version(self) -> str | None:
        return self._session.version()

    # ------------------------------------------------------------ data

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        with self._send_lock:
            with self._lock:
                while view:
                    written = self._session.write(view)
                    view = view[written:]
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def recv_into(self, buffer: memoryview | bytearray) -> int:
        """Decrypt into ``buffer`` as much as is here, at least one byte:
        reads the socket only when nothing is (and then blocks as the
        socket's timeout says). 0: the broker ended the connection."""
        view = memoryview(buffer)
        size = len(view)
        filled = 0
        while filled < size:
            try:
                with self._lock:
                    count = self._session.read(size - filled, view[filled:])
            except ssl.SSLWantReadError:
                if filled:
                    break                   # what is here is given now
                if self._ended:
                    return 0
                # (what ssl owes the broker after a read, a key update's
                # answer, goes with the next sendall: a read may be
                # non-blocking, where a write could be cut short)
                data = self._sock.recv(RAW_READ_BYTES)
                if not data:
                    self._ended = True
                    return 0
                self._incoming.write(data)
                continue
            except ssl.SSLZeroReturnError:  # the broker's close_notify
                self._ended = True
                return filled
            if count == 0:
                break
            filled += count
        return filled

    def pending(self) -> int:
        """Bytes here already (decrypted, or received and not yet
        decrypted): a select() on the socket cannot see them."""
        return self._session.pending() + self._incoming.pending

    def _flush(self) -> None:
        """What ``ssl`` owes the broker during the handshake, onto the socket."""
        with self._send_lock:
            with self._lock:
                data = self._outgoing.read()
            if data:
                self._sock.sendall(data)

    # ------------------------------------------------------------ the socket

    def fileno(self) -> int:
        return self._sock.fileno()

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def setblocking(self, flag: bool) -> None:
        self._sock.setblocking(flag)

    def getsockopt(self, *args):
        return self._sock.getsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()
