"""A broker's registration in ZooKeeper (broker/coordination/registry.py),
against the real server: its id node and its topics' nodes, kept in step
with topic creation and deletion, gone at a clean stop, gone after the
session of a crashed broker times out, made again after a session expires;
and one ensemble serving two clusters under two chroots."""
from __future__ import annotations

import os

from kazoo.client import KazooClient

from broker.client.admin import AdminClient
from broker.client.cluster_producer import ClusterProducer
from broker.client.producer import Producer
from broker.coordination import paths
from broker.coordination.cluster import ClusterView
from broker.harness.kazoo_faults import expire_session
from broker_helpers import connect, log_text, read_partition, wait_until
from coordination_helpers import Cluster, chroot_client


def _ephemeral(zk: KazooClient, path: str) -> tuple[bytes, int]:
    """(data, owning session) of an ephemeral node; fails if persistent."""
    data, stat = zk.get(path)
    assert stat.ephemeralOwner != 0, f"{path} is not ephemeral"
    return data, stat.ephemeralOwner


def test_broker_registers_address_and_partition_counts(cluster, topic):
    b1 = cluster.add_broker(1)
    b2 = cluster.add_broker(2, settings={"default_partitions": 3})
    zk = cluster.zk
    assert sorted(zk.get_children(paths.BROKER_IDS)) == ["1", "2"]
    data1, session1 = _ephemeral(zk, paths.broker_id_path(1))
    data2, session2 = _ephemeral(zk, paths.broker_id_path(2))
    assert data1.decode() == b1.address and data2.decode() == b2.address
    assert session1 != session2                      # each broker its own session

    cluster.create_topic(topic, 4, broker_ids=[1])
    with AdminClient(b2.address) as admin:
        admin.create_topic(topic, 2)
    wait_until(lambda: zk.exists(paths.broker_topic_path(topic, 2)), what="broker 2's topic")
    assert _ephemeral(zk, paths.broker_topic_path(topic, 1)) == (b"4", session1)
    assert _ephemeral(zk, paths.broker_topic_path(topic, 2)) == (b"2", session2)

    # a topic created by a produce (auto-create) is registered too
    auto = f"{topic}-auto"
    with Producer(bootstrap=b2.address, acks="written") as producer:
        producer.send(auto, b"hello").result(timeout=30)
    wait_until(lambda: zk.exists(paths.broker_topic_path(auto, 2)), what="auto-created topic")
    assert zk.get(paths.broker_topic_path(auto, 2))[0] == b"3"

    # deletion removes that broker's node of the topic, and only that one
    with AdminClient(b1.address) as admin:
        admin.delete_topic(topic)
    wait_until(lambda: not zk.exists(paths.broker_topic_path(topic, 1)),
               what="broker 1's node of the deleted topic to go")
    assert zk.get_children(paths.broker_topic_path(topic)) == ["2"]
    assert zk.exists(paths.broker_id_path(1))        # the broker itself stays


def test_clean_stop_deregisters_at_once_and_a_crash_after_the_session_timeout(cluster, topic):
    # a long session: the clean stop must not wait for it
    cluster.add_broker(1, settings={"zookeeper_session_timeout_ms": 20_000})
    crashing = cluster.add_broker(2, settings={"zookeeper_session_timeout_ms": 4000})
    cluster.create_topic(topic, 2)
    zk = cluster.zk
    view = ClusterView(zk)

    cluster.stop_broker(1)                            # SIGTERM: nodes deleted before exit
    assert not zk.exists(paths.broker_id_path(1))
    assert not zk.exists(paths.broker_topic_path(topic, 1))
    assert view.wait_for(lambda v: sorted(v.brokers()) == [2], timeout=5)

    crashing.kill()                                   # SIGKILL: nothing deleted...
    assert zk.exists(paths.broker_id_path(2))
    # ...until ZooKeeper expires the dead broker's session
    assert view.wait_for(lambda v: not v.brokers() and not v.partitions(topic), timeout=15)
    assert not zk.exists(paths.broker_topic_path(topic, 2))


def test_restart_after_a_crash_registers_once_the_old_session_is_gone(cluster, topic):
    broker = cluster.add_broker(3, settings={"zookeeper_session_timeout_ms": 4000})
    cluster.create_topic(topic, 2)
    zk = cluster.zk
    _, old_session = _ephemeral(zk, paths.broker_id_path(3))
    broker.kill()
    log_start = os.path.getsize(broker.log_path)
    broker.start()      # same id, same port: the stale node of the dead session is still there
    wait_until(lambda: "held by another ZooKeeper session" in log_text(broker.log_path, log_start),
               15, what="the broker to log that its id node is held by the old session")

    def registered_anew() -> bool:
        # the id node first, then the topics' nodes: wait for the last one
        stats = [zk.exists(paths.broker_id_path(3)), zk.exists(paths.broker_topic_path(topic, 3))]
        return all(stat is not None and stat.ephemeralOwner != old_session for stat in stats)

    wait_until(registered_anew, 15, what="the restarted broker to register with a new session")
    _, session = _ephemeral(zk, paths.broker_id_path(3))
    assert _ephemeral(zk, paths.broker_topic_path(topic, 3)) == (b"2", session)


def test_broker_registers_again_after_its_session_expires(inprocess_broker, zookeeper,
                                                          zk_client, zk_chroot, topic):
    server = inprocess_broker(broker_id=7, zookeeper=zookeeper.connect_string(zk_chroot))
    registry = server.registry
    assert registry.registered.wait(15), "the in-process broker did not register"
    with AdminClient(f"127.0.0.1:{server.port}") as admin:
        admin.create_topic(topic, 3)
    wait_until(lambda: zk_client.exists(paths.broker_topic_path(topic, 7)),
               what="the topic's node")
    old_session = registry.client.client_id[0]
    assert _ephemeral(zk_client, paths.broker_id_path(7))[1] == old_session

    expire_session(registry.client)                   # LOST, then CONNECTED: a new session
    new_session = registry.client.client_id[0]
    assert new_session != old_session
    assert registry.registered.wait(15), "the broker did not register again"
    assert registry.state == "REGISTERED"
    assert _ephemeral(zk_client, paths.broker_id_path(7)) == (
        f"127.0.0.1:{server.port}".encode(), new_session)
    assert _ephemeral(zk_client, paths.broker_topic_path(topic, 7)) == (b"3", new_session)

    # topics created after the new registration are registered in the new session
    with AdminClient(f"127.0.0.1:{server.port}") as admin:
        admin.create_topic(f"{topic}-later", 1)
    wait_until(lambda: zk_client.exists(paths.broker_topic_path(f"{topic}-later", 7)),
               what="a topic created after the re-registration")


def test_two_clusters_on_one_ensemble_do_not_see_each_other(zookeeper, zk_chroot,
                                                            broker_factory, topic):
    clusters = {}
    for name in ("a", "b"):
        zk_connect = zookeeper.connect_string(f"{zk_chroot}/{name}")
        clusters[name] = Cluster(chroot_client(zk_connect), zk_connect, broker_factory)
    try:
        a, b = clusters["a"], clusters["b"]
        broker_a = a.add_broker(0)                    # the same id in both clusters
        broker_b = b.add_broker(0)
        assert a.create_topic(topic, 3) == ["0-0", "0-1", "0-2"]
        assert b.create_topic(topic, 1) == ["0-0"]
        view_a, view_b = ClusterView(a.zk), ClusterView(b.zk)
        assert view_a.brokers() == {0: ("127.0.0.1", broker_a.port)}
        assert view_b.brokers() == {0: ("127.0.0.1", broker_b.port)}
        assert view_a.partitions(topic) == ["0-0", "0-1", "0-2"]
        assert view_b.partitions(topic) == ["0-0"]

        # a producer of cluster a writes to cluster a's broker only
        with ClusterProducer(a.connect, acks="flushed") as producer:
            for i in range(30):
                producer.send(topic, b"a%d" % i, key=b"k%d" % i)
            producer.flush(timeout=30)
            assert producer.failed_batches == 0
        with connect(broker_a.address) as conn:
            assert sum(len(read_partition(conn, topic, p)) for p in range(3)) == 30
        with connect(broker_b.address) as conn:
            assert read_partition(conn, topic, 0) == []
    finally:
        for cluster in clusters.values():
            cluster.zk.stop()
            cluster.zk.close()
