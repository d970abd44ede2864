"""Issue 9, defect 1, end to end: a real broker process restarted over segment
files that were damaged while it was down.

* a clean stop, then the last segment cut 46 bytes short: the restart finds
  the file shorter than its checkpoint, cuts the torn message, says so, and
  everything acknowledged after the restart is readable;
* one flipped byte in the middle of an older segment, then kill -9: the
  restart keeps every intact message and the later segment, quarantines the
  bad byte range, counts it in /metrics, and a fetch there answers
  CORRUPT_MESSAGE with the offset to go on from.
"""
from __future__ import annotations

import os

from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode
from broker.protocol.message import decode_message_set

from broker_helpers import (connect, fetch, log_text, message_set, metric, produce,
                            read_partition, scrape_metrics, wait_until)


def segment_files(data_dir: str, topic: str, partition: int = 0) -> list[str]:
    directory = os.path.join(data_dir, "topics", topic, str(partition))
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(".log"))


def read_around_corruption(conn, topic: str, partition: int = 0):
    """Every message readable from offset 0, skipping quarantined ranges the
    way the protocol says (CORRUPT_MESSAGE's payload: start, next valid)."""
    values, skipped, offset = [], [], 0
    while True:
        r = fetch(conn, topic, partition, offset)
        if r.error == ErrorCode.CORRUPT_MESSAGE:
            start, next_valid = api.decode_corrupt_range(bytes(r.message_set))
            assert start <= offset < next_valid
            skipped.append((start, next_valid))
            offset = next_valid
            continue
        assert r.error == 0, r
        if offset >= r.high_watermark:
            return values, skipped
        messages, used = decode_message_set(r.message_set, offset, True, topic, partition)
        assert used > 0
        values += [m.value for m in messages]
        offset += used


def test_a_last_segment_cut_short_after_a_clean_stop_is_rescanned(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    broker = broker_factory(data_dir=data_dir)
    with connect(broker.address) as conn:
        for i in range(10):
            r = produce(conn, "cut", 0, message_set([b"before %03d-%02d" % (i, j)
                                                     for j in range(50)]))
            assert r.error == 0, r.message
    broker.stop()
    (last,) = segment_files(data_dir, "cut")
    os.truncate(last, os.path.getsize(last) - 46)
    log_start = os.path.getsize(broker.log_path)

    broker.start()
    assert "cut" in log_text(broker.log_path, log_start).lower()
    with connect(broker.address) as conn:
        before = [m.value for m in read_partition(conn, "cut", 0)]
        # 46 bytes: the last 35-byte message and the end of the one before it
        assert len(before) == 498
        assert before[-1] == b"before 009-47"
        after = [b"after %04d" % i for i in range(2499)]
        for i in range(0, len(after), 100):
            r = produce(conn, "cut", 0, message_set(after[i:i + 100]), Acks.FLUSHED)
            assert r.error == 0, r.message
        values = [m.value for m in read_partition(conn, "cut", 0)]
    assert values == before + after


def test_a_flipped_byte_in_an_older_segment_is_quarantined_not_cut(broker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    settings = {"log.segment_bytes": 64 << 10}
    broker = broker_factory(settings, data_dir=data_dir)
    values = [b"message %05d " % i + b"." * 100 for i in range(2000)]
    with connect(broker.address) as conn:
        for i in range(0, len(values), 20):
            r = produce(conn, "rot", 0, message_set(values[i:i + 20]), Acks.FLUSHED)
            assert r.error == 0, r.message
    segments = segment_files(data_dir, "rot")
    assert len(segments) >= 3
    # flip one byte in the middle of the first segment, then crash
    victim = segments[0]
    middle = os.path.getsize(victim) // 2
    with open(victim, "r+b") as f:
        f.seek(middle)
        byte = f.read(1)
        f.seek(middle)
        f.write(bytes([byte[0] ^ 0x40]))
    broker.kill()
    log_start = os.path.getsize(broker.log_path)

    broker.start()
    assert "quarantin" in log_text(broker.log_path, log_start).lower()
    with connect(broker.address) as conn:
        got, skipped = read_around_corruption(conn, "rot")
    # one message holds the flipped byte; every other acknowledged one is there
    assert len(skipped) == 1
    start, next_valid = skipped[0]
    assert start <= middle < next_valid
    assert len(got) == len(values) - 1
    assert set(got) < set(values)
    assert [v for v in values if v in set(got)] == got          # order kept
    assert all(os.path.exists(s) for s in segments)             # no segment deleted
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_log_quarantined_bytes", topic="rot",
                  partition="0") == next_valid - start

    # the quarantine survives a clean restart
    broker.stop()
    broker.start()
    with connect(broker.address) as conn:
        r = fetch(conn, "rot", 0, start)
        assert r.error == ErrorCode.CORRUPT_MESSAGE
        assert api.decode_corrupt_range(bytes(r.message_set)) == (start, next_valid)
        # a read from before the range stops at its start
        r = fetch(conn, "rot", 0, 0, max_bytes=1 << 30)
        assert r.error == 0 and len(r.message_set) <= start
