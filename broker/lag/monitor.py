"""Lag you can trust: every consumer group's status, partition by partition,
read from outside the group (ZooKeeper and the brokers), as Burrow does.

One cycle (``LagMonitor.evaluate``):

1. From ZooKeeper, in bulk (broker/coordination/bulk_read.py: ZooKeeper's
   multiRead, never one round trip per node): the groups under
   ``/consumers``, each group's members (``ids``), owners and committed
   offsets (``offsets``: the value and the node's modification time, which
   is the commit's time).
2. The partitions a group consumes: every broker-partition of every topic
   it has committed or owned, or that its live members' subscriptions
   match — owned or not, so a dead member's partitions stay in view.
3. From each broker, **one** Fetch request for all its partitions of every
   group (max_wait 0, 22 bytes each at the committed offset): the
   partition's high watermark (its log end, what consumers can read) and
   the header of the next message to consume, whose timestamp gives the
   lag in seconds (now - that timestamp; 0 when caught up). A partition
   never committed is read at offset 0, or, once retention deleted that, in
   a second Fetch at its earliest offset.
4. Each partition's window of commits grows when its offset node changed
   (a new modification time); broker/lag/evaluator.py judges it.

The lag recorded with a commit is the one seen in the first cycle after it
(Burrow records the broker's offset at commit time; polling every few
seconds makes the difference a few seconds of production).

Never imports broker internals: ZooKeeper, the Fetch API and the codec.
Not thread-safe: one thread calls ``evaluate`` (a service's loop).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from broker.coordination import paths
from broker.coordination.bulk_read import children_many, get_many
from broker.coordination.cluster import ClusterView
from broker.coordination.ownership import Subscription
from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import first_timestamp

from broker.client.connection import BrokerConnection, BrokerConnectionError, parse_address
from .evaluator import Commit, PartitionStatus, Status, Thresholds, evaluate, group_status

log = logging.getLogger(__name__)

HEADER_BYTES = 22          # a message's header: enough for its timestamp


class ZooKeeperUnavailable(ConnectionError):
    """The monitor's ZooKeeper session is not connected: no cycle can run."""


@dataclass
class GroupStatus:
    """One evaluation of a group (as JSON: broker/lag/burrow.py)."""
    group: str
    status: Status
    partitions: list[PartitionStatus]
    members: list[str]
    most_behind: PartitionStatus | None
    total_lag_bytes: int
    evaluated_ms: int
    errors: list[str] = field(default_factory=list)


@dataclass
class _Seen:
    """What the monitor remembers of one (group, topic, broker-partition)."""
    window: deque
    last_mtime: int | None = None
    first_seen_ms: int | None = None


@dataclass
class _Row:
    group: str
    topic: str
    bp: str
    committed: int | None
    mtime: int | None
    owner: str | None


class LagMonitor:
    """Evaluate groups of one cluster. ``client``: a started KazooClient
    rooted at the cluster's chroot (the caller owns it)."""

    def __init__(self, client, thresholds: Thresholds = Thresholds(),
                 clock=time.time, request_timeout: float = 10.0,
                 client_id: str = "samsa-lag", sasl=None, tls=None) -> None:
        """``sasl``: a SaslLogin, for brokers that ask for SCRAM; ``tls``: a
        client context, to ask the brokers' TLS listeners."""
        self.client = client
        self.sasl = sasl
        self.tls = tls
        self.cluster = ClusterView(client, tls=tls is not None)
        self.thresholds = thresholds
        self.clock = clock
        self.request_timeout = request_timeout
        self.client_id = client_id
        self._seen: dict[tuple[str, str, str], _Seen] = {}
        self._conns: dict[str, BrokerConnection] = {}

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # ------------------------------------------------------------ ZooKeeper

    def _check_connected(self) -> None:
        """kazoo queues requests while disconnected and its synchronous calls
        would wait for the reconnection: fail the cycle now instead."""
        if self.client.state != KazooState.CONNECTED:
            raise ZooKeeperUnavailable(f"ZooKeeper is not connected ({self.client.state})")

    def groups(self) -> list[str]:
        self._check_connected()
        try:
            return sorted(self.client.get_children_async(paths.CONSUMERS)
                          .get(timeout=self.request_timeout))
        except NoNodeError:
            return []

    def _children(self, paths_: list[str]) -> list[list[str]]:
        """get_children of every path at once; a missing node gives []."""
        return children_many(self.client, paths_, timeout=self.request_timeout)

    def _read_groups(self, groups: list[str]) -> tuple[dict[str, list[str]], list[_Row]]:
        """Members of each group, and a row per (group, topic, partition)
        it consumes with its committed offset, commit time and owner."""
        base = [f"{paths.group_path(g)}/{kind}" for g in groups
                for kind in ("ids", "offsets", "owners")]
        children = self._children(base)
        members = {g: children[3 * i] for i, g in enumerate(groups)}
        # the subscriptions of live members (their topics are consumed even
        # where nothing was committed yet)
        member_of = [(g, cid) for g in groups for cid in members[g]]
        subs = get_many(self.client, [paths.consumer_id_path(g, cid) for g, cid in member_of],
                        timeout=self.request_timeout)
        topics_of: dict[str, set[str]] = {g: set(children[3 * i + 1]) | set(children[3 * i + 2])
                                          for i, g in enumerate(groups)}
        cluster_topics = self.cluster.topics()
        for (g, _cid), node in zip(member_of, subs):
            if node is None:
                continue
            try:
                sub = Subscription.from_json(node[0])
            except ValueError:
                continue
            topics_of[g] |= {t for t in cluster_topics if sub.matches(t)}
        pairs = [(g, t) for g in groups for t in sorted(topics_of[g])]
        committed_bps = self._children([paths.offsets_path(g, t) for g, t in pairs])
        keys = []
        for (g, t), bps in zip(pairs, committed_bps):
            partitions = set(bps) | set(self.cluster.partitions(t))
            keys += [(g, t, bp) for bp in paths.sort_broker_partitions(partitions)]
        # every offset and owner node in one go (kazoo's get_async per node
        # costs ~110 us of this thread: broker/coordination/bulk_read.py)
        nodes = get_many(self.client, [p for g, t, bp in keys
                                       for p in (paths.offsets_path(g, t, bp),
                                                 paths.owners_path(g, t, bp))],
                         timeout=self.request_timeout)
        rows = []
        for i, (g, t, bp) in enumerate(keys):
            offset_node, owner_node = nodes[2 * i], nodes[2 * i + 1]
            committed = mtime = None
            if offset_node is not None:
                try:
                    committed, mtime = int(offset_node[0].decode()), offset_node[1].mtime
                except ValueError:
                    pass
            owner = owner_node[0].decode() or None if owner_node is not None else None
            rows.append(_Row(g, t, bp, committed, mtime, owner))
        return members, rows

    # ------------------------------------------------------------ the brokers

    def _conn(self, address: str) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is None:
            host, port = parse_address(address)
            conn = self._conns[address] = BrokerConnection(
                host, port, self.client_id, request_timeout=self.request_timeout,
                tls=self.tls, sasl=self.sasl)
        return conn

    def _fetch_heads(self, wanted: list[tuple[str, str, int]]
                     ) -> tuple[dict[tuple[str, str, int], api.FetchResult], list[str]]:
        """{(topic, bp, offset): result}: one Fetch per broker for every
        (topic, broker-partition, offset) it holds; errors by broker."""
        by_broker: dict[int, list[tuple[str, str, int]]] = {}
        errors = []
        for topic, bp, offset in wanted:
            broker_id, _partition = self.cluster.locate(topic, bp)
            if broker_id is None:
                errors.append(f"{topic}/{bp} has no leader")
                continue
            by_broker.setdefault(broker_id, []).append((topic, bp, offset))
        out = {}
        for broker_id, entries in by_broker.items():
            address = self.cluster.address(broker_id)
            if address is None:
                errors.append(f"broker {broker_id} is not registered")
                continue
            request = api.FetchRequest(0, 0, tuple(
                api.FetchEntry(t, self.cluster.locate(t, bp)[1], offset, HEADER_BYTES)
                for t, bp, offset in entries))
            try:
                response = self._conn(address).request(request)
            except (BrokerConnectionError, SamsaError, OSError) as exc:
                self._conns.pop(address).close()
                errors.append(f"broker {broker_id} ({address}): {exc}")
                continue
            for (t, bp, offset), result in zip(entries, response.results):
                out[(t, bp, offset)] = result
        return out, errors

    # ------------------------------------------------------------ one cycle

    def evaluate(self, groups: list[str] | None = None) -> dict[str, GroupStatus]:
        """Every group's status now (or those named)."""
        now_ms = int(self.clock() * 1000)
        self._check_connected()
        groups = self.groups() if groups is None else groups
        members, rows = self._read_groups(groups)
        wanted = {(r.topic, r.bp, r.committed if r.committed is not None else 0) for r in rows}
        heads, errors = self._fetch_heads(sorted(wanted))
        # a partition never committed whose start was deleted: read at its earliest
        again = {(r.topic, r.bp, heads[(r.topic, r.bp, 0)].earliest) for r in rows
                 if r.committed is None and (r.topic, r.bp, 0) in heads
                 and heads[(r.topic, r.bp, 0)].error == ErrorCode.OFFSET_OUT_OF_RANGE
                 and heads[(r.topic, r.bp, 0)].earliest > 0}
        if again:
            more, more_errors = self._fetch_heads(sorted(again))
            heads.update(more)
            errors += more_errors
        statuses: dict[str, list[PartitionStatus]] = {g: [] for g in groups}
        for r in rows:
            statuses[r.group].append(self._partition(r, heads, now_ms, members[r.group]))
        out = {}
        for g in groups:
            parts = statuses[g]
            worst, behind = group_status(parts)
            out[g] = GroupStatus(g, worst, parts, sorted(members[g]), behind,
                                 sum(p.lag_bytes or 0 for p in parts), now_ms, list(errors))
        live = {(r.group, r.topic, r.bp) for r in rows}
        for key in [k for k in self._seen if k[0] in groups and k not in live]:
            del self._seen[key]
        return out

    def _partition(self, r: _Row, heads: dict, now_ms: int, members: list[str]
                   ) -> PartitionStatus:
        position = r.committed if r.committed is not None else 0
        head = heads.get((r.topic, r.bp, position))
        if head is not None and r.committed is None and \
                head.error == ErrorCode.OFFSET_OUT_OF_RANGE and head.earliest > 0:
            position = head.earliest
            head = heads.get((r.topic, r.bp, position), head)
        log_end = lag = seconds = None
        if head is not None and head.high_watermark >= 0:
            log_end = head.high_watermark
            lag = max(0, log_end - position)
            if lag == 0:
                seconds = 0.0
            elif head.error == ErrorCode.NONE:
                ts = first_timestamp(head.message_set)
                if ts > 0:
                    seconds = max(0.0, (now_ms - ts) / 1000)
        seen = self._seen.get((r.group, r.topic, r.bp))
        if seen is None:
            seen = self._seen[(r.group, r.topic, r.bp)] = _Seen(
                deque(maxlen=self.thresholds.window_size), first_seen_ms=now_ms)
        if r.mtime is not None and r.mtime != seen.last_mtime and lag is not None:
            seen.window.append(Commit(r.committed, r.mtime, lag, now_ms))
            seen.last_mtime = r.mtime
        status = Status.OK
        if lag is not None:
            status = evaluate(seen.window, lag, now_ms, self.thresholds,
                              first_seen_ms=seen.first_seen_ms if r.committed is None else None)
        window = seen.window
        return PartitionStatus(r.topic, r.bp, status, r.committed, log_end, lag, seconds,
                               r.owner, r.owner in members if r.owner else False,
                               r.mtime, window[0] if window else None,
                               window[-1] if window else None,
                               min(1.0, len(window) / self.thresholds.window_size))

