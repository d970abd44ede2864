"""When a log rolls, when it wants a flush, what a flush makes visible, and
offsets_before (Kafka 0.7's getOffsetsBefore). Time comes from a fake clock."""
from __future__ import annotations

from unittest import mock

import pytest

from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.log import Log
from broker.storage.log_config import LogConfig
from broker.storage.segment import Segment, parse_segment_file_name, segment_file_name

from storage_helpers import FakeClock, append, read_from


def one(ts: int = 0, value: bytes = b"x"):
    return [(None, value, ts)]


# ---------------------------------------------------------------- rolling

def test_segment_ms_rolls_an_old_active_segment_on_the_next_append(tmp_path):
    clock = FakeClock(5_000)
    lg = Log(str(tmp_path), LogConfig(segment_ms=1_000), clock)
    append(lg, one())
    clock.advance(999)
    append(lg, one())
    assert len(lg.segments) == 1
    clock.advance(1)                     # the active segment is now segment.ms old
    offset, _ = append(lg, one())
    assert lg.bases == [0, offset]
    assert lg.active.created_ms == clock.now
    assert lg.written_end == offset      # rolling wrote the old segment's buffer
    lg.close()


def test_an_empty_active_segment_does_not_roll_however_old(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(segment_ms=1_000), clock)
    clock.advance(10_000)
    append(lg, one())
    assert lg.bases == [0]
    lg.close()


def test_segment_age_restarts_when_the_log_is_reopened(tmp_path):
    clock = FakeClock()
    cfg = LogConfig(segment_ms=1_000)
    lg = Log(str(tmp_path), cfg, clock)
    append(lg, one())
    clock.advance(900)
    lg.close()
    lg = Log(str(tmp_path), cfg, clock)
    clock.advance(900)
    append(lg, one())
    assert len(lg.segments) == 1
    lg.close()


def test_segment_bytes_rolls_before_a_set_that_would_not_fit(tmp_path):
    lg = Log(str(tmp_path), LogConfig(segment_bytes=100), FakeClock())
    a, _ = append(lg, one(value=b"a" * 28))     # 50 bytes
    b, _ = append(lg, one(value=b"b" * 28))     # 100: fits exactly
    c, _ = append(lg, one(value=b"c"))          # would make 123: rolls
    big, _ = append(lg, one(value=b"d" * 500))  # larger than a segment: gets its own
    after, _ = append(lg, one())
    assert (a, b, c) == (0, 50, 100)
    assert lg.bases == [0, 100, big, after]
    lg.flush()
    assert [m.offset for m in read_from(lg, 0)] == [0, 50, 100, big, after]
    lg.close()


def test_explicit_roll_of_an_empty_segment_keeps_it(tmp_path):
    lg = Log(str(tmp_path), LogConfig(), FakeClock())
    append(lg, one())
    first = lg.roll()
    assert lg.roll() is first and lg.roll() is first
    assert lg.bases == [0, first.base_offset]
    lg.close()


# ---------------------------------------------------------------- flushing

def test_needs_flush_after_flush_messages(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(flush_messages=3, flush_ms=10**9), clock)
    assert not lg.needs_flush(clock.now)
    append(lg, one())
    append(lg, one())
    assert not lg.needs_flush(clock.now)
    append(lg, [(None, b"a", 0), (None, b"b", 0)])   # counts messages, not sets
    assert lg.unflushed_messages == 4
    assert lg.needs_flush(clock.now)
    lg.flush()
    assert lg.unflushed_messages == 0 and not lg.needs_flush(clock.now)
    lg.close()


def test_needs_flush_after_flush_ms_counted_from_the_oldest_unflushed(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(flush_messages=10**6, flush_ms=100), clock)
    append(lg, one())
    clock.advance(60)
    append(lg, one())                    # a newer append does not restart the wait
    clock.advance(39)
    assert not lg.needs_flush(clock.now)
    assert lg.needs_flush(clock.now + 1)
    lg.flush()
    clock.advance(1_000)
    assert not lg.needs_flush(clock.now)             # nothing to flush
    append(lg, one())
    assert not lg.needs_flush(clock.now + 99) and lg.needs_flush(clock.now + 100)
    lg.close()


def test_flush_ms_zero_flushes_every_append(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(flush_ms=0), clock)
    append(lg, one())
    assert lg.needs_flush(clock.now)
    lg.close()


def test_a_flush_in_progress_is_not_started_twice_and_exposes_only_its_target(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(flush_messages=1), clock)
    _, first = append(lg, one(value=b"first"))
    segs, target = lg.begin_flush()
    assert target == lg.written_end == first[-1].next_offset
    assert lg.flushed_end == 0 and read_from(lg, 0) == []
    _, second = append(lg, one(value=b"second"))     # arrives during the fsync
    assert lg.unflushed_messages == 1
    assert not lg.needs_flush(clock.now)             # one flush at a time
    for s in segs:
        s.sync()
    lg.complete_flush(segs, target, True)
    assert read_from(lg, 0) == first                 # not "second": not in the target
    assert lg.needs_flush(clock.now)
    lg.flush()
    assert read_from(lg, 0) == first + second
    lg.close()


def test_a_failed_flush_exposes_nothing(tmp_path):
    lg = Log(str(tmp_path), LogConfig(), FakeClock())
    append(lg, one())
    with mock.patch.object(Segment, "sync", side_effect=OSError(5, "EIO")):
        with pytest.raises(OSError):
            lg.flush()
    assert lg.flushed_end == 0 and not lg.flush_in_progress
    assert lg.read(0, 100) == b""
    lg.close()


def test_a_pinned_segment_closes_only_when_unpinned(tmp_path):
    """begin_flush pins segments so a concurrent delete (retention, topic
    deletion) cannot close the descriptor under the fsync."""
    lg = Log(str(tmp_path), LogConfig(), FakeClock())
    append(lg, one())
    segs, target = lg.begin_flush()
    lg.delete()
    assert segs[0].deleted and segs[0].fd >= 0
    segs[0].sync()                                   # the descriptor still works
    lg.complete_flush(segs, target, True)
    assert segs[0].fd == -1


# ---------------------------------------------------------------- reads

def test_reads_stop_at_the_flushed_end_and_the_segment_end(tmp_path):
    lg = Log(str(tmp_path), LogConfig(segment_bytes=100), FakeClock())
    _, a = append(lg, one(value=b"a" * 28))
    _, b = append(lg, one(value=b"b" * 28))
    lg.flush()
    _, c = append(lg, one(value=b"c" * 28))
    lg.write_pending()
    assert lg.read(0, 10_000) == lg.segments[0].read(0, 100)
    assert lg.read(100, 10_000) == b""               # written but not flushed
    lg.flush()
    assert lg.read(0, 10_000) == lg.segments[0].read(0, 100)   # never crosses a segment
    assert lg.read(100, 10_000) == lg.segments[1].read(0, 50)
    assert lg.read(0, 10) == lg.segments[0].read(0, 10)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 10)
    lg.close()


def test_segment_file_names():
    assert segment_file_name(0) == "00000000000000000000.log"
    assert segment_file_name(1073741802) == "00000000001073741802.log"
    assert parse_segment_file_name(segment_file_name(12345)) == 12345
    for bad in ("1.log", "0000000000000000000a.log", "00000000000000000000.txt",
                "000000000000000000000.log", "recovery-point.json"):
        assert parse_segment_file_name(bad) is None


# ---------------------------------------------------------------- offsets_before

def test_offsets_before_gives_segment_bases_newest_first(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(), clock)
    bases = []
    for ts in (100, 200, 300):
        bases.append(append(lg, [(None, b"x", ts), (None, b"y", ts + 50)])[0])
        lg.roll()
    lg.flush()
    append(lg, one(ts=400))              # unflushed: its segment is not offered

    def check(lg):
        assert lg.offsets_before(99, 10) == []
        assert lg.offsets_before(100, 10) == [bases[0]]
        assert lg.offsets_before(249, 10) == [bases[1], bases[0]]
        assert lg.offsets_before(10**12, 10) == [bases[2], bases[1], bases[0]]
        assert lg.offsets_before(10**12, 2) == [bases[2], bases[1]]

    check(lg)
    lg.close()                           # timestamps from the checkpoint
    lg = Log(str(tmp_path), LogConfig(), clock)
    assert lg.offsets_before(10**12, 10)[0] == lg.active.base_offset
    lg.close(clean=False)
    (tmp_path / "recovery-point.json").unlink()
    lg = Log(str(tmp_path), LogConfig(), clock)      # timestamps from a scan
    assert lg.offsets_before(10**12, 10) == [lg.active.base_offset, *reversed(bases)]
    assert lg.offsets_before(399, 10) == list(reversed(bases))
    lg.close()
