"""Crash recovery: after an unclean stop, a torn tail of the last segment is
cut at the last whole valid message; corrupt or missing bytes that intact
messages follow (in the same segment or in later ones) are quarantined, and
every intact message is kept; a clean stop lets the next start-up skip the
scan."""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import broker.storage.log as log_module
from broker.storage.log import CHECKPOINT_FILE, Log
from broker.storage.log_config import LogConfig
from broker.storage.segment import Segment

from storage_helpers import (FakeClock, append, read_from, read_skipping_quarantine,
                             segment_files)

CONFIG = LogConfig(segment_bytes=300)

triples = st.tuples(st.none() | st.binary(max_size=6), st.binary(max_size=60),
                    st.integers(0, 10**12))
batch_lists = st.lists(st.lists(triples, min_size=1, max_size=4), min_size=1, max_size=12)

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def write_log(directory: str, batches, config: LogConfig = CONFIG, clock=None):
    """Append and flush ``batches``, then stop without a clean shutdown.
    Returns the messages written and the segments' (base, size)."""
    lg = Log(directory, config, clock or FakeClock())
    messages = []
    for batch in batches:
        messages += append(lg, batch)[1]
    lg.flush()
    layout = [(s.base_offset, s.size) for s in lg.segments]
    lg.close(clean=False)
    return messages, layout


def check_recovered(directory: str, messages, layout, seg_index: int, damage_start: int,
                    damage_end: int, config: LogConfig = CONFIG) -> Log:
    """Reopen and check recovery after bytes [damage_start, damage_end) of
    segment ``seg_index`` were damaged (flipped, or cut off the file's end).

    The messages overlapping the damage are lost; every other message stays
    readable. If an intact message follows the damage in its segment, the
    damaged messages are quarantined; if not, the damaged tail is cut when it
    is the last segment, and quarantined (up to the next segment) otherwise.
    No segment is ever deleted."""
    base, size = layout[seg_index]
    is_last = seg_index == len(layout) - 1
    on_disk = os.path.getsize(seg_path(directory, base))
    lo, hi = base + damage_start, base + damage_end
    damaged = [m for m in messages if m.offset < hi and m.next_offset > lo]
    kept = [m for m in messages if m not in damaged]
    lg = Log(directory, config, FakeClock())
    if not damaged:                                    # nothing hit after all
        assert read_from(lg, 0) == messages
        assert lg.quarantined == [] and lg.recovered_bytes_cut == 0
        return lg
    first_bad = damaged[0].offset
    resume = damaged[-1].next_offset
    intact_after = resume < base + on_disk and any(m.offset == resume for m in kept)
    if intact_after:
        expected_ranges, cut = [(first_bad, resume)], 0
    elif is_last:
        expected_ranges, cut = [], base + on_disk - first_bad
    else:
        expected_ranges, cut = [(first_bad, base + size)], 0
    got, skipped = read_skipping_quarantine(lg, 0)
    assert got == kept
    assert lg.quarantined == expected_ranges
    assert skipped == expected_ranges
    assert lg.recovered_bytes_cut == cut
    assert [s.base_offset for s in lg.segments] == [b for b, _s in layout]
    assert segment_files(directory) == [os.path.basename(s.path) for s in lg.segments]
    expected_end = first_bad if (is_last and not intact_after) else layout[-1][0] + layout[-1][1]
    assert lg.end_offset == lg.flushed_end == lg.written_end == expected_end
    return lg


def seg_path(directory: str, base: int) -> str:
    return os.path.join(directory, f"{base:020d}.log")


@FAST
@given(batches=batch_lists, data=st.data())
def test_truncation_at_any_byte_keeps_the_valid_prefix(batches, data):
    with tempfile.TemporaryDirectory() as d:
        messages, layout = write_log(d, batches)
        # mostly the last segment (a torn append), sometimes an earlier one
        i = data.draw(st.sampled_from([len(layout) - 1, len(layout) - 1,
                                       *range(len(layout))]), label="segment")
        base, size = layout[i]
        cut = data.draw(st.integers(0, size), label="cut")
        os.truncate(seg_path(d, base), cut)
        lg = check_recovered(d, messages, layout, i, cut, size)
        # the recovered log takes appends where it ended, readable after it
        more = append(lg, [(b"k", b"after recovery", 7)])[1]
        lg.flush()
        assert read_skipping_quarantine(lg, 0)[0][-1:] == more
        ranges = lg.quarantined
        lg.close(clean=False)
        lg = Log(d, CONFIG, FakeClock())
        assert lg.recovered_bytes_cut == 0
        assert lg.quarantined == ranges
        lg.close(clean=False)


@FAST
@given(batches=batch_lists, data=st.data())
def test_a_flipped_byte_quarantines_only_its_message(batches, data):
    with tempfile.TemporaryDirectory() as d:
        messages, layout = write_log(d, batches)
        i = data.draw(st.sampled_from([len(layout) - 1, *range(len(layout))]), label="segment")
        base, size = layout[i]
        if size == 0:
            return
        pos = data.draw(st.integers(0, size - 1), label="position")
        mask = data.draw(st.integers(1, 255), label="xor")
        with open(seg_path(d, base), "r+b") as f:
            f.seek(pos)
            byte = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([byte ^ mask]))
        check_recovered(d, messages, layout, i, pos, pos + 1).close(clean=False)


def test_every_truncation_point_of_the_last_segment(tmp_path):
    """Exhaustive over one small log: each byte position is a possible tear."""
    src = str(tmp_path / "src")
    batches = [[(None, b"a" * n, n)] for n in range(0, 40, 7)] + \
              [[(b"key", b"v1", 1), (None, b"", 2), (b"", b"v3", 3)]]
    messages, layout = write_log(src, batches, LogConfig(segment_bytes=10_000))
    assert len(layout) == 1
    for cut in range(layout[0][1] + 1):
        d = str(tmp_path / f"cut{cut}")
        shutil.copytree(src, d)
        os.truncate(seg_path(d, 0), cut)
        lg = check_recovered(d, messages, layout, 0, cut, layout[0][1],
                             LogConfig(segment_bytes=10_000))
        lg.close(clean=False)
        shutil.rmtree(d)


@FAST
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8), data=st.data())
def test_recovery_reads_in_chunks_and_messages_larger_than_a_chunk(sizes, data):
    """The scan reads the file in chunks; a message bigger than a chunk is
    read whole. Shrink the chunk so both paths run on small files."""
    with mock.patch.object(log_module, "_SCAN_CHUNK", 64), tempfile.TemporaryDirectory() as d:
        config = LogConfig(segment_bytes=100_000)
        messages, layout = write_log(d, [[(None, bytes(n), n)] for n in sizes], config)
        cut = data.draw(st.integers(0, layout[0][1]), label="cut")
        os.truncate(seg_path(d, 0), cut)
        check_recovered(d, messages, layout, 0, cut, layout[0][1], config).close(clean=False)


def test_garbage_segment_names_and_files_are_left_alone(tmp_path):
    d = str(tmp_path)
    messages, _ = write_log(d, [[(None, b"x", 1)]])
    for name in ("123.log", "notes.txt", "0000000000000000000x.log"):
        (tmp_path / name).write_bytes(b"junk")
    lg = Log(d, CONFIG, FakeClock())
    assert read_from(lg, 0) == messages
    assert lg.bases == [0]
    assert (tmp_path / "123.log").read_bytes() == b"junk"
    lg.close()


def test_a_gap_between_segments_is_quarantined_and_the_later_ones_kept(tmp_path):
    """A segment whose base is not where the previous one ends (its
    predecessor lost bytes): the hole is quarantined, every later segment and
    message stays readable (issue 9: recovery used to delete them)."""
    d = str(tmp_path)
    messages, layout = write_log(d, [[(None, bytes(100), 1)]] * 6)
    assert len(layout) >= 3
    # drop one whole message from the end of the first segment: still a
    # valid segment on its own, but the next one no longer follows it
    first_msg_size = messages[0].next_offset
    os.truncate(seg_path(d, 0), layout[0][1] - first_msg_size)
    check_recovered(d, messages, layout, 0, layout[0][1] - first_msg_size,
                    layout[0][1]).close(clean=False)


def scan_starts(directory: str, config: LogConfig, clock) -> tuple[Log, dict[int, int]]:
    """Reopen the log; return it and, per segment base offset, the lowest
    byte position start-up read (segments it did not read are absent)."""
    starts: dict[int, int] = {}
    real_read = Segment.read

    def read(seg, position, length):
        starts[seg.base_offset] = min(position, starts.get(seg.base_offset, position))
        return real_read(seg, position, length)

    with mock.patch.object(Segment, "read", read):
        lg = Log(directory, config, clock)
    return lg, starts


def scanned_logged(caplog) -> int:
    return sum(int(m.group(1)) for r in caplog.records
               if (m := re.match(r"recovery: scanned (\d+) bytes", r.getMessage())))


def test_clean_shutdown_skips_the_scan_and_a_later_crash_scans_only_past_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="broker.storage.log")
    d, clock = str(tmp_path), FakeClock()
    lg = Log(d, CONFIG, clock)
    before = []
    for n in range(20):
        before += append(lg, [(None, bytes(n), n)])[1]
    lg.close()                                   # clean: flush + checkpoint
    checkpointed = before[-1].next_offset
    assert len(segment_files(d)) > 2

    caplog.clear()
    lg, starts = scan_starts(d, CONFIG, clock)
    assert starts == {} and scanned_logged(caplog) == 0
    assert lg.recovered_bytes_cut == 0
    assert read_from(lg, 0) == before
    # timestamps came from the checkpoint, not from a scan
    assert [s.max_timestamp for s in lg.segments] != [-1] * len(lg.segments)

    after = []
    for n in range(20, 30):                      # fills the old active segment and rolls
        after += append(lg, [(None, bytes(n), n)])[1]
    lg.flush()
    end = lg.end_offset
    lg.close(clean=False)

    caplog.clear()
    lg, starts = scan_starts(d, CONFIG, clock)
    # the old active segment from the checkpoint on, the new ones whole,
    # nothing below the checkpoint
    assert starts == {s.base_offset: max(0, checkpointed - s.base_offset)
                      for s in lg.segments if s.end_offset > checkpointed}
    assert len(starts) >= 2
    assert scanned_logged(caplog) == end - checkpointed
    assert read_from(lg, 0) == before + after
    assert [s.max_timestamp for s in lg.segments][-1] == 29
    lg.close()
    lg, starts = scan_starts(d, CONFIG, clock)
    assert starts == {}
    lg.close()


def test_a_torn_tail_past_the_recovery_point_is_cut(tmp_path):
    d, clock = str(tmp_path), FakeClock()
    lg = Log(d, LogConfig(), clock)
    kept = append(lg, [(None, b"checkpointed", 1)])[1]
    lg.close()
    lg = Log(d, LogConfig(), clock)
    kept += append(lg, [(None, b"flushed after restart", 2)])[1]
    append(lg, [(None, b"torn", 3)])
    lg.flush()
    lg.close(clean=False)
    os.truncate(seg_path(d, 0), kept[-1].next_offset + 5)
    lg, starts = scan_starts(d, LogConfig(), clock)
    assert starts == {0: kept[0].next_offset}
    assert lg.recovered_bytes_cut == 5
    assert read_from(lg, 0) == kept
    assert lg.active.first_timestamp == 1 and lg.active.max_timestamp == 2
    lg.close()


@pytest.mark.parametrize("content", ["not json", '{"segments": {}}', '[1, 2]',
                                     '{"recovery_point": "7"}'])
def test_an_unreadable_checkpoint_means_a_full_scan(tmp_path, caplog, content):
    d, clock = str(tmp_path), FakeClock()
    lg = Log(d, CONFIG, clock)
    messages = []
    for n in range(10):
        messages += append(lg, [(None, bytes(n), n)])[1]
    lg.close()
    (tmp_path / CHECKPOINT_FILE).write_text(content)
    lg, starts = scan_starts(d, CONFIG, clock)
    assert starts == {s.base_offset: 0 for s in lg.segments}
    assert read_from(lg, 0) == messages
    assert any("ignoring unreadable" in r.getMessage() for r in caplog.records)
    lg.close()


def test_recovered_bytes_are_synced_before_they_become_visible(tmp_path):
    """After a crash, what the scan accepts becomes readable at once
    (flushed_end = end): it must be fsync'ed first, since the dead process
    may never have synced it."""
    d, clock = str(tmp_path), FakeClock()
    lg = Log(d, CONFIG, clock)
    for n in range(20):
        append(lg, [(None, bytes(n), n)])
    lg.write_pending()                           # in the files, never fsync'ed
    lg.close(clean=False)
    synced = []
    real_sync = Segment.sync
    with mock.patch.object(Segment, "sync", lambda self: (synced.append(self.base_offset),
                                                           real_sync(self))):
        lg = Log(d, CONFIG, clock)
    assert lg.flushed_end == lg.end_offset > 0
    assert sorted(synced) == lg.bases
    lg.close()
