"""ClusterView when a watch's read fails because ZooKeeper went away in the
middle (defect found by bench/containers_bench.py: the pipeline's containers
removed under a client): the callback raised ConnectionLoss into kazoo's
thread and the change was lost — the watch stays armed, but no new event
comes for a change that already happened, so the view stayed stale. Now the
view keeps what it had and reads again once connected."""
from __future__ import annotations

import threading

from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KazooState

from broker.coordination import paths
from broker.coordination.cluster import ClusterView


class FailingReads:
    """``client.get`` failing with ConnectionLoss for paths under ``prefix``,
    ``times`` times."""

    def __init__(self, client, prefix: str, times: int) -> None:
        self.get, self.prefix, self.left = client.get, prefix, times
        self.lock = threading.Lock()

    def __call__(self, path, *args, **kwargs):
        with self.lock:
            fail = path.startswith(self.prefix) and self.left > 0
            self.left -= fail
        if fail:
            raise ConnectionLoss()
        return self.get(path, *args, **kwargs)


def test_a_topic_read_that_fails_is_read_again(zk_client, monkeypatch):
    zk_client.ensure_path(paths.broker_id_path(7))
    zk_client.set(paths.broker_id_path(7), b"127.0.0.1:9092")
    view = ClusterView(zk_client)
    assert view.wait_for(lambda v: list(v.brokers()) == [7], 10)
    failing = FailingReads(zk_client, paths.broker_topic_path("events"), 1)
    monkeypatch.setattr(zk_client, "get", failing)
    zk_client.create(paths.broker_topic_path("events", 7), b"3", makepath=True)
    assert view.wait_for(lambda v: v.partitions("events") == ["7-0", "7-1", "7-2"], 10), \
        "the topic's holders were never read again after the failed read"
    assert failing.left == 0                     # the read did fail once


def test_a_broker_list_read_that_fails_is_read_again_on_reconnect(zk_client, monkeypatch):
    view = ClusterView(zk_client)
    failing = FailingReads(zk_client, paths.BROKER_IDS, 2)   # the read and the first retry
    monkeypatch.setattr(zk_client, "get", failing)
    zk_client.create(paths.broker_id_path(3), b"127.0.0.1:9093", makepath=True)
    assert not view.wait_for(lambda v: v.brokers(), 1)       # kept as it was...
    view._on_state(KazooState.CONNECTED)                     # ...until connected again
    assert view.wait_for(lambda v: v.brokers() == {3: ("127.0.0.1", 9093)}, 10)
