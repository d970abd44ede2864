"""Fixtures of the coordination tests (issue 4), on top of tests/conftest.py
(the session's ZooKeeper server, ``zk_chroot``, ``zk_client``,
``broker_factory``):

* ``cluster``: brokers of this test alone, registered under its chroot of
  the session's ZooKeeper (a ``Cluster``: add and stop brokers by id).
* ``shared_cluster``: three brokers (ids 0, 1, 2) under one chroot for a
  whole module, for tests that never add or stop a broker; each test keeps
  to topics and groups of its own.
* ``group_consumers`` / ``cluster_producers``: factories of clients of a
  cluster, closed at teardown; ``consume``: application threads
  (ConsumerThread) stopped at teardown.
* ``inprocess_broker``: a BrokerServer on an event loop in this process,
  so a test can reach its registry's kazoo client (to expire its session).
* ``own_zookeeper``: a standalone ZooKeeper of this test alone, not
  started, for tests that start it late or stop it (the session's server
  must never stop).

When a test fails, what its brokers and its own ZooKeeper logged is printed.
"""
from __future__ import annotations

import asyncio
import os
import threading
import uuid

import pytest

from broker.client.cluster_producer import ClusterProducer
from broker.client.group_consumer import GroupConsumer
from broker.config import BrokerConfig
from broker.harness import ZooKeeperEnsemble
from broker.server.server import BrokerServer

from coordination_helpers import Cluster, ConsumerThread, chroot_client


def _test_failed(node) -> bool:
    # tests/conftest.py keeps each phase's report on the item
    return any(getattr(getattr(node, f"rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture
def cluster(zookeeper, zk_client, zk_chroot, broker_factory) -> Cluster:
    """Brokers of this test alone under its chroot; none started yet."""
    return Cluster(zk_client, zookeeper.connect_string(zk_chroot), broker_factory)


@pytest.fixture(scope="module")
def _module_cluster(zookeeper, _module_brokers, request):
    # _module_brokers (tests/conftest.py) starts and stops the module's brokers
    chroot = f"/{request.module.__name__}-{uuid.uuid4().hex[:8]}"
    client = chroot_client(zookeeper.connect_string(chroot))
    cluster = Cluster(client, zookeeper.connect_string(chroot), _module_brokers.start)
    try:
        for broker_id in (0, 1, 2):
            cluster.add_broker(broker_id)
        yield cluster
    finally:
        client.stop()
        client.close()


@pytest.fixture
def shared_cluster(_module_cluster, request) -> Cluster:
    """The module's three brokers (ids 0, 1, 2). Do not add or stop brokers;
    use topics and groups named after the test."""
    for broker_id, broker in _module_cluster.brokers.items():
        if broker.proc.poll() is not None:
            pytest.fail(f"shared broker {broker_id} has exited:\n{broker.tail_log()}")
    starts = {b: os.path.getsize(broker.log_path)
              for b, broker in _module_cluster.brokers.items()}
    yield _module_cluster
    if _test_failed(request.node):
        for broker_id, broker in _module_cluster.brokers.items():
            with open(broker.log_path, "rb") as f:
                f.seek(starts[broker_id])
                text = f.read().decode(errors="replace").splitlines()
            print(f"\n----- shared broker {broker_id} during the test -----")
            print("\n".join(text[-150:]))


@pytest.fixture
def group_consumers():
    """``make(connect, group, topics, **settings)`` -> a GroupConsumer,
    closed at teardown (if the test has not closed it)."""
    made: list[GroupConsumer] = []

    def make(connect: str, group: str, topics=(), **settings) -> GroupConsumer:
        consumer = GroupConsumer(zookeeper=connect, group=group, topics=tuple(topics),
                                 **settings)
        made.append(consumer)
        return consumer

    yield make
    for consumer in reversed(made):
        consumer.close()


@pytest.fixture
def cluster_producers():
    """``make(connect, **settings)`` -> a ClusterProducer, closed at teardown."""
    made: list[ClusterProducer] = []

    def make(connect: str, **settings) -> ClusterProducer:
        producer = ClusterProducer(connect, **settings)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()


@pytest.fixture
def consume():
    """``consume(consumer)`` -> a started ConsumerThread; every one not
    stopped by the test is stopped (and its consumer closed) at teardown."""
    threads: list[ConsumerThread] = []

    def start(consumer: GroupConsumer) -> ConsumerThread:
        thread = ConsumerThread(consumer)
        threads.append(thread)
        thread.start()
        return thread

    yield start
    for thread in threads:
        if thread.is_alive():
            thread.stop()


@pytest.fixture
def inprocess_broker(tmp_path):
    """``start(**config)`` -> a started BrokerServer running on an event loop
    in a background thread of this process (as tests/server/test_zero_copy.py
    runs one); shut down at teardown."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-broker-loop", daemon=True)
    thread.start()
    servers: list[BrokerServer] = []

    def start(**settings) -> BrokerServer:
        settings.setdefault("data_dir", str(tmp_path / f"inprocess-{len(servers)}"))
        config = BrokerConfig(port=0, metrics_port=-1, **settings)

        async def run() -> BrokerServer:
            server = BrokerServer(config)
            await server.start()
            return server

        server = asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=30)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            asyncio.run_coroutine_threadsafe(server.shutdown("test over"), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


@pytest.fixture
def own_zookeeper(tmp_path, request) -> ZooKeeperEnsemble:
    """A standalone ZooKeeper of this test alone, planned (its port is
    known: ``connect_string()``) but NOT started; stopped at teardown."""
    ensemble = ZooKeeperEnsemble(1, str(tmp_path / "own-zookeeper"))
    yield ensemble
    if _test_failed(request.node):
        print(f"\n===== the test's own ZooKeeper =====\n{ensemble.logs()}")
    ensemble.stop()
