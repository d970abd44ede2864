"""Rebalance time of a consumer group (issue 4's figure).

A real ZooKeeper and real brokers (2 brokers x 50 partitions = 100
partitions of one topic); a group of 10 consumers (GroupConsumer, each with
its own ZooKeeper session) in this process. Each round one consumer leaves
(a clean close: its registration node is deleted) and the time is taken
from the close until every remaining consumer has finished its rebalance
and the 100 partitions are owned exactly once among them (checked on the
consumers' own views and on ZooKeeper's owner nodes); then a new consumer
joins and the group settles again before the next round (its join time is
recorded too).

    python -m bench.rebalance [--rounds 30] [--consumers 10] [--partitions 100]

Writes bench/results/rebalance-<date>.json and the section between the
``rebalance-bench`` markers in bench/RESULTS.md. Target: p50 <= 2 s, p99 <= 5 s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

from broker.client.admin import AdminClient  # noqa: E402
from broker.client.group_consumer import GroupConsumer  # noqa: E402
from broker.coordination import paths  # noqa: E402
from broker.harness import BrokerProcess, ZooKeeperEnsemble  # noqa: E402
from bench.common import write_section  # noqa: E402

MARK_START, MARK_END = "<!-- rebalance-bench:start -->", "<!-- rebalance-bench:end -->"
TOPIC = "rebalance-bench"


def log(msg: str) -> None:
    print(f"[rebalance {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def settled(consumers: list[GroupConsumer], total: int, zk, group: str) -> bool:
    """Every consumer done rebalancing and each partition owned exactly once."""
    if not all(c.member.balanced.is_set() for c in consumers):
        return False
    owned = [p for c in consumers for p in c.owned()]
    if len(owned) != total or len(set(owned)) != total:
        return False
    owners = zk.get_children(paths.owners_path(group, TOPIC))
    return len(owners) == total


def wait_settled(consumers, total, zk, group, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if settled(consumers, total, zk, group):
            return time.monotonic() - start
        time.sleep(0.005)
    raise TimeoutError(f"the group did not settle within {timeout}s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--consumers", type=int, default=10)
    p.add_argument("--partitions", type=int, default=100, help="total, over 2 brokers")
    p.add_argument("--no-write", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    work = tempfile.mkdtemp(prefix="samsa-rebalance-")
    zk = ZooKeeperEnsemble(1, os.path.join(work, "zk")).start()
    connect = zk.connect_string("/rebalance")
    brokers = []
    consumers: list[GroupConsumer] = []
    leaves: list[float] = []
    joins: list[float] = []
    try:
        per_broker = a.partitions // 2
        for i in range(2):
            b = BrokerProcess(os.path.join(work, f"broker-{i}"), broker_id=i,
                              settings={"zookeeper": connect}).start()
            brokers.append(b)
            with AdminClient(b.address) as admin:
                admin.create_topic(TOPIC, per_broker)
        group = "bench"
        make = lambda n: GroupConsumer(zookeeper=connect, group=group,  # noqa: E731
                                       topics=(TOPIC,), consumer_id=f"consumer-{n:03d}")
        consumers = [make(i) for i in range(a.consumers)]
        zk_client = consumers[0].client
        consumers[0].cluster.wait_for(lambda v: len(v.partitions(TOPIC)) == a.partitions, 30)
        first = wait_settled(consumers, a.partitions, zk_client, group)
        log(f"{a.consumers} consumers own {a.partitions} partitions ({first:.2f} s to form)")
        next_id = a.consumers
        for r in range(1, a.rounds + 1):
            leaving = consumers.pop(r % len(consumers))
            watcher = consumers[0]
            t0 = time.monotonic()
            leaving.close()
            wait_settled(consumers, a.partitions, watcher.client, group)
            leaves.append(time.monotonic() - t0)
            t0 = time.monotonic()
            consumers.append(make(next_id))
            next_id += 1
            wait_settled(consumers, a.partitions, watcher.client, group)
            joins.append(time.monotonic() - t0)
            log(f"round {r}/{a.rounds}: leave {leaves[-1] * 1000:.0f} ms, "
                f"join {joins[-1] * 1000:.0f} ms")
    finally:
        for c in consumers:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - tear down regardless
                pass
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "consumers": a.consumers, "partitions": a.partitions, "rounds": a.rounds,
        "leave_s": leaves, "join_s": joins,
        "leave_p50_s": statistics.median(leaves), "leave_p99_s": percentile(leaves, 0.99),
        "leave_max_s": max(leaves), "join_p50_s": statistics.median(joins),
        "join_p99_s": percentile(joins, 0.99), "nproc": os.cpu_count(),
    }
    log(f"leave: p50 {result['leave_p50_s']:.2f} s, p99 {result['leave_p99_s']:.2f} s "
        f"(max {result['leave_max_s']:.2f} s); join: p50 {result['join_p50_s']:.2f} s, "
        f"p99 {result['join_p99_s']:.2f} s")
    if not a.no_write:
        write(result)
    return 0


def write(result: dict) -> None:
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = f"rebalance-{result['date'][:10]}.json"
    with open(os.path.join(HERE, "results", name), "w") as f:
        json.dump(result, f, indent=2)
    ok = lambda v, t: "yes" if v <= t else "**no**"  # noqa: E731
    section = "\n".join([
        f"## Consumer group rebalance ({result['date'][:10]})", "",
        f"**Method:** `bench/rebalance.py`: one ZooKeeper server and 2 brokers (real "
        f"processes), {result['partitions']} partitions of one topic, a group of "
        f"{result['consumers']} consumers in one process (one ZooKeeper session each), "
        f"{result['nproc']} cores. Each round one consumer closes; the time runs until every "
        f"remaining consumer has finished rebalancing and each partition is owned exactly "
        f"once (the consumers' views and ZooKeeper's owner nodes agree); then a new consumer "
        f"joins (timed the same way). {result['rounds']} rounds.", "",
        "| Figure | p50 | p99 | max | Target | Met |", "|---|---|---|---|---|---|",
        f"| A consumer leaves | {result['leave_p50_s']:.2f} s | {result['leave_p99_s']:.2f} s "
        f"| {result['leave_max_s']:.2f} s | p50 <= 2 s, p99 <= 5 s | "
        f"{ok(result['leave_p50_s'], 2)} / {ok(result['leave_p99_s'], 5)} |",
        f"| A consumer joins | {result['join_p50_s']:.2f} s | {result['join_p99_s']:.2f} s "
        f"| {max(result['join_s']):.2f} s | | |", "",
        f"Raw rounds: `bench/results/{name}`.", ""])
    write_section(os.path.join(HERE, "RESULTS.md"), section, MARK_START, MARK_END)
    log(f"wrote bench/results/{name} and bench/RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
