"""Burrow's v3 JSON made from Samsa's evaluations, so that what reads
LinkedIn's Burrow's cluster list, consumer list and consumer status reads
the lag service unchanged. Pure functions of broker/lag/monitor.py's
``GroupStatus``: no I/O, no clock. Must never drop or rename one of
Burrow's keys (tests/coordination/test_lag_service_burrow.py holds them
against Burrow's documented example); Samsa's own fields stand beside them.

The group status (``/v3/kafka/CLUSTER/consumer/GROUP/status`` and ``/lag``)::

    {"error": false, "message": "consumer status returned",
     "status": {"cluster", "group", "status", "complete", "partitions": [PARTITION, ...],
                "partition_count", "maxlag": PARTITION or null, "totallag"},
     "request": {"url", "host"}}
    PARTITION = {"topic", "partition", "owner", "client_id", "status",
                 "start": OFFSET or null, "end": OFFSET or null, "current_lag", "complete"}
    OFFSET    = {"offset", "timestamp", "observedAt", "lag"}

The lists (``/v3/kafka``, ``/v3/kafka/CLUSTER/consumer``) are the same
envelope with ``"clusters"`` or ``"consumers"``; an error is
``{"error": true, "message", "request"}``.

Where Samsa's model differs from Kafka's, the mapping:

* The group's ``status`` takes Burrow's group values: OK, WARN, or ERR when
  the worst partition is STALL, STOP or REWIND (Burrow folds those three
  into ERR for a group); ``worst_status`` beside it keeps the worst
  partition's own. NOTFOUND (answered with 404, as Burrow does) for a group
  or cluster that was not evaluated.
* ``partition`` is an integer in Burrow; Samsa's partitions are
  broker-partitions ("b-p"), so it is the position of the broker-partition
  among the topic's, sorted by (broker, partition). It moves when a broker
  joins or leaves; ``broker_partition`` is the stable name.
* ``owner`` and ``client_id``: the owning consumer's id, "" when unowned
  (a Samsa consumer id is host-pid-random: both where and who).
* ``current_lag``, ``lag`` and ``totallag`` count bytes: Samsa's offsets are
  byte positions, and the lag is the same subtraction Burrow makes.
* ``start`` and ``end``: the oldest and newest commit of the partition's
  window; ``timestamp`` is the commit's time (its ZooKeeper node's
  modification time), ``observedAt`` when the monitor first saw it (ms).
* ``complete``: a partition's commits kept / the window's size; a group's,
  the fraction of its partitions whose window is full (Burrow's).
"""
from __future__ import annotations

from broker.coordination.paths import sort_broker_partitions

from .evaluator import Commit, PartitionStatus, Status
from .monitor import GroupStatus

STATUS_MESSAGE = "consumer status returned"


def group_status_name(status: Status) -> str:
    """Burrow's value for a group whose worst partition is ``status``."""
    return {Status.OK: "OK", Status.WARN: "WARN"}.get(status, "ERR")


def request_info(url: str, host: str) -> dict:
    return {"url": url, "host": host}


def answer(message: str, request: dict, **payload) -> dict:
    """A successful answer: ``error`` false, ``message``, the payload, ``request``."""
    return {"error": False, "message": message, **payload, "request": request}


def error(message: str, request: dict) -> dict:
    return {"error": True, "message": message, "request": request}


def offset_json(commit: Commit | None) -> dict | None:
    if commit is None:
        return None
    return {"offset": commit.offset, "timestamp": commit.timestamp_ms,
            "observedAt": commit.observed_ms if commit.observed_ms is not None
            else commit.timestamp_ms, "lag": commit.lag}


def partition_json(p: PartitionStatus, index: int) -> dict:
    owner = p.owner or ""
    return {"topic": p.topic, "partition": index, "owner": owner, "client_id": owner,
            "status": p.status.name, "start": offset_json(p.start), "end": offset_json(p.end),
            "current_lag": p.lag_bytes or 0, "complete": p.complete,
            # Samsa's own
            "broker_partition": p.partition, "committed": p.committed, "log_end": p.log_end,
            "lag_bytes": p.lag_bytes, "lag_seconds": p.lag_seconds,
            "owner_alive": p.owner_alive, "last_commit_ms": p.last_commit_ms}


def partition_numbers(partitions: list[PartitionStatus]) -> dict[tuple[str, str], int]:
    """{(topic, broker-partition): its integer ``partition``}."""
    by_topic: dict[str, list[str]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p.partition)
    return {(topic, bp): i for topic, bps in by_topic.items()
            for i, bp in enumerate(sort_broker_partitions(set(bps)))}


def consumer_status(cluster: str, group: GroupStatus, show_all: bool) -> dict:
    """The ``status`` object. ``show_all`` (``/lag``): every partition;
    else (``/status``) those not OK, and those whose owner is not a live
    member (Samsa's addition to Burrow's filter)."""
    numbers = partition_numbers(group.partitions)
    parts = [p for p in group.partitions
             if show_all or p.status != Status.OK or (p.owner and not p.owner_alive)]
    full = sum(1 for p in group.partitions if p.complete >= 1.0)
    behind = group.most_behind
    return {"cluster": cluster, "group": group.group,
            "status": group_status_name(group.status),
            "complete": full / len(group.partitions) if group.partitions else 0.0,
            "partitions": [partition_json(p, numbers[(p.topic, p.partition)]) for p in parts],
            "partition_count": len(group.partitions),
            "maxlag": partition_json(behind, numbers[(behind.topic, behind.partition)])
            if behind is not None else None,
            "totallag": group.total_lag_bytes,
            # Samsa's own
            "worst_status": group.status.name, "members": group.members,
            "evaluated_ms": group.evaluated_ms, "errors": group.errors}


def not_found_status(cluster: str, group: str) -> dict:
    """Burrow's answer for a group it has not seen (sent with 404)."""
    return {"cluster": cluster, "group": group, "status": "NOTFOUND", "complete": 1.0,
            "partitions": [], "partition_count": 0, "maxlag": None, "totallag": 0}
