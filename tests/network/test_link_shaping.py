"""The delayer's arithmetic (infra/local/network/shaping.py), under
property tests: the invariants its docstring states."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.local.network.shaping import LinkShape, LinkShaper

arrivals = st.lists(st.tuples(st.floats(0, 0.05), st.integers(40, 65_000)), min_size=1,
                    max_size=300)
shapes = st.builds(LinkShape, rtt_ms=st.floats(0, 400), jitter_ms=st.floats(0, 50),
                   loss=st.sampled_from([0, 0.001, 0.05, 0.5]),
                   rate_mbit=st.sampled_from([0, 1, 100, 10_000]),
                   queue_bytes=st.integers(65_000, 10_000_000))


def run(shape: LinkShape, gaps_and_sizes, seed: int = 1):
    shaper = LinkShaper(shape, random.Random(seed))
    now, out = 0.0, []
    for gap, size in gaps_and_sizes:
        now += gap
        out.append((now, size, shaper.schedule(size, now)))
    return shaper, out


@settings(max_examples=200, deadline=None)
@given(shapes, arrivals)
def test_departures_never_precede_arrivals_nor_each_other(shape, gaps_and_sizes):
    shaper, out = run(shape, gaps_and_sizes)
    last = 0.0
    for arrived, _size, departs in out:
        if departs is None:
            continue
        assert departs >= arrived + max(0.0, shape.rtt_ms / 2000 - shape.jitter_ms / 1000) - 1e-9
        assert departs >= last
        last = departs
    c = shaper.counters
    assert c.packets == len(out) == c.sent + c.cut + c.lost + c.overflowed


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 10, 100]), arrivals)
def test_a_rate_limited_link_never_sends_faster_than_its_rate(rate_mbit, gaps_and_sizes):
    shape = LinkShape(rate_mbit=rate_mbit, queue_bytes=10_000_000)
    _shaper, out = run(shape, gaps_and_sizes)
    sent = [(d, size) for _a, size, d in out if d is not None]
    bytes_per_s = rate_mbit * 1e6 / 8
    first_arrival = out[0][0]
    for i in range(len(sent)):
        # everything that left by sent[i] was serialised after the first arrival
        total = sum(size for _d, size in sent[:i + 1])
        assert sent[i][0] - first_arrival >= total / bytes_per_s - 1e-9


def test_delay_is_half_the_round_trip_each_way():
    shaper = LinkShaper(LinkShape(rtt_ms=40))
    assert shaper.schedule(1500, 10.0) == pytest.approx(10.02)


def test_a_cut_link_drops_everything_and_counts_it():
    shaper = LinkShaper(LinkShape(cut=True))
    assert all(shaper.schedule(100, t) is None for t in range(10))
    assert shaper.counters.cut == 10 and shaper.counters.sent == 0


def test_loss_drops_about_its_fraction():
    shaper = LinkShaper(LinkShape(loss=0.01), random.Random(7))
    for i in range(100_000):
        shaper.schedule(100, i * 1e-5)
    assert 900 <= shaper.counters.lost <= 1100


def test_a_full_queue_tail_drops():
    # 1 Mbit/s = 125,000 B/s; a 10,000-byte queue holds ~6 packets of 1500
    shaper = LinkShaper(LinkShape(rate_mbit=1, queue_bytes=10_000))
    results = [shaper.schedule(1500, 0.0) for _ in range(20)]
    assert results[:6] == sorted(results[:6]) and None not in results[:6]
    assert results.count(None) == shaper.counters.overflowed == 14


def test_a_reshape_applies_to_later_packets_only():
    shaper = LinkShaper(LinkShape(rtt_ms=200))
    first = shaper.schedule(100, 0.0)
    shaper.reshape(LinkShape())
    second = shaper.schedule(100, 0.001)
    assert first == pytest.approx(0.1)
    assert second == first            # never overtakes the packet before it


@pytest.mark.parametrize("bad", [dict(rtt_ms=-1), dict(loss=1.5), dict(rate_mbit=-2),
                                 dict(queue_bytes=10)])
def test_bad_shapes_are_refused_with_the_reason(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        LinkShape(**bad)


def test_a_super_packet_is_lost_when_any_of_its_segments_would_be():
    shaper = LinkShaper(LinkShape(loss=0.01), random.Random(5))
    for i in range(20_000):
        shaper.schedule(64_000, i * 1e-4, segments=44)
    expected = 20_000 * (1 - 0.99 ** 44)          # ~7,130
    assert abs(shaper.counters.lost - expected) < 300, shaper.counters.lost


def test_the_segments_of_a_tso_super_packet_come_from_its_virtio_header():
    import struct
    from infra.local.network.delayer import segments_of
    ip = bytes([0x45]) + bytes(19)                  # IPv4, 20-byte header
    tcp = bytes(12) + bytes([0x80]) + bytes(19)     # data offset 8 words: 32 bytes
    payload = bytes(10_000)
    vnet = struct.pack("<BBHHHH", 0, 1, 52, 1448, 0, 0)    # gso_type TCPv4, gso_size 1448
    assert segments_of(vnet + ip + tcp + payload) == 7      # ceil(10000 / 1448)
    plain = struct.pack("<BBHHHH", 0, 0, 0, 0, 0, 0)
    assert segments_of(plain + ip + tcp + payload) == 1
