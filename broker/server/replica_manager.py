"""The broker's replicas of replicated partitions: which it leads and which
it follows, the leader's bookkeeping of its followers (in-sync set, high
watermark), and the answers to followers' requests (docs/replication.md).

Roles of one partition replica, driven by its state node in ZooKeeper
(replica_state.py), which this broker watches::

    NONE ----state: leader = me----> LEADER ----state: leader = other----> FOLLOWER
      ^  <---state: leader = -1 ------+  <------state: leader = me ----------+
      +------------------------------------state: leader = -1----------------+

  NONE      the state is not known yet (start-up), or no replica may lead:
            produce, fetch and offsets requests get NOT_LEADER_FOR_PARTITION.
  LEADER    records the epoch's start in the log's epoch cache, serves
            producers, consumers (below the high watermark) and followers
            (REPLICA_FETCH, LEADER_EPOCH_END); tracks each follower's log end
            (the offset of its last fetch) and when it was last caught up;
            advances the high watermark to the least log end of the in-sync
            set; shrinks the set (a follower not caught up for
            replica_lag_time_max_ms) and expands it (a follower that reached
            the high watermark and the epoch's start) by compare-and-set.
  FOLLOWER  refuses clients; a ReplicaFetcher of the leader's broker first
            truncates the log to where it agrees with the leader's (by leader
            epoch: LEADER_EPOCH_END), then appends the leader's bytes exactly.

The replicas follow the assignment: a partition added to this broker's
(a new topic, or a reassignment: docs/replication.md) gets a replica in role
NONE until its state is read; one taken away (the controller drops a replica
only once it neither leads nor is needed in sync) stops fetching and its log
is deleted, an empty one standing in its place, or the whole topic's
directory once no partition of it is left here. A log of a replicated topic
without a replica here is never served: clients get NOT_LEADER_FOR_PARTITION.

Invariants:
  * the high watermark never goes down while this broker leads; it never
    passes the log end of any member of the in-sync set this broker knows;
  * the in-sync set this broker acts on is the last one it wrote or read
    in ZooKeeper, except that a shrink counts only once its compare-and-set
    succeeded (until then the larger set holds the watermark back): a leader
    deposed meanwhile (its write fails) never acknowledges acks=all on a
    set that the new leader's followers are not in;
  * an expansion holds the watermark back from the moment its write is
    sent (Kafka's "maximal ISR"): the watermark counts the joining follower
    until the write succeeded, or, after a failed or refused write, until
    the state is read again (synced first; read at every in-sync check
    until a read succeeds). ZooKeeper may name the follower in sync (and
    the controller elect it) before this broker hears that its write
    succeeded; nothing acknowledged meanwhile may be missing from it;
  * an expansion's write succeeds only while the assignment is the one
    this broker last read (a ZooKeeper transaction checks its version): a
    replica a reassignment dropped is never written back in sync;
  * at most one in-sync write per partition is in flight.

Threads: everything here runs on the broker's event loop, except the
ZooKeeper watches (kazoo's thread), which only post to the loop, and the
in-sync writes, which run on the loop's executor and post their outcome back.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import random
import struct
from dataclasses import dataclass, field
from typing import Callable

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from broker.config import BrokerConfig
from broker.security.password_file import read_password_file
from broker.security.tls import ReloadingContext, TlsSettings
from broker.service_kit.settings import ConfigError
from broker.coordination import paths
from broker.coordination.registry import read_broker_address
from broker.coordination.replica_state import (NO_LEADER, PartitionState, PlacementError,
                                               TopicAssignment, place_replicas,
                                               replication_overrides, split_topic_config)
from broker.protocol import api
from broker.protocol.api import quote_name
from broker.protocol.errors import ErrorCode
from broker.storage.errors import CorruptRangeError, InvalidConfigError, OffsetOutOfRangeError
from broker.storage.log import Log
from broker.storage.log_config import parse_int
from broker.storage.log_manager import LogManager, validate_topic_name

from .connection import Connection, FileRegion, Reply
from .metrics import BrokerMetrics

log = logging.getLogger(__name__)

# what an expansion's write returns when the assignment it checked has changed
ASSIGNMENT_CHANGED = object()

_ENTRY_COUNT = struct.Struct(">i")


def read_sasl_login(config: BrokerConfig) -> tuple[str, str] | None:
    """The broker's own (user, password) from its settings, None without."""
    if not config.sasl_username:
        return None
    try:
        return config.sasl_username, read_password_file(config.sasl_password_file,
                                                        "sasl_password_file")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True, eq=False)
class FollowerProgress:
    """What the leader knows of one follower (from its fetches)."""

    log_end: int = -1                 # the offset of its last fetch; -1: none yet this epoch
    caught_up_ms: int = 0             # the last time it had everything the leader had
    last_fetch_leader_end: int = -1   # the leader's log end when it last fetched
    last_fetch_ms: int = 0


@dataclass(slots=True, eq=False)
class PartitionReplica:
    topic: str
    partition: int
    log: Log
    replicas: tuple[int, ...] = ()
    assignment_version: int = -1      # the version of the assignment ``replicas`` came from
    assignment_stale: bool = False    # an expansion found a newer one: none until it is read
    min_insync: int = 1
    role: Role = Role.NONE
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    controller_epoch: int = 0
    zk_version: int = -1
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    isr_write_in_flight: bool = False
    isr_joining: tuple[int, ...] = ()   # an expansion's followers, its write not settled
    needs_truncation: bool = True     # follower: agree with the leader before fetching
    epoch_start: int = 0              # leader: the log end when this epoch began
    state: PartitionState | None = None   # the last state read of ZooKeeper
    state_mzxid: int = -1                 # ... and the zxid of the write that made it

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(slots=True, eq=False)
class ReplicaFetchWait:
    conn: Connection
    reply: Reply
    correlation_id: int
    request: object
    logs: list[Log] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    done: bool = False


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: LogManager, metrics: BrokerMetrics,
                 loop: asyncio.AbstractEventLoop, clock: Callable[[], int]) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = logs
        # (user, password) the fetchers authenticate with, when the leaders'
        # listener asks for SCRAM (the settings sasl_username, sasl_password_file)
        self.sasl_login = read_sasl_login(config)
        # inter_broker_tls: the context followers connect to leaders with (the
        # broker's own certificate as the client's; renewals taken)
        self.tls_client: ReloadingContext | None = ReloadingContext.client(TlsSettings(
            config.tls_cert_file, config.tls_key_file, config.tls_ca_file)) \
            if config.inter_broker_tls else None
        self.metrics = metrics
        self._loop = loop
        self._clock = clock
        # log -> its replica, for the request paths to check roles with one lookup
        self.replicated: dict[Log, PartitionReplica] = {}
        self.partitions: dict[tuple[str, int], PartitionReplica] = {}
        self.produce_path = None          # set by the server (acks=all waiters, follower appends)
        self.fetch_long_poll = None       # set by the server (consumers parked on a log)
        self.client = None                # the broker's kazoo client, once connected
        self._topics_read = False         # the replicated topics read once since start
        self.addresses: dict[int, tuple[str, int]] = {}
        self.fetchers: dict[int, object] = {}       # leader broker id -> ReplicaFetcher
        self.stopping = False
        # the czxid of this broker's registration in ZooKeeper (None: not
        # registered now): a state naming this broker leader counts only if
        # written after it (module docstring)
        self.registration: int | None = None
        self._parked: dict[Log, set[ReplicaFetchWait]] = {}
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._shrink_task: asyncio.Task | None = None
        self._creating: set[str] = set()

    # ------------------------------------------------------------ life cycle

    def load_local(self) -> None:
        """The replicated topics found in the data directory: role NONE
        until ZooKeeper says otherwise (clients are refused meanwhile)."""
        for name, topic in self.logs.topics.items():
            if topic.replicated:
                for p, lg in enumerate(topic.logs):
                    self._replica(name, p, lg)

    def _replica(self, topic: str, partition: int, lg: Log) -> PartitionReplica:
        rep = self.partitions.get((topic, partition))
        if rep is None or rep.log is not lg:
            rep = PartitionReplica(topic, partition, lg)
            self.partitions[(topic, partition)] = rep
            self.replicated[lg] = rep
            if lg.high_watermark is None:
                hw = lg.checkpointed_high_watermark
                lg.set_high_watermark(min(hw if hw is not None else 0, lg.end_offset))
        return rep

    def start(self, client) -> None:
        """The broker's ZooKeeper client is connected (kazoo's thread): watch
        the replicated topics and the live brokers."""
        self.client = client
        client.ensure_path(paths.REPLICATED_TOPICS)
        client.ensure_path(paths.BROKER_IDS)
        ChildrenWatch(client, paths.BROKER_IDS, self._on_broker_ids)
        ChildrenWatch(client, paths.REPLICATED_TOPICS, self._on_topics)
        if self._shrink_task is None:
            self._loop.call_soon_threadsafe(self._start_shrink_task)

    def _start_shrink_task(self) -> None:
        interval = max(0.1, min(2.5, self.config.replica_lag_time_max_ms / 4000))
        self._shrink_task = self._loop.create_task(self._shrink_periodically(interval))

    def close(self) -> None:
        self.stopping = True
        if self._shrink_task is not None:
            self._shrink_task.cancel()
        for fetcher in list(self.fetchers.values()):
            fetcher.stop()
        self.fetchers.clear()
        self.answer_parked()

    # ------------------------------------------------------------ watches (kazoo's thread)

    def _on_broker_ids(self, children: list[str]) -> None:
        addresses = {}
        for child in children:
            if not child.isdigit():
                continue
            try:
                addresses[int(child)] = read_broker_address(self.client, int(child),
                                                            self.config.inter_broker_tls)
            except NoNodeError:
                if self.config.inter_broker_tls:
                    log.warning("replication: broker %s has no TLS listener registered; "
                                "inter_broker_tls cannot fetch from it", child)
                continue
            except ValueError:
                continue
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("replication: reading broker %s failed: %s", child, exc)
        self._loop.call_soon_threadsafe(self._set_addresses, addresses)

    @property
    def known_topics(self) -> set[str]:
        """The replicated topics of the cluster, as last seen (any thread):
        never to be auto-created here as unreplicated ones."""
        return self._watched_topics

    def replicated_in_zookeeper(self, topic: str, timeout: float = 0.25) -> bool | None:
        """Is ``topic`` a replicated topic of the cluster? Asked of ZooKeeper
        now if this broker's watch has not told it: blocking the event loop
        for one ZooKeeper round trip (at most ``timeout`` s), on the
        auto-create path only, so once per new topic name (and per retry of
        a produce while the watch has not caught up). A client that read a
        new topic's leader in ZooKeeper may reach that broker before its
        watch fires: without this, the broker would auto-create an
        unreplicated twin and never replicate the topic. While ZooKeeper is
        away after this broker had read the cluster's replicated topics, the
        answer is what it read then (a replicated topic is only ever made
        through ZooKeeper). None: it cannot say (never read them since it
        started, or no answer in time): the callers then refuse to create
        the topic (retry): a broker whose disk was lost must not make a twin
        of a replicated topic it held."""
        if topic in self._watched_topics:
            return True
        zk = self.client
        if zk is None or not zk.connected:
            return False if self._topics_read else None
        try:
            found = zk.exists_async(paths.replicated_topic_path(topic)).get(timeout=timeout)
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("replication: asking ZooKeeper whether %s is replicated failed: %s",
                        quote_name(topic), type(exc).__name__)
            return None
        return found is not None

    def _on_topics(self, topics: list[str]) -> None:
        self._topics_read = True          # (kazoo's thread; read by the event loop)
        for topic in topics:
            if topic not in self._watched_topics:
                self._watched_topics.add(topic)
                DataWatch(self.client, paths.replicated_topic_path(topic),
                          lambda data, stat, _event, t=topic: self._on_assignment(t, data, stat))

    def _on_assignment(self, topic: str, data: bytes | None, stat) -> bool | None:
        if data is None:
            self._watched_topics.discard(topic)
            self._loop.call_soon_threadsafe(self._assignment_changed, topic, None, -1)
            return False                  # stop watching: a new topic of the name is watched anew
        try:
            assignment = TopicAssignment.from_json(data)
        except ValueError as exc:
            log.error("replication: ignoring topic %s: %s", quote_name(topic), exc)
            return None
        self._loop.call_soon_threadsafe(self._assignment_changed, topic, assignment,
                                        stat.version if stat is not None else -1)
        for p, replicas in enumerate(assignment.partitions):
            if self.broker_id in replicas and (topic, p) not in self._watched_states:
                self._watched_states.add((topic, p))
                DataWatch(self.client, paths.partition_state_path(topic, p),
                          lambda d, s, _event, t=topic, p=p: self._on_state(t, p, d, s))
            elif self.broker_id not in replicas:
                self._watched_states.discard((topic, p))   # moved away: its watch stops
        return None

    def _on_state(self, topic: str, partition: int, data: bytes | None, stat) -> bool | None:
        if (topic, partition) not in self._watched_states:
            return False
        if data is None:
            state = None
        else:
            try:
                state = PartitionState.from_json(data)
            except ValueError as exc:
                log.error("replication: ignoring the state of %s/%d: %s", quote_name(topic),
                          partition, exc)
                return None
        self._loop.call_soon_threadsafe(self._state_changed, topic, partition, state,
                                        stat.version if stat is not None else -1,
                                        stat.mzxid if stat is not None else -1)
        return None

    def registration_changed(self, czxid: int | None) -> None:
        """The broker (re)registered in ZooKeeper, or lost its session (None);
        any thread."""
        self._loop.call_soon_threadsafe(self._registration_changed, czxid)

    # ------------------------------------------------------------ applying ZooKeeper's view

    def _set_addresses(self, addresses: dict[int, tuple[str, int]]) -> None:
        self.addresses = addresses

    def _assignment_changed(self, topic: str, assignment: TopicAssignment | None,
                            version: int) -> None:
        if self.stopping:
            return
        local = self.logs.get(topic)
        if assignment is None:
            if local is not None and local.replicated:
                self._delete_local(topic)
            return
        if self.broker_id not in {b for r in assignment.partitions for b in r}:
            if local is not None and local.replicated:
                self._delete_local(topic)          # moved off this broker entirely
            return
        if local is not None and not local.replicated:
            log.error("replication: topic %s is replicated in the cluster but this broker "
                      "holds an unreplicated topic of that name; not replicating it",
                      quote_name(topic))
            return
        if local is None:
            overrides = {k: v for k, v in assignment.config.items()
                         if k not in replication_overrides}
            try:
                local = self.logs.create_topic(topic, len(assignment.partitions), overrides,
                                               replicated=True)
            except Exception as exc:       # noqa: BLE001 - disk full, bad name: say so
                log.error("replication: cannot create the replicas of %s: %s",
                          quote_name(topic), exc)
                return
        min_insync = int(assignment.config.get("min.insync.replicas",
                                               self.config.min_insync_replicas))
        for p, replicas in enumerate(assignment.partitions):
            if p < len(local.logs) and self.broker_id in replicas:
                rep = self._replica(topic, p, local.logs[p])
                rep.replicas, rep.assignment_version = replicas, version
                rep.assignment_stale = False
                rep.min_insync = min_insync
                for gone in set(rep.followers) - set(replicas):
                    del rep.followers[gone]
                rep.isr_joining = tuple(b for b in rep.isr_joining if b in replicas)
                stray = [b for b in rep.isr if b not in replicas]
                if rep.role is Role.LEADER and stray:
                    # a follower moved away that this leader took back in
                    # (its fetch came before the assignment): it fetches no
                    # more, and would hold the high watermark back
                    self._write_isr(rep, tuple(b for b in rep.isr if b in replicas), "shrink")
            elif (topic, p) in self.partitions:
                self._drop_replica(topic, p)

    def _drop_replica(self, topic: str, partition: int) -> None:
        """This broker is no longer a replica of the partition (a
        reassignment moved it away): stop following (or leading), answer
        what waits on the log, delete its data. An empty log takes its place,
        as on a broker that never held the partition: clients are refused it
        (produce_refusal, read_refusal), and a later reassignment back here
        starts from that empty log."""
        rep = self.partitions.pop((topic, partition))
        lg = rep.log
        self.replicated.pop(lg, None)
        self._stop_following(rep)
        if rep.role is Role.LEADER:
            # never by the controller's reassignment (a target replica leads
            # before the assignment drops any), but an assignment edited by hand
            rep.role = Role.NONE
            self._step_down(rep, "no longer a replica here")
        rep.role = Role.NONE
        self.produce_path.forget_logs([lg])
        self.fetch_long_poll.answer(self.fetch_long_poll.take_parked([lg]))
        self.answer_parked([lg])
        try:
            self.logs.reset_partition(topic, partition)
            log.info("replication: %s moved off this broker; deleted its replica", rep.name,
                     extra={"event": "replica_deleted"})
        except OSError as exc:
            log.error("replication: cannot delete the replica of %s: %s", rep.name, exc)

    def _delete_local(self, topic: str) -> None:
        local = self.logs.get(topic)
        for p, lg in enumerate(local.logs):
            rep = self.partitions.pop((topic, p), None)
            self.replicated.pop(lg, None)
            self._watched_states.discard((topic, p))
            if rep is not None:
                self._stop_following(rep)
                self._step_down(rep, "topic deleted")
        self.produce_path.forget_logs(local.logs)
        self.fetch_long_poll.answer(self.fetch_long_poll.take_parked(local.logs))
        try:
            self.logs.delete_topic(topic)
            log.info("replication: deleted the replicas of %s", quote_name(topic))
        except OSError as exc:
            log.error("replication: cannot delete the replicas of %s: %s", quote_name(topic), exc)

    def _registration_changed(self, czxid: int | None) -> None:
        if czxid == self.registration:
            return
        self.registration = czxid
        for rep in list(self.partitions.values()):
            if rep.state is not None and not self.stopping:
                self._apply(rep)

    def _state_changed(self, topic: str, partition: int, state: PartitionState | None,
                       version: int, mzxid: int = -1) -> None:
        rep = self.partitions.get((topic, partition))
        if rep is None or self.stopping:
            return
        if state is None:
            rep.state = None
            self._become_none(rep, "state node deleted")
            return
        if version < rep.zk_version or state.leader_epoch < rep.leader_epoch:
            return                        # older than what we know (our own write's outcome)
        rep.zk_version = version
        rep.state, rep.state_mzxid = state, max(mzxid, rep.state_mzxid)
        if not rep.isr_write_in_flight:
            rep.isr_joining = ()          # the set ZooKeeper holds is known now
        self._apply(rep)

    def _apply(self, rep: PartitionReplica) -> None:
        """Take the role the last state read says."""
        state = rep.state
        rep.controller_epoch = state.controller_epoch
        if state.leader == self.broker_id and (self.registration is None
                                               or rep.state_mzxid < self.registration):
            # Written before this run of the broker registered: about its
            # previous run (restarted, perhaps with a wiped disk) or a session
            # that expired since (deposed while paused, perhaps). Not ours to
            # act on: the controller writes it again, with a new epoch.
            self._become_none(rep, "the state naming this broker leader predates its "
                                   "registration; waiting for the controller")
            return
        if state.leader == self.broker_id:
            if rep.role is not Role.LEADER or rep.leader_epoch != state.leader_epoch:
                self._become_leader(rep, state)
            else:
                self._count_isr_change(rep.isr, state.isr)
                rep.isr = state.isr
                self._advance_high_watermark(rep)
        elif state.leader == NO_LEADER:
            self._become_none(rep, "no replica may lead")
            rep.leader_epoch, rep.isr = state.leader_epoch, state.isr
        elif rep.role is not Role.FOLLOWER or rep.leader != state.leader or \
                rep.leader_epoch != state.leader_epoch:
            self._become_follower(rep, state)
        else:
            rep.isr = state.isr

    def _count_isr_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        """A led partition's in-sync set changed by a state read, same epoch:
        the controller took replicas out (gone or restarted: with a lag time
        longer than the session timeout, how a crashed follower leaves), or
        this broker's own write was seen before its answer (``_write_isr``
        then leaves it uncounted, its version being known). Counted as the
        leader's own shrinks and expands are."""
        if set(new) < set(old):
            self.metrics.isr_shrinks += 1
        elif set(new) > set(old):
            self.metrics.isr_expands += 1

    def _become_leader(self, rep: PartitionReplica, state: PartitionState) -> None:
        lg = rep.log
        self._stop_following(rep)
        lg.write_pending()
        lg.epochs.assign(state.leader_epoch, lg.end_offset)
        now = self._clock()
        rep.role, rep.leader, rep.leader_epoch, rep.isr = (Role.LEADER, self.broker_id,
                                                           state.leader_epoch, state.isr)
        rep.epoch_start = lg.end_offset
        rep.followers = {b: FollowerProgress(caught_up_ms=now)
                         for b in rep.replicas if b != self.broker_id}
        self.metrics.leader_changes += 1
        log.info("replication: leading %s from offset %d (epoch %d, in sync %s, high "
                 "watermark %d)", rep.name, lg.end_offset, state.leader_epoch, list(state.isr),
                 lg.high_watermark, extra={"event": "became_leader"})
        self._advance_high_watermark(rep)

    def _become_follower(self, rep: PartitionReplica, state: PartitionState) -> None:
        was_leader = rep.role is Role.LEADER
        self._stop_following(rep)
        rep.role, rep.leader, rep.leader_epoch, rep.isr = (Role.FOLLOWER, state.leader,
                                                           state.leader_epoch, state.isr)
        if was_leader:
            self._step_down(rep, f"broker {state.leader} leads now")
        rep.needs_truncation = True
        rep.followers = {}
        log.info("replication: following broker %d for %s (epoch %d)", state.leader, rep.name,
                 state.leader_epoch, extra={"event": "became_follower"})
        self._fetcher(state.leader).add(rep)

    def _become_none(self, rep: PartitionReplica, why: str) -> None:
        if rep.role is Role.NONE:
            return
        was_leader = rep.role is Role.LEADER
        self._stop_following(rep)
        rep.role, rep.leader = Role.NONE, NO_LEADER
        if was_leader:
            self._step_down(rep, why)
        log.warning("replication: %s has no leader here (%s)", rep.name, why)

    def _step_down(self, rep: PartitionReplica, why: str) -> None:
        """No longer the leader: fail what waits on its followers, answer
        the fetches parked on it (they now get NOT_LEADER_FOR_PARTITION)."""
        lg = rep.log
        self.produce_path.fail_replica_waiters(lg, ErrorCode.NOT_LEADER_FOR_PARTITION,
                                               f"no longer the leader of {rep.name}: {why}")
        self.fetch_long_poll.answer(self.fetch_long_poll.take_parked([lg]))
        self.answer_parked([lg])

    def _stop_following(self, rep: PartitionReplica) -> None:
        if rep.role is Role.FOLLOWER:
            fetcher = self.fetchers.get(rep.leader)
            if fetcher is not None:
                fetcher.remove(rep)

    def _fetcher(self, leader: int):
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            from .replica_fetcher import ReplicaFetcher
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
        return fetcher

    # ------------------------------------------------------------ what clients may do

    def produce_refusal(self, lg: Log, acks: int) -> tuple[int, str] | None:
        """Why a produce to ``lg`` (a log of a replicated topic) is refused,
        or None."""
        rep = self.replicated.get(lg)
        if rep is None:
            return self._no_replica(lg)
        if rep.role is not Role.LEADER or self.stopping:
            return (ErrorCode.NOT_LEADER_FOR_PARTITION,
                    f"broker {self.broker_id} does not lead {rep.name}"
                    + (f" (broker {rep.leader} does)" if rep.leader >= 0 else ""))
        if acks == api.Acks.ALL and len(rep.isr) < rep.min_insync:
            return (ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{rep.name} has {len(rep.isr)} in-sync replicas {list(rep.isr)}, fewer "
                    f"than min.insync.replicas={rep.min_insync}: nothing was appended")
        return None

    def read_refusal(self, lg: Log) -> tuple[int, str] | None:
        """Why a consumer's fetch or offsets request on ``lg`` (a log of a
        replicated topic) is refused."""
        rep = self.replicated.get(lg)
        if rep is None:
            return self._no_replica(lg)
        if rep.role is not Role.LEADER:
            return (ErrorCode.NOT_LEADER_FOR_PARTITION,
                    f"broker {self.broker_id} does not lead {rep.name}"
                    + (f" (broker {rep.leader} does)" if rep.leader >= 0 else ""))
        return None

    def _no_replica(self, lg: Log) -> tuple[int, str]:
        """A partition of a replicated topic that this broker holds no
        replica of (the topic's other partitions are here, or it was moved
        away): its log here is empty and never to be written."""
        return (ErrorCode.NOT_LEADER_FOR_PARTITION,
                f"broker {self.broker_id} holds no replica of {lg.name}")

    def led_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` this broker leads (for "any partition")."""
        local = self.logs.get(topic)
        if local is None:
            return []
        return [p for p, lg in enumerate(local.logs)
                if (rep := self.replicated.get(lg)) is not None and rep.role is Role.LEADER]

    def enough_in_sync(self, lg: Log) -> bool:
        rep = self.replicated.get(lg)
        return rep is not None and len(rep.isr) >= rep.min_insync

    # ------------------------------------------------------------ the leader's bookkeeping

    def log_written(self, lg: Log) -> None:
        """``lg`` grew (produce path): a leader alone in its in-sync set
        advances its high watermark; parked followers get the new bytes."""
        rep = self.replicated.get(lg)
        if rep is not None and rep.role is Role.LEADER:
            self._advance_high_watermark(rep)
            parked = self._parked.get(lg)
            if parked:
                for wait in list(parked):
                    self._complete(wait, final=False)

    def _follower_fetched(self, rep: PartitionReplica, follower: int, offset: int,
                          now: int) -> None:
        """Kafka's rule for "caught up": the follower's fetch reached the
        leader's log end as of now, or as of its previous fetch."""
        progress = rep.followers.get(follower)
        if progress is None:
            progress = rep.followers[follower] = FollowerProgress(caught_up_ms=now)
        if 0 <= offset < progress.log_end and follower in rep.isr:
            # it lost bytes it had (a wiped disk, a restart that cut an
            # unflushed tail): it is not in sync, whatever the set says
            log.warning("replication: %s: follower %d fetches from %d, below the %d it had; "
                        "taking it out of the in-sync set", rep.name, follower, offset,
                        progress.log_end)
            progress.caught_up_ms = 0
            self._write_isr(rep, tuple(b for b in rep.isr if b != follower), "shrink")
        leader_end = rep.log.written_end
        if offset >= leader_end:
            progress.caught_up_ms = now
        elif offset >= progress.last_fetch_leader_end >= 0:
            progress.caught_up_ms = max(progress.caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end = leader_end
        progress.last_fetch_ms = now
        progress.log_end = offset
        if follower not in rep.isr and follower in rep.replicas and \
                not rep.assignment_stale and \
                offset >= max(rep.log.high_watermark, rep.epoch_start):
            self._write_isr(rep, tuple(sorted(set(rep.isr) | {follower})), "expand")
        self._advance_high_watermark(rep)

    def _advance_high_watermark(self, rep: PartitionReplica) -> None:
        if rep.role is not Role.LEADER:
            return
        lg = rep.log
        hw = lg.written_end
        # the joining followers count too (maximal ISR); one in both counts twice, harmlessly
        for broker in rep.isr + rep.isr_joining:
            if broker != self.broker_id:
                progress = rep.followers.get(broker)
                hw = min(hw, progress.log_end if progress is not None else -1)
        if hw > lg.high_watermark:
            lg.set_high_watermark(hw)
            self.produce_path.high_watermark_advanced(lg)
            self.fetch_long_poll.wake(lg)

    async def _shrink_periodically(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self._shrink_lagging()
            except Exception:   # a bug: log it, keep checking
                log.exception("replication: in-sync check failed")

    def _shrink_lagging(self) -> None:
        now = self._clock()
        lag_max = self.config.replica_lag_time_max_ms
        for rep in list(self.partitions.values()):
            if rep.role is not Role.LEADER or rep.isr_write_in_flight:
                continue
            if rep.isr_joining:
                # an expansion whose outcome is unknown (its write and the read
                # after it failed): read the state again until it is known
                self._reread_state(rep)
                continue
            lagging = [b for b in rep.isr if b != self.broker_id and
                       now - rep.followers.get(b, FollowerProgress()).caught_up_ms > lag_max]
            stray = [b for b in rep.isr if rep.replicas and b not in rep.replicas]
            if stray:
                # moved away while a write of ours was in flight (the shrink
                # on the assignment's arrival was not sent): it fetches no more
                log.warning("replication: %s: %s in the in-sync set but no longer replicas; "
                            "taking them out", rep.name, stray)
                self._write_isr(rep, tuple(b for b in rep.isr if b not in stray), "shrink")
                continue
            if lagging:
                log.warning("replication: %s: followers %s not caught up for %d ms; taking them "
                            "out of the in-sync set", rep.name, lagging, lag_max)
                self._write_isr(rep, tuple(b for b in rep.isr if b not in lagging), "shrink")

    def _write_isr(self, rep: PartitionReplica, isr: tuple[int, ...], kind: str) -> None:
        """Compare-and-set the in-sync set (on the executor); the change
        counts once written. An expansion also checks that the assignment is
        still the one its followers came from: a follower that a reassignment
        dropped meanwhile is never written back in sync (the controller's
        last step wrote the set without it, and the new assignment may not
        have reached this broker yet)."""
        if rep.isr_write_in_flight or self.client is None or self.stopping:
            return
        rep.isr_write_in_flight = True
        if kind == "expand":
            rep.isr_joining = tuple(b for b in isr if b not in rep.isr)
        state = PartitionState(self.broker_id, rep.leader_epoch, isr, rep.controller_epoch)
        path = paths.partition_state_path(rep.topic, rep.partition)
        version, epoch = rep.zk_version, rep.leader_epoch
        assignment_version = rep.assignment_version if kind == "expand" else -1

        def write():
            try:
                if assignment_version < 0:
                    return self.client.set_async(path, state.to_json(),
                                                 version=version).get(timeout=5)
                tx = self.client.transaction()
                tx.check(paths.replicated_topic_path(rep.topic), assignment_version)
                tx.set_data(path, state.to_json(), version=version)
                checked, written = tx.commit_async().get(timeout=5)
                if isinstance(checked, BadVersionError):
                    return ASSIGNMENT_CHANGED
                if isinstance(written, BadVersionError):
                    return None                   # overtaken, as a plain write would be
                for result in (checked, written):
                    if isinstance(result, Exception) and \
                            not isinstance(result, RolledBackError):
                        return result             # NoNode, NoAuth...: said as an error
                return written
            except BadVersionError:
                return None
            except (KazooException, KazooTimeoutError) as exc:
                return exc

        def written(future) -> None:
            rep.isr_write_in_flight = False
            outcome = future.result()
            if isinstance(outcome, Exception):
                # perhaps written after all (a timeout): the joining followers
                # hold the watermark back until the state is read again
                log.warning("replication: %s: in-sync %s not written (%s); trying again later",
                            rep.name, kind, type(outcome).__name__)
                if rep.isr_joining:
                    self._reread_state(rep)
                return
            if outcome is ASSIGNMENT_CHANGED:
                # no expansion until the new assignment is read (its watch
                # brings it): not a transaction per follower fetch meanwhile
                if rep.assignment_version == assignment_version:    # not read since
                    rep.assignment_stale = True
                log.info("replication: %s: in-sync expand to %s refused: the assignment "
                         "changed meanwhile; reading the state again", rep.name, list(isr),
                         extra={"event": "isr_expand_refused"})
                self._reread_state(rep)
                return
            if outcome is None:
                # overtaken (the controller, a new leader, or an earlier write
                # of ours thought failed): the state read brings what is
                # there, and only then do the joining followers stop counting
                log.info("replication: %s: in-sync %s refused (the state changed); reading it "
                         "again", rep.name, kind)
                self._reread_state(rep)
                return
            rep.isr_joining = ()
            if rep.role is Role.LEADER and rep.leader_epoch == epoch and \
                    outcome.version > rep.zk_version:
                old, rep.isr, rep.zk_version = rep.isr, isr, outcome.version
                rep.state, rep.state_mzxid = state, max(outcome.mzxid, rep.state_mzxid)
                if kind == "shrink":
                    self.metrics.isr_shrinks += 1
                else:
                    self.metrics.isr_expands += 1
                log.info("replication: %s in-sync replicas %s -> %s", rep.name, list(old),
                         list(isr), extra={"event": f"isr_{kind}"})
                self._advance_high_watermark(rep)
                self.produce_path.high_watermark_advanced(rep.log)

        self._loop.run_in_executor(None, write).add_done_callback(
            lambda f: self._loop.call_soon_threadsafe(written, f))

    def _reread_state(self, rep: PartitionReplica) -> None:
        path = paths.partition_state_path(rep.topic, rep.partition)

        def read():
            try:
                # synced: the server answering has every write of this session
                self.client.sync_async(path).get(timeout=5)
                data, stat = self.client.get_async(path).get(timeout=5)
                return PartitionState.from_json(data), stat.version, stat.mzxid
            except (KazooException, KazooTimeoutError, ValueError):
                return None

        def done(future) -> None:
            got = future.result()
            if got is not None:
                self._state_changed(rep.topic, rep.partition, *got)

        self._loop.run_in_executor(None, read).add_done_callback(
            lambda f: self._loop.call_soon_threadsafe(done, f))

    # ------------------------------------------------------------ followers' requests

    def handle_leader_epoch_end(self, conn: Connection, header,
                                req: api.LeaderEpochEndRequest) -> None:
        results = []
        for e in req.entries:
            rep = self.partitions.get((e.topic, e.partition))
            error, message = self._check_leader(rep, e.topic, e.partition, e.current_leader_epoch)
            if error:
                results.append(api.LeaderEpochEndResult(e.topic, e.partition, error, message,
                                                        -1, -1))
                continue
            epoch, end = rep.log.epochs.end_offset_for(e.epoch, rep.log.end_offset)
            results.append(api.LeaderEpochEndResult(e.topic, e.partition, 0, "", epoch, end))
        conn.add_reply(Reply(api.encode_response(header.correlation_id,
                                                 api.LeaderEpochEndResponse(tuple(results)))))

    def _check_leader(self, rep: PartitionReplica | None, topic: str, partition: int,
                      epoch: int) -> tuple[int, str]:
        if rep is None:
            return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"broker {self.broker_id} holds no replica of {quote_name(topic)}/{partition}")
        if rep.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_FOR_PARTITION, f"broker {self.broker_id} does not lead " \
                                                       f"{rep.name}"
        if epoch < rep.leader_epoch:
            return (ErrorCode.FENCED_LEADER_EPOCH,
                    f"{rep.name} is at leader epoch {rep.leader_epoch}, not {epoch}")
        if epoch > rep.leader_epoch:
            return (ErrorCode.UNKNOWN_LEADER_EPOCH,
                    f"broker {self.broker_id} knows {rep.name} up to epoch {rep.leader_epoch}")
        return 0, ""

    def handle_replica_fetch(self, conn: Connection, header, req: api.ReplicaFetchRequest) -> None:
        reply = Reply()
        conn.add_reply(reply)
        wait = ReplicaFetchWait(conn, reply, header.correlation_id, req)
        now = self._clock()
        for e in req.entries:
            rep = self.partitions.get((e.topic, e.partition))
            error, _ = self._check_leader(rep, e.topic, e.partition, e.leader_epoch)
            if not error and rep.log.earliest_offset <= e.offset <= rep.log.written_end:
                self._follower_fetched(rep, req.replica_id, e.offset, now)
        max_wait = min(req.max_wait_ms, self.config.max_fetch_wait_ms)
        if self._complete(wait, final=max_wait == 0 or self.stopping):
            return
        for e in req.entries:
            lg = self.partitions[(e.topic, e.partition)].log
            wait.logs.append(lg)
            self._parked.setdefault(lg, set()).add(wait)
        conn.parked_fetches.add(wait)
        wait.timer = self._loop.call_later(max_wait / 1000, self._complete, wait, True)

    def drop_connection(self, conn: Connection) -> None:
        for wait in list(conn.parked_fetches):
            if isinstance(wait, ReplicaFetchWait):
                self._unpark(wait)

    def answer_parked(self, logs=None) -> None:
        """Answer the replica fetches parked on ``logs`` (all if None) now."""
        waits = set()
        for lg in (list(self._parked) if logs is None else logs):
            waits |= self._parked.get(lg, set())
        for wait in waits:
            self._complete(wait, final=True)

    def _unpark(self, wait: ReplicaFetchWait) -> None:
        wait.done = True
        wait.conn.parked_fetches.discard(wait)
        if wait.timer is not None:
            wait.timer.cancel()
        for lg in wait.logs:
            parked = self._parked.get(lg)
            if parked is not None:
                parked.discard(wait)

    def _complete(self, wait: ReplicaFetchWait, final: bool) -> bool:
        if wait.done:
            return True
        plan = [self._plan(e) for e in wait.request.entries]
        has_data = any(row[-1] for row in plan)
        has_error = any(row[1] for row in plan)
        if not (final or has_data or has_error):
            return False
        self._unpark(wait)
        parts: list = [_ENTRY_COUNT.pack(len(plan))]
        size = 4
        regions = False
        for e, error, message, epoch, earliest, hw, end, epochs, seg, position, length in plan:
            head = api.encode_replica_fetch_result_header(
                e.topic, e.partition, error, message, epoch, earliest, hw, end, epochs, length)
            parts.append(head)
            size += len(head) + length
            if length:
                seg.pin()
                parts.append(FileRegion(seg, position, length))
                regions = True
                self.metrics.replication_bytes_out += length
            if error:
                self.metrics.errors[("replica_fetch", ErrorCode(error).name)] += 1
        parts.insert(0, api.encode_response_header(wait.correlation_id, size))
        if regions:
            wait.reply.set(parts, has_regions=True)
        else:
            wait.reply.set([b"".join(parts)])
        wait.conn.pump()
        return True

    def _plan(self, e) -> tuple:
        rep = self.partitions.get((e.topic, e.partition))
        error, message = self._check_leader(rep, e.topic, e.partition, e.leader_epoch)
        if error:
            return (e, error, message, rep.leader_epoch if rep else -1, -1, -1, -1, (), None, 0, 0)
        lg = rep.log
        head = (rep.leader_epoch, lg.earliest_offset, lg.high_watermark, lg.written_end)
        try:
            seg, position, length = lg.locate(e.offset, e.max_bytes, upto=lg.written_end)
        except OffsetOutOfRangeError as exc:
            return (e, ErrorCode.OFFSET_OUT_OF_RANGE, str(exc), *head, (), None, 0, 0)
        except CorruptRangeError as exc:
            return (e, ErrorCode.CORRUPT_MESSAGE, f"{exc}; a follower cannot copy it", *head, (),
                    None, 0, 0)
        epochs = tuple(lg.epochs.overlapping(e.offset, e.offset + length)) if length else ()
        return (e, 0, "", *head, epochs, seg, position, length)

    # ------------------------------------------------------------ creating topics

    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     replication_factor: int) -> tuple[int, str]:
        """Create a replicated topic in ZooKeeper: its assignment (replicas
        placed over the live brokers, across racks) and each partition's
        first state (the preferred replica leads, every replica in sync: the
        logs are all empty), in one transaction. Blocking: call it off the
        event loop. Returns (error code, message); the brokers named create
        their replicas when their watches see it."""
        try:
            validate_topic_name(name)
            if not 1 <= partitions <= 10_000:
                raise InvalidConfigError(f"partitions must be 1..10000, got {partitions}")
            replication, log_settings = split_topic_config(config)
            self.logs.default_config.with_overrides(log_settings)
            factor = parse_int("replication.factor",
                               replication.get("replication.factor", replication_factor))
            min_insync = parse_int("min.insync.replicas",
                                   replication.get("min.insync.replicas",
                                                   self.config.min_insync_replicas))
            if not 1 <= factor <= 100 or not 1 <= min_insync <= factor:
                raise InvalidConfigError(f"replication.factor must be 1..100 and "
                                         f"min.insync.replicas 1..replication.factor, got "
                                         f"{factor} and {min_insync}")
        except InvalidConfigError as exc:
            code = ErrorCode.INVALID_TOPIC if "topic name" in str(exc) else \
                ErrorCode.INVALID_CONFIG
            return code, str(exc)
        zk = self.client
        if zk is None or not zk.connected:
            return ErrorCode.REQUEST_TIMED_OUT, "not connected to ZooKeeper; retry"
        try:
            if zk.exists(paths.replicated_topic_path(name)) or \
                    zk.exists(paths.broker_topic_path(name)):
                return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
            live = [int(c) for c in zk.get_children(paths.BROKER_IDS) if c.isdigit()]
            racks = {}
            for broker in live:
                try:
                    racks[broker] = zk.get(paths.broker_rack_path(broker))[0].decode() or None
                except NoNodeError:
                    racks[broker] = None
            try:
                placement = place_replicas(racks, partitions, factor,
                                           start=random.randrange(max(1, len(live))))
            except PlacementError as exc:
                return ErrorCode.INVALID_CONFIG, str(exc)
            stored = dict(log_settings, **{"replication.factor": str(factor),
                                           "min.insync.replicas": str(min_insync)})
            if "unclean.leader.election.enable" in replication:
                stored["unclean.leader.election.enable"] = \
                    replication["unclean.leader.election.enable"]
            zk.ensure_path(paths.REPLICATED_TOPICS)
            tx = zk.transaction()
            tx.create(paths.replicated_topic_path(name),
                      TopicAssignment(placement, stored).to_json())
            for p, replicas in enumerate(placement):
                tx.create(paths.partition_state_path(name, p),
                          PartitionState(replicas[0], 0, replicas).to_json())
            results = tx.commit()
        except (KazooException, KazooTimeoutError) as exc:
            return ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper: {type(exc).__name__}; retry"
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            if any(type(r).__name__ == "NodeExistsError" for r in failed):
                return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
            return ErrorCode.UNKNOWN, f"creating {name!r} in ZooKeeper failed: {failed[0]!r}"
        log.info("replication: created topic %s: %d partitions, %d replicas each %s", name,
                 partitions, factor, [list(r) for r in placement])
        return 0, ""

    def delete_topic(self, name: str) -> tuple[int, str]:
        """Delete a replicated topic from ZooKeeper (its partitions' states,
        then its assignment, in one transaction); every broker deletes its
        replicas when its watch sees the assignment go. Blocking: call it off
        the event loop."""
        zk = self.client
        if zk is None or not zk.connected:
            return ErrorCode.REQUEST_TIMED_OUT, "not connected to ZooKeeper; retry"
        try:
            data, _ = zk.get(paths.replicated_topic_path(name))
            partitions = len(TopicAssignment.from_json(data).partitions)
            tx = zk.transaction()
            for p in range(partitions):
                if zk.exists(paths.partition_state_path(name, p)):
                    tx.delete(paths.partition_state_path(name, p))
            tx.delete(paths.replicated_topic_path(name))
            results = tx.commit()
        except NoNodeError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}"
        except ValueError as exc:
            return ErrorCode.UNKNOWN, str(exc)
        except (KazooException, KazooTimeoutError) as exc:
            return ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper: {type(exc).__name__}; retry"
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            return ErrorCode.UNKNOWN, f"deleting {name!r} in ZooKeeper failed: {failed[0]!r}"
        log.info("replication: deleted topic %s", name)
        return 0, ""

    def auto_create(self, name: str) -> None:
        """A produce named an unknown topic: create it (once at a time) with
        the broker's defaults."""
        if name in self._creating or self.stopping:
            return
        self._creating.add(name)
        future = self._loop.run_in_executor(None, self.create_topic, name,
                                            self.config.default_partitions, {},
                                            self.config.replication_factor)

        def done(f) -> None:
            self._creating.discard(name)
            code, message = f.result()
            if code and code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("replication: auto-creating %s failed: %s", quote_name(name),
                            message)

        future.add_done_callback(lambda f: self._loop.call_soon_threadsafe(done, f))

    # ------------------------------------------------------------ clean shutdown

    async def hand_over_leadership(self, timeout: float) -> None:
        """Before a clean shutdown: for every partition this broker leads,
        stop taking writes, let the in-sync followers catch up to the log
        end (so that nothing acknowledged with any acks is lost), then write
        the first of them as the new leader (compare-and-set, epoch raised),
        so that producers move over at once instead of after the session
        timeout."""
        led = [rep for rep in self.partitions.values()
               if rep.role is Role.LEADER and len(rep.isr) > 1]
        if not led or self.client is None:
            return
        self.stopping = True               # produce_refusal: NOT_LEADER from now on
        self.produce_path.write_dirty_logs()
        deadline = self._loop.time() + timeout
        while self._loop.time() < deadline and any(
                self._best_successor(rep) is None for rep in led):
            await asyncio.sleep(0.01)
        writes = []
        for rep in led:
            successor = self._best_successor(rep) or next(
                (b for b in rep.isr if b != self.broker_id), None)
            if successor is None:
                continue
            isr = tuple(b for b in rep.isr if b != self.broker_id)
            state = PartitionState(self.broker_id, rep.leader_epoch, rep.isr,
                                   rep.controller_epoch).with_leader(successor, isr,
                                                                     rep.controller_epoch)
            writes.append((rep, state, rep.zk_version))
        outcomes = await self._loop.run_in_executor(None, self._write_states, writes)
        for (rep, state, _v), ok in zip(writes, outcomes):
            if ok:
                log.info("replication: handed %s over to broker %d (epoch %d)", rep.name,
                         state.leader, state.leader_epoch, extra={"event": "leader_handed_over"})
                rep.role, rep.leader, rep.leader_epoch = Role.NONE, state.leader, \
                    state.leader_epoch
                self._step_down(rep, "handed over at shutdown")

    def _best_successor(self, rep: PartitionReplica) -> int | None:
        """The first in-sync follower that has the whole log (by assignment order)."""
        end = rep.log.written_end
        for b in rep.replicas:
            if b != self.broker_id and b in rep.isr and b in self.addresses:
                progress = rep.followers.get(b)
                if progress is not None and progress.log_end >= end:
                    return b
        return None

    def _write_states(self, writes) -> list[bool]:
        out = []
        for rep, state, version in writes:
            try:
                self.client.set_async(paths.partition_state_path(rep.topic, rep.partition),
                                      state.to_json(), version=version).get(timeout=5)
                out.append(True)
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("replication: could not hand %s over: %s", rep.name,
                            type(exc).__name__)
                out.append(False)
        return out
