"""audit/gate.py: when is an hour ready to load, and the row-count check."""
from __future__ import annotations

import pytest

from audit.gate import LOST, READY, WAITING, check_hour, shortfalls

HOUR = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000
W = 600_000
GRACE = 60_000
LATE = HOUR + 10 * 3_600_000          # long after the hour and its grace


def v(topic, window, tier, state, produced=100, count=100, missing=0, duplicated=0,
      cluster="analysis"):
    return {"topic": topic, "window_begin_ms": HOUR + window * W, "tier": tier,
            "cluster": cluster if tier != "producer" else "dc-a", "state": state,
            "produced": produced, "count": count, "missing": missing,
            "duplicated": duplicated}


def producer(topic, window, produced=100):
    return v(topic, window, "producer", "complete", produced, produced)


@pytest.mark.parametrize("tier_states, expected", [
    (["complete", "complete"], READY),
    (["complete", "duplicated"], READY),           # at-least-once copies: loaded, not missing
    (["complete", "pending"], WAITING),
    (["complete", None], WAITING),                 # the tier has not reported window 1
    (["lost", "complete"], LOST),
    (["lost_and_duplicated", "pending"], LOST),
    (["no_reference", "complete"], WAITING),
])
def test_states_per_window_decide_the_hour(tier_states, expected):
    verdicts = [producer("pv", 0), producer("pv", 1)]
    for window, state in enumerate(tier_states):
        if state is not None:
            verdicts.append(v("pv", window, "cluster", state, missing=5 if "lost" in state
                              else 0, count=95 if "lost" in state else 100))
    check = check_hour(verdicts, HOUR, LATE, GRACE)
    assert check.state == expected
    assert check.topics["pv"].produced == 200


def test_other_tiers_clusters_and_hours_do_not_count():
    verdicts = [producer("pv", 0), v("pv", 0, "cluster", "complete"),
                v("pv", 0, "cluster", "lost", cluster="dc-a", missing=3),
                v("pv", 0, "mirror", "lost", missing=3),
                producer("pv", 6), v("pv", 6, "cluster", "lost", missing=50)]   # next hour
    check = check_hour(verdicts, HOUR, LATE, GRACE)
    assert check.state == READY and check.topics["pv"].windows == 1
    assert check_hour(verdicts, HOUR, LATE, GRACE, tier="mirror").state == LOST


def test_numbers_and_lost_windows_are_in_the_lines():
    verdicts = [producer("pv", 0, 1000), v("pv", 0, "cluster", "lost", 1000, 993, missing=7),
                producer("search", 2, 10), v("search", 2, "cluster", "complete", 10, 10)]
    check = check_hour(verdicts, HOUR, LATE, GRACE)
    assert check.state == LOST
    text = "\n".join(check.lines())
    assert "pv: lost; produced 1,000, counted 993 at the tier, missing 7" in text
    assert "search: ready" in text
    assert check.produced() == {"pv": 1000, "search": 10}


def test_a_whitelist_predicate_limits_the_topics():
    verdicts = [producer("pv", 0), v("pv", 0, "cluster", "complete"),
                producer("other", 0), v("other", 0, "cluster", "lost", missing=1)]
    assert check_hour(verdicts, HOUR, LATE, GRACE, topics=lambda t: t == "pv").state == READY


def test_an_empty_hour_is_ready_only_after_the_grace():
    assert check_hour([], HOUR, HOUR + 3_600_000 + GRACE - 1, GRACE).state == WAITING
    assert check_hour([], HOUR, HOUR + 3_600_000 + GRACE, GRACE).state == READY
    with pytest.raises(ValueError):
        check_hour([], HOUR + 1, LATE, GRACE)


def test_shortfalls_name_the_topics_with_fewer_rows():
    found = shortfalls({"pv": 100, "search": 10, "login": 5}, {"pv": 103, "search": 9})
    assert [(s.topic, s.produced, s.loaded) for s in found] == [("login", 5, 0),
                                                                ("search", 10, 9)]
    assert found[0].line() == "login: 0 rows loaded, 5 produced (5 short)"
