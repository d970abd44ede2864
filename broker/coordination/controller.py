"""The controller: one broker of the cluster at a time chooses the leaders of
the replicated partitions (Kafka 0.8's controller, reduced to its duty).

States (on each broker; kazoo's session drives the edges)::

    CANDIDATE --created /replication/controller--> ACTIVE
        ^                                             |
        +---- the node is gone / our session LOST ----+
    CANDIDATE: watch /replication/controller; when it is deleted, try to create it.
    ACTIVE:    raise /replication/controller_epoch, then keep every partition's
               state right (below) on each change of the live brokers or the
               replicated topics, and every ``check_interval`` s as a safety net.

A broker *restarted* since a partition's state was written (its
registration's czxid is newer than the state's mzxid: a new process, or a
session that expired) no longer counts as in sync: what it had may be gone
(a wiped disk) or was never flushed. What "right" means, per partition
(replica_state.choose_leader):
  * its leader is live and not restarted: in-sync replicas that are gone or
    restarted are taken out of the in-sync set (the leader would shrink it
    anyway after its lag time; done at once, so that acks=all writes stop
    waiting on a dead one);
  * its leader is gone or restarted (or there is none): the first live
    in-sync replica that did not restart leads, in assignment order, with
    the epoch raised and the in-sync set cut to those; if every live
    in-sync replica restarted (all replicas down and back), the first of
    them leads again, alone in the set (it has what was committed, unless
    its disk was lost); with none live, unclean election (if the topic or
    the broker allows it) takes a live out-of-sync replica, which loses what
    it lacks; otherwise the partition is offline (leader -1) and keeps its
    last in-sync set, so the first of them to return leads again. A
    restarted leader is always written again with a new epoch: a broker acts
    as leader only on a state written after it registered.
In-sync replicas that are no longer replicas of the assignment (a leader
that took a moved-away follower back in just before it learnt the new
assignment) are taken out of the set too.

Operators' requests, each a node under /replication (docs/replication.md,
"Moving replicas and preferred leaders"), are acted on at each pass, after
the leaders are right:
  * reassign/<topic>:<p> {"replicas": [...]}: the steps of
    replica_state.reassignment_step, one per pass: the assignment becomes
    target + old (the new replicas create their logs and follow); once every
    target replica is in sync, a target replica leads (if the leader is not
    one, epoch +1); then one transaction writes the in-sync set within the
    target, the assignment = target, and removes the request. The brokers
    left out delete their copies when their watch sees the assignment. The
    state of a partition being moved is watched, so that the pass runs again
    as soon as its in-sync set grows;
  * elect_preferred/<topic>:<p>: the first replica of the assignment leads
    if it is live, did not restart and is in sync (epoch +1; the old leader
    follows it); the request is removed in the same transaction, or alone
    (with the reason logged) when the preferred replica may not lead.
A request that cannot be carried out (its topic or partition is gone, its
data is not a request) is removed with an error in the log: the tool's
--verify then reports it failed.

Every write is a compare-and-set on the state node's version, so a write of
the leader's (an in-sync change) or of a controller that lost its session
meanwhile is never overwritten unseen: on a failed set the pass runs again.

The hard race: a controller whose session expired may still be in the
middle of a pass when its successor starts. Its writes then fail (the
client is disconnected) or, after a reconnection with a new session, fail
their compare-and-set against whatever the successor wrote, since every
pass reads each state just before it writes it. It stops acting as soon as
kazoo reports the session LOST.

Thread-safety: the watches only set an event; one worker thread does all
the reading and writing.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from . import paths
from .replica_state import (NO_LEADER, PartitionState, TopicAssignment, choose_leader,
                            preferred_leader_step, reassignment_step)

log = logging.getLogger(__name__)


class ControllerStats:
    """Counters for the broker's metrics (read from any thread)."""

    def __init__(self) -> None:
        self.active = False
        self.elections = 0
        self.unclean_elections = 0
        self.offline_partitions = 0
        self.reassignments_running = 0
        self.reassignments_done = 0
        self.preferred_elections = 0


class Controller:
    def __init__(self, client: KazooClient, broker_id: int,
                 unclean_default: Callable[[], bool] = lambda: False,
                 check_interval: float = 5.0) -> None:
        """``client`` is started (or being started) and rooted at the
        cluster's chroot; it is the broker's own, so that the controller's
        node goes with the broker's session."""
        self.client = client
        self.broker_id = broker_id
        self.unclean_default = unclean_default
        self.check_interval = check_interval
        self.stats = ControllerStats()
        self.epoch = 0
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._active = False
        self._watching = False
        self._moving_watches: set[tuple[str, int]] = set()   # states watched while moving
        self._worker = threading.Thread(target=self._run, name=f"controller-{broker_id}",
                                        daemon=True)

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        """Call once the client is connected."""
        self.client.add_listener(self._on_session)
        self._worker.start()
        self._dirty.set()

    def close(self) -> None:
        """Stop acting and give the controller's node up (a clean shutdown)."""
        self._stop.set()
        self._dirty.set()
        if self._worker.is_alive():
            self._worker.join(timeout=10)
        if self._active:
            self._active = self.stats.active = False
            try:
                _data, stat = self.client.get_async(paths.CONTROLLER).get(timeout=5)
                if self.client.client_id and stat.ephemeralOwner == self.client.client_id[0]:
                    self.client.delete_async(paths.CONTROLLER).get(timeout=5)
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("controller %d: could not give up the controller node: %s",
                            self.broker_id, exc)

    def request_pass(self) -> None:
        self._dirty.set()

    # ------------------------------------------------------------ session and watches

    def _on_session(self, state: str) -> None:
        # kazoo's thread: never block here
        if state == KazooState.LOST and self._active:
            log.warning("controller %d: ZooKeeper session lost; no longer the controller",
                        self.broker_id)
            self._active = self.stats.active = False
        if state == KazooState.CONNECTED:
            self._dirty.set()

    def _watch(self) -> None:
        zk = self.client
        for path in (paths.BROKER_IDS, paths.REPLICATED_TOPICS, paths.REASSIGNMENTS,
                     paths.PREFERRED_ELECTIONS):
            zk.ensure_path(path)
        ChildrenWatch(zk, paths.BROKER_IDS, lambda _children: self._dirty.set())
        ChildrenWatch(zk, paths.REPLICATED_TOPICS, lambda _children: self._dirty.set())
        ChildrenWatch(zk, paths.REASSIGNMENTS, lambda _children: self._dirty.set())
        ChildrenWatch(zk, paths.PREFERRED_ELECTIONS, lambda _children: self._dirty.set())
        DataWatch(zk, paths.CONTROLLER, lambda _data, _stat: self._dirty.set())
        self._watching = True

    # ------------------------------------------------------------ the worker

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(self.check_interval)
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                if not self.client.connected:
                    continue
                if not self._watching:
                    self._watch()
                if not self._active:
                    self._try_to_become_controller()
                if self._active:
                    self._pass()
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("controller %d: ZooKeeper failed (%s); trying again", self.broker_id,
                            type(exc).__name__)
                self._stop.wait(0.5)
                self._dirty.set()
            except Exception:   # a bug: log it, keep the broker's controller alive
                log.exception("controller %d: pass failed", self.broker_id)
                self._stop.wait(1.0)
                self._dirty.set()

    def _try_to_become_controller(self) -> None:
        zk = self.client
        zk.ensure_path(paths.REPLICATION)
        try:
            zk.create(paths.CONTROLLER, json.dumps({"broker": self.broker_id}).encode(),
                      ephemeral=True)
        except NodeExistsError:
            return
        self.epoch = self._raise_epoch()
        zk.set(paths.CONTROLLER, json.dumps({"broker": self.broker_id,
                                             "epoch": self.epoch}).encode())
        self._active = self.stats.active = True
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id,
                 self.epoch, extra={"event": "controller_elected", "epoch": self.epoch})

    def _raise_epoch(self) -> int:
        zk = self.client
        while True:
            try:
                data, stat = zk.get(paths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    zk.create(paths.CONTROLLER_EPOCH, b"1")
                    return 1
                except NodeExistsError:
                    continue
            epoch = int(data.decode() or 0) + 1
            try:
                zk.set(paths.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                return epoch
            except BadVersionError:
                continue

    def _pass(self) -> None:
        """Put every replicated partition's state right (module docstring)."""
        zk = self.client
        live = {}                        # broker id -> czxid of its registration
        for child in zk.get_children(paths.BROKER_IDS):
            if child.isdigit():
                stat = zk.exists(paths.broker_id_path(int(child)))
                if stat is not None:
                    live[int(child)] = stat.czxid
        offline = 0
        again = False
        for topic in zk.get_children(paths.REPLICATED_TOPICS):
            if not self._active or self._stop.is_set():
                return
            try:
                data, _stat = zk.get(paths.replicated_topic_path(topic))
                assignment = TopicAssignment.from_json(data)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.error("controller: ignoring topic %r: %s", topic, exc)
                continue
            unclean = _flag(assignment.config.get("unclean.leader.election.enable"),
                            self.unclean_default())
            for partition, replicas in enumerate(assignment.partitions):
                try:
                    leader = self._fix_partition(topic, partition, replicas, live, unclean)
                except BadVersionError:
                    again = True        # someone wrote meanwhile: read it again
                    continue
                if leader == NO_LEADER:
                    offline += 1
        self.stats.offline_partitions = offline
        if self._active and not self._stop.is_set():
            again |= self._reassign_pass(live)
            again |= self._preferred_pass(live)
        if again:
            self._dirty.set()

    def _fix_partition(self, topic: str, partition: int, replicas: tuple[int, ...],
                       live: dict[int, int], unclean: bool) -> int:
        """Make one partition's state right; returns its leader."""
        zk = self.client
        path = paths.partition_state_path(topic, partition)
        try:
            data, stat = zk.get(path)
            state = PartitionState.from_json(data)
        except NoNodeError:
            # a topic whose creator died between its two writes (they are one
            # transaction, so only a node deleted by hand): start it afresh
            isr = tuple(b for b in replicas if b in live) or replicas
            state = PartitionState(NO_LEADER, 0, isr, self.epoch)
            leader, _ = choose_leader(replicas, isr, set(live))
            state = state.with_leader(leader, isr, self.epoch)
            zk.create(path, state.to_json(), makepath=True)
            return leader
        except ValueError as exc:
            log.error("controller: ignoring %s: %s", path, exc)
            return NO_LEADER
        steady = _steady(live, stat)
        if state.leader != NO_LEADER and state.leader in steady and state.leader in replicas:
            isr = tuple(b for b in state.isr if b in steady and b in replicas)
            if isr != state.isr and state.leader in isr:
                zk.set(path, state.with_isr(isr).to_json(), version=stat.version)
                log.info("controller: %s/%d in-sync replicas %s -> %s (brokers gone, "
                         "restarted or no longer replicas)", topic, partition,
                         list(state.isr), list(isr))
            return state.leader
        # (a leader no longer among the replicas, the assignment changed by
        # hand, has stepped down: it is replaced as a gone one is)
        in_sync = tuple(b for b in state.isr if b in steady and b in replicas)
        if not in_sync:
            # every live in-sync replica restarted: the first of them leads again
            in_sync = tuple(b for b in state.isr if b in live and b in replicas)[:1]
        leader, was_unclean = choose_leader(replicas, in_sync, set(live), unclean)
        if leader == NO_LEADER:
            if state.leader != NO_LEADER:
                # the leader is gone and no in-sync replica is live: offline,
                # keeping the in-sync set for the first of them to come back
                zk.set(path, state.with_leader(NO_LEADER, state.isr, self.epoch).to_json(),
                       version=stat.version)
                log.error("controller: %s/%d is offline: its leader %d is gone and no "
                          "in-sync replica %s is live", topic, partition, state.leader,
                          list(state.isr), extra={"event": "partition_offline"})
            return NO_LEADER
        isr = (leader,) if was_unclean else in_sync
        new = state.with_leader(leader, isr, self.epoch)
        zk.set(path, new.to_json(), version=stat.version)
        self.stats.elections += 1
        if was_unclean:
            self.stats.unclean_elections += 1
            log.error("controller: UNCLEAN election of %s/%d: broker %d leads (epoch %d) "
                      "although it was not in sync; what it lacks of what was committed is "
                      "lost", topic, partition, leader, new.leader_epoch,
                      extra={"event": "unclean_election"})
        else:
            log.info("controller: %s/%d leader %s -> %d (epoch %d, in sync %s)", topic,
                     partition, state.leader if state.leader != NO_LEADER else "none", leader,
                     new.leader_epoch, list(isr), extra={"event": "leader_elected"})
        return leader

    # ------------------------------------------------------------ operators' requests

    def _requests(self, parent: str) -> list[tuple[str, int]]:
        out = []
        for name in sorted(self.client.get_children(parent)):
            try:
                out.append(paths.parse_partition_request_name(name))
            except ValueError:
                log.error("controller: ignoring %s/%s: not <topic>:<partition>", parent, name)
        return out

    def _reassign_pass(self, live: dict[int, int]) -> bool:
        """One step of each reassignment asked; True if a write was
        overtaken (the pass is to run again)."""
        again = False
        running = 0
        for topic, partition in self._requests(paths.REASSIGNMENTS):
            if not self._active or self._stop.is_set():
                return False
            try:
                running += self._reassign(topic, partition, live)
            except (BadVersionError, NoNodeError):
                again = True               # a record changed or went meanwhile: read again
        self.stats.reassignments_running = running
        return again

    def _drop_request(self, path: str, version: int, why: str) -> None:
        log.error("controller: dropping the request %s: %s", path, why,
                  extra={"event": "request_dropped"})
        try:
            self.client.delete(path, version=version)
        except NoNodeError:
            pass

    def _reassign(self, topic: str, partition: int, live: dict[int, int]) -> bool:
        """The next step of one reassignment (replica_state.reassignment_step);
        True while it is still running."""
        zk = self.client
        request = paths.reassignment_path(topic, partition)
        try:
            data, rstat = zk.get(request)
        except NoNodeError:
            return False
        try:
            target = tuple(int(b) for b in json.loads(data)["replicas"])
            if not target or len(set(target)) != len(target):
                raise ValueError("the replicas must be distinct, and at least one")
        except (TypeError, KeyError, ValueError) as exc:
            self._drop_request(request, rstat.version, f"not a reassignment ({exc})")
            return False
        topic_path = paths.replicated_topic_path(topic)
        state_path = paths.partition_state_path(topic, partition)
        try:
            adata, astat = zk.get(topic_path)
            assignment = TopicAssignment.from_json(adata)
            sdata, sstat = zk.get(state_path)
            state = PartitionState.from_json(sdata)
        except NoNodeError:
            self._drop_request(request, rstat.version, f"no replicated partition "
                                                       f"{topic}/{partition}")
            return False
        except ValueError as exc:
            log.error("controller: cannot reassign %s/%d: %s", topic, partition, exc)
            return True
        if partition >= len(assignment.partitions):
            self._drop_request(request, rstat.version,
                               f"{topic} has {len(assignment.partitions)} partitions")
            return False
        current = assignment.partitions[partition]
        step = reassignment_step(current, target, state, _steady(live, sstat))
        name = f"{topic}/{partition}"
        if step.kind == "done":
            zk.delete(request, version=rstat.version)
            self._unwatch_moving(topic, partition)
            return False
        self._watch_moving(topic, partition)
        if step.kind == "expand":
            zk.set(topic_path, assignment.with_replicas(partition, step.replicas).to_json(),
                   version=astat.version)
            log.info("controller: reassigning %s from %s to %s: replicas %s while the new ones "
                     "catch up", name, list(current), list(target), list(step.replicas),
                     extra={"event": "reassignment_started"})
        elif step.kind == "wait":
            log.debug("controller: reassignment of %s to %s waits: %s", name, list(target),
                      step.why)
        elif step.kind == "elect":
            new = state.with_leader(step.leader, state.isr, self.epoch)
            zk.set(state_path, new.to_json(), version=sstat.version)
            self.stats.elections += 1
            log.info("controller: %s leader %d -> %d (epoch %d) for its reassignment to %s",
                     name, state.leader, step.leader, new.leader_epoch, list(target),
                     extra={"event": "leader_elected"})
        elif step.kind == "finish":
            tx = zk.transaction()
            tx.set_data(state_path, state.with_isr(step.isr).to_json(), version=sstat.version)
            tx.set_data(topic_path, assignment.with_replicas(partition, target).to_json(),
                        version=astat.version)
            tx.delete(request, version=rstat.version)
            if _failed(tx.commit()):
                raise BadVersionError()        # a record changed meanwhile: read again
            self._unwatch_moving(topic, partition)
            self.stats.reassignments_done += 1
            log.info("controller: reassigned %s: replicas %s -> %s (leader %d, in sync %s)",
                     name, list(current), list(target), state.leader, list(step.isr),
                     extra={"event": "reassignment_done"})
            return False
        return True

    def _watch_moving(self, topic: str, partition: int) -> None:
        """Run a pass whenever the state of a partition being moved changes
        (its in-sync set grows: the next step may be due)."""
        key = (topic, partition)
        if key in self._moving_watches:
            return
        self._moving_watches.add(key)

        def changed(_data, _stat) -> bool | None:
            if key not in self._moving_watches:
                return False              # the move is over: stop watching
            self._dirty.set()
            return None
        DataWatch(self.client, paths.partition_state_path(topic, partition), changed)

    def _unwatch_moving(self, topic: str, partition: int) -> None:
        self._moving_watches.discard((topic, partition))

    def _preferred_pass(self, live: dict[int, int]) -> bool:
        """Each preferred-leader election asked; True if a write was overtaken."""
        again = False
        for topic, partition in self._requests(paths.PREFERRED_ELECTIONS):
            if not self._active or self._stop.is_set():
                return False
            try:
                self._elect_preferred(topic, partition, live)
            except (BadVersionError, NoNodeError):
                again = True
        return again

    def _elect_preferred(self, topic: str, partition: int, live: dict[int, int]) -> None:
        zk = self.client
        request = paths.preferred_election_path(topic, partition)
        state_path = paths.partition_state_path(topic, partition)
        try:
            _data, rstat = zk.get(request)
        except NoNodeError:
            return
        try:
            assignment = TopicAssignment.from_json(zk.get(paths.replicated_topic_path(topic))[0])
            sdata, sstat = zk.get(state_path)
            state = PartitionState.from_json(sdata)
            replicas = assignment.partitions[partition]
        except (NoNodeError, IndexError, ValueError) as exc:
            self._drop_request(request, rstat.version,
                               f"no replicated partition {topic}/{partition} "
                               f"({type(exc).__name__})")
            return
        leader, why = preferred_leader_step(replicas, state, _steady(live, sstat))
        name = f"{topic}/{partition}"
        if leader == NO_LEADER:
            if why:
                log.warning("controller: %s keeps its leader %d: %s", name, state.leader, why,
                            extra={"event": "preferred_election_refused"})
            zk.delete(request, version=rstat.version)
            return
        new = state.with_leader(leader, state.isr, self.epoch)
        tx = zk.transaction()
        tx.set_data(state_path, new.to_json(), version=sstat.version)
        tx.delete(request, version=rstat.version)
        if _failed(tx.commit()):
            raise BadVersionError()
        self.stats.elections += 1
        self.stats.preferred_elections += 1
        log.info("controller: %s leader %d -> %d, its preferred replica (epoch %d)", name,
                 state.leader, leader, new.leader_epoch,
                 extra={"event": "preferred_leader_elected"})


def _steady(live: dict[int, int], stat) -> set[int]:
    """The live brokers that did not restart since the node of ``stat`` was
    written (their registration is older than the write)."""
    return {b for b, czxid in live.items() if czxid < stat.mzxid}


def _failed(results: list) -> bool:
    """Whether a transaction's commit failed (every result is then an error)."""
    return any(isinstance(r, Exception) for r in results)


def _flag(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")
