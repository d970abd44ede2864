"""The leader epochs of one partition log (Kafka's leader-epoch-checkpoint, KIP-101).

A replica that follows a new leader must cut the messages only it has (the
old leader's unreplicated tail) before fetching; truncating to its high
watermark loses acknowledged messages or keeps divergent ones. Instead it
asks the leader where the epoch of its own last message ends there, and cuts
at that offset. This cache is what both sides answer from: which leader
epoch appended which byte range of the log.

On disk, in the partition directory (next to the segments)::

    leader-epochs.json      {"epochs": [[epoch, start_offset], ...]}

Invariants:
  * epochs are strictly increasing, and so are start offsets;
  * the entry (e, s) means: the messages from byte offset s on, up to the
    next entry's start (or the log end), were appended by the leader of
    epoch e. Bytes before the first entry's start predate replication
    (no epoch is known for them);
  * the file is rewritten (tmp, fsync, rename, fsync of the directory) only
    when the entries change, and never created for a log that never had an
    epoch: an unreplicated topic leaves no file. In memory and on disk the
    entries agree: a change whose write fails is not made;
  * the Log keeps the entries inside itself: it calls ``truncate_from_end``
    when it cuts its tail and ``truncate_from_start`` when retention moves
    its earliest offset. An entry may start exactly at the log end (an epoch
    whose leader has appended nothing yet).

This module must never read or write the log's segments: it is told about
offsets, it does not look for them.

Thread-safety: none; used on the broker's event-loop thread only, like the
Log that owns it.
"""
from __future__ import annotations

import bisect
import json
import logging
import os

from .files import fsync_directory, remove_file, write_json_atomically

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epochs.json"

Entry = tuple[int, int]            # (epoch, start offset)


def _epoch_of(entry: Entry) -> int:
    return entry[0]


def _start_of(entry: Entry) -> int:
    return entry[1]


def _well_formed(entries: list[Entry]) -> bool:
    """Whether ``entries`` keep the invariants (both columns strictly increasing, >= 0)."""
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0 or s1 <= s0:
            return False
    return all(e >= 0 and s >= 0 for e, s in entries)


class LeaderEpochCache:
    """The (epoch, start offset) entries of one partition, persisted in
    ``<directory>/leader-epochs.json``."""

    def __init__(self, directory: str) -> None:
        """Load the file if there is one. An unreadable or malformed file is
        logged and ignored: the cache starts empty, so this replica answers
        OffsetsForLeaderEpoch as if it knew no epoch (found epoch -1) and, as
        a follower, truncates conservatively (to the leader's answer for an
        unknown epoch, at worst its high watermark) and re-fetches the rest."""
        self.path = os.path.join(directory, LEADER_EPOCH_FILE)
        self._entries: list[Entry] = self._load()

    def _load(self) -> list[Entry]:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s; starting with no leader epochs",
                        self.path, exc)
            return []
        raw = data.get("epochs") if isinstance(data, dict) else None
        if not isinstance(raw, list) or not all(
                isinstance(pair, list) and len(pair) == 2
                and all(type(x) is int for x in pair) for pair in raw):
            log.warning("ignoring malformed %s: %r; starting with no leader epochs",
                        self.path, data)
            return []
        entries = [(e, s) for e, s in raw]
        if not _well_formed(entries):
            log.warning("ignoring %s: epochs and start offsets must be non-negative and "
                        "strictly increasing, got %r; starting with no leader epochs",
                        self.path, raw)
            return []
        return entries

    def _replace(self, entries: list[Entry]) -> None:
        """Persist ``entries``, then make them the cache's (so a failed write
        changes nothing)."""
        write_json_atomically(self.path, {"epochs": [list(e) for e in entries]},
                              sync_directory=True)
        self._entries = entries

    # ------------------------------------------------------------ reading

    @property
    def entries(self) -> list[Entry]:
        """A copy of the (epoch, start offset) entries, oldest first."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch known, or -1."""
        return self._entries[-1][0] if self._entries else -1

    @property
    def latest_start(self) -> int:
        """Where the newest epoch starts, or -1."""
        return self._entries[-1][1] if self._entries else -1

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """The OffsetsForLeaderEpoch answer (KIP-101, with KIP-279's found
        epoch) from this replica's view: ``(found_epoch, end_offset)``, where
        ``found_epoch`` is the largest epoch here <= ``epoch`` (-1 if none) and
        ``end_offset`` is where the next larger epoch starts, or ``log_end``
        when there is none. So: no entries gives (-1, log_end); an ``epoch``
        below every entry gives (-1, the first entry's start). A follower
        whose last epoch is ``epoch`` keeps nothing at or past ``end_offset``."""
        entries = self._entries
        after = bisect.bisect_right(entries, epoch, key=_epoch_of)
        found = entries[after - 1][0] if after else -1
        end = entries[after][1] if after < len(entries) else log_end
        return found, end

    def overlapping(self, start: int, end: int) -> list[Entry]:
        """The entries covering any byte of [start, end): the one in force at
        ``start`` (if any) and every one starting before ``end``, as recorded
        (the first may start before ``start``). A leader sends these with the
        bytes so the follower can ``assign`` them (clamping the first start to
        where its copy of the bytes begins). Empty when ``end <= start``."""
        if end <= start:
            return []
        entries = self._entries
        first = max(bisect.bisect_right(entries, start, key=_start_of) - 1, 0)
        stop = bisect.bisect_left(entries, end, key=_start_of)
        return entries[first:stop]

    # ------------------------------------------------------------ changes

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that epoch ``epoch`` starts at ``start_offset``.

        An epoch <= the latest one is already known: nothing happens. A start
        before the latest epoch's start is a bug (ValueError): an epoch cannot
        begin before its predecessor. The same start as the latest epoch's
        means that epoch appended nothing: the new one replaces it."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"a leader epoch and its start must be >= 0, got "
                             f"({epoch}, {start_offset})")
        if epoch <= self.latest_epoch:
            return
        if start_offset < self.latest_start:
            raise ValueError(f"{self.path}: epoch {epoch} cannot start at {start_offset}, "
                             f"before epoch {self.latest_epoch} (at {self.latest_start})")
        entries = list(self._entries)
        if entries and entries[-1][1] == start_offset:
            entries.pop()
        entries.append((epoch, start_offset))
        self._replace(entries)

    def truncate_from_end(self, offset: int) -> None:
        """The log was cut to end at ``offset``: forget every epoch starting
        at or after it."""
        keep = bisect.bisect_left(self._entries, offset, key=_start_of)
        if keep < len(self._entries):
            self._replace(self._entries[:keep])

    def truncate_from_start(self, offset: int) -> None:
        """The log's earliest offset moved up to ``offset`` (retention):
        forget the epochs wholly below it; the one in force at ``offset``
        stays, starting at ``offset``."""
        in_force = bisect.bisect_right(self._entries, offset, key=_start_of) - 1
        if in_force < 0 or (in_force == 0 and self._entries[0][1] == offset):
            return
        epoch = self._entries[in_force][0]
        self._replace([(epoch, offset)] + self._entries[in_force + 1:])

    def clear(self) -> None:
        """Forget every epoch and remove the file (the log was thrown away)."""
        self._entries = []
        if remove_file(self.path):
            fsync_directory(os.path.dirname(self.path))

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path!r}, {self._entries})"
