"""Who may ask the HTTP services, and over what: TLS and users with roles for
the audit service, the lag service, the schema registry and the /metrics
endpoints (docs/security.md, "HTTP services").

A service's ``[http]`` table (``HttpSecurity``) names:

* ``tls_cert_file``/``tls_key_file``: serve HTTPS only (reloaded when the
  files change); ``tls_ca_file`` and ``tls_client_auth`` (none, optional,
  required): clients' certificates checked against that authority;
* ``users_file``: every request must then be authenticated, by HTTP Basic
  (``Authorization: Basic``, what curl, Prometheus, Confluent's registry
  clients and Grafana send) or by a client certificate, and the user's role
  must allow it: ``read`` may GET, ``admin`` may do everything
  the service serves (the registry's POST, PUT, DELETE). ``GET /healthz``
  alone is answered to anyone (a load balancer's or an orchestrator's
  probe: it says "ok" or not, nothing else).

The users file is a text file, a user a line, ``NAME ROLE SECRET``::

    # name      role   secret
    prometheus  read   pbkdf2-sha512:210000:<salt, base64>:<key, base64>
    CN=lag-ui   read   certificate

A SECRET ``pbkdf2-sha512:...`` is the password's PBKDF2-HMAC-SHA512 (never
the password); ``certificate`` means the client whose certificate's subject
is NAME (RFC 4514, as in ``User:CN=...`` of the broker's ACLs), with no
password. ``python -m broker.tools http-users`` writes it. The file is read
again when it changes (looked at at most once a second); one that cannot be
read keeps the users read before, logged.

Each password is checked with PBKDF2 once; a success is remembered (keyed by
an HMAC of the name, the password and the user's secret under a key of the
process, at most 1,000) so that later requests cost a hash. Checks run one
at a time (a flood of wrong passwords uses one core at most), with at most
``MAX_WAITING_CHECKS`` waiting: a request beyond is answered 503, retry. An
unknown name costs a PBKDF2 of the iteration count most users of the file
have, as a wrong password does. Refusals are logged at a bounded rate and
counted: ``samsa_http_authentications_total{result}`` (ok, failed,
missing, forbidden, busy).
"""
from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import logging
import os
import secrets
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily

from broker.security.tls import CLIENT_AUTH, ReloadingContext, TlsSettings, principal_of

from .logging_setup import RateLimitedLog

log = logging.getLogger("samsa.http")

ROLES = ("read", "admin")
READ_METHODS = ("GET",)
MAX_WAITING_CHECKS = 16
HASH_NAME = "pbkdf2-sha512"
DEFAULT_ITERATIONS = 210_000        # OWASP's figure for PBKDF2-HMAC-SHA512 (2023)
MIN_ITERATIONS = 10_000
CERTIFICATE = "certificate"
MEMO_SIZE = 1000
RESULTS = ("ok", "failed", "missing", "forbidden", "busy")
OPEN_PATHS = ("/healthz",)          # GET only: a probe's, telling nothing


@dataclass(frozen=True)
class HttpSecurity:
    """``[http]``: TLS and users of a service's HTTP port (none by default:
    plain HTTP, anyone may ask)."""
    tls_cert_file: str = ""
    """The server's certificate (PEM, its chain after it): HTTPS only."""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    """The authority clients' certificates are checked against."""
    tls_client_auth: str = "none"
    """none, optional (checked when sent) or required."""
    users_file: str = ""
    """Users and their roles (the module's text): every request authenticated."""

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("http: tls_cert_file and tls_key_file go together")
        if self.tls_client_auth not in CLIENT_AUTH:
            raise ValueError(f"http: tls_client_auth must be one of {', '.join(CLIENT_AUTH)}")
        if self.tls_client_auth != "none" and not self.tls_cert_file:
            raise ValueError("http: tls_client_auth needs TLS (tls_cert_file, tls_key_file)")
        if self.tls_client_auth != "none" and not self.tls_ca_file:
            raise ValueError("http: tls_client_auth needs tls_ca_file (the clients' authority)")

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)

    def tls_settings(self) -> TlsSettings:
        return TlsSettings(self.tls_cert_file, self.tls_key_file, self.tls_ca_file,
                           client_auth=self.tls_client_auth)


# ---------------------------------------------------------------- the users file

@dataclass(frozen=True)
class HttpUser:
    name: str
    role: str
    secret: str           # "pbkdf2-sha512:ITER:SALT:KEY" or "certificate"


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS,
                  salt: bytes | None = None) -> str:
    """The SECRET of a users file's line for ``password``."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"at least {MIN_ITERATIONS} iterations")
    salt = salt if salt is not None else secrets.token_bytes(16)
    key = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return ":".join((HASH_NAME, str(iterations), base64.b64encode(salt).decode(),
                     base64.b64encode(key).decode()))


def _secret_parts(secret: str) -> tuple[int, bytes, bytes]:
    """(iterations, salt, key) of a password secret; ValueError when it is
    not one."""
    try:
        name, iterations, salt, key = secret.split(":")
        parts = int(iterations), base64.b64decode(salt, validate=True), \
            base64.b64decode(key, validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("not " + HASH_NAME + ":ITERATIONS:SALT:KEY") from None
    if name != HASH_NAME or parts[0] < MIN_ITERATIONS or not parts[1] or len(parts[2]) != 64:
        raise ValueError(f"not {HASH_NAME}:ITERATIONS:SALT:KEY with at least "
                         f"{MIN_ITERATIONS} iterations and a 64-byte key")
    return parts


def password_matches(password: str, secret: str) -> bool:
    """Whether ``password`` is the one ``secret`` was made from."""
    try:
        iterations, salt, key = _secret_parts(secret)
    except ValueError:
        return False
    got = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return hmac.compare_digest(got, key)


def parse_users(text: str, where: str = "users file") -> dict[str, HttpUser]:
    """The users of a users file's text; ValueError naming the line."""
    users: dict[str, HttpUser] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(None, 2)
        if len(parts) != 3:
            raise ValueError(f"{where}, line {number}: want NAME ROLE SECRET")
        name, role, secret = parts
        if role not in ROLES:
            raise ValueError(f"{where}, line {number}: role {role!r} is not one of "
                             f"{', '.join(ROLES)}")
        if secret != CERTIFICATE:
            try:
                _secret_parts(secret)
            except ValueError as exc:
                raise ValueError(f"{where}, line {number}: the secret is neither "
                                 f"{CERTIFICATE} nor a password's ({exc})") from None
        if ":" in name and secret != CERTIFICATE:
            raise ValueError(f"{where}, line {number}: a password user's name has no ':' "
                             f"(HTTP Basic splits on it)")
        if name in users:
            raise ValueError(f"{where}, line {number}: {name} is there twice")
        users[name] = HttpUser(name, role, secret)
    return users


def format_users(users: Iterable[HttpUser]) -> str:
    lines = ["# Samsa HTTP users: NAME ROLE SECRET (docs/security.md); written by "
             "python -m broker.tools http-users"]
    lines += [f"{u.name} {u.role} {u.secret}" for u in sorted(users, key=lambda u: u.name)]
    return "\n".join(lines) + "\n"


def read_users_file(path: str) -> dict[str, HttpUser]:
    """The users of ``path``; ValueError when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"users file {path}: {exc.strerror or exc}") from None
    return parse_users(text, f"users file {path}")


def write_users_file(path: str, users: Iterable[HttpUser]) -> None:
    """Replace ``path`` at once (a new temporary file beside it, renamed),
    readable by its owner only; a file that was there keeps its owner and
    group (a root-run tool does not lock the service's user out)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=".http-users-")
    try:
        os.fchmod(fd, 0o600)
        try:
            st = os.stat(path)
            if os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)
        except FileNotFoundError:
            pass
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(format_users(users))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- deciding

@dataclass(frozen=True)
class Verdict:
    """What a request gets: ``user`` when allowed; else the HTTP status
    (401 or 403) and the message."""
    user: str | None
    status: int = 200
    message: str = ""


class HttpGate:
    """Decides each request of one server from its headers, its method and
    its client's certificate. Thread-safe. Built from settings whose files
    cannot be used (TLS, users): ValueError saying which."""

    def __init__(self, settings: HttpSecurity, service: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.service = service
        self._clock = clock
        self._lock = threading.Lock()
        self._hashing = threading.Lock()           # one PBKDF2 at a time ...
        self._waiting = threading.BoundedSemaphore(MAX_WAITING_CHECKS)   # ... few waiting
        self._memo_key = secrets.token_bytes(32)
        self._memo: OrderedDict[bytes, str] = OrderedDict()
        self._users: dict[str, HttpUser] = {}
        self._signature: tuple | None = None
        self._checked = float("-inf")
        # a peer triggers refusals at will: a line per kind every 10 s at most
        self._refusals_log = RateLimitedLog(log, burst=1, interval=10.0, clock=clock)
        self.counts = {result: 0 for result in RESULTS}
        self.context: ReloadingContext | None = None
        if settings.tls:
            try:
                self.context = ReloadingContext.server(settings.tls_settings())
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"http: cannot use the TLS files {settings.tls_cert_file}, "
                                 f"{settings.tls_key_file}: {exc}") from None
        if settings.users_file:
            self._users = read_users_file(settings.users_file)   # a bad file stops the start
            if not settings.tls:
                log.warning("%s: users are asked for over plain HTTP: their passwords cross "
                            "the network in clear (set tls_cert_file and tls_key_file)",
                            service)
            self._signature = _signature(settings.users_file)
            self._checked = clock()

    @property
    def authenticates(self) -> bool:
        return bool(self.settings.users_file)

    def users(self) -> dict[str, HttpUser]:
        """The users as the file now says (read again when it changed)."""
        now = self._clock()
        with self._lock:
            if now - self._checked >= 1.0:
                self._checked = now
                signature = _signature(self.settings.users_file)
                if signature != self._signature:
                    try:
                        # the memo stays: its keys hold each user's secret
                        self._users = read_users_file(self.settings.users_file)
                        log.info("%s: users file %s read again: %d users", self.service,
                                 self.settings.users_file, len(self._users))
                    except ValueError as exc:
                        log.error("%s: %s; keeping the %d users read before", self.service,
                                  exc, len(self._users))
                    self._signature = signature
            return self._users

    def decide(self, method: str, path: str, headers: Mapping[str, str],
               peer_certificate: dict | None, address: str) -> Verdict:
        if not self.authenticates or (method == "GET" and path in OPEN_PATHS):
            return Verdict(None)
        users = self.users()
        user = self._certificate_user(users, peer_certificate)
        if user is None:
            user, failure = self._password_user(users, headers.get("Authorization") or "")
            if failure == "busy":
                self._count("busy", address, "too many password checks waiting")
                return Verdict(None, 503, "too many authentications in progress; retry")
            if user is None:
                self._count("missing" if failure == "missing" else "failed", address,
                            failure if failure != "missing" else "no credentials")
                return Verdict(None, 401, "authentication required" if failure == "missing"
                               else "authentication failed")
        if method not in READ_METHODS and user.role != "admin":
            self._count("forbidden", address, f"{user.name} ({user.role}) asked {method}")
            return Verdict(user.name, 403, f"the role {user.role} may not {method} here")
        self._count("ok")
        return Verdict(user.name)

    def _certificate_user(self, users: dict[str, HttpUser],
                          peer_certificate: dict | None) -> HttpUser | None:
        principal = principal_of(peer_certificate) if peer_certificate else None
        if principal is None:
            return None
        user = users.get(principal.removeprefix("User:"))
        return user if user is not None and user.secret == CERTIFICATE else None

    def _password_user(self, users: dict[str, HttpUser],
                       authorization: str) -> tuple[HttpUser | None, str]:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "basic" or not token:
            return None, "missing"
        try:
            name, sep, password = base64.b64decode(token.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None, "a malformed Basic header"
        user = users.get(name) if sep else None
        if user is None or user.secret == CERTIFICATE:
            # as long as a real check: names are not told apart
            if self._check(password, _decoy(_usual_iterations(users))) is None:
                return None, "busy"
            return None, f"unknown user {name[:64]!r}"
        memo = hmac.new(self._memo_key, f"{name}\0{password}\0{user.secret}".encode(),
                        hashlib.sha256).digest()
        with self._lock:
            if memo in self._memo:
                self._memo.move_to_end(memo)
                return user, ""
        ok = self._check(password, user.secret)
        if ok is None:
            return None, "busy"
        if not ok:
            return None, f"wrong password for {name!r}"
        with self._lock:
            self._memo[memo] = name
            while len(self._memo) > MEMO_SIZE:
                self._memo.popitem(last=False)
        return user, ""

    def _check(self, password: str, secret: str) -> bool | None:
        """password_matches, one at a time; None when too many wait already."""
        if not self._waiting.acquire(blocking=False):
            return None
        try:
            with self._hashing:
                return password_matches(password, secret)
        finally:
            self._waiting.release()

    def _count(self, result: str, address: str = "", why: str = "") -> None:
        with self._lock:
            self.counts[result] += 1
            if result != "ok":
                self._refusals_log.log(logging.WARNING, result,
                                       "%s: HTTP request from %s refused (%s): %s",
                                       self.service, address, result, why)

    def collect(self):
        """Prometheus: samsa_http_authentications_total{service,result}."""
        family = CounterMetricFamily("samsa_http_authentications",
                                     "HTTP requests by the result of their authentication",
                                     labels=["service", "result"])
        with self._lock:
            counts = dict(self.counts)
        for result, count in counts.items():
            family.add_metric([self.service, result], count)
        yield family


@functools.lru_cache(maxsize=8)
def _decoy(iterations: int) -> str:
    """A secret of ``iterations``, checked for unknown names."""
    return hash_password("decoy", iterations, salt=bytes(16))


def _usual_iterations(users: dict[str, HttpUser]) -> int:
    """The iteration count most password users have (the default without any)."""
    counts: dict[int, int] = {}
    for user in users.values():
        if user.secret != CERTIFICATE:
            iterations = _secret_parts(user.secret)[0]
            counts[iterations] = counts.get(iterations, 0) + 1
    return max(counts, key=lambda n: (counts[n], n)) if counts else DEFAULT_ITERATIONS


def _signature(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def check_files(settings: HttpSecurity, table: str) -> None:
    """ValueError, naming the settings' ``table`` and the file, when the
    files ``settings`` name (TLS, users) cannot be used: for a service to
    refuse to start with the reason."""
    try:
        HttpGate(settings, table)
    except ValueError as exc:
        raise ValueError(f"{table}: {str(exc).removeprefix('http: ')}") from None


def wrap_accepted(context: ReloadingContext, sock) -> ssl.SSLSocket:
    """An accepted connection as a TLS server socket, its handshake left to
    the thread that serves it (so a slow client holds no other)."""
    return context.current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
