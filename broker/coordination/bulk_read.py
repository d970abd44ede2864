"""Reading many ZooKeeper nodes at once, fast: the lag monitor reads every
committed offset and owner of every group each cycle (10,000+ nodes).

``get_many`` and ``children_many`` send ZooKeeper's *multiRead* (opcode 22,
ZooKeeper 3.6 and later): up to ``MULTI_READ_OPS`` getData or getChildren
operations in one request, answered in one response, each operation on its
own (a missing node fails only its own slot). kazoo has no multiRead, so the
request is a small kazoo-compatible record (``_MultiRead``: ``type``,
``serialize``, ``deserialize``) handed to kazoo's own request path, which
sends it and parses the answer on its connection thread.

Why: kazoo's ``get_async`` costs its caller ~110 µs per node here (measured
with cProfile, 20,000 reads): ~78 µs in the one-byte write that wakes kazoo's
connection thread for each request, ~32 µs building a Condition-backed
result; and even with the requests queued together, kazoo's thread sends,
and parses, one request at a time (~60 µs each). With multiRead, 20,000
reads are 20 requests (bench/RESULTS.md, issue 16).

Against a server without multiRead (ZooKeeper < 3.6: it answers
UnimplementedError), ``get_many`` falls back to queuing one GetData per node
and waking kazoo's connection thread with one write, and, where kazoo's
internals differ from 2.x (or the client is not connected), to
``get_async``; ``children_many`` falls back to ``get_children_async``.
Thread-safe as kazoo's own calls are.
"""
from __future__ import annotations

import struct
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError, UnimplementedError
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.serialization import GetData, stat_struct
from kazoo.protocol.states import KeeperState, ZnodeStat

MULTI_READ_OPS = 1000      # operations per multiRead request (~100 KB answers)

_OP_MULTI_READ = 22
_OP_GET_DATA = 4
_OP_GET_CHILDREN = 8
_OP_ERROR = -1
_HEADER = struct.Struct(">iBi")     # MultiHeader: type, done, err
_INT = struct.Struct(">i")


class _Failed:
    """One operation of a multiRead that failed (its ZooKeeper error code)."""
    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


class _MultiRead:
    """ZooKeeper's multiRead request, shaped as kazoo's request records are."""
    type = _OP_MULTI_READ
    __slots__ = ("ops",)

    def __init__(self, ops: list[tuple[int, str]]) -> None:
        self.ops = ops                  # (getData or getChildren, full path)

    def serialize(self) -> bytearray:
        out = bytearray()
        for op, path in self.ops:
            encoded = path.encode()
            out += _HEADER.pack(op, 0, -1)
            out += _INT.pack(len(encoded))
            out += encoded
            out += b"\0"                # watch: no
        out += _HEADER.pack(-1, 1, -1)
        return out

    @staticmethod
    def deserialize(buf, offset: int) -> list:
        """(data, ZnodeStat) per getData, [names] per getChildren, _Failed
        per failed operation, in order. Null data reads as b""."""
        results = []
        unpack_header, unpack_int = _HEADER.unpack_from, _INT.unpack_from
        unpack_stat, stat_size = stat_struct.unpack_from, stat_struct.size
        while True:
            kind, done, err = unpack_header(buf, offset)
            offset += 9
            if done:
                return results
            if kind == _OP_ERROR:
                results.append(_Failed(unpack_int(buf, offset)[0]))
                offset += 4
            elif kind == _OP_GET_DATA:
                n = unpack_int(buf, offset)[0]
                offset += 4
                data = b""
                if n > 0:
                    data = bytes(buf[offset:offset + n])
                    offset += n
                results.append((data, ZnodeStat._make(unpack_stat(buf, offset))))
                offset += stat_size
            elif kind == _OP_GET_CHILDREN:
                count = unpack_int(buf, offset)[0]
                offset += 4
                names = []
                for _ in range(max(count, 0)):
                    n = unpack_int(buf, offset)[0]
                    offset += 4
                    names.append(bytes(buf[offset:offset + n]).decode())
                    offset += n
                results.append(names)
            else:
                raise ValueError(f"multiRead answered an operation of type {kind}")


def _multi_read(client: KazooClient, op: int, paths: list[str], timeout: float) -> list:
    """One multiRead per MULTI_READ_OPS paths, all sent before any answer
    is awaited; the results in order (None for a missing node). Raises
    UnimplementedError when the server has no multiRead."""
    chroot = client.chroot
    full = [_prefix_root(chroot, p) for p in paths]
    pending = []
    for i in range(0, len(full), MULTI_READ_OPS):
        result = client.handler.async_result()
        client._call(_MultiRead([(op, p) for p in full[i:i + MULTI_READ_OPS]]), result)
        pending.append(result)
    out = []
    for result in pending:
        for item in result.get(timeout=timeout):
            if isinstance(item, _Failed):
                if item.code != NoNodeError.code:
                    raise EXCEPTIONS[item.code]()
                item = None
            out.append(item)
    return out


_NO_MULTI_READ = "_samsa_no_multi_read"


def _remember_no_multi_read(client: KazooClient, exc: BaseException) -> None:
    """A server without multiRead: ask it no more (on this client). Its
    refusal answers out of the server's request order, which kazoo may take
    for a broken session, so it is not worth asking again."""
    if isinstance(exc, UnimplementedError):
        setattr(client, _NO_MULTI_READ, True)


def children_many(client: KazooClient, paths: list[str], timeout: float = 10.0
                  ) -> list[list[str]]:
    """``get_children`` of every path at once; a missing node gives []."""
    if not paths:
        return []
    if not getattr(client, _NO_MULTI_READ, False):
        try:
            got = _multi_read(client, _OP_GET_CHILDREN, paths, timeout)
            return [names if names is not None else [] for names in got]
        except (UnimplementedError, AttributeError) as exc:
            _remember_no_multi_read(client, exc)
    got = _await_all([client.get_children_async(p) for p in paths], timeout, missing=None)
    return [names if names is not None else [] for names in got]


class _Countdown:
    def __init__(self, n: int) -> None:
        self.left = n
        self.lock = threading.Lock()
        self.done = threading.Event()
        if n == 0:
            self.done.set()

    def one_done(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left == 0:
                self.done.set()


class _Slot:
    """What kazoo's connection thread calls back: set() or set_exception()."""
    __slots__ = ("value", "error", "countdown")

    def __init__(self, countdown: _Countdown) -> None:
        self.value = self.error = None
        self.countdown = countdown

    def set(self, value=None) -> None:
        self.value = value
        self.countdown.one_done()

    def set_exception(self, exc) -> None:
        self.error = exc
        self.countdown.one_done()


def get_many(client: KazooClient, paths: list[str], timeout: float = 10.0) -> list:
    """``[(data, stat) or None]`` for ``paths`` (None: no such node), in order.
    Raises what ZooKeeper answered otherwise (a lost connection...), or
    TimeoutError."""
    if not paths:
        return []
    if not getattr(client, _NO_MULTI_READ, False):
        try:
            return _multi_read(client, _OP_GET_DATA, paths, timeout)
        except (UnimplementedError, AttributeError) as exc:
            _remember_no_multi_read(client, exc)
    return _get_queued(client, paths, timeout)


def _get_queued(client: KazooClient, paths: list[str], timeout: float) -> list:
    """One GetData per node, queued together, kazoo's thread woken once."""
    queue = getattr(client, "_queue", None)
    connection = getattr(client, "_connection", None)
    wake = getattr(connection, "_write_sock", None)
    if queue is None or wake is None or client._state != KeeperState.CONNECTED:
        return _get_async(client, paths, timeout)
    countdown = _Countdown(len(paths))
    slots = [_Slot(countdown) for _ in paths]
    chroot = client.chroot
    queue.extend((GetData(_prefix_root(chroot, p), None), s) for p, s in zip(paths, slots))
    try:
        wake.sendall(b"\0" * len(paths))      # kazoo sends one request per byte read
    except OSError:
        pass                     # closed meanwhile: kazoo fails the queued requests
    if not countdown.done.wait(timeout):
        raise TimeoutError(f"ZooKeeper did not answer {countdown.left} of {len(paths)} reads "
                           f"in {timeout:.0f} s")
    out = []
    for s in slots:
        if s.error is None:
            out.append(s.value)
        elif isinstance(s.error, NoNodeError):
            out.append(None)
        else:
            raise s.error
    return out


def _get_async(client: KazooClient, paths: list[str], timeout: float) -> list:
    return _await_all([client.get_async(p) for p in paths], timeout, missing=None)


def _await_all(asyncs: list, timeout: float, missing) -> list:
    """The results of kazoo async calls, in order; ``missing`` for a node
    that does not exist."""
    out = []
    for a in asyncs:
        try:
            out.append(a.get(timeout=timeout))
        except NoNodeError:
            out.append(missing)
    return out
