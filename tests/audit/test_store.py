"""The audit database on SQLite and on a real PostgreSQL: migrations, each
event stored once, sums per (topic, window, tier, datacenter, cluster) with
the 64-bit checksum put back together."""
from __future__ import annotations

import uuid

from audit.counting import CounterConfig, TierCounter
from audit.tally import id_hash

WINDOW = 600_000
NOW = 1_800_000_000_000 - 1_800_000_000_000 % WINDOW


def events(tier="producer", cluster="dc-a", n=3, ids=None, window=NOW - WINDOW):
    ids = ids or [uuid.uuid4().bytes for _ in range(n)]
    c = TierCounter(CounterConfig(tier=tier, datacenter=cluster, cluster=cluster,
                                  window_ms=WINDOW, dedup_ids=tier == "cluster"))
    values = [b"\x00\x00\x00\x00\x01" + b"\x02" + b"\x00\x00" + i for i in ids]
    c.add_values("page_views", values, window + 10, now_ms=NOW)
    return c.drain(now_ms=NOW), ids


def test_migrations_create_the_schema(store):
    assert store.revision() == "0002"
    store.upgrade()                 # again: nothing to do
    assert store.event_count() == 0


def test_each_event_is_stored_once_and_sums_are_exact(store):
    evs, ids = events(n=5)
    big, big_ids = events(n=200)        # checksums near 2^64: the halves must carry
    assert store.add_events(evs + big, received_ms=NOW) == 2
    assert store.add_events(evs, received_ms=NOW) == 0        # delivered again
    assert store.add_events(evs + evs, received_ms=NOW) == 0   # twice in one batch
    (total,) = store.totals(topic="page_views")
    assert (total.tier, total.cluster, total.window_begin_ms) == ("producer", "dc-a",
                                                                 NOW - WINDOW)
    assert total.message_count == 205 and total.events == 2
    assert total.checksum == sum(id_hash(i) for i in ids + big_ids) % (1 << 64)
    assert total.unique_count is None
    assert sum(total.latency_counts) == 205


def test_groups_by_tier_and_cluster_and_filters(store):
    store.add_events(events("producer", "dc-a", 4)[0] + events("producer", "dc-b", 2)[0]
                     + events("cluster", "dc-a", 4)[0]
                     + events("producer", "dc-a", 1, window=NOW)[0], received_ms=NOW)
    rows = store.totals(topic="page_views", begin_ms=NOW - WINDOW, end_ms=NOW)
    assert [(r.tier, r.cluster, r.message_count, r.unique_count) for r in rows] == [
        ("cluster", "dc-a", 4, 4), ("producer", "dc-a", 4, None), ("producer", "dc-b", 2, None)]
    assert [r.message_count for r in store.totals(tier="producer", begin_ms=NOW)] == [1]
    assert store.topics() == ["page_views"]
