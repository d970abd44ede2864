"""ClusterView when a watch's read fails because ZooKeeper went away in the
middle (defect found by bench/containers_bench.py: the pipeline's containers
removed under a client): the callback raised ConnectionLoss into kazoo's
thread and the change was lost — the watch stays armed, but no new event
comes for a change that already happened, so the view stayed stale. Now the
view keeps what it had and reads again once connected."""
from __future__ import annotations

import threading

import pytest
from kazoo.exceptions import ConnectionLoss
from kazoo.retry import RetryFailedError
from broker.coordination import paths
from broker.coordination.cluster import _BROKER_IDS, ClusterView
from broker.harness.kazoo_faults import drop_connection


class FailingReads:
    """``client.<method>`` failing with ConnectionLoss for paths under
    ``prefix``, ``times`` times."""

    def __init__(self, client, prefix: str, times: int, method: str = "get",
                 error: type[Exception] = ConnectionLoss) -> None:
        self.get, self.prefix, self.left = getattr(client, method), prefix, times
        self.error = error
        self.lock = threading.Lock()

    def __call__(self, path, *args, **kwargs):
        with self.lock:
            fail = path.startswith(self.prefix) and self.left > 0
            self.left -= fail
        if fail:
            raise self.error()
        return self.get(path, *args, **kwargs)


class StalledReadAgain:
    """The view's read again of ``what`` (as after a failed read; the broker
    list or a topic) on a thread of its own, started and stalled just after
    its first read of a node's data until ``finish()``."""

    def __init__(self, view, client, monkeypatch, what) -> None:
        self.thread = threading.Thread(target=view._read_again, daemon=True)
        self.reading, self.release = threading.Event(), threading.Event()
        get = client.get

        def stalling_get(path, *args, **kwargs):
            result = get(path, *args, **kwargs)
            if threading.current_thread() is self.thread:
                self.reading.set()
                self.release.wait(10)
            return result

        monkeypatch.setattr(client, "get", stalling_get)
        view._unread.add(what)
        self.thread.start()
        assert self.reading.wait(10), "the read again read nothing"

    def finish(self) -> None:
        self.release.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


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
    drop_connection(zk_client)                               # ...until connected again
    assert view.wait_for(lambda v: v.brokers() == {3: ("127.0.0.1", 9093)}, 10)


def test_a_new_topic_whose_watch_cannot_start_is_watched_once_reconnected(zk_client,
                                                                          monkeypatch):
    """The first read of a new topic's watch failed for good (its retries
    gave up: kazoo retries a ConnectionLoss itself): the other new topic is
    still watched, and the failed one reads again once the client reconnects."""
    zk_client.create(paths.broker_id_path(7), b"127.0.0.1:9092", makepath=True)
    view = ClusterView(zk_client)
    assert view.wait_for(lambda v: list(v.brokers()) == [7], 10)
    # whichever of the two topics is watched first fails
    failing = FailingReads(zk_client, paths.BROKER_TOPICS + "/", 1, "get_children",
                           RetryFailedError)
    monkeypatch.setattr(zk_client, "get_children", failing)
    tx = zk_client.transaction()                             # two new topics at once
    for topic in ("t1", "t2"):
        tx.create(paths.broker_topic_path(topic))
        tx.create(paths.broker_topic_path(topic, 7), b"1")
    tx.commit()
    assert view.wait_for(lambda v: [v.partitions("t1"), v.partitions("t2")].count(["7-0"])
                         == 1, 10), "the topic after the failed one was not watched"
    assert failing.left == 0
    drop_connection(zk_client)
    assert view.wait_for(lambda v: v.partitions("t1") == v.partitions("t2") == ["7-0"], 10)


def test_a_read_again_never_writes_an_older_broker_list_over_a_newer_one(zk_client,
                                                                         monkeypatch):
    """A read again runs on a thread of its own; a change meanwhile reaches
    the view through the watch. Whichever wrote last used to win: a read
    again slower than the watch wrote the older list over the newer one, and
    no event came to mend it (seen in the review of issue 17)."""
    zk_client.create(paths.broker_id_path(1), b"127.0.0.1:9001", makepath=True)
    view = ClusterView(zk_client)
    assert view.wait_for(lambda v: list(v.brokers()) == [1], 10)

    # a read again (as after a failed read) whose reads of the brokers'
    # addresses stall until the watch has delivered a newer list
    read_again = StalledReadAgain(view, zk_client, monkeypatch, _BROKER_IDS)
    zk_client.create(paths.broker_id_path(2), b"127.0.0.1:9002")     # it has read [1]...
    assert view.wait_for(lambda v: sorted(v.brokers()) == [1, 2], 10)   # ...the watch [1, 2]
    read_again.finish()
    assert sorted(view.brokers()) == [1, 2], "the read again wrote its older list last"


def test_a_read_again_of_a_topic_deleted_and_made_again_is_dropped(zk_client, monkeypatch):
    """The same race across a topic's deletion: its watch count went with it,
    so the new topic's first call brought the count back to what the read
    again had noted, and the old topic's holders were written over the new."""
    zk_client.create(paths.broker_topic_path("t", 7), b"1", makepath=True)
    view = ClusterView(zk_client)
    assert view.wait_for(lambda v: v._topics.get("t") == {7: 1}, 10)     # (7 not up: no partitions)

    read_again = StalledReadAgain(view, zk_client, monkeypatch, "t")   # read broker 7's
    zk_client.delete(paths.broker_topic_path("t"), recursive=True)
    assert view.wait_for(lambda v: "t" not in v._topics, 10)
    zk_client.create(paths.broker_topic_path("t", 8), b"1", makepath=True)
    assert view.wait_for(lambda v: v._topics.get("t") == {8: 1}, 10)
    read_again.finish()
    assert view._topics.get("t") == {8: 1}, "the old topic's holders were written last"


def test_a_view_started_while_a_secured_broker_makes_its_nodes_waits_for_them(
        zookeeper, zk_client, zk_chroot, monkeypatch):
    # a secured cluster's broker makes /brokers with the cluster's ACL
    # (everyone may read, no one else add), then its children: a view (a
    # producer, a group) started in between may make none of them. It failed
    # with NoAuthError; it waits for the broker to make them.
    from kazoo.exceptions import NoAuthError

    from broker.coordination.zk import make_client, start_client
    from broker.coordination.zk_acls import Identity
    cluster = Identity("samsa-cluster", "cluster-password")
    connect = zookeeper.connect_string(zk_chroot)
    broker_side = make_client(connect, identity=cluster)
    start_client(broker_side, connect)
    try:
        broker_side.create("/brokers", b"", acl=cluster.default_acl())
        broker_side.create(paths.BROKER_IDS, b"", acl=cluster.default_acl())
        broker_side.create(paths.REPLICATION, b"", acl=cluster.default_acl())
        asked = threading.Event()
        real_exists = zk_client.exists

        def exists(path, watch=None):
            if watch is not None and path == paths.BROKER_TOPICS:
                asked.set()          # refused, the view now waits for the node
            return real_exists(path, watch=watch)

        monkeypatch.setattr(zk_client, "exists", exists)
        made = []
        waiting = threading.Thread(target=lambda: made.append(ClusterView(zk_client, wait_s=30)))
        waiting.start()
        assert asked.wait(10), "the view did not wait for /brokers/topics"
        # the view is waiting for the nodes it may not make: it sees them once made
        for path in (paths.BROKER_TOPICS, paths.REPLICATED_TOPICS):
            broker_side.ensure_path(path)
        broker_side.create(paths.broker_id_path(3), b"127.0.0.1:9092")
        waiting.join(30)
        assert made, "the view did not start once the broker made its nodes"
        assert made[0].wait_for(lambda v: 3 in v.brokers(), 10)

        # nodes no broker makes: a clear error after the wait, not a hang
        broker_side.delete(paths.REPLICATED_TOPICS)
        with pytest.raises(NoAuthError, match="may not make it: waited 0s"):
            ClusterView(zk_client, wait_s=0.2)
    finally:
        broker_side.stop()
        broker_side.close()
