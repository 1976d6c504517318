"""rng-bit-generator: XLA's counter-based bit generators, bit for bit.

Follows xla/hlo/transforms/expanders/rng_bit_generator_expander.cc and
xla/hlo/builder/lib/prng.cc. The state is u64[N]: state[0] is the key; the rest is the
counter. The result is the tuple (new_state, bits).

* rng_three_fry: Threefry-2x32 (20 rounds). 32-bit outputs split the shape in halves along the
  first even dimension (else the largest) and interleave the two output words along it; 64-bit
  outputs join the two words; narrower outputs truncate 32-bit ones. The counter advances by
  the number of 2x32 blocks generated.
* rng_philox: Philox-4x32 (10 rounds) on a 128-bit counter (state[1:3], or for u64[2] the
  reversed state, i.e. low word state[1], high word state[0]); the four output words of each
  block are laid out round-robin.
* rng_default: XLA's CPU (and GPU) compilers expand it as Philox.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hlofuse.backends.interpreter.core import Interpreter, handles, unsupported
from hlofuse.ir.instruction import Instruction
from hlofuse.ir.opcodes import Opcode
from hlofuse.ir.shape import ArrayShape, TupleShape

U32 = np.uint32
U64 = np.uint64
_MASK32 = U64(0xFFFFFFFF)
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def _rotl(v: np.ndarray, d: int) -> np.ndarray:
    return (v << U32(d)) | (v >> U32(32 - d))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, k0: int, k1: int) -> tuple[np.ndarray, ...]:
    """Threefry-2x32 with 20 rounds, as prng.cc's ThreeFry2x32."""
    ks = [U32(k0), U32(k1), U32(0x1BD11BDA ^ k0 ^ k1)]
    x = [x0.astype(U32) + ks[0], x1.astype(U32) + ks[1]]

    def rounds(x: list[np.ndarray], rots: tuple[int, ...]) -> list[np.ndarray]:
        for r in rots:
            x[0] = x[0] + x[1]
            x[1] = _rotl(x[1], r)
            x[1] = x[0] ^ x[1]
        return x

    first, second = _ROTATIONS[:4], _ROTATIONS[4:]
    for i, rots in enumerate((first, second, first, second, first), start=1):
        x = rounds(x, rots)
        x[0] = x[0] + ks[i % 3]
        x[1] = x[1] + ks[(i + 1) % 3] + U32(i)
    return x[0], x[1]


def _split_u64(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (v & _MASK32).astype(U32), (v >> U64(32)).astype(U32)


def _join_u32(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(U64) | (hi.astype(U64) << U64(32))


def _threefry_block(key: int, counter: int, dims: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    n = math.prod(dims)
    inputs = (U64(counter) + np.arange(n, dtype=U64)).reshape(dims)
    x0, x1 = _split_u64(inputs)
    return threefry2x32(x0, x1, int(key) & 0xFFFFFFFF, int(key) >> 32)


def _threefry32(key: int, counter: int, dims: tuple[int, ...]) -> tuple[np.ndarray, int]:
    if not dims:
        o0, _ = _threefry_block(key, counter, (1,))
        return o0.reshape(()), counter + 1
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = list(dims)
    half[split] = (dims[split] + 1) // 2
    half.insert(split + 1, 1)
    o0, o1 = _threefry_block(key, counter, tuple(half))
    joined = np.concatenate([o0, o1], axis=split + 1)
    full = list(dims)
    full[split] = half[split] * 2
    joined = joined.reshape(full)
    joined = joined[tuple(slice(0, d) for d in dims)]
    return np.asarray(joined, order="C"), counter + math.prod(half)


def threefry_bits(state: np.ndarray, dims: tuple[int, ...], bits: int) -> tuple[np.ndarray, ...]:
    key, counter = int(state[0]), int(state[1])
    if bits == 64:
        o0, o1 = _threefry_block(key, counter, dims)
        value, new_counter = _join_u32(o0, o1), counter + math.prod(dims)
    else:
        value, new_counter = _threefry32(key, counter, dims)
        if bits < 32:
            value = value.astype(np.dtype(f"u{bits // 8}"))
    new_state = np.array([key, new_counter % 2**64], dtype=U64)
    return new_state, value


_PHILOX_W = (U32(0x9E3779B9), U32(0xBB67AE85))
_PHILOX_M = (U64(0xD2511F53), U64(0xCD9E8D57))


def philox4x32(x: list[np.ndarray], k0: int, k1: int) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds, as prng.cc's Philox4x32."""
    key = [U32(k0), U32(k1)]
    for _ in range(10):
        p0 = x[0].astype(U64) * _PHILOX_M[0]
        p1 = x[2].astype(U64) * _PHILOX_M[1]
        hi0, lo0 = (p0 >> U64(32)).astype(U32), (p0 & _MASK32).astype(U32)
        hi1, lo1 = (p1 >> U64(32)).astype(U32), (p1 & _MASK32).astype(U32)
        x = [hi1 ^ x[1] ^ key[0], lo1, hi0 ^ x[3] ^ key[1], lo0]
        key = [key[0] + _PHILOX_W[0], key[1] + _PHILOX_W[1]]
    return x


def _philox_blocks(key: int, lo: int, hi: int, n: int) -> tuple[list[np.ndarray], int, int]:
    """n blocks of 4 words from the 128-bit counter (lo, hi); returns the new counter."""
    c_lo = U64(lo) + np.arange(n, dtype=U64)  # wraps modulo 2**64
    c_hi = np.where(c_lo < U64(lo), U64((hi + 1) % 2**64), U64(hi)).astype(U64)
    x = [*_split_u64(c_lo), *_split_u64(c_hi)]
    out = philox4x32(x, key & 0xFFFFFFFF, key >> 32)
    total = ((hi << 64 | lo) + n) % 2**128
    return out, total & (2**64 - 1), total >> 64


def philox_bits(state: np.ndarray, dims: tuple[int, ...], bits: int) -> tuple[np.ndarray, ...]:
    key = int(state[0])
    if len(state) >= 3:
        lo, hi = int(state[1]), int(state[2])
    else:
        lo, hi = int(state[1]), int(state[0])
    num = math.prod(dims)
    if bits == 64:
        blocks, new_lo, new_hi = _philox_blocks(key, lo, hi, (2 * num + 3) // 4)
        w = [_join_u32(blocks[0], blocks[1]), _join_u32(blocks[2], blocks[3])]
    else:
        blocks, new_lo, new_hi = _philox_blocks(key, lo, hi, (num + 3) // 4)
        w = blocks
    value = np.stack(w, axis=1).reshape(-1)[:num].reshape(dims)
    if bits < 32:
        value = value.astype(np.dtype(f"u{bits // 8}"))
    if len(state) >= 3:
        new_state = np.array([key, new_lo, new_hi, *state[3:]], dtype=U64)
    else:
        new_state = np.array([key, new_lo], dtype=U64)
    return new_state, np.asarray(value, order="C")


_ALGORITHMS = {
    "rng_three_fry": threefry_bits,
    "rng_philox": philox_bits,
    "rng_default": philox_bits,
}


@handles(Opcode.RNG_BIT_GENERATOR)
def _rng_bit_generator(interp: Interpreter, instr: Instruction, ops: list[Any]) -> Any:
    shape = instr.shape
    if not (isinstance(shape, TupleShape) and len(shape.elements) == 2):
        raise unsupported(instr, "rng-bit-generator returns a (state, bits) tuple")
    out = shape.elements[1]
    assert isinstance(out, ArrayShape)
    algorithm = str(instr.attrs.get("algorithm", "rng_default"))
    gen = _ALGORITHMS.get(algorithm)
    if gen is None:
        raise unsupported(instr, f"unknown algorithm {algorithm!r}")
    state = np.asarray(ops[0])
    if state.dtype != np.uint64 or state.ndim != 1 or len(state) < 2:
        raise unsupported(instr, f"the state must be u64[N] with N >= 2, got {state.dtype}")
    if algorithm == "rng_three_fry" and len(state) != 2:
        raise unsupported(instr, "rng_three_fry needs a u64[2] state")
    if out.dtype.is_pred or out.dtype.bits not in (8, 16, 32, 64):
        raise unsupported(instr, f"cannot generate bits of type {out.dtype}")
    with np.errstate(over="ignore"):
        new_state, bits = gen(state, out.dims, out.dtype.bits)
    return new_state, np.asarray(bits).view(out.dtype.np)
