"""rng-bit-generator as C: XLA's Threefry-2x32 and Philox-4x32 bit generators, bit for bit.

The same algorithms as the interpreter (`backends/interpreter/rng.py`, after XLA's
rng_bit_generator_expander.cc and prng.cc). The state is u64[N]: state[0] is the key, the rest
the counter. Outputs: (new state, bits).

* rng_three_fry (u64[2] state): Threefry-2x32, 20 rounds, on the 64-bit counter + i. 64-bit
  outputs join the two words of block i into element i. 32-bit (and narrower, truncated) outputs
  split the shape along its first even dimension (else its largest, lowest index first) into
  halves of ceil(d/2): block b gives the elements 2h and 2h+1 of that dimension (the second
  dropped past an odd end). The counter advances by the number of blocks.
* rng_philox / rng_default: Philox-4x32, 10 rounds, on a 128-bit counter (state[1], state[2];
  for a u64[2] state, low word state[1] and high word state[0]); the words of block b are
  elements 4b..4b+3 (32-bit) or, joined in pairs, 2b and 2b+1 (64-bit).

Conditions enforced (LibraryOpError otherwise): a (u64[N >= 2], bits) result, a u64[2] state for
three_fry, and 8/16/32/64-bit non-pred bits.
"""

from __future__ import annotations

import math

from hlofuse.backends.cpu.ctext import comment
from hlofuse.backends.cpu.library.errors import LibraryOpError
from hlofuse.backends.kernel_ir.libop import LibOp
from hlofuse.ir.shape import ArrayShape, TupleShape

_HELPERS = r"""
#ifndef HFLIB_RNG
#define HFLIB_RNG
#include <stdint.h>
static inline uint32_t hflib_rotl32(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }

/* Threefry-2x32, 20 rounds (prng.cc ThreeFry2x32): (x0, x1) -> (y0, y1) under key (k0, k1). */
static inline void hflib_threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1,
                                      uint32_t *y0, uint32_t *y1) {
    static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
    const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
    x0 += ks[0];
    x1 += ks[1];
    for (int i = 1; i <= 5; i++) {
        const int *r = rot[(i - 1) % 2];
        for (int j = 0; j < 4; j++) {
            x0 += x1;
            x1 = hflib_rotl32(x1, r[j]);
            x1 ^= x0;
        }
        x0 += ks[i % 3];
        x1 += ks[(i + 1) % 3] + (uint32_t)i;
    }
    *y0 = x0;
    *y1 = x1;
}

/* Philox-4x32, 10 rounds (prng.cc Philox4x32): x[4] in place under key (k0, k1). */
static inline void hflib_philox4x32(uint32_t k0, uint32_t k1, uint32_t x[4]) {
    for (int i = 0; i < 10; i++) {
        const uint64_t p0 = (uint64_t)x[0] * 0xD2511F53u;
        const uint64_t p1 = (uint64_t)x[2] * 0xCD9E8D57u;
        const uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k0, y1 = (uint32_t)p1;
        const uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k1, y3 = (uint32_t)p0;
        x[0] = y0; x[1] = y1; x[2] = y2; x[3] = y3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}
#endif
"""

_ALGORITHMS = ("rng_three_fry", "rng_philox", "rng_default")


def _threefry(n_state: int, dims: tuple[int, ...], bits: int, out_t: str) -> list[str]:
    lines = [
        "const uint64_t key = state[0], counter = state[1];",
        "const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);",
    ]
    size = math.prod(dims)
    if bits == 64:
        lines += [
            f"for (int64_t i = 0; i < {size}; i++) {{",
            "    const uint64_t c = counter + (uint64_t)i;",
            "    uint32_t y0, y1;",
            "    hflib_threefry2x32(k0, k1, (uint32_t)c, (uint32_t)(c >> 32), &y0, &y1);",
            f"    out[i] = ({out_t})((uint64_t)y0 | (uint64_t)y1 << 32);",
            "}",
            f"new_state[1] = counter + {size}u;",
        ]
        return lines
    if not dims:
        lines += [
            "uint32_t y0, y1;",
            "hflib_threefry2x32(k0, k1, (uint32_t)counter, (uint32_t)(counter >> 32), &y0, &y1);",
            f"out[0] = ({out_t})y0;",
            "new_state[1] = counter + 1u;",
        ]
        return lines
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    d = dims[split]
    half = (d + 1) // 2
    post = math.prod(dims[split + 1 :])
    blocks = math.prod(dims[:split]) * half * post
    if blocks == 0:
        return [*lines, "new_state[1] = counter;"]
    lines += [
        comment(f"dimension {split} ({d}) in halves of {half}: block b -> elements 2h, 2h+1"),
        f"for (int64_t b = 0; b < {blocks}; b++) {{",
        "    const uint64_t c = counter + (uint64_t)b;",
        "    uint32_t y0, y1;",
        "    hflib_threefry2x32(k0, k1, (uint32_t)c, (uint32_t)(c >> 32), &y0, &y1);",
        f"    const int64_t pre = b / {half * post}, h = b / {post} % {half}, q = b % {post};",
        f"    const int64_t at = (pre * {d} + 2 * h) * {post} + q;",
        f"    out[at] = ({out_t})y0;",
        f"    if (2 * h + 1 < {d}) out[at + {post}] = ({out_t})y1;",
        "}",
        f"new_state[1] = counter + {blocks}u;",
    ]
    return lines


def _philox(n_state: int, dims: tuple[int, ...], bits: int, out_t: str) -> list[str]:
    size = math.prod(dims)
    per_block = 2 if bits == 64 else 4
    blocks = (size + per_block - 1) // per_block
    hi = "state[2]" if n_state >= 3 else "state[0]"
    lines = [
        "const uint64_t key = state[0];",
        "const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);",
        f"const uint64_t lo = state[1], hi = {hi};  /* the 128-bit counter */",
        f"for (int64_t b = 0; b < {blocks}; b++) {{",
        "    const uint64_t c_lo = lo + (uint64_t)b;",
        "    const uint64_t c_hi = c_lo < lo ? hi + 1u : hi;  /* carry */",
        "    uint32_t x[4] = {(uint32_t)c_lo, (uint32_t)(c_lo >> 32), (uint32_t)c_hi,",
        "                     (uint32_t)(c_hi >> 32)};",
        "    hflib_philox4x32(k0, k1, x);",
    ]
    if bits == 64:
        lines += [
            "    const uint64_t w[2] = {(uint64_t)x[0] | (uint64_t)x[1] << 32,",
            "                           (uint64_t)x[2] | (uint64_t)x[3] << 32};",
            f"    for (int j = 0; j < 2 && 2 * b + j < {size}; j++) out[2 * b + j] = w[j];",
        ]
    else:
        lines.append(
            f"    for (int j = 0; j < 4 && 4 * b + j < {size}; j++) out[4 * b + j] = ({out_t})x[j];"
        )
    lines += [
        "}",
        f"const uint64_t new_lo = lo + {blocks}u;",
        "new_state[1] = new_lo;",
    ]
    if n_state >= 3:
        lines.append("new_state[2] = hi + (new_lo < lo ? 1u : 0u);")
        lines += [f"new_state[{i}] = state[{i}];" for i in range(3, n_state)]
    return lines


def emit_rng_bit_generator(
    op: LibOp, ins: list[str], outs: list[str], names: set[str]
) -> tuple[str, str]:
    """(helper definitions, statements) for rng-bit-generator: outs = (new state, bits)."""
    shape = op.shape
    if not (isinstance(shape, TupleShape) and len(shape.elements) == 2 and len(outs) == 2):
        raise LibraryOpError(op, "rng-bit-generator returns a (state, bits) tuple")
    state_shape, out = shape.elements
    algorithm = str(op.attr("algorithm", "rng_default"))
    if algorithm not in _ALGORITHMS:
        raise LibraryOpError(op, f"unknown algorithm {algorithm!r}")
    if not (isinstance(state_shape, ArrayShape) and state_shape.dtype.name == "u64"
            and state_shape.rank == 1 and state_shape.dims[0] >= 2):
        raise LibraryOpError(op, f"the state must be u64[N] with N >= 2, got {state_shape}")
    n_state = state_shape.dims[0]
    if algorithm == "rng_three_fry" and n_state != 2:
        raise LibraryOpError(op, "rng_three_fry needs a u64[2] state")
    assert isinstance(out, ArrayShape)
    bits = out.dtype.bits
    if out.dtype.is_pred or bits not in (8, 16, 32, 64):
        raise LibraryOpError(op, f"cannot generate bits of type {out.dtype}")
    out_t = f"uint{bits}_t"  # the bits, whatever the element type (a bit-level view)
    gen = _threefry if algorithm == "rng_three_fry" else _philox
    body = [
        comment(f"rng-bit-generator: {algorithm} bits for {out}"),
        f"const uint64_t *state = (const uint64_t *)({ins[0]});",
        f"uint64_t *new_state = (uint64_t *)({outs[0]});",
        f"{out_t} *out = ({out_t} *)({outs[1]});",
        "new_state[0] = state[0];",
        *gen(n_state, out.dims, bits, out_t),
    ]
    return _HELPERS, "{\n" + "\n".join("    " + line for line in body) + "\n}\n"
