"""Issue 9, defect 1, in the storage layer: recovery no longer trusts a
checkpoint that the files contradict, and bit rot in written data is
quarantined instead of cutting every later message and segment.

* a last segment cut short after a CLEAN stop (the checkpoint says nothing
  needs scanning) is rescanned and its torn message cut; appends after the
  restart are readable (they used to land behind a torn message: unreadable);
* the same with a checkpoint written before sizes were recorded;
* a quarantined range survives a clean restart, is dropped by retention,
  and a by-time lookup never answers an offset inside it;
* ``check_message_at`` tells message boundaries from other offsets;
* a failed roll (disk full) raises StorageError and leaves the log usable.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import time
from unittest import mock

import pytest

from broker.storage.errors import CorruptRangeError, StorageError
from broker.storage.log import CHECKPOINT_FILE, Log
from broker.storage.log_config import LogConfig
from broker.storage.segment import Segment

from storage_helpers import FakeClock, append, read_from, read_skipping_quarantine

CONFIG = LogConfig(segment_bytes=4000)


def seg_path(directory, base: int) -> str:
    return os.path.join(str(directory), f"{base:020d}.log")


def fill(lg: Log, n: int, size: int = 100, start: int = 0):
    out = []
    for i in range(start, start + n):
        out += append(lg, [(None, b"%06d" % i + b"." * (size - 6), i + 1)])[1]
    return out


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x5A]))


def test_a_last_segment_cut_short_after_a_clean_stop_is_rescanned(tmp_path, caplog):
    d = str(tmp_path)
    lg = Log(d, CONFIG, FakeClock())
    messages = fill(lg, 100)
    lg.close()                                        # clean: checkpoint = end
    last = lg.segments[-1]
    os.truncate(last.path, last.size - 46)            # tears the last message
    caplog.set_level(logging.WARNING, logger="broker.storage.log")
    lg = Log(d, CONFIG, FakeClock())
    assert "rescanning" in caplog.text and "cut" in caplog.text
    assert read_from(lg, 0) == messages[:-1]
    assert lg.end_offset == messages[-1].offset
    after = fill(lg, 30, start=1000)
    lg.flush()
    assert read_from(lg, 0) == messages[:-1] + after
    lg.close()


def test_an_old_checkpoint_without_sizes_is_not_trusted_past_the_file_end(tmp_path, caplog):
    d = str(tmp_path)
    lg = Log(d, CONFIG, FakeClock())
    messages = fill(lg, 100)
    lg.close()
    path = os.path.join(d, CHECKPOINT_FILE)
    with open(path) as f:
        data = json.load(f)
    data["segments"] = {b: v[:2] for b, v in data["segments"].items()}   # the old format
    data.pop("quarantined")
    with open(path, "w") as f:
        json.dump(data, f)
    os.truncate(lg.segments[-1].path, lg.segments[-1].size - 46)
    caplog.set_level(logging.WARNING, logger="broker.storage.log")
    lg = Log(d, CONFIG, FakeClock())
    assert "below the recovery point" in caplog.text
    assert read_from(lg, 0) == messages[:-1]
    lg.close()


def test_bit_rot_in_an_older_segment_keeps_everything_after_it(tmp_path, caplog):
    d = str(tmp_path)
    lg = Log(d, CONFIG, FakeClock())
    messages = fill(lg, 200)
    lg.flush()
    bases = list(lg.bases)
    assert len(bases) >= 4
    lg.close(clean=False)                             # a crash: nothing checkpointed
    victim = messages[5]
    flip(seg_path(d, 0), victim.offset + 40)          # inside its value
    caplog.set_level(logging.WARNING, logger="broker.storage.log")
    lg = Log(d, CONFIG, FakeClock())
    assert "quarantined" in caplog.text
    assert lg.quarantined == [(victim.offset, victim.next_offset)]
    assert lg.quarantined_bytes == victim.next_offset - victim.offset
    assert lg.bases == bases                          # no segment deleted
    with pytest.raises(CorruptRangeError) as info:
        lg.read(victim.offset, 1 << 20)
    assert (info.value.start, info.value.end) == (victim.offset, victim.next_offset)
    assert lg.read(0, 1 << 20) == lg.read(0, victim.offset)   # stops at the range
    got, skipped = read_skipping_quarantine(lg, 0)
    assert got == messages[:5] + messages[6:]
    assert skipped == [(victim.offset, victim.next_offset)]
    # survives a clean restart (kept in the checkpoint), without a rescan
    lg.close()
    caplog.clear()
    lg = Log(d, CONFIG, FakeClock())
    assert lg.quarantined == [(victim.offset, victim.next_offset)]
    assert "quarantined" not in caplog.text
    lg.close()


def test_a_damaged_length_field_resynchronises_on_the_next_message(tmp_path):
    d = str(tmp_path)
    lg = Log(d, CONFIG, FakeClock())
    messages = fill(lg, 30)
    lg.flush()
    lg.close(clean=False)
    victim = messages[3]
    with open(seg_path(d, 0), "r+b") as f:            # length field -> a huge value
        f.seek(victim.offset)
        f.write(b"\x00\x7f\xff\xff")
    lg = Log(d, CONFIG, FakeClock())
    assert lg.quarantined == [(victim.offset, victim.next_offset)]
    assert read_skipping_quarantine(lg, 0)[0] == messages[:3] + messages[4:]
    lg.close()


def test_zeros_over_the_middle_of_the_last_segment_are_quarantined(tmp_path):
    """A power loss can leave a hole of zeros with written pages after it:
    the messages after the hole are kept."""
    d = str(tmp_path)
    lg = Log(d, LogConfig(segment_bytes=1 << 20), FakeClock())
    messages = fill(lg, 100)
    lg.flush()
    lg.close(clean=False)
    with open(seg_path(d, 0), "r+b") as f:
        f.seek(messages[10].offset)
        f.write(bytes(messages[20].offset - messages[10].offset))
    lg = Log(d, LogConfig(segment_bytes=1 << 20), FakeClock())
    assert lg.quarantined == [(messages[10].offset, messages[20].offset)]
    assert read_skipping_quarantine(lg, 0)[0] == messages[:10] + messages[20:]
    lg.close()


def test_retention_drops_quarantined_ranges_with_their_segments(tmp_path):
    d, clock = str(tmp_path), FakeClock()
    config = LogConfig(segment_bytes=4000, retention_bytes=4000)
    lg = Log(d, config, clock)
    messages = fill(lg, 200)
    lg.flush()
    lg.close(clean=False)
    flip(seg_path(d, 0), messages[2].offset + 30)
    lg = Log(d, config, clock)
    assert lg.quarantined
    lg.apply_retention(clock())
    assert lg.earliest_offset > messages[2].next_offset
    assert lg.quarantined == []
    lg.close()


def test_offsets_before_a_time_skip_a_quarantined_segment_start(tmp_path):
    d = str(tmp_path)
    lg = Log(d, CONFIG, FakeClock())
    messages = fill(lg, 200)
    lg.flush()
    second = lg.bases[1]
    lg.close(clean=False)
    flip(seg_path(d, second), 30)                    # the second segment's first message
    lg = Log(d, CONFIG, FakeClock())
    assert lg.quarantined and lg.quarantined[0][0] == second
    assert second not in lg.offsets_before(10**12, 100)
    lg.close()


def test_check_message_at_tells_boundaries_apart(tmp_path):
    lg = Log(str(tmp_path), LogConfig(segment_bytes=1 << 20), FakeClock())
    messages = fill(lg, 50)
    lg.flush()
    for m in messages[:10]:
        assert lg.check_message_at(m.offset, 1 << 20)
    for offset in (1, 3, 4, 17, messages[1].offset - 1, messages[1].offset + 5):
        assert not lg.check_message_at(offset, 1 << 20), offset
    assert not lg.check_message_at(messages[0].offset, 50)       # longer than the limit
    # a damaged message at a boundary is told apart from a non-boundary
    assert lg.corrupt_message_end(17, 1 << 20) is None
    with open(lg.segments[0].path, "r+b") as f:
        f.seek(messages[3].offset + 30)
        f.write(b"\xee")
    assert not lg.check_message_at(messages[3].offset, 1 << 20)
    assert lg.corrupt_message_end(messages[3].offset, 1 << 20) == messages[3].next_offset
    with open(lg.segments[0].path, "r+b") as f:
        f.seek(messages[-1].offset + 30)
        f.write(b"\xee")
    assert lg.corrupt_message_end(messages[-1].offset, 1 << 20) == messages[-1].next_offset
    # cheap: about a pread and a small CRC
    started = time.perf_counter()
    for _ in range(2000):
        lg.check_message_at(messages[1].offset, 1 << 20)
    per_call = (time.perf_counter() - started) / 2000
    assert per_call < 1e-3, per_call
    lg.close()


def test_a_failed_roll_raises_storage_error_and_the_log_stays_usable(tmp_path):
    lg = Log(str(tmp_path), LogConfig(segment_bytes=1000), FakeClock())
    before = fill(lg, 8)                      # 8 x 122 bytes: the next append rolls
    lg.write_pending()
    buffered_end = lg.end_offset
    real = Segment.__init__

    def no_space(self, directory, base, created, size=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    with mock.patch.object(Segment, "__init__", no_space):
        with pytest.raises(StorageError, match="disk full"):
            fill(lg, 1, start=100)
    assert lg.end_offset == lg.written_end == buffered_end
    assert len(lg.segments) == 1
    after = fill(lg, 3, start=200)            # space again: the roll happens now
    lg.flush()
    assert read_from(lg, 0) == before + after
    assert Segment.__init__ is real
    lg.close()


def test_a_failed_write_during_a_roll_gives_the_buffered_offsets_back(tmp_path):
    lg = Log(str(tmp_path), LogConfig(segment_bytes=1000), FakeClock())
    before = fill(lg, 3)
    lg.write_pending()
    written = lg.written_end
    fill(lg, 5, start=50)                     # buffered, not written: 8 x 122 bytes
    real_write = Segment.write

    def disk_full(self, buffers):
        raise StorageError("cannot append: disk full", errno.ENOSPC)

    with mock.patch.object(Segment, "write", disk_full):
        with pytest.raises(StorageError) as info:
            fill(lg, 1, start=100)            # rolls: writes the 5 buffered first
    assert info.value.lost_messages == 5
    assert lg.end_offset == lg.written_end == written
    assert Segment.write is real_write
    after = fill(lg, 2, start=200)
    lg.flush()
    assert read_from(lg, 0) == before + after
    lg.close()
