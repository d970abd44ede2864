"""The demo's start-up secured against open (issue 30, point 8):
``make bench-startup``.

Each round starts the pipeline of ``make demo`` (infra/local/pipeline.py's
``Pipeline.start``: the lab with its mirror, schema registries and
monitoring, the audit's counters and service, and, unless ``--no-airflow``,
Airflow), once open and once secured, the order alternating round by round,
each in a fresh state directory, timed from the call to everything ready,
then stops it. The secured start also makes the lab's certificate authority,
certificates, passwords and ZooKeeper identities (a fresh directory has
none) and writes the users and ACLs. Two figures per start: the lab alone
(``Lab.up``: ZooKeeper, brokers, load balancers, registries) and the whole
start. Prints each round, the medians and secured/open; ``--json`` keeps the
rounds. The 2 cores are shared by every process started.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile

from bench.common import compare_rounds, machine_info, print_round


def start_once(secure: bool, airflow: bool) -> dict[str, float]:
    """Seconds to bring the lab up, and the whole pipeline, in a fresh directory."""
    from infra.local.pipeline import Pipeline
    state = tempfile.mkdtemp(prefix="samsa-startup-bench-")
    pipeline = Pipeline(state, secure=secure)
    try:
        pipeline.start(airflow=airflow, monitoring=True)
        return dict(pipeline.timings)
    finally:
        pipeline.stop()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-airflow", action="store_true", help="leave Airflow out of the start")
    p.add_argument("--json", metavar="PATH", help="write the rounds and medians here")
    args = p.parse_args(argv)
    rounds = []
    for number in range(1, args.rounds + 1):
        order = (False, True) if number % 2 else (True, False)
        row: dict = {"round": number, "order": ["secured" if s else "open" for s in order]}
        for secure in order:
            name = "secured" if secure else "open"
            timing = start_once(secure, not args.no_airflow)
            row[f"{name}_lab_s"] = timing["lab"]
            row[f"{name}_whole_s"] = timing["whole"]
        rounds.append(row)
        print_round(number, args.rounds, row, ".1f")
    result = {"machine": machine_info(), "airflow": not args.no_airflow, "rounds": rounds,
              "lab": compare_rounds(rounds, "open_lab_s", "secured_lab_s"),
              "whole": compare_rounds(rounds, "open_whole_s", "secured_whole_s")}
    for what in ("lab", "whole"):
        r = result[what]
        print(f"{what:5s}: open {r['base']:.1f} s, secured {r['other']:.1f} s (medians), "
              f"secured/open {r['ratio']:.2f} (median of the rounds' ratios "
              f"{r['ratio_median_of_rounds']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
