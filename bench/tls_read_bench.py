"""What a TLS reader pays per byte in this Python, two ways (issue 30: the
client sets the pace of a TLS consume): ``python -m bench.tls_read_bench``.

A TLS server thread (Python's ssl, a certificate of the project's CA, TLS
1.3) sends ``--mib`` MiB in 64 KiB writes over loopback; the client reads
them into a 200 KiB buffer (a fetch answer's size), measured in the
client thread's CPU seconds:

* ``sslsocket``: ``SSLSocket.recv_into``, what BrokerConnection does (one
  record per call, OpenSSL reading the socket itself);
* ``memory-bio``: the socket read into one reused buffer of ``--raw-kib``
  KiB, written into an ``ssl.MemoryBIO`` and decrypted by
  ``SSLObject.read`` until it wants more (no system call per record).

Rounds alternate the order; prints each way's median and memory-bio /
sslsocket. 2 cores: quote the ratio of one run.
"""
from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time

from broker.security.ca import CertificateAuthority
from broker.security.tls import TlsSettings, client_context, server_context

FETCH_BYTES = 200 * 1024
WRITE_BYTES = 64 * 1024


def serve(listener: socket.socket, context: ssl.SSLContext, total: int) -> None:
    piece = os.urandom(WRITE_BYTES)
    raw, _ = listener.accept()
    with context.wrap_socket(raw, server_side=True) as conn:
        sent = 0
        while sent < total:
            conn.sendall(piece)
            sent += len(piece)
        conn.recv(1)                         # the client's "done"


def read_sslsocket(sock: socket.socket, context: ssl.SSLContext, total: int, _raw: int) -> float:
    conn = context.wrap_socket(sock, server_hostname="127.0.0.1")
    view = memoryview(bytearray(FETCH_BYTES))
    got = 0
    started = time.thread_time()
    while got < total:
        got += conn.recv_into(view)
    cpu = time.thread_time() - started
    conn.sendall(b"x")
    return cpu


def read_memory_bio(sock: socket.socket, context: ssl.SSLContext, total: int,
                    raw_bytes: int) -> float:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    session = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    while True:
        try:
            session.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            incoming.write(sock.recv(65536))
    sock.sendall(outgoing.read())
    raw = bytearray(raw_bytes)
    raw_view = memoryview(raw)
    view = memoryview(bytearray(FETCH_BYTES))
    got = 0
    started = time.thread_time()
    while got < total:
        try:
            got += session.read(FETCH_BYTES, view)
        except ssl.SSLWantReadError:
            incoming.write(raw_view[:sock.recv_into(raw)])
    cpu = time.thread_time() - started
    session.write(b"x")
    sock.sendall(outgoing.read())
    return cpu


WAYS = {"sslsocket": read_sslsocket, "memory-bio": read_memory_bio}


def one(way: str, server: ssl.SSLContext, client: ssl.SSLContext, total: int,
        raw_bytes: int) -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=serve, args=(listener, server, total))
    thread.start()
    sock = socket.create_connection(listener.getsockname())
    try:
        return WAYS[way](sock, client, total, raw_bytes)
    finally:
        thread.join(60)
        sock.close()
        listener.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=256, help="MiB read per measurement")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--raw-kib", type=int, default=1024, help="memory-bio: socket read size")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ca = CertificateAuthority.create(os.path.join(tmp, "ca"))
        cert, key = ca.issue("server", ["127.0.0.1"], os.path.join(tmp, "certs"))
        server = server_context(TlsSettings(cert_file=cert, key_file=key))
        client = client_context(TlsSettings(ca_file=ca.cert_path))
        cpu: dict[str, list[float]] = {way: [] for way in WAYS}
        for round_ in range(args.rounds):
            order = list(WAYS) if round_ % 2 == 0 else list(reversed(WAYS))
            for way in order:
                cpu[way].append(one(way, server, client, args.mib << 20, args.raw_kib << 10))
            print(f"round {round_ + 1}/{args.rounds}: "
                  + ", ".join(f"{w} {cpu[w][-1]:.3f} s" for w in WAYS), flush=True)
    medians = {way: statistics.median(values) for way, values in cpu.items()}
    for way, median in medians.items():
        print(f"{way}: client CPU {median:.3f} s for {args.mib} MiB "
              f"({args.mib / median:,.0f} MiB/s of CPU)")
    print(f"memory-bio / sslsocket: {medians['memory-bio'] / medians['sslsocket']:.2f} "
          f"(below 1: the memory BIO costs less)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
