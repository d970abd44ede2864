"""Helpers of the mirror tests: configs for test clusters, and reading a
topic back from every broker of a cluster, straight from the brokers."""
from __future__ import annotations

from broker.client.admin import AdminClient
from broker.client.consumer import Consumer
from broker.protocol.message import Message
from cluster_helpers import Cluster
from mirror.config import ClusterRef, MirrorConfig


def ref(cluster: Cluster) -> ClusterRef:
    return ClusterRef(cluster.name, cluster.connect)


def mirror_config(sources: list[Cluster], target: Cluster, **settings) -> MirrorConfig:
    settings.setdefault("metrics_port", 0)
    settings.setdefault("commit_interval_ms", 200)
    settings.setdefault("group", "mirror-test")
    return MirrorConfig(sources=tuple(map(ref, sources)), target=ref(target), **settings)


def read_all(cluster: Cluster, topic: str) -> dict[str, list[Message]]:
    """Every message of ``topic`` on every running broker of ``cluster``:
    {"b-p": messages in offset order}."""
    out: dict[str, list[Message]] = {}
    for broker_id, broker in sorted(cluster.brokers.items()):
        with AdminClient(broker.address) as admin:
            count = admin.partition_count(topic)
            if count is None:
                continue
            ends = {p: admin.latest_offset(topic, p) for p in range(count)}
        consumer = Consumer(bootstrap=broker.address, max_wait_ms=50)
        try:
            tps = [(topic, p) for p in range(count)]
            consumer.assign(tps, start="earliest")
            for p in range(count):
                out[f"{broker_id}-{p}"] = []
            while any(consumer.position(tp) < ends[tp[1]] for tp in tps):
                for m in consumer.poll(200):
                    out[f"{broker_id}-{m.partition}"].append(m)
        finally:
            consumer.close()
    return out


def values_of(cluster: Cluster, topic: str) -> list[bytes]:
    return [m.value for ms in read_all(cluster, topic).values() for m in ms]
