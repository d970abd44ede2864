"""Marks of mirrored topics, kept in the target cluster's ZooKeeper: what
stops a topic from being mirrored back where it came from (no loops).

    /mirrored/topics/<topic>   persistent   JSON {"sources": ["dc-a", ...]}

A mirror writes the mark of every topic it copies into its target before the
first message; a mirror reading from a cluster leaves out the topics marked
there, because they are copies already. Never deleted by the mirror (an
operator who deletes the topic may delete its mark).
"""
from __future__ import annotations

import json
import re

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

MIRRORED_TOPICS = "/mirrored/topics"


def mark_mirrored(client: KazooClient, topic: str, source: str) -> None:
    """Record that ``topic`` in this cluster holds copies from ``source``.
    PermissionError when the marks belong to another ZooKeeper identity."""
    try:
        _mark(client, topic, source)
    except NoAuthError:
        raise PermissionError(
            f"cannot mark {topic} as mirrored from {source}: the marks of mirrored topics "
            f"({MIRRORED_TOPICS}) belong to another ZooKeeper identity; every mirror into "
            f"one target uses the same [credentials] zookeeper_auth_file (docs/mirror.md)"
        ) from None


def _mark(client: KazooClient, topic: str, source: str) -> None:
    path = f"{MIRRORED_TOPICS}/{topic}"
    client.ensure_path(MIRRORED_TOPICS)
    while True:
        try:
            data, stat = client.get(path)
        except NoNodeError:
            try:
                client.create(path, json.dumps({"sources": [source]}).encode())
                return
            except NodeExistsError:
                continue          # another mirror marked it meanwhile: add to its mark
        sources = json.loads(data.decode() or "{}").get("sources", [])
        if source in sources:
            return
        try:
            client.set(path, json.dumps({"sources": sorted(sources + [source])}).encode(),
                       version=stat.version)
            return
        except BadVersionError:
            continue              # changed meanwhile: read it again


def mirrored_topics(client: KazooClient) -> dict[str, list[str]]:
    """Topics of this cluster that are copies: topic -> the clusters they came from."""
    try:
        names = client.get_children(MIRRORED_TOPICS)
    except NoNodeError:
        return {}
    out = {}
    for name in names:
        try:
            data, _ = client.get(f"{MIRRORED_TOPICS}/{name}")
        except NoNodeError:
            continue
        out[name] = json.loads(data.decode() or "{}").get("sources", [])
    return out


def exclusion_pattern(blacklist: str, excluded: list[str] | dict[str, object]) -> str | None:
    """A blacklist regex that also refuses the ``excluded`` topic names."""
    parts = [f"(?:{blacklist})"] if blacklist else []
    if excluded:
        parts.append("(?:" + "|".join(re.escape(t) for t in sorted(excluded)) + ")")
    return "|".join(parts) or None
