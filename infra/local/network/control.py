"""Talking to a running network lab's keeper (keeper.py): its control
socket and its hosts file, both under ``<state dir>/network/``.

The control socket's codec lives here too, for both ends: one JSON object a
line, one request and one answer per connection. ``LineReader`` and
``encode``/``decode`` are sans-IO (bytes in, objects out): the keeper feeds
them from its event loop, ``request()`` from a blocking socket. A reader
holds at most its ``max_bytes``, so a peer cannot make either end hold
unbounded memory. Never import anything heavy here: the keeper imports this
module, and this module must not import the keeper.
"""
from __future__ import annotations

import json
import os
import socket

#: the longest request the keeper reads (requests are a few hundred bytes)
MAX_REQUEST_BYTES = 64 << 10
#: the longest answer request() reads (a status of many datacenters' links)
MAX_ANSWER_BYTES = 16 << 20


class NetworkLabError(RuntimeError):
    pass


class LineTooLongError(ValueError):
    """The peer sent more than a reader's ``max_bytes`` without a newline."""


class LineReader:
    """Received bytes in, the connection's first line out.

    ``feed(data)`` returns the line (without its newline) once it is whole,
    else None; ``feed(b"")`` (the peer closed) returns what came as the line,
    so a request sent without its newline is still read. Raises
    LineTooLongError as soon as more than ``max_bytes`` would be held. Bytes
    after the newline are ignored: one line per connection.

    Not thread-safe: one reader per connection, used by one thread.
    """

    __slots__ = ("_buffer", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self._buffer = bytearray()
        self.max_bytes = max_bytes

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> bytes | None:
        if not data:
            return bytes(self._buffer)
        end = data.find(b"\n")
        # checked before buffering: at most max_bytes are ever held
        if len(self._buffer) + (len(data) if end < 0 else end) > self.max_bytes:
            raise LineTooLongError(f"a line is at most {self.max_bytes} bytes")
        if end < 0:
            self._buffer += data
            return None
        return bytes(self._buffer + data[:end])


def encode(message: dict) -> bytes:
    """A request or an answer, as its line."""
    return json.dumps(message).encode() + b"\n"


def decode(line: bytes) -> dict:
    """A request or an answer from its line; ValueError when it is not a JSON
    object."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a control message is a JSON object")
    return message


def network_dir(state_dir: str) -> str:
    return os.path.join(os.path.abspath(state_dir), "network")


def hosts(state_dir: str) -> dict:
    """The keeper's hosts document (keeper.hosts_document); NetworkLabError
    when no network lab is built there."""
    path = os.path.join(network_dir(state_dir), "hosts.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise NetworkLabError(f"no network lab runs in {os.path.abspath(state_dir)} "
                              f"(no {path})") from None


def request(state_dir: str, op: str, timeout: float = 10.0, **fields) -> dict:
    """Send one control request; its answer. NetworkLabError when the keeper
    cannot be reached or refuses the request (its reason)."""
    path = os.path.join(network_dir(state_dir), "control.sock")
    reader = LineReader(MAX_ANSWER_BYTES)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(encode({"op": op, **fields}))
            line = None
            while line is None:
                line = reader.feed(sock.recv(65536))
    except OSError as exc:
        raise NetworkLabError(f"the network lab's keeper does not answer at {path}: "
                              f"{exc}") from None
    except LineTooLongError as exc:
        raise NetworkLabError(f"the keeper's answer is too long: {exc}") from None
    try:
        answer = decode(line)
    except ValueError:
        raise NetworkLabError(f"the keeper answered {line[:200]!r}") from None
    if not answer.get("ok"):
        raise NetworkLabError(answer.get("error", "refused"))
    return answer


def host_pid(state_dir: str, host: str) -> int:
    """The pid whose network namespace is ``host``'s (for nsenter)."""
    document = hosts(state_dir)
    try:
        return document["hosts"][host]["pid"]
    except KeyError:
        raise NetworkLabError(f"no host {host!r} in the network lab (hosts: "
                              f"{', '.join(document['hosts'])})") from None


def enter_command(state_dir: str, host: str, command: list[str]) -> list[str]:
    """``command`` run in ``host``'s network namespace."""
    return ["nsenter", "--target", str(host_pid(state_dir, host)), "--net", "--", *command]
