"""One segment file of a partition log.

On disk::

    <partition dir>/<base offset, zero-padded to 20 digits>.log

holds whole messages back to back (see broker/protocol/message.py), nothing
else: no header, no index. The message at partition offset X lives at byte
``X - base_offset`` of the segment whose base offset is the greatest one <= X.

Invariants:
  * ``base_offset`` <= every offset inside the segment, and > every offset of
    an earlier segment; the next segment's base offset == this segment's
    ``end_offset`` (segments tile the offset space), except where recovery
    found bytes missing: that gap is quarantined (see log.py).
  * ``size`` is the number of bytes written to the file by this process (or
    found valid by recovery); the file is never shorter than ``size``. It is
    longer only while a ``cut`` waits for the last pin to go (see ``cut``);
    such a segment takes no more writes.
  * ``first_timestamp``/``max_timestamp`` are of the messages inside (-1 when
    empty); retention by time uses ``max_timestamp``.

Thread-safety: all methods run on the broker's event-loop thread, except
``sync()``, which the flusher thread may call while ``pin()`` holds the
segment open. ``close()`` is deferred until the last pin is released, so a
sendfile or fsync in flight never sees a closed (or reused) descriptor; so
is the ftruncate of a ``cut``, so a sendfile in flight never finds the file
shorter than the range it promised to send.
"""
from __future__ import annotations

import errno
import os

from .errors import StorageError

SUFFIX = ".log"
_IOV_MAX = 512      # buffers per pwritev call (the kernel allows 1024)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    """The base offset a segment file name encodes, or None if it is not one."""
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class Segment:
    __slots__ = ("path", "base_offset", "fd", "size", "first_timestamp", "max_timestamp",
                 "created_ms", "_pins", "_closing", "deleted", "_cut_when_unpinned")

    def __init__(self, directory: str, base_offset: int, created_ms: int,
                 size: int | None = None) -> None:
        self.path = os.path.join(directory, segment_file_name(base_offset))
        self.base_offset = base_offset
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.size = os.fstat(self.fd).st_size if size is None else size
        self.first_timestamp = -1
        self.max_timestamp = -1
        self.created_ms = created_ms
        self._pins = 0
        self._closing = False
        self.deleted = False
        self._cut_when_unpinned: int | None = None

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    def note_timestamps(self, first_ts: int, max_ts: int) -> None:
        if first_ts >= 0 and self.first_timestamp < 0:
            self.first_timestamp = first_ts
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts

    def write(self, buffers: list) -> None:
        """Append the byte buffers (bytes or memoryviews) at ``size``, with
        vectored writes (no copy into one buffer). All or nothing: on failure
        (disk full, I/O error) the file is cut back to its old size and
        StorageError raised."""
        start = self.size
        total = sum(len(b) for b in buffers)
        done = 0
        try:
            pending = list(buffers)
            while pending:
                batch = pending[:_IOV_MAX]
                n = os.pwritev(self.fd, batch, start + done)
                done += n
                # drop what was written; a partial write leaves a partial buffer
                i = 0
                while i < len(batch) and n >= len(batch[i]):
                    n -= len(batch[i])
                    i += 1
                del pending[:i]
                if n:
                    pending[0] = memoryview(pending[0])[n:]
        except OSError as exc:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            reason = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
            raise StorageError(f"cannot append {total} bytes to {self.path}: {reason}",
                               exc.errno) from exc
        self.size = start + done

    def read(self, position: int, length: int) -> bytes:
        """Bytes [position, position+length) of the file (no visibility rules
        here: the log decides what may be read)."""
        return os.pread(self.fd, length, position)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def cut(self, size: int) -> bool:
        """End the segment at ``size`` bytes (at most its size), the bytes past it
        being thrown away (a log truncated to where its replicas agree).

        Unpinned: the file is cut now and True returned (fsync it to make the
        cut durable). Pinned: a sendfile in flight may still be sending bytes
        past ``size``, and would send a short reply if the file shrank under
        it; so ``size`` drops now, the ftruncate happens at the last unpin, and
        False is returned: the caller must never write to this segment again
        (a write would overwrite bytes being sent); the log rolls to a new one.
        Until the ftruncate, the file is longer than ``size``."""
        if self._pins:
            self._cut_when_unpinned = size
            self.size = size
            return False
        self.truncate(size)
        return True

    def sync(self) -> None:
        """fdatasync the file. May run on the flusher thread (pin first)."""
        os.fdatasync(self.fd)

    def pin(self) -> None:
        """Keep the descriptor open until ``unpin`` (a sendfile or fsync in flight)."""
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins:
            return
        if self._cut_when_unpinned is not None:
            size, self._cut_when_unpinned = self._cut_when_unpinned, None
            if not self.deleted and self.fd >= 0:
                try:
                    os.ftruncate(self.fd, size)
                except OSError:
                    # Left longer than ``size``: recovery cuts a segment that
                    # runs past its successor's base (the log rolled at ``size``).
                    pass
        if self._closing:
            self._really_close()

    def close(self) -> None:
        self._closing = True
        if self._pins == 0:
            self._really_close()

    def delete(self) -> None:
        """Unlink the file now; the descriptor closes once nobody uses it."""
        self.deleted = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.close()

    def _really_close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, size={self.size})"
