"""A partition log: an ordered list of segments, addressed by byte offset.

On disk, one directory per partition::

    00000000000000000000.log     segments, named by base offset (see segment.py)
    00000000000001073741802.log
    recovery-point.json          {"recovery_point": X,
                                  "segments": {base: [first_ts, max_ts, size]},
                                  "quarantined": [[start, end], ...],
                                  "high_watermark": H}     (replicated logs only)
    leader-epochs.json           {"epochs": [[epoch, start], ...]}  (see leader_epochs.py;
                                  only once the log has had a leader epoch)

The checkpoint records, for every segment wholly below the recovery point,
its timestamps and its size; the quarantined byte ranges (below); and the
high watermark of a replicated log, read back at start-up as
``checkpointed_high_watermark`` (a hint for the replication layer: the log
itself opens with ``high_watermark = None`` until it is told).

In memory, the log keeps a sorted list of segment base offsets (``bases``);
a read at offset X finds its segment by binary search and reads at position
X - base. There is no per-message index (the paper's design).

Offsets and invariants (0 <= earliest <= flushed_end <= written_end <= end_offset):
  * ``end_offset``   the offset the next appended message gets. Appends are
                     buffered in memory until ``write_pending()``;
  * ``written_end``  bytes up to here are in the segment files (page cache);
  * ``flushed_end``  bytes up to here are fsync'ed. Reads never return a byte
                     at or beyond ``flushed_end``: a message is exposed to
                     consumers only after it is flushed.
  * ``high_watermark`` None for an unreplicated log. For a replicated one (set
                     by the replication layer with ``set_high_watermark``):
                     earliest <= high_watermark <= end_offset, the end of the
                     bytes every in-sync replica holds.
  * ``visible_end``  = flushed_end, or min(flushed_end, high_watermark) when
                     replicated: consumers read only below it. A replicated
                     log still accepts reads at offsets up to written_end
                     (0 bytes past visible_end), so a consumer that read up to
                     an old leader's high watermark is not reset by a new
                     leader that learns it late. A follower's replica fetch
                     reads up to an explicit ``upto`` (the leader's written end).
  * Segments tile [earliest, end_offset): segment i+1 starts where segment i
    ends, except where recovery found bytes missing (a segment shorter than
    its successor's base): that gap is a quarantined range. Only the last
    (active) segment takes appends; a message set never straddles two segments.
  * ``quarantined``: sorted, disjoint byte ranges [start, end) that recovery
    found corrupt in data that had already been written (bit rot: a bad CRC
    with intact messages after it) or missing (a gap). Their bytes stay in
    the files for inspection but are never served: a read at an offset inside
    one raises CorruptRangeError (whose ``end`` is the next valid offset), and
    a read before one stops at its start. Every message outside them is kept.
  * Retention deletes whole segments only, oldest first, never the active one
    and never one holding bytes at or past visible_end (unflushed, or above
    the high watermark).
  * ``epochs`` (a LeaderEpochCache) has no entry starting before earliest nor
    after end_offset: retention, ``truncate_to`` and ``reset_to`` keep it so,
    and opening the log drops entries past the recovered end.
  * ``truncate_to(offset)`` cuts the tail (a follower dropping what its leader
    does not have); ``reset_to(offset)`` throws the whole log away and starts
    it empty at ``offset``. Both leave every end == offset (flushed_end and the
    high watermark only ever go down to it) and write the checkpoint.
  * ``recovery_point`` (persisted in recovery-point.json) <= flushed_end: every
    byte below it was fsync'ed and CRC-valid, so start-up scans only what lies
    beyond it. After a clean shutdown it equals end_offset and nothing is scanned.

Recovery (start-up) trusts the checkpoint only where the files agree with it:
  * a segment whose file size differs from its recorded size, or a last
    segment ending below the recovery point, is rescanned from its start
    (and the broker logs what it found);
  * bytes past the recovery point are scanned; a message that fails its
    checks is *bit rot* if a valid message follows it in the same segment
    (found by resynchronising: the next position holding a message with a
    good CRC): the range in between is quarantined and the scan goes on.
    Otherwise it is a *torn tail*: in the last segment it is cut (a write the
    crash interrupted); in an earlier segment it is quarantined, because the
    later segments hold intact, acknowledged messages. Recovery never deletes
    a segment.

Thread-safety: a Log is used by one thread (the broker's event loop). The
flusher thread only calls ``Segment.sync`` on segments handed to it by
``begin_flush`` (which pins them) and reports back through ``complete_flush``
on the loop thread. A truncation may happen while a flush is in flight:
``complete_flush`` then exposes nothing at or past the truncation point (the
bytes appended there since were not in the flush).
"""
from __future__ import annotations

import bisect
import errno
import json
import logging
import os
import re
import struct
from typing import Callable

from broker.protocol.message import scan_valid_prefix

from .errors import CorruptRangeError, OffsetOutOfRangeError, StorageError
from .files import fsync_directory, remove_file, write_json_atomically
from .leader_epochs import LeaderEpochCache
from .log_config import LogConfig
from .segment import Segment, parse_segment_file_name

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "recovery-point.json"
_SCAN_CHUNK = 8 << 20
_LENGTH = struct.Struct(">i")
_MIN_MESSAGE = 22          # a message's fixed header: length, crc, magic, attributes, ts, key length
# Where a message may start after corrupt bytes: a length of 18 .. 64 MiB
# (first byte 0..3, not 0 0 0 <18), any crc, magic 0, codec bits only, any
# timestamp, key length -1 or 0 .. 16 MiB. Scanned by the regex engine (C), so
# resynchronising over a large damaged region does not loop in Python; zero-
# filled regions never match (their length would be 0).
_PLAUSIBLE_HEADER = re.compile(
    rb"(?=[\x00-\x03](?!(?<=\x00)\x00\x00[\x00-\x11])[\x00-\xff]{3}[\x00-\xff]{4}\x00[\x00-\x07]"
    rb"[\x00-\xff]{8}(?:\xff\xff\xff\xff|\x00[\x00-\xff]{3}))", re.DOTALL)
_ZERO_RUN = bytes(64)


def _header_candidates(chunk: bytes, stop: int):
    """Positions below ``stop`` where a message header may start. Runs of
    zeros (a torn tail after a power loss is often zero-filled) are jumped
    over at memchr speed: a header can begin at most 3 bytes before a run's
    end, since its length field (>= 18) cannot be 4 zero bytes."""
    i = 0
    n = len(chunk)
    while i < stop:
        run = chunk.find(_ZERO_RUN, i, stop + len(_ZERO_RUN))
        end = stop if run < 0 else min(run, stop)
        for match in _PLAUSIBLE_HEADER.finditer(chunk, i, min(n, end + _MIN_MESSAGE)):
            if match.start() >= end:
                break
            yield match.start()
        if run < 0 or run >= stop:
            return
        rest = chunk[run:].lstrip(b"\0")
        i = max(run, n - len(rest) - 3)
        if not rest:
            return


class Log:
    def __init__(self, directory: str, config: LogConfig, clock: Callable[[], int],
                 name: str = "") -> None:
        """Open (recovering if needed) or create the log in ``directory``.

        ``clock`` returns wall-clock milliseconds; tests inject their own.
        """
        self.directory = directory
        self.config = config
        self.clock = clock
        self.name = name or directory
        os.makedirs(directory, exist_ok=True)
        self.segments: list[Segment] = []
        self.bases: list[int] = []
        self._pending: list = []          # message sets (bytes or memoryviews) not yet written
        self._pending_first_ts = -1
        self._pending_max_ts = -1
        self._pending_messages = 0
        self.unflushed_messages = 0
        self.oldest_unflushed_ms = 0       # clock time the oldest unflushed append arrived
        self.flush_in_progress = False
        self.deleted = False            # set by delete(): late timers leave it alone
        self.recovered_bytes_cut = 0
        self.quarantined: list[tuple[int, int]] = []
        self._quarantine_starts: list[int] = []
        self.checkpointed_high_watermark: int | None = None
        self._load()
        self.written_end = self.end_offset = self.segments[-1].end_offset
        self.flushed_end = self.end_offset
        self.recovery_point = self.end_offset
        self.high_watermark: int | None = None
        self.visible_end = self.flushed_end     # kept by _update_visible_end
        # The target a flush in flight may still expose: lowered by a
        # truncation while it runs (see complete_flush).
        self._flush_limit = self.end_offset
        if self.checkpointed_high_watermark is not None:
            self.checkpointed_high_watermark = min(max(self.checkpointed_high_watermark,
                                                       self.earliest_offset), self.end_offset)
        self.epochs = LeaderEpochCache(directory)
        # An entry past the recovered end (its messages were a torn tail)
        # means nothing; one starting exactly at the end is an epoch whose
        # leader appended nothing yet, and stays. Both calls write nothing
        # when nothing changes.
        self.epochs.truncate_from_end(self.end_offset + 1)
        self.epochs.truncate_from_start(self.earliest_offset)

    # ------------------------------------------------------------ start-up

    def _load(self) -> None:
        found = sorted(b for b in (parse_segment_file_name(n) for n in os.listdir(self.directory))
                       if b is not None)
        checkpoint = self._read_checkpoint()
        recovery_point = checkpoint.get("recovery_point", 0) if checkpoint else 0
        recorded = checkpoint.get("segments", {}) if checkpoint else {}
        hw = checkpoint.get("high_watermark") if checkpoint else None
        self.checkpointed_high_watermark = hw if type(hw) is int else None
        for start, end in (checkpoint.get("quarantined", []) if checkpoint else []):
            self._quarantine(start, end, None)
        now = self.clock()
        for i, base in enumerate(found):
            seg = Segment(self.directory, base, now)
            is_last = i == len(found) - 1
            if self.segments:
                previous = self.segments[-1]
                if previous.end_offset > base:
                    # The earlier segment runs past this one's base: bytes were
                    # added to a closed segment behind the broker's back (appends
                    # only ever go to the last one). Rescan it up to the base.
                    log.warning("recovery: segment %s (%d bytes) runs past the next segment's "
                                "base %d; rescanning it up to there", previous.path,
                                previous.size, base)
                    self._scan_segment(previous, 0, limit=base - previous.base_offset,
                                       is_last=False)
                if previous.end_offset < base:
                    # Bytes are missing (a segment cut short): the later
                    # segments are intact and stay; the hole is quarantined.
                    self._quarantine(previous.end_offset, base,
                                     f"segment {previous.path} ends at {previous.end_offset} "
                                     f"but the next one starts at {base}: "
                                     f"{base - previous.end_offset} bytes are missing")
            info = recorded.get(str(base))
            ts = info[:2] if info else None
            size = info[2] if info and len(info) > 2 else None
            if ts is not None:
                seg.note_timestamps(ts[0], ts[1])
            trusted = self._trusted_bytes(seg, recovery_point, size, is_last, ts is not None)
            if trusted < seg.size:
                self._scan_segment(seg, trusted, limit=seg.size, is_last=is_last)
            self.segments.append(seg)
            self.bases.append(base)
        if not self.segments:
            self.segments.append(Segment(self.directory, 0, now))
            self.bases.append(0)
        # Ranges no segment holds any more (deleted by hand, or cut by a
        # truncation whose checkpoint a crash lost) mean nothing.
        earliest = self.segments[0].base_offset
        self._drop_quarantine_below(earliest)
        self._drop_quarantine_from(self.segments[-1].end_offset)
        # From now on a crash must rescan: the checkpoint stays valid only for
        # bytes below its recovery point, which appends never touch.

    def _trusted_bytes(self, seg: Segment, recovery_point: int, recorded_size: int | None,
                       is_last: bool, timestamps_known: bool) -> int:
        """How many leading bytes of ``seg`` the checkpoint vouches for (they
        were fsync'ed and checked before): scanning starts there."""
        if not timestamps_known:
            return 0                   # unknown to the checkpoint: scan it all
        if recorded_size is not None:
            if seg.size < recorded_size:
                log.warning("recovery: %s is %d bytes but the checkpoint recorded %d; "
                            "rescanning it", seg.path, seg.size, recorded_size)
                return 0
            return recorded_size       # an active segment grows past its checkpoint
        if seg.end_offset <= recovery_point:
            if is_last and seg.end_offset < recovery_point:
                # the file ends below what was fsync'ed: it was cut behind our back
                log.warning("recovery: %s ends at %d, below the recovery point %d; "
                            "rescanning it", seg.path, seg.end_offset, recovery_point)
                return 0
            return seg.size
        return max(0, recovery_point - seg.base_offset)

    def _scan_segment(self, seg: Segment, start: int, limit: int, is_last: bool) -> None:
        """Check every message of ``seg`` from byte ``start`` (a known message
        boundary) to ``limit``: quarantine corrupt ranges that valid messages
        follow, cut a torn tail of the last segment, quarantine one of an
        earlier segment. Leaves ``seg.size == limit`` unless the tail was cut."""
        pos = start
        while pos < limit:
            pos = self._scan_valid(seg, pos, limit)
            if pos >= limit:
                break
            resync = self._resynchronise(seg, pos, limit)
            if resync is not None:
                self._quarantine(seg.base_offset + pos, seg.base_offset + resync,
                                 f"corrupt bytes in {seg.path} at {pos}..{resync}; valid "
                                 f"messages follow")
                pos = resync
                continue
            if is_last:
                log.warning("recovery: cut %d bytes of torn or corrupt tail from %s "
                            "(kept %d bytes)", seg.size - pos, seg.path, pos)
                self.recovered_bytes_cut += seg.size - pos
                seg.truncate(pos)
                seg.sync()
                return
            self._quarantine(seg.base_offset + pos, seg.base_offset + limit,
                             f"corrupt tail of {seg.path} at {pos}..{limit}, kept because "
                             f"later segments follow it")
            break
        if seg.size > limit:
            # bytes past ``limit`` belong to no offset (see _load); drop them
            log.warning("recovery: cut %d bytes from %s past the next segment's base",
                        seg.size - limit, seg.path)
            self.recovered_bytes_cut += seg.size - limit
            seg.truncate(limit)
        if start < seg.size:
            # The dead process may never have fsync'ed these bytes, and they
            # become visible (flushed_end = end) as soon as the log is open.
            seg.sync()
            log.info("recovery: scanned %d bytes of %s", seg.size - start, seg.path)

    def _scan_valid(self, seg: Segment, pos: int, limit: int) -> int:
        """The end of the run of valid messages starting at ``pos`` (<= limit),
        noting their timestamps."""
        while pos < limit:
            want = min(_SCAN_CHUNK, limit - pos)
            chunk = seg.read(pos, want)
            valid, _count, first_ts, max_ts = scan_valid_prefix(chunk)
            if valid == 0 and len(chunk) >= 4:
                # maybe one message larger than a chunk: read it whole
                need = 4 + _LENGTH.unpack_from(chunk, 0)[0]
                if want < need <= limit - pos:
                    valid, _count, first_ts, max_ts = scan_valid_prefix(seg.read(pos, need))
            if valid == 0:
                return pos
            seg.note_timestamps(first_ts, max_ts)
            pos += valid
        return pos

    def _resynchronise(self, seg: Segment, bad: int, limit: int) -> int | None:
        """The first position after ``bad`` (< limit) where a message with a
        good CRC starts, or None. Candidates come from a regex over the
        header's shape; each is confirmed by its CRC."""
        window = _SCAN_CHUNK
        pos = bad + 1
        while pos + _MIN_MESSAGE <= limit:
            chunk = seg.read(pos, min(window + _MIN_MESSAGE, limit - pos))
            for at in _header_candidates(chunk, min(window, len(chunk))):
                length = _LENGTH.unpack_from(chunk, at)[0]
                size = 4 + length
                if pos + at + size > limit:
                    continue
                body = chunk[at:at + size] if at + size <= len(chunk) else \
                    seg.read(pos + at, size)
                if scan_valid_prefix(body)[0] == size:
                    return pos + at
            pos += window
        return None

    # ------------------------------------------------------------ quarantine

    def _quarantine(self, start: int, end: int, reason: str | None) -> None:
        """Add [start, end) to the quarantined ranges (merging overlaps);
        ``reason`` is logged (None when it comes from the checkpoint)."""
        if end <= start:
            return
        if reason is not None:
            log.warning("recovery: quarantined bytes %d..%d (%d bytes) of %s: %s; consumers "
                        "get CORRUPT_MESSAGE there and go on from %d", start, end, end - start,
                        self.name, reason, end)
        ranges = [(s, e) for s, e in self.quarantined if e < start or s > end]
        merged_start = min([start] + [s for s, e in self.quarantined if not (e < start or s > end)])
        merged_end = max([end] + [e for s, e in self.quarantined if not (e < start or s > end)])
        ranges.append((merged_start, merged_end))
        ranges.sort()
        self.quarantined = ranges
        self._quarantine_starts = [s for s, _e in ranges]

    def _drop_quarantine_below(self, offset: int) -> None:
        kept = [(s, e) for s, e in self.quarantined if e > offset]
        if len(kept) != len(self.quarantined):
            self.quarantined = kept
            self._quarantine_starts = [s for s, _e in kept]

    def _drop_quarantine_from(self, offset: int) -> None:
        """Forget quarantined bytes at or past ``offset`` (the log's new end)."""
        kept = [(s, min(e, offset)) for s, e in self.quarantined if s < offset]
        if kept != self.quarantined:
            self.quarantined = kept
            self._quarantine_starts = [s for s, _e in kept]

    @property
    def quarantined_bytes(self) -> int:
        return sum(e - s for s, e in self.quarantined)

    def _quarantined_range_at(self, offset: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self._quarantine_starts, offset) - 1
        if i >= 0:
            start, end = self.quarantined[i]
            if offset < end:
                return start, end
        return None

    def _next_quarantine_start(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._quarantine_starts, offset)
        return self._quarantine_starts[i] if i < len(self._quarantine_starts) else None

    def _read_checkpoint(self) -> dict | None:
        path = os.path.join(self.directory, CHECKPOINT_FILE)
        try:
            with open(path) as f:
                data = json.load(f)
            if not isinstance(data.get("recovery_point"), int):
                raise ValueError("no recovery_point")
            return data
        except FileNotFoundError:
            return None
        except (ValueError, OSError, AttributeError) as exc:
            log.warning("ignoring unreadable %s: %s", path, exc)
            return None

    def write_checkpoint(self, sync_directory: bool = False) -> None:
        """Persist the recovery point (= flushed end), segment timestamps and
        the high watermark (when replicated). Call on the loop thread; the
        write itself is small and atomic (rename). Without ``sync_directory``
        a crash may leave the previous checkpoint, which vouches for less as
        the log grows; truncate_to and reset_to sync it, since the previous
        one describes bytes they threw away."""
        data = {"recovery_point": self.flushed_end,
                "segments": {str(s.base_offset): [s.first_timestamp, s.max_timestamp, s.size]
                             for s in self.segments if s.end_offset <= self.flushed_end},
                "quarantined": [list(r) for r in self.quarantined]}
        if self.high_watermark is not None:
            data["high_watermark"] = self.high_watermark
        write_json_atomically(os.path.join(self.directory, CHECKPOINT_FILE), data,
                              sync_directory)
        self.recovery_point = self.flushed_end
        self.checkpointed_high_watermark = self.high_watermark

    @property
    def checkpoint_due(self) -> bool:
        """Whether the checkpoint lags the flushed end or the high watermark."""
        return self.flushed_end != self.recovery_point or (
            self.high_watermark is not None
            and self.high_watermark != self.checkpointed_high_watermark)

    # ------------------------------------------------------------ appends

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def earliest_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return self.end_offset - self.earliest_offset

    def append(self, message_set: bytes, count: int, first_ts: int, max_ts: int,
               now: int | None = None) -> int:
        """Buffer an already validated message set; return its base offset.
        ``now`` (clock ms) may be passed by a caller appending many sets.

        Not in the file until ``write_pending()``, not visible until flushed.

        Raises StorageError when a roll is due and fails (writing the
        buffered appends, or creating the new segment file): then this set is
        not appended, and if the buffered ones could not be written they are
        lost too (``exc.lost_messages``/``lost_bytes``, offsets given back:
        ``end_offset == written_end``). The log stays usable."""
        size = len(message_set)
        active = self.segments[-1]
        active_size = self.end_offset - active.base_offset
        if now is None:
            now = self.clock()
        if active_size > 0 and (active_size + size > self.config.segment_bytes
                                or now - active.created_ms >= self.config.segment_ms):
            self.roll(now)
        offset = self.end_offset
        if not self._pending:
            self._pending_first_ts = first_ts
        if max_ts > self._pending_max_ts:
            self._pending_max_ts = max_ts
        self._pending.append(message_set)
        self._pending_messages += count
        self.end_offset = offset + size
        if self.unflushed_messages == 0:
            self.oldest_unflushed_ms = now
        self.unflushed_messages += count
        return offset

    def write_pending(self) -> None:
        """Write buffered appends to the active segment. On failure nothing
        of them stays (offsets are given back) and StorageError is raised."""
        if not self._pending:
            return
        active = self.segments[-1]
        try:
            active.write(self._pending)
        except StorageError as exc:
            exc.lost_messages = self._pending_messages
            exc.lost_bytes = self.end_offset - self.written_end
            self.end_offset = self.written_end
            self.unflushed_messages -= self._pending_messages
            raise
        finally:
            data_first, data_max = self._pending_first_ts, self._pending_max_ts
            self._pending = []
            self._pending_first_ts = self._pending_max_ts = -1
            self._pending_messages = 0
        active.note_timestamps(data_first, data_max)
        self.written_end = self.end_offset

    def roll(self, now: int | None = None) -> Segment:
        """Close the active segment for appends and start a new one at end_offset.
        An empty active segment is kept (returned as is): a second segment with
        the same base offset would share its file name."""
        self.write_pending()
        if self.segments[-1].size == 0:
            return self.segments[-1]
        try:
            seg = Segment(self.directory, self.end_offset, self.clock() if now is None else now)
        except OSError as exc:
            reason = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
            raise StorageError(f"cannot create a new segment in {self.directory}: {reason}",
                               exc.errno) from exc
        self.segments.append(seg)
        self.bases.append(seg.base_offset)
        return seg

    # ------------------------------------------------------------ flushing

    def needs_flush(self, now: int) -> bool:
        return self.unflushed_messages > 0 and not self.flush_in_progress and (
            self.unflushed_messages >= self.config.flush_messages
            or now - self.oldest_unflushed_ms >= self.config.flush_ms)

    def begin_flush(self) -> tuple[list[Segment], int]:
        """Write what is buffered and return the segments to fsync (pinned)
        and the offset that becomes visible once they are synced."""
        self.write_pending()
        target = self._flush_limit = self.written_end
        segs = [s for s in self.segments if s.end_offset > self.flushed_end]
        for s in segs:
            s.pin()
        self.flush_in_progress = True
        self.unflushed_messages = 0
        return segs, target

    def complete_flush(self, segments: list[Segment], target: int, ok: bool
                       ) -> list[tuple[Segment, int, int]]:
        """Unpin; on success advance ``flushed_end`` to ``target``. Returns the
        newly durable bytes as (segment, start, end) file positions.

        A ``truncate_to`` or ``reset_to`` during the flush lowered
        ``_flush_limit`` to its offset: the bytes there and beyond were cut
        and perhaps appended anew after the fsync started, so the target
        never passes it (nor, therefore, the written end)."""
        for s in segments:
            s.unpin()
        self.flush_in_progress = False
        durable: list[tuple[Segment, int, int]] = []
        if target > self._flush_limit:
            target = self._flush_limit
        if ok and target > self.flushed_end:
            for s in segments:
                start = max(self.flushed_end, s.base_offset)
                end = min(target, s.end_offset)
                if end > start:
                    durable.append((s, start - s.base_offset, end - s.base_offset))
            self.flushed_end = target
            self._update_visible_end()
        return durable

    def flush(self) -> None:
        """Synchronous flush (start-up, shutdown, tests)."""
        segs, target = self.begin_flush()
        try:
            for s in segs:
                s.sync()
        except OSError:
            self.complete_flush(segs, target, False)
            raise
        self.complete_flush(segs, target, True)

    # ------------------------------------------------------------ reads

    def _update_visible_end(self) -> None:
        """Call whenever flushed_end or high_watermark changes."""
        hw = self.high_watermark
        self.visible_end = self.flushed_end if hw is None or hw > self.flushed_end else hw

    def set_high_watermark(self, high_watermark: int | None) -> None:
        """Make the log replicated with this high watermark, clamped to
        [earliest, end_offset] (None: unreplicated again). The replication
        layer owns its rules (it may move it down, e.g. as a follower told a
        lower one); consumers then read only below ``visible_end``."""
        if high_watermark is not None:
            high_watermark = min(max(high_watermark, self.earliest_offset), self.end_offset)
        self.high_watermark = high_watermark
        self._update_visible_end()

    def locate(self, offset: int, max_bytes: int,
               upto: int | None = None) -> tuple[Segment, int, int]:
        """Where a read of up to ``max_bytes`` at ``offset`` lies: (segment,
        position in it, length). Never past the segment's end, nor past:

          * with ``upto`` None (a consumer): ``visible_end``. Offsets below the
            earliest raise OffsetOutOfRangeError, and so do offsets beyond the
            flushed end (unreplicated) or beyond the written end (replicated:
            between the high watermark and there, the read is 0 bytes);
          * with ``upto`` (a follower's replica fetch; the leader passes its
            written end): ``upto`` (at most the written end), out of range
            beyond ``upto``.

        The error's ``latest`` is the end the reader may read up to
        (visible_end, or upto): where a consumer that is out of range goes."""
        earliest = self.segments[0].base_offset
        if upto is None:
            visible_end = self.visible_end
            if offset < earliest or offset > (self.flushed_end if self.high_watermark is None
                                              else self.written_end):
                raise OffsetOutOfRangeError(offset, earliest, visible_end)
        else:
            if offset < earliest or offset > upto:
                raise OffsetOutOfRangeError(offset, earliest, upto)
            visible_end = upto if upto < self.written_end else self.written_end
        i = bisect.bisect_right(self.bases, offset) - 1
        seg = self.segments[i]
        position = offset - seg.base_offset
        if seg.end_offset < visible_end:
            visible_end = seg.end_offset
        if self.quarantined:
            bad = self._quarantined_range_at(offset)
            if bad is not None:
                raise CorruptRangeError(offset, bad[0], bad[1])
            next_bad = self._next_quarantine_start(offset)
            if next_bad is not None and next_bad < visible_end:
                visible_end = next_bad
        length = min(max_bytes, visible_end - offset)
        return seg, position, max(length, 0)

    def check_message_at(self, offset: int, max_message_bytes: int,
                         upto: int | None = None) -> bool:
        """Whether a whole, valid message (length <= ``max_message_bytes``,
        inside the visible part of its segment, good CRC) starts at
        ``offset``. The log has no index: this is how a read at an offset
        that is not a message boundary is told apart. One or two small preads.
        ``upto`` as for ``locate``."""
        seg, position, length = self.locate(offset, max_message_bytes, upto)
        if length < _MIN_MESSAGE:
            return False
        head = seg.read(position, min(length, 4096))
        size = 4 + _LENGTH.unpack_from(head, 0)[0]
        if size < _MIN_MESSAGE or size > min(length, max_message_bytes):
            return False
        body = head[:size] if size <= len(head) else seg.read(position, size)
        return scan_valid_prefix(body)[0] == size

    def corrupt_message_end(self, offset: int, max_message_bytes: int,
                            upto: int | None = None) -> int | None:
        """For an offset where ``check_message_at`` failed: if a damaged
        message sits there — its length is plausible and a valid message (or
        the visible end) follows it — the offset just past it; else None (the
        offset is not a message boundary). A random offset inside a message
        practically never lands on a length that leads to a valid message.
        ``upto`` as for ``locate``."""
        seg, position, length = self.locate(offset, max_message_bytes + _MIN_MESSAGE, upto)
        if length < _MIN_MESSAGE:
            return None
        size = 4 + _LENGTH.unpack_from(seg.read(position, 4), 0)[0]
        if size < _MIN_MESSAGE or size > max_message_bytes or size > length:
            return None
        after = offset + size
        if after == offset + length and length <= max_message_bytes:
            return after                      # the damaged message ends the visible data
        try:
            return after if self.check_message_at(after, max_message_bytes, upto) else None
        except (CorruptRangeError, OffsetOutOfRangeError):
            return None

    def read(self, offset: int, max_bytes: int, upto: int | None = None) -> bytes:
        """The visible bytes at ``offset`` (copying; the broker uses sendfile).
        ``upto`` as for ``locate``."""
        seg, position, length = self.locate(offset, max_bytes, upto)
        return seg.read(position, length) if length else b""

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """Kafka 0.7's getOffsetsBefore: base offsets of the segments whose
        first message is at or before ``time_ms``, newest first. A consumer
        seeking to a time starts at the first one and misses nothing after it."""
        out = [s.base_offset for s in reversed(self.segments)
               if 0 <= s.first_timestamp <= time_ms and s.base_offset < self.visible_end
               and self._quarantined_range_at(s.base_offset) is None]
        return out[:max_offsets]

    # ------------------------------------------------------------ retention

    def apply_retention(self, now: int) -> list[Segment]:
        """Delete closed segments wholly below ``visible_end`` (flushed, and
        below the high watermark when replicated: a segment a follower may
        still need stays) past retention.ms or beyond retention.bytes; return
        the ones deleted. The leader epochs then start at the new earliest."""
        deleted: list[Segment] = []
        cfg = self.config
        size = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            if oldest.end_offset > self.visible_end:
                break
            too_old = cfg.retention_ms > 0 and oldest.max_timestamp >= 0 and \
                now - oldest.max_timestamp > cfg.retention_ms
            too_big = cfg.retention_bytes >= 0 and size - oldest.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            self.segments.pop(0)
            self.bases.pop(0)
            self._drop_quarantine_below(self.segments[0].base_offset)
            size -= oldest.size
            oldest.delete()
            deleted.append(oldest)
            log.info("retention: deleted %s (%d bytes, %s)", oldest.path, oldest.size,
                     "age" if too_old else "size")
        if deleted:
            self.epochs.truncate_from_start(self.earliest_offset)
        return deleted

    # ------------------------------------------------------------ replication

    def truncate_to(self, offset: int) -> None:
        """Cut the log's tail so that ``end_offset == offset``: a follower
        dropping the messages its leader does not have.

        Preconditions (ValueError otherwise): earliest <= offset <= end_offset,
        and nothing buffered (call ``write_pending`` first). ``offset`` must be
        a message boundary: that is the caller's job (the log has no index to
        check it; the offsets come from the leader epochs).

        Segments starting at or past ``offset`` are deleted (the first one is
        kept, emptied, when ``offset`` is the earliest); the one holding
        ``offset`` is cut there and fsync'ed, and the deletions made durable
        (a crash must not bring the cut messages back). flushed_end, the
        recovery point and the high watermark go down to ``offset`` if they
        were past it; quarantined ranges and leader epochs past it go; the
        checkpoint is written.

        Pinned segments (a sendfile or an fsync in flight) stay safe: a
        deleted one is unlinked at once but its descriptor closes at the last
        unpin (Segment.delete), so the sendfile goes on reading the old bytes;
        a cut one keeps its bytes until the last unpin (Segment.cut), and the
        log rolls to a new segment at ``offset`` so that no append overwrites
        bytes being sent. A flush in flight exposes nothing past ``offset``
        (see complete_flush). The segment's timestamps are kept: its max may
        now be an overestimate, which only delays time retention."""
        if self._pending:
            raise ValueError(f"{self.name}: truncate_to with buffered appends; "
                             "call write_pending first")
        if not self.earliest_offset <= offset <= self.end_offset:
            raise ValueError(f"{self.name}: cannot truncate to {offset}: the log holds "
                             f"{self.earliest_offset}..{self.end_offset}")
        if offset == self.end_offset:
            return
        log.info("truncating %s from %d to %d (%d bytes)", self.name, self.end_offset, offset,
                 self.end_offset - offset)
        keep = max(bisect.bisect_left(self.bases, offset), 1)   # segments starting below offset
        for seg in self.segments[keep:]:
            seg.delete()
        del self.segments[keep:]
        del self.bases[keep:]
        last = self.segments[-1]
        if last.end_offset > offset:
            self._cut_last_segment(offset)
        elif last.end_offset < offset:
            # ``offset`` lies at the end of a quarantined gap (bytes missing
            # after ``last``): appends must land at ``offset``, so they go to
            # a new segment based there.
            self.segments.append(Segment(self.directory, offset, self.clock()))
            self.bases.append(offset)
        fsync_directory(self.directory)
        self.end_offset = self.written_end = offset
        self._lower_ends_to(offset)
        self._drop_quarantine_from(offset)
        if self.written_end <= self.flushed_end:
            self.unflushed_messages = 0
        # else: some cut-short count of unflushed messages remains; keeping
        # the old one only makes the next flush come sooner.
        self.epochs.truncate_from_end(offset)
        self.write_checkpoint(sync_directory=True)

    def _cut_last_segment(self, offset: int) -> None:
        """Make the last segment end at ``offset``, which lies inside it."""
        last = self.segments[-1]
        size = offset - last.base_offset
        if size == 0:
            # The first segment, emptied. A new file rather than a cut, so a
            # pinned one keeps its bytes for its readers (and a cut to 0 could
            # not roll: the new segment would have the same name).
            last.delete()
            self.segments[-1] = Segment(self.directory, last.base_offset, self.clock())
        elif last.cut(size):
            last.sync()
        else:
            # pinned: no more writes to it (see Segment.cut)
            seg = Segment(self.directory, offset, self.clock())
            self.segments.append(seg)
            self.bases.append(offset)

    def _lower_ends_to(self, offset: int) -> None:
        """flushed_end, recovery point, high watermark and a flush in flight
        never pass ``offset`` (truncate_to and reset_to)."""
        self.flushed_end = min(self.flushed_end, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self._flush_limit = min(self._flush_limit, offset)
        if self.high_watermark is not None:
            self.high_watermark = min(self.high_watermark, offset)
        self._update_visible_end()

    def reset_to(self, offset: int) -> None:
        """Throw the whole log away and start it empty at ``offset``: a
        replica whose log lies wholly below its leader's earliest offset, or a
        wiped disk re-replicating from a leader whose earliest offset is > 0.
        Buffered appends are dropped too. Every segment is deleted (pinned ones
        safely, as in truncate_to), one empty segment is created at ``offset``,
        every end (and a high watermark) becomes ``offset``, the quarantine and
        the leader epochs are cleared, and the checkpoint is written."""
        if offset < 0:
            raise ValueError(f"{self.name}: cannot reset to offset {offset}")
        log.info("resetting %s (%d..%d) to start empty at %d", self.name,
                 self.earliest_offset, self.end_offset, offset)
        self._pending = []
        self._pending_first_ts = self._pending_max_ts = -1
        self._pending_messages = 0
        for seg in self.segments:
            seg.delete()
        self.segments = [Segment(self.directory, offset, self.clock())]
        self.bases = [offset]
        fsync_directory(self.directory)
        self.end_offset = self.written_end = offset
        # Every end goes to ``offset``, up or down: an empty log is all durable.
        self.flushed_end = self.recovery_point = offset
        self._flush_limit = min(self._flush_limit, offset)
        if self.high_watermark is not None:
            self.high_watermark = offset
        self._update_visible_end()
        self.unflushed_messages = 0
        self.quarantined = []
        self._quarantine_starts = []
        self.epochs.clear()
        self.write_checkpoint(sync_directory=True)

    # ------------------------------------------------------------ shutdown

    def close(self, clean: bool = True) -> None:
        """Flush and checkpoint (when ``clean``), then close every segment."""
        if clean:
            self.flush()
            self.write_checkpoint()
        for s in self.segments:
            s.close()

    def delete(self) -> None:
        """Remove the log's files; the object must not be used afterwards
        (``deleted`` tells late callers, such as a flush timer, to stop)."""
        self.deleted = True
        for s in self.segments:
            s.delete()
        remove_file(os.path.join(self.directory, CHECKPOINT_FILE))
        self.epochs.clear()
        try:
            os.rmdir(self.directory)
        except OSError:
            pass
