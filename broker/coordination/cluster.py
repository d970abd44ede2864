"""The live view of a cluster from ZooKeeper: which brokers are up (and
where), and which partitions each holds of each topic. Kept current by
watches on /brokers/ids and /brokers/topics; listeners hear of every change.

Replicated topics (docs/replication.md) are watched too (/replication/topics:
each topic's partition count and each partition's leader); their partitions
are named by number ("0", "1", ...) and ``locate`` finds the broker that
serves one (its leader) as it finds a broker-partition's. A change of leader
is a change of the view like any other.

Used by producers (to spread or key messages over the whole cluster) and by
consumer groups (a change of brokers or partitions triggers a rebalance).
A view for TLS clients (``tls``) gives each broker's TLS listener
(/brokers/tls/<id>, registered before the broker's id); a broker without
one is left out of it, logged.
Thread-safe: the watches update it on kazoo's thread; readers take a copy.

A watch's reads can fail when ZooKeeper goes away in the middle (a
restarted server): the view then keeps what it had, remembers what it
could not read, and reads it again once the client is connected again —
the watch itself stays armed, but no new event would come for a change
that already happened.

The race a read again runs: it reads on a thread of its own while the watch
may be called meanwhile (a change after the reconnection), and whichever
writes last wins. A read again therefore counts the watch's calls before it
reads and writes only if there was none since: a later call read the newer
state itself, or (if it had read before the read again did) its watch is
armed since then and is called again for the change in between.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.security import OPEN_ACL_UNSAFE

from . import paths
from .registry import read_broker_address
from .replica_state import NO_LEADER, PartitionState, TopicAssignment

log = logging.getLogger(__name__)

_BROKER_IDS = object()          # in ``_unread``: the broker list (else a topic's name)


#: how long a view waits for a secured cluster's broker to make a node the
#: view may not make itself (a broker starting up makes them within a second)
MAKING_WAIT_S = 30.0


def _ensure_open(client: KazooClient, path: str, wait_s: float) -> None:
    """``path`` made open when missing. In a secured cluster the brokers make
    ``/brokers`` with the cluster's ACL (everyone may read, no one else add):
    a view started while a broker is still making its children waits for it
    to make ``path`` (a watch, up to ``wait_s``), then NoAuthError saying so."""
    try:
        client.ensure_path(path, acl=OPEN_ACL_UNSAFE)
        return
    except NoAuthError:
        pass
    made = threading.Event()
    if client.exists(path, watch=lambda _event: made.set()) is not None:
        return
    if not made.wait(wait_s):
        raise NoAuthError(f"{path} is missing and this client may not make it: waited "
                          f"{wait_s:.0f}s for the cluster's brokers to make it")


class ClusterView:
    def __init__(self, client: KazooClient, tls: bool = False,
                 wait_s: float = MAKING_WAIT_S) -> None:
        """``client`` is started and rooted at the cluster's chroot; with
        ``tls`` the brokers' addresses are their TLS listeners'. A node it
        watches that is missing, which it may not make (a secured cluster
        whose broker is still making them), is waited for up to ``wait_s``."""
        self.client = client
        self.tls = tls
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, dict[int, int]] = {}      # topic -> broker id -> partitions
        self._topic_watches: set[str] = set()
        self._listeners: list[Callable[[], None]] = []
        self.version = 0                                   # bumped on every change
        self._unread: set = set()       # what a watch could not read: read again on reconnect
        self._watch_calls: dict = {}    # _BROKER_IDS or a topic -> its watch's calls so far
        self._replicated: dict[str, int] = {}               # topic -> partition count
        self._leaders: dict[tuple[str, int], int] = {}      # (topic, partition) -> leader
        self._replicated_watches: set[str] = set()
        self._state_watches: set[tuple[str, int]] = set()
        client.add_listener(self._on_state)
        # Made open when missing, as the chroot is: the brokers create these
        # with the cluster's ACL; made with the default ACL of a client with
        # an identity of its own (a mirror, a group), a node would be that
        # identity's and no broker could register under it.
        for path in (paths.BROKER_IDS, paths.BROKER_TOPICS, paths.REPLICATED_TOPICS):
            _ensure_open(client, path, wait_s)
        ChildrenWatch(client, paths.BROKER_IDS, self._on_broker_ids)
        ChildrenWatch(client, paths.BROKER_TOPICS, self._on_topics)
        ChildrenWatch(client, paths.REPLICATED_TOPICS, self._on_replicated_topics)

    # ------------------------------------------------------------ reading

    def brokers(self) -> dict[int, tuple[str, int]]:
        with self._lock:
            return dict(self._brokers)

    def topics(self) -> list[str]:
        with self._lock:
            return sorted({t for t, holders in self._topics.items()
                           if any(b in self._brokers for b in holders)} | set(self._replicated))

    def partitions(self, topic: str) -> list[str]:
        """The topic's partitions: of a replicated topic every one, by number
        ("0", "1", ...), led or not; else its broker-partitions ("b-p") on
        live brokers, sorted."""
        with self._lock:
            count = self._replicated.get(topic)
            if count is not None:
                return [str(p) for p in range(count)]
            holders = self._topics.get(topic, {})
            return [paths.broker_partition(b, p) for b in sorted(holders)
                    if b in self._brokers for p in range(holders[b])]

    def is_replicated(self, topic: str) -> bool:
        with self._lock:
            return topic in self._replicated

    def leader(self, topic: str, partition: int) -> int | None:
        """The live broker leading a replicated partition, else None."""
        with self._lock:
            leader = self._leaders.get((topic, partition))
            return leader if leader in self._brokers else None

    def locate(self, topic: str, name: str) -> tuple[int | None, int]:
        """(broker serving it, partition number on that broker) of a
        partition name: a broker-partition's broker, a replicated
        partition's live leader (None while it has none). ValueError for a
        name that is neither."""
        if name.isdigit():
            return self.leader(topic, int(name)), int(name)
        return paths.parse_broker_partition(name)

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

    def _called(self, what) -> None:
        """Count a call of ``what``'s watch (before it reads anything)."""
        with self._lock:
            self._watch_calls[what] = self._watch_calls.get(what, 0) + 1

    def _superseded(self, what, read_since: int | None) -> bool:
        """Whether a read again (``read_since``: the watch's calls when it
        began) is to be dropped because the watch has been called since.
        Expects the lock held."""
        return read_since is not None and self._watch_calls.get(what, 0) != read_since

    def _on_broker_ids(self, children: list[str], read_since: int | None = None) -> None:
        """The broker list's watch (``read_since`` None) or a read again of it."""
        if read_since is None:
            self._called(_BROKER_IDS)
        brokers = {}
        try:
            for child in children:
                try:
                    brokers[int(child)] = read_broker_address(self.client, int(child),
                                                              self.tls)
                except NoNodeError:
                    if self.tls and child.isdigit() and self.client.exists(
                            paths.broker_id_path(int(child))):
                        log.warning("cluster: broker %s has no TLS listener: left out of "
                                    "this TLS client's view", child)
                    continue          # gone meanwhile
                except ValueError:
                    continue          # not a broker node
        except (KazooException, KazooTimeoutError) as exc:
            self._read_later(_BROKER_IDS, exc, now=read_since is None)
            return
        with self._lock:
            if self._superseded(_BROKER_IDS, read_since):
                return
            self._brokers = brokers
        log.info("cluster: brokers %s", sorted(brokers))
        self._notify()

    def _on_topics(self, topics: list[str]) -> None:
        for topic in topics:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                try:
                    ChildrenWatch(self.client, paths.broker_topic_path(topic),
                                  lambda children, t=topic: self._on_topic_brokers(t, children))
                except (KazooException, KazooTimeoutError) as exc:
                    # its first read failed; the watch reads again by itself
                    # once reconnected: go on with the other topics
                    log.warning("cluster: watching topic %r: %s; it reads again once "
                                "connected", topic, type(exc).__name__)
        with self._lock:
            for gone in set(self._topics) - set(topics):
                del self._topics[gone]
                self._topic_watches.discard(gone)
                # its watch count stays (and goes on rising if it comes back):
                # back at the same count, a read again of the old topic would
                # pass for current
        self._notify()

    def _on_topic_brokers(self, topic: str, children: list[str],
                          read_since: int | None = None) -> bool | None:
        """A topic's watch (``read_since`` None) or a read again of it."""
        if read_since is None:
            self._called(topic)
        holders = {}
        try:
            for child in children:
                try:
                    data, _ = self.client.get(paths.broker_topic_path(topic, int(child)))
                    holders[int(child)] = int(data.decode())
                except (NoNodeError, ValueError):
                    continue
        except (KazooException, KazooTimeoutError) as exc:
            self._read_later(topic, exc, now=read_since is None)
            return None
        with self._lock:
            if topic not in self._topic_watches:
                return False      # the topic went away: stop watching it
            if self._superseded(topic, read_since):
                return None
            self._topics[topic] = holders
        self._notify()
        return None

    def _read_later(self, what, exc: BaseException, now: bool = True) -> None:
        """A watch's read failed: keep the view, read ``what`` again once
        connected (``now``: at once if the client is connected already; a
        read again that fails waits for the next reconnection)."""
        name = "the broker list" if what is _BROKER_IDS else f"topic {what!r}"
        log.warning("cluster: reading %s failed (%s); read again once connected",
                    name, type(exc).__name__)
        with self._lock:
            self._unread.add(what)
        if now and self.client.connected:
            self.client.handler.spawn(self._read_again)

    def _on_state(self, state: str) -> None:
        # on kazoo's event thread, which must not block: read elsewhere
        if state == KazooState.CONNECTED and self._unread:
            self.client.handler.spawn(self._read_again)

    def _read_again(self) -> None:
        with self._lock:
            unread, self._unread = self._unread, set()
        for what in unread:
            path = paths.BROKER_IDS if what is _BROKER_IDS else paths.broker_topic_path(what)
            with self._lock:
                since = self._watch_calls.get(what, 0)
            try:
                children = self.client.get_children(path)
            except NoNodeError:
                continue
            except (KazooException, KazooTimeoutError) as exc:
                self._read_later(what, exc, now=False)
                continue
            if what is _BROKER_IDS:
                self._on_broker_ids(children, read_since=since)
            else:
                self._on_topic_brokers(what, children, read_since=since)

    # ------------------------------------------------------------ replicated topics

    def _on_replicated_topics(self, topics: list[str]) -> None:
        for topic in topics:
            if topic not in self._replicated_watches:
                self._replicated_watches.add(topic)
                try:
                    DataWatch(self.client, paths.replicated_topic_path(topic),
                              lambda data, _stat, _event, t=topic: self._on_assignment(t, data))
                except (KazooException, KazooTimeoutError) as exc:
                    log.warning("cluster: watching replicated topic %r: %s", topic,
                                type(exc).__name__)

    def _on_assignment(self, topic: str, data: bytes | None) -> bool | None:
        if data is None:
            with self._lock:
                self._replicated_watches.discard(topic)
                self._replicated.pop(topic, None)
                for key in [k for k in self._leaders if k[0] == topic]:
                    del self._leaders[key]
                    self._state_watches.discard(key)
            self._notify()
            return False
        try:
            count = len(TopicAssignment.from_json(data).partitions)
        except ValueError as exc:
            log.error("cluster: ignoring replicated topic %r: %s", topic, exc)
            return None
        for p in range(count):
            if (topic, p) not in self._state_watches:
                self._state_watches.add((topic, p))
                DataWatch(self.client, paths.partition_state_path(topic, p),
                          lambda d, _s, _event, t=topic, p=p: self._on_partition_state(t, p, d))
        with self._lock:
            self._replicated[topic] = count
        self._notify()
        return None

    def _on_partition_state(self, topic: str, partition: int, data: bytes | None
                            ) -> bool | None:
        if (topic, partition) not in self._state_watches:
            return False
        try:
            leader = PartitionState.from_json(data).leader if data else NO_LEADER
        except ValueError:
            leader = NO_LEADER
        with self._lock:
            if self._leaders.get((topic, partition)) == leader:
                return None
            self._leaders[(topic, partition)] = leader
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
