"""Requests and responses: every dataclass survives encode -> frame -> decode,
mutated encodings only ever raise ProtocolError, and a malformed request with
a readable header says which request failed and why."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol import api
from broker.protocol.api import (
    ANY_PARTITION, EARLIEST, LATEST, Acks, ApiKey, CreateTopicRequest, DeleteTopicRequest,
    EmptyResponse, EpochStart, ErrorResponse, FetchEntry, FetchRequest, FetchResponse,
    FetchResult, LeaderEpochEndEntry, LeaderEpochEndRequest, LeaderEpochEndResponse,
    LeaderEpochEndResult, MetadataRequest, MetadataResponse, OffsetsRequest, OffsetsResponse,
    PartitionInfo, ProduceEntry, ProduceRequest, ProduceResponse, ProduceResult,
    ReplicaFetchEntry, ReplicaFetchRequest, ReplicaFetchResponse, ReplicaFetchResult,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse, TopicInfo,
    decode_request, decode_response, encode_error_response, encode_request, encode_response)
from broker.protocol.errors import ErrorCode, FrameTooLargeError, ProtocolError
from broker.protocol.framing import FrameDecoder

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
MAX_FRAME = 1 << 20

int8 = st.integers(-2**7, 2**7 - 1)
int16 = st.integers(-2**15, 2**15 - 1)
int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
nonneg32 = st.integers(0, 2**31 - 1)
text = st.text(max_size=12)                  # any Unicode, surrogates excluded
blob = st.binary(max_size=64)
config = st.lists(st.tuples(text, text), max_size=3).map(tuple)


def tuples(strategy, max_size=3):
    return st.lists(strategy, max_size=max_size).map(tuple)


produce_requests = st.builds(
    ProduceRequest, acks=st.sampled_from(list(Acks)), timeout_ms=int32,
    entries=tuples(st.builds(ProduceEntry, text, int32, blob)))
fetch_requests = st.builds(
    FetchRequest, max_wait_ms=nonneg32, min_bytes=nonneg32,
    entries=tuples(st.builds(FetchEntry, text, int32, int64, nonneg32)))
offsets_requests = st.builds(
    OffsetsRequest, text, int32, st.one_of(st.sampled_from([LATEST, EARLIEST]), int64),
    st.integers(1, 2**31 - 1))
metadata_requests = st.builds(MetadataRequest, tuples(text))
create_topic_requests = st.builds(CreateTopicRequest, text, int32, config)
delete_topic_requests = st.builds(DeleteTopicRequest, text)
replica_fetch_requests = st.builds(
    ReplicaFetchRequest, replica_id=nonneg32, max_wait_ms=nonneg32, min_bytes=nonneg32,
    entries=tuples(st.builds(ReplicaFetchEntry, text, int32, int32, int64, nonneg32)))
leader_epoch_end_requests = st.builds(
    LeaderEpochEndRequest, int32, tuples(st.builds(LeaderEpochEndEntry, text, int32, int32,
                                                   int32)))
sasl_blob = st.binary(max_size=api.MAX_SASL_BYTES)
sasl_handshake_requests = st.builds(SaslHandshakeRequest, text)
sasl_authenticate_requests = st.builds(SaslAuthenticateRequest, sasl_blob)
requests = st.one_of(produce_requests, fetch_requests, offsets_requests, metadata_requests,
                     create_topic_requests, delete_topic_requests, replica_fetch_requests,
                     leader_epoch_end_requests, sasl_handshake_requests,
                     sasl_authenticate_requests)

produce_responses = st.builds(
    ProduceResponse, tuples(st.builds(ProduceResult, text, int32, int16, text, int64, int64)))
fetch_responses = st.builds(
    FetchResponse, tuples(st.builds(FetchResult, text, int32, int16, text, int64, int64, blob)))
offsets_responses = st.builds(OffsetsResponse, int16, text, tuples(int64, 5))
metadata_responses = st.builds(
    MetadataResponse, int32, text, int32,
    tuples(st.builds(TopicInfo, text, int16, text, config,
                     tuples(st.builds(PartitionInfo, int32, int64, int64, int64, int32)))))
empty_responses = st.just(EmptyResponse())
epoch_starts = tuples(st.builds(EpochStart, int32, int64), 4)
replica_fetch_responses = st.builds(
    ReplicaFetchResponse, tuples(st.builds(ReplicaFetchResult, text, int32, int16, text, int32,
                                           int64, int64, int64, epoch_starts, blob)))
leader_epoch_end_responses = st.builds(
    LeaderEpochEndResponse, tuples(st.builds(LeaderEpochEndResult, text, int32, int16, text,
                                             int32, int64)))
responses = st.one_of(
    st.tuples(st.just(ApiKey.PRODUCE), produce_responses),
    st.tuples(st.just(ApiKey.FETCH), fetch_responses),
    st.tuples(st.just(ApiKey.OFFSETS), offsets_responses),
    st.tuples(st.just(ApiKey.METADATA), metadata_responses),
    st.tuples(st.sampled_from([ApiKey.CREATE_TOPIC, ApiKey.DELETE_TOPIC]), empty_responses),
    st.tuples(st.just(ApiKey.REPLICA_FETCH), replica_fetch_responses),
    st.tuples(st.just(ApiKey.LEADER_EPOCH_END), leader_epoch_end_responses),
    st.tuples(st.just(ApiKey.SASL_HANDSHAKE), st.builds(SaslHandshakeResponse, tuples(text))),
    st.tuples(st.just(ApiKey.SASL_AUTHENTICATE), st.builds(SaslAuthenticateResponse, sasl_blob)))
client_ids = st.one_of(st.none(), text)


def one_frame(data: bytes) -> bytes:
    frames = FrameDecoder(MAX_FRAME).feed(data)
    assert len(frames) == 1, "an encoder's output must be exactly one frame"
    return bytes(frames[0])


# --------------------------------------------------------------- round trips

@SETTINGS
@given(requests, int32, client_ids)
def test_request_round_trip(request, correlation_id, client_id):
    header, decoded = decode_request(one_frame(encode_request(request, correlation_id,
                                                              client_id)))
    assert decoded == request
    assert type(decoded) is type(request)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (request.API, api.API_VERSION, correlation_id, client_id)


@SETTINGS
@given(responses, int32)
def test_response_round_trip(keyed, correlation_id):
    api_key, response = keyed
    assert decode_response(api_key, one_frame(encode_response(correlation_id, response))) == \
        (correlation_id, response)


@SETTINGS
@given(int32, st.integers(1, 2**15 - 1), st.text(max_size=3000), st.sampled_from(list(ApiKey)))
def test_error_response_round_trip(correlation_id, error, message, api_key):
    frame = encode_error_response(correlation_id, error, message)
    assert decode_response(api_key, one_frame(frame)) == \
        (correlation_id, ErrorResponse(error, message[:2000]))


@SETTINGS
@given(responses, int32)
def test_response_header_then_body_is_the_response(keyed, correlation_id):
    # the broker sends a fetch as header + result headers + sendfile'd bytes
    _key, response = keyed
    body = response.encode_body()
    assert api.encode_response_header(correlation_id, len(body)) + body == \
        encode_response(correlation_id, response)


@SETTINGS
@given(st.lists(st.tuples(requests, int32), min_size=1, max_size=5))
def test_pipelined_requests_come_out_in_order(batch):
    stream = b"".join(encode_request(r, c, "x") for r, c in batch)
    frames = FrameDecoder(MAX_FRAME).feed(stream)
    decoded = [decode_request(f) for f in frames]
    assert [(h.correlation_id, r) for h, r in decoded] == [(c, r) for r, c in batch]


# --------------------------------------------------------------- mutations

def only_protocol_errors(fn, *args):
    """Run ``fn``; a ProtocolError is fine, anything else fails the test."""
    try:
        return fn(*args)
    except ProtocolError:
        return None


@SETTINGS
@given(requests, st.data())
def test_mutated_request_raises_only_protocol_error(request, data):
    payload = one_frame(encode_request(request, 1, "c"))
    i = data.draw(st.integers(0, len(payload) - 1))
    flipped = payload[:i] + bytes([payload[i] ^ data.draw(st.integers(1, 255))]) + payload[i + 1:]
    only_protocol_errors(decode_request, flipped)
    only_protocol_errors(decode_request, payload[:i])
    only_protocol_errors(decode_request, payload + data.draw(st.binary(min_size=1, max_size=8)))


@SETTINGS
@given(responses, st.data())
def test_mutated_response_raises_only_protocol_error(keyed, data):
    api_key, response = keyed
    payload = one_frame(encode_response(1, response))
    i = data.draw(st.integers(0, len(payload) - 1))
    flipped = payload[:i] + bytes([payload[i] ^ data.draw(st.integers(1, 255))]) + payload[i + 1:]
    for key in ApiKey:
        only_protocol_errors(decode_response, key, flipped)
        only_protocol_errors(decode_response, key, payload[:i])


def test_every_truncation_of_every_request_kind_is_refused():
    samples = [
        ProduceRequest(1, 10, (ProduceEntry("t", 0, b"xyz"),)),
        FetchRequest(1, 1, (FetchEntry("t", 0, 0, 10),)),
        OffsetsRequest("t", 0, LATEST),
        MetadataRequest(("t",)),
        CreateTopicRequest("t", 1, (("k", "v"),)),
        DeleteTopicRequest("t"),
        ReplicaFetchRequest(1, 1, 1, (ReplicaFetchEntry("t", 0, 2, 0, 10),)),
        LeaderEpochEndRequest(1, (LeaderEpochEndEntry("t", 0, 2, 1),)),
    ]
    for request in samples:
        payload = one_frame(encode_request(request, 1, "c"))
        for cut in range(len(payload)):
            with pytest.raises(ProtocolError):
                decode_request(payload[:cut])


def test_every_truncation_of_every_response_kind_is_refused():
    samples = [
        (ApiKey.PRODUCE, ProduceResponse((ProduceResult("t", 0, 0, "", 0, 24),))),
        (ApiKey.FETCH, FetchResponse((FetchResult("t", 0, 0, "", 0, 3, b"abc"),))),
        (ApiKey.OFFSETS, OffsetsResponse(0, "", (0,))),
        (ApiKey.METADATA, MetadataResponse(1, "h", 1, (TopicInfo("t", 0, "", (("k", "v"),),
                                                                 (PartitionInfo(0, 0, 0, 0, 1),)),))),
        (ApiKey.REPLICA_FETCH, ReplicaFetchResponse((ReplicaFetchResult(
            "t", 0, 0, "", 2, 0, 3, 5, ((1, 0), (2, 3)), b"abc"),))),
        (ApiKey.LEADER_EPOCH_END, LeaderEpochEndResponse((LeaderEpochEndResult(
            "t", 0, 0, "", 1, 24),))),
    ]
    for api_key, response in samples:
        payload = one_frame(encode_response(1, response))
        for cut in range(len(payload)):
            with pytest.raises(ProtocolError):
                decode_response(api_key, payload[:cut])


# --------------------------------------------------------------- what a bad request reports

def test_readable_header_with_bad_body_carries_correlation_id_and_invalid_request():
    payload = one_frame(encode_request(ProduceRequest(1, 10, ()), 42, "c"))
    with pytest.raises(ProtocolError) as info:
        decode_request(payload + b"\x00")          # trailing garbage
    assert info.value.correlation_id == 42
    assert info.value.api_key == ApiKey.PRODUCE
    assert info.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("request_, fix", [
    (ProduceRequest(4, 10, ()), "unknown acks"),
    (ProduceRequest(-1, 10, ()), "unknown acks"),
    (ReplicaFetchRequest(-1, 0, 0, ()), "replica_id"),
    (ReplicaFetchRequest(1, -1, 0, ()), "negative"),
    (ReplicaFetchRequest(1, 0, -1, ()), "negative"),
    (ReplicaFetchRequest(1, 0, 0, (ReplicaFetchEntry("t", 0, 0, 0, -1),)), "max_bytes"),
    (FetchRequest(-1, 0, ()), "negative"),
    (FetchRequest(0, -1, ()), "negative"),
    (FetchRequest(0, 0, (FetchEntry("t", 0, 0, -1),)), "max_bytes"),
    (OffsetsRequest("t", 0, LATEST, 0), "max_offsets"),
])
def test_rule_breaking_requests_are_invalid(request_, fix):
    payload = one_frame(encode_request(request_, 5, None))
    with pytest.raises(ProtocolError, match=fix) as info:
        decode_request(payload)
    assert (info.value.code, info.value.correlation_id) == (ErrorCode.INVALID_REQUEST, 5)


def test_null_topic_and_null_message_set_are_invalid():
    header = b"\x00\x00\x00\x00\x00\x00\x00\x09\xff\xff"   # produce v0, corr 9, null client
    body = b"\x01" + b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x01"   # acks, timeout, 1 entry
    for entry in (b"\xff\xff" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00",   # null topic
                  b"\x00\x01t" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"):  # null set
        with pytest.raises(ProtocolError) as info:
            decode_request(header + body + entry)
        assert (info.value.code, info.value.correlation_id) == (ErrorCode.INVALID_REQUEST, 9)


def test_unknown_api_key_or_version_is_unsupported():
    for header in (b"\x00\x63\x00\x00",            # api_key 99, version 0
                   b"\x00\x00\x00\x01"):           # produce, version 1
        with pytest.raises(ProtocolError) as info:
            decode_request(header + b"\x00\x00\x00\x07\xff\xff")
        assert (info.value.code, info.value.correlation_id) == (ErrorCode.UNSUPPORTED_VERSION, 7)


def test_unreadable_header_carries_no_correlation_id():
    for payload in (b"", b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00\x00\x07\x00"):
        with pytest.raises(ProtocolError) as info:
            decode_request(payload)                # shorter than the fixed 10 bytes
        assert not hasattr(info.value, "correlation_id")


def test_bad_client_id_is_an_invalid_request_with_its_correlation_id():
    fixed = b"\x00\x00\x00\x00\x00\x00\x00\x07"     # produce v0, correlation id 7
    for client in (b"\x00\x02\xff\xfe",                 # not UTF-8
                   b"\x00\x05ab",                         # longer than the payload
                   b"\xff\xfe"):                          # length -2
        with pytest.raises(ProtocolError) as info:
            decode_request(fixed + client)
        assert (info.value.code, info.value.correlation_id) == (ErrorCode.INVALID_REQUEST, 7)


def test_forged_array_count_is_refused_before_looping():
    header = b"\x00\x03\x00\x00\x00\x00\x00\x01\xff\xff"  # metadata v0, corr 1
    with pytest.raises(ProtocolError, match="array count"):
        decode_request(header + b"\x7f\xff\xff\xff")     # 2^31-1 topics in 0 bytes


def test_error_response_with_body_is_refused():
    frame = encode_error_response(1, ErrorCode.UNKNOWN, "boom")
    with pytest.raises(ProtocolError):
        decode_response(ApiKey.FETCH, one_frame(frame) + b"\x00\x00\x00\x00")


# --------------------------------------------------------------- local errors

def test_local_misuse_raises_value_error_not_protocol_error():
    with pytest.raises(ValueError):
        encode_request(DeleteTopicRequest("x" * 40000), 1, None)
    with pytest.raises(ValueError):
        decode_response(99, b"\x00\x00\x00\x01\x00\x00\xff\xff")
    assert not issubclass(ValueError, ProtocolError)


def test_constants():
    assert (ANY_PARTITION, LATEST, EARLIEST) == (-1, -1, -2)
    assert {a.name: int(a) for a in Acks} == {"NONE": 0, "WRITTEN": 1, "FLUSHED": 2, "ALL": 3}
    assert {k.name: int(k) for k in ApiKey} == {
        "PRODUCE": 0, "FETCH": 1, "OFFSETS": 2, "METADATA": 3, "CREATE_TOPIC": 4,
        "DELETE_TOPIC": 5, "REPLICA_FETCH": 6, "LEADER_EPOCH_END": 7, "SASL_HANDSHAKE": 8,
        "SASL_AUTHENTICATE": 9}
    # every API has a request class naming it and both decoders
    assert set(api.REQUEST_DECODERS) == set(api.RESPONSE_DECODERS) == set(ApiKey)
    assert (ReplicaFetchRequest.API, LeaderEpochEndRequest.API) == \
        (ApiKey.REPLICA_FETCH, ApiKey.LEADER_EPOCH_END)
    assert issubclass(FrameTooLargeError, ProtocolError)


# --------------------------------------------------------------- the produce fast paths

@SETTINGS
@given(produce_requests, int32, client_ids)
def test_fast_produce_decoder_agrees_with_decode_request(request, correlation_id, client_id):
    payload = one_frame(encode_request(request, correlation_id, client_id))
    fast = api.decode_produce_frame(payload)
    assert fast is not None
    corr, acks, timeout_ms, entries = fast
    assert ProduceRequest(acks, timeout_ms, tuple(ProduceEntry(*e[:3]) for e in entries)) == \
        request
    assert corr == correlation_id
    assert decode_request(payload)[1] == request
    check_fast_produce_infos(entries)


def check_fast_produce_infos(entries, max_message_bytes=1 << 30):
    """An entry's 4th item, when given, is what validating its set would say."""
    from broker.protocol.message import validate_message_set
    for entry in entries:
        if len(entry) > 3 and entry[3] is not None:
            assert tuple(entry[3]) == tuple(validate_message_set(entry[2], max_message_bytes))


@SETTINGS
@given(st.one_of(fetch_requests, offsets_requests, metadata_requests, create_topic_requests,
                 delete_topic_requests, replica_fetch_requests, leader_epoch_end_requests))
def test_fast_produce_decoder_declines_other_requests(request):
    assert api.decode_produce_frame(one_frame(encode_request(request, 1, "c"))) is None


@SETTINGS
@given(client_ids, st.sampled_from(list(Acks)), int32, int32, text, int32, blob)
def test_produce_frame_encoder_matches_encode_request(client_id, acks, timeout_ms,
                                                      correlation_id, topic, partition, ms):
    encoder = api.ProduceFrameEncoder(client_id, acks, timeout_ms)
    request = ProduceRequest(acks, timeout_ms, (ProduceEntry(topic, partition, ms),))
    assert encoder.frame(correlation_id, topic, partition, ms) == \
        encode_request(request, correlation_id, client_id)


# --------------------------------------------------------------- acks ALL

@pytest.mark.parametrize("acks", [0, 1, 2, 3])
def test_every_acks_mode_decodes_on_every_path(acks):
    """acks 3 (ALL) is a valid produce request for decode_request, the
    Python fast path and (when built) the C accelerator alike."""
    request = ProduceRequest(acks, 10, (ProduceEntry("t", 0, b""),))
    payload = one_frame(encode_request(request, 4, "c"))
    assert decode_request(payload)[1] == request
    assert api._py_decode_produce_frame(payload)[:3] == (4, acks, 10)
    assert api.decode_produce_frame(payload)[:3] == (4, acks, 10)


@pytest.mark.parametrize("acks", [4, 127, -1, -128])
def test_acks_beyond_all_is_refused_on_every_path(acks):
    payload = one_frame(encode_request(ProduceRequest(acks, 10, ()), 4, "c"))
    assert api._py_decode_produce_frame(payload) is None
    assert api.decode_produce_frame(payload) is None
    with pytest.raises(ProtocolError, match="unknown acks"):
        decode_request(payload)


# --------------------------------------------------------------- replica fetch

@SETTINGS
@given(replica_fetch_responses)
def test_replica_fetch_result_header_is_the_result_without_its_bytes(response):
    """What the leader sends for one result: the header function's bytes,
    then the message set (sendfile'd): the same bytes as encode_body."""
    parts = [len(response.results).to_bytes(4, "big")]
    for x in response.results:
        parts += (api.encode_replica_fetch_result_header(
            x.topic, x.partition, x.error, x.message, x.leader_epoch, x.earliest,
            x.high_watermark, x.log_end, x.epochs, len(x.message_set)), x.message_set)
    assert b"".join(parts) == response.encode_body()


def test_replica_fetch_message_set_is_a_view_of_the_frame():
    response = ReplicaFetchResponse((ReplicaFetchResult("t", 0, 0, "", 1, 0, 3, 3, ((1, 0),),
                                                        b"abc"),
                                     ReplicaFetchResult("t", 1, 0, "", 1, 0, 0, 0, (), b"")))
    payload = one_frame(encode_response(1, response))
    _cid, decoded = decode_response(ApiKey.REPLICA_FETCH, payload)
    first, second = decoded.results
    assert isinstance(first.message_set, memoryview)    # a fetch carries MBs: no copy
    assert first.message_set.obj is payload
    assert bytes(first.message_set) == b"abc" and second.message_set == b""
    assert first.epochs == (EpochStart(1, 0),) and isinstance(first.epochs[0], EpochStart)


def test_replica_fetch_message_set_may_end_in_a_partial_message():
    from broker.protocol.message import encode_values
    two = encode_values([b"one", b"two"], 5)
    cut = two[:len(two) - 3]                     # max_bytes cut the second message
    response = ReplicaFetchResponse((ReplicaFetchResult("t", 0, 0, "", 1, 0, 0, len(two),
                                                        ((1, 0),), cut),))
    _cid, decoded = decode_response(ApiKey.REPLICA_FETCH, one_frame(encode_response(1, response)))
    assert bytes(decoded.results[0].message_set) == cut


def test_forged_epoch_count_is_refused_before_looping():
    result = ReplicaFetchResult("t", 0, 0, "", 1, 0, 0, 0, (), b"")
    payload = bytearray(one_frame(encode_response(1, ReplicaFetchResponse((result,)))))
    at = len(payload) - 8                         # the epochs count, before the set's length
    assert payload[at:at + 4] == b"\x00\x00\x00\x00"
    payload[at:at + 4] = b"\x7f\xff\xff\xff"      # 2^31-1 epochs in 4 bytes
    with pytest.raises(ProtocolError, match="array count"):
        decode_response(ApiKey.REPLICA_FETCH, bytes(payload))


def test_authentication_messages_are_capped():
    """A SaslAuthenticate message larger than MAX_SASL_BYTES is a malformed
    request (an unauthenticated peer cannot make the broker hold more)."""
    frame = encode_request(SaslAuthenticateRequest(b"x" * (api.MAX_SASL_BYTES + 1)), 7, "c")
    with pytest.raises(ProtocolError, match="auth_bytes of 2049 bytes") as info:
        decode_request(one_frame(frame))
    assert info.value.correlation_id == 7
    with pytest.raises(ProtocolError, match="must not be null"):
        decode_request(one_frame(encode_request(SaslAuthenticateRequest(None), 8, "c")))
