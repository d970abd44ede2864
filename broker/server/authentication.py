"""Authenticating a connection: the SASL exchange that comes before any other
request on a listener that asks for SCRAM (docs/protocol.md 6.9,
docs/security.md).

The states of such a connection, and every allowed transition::

    HANDSHAKE --SaslHandshake("SCRAM-SHA-512")--> FIRST
    HANDSHAKE --SaslHandshake(other)--> HANDSHAKE   (UNSUPPORTED_SASL_MECHANISM,
                                                     the mechanisms taken in the message)
    FIRST     --SaslAuthenticate(client-first)--> FINAL     (server-first answered)
    FINAL     --SaslAuthenticate(client-final)--> AUTHENTICATED (server-final answered;
                                                     the principal is User:<name>)
    any       --a failed exchange--> closed  (SASL_AUTHENTICATION_FAILED, "authentication
                                              failed" and nothing more: the reason is
                                              only in the broker's log)
    any       --another request--> closed    (ILLEGAL_SASL_STATE)
    any       --authentication_timeout_ms--> closed

Until AUTHENTICATED a frame may hold at most ``UNAUTHENTICATED_MAX_FRAME_BYTES``
(a larger size prefix closes the connection before its bytes are read), so a
stranger makes the broker hold a few KB per connection at most. Frames a
client pipelined behind its last authentication message are handled as
requests once it is authenticated.

Failures are counted (``samsa_authentications_total{mechanism,result}``)
and logged at a bounded rate with the reason (unknown user, wrong password,
a replayed exchange, malformed messages).
"""
from __future__ import annotations

import logging
from typing import Callable

from broker.protocol import api
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, ProtocolError
from broker.protocol.scram import MECHANISM, ScramCredential, ScramError, ScramServer
from broker.service_kit.logging_setup import RateLimitedLog

from .connection import Connection, Reply

log = logging.getLogger(__name__)
limited_log = RateLimitedLog(log)

#: the largest frame a connection may send before it has authenticated
UNAUTHENTICATED_MAX_FRAME_BYTES = 4096
MECHANISMS = (MECHANISM,)
#: the message of every failed exchange, whatever the reason
FAILED = "authentication failed"
ANONYMOUS = "User:ANONYMOUS"


class SaslExchange:
    """One connection's place in the exchange (module docstring)."""

    __slots__ = ("state", "scram", "timer", "held", "address")

    def __init__(self, address: str) -> None:
        self.address = address            # the peer's, whose count it is in
        self.state = "HANDSHAKE"
        self.scram: ScramServer | None = None
        self.timer = None
        # while the handshake's answer waits for the users to be read: the
        # frames that came after it, handled once it is answered
        self.held: list | None = None


class Authenticator:
    """The broker's side of SASL/SCRAM for every connection that needs it.
    Event-loop thread only. ``lookup(user)`` gives the user's stored
    credential (the ZooKeeper cache's) or None."""

    def __init__(self, lookup: Callable[[str], ScramCredential | None],
                 users_read: Callable[[], bool], secret: Callable[[], bytes], metrics, loop,
                 timeout_s: float, max_request_bytes: int, max_connections: int,
                 replay: Callable[[Connection, list], None],
                 max_connections_per_address: int | None = None) -> None:
        """``secret()``: the cluster's secret (store.cluster_secret), which
        makes an unknown user's salt look like a known one's on every broker
        and after restarts; ``replay(conn, frames)``: handles frames held
        while the users were being read; ``max_connections`` in the exchange
        at once, at most ``max_connections_per_address`` of them from one
        address (None: no limit of its own)."""
        self._lookup = lookup
        self._users_read = users_read
        self._secret = secret
        self._max_connections = max_connections
        self._max_per_address = min(max_connections_per_address or max_connections,
                                    max_connections)
        self._replay = replay
        self.unauthenticated = 0          # connections in the exchange now
        self._by_address: dict[str, int] = {}   # the same, per peer address
        # handshakes answered once the users are read from ZooKeeper (just
        # after the broker started): (connection, its reply, the response)
        self._waiting: list[tuple[Connection, Reply, bytes]] = []
        self._metrics = metrics
        self._loop = loop
        self._timeout_s = timeout_s
        self._max_request_bytes = max_request_bytes

    def begin(self, conn: Connection) -> None:
        """``conn`` just opened on a listener that asks for SCRAM: closed at
        once when ``max_connections`` others are in the exchange already."""
        if self.unauthenticated >= self._max_connections:
            self._count("too_many")
            limited_log.log(logging.WARNING, "too many unauthenticated",
                            "closing connection from %s: %d connections are authenticating "
                            "already (max_unauthenticated_connections)", conn.peer,
                            self.unauthenticated)
            conn.close()
            return
        address = conn.peer.rpartition(":")[0] or conn.peer
        if self._by_address.get(address, 0) >= self._max_per_address:
            self._count("too_many_from_address")
            limited_log.log(logging.WARNING, "too many unauthenticated from one address",
                            "closing connection from %s: %d connections from %s are "
                            "authenticating already "
                            "(max_unauthenticated_connections_per_address)", conn.peer,
                            self._by_address[address], address)
            conn.close()
            return
        self.unauthenticated += 1
        self._by_address[address] = self._by_address.get(address, 0) + 1
        exchange = SaslExchange(address)
        conn.sasl = exchange
        conn.decoder.max_frame_bytes = UNAUTHENTICATED_MAX_FRAME_BYTES
        exchange.timer = self._loop.call_later(self._timeout_s, self._expired, conn)

    def _expired(self, conn: Connection) -> None:
        if conn.sasl is None or conn.closed:
            return
        self._count("timeout")
        limited_log.log(logging.WARNING, "authentication timeout",
                        "closing connection from %s: not authenticated within %.1f s "
                        "(state %s)", conn.peer, self._timeout_s, conn.sasl.state)
        conn.close()

    def connection_closed(self, conn: Connection) -> None:
        if conn.sasl is not None:
            self._leave(conn.sasl.address)
            if conn.sasl.timer is not None:
                conn.sasl.timer.cancel()
            conn.sasl = None

    def handle(self, conn: Connection, frames: list) -> list:
        """Handle ``frames`` of a connection not yet authenticated; returns
        the frames that follow its authentication (to be handled as
        requests), [] while it is not, or once it is closing."""
        for i, payload in enumerate(frames):
            if conn.sasl is None:
                return frames[i:]
            if conn.closed or conn.close_after_flush:
                return []
            if conn.sasl.held is not None:
                conn.sasl.held.extend(frames[i:])
                return []
            try:
                header, request = api.decode_request(payload)
            except ProtocolError as exc:
                self._refuse(conn, getattr(exc, "correlation_id", None),
                             ErrorCode.ILLEGAL_SASL_STATE,
                             "malformed request before authentication", str(exc),
                             getattr(exc, "api_key", None))
                return []
            self._metrics.requests[_api_name(header.api_key)] += 1
            if header.api_key == ApiKey.SASL_HANDSHAKE:
                self._handshake(conn, header, request)
            elif header.api_key == ApiKey.SASL_AUTHENTICATE:
                self._authenticate(conn, header, request)
            else:
                self._refuse(conn, header.correlation_id, ErrorCode.ILLEGAL_SASL_STATE,
                             f"{ApiKey(header.api_key).name} before authentication: "
                             f"authenticate first (SaslHandshake, SaslAuthenticate)",
                             f"{ApiKey(header.api_key).name} before authentication",
                             header.api_key)
                return []
        return []

    # ------------------------------------------------------------ the steps

    def _handshake(self, conn: Connection, header, request: api.SaslHandshakeRequest) -> None:
        exchange = conn.sasl
        if exchange.state != "HANDSHAKE":
            self._refuse(conn, header.correlation_id, ErrorCode.ILLEGAL_SASL_STATE,
                         "SaslHandshake comes once, first", "a second SaslHandshake",
                         header.api_key)
            return
        if request.mechanism not in MECHANISMS:
            conn.add_reply(Reply(api.encode_error_response(
                header.correlation_id, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"mechanism {api.quote_name(request.mechanism)} is not taken here; "
                f"taken: {', '.join(MECHANISMS)}")))
            return
        exchange.state = "FIRST"
        answer = api.encode_response(header.correlation_id, api.SaslHandshakeResponse(MECHANISMS))
        if self._users_read():
            conn.add_reply(Reply(answer))
            return
        # The users are not read yet: every user would look unknown. The
        # answer waits for them (the client waits for it before it goes
        # on), bounded by the connection's authentication time limit.
        reply = Reply()
        conn.add_reply(reply)
        exchange.held = []
        if not self._waiting:
            self._loop.call_later(0.05, self._answer_waiting)
        self._waiting.append((conn, reply, answer))

    def _answer_waiting(self) -> None:
        self._waiting = [(c, r, a) for c, r, a in self._waiting if not c.closed]
        if not self._waiting:
            return
        if not self._users_read():
            self._loop.call_later(0.05, self._answer_waiting)
            return
        waiting, self._waiting = self._waiting, []
        for conn, reply, answer in waiting:
            reply.set([answer])
            held, conn.sasl.held = conn.sasl.held, None
            if held:
                self._replay(conn, held)        # (it pumps)
            else:
                conn.pump()

    def _authenticate(self, conn: Connection, header,
                      request: api.SaslAuthenticateRequest) -> None:
        exchange = conn.sasl
        if exchange.state not in ("FIRST", "FINAL"):
            self._refuse(conn, header.correlation_id, ErrorCode.ILLEGAL_SASL_STATE,
                         "SaslAuthenticate comes after SaslHandshake",
                         "SaslAuthenticate before SaslHandshake", header.api_key)
            return
        try:
            if exchange.state == "FIRST":
                # made now, not at the handshake: the users and the cluster's
                # secret are read by then
                exchange.scram = ScramServer(self._lookup, self._secret())
                answer = exchange.scram.first(request.auth_bytes)
                exchange.state = "FINAL"
            else:
                answer = exchange.scram.final(request.auth_bytes)
        except ScramError as exc:
            self._refuse(conn, header.correlation_id, ErrorCode.SASL_AUTHENTICATION_FAILED,
                         FAILED, str(exc), header.api_key)
            return
        conn.add_reply(Reply(api.encode_response(header.correlation_id,
                                                 api.SaslAuthenticateResponse(answer))))
        if exchange.state == "FINAL" and exchange.scram.user is not None:
            conn.principal = "User:" + exchange.scram.user
            if exchange.timer is not None:
                exchange.timer.cancel()
            conn.sasl = None
            self._leave(exchange.address)
            conn.decoder.max_frame_bytes = self._max_request_bytes
            self._count("ok")
            log.info("%s authenticated as %s (%s)", conn.peer, conn.principal, MECHANISM)

    def _leave(self, address: str) -> None:
        """A connection from ``address`` is out of the exchange (authenticated
        or closed)."""
        self.unauthenticated -= 1
        left = self._by_address[address] - 1
        if left:
            self._by_address[address] = left
        else:
            del self._by_address[address]        # the map holds addresses in the exchange only

    def _refuse(self, conn: Connection, correlation_id: int | None, code: ErrorCode,
                message: str, reason: str, api_key: int | None = None) -> None:
        """Answer ``code`` with ``message`` (when the request's id could be
        read), then close the connection; ``reason`` goes to the log only,
        at a bounded rate per kind of reason (so that junk does not hide a
        run of wrong passwords)."""
        self._count("failed")
        self._metrics.errors[(_api_name(api_key), code.name)] += 1
        limited_log.log(logging.WARNING, f"authentication failed: {_kind_of(reason)}",
                        "authentication failed for %s: %s; closing", conn.peer, reason)
        if correlation_id is not None:
            conn.add_reply(Reply(api.encode_error_response(correlation_id, code, message)))
            conn.close_after_flush = True
            conn.pause_reading("closing")
        else:
            conn.close()

    def _count(self, result: str) -> None:
        self._metrics.authentications[(MECHANISM, result)] += 1


def _api_name(api_key: int | None) -> str:
    try:
        return ApiKey(api_key).name.lower()
    except ValueError:
        return "unknown"


def _kind_of(reason: str) -> str:
    """The kind of a failure's reason, a few of them: the key of its log rate."""
    for words, kind in (("wrong password", "wrong password"), ("is unknown", "unknown user"),
                        ("replayed", "replayed"), ("before authentication", "out of order"),
                        ("SaslHandshake", "out of order"), ("SaslAuthenticate", "out of order")):
        if words in reason:
            return kind
    return "malformed"
