"""A/B of the component benchmarks across two checkouts, in one run: the
mirror (bench/mirror_bench.py), the audit's counting (bench/audit_bench.py)
and the loader (bench/loader_bench.py). bench/ab.py does the same for the
broker benchmark (bench/run.py: produce batch 1 and 50, consume).

    python -m bench.ab_suite --baseline /tmp/baseline --runs 3 [--only mirror,audit]

The baseline is another checkout of this repository (``git worktree add
/tmp/baseline <commit>``, its C accelerators built there with ``python
setup.py build_ext --inplace``). For each benchmark, runs alternate between
the two checkouts (A B, then B A, ...), each a process of its own with
PYTHONPATH and the working directory set to its checkout, so that both see
the machine in the same state. Prints, per figure, the median of each side
and the ratio new / baseline; ``--json PATH`` keeps every run. Machine: 2
cores; quote the ratios, not absolute figures across sessions.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _mirror(output: str, _json_path: str) -> dict[str, float]:
    found = re.search(r"medians: ([\d,]+) msg/s overall \(([\d,]+) steady\)", output)
    if not found:
        raise RuntimeError("mirror_bench printed no medians line")
    return {"mirror copy, msg/s": _number(found.group(1)),
            "mirror copy steady, msg/s": _number(found.group(2))}


def _audit(_output: str, json_path: str) -> dict[str, float]:
    with open(json_path) as f:
        table = json.load(f)["table"]
    # every figure where more is better (the CPU seconds per million are not)
    return {row["figure"]: row["median"] for row in table
            if "CPU s per M" not in row["figure"]}


def _loader(output: str, _json_path: str) -> dict[str, float]:
    found = re.search(r"loader rows/s, median of \d+: ([\d,]+)", output)
    if not found:
        raise RuntimeError("loader_bench printed no rows/s line")
    return {"loader, rows/s": _number(found.group(1))}


@dataclass(frozen=True)
class Bench:
    module: str
    args: Callable[[argparse.Namespace, str], list[str]]
    figures: Callable[[str, str], dict[str, float]]


BENCHES = {
    "mirror": Bench("bench.mirror_bench",
                    lambda a, j: ["--runs", "1", "--messages", str(a.mirror_messages),
                                  "--seconds", "5", "--no-write"], _mirror),
    "audit": Bench("bench.audit_bench",
                   lambda a, j: ["--runs", "1", "--messages", str(a.audit_messages),
                                 "--json", j], _audit),
    "loader": Bench("bench.loader_bench",
                    lambda a, j: ["--runs", "1", "--messages", str(a.loader_messages)], _loader),
}


def one_run(checkout: str, bench: Bench, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="samsa-ab-suite-") as work:
        json_path = os.path.join(work, "result.json")
        env = dict(os.environ, PYTHONPATH=checkout)
        done = subprocess.run([sys.executable, "-m", bench.module, *bench.args(args, json_path)],
                              cwd=checkout, env=env, capture_output=True, text=True)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(f"{bench.module} in {checkout} failed ({done.returncode}):\n"
                               f"{output[-3000:]}")
        return bench.figures(output, json_path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab_suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="the other checkout (its C built)")
    p.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--only", default=",".join(BENCHES),
                   help=f"comma-separated, of {', '.join(BENCHES)} (default all)")
    p.add_argument("--mirror-messages", type=int, default=500_000)
    p.add_argument("--audit-messages", type=int, default=1_000_000)
    p.add_argument("--loader-messages", type=int, default=500_000)
    p.add_argument("--json", metavar="PATH", help="keep every run here")
    a = p.parse_args(argv)
    sides = {"baseline": os.path.abspath(a.baseline), "new": ROOT}
    everything: dict = {}
    for name in [n.strip() for n in a.only.split(",") if n.strip()]:
        bench = BENCHES[name]
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "new": []}
        for k in range(a.runs):
            order = ("baseline", "new") if k % 2 == 0 else ("new", "baseline")
            for side in order:
                got = one_run(sides[side], bench, a)
                runs[side].append(got)
                print(f"[ab-suite] {name} run {k + 1} {side}: "
                      + ", ".join(f"{f} {v:,.0f}" for f, v in got.items()), flush=True)
        everything[name] = runs
        print(f"\n{name}: {'figure':48} {'baseline':>12} {'new':>12} {'new/base':>9}")
        for figure in runs["new"][0]:
            base = statistics.median(r[figure] for r in runs["baseline"])
            new = statistics.median(r[figure] for r in runs["new"])
            print(f"{'':{len(name) + 2}}{figure:48} {base:12,.0f} {new:12,.0f} "
                  f"{new / base:9.3f}", flush=True)
        print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"sides": sides, "runs": everything}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
