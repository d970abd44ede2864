"""The producer and cluster tiers against real brokers and ZooKeeper: what
they publish to the audit topic matches, count for count and checksum for
checksum, what was produced; the cluster counter commits only what it
published, and a restart does not count anything twice."""
from __future__ import annotations

import threading
import time

import pytest

from audit.cluster_counter import ClusterCounter
from audit.config import CountConfig
from audit.counting import AUDIT_TOPIC, AuditedProducer, unsigned_checksum
from audit_helpers import WINDOW, checksum, decode_events, page_views
from broker.client.cluster_producer import ClusterProducer
from broker.coordination import offsets as zk_offsets
from broker_helpers import wait_until
from cluster_helpers import read_all
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter


def zk_registry(cluster) -> SchemaRegistry:
    registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    return registry


def audit_events(cluster, registry) -> list[dict]:
    values = [m.value for ms in read_all(cluster, AUDIT_TOPIC).values() for m in ms]
    return decode_events(registry, values)


def totals(events, tier: str, topic: str = "page_views") -> dict[int, tuple[int, int]]:
    """{window begin: (messages, checksum)} summed over the tier's events."""
    out: dict[int, list[int]] = {}
    for e in events:
        if e["tier"] == tier and e["topic"] == topic:
            t = out.setdefault(e["window_begin_ms"], [0, 0])
            t[0] += e["message_count"]
            t[1] = (t[1] + unsigned_checksum(e["id_checksum"])) % (1 << 64)
    return {k: tuple(v) for k, v in out.items()}


def expected(times, ids) -> dict[int, tuple[int, int]]:
    by_window: dict[int, list[bytes]] = {}
    for t, eid in zip(times, ids):
        by_window.setdefault(t - t % WINDOW, []).append(eid)
    return {w: (len(v), checksum(v)) for w, v in by_window.items()}


@pytest.fixture
def dc(clusters):
    cluster = clusters("dc-a", brokers=2)
    registry = zk_registry(cluster)
    yield cluster, registry
    registry.close()


def produce_audited(cluster, registry, times, name: str = "dc-a") -> list[bytes]:
    """Page views at ``times`` through an audited ClusterProducer that
    publishes its counts to the cluster's audit topic; their ids."""
    writer = ValueWriter(registry, "page_views")
    values, ids = page_views(writer, times)
    with AuditedProducer.publishing(ClusterProducer(cluster.connect, acks="flushed"),
                                    ValueWriter(registry, AUDIT_TOPIC), datacenter=name,
                                    cluster=name, window_ms=WINDOW) as audited:
        for value, t in zip(values, times):
            audited.send("page_views", value, timestamp=t)
        publisher = audited.publisher
    assert publisher.published > 0 and publisher.unsent == 0
    return ids


def test_the_producer_publishes_every_interval(dc):
    cluster, registry = dc
    now = int(time.time() * 1000)
    values, ids = page_views(ValueWriter(registry, "page_views"), [now] * 30)
    audited = AuditedProducer.publishing(
        ClusterProducer(cluster.connect, acks="flushed"), ValueWriter(registry, AUDIT_TOPIC),
        datacenter="dc-a", cluster="dc-a", window_ms=WINDOW, interval_s=0.2)
    try:
        for value in values:
            audited.send("page_views", value, timestamp=now)
        audited.flush()
        # published by the timer, before any close
        wait_until(lambda: totals(audit_events(cluster, registry), "producer")
                   == expected([now] * 30, ids), 30, what="the interval's publish")
    finally:
        audited.close()
    assert totals(audit_events(cluster, registry), "producer") == expected([now] * 30, ids)


def test_the_producer_tier_counts_what_was_acknowledged(dc):
    cluster, registry = dc
    now = int(time.time() * 1000)
    times = [now - WINDOW - i for i in range(150)] + [now - i for i in range(250)]
    ids = produce_audited(cluster, registry, times)
    assert totals(audit_events(cluster, registry), "producer") == expected(times, ids)


def test_the_cluster_counter_matches_the_producer_and_commits_after_publishing(dc):
    cluster, registry = dc
    now = int(time.time() * 1000)
    times = [now - 2 * WINDOW - i for i in range(300)] + [now - i for i in range(700)]
    ids = produce_audited(cluster, registry, times)
    config = CountConfig(cluster="dc-a", zookeeper=cluster.connect, window_ms=WINDOW,
                         publish_interval_ms=300, group="audit-test")
    counter = ClusterCounter(config)
    runner = threading.Thread(target=counter.run)
    runner.start()
    try:
        wait_until(lambda: totals(audit_events(cluster, registry), "cluster")
                   == expected(times, ids), 60, what="the cluster tier to count everything")
    finally:
        counter.stop()
        runner.join(30)
        counter.close()
    events = audit_events(cluster, registry)
    assert totals(events, "cluster") == totals(events, "producer") == expected(times, ids)
    cluster_events = [e for e in events if e["tier"] == "cluster"]
    assert sum(e["unique_count"] for e in cluster_events) == 1000     # no duplicates
    assert all(e["malformed_count"] == 0 for e in cluster_events)
    # committed offsets cover everything counted: a restart counts nothing again
    committed = zk_offsets.read_offsets(cluster.zk, "audit-test")
    assert committed and all(v > 0 for v in committed.values())
    again = ClusterCounter(config)
    runner = threading.Thread(target=again.run)
    runner.start()
    try:
        wait_until(lambda: again.consumer.owned(), 30, what="the restarted counter to own "
                                                            "the partitions")
        owned_at = again.publish_rounds
        # three publish rounds while owning everything: time to (wrongly) count
        wait_until(lambda: again.publish_rounds >= owned_at + 3, 30,
                   what="three publish rounds")
    finally:
        again.stop()
        runner.join(30)
        again.close()
    assert again.consumed == 0
    assert totals(audit_events(cluster, registry), "cluster") == expected(times, ids)


def test_a_commit_zookeeper_fails_does_not_stop_the_counter(dc, monkeypatch):
    """Defect (found by tests/containers: a ZooKeeper container restarted):
    ZooKeeper lost in the middle of the counter's commit raised
    ConnectionLoss out of run(), and ``audit count`` exited. The offsets
    stay acknowledged and the next publish commits them."""
    from kazoo.exceptions import ConnectionLoss
    cluster, registry = dc
    now = int(time.time() * 1000)
    times = [now - i for i in range(200)]
    ids = produce_audited(cluster, registry, times)
    counter = ClusterCounter(CountConfig(cluster="dc-a", zookeeper=cluster.connect,
                                         window_ms=WINDOW, publish_interval_ms=200,
                                         group="audit-commit-loss"))
    commit = counter.consumer.commit
    failures = []

    def flaky_commit():
        if len(failures) < 2:                 # the connection drops during two commits
            failures.append(1)
            raise ConnectionLoss()
        commit()

    monkeypatch.setattr(counter.consumer, "commit", flaky_commit)
    runner = threading.Thread(target=counter.run)
    runner.start()
    try:
        wait_until(lambda: totals(audit_events(cluster, registry), "cluster")
                   == expected(times, ids) or not runner.is_alive(), 60,
                   what="the cluster tier to count everything")
        assert runner.is_alive(), "the counter stopped on a failed commit"
        wait_until(lambda: zk_offsets.read_offsets(cluster.zk, "audit-commit-loss"), 30,
                   what="a later publish to commit the offsets")
    finally:
        counter.stop()
        runner.join(30)
        counter.close()
    assert counter.commit_failures == 2
    assert totals(audit_events(cluster, registry), "cluster") == expected(times, ids)


def test_malformed_values_are_counted_not_dropped(dc):
    cluster, registry = dc
    producer = ClusterProducer(cluster.connect, acks="flushed")
    now = int(time.time() * 1000)
    try:
        for value in (b"", b"\x00\x00\x00\x00\x01garbage", b"plain text"):
            producer.send("page_views", value, timestamp=now).result(10)
        producer.send("page_views", b"no time at all", timestamp=0).result(10)
    finally:
        producer.close()
    counter = ClusterCounter(CountConfig(cluster="dc-a", zookeeper=cluster.connect,
                                         window_ms=WINDOW, publish_interval_ms=200,
                                         group="audit-bad"))
    runner = threading.Thread(target=counter.run)
    runner.start()
    try:
        wait_until(lambda: sum(e["message_count"] for e in audit_events(cluster, registry)
                               if e["tier"] == "cluster") == 4, 60, what="4 messages counted")
    finally:
        counter.stop()
        runner.join(30)
        counter.close()
    events = [e for e in audit_events(cluster, registry) if e["tier"] == "cluster"]
    assert sum(e["malformed_count"] for e in events) == 4
    assert sum(e["no_time_count"] for e in events) == 1


def test_the_mirror_tier_counts_what_it_copied_per_source(clusters):
    """Two DCs with audited producers, mirrored into analysis: the mirror's
    events (published in the analysis cluster) match each DC's producer
    events, which reach analysis too (the audit topic is mirrored)."""
    from broker.coordination.named_cluster import NamedCluster
    from mirror.config import MirrorConfig
    from mirror.mirror import Mirror
    dcs = {name: clusters(name) for name in ("dc-a", "dc-b")}
    analysis = clusters("analysis")
    now = int(time.time() * 1000)
    produced = {}
    for name, cluster in dcs.items():
        with zk_registry(cluster) as registry:
            times = [now - i for i in range(200 if name == "dc-a" else 120)]
            produced[name] = expected(times, produce_audited(cluster, registry, times, name))
    config = MirrorConfig(sources=tuple(NamedCluster(n, c.connect) for n, c in dcs.items()),
                          target=NamedCluster("analysis", analysis.connect), group="mirror-audit",
                          metrics_port=-1, audit_window_ms=WINDOW,
                          audit_publish_interval_ms=200)
    with zk_registry(analysis) as registry, Mirror(config) as mirror:
        def mirror_totals(source: str) -> dict:
            return totals([e for e in audit_events(analysis, registry)
                           if e["cluster"] == source], "mirror")
        wait_until(lambda: all(mirror_totals(n) == produced[n] for n in dcs), 90,
                   what="the mirror tier to count every copy")
        assert mirror.copied >= 320
        events = audit_events(analysis, registry)
    for name in dcs:
        producer_events = [e for e in events if e["tier"] == "producer" and e["cluster"] == name]
        assert totals(producer_events, "producer") == produced[name]
    mirror_events = [e for e in events if e["tier"] == "mirror"]
    assert {e["datacenter"] for e in mirror_events} == {"analysis"}
