"""A produce whose compressed wrapper inflates beyond inline_decompress_bytes
is validated on the broker's validation thread; the connection's requests
pipelined behind it wait for it and are still answered in order, with the
offsets they would have had on the loop."""
from __future__ import annotations

from broker.protocol import api
from broker.protocol.api import Acks, ApiKey
from broker.protocol.compression import Codec
from broker.protocol.message import compress_message_set, decode_message_set

from broker_helpers import (NOW_MS, connect, message_set, metric, raw_socket, read_frame,
                            read_partition, scrape_metrics)


def test_requests_behind_a_produce_validated_off_the_loop_keep_their_order(broker_factory):
    broker = broker_factory({"inline_decompress_bytes": 4096})
    big = message_set([bytes([i]) * 1000 for i in range(20)])    # 20 KB inflated
    wrapper = compress_message_set(big, Codec.GZIP, NOW_MS)
    assert len(wrapper) < 4096 < len(big)
    small = message_set([b"after the big one"])
    frames = [
        api.encode_request(api.ProduceRequest(Acks.WRITTEN, 30_000, (
            api.ProduceEntry("held", 0, wrapper),)), 1, "raw"),
        api.encode_request(api.ProduceRequest(Acks.FLUSHED, 30_000, (
            api.ProduceEntry("held", 0, small),)), 2, "raw"),
        api.encode_request(api.MetadataRequest(("held",)), 3, "raw"),
    ]
    sock = raw_socket(broker.address, timeout=30)
    try:
        sock.sendall(b"".join(frames))
        cid1, first = api.decode_response(ApiKey.PRODUCE, read_frame(sock))
        cid2, second = api.decode_response(ApiKey.PRODUCE, read_frame(sock))
        cid3, meta = api.decode_response(ApiKey.METADATA, read_frame(sock))
    finally:
        sock.close()
    assert (cid1, cid2, cid3) == (1, 2, 3)
    (r1,), (r2,) = first.results, second.results
    assert (r1.error, r2.error) == (0, 0), (r1, r2)
    assert (r1.base_offset, r1.end_offset) == (0, len(wrapper))
    assert (r2.base_offset, r2.end_offset) == (len(wrapper), len(wrapper) + len(small))
    # handled after both produces were written (its reply computed then)
    assert meta.topics[0].partitions[0].size_bytes == r2.end_offset
    assert metric(scrape_metrics(broker.metrics_port), "samsa_validations_off_loop_total") == 1
    with connect(broker.address) as conn:
        values = [m.value for m in read_partition(conn, "held", 0)]
    inner, _used = decode_message_set(big, 0, True, "held", 0)
    assert values == [m.value for m in inner] + [b"after the big one"]
