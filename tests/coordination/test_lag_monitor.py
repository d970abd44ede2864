"""broker/lag/monitor.py against real brokers and ZooKeeper: every
partition of a group's topics is evaluated, owned or not, with its log end,
committed offset, lag in bytes and in seconds (the age of the next message);
a group whose member left shows its partitions unowned and goes STOP once
the threshold passes (time moved by the monitor's clock, not by sleeping);
a rewound offset is REWIND; a caught-up group is OK with lag 0."""
from __future__ import annotations

import time

from broker.lag import burrow
from broker.lag.monitor import LagMonitor
from broker.lag.evaluator import Status, Thresholds
from broker.coordination import offsets as zk_offsets
from broker.coordination import paths
from broker_helpers import wait_until
from coordination_helpers import wait_settled


class Clock:
    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


def test_a_group_seen_from_outside(shared_cluster, group_consumers, cluster_producers, topic):
    partitions = shared_cluster.create_topic(topic, 2)                      # 6
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "watched"
    produced_at = int(time.time() * 1000) - 60_000                          # a minute old
    producer = cluster_producers(connect, acks="flushed")
    for i in range(300):
        producer.send(topic, b"v%03d" % i, key=b"k%d" % i, timestamp=produced_at)
    producer.flush(timeout=30)

    consumer = group_consumers(connect, group, [topic], consumer_id="only",
                               auto_commit_interval_ms=100)
    wait_settled([consumer], zk, group, topic, partitions)
    taken = 0
    for _m in consumer.messages(timeout_ms=2000):       # take some, not all
        taken += 1
        if taken == 100:
            break
    consumer.commit()
    committed = zk_offsets.read_offsets(zk, group)
    assert committed

    clock = Clock()
    monitor = LagMonitor(zk, Thresholds(window_size=3, stop_min_ms=5_000), clock=clock)
    try:
        status = monitor.evaluate([group])[group]
        parts = {p.partition: p for p in status.partitions}
        assert sorted(parts) == sorted(partitions)                # every one, owned or not
        assert status.members == ["only"]
        for bp, p in parts.items():
            assert p.owner == "only" and p.owner_alive
            assert p.committed == committed.get((topic, bp))
            assert p.log_end is not None and p.lag_bytes == p.log_end - (p.committed or 0)
            if p.lag_bytes:
                assert 55 <= p.lag_seconds <= 120                   # the next message's age
            else:
                assert p.lag_seconds == 0
        assert status.total_lag_bytes == sum(p.lag_bytes for p in parts.values()) > 0
        assert status.status is Status.OK
        assert status.most_behind.lag_bytes == max(p.lag_bytes for p in parts.values())
        body = burrow.consumer_status("dc", status, show_all=True)
        assert body["status"] == "OK" and body["totallag"] == status.total_lag_bytes

        # the member leaves; its partitions stay in view, unowned, behind
        consumer.close()
        wait_until(lambda: not zk.get_children(paths.consumer_ids_path(group)), 10,
                   what="the member to leave")
        status = monitor.evaluate([group])[group]
        assert len(status.partitions) == len(partitions)
        assert all(p.owner is None and not p.owner_alive for p in status.partitions)
        assert status.status is Status.OK                          # not silent long enough
        clock.skew = 6.0                                           # past stop_min_ms
        status = monitor.evaluate([group])[group]
        behind = [p for p in status.partitions if p.lag_bytes]
        assert behind and all(p.status is Status.STOP for p in behind)
        assert status.status is Status.STOP
        body = burrow.consumer_status("dc", status, show_all=False)
        assert body["maxlag"]["status"] == "STOP" and body["status"] == "ERR"

        # someone moves one offset back: REWIND
        clock.skew = 0.0
        bp = next(p.partition for p in behind if p.committed)   # one with a commit > 0
        zk_offsets.commit_offsets(zk, group, {(topic, bp): 0})
        wait_until(lambda: monitor.evaluate([group])[group].status is Status.REWIND, 10,
                   what="the rewind to show")
    finally:
        monitor.close()


def test_a_caught_up_group_is_ok(shared_cluster, group_consumers, cluster_producers, topic):
    partitions = shared_cluster.create_topic(topic, 1)
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "caught-up"
    producer = cluster_producers(connect, acks="flushed")
    for i in range(30):
        producer.send(topic, b"v", key=b"k%d" % i)
    producer.flush(timeout=30)
    consumer = group_consumers(connect, group, [topic], auto_commit_interval_ms=100)
    wait_settled([consumer], zk, group, topic, partitions)
    n = sum(1 for _ in consumer.messages(timeout_ms=1500))
    assert n == 30
    consumer.commit()
    monitor = LagMonitor(zk)
    try:
        status = monitor.evaluate()[group]        # every group of the cluster
        assert status.status is Status.OK
        assert all(p.lag_bytes == 0 and p.lag_seconds == 0 for p in status.partitions)
        assert status.total_lag_bytes == 0
    finally:
        monitor.close()
