"""infra/local/traffic.py: the demo's traffic, produced for real into two
clusters, read back and decoded: the counts per datacenter, topic and hour
it reports are what the brokers hold; page views switch to v2 part-way;
keys are member ids; the producer tier's monitoring events count the same."""
from __future__ import annotations

import time

from audit.counting import AUDIT_TOPIC
from cluster_helpers import read_all
from infra.local.traffic import HOUR_MS, TrafficConfig, produce, progress_bar
from schemas.registry import SchemaRegistry
from schemas.wire import ValueReader


def test_traffic_lands_as_reported(clusters, capsys):
    dcs = {name: clusters(name) for name in ("dc-a", "dc-b")}
    now = int(time.time() * 1000)
    config = TrafficConfig(messages_per_dc=1_000, hours=3, batch_size=100)
    result = produce({n: (c.brokers[0].address, c.connect) for n, c in dcs.items()}, config,
                     now_ms=now, progress=progress_bar())
    assert "100% 2,000/2,000" in capsys.readouterr().err
    first = now - now % HOUR_MS - 2 * HOUR_MS
    assert result.first_hour_ms == first
    for name, cluster in dcs.items():
        assert result.total(name) == 1_000
        assert [result.total(name, t) for t in ("page_views", "searches", "logins")] == \
            [600, 300, 100]
        registry = SchemaRegistry.open(f"zookeeper://{cluster.connect}")
        try:
            found: dict[tuple[str, int], int] = {}
            versions = set()
            for topic in ("page_views", "searches", "logins"):
                reader = ValueReader(registry, subject=topic)
                for messages in read_all(cluster, topic).values():
                    for m in messages:
                        event = reader.decode(m.value)
                        t = event["header"]["time_ms"]
                        assert m.timestamp == t and m.key == str(event["member_id"]).encode()
                        found[(topic, t - t % HOUR_MS)] = found.get((topic, t - t % HOUR_MS),
                                                                    0) + 1
                        if topic == "page_views":
                            versions.add("v2" if event["session_id"] else "v1")
            assert found == {(t, h): n for t, hours in result.acked[name].items()
                             for h, n in hours.items()}
            assert {h for _, h in found} == {first, first + HOUR_MS, first + 2 * HOUR_MS}
            assert versions == {"v1", "v2"}
            audit = ValueReader(registry, subject=AUDIT_TOPIC)
            events = [audit.decode(m.value) for ms in read_all(cluster, AUDIT_TOPIC).values()
                      for m in ms]
            assert {e["tier"] for e in events} == {"producer"}
            assert sum(e["message_count"] for e in events) == 1_000
        finally:
            registry.close()
