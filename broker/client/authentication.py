"""A client's side of SASL/SCRAM-SHA-512 on a broker connection
(docs/protocol.md 6.9, docs/security.md).

Right after connecting (after TLS, when used) and before any other request:

    SaslHandshake("SCRAM-SHA-512")        -> the mechanisms the listener takes
    SaslAuthenticate(client-first)        -> server-first (salt, iterations, nonce)
    SaslAuthenticate(client-final, proof) -> server-final (the server's signature,
                                             checked: a broker that does not hold
                                             the credential is refused)

A refusal raises ``SamsaError`` (SASL_AUTHENTICATION_FAILED: "authentication
failed"), which is not retriable: a wrong password does not get better by
trying again.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.scram import MECHANISM, ScramClient, ScramError
from broker.security.password_file import read_password_file
from broker.security.tls import TlsClientSettings, client_context_of


@dataclass(frozen=True)
class SaslLogin:
    """A user and password to authenticate with (the password never in repr)."""
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class SaslClientSettings:
    """The SASL settings of a client's configuration (ProducerConfig and
    ConsumerConfig take them: ``--set sasl_username=alice --set
    sasl_password_file=/run/secrets/alice``)."""
    sasl_username: str = ""
    """Authenticate as this user (SCRAM-SHA-512) when connecting: for a
    listener whose authentication is "scram". Empty: do not authenticate."""
    sasl_password_file: str = ""
    """A file holding the user's password (its first line); kept out of the
    settings file and the process's arguments."""
    sasl_password: str = field(default="", repr=False)
    """The password itself, for programs that have it in memory (tests);
    prefer sasl_password_file."""


def sasl_login_of(settings: SaslClientSettings) -> SaslLogin | None:
    """The login ``settings`` ask for; None without ``sasl_username``.
    Raises ValueError when the password cannot be had."""
    if not settings.sasl_username:
        return None
    password = settings.sasl_password
    if settings.sasl_password_file:
        password = read_password_file(settings.sasl_password_file, "sasl_password_file")
    if not password:
        raise ValueError("sasl_username needs a password: sasl_password_file (or "
                         "sasl_password)")
    return SaslLogin(settings.sasl_username, password)


def authenticate(conn, login: SaslLogin) -> None:
    """Run the exchange on ``conn`` (a connected BrokerConnection, nothing
    else sent on it yet). Raises SamsaError when the broker refuses (or does
    not prove it holds the credential), BrokerConnectionError when the
    connection fails."""
    reply = conn.request(api.SaslHandshakeRequest(MECHANISM))
    if MECHANISM not in reply.mechanisms:
        raise SamsaError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                         f"the broker takes {', '.join(reply.mechanisms)}")
    scram = ScramClient(login.username, login.password)
    server_first = conn.request(api.SaslAuthenticateRequest(scram.first())).auth_bytes
    try:
        client_final = scram.final(server_first)
    except ScramError as exc:
        raise SamsaError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                         f"the broker's answer is not SCRAM's: {exc}") from None
    server_final = conn.request(api.SaslAuthenticateRequest(client_final)).auth_bytes
    try:
        scram.verify(server_final)
    except ScramError as exc:
        raise SamsaError(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)) from None


@dataclass(frozen=True)
class ClientSecurity(TlsClientSettings, SaslClientSettings):
    """Every security setting of a client, for a file of them (the console
    tools' ``--client-config``, as Kafka's ``--command-config``): ``tls``,
    ``tls_ca_file``, ``tls_cert_file``, ``tls_key_file``,
    ``tls_verify_hostname``, ``sasl_username``, ``sasl_password_file``."""

    def settings(self) -> dict:
        """As keyword settings of a ProducerConfig or ConsumerConfig."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def admin_options(self) -> dict:
        """As keyword arguments of an AdminClient (or BrokerConnection)."""
        return {"tls": client_context_of(self), "sasl": sasl_login_of(self)}
