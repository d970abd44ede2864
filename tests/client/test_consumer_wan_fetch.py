"""A fetch sized for the bandwidth-delay product (ConsumerConfig
fetch_rate_bytes): each partition asks for the connection's measured round
trip (the kernel's, TCP_INFO) x the rate, between fetch_max_bytes and
fetch_rtt_max_bytes; off, it asks for fetch_max_bytes. On loopback the
round trip is microseconds, so a rate of 10 TB/s stands in for a WAN's
product and must reach the ceiling."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from broker.client.connection import BrokerConnection
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


def test_a_slow_answer_is_not_taken_for_a_long_round_trip():
    """A peer that answers each request 30 ms late (a busy broker; a long
    poll) delays its ACKs with the answer, and the kernel's smoothed round
    trip grows to ~30 ms: 64 MB/s would ask 1.9 MB per partition on a LAN.
    The round trip the fetch is sized by is the lowest the kernel saw."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer_late() -> None:
        peer, _ = server.accept()
        with peer:
            while peer.recv(4096):
                time.sleep(0.03)
                peer.sendall(b"answer")

    threading.Thread(target=answer_late, daemon=True).start()
    conn = BrokerConnection("127.0.0.1", server.getsockname()[1])
    try:
        conn.connect()
        sock = conn._sock
        for _ in range(15):
            sock.sendall(b"request")
            assert sock.recv(64) == b"answer"
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 152)
        smoothed = struct.unpack_from("=I", info, 68)[0] / 1e6
        assert smoothed > 0.01, smoothed          # what the old sizing read
        assert conn.round_trip_s() < 0.005
    finally:
        conn.close()
        server.close()


def test_the_whole_answer_stays_under_the_response_limit(broker, admin):
    admin.create_topic("many", 8)
    with Producer(bootstrap=broker.address, acks="flushed", batch_size=200) as producer:
        for p in range(8):
            for i in range(1500):
                producer.send("many", b"%d" % p + b"y" * 1000, partition=p)
    consumer = Consumer(bootstrap=broker.address, raw_chunks=True, fetch_max_bytes=FLOOR,
                        fetch_rate_bytes=10 ** 13, fetch_rtt_max_bytes=4 * CEILING)
    consumer.conn.max_response_bytes = 8 * CEILING       # 8 MiB for 8 partitions of 1.5 MB
    try:
        consumer.assign([("many", p) for p in range(8)], start="earliest")
        got = 0
        while got < 8 * 1500:
            items = consumer.poll(timeout_ms=10_000)
            assert items, f"{got} came back"
            # (8 MiB - 1 MiB) / 8 partitions: 896 KiB each, not the 4 MiB ceiling
            assert all(len(i.data) <= 7 * CEILING // 8 for i in items)
            got += sum(i.count for i in items)
    finally:
        consumer.close()


def test_the_fetch_ceiling_is_checked():
    with pytest.raises(ValueError, match="fetch_rtt_max_bytes"):
        ConsumerConfig(fetch_max_bytes=1 << 20, fetch_rate_bytes=1, fetch_rtt_max_bytes=1024)
    with pytest.raises(ValueError, match="fetch_rate_bytes"):
        ConsumerConfig(fetch_rate_bytes=-1)
