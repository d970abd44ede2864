"""The comparison of tiers with the producers: each state, including the
case counts alone call complete (as many lost as duplicated)."""
from __future__ import annotations

import pytest

from audit.compare import compare, is_complete, summary
from audit.store import TierTotals
from audit.tally import id_hash

W = 600_000
BEGIN = 1_800_000_000_000 - 1_800_000_000_000 % W
LATER = BEGIN + W + 3_600_000          # long after the window and its grace


def ids(*numbers: int) -> list[bytes]:
    return [n.to_bytes(16, "big") for n in numbers]


def row(tier, cluster, id_list, unique=None, dc=None) -> TierTotals:
    return TierTotals("t", BEGIN, BEGIN + W, tier, dc or cluster, cluster, len(id_list),
                      len(id_list) * 100, 0, 0, sum(map(id_hash, id_list)) % 2 ** 64,
                      unique, 1, [len(id_list), 0], [1000])


PRODUCED = ids(*range(100))


def verdict_of(rows, now=LATER, grace=60_000, tier="cluster"):
    return [v for v in compare(rows, now, grace) if v.tier == tier]


def test_complete():
    (v,) = verdict_of([row("producer", "dc-a", PRODUCED), row("cluster", "dc-a", PRODUCED)])
    assert (v.state, v.missing, v.duplicated, v.completeness) == ("complete", 0, 0, 100.0)


def test_lost_and_duplicated_without_ids_counts_are_equal_but_checksums_differ():
    seen = PRODUCED[5:] + PRODUCED[:5][:0] + PRODUCED[10:15]   # 5 lost, 5 twice
    assert len(seen) == len(PRODUCED)
    (v,) = verdict_of([row("producer", "dc-a", PRODUCED), row("cluster", "dc-a", seen)])
    assert v.state == "lost_and_duplicated" and not v.checksum_matches and not v.exact


def test_exact_numbers_where_the_tier_kept_ids():
    seen = PRODUCED[5:] + PRODUCED[10:15]
    (v,) = verdict_of([row("producer", "dc-a", PRODUCED),
                       row("cluster", "dc-a", seen, unique=95)])
    assert (v.state, v.missing, v.duplicated, v.exact) == ("lost_and_duplicated", 5, 5, True)
    assert v.completeness == 95.0


@pytest.mark.parametrize("seen, unique, state, missing, dups", [
    (PRODUCED[:93], None, "lost", 7, 0),
    (PRODUCED[:93], 93, "lost", 7, 0),
    (PRODUCED + PRODUCED[:4], None, "duplicated", 0, 4),
    (PRODUCED + PRODUCED[:4], 100, "duplicated", 0, 4),
])
def test_lost_or_duplicated(seen, unique, state, missing, dups):
    (v,) = verdict_of([row("producer", "dc-a", PRODUCED), row("cluster", "dc-a", seen, unique)])
    assert (v.state, v.missing, v.duplicated) == (state, missing, dups)


def test_pending_within_the_grace_period_then_lost():
    rows = [row("producer", "dc-a", PRODUCED), row("cluster", "dc-a", PRODUCED[:50])]
    assert verdict_of(rows, now=BEGIN + W + 10_000, grace=60_000)[0].state == "pending"
    assert verdict_of(rows, now=BEGIN + W + 60_000, grace=60_000)[0].state == "lost"


def test_each_cluster_against_its_own_producers_and_analysis_against_all():
    a, b = ids(*range(10)), ids(*range(100, 130))
    rows = [row("producer", "dc-a", a), row("producer", "dc-b", b),
            row("cluster", "dc-a", a), row("cluster", "dc-b", b[:-1]),
            row("cluster", "analysis", a + b), row("mirror", "dc-b", b, dc="analysis")]
    got = {(v.tier, v.cluster): (v.state, v.produced) for v in compare(rows, LATER, 0)}
    assert got == {("producer", "dc-a"): ("complete", 10), ("producer", "dc-b"): ("complete", 30),
                   ("cluster", "dc-a"): ("complete", 10), ("cluster", "dc-b"): ("lost", 30),
                   ("cluster", "analysis"): ("complete", 40), ("mirror", "dc-b"): ("complete", 30)}


def test_a_tier_that_reported_nothing_for_a_window_is_a_loss():
    other = TierTotals("t", BEGIN - W, BEGIN, "cluster", "dc-a", "dc-a", 1, 1, 0, 0,
                       id_hash(ids(7)[0]), None, 1, [], [])
    producer_earlier = TierTotals("t", BEGIN - W, BEGIN, "producer", "dc-a", "dc-a", 1, 1, 0, 0,
                                  id_hash(ids(7)[0]), None, 1, [], [])
    verdicts = compare([other, producer_earlier, row("producer", "dc-a", PRODUCED)], LATER, 0)
    late = [v for v in verdicts if v.window_begin_ms == BEGIN and v.tier == "cluster"]
    assert [(v.state, v.count, v.missing) for v in late] == [("lost", 0, 100)]
    assert summary(verdicts)["lost"] == 1
    assert not is_complete(verdicts, "cluster") and is_complete(verdicts, "producer")


def test_no_producer_to_compare_with():
    (v,) = compare([row("cluster", "dc-a", PRODUCED)], LATER, 0)
    assert v.state == "no_reference"


def test_a_cluster_its_producers_left_alone_in_a_window_is_complete_at_zero():
    """dc-b produced in other windows but not this one: its tiers expect 0."""
    earlier = [TierTotals("t", BEGIN - W, BEGIN, "producer", "dc-b", "dc-b", 1, 1, 0, 0,
                          id_hash(ids(9)[0]), None, 1, [], []),
               TierTotals("t", BEGIN - W, BEGIN, "mirror", "analysis", "dc-b", 1, 1, 0, 0,
                          id_hash(ids(9)[0]), None, 1, [], [])]
    rows = earlier + [row("producer", "dc-a", PRODUCED), row("mirror", "dc-a", PRODUCED,
                                                              dc="analysis")]
    now = {(v.tier, v.cluster): (v.state, v.produced, v.count)
           for v in compare(rows, LATER, 0) if v.window_begin_ms == BEGIN}
    assert now[("mirror", "dc-b")] == ("complete", 0, 0)
    assert now[("mirror", "dc-a")] == ("complete", 100, 100)


@pytest.mark.parametrize("reported, now, state", [
    # (producers' last report received, audit's now): the grace runs from the
    # later of the window's end and that report
    (None, BEGIN + W + 59_999, "pending"), (None, BEGIN + W + 60_000, "lost"),
    (BEGIN + W - 1, BEGIN + W + 60_000, "lost"),          # reported before the end
    (LATER, LATER + 59_999, "pending"),                    # reported an hour late
    (LATER, LATER + 60_000, "lost"),
])
def test_the_grace_runs_from_the_end_or_the_producers_last_report(reported, now, state):
    producer = row("producer", "dc-a", PRODUCED)
    producer.reported_ms = reported
    (v,) = verdict_of([producer, row("cluster", "dc-a", PRODUCED[1:])], now=now)
    assert (v.state, v.missing) == (state, 1)
