"""Brokers joining and leaving a running cluster: a group's consumers
rebalance to take in a new broker's partitions and to let go of a stopped
broker's; a ClusterProducer starts sending to the new broker and stops
sending to the stopped one, without losing a message."""
from __future__ import annotations

from broker.coordination import paths
from broker_helpers import connect, read_partition, wait_until
from coordination_helpers import wait_settled


def test_consumers_and_producers_follow_brokers_joining_and_leaving(
        cluster, group_consumers, cluster_producers, consume, topic):
    for broker_id in (0, 1, 2):
        cluster.add_broker(broker_id)
    partitions = cluster.create_topic(topic, 4)                      # 12
    zk, group = cluster.zk, "follow"
    consumers = [group_consumers(cluster.connect, group, [topic], consumer_id=f"c{i}")
                 for i in range(2)]
    apps = [consume(c) for c in consumers]
    wait_settled(consumers, zk, group, topic, partitions)
    producer = cluster_producers(cluster.connect, acks="written", linger_ms=1)

    def send_round(tag: bytes) -> set[bytes]:
        values = {b"%s|key-%d" % (tag, k) for k in range(200)}
        for value in sorted(values):
            producer.send(topic, value, key=value.split(b"|")[1])
        producer.flush(timeout=30)
        assert producer.failed_batches == 0
        return values

    def taken_from(tag: bytes) -> dict[bytes, str]:
        """{value: broker-partition} of what the group took of one round."""
        return {value: bp for app in apps for value, bp, *_ in list(app.taken)
                if value.startswith(tag + b"|")}

    first = send_round(b"a")
    wait_until(lambda: set(taken_from(b"a")) == first, 20, what="the first round")

    # a fourth broker with the topic: 16 partitions
    cluster.add_broker(3)
    cluster.create_topic(topic, 4, broker_ids=[3])
    with_3 = partitions + ["3-0", "3-1", "3-2", "3-3"]
    wait_settled(consumers, zk, group, topic, with_3)
    assert producer.cluster.wait_for(lambda view: view.partitions(topic) == with_3, timeout=10)
    second = send_round(b"b")
    wait_until(lambda: set(taken_from(b"b")) == second, 20, what="the second round")
    with connect(cluster.brokers[3].address) as conn:
        on_3 = [m.value for p in range(4) for m in read_partition(conn, topic, p)]
    assert on_3 and all(v.startswith(b"b|") for v in on_3)           # the producer uses it
    assert {bp for bp in taken_from(b"b").values()} == set(with_3)   # the group reads it

    # broker 1 stops (cleanly: it deregisters first)
    cluster.stop_broker(1)
    without_1 = [bp for bp in with_3 if paths.parse_broker_partition(bp)[0] != 1]
    wait_settled(consumers, zk, group, topic, without_1)
    assert producer.cluster.wait_for(lambda view: view.partitions(topic) == without_1,
                                     timeout=10)
    third = send_round(b"c")                           # not one batch failed: none went to 1
    wait_until(lambda: set(taken_from(b"c")) == third, 20, what="the third round")
    assert {bp for bp in taken_from(b"c").values()} == set(without_1)
    assert 1 not in producer.cluster.brokers()
