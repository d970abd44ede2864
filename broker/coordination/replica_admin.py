"""Reading the replicated topics' records for operators (the `topics` tool's
--describe, --under-replicated and --unavailable): each partition's replicas,
leader, epoch and in-sync set, and whether its leader is live."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from . import paths
from .replica_state import NO_LEADER, PartitionState, TopicAssignment


@dataclass(frozen=True)
class PartitionReplicas:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int                 # -1: none
    leader_epoch: int
    isr: tuple[int, ...]
    leader_live: bool
    restarted: tuple[int, ...] = ()
    """Replicas whose broker registered after this state was written (it
    restarted since): their place in the in-sync set is not confirmed until
    the controller's next pass or the leader's next change of the set."""

    @property
    def under_replicated(self) -> bool:
        """A replica is out of the in-sync set."""
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        """No live leader: produce and fetch fail until one is elected."""
        return self.leader == NO_LEADER or not self.leader_live

    def to_json(self) -> dict:
        return {**asdict(self), "replicas": list(self.replicas), "isr": list(self.isr),
                "restarted": list(self.restarted), "under_replicated": self.under_replicated,
                "unavailable": self.unavailable}

    def line(self) -> str:
        leader = "none" if self.leader == NO_LEADER else \
            f"{self.leader}{'' if self.leader_live else ' (gone)'}"
        return (f"Topic: {self.topic}\tPartition: {self.partition}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, self.replicas))}\t"
                f"Isr: {','.join(map(str, self.isr))}\tEpoch: {self.leader_epoch}")


def replicated_topics(client: KazooClient) -> list[str]:
    try:
        return sorted(client.get_children(paths.REPLICATED_TOPICS))
    except NoNodeError:
        return []


def describe(client: KazooClient, topics: list[str] | None = None) -> list[PartitionReplicas]:
    """Every partition of ``topics`` (all replicated topics if None) that is
    replicated; topics that are not are left out."""
    live = {}                   # broker id -> czxid of its registration
    for child in client.get_children(paths.BROKER_IDS) if client.exists(paths.BROKER_IDS) \
            else []:
        stat = client.exists(paths.broker_id_path(int(child))) if child.isdigit() else None
        if stat is not None:
            live[int(child)] = stat.czxid
    out = []
    for topic in (replicated_topics(client) if topics is None else topics):
        try:
            assignment = TopicAssignment.from_json(
                client.get(paths.replicated_topic_path(topic))[0])
        except NoNodeError:
            continue
        for p, replicas in enumerate(assignment.partitions):
            restarted: tuple[int, ...] = ()
            try:
                data, stat = client.get(paths.partition_state_path(topic, p))
                state = PartitionState.from_json(data)
                restarted = tuple(b for b in replicas if live.get(b, 0) > stat.mzxid)
            except (NoNodeError, ValueError):
                state = PartitionState(NO_LEADER, -1, ())
            out.append(PartitionReplicas(topic, p, replicas, state.leader, state.leader_epoch,
                                         state.isr, state.leader in live, restarted))
    return out
