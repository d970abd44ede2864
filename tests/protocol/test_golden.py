"""Golden bytes: every encoder against hand-written expected bytes, one
comment per field (as aiokafka's tests do). These pin the wire format that
docs/protocol.md describes; a change here is a protocol change."""
from __future__ import annotations

import zlib

from broker.protocol import api
from broker.protocol.api import (
    CreateTopicRequest, DeleteTopicRequest, EmptyResponse, EpochStart, ErrorResponse,
    FetchEntry, FetchRequest, FetchResponse, FetchResult, LeaderEpochEndEntry,
    LeaderEpochEndRequest, LeaderEpochEndResponse, LeaderEpochEndResult, MetadataRequest,
    MetadataResponse, OffsetsRequest, OffsetsResponse, PartitionInfo, ProduceEntry,
    ProduceRequest, ProduceResponse, ProduceResult, ReplicaFetchEntry, ReplicaFetchRequest,
    ReplicaFetchResponse, ReplicaFetchResult, TopicInfo, decode_request, decode_response,
    encode_error_response, encode_request, encode_response, encode_response_header)
from broker.protocol.compression import Codec
from broker.protocol.framing import FrameDecoder, encode_frame
from broker.protocol.message import (decode_message_set, encode_message, encode_message_set,
                                     encode_values, validate_message_set)

# value b"hi", no key, timestamp 1000 ms
MESSAGE_NO_KEY = b"".join([
    b"\x00\x00\x00\x14",                   # length: 20 bytes follow (18 + 0 key + 2 value)
    b"\x85\x0c\xc2\xc9",                   # crc: CRC-32 of magic..value
    b"\x00",                               # magic: 0
    b"\x00",                               # attributes: codec 0 (none)
    b"\x00\x00\x00\x00\x00\x00\x03\xe8",   # timestamp: 1000
    b"\xff\xff\xff\xff",                   # key_length: -1 (no key)
    b"hi",                                 # value
])

# value b"hi", key b"k", timestamp 1000 ms
MESSAGE_WITH_KEY = b"".join([
    b"\x00\x00\x00\x15",                   # length: 21 bytes follow (18 + 1 key + 2 value)
    b"\xc5\x23\x88\x5b",                   # crc: CRC-32 of magic..value
    b"\x00",                               # magic: 0
    b"\x00",                               # attributes: codec 0 (none)
    b"\x00\x00\x00\x00\x00\x00\x03\xe8",   # timestamp: 1000
    b"\x00\x00\x00\x01",                   # key_length: 1
    b"k",                                  # key
    b"hi",                                 # value
])

# the request header every request below shares: correlation id 7, client "c"
def request_header(api_key: int) -> bytes:
    return b"".join([
        api_key.to_bytes(2, "big"),        # api_key: int16
        b"\x00\x00",                       # api_version: 0
        b"\x00\x00\x00\x07",               # correlation_id: 7
        b"\x00\x01", b"c",                 # client_id: string "c"
    ])


# the header of every successful response below: correlation id 7
RESPONSE_OK_HEADER = b"".join([
    b"\x00\x00\x00\x07",                   # correlation_id: 7
    b"\x00\x00",                           # error: 0 (NONE)
    b"\xff\xff",                           # message: null string
])


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


# --------------------------------------------------------------- messages

def test_message_without_key():
    assert encode_message(b"hi", None, 1000) == MESSAGE_NO_KEY
    assert encode_message_set([(None, b"hi", 1000)]) == MESSAGE_NO_KEY
    assert encode_values([b"hi"], 1000) == MESSAGE_NO_KEY


def test_message_with_key():
    assert encode_message(b"hi", b"k", 1000) == MESSAGE_WITH_KEY
    assert encode_message_set([(b"k", b"hi", 1000)]) == MESSAGE_WITH_KEY


def test_crc_covers_magic_to_end_of_value_only():
    for m in (MESSAGE_NO_KEY, MESSAGE_WITH_KEY):
        assert int.from_bytes(m[4:8], "big") == zlib.crc32(m[8:])


def test_empty_key_is_not_no_key():
    assert encode_message(b"", b"", 0) == b"".join([
        b"\x00\x00\x00\x12",               # length: 18
        zlib.crc32(bytes(14)).to_bytes(4, "big"),  # crc of 14 bytes: magic..key_length 0
        b"\x00", b"\x00",                  # magic, attributes
        bytes(8),                          # timestamp: 0
        b"\x00\x00\x00\x00",               # key_length: 0 (an empty key, not null)
    ])
    assert decode_message_set(encode_message(b"", b"", 0), 0)[0][0].key == b""
    assert decode_message_set(encode_message(b"", None, 0), 0)[0][0].key is None


def test_message_set_offsets_are_byte_positions():
    ms = MESSAGE_NO_KEY + MESSAGE_WITH_KEY
    messages, used = decode_message_set(ms, 1000)
    assert used == 24 + 25
    assert [(m.offset, m.next_offset) for m in messages] == [(1000, 1024), (1024, 1049)]
    assert validate_message_set(ms).count == 2


def test_gzip_wrapper_layout():
    from broker.protocol.message import compress_message_set
    wrapper = compress_message_set(MESSAGE_NO_KEY, Codec.GZIP, 1000)
    payload = wrapper[22:]
    assert wrapper[:4] == (18 + len(payload)).to_bytes(4, "big")   # length
    assert wrapper[4:8] == zlib.crc32(wrapper[8:]).to_bytes(4, "big")  # crc
    assert wrapper[8:22] == b"".join([
        b"\x00",                           # magic: 0
        b"\x01",                           # attributes: codec 1 (gzip)
        b"\x00\x00\x00\x00\x00\x00\x03\xe8",   # timestamp: newest inner timestamp
        b"\xff\xff\xff\xff",               # key_length: -1 (a wrapper has no key)
    ])
    assert zlib.decompress(payload, wbits=31) == MESSAGE_NO_KEY


# --------------------------------------------------------------- requests

def check_request(request, expected_body: bytes) -> None:
    expected = frame(request_header(request.API) + expected_body)
    assert encode_request(request, 7, "c") == expected
    (payload,) = FrameDecoder(1 << 20).feed(expected)
    header, decoded = decode_request(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (request.API, 0, 7, "c")
    assert decoded == request


def test_request_header_with_null_client_id():
    req = DeleteTopicRequest("t")
    assert encode_request(req, -1, None) == frame(b"".join([
        b"\x00\x05",                       # api_key: 5 (DELETE_TOPIC)
        b"\x00\x00",                       # api_version: 0
        b"\xff\xff\xff\xff",               # correlation_id: -1
        b"\xff\xff",                       # client_id: null string
        b"\x00\x01", b"t",                 # name: "t"
    ]))
    header = api.RequestHeader(5, 0, -1, None)
    assert encode_request(req, -1, None)[4:] == header.encode() + req.encode_body()


def test_produce_request():
    check_request(
        ProduceRequest(acks=1, timeout_ms=1000,
                       entries=(ProduceEntry("t", api.ANY_PARTITION, MESSAGE_NO_KEY),)),
        b"".join([
            b"\x01",                       # acks: 1 (WRITTEN)
            b"\x00\x00\x03\xe8",           # timeout_ms: 1000
            b"\x00\x00\x00\x01",           # entries: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\xff\xff\xff\xff",           #   partition: -1 (ANY_PARTITION)
            b"\x00\x00\x00\x18",           #   message_set: bytes length 24
            MESSAGE_NO_KEY,                #   message_set: one message
        ]))


def test_fetch_request():
    check_request(
        FetchRequest(max_wait_ms=100, min_bytes=1,
                     entries=(FetchEntry("t", 0, 24, 1024),)),
        b"".join([
            b"\x00\x00\x00\x64",           # max_wait_ms: 100
            b"\x00\x00\x00\x01",           # min_bytes: 1
            b"\x00\x00\x00\x01",           # entries: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x00",           #   partition: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # offset: 24
            b"\x00\x00\x04\x00",           #   max_bytes: 1024
        ]))


def test_offsets_request():
    check_request(
        OffsetsRequest("t", 3, api.EARLIEST, 1),
        b"".join([
            b"\x00\x01", b"t",             # topic: "t"
            b"\x00\x00\x00\x03",           # partition: 3
            b"\xff\xff\xff\xff\xff\xff\xff\xfe",  # time: -2 (EARLIEST)
            b"\x00\x00\x00\x01",           # max_offsets: 1
        ]))


def test_metadata_request():
    check_request(
        MetadataRequest(("t", "uu")),
        b"".join([
            b"\x00\x00\x00\x02",           # topics: array count 2
            b"\x00\x01", b"t",             #   "t"
            b"\x00\x02", b"uu",            #   "uu"
        ]))
    check_request(MetadataRequest(), b"\x00\x00\x00\x00")   # topics: empty = every topic


def test_create_topic_request():
    check_request(
        CreateTopicRequest("t", 2, (("retention.ms", "1000"),)),
        b"".join([
            b"\x00\x01", b"t",             # name: "t"
            b"\x00\x00\x00\x02",           # partitions: 2
            b"\x00\x00\x00\x01",           # config: array count 1
            b"\x00\x0c", b"retention.ms",  #   key
            b"\x00\x04", b"1000",          #   value (always a string)
        ]))


def test_delete_topic_request():
    check_request(DeleteTopicRequest("t"), b"\x00\x01t")   # name: "t"


def test_produce_request_with_acks_all():
    check_request(
        ProduceRequest(acks=api.Acks.ALL, timeout_ms=1000, entries=()),
        b"".join([
            b"\x03",                       # acks: 3 (ALL)
            b"\x00\x00\x03\xe8",           # timeout_ms: 1000
            b"\x00\x00\x00\x00",           # entries: array count 0
        ]))


def test_replica_fetch_request():
    check_request(
        ReplicaFetchRequest(replica_id=2, max_wait_ms=500, min_bytes=1,
                            entries=(ReplicaFetchEntry("t", 1, 3, 48, 65536),)),
        b"".join([
            b"\x00\x00\x00\x02",           # replica_id: 2 (the follower's broker id)
            b"\x00\x00\x01\xf4",           # max_wait_ms: 500
            b"\x00\x00\x00\x01",           # min_bytes: 1
            b"\x00\x00\x00\x01",           # entries: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x01",           #   partition: 1
            b"\x00\x00\x00\x03",           #   leader_epoch: 3
            b"\x00\x00\x00\x00\x00\x00\x00\x30",  # offset: 48 (the follower's log end)
            b"\x00\x01\x00\x00",           #   max_bytes: 65536
        ]))


def test_leader_epoch_end_request():
    check_request(
        LeaderEpochEndRequest(replica_id=2, entries=(LeaderEpochEndEntry("t", 1, 4, 3),)),
        b"".join([
            b"\x00\x00\x00\x02",           # replica_id: 2
            b"\x00\x00\x00\x01",           # entries: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x01",           #   partition: 1
            b"\x00\x00\x00\x04",           #   current_leader_epoch: 4
            b"\x00\x00\x00\x03",           #   epoch: 3 (whose end is asked)
        ]))


# --------------------------------------------------------------- responses

def check_response(api_key: int, response, expected_body: bytes) -> None:
    expected = frame(RESPONSE_OK_HEADER + expected_body)
    assert encode_response(7, response) == expected
    assert encode_response_header(7, len(expected_body)) + expected_body == expected
    (payload,) = FrameDecoder(1 << 20).feed(expected)
    assert decode_response(api_key, payload) == (7, response)


def test_produce_response():
    check_response(
        api.ApiKey.PRODUCE,
        ProduceResponse((ProduceResult("t", 2, 0, "", 0, 24),)),
        b"".join([
            b"\x00\x00\x00\x01",           # results: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x02",           #   partition: 2 (the one written)
            b"\x00\x00",                   #   error: 0
            b"\x00\x00",                   #   message: "" (empty string)
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # base_offset: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # end_offset: 24
        ]))


def test_fetch_response():
    check_response(
        api.ApiKey.FETCH,
        FetchResponse((FetchResult("t", 0, 0, "", 0, 24, MESSAGE_NO_KEY),)),
        b"".join([
            b"\x00\x00\x00\x01",           # results: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x00",           #   partition: 0
            b"\x00\x00",                   #   error: 0
            b"\x00\x00",                   #   message: ""
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # earliest: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # high_watermark: 24
            b"\x00\x00\x00\x18",           #   message_set: bytes length 24
            MESSAGE_NO_KEY,                #   message_set
        ]))


def test_fetch_result_header_is_the_result_without_its_bytes():
    head = api.encode_fetch_result_header("t", 0, 3, "x", 10, 24, 0)
    assert head == b"".join([
        b"\x00\x01", b"t",                 # topic
        b"\x00\x00\x00\x00",               # partition
        b"\x00\x03",                       # error: 3 (OFFSET_OUT_OF_RANGE)
        b"\x00\x01", b"x",                 # message
        b"\x00\x00\x00\x00\x00\x00\x00\x0a",  # earliest: 10
        b"\x00\x00\x00\x00\x00\x00\x00\x18",  # high_watermark: 24
        b"\x00\x00\x00\x00",               # message_set: length 0
    ])


def test_offsets_response():
    check_response(
        api.ApiKey.OFFSETS,
        OffsetsResponse(0, "", (48, 0)),
        b"".join([
            b"\x00\x00",                   # error: 0
            b"\x00\x00",                   # message: ""
            b"\x00\x00\x00\x02",           # offsets: array count 2
            b"\x00\x00\x00\x00\x00\x00\x00\x30",  # 48 (newest first)
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # 0
        ]))


def test_metadata_response():
    check_response(
        api.ApiKey.METADATA,
        MetadataResponse(1, "h", 9092, (
            TopicInfo("t", 0, "", (("segment.bytes", "64"),),
                      (PartitionInfo(0, 0, 24, 24, 1),)),)),
        b"".join([
            b"\x00\x00\x00\x01",           # broker_id: 1
            b"\x00\x01", b"h",             # host: "h"
            b"\x00\x00\x23\x84",           # port: 9092
            b"\x00\x00\x00\x01",           # topics: array count 1
            b"\x00\x01", b"t",             #   name: "t"
            b"\x00\x00",                   #   error: 0
            b"\x00\x00",                   #   message: ""
            b"\x00\x00\x00\x01",           #   config: array count 1
            b"\x00\x0d", b"segment.bytes",  #     key
            b"\x00\x02", b"64",            #     value
            b"\x00\x00\x00\x01",           #   partitions: array count 1
            b"\x00\x00\x00\x00",           #     partition: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # earliest: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # latest: 24
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # size_bytes: 24
            b"\x00\x00\x00\x01",           #     segments: 1
            b"\x00\x10\x00\x00",           # max_message_bytes: 1 MiB
        ]))


def test_replica_fetch_response():
    check_response(
        api.ApiKey.REPLICA_FETCH,
        ReplicaFetchResponse((ReplicaFetchResult(
            "t", 1, 0, "", leader_epoch=3, earliest=0, high_watermark=24, log_end=48,
            epochs=(EpochStart(2, 0), EpochStart(3, 24)), message_set=MESSAGE_NO_KEY),)),
        b"".join([
            b"\x00\x00\x00\x01",           # results: array count 1
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x01",           #   partition: 1
            b"\x00\x00",                   #   error: 0
            b"\x00\x00",                   #   message: ""
            b"\x00\x00\x00\x03",           #   leader_epoch: 3 (the leader's current)
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # earliest: 0
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # high_watermark: 24 (committed end)
            b"\x00\x00\x00\x00\x00\x00\x00\x30",  # log_end: 48 (written end)
            b"\x00\x00\x00\x02",           #   epochs: array count 2
            b"\x00\x00\x00\x02",           #     epoch: 2
            b"\x00\x00\x00\x00\x00\x00\x00\x00",  # start_offset: 0
            b"\x00\x00\x00\x03",           #     epoch: 3
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # start_offset: 24
            b"\x00\x00\x00\x18",           #   message_set: bytes length 24
            MESSAGE_NO_KEY,                #   message_set (read from offset 24)
        ]))


def test_replica_fetch_result_header_is_the_result_without_its_bytes():
    head = api.encode_replica_fetch_result_header("t", 0, 18, "x", 5, 10, 24, 30, (), 0)
    assert head == b"".join([
        b"\x00\x01", b"t",                 # topic
        b"\x00\x00\x00\x00",               # partition
        b"\x00\x12",                       # error: 18 (FENCED_LEADER_EPOCH)
        b"\x00\x01", b"x",                 # message
        b"\x00\x00\x00\x05",               # leader_epoch: 5
        b"\x00\x00\x00\x00\x00\x00\x00\x0a",  # earliest: 10
        b"\x00\x00\x00\x00\x00\x00\x00\x18",  # high_watermark: 24
        b"\x00\x00\x00\x00\x00\x00\x00\x1e",  # log_end: 30
        b"\x00\x00\x00\x00",               # epochs: array count 0
        b"\x00\x00\x00\x00",               # message_set: length 0
    ])
    # with a message set: its length last, its bytes left to the caller
    assert api.encode_replica_fetch_result_header("t", 0, 0, "", 5, 0, 24, 24, ((5, 0),),
                                                  24)[-16:] == b"".join([
        b"\x00\x00\x00\x05",               # epoch: 5
        b"\x00\x00\x00\x00\x00\x00\x00\x00",  # start_offset: 0
        b"\x00\x00\x00\x18",               # message_set: length 24, bytes to follow
    ])


def test_leader_epoch_end_response():
    check_response(
        api.ApiKey.LEADER_EPOCH_END,
        LeaderEpochEndResponse((LeaderEpochEndResult("t", 1, 0, "", 2, 24),
                                LeaderEpochEndResult("u", 0, 19, "", -1, -1))),
        b"".join([
            b"\x00\x00\x00\x02",           # results: array count 2
            b"\x00\x01", b"t",             #   topic: "t"
            b"\x00\x00\x00\x01",           #   partition: 1
            b"\x00\x00",                   #   error: 0
            b"\x00\x00",                   #   message: ""
            b"\x00\x00\x00\x02",           #   epoch: 2 (largest <= the asked one)
            b"\x00\x00\x00\x00\x00\x00\x00\x18",  # end_offset: 24
            b"\x00\x01", b"u",             #   topic: "u"
            b"\x00\x00\x00\x00",           #   partition: 0
            b"\x00\x13",                   #   error: 19 (UNKNOWN_LEADER_EPOCH)
            b"\x00\x00",                   #   message: ""
            b"\xff\xff\xff\xff",           #   epoch: -1
            b"\xff\xff\xff\xff\xff\xff\xff\xff",  # end_offset: -1
        ]))


def test_create_and_delete_topic_responses_have_no_body():
    for key in (api.ApiKey.CREATE_TOPIC, api.ApiKey.DELETE_TOPIC):
        check_response(key, EmptyResponse(), b"")


def test_error_response():
    expected = frame(b"".join([
        b"\x00\x00\x00\x07",               # correlation_id: 7
        b"\x00\x06",                       # error: 6 (INVALID_REQUEST)
        b"\x00\x03", b"bad",               # message: "bad"
    ]))                                    # no body follows an error
    assert encode_error_response(7, 6, "bad") == expected
    (payload,) = FrameDecoder(1 << 20).feed(expected)
    for key in api.ApiKey:
        assert decode_response(key, payload) == (7, ErrorResponse(6, "bad"))


def test_frame():
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"   # size: 3, payload
    assert encode_frame(b"") == b"\x00\x00\x00\x00"


def test_worked_example_of_docs_protocol_md():
    """Section 11 of docs/protocol.md, byte for byte."""
    message = bytes.fromhex(
        "00000017"                 # length = 23
        "46ca1e4e"                 # crc
        "00"                       # magic
        "00"                       # attributes
        "0000018bcfe56800"         # timestamp = 1700000000000
        "ffffffff"                 # key_length = -1
        "68656c6c6f")              # value = "hello"
    assert encode_message(b"hello", None, 1700000000000) == message
    request = bytes.fromhex(
        "00000042"                 # frame size = 66
        "0000" "0000"              # api_key = 0 (Produce), api_version = 0
        "00000001"                 # correlation_id = 1
        "0004" "64656d6f"          # client_id = "demo"
        "01"                       # acks = 1
        "00001388"                 # timeout_ms = 5000
        "00000001"                 # entries: 1
        "0006" "6576656e7473"      # topic = "events"
        "ffffffff"                 # partition = -1
        "0000001b") + message      # message_set: 27 bytes
    assert encode_request(ProduceRequest(1, 5000, (ProduceEntry("events", -1, message),)),
                          1, "demo") == request
    response = bytes.fromhex(
        "0000002c"                 # frame size = 44
        "00000001" "0000" "ffff"   # correlation_id = 1, error = 0, message = null
        "00000001"                 # results: 1
        "0006" "6576656e7473"      # topic = "events"
        "00000000"                 # partition = 0
        "0000" "0000"              # error = 0, message = ""
        "0000000000000000"         # base_offset = 0
        "000000000000001b")        # end_offset = 27
    produced = ProduceResponse((ProduceResult("events", 0, 0, "", 0, 27),))
    assert encode_response(1, produced) == response
    assert decode_response(api.ApiKey.PRODUCE, response[4:]) == (1, produced)
