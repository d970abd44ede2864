"""Per-log settings (broker defaults, overridable per topic), with Kafka's names."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Iterable

from .errors import InvalidConfigError

DAY_MS = 24 * 3600 * 1000
INT64_MAX = (1 << 63) - 1
_STRICT_INT = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log. Topic overrides use the dotted names in
    ``TOPIC_KEYS`` (``segment.bytes`` …)."""

    segment_bytes: int = 1 << 30
    """Roll a new segment once the active one would pass this size (1 GiB)."""
    segment_ms: int = 7 * DAY_MS
    """Roll a new segment once the active one is this old (7 days), even if small."""
    flush_messages: int = 10_000
    """fsync after this many unflushed messages. Messages are visible to
    consumers only once flushed: lower means lower latency, more fsyncs."""
    flush_ms: int = 50
    """fsync unflushed messages at most this long after the oldest arrived."""
    retention_ms: int = 7 * DAY_MS
    """Delete a closed segment once its newest message is older than this (7 days);
    -1 keeps segments forever."""
    retention_bytes: int = -1
    """Delete the oldest closed segments while the partition stays at least this
    large without them; -1 (default) is unlimited."""

    def __post_init__(self) -> None:
        if self.segment_bytes < 64:
            raise InvalidConfigError(f"segment.bytes must be >= 64, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise InvalidConfigError(f"segment.ms must be >= 1, got {self.segment_ms}")
        if self.flush_messages < 1:
            raise InvalidConfigError(f"flush.messages must be >= 1, got {self.flush_messages}")
        if self.flush_ms < 0:
            raise InvalidConfigError(f"flush.ms must be >= 0, got {self.flush_ms}")
        if self.retention_ms < -1 or self.retention_ms == 0:
            raise InvalidConfigError(f"retention.ms must be -1 or > 0, got {self.retention_ms}")
        if self.retention_bytes < -1:
            raise InvalidConfigError(f"retention.bytes must be >= -1, got "
                                     f"{self.retention_bytes}")

    def with_overrides(self, overrides: dict[str, str | int]) -> "LogConfig":
        """A copy with topic-level overrides (dotted names) applied and validated."""
        changes = {}
        for key, value in overrides.items():
            field_name = TOPIC_KEYS.get(key)
            if field_name is None:
                raise InvalidConfigError(f"unknown topic setting {key!r}; known: "
                                         f"{', '.join(sorted(TOPIC_KEYS))}")
            try:
                # lenient on purpose: topic.json files written before values
                # were parsed strictly must still load (requests go through
                # parse_overrides first)
                changes[field_name] = int(value)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{key} must be an integer, got {value!r}") from None
        return dataclasses.replace(self, **changes)


def parse_int(key: str, value: str | int) -> int:
    """A setting's integer, parsed strictly: an optional '-' and ASCII digits,
    nothing else (no spaces, '+', '_' or other bases), within int64."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidConfigError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, str):
        if not _STRICT_INT.fullmatch(value):
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise InvalidConfigError(f"{key} must be an integer (digits, optionally a leading "
                                     f"'-'), got {shown!r}")
        value = int(value)
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InvalidConfigError(f"{key} is out of the int64 range")
    return value


def parse_overrides(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Topic overrides as sent in a CreateTopic request: every key known and
    given once, every value a strict integer. Returns them with canonical
    values (what Metadata echoes). Raises InvalidConfigError."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if key not in TOPIC_KEYS:
            raise InvalidConfigError(f"unknown topic setting {key[:100]!r}; known: "
                                     f"{', '.join(sorted(TOPIC_KEYS))}")
        if key in out:
            raise InvalidConfigError(f"topic setting {key} given more than once")
        out[key] = str(parse_int(key, value))
    return out


TOPIC_KEYS = {f.name.replace("_", "."): f.name for f in dataclasses.fields(LogConfig)}
