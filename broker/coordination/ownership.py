"""A consumer's membership in its group, and partition ownership by the
paper's decentralised rebalance. No coordinator: every consumer runs the
same deterministic algorithm on the same ZooKeeper data.

Nodes (see paths.py)::

    /consumers/<group>/ids/<consumer id>                 ephemeral, JSON subscription
    /consumers/<group>/owners/<topic>/<broker-partition> ephemeral, "<consumer id>"

Rebalance (triggered by watches on the group's consumers, on the brokers and
on the topics' partitions; and once at start):
  1. read the group's consumers and their subscriptions;
  2. for each subscribed topic, sort its broker-partitions P and the
     consumers C subscribed to it; consumer i of C takes the contiguous
     range of |P|/|C| partitions (the first |P| mod |C| consumers one more);
  3. release what it owns but no longer should: first ``on_release`` (the
     consumer stops fetching them and commits their offsets), then delete
     its owner nodes;
  4. claim the new ones by creating owner nodes. A node still held by
     another consumer (which has not released it yet) fails the claim: give
     back what this attempt claimed, wait (back-off with jitter), re-read
     and try again; after ``max_attempts``, wait for the next trigger.
  5. ``on_assign`` with the full set now owned.
Because owner nodes are ephemeral and created exclusively, a partition is
owned by at most one consumer of the group at any moment.

Session states (kazoo) and what they do here::

    CONNECTED  --SUSPENDED-->  SUSPENDED: on_pause() — stop handing out
                               messages; the session may still survive, and
                               our owner nodes with it
    SUSPENDED  --CONNECTED-->  same session: on_resume()
    SUSPENDED  --LOST------->  the session expired and ZooKeeper deleted our
                               nodes, so others may own our partitions now:
                               on_lost() drops them all *without* committing
                               (a late commit could overwrite the new owner's);
                               we were already paused since SUSPENDED, so no
                               message of theirs reached our application;
    LOST       --CONNECTED-->  a new session: re-register, rebalance.

Callbacks run on this member's coordination thread, never on kazoo's. So
that nothing waits for that thread (a loaded machine may run it late),
``interrupted`` is true from the moment kazoo reports SUSPENDED or LOST
until the coordination thread has handled a CONNECTED after it: a consumer
hands out nothing meanwhile and reports owning nothing (kazoo may be
connected again, with a new session, before on_pause and on_lost have run).
"""
from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from . import paths
from .cluster import ClusterView
from .zk_acls import acl_for

log = logging.getLogger(__name__)

Assignment = frozenset[tuple[str, str]]     # {(topic, broker-partition)}


@dataclass(frozen=True)
class Subscription:
    """Topic names, or a whitelist regex (and an optional blacklist regex)."""

    topics: tuple[str, ...] = ()
    whitelist: str | None = None
    blacklist: str | None = None

    def __post_init__(self) -> None:
        if bool(self.topics) == bool(self.whitelist):
            raise ValueError("subscribe to topic names or to a whitelist pattern, not both")
        for pattern in (self.whitelist, self.blacklist):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"bad pattern {pattern!r}: {exc}") from None

    def matches(self, topic: str) -> bool:
        if self.topics:
            return topic in self.topics
        if self.blacklist and re.fullmatch(self.blacklist, topic):
            return False
        return re.fullmatch(self.whitelist, topic) is not None

    def to_json(self) -> bytes:
        return json.dumps({"topics": list(self.topics), "whitelist": self.whitelist,
                           "blacklist": self.blacklist}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Subscription":
        d = json.loads(data.decode())
        return cls(tuple(d.get("topics") or ()), d.get("whitelist"), d.get("blacklist"))


def assign_range(partitions: list[str], consumers: list[str], me: str) -> list[str]:
    """The paper's rule: ``me``'s contiguous share of the sorted partitions."""
    if me not in consumers:
        return []
    i = consumers.index(me)
    n, extra = divmod(len(partitions), len(consumers))
    start = i * n + min(i, extra)
    return partitions[start:start + n + (1 if i < extra else 0)]


class GroupMember:
    def __init__(self, client: KazooClient, cluster: ClusterView, group: str,
                 consumer_id: str, subscription: Subscription,
                 on_release: Callable[[Assignment], None],
                 on_assign: Callable[[Assignment], None],
                 on_pause: Callable[[], None], on_resume: Callable[[], None],
                 on_lost: Callable[[], None],
                 backoff_ms: int = 100, max_attempts: int = 50) -> None:
        self.client = client
        self.cluster = cluster
        self.group = group
        self.consumer_id = consumer_id
        self.subscription = subscription
        self._on_release, self._on_assign = on_release, on_assign
        self._on_pause, self._on_resume, self._on_lost = on_pause, on_resume, on_lost
        self.backoff_ms = backoff_ms
        self.max_attempts = max_attempts
        self.owned: Assignment = frozenset()
        self.state = "NEW"
        self.rebalances = 0
        self.last_rebalance_s = 0.0
        self.balanced = threading.Event()       # set when the last rebalance succeeded
        self._wake = threading.Event()
        self._requested = 0
        self._events: list[str] = []            # session events for the coordination thread
        self._events_lock = threading.Lock()
        # SUSPENDED and LOST reported by kazoo, and how many of them the
        # coordination thread has followed by a CONNECTED it handled
        self._interruptions = 0
        self._resumed_through = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"group-{group}-{consumer_id}",
                                        daemon=True)

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        self.client.add_listener(self._on_session)
        self._register()
        ChildrenWatch(self.client, paths.consumer_ids_path(self.group),
                      lambda _children: self.request_rebalance())
        self.cluster.add_listener(self.request_rebalance)
        self._thread.start()
        self.request_rebalance()

    def request_rebalance(self) -> None:
        # a counter, not just the event: a trigger that arrives while a
        # rebalance runs must cause another one after it
        self._requested += 1
        self.balanced.clear()
        self._wake.set()

    def close(self) -> None:
        """Release everything (``on_release`` commits) and deregister, so the
        others rebalance at once."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)
        # without a connection there is nothing to do: our nodes are
        # ephemeral and go with the session (and kazoo would wait forever)
        if self.client.connected:
            try:
                if self.owned:
                    self._release(self.owned)
                self.client.delete_async(
                    paths.consumer_id_path(self.group, self.consumer_id)).get(timeout=10)
            except (NoNodeError, KazooException, KazooTimeoutError):
                pass
        self.client.remove_listener(self._on_session)
        self.state = "CLOSED"

    # ------------------------------------------------------------ session states

    @property
    def interrupted(self) -> bool:
        """Whether the session was suspended or lost and the coordination
        thread has not yet handled the reconnection (see the module's
        docstring): true at once, on kazoo's report."""
        return self._interruptions != self._resumed_through

    def _on_session(self, state: str) -> None:
        # kazoo's thread: hand over, never block
        with self._events_lock:
            self._events.append(state)
            if state != KazooState.CONNECTED:
                self._interruptions += 1
        self._wake.set()

    def _handle_session_events(self) -> None:
        with self._events_lock:
            events, self._events = self._events, []
            reported = self._interruptions
        self._follow_session_events(events)
        if events and events[-1] == KazooState.CONNECTED:
            self._resumed_through = reported

    def _follow_session_events(self, events: list[str]) -> None:
        for state in events:
            if state == KazooState.SUSPENDED:
                self.state = "SUSPENDED"
                log.warning("%s/%s: ZooKeeper connection suspended: pausing", self.group,
                            self.consumer_id)
                self._on_pause()
            elif state == KazooState.LOST:
                self.state = "LOST"
                log.warning("%s/%s: ZooKeeper session lost: dropping %d partitions",
                            self.group, self.consumer_id, len(self.owned))
                self.owned = frozenset()
                self.balanced.clear()
                self._on_lost()
            elif state == KazooState.CONNECTED:
                if self.state == "LOST":
                    self._register()
                self.state = "CONNECTED"
                self._on_resume()
                self.balanced.clear()      # see whether anything changed meanwhile

    def _register(self) -> None:
        path = paths.consumer_id_path(self.group, self.consumer_id)
        # /consumers first, with its own ACL (anyone may start a group under
        # it, zk_acls.py): a group's identity must not become its only owner
        self.client.ensure_path(paths.CONSUMERS, acl=acl_for(self.client, paths.CONSUMERS))
        self.client.ensure_path(paths.consumer_ids_path(self.group))
        try:
            self.client.create(path, self.subscription.to_json(), ephemeral=True)
        except NodeExistsError:
            _data, stat = self.client.get(path)
            if stat.ephemeralOwner != self.client.client_id[0]:
                raise RuntimeError(f"consumer id {self.consumer_id!r} is already registered "
                                   f"in group {self.group!r} by another session") from None
        self.state = "CONNECTED"

    # ------------------------------------------------------------ rebalancing

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._handle_session_events()
                if self.state in ("SUSPENDED", "LOST") or not self.client.connected:
                    continue
                if not self.balanced.is_set():
                    self._rebalance()
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("%s/%s: rebalance interrupted (%s); retrying", self.group,
                            self.consumer_id, exc)
                self._stop.wait(self.backoff_ms / 1000)
                self._wake.set()
            except Exception:   # noqa: BLE001 - the thread must live on
                log.exception("%s/%s: rebalance failed", self.group, self.consumer_id)
                self._stop.wait(1.0)
                self._wake.set()

    def target(self) -> Assignment:
        """What this consumer should own now, by the paper's rule."""
        ids_path = paths.consumer_ids_path(self.group)
        consumers = sorted(self.client.get_children(ids_path))
        subscriptions: dict[str, Subscription] = {}
        for cid in consumers:
            try:
                data, _ = self.client.get(f"{ids_path}/{cid}")
                subscriptions[cid] = Subscription.from_json(data)
            except (NoNodeError, ValueError):
                continue
        wanted = set()
        for topic in self.cluster.topics():
            if not self.subscription.matches(topic):
                continue
            members = [c for c in consumers if c in subscriptions
                       and subscriptions[c].matches(topic)]
            for bp in assign_range(self.cluster.partitions(topic), members, self.consumer_id):
                wanted.add((topic, bp))
        return frozenset(wanted)

    def _rebalance(self) -> None:
        started = time.monotonic()
        requested = self._requested
        for attempt in range(1, self.max_attempts + 1):
            if self._stop.is_set():
                return
            self._handle_session_events()
            if self.state in ("SUSPENDED", "LOST"):
                return
            target = self.target()
            if target == self.owned and self._still_own(target):
                break
            release = self.owned - target
            if release:
                self._release(release)
            claimed, blocked = self._claim(target - self.owned)
            if blocked is None:
                break
            log.info("%s/%s: %s/%s still owned by another consumer (attempt %d); backing off",
                     self.group, self.consumer_id, blocked[0], blocked[1], attempt)
            self._release(claimed)
            delay = self.backoff_ms * min(attempt, 10) * (0.5 + random.random())
            if self._stop.wait(delay / 1000):
                return
        else:
            log.error("%s/%s: could not complete a rebalance in %d attempts; waiting for the "
                      "next change", self.group, self.consumer_id, self.max_attempts)
            return
        self.rebalances += 1
        self.last_rebalance_s = time.monotonic() - started
        self._on_assign(self.owned)
        if self._requested == requested:
            self.balanced.set()
        else:
            self._wake.set()          # something changed meanwhile: once more
        log.info("%s/%s: owns %d partitions after rebalance %d (%.0f ms)", self.group,
                 self.consumer_id, len(self.owned), self.rebalances,
                 self.last_rebalance_s * 1000)

    def _still_own(self, target: Assignment) -> bool:
        for topic, bp in target:
            try:
                data, _ = self.client.get(paths.owners_path(self.group, topic, bp))
            except NoNodeError:
                return False
            if data.decode() != self.consumer_id:
                return False
        return True

    def _release(self, partitions: Assignment) -> None:
        """Stop using ``partitions`` (the callback commits their offsets),
        then delete our owner nodes of them."""
        if not partitions:
            return
        self._on_release(frozenset(partitions))
        for topic, bp in partitions:
            path = paths.owners_path(self.group, topic, bp)
            try:
                data, _ = self.client.get(path)
                if data.decode() == self.consumer_id:
                    self.client.delete(path)
            except NoNodeError:
                pass
        self.owned = self.owned - partitions

    def _claim(self, partitions: Assignment) -> tuple[Assignment, tuple[str, str] | None]:
        """Create owner nodes; returns (claimed, the first one held by another)."""
        claimed = set()
        for topic, bp in sorted(partitions):
            path = paths.owners_path(self.group, topic, bp)
            try:
                self.client.create(path, self.consumer_id.encode(), ephemeral=True,
                                   makepath=True)
            except NodeExistsError:
                try:
                    data, _ = self.client.get(path)
                except NoNodeError:
                    data = b""
                if data.decode() != self.consumer_id:
                    self.owned = self.owned | claimed
                    return frozenset(claimed), (topic, bp)
            claimed.add((topic, bp))
        self.owned = self.owned | claimed
        return frozenset(claimed), None
