"""Helpers of the replication tests: replicated topics on a real cluster,
their state in ZooKeeper, and the replicas' bytes on disk."""
from __future__ import annotations

import hashlib
import os

from broker.client.admin import AdminClient
from broker.coordination import paths
from broker.coordination.replica_state import NO_LEADER, PartitionState
from broker.protocol import api
from broker.protocol.errors import ErrorCode
from broker.storage.segment import parse_segment_file_name
from broker_helpers import connect, wait_until
from cluster_helpers import REPLICATED, partition_state   # noqa: F401 - REPLICATED for the tests

state = partition_state


def create_replicated(cluster, topic: str, partitions: int = 1, replication_factor: int = 3,
                      via: int | None = None, **config: str) -> None:
    """Create ``topic`` through a broker and wait until every partition's
    leader serves it."""
    via = min(cluster.brokers) if via is None else via
    settings = {"replication.factor": str(replication_factor), **config}
    with AdminClient(cluster.brokers[via].address) as admin:
        admin.create_topic(topic, partitions, settings)
    for p in range(partitions):
        wait_serving(cluster, topic, p)


def leader_of(cluster, topic: str, partition: int) -> int:
    s = state(cluster, topic, partition)
    return s.leader if s is not None else NO_LEADER


def wait_serving(cluster, topic: str, partition: int, timeout: float = 30,
                 not_on: set[int] = frozenset()) -> int:
    """Wait until the partition's leader (per ZooKeeper) is live, not in
    ``not_on``, and answers an offsets request for it; return its id."""
    def serving():
        leader = leader_of(cluster, topic, partition)
        if leader == NO_LEADER or leader in not_on or leader not in cluster.brokers:
            return None
        with connect(cluster.brokers[leader].address) as conn:
            resp = conn.request(api.OffsetsRequest(topic, partition, api.LATEST))
        return leader if resp.error == ErrorCode.NONE else None
    leader = wait_until(lambda: (lambda b: b + 1 if b is not None else None)(serving()),
                        timeout, interval=0.05,
                        what=lambda: f"a serving leader of {topic}/{partition}: "
                                     f"{state(cluster, topic, partition)}")
    return leader - 1


def wait_in_sync(cluster, topic: str, partition: int, brokers: set[int],
                 timeout: float = 30) -> PartitionState:
    return wait_until(lambda: (lambda s: s if s is not None and set(s.isr) == brokers else None)(
        state(cluster, topic, partition)), timeout, interval=0.05,
        what=lambda: f"in-sync set {sorted(brokers)} of {topic}/{partition}: "
                     f"{state(cluster, topic, partition)}")


def replica_bytes(broker, topic: str, partition: int) -> tuple[int, bytes]:
    """(earliest offset, every byte) of a replica's log, read from its files."""
    directory = os.path.join(broker.data_dir, "topics", topic, str(partition))
    bases = sorted(b for b in (parse_segment_file_name(n) for n in os.listdir(directory))
                   if b is not None)
    data = b""
    for base in bases:
        with open(os.path.join(directory, f"{base:020d}.log"), "rb") as f:
            data += f.read()
    return (bases[0] if bases else 0), data


def log_end_on_disk(broker, topic: str, partition: int) -> int:
    earliest, data = replica_bytes(broker, topic, partition)
    return earliest + len(data)


def digest_upto(broker, topic: str, partition: int, end: int) -> str:
    """sha256 of a replica's bytes [earliest, end) (its log must hold them)."""
    earliest, data = replica_bytes(broker, topic, partition)
    assert earliest + len(data) >= end, (f"broker {broker.broker_id} holds {topic}/{partition} "
                                         f"up to {earliest + len(data)}, not {end}")
    return hashlib.sha256(data[:end - earliest]).hexdigest()


def high_watermark_of(cluster, topic: str, partition: int) -> int:
    leader = leader_of(cluster, topic, partition)
    with connect(cluster.brokers[leader].address) as conn:
        resp = conn.request(api.OffsetsRequest(topic, partition, api.LATEST))
    assert resp.error == ErrorCode.NONE, resp.message
    return resp.offsets[0]


def assert_replicas_identical(cluster, topic: str, partition: int, brokers=None) -> int:
    """Every replica's bytes agree up to the high watermark (sha256
    compared); returns the high watermark."""
    hw = high_watermark_of(cluster, topic, partition)
    brokers = sorted(cluster.brokers) if brokers is None else brokers
    # each follower has the bytes below the high watermark once it fetched past it
    for b in brokers:
        wait_until(lambda: log_end_on_disk(cluster.brokers[b], topic, partition) >= hw, 30,
                   what=f"broker {b} to hold {topic}/{partition} up to {hw}")
    digests = {b: digest_upto(cluster.brokers[b], topic, partition, hw) for b in brokers}
    assert len(set(digests.values())) == 1, f"replicas differ below {hw}: {digests}"
    return hw


def wait_rejoined(cluster, topic: str, partition: int, timeout: float = 60) -> None:
    """Every broker of ``cluster`` is in the partition's in-sync set, by a
    state written after each registered (a restarted broker's old
    registration lingers until its session expires: a set read before that
    says nothing of the new process)."""
    path = paths.partition_state_path(topic, partition)

    def rejoined() -> bool:
        data, stat = cluster.zk.get(path)
        if set(PartitionState.from_json(data).isr) != set(cluster.brokers):
            return False
        registrations = [cluster.zk.exists(paths.broker_id_path(b)) for b in cluster.brokers]
        return all(r is not None and r.czxid < stat.mzxid for r in registrations)
    wait_until(rejoined, timeout, interval=0.05,
               what=lambda: f"every broker back in sync in {topic}/{partition}: "
                            f"{state(cluster, topic, partition)}")
