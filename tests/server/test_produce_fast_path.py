"""The broker's batch-1 path (issue 14, item 5): within one read, acks=none
produce requests of one message set for a (topic, partition) already appended
to in that read go straight to its log. These tests send many requests in one
write, so they arrive in one read, and check that the short cut changes
nothing a client can see: order, counts, a topic deleted between two
requests, a bad request in the middle, partitions it has not seen yet."""
from __future__ import annotations

from broker.protocol import api
from broker.protocol.api import Acks

from broker_helpers import (closed_by_peer, connect, message_set, metric, raw_socket,
                            read_frame, read_partition, scrape_metrics, wait_until)


def produce_frame(cid: int, topic: str, partition: int, values: list[bytes],
                  acks: Acks = Acks.NONE) -> bytes:
    request = api.ProduceRequest(acks, 30_000, (api.ProduceEntry(topic, partition,
                                                                 message_set(values)),))
    return api.encode_request(request, cid, "fast-path-test")


def flushed_values(address: str, topic: str, partition: int, count: int) -> list[bytes]:
    """The partition's values once ``count`` are visible (flushed)."""
    def read() -> list[bytes]:
        with connect(address) as conn:
            return [m.value for m in read_partition(conn, topic, partition)]
    def enough() -> list[bytes] | None:
        values = read()
        return values if len(values) >= count else None
    return wait_until(enough, what=f"{count} messages in {topic}/{partition}")


def send_then_sync(address: str, frames: list[bytes]) -> None:
    """One write of every frame, then a flushed produce elsewhere whose answer
    says the broker has handled everything before it."""
    sock = raw_socket(address)
    try:
        sock.sendall(b"".join(frames) + produce_frame(999_999, "sync", 0, [b"sync"],
                                                      Acks.FLUSHED))
        _cid, reply = api.decode_response(api.ApiKey.PRODUCE, read_frame(sock))
        assert reply.results[0].error == 0
    finally:
        sock.close()


def test_a_run_of_single_message_requests_keeps_order_and_counts(broker):
    values = [b"v%05d" % i for i in range(3000)]
    frames = [produce_frame(i, "batch1", i % 2, [v]) for i, v in enumerate(values)]
    send_then_sync(broker.address, frames)
    wait = [flushed_values(broker.address, "batch1", p, 1500) for p in (0, 1)]
    assert wait[0] == values[0::2]
    assert wait[1] == values[1::2]
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_messages_in_total", topic="batch1") == 3000
    assert metric(samples, "samsa_requests_total", api="produce") == 3001   # and the sync
    # the short cut took them: all but each read's first per partition (a
    # read holds hundreds of these ~60-byte requests)
    short_cuts = metric(samples, "samsa_produce_short_cuts_total")
    assert 2000 <= short_cuts < 3000, short_cuts


def test_a_topic_deleted_between_two_requests_is_not_appended_to(broker):
    """produce, delete the topic, produce again, all in one read: the second
    produce creates the topic anew (auto-create) and lands there, not in the
    deleted log."""
    delete = api.encode_request(api.DeleteTopicRequest("gone"), 50, "fast-path-test")
    frames = [produce_frame(1, "gone", 0, [b"first"]), produce_frame(2, "gone", 0, [b"second"]),
              delete,
              produce_frame(3, "gone", 0, [b"third"]), produce_frame(4, "gone", 0, [b"fourth"])]
    sock = raw_socket(broker.address)
    try:
        sock.sendall(b"".join(frames))
        _cid, reply = api.decode_response(api.ApiKey.DELETE_TOPIC, read_frame(sock))
        assert not isinstance(reply, api.ErrorResponse), reply
        sock.sendall(produce_frame(5, "sync", 0, [b"sync"], Acks.FLUSHED))
        read_frame(sock)
    finally:
        sock.close()
    assert flushed_values(broker.address, "gone", 0, 2) == [b"third", b"fourth"]


def test_a_corrupt_request_in_a_run_closes_the_connection_and_keeps_what_came_before(broker):
    good = [produce_frame(i, "mixed", 0, [b"ok%d" % i]) for i in range(5)]
    bad = bytearray(produce_frame(5, "mixed", 0, [b"corrupt me"]))
    bad[-3] ^= 0xFF                     # a flipped bit in the value: the CRC no longer matches
    after = [produce_frame(6 + i, "mixed", 0, [b"late%d" % i]) for i in range(3)]
    sock = raw_socket(broker.address)
    try:
        sock.sendall(b"".join(good) + bytes(bad) + b"".join(after))
        assert closed_by_peer(sock)     # acks=none: the only way to say it failed
    finally:
        sock.close()
    got = flushed_values(broker.address, "mixed", 0, 5)
    assert got[:5] == [b"ok%d" % i for i in range(5)]
    assert b"corrupt me" not in got
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_request_errors_total", api="produce",
                  error="CORRUPT_MESSAGE") == 1


def test_an_unknown_partition_in_a_run_is_refused_and_the_rest_go_on(broker):
    with connect(broker.address) as conn:
        conn.request(api.CreateTopicRequest("two", 2, ()))
    frames = [produce_frame(1, "two", 0, [b"a"]), produce_frame(2, "two", 1, [b"b"]),
              produce_frame(3, "two", 0, [b"c"]), produce_frame(4, "two", 7, [b"nowhere"])]
    sock = raw_socket(broker.address)
    try:
        sock.sendall(b"".join(frames))
        assert closed_by_peer(sock)
    finally:
        sock.close()
    assert flushed_values(broker.address, "two", 0, 2) == [b"a", b"c"]
    assert flushed_values(broker.address, "two", 1, 1) == [b"b"]
