"""A partition log: an ordered list of segments, addressed by byte offset.

On disk, one directory per partition::

    00000000000000000000.log     segments, named by base offset (see segment.py)
    00000000000001073741802.log
    recovery-point.json          {"recovery_point": X, "segments": {base: [first_ts, max_ts]}}

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
  * Segments tile [earliest, end_offset): segment i+1 starts where segment i
    ends. Only the last (active) segment takes appends; a message set never
    straddles two segments.
  * Retention deletes whole segments only, oldest first, never the active one
    and never one holding unflushed bytes.
  * ``recovery_point`` (persisted in recovery-point.json) <= flushed_end: every
    byte below it was fsync'ed and CRC-valid, so start-up scans only what lies
    beyond it. After a clean shutdown it equals end_offset and nothing is scanned.

Thread-safety: a Log is used by one thread (the broker's event loop). The
flusher thread only calls ``Segment.sync`` on segments handed to it by
``begin_flush`` (which pins them) and reports back through ``complete_flush``
on the loop thread.
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import struct
from typing import Callable

from broker.protocol.message import first_timestamp, scan_valid_prefix

from .errors import OffsetOutOfRangeError, StorageError
from .log_config import LogConfig
from .segment import Segment, parse_segment_file_name

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "recovery-point.json"
_SCAN_CHUNK = 8 << 20
_LENGTH = struct.Struct(">i")


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
        self.recovered_bytes_cut = 0
        self._load()
        self.written_end = self.end_offset = self.segments[-1].end_offset
        self.flushed_end = self.end_offset
        self.recovery_point = self.end_offset

    # ------------------------------------------------------------ start-up

    def _load(self) -> None:
        found = sorted(b for b in (parse_segment_file_name(n) for n in os.listdir(self.directory))
                       if b is not None)
        checkpoint = self._read_checkpoint()
        recovery_point = checkpoint.get("recovery_point", 0) if checkpoint else 0
        known_ts = checkpoint.get("segments", {}) if checkpoint else {}
        now = self.clock()
        corrupt_from: int | None = None
        for i, base in enumerate(found):
            if corrupt_from is not None:
                seg = Segment(self.directory, base, now)
                log.warning("recovery: deleting segment %s (%d bytes) after corruption in an "
                            "earlier segment of %s", seg.path, seg.size, self.name)
                self.recovered_bytes_cut += seg.size
                seg.delete()
                continue
            seg = Segment(self.directory, base, now)
            if self.segments and self.segments[-1].end_offset != base:
                # A gap or overlap: the earlier segment was cut short. Everything
                # from here on is unreachable; drop it as corrupt.
                corrupt_from = base
                log.warning("recovery: segment %s does not start where the previous one ends "
                            "(%d); deleting it and later segments", seg.path,
                            self.segments[-1].end_offset)
                self.recovered_bytes_cut += seg.size
                seg.delete()
                continue
            ts = known_ts.get(str(base))
            if seg.end_offset > recovery_point or ts is None:
                start = max(0, recovery_point - base) if ts is not None else 0
                if not self._recover_segment(seg, start, ts):
                    corrupt_from = base
            else:
                seg.note_timestamps(ts[0], ts[1])
            self.segments.append(seg)
            self.bases.append(base)
        if not self.segments:
            self.segments.append(Segment(self.directory, 0, now))
            self.bases.append(0)
        # From now on a crash must rescan: the checkpoint stays valid only for
        # bytes below its recovery point, which appends never touch.

    def _recover_segment(self, seg: Segment, start: int, ts: list[int] | None) -> bool:
        """Scan ``seg`` from byte ``start`` (a known message boundary), cut any
        torn or corrupt tail. Returns False if something was cut."""
        if ts is not None:
            seg.note_timestamps(ts[0], ts[1])
        pos = start
        size = seg.size
        while pos < size:
            want = min(_SCAN_CHUNK, size - pos)
            chunk = seg.read(pos, want)
            valid, _count, first_ts, max_ts = scan_valid_prefix(chunk)
            if valid == 0 and len(chunk) >= 4:
                # maybe one message larger than a chunk: read it whole
                need = 4 + _LENGTH.unpack_from(chunk, 0)[0]
                if want < need <= size - pos:
                    valid, _count, first_ts, max_ts = scan_valid_prefix(seg.read(pos, need))
            if valid == 0:
                break
            seg.note_timestamps(first_ts, max_ts)
            pos += valid
        if pos < size:
            log.warning("recovery: cut %d bytes of torn or corrupt tail from %s "
                        "(kept %d bytes)", size - pos, seg.path, pos)
            self.recovered_bytes_cut += size - pos
            seg.truncate(pos)
            seg.sync()
            return False
        if start < size:
            # The dead process may never have fsync'ed these bytes, and they
            # become visible (flushed_end = end) as soon as the log is open.
            seg.sync()
            log.info("recovery: scanned %d bytes of %s, all valid", size - start, seg.path)
        return True

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

    def write_checkpoint(self) -> None:
        """Persist the recovery point (= flushed end) and segment timestamps.
        Call on the loop thread; the write itself is small and atomic (rename)."""
        data = {"recovery_point": self.flushed_end,
                "segments": {str(s.base_offset): [s.first_timestamp, s.max_timestamp]
                             for s in self.segments if s.end_offset <= self.flushed_end}}
        path = os.path.join(self.directory, CHECKPOINT_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.recovery_point = self.flushed_end

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

        Not in the file until ``write_pending()``, not visible until flushed."""
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
        seg = Segment(self.directory, self.end_offset, self.clock() if now is None else now)
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
        target = self.written_end
        segs = [s for s in self.segments if s.end_offset > self.flushed_end]
        for s in segs:
            s.pin()
        self.flush_in_progress = True
        self.unflushed_messages = 0
        return segs, target

    def complete_flush(self, segments: list[Segment], target: int, ok: bool) -> None:
        for s in segments:
            s.unpin()
        self.flush_in_progress = False
        if ok and target > self.flushed_end:
            self.flushed_end = target

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

    def locate(self, offset: int, max_bytes: int) -> tuple[Segment, int, int]:
        """Where a read of up to ``max_bytes`` at ``offset`` lies: (segment,
        position in it, length). Never past ``flushed_end`` nor past the
        segment's end; length 0 at the flushed end. Offsets below the
        earliest or beyond the flushed end raise OffsetOutOfRangeError."""
        if offset < self.segments[0].base_offset or offset > self.flushed_end:
            raise OffsetOutOfRangeError(offset, self.segments[0].base_offset, self.flushed_end)
        i = bisect.bisect_right(self.bases, offset) - 1
        seg = self.segments[i]
        position = offset - seg.base_offset
        visible_end = min(seg.end_offset, self.flushed_end)
        length = min(max_bytes, visible_end - offset)
        return seg, position, max(length, 0)

    def read(self, offset: int, max_bytes: int) -> bytes:
        """The visible bytes at ``offset`` (copying; the broker uses sendfile)."""
        seg, position, length = self.locate(offset, max_bytes)
        return seg.read(position, length) if length else b""

    def offsets_before(self, time_ms: int, max_offsets: int) -> list[int]:
        """Kafka 0.7's getOffsetsBefore: base offsets of the segments whose
        first message is at or before ``time_ms``, newest first. A consumer
        seeking to a time starts at the first one and misses nothing after it."""
        out = [s.base_offset for s in reversed(self.segments)
               if 0 <= s.first_timestamp <= time_ms and s.base_offset < self.flushed_end]
        return out[:max_offsets]

    # ------------------------------------------------------------ retention

    def apply_retention(self, now: int) -> list[Segment]:
        """Delete closed, flushed segments past retention.ms or beyond
        retention.bytes; return the ones deleted."""
        deleted: list[Segment] = []
        cfg = self.config
        size = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            if oldest.end_offset > self.flushed_end:
                break
            too_old = cfg.retention_ms > 0 and oldest.max_timestamp >= 0 and \
                now - oldest.max_timestamp > cfg.retention_ms
            too_big = cfg.retention_bytes >= 0 and size - oldest.size >= cfg.retention_bytes
            if not (too_old or too_big):
                break
            self.segments.pop(0)
            self.bases.pop(0)
            size -= oldest.size
            oldest.delete()
            deleted.append(oldest)
            log.info("retention: deleted %s (%d bytes, %s)", oldest.path, oldest.size,
                     "age" if too_old else "size")
        return deleted

    # ------------------------------------------------------------ shutdown

    def close(self, clean: bool = True) -> None:
        """Flush and checkpoint (when ``clean``), then close every segment."""
        if clean:
            self.flush()
            self.write_checkpoint()
        for s in self.segments:
            s.close()

    def delete(self) -> None:
        for s in self.segments:
            s.delete()
        for name in (CHECKPOINT_FILE, CHECKPOINT_FILE + ".tmp"):
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.directory)
        except OSError:
            pass
