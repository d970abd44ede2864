"""A topic deleted while it holds appends not flushed yet (defect found by the
batch-1 fast path's tests, issue 14): the delete left the log's flush timer
armed; 50 ms later it flushed the deleted log's closed segment, the flusher
thread died on the closed descriptor, and from then on no flush completed:
nothing new became visible and every acks=flushed produce timed out."""
from __future__ import annotations

from broker.protocol import api
from broker.protocol.api import Acks

from broker_helpers import (connect, message_set, produce, raw_socket, read_frame, read_partition,
                            wait_until)


def test_deleting_a_topic_with_unflushed_appends_leaves_flushing_working(broker_factory):
    broker = broker_factory({"log.flush_messages": 1_000_000})     # flush_ms: 50
    sock = raw_socket(broker.address)
    try:
        request = api.ProduceRequest(Acks.NONE, 30_000, (api.ProduceEntry(
            "doomed", 0, message_set([b"never flushed"])),))
        delete = api.encode_request(api.DeleteTopicRequest("doomed"), 2, "test")
        sock.sendall(api.encode_request(request, 1, "test") + delete)
        _cid, reply = api.decode_response(api.ApiKey.DELETE_TOPIC, read_frame(sock))
        assert not isinstance(reply, api.ErrorResponse), reply
    finally:
        sock.close()
    with connect(broker.address, request_timeout=10) as conn:
        # acks=none: visible only once a flush timer (armed after the deleted
        # log's) fires and the flusher syncs it
        conn.send(api.ProduceRequest(Acks.NONE, 5_000, (api.ProduceEntry(
            "alive", 0, message_set([b"after 0"])),)), expect_response=False)
        wait_until(lambda: [m.value for m in read_partition(conn, "alive", 0)] == [b"after 0"],
                   timeout=5, what="the message produced after the delete to become visible")
        r = produce(conn, "alive", 0, message_set([b"after 1"]), Acks.FLUSHED, timeout_ms=5_000)
        assert r.error == 0, r.message
    assert "Exception in thread samsa-flusher" not in open(broker.log_path).read()


def test_the_flusher_thread_survives_any_error_of_a_sync():
    """Whatever a sync raises, the flush is reported failed and the thread
    goes on with the next one."""
    import queue
    from broker.server.flusher import Flusher

    class Broken:
        def sync(self):
            raise ValueError("file descriptor cannot be a negative integer (-1)")

    class Fine:
        def sync(self):
            pass

    reports: queue.SimpleQueue = queue.SimpleQueue()
    flusher = Flusher(lambda results: [reports.put(r) for r in results])
    try:
        flusher.submit("broken-log", [Broken()], 10)
        first = reports.get(timeout=5)
        assert first[0] == "broken-log" and first[3] is False
        assert isinstance(first[5], OSError) and "negative" in str(first[5])
        flusher.submit("good-log", [Fine()], 20)
        second = reports.get(timeout=5)
        assert second[0] == "good-log" and second[2] == 20 and second[3] is True
    finally:
        flusher.stop()
