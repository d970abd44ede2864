"""Fast paths of the C accelerator: its CRC-32 (zlib's crc32_z today) must be
zlib's CRC-32 for every length, alignment and starting value (and an
independent CRC-32: tests/protocol/test_speedups_safety.py); the decoder's shared int objects and untracked
messages must not show; the producer's batch-1 frames must be the bytes the
Python encoder gives."""
import os
import random
import zlib

import pytest

from broker.protocol import api, message as M
from broker.protocol.framing import FrameDecoder

pytestmark = pytest.mark.skipif(not M.ACCELERATED, reason="C accelerator not built")


def test_crc32_equals_zlib_for_every_length_and_alignment():
    from broker.protocol import _speedups
    rnd = random.Random(7)
    data = os.urandom(4096 + 64)
    for length in range(0, 1100):
        offset = rnd.randrange(0, 64)
        chunk = data[offset:offset + length]
        start = rnd.getrandbits(32) if length % 2 else 0
        assert _speedups.crc32(chunk, start) == zlib.crc32(chunk, start), (length, offset)
    for _ in range(50):
        big = os.urandom(rnd.randrange(1, 1 << 20))
        assert _speedups.crc32(memoryview(big)[3:]) == zlib.crc32(big[3:])
    assert isinstance(_speedups.has_clmul(), bool)


def test_crc_checks_catch_every_flipped_bit_of_a_long_message():
    value = os.urandom(700)
    raw = M.encode_values([value], 123)
    for bit in range(8 * 8, 8 * len(raw), 97):       # past the length and crc fields
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(M.CorruptMessageError):
            M.decode_message_set(bytes(bad), 0)
        assert M.scan_valid_prefix(bytes(bad))[0] == 0


def test_decoded_offsets_and_timestamps_are_right_when_ints_are_shared():
    values = [os.urandom(200) for _ in range(50)]
    stamps = [1000] * 20 + [1001] * 5 + [1000] * 25
    data = M.encode_values(values, stamps)
    fast, _ = M.decode_message_set(data, 2**40, True, "t", 0)
    slow, _ = M.py_decode_message_set(data, 2**40, True, "t", 0)
    assert fast == slow
    for a, b in zip(fast, fast[1:]):
        assert a.next_offset == b.offset
    assert [m.timestamp for m in fast] == stamps


def test_decoded_messages_are_left_out_of_the_cycle_collector_only_when_safe():
    import gc
    data = M.encode_values([b"a" * 100, b"b" * 100], 5)
    plain, _ = M.decode_message_set(data, 0, True, "t", 3)
    assert not any(gc.is_tracked(m) for m in plain)     # str, ints, bytes: no cycle possible
    label = ["any", "object"]                           # could refer back to a message
    labelled, _ = M.decode_message_set(data, 0, True, "t", label)
    assert all(gc.is_tracked(m) for m in labelled)
    assert labelled[0].partition is label


def test_single_frames_are_the_python_encoders_bytes(monkeypatch):
    enc = api.ProduceFrameEncoder("samsa-producer", 0, 30_000)
    rnd = random.Random(3)
    values = [os.urandom(rnd.choice([0, 1, 15, 16, 63, 64, 200, 5000])) for _ in range(40)]
    stamps = [rnd.randrange(0, 2**41) for _ in values]
    first = 0x7FFFFFF0                                  # correlation ids wrap at 2**31
    expected = b"".join(enc.frame((first + i) & 0x7FFFFFFF, "events", -1,
                                  M.encode_values([v], t))
                        for i, (v, t) in enumerate(zip(values, stamps)))
    assert enc.single_frames(first, "events", -1, values, stamps) == expected
    monkeypatch.setattr(api, "_single_frames", None)    # the pure-Python fallback
    assert enc.single_frames(first, "events", -1, values, stamps) == expected
    frames = FrameDecoder(1 << 20).feed(expected)
    assert len(frames) == len(values)
    for i, frame in enumerate(frames):                  # each a valid produce request
        header, request = api.decode_request(frame)
        assert header.correlation_id == (first + i) & 0x7FFFFFFF
        (topic, partition, message_set), = request.entries
        (m,), _ = M.decode_message_set(message_set, 0)
        assert (topic, partition, m.value, m.timestamp) == ("events", -1, values[i], stamps[i])


def test_single_frames_rejects_bad_input():
    from broker.protocol import _speedups
    with pytest.raises(TypeError):
        _speedups.single_frames(b"", 0, ["not bytes"], [0])
    with pytest.raises(ValueError):
        _speedups.single_frames(b"", 0, [b"a", b"b"], [0])
