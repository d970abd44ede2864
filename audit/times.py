"""Times as the audit's people and programs write them: ms since the epoch,
or ISO 8601 (UTC unless it says otherwise); windows shown to the minute, UTC."""
from __future__ import annotations

import datetime as dt


class BadTime(ValueError):
    """A time that is neither ms since the epoch nor ISO 8601."""


def parse_time(text: str) -> int:
    """ms since the epoch from ms or an ISO time (UTC unless it says otherwise)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadTime(f"bad time {text!r}: ms since the epoch or ISO 8601") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def iso(ms: int) -> str:
    """``2026-11-24 10:00``: a window's start, UTC, to the minute."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
