"""Derive the folding constants of the C accelerator's CRC-32 (PCLMULQDQ)
from the polynomial, and check the folding scheme against zlib in pure
Python before any C is written.

    python scripts/crc32_constants.py            # print the C constants
    python scripts/crc32_constants.py --check    # also simulate the fold on random data

The math (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
PCLMULQDQ Instruction", Intel, 2009), in the bit order zlib uses:

* The CRC is M(x) * x^32 mod P(x), P = x^32 + x^26 + ... + 1 (0x104C11DB7),
  where M's first bit (the least significant bit of the first byte: the
  CRC is "reflected") is its highest power. zlib's running value enters by
  XOR into the first 32 bits of the data, and leaves inverted.
* A 16-byte block loaded little-endian into a 128-bit register holds, in bit
  j, the coefficient of x^(127-j) of a polynomial A scaled by x^t, t the
  number of message bits after the block. Its low 64-bit half holds the
  high half H of A (A = H x^64 + L), its high 64-bit half holds L.
* Moving A forward by D bits (to the block D bits later) means multiplying
  by x^D: H x^(64+D) + L x^D, and modulo P each power may be replaced by its
  remainder K (degree < 32): the product has degree < 96 and is XORed into
  the block D bits ahead. Nothing is reduced until the very end.
* A carry-less multiply of two 64-bit halves whose bit j means x^(63-j)
  gives a 128-bit product whose bit m means x^(126-m): one power short of
  the block layout (x^(127-m)). So the constant for a power x^E is stored
  as x^(E-1) mod P, in the same reflected 64-bit layout (bit j = x^(63-j);
  with degree < 32 it sits in the upper 32 bits).
* Constants: four 16-byte lanes fold 64 bytes ahead (D = 512):
  x^(512+64-1) and x^(512-1); one lane folds 16 bytes ahead (D = 128):
  x^(128+64-1) and x^(128-1).
* The last 128-bit value is reduced by running the byte-table CRC over its
  16 bytes from a zero register (that computes exactly A * x^32 mod P), then
  over the bytes left (fewer than 16).

The C file holds the printed literals; tests/protocol/test_crc32.py runs
this script and checks the C file still agrees with it.
"""
from __future__ import annotations

import argparse
import random
import sys
import zlib

POLY = 0x104C11DB7            # x^32 + x^26 + x^23 + ... + x + 1, bit i = x^i
FOLD_4 = 512                  # four 16-byte lanes
FOLD_1 = 128                  # one lane


def x_pow_mod(e: int, poly: int = POLY) -> int:
    """x^e mod poly over GF(2), as an int whose bit i is the coefficient of x^i."""
    r = 1
    for _ in range(e):
        r <<= 1
        if r >> 32 & 1:
            r ^= poly
    return r


def reflect(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2)


def reflected_constant(power: int) -> int:
    """The 64-bit constant standing for x^power in a fold (see the module
    docstring: stored as x^(power-1) mod P, bit j = x^(63-j))."""
    return reflect(x_pow_mod(power - 1), 64)


def constants() -> dict[str, int]:
    return {
        "FOLD4_LOW": reflected_constant(FOLD_4 + 64),   # multiplies the low half (H)
        "FOLD4_HIGH": reflected_constant(FOLD_4),       # multiplies the high half (L)
        "FOLD1_LOW": reflected_constant(FOLD_1 + 64),
        "FOLD1_HIGH": reflected_constant(FOLD_1),
    }


# ------------------------------------------------------------ a simulation of the C code

def clmul(a: int, b: int) -> int:
    r = 0
    while b:
        if b & 1:
            r ^= a
        a <<= 1
        b >>= 1
    return r


def _fold(block: int, low_k: int, high_k: int) -> int:
    lo, hi = block & (1 << 64) - 1, block >> 64
    return clmul(lo, low_k) ^ clmul(hi, high_k)


def _table() -> list[int]:
    table = []
    rpoly = reflect(POLY & 0xFFFFFFFF, 32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ rpoly if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _table()


def _bytewise(register: int, data: bytes) -> int:
    for b in data:
        register = TABLE[(register ^ b) & 0xFF] ^ (register >> 8)
    return register


def crc32_folded(data: bytes, crc: int = 0) -> int:
    """zlib.crc32 computed as the C code does (for buffers of 64 bytes and more)."""
    k = constants()
    register = crc ^ 0xFFFFFFFF
    if len(data) < 64:
        return _bytewise(register, data) ^ 0xFFFFFFFF
    lanes = [int.from_bytes(data[16 * i:16 * i + 16], "little") for i in range(4)]
    lanes[0] ^= register
    pos = 64
    while len(data) - pos >= 64:
        lanes = [_fold(lanes[i], k["FOLD4_LOW"], k["FOLD4_HIGH"])
                 ^ int.from_bytes(data[pos + 16 * i:pos + 16 * i + 16], "little")
                 for i in range(4)]
        pos += 64
    x = lanes[0]
    for lane in lanes[1:]:
        x = _fold(x, k["FOLD1_LOW"], k["FOLD1_HIGH"]) ^ lane
    while len(data) - pos >= 16:
        x = _fold(x, k["FOLD1_LOW"], k["FOLD1_HIGH"]) ^ int.from_bytes(data[pos:pos + 16],
                                                                       "little")
        pos += 16
    register = _bytewise(0, x.to_bytes(16, "little"))
    return _bytewise(register, data[pos:]) ^ 0xFFFFFFFF


def check(rounds: int = 300, seed: int = 1) -> None:
    rng = random.Random(seed)
    for n in list(range(60, 200)) + [rng.randrange(64, 5000) for _ in range(rounds)]:
        data = rng.randbytes(n)
        start = rng.getrandbits(32)
        want = zlib.crc32(data, start)
        got = crc32_folded(data, start)
        if got != want:
            sys.exit(f"MISMATCH at {n} bytes: {got:#010x} != {want:#010x}")
    print(f"the folding scheme equals zlib.crc32 on {rounds + 140} random buffers")


def c_literals() -> str:
    return "\n".join(f"#define CRC_{name} UINT64_C(0x{value:016x})"
                     for name, value in constants().items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="simulate the fold in Python against zlib.crc32")
    args = p.parse_args(argv)
    print(c_literals())
    if args.check:
        check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
