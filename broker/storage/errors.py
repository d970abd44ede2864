"""Errors raised by the storage layer. It imports nothing of the server."""
from __future__ import annotations


class StorageError(Exception):
    """An append or flush failed (disk full, I/O error); nothing was appended."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class OffsetOutOfRangeError(Exception):
    """A read below the earliest retained offset or beyond the visible end."""

    def __init__(self, offset: int, earliest: int, latest: int) -> None:
        super().__init__(f"offset {offset} is out of range: valid offsets are "
                         f"{earliest}..{latest}")
        self.offset = offset
        self.earliest = earliest
        self.latest = latest


class CorruptRangeError(Exception):
    """A read at an offset inside a quarantined byte range [start, end): bytes
    that recovery found corrupt in flushed data (bit rot) or missing (a segment
    shorter than recorded). The messages from ``end`` on are intact."""

    def __init__(self, offset: int, start: int, end: int) -> None:
        super().__init__(f"offset {offset} lies in the corrupt byte range [{start}, {end}); "
                         f"the next valid offset is {end}")
        self.offset = offset
        self.start = start
        self.end = end


class InvalidConfigError(ValueError):
    """A log setting has a value it cannot take."""
