"""python -m infra.local.drill (make drill): the demo's pipeline under faults,
and the audit's word that nothing acknowledged was lost.

While audited traffic flows into both datacenters (through their load
balancers, or to the partitions' leaders where the clusters replicate), the
drill kills with SIGKILL, at random moments and ``--rounds`` times each: a
broker in each datacenter, a mirror process, the analysis cluster's audit
counter, and a loader run (its spark-submit); ZooKeeper once. Where the
datacenters replicate (the default topology: ``replication_factor = 2``),
a broker of each is also killed and its data directory deleted (a lost
disk) ``--rounds`` times: restarted empty, it copies its replicas back from
the leaders. Each is restarted as an operator would; before taking a broker
down and after its restart, as in a rolling restart, the drill waits until
every partition of its cluster is fully in sync (the wait after the restart
is in the fault's "back" time).
Then the loader runs to completion and the
drill waits for the audit: every tier (producer, each cluster, mirror,
hadoop) must have every acknowledged message of the drill's windows
(missing 0). It prints the faults and their recovery times, and the
duplicates each tier reports (at-least-once), and exits 1 on any loss.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from infra.local import daemon
from infra.local.pipeline import Pipeline, say, stop
from infra.local.traffic import TrafficConfig, TrafficResult, produce

TIERS = ("producer", "cluster", "mirror", "hadoop")


@dataclass
class Fault:
    kind: str
    target: str
    at_s: float
    recovered_s: float = 0.0
    note: str = ""


@dataclass
class DrillReport:
    faults: list[Fault] = field(default_factory=list)
    acked: int = 0
    failed: int = 0
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)
    lost: int = 0
    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)
    """cluster -> (partitions, bytes) whose replicas compared byte-identical."""
    replicas_differ: str = ""

    def table(self) -> str:
        lines = ["faults injected:", f"  {'kind':<18}{'target':<24}{'at (s)':>8}{'back (s)':>10}"]
        for f in self.faults:
            lines.append(f"  {f.kind:<18}{f.target:<24}{f.at_s:8.1f}{f.recovered_s:10.1f}"
                         f"  {f.note}")
        lines.append(f"messages acknowledged: {self.acked:,} (not acknowledged after the "
                     f"producers' retries: {self.failed:,}, so not counted by the audit)")
        lines.append("per tier (every window of the drill):")
        for tier, t in self.tiers.items():
            lines.append(f"  {tier:<9} produced {t['produced']:,}  counted {t['count']:,}  "
                         f"missing {t['missing']:,}  duplicated {t['duplicated']:,}")
        for cluster, (partitions, size) in self.replicas.items():
            lines.append(f"replicas of {cluster}: {partitions} partitions byte-identical "
                         f"({size:,} bytes each copy)")
        if self.replicas_differ:
            lines.append(f"REPLICAS DIFFER: {self.replicas_differ}")
        lines.append(f"LOST: {self.lost:,}" + ("" if self.lost else "  (nothing acknowledged "
                                                                     "was lost)"))
        return "\n".join(lines)


class Drill:
    def __init__(self, pipeline: Pipeline, rounds: int, seed: int) -> None:
        self.p = pipeline
        self.rounds = rounds
        self.rng = random.Random(seed)
        self.report = DrillReport()
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.result = TrafficResult()
        self.round_errors = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------ traffic

    def traffic(self, per_round: int) -> None:
        dcs = {dc: (self.p.lab.lb_address(dc), self.p.lab.zookeeper_connect(dc))
               for dc in ("dc-a", "dc-b")}
        seed = 1
        while not self.stop.is_set():
            try:
                produce(dcs, TrafficConfig(messages_per_dc=per_round, hours=1, seed=seed,
                                           batch_size=200),
                        tolerate_failures=True, result=self.result, security=self.p.security)
            except Exception as exc:          # noqa: BLE001 - e.g. ZooKeeper down: go on
                self.round_errors += 1
                say(f"traffic round {seed} stopped early: {type(exc).__name__}: {exc}"[:200])
                self.stop.wait(1.0)
            seed += 1
            self.stop.wait(0.3)               # a steady flow over the whole drill

    # ------------------------------------------------------------ faults

    def _timed(self, kind: str, target: str, kill, restart, note: str = "") -> None:
        at = self.elapsed()
        kill()
        time.sleep(self.rng.uniform(0.5, 2.0))        # down for a moment
        t = time.monotonic()
        restart()
        self.report.faults.append(Fault(kind, target, at, time.monotonic() - t, note))
        say(f"fault: {kind} {target} at {at:.1f} s, back in {time.monotonic() - t:.1f} s")

    def kill_broker(self, dc: str, wipe: bool = False) -> None:
        """kill -9 of a broker of ``dc`` (``wipe``: its data directory
        deleted too) and its restart; on a replicated cluster, "back" once
        every partition is fully in sync again."""
        lab = self.p.lab
        i = self.rng.randrange(self.p.topology.cluster(dc).brokers)
        if self.p.topology.cluster(dc).replicated:
            # as an operator does before taking a broker down: every replica in
            # sync (after a ZooKeeper outage or a lagging follower too), or the
            # broker lost could hold the only copy of what was acknowledged
            lab.wait_fully_replicated(dc, timeout=300)

        def kill() -> None:
            lab.kill_broker(dc, i)
            if wipe:
                lab.wipe_broker_data(dc, i)

        def restart() -> None:
            lab.restart_broker(dc, i)
            if self.p.topology.cluster(dc).replicated:
                lab.wait_fully_replicated(dc, timeout=300)

        self._timed("broker wiped" if wipe else "broker kill -9", f"{dc}.broker-{i}", kill,
                    restart, "data directory deleted; re-replicated" if wipe else "")

    def kill_mirror(self) -> None:
        from infra.local.lab import Lab
        mirror = Lab.open(self.p.path("mirror"))
        name = self.rng.choice(sorted(mirror.records))
        self._timed("mirror kill -9", name, lambda: mirror.kill_process(name),
                    lambda: mirror.restart_process(name))

    def kill_counter(self, cluster: str = "analysis") -> None:
        state = self.p.path(f"count-{cluster}")
        _fields, (record,) = daemon.read(state)
        self._timed("counter kill -9", f"audit-count-{cluster}", lambda: daemon.kill(state),
                    lambda: daemon.up(state, record.name, record.command))

    def kill_zookeeper(self) -> None:
        self._timed("ZooKeeper kill -9", "zookeeper-1", lambda: self.p.lab.kill_zookeeper(1),
                    lambda: self.p.lab.restart_zookeeper(1))

    def kill_loader(self) -> None:
        """A load started and killed (kill -9 of its spark-submit JVM) mid-run."""
        at = self.elapsed()
        proc = subprocess.Popen([sys.executable, "-m", "hadoop_loader.submit", "--config",
                                 self.p.path("warehouse.toml")], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **self.p.registry_env})
        time.sleep(self.rng.uniform(4.0, 9.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.report.faults.append(Fault("loader kill -9", "spark-submit", at, 0.0,
                                        "its output is loaded by the next run"))
        say(f"fault: loader kill -9 at {at:.1f} s")

    # ------------------------------------------------------------ the run

    def run(self, per_round: int) -> DrillReport:
        producer = threading.Thread(target=self.traffic, args=(per_round,), daemon=True)
        producer.start()
        faults = [lambda: self.kill_broker("dc-a"), lambda: self.kill_broker("dc-b"),
                  self.kill_mirror, self.kill_counter, self.kill_loader]
        faults += [lambda dc=dc: self.kill_broker(dc, wipe=True) for dc in ("dc-a", "dc-b")
                   if self.p.topology.cluster(dc).replicated]
        faults *= self.rounds
        self.rng.shuffle(faults)
        faults.insert(self.rng.randrange(len(faults) + 1), self.kill_zookeeper)
        for fault in faults:
            time.sleep(self.rng.uniform(1.0, 4.0))
            fault()
        time.sleep(2.0)
        self.stop.set()
        producer.join(300)
        say(f"traffic stopped: {self.result.total():,} acknowledged, "
            f"{self.result.failed:,} not")
        self.report.acked, self.report.failed = self.result.total(), self.result.failed
        out = subprocess.run([sys.executable, "-m", "hadoop_loader.submit", "--config",
                              self.p.path("warehouse.toml")], capture_output=True, text=True,
                             timeout=900, env={**os.environ, **self.p.registry_env})
        if out.returncode != 0:
            say("the final load failed:\n" + out.stdout[-3000:] + out.stderr[-3000:])
        self.settle()
        self.compare_replicas()
        return self.report

    def compare_replicas(self) -> None:
        """Every replicated cluster's replicas, byte for byte (Lab.compare_replicas)."""
        from infra.local.lab import LabError
        for spec in self.p.topology.clusters():
            if not spec.replicated:
                continue
            try:
                self.p.lab.wait_fully_replicated(spec.name, timeout=120)
                compared = self.p.lab.compare_replicas(spec.name)
            except LabError as exc:
                self.report.replicas_differ += str(exc)
                continue
            self.report.replicas[spec.name] = (len(compared), sum(compared.values()))

    def settle(self, timeout: float = 180.0) -> None:
        """Wait until every tier of the drill's windows has every acknowledged message."""
        begin = self.result.first_hour_ms
        end = int(time.time() * 1000) + 1
        deadline = time.monotonic() + timeout
        while True:
            verdicts = self.p.verdicts(begin, end)
            tiers = {}
            for tier in TIERS:
                chosen = [v for v in verdicts if v["tier"] == tier]
                tiers[tier] = {k: sum(v[k] for v in chosen)
                               for k in ("produced", "count", "missing", "duplicated")}
            lost = sum(t["missing"] for t in tiers.values())
            produced = tiers["producer"]["produced"]
            complete = produced == self.report.acked and lost == 0 and all(
                any(v["tier"] == tier for v in verdicts) for tier in TIERS)
            if complete or time.monotonic() > deadline:
                self.report.tiers, self.report.lost = tiers, (
                    lost + max(0, self.report.acked - produced))
                return
            time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.local.drill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default=".drill", help="state directory (default .drill)")
    p.add_argument("--rounds", type=int, default=2, help="times each fault is injected")
    p.add_argument("--per-round", type=int, default=500,
                   help="events per datacenter per traffic round")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--keep-up", action="store_true")
    p.add_argument("--insecure", action="store_true",
                   help="run the lab open (default: secured; docs/security.md)")
    args = p.parse_args(argv)
    stop(args.dir)
    pipeline = Pipeline(args.dir, secure=not args.insecure)
    report = None
    try:
        pipeline.start(airflow=False)
        say(f"drill: seed {args.seed}, {args.rounds} rounds of faults")
        report = Drill(pipeline, args.rounds, args.seed).run(args.per_round)
        print(report.table())
    finally:
        if not args.keep_up:
            stop(args.dir)
    return 0 if report is not None and report.lost == 0 and not report.replicas_differ else 1


if __name__ == "__main__":
    sys.exit(main())
