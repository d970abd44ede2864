"""One rule for "is this complete?" (issue 26, point 1): a window that lost
messages fails, copies are reported but never block, anything undecided
waits. Every state combination, through every place that answers: the rule
itself (audit/compare.outcome), the warehouse gate (audit/gate.py), the
service's /api/completeness (audit/web.py), ``python -m audit report``'s exit
status (audit/report.has_losses) and the DAG's report step (audit/remote.py).
Before, compare.is_complete accepted only ``complete``, the gate let
``duplicated`` pass, and /api/completeness said ``lost: true`` for an hour
whose only fault was a duplicated window."""
from __future__ import annotations

import itertools

import pytest

from audit import compare, gate, report, web
from audit.compare import STATES, Verdict
from audit.remote import Report

HOUR = 1_800_000_000_000 - 1_800_000_000_000 % 3_600_000
WINDOW = 600_000
NOW = HOUR + 5 * 3_600_000


def verdict(state: str, begin: int, tier: str = "cluster", cluster: str = "analysis") -> Verdict:
    missing = 1 if state in ("lost", "lost_and_duplicated") else 0
    duplicated = 1 if state in ("duplicated", "lost_and_duplicated") else 0
    return Verdict("page_views", begin, begin + WINDOW, tier, cluster, cluster, state, 10,
                   10 - missing + duplicated, None, missing, duplicated, True, 100.0, True,
                   0, 0, 100, -1, -1, -1)


def rule(states) -> str:
    """The rule, written out once more for the table."""
    if any(s in ("lost", "lost_and_duplicated") for s in states):
        return "lost"
    if any(s in ("pending", "no_reference") for s in states):
        return "waiting"
    return "ready"


class Service:
    """What web.completeness asks of the audit service."""

    def __init__(self, verdicts: list[Verdict]) -> None:
        self._verdicts = verdicts

    def verdicts(self, topic, begin, end, tier=None):
        return [v for v in self._verdicts if begin <= v.window_begin_ms < end
                and (tier is None or v.tier == tier)]


@pytest.mark.parametrize("first, second", list(itertools.product(STATES, repeat=2)))
def test_every_place_applies_the_one_rule(first, second):
    want = rule([first, second])
    assert compare.outcome([first, second]) == want

    # two tiers of one window (dc-a's cluster, the mirror), the producers complete
    across = [verdict("complete", HOUR, "producer", "dc-a"),
              verdict(first, HOUR, "cluster", "dc-a"), verdict(second, HOUR, "mirror", "dc-a")]
    answer = web.completeness(Service(across), {"topic": "page_views", "window": str(HOUR)})
    assert answer["outcome"] == want
    assert answer["complete"] is (want == "ready") and answer["lost"] is (want == "lost")
    assert compare.is_complete(across) is (want == "ready")
    assert report.has_losses(across) is (want == "lost")
    assert bool(Report(b"", {"verdicts": [v.to_json() for v in across],
                             "summary": {}}).losses) is (want == "lost")

    # two windows of the hour at the gate's tier
    windows = [verdict("complete", HOUR, "producer", "dc-a"),
               verdict("complete", HOUR + WINDOW, "producer", "dc-a"),
               verdict(first, HOUR), verdict(second, HOUR + WINDOW)]
    check = gate.check_hour([v.to_json() for v in windows], HOUR, NOW, 60_000)
    assert check.state == want, check.lines()


def test_nothing_to_judge_waits():
    assert compare.outcome([]) == "waiting"
    assert not compare.is_complete([])
