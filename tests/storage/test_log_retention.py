"""Retention by time and by size, and reads below what retention kept."""
from __future__ import annotations

import os

import pytest

from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.log import Log
from broker.storage.log_config import LogConfig

from storage_helpers import FakeClock, append, read_from, segment_files

HOUR = 3600 * 1000


def fifty_bytes(ts: int):
    """One message set of exactly 50 bytes (a 28-byte value, no key)."""
    return [(None, b"v" * 28, ts)]


def log_of_segments(tmp_path, config: LogConfig, timestamps, clock=None) -> Log:
    """A flushed log with one closed 100-byte segment per timestamp (two
    50-byte messages each, stamped -1 and the timestamp), plus an active
    segment holding one 50-byte message stamped with the last timestamp."""
    lg = Log(str(tmp_path), config, clock or FakeClock())
    for ts in timestamps:
        append(lg, fifty_bytes(-1))
        append(lg, fifty_bytes(ts))
        lg.roll()
    append(lg, fifty_bytes(timestamps[-1] if timestamps else 0))
    lg.flush()
    assert [s.size for s in lg.segments] == [100] * len(timestamps) + [50]
    return lg


def test_segments_older_than_retention_ms_go_by_their_newest_message(tmp_path):
    cfg = LogConfig(retention_ms=HOUR)
    now = 10 * HOUR
    lg = log_of_segments(tmp_path, cfg, [now - 3 * HOUR, now - HOUR - 1, now - HOUR, now - 1])
    deleted = lg.apply_retention(now)
    # strictly older than retention.ms goes; exactly retention.ms old stays
    assert [s.base_offset for s in deleted] == [0, 100]
    assert lg.earliest_offset == 200
    assert segment_files(str(tmp_path)) == [f"{b:020d}.log" for b in (200, 300, 400)]
    assert [m.offset for m in read_from(lg, 200)] == [200, 250, 300, 350, 400]
    assert lg.apply_retention(now) == []
    lg.close()


def test_time_retention_stops_at_the_first_young_segment(tmp_path):
    """Segments are deleted oldest first only: an old segment behind a young
    one stays (its offsets could not be removed without a hole)."""
    now = 10 * HOUR
    lg = log_of_segments(tmp_path, LogConfig(retention_ms=HOUR), [now - 2 * HOUR, now,
                                                                  now - 5 * HOUR])
    assert [s.base_offset for s in lg.apply_retention(now)] == [0]
    assert lg.bases == [100, 200, 300]
    lg.close()


def test_the_active_segment_is_never_deleted(tmp_path):
    lg = log_of_segments(tmp_path, LogConfig(retention_ms=HOUR, retention_bytes=0), [5])
    lg.apply_retention(100 * HOUR)
    assert lg.bases == [100]
    assert lg.earliest_offset == 100 and lg.end_offset == 150
    assert [m.offset for m in read_from(lg, 100)] == [100]
    lg.close()


def test_segments_with_unflushed_bytes_are_never_deleted(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path), LogConfig(retention_ms=HOUR, retention_bytes=0), clock)
    append(lg, fifty_bytes(0))
    lg.flush()
    append(lg, fifty_bytes(0))       # in memory only
    lg.roll()                        # now written, still not fsync'ed
    append(lg, fifty_bytes(0))
    assert lg.flushed_end == 50 and lg.written_end == 100
    assert lg.apply_retention(100 * HOUR) == []
    assert lg.bases == [0, 100]
    lg.flush()
    assert [s.base_offset for s in lg.apply_retention(100 * HOUR)] == [0]
    lg.close()


def test_retention_ms_minus_one_keeps_everything(tmp_path):
    lg = log_of_segments(tmp_path, LogConfig(retention_ms=-1), [0, 1, 2])
    assert lg.apply_retention(10**15) == []
    assert lg.bases == [0, 100, 200, 300]
    lg.close()


def test_segments_without_timestamps_are_not_deleted_by_time(tmp_path):
    """Messages stamped -1 (the producer gave no time): the segment's age
    cannot be judged, so time retention leaves it."""
    lg = log_of_segments(tmp_path, LogConfig(retention_ms=HOUR), [-1, 5])
    assert lg.segments[0].max_timestamp == -1
    assert lg.apply_retention(100 * HOUR) == []
    lg.close()


@pytest.mark.parametrize("retention_bytes, kept_bases", [
    (-1, [0, 100, 200, 300]),
    (350, [0, 100, 200, 300]),   # 350 total: nothing can go and keep >= 350
    (250, [100, 200, 300]),      # 350 - 100 = 250 >= 250: the oldest goes, then 150 < 250
    (251, [0, 100, 200, 300]),
    (150, [200, 300]),
    (50, [300]),
    (0, [300]),                  # all but the active segment
])
def test_retention_bytes_keeps_at_least_that_much(tmp_path, retention_bytes, kept_bases):
    lg = log_of_segments(tmp_path, LogConfig(retention_bytes=retention_bytes, retention_ms=-1),
                         [1, 2, 3])
    assert lg.size_bytes == 350
    lg.apply_retention(0)
    assert lg.bases == kept_bases
    assert lg.size_bytes >= retention_bytes or lg.bases == [300]
    assert read_from(lg, kept_bases[0])[0].offset == kept_bases[0]
    lg.close()


def test_a_read_below_the_earliest_offset_says_what_is_valid(tmp_path):
    lg = log_of_segments(tmp_path, LogConfig(retention_bytes=0), [1, 2])
    append(lg, fifty_bytes(3))              # unflushed: not part of "latest"
    lg.apply_retention(0)
    assert lg.earliest_offset == 200
    for offset in (0, 150, 199):
        with pytest.raises(OffsetOutOfRangeError) as err:
            lg.read(offset, 100)
        assert (err.value.offset, err.value.earliest, err.value.latest) == (offset, 200, 250)
    with pytest.raises(OffsetOutOfRangeError) as err:
        lg.read(251, 100)
    assert (err.value.earliest, err.value.latest) == (200, 250)
    lg.close()


def test_retention_survives_a_restart(tmp_path):
    clock = FakeClock()
    lg = log_of_segments(tmp_path, LogConfig(retention_bytes=0), [1, 2], clock)
    lg.apply_retention(0)
    lg.close()
    lg = Log(str(tmp_path), LogConfig(retention_bytes=0), clock)
    assert lg.earliest_offset == 200 and lg.end_offset == 250
    assert [m.offset for m in read_from(lg, 200)] == [200]
    assert sorted(os.listdir(tmp_path)) == [f"{200:020d}.log", "recovery-point.json"]
    lg.close()
