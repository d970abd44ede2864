"""What ZooKeeper holds about replicated topics, and the pure rules over it:
where replicas go, and who may lead. No I/O here (the controller, the
brokers and the tools do the reading and the compare-and-set writes).

In the cluster's chroot (docs/replication.md)::

    /replication/topics/<topic>        persistent  assignment: {"partitions": [[1, 2], [2, 1]],
                                                                "config": {"min.insync.replicas": "1"}}
    /replication/topics/<topic>/<p>    persistent  state: {"leader": 1, "leader_epoch": 4,
                                                           "isr": [1, 2], "controller_epoch": 2}
    /replication/controller            ephemeral   {"broker": 1, "epoch": 2}
    /replication/controller_epoch      persistent  "2"
    /replication/reassign/<topic>:<p>  persistent  a reassignment asked: {"replicas": [2, 3]}
    /replication/elect_preferred/<topic>:<p>  persistent  a preferred-leader election asked: {}
    /brokers/racks/<broker id>         ephemeral   "<rack>" (only for brokers that declare one)

The assignment lists each partition's replicas, the first being its
*preferred* leader. A partition's state changes only by compare-and-set on
the state node's version: the controller writes new leaders (each change of
leader raises ``leader_epoch``), the leader writes its in-sync set (shrinks
and expands, same epoch). A writer whose compare-and-set fails has been
overtaken: it reads the node again and obeys what it finds.

``leader`` is -1 while no replica may lead (every in-sync replica is down and
unclean election is off); ``isr`` then keeps the last in-sync replicas, so
that the first of them to come back leads again and nothing committed is lost.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

NO_LEADER = -1


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"leader": self.leader, "leader_epoch": self.leader_epoch,
                           "isr": list(self.isr), "controller_epoch": self.controller_epoch}
                          ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "PartitionState":
        """ValueError for anything that is not a partition state."""
        try:
            raw = json.loads(data)
            state = cls(int(raw["leader"]), int(raw["leader_epoch"]),
                        tuple(int(b) for b in raw["isr"]), int(raw.get("controller_epoch", 0)))
        except (TypeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a partition state: {data[:200]!r}") from exc
        return state

    def with_leader(self, leader: int, isr: tuple[int, ...],
                    controller_epoch: int) -> "PartitionState":
        """A new leader (or NO_LEADER): the epoch rises, so that the previous
        leader's requests are refused wherever the new state is known."""
        return PartitionState(leader, self.leader_epoch + 1, isr, controller_epoch)

    def with_isr(self, isr: tuple[int, ...]) -> "PartitionState":
        return PartitionState(self.leader, self.leader_epoch, isr, self.controller_epoch)


@dataclass(frozen=True)
class TopicAssignment:
    partitions: tuple[tuple[int, ...], ...]           # partition -> replicas, preferred first
    config: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0]) if self.partitions else 0

    def to_json(self) -> bytes:
        return json.dumps({"partitions": [list(r) for r in self.partitions],
                           "config": dict(self.config)}).encode()

    def with_replicas(self, partition: int, replicas: tuple[int, ...]) -> "TopicAssignment":
        """The same assignment with ``partition``'s replicas replaced."""
        parts = list(self.partitions)
        parts[partition] = tuple(replicas)
        return TopicAssignment(tuple(parts), dict(self.config))

    @classmethod
    def from_json(cls, data: bytes) -> "TopicAssignment":
        try:
            raw = json.loads(data)
            parts = tuple(tuple(int(b) for b in replicas) for replicas in raw["partitions"])
            config = {str(k): str(v) for k, v in (raw.get("config") or {}).items()}
        except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a topic assignment: {data[:200]!r}") from exc
        if not parts or any(not r or len(set(r)) != len(r) for r in parts):
            raise ValueError(f"a topic assignment needs distinct replicas for every partition: "
                             f"{data[:200]!r}")
        return cls(parts, config)


class PlacementError(ValueError):
    """Too few brokers for the replication factor asked."""


def place_replicas(brokers: dict[int, str | None], partitions: int, replication_factor: int,
                   start: int = 0) -> tuple[tuple[int, ...], ...]:
    """Replicas for each partition of a new topic: ``replication_factor``
    distinct brokers each, spread across racks where brokers declare them
    (``brokers``: broker id -> rack or None).

    Kafka's rule, simplified: order the brokers by alternating racks (one
    from each rack in turn), then partition p's replicas are the
    ``replication_factor`` brokers following position ``start + p`` in that
    order. Consecutive brokers of the order are in different racks as long as
    racks remain, so a partition's replicas span min(racks, factor) racks when
    the racks are even in size; the preferred leaders rotate over the brokers."""
    if replication_factor < 1:
        raise PlacementError("the replication factor must be at least 1")
    if len(brokers) < replication_factor:
        raise PlacementError(f"replication factor {replication_factor} needs as many live "
                             f"brokers; the cluster has {len(brokers)}")
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(brokers):
        by_rack.setdefault(brokers[broker] or "", []).append(broker)
    order: list[int] = []
    racks = [by_rack[r] for r in sorted(by_rack)]
    for i in range(max(len(r) for r in racks)):
        order += [r[i] for r in racks if i < len(r)]
    n = len(order)
    return tuple(tuple(order[(start + p + k) % n] for k in range(replication_factor))
                 for p in range(partitions))


def choose_leader(replicas: tuple[int, ...], isr: tuple[int, ...], live: set[int],
                  unclean: bool = False) -> tuple[int, bool]:
    """The replica to lead: the first live in-sync one in assignment order
    (the preferred leader when it qualifies). With ``unclean``, a live replica
    that is not in sync when no in-sync one is live (it may lack committed
    messages: they are lost). Returns (leader or NO_LEADER, whether unclean)."""
    for broker in replicas:
        if broker in live and broker in isr:
            return broker, False
    if unclean:
        for broker in replicas:
            if broker in live:
                return broker, True
    return NO_LEADER, False


# Topic settings of the replication layer (kept in the assignment's config
# beside the log settings of storage/log_config.py)
replication_overrides = frozenset({"replication.factor", "min.insync.replicas",
                                   "unclean.leader.election.enable"})


def split_topic_config(config: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(replication settings, log settings) of a topic's configuration."""
    replication = {k: v for k, v in config.items() if k in replication_overrides}
    return replication, {k: v for k, v in config.items() if k not in replication_overrides}


# ------------------------------------------------------------------ moving replicas

@dataclass(frozen=True)
class ReassignStep:
    """What the controller does next for one partition being reassigned to
    ``target`` (``reassignment_step``). ``kind``:

      done    the partition's replicas are the target: remove the request
      expand  write the assignment ``replicas`` (target, then the old ones
              not in it): the new replicas create their logs and follow
      wait    nothing to write yet (``why``): a new replica is not in sync,
              or the partition has no leader (the controller's election first)
      elect   ``leader`` (in the target, in sync, not restarted) leads, epoch +1
      finish  in one transaction: in-sync set ``isr`` (the old one within the
              target), assignment = target, the request removed
    """
    kind: str
    replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    isr: tuple[int, ...] = ()
    why: str = ""


def reassignment_step(current: tuple[int, ...], target: tuple[int, ...],
                      state: PartitionState, steady: set[int]) -> ReassignStep:
    """The next step of moving a partition from ``current`` replicas to
    ``target`` (Kafka's reassignment, KIP-455 without its throttles), given
    its state and the live brokers that did not restart since that state was
    written (``steady``). Restartable: it depends on ZooKeeper's records only,
    so a new controller goes on where the old one stopped.

    Invariants: a replica leaves the assignment only once every target
    replica is in sync and a target replica leads, so the committed messages
    are on every target replica and none is lost; the partition keeps a
    leader throughout (one change of leader at most, to an in-sync replica)."""
    if tuple(current) == tuple(target):
        return ReassignStep("done")
    if not set(target) <= set(current):
        union = tuple(target) + tuple(b for b in current if b not in target)
        return ReassignStep("expand", replicas=union)
    if state.leader == NO_LEADER:
        return ReassignStep("wait", why="the partition has no leader")
    lagging = [b for b in target if b not in state.isr]
    if lagging:
        return ReassignStep("wait", why=f"replicas {lagging} are not in sync yet")
    if state.leader not in target:
        leader = next((b for b in target if b in steady), NO_LEADER)
        if leader == NO_LEADER:
            return ReassignStep("wait", why=f"no replica of {list(target)} is live and in sync")
        return ReassignStep("elect", leader=leader)
    return ReassignStep("finish", isr=tuple(b for b in state.isr if b in target))


def preferred_leader_step(replicas: tuple[int, ...], state: PartitionState,
                          steady: set[int]) -> tuple[int, str]:
    """Whether the preferred replica (the first of ``replicas``) may take the
    lead of the partition now: (the preferred replica, "") if it may (it is
    in sync, so it holds every committed message, and did not restart since
    the state was written), else (NO_LEADER, why not). A partition it leads
    already gives (NO_LEADER, "")."""
    preferred = replicas[0]
    if state.leader == preferred:
        return NO_LEADER, ""
    if state.leader == NO_LEADER:
        return NO_LEADER, "the partition has no leader"
    if preferred not in steady:
        return NO_LEADER, f"the preferred replica {preferred} is not live (or just restarted)"
    if preferred not in state.isr:
        return NO_LEADER, f"the preferred replica {preferred} is not in sync"
    return preferred, ""
