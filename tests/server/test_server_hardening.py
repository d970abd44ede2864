"""Issue 9, the broker's side: defects found when the broker was tried from
outside, each reproduced against a real broker process over real sockets.

* a fetch at an offset that is not a message boundary -> INVALID_OFFSET, not
  raw bytes with error 0 (defect 4);
* a topic deleted under a waiting fetch -> UNKNOWN_TOPIC_OR_PARTITION, not
  error 0 with stale watermarks (defect 9);
* names near the 32,767-byte string limit -> every request is answered with
  its per-entry error, nothing stalls or closes (defect 3);
* a full disk during a segment roll -> every pipelined produce is answered
  (STORAGE_ERROR), the connection stays open (defect 6);
* gzip wrappers that expand to the decompression cap -> other clients keep
  being served (defect 7);
* strict topic configuration values, duplicate keys refused (defect 10);
* the broker's maximum message size is published in Metadata (defect 4a).
"""
from __future__ import annotations

import os
import socket
import statistics
import threading
import time
import zlib

import pytest

from broker.protocol import api
from broker.protocol.api import Acks, ApiKey
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.message import encode_message

from broker_helpers import (NOW_MS, connect, fetch, message_set, produce, raw_socket,
                            read_frame, read_partition, wait_until)
from server_helpers import requests_handled


# ------------------------------------------------------------------ defect 4: boundaries

def test_fetch_at_an_offset_inside_a_message_is_refused(module_broker, topic):
    with connect(module_broker.address) as conn:
        r = produce(conn, topic, 0, message_set([b"x" * 300 for _ in range(10)]))
        assert r.error == 0, r.message
        good = fetch(conn, topic, 0, 0)
        assert good.error == 0 and len(good.message_set) == r.end_offset
        for offset in (3, 4, 17, r.end_offset - 5):
            bad = fetch(conn, topic, 0, offset)
            assert bad.error == ErrorCode.INVALID_OFFSET, (offset, bad)
            assert bad.message_set == b""
            assert bad.high_watermark == r.end_offset
        # a real boundary in the middle still works
        second = len(encode_message(b"x" * 300, None, NOW_MS))
        assert fetch(conn, topic, 0, second).error == 0


def test_metadata_publishes_the_max_message_size(module_broker, topic):
    with connect(module_broker.address) as conn:
        resp = conn.request(api.MetadataRequest(()))
        assert resp.max_message_bytes == 1 << 20


# ------------------------------------------------------------------ defect 9: delete under a fetch


def test_deleting_a_topic_answers_its_waiting_fetch_with_unknown_topic(module_broker, topic):
    with connect(module_broker.address) as fetcher, connect(module_broker.address) as admin:
        r = produce(admin, topic, 0, message_set([b"one"]))
        request = api.FetchRequest(20_000, 1, (api.FetchEntry(topic, 0, r.end_offset, 4096),))
        handled = requests_handled(module_broker, "fetch")
        fetcher.send(request)
        # the fetch is parked (nothing past end_offset) once the broker counted
        # it: counting and parking are one step of its event loop
        wait_until(lambda: requests_handled(module_broker, "fetch") > handled,
                   what="the fetch to park")
        started = time.monotonic()
        admin.request(api.DeleteTopicRequest(topic))
        _cid, resp = fetcher.receive()
        assert time.monotonic() - started < 5
        (result,) = resp.results
        assert result.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, result
        assert (result.earliest, result.high_watermark) == (-1, -1)


# ------------------------------------------------------------------ defect 3: long names

LONG = "t" * 32_760


def test_a_fetch_for_an_unknown_long_topic_is_answered(module_broker):
    with connect(module_broker.address) as conn:
        r = fetch(conn, LONG, 0, 0)
        assert r.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert r.topic == LONG
        assert len(r.message) < 2_000
        # and the connection still answers the next request
        assert conn.request(api.MetadataRequest(())).broker_id == 0


def test_a_produce_to_a_long_unknown_topic_gets_its_entry_error(module_broker):
    with connect(module_broker.address) as conn:
        r = produce(conn, LONG, 0, message_set([b"v"]))
        assert r.error == ErrorCode.INVALID_TOPIC, r
        assert len(r.message) < 2_000
        assert conn.request(api.MetadataRequest(())).broker_id == 0


def test_offsets_and_metadata_for_a_long_unknown_topic(module_broker):
    with connect(module_broker.address) as conn:
        off = conn.request(api.OffsetsRequest(LONG, 0, api.LATEST, 1))
        assert off.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        meta = conn.request(api.MetadataRequest((LONG,)))
        assert meta.topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert meta.topics[0].name == LONG


# ------------------------------------------------------------------ defect 6: disk full on a roll

def test_disk_full_during_a_segment_roll_answers_every_pipelined_produce(tmpfs, broker_factory):
    small_fs = tmpfs("2m")
    broker = broker_factory({"log.segment_bytes": 64 << 10}, data_dir=str(small_fs / "data"))
    value = b"v" * 4000
    frames = []
    for cid in range(60):
        body = api.encode_request(api.ProduceRequest(
            Acks.WRITTEN, 30_000, (api.ProduceEntry("roll", 0, message_set([value] * 10)),)),
            cid, "raw")
        frames.append(body)
    sock = raw_socket(broker.address, timeout=20)
    try:
        sock.sendall(b"".join(frames))
        answers = {}
        for _ in range(60):
            payload = read_frame(sock)       # fails the test if the broker hangs up
            cid, resp = api.decode_response(ApiKey.PRODUCE, payload)
            answers[cid] = resp
    finally:
        sock.close()
    assert sorted(answers) == list(range(60))
    errors = [a.results[0].error for a in answers.values()]
    assert ErrorCode.STORAGE_ERROR in errors, "the disk never filled"
    assert set(errors) <= {0, ErrorCode.STORAGE_ERROR}
    assert broker.proc.poll() is None
    # whatever was acknowledged is readable, in order, with no gap
    acked = sorted((a.results[0].base_offset, a.results[0].end_offset)
                   for a in answers.values() if a.results[0].error == 0)
    assert acked and acked[0][0] == 0
    for (_b1, e1), (b2, _e2) in zip(acked, acked[1:]):
        assert e1 == b2
    with connect(broker.address) as conn:
        wait_until(lambda: fetch(conn, "roll", 0, 0, max_bytes=0).high_watermark >= acked[-1][1],
                   what="the acknowledged messages to be flushed")
        assert len(read_partition(conn, "roll", 0)) == 10 * len(acked)


# ------------------------------------------------------------------ defect 7: gzip bombs

def gzip_bomb(expanded: int) -> bytes:
    """One compressed wrapper whose payload inflates to about ``expanded``
    bytes of zeros: garbage inside, so validation fails only after the work."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    payload = b"".join(compressor.compress(chunk) for _ in range(expanded >> 20))
    payload += compressor.flush()
    return encode_message(payload, None, NOW_MS, codec=1)


@pytest.mark.slow
def test_gzip_bombs_do_not_stall_other_clients(module_broker, topic):
    bomb = gzip_bomb(63 << 20)
    assert len(bomb) < 100_000
    frame = api.encode_request(api.ProduceRequest(
        Acks.WRITTEN, 30_000, (api.ProduceEntry(topic, 0, bomb),)), 1, "raw")
    latencies = []
    stop = threading.Event()

    def other_client():
        with connect(module_broker.address) as conn:
            while not stop.is_set():
                started = time.monotonic()
                conn.request(api.MetadataRequest(()))
                latencies.append(time.monotonic() - started)

    watcher = threading.Thread(target=other_client)
    watcher.start()
    sock = raw_socket(module_broker.address, timeout=60)
    try:
        sock.sendall(frame * 30)
        for _ in range(30):
            cid, resp = api.decode_response(ApiKey.PRODUCE, read_frame(sock))
            assert resp.results[0].error in (ErrorCode.CORRUPT_MESSAGE,
                                             ErrorCode.MESSAGE_TOO_LARGE), resp
    finally:
        sock.close()
        stop.set()
        watcher.join()
    assert latencies
    assert max(latencies) < 0.5, f"another client waited {max(latencies):.3f}s"


# ------------------------------------------------------------------ defect 10: config values

LOOSE_VALUES = [" 100", "+100", "1_000", "100 ", str(1 << 63), "0x10", ""]


@pytest.mark.parametrize("index", range(len(LOOSE_VALUES)))
def test_loose_config_values_are_refused(module_broker, index):
    value = LOOSE_VALUES[index]
    with connect(module_broker.address) as conn:
        with pytest.raises(SamsaError) as info:
            conn.request(api.CreateTopicRequest(f"loose-{index}", 1, (("retention.ms", value),)))
        assert info.value.code == ErrorCode.INVALID_CONFIG, info.value


def test_duplicate_config_keys_are_refused(module_broker, topic):
    with connect(module_broker.address) as conn:
        with pytest.raises(SamsaError) as info:
            conn.request(api.CreateTopicRequest(
                topic, 1, (("retention.ms", "1000"), ("retention.ms", "2000"))))
        assert info.value.code == ErrorCode.INVALID_CONFIG


def test_config_values_are_echoed_canonically(module_broker, topic):
    with connect(module_broker.address) as conn:
        conn.request(api.CreateTopicRequest(topic, 1, (("retention.ms", "-1"),
                                                       ("flush.ms", "0100"))))
        info = conn.request(api.MetadataRequest((topic,))).topics[0]
        assert dict(info.config) == {"retention.ms": "-1", "flush.ms": "100"}
