"""broker/client/tls_channel.py against a real TLS server (Python's ssl on
a loopback socket, in a thread; the project's certificate authority): the
bytes arrive whole and in order whatever the reader's buffer, several
records are decrypted per call, what is here already is told by
``pending``, the end of the connection and a timeout are the socket's, a
certificate not trusted is refused at the handshake, and a sender and a
reader on two threads do not garble the session."""
from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading

import pytest

from broker.client.tls_channel import TlsChannel
from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context, server_context


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


def read_exactly(channel: TlsChannel, size: int, buffer_size: int) -> tuple[bytes, int]:
    """``size`` bytes read through a buffer of ``buffer_size``; and the calls made."""
    got = bytearray()
    buffer = bytearray(buffer_size)
    calls = 0
    while len(got) < size:
        count = channel.recv_into(buffer)
        calls += 1
        assert count > 0, f"ended after {len(got)} of {size} bytes"
        got += buffer[:count]
    return bytes(got), calls


@pytest.mark.parametrize("buffer_size", [1, 7, 16 * 1024, 1 << 20])
def test_the_bytes_arrive_whole_and_in_order_whatever_the_buffer(pki, buffer_size):
    payload = os.urandom(3 * 1024 * 1024 + 17)
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
    # 512 KiB is 32 records of 16 KiB: once they are here, a 1 MiB buffer
    # takes them in a call or a few (SSLSocket.recv_into takes one per call)
    payload = os.urandom(512 * 1024)
    sent, done = threading.Event(), threading.Event()

    def serve(conn):
        conn.sendall(payload)
        sent.set()
        done.wait(30)

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        assert sent.wait(30)                  # all of it on its way over loopback
        got, calls = read_exactly(channel, len(payload), 1 << 20)
        done.set()
        channel.close()
    assert not errors, errors
    assert got == payload
    assert calls <= 8, calls


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
        # the rest is decrypted or received already: nothing more comes
        # from the network, yet it is there to read
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
    assert errors and isinstance(errors[0], ssl.SSLError)     # the server saw it refused


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

    with tls_server(pki["server"], serve) as (port, errors):
        channel = connect(port, pki["client"])
        sender = threading.Thread(target=lambda: [channel.sendall(m) for m in messages])
        sender.start()
        got, _ = read_exactly(channel, total, 1 << 16)
        sender.join(30)
        channel.close()
    assert not errors, errors
    assert got == b"".join(messages)
    assert channel.getpeercert() is not None or channel.version() is not None
