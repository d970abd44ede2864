"""The producer picks the partition of a message sent without one
(broker/client/partitioner.py, partition_counts.py), checked against a real
broker: a keyed message goes to crc32(key) % partitions, in order; key-less
ones stick to one partition per batch and move round-robin, over every
partition; a topic whose partition count changed is picked up (after
``metadata_max_age_ms``, or at once when the broker refuses a partition);
an explicit partition is used as given. (The fallback to "any partition"
for a broker that answers no metadata is in test_producer_retries.py, whose
fake broker can refuse it.)"""
from __future__ import annotations

import zlib

import pytest

from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker.protocol.errors import ErrorCode, SamsaError

from broker_helpers import connect, read_partition, wait_until


@pytest.fixture
def admin(module_broker):
    with AdminClient(module_broker.address) as client:
        yield client


def stored(address: str, topic: str, partitions: int, count: int) -> dict[int, list]:
    """{partition: its messages}, read back once all ``count`` are visible
    (flushed by the broker)."""
    with connect(address) as conn:
        def read() -> dict[int, list] | None:
            got = {p: read_partition(conn, topic, p) for p in range(partitions)}
            return got if sum(map(len, got.values())) >= count else None
        return wait_until(read, what=f"{count} messages visible in {topic}")


def test_keyed_messages_go_to_the_key_partition_in_order(module_broker, admin, topic):
    admin.create_topic(topic, 4)
    keys = [b"user-%d" % k for k in range(10)]
    sent = [(keys[i % 10], b"%d" % i) for i in range(300)]
    # batch 1, acks=none: keyed messages travel among gathered key-less ones
    with Producer(bootstrap=module_broker.address, acks="none", batch_size=1,
                  linger_ms=0) as producer:
        for i, (key, value) in enumerate(sent):
            producer.send(topic, value, key=key)
            if i % 3 == 0:
                producer.send(topic, b"keyless %d" % i)
        producer.flush(timeout=30)
    got = stored(module_broker.address, topic, 4, 400)
    for p, messages in got.items():
        for m in messages:
            if m.key is not None:
                assert p == zlib.crc32(m.key) % 4
    for key in keys:
        assert [m.value for ms in got.values() for m in ms if m.key == key] == \
            [v for k, v in sent if k == key], f"order of {key!r}"
    assert sum(len(ms) for ms in got.values()) == 400


def test_keyless_messages_stick_to_one_partition_per_batch_then_move_on(module_broker, admin,
                                                                        topic):
    admin.create_topic(topic, 4)
    with Producer(bootstrap=module_broker.address, acks="written", batch_size=10,
                  linger_ms=60_000) as producer:
        assert producer.partition_count(topic) == 4      # known before the first send
        values = [b"%03d" % i for i in range(80)]
        futures = [producer.send(topic, v) for v in values]
        producer.flush(timeout=30)
    batches = list(dict.fromkeys(futures))          # one future per batch, in send order
    assert len(batches) == 8 and all(b.size() == 10 for b in batches)
    partitions = [b.result(timeout=0)[0] for b in batches]
    # each batch whole on one partition; the next batch on the next partition
    assert partitions == [(partitions[0] + j) % 4 for j in range(8)]
    got = stored(module_broker.address, topic, 4, 80)
    for p in range(4):
        assert [m.value for m in got[p]] == [v for b in batches if b.result(0)[0] == p
                                            for v in b.values]


def test_batch_one_fire_and_forget_spreads_over_every_partition(module_broker, admin, topic):
    """The benchmark's batch-1 case: the gathered key-less messages of a
    partition stay together until the sender takes them, then the next
    partition fills."""
    admin.create_topic(topic, 4)
    values = [b"%05d" % i for i in range(6000)]
    with Producer(bootstrap=module_broker.address, acks="none", batch_size=1,
                  linger_ms=0) as producer:
        producer.partition_count(topic)
        futures = [producer.send(topic, v) for v in values]
        producer.flush(timeout=30)
    assert {f.result(timeout=0)[0] for f in futures} == {0, 1, 2, 3}
    got = stored(module_broker.address, topic, 4, len(values))
    assert all(got[p] for p in range(4))
    assert sorted(m.value for ms in got.values() for m in ms) == values
    for p in range(4):                  # in send order within each partition
        assert [m.value for m in got[p]] == sorted(m.value for m in got[p])


def test_a_topic_that_grew_is_used_in_full_once_asked_again(module_broker, admin, topic):
    admin.create_topic(topic, 1)
    with Producer(bootstrap=module_broker.address, acks="written", batch_size=1, linger_ms=0,
                  metadata_max_age_ms=100) as producer:
        assert producer.partition_count(topic) == 1
        assert producer.send(topic, b"one partition").result(timeout=10)[0] == 0
        admin.delete_topic(topic)
        admin.create_topic(topic, 4)
        # within metadata_max_age_ms the producer asks again and moves on
        wait_until(lambda: producer.send(topic, b"x").result(timeout=10)[0] != 0,
                   what="a message on a partition other than 0")
        seen = {producer.send(topic, b"y").result(timeout=10)[0] for _ in range(8)}
        assert seen == {0, 1, 2, 3}


def test_a_refused_partition_makes_the_producer_ask_again(module_broker, admin, topic):
    admin.create_topic(topic, 4)
    with Producer(bootstrap=module_broker.address, acks="written", batch_size=1, linger_ms=0,
                  retries=0) as producer:
        assert producer.partition_count(topic) == 4
        admin.delete_topic(topic)
        admin.create_topic(topic, 2)
        # batch 1: each message its own batch, so round-robin; within three
        # messages one goes to partition 2 or 3, which the broker refuses
        for _ in range(3):
            future = producer.send(topic, b"before")
            if _exception(future) is not None:
                break
        error = future.exception()
        assert isinstance(error, SamsaError) and error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # the count was dropped at once: nothing sent after that fails
        later = [producer.send(topic, b"after %d" % i) for i in range(20)]
        assert {f.result(timeout=10)[0] for f in later} <= {0, 1}
        assert producer.partition_count(topic) == 2


def _exception(future) -> SamsaError | None:
    """What the batch failed with (waiting for it), or None."""
    try:
        future.result(timeout=10)
    except SamsaError as exc:
        return exc
    return None


def test_an_explicit_partition_is_used_as_given(module_broker, admin, topic):
    admin.create_topic(topic, 3)
    with Producer(bootstrap=module_broker.address, acks="written", batch_size=1,
                  linger_ms=0) as producer:
        assert [producer.send(topic, b"v", partition=2).result(timeout=10)[0]
                for _ in range(5)] == [2] * 5
        assert producer.send(topic, b"k", key=b"any key", partition=1).result(timeout=10)[0] == 1
        with pytest.raises(SamsaError) as refused:
            producer.send(topic, b"v", partition=7).result(timeout=10)
        assert refused.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert producer.partition_count(topic) == 3


def test_partitioner_any_leaves_the_choice_to_the_broker(module_broker, admin, topic):
    admin.create_topic(topic, 3)
    with Producer(bootstrap=module_broker.address, acks="written", batch_size=1, linger_ms=0,
                  partitioner="any") as producer:
        partitions = [producer.send(topic, b"v").result(timeout=10)[0] for _ in range(6)]
    # the broker deals requests out round-robin from where its cursor was
    assert partitions == [(partitions[0] + j) % 3 for j in range(6)]


def open_sockets() -> int:
    import os
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:             # the listing's own descriptor, gone
            pass
    return found


def test_closing_while_the_count_is_asked_leaves_no_connection(module_broker, admin, topic):
    """close() may come while the background ask opens its connection: the
    connection is closed all the same, and no ask starts after close."""
    import threading
    from broker.client.connection import BrokerConnectionError
    from broker.client.partition_counts import PartitionCounts
    admin.create_topic(topic, partitions=2)
    before = open_sockets()
    for _ in range(30):
        counts = PartitionCounts(module_broker.address, "test", 5.0, 300_000, 100, 1000)
        counts.count(topic)                        # the background ask starts
        counts.close()
        with pytest.raises(BrokerConnectionError):
            counts.count_now(topic + "-other")
    assert not [t for t in threading.enumerate() if t.name == "samsa-producer-metadata"
                and t.is_alive()]
    assert open_sockets() <= before


def test_between_asks_a_producer_holds_one_connection(module_broker, admin, topic):
    """Behind a load balancer a producer is one session: the metadata ask has
    a connection of its own only while it asks (tests/infra/test_lb_failover.py
    kills the broker that holds the producer's one session)."""
    admin.create_topic(topic, 2)
    before = open_sockets()
    with Producer(bootstrap=module_broker.address, acks="flushed", batch_size=10,
                  linger_ms=1) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(100)]
        producer.flush(timeout=30)
        assert producer.partition_count(topic) == 2
        wait_until(lambda: {f.result(timeout=0)[0] for f in futures} and
                   open_sockets() == before + 1, 10,
                   what="the producer's own connection only")
