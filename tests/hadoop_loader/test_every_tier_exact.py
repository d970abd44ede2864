"""Every tier of the audit tells losses and duplicates apart, exactly, window
by window (issue 25, point 4).

A producer writes page views to dc-a through a lying proxy of the
project's own (broker/harness/lying_proxy.py) that silently drops some
messages and doubles others, the producer seeing success. Then the real
pipeline: dc-a's cluster counter, the mirror into the analysis cluster (its
tier), the analysis cluster's counter, the audit service, and the loader
(Spark local) with the hadoop tier. Six windows: clean; 3 dropped;
4 doubled; 7 dropped and 9 doubled (a loss hidden under copies: more
messages than produced); 5 and 5 (equal counts); clean. Every tier's
verdict must show exactly what was injected, and the warehouse's
validation refuses the hour although it holds more rows than produced.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
import uuid

import pytest

from audit.cluster_counter import ClusterCounter
from audit.config import CountConfig, ServeConfig
from audit.counting import (
    AUDIT_TOPIC,
    AuditedProducer,
    CounterConfig,
    MonitoringPublisher,
    TierCounter,
    producer_sender,
)
from audit.service import AuditService
from broker.client.producer import Producer
from broker.harness.lying_proxy import LyingProxy
from broker_helpers import wait_until
from hadoop_loader import dag_steps, job
from hadoop_loader.config import LoaderConfig
from hadoop_loader.dag_steps import StepFailed
from broker.coordination.named_cluster import NamedCluster
from mirror.config import MirrorConfig
from mirror.mirror import Mirror
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter

HOUR = 3_600_000
WINDOW = 600_000
PER_WINDOW = 50
#: window -> (messages dropped, messages doubled): the first ones of the window
FAULTS = {0: (0, 0), 1: (3, 0), 2: (0, 4), 3: (7, 9), 4: (5, 5), 5: (0, 0)}
TIERS = (("cluster", "dc-a"), ("mirror", "dc-a"), ("cluster", "analysis"),
         ("hadoop", "analysis"))


def expected_state(dropped: int, doubled: int) -> str:
    if dropped and doubled:
        return "lost_and_duplicated"
    return "lost" if dropped else "duplicated" if doubled else "complete"


def registry_of(cluster) -> SchemaRegistry:
    registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    return registry


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_tier_reports_injected_drops_and_doubles_window_by_window(clusters, spark,
                                                                        tmp_path):
    dc, analysis = clusters("dc-a"), clusters("analysis")
    registries = [registry_of(dc), registry_of(analysis)]
    for topic in ("page_views", AUDIT_TOPIC):
        dc.create_topic(topic, partitions=2)
    now = int(time.time() * 1000)
    hour = now - now % HOUR - 2 * HOUR
    times = {hour + w * WINDOW + k * 1000: (w, k) for w in FAULTS for k in range(PER_WINDOW)}

    def decide(topic: str, message) -> int:
        if topic != "page_views":
            return 1                        # the monitoring events pass untouched
        w, k = times[message.timestamp]
        dropped, doubled = FAULTS[w]
        return 0 if k < dropped else 2 if k < dropped + doubled else 1

    broker = next(iter(dc.brokers.values()))
    proxy = LyingProxy(("127.0.0.1", broker.port), decide).start()
    producer = Producer(bootstrap=f"127.0.0.1:{proxy.port}", acks="flushed", batch_size=20)
    counter = TierCounter(CounterConfig(tier="producer", datacenter="dc-a", cluster="dc-a",
                                        window_ms=WINDOW))
    publisher = MonitoringPublisher(counter, ValueWriter(registries[0], AUDIT_TOPIC).encode,
                                    producer_sender(producer))
    sender = AuditedProducer(producer, counter, publisher)
    writer = ValueWriter(registries[0], "page_views")
    for t in sorted(times):
        sender.send("page_views", writer.encode({
            "header": {"time_ms": t, "host": "web-1", "service": "frontend",
                       "event_id": uuid.uuid4().bytes},
            "member_id": t % 1000, "page_key": "feed", "url": "/", "referrer": None,
            "user_agent": "ua", "duration_ms": 1}), timestamp=t)
    sender.close()
    assert len(proxy.dropped) == sum(d for d, _ in FAULTS.values())
    assert len(proxy.doubled) == sum(u for _, u in FAULTS.values())

    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("dc-a", dc.connect),), target=NamedCluster("analysis",
                                                                      analysis.connect),
        group="mirror-exact", metrics_port=-1, audit_window_ms=WINDOW,
        audit_publish_interval_ms=300))
    counters = [ClusterCounter(CountConfig(cluster=name, zookeeper=connect, window_ms=WINDOW,
                                           publish_interval_ms=300, group=f"count-{name}"))
                for name, connect in (("dc-a", dc.connect), ("analysis", analysis.connect))]
    service = AuditService(ServeConfig(zookeeper=analysis.connect, http_port=0,
                                       data_dir=str(tmp_path), grace_ms=20_000))
    stop = threading.Event()
    reader = threading.Thread(target=lambda: [service.step() for _ in iter(stop.is_set, True)])
    threads = [threading.Thread(target=c.run) for c in counters]
    output = tmp_path / "warehouse"
    try:
        mirror.start()
        for t in threads:
            t.start()
        reader.start()
        port = service.serve_http()

        def verdicts() -> dict[tuple[str, str, int], dict]:
            rows = service.verdicts("page_views", hour, hour + HOUR)
            return {(v.tier, v.cluster, (v.window_begin_ms - hour) // WINDOW): v.to_json()
                    for v in rows if v.topic == "page_views"}

        def counted(tiers) -> bool:
            found = verdicts()
            return all((tier, cluster, w) in found and found[(tier, cluster, w)]["count"]
                       == PER_WINDOW - d + u for tier, cluster in tiers
                       for w, (d, u) in FAULTS.items())

        wait_until(lambda: counted(TIERS[:3]), 120, interval=0.5,
                   what=lambda: f"dc-a, the mirror and analysis to count everything: "
                                f"{sorted(verdicts())}")
        summary = job.load(LoaderConfig(zookeeper=analysis.connect, output=f"file://{output}",
                                        whitelist="page_views", cluster_name="analysis",
                                        audit_window_ms=WINDOW, master="local[2]"), spark)
        assert summary.messages == len(times) - len(proxy.dropped) + len(proxy.doubled)
        wait_until(lambda: counted(TIERS), 120, interval=0.5,
                   what=lambda: f"the hadoop tier's counts: {sorted(verdicts())}")
        # the producers reported into windows two hours old: each stays pending
        # a grace after that report (docs/audit.md, "Producer clocks")
        wait_until(lambda: all(v["state"] != "pending" for v in verdicts().values()), 120,
                   interval=0.5, what=lambda: f"the verdicts to settle: {verdicts()}")

        found = verdicts()
        for tier, cluster in TIERS:
            for w, (dropped, doubled) in FAULTS.items():
                v = found[(tier, cluster, w)]
                assert (v["state"], v["missing"], v["duplicated"], v["exact"]) == \
                    (expected_state(dropped, doubled), dropped, doubled, True), (tier, w, v)

        # the warehouse's own check: 3 + 7 + 5 missing though the hour holds more
        # rows than the producers delivered
        config = tmp_path / "warehouse.toml"
        config.write_text(f'[loader]\nzookeeper = "{analysis.connect}"\n'
                          f'output = "file://{output}"\nwhitelist = "page_views"\n'
                          f'audit_window_ms = {WINDOW}\n'
                          f'[warehouse]\naudit_url = "http://127.0.0.1:{port}"\n')
        start = dt.datetime.fromtimestamp(hour / 1000, dt.timezone.utc)
        with pytest.raises(StepFailed, match=r"page_views: 303 rows loaded, 300 produced, "
                                             r"15 missing and 18 rows that are copies"):
            dag_steps.validate(start, start + dt.timedelta(hours=1), str(config))
    finally:
        stop.set()
        mirror.close()
        for c in counters:
            c.stop()
        for t in threads:
            t.join(30)
        for c in counters:
            c.close()
        if reader.is_alive():
            reader.join(30)
        service.close()
        proxy.close()
        for r in registries:
            r.close()
