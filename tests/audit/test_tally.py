"""The counting kernel: the C twin (audit._tally) gives exactly what the
pure-Python reference (audit/tally.py) gives, on any input; the reference
itself is checked against hand-made cases and the header reader of schemas."""
from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import tally as ref
from broker.protocol.message import Message
from schemas.header import encode_long as zigzag

c_tally = pytest.importorskip("audit._tally") if os.environ.get("SAMSA_REQUIRE_SPEEDUPS") != "1" \
    else __import__("audit._tally", fromlist=["_tally"])

BOUNDS = (10, 100, 1000, 60_000)
WINDOW = 600_000
NOW = 1_700_000_123_456
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def envelope(time_ms: int, host: bytes, service: bytes, event_id: bytes, rest: bytes = b"",
             schema_id: int = 1234) -> bytes:
    return (b"\x00" + schema_id.to_bytes(4, "big") + zigzag(time_ms) + zigzag(len(host)) + host
            + zigzag(len(service)) + service + event_id + rest)


def test_reference_on_hand_made_values():
    ids = [uuid.UUID(int=i).bytes for i in range(4)]
    values = [envelope(NOW - 5, b"h", b"svc", ids[0]),
              envelope(NOW - 50, b"host-2", b"", ids[1], b"rest of the record"),
              envelope(NOW - 50, b"h", b"svc", ids[1]),            # a duplicate id
              b"garbage",                                            # malformed
              envelope(NOW, b"h", b"s", ids[2])[:-3]]                # truncated: malformed
    stamps = [NOW - 5, NOW - 50, NOW - 50, NOW - 7000, 0]           # the last has no time
    acc, sets = {}, {}
    assert ref.tally_values(acc, values, stamps, WINDOW, NOW, BOUNDS, sets) == 5
    begin = NOW - NOW % WINDOW
    t = acc[begin]
    assert t[ref.COUNT] == 5 and t[ref.BYTES] == sum(map(len, values))
    assert t[ref.NO_TIME] == 1 and t[ref.MALFORMED] == 2
    assert t[ref.CHECKSUM] == (ref.id_hash(ids[0]) + 2 * ref.id_hash(ids[1])) % 2 ** 64
    assert t[ref.UNIQUE] == 2
    assert t[ref.FIXED_FIELDS:] == [1, 2, 0, 1, 0]      # <=10, <=100, <=1000, <=60000, rest
    assert sets[begin] == {ref.id_hash(ids[0]), ref.id_hash(ids[1])}


def test_windows_split_by_timestamp():
    acc = {}
    ts = [WINDOW * 10 + 1, WINDOW * 11 - 1, WINDOW * 11, WINDOW * 11 + 5]
    ref.tally_values(acc, [b"x"] * 4, ts, WINDOW, WINDOW * 12, BOUNDS)
    assert {k: v[ref.COUNT] for k, v in acc.items()} == {WINDOW * 10: 2, WINDOW * 11: 2}


@pytest.mark.parametrize("kernel", [ref, c_tally], ids=["reference", "C"])
def test_a_timestamp_days_ahead_of_the_counters_clock_counts_in_its_own_window(kernel):
    """A message's window depends on the message alone, never on the
    counter's clock: a producer whose clock is days ahead counts its
    events in their windows, and so must a counter with a right clock.
    Only a timestamp that cannot be milliseconds (<= 0, or from 2100 on:
    micro- or nanoseconds) has no time, and counts where it arrives."""
    days_ahead, last_ms = NOW + 3 * 24 * 3_600_000, ref.MAX_TIME_MS - 1
    micros = NOW * 1000
    acc = {}
    kernel.tally_values(acc, [b"x"] * 4, [days_ahead, last_ms, ref.MAX_TIME_MS, micros],
                        WINDOW, NOW, BOUNDS)
    arrival = NOW - NOW % WINDOW
    assert {k: (t[ref.COUNT], t[ref.NO_TIME]) for k, t in acc.items()} == {
        days_ahead - days_ahead % WINDOW: (1, 0), last_ms - last_ms % WINDOW: (1, 0),
        arrival: (2, 2)}
    # ahead of the clock: the first latency bucket, as any message not late
    assert acc[days_ahead - days_ahead % WINDOW][ref.FIXED_FIELDS] == 1


def test_event_id_matches_the_schemas_header_reader():
    from schemas.header import event_header
    for host, service in ((b"", b""), (b"x" * 200, b"y" * 70)):
        eid = os.urandom(16)
        value = envelope(-12345, host, service, eid, b"tail")
        assert ref.event_id_of(value) == eid == event_header(value)[1]
        assert event_header(value)[0] == -12345


values_strategy = st.lists(
    st.one_of(
        st.builds(envelope, st.integers(-2 ** 40, 2 ** 44), st.binary(max_size=20),
                  st.binary(max_size=20), st.binary(min_size=16, max_size=16),
                  st.binary(max_size=10)),
        st.binary(max_size=40),
        st.builds(lambda v, n: v[:n], st.builds(envelope, st.integers(0, 2 ** 41),
                                                 st.binary(max_size=5), st.binary(max_size=5),
                                                 st.binary(min_size=16, max_size=16)),
                  st.integers(0, 40))),
    max_size=60)
stamp = st.one_of(st.integers(-5, 5), st.integers(NOW - 10 * WINDOW, NOW + 2 * WINDOW),
                  st.integers(NOW, NOW + 10 ** 9), st.integers(-2 ** 63, 2 ** 63 - 1),
                  st.integers(ref.MAX_TIME_MS - 5, ref.MAX_TIME_MS + 5))


@SETTINGS
@given(values_strategy, st.data(), st.booleans())
def test_c_twin_equals_the_reference(values, data, dedup):
    stamps = data.draw(st.lists(stamp, min_size=len(values), max_size=len(values)))
    window = data.draw(st.sampled_from([1, 1000, WINDOW, 3_600_000]))
    acc_ref, acc_c = {}, {}
    sets_ref, sets_c = ({}, {}) if dedup else (None, None)
    # twice into the same accumulators: adding to existing tallies works too
    for _ in range(2):
        ref.tally_values(acc_ref, values, stamps, window, NOW, BOUNDS, sets_ref)
        c_tally.tally_values(acc_c, values, stamps, window, NOW, BOUNDS, sets_c)
    assert acc_c == acc_ref
    assert plain(sets_c) == sets_ref


@SETTINGS
@given(values_strategy, stamp)
def test_c_twin_messages_and_a_shared_timestamp(values, ts):
    messages = [Message("t", 0, i, i + 1, ts, None, v) for i, v in enumerate(values)]
    a, b, c = {}, {}, {}
    ref.tally_messages(a, messages, WINDOW, NOW, BOUNDS)
    c_tally.tally_messages(b, messages, WINDOW, NOW, BOUNDS)
    c_tally.tally_values(c, list(values), ts, WINDOW, NOW, BOUNDS)
    assert a == b == c


def plain(id_sets):
    """The C kernel's IdSets as Python sets (what the reference keeps)."""
    return None if id_sets is None else {k: v.to_set() for k, v in id_sets.items()}


def test_idset_is_a_set_of_64_bit_hashes():
    s = c_tally.IdSet()
    assert len(s) == 0 and 5 not in s
    assert s.add(5) is True and s.add(5) is False and s.add(0) is True and s.add(0) is False
    hashes = [ref.id_hash(os.urandom(16)) for _ in range(5000)]     # past several growths
    assert sum(s.add(h) for h in hashes) == len(set(hashes))
    assert len(s) == len(set(hashes)) + 2 and all(h in s for h in hashes)
    assert s.to_set() == set(hashes) | {0, 5}
    assert s.__sizeof__() < 40 * len(s)
    with pytest.raises(OverflowError):
        s.add(-1)


def test_the_kernel_adds_to_a_python_set_it_is_given():
    values = [envelope(1, b"", b"", os.urandom(16)) for _ in range(3)]
    begin = NOW - NOW % WINDOW
    given = {begin: set()}
    c_tally.tally_values({}, values + values[:1], NOW, WINDOW, NOW, BOUNDS, given)
    assert given[begin] == {ref.id_hash(ref.event_id_of(v)) for v in values}


def test_more_windows_than_the_local_table():
    values = [envelope(1, b"", b"", os.urandom(16)) for _ in range(40)]
    stamps = [WINDOW * i + 3 for i in range(1, 41)]        # 40 windows in one call
    acc_ref, acc_c = {}, {}
    sets_ref, sets_c = {}, {}
    ref.tally_values(acc_ref, values, stamps, WINDOW, WINDOW * 50, BOUNDS, sets_ref)
    c_tally.tally_values(acc_c, values, stamps, WINDOW, WINDOW * 50, BOUNDS, sets_c)
    assert acc_c == acc_ref and len(acc_c) == 40 and plain(sets_c) == sets_ref


def test_c_twin_refuses_bad_arguments():
    with pytest.raises(ValueError, match="differ in length"):
        c_tally.tally_values({}, [b"a"], [1, 2], WINDOW, NOW, BOUNDS)
    with pytest.raises(TypeError, match="timestamps must be ints"):
        c_tally.tally_values({}, [b"a"], [1.5], WINDOW, NOW, BOUNDS)
    with pytest.raises(ValueError, match="window_ms must be positive"):
        c_tally.tally_values({}, [b"a"], 1, 0, NOW, BOUNDS)
    with pytest.raises(ValueError, match="wrong length"):
        c_tally.tally_values({NOW - NOW % WINDOW: [0, 0]}, [b"a"], NOW, WINDOW, NOW, BOUNDS)
    with pytest.raises(ValueError, match="16 bytes"):
        c_tally.id_hash(b"short")


# ------------------------------------------------------------------ from message-set bytes
# (the mirror counts what it forwards without decoding it: tally_message_set)

from broker.protocol.message import compress_message_set, encode_message_set  # noqa: E402

_values = st.one_of(st.binary(max_size=40),
                    st.builds(envelope, st.integers(0, 2 ** 41), st.binary(max_size=6),
                              st.binary(max_size=6), st.binary(min_size=16, max_size=16)))


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)), _values,
                          st.integers(-5, NOW + 10 ** 9)), max_size=40), st.booleans())
@SETTINGS
def test_message_set_tallies_equal_value_tallies_in_both_kernels(items, dedup):
    buf = encode_message_set(items)
    want, want_sets = {}, ({} if dedup else None)
    ref.tally_values(want, [v for _k, v, _t in items], [t for _k, _v, t in items], WINDOW, NOW,
                     BOUNDS, want_sets)
    for kernel in (ref, c_tally):
        acc, sets = {}, ({} if dedup else None)
        assert kernel.tally_message_set(acc, buf, WINDOW, NOW, BOUNDS, sets) == len(items)
        assert acc == want
        if dedup:
            assert {k: set(v.to_set() if hasattr(v, "to_set") else v) for k, v in sets.items()} \
                == {k: set(v) for k, v in want_sets.items()}


@pytest.mark.parametrize("kernel", [ref, c_tally], ids=["reference", "C"])
def test_message_set_tallies_refuse_wrappers_and_bad_framing_and_fold_nothing(kernel):
    good = encode_message_set([(None, b"a", NOW), (None, b"b", NOW)])
    wrapped = compress_message_set(good, 1, NOW)
    for bad in (good[:-1], wrapped, good + b"\x00\x00\x00"):
        acc = {}
        with pytest.raises(ValueError, match="whole, uncompressed messages"):
            kernel.tally_message_set(acc, bad, WINDOW, NOW, BOUNDS)
        assert acc == {}
