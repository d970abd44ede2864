"""TierCounter: monitoring events per (topic, window), additive, with the
id checksum, exact duplicates where ids are kept, and a latency histogram;
the events encode with the shipped MonitoringEvent schema."""
from __future__ import annotations

import pytest

from audit.counting import (
    AUDIT_TOPIC,
    CounterConfig,
    MonitoringPublisher,
    TierCounter,
    percentile,
    unsigned_checksum,
)
from audit_helpers import WINDOW, checksum, decode_events, file_registry, page_views
from schemas.wire import ValueWriter

NOW = 1_700_000_000_000 - 1_700_000_000_000 % WINDOW + 5 * WINDOW


@pytest.fixture
def registry(tmp_path):
    r = file_registry(tmp_path / "registry.json")
    yield r
    r.close()


def counter(dedup: bool = False) -> TierCounter:
    return TierCounter(CounterConfig(tier="cluster", datacenter="dc-a", cluster="dc-a",
                                     window_ms=WINDOW, dedup_ids=dedup, host="h"))


def test_events_per_topic_and_window(registry):
    writer = ValueWriter(registry, "page_views")
    times = [NOW - WINDOW - 10] * 3 + [NOW - 5] * 2
    values, ids = page_views(writer, times)
    c = counter()
    c.add_values("page_views", values, times, now_ms=NOW)
    c.add_values("other", [b"not an envelope"], [NOW - 1], now_ms=NOW)
    events = {(e["topic"], e["window_begin_ms"]): e for e in c.drain(now_ms=NOW)}
    older = events[("page_views", NOW - 2 * WINDOW)]
    newer = events[("page_views", NOW - WINDOW)]
    assert older["message_count"] == 3 and newer["message_count"] == 2
    assert older["window_end_ms"] == NOW - WINDOW
    assert unsigned_checksum(older["id_checksum"]) == checksum(ids[:3])
    assert unsigned_checksum(newer["id_checksum"]) == checksum(ids[3:])
    assert older["byte_count"] == sum(map(len, values[:3]))
    assert older["unique_count"] is None            # no id sets kept
    assert events[("other", NOW - WINDOW)]["malformed_count"] == 1
    assert older["tier"] == "cluster" and older["datacenter"] == "dc-a"
    assert c.drain(now_ms=NOW) == []                 # drained: counted once


def test_events_are_additive_and_dedup_counts_first_sightings(registry):
    writer = ValueWriter(registry, "page_views")
    values, ids = page_views(writer, [NOW - 100] * 4)
    c = counter(dedup=True)
    c.add_values("page_views", values, NOW - 100, now_ms=NOW)
    first = c.drain(now_ms=NOW)[0]
    c.add_values("page_views", values[:2], NOW - 100, now_ms=NOW)     # 2 duplicates later
    second = c.drain(now_ms=NOW)[0]
    assert (first["message_count"], first["unique_count"]) == (4, 4)
    assert (second["message_count"], second["unique_count"]) == (2, 0)
    total = unsigned_checksum(first["id_checksum"]) + unsigned_checksum(second["id_checksum"])
    assert total % 2 ** 64 == checksum(ids + ids[:2])


def test_ids_of_windows_far_ahead_are_not_kept_until_the_clock_passes_them(registry):
    """A producer whose clock is two days ahead: its windows' ids are dropped
    once no longer counted, as old windows' are (memory stays bounded); a
    copy counted afterwards is late, as for an old window."""
    writer = ValueWriter(registry, "page_views")
    ahead = NOW + 2 * 24 * 3600 * 1000
    values, _ids = page_views(writer, [ahead] * 3)
    c = counter(dedup=True)
    c.add_values("page_views", values, ahead, now_ms=NOW)
    first = c.drain(now_ms=NOW)[0]                   # counted in this drain: kept
    assert (first["message_count"], first["unique_count"]) == (3, 3)
    assert c._ids["page_views"]
    c.drain(now_ms=NOW)                              # no longer counted: dropped
    assert not c._ids["page_views"]
    c.add_values("page_views", values[:1], ahead, now_ms=NOW)   # a copy, later
    late = c.drain(now_ms=NOW)[0]
    assert late["late_unique_count"] == 1 and late["unique_count"] == 0


def test_no_time_messages_count_in_the_window_of_arrival(registry):
    writer = ValueWriter(registry, "page_views")
    values, _ids = page_views(writer, [0, 0])
    c = counter()
    c.add_values("page_views", values, [0, -1], now_ms=NOW + 7)
    (event,) = c.drain(now_ms=NOW + 7)
    assert event["window_begin_ms"] == NOW and event["no_time_count"] == 2
    assert sum(event["latency_ms"]["counts"]) == 0 and event["latency_ms"]["p50_ms"] == -1


def test_latency_histogram_and_percentiles(registry):
    writer = ValueWriter(registry, "page_views")
    c = counter()
    times = [NOW - 50] * 90 + [NOW - 4000] * 9 + [NOW - 7_200_000]
    values, _ = page_views(writer, times)
    c.add_values("page_views", values, times, now_ms=NOW)
    events = c.drain(now_ms=NOW)
    recent = [e for e in events if e["window_begin_ms"] == NOW - WINDOW][0]
    lat = recent["latency_ms"]
    assert (lat["p50_ms"], lat["p95_ms"], lat["p99_ms"]) == (100, 5000, 5000)
    assert percentile((10, 20), [0, 0, 3], 0.5) == 20      # the open last bucket


def test_the_audit_topic_is_never_counted():
    c = counter()
    c.add_values(AUDIT_TOPIC, [b"x"], NOW, now_ms=NOW)
    assert c.drain(now_ms=NOW) == []


def test_events_round_trip_through_the_shipped_schema(registry):
    writer = ValueWriter(registry, "page_views")
    values, _ = page_views(writer, [NOW - 10])
    c = counter(dedup=True)
    c.add_values("page_views", values, NOW - 10, now_ms=NOW)
    events = c.drain(now_ms=NOW)
    encoded = [ValueWriter(registry, AUDIT_TOPIC).encode(e) for e in events]
    assert decode_events(registry, encoded) == events


def test_a_failed_publish_is_kept_and_sent_with_the_next(registry):
    writer = ValueWriter(registry, "page_views")
    values, _ = page_views(writer, [NOW - 10] * 3)
    c = counter()
    sent: list[list[bytes]] = []
    fail = [True]

    def send(vals, stamps):
        if fail[0]:
            raise ConnectionError("the audit topic's broker is down")
        sent.append(vals)

    publisher = MonitoringPublisher(c, ValueWriter(registry, AUDIT_TOPIC).encode, send)
    c.add_values("page_views", values, NOW - 10)
    assert publisher.publish() == 0 and publisher.unsent == 1 and publisher.failures == 1
    c.add_values("other", [b"x"], NOW - 10)
    fail[0] = False
    assert publisher.publish() == 2 and publisher.unsent == 0
    assert [e["topic"] for e in decode_events(registry, sent[0])] == ["page_views", "other"]


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="unknown tier"):
        CounterConfig(tier="edge", datacenter="a", cluster="a")
    with pytest.raises(ValueError, match="strictly increasing"):
        CounterConfig(tier="cluster", datacenter="a", cluster="a", latency_bounds_ms=(5, 5))


def test_an_audited_producer_counts_message_sets_sent_as_bytes(broker):
    """send_message_set (a mirror's forwarding) through an AuditedProducer:
    its delivered batches hold bytes, not values; they are counted all the
    same (review finding: the listener failed on them and the counts were
    lost)."""
    from audit.counting import AuditedProducer, CounterConfig, TierCounter
    from broker.client.producer import Producer
    from broker.protocol.message import encode_message_set

    counter = TierCounter(CounterConfig(tier="producer", datacenter="dc", cluster="c"))
    stamps = [1_700_000_000_000 + i for i in range(30)]
    data = encode_message_set([(None, b"v%d" % i, ts) for i, ts in enumerate(stamps)])
    audited = AuditedProducer(Producer(bootstrap=broker.address, acks="written"), counter)
    try:
        audited.send_message_set("counted", 0, data, 30, max(stamps)).result(timeout=10)
    finally:
        audited.close()
    assert counter.counted == 30
