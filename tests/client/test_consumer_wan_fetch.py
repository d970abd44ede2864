"""A fetch sized for the bandwidth-delay product (ConsumerConfig
fetch_rate_bytes): each partition asks for the connection's measured round
trip (the kernel's, TCP_INFO) x the rate, between fetch_max_bytes and
fetch_rtt_max_bytes; off, it asks for fetch_max_bytes. On loopback the
round trip is microseconds, so a rate of 10 TB/s stands in for a WAN's
product and must reach the ceiling."""
from __future__ import annotations

import pytest

from broker.client.consumer import Consumer, ConsumerConfig, RawChunk
from broker.client.producer import Producer

FLOOR = 64 * 1024
CEILING = 1 << 20


def first_chunk_bytes(address: str, **settings) -> int:
    consumer = Consumer(bootstrap=address, raw_chunks=True, fetch_max_bytes=FLOOR, **settings)
    try:
        consumer.assign([("wan", 0)], start="earliest")
        items = consumer.poll(timeout_ms=10_000)
        assert items and all(type(i) is RawChunk for i in items)
        if settings.get("fetch_rate_bytes"):
            rtt = consumer.conn.round_trip_s()
            assert rtt is not None and 0 < rtt < 1, rtt
        return sum(len(i.data) for i in items)
    finally:
        consumer.close()


def test_the_fetch_grows_with_the_round_trip_up_to_its_ceiling(broker, admin):
    admin.create_topic("wan", 1)
    with Producer(bootstrap=broker.address, acks="flushed", batch_size=200) as producer:
        for i in range(3000):                      # ~3 MB: more than the ceiling
            producer.send("wan", b"%04d" % i + b"x" * 1000, partition=0)
    plain = first_chunk_bytes(broker.address)
    sized = first_chunk_bytes(broker.address, fetch_rate_bytes=10 ** 13,
                              fetch_rtt_max_bytes=CEILING)
    modest = first_chunk_bytes(broker.address, fetch_rate_bytes=1,   # 1 B/s: the floor
                               fetch_rtt_max_bytes=CEILING)
    assert FLOOR - 1100 < plain <= FLOOR
    assert CEILING - 1100 < sized <= CEILING
    assert modest == plain


def test_the_fetch_ceiling_is_checked():
    with pytest.raises(ValueError, match="fetch_rtt_max_bytes"):
        ConsumerConfig(fetch_max_bytes=1 << 20, fetch_rate_bytes=1, fetch_rtt_max_bytes=1024)
    with pytest.raises(ValueError, match="fetch_rate_bytes"):
        ConsumerConfig(fetch_rate_bytes=-1)
