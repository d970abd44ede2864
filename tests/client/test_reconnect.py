"""Clients ride out a broker restart: the producer resends what was not
acknowledged (at-least-once), the consumer reconnects and resumes."""
from __future__ import annotations

import threading

from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker_helpers import connect, read_partition, wait_until


def test_producer_resends_across_a_broker_crash(broker_factory, topic):
    broker = broker_factory()
    with connect(broker.address) as conn:
        from broker.protocol import api
        conn.request(api.CreateTopicRequest(topic, 1, ()))
    producer = Producer(bootstrap=broker.address, acks="flushed", batch_size=20, linger_ms=1,
                        retry_backoff_ms=50)
    acked: list[int] = []
    sent = threading.Event()
    total = 6000

    def produce() -> None:
        futures = []
        for i in range(total):
            futures.append((i, producer.send(topic, b"m%06d" % i, partition=0)))
            if i == total // 3:
                sent.set()
        producer.flush(timeout=60)
        for i, f in futures:
            if f.exception() is None:
                acked.append(i)

    thread = threading.Thread(target=produce)
    thread.start()
    assert sent.wait(30)
    broker.kill()                     # kill -9 while batches are in flight
    broker.start()                    # same data dir, same port
    thread.join(90)
    assert not thread.is_alive()
    producer.close()
    assert producer.failed_batches == 0
    assert len(acked) == total        # every message was eventually acknowledged
    with connect(broker.address) as conn:
        stored = [m.value for m in read_partition(conn, topic, 0)]
    wanted = [b"m%06d" % i for i in range(total)]
    assert set(stored) == set(wanted)                      # nothing lost
    duplicates = len(stored) - len(set(stored))
    # at most what was in flight when the broker died is sent twice
    assert duplicates <= producer.config.max_in_flight * producer.config.batch_size


def test_consumer_reconnects_after_a_broker_restart(broker_factory, topic):
    broker = broker_factory()
    with Producer(bootstrap=broker.address, acks="flushed") as producer:
        for i in range(100):
            producer.send(topic, b"a%d" % i, partition=0)
    consumer = Consumer(bootstrap=broker.address, max_wait_ms=100, reconnect_backoff_ms=20,
                        request_timeout_ms=5000)
    consumer.assign([(topic, 0)], start="earliest")
    first = wait_until(lambda: consumer.poll(1000), timeout=10)
    position = consumer.position((topic, 0))
    broker.stop()
    broker.start()
    with Producer(bootstrap=broker.address, acks="flushed") as producer:
        for i in range(100, 150):
            producer.send(topic, b"a%d" % i, partition=0)
    got = list(first)
    while len(got) < 150:
        got += consumer.poll(1000)
    consumer.close()
    assert [m.value for m in got] == [b"a%d" % i for i in range(150)]
    assert got[len(first)].offset == position
