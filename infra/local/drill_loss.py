"""python -m infra.local.drill_loss (make drill-loss): a deliberate loss, and
proof that the audit reports it exactly and that it blocks its hour's load.

The demo's pipeline runs with the mirror leaving ``page_views`` out for a
while (every other topic, the audit's included, is copied) and dc-a's
brokers rolling small segments (16 KiB) and keeping one copy of each
partition (``replication_factor = 0`` there: with a replica on the other
broker, the deleted segment would still exist, as retention deleting it on
every replica would not leave it). Audited traffic goes through both
datacenters; the drill waits until the producer tier and dc-a's cluster
tier have counted everything. Then, as an operator's mistake or a
retention set below the mirror's lag would, it deletes the oldest segment
of one partition of ``page_views`` on a dc-a broker (broker stopped,
file removed, broker started again) *before the mirror copied it*. What
that segment held is read first, through the client, so the drill knows
the truth: how many messages of which topic and audit window are gone.

Then the mirror starts and copies what is left, and Airflow runs
``warehouse_load`` for the three hours. The drill passes (exit 0) only if

* the audit reports the loss exactly: at the ``mirror`` tier (source dc-a),
  the analysis ``cluster`` tier and the ``hadoop`` tier, for that topic and
  window, ``missing`` equals the messages the segment held; every other
  window, topic and tier is complete;
* the hour holding the loss is blocked: its ``warehouse_load`` run fails at
  ``audit_complete``, ``load`` never runs for it and its partition gets no
  ``_SUCCESS``; the other hours load and are marked.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field

from audit.times import iso
from infra.local.lab_security import ADMIN
from infra.local.pipeline import Pipeline, say, stop
from infra.local.traffic import HOUR_MS, TrafficResult

VICTIM_TOPIC = "page_views"
VICTIM_CLUSTER = "dc-a"
LOST_TIERS = (("mirror", VICTIM_CLUSTER), ("cluster", "analysis"), ("hadoop", "analysis"))
SEGMENT_BYTES = 16 * 1024


@dataclass
class LossReport:
    segment: str = ""
    expected: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, window) -> n
    reported: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    """(tier, cluster, topic, window) -> missing, every nonzero one the audit shows."""
    runs: dict[int, dict] = field(default_factory=dict)   # hour -> {state, tasks, success}
    lost_hours: set[int] = field(default_factory=set)

    def audit_exact(self) -> bool:
        want = {(tier, cluster, topic, window): n for tier, cluster in LOST_TIERS
                for (topic, window), n in self.expected.items()}
        return bool(want) and self.reported == want

    def load_blocked(self) -> bool:
        if not self.runs or not self.lost_hours:
            return False
        for hour, run in self.runs.items():
            if hour in self.lost_hours:
                if run["state"] != "failed" or run["tasks"].get("audit_complete") != "failed" \
                        or run["tasks"].get("load") == "success" or run["success"]:
                    return False
            elif run["state"] != "success" or not run["success"]:
                return False
        return True

    def table(self) -> str:
        lines = [f"deliberate loss: {self.segment} deleted before the mirror copied it"]
        lines.append(f"  {'tier':<9}{'cluster':<10}{'topic':<12}{'window (UTC)':<18}"
                     f"{'expected':>9}{'reported':>10}")
        keys = sorted(set(self.reported) | {(t, c, topic, w) for t, c in LOST_TIERS
                                            for topic, w in self.expected})
        for tier, cluster, topic, window in keys:
            want = self.expected.get((topic, window), 0) \
                if (tier, cluster) in LOST_TIERS else 0
            got = self.reported.get((tier, cluster, topic, window), 0)
            lines.append(f"  {tier:<9}{cluster:<10}{topic:<12}{iso(window):<18}{want:9,}"
                         f"{got:10,}  {'ok' if want == got else 'WRONG'}")
        lines.append("  every other tier, topic and window: " + (
            "complete" if self.audit_exact() else "see above"))
        lines.append("warehouse_load per hour:")
        for hour, run in sorted(self.runs.items()):
            tasks = ", ".join(f"{k} {v}" for k, v in sorted(run["tasks"].items()))
            lines.append(f"  {iso(hour)}  {run['state']:<8} "
                         f"{'_SUCCESS' if run['success'] else 'no _SUCCESS':<12} {tasks}"
                         f"{'   <- holds the loss' if hour in self.lost_hours else ''}")
        verdict = self.audit_exact() and self.load_blocked()
        lines.append("RESULT: " + ("the loss was reported exactly (topic, window, tier, count) "
                                   "and blocked its hour's load" if verdict else
                                   "FAILED: the audit or the gate did not do its job"))
        return "\n".join(lines)


class LossDrill:
    def __init__(self, pipeline: Pipeline, window_ms: int = 600_000) -> None:
        self.p = pipeline
        self.window_ms = window_ms
        self.report = LossReport()

    # ------------------------------------------------------------ the audit

    def verdicts(self, begin: int, end: int) -> list[dict]:
        return self.p.verdicts(begin, end)

    def wait_for(self, what: str, ready, begin: int, end: int, timeout: float = 180.0,
                 must: bool = True) -> list:
        """The verdicts once ``ready(verdicts)``; at the timeout, raise (or,
        unless ``must``, say so and return the last ones)."""
        deadline = time.monotonic() + timeout
        while True:
            verdicts = self.verdicts(begin, end)
            if ready(verdicts):
                return verdicts
            if time.monotonic() > deadline:
                if must:
                    raise TimeoutError(f"the audit did not show {what} within {timeout:.0f} s")
                say(f"the audit did not show {what} within {timeout:.0f} s: reporting what "
                    f"it shows")
                return verdicts
            time.sleep(2.0)

    def counted_everything_at_source(self, result: TrafficResult, begin: int, end: int) -> None:
        """Wait until the producers' counts and dc-a's cluster tier have every
        acknowledged message: the segment is deleted after they counted it."""
        acked = result.total()

        def ready(verdicts):
            produced = sum(v["produced"] for v in verdicts if v["tier"] == "producer")
            source = [v for v in verdicts if v["tier"] == "cluster"
                      and v["cluster"] == VICTIM_CLUSTER]
            return produced == acked and bool(source) and \
                all(v["state"] == "complete" for v in source)
        self.wait_for("the producers and dc-a's counter counting everything", ready, begin, end)
        say(f"the audit has the producers' {acked:,} and dc-a's cluster tier complete")

    # ------------------------------------------------------------ the loss

    def delete_oldest_segment(self) -> None:
        """Stop a dc-a broker, delete the oldest segment of a partition of
        the victim topic (what it held read first), start the broker again."""
        lab = self.p.lab
        for index in range(self.p.topology.cluster(VICTIM_CLUSTER).brokers):
            for partition_dir in sorted(glob.glob(os.path.join(
                    lab.broker_data_dir(VICTIM_CLUSTER, index), "topics", VICTIM_TOPIC, "*"))):
                segments = sorted(glob.glob(os.path.join(partition_dir, "*.log")))
                if len(segments) >= 3:
                    break
            else:
                continue
            break
        else:
            raise RuntimeError(f"no partition of {VICTIM_TOPIC} in {VICTIM_CLUSTER} has rolled "
                               f"a segment: produce more (--messages)")
        partition = int(os.path.basename(partition_dir))
        victim, next_base = segments[0], int(os.path.basename(segments[1])[:-4])
        address = lab.broker_address(VICTIM_CLUSTER, index)
        self.report.expected = self.read_range(address, partition, next_base)
        n = sum(self.report.expected.values())
        self.report.segment = (f"{VICTIM_CLUSTER}.broker-{index} {VICTIM_TOPIC}/{partition}/"
                               f"{os.path.basename(victim)} ({n:,} messages)")
        lab.kill_broker(VICTIM_CLUSTER, index, sig=signal.SIGTERM)
        os.remove(victim)
        lab.restart_broker(VICTIM_CLUSTER, index)
        say(f"deleted {self.report.segment}, windows "
            + ", ".join(f"{iso(w)} ({c})" for (_t, w), c in sorted(self.report.expected.items())))

    def read_range(self, address: str, partition: int, end: int) -> dict[tuple[str, int], int]:
        """(topic, window) -> messages in [0, end) of the partition, read with the client."""
        from broker.client.consumer import Consumer
        counts: dict[tuple[str, int], int] = {}
        security = self.p.security       # a secured lab's: read as its admin
        client = {} if security is None else security.client_settings(ADMIN)
        with Consumer(bootstrap=address, **client) as consumer:
            consumer.assign([(VICTIM_TOPIC, partition)], start="earliest")
            done = False
            while not done:
                batch = consumer.poll(timeout_ms=5000)
                if not batch:
                    raise RuntimeError(f"{VICTIM_TOPIC}/{partition} on {address}: nothing "
                                       f"fetched before offset {end}")
                for m in batch:
                    if m.offset >= end:
                        done = True
                        break
                    window = m.timestamp - m.timestamp % self.window_ms
                    counts[(VICTIM_TOPIC, window)] = counts.get((VICTIM_TOPIC, window), 0) + 1
        return counts

    # ------------------------------------------------------------ the report

    def audit_shows_the_loss(self, begin: int, end: int, tiers=LOST_TIERS) -> None:
        """Wait until ``tiers`` have reported on the copied data (the loss
        included), then keep every nonzero ``missing`` the audit shows."""
        lost = sum(self.report.expected.values())

        def ready(verdicts):
            missing: dict[tuple[str, str], int] = {}
            for v in verdicts:
                key = (v["tier"], v["cluster"])
                missing[key] = missing.get(key, 0) + v["missing"]
            return all(missing.get(t) == lost for t in tiers) and \
                all(n == 0 for t, n in missing.items() if t not in LOST_TIERS)
        verdicts = self.wait_for("exactly the loss at " + ", ".join(
            f"{tier} ({cluster})" for tier, cluster in tiers), ready, begin, end, timeout=240,
            must=False)
        self.report.reported = {(v["tier"], v["cluster"], v["topic"], v["window_begin_ms"]):
                                v["missing"] for v in verdicts if v["missing"]}
        self.report.lost_hours = {w - w % HOUR_MS for (_t, w) in self.report.expected}

    def load_runs(self, first_hour_ms: int, hours: int) -> None:
        """warehouse_load for every hour, through Airflow; each run's state,
        its tasks' states and whether its hour got ``_SUCCESS``."""
        from hadoop_loader.dag_steps import hour_partition
        from hadoop_loader.outputfs import OutputFS
        states = self.p.load_hours(first_hour_ms, hours)
        token = self.p.airflow_token()
        runs = "/api/v2/dags/warehouse_load/dagRuns"
        out = OutputFS(self.p.path("warehouse"))
        for k, (run_id, state) in enumerate(sorted(states.items())):
            hour = first_hour_ms + k * HOUR_MS
            tasks = {t["task_id"]: t["state"] for t in self.p.airflow_api(
                f"{runs}/{run_id}/taskInstances", token)["task_instances"]}
            self.report.runs[hour] = {
                "state": state, "tasks": tasks,
                "success": out.exists(hour_partition(VICTIM_TOPIC, hour), "_SUCCESS")}

    def run(self, messages: int, hours: int = 3) -> LossReport:
        result = self.p.traffic(messages, hours)
        begin = result.first_hour_ms
        end = begin + hours * HOUR_MS
        self.counted_everything_at_source(result, begin, end)
        self.delete_oldest_segment()
        say(f"the mirror now copies {VICTIM_TOPIC} too: what is left of it")
        self.p.restart_mirror()
        self.audit_shows_the_loss(begin, end, LOST_TIERS[:2])
        say("the audit shows the loss at the mirror and analysis tiers; running "
            "warehouse_load for every hour")
        self.load_runs(begin, hours)
        self.audit_shows_the_loss(begin, end)
        return self.report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.local.drill_loss", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default=".drill-loss", help="state directory (default .drill-loss)")
    p.add_argument("--messages", type=int, default=20_000,
                   help="events produced into each datacenter (default 20000)")
    p.add_argument("--sensor-timeout", type=float, default=60.0,
                   help="seconds the hour holding the loss waits on the audit before its run "
                        "fails (default 60)")
    p.add_argument("--audit-grace", type=float, default=60.0,
                   help="seconds the audit waits before it calls a window lost (default 60: "
                        "the drill's events are hours old but reported now, and a window's "
                        "grace runs from its producers' last report)")
    p.add_argument("--keep-up", action="store_true", help="leave everything running")
    p.add_argument("--insecure", action="store_true",
                   help="run the lab open (default: secured; docs/security.md)")
    args = p.parse_args(argv)
    stop(args.dir)
    shutil.rmtree(args.dir, ignore_errors=True)
    pipeline = Pipeline(args.dir, sensor_timeout_s=args.sensor_timeout,
                        audit_grace_s=args.audit_grace, secure=not args.insecure, overrides={
        f"datacenters.{VICTIM_CLUSTER}.replication_factor": "0",
        f"datacenters.{VICTIM_CLUSTER}.broker_settings": [
            "log.flush_ms=20", f"log.segment_bytes={SEGMENT_BYTES}"]})
    report = None
    try:
        pipeline.start(mirror_blacklist=VICTIM_TOPIC)
        report = LossDrill(pipeline).run(args.messages)
        print(report.table())
    finally:
        if not args.keep_up:
            stop(args.dir)
    return 0 if report is not None and report.audit_exact() and report.load_blocked() else 1


if __name__ == "__main__":
    sys.exit(main())
