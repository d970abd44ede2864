"""Compare every tier with the producers: what is complete, pending, lost,
duplicated, or both.

The reference of a (topic, window) is the producer tier. A row of another
tier counting cluster C is compared with the producers that produced to C
(the producer events name their cluster; in a window where they produced
nothing, the reference is 0); a cluster no producer names (the analysis
cluster, which holds copies of every DC) is compared with all the producers
of the topic.

States (``verdict.state``):

* ``complete``: as many messages as produced and the same id checksum (or,
  where the tier kept ids, no id missing and none twice);
* ``pending``: not complete yet, but less than ``grace_ms`` passed since
  the window ended or since the audit received the producers' last report
  of it, whichever is later: data may still be on its way (mirroring, a
  publish interval). The report counts too because event time is the
  producers' clock: a producer whose clock is hours behind reports into
  windows that ended hours ago, and the tiers after it count those
  messages seconds later, not before the window ended;
* ``lost``: fewer messages than produced (``missing``; "at least" unless the
  tier kept ids, ``exact``);
* ``duplicated``: more than produced (``duplicated``);
* ``lost_and_duplicated``: both; counts alone cannot see it when the numbers
  are equal — the checksum differs;
* ``no_reference``: messages counted but no producer tier to compare with.

A tier seen in the compared period that reported nothing for a window the
producers did is compared as a count of 0 (lost once the grace has passed).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from audit.counting import percentile
from audit.store import TierTotals

STATES = ("complete", "pending", "lost", "duplicated", "lost_and_duplicated", "no_reference")
#: The one rule for "is this complete?" (the warehouse gate, /api/completeness,
#: python -m audit report, the DAG steps): a window that lost messages fails;
#: copies are reported but never block (at-least-once delivery: the warehouse
#: loads them, its validate step checks every id); anything not decided yet
#: (pending, or no producer counts to compare with) waits.
PASSING = ("complete", "duplicated")
LOSING = ("lost", "lost_and_duplicated")
READY, WAITING, LOST = "ready", "waiting", "lost"
_MOD = 1 << 64


@dataclass
class Verdict:
    topic: str
    window_begin_ms: int
    window_end_ms: int
    tier: str
    datacenter: str
    cluster: str
    state: str
    produced: int                 # the reference: messages the producers delivered
    count: int                    # messages this tier counted
    unique: int | None            # distinct ids, where the tier kept them
    missing: int
    duplicated: int
    exact: bool                   # missing/duplicated are exact (ids kept), else lower bounds
    completeness: float           # percent of the produced messages seen (at least once)
    checksum_matches: bool
    no_time: int
    malformed: int
    bytes: int
    latency_p50_ms: int
    latency_p95_ms: int
    latency_p99_ms: int
    checksum: int = 0             # this row's id checksum (0..2^64-1): for a producer row,
    #                               the reference a loader checks what it wrote against
    grace_ends_ms: int = 0        # no loss is called in this window before then: the
    #                               window's end or the producers' last report, + grace

    def to_json(self) -> dict:
        return asdict(self)


def _latency(row: TierTotals | None) -> tuple[int, int, int]:
    if row is None or not row.latency_counts:
        return -1, -1, -1
    b = tuple(row.latency_bounds_ms)
    return tuple(percentile(b, row.latency_counts, q) for q in (0.5, 0.95, 0.99))


def compare(totals: list[TierTotals], now_ms: int, grace_ms: int) -> list[Verdict]:
    """A verdict for every producer row and every (tier, datacenter, cluster)
    row of every window (missing rows as zero), ordered by topic, window, tier."""
    by_window: dict[tuple[str, int], list[TierTotals]] = {}
    for row in totals:
        by_window.setdefault((row.topic, row.window_begin_ms), []).append(row)
    tiers_seen = {(r.topic, r.tier, r.datacenter, r.cluster) for r in totals
                  if r.tier != "producer"}
    # clusters producers write to (per topic): compared with those producers
    # only, even in a window where they produced nothing
    producer_clusters = {(r.topic, r.cluster) for r in totals if r.tier == "producer"}
    verdicts: list[Verdict] = []
    for (topic, begin), rows in sorted(by_window.items()):
        end = max(r.window_end_ms for r in rows)
        producers = [r for r in rows if r.tier == "producer"]
        present = {(r.tier, r.datacenter, r.cluster): r for r in rows if r.tier != "producer"}
        for key in sorted(k[1:] for k in tiers_seen if k[0] == topic):
            present.setdefault(key, None)
        for p in producers:
            verdicts.append(_verdict(topic, begin, end, ("producer", p.datacenter, p.cluster),
                                     p, p.message_count, p.checksum, now_ms, grace_ms,
                                     reference=True))
        for key, row in sorted(present.items()):
            tier, dc, cluster = key
            if (topic, cluster) in producer_clusters:
                ref = [p for p in producers if p.cluster == cluster]
            else:       # an aggregate cluster (analysis): every producer of the topic
                ref = producers
            produced = sum(p.message_count for p in ref)
            checksum = sum(p.checksum for p in ref) % _MOD
            # the grace runs from the window's end or the producers' last
            # report of it, whichever is later (a producer clock behind)
            since = max([end] + [p.reported_ms for p in ref if p.reported_ms is not None])
            verdicts.append(_verdict(topic, begin, end, key, row, produced, checksum, now_ms,
                                     grace_ms, reference=False,
                                     has_reference=bool(producers) or bool(ref is not producers),
                                     grace_from=since))
    return verdicts


def _verdict(topic, begin, end, key, row, produced, expected_checksum, now_ms, grace_ms,
             reference: bool, has_reference: bool = True,
             grace_from: int | None = None) -> Verdict:
    """``grace_from``: when the grace starts (default: the window's end)."""
    tier, dc, cluster = key
    since = end if grace_from is None else grace_from
    count = row.message_count if row else 0
    unique = row.unique_count if row else None
    checksum = row.checksum if row else 0
    sums_match = checksum == expected_checksum
    p50, p95, p99 = _latency(row)
    if reference:
        state, missing, dups, exact = "complete", 0, 0, True
        seen = produced
    elif not has_reference:
        state, missing, dups, exact, seen = "no_reference", 0, 0, False, count
    elif unique is not None:
        state, seen, missing, dups, exact = _by_ids(produced, expected_checksum, count, row)
    else:
        exact = False
        missing, dups = max(0, produced - count), max(0, count - produced)
        seen = min(count, produced)
        if count == produced:
            state = "complete" if sums_match else "lost_and_duplicated"
            if not sums_match:
                missing = dups = 1          # at least one of each
        else:
            state = "lost" if count < produced else "duplicated"
    if state != "complete" and not reference and now_ms < since + grace_ms \
            and state != "no_reference":
        state = "pending"
    completeness = 100.0 * min(seen, produced) / produced if produced else 100.0
    return Verdict(topic, begin, end, tier, dc, cluster, state, produced, count, unique,
                   missing, dups, exact, round(completeness, 4), sums_match,
                   row.no_time_count if row else 0, row.malformed_count if row else 0,
                   row.byte_count if row else 0, p50, p95, p99, checksum=checksum,
                   grace_ends_ms=since + grace_ms)


def _by_ids(produced: int, produced_sum: int, count: int, row: TierTotals):
    """(state, seen, missing, duplicated, exact) of a tier that kept ids.

    ``unique`` ids were seen for the first time while the tier kept the
    window's ids; ``late`` ones arrived after it had dropped them (a copy
    re-sent hours later, a mirror catching up after an outage, a counter
    started late): each is a copy or a first arrival, and only the sums
    can tell. Exact answers:

    1. the unique ids are the producers' (count and sum): nothing missing,
       every other message is a copy, late ones included;
    2. unique and late ids together are the producers': the late ones
       filled the gaps; nothing missing;
    3. no late ids and no more unique ids than produced: the missing are
       the difference (the ids seen are taken to be the producers').

    Otherwise the sums cannot place the late ids (some copies, some first
    arrivals, or ids counted unique twice by a restarted counter): the
    numbers are lower bounds (``exact`` false), and a window with no
    message proven missing is ``duplicated``, never ``lost``.
    """
    unique = row.unique_count
    late = row.late_unique_count or 0
    unique_sum = row.unique_checksum
    late_sum = row.late_unique_checksum or 0
    if unique_sum is None:        # a counter older than the sums: counts and one checksum
        if unique == produced and count == produced:
            ok = row.checksum == produced_sum
            return ("complete", produced, 0, 0, True) if ok else \
                ("lost_and_duplicated", produced - 1, 1, 1, False)
        missing, dups = max(0, produced - unique), max(0, count - unique)
        state = "lost_and_duplicated" if missing and dups else "lost" if missing else \
            "duplicated"
        # exact only where every event was an older counter's (no late ids then)
        return state, min(unique, produced), missing, dups, \
            unique <= produced and not row.late_unique_count
    if (unique == produced and unique_sum == produced_sum) or \
            (unique + late == produced and (unique_sum + late_sum) % _MOD == produced_sum):
        dups = count - produced
        return ("duplicated" if dups else "complete"), produced, 0, dups, True
    if late == 0 and unique < produced:
        missing, dups = produced - unique, count - unique
        return ("lost_and_duplicated" if dups else "lost"), unique, missing, dups, True
    # the sums disagree and cannot say where: bounds only
    missing = max(0, produced - unique - late)
    if missing == 0 and unique + late == produced:
        missing = 1               # as many ids as produced, not the same ones
    dups = max(0, count - produced + missing)
    if missing == 0:
        return "duplicated", produced, 0, dups, False
    return ("lost_and_duplicated" if dups else "lost"), produced - missing, missing, dups, False


def summary(verdicts: list[Verdict]) -> dict[str, int]:
    """How many verdicts are in each state."""
    out = {s: 0 for s in STATES}
    for v in verdicts:
        out[v.state] += 1
    return out


def outcome(states: Iterable[str]) -> str:
    """The one rule (``PASSING``, ``LOSING``) over the states of some windows:
    ``lost`` if any lost messages, else ``waiting`` if any is not decided
    yet (or there is none), else ``ready``."""
    chosen = list(states)
    if any(s in LOSING for s in chosen):
        return LOST
    if not chosen or any(s not in PASSING for s in chosen):
        return WAITING
    return READY


def is_complete(verdicts: list[Verdict], tier: str | None = None) -> bool:
    """Nothing lost and nothing pending in the verdicts (of ``tier``), of
    which there is at least one: ``outcome`` is ready. Copies do not count
    against it."""
    return outcome(v.state for v in verdicts if tier is None or v.tier == tier) == READY
