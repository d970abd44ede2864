"""A consumer group's health per partition, by Burrow's rules: a pure
function of a window of the group's recent commits and the lag now.

No I/O and no clock of its own: the caller (broker/lag/monitor.py)
collects the commits (a ZooKeeper offset node's value and modification
time) and the log end offsets, and passes ``now_ms``. So every rule is
tested with tables (tests/client/test_lag_evaluator.py).

A window holds a partition's last ``window_size`` commits, oldest first,
each with the committed offset, its time, and the lag (bytes from the
committed offset to the log end) at that time. The rules, in the order they
are checked (the first that applies decides):

1. **OK** — the lag now is 0, or was 0 at some commit in the window: the
   consumer has been caught up recently; nothing else matters.
2. **REWIND** — a commit in the window is lower than the one before it:
   someone moved the group back (a reset, a restore from an old commit).
3. **STOP** — no commit for longer than the stop threshold while lag > 0:
   the consumer is gone (dead, partitions unowned) or hung before it could
   commit. The threshold is ``max(stop_min_ms, stop_intervals x`` the median
   time between the window's commits``)``, so a group that commits every
   minute is not called stopped after 10 s, and one that commits every
   second is, after ``stop_min_ms``.
4. **STALL** — commits keep arriving (the window is full) but the offset
   never moved across it, while lag > 0: the consumer is alive and stuck.
5. **WARN** — the window is full, lag > 0, and the lag never went down
   from one commit to the next and is higher at the end than at the start:
   the consumer is slower than the producers.
6. **OK** otherwise (behind, but catching up), and also while the window is
   not yet full (too early to judge a trend; STOP and REWIND still apply).

A partition with lag > 0 and no commit at all: STOP once it has been seen
that way for longer than ``stop_min_ms`` (nobody has ever consumed it),
else OK.

A group's status is its worst partition's (OK < WARN < STALL < STOP <
REWIND, Burrow's severity order with its ERR folded into the three), and
the partition most behind (bytes) is named beside it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Sequence


class Status(IntEnum):
    """Severity order: a group is as bad as its worst partition."""
    OK = 0
    WARN = 1
    STALL = 2
    STOP = 3
    REWIND = 4


@dataclass(frozen=True)
class Commit:
    offset: int              # the committed offset (next to consume)
    timestamp_ms: int        # when it was committed (the ZooKeeper node's mtime)
    lag: int                 # log end - offset, in bytes, when it was seen
    observed_ms: int | None = None   # when the monitor first saw it (Burrow's observedAt)


@dataclass(frozen=True)
class Thresholds:
    window_size: int = 10
    """Commits kept per partition (Burrow's ``intervals``)."""
    stop_min_ms: int = 10_000
    """No commit for this long while behind is STOP, at the least."""
    stop_intervals: float = 3.0
    """...or for this many times the window's median time between commits."""

    def __post_init__(self) -> None:
        if self.window_size < 2 or self.stop_min_ms <= 0 or self.stop_intervals <= 0:
            raise ValueError("window_size >= 2, stop_min_ms > 0 and stop_intervals > 0")


def stop_threshold_ms(window: Sequence[Commit], thresholds: Thresholds) -> float:
    """How long without a commit (while behind) makes a partition STOP."""
    gaps = [b.timestamp_ms - a.timestamp_ms for a, b in zip(window, window[1:])]
    typical = statistics.median(gaps) if gaps else 0
    return max(thresholds.stop_min_ms, thresholds.stop_intervals * typical)


def lag_was_zero(window: Sequence[Commit], lag_now: int) -> bool:
    """Rule 1: caught up now or at some commit of the window."""
    return lag_now == 0 or any(c.lag == 0 for c in window)


def rewound(window: Sequence[Commit]) -> bool:
    """Rule 2: a commit lower than the one before it."""
    return any(b.offset < a.offset for a, b in zip(window, window[1:]))


def stopped(window: Sequence[Commit], now_ms: int, thresholds: Thresholds,
            first_seen_ms: int | None = None) -> bool:
    """Rule 3: silent for longer than the stop threshold (lag > 0 is
    checked by the caller)."""
    if not window:
        return first_seen_ms is not None and now_ms - first_seen_ms > thresholds.stop_min_ms
    return now_ms - window[-1].timestamp_ms > stop_threshold_ms(window, thresholds)


def stalled(window: Sequence[Commit], thresholds: Thresholds) -> bool:
    """Rule 4: a full window of commits that all name one offset."""
    return len(window) >= thresholds.window_size and \
        all(c.offset == window[0].offset for c in window)


def falling_behind(window: Sequence[Commit], thresholds: Thresholds) -> bool:
    """Rule 5: over a full window the lag never decreased, and grew."""
    return len(window) >= thresholds.window_size and \
        all(b.lag >= a.lag for a, b in zip(window, window[1:])) and \
        window[-1].lag > window[0].lag


def evaluate(window: Sequence[Commit], lag_now: int, now_ms: int,
             thresholds: Thresholds = Thresholds(), first_seen_ms: int | None = None) -> Status:
    """A partition's status (the rules above, in order). ``window``: its
    last commits, oldest first; ``first_seen_ms``: when the partition was
    first seen without any commit (for rule 3 with an empty window)."""
    window = list(window)[-thresholds.window_size:]
    if lag_was_zero(window, lag_now):
        return Status.OK
    if rewound(window):
        return Status.REWIND
    if stopped(window, now_ms, thresholds, first_seen_ms):
        return Status.STOP
    if stalled(window, thresholds):
        return Status.STALL
    if falling_behind(window, thresholds):
        return Status.WARN
    return Status.OK


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: str               # broker-partition "b-p"
    status: Status
    committed: int | None
    log_end: int | None
    lag_bytes: int | None
    lag_seconds: float | None    # age of the next message to consume; 0 when caught up
    owner: str | None            # the consumer id that owns it in ZooKeeper
    owner_alive: bool            # the owner is a registered member of the group
    last_commit_ms: int | None = None
    start: Commit | None = None  # the oldest commit of the window (Burrow's "start")
    end: Commit | None = None    # the newest (Burrow's "end")
    complete: float = 0.0        # how full the window is: commits kept / window_size


def group_status(partitions: Iterable[PartitionStatus]) -> tuple[Status, PartitionStatus | None]:
    """The worst partition's status, and the partition most behind (bytes)."""
    parts = list(partitions)
    if not parts:
        return Status.OK, None
    worst = max(p.status for p in parts)
    most_behind = max(parts, key=lambda p: (p.lag_bytes or 0, p.status))
    return Status(worst), most_behind
