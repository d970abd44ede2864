"""Error codes of the Samsa wire protocol, and the exceptions the codec raises.

Two kinds of failure are kept apart (as h11 does):

* ``ProtocolError`` — the *peer* sent bytes that do not parse (a remote error).
  Random bytes fed to any decoder only ever raise this (or a subclass).
* ``ValueError`` / ``TypeError`` — *we* misused the codec (a local error), e.g.
  encoding a topic name that is too long.

``ErrorCode`` values travel on the wire in responses; ``SamsaError`` carries one
to the application on the client side. This module must never import I/O.
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Wire error codes (int16). Documented one by one in docs/protocol.md."""

    NONE = 0
    UNKNOWN = 1                     # unexpected server error; see the broker log
    UNKNOWN_TOPIC_OR_PARTITION = 2
    OFFSET_OUT_OF_RANGE = 3
    MESSAGE_TOO_LARGE = 4
    CORRUPT_MESSAGE = 5             # CRC mismatch or malformed message set
    INVALID_REQUEST = 6             # the request does not parse or breaks a rule
    STORAGE_ERROR = 7               # disk full, I/O error: nothing was appended
    TOPIC_ALREADY_EXISTS = 8
    UNSUPPORTED_VERSION = 9         # unknown API key or version
    REQUEST_TIMED_OUT = 10          # e.g. a "flushed" ack not reached within the timeout
    INVALID_TOPIC = 11              # bad topic name
    INVALID_CONFIG = 12             # bad topic configuration value
    BROKER_SHUTTING_DOWN = 13
    INVALID_OFFSET = 14             # a fetch offset that is not the start of a message
    # replication (docs/protocol.md sections 6.7, 6.8; Kafka 0.8 and KIP-101)
    NOT_LEADER_FOR_PARTITION = 15   # not the partition's leader here: refresh leaders, retry there
    NOT_ENOUGH_REPLICAS = 16        # acks=all refused before appending: too few in-sync replicas
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 17   # appended, then the in-sync set shrank: may duplicate
    FENCED_LEADER_EPOCH = 18        # the request's leader epoch is older than ours: sender behind
    UNKNOWN_LEADER_EPOCH = 19       # the request's leader epoch is newer than ours: we are behind
    # security (docs/protocol.md section 6.9, docs/security.md)
    SASL_AUTHENTICATION_FAILED = 20     # "authentication failed", and nothing more; closed after
    UNSUPPORTED_SASL_MECHANISM = 21     # the listener does not take that mechanism
    ILLEGAL_SASL_STATE = 22             # out of the exchange's order (closed before authentication)
    TOPIC_AUTHORIZATION_FAILED = 23     # no ACL allows this principal that on the topic
    CLUSTER_AUTHORIZATION_FAILED = 24   # no ACL allows this principal that on the cluster


class ProtocolError(Exception):
    """The bytes received do not follow the protocol (a remote error)."""

    code = ErrorCode.INVALID_REQUEST


class CorruptMessageError(ProtocolError):
    """A message failed its CRC check or its framing inside a message set."""

    code = ErrorCode.CORRUPT_MESSAGE


class MessageTooLargeError(CorruptMessageError):
    """One message is larger than the configured maximum."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class FrameTooLargeError(ProtocolError):
    """A frame announced more bytes than the receiver accepts."""


class SamsaError(Exception):
    """An error response from a broker, carried to the application.

    ``code`` is the ``ErrorCode``; ``message`` the broker's explanation. Extra
    keyword fields (e.g. ``earliest``/``latest`` for OFFSET_OUT_OF_RANGE) are
    kept as attributes.
    """

    def __init__(self, code: int, message: str = "", **fields: object) -> None:
        self.code = ErrorCode(code) if code in ErrorCode._value2member_map_ else code
        self.message = message
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)
        name = self.code.name if isinstance(self.code, ErrorCode) else f"ERROR_{code}"
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        super().__init__(f"{name}: {message}{extra}" if message else f"{name}{extra}")

    @property
    def retriable(self) -> bool:
        """Whether the same request may succeed if sent again (perhaps to
        another broker, after refreshing the partition's leader)."""
        return self.code in _RETRIABLE


# the codes after which the same request may succeed (docs/protocol.md 10,
# column "retry"); FENCED_LEADER_EPOCH is not among them: the sender must
# first learn the newer epoch, a plain resend is fenced again
_RETRIABLE = frozenset({
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_SHUTTING_DOWN,
    ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.UNKNOWN_LEADER_EPOCH,
})
