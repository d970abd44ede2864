"""End to end through a real broker process: the Producer's acks modes, batch
sizes, partitioning (by key; without one, sticky per batch or "any
partition", both round-robin per batch) and compression;
the Consumer reads everything back in order with the right offsets, keys,
values and timestamps, and seeks by offset, to earliest/latest and by time."""
from __future__ import annotations

import time
import zlib

import pytest

from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.protocol.message import Message, encode_message_set

from broker_helpers import NOW_MS, connect, produce


def consume(address: str, topic: str, partitions: int, count: int,
            timeout: float = 20.0) -> dict[int, list[Message]]:
    """Exactly ``count`` messages from the start of every partition, by
    partition; fails if fewer arrive within ``timeout`` or any more follow."""
    got: dict[int, list[Message]] = {p: [] for p in range(partitions)}
    total = 0
    with Consumer(bootstrap=address, max_wait_ms=200) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)], start="earliest")
        deadline = time.monotonic() + timeout
        while total < count:
            left = int((deadline - time.monotonic()) * 1000)
            assert left > 0, f"only {total} of {count} messages arrived within {timeout}s"
            for m in consumer.poll(timeout_ms=left):
                got[m.partition].append(m)
                total += 1
        assert consumer.poll(timeout_ms=100) == [], "more messages than were sent"
    return got


def assert_contiguous(messages: list[Message], start: int = 0) -> None:
    """Uncompressed messages tile the partition: each starts where the last ended."""
    offset = start
    for m in messages:
        assert m.offset == offset
        assert m.next_offset > m.offset
        offset = m.next_offset


@pytest.mark.parametrize("partitioner", ["sticky", "any"])
@pytest.mark.parametrize("batch_size", [1, 50])
@pytest.mark.parametrize("acks", ["none", "written", "flushed"])
def test_unkeyed_batches_go_round_robin_and_come_back_in_order(broker, admin, acks, batch_size,
                                                               partitioner):
    admin.create_topic("events", 3)
    n = 120
    values = [f"{acks}/{batch_size}/{i}".encode() for i in range(n)]
    # A long linger: batches close on size or flush only, so their bounds are known.
    with Producer(bootstrap=broker.address, acks=acks, batch_size=batch_size,
                  linger_ms=60_000, partitioner=partitioner) as producer:
        assert producer.partition_count("events") == 3
        futures = [producer.send("events", v, timestamp=NOW_MS + i)
                   for i, v in enumerate(values)]
        producer.flush(timeout=30)
    batches = list(dict.fromkeys(futures))          # one future per batch, in send order
    assert len(batches) == -(-n // batch_size)
    results = [f.result(timeout=0) for f in batches]
    if acks == "none" and partitioner == "any":
        assert results == [(-1, -1)] * len(batches)  # the broker's choice is not told
        where = [j % 3 for j in range(len(batches))]  # its cursor starts at 0
    else:
        # sticky: the producer moves on with each batch, from a random start;
        # "any partition": the broker deals the requests out round-robin
        where = [p for p, _base in results]
        assert where == [(where[0] + j) % 3 for j in range(len(batches))]
    if acks == "none":
        assert [base for _p, base in results] == [-1] * len(batches)  # no offsets come back

    got = consume(broker.address, "events", 3, n)
    for p in range(3):
        mine = [i for i in range(n) if where[i // batch_size] == p]
        assert [m.value for m in got[p]] == [values[i] for i in mine]
        assert [m.timestamp for m in got[p]] == [NOW_MS + i for i in mine]
        assert all(m.key is None and m.topic == "events" for m in got[p])
        assert_contiguous(got[p])
        assert got[p][-1].next_offset == admin.latest_offset("events", p)
    if acks != "none":
        first_offsets = {m.value: m.offset for ms in got.values() for m in ms}
        for j, (_partition, base) in enumerate(results):
            assert first_offsets[values[j * batch_size]] == base


def test_keyed_messages_land_on_the_key_partition_from_every_producer(broker, admin):
    admin.create_topic("keyed", 4)
    keys = [f"user-{k}".encode() for k in range(12)]
    sent: list[tuple[bytes, bytes]] = []
    for round_ in range(2):          # two producers, one after the other
        with Producer(bootstrap=broker.address, acks="written", batch_size=50) as producer:
            for i in range(120):
                key = keys[i % len(keys)]
                value = f"{round_}:{i}".encode()
                producer.send("keyed", value, key=key, timestamp=NOW_MS)
                sent.append((key, value))
    got = consume(broker.address, "keyed", 4, len(sent))
    seen_partitions = set()
    for p, messages in got.items():
        for m in messages:
            assert m.partition == zlib.crc32(m.key) % 4
            seen_partitions.add(p)
        assert_contiguous(messages)
    assert len(seen_partitions) > 1, "12 keys should spread over several partitions"
    for key in keys:
        in_log = [m.value for ms in got.values() for m in ms if m.key == key]
        assert in_log == [v for k, v in sent if k == key], f"order of key {key!r}"


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker, admin, codec):
    admin.create_topic("zipped", 1)
    n, batch = 100, 25
    sent = [(f"k{i}".encode() if i % 2 else None,
             b'{"page": "/catalog/item", "user": %d, "pad": "%s"}' % (i, b"x" * 200),
             NOW_MS + i) for i in range(n)]
    with Producer(bootstrap=broker.address, acks="flushed", batch_size=batch, linger_ms=60_000,
                  compression=codec) as producer:
        futures = [producer.send("zipped", v, key=k, partition=0, timestamp=ts)
                   for k, v, ts in sent]
        producer.flush(timeout=30)
    bases = [f.result(timeout=0)[1] for f in dict.fromkeys(futures)]
    assert len(bases) == n // batch

    messages = consume(broker.address, "zipped", 1, n)[0]
    assert [(m.key, m.value, m.timestamp) for m in messages] == sent
    # the inner messages of a wrapper share its offset; only the last one
    # points past the wrapper
    end = admin.latest_offset("zipped", 0)
    for j, base in enumerate(bases):
        group = messages[j * batch:(j + 1) * batch]
        assert {m.offset for m in group} == {base}
        assert [m.next_offset for m in group[:-1]] == [base] * (batch - 1)
        assert group[-1].next_offset == (bases[j + 1] if j + 1 < len(bases) else end)
    raw = len(encode_message_set(sent))
    assert end < raw / 4, f"{codec}: {end} bytes stored for {raw} bytes of messages"

    # resuming from a wrapper's next_offset neither skips nor repeats a message
    with Consumer(bootstrap=broker.address, max_wait_ms=200) as consumer:
        consumer.assign([("zipped", 0)], start=messages[batch - 1].next_offset)
        assert consumer.poll(timeout_ms=5000)[0] == messages[batch]


def test_seek_to_earliest_latest_an_offset_and_a_time(broker, admin):
    # Small segments: each produce below starts a segment, so a time maps to
    # a segment start (what the offsets-before API answers).
    admin.create_topic("timeline", 1, {"segment.bytes": 1000})
    minute = 60_000
    t0 = NOW_MS - 60 * minute
    groups = [[(None, f"g{g}-{i}".encode() * 10, t0 + g * minute + i) for i in range(10)]
              for g in range(4)]
    tp = ("timeline", 0)
    with connect(broker.address) as conn:
        bases = [produce(conn, *tp, encode_message_set(groups[g])).base_offset for g in range(3)]
        assert admin.describe_topic("timeline").partitions[0].segments == 3

        with Consumer(bootstrap=broker.address, max_wait_ms=200) as consumer:
            consumer.assign([tp], start="earliest")
            assert consumer.position(tp) == 0
            first = consumer.poll(timeout_ms=5000)
            assert [m.value for m in first[:10]] == [v for _k, v, _t in groups[0]]
            offsets = [m.offset for m in first]

            consumer.seek(tp, offsets[3])
            assert consumer.poll(timeout_ms=5000)[0].value == groups[0][3][1]

            consumer.seek(tp, "latest")
            assert consumer.position(tp) == admin.latest_offset(*tp)
            assert consumer.poll(timeout_ms=200) == []
            produce(conn, *tp, encode_message_set(groups[3]))
            assert consumer.poll(timeout_ms=5000)[0].value == groups[3][0][1]

            # newest segment that starts at or before the time; earliest if none
            for when, expected in ((t0 + minute, bases[1]),
                                   (t0 + minute + 30_000, bases[1]),
                                   (t0 + 2 * minute + 5, bases[2]),
                                   (t0 - 1, 0)):
                assert consumer.seek_to_time(tp, when) == expected
                assert consumer.position(tp) == expected
                m = consumer.poll(timeout_ms=5000)[0]
                assert m.offset == expected and m.timestamp <= max(when, t0)

            consumer.seek(tp, "earliest")
            assert consumer.poll(timeout_ms=5000)[0].value == groups[0][0][1]
