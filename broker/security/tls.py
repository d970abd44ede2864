"""TLS settings and the contexts made from them, reloaded when the files
change (a certificate renewed in place is used by the next connection, no
restart). Pure of any server: the broker, the clients and the HTTP services
build their ``ssl.SSLContext`` here (docs/security.md).

Defaults are the strict ones: TLS 1.2 at least, the peer's certificate
checked against ``ca_file`` (else the system's CAs), and a client checks the
server's host name against its certificate (``verify_hostname``). A server
asks clients for a certificate per ``client_auth``: ``none``, ``optional``
(checked when sent) or ``required``; the principal of a client
authenticated by its certificate is ``User:`` and its subject, as RFC 4514
writes it (``User:CN=mirror,O=samsa``).
"""
from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)

CLIENT_AUTH = ("none", "optional", "required")


@dataclass(frozen=True)
class TlsSettings:
    """``cert_file``/``key_file``: this side's certificate (a server's must;
    a client's when the server asks); ``ca_file``: the authorities trusted
    for the peer's certificate (empty: the system's)."""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify_hostname: bool = True
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise ValueError(f"client_auth must be one of {', '.join(CLIENT_AUTH)}, not "
                             f"{self.client_auth!r}")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file go together")

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.cert_file, self.key_file, self.ca_file) if f)


def _base(purpose: ssl.Purpose, settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose, cafile=settings.ca_file or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.cert_file:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    return context


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context (its certificate is required)."""
    if not settings.cert_file:
        raise ValueError("a TLS listener needs cert_file and key_file")
    context = _base(ssl.Purpose.CLIENT_AUTH, settings)
    context.verify_mode = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[settings.client_auth]
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the server's certificate always checked, its
    host name unless ``verify_hostname`` is off."""
    context = _base(ssl.Purpose.SERVER_AUTH, settings)
    context.check_hostname = settings.verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class TlsClientSettings:
    """The TLS settings of a client's configuration (ProducerConfig and
    ConsumerConfig take them: ``--set tls=true --set tls_ca_file=...``)."""
    tls: bool = False
    """Connect with TLS: ``bootstrap`` is then a broker's TLS listener
    (its setting tls_port); docs/security.md."""
    tls_ca_file: str = ""
    """The authorities trusted for the broker's certificate (empty: the system's)."""
    tls_cert_file: str = ""
    """This client's certificate, for a broker that asks for one (tls_client_auth)."""
    tls_key_file: str = ""
    """The key of tls_cert_file."""
    tls_verify_hostname: bool = True
    """Check the broker's host name against its certificate."""


def client_context_of(config: TlsClientSettings) -> ssl.SSLContext | None:
    """The client context ``config`` asks for; None without ``tls``."""
    if not config.tls:
        return None
    return client_context(TlsSettings(config.tls_cert_file, config.tls_key_file,
                                      config.tls_ca_file, config.tls_verify_hostname))


def principal_of(peer_certificate: dict | None) -> str | None:
    """``User:<subject>`` of a certificate as ``SSLSocket.getpeercert()``
    gives it (RFC 4514 order: most specific first), None without one."""
    if not peer_certificate or "subject" not in peer_certificate:
        return None
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "domainComponent": "DC", "userId": "UID"}
    rdns = ["+".join(f"{short.get(key, key)}={_escape_dn_value(value)}" for key, value in rdn)
            for rdn in reversed(peer_certificate["subject"])]
    return "User:" + ",".join(rdns)


def _escape_dn_value(value: str) -> str:
    """RFC 4514, section 2.4: the characters that must be escaped, a leading
    '#' or space and a trailing space (so two subjects never read alike)."""
    out = "".join("\\" + c if c in '"+,;<>\\' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _signature(paths: tuple[str, ...]) -> tuple:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError as exc:          # gone, unreadable: a change all the same
            out.append((path, type(exc).__name__))
    return tuple(out)


class ReloadingContext:
    """An SSLContext rebuilt when one of its files changes: ``current()``
    looks at the files (at most every ``check_interval_s``) and rebuilds
    when their inode, size or time changed. A rebuild that fails (a key
    that does not match its certificate yet, halfway through a renewal)
    keeps the previous context, logs why and tries again at the next look.
    Thread-safe."""

    def __init__(self, build: Callable[[], ssl.SSLContext], files: tuple[str, ...],
                 check_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._build = build
        self._files = files
        self._interval = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._context = build()               # the first build's errors go to the caller
        self._signature = _signature(files)
        self._checked = clock()
        self.reloads = 0
        self.failed_reloads = 0

    @classmethod
    def server(cls, settings: TlsSettings, **kwargs) -> "ReloadingContext":
        return cls(lambda: server_context(settings), settings.files, **kwargs)

    @classmethod
    def client(cls, settings: TlsSettings, **kwargs) -> "ReloadingContext":
        return cls(lambda: client_context(settings), settings.files, **kwargs)

    def listener(self) -> ssl.SSLContext:
        """The context to give a listener that binds one for good (asyncio's
        ``create_server(ssl=...)``): each handshake is moved to ``current()``
        (its SNI callback, called whether or not the client sent a name),
        so a renewal is taken by the next connection."""
        base = self._build()

        def switch(ssl_object, _server_name, _context) -> None:
            try:
                ssl_object.context = self.current()
            except Exception:   # noqa: BLE001 - the handshake goes on with the base context
                log.exception("TLS: switching to the current certificate failed")
        base.sni_callback = switch
        return base

    def current(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked < self._interval:
            return self._context
        with self._lock:
            self._checked = now
            signature = _signature(self._files)
            if signature != self._signature:
                try:
                    self._context = self._build()
                except (OSError, ssl.SSLError, ValueError) as exc:
                    self.failed_reloads += 1
                    log.error("TLS files changed but cannot be loaded (%s); keeping the "
                              "previous certificate, trying again", exc)
                    return self._context
                self._signature = signature
                self.reloads += 1
                log.info("TLS files changed: reloaded %s", ", ".join(self._files))
            return self._context
