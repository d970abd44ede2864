"""SCRAM-SHA-512 (RFC 5802, with RFC 7677's hash), sans IO: the client's and
the server's sides of the exchange as objects that take and give the four
messages as bytes, and the credential a server keeps for each user. No
socket, no clock, no ZooKeeper: the caller carries the messages (in the
broker's SASL handshake request, docs/security.md) and looks the credential
up. The server never sees the password, only what it stores:

    SaltedPassword  = PBKDF2-HMAC-SHA-512(password, salt, iterations)
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = SHA-512(ClientKey)                    (stored)
    ServerKey       = HMAC(SaltedPassword, "Server Key")    (stored)
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The exchange::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>          (the client checks it)

Each exchange's server nonce is fresh, so a recorded client-final proves
nothing in another exchange (a replay fails). An unknown user gets a
server-first like a known one's (a salt derived from the user name and a
secret of the server's, and the iteration count ``fake_iterations``, by
default the default count), and fails at the end as a wrong password does:
the answers do not tell which users exist, as long as the credentials are
made with the default iteration count and salt length (a credential made
with another count stands out from the unknown users' answers). Every failure of the server's
side is ``AuthenticationFailed`` whose message is for the server's log; the
peer is told "authentication failed" and nothing more.

Limits: user names and passwords are taken as UTF-8 as they are, without
SASLprep (RFC 4013) normalization: a client sends them as they were set;
a name is 1 to 255 characters, none a control character. No channel binding
(gs2 header ``n,,``: TLS is the channel's protection); no authorization
identity (``a=``).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Callable

MECHANISM = "SCRAM-SHA-512"
#: RFC 7677 asks for at least 4096 iterations; more cost every client's
#: connection set-up (docs/security.md)
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 8192
MAX_ITERATIONS = 1 << 20
NONCE_BYTES = 24
SALT_BYTES = 32
#: the largest message either side takes (the broker caps the frames of an
#: unauthenticated connection far below its usual limit)
MAX_MESSAGE_BYTES = 1024
GS2_HEADER = b"n,,"
_KEY_BYTES = hashlib.sha512().digest_size
_USER = re.compile(r"[^\x00-\x1f\x7f]{1,255}")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")     # printable, no ","


class ScramError(ValueError):
    """A malformed message, or an exchange used out of order."""


class AuthenticationFailed(ScramError):
    """The client did not prove it holds the password (or the user is
    unknown): the message is for the server's log, never for the peer."""


def validate_user(name: str) -> str:
    """``name`` if it can be a user name: 1 to 255 characters, none a
    control character; ValueError otherwise."""
    if not isinstance(name, str) or not _USER.fullmatch(name):
        raise ValueError(f"a user name is 1 to 255 printable characters, not {name!r}")
    return name


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha512).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(text: str) -> str:
    if re.search(r"=(?!2C|3D)", text):
        raise ScramError("a user name with a bad escape")
    return text.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: bytes, what: str, expected: str) -> dict[str, str]:
    """``a=x,b=y`` -> {"a": "x", "b": "y"}, the keys in the order
    ``expected`` (one letter each) names, nothing else."""
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"{what} is longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None
    parts = text.split(",")
    if len(parts) != len(expected):
        raise ScramError(f"{what} has {len(parts)} attributes, not {len(expected)}")
    out = {}
    for key, part in zip(expected, parts):
        if len(part) < 2 or part[0] != key or part[1] != "=":
            raise ScramError(f"{what}: expected attribute {key}=, got {part[:10]!r}")
        out[key] = part[2:]
    return out


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps for a user: never the password."""
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __post_init__(self) -> None:
        if not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, "
                             f"not {self.iterations}")
        if len(self.stored_key) != _KEY_BYTES or len(self.server_key) != _KEY_BYTES:
            raise ValueError("stored_key and server_key are 64 bytes each (SHA-512)")
        if not 16 <= len(self.salt) <= 128:
            raise ValueError("the salt is 16 to 128 bytes")

    @classmethod
    def from_password(cls, password: str, salt: bytes | None = None,
                      iterations: int = DEFAULT_ITERATIONS) -> "ScramCredential":
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        salted = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(salt, iterations, hashlib.sha512(client_key).digest(),
                   _hmac(salted, b"Server Key"))

    def to_text(self) -> str:
        """``salt=..,stored_key=..,server_key=..,iterations=N`` (base64), as
        Kafka keeps its SCRAM credentials."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        fields = dict(part.split("=", 1) for part in text.strip().split(",") if "=" in part)
        try:
            return cls(_unb64(fields["salt"], "salt"), int(fields["iterations"]),
                       _unb64(fields["stored_key"], "stored_key"),
                       _unb64(fields["server_key"], "server_key"))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential ({exc})") from None


class ScramClient:
    """The client's side: ``first()``, then ``final(server_first)``, then
    ``verify(server_final)`` (raises ScramError when the server could not
    prove it knows the credential)."""

    def __init__(self, user: str, password: str, nonce: str | None = None) -> None:
        self.user = validate_user(user)
        self.password = password
        self.nonce = nonce or _b64(os.urandom(NONCE_BYTES))
        self._bare: bytes | None = None
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        self._bare = f"n={_escape(self.user)},r={self.nonce}".encode("utf-8")
        return GS2_HEADER + self._bare

    def final(self, server_first: bytes) -> bytes:
        if self._bare is None or self._server_signature is not None:
            raise ScramError("final() comes once, after first()")
        attrs = _attributes(server_first, "server-first", "rsi")
        nonce = attrs["r"]
        if not nonce.startswith(self.nonce) or len(nonce) <= len(self.nonce) \
                or not _NONCE.fullmatch(nonce):
            raise ScramError("the server's nonce does not extend the client's")
        try:
            iterations = int(attrs["i"])
        except ValueError:
            raise ScramError("the iteration count is not a number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(f"the server asks for {iterations} iterations "
                             f"({MIN_ITERATIONS} to {MAX_ITERATIONS} taken)")
        salt = _unb64(attrs["s"], "the salt")
        salted = hashlib.pbkdf2_hmac("sha512", self.password.encode("utf-8"), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        without_proof = f"c={_b64(GS2_HEADER)},r={nonce}".encode("ascii")
        auth = self._bare + b"," + server_first + b"," + without_proof
        proof = _xor(client_key, _hmac(hashlib.sha512(client_key).digest(), auth))
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth)
        return without_proof + b",p=" + _b64(proof).encode("ascii")

    def verify(self, server_final: bytes) -> None:
        if self._server_signature is None:
            raise ScramError("verify() comes after final()")
        if server_final.startswith(b"e="):
            raise ScramError("the server refused: authentication failed")
        attrs = _attributes(server_final, "server-final", "v")
        if not hmac.compare_digest(_unb64(attrs["v"], "the server signature"),
                                   self._server_signature):
            raise ScramError("the server's signature is wrong: it does not hold the "
                             "credential (a server in the middle?)")


class ScramServer:
    """The server's side of one exchange: ``first(client_first)`` ->
    server-first, ``final(client_final)`` -> server-final and ``user`` set.
    ``lookup(user)`` gives the user's credential or None; ``secret`` (bytes
    of the server's own) makes an unknown user's answers look like a known
    one's."""

    def __init__(self, lookup: Callable[[str], ScramCredential | None], secret: bytes,
                 nonce: str | None = None,
                 fake_iterations: int = DEFAULT_ITERATIONS) -> None:
        self._lookup = lookup
        self._secret = secret
        self._nonce = nonce or _b64(os.urandom(NONCE_BYTES))
        self._fake_iterations = fake_iterations
        self._state = "first"
        self._claimed: str | None = None
        self._credential: ScramCredential | None = None
        self._auth_prefix = b""
        self._combined = ""
        self.user: str | None = None            # set once the client proved it

    def first(self, client_first: bytes) -> bytes:
        if self._state != "first":
            raise ScramError("first() comes once")
        self._state = "final"
        if not client_first.startswith(GS2_HEADER):
            raise ScramError("client-first must start with 'n,,' (no channel binding, no "
                             "authorization identity)")
        bare = client_first[len(GS2_HEADER):]
        attrs = _attributes(bare, "client-first", "nr")
        user = _unescape(attrs["n"])
        try:
            validate_user(user)
        except ValueError as exc:
            raise ScramError(str(exc)) from None
        if not _NONCE.fullmatch(attrs["r"]) or len(attrs["r"]) > 256:
            raise ScramError("the client's nonce is not printable, or too long")
        self._claimed = user
        self._credential = self._lookup(user)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:
            salt = _hmac(self._secret, b"salt:" + user.encode("utf-8"))[:SALT_BYTES]
            iterations = self._fake_iterations
        self._combined = attrs["r"] + self._nonce
        server_first = f"r={self._combined},s={_b64(salt)},i={iterations}".encode("ascii")
        self._auth_prefix = bare + b"," + server_first
        return server_first

    def final(self, client_final: bytes) -> bytes:
        if self._state != "final":
            raise ScramError("final() comes once, after first()")
        self._state = "done"
        attrs = _attributes(client_final, "client-final", "crp")
        if attrs["c"] != _b64(GS2_HEADER):
            raise ScramError("client-final's channel binding is not the 'n,,' header")
        if attrs["r"] != self._combined:
            raise AuthenticationFailed(f"user {self._claimed!r}: the nonce is not this "
                                       f"exchange's (a replayed message?)")
        proof = _unb64(attrs["p"], "the proof")
        credential = self._credential
        if credential is None:
            # the work a known user's proof costs, so the time does not tell either
            _hmac(self._secret, self._auth_prefix)
            raise AuthenticationFailed(f"user {self._claimed!r} is unknown")
        if len(proof) != _KEY_BYTES:
            raise AuthenticationFailed(f"user {self._claimed!r}: a proof of {len(proof)} "
                                       f"bytes")
        without_proof = client_final[:client_final.rindex(b",p=")]
        auth = self._auth_prefix + b"," + without_proof
        client_key = _xor(proof, _hmac(credential.stored_key, auth))
        if not hmac.compare_digest(hashlib.sha512(client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(f"user {self._claimed!r}: wrong password")
        self.user = self._claimed
        return b"v=" + _b64(_hmac(credential.server_key, auth)).encode("ascii")
