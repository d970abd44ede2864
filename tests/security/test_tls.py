"""TLS contexts and their reloading (broker/security/tls.py) with
certificates of the project's own CA (broker/security/ca.py), over real
sockets: the ways in that must fail (an untrusted certificate, an expired
one, a wrong host name, no client certificate where one is required), the
principal a client certificate names, and a certificate renewed in place
taken by the next connection without a restart (a broken renewal keeps the
previous one)."""
from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import stat
import threading

import pytest

from broker.security.ca import CertificateAuthority
from broker.security.tls import (ReloadingContext, TlsSettings, client_context, principal_of,
                                 server_context)


class Server:
    """A TLS server on 127.0.0.1 answering each connection with the serial
    number of the certificate it presented; ``principals`` gets each
    client's principal (None without a certificate), ``errors`` each failed
    handshake."""

    def __init__(self, contexts: ReloadingContext) -> None:
        self.contexts = contexts
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.principals: list[str | None] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.contexts.current().wrap_socket(conn, server_side=True) as tls:
                    self.principals.append(principal_of(tls.getpeercert()))
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                self.errors.append(str(exc))

    def close(self) -> None:
        self.sock.close()


def talk(port: int, settings: TlsSettings, host: str = "localhost") -> tuple[bytes, int]:
    """Connect, check the server; (what it said, its certificate's serial)."""
    from cryptography import x509
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client_context(settings).wrap_socket(raw, server_hostname=host) as tls:
            serial = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number
            return tls.recv(2), serial


@pytest.fixture
def pki(tmp_path):
    ca = CertificateAuthority.create(str(tmp_path / "ca"))
    server_cert, server_key = ca.issue("broker-0", ["localhost", "127.0.0.1"],
                                       str(tmp_path / "certs"))
    return ca, TlsSettings(server_cert, server_key, ca.cert_path), tmp_path


@pytest.fixture
def serve():
    servers = []

    def start(settings: TlsSettings, **kwargs) -> Server:
        server = Server(ReloadingContext.server(settings, check_interval_s=0, **kwargs))
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


def test_a_trusted_server_with_the_right_name_is_reached(pki, serve):
    ca, settings, _ = pki
    server = serve(settings)
    said, _ = talk(server.port, TlsSettings(ca_file=ca.cert_path))
    assert said == b"ok"
    said, _ = talk(server.port, TlsSettings(ca_file=ca.cert_path), host="127.0.0.1")
    assert said == b"ok"
    # key files are for their owner only
    assert stat.S_IMODE(os.stat(settings.key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(ca.key_path).st_mode) == 0o600


def test_an_untrusted_certificate_is_refused(pki, serve, tmp_path):
    _, settings, _ = pki
    server = serve(settings)
    stranger = CertificateAuthority.create(str(tmp_path / "other-ca"), name="someone else")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        talk(server.port, TlsSettings(ca_file=stranger.cert_path))
    with pytest.raises(ssl.SSLCertVerificationError):
        talk(server.port, TlsSettings())          # the system's CAs do not know ours


def test_an_expired_certificate_is_refused(pki, serve):
    ca, _, tmp_path = pki
    now = dt.datetime.now(dt.timezone.utc)
    cert, key = ca.issue("old", ["localhost"], str(tmp_path / "certs"),
                         not_before=now - dt.timedelta(days=30),
                         not_after=now - dt.timedelta(days=1))
    server = serve(TlsSettings(cert, key))
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        talk(server.port, TlsSettings(ca_file=ca.cert_path))


def test_a_wrong_host_name_is_refused_unless_the_check_is_off(pki, serve):
    ca, settings, _ = pki
    server = serve(settings)
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        talk(server.port, TlsSettings(ca_file=ca.cert_path), host="broker-9.example")
    said, _ = talk(server.port, TlsSettings(ca_file=ca.cert_path, verify_hostname=False),
                   host="broker-9.example")
    assert said == b"ok"


def test_a_required_client_certificate_names_the_principal(pki, serve):
    ca, settings, tmp_path = pki
    server = serve(TlsSettings(settings.cert_file, settings.key_file, ca.cert_path,
                               client_auth="required"))
    cert, key = ca.issue("mirror", [], str(tmp_path / "clients"), organization="samsa")
    said, _ = talk(server.port, TlsSettings(cert, key, ca.cert_path))
    assert said == b"ok" and server.principals == ["User:CN=mirror,O=samsa"]
    # without a certificate the handshake fails (on the server's side first)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        said, _ = talk(server.port, TlsSettings(ca_file=ca.cert_path))
        assert not said                    # TLS 1.3: the refusal comes with the first read
    assert server.principals == ["User:CN=mirror,O=samsa"]
    # a client certificate of another CA is refused too
    stranger = CertificateAuthority.create(str(tmp_path / "other-ca"), name="someone else")
    cert, key = stranger.issue("mirror", [], str(tmp_path / "stranger"), organization="samsa")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        said, _ = talk(server.port, TlsSettings(cert, key, ca.cert_path))
        assert not said
    assert server.principals == ["User:CN=mirror,O=samsa"]


def test_a_certificate_renewed_in_place_is_used_by_the_next_connection(pki, serve):
    ca, settings, tmp_path = pki
    server = serve(settings)
    _, first = talk(server.port, TlsSettings(ca_file=ca.cert_path))
    ca.issue("broker-0", ["localhost", "127.0.0.1"], str(tmp_path / "certs"))   # renewed
    _, second = talk(server.port, TlsSettings(ca_file=ca.cert_path))
    assert second != first and server.contexts.reloads == 1
    # a renewal that breaks the files keeps the certificate that works
    with open(settings.key_file, "w") as f:
        f.write("not a key")
    said, third = talk(server.port, TlsSettings(ca_file=ca.cert_path))
    assert said == b"ok" and third == second
    assert server.contexts.failed_reloads >= 1
    # once fixed, the fixed files are taken
    ca.issue("broker-0", ["localhost", "127.0.0.1"], str(tmp_path / "certs"))
    _, fourth = talk(server.port, TlsSettings(ca_file=ca.cert_path))
    assert fourth not in (first, second)


def test_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="client_auth"):
        TlsSettings(client_auth="sometimes")
    with pytest.raises(ValueError, match="together"):
        TlsSettings(cert_file="a.crt")
    with pytest.raises(ValueError, match="listener"):
        server_context(TlsSettings())


def test_principal_of_escapes_what_rfc_4514_escapes():
    cert = {"subject": ((("organizationName", "a,b"),), (("commonName", "x+y"),))}
    assert principal_of(cert) == "User:CN=x\\+y,O=a\\,b"
    assert principal_of(None) is None and principal_of({}) is None
    # a multi-valued RDN is joined by "+", and reads unlike two RDNs
    multi = {"subject": ((("commonName", "a"), ("organizationName", "b")),)}
    two = {"subject": ((("organizationName", "b"),), (("commonName", "a"),))}
    assert principal_of(multi) == "User:CN=a+O=b" != principal_of(two) == "User:CN=a,O=b"
    odd = {"subject": ((("commonName", '#x;<y>"z" '),),)}
    assert principal_of(odd) == 'User:CN=\\#x\\;\\<y\\>\\"z\\"\\ '
