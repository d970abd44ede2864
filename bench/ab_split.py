"""A/B of one half at a time, against another checkout, alternating in one run.

    python -m bench.ab_split client --baseline /tmp/baseline --runs 8
    python -m bench.ab_split broker --baseline /tmp/baseline --runs 8
    python -m bench.ab_split kernel --baseline /tmp/baseline --runs 6

* ``client``: one broker of this checkout; the batch-50 producer worker of
  bench/run.py (send_many, acks none, partition 0) of each checkout in turn,
  each run into a new topic. Compares the producers alone.
* ``broker``: a broker of each checkout, both up, each pre-filled (4 topics of
  ``--prefill`` messages); this checkout's producer into each in turn. Compares
  the brokers alone (per-run broker CPU from /proc).
* ``kernel``: the audit's C counting kernel (bench/audit_bench.py's
  ``bench_kernel``, 500,000 page views) in a process of each checkout in turn,
  5 timings per process.

bench/ab.py compares whole checkouts (the broker benchmark); this module
tells which half a difference comes from. The baseline is a worktree with
its C accelerators built (bench/ab.py says how). Prints each run, the
medians, their ratio and the per-pair ratios. 2 cores: run nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench.common import ROOT

KERNEL_CODE = r'''
import json, os, tempfile, time
from bench import audit_bench as ab
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore
now = int(time.time() * 1000)
with tempfile.TemporaryDirectory() as d:
    registry = SchemaRegistry(FileStore(os.path.join(d, "r.json")))
    registry.register(ab.TOPIC, catalog.load("samsa.events.PageViewEvent"))
    values = ab.make_values(registry, 500_000, now)
    timings = [ab.bench_kernel(values, now)["c_msgs_per_s"] for _ in range(5)]
print("RESULT " + json.dumps({"msgs_per_s": sorted(timings)[2]}))
'''


def _result(cmd: list[str], checkout: str) -> dict:
    done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=checkout))
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"{' '.join(cmd[:4])} in {checkout} failed:\n{done.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def produce(checkout: str, address: str, topic: str, n: int) -> dict:
    """bench/run.py's producer worker of ``checkout``, batch 50, into a new topic."""
    from broker.client.admin import AdminClient
    with AdminClient(address) as admin:
        admin.create_topic(topic, 1)
    params = {"bootstrap": address, "topic": topic, "n": n, "batch_size": 50, "linger_ms": 5,
              "api": "send_many"}
    return _result([sys.executable, "-m", "bench.run", "--worker", "produce",
                    json.dumps(params)], checkout)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab_split", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("half", choices=["client", "broker", "kernel"])
    p.add_argument("--baseline", required=True, help="the other checkout (its C built)")
    p.add_argument("--runs", type=int, default=8, help="runs a side (default 8)")
    p.add_argument("--messages", type=int, default=3_000_000, help="per produce run")
    p.add_argument("--prefill", type=int, default=4_500_000,
                   help="broker: messages per pre-filled topic (4 topics; default 1 GB each)")
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    sides = {"baseline": os.path.abspath(a.baseline), "current": ROOT}
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    figure = "msgs_per_s"
    with tempfile.TemporaryDirectory() as tmp:
        brokers = {}
        if a.half != "kernel":
            from broker.harness.broker_process import BrokerProcess
            trees = sides if a.half == "broker" else {"current": ROOT}
            for side, tree in trees.items():
                # the broker of that checkout: its own package first on the path
                env = {"PYTHONPATH": tree}
                os.environ.update(env)
                here = os.getcwd()
                os.chdir(tree)
                try:
                    brokers[side] = BrokerProcess(os.path.join(tmp, side)).start()
                finally:
                    os.chdir(here)
                    os.environ.pop("PYTHONPATH")
        try:
            if a.half == "broker":
                for side, b in brokers.items():
                    for t in range(4):
                        produce(ROOT, b.address, f"prefill-{t}", a.prefill)
            for r in range(a.runs):
                for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                    if a.half == "kernel":
                        out = _result([sys.executable, "-c", KERNEL_CODE], sides[side])
                    elif a.half == "client":
                        out = produce(sides[side], brokers["current"].address, f"t-{side}-{r}",
                                      a.messages)
                    else:
                        b = brokers[side]
                        before = cpu_seconds(b.proc.pid)
                        out = produce(ROOT, b.address, f"t-{r}", a.messages)
                        out["broker_cpu_s"] = cpu_seconds(b.proc.pid) - before
                    runs[side].append(out)
                    extra = {k: round(v, 2) for k, v in out.items()
                             if k in ("client_cpu_s", "broker_cpu_s")}
                    print(f"run {r + 1} {side}: {out[figure]:,.0f} msg/s {extra}", flush=True)
        finally:
            for b in brokers.values():
                b.stop()
    medians = {side: statistics.median(x[figure] for x in v) for side, v in runs.items()}
    pairs = [c[figure] / b[figure] for b, c in zip(runs["baseline"], runs["current"])]
    print(f"{a.half}: baseline {medians['baseline']:,.0f}  current {medians['current']:,.0f}  "
          f"ratio {medians['current'] / medians['baseline']:.3f}  per pair "
          f"{[round(x, 3) for x in pairs]} (median {statistics.median(pairs):.3f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"half": a.half, "sides": sides, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
