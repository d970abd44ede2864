"""Burrow's rules (broker/lag/evaluator.py) as tables: one row per
window of commits, the lag now, the time now, and the status it must give.
The cases are Burrow's documented ones (caught up, rewind, stopped,
stalled, lag growing, catching up) and the edges between them."""
from __future__ import annotations

import pytest

from broker.lag.evaluator import (Commit, PartitionStatus, Status, Thresholds,
                                      evaluate, group_status, stop_threshold_ms)

T = Thresholds(window_size=5, stop_min_ms=10_000, stop_intervals=3.0)


def commits(*rows: tuple[int, int, int]) -> list[Commit]:
    """(offset, seconds, lag) rows."""
    return [Commit(offset, seconds * 1000, lag) for offset, seconds, lag in rows]


STEADY = commits((100, 0, 50), (200, 1, 60), (300, 2, 40), (400, 3, 70), (500, 4, 30))

CASES = [
    # name, window, lag now, now (s), expected
    ("caught up now", STEADY, 0, 5, Status.OK),
    ("lag was zero at a commit", commits((100, 0, 5), (200, 1, 0), (300, 2, 10), (400, 3, 20),
                                         (500, 4, 30)), 40, 5, Status.OK),
    ("lag zero wins over a rewind", commits((500, 0, 0), (100, 1, 10)), 10, 2, Status.OK),
    ("progressing, lag up and down", STEADY, 30, 5, Status.OK),
    ("catching up", commits((100, 0, 500), (200, 1, 400), (300, 2, 300), (400, 3, 200),
                            (500, 4, 100)), 90, 5, Status.OK),
    ("rewind", commits((100, 0, 50), (200, 1, 50), (150, 2, 100)), 100, 3, Status.REWIND),
    ("rewind beats stop", commits((100, 0, 50), (50, 1, 100)), 100, 600, Status.REWIND),
    ("stopped: silent past the minimum", STEADY, 30, 4 + 11, Status.STOP),
    ("not yet stopped: just under the minimum", STEADY, 30, 4 + 9, Status.OK),
    ("slow committer: threshold is 3 median gaps",
     commits((100, 0, 10), (200, 60, 10), (300, 120, 10)), 10, 120 + 170, Status.OK),
    ("slow committer: stopped past 3 median gaps",
     commits((100, 0, 10), (200, 60, 10), (300, 120, 10)), 10, 120 + 190, Status.STOP),
    ("stalled: full window, one offset, behind",
     commits((100, 0, 10), (100, 1, 20), (100, 2, 30), (100, 3, 40), (100, 4, 50)), 50, 5,
     Status.STALL),
    ("not stalled while the window is not full",
     commits((100, 0, 10), (100, 1, 20), (100, 2, 30)), 30, 3, Status.OK),
    ("stop beats stall",
     commits((100, 0, 10), (100, 1, 20), (100, 2, 30), (100, 3, 40), (100, 4, 50)), 50, 60,
     Status.STOP),
    ("lag growing across a full window",
     commits((100, 0, 10), (200, 1, 20), (300, 2, 20), (400, 3, 35), (500, 4, 50)), 60, 5,
     Status.WARN),
    ("lag flat across the window is not a warning",
     commits((100, 0, 20), (200, 1, 20), (300, 2, 20), (400, 3, 20), (500, 4, 20)), 20, 5,
     Status.OK),
    ("lag dipped once: not a warning",
     commits((100, 0, 10), (200, 1, 30), (300, 2, 25), (400, 3, 35), (500, 4, 50)), 60, 5,
     Status.OK),
    ("growing but the window is not full", commits((100, 0, 10), (200, 1, 20), (300, 2, 30)),
     40, 3, Status.OK),
    ("only the last window_size commits count",
     commits((900, 0, 0), (100, 1, 10), (200, 2, 20), (300, 3, 30), (400, 4, 40),
             (500, 5, 50)), 60, 6, Status.WARN),
]


@pytest.mark.parametrize("name, window, lag, now_s, expected", CASES, ids=[c[0] for c in CASES])
def test_rules(name, window, lag, now_s, expected):
    assert evaluate(window, lag, now_s * 1000, T) is expected


@pytest.mark.parametrize("first_seen_s, now_s, lag, expected", [
    (0, 5, 100, Status.OK),        # behind, never committed, seen for 5 s
    (0, 11, 100, Status.STOP),     # ... for longer than stop_min_ms
    (0, 60, 0, Status.OK),         # never committed, nothing to consume
    (None, 60, 100, Status.OK),    # never seen before: no verdict yet
])
def test_a_partition_nobody_ever_committed(first_seen_s, now_s, lag, expected):
    first = None if first_seen_s is None else first_seen_s * 1000
    assert evaluate([], lag, now_s * 1000, T, first_seen_ms=first) is expected


def test_the_stop_threshold():
    assert stop_threshold_ms([], T) == 10_000
    assert stop_threshold_ms(STEADY, T) == 10_000            # 1 s gaps: the minimum
    assert stop_threshold_ms(commits((0, 0, 1), (0, 60, 1), (0, 130, 1)), T) == 195_000


def test_thresholds_are_checked():
    with pytest.raises(ValueError):
        Thresholds(window_size=1)
    with pytest.raises(ValueError):
        Thresholds(stop_min_ms=0)


def _p(bp: str, status: Status, lag: int) -> PartitionStatus:
    return PartitionStatus("t", bp, status, 0, lag, lag, 0.0, None, False)


@pytest.mark.parametrize("parts, worst, behind", [
    ([], Status.OK, None),
    ([_p("0-0", Status.OK, 0), _p("0-1", Status.WARN, 5)], Status.WARN, "0-1"),
    ([_p("0-0", Status.STOP, 10), _p("0-1", Status.WARN, 500)], Status.STOP, "0-1"),
    ([_p("0-0", Status.REWIND, 1), _p("0-1", Status.STALL, 1), _p("1-0", Status.OK, 2)],
     Status.REWIND, "1-0"),
])
def test_a_group_is_its_worst_partition(parts, worst, behind):
    status, most = group_status(parts)
    assert status is worst
    assert (most.partition if most else None) == behind
