"""Is an hour ready to load? The audit's answer for the warehouse load.

The warehouse loads an hour of a topic once the audit shows that every
message the producers delivered in that hour has reached the tier the
warehouse reads from (the analysis cluster: tier ``cluster``, cluster
``analysis``). This module turns the audit service's verdicts
(``GET /api/verdicts``, audit/remote.py) into that answer, and, after the
load, compares the rows written with what the producers delivered. It is
pure: verdicts in, answer out.

An hour is, per topic (the topics the producers delivered to in that hour):

* ``ready``: at the chosen tier, every window the producers reported is
  ``complete`` or ``duplicated`` (at-least-once: copies are expected and
  loaded; nothing is missing);
* ``waiting``: some window is ``pending`` (its grace period has not ended),
  or the tier has not reported it at all yet;
* ``lost``: some window is ``lost`` or ``lost_and_duplicated``: fewer
  messages reached the tier than the producers delivered, past the grace.

An hour with no producer windows at all is ``ready`` (nothing to load) only
once it ended more than the audit's grace period ago: before that, the
producers' monitoring events may still be on their way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from audit.compare import LOSING, LOST, PASSING, READY, WAITING, outcome  # noqa: F401 - LOST:
#   the gate's answers are the rule's (READY, WAITING, LOST), imported from here

HOUR_MS = 3_600_000


@dataclass
class TopicHour:
    """One topic's hour at the chosen tier, summed over its windows."""
    topic: str
    state: str
    produced: int = 0
    count: int = 0
    missing: int = 0
    duplicated: int = 0
    windows: int = 0
    pending_windows: int = 0
    unreported_windows: int = 0
    lost_windows: list[int] = field(default_factory=list)

    def line(self) -> str:
        text = (f"{self.topic}: {self.state}; produced {self.produced:,}, counted "
                f"{self.count:,} at the tier, missing {self.missing:,}, duplicated "
                f"{self.duplicated:,} over {self.windows} windows")
        if self.pending_windows:
            text += f"; {self.pending_windows} windows still pending"
        if self.unreported_windows:
            text += f"; {self.unreported_windows} windows not reported by the tier yet"
        if self.lost_windows:
            from audit.times import iso
            text += "; lost in windows " + ", ".join(iso(w) for w in self.lost_windows)
        return text


@dataclass
class HourCheck:
    hour_ms: int
    tier: str
    cluster: str
    state: str
    topics: dict[str, TopicHour]
    grace_ms: int = 0
    """The audit's grace: a window is called lost only this long after it
    ended and after the producers' last report of it reached the audit."""
    grace_ends_ms: int = 0
    """When that grace has run out for every window of the hour (epoch ms):
    before then the audit may still call one pending."""

    def lines(self) -> list[str]:
        from audit.times import iso
        head = (f"hour {iso(self.hour_ms)} at tier {self.tier} (cluster {self.cluster}): "
                f"{self.state}")
        if not self.topics:
            head += " (no producer reported messages in this hour)"
        return [head] + ["  " + t.line() for t in sorted(self.topics.values(),
                                                         key=lambda t: t.topic)]

    def produced(self) -> dict[str, int]:
        return {t: h.produced for t, h in self.topics.items()}


def check_hour(verdicts: list[dict], hour_ms: int, now_ms: int, grace_ms: int,
               tier: str = "cluster", cluster: str = "analysis",
               topics=None) -> HourCheck:
    """The hour beginning at ``hour_ms`` from the verdicts of its windows
    (dicts as ``/api/verdicts`` gives them). ``topics``: a predicate on topic
    names (the loader's whitelist), or None for all."""
    if hour_ms % HOUR_MS:
        raise ValueError("hour_ms must be the start of an hour")
    in_hour = [v for v in verdicts if hour_ms <= v["window_begin_ms"] < hour_ms + HOUR_MS
               and (topics is None or topics(v["topic"]))]
    producers: dict[str, dict[int, int]] = {}
    for v in in_hour:
        if v["tier"] == "producer" and v["produced"] > 0:
            windows = producers.setdefault(v["topic"], {})
            windows[v["window_begin_ms"]] = windows.get(v["window_begin_ms"], 0) + v["produced"]
    result: dict[str, TopicHour] = {}
    every_window: list[str] = []
    for topic, windows in producers.items():
        hour = TopicHour(topic, READY, produced=sum(windows.values()), windows=len(windows))
        at_tier = {v["window_begin_ms"]: v for v in in_hour
                   if v["topic"] == topic and v["tier"] == tier and v["cluster"] == cluster}
        for begin in sorted(windows):
            v = at_tier.get(begin)
            if v is None:
                hour.unreported_windows += 1
                continue
            hour.count += v["count"]
            hour.missing += v["missing"]
            hour.duplicated += v["duplicated"]
            if v["state"] == "pending":
                hour.pending_windows += 1
            elif v["state"] in LOSING:
                hour.lost_windows.append(begin)
            elif v["state"] not in PASSING:
                hour.unreported_windows += 1
        # the one rule (audit/compare.py), over the windows the producers
        # reported (one the tier has not reported yet is pending)
        states = [at_tier[b]["state"] if b in at_tier else "pending" for b in windows]
        hour.state = outcome(states)
        every_window += states
        result[topic] = hour
    if not result:
        state = READY if now_ms >= hour_ms + HOUR_MS + grace_ms else WAITING
    else:
        state = outcome(every_window)
    grace_ends = max([hour_ms + HOUR_MS + grace_ms]
                     + [v.get("grace_ends_ms", 0) for v in in_hour])
    return HourCheck(hour_ms, tier, cluster, state, result, grace_ms, grace_ends)


@dataclass
class Shortfall:
    """A topic's hour in the warehouse with messages the producers delivered
    and the rows do not hold (windows: the window starts where they miss)."""
    topic: str
    produced: int
    loaded: int
    missing: int
    duplicated: int
    exact: bool
    windows: list[int] = field(default_factory=list)

    def line(self) -> str:
        from audit.times import iso
        bound = "" if self.exact else "at least "
        return (f"{self.topic}: {self.loaded:,} rows loaded, {self.produced:,} produced, "
                f"{bound}{self.missing:,} missing and {self.duplicated:,} rows that are copies "
                f"(in windows {', '.join(iso(w) for w in self.windows)})")


def producer_references(verdicts: list[dict], hour_ms: int,
                        topics=None) -> dict[str, dict[int, tuple[int, int]]]:
    """What the producers delivered in the hour, per topic and window:
    ``(messages, id checksum)``, summed over every producer (the verdicts
    of ``/api/verdicts``)."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for v in verdicts:
        if v["tier"] != "producer" or not hour_ms <= v["window_begin_ms"] < hour_ms + HOUR_MS \
                or (topics is not None and not topics(v["topic"])) or v["produced"] <= 0:
            continue
        windows = out.setdefault(v["topic"], {})
        n, total = windows.get(v["window_begin_ms"], (0, 0))
        if total is None or "checksum" not in v:     # an older audit service: counts only
            windows[v["window_begin_ms"]] = (n + v["produced"], None)
            continue
        windows[v["window_begin_ms"]] = (n + v["produced"], (total + v["checksum"]) % (1 << 64))
    return out


def shortfalls(reference: dict[str, dict[int, tuple[int, int]]],
               loaded: dict[str, dict[int, tuple[int, int, int]]]) -> list[Shortfall]:
    """Topics whose rows miss messages the producers delivered, window by
    window: ``reference`` from ``producer_references``, ``loaded`` the rows
    per topic and window as ``(rows, distinct ids, checksum of the distinct
    ids)``. A loss hidden under copies (as many rows as produced, or more)
    is a shortfall: the distinct ids are not the producers'."""
    out = []
    for topic, windows in sorted(reference.items()):
        produced = rows = missing = copies = 0
        exact, lost = True, []
        for begin, (p, p_sum) in sorted(windows.items()):
            n, distinct, distinct_sum = loaded.get(topic, {}).get(begin, (0, 0, 0))
            produced, rows, copies = produced + p, rows + n, copies + n - distinct
            if distinct == p and (p_sum is None or distinct_sum == p_sum):
                continue           # (no checksum from the audit: the counts decide)
            if distinct < p:
                missing += p - distinct
            else:            # as many ids as produced, or more, but not the same ones
                missing += 1
                exact = False
            lost.append(begin)
        if lost:
            out.append(Shortfall(topic, produced, rows, missing, copies, exact, lost))
    return out
