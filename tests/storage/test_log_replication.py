"""What replication asks of a Log: the high watermark and what it hides from
consumers, reads up to an explicit end (a follower's fetch), truncate_to
(a follower cutting what its leader does not have), reset_to (starting over
at the leader's earliest offset), and the leader epochs kept in step with
the log's ends through truncation, retention and restarts."""
from __future__ import annotations

import json
import os

import pytest

from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.leader_epochs import LEADER_EPOCH_FILE
from broker.storage.log import CHECKPOINT_FILE, Log
from broker.storage.log_config import LogConfig

from storage_helpers import FakeClock, append, read_from, read_skipping_quarantine, segment_files

HOUR = 3600 * 1000
SEGMENT_OF_TWO = LogConfig(segment_bytes=100)     # two 50-byte messages per segment


def fifty_bytes(i: int):
    """One message set of exactly 50 bytes (a 28-byte value, no key)."""
    return [(None, b"%02d" % i + b"v" * 26, 1000 + i)]


def log_of(tmp_path, n: int, config: LogConfig = SEGMENT_OF_TWO, flush: bool = True,
           clock=None):
    """A log of ``n`` 50-byte messages (offsets 0, 50, ...), two per segment."""
    lg = Log(str(tmp_path), config, clock or FakeClock())
    messages = []
    for i in range(n):
        messages += append(lg, fifty_bytes(i))[1]
    if flush:
        lg.flush()
    else:
        lg.write_pending()
    return lg, messages


def names(*bases: int) -> list[str]:
    return [f"{b:020d}.log" for b in bases]


def checkpoint(directory) -> dict:
    with open(os.path.join(str(directory), CHECKPOINT_FILE)) as f:
        return json.load(f)


def file_size(directory, base: int) -> int:
    return os.path.getsize(os.path.join(str(directory), f"{base:020d}.log"))


def ends(lg: Log) -> tuple[int, int, int, int]:
    return lg.end_offset, lg.written_end, lg.flushed_end, lg.visible_end


# ---------------------------------------------------------------- high watermark and reads

def test_an_unreplicated_log_has_no_high_watermark_and_no_epoch_file(tmp_path):
    lg, messages = log_of(tmp_path, 3)
    assert lg.high_watermark is None and lg.visible_end == lg.flushed_end == 150
    assert lg.checkpointed_high_watermark is None and lg.epochs.entries == []
    lg.close()
    assert LEADER_EPOCH_FILE not in os.listdir(tmp_path)
    assert "high_watermark" not in checkpoint(tmp_path)
    lg = Log(str(tmp_path), SEGMENT_OF_TWO, FakeClock())
    assert lg.checkpointed_high_watermark is None and read_from(lg, 0) == messages
    lg.close()


def test_consumers_read_below_the_high_watermark_only(tmp_path):
    lg, messages = log_of(tmp_path, 5)                     # segments 0, 100, 200
    lg.set_high_watermark(150)
    assert lg.visible_end == 150
    assert read_from(lg, 0) == messages[:3]
    assert lg.read(100, 1000) == lg.read(100, 1000, upto=150)
    assert len(lg.read(100, 1000)) == 50                  # stops at the watermark
    # between the watermark and the written end: in range, nothing to read
    for offset in (150, 200, 250):
        assert lg.locate(offset, 1000)[2] == 0
    with pytest.raises(OffsetOutOfRangeError) as exc:
        lg.read(251, 1000)
    assert (exc.value.earliest, exc.value.latest) == (0, 150)
    lg.set_high_watermark(None)                            # unreplicated again
    assert lg.visible_end == 250 and read_from(lg, 0) == messages
    lg.close()


def test_the_visible_end_is_the_lower_of_flushed_end_and_high_watermark(tmp_path):
    lg, messages = log_of(tmp_path, 4, config=LogConfig(), flush=False)
    lg.set_high_watermark(150)
    assert (lg.flushed_end, lg.visible_end) == (0, 0)
    assert lg.read(0, 1000) == b""
    assert lg.locate(200, 1000)[2] == 0                     # written, in range
    segs, target = lg.begin_flush()
    for s in segs:
        s.sync()
    lg.complete_flush(segs, target, True)
    assert (lg.flushed_end, lg.visible_end) == (200, 150)
    assert read_from(lg, 0) == messages[:3]
    lg.set_high_watermark(200)
    assert read_from(lg, 0) == messages
    lg.close()


def test_the_high_watermark_is_clamped_to_the_log(tmp_path):
    lg, _ = log_of(tmp_path, 6)
    lg.set_high_watermark(10_000)
    assert lg.high_watermark == 300
    lg.apply_retention(0)                     # retention.bytes unset: nothing goes
    lg.config = LogConfig(segment_bytes=100, retention_bytes=0)
    lg.apply_retention(0)
    assert lg.earliest_offset == 200
    lg.set_high_watermark(0)
    assert lg.high_watermark == 200
    lg.close()


def test_unreplicated_reads_are_out_of_range_past_the_flushed_end(tmp_path):
    lg, _ = log_of(tmp_path, 2, config=LogConfig())
    append(lg, fifty_bytes(9))
    lg.write_pending()
    assert (lg.written_end, lg.flushed_end) == (150, 100)
    assert lg.locate(100, 1000)[2] == 0
    with pytest.raises(OffsetOutOfRangeError) as exc:
        lg.locate(150, 1000)
    assert exc.value.latest == 100
    lg.close()


def test_a_replica_fetch_reads_up_to_the_given_end(tmp_path):
    lg, messages = log_of(tmp_path, 3, config=LogConfig())
    lg.set_high_watermark(50)
    _, more = append(lg, fifty_bytes(7))
    lg.write_pending()                                     # written, not flushed
    append(lg, fifty_bytes(8))                             # buffered only
    assert (lg.end_offset, lg.written_end, lg.flushed_end) == (250, 200, 150)
    everything = lg.read(0, 10_000, upto=lg.written_end)
    assert len(everything) == 200
    assert lg.read(0, 10_000, upto=120) == everything[:120]
    assert lg.read(50, 10_000, upto=250) == everything[50:]      # never past the written end
    assert lg.read(200, 10_000, upto=200) == b""
    with pytest.raises(OffsetOutOfRangeError) as exc:
        lg.read(201, 10_000, upto=200)
    assert exc.value.latest == 200
    assert lg.check_message_at(150, 1 << 20, upto=200)
    assert not lg.check_message_at(150, 1 << 20)           # past the consumers' end
    assert lg.corrupt_message_end(151, 1 << 20, upto=200) is None
    lg.close()


def test_offsets_before_and_retention_stop_at_the_high_watermark(tmp_path):
    clock = FakeClock(10 * HOUR)
    lg, _ = log_of(tmp_path, 5, config=LogConfig(segment_bytes=100, retention_bytes=0),
                   clock=clock)
    lg.set_high_watermark(150)
    assert lg.offsets_before(10**15, 10) == [100, 0]       # segment 200 lies past it
    lg.apply_retention(clock())
    # segment 0 lies wholly below the watermark; 100..200 does not: a
    # follower may still need it
    assert lg.earliest_offset == 100
    lg.set_high_watermark(200)
    lg.apply_retention(clock())
    assert lg.earliest_offset == 200
    lg.close()


# ---------------------------------------------------------------- truncate_to

@pytest.mark.parametrize("offset, files, kept", [
    (150, names(0, 100), 3),          # inside a segment
    (200, names(0, 100), 4),          # at a segment base: that segment goes
    (100, names(0), 2),
    (50, names(0), 1),
    (0, names(0), 0),                 # at the earliest: the first segment stays, empty
    (250, names(0, 100, 200), 5),     # at the end: nothing to do
])
def test_truncate_to(tmp_path, offset, files, kept):
    lg, messages = log_of(tmp_path, 5)
    lg.set_high_watermark(250)
    lg.truncate_to(offset)
    assert segment_files(str(tmp_path)) == files
    assert sum(s.size for s in lg.segments) == offset
    assert ends(lg) == (offset, offset, offset, offset)
    assert lg.high_watermark == offset
    assert read_from(lg, 0) == messages[:kept]
    if offset < 250:                  # a no-op writes nothing
        assert lg.recovery_point == offset
        assert checkpoint(tmp_path)["recovery_point"] == offset
    # appends go on from ``offset``
    _, more = append(lg, fifty_bytes(40))
    lg.flush()
    lg.set_high_watermark(lg.end_offset)
    assert more[0].offset == offset
    assert read_from(lg, 0) == messages[:kept] + more
    lg.close()
    lg = Log(str(tmp_path), SEGMENT_OF_TWO, FakeClock())
    assert read_from(lg, 0) == messages[:kept] + more
    lg.close()


def test_truncate_to_after_retention_keeps_the_first_segment(tmp_path):
    lg, messages = log_of(tmp_path, 5, config=LogConfig(segment_bytes=100, retention_bytes=0))
    lg.apply_retention(0)
    assert lg.earliest_offset == 200
    lg.truncate_to(200)
    assert segment_files(str(tmp_path)) == names(200)
    assert ends(lg) == (200, 200, 200, 200) and lg.earliest_offset == 200
    with pytest.raises(ValueError):
        lg.truncate_to(150)                               # below the earliest
    lg.close()


def test_truncate_to_checks_its_preconditions(tmp_path):
    lg, _ = log_of(tmp_path, 2)
    with pytest.raises(ValueError):
        lg.truncate_to(101)
    with pytest.raises(ValueError):
        lg.truncate_to(-1)
    append(lg, fifty_bytes(3))
    with pytest.raises(ValueError, match="write_pending"):
        lg.truncate_to(50)
    lg.write_pending()
    lg.truncate_to(50)
    assert ends(lg) == (50, 50, 50, 50)
    lg.close()


def test_truncate_to_lowers_only_the_ends_past_it(tmp_path):
    lg, messages = log_of(tmp_path, 2, config=LogConfig())
    append(lg, fifty_bytes(2))
    append(lg, fifty_bytes(3))
    lg.write_pending()
    lg.set_high_watermark(50)
    assert (lg.end_offset, lg.flushed_end, lg.high_watermark) == (200, 100, 50)
    lg.truncate_to(150)
    assert (lg.end_offset, lg.written_end, lg.flushed_end, lg.high_watermark) == \
        (150, 150, 100, 50)
    assert lg.unflushed_messages > 0                       # 100..150 still needs its fsync
    lg.truncate_to(100)
    assert lg.unflushed_messages == 0
    lg.close()


def test_truncate_to_inside_a_quarantined_range_shortens_it(tmp_path):
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 6, config=LogConfig())
    lg.close(clean=False)                                  # no checkpoint: all is scanned
    with open(os.path.join(d, names(0)[0]), "r+b") as f:  # rot the CRC of message 2
        f.seek(104)
        f.write(b"\xff")
    lg = Log(d, LogConfig(), FakeClock())
    assert lg.quarantined == [(100, 150)]
    lg.truncate_to(250)
    assert lg.quarantined == [(100, 150)]
    lg.truncate_to(120)
    assert lg.quarantined == [(100, 120)]
    assert read_skipping_quarantine(lg, 0) == (messages[:2], [(100, 120)])
    lg.truncate_to(100)
    assert lg.quarantined == []
    lg.close()
    assert checkpoint(tmp_path)["quarantined"] == []


def test_truncate_to_the_end_of_a_quarantined_gap(tmp_path):
    """Bytes missing at the end of segment 0 (a gap 50..100, quarantined):
    truncating to 100 deletes segment 100 and must start a new one there,
    since appends to segment 0 would land at 50."""
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 5)
    lg.close()
    os.truncate(os.path.join(d, names(0)[0]), 50)
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    assert lg.quarantined == [(50, 100)]
    lg.truncate_to(100)
    assert segment_files(d) == names(0, 100) and lg.end_offset == 100
    _, more = append(lg, fifty_bytes(7))
    lg.flush()
    assert more[0].offset == 100
    assert read_skipping_quarantine(lg, 0) == (messages[:1] + more, [(50, 100)])
    lg.close()


def test_truncated_state_survives_a_restart(tmp_path):
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 5)
    lg.epochs.assign(1, 0)
    lg.epochs.assign(2, 100)
    lg.epochs.assign(3, 200)
    lg.set_high_watermark(250)
    lg.truncate_to(150)
    assert lg.epochs.entries == [(1, 0), (2, 100)]
    lg.write_checkpoint()
    lg.close(clean=False)                                  # nothing more written
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    assert ends(lg) == (150, 150, 150, 150)
    assert lg.high_watermark is None and lg.checkpointed_high_watermark == 150
    assert lg.epochs.entries == [(1, 0), (2, 100)]
    assert read_from(lg, 0) == messages[:3]
    assert segment_files(d) == names(0, 100) and file_size(d, 100) == 50
    lg.close()


def test_a_checkpointed_high_watermark_past_the_recovered_end_is_clamped(tmp_path):
    d = str(tmp_path)
    lg, _ = log_of(tmp_path, 4)
    lg.set_high_watermark(200)
    lg.close()
    assert checkpoint(tmp_path)["high_watermark"] == 200
    os.truncate(os.path.join(d, names(100)[0]), 70)        # a torn tail: 150..200 goes
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    assert lg.end_offset == 150 and lg.checkpointed_high_watermark == 150
    lg.close()


def test_epochs_past_the_recovered_end_are_dropped_at_open(tmp_path):
    d = str(tmp_path)
    lg, _ = log_of(tmp_path, 2)
    lg.close()
    with open(os.path.join(d, LEADER_EPOCH_FILE), "w") as f:
        json.dump({"epochs": [[1, 0], [2, 100], [3, 150]]}, f)
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    # 2 starts at the end: a leader that appended nothing yet; 3 is past it
    assert lg.epochs.entries == [(1, 0), (2, 100)]
    lg.close()


# ---------------------------------------------------------------- a truncation during a flush

def test_a_truncation_during_a_flush_exposes_nothing_past_it(tmp_path):
    """The flush's target was computed before the cut; bytes appended at the
    cut point afterwards were never in that fsync."""
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 2, config=LogConfig())
    _, tail = append(lg, fifty_bytes(2))
    append(lg, fifty_bytes(3))
    segs, target = lg.begin_flush()                       # fsync of 0..200 in flight
    assert target == 200 and segs[0].base_offset == 0
    lg.truncate_to(150)
    # The segment is pinned by the flush: its file keeps the cut bytes until
    # the unpin, and appends go to a new segment at 150.
    assert segment_files(d) == names(0, 150) and file_size(d, 0) == 200
    assert lg.segments[0].size == 150
    _, after = append(lg, fifty_bytes(4))
    lg.write_pending()
    assert lg.written_end == 200
    for s in segs:
        s.sync()
    lg.complete_flush(segs, target, True)
    assert lg.flushed_end == 150                          # not 200: 150..200 is new
    assert file_size(d, 0) == 150                         # cut at the last unpin
    assert read_from(lg, 0) == messages + tail
    lg.flush()
    assert read_from(lg, 0) == messages + tail + after
    lg.close()
    lg = Log(d, LogConfig(), FakeClock())
    assert read_from(lg, 0) == messages + tail + after
    lg.close()


def test_a_truncation_below_a_flush_in_flight(tmp_path):
    lg, messages = log_of(tmp_path, 2, config=LogConfig())
    append(lg, fifty_bytes(2))
    segs, target = lg.begin_flush()
    lg.truncate_to(50)
    assert lg.flushed_end == 50
    _, again = append(lg, fifty_bytes(5))
    _, again2 = append(lg, fifty_bytes(6))
    lg.write_pending()
    lg.complete_flush(segs, target, True)
    assert lg.flushed_end == 50
    lg.flush()
    assert read_from(lg, 0) == messages[:1] + again + again2
    lg.close()


def test_a_cut_segment_still_serves_a_sendfile_in_flight(tmp_path):
    """A fetch pinned the segment and will send bytes 50..100 of its file:
    they must still be there, unchanged, until it unpins."""
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 2, config=LogConfig())
    seg, position, length = lg.locate(50, 1000)
    seg.pin()
    promised = seg.read(position, length)
    lg.truncate_to(50)
    append(lg, fifty_bytes(9))
    lg.flush()
    assert seg.read(position, length) == promised          # not overwritten, not cut
    seg.unpin()
    assert file_size(d, 0) == 50 and segment_files(d) == names(0, 50)
    lg.close()
    lg = Log(d, LogConfig(), FakeClock())
    assert [m.offset for m in read_from(lg, 0)] == [0, 50]
    lg.close()


def test_a_crash_before_the_deferred_cut_keeps_the_cut(tmp_path):
    """The pinned segment still holds the cut bytes when the broker dies:
    recovery must not bring them back (the next segment's base says where
    the segment ends)."""
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 3, config=LogConfig())
    lg.segments[0].pin()                                   # never unpinned: a crash
    lg.truncate_to(100)
    lg.close(clean=False)
    assert file_size(d, 0) == 150
    lg = Log(d, LogConfig(), FakeClock())
    assert lg.end_offset == 100 and read_from(lg, 0) == messages[:2]
    assert file_size(d, 0) == 100
    lg.close()


def test_emptying_a_pinned_first_segment_gives_it_a_new_file(tmp_path):
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 2, config=LogConfig())
    old = lg.segments[0]
    old.pin()                                              # a sendfile of 0..100 in flight
    promised = old.read(0, 100)
    lg.truncate_to(0)
    assert old.deleted and old.fd >= 0
    assert old.read(0, 100) == promised                    # the sender's bytes are intact
    assert segment_files(d) == names(0) and file_size(d, 0) == 0
    _, again = append(lg, fifty_bytes(5))
    lg.flush()
    assert read_from(lg, 0) == again
    old.unpin()
    assert old.fd == -1
    lg.close()


# ---------------------------------------------------------------- reset_to

def test_reset_to_starts_over_empty_at_the_offset(tmp_path):
    d = str(tmp_path)
    lg, _ = log_of(tmp_path, 5)
    lg.epochs.assign(4, 0)
    lg.set_high_watermark(200)
    append(lg, fifty_bytes(9))                             # buffered: dropped too
    lg.reset_to(1000)
    assert segment_files(d) == names(1000)
    assert lg.earliest_offset == 1000 and ends(lg) == (1000, 1000, 1000, 1000)
    assert lg.high_watermark == 1000 and lg.epochs.entries == []
    assert lg.unflushed_messages == 0 and lg.quarantined == []
    assert LEADER_EPOCH_FILE not in os.listdir(d)
    assert checkpoint(d)["recovery_point"] == 1000
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    lg.epochs.assign(5, 1000)
    _, more = append(lg, fifty_bytes(1))
    lg.flush()
    lg.set_high_watermark(lg.end_offset)
    assert more[0].offset == 1000 and read_from(lg, 1000) == more
    lg.close()
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    assert lg.earliest_offset == 1000 and read_from(lg, 1000) == more
    assert lg.epochs.entries == [(5, 1000)] and lg.checkpointed_high_watermark == 1050
    lg.close()


def test_reset_to_a_lower_offset_and_to_the_same_base(tmp_path):
    d = str(tmp_path)
    lg, _ = log_of(tmp_path, 5, config=LogConfig(segment_bytes=100, retention_bytes=0))
    lg.apply_retention(0)
    assert lg.earliest_offset == 200
    lg.reset_to(0)
    assert segment_files(d) == names(0) and ends(lg) == (0, 0, 0, 0)
    lg.reset_to(0)
    assert segment_files(d) == names(0) and file_size(d, 0) == 0
    lg.close()


def test_reset_to_during_a_flush(tmp_path):
    lg, _ = log_of(tmp_path, 2, config=LogConfig())
    append(lg, fifty_bytes(2))
    segs, target = lg.begin_flush()
    lg.reset_to(120)
    _, more = append(lg, fifty_bytes(3))
    lg.write_pending()
    lg.complete_flush(segs, target, True)
    assert lg.flushed_end == 120                           # the old flush means nothing here
    lg.flush()
    assert read_from(lg, 120) == more
    lg.close()


# ---------------------------------------------------------------- retention and the epochs

def test_retention_moves_the_first_epoch_up_to_the_earliest_offset(tmp_path):
    d = str(tmp_path)
    lg, messages = log_of(tmp_path, 7, config=LogConfig(segment_bytes=100))
    lg.epochs.assign(1, 0)
    lg.epochs.assign(2, 150)
    lg.epochs.assign(3, 250)
    lg.config = LogConfig(segment_bytes=100, retention_bytes=150)
    lg.apply_retention(0)
    assert lg.earliest_offset == 200
    assert lg.epochs.entries == [(2, 200), (3, 250)]
    lg.close()
    lg = Log(d, LogConfig(segment_bytes=100), FakeClock())
    assert lg.epochs.entries == [(2, 200), (3, 250)]
    assert lg.epochs.end_offset_for(1, lg.end_offset) == (-1, 200)
    assert read_from(lg, 200) == messages[4:]
    lg.close()


def test_deleting_the_log_removes_the_epoch_file(tmp_path):
    d = os.path.join(str(tmp_path), "p")
    lg = Log(d, LogConfig(), FakeClock())
    lg.epochs.assign(1, 0)
    lg.delete()
    assert not os.path.exists(d)


def test_reads_after_truncation_raise_past_the_new_end(tmp_path):
    lg, _ = log_of(tmp_path, 4)
    lg.truncate_to(100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(150, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(150, 100, upto=lg.written_end)
    lg.close()


def test_quarantined_ranges_past_the_recovered_end_are_dropped(tmp_path):
    """A crash lost the checkpoint a truncation wrote: the previous one names
    a quarantined range in bytes that are gone; new messages there must not
    be refused as corrupt."""
    d = str(tmp_path)
    lg, _ = log_of(tmp_path, 4)
    lg.close()
    data = checkpoint(d)
    data["quarantined"] = [[0, 20], [150, 300]]
    with open(os.path.join(d, CHECKPOINT_FILE), "w") as f:
        json.dump(data, f)
    lg = Log(d, SEGMENT_OF_TWO, FakeClock())
    assert lg.quarantined == [(0, 20), (150, 200)]
    lg.close()
