"""A copy that arrives after the tier's counter dropped its window's ids is
a duplicate, never a loss (issue 25, point 3).

The counter keeps a window's ids for ``dedup_windows`` windows; before the
fix, a copy re-sent later was counted as a new id, and the window read
``lost_and_duplicated`` with 0 missing and 0 duplicated, marked exact, so
the gate refused an hour where nothing was lost. Now the counter reports
such ids as late, with their sums, and the audit places them: copies of
ids it had (duplicated), first arrivals that filled a gap (complete), or,
where the sums cannot say, bounds that never claim to be exact.

Through the real store (SQLite, migrated), the comparison and the gate.
"""
from __future__ import annotations

import uuid

import pytest

from audit.compare import compare
from audit.counting import CounterConfig, TierCounter
from audit.gate import READY, check_hour
from audit.store import Store

WINDOW = 600_000
HOUR = 3_600_000
HOUR_START = 1_800_000_000_000 - 1_800_000_000_000 % HOUR
MINUTE = 60_000


def value(event_id: bytes) -> bytes:
    # the value envelope: magic 0, schema id, then the header's event id
    return b"\x00\x00\x00\x00\x01" + b"\x02" + b"\x00\x00" + event_id


class Tiers:
    """A producer and a deduplicating cluster counter of one window, and
    the store that receives their events."""

    def __init__(self, tmp_path, produced: int = 20) -> None:
        self.ids = [uuid.uuid4().bytes for _ in range(produced)]
        self.begin = HOUR_START + WINDOW
        self.store = Store(f"sqlite:///{tmp_path / 'audit.db'}")
        self.store.upgrade()
        producer = TierCounter(CounterConfig(tier="producer", datacenter="dc-a",
                                             cluster="dc-a", window_ms=WINDOW))
        now = self.begin + MINUTE
        producer.add_values("page_views", [value(i) for i in self.ids], self.begin + 1,
                            now_ms=now)
        self.store.add_events(producer.drain(now_ms=now), now)
        self.cluster = TierCounter(CounterConfig(tier="cluster", datacenter="dc-a",
                                                 cluster="dc-a", window_ms=WINDOW,
                                                 dedup_ids=True))

    def count(self, ids: list[bytes], now: int) -> None:
        """The cluster counter counts ``ids`` at ``now`` and publishes; it
        drains every 10 minutes between its counts, as a running one does."""
        self.cluster.add_values("page_views", [value(i) for i in ids], self.begin + 1,
                                now_ms=now)
        self.store.add_events(self.cluster.drain(now_ms=now), now)

    def idle_until(self, now: int) -> None:
        t = self.begin + 2 * MINUTE
        while t < now:
            self.store.add_events(self.cluster.drain(now_ms=t), t)
            t += WINDOW

    def verdict(self, now: int) -> dict:
        verdicts = compare(self.store.totals(), now, grace_ms=30 * MINUTE)
        return next(v.to_json() for v in verdicts if v.tier == "cluster")


def test_one_event_resent_five_hours_after_its_window_is_duplicated_1_and_the_hour_loads(
        tmp_path):
    tiers = Tiers(tmp_path)
    tiers.count(tiers.ids, tiers.begin + MINUTE)
    later = tiers.begin + 5 * HOUR
    tiers.idle_until(later)
    tiers.count(tiers.ids[7:8], later)                    # the copy, five hours late
    v = tiers.verdict(later)
    assert (v["state"], v["missing"], v["duplicated"], v["exact"]) == \
        ("duplicated", 0, 1, True), v
    assert v["count"] == 21 and v["produced"] == 20
    hour = check_hour([x.to_json() for x in compare(tiers.store.totals(), later, 30 * MINUTE)],
                      HOUR_START, later, 30 * MINUTE, tier="cluster", cluster="dc-a")
    assert hour.state == READY, hour.lines()
    assert hour.topics["page_views"].duplicated == 1


def test_a_first_arrival_five_hours_late_fills_its_gap(tmp_path):
    tiers = Tiers(tmp_path)
    tiers.count(tiers.ids[:19], tiers.begin + MINUTE)
    tiers.idle_until(tiers.begin + HOUR)
    assert tiers.verdict(tiers.begin + HOUR)["state"] == "lost"       # until it arrives
    later = tiers.begin + 5 * HOUR
    tiers.idle_until(later)
    tiers.count(tiers.ids[19:], later)
    v = tiers.verdict(later)
    assert (v["state"], v["missing"], v["duplicated"], v["exact"]) == \
        ("complete", 0, 0, True), v


def test_late_copies_mixed_with_late_first_arrivals_are_duplicates_in_bounds(tmp_path):
    """Late, in one go, the two missing ids and a copy of a seen one: more
    distinct ids than produced, which the sums cannot split into copies
    and first arrivals. Nothing is proven missing: duplicated (at least
    one), not exact, and never lost."""
    tiers = Tiers(tmp_path)
    tiers.count(tiers.ids[:18], tiers.begin + MINUTE)
    later = tiers.begin + 3 * HOUR
    tiers.idle_until(later)
    tiers.count(tiers.ids[18:] + tiers.ids[:1], later)
    v = tiers.verdict(later)
    assert (v["state"], v["missing"], v["duplicated"], v["exact"]) == \
        ("duplicated", 0, 1, False), v


def test_what_the_sums_cannot_place_is_never_called_exact(tmp_path):
    """Two missing, then late: a copy of a seen id and one of the missing:
    as many ids as produced, not the same ones. A message is missing, and
    the verdict says "at least", not exact."""
    tiers = Tiers(tmp_path)
    tiers.count(tiers.ids[:18], tiers.begin + MINUTE)
    later = tiers.begin + 3 * HOUR
    tiers.idle_until(later)
    tiers.count([tiers.ids[0], tiers.ids[18]], later)
    v = tiers.verdict(later)
    assert v["exact"] is False
    assert v["state"] == "lost_and_duplicated" and v["missing"] >= 1, v


@pytest.mark.parametrize("resend_after_windows", [1, 2, 3])
def test_a_copy_while_the_ids_are_kept_is_an_exact_duplicate(tmp_path, resend_after_windows):
    tiers = Tiers(tmp_path)
    tiers.count(tiers.ids, tiers.begin + MINUTE)
    later = tiers.begin + resend_after_windows * WINDOW + MINUTE
    tiers.idle_until(later)
    tiers.count(tiers.ids[:2], later)
    v = tiers.verdict(later + HOUR)
    assert (v["state"], v["missing"], v["duplicated"], v["exact"]) == \
        ("duplicated", 0, 2, True), v


def test_an_older_counters_events_beside_newer_ones_claim_no_exactness(tmp_path):
    """Events without the sums (a counter from before them) in the same
    window as a newer counter's late ids: the late first sightings count
    among the ids seen."""
    tiers = Tiers(tmp_path)
    tiers.cluster = TierCounter(CounterConfig(tier="cluster", datacenter="dc-a",
                                              cluster="dc-a", window_ms=WINDOW, dedup_ids=True))
    now = tiers.begin + MINUTE
    tiers.cluster.add_values("page_views", [value(i) for i in tiers.ids[:15]], tiers.begin + 1,
                             now_ms=now)
    old = tiers.cluster.drain(now_ms=now)
    for event in old:                       # as an older counter published them
        for field in ("unique_checksum", "late_unique_count", "late_unique_checksum"):
            del event[field]
    tiers.store.add_events(old, now)
    later = tiers.begin + 3 * HOUR
    tiers.idle_until(later)
    tiers.count(tiers.ids[15:], later)      # the rest, late, from the newer counter
    v = tiers.verdict(later)
    # every id arrived once: complete (before, the late five were left out: "lost 5, exact")
    assert (v["state"], v["missing"], v["duplicated"]) == ("complete", 0, 0), v
