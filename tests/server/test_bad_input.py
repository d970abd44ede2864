"""Bad input from clients: garbage on the socket, lying frame sizes, bodies
that do not parse, unknown APIs, corrupt or oversized messages, produces to
partitions that do not exist, fetches out of range. The broker answers with
the right error (with the request's correlation id when it could read one)
or closes that one connection, appends nothing, and keeps serving everybody
else."""
from __future__ import annotations

import random
import struct
import threading
from typing import NamedTuple

import pytest

from broker.client.connection import BrokerConnection
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.config import BrokerConfig
from broker.protocol import api
from broker.protocol.api import Acks, ApiKey
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import decode_message_set, encode_message

from broker_helpers import (closed_by_peer, connect, fetch, log_sizes, message_set, produce,
                            raw_socket, read_frame, read_partition, request_frame, wait_until)

DEFAULTS = BrokerConfig()


class GoodClient:
    """A well-behaved client that, in a thread, keeps producing (acks=flushed)
    to its topic and reading each message back, checking both."""

    def __init__(self, address: str, topic: str) -> None:
        self.conn = connect(address)
        self.topic = topic
        self.round_trips = 0
        self.end = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                value = b"good-%d" % self.round_trips
                r = produce(self.conn, self.topic, 0, message_set([value]))
                assert (r.error, r.base_offset) == (0, self.end), r
                got = fetch(self.conn, self.topic, 0, r.base_offset)
                messages, _used = decode_message_set(got.message_set, r.base_offset)
                assert messages[0].value == value
                self.end = r.end_offset
                self.round_trips += 1
        except BaseException as exc:    # reported by keeps_going() / stop()
            self.error = exc

    def keeps_going(self) -> None:
        """Wait until it completes a few more round trips."""
        target = self.round_trips + 3
        wait_until(lambda: self.error is not None or self.round_trips >= target,
                   what="the good client's round trips")
        if self.error is not None:
            raise self.error

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=10)
        self.conn.close()
        if self.error is not None:
            raise self.error
        return self.round_trips


@pytest.fixture
def good_client(module_broker, topic):
    """A GoodClient busy on the broker for the whole test."""
    client = GoodClient(module_broker.address, topic + ".good")
    client.keeps_going()
    yield client
    client.stop()


class Victim(NamedTuple):
    conn: BrokerConnection
    topic: str

    def sizes(self) -> list[int]:
        return log_sizes(self.conn, self.topic)


@pytest.fixture
def victim(module_broker, topic):
    """A topic of one partition holding one flushed message, which bad
    clients aim at, and a connection to look at it."""
    conn = connect(module_broker.address)
    conn.request(api.CreateTopicRequest(topic, 1))
    produce(conn, topic, 0, message_set([b"first"]))
    yield Victim(conn, topic)
    conn.close()


def random_frame(seed: int) -> bytes:
    payload = random.Random(seed).randbytes(64)
    return struct.pack(">i", len(payload)) + payload


# Bytes after which the broker must close the connection: it cannot tell
# where the next request would start, or must not read that far.
CLOSING_GARBAGE = {
    "an HTTP request": b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n",
    "a negative frame size": struct.pack(">i", -5) + b"12345",
    # announces one byte over the limit and sends almost nothing: closed at
    # once, so the broker never waited for (or buffered) the payload
    "a frame over max_request_bytes":
        struct.pack(">i", DEFAULTS.max_request_bytes + 1) + b"\0" * 64,
    "a frame too short for a header": struct.pack(">i", 3) + b"\0\0\0",
}


@pytest.mark.parametrize("garbage", list(CLOSING_GARBAGE), ids=list(CLOSING_GARBAGE))
def test_unframeable_garbage_closes_only_that_connection(module_broker, good_client, victim,
                                                         garbage):
    before = victim.sizes()
    with raw_socket(module_broker.address) as sock:
        sock.sendall(CLOSING_GARBAGE[garbage])
        assert closed_by_peer(sock, timeout=2.0)
    good_client.keeps_going()
    assert victim.sizes() == before


@pytest.mark.parametrize("seed", range(6))
def test_random_frames_get_an_error_or_a_close(module_broker, good_client, victim, seed):
    before = victim.sizes()
    with raw_socket(module_broker.address) as sock:
        sock.sendall(random_frame(seed))
        sock.settimeout(3.0)
        head = sock.recv(4)
        if head:    # not closed: then it must be an error response
            payload = head + sock.recv(1 << 16)
            _cid, error = struct.unpack_from(">ih", payload, 4)
            assert error in (ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_VERSION)
    good_client.keeps_going()
    assert victim.sizes() == before


def produce_body(topic: str, data: bytes) -> bytes:
    return api.ProduceRequest(Acks.WRITTEN, 1000, (api.ProduceEntry(topic, 0, data),)
                              ).encode_body()


# Requests whose header parses but whose body does not (given the victim
# topic): each gets an error response carrying its correlation id.
BAD_REQUESTS = {
    "unknown acks mode": (ApiKey.PRODUCE, 0, lambda t: b"\x07" + b"\0" * 12,
                          ErrorCode.INVALID_REQUEST),
    "truncated produce": (ApiKey.PRODUCE, 0,
                          lambda t: produce_body(t, message_set([b"x"]))[:-9],
                          ErrorCode.INVALID_REQUEST),
    "trailing bytes after a valid produce": (
        ApiKey.PRODUCE, 0, lambda t: produce_body(t, message_set([b"x"])) + b"junk",
        ErrorCode.INVALID_REQUEST),
    "null message set": (ApiKey.PRODUCE, 0,
                         lambda t: produce_body(t, b"")[:-4] + struct.pack(">i", -1),
                         ErrorCode.INVALID_REQUEST),
    "forged array count": (ApiKey.FETCH, 0, lambda t: struct.pack(">iii", 100, 1, 1 << 30),
                           ErrorCode.INVALID_REQUEST),
    "negative max_wait": (ApiKey.FETCH, 0, lambda t: struct.pack(">iii", -1, 1, 0),
                          ErrorCode.INVALID_REQUEST),
    "unknown API key": (99, 0, lambda t: b"", ErrorCode.UNSUPPORTED_VERSION),
    "unsupported version": (ApiKey.METADATA, 3, lambda t: struct.pack(">i", 0),
                            ErrorCode.UNSUPPORTED_VERSION),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_a_request_that_does_not_parse_gets_an_error_with_its_correlation_id(
        module_broker, good_client, victim, case):
    api_key, version, body, expected = BAD_REQUESTS[case]
    before = victim.sizes()
    with raw_socket(module_broker.address) as sock:
        sock.sendall(request_frame(api_key, 4242, body(victim.topic), api_version=version))
        cid, response = api.decode_response(ApiKey.METADATA, read_frame(sock))
        assert cid == 4242
        assert isinstance(response, api.ErrorResponse)
        assert response.error == expected, response.message
        # the connection still serves well-formed requests
        sock.sendall(api.encode_request(api.MetadataRequest((victim.topic,)), 4243, "raw"))
        cid, meta = api.decode_response(ApiKey.METADATA, read_frame(sock))
        assert cid == 4243 and meta.topics[0].name == victim.topic
    good_client.keeps_going()
    assert victim.sizes() == before


# The replication APIs: the codec knows them, this broker does not serve them
# yet. A well-formed request is answered as an unknown API key is.
NOT_SERVED = {
    "replica fetch": api.ReplicaFetchRequest(
        2, 0, 0, (api.ReplicaFetchEntry("t", 0, 1, 0, 1024),)),
    "leader epoch end": api.LeaderEpochEndRequest(
        2, (api.LeaderEpochEndEntry("t", 0, 1, 1),)),
}


@pytest.mark.parametrize("case", list(NOT_SERVED), ids=list(NOT_SERVED))
def test_a_replication_request_is_unsupported_for_now(module_broker, good_client, victim, case):
    request = NOT_SERVED[case]
    before = victim.sizes()
    with raw_socket(module_broker.address) as sock:
        sock.sendall(api.encode_request(request, 4242, "raw"))
        cid, response = api.decode_response(request.API, read_frame(sock))
        assert cid == 4242
        assert isinstance(response, api.ErrorResponse)
        assert response.error == ErrorCode.UNSUPPORTED_VERSION, response.message
        assert request.API.name.lower() in response.message
        sock.sendall(api.encode_request(api.MetadataRequest((victim.topic,)), 4243, "raw"))
        cid, meta = api.decode_response(ApiKey.METADATA, read_frame(sock))
        assert cid == 4243 and meta.topics[0].name == victim.topic
    good_client.keeps_going()
    assert victim.sizes() == before


def test_one_bad_crc_rejects_the_whole_message_set(victim):
    before = victim.sizes()
    good = message_set([b"one", b"two", b"three", b"four"])
    bad = bytearray(good)
    bad[len(encode_message(b"one")) + 23] ^= 0x01      # a value byte of the 2nd message
    r = produce(victim.conn, victim.topic, 0, bytes(bad), Acks.WRITTEN)
    assert r.error == ErrorCode.CORRUPT_MESSAGE
    assert (r.base_offset, r.end_offset) == (-1, -1)
    assert victim.sizes() == before
    # the next good set starts where the log ended: nothing was half-appended
    r = produce(victim.conn, victim.topic, 0, good)
    assert (r.error, r.base_offset) == (0, before[0])
    assert [m.value for m in read_partition(victim.conn, victim.topic, 0)] == \
        [b"first", b"one", b"two", b"three", b"four"]


def test_a_message_over_max_message_bytes_is_refused(module_broker, victim):
    before = victim.sizes()
    huge = encode_message(b"x" * DEFAULTS.max_message_bytes)
    for data in (huge, message_set([b"small"]) + huge):
        r = produce(victim.conn, victim.topic, 0, data, Acks.WRITTEN)
        assert r.error == ErrorCode.MESSAGE_TOO_LARGE, r.message
    assert victim.sizes() == before
    with Producer(bootstrap=module_broker.address, acks="written") as producer:
        future = producer.send(victim.topic, b"y" * DEFAULTS.max_message_bytes, partition=0)
        producer.flush(timeout=30)
    with pytest.raises(SamsaError) as failure:
        future.result(timeout=0)
    assert failure.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert victim.sizes() == before


def test_fire_and_forget_errors_close_the_connection(module_broker, victim):
    before = victim.sizes()
    corrupt = bytearray(message_set([b"zap"]))
    corrupt[-1] ^= 0xFF
    for entry in (api.ProduceEntry(victim.topic, 7, message_set([b"nowhere"])),   # no such
                  api.ProduceEntry(victim.topic, 0, bytes(corrupt))):             # partition
        frame = api.encode_request(api.ProduceRequest(Acks.NONE, 1000, (entry,)), 1, "raw")
        with raw_socket(module_broker.address) as sock:
            sock.sendall(frame)
            assert closed_by_peer(sock, timeout=3.0), entry
    assert victim.sizes() == before
    # a good fire-and-forget produce keeps its connection: the next request is answered
    with raw_socket(module_broker.address) as sock:
        entry = api.ProduceEntry(victim.topic, 0, message_set([b"fine"]))
        sock.sendall(api.encode_request(api.ProduceRequest(Acks.NONE, 1000, (entry,)), 1, "raw")
                     + api.encode_request(api.MetadataRequest((victim.topic,)), 2, "raw"))
        cid, meta = api.decode_response(ApiKey.METADATA, read_frame(sock))
        assert cid == 2
        assert meta.topics[0].partitions[0].size_bytes > before[0]


@pytest.fixture
def trimmed(broker_factory):
    """A broker whose retention has deleted the oldest segments of "short":
    yields (broker, connection, earliest, high watermark) with earliest > 0."""
    broker = broker_factory({"retention_check_ms": 100})
    conn = connect(broker.address)
    conn.request(api.CreateTopicRequest("short", 1, (("segment.bytes", "200"),
                                                     ("retention.bytes", "300"))))
    for i in range(12):
        assert produce(conn, "short", 0, message_set([b"%02d" % i * 30])).error == 0
    earliest = wait_until(lambda: fetch(conn, "short", 0, 0).earliest,
                          what="retention to delete the oldest segments")
    hw = fetch(conn, "short", 0, earliest).high_watermark
    yield broker, conn, earliest, hw
    conn.close()


def test_fetch_out_of_range_says_where_the_valid_range_is(trimmed):
    _broker, conn, earliest, hw = trimmed
    for offset in (0, earliest - 1, hw + 1, hw + 10_000):
        r = fetch(conn, "short", 0, offset)
        assert r.error == ErrorCode.OFFSET_OUT_OF_RANGE, offset
        assert (r.earliest, r.high_watermark, r.message_set) == (earliest, hw, b"")
    assert fetch(conn, "short", 0, hw).error == 0            # the end itself is in range
    first = read_partition(conn, "short", 0, start=earliest)
    assert first and first[0].offset == earliest and first[-1].next_offset == hw


def test_consumer_out_of_range_raises_or_resets_as_configured(trimmed):
    broker, _conn, earliest, hw = trimmed
    with Consumer(bootstrap=broker.address, auto_offset_reset="error") as consumer:
        consumer.assign([("short", 0)], start=0)
        with pytest.raises(SamsaError) as failure:
            consumer.poll(timeout_ms=2000)
    assert failure.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (failure.value.earliest, failure.value.latest) == (earliest, hw)
    with Consumer(bootstrap=broker.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([("short", 0)], start=0)
        assert consumer.poll(timeout_ms=2000)[0].offset == earliest
