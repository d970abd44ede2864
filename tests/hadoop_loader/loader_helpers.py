"""Page views for the loader's tests: v1 and v2 alternately."""
from __future__ import annotations

import datetime as dt
import os
import uuid

import pyarrow.dataset as ds

from broker.client.cluster_producer import ClusterProducer
from broker.coordination import paths
from broker_helpers import wait_until
from schemas.wire import ValueWriter

HOUR = 3_600_000
BASE = 1_800_000_000_000 - 1_800_000_000_000 % HOUR


def page_view_value(registry, i: int, t: int) -> bytes:
    """Page view ``i`` at event time ``t``: version 2 (with a session id) for
    odd ``i``, version 1 for even."""
    rec = {"header": {"time_ms": t, "host": "h", "service": "s", "event_id": uuid.uuid4().bytes},
           "member_id": i, "page_key": "feed", "url": f"/u/{i}", "referrer": None,
           "user_agent": "ua", "duration_ms": i}
    version = 2 if i % 2 else 1
    if version == 2:
        rec["session_id"] = f"s{i}"
    return ValueWriter(registry, "page_views", version=version).encode(rec)


def hour_key(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return f"{t:%Y-%m-%d}/{t:%H}"


def produce(cluster, registry, n: int, base: int, bad: list[bytes] = (),
            **producer_settings) -> dict[str, int]:
    """n page views over three hours (v1 and v2 alternately); rows per hour.
    ``producer_settings`` go to the producer (``batch_size=5``: many small
    requests, so many small segments where segments are small)."""
    per_hour: dict[str, int] = {}
    producer = ClusterProducer(cluster.connect, acks="flushed", **producer_settings)
    try:
        for i in range(n):
            t = base + (i % 3) * HOUR + i
            producer.send("page_views", page_view_value(registry, i, t), timestamp=t)
            per_hour[hour_key(t)] = per_hour.get(hour_key(t), 0) + 1
        for value in bad:
            producer.send("page_views", value, timestamp=base)
        producer.flush()
    finally:
        producer.close()
    wait_until(lambda: cluster.zk.exists(paths.broker_topic_path("page_views", 0)), 20,
               what="the topic in ZooKeeper")
    return per_hour


def read_rows(root: str) -> list[dict]:
    path = os.path.join(root, "page_views")
    if not os.path.isdir(path):
        return []
    return ds.dataset(path, partitioning="hive").to_table().to_pylist()


def rows_per_hour(rows) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        k = f"{r['date']}/{int(r['hour']):02d}"
        out[k] = out.get(k, 0) + 1
    return out
