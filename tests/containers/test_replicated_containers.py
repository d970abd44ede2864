"""A replicated datacenter in containers (infra/docker/pipeline.py with a
topology's ``replication_factor``): dc-a's two brokers keep every partition
on both, behind an HAProxy container.

Under acks=all load from a ClusterProducer, the container of the broker
leading the most partitions is killed and removed with its data volume, and
a new one with the same id starts on an empty volume (a machine and its disk
replaced, as a cloud does). The producer goes on through the failover; the
new broker copies every partition back and rejoins every in-sync set. Then
the other broker is killed (``docker kill``): the replaced one, alone, leads
every partition and serves every acknowledged message, in order per
partition. A producer with only the load balancer's address is served too
(partitioner "any": the broker it reaches takes the batch into a partition
it leads).
"""
from __future__ import annotations


import pytest

from broker.client.cluster_producer import ClusterProducer
from broker.client.producer import Producer, ProducerConfig
from broker.coordination import replica_admin
from broker.coordination.zk import make_client, start_client
from broker_helpers import topic_values, wait_until
from container_helpers import Sender, running_pipeline
from infra.docker.pipeline import ContainerPipeline
from infra.local.traffic import create_topics
from infra.topology import ClusterSpec, LoadBalancerSpec, Topology, ZooKeeperSpec

TOPIC = "rc-events"
PARTITIONS = 4
BROKERS = ("log.flush_ms=10", "zookeeper_session_timeout_ms=4000",
           "replica_lag_time_max_ms=4000")


def topology() -> Topology:
    return Topology(
        name="replicated-containers", zookeeper=ZooKeeperSpec(size=1),
        datacenters=(ClusterSpec("dc-a", brokers=2, default_partitions=2,
                                 replication_factor=2, broker_settings=BROKERS,
                                 load_balancer=LoadBalancerSpec()),))


@pytest.fixture(scope="module")
def pipeline(docker_host, tmp_path_factory, request):
    with running_pipeline(topology(), str(tmp_path_factory.mktemp("replicated-containers")),
                          request, timeout=90) as pipe:
        yield pipe


def replicas(pipe: ContainerPipeline):
    connect = pipe.zookeeper_connect("dc-a")
    client = make_client(connect)
    start_client(client, connect, timeout=10.0, what="test")
    try:
        return replica_admin.describe(client, [TOPIC])
    finally:
        client.stop()
        client.close()


def fully_in_sync(pipe: ContainerPipeline) -> bool:
    rows = replicas(pipe)
    return len(rows) == PARTITIONS and all(
        set(r.isr) == {0, 1} and r.leader_live and not r.restarted for r in rows)


@pytest.mark.timeout(600)
def test_a_replaced_broker_and_its_lost_volume_lose_no_acknowledged_message(pipeline):
    connect = pipeline.zookeeper_connect("dc-a")
    assert create_topics(connect, [TOPIC], PARTITIONS) is True
    wait_until(lambda: fully_in_sync(pipeline), 30, interval=0.2,
               what="every partition on both brokers, in sync")
    sender = Sender(lambda: ClusterProducer(connect, ProducerConfig(
        acks="all", batch_size=50, linger_ms=2, retries=50, request_timeout_ms=10_000)),
        TOPIC, size=50, keys=16)
    sender.start()
    try:
        wait_until(lambda: len(sender.acknowledged) >= 1000 or sender.error, 60,
                   interval=0.05, what="1000 messages acknowledged by both replicas")
        assert sender.error is None, sender.error
        leaders = [r.leader for r in replicas(pipeline)]
        victim = max((0, 1), key=leaders.count)
        survivor = 1 - victim
        pipeline.replace_broker("dc-a", victim, timeout=90)
        at_replace = len(sender.acknowledged)
        wait_until(lambda: len(sender.acknowledged) >= at_replace + 1000 or sender.error, 90,
                   interval=0.05, what="the producer to go on after the failover")
        assert sender.error is None, sender.error
        # the new, empty broker copies every partition back and rejoins
        wait_until(lambda: fully_in_sync(pipeline), 120, interval=0.2,
                   what=lambda: f"the replaced broker back in every in-sync set: "
                                f"{[r.line() for r in replicas(pipeline)]}")
    finally:
        sender.halt.set()
        sender.join(120)
    assert sender.error is None, sender.error
    acknowledged = sender.acknowledged
    assert len(acknowledged) >= 2000
    # the only other copy goes: the replaced broker alone must hold everything
    pipeline.brokers[("dc-a", survivor)].kill()
    wait_until(lambda: all(r.leader == victim for r in replicas(pipeline)), 60, interval=0.2,
               what="the replaced broker to lead every partition")
    # (ZooKeeper may name it before it serves every partition: read until it does)
    stored: list[bytes] = []

    def holds_everything() -> bool:
        stored[:] = topic_values(pipeline, "dc-a", TOPIC, [victim])
        return set(acknowledged) <= set(stored)
    wait_until(holds_everything, 30, interval=0.2,
               what=lambda: f"every acknowledged message on the replaced broker: "
                            f"{len(set(acknowledged) - set(stored))} missing")
    # in order within each key's partition: a key's values rise
    by_key: dict[int, list[int]] = {}
    for value in stored:
        if not value.startswith(TOPIC.encode() + b"-"):
            continue
        n = int(value[len(TOPIC) + 1:])
        by_key.setdefault(n % 16, []).append(n)
    for key, seen in by_key.items():
        firsts = sorted(set(seen), key=seen.index)
        assert firsts == sorted(firsts), f"key k{key} out of order"
    # a producer with only the load balancer: the broker it reaches picks a partition it leads
    with Producer(bootstrap=pipeline.lb_address("dc-a"), acks="all",
                  partitioner="any") as producer:
        batch = producer.send(TOPIC, b"through-haproxy")
        batch.result(timeout=60)
    wait_until(lambda: b"through-haproxy" in topic_values(pipeline, "dc-a", TOPIC, [victim]),
               30, interval=0.2, what="the load balancer's message stored")
    pipeline.brokers[("dc-a", survivor)].start(90)
