"""What keeping ids costs a tier's counting (issue 25: the mirror tier keeps
the ids of recent windows, as the cluster tier does, to tell losses from
copies exactly).

    python -m bench.dedup_bench [--runs 5] [--messages 500000] [--no-write]

The mirror counts each fetched message set in C without decoding it
(``tally_message_set``); this times that call over page views (Avro
envelopes with an event id, ~300 bytes) in 2,000-message sets, with the id
sets kept (``dedup_ids``: a C hash set of 64-bit id hashes per window) and
without, alternating in each run (the other order every other run), and the
hadoop tier's extra step: packing a window's id hashes for the driver
(``id_hashes``) and merging them there (``TierCounter.merge(ids=...)``).
Medians of ``--runs``; the ratio is taken in each run, then the median.
"""
from __future__ import annotations

import argparse
import statistics
import time

from audit import counting
from audit.counting import CounterConfig, TierCounter, id_hashes
from broker.protocol.message import encode_values

WINDOW = 600_000
SET_SIZE = 2_000


def envelopes(n: int, now_ms: int) -> list[tuple[bytes, list[int]]]:
    """Message sets of page-view-like envelopes (the header's event id where
    the kernel reads it) with their timestamps spread over 6 windows."""
    import os
    sets = []
    for start in range(0, n, SET_SIZE):
        count = min(SET_SIZE, n - start)
        stamps = [now_ms - 3_600_000 + (start + i) * 3_600_000 // n for i in range(count)]
        values = [b"\x00\x00\x00\x00\x01\x02\x00\x00" + os.urandom(16) + b"x" * 280
                  for _ in range(count)]
        sets.append((encode_values(values, stamps), stamps))
    return sets


def count_sets(sets, now_ms: int, keep_ids: bool) -> float:
    kernel = counting.kernel
    bounds = CounterConfig(tier="mirror", datacenter="x", cluster="x").latency_bounds_ms
    acc: dict = {}
    ids: dict | None = {} if keep_ids else None
    t0 = time.perf_counter()
    for buf, _ in sets:
        kernel.tally_message_set(acc, buf, WINDOW, now_ms, bounds, ids)
    return time.perf_counter() - t0


def merge_ids(sets, now_ms: int) -> float:
    """The hadoop tier: tasks' tallies and id hashes merged at the driver."""
    kernel = counting.kernel
    bounds = CounterConfig(tier="hadoop", datacenter="x", cluster="x").latency_bounds_ms
    rows = []
    for buf, _ in sets:
        acc, id_sets = {}, {}
        kernel.tally_message_set(acc, buf, WINDOW, now_ms, bounds, id_sets)
        rows.append((acc, {b: id_hashes(s) for b, s in id_sets.items()}))
    counter = TierCounter(CounterConfig(tier="hadoop", datacenter="x", cluster="x",
                                        window_ms=WINDOW, dedup_ids=True))
    t0 = time.perf_counter()
    for acc, ids in rows:
        counter.merge("page_views", acc, ids=ids)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dedup_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--messages", type=int, default=500_000)
    args = p.parse_args(argv)
    now_ms = int(time.time() * 1000)
    sets = envelopes(args.messages, now_ms)
    n = args.messages
    kept, plain, ratios, merged = [], [], [], []
    for run in range(args.runs):
        order = (True, False) if run % 2 == 0 else (False, True)
        took = {keep: count_sets(sets, now_ms, keep) for keep in order}
        kept.append(n / took[True])
        plain.append(n / took[False])
        ratios.append(took[False] / took[True])
        merged.append(n / merge_ids(sets, now_ms))
    print(f"kernel: {counting.kernel_name()}; {n:,} messages in sets of {SET_SIZE:,}, "
          f"{args.runs} runs")
    print(f"tally_message_set, ids kept:  {statistics.median(kept):,.0f} msg/s "
          f"{[round(x) for x in kept]}")
    print(f"tally_message_set, no ids:    {statistics.median(plain):,.0f} msg/s "
          f"{[round(x) for x in plain]}")
    print(f"ids kept / no ids (per run):  {statistics.median(ratios):.2f} "
          f"{[round(r, 2) for r in ratios]}")
    print(f"hadoop driver merge of ids:   {statistics.median(merged):,.0f} msg/s "
          f"{[round(x) for x in merged]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
