"""A/B benchmark: the broker benchmark (bench/run.py) of two checkouts,
alternating one run of each (A B, then B A, ...), so both see the same
machine at the same time.

    python -m bench.ab --baseline /tmp/baseline --runs 3 [-- run.py options]

With ``--baseline . --baseline-set drop_behind=off`` the two sides are one
checkout with two broker settings. Otherwise the baseline is another checkout of this repository (``git worktree add
/tmp/baseline <commit>``; build its C accelerator there with ``python
setup.py build_ext --inplace``). Each run starts the broker and the clients
of that checkout (PYTHONPATH and working directory set to it). Prints, per
figure, the median of each side and their ratio; ``--json PATH`` keeps
everything. Machine: 2 cores shared by broker and clients, so quote ratios
measured in one such run, not absolute figures across sessions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FIGURES = [
    ("produce batch 50 (send_many), msg/s", "produce_batch50", "msgs_per_s"),
    ("produce batch 50, send() per message, msg/s", "produce_batch50_send", "msgs_per_s"),
    ("produce batch 1, msg/s", "produce_batch1", "msgs_per_s"),
    ("produce batch 50, no partition named, msg/s", "produce_batch50_common", "msgs_per_s"),
    ("produce batch 1, no partition named, msg/s", "produce_batch1_common", "msgs_per_s"),
    ("produce batch 1, no partition named, default partitions, msg/s",
     "produce_batch1_common_multi", "msgs_per_s"),
    ("consume, msg/s", "consume", "msgs_per_s"),
    ("broker CPU s per GB consumed", "consume", "broker_cpu_s_per_gb"),
    ("latency p50, ms", "latency", "p50_ms"),
    ("latency p99, ms", "latency", "p99_ms"),
]


def one_run(checkout: str, extra: list[str]) -> dict:
    """One bench/run.py run of ``checkout``; its result (raw runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONPATH=checkout)
        if os.path.exists(os.path.join(checkout, "bench", "__init__.py")):
            cmd = [sys.executable, "-m", "bench.run", "--runs", "1", "--no-write", "--json", out,
                   *extra]
        else:
            # an older checkout: bench/run.py is a script there, without --json
            # (its own results file is read instead)
            cmd = [sys.executable, os.path.join(checkout, "bench", "run.py"), "--runs", "1",
                   *extra]
        subprocess.run(cmd, cwd=checkout, env=env, check=True)
        if os.path.exists(out):
            with open(out) as f:
                return json.load(f)
        results = os.path.join(checkout, "bench", "results")
        newest = max((os.path.join(results, n) for n in os.listdir(results)
                      if n.startswith("broker-") and n.endswith(".json")),
                     key=os.path.getmtime)
        with open(newest) as f:
            return json.load(f)


def value(result: dict, key: str, field: str) -> float | None:
    st = result["summary"].get(key, {}).get(field)
    return st["median"] if st else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="the other checkout (a directory)")
    p.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--json", metavar="PATH", help="write every run of both sides here")
    p.add_argument("--baseline-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting for the baseline side only (repeatable): with "
                        "--baseline . this compares two settings of one checkout")
    p.add_argument("extra", nargs="*", help="options for bench/run.py (after --)")
    a = p.parse_args(argv)
    sides = {"baseline": os.path.abspath(a.baseline), "current": ROOT}
    extras = {"baseline": a.extra + [f"--set={kv}" for kv in a.baseline_set],
              "current": a.extra}
    runs: dict[str, list[dict]] = {"baseline": [], "current": []}
    for i in range(a.runs):
        # A B, then B A, ...: a side never always follows the other (the one
        # after a sustained run meets its predecessor's writeback and page
        # cache; measured: 0.90 against 1.00 for the same code, issue 26)
        order = list(sides.items()) if i % 2 == 0 else list(sides.items())[::-1]
        for name, checkout in order:
            print(f"--- run {i + 1}/{a.runs}: {name} ({checkout}) {' '.join(extras[name])}",
                  flush=True)
            runs[name].append(one_run(checkout, extras[name]))
    print(f"\n{'figure':46s} {'baseline':>12s} {'current':>12s} {'ratio':>7s}")
    table = []
    for label, key, field in FIGURES:
        meds = {}
        for name in sides:
            vals = [v for v in (value(r, key, field) for r in runs[name]) if v is not None]
            meds[name] = statistics.median(vals) if vals else None
        b, c = meds["baseline"], meds["current"]
        ratio = c / b if b and c else None
        table.append({"figure": label, "baseline": b, "current": c, "ratio": ratio,
                      "baseline_runs": [value(r, key, field) for r in runs["baseline"]],
                      "current_runs": [value(r, key, field) for r in runs["current"]]})
        fmt = (lambda v: f"{v:12,.1f}") if "ms" in label or "CPU" in label else \
            (lambda v: f"{v:12,.0f}")
        print(f"{label:46s} {fmt(b) if b else '-':>12s} {fmt(c) if c else '-':>12s} "
              f"{ratio:7.3f}" if ratio else f"{label:46s} -")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"sides": sides, "table": table, "runs": runs}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
