"""The ZooKeeper node layout (the paper's, as in Kafka 0.7). Pure functions.

Every cluster lives under its own chroot (``host:port/cluster-a``), so one
ensemble can serve several clusters::

    /brokers/ids/<broker id>                         ephemeral  "host:port"
    /brokers/topics/<topic>/<broker id>              ephemeral  "<partition count>"
    /consumers/<group>/ids/<consumer id>             ephemeral  JSON subscription
    /consumers/<group>/owners/<topic>/<broker-partition>   ephemeral  "<consumer id>"
    /consumers/<group>/offsets/<topic>/<broker-partition>  persistent "<offset>"

A *broker-partition* names partition p of broker b as "b-p" (partitions
are numbered per broker); sorted numerically by (b, p).
"""
from __future__ import annotations

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def broker_topic_path(topic: str, broker_id: int | None = None) -> str:
    base = f"{BROKER_TOPICS}/{topic}"
    return base if broker_id is None else f"{base}/{broker_id}"


def group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def owners_path(group: str, topic: str, broker_partition: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/owners/{topic}"
    return base if broker_partition is None else f"{base}/{broker_partition}"


def offsets_path(group: str, topic: str, broker_partition: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/offsets/{topic}"
    return base if broker_partition is None else f"{base}/{broker_partition}"


def broker_partition(broker_id: int, partition: int) -> str:
    return f"{broker_id}-{partition}"


def parse_broker_partition(name: str) -> tuple[int, int]:
    """'3-1' -> (3, 1); ValueError for anything else."""
    broker, sep, partition = name.partition("-")
    if not sep or not broker.isdigit() or not partition.isdigit():
        raise ValueError(f"not a broker-partition: {name!r}")
    return int(broker), int(partition)


def sort_broker_partitions(names) -> list[str]:
    return sorted(names, key=parse_broker_partition)
