"""Planning work units against real brokers, and Avro container files
framed from raw bodies (read back by Apache's reference implementation)."""
from __future__ import annotations

import io
import json
import time
import uuid

import avro.datafile
import avro.io
import fastavro
import pytest

from broker.client.producer import Producer
from hadoop_loader.frames import split_envelopes, write_container
from hadoop_loader.plan import PlanError, plan, split_range
from hadoop_loader.state import key
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore
from schemas.wire import ValueWriter


def test_split_range_at_boundaries():
    assert split_range(0, 100, [], 30) == [(0, 100)]                 # no boundary: one piece
    assert split_range(0, 100, [25, 50, 75], 30) == [(0, 25), (25, 50), (50, 75), (75, 100)]
    assert split_range(0, 100, [10, 20, 60, 90], 50) == [(0, 20), (20, 60), (60, 100)]
    assert split_range(40, 100, [0, 20, 60], 50) == [(40, 60), (60, 100)]
    assert split_range(40, 80, [0, 20, 90], 10) == [(40, 80)]       # outside ones are ignored
    assert split_range(0, 0, [], 10) == []


def test_plan_units_and_retention_policy(clusters):
    cluster = clusters("analysis", settings={"log.segment_bytes": 4096,
                                             "default_partitions": 2})
    broker = cluster.brokers[0]
    # small message sets: a set is never split across segments, so segments
    # (the only split points) stay near 4 KB
    producer = Producer(bootstrap=broker.address, acks="flushed", batch_size=10)
    try:
        for i in range(600):
            producer.send("page_views", b"v" * 100, partition=i % 2)
        producer.send("_audit", b"x", partition=0)
        producer.send("other", b"x", partition=0)
        producer.flush()
    finally:
        producer.close()
    from broker.coordination import paths
    from broker_helpers import wait_until
    wait_until(lambda: all(cluster.zk.exists(paths.broker_topic_path(t, 0))
                           for t in ("page_views", "other", "_audit")), 20,
               what="the topics to be registered in ZooKeeper")
    p = plan(cluster.connect, {}, whitelist="page_views|other", max_unit_bytes=20_000)
    topics = {u.topic for u in p.units}
    assert topics == {"page_views", "other"}                       # never the audit topic
    pv = [u for u in p.units if u.topic == "page_views"]
    assert sum(u.size for u in pv) == 600 * 122
    assert len(pv) > 2 and all(u.size <= 20_000 for u in pv)        # split at segment starts
    for part in (0, 1):
        units = sorted((u for u in pv if u.partition == part), key=lambda u: u.start)
        assert units[0].start == 0 and all(a.end == b.start for a, b in zip(units, units[1:]))
        assert units[-1].end == p.ends[key("page_views", f"0-{part}")]
    # from a commit: only what is new
    committed = dict(p.ends)
    again = plan(cluster.connect, committed, whitelist="page_views")
    assert again.units == []


def test_a_retention_gap_fails_or_is_skipped_and_reported(clusters):
    cluster = clusters("analysis", settings={"log.segment_bytes": 2048,
                                             "log.retention_bytes": 4096,
                                             "retention_check_ms": 100})
    broker = cluster.brokers[0]
    producer = Producer(bootstrap=broker.address, acks="flushed", batch_size=10)
    try:
        for _ in range(200):
            producer.send("page_views", b"v" * 100, partition=0)
        producer.flush()
    finally:
        producer.close()
    from broker.client.admin import AdminClient
    from broker.coordination import paths
    from broker_helpers import wait_until
    wait_until(lambda: cluster.zk.exists(paths.broker_topic_path("page_views", 0)), 20,
               what="the topic to be registered in ZooKeeper")
    with AdminClient(broker.address) as admin:
        wait_until(lambda: admin.earliest_offset("page_views", 0) > 0, 30,
                   what="retention to delete old segments")
        earliest = admin.earliest_offset("page_views", 0)
    k = key("page_views", "0-0")
    with pytest.raises(PlanError, match="deleted by retention before they were loaded"):
        plan(cluster.connect, {k: 0}, whitelist="page_views")
    skipped = plan(cluster.connect, {k: 0}, whitelist="page_views", on_retention_gap="skip")
    assert skipped.skipped[k][0] == 0 and skipped.skipped[k][1] >= earliest
    assert min(u.start for u in skipped.units) == skipped.skipped[k][1]


def test_plan_fails_fast_on_an_unreachable_zookeeper():
    t0 = time.monotonic()
    with pytest.raises(PlanError, match="cannot plan"):
        plan("127.0.0.1:1/nothing", {})
    assert time.monotonic() - t0 < 30


def test_framed_container_files_read_back_with_apache_avro(tmp_path):
    registry = SchemaRegistry(FileStore(str(tmp_path / "r.json")))
    v1 = registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    v2 = registry.register("page_views", catalog.load("samsa.events.PageViewEvent.v2"))
    records = []
    values = []
    for i in range(250):
        rec = {"header": {"time_ms": 1_700_000_000_000 + i, "host": "h", "service": "s",
                          "event_id": uuid.uuid4().bytes}, "member_id": i, "page_key": "feed",
               "url": f"/u/{i}", "referrer": None, "user_agent": "ua", "duration_ms": i}
        version = 1 if i % 2 else 2
        if version == 2:
            rec["session_id"] = f"s{i}"
        records.append(rec)
        values.append(ValueWriter(registry, "page_views", version=version).encode(rec))
    values += [b"", b"\x07\x00\x00\x00\x01x"]
    by_schema, bad = split_envelopes(values)
    assert sorted(by_schema) == sorted([v1.id, v2.id])
    assert [i for i, _ in bad] == [250, 251] and "magic" in bad[1][1]
    for sid, bodies in by_schema.items():
        for codec in ("null", "deflate"):
            buf = io.BytesIO()
            schema_json = json.dumps(registry.by_id(sid))
            assert write_container(buf, schema_json, bodies, codec=codec, block_records=40,
                                   metadata={"samsa.schema_id": str(sid)}) == len(bodies)
            want = [r for r in records if ("session_id" in r) == (sid == v2.id)]
            buf.seek(0)
            reader = avro.datafile.DataFileReader(buf, avro.io.DatumReader())
            assert list(reader) == want
            assert reader.get_meta("samsa.schema_id") == str(sid).encode()
            buf.seek(0)
            assert list(fastavro.reader(buf)) == want


@pytest.mark.parametrize("staged, parallelism, partitions", [
    (10, 2, 1),                 # a small load: one file per hour
    (300 << 20, 2, 4),          # 3 wanted, 2 cores: 4 (two whole waves)
    (300 << 20, 200, 3),        # a big cluster does not multiply the files of a small load
    (4 << 30, 8, 32),
    (0, 2, 1),
])
def test_write_partitions(staged, parallelism, partitions):
    from hadoop_loader.job import write_partitions
    assert write_partitions(staged, 128 << 20, parallelism) == partitions
