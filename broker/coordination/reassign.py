"""Operators' requests to move replicas and to elect preferred leaders (the
`reassign` and `elect-leaders` tools; docs/replication.md, "Moving replicas
and preferred leaders"). This module only reads the records and writes the
requests; the controller carries them out (controller.py). It never writes
an assignment or a partition state itself.

A plan is JSON, as Kafka's kafka-reassign-partitions reads it::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}, ...]}

Its checks (``PlanError``, a bad input): every entry names a replicated
topic and one of its partitions (a plan cannot change the partition count),
each partition at most once, a non-empty list of distinct brokers that are
all registered now, and at least the topic's ``min.insync.replicas`` of them
(acks=all would be refused forever otherwise).

A reassignment of a partition, as the tools see it::

    requested --(controller: expand, wait, elect, finish)--> done
        \\--(the controller dropped the request: see its log)--> failed
    requested:  /replication/reassign/<topic>:<p> exists
    done:       no request, and the assignment is the target
    failed:     no request, and the assignment is not the target
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from . import paths
from .replica_state import NO_LEADER, PartitionState, TopicAssignment


class PlanError(ValueError):
    """A plan or request that cannot be carried out, said so that the
    operator can fix it."""


@dataclass(frozen=True)
class Move:
    """One partition's target replicas, the preferred leader first."""
    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.partition}"

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition,
                "replicas": list(self.replicas)}


@dataclass(frozen=True)
class Progress:
    """Where one reassignment stands (module docstring)."""
    move: Move
    status: str                    # "running", "done" or "failed"
    replicas: tuple[int, ...]      # the assignment now
    isr: tuple[int, ...]
    leader: int

    def line(self) -> str:
        now = ",".join(map(str, self.replicas))
        target = ",".join(map(str, self.move.replicas))
        if self.status == "done":
            return f"{self.move.name}: done (replicas {now})"
        detail = (f"replicas now {now}, target {target}, leader {self.leader}, "
                  f"in sync {','.join(map(str, self.isr))}")
        if self.status == "running":
            return f"{self.move.name}: still running ({detail})"
        return (f"{self.move.name}: FAILED: the controller dropped the request and the "
                f"replicas are not the target ({detail}); see the controller's log")

    def to_json(self) -> dict:
        return {**self.move.to_json(), "status": self.status, "current": list(self.replicas),
                "isr": list(self.isr), "leader": self.leader}


# ------------------------------------------------------------------ plans

def parse_plan(text: str) -> list[Move]:
    """The moves of a plan's JSON text; PlanError says what is wrong with it."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"the plan is not JSON: {exc}") from None
    entries = raw.get("partitions") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError('the plan needs a non-empty list "partitions": '
                        '[{"topic": T, "partition": P, "replicas": [B, ...]}, ...]')
    moves = []
    for i, entry in enumerate(entries):
        where = f"entry {i} of the plan"
        if not isinstance(entry, dict):
            raise PlanError(f"{where} is not an object")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{where} has no \"topic\"")
        if type(partition) is not int or partition < 0:
            raise PlanError(f"{where} ({topic}) needs \"partition\": a number >= 0")
        if not isinstance(replicas, list) or not all(type(b) is int and b >= 0
                                                     for b in replicas):
            raise PlanError(f"{topic}/{partition}: \"replicas\" must be a list of broker ids")
        moves.append(Move(topic, partition, tuple(replicas)))
    return moves


def validate(client: KazooClient, moves: list[Move]) -> list[Move]:
    """``moves`` checked against the cluster (module docstring); PlanError
    for the first problem found."""
    live = live_brokers(client)
    seen: set[tuple[str, int]] = set()
    assignments: dict[str, TopicAssignment] = {}
    for m in moves:
        if (m.topic, m.partition) in seen:
            raise PlanError(f"{m.name} appears twice in the plan")
        seen.add((m.topic, m.partition))
        if not m.replicas:
            raise PlanError(f"{m.name}: the list of replicas is empty")
        duplicates = sorted({b for b in m.replicas if m.replicas.count(b) > 1})
        if duplicates:
            raise PlanError(f"{m.name}: broker {duplicates[0]} is named twice in "
                            f"{list(m.replicas)}")
        unknown = [b for b in m.replicas if b not in live]
        if unknown:
            raise PlanError(f"{m.name}: unknown broker id(s) {unknown}: the registered brokers "
                            f"are {sorted(live)}")
        if m.topic not in assignments:
            assignment = read_assignment(client, m.topic)
            if assignment is None:
                raise PlanError(f"{m.topic!r} is not a replicated topic (only the replicas of "
                                f"replicated topics can be moved)")
            assignments[m.topic] = assignment
        assignment = assignments[m.topic]
        count = len(assignment.partitions)
        if m.partition >= count:
            raise PlanError(f"{m.topic} has {count} partitions (0..{count - 1}); the plan names "
                            f"partition {m.partition}, and a reassignment cannot change the "
                            f"partition count")
        min_insync = int(assignment.config.get("min.insync.replicas", "1"))
        if len(m.replicas) < min_insync:
            raise PlanError(f"{m.name}: {len(m.replicas)} replicas are fewer than the topic's "
                            f"min.insync.replicas={min_insync}")
    return moves


def drain_plan(client: KazooClient, broker: int) -> list[Move]:
    """Moves that take every replica off ``broker``: in each partition it is
    in, its place (so its rank for the preferred leader) goes to another live
    broker not yet a replica of it, preferring a rack the partition's other
    replicas are not in, then the broker with the fewest replicas (counting
    the moves already planned). PlanError when the broker is unknown or too
    few brokers are left for a partition."""
    live = live_brokers(client)
    if broker not in live and not any(broker in r for _t, a in replicated_assignments(client)
                                      for r in a.partitions):
        raise PlanError(f"broker {broker} is neither registered nor a replica of any "
                        f"partition; the registered brokers are {sorted(live)}")
    racks = broker_racks(client, live)
    others = sorted(b for b in live if b != broker)
    load = {b: 0 for b in others}
    assignments = replicated_assignments(client)
    for _topic, assignment in assignments:
        for replicas in assignment.partitions:
            for b in replicas:
                if b in load:
                    load[b] += 1
    moves = []
    for topic, assignment in assignments:
        for p, replicas in enumerate(assignment.partitions):
            if broker not in replicas:
                continue
            kept = [b for b in replicas if b != broker]
            candidates = [b for b in others if b not in kept]
            if not candidates:
                raise PlanError(f"cannot drain broker {broker}: {topic}/{p} has replicas "
                                f"{list(replicas)} and no other live broker is left to take "
                                f"its place (live: {sorted(live)})")
            used_racks = {racks.get(b) for b in kept}
            choice = min(candidates, key=lambda b: (racks.get(b) in used_racks and
                                                    racks.get(b) is not None, load[b], b))
            load[choice] += 1
            moves.append(Move(topic, p, tuple(choice if b == broker else b for b in replicas)))
    return moves


def plan_json(moves: list[Move]) -> str:
    return json.dumps({"version": 1, "partitions": [m.to_json() for m in moves]}, indent=1)


# ------------------------------------------------------------------ requests

def start(client: KazooClient, moves: list[Move]) -> None:
    """Write one request per move, in one transaction (all or none).
    PlanError if a partition is being reassigned already."""
    client.ensure_path(paths.REASSIGNMENTS)
    running = [m.name for m in moves
               if client.exists(paths.reassignment_path(m.topic, m.partition))]
    if running:
        raise PlanError(f"already being reassigned: {', '.join(running)} (wait for it: "
                        f"reassign --verify)")
    tx = client.transaction()
    for m in moves:
        tx.create(paths.reassignment_path(m.topic, m.partition),
                  json.dumps({"replicas": list(m.replicas)}).encode())
    failed = [r for r in tx.commit() if isinstance(r, Exception)]
    if failed:
        raise PlanError(f"writing the requests failed ({type(failed[0]).__name__}): another "
                        f"reassignment of these partitions started meanwhile?")


def running(client: KazooClient) -> list[Move]:
    """The reassignments requested and not finished yet."""
    out = []
    try:
        names = sorted(client.get_children(paths.REASSIGNMENTS))
    except NoNodeError:
        return []
    for name in names:
        try:
            topic, partition = paths.parse_partition_request_name(name)
            data = client.get(paths.reassignment_path(topic, partition))[0]
            out.append(Move(topic, partition, tuple(json.loads(data)["replicas"])))
        except (NoNodeError, ValueError, KeyError, TypeError):
            continue
    return out


def progress(client: KazooClient, moves: list[Move]) -> list[Progress]:
    """Where each of ``moves`` stands."""
    out = []
    for m in moves:
        # the request first: the controller's last step writes the assignment
        # and deletes the request in one transaction, so an assignment read
        # after the request is gone already shows that step
        requested = client.exists(paths.reassignment_path(m.topic, m.partition)) is not None
        assignment = read_assignment(client, m.topic)
        current = assignment.partitions[m.partition] \
            if assignment is not None and m.partition < len(assignment.partitions) else ()
        state = read_state(client, m.topic, m.partition)
        if requested:
            status = "running"
        else:
            status = "done" if tuple(current) == tuple(m.replicas) else "failed"
        out.append(Progress(m, status, tuple(current), state.isr, state.leader))
    return out


def request_preferred(client: KazooClient, partitions: list[tuple[str, int]]) -> None:
    """Ask the controller to move the lead of ``partitions`` to their
    preferred replicas (a request already there, by another caller too, is
    kept: it asks the same)."""
    client.ensure_path(paths.PREFERRED_ELECTIONS)
    for topic, p in partitions:
        try:
            client.create(paths.preferred_election_path(topic, p), b"{}")
        except NodeExistsError:
            pass


def preferred_pending(client: KazooClient, partitions: list[tuple[str, int]]) -> list:
    return [tp for tp in partitions if client.exists(paths.preferred_election_path(*tp))]


# ------------------------------------------------------------------ reading

def live_brokers(client: KazooClient) -> set[int]:
    try:
        return {int(c) for c in client.get_children(paths.BROKER_IDS) if c.isdigit()}
    except NoNodeError:
        return set()


def broker_racks(client: KazooClient, brokers) -> dict[int, str | None]:
    racks: dict[int, str | None] = {}
    for b in brokers:
        try:
            racks[b] = client.get(paths.broker_rack_path(b))[0].decode() or None
        except NoNodeError:
            racks[b] = None
    return racks


def read_assignment(client: KazooClient, topic: str) -> TopicAssignment | None:
    try:
        return TopicAssignment.from_json(client.get(paths.replicated_topic_path(topic))[0])
    except (NoNodeError, ValueError):
        return None


def read_state(client: KazooClient, topic: str, partition: int) -> PartitionState:
    try:
        return PartitionState.from_json(
            client.get(paths.partition_state_path(topic, partition))[0])
    except (NoNodeError, ValueError):
        return PartitionState(NO_LEADER, -1, ())


def replicated_assignments(client: KazooClient) -> list[tuple[str, TopicAssignment]]:
    """(topic, assignment) of every replicated topic, by name."""
    try:
        topics = sorted(client.get_children(paths.REPLICATED_TOPICS))
    except NoNodeError:
        return []
    out = []
    for topic in topics:
        assignment = read_assignment(client, topic)
        if assignment is not None:
            out.append((topic, assignment))
    return out
