"""route_by_key (the mirror's re-framing of whole messages by key) in C and
in Python: the same bytes out, every message in the partition a keyed
producer would choose (zlib.crc32(key) % partitions), order kept, each
message's bytes unchanged (so its CRC still holds)."""
from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.protocol import message as msg
from broker.protocol.message import decode_message_set, encode_message_set, py_route_by_key

needs_c = pytest.mark.skipif(not msg.ACCELERATED, reason="the C accelerator is not built "
                             "(make setup builds it; make test fails without it)")

messages = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=12)),
                              st.binary(max_size=40), st.integers(0, 2**41)), max_size=60)


def expected(items, partitions):
    parts = [[] for _ in range(partitions)]
    unkeyed = []
    for key, value, ts in items:
        (unkeyed if key is None else parts[zlib.crc32(key) % partitions]).append((key, value, ts))
    return parts, unkeyed


def decoded(buf):
    return [(m.key, m.value, m.timestamp) for m in decode_message_set(buf, 0)[0]]


@given(messages, st.integers(1, 9))
@settings(max_examples=300, deadline=None)
def test_python_routes_every_message_where_a_keyed_producer_would(items, partitions):
    buf = encode_message_set(items)
    got = py_route_by_key(buf, partitions)
    if all(k is None for k, _v, _t in items):
        assert got is None
        return
    parts, counts, unkeyed, unkeyed_count = got
    want_parts, want_unkeyed = expected(items, partitions)
    assert [decoded(p) for p in parts] == want_parts
    assert counts == [len(p) for p in want_parts]
    assert decoded(unkeyed) == want_unkeyed and unkeyed_count == len(want_unkeyed)
    # the bytes are the original messages': nothing re-encoded
    assert sum(map(len, parts)) + len(unkeyed) == len(buf)


@needs_c
@given(messages, st.integers(1, 9))
@settings(max_examples=300, deadline=None)
def test_c_and_python_agree(items, partitions):
    buf = encode_message_set(items)
    assert msg._speedups.route(buf, partitions) == py_route_by_key(buf, partitions)
    assert msg._speedups.route(memoryview(buf), partitions) == py_route_by_key(buf, partitions)


@pytest.mark.parametrize("route", [py_route_by_key,
                                   pytest.param(lambda b, n: msg._speedups.route(b, n),
                                                marks=needs_c)])
def test_garbage_and_bad_arguments_are_refused(route):
    good = encode_message_set([(b"k", b"v", 1)])
    for bad in (good[:-1], good + b"\x00\x00", b"\x00\x00\x00\x05" + good[4:]):
        with pytest.raises(ValueError, match="whole, valid messages"):
            route(bad, 3)
    with pytest.raises(ValueError, match=">= 1"):
        route(good, 0)
    assert route(b"", 3) is None
