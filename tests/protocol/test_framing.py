"""FrameDecoder: frames come out whole and in order however the bytes are
split, and an oversized frame is refused from its size alone."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.protocol.errors import FrameTooLargeError, ProtocolError
from broker.protocol.framing import SIZE_BYTES, FrameDecoder, encode_frame

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00\x00\x00\x05tail"]
STREAM = b"".join(encode_frame(p) for p in PAYLOADS)


def test_split_at_every_byte_boundary():
    for cut in range(len(STREAM) + 1):
        d = FrameDecoder(1024)
        assert d.feed(STREAM[:cut]) + d.feed(STREAM[cut:]) == PAYLOADS   # memoryview == bytes
        assert d.buffered == 0


def test_split_at_every_pair_of_boundaries():
    stream = b"".join(encode_frame(p) for p in (b"", b"ab", b"cde"))
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            d = FrameDecoder(16)
            got = d.feed(stream[:i]) + d.feed(stream[i:j]) + d.feed(stream[j:])
            assert got == [b"", b"ab", b"cde"]


def test_one_byte_at_a_time():
    d = FrameDecoder(1024)
    got = []
    for i in range(len(STREAM)):
        got += d.feed(STREAM[i:i + 1])
        assert d.buffered <= SIZE_BYTES + 1024
    assert got == PAYLOADS and d.buffered == 0


@SETTINGS
@given(st.lists(st.binary(max_size=100), max_size=10), st.data())
def test_any_chunking_gives_the_same_frames(payloads, data):
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    kind = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
    d = FrameDecoder(100)
    got = []
    for a, b in zip([0] + cuts, cuts + [len(stream)]):
        got += d.feed(kind(stream[a:b]))
        assert d.buffered < SIZE_BYTES + 100     # at most one partial frame is held
    assert [bytes(f) for f in got] == payloads


def test_frame_of_exactly_the_limit_is_accepted():
    d = FrameDecoder(5)
    assert d.feed(encode_frame(b"12345")) == [b"12345"]


def test_oversized_frame_refused_as_soon_as_its_size_is_seen():
    d = FrameDecoder(5)
    with pytest.raises(FrameTooLargeError, match="6 bytes"):
        d.feed(b"\x00\x00\x00\x06")              # the size only: no payload yet
    d = FrameDecoder(5)
    assert d.feed(b"\x00\x00") == []             # half a size: nothing known yet
    with pytest.raises(FrameTooLargeError):
        d.feed(b"\x00\x06")
    d = FrameDecoder(5)                           # behind a good frame, in one read:
    assert [bytes(f) for f in d.feed(encode_frame(b"ok") + b"\x7f\xff\xff\xff")] == [b"ok"]
    assert isinstance(d.failure, FrameTooLargeError)   # the good frame out, then refused


def test_refusal_does_not_wait_for_or_buffer_the_payload():
    d = FrameDecoder(1 << 10)
    with pytest.raises(FrameTooLargeError):
        d.feed(b"\x40\x00\x00\x00" + b"x" * 100)   # announces 1 GiB
    assert d.buffered <= SIZE_BYTES + 100


def test_negative_size_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="negative"):
        FrameDecoder(10).feed(b"\xff\xff\xff\xff")


def test_limit_must_be_positive():
    for bad in (0, -1):
        with pytest.raises(ValueError):
            FrameDecoder(bad)


def test_empty_feed():
    d = FrameDecoder(10)
    assert d.feed(b"") == [] and d.buffered == 0
    d.feed(b"\x00")
    assert d.feed(b"") == [] and d.buffered == 1


def test_good_frames_before_an_oversized_one_are_handed_out():
    from broker.protocol.errors import FrameTooLargeError
    decoder = FrameDecoder(100)
    data = encode_frame(b"one") + encode_frame(b"two") + (10_000).to_bytes(4, "big") + b"x"
    assert [bytes(f) for f in decoder.feed(data)] == [b"one", b"two"]
    assert isinstance(decoder.failure, FrameTooLargeError)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"more")


# ---------------------------------------------------------------- pull mode

class FakeSocket:
    """recv_into from a byte stream, at most the sizes given per call."""

    def __init__(self, stream: bytes, sizes) -> None:
        self.stream, self.pos, self.sizes = stream, 0, sizes

    def recv_into(self, buffer: memoryview) -> int:
        n = min(len(buffer), len(self.stream) - self.pos, next(self.sizes))
        buffer[:n] = self.stream[self.pos:self.pos + n]
        self.pos += n
        return n


def pull(decoder: FrameDecoder, sock: FakeSocket, count: int) -> list:
    """A blocking reader as the client is written: next_frame, else receive."""
    frames = []
    while len(frames) < count:
        frame = decoder.next_frame()
        while frame is None:
            n = sock.recv_into(decoder.receive_buffer())
            assert n, "the stream ended inside a frame"
            decoder.received(n)
            frame = decoder.next_frame()
        frames.append(frame)
    return frames


BIG = FrameDecoder.BIG_FRAME_BYTES


@SETTINGS
@given(st.lists(st.one_of(st.binary(max_size=100),
                          st.integers(BIG - 2, BIG * 3).map(lambda n: bytes([n % 251]) * n)),
                max_size=8),
       st.lists(st.integers(1, 3 * BIG), min_size=1))
def test_pull_mode_gives_the_frames_whatever_the_reads(payloads, sizes):
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder(4 * BIG)
    sock = FakeSocket(stream, iter(sizes * (len(stream) + 1)))
    assert pull(decoder, sock, len(payloads)) == payloads
    assert decoder.next_frame() is None and decoder.buffered == 0
    assert sock.pos == len(stream)


def test_pull_mode_receives_a_big_frame_in_place():
    payload = bytes(range(256)) * 1024                  # 256 KiB
    stream = encode_frame(payload) + encode_frame(b"next")
    decoder = FrameDecoder(1 << 20)
    sock = FakeSocket(stream, iter([100] + [1 << 30] * 10))
    first = pull(decoder, sock, 1)[0]
    assert type(first) is bytearray and first == payload
    # the big frame's reads were cut at its end: the next frame is still unread
    assert sock.pos == len(stream) - len(encode_frame(b"next"))
    assert pull(decoder, sock, 1) == [b"next"]


def test_pull_mode_refuses_an_oversized_frame_from_its_size():
    decoder = FrameDecoder(1000)
    sock = FakeSocket(encode_frame(b"x" * 1001), iter([8] * 10))
    decoder.received(sock.recv_into(decoder.receive_buffer()))
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    assert decoder.buffered == 8


def test_pull_mode_refuses_a_negative_size():
    decoder = FrameDecoder(1000)
    sock = FakeSocket(b"\xff\xff\xff\xfe", iter([4]))
    decoder.received(sock.recv_into(decoder.receive_buffer()))
    with pytest.raises(ProtocolError, match="negative"):
        decoder.next_frame()
