"""Long-poll fetches: the broker holds a fetch at the end of a partition
until a message becomes visible (answering at once then), or until
max_wait_ms passes (answering with what it has)."""
from __future__ import annotations

import threading
import time

import pytest

from broker.client.consumer import Consumer
from broker.client.producer import Producer

from broker_helpers import connect, fetch, message_set, produce, wait_until
from server_helpers import requests_handled


@pytest.mark.parametrize("acks", ["flushed", "written"])
def test_a_waiting_fetch_returns_as_soon_as_a_message_becomes_visible(broker, admin, acks):
    admin.create_topic("live", 1)
    tp = ("live", 0)
    consumer = Consumer(bootstrap=broker.address, max_wait_ms=10_000, request_timeout_ms=20_000)
    consumer.assign([tp], start="latest")
    outcome: dict[str, object] = {}

    def wait_for_messages() -> None:
        started = time.monotonic()
        outcome["messages"] = consumer.poll(timeout_ms=10_000)
        outcome["seconds"] = time.monotonic() - started

    waiter = threading.Thread(target=wait_for_messages, daemon=True)
    try:
        waiter.start()
        # the fetch has reached the broker (and nothing can answer it yet)
        wait_until(lambda: requests_handled(broker, "fetch") >= 1, what="the consumer's fetch")
        assert waiter.is_alive()
        with Producer(bootstrap=broker.address, acks=acks, linger_ms=0) as producer:
            producer.send("live", b"hello", partition=0).result(timeout=10)
        waiter.join(timeout=10)
        assert not waiter.is_alive()
    finally:
        consumer.close()
    assert [m.value for m in outcome["messages"]] == [b"hello"]
    # "written" waits for the flush.ms timer (50 ms by default), no more
    assert outcome["seconds"] < 5, f"the fetch took {outcome['seconds']:.2f}s of its 10s"


def timed_fetch(conn, *args, **kwargs):
    """fetch(); its result and how long it took."""
    started = time.monotonic()
    result = fetch(conn, *args, **kwargs)
    return result, time.monotonic() - started


def test_a_fetch_with_nothing_arriving_returns_empty_after_max_wait(broker):
    with connect(broker.address) as conn:
        end = produce(conn, "quiet", 0, message_set([b"old"])).end_offset
        r, seconds = timed_fetch(conn, "quiet", 0, end, max_wait_ms=300)
        assert (r.error, r.message_set, r.high_watermark) == (0, b"", end)
        assert 0.3 <= seconds < 3, seconds
        # fewer than min_bytes available: held for max_wait, then answered with them
        r, seconds = timed_fetch(conn, "quiet", 0, 0, max_wait_ms=300, min_bytes=1 << 20)
        assert len(r.message_set) == end
        assert 0.3 <= seconds < 3, seconds


def test_the_broker_caps_the_wait_at_max_fetch_wait_ms(broker_factory):
    broker = broker_factory({"max_fetch_wait_ms": 200})
    with connect(broker.address) as conn:
        end = produce(conn, "quiet", 0, message_set([b"old"])).end_offset
        r, seconds = timed_fetch(conn, "quiet", 0, end, max_wait_ms=20_000)
        assert r.message_set == b""
        assert 0.2 <= seconds < 3, seconds


def test_shutdown_answers_a_waiting_fetch(broker):
    with connect(broker.address) as conn:
        end = produce(conn, "quiet", 0, message_set([b"old"])).end_offset
        outcome = {}
        waiter = threading.Thread(
            target=lambda: outcome.update(r=fetch(conn, "quiet", 0, end, max_wait_ms=20_000)),
            daemon=True)
        waiter.start()
        wait_until(lambda: requests_handled(broker, "fetch") >= 1, what="the waiting fetch")
        started = time.monotonic()
        assert broker.stop(timeout=10) == 0          # SIGTERM
        waiter.join(timeout=5)
    assert (outcome["r"].error, outcome["r"].message_set) == (0, b"")
    assert time.monotonic() - started < 5, "shutdown waited out the fetch's 20 s"
