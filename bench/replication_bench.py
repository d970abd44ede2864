"""Replication's costs and failover times (issue 28, point 8), on one machine.

    .venv/bin/python -m bench.replication_bench              # full run
    .venv/bin/python -m bench.replication_bench --quick      # smoke run, no RESULTS.md update

Three brokers and a ZooKeeper server, real processes, on this machine's 2
cores (the producer shares them). Figures:

  produce      batch 50, 200-byte values, one partition, --messages per run:
               A = replication factor 1, acks=written (the leader has it);
               B = factor 3, acks=all (every in-sync replica has it);
               C = factor 3, acks=written. The three alternate within each
               round (a new topic per run), --runs rounds; throughput =
               messages / (first send -> flush() returned: all acknowledged).
               Ratios B/A and C/A per round, and their medians.
  failover     a partition of factor 3 (min.insync.replicas 2): the time from
               the leader's kill -9 (or SIGTERM: a clean shutdown) to the first
               acks=all produce answered by the new leader, as a producer
               polling ZooKeeper for the leader every 10 ms sees it.
  re-replicate a follower of a partition holding --rereplicate-mb is killed,
               its data directory deleted, and started again: the time until
               it is back in the in-sync set.

Writes bench/results/replication-<UTC date>.json and the section between the
replication-bench markers in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

from bench.common import (MESSAGE_BYTES, VALUE_SIZE, log, machine_info, random_values,
                          save_results, summarize)

START = "<!-- replication-bench:start -->"
END = "<!-- replication-bench:end -->"
BROKER_SETTINGS = {"zookeeper_session_timeout_ms": 6000, "replica_lag_time_max_ms": 10_000}


class Lab:
    """A ZooKeeper server and three brokers under one chroot."""

    def __init__(self, directory: str) -> None:
        from broker.harness import BrokerProcess, ZooKeeperEnsemble
        self.directory = directory
        self.zk = ZooKeeperEnsemble(1, os.path.join(directory, "zk")).start()
        self.connect = self.zk.connect_string("/bench")
        self.brokers = {}
        for b in range(3):
            self.brokers[b] = BrokerProcess(
                os.path.join(directory, f"broker-{b}"), broker_id=b,
                settings={"zookeeper": self.connect, **BROKER_SETTINGS}).start()
        from kazoo.client import KazooClient
        self.client = KazooClient(hosts=self.connect, timeout=10)
        self.client.start(timeout=15)
        from broker.coordination import paths
        self._wait(lambda: all(self.client.exists(paths.broker_id_path(b)) for b in range(3)),
                   30, "the brokers to register")

    def close(self) -> None:
        self.client.stop()
        self.client.close()
        for broker in self.brokers.values():
            broker.stop()
        self.zk.stop()

    @staticmethod
    def _wait(condition, timeout: float, what: str, interval: float = 0.01):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"timed out waiting for {what}")

    def state(self, topic: str, partition: int = 0):
        from broker.coordination import paths
        from broker.coordination.replica_state import PartitionState
        data, _ = self.client.get(paths.partition_state_path(topic, partition))
        return PartitionState.from_json(data)

    def create(self, topic: str, factor: int, **config: str) -> None:
        from broker.client.admin import AdminClient
        with AdminClient(self.brokers[0].address) as admin:
            admin.create_topic(topic, 1, {"replication.factor": str(factor), **config})
        self._wait(lambda: self.serving(topic) is not None, 30, f"{topic} to be served")
        if factor > 1:
            self._wait(lambda: len(self.state(topic).isr) == factor, 30, f"{topic} in sync")

    def serving(self, topic: str) -> int | None:
        """The live leader of ``topic``/0 if it answers an acks=all produce."""
        from broker.client.connection import BrokerConnection, BrokerConnectionError
        from broker.protocol import api
        from broker.protocol.message import encode_values
        leader = self.state(topic).leader
        if leader not in self.brokers or self.brokers[leader].proc.poll() is not None:
            return None
        host, port = self.brokers[leader].address.split(":")
        try:
            with BrokerConnection(host, int(port), "bench", connect_timeout=1,
                                  request_timeout=5) as conn:
                resp = conn.request(api.ProduceRequest(api.Acks.ALL, 5000, (
                    api.ProduceEntry(topic, 0, encode_values([b"probe"], 0)),)))
            return leader if resp.results[0].error == 0 else None
        except (BrokerConnectionError, OSError):
            return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_run(lab: Lab, topic: str, acks: str, messages: int,
                values: list[bytes]) -> tuple[float, dict[str, float]]:
    """(messages/s, CPU seconds of the run: the producer's process, the
    leader, the followers together)."""
    from broker.client.cluster_producer import ClusterProducer
    leader = lab.state(topic).leader
    with ClusterProducer(lab.connect, acks=acks, batch_size=50, linger_ms=5,
                         max_in_flight_per_partition=5) as producer:
        producer.send(topic, b"warm-up")
        producer.flush(30)
        before = {b: cpu_seconds(br.proc.pid) for b, br in lab.brokers.items()}
        own = time.process_time()
        started = time.perf_counter()
        n = len(values)
        for i in range(messages):
            producer.send(topic, values[i % n])
        producer.flush(300)
        took = time.perf_counter() - started
        own = time.process_time() - own
        used = {b: cpu_seconds(br.proc.pid) - before[b] for b, br in lab.brokers.items()}
        if producer.failed_batches:
            raise RuntimeError(f"{producer.failed_batches} batches failed")
    cpu = {"producer": own, "leader": used[leader],
           "followers": sum(v for b, v in used.items() if b != leader)}
    return messages / took, cpu


def failover_run(lab: Lab, topic: str, how: str) -> float:
    old = lab.state(topic).leader
    epoch = lab.state(topic).leader_epoch
    broker = lab.brokers[old]
    started = time.monotonic()
    if how == "kill":
        broker.kill()
    else:
        broker.proc.send_signal(signal.SIGTERM)
    lab._wait(lambda: lab.state(topic).leader_epoch > epoch and
              lab.serving(topic) is not None, 60, "a new serving leader")
    took = time.monotonic() - started
    if how != "kill":
        broker.proc.wait(30)
    broker.start()
    lab._wait(lambda: len(lab.state(topic).isr) == 3, 60, "the old leader back in sync")
    return took


def rereplicate_run(lab: Lab, topic: str) -> float:
    state = lab.state(topic)
    victim = next(b for b in state.isr if b != state.leader)
    broker = lab.brokers[victim]
    broker.kill()
    shutil.rmtree(broker.data_dir)
    lab._wait(lambda: victim not in lab.state(topic).isr, 60, "the victim out of sync")
    started = time.monotonic()
    broker.start()
    lab._wait(lambda: victim in lab.state(topic).isr, 600, "the wiped broker back in sync",
              interval=0.05)
    return time.monotonic() - started


def fill(lab: Lab, topic: str, megabytes: int) -> None:
    from broker.client.cluster_producer import ClusterProducer
    values = random_values()
    count = megabytes * (1 << 20) // MESSAGE_BYTES
    with ClusterProducer(lab.connect, acks="written", batch_size=500, linger_ms=5,
                         max_in_flight_per_partition=5) as producer:
        for i in range(count):
            producer.send(topic, values[i % len(values)])
        producer.flush(600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small, no RESULTS.md update")
    parser.add_argument("--runs", type=int, default=5, help="rounds of A/B/C (5)")
    parser.add_argument("--messages", type=int, default=1_000_000, help="per produce run")
    parser.add_argument("--failovers", type=int, default=5, help="kills and clean stops (5)")
    parser.add_argument("--rereplicate-mb", type=int, default=1024)
    args = parser.parse_args()
    # a SIGTERM (timeout, kill) unwinds through the finally below: no broker
    # or ZooKeeper of the run is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.runs, args.messages, args.failovers, args.rereplicate_mb = 1, 20_000, 1, 32
    directory = tempfile.mkdtemp(prefix="samsa-replication-bench-")
    lab = Lab(directory)
    values = random_values()
    result: dict = {"machine": machine_info(), "args": vars(args),
                    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        rounds = []
        for r in range(args.runs):
            row = {}
            for label, factor, acks in (("A", 1, "written"), ("B", 3, "all"),
                                        ("C", 3, "written")):
                topic = f"p{r}{label.lower()}"
                lab.create(topic, factor, **({"min.insync.replicas": "2"} if factor > 1 else {}))
                row[label], row[f"{label}_cpu"] = produce_run(lab, topic, acks,
                                                              args.messages, values)
                log(f"round {r + 1}: {label} (factor {factor}, acks={acks}): "
                    f"{row[label]:,.0f} msg/s; CPU s: " + ", ".join(
                        f"{k} {v:.1f}" for k, v in row[f"{label}_cpu"].items()))
            row["B/A"], row["C/A"] = row["B"] / row["A"], row["C"] / row["A"]
            rounds.append(row)
        result["produce"] = rounds
        lab.create("failover", 3, **{"min.insync.replicas": "2"})
        result["failover_kill_s"] = [failover_run(lab, "failover", "kill")
                                     for _ in range(args.failovers)]
        result["failover_clean_s"] = [failover_run(lab, "failover", "term")
                                      for _ in range(args.failovers)]
        lab.create("bulk", 2)
        fill(lab, "bulk", args.rereplicate_mb)
        result["rereplicate_s"] = rereplicate_run(lab, "bulk")
    finally:
        lab.close()
        shutil.rmtree(directory, ignore_errors=True)
    section = render(result)
    save_results(f"replication-{dt.date.today().isoformat()}", result, section, START, END,
                 write_md=not args.quick)


def render(result: dict) -> str:
    rounds = result["produce"]
    med = {k: statistics.median(r[k] for r in rounds) for k in ("A", "B", "C", "B/A", "C/A")}
    cpu = {label: {part: statistics.median(r[f"{label}_cpu"][part] for r in rounds)
                   for part in ("producer", "leader", "followers")} for label in ("A", "B", "C")}
    m = result["machine"]
    kill, clean = summarize(result["failover_kill_s"]), summarize(result["failover_clean_s"])
    mb = result["args"]["rereplicate_mb"]
    return "\n".join([
        f"Measured {result['date']} on {m.get('cpu_model', '?')} ({m.get('nproc')} cores), "
        f"commit {m['git']['head']}: three brokers, one ZooKeeper, the producer, all on this "
        f"machine. Produce: batch 50, {VALUE_SIZE}-byte values, "
        f"{result['args']['messages']:,} messages per run, one partition; "
        f"{len(rounds)} rounds of A, B, C alternating; medians.",
        "",
        "| configuration | msg/s (median) | ratio to A (median of per-round ratios) |",
        "|---|---|---|",
        f"| A: factor 1, acks=written | {med['A']:,.0f} | 1 |",
        f"| B: factor 3, acks=all (min.insync 2) | {med['B']:,.0f} | {med['B/A']:.2f} "
        f"(aim >= 0.4) |",
        f"| C: factor 3, acks=written | {med['C']:,.0f} | {med['C/A']:.2f} (aim >= 0.8) |",
        "",
        "Where the 2 cores went, CPU seconds per run (medians; the producer's process, the "
        "leader, the two followers together; the run's wall time for scale):",
        "",
        "| configuration | producer | leader | followers | wall |",
        "|---|---|---|---|---|",
        *[f"| {label} | {cpu[label]['producer']:.1f} | {cpu[label]['leader']:.1f} | "
          f"{cpu[label]['followers']:.1f} | {result['args']['messages'] / med[label]:.1f} |"
          for label in ("A", "B", "C")],
        "",
        f"Failover (factor 3, session timeout 6 s): kill -9 of the leader to the first "
        f"acks=all write answered by the new leader: median {kill['median']:.2f} s "
        f"(min {kill['min']:.2f}, max {kill['max']:.2f}, {kill['runs']} runs; aim <= 8 s); "
        f"clean shutdown (SIGTERM): median {clean['median']:.2f} s (min {clean['min']:.2f}, "
        f"max {clean['max']:.2f}; aim <= 1 s).",
        "",
        f"Re-replication: a follower wiped and restarted was back in sync with {mb} MB in "
        f"{result['rereplicate_s']:.1f} s.",
    ])


if __name__ == "__main__":
    main()
