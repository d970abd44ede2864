"""Issue 9: what the consumer and the console tools do with corrupt data and
bad offsets, against a real broker.

* a corrupt message no longer hides the intact ones before it: they are
  delivered, then CorruptDataError names the bad offset and the next one
  (defect 1; poll used to raise and rewind to the start of the fetch);
* on_corrupt="skip" goes on by itself and counts what it skipped;
* a range the broker quarantined is reported (or skipped) the same way;
* seeking inside a message fails with InvalidOffsetError at once, instead of
  growing the fetch size for ever (defect 4);
* an out-of-range reset is logged with the bytes it replays, and a log that
  ends below the consumer's offset (a re-created topic) is called out
  (defects 9 and 12);
* the console consumer reports corrupt data in one line and exits 1, or skips
  it; ``topics --create ''`` is refused (defect 12).
"""
from __future__ import annotations

import logging
import os
import time

import pytest

from broker.client.consumer import Consumer, ConsumerConfig
from broker.client.errors import CorruptDataError, InvalidOffsetError
from broker.protocol.message import encode_message

from broker_helpers import NOW_MS, connect, message_set, produce, run_module

VALUES = [b"value %04d " % i + b"." * 80 for i in range(100)]
SIZE = len(encode_message(VALUES[0], None, NOW_MS))


def segment_path(broker, topic: str, partition: int = 0) -> str:
    return os.path.join(broker.data_dir, "topics", topic, str(partition), f"{0:020d}.log")


def write_and_rot(broker, topic: str, victim: int = 50) -> None:
    """Produce VALUES (flushed), then flip a byte inside message ``victim``'s
    value in the segment file while the broker runs (bit rot after start-up:
    the broker cannot know)."""
    with connect(broker.address) as conn:
        assert produce(conn, topic, 0, message_set(VALUES)).error == 0
    with open(segment_path(broker, topic), "r+b") as f:
        f.seek(victim * SIZE + 40)
        byte = f.read(1)[0]
        f.seek(victim * SIZE + 40)
        f.write(bytes([byte ^ 0x20]))


def drain(consumer: Consumer, limit: float = 5.0) -> list[bytes]:
    values, deadline = [], time.monotonic() + limit
    while time.monotonic() < deadline:
        batch = consumer.poll(200)
        values += [m.value for m in batch]
        if len(values) >= len(VALUES) - 1 and not batch:
            break
    return values


def test_intact_messages_come_first_then_the_error_with_offsets(broker, topic):
    write_and_rot(broker, topic)
    with Consumer(ConsumerConfig(bootstrap=broker.address)) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        got = []
        with pytest.raises(CorruptDataError) as info:
            while True:
                got += [m.value for m in consumer.poll(2000)]
        assert got == VALUES[:50]
        err = info.value
        assert (err.topic, err.partition, err.offset, err.next_offset) == \
            (topic, 0, 50 * SIZE, 51 * SIZE)
        assert "50" in str(err) or str(50 * SIZE) in str(err)
        # it stays there until the application decides
        with pytest.raises(CorruptDataError):
            consumer.poll(2000)
        consumer.seek((topic, 0), err.next_offset)
        assert drain(consumer) == VALUES[51:]


def test_skip_policy_goes_on_and_counts(broker, topic, caplog):
    write_and_rot(broker, topic)
    caplog.set_level(logging.WARNING, logger="broker.client.consumer")
    with Consumer(ConsumerConfig(bootstrap=broker.address, on_corrupt="skip")) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        assert drain(consumer) == VALUES[:50] + VALUES[51:]
        assert (consumer.corrupt_skips, consumer.corrupt_skipped_bytes) == (1, SIZE)
    assert "skipping" in caplog.text


def test_a_quarantined_range_is_reported_then_skippable(broker_factory, topic, tmp_path):
    broker = broker_factory(data_dir=str(tmp_path / "data"))
    with connect(broker.address) as conn:
        assert produce(conn, topic, 0, message_set(VALUES)).error == 0
    broker.kill()
    with open(segment_path(broker, topic), "r+b") as f:
        f.seek(30 * SIZE + 50)
        f.write(b"\xff")
    broker.start()                       # recovery quarantines message 30
    with Consumer(ConsumerConfig(bootstrap=broker.address)) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        got = []
        with pytest.raises(CorruptDataError) as info:
            while True:
                got += [m.value for m in consumer.poll(2000)]
        assert got == VALUES[:30]
        assert (info.value.offset, info.value.next_offset) == (30 * SIZE, 31 * SIZE)
    with Consumer(ConsumerConfig(bootstrap=broker.address, on_corrupt="skip")) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        assert drain(consumer) == VALUES[:30] + VALUES[31:]


def test_an_offset_inside_a_message_fails_at_once(broker, topic):
    with connect(broker.address) as conn:
        assert produce(conn, topic, 0, message_set(VALUES)).error == 0
    with Consumer(ConsumerConfig(bootstrap=broker.address)) as consumer:
        consumer.assign([(topic, 0)], start=3)
        started = time.monotonic()
        with pytest.raises(InvalidOffsetError) as info:
            consumer.poll(5000)
        assert time.monotonic() - started < 3
        assert info.value.offset == 3


def test_an_out_of_range_reset_is_loud(broker, topic, caplog):
    with connect(broker.address) as conn:
        end = produce(conn, topic, 0, message_set(VALUES)).end_offset
    caplog.set_level(logging.WARNING, logger="broker.client.consumer")
    with Consumer(ConsumerConfig(bootstrap=broker.address)) as consumer:
        # an offset past the end: what a consumer of a deleted, re-created topic holds
        consumer.assign([(topic, 0)], start=end + 5000)
        assert len(drain(consumer)) == len(VALUES)          # replayed from earliest
        assert consumer.offset_resets == 1
        assert consumer.reset_replayed_bytes == end + 5000
    assert "below this consumer's offset" in caplog.text
    assert "REPLAYING" in caplog.text


def test_console_consumer_reports_corruption_in_one_line(broker, topic):
    write_and_rot(broker, topic)
    done = run_module("broker.tools", "consume", "--bootstrap", broker.address, "--topic",
                      topic, "--partition", "0", "--from-beginning", "--timeout-ms", "2000")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "Traceback" not in err
    assert str(50 * SIZE) in err and str(51 * SIZE) in err
    assert done.stdout.count(b"\n") == 50
    done = run_module("broker.tools", "consume", "--bootstrap", broker.address, "--topic",
                      topic, "--partition", "0", "--from-beginning", "--timeout-ms", "2000",
                      "--on-corrupt", "skip")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"\n") == 99
    assert b"skipped 1 corrupt" in done.stderr


def test_topics_create_with_an_empty_name_is_refused(broker):
    done = run_module("broker.tools", "topics", "--bootstrap", broker.address, "--create", "")
    assert done.returncode == 2
    assert b"needs a topic name" in done.stderr
