"""ZooKeeper is for discovery and coordination only: a broker started while
ZooKeeper is unreachable serves anyway, says so in its log, and registers
once ZooKeeper comes up; while ZooKeeper is down, brokers go on serving
produce and fetch, and a group's consumers keep their partitions (their
sessions outlive a short outage: nothing is rebalanced).

Each test runs a ZooKeeper of its own (``own_zookeeper``): the session's
server must never stop."""
from __future__ import annotations

import pytest
import json
import os

from broker.client.producer import Producer
from broker.coordination import paths
from broker.protocol.errors import ErrorCode
from broker_helpers import connect, log_text, message_set, produce, read_partition, wait_until
from coordination_helpers import Cluster, chroot_client, wait_settled


def _log_records(path: str, start: int = 0) -> list[dict]:
    return [json.loads(line) for line in log_text(path, start).splitlines()
            if line.startswith("{")]


@pytest.mark.slow
def test_broker_without_zookeeper_serves_logs_retries_and_registers_later(
        own_zookeeper, broker_factory, topic, tmp_path):
    data_dir = str(tmp_path / "data")
    # the topic is made by a broker without ZooKeeper, which then stops
    first = broker_factory(data_dir=data_dir, broker_id=5)
    with Producer(bootstrap=first.address, acks="flushed") as producer:
        for i in range(10):
            producer.send(topic, b"before-zk-%d" % i, partition=0)
        producer.flush(timeout=30)
        assert producer.failed_batches == 0
    assert first.stop() == 0

    zk_connect = own_zookeeper.connect_string("/late")   # nothing listens there yet
    broker = broker_factory({"zookeeper": zk_connect}, broker_id=5, data_dir=data_dir)

    # it serves produce and fetch of its topics meanwhile
    with Producer(bootstrap=broker.address, acks="flushed") as producer:
        for i in range(10, 20):
            producer.send(topic, b"before-zk-%d" % i, partition=0)
        producer.flush(timeout=30)
        assert producer.failed_batches == 0
    with connect(broker.address) as conn:
        assert [m.value for m in read_partition(conn, topic, 0)] == \
            [b"before-zk-%d" % i for i in range(20)]
        # but makes no new topic while it cannot tell whether the name
        # is a replicated topic of the cluster (a broker that lost its disk
        # would otherwise take a replicated partition's writes into a twin)
        r = produce(conn, "brand-new", 0, message_set([b"x"]))
        assert r.error == ErrorCode.NOT_LEADER_FOR_PARTITION, r
        assert "cannot tell yet" in r.message and "retry" in r.message

    # a clear error, naming the address, once the first attempt gives up; it retries
    def error_logged() -> list[dict]:
        return [r for r in _log_records(broker.log_path)
                if r["level"] == "ERROR" and "cannot reach ZooKeeper" in r["msg"]]

    errors = wait_until(error_logged, 20, interval=0.1, what="the ZooKeeper error in the log")
    assert zk_connect in errors[0]["msg"] and "retrying" in errors[0]["msg"]

    own_zookeeper.start()
    zk = chroot_client(zk_connect)
    try:
        wait_until(lambda: zk.exists(paths.broker_topic_path(topic, 5)), 30, interval=0.05,
                   what="the broker to register once ZooKeeper is up")
        assert zk.get(paths.broker_id_path(5))[0].decode() == broker.address
        assert zk.get(paths.broker_topic_path(topic, 5))[0] == b"2"    # default_partitions
    finally:
        zk.stop()
        zk.close()
    # the broker logs the registration once its last node is made: the nodes may
    # be seen a moment before the line is written
    wait_until(lambda: any("registered in ZooKeeper" in r["msg"]
                           for r in _log_records(broker.log_path)), 10, interval=0.05,
               what="the broker to log its registration")
    # ZooKeeper says the name is no replicated topic: the retry creates it
    with connect(broker.address) as conn:
        wait_until(lambda: produce(conn, "brand-new", 0, message_set([b"x"])).error ==
                   ErrorCode.NONE, 10, interval=0.1, what="the new topic to be created")
    assert broker.proc.poll() is None


def test_zookeeper_down_brokers_serve_and_consumers_keep_their_partitions(
        own_zookeeper, broker_factory, group_consumers, cluster_producers, consume, topic):
    own_zookeeper.start()
    # The one server listed twice. Kazoo gives a connection attempt
    # session timeout / (hosts listed) to be answered, and a server that is
    # starting accepts connections before it serves: it refuses them
    # ("ZooKeeperServer not running"), but may fail to close the socket (a
    # NullPointerException in ZooKeeper's log), leaving the client waiting.
    # With one entry that wait uses up the whole session; with two, half.
    address = own_zookeeper.servers[0].address
    zk_connect = f"{address},{address}/outage"
    zk = chroot_client(zk_connect)
    try:
        cluster = Cluster(zk, zk_connect, broker_factory)
        for broker_id in (0, 1):
            cluster.add_broker(broker_id)
        partitions = cluster.create_topic(topic, 2)
        consumers = [group_consumers(zk_connect, "outage", [topic], consumer_id=f"c{i}",
                                     session_timeout_ms=10_000) for i in range(2)]
        apps = [consume(c) for c in consumers]
        wait_settled(consumers, zk, "outage", topic, partitions)
        producer = cluster_producers(zk_connect, acks="written")

        def taken() -> set[bytes]:
            return {value for app in apps for value, *_ in app.taken}

        before = [b"before-%d" % i for i in range(200)]
        for value in before:
            producer.send(topic, value, key=value)
        producer.flush(timeout=30)
        wait_until(lambda: taken() >= set(before), 20, what="the group to take the first batch")

        owned = {c.consumer_id: c.member.owned for c in consumers}
        owner_nodes = {bp: zk.exists(paths.owners_path("outage", topic, bp)).czxid
                       for bp in partitions}
        client_sessions = [c.client.client_id[0] for c in consumers]
        broker_sessions = {b: zk.exists(paths.broker_id_path(b)).ephemeralOwner for b in (0, 1)}
        log_starts = {b: os.path.getsize(broker.log_path) for b, broker in cluster.brokers.items()}

        own_zookeeper.servers[0].stop()
        wait_until(lambda: not any(c.client.connected for c in consumers), 15,
                   what="the consumers to notice ZooKeeper is gone")

        # brokers serve produce (through the producer's last view of the
        # cluster, and directly) and fetch
        during = [b"during-%d" % i for i in range(200)]
        for value in during:
            producer.send(topic, value, key=value)
        producer.flush(timeout=30)
        assert producer.failed_batches == 0
        with Producer(bootstrap=cluster.brokers[1].address, acks="flushed") as direct:
            direct.send(topic, b"direct", partition=0).result(timeout=30)

        def stored() -> set[bytes]:
            values = set()
            for broker in cluster.brokers.values():
                with connect(broker.address) as conn:
                    for p in range(2):
                        values |= {m.value for m in read_partition(conn, topic, p)}
            return values

        # visible to fetches once flushed (flush_ms after the write)
        wait_until(lambda: stored() >= set(before) | set(during) | {b"direct"}, 10,
                   interval=0.05, what="fetches to return what was produced")
        for broker_id, broker in cluster.brokers.items():
            assert "still serving" in log_text(broker.log_path, log_starts[broker_id])

        # the consumers keep their partitions (paused: they hand out nothing
        # while they cannot know whether their session survives)
        assert {c.consumer_id: c.member.owned for c in consumers} == owned
        assert all(c.owned() == frozenset() for c in consumers)

        own_zookeeper.restart(0)      # same port, same data: the sessions are still valid
        wait_until(lambda: all(c.client.connected for c in consumers), 20,
                   what="the consumers to reconnect")
        assert [c.client.client_id[0] for c in consumers] == client_sessions
        wait_settled(consumers, zk, "outage", topic, partitions)
        assert {c.consumer_id: c.member.owned for c in consumers} == owned
        assert {c.consumer_id: c.owned() for c in consumers} == owned
        # never rebalanced away: the very owner nodes made before the outage
        assert {bp: zk.exists(paths.owners_path("outage", topic, bp)).czxid
                for bp in partitions} == owner_nodes
        assert {b: zk.exists(paths.broker_id_path(b)).ephemeralOwner
                for b in (0, 1)} == broker_sessions

        # and what was produced meanwhile reaches the group
        wait_until(lambda: taken() >= set(during) | {b"direct"}, 20,
                   what="the group to take what was produced during the outage")
    finally:
        zk.stop()
        zk.close()
