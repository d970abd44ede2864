"""The live view of a cluster from ZooKeeper: which brokers are up (and
where), and which partitions each holds of each topic. Kept current by
watches on /brokers/ids and /brokers/topics; listeners hear of every change.

Used by producers (to spread or key messages over the whole cluster) and by
consumer groups (a change of brokers or partitions triggers a rebalance).
Thread-safe: the watches update it on kazoo's thread; readers take a copy.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from . import paths

log = logging.getLogger(__name__)


class ClusterView:
    def __init__(self, client: KazooClient) -> None:
        """``client`` is started and rooted at the cluster's chroot."""
        self.client = client
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, dict[int, int]] = {}      # topic -> broker id -> partitions
        self._topic_watches: set[str] = set()
        self._listeners: list[Callable[[], None]] = []
        self.version = 0                                   # bumped on every change
        client.ensure_path(paths.BROKER_IDS)
        client.ensure_path(paths.BROKER_TOPICS)
        ChildrenWatch(client, paths.BROKER_IDS, self._on_broker_ids)
        ChildrenWatch(client, paths.BROKER_TOPICS, self._on_topics)

    # ------------------------------------------------------------ reading

    def brokers(self) -> dict[int, tuple[str, int]]:
        with self._lock:
            return dict(self._brokers)

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(t for t, holders in self._topics.items()
                          if any(b in self._brokers for b in holders))

    def partitions(self, topic: str) -> list[str]:
        """The topic's broker-partitions ("b-p") on live brokers, sorted."""
        with self._lock:
            holders = self._topics.get(topic, {})
            return [paths.broker_partition(b, p) for b in sorted(holders)
                    if b in self._brokers for p in range(holders[b])]

    def address(self, broker_id: int) -> str | None:
        with self._lock:
            hp = self._brokers.get(broker_id)
        return f"{hp[0]}:{hp[1]}" if hp else None

    def add_listener(self, fn: Callable[[], None]) -> None:
        """``fn()`` runs (on kazoo's thread: it must not block) after each change."""
        self._listeners.append(fn)

    def wait_for(self, predicate: Callable[["ClusterView"], bool], timeout: float) -> bool:
        """Wait until ``predicate(view)`` holds (checked after each change)."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.version
            if predicate(self):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._changed:
                if self.version == seen:
                    self._changed.wait(left)

    # ------------------------------------------------------------ watches

    def _on_broker_ids(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            try:
                data, _ = self.client.get(paths.broker_id_path(int(child)))
                host, _, port = data.decode().rpartition(":")
                brokers[int(child)] = (host, int(port))
            except (NoNodeError, ValueError):
                continue          # gone meanwhile, or not a broker node
        with self._lock:
            self._brokers = brokers
        log.info("cluster: brokers %s", sorted(brokers))
        self._notify()

    def _on_topics(self, topics: list[str]) -> None:
        for topic in topics:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                ChildrenWatch(self.client, paths.broker_topic_path(topic),
                              lambda children, t=topic: self._on_topic_brokers(t, children))
        with self._lock:
            for gone in set(self._topics) - set(topics):
                del self._topics[gone]
                self._topic_watches.discard(gone)
        self._notify()

    def _on_topic_brokers(self, topic: str, children: list[str]) -> bool | None:
        holders = {}
        for child in children:
            try:
                data, _ = self.client.get(paths.broker_topic_path(topic, int(child)))
                holders[int(child)] = int(data.decode())
            except (NoNodeError, ValueError):
                continue
        with self._lock:
            if topic not in self._topic_watches:
                return False      # the topic went away: stop watching it
            self._topics[topic] = holders
        self._notify()
        return None

    def _notify(self) -> None:
        with self._changed:
            self.version += 1
            self._changed.notify_all()
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:   # noqa: BLE001 - a listener must not break the watch
                log.exception("cluster listener failed")
