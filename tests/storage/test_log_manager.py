"""LogManager: creating, deleting and reloading topics in a data directory."""
from __future__ import annotations

import json
import logging
import os

import pytest

from broker.storage.errors import InvalidConfigError
from broker.storage.log_config import LogConfig
from broker.storage.log_manager import (LogManager, TopicExistsError, UnknownTopicError,
                                        validate_topic_name)

from storage_helpers import FakeClock, append, read_from

DEFAULTS = LogConfig(segment_bytes=1000)


@pytest.fixture
def clock():
    return FakeClock()


def manager(tmp_path, clock) -> LogManager:
    return LogManager(str(tmp_path), DEFAULTS, clock)


def test_create_write_reload(tmp_path, clock):
    lm = manager(tmp_path, clock)
    topic = lm.create_topic("events", 3, {"retention.ms": 60_000})
    assert [lg.name for lg in topic.logs] == ["events/0", "events/1", "events/2"]
    assert topic.config == DEFAULTS.with_overrides({"retention.ms": "60000"})
    assert topic.overrides == {"retention.ms": "60000"}
    written = {p: append(lg, [(None, f"m{p}".encode(), p)])[1] for p, lg in enumerate(topic.logs)}
    lm.close()

    lm = manager(tmp_path, clock)
    assert set(lm.topics) == {"events"}
    topic = lm.get("events")
    assert topic.config.retention_ms == 60_000 and topic.config.segment_bytes == 1000
    for p, lg in enumerate(topic.logs):
        assert read_from(lg, 0) == written[p]
    assert list(lm.all_logs()) == topic.logs
    spec = json.loads((tmp_path / "topics" / "events" / "topic.json").read_text())
    assert spec == {"partitions": 3, "config": {"retention.ms": "60000"}}


def test_create_twice_is_refused(tmp_path, clock):
    lm = manager(tmp_path, clock)
    lm.create_topic("t", 1)
    with pytest.raises(TopicExistsError):
        lm.create_topic("t", 2)
    assert len(lm.get("t").logs) == 1


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_partition_count_is_checked(tmp_path, clock, partitions):
    lm = manager(tmp_path, clock)
    with pytest.raises(InvalidConfigError):
        lm.create_topic("t", partitions)
    assert os.listdir(lm.topics_dir) == []


def test_bad_overrides_create_nothing(tmp_path, clock):
    lm = manager(tmp_path, clock)
    with pytest.raises(InvalidConfigError):
        lm.create_topic("t", 1, {"segment.bytes": "tiny"})
    with pytest.raises(InvalidConfigError):
        lm.create_topic("t", 1, {"no.such.setting": "1"})
    assert os.listdir(lm.topics_dir) == [] and lm.get("t") is None


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a b", "tópico", "x" * 201,
                                  "a\x00b", "topic\n"])
def test_invalid_topic_names(tmp_path, clock, name):
    lm = manager(tmp_path, clock)
    with pytest.raises(InvalidConfigError):
        lm.create_topic(name, 1)
    assert os.listdir(lm.topics_dir) == []


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 200, "...", "0"])
def test_valid_topic_names(name):
    validate_topic_name(name)


def test_delete_removes_everything(tmp_path, clock):
    lm = manager(tmp_path, clock)
    topic = lm.create_topic("gone", 2)
    for lg in topic.logs:
        append(lg, [(None, b"x", 1)])
        lg.flush()
    lm.create_topic("kept", 1)
    lm.delete_topic("gone")
    assert lm.get("gone") is None
    assert os.listdir(lm.topics_dir) == ["kept"]
    with pytest.raises(UnknownTopicError):
        lm.delete_topic("gone")
    lm.close()
    assert set(manager(tmp_path, clock).topics) == {"kept"}


def test_recreate_after_delete_starts_empty(tmp_path, clock):
    lm = manager(tmp_path, clock)
    lg = lm.create_topic("t", 1).logs[0]
    append(lg, [(None, b"old", 1)])
    lg.flush()
    lm.delete_topic("t")
    lg = lm.create_topic("t", 1).logs[0]
    assert lg.end_offset == 0 and read_from(lg, 0) == []


def test_an_interrupted_create_is_ignored_then_replaced(tmp_path, clock, caplog):
    lm = manager(tmp_path, clock)
    lm.create_topic("ok", 1)
    lm.close()
    # a crash after the partition directories, before topic.json
    half = tmp_path / "topics" / "half"
    (half / "0").mkdir(parents=True)
    (half / "0" / f"{0:020d}.log").write_bytes(b"leftover")
    (half / "topic.json.tmp").write_text('{"partitions": 1')
    (tmp_path / "topics" / "stray-file").write_text("x")
    with caplog.at_level(logging.WARNING, logger="broker.storage.log_manager"):
        lm = manager(tmp_path, clock)
    assert set(lm.topics) == {"ok"}
    assert any("half" in r.getMessage() for r in caplog.records)
    lg = lm.create_topic("half", 1).logs[0]           # the leftovers are cleared
    assert lg.end_offset == 0
    assert sorted(os.listdir(half)) == ["0", "topic.json"]


def test_a_partition_log_recovers_when_the_manager_loads(tmp_path, clock):
    lm = manager(tmp_path, clock)
    lg = lm.create_topic("t", 1).logs[0]
    _, kept = append(lg, [(None, b"whole", 1)])
    append(lg, [(None, b"torn", 2)])
    lg.flush()
    lm.close(clean=False)
    path = lg.segments[0].path
    os.truncate(path, os.path.getsize(path) - 1)
    lg = manager(tmp_path, clock).get("t").logs[0]
    assert read_from(lg, 0) == kept
    assert lg.recovered_bytes_cut == len(b"torn") + 22 - 1
