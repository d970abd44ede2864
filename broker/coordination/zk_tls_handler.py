"""kazoo's threading handler, with TLS connections made from one client
context per client.

kazoo builds a new TLS context at every connection and loads the system's
authorities into it first (~40 ms here), and a started client connects twice
(its chroot is made through a root client first): a secured lab's start paid
that on every ZooKeeper client of every process. This handler makes the
context once and makes it again only when one of its files changes (a
renewed certificate serves the next connection, as the settings promise),
and trusts the authorities the settings name alone; the system's only when
they name none. docs/security.md, "TLS to ZooKeeper".
"""
from __future__ import annotations

import os
import socket
import ssl
import threading

from kazoo.handlers.threading import SequentialThreadingHandler

from .zk_tls import ZooKeeperTls


def _stamp(path: str) -> tuple[int, int] | None:
    """What tells a file changed: (mtime ns, size); None for no file."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class TlsHandler(SequentialThreadingHandler):
    """A handler for one KazooClient (``handler=``) whose connections, when
    the client asks for TLS, use ``tls``'s context (made once, again when a
    file changes). Plaintext connections are kazoo's own."""

    def __init__(self, tls: ZooKeeperTls) -> None:
        super().__init__()
        self.tls = tls
        self._context: ssl.SSLContext | None = None
        self._stamps: tuple | None = None
        self._context_lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        """The client context for the files as they are now."""
        tls = self.tls
        stamps = tuple(_stamp(p) for p in (tls.ca_file, tls.cert_file, tls.key_file))
        with self._context_lock:
            if self._context is None or stamps != self._stamps:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                if tls.ca_file:
                    context.load_verify_locations(tls.ca_file)
                else:
                    context.load_default_certs(ssl.Purpose.SERVER_AUTH)
                context.check_hostname = tls.verify_hostname
                context.verify_mode = ssl.CERT_REQUIRED
                if tls.cert_file:
                    context.load_cert_chain(tls.cert_file, tls.key_file)
                self._context, self._stamps = context, stamps
            return self._context

    def create_connection(self, address, hostname=None, timeout=None, use_ssl=False,
                          **options):
        if not use_ssl:
            return super().create_connection(address, hostname=hostname, timeout=timeout,
                                             use_ssl=False, **options)
        raw = socket.create_connection(address, timeout)
        try:
            conn = self.context().wrap_socket(raw, server_hostname=hostname)
        except BaseException:
            raw.close()
            raise
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn
