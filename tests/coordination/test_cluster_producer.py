"""ClusterProducer against real brokers found through ZooKeeper: it sees
every broker and partition of the cluster, sends one key to one
broker-partition from every producer, spreads keys and unkeyed messages
over the whole cluster. (Following brokers that join and leave is in
test_cluster_membership.py.)"""
from __future__ import annotations

import collections
import threading
import time
import zlib

import pytest

from broker.coordination import paths
from broker.protocol.errors import SamsaError
from broker_helpers import connect, read_partition


def _stored(cluster, topic: str, partitions: list[str]) -> dict[str, list[bytes]]:
    """{broker-partition: values} read back from every broker."""
    out = {}
    for bp in partitions:
        broker_id, partition = paths.parse_broker_partition(bp)
        with connect(cluster.brokers[broker_id].address) as conn:
            out[bp] = [m.value for m in read_partition(conn, topic, partition)]
    return out


def test_one_key_goes_to_one_partition_of_the_whole_cluster(shared_cluster, cluster_producers,
                                                            topic):
    partitions = shared_cluster.create_topic(topic, 4)          # 3 brokers x 4
    producers = [cluster_producers(shared_cluster.connect, acks="flushed", linger_ms=1)
                 for _ in range(2)]
    for producer in producers:
        assert sorted(producer.cluster.brokers()) == [0, 1, 2]
        assert producer.cluster.partitions(topic) == partitions
    keys = [b"user-%d" % k for k in range(120)]
    for round_ in range(4):                  # each key from both producers, several times
        for k, key in enumerate(keys):
            producers[(k + round_) % 2].send(topic, b"%s|%d" % (key, round_), key=key)
    for producer in producers:
        producer.flush(timeout=30)
        assert producer.failed_batches == 0

    stored = _stored(shared_cluster, topic, partitions)
    where = collections.defaultdict(set)
    for bp, values in stored.items():
        for value in values:
            where[value.split(b"|")[0]].add(bp)
    assert sum(len(v) for v in stored.values()) == 4 * len(keys)          # nothing lost
    assert all(len(bps) == 1 for bps in where.values())                  # one key, one partition
    # the documented rule: crc32(key) mod the cluster's sorted broker-partitions
    assert {key: bps.pop() for key, bps in where.items()} == {
        key: partitions[zlib.crc32(key) % len(partitions)] for key in keys}
    assert all(stored[bp] for bp in partitions)       # keys reach every partition of every broker


@pytest.mark.parametrize("partitioner", ["sticky", "random", "any"])
def test_unkeyed_messages_spread_over_the_brokers(shared_cluster, cluster_producers, topic,
                                                  partitioner):
    partitions = shared_cluster.create_topic(topic, 2)
    producer = cluster_producers(shared_cluster.connect, acks="flushed", linger_ms=1,
                                 batch_size=10, partitioner=partitioner)
    for i in range(600):
        producer.send(topic, b"m%d" % i)
    producer.flush(timeout=30)
    assert producer.failed_batches == 0
    stored = _stored(shared_cluster, topic, partitions)
    assert sorted(v for values in stored.values() for v in values) == \
        sorted(b"m%d" % i for i in range(600))
    assert {paths.parse_broker_partition(bp)[0] for bp, values in stored.items()
            if values} == {0, 1, 2}


def test_unkeyed_batches_stick_to_a_broker_partition_then_move_on(shared_cluster,
                                                                  cluster_producers, topic):
    """Sticky partitioning over the cluster: each batch whole on one
    broker-partition, the next batch on the next one (sorted order)."""
    partitions = shared_cluster.create_topic(topic, 2)          # 3 brokers x 2
    producer = cluster_producers(shared_cluster.connect, acks="flushed", linger_ms=60_000,
                                 batch_size=10)
    values = [b"m%02d" % i for i in range(60)]
    futures = [producer.send(topic, v) for v in values]
    producer.flush(timeout=30)
    assert producer.failed_batches == 0
    batches = list(dict.fromkeys(futures))
    assert [b.size() for b in batches] == [10] * 6
    stored = _stored(shared_cluster, topic, partitions)
    holder = {v: bp for bp, vs in stored.items() for v in vs}
    where = [holder[b.values[0]] for b in batches]
    assert all({holder[v] for v in b.values} == {bp} for b, bp in zip(batches, where))
    first = partitions.index(where[0])
    assert where == [partitions[(first + j) % 6] for j in range(6)]


def test_a_topic_unknown_to_zookeeper(shared_cluster, cluster_producers, topic):
    producer = cluster_producers(shared_cluster.connect, acks="written")
    with pytest.raises(SamsaError, match="no partitions"):
        producer.send(topic, b"v", key=b"k")      # a key needs the topic's partitions
    # unkeyed: to a live broker, which creates it and registers it
    producer.send(topic, b"first").result(timeout=30)
    assert producer.cluster.wait_for(lambda view: len(view.partitions(topic)) == 2, timeout=10)
    producer.send(topic, b"keyed now", key=b"k").result(timeout=30)


def test_a_send_before_any_broker_registered_waits_for_one(cluster, cluster_producers, topic):
    """A cluster starting: a send that finds no broker waits up to
    ``broker_wait_ms`` for one to register (the loader's CI failure: its
    producer started between the broker's listening and its registering)."""
    impatient = cluster_producers(cluster.connect, acks="written", broker_wait_ms=200)
    with pytest.raises(SamsaError, match=r"no broker is registered .*waited 0\.2 s"):
        impatient.send(topic, b"nowhere")

    producer = cluster_producers(cluster.connect, acks="flushed")       # waits up to 10 s
    sent: dict[str, object] = {}

    def send() -> None:
        sent["asked_at_ms"] = time.time() * 1000
        try:
            sent["offset"] = producer.send(topic, b"waited").result(timeout=30)
        except Exception as exc:     # noqa: BLE001 - reported by the assertion below
            sent["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    cluster.add_broker(0)
    sender.join(timeout=30)
    assert not sender.is_alive() and "error" not in sent, sent
    registered_at_ms = cluster.zk.exists(paths.broker_id_path(0)).ctime
    assert sent["asked_at_ms"] < registered_at_ms      # it was asked before there was a broker
    assert producer.cluster.wait_for(lambda view: view.partitions(topic), timeout=10)
    assert [v for values in _stored(cluster, topic, producer.cluster.partitions(topic)).values()
            for v in values] == [b"waited"]
