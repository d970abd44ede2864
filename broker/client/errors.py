"""Errors the clients raise about the data they read (beyond the broker's
error codes, which arrive as ``SamsaError``).

Both carry where the problem is, so an application (or a console tool) can
say it in one line and decide: skip, stop, or seek elsewhere.
"""
from __future__ import annotations

from broker.protocol.errors import ErrorCode, SamsaError


class CorruptDataError(SamsaError):
    """Bytes at ``offset`` of ``topic``/``partition`` are not a valid message
    (a CRC mismatch, or a range the broker quarantined). Every intact message
    before it was delivered first. ``next_offset`` is where intact data goes
    on (None when the damage hides it); ``consumer.seek((topic, partition),
    err.next_offset)`` skips the damage, losing what lies in between."""

    def __init__(self, topic: str, partition: int, offset: int, next_offset: int | None,
                 reason: str) -> None:
        where = f"{topic}/{partition} at offset {offset}"
        skip = (f"; intact data resumes at offset {next_offset}" if next_offset is not None
                else "; where intact data resumes is unknown")
        super().__init__(ErrorCode.CORRUPT_MESSAGE, f"corrupt data in {where}: {reason}{skip}",
                         topic=topic, partition=partition, offset=offset,
                         next_offset=next_offset)


class InvalidOffsetError(SamsaError):
    """No valid message starts at ``offset``: it is not a message boundary (a
    wrong offset given to seek, or a stored offset that no longer fits the
    log), or the data there is damaged. Seek to a valid offset: "earliest",
    "latest", a time, or an offset a message reported."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(ErrorCode.INVALID_OFFSET,
                         f"offset {offset} of {topic}/{partition} is not the start of a valid "
                         f"message ({reason}); seek to a valid offset",
                         topic=topic, partition=partition, offset=offset)
