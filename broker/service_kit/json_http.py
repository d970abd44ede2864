"""The one small HTTP server of the services that answer with JSON (and the
odd page): the audit's web API, the lag service, the schema registry's REST
API, and every /metrics endpoint (metrics_http.py).

A service gives one function, ``answer(request) -> Response``; the server
parses the URL into a ``Request`` (the method, the path, its segments
unquoted one by one, the query with the last value of a repeated name, and
the body), calls it on a thread of its own per connection, and writes the
``Response`` with Content-Type, Content-Length and ``Cache-Control:
no-store`` (every answer is the live state). ``BadRequest`` raised by the
answer becomes 400 ``{"error": message}``; any other exception 500
``{"error": "internal error"}``, logged.

Only GET is served unless the server is given more ``methods`` (the schema
registry's POST, PUT, DELETE): any other method is 405. A body is read up
to ``max_body`` bytes (Content-Length required); a longer one is read and
dropped (up to 64 MiB) and answered 413.

Security (``security``, an ``HttpSecurity``: http_security.py): HTTPS with
the TLS handshake on the connection's own thread (10 s at most), and every
request authenticated and its method allowed by the user's role before it
is read further: 401 ``{"error": "authentication required"}`` (or
"authentication failed") with ``WWW-Authenticate: Basic``, 403 for a role
that may not. ``Request.user`` is then who asked.

Threads: ``start()`` serves on one daemon thread, each
connection on a daemon thread of its own (at most ``MAX_CONNECTIONS`` at
once: a connection beyond is closed unanswered; a connection idle for
``IDLE_TIMEOUT_S`` in the middle of a request, or between two, is closed);
``answer`` must be thread-safe.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import socket
import ssl
import sys
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from .http_security import HttpGate, HttpSecurity, wrap_accepted
from .logging_setup import RateLimitedLog

log = logging.getLogger("samsa.http")

JSON = "application/json"
_DRAIN_LIMIT = 64 << 20       # an over-long body read (and dropped) before the 413, at most


class BadRequest(ValueError):
    """What the client asked is malformed: answered 400 with the message."""


@dataclass(frozen=True)
class Request:
    path: str                              # the URL's path, as sent ("/v3/kafka")
    segments: list[str]                    # its non-empty parts, each unquoted
    query: dict[str, str]                  # name -> its last value
    headers: Mapping[str, str] = field(default_factory=dict)
    query_string: str = ""                 # as sent, for names given more than once
    method: str = "GET"
    body: bytes = b""
    user: str | None = None                # who asked, when the server authenticates


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()


def json_response(obj, status: int = HTTPStatus.OK) -> Response:
    """``obj`` as JSON (indented by one, as every service has answered)."""
    return Response(int(status), json.dumps(obj, indent=1).encode(), JSON)


def parse_request(raw_path: str, headers: Mapping[str, str] | None = None,
                  method: str = "GET", body: bytes = b"", user: str | None = None) -> Request:
    """The request line's target split into path, segments and query."""
    url = urlsplit(raw_path)
    return Request(url.path, [unquote(p) for p in url.path.split("/") if p],
                   {k: v[-1] for k, v in parse_qs(url.query).items()}, headers or {}, url.query,
                   method, body, user)

HANDSHAKE_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 256


Answer = Callable[[Request], Response]


class _Handler(BaseHTTPRequestHandler):
    server: "JSONHTTPServer"
    timeout = IDLE_TIMEOUT_S          # every read and write of the connection (a slow client)

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(HANDSHAKE_TIMEOUT_S)
            self.request.do_handshake()       # its failure ends the connection (handle_error)
        super().setup()

    def log_message(self, fmt: str, *args) -> None:      # access logs at DEBUG
        log.debug("%s %s " + fmt, self.server.name, self.address_string(), *args)

    @property
    def server_version(self) -> str:                      # the Server header
        return f"samsa-{self.server.name}"

    def do_GET(self) -> None:   # noqa: N802 - the stdlib's name
        self._serve("GET")

    def do_POST(self) -> None:   # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:   # noqa: N802
        self._serve("PUT")

    def do_DELETE(self) -> None:   # noqa: N802
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        verdict = self.server.gate.decide(
            method, urlsplit(self.path).path, self.headers,
            self.request.getpeercert() if isinstance(self.request, ssl.SSLSocket) else None,
            self.client_address[0])
        if verdict.status != 200:
            self.close_connection = True
            headers = {401: (("WWW-Authenticate", f'Basic realm="samsa-{self.server.name}", '
                                                  'charset="UTF-8"'),),
                       503: (("Retry-After", "1"),)}.get(verdict.status, ())
            refusal = json_response({"error": verdict.message}, verdict.status)
            self._respond(dataclasses.replace(refusal, headers=headers))
            return
        if method not in self.server.methods:
            self._respond(json_response({"error": f"{method} is not served here"},
                                        HTTPStatus.METHOD_NOT_ALLOWED))
            return
        body = b""
        if method != "GET":
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                self._respond(json_response({"error": "bad Content-Length"},
                                            HTTPStatus.BAD_REQUEST))
                return
            if length > self.server.max_body:
                # read what was sent (bounded) so that the client gets the
                # answer rather than a reset; then close
                left = min(length, _DRAIN_LIMIT)
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
                self.close_connection = True
                self._respond(json_response(
                    {"error": f"the body is {length} bytes, over the limit of "
                              f"{self.server.max_body}"}, HTTPStatus.REQUEST_ENTITY_TOO_LARGE))
                return
            body = self.rfile.read(length)
        try:
            response = self.server.answer(parse_request(self.path, self.headers, method, body,
                                                        verdict.user))
        except BadRequest as exc:
            response = json_response({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except Exception:   # noqa: BLE001 - one bad request stops no other
            log.exception("%s: answering GET %s failed", self.server.name, self.path)
            response = json_response({"error": "internal error"},
                                     HTTPStatus.INTERNAL_SERVER_ERROR)
        self._respond(response)

    def _respond(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)


class JSONHTTPServer(ThreadingHTTPServer):
    """Binds ``(host, port)`` when built (port 0: any free one); serves after
    ``start()``; ``stop()`` shuts it down and closes the socket."""

    daemon_threads = True

    def __init__(self, host: str, port: int, answer: Answer, name: str,
                 methods: tuple[str, ...] = ("GET",), max_body: int = 1 << 20,
                 security: HttpSecurity | None = None) -> None:
        self.answer = answer
        self.name = name
        self.methods = methods
        self.max_body = max_body
        self.gate = HttpGate(security or HttpSecurity(), name)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._refusals_log = RateLimitedLog(log, burst=1, interval=10.0)
        self._thread: threading.Thread | None = None
        self.address_family = _family(host, port)         # IPv6 hosts too ("::")
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def scheme(self) -> str:
        return "https" if self.gate.context is not None else "http"

    def get_request(self):
        sock, address = super().get_request()
        if self.gate.context is not None:
            try:
                sock = wrap_accepted(self.gate.context, sock)
            except (OSError, ValueError):
                sock.close()
                raise
        return sock, address

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self._refusals_log.log(logging.WARNING, "too many connections",
                                   "%s: %d connections open: closing the one from %s",
                                   self.name, MAX_CONNECTIONS, client_address[0])
            self.close_request(request)
            return
        super().process_request(request, client_address)   # its failure: shutdown_request

    def shutdown_request(self, request) -> None:
        # a connection's thread is done with it (ThreadingMixIn's last call)
        super().shutdown_request(request)
        self._slots.release()

    def handle_error(self, request, client_address) -> None:
        # a failed TLS handshake or a client gone is the client's affair: logged quietly
        quiet = isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError))
        (log.debug if quiet else log.error)("%s: the connection from %s ended with an error",
                                            self.name, client_address, exc_info=True)

    def start(self) -> "JSONHTTPServer":
        self._thread = threading.Thread(target=self.serve_forever, name=f"{self.name}-http",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()


def _family(host: str, port: int) -> socket.AddressFamily:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    return infos[0][0]
