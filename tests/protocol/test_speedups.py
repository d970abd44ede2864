"""The C accelerator must give exactly what the pure-Python reference gives."""
import os
import random
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol import api, message as M
from broker.protocol.errors import CorruptMessageError, ProtocolError

pytestmark = pytest.mark.skipif(not M.ACCELERATED, reason="C accelerator not built")

values = st.lists(st.binary(max_size=300), max_size=40)
keys = st.one_of(st.none(), st.binary(max_size=20))
timestamps = st.integers(min_value=0, max_value=2**62)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=300), timestamps), max_size=30),
       st.integers(0, 2**40))
def test_decode_matches_reference(triples, base):
    data = M.encode_message_set(triples)
    assert M.decode_message_set(data, base, True, "t", 3) == \
        M.py_decode_message_set(data, base, True, "t", 3)
    assert M.validate_message_set(data) == M.py_validate_message_set(data)
    assert M.scan_valid_prefix(data) == M.py_scan_valid_prefix(data)


@settings(max_examples=200, deadline=None)
@given(values, st.one_of(timestamps, st.lists(timestamps)))
def test_encode_values_matches_reference(vals, ts):
    if not isinstance(ts, int):
        ts = (ts * (len(vals) // max(len(ts), 1) + 1))[:len(vals)] if ts else [0] * len(vals)
    assert M.encode_values(vals, ts) == M.py_encode_values(vals, ts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=100), timestamps), min_size=1, max_size=10),
       st.data())
def test_damaged_sets_behave_like_reference(triples, data):
    """Cut or flip bytes: the accelerated and reference functions agree on
    the prefix scan, and both raise (or both succeed) on decode/validate."""
    raw = bytearray(M.encode_message_set(triples))
    if data.draw(st.booleans()):
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    else:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    buf = bytes(raw)
    assert M.scan_valid_prefix(buf) == M.py_scan_valid_prefix(buf)
    for fast, slow in ((lambda: M.decode_message_set(buf, 0), lambda: M.py_decode_message_set(buf, 0)),
                       (lambda: M.validate_message_set(buf), lambda: M.py_validate_message_set(buf))):
        try:
            expected = slow()
        except ProtocolError as exc:
            with pytest.raises(type(exc)):
                fast()
        else:
            assert fast() == expected


def test_wrappers_between_plain_messages():
    plain = M.encode_message_set([(b"k", b"v", 1)])
    wrapped = M.compress_message_set(M.encode_values([b"a", b"b", b"c"], 2), 1, 2)
    data = plain + wrapped + plain + wrapped
    assert M.decode_message_set(data, 100) == M.py_decode_message_set(data, 100)
    assert M.validate_message_set(data) == M.py_validate_message_set(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="abcXYZ._-", min_size=1, max_size=20),
                          st.integers(-1, 50), values), max_size=4),
       st.sampled_from([0, 1, 2, 3]), st.integers(0, 2**31 - 1), st.one_of(st.none(), st.text(max_size=10)))
def test_produce_fast_path_matches_reference(entries, acks, cid, client_id):
    req = api.ProduceRequest(acks, 1000, tuple(api.ProduceEntry(t, p, M.encode_values(v, 5))
                                              for t, p, v in entries))
    frame = api.encode_request(req, cid, client_id)[4:]
    fast = api.decode_produce_frame(frame)
    header, decoded = api.decode_request(frame)
    assert fast is not None
    assert fast[:3] == (cid, acks, 1000)
    assert [(t, p, bytes(ms)) for t, p, ms, _info in fast[3]] == \
        [(e.topic, e.partition, e.message_set) for e in decoded.entries]
    for (_t, _p, ms, info) in fast[3]:
        if info is not None:
            assert tuple(info) == tuple(M.py_validate_message_set(ms))


def test_produce_fast_path_takes_acks_0_to_3_only():
    """acks 3 (ALL) is a valid produce request: the C decoder takes it (the
    same answer as the Python one); 4 and above it declines, and the Python
    decoder refuses them."""
    for acks in range(-1, 6):
        entry = api.ProduceEntry("t", 0, M.encode_values([b"x"], 1))
        req = api.ProduceRequest(acks, 1000, (entry,))
        frame = api.encode_request(req, 7, "c")[4:]
        fast = api.produce_frame_c(frame, 1 << 20)
        if 0 <= acks <= 3:
            assert fast is not None and fast[:3] == (7, acks, 1000)
            assert api.decode_produce_frame(frame)[:3] == (7, acks, 1000)
            assert api.decode_request(frame)[1] == req
        else:
            assert fast is None
            assert api.decode_produce_frame(frame) is None
            with pytest.raises(ProtocolError, match="unknown acks"):
                api.decode_request(frame)


def test_produce_fast_path_declines_what_it_does_not_handle():
    good = api.ProduceRequest(0, 1000, (api.ProduceEntry("t", 0, M.encode_values([b"x"], 1)),))
    frame = bytearray(api.encode_request(good, 7, "c")[4:])
    assert api.decode_produce_frame(bytes(frame)) is not None
    bad_crc = bytearray(frame)
    bad_crc[-1] ^= 1
    # the C path declines; the Python fast path hands it over unvalidated
    assert api.decode_produce_frame(bytes(bad_crc))[3][0][3] is None
    metadata = api.encode_request(api.MetadataRequest(()), 7, "c")[4:]
    assert api.decode_produce_frame(metadata) is None
    rng = random.Random(1)
    for _ in range(2000):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
        api.decode_produce_frame(junk)       # never raises


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=100), timestamps), max_size=10),
       st.booleans(), st.sampled_from(["whole", "cut", "flipped"]), st.data())
def test_walk_matches_reference(triples, wrapped, damage, data):
    """The walk under a consumer's raw chunks and whole_messages_length: the
    C accelerator's and the reference's agree on whole, cut and flipped sets,
    with a compressed wrapper or not, with the CRC check or without."""
    raw = bytearray(M.encode_message_set(triples))
    if wrapped:
        raw += M.compress_message_set(M.encode_values([b"a", b"b"], 2), 1, 2)
    if raw and damage == "cut":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    elif raw and damage == "flipped":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    buf = bytes(raw)
    for verify_crc in (True, False):
        assert M.walk_message_set(buf, verify_crc) == M.py_walk_message_set(buf, verify_crc)


def test_whole_messages_length_stops_at_a_malformed_header():
    """The pure-Python whole_messages_length read length fields only and
    went on past a message with a bad magic byte, saying only a partial
    message followed; the accelerated one stopped there (status 5): a
    consumer without the accelerator moved its position past corrupt bytes
    the other reported. Both stop there now."""
    one = M.encode_message_set([(None, b"v", 1)])
    bad = bytearray(one)
    bad[8] = 1                                   # magic 1: no such format
    buf = one + bytes(bad) + one
    assert M.walk_message_set(buf, False)[:2] == M.py_walk_message_set(buf, False)[:2] \
        == (5, len(one))
    assert M.whole_messages_length(buf) == (len(one), False)
    pure = subprocess.run(
        [sys.executable, "-c", "import sys; from broker.protocol import message as M; "
         "assert not M.ACCELERATED; print(M.whole_messages_length(sys.stdin.buffer.read()))"],
        input=buf, capture_output=True, env=dict(os.environ, SAMSA_PURE_PYTHON="1"))
    assert pure.returncode == 0, pure.stderr.decode()
    assert pure.stdout.decode().strip() == f"({len(one)}, False)"


def test_reserved_attribute_bits_are_refused_by_both_decoders():
    """The pure-Python decoder opened a wrapper whose attributes had a
    reserved bit set (it used only the codec bits), where the walk and the C
    decoder refuse it: a consumer without the accelerator held its position
    at it (the walk said malformed) yet got its messages, and so delivered
    them again on every fetch."""
    plain = M.encode_message_set([(None, b"v", 1)])
    wrapper = bytearray(M.compress_message_set(M.encode_values([b"a", b"b"], 2), 1, 2))
    wrapper[9] |= 0x08                                   # a reserved attribute bit
    wrapper[4:8] = (zlib.crc32(bytes(wrapper[8:])) & 0xFFFFFFFF).to_bytes(4, "big")
    buf = plain + bytes(wrapper)
    assert M.walk_message_set(buf)[:2] == M.py_walk_message_set(buf)[:2] == (5, len(plain))
    for decode in (M.decode_message_set, M.py_decode_message_set):
        with pytest.raises(CorruptMessageError, match="malformed message at offset 23"):
            decode(buf, 0)
