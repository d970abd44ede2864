"""LogConfig: every field's bounds, and topic overrides by dotted name."""
from __future__ import annotations

import dataclasses

import pytest

from broker.storage.errors import InvalidConfigError
from broker.storage.log_config import TOPIC_KEYS, LogConfig


def test_defaults_are_valid_and_documented_names_map_to_fields():
    cfg = LogConfig()
    assert cfg.segment_bytes == 1 << 30 and cfg.retention_bytes == -1
    assert TOPIC_KEYS == {"segment.bytes": "segment_bytes", "segment.ms": "segment_ms",
                          "flush.messages": "flush_messages", "flush.ms": "flush_ms",
                          "retention.ms": "retention_ms", "retention.bytes": "retention_bytes"}


@pytest.mark.parametrize("field, bad, good", [
    ("segment_bytes", 63, 64),
    ("segment_ms", 0, 1),
    ("flush_messages", 0, 1),
    ("flush_ms", -1, 0),
    ("retention_ms", 0, -1),
    ("retention_ms", -2, 1),
    ("retention_bytes", -2, -1),
    ("retention_bytes", -2, 0),
])
def test_each_field_is_checked(field, bad, good):
    assert getattr(LogConfig(**{field: good}), field) == good
    with pytest.raises(InvalidConfigError, match=field.replace("_", ".")):
        LogConfig(**{field: bad})


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LogConfig().segment_bytes = 100


def test_overrides_by_dotted_name_accept_strings_and_ints():
    base = LogConfig(flush_ms=7)
    cfg = base.with_overrides({"retention.ms": "3600000", "segment.bytes": 1024})
    assert (cfg.retention_ms, cfg.segment_bytes, cfg.flush_ms) == (3_600_000, 1024, 7)
    assert base.retention_ms == LogConfig().retention_ms        # a copy, not a change
    assert base.with_overrides({}) == base


@pytest.mark.parametrize("overrides, message", [
    ({"retention_ms": "1"}, "unknown topic setting"),          # field name, not the dotted one
    ({"cleanup.policy": "delete"}, "unknown topic setting"),
    ({"retention.ms": "1h"}, "must be an integer"),
    ({"segment.bytes": "1.5"}, "must be an integer"),
    ({"flush.ms": None}, "must be an integer"),
    ({"segment.bytes": "10"}, "segment.bytes must be >= 64"),  # parsed, then validated
    ({"retention.ms": "0"}, "retention.ms must be -1 or > 0"),
])
def test_bad_overrides_are_refused(overrides, message):
    with pytest.raises(InvalidConfigError, match=message):
        LogConfig().with_overrides(overrides)


def test_invalid_config_error_is_a_value_error():
    assert issubclass(InvalidConfigError, ValueError)
