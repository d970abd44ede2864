"""A consumer group's committed offsets, persistent in ZooKeeper::

    /consumers/<group>/offsets/<topic>/<broker-partition>   "<offset>"

An offset is the next offset to consume: every message before it was
handed to the application (at-least-once: a restarted or rebalanced group
resumes there and may see again what came after the last commit).
"""
from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from . import paths

COMMIT_TIMEOUT_S = 10.0


def read_offset(client: KazooClient, group: str, topic: str, broker_partition: str) -> int | None:
    try:
        data, _ = client.get(paths.offsets_path(group, topic, broker_partition))
    except NoNodeError:
        return None
    try:
        return int(data.decode())
    except ValueError:
        return None


def read_offsets(client: KazooClient, group: str) -> dict[tuple[str, str], int]:
    """Every committed offset of the group: {(topic, broker-partition): offset}."""
    out: dict[tuple[str, str], int] = {}
    base = paths.group_path(group) + "/offsets"
    try:
        topics = client.get_children(base)
    except NoNodeError:
        return out
    for topic in topics:
        try:
            parts = client.get_children(f"{base}/{topic}")
        except NoNodeError:
            continue
        for bp in parts:
            offset = read_offset(client, group, topic, bp)
            if offset is not None:
                out[(topic, bp)] = offset
    return out


def commit_offsets(client: KazooClient, group: str,
                   offsets: dict[tuple[str, str], int]) -> None:
    """Write offsets, pipelined (all requests sent, then all answers read)."""
    pending = [(path, str(offset).encode(), client.set_async(path, str(offset).encode()))
               for (topic, bp), offset in offsets.items()
               for path in (paths.offsets_path(group, topic, bp),)]
    for path, data, result in pending:
        try:
            result.get(timeout=COMMIT_TIMEOUT_S)   # kazoo would wait for ever while disconnected
        except NoNodeError:
            try:
                client.create(path, data, makepath=True)
            except NodeExistsError:
                client.set(path, data)
