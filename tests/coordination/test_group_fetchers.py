"""Several fetchers per broker (GroupConsumerConfig.fetchers_per_broker, the
mirror's fetchers_per_source_broker): a broker's owned partitions are dealt
over that many connections, each with its own fetch in flight; every
message still arrives, in order within its partition."""
from __future__ import annotations

import threading

import pytest

from broker.client.group_consumer import GroupConsumerConfig, _shares
from broker.client.producer import Producer
from broker_helpers import wait_until


def test_a_brokers_partitions_are_dealt_round_robin_and_stably():
    starts = {("t", p): (f"0-{p}", "earliest") for p in (3, 0, 2, 1, 4)}
    shares = _shares(starts, 2)
    assert [sorted(s) for s in shares] == [[("t", 0), ("t", 2), ("t", 4)],
                                           [("t", 1), ("t", 3)]]
    assert all(s[tp] == starts[tp] for s in shares for tp in s)
    # never more fetchers than partitions, and one fetcher takes them all
    assert [len(s) for s in _shares(starts, 8)] == [1] * 5
    assert _shares(starts, 1) == [dict(sorted(starts.items()))]


def test_fetchers_per_broker_must_be_positive():
    with pytest.raises(ValueError, match="fetchers_per_broker"):
        GroupConsumerConfig(zookeeper="127.0.0.1:2181", group="g", topics=("t",),
                            fetchers_per_broker=0)


def test_the_fetchers_settings_are_checked_before_any_fetcher_runs():
    """Refused when the consumer is made, not in a fetcher thread that would
    die with nobody told."""
    with pytest.raises(ValueError, match="fetch_rtt_max_bytes"):
        GroupConsumerConfig(zookeeper="127.0.0.1:2181", group="g", topics=("t",),
                            fetch_max_bytes=32 << 20, fetch_rate_bytes=1)


def test_every_message_arrives_in_order_over_several_fetchers_per_broker(
        shared_cluster, group_consumers, consume, topic):
    partitions = shared_cluster.create_topic(topic, 4)          # 3 brokers x 4
    per_partition = 500
    for broker_id, broker in shared_cluster.brokers.items():
        with Producer(bootstrap=broker.address, acks="written", batch_size=100) as producer:
            for p in range(4):
                for i in range(per_partition):
                    producer.send(topic, b"%d-%d:%d" % (broker_id, p, i), partition=p)
    consumer = group_consumers(shared_cluster.connect, "dealt", [topic],
                               fetchers_per_broker=3, fetch_max_bytes=4096)
    app = consume(consumer)
    total = len(partitions) * per_partition
    wait_until(lambda: len(app.taken) >= total, 60, what=f"{total} messages")
    names = [t.name for t in threading.enumerate()
             if t.name.startswith("fetcher-dealt-")]
    app.stop()
    # three connections to each of the three brokers
    assert len(names) == 9, names
    by_partition: dict[str, list[bytes]] = {}
    for value, bp, _offset, _at in app.taken:
        by_partition.setdefault(bp, []).append(value)
    assert sorted(by_partition) == sorted(partitions)
    for bp, values in by_partition.items():
        broker_id, p = bp.split("-")
        # in order, every one (a duplicate could only follow a rebalance: none here)
        assert values == [b"%s-%s:%d" % (broker_id.encode(), p.encode(), i)
                          for i in range(per_partition)], bp
