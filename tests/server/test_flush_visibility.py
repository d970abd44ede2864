"""Messages reach consumers only once flushed: with flush.messages and
flush.ms out of reach, "written" messages stay invisible until a "flushed"
produce forces the fsync; a topic's flush.messages override flushes at once."""
from __future__ import annotations

import time

from broker.protocol import api
from broker.protocol.api import Acks

from broker_helpers import (NEVER_FLUSH, connect, fetch, high_watermark, log_sizes,
                            message_set, produce)


def test_written_messages_stay_invisible_until_a_flushed_produce(broker_factory):
    broker = broker_factory(NEVER_FLUSH)
    with connect(broker.address) as conn:
        produce(conn, "lazy", 0, message_set([b"warm-up"]), Acks.FLUSHED)   # auto-creates
        start = high_watermark(conn, "lazy", 0)
        written = [produce(conn, "lazy", 0, message_set([b"w%d" % i] * 3), Acks.WRITTEN)
                   for i in range(10)]
        assert all(r.error == 0 for r in written)
        assert written[0].base_offset == start
        end = written[-1].end_offset
        assert log_sizes(conn, "lazy")[0] == end          # in the file ...

        r = fetch(conn, "lazy", 0, start)                   # ... but not visible
        assert (r.error, r.high_watermark, r.message_set) == (0, start, b"")
        r = fetch(conn, "lazy", 0, start, max_wait_ms=300)  # nor will it be soon
        assert (r.high_watermark, r.message_set) == (start, b"")
        assert fetch(conn, "lazy", 0, end).error != 0       # beyond the visible end

        flushed = produce(conn, "lazy", 0, message_set([b"now"]), Acks.FLUSHED)
        assert flushed.base_offset == end
        r = fetch(conn, "lazy", 0, start)
        assert r.high_watermark == flushed.end_offset
        assert len(r.message_set) == flushed.end_offset - start   # all 31 messages at once


def test_topic_flush_messages_override_flushes_every_message(broker_factory):
    broker = broker_factory(NEVER_FLUSH)
    with connect(broker.address) as conn:
        conn.request(api.CreateTopicRequest("eager", 1, (("flush.messages", "1"),)))
        conn.request(api.CreateTopicRequest("lazy", 1))
        for name in ("eager", "lazy"):
            r = produce(conn, name, 0, message_set([b"a", b"b"]), Acks.WRITTEN)
            assert (r.error, r.base_offset) == (0, 0)
        end = r.end_offset      # the same message set went to both topics
        # a long-poll fetch wakes as soon as the override's flush lands
        started = time.monotonic()
        r = fetch(conn, "eager", 0, 0, max_wait_ms=10_000)
        assert time.monotonic() - started < 5
        assert (r.high_watermark, len(r.message_set)) == (end, end)
        # the broker-wide settings still hold for the other topic
        r = fetch(conn, "lazy", 0, 0, max_wait_ms=300)
        assert (r.high_watermark, r.message_set) == (0, b"")

