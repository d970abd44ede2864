"""A certificate authority of one's own, for the lab, the demo and the tests
(a company uses its own PKI: the services only read certificate and key
files, broker/security/tls.py). It makes a CA (a self-signed certificate
and its key) and issues certificates signed by it, each for one service's
host names and addresses, usable by a server and as a client's certificate
(its subject is the principal, docs/security.md). Keys are ECDSA P-256;
key files are written readable by their owner only.

    ca = CertificateAuthority.create(directory)        # ca.crt, ca.key
    cert, key = ca.issue("broker-0", ["localhost", "127.0.0.1"], directory)

``CertificateAuthority.open(directory)`` loads one made before.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"


def _write(path: str, data: bytes, private: bool) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)             # a reader never sees half a file (tls.py reloads)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _subject_alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


@dataclass(frozen=True)
class CertificateAuthority:
    cert_path: str
    key_path: str

    @classmethod
    def create(cls, directory: str, name: str = "Samsa lab CA",
               days: int = 3650) -> "CertificateAuthority":
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=days))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                             crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .sign(key, hashes.SHA256()))
        ca = cls(os.path.join(directory, CA_CERT), os.path.join(directory, CA_KEY))
        _write(ca.key_path, _key_bytes(key), private=True)
        _write(ca.cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
        return ca

    @classmethod
    def open(cls, directory: str) -> "CertificateAuthority":
        ca = cls(os.path.join(directory, CA_CERT), os.path.join(directory, CA_KEY))
        for path in (ca.cert_path, ca.key_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"no certificate authority in {directory}: {path} "
                                        f"is missing")
        return ca

    def _load(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        with open(self.cert_path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(self.key_path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        return cert, key

    def issue(self, name: str, hosts: list[str], directory: str, days: int = 365,
              not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
              organization: str | None = None) -> tuple[str, str]:
        """A certificate for ``name`` (its subject's common name; the
        principal ``User:CN=<name>``, with ``O=<organization>`` if given),
        valid for ``hosts`` (DNS names and IP addresses), signed by this CA;
        written as ``<name>.crt`` and ``<name>.key`` in ``directory``.
        ``not_before``/``not_after`` override the validity (an expired
        certificate, for a test). Returns (certificate path, key path)."""
        ca_cert, ca_key = self._load()
        key = ec.generate_private_key(ec.SECP256R1())
        # the most general first, as certificates write it (RFC 4514 strings
        # read it backwards: CN=<name>,O=<organization>)
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
        if organization:
            attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        now = dt.datetime.now(dt.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(x509.Name(attributes))
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before or now - dt.timedelta(minutes=5))
                   .not_valid_after(not_after or now + dt.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]),
                                  critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       ca_key.public_key()), critical=False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                _subject_alt_names(hosts)), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path = os.path.join(directory, f"{name}.crt")
        key_path = os.path.join(directory, f"{name}.key")
        _write(key_path, _key_bytes(key), private=True)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
        return cert_path, key_path
