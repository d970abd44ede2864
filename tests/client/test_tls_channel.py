"""broker/client/tls_channel.py against a real TLS server (Python's ssl on
a loopback socket, in a thread; the project's certificate authority): the
bytes arrive whole and in order whatever the reader's buffer, several
records are decrypted per call, what is here already is told by
``pending``, the end of the connection and a timeout are the socket's, a
certificate not trusted is refused at the handshake, and a sender and a
reader on two threads do not garble the session."""
from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
import ssl
import termios
import threading

import pytest

from broker.client.tls_channel import TlsChannel
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context, server_context
from broker_helpers import wait_until


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.create(str(tmp / "ca"))
    cert, key = ca.issue("server", ["localhost", "127.0.0.1"], str(tmp / "certs"))
    other = CertificateAuthority.create(str(tmp / "other-ca"))
    return {"server": server_context(TlsSettings(cert_file=cert, key_file=key)),
            "client": client_context(TlsSettings(ca_file=ca.cert_path)),
            "stranger": client_context(TlsSettings(ca_file=other.cert_path))}


@contextlib.contextmanager
def tls_server(context: ssl.SSLContext, serve):
    """A one-connection TLS server on loopback running ``serve(conn)`` in a
    thread; yields (port, errors) and joins the thread at the end."""
    listener = socket.create_server(("127.0.0.1", 0))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            raw, _ = listener.accept()
            with context.wrap_socket(raw, server_side=True) as conn:
                serve(conn)
        except BaseException as exc:       # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], errors
    finally:
        thread.join(30)
        listener.close()


def connect(port: int, context: ssl.SSLContext, timeout: float = 10) -> TlsChannel:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    channel = TlsChannel(sock, context, server_hostname="127.0.0.1")
    channel.handshake()
    return channel


def read_exactly(channel: TlsChannel, size: int, buffer_size: int) -> tuple[bytes, list[int]]:
    """``size`` bytes read through a buffer of ``buffer_size``; and what
    each call gave."""
    got = bytearray()
    buffer = bytearray(buffer_size)
    counts = []
    while len(got) < size:
        count = channel.recv_into(buffer)
        counts.append(count)
        assert count > 0, f"ended after {len(got)} of {size} bytes"
        got += buffer[:count]
    return bytes(got), counts


@pytest.mark.parametrize("buffer_size,size", [(1, 70_001), (7, 300_007),
                                              (16 * 1024, 3 * 1024 * 1024 + 17),
                                              (1 << 20, 3 * 1024 * 1024 + 17)])
def test_the_bytes_arrive_whole_and_in_order_whatever_the_buffer(pki, buffer_size, size):
    payload = os.urandom(size)
    sent = threading.Event()

    def serve(conn):
        conn.sendall(payload)
        sent.set()
        conn.recv(1)                          # until the client is done

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        got, _ = read_exactly(channel, len(payload), buffer_size)
        channel.close()
    assert not errors, errors
    assert got == payload


def test_many_records_are_decrypted_per_call(pki):
    # 512 KiB is 32 records of 16 KiB. SSLSocket.recv_into gives one record
    # at most per call; the channel gives all that is here: once more than
    # a record has arrived (a receive buffer that holds it all, filled
    # before the first read), one call takes several
    payload = os.urandom(512 * 1024)
    sent, done = threading.Event(), threading.Event()

    def serve(conn):
        conn.sendall(payload)
        sent.set()
        done.wait(30)

    with tls_server(pki["server"], serve) as (port, errors):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        channel = TlsChannel(sock, pki["client"], server_hostname="127.0.0.1")
        channel.handshake()
        assert sent.wait(30)
        waiting = lambda: int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD,  # noqa: E731
                                                     b"\0\0\0\0"), "little")
        wait_until(lambda: waiting() >= len(payload), 10, what="the payload to arrive")
        got, counts = read_exactly(channel, len(payload), 1 << 20)
        done.set()
        channel.close()
    assert not errors, errors
    assert got == payload
    assert counts[0] > 4 * 16 * 1024 and len(counts) < 32, counts


def test_pending_tells_what_select_cannot_see(pki):
    payload = os.urandom(100_000)
    done = threading.Event()

    def serve(conn):
        conn.sendall(payload)
        done.wait(30)

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        first = bytearray(10)
        assert channel.recv_into(first) == 10
        # the rest (or some of it) is decrypted or received already, where
        # a select() on the socket cannot see it
        assert channel.pending() > 0
        rest, _ = read_exactly(channel, len(payload) - 10, 1 << 16)
        assert bytes(first) + rest == payload
        assert channel.pending() == 0
        readable, _, _ = select.select([channel], [], [], 0.05)
        assert readable == []                 # and nothing is left on the socket
        done.set()
        channel.close()
    assert not errors, errors


def test_the_end_of_the_connection_reads_as_0(pki):
    def serve(conn):
        conn.sendall(b"last words")
        try:
            conn.unwrap()                     # close_notify, then waits for the client's
        except ssl.SSLEOFError:
            pass                              # which closes without one, as SSLSocket did

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        got, _ = read_exactly(channel, 10, 64)
        assert got == b"last words"
        assert channel.recv_into(bytearray(64)) == 0
        assert channel.recv_into(bytearray(64)) == 0      # and stays ended
        channel.close()
    assert not errors, errors


def test_a_silent_server_times_out_as_a_socket_does(pki):
    done = threading.Event()

    def serve(conn):
        done.wait(30)

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        channel.settimeout(0.2)
        with pytest.raises(socket.timeout):
            channel.recv_into(bytearray(64))
        channel.settimeout(10)
        # a read that must not wait, while the socket keeps its timeout for
        # a sender on another thread
        with pytest.raises(BlockingIOError):
            channel.recv_into(bytearray(64), blocking=False)
        assert channel._sock.gettimeout() == 10
        channel.setblocking(False)
        with pytest.raises(BlockingIOError):
            channel.recv_into(bytearray(64))
        done.set()
        channel.close()
    assert not errors, errors


def test_a_certificate_not_trusted_is_refused_at_the_handshake(pki):
    def serve(conn):
        pass

    with tls_server(pki["server"], serve) as (port, errors):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        channel = TlsChannel(sock, pki["stranger"], server_hostname="127.0.0.1")
        with pytest.raises(ssl.SSLCertVerificationError) as refused:
            channel.handshake()
        channel.close()
    assert "certificate verify failed" in str(refused.value)
    # the server was told why, by the alert SSLSocket sent too (not a
    # connection cut mid-handshake)
    assert errors and isinstance(errors[0], ssl.SSLError), errors
    assert not isinstance(errors[0], ssl.SSLEOFError) and "ALERT" in str(errors[0]), errors


def test_a_server_that_closes_during_the_handshake_is_a_reset(pki):
    listener = socket.create_server(("127.0.0.1", 0))
    closer = threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True)
    closer.start()
    sock = socket.create_connection(listener.getsockname(), timeout=10)
    channel = TlsChannel(sock, pki["client"], server_hostname="127.0.0.1")
    with pytest.raises((ConnectionResetError, ssl.SSLError)):
        channel.handshake()
    channel.close()
    closer.join(10)
    listener.close()


def test_a_sender_and_a_reader_on_two_threads(pki):
    # an echo server: what one thread sends, the other reads back, while
    # both run at once on the one session
    messages = [os.urandom(1 + i * 37 % 40_000) for i in range(400)]
    total = sum(len(m) for m in messages)

    def serve(conn):
        echoed = 0
        while echoed < total:
            data = conn.recv(1 << 16)
            if not data:
                return
            conn.sendall(data)
            echoed += len(data)

    sender_errors: list[BaseException] = []

    def send_all(channel):
        try:
            for message in messages:
                channel.sendall(message)
        except BaseException as exc:       # reported by the test
            sender_errors.append(exc)

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        sender = threading.Thread(target=send_all, args=(channel,))
        sender.start()
        got, _ = read_exactly(channel, total, 1 << 16)
        sender.join(30)
        channel.close()
    assert not errors and not sender_errors, (errors, sender_errors)
    assert got == b"".join(messages)


def test_a_send_larger_than_a_piece_goes_whole(pki):
    # encrypted and sent piece by piece (SEND_PIECE_BYTES), in order
    payload = os.urandom(5 * 1024 * 1024 + 3)
    received = bytearray()

    def serve(conn):
        while len(received) < len(payload):
            data = conn.recv(1 << 20)
            if not data:
                return
            received.extend(data)

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        channel.sendall(payload)
        assert channel.version() == "TLSv1.3"
        assert channel.getpeercert(binary_form=True)
    channel.close()
    assert not errors, errors
    assert bytes(received) == payload
