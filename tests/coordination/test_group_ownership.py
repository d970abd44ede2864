"""Partition ownership in a consumer group (broker/coordination/ownership.py
through GroupConsumer), on 3 real brokers x 4 partitions: every partition is
owned exactly once, by the paper's range rule; as consumers join, leave
cleanly and lose their sessions, ownership converges again and no partition
is ever owned twice (a monitor samples it all along); a dropped connection
that keeps its session keeps its partitions."""
from __future__ import annotations

import json

from broker.coordination import paths
from broker.harness.kazoo_faults import drop_connection, expire_session
from broker_helpers import wait_until
from coordination_helpers import OwnershipMonitor, range_assignment, wait_settled


def test_a_group_of_three_owns_each_partition_exactly_once(shared_cluster, group_consumers,
                                                           topic):
    partitions = shared_cluster.create_topic(topic, 4)
    assert len(partitions) == 12
    consumers = [group_consumers(shared_cluster.connect, "trio", [topic], consumer_id=f"c{i}")
                 for i in range(3)]
    wait_settled(consumers, shared_cluster.zk, "trio", topic, partitions)
    owned = {c.consumer_id: sorted(bp for _, bp in c.owned()) for c in consumers}
    # contiguous ranges of the sorted broker-partitions: here one broker each
    assert owned == {"c0": ["0-0", "0-1", "0-2", "0-3"], "c1": ["1-0", "1-1", "1-2", "1-3"],
                     "c2": ["2-0", "2-1", "2-2", "2-3"]}
    zk = shared_cluster.zk
    for c in consumers:      # registered, ephemeral, with the subscription
        data, stat = zk.get(paths.consumer_id_path("trio", c.consumer_id))
        assert stat.ephemeralOwner == c.client.client_id[0]
        assert json.loads(data)["topics"] == [topic]


def test_ownership_converges_and_never_overlaps_while_consumers_come_and_go(
        shared_cluster, group_consumers, topic):
    partitions = shared_cluster.create_topic(topic, 4)
    zk, group = shared_cluster.zk, "churn"
    consumers = []           # the group now: the monitor reads this list as it changes

    def join(cid: str) -> None:
        consumers.append(group_consumers(shared_cluster.connect, group, [topic],
                                         consumer_id=cid))

    def by_id(cid: str):
        return next(c for c in consumers if c.consumer_id == cid)

    def leave(cid: str) -> None:
        consumer = by_id(cid)
        consumers.remove(consumer)
        consumer.close()

    def settle() -> None:
        wait_settled(consumers, zk, group, topic, partitions)

    for cid in ("c0", "c1", "c2"):
        join(cid)
    settle()
    monitor = OwnershipMonitor(consumers, zk, group, topic)
    monitor.start()
    try:
        join("c3")                                   # 12 over 4
        settle()
        join("c4")                                   # 12 over 5: 3, 3, 2, 2, 2
        settle()
        leave("c1")                                  # a clean close
        settle()
        # a session expiry: ZooKeeper deletes c3's nodes, the others take its
        # partitions; c3 registers again (same id) and gets a share back
        sessions_before = by_id("c3").client.client_id[0]
        expire_session(by_id("c3").client)
        assert by_id("c3").client.client_id[0] != sessions_before
        settle()
        # two at once: c0 expires while c4 closes, then a newcomer joins
        expire_session(by_id("c0").client, wait_reconnect=False)
        leave("c4")
        join("c5")
        settle()
        leave("c2")
        leave("c3")
        settle()                                     # c0 and c5: 6 each
        assert {c.consumer_id: len(c.owned()) for c in consumers} == {"c0": 6, "c5": 6}
    finally:
        monitor.stop()
    assert monitor.violations == [], monitor.violations[:10]
    # the monitor really watched the changes, not just the calm in between
    assert monitor.samples >= 50 and monitor.busy_samples >= 10, \
        (monitor.samples, monitor.busy_samples)


def test_a_dropped_connection_keeps_the_session_and_the_partitions(
        shared_cluster, group_consumers, topic):
    partitions = shared_cluster.create_topic(topic, 2)
    zk, group = shared_cluster.zk, "blip"
    consumers = [group_consumers(shared_cluster.connect, group, [topic], consumer_id=f"c{i}")
                 for i in range(2)]
    wait_settled(consumers, zk, group, topic, partitions)
    owner_nodes = {bp: zk.exists(paths.owners_path(group, topic, bp)).czxid for bp in partitions}
    owned = [c.owned() for c in consumers]
    session = consumers[0].client.client_id[0]
    monitor = OwnershipMonitor(consumers, zk, group, topic)
    monitor.start()
    try:
        drop_connection(consumers[0].client)         # SUSPENDED, then CONNECTED: same session
        assert consumers[0].client.client_id[0] == session
        wait_settled(consumers, zk, group, topic, partitions)
    finally:
        monitor.stop()
    assert monitor.violations == []
    assert [c.owned() for c in consumers] == owned
    # nobody released or claimed anything: the very same owner nodes
    assert {bp: zk.exists(paths.owners_path(group, topic, bp)).czxid
            for bp in partitions} == owner_nodes
    assert range_assignment(partitions, ["c0", "c1"])["c0"] == {bp for _, bp in owned[0]}


def test_a_consumer_owns_nothing_from_kazoos_report_on_however_late_its_thread_runs(
        shared_cluster, group_consumers, topic):
    # A CI run's monitor saw a consumer report partitions whose owner nodes
    # ZooKeeper had deleted: its session had expired and kazoo was connected
    # again (a new session) while the group's coordination thread, late on a
    # loaded machine, had not yet handled SUSPENDED and LOST. From kazoo's
    # report on, the consumer owns nothing and hands out nothing, whatever
    # that thread is doing. Here the thread is held in its session handling
    # while kazoo reports (as kazoo's own thread calls the listener).
    import threading

    from kazoo.client import KazooState

    partitions = shared_cluster.create_topic(topic, 1)
    consumer = group_consumers(shared_cluster.connect, "late", [topic], consumer_id="c0")
    wait_settled([consumer], shared_cluster.zk, "late", topic, partitions)
    owned = consumer.owned()
    assert len(owned) == len(partitions)
    member = consumer.member
    gate, held = threading.Event(), threading.Event()
    handle = member._handle_session_events

    def late():
        held.set()
        assert gate.wait(30)
        handle()

    member._handle_session_events = late
    try:
        member._on_session(KazooState.SUSPENDED)     # kazoo's report
        assert consumer.owned() == frozenset()       # at once
        assert held.wait(10)                         # the thread is held in it
        assert consumer.owned() == frozenset() and not consumer._paused.is_set()
        assert consumer.poll(200) == []
        gate.set()
        member._on_session(KazooState.CONNECTED)     # the same session, back
        wait_until(lambda: consumer.owned() == owned, 10,
                   what="the consumer to own its partitions again")
        assert not member.interrupted
    finally:
        gate.set()
        member._handle_session_events = handle
