"""Issue 9, defect 11: the C accelerator checked against things that are not
itself or zlib, and against the inputs that used to be unsafe.

* its CRC-32 against a table-driven CRC-32 written here from the polynomial
  (0xEDB88320, reflected; init and final XOR 0xFFFFFFFF), on random lengths
  up to 64 KiB, unaligned starts and incremental use (the old test compared
  zlib with zlib);
* ``encode_values``/``single_frames`` with a timestamp whose ``__index__``
  empties the values list: a clean TypeError, not a use-after-free (run in a
  child process, so a crash fails the test instead of killing pytest);
* a base offset that would overflow int64 is refused instead of wrapping.

The whole module FAILS (it does not skip) when the accelerator was expected
(SAMSA_REQUIRE_SPEEDUPS=1, set by ``make test`` when a C compiler and zlib's
headers exist) but is not importable.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import zlib

import pytest

from broker.protocol import message as M

if not M.ACCELERATED:
    if os.environ.get("SAMSA_REQUIRE_SPEEDUPS") == "1":
        raise ImportError("the C accelerator was expected (SAMSA_REQUIRE_SPEEDUPS=1) but "
                          "broker.protocol._speedups does not import: see `make setup`")
    pytest.skip("C accelerator not built", allow_module_level=True)

from broker.protocol import _speedups  # noqa: E402


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()


def reference_crc32(data: bytes, crc: int = 0) -> int:
    """CRC-32/ISO-HDLC, one byte at a time: slow, obviously right."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_the_reference_matches_the_published_check_value():
    assert reference_crc32(b"123456789") == 0xCBF43926


def test_the_accelerator_crc_equals_an_independent_one():
    rnd = random.Random(11)
    data = os.urandom((64 << 10) + 64)
    lengths = [0, 1, 2, 3, 7, 8, 15, 16, 31, 63, 64, 65, 255, 4096, 65536] + \
              [rnd.randrange(0, 64 << 10) for _ in range(12)]
    for length in lengths:
        start = rnd.randrange(0, 64)
        chunk = memoryview(data)[start:start + length]      # unaligned
        expected = reference_crc32(bytes(chunk))
        assert _speedups.crc32(chunk) == expected, (length, start)
        assert zlib.crc32(chunk) == expected


def test_incremental_use_equals_one_pass():
    rnd = random.Random(12)
    data = os.urandom(20_000)
    whole = reference_crc32(data)
    for _ in range(20):
        cut = sorted(rnd.sample(range(len(data)), 3))
        crc = 0
        for a, b in zip([0] + cut, cut + [len(data)]):
            crc = _speedups.crc32(data[a:b], crc)
        assert crc == whole


MUTATING_INDEX = textwrap.dedent("""
    import sys
    from broker.protocol import _speedups
    values = [b"x" * 100 for _ in range(1000)]

    class Sneaky:
        def __index__(self):
            values.clear()            # frees the bytes the C loop points at
            return 5

    for call in (lambda: _speedups.encode_values(values, [1] * 999 + [Sneaky()]),
                 lambda: _speedups.single_frames(b"mid", 1, values, [Sneaky()] + [1] * 999)):
        values[:] = [b"x" * 100 for _ in range(1000)]
        try:
            call()
        except TypeError:
            continue
        sys.exit("accepted a timestamp that is not an int")
    print("ok")
""")


def test_a_timestamp_whose_index_mutates_the_list_is_refused():
    done = subprocess.run([sys.executable, "-c", MUTATING_INDEX], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"


def test_int_subclasses_are_still_timestamps():
    class Stamp(int):
        pass

    assert _speedups.encode_values([b"v"], [Stamp(5)]) == M.py_encode_values([b"v"], 5)


def test_a_base_offset_that_would_overflow_is_refused():
    data = M.encode_message(b"v")
    with pytest.raises(ValueError, match="base_offset"):
        _speedups.decode(data, (1 << 63) - 2, True, "t", 0, M.Message)
    messages, _pos, _status = _speedups.decode(data, (1 << 63) - 1 - len(data), True, "t", 0,
                                               M.Message)
    assert messages[0].next_offset == (1 << 63) - 1


def test_correlation_ids_wrap_without_overflow():
    frames = _speedups.single_frames(b"", (1 << 63) - 1, [b"a", b"b"], [1, 1])
    assert frames                        # ids wrap to 31 bits, no undefined behaviour
