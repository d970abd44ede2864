"""Issue 9, defects 5 and 6 (producer side): retries keep the order within a
partition, wait a back-off after an error response, and a batch given up on
is dropped loudly. Also (issue 26): a broker that answers no metadata
request, as an older one, gets key-less messages for "any partition".

The broker here is a small fake that speaks the real protocol (the codec in
broker/protocol/api.py) so a test can choose which request fails: a real
broker cannot be made to answer REQUEST_TIMED_OUT or STORAGE_ERROR to one
chosen request.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from broker.client.producer import Producer
from broker.protocol import api
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.framing import FrameDecoder
from broker.protocol.message import decode_message_set

from broker_helpers import wait_until


class FakeBroker:
    """Accepts produce requests; ``fail(n, code)`` answers the next n of them
    with that per-entry error. Records what it accepted, in order, and when
    each request arrived, and to which partitions. Refuses metadata requests
    (UNSUPPORTED_VERSION, as a broker without that API would)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[bytes] = []
        self.arrivals: list[tuple[float, list[bytes], int]] = []   # time, values, error
        self.partitions: list[int] = []          # of every produce entry, in order
        self.metadata_requests = 0
        self._failures: list[int] = []
        self._end = 0
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def fail(self, times: int, code: int) -> None:
        with self._lock:
            self._failures += [code] * times

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        decoder = FrameDecoder(64 << 20)
        with conn:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                for frame in decoder.feed(data):
                    header, request = api.decode_request(bytes(frame))
                    if isinstance(request, api.MetadataRequest):
                        with self._lock:
                            self.metadata_requests += 1
                        conn.sendall(api.encode_error_response(
                            header.correlation_id, ErrorCode.UNSUPPORTED_VERSION, "no metadata"))
                        continue
                    conn.sendall(self._answer(header.correlation_id, request))

    def _answer(self, cid: int, request) -> bytes:
        results = []
        for topic, partition, message_set in request.entries:
            values = [m.value for m in decode_message_set(message_set, 0)[0]]
            with self._lock:
                self.partitions.append(partition)
                error = self._failures.pop(0) if self._failures else 0
                self.arrivals.append((time.monotonic(), values, error))
                if error:
                    results.append(api.ProduceResult(topic, partition, error, "injected", -1, -1))
                    continue
                self.accepted += values
                base, self._end = self._end, self._end + len(message_set)
            results.append(api.ProduceResult(topic, partition, 0, "", base, self._end))
        return api.encode_response(cid, api.ProduceResponse(tuple(results)))

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def fake_broker():
    broker = FakeBroker()
    yield broker
    broker.close()


def test_a_retried_batch_is_not_overtaken_by_later_ones(fake_broker):
    fake_broker.fail(1, ErrorCode.REQUEST_TIMED_OUT)
    values = [b"m%02d" % i for i in range(20)]
    with Producer(bootstrap=fake_broker.address, acks="written", batch_size=1, linger_ms=0,
                  retries=3, retry_backoff_ms=100) as producer:
        futures = [producer.send("t", v, partition=0) for v in values]
        producer.flush(timeout=30)
    assert all(f.exception() is None for f in futures)
    assert fake_broker.accepted == values          # in order, though m00 was retried
    assert fake_broker.arrivals[0][2] == ErrorCode.REQUEST_TIMED_OUT


def test_more_in_flight_per_partition_is_a_choice(fake_broker):
    """With max_in_flight_per_partition > 1 later batches are pipelined behind
    a failing one: they can land first (what the old producer always did)."""
    fake_broker.fail(1, ErrorCode.REQUEST_TIMED_OUT)
    values = [b"m%02d" % i for i in range(20)]
    with Producer(bootstrap=fake_broker.address, acks="written", batch_size=1, linger_ms=0,
                  retries=3, retry_backoff_ms=100, max_in_flight_per_partition=5) as producer:
        for v in values:
            producer.send("t", v, partition=0)
        producer.flush(timeout=30)
    assert sorted(fake_broker.accepted) == values
    assert fake_broker.accepted != values


def test_an_error_response_is_retried_after_a_back_off(fake_broker):
    fake_broker.fail(3, ErrorCode.STORAGE_ERROR)
    with Producer(bootstrap=fake_broker.address, acks="written", batch_size=1, linger_ms=0,
                  retries=5, retry_backoff_ms=100, retry_backoff_max_ms=1000) as producer:
        future = producer.send("t", b"v", partition=0)
        assert future.result(timeout=30)[1] == 0
    times = [t for t, _values, _error in fake_broker.arrivals]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # 100, 200, 400 ms, each within the ±20 % jitter
    assert len(gaps) == 3
    for gap, expected in zip(gaps, (0.1, 0.2, 0.4)):
        assert gap >= expected * 0.8 - 0.01, gaps


def test_a_batch_given_up_on_is_dropped_loudly(fake_broker, caplog):
    fake_broker.fail(10, ErrorCode.STORAGE_ERROR)
    caplog.set_level(logging.ERROR, logger="broker.client.producer")
    with Producer(bootstrap=fake_broker.address, acks="written", batch_size=3, linger_ms=50,
                  retries=2, retry_backoff_ms=10) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=0) for i in range(3)]
        producer.flush(timeout=30)
        assert producer.dropped_messages == 3
    error = futures[0].exception()
    assert isinstance(error, SamsaError) and error.code == ErrorCode.STORAGE_ERROR
    assert "DROPPED a batch of 3 messages" in caplog.text
    assert len(fake_broker.arrivals) == 3                  # 1 + 2 retries, then given up


def test_without_metadata_keyless_messages_go_to_any_partition(fake_broker):
    """The partition count cannot be learned: key-less messages go to "any
    partition" (the broker places them) and the producer keeps asking in
    the background; a keyed message, whose partition needs the count, fails
    at send()."""
    with Producer(bootstrap=fake_broker.address, acks="written", batch_size=1,
                  linger_ms=0, retry_backoff_ms=10) as producer:
        futures = [producer.send("t", b"v%d" % i) for i in range(20)]
        producer.flush(timeout=30)
        assert all(f.exception() is None for f in futures)
        with pytest.raises(SamsaError) as refused:
            producer.send("t", b"keyed", key=b"k")
        assert refused.value.code == ErrorCode.UNSUPPORTED_VERSION
        wait_until(lambda: fake_broker.metadata_requests >= 4,
                   what="the producer to keep asking for the partition count")
    assert fake_broker.partitions == [api.ANY_PARTITION] * 20
