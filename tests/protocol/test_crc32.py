"""The accelerator's own CRC-32 (broker/protocol/_speedups.c): both of its
paths (slicing-by-8 tables, PCLMULQDQ folding) equal zlib.crc32 on every
length 0..64 KiB, unaligned starts, running values and incremental use; its
folding constants are the ones scripts/crc32_constants.py derives."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol import message

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if message._speedups is None:
    pytest.skip("the C accelerator is not built (make setup builds it; "
                "SAMSA_REQUIRE_SPEEDUPS=1 makes this a failure in conftest)",
                allow_module_level=True)
speedups = message._speedups

TABLES, CLMUL = 1, 2
PATHS = [0, TABLES] + ([CLMUL] if speedups.has_clmul() else [])


def test_this_machine_uses_the_carry_less_path():
    # the machines this project runs on are x86-64 with PCLMULQDQ: if the
    # detection broke, the fast path would silently never run
    import platform
    if platform.machine() in ("x86_64", "AMD64"):
        with open("/proc/cpuinfo") as f:
            has = " pclmulqdq" in f.read()
        assert speedups.has_clmul() is has


@pytest.mark.parametrize("path", PATHS)
def test_every_short_length_and_running_value(path):
    rng = random.Random(path)
    data = rng.randbytes(600)
    for n in range(0, 600):
        start = rng.getrandbits(32)
        assert speedups.crc32(data[:n], start, path) == zlib.crc32(data[:n], start), n


@pytest.mark.parametrize("path", PATHS)
def test_random_lengths_up_to_64k_at_unaligned_starts(path):
    rng = random.Random(100 + path)
    block = rng.randbytes(65536 + 64)
    view = memoryview(block)
    for _ in range(300):
        offset = rng.randrange(0, 64)
        n = rng.randrange(0, 65537)
        chunk = view[offset:offset + n]
        assert speedups.crc32(chunk, 0, path) == zlib.crc32(chunk), (offset, n)


@pytest.mark.parametrize("path", PATHS)
def test_incremental_equals_whole(path):
    rng = random.Random(7 + path)
    data = rng.randbytes(20_000)
    for _ in range(50):
        cuts = sorted(rng.randrange(0, len(data) + 1) for _ in range(rng.randrange(1, 6)))
        crc, last = 0, 0
        for cut in cuts + [len(data)]:
            crc = speedups.crc32(data[last:cut], crc, path)
            last = cut
        assert crc == zlib.crc32(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.integers(0, 2**32 - 1))
def test_paths_agree_on_any_input(data, start):
    want = zlib.crc32(data, start)
    for path in PATHS:
        assert speedups.crc32(data, start, path) == want


def test_edge_patterns():
    for n in (63, 64, 65, 127, 128, 129, 191, 192, 193, 4096):
        for fill in (b"\x00", b"\xff", b"\x80", b"\x01"):
            data = fill * n
            for path in PATHS:
                for start in (0, 0xFFFFFFFF, 0x12345678):
                    assert speedups.crc32(data, start, path) == zlib.crc32(data, start)


def test_a_bad_path_is_refused():
    with pytest.raises(ValueError):
        speedups.crc32(b"x", 0, 3)
    if not speedups.has_clmul():
        with pytest.raises(ValueError):
            speedups.crc32(b"x" * 100, 0, CLMUL)


def test_the_c_constants_are_the_ones_the_script_derives():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "crc32_constants.py"),
                          "--check"], capture_output=True, text=True, check=True).stdout
    derived = dict(re.findall(r"#define (CRC_FOLD\w+) (UINT64_C\(0x[0-9a-f]+\))", out))
    assert len(derived) == 4 and "equals zlib.crc32" in out
    with open(os.path.join(ROOT, "broker", "protocol", "_speedups.c")) as f:
        source = f.read()
    in_c = dict(re.findall(r"#define (CRC_FOLD\w+) (UINT64_C\(0x[0-9a-f]+\))", source))
    assert in_c == derived


def test_the_codec_checks_crcs_with_it():
    """Every length the C walk and decoder see goes through the new CRC: a
    set of messages of 0..300-byte values is accepted whole, and one flipped
    bit in any value is caught."""
    rng = random.Random(3)
    values = [rng.randbytes(n) for n in range(0, 301, 7)]
    buf = message.encode_values(values, 1_700_000_000_000)
    assert buf == message.encode_message_set((None, v, 1_700_000_000_000) for v in values)
    status, pos, count, *_ = speedups.walk(buf, 1 << 20, True)
    assert (status, pos, count) == (0, len(buf), len(values))
    decoded, used = message.decode_message_set(buf, 0)
    assert [m.value for m in decoded] == values and used == len(buf)
    for _ in range(50):
        broken = bytearray(buf)
        k = rng.randrange(len(values))
        start = sum(22 + len(v) for v in values[:k]) + 22
        if not values[k]:
            continue
        broken[start + rng.randrange(len(values[k]))] ^= 1 << rng.randrange(8)
        status, pos, *_ = speedups.walk(bytes(broken), 1 << 20, True)
        assert status == 4 and pos == start - 22        # WALK_BAD_CRC, at that message
