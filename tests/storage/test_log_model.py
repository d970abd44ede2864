"""Model-based test of Log: random operations against a plain list of the
messages appended, checking the log's offsets, segments, files and every
possible read after each step."""
from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest
from hypothesis import event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.storage.errors import OffsetOutOfRangeError
from broker.storage.log import Log
from broker.storage.log_config import LogConfig

from storage_helpers import FakeClock, Stored, append, decode, read_from, segment_files

SEGMENT_NAME = re.compile(r"^\d{20}\.log$")

keys = st.none() | st.binary(max_size=8)
values = st.binary(max_size=48)
batches = st.lists(st.tuples(keys, values, st.integers(-20_000, 5_000)), min_size=1, max_size=6)


class LogMachine(RuleBasedStateMachine):
    """The model: ``messages`` (every message not yet deleted by retention,
    in offset order) and the three ends the log must agree with. Buffered
    messages are those at or beyond ``written``; visible ones end at or
    before ``flushed``."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="samsa-model-")
        self.clock = FakeClock()
        self.messages: list[Stored] = []
        self.end = self.written = self.flushed = self.earliest = 0
        self.log: Log | None = None
        # Segments cut by truncate_to, by base: their max timestamp may be
        # that of a message cut away (an overestimate, kept on purpose, see
        # Log.truncate_to); the value is the newest timestamp the segment
        # ever held, the most it may say.
        self.cut_max: dict[int, int] = {}

    @initialize(segment_bytes=st.sampled_from([64, 120, 250]),
                retention_bytes=st.sampled_from([-1, 0, 150, 400]),
                retention_ms=st.sampled_from([-1, 10_000]))
    def open_log(self, segment_bytes: int, retention_bytes: int, retention_ms: int) -> None:
        self.config = LogConfig(segment_bytes=segment_bytes, segment_ms=20_000,
                                retention_bytes=retention_bytes, retention_ms=retention_ms)
        self.log = Log(self.dir, self.config, self.clock)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close(clean=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ operations

    @rule(batch=batches)
    def append(self, batch) -> None:
        batch = [(k, v, max(0, self.clock.now + dt)) for k, v, dt in batch]
        active = self.log.active
        active_size = self.end - active.base_offset
        offset, expected = append(self.log, batch)
        size = expected[-1].next_offset - offset
        should_roll = active_size > 0 and (
            active_size + size > self.config.segment_bytes
            or self.clock.now - active.created_ms >= self.config.segment_ms)
        assert (self.log.active is not active) == should_roll
        if should_roll:     # rolling wrote what was buffered to the old segment
            self.written = offset
            assert self.log.active.base_offset == offset
        assert offset == self.end
        self.messages.extend(expected)
        self.end = expected[-1].next_offset

    @rule()
    def write_pending(self) -> None:
        self.log.write_pending()
        self.written = self.end

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.written = self.flushed = self.end

    @rule()
    def roll(self) -> None:
        before = len(self.log.segments)
        active_size = self.log.end_offset - self.log.active.base_offset
        seg = self.log.roll()
        self.written = self.end
        assert seg is self.log.active
        assert seg.base_offset == self.end
        assert len(self.log.segments) == before + (1 if active_size else 0)

    @rule(ms=st.integers(0, 15_000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = Log(self.dir, self.config, self.clock)
        self.written = self.flushed = self.end
        assert self.log.recovered_bytes_cut == 0

    @rule()
    def reopen_after_crash(self) -> None:
        """The process dies: buffered appends are lost, what reached the
        files survives (the OS keeps the page cache) and becomes visible."""
        self.log.close(clean=False)
        self.log = Log(self.dir, self.config, self.clock)
        self.messages = [m for m in self.messages if m.next_offset <= self.written]
        self.end = self.flushed = self.written
        assert self.log.recovered_bytes_cut == 0

    @rule()
    def apply_retention(self) -> None:
        # What should go, restated from the model's timestamps and ends.
        now = self.clock.now
        cfg = self.config
        size = self.end - self.earliest
        expected = []
        for seg in self.log.segments[:-1]:
            if seg.end_offset > self.flushed:
                break
            inside = [m.timestamp for m in self.messages
                      if seg.base_offset <= m.offset < seg.end_offset]
            newest = max(inside, default=-1)
            if seg.base_offset in self.cut_max:
                # the overestimate decides (its bounds are an invariant)
                newest = seg.max_timestamp
            too_old = cfg.retention_ms > 0 and newest >= 0 and now - newest > cfg.retention_ms
            too_big = cfg.retention_bytes >= 0 and size - seg.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            expected.append(seg.base_offset)
            size -= seg.size
        paths = [s.path for s in self.log.segments]
        deleted = self.log.apply_retention(now)
        event(f"retention deleted {min(len(deleted), 2)}+ segments")
        assert [s.base_offset for s in deleted] == expected
        for s in deleted:
            assert not os.path.exists(s.path)
        assert [s.path for s in self.log.segments] == paths[len(deleted):]
        self.earliest = self.log.earliest_offset
        self.messages = [m for m in self.messages if m.offset >= self.earliest]
        assert not self.messages or self.messages[0].offset == self.earliest

    @rule(data=st.data())
    def truncate_to(self, data) -> None:
        self.log.write_pending()
        boundaries = sorted({self.earliest} | {m.next_offset for m in self.messages})
        offset = data.draw(st.sampled_from(boundaries), label="truncate to")
        # The segment cut inside (one holding bytes on both sides of offset):
        # its max timestamp may stay that of a message cut away.
        holder = None
        if self.earliest < offset < self.end:
            holder = self.log.segments[bisect_segment(self.log, offset - 1)]
            if holder.end_offset == offset:
                holder = None
        held = [] if holder is None else [
            m.timestamp for m in self.messages
            if holder.base_offset <= m.offset < holder.end_offset]
        if offset < self.end:   # segments from offset on go (or start again, empty)
            self.cut_max = {b: t for b, t in self.cut_max.items() if b < offset}
        self.log.truncate_to(offset)
        event("truncated " + ("nothing" if offset == self.end else
                              "to the earliest" if offset == self.earliest else "a tail"))
        self.messages = [m for m in self.messages if m.next_offset <= offset]
        self.end = self.written = offset
        self.flushed = min(self.flushed, offset)
        if holder is not None:
            base = holder.base_offset
            self.cut_max[base] = max([self.cut_max.get(base, -1), *held])

    @rule(delta=st.integers(-300, 300))
    def reset_to(self, delta: int) -> None:
        offset = max(0, self.end + delta)
        self.log.reset_to(offset)
        self.messages = []
        self.earliest = self.end = self.written = self.flushed = offset
        self.cut_max.clear()

    @rule(delta=st.integers(-25_000, 10_000), max_offsets=st.integers(1, 5))
    def offsets_before(self, delta: int, max_offsets: int) -> None:
        t = self.clock.now + delta
        want = []
        for seg in reversed(self.log.segments):
            first = [m.timestamp for m in self.messages
                     if seg.base_offset <= m.offset < min(seg.end_offset, self.written)]
            if first and first[0] <= t and seg.base_offset < self.flushed:
                want.append(seg.base_offset)
        assert self.log.offsets_before(t, max_offsets) == want[:max_offsets]

    # ------------------------------------------------------------ invariants

    @invariant()
    def ends_agree_with_model(self) -> None:
        if self.log is None:
            return
        lg = self.log
        assert (lg.earliest_offset, lg.flushed_end, lg.written_end, lg.end_offset) == \
            (self.earliest, self.flushed, self.written, self.end)
        assert 0 <= lg.earliest_offset <= lg.flushed_end <= lg.written_end <= lg.end_offset
        assert lg.size_bytes == self.end - self.earliest

    @invariant()
    def segments_tile_the_offsets(self) -> None:
        if self.log is None:
            return
        segs = self.log.segments
        assert segs, "a log always has an active segment"
        event(f"{min(len(segs), 4)}+ segments")
        for a, b in zip(segs, segs[1:]):
            assert b.base_offset == a.end_offset
            assert a.size > 0, "only the active segment may be empty"
        assert self.log.bases == [s.base_offset for s in segs]
        assert self.log.bases == sorted(set(self.log.bases))
        assert segs[-1].end_offset == self.written
        for s in segs:
            name = os.path.basename(s.path)
            assert SEGMENT_NAME.match(name) and int(name[:20]) == s.base_offset
            assert os.path.getsize(s.path) == s.size
        assert segment_files(self.dir) == [os.path.basename(s.path) for s in segs]

    @invariant()
    def segment_timestamps_match_messages(self) -> None:
        if self.log is None:
            return
        for seg in self.log.segments:
            ts = [m.timestamp for m in self.messages
                  if seg.base_offset <= m.offset < seg.end_offset]
            assert seg.first_timestamp == (ts[0] if ts else -1)
            if seg.base_offset in self.cut_max:
                newest = max(ts, default=-1)
                assert newest <= seg.max_timestamp <= max(newest, self.cut_max[seg.base_offset])
            else:
                assert seg.max_timestamp == max(ts, default=-1)

    @invariant()
    def every_read_gives_the_model_suffix(self) -> None:
        if self.log is None:
            return
        lg = self.log
        visible = [m for m in self.messages if m.next_offset <= self.flushed]
        assert read_from(lg, self.earliest) == visible
        for i, m in enumerate(visible):
            data = lg.read(m.offset, 1 << 20)
            seg_end = lg.segments[bisect_segment(lg, m.offset)].end_offset
            stop = min(seg_end, self.flushed)
            got, used = decode(data, m.offset)
            assert got == [x for x in visible[i:] if x.next_offset <= stop]
            assert used == len(data) == stop - m.offset
            # a read cut short decodes to a prefix and leaves the partial message
            short = lg.read(m.offset, (m.next_offset - m.offset) + 5)
            got, used = decode(short, m.offset)
            assert got == visible[i:i + 1] and used == m.next_offset - m.offset
        assert lg.read(self.flushed, 1000) == b""
        with pytest.raises(OffsetOutOfRangeError):
            lg.read(self.flushed + 1, 1000)
        if self.earliest > 0:
            with pytest.raises(OffsetOutOfRangeError) as err:
                lg.read(self.earliest - 1, 1000)
            assert (err.value.earliest, err.value.latest) == (self.earliest, self.flushed)


def bisect_segment(lg: Log, offset: int) -> int:
    return max(i for i, s in enumerate(lg.segments) if s.base_offset <= offset)


LogMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
TestLogModel = LogMachine.TestCase
