"""How long one lag evaluation takes at scale (issue 16: 100 groups x 100
partitions, 10,000 partition evaluations, in <= 1 s).

    python -m bench.lag_bench [--groups 100] [--partitions 100] [--runs 5]

A ZooKeeper server and two brokers; one topic of ``--partitions`` partitions
(half on each broker) holding a few messages each; ``--groups`` groups, each
with a committed offset (at a different message per group) and an owner
node for every partition, written straight into ZooKeeper. Then
``LagMonitor.evaluate()`` of every group, timed: the ZooKeeper reads
(multiRead requests, broker/coordination/bulk_read.py), one Fetch per broker,
the rules. The first
evaluation (connections, the cluster view) is reported apart; the median of
the next ``--runs`` is the figure. Results to bench/results/lag.json and a
section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench.common import log, machine_info, save_results
from broker.client.admin import AdminClient
from broker.lag.monitor import LagMonitor
from broker.client.producer import Producer
from broker.coordination import paths
from broker.harness import BrokerProcess, ZooKeeperEnsemble

SECTION_START = "<!-- lag_bench:start -->"
SECTION_END = "<!-- lag_bench:end -->"
TOPIC = "events"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lag_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--partitions", type=int, default=100, help="of the topic (default 100)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    from kazoo.client import KazooClient

    work = tempfile.mkdtemp(prefix="samsa-lag-bench-")
    zk = ZooKeeperEnsemble(1, os.path.join(work, "zk")).start()
    connect = zk.connect_string("/lagbench")
    brokers = []
    try:
        root = KazooClient(hosts=zk.connect_string(""))
        root.start(15)
        root.ensure_path("/lagbench")
        root.stop()
        for broker_id in (0, 1):
            b = BrokerProcess(os.path.join(work, f"b{broker_id}"), broker_id=broker_id,
                              settings={"zookeeper": connect})
            b.start()
            brokers.append(b)
        per_broker = args.partitions // 2
        for b in brokers:
            with AdminClient(b.address) as admin:
                admin.create_topic(TOPIC, per_broker)
            with Producer(bootstrap=b.address, acks="flushed", batch_size=50) as producer:
                for part in range(per_broker):
                    producer.send_many(TOPIC, [b"x" * 100] * 20, partition=part,
                                       timestamp=int(time.time() * 1000) - 60_000)
                producer.flush(60)
        client = KazooClient(hosts=connect)
        client.start(15)
        bps = [paths.broker_partition(b, q) for b in (0, 1) for q in range(per_broker)]
        t0 = time.monotonic()
        writes = []
        for g in range(args.groups):
            group = f"group-{g:03d}"
            for bp in bps:
                offset = (g % 20) * 122                       # the g-th message
                writes.append(client.create_async(paths.offsets_path(group, TOPIC, bp),
                                                  str(offset).encode(), makepath=True))
                writes.append(client.create_async(paths.owners_path(group, TOPIC, bp),
                                                  b"gone-member", makepath=True))
        for w in writes:
            w.get(60)
        log(f"{args.groups} groups x {len(bps)} partitions written to ZooKeeper in "
            f"{time.monotonic() - t0:.1f} s")
        monitor = LagMonitor(client)
        t0 = time.monotonic()
        first = monitor.evaluate()
        first_s = time.monotonic() - t0
        evaluated = sum(len(s.partitions) for s in first.values())
        assert evaluated == args.groups * len(bps), evaluated
        times = []
        for run in range(args.runs):
            t0 = time.monotonic()
            result = monitor.evaluate()
            times.append(time.monotonic() - t0)
            log(f"run {run + 1}: {sum(len(s.partitions) for s in result.values()):,} "
                f"partitions of {len(result)} groups in {times[-1]:.3f} s")
        monitor.close()
        client.stop()
        client.close()
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": machine_info(),
              "groups": args.groups, "partitions": len(bps), "evaluated": evaluated,
              "first_s": first_s, "runs_s": times, "median_s": statistics.median(times)}
    m = result["machine"]
    text = "\n".join([
        f"## Lag evaluation at scale (issue 16), {result['date']}", "",
        "**Method:** `python -m bench.lag_bench` (its docstring): one ZooKeeper server, two "
        f"brokers, one topic of {len(bps)} partitions, {args.groups} groups each with a "
        "committed offset and an owner node on every partition (written into ZooKeeper); "
        "`LagMonitor.evaluate()` of every group: ZooKeeper multiRead requests of up to 1,000 reads "
        "each (broker/coordination/bulk_read.py), all sent before the first answer, one "
        "Fetch per broker, Burrow's rules. "
        f"Machine: {m.get('nproc')} cores ({m.get('cpu_model', '?')}), Python {m['python']}.",
        "",
        "| Figure | median | runs |", "|---|---|---|",
        f"| one evaluation of {evaluated:,} partitions ({args.groups} groups x {len(bps)}) | "
        f"**{result['median_s']:.2f} s** | {' '.join(f'{x:.2f}' for x in times)} |",
        f"| the first evaluation (connections, cluster view) | {first_s:.2f} s | |",
        "", "Target: <= 1 s per cycle.", ""])
    save_results("lag", result, text, SECTION_START, SECTION_END, not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
