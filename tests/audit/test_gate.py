"""audit/gate.py: when is an hour ready to load, and the row-count check."""
from __future__ import annotations

import pytest

from audit.gate import LOST, READY, WAITING, check_hour, producer_references, shortfalls

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


W0, W1 = HOUR, HOUR + 600_000


@pytest.mark.parametrize("loaded, found", [
    # (rows, distinct ids, their checksum) per window; the producers: 100 ids
    # summing to 7000 in W0, 10 summing to 70 in W1
    ({W0: (100, 100, 7000), W1: (10, 10, 70)}, None),                 # every id once
    ({W0: (103, 100, 7000), W1: (12, 10, 70)}, None),                 # copies only
    ({W0: (97, 97, 6000), W1: (10, 10, 70)}, ("pv", 3, 0, True, [W0])),    # 3 lost
    ({W0: (100, 97, 6000), W1: (10, 10, 70)}, ("pv", 3, 3, True, [W0])),   # 3 lost, 3 copies
    # a loss hidden under copies: as many distinct ids as produced, not the same
    ({W0: (104, 100, 6999), W1: (10, 10, 70)}, ("pv", 1, 4, False, [W0])),
    ({W0: (100, 100, 7000)}, ("pv", 10, 0, True, [W1])),              # a window not loaded
])
def test_shortfalls_count_missing_ids_window_by_window(loaded, found):
    reference = {"pv": {W0: (100, 7000), W1: (10, 70)}}
    short = shortfalls(reference, {"pv": loaded})
    if found is None:
        assert short == []
        return
    [s] = short
    assert (s.topic, s.missing, s.duplicated, s.exact, s.windows) == found
    assert "missing" in s.line() and ("at least" in s.line()) == (not s.exact)


def test_producer_references_sum_every_producer_of_a_window():
    verdicts = [
        {"tier": "producer", "topic": "pv", "window_begin_ms": W0, "produced": 5,
         "checksum": (1 << 64) - 1},
        {"tier": "producer", "topic": "pv", "window_begin_ms": W0, "produced": 3, "checksum": 4},
        {"tier": "cluster", "topic": "pv", "window_begin_ms": W0, "produced": 8, "checksum": 9},
        {"tier": "producer", "topic": "pv", "window_begin_ms": HOUR + 3_600_000,
         "produced": 1, "checksum": 1},                                  # the next hour
    ]
    assert producer_references(verdicts, HOUR) == {"pv": {W0: (8, 3)}}
