"""A cluster of real brokers under one ZooKeeper chroot, as tests drive it.

* ``Cluster``: the brokers registered under one chroot (start and stop
  brokers by id, create topics on them);
* ``chroot_client``: a kazoo client rooted at a chroot it creates;
* ``partition_state``: a replicated partition's state in ZooKeeper;
  ``REPLICATED``: broker settings that notice a lagging follower and a dead
  broker quickly.
"""
from __future__ import annotations

from typing import Callable

from kazoo.client import KazooClient

from broker.client.admin import AdminClient
from broker.client.consumer import Consumer
from broker.coordination import paths
from broker.coordination.replica_state import PartitionState
from broker.coordination.zk import split_connect_string
from broker.harness import BrokerProcess
from broker.protocol.message import Message
from broker_helpers import wait_until


REPLICATED = {"log.flush_ms": 10, "zookeeper_session_timeout_ms": 4000,
              "replica_lag_time_max_ms": 3000, "replica_fetch_wait_ms": 200}


def partition_state(cluster, topic: str, partition: int) -> PartitionState | None:
    """The partition's state as ZooKeeper holds it (None: none yet)."""
    path = paths.partition_state_path(topic, partition)
    data = cluster.zk.exists(path) and cluster.zk.get(path)[0]
    return PartitionState.from_json(data) if data else None


def chroot_client(connect: str) -> KazooClient:
    """A started client for ``connect`` ("host:port/chroot"), the chroot
    created first (kazoo warns when it starts in a missing one)."""
    hosts, chroot = split_connect_string(connect)
    root = KazooClient(hosts=hosts, timeout=10)
    root.start(timeout=15)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=15)
    return client


class Cluster:
    """Brokers registered under one chroot. ``start_broker(settings,
    broker_id=...)`` starts a BrokerProcess (a fixture's factory, which also
    stops it at teardown); ``zk`` is a started client rooted at the chroot."""

    def __init__(self, zk: KazooClient, connect: str,
                 start_broker: Callable[..., BrokerProcess]) -> None:
        self.zk = zk
        self.connect = connect
        self._start_broker = start_broker
        self.brokers: dict[int, BrokerProcess] = {}

    def add_broker(self, broker_id: int, settings: dict[str, object] | None = None
                   ) -> BrokerProcess:
        """Start broker ``broker_id`` and wait until it is registered."""
        broker = self._start_broker({"zookeeper": self.connect, **(settings or {})},
                                    broker_id=broker_id)
        self.brokers[broker_id] = broker
        wait_until(lambda: self.zk.exists(paths.broker_id_path(broker_id)), 20,
                   what=f"broker {broker_id} to register in ZooKeeper")
        return broker

    def stop_broker(self, broker_id: int) -> None:
        """A clean stop (SIGTERM): the broker deletes its nodes first."""
        self.brokers.pop(broker_id).stop()

    def create_topic(self, topic: str, partitions: int = 4,
                     broker_ids: list[int] | None = None,
                     config: dict[str, str] | None = None) -> list[str]:
        """Create ``topic`` on each broker (all by default), wait until
        ZooKeeper shows it, and return its broker-partitions, sorted."""
        broker_ids = sorted(self.brokers) if broker_ids is None else broker_ids
        for broker_id in broker_ids:
            with AdminClient(self.brokers[broker_id].address) as admin:
                admin.create_topic(topic, partitions, config)
        for broker_id in broker_ids:
            path = paths.broker_topic_path(topic, broker_id)
            wait_until(lambda: self.zk.exists(path), 20,
                       what=f"{topic} of broker {broker_id} in ZooKeeper")
        return [paths.broker_partition(b, p) for b in sorted(broker_ids)
                for p in range(partitions)]


def read_all(cluster: Cluster, topic: str) -> dict[str, list[Message]]:
    """Every message of ``topic`` on every running broker of ``cluster``:
    {"b-p": messages in offset order}."""
    out: dict[str, list[Message]] = {}
    for broker_id, broker in sorted(cluster.brokers.items()):
        with AdminClient(broker.address) as admin:
            count = admin.partition_count(topic)
            if count is None:
                continue
            ends = {p: admin.latest_offset(topic, p) for p in range(count)}
        consumer = Consumer(bootstrap=broker.address, max_wait_ms=50)
        try:
            tps = [(topic, p) for p in range(count)]
            consumer.assign(tps, start="earliest")
            for p in range(count):
                out[f"{broker_id}-{p}"] = []
            while any(consumer.position(tp) < ends[tp[1]] for tp in tps):
                for m in consumer.poll(200):
                    out[f"{broker_id}-{m.partition}"].append(m)
        finally:
            consumer.close()
    return out


def cut_by_retention(cluster: Cluster, topic: str, broker_id: int = 0,
                     partition: int = 0) -> tuple[int, int]:
    """Make the broker's retention delete the oldest part of a partition (of
    small segments): the broker is restarted keeping only about the newest
    third of it (``log.retention_bytes``, checked every 100 ms). Waits until
    the topic is back in ZooKeeper and the earliest offset has moved; returns
    (the earliest offset kept, the partition's end)."""
    broker = cluster.brokers[broker_id]
    with AdminClient(broker.address) as admin:
        end = admin.latest_offset(topic, partition)
    broker.stop()
    broker.settings.update({"log.retention_bytes": end // 3, "retention_check_ms": 100})
    broker.start()
    for path in (paths.broker_id_path(broker_id), paths.broker_topic_path(topic, broker_id)):
        wait_until(lambda: cluster.zk.exists(path), 20,
                   what=f"{path} of the restarted broker {broker_id} in ZooKeeper")

    def earliest() -> int:
        with AdminClient(broker.address) as admin:
            return admin.earliest_offset(topic, partition)
    return wait_until(earliest, 30, what=f"retention to delete the start of {topic}"), end
