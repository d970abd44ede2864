"""Reports from the audit database: the verdicts of a period, as a table for
people or JSON for machines (``python -m audit report``)."""
from __future__ import annotations

import json

from audit.compare import LOSING, Verdict, compare, summary
from audit.store import Store

#: how far back to look for the tiers that report a topic, so that a tier
#: silent in the asked period is still compared (as a count of 0)
LOOKBACK_MS = 24 * 3_600_000


def verdicts(store: Store, topic: str | None, begin_ms: int, end_ms: int, now_ms: int,
             grace_ms: int, tier: str | None = None) -> list[Verdict]:
    """Verdicts of the windows beginning in [begin_ms, end_ms)."""
    totals = store.totals(topic=topic, begin_ms=begin_ms - LOOKBACK_MS, end_ms=end_ms)
    return [v for v in compare(totals, now_ms, grace_ms)
            if begin_ms <= v.window_begin_ms < end_ms and (tier is None or v.tier == tier)]


def has_losses(chosen: list[Verdict]) -> bool:
    """Whether a window lost messages (the one rule: copies do not count)."""
    return any(v.state in LOSING for v in chosen)


def as_json(chosen: list[Verdict], begin_ms: int, end_ms: int) -> str:
    return json.dumps({"from_ms": begin_ms, "to_ms": end_ms, "summary": summary(chosen),
                       "verdicts": [v.to_json() for v in chosen]}, indent=1)


def as_table(chosen: list[Verdict]) -> str:
    from audit.times import iso
    if not chosen:
        return "no monitoring events in this period\n"
    head = ("window (UTC)", "topic", "tier", "datacenter", "cluster", "state", "produced",
            "count", "missing", "dup", "complete %", "p99 ms")
    rows = [head]
    for v in chosen:
        bound = "" if v.exact else ">="
        rows.append((iso(v.window_begin_ms), v.topic, v.tier, v.datacenter, v.cluster,
                     v.state, f"{v.produced:,}", f"{v.count:,}",
                     f"{bound if v.missing else ''}{v.missing:,}",
                     f"{bound if v.duplicated else ''}{v.duplicated:,}", f"{v.completeness:.2f}",
                     "" if v.latency_p99_ms < 0 else f"{v.latency_p99_ms:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    numeric = set(range(6, len(head)))
    lines = ["  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    counts = summary(chosen)
    lines.append("")
    lines.append("summary: " + ", ".join(f"{n} {s.replace('_', ' ')}"
                                         for s, n in counts.items() if n))
    return "\n".join(lines) + "\n"
