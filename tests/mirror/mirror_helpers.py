"""Helpers of the mirror tests: configs for test clusters, and reading a
topic back from every broker of a cluster, straight from the brokers."""
from __future__ import annotations

from cluster_helpers import Cluster, read_all
from broker.coordination.named_cluster import NamedCluster
from mirror.config import MirrorConfig


def ref(cluster: Cluster) -> NamedCluster:
    return NamedCluster(cluster.name, cluster.connect)


def mirror_config(sources: list[Cluster], target: Cluster, **settings) -> MirrorConfig:
    settings.setdefault("metrics_port", 0)
    settings.setdefault("commit_interval_ms", 200)
    settings.setdefault("group", "mirror-test")
    return MirrorConfig(sources=tuple(map(ref, sources)), target=ref(target), **settings)


def values_of(cluster: Cluster, topic: str) -> list[bytes]:
    return [m.value for ms in read_all(cluster, topic).values() for m in ms]
